"""``--run``: compile the model with ``jax.jit``, run it on random inputs, and time it.

Times are wall-clock on this machine, for orientation only (benchmarks with ratios against a peer
live in bench/): the compile time of the jitted ``apply``, the first output, and the median of
ten steady forward steps.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import jax

from lbdl_dsl.backends.jax.model import Model
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.symbolic import Expr

HEADROOM = 0.8
"""The share of the device's memory (or, on CPU, of the machine's available memory) a run may
plan to use: the estimate leaves out XLA's scratch space and the runtime's own."""


@dataclass(frozen=True)
class RunResult:
    outputs: dict[str, tuple[int, ...]]
    init_s: float
    compile_s: float
    first_s: float
    step_s: float
    batch: int
    device: str

    def lines(self) -> list[str]:
        out = [f"{name}: {shape}" for name, shape in self.outputs.items()]
        return out + [
            f"device   {self.device}, batch {self.batch}",
            f"init     {self.init_s * 1e3:.1f} ms",
            f"compile  {self.compile_s * 1e3:.1f} ms (jax.jit of apply)",
            f"first    {self.first_s * 1e3:.1f} ms",
            f"step     {self.step_s * 1e3:.2f} ms (median of 10 forward steps)",
        ]


def run(
    compiled: Checked,
    *,
    batch: int = 2,
    unroll: bool = False,
    dtype: str = "float32",
    repeat: int = 10,
) -> RunResult:
    check_runnable(compiled, batch, dtype)
    model = Model(compiled, unroll=unroll, dtype=dtype)
    t0 = time.perf_counter()
    params, state = model.init(jax.random.key(0))
    jax.block_until_ready(params)
    init_s = time.perf_counter() - t0
    inputs = model.example_inputs(jax.random.key(1), batch)
    t0 = time.perf_counter()
    executable = jax.jit(model.apply).lower(params, state, *inputs).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out, _ = jax.block_until_ready(executable(params, state, *inputs))
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(executable(params, state, *inputs))
        times.append(time.perf_counter() - t0)
    if not isinstance(out, dict):
        out = {next(iter(model.outputs)): out}
    shapes = {k: tuple(v.shape) for k, v in out.items()}
    return RunResult(
        shapes,
        init_s,
        compile_s,
        first_s,
        statistics.median(times),
        batch,
        str(jax.devices()[0].platform),
    )


def check_runnable(compiled: Checked, batch: int, dtype: str) -> None:
    """Refuse, before anything is allocated, a run that cannot work: a size left symbolic, a
    batch that is not a whole number ≥ 1, or more memory than the device has."""
    checked = compiled
    if checked.free:
        symbols = ", ".join(checked.free)
        example = " ".join(f"{s}=..." for s in checked.free)
        raise LbdlError(
            f"--run needs a value for every size, and {symbols} "
            f"{'is' if len(checked.free) == 1 else 'are'} left symbolic",
            hint=f"give {'it' if len(checked.free) == 1 else 'them'} values: --set {example}",
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise LbdlError(f"--batch takes a whole number ≥ 1, got {batch!r}")
    need = estimate_bytes(compiled, batch, dtype)
    have = available_bytes()
    if have is not None and need > HEADROOM * have:
        raise LbdlError(
            f"--run would need about {_size(need)} for a batch of {batch} "
            f"(parameters, inputs and activations), and this {_device()} has {_size(have)}",
            hint="run a smaller batch (--batch), or smaller sizes (--set)",
        )


def estimate_bytes(compiled: Checked, batch: int, dtype: str) -> int:
    """A lower bound of a forward run's memory: parameters and state in float32, the inputs
    and every box's output for the whole batch in the compute type."""
    totals = compiled.totals
    width = 2 if dtype == "bfloat16" else 4
    weights = _int(totals["params"]) + _int(totals["state"])
    inputs = sum(_elements(t.shape) for t in compiled.inputs.values())
    return 4 * weights + width * batch * (inputs + _int(totals["activations"]))


def available_bytes() -> int | None:
    """The memory a run may use: the device's limit where JAX reports one (GPUs, TPUs), else
    the machine's available memory; None where neither can be read."""
    stats = None
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        import os

        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _device() -> str:
    return "machine" if jax.devices()[0].platform == "cpu" else "device"


def _int(value: object) -> int:
    v = value.as_int() if isinstance(value, Expr) else value
    return int(v) if isinstance(v, int) else 0


def _elements(shape: tuple[Expr, ...]) -> int:
    n = 1
    for d in shape:
        n *= _int(d)
    return n


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"
