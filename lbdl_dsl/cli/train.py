"""``lbdl train SPEC --data NAME|FILE --steps N``: a thin layer over `lbdl_dsl.training`.

The flags become a `TrainConfig` (which validates them and names the flag in its messages);
the loop does the rest. Progress is a bar on a terminal and plain lines otherwise; the final
lines say where the run's files are and the last evaluation. Exit codes: 0 done, 1 a user
error (the spec, a flag, the data, the run folder, a NaN loss), 130 interrupted after saving.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from lbdl_dsl.cli import common, mesh_flags

if TYPE_CHECKING:  # heavy: imported when the verb runs
    from lbdl_dsl.training.config import TrainConfig
    from lbdl_dsl.training.devices import Mesh, One
    from lbdl_dsl.training.loop import TrainResult

EXTRAS = ("jax", "train")
HELP = "train a spec on data (digits, shakespeare, synthetic, .npz, .txt), with checkpoints"


def _float_or_none(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lbdl_dsl.training.config import DTYPES, OPTIMIZERS, SCHEDULES, TASKS

    common.add_spec_arguments(p)
    g = p.add_argument_group("data and task")
    g.add_argument(
        "--data",
        required=True,
        metavar="NAME|FILE",
        help="digits, shakespeare, synthetic, or a .npz (inputs by name, targets `y`) or .txt file",
    )
    g.add_argument(
        "--task", choices=TASKS, default="auto", help="the loss (default: from the output)"
    )
    g.add_argument("--target", metavar="OUTPUT", help="the output the loss reads (several outputs)")
    g = p.add_argument_group("length")
    length = g.add_mutually_exclusive_group(required=True)
    length.add_argument("--steps", type=int, help="training steps")
    length.add_argument("--epochs", type=_float_or_none, help="passes over the training data")
    g.add_argument("--batch", type=int, default=32, help="samples per step (default 32)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="default adamw")
    g.add_argument("--lr", type=_float_or_none, default=1e-3, help="peak learning rate (1e-3)")
    g.add_argument("--schedule", choices=SCHEDULES, default="constant", help="after warm-up")
    g.add_argument("--warmup", type=int, default=0, metavar="STEPS", help="linear warm-up")
    g.add_argument("--clip", type=_float_or_none, metavar="NORM", help="clip the gradient norm")
    g.add_argument(
        "--weight-decay",
        type=_float_or_none,
        metavar="W",
        help="decoupled for adamw (default 1e-4) and lion (1e-3); added to the gradients else",
    )
    g.add_argument("--seed", type=int, default=0, help="initialisation, order, dropout (0)")
    g.add_argument("--dtype", choices=DTYPES, default="float32", help="compute type")
    g.add_argument(
        "--unroll",
        action="store_true",
        help="×N groups as straight-line code, not a scan: slower to compile, faster steps "
        "on a GPU (docs/performance-gpu.md)",
    )
    g = p.add_argument_group("run folder")
    g.add_argument("-o", "--output", metavar="RUN", help="the run folder (default runs/SPECNAME)")
    g.add_argument("--resume", action="store_true", help="continue the run in the folder")
    g.add_argument(
        "--eval-every", type=int, metavar="K", help="evaluate every K steps (and at the end)"
    )
    g.add_argument(
        "--eval-samples", type=int, metavar="N", help="evaluate on N samples (default: all)"
    )
    g.add_argument(
        "--save-every", type=int, metavar="K", help="checkpoint every K steps (and at the end)"
    )
    g.add_argument(
        "--save-minutes",
        type=_float_or_none,
        default=5.0,
        metavar="M",
        help="also checkpoint every M minutes of training (default 5; 0: only --save-every "
        "and the end), so a killed run loses at most that",
    )
    g.add_argument("--keep", type=int, default=3, metavar="K", help="checkpoints kept (3)")
    g.add_argument(
        "--log-every", type=int, default=10, metavar="K", help="record every K steps (10)"
    )
    mesh_flags.add_parallel_arguments(p)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    overrides = common.parse_overrides(args.set, args.parser)

    def work() -> int:
        from lbdl_dsl.training.config import TrainConfig

        config = TrainConfig(
            spec=args.spec,
            data=args.data,
            output_dir=args.output or str(Path("runs") / Path(args.spec).stem),
            overrides=overrides,
            task=args.task,
            target=args.target,
            steps=args.steps,
            epochs=args.epochs,
            batch=args.batch,
            optimizer=args.optimizer,
            lr=args.lr,
            schedule=args.schedule,
            warmup=args.warmup,
            clip=args.clip,
            weight_decay=args.weight_decay,
            eval_every=args.eval_every,
            eval_samples=args.eval_samples,
            save_every=args.save_every,
            save_minutes=args.save_minutes or None,
            keep=args.keep,
            log_every=args.log_every,
            seed=args.seed,
            dtype=args.dtype,
            unroll=args.unroll,
            resume=args.resume,
            mesh=args.mesh,
            shard=tuple(args.shard or ()),
        )
        from lbdl_dsl.core.errors import LbdlError
        from lbdl_dsl.training.devices import join

        devices = join(
            config.mesh, config.shard, args.coordinator, args.num_processes, args.process_id
        )
        try:
            return _train(config, devices)
        except LbdlError:
            raise
        except Exception as exc:  # noqa: BLE001 - a peer's failure is named, the rest re-raised
            from lbdl_dsl.backends.jax.distributed import peer_error

            named = peer_error(exc)
            if named is None:
                raise
            raise named from None

    from lbdl_dsl.backends.jax.distributed import leave  # no JAX at import

    return leave(common.guarded(work, args.spec))  # a failing process of several exits at once


def _train(config: TrainConfig, devices: One | Mesh | None = None) -> int:
    from lbdl_dsl.training import loop, progress

    display = progress.display_for(sys.stdout)
    try:
        result = loop.run(config, display=display, devices=devices)
    except loop.TrainingInterrupted as stop:
        if devices is not None and not devices.is_main:
            return 130
        print(
            f"interrupted at step {stop.step}: checkpoint saved in {stop.run_dir}/checkpoints\n"
            f"hint: continue with the same command and --resume",
            file=sys.stderr,
        )
        return 130
    if devices is not None and not devices.is_main:
        return 0  # the main process reports the run
    for line in summary(result):
        print(line)
    return 0


def summary(result: TrainResult) -> list[str]:
    """The closing lines: the last evaluation, the time, and the files written."""
    lines = []
    ev = result.eval
    if ev is not None:
        words = [f"loss {ev['loss']:.4f}"]
        if "accuracy" in ev:
            words.insert(0, f"accuracy {100 * ev['accuracy']:.2f}%")
        if "perplexity" in ev:
            words.append(f"perplexity {ev['perplexity']:.2f}")
        lines.append(
            f"test: {', '.join(words)} ({ev['samples']} samples) after {result.step} steps"
        )
    elif result.train is not None:
        lines.append(f"training loss {result.train['loss']:.4f} after {result.step} steps")
    lines.append(f"{result.seconds:.1f} s; run folder {result.run_dir}:")
    files = ["run.json", "metrics.jsonl", result.params_path.name, "checkpoints/"]
    if result.plot_path is not None:
        files.insert(2, result.plot_path.name)
    lines.append("  " + "  ".join(files))
    return lines
