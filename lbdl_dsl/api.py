"""The Python API: ``lbdl_dsl.compile("specs/lenet.lbdl", N=4)``.

Checking needs neither JAX nor Graphviz; `compile` returns a JAX `Model` (importing JAX then) and
`check` returns the checked program alone, for tools that only need shapes and counts.
"""

from __future__ import annotations

import os
from typing import Any

from lbdl_dsl.compiler.driver import Compiled, compile_spec


def check(spec: str | os.PathLike[str], *, text: str | None = None, **overrides: Any) -> Compiled:
    """Parse, build and check a spec (a path, or ``text`` named by ``spec``)."""
    if text is not None:
        return compile_spec(text, file=str(spec), overrides=overrides, origin="keyword")
    return compile_spec(os.fspath(spec), overrides=overrides, origin="keyword")


def compile(  # noqa: A001 - the verb users expect, as in jax.jit(...).lower(...).compile()
    spec: str | os.PathLike[str],
    *,
    text: str | None = None,
    unroll: bool = False,
    dtype: str = "float32",
    **overrides: Any,
):
    """A runnable `Model` for a spec; model parameters are keyword arguments (``N=24``)."""
    from lbdl_dsl.backends.jax.model import Model

    return Model(check(spec, text=text, **overrides), unroll=unroll, dtype=dtype)
