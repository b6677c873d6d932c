"""GPT-2 (Hugging Face's ``GPT2Model``/``GPT2LMHeadModel``, OpenAI's released checkpoints) into
specs/gpt2.lbdl.

GPT-2's projections are ``Conv1D`` modules whose weights are already ``(in, out)``, as our fc's
are: nothing is transposed. ``c_attn`` holds the query, key and value projections side by side
and is split in three. The output layer is tied to the token embedding in both, so
``lm_head.weight`` (present in older pickles) is left out, as are the causal-mask buffers
(``attn.bias``, ``attn.masked_bias``) of older checkpoints.
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, split

L = "repeat_0/tlayer_0/"
ATT, FFW = L + "self_att_0/", L + "ffw_0/"
MHA = ATT + "att/"  # the attention inside the self-att box, beside its layernorm `ln`

MAP = FamilyMap(
    name="gpt2",
    doc="GPT-2 (Hugging Face GPT2Model / GPT2LMHeadModel)",
    spec="specs/gpt2.lbdl",
    prefixes=("transformer.",),
    ignore=("h.{i}.attn.bias", "h.{i}.attn.masked_bias", "lm_head.weight"),
    rules=(
        Rule("wte.weight", "embed_0/table"),
        Rule("wpe.weight", "pos_embed_0/table"),
        Rule("h.{i}.ln_1.weight", ATT + "ln/scale"),
        Rule("h.{i}.ln_1.bias", ATT + "ln/bias"),
        Rule("h.{i}.attn.c_attn.weight", (MHA + "wq", MHA + "wk", MHA + "wv"), (split(3, 1),)),
        Rule("h.{i}.attn.c_attn.bias", (MHA + "bq", MHA + "bk", MHA + "bv"), (split(3, 0),)),
        Rule("h.{i}.attn.c_proj.weight", MHA + "wo"),
        Rule("h.{i}.attn.c_proj.bias", MHA + "bo"),
        Rule("h.{i}.ln_2.weight", FFW + "ln/scale"),
        Rule("h.{i}.ln_2.bias", FFW + "ln/bias"),
        Rule("h.{i}.mlp.c_fc.weight", FFW + "fc1/w"),
        Rule("h.{i}.mlp.c_fc.bias", FFW + "fc1/b"),
        Rule("h.{i}.mlp.c_proj.weight", FFW + "fc2/w"),
        Rule("h.{i}.mlp.c_proj.bias", FFW + "fc2/b"),
        Rule("ln_f.weight", "layernorm_0/scale"),
        Rule("ln_f.bias", "layernorm_0/bias"),
    ),
)
