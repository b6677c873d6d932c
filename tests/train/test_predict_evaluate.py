"""`lbdl predict`, `lbdl evaluate`, `model.predict` and `model.evaluate` on models whose answers
are known: a linear classifier with hand-set weights (its probabilities and its loss written
out in NumPy here), a token model whose logits are all zero (perplexity = its vocabulary), and
the ViT fixture of tests/fixtures/hf (the reference's logits); then each error as the user
reads it.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.cli import main
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]
VIT = REPO / "tests" / "fixtures" / "hf" / "vit"

LINEAR = """\
model linear:
  input X: 3
  fc                 3
  output Y
"""
W = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]], np.float32)
B = np.array([0.0, 0.5, 0.0], np.float32)

UNIFORM = """\
model uniform(V=5):
  input X: 8 int<V>
  embed d=4          8×4
  fc out=V           8×V
  output P
"""


@pytest.fixture
def linear(tmp_path: Path) -> tuple[Path, Path]:
    spec = tmp_path / "linear.lbdl"
    spec.write_text(LINEAR, "utf-8")
    model = lbdl_dsl.compile(spec)
    params = tmp_path / "linear.safetensors"
    model.save(params, {"fc_0": {"w": W, "b": B}}, {})
    return spec, params


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


X = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 4.0], [1.0, 1.0, 1.0]], np.float32)
Y = np.array([0, 1, 1, 0], np.int32)  # the third is wrong: its scores favour class 2


def test_model_predict_and_evaluate_give_the_known_answers(linear) -> None:
    spec, params_path = linear
    model = lbdl_dsl.compile(spec)
    params, state = model.load(params_path)
    probs = np.asarray(model.predict(params, state, X))
    np.testing.assert_allclose(probs, softmax(X @ W + B), rtol=1e-6)
    got = model.evaluate(params, state, {"X": X, "y": Y}, batch=3)
    p = softmax(X @ W + B)
    assert got["samples"] == 4 and got["split"] == "train"
    assert got["accuracy"] == pytest.approx(0.75)
    assert got["loss"] == pytest.approx(-np.mean(np.log(p[np.arange(4), Y])), rel=1e-5)


def test_evaluate_prints_loss_and_accuracy_of_a_test_split(linear, tmp_path: Path, capsys):
    spec, params = linear
    data = tmp_path / "data.npz"
    np.savez(data, X=X[:1], y=Y[:1], X_test=X, y_test=Y)
    assert main(["evaluate", str(spec), "--params", str(params), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "data.npz, test split: 4 samples" in out and "accuracy 75.00%" in out


def test_a_run_folder_is_taken_as_its_parameters(linear, tmp_path: Path, capsys) -> None:
    spec, params = linear
    run = tmp_path / "runs" / "linear"
    run.mkdir(parents=True)
    params.rename(run / "params.safetensors")
    x = tmp_path / "x.npz"
    np.savez(x, X=X[2])
    assert main(["predict", str(spec), "--params", str(run), str(x), "--top-k", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    p = softmax(X[2] @ W + B)
    assert out[0] == str(x)
    assert out[1].split() == ["class", "2", f"{p[2]:.2%}"]
    assert out[2].split() == ["class", "1", f"{p[1]:.2%}"]
    assert len(out) == 3


def test_perplexity_of_a_model_of_even_odds_is_its_vocabulary(tmp_path: Path) -> None:
    spec = tmp_path / "uniform.lbdl"
    spec.write_text(UNIFORM, "utf-8")
    model = lbdl_dsl.compile(spec)
    params, state = model.init(jax.random.key(0))
    params = {"embed_0": params["embed_0"], "fc_0": {k: v * 0 for k, v in params["fc_0"].items()}}
    text = tmp_path / "text.txt"
    text.write_text("abcde" * 40, "utf-8")
    got = model.evaluate(params, state, str(text))
    assert got["perplexity"] == pytest.approx(5.0, rel=1e-5)
    assert got["loss"] == pytest.approx(np.log(5.0), rel=1e-5)


def test_predict_reads_npz_and_images_for_the_vit_fixture(tmp_path: Path, capsys) -> None:
    from PIL import Image

    spec = tmp_path / "vit.lbdl"
    assert main(["from-hf", str(VIT), "-o", str(spec)]) == 0
    ref = np.load(VIT / "reference.npz")
    x = tmp_path / "x.npz"
    np.savez(x, ref["X"])  # a single unnamed array: the spec's one input
    img = tmp_path / "img.png"
    Image.fromarray(np.full((20, 30, 3), 128, np.uint8)).save(img)
    capsys.readouterr()
    argv = ["predict", str(spec), "--params", str(spec.with_suffix(".safetensors")), str(x)]
    argv += [str(img), "--labels", str(spec.with_suffix(".labels.txt")), "--top-k", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    labels = spec.with_suffix(".labels.txt").read_text("utf-8").split()
    p = softmax(ref["logits"])
    assert out[:2] == [str(x), f"  {labels[p.argmax()]:<5}  {p.max():7.2%}"]
    assert out[2] == str(img) and len(out) == 4
    # the checkpoint folder itself as --params: imported through its model_type's map
    assert main(["predict", str(spec), "--params", str(VIT), str(x), "--top-k", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == [
        "class",
        str(p.argmax()),
        f"{p.max():.2%}",
    ]


# -- errors --------------------------------------------------------------------------------------


def _fails(capsys, argv: list[str], *wanted: str) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for w in wanted:
        assert w in err, err


def test_an_input_of_the_wrong_size_is_refused(linear, tmp_path: Path, capsys) -> None:
    spec, params = linear
    x = tmp_path / "x.npz"
    np.savez(x, X=np.zeros((2, 4), np.float32))
    _fails(
        capsys,
        ["predict", str(spec), "--params", str(params), str(x)],
        "`X` is 2×4; the spec's input X is 3 per sample",
    )


def test_predict_errors(linear, tmp_path: Path, capsys) -> None:
    spec, params = linear
    x = tmp_path / "x.npz"
    np.savez(x, X=X)
    base = ["predict", str(spec), "--params", str(params)]
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\n", "utf-8")
    _fails(capsys, [*base, str(x), "--labels", str(labels)], "names 2 classes; the model scores 3")
    _fails(capsys, [*base, str(tmp_path / "x.csv")], "no such file")
    (tmp_path / "x.csv").write_text("1,2,3", "utf-8")
    _fails(capsys, [*base, str(tmp_path / "x.csv")], "unknown input format `.csv`")
    _fails(
        capsys,
        ["predict", str(spec), "--params", str(tmp_path), str(x)],
        "no params.safetensors in this folder",
    )
    img = tmp_path / "img.png"
    img.write_bytes(b"not an image")
    _fails(capsys, [*base, str(img)], "an image fits an input of C×H×W floats")


def test_predict_refuses_a_token_model(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "uniform.lbdl"
    spec.write_text(UNIFORM, "utf-8")
    with pytest.raises(LbdlError, match="evaluate"):
        lbdl_dsl.compile(spec).evaluate({}, {}, 3.5)
    _fails(
        capsys,
        ["predict", str(spec), "--params", "p.safetensors", "x.npz"],
        "predict is for classifiers",
        "lbdl generate",
    )


@pytest.mark.parametrize(
    ("flags", "arrays", "message"),
    [
        (["--samples", "0"], {}, "argument --samples: a whole number ≥ 1, got '0'"),
        (["--samples", "-3"], {}, "argument --samples: a whole number ≥ 1, got '-3'"),
        (["--task", "clasify"], {}, "did you mean `classify`?"),
        ([], {"X": X[:1], "y": np.int64(0)}, "the targets `y` are one value, not one per sample"),
        ([], {"X": np.full_like(X, np.nan), "y": Y}, "each sample of `X` holds NaN or infinite"),
        ([], {"X": X, "y": Y[:, None]}, "are 1 (1 axis) per sample; the task"),
        ([], {"X": X, "y": Y[:, None]}, "hint: reshape them to (N,)"),
    ],
)
def test_evaluate_refuses_flags_and_data_that_do_not_fit(
    linear, tmp_path: Path, capsys, flags, arrays, message
) -> None:
    # each was an internal error (a KeyError, numpy's ValueError, len() of a 0-d array), an
    # unknown task evaluated as mse, or NaN inputs evaluated to a loss of ln(10)
    spec, params = linear
    data = tmp_path / "data.npz"
    np.savez(data, **(arrays or {"X": X, "y": Y}))
    argv = ["evaluate", str(spec), "--params", str(params), "--data", str(data), *flags]
    try:
        code = main(argv)
    except SystemExit as exit_:  # a flag's value, refused by the parser
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and message in err, err


def test_model_evaluate_refuses_an_unknown_task_and_samples_below_one(linear) -> None:
    spec, params_path = linear
    model = lbdl_dsl.compile(spec)
    params, state = model.load(params_path)
    with pytest.raises(LbdlError, match="unknown task `clasify`"):
        model.evaluate(params, state, {"X": X, "y": Y}, task="clasify")
    with pytest.raises(LbdlError, match="--samples must be a whole number ≥ 1, got 0"):
        model.evaluate(params, state, {"X": X, "y": Y}, samples=0)
