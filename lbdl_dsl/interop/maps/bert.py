"""BERT (Hugging Face's ``BertModel``, and the encoder of ``BertFor...`` models) into
specs/bert-base.lbdl.

PyTorch's ``Linear`` stores ``(out, in)``: every projection is transposed into our fc's
``(in, out)``. The pre-training heads (``cls.*``) are not part of the spec and are left out,
as is the ``position_ids`` buffer some checkpoints carry.

Two variants, by the spec's paths: `MAP` for ``postnorm ×N`` (specs/bert-base.lbdl, and
``lbdl from-hf``'s spec of a gelu BERT), `INLINE` for a ``×N:`` group of the block's boxes,
which ``lbdl from-hf`` writes for another ``hidden_act`` (gelu_new, relu).
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule, transpose

E = "embeddings."
X = "encoder.layer.{i}."
T = (transpose(),)


def _rules(layer: str) -> tuple[Rule, ...]:
    mha, ff = layer + "residual_0/mha_0/", layer + "residual_1/"
    return (
        Rule(E + "word_embeddings.weight", "embed_0/table"),
        Rule(E + "token_type_embeddings.weight", "embed_1/table"),
        Rule(E + "position_embeddings.weight", "pos_embed_0/table"),
        Rule(E + "LayerNorm.weight", "layernorm_0/scale"),
        Rule(E + "LayerNorm.bias", "layernorm_0/bias"),
        Rule(X + "attention.self.query.weight", mha + "wq", T),
        Rule(X + "attention.self.query.bias", mha + "bq"),
        Rule(X + "attention.self.key.weight", mha + "wk", T),
        Rule(X + "attention.self.key.bias", mha + "bk"),
        Rule(X + "attention.self.value.weight", mha + "wv", T),
        Rule(X + "attention.self.value.bias", mha + "bv"),
        Rule(X + "attention.output.dense.weight", mha + "wo", T),
        Rule(X + "attention.output.dense.bias", mha + "bo"),
        Rule(X + "attention.output.LayerNorm.weight", layer + "layernorm_0/scale"),
        Rule(X + "attention.output.LayerNorm.bias", layer + "layernorm_0/bias"),
        Rule(X + "intermediate.dense.weight", ff + "fc_0/w", T),
        Rule(X + "intermediate.dense.bias", ff + "fc_0/b"),
        Rule(X + "output.dense.weight", ff + "fc_1/w", T),
        Rule(X + "output.dense.bias", ff + "fc_1/b"),
        Rule(X + "output.LayerNorm.weight", layer + "layernorm_1/scale"),
        Rule(X + "output.LayerNorm.bias", layer + "layernorm_1/bias"),
        Rule("pooler.dense.weight", "fc_0/w", T),
        Rule("pooler.dense.bias", "fc_0/b"),
    )


MAP = FamilyMap(
    name="bert",
    doc="BERT (Hugging Face BertModel)",
    spec="specs/bert-base.lbdl",
    prefixes=("bert.",),
    ignore=("cls.{*}", E + "position_ids", "{*}.position_ids"),
    rules=_rules("repeat_0/postnorm_0/"),
)

INLINE = replace(
    MAP,
    spec="lbdl from-hf's BERT with postnorm's boxes written out (another hidden_act)",
    rules=_rules("repeat_0/"),
)

VARIANTS = (MAP, INLINE)
