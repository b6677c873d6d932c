"""ONNX lowerings of attention: the projections as ``MatMul`` (and ``Add``), the heads in one
``Attention`` node (opset 23: heads, grouped keys and values, causal masking), the output
projection. Rotary positions, a sliding window and key masks have no form here yet."""

from __future__ import annotations

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, Unsupported, known


def _project(e: Emit, x: str, w: str, b: str, sub: str) -> str:
    y = e.node("MatMul", [x, e.param(w)], sub=sub if not e.has_param(b) else f"{sub}/matmul")
    return e.node("Add", [y, e.param(b)], sub=sub) if e.has_param(b) else y


def mha(e: Emit) -> str:
    a = e.a
    if a.masked or a.theta or a.window:
        what = "a key mask" if a.masked else "rotary positions" if a.theta else "a sliding window"
        raise Unsupported(f"{what} (no ONNX form here)")
    x = e.x[0]
    z = e.x[1] if len(e.x) > 1 else x
    q = _project(e, x, "wq", "bq", "q")
    k = _project(e, z, "wk", "bk", "k")
    v = _project(e, z, "wv", "bv", "v")
    heads = e.node(
        "Attention",
        [q, k, v],
        sub="heads",
        q_num_heads=known(a.heads),
        kv_num_heads=known(a.kv or a.heads),
        is_causal=1 if a.causal else None,
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
    raise Unsupported(f"attention over {a.rank} axes")


LOWER: dict[str, Lowering] = {"mha": mha, "attention": attention}
