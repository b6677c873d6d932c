"""StarCoder2 (Hugging Face's ``Starcoder2ForCausalLM``) into the spec ``lbdl from-hf`` writes:
LLaMA's paths (``repeat_0/attn/...``, ``repeat_0/mlp/...``, `maps.llama`) for a layer whose
norms are layernorms with biases and whose feed-forward is plain (``fc1``, ``fc2`` of the
``ffw`` box: ``mlp.c_fc``, ``mlp.c_proj``), every projection with a bias under ``use_bias``
(`BIASED`, the released models') or none. The final norm is ``layernorm_0``; the output layer
is tied to the embedding in the released models.
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule
from lbdl_dsl.interop.maps.llama import ATT, FFW, IGNORE, MHA, T, X

MAP = FamilyMap(
    name="starcoder2",
    doc="StarCoder2 (Hugging Face Starcoder2ForCausalLM), use_bias: false",
    spec="lbdl from-hf (self-att, ffw act=gelu-tanh, layernorms)",
    prefixes=("model.",),
    ignore=IGNORE,
    sizes="StarCoder2's config names the key/value heads num_key_value_heads (KV)",
    rules=(
        Rule("embed_tokens.weight", "embed_0/table"),
        Rule(X + "input_layernorm.weight", ATT + "ln/scale"),
        Rule(X + "input_layernorm.bias", ATT + "ln/bias"),
        *(Rule(X + f"self_attn.{n}_proj.weight", MHA + f"w{n}", T) for n in "qkvo"),
        Rule(X + "post_attention_layernorm.weight", FFW + "ln/scale"),
        Rule(X + "post_attention_layernorm.bias", FFW + "ln/bias"),
        Rule(X + "mlp.c_fc.weight", FFW + "fc1/w", T),
        Rule(X + "mlp.c_proj.weight", FFW + "fc2/w", T),
        Rule("norm.weight", "layernorm_0/scale"),
        Rule("norm.bias", "layernorm_0/bias"),
        Rule("lm_head.weight", "fc_0/w", T),
    ),
)

BIASED = replace(
    MAP,
    doc="StarCoder2 (Hugging Face Starcoder2ForCausalLM)",
    rules=(
        *MAP.rules,
        *(Rule(X + f"self_attn.{n}_proj.bias", MHA + f"b{n}") for n in "qkvo"),
        Rule(X + "mlp.c_fc.bias", FFW + "fc1/b"),
        Rule(X + "mlp.c_proj.bias", FFW + "fc2/b"),
    ),
)

VARIANTS = (BIASED, MAP)
