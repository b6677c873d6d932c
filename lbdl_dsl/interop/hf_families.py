"""The spec of each Hugging Face ``model_type``, written from its ``config.json``.

One function per family, ``(config, shapes) -> Draft``: the model's sizes (named as the
library's specs name them: N layers, D wide, H heads...), its body in the language, the blocks
it imports and the map (`maps`) that fills it. A config value the spec cannot say (a scaled
rotary, another activation, biases where the family has none) is refused with its key, never
computed otherwise. The specs mirror the library's (specs/gpt2.lbdl, llama2-7b.lbdl,
mistral-7b.lbdl, mixtral-8x7b.lbdl, bert-base.lbdl, vit-b16.lbdl), so their parameter paths
are the ones the maps are written for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lbdl_dsl.interop.hf import Config

Shapes = dict[str, tuple[int, ...]]
BLOCKS = "blocks/transformer.lbdl"


@dataclass(frozen=True)
class Draft:
    """A family's spec before it is named and counted."""

    title: str  # the published architecture, for the header
    family: str  # the map (`maps.MAPS`) that fills it
    sizes: dict[str, Any]  # the model's parameters, in order
    body: list[str]  # its lines, unindented
    header: list[str] = field(default_factory=list)  # more lines of the header
    imports: list[str] = field(default_factory=list)


def _pad(box: str, shape: str, width: int = 52) -> str:
    """A box with its shape annotation in a column, as the library's specs write them."""
    return f"{box:<{width}} {shape}" if shape else box


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _eps(e: float) -> str:
    """A float as a person writes it: ``1e-6``, ``1e6``, ``10000``, ``0.5``."""
    text = f"{e:g}"
    mantissa, _, exponent = text.partition("e")
    return mantissa + (f"e{int(exponent)}" if exponent else "")


_ACTS = {"gelu_new": "gelu-tanh", "gelu_pytorch_tanh": "gelu-tanh", "gelu": "gelu", "relu": "relu"}
"""transformers' activation names the `ffw` box's `act=` says, by GPT-2's family and
StarCoder2."""


def _act(c: Config, key: str, default: str) -> str:
    """The `ffw` activation of the config's ``key``; another one is refused with its name."""
    fn = c.get(key, default=default)
    if fn not in _ACTS:
        raise c.error(f"`{key}` {fn!r} is not supported", f"one of {list(_ACTS)}")
    return _ACTS[fn]


def _gpt2_sizes(c: Config) -> tuple[dict[str, Any], str]:
    """GPT-2's sizes (N, D, H, V, L, then F where ``n_inner`` is not 4D) under its names or
    the common ones, and the feed-forward width as the spec writes it (4D or F)."""
    d = c.whole("n_embd", "hidden_size")
    sizes = {
        "N": c.whole("n_layer", "num_hidden_layers"),
        "D": d,
        "H": c.whole("n_head", "num_attention_heads"),
        "V": c.whole("vocab_size"),
        "L": c.whole("n_positions", "max_position_embeddings"),
    }
    f = "4D" if c.get("n_inner") in (None, 4 * d) else "F"
    if f == "F":
        sizes["F"] = c.whole("n_inner")
    return sizes, f


def _embedding(tied: bool) -> list[str]:
    """A language model's first lines: its tokens, and the embedding (named when the output
    layer is tied to it)."""
    return ["input X: T int<V>", _pad("embed", "T×D"), *(["-> tokens"] if tied else [])]


def _output(tied: bool) -> str:
    """A language model's output layer, tied to the embedding or its own."""
    return _pad("fc bias=false" + (" tie=tokens" if tied else ""), "T×V")


def gpt2(c: Config, shapes: Shapes) -> Draft:
    """GPT-2 as specs/gpt2.lbdl writes it (``tlayer ×N``); a config whose layers the tlayer
    block cannot say (attention scores not scaled by 1/√d, another layernorm ε) has the
    block's two boxes written out in a ×N group, which can (map `gpt2.INLINE`)."""
    act = _act(c, "activation_function", "gelu_new")
    c.require("tie_word_embeddings", True, "specs/gpt2.lbdl ties the output layer")
    c.require(
        "scale_attn_by_inverse_layer_idx",
        False,
        "each layer's scores would have a scale of their own, and a ×N group has one",
    )
    c.require("reorder_and_upcast_attn", False, "no such variant in the spec")
    sizes, f = _gpt2_sizes(c)
    p = c.number("resid_pdrop", default=0.1)
    eps = c.number("layer_norm_epsilon", default=1e-5)
    scaled = c.get("scale_attn_weights", default=True)
    block = eps == 1e-5 and scaled
    if block:  # the library's block, as specs/gpt2.lbdl
        layers = [f"tlayer ×N H=H F={f} causal=true bias=true act={act} p={p:g}", "layernorm"]
    else:  # tlayer's two boxes, with what it cannot pass on
        e = f" eps={_eps(eps)}"
        layers = [
            "×N:",
            f"  self-att h=H causal=true bias=true{'' if scaled else ' scale=none'}{e}",
            f"  ffw hidden={f} act={act} p={p:g}{e}",
            f"layernorm{e}",
        ]
    return Draft(
        "GPT-2 (Radford et al. 2019)",
        "gpt2",
        sizes,
        [
            *_embedding(tied=True),
            "pos-embed len=L",
            f"dropout p={c.number('embd_pdrop', default=0.1):g}",
            *layers,
            _output(tied=True),
            "output P",
        ],
        [
            "# learned positions, biases on the attention, a final layernorm, the output layer",
            "# tied to the token embedding (no bias)."
            + ("" if scaled else " Attention scores are not scaled (scale_attn_weights)."),
        ],
        [BLOCKS] if block else [],
    )


