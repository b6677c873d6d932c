"""The compiler as a list of steps: `parse` → `build_program` → `check_program`.

Each step is one function from one stage result to the next (`stages.Parsed`, `stages.Built`,
`instance.Checked`); `compile_spec` reads as the pipeline it runs, and ``stop_after`` ends it
early (the CLI's ``--emit ast`` and ``--emit graph``, and tests of each stage). Backends take
`Checked` and never re-parse. Model parameters are resolved here once: declared defaults in
order, each one able to use those before it, then ``--set`` overrides, which may also give values
to input symbols (``--set T=1024``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, overload

from lbdl_dsl.compiler.build import build
from lbdl_dsl.compiler.graph import InputNode, Program, verify
from lbdl_dsl.compiler.imports import load, read_spec
from lbdl_dsl.compiler.infer import Checked, check
from lbdl_dsl.compiler.stages import Built, Parsed
from lbdl_dsl.compiler.values import setting
from lbdl_dsl.core.collector import fewer_collections
from lbdl_dsl.core.errors import LbdlError, Span, did_you_mean
from lbdl_dsl.core.layers import LAYERS
from lbdl_dsl.core.symbolic import Expr

STAGES = ("parse", "build", "check")


def model_env(program: Program, overrides: dict[str, Any], origin: str = "--set") -> dict[str, Any]:
    """The model's parameter values: defaults in order, with ``overrides`` applied, each read
    as its default's kind (`values.setting`); ``origin`` names where they were given."""
    model = program.model
    declared = {p.name for p in model.params}
    symbols: set[str] = set()
    for nid in model.body.inputs:
        node = model.body.node(nid)
        assert isinstance(node, InputNode), "a graph's inputs are input nodes (`verify`)"
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

    def given(name: str, default: Any, size: bool = False) -> Any:
        value = overrides[name]
        where = f"{origin} {name}={value}" if origin == "--set" else f"{name}={value!r}"
        return setting(name, value, default, where, size=size)

    for p in model.params:
        if p.name in overrides:
            env[p.name] = given(p.name, p.default)
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
    for key in overrides:
        if key not in env:
            env[key] = given(key, None, size=True)  # an input's size, such as a sequence's T
    return env


def parse(
    source: str | bytes, file: str, import_path: Sequence[str | os.PathLike[str]] = ()
) -> Parsed:
    """Stage 1: the text of ``file`` and, recursively, the files it imports (found beside the
    importing file, or in a folder of ``import_path``)."""
    return Parsed(file, load(source, file, import_path))


@fewer_collections()
def build_program(parsed: Parsed) -> Built:
    """Stage 2: the program of graphs, verified. Collected less often while it runs: it makes
    a few objects a box and frees almost none (half its time went to the collector)."""
    program = build(parsed.loaded)
    verify(program, set(LAYERS))
    return Built(parsed, program)


def check_program(
    built: Built, overrides: dict[str, Any] | None = None, origin: str = "--set"
) -> Checked:
    """Stage 3: shapes, counts and diagnostics with the model's parameters (and ``overrides``).

    A check that finds errors returns them in `Checked.diagnostics`; `compile_spec` raises
    them as `CheckFailed`, which keeps this partial result."""
    program = built.program
    program.bindings = model_env(program, dict(overrides or {}), origin)
    declared = {p.name for p in program.model.params}
    checked = check(program, program.bindings, overridden=bool(declared & set(overrides or {})))
    return dataclasses.replace(checked, built=built)


Source = str | bytes | os.PathLike[str]


@overload
def compile_spec(
    source: Source,
    *,
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    stop_after: Literal["check"] = "check",
    origin: str = "--set",
    import_path: Sequence[str | os.PathLike[str]] = (),
) -> Checked: ...


@overload
def compile_spec(
    source: Source,
    *,
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    stop_after: Literal["build"],
    origin: str = "--set",
    import_path: Sequence[str | os.PathLike[str]] = (),
) -> Built: ...


@overload
def compile_spec(
    source: Source,
    *,
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    stop_after: Literal["parse"],
    origin: str = "--set",
    import_path: Sequence[str | os.PathLike[str]] = (),
) -> Parsed: ...


@overload
def compile_spec(
    source: Source,
    *,
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    stop_after: str,
    origin: str = "--set",
    import_path: Sequence[str | os.PathLike[str]] = (),
) -> Parsed | Built | Checked: ...


@fewer_collections()  # on the function itself: on an overload it never ran
def compile_spec(
    source: Source,
    *,
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    stop_after: str = "check",
    origin: str = "--set",
    import_path: Sequence[str | os.PathLike[str]] = (),
) -> Parsed | Built | Checked:
    """The pipeline on a path (or on text, with ``file`` naming it), as far as ``stop_after``:
    `Parsed`, `Built` or `Checked`; raises `LbdlError` (`CheckFailed` for checking errors)."""
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
    elif isinstance(source, os.PathLike):
        raise TypeError("`file=` names a spec given as text; give a path without it")
    parsed = parse(source, file, import_path)
    if stop_after == "parse":
        return parsed
    built = build_program(parsed)
    if stop_after == "build":
        return built
    checked = check_program(built, overrides, origin)
    if checked.diagnostics:
        raise CheckFailed(checked)
    return checked


class CheckFailed(LbdlError):
    """The checker found errors; the partial `Checked` is kept so a diagram can still be drawn."""

    def __init__(self, checked: Checked) -> None:
        super().__init__(diagnostics=checked.diagnostics)
        self.checked = checked


def spec_name(path: str) -> str:
    return Path(path).stem
