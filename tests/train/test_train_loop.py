"""`lbdl_dsl.train` end to end on small specs: records, files, state, keys and exact resume."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
from safetensors.numpy import load_file
from train_helpers import TINY_BN, TINY_CNN, TINY_MLP, assert_golden

import lbdl_dsl
from lbdl_dsl.backends.jax import storage
from lbdl_dsl.backends.jax.weights import flatten
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training.loop import TrainingInterrupted
from lbdl_dsl.training.signature import signature
from lbdl_dsl.training.step import init_state, make_train_step
from lbdl_dsl.training.tasks import choose

REPO = Path(__file__).resolve().parents[2]
DIALOGUE = REPO / "tests" / "fixtures" / "train" / "dialogue.txt"
SMALL = {"batch": 8, "eval_samples": 16}


def leaves(tree) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in flatten(tree).items()}


def assert_bitwise(a, b) -> None:
    a, b = leaves(a), leaves(b)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


def losses(run_dir: Path) -> list[tuple[str, int, float]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(r["kind"], r["step"], r["loss"]) for r in map(json.loads, lines)]


def test_records_files_and_weights(spec_file, quiet_train, tmp_path: Path) -> None:
    spec = spec_file(TINY_BN)
    result = quiet_train(spec, "synthetic", steps=12, log_every=3, eval_every=6, **SMALL)
    run = result.run_dir
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [
        ("train", 3), ("train", 6), ("eval", 6), ("train", 9), ("train", 12), ("eval", 12),
    ]  # fmt: skip
    train = records[0]
    assert list(train)[:4] == ["kind", "step", "epoch", "loss"]
    assert {"accuracy", "lr", "grad_norm", "time", "samples_per_s", "eta"} <= train.keys()
    assert records[2].keys() >= {"loss", "accuracy", "samples", "time"}
    assert records[2]["samples"] == 16
    # the weights: loadable by lbdl with every path checked, and by any safetensors reader
    params, state = result.model.load(result.params_path)
    assert_bitwise(params, result.params)
    assert_bitwise(state, result.state)
    raw = load_file(str(result.params_path))
    assert set(raw) == {f"params/{k}" for k in leaves(result.params)} | {
        f"state/{k}" for k in leaves(result.state)
    }
    record = json.loads((run / "run.json").read_text())
    assert record["step"] == 12 and record["model"]["name"] == "tiny_cnn"
    assert record["config"]["steps"] == 12 and len(record["spec_hash"]) == 64
    assert Path(record["spec_file"]).is_absolute() and Path(record["spec_file"]).is_file()
    assert (run / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["12"]


def test_batchnorm_running_averages_are_updated(spec_file, quiet_train) -> None:
    spec = spec_file(TINY_BN)
    result = quiet_train(spec, "synthetic", steps=3, **SMALL)
    _, initial = result.model.init(jax.random.PRNGKey(0))
    for path, value in leaves(result.state).items():
        assert not np.allclose(value, leaves(initial)[path]), path


def _losses_of_two_steps(spec: Path) -> tuple[float, float, float]:
    """Two steps on the same batch with a learning rate of 0: only randomness can differ."""
    model = lbdl_dsl.compile(spec)
    task = choose(signature(model.checked))
    tx = optax.sgd(0.0)
    step = make_train_step(model, task, tx, lambda s: 0.0)
    rng = np.random.default_rng(0)
    batch = {
        "inputs": {"X": rng.normal(size=(8, 2, 4, 4)).astype(np.float32)},
        "target": rng.integers(0, 3, 8).astype(np.int32),
    }
    state, first = step(init_state(model, tx, 0), batch)
    _, second = step(state, batch)
    _, again = step(init_state(model, tx, 0), batch)
    return float(first["loss"]), float(second["loss"]), float(again["loss"])


def test_dropout_draws_a_new_mask_every_step(spec_file) -> None:
    first, second, again = _losses_of_two_steps(spec_file(TINY_CNN))
    assert first != second  # a new key for step 1
    assert first == again  # the same key for step 0, every time
    no_dropout = spec_file(TINY_BN, "plain.lbdl")
    first, second, _ = _losses_of_two_steps(no_dropout)
    assert first == second


def test_resume_after_an_interrupt_is_bitwise(spec_file, quiet_train) -> None:
    """Kill after 10 of 20 steps (Ctrl-C from a callback), resume: the very same run."""
    before = signal.getsignal(signal.SIGINT)  # Python's own, or SIG_IGN in a background job
    spec = spec_file(TINY_CNN)
    options = dict(steps=20, log_every=1, schedule="cosine", warmup=4, clip=1.0, **SMALL)
    whole = quiet_train(spec, "synthetic", "whole", **options)

    def ctrl_c_at_10(record) -> None:
        if record["kind"] == "train" and record["step"] == 10:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(TrainingInterrupted) as stop:
        quiet_train(spec, "synthetic", "cut", callbacks=[ctrl_c_at_10], **options)
    assert stop.value.step == 10
    assert sorted(p.name for p in (stop.value.run_dir / "checkpoints").iterdir()) == ["10"]
    resumed = quiet_train(spec, "synthetic", "cut", resume=True, **options)
    assert_bitwise(resumed.params, whole.params)
    assert_bitwise(resumed.state, whole.state)
    assert losses(resumed.run_dir) == losses(whole.run_dir)
    assert signal.getsignal(signal.SIGINT) is before  # given back as it was


TINY_STACK = """\
model tiny_stack(C=3):
  input X: 4×4×4
  ×3:
    conv-2d k=3 p=1   4×4×4
    batchnorm
    relu
  reshape           64
  fc                C
  output Y
