"""LLaMA and Mistral (Hugging Face's ``LlamaForCausalLM``/``MistralForCausalLM``) into the
LLaMA-family specs (specs/llama2-7b.lbdl, specs/mistral-7b.lbdl, being written).

Those specs need rotary positions and grouped-query attention, which the language is gaining
now; this map is written against the parameter layout they are expected to have, and its
end-to-end test waits for them. The assumptions, to check when the specs land:

- the body is ``×N:`` over a block ``llamalayer`` holding ``self-att`` (pre-norm with
  ``rmsnorm``: its scale is ``ln_scale``; ``wq`` ``(D, H·dh)``, ``wk`` and ``wv``
  ``(D, Hkv·dh)``, ``wo`` ``(H·dh, D)``, no biases) and ``ffw`` with a SwiGLU (``w1`` the gate,
  ``w3`` the up projection, ``w2`` the down one, no biases, as Meta's names go);
- rotary embeddings rotate the two halves of each head (Hugging Face's ``rotate_half``), so
  Hugging Face's q and k weights are taken as they are, without Meta's interleaving permutation;
- a final ``rmsnorm`` and an untied output ``fc bias=false`` (``lm_head``).
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, transpose

X = "layers.{i}."
L = "repeat_0/llamalayer_0/"
ATT, FFW = L + "self_att_0/", L + "ffw_0/"
T = (transpose(),)

MAP = FamilyMap(
    name="llama",
    doc="LLaMA / Mistral (Hugging Face LlamaForCausalLM, MistralForCausalLM)",
    spec="specs/llama2-7b.lbdl",
    prefixes=("model.",),
    ignore=(X + "self_attn.rotary_emb.inv_freq", "rotary_emb.inv_freq"),
    rules=(
        Rule("embed_tokens.weight", "embed_0/table"),
        Rule(X + "input_layernorm.weight", ATT + "ln_scale"),
        Rule(X + "self_attn.q_proj.weight", ATT + "wq", T),
        Rule(X + "self_attn.k_proj.weight", ATT + "wk", T),
        Rule(X + "self_attn.v_proj.weight", ATT + "wv", T),
        Rule(X + "self_attn.o_proj.weight", ATT + "wo", T),
        Rule(X + "post_attention_layernorm.weight", FFW + "ln_scale"),
        Rule(X + "mlp.gate_proj.weight", FFW + "w1", T),
        Rule(X + "mlp.up_proj.weight", FFW + "w3", T),
        Rule(X + "mlp.down_proj.weight", FFW + "w2", T),
        Rule("norm.weight", "rmsnorm_0/scale"),
        Rule("lm_head.weight", "fc_0/w", T),
    ),
)
