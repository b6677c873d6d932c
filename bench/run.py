"""lbdl's generated JAX against hand-written Flax peers: compile time, steady state, first output.

``python bench/run.py [--quick]`` compiles ResNet-50 (``specs/resnet50.lbdl``) and a GPT of
GPT-2 small's size (``specs/gpt2.lbdl``) with lbdl, builds the same two models in Flax
(``bench/flax_peers.py``) and measures both sides in one run, each measurement of ours next to
the same measurement of the peer (which goes first alternates), so that both share the
machine's noise; every figure is a median.

* **compile**: ``jax.jit(f).lower(...).compile()`` of the forward pass and of one training step
  (tracing, lowering and XLA's compilation; nothing runs);
* **steady**: one forward pass (evaluation mode), and one training step (optax SGD with
  momentum on the mean cross-entropy; batchnorm in training mode for ResNet-50), jitted and
  warmed up;
* **first output**: in a fresh Python process per sample, libraries imported, from the spec
  text (ours) or the module class (Flax) to the first forward result, parameter initialisation
  included. Flax is timed twice: with ``model.init`` run eagerly, as its documentation writes
  it, and with ``jax.jit(model.init)``.

It prints a Markdown table (model | metric | ours | Flax | ratio) and writes it, with the machine,
the command and an analysis of each ratio, to ``docs/performance.md`` (``--out`` elsewhere).
``--quick`` runs the same code on tiny models (ResNet-50's stages with one bottleneck each at
32×32, a two-block GPT with D=64) and writes a file only when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `bench` and `lbdl_dsl` from this checkout

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import lbdl_dsl  # noqa: E402
from bench import flax_peers, harness  # noqa: E402

KEY = 0  # both sides draw their parameters and their data from the same seeds
FIRST_SIDES = ("ours", "flax-eager", "flax-jit")


# -- what is compared ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One model at one size: our spec (and its ``--set`` values) and the Flax peer's settings."""

    name: str
    kind: str  # "resnet50" or "gpt": the peer, and the targets of the analysis
    spec: str  # relative to the repository root
    overrides: dict[str, int]
    peer_args: dict[str, Any]
    batch: int
    train_mode: bool  # `train=` of our apply in the training step (batchnorm's batch statistics)
    repeats: dict[str, int]
    drop_lines: tuple[str, ...] = ()  # spec lines left out (--quick's shallower ResNet)

    def spec_text(self) -> str | None:
        """The spec as compiled: the file less ``drop_lines``; None when nothing is dropped."""
        if not self.drop_lines:
            return None
        lines = (ROOT / self.spec).read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if not line.strip().startswith(self.drop_lines)]
        return "\n".join(kept) + "\n"

    def compile_ours(self) -> Any:
        """Our model, from the spec: ``lbdl_dsl.compile``."""
        return lbdl_dsl.compile(str(ROOT / self.spec), text=self.spec_text(), **self.overrides)

    def make_peer(self) -> flax_peers.Peer:
        if self.kind == "gpt":
            return flax_peers.make_gpt(self.batch, **self.peer_args)
        return resnet_peer(self.batch, **self.peer_args)


FULL = {"compile_forward": 3, "compile_train": 3, "forward": 10, "train": 5, "first": 3}
QUICK = {"compile_forward": 1, "compile_train": 1, "forward": 3, "train": 2, "first": 1}


def cases(quick: bool) -> list[Case]:
    """ResNet-50 at 224×224, batch 8, and GPT-2 small at T=128, batch 4; or tiny ones."""
    if quick:
        gpt = {"N": 2, "D": 64, "H": 4, "V": 256, "L": 32, "T": 16}
        return [
            Case(
                "ResNet-50, 1 block/stage, 32×32",
                "resnet50",
                "specs/resnet50.lbdl",
                {"H": 32, "W": 32},
                {"image": 32, "stages": (1, 1, 1, 1)},
                batch=2,
                train_mode=True,
                repeats=QUICK,
                drop_lines=("resblock ×", "assert params"),
            ),
            Case(
                "GPT, 2 blocks, D=64",
                "gpt",
                "specs/gpt2.lbdl",
                gpt,
                {"T": 16, "n_layer": 2, "d": 64, "heads": 4, "vocab": 256, "ctx": 32},
                batch=2,
                train_mode=False,
                repeats=QUICK,
            ),
        ]
    resnet = Case("ResNet-50", "resnet50", "specs/resnet50.lbdl", {}, {"image": 224}, 8, True, FULL)
    gpt = Case("GPT-2 small", "gpt", "specs/gpt2.lbdl", {"T": 128}, {"T": 128}, 4, False, FULL)
    return [resnet, gpt]


