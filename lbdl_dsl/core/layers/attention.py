"""Attention (§ 4.8) and the transformer's three blocks of Fig. 5.6.

`self-att`, `cross-att` and `ffw` are declared as composite layers rather than spec-level blocks
so that the diagram draws them as the book does (one tall box) and their parameters have short,
stable names; their inside is the book's: pre-norm, the operator, the residual sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.activation import gelu_ref
from lbdl_dsl.core.layers.base import (
    HP,
    ONES,
    ZEROS,
    Arrays,
    Attrs,
    Ctx,
    FanIn,
    Layer,
    PSpec,
    Shape,
    Step,
    Weights,
    fmt_shape,
    numel,
    numpy,
)
from lbdl_dsl.core.layers.dense import dense_ref
from lbdl_dsl.core.layers.norm import layernorm_ref, rmsnorm_ref
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class HeadsAttrs(Attrs):
    """Multi-head attention resolved: heads, per-head sizes, output size, switches."""

    heads: int
    dqk: Expr
    dv: Expr
    out: Expr
    causal: bool
    dropout: float
    bias: bool
    kbias: bool
    eps: float | None  # the pre-norm's, for self-att and cross-att
    kv: int = 0  # key/value heads (grouped-query when fewer than `heads`)
    obias: bool = False  # a bias on the output projection
    theta: float = 0.0  # rotary positions' base; 0: none
    rot: float = 1.0  # the fraction of each head's features that rotate
    window: int = 0  # sliding window (keys within `window` positions); 0: none
    norm: str = "layernorm"  # the pre-norm, for self-att and cross-att
    masked: bool = False  # the last input is a key-padding mask (S bool)
    keys_at: int = 0  # the input the keys and values come from (0: the queries' own)
    bias_at: int = 0  # the input that is an additive score bias (G×T×S); 0: none
    scale: float | None = None  # the scores' factor; None: 1/√dqk
    offset: float = 0.0  # the pre-norm's gain is offset + its scale (Gemma's 1 + w)
    scaling: tuple[Any, ...] = ()  # the rotary frequencies' rescaling (`rope_scaling`); (): none
    qknorm: tuple[Any, ...] = ()  # each head's queries and keys normalised: (kind, eps); (): not
    softcap: float = 0.0  # the scores squashed as c·tanh(s/c) before the mask (Gemma 2); 0: not
    qkall: bool = False  # the q/k norm over all heads' features at once, a gain each (OLMo 2)
    clip: float = 0.0  # q, k and v clamped to [-clip, clip] after their projections (OLMo)
    pre: bool = True  # the pre-norm, for self-att and cross-att (OLMo 2: none)
    post: bool = False  # a norm of the branch's output (Gemma 2's sandwich, OLMo 2's)
    affine: bool = True  # the norms' gain and bias (OLMo's have none)

    def items(self) -> tuple[tuple[str, Any], ...]:
        """The record, less an offset of 0 (the pre-norm of every model but Gemma's), an empty
        rotary scaling (every model's but LLaMA 3's) and no q/k norm (every model's but
        Qwen3's), so that the records of the models before them read as they did."""
        quiet = ("offset", "scaling", "qknorm", "softcap", "qkall", "clip", "post")
        shown = [(k, v) for k, v in super().items() if k not in quiet or v]
        return tuple((k, v) for k, v in shown if k not in ("pre", "affine") or not v)


@dataclass(frozen=True)
class FfwAttrs(Attrs):
    hidden: Expr
    dropout: float
    bias: bool
    act: str
    eps: float
    norm: str = "layernorm"
    offset: float = 0.0  # the pre-norm's gain is offset + its scale (Gemma's 1 + w)
    pre: bool = True  # the pre-norm (OLMo 2: none)
    post: bool = False  # a norm of the branch's output (Gemma 2's sandwich, OLMo 2's)
    affine: bool = True  # the norms' gain and bias (OLMo's have none)

    def items(self) -> tuple[tuple[str, Any], ...]:
        """The record, less the defaults of the options later models added, so that the
        records of the models before them read as they did."""
        shown = [(k, v) for k, v in super().items() if k not in ("offset", "post") or v]
        return tuple((k, v) for k, v in shown if k not in ("pre", "affine") or not v)


def _kv(c: Ctx, h: int) -> int:
    """Key/value heads: `kv=` if given (it must divide the query heads), else one per query head."""
    if c.hp.get("kv") is None:
        return h
    kv = c.const("kv")
    if kv < 1 or h % kv:
        c.fail(
            f"{kv} key/value heads do not divide the {h} query heads",
            "kv=1 is multi-query attention; kv=h is multi-head attention",
            "kv",
        )
    return kv


def _heads(c: Ctx, d: Expr) -> tuple[int, Expr, Expr]:
    h = c.const("h")
    if h < 1:
        c.fail("the number of heads must be at least 1", hparam="h")
    dqk, dv = c.hp.get("dqk"), c.hp.get("dv")
    if dqk is None or dv is None:
        v = d.as_int()
        if v is not None and v % h:
            c.fail(f"{h} heads do not divide the dimension {d}", "give dqk= and dv=", "h")
    return h, (dqk if dqk is not None else d / h), (dv if dv is not None else d / h)


def _mha_specs(c: Ctx, d: Expr, dz: Expr, out: Expr, prefix: str = "") -> dict[str, PSpec]:
    h, dqk, dv = _heads(c, d)
    kv = c.a.kv
    specs = {
        "wq": PSpec((d, h * dqk), FanIn(d), ("embed", "heads")),
        "wk": PSpec((dz, kv * dqk), FanIn(dz), ("embed", "kv")),
        "wv": PSpec((dz, kv * dv), FanIn(dz), ("embed", "kv")),
        "wo": PSpec((h * dv, out), FanIn(h * dv), ("heads", "embed")),
    }
    if c.a.bias:
        specs |= {
            "bq": PSpec((h * dqk,), ZEROS, ("heads",)),
            "bk": PSpec((kv * dqk,), ZEROS, ("kv",)),
            "bv": PSpec((kv * dv,), ZEROS, ("kv",)),
        }
        if not c.a.kbias:  # Whisper: every projection but the keys'
            del specs["bk"]
    if c.a.obias:
        specs["bo"] = PSpec((out,), ZEROS, ("embed",))
    if c.a.qknorm:  # a gain (and bias) per feature of a head, which the heads share, or
        # under qkover=all per feature of every head (OLMo 2)
        q, k = ((h * dqk, "heads"), (kv * dqk, "kv")) if c.a.qkall else ((dqk, "norm"),) * 2
        specs |= {"qn": PSpec(q[:1], ONES, q[1:]), "kn": PSpec(k[:1], ONES, k[1:])}
        if c.a.qknorm[0] == "layernorm":
            specs |= {"qnb": PSpec(q[:1], ZEROS, q[1:]), "knb": PSpec(k[:1], ZEROS, k[1:])}
    return {prefix + k: v for k, v in specs.items()}


def _mha_macs(c: Ctx, t: Expr, d: Expr, s: Expr, dz: Expr, out: Expr) -> Expr:
    h, dqk, dv = _heads(c, d)
    projections: Expr = t * d * h * dqk + s * dz * c.a.kv * (dqk + dv) + t * h * dv * out
    return projections + h * t * _keys(s, c.a.window) * (dqk + dv)  # Q·Kᵀ and A·V


def _keys(s: Expr, window: int) -> Expr | int:
    """Keys each query reads: all S, or under a sliding window the band's W (when S is only
    known as a symbol, S ≥ W is assumed: the window exists for long sequences)."""
    if not window:
        return s
    known = s.as_int()
    return min(known, window) if known is not None else window


def _heads_attrs(c: Ctx, out: Expr | None = None) -> HeadsAttrs:
    """Resolve the heads of `mha`, `self-att` and `cross-att` against the query input."""
    x = c.rank(2, what="T×D sequence")
    masked = _masked(c)
    others = [i for i in range(1, len(c.ins)) if i != _bias_input(c)]
    if len(others) - masked > 1:
        c.fail(
            "attention reads its queries, at most one sequence for its keys, a G×T×S score "
            "bias and a key mask, which must be bool and come last",
            "declare the mask `M: S bool` (true keeps a key); a score bias has three axes",
        )
    keys = _keys_input(c)
    if keys is not None:
        c.rank(2, what="S×D sequence", i=keys)
    z = _mha_z(c)
    if masked and c.ins[-1] != (z[0],):
        c.fail(
            f"the key mask must be {z[0]} bool (one flag per key), got {fmt_shape(c.ins[-1])}",
            "true keeps a key; padding positions are false",
        )
    h, dqk, dv = _heads(c, x[1])
    bias_at = _bias_input(c) or 0
    if bias_at and c.ins[bias_at][1:] != (x[0], z[0]) or bias_at and not _heads_fit(c, bias_at, h):
        c.fail(
            f"the score bias must be {h}×{x[0]}×{z[0]} or 1×{x[0]}×{z[0]} (heads × queries × "
            f"keys), got {fmt_shape(c.ins[bias_at])}",
            "a bias shared by the heads has a first axis of 1",
        )
    theta = c.hp["theta"] if c.hp["rope"] else 0.0
    rot = c.hp["rot"]
    if theta:
        if _keys_input(c) is not None:
            c.fail("rotary positions are for self-attention", "drop rope=true", "rope")
        if not 0.0 < rot <= 1.0:
            c.fail(f"the rotary fraction must be in (0, 1], got {rot}", hparam="rot")
        if theta <= 0:
            c.fail(f"the rotary base must be positive, got {theta}", hparam="theta")
        d = dqk.as_int() if isinstance(dqk, Expr) else dqk
        if d is not None and int(d * rot) < 2:
            c.fail(f"rot={rot} of {d} features rotates none", hparam="rot")
    scaling = rope_scaling(c) if theta else ()
    if not theta and c.hp.get("rscale", "none") != "none":
        c.fail("a rotary scaling needs rotary positions", "add rope=true", "rscale")
    window = 0
    if c.hp.get("window") is not None:
        window = c.const("window")
        if window < 1:
            c.fail(f"the window must be at least 1, got {window}", hparam="window")
    obias = c.hp.get("obias")
    return HeadsAttrs(
        h,
        dqk,
        dv,
        out if out is not None else x[1],
        bool(c.hp.get("causal", False)),
        c.hp["p"],
        c.hp["bias"],
        c.hp["kbias"],
        c.hp.get("eps"),
        kv=_kv(c, h),
        obias=c.hp["bias"] if obias is None else obias,
        theta=theta,
        rot=rot,
        window=window,
        norm=c.hp.get("norm", "layernorm"),
        masked=masked,
        keys_at=keys or 0,
        bias_at=bias_at,
        scale=_scale(c),
        offset=float(c.hp.get("offset", 0.0)),
        scaling=scaling,
        qknorm=_qknorm(c),
        softcap=_softcap(c),
        qkall=_qkall(c),
        clip=_clip(c),
        pre=bool(c.hp.get("pre", True)),
        post=bool(c.hp.get("post", False)),
        affine=bool(c.hp.get("affine", True)),
    )


def _clip(c: Ctx) -> float:
    """``clip=``: the bound c of the projections' clamp to [-c, c], or 0 for none."""
    clip = c.hp.get("clip")
    if clip is None:
        return 0.0
    if not clip > 0:
        c.fail(f"the projections' clamp must be positive, got {clip}",
               "a bound c clamps q, k and v to [-c, c] (OLMo's clip_qkv); leave clip= out for none",
               "clip")  # fmt: skip
    return float(clip)


def _qkall(c: Ctx) -> bool:
    """``qkover=all``: the q/k norm over the whole projection, all heads at once."""
    over = c.hp.get("qkover", "head")
    if over == "all" and c.hp.get("qknorm", "none") == "none":
        c.fail("qkover= says what a q/k norm runs over, and there is none",
               "add qknorm=rmsnorm or layernorm", "qkover")  # fmt: skip
    return bool(over == "all")


def _softcap(c: Ctx) -> float:
    """``softcap=``: the scores' cap c (c·tanh(s/c)), or 0 for none."""
    cap = c.hp.get("softcap")
    if cap is None:
        return 0.0
    if not cap > 0:
        c.fail(f"the scores' cap must be positive, got {cap}", hparam="softcap")
    return float(cap)


def _qknorm(c: Ctx) -> tuple[Any, ...]:
    """``qknorm=``'s record, ``(kind, eps)``, or () without one. Its epsilon is ``qkeps=``,
    else the block's pre-norm's (Qwen3 gives both norms one ``rms_norm_eps``), else 1e-6;
    with a gain offset + w (``qkoffset=``, else the pre-norm's ``offset``: Gemma 3's 1 + w)
    the record is ``(kind, eps, offset)``."""
    kind = c.hp.get("qknorm", "none")
    eps = c.hp.get("qkeps")
    eps = None if eps == "none" else eps  # a block's `qkeps=none`, passed on: not given
    if kind == "none":
        if eps is not None:
            c.fail("qkeps= is the epsilon of a q/k norm, and there is none",
                   "add qknorm=rmsnorm or layernorm", "qkeps")  # fmt: skip
        return ()
    eps = eps if eps is not None else c.hp.get("eps", 1e-6)
    if not eps > 0:
        c.fail(f"the q/k norm's epsilon must be positive, got {eps}", hparam="qkeps")
    offset = c.hp.get("qkoffset")
    offset = float(offset if offset is not None else c.hp.get("offset") or 0.0)
    return (kind, float(eps), offset) if offset else (kind, float(eps))


def rope_scaling(c: Ctx) -> tuple[Any, ...]:
    """``rscale=``'s record: ``("linear", f)`` or ``("llama3", f, low, high, context)``, or ()
    for the plain rotary. Checked here, so that every backend takes the numbers as they are."""
    kind = c.hp.get("rscale", "none")
    if kind == "none":
        if c.hp.get("rfactor") is not None:
            c.fail("rfactor= scales nothing without rscale=", "add rscale=llama3 or linear",
                   "rfactor")  # fmt: skip
        return ()
    factor = c.hp.get("rfactor")
    if factor is None or not factor > 0:
        c.fail(
            f"rscale={kind} divides the frequencies by rfactor, a positive number",
            "give rfactor= (`factor` in config.json's rope_scaling)",
            "rfactor",
        )
    if kind == "linear":
        if c.hp.get("rattn") is not None:
            c.fail("rattn= is YaRN's", "give it with rscale=yarn", "rattn")
        return ("linear", float(factor))
    high = c.hp.get("rhigh")
    low, high = float(c.hp["rlow"]), float(high if high is not None else _RHIGH[kind])
    if not 0 < low < high:
        c.fail(
            f"rscale={kind} blends between rlow and rhigh, which need 0 < rlow < rhigh; "
            f"got {low:g} and {high:g}",
            "LLaMA 3.1's are rlow=1.0 rhigh=4.0, YaRN's rlow=1.0 rhigh=32.0",
            "rhigh",
        )
    context = c.const("rctx")
    if context < 1:
        c.fail(f"the pretraining context must be at least 1, got {context}", hparam="rctx")
    if kind == "llama3":
        if c.hp.get("rattn") is not None:
            c.fail("rattn= is YaRN's", "give it with rscale=yarn", "rattn")
        return ("llama3", float(factor), low, high, int(context))
    attn = c.hp.get("rattn")
    if attn is None:  # the paper's √(1/t) = 0.1·ln(s) + 1
        attn = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    if not attn > 0:
        c.fail(f"the rotated features' factor must be positive, got {attn}", hparam="rattn")
    return ("yarn", float(factor), low, high, int(context), float(attn))


_RHIGH = {"llama3": 4.0, "yarn": 32.0}
"""``rhigh=``'s default for each scaling: LLaMA 3.1's high_freq_factor, YaRN's beta_fast."""


def yarn_bounds(r: int, theta: float, low: float, high: float, context: int) -> tuple[float, float]:
    """YaRN's ramp over the r/2 pairs (Peng et al. 2023): the pair that turns ``high`` times
    within the context (whole pairs, rounded down) and the one that turns ``low`` times
    (rounded up), as transformers' ``find_correction_range``; their pair index is
    r·ln(context / (2π·turns)) / (2 ln θ). Equal bounds are set 0.001 apart."""

    def pair(turns: float) -> float:
        return r * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(theta))

    first, last = max(math.floor(pair(high)), 0), min(math.ceil(pair(low)), r - 1)
    return float(first), float(last) + (0.001 if first == last else 0.0)


def _heads_fit(c: Ctx, i: int, h: int) -> bool:
    g = c.ins[i][0]
    return g == Expr.lift(1) or g == Expr.lift(h)


def _scale(c: Ctx) -> float | None:
    """`scale=`: the scores' factor; `none` is 1 (T5); left out, 1/√d."""
    s = c.hp.get("scale")
    if s is None:
        return None
    if s == "none":
        return 1.0
    if not s > 0:
        c.fail(f"the scale must be positive, got {s}", "`scale=none` multiplies by 1", "scale")
    return float(s)


def rope_frequency(i: int, r: int, theta: float, scaling: tuple[Any, ...] = ()) -> float:
    """Pair i's angle per position, θ^(−2i/r), rescaled as ``scaling`` says (`rope_scaling`),
    written from the papers' case analysis. Linear (Chen et al. 2023): divided by the factor
    s. LLaMA 3.1's: with L the pretraining context and λ = 2π/ω the pair's wavelength, ω/s when
    λ > L/low (too slow to have turned within L), ω when λ < L/high (turned many times), and
    between them the mix (1 − m)·ω/s + m·ω, m = (L/λ − low)/(high − low). YaRN's (Peng et al.
    2023): the same three cases, the mix linear in the pair's index between `yarn_bounds`."""
    omega = float(theta ** (-2.0 * i / r))
    if not scaling:
        return omega
    s = float(scaling[1])
    if scaling[0] == "linear":
        return omega / s
    low, high, context = (float(v) for v in scaling[2:5])
    if scaling[0] == "yarn":  # divided below the ramp, kept above it, mixed along it
        first, last = yarn_bounds(r, theta, low, high, int(context))
        kept = 1.0 - min(max((i - first) / (last - first), 0.0), 1.0)
        return (1 - kept) * omega / s + kept * omega
    wavelength = 2 * math.pi / omega
    if wavelength > context / low:
        return omega / s
    if wavelength < context / high:
        return omega
    m = (context / wavelength - low) / (high - low)
    return (1 - m) * omega / s + m * omega


def rope_ref(x: Any, theta: float, fraction: float = 1.0, scaling: tuple[Any, ...] = ()) -> Any:
    """Rotary positions on (B, H, T, d), written from the formula: the pair (x_i, x_{i+r/2}) at
    position t is multiplied by the 2×2 rotation of angle t·ω_i, ω_i = `rope_frequency` (and
    under YaRN by its factor on the rotated features)."""
    np = numpy()
    y = np.array(x, dtype=np.float64)
    d = x.shape[-1]
    r = int(d * fraction) // 2 * 2
    gain = float(scaling[5]) if scaling and scaling[0] == "yarn" else 1.0  # YaRN's factor
    for t in range(x.shape[2]):
        for i in range(r // 2):
            angle = t * rope_frequency(i, r, theta, scaling)
            c, s = gain * math.cos(angle), gain * math.sin(angle)
            a, b = x[:, :, t, i], x[:, :, t, i + r // 2]
            y[:, :, t, i] = c * a - s * b
            y[:, :, t, i + r // 2] = s * a + c * b
    return y


def band_ref(tq: int, tk: int, window: int) -> Any:
    """Keep key j for query i when fewer than `window` positions apart, as a loop."""
    np = numpy()
    keep = np.zeros((tq, tk), bool)
    for i in range(tq):
        for j in range(tk):
            keep[i, j] = abs(i - j) < window
    return keep


def attention_ref(
    q: Any,
    k: Any,
    v: Any,
    mask: Any = None,
    causal: bool = False,
    bias: Any = None,
    scale: float | None = None,
    softcap: float = 0.0,
) -> Any:
    """softargmax(QKᵀ/√d + bias)·V over (B, H, T, d) arrays, position by position (``scale``
    instead of 1/√d where given; with ``softcap`` c the scaled scores squashed to
    c·tanh(s/c) first); a query whose keys are all masked gives zeros."""
    np = numpy()
    b, h, tq, d = q.shape
    keep = np.ones((b, h, tq, k.shape[2]), bool)
    if mask is not None:
        keep &= np.broadcast_to(mask, keep.shape)
    if causal:
        keep &= np.tri(tq, k.shape[2], dtype=bool)
    scores = q @ k.swapaxes(-1, -2) * (1 / math.sqrt(d) if scale is None else scale)
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    if bias is not None:
        scores = scores + np.broadcast_to(bias, scores.shape)
    scores = np.where(keep, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.where(keep, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(-1, keepdims=True)
    return (e / np.where(total > 0, total, 1.0)) @ v


def _mha_call_ref(xs: Arrays, p: Weights, a: Any) -> Any:
    """`mha`'s inputs as written: X, then keys Z and a score bias if given, then a key mask
    if `a.masked`."""
    mask = xs[-1] if a.masked else None
    bias = xs[a.bias_at] if a.bias_at else None
    return mha_ref(xs[0], xs[a.keys_at], p, a, key_mask=mask, bias=bias)


def mha_ref(
    x: Any,
    z: Any,
    p: Weights,
    a: HeadsAttrs,
    prefix: str = "",
    key_mask: Any = None,
    bias: Any = None,
) -> Any:
    """Multi-head attention with separate projections; heads split on the last axis."""
    np = numpy()

    def proj(v: Any, name: str) -> Any:
        return dense_ref(v, p[prefix + "w" + name], p.get(prefix + "b" + name))

    q, k, v = proj(x, "q"), proj(z, "k"), proj(z, "v")
    if a.clip:  # OLMo's clip_qkv
        q, k, v = (np.clip(t, -a.clip, a.clip) for t in (q, k, v))
    if a.qknorm and a.qkall:  # the whole projection, every head's features at once
        q, k = (_head_norm_ref(t, p, prefix + n, a.qknorm) for t, n in ((q, "qn"), (k, "kn")))

    def heads(t: Any, n: int) -> Any:
        return t.reshape(*t.shape[:2], n, -1).transpose(0, 2, 1, 3)

    q, k, v = heads(q, a.heads), heads(k, a.kv), heads(v, a.kv)
    if a.qknorm and not a.qkall:  # each head's features, before the rotary
        q, k = (_head_norm_ref(t, p, prefix + n, a.qknorm) for t, n in ((q, "qn"), (k, "kn")))
    if a.theta:
        q, k = (rope_ref(t, a.theta, a.rot, a.scaling) for t in (q, k))
    group = a.heads // a.kv  # query head i reads key/value head i // group
    k = np.stack([k[:, i // group] for i in range(a.heads)], axis=1)
    v = np.stack([v[:, i // group] for i in range(a.heads)], axis=1)
    mask = band_ref(q.shape[2], k.shape[2], a.window) if a.window else None
    if key_mask is not None:
        keys = np.asarray(key_mask, bool)[:, None, None, :]
        mask = keys if mask is None else keys & mask
    o = attention_ref(q, k, v, mask, a.causal, bias, a.scale, a.softcap)
    o = o.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1)
    return np.asarray(proj(o, "o"))


def _head_norm_ref(x: Any, p: Weights, name: str, qknorm: tuple[Any, ...]) -> Any:
    """A q/k norm: over the last axis (a head's features, or under ``qkover=all`` all of
    them), with gain ``p[name]`` (plus the record's offset, where it has one)."""
    kind, eps, *offset = qknorm
    gain = p[name] + (offset[0] if offset else 0.0)
    if kind == "rmsnorm":
        return rmsnorm_ref(x, gain, eps)
    return layernorm_ref(x, gain, p[name + "b"], eps, 1)


_ATT_HP = (
    HP("h", "size", doc="number of heads"),
    HP("dqk", "size", None, "query and key dimension per head (default D/h)"),
    HP("dv", "size", None, "value dimension per head (default D/h)"),
    HP("bias", "bool", False, "biases on the projections (the book's have none; GPT-2's do)"),
    HP(
        "kbias",
        "bool",
        True,
        "with bias=true, a bias on the keys' projection too (Whisper's has none)",
    ),
    HP("p", "float", 0.0, "dropout on the attention weights"),
    HP(
        "kv",
        "size",
        None,
        "key/value heads, dividing h (default h; fewer: grouped-query, 1: multi-query)",
    ),
    HP("obias", "bool", None, "a bias on the output projection (default: as `bias`)"),
    HP("rope", "bool", False, "rotary positions on queries and keys (rotate-half form)"),
    HP("theta", "float", 10000.0, "the rotary base θ"),
    HP("rot", "float", 1.0, "the fraction of each head's features that rotate"),
    HP(
        "rscale",
        "choice",
        "none",
        "the rotary frequencies' scaling for a longer context: `linear` divides them by "
        "`rfactor`; `llama3` (LLaMA 3.1) divides the slow ones, keeps the fast, blends between "
        "by wavelength; `yarn` (YaRN) the same, blending by the pair's index, and multiplies the "
        "rotated features by `rattn`",
        ("none", "linear", "llama3", "yarn"),
    ),
    HP("rfactor", "float", None, "the rotary scaling's factor (`rscale=`)"),
    HP(
        "rlow",
        "float",
        1.0,
        "`rscale=llama3`, `yarn`: wavelengths over rctx/rlow are divided (YaRN's beta_slow)",
    ),
    HP(
        "rhigh",
        "float",
        None,
        "`rscale=llama3`, `yarn`: wavelengths under rctx/rhigh are kept (default 4.0; "
        "`yarn`: 32.0, YaRN's beta_fast)",
    ),
    HP("rctx", "size", 8192, "`rscale=llama3`, `yarn`: the context of pretraining"),
    HP(
        "rattn",
        "float",
        None,
        "`rscale=yarn`: the factor on the rotated features (default 0.1·ln(rfactor) + 1)",
    ),
    HP("window", "size", None, "sliding window: keys fewer than this many positions away"),
    HP(
        "qknorm",
        "choice",
        "none",
        "each head's queries and keys normalised over their dqk features before the rotary, "
        "one gain per feature shared by the heads (Qwen3: rmsnorm; Phi's qk_layernorm)",
        ("none", "rmsnorm", "layernorm"),
    ),
    HP(
        "clip",
        "float",
        None,
        "the query, key and value projections clamped to [-clip, clip] (OLMo's clip_qkv)",
    ),
    HP(
        "qkover",
        "choice",
        "head",
        "what the q/k norm runs over: each head's features with gains the heads share (head), "
        "or the whole projection at once with a gain per feature of every head (all: OLMo 2)",
        ("head", "all"),
    ),
    HP(
        "qkeps",
        "float",
        None,
        "the q/k norm's epsilon (default: the pre-norm's eps, else 1e-6; `none`: the default, "
        "so that a block can pass its own parameter on)",
        ("none",),
    ),
    HP(
        "qkoffset",
        "float",
        None,
        "the q/k norm's gain is qkoffset + w (default: the pre-norm's offset, else 0; Gemma 3: 1)",
    ),
    HP(
        "softcap",
        "float",
        None,
        "the scaled scores squashed to c·tanh(s/c) before the mask (Gemma 2's "
        "attn_logit_softcapping, 50)",
    ),
    HP(
        "scale",
        "float",
        None,
        "the scores' factor (default 1/√dqk; `none`: 1, as T5)",
        ("none",),
    ),
)


def _mha_shape(c: Ctx) -> Shape:
    return (c.x[0], c.a.out)


def _masked(c: Ctx) -> bool:
    """A last input of type bool (beyond the queries) is a key-padding mask."""
    return len(c.ins) > 1 and len(c.dtypes) == len(c.ins) and c.dtypes[-1] == "bool"


def _bias_input(c: Ctx) -> int | None:
    """The index of an additive score bias: a number input of three axes (G×T×S, G the heads
    or 1) beyond the queries; a sequence of keys has two."""
    for i in range(1, len(c.ins)):
        if len(c.ins[i]) == 3 and (len(c.dtypes) != len(c.ins) or c.dtypes[i] != "bool"):
            return i
    return None


def _keys_input(c: Ctx) -> int | None:
    """The index of the keys' sequence when it is not the queries' own."""
    n = len(c.ins) - (1 if _masked(c) else 0)
    rest = [i for i in range(1, n) if i != _bias_input(c)]
    return rest[0] if rest else None


def _mha_step(c: Ctx) -> Step:
    """A causal self-attention decodes with a cache of its keys and values: the kv heads only
    (grouped-query), and only the last W positions under a sliding window (a ring buffer;
    while the context is a symbol, taken to be at least W, as the MACs take it)."""
    a = c.a
    if _keys_input(c) is not None:
        return Step("", "`mha` reads its keys from another sequence (cross-attention)")
    if a.masked:
        return Step("", "`mha` masks padding keys with an input of flags")
    if not a.causal:
        return Step("", "`mha` without causal=true lets each position see the later ones")
    kv = a.kv or a.heads

    def cache(s: Expr) -> dict[str, PSpec]:
        n = s
        if a.window:
            known = s.as_int()
            n = Expr.lift(a.window if known is None else min(known, a.window))
        roles = ("kv", "cached", "cached")
        return {"k": PSpec((kv, n, a.dqk), ZEROS, roles), "v": PSpec((kv, n, a.dv), ZEROS, roles)}

    return Step("cache", cache=cache)


def _mha_kept(a: HeadsAttrs, xs: tuple[tuple[Expr, ...], ...], looped: bool) -> Expr:
    """What attention's backward pass keeps per sample besides its output: Q (T·h·dqk), K
    and V (S·kv·(dqk + dv), S the keys' input's length: the queries' own or the second
    input's); and, outside a ×N group's loop, the attention weights (h·T·S), which the
    backward pass of the weighted sum and of the softargmax read (inside one, the loop
    computes them again from Q and K)."""
    t, s = xs[0][0], xs[a.keys_at][0]
    kv = a.kv or a.heads
    qkv = t * a.heads * a.dqk + s * kv * (a.dqk + a.dv)
    return qkv if looped else qkv + t * s * a.heads


def _mha_z(c: Ctx) -> Shape:
    i = _keys_input(c)
    return c.ins[i] if i is not None else c.x


MHA = Layer(
    name="mha",
    tall=True,
    aliases=("multi-head-attention",),
    category="Attention",
    doc="Multi-head attention (§ 4.8): queries from the first input, keys and values from the "
    "second (or the first again), H heads, scores scaled by 1/√dqk, softargmax, the "
    "concatenated heads projected by W^O. `causal=true` masks the future. Since 2020: "
    "`kv=` key/value heads (grouped-query; 1: multi-query), `rope=true` rotary positions on "
    "queries and keys (rotate-half form, base `theta`, fraction `rot` of each head), `window=W` "
    "a sliding window (keys fewer than W positions away; MACs count the band), `obias` the "
    "output projection's bias apart from the others'. A last input of type bool (S flags, "
    "true keeps) masks padding keys: `mha(M)`, `mha(Z, M)`. An input of three axes, G×T×S "
    "(G the heads or 1), is added to the scores before the softargmax (T5's relative "
    "positions, ALiBi): `mha(B)`, `mha(Z, B, M)`; `scale=` replaces 1/√dqk (`none`: 1). "
    "`qknorm=rmsnorm` normalises each head's queries and keys before the rotary (Qwen3; "
    "`layernorm`: Phi's), gains qn and kn (dqk) shared by the heads, biases qnb and knb. "
    "Parameters: wq (D, h·dqk), "
    "wk (D, kv·dqk), wv (D, kv·dv), wo (h·dv, out), biases bq, bk, bv, bo.",
    hparams=(
        *_ATT_HP,
        HP("causal", "bool", False, "mask attention to later positions"),
        HP("out", "size", None, "output dimension (default D)"),
    ),
    arity=(1, 4),
    ports=(("Q", 0), ("K", 1), ("V", 1)),
    resolve=lambda c: _heads_attrs(c, c.hp.get("out")),
    shape=_mha_shape,
    params=lambda c: _mha_specs(c, c.x[1], _mha_z(c)[1], c.y[1]),
    macs=lambda c: _mha_macs(c, c.x[0], c.x[1], _mha_z(c)[0], _mha_z(c)[1], c.y[1]),
    from_annotation=(("out", -1),),
    example=("16×64", "mha h=4"),
    step=lambda c: _mha_step(c),
    kept=_mha_kept,
    cases=(
        ("5×8", "mha h=2 bias=true causal=true"),
        ("6×16", "mha h=4 kv=2"),
        ("9×16", "mha h=4 kv=1 causal=true window=4"),
        ("7×16", "mha h=2 window=2"),
        ("6×12", "mha h=2 rope=true theta=500.0 bias=true obias=false"),
        ("6×16", "mha h=2 causal=true rope=true theta=100.0 rscale=linear rfactor=4.0"),
        # YaRN on half of each head (4 of 8 features: 2 pairs), its factor given
        (
            "6×16",
            "mha h=2 causal=true rope=true rot=0.5 theta=100.0 rscale=yarn rfactor=8.0 "
            "rctx=32 rlow=2.0 rhigh=16.0 rattn=1.3",
        ),  # fmt: skip
        ("6×8; B: 2×6×6", "mha(B) h=2 scale=none"),
        ("6×8; Z: 5×8; B: 1×6×5", "mha(Z, B) h=2 scale=0.5 kv=1"),
        ("6×16", "mha h=4 kv=2 causal=true rope=true theta=100.0 qknorm=rmsnorm"),
        ("5×8", "mha h=2 qknorm=layernorm qkeps=1e-3 bias=true"),
        ("5×8", "mha h=2 qknorm=rmsnorm qkoffset=0.5"),
        # OLMo 2's: the whole projections normalised, a gain per feature of every head
        ("6×16", "mha h=4 kv=2 causal=true rope=true theta=100.0 qknorm=rmsnorm qkover=all"),
        ("5×8", "mha h=2 qknorm=layernorm qkover=all qkeps=1e-3 bias=true"),
        # OLMo's: the three projections clamped
        ("6×16", "mha h=4 kv=2 causal=true rope=true theta=100.0 clip=0.3"),
        ("6×16", "mha h=4 kv=2 causal=true softcap=0.5 scale=0.4 window=3"),
    ),
    reference=lambda xs, p, s, a: _mha_call_ref(xs, p, a),
)


def _att_shape(c: Ctx) -> Shape:
    q = c.x
    if len(q) < 2:
        c.fail(f"`attention` needs …×T×D queries, got {fmt_shape(q)}")
    lead = q[:-2]
    k = c.rank(len(q), what=f"{'×'.join([*map(str, lead), 'S', 'D'])} keys", i=1)
    v = c.rank(len(q), what=f"{'×'.join([*map(str, lead), 'S', 'D'])} values", i=2)
    if k[:-2] != lead or v[:-2] != lead:
        c.fail(
            f"queries, keys and values must share their leading axes {fmt_shape(lead)}",
            "heads are a leading axis: h×T×d queries read h×S×d keys",
        )
    if q[-1] != k[-1]:
        c.fail(f"queries ({q[-1]}) and keys ({k[-1]}) must have the same dimension")
    if k[-2] != v[-2]:
        c.fail(f"keys ({k[-2]}) and values ({v[-2]}) must have the same length")
    kinds = [c.dtypes[i] if i < len(c.dtypes) else "float" for i in range(3, len(c.ins))]
    if kinds.count("bool") > 1 or len(kinds) - kinds.count("bool") > 1:
        c.fail(
            "after Q, K and V, attention takes one Boolean mask and one additive score bias",
            "a mask is `bool` (M: T×S bool, true keeps); a bias is numbers added to the scores",
        )
    for i in range(3, len(c.ins)):
        if c.ins[i] not in ((q[-2], k[-2]), (*lead, q[-2], k[-2])):
            what = "mask" if kinds[i - 3] == "bool" else "score bias"
            c.fail(
                f"the {what} must be {q[-2]}×{k[-2]} (or with the leading axes), "
                f"got {fmt_shape(c.ins[i])}"
            )
    return (*lead, q[-2], v[-1])


@dataclass(frozen=True)
class AttAttrs(Attrs):
    causal: bool
    p: float
    rank: int  # the queries' axes per sample: 2 for T×D, more with leading (heads) axes
    mask_at: int = 0  # the input that is a Boolean mask; 0: none
    bias_at: int = 0  # the input that is an additive score bias; 0: none
    scale: float | None = None  # None: 1/√D


def _att_attrs(c: Ctx) -> AttAttrs:
    extra = range(3, len(c.ins))
    masks = [i for i in extra if i < len(c.dtypes) and c.dtypes[i] == "bool"]
    biases = [i for i in extra if i not in masks]
    return AttAttrs(
        c.hp["causal"],
        c.hp["p"],
        len(c.x),
        masks[0] if masks else 0,
        biases[0] if biases else 0,
        _scale(c),
    )


def _att_macs(c: Ctx) -> Expr:
    q, k, v = c.ins[:3]
    return numel(q[:-1]) * k[-2] * (q[-1] + v[-1])


def _att_ref(xs: Arrays, p: Weights, s: Weights, a: Any) -> Any:
    """Leading axes flattened into one heads axis, the mask broadcast over them."""
    np = numpy()
    q, k, v = (x.reshape(x.shape[0], -1, *x.shape[-2:]) for x in xs[:3])
    mask = bias = None
    if a.mask_at:
        m = np.asarray(xs[a.mask_at], bool)
        mask = m.reshape(m.shape[0], -1, *m.shape[-2:])
    if a.bias_at:
        b = np.asarray(xs[a.bias_at])
        bias = b.reshape(b.shape[0], -1, *b.shape[-2:])
    out = attention_ref(q, k, v, mask, a.causal, bias, a.scale)
    return out.reshape(*xs[0].shape[:-1], xs[2].shape[-1])


ATTENTION = Layer(
    name="attention",
    aliases=("att",),
    category="Attention",
    doc="The attention operator of § 4.8 on queries Q (T×D), keys K (S×D), values V (S×D'), "
    "an optional Boolean T×S mask M (true keeps) and an optional T×S score bias B (numbers): "
    "softargmax(QKᵀ/√D + B)·V, `scale=` replacing 1/√D (`none`: 1). Masked and, with "
    "`causal=true`, future scores are set to −∞ before the softargmax. Leading axes are "
    "batch-like (heads as an axis: h×T×d queries with h×S×d keys and values give h×T×d'); a "
    "T×S mask applies to every one of them.",
    hparams=(
        HP("causal", "bool", False, "mask attention to later positions"),
        HP("p", "float", 0.0, "dropout on the attention weights"),
        _ATT_HP[-1],
    ),
    arity=(3, 5),
    resolve=_att_attrs,
    shape=_att_shape,
    macs=_att_macs,
    example=("16×64", "attention(K, V)"),
    cases=(
        ("4×6×8", "attention(K, V) causal=true"),
        ("2×3×5×4", "attention(K, V)"),
        ("6×8; K: 5×8; V: 5×4; B: 6×5", "attention(K, V, B) scale=none"),
        ("2×6×8; K: 2×6×8; V: 2×6×8; B: 2×6×6; M: 6×6 bool", "attention(K, V, B, M)"),
    ),
    reference=_att_ref,
)


def _given(hp: Mapping[str, Any], names: tuple[str, ...]) -> list[str]:
    """The hyper-parameters a composite passes on to a box of its inside: those it has."""
    return [n for n in names if hp.get(n) is not None]


_MHA_PASSED = ("h", "dqk", "dv", "bias", "kbias", "p", "causal")
# Passed on only when set: the classic models' insides stay as they were.
_MHA_OPTIONS = ("kv", "obias", "window", "scale", "qkeps", "qkoffset", "softcap", "clip")
_ROPE = ("rope", "theta", "rot")
_ROPE_SCALE = ("rscale", "rfactor", "rlow", "rhigh", "rctx", "rattn")
_NORM = ("norm", "choice", "layernorm", "the pre-norm", ("layernorm", "rmsnorm"))


def _att_inside(cross: bool) -> Callable[[Mapping[str, Any], tuple[int, ...]], str]:
    def inside(hp: Mapping[str, Any], ranks: tuple[int, ...]) -> str:
        if hp.get("qkeps") == "none":  # not given: the pre-norm's, below
            hp = {k: v for k, v in hp.items() if k != "qkeps"}
        passed = _given(hp, _MHA_PASSED) + _given(hp, _MHA_OPTIONS)
        qk = ""  # the q/k norm, whose epsilon is the pre-norm's unless given
        if hp.get("qknorm", "none") != "none":
            passed += ["qknorm", *(["qkover"] if hp.get("qkover", "head") != "head" else [])]
            qk = "" if hp.get("qkeps") is not None else " qkeps=eps"
            if hp.get("qkoffset") is None and float(hp.get("offset") or 0.0):
                qk += f" qkoffset={float(hp['offset']):g}"  # the pre-norm's, as Gemma 3's
        if hp.get("rope"):
            passed += _ROPE
            if hp.get("rscale", "none") != "none":  # unscaled insides read as before
                passed += _given(hp, _ROPE_SCALE)
        args = "".join(f" {n}={n}" for n in passed)
        biased = 3 in ranks[1:]
        masked = len(ranks) - biased > (2 if cross else 1)
        on = "X: T×D, Z: S×E" if cross else "X: T×D"
        reads = ["Z"] if cross else []
        if biased:
            on += ", B: G×T×S" if cross else ", B: G×T×T"
            reads = [*reads, "B"]
        if masked:
            on += ", M: S bool" if cross else ", M: T bool"
            reads = [*reads, "M"]
        return (
            f"block inside({', '.join([*passed, 'eps'])}) on {on}:\n"
            f"{_pre_text(hp)}"
            f"  mha{'(' + ', '.join(reads) + ')' if reads else ''}{args}{qk} -> att\n"
            f"{_post_text(hp)}"
            "  +(X)\n"
        )

    return inside


def _self_attrs(c: Ctx) -> HeadsAttrs:
    if _keys_input(c) is not None:
        c.fail(
            "self-att reads one sequence; besides it, it takes only a G×T×T score bias and a "
            "key mask",
            "declare the mask `M: T bool`, or use cross-att(Z) for keys from another sequence",
        )
    return _heads_attrs(c)


def _cross_attrs(c: Ctx) -> HeadsAttrs:
    if _keys_input(c) is None:
        c.fail("cross-att needs the sequence its keys come from: cross-att(Z)")
    return _heads_attrs(c)


def _norm_ref(x: Any, p: Weights, norm: str, eps: float, offset: float = 0.0) -> Any:
    """A composite's norm; ``p`` is empty under ``affine=false``."""
    gain = p["scale"] + offset if "scale" in p else None
    if norm == "rmsnorm":
        return rmsnorm_ref(x, gain, eps)
    return layernorm_ref(x, gain, p.get("bias"), eps, 1)


def _norm_line(hp: Mapping[str, Any], name: str, present: bool) -> str:
    """An inside's norm line named ``name`` (the pre-norm ``ln``, the post-norm ``pn``), where
    ``present``: the composite's kind, ε, offset and affinity."""
    if not present:
        return ""
    return f"  {hp.get('norm', 'layernorm')} eps=eps{_norm_options(hp)} -> {name}\n"


def _pre_text(hp: Mapping[str, Any]) -> str:
    return _norm_line(hp, "ln", bool(hp.get("pre", True)))


def _post_text(hp: Mapping[str, Any]) -> str:
    return _norm_line(hp, "pn", bool(hp.get("post")))


def _norm_options(hp: Mapping[str, Any]) -> str:
    """The norms' ``offset=`` and ``affine=false`` in a composite's inside, where given."""
    offset = float(hp.get("offset") or 0.0)
    text = f" offset={offset:g}" if offset else ""
    return text + ("" if hp.get("affine", True) else " affine=false")


_PRE_OFFSET = HP("offset", "float", 0.0, "the pre-norm's gain is offset + w (1: Gemma's 1 + w)")
_AFFINE = HP(
    "affine",
    "bool",
    True,
    "the norms' trainable gain (and a layernorm's bias); false: OLMo's norms, which have none",
)
_PRE = HP(
    "pre",
    "bool",
    True,
    "the pre-norm; false: the branch reads the block's input as it is (OLMo 2's layers, "
    "whose one norm is the branch's output's: pre=false post=true)",
)
_POST = HP(
    "post",
    "bool",
    False,
    "a second norm, of the branch's output before the residual sum, as the pre-norm (Gemma "
    "2's sandwich: post_attention_layernorm, post_feedforward_layernorm)",
)


def _pre_norm_ref(xs: Arrays, p: Weights, a: HeadsAttrs) -> Any:
    mask = xs[-1] if a.masked else None
    bias = xs[a.bias_at] if a.bias_at else None
    assert a.eps is not None, "self-att and cross-att declare `eps`; only a bare mha has none"
    h = _norm_ref(xs[0], p.get("ln", {}), a.norm, a.eps, a.offset) if a.pre else xs[0]
    z = xs[a.keys_at] if a.keys_at else h
    out = mha_ref(h, z, p["att"], a, key_mask=mask, bias=bias)
    if a.post:
        out = _norm_ref(out, p.get("pn", {}), a.norm, a.eps, a.offset)
    return xs[0] + out


SELF_ATT = Layer(
    name="self-att",
    aliases=("self-attention",),
    category="Transformer",
    doc="The self-attention block of Fig. 5.6: layernorm, multi-head attention with Q, K and V "
    "from that one sequence, and the residual sum. `causal=true` masks the future. LLaMA's and "
    "Mistral's: `norm=rmsnorm rope=true kv=8 window=4096` (the options of `mha`). "
    "`self-att(M)` with M: T bool masks padding keys; `self-att(B)` with B: G×T×T adds a score "
    "bias (G the heads or 1: T5's relative positions, ALiBi).",
    hparams=(
        *_ATT_HP,
        HP("causal", "bool", False, "mask attention to later positions"),
        HP(*_NORM),
        HP("eps", "float", 1e-5, "the pre-norm's epsilon"),
        _PRE_OFFSET,
        _AFFINE,
        _PRE,
        _POST,
    ),
    arity=(1, 3),
    resolve=lambda c: _self_attrs(c),
    inside=_att_inside(cross=False),
    example=("16×64", "self-att h=4 causal=true"),
    cases=(
        ("5×8", "self-att h=2 bias=true kbias=false"),
        ("7×16", "self-att h=4 kv=2 rope=true window=3 causal=true norm=rmsnorm"),
        ("5×8", "self-att h=2 kv=1 causal=true norm=rmsnorm offset=1.0"),
        ("6×16", "self-att h=4 kv=1 bias=true obias=false rope=true rot=0.5 theta=100.0"),
        # pair wavelengths 6.3, 20, 63, 199 against 64/4 and 64/1: kept, mixed, mixed, divided
        ("6×16", "self-att h=2 kv=1 rope=true theta=100.0 rscale=llama3 rfactor=8.0 rctx=64"),
        # YaRN's ramp over pairs 0 to 3 of 4: kept, mixed, mixed, divided; factor 0.1·ln 4 + 1
        ("6×16", "self-att h=2 kv=1 rope=true theta=100.0 rscale=yarn rfactor=4.0 rctx=64"),
        ("6×8; B: 2×6×6; M: 6 bool", "self-att(B, M) h=2 scale=none norm=rmsnorm causal=true"),
        ("6×16", "self-att h=4 kv=2 causal=true rope=true norm=rmsnorm eps=1e-6 qknorm=rmsnorm"),
        # Gemma 3's: the q/k norm's gains 1 + w as the pre-norm's
        (
            "6×16",
            "self-att h=2 kv=1 dqk=8 dv=8 causal=true rope=true norm=rmsnorm offset=1.0 "
            "qknorm=rmsnorm post=true",
        ),  # fmt: skip
        ("6×16", "self-att h=2 dqk=6 dv=6 rope=true rot=0.5 qknorm=layernorm qkeps=1e-4"),
        # OLMo 2's: no pre-norm, the branch's output normalised, the q/k norm over all heads
        (
            "6×16",
            "self-att h=4 kv=2 causal=true rope=true norm=rmsnorm eps=1e-6 pre=false post=true "
            "qknorm=rmsnorm qkover=all",
        ),  # fmt: skip
        # OLMo's: parameter-free layernorms, the projections clamped
        ("6×16", "self-att h=4 causal=true rope=true affine=false clip=0.3"),
        ("5×8", "self-att h=2 norm=rmsnorm affine=false pre=false post=true"),
        # Gemma 2's: capped scores, a window, the sandwich's second norm, gains 1 + w
        (
            "7×16",
            "self-att h=4 kv=2 dqk=8 dv=8 causal=true rope=true window=3 softcap=0.5 "
            "scale=0.25 norm=rmsnorm eps=1e-6 offset=1.0 post=true",
        ),  # fmt: skip
    ),
    reference=lambda xs, p, s, a: _pre_norm_ref(xs, p, a),
)

CROSS_ATT = Layer(
    name="cross-att",
    aliases=("cross-attention",),
    category="Transformer",
    doc="The cross-attention block of Fig. 5.6: layernorm on X for the queries, keys and values "
    "from a second sequence Z (the encoder's output, given in parentheses), multi-head "
    "attention, and the residual sum with X. `cross-att(Z, M)` with M: S bool masks padding "
    "keys; `cross-att(Z, B)` with B: G×T×S adds a score bias.",
    hparams=(
        *_ATT_HP,
        HP(*_NORM),
        HP("eps", "float", 1e-5, "the pre-norm's epsilon"),
        _PRE_OFFSET,
        _AFFINE,
        _PRE,
        _POST,
    ),
    arity=(2, 4),
    resolve=lambda c: _cross_attrs(c),
    inside=_att_inside(cross=True),
    example=("16×64", "cross-att(Z) h=4"),
    cases=(("6×8; Z: 5×8; B: 2×6×5", "cross-att(Z, B) h=2 scale=none"),),
    reference=lambda xs, p, s, a: _pre_norm_ref(xs, p, a),
)


def _ffw_attrs(c: Ctx) -> FfwAttrs:
    c.rank(1, 2, 3)
    hidden = c.hp.get("hidden")
    hidden = hidden if hidden is not None else 4 * c.x[-1]
    return FfwAttrs(
        hidden,
        c.hp["p"],
        c.hp["bias"],
        c.hp["act"],
        c.hp["eps"],
        c.hp["norm"],
        float(c.hp.get("offset", 0.0)),
        pre=bool(c.hp.get("pre", True)),
        post=bool(c.hp.get("post", False)),
        affine=bool(c.hp.get("affine", True)),
    )


_ACT = {"gelu": "gelu", "gelu-tanh": "gelu approximate=true", "relu": "relu"}
_GATED = {"swiglu": "silu", "geglu": "gelu", "geglu-tanh": "gelu approximate=true"}
"""Each gated form with the activation box of its gate: every GELU form `gelu` has."""


def _ffw_inside(hp: Mapping[str, Any], ranks: tuple[int, ...]) -> str:
    pattern = "×".join(["A", "B"][: ranks[0] - 1] + ["D"])
    hidden = "hidden" if hp.get("hidden") is not None else "4D"
    params = ["hidden"] if hp.get("hidden") is not None else []
    head = f"block inside({', '.join([*params, 'bias', 'p', 'eps'])}) on X: {pattern}:\n"
    head += _pre_text(hp)
    if hp["act"] in _GATED:  # Shazeer 2020: act(x·W_gate) ⊙ (x·W_up), then W_down
        return head + (
            f"  fc out={hidden} bias=bias -> up\n"
            f"  from {'ln' if hp.get('pre', True) else 'X'}\n"
            f"  fc out={hidden} bias=bias -> gate\n"
            f"  {_GATED[hp['act']]}\n"
            "  mul(up)\n"
            "  fc out=D bias=bias -> down\n"
            "  dropout p=p\n"
            f"{_post_text(hp)}"
            "  +(X)\n"
        )
    return head + (
        f"  fc out={hidden} bias=bias -> fc1\n"
        f"  {_ACT[hp['act']]}\n"
        "  fc out=D bias=bias -> fc2\n"
        "  dropout p=p\n"
        f"{_post_text(hp)}"
        "  +(X)\n"
    )


def _ffw_ref(xs: Arrays, p: Weights, s: Weights, a: FfwAttrs) -> Any:
    np = numpy()
    h = _norm_ref(xs[0], p.get("ln", {}), a.norm, a.eps, a.offset) if a.pre else xs[0]
    if a.act in _GATED:
        g = dense_ref(h, p["gate"]["w"], p["gate"].get("b"))
        g = g / (1.0 + np.exp(-g)) if a.act == "swiglu" else gelu_ref(g, a.act == "geglu-tanh")
        h = g * dense_ref(h, p["up"]["w"], p["up"].get("b"))
        out = dense_ref(h, p["down"]["w"], p["down"].get("b"))
    else:
        h = dense_ref(h, p["fc1"]["w"], p["fc1"].get("b"))
        h = np.maximum(h, 0.0) if a.act == "relu" else gelu_ref(h, a.act == "gelu-tanh")
        out = dense_ref(h, p["fc2"]["w"], p["fc2"].get("b"))
    if a.post:
        out = _norm_ref(out, p.get("pn", {}), a.norm, a.eps, a.offset)
    return xs[0] + out


FFW = Layer(
    name="ffw",
    aliases=("feed-forward", "mlp-block"),
    category="Transformer",
    doc="The feed-forward block of Fig. 5.6: layernorm, fc to a hidden dimension (4D by "
    "default), gelu, fc back to D, dropout, and the residual sum. `act=swiglu` (LLaMA, "
    "Mistral), `act=geglu` or `act=geglu-tanh` (the gate's GELU in its tanh form) make it "
    "gated (Shazeer 2020): act(x·W_gate) ⊙ x·W_up, then W_down; "
    "parameters gate/w (D, hidden), up/w (D, hidden), down/w (hidden, D). LLaMA's "
    "hidden size 256·⌈(8D/3)/256⌉ is written as a number in the spec (11008 for D=4096).",
    hparams=(
        HP("hidden", "size", None, "hidden dimension (default 4D)"),
        HP("p", "float", 0.1, "dropout after the second fc (PyTorch's transformer default)"),
        HP("bias", "bool", True, "biases on the two fc layers"),
        HP(
            "act",
            "choice",
            "gelu",
            "the activation (gelu-tanh: GPT-2's approximation; swiglu, geglu, geglu-tanh: gated)",
            ("gelu", "gelu-tanh", "relu", *_GATED),
        ),
        HP(*_NORM),
        HP("eps", "float", 1e-5, "the pre-norm's epsilon"),
        _PRE_OFFSET,
        _AFFINE,
        _PRE,
        _POST,
    ),
    resolve=_ffw_attrs,
    inside=_ffw_inside,
    stochastic=True,
    example=("16×64", "ffw hidden=256"),
    cases=(
        ("6×8", "ffw act=gelu-tanh bias=false"),
        ("6×8", "ffw act=relu hidden=5"),
        ("6×8", "ffw act=swiglu hidden=12 bias=false p=0.0 norm=rmsnorm"),
        ("6×8", "ffw act=geglu-tanh hidden=12 bias=false p=0.0 norm=rmsnorm offset=1.0"),
        ("6×8", "ffw act=geglu hidden=6"),
        ("6×8", "ffw act=geglu-tanh hidden=6"),
        ("6×8", "ffw act=geglu-tanh hidden=12 bias=false p=0.0 norm=rmsnorm offset=1.0 post=true"),
        ("6×8", "ffw act=relu hidden=5 post=true"),
        ("6×8", "ffw act=swiglu hidden=12 bias=false p=0.0 norm=rmsnorm pre=false post=true"),
        ("6×8", "ffw act=gelu hidden=6 pre=false"),
        ("6×8", "ffw act=swiglu hidden=12 bias=false p=0.0 affine=false"),
        ("6×8", "ffw act=gelu hidden=6 affine=false post=true"),
    ),
    reference=_ffw_ref,
)

LAYERS = (ATTENTION, MHA, SELF_ATT, CROSS_ATT, FFW)
