"""Lowerings of the recurrences and state spaces (`core/layers/ssm.py`): runtime calls."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering

_MAMBA = ("in_proj", "conv", "conv_bias", "x_proj", "dt_proj", "dt_bias", "A_log", "D", "out_proj")


def mamba(e: Emit) -> str:
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in _MAMBA) + "}"
    return e.call("mamba_mixer", e.x[0], weights, state=e.a.state, rank=e.a.rank)


LOWER: dict[str, Lowering] = {
    "scan": lambda e: e.call("linear_recurrence", e.x[0], e.x[1]),
    "mamba": mamba,
}
