"""The compiler as a list of steps: parse → build → check.

`compile_spec` reads as the pipeline it runs; ``stop_after`` ends it early (the CLI's ``--emit
ast`` and ``--emit graph``, and tests of each stage). Backends take the `Compiled` result and never
re-parse. Model parameters are resolved here once: declared defaults in order, each one able to
use those before it, then ``--set`` overrides, which may also give values to input symbols
(``--set T=1024``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.build import build
from lbdl_dsl.compiler.graph import Program, verify
from lbdl_dsl.compiler.imports import Loaded, load, read_spec
from lbdl_dsl.compiler.infer import Checked, check
from lbdl_dsl.core.errors import LbdlError, Span, did_you_mean
from lbdl_dsl.core.layers import LAYERS
from lbdl_dsl.core.symbolic import Expr

STAGES = ("parse", "build", "check")


@dataclass
class Compiled:
    """What the compiler knows about one spec, as far as it got."""

    file: str
    loaded: Loaded
    program: Program | None = None
    checked: Checked | None = None

    @property
    def sources(self) -> dict[str, str]:
        return self.loaded.sources

    @property
    def ast(self) -> ast.Module:
        return self.loaded.main


def parse_value(text: str) -> Any:
    """A ``--set`` value: a whole number (``50_257``, ``26M`` is not a size), a float or a word."""
    t = text.strip()
    try:
        return int(t.replace("_", ""))
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    if t in ("true", "True", "false", "False"):
        return t.lower() == "true"
    return t


def _as_env_value(value: Any) -> Any:
    if isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, (int, Fraction)):
        return Expr.lift(value)
    return value


def model_env(program: Program, overrides: dict[str, Any]) -> dict[str, Any]:
    """The model's parameter values: defaults in order, with ``overrides`` applied."""
    model = program.model
    declared = {p.name for p in model.params}
    symbols: set[str] = set()
    for nid in model.body.inputs:
        node = model.body.node(nid)
        for d in node.annotation.dims if node.annotation else ():
            symbols |= d.free_symbols
        if node.vocab is not None:
            symbols |= node.vocab.free_symbols
    for key in overrides:
        if key not in declared and key not in symbols:
            known = sorted(declared | symbols)
            raise LbdlError(
                f"model `{model.name}` has no parameter `{key}` to set",
                Span.point(program.main_file, model.span.line, model.span.column),
                hint=did_you_mean(key, known) or f"its parameters are {', '.join(known) or 'none'}",
            )
    env: dict[str, Any] = {}
    for p in model.params:
        if p.name in overrides:
            env[p.name] = _as_env_value(overrides[p.name])
        elif p.default is None:
            raise LbdlError(
                f"model parameter `{p.name}` has no default",
                p.span,
                hint=f"give it one in the header (`{p.name}=...`) or set it with --set",
            )
        elif isinstance(p.default, Expr):
            value = p.default.subs({k: v for k, v in env.items() if isinstance(v, Expr)})
            if value.is_const and value.const_value.denominator != 1:  # never a symbol `K`
                used = sorted(p.default.free_symbols)
                raise LbdlError(
                    f"model parameter `{p.name}` is {value.const_value}, not a whole number",
                    p.span,
                    hint="sizes must divide exactly: change "
                    + (" or ".join(f"`{k}` (= {env[k]})" for k in used) or "the divisor"),
                )
            env[p.name] = value
        else:
            env[p.name] = p.default
    for key, value in overrides.items():
        if key not in env:
            env[key] = _as_env_value(value)
    return env


def compile_spec(
    source: str | bytes | os.PathLike[str],
    *,
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    stop_after: str = "check",
) -> Compiled:
    """Run the pipeline on a path (or on text, with ``file`` naming it); raises `LbdlError`."""
    if stop_after not in STAGES:
        raise ValueError(f"stop_after must be one of {STAGES}")
    if file is None:
        if isinstance(source, (str, bytes)) and not isinstance(source, os.PathLike):
            if isinstance(source, str) and "\n" not in source and source.endswith(".lbdl"):
                file, source = source, read_spec(source)
            else:
                file = "<spec>"
        else:
            file, source = str(source), read_spec(source)
    out = Compiled(file, load(source, file))
    if stop_after == "parse":
        return out
    out.program = build(out.loaded)
    verify(out.program, set(LAYERS))
    if stop_after == "build":
        return out
    out.program.bindings = model_env(out.program, dict(overrides or {}))
    declared = {p.name for p in out.program.model.params}
    out.checked = check(
        out.program, out.program.bindings, overridden=bool(declared & set(overrides or {}))
    )
    if out.checked.diagnostics:
        raise CheckFailed(out)
    return out


class CheckFailed(LbdlError):
    """The checker found errors; the partial result is kept so a diagram can still be drawn."""

    def __init__(self, compiled: Compiled) -> None:
        super().__init__(diagnostics=compiled.checked.diagnostics)
        self.compiled = compiled


def spec_name(path: str) -> str:
    return Path(path).stem
