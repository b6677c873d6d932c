"""The runtime functions a generated module carries, as read from the runtime's source."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from lbdl_dsl.backends.jax import runtime_source
from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.compiler.driver import compile_spec

REPO = Path(__file__).resolve().parents[2]


def test_the_runtime_is_parsed_once_for_a_whole_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # asking each function's defaults once parsed the whole runtime again: 0.2 s of a fresh
    # process's build of GPT-2
    parses = []

    class CountingAst:
        """The `ast` module as runtime_source sees it, counting its parses only."""

        def __getattr__(self, name: str) -> object:
            return getattr(ast, name)

        def parse(self, *args: Any, **kwargs: Any) -> ast.Module:
            parses.append(1)
            return ast.parse(*args, **kwargs)

    monkeypatch.setattr(runtime_source, "ast", CountingAst())
    runtime_source._parsed.cache_clear()
    try:
        for name in ("gpt2", "resnet50"):
            spec = REPO / "specs" / f"{name}.lbdl"
            generate(compile_spec(spec.read_text("utf-8"), file=str(spec)))
    finally:
        runtime_source._parsed.cache_clear()  # not left built with the counting parser
    assert len(parses) == 1


def test_defaults_are_the_literal_ones_and_a_copy() -> None:
    got = runtime_source.defaults("layer_norm")
    assert got == {"eps": 1e-5, "axes": 1}
    got["eps"] = 0.0
    assert runtime_source.defaults("layer_norm")["eps"] == 1e-5
    assert runtime_source.defaults("softmax") == {"axis": -1}
    assert runtime_source.defaults("no such function") == {}
    conv = runtime_source.defaults("conv")
    assert "b" in conv and conv["b"] is None  # None is a literal too


RUNTIME = REPO / "lbdl_dsl" / "backends" / "jax" / "runtime"
# what a generated module's header imports (codegen.py), and the runtime's own modules
_HEADER = {
    "mmap",
    "os",
    "concurrent.futures",
    "collections.abc",
    "typing",
    "jax",
    "jax.numpy",
    "numpy",
}


@pytest.mark.parametrize("path", sorted(RUNTIME.glob("[!_]*.py")), ids=lambda p: p.stem)
def test_a_runtime_module_holds_only_what_a_copy_keeps(path: Path) -> None:
    # the generated module copies each function's text alone: a module-level constant or an
    # import its header lacks would leave the copy calling a name it does not define
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.Import):
            assert {a.name for a in node.names} <= _HEADER, (path.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            sibling = (node.module or "").removeprefix("lbdl_dsl.backends.jax.runtime.")
            own = (RUNTIME / f"{sibling}.py").is_file()
            assert node.module in _HEADER or own, (path.name, node.lineno, node.module)
        else:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            assert docstring or isinstance(node, ast.FunctionDef), (path.name, node.lineno)
