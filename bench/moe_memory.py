"""The MoE dispatch's memory per device as the devices grow, at a fixed per-device batch.

Run ``python bench/moe_memory.py`` from the repository root. For a Mixtral-shaped small model
(one block, D=64, 8 experts of width 128, 2 active, T tokens a sample) under ``dp`` on 1, 2, 4
and 8 virtual CPU devices, each with 2 samples, it compiles a training step's gradient and
prints XLA's ``memory_analysis()`` per device (temporaries, and the total with arguments and
outputs) as a Markdown table: what docs/scaling.md quotes. Each count of devices runs in a
process of its own (virtual devices are set before JAX starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = {"N": 1, "D": 64, "H": 4, "KV": 2, "F": 128, "E": 8, "V": 256}
PER_DEVICE, T = 2, 256

WORKER = """
import json, sys, jax
n = int(sys.argv[1]); T = int(sys.argv[2]); per = int(sys.argv[3]); sizes = json.loads(sys.argv[4])
jax.config.update("jax_num_cpu_devices", n)
import jax.numpy as jnp, numpy as np
import lbdl_dsl
from lbdl_dsl.backends.jax.sharding import Sharded
model = lbdl_dsl.compile("specs/mixtral-8x7b.lbdl", **sizes)
def loss(params, state, x):
    p, _ = model.apply(params, state, x, train=True, key=jax.random.PRNGKey(0))
    logp = jax.nn.log_softmax(p[:, :-1], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, x[:, 1:, None], axis=-1))
sharded = Sharded.of(model, f"data={n}", ["dp"])
params, state = sharded.init(model, jax.random.PRNGKey(0))
x = np.zeros((per * n, T), np.int32)
(xs,) = sharded.put_batch([x])
m = jax.jit(jax.grad(loss)).lower(params, state, xs).compile().memory_analysis()
total = m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
print(json.dumps({"temp": m.temp_size_in_bytes, "total": total}))
"""


def measure(n: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("JAX_NUM_CPU_DEVICES", None)
    args = [sys.executable, "-c", WORKER, str(n), str(T), str(PER_DEVICE), json.dumps(SIZES)]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    print("| devices | global batch | XLA temporaries per device | XLA total per device |")
    print("|---|---|---|---|")
    for n in (1, 2, 4, 8):
        m = measure(n)
        mib = 2**20
        print(f"| {n} | {PER_DEVICE * n} × {T} | {m['temp'] / mib:.2f} MiB | "
              f"{m['total'] / mib:.2f} MiB |")  # fmt: skip


if __name__ == "__main__":
    main()
