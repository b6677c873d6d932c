"""The weight maps, one module per family; ``MAPS`` names them as ``--map`` takes them.

A family may have several variants (ResNet's basic and bottleneck blocks have different
parameters): the importer takes the variant whose parameter paths the spec has.
"""

from __future__ import annotations

from collections.abc import Callable

from lbdl_dsl.interop.layout import FamilyMap
from lbdl_dsl.interop.maps import (
    bert,
    gemma2,
    gemma3,
    gpt2,
    gpt_neox,
    llama,
    mixtral,
    olmo2,
    phi,
    phi3,
    qwen2,
    qwen3,
    resnet,
    starcoder2,
    vit,
)

MAPS: dict[str, tuple[FamilyMap, ...]] = {
    "gpt2": gpt2.VARIANTS,
    "llama": llama.VARIANTS,
    "mistral": (llama.MAP,),
    "mixtral": mixtral.VARIANTS,
    "resnet": resnet.VARIANTS,
    "vit": (vit.MAP,),
    "bert": bert.VARIANTS,
    "qwen2": (qwen2.MAP,),
    "qwen3": qwen3.VARIANTS,
    "gemma2": gemma2.VARIANTS,
    "gemma3": gemma3.build(),
    "starcoder2": starcoder2.VARIANTS,
    "qwen3_moe": qwen3.MOE,
    "phi": phi.VARIANTS,
    "phi3": (phi3.MAP,),
    "olmo2": olmo2.VARIANTS,
}


BUILT: dict[str, Callable[[int], tuple[FamilyMap, ...]]] = {
    "gemma3": gemma3.build,
    "gpt_neox": gpt_neox.build,
}
"""Maps made for one model, named ``FAMILY@K``: Gemma 3's ``gemma3@S``, whose layers from S on
are left over from its groups of six (S depends on the layer count); GPT-NeoX's
``gpt_neox@H``, whose fused projection is cut by its H heads."""
