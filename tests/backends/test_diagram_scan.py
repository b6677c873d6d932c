"""The figure of a `scan h: H:` group: one step's boxes in a frame titled "scan over T" with the
carry under the title, the previous carry written where the step reads it; the fixture's DOT
is pinned by a golden file (``LBDL_ACCEPT=1`` rewrites it)."""

from __future__ import annotations

import os
from pathlib import Path

from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram.scene import Box, Frame, Stub
from lbdl_dsl.compiler.driver import compile_spec

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "tests" / "fixtures" / "scan" / "elman.lbdl"
GOLDEN = REPO / "tests" / "golden" / "scan" / "elman.dot"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"


def test_the_step_is_framed_with_the_carry_read_where_it_is_used() -> None:
    scene = diagram.scene(compile_spec(SPEC))
    (frame,) = [i for i in scene.items if isinstance(i, Frame)]
    assert (frame.title, frame.hparams) == ("scan over T", "h: H")
    assert [i.name for i in frame.items if isinstance(i, Box)] == ["fc", "fc", "tanh"]
    (stub,) = [i for i in frame.items if isinstance(i, Stub)]
    assert stub.text == "h (previous step)"
    readers = [e.dst for e in scene.edges if e.src == stub.id]
    assert readers == ["scan_0/fc_0"]
    fixed = diagram.scene(compile_spec(SPEC, overrides={"T": 12}))
    assert [i.title for i in fixed.items if isinstance(i, Frame)] == ["scan over 12"]


def test_the_fixture_dot_matches_its_golden() -> None:
    dot = diagram.to_dot(compile_spec(SPEC))
    if ACCEPT:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(dot, "utf-8")
    assert dot == GOLDEN.read_text("utf-8"), "LBDL_ACCEPT=1 rewrites the golden"
