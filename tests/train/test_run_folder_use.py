"""A run folder of `lbdl train`, or a checkpoint folder, given as ``--params`` to the verbs
that use a model: the run's ``--set`` values and vocabulary, or the checkpoint's tokenizer,
come with it (as `lbdl generate` reads them), so a text model is evaluated on the numbering it
was trained with; a damaged ``run.json`` is a message, never an internal error."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.cli import main

# V's default is not the run's: without the run's --set V=5 its weights do not fit
TEXT_MODEL = """\
model chars(V=3):
  input X: 8 int<V>
  embed d=4          8×4
  fc out=V           8×V
  output P
"""
VOCAB = "\nabcd"  # the run's characters, sorted as `lbdl train` records them


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, Path]:
    """A spec and its run folder, as `lbdl train SPEC --set V=5 --data FILE.txt` leaves one."""
    spec = tmp_path / "chars.lbdl"
    spec.write_text(TEXT_MODEL, "utf-8")
    folder = tmp_path / "runs" / "chars"
    folder.mkdir(parents=True)
    model = lbdl_dsl.compile(spec, V=5)
    model.save(folder / "params.safetensors", *model.init(jax.random.key(1)))
    record = {
        "config": {"spec": str(spec), "data": "train.txt", "overrides": {"V": "5"}},
        "spec_hash": "0" * 64,
        "data": {"name": "train.txt", "vocab": VOCAB},
    }
    (folder / "run.json").write_text(json.dumps(record), "utf-8")
    return spec, folder


def _expected(
    spec: Path, folder: Path, tokens: np.ndarray, dtype: str = "float32"
) -> tuple[float, float]:
    """Loss and accuracy over windows of 9 tokens at a stride of 8, by hand."""
    model = lbdl_dsl.compile(spec, V=5, dtype=dtype)
    params, state = model.load(folder / "params.safetensors")
    starts = range(0, len(tokens) - 8, 8)
    x = np.stack([tokens[s : s + 8] for s in starts])
    y = np.stack([tokens[s + 1 : s + 9] for s in starts])
    logits, _ = model.apply(params, state, x)
    z = np.asarray(logits, np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, y[..., None], -1)[..., 0]
    return float(-picked.mean()), float((z.argmax(-1) == y).mean())


def test_evaluate_reads_the_runs_sizes_and_numbers_text_by_its_vocabulary(
    run, tmp_path: Path, capsys
) -> None:
    # the text has 3 of the run's 5 characters: numbered by its own, `b` would be token 1 (it
    # is 3), and the model's V would be the spec's 3, which its weights do not fit
    spec, folder = run
    text = "bcd\nbbd\ncb\n" * 30
    data = tmp_path / "eval.txt"
    data.write_text(text, "utf-8")
    argv = ["evaluate", str(spec), "--params", str(folder), "--data", str(data), "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    got = json.loads(capsys.readouterr().out)
    tokens = np.array([VOCAB.index(c) for c in text[int(len(text) * 0.9) :]])
    loss, accuracy = _expected(spec, folder, tokens)
    assert got["split"] == "test" and got["samples"] == (len(tokens) - 1) // 8
    assert got["loss"] == pytest.approx(loss, rel=1e-5)
    assert got["accuracy"] == pytest.approx(accuracy)


def test_a_bfloat16_run_is_evaluated_in_bfloat16(run, tmp_path: Path, capsys) -> None:
    # as its own evaluations were: in float32, the run's last test line was not reproduced
    # (a 5-step GPT on Shakespeare: loss 4.1469 against the run's 4.1445)
    spec, folder = run
    record = json.loads((folder / "run.json").read_text())
    record["config"]["dtype"] = "bfloat16"
    (folder / "run.json").write_text(json.dumps(record))
    text = "abcd\nddcba\nbad\n" * 30
    data = tmp_path / "eval.txt"
    data.write_text(text, "utf-8")
    argv = ["evaluate", str(spec), "--params", str(folder), "--data", str(data), "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    got = json.loads(capsys.readouterr().out)["loss"]
    tokens = np.array([VOCAB.index(c) for c in text[int(len(text) * 0.9) :]])
    bf16, _ = _expected(spec, folder, tokens, "bfloat16")
    f32, _ = _expected(spec, folder, tokens)
    assert got == pytest.approx(bf16, rel=1e-6) and bf16 != pytest.approx(f32, rel=1e-6)


def test_text_with_characters_the_run_never_saw_is_refused(run, tmp_path: Path, capsys) -> None:
    spec, folder = run
    data = tmp_path / "eval.txt"
    data.write_text("abcé\n" * 40, "utf-8")
    assert main(["evaluate", str(spec), "--params", str(folder), "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert "has characters the model never saw: 'é'" in err and "Traceback" not in err


def test_another_spec_is_not_handed_the_runs_values(run, tmp_path: Path, capsys) -> None:
    _, folder = run
    other = tmp_path / "other.lbdl"
    other.write_text(TEXT_MODEL.replace("chars(V=3)", "other(W=2, V=3)"), "utf-8")
    data = tmp_path / "eval.txt"
    data.write_text("abcd\n" * 40, "utf-8")
    assert main(["evaluate", str(other), "--params", str(folder), "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert "the weights do not fit this model" in err, err  # V=3 is its own, not the run's


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{bad", "Expecting property name"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"config": {"overrides": [1]}}', "its `config.overrides` is not an object"),
    ],
)
def test_a_damaged_run_json_is_a_message(run, capsys, content: str, problem: str) -> None:
    # `lbdl generate` read it with json.loads and .get: an internal error, exit 3
    spec, folder = run
    (folder / "run.json").write_text(content, "utf-8")
    for argv in (
        ["generate", "--params", str(folder), "--prompt", "ab"],
        ["evaluate", str(spec), "--params", str(folder), "--data", "x.txt"],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert f"run.json: damaged ({problem}" in err and "Traceback" not in err, err


def test_a_checkpoint_folder_numbers_text_by_its_tokenizer(tmp_path: Path, capsys) -> None:
    # by its characters, as before, the text's `h` was token 3 of a 9-character vocabulary
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gpt2"
    spec = tmp_path / "gpt2.lbdl"
    assert main(["from-hf", str(folder), "-o", str(spec)]) == 0
    text = "hello world, the king is dead\n" * 12
    data = tmp_path / "eval.txt"
    data.write_text(text, "utf-8")
    argv = ["evaluate", str(spec), "--params", str(folder), "--data", str(data), "--set", "T=8"]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    got = json.loads(capsys.readouterr().out)
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids
    tokens = np.array(ids[int(len(ids) * 0.9) :])
    model = lbdl_dsl.compile(spec, T=8)
    params, state = model.load(spec.with_suffix(".safetensors"))
    starts = range(0, len(tokens) - 8, 8)
    x = np.stack([tokens[s : s + 8] for s in starts])
    y = np.stack([tokens[s + 1 : s + 9] for s in starts])
    z = np.asarray(model.apply(params, state, x)[0], np.float64)
    z -= z.max(-1, keepdims=True)
    z -= np.log(np.exp(z).sum(-1, keepdims=True))
    loss = -np.take_along_axis(z, y[..., None], -1).mean()
    assert got["samples"] == len(x) and got["loss"] == pytest.approx(loss, rel=1e-5)
    # a parameters file with --tokenizer: the same numbers
    params_file = str(spec.with_suffix(".safetensors"))
    argv[3] = params_file
    assert main([*argv, "--json", "--tokenizer", str(folder / "tokenizer.json")]) == 0
    assert json.loads(capsys.readouterr().out)["loss"] == pytest.approx(loss, rel=1e-5)
