"""lbdl's generated JAX against hand-written Flax peers: compile time, steady state, first output.

``python bench/run.py [--quick]`` compiles ResNet-50 (``specs/resnet50.lbdl``) and a GPT of
GPT-2 small's size (``specs/gpt2.lbdl``) with lbdl, builds the same two models in Flax
(``bench/flax_peers.py``) and measures both sides in one run, each measurement of ours followed
by the same measurement of the peer (the order alternating), so that both share the machine's
noise; every figure is a median.

* **compile**: ``jax.jit(f).lower(...).compile()`` of the forward pass and of one training step
  (trace, lowering and XLA's compilation; nothing is run);
* **steady**: one forward pass, and one training step (optax SGD with momentum on the mean
  cross-entropy; batchnorm in training mode for ResNet-50), jitted and warmed up;
* **first output**: in a fresh Python process per sample, with the libraries imported, from the
  spec text (ours) or the module class (Flax) to the first forward result, parameter
  initialisation included. Flax is timed twice: with ``model.init`` run eagerly, as its
  documentation writes it, and with ``jax.jit(model.init)``.

It prints a Markdown table (model | metric | ours | Flax | ratio) and writes it, with the machine,
the command and an analysis of each ratio, to ``docs/performance.md`` (``--out`` elsewhere).
``--quick`` runs the same code on tiny models (a one-bottleneck-per-stage ResNet at 32×32, a
two-layer GPT with D=64) and writes nothing unless ``--out`` is given.
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
from collections.abc import Callable
from dataclasses import dataclass, field
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

KEY = 0  # every side draws its parameters and its data from the same seeds


# -- what is compared ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One model at one size: our spec (and its ``--set`` values) and the Flax peer's settings."""

    name: str
    spec: str  # relative to the repository root
    overrides: dict[str, int]
    peer: str  # "resnet50" or "gpt"
    peer_args: dict[str, Any]
    batch: int
    train_mode: bool  # `train=` of our apply in the training step (batchnorm's batch statistics)
    drop_lines: tuple[str, ...] = ()  # spec lines left out (--quick's shallower ResNet)
    repeats: dict[str, int] = field(default_factory=dict)

    def spec_text(self) -> str | None:
        """The spec as compiled: the file, less ``drop_lines``; None when nothing is dropped."""
        if not self.drop_lines:
            return None
        lines = (ROOT / self.spec).read_text(encoding="utf-8").splitlines()
        kept = [ln for ln in lines if not ln.strip().startswith(self.drop_lines)]
        return "\n".join(kept) + "\n"

    def compile_ours(self):
        """Our model, compiled from the spec: ``lbdl_dsl.compile``."""
        return lbdl_dsl.compile(str(ROOT / self.spec), text=self.spec_text(), **self.overrides)

    def make_peer(self) -> flax_peers.Peer:
        if self.peer == "gpt":
            return flax_peers.make_gpt(self.batch, **self.peer_args)
        return resnet_peer(self.batch, **self.peer_args)


FULL_REPEATS = {"compile_forward": 3, "compile_train": 3, "forward": 10, "train": 5, "first": 3}
QUICK_REPEATS = {"compile_forward": 1, "compile_train": 1, "forward": 3, "train": 2, "first": 1}


def cases(quick: bool) -> list[Case]:
    """ResNet-50 at 224×224, batch 8, and GPT-2 small at T=128, batch 4; or tiny ones."""
    if quick:
        return [
            Case("ResNet-50 (1 block/stage, 32×32)", "specs/resnet50.lbdl", {"H": 32, "W": 32},
                 "resnet50", {"image": 32, "stages": (1, 1, 1, 1)}, 2, True,
                 drop_lines=("resblock ×", "assert params"), repeats=QUICK_REPEATS),
            Case("GPT (2 blocks, D=64)", "specs/gpt2.lbdl",
                 {"N": 2, "D": 64, "H": 4, "V": 256, "L": 32, "T": 16}, "gpt",
                 {"T": 16, "n_layer": 2, "d": 64, "heads": 4, "vocab": 256, "ctx": 32}, 2,
                 False, repeats=QUICK_REPEATS),
        ]
    return [
        Case("ResNet-50", "specs/resnet50.lbdl", {}, "resnet50", {"image": 224}, 8, True,
             repeats=FULL_REPEATS),
        Case("GPT-2 small (12 blocks)", "specs/gpt2.lbdl", {"T": 128}, "gpt", {"T": 128}, 4,
             False, repeats=FULL_REPEATS),
    ]


def resnet_peer(batch: int, image: int, stages: tuple[int, ...] = (3, 4, 6, 3)):
    """`flax_peers.make_resnet50`, with fewer bottlenecks per stage for --quick."""
    full = flax_peers.ResNet50
    if stages != full.stages:
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


def peer_side(case: Case) -> Side:
    peer = case.make_peer()
    variables = peer.init(jax.random.key(KEY))
    x, y = peer.example_inputs(jax.random.key(KEY + 1))
    opt_state = peer.opt_init(variables)
    return Side(peer.forward, (variables, x), peer.train_step, (variables, opt_state, x, y),
                flax_peers.param_count(variables))


