"""GPT-2 (Hugging Face's ``GPT2Model``/``GPT2LMHeadModel``, OpenAI's released checkpoints) into
specs/gpt2.lbdl.

GPT-2's projections are ``Conv1D`` modules whose weights are already ``(in, out)``, as our fc's
are: nothing is transposed. ``c_attn`` holds the query, key and value projections side by side
and is split in three. The output layer is tied to the token embedding in both, so
``lm_head.weight`` (present in older pickles) is left out, as are the causal-mask buffers
(``attn.bias``, ``attn.masked_bias``) of older checkpoints.

Two variants, by the spec's paths: `MAP` for ``tlayer ×N`` (specs/gpt2.lbdl, and ``lbdl
from-hf``'s spec of most configs), `INLINE` for a ``×N:`` group of the block's two boxes,
which ``lbdl from-hf`` writes when the config's attention is not scaled
(``scale_attn_weights: false``) or its layernorms' ε is not tlayer's 1e-5.
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule, split


def _rules(layer: str) -> tuple[Rule, ...]:
    att, ffw = layer + "self_att_0/", layer + "ffw_0/"
    mha = att + "att/"  # the attention inside the self-att box, beside its layernorm `ln`
    return (
        Rule("wte.weight", "embed_0/table"),
        Rule("wpe.weight", "pos_embed_0/table"),
        Rule("h.{i}.ln_1.weight", att + "ln/scale"),
        Rule("h.{i}.ln_1.bias", att + "ln/bias"),
        Rule("h.{i}.attn.c_attn.weight", (mha + "wq", mha + "wk", mha + "wv"), (split(3, 1),)),
        Rule("h.{i}.attn.c_attn.bias", (mha + "bq", mha + "bk", mha + "bv"), (split(3, 0),)),
        Rule("h.{i}.attn.c_proj.weight", mha + "wo"),
        Rule("h.{i}.attn.c_proj.bias", mha + "bo"),
        Rule("h.{i}.ln_2.weight", ffw + "ln/scale"),
        Rule("h.{i}.ln_2.bias", ffw + "ln/bias"),
        Rule("h.{i}.mlp.c_fc.weight", ffw + "fc1/w"),
        Rule("h.{i}.mlp.c_fc.bias", ffw + "fc1/b"),
        Rule("h.{i}.mlp.c_proj.weight", ffw + "fc2/w"),
        Rule("h.{i}.mlp.c_proj.bias", ffw + "fc2/b"),
        Rule("ln_f.weight", "layernorm_0/scale"),
        Rule("ln_f.bias", "layernorm_0/bias"),
    )


MAP = FamilyMap(
    name="gpt2",
    doc="GPT-2 (Hugging Face GPT2Model / GPT2LMHeadModel)",
    spec="specs/gpt2.lbdl",
    prefixes=("transformer.",),
    ignore=("h.{i}.attn.bias", "h.{i}.attn.masked_bias", "lm_head.weight"),
    rules=_rules("repeat_0/tlayer_0/"),
)

INLINE = replace(
    MAP,
    spec="lbdl from-hf's GPT-2 with tlayer's boxes written out (`×N:` self-att, ffw)",
    rules=_rules("repeat_0/"),
)

VARIANTS = (MAP, INLINE)
