"""``lbdl from-hf DIR [-o NAME.lbdl]``: a Hugging Face checkpoint folder as a spec in the
language and its parameters (`lbdl_dsl.interop.hf`)."""

from __future__ import annotations

import argparse

DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
EXTRAS = ("jax",)
HELP = "write the spec of a Hugging Face checkpoint folder, and its parameters beside it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", metavar="DIR", help="config.json with model.safetensors (or shards)")
    p.add_argument(
        "-o",
        "--output",
        metavar="NAME.lbdl",
        help="the spec to write (default build/FOLDER.lbdl); the parameters go beside it as "
        "NAME.safetensors",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing spec or parameters file that lbdl from-hf did not write",
    )


def run(args: argparse.Namespace) -> int:
    from lbdl_dsl.cli import common

    def work() -> int:
        from lbdl_dsl.interop.hf import write

        spec, written = write(args.folder, args.output, force=args.force)
        stored = "/".join(DTYPES.get(d, d) for d in spec.dtypes)
        print(
            f"{spec.folder}: {spec.model_type}, {spec.tensors} tensors of {stored}, "
            f"{spec.params:,} parameters"
        )
        if spec.left_out:
            shown = ", ".join(spec.left_out[:4]) + (", ..." if len(spec.left_out) > 4 else "")
            print(f"left out {len(spec.left_out)} tensors the spec does not hold: {shown}")
        print(f"wrote {written[0]} (model {spec.name}, through --map {spec.family})")
        print(f"wrote {written[1]} (--params)")
        for extra in written[2:]:
            print(f"wrote {extra} (--labels)")
        return 0

    return common.guarded(work, args.folder)
