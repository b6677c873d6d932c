"""Where lbdl's training step loses time to Flax's on an accelerator: the same model lowered
other ways, each against the peer in one process (issue 19's GPU rows).

``python bench/accelerator_variants.py [--quick] [--out JSON]`` takes bench/accelerator.py's
GPT-2 medium (batch 16) and ResNet-50 (batch 128) and times one training step of:

* ``peer``: the hand-written Flax model;
* ``ours``: lbdl's module as generated (a long ×N group scanned, each copy's backward pass
  recomputing what ``keep_products`` does not keep);
* ``no-remat``: the same, keeping everything (``jax.checkpoint_policies.everything_saveable``);
* ``unroll``: ``--unroll``, a Python loop of copies with no checkpoint (GPT only: ResNet-50's
  groups are short and already straight-line code);
* ``no-fused``: attention by lbdl's einsum instead of cuDNN's fused kernel (GPT only);
* ``cpu-copies``: a group of convolutions' copies as a CPU runs them (``remat_on_cpu``): one
  jitted function, no checkpoint (ResNet-50 only). On XLA:CPU that planned the same memory
  and compiled and ran faster; on an H200 it ran ResNet-50's step in 29.4 ms against 31.1
  (26.5 against 31.4 with the CPU's convolutions) but planned 5.02 GiB (5.06) against the
  peer's 4.96, so the runtime keeps the checkpoint there;
* ``cpu-conv``: every convolution as the runtime computes it on a CPU (1×1 kernels as matrix
  products, the gradients as channels-last convolutions, `runtime/conv.py`) rather than as one
  ``jax.lax.conv_general_dilated`` with JAX's own rules, which the runtime does off a CPU
  (ResNet-50 only; on an H200 the CPU's way compiled in 23.6 s against 16.2 s, and ran no
  faster);
* ``cpu-conv-copies``: both of the last two at once, ResNet-50 as a CPU runs it (ResNet-50
  only);
* ``two-pass``: each batch norm's mean and variance in two passes over the batch, as on a CPU
  (`runtime/norm.py`'s `batch_statistics`; ResNet-50 only).

Each figure: compile seconds (in one process, so later compiles skip autotuning: only a
rough guide), the median of 10 steps, XLA's planned memory (GiB) and TFLOP/s. With
``--fresh-compile``, each side's training step is also compiled in a fresh process of its own
(``fresh_compile``), the figure to set against the peer's. ``--only`` picks the models by key
and ``--variants`` the sides (``peer``, ``ours`` and the variants' names), so that a short
device session measures what it came for. The figures are written as JSON after each side;
bench/accelerator.py puts every ``docs/performance-gpu-variants*.json`` in
docs/performance-gpu.md, each run under its device's name.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from bench import accelerator, choose, harness, memory, run  # noqa: E402

VARIANTS = {
    "gpt": ("no-remat", "unroll", "no-fused"),
    "resnet50": ("no-remat", "cpu-conv", "cpu-copies", "cpu-conv-copies", "two-pass"),
}
CASES = ("gpt2-medium-16", "resnet50")
QUICK_CASES = ("gpt", "resnet50")


def variant(case: accelerator.Case, name: str, x: Any, y: Any, shapes: bool = False) -> run.Side:
    """Our side of ``case``, lowered the way ``name`` says (with ``shapes``, every argument a
    shape, all that compiling needs)."""
    model = accelerator.our_model(dataclasses.replace(case, unroll=name == "unroll"))
    if name == "no-fused":  # the module's mha looks the function up when it runs
        model.module["fused_attention"] = lambda *a, **k: None
    if name == "no-remat":
        model.module["keep_products"] = jax.checkpoint_policies.everything_saveable
    if name in ("cpu-conv", "cpu-conv-copies"):  # the module's conv looks this up
        model.module["plain_convolutions"] = lambda: False
    if name == "two-pass":  # each batch norm's statistics in two passes, as on a CPU
        model.module["one_pass_statistics"] = lambda: False
    if name in ("cpu-copies", "cpu-conv-copies"):  # one jitted function a copy, as on a CPU
        model.module["checkpoint_copies"] = lambda remat_on_cpu: remat_on_cpu
    init = jax.eval_shape if shapes else (lambda f, *a: f(*a))
    params, state = init(model.init, jax.random.key(run.KEY))
    return run.our_side_of(model, case.base, x, y, params, state)


def side_names(case: accelerator.Case, chosen: Sequence[str] | None) -> list[str]:
    """The sides to measure for ``case``: ``chosen``'s that apply to it, or all of them."""
    known = ["peer", "ours", *VARIANTS[case.base.kind]]
    return known if chosen is None else [n for n in known if n in chosen]


