"""A compiled model in Python: the generated module, executed, with conveniences around it.

`Model.apply` *is* the ``apply`` of the module ``--emit py`` writes: the text is generated once
and executed here, so the two cannot disagree. The text comes from our code generator, never
from the spec: every spec-provided name in it went through the sanitising namespace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax import weights
from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.backends.jax.runtime import unflatten
from lbdl_dsl.compiler.driver import Compiled
from lbdl_dsl.core.symbolic import Expr


class Model:
    """``init(key) -> (params, state)``; ``apply(params, state, *inputs, train, key)``."""

    def __init__(self, compiled: Compiled, *, unroll: bool = False, dtype: str = "float32") -> None:
        self.compiled = compiled
        self.checked = compiled.checked
        self.source = generate(compiled, unroll=unroll, dtype=dtype)
        namespace: dict[str, Any] = {"__name__": f"lbdl_generated_{self.name}"}
        exec(compile(self.source, f"<lbdl {compiled.file}>", "exec"), namespace)  # noqa: S102
        self.module = namespace
        self.init: Callable = namespace["init"]
        self.apply: Callable = namespace["apply"]

    @property
    def name(self) -> str:
        return self.compiled.program.model.name

    @functools.cached_property
    def jit_apply(self) -> Callable:
        """``apply`` compiled with ``jax.jit`` (``train`` is static)."""
        return jax.jit(self.apply, static_argnames=("train",))

    @property
    def param_count(self) -> int:
        return int(self.checked.totals["params"].as_int())

    @property
    def inputs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Input name → (per-sample shape, dtype), in the spec's channels-first order."""
        out = {}
        for name, t in self.checked.inputs.items():
            shape = tuple(_int(d) for d in t.shape)
            out[name] = (
                shape,
                "int32" if t.dtype == "int" else t.dtype.replace("float", "float32"),
            )
        return out

    @property
    def outputs(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(_int(d) for d in t.shape) for k, t in self.checked.outputs.items()}

    def example_inputs(self, key: jax.Array, batch: int = 2) -> list[jax.Array]:
        """Random inputs of the spec's shapes (tokens uniform in their range)."""
        arrays = []
        for i, (name, t) in enumerate(self.checked.inputs.items()):
            shape = (batch, *self.inputs[name][0])
            k = jax.random.fold_in(key, i)
            if t.dtype == "int":
                arrays.append(jax.random.randint(k, shape, 0, _int(t.vocab), jnp.int32))
            elif t.dtype == "bool":
                arrays.append(jax.random.bernoulli(k, 0.5, shape))
            else:
                arrays.append(jax.random.normal(k, shape, jnp.float32))
        return arrays

    def summary(self, depth: int | None = 1) -> str:
        from lbdl_dsl import report

        return report.render_table(self.checked, depth)

    def diagram(self, fmt: str = "svg", expand: str | None = None) -> str | bytes:
        """The diagram in the book's style: SVG text by default, or png/pdf bytes."""
        from lbdl_dsl.backends import diagram

        dot = diagram.to_dot(self.compiled, expand=expand)
        if fmt == "dot":
            return dot
        data = diagram.render(dot, fmt)
        return data.decode("utf-8") if fmt == "svg" else data

    def _repr_svg_(self) -> str:
        return self.diagram("svg")

    def __repr__(self) -> str:
        return f"<lbdl Model {self.name}: {self.param_count:,} parameters>"

    # -- parameters on disk ---------------------------------------------------------------------
    def save(self, path: str | Path, params: Any, state: Any = None) -> Path:
        """Parameters (and state) to ``.safetensors`` (or ``.npz``), keyed by their paths."""
        return weights.save(path, params, state)

    def load(self, path: str | Path) -> tuple[Any, Any]:
        """(params, state) from a file written by `save`, `lbdl train` or `lbdl import`.

        Every path and shape is checked against the model first; a file of another model (or of
        this one with other ``--set`` values) is refused with the list of differences.
        """
        params, state = weights.load_checked(path, self.module["PARAMS"], self.module["STATE"])
        as_jax = {k: jnp.asarray(v) for k, v in params.items()}
        return unflatten(as_jax), unflatten({k: jnp.asarray(v) for k, v in state.items()})


def _int(d: Expr | None) -> int:
    v = d.as_int() if isinstance(d, Expr) else d
    if v is None:
        raise ValueError(f"the size {d} is symbolic; give it a value when compiling")
    return int(v)
