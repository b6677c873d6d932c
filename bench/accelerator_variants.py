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
  and compiled and ran faster; on the H100, keeping every residual through the checkpoint
  (``no-remat``) planned 7.3 GiB against the peer's 5.0, so the runtime keeps the checkpoint
  there until this variant says otherwise;
* ``plain-conv``: every convolution as ``jax.lax.conv_general_dilated`` with JAX's own
  gradient rules (ResNet-50 only). The runtime's ``conv`` computes 1×1 convolutions as matrix
  products and writes its gradients as channels-last convolutions, both measured on XLA:CPU
  (docs/performance.md); on a GPU cuDNN may do better with the plain ones, and ResNet-50's
  GPU compile (1.46 to 1.63× the peer's) and training step (1.13×) are where to look.

Each figure: compile seconds (in one process, so later compiles skip autotuning: only a
rough guide), the median of 10 steps, XLA's planned memory (GiB) and TFLOP/s. The figures are
written as JSON; bench/accelerator.py puts them in docs/performance-gpu.md when
docs/performance-gpu-variants.json holds them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from bench import accelerator, harness, memory, run  # noqa: E402
from lbdl_dsl.backends.jax import runtime  # noqa: E402

VARIANTS = {
    "gpt": ("no-remat", "unroll", "no-fused"),
    "resnet50": ("no-remat", "plain-conv", "cpu-copies"),
}


def plain_conv(
    x: Any,
    w: Any,
    b: Any = None,
    *,
    stride: tuple | None = None,
    padding: Any = None,
    dilation: tuple | None = None,
    groups: int = 1,
) -> Any:
    """The runtime's ``conv`` (same arguments, same function) as one plain convolution."""
    n = x.ndim - 2
    stride, dilation = tuple(stride or (1,) * n), tuple(dilation or (1,) * n)
    padding = ((0, 0),) * n if padding is None else padding
    if not isinstance(padding, str):
        padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    y = jax.lax.conv_general_dilated(
        x,
        w,
        window_strides=stride,
        padding=padding,
        rhs_dilation=dilation,
        dimension_numbers=runtime.conv_dimension_numbers(n),
        feature_group_count=groups,
    )
    return y if b is None else y + runtime.trailing(b, y.ndim)


def variant(case: accelerator.Case, name: str, x: Any, y: Any) -> run.Side:
    """Our side of ``case``, lowered the way ``name`` says."""
    model = accelerator.our_model(dataclasses.replace(case, unroll=name == "unroll"))
    if name == "no-fused":  # the module's mha looks the function up when it runs
        model.module["fused_attention"] = lambda *a, **k: None
    if name == "no-remat":
        model.module["keep_products"] = jax.checkpoint_policies.everything_saveable
    if name == "plain-conv":
        model.module["conv"] = plain_conv
    if name == "cpu-copies":  # each copy one jitted function, no checkpoint, as on a CPU
        model.module["checkpoint_copies"] = lambda remat_on_cpu: remat_on_cpu
    params, state = model.init(jax.random.key(run.KEY))
    return run.our_side_of(model, case.base, x, y, params, state)


def measure(case: accelerator.Case) -> dict[str, dict[str, float]]:
    ours, peer = accelerator.sides(case)
    x, y = peer.train_args[2:]
    x = accelerator.image_as_declared(x)
    flops = 6 * accelerator.macs_per_sample(case) * case.base.batch
    sides = {"peer": peer, "ours": ours}
    sides.update({name: variant(case, name, x, y) for name in VARIANTS[case.base.kind]})
    out = {}
    for name, side in sides.items():
        compiler = run.Compiler(*side.of("train"))
        seconds = compiler()
        steady, _ = harness.time_steady(compiler.executable, *side.train_args, warmup=3, repeat=10)
        out[name] = {
            "compile": seconds,
            "steady": steady,
            "GiB": memory.planned(compiler.executable)["total"] / 2**30,
            "tflops": flops / steady / 1e12,
        }
        print(case.key, name, out[name], file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="bench/accelerator.py's tiny models")
    parser.add_argument("--out", type=Path, help="where to write the figures (JSON)")
    args = parser.parse_args(argv)
    keys = ("gpt", "resnet50") if args.quick else ("gpt2-medium-16", "resnet50")
    chosen = [c for c in accelerator.cases(args.quick) if c.key in keys]
    record = {
        "command": "python bench/accelerator_variants.py" + (" --quick" if args.quick else ""),
        "kind": jax.devices()[0].device_kind,
        "cases": {case.name: measure(case) for case in chosen},
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


if __name__ == "__main__":
    main()
