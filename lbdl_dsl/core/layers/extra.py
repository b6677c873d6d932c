"""Layers the spec library needs beyond the book's boxes: ReLU6 and a trainable scale.

`relu6` is MobileNetV2's activation (Sandler et al. 2018); `scale` multiplies by one trainable
scalar kept as its logarithm, CLIP's temperature on the similarity of its two embeddings
(Radford et al. 2021). Both lower to plain `jnp` expressions, so the runtime needs nothing new.
"""

from __future__ import annotations

from lbdl_dsl.core.layers.base import ZEROS, Emit, Layer, PSpec


def _relu6_lower(e: Emit) -> str:
    return f"jnp.clip({e.x[0]}, 0.0, 6.0)"


RELU6 = Layer(
    name="relu6",
    category="Activation",
    doc="ReLU clipped at 6, min(max(0, x), 6) (MobileNetV2, PyTorch's ReLU6).",
    lower=_relu6_lower,
    layout="any",
    example=("32×8×8", "relu6"),
)


def _scale_lower(e: Emit) -> str:
    return f"{e.x[0]} * jnp.exp({e.param('log_s')})"


SCALE = Layer(
    name="scale",
    aliases=("logit-scale",),
    category="Dense",
    doc="Multiplies every value by exp(s), s one trainable scalar (CLIP's learned temperature "
    "on its similarity matrix). s starts at 0 (a scale of 1): CLIP's log(1/0.07) is not an "
    "initialiser the registry has.",
    params=lambda c: {"log_s": PSpec((), ZEROS, ())},
    lower=_scale_lower,
    layout="any",
    example=("8×8", "scale"),
)

LAYERS = (RELU6, SCALE)
