"""The static checks CI runs before the tests: mypy strict on compiler and core, ruff.

mypy's own `strict = true` cannot be scoped to some modules (python/mypy#11401: in an override it
turns strict mode on everywhere), so pyproject.toml spells the flags out. These tests ask mypy
which flags ``--strict`` sets and check that the override sets each of them for compiler and
core, and nothing of them for the rest of lbdl_dsl; and that `make test` runs the checks first.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from mypy.config_parser import parse_config_file
from mypy.main import process_options
from mypy.options import PER_MODULE_OPTIONS, Options

REPO = Path(__file__).resolve().parents[1]
STRICT_PACKAGES = ("lbdl_dsl.compiler.*", "lbdl_dsl.core.*")


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


def test_compiler_and_core_get_every_strict_flag() -> None:
    flags = _strict_flags()
    options = _project_options(flags)
    assert "disallow_untyped_defs" in flags  # the probe itself works
    assert options.files == ["lbdl_dsl/compiler", "lbdl_dsl/core"]
    for package in STRICT_PACKAGES:
        section = options.per_module_options[package]
        missing = {
            n: v for n, v in flags.items() if n in PER_MODULE_OPTIONS and section.get(n) != v
        }
        assert not missing, f"{package} lacks these parts of --strict: {missing}"
    global_only = {n: v for n, v in flags.items() if n not in PER_MODULE_OPTIONS}
    assert all(getattr(options, n) == v for n, v in global_only.items()), global_only


def test_the_rest_of_lbdl_dsl_is_not_strict() -> None:
    flags = _strict_flags()
    options = _project_options(flags)
    _, plain = process_options(["--config-file", "", "x.py"])
    leaked = [
        n for n in flags if n in PER_MODULE_OPTIONS and getattr(options, n) != getattr(plain, n)
    ]
    assert not leaked, f"strict flags set for every module: {leaked}"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_runs_ruff_and_mypy_before_pytest() -> None:
    dry = subprocess.run(
        ["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    steps = ["ruff check", "ruff format --check", "bin/mypy", "-m pytest"]
    at = [dry.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dry
