"""``lbdl diff``: alignment, exact sums, carried weights, goldens and the command line.

The property that makes a diff trustworthy is checked on every ordered pair of the spec library:
the changes add up, exactly and as formulas, to totals(B) − totals(A), and a spec compared with
itself has no change. Goldens pin the text of the three pairs the issue names; a change made on
purpose is accepted with ``LBDL_ACCEPT=1``.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest

import lbdl_dsl
from lbdl_dsl import cli as main
from lbdl_dsl import diff
from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram.paint import paint
from lbdl_dsl.backends.diagram.scene import Box
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.infer import Checked
from lbdl_dsl.core.symbolic import Expr, total

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "diff"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
SPECS = sorted(p.name for p in (REPO / "specs").glob("*.lbdl"))
PAIRS = {
    "resnet50-resnet101": (["specs/resnet50.lbdl", "specs/resnet101.lbdl"], []),
    "gpt2-gpt2-medium": (
        ["specs/gpt2.lbdl", "specs/gpt2.lbdl"],
        ["--set-b", "N=24", "D=1024", "H=16"],
    ),
    "vit-postnorm": (["specs/vit.lbdl", "tests/fixtures/diff/vit-postnorm.lbdl"], []),
}


@cache
def checked(name: str) -> Checked:
    result = compile_spec(REPO / "specs" / name)
    assert result is not None and result.ok
    return result


@pytest.mark.parametrize("name", SPECS)
def test_a_spec_against_itself_has_no_change(name: str) -> None:
    d = diff.diff(checked(name), checked(name))
    assert d.empty and all(v == Expr.lift(0) for v in d.delta.values())
    assert "no difference" in diff.render(d)


@pytest.mark.parametrize("name_a", SPECS)
def test_changes_add_up_to_the_difference_of_totals(name_a: str) -> None:
    a = checked(name_a)
    for name_b in SPECS:
        b = checked(name_b)
        d = diff.diff(a, b)
        for k in diff.COUNTS:
            assert total(c.delta[k] for c in d.changes) == b.totals[k] - a.totals[k], (
                name_a,
                name_b,
                k,
            )


def test_a_deeper_stack_is_one_changed_group() -> None:
    d = diff.diff(checked("resnet50.lbdl"), checked("resnet101.lbdl"))
    assert [(c.status, c.label_a, c.label_b) for c in d.changes] == [
        ("changed", "resblock ×5", "resblock ×22")
    ]
    assert d.delta["params"] == Expr.lift(44_549_160 - 25_557_032)


def test_carried_weights_are_every_array_the_two_specs_share() -> None:
    """Logical paths, whatever the JAX module's layout: ResNet-50's ×5 is kept per copy there
    and ResNet-101's ×22 stacked, and every array of ResNet-101 still has ResNet-50's. (The
    module holds ResNet-101 in 125 arrays, its short groups' copies apart; they are 89 stacked.
    Before, the diff compared the modules' layouts and carried 116 of the 125.)"""
    a, b = checked("resnet50.lbdl"), checked("resnet101.lbdl")
    d = diff.diff(a, b)
    shapes_a, shapes_b = dict(diff.parameter_shapes(a)), dict(diff.parameter_shapes(b))
    assert len(d.carried) == d.params_b == len(shapes_b) == 89
    deeper = "repeat_2/resblock_0/residual_0/conv_2d_0/w"
    assert shapes_a[deeper][0] == "5" and shapes_b[deeper][0] == "22"
    assert deeper in d.in_part and "conv_2d_0/w" not in d.in_part
    assert set(d.carried) - set(d.in_part) == {
        p for p in shapes_b if shapes_a.get(p) == shapes_b[p]
    }


def test_a_changed_width_is_not_carried() -> None:
    a = compile_spec(REPO / "specs" / "gpt2.lbdl", overrides={"T": 8})
    b = compile_spec(REPO / "specs" / "gpt2.lbdl", overrides={"T": 8, "D": 1024, "H": 16})
    d = diff.diff(a, b)
    assert d.carried == () and d.in_part == ()


@pytest.mark.parametrize("name", ["lenet.lbdl", "resnet18.lbdl", "gpt.lbdl", "unet.lbdl"])
def test_parameter_paths_are_what_a_saved_model_holds(name: str, tmp_path: Path) -> None:
    """The diff's paths are the logical ones, which `model.save` writes whatever the module's
    layout (ResNet-18's short groups are kept per copy in the module, stacked in the file)."""
    pytest.importorskip("jax")
    import jax

    import lbdl_dsl
    from lbdl_dsl.backends.jax.weights import read

    model = lbdl_dsl.compile(REPO / "specs" / name, **({"T": 8} if "gpt" in name else {}))
    params, state = model.init(jax.random.key(0))
    saved = read(model.save(tmp_path / "w.safetensors", params, state))
    ours = dict(diff.parameter_shapes(model.checked))
    stored = {k.removeprefix("params/"): v.shape for k, v in saved.items() if k[:7] == "params/"}
    assert set(ours) <= set(stored)
    for path, shape in ours.items():
        assert tuple(int(d) for d in shape) == stored[path], path


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_diff_text_matches_its_golden(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    files, extra = PAIRS[name]
    monkeypatch.chdir(REPO)
    assert main.main(["diff", *files, *extra]) == 0
    text = capsys.readouterr().out
    golden = GOLDEN / f"{name}.txt"
    if ACCEPT:
        golden.write_text(text, "utf-8")
    assert text == golden.read_text("utf-8")


def test_json_carries_the_same_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    assert (
        main.main(["diff", "specs/gpt2.lbdl", "specs/gpt2.lbdl", "--set-b", "N=24", "--json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["delta"]["params"] == 12 * 7_087_872
    assert [c["status"] for c in data["changes"]] == ["changed"]
    assert data["changes"][0]["a"]["box"].endswith("×12")


def test_a_bad_spec_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.lbdl"
    bad.write_text("model m:\n  input X: 4\n  fc 8   9\n  output Y\n", "utf-8")
    assert main.main(["diff", str(REPO / "specs" / "mlp.lbdl"), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "Traceback" not in err


# -- the figure of B ----------------------------------------------------------------------------


def _figure(tmp_path: Path, a: str, b: str, *extra: str) -> str:
    out = tmp_path / "b.dot"
    assert main.main(["diff", str(REPO / a), str(REPO / b), "--figure", str(out), *extra]) == 0
    return out.read_text("utf-8")


def test_the_figure_of_b_marks_a_changed_frame(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dot = _figure(tmp_path, "specs/resnet50.lbdl", "specs/resnet101.lbdl")
    frames = {
        line.split('"')[1]: line for line in dot.splitlines() if line.strip().startswith("subgraph")
    }
    assert set(frames) >= {"cluster:repeat_1", "cluster:repeat_2"}
    body = dot.split('subgraph "cluster:repeat_2"', 1)[1].split("subgraph", 1)[0]
    assert diff.CHANGED_FILL in body
    other = dot.split('subgraph "cluster:repeat_1"', 1)[1].split("subgraph", 1)[0]
    assert diff.CHANGED_FILL not in other
    assert "added in B" in dot and "removed" not in dot


def test_the_figure_of_b_fills_added_boxes_and_names_the_removed(tmp_path: Path) -> None:
    dot = _figure(tmp_path, "specs/vit.lbdl", "tests/fixtures/diff/vit-postnorm.lbdl")
    assert dot.count(diff.ADDED_FILL) == 2  # the postnorm box and its swatch in the legend
    assert "removed: tlayer H=12 F=3072 (A:21)" in dot


def test_a_change_inside_a_collapsed_block_colours_the_block(tmp_path: Path) -> None:
    colours = {"repeat_2/resblock_0/residual_0/conv_2d_0": "#123456"}
    checked = lbdl_dsl.check(REPO / "specs/resnet101.lbdl")
    scene = paint(diagram.scene(checked), colours)
    box = scene.elements()["repeat_2/resblock_0"]
    assert isinstance(box, Box) and box.fill == "#123456"


def test_the_figure_needs_a_known_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main.main(
            [
                "diff",
                str(REPO / "specs/lenet.lbdl"),
                str(REPO / "specs/lenet.lbdl"),
                "--figure",
                str(tmp_path / "x.txt"),
            ]
        )
    assert info.value.code == 1
    assert "--figure" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists()
