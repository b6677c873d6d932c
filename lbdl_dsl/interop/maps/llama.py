"""LLaMA and Mistral (Hugging Face's ``LlamaForCausalLM``/``MistralForCausalLM``) into
specs/llama2-7b.lbdl and specs/mistral-7b.lbdl.

Both specs name their layer's boxes (``-> attn``, ``-> mlp``), so the paths are the ones their
headers document: per layer, stacked over ``×N``, ``repeat_0/attn/ln/scale`` and
``repeat_0/attn/att/w{q,k,v,o}``, ``repeat_0/mlp/ln/scale`` and ``repeat_0/mlp/{gate,up,down}/w``;
then the final ``rmsnorm_0/scale`` and the untied output layer ``fc_0/w`` (``lm_head``). Nothing
has a bias unless the config says ``attention_bias`` (below).

- Every projection is a PyTorch ``Linear``, ``(out, in)``: transposed to our ``(in, out)``.
- Grouped-query attention needs nothing more: ``k_proj``/``v_proj`` are ``(KV·dh, D)``, our
  ``wk``/``wv`` ``(D, KV·dh)``, and both read query head i with key/value head ``i // (H/KV)``
  (Hugging Face's ``repeat_kv`` repeats each key/value head for consecutive query heads).
- Rotary positions: Hugging Face's checkpoints store q and k with each head's features in the
  rotate-half order (pairs ``(x_j, x_{j+dh/2})``; Meta's interleaved pairs were permuted by
  transformers' conversion script), and our ``rope`` rotates the same halves, so the weights are
  taken as they are. Meta's own ``consolidated.*.pth`` files keep the interleaved order and are
  not read here: convert them with transformers first.
- ``rotary_emb.inv_freq`` buffers (older checkpoints) are recomputed from the spec's ``theta``.

ε (1e-5 in both specs, as in the released models' configs) and θ (10,000) are the spec's own:
a checkpoint trained with others imports, and computes slightly otherwise (transformers'
``LlamaConfig`` defaults to ε=1e-6: tests/fixtures/interop/llama-tiny.lbdl says so).
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule, transpose

X = "layers.{i}."
ATT, FFW = "repeat_0/attn/", "repeat_0/mlp/"
MHA = ATT + "att/"  # the attention inside the self-att box, beside its rmsnorm `ln`
T = (transpose(),)

# what LLaMA's descendants (Mistral, Mixtral: `maps.mixtral`) share: the embedding, each
# layer's attention half, the final norm and the output layer
ATTENTION = (
    Rule("embed_tokens.weight", "embed_0/table"),
    Rule(X + "input_layernorm.weight", ATT + "ln/scale"),
    Rule(X + "self_attn.q_proj.weight", MHA + "wq", T),
    Rule(X + "self_attn.k_proj.weight", MHA + "wk", T),
    Rule(X + "self_attn.v_proj.weight", MHA + "wv", T),
    Rule(X + "self_attn.o_proj.weight", MHA + "wo", T),
)
HEAD = (Rule("norm.weight", "rmsnorm_0/scale"), Rule("lm_head.weight", "fc_0/w", T))
IGNORE = (X + "self_attn.rotary_emb.inv_freq", "rotary_emb.inv_freq")

MAP = FamilyMap(
    name="llama",
    doc="LLaMA / Mistral (Hugging Face LlamaForCausalLM, MistralForCausalLM)",
    spec="specs/llama2-7b.lbdl",
    prefixes=("model.",),
    ignore=IGNORE,
    sizes=(
        "a k_proj narrower than q_proj is grouped-query attention (the config's "
        "num_key_value_heads): specs/mistral-7b.lbdl takes it with --set KV=... "
        "(and W at least the context, for no sliding window)"
    ),
    rules=(
        *ATTENTION,
        Rule(X + "post_attention_layernorm.weight", FFW + "ln/scale"),
        Rule(X + "mlp.gate_proj.weight", FFW + "gate/w", T),
        Rule(X + "mlp.up_proj.weight", FFW + "up/w", T),
        Rule(X + "mlp.down_proj.weight", FFW + "down/w", T),
        *HEAD,
    ),
)

BIASED = replace(
    MAP,
    doc="LLaMA / Gemma with attention_bias (on q_proj, k_proj, v_proj, o_proj) or LLaMA with "
    "mlp_bias (on gate_proj, up_proj, down_proj)",
    spec="lbdl from-hf (self-att ... bias=true, ffw ... bias=true)",
    rules=(
        *MAP.rules,
        Rule(X + "self_attn.q_proj.bias", MHA + "bq"),
        Rule(X + "self_attn.k_proj.bias", MHA + "bk"),
        Rule(X + "self_attn.v_proj.bias", MHA + "bv"),
        Rule(X + "self_attn.o_proj.bias", MHA + "bo"),
        Rule(X + "mlp.gate_proj.bias", FFW + "gate/b"),
        Rule(X + "mlp.up_proj.bias", FFW + "up/b"),
        Rule(X + "mlp.down_proj.bias", FFW + "down/b"),
    ),
)

VARIANTS = (MAP, BIASED)
