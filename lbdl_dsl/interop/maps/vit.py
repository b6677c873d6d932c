"""ViT (Hugging Face's ``ViTForImageClassification``, google/vit-base-patch16-224) into
specs/vit-b16.lbdl.

The patch embedding is a P×P convolution of stride P; our `patches` box flattens each patch
channels first, so the convolution's ``(D, C, P, P)`` weight is the fc's ``(C·P·P, D)``. The
class token and the positions are stored with a leading batch axis of 1, which goes. Every
``Linear`` is transposed. Hugging Face renamed ViT's modules in transformers 5
(``layers.{i}.attention.q_proj``); checkpoints on the Hub keep the names of 4.x
(``encoder.layer.{i}.attention.attention.query``): both are read.
"""

from lbdl_dsl.interop.layout import FamilyMap, Op, Rule, conv_as_fc, squeeze, transpose

L = "repeat_0/"
ATT, FFW = L + "self_att_0/", L + "ffw_0/"
MHA = ATT + "att/"  # the attention inside the self-att box, beside its layernorm `ln`
T = (transpose(),)
NEW, OLD = "layers.{i}.", "encoder.layer.{i}."


def _layer(new: str, old: str, target: str, ops: tuple[Op, ...] = ()) -> Rule:
    return Rule((NEW + new, OLD + old), target, ops)


MAP = FamilyMap(
    name="vit",
    doc="ViT (Hugging Face ViTForImageClassification / ViTModel)",
    spec="specs/vit-b16.lbdl",
    prefixes=("vit.",),
    ignore=("pooler.{*}",),
    rules=(
        Rule("embeddings.patch_embeddings.projection.weight", "fc_0/w", (conv_as_fc(),)),
        Rule("embeddings.patch_embeddings.projection.bias", "fc_0/b"),
        Rule("embeddings.cls_token", "cls_token_0/e0", (squeeze(),)),
        Rule("embeddings.position_embeddings", "pos_embed_0/table", (squeeze(),)),
        _layer("layernorm_before.weight", "layernorm_before.weight", ATT + "ln/scale"),
        _layer("layernorm_before.bias", "layernorm_before.bias", ATT + "ln/bias"),
        _layer("attention.q_proj.weight", "attention.attention.query.weight", MHA + "wq", T),
        _layer("attention.q_proj.bias", "attention.attention.query.bias", MHA + "bq"),
        _layer("attention.k_proj.weight", "attention.attention.key.weight", MHA + "wk", T),
        _layer("attention.k_proj.bias", "attention.attention.key.bias", MHA + "bk"),
        _layer("attention.v_proj.weight", "attention.attention.value.weight", MHA + "wv", T),
        _layer("attention.v_proj.bias", "attention.attention.value.bias", MHA + "bv"),
        _layer("attention.o_proj.weight", "attention.output.dense.weight", MHA + "wo", T),
        _layer("attention.o_proj.bias", "attention.output.dense.bias", MHA + "bo"),
        _layer("layernorm_after.weight", "layernorm_after.weight", FFW + "ln/scale"),
        _layer("layernorm_after.bias", "layernorm_after.bias", FFW + "ln/bias"),
        _layer("mlp.fc1.weight", "intermediate.dense.weight", FFW + "fc1/w", T),
        _layer("mlp.fc1.bias", "intermediate.dense.bias", FFW + "fc1/b"),
        _layer("mlp.fc2.weight", "output.dense.weight", FFW + "fc2/w", T),
        _layer("mlp.fc2.bias", "output.dense.bias", FFW + "fc2/b"),
        Rule("layernorm.weight", "layernorm_0/scale"),
        Rule("layernorm.bias", "layernorm_0/bias"),
        Rule("classifier.weight", "fc_1/w", T),
        Rule("classifier.bias", "fc_1/b"),
    ),
)
