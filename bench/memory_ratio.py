"""The checker's memory per device against XLA's, family by strategy, on 2, 4 and 8 virtual devices.

Run ``python bench/memory_ratio.py [DEVICES...]`` from the repository root (default: 2 4 8;
``--family F`` and ``--strategy S``, each repeatable, measure only those). For the
families of the gradient matrix (tests/backends/grad_matrix_worker.py: a CNN with batch norm, GPT,
LLaMA, a Mixtral MoE, at small sizes) under dp, fsdp, tp and fsdp+tp, it compiles `lbdl train`'s
own step (Adam, the state donated) and prints, per device, XLA's ``memory_analysis()`` total
(temporaries + arguments + outputs − what donation aliases) beside ``--check``'s total, and
their ratio, as a Markdown table (docs/scaling.md quotes it).

``python bench/memory_ratio.py --peak FAMILY STRATEGY DEVICES`` says what XLA holds at its
peak instead: the buffers live then (from XLA's own dump of its buffer assignment), summed by
what made them: the step's arguments, the forward pass (values kept for the backward pass),
the backward pass's computation again of a checkpointed copy, the backward pass, the
collectives, the rest (the optimiser's update).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PER_DEVICE = 4
FAMILIES = ("cnn", "gpt", "llama", "moe")
STRATEGIES = ("dp", "fsdp", "tp", "fsdp+tp")

WORKER = r"""
import json, sys
name, per, n, only = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
sys.argv[1:] = [n]  # the matrix worker's own argument: its devices, set before JAX starts
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
sig = signature(model.checked); task = choose(sig)
tx = optax.adam(1e-3)
out = {}
for strategy in only or ("dp", "fsdp", "tp", "fsdp+tp"):
    mesh, shard = mesh_of(strategy, int(n), kind == "image")
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


def measure(family: str, devices: int, strategies: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("JAX_NUM_CPU_DEVICES", None)
    args = [sys.executable, "-c", WORKER, family, str(PER_DEVICE), str(devices), *strategies]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def peak(folder: Path) -> Counter:
    """Bytes live at the peak of the training step's buffer assignment, by what made them."""
    ranges = next(folder.glob("*train_step*live-range.txt")).read_text()
    hlo = next(folder.glob("*train_step.cpu_after_optimizations.txt")).read_text()
    made = {}
    for m in re.finditer(r"^\s*(?:ROOT )?%?([\w.\-]+) = \S+ ([\w\-]+)\(.*?$", hlo, re.M):
        op = re.search(r'op_name="([^"]*)"', m.group(0))
        made[m.group(1)] = (m.group(2), op.group(1) if op else "")
    out: Counter = Counter()
    for name, size in re.findall(
        r"^\s+([\w.\-]+)\{[\d,]*\}: (\d+) bytes", ranges.split("(peak):")[1], re.M
    ):
        kind, op = made.get(name, ("", ""))
        op = op.replace("jit(train_step)/", "")
        if kind == "parameter":
            what = "arguments"
        elif kind in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
            what = "collectives"
        elif "rematted_computation" in op:
            what = "forward computed again"
        elif op.startswith("transpose("):
            what = "backward"
        elif op.startswith("jvp("):
            what = "forward, kept"
        else:
            what = "rest"
        out[what] += int(size)
    return out


def show_peak(family: str, strategy: str, devices: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={folder}"
        env = dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS=flags)
        env.pop("JAX_NUM_CPU_DEVICES", None)
        args = [sys.executable, "-c", WORKER, family, str(PER_DEVICE), str(devices), strategy]
        done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        for what, size in peak(Path(folder)).most_common():
            print(f"{what:24} {size / 1024:8.1f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("devices", nargs="*", type=int, default=[2, 4, 8])
    parser.add_argument("--family", action="append", choices=FAMILIES, help="only these")
    parser.add_argument("--strategy", action="append", choices=STRATEGIES, help="only these")
    parser.add_argument("--peak", nargs=3, metavar=("FAMILY", "STRATEGY", "DEVICES"))
    args = parser.parse_args()
    if args.peak:
        show_peak(args.peak[0], args.peak[1], int(args.peak[2]))
        return
    print(
        "| family | strategy | devices | XLA total per device | `--check` total | XLA ÷ checker |"
    )
    print("|---|---|---|---|---|---|")
    for family in args.family or FAMILIES:
        for devices in args.devices:
            for strategy, m in measure(family, devices, args.strategy or []).items():
                xla, ours = m["xla"] / 1024, m["checker"] / 1024
                cells = (family, strategy, devices, f"{xla:.1f} KiB", f"{ours:.1f} KiB")
                print("| " + " | ".join(map(str, cells)) + f" | {xla / ours:.2f} |", flush=True)


if __name__ == "__main__":
    main()
