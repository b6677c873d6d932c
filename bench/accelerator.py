"""The performance table on an accelerator (issue 19): bf16 compute, batches that fill the
device, and the fraction of its peak that a training step reaches (MFU).

``python bench/accelerator.py`` compiles, with ``dtype="bfloat16"``, GPT-2 medium and GPT-2
small at T=1,024 (batch 16) and ResNet-50 at 224×224 (batch 128), builds the same models in Flax
(``bench/flax_peers.py``, compute in bf16, parameters in float32, attention through
``jax.nn.dot_product_attention``'s cuDNN kernel where the device has one) and measures both sides
in one process, as ``bench/run.py`` does on a CPU:

* **compile**: ``jax.jit(f).lower(...).compile()``, one sample each (XLA's GPU compiler
  autotunes, and a sample costs tens of seconds of a lent device);
* **steady**: the median of interleaved calls of the compiled forward pass and training step;
* **MFU**: the model's FLOPs per training step (3 × 2 × the MACs lbdl counts per sample, times
  the batch: the forward pass and its two backward products, attention's T×T products
  included), over the steady step's seconds, over the device's dense bf16 peak from its data
  sheet; beside it, the same over a bf16 matrix product measured in the same run;
* **memory**: XLA's plan of the training step (``bench/memory.py``'s total), in GiB;
* **fused attention**: the cuDNN attention kernels in each compiled training step, and a check
  that lbdl's fused path agrees with its own einsum attention.

It writes ``docs/performance-gpu.md`` and, beside it, the ``.json`` it was written from
(``--out`` elsewhere; ``--render JSON`` rewrites the report from saved figures). The JSON is
rewritten after every model, so that a run cut short by its time limit still leaves what it
measured. ``--quick`` runs the same code on tiny models on whatever device JAX has (CI's smoke
test, on a CPU), and writes a file only when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lbdl_dsl  # noqa: E402
from bench import choose, flax_peers, harness, memory, run  # noqa: E402
from lbdl_dsl.backends.jax.runtime import attention as runtime  # noqa: E402

MFU_TARGET = 0.5  # the issue's: GPT-2 medium's training step, attention fused

# Dense bf16 peaks from the vendors' data sheets (no sparsity), by a part of the name JAX gives
# the device; the first match wins, so the PCIe H100 comes before the SXM one.
PEAKS = (("H100 PCIe", 756e12), ("H100", 989.4e12), ("H200", 989.4e12), ("A100", 312e12))

TARGETS = {  # metric -> {case kind: ours / Flax at most}, as on the CPU (bench/run.py)
    "compile: forward (s)": {"resnet50": 1.0, "gpt": 0.5},
    "compile: training step (s)": {"resnet50": 1.0, "gpt": 0.5},
    "steady: forward (s)": {"resnet50": 1.0, "gpt": 1.0},
    "steady: training step (s)": {"resnet50": 1.0, "gpt": 1.0},
    "memory: training step (GiB)": {"resnet50": 1.0, "gpt": 1.0},
}
LABELS = {"forward": "forward", "train": "training step"}


@dataclass(frozen=True)
class Case:
    """One model at one size: ``base`` is bench/run.py's (spec, ``--set`` values, peer)."""

    key: str  # what --only names
    base: run.Case
    whats: tuple[str, ...]  # "forward", "train"
    samples: int  # steady samples of each side
    mfu_target: bool = False
    unroll: bool = False  # ours lowered with --unroll: a Python loop of copies, no scan

    @property
    def name(self) -> str:
        return self.base.name


def cases(quick: bool) -> list[Case]:
    """GPT-2 medium (the MFU target) scanned and ``--unroll``-ed, at batch 16 and 32; GPT-2
    small; ResNet-50. Or run.py's tiny models, the GPT scanned and unrolled."""
    if quick:
        tiny_resnet, tiny_gpt = run.cases(True)
        unrolled = dataclasses.replace(tiny_gpt, name=tiny_gpt.name + ", --unroll")
        return [
            Case("gpt", tiny_gpt, ("forward", "train"), 2, mfu_target=True),
            Case("gpt-unrolled", unrolled, ("train",), 2, mfu_target=True, unroll=True),
            Case("resnet50", tiny_resnet, ("forward", "train"), 2),
        ]
    t, gpt2 = 1024, "specs/gpt2.lbdl"

    def medium(batch: int, unroll: bool) -> Case:
        name = f"GPT-2 medium, T={t}, batch {batch}" + (", --unroll" if unroll else "")
        sizes, peer = {"N": 24, "D": 1024, "H": 16, "T": t}, {"n_layer": 24, "d": 1024, "heads": 16}
        base = run.Case(name, "gpt", gpt2, sizes, {"T": t, **peer}, batch, False, {})
        key = f"gpt2-medium-{batch}" + ("-unrolled" if unroll else "")
        return Case(key, base, ("train",), 10, mfu_target=True, unroll=unroll)

    small = run.Case(
        f"GPT-2 small, T={t}, batch 16", "gpt", gpt2, {"T": t}, {"T": t}, 16, False, {}
    )
    resnet = run.Case(
        "ResNet-50, 224², batch 128",
        "resnet50",
        "specs/resnet50.lbdl",
        {},
        {"image": 224},
        128,
        True,
        {},
    )
    return [
        medium(16, False),
        medium(16, True),
        Case("gpt2", small, ("forward", "train"), 10),
        Case("resnet50", resnet, ("forward", "train"), 10),
        medium(32, True),
    ]


