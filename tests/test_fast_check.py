"""What keeps ``lbdl-compile --check`` fast (issue 19, issue 17 item 4), tested as mechanisms.

The timings are in ``bench/check_scale.py``; here, what they rest on: a ``--check`` process
imports neither networkx nor rich's console nor the sharding modules (each only where it is
used), and the checker's memo of a layer's rules changes nothing it computes: every spec of
``specs/`` checks to the same summary, shapes and JSON with the memo as without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbdl_dsl import report
from lbdl_dsl.compiler import infer, instance, textform
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.instance import LayerInst

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.lbdl"))

HEAVY = (
    "networkx",  # the graph is ours; `Graph.g` makes a networkx graph when asked
    "rich.console",  # a piped summary is plain text; a terminal's table is rich's
    "lbdl_dsl.compiler.sharding",  # --mesh only
    "lbdl_dsl.memory_report",  # --mesh only
    "lbdl_dsl.backends",  # figures and code
    "jax",
    "numpy",
)

_PROBE = """
import contextlib, io, json, sys
from lbdl_dsl.cli.compat import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"code": code, "heavy": heavy, "summary": out.getvalue()}}))
"""


def _check_process(*args: str) -> dict:
    """Run ``lbdl-compile ARGS`` in a fresh interpreter; its exit code, the heavy modules it
    imported, and its summary."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("spec", ["resnet50", "gpt3"])
def test_check_imports_nothing_heavy(spec: str) -> None:
    got = _check_process("--check", f"specs/{spec}.lbdl")
    assert got["code"] == 0
    assert got["heavy"] == []
    assert "params" in got["summary"]


def test_a_mesh_imports_what_it_needs() -> None:
    """The probe sees imports: with ``--mesh`` the sharding modules are there."""
    got = _check_process("--check", "specs/gpt2.lbdl", "--mesh", "data=2", "--set", "T=64")
    assert got["code"] == 0
    assert "lbdl_dsl.compiler.sharding" in got["heavy"]
    assert "lbdl_dsl.memory_report" in got["heavy"]


