"""Lowering of the mixture of experts: the dispatching runtime function, its loss as state."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def moe(e: Emit) -> str:
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in ("router", "gate", "up", "down"))
    kw: dict[str, object] = {"k": e.a.k, "act": repr(e.a.act)}
    if e.a.capacity is not None:  # a capacity bounds the buffers in training only
        kw |= {"capacity": e.a.capacity, "train": e.train}
    if not e.a.renorm:  # the chosen gates as the softmax gave them
        kw["renorm"] = False
    if e.a.pool:  # the routing statistics, for a loss pooled across layers
        kw["stats"] = True
        y, aux, load, prob = e.unpack(
            e.call("moe", e.x[0], weights + "}", **kw), e.target, "aux", "load", "prob"
        )
        e.set_state("load", load)
        e.set_state("prob", prob)
    else:
        y, aux = e.unpack(e.call("moe", e.x[0], weights + "}", **kw), e.target, "aux")
    e.set_state("aux", aux)
    return y


def moe_decode(e: Emit) -> str:
    """In a decoding module every token is routed, none dropped: buffers of capacity E/k
    hold them all (a step of one token must compute what the whole sequence did)."""
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in ("router", "gate", "up", "down"))
    capacity = e.a.experts / e.a.k
    kw: dict[str, object] = {"k": e.a.k, "capacity": capacity, "act": repr(e.a.act)}
    if not e.a.renorm:
        kw["renorm"] = False
    call = e.call("moe", e.x[0], weights + "}", **kw)
    y, aux = e.unpack(call, e.target, "aux")
    e.set_state("aux", aux)
    return y


LOWER: dict[str, Lowering] = {"moe": moe}
DECODE: dict[str, Lowering] = {"moe": moe_decode}
