"""Recurrences and state spaces: a linear recurrence (`scan`) and Mamba's selective
state-space block (`mamba`).

`scan` is the construct every linear recurrence reduces to: h_t = a_t ⊙ h_{t−1} + b_t along the
positions, with a (the decay) flowing and b in parentheses; it is associative, so the JAX
backend computes it with ``jax.lax.associative_scan`` (a sequential ``jax.lax.scan`` is its
reference). `mamba` is Gu and Dao's block (2023, Fig. 3) built on it, with the input-dependent
Δ, B and C of the selective scan (S6) and the causal depthwise convolution before it. Its
multiply-accumulates count every projection, the convolution's taps and the scan's three
products per state (decay·h, Δ·B·x, C·h); the states a sequence holds, T×E×N per sample while
training (E×N when decoding), are its activations (`scan_state` in its attributes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    ONES,
    Arrays,
    Attrs,
    Const,
    Ctx,
    FanIn,
    Layer,
    PSpec,
    Shape,
    Weights,
    fmt_shape,
    numpy,
)
from lbdl_dsl.core.layers.maths import softplus_ref
from lbdl_dsl.core.layers.tensor import refuse_bool
from lbdl_dsl.core.symbolic import Expr


def _scan_shape(c: Ctx) -> Shape:
    refuse_bool(c)
    if len(c.x) < 1:
        c.fail("`scan` runs along the first axis: it needs at least one")
    if c.ins[1] != c.x:
        c.fail(
            f"`scan` needs a (decay) and b of one shape, got {fmt_shape(c.x)} and "
            f"{fmt_shape(c.ins[1])}"
        )
    return c.x


def scan_ref(a: Any, b: Any) -> Any:
    """The recurrence as a loop over positions (axis 1 of a batch)."""
    np = numpy()
    h = np.zeros_like(b[:, 0], dtype=np.float64)
    out = np.zeros_like(b, dtype=np.float64)
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        out[:, t] = h
    return out


SCAN = Layer(
    name="scan",
    aliases=("linear-scan", "recurrence"),
    category="Recurrent",
    doc="A linear recurrence along the first axis (positions): h_t = a_t ⊙ h_{t−1} + b_t, "
    "h_{−1} = 0, with the decay a flowing and b in parentheses, of one shape (`scan(b)`). "
    "Linear recurrent units, RetNet's and Mamba's scans reduce to it. Lowered with "
    "`jax.lax.associative_scan` (log T parallel steps); one multiply-accumulate per value.",
    arity=(2, 2),
    shape=_scan_shape,
    macs=lambda c: _numel(c.x),
    example=("16×8", "scan(X)"),
    cases=(("5×3×2", "scan(X)"),),
    reference=lambda xs, p, s, a: scan_ref(xs[0], xs[1]),
)


def _numel(shape: Shape) -> Expr:
    out = Expr.lift(1)
    for d in shape:
        out = out * d
    return out


@dataclass(frozen=True)
class MambaAttrs(Attrs):
    inner: Expr  # E = expand·D
    state: int  # N
    conv: int  # the causal convolution's taps
    rank: int  # Δ's rank R (dt_rank)
    scan_state: Expr  # the values of state a sequence of T holds while training: T·E·N


def _mamba_attrs(c: Ctx) -> MambaAttrs:
    t, d = c.rank(2, what="T×D sequence")
    n, k, expand = c.const("state"), c.const("conv"), c.const("expand")
    if n < 1 or k < 1 or expand < 1:
        c.fail("`state`, `conv` and `expand` are at least 1")
    rank = c.hp.get("rank")
    if rank is None:
        width = d.as_int()
        if width is None:
            c.fail("Δ's rank defaults to ⌈D/16⌉, which needs D known", hparam="rank")
        r = math.ceil(width / 16)
    else:
        r = c.const("rank")
    inner = expand * d
    return MambaAttrs(inner, n, k, r, t * inner * n)


def _mamba_params(c: Ctx) -> dict[str, PSpec]:
    d, a = c.x[1], c.a
    e, n, r = a.inner, a.state, a.rank
    return {
        "in_proj": PSpec((d, 2 * e), FanIn(d), ("embed", "mlp")),
        "conv": PSpec((a.conv, e), FanIn(a.conv), ("kernel", "mlp")),
        "conv_bias": PSpec((e,), Const(0.0), ("mlp",)),
        "x_proj": PSpec((e, r + 2 * n), FanIn(e), ("mlp", "hidden")),
        "dt_proj": PSpec((r, e), FanIn(r), ("hidden", "mlp")),
        # Δ starts near 0.01: softplus⁻¹(0.01) (Mamba draws it log-uniform in [0.001, 0.1])
        "dt_bias": PSpec((e,), Const(math.log(math.expm1(0.01))), ("mlp",)),
        # A = −exp(A_log) starts at −1 for every state (Mamba's S4D-real start is −1…−N)
        "A_log": PSpec((e, n), Const(0.0), ("mlp", "hidden")),
        "D": PSpec((e,), ONES, ("mlp",)),
        "out_proj": PSpec((e, d), FanIn(e), ("mlp", "embed")),
    }


def _mamba_macs(c: Ctx) -> Expr:
    t, d = c.x
    a = c.a
    e, n, r = a.inner, a.state, a.rank
    projections: Expr = t * d * 2 * e + t * e * (r + 2 * n) + t * r * e + t * e * d
    rest: Expr = t * e * a.conv + t * e * n * 3 + t * e * 2  # conv, scan, D·x and gate
    return projections + rest


def mamba_ref(x: Any, p: Weights, a: Any) -> Any:
    """Mamba's block as loops: the causal convolution tap by tap, the state position by
    position (the recurrence written out, not a scan)."""
    np = numpy()
    x = np.asarray(x, np.float64)
    n, r = a.state, a.rank
    xz = x @ p["in_proj"]
    xs, z = np.split(xz, 2, axis=-1)
    w, k = p["conv"], p["conv"].shape[0]
    conv = np.zeros_like(xs)
    for t in range(xs.shape[1]):
        for i in range(k):
            src = t - (k - 1) + i
            if src >= 0:
                conv[:, t] += xs[:, src] * w[i]
    xs = conv + p["conv_bias"]
    xs = xs / (1 + np.exp(-xs))
    dbc = xs @ p["x_proj"]
    dt, bm, cm = dbc[..., :r], dbc[..., r : r + n], dbc[..., r + n :]
    dt = softplus_ref(dt @ p["dt_proj"] + p["dt_bias"])
    big_a = -np.exp(p["A_log"])
    y = np.zeros_like(xs)
    h = np.zeros((x.shape[0], xs.shape[-1], n))
    for t in range(x.shape[1]):
        h = (
            np.exp(dt[:, t, :, None] * big_a) * h
            + (dt[:, t] * xs[:, t])[..., None] * bm[:, t, None, :]
        )
        y[:, t] = np.einsum("ben,bn->be", h, cm[:, t]) + p["D"] * xs[:, t]
    y = y * (z / (1 + np.exp(-z)))
    return y @ p["out_proj"]


def _mamba_ref(xs: Arrays, p: Weights, s: Weights, a: Any) -> Any:
    return mamba_ref(xs[0], p, a)


MAMBA = Layer(
    name="mamba",
    aliases=("selective-ssm", "s6"),
    category="Recurrent",
    doc="Mamba's selective state-space block (Gu & Dao 2023, Fig. 3) on a T×D sequence: in_proj "
    "to 2E (E = expand·D) split into x and a gate z; a causal depthwise conv-1d of `conv` taps "
    "and silu on x; Δ (rank R, then dt_proj and softplus), B and C (N = `state` each) projected "
    "from x; the selective scan h_t = exp(Δ_t·A) ⊙ h_{t−1} + Δ_t·B_t·x_t, y_t = C_t·h_t + D·x_t "
    "with A = −exp(A_log); y·silu(z); out_proj back to D. No norm or residual: write them "
    "around it. Parameters: in_proj (D, 2E), conv (k, E), conv_bias (E), x_proj (E, R+2N), "
    "dt_proj (R, E), dt_bias (E), A_log (E, N), D (E), out_proj (E, D).",
    hparams=(
        HP("state", "size", 16, "N, the state's size per channel"),
        HP("conv", "size", 4, "taps of the causal depthwise convolution"),
        HP("expand", "size", 2, "E/D, the inner width's factor"),
        HP("rank", "size", None, "R, Δ's rank (default ⌈D/16⌉)"),
    ),
    resolve=_mamba_attrs,
    params=_mamba_params,
    macs=_mamba_macs,
    example=("16×32", "mamba"),
    cases=(("7×8", "mamba state=4 conv=3 expand=3 rank=2"),),
    reference=_mamba_ref,
    kept=lambda a, xs, looped: a.scan_state,
)

LAYERS = (SCAN, MAMBA)
