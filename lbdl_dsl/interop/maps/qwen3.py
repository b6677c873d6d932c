"""Qwen3 (Hugging Face's ``Qwen3ForCausalLM``) into a LLaMA-shaped spec whose attention
normalises each head's queries and keys (``self-att ... qknorm=rmsnorm -> attn``, as ``lbdl
from-hf`` and specs/qwen3-8b.lbdl write it).

Everything else is LLaMA's (`maps.llama`): grouped-query attention, rotary positions in the
rotate-half order, RMSNorm, SwiGLU. ``q_norm``/``k_norm`` are RMSNorms over one head's
``head_dim`` features (not the whole projection, as OLMo 2's), one gain shared by the heads:
the box's ``qn`` and ``kn``. Qwen3 has no biases unless the config says ``attention_bias``,
which puts one on each of the four projections (`BIASED`). The small Qwen3 models tie the
output layer to the embedding, and their checkpoints hold no ``lm_head.weight``.

Qwen3-MoE (``Qwen3MoeForCausalLM``, `MOE`) has the same attention half and Mixtral's
feed-forward half (`maps.mixtral`: the paths, the router transposed, the two layouts of the
experts), under other names: the router is ``mlp.gate.weight``; expert j's projections are
``mlp.experts.{j}.gate_proj``, ``up_proj`` and ``down_proj`` (what ``save_pretrained``
writes), or all experts fused in ``mlp.experts.gate_up_proj`` and ``down_proj``
(transformers 5's state dict in memory).
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule, split
from lbdl_dsl.interop.maps import mixtral
from lbdl_dsl.interop.maps.llama import ATTENTION, HEAD, MHA, T, X
from lbdl_dsl.interop.maps.llama import MAP as LLAMA

NORMS = (
    Rule(X + "self_attn.q_norm.weight", MHA + "qn"),
    Rule(X + "self_attn.k_norm.weight", MHA + "kn"),
)

MAP = replace(  # LLaMA's prefix, buffers and sizes
    LLAMA,
    name="qwen3",
    doc="Qwen3 (Hugging Face Qwen3ForCausalLM)",
    spec="specs/qwen3-8b.lbdl",
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

BIASES = tuple(Rule(X + f"self_attn.{n}_proj.bias", MHA + f"b{n}") for n in "qkvo")
ROUTER = Rule(X + "mlp.gate.weight", mixtral.MOE + "moe/router", T)
EXPERT = X + "mlp.experts.{j}."
APART = (
    Rule(EXPERT + "gate_proj.weight", mixtral.MOE + "moe/gate", T),
    Rule(EXPERT + "up_proj.weight", mixtral.MOE + "moe/up", T),
    Rule(EXPERT + "down_proj.weight", mixtral.MOE + "moe/down", T),
)
FUSED = (
    Rule(
        X + "mlp.experts.gate_up_proj",
        (mixtral.MOE + "moe/gate", mixtral.MOE + "moe/up"),
        (split(2, 1), *mixtral.SWAP),
    ),
    Rule(X + "mlp.experts.down_proj", mixtral.MOE + "moe/down", mixtral.SWAP),
)


def _moe(experts: tuple[Rule, ...], biases: tuple[Rule, ...]) -> FamilyMap:
    return replace(
        mixtral.EXPERTS,
        name="qwen3_moe",
        doc="Qwen3-MoE (Hugging Face Qwen3MoeForCausalLM)",
        spec="lbdl from-hf (Mixtral's layers with qknorm=rmsnorm)",
        sizes="Qwen3-MoE's config names the experts num_experts (E), those active per token "
        "num_experts_per_tok (K), their hidden size moe_intermediate_size (F)",
        rules=(*ATTENTION, *NORMS, *biases, mixtral.NORM, ROUTER, *experts, *HEAD),
    )


MOE = tuple(_moe(e, b) for e in (APART, FUSED) for b in ((), BIASES))
