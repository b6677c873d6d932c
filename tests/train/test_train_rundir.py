"""Run folders that are damaged, mixed or shared, and checkpoints that fail (issue 45, items
2 to 5 and the checkpoints' digests).

A damaged folder is read as far as it can be and says what it dropped; nothing is ever mixed
(checkpoints without their ``run.json``, a ``run.json`` without its checkpoints, two trainings at
once are refused); a run saves every few minutes by default; a failed save is one message.
The folder is trained once per module and copied for each test.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from train_helpers import TINY_MLP

from lbdl_dsl.cli import main
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training import rundir
from lbdl_dsl.training.config import TrainConfig
from lbdl_dsl.training.loop import _StopRequest

REPO = Path(__file__).resolve().parents[2]
FLAGS = ["--data", "synthetic", "--log-every", "2", "--save-every", "2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 4-step run with checkpoints at steps 2 and 4, and its spec beside it."""
    base = tmp_path_factory.mktemp("trained")
    (base / "tiny.lbdl").write_text(TINY_MLP, "utf-8")
    cwd = os.getcwd()
    os.chdir(base)
    try:
        assert main(["train", "tiny.lbdl", *FLAGS, "--steps", "4", "-o", "run"]) == 0
    finally:
        os.chdir(cwd)
    return base