"""


def test_a_checkpoint_of_the_stacked_layout_resumes(spec_file, quiet_train, monkeypatch) -> None:
    """A run checkpointed while short ×N groups were stacked (lbdl before they kept their
    copies apart) resumes: parameters, running averages and Adam's moments cut copy by copy."""
    spec = spec_file(TINY_STACK)
    options = dict(log_every=1, optimizer="adam", **SMALL)
    with monkeypatch.context() as patch:
        patch.setattr(storage, "per_copy", lambda inst: False)
        stacked = quiet_train(spec, "synthetic", "stacked", steps=4, **options)
        quiet_train(spec, "synthetic", "old", steps=2, **options)
    assert stacked.params["repeat_0"]["conv_2d_0"]["w"].shape == (3, 3, 3, 4, 4)
    resumed = quiet_train(spec, "synthetic", "old", steps=4, resume=True, **options)
    assert resumed.params["repeat_0"]["2"]["conv_2d_0"]["w"].shape == (3, 3, 4, 4)
    for tree, old, name in (
        (resumed.params, stacked.params, "conv_2d_0/w"),
        (resumed.state, stacked.state, "batchnorm_0/mean"),
    ):
        flat, stacks = flatten(tree), flatten(old)
        for k in range(3):  # the same run, rounding apart (a scan against straight-line code)
            np.testing.assert_allclose(
                np.asarray(flat[f"repeat_0/{k}/{name}"]),
                np.asarray(stacks[f"repeat_0/{name}"][k]),
                rtol=1e-4,
                atol=1e-6,
            )
    train = [
        [loss for kind, _, loss in losses(r.run_dir) if kind == "train"] for r in (resumed, stacked)
    ]
    np.testing.assert_allclose(*train, rtol=1e-4)


TINY_DEEP = """\
model tiny_deep(C=3):
  input X: 8
  ×3:
    fc              8
    relu
  fc                C
  output Y
"""


def test_unroll_trains_the_same_model_and_resumes_a_scanned_run(
    spec_file, quiet_train, monkeypatch
) -> None:
    """``--unroll`` (faster steps on a GPU) lowers the ×3 group as straight-line code over the
    same stacked parameters: a scanned run resumes unrolled, rounding apart the same run."""
    spec = spec_file(TINY_DEEP)
    options = dict(log_every=1, optimizer="adam", **SMALL)
    from lbdl_dsl.backends.jax import model as jax_model

    asked: list[bool] = []
    model_of = jax_model.model_of  # how training compiles its spec
    monkeypatch.setattr(
        jax_model, "model_of", lambda *a, **k: asked.append(k["unroll"]) or model_of(*a, **k)
    )
    scanned = quiet_train(spec, "synthetic", "scanned", steps=4, **options)
    quiet_train(spec, "synthetic", "mixed", steps=2, **options)
    mixed = quiet_train(spec, "synthetic", "mixed", steps=4, resume=True, unroll=True, **options)
    assert asked == [False, False, True]
    a, b = flatten(mixed.params), flatten(scanned.params)
    assert a.keys() == b.keys() and a["repeat_0/fc_0/w"].shape == (3, 8, 8)
    for k in a:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-4, atol=1e-6)
    train = [[x for kind, _, x in losses(r.run_dir) if kind == "train"] for r in (mixed, scanned)]
    np.testing.assert_allclose(*train, rtol=1e-4)
    record = json.loads((mixed.run_dir / "run.json").read_text(encoding="utf-8"))
    assert record["config"]["unroll"] is True


