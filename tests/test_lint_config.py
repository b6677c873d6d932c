"""The static checks CI runs before the tests: mypy strict on the whole package, ruff.

pyproject.toml sets ``strict = true`` for every module of lbdl_dsl, with one kind of exception
and no other: third-party modules that ship no annotations (their names are Any). These tests
ask mypy which flags ``--strict`` sets and check that pyproject gives every one of them to the
whole package, that the exceptions are those; and that `make test` runs the checks first.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from mypy.config_parser import parse_config_file
from mypy.main import process_options
from mypy.options import Options

REPO = Path(__file__).resolve().parents[1]


def _strict_flags() -> dict[str, object]:
    """Every option ``--strict`` changes, with the value it gives it, as mypy itself says."""
    _, plain = process_options(["--config-file", "", "x.py"])
    _, strict = process_options(["--strict", "--config-file", "", "x.py"])
    names = [n for n in dir(plain) if not n.startswith("_") and not callable(getattr(plain, n))]
    return {n: getattr(strict, n) for n in names if getattr(strict, n) != getattr(plain, n)}


def _project_options(flags: dict[str, object]) -> Options:
    """pyproject.toml as mypy reads it; a `strict = true` anywhere does what mypy does with it:
    sets every strict flag for every module."""
    options = Options()

    def set_strict_flags() -> None:
        for name, value in flags.items():
            setattr(options, name, value)

    out = io.StringIO()
    parse_config_file(options, set_strict_flags, str(REPO / "pyproject.toml"), out, out)
    assert not out.getvalue(), out.getvalue()  # no unknown or misplaced option
    return options


def test_the_whole_package_gets_every_strict_flag() -> None:
    flags = _strict_flags()
    options = _project_options(flags)
    assert "disallow_untyped_defs" in flags  # the probe itself works
    assert options.files == ["lbdl_dsl"]
    missing = {n: v for n, v in flags.items() if getattr(options, n) != v}
    assert not missing, f"lbdl_dsl lacks these parts of --strict: {missing}"


def test_the_exceptions_are_third_party_modules_only() -> None:
    options = _project_options(_strict_flags())
    ours = {m for m in options.per_module_options if m.startswith("lbdl_dsl")}
    assert ours == set(), ours
    for module, section in options.per_module_options.items():
        if not module.startswith("lbdl_dsl"):
            set_ = {k: v for k, v in section.items() if v not in ([], None)}
            assert set_ == {"ignore_missing_imports": True}, (module, section)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_runs_ruff_and_mypy_before_pytest() -> None:
    dry = subprocess.run(
        ["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    steps = ["ruff check", "ruff format --check", "bin/mypy", "-m pytest"]
    at = [dry.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dry
