"""lbdl: neural architectures written the way The Little Book of Deep Learning draws them.

``lbdl_dsl.compile(spec, **params)`` gives a runnable JAX model; ``lbdl_dsl.check(spec)`` gives
the checked program (shapes, parameter and MAC counts) without importing JAX;
``lbdl_dsl.train(spec, data, steps=...)`` trains it (importing JAX, optax and orbax then).
"""

from lbdl_dsl.api import check, compile, from_pretrained
from lbdl_dsl.core.errors import ArgumentError, LbdlError
from lbdl_dsl.training import TrainConfig, train

__all__ = [
    "ArgumentError",
    "LbdlError",
    "TrainConfig",
    "check",
    "compile",
    "from_pretrained",
    "train",
]
__version__ = "0.1.0"
