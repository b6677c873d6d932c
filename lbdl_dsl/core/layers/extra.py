"""Layers the spec library needs beyond the book's boxes: ReLU6 and a trainable scale.

`relu6` is MobileNetV2's activation (Sandler et al. 2018); `scale` multiplies by one trainable
scalar kept as its logarithm, CLIP's temperature on the similarity of its two embeddings
(Radford et al. 2021).
"""

from __future__ import annotations

from lbdl_dsl.core.layers.base import TOKEN, ZEROS, Layer, PSpec, numpy

RELU6 = Layer(
    name="relu6",
    category="Activation",
    doc="ReLU clipped at 6, min(max(0, x), 6) (MobileNetV2, PyTorch's ReLU6).",
    layout="any",
    rf=True,
    example=("32×8×8", "relu6"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: numpy().clip(xs[0], 0.0, 6.0),
)

SCALE = Layer(
    name="scale",
    aliases=("logit-scale",),
    category="Dense",
    doc="Multiplies every value by exp(s), s one trainable scalar (CLIP's learned temperature "
    "on its similarity matrix). s starts at 0 (a scale of 1): CLIP's log(1/0.07) is not an "
    "initialiser the registry has.",
    params=lambda c: {"log_s": PSpec((), ZEROS, ())},
    layout="any",
    rf=True,
    example=("8×8", "scale"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: xs[0] * numpy().exp(p["log_s"]),
)

LAYERS = (RELU6, SCALE)