def our_side(case: Case, peer: Side) -> Side:
    """Our model on the peer's data (images moved to our channels-first layout)."""
    model = case.compile_ours()
    params, state = model.init(jax.random.key(KEY))
    x, y = peer.train_args[2:]
    if x.ndim == 4:
        x = jnp.transpose(x, (0, 3, 1, 2))  # NHWC -> NCHW: the spec's layout
    tx = optax.sgd(flax_peers.LEARNING_RATE, momentum=flax_peers.MOMENTUM)
    train = case.train_mode

    def forward(params, state, x):
        return model.apply(params, state, x)[0]

    def train_step(params, state, opt_state, x, y):
        def loss_fn(p):
            logits, new_state = model.apply(p, state, x, train=train)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, loss

    return Side(forward, (params, state, x), train_step, (params, state, tx.init(params), x, y),
                model.param_count)


# -- measurements ----------------------------------------------------------------------------------


def interleaved(n: int, ours: Callable[[], float], peer: Callable[[], float]
                ) -> tuple[float, float]:
    """Medians of ``n`` samples of each, alternating which goes first."""
    a: list[float] = []
    b: list[float] = []
    for i in range(n):
        pair = [(ours, a), (peer, b)]
        for fn, out in pair if i % 2 == 0 else reversed(pair):
            out.append(fn())
    return statistics.median(a), statistics.median(b)


def steady(fn: Callable[..., Any], args: tuple) -> Callable[[], float]:
    """One timed call of ``jax.jit(fn)``, warmed up here (compilation and first touch)."""
    jitted = jax.jit(fn)
    harness.time_steady(jitted, *args, warmup=2, repeat=1)
    return lambda: harness.time_steady(jitted, *args, warmup=0, repeat=1)[0]


def first_output(case: Case, side: str, quick: bool) -> dict[str, float]:
    """A fresh process's time to first output (see `_child`), with its parts."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--first-output", side, "--case",
           case.name] + (["--quick"] if quick else [])
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,
                          cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(case: Case, quick: bool, log: Callable[[str], None]) -> list[harness.Row]:
    """Every row of one case."""
    r = case.repeats
    peer = peer_side(case)
    ours = our_side(case, peer)
    if ours.params != peer.params:
        raise RuntimeError(f"{case.name}: {ours.params:,} parameters here, {peer.params:,} "
                           "in the Flax peer: not the same model")
    rows = []

    def row(metric: str, pair: tuple[float, float]) -> None:
        rows.append(harness.Row(case.name, metric, *pair))
        log(f"  {metric}: ours {pair[0]:.4g} s, Flax {pair[1]:.4g} s")

    row("compile: forward (s)", interleaved(
        r["compile_forward"], lambda: harness.time_compile(ours.forward, *ours.forward_args),
        lambda: harness.time_compile(peer.forward, *peer.forward_args)))
    row("compile: training step (s)", interleaved(
        r["compile_train"], lambda: harness.time_compile(ours.train_step, *ours.train_args),
        lambda: harness.time_compile(peer.train_step, *peer.train_args)))
    row("steady: forward (s)", interleaved(
        r["forward"], steady(ours.forward, ours.forward_args),
        steady(peer.forward, peer.forward_args)))
    row("steady: training step (s)", interleaved(
        r["train"], steady(ours.train_step, ours.train_args),
        steady(peer.train_step, peer.train_args)))
    del ours, peer
    samples: dict[str, list[dict[str, float]]] = {"ours": [], "flax-eager": [], "flax-jit": []}
    for i in range(r["first"]):
        order = list(samples)[i % 3:] + list(samples)[: i % 3]
        for side in order:
            samples[side].append(first_output(case, side, quick))

    def med(side: str, part: str) -> float:
        return statistics.median(s[part] for s in samples[side])

    row("first output vs Flax eager init (s)", (med("ours", "total"), med("flax-eager", "total")))
    row("first output vs Flax jitted init (s)", (med("ours", "total"), med("flax-jit", "total")))
    row("of which: initialisation (s)", (med("ours", "init"), med("flax-eager", "init")))
    return rows


# -- time to first output, in a fresh process ----------------------------------------------------


def _child(case: Case, side: str) -> dict[str, float]:
    """From nothing to the first forward result; libraries are imported before the clock starts.

    Ours: `lbdl_dsl.compile` of the spec (parse, check, generate, load), `init`, then the first
    call of the jitted `apply`. Flax: the peer built from its module class, `init` (eager or
    jitted), then the first call of the jitted forward pass.
    """
    if side == "ours":
        peer = case.make_peer()  # only for the input's shape, before the clock
        x = peer.example_inputs(jax.random.key(KEY + 1))[0]
        x = jnp.transpose(x, (0, 3, 1, 2)) if x.ndim == 4 else x
        jax.block_until_ready(x)
        t0 = time.perf_counter()
        model = case.compile_ours()
        t1 = time.perf_counter()
        params, state = model.init(jax.random.key(KEY))
        jax.block_until_ready((params, state))
        t2 = time.perf_counter()
        out = jax.block_until_ready(jax.jit(model.apply)(params, state, x))
    else:
        x = jax.block_until_ready(case.make_peer().example_inputs(jax.random.key(KEY + 1))[0])
        t0 = time.perf_counter()
        peer = case.make_peer()
        t1 = time.perf_counter()
        init = peer.init if side == "flax-eager" else jax.jit(peer.init)
        variables = jax.block_until_ready(init(jax.random.key(KEY)))
        t2 = time.perf_counter()
        out = jax.block_until_ready(jax.jit(peer.forward)(variables, x))
    t3 = time.perf_counter()
    del out
    return {"total": t3 - t0, "build": t1 - t0, "init": t2 - t1, "first": t3 - t2}
