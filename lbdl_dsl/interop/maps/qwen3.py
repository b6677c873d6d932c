"""Qwen3 (Hugging Face's ``Qwen3ForCausalLM``) into a LLaMA-shaped spec whose attention
normalises each head's queries and keys (``self-att ... qknorm=rmsnorm -> attn``, as ``lbdl
from-hf`` and specs/qwen3-8b.lbdl write it).

Everything else is LLaMA's (`maps.llama`): grouped-query attention, rotary positions in the
rotate-half order, RMSNorm, SwiGLU. ``q_norm``/``k_norm`` are RMSNorms over one head's
``head_dim`` features (not the whole projection, as OLMo 2's), one gain shared by the heads:
the box's ``qn`` and ``kn``. Qwen3 has no biases unless the config says ``attention_bias``,
which puts one on each of the four projections (`BIASED`). The small Qwen3 models tie the
output layer to the embedding, and their checkpoints hold no ``lm_head.weight``.
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule
from lbdl_dsl.interop.maps.llama import IGNORE, MHA, X
from lbdl_dsl.interop.maps.llama import MAP as LLAMA

NORMS = (
    Rule(X + "self_attn.q_norm.weight", MHA + "qn"),
    Rule(X + "self_attn.k_norm.weight", MHA + "kn"),
)

MAP = FamilyMap(
    name="qwen3",
    doc="Qwen3 (Hugging Face Qwen3ForCausalLM)",
    spec="specs/qwen3-8b.lbdl",
    prefixes=("model.",),
    ignore=IGNORE,
    sizes=LLAMA.sizes,
    rules=(*LLAMA.rules, *NORMS),
)

BIASED = replace(
    MAP,
    doc="Qwen3 with attention_bias (on q_proj, k_proj, v_proj, o_proj)",
    spec="lbdl from-hf (self-att ... bias=true qknorm=rmsnorm)",
    rules=(
        *MAP.rules,
        *(Rule(X + f"self_attn.{n}_proj.bias", MHA + f"b{n}") for n in "qkvo"),
    ),
)

VARIANTS = (MAP, BIASED)
