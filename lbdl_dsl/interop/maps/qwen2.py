"""Qwen2 (Hugging Face's ``Qwen2ForCausalLM``) into a LLaMA-shaped spec whose attention has
biases on the query, key and value projections and none on the output projection
(``self-att ... bias=true obias=false -> attn``, as ``lbdl from-hf`` writes it).

Everything else is LLaMA's (`maps.llama`): grouped-query attention, rotary positions in the
rotate-half order, RMSNorm, SwiGLU. The small Qwen2 models tie the output layer to the token
embedding: their checkpoints hold no ``lm_head.weight`` and the spec has no ``fc_0/w``
(``fc bias=false tie=tokens``), so the head's rule finds nothing to fill and is left idle.
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import Rule
from lbdl_dsl.interop.maps.llama import MAP as LLAMA
from lbdl_dsl.interop.maps.llama import MHA, X

MAP = replace(  # LLaMA's prefix, buffers and sizes
    LLAMA,
    name="qwen2",
    doc="Qwen2 (Hugging Face Qwen2ForCausalLM)",
    spec="lbdl from-hf (a LLaMA-shaped spec with q/k/v biases)",
    rules=(
        *LLAMA.rules,
        Rule(X + "self_attn.q_proj.bias", MHA + "bq"),
        Rule(X + "self_attn.k_proj.bias", MHA + "bk"),
        Rule(X + "self_attn.v_proj.bias", MHA + "bv"),
    ),
)
