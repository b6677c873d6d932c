"""``lbdl import SPEC WEIGHTS --map FAMILY -o params.safetensors``: a reference checkpoint's
weights as a spec's parameters (`lbdl_dsl.interop.import_weights`)."""

from __future__ import annotations

import argparse
import sys

from lbdl_dsl.cli import common

EXTRAS = ("jax",)
HELP = "fill a spec's parameters from a PyTorch / Hugging Face checkpoint (--map gpt2|resnet|...)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_spec_arguments(p)
    p.add_argument(
        "weights",
        help="the checkpoint: .safetensors, .pt/.pth/.bin (needs torch), a Hugging Face "
        "*.index.json or model folder",
    )
    p.add_argument(
        "--map",
        required=True,
        metavar="FAMILY",
        help="which names go where: a family such as gpt2, llama, mistral, mixtral, resnet, "
        "vit, bert (an unknown one is refused with the list)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="where to write the parameters (.safetensors, read by `model.load`)",
    )
    p.add_argument(
        "--allow-unused",
        action="store_true",
        help="import even when some of the checkpoint's tensors fill no parameter",
    )


def run(args: argparse.Namespace) -> int:
    overrides = common.parse_overrides(args.set, args.parser)

    def work() -> int:
        from lbdl_dsl.interop.importer import import_weights

        result = import_weights(
            args.spec,
            args.weights,
            args.map,
            output=args.output,
            overrides=overrides,
            allow_unused=args.allow_unused,
        )
        for line in result.lines():
            print(line, file=sys.stderr)
        return 0

    return common.guarded(work, args.spec)
