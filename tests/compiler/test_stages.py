"""Golden text of each stage for each spec of specs/, and `verify` after every stage.

Each stage has a stable text form (compiler/textform.py); these tests keep one file per stage per
spec under tests/golden/stages/, so that any change to what a stage produces shows up as a diff
in review. A change made on purpose is accepted with ``LBDL_ACCEPT=1 pytest
tests/compiler/test_stages.py``, which rewrites the goldens. Specs are found by glob, so a spec
added to specs/ is covered (and fails until its goldens are accepted).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lbdl_dsl.compiler import textform
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.graph import verify, walk
from lbdl_dsl.core.layers import LAYERS

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.lbdl"))
GOLDEN = REPO / "tests" / "golden" / "stages"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"


def _relative(spec: Path) -> str:
    """The spec's path as the goldens name it: relative to the repository, so machine-free."""
    return spec.relative_to(REPO).as_posix()


def stage_texts(spec: Path) -> dict[str, str]:
    """The text of each stage, verifying the program after every stage that has one."""
    parsed = compile_spec(spec, stop_after="parse")
    built = compile_spec(spec, stop_after="build")
    verify(built.program, set(LAYERS))
    checked = compile_spec(spec)
    verify(checked.program, set(LAYERS))  # checking must not change the graph
    assert checked is not None and checked.ok
    for path, inst, _ in checked.walk():
        assert inst.output is not None, f"{'/'.join(path)} has no shape after checking"
    return {
        "ast": textform.ast_text(parsed.ast),
        "graph": textform.graph_text(built.program),
        "shapes": textform.shapes_text(checked),
    }


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_each_stage_matches_its_golden(spec: Path) -> None:
    texts = stage_texts(spec)
    missing = []
    for stage, text in texts.items():
        golden = GOLDEN / f"{spec.stem}.{stage}.txt"
        if ACCEPT:
            golden.parent.mkdir(parents=True, exist_ok=True)
            if not golden.exists() or golden.read_text("utf-8") != text:
                golden.write_text(text, "utf-8")
            continue
        if not golden.exists():
            missing.append(golden.relative_to(REPO).as_posix())
            continue
        assert text == golden.read_text("utf-8"), (
            f"the {stage} stage of {_relative(spec)} changed; if on purpose, accept it with "
            "LBDL_ACCEPT=1 pytest tests/compiler/test_stages.py"
        )
    if missing:
        pytest.fail(
            f"no golden for {', '.join(missing)}; review the stage's output and write it with "
            "LBDL_ACCEPT=1 pytest tests/compiler/test_stages.py"
        )


@pytest.mark.parametrize(
    "spec", [p for p in SPECS if p.stem in ("resnet50", "mlp")], ids=lambda p: p.stem
)
def test_the_same_spec_gives_the_same_bytes(spec: Path) -> None:
    assert stage_texts(spec) == stage_texts(spec)


def test_no_golden_is_left_without_its_spec() -> None:
    """A golden whose spec was renamed or removed would otherwise rot unnoticed."""
    stems = {p.stem for p in SPECS}
    orphans = sorted(g.name for g in GOLDEN.glob("*.txt") if g.name.split(".")[0] not in stems)
    assert not orphans, f"goldens without a spec in specs/: {', '.join(orphans)}"


def test_the_ast_stage_holds_every_statement_of_resnet_50() -> None:
    text = stage_texts(REPO / "specs" / "resnet50.lbdl")["ast"]
    assert text.startswith('import "blocks/resnet.lbdl"\nmodel resnet50(')
    for line in ("  box dresblock S=1 :", "  box resblock ×5", "  output Ŷ", "  assert params"):
        assert line in text


def test_graph_stage_keeps_the_hierarchy() -> None:
    compiled = compile_spec(REPO / "specs" / "resnet50.lbdl", stop_after="build")
    kinds = {n.kind for _, n in walk(compiled.program.model.body, compiled.program.blocks)}
    assert kinds == {"input", "layer", "call", "repeat", "residual"}