def peak(kind: str) -> float | None:
    """The device's dense bf16 peak (FLOP/s) from its data sheet; None for one not listed."""
    return next((flops for part, flops in PEAKS if part in kind), None)


def on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def matmul_rate() -> float:
    """FLOP/s of a bf16 matrix product measured here (8,192³ on a GPU; small on a CPU)."""
    n = 8192 if on_gpu() else 256
    a = jnp.ones((n, n), jnp.bfloat16)
    product = jax.jit(lambda x, y: x @ y)
    seconds, _ = harness.time_steady(product, a, a, warmup=3, repeat=10)
    return 2 * n**3 / seconds


def peer_model(case: Case) -> flax_peers.Peer:
    """The Flax peer in bf16; on a GPU, GPT's attention through cuDNN, as lbdl's is."""
    c = case.base
    if c.kind == "gpt":
        impl = "cudnn" if on_gpu() else None
        return flax_peers.make_gpt(c.batch, dtype=jnp.bfloat16, attention=impl, **c.peer_args)
    return run.resnet_peer(c.batch, dtype=jnp.bfloat16, **c.peer_args)


def our_model(case: Case) -> Any:
    c = case.base
    spec, text = str(ROOT / c.spec), c.spec_text()
    return lbdl_dsl.compile(spec, text=text, dtype="bfloat16", unroll=case.unroll, **c.overrides)


def sides(case: Case, shapes: bool = False) -> tuple[run.Side, run.Side]:
    """Ours and the peer, both computing in bf16, on the same data; with ``shapes``, every
    argument a shape (all that compiling needs)."""
    theirs = peer_side(case, shapes)
    ours = our_side(case, *theirs.train_args[2:], shapes=shapes)
    if ours.params != theirs.params:
        raise RuntimeError(f"{case.name}: not the same model ({ours.params:,} parameters here)")
    return ours, theirs


def _call(shapes: bool) -> Callable[..., Any]:
    """How a side's initialisers run: for real, or as shapes only (`jax.eval_shape`)."""
    return jax.eval_shape if shapes else (lambda f, *a: f(*a))


def peer_side(case: Case, shapes: bool = False) -> run.Side:
    """The Flax peer in bf16, its parameters from `run.filled`, on `run.KEY`'s data; its
    training arguments end with that data (x, y)."""
    peer = peer_model(case)
    variables = jax.eval_shape(peer.init, jax.random.key(run.KEY))
    x, y = peer.example_inputs(jax.random.key(run.KEY + 1))
    variables = variables if shapes else run.filled(variables)
    opt = _call(shapes)(peer.opt_init, variables)
    return run.Side(
        peer.forward,
        (variables, x),
        peer.train_step,
        (variables, opt, x, y),
        flax_peers.param_count(variables),
    )


def our_side(case: Case, x: Any, y: Any, shapes: bool = False) -> run.Side:
    """lbdl's model in bf16 on the peer's data (an image as our spec declares it)."""
    model = our_model(case)
    params, state = _call(shapes)(model.init, jax.random.key(run.KEY))
    return run.our_side_of(model, case.base, image_as_declared(x), y, params, state)


def image_as_declared(x: Any) -> Any:
    """An image in float32, the type our spec declares (the model converts it to bf16 itself;
    the Flax peer takes the bf16 image as made); tokens as they are."""
    return x.astype(jnp.float32) if x.ndim == 4 else x


def macs_per_sample(case: Case) -> int:
    c = case.base
    checked = lbdl_dsl.check(str(ROOT / c.spec), text=c.spec_text(), **c.overrides)
    macs = checked.totals["macs"].as_int()
    if macs is None:
        raise RuntimeError(f"{c.name}: the MACs are symbolic")
    return macs


def compile_child(key: str, what: str, side: str, quick: bool) -> float:
    """One side's compile of one program, timed in this (fresh) process: what a user waits
    for at a job's first step, autotuning included."""
    case = next(c for c in cases(quick) if c.key == key)
    ours, peer = sides(case, shapes=True)
    return run.Compiler(*(ours if side == "ours" else peer).of(what))()


class FreshCompiles:
    """Compile times, each in a fresh process of its own.

    XLA:GPU autotunes each matrix product's and convolution's shape once per process and
    keeps the result, so that in one process the side compiled second skips the autotuning
    the first paid for (GPT-2 medium's training step: 4.96 s after the peer's 17.6 s, and
    9.84 s before its 9.72 s). A fresh process per sample gives both sides the same start.
    The peer's compile is shared by the cases that have the same peer (scanned and unrolled).
    """

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.peers: dict[tuple, float] = {}

    def one(self, case: Case, what: str, side: str) -> float:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.key, what, side]
        cmd += ["--quick"] if self.quick else []
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"compile ({case.key}, {what}, {side}) failed:\n{done.stderr[-3000:]}"
            )
        return float(done.stdout.strip().splitlines()[-1])

    def pair(self, case: Case, what: str, first: str) -> tuple[float, float]:
        """(ours, the peer's) seconds, ``first`` compiled first."""
        peer_key = (case.base.kind, repr(case.base.peer_args), case.base.batch, what)
        got: dict[str, float] = {}
        for side in (first, "peer" if first == "ours" else "ours"):
            if side == "peer" and peer_key in self.peers:
                got[side] = self.peers[peer_key]
            else:
                got[side] = self.one(case, what, side)
        self.peers[peer_key] = got["peer"]
        return got["ours"], got["peer"]


