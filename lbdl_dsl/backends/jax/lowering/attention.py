"""Lowerings of attention and the transformer's composite boxes of Fig. 5.6."""

from __future__ import annotations

from typing import Any

from lbdl_dsl.backends.jax.emit import Emit, Lowering

_WEIGHTS = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")


def _switches(e: Emit) -> dict[str, Any]:
    """The keywords `attention`/`mha` take, written only where they differ from the default."""
    out: dict[str, Any] = {}
    if e.a.causal:
        out["causal"] = True
    if e.a.dropout:
        out |= {"dropout": e.a.dropout, "train": e.train, "key": e.key()}
    return out


def _mha(e: Emit, q_in: str, kv_in: str) -> str:
    weights = ", ".join(f'"{n}": {e.param(n)}' for n in _WEIGHTS if e.has_param(n))
    return e.call("mha", q_in, kv_in, "{" + weights + "}", heads=e.a.heads, **_switches(e))


def mha(e: Emit) -> str:
    return _mha(e, e.x[0], e.x[1] if len(e.x) > 1 else e.x[0])


def attention(e: Emit) -> str:
    q, k, v = (f"{x}[:, None]" for x in e.x[:3])
    mask = [f"{e.x[3]}[:, None]"] if len(e.x) > 3 else []
    a = e.a
    switches: dict[str, Any] = {"causal": True} if a.causal else {}
    if a.p:
        switches |= {"dropout": a.p, "train": e.train, "key": e.key()}
    return f"{e.call('attention', q, k, v, *mask, **switches)}[:, 0]"


def pre_norm(cross: bool) -> Lowering:
    def lower(e: Emit) -> str:
        x = e.x[0]
        norm = e.call("layer_norm", x, e.param("ln_scale"), e.param("ln_bias"), eps=e.a.eps)
        h = e.bind(norm, "h")
        y = e.bind(_mha(e, h, e.x[1] if cross else h), "att")
        return f"{x} + {y}"

    return lower


def ffw(e: Emit) -> str:
    a, x = e.a, e.x[0]
    norm = e.call("layer_norm", x, e.param("ln_scale"), e.param("ln_bias"), eps=a.eps)
    h = e.bind(norm, "h")
    b1 = [e.param("b1")] if e.has_param("b1") else []
    b2 = [e.param("b2")] if e.has_param("b2") else []
    h = e.bind(e.call("dense", h, e.param("w1"), *b1), "h")
    if a.act == "relu":
        act = e.call("relu", h)
    else:
        act = e.call("gelu", h, approximate=True) if a.act == "gelu-tanh" else e.call("gelu", h)
    h = e.bind(e.call("dense", act, e.param("w2"), *b2), "h")
    if a.dropout:
        h = e.bind(e.call("dropout", h, a.dropout, train=e.train, key=e.key()), "h")
    return f"{x} + {h}"


LOWER: dict[str, Lowering] = {
    "attention": attention,
    "mha": mha,
    "self-att": pre_norm(cross=False),
    "cross-att": pre_norm(cross=True),
    "ffw": ffw,
}
