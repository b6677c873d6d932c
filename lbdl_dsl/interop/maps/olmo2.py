"""OLMo 2 (Hugging Face's ``Olmo2ForCausalLM``) into a LLaMA-shaped spec whose halves normalise
their outputs rather than their inputs and whose attention RMS-normalises the whole query and
key projections (``self-att ... pre=false post=true qknorm=rmsnorm qkover=all -> attn`` and
``ffw ... pre=false post=true -> mlp``, as ``lbdl from-hf`` and specs/olmo2-13b.lbdl write it).

The projections, the feed-forward's three matrices, the final norm and the output layer are
LLaMA's (`maps.llama`). What differs is where the norms are:

- ``post_attention_layernorm`` and ``post_feedforward_layernorm`` are each half's one norm, of
  its output before the residual sum: the boxes' ``pn`` (no ``ln``: ``pre=false``). Where
  LLaMA's ``post_attention_layernorm`` is the feed-forward's pre-norm, here it belongs to the
  attention half.
- ``q_norm`` and ``k_norm`` are RMSNorms of the whole projections, H·dh and KV·dh features, a
  gain per feature of every head (Qwen3's are one head's dh, shared): the box's ``qn`` and
  ``kn``, whose lengths say ``qkover=all``.
- ``attention_bias`` puts a bias on each of the four projections (`BIASED`).

OLMo (``OlmoForCausalLM``, `OLMO`) is LLaMA's layer whose LayerNorms have no parameters
(``norm=layernorm affine=false``): its map reads the projections alone.
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import Rule
from lbdl_dsl.interop.maps.llama import ATT, FFW, HEAD, MHA, T, X
from lbdl_dsl.interop.maps.llama import MAP as LLAMA

# what both OLMos read as LLaMA's: the embedding, the seven projections, their biases
PROJECTIONS = (
    Rule("embed_tokens.weight", "embed_0/table"),
    *(Rule(X + f"self_attn.{n}_proj.weight", MHA + f"w{n}", T) for n in "qkvo"),
    *(Rule(X + f"mlp.{n}_proj.weight", FFW + f"{n}/w", T) for n in ("gate", "up", "down")),
)
BIASES = tuple(Rule(X + f"self_attn.{n}_proj.bias", MHA + f"b{n}") for n in "qkvo")

MAP = replace(  # LLaMA's prefix, buffers and sizes
    LLAMA,
    name="olmo2",
    doc="OLMo 2 (Hugging Face Olmo2ForCausalLM)",
    spec="specs/olmo2-13b.lbdl",
    rules=(
        *PROJECTIONS,
        Rule(X + "self_attn.q_norm.weight", MHA + "qn"),
        Rule(X + "self_attn.k_norm.weight", MHA + "kn"),
        Rule(X + "post_attention_layernorm.weight", ATT + "pn/scale"),
        Rule(X + "post_feedforward_layernorm.weight", FFW + "pn/scale"),
        *HEAD,
    ),
)

BIASED = replace(
    MAP,
    doc="OLMo 2 with attention_bias (on q_proj, k_proj, v_proj, o_proj)",
    spec="lbdl from-hf (self-att ... bias=true pre=false post=true qknorm=rmsnorm qkover=all)",
    rules=(*MAP.rules, *BIASES),
)

VARIANTS = (MAP, BIASED)

# OLMo (Hugging Face's ``OlmoForCausalLM``): LLaMA's projections, and norms with no parameters
# at all (``affine=false``), so nothing of theirs to read.
OLMO = replace(
    LLAMA,
    name="olmo",
    doc="OLMo (Hugging Face OlmoForCausalLM)",
    spec="lbdl from-hf (self-att ... norm=layernorm affine=false, ffw ... affine=false)",
    rules=(*PROJECTIONS, Rule("lm_head.weight", "fc_0/w", T)),
)
OLMO_BIASED = replace(
    OLMO,
    doc="OLMo with attention_bias (on q_proj, k_proj, v_proj, o_proj)",
    rules=(*OLMO.rules, *BIASES),
)
