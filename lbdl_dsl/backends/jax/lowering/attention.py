"""Lowerings of attention and the transformer's composite boxes of Fig. 5.6."""

from __future__ import annotations

from typing import Any

from lbdl_dsl.backends.jax.emit import Emit, Fused, Layout, Lowering

_WEIGHTS = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "qn", "kn", "qnb", "knb")


def _switches(e: Emit) -> dict[str, Any]:
    """The keywords `attention`/`mha` take, written only where they differ from the default."""
    out: dict[str, Any] = {}
    if e.a.causal:
        out["causal"] = True
    if e.a.dropout:
        out |= {"dropout": e.a.dropout, "train": e.train, "key": e.key()}
    if e.a.masked:  # (B, S) flags of the keys, broadcast over heads and queries
        out["mask"] = e.call("key_mask", e.x[-1])
    if e.a.bias_at:  # (B or 1, G, T, S), added to the scores
        out["bias"] = e.x[e.a.bias_at]
    if e.a.scale is not None:
        out["scale"] = e.a.scale
    if e.a.softcap:
        out["softcap"] = e.a.softcap
    return out


def _rotary(a: Any) -> dict[str, Any]:
    """The window, rotary and q/k norm options of `mha_lm` and `mha_step`; a scaling and a
    q/k norm only where given, so that the modules of the models without them read as
    before."""
    options: dict[str, Any] = {"window": a.window, "theta": a.theta, "fraction": a.rot}
    options |= {"scaling": a.scaling} if a.scaling else {}
    options |= {"qknorm": a.qknorm} if a.qknorm else {}
    options |= {"clip": a.clip} if a.clip else {}
    return options | ({"qkall": True} if a.qkall else {})


def _mha(e: Emit, q_in: str, kv_in: str) -> str:
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in _WEIGHTS if e.has_param(n)) + "}"
    a = e.a
    if a.kv == a.heads and not a.theta and not a.window and not a.qknorm and not a.clip:
        return e.call("mha", q_in, kv_in, weights, heads=a.heads, **_switches(e))
    options = _rotary(a)
    return e.call("mha_lm", q_in, kv_in, weights, heads=a.heads, kv=a.kv, **options, **_switches(e))


def mha(e: Emit) -> str:
    return _mha(e, e.x[0], e.x[e.a.keys_at])


def attention(e: Emit) -> str:
    a = e.a
    switches: dict[str, Any] = {"causal": True} if a.causal else {}
    if a.p:
        switches |= {"dropout": a.p, "train": e.train, "key": e.key()}
    if a.scale is not None:
        switches["scale"] = a.scale
    if a.rank > 2:  # heads (and any other leading axes) are already axes
        mask = [e.x[a.mask_at]] if a.mask_at else []
        if a.bias_at:
            switches["bias"] = e.x[a.bias_at]
        return e.call("attention_nd", *e.x[:3], *mask, **switches)
    q, k, v = (f"{x}[:, None]" for x in e.x[:3])
    mask = [f"{e.x[a.mask_at]}[:, None]"] if a.mask_at else []
    if a.bias_at:
        switches["bias"] = f"{e.x[a.bias_at]}[:, None]"
    return f"{e.call('attention', q, k, v, *mask, **switches)}[:, 0]"


def mha_step(e: Emit) -> str:
    """A causal self-attention in a decoding module: the step with its cache of keys and
    values (`runtime/decode.py`), which it returns updated. It reads the box's dictionary of
    parameters whole, where `Decoder.split` may have put the three projections in one."""
    weights = e.params() or (
        "{" + ", ".join(f'"{n}": {e.param(n)}' for n in _WEIGHTS if e.has_param(n)) + "}"
    )
    a = e.a
    options = _rotary(a) | ({"scale": a.scale} if a.scale is not None else {})
    options |= {"softcap": a.softcap} if a.softcap else {}
    call = e.call(
        "mha_step",
        e.x[0],
        weights,
        e.state("k"),
        e.state("v"),
        pos=e.decoding("pos"),
        heads=a.heads,
        kv=a.kv or a.heads,
        **options,
    )
    y, k, v = e.unpack(call, e.target, "k", "v")
    e.set_state("k", k)
    e.set_state("v", v)
    return y


DECODE: dict[str, Lowering] = {"mha": mha_step}
"""Lowerings that differ in a decoding module (`Lowerer(decode=True)`)."""

LAYOUTS: dict[str, Layout] = {
    "mha": Layout(rows=("wo",), fused=Fused(("wq", "wk", "wv"), ("bq", "bk", "bv"), "wqkv"))
}
"""The weights `mha_step` reads fused and by rows where given so."""

LOWER: dict[str, Lowering] = {
    "attention": attention,
    "mha": mha,
}
