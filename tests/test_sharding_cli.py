"""``--mesh``/``--shard`` on the command line: the memory table, its JSON, errors, the figure.

The table of GPT-3 under the issue's mesh is a golden (``LBDL_ACCEPT=1`` to accept a change made
on purpose); errors in flags and in the layout are exit code 1 with the message and no
traceback; ``lbdl check`` stays free of JAX.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbdl_dsl import cli as main
from lbdl_dsl.cli import compat as cli

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "sharding"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
GPT3 = ["specs/gpt3.lbdl", "--mesh", "data=8,fsdp=16,tensor=8", "--shard", "fsdp+tp"]


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # messages name specs/... as a user at the root would see them


def golden(name: str, actual: str) -> str:
    path = GOLDEN / name
    if ACCEPT:
        path.write_text(actual, "utf-8")
    return path.read_text("utf-8")


def test_gpt3_memory_per_device_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["check", *GPT3, "--global-batch", "1024", "--set", "T=2048"]) == 0
    out = capsys.readouterr().out
    memory = out[out.index("memory per device") :]
    assert memory == golden("gpt3.memory.txt", memory)
    assert "B = 8 samples per device (the global batch 1024 over data=8 × fsdp=16)" in memory


def test_without_a_batch_the_figures_stay_formulas_in_b(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["--check", *GPT3]) == 0
    out = capsys.readouterr().out
    assert "activations  9.3 MiB × B·T + 288.0 KiB × B·T" not in out  # one term per monomial
    total = next(line for line in out.splitlines() if line.startswith("total "))
    assert "× B·T" in total and "GiB" in total


def test_json_carries_the_same_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["check", *GPT3, "--global-batch", "1024", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    sharding = obj["sharding"]
    assert sharding["mesh"] == {"data": 8, "fsdp": 16, "tensor": 8}
    assert sharding["per_device_batch"] == 8 and sharding["batch_axes"] == ["data", "fsdp"]
    per = sharding["per_device"]
    assert per["grads"] == per["params"] and per["optimizer"] == 2 * per["params"] + 4
    assert per["activations"].endswith("T")  # T is still free: a formula
    wq = sharding["arrays"]["repeat_0/self_att_0/att/wq"]
    assert wq["spec"] == [None, "fsdp", "tensor"] and wq["pieces"] == 128
    assert wq["roles"] == ["layers", "embed", "heads"]
    top = [row for row in sharding["layers"] if row["depth"] == 0]
    assert sum(row["params"] for row in top) == per["params"]


def test_a_size_that_does_not_divide_is_exit_1_with_the_boxs_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["check", "specs/gpt3.lbdl", "--mesh", "data=8,fsdp=16,tensor=5", "--shard", "fsdp+tp"]
    assert main.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("specs/gpt3.lbdl:16:5: error: `self-att`: its heads axis of 12,288")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--mesh", "data=2,data=2"], "error: --mesh: the axis `data` is named twice"),
        (["--shard", "fsdp"], "error: --shard: needs a mesh"),
        (["--mesh", "data=2", "--shard", "tp"], "`tp` needs a mesh axis named `tensor`"),
        (["--mesh", "data=3", "--global-batch", "8"], "error: --global-batch: 8 samples do not"),
    ],
)
def test_bad_flags_are_exit_1_naming_the_flag(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main.main(["check", "specs/mlp.lbdl", *argv]) == 1
    err = capsys.readouterr().err
    assert says in err and "hint:" in err


def test_the_diagram_colours_boxes_by_how_they_are_split(tmp_path: Path) -> None:
    argv = ["build", *GPT3, "--emit", "dot", "-o", str(tmp_path)]
    assert main.main(argv) == 0
    dot = (tmp_path / "gpt3.dot").read_text("utf-8")
    plain = tmp_path / "plain"
    assert main.main(["build", "specs/gpt3.lbdl", "--emit", "dot", "-o", str(plain)]) == 0
    from lbdl_dsl.backends.diagram.shading import PALETTE

    assert "split over fsdp+tensor" in dot and "split over fsdp" in dot
    assert PALETTE[0] in dot and PALETTE[0] not in (plain / "gpt3.dot").read_text("utf-8")


def test_shading_names_each_box_by_the_mesh_axes_under_it() -> None:
    from lbdl_dsl.backends.diagram.shading import REPLICATED, from_layout
    from lbdl_dsl.compiler.driver import compile_spec
    from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve

    checked = compile_spec("specs/gpt3.lbdl")
    mesh = parse_mesh("data=8,fsdp=16,tensor=8")
    shading = from_layout(resolve(checked, mesh, parse_rules(["fsdp+tp"], mesh)))
    legend = dict(shading.legend)
    assert set(legend) == {"split over fsdp", "split over fsdp+tensor"}
    assert shading.fills["repeat_0/self_att_0"] == legend["split over fsdp+tensor"]
    assert shading.fills["tokens"] == legend["split over fsdp"]
    dp = from_layout(resolve(checked, mesh, parse_rules(["dp"], mesh)))
    assert [text for text, _ in dp.legend] == [REPLICATED]


def test_lbdl_check_with_a_mesh_imports_no_jax() -> None:
    code = (
        "import sys; from lbdl_dsl import cli as main; "
        f"rc = main.main(['check', {', '.join(map(repr, GPT3))}]); "
        "assert rc == 0; assert 'jax' not in sys.modules, 'jax imported'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stderr
