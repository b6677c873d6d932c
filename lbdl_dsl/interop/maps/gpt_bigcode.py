"""GPTBigCode (Hugging Face's ``GPTBigCodeForCausalLM``: SantaCoder, StarCoder, WizardCoder)
into the spec ``lbdl from-hf`` writes: GPT-2's layer in a ``×N:`` group of named boxes, per
layer i ``repeat_0/attn/`` (its layernorm ``ln`` and attention ``att``) and ``repeat_0/mlp/``
(``ln``, ``fc1``, ``fc2``), learned positions, a final layernorm.

Where GPT-2's projections are ``Conv1D`` (``(in, out)``), these are PyTorch ``Linear``s
(``(out, in)``): every one is transposed. ``attn.c_attn`` holds the three projections:

- under multi-query attention (``multi_query``, the released models'), the D query rows, then
  one head's d key rows and d value rows: cut to the spec's widths (`layout.split_to`), our
  ``wq`` (D, D), ``wk`` and ``wv`` (D, d). This is `MAP`.
- otherwise, head after head, that head's query, key and value rows (transformers views the
  output as (…, H, 3·d)): cut by heads (`layout.split_heads`), so that map is made for the
  head count, ``--map gpt_bigcode@H`` (`build`).

The output layer is tied to the token embedding unless the config unties it
(``lm_head.weight``, then the spec's ``fc_0/w``); the causal-mask buffers of old checkpoints
are left out.
"""

from lbdl_dsl.interop.layout import FamilyMap, Op, Rule, split_heads, split_to, transpose

X = "h.{i}."
ATT, FFW = "repeat_0/attn/", "repeat_0/mlp/"
MHA = ATT + "att/"
T = (transpose(),)


def _rules(cut: tuple[Op, ...], cut_bias: tuple[Op, ...]) -> tuple[Rule, ...]:
    qkv = (MHA + "wq", MHA + "wk", MHA + "wv")
    return (
        Rule("wte.weight", "embed_0/table"),
        Rule("wpe.weight", "pos_embed_0/table"),
        Rule(X + "ln_1.weight", ATT + "ln/scale"),
        Rule(X + "ln_1.bias", ATT + "ln/bias"),
        Rule(X + "attn.c_attn.weight", qkv, cut),
        Rule(X + "attn.c_attn.bias", (MHA + "bq", MHA + "bk", MHA + "bv"), cut_bias),
        Rule(X + "attn.c_proj.weight", MHA + "wo", T),
        Rule(X + "attn.c_proj.bias", MHA + "bo"),
        Rule(X + "ln_2.weight", FFW + "ln/scale"),
        Rule(X + "ln_2.bias", FFW + "ln/bias"),
        Rule(X + "mlp.c_fc.weight", FFW + "fc1/w", T),
        Rule(X + "mlp.c_fc.bias", FFW + "fc1/b"),
        Rule(X + "mlp.c_proj.weight", FFW + "fc2/w", T),
        Rule(X + "mlp.c_proj.bias", FFW + "fc2/b"),
        Rule("ln_f.weight", "layernorm_0/scale"),
        Rule("ln_f.bias", "layernorm_0/bias"),
        Rule("lm_head.weight", "fc_0/w", T),
    )


def _map(name: str, doc: str, rules: tuple[Rule, ...]) -> FamilyMap:
    return FamilyMap(
        name=name,
        doc=doc,
        spec="lbdl from-hf (×N: self-att ... bias=true, ffw, learned positions)",
        prefixes=("transformer.", ""),
        ignore=(X + "attn.bias", X + "attn.masked_bias"),
        sizes="GPTBigCode's config names the layers n_layer (N), the width n_embd (D), the "
        "heads n_head (H); multi_query: one key/value head",
        rules=rules,
    )


MAP = _map(
    "gpt_bigcode",
    "GPTBigCode, multi-query (Hugging Face GPTBigCodeForCausalLM: SantaCoder, StarCoder)",
    _rules((*T, split_to(3, 1)), (split_to(3, 0),)),
)

VARIANTS = (MAP,)


def build(heads: int) -> tuple[FamilyMap, ...]:
    """The map of a model without multi-query attention, of ``heads`` heads."""
    return (
        _map(
            f"gpt_bigcode@{heads}",
            "GPTBigCode, multi_query false (Hugging Face GPTBigCodeForCausalLM)",
            _rules((split_heads(3, heads), *T), (split_heads(3, heads),)),
        ),
    )