def gpt_bigcode(c: Config, shapes: Shapes) -> Draft:
    """GPTBigCode (SantaCoder, StarCoder): GPT-2's layer with one key/value head
    (``multi_query``, or as many as the queries' without it, whose fused projection is then
    cut head by head: ``--map gpt_bigcode@H``), written out in a ×N group of named boxes;
    learned positions, the output layer tied unless the config unties it."""
    act = _act(c, "activation_function", "gelu_pytorch_tanh")
    c.require("add_cross_attention", False, "a decoder alone: the spec has no encoder to attend")
    sizes, f = _gpt2_sizes(c)
    h = sizes["H"]
    mqa = bool(c.get("multi_query", default=True))
    tied = _tied(c, shapes, default=True)
    e = f" eps={_eps(c.number('layer_norm_epsilon', default=1e-5))}"
    scale = "" if c.get("scale_attn_weights", default=True) else " scale=none"
    p = c.number("resid_pdrop", default=0.1)
    return Draft(
        "GPTBigCode (Allal et al. 2023; Li et al. 2023)",
        "gpt_bigcode" if mqa else f"gpt_bigcode@{h}",
        sizes,
        [
            *_embedding(tied),
            "pos-embed len=L",
            f"dropout p={c.number('embd_pdrop', default=0.1):g}",
            "×N:",
            f"  self-att h=H{' kv=1' * mqa} causal=true bias=true{scale}{e} -> attn",
            f"  ffw hidden={f} act={act} p={p:g}{e} -> mlp",
            f"layernorm{e}",
            _output(tied),
            "output P",
        ],
        [
            "# GPT-2's layers"
            + (" with multi-query attention (one key/value head)," if mqa else ",")
            + " learned positions, biases,",
            "# the output layer" + (" tied to the token embedding." if tied else " its own."),
        ],
    )


def _silu(c: Config) -> None:
    act = c.get("hidden_act", "hidden_activation", default="silu")
    if act != "silu":
        raise c.error(f"`hidden_act` {act!r} is not supported", "the SwiGLU block gates by silu")


def _head(c: Config, d: int, h: int, default: int | None = None) -> str:
    """``dqk``/``dv`` when the config's head size is not D/H (Qwen3, Gemma), else nothing;
    ``default`` is the family's where the config has no ``head_dim`` (Qwen3's is 128)."""
    if c.get("head_dim") is None and default is None:
        return ""
    hd = c.whole("head_dim") if c.get("head_dim") is not None else default
    return "" if hd == d // h and not d % h else f" dqk={hd} dv={hd}"


def _tied(c: Config, shapes: Shapes, *, default: bool) -> bool:
    """Whether the output layer is the embedding (``tie_word_embeddings``, whose default is
    the family's): then save_pretrained stores no ``lm_head.weight``. A checkpoint that
    stores one anyway is read as untied, which computes the same."""
    tied = bool(c.get("tie_word_embeddings", default=default))
    return tied and not any(k.endswith("lm_head.weight") for k in shapes)