def kernels_said(found: dict[str, int]) -> str:
    """``fmhaSoftmax ×1, fmhaSoftmaxBackward ×1``, or ``none``."""
    return (
        ", ".join(f"{k.removeprefix('__cudnn$')} ×{v}" for k, v in sorted(found.items())) or "none"
    )


def fused_kernels(compiled: Any) -> dict[str, int]:
    """How many times each cuDNN attention kernel is called in a compiled program's text."""
    found: dict[str, int] = {}
    for target in re.findall(r'custom_call_target="(__cudnn\$fmha[^"]*)"', compiled.as_text()):
        found[target] = found.get(target, 0) + 1
    return found


def measure(
    case: Case, log: Callable[[str], None], rate: float, kind: str, fresh: FreshCompiles
) -> dict[str, Any]:
    """Every row of one case, its MFU and its fused kernels."""
    ours, peer = sides(case)
    macs = macs_per_sample(case)
    rows: list[harness.Row] = []
    out: dict[str, Any] = {"rows": rows, "macs_per_sample": macs, "batch": case.base.batch}

    def row(metric: str, pair: tuple[float, float]) -> None:
        rows.append(harness.Row(case.name, metric, *pair))
        log(f"  {metric}: ours {pair[0]:.4g}, Flax {pair[1]:.4g}")

    for i, what in enumerate(case.whats):
        row(f"compile: {LABELS[what]} (s)", fresh.pair(case, what, ("ours", "peer")[i % 2]))
        mine, theirs = run.Compiler(*ours.of(what)), run.Compiler(*peer.of(what))
        steady = run.interleaved(case.samples, mine.steady(), theirs.steady())
        row(f"steady: {LABELS[what]} (s)", steady)
        if what != "train":
            continue
        plans = [memory.planned(side.executable) for side in (mine, theirs)]
        row("memory: training step (GiB)", (plans[0]["total"] / 2**30, plans[1]["total"] / 2**30))
        flops = 6 * macs * case.base.batch
        out["train_flops"] = flops
        out["mfu"] = {
            side: {
                "tflops": flops / seconds / 1e12,
                "of_peak": None if peak(kind) is None else flops / seconds / peak(kind),
                "of_matmul": flops / seconds / rate,
            }
            for side, seconds in zip(("ours", "peer"), steady, strict=True)
        }
        out["fused"] = {
            "ours": fused_kernels(mine.executable),
            "peer": fused_kernels(theirs.executable),
        }
        log(f"  MFU: {out['mfu']}; fused attention kernels: {out['fused']}")
    return out


def attention_check() -> dict[str, Any]:
    """lbdl's fused path against its own einsum attention, GPT-2 small's shapes in bf16:
    the largest difference of the outputs and of the gradients, each over the largest value.
    Only ``{"fused": False}`` where the fused kernel does not run (no cuDNN)."""
    keys = jax.random.split(jax.random.key(0), 4)
    shape = (4, 1024, 12, 64) if on_gpu() else (1, 16, 2, 8)
    q, k, v, w = (jax.random.normal(kk, shape, jnp.bfloat16) for kk in keys)
    if runtime.fused_attention(q, k, v, causal=True) is None:
        return {"fused": False}

    def fused(q: Any, k: Any, v: Any) -> Any:
        return runtime.fused_attention(q, k, v, causal=True)

    def einsum(q: Any, k: Any, v: Any) -> Any:
        heads_first = [a.transpose(0, 2, 1, 3) for a in (q, k, v)]
        return runtime.attention(*heads_first, causal=True).transpose(0, 2, 1, 3)

    def results(f: Callable[..., Any]) -> list[np.ndarray]:
        loss = lambda *a: jnp.sum(f(*a).astype(jnp.float32) * w)  # noqa: E731
        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
        return [np.asarray(a, np.float32) for a in (jax.jit(f)(q, k, v), *grads)]

    out = {"fused": True}
    for name, a, b in zip(
        ("output", "dq", "dk", "dv"), results(fused), results(einsum), strict=True
    ):
        out[name] = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
    return out


