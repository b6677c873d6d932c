"""ONNX lowerings of attention: the projections as ``MatMul`` (and ``Add``), the heads in one
``Attention`` node (opset 23: heads, grouped keys and values, causal masking), the output
projection; rotary positions as ``RotaryEmbedding`` nodes on queries and keys, and a sliding
window as a constant mask. Key masks (a run-time input) have no form here yet: ONNX gives a
row whose keys are all masked another value than ours (zeros)."""

from __future__ import annotations

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, Unsupported, known
from lbdl_dsl.core.layers.attention import rope_frequency


def _project(e: Emit, x: str, w: str, b: str, sub: str) -> str:
    y = e.node("MatMul", [x, e.param(w)], sub=sub if not e.has_param(b) else f"{sub}/matmul")
    return e.node("Add", [y, e.param(b)], sub=sub) if e.has_param(b) else y


def _head_norms(e: Emit, q: str, k: str) -> tuple[str, str]:
    """The q/k norm (``qknorm=``) of each head's features: (B, T, heads·d) reshaped to
    (B, T, heads, d), an ``RMSNormalization`` or ``LayerNormalization`` over the last axis
    with the gain the heads share, and reshaped back; under ``qkover=all`` the norm of
    (B, T, heads·d) as it is."""
    a = e.a
    kind, eps, *offset = a.qknorm
    d = known(a.dqk)
    out = []
    for x, heads, n in ((q, a.heads, "q"), (k, a.kv or a.heads, "k")):
        h = known(heads)
        if a.qkall:  # OLMo 2's: the whole projection, a gain per feature of every head
            split = x
        else:
            split = e.node("Reshape", [x, e.ints([0, 0, h, d], f"{n}_heads")], sub=f"{n}_heads")
        gain = e.param(f"{n}n")
        if offset:  # Gemma 3's 1 + w, an Add on the stored weight
            gain = e.node("Add", [gain, e.const(float(offset[0]), f"{n}_offset")], sub=f"{n}_gain")
        ins = [split, gain]
        op = "RMSNormalization" if kind == "rmsnorm" else "LayerNormalization"
        if kind != "rmsnorm":
            ins.append(e.param(f"{n}nb"))
        normed = e.node(op, ins, sub=f"{n}_norm", axis=-1, epsilon=float(eps))
        if not a.qkall:
            flat = e.ints([0, 0, h * d], f"{n}_flat")
            normed = e.node("Reshape", [normed, flat], sub=f"{n}_flat")
        out.append(normed)
    return out[0], out[1]


def _rotary(e: Emit, q: str, k: str) -> tuple[str, str]:
    """Rotary positions on the projected queries and keys (B, T, heads·d), rotate-half form,
    the first r = rot·d features of each head turned, as the runtime's ``rope``."""
    a = e.a
    t, d = e.shape(0)[0], known(a.dqk)
    r = int(d * float(a.rot)) // 2 * 2
    inv: np.ndarray
    if a.scaling:  # LLaMA 3's or linear: the reference's frequencies, as float32
        inv = np.array([rope_frequency(i, r, a.theta, a.scaling) for i in range(r // 2)],
                       dtype=np.float32)  # fmt: skip
    else:
        inv = 1.0 / float(a.theta) ** (np.arange(r // 2, dtype=np.float32) * 2.0 / r)
    angles = np.arange(t, dtype=np.float32)[:, None] * inv[None, :]
    gain = float(a.scaling[5]) if a.scaling and a.scaling[0] == "yarn" else 1.0  # YaRN's
    cos, sin = e.const(gain * np.cos(angles), "cos"), e.const(gain * np.sin(angles), "sin")
    batch = e.node("Shape", [q], sub="batch", start=0, end=1)
    size = e.node("Concat", [batch, e.ints([t], "length")], sub="positions_shape", axis=0)
    positions = e.node("Expand", [e.ints([list(range(t))], "positions"), size], sub="positions")
    dim = r if r < d else None
    turned = []
    for x, heads, sub in ((q, a.heads, "q_rotary"), (k, a.kv or a.heads, "k_rotary")):
        ins = [x, cos, sin, positions]
        turned.append(
            e.node(
                "RotaryEmbedding", ins, sub=sub, num_heads=known(heads), rotary_embedding_dim=dim
            )
        )
    return turned[0], turned[1]


def _window(e: Emit) -> str:
    """The sliding window (and causality) as a constant (Tq, Tk) mask, true where kept."""
    tq, tk = e.shape(0)[0], e.shape(1)[0] if len(e.x) > 1 else e.shape(0)[0]
    i, j = np.arange(tq)[:, None], np.arange(tk)[None, :]
    keep = np.abs(i - j) < known(e.a.window)
    if e.a.causal:
        keep &= j <= i
    return e.const(keep, "window", np.bool_)


def mha(e: Emit) -> str:
    a = e.a
    if a.masked:
        raise Unsupported("a key mask (no ONNX form here)")
    if getattr(a, "bias_at", False):
        raise Unsupported("a score bias (not lowered to ONNX here)")
    x = e.x[0]
    z = e.x[1] if len(e.x) > 1 else x
    q = _project(e, x, "wq", "bq", "q")
    k = _project(e, z, "wk", "bk", "k")
    v = _project(e, z, "wv", "bv", "v")
    if a.clip:  # OLMo's clip_qkv
        bounds = [
            e.const(np.float32(-a.clip), "clip_low"),
            e.const(np.float32(a.clip), "clip_high"),
        ]
        q, k, v = (
            e.node("Clip", [t, *bounds], sub=f"{n}_clip") for t, n in ((q, "q"), (k, "k"), (v, "v"))
        )
    if a.qknorm:
        q, k = _head_norms(e, q, k)
    if a.theta:
        q, k = _rotary(e, q, k)
    mask = [_window(e)] if a.window else []
    heads = e.node(
        "Attention",
        [q, k, v, *mask],
        sub="heads",
        q_num_heads=known(a.heads),
        kv_num_heads=known(a.kv or a.heads),
        is_causal=1 if a.causal and not mask else None,
        softcap=float(a.softcap) if a.softcap else None,
        scale=float(a.scale) if a.scale is not None else None,
    )
    y = e.node("MatMul", [heads, e.param("wo")], sub="matmul" if e.has_param("bo") else "")
    return e.node("Add", [y, e.param("bo")]) if e.has_param("bo") else y


def attention(e: Emit) -> str:
    """Queries, keys and values given: one head on T×D, or heads as axes (h×T×d)."""
    a = e.a
    if len(e.x) > 3:
        raise Unsupported("a mask (no ONNX form here)")
    causal = 1 if a.causal else None
    if a.rank == 2:
        return e.node("Attention", e.x[:3], q_num_heads=1, kv_num_heads=1, is_causal=causal)
    if a.rank == 3:
        return e.node("Attention", e.x[:3], is_causal=causal)
    # more leading axes: flattened into one heads axis, and back
    flat = [
        e.node("Reshape", [x, e.ints([0, -1, *e.shape(i)[-2:]], f"flat_{i}")], sub=f"flat_{i}")
        for i, x in enumerate(e.x[:3])
    ]
    y = e.node("Attention", flat, sub="heads", is_causal=causal)
    return e.node("Reshape", [y, e.ints([0, *e.out], "shape")])


LOWER: dict[str, Lowering] = {"mha": mha, "attention": attention}