def resnet_peer(batch: int, image: int, stages: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """`flax_peers.make_resnet50`, with fewer bottlenecks per stage for --quick."""
    full = flax_peers.ResNet50
    if tuple(stages) != tuple(full.stages):
        flax_peers.ResNet50 = functools.partial(full, stages=stages)  # type: ignore[misc]
    try:
        return flax_peers.make_resnet50(batch, image)
    finally:
        flax_peers.ResNet50 = full


# -- the two sides as plain functions ------------------------------------------------------------


@dataclass
class Side:
    """One model as the harness wants it: un-jitted functions and their arguments."""

    forward: Callable[..., Any]
    forward_args: tuple
    train_step: Callable[..., Any]
    train_args: tuple
    params: int

    def of(self, what: str) -> tuple[Callable[..., Any], tuple]:
        """The function and arguments of "forward" or "train"."""
        if what == "forward":
            return self.forward, self.forward_args
        return self.train_step, self.train_args


def peer_side(case: Case) -> Side:
    peer = case.make_peer()
    variables = jax.jit(peer.init)(jax.random.key(KEY))  # not timed: the faster way
    x, y = peer.example_inputs(jax.random.key(KEY + 1))
    return Side(
        peer.forward,
        (variables, x),
        peer.train_step,
        (variables, peer.opt_init(variables), x, y),
        flax_peers.param_count(variables),
    )


def our_side(case: Case, peer: Side) -> Side:
    """Our model on the peer's data (images moved to the spec's channels-first layout).

    The training step is the peer's: the same optimiser and loss. GPT's runs with
    ``train=False``: the peer has no dropout, and without it both compute the same function.
    """
    model = case.compile_ours()
    params, state = model.init(jax.random.key(KEY))
    x, y = peer.train_args[2:]
    if x.ndim == 4:
        x = jnp.transpose(x, (0, 3, 1, 2))  # NHWC -> NCHW
    tx = optax.sgd(flax_peers.LEARNING_RATE, momentum=flax_peers.MOMENTUM)
    train = case.train_mode

    def forward(params: Any, state: Any, x: jax.Array) -> jax.Array:
        return model.apply(params, state, x)[0]

    def train_step(params: Any, state: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple:
        def loss_fn(p: Any) -> tuple[jax.Array, Any]:
            logits, new_state = model.apply(p, state, x, train=train)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, loss

    return Side(
        forward,
        (params, state, x),
        train_step,
        (params, state, tx.init(params), x, y),
        model.param_count,
    )


# -- measurements ----------------------------------------------------------------------------------


def interleaved(
    n: int, ours: Callable[[], float], peer: Callable[[], float]
) -> tuple[float, float]:
    """Medians of ``n`` samples of each, alternating which goes first."""
    a: list[float] = []
    b: list[float] = []
    for i in range(n):
        pair = [(ours, a), (peer, b)]
        for fn, out in pair if i % 2 == 0 else pair[::-1]:
            out.append(fn())
    return statistics.median(a), statistics.median(b)


class Compiler:
    """Samples of `harness.time_compile`'s measurement, keeping the last executable.

    Each sample jits a fresh wrapper, so that it pays for tracing, lowering and XLA's
    compilation in full; the steady samples then run the executable compiled last.
    """

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.executable: Callable[..., Any] | None = None

    def __call__(self) -> float:
        @functools.wraps(self.fn)
        def fresh(*a: Any) -> Any:
            return self.fn(*a)

        start = time.perf_counter()
        self.executable = jax.jit(fresh).lower(*self.args).compile()
        return time.perf_counter() - start

    def steady(self) -> Callable[[], float]:
        """One timed call (`harness.time_steady`), after two untimed ones here."""
        if self.executable is None:
            self()
        executable, args = self.executable, self.args
        harness.time_steady(executable, *args, warmup=2, repeat=1)
        return lambda: harness.time_steady(executable, *args, warmup=0, repeat=1)[0]


def first_outputs(case: Case, sides: Sequence[str], quick: bool) -> list[dict[str, float]]:
    """One sample of `child` for each side, each in a fresh process, one after the other.

    --quick runs them side by side: its figures only show that the code runs.
    """
    procs = []
    for side in sides:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--first-output", side]
        cmd += ["--case", case.name] + (["--quick"] if quick else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        procs.append((cmd, proc))
        if not quick:
            proc.wait()
    out = []
    for cmd, proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr.decode()[-3000:]}")
        out.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return out


def measure(case: Case, quick: bool, log: Callable[[str], None]) -> list[harness.Row]:
    """Every row of one case, and the parts of the first outputs (logged)."""
    r = case.repeats
    peer = peer_side(case)
    ours = our_side(case, peer)
    if ours.params != peer.params:
        raise RuntimeError(f"{case.name}: not the same model ({ours.params:,} parameters here)")
    rows: list[harness.Row] = []

    def row(metric: str, pair: tuple[float, float]) -> None:
        rows.append(harness.Row(case.name, metric, *pair))
        log(f"  {metric}: ours {pair[0]:.4g}, Flax {pair[1]:.4g}")

    compilers = {}
    for what, label in (("forward", "forward"), ("train", "training step")):
        mine, theirs = Compiler(*ours.of(what)), Compiler(*peer.of(what))
        row(f"compile: {label} (s)", interleaved(r[f"compile_{what}"], mine, theirs))
        compilers[what] = (mine, theirs)
    for what, label in (("forward", "forward"), ("train", "training step")):
        mine, theirs = compilers[what]
        row(f"steady: {label} (s)", interleaved(r[what], mine.steady(), theirs.steady()))
    del compilers  # the executables' memory
    samples: dict[str, list[dict[str, float]]] = {side: [] for side in FIRST_SIDES}
    for i in range(r["first"]):
        order = FIRST_SIDES[i % 3 :] + FIRST_SIDES[: i % 3]
        for side, sample in zip(order, first_outputs(case, order, quick), strict=True):
            samples[side].append(sample)
    first = {side: median_parts(runs) for side, runs in samples.items()}
    for side, parts in first.items():
        log(f"  first output, {side}: " + ", ".join(f"{k} {v:.3g} s" for k, v in parts.items()))
    ours_total = first["ours"]["total"]
    row("first output, Flax init eager (s)", (ours_total, first["flax-eager"]["total"]))
    row("first output, Flax init jitted (s)", (ours_total, first["flax-jit"]["total"]))
    return rows


def median_parts(runs: list[dict[str, float]]) -> dict[str, float]:
    return {part: statistics.median(run[part] for run in runs) for part in runs[0]}


# -- time to first output, in a fresh process ----------------------------------------------------


def child(case: Case, side: str) -> dict[str, float]:
    """From nothing to the first forward result, the way a user writes it.

    Libraries are imported and the input is made before the clock starts. Ours: `lbdl_dsl.compile`
    of the spec (parse, check, generate, load), ``init``, the first call of the jitted ``apply``.
    Flax: the peer built from its module class, ``init`` (eager or jitted), the first call of the
    jitted forward pass. Nothing waits between the steps, as in a user's script; ``init`` is the
    time until the call returns (JAX may still be computing).
    """
    x = case.make_peer().example_inputs(jax.random.key(KEY + 1))[0]
    if side == "ours" and x.ndim == 4:
        x = jnp.transpose(x, (0, 3, 1, 2))
    jax.block_until_ready(x)
    t0 = time.perf_counter()
    if side == "ours":
        model = case.compile_ours()
        t1 = time.perf_counter()
        params, state = model.init(jax.random.key(KEY))
        t2 = time.perf_counter()
        out = jax.jit(model.apply)(params, state, x)
    else:
        peer = case.make_peer()
        t1 = time.perf_counter()
        init = peer.init if side == "flax-eager" else jax.jit(peer.init)
        variables = init(jax.random.key(KEY))
        t2 = time.perf_counter()
        out = jax.jit(peer.forward)(variables, x)
    jax.block_until_ready(out)
    t3 = time.perf_counter()
    return {"total": t3 - t0, "build": t1 - t0, "init": t2 - t1}


# -- the report ----------------------------------------------------------------------------------


def machine() -> list[str]:
    """The CPU, its cores and the versions of everything measured."""
    import flax
    import jaxlib

    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0].split(":", 1)[1].strip() if names else cpu
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"- CPU: {cpu}, {os.cpu_count()} logical cores ({usable} usable by this process)",
        f"- {platform.system()} {platform.release()}, Python {platform.python_version()}",
        f"- jax {jax.__version__}, jaxlib {jaxlib.__version__}, flax {flax.__version__}, "
        f"optax {optax.__version__}; backend: {jax.default_backend()}",
    ]


