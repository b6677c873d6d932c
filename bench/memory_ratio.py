"""The checker's memory per device against XLA's, family by strategy, on 4 virtual devices.

Run ``python bench/memory_ratio.py`` from the repository root. For the
families of the gradient matrix (tests/backends/grad_matrix_worker.py: a CNN with batch norm, GPT,
LLaMA, a Mixtral MoE, at small sizes) under dp, fsdp, tp and fsdp+tp, it compiles `lbdl train`'s
own step (Adam, the state donated) and prints, per device, XLA's ``memory_analysis()`` total
(temporaries + arguments + outputs − what donation aliases) beside ``--check``'s total, and
their ratio, as a Markdown table (docs/scaling.md quotes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PER_DEVICE = 4

WORKER = r"""
import json, sys
name, per = sys.argv[1], int(sys.argv[2])
sys.argv[1:] = ["4"]  # the matrix worker's own argument: its devices, set before JAX starts
sys.path.insert(0, "tests/backends")
from grad_matrix_worker import FAMILIES, mesh_of
import jax
import numpy as np, optax
import lbdl_dsl
from lbdl_dsl.backends.jax.distributed import Processes
from lbdl_dsl.compiler.memory import per_device
from lbdl_dsl.training.datasets import open_data
from lbdl_dsl.training.devices import Mesh
from lbdl_dsl.training.loader import Loader, Position
from lbdl_dsl.training.signature import signature
from lbdl_dsl.training.step import make_train_step
from lbdl_dsl.training.tasks import choose
spec, sizes, kind = FAMILIES[name]
sizes = dict(sizes) | ({} if kind == "image" else {"T": 32})
model = lbdl_dsl.compile("specs/" + spec, **sizes)
sig = signature(model); task = choose(sig)
tx = optax.adam(1e-3)
out = {}
for strategy in ("dp", "fsdp", "tp", "fsdp+tp"):
    mesh, shard = mesh_of(strategy, 4, kind == "image")
    devices = Mesh(mesh, tuple(shard), Processes(0, 1, "single process")).place(model)
    layout = devices.parallel.sharded.layout
    batch = PER = per * layout.batch_pieces
    data = open_data("synthetic", sig, task, 0)
    host = Loader(data.train, batch, 0).batch_at(Position())
    ts = devices.init_state(model, tx, 0)
    step = make_train_step(model, task, tx, lambda s: 1e-3)
    sharded = devices.parallel.sharded
    leaves, tree = jax.tree.flatten(host)
    shardings = jax.tree.unflatten(tree, [sharded.batch(np.ndim(x)) for x in leaves])
    jitted = sharded.jit_step(step, devices.parallel.state_shardings(ts, tx), shardings)
    m = jitted.lower(ts, devices.put(host)).compile().memory_analysis()
    xla = m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
    xla -= m.alias_size_in_bytes
    whole, _ = per_device(model.checked, layout, [], optimizer="adam", batch=per)
    out[strategy] = {"xla": int(xla), "checker": int(whole.total.as_int())}
print(json.dumps(out))
"""


def measure(family: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("JAX_NUM_CPU_DEVICES", None)
    args = [sys.executable, "-c", WORKER, family, str(PER_DEVICE)]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    print("| family | strategy | XLA total per device | `--check` total | XLA ÷ checker |")
    print("|---|---|---|---|---|")
    for family in ("cnn", "gpt", "llama", "moe"):
        for strategy, m in measure(family).items():
            kib = 1024
            print(f"| {family} | {strategy} | {m['xla'] / kib:.1f} KiB | "
                  f"{m['checker'] / kib:.1f} KiB | {m['xla'] / m['checker']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
