"""Phi (Hugging Face's ``PhiForCausalLM``: Microsoft's phi-1, phi-1.5, phi-2) into a spec of
``parallel`` layers (specs/blocks/transformer.lbdl), as ``lbdl from-hf`` writes it:
``parallel ×N ...``, then ``layernorm`` and an ``fc`` with a bias.

Per layer i, stacked over ×N: ``input_layernorm`` is the one layernorm ``ln`` both branches
read; ``self_attn.{q,k,v}_proj`` and ``dense`` (the output projection) the attention ``att``'s
``w{q,k,v,o}`` and ``b{q,k,v,o}``; ``mlp.fc1``, ``mlp.fc2`` the feed-forward branch. Every
projection is a PyTorch ``Linear`` ``(out, in)``, transposed. Rotary positions rotate the first
``partial_rotary_factor`` of each head's features in the rotate-half order, as our ``rot=``
does: q and k are taken as stored. The final ``final_layernorm`` and ``lm_head`` (weight and
bias) close the model.

A config with ``qk_layernorm`` (`QK_LAYERNORM`) adds ``self_attn.q_layernorm`` and
``k_layernorm``: LayerNorms over one head's features, weight and bias shared by the heads,
applied after the heads are split and before the rotary: the attention's ``qn``, ``qnb``,
``kn``, ``knb`` (``parallel ... qk=layernorm``).
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule, transpose

X = "layers.{i}."
L = "repeat_0/parallel_0/"
T = (transpose(),)


def _linear(source: str, target: str) -> tuple[Rule, Rule]:
    return Rule(source + ".weight", target + "/w", T), Rule(source + ".bias", target + "/b")


MAP = FamilyMap(
    name="phi",
    doc="Phi (Hugging Face PhiForCausalLM)",
    spec="specs/blocks/transformer.lbdl's `parallel` (a spec written by lbdl from-hf)",
    prefixes=("model.",),
    ignore=(X + "self_attn.rotary_emb.inv_freq", "rotary_emb.inv_freq"),
    rules=(
        Rule("embed_tokens.weight", "embed_0/table"),
        Rule(X + "input_layernorm.weight", L + "ln/scale"),
        Rule(X + "input_layernorm.bias", L + "ln/bias"),
        Rule(X + "self_attn.q_proj.weight", L + "att/wq", T),
        Rule(X + "self_attn.q_proj.bias", L + "att/bq"),
        Rule(X + "self_attn.k_proj.weight", L + "att/wk", T),
        Rule(X + "self_attn.k_proj.bias", L + "att/bk"),
        Rule(X + "self_attn.v_proj.weight", L + "att/wv", T),
        Rule(X + "self_attn.v_proj.bias", L + "att/bv"),
        Rule(X + "self_attn.dense.weight", L + "att/wo", T),
        Rule(X + "self_attn.dense.bias", L + "att/bo"),
        *_linear(X + "mlp.fc1", L + "fc1"),
        *_linear(X + "mlp.fc2", L + "fc2"),
        Rule("final_layernorm.weight", "layernorm_0/scale"),
        Rule("final_layernorm.bias", "layernorm_0/bias"),
        *_linear("lm_head", "fc_0"),
    ),
)

QK_LAYERNORM = replace(
    MAP,
    doc="Phi with qk_layernorm (q_layernorm, k_layernorm on each head's queries and keys)",
    spec="lbdl from-hf (parallel ... qk=layernorm)",
    rules=(
        *MAP.rules,
        Rule(X + "self_attn.q_layernorm.weight", L + "att/qn"),
        Rule(X + "self_attn.q_layernorm.bias", L + "att/qnb"),
        Rule(X + "self_attn.k_layernorm.weight", L + "att/kn"),
        Rule(X + "self_attn.k_layernorm.bias", L + "att/knb"),
    ),
)

VARIANTS = (MAP, QK_LAYERNORM)