def _rot(c: Config, d: int, h: int) -> str:
    """``rot=`` for the config's ``partial_rotary_factor`` (Phi-3's default 1: nothing). An
    odd number of rotated features is refused: transformers then turns one feature more, at
    the odd count's frequencies, and our rope turns an even number."""
    rot = c.rotary_fraction(default=1.0)
    head = int(c.get("head_dim") or d // h)
    if int(head * rot) % 2:
        raise c.error(
            f"`partial_rotary_factor` {rot:g} of heads of {head} rotates {int(head * rot)} "
            "features, an odd number",
            "lbdl's rope rotates pairs of features: a factor that makes an even number",
        )
    return "" if rot == 1 else f" rot={rot:g}"


def _sizes(c: Config, *, kv: bool = True, hidden: str = "intermediate_size") -> dict[str, Any]:
    """The sizes most decoders' specs start with, in their header's order: layers, width,
    heads (and kv heads, as many as heads unless the config says), feed-forward width from
    ``hidden``, vocabulary."""
    h = c.whole("num_attention_heads")
    sizes: dict[str, Any] = {"N": c.whole("num_hidden_layers"), "D": c.whole("hidden_size")}
    sizes["H"] = h
    if kv:
        sizes["KV"] = c.whole("num_key_value_heads", default=h)
    return sizes | {"F": c.whole(hidden), "V": c.whole("vocab_size")}


def llama(c: Config, shapes: Shapes, *, kind: str = "llama") -> Draft:
    """LLaMA, Mistral, Qwen2, Qwen3, Phi-3: RMSNorm, grouped-query attention with rotary
    positions, SwiGLU. Qwen3's normalises each head's queries and keys (``qknorm=rmsnorm``).
    Phi-3 (`phi3`) is LLaMA's layer with q, k, v and gate, up stored fused (its map
    cuts them), rotary positions on ``partial_rotary_factor`` of each head, every layer's
    attention through ``sliding_window`` when the config sets one (transformers' Phi3Model
    masks them all with it, as Mistral's), and no scaled rotary but LongRoPE, which is
    refused. Its dropouts (``resid_pdrop`` after each half, ``embd_pdrop``) act in training
    only, 0 in the released configs: written as LLaMA's. OLMo 2 (`olmo2`) moves each half's
    norm to the half's output (``pre=false post=true``) and RMS-normalises the whole query and
    key projections, all heads at once (``qkover=all``). OLMo (`olmo`) has LayerNorms without
    parameters (``affine=false``, ε 1e-5 as transformers' OlmoLayerNorm fixes it) and may clamp
    q, k and v (``clip_qkv``: ``clip=``)."""
    _silu(c)
    # LLaMA's configs may put biases on its projections; Mistral's, Qwen2's and Phi-3's
    # modules have none on the feed-forward, nor Mistral's and Phi-3's on the attention,
    # whatever the config says
    mlp_bias = kind == "llama" and bool(c.get("mlp_bias", default=False))
    d, h = c.whole("hidden_size"), c.whole("num_attention_heads")
    eps = _eps(c.number("rms_norm_eps", default=1e-5 if kind in ("phi3", "olmo2") else 1e-6))
    # transformers' Phi3Config takes no rotary scaling but LongRoPE (`linear` is its error)
    theta = c.rope_theta(scalable=kind != "phi3")
    tied = _tied(c, shapes, default=kind == "qwen2")
    sizes = _sizes(c)
    head = _head(c, d, h, default=128 if kind == "qwen3" else None)
    att = f"self-att h=H kv=KV{head} causal=true rope=true theta={_eps(theta)}"
    att += c.rope_scaling()
    if kind == "phi3":
        att += _rot(c, d, h)
    window = _window(c, kind)
    if window:
        sizes["W"] = window
        att += " window=W"
    if kind == "olmo" and c.get("clip_qkv") is not None:
        att += f" clip={c.number('clip_qkv'):g}"
    if kind in ("qwen3", "olmo2", "olmo"):  # one flag puts a bias on all four projections
        att += " bias=true" * bool(c.get("attention_bias", default=False))
        att += {"qwen3": " qknorm=rmsnorm", "olmo2": " qknorm=rmsnorm qkover=all"}.get(kind, "")
    elif kind == "qwen2":
        att += " bias=true obias=false"
    elif kind == "llama" and c.get("attention_bias", default=False):
        att += " bias=true"  # Mistral's projections have none, whatever its config says
    ffw = f"ffw hidden=F act=swiglu bias={_bool(mlp_bias)} p=0.0"
    norms = f"norm=rmsnorm eps={eps}" + " pre=false post=true" * (kind == "olmo2")
    final = f"rmsnorm eps={eps}"
    if kind == "olmo":  # OlmoLayerNorm: no gain, no bias, an ε of 1e-5 whatever the config
        norms, final = "norm=layernorm eps=1e-5 affine=false", "layernorm eps=1e-5 affine=false"
    title = {
        "llama": "LLaMA (Touvron et al. 2023)",
        "mistral": "Mistral (Jiang et al. 2023)",
        "qwen2": "Qwen2 (Yang et al. 2024)",
        "qwen3": "Qwen3 (Yang et al. 2025)",
        "phi3": "Phi-3 (Abdin et al. 2024)",
        "olmo2": "OLMo 2 (Team OLMo 2024)",
        "olmo": "OLMo (Groeneveld et al. 2024)",
    }[kind]
    notes = {
        "llama": "# RMSNorm, grouped-query attention with rotary positions, SwiGLU, no biases.",
        "mistral": "# LLaMA's layers with grouped-query attention over a sliding window of W keys.",
        "qwen2": "# LLaMA's layers with biases on the query, key and value projections.",
        "qwen3": "# LLaMA's layers with each head's queries and keys RMS-normalised (q/k norm).",
        "phi3": "# LLaMA's layers, q, k, v and the SwiGLU's two inputs stored fused."
        + (" A sliding window of W keys." if window else ""),
        "olmo2": "# LLaMA's layers, each half's RMSNorm on its output, q and k normalised whole.",
        "olmo": "# LLaMA's layers with layernorms that have no parameters"
        + (", q, k and v clamped." if "clip=" in att else "."),
    }[kind]
    return Draft(
        title,
        kind if kind in ("qwen2", "qwen3", "phi3", "olmo2", "olmo") else "llama",
        sizes,
        [
            *_embedding(tied),
            "×N:",
            f"  {att} {norms} -> attn",
            f"  {ffw} {norms} -> mlp",
            final,
            _output(tied),
            "output P",
        ],
        [notes + (" The output layer is tied to the embedding." if tied else "")],
    )


def gemma(c: Config, shapes: Shapes) -> Draft:
    """Gemma: LLaMA's layers with the embedding scaled by √D, every RMSNorm's gain 1 + w, a
    tanh-GELU gate (GeGLU), a head size of its own, and the output tied to the embedding (as
    transformers' default; a config that unties it has its own ``lm_head``)."""
    act = c.get("hidden_act", "hidden_activation", default="gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise c.error(f"`hidden_act` {act!r} is not supported", "Gemma's gate is tanh-GELU")
    d, h = c.whole("hidden_size"), c.whole("num_attention_heads")
    eps = _eps(c.number("rms_norm_eps", default=1e-6))
    theta = c.rope_theta(scalable=True)
    tied = _tied(c, shapes, default=True)
    sizes = {
        "N": c.whole("num_hidden_layers"),
        "D": d,
        "H": h,
        "KV": c.whole("num_key_value_heads", default=h),
        "F": c.whole("intermediate_size"),
        "V": c.whole("vocab_size"),
    }
    hd = c.get("head_dim")
    head = f" dqk={int(hd)} dv={int(hd)}" if hd is not None and hd != d // h else ""
    att = f"self-att h=H kv=KV{head} causal=true rope=true theta={_eps(theta)}"
    att += c.rope_scaling()
    if c.get("attention_bias", default=False):
        att += " bias=true"
    norm = f"norm=rmsnorm eps={eps} offset=1"
    return Draft(
        "Gemma (Gemma Team 2024)",
        "llama",
        sizes,
        [
            *_embedding(tied),
            _pad("times sqrt=D", "T×D"),
            "×N:",
            f"  {att} {norm} -> attn",
            f"  ffw hidden=F act=geglu-tanh bias=false p=0.0 {norm} -> mlp",
            f"rmsnorm eps={eps} offset=1",
            _output(tied),
            "output P",
        ],
        [
            "# LLaMA's layers with the embedding scaled by √D, RMSNorm gains of 1 + w, a tanh-GELU",
            "# gate (GeGLU)"
            + (
                ", and the output layer tied to the embedding."
                if tied
                else "; its own output layer."
            ),
        ],
    )


def _gemma_sizes(c: Config, d: int, h: int, hd: int) -> dict[str, Any]:
    """Gemma 2's and 3's sizes after the layer count: widths, heads, vocabulary, window."""
    return {
        "D": d,
        "H": h,
        "KV": c.whole("num_key_value_heads", default=h),
        "Dh": hd,
        "F": c.whole("intermediate_size"),
        "V": c.whole("vocab_size"),
        "W": c.whole("sliding_window", default=4096),
    }


def gemma2(c: Config, shapes: Shapes) -> Draft:
    """Gemma 2: Gemma's layers (√D embedding, gains 1 + w, a tanh-GELU gate, tied output)
    with a second norm after each half (the sandwich), attention scores capped by
    ``attn_logit_softcapping`` and scaled by ``query_pre_attn_scalar``^-1/2, the logits
    capped by ``final_logit_softcapping``, and its layers alternating a sliding window and
    full attention: a ×N/2 group of the two (map `gemma2` reads layers 2i and 2i + 1)."""
    act = c.get("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise c.error(f"`hidden_activation` {act!r} is not supported", "Gemma's gate is tanh-GELU")
    d, h = c.whole("hidden_size"), c.whole("num_attention_heads")
    n = c.whole("num_hidden_layers")
    types = c.get("layer_types") or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)
    ]
    pairs = ["sliding_attention", "full_attention"] * (n // 2)
    if n % 2 or types != pairs:
        raise c.error(
            f"the {n} layers' kinds (`layer_types`) are not pairs of a sliding layer and a full "
            "one",
            "the spec's ×N/2 group holds one pair; an odd count or another order would need "
            "another spec",
        )
    eps = _eps(c.number("rms_norm_eps", default=1e-6))
    theta = c.rope_theta(scalable=True)
    tied = _tied(c, shapes, default=True)
    hd = c.whole("head_dim", default=256)
    sizes = {"N": n, **_gemma_sizes(c, d, h, hd)}
    att = f"self-att h=H kv=KV dqk=Dh dv=Dh causal=true rope=true theta={_eps(theta)}"
    att += c.rope_scaling()
    if c.get("attention_bias", default=False):
        att += " bias=true"
    scalar = c.number("query_pre_attn_scalar", default=256)
    if scalar != hd:
        att += f" scale={scalar**-0.5!r}"
    # null turns a cap off; a key left out is Gemma2Config's default (50 and 30)
    if c.data.get("attn_logit_softcapping", 50.0) is not None:
        att += f" softcap={c.number('attn_logit_softcapping', default=50.0)!r}"
    norm = f"norm=rmsnorm eps={eps} offset=1 post=true"
    ffw = f"ffw hidden=F act=geglu-tanh bias=false p=0.0 {norm}"
    final = c.data.get("final_logit_softcapping", 30.0)
    return Draft(
        "Gemma 2 (Gemma Team 2024)",
        "gemma2",
        sizes,
        [
            *_embedding(tied),
            _pad("times sqrt=D", "T×D"),
            "×N/2:",
            f"  {att} window=W {norm} -> local",
            f"  {ffw} -> local_mlp",
            f"  {att} {norm} -> attn",
            f"  {ffw} -> mlp",
            f"rmsnorm eps={eps} offset=1",
            _output(tied),
            *(
                [f"softcap c={c.number('final_logit_softcapping', default=30.0)!r}"]
                if final is not None
                else []
            ),
            "output P",
        ],
        [
            "# Gemma's layers with a second norm after each half, attention scores and logits",
            "# capped (c·tanh(s/c)), and layers alternating a sliding window of W keys (local)",
            "# and full attention: a ×N/2 group of the two."
            + (" The output layer is tied to the embedding." if tied else ""),
        ],
    )


def gemma3(c: Config, shapes: Shapes) -> Draft:
    """Gemma 3's text model: Gemma 2's layers (the sandwich's norms, gains 1 + w, √D
    embedding, tied output) with each head's queries and keys RMS-normalised (gains 1 + w
    too), no caps by default, and its layers in groups of six: five through a sliding window
    with the local rotary base, then one over every key with the global base (and its
    scaling). A ×G group of the six, then a ×R group of the sliding layers left over (map
    `gemma3@S`, S = 6G, reads them)."""
    from lbdl_dsl.interop.maps.gemma3 import PATTERN

    act = c.get("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise c.error(f"`hidden_activation` {act!r} is not supported", "Gemma's gate is tanh-GELU")
    d, h = c.whole("hidden_size"), c.whole("num_attention_heads")
    n = c.whole("num_hidden_layers")
    pattern = c.whole("sliding_window_pattern", default=PATTERN)
    kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    types = c.get("layer_types") or kinds
    if n < PATTERN:
        raise c.error(
            f"{n} layers are fewer than one group of six (`num_hidden_layers`)",
            "the spec's ×G group holds five sliding layers and a full one",
        )
    if pattern != PATTERN or types != kinds:
        raise c.error(
            f"the {n} layers' kinds (`layer_types`, `sliding_window_pattern`) are not groups of "
            "five sliding layers and a full one",
            "the spec's ×G group holds one such group of six, and the layers left over slide",
        )
    groups, left = divmod(n, PATTERN)
    eps = _eps(c.number("rms_norm_eps", default=1e-6))
    tied = _tied(c, shapes, default=True)
    hd = c.whole("head_dim", default=256)
    sizes = {"G": groups, **({"R": left} if left else {}), **_gemma_sizes(c, d, h, hd)}
    head = "self-att h=H kv=KV dqk=Dh dv=Dh causal=true rope=true"
    rest = ""
    if c.get("attention_bias", default=False):
        rest += " bias=true"
    scalar = c.number("query_pre_attn_scalar", default=256)
    if scalar != hd:
        rest += f" scale={scalar**-0.5!r}"
    # `attn_logit_softcapping` is left as transformers' Gemma 3 leaves it: its attention
    # never reads it (the q/k norm took the cap's place); the final cap it applies
    norm = f"norm=rmsnorm eps={eps} offset=1 post=true"
    rest += f" qknorm=rmsnorm {norm}"
    rotary = {kind: _gemma3_rotary(c, kind) for kind in ("sliding_attention", "full_attention")}
    local = f"{head}{rotary['sliding_attention']} window=W{rest}"
    full = f"{head}{rotary['full_attention']}{rest}"
    ffw = f"ffw hidden=F act=geglu-tanh bias=false p=0.0 {norm}"
    body = ["×G:"]
    for k in range(PATTERN):
        body += [f"  {local if k < PATTERN - 1 else full} -> att{k}", f"  {ffw} -> mlp{k}"]
    if left:
        body += ["×R:", f"  {local} -> att", f"  {ffw} -> mlp"]
    final = c.data.get("final_logit_softcapping")
    return Draft(
        "Gemma 3 (Gemma Team 2025)",
        "gemma3" + (f"@{groups * PATTERN}" if left else ""),
        sizes,
        [
            *_embedding(tied),
            _pad("times sqrt=D", "T×D"),
            *body,
            f"rmsnorm eps={eps} offset=1",
            _output(tied),
            *([f"softcap c={c.number('final_logit_softcapping')!r}"] if final is not None else []),
            "output P",
        ],
        [
            "# Gemma 2's layers with each head's queries and keys RMS-normalised, in groups of",
            "# six: five through a sliding window of W keys with the local rotary base, one over",
            f"# every key with the global base; {n} layers: G={groups} groups"
            + (f", then the R={left} sliding layers left over." if left else ".")
            + (" The output layer is tied to the embedding." if tied else ""),
        ],
    )


def _gemma3_rotary(c: Config, kind: str) -> str:
    """The rotary of Gemma 3's layers of ``kind``: transformers 5's ``rope_parameters`` holds
    one per kind; 4's configs say ``rope_theta`` (global), ``rope_local_base_freq`` and a
    ``rope_scaling`` that only the global layers take."""
    params = c.data.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get(kind), dict):
        own = params[kind]
    elif kind == "full_attention":
        own = {"rope_type": "default", "rope_theta": c.number("rope_theta", default=1e6)}
        own |= c.data.get("rope_scaling") or {}
    else:
        own = {"rope_type": "default"}
        own["rope_theta"] = c.number("rope_local_base_freq", default=10_000.0)
    sub = type(c)({**c.data, "rope_parameters": own, "rope_scaling": None}, c.folder)
    return f" theta={_eps(sub.rope_theta(scalable=True))}{sub.rope_scaling()}"


def starcoder2(c: Config, shapes: Shapes) -> Draft:
    """StarCoder2: LLaMA's attention (grouped-query, rotary, a window on every layer when the
    config sets one) with GPT-2's other parts: layernorms with biases, biases on every
    projection (``use_bias``), a plain tanh-GELU feed-forward, the output tied."""
    act = _act(c, "hidden_act", "gelu_pytorch_tanh")
    eps = _eps(c.number("norm_epsilon", default=1e-5))
    tied = _tied(c, shapes, default=True)
    bias = _bool(bool(c.get("use_bias", default=True)))
    sizes = _sizes(c)
    att = f"self-att h=H kv=KV causal=true rope=true theta={_eps(c.rope_theta(scalable=True))}"
    att += c.rope_scaling() + f" bias={bias}"
    if c.get("sliding_window") is not None:  # transformers masks every layer with it
        sizes["W"] = c.whole("sliding_window")
        att += " window=W"
    return Draft(
        "StarCoder2 (Lozhkov et al. 2024)",
        "starcoder2",
        sizes,
        [
            *_embedding(tied),
            "×N:",
            f"  {att} eps={eps} -> attn",
            f"  ffw hidden=F act={act} bias={bias} p=0.0 eps={eps} -> mlp",
            f"layernorm eps={eps}",
            _output(tied),
            "output P",
        ],
        [
            "# grouped-query attention with rotary positions"
            + (" over a sliding window of W keys" if "W" in sizes else "")
            + ", layernorms, a tanh-GELU feed-forward,",
            f"# biases {'everywhere' if bias == 'true' else 'nowhere'}"
            + ("; the output layer tied to the embedding." if tied else "."),
        ],
    )


def gpt_neox(c: Config, shapes: Shapes) -> Draft:
    """GPT-NeoX and Pythia: ``neox ×N`` (blocks/gpt_neox.lbdl), attention and feed-forward
    side by side off two layernorms (the parallel residual), rotary positions on a part of each
    head (``rotary_pct``, transformers 5's ``partial_rotary_factor``), exact GELU, an untied
    output layer. Its fused ``query_key_value`` holds each head's q, k and v in turn, so the
    map is made for the head count (`maps.gpt_neox`: ``gpt_neox@H``)."""
    act = c.get("hidden_act", default="gelu")
    if act != "gelu":
        raise c.error(f"`hidden_act` {act!r} is not supported", "the neox block's is exact gelu")
    c.require("use_parallel_residual", True, "the neox block adds both branches to its input")
    h = c.whole("num_attention_heads")
    eps = _eps(c.number("layer_norm_eps", default=1e-5))
    _, rope = c._rope()
    rot = c.rotary_fraction(default=float(c.number("rotary_pct", default=0.25)))
    if rope.get("rope_theta") is None and c.get("rope_theta") is None:
        theta = c.number("rotary_emb_base", default=10_000.0)  # transformers 4's name
    else:
        theta = c.rope_theta()
    tied = _tied(c, shapes, default=False)
    bias = "" if c.get("attention_bias", default=True) else " bias=false"
    sizes = _sizes(c, kv=False)
    return Draft(
        "GPT-NeoX (Black et al. 2022)",
        f"gpt_neox@{h}",
        sizes,
        [
            *_embedding(tied),
            f"neox ×N H=H F=F rot={rot:g} theta={_eps(theta)} eps={eps}{bias}",
            f"layernorm eps={eps}",
            _output(tied),
            "output P",
        ],
        [
            "# attention and feed-forward side by side, each off its own layernorm (the parallel",
            "# residual), rotary positions on a part of each head, biases, exact GELU.",
        ],
        ["blocks/gpt_neox.lbdl"],
    )


def _window(c: Config, kind: str) -> int:
    """The sliding window W, where the config turns one on for every layer (`_sliding`); 0
    where for none. Layers of both kinds are refused: one ×N group has one window."""
    sliding = _sliding(c, kind)
    if not any(sliding):
        return 0
    if not all(sliding):
        which = [i for i, s in enumerate(sliding) if s]
        raise c.error(
            f"layers {', '.join(map(str, which))} of {len(sliding)} attend through a sliding "
            "window and the others to every key (`layer_types`, `max_window_layers`)",
            "the spec has one ×N group, so one window for all its layers; write it as two "
            "groups by hand",
        )
    return c.whole("sliding_window")


def _sliding(c: Config, kind: str) -> list[bool]:
    """Which layers slide, as transformers decides: Mistral, Mixtral and Phi-3 every layer when
    ``sliding_window`` is set; Qwen2 and Qwen3 only with ``use_sliding_window``, then by
    ``layer_types`` or, without it, the layers from ``max_window_layers`` on (none in a model
    of fewer)."""
    n = c.whole("num_hidden_layers")
    if kind in ("llama", "olmo2", "olmo") or c.get("sliding_window") is None:
        return [False] * n
    if kind not in ("qwen2", "qwen3"):
        return [True] * n
    if not c.get("use_sliding_window", default=False):
        return [False] * n
    types = c.get("layer_types")
    if types is None:
        first = c.whole("max_window_layers", default=28)
        return [i >= first for i in range(n)]
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(types, list) or len(types) != n or any(t not in kinds for t in types):
        raise c.error(
            f"`layer_types` must list {n} of {' or '.join(kinds)}, got {types!r}",
        )
    return [t == "sliding_attention" for t in types]


def mixtral(c: Config, shapes: Shapes, *, kind: str = "mixtral") -> Draft:
    """Mixtral, and Qwen3-MoE: Mistral's layers with a sparse mixture of SwiGLU experts;
    Qwen3-MoE's normalises each head's queries and keys (``qknorm=rmsnorm``), and weighs the
    chosen experts by the router's softmax as it is unless ``norm_topk_prob`` renormalises
    them as Mixtral's do (``renorm=false``)."""
    _silu(c)
    qwen = kind == "qwen3_moe"
    d, h = c.whole("hidden_size"), c.whole("num_attention_heads")
    eps = _eps(c.number("rms_norm_eps", default=1e-6 if qwen else 1e-5))
    theta = c.rope_theta(10_000.0 if qwen else 1e6, scalable=True)
    # transformers 5 writes Qwen3-MoE's `num_experts` as `num_local_experts`, Mixtral's name
    e = c.whole(*(("num_experts", "num_local_experts") if qwen else ("num_local_experts",)))
    k = c.whole("num_experts_per_tok")
    tied = _tied(c, shapes, default=False)
    if qwen:
        dense = c.get("mlp_only_layers") or []
        step = c.get("decoder_sparse_step", default=1)
        if dense or step != 1:
            raise c.error(
                f"some layers have a dense feed-forward block, not experts (`mlp_only_layers` "
                f"{dense!r}, `decoder_sparse_step` {step!r})",
                "the spec has one ×N group, so one kind of layer; write the two kinds by hand",
            )
    sizes = _sizes(c, hidden="moe_intermediate_size" if qwen else "intermediate_size")
    sizes = {**{x: sizes[x] for x in ("N", "D", "H", "KV", "F")}, "E": e, "K": k}
    sizes |= {"V": c.whole("vocab_size"), "C": e / k}
    head = _head(c, d, h, default=128 if qwen else None)
    att = f"self-att h=H kv=KV{head} causal=true rope=true theta={_eps(theta)}"
    att += c.rope_scaling()
    window = _window(c, "qwen3" if qwen else "mixtral")
    if window:
        sizes["W"] = window
        att += " window=W"
    moe = "moe e=E k=K hidden=F cap=C"
    notes = [
        "# Mistral's layers with a sparse mixture of E SwiGLU experts, K active per token;",
        "# a capacity of C=E/K: no token is dropped, as in transformers.",
    ]
    if qwen:
        att += " bias=true" * bool(c.get("attention_bias", default=False)) + " qknorm=rmsnorm"
        renorm = bool(c.get("norm_topk_prob", default=False))
        moe += "" if renorm else " renorm=false"
        notes = [
            "# LLaMA's layers with each head's queries and keys RMS-normalised and a sparse",
            "# mixture of E SwiGLU experts, K active per token, weighted by the router's softmax"
            + (" renormalised over them" if renorm else " as it is")
            + ";",
            "# a capacity of C=E/K: no token is dropped, as in transformers.",
        ]
    if tied:
        notes[-1] += " The output layer is tied to the embedding."
    return Draft(
        "Qwen3-MoE (Yang et al. 2025)" if qwen else "Mixtral (Jiang et al. 2024)",
        kind,
        sizes,
        [
            *_embedding(tied),
            "×N:",
            f"  {att} norm=rmsnorm eps={eps} -> attn",
            "  residual:",
            f"    rmsnorm eps={eps} -> norm",
            f"    {moe} -> moe",
            f"rmsnorm eps={eps}",
            _output(tied),
            "output P",
        ],
        notes,
    )


def phi(c: Config, shapes: Shapes) -> Draft:
    act = c.get("hidden_act", default="gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise c.error(f"`hidden_act` {act!r} is not supported", "the parallel block's is tanh-gelu")
    c.require("tie_word_embeddings", False, "Phi's output layer is its own, with a bias")
    sizes = _sizes(c)
    eps = _eps(c.number("layer_norm_eps", default=1e-5))
    rot = c.rotary_fraction()
    # qk_layernorm: each head's q and k layer-normalised (bias too) before the rotary, ε the
    # layers' own (transformers' PhiAttention)
    qk = f" qk=layernorm qkeps={eps}" if c.get("qk_layernorm", default=False) else ""
    notes = [
        "# attention and feed-forward side by side off one layernorm (the parallel block),",
        "# rotary positions on a part of each head, biases everywhere.",
    ]
    if qk:
        notes += ["# Each head's queries and keys layer-normalised before the rotary."]
    return Draft(
        "Phi (Gunasekar et al. 2023; Li et al. 2023)",
        "phi",
        sizes,
        [
            *_embedding(tied=False),
            f"parallel ×N H=H KV=KV F=F rot={rot:g} theta={_eps(c.rope_theta())} eps={eps}{qk}",
            f"layernorm eps={eps}",
            _pad("fc", "T×V"),
            "output P",
        ],
        notes,
        [BLOCKS],
    )


def bert(c: Config, shapes: Shapes) -> Draft:
    """BERT as specs/bert-base.lbdl writes it (``postnorm ×N``); with another activation than
    the block's gelu, the block's boxes written out in a ×N group (map `bert.INLINE`)."""
    acts = {"gelu": "gelu", "gelu_new": "gelu approximate=true"}
    acts |= {"gelu_pytorch_tanh": "gelu approximate=true", "relu": "relu"}
    act = c.get("hidden_act", default="gelu")
    if act not in acts:
        raise c.error(f"`hidden_act` {act!r} is not supported", f"one of {list(acts)}")
    c.require("position_embedding_type", "absolute", "learned absolute positions only")
    eps = _eps(c.number("layer_norm_eps", default=1e-12))
    pooled = any(k.endswith("pooler.dense.weight") for k in shapes)
    p = c.number("hidden_dropout_prob", default=0.1)
    sizes = {
        "N": c.whole("num_hidden_layers"),
        "D": c.whole("hidden_size"),
        "H": c.whole("num_attention_heads"),
        "F": c.whole("intermediate_size"),
        "V": c.whole("vocab_size"),
        "L": c.whole("max_position_embeddings"),
        "S": c.whole("type_vocab_size", default=2),
    }
    pool = [_pad("take i=0", "D"), _pad("fc", "D"), "tanh", "output pooled"]
    block = act == "gelu"
    if block:
        layers = [f"postnorm ×N H=H F=F p={p:g} eps={eps}"]
    else:  # the postnorm block's boxes, with the config's activation
        layers = [
            "×N:",
            "  residual:",
            f"    mha h=H bias=true p={p:g}",
            f"    dropout p={p:g}",
            f"  layernorm eps={eps}",
            "  residual:",
            _pad("    fc", "T×F"),
            f"    {acts[act]}",
            _pad("    fc", "T×D"),
            f"    dropout p={p:g}",
            f"  layernorm eps={eps}",
        ]
    return Draft(
        "BERT (Devlin et al. 2019)",
        "bert",
        sizes,
        [
            "input X: T int<V>",
            _pad("embed", "T×D"),
            "-> tokens",
            "input Seg: T int<S>",
            _pad("embed", "T×D"),
            "+(tokens)",
            "pos-embed len=L",
            f"layernorm eps={eps}",
            f"dropout p={p:g}",
            *layers,
            "output Z",
            *(pool if pooled else []),
        ],
        [
            "# post-norm encoder layers, token, segment and learned position embeddings"
            + (", the pooler." if pooled else "; no pooler.")
        ],
        [BLOCKS] if block else [],
    )


def vit(c: Config, shapes: Shapes) -> Draft:
    if not any(k.startswith("classifier.") for k in shapes):
        raise c.error(
            "a ViT without its classification head is not supported",
            "save a ViTForImageClassification (its `classifier` is the spec's last fc)",
        )
    acts = {"gelu": "", "gelu_new": " act=gelu-tanh", "gelu_pytorch_tanh": " act=gelu-tanh"}
    acts["relu"] = " act=relu"
    act = c.get("hidden_act", default="gelu")
    if act not in acts:
        raise c.error(f"`hidden_act` {act!r} is not supported", f"one of {list(acts)}")
    labels = c.get("id2label") or {}
    sizes = {
        "I": c.whole("image_size"),
        "P": c.whole("patch_size"),
        "CH": c.whole("num_channels", default=3),
        "D": c.whole("hidden_size"),
        "N": c.whole("num_hidden_layers"),
        "H": c.whole("num_attention_heads"),
        "F": c.whole("intermediate_size"),
        "C": len(labels) or shapes["classifier.weight"][0],
    }
    eps = _eps(c.number("layer_norm_eps", default=1e-12))
    qkv = c.get("qkv_bias", default=True)
    return Draft(
        "ViT (Dosovitskiy et al. 2021)",
        "vit",
        sizes,
        [
            "input X: CH×I×I",
            _pad("patches P=P", "(I/P)^2×CH*P^2"),
            _pad("fc", "(I/P)^2×D"),
            _pad("cls-token", "(I/P)^2+1×D"),
            "pos-embed",
            "×N:",
            f"  self-att h=H bias={'true' if qkv else 'false'} obias=true eps={eps}",
            f"  ffw hidden=F p=0{acts[act]} eps={eps}",
            f"layernorm eps={eps}",
            _pad("take i=0", "D"),
            _pad("fc", "C"),
            "output Ŷ",
        ],
        [
            "# patches of P×P pixels, a class token, learned positions, pre-norm encoder layers,",
            "# one fc on the class token as the classifier.",
        ],
    )


FAMILIES: dict[str, Callable[..., Draft]] = {
    "gpt2": gpt2,
    "llama": llama,
    "mistral": lambda c, s: llama(c, s, kind="mistral"),
    "mixtral": mixtral,
    "qwen2": lambda c, s: llama(c, s, kind="qwen2"),
    "qwen3": lambda c, s: llama(c, s, kind="qwen3"),
    "qwen3_moe": lambda c, s: mixtral(c, s, kind="qwen3_moe"),
    "phi": phi,
    "bert": bert,
    "vit": vit,
    "gemma": gemma,
    "gemma2": gemma2,
    "gemma3_text": gemma3,
    "starcoder2": starcoder2,
    "gpt_neox": gpt_neox,
    "phi3": lambda c, s: llama(c, s, kind="phi3"),
    "olmo2": lambda c, s: llama(c, s, kind="olmo2"),
    "olmo": lambda c, s: llama(c, s, kind="olmo"),
    "gpt_bigcode": gpt_bigcode,
}

REFUSED: dict[str, str] = {}
"""model_types known and refused, with the reason (none today: Gemma came with issue 41)."""
