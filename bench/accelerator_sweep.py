"""Which settings take GPT-2 medium's training step furthest toward issue 19's 50 % MFU: one
table over the batch, a padded vocabulary, the lowering and XLA's GPU flags.

``python bench/accelerator_sweep.py [--quick] [--only NAME,...] [--out JSON]`` runs every
setting of `SETTINGS` in a fresh process (XLA reads ``XLA_FLAGS`` when its backend starts, and
a fresh process also pays the compile a user pays, autotuning included): the model compiled
by lbdl in bf16 (or the Flax peer, for the settings that name it), one compile, then the median
of 10 training steps, and the MFU as bench/accelerator.py defines it: 6 × the MACs lbdl counts
per sample × the batch, over the step, over the device's dense bf16 peak. With ``V=50,304``
both the MACs and the peer's vocabulary are the padded ones (0.012 % more work than 50,257).

Where bench/accelerator.py measured 40 % (``--unroll``, batch 16) and the peer 39 % on an
H100, this is the next device session's first call: one command whose table says which of the
usual levers (bigger batches, a vocabulary that is a multiple of 64, cuBLAS instead of Triton
for the products, the latency-hiding scheduler, CUDA graphs off, cuBLASLt's fused epilogues,
cuDNN's layer norm) moves the figure, and how far.
``--quick`` runs two settings of bench/run.py's tiny GPT on whatever device JAX has (CI's
smoke test, on a CPU, where the flags are read and do nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from bench import accelerator, choose, harness, run  # noqa: E402

VOCAB, PADDED = 50257, 50304  # GPT-2's, and the next multiple of 64


@dataclass(frozen=True)
class Setting:
    """One configuration of the training step: who, how big, how lowered, with which flags."""

    key: str  # what --only names
    name: str
    batch: int = 16
    vocab: int = VOCAB
    unroll: bool = True
    flags: str = ""  # added to XLA_FLAGS in the child
    side: str = "ours"  # or "peer"

    def case(self, quick: bool) -> accelerator.Case:
        """bench/accelerator.py's GPT-2 medium (or --quick's tiny GPT) at this setting."""
        if quick:
            base = run.cases(True)[1]
            overrides = base.overrides
            peer_args = base.peer_args
        else:
            sizes = {"N": 24, "D": 1024, "H": 16, "T": 1024, "V": self.vocab}
            overrides = sizes
            peer_args = {"T": 1024, "n_layer": 24, "d": 1024, "heads": 16, "vocab": self.vocab}
            base = run.Case(self.name, "gpt", "specs/gpt2.lbdl", {}, {}, 0, False, {})
        base = dataclasses.replace(
            base, name=self.name, overrides=overrides, peer_args=peer_args, batch=self.batch
        )
        return accelerator.Case(self.key, base, ("train",), 10, True, self.unroll)


CUBLAS = "--xla_gpu_enable_triton_gemm=false"
LT = "--xla_gpu_enable_cublaslt=true"  # bias and GELU fused into the products' epilogues
SETTINGS = (
    Setting("peer", "the Flax peer, batch 16", unroll=False, side="peer"),
    Setting("unroll", "--unroll, batch 16"),
    Setting("scan", "scanned, batch 16", unroll=False),
    Setting("unroll-32", "--unroll, batch 32", batch=32),
    Setting("unroll-v64", "--unroll, batch 16, V=50,304", vocab=PADDED),
    Setting("unroll-cublas", "--unroll, batch 16, cuBLAS products", flags=CUBLAS),
    Setting(
        "unroll-lhs",
        "--unroll, batch 16, latency-hiding scheduler",
        flags="--xla_gpu_enable_latency_hiding_scheduler=true",
    ),
    Setting(
        "unroll-nographs",
        "--unroll, batch 16, no CUDA graphs",
        flags="--xla_gpu_enable_command_buffer=",
    ),
    Setting(
        "unroll-v64-cublas",
        "--unroll, batch 16, V=50,304, cuBLAS products",
        vocab=PADDED,
        flags=CUBLAS,
    ),
    Setting("unroll-32-v64", "--unroll, batch 32, V=50,304", batch=32, vocab=PADDED),
    Setting(
        "scan-v64-cublas",
        "scanned, batch 16, V=50,304, cuBLAS products",
        unroll=False,
        vocab=PADDED,
        flags=CUBLAS,
    ),
    Setting(
        "peer-v64", "the Flax peer, batch 16, V=50,304", unroll=False, side="peer", vocab=PADDED
    ),
    Setting(
        "peer-v64-cublas",
        "the Flax peer, batch 16, V=50,304, cuBLAS products",
        unroll=False,
        side="peer",
        vocab=PADDED,
        flags=CUBLAS,
    ),
    Setting(
        "unroll-32-v64-cublas",
        "--unroll, batch 32, V=50,304, cuBLAS products",
        batch=32,
        vocab=PADDED,
        flags=CUBLAS,
    ),
    Setting("scan-v64", "scanned, batch 16, V=50,304", unroll=False, vocab=PADDED),
    Setting(
        "unroll-v64-lt", "--unroll, batch 16, V=50,304, cuBLASLt epilogues", vocab=PADDED, flags=LT
    ),
    Setting(
        "unroll-v64-lt-cublas",
        "--unroll, batch 16, V=50,304, cuBLASLt epilogues, cuBLAS products",
        vocab=PADDED,
        flags=f"{LT} {CUBLAS}",
    ),
    Setting(
        "unroll-v64-cudnn-ln",
        "--unroll, batch 16, V=50,304, cuDNN's layer norm",
        vocab=PADDED,
        flags="--xla_gpu_enable_cudnn_layer_norm=true",
    ),
)
QUICK = (
    Setting("unroll", "--unroll, batch 2", batch=2),
    Setting("scan-cublas", "scanned, batch 2, cuBLAS products", 2, unroll=False, flags=CUBLAS),
)


def side_of(case: accelerator.Case, side: str) -> run.Side:
    """One side only (the other's arrays would take the device's memory for nothing)."""
    if side == "peer":
        return accelerator.peer_side(case)
    peer = accelerator.peer_model(case)
    x, y = peer.example_inputs(jax.random.key(run.KEY + 1))
    return accelerator.our_side(case, x, y)


def child(setting: Setting, quick: bool) -> dict[str, Any]:
    """The setting measured in this process: compile seconds, step seconds, TFLOP/s, MFU."""
    case = setting.case(quick)
    return timed(case, side_of(case, setting.side), case.samples)[0]


def timed(case: accelerator.Case, side: run.Side, repeat: int) -> tuple[dict[str, Any], Any]:
    """``side``'s training step compiled once and timed (3 warm-up steps, the median of
    ``repeat``): its figures, as the sweep reports them, and the compiled step."""
    compiler = run.Compiler(*side.of("train"))
    seconds = compiler()
    step, _ = harness.time_steady(compiler.executable, *side.train_args, warmup=3, repeat=repeat)
    flops = 6 * accelerator.macs_per_sample(case) * case.base.batch
    kind = jax.devices()[0].device_kind
    peak = accelerator.peak(kind)
    figures = {
        "compile": seconds,
        "step": step,
        "tflops": flops / step / 1e12,
        "mfu": None if peak is None else flops / step / peak,
        "kind": kind,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    return figures, compiler.executable


def start(setting: Setting, quick: bool) -> dict[str, Any]:
    """`child` in a fresh process with the setting's flags; the error's tail if it failed."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(f for f in (env.get("XLA_FLAGS", ""), setting.flags) if f)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", setting.key]
    done = subprocess.run(
        cmd + (["--quick"] if quick else []), capture_output=True, text=True, env=env, cwd=ROOT
    )
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout)[-3000:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two settings of a tiny GPT")
    parser.add_argument("--only", help="the settings to run, by key (comma-separated)")
    parser.add_argument("--out", type=Path, help="where to write the figures (JSON)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settings = {s.key: s for s in (QUICK if args.quick else SETTINGS)}
    if args.child:
        print(json.dumps(child(settings[args.child], args.quick)))
        return {}
    chosen = choose.chosen(parser, settings, args.only, list(settings))
    results: dict[str, dict[str, Any]] = {}
    command = "python bench/accelerator_sweep.py" + (" --quick" if args.quick else "")
    command += f" --only {args.only}" if args.only else ""
    for setting in chosen:
        results[setting.name] = start(setting, args.quick)
        print(setting.name, results[setting.name], file=sys.stderr, flush=True)
        if args.out:  # after every setting: a run cut short keeps what it measured
            record = {"command": command, "results": results}
            args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(accelerator.sweep_table(results))
    return results


if __name__ == "__main__":
    main()
