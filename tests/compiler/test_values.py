"""Settings given outside the spec (``--set``, the API's keywords) are read as their parameter's
kind or refused with its name: a size takes a whole number ≥ 1, a float parameter a finite
number, a flag true/false, a word a word. Before, ``N=abc``, ``N=1.5``, ``N=nan`` and ``N=1e400``
silently left the symbol free and ``N=0`` was accepted. The messages are pinned by one golden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lbdl_dsl
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.values import parse_setting, setting
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.symbolic import Expr

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/golden/settings/refusals.txt"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"

SPEC = """\
block layer(D) on X: T×D:
  fc out=D

model toy(N=2, D=8, p=0.1, b=true, act=gelu):
  input X: T×D
  fc out=D bias=b                     T×D
  ffw hidden=2D p=p act=act
  layer ×N D=D
  output Y
"""

BAD = [
    "N=abc",
    "N=1.5",
    "N=nan",
    "N=1e400",
    "N=0",
    "N=-3",
    "p=inf",
    "p=word",
    "b=3",
    "act=1.5",
    "act=a;b",
    "T=0",
]


@pytest.mark.parametrize("item", BAD)
def test_a_bad_setting_is_refused_with_the_parameters_name(item: str) -> None:
    key, _, value = item.partition("=")
    with pytest.raises(LbdlError) as info:
        compile_spec(SPEC, file="toy.lbdl", overrides={key: value})
    assert f"`{key}`" in info.value.first.message
    assert info.value.first.hint


def test_the_refusals_read_as_pinned() -> None:
    lines = []
    for item in BAD:
        key, _, value = item.partition("=")
        try:
            compile_spec(SPEC, file="toy.lbdl", overrides={key: value})
        except LbdlError as e:
            lines.append(f"--set {item}\n    {e.first.message}\n    hint: {e.first.hint}")
    actual = "\n".join(lines) + "\n"
    if ACCEPT:
        GOLDEN.write_text(actual, "utf-8")
    assert actual == GOLDEN.read_text("utf-8")


def test_good_settings_take_their_parameters_kind() -> None:
    c = compile_spec(
        SPEC,
        file="toy.lbdl",
        overrides={"N": "3", "p": "0.25", "b": "false", "act": "relu", "T": "1_024"},
    )
    env = c.env
    assert env["N"] == Expr.lift(3) and env["T"] == Expr.lift(1024)
    assert env["p"] == 0.25 and env["b"] is False and env["act"] == "relu"


def test_a_float_parameter_takes_a_whole_number_as_a_float() -> None:
    assert setting("p", 1, 0.1, "--set p=1") == 1.0
    assert isinstance(setting("p", 1, 0.1, "--set p=1"), float)


def test_text_is_read_before_it_is_held_to_its_kind() -> None:
    assert parse_setting(" 50_257 ") == 50257
    assert parse_setting("1e-3") == 1e-3
    assert parse_setting("true") is True
    assert parse_setting("bilinear") == "bilinear"


def test_python_keywords_are_held_to_the_same_kinds(tmp_path: Path) -> None:
    spec = tmp_path / "toy.lbdl"
    spec.write_text(SPEC, "utf-8")
    with pytest.raises(LbdlError, match=r"N=1\.5: `N` takes a whole number ≥ 1"):
        lbdl_dsl.check(spec, N=1.5)
    with pytest.raises(LbdlError, match=r"`b` takes true or false"):
        lbdl_dsl.check(spec, b=2)
    assert lbdl_dsl.check(spec, N=4.0).env["N"] == Expr.lift(4)


def test_the_cli_refuses_a_bad_setting_with_exit_1(tmp_path: Path) -> None:
    spec = tmp_path / "toy.lbdl"
    spec.write_text(SPEC, "utf-8")
    r = subprocess.run(
        [sys.executable, "-m", "lbdl_dsl.cli.compat", str(spec), "--check", "--set", "N=abc"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1, r.stderr
    assert "`N` takes a whole number ≥ 1" in r.stderr and "Traceback" not in r.stderr
