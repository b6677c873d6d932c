"""Fixtures shared by every test file: the repository root, a one-call compiler of spec text,
strict JAX for the session, and XLA's machine-code optimisation off for every process the tests
start (`quick_xla_backend`).

Nothing else lives here on purpose: markers are declared in pyproject.toml, and each test file
keeps its own helpers, so that files written by different people never fight over a name. The
one hook orders the run (heaviest first) and changes nothing a test sees.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.instance import Checked

REPO = Path(__file__).resolve().parents[1]
"""The repository root: specs/, docs/, grammar/ and bench/ are found from here."""

QUICK_XLA_BACKEND = "--xla_backend_optimization_level=0"


def quick_xla_backend(environ: MutableMapping[str, str]) -> None:
    """Add `QUICK_XLA_BACKEND` to ``XLA_FLAGS`` unless a level is set there already.

    Most of the suite's time is XLA compiling small programs, and most of that is LLVM
    optimising their machine code. The level changes how fast that code runs, not what it
    computes (XLA's own passes over the program are the same), and the tests check what it
    computes: the suite took 603 s at level 0 against 784 s at XLA's default on a 2-core
    machine. Timings are the benchmarks' business, run at the default. In the environment at
    import, before JAX starts its backend, so the subprocesses the tests start inherit it.
    """
    flags = environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        environ["XLA_FLAGS"] = f"{flags} {QUICK_XLA_BACKEND}".strip()


quick_xla_backend(os.environ)


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository root, for tests that read specs or docs."""
    return REPO


@pytest.fixture
def compile_text(tmp_path: Path) -> Callable[..., Checked]:
    """Compile spec text as a real file in ``tmp_path`` (so imports resolve next to it).

    ``compile_text(text, name="spec.lbdl", stop_after="check", **overrides)``: keyword arguments
    other than ``name`` and ``stop_after`` are ``--set`` overrides (``T=1024``). Writing a file
    rather than passing text keeps error spans pointing at a file name the test can assert on.
    """

    def run(
        text: str, *, name: str = "spec.lbdl", stop_after: str = "check", **overrides: Any
    ) -> Checked:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return compile_spec(path, overrides=overrides, stop_after=stop_after)

    return run


@pytest.fixture(autouse=True, scope="session")
def strict_jax() -> None:
    """Strict JAX wherever JAX is used: implicit rank promotion raises (STYLE.md)."""
    try:
        import jax
    except ImportError:  # the compiler itself needs no JAX
        return
    jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmarks' smoke tests first, then the other ``slow`` ones, then the rest, each
    group in collection order: pytest-xdist hands tests out in that order as workers come free,
    so the longest go out while there is other work to balance them, rather than last, with
    one worker busy for a minute while the other waits."""

    def weight(item: pytest.Item) -> int:
        return (
            0 if item.get_closest_marker("bench") else 1 if item.get_closest_marker("slow") else 2
        )

    items.sort(key=weight)  # stable: the collection order within each group
