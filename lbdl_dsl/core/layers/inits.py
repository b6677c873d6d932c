"""Initialiser choices of the boxes with weights: `init=` and `std=` on fc and convolutions.

A box's weights start from its entry's default (uniform with variance 1/fan-in, LeCun's scaling)
unless the spec says otherwise, as the papers do: DiT's adaLN-Zero starts its modulation and its
output layer at zero so that each block is the identity at first, and Xavier's rule (variance
2/(fan-in + fan-out), PyTorch's ``xavier_uniform_``) is what DiT and many transformer codebases
use for their linear layers. ``std=`` draws the weights with that standard deviation (DiT's
timestep MLP, 0.02). Biases start at zero whatever the choice. Counts never depend on it.
"""

from __future__ import annotations

import math

from lbdl_dsl.core.layers.base import HP, ZEROS, Ctx, FanIn, Init, Normal, Std
from lbdl_dsl.core.symbolic import Expr

INIT_HPS = (
    HP(
        "init",
        "choice",
        "fan-in",
        "how the weights start: uniform with variance 1/fan-in, Xavier's (Glorot's) "
        "2/(fan-in + fan-out), zeros (adaLN-Zero), or a normal law, whole or truncated at ±2σ, "
        "of std= (default 1/√fan-in)",
        ("fan-in", "xavier", "glorot", "zeros", "normal", "truncated-normal"),
    ),
    HP(
        "std",
        "float",
        None,
        "the standard deviation: of a uniform law by itself (0.02), of `init=normal` or "
        "`init=truncated-normal`",
    ),
)
"""The two hyper-parameters every entry with an `init` choice declares, in this order."""


def weight_init(c: Ctx, fan_in: Expr | int, fan_out: Expr | int) -> Init:
    """The weights' initialiser for this box: its `init` choice, or `std` when given."""
    std, how = c.hp.get("std"), c.hp.get("init", "fan-in")
    if std is not None and not std > 0:
        c.fail(f"`std` must be positive, got {std}", hparam="std")
    if how in ("normal", "truncated-normal"):
        if std is None:
            known = Expr.lift(fan_in).as_int()
            if known is None:
                c.fail(
                    "a normal law's std defaults to 1/√fan-in, which needs it known", hparam="std"
                )
            std = 1 / math.sqrt(known)
        return Normal(std, how == "truncated-normal")
    if std is not None:
        if how != "fan-in":
            c.fail("give either `init=` or `std=`, not both", hparam="std")
        return Std(std)
    if how == "zeros":
        return ZEROS
    if how in ("xavier", "glorot"):
        total = Expr.lift(fan_in) + fan_out
        known = total.as_int()
        return Std(math.sqrt(2 / known)) if known else FanIn(total / 2)
    return FanIn(fan_in)
