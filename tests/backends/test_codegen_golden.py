"""The generated module of every spec of the library: a golden file each, formatted and linted.

The module is laid out in-process (`backends/jax/layout.py`), so its bytes depend only on the
spec: the golden files pin them, and a change of the code generator shows up here as a diff in
review (accepted on purpose with ``LBDL_ACCEPT=1 pytest tests/backends/test_codegen_golden.py``).
ruff, a test dependency, checks what no golden can: that the text is what ``ruff format``
writes and that ``ruff check`` finds nothing in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.compiler.driver import compile_spec

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "modules"
SPECS = sorted((REPO / "specs").glob("*.lbdl"))
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"


def _module(spec: Path) -> str:
    return generate(compile_spec(spec))


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_the_generated_module_matches_its_golden(spec: Path) -> None:
    text = _module(spec)
    golden = GOLDEN / f"{spec.stem}.py"
    if ACCEPT:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.is_file(), f"no golden for {spec.stem}: LBDL_ACCEPT=1 writes it"
    assert text == golden.read_text(encoding="utf-8"), (
        f"the module of {spec.name} changed; if on purpose, LBDL_ACCEPT=1 pytest {__file__}"
    )


def _ruff(*args: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--isolated", "--stdin-filename", "m.py", "-"],
        input=text.encode("utf-8"),
        capture_output=True,
        check=False,
    )


def test_every_generated_module_is_formatted_and_lint_clean() -> None:
    """One ruff run per check over all modules' texts, as ruff's own format and lint see them."""
    problems = []
    for spec in SPECS:
        text = (GOLDEN / f"{spec.stem}.py").read_text(encoding="utf-8")
        formatted = _ruff("format", "--line-length", "100", "--diff", text=text)
        # pyflakes, pycodestyle, unused arguments and bugbear (`zip(..., strict=...)`)
        linted = _ruff("check", "--select", "E,F,W,ARG,B", "--line-length", "100", text=text)
        for name, done in (("format", formatted), ("check", linted)):
            if done.returncode != 0:
                problems.append(f"{spec.stem}: ruff {name}\n{done.stdout.decode()[:2000]}")
    assert not problems, "\n".join(problems)