def test_steps_then_more_steps_with_the_cli(spec_file, tmp_path: Path, capsys) -> None:
    from lbdl_dsl import cli as main

    spec = str(spec_file(TINY_BN))
    common = ["train", spec, "--data", "synthetic", "--batch", "8", "--eval-samples", "8"]
    assert main.main([*common, "--steps", "20", "-o", str(tmp_path / "whole")]) == 0
    assert main.main([*common, "--steps", "10", "-o", str(tmp_path / "cut")]) == 0
    assert main.main([*common, "--steps", "20", "-o", str(tmp_path / "cut"), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "resuming from the checkpoint of step 10" in out
    assert "train step 20/20  epoch" in out and "test: accuracy" in out
    a = load_file(str(tmp_path / "whole" / "params.safetensors"))
    b = load_file(str(tmp_path / "cut" / "params.safetensors"))
    assert all(a[k].tobytes() == b[k].tobytes() for k in a) and a.keys() == b.keys()


# -- errors ------------------------------------------------------------------------------------


def test_a_folder_with_a_run_is_not_overwritten(spec_file, quiet_train, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    quiet_train(spec, "synthetic", steps=2, **SMALL)
    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    with pytest.raises(LbdlError) as err:
        quiet_train(spec, "synthetic", steps=2, **SMALL)
    assert_golden("run_exists", err.value.render() + "\n", tmp_path)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before


def test_resuming_with_another_spec_is_refused(spec_file, quiet_train, tmp_path) -> None:
    quiet_train(spec_file(TINY_MLP), "synthetic", steps=2, **SMALL)
    other = spec_file(TINY_MLP.replace("D=8", "D=16"), "other.lbdl")
    with pytest.raises(LbdlError) as err:
        quiet_train(other, "synthetic", steps=4, resume=True, **SMALL)
    assert_golden("resume_other_spec", err.value.render() + "\n", tmp_path)


def test_resuming_with_other_values_is_refused(spec_file, quiet_train, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    quiet_train(spec, "synthetic", steps=2, **SMALL)
    with pytest.raises(LbdlError) as err:
        quiet_train(spec, "synthetic", steps=4, resume=True, lr=0.1, seed=1, **SMALL)
    assert_golden("resume_other_values", err.value.render() + "\n", tmp_path)


def test_a_nan_loss_stops_the_run_and_names_the_step(spec_file, quiet_train, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    with pytest.raises(LbdlError) as err:
        quiet_train(spec, "synthetic", steps=30, optimizer="sgd", lr=1e30, log_every=5, **SMALL)
    assert_golden("nan_loss", err.value.render() + "\n", tmp_path)
    assert not (tmp_path / "run" / "checkpoints").exists() or not any(
        (tmp_path / "run" / "checkpoints").iterdir()
    )


def test_the_cli_prints_errors_without_a_traceback(spec_file, tmp_path, capsys) -> None:
    from lbdl_dsl import cli as main

    spec = str(spec_file(TINY_MLP))
    code = main.main(["train", spec, "--data", "digts", "--steps", "3", "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.startswith("error: --data: unknown data `digts`\nhint: did you mean `digits`?")
    assert main.main(["train", spec, "--data", "synthetic", "--steps", "3", "--lr", "-1"]) == 1
    assert "--lr must be a number > 0, got -1.0" in capsys.readouterr().err


# -- models of the spec library ----------------------------------------------------------------


@pytest.mark.slow
def test_a_gpt_learns_characters_in_50_steps(quiet_train) -> None:
    result = quiet_train(
        REPO / "specs" / "gpt.lbdl",
        DIALOGUE,
        overrides={"N": 2, "D": 32, "H": 2, "V": 35, "T": 32},
        steps=50,
        batch=16,
        lr=1e-2,
        log_every=5,
        eval_samples=64,
    )
    train = [loss for kind, _, loss in losses(result.run_dir) if kind == "train"]
    assert len(train) == 10
    assert train[-1] < 0.6 * train[0]  # measured: 4.7 over steps 1-5, 2.3 over steps 46-50
    assert all(b < a for a, b in zip(train, train[1:]))
    assert result.eval["perplexity"] < 12  # guessing among the 35 characters would be 35


PAIR = """\
model pair(C=3):
  input A: 4
  fc 8
  -> a
  input B: 2×3
  reshape 6
  fc 8
  concat(a)   16
  relu
  fc C
  output Y
"""


def test_two_inputs_from_named_arrays_in_bfloat16(spec_file, quiet_train, tmp_path) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(40, 4)), rng.normal(size=(40, 2, 3))
    y = (a[:, 0] > 0).astype(np.int32) + (b[:, 0, 0] > 0)
    np.savez(tmp_path / "pair.npz", A=a, B=b, y=y, A_test=a[:8], B_test=b[:8], y_test=y[:8])
    result = quiet_train(
        spec_file(PAIR), str(tmp_path / "pair.npz"), steps=4, batch=8, dtype="bfloat16"
    )
    assert result.task.kind == "classify" and result.eval["samples"] == 8
    assert np.isfinite(result.train["loss"]) and result.train["loss"] > 0
    assert all(v.dtype == np.float32 for v in leaves(result.params).values())
