"""What a command made is freed by reference counting when it returns, not by the cycle collector.

A nested function that calls itself is a reference cycle (the function and its closure cell); a
walk written that way kept the whole checked tree it captured alive after `lbdl-compile`
returned, and the interpreter's last collection spent two seconds on it at 190,000 boxes
(`docs/check-scale.md`). These tests run commands in process with the collector off and fail if
any of our objects is left in a cycle (the standard library's own, argparse's say, are not ours).
"""

from __future__ import annotations

import gc
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from lbdl_dsl.cli.compat import main
from lbdl_dsl.core.collector import collector_off

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.lbdl"))


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The collector off, and what the process held before the test set aside (`gc.freeze`):
    those objects are not the command's, and the checks' collections do not walk them again (a
    full collection of a test worker's heap took 1.5 s, twice a test)."""
    gc.freeze()
    try:
        with collector_off():
            yield
    finally:
        gc.unfreeze()


def ours_in_cycles() -> list[str]:
    """The names of our objects that only the cycle collector would free, and what they are in."""
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = sorted(
            f"{_owner(obj)}.{_name(obj)}"
            for obj in gc.garbage
            if _owner(obj).startswith("lbdl_dsl")
        )
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
    return sorted(set(found))


def _owner(obj: object) -> str:
    """The module a function was written in, or the module of an object's class."""
    if isinstance(obj, types.FunctionType):
        return obj.__module__
    return type(obj).__module__


def _name(obj: object) -> str:
    return obj.__qualname__ if isinstance(obj, types.FunctionType) else type(obj).__qualname__


@pytest.mark.usefixtures("no_collector")
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_check_leaves_no_cycles(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--depth", "all", str(spec)]) == 0
    capsys.readouterr()
    assert ours_in_cycles() == []


@pytest.mark.usefixtures("no_collector")
@pytest.mark.parametrize("name", ["resnet50", "gpt2", "mixtral-8x7b", "unet"])
def test_main_job_leaves_no_cycles(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = REPO / "specs" / f"{name}.lbdl"
    assert main([str(spec), "-o", str(tmp_path), "--emit", "svg,py,json"]) == 0
    capsys.readouterr()
    assert ours_in_cycles() == []


@pytest.mark.usefixtures("no_collector")
def test_the_test_sees_a_cycle() -> None:
    """The check above would fail on the pattern it guards against."""

    def make() -> None:
        from lbdl_dsl.core.errors import Span

        held = Span("x.lbdl", 1, 1, 1, 2)

        def visit(depth: int) -> object:
            return held if depth == 0 else visit(depth - 1)

        visit(2)

    make()
    assert any("Span" in name for name in ours_in_cycles())


def test_a_check_runs_without_the_collector(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the tests above make safe: `lbdl-compile` turns the cycle collector off while it
    checks and builds (it looked through every object of a big model again and again and found
    nothing), and gives it back on return; a model run (``--run``) is left to collect."""
    from lbdl_dsl.cli import build as cli

    seen: list[bool] = []
    compile_ = cli._compile

    def watched(*args: object) -> object:
        seen.append(gc.isenabled())
        return compile_(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(cli, "_compile", watched)
    assert gc.isenabled()
    assert main(["--check", str(REPO / "specs" / "lenet.lbdl")]) == 0
    assert gc.isenabled()
    capsys.readouterr()
    assert seen == [False]


def test_the_collector_stays_as_the_caller_set_it() -> None:
    gc.disable()
    try:
        with collector_off():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with collector_off():
        assert not gc.isenabled()
    assert gc.isenabled()
