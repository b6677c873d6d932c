"""lbdl: neural architectures written the way The Little Book of Deep Learning draws them.

``lbdl_dsl.compile(spec, **params)`` gives a runnable JAX model; ``lbdl_dsl.check(spec)`` gives
the checked program (shapes, parameter and MAC counts) without importing JAX.
"""

from lbdl_dsl.api import check, compile
from lbdl_dsl.core.errors import ArgumentError, LbdlError

__all__ = ["ArgumentError", "LbdlError", "check", "compile"]
__version__ = "0.1.0"
