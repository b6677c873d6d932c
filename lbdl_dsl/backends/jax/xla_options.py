"""The options of XLA's compiler that a training step compiles with, by platform.

A ×N group's backward pass computes each copy's forward again (the checkpoint of
``runtime.module``: ``each_copy``, ``scan_group``). JAX wraps that recomputation in optimization
barriers, so that it waits for the copy's cotangent. XLA:CPU's pass ``cse_barrier_expander``
removes every barrier before scheduling, and its scheduler then computes all the copies' values
again at once, as early as it can: at GPT's peak (2 blocks, ``bench/memory_ratio.py --peak gpt
dp 2``) 438 KiB of 739 KiB were recomputed values, every copy's at the same time. With the pass
off, the barriers reach the scheduler: 212 KiB of 518 KiB, one copy's at a time, as the memory
estimate (``compiler.memory``, its ``recomputed`` line) assumes. The gradients are the same bit
for bit (tests/backends/test_xla_options.py). A GPU's compiler schedules with the barriers
anyway (and drops them after): the test's reproducer on an H200 (jax 0.11.2, no option) held
640, 769 and 1,026 KiB of temporaries for 1, 2 and 4 copies, one copy's recomputation at a
time, where XLA:CPU holds 640, 1,280 and 2,560 KiB; so the option is given on a CPU only.
"""

from __future__ import annotations

KEEP_BARRIERS = {"xla_disable_hlo_passes": "cse_barrier_expander"}
"""XLA:CPU's option that keeps the checkpoint's optimization barriers until scheduling."""


def step_options(platform: str) -> dict[str, str]:
    """The compiler options for a training step on ``platform`` (``jax.Device.platform``)."""
    return dict(KEEP_BARRIERS) if platform == "cpu" else {}
