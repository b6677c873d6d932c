"""``lbdl VERB``: the verbs table, and ``check``/``build`` behaving as ``lbdl-compile``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from lbdl_dsl import cli as main
from lbdl_dsl.cli import VERBS

REPO = Path(__file__).resolve().parents[1]


def test_every_verb_module_declares_its_parts() -> None:
    for module_name in VERBS.values():
        module = importlib.import_module(f"lbdl_dsl.cli.{module_name}")
        assert isinstance(module.HELP, str) and module.HELP
        assert callable(module.add_arguments) and callable(module.run)


def test_check_prints_the_summary_as_lbdl_compile_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["check", str(REPO / "specs" / "lenet.lbdl"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["params"] == 105_506


def test_check_reports_a_spec_error_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.lbdl"
    spec.write_text("model m:\n  input X: 4\n  fc 8   9\n  output Y\n", "utf-8")
    assert main.main(["check", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:3:" in err and "Traceback" not in err


def test_build_writes_the_requested_formats(tmp_path: Path) -> None:
    spec = str(REPO / "specs" / "mlp.lbdl")
    assert main.main(["build", spec, "--emit", "shapes,dot", "-o", str(tmp_path)]) == 0
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".dot", ".txt"]


def test_unknown_verb_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["frobnicate"]) == 1
    assert "unknown verb 'frobnicate'" in capsys.readouterr().err
