"""The command line: its output, its exit codes, its imports and the files it writes.

Most tests call `main` in-process (fast, and capsys sees both streams); a few run a real process
where only a process can tell: ``python -m lbdl_dsl``, output to a pipe, and which modules
``--check`` imports (it must stay fast, so it never imports jax or graphviz).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbdl_dsl.cli import compat as cli

REPO = Path(__file__).resolve().parents[1]
RESNET50 = REPO / "specs" / "resnet50.lbdl"

GPT_FREE_T = """\
model gpt(N=2, D=64, V=1000):
  input X: T int<V>
  embed                       T×D  -> tokens
  pos-enc
  ×N:
    self-att h=4 causal=true
    ffw
  layernorm
  fc bias=false tie=tokens    T×V
  output Ŷ
"""


def run_process(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("LBDL_DEBUG", None)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


@pytest.fixture
def spec(tmp_path: Path):
    """Write a spec file and return its path."""

    def write(text: str, name: str = "m.lbdl") -> Path:
        path = tmp_path / name
        path.write_text(text, "utf-8")
        return path

    return write


# -- the summary ---------------------------------------------------------------------------


def test_check_prints_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--check", str(RESNET50)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("model resnet50")
    assert "params   25,557,032 trainable, 53,120 state" in out
    assert "MACs     3,857,973,248 per sample" in out
    assert "outputs  Ŷ: 1000" in out
    assert "dresblock S=2" in out and "×5" in out
    assert err == ""


def test_check_writes_plain_text_to_a_pipe() -> None:
    result = run_process("-m", "lbdl_dsl.cli.compat", "--check", "specs/resnet50.lbdl")
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout  # no colours, no box drawing when piped
    assert not any(ch in result.stdout for ch in "━┃│─")
    assert "params   25,557,032 trainable" in result.stdout


def test_depth_shows_the_inside_of_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--check", "--depth", "all", str(RESNET50)]) == 0
    deep = capsys.readouterr().out
    assert cli.main(["--check", str(RESNET50)]) == 0
    shallow = capsys.readouterr().out
    assert len(deep.splitlines()) > 3 * len(shallow.splitlines())
    assert "residual + shortcut" in deep


def test_json_has_the_totals_shapes_and_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--check", "--json", str(RESNET50)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"params", "state", "macs", "inputs", "outputs", "layers"} <= data.keys()
    assert data["params"] == 25_557_032 and data["state"] == 53_120
    assert data["macs"] == 3_857_973_248
    assert data["inputs"] == {"X": [3, 224, 224]}
    assert data["outputs"] == {"Ŷ": [1000]}
    rows = data["layers"]
    assert rows[0]["label"] == "conv-2d k=7 s=2 p=3 bias=false"
    assert rows[0]["shape"] == "64×112×112" and rows[0]["params"] == 9_408
    assert {"path", "depth", "label", "shape", "params", "macs"} <= rows[0].keys()
    top = [r for r in rows if r["depth"] == 0]
    assert sum(r["params"] for r in top) == data["params"]


def test_json_keeps_free_symbols_as_strings(spec, capsys: pytest.CaptureFixture[str]) -> None:
    path = spec(GPT_FREE_T)
    assert cli.main(["--check", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["inputs"] == {"X": ["T"]}
    assert data["outputs"] == {"Ŷ": ["T", 1000]}
    assert isinstance(data["macs"], str) and "T²" in data["macs"]
    assert isinstance(data["params"], int)
    assert data["symbols"] == ["T"]
    assert cli.main(["--check", "--json", str(path), "--set", "T=16"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["outputs"] == {"Ŷ": [16, 1000]} and isinstance(data["macs"], int)


# -- exit codes ----------------------------------------------------------------------------


def test_an_error_in_the_spec_exits_1_with_file_line_and_caret(
    spec, capsys: pytest.CaptureFixture[str]
) -> None:
    path = spec("model m:\n  input X: 1×28×28\n  conv-2d k=5  32×20×20\n")
    assert cli.main(["--check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:3:")
    assert "error:" in first and "annotation" in first
    assert "^" in err and "Traceback" not in err


def test_usage_errors_exit_2(spec, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(spec("model m:\n  input X: 8\n  relu\n"))
    for argv in (
        [],
        ["--check", path, "--emit", "bogus"],
        ["--check", path, "--set", "N"],
        ["--check", path, "--depth", "deep"],
    ):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 1, argv
    assert "usage: lbdl-compile" in capsys.readouterr().err


def test_set_with_an_unknown_key_is_a_spec_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--check", str(RESNET50), "--set", "clases=10"]) == 1
    err = capsys.readouterr().err
    assert "model `resnet50` has no parameter `clases` to set" in err
    assert "did you mean `classes`?" in err


def test_set_changes_a_parameter(capsys: pytest.CaptureFixture[str], spec) -> None:
    path = spec("model m(D=8):\n  input X: D\n  fc  D\n")
    assert cli.main(["--check", "--json", str(path), "--set", "D=16"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 16 * 16 + 16


def test_a_missing_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--check", str(tmp_path / "nope.lbdl")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_an_internal_error_exits_3_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.delenv("LBDL_DEBUG", raising=False)
    from lbdl_dsl.cli import build

    monkeypatch.setattr(build, "compile_spec", broken)
    assert cli.main(["--check", str(RESNET50)]) == 3
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: boom" in err and "Traceback" not in err


# -- processes -----------------------------------------------------------------------------


def test_python_dash_m_is_the_command() -> None:
    result = run_process("-m", "lbdl_dsl.cli.compat", "--check", "--json", "specs/resnet50.lbdl")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["params"] == 25_557_032
    result = run_process("-m", "lbdl_dsl.cli.compat", "--help")
    assert result.returncode == 0 and "lbdl-compile" in result.stdout


def test_check_never_imports_jax_or_graphviz() -> None:
    probe = (
        "import sys\n"
        "from lbdl_dsl.cli.compat import main\n"
        "code = main(['--check', 'specs/resnet50.lbdl'])\n"
        "print('RESULT', code, 'jax' in sys.modules, 'graphviz' in sys.modules, file=sys.stderr)\n"
    )
    result = run_process("-c", probe)
    assert result.returncode == 0, result.stderr
    assert "RESULT 0 False False" in result.stderr


# -- files ---------------------------------------------------------------------------------


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() if p.is_file() else b"" for p in sorted(folder.iterdir())}


def test_emit_writes_each_text_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = cli.main([str(RESNET50), "-o", str(out), "--emit", "ast,graph,shapes,json"])
    assert code == 0
    assert sorted(_files(out)) == [
        "resnet50.ast.txt",
        "resnet50.graph.txt",
        "resnet50.json",
        "resnet50.shapes.txt",
    ]
    assert json.loads((out / "resnet50.json").read_text("utf-8"))["params"] == 25_557_032
    err = capsys.readouterr().err
    assert err.count("wrote ") == 4


def test_output_files_replace_old_ones_atomically(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "resnet50.graph.txt"
    target.write_text("old", "utf-8")
    (out / "keep.link").hardlink_to(target)  # sees the old file if the new one is moved in
    assert cli.main([str(RESNET50), "-o", str(out), "--emit", "graph"]) == 0
    assert target.read_text("utf-8").startswith("block ")
    assert (out / "keep.link").read_text("utf-8") == "old"
    assert sorted(_files(out)) == ["keep.link", "resnet50.graph.txt"]  # no temporary left


def test_output_never_deletes_what_it_did_not_create(tmp_path: Path, spec) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine", "utf-8")
    (out / "sub").mkdir()
    (out / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = _files(out / "sub") | {"notes.txt": b"mine"}
    assert cli.main([str(RESNET50), "-o", str(out), "--emit", "shapes"]) == 0
    assert (out / "notes.txt").read_text("utf-8") == "mine"
    assert _files(out / "sub") | {"notes.txt": b"mine"} == before
    broken = spec("model m:\n  input X: 8\n  fc  8\n  conv-2d k=3\n")
    assert cli.main([str(broken), "-o", str(out), "--emit", "shapes,graph"]) == 1
    assert sorted(_files(out)) == ["notes.txt", "resnet50.shapes.txt", "sub"]


def test_a_failed_compile_creates_no_output_folder(tmp_path: Path, spec) -> None:
    broken = spec("model m:\n  input X: 8\n  nope\n")
    out = tmp_path / "never"
    assert cli.main([str(broken), "-o", str(out), "--emit", "json"]) == 1
    assert not out.exists()
