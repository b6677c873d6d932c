"""`TrainConfig`: every bad value is refused with the flag's name, before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training.config import TrainConfig

BASE: dict[str, Any] = {"spec": "s.lbdl", "data": "digits", "output_dir": "runs/s", "steps": 5}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"optimizer": "adamx"}, "--optimizer: unknown value `adamx`"),
        ({"schedule": "cos"}, "--schedule: unknown value `cos`"),
        ({"task": "lm"}, "--task: unknown value `lm`"),
        ({"steps": None}, "give --steps N or --epochs E"),
        ({"epochs": 2}, "--steps and --epochs both given"),
        ({"steps": 0}, "--steps must be a whole number from 1 to 2^31−1, got 0"),
        ({"steps": 2**31}, "--steps must be a whole number from 1 to 2^31−1, got 2147483648"),
        ({"seed": -1}, "--seed must be a whole number from 0 to 2^63−1, got -1"),
        ({"lr": 1e300}, "--lr must be a number > 0 and at most 3.4e38 (a float32), got 1e+300"),
        ({"save_minutes": -1.0}, "--save-minutes must be ≥ 0, got -1.0"),
        ({"steps": None, "epochs": -1.0}, "--epochs must be > 0, got -1.0"),
        ({"batch": 0}, "--batch must be a whole number ≥ 1, got 0"),
        ({"lr": 0.0}, "--lr must be a number > 0, got 0.0"),
        ({"lr": float("nan")}, "--lr must be a number > 0, got nan"),
        ({"warmup": -1}, "--warmup must be ≥ 0 steps, got -1"),
        ({"clip": 0.0}, "--clip must be a norm > 0, got 0.0"),
        ({"weight_decay": -0.1}, "--weight-decay must be ≥ 0, got -0.1"),
        ({"eval_every": 0}, "--eval-every must be ≥ 1, got 0"),
        ({"eval_samples": 0}, "--eval-samples must be ≥ 1, got 0"),
        ({"keep": 0}, "--keep must be ≥ 1 checkpoint, got 0"),
        ({"log_every": 0}, "--log-every must be ≥ 1 step, got 0"),
    ],
)
def test_a_bad_value_names_its_flag(change: dict[str, Any], message: str) -> None:
    with pytest.raises(LbdlError) as err:
        TrainConfig(**(BASE | change))
    assert err.value.first.message == message
    assert err.value.first.hint


def test_the_config_goes_through_json_unchanged() -> None:
    config = TrainConfig(**BASE, overrides={"N": 2, "D": 32}, lr=3e-3, clip=1.0)
    assert TrainConfig.from_json(config.to_json()) == config


def test_resuming_may_change_the_length_but_not_what_is_computed() -> None:
    then = TrainConfig(**BASE, overrides={"N": 2})
    assert (
        TrainConfig(**(BASE | {"steps": 50, "spec": "moved.lbdl"}), overrides={"N": 2}).differences(
            then
        )
        == []
    )
    now = TrainConfig(**(BASE | {"lr": 0.1}), overrides={"N": 3})
    assert now.differences(then) == ["--set: N=2 then, N=3 now", "--lr: 0.001 then, 0.1 now"]


def test_lbdl_check_and_import_lbdl_dsl_load_nothing_of_training() -> None:
    """The train verb's flags are built for `lbdl --help`, but JAX, optax and orbax are only
    imported when a run starts: `lbdl check` stays as fast as `lbdl-compile --check`."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    probe = (
        "import sys\n"
        "import lbdl_dsl\n"
        "from lbdl_dsl import cli as main\n"
        "code = main.main(['check', 'specs/digits-cnn.lbdl'])\n"
        "names = ('jax', 'optax', 'orbax', 'sklearn', 'matplotlib')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "print('RESULT', code, callable(lbdl_dsl.train), heavy, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=repo, timeout=60
    )
    assert "RESULT 0 True []" in result.stderr, result.stderr
