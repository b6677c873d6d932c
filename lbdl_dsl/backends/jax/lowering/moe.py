"""Lowering of the mixture of experts: the dispatching runtime function, its loss as state."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def moe(e: Emit) -> str:
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in ("router", "gate", "up", "down"))
    call = e.call("moe", e.x[0], weights + "}", k=e.a.k, capacity=e.a.capacity, act=repr(e.a.act))
    y, aux = e.unpack(call, e.target, "aux")
    e.set_state("aux", aux)
    return y


def moe_decode(e: Emit) -> str:
    """In a decoding module every token is routed, none dropped: buffers of capacity E/k
    hold them all (a step of one token must compute what the whole sequence did)."""
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in ("router", "gate", "up", "down"))
    capacity = e.a.experts / e.a.k
    call = e.call("moe", e.x[0], weights + "}", k=e.a.k, capacity=capacity, act=repr(e.a.act))
    y, aux = e.unpack(call, e.target, "aux")
    e.set_state("aux", aux)
    return y


LOWER: dict[str, Lowering] = {"moe": moe}
DECODE: dict[str, Lowering] = {"moe": moe_decode}