def machine() -> list[str]:
    """The device, the host and the versions of everything measured."""
    import flax
    import jaxlib
    import optax

    device = jax.devices()[0]
    lines = [
        f"- device: {device.device_kind} ({jax.default_backend()}), {jax.device_count()} device(s)",
        f"- host: {platform.processor() or platform.machine()}, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}",
        f"- jax {jax.__version__}, jaxlib {jaxlib.__version__}, flax {flax.__version__}, "
        f"optax {optax.__version__}",
    ]
    try:
        from jax._src.lib import cuda_versions

        if cuda_versions is not None:
            lines.append(f"- cuDNN {cuda_versions.cudnn_get_version()}")
    except (ImportError, AttributeError):
        pass
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, few samples")
    parser.add_argument("--out", type=Path, help="where to write the report")
    parser.add_argument("--only", help="the cases to run, by key (comma-separated)")
    parser.add_argument(
        "--render", type=Path, metavar="JSON", help="rewrite the report from a run's .json"
    )
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="only the compile rows, each in a fresh process (for --compile-from)",
    )
    parser.add_argument(
        "--compile-from",
        type=Path,
        metavar="JSON",
        help="with --render: take the compile rows from a --compile-only run's .json",
    )
    parser.add_argument("--child", nargs=3, metavar=("KEY", "WHAT", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # a child of FreshCompiles
        print(compile_child(*args.child, quick=args.quick))
        return {}
    if args.render:
        record = json.loads(args.render.read_text(encoding="utf-8"))
        if args.compile_from:
            record = with_compiles(record, json.loads(args.compile_from.read_text("utf-8")))
        write(args.out or args.render.with_suffix(".md"), record)
        return record
    chosen = cases(args.quick)
    if args.only:
        keys = args.only.split(",")
        unknown = sorted(set(keys) - {c.key for c in chosen})
        if unknown:
            known = ", ".join(c.key for c in chosen)
            parser.error(f"--only: no case {', '.join(unknown)} (there are {known})")
        chosen = [next(c for c in chosen if c.key == key) for key in keys]  # in that order
    out = args.out or (None if args.quick else ROOT / "docs" / "performance-gpu.md")
    start = time.perf_counter()
    kind = jax.devices()[0].device_kind
    command = "python bench/accelerator.py" + (" --quick" if args.quick else "")
    command += f" --only {args.only}" if args.only else ""
    command += " --compile-only" if args.compile_only else ""
    record: dict[str, Any] = {"command": command, "machine": machine(), "kind": kind, "cases": {}}
    record["compile_method"] = COMPILE_METHOD

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    fresh = FreshCompiles(args.quick)
    if args.compile_only:
        return compile_rows(chosen, fresh, record, out, log)

    record["matmul_tflops"] = matmul_rate() / 1e12
    log(f"{kind}: bf16 matrix product {record['matmul_tflops']:.1f} TFLOP/s")
    try:
        record["attention_check"] = attention_check()
    except Exception:  # the models' figures still come
        record["attention_check"] = {"fused": False, "error": traceback.format_exc()[-3000:]}
    log(f"attention check: {record['attention_check']}")
    for case in chosen:
        log(case.name)
        try:
            got = measure(case, log, record["matmul_tflops"] * 1e12, kind, fresh)
        except Exception:  # one model's failure leaves the others' figures
            got = {"rows": [], "error": traceback.format_exc()[-4000:]}
            log(got["error"])
        got["rows"] = [dataclasses.asdict(r) for r in got["rows"]]
        record["cases"][case.name] = {**got, "kind": case.base.kind, "mfu_target": case.mfu_target}
        record["minutes"] = (time.perf_counter() - start) / 60
        if out is not None:
            write(out, record)
    return record


def compile_rows(
    chosen: Sequence[Case], fresh: FreshCompiles, record: dict, out: Path | None, log: Callable
) -> dict:
    """--compile-only: each case's compile rows, the figures rewritten after each."""
    for case in chosen:
        log(case.name)
        rows = record["cases"].setdefault(case.name, {"rows": []})["rows"]
        for i, what in enumerate(case.whats):
            ours, theirs = fresh.pair(case, what, ("ours", "peer")[i % 2])
            log(f"  compile: {LABELS[what]}: ours {ours:.4g}, Flax {theirs:.4g}")
            row = harness.Row(case.name, f"compile: {LABELS[what]} (s)", ours, theirs)
            rows.append(dataclasses.asdict(row))
            if out is not None:
                text = json.dumps(record, indent=1) + "\n"
                out.with_suffix(".json").write_text(text, encoding="utf-8")
    return record


def with_compiles(record: dict, compiles: dict) -> dict:
    """``record`` with its compile rows replaced by a --compile-only run's, where it has them."""
    cases_ = {}
    for name, case in record["cases"].items():
        fresh = {r["metric"]: r for r in compiles["cases"].get(name, {}).get("rows", [])}
        rows = [fresh.get(r["metric"], r) for r in case["rows"]]
        cases_[name] = {**case, "rows": rows}
    fresh = [n for n in record["cases"] if compiles["cases"].get(n, {}).get("rows")]
    kept = [n for n in record["cases"] if n not in fresh]
    said = f"compile rows of {'; '.join(fresh)}: `{compiles['command']}`, each in a fresh process"
    if kept:
        said += (
            f"; of {'; '.join(kept)}: this run's, {record.get('compile_method', COMPILE_METHOD)}"
        )
    return {**record, "cases": cases_, "compile_note": said}


COMPILE_METHOD = "each in a fresh process"


def write(out: Path, record: dict) -> None:
    """The report, and beside it the figures it was written from (``.json``); the variants'
    figures are read from every ``performance-gpu-variants*.json`` beside it (one per run, each
    on its own device), the sweeps' from every ``performance-gpu-sweep*.json`` (one per code
    state) and bench/gpu_profile.py's from ``performance-gpu-profile.json``, where they are."""
    variants = [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(out.parent.glob("performance-gpu-variants*.json"))
    ]
    sweeps = [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(out.parent.glob("performance-gpu-sweep*.json"))
    ]
    profile_file = out.with_name("performance-gpu-profile.json")
    profile = (
        json.loads(profile_file.read_text(encoding="utf-8")) if profile_file.is_file() else None
    )
    out.write_text(report(record, variants, sweeps, profile), encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


def verdicts(record: dict) -> list[str]:
    """One line per target: the ratio (ours / Flax) or the MFU, its target, met or not."""
    lines = []
    for name, case in record["cases"].items():
        if "error" in case:
            lines.append(f"- {name}: **not measured**, the run failed (below)")
            continue
        for r in (harness.Row(**r) for r in case["rows"]):
            target = TARGETS[r.metric][case["kind"]]
            if r.ratio is not None:
                met = "met" if r.ratio <= target else "**not met**"
                metric = r.metric.rsplit(" (", 1)[0]
                lines.append(f"- {name}, {metric}: {r.ratio:.2f} (target ≤ {target:g}: {met})")
        mfu = case.get("mfu", {}).get("ours", {}).get("of_peak")
        if case["mfu_target"]:
            if mfu is None:
                said = f"target ≥ {MFU_TARGET:.0%}: **not measured**"
                lines.append(f"- {name}, MFU: no data-sheet peak for this device ({said})")
            else:
                met = "met" if mfu >= MFU_TARGET else "**not met**"
                lines.append(f"- {name}, MFU: {mfu:.1%} (target ≥ {MFU_TARGET:.0%}: {met})")
            fused = case.get("fused", {}).get("ours", {})
            said = kernels_said(fused)
            met = "met" if fused else "**not met**"
            lines.append(f"- {name}, attention through cuDNN's fused kernel: {said} ({met})")
        if "note" in case:  # figures that later code changed, say: read with it
            lines.append(f"  - {name}: {case['note']}")
    return lines


def mfu_table(record: dict) -> list[str]:
    head = (
        "| model | FLOPs per step | ours TFLOP/s | Flax TFLOP/s | ours MFU | Flax MFU "
        "| ours / measured matmul | Flax / measured matmul |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    pct = lambda v: "—" if v is None else f"{v:.1%}"  # noqa: E731
    for name, case in record["cases"].items():
        if "mfu" not in case:
            continue
        a, b = case["mfu"]["ours"], case["mfu"]["peer"]
        lines.append(
            f"| {name} | {case['train_flops']:.3g} | {a['tflops']:.1f} | {b['tflops']:.1f} "
            f"| {pct(a['of_peak'])} | {pct(b['of_peak'])} | {pct(a['of_matmul'])} "
            f"| {pct(b['of_matmul'])} |"
        )
    return lines


def report(
    record: dict,
    variants: Sequence[dict] = (),
    sweeps: Sequence[dict] = (),
    profile: dict | None = None,
) -> str:
    """docs/performance-gpu.md: the table, MFU, targets, checks, bench/accelerator_variants.py's,
    bench/accelerator_sweep.py's and bench/gpu_profile.py's figures where given, what they say,
    the machine and the command."""
    rows = [harness.Row(**r) for case in record["cases"].values() for r in case["rows"]]
    check = record["attention_check"]
    if check.get("fused"):
        agree = ", ".join(f"{k} {v:.2g}" for k, v in check.items() if k != "fused")
        said = f"largest difference over the largest value: {agree}"
    else:
        said = "not run: the fused kernel does not run on this device (no cuDNN)"
    peak_seen = peak(record["kind"])
    lines = [
        "# Performance on an accelerator: lbdl against hand-written Flax",
        "",
        "Written by `bench/accelerator.py` (edit that, not this). Both sides compute in bf16 "
        "(parameters in float32). Compile times are one sample each, in a fresh process (rows "
        "measured otherwise are named under the machine); steady times are medians of "
        "interleaved samples in one process; ratio = ours / Flax: below 1, lbdl is faster "
        "or smaller.",
        "",
        run.table(rows),
        "",
        "## Training step against the device's peak",
        "",
        "FLOPs per step = 6 × lbdl's MACs per sample × the batch (attention's T×T products "
        f"included). MFU is over the data sheet's dense bf16 peak "
        f"({'—' if peak_seen is None else f'{peak_seen / 1e12:g} TFLOP/s'} for {record['kind']}); "
        f"the measured matrix product (bf16, 8,192³ on a GPU) ran at "
        f"{record['matmul_tflops']:.1f} TFLOP/s in this run.",
        "",
        *mfu_table(record),
        "",
        "## Targets",
        "",
        *verdicts(record),
        "",
        "## Checks",
        "",
        f"- lbdl's fused attention against its einsum attention (causal, bf16): {said}",
        *(
            f"- {name}: cuDNN's attention kernels in the compiled training step: ours "
            f"{kernels_said(case['fused']['ours'])}; Flax {kernels_said(case['fused']['peer'])}"
            for name, case in record["cases"].items()
            if "fused" in case and case["kind"] == "gpt"
        ),
        "",
        *(line for found in variants for line in variants_table(found)),
        *(line for sweep in sweeps for line in sweep_section(sweep)),
        *profile_section(profile),
        *analysis(record, variants, sweeps),
        "## Machine and command",
        "",
        *record["machine"],
        f"- the run took {record.get('minutes', 0):.1f} min",
        *([f"- {record['compile_note']}"] if "compile_note" in record else []),
        "",
        "<!-- doctest: skip: needs a GPU; the table above is its output on an H200 -->",
        "```sh",
        record["command"],
        "```",
    ]
    for name, case in record["cases"].items():
        if "error" in case:
            lines += ["", f"### {name}: the run failed", "", "```", case["error"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def variants_table(variants: dict) -> list[str]:
    """One run of bench/accelerator_variants.py: one training step lowered other ways, with
    the compile in a fresh process where the run measured it."""
    fresh = all("fresh_compile" in f for c in variants["cases"].values() for f in c.values())
    lines = [
        f"## Where the training step's time goes ({variants['kind']})",
        "",
        f"`{variants['command']}` on {variants['kind']}: our training step lowered other ways, "
        "against the peer's, in one process (its compile column skips the autotuning an earlier "
        "compile paid for, so it is only a guide"
        + (
            "; the fresh-process compile is each side's in a process of its own)."
            if fresh
            else ")."
        )
        + (f" {variants['note'][0].upper()}{variants['note'][1:]}." if "note" in variants else ""),
        "",
        "| model | variant | step (ms) | vs Flax | TFLOP/s | memory (GiB) | vs Flax | compile (s) "
        + ("| fresh-process compile (s) | vs Flax |" if fresh else "|"),
        "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if fresh else ""),
    ]
    for name, found in variants["cases"].items():
        peer = found["peer"]
        for variant, f in found.items():
            row = (
                f"| {name} | {VARIANT_NAMES.get(variant, variant)} | {f['steady'] * 1e3:.1f} "
                f"| {f['steady'] / peer['steady']:.2f} | {f['tflops']:.0f} | {f['GiB']:.2f} "
                f"| {f['GiB'] / peer['GiB']:.3f} | {f['compile']:.1f} |"
            )
            if fresh:
                ratio = f["fresh_compile"] / peer["fresh_compile"]
                row += f" {f['fresh_compile']:.1f} | {ratio:.2f} |"
            lines.append(row)
    return [*lines, ""]


def sweep_table(results: dict[str, dict[str, Any]]) -> str:
    """bench/accelerator_sweep.py's settings: one row each, its MFU against the target."""
    lines = [
        "| setting | compile (s) | step (s) | TFLOP/s | MFU | target 50 % |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, got in results.items():
        if "error" in got:
            lines.append(choose.failed_row(name, got["error"], 4))
            continue
        mfu = got["mfu"]
        said = "—" if mfu is None else ("met" if mfu >= MFU_TARGET else "not met")
        lines.append(
            f"| {name} | {got['compile']:.1f} | {got['step']:.4g} | {got['tflops']:.1f} "
            f"| {'—' if mfu is None else f'{100 * mfu:.1f} %'} | {said} |"
        )
    return "\n".join(lines)


def sweep_section(sweep: dict | None) -> list[str]:
    """bench/accelerator_sweep.py's table, and the best MFU each side reached in it."""
    if not sweep:
        return []
    done = {n: r for n, r in sweep["results"].items() if r.get("mfu") is not None}
    kinds = sorted({r["kind"] for r in sweep["results"].values() if "kind" in r})
    lines = [
        f"## GPT-2 medium's MFU, setting by setting ({', '.join(kinds)}"
        + (f"; {sweep['label']})" if "label" in sweep else ")"),
        "",
        f"`{sweep['command']}`, each setting in a fresh process (compile included autotuning)"
        + (f"; {sweep['note']}" if "note" in sweep else "")
        + ".",
        "",
        sweep_table(sweep["results"]),
        "",
    ]
    best = {}
    for side, who in (("peer", "Flax"), ("ours", "lbdl")):
        mine = {n: r for n, r in done.items() if ("Flax" in n) == (side == "peer")}
        if mine:
            name = max(mine, key=lambda n: mine[n]["mfu"])
            best[who] = f"{who} {mine[name]['mfu']:.1%} ({name})"
    if best:
        top = max(r["mfu"] for r in done.values())
        said = "met" if top >= MFU_TARGET else "not met"
        lines += [f"Best MFU: {'; '.join(best.values())}. The {MFU_TARGET:.0%} target: {said}.", ""]
    return lines


def profile_section(profile: dict | None) -> list[str]:
    """bench/gpu_profile.py's runs: each side's kernels by kind, and what stands between each
    GPT step and the MFU target, read from the figures."""
    if not profile:
        return []
    from bench import gpu_kernels

    runs = profile["runs"]
    kinds = sorted({r["kind"] for r in runs})
    lines = [
        f"## Where the GPU's time goes, kernel by kind ({', '.join(kinds)})",
        "",
        f"`{profile['command']}`"
        + (f"; {profile['note']}" if "note" in profile else "")
        + ". Milliseconds per training step (kernels per step in brackets); one stream runs "
        "the kernels in turn, so the wall time less their sum is the time the device waited.",
        "",
        gpu_kernels.table(runs),
        "",
    ]
    for r in runs:
        products = r["ms"][gpu_kernels.KINDS[0]] + r["ms"][gpu_kernels.KINDS[1]]
        attention = r["ms"][gpu_kernels.KINDS[2]]
        rest = r["busy_ms"] - products - attention
        who = "lbdl" if r["side"] == "ours" else "Flax"
        said = (
            f"- {r['name']} ({who}): step {1000 * r['step']:.1f} ms; products "
            f"{products:.1f} ms, "
            + (f"attention {attention:.1f} ms, " if attention else "")
            + f"the rest (reductions, elementwise, memsets) {rest:.1f} ms, "
            f"{rest / r['busy_ms']:.0%} of the kernels' time"
        )
        if r.get("mfu") and r["setting"] != "resnet50":
            needed = 1000 * r["step"] * r["mfu"] / MFU_TARGET
            said += (
                f"; at {r['mfu']:.1%} MFU, {MFU_TARGET:.0%} needs a {needed:.1f} ms step, "
                f"{1000 * r['step'] - needed:.1f} ms less"
            )
        lines.append(said + ".")
    return [*lines, ""]


VARIANT_NAMES = {
    "peer": "Flax",
    "ours": "lbdl, as generated",
    "no-remat": "lbdl, keeping every residual",
    "unroll": "lbdl, --unroll",
    "no-fused": "lbdl, einsum attention",
    "cpu-conv": "lbdl, convolutions as on a CPU (1×1 as products, our gradient rules)",
    "cpu-copies": "lbdl, copies without the checkpoint, as on a CPU",
    "cpu-conv-copies": "lbdl, both of the last two, as on a CPU",
    "two-pass": "lbdl, batch norms' statistics in two passes, as on a CPU",
}


def analysis(record: dict, variants: Sequence[dict], sweeps: Sequence[dict]) -> list[str]:
    """What the figures say: each case's training step against the peer, --unroll against
    the scan, and the variants; every number read from the figures."""
    cases_ = {n: c for n, c in record["cases"].items() if "error" not in c}

    def ratio(name: str, metric: str) -> float | None:
        rows = [harness.Row(**r) for r in cases_.get(name, {}).get("rows", [])]
        return next((r.ratio for r in rows if r.metric == metric), None)

    lines = ["## What the figures say", ""]
    for name, case in cases_.items():
        step = ratio(name, "steady: training step (s)")
        mfu = case.get("mfu")
        if step is None or mfu is None:
            continue
        ours, theirs = mfu["ours"]["of_peak"], mfu["peer"]["of_peak"]
        share = "" if ours is None else f"; MFU {ours:.1%} against Flax's {theirs:.1%}"
        memory_ = ratio(name, "memory: training step (GiB)")
        lines.append(
            f"- {name}: the training step takes {step:.2f}× Flax's time and "
            f"{memory_ or 0:.2f}× its memory{share}."
        )
        scanned = name.removesuffix(", --unroll")
        if scanned != name and scanned in cases_:
            a = [
                ratio(name, m) for m in ("steady: training step (s)", "memory: training step (GiB)")
            ]
            b = [
                ratio(scanned, m)
                for m in ("steady: training step (s)", "memory: training step (GiB)")
            ]
            if None not in a + b:
                lines.append(
                    f"  - `--unroll` against the scan: {a[0] / b[0]:.2f}× the step time, "  # type: ignore[operator]
                    f"{a[1] / b[1]:.2f}× the memory."  # type: ignore[operator]
                )
    lines += ["", *GPU_FINDINGS, "", *resnet_said(variants)]
    lines += [line for sweep in sweeps for line in sweep_said(sweep)]
    return [*lines, *mfu_said(record), ""]


def resnet_said(variants: Sequence[dict]) -> list[str]:
    """ResNet-50's convolutions and copies: what the run with fresh-process compiles showed."""
    found = next(
        (
            (v["kind"], c)
            for v in variants
            for n, c in v["cases"].items()
            if n.startswith("ResNet-50") and "cpu-conv" in c and "fresh_compile" in c["peer"]
        ),
        None,
    )
    if found is None:
        return []
    kind, c = found

    def vs(side: str, figure: str) -> str:
        return f"{c[side][figure] / c['peer'][figure]:.2f}"

    return [
        f"ResNet-50 on the {kind}: off a CPU the runtime leaves every convolution to XLA as one "
        "`conv_general_dilated` with JAX's own gradient rules (`runtime.plain_convolutions`). "
        "Computed as on a CPU (1×1 kernels as matrix products, our channels-last gradient "
        f"convolutions), the training step compiled in {vs('cpu-conv', 'fresh_compile')}× the "
        f"peer's time in a fresh process and ran in {vs('cpu-conv', 'steady')}× its step; the "
        f"plain way compiles in {vs('ours', 'fresh_compile')}× and runs in {vs('ours', 'steady')}"
        f"×, at {vs('ours', 'GiB')}× the peer's memory. The copies without their checkpoint, as "
        f"on a CPU, run in {vs('cpu-copies', 'steady')}× the peer's step with plain "
        f"convolutions and {vs('cpu-conv-copies', 'steady')}× with the CPU's, at "
        f"{vs('cpu-copies', 'GiB')}× and {vs('cpu-conv-copies', 'GiB')}× its memory: "
        + (
            "over the peer's, so an accelerator keeps the checkpoint."
            if min(c[k]["GiB"] for k in ("cpu-copies", "cpu-conv-copies")) > c["peer"]["GiB"]
            else "the checkpoint is no longer needed for the memory target."
        ),
        "",
    ]


def sweep_said(sweep: dict | None) -> list[str]:
    """What moved GPT-2 medium's MFU in the sweep: each lever against the plain --unroll step,
    the largest against what it did for the peer, and the target; all read from the figures."""
    if not sweep:
        return []
    mfu = {n: r["mfu"] for n, r in sweep["results"].items() if r.get("mfu") is not None}
    plain = next(
        (n for n in ("--unroll, batch 16", "--unroll, batch 16, V=50,304") if n in mfu), ""
    )
    base, prefix = mfu.get(plain), plain + ", "
    moves = {n.removeprefix(prefix): v - base for n, v in mfu.items() if n.startswith(prefix)}
    if base is None or not moves:
        return []
    lever = max(moves, key=lambda n: moves[n])
    peer = plain.replace("--unroll", "the Flax peer")
    for_peer = (
        f"; it moved the peer's by {100 * (mfu[f'{peer}, {lever}'] - mfu[peer]):+.1f} points"
        if peer in mfu and f"{peer}, {lever}" in mfu
        else ""
    )
    top = max(mfu.values())
    said = "met" if top >= MFU_TARGET else f"not met by either side (at best {top:.1%})"
    padded = " (`--set V=50304`, for training from scratch: GPT-2's weights have 50,257 rows)"
    largest = (
        f"The largest is {lever}{padded if 'V=50,304' in lever else ''}{for_peer}."
        if moves[lever] > 0
        else "None raised it."
    )
    return [
        f"In the sweep ({sweep.get('label', 'above')}), against `{plain}` ({base:.1%} MFU), "
        "the levers moved "
        f"lbdl's MFU by: {'; '.join(f'{n} {100 * v:+.1f} points' for n, v in moves.items())}. "
        f"{largest} The {MFU_TARGET:.0%} target: {said}.",
        "",
    ]


def mfu_said(record: dict) -> list[str]:
    """Where the MFU stops: the best step's share of the matrix product measured in the run,
    and that product's share of the data sheet's peak."""
    peak_ = peak(record["kind"])
    best = [
        max(c["mfu"]["ours"]["of_matmul"], c["mfu"]["peer"]["of_matmul"])
        for c in record["cases"].values()
        if c.get("mfu_target") and "mfu" in c
    ]
    if peak_ is None or not best:
        return []
    product = record["matmul_tflops"] * 1e12 / peak_

    def reached(side: str) -> str:
        top = max(
            c["mfu"][side]["of_peak"]
            for c in record["cases"].values()
            if c.get("mfu_target") and "mfu" in c
        )
        return f"{'met' if top >= MFU_TARGET else 'not met'} (at best {top:.1%})"

    return [
        f"On the {record['kind']}, MFU stops near {max(best) * product:.0%}: the fastest "
        "training step of GPT-2 medium "
        f"reaches {max(best):.0%} of the rate of one large bf16 matrix product measured in the "
        f"same run, which itself reaches {product:.0%} of the data sheet's peak. The rest of the "
        "step (layer norms, GELU, the residual adds, the 50,257-way softmax in float32) is "
        f"bound by memory. The {MFU_TARGET:.0%} target: {reached('ours')} for lbdl, "
        f"{reached('peer')} for Flax."
    ]


GPU_FINDINGS = (
    "On a GPU the scan that keeps lbdl's compile short costs step time. The variants show "
    "where: keeping every residual of the scanned loop instead of recomputing them is slower "
    "still (the loop writes them into stacked buffers and reads them back), while the same "
    "blocks as straight-line code with no checkpoint (`--unroll`) run at least as fast as the "
    "Flax model, at the peer's memory and about twice the scan's compile time. A GPU user who "
    "trains for long gives up seconds of compile for a faster step: `lbdl train --unroll` "
    "(and `lbdl_dsl.compile(..., unroll=True)`) lowers every scanned ×N group that way. The "
    "scan stays the default: on a CPU it is faster to compile and as fast to run "
    "(docs/performance.md), and it needs the least memory.",
    "",
    "Attention goes through cuDNN's fused kernel (`jax.nn.dot_product_attention`, "
    '`implementation="cudnn"`) wherever it runs: on a GPU, in half precision, with no mask '
    "and no active dropout. The scanned loop keeps the kernel's output and softmax statistics "
    "(`keep_products`), so its backward pass does not run the forward kernel again (one forward "
    "and one backward kernel per loop body, above). Without it, the einsum attention makes "
    "the step about twice as slow.",
    "",
    "ResNet-50's short groups are straight-line code already; the checkpoint around each "
    "copy is most of its gap in the training step (the variants that keep every residual or "
    "drop the checkpoint), and it buys back memory. The table's ResNet-50 rows were measured "
    "with its convolutions plain off a CPU (below) and each batch norm's statistics in one "
    "pass (the note under the targets).",
)


if __name__ == "__main__":
    main()
