"""Helpers of the training tests: small specs written to files, goldens, and quiet runs.

The specs here are small on purpose (a few hundred parameters, one compile of a second or
less), so the whole training test set stays well under a minute on two cores.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).parent / "golden"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"

# batchnorm (running averages), dropout (a key per step), a convolution and a classifier
TINY_CNN = """\
model tiny_cnn(C=3):
  input X: 2×4×4
  conv-2d k=3 p=1   4×4×4
  batchnorm
  relu
  dropout p=0.25
  reshape           64
  fc                C
  output Y
"""

# the same without dropout: XLA takes a second to compile the random bits of a dropout mask on
# CPU, so the tests that do not need dropout leave it out
TINY_BN = TINY_CNN.replace("  dropout p=0.25\n", "")

TINY_MLP = """\
model tiny_mlp(D=8):
  input X: 4
  fc                D
  relu
  fc                2
  output Y
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Callable[..., Path]:
    """``spec_file(text, name="spec.lbdl")``: the text as a spec file in ``tmp_path``."""

    def write(text: str, name: str = "spec.lbdl") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def quiet_train(tmp_path: Path) -> Callable[..., Any]:
    """`lbdl_dsl.train` with nothing shown, into ``tmp_path / run`` unless told otherwise."""
    from lbdl_dsl.training.loop import train

    def run(spec: Path | str, data: str, run: str = "run", **options: Any) -> Any:
        options.setdefault("output_dir", tmp_path / run)
        return train(spec, data, quiet=True, **options)

    return run


def assert_golden(name: str, text: str, tmp_path: Path | None = None) -> None:
    """Compare ``text`` with ``golden/NAME.txt`` (temporary paths shown as ``TMP``);
    ``LBDL_ACCEPT=1`` writes it instead."""
    if tmp_path is not None:
        text = text.replace(str(tmp_path), "TMP")
    text = re.sub(r"\b[0-9a-f]{12}\b", "HASH", text)
    path = GOLDEN / f"{name}.txt"
    if ACCEPT:
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"no golden {path.name}: write it with LBDL_ACCEPT=1"
    assert text == path.read_text(encoding="utf-8")