def fresh_compile(case: accelerator.Case, name: str, quick: bool) -> float:
    """Seconds to compile side ``name``'s training step in a fresh process, autotuning included
    (`accelerator.FreshCompiles` says why a process of its own)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.key, name]
    done = subprocess.run(
        cmd + (["--quick"] if quick else []), capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"compile ({case.key}, {name}) failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def compile_child(case: accelerator.Case, name: str) -> float:
    """`fresh_compile`'s child: this process's one compile of side ``name``."""
    theirs = accelerator.peer_side(case, shapes=True)
    if name == "peer":
        side = theirs
    else:
        x, y = theirs.train_args[2:]
        side = variant(case, name, accelerator.image_as_declared(x), y, shapes=True)
    return run.Compiler(*side.of("train"))()


def measure(
    case: accelerator.Case,
    names: Sequence[str],
    fresh: bool,
    quick: bool,
    saved: Callable[[dict[str, dict[str, float]]], None],
) -> dict[str, dict[str, float]]:
    """Each side's figures, ``saved`` after each (a run cut short keeps what it measured)."""
    out: dict[str, dict[str, float]] = {}
    if fresh:  # before this process autotunes anything
        for name in names:
            out[name] = {"fresh_compile": fresh_compile(case, name, quick)}
            print(case.key, name, out[name], file=sys.stderr, flush=True)
            saved(out)
    ours, peer = accelerator.sides(case)
    x, y = peer.train_args[2:]
    x = accelerator.image_as_declared(x)
    flops = 6 * accelerator.macs_per_sample(case) * case.base.batch
    for name in names:
        side = {"peer": peer, "ours": ours}.get(name) or variant(case, name, x, y)
        compiler = run.Compiler(*side.of("train"))
        seconds = compiler()
        steady, _ = harness.time_steady(compiler.executable, *side.train_args, warmup=3, repeat=10)
        out.setdefault(name, {}).update(
            {
                "compile": seconds,
                "steady": steady,
                "GiB": memory.planned(compiler.executable)["total"] / 2**30,
                "tflops": flops / steady / 1e12,
            }
        )
        print(case.key, name, out[name], file=sys.stderr, flush=True)
        saved(out)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="bench/accelerator.py's tiny models")
    parser.add_argument("--out", type=Path, help="where to write the figures (JSON)")
    parser.add_argument("--only", help="the models, by key (comma-separated)")
    parser.add_argument("--variants", help="the sides, by name (comma-separated; default all)")
    parser.add_argument(
        "--fresh-compile",
        action="store_true",
        help="also compile each side's training step in a fresh process",
    )
    parser.add_argument("--child", nargs=2, metavar=("KEY", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = {c.key: c for c in accelerator.cases(args.quick)}
    if args.child:
        print(compile_child(cases[args.child[0]], args.child[1]))
        return {}
    keys = QUICK_CASES if args.quick else CASES
    chosen = choose.chosen(parser, {k: cases[k] for k in keys}, args.only, keys)
    names = None
    if args.variants:
        names = [n.strip() for n in args.variants.split(",")]
        known = {"peer", "ours", *(v for vs in VARIANTS.values() for v in vs)}
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"--variants: no side {unknown[0]!r} (there are {', '.join(known)})")
    command = "python bench/accelerator_variants.py" + (" --quick" if args.quick else "")
    for flag in ("only", "variants"):
        command += f" --{flag} {getattr(args, flag)}" if getattr(args, flag) else ""
    command += " --fresh-compile" if args.fresh_compile else ""
    record: dict[str, Any] = {
        "command": command,
        "kind": jax.devices()[0].device_kind,
        "cases": {},
    }

    def saved(case: accelerator.Case) -> Callable[[dict[str, dict[str, float]]], None]:
        def save(figures: dict[str, dict[str, float]]) -> None:
            record["cases"][case.name] = figures
            if args.out:
                args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

        return save

    for case in chosen:
        names_here = side_names(case, names)
        measure(case, names_here, args.fresh_compile, args.quick, saved(case))
    return record


if __name__ == "__main__":
    main()
