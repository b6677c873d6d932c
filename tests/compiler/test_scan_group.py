"""The `scan h: H:` group through the compiler's stages: its syntax (beside the `scan(b)` box),
the graph it builds, its counts (parameters once, a step's MACs and activations T times) and
the errors it gives with their spans."""

from __future__ import annotations

import pytest

from lbdl_dsl.compiler.driver import CheckFailed
from lbdl_dsl.compiler.graph import ScanNode, verify
from lbdl_dsl.compiler.instance import ScanInst
from lbdl_dsl.compiler.textform import ast_text, graph_text, shapes_text
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers import LAYERS
from lbdl_dsl.core.symbolic import Expr

ELMAN = """\
model elman(D=8, H=16):
  input X: T×D
  scan h: H:
    fc out=H          -> wx
    from h
    fc out=H bias=false
    +(wx)
    tanh
  output Y
"""


def test_the_group_builds_a_step_that_reads_x_t_and_the_carry(compile_text) -> None:
    built = compile_text(ELMAN, stop_after="build")
    verify(built.program, set(LAYERS))
    (node,) = [n for n in built.program.model.body.nodes() if isinstance(n, ScanNode)]
    assert (node.carry, node.carry_shape.text, node.init) == ("h", "H", False)
    assert node.body.inputs == ["input", "carry"]
    text = graph_text(built.program)
    assert "scan_0 = scan h: H(input:X)  -> Y" in text
    assert "fc_0 = fc(carry) out=H bias=false" in text
    assert "  scan h: H\n    box fc out=H -> wx\n    from h\n" in ast_text(built.ast)


def test_parameters_count_once_and_work_once_per_step(compile_text) -> None:
    checked = compile_text(ELMAN)
    # fc 8→16 with bias (144) and 16→16 without (256); per step 128 + 256 MACs
    assert checked.totals["params"] == Expr.lift(400)
    assert checked.totals["macs"].free_symbols == {"T"}
    assert checked.totals["macs"].subs({"T": 7}).as_int() == 384 * 7
    (scan,) = checked.root
    assert isinstance(scan, ScanInst) and str(scan.output) == "T×16"
    one_step = sum((i.totals["activations"] for i in scan.body), Expr())
    assert scan.totals["activations"].subs({"T": 7}) == one_step * 7
    assert "scan_0/wx: fc -> 16  params=144 macs=128" in shapes_text(checked)
    fixed = compile_text(ELMAN, T=12)
    assert fixed.totals["macs"].as_int() == 384 * 12
    assert fixed.totals["params"].as_int() == 400


def test_the_scan_box_keeps_its_name(compile_text) -> None:
    """`scan(b)` stays the linear-recurrence box: only `scan NAME:` opens a group."""
    text = "model m:\n  input X: T×4\n  -> b\n  sigmoid\n  scan(b)\n  output Y\n"
    assert str(compile_text(text).root[-1].output) == "T×4"


def test_the_carry_may_start_from_a_named_tensor(compile_text) -> None:
    text = (
        "model m(D=4):\n  input X: T×D\n  input S: D\n  from X\n"
        "  scan h: D = S:\n    +(h)\n  output Y\n"
    )
    checked = compile_text(text)
    assert str(checked.outputs["Y"]) == "T×4"


def _diagnostic(compile_text, text: str):  # type: ignore[no-untyped-def]
    with pytest.raises(CheckFailed) as failed:
        compile_text(text)
    return failed.value.checked.diagnostics[0]


def test_a_step_that_does_not_give_the_carry_is_refused_at_the_header(compile_text) -> None:
    text = ELMAN.replace("    tanh\n", "    tanh\n    fc out=3\n")
    d = _diagnostic(compile_text, text)
    assert "must give the next carry `h`, 16, but it gives 3" in d.message
    assert (d.span.line, d.span.column) == (3, 3)
    assert "fc out=" in (d.hint or "")
    assert [n.span.line for n in d.notes] == [9, 3]
    assert "spec.lbdl:3:3: error:" in d.render()


def test_a_start_of_another_shape_is_refused(compile_text) -> None:
    text = "model m:\n  input X: T×4\n  input S: 5\n  from X\n  scan h: 4 = S:\n    +(h)\n"
    d = _diagnostic(compile_text, text)
    assert "is 4 but starts from 5" in d.message and d.span.line == 5


def test_a_scan_needs_a_sequence(compile_text) -> None:
    d = _diagnostic(compile_text, "model m:\n  input X: 4\n  scan h: 4:\n    +(h)\n")
    assert "leading axis of a sequence" in d.message


def test_a_step_keeps_no_state(compile_text) -> None:
    text = "model m:\n  input X: T×4\n  scan h: 4:\n    +(h)\n    batchnorm\n"
    d = _diagnostic(compile_text, text)
    assert "cannot keep state" in d.message and d.span.line == 5


def test_the_carry_may_not_hide_a_named_tensor(compile_text) -> None:
    text = "model m:\n  input X: T×4\n  -> h\n  scan h: 4:\n    +(h)\n"
    with pytest.raises(LbdlError) as info:
        compile_text(text, stop_after="build")
    d = info.value.diagnostics[0]
    assert "would hide the tensor `h`" in d.message and (d.span.line, d.span.column) == (4, 8)


def test_the_backward_pass_keeps_every_step_s_values(compile_text) -> None:
    """The memory checker counts a step's values once per step: per sample, T times the
    step's four 16-wide vectors (wx, the carry's product, the sum, tanh: the stacked carries
    that leave the group are tanh's values, not counted again)."""
    from lbdl_dsl.compiler.memory import per_device
    from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve

    figures = []
    for t in (8, 16):
        checked = compile_text(ELMAN, T=t)
        mesh = parse_mesh("data=1")
        whole, _ = per_device(checked, resolve(checked, mesh, parse_rules([], mesh)), [], batch=1)
        figures.append(whole.activations.as_int())
    assert figures[1] - figures[0] == 8 * 4 * 16 * 4  # 8 more steps, float32 bytes
