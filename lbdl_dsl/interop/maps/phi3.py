"""Phi-3 (Hugging Face's ``Phi3ForCausalLM``: Microsoft's Phi-3 and Phi-4-mini) into a
LLaMA-shaped spec: specs/phi3-mini.lbdl, or the one ``lbdl from-hf`` writes.

Phi-3 is LLaMA's layer with two projections fused, and the spec's paths are LLaMA's
(`maps.llama`: per layer, stacked over ×N, ``repeat_0/attn/ln/scale``,
``repeat_0/attn/att/w{q,k,v,o}``, ``repeat_0/mlp/ln/scale``, ``repeat_0/mlp/{gate,up,down}/w``;
then ``rmsnorm_0/scale`` and the output layer ``fc_0/w``, or none when it is tied):

- ``self_attn.qkv_proj.weight`` ``(H·d + 2·KV·d, D)`` holds the query rows, then the key
  rows, then the value rows (transformers slices them so). Transposed to ``(D, H·d + 2·KV·d)``
  and cut along its columns into our ``wq`` ``(D, H·d)``, ``wk`` and ``wv`` ``(D, KV·d)``: an
  uneven cut under grouped-query attention, whose widths are the spec's (`layout.split_to`).
- ``mlp.gate_up_proj.weight`` ``(2F, D)`` holds the gate rows (the half under SiLU) first,
  then the up rows (transformers' ``chunk(2)``): transposed and cut in two equal halves, our
  ``gate/w`` and ``up/w``.
- Every other tensor is LLaMA's, under LLaMA's name. q and k are taken as stored: transformers
  rotates the first ``partial_rotary_factor`` of each head's features in the rotate-half
  order, as our ``rope`` with ``rot=`` does. Nothing has a bias.
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, split, split_to
from lbdl_dsl.interop.maps.llama import ATT, FFW, HEAD, IGNORE, MHA, T, X

MAP = FamilyMap(
    name="phi3",
    doc="Phi-3 (Hugging Face Phi3ForCausalLM)",
    spec="specs/phi3-mini.lbdl",
    prefixes=("model.",),
    ignore=IGNORE,
    sizes=(
        "a qkv_proj of fewer rows than 3·hidden_size is grouped-query attention "
        "(the config's num_key_value_heads): the spec's KV"
    ),
    rules=(
        Rule("embed_tokens.weight", "embed_0/table"),
        Rule(X + "input_layernorm.weight", ATT + "ln/scale"),
        Rule(
            X + "self_attn.qkv_proj.weight",
            (MHA + "wq", MHA + "wk", MHA + "wv"),
            (*T, split_to(3, 1)),
        ),
        Rule(X + "self_attn.o_proj.weight", MHA + "wo", T),
        Rule(X + "post_attention_layernorm.weight", FFW + "ln/scale"),
        Rule(X + "mlp.gate_up_proj.weight", (FFW + "gate/w", FFW + "up/w"), (*T, split(2, 1))),
        Rule(X + "mlp.down_proj.weight", FFW + "down/w", T),
        *HEAD,
    ),
)
