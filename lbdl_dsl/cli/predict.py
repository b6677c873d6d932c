"""``lbdl predict SPEC --params P INPUT... [--top-k K] [--labels FILE]``: a classifier's
likeliest classes for each input (``.npz`` arrays or images, `lbdl_dsl.interop.samples`)."""

from __future__ import annotations

import argparse
from typing import Any

EXTRAS = ("jax", "data")
HELP = "a classifier's top classes for .npz arrays or image files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lbdl_dsl.cli import common

    common.add_spec_arguments(p)
    p.add_argument(
        "--params",
        required=True,
        metavar="P",
        help="the parameters: a .safetensors/.npz file, a run folder of `lbdl train`, or a "
        "Hugging Face checkpoint folder",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=".npz arrays or image files")
    p.add_argument(
        "--top-k", type=common.positive, default=5, metavar="K", help="classes shown (5)"
    )
    p.add_argument("--labels", metavar="FILE", help="the class names, one a line")
    p.add_argument("--output", metavar="NAME", help="the output to read (several outputs)")


def run(args: argparse.Namespace) -> int:
    from lbdl_dsl.cli import common

    overrides = common.parse_overrides(args.set, args.parser)

    def work() -> int:
        import lbdl_dsl
        from lbdl_dsl.interop import samples
        from lbdl_dsl.training.evaluate import load_params, run_facts
        from lbdl_dsl.training.signature import signature

        run = run_facts(args.params, args.spec)  # a run folder's --set values
        model = lbdl_dsl.compile(args.spec, dtype=run.dtype, **{**run.overrides, **overrides})
        name = _classifier(model, args.output)
        classes = model.outputs[name][-1]
        names = samples.labels(args.labels, classes)
        params, state = load_params(model, args.params)
        vocab = {k: t.vocab for k, t in signature(model.checked).inputs.items() if t.vocab}
        batch = samples.read(args.inputs, model.inputs, vocab)
        probs = model.predict(params, state, *batch.arrays.values(), output=name)
        width = max(len(n) for n in names)
        for sample, best in zip(batch.names, samples.top(probs, args.top_k), strict=True):
            print(sample)
            for i, p in best:
                print(f"  {names[i]:<{width}}  {p:7.2%}")
        return 0

    return common.guarded(work, args.spec)


def _classifier(model: Any, wanted: str | None) -> str:
    """The output holding class scores: ``wanted``, or the only output, of one axis."""
    from lbdl_dsl.core.errors import LbdlError

    outputs = model.outputs
    if wanted is None and len(outputs) > 1:
        raise LbdlError(
            f"the spec has {len(outputs)} outputs: {', '.join(outputs)}",
            None,
            hint="name the one holding class scores with --output NAME",
        )
    name = wanted or next(iter(outputs))
    if name not in outputs:
        raise LbdlError(
            f"--output: the spec has no output `{name}`",
            None,
            hint=f"its outputs: {', '.join(outputs)}",
        )
    if len(outputs[name]) != 1:
        shape = "×".join(map(str, outputs[name]))
        raise LbdlError(
            f"predict is for classifiers, whose output is one score per class; output {name} "
            f"is {shape} per sample",
            None,
            hint="a token model writes text with `lbdl generate`",
        )
    return name
