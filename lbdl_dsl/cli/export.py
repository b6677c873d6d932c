"""``lbdl export SPEC --format stablehlo|mlir|onnx``: the model for serving stacks
(`lbdl_dsl.interop.export`), checked against the JAX model on example inputs."""

from __future__ import annotations

import argparse
import sys

from lbdl_dsl.cli import common

# The formats `lbdl_dsl.interop.exporter` writes, named here so that `--help` needs no NumPy.
FORMATS = ("stablehlo", "mlir", "onnx")
EXTRAS = ("jax",)  # and `onnx` for --format onnx
HELP = "write a spec's model as StableHLO (jax.export) or ONNX, and check it runs the same"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_spec_arguments(p)
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="stablehlo (jax.export's serialized module), mlir (its text), onnx "
        "(needs the onnx extra); default: from the output's suffix, else stablehlo",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="default: build/SPEC/MODEL.FORMAT")
    p.add_argument(
        "--weights",
        metavar="FILE",
        help="parameters to bake in (from `lbdl import`, `lbdl train`, `model.save`); "
        "default: init's random ones",
    )
    p.add_argument(
        "--params",
        choices=("baked", "inputs"),
        default="baked",
        help="parameters baked into the file as constants (default) or taken as inputs",
    )
    p.add_argument("--batch", type=int, default=None, help="a fixed batch size (default: symbolic)")
    p.add_argument("--seed", type=int, default=0, help="init's seed, without --weights")
    p.add_argument(
        "--fold",
        action="store_true",
        help="onnx: fold each batchnorm into the convolution before it (as torch.onnx.export)",
    )
    p.add_argument(
        "--inline",
        action="store_true",
        help="onnx: write block calls inline rather than as local functions named by the block",
    )
    p.add_argument(
        "--output-names",
        metavar="NAME,...",
        help="onnx: the outputs' names, in the spec's order (default: the spec's, in ASCII: "
        "Ŷ is Y_hat)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip running the exported file against the JAX model",
    )


def run(args: argparse.Namespace) -> int:
    overrides = common.parse_overrides(args.set, args.parser)

    def work() -> int:
        from lbdl_dsl.interop.exporter import export

        result = export(
            args.spec,
            args.output,
            format=args.format,
            weights=args.weights,
            params=args.params,
            batch=args.batch,
            overrides=overrides,
            seed=args.seed,
            verify=not args.no_verify,
            fold=args.fold,
            functions=not args.inline,
            output_names=args.output_names.split(",") if args.output_names else None,
        )
        for line in result.lines():
            print(line, file=sys.stderr)
        return 0

    return common.guarded(work, args.spec)