TARGETS = {  # metric -> {case kind: the target for ours / Flax}
    "compile: forward (s)": {"resnet50": 1.0, "gpt": 0.5},
    "compile: training step (s)": {"resnet50": 1.0, "gpt": 0.5},
    "steady: forward (s)": {"resnet50": 1.05, "gpt": 1.05},
    "steady: training step (s)": {"resnet50": 1.05, "gpt": 1.05},
    "first output, Flax init eager (s)": {"resnet50": 0.3, "gpt": 0.3},
    "first output, Flax init jitted (s)": {"resnet50": 0.3, "gpt": 0.3},
}


def verdicts(rows: Sequence[harness.Row], kinds: dict[str, str]) -> list[str]:
    """One line per ratio: the ratio, its target, met or not."""
    out = []
    for row in rows:
        target = TARGETS[row.metric][kinds[row.model]]
        ratio = row.ratio
        if ratio is not None:
            verdict = "met" if ratio <= target else "**not met**"
            name = row.metric.removesuffix(" (s)")
            out.append(f"- {row.model}, {name}: {ratio:.2f} (target ≤ {target:g}: {verdict})")
    return out


def report(
    rows: Sequence[harness.Row],
    kinds: dict[str, str],
    command: str,
    parts: Sequence[str],
    notes: str,
) -> str:
    """docs/performance.md: the table, the targets, the machine and command, the analysis."""
    lines = [
        "# Performance: lbdl against hand-written Flax",
        "",
        "Written by `bench/run.py` (edit that, not this). Seconds, medians of interleaved "
        "samples (ours and the peer in turn, so that both share the machine's noise); "
        "ratio = ours / Flax: below 1, lbdl is faster.",
        "",
        table(rows),
        "",
        "## Targets",
        "",
        *verdicts(rows, kinds),
        "",
        "## Machine and command",
        "",
        *machine(),
        notes,
        "",
        "```sh",
        command,
        "```",
        "",
        "The first outputs' parts (build: from the spec to a loaded module, or constructing "
        "the peer; init: until `init` returns):",
        "",
        "```",
        *parts,
        "```",
        "",
        ANALYSIS.strip(),
    ]
    return "\n".join(lines) + "\n"


