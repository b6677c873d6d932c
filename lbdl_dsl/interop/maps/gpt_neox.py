"""GPT-NeoX and Pythia (Hugging Face's ``GPTNeoXForCausalLM``) into ``neox ×N``
(specs/blocks/gpt_neox.lbdl), as ``lbdl from-hf`` writes it: per layer i,
``repeat_0/neox_0/`` then ``ln1``, ``att`` (the `mha`), ``ln2``, ``fc1``, ``fc2``.

``attention.query_key_value`` ``(3·D, D)`` holds, head after head, that head's query, key and
value rows (transformers views it as (…, H, 3·d) and chunks the last axis), so it is cut by
heads (`layout.split_heads`), which needs H: the map is made for a head count and named with
it, ``--map gpt_neox@8`` for Pythia-70M's 8 heads. Its bias is cut the same way. Every other
projection is a PyTorch ``Linear``, transposed. ``embed_out`` is the untied output layer;
``attention.bias`` and ``masked_bias`` (old causal-mask buffers) and ``rotary_emb.inv_freq``
are left out.
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, split_heads, transpose

X = "layers.{i}."
L = "repeat_0/neox_0/"
T = (transpose(),)
IGNORE = tuple(X + f"attention.{n}" for n in ("bias", "masked_bias", "rotary_emb.inv_freq"))


def _linear(source: str, target: str) -> tuple[Rule, Rule]:
    return Rule(source + ".weight", target + "/w", T), Rule(source + ".bias", target + "/b")


def build(heads: int) -> tuple[FamilyMap, ...]:
    """The map of a model of ``heads`` attention heads."""
    qkv = X + "attention.query_key_value"
    rules = (
        Rule("embed_in.weight", "embed_0/table"),
        Rule(X + "input_layernorm.weight", L + "ln1/scale"),
        Rule(X + "input_layernorm.bias", L + "ln1/bias"),
        Rule(
            qkv + ".weight", (L + "att/wq", L + "att/wk", L + "att/wv"), (split_heads(3, heads), *T)
        ),  # fmt: skip
        Rule(qkv + ".bias", (L + "att/bq", L + "att/bk", L + "att/bv"), (split_heads(3, heads),)),
        Rule(X + "attention.dense.weight", L + "att/wo", T),
        Rule(X + "attention.dense.bias", L + "att/bo"),
        Rule(X + "post_attention_layernorm.weight", L + "ln2/scale"),
        Rule(X + "post_attention_layernorm.bias", L + "ln2/bias"),
        *_linear(X + "mlp.dense_h_to_4h", L + "fc1"),
        *_linear(X + "mlp.dense_4h_to_h", L + "fc2"),
        Rule("final_layer_norm.weight", "layernorm_0/scale"),
        Rule("final_layer_norm.bias", "layernorm_0/bias"),
        Rule("embed_out.weight", "fc_0/w", T),
    )
    return (
        FamilyMap(
            name=f"gpt_neox@{heads}",
            doc="GPT-NeoX / Pythia (Hugging Face GPTNeoXForCausalLM)",
            spec="lbdl from-hf (neox ×N, blocks/gpt_neox.lbdl)",
            prefixes=("gpt_neox.", ""),
            ignore=(
                X + "attention.bias",
                X + "attention.masked_bias",
                X + "attention.rotary_emb.inv_freq",
            ),
            sizes="GPT-NeoX's fused query_key_value is cut by heads: name the head count, "
            "--map gpt_neox@H",
            rules=rules,
        ),
    )