def _texts(spec: Path) -> tuple[str, str, str]:
    compiled = compile_spec(spec)
    checked = compiled
    assert checked is not None
    return (
        report.render_table(checked, None),
        textform.shapes_text(checked),
        report.dumps(checked),
    )


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_the_rules_memo_changes_nothing(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_memo = _texts(spec)
    monkeypatch.setattr(infer, "_rules_key", lambda *args, **kwargs: None)
    without = _texts(spec)
    assert with_memo == without


def test_the_rules_memo_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-50 repeats boxes (a `relu` on the same input, many times): the memo answers."""
    runs = [0]
    original = infer.Checker.run_rules

    def counted(self, *args, **kwargs):
        runs[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(infer.Checker, "run_rules", counted)
    checked = compile_spec(ROOT / "specs" / "resnet50.lbdl")
    assert checked is not None
    boxes = {id(i) for _, i, _ in checked.walk() if i.kind == "layer"}  # each checked once
    assert 0 < runs[0] < len(boxes) / 2


def test_a_tied_box_leaves_the_memo_whole(tmp_path: Path) -> None:
    """`tie` takes the shared weight out of its box's parameters: a later box with the same
    rules keeps its own weight."""
    spec = tmp_path / "tied.lbdl"
    spec.write_text(
        "model m(V=50, D=8):\n"
        "  input X: 4 int<V>\n"
        "  embed  4×D -> tokens\n"
        "  fc bias=false tie=tokens  4×V -> logits\n"
        "  from tokens\n"
        "  fc bias=false  4×V\n"
        "  +(logits)\n"
        "  output Y\n",
        "utf-8",
    )
    checked = compile_spec(spec)
    assert checked is not None
    fcs = [i for i in checked.root if i.kind == "layer" and i.node.op == "fc"]
    assert [sorted(i.params) for i in fcs] == [[], ["w"]]
    assert [sorted(i.tied) for i in fcs] == [["w"], []]
    assert checked.totals["params"].as_int() == 50 * 8 + 8 * 50


@pytest.mark.parametrize(
    ("a", "b"), [(0.0, -0.0), (1.0, True), (1, True), ((1.0,), (True,)), ("1", 1)]
)
def test_the_memo_key_tells_apart_what_python_calls_equal(a: object, b: object) -> None:
    assert infer._exact(a) != infer._exact(b)
    assert infer._exact(a) == infer._exact(a)
    # a box's key (values of plain types keyed with their types, others by `_exact`) and
    # a block call's (sizes as they are, others by `_exact`)
    assert infer._rules_key("op", {"v": a}, []) != infer._rules_key("op", {"v": b}, [])
    assert infer._rules_key("op", {"v": a}, []) == infer._rules_key("op", {"v": a}, [])
    assert infer._call_value(a) != infer._call_value(b)


@pytest.mark.parametrize("value", [0.5, -2.0, 1e300, 0, False, None, "x", (3, 3)])
def test_equal_values_give_equal_memo_keys(value: object) -> None:
    key = infer._rules_key("op", {"v": value, "w": 1}, [])
    assert key is not None and key == infer._rules_key("op", {"v": value, "w": 1}, [])
    assert key != infer._rules_key("op", {"w": 1, "v": value}, [])  # by name, in order


def test_a_value_without_an_exact_key_is_not_memoised() -> None:
    assert infer._rules_key("op", {"v": [1]}, []) is None
    assert infer._call_value([1]) == ("repr", "[1]")


def _shared_totals_off(sums: list, kept: dict) -> dict:
    return {k: instance._expr(c) for k, c in zip(instance.TOTALS, sums)}


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_shared_totals_change_nothing(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Instances with the same counts share one dict of them (`instance._kept`): every
    instance's totals, the summary, the shapes and the JSON are those of a dict each."""

    def every_total(checked: infer.Checked) -> list[tuple[tuple[str, ...], dict]]:
        return [(path, dict(inst.totals)) for path, inst, _ in checked.walk()]

    shared = compile_spec(spec)
    assert shared is not None
    with_sharing = (every_total(shared), _texts(spec))
    monkeypatch.setattr(instance, "_kept", _shared_totals_off)
    alone = compile_spec(spec)
    assert alone is not None
    assert with_sharing == (every_total(alone), _texts(spec))


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
@pytest.mark.parametrize("depth", [1, None])
def test_the_table_made_once_per_distinct_row_is_the_table_row_by_row(
    spec: Path, depth: int | None
) -> None:
    """`render_table` makes each distinct row's cells and line once (shared instances,
    repeated shapes and counts); `plain_table` lays out the `rows` one by one."""
    checked = compile_spec(spec)
    assert checked is not None
    table = report.render_table(checked, depth).splitlines()
    one_by_one = report.plain_table(list(report.rows(checked, depth)))
    assert table[1 : 1 + len(one_by_one)] == one_by_one


def test_an_instance_without_a_body_shares_an_empty_list_that_refuses_to_grow() -> None:
    checked = compile_spec(ROOT / "specs" / "resnet18.lbdl")
    assert checked is not None
    leaves = [i for _, i, _ in checked.walk() if isinstance(i, LayerInst) and not i.body]
    assert len(leaves) > 2 and all(i.body is leaves[0].body for i in leaves)
    assert leaves[0].body == [] and leaves[0].scopes() == [] and leaves[0].parts() == []
    # a box holds only what its kind has: a layer no copies, a ×N group no shortcut
    assert not hasattr(leaves[0], "copies") and not hasattr(leaves[0], "shortcut")
    for change in (lambda b: b.append(1), lambda b: b.extend([1]), lambda b: b.__iadd__([1])):
        with pytest.raises(TypeError, match="shared"):
            change(leaves[0].body)
    assert leaves[1].body == []


@pytest.mark.parametrize(
    "messages",
    [
        ["model m (N=12, D=768)"],
        ["inputs   X: 3×224×224\noutputs  Y: 1000", "params   25,557,032 trainable, 0 state"],
        ["x" * 240],
        ["x" * 241],
        ["word " * 60],  # wider than the console: rich wraps it at a space
        ["幅" * 130],  # two columns a character: 260 columns
        ["  indented, with spaces after   "],
        [""],
    ],
)
def test_the_head_and_foot_are_what_rich_prints(
    messages: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines that fit are written as they are, without rich; rich lays out the others."""
    want = report._console_lines(messages, False)
    fits = all(report._cells(line) <= report.WIDTH for m in messages for line in m.split("\n"))
    if fits:
        monkeypatch.setattr(report, "_console_lines", _refuse_rich)
    assert report._text_lines(messages, False) == want


def _refuse_rich(*_: object) -> None:
    raise AssertionError("rich laid out lines that fit")


def test_fewer_collections_inside_and_the_callers_thresholds_after() -> None:
    import gc

    from lbdl_dsl.core.collector import MIDDLE, OLD, YOUNG, fewer_collections

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_collections():
            assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
            with fewer_collections():  # nested: left as it is
                assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
            assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0)  # the caller turned collection off: it stays off
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
