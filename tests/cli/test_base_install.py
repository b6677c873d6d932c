"""The base install never crashes: with only networkx and rich (what `make demo` installs),
every verb's ``--help`` works, and every verb either works or exits 1 naming the extra to install.

The base install is simulated in a subprocess by an import hook that refuses every optional
dependency, so the test runs in the full environment of CI and still sees what a user of
``pip install lbdl-dsl`` alone would see.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lbdl_dsl.cli import VERBS
from lbdl_dsl.cli.common import EXTRAS

REPO = Path(__file__).resolve().parents[2]

BASE_ONLY = f"""
import importlib.abc, sys
BLOCKED = {sorted(EXTRAS)!r}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
from lbdl_dsl.cli import main
sys.exit(main(sys.argv[1:]))
"""

# A representative call of each verb: (arguments, the exit codes it may end with). Each verb
# that needs an extra must end with 1 and name it; the others must work.
CALLS: dict[str, tuple[list[str], int]] = {
    "check": (["check", "specs/resnet50.lbdl"], 0),
    # every artefact, as `make demo` builds them: the JAX module is text, written without JAX
    "build": (["build", "specs/mlp.lbdl", "-o", "{tmp}/out"], 0),
    "run": (["run", "specs/mlp.lbdl"], 1),
    "diff": (["diff", "specs/resnet18.lbdl", "specs/resnet50.lbdl"], 0),
    "train": (["train", "specs/mlp.lbdl", "--data", "synthetic", "--steps", "1"], 1),
    "import": (["import", "specs/gpt2.lbdl", "w.safetensors", "--map", "gpt2", "-o", "p"], 1),
    "export": (["export", "specs/mlp.lbdl", "--format", "stablehlo", "-o", "{tmp}/m"], 1),
    "launch": (["launch", "-n", "1", "--", sys.executable, "-c", "pass"], 0),
    "from-hf": (["from-hf", "tests/fixtures/hf/gpt2", "-o", "{tmp}/gpt2.lbdl"], 1),
    "predict": (["predict", "specs/digits-cnn.lbdl", "--params", "p.safetensors", "x.npz"], 1),
    "evaluate": (["evaluate", "specs/mlp.lbdl", "--params", "p", "--data", "synthetic"], 1),
    "serve": (["serve", "specs", "--port", "0"], 1),
    "generate": (["generate", "specs/gpt.lbdl", "--params", "p", "--prompt", "To be"], 1),
}


def base_only(args: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BASE_ONLY, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_overview_lists_every_verb_with_one_line() -> None:
    result = base_only(["--help"])
    assert result.returncode == 0, result.stderr
    for verb in VERBS:
        assert f"\n  {verb} " in result.stdout


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_s_help_needs_only_the_base_install(verb: str) -> None:
    result = base_only([verb, "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: lbdl {verb}")


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_works_or_names_the_extra(verb: str, tmp_path: Path) -> None:
    assert verb in CALLS, f"give `lbdl {verb}` a representative call in CALLS"
    args, code = CALLS[verb]
    result = base_only([a.replace("{tmp}", str(tmp_path)) for a in args])
    assert "Traceback" not in result.stderr
    assert result.returncode == code, result.stderr
    if code == 1:
        assert "an optional dependency is not installed" in result.stderr
        assert "pip install 'lbdl-dsl[" in result.stderr


def test_a_verb_declares_the_whole_install_line() -> None:
    result = base_only(["train", "specs/mlp.lbdl", "--data", "synthetic", "--steps", "1"])
    assert "pip install 'lbdl-dsl[jax,train]'" in result.stderr
