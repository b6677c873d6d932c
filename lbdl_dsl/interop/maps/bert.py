"""BERT (Hugging Face's ``BertModel``, and the encoder of ``BertFor...`` models) into
specs/bert-base.lbdl.

PyTorch's ``Linear`` stores ``(out, in)``: every projection is transposed into our fc's
``(in, out)``. The pre-training heads (``cls.*``) are not part of the spec and are left out,
as is the ``position_ids`` buffer some checkpoints carry.
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, transpose

E = "embeddings."
X = "encoder.layer.{i}."
L = "repeat_0/postnorm_0/"
MHA, FF = L + "residual_0/mha_0/", L + "residual_1/"
T = (transpose(),)

MAP = FamilyMap(
    name="bert",
    doc="BERT (Hugging Face BertModel)",
    spec="specs/bert-base.lbdl",
    prefixes=("bert.",),
    ignore=("cls.{*}", E + "position_ids", "{*}.position_ids"),
    rules=(
        Rule(E + "word_embeddings.weight", "embed_0/table"),
        Rule(E + "token_type_embeddings.weight", "embed_1/table"),
        Rule(E + "position_embeddings.weight", "pos_embed_0/table"),
        Rule(E + "LayerNorm.weight", "layernorm_0/scale"),
        Rule(E + "LayerNorm.bias", "layernorm_0/bias"),
        Rule(X + "attention.self.query.weight", MHA + "wq", T),
        Rule(X + "attention.self.query.bias", MHA + "bq"),
        Rule(X + "attention.self.key.weight", MHA + "wk", T),
        Rule(X + "attention.self.key.bias", MHA + "bk"),
        Rule(X + "attention.self.value.weight", MHA + "wv", T),
        Rule(X + "attention.self.value.bias", MHA + "bv"),
        Rule(X + "attention.output.dense.weight", MHA + "wo", T),
        Rule(X + "attention.output.dense.bias", MHA + "bo"),
        Rule(X + "attention.output.LayerNorm.weight", L + "layernorm_0/scale"),
        Rule(X + "attention.output.LayerNorm.bias", L + "layernorm_0/bias"),
        Rule(X + "intermediate.dense.weight", FF + "fc_0/w", T),
        Rule(X + "intermediate.dense.bias", FF + "fc_0/b"),
        Rule(X + "output.dense.weight", FF + "fc_1/w", T),
        Rule(X + "output.dense.bias", FF + "fc_1/b"),
        Rule(X + "output.LayerNorm.weight", L + "layernorm_1/scale"),
        Rule(X + "output.LayerNorm.bias", L + "layernorm_1/bias"),
        Rule("pooler.dense.weight", "fc_0/w", T),
        Rule("pooler.dense.bias", "fc_0/b"),
    ),
)
