"""``lbdl evaluate SPEC --params P --data NAME|FILE``: the loss, and accuracy or perplexity,
on the data ``lbdl train`` reads (`lbdl_dsl.training.evaluate`)."""

from __future__ import annotations

import argparse

EXTRAS = ("jax", "train", "data")
HELP = "loss and accuracy (or perplexity) of trained parameters on data"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lbdl_dsl.cli import common
    from lbdl_dsl.training.config import TASKS

    common.add_spec_arguments(p)
    p.add_argument(
        "--params",
        required=True,
        metavar="P",
        help="the parameters: a .safetensors/.npz file, a run folder of `lbdl train`, or a "
        "Hugging Face checkpoint folder",
    )
    p.add_argument(
        "--data",
        required=True,
        metavar="NAME|FILE",
        help="digits, shakespeare, synthetic, or a .npz/.txt file (its test split if it has one)",
    )
    p.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        metavar="TASK",
        help=f"the loss, as lbdl train's: {', '.join(TASKS)} (default: auto)",
    )
    p.add_argument("--target", metavar="OUTPUT", help="the output the loss reads")
    p.add_argument("--batch", type=common.positive, default=32, help="samples per step (32)")
    p.add_argument(
        "--samples", type=common.positive, metavar="N", help="evaluate N samples (default: all)"
    )
    p.add_argument(
        "--tokenizer",
        metavar="FILE",
        help="a tokenizer.json that numbers text data (default: a checkpoint folder's)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from lbdl_dsl.cli import common

    overrides = common.parse_overrides(args.set, args.parser)

    def work() -> int:
        import json
        from pathlib import Path

        import lbdl_dsl
        from lbdl_dsl.interop import text
        from lbdl_dsl.training.evaluate import load_params, measure, run_facts

        run = run_facts(args.params, args.spec)  # a run folder's --set values and vocabulary
        model = lbdl_dsl.compile(args.spec, dtype=run.dtype, **{**run.overrides, **overrides})
        params, state = load_params(model, args.params)
        numbered = args.tokenizer or run.tokenizer  # text data, as a checkpoint's model reads it
        tokenizer = text.Pretrained(Path(numbered)) if numbered else None
        result = measure(
            model,
            params,
            state,
            args.data,
            task=args.task,
            target=args.target,
            batch=args.batch,
            samples=args.samples,
            vocab=run.vocab,
            tokenizer=tokenizer,
        )
        if args.json:
            record = {"data": result.data, "task": result.task, **result.as_dict()}
            print(json.dumps(record, ensure_ascii=False))
        else:
            print("\n".join(result.lines()))
        return 0

    return common.guarded(work, args.spec)