def table(rows: Sequence[harness.Row]) -> str:
    return harness.format_table(rows).replace("| peer |", "| Flax |", 1)


ANALYSIS = """
## Analysis
"""


# -- main ------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> list[harness.Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, one sample each")
    parser.add_argument("--out", type=Path, help="where to write the report")
    parser.add_argument("--first-output", choices=FIRST_SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.first_output:  # a child of `first_output`
        case = next(c for c in cases(args.quick) if c.name == args.case)
        print(json.dumps(child(case, args.first_output)))
        return []
    start, load = time.perf_counter(), os.getloadavg()
    rows: list[harness.Row] = []
    parts: list[str] = []

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if "first output," in line or not line.startswith(" "):
            parts.append(line)

    for case in cases(args.quick):
        log(case.name)
        rows += measure(case, args.quick, log)
    print(table(rows))
    out = args.out or (None if args.quick else ROOT / "docs" / "performance.md")
    if out is not None:
        minutes = (time.perf_counter() - start) / 60
        notes = (
            f"- load average (1, 5, 15 min): {fmt_load(load)} at the start, "
            f"{fmt_load(os.getloadavg())} at the end; the run took {minutes:.0f} min"
        )
        command = "python bench/run.py" + (" --quick" if args.quick else "")
        kinds = {c.name: c.kind for c in cases(args.quick)}
        Path(out).write_text(report(rows, kinds, command, parts, notes), encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    return rows


def fmt_load(load: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.1f}" for v in load)


if __name__ == "__main__":
    main()
