"""LLaMA and Mistral (Hugging Face's ``LlamaForCausalLM``/``MistralForCausalLM``) into the
LLaMA-family specs (specs/llama2-7b.lbdl, specs/mistral-7b.lbdl, being written).

Those specs need rotary positions and grouped-query attention, which the language is gaining
now; this map is written against the parameter layout they are expected to have, and its
end-to-end test waits for them. The assumptions, to check when the specs land:

- the body is ``×N:`` over a block ``llamalayer`` holding a pre-norm self-attention box and a
  feed-forward box, both expanded into primitives as main's composite boxes are: the attention
  box's ``rmsnorm`` is ``ln`` (its scale ``ln/scale``) and its attention ``att`` (``att/wq``
  ``(D, H·dh)``, ``att/wk`` and ``att/wv`` ``(D, Hkv·dh)``, ``att/wo`` ``(H·dh, D)``, no
  biases); the feed-forward box's ``rmsnorm`` is ``ln`` and its SwiGLU has three fc boxes
  without biases: ``gate`` (Meta's w1), ``fc1`` the up projection (w3) and ``fc2`` the down
  projection (w2), as ``ffw``'s ``fc1``/``fc2`` are named;
- rotary embeddings rotate the two halves of each head (Hugging Face's ``rotate_half``), so
  Hugging Face's q and k weights are taken as they are, without Meta's interleaving permutation;
- a final ``rmsnorm`` and an untied output ``fc bias=false`` (``lm_head``).
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, transpose

X = "layers.{i}."
L = "repeat_0/llamalayer_0/"
ATT, FFW = L + "self_att_0/", L + "ffw_0/"
MHA = ATT + "att/"  # the attention inside the attention box, beside its rmsnorm `ln`
T = (transpose(),)

MAP = FamilyMap(
    name="llama",
    doc="LLaMA / Mistral (Hugging Face LlamaForCausalLM, MistralForCausalLM)",
    spec="specs/llama2-7b.lbdl",
    prefixes=("model.",),
    ignore=(X + "self_attn.rotary_emb.inv_freq", "rotary_emb.inv_freq"),
    rules=(
        Rule("embed_tokens.weight", "embed_0/table"),
        Rule(X + "input_layernorm.weight", ATT + "ln/scale"),
        Rule(X + "self_attn.q_proj.weight", MHA + "wq", T),
        Rule(X + "self_attn.k_proj.weight", MHA + "wk", T),
        Rule(X + "self_attn.v_proj.weight", MHA + "wv", T),
        Rule(X + "self_attn.o_proj.weight", MHA + "wo", T),
        Rule(X + "post_attention_layernorm.weight", FFW + "ln/scale"),
        Rule(X + "mlp.gate_proj.weight", FFW + "gate/w", T),
        Rule(X + "mlp.up_proj.weight", FFW + "fc1/w", T),
        Rule(X + "mlp.down_proj.weight", FFW + "fc2/w", T),
        Rule("norm.weight", "rmsnorm_0/scale"),
        Rule("lm_head.weight", "fc_0/w", T),
    ),
)
