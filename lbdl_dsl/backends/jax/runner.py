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
from lbdl_dsl.compiler.driver import Compiled


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
    compiled: Compiled,
    *,
    batch: int = 2,
    unroll: bool = False,
    dtype: str = "float32",
    repeat: int = 10,
) -> RunResult:
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
