"""The data: built-in sets, user files checked axis by axis, and an order that is a pure
function of (seed, epoch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from train_helpers import TINY_CNN, TINY_MLP, assert_golden

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training.datasets import ArrayData, open_data, plain_play
from lbdl_dsl.training.loader import Loader, Position, eval_batches
from lbdl_dsl.training.signature import signature
from lbdl_dsl.training.tasks import choose

REPO = Path(__file__).resolve().parents[2]
DIALOGUE = REPO / "tests" / "fixtures" / "train" / "dialogue.txt"


def setup(spec: Path, task: str = "auto", **overrides: object):
    sig = signature(lbdl_dsl.check(spec, **overrides))
    return sig, choose(sig, task)


def numbered(n: int) -> ArrayData:
    return ArrayData({"X": np.arange(n, dtype=np.float32)[:, None]}, np.arange(n))


def error_text(err: pytest.ExceptionInfo[LbdlError]) -> str:
    return err.value.render() + "\n"


# -- the loader --------------------------------------------------------------------------------


def test_the_order_is_a_pure_function_of_seed_and_epoch() -> None:
    a, b = Loader(numbered(50), 8, seed=3), Loader(numbered(50), 8, seed=3)
    assert np.array_equal(a.order(1), b.order(1))
    assert not np.array_equal(a.order(0), a.order(1))
    assert not np.array_equal(a.order(0), Loader(numbered(50), 8, seed=4).order(0))
    # every sample once per epoch; the last incomplete batch dropped
    seen = np.concatenate([a.batch_at(Position(2, i))["target"] for i in range(a.steps_per_epoch)])
    assert a.steps_per_epoch == 6 and len(set(seen)) == 48


def test_a_position_is_the_batch_to_make_next() -> None:
    loader = Loader(numbered(20), 8, seed=0)
    pos = Position()
    for step in range(7):
        assert pos == loader.position_at(step)
        pos = loader.advance(pos)
    assert pos == Position(3, 1)
    assert Position.from_json(pos.to_json()) == pos


def test_shards_split_each_global_batch() -> None:
    loader = Loader(numbered(40), 8, seed=1)
    whole = loader.batch_at(Position(1, 2))["target"]
    parts = [loader.shard(i, 4).batch_at(Position(1, 2))["target"] for i in range(4)]
    assert np.array_equal(np.concatenate(parts), whole)


def test_eval_batches_pad_and_weigh() -> None:
    batches = list(eval_batches(numbered(10), 4))
    assert [w.tolist() for _, w in batches][-1] == [1, 1, 0, 0]
    rows = np.concatenate([b["target"][w > 0] for b, w in batches])
    assert rows.tolist() == list(range(10))
    spread = np.concatenate([b["target"] for b, _ in eval_batches(numbered(10), 3, limit=3)])
    assert spread.tolist() == [0, 4, 9]


def test_a_batch_larger_than_the_data_is_refused() -> None:
    with pytest.raises(LbdlError, match="--batch 64 is larger than the training data"):
        Loader(numbered(10), 64, seed=0)


# -- built-in data -----------------------------------------------------------------------------


def test_digits_fit_a_cnn_and_an_mlp(spec_file) -> None:
    data = open_data("digits", *setup(REPO / "specs" / "digits-cnn.lbdl"), seed=0)
    batch = data.train.take(np.arange(3))
    assert batch["inputs"]["X"].shape == (3, 1, 8, 8) and batch["target"].dtype == np.int32
    assert (len(data.train), len(data.test)) == (1437, 360)
    assert batch["inputs"]["X"].min() >= 0.0 and batch["inputs"]["X"].max() <= 1.0
    flat = spec_file("model flat:\n  input X: 64\n  fc 10\n  output Y\n")
    same = open_data("digits", *setup(flat), seed=5)
    assert np.array_equal(same.test.take(np.arange(4))["inputs"]["X"].reshape(4, 1, 8, 8),
                          data.test.take(np.arange(4))["inputs"]["X"])  # fmt: skip


def test_text_becomes_windows_and_their_next_characters(spec_file) -> None:
    spec = REPO / "specs" / "gpt.lbdl"
    data = open_data(str(DIALOGUE), *setup(spec, N=1, D=8, H=2, V=40, T=16), seed=0)
    batch = data.train.take(np.array([0, 5]))
    x, y = batch["inputs"]["X"], batch["target"]
    assert x.shape == y.shape == (2, 16) and np.array_equal(x[:, 1:], y[:, :-1])
    vocab = data.info["vocab"]
    assert len(vocab) == 35 and "".join(vocab[i] for i in x[0]) == DIALOGUE.read_text()[:16]


def test_shakespeare_is_plain_text_of_the_plays() -> None:
    spec = REPO / "specs" / "gpt.lbdl"
    data = open_data("shakespeare", *setup(spec, N=1, D=8, H=2, V=80, T=32), seed=0)
    assert data.info["characters"] > 4_000_000 and len(data.info["vocab"]) <= 80
    text = "".join(data.info["vocab"][i] for i in data.train.take(np.array([0]))["inputs"]["X"][0])
    assert text.startswith("THESEUS:\nNow, fair Hippolyta")


def test_a_play_in_markdown_becomes_plain_text() -> None:
    md = (
        "# Title\n\n## ACT I\n\n_Enter A and\nB_\n\n"
        "**A**  \nWell \\[met\\]  \nmy *friend*.\n\n**B**  \nAy.\n"
    )
    assert plain_play(md) == "A:\nWell [met]\nmy friend.\n\nB:\nAy.\n"


def test_synthetic_samples_depend_on_seed_and_index_only(spec_file) -> None:
    sig, task = setup(spec_file(TINY_CNN))
    a = open_data("synthetic", sig, task, seed=1).train.take(np.array([7, 2]))
    b = open_data("synthetic", sig, task, seed=1).train.take(np.array([2, 7]))
    assert np.array_equal(a["inputs"]["X"][0], b["inputs"]["X"][1])
    assert a["target"].dtype == np.int32 and a["target"].max() < 3


# -- user files and their errors ---------------------------------------------------------------


def test_npz_arrays_by_name_with_a_test_split(spec_file, tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4))
    np.savez(path, X=x, y=np.arange(30) % 2, X_test=x[:6], y_test=np.zeros(6, int))
    data = open_data(str(path), *setup(spec_file(TINY_MLP)), seed=0)
    assert (len(data.train), len(data.test)) == (30, 6)
    assert data.train.take(np.array([1]))["inputs"]["X"].dtype == np.float32


@pytest.mark.parametrize(
    ("name", "arrays", "spec"),
    [
        ("npz_rank", {"X": np.zeros((5, 32)), "y": np.zeros(5, int)}, TINY_CNN),
        ("npz_axis", {"X": np.zeros((5, 2, 4, 5)), "y": np.zeros(5, int)}, TINY_CNN),
        ("npz_missing_input", {"images": np.zeros((5, 4)), "y": np.zeros(5, int)}, TINY_MLP),
        ("npz_missing_targets", {"X": np.zeros((5, 4))}, TINY_MLP),
        ("npz_labels_range", {"X": np.zeros((5, 4)), "y": np.arange(5)}, TINY_MLP),
        ("npz_float_labels", {"X": np.zeros((5, 4)), "y": np.zeros(5)}, TINY_MLP),
        ("npz_lengths", {"X": np.zeros((5, 4)), "y": np.zeros(4, int)}, TINY_MLP),
    ],
)
def test_npz_that_does_not_fit(name, arrays, spec, spec_file, tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    with pytest.raises(LbdlError) as err:
        open_data(str(path), *setup(spec_file(spec)), seed=0)
    assert_golden(name, error_text(err), tmp_path)


@pytest.mark.parametrize(
    ("name", "data", "spec", "overrides"),
    [
        ("unknown_data", "digit", TINY_MLP, {}),
        ("no_such_file", "missing.npz", TINY_MLP, {}),
        ("text_for_a_classifier", str(DIALOGUE), TINY_MLP, {}),
        ("text_vocab_too_small", str(DIALOGUE), None, {"V": 20}),
        ("digits_wrong_size", "digits", TINY_MLP, {}),
    ],
)
def test_data_errors(name, data, spec, overrides, spec_file, tmp_path: Path) -> None:
    if spec is None:
        sig, task = setup(REPO / "specs" / "gpt.lbdl", N=1, D=8, H=2, T=16, **overrides)
    else:
        sig, task = setup(spec_file(spec))
    with pytest.raises(LbdlError) as err:
        open_data(data, sig, task, seed=0)
    assert_golden(name, error_text(err).replace(str(REPO), "REPO"), tmp_path)