@pytest.fixture
def folder(trained: Path, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the trained run in ``tmp_path/run``, the test running in ``tmp_path``."""
    shutil.copy(trained / "tiny.lbdl", tmp_path / "tiny.lbdl")
    shutil.copytree(trained / "run", tmp_path / "run")
    (tmp_path / "run" / ".lock").unlink(missing_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "run"


def resume(capsys, *more: str, steps: int = 6) -> tuple[int, str, str]:
    rc = main(["train", "tiny.lbdl", *FLAGS, "--steps", str(steps), "-o", "run", "--resume", *more])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def lbdl(cwd: Path, *argv: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "lbdl_dsl", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180, **kw,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


# -- item 2: a damaged run folder ----------------------------------------------------------------


def test_a_cut_last_metrics_line_is_dropped_with_a_note(folder: Path) -> None:
    metrics = folder / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes()[:-20])  # what a power cut leaves
    done = lbdl(
        folder.parent, "train", "tiny.lbdl", *FLAGS, "--steps", "6", "-o", "run", "--resume"
    )
    assert done.returncode == 0, done.stderr
    assert "run/metrics.jsonl: its last line is not a whole record and was dropped" in done.stdout
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [2, 4, 6]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[1, 2]", "a JSON list, not an object"),
        ('{"config": 5}', "no `config` object"),
        ("{", "Expecting property name"),
        ('{"config": {}, "spec_hash": "x", "step": 0}', "its config does not hold"),
        ('{"config": {"spec": "s", "data": "d", "output_dir": "o", "steps": 1}, '
         '"spec_hash": "x", "step": -3}', "`step` is -3"),
    ],
)  # fmt: skip
def test_a_run_json_of_the_wrong_shape_is_refused(folder: Path, capsys, text, problem) -> None:
    (folder / "run.json").write_text(text)
    rc, _, err = resume(capsys)
    assert rc == 1
    assert f"run/run.json: damaged ({problem}" in err
    assert "train into a new -o folder" in err


def test_damaged_checkpoint_metadata_falls_back_to_the_one_before(folder: Path, capsys) -> None:
    (folder / "checkpoints/4/meta/metadata").write_text("garbage")
    rc, out, _ = resume(capsys)
    assert rc == 0
    assert "checkpoints/4 is damaged (its record cannot be read" in out
    assert "resuming from the checkpoint of step 2" in out
    assert (folder / "damaged/4/meta/metadata").read_text() == "garbage"  # kept, not deleted
    assert sorted(os.listdir(folder / "checkpoints")) == ["2", "4", "6"]


def test_checkpoint_data_cut_short_falls_back_from_the_command_line(folder: Path) -> None:
    for f in (folder / "checkpoints/4/state/d").iterdir():
        f.write_bytes(f.read_bytes()[:50])
    done = lbdl(
        folder.parent, "train", "tiny.lbdl", *FLAGS, "--steps", "6", "-o", "run", "--resume"
    )
    assert done.returncode == 0, done.stderr
    assert "checkpoints/4 is damaged (its arrays cannot be read" in done.stdout
    assert "resuming from the checkpoint of step 2" in done.stdout


def test_an_empty_numbered_folder_is_set_aside(folder: Path, capsys) -> None:
    (folder / "checkpoints/9").mkdir()  # before: exit 1 "past the 6 steps", then exit 3
    rc, out, _ = resume(capsys)
    assert rc == 0
    assert "checkpoints/9 is damaged" in out
    assert "resuming from the checkpoint of step 4" in out
    assert (folder / "damaged/9").is_dir()


def test_arrays_that_are_not_the_ones_recorded_are_found(folder: Path, capsys) -> None:
    # step 4's record over step 2's arrays: orbax reads them without a complaint
    shutil.rmtree(folder / "checkpoints/4/state")
    shutil.copytree(folder / "checkpoints/2/state", folder / "checkpoints/4/state")
    rc, out, _ = resume(capsys)
    assert rc == 0
    assert "checkpoints/4 is damaged (" in out and "arrays differ from what was saved" in out
    assert "resuming from the checkpoint of step 2" in out


def test_no_readable_checkpoint_is_an_error_naming_each(folder: Path, capsys) -> None:
    for step in (2, 4):
        (folder / f"checkpoints/{step}/meta/metadata").write_text("{")
    rc, _, err = resume(capsys)
    assert rc == 1
    assert "run: no checkpoint there can be read:\n  step 4: its record cannot be read" in err
    assert "\n  step 2: its record cannot be read" in err
    assert sorted(os.listdir(folder / "checkpoints")) == ["2", "4"]  # left as they are


# -- item 3: nothing mixed -----------------------------------------------------------------------


def test_checkpoints_without_run_json_are_refused_from_the_command_line(folder: Path) -> None:
    (folder / "run.json").unlink()
    before = sorted(p.name for p in (folder / "checkpoints").iterdir())
    done = lbdl(folder.parent, "train", "tiny.lbdl", *FLAGS, "--steps", "6", "--seed", "1",
                "-o", "run")  # fmt: skip
    assert done.returncode == 1
    assert "run holds a run's files (checkpoints/, metrics.jsonl) but no run.json" in done.stderr
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == before


def test_a_run_json_whose_checkpoints_are_gone_is_refused(folder: Path, capsys) -> None:
    shutil.rmtree(folder / "checkpoints")
    rc, _, err = resume(capsys)
    assert rc == 1
    assert "run: run.json records 4 steps, but checkpoints/ holds no checkpoint" in err


def test_a_file_named_checkpoints_keeps_the_metrics(folder: Path, capsys) -> None:
    shutil.rmtree(folder / "checkpoints")
    (folder / "checkpoints").write_text("mine")
    metrics = (folder / "metrics.jsonl").read_bytes()
    rc, _, err = resume(capsys)
    assert rc == 1
    assert "run/checkpoints: not a folder" in err
    assert (folder / "metrics.jsonl").read_bytes() == metrics


def test_two_trainings_cannot_write_one_folder(folder: Path, capsys) -> None:
    """The lock is the open file's (flock), so a second claim conflicts even in one process."""
    with rundir.claimed(folder):
        rc, _, err = resume(capsys)
    assert rc == 1
    assert f"run: another training is writing this run folder (process {os.getpid()})" in err
    with rundir.claimed(folder):  # and the lock is free again once the holder is done
        pass


def test_a_claim_leaves_no_folder_behind_when_nothing_was_written(tmp_path: Path) -> None:
    with pytest.raises(LbdlError), rundir.claimed(tmp_path / "new"):
        raise LbdlError("the data is bad")
    assert not (tmp_path / "new").exists()


def test_a_save_never_skips_another_runs_checkpoint(folder: Path) -> None:
    from lbdl_dsl.training.checkpoint import Checkpoints

    ckpts = Checkpoints(folder, 3, run_id="someone-else")
    try:
        with pytest.raises(LbdlError, match="a checkpoint of another run is already there"):
            ckpts._check_own(4)
    finally:
        ckpts.close()


def test_a_checkpoint_of_another_run_is_not_restored(folder: Path, capsys) -> None:
    record = json.loads((folder / "run.json").read_text())
    record["run_id"] = "0123456789abcdef"
    (folder / "run.json").write_text(json.dumps(record))
    rc, _, err = resume(capsys)
    assert rc == 1
    assert "checkpoints/4: a checkpoint of another run" in err


# -- item 4: a checkpoint every few minutes ------------------------------------------------------


def test_save_minutes_is_on_by_default_and_resumable() -> None:
    config = TrainConfig(spec="s", data="d", output_dir="o", steps=1)
    assert config.save_minutes == 5.0
    later = TrainConfig(spec="s", data="d", output_dir="o", steps=9, save_minutes=1.0)
    assert later.differences(config) == []


def test_resume_without_a_checkpoint_says_it_starts_anew(tmp_path: Path) -> None:
    (tmp_path / "tiny.lbdl").write_text(TINY_MLP, "utf-8")
    done = lbdl(tmp_path, "train", "tiny.lbdl", "--data", "synthetic", "--steps", "2", "-o",
                "run", "--resume")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "run: no checkpoint found: starting a new run" in done.stdout


@pytest.mark.full  # 25 s on two loaded cores; the small case is the default's test above
def test_a_killed_run_resumes_from_its_timed_checkpoint(tmp_path: Path) -> None:
    """SIGKILL mid-run: the checkpoints saved by wall time are there to resume from."""
    (tmp_path / "tiny.lbdl").write_text(TINY_MLP, "utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "lbdl_dsl", "train", "tiny.lbdl", "--data", "synthetic",
            "--steps", "1000000", "--log-every", "50", "--save-minutes", "0.002",
            "-o", "run"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("train step") and rundir.saved_steps(tmp_path / "run"):
                break
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    saved = rundir.saved_steps(tmp_path / "run")
    assert saved and saved[-1] > 0
    done = lbdl(tmp_path, *argv[3:-1], "run", "--resume", "--steps", str(saved[-1] + 2))
    assert done.returncode == 0, done.stderr
    assert "resuming from the checkpoint of step" in done.stdout


# -- item 5: the checkpoint layer's failures ------------------------------------------------------


def test_a_failed_save_is_one_message_naming_the_folder(tmp_path: Path) -> None:
    """Every file past 1,500 bytes fails to grow (EFBIG, as a full disk's ENOSPC): the
    checkpoint's data does, through orbax and tensorstore's own threads."""
    (tmp_path / "tiny.lbdl").write_text(TINY_MLP, "utf-8")
    argv = ["train", "tiny.lbdl", *FLAGS, "--steps", "4", "-o", "run"]
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500)); "
        f"from lbdl_dsl.cli import main; sys.exit(main({argv!r}))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 1
    assert f"error: cannot save the checkpoint of step 2 in {tmp_path}/run/checkpoints: " in (
        done.stderr
    )
    assert "RuntimeError" not in done.stderr and "ERROR:absl" not in done.stderr


def test_a_full_disk_names_the_folder(folder: Path, monkeypatch, capsys) -> None:
    import orbax.checkpoint as ocp

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # a failed save keeps
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # them quiet: put back after
    rc, _, err = resume(capsys)
    for name in ("absl", "asyncio", "orbax"):
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if type(f).__name__ == "_Quiet"]:
            logger.removeFilter(f)
    assert rc == 1
    assert f"error: no space left on the device of {folder.absolute()}/checkpoints: " in err
    assert "free some space and continue with --resume" in err


def test_a_second_ctrl_c_during_a_save_waits_for_it() -> None:
    stop = _StopRequest()
    stop._handler(2, None)
    assert stop.requested
    with pytest.raises(KeyboardInterrupt), stop.saving_checkpoint():
        stop._handler(2, None)  # not raised here, in the middle of the save
        finished = True
    assert finished
    with pytest.raises(KeyboardInterrupt):  # outside a save: at once
        stop._handler(2, None)
