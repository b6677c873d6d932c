"""The run folder: what it holds, and whether a new command may write into it.

``run.json`` is the run's identity, written when it starts: the config, the hash of the spec's
text (with the files it imports), the ``--set`` values, the task, the data's facts (a text
model's vocabulary among them) and the versions of what computed it. A folder that already holds
a run is never overwritten: without ``--resume`` the command is refused, and with it the new
command must describe the same run (same spec text, same values; only how long it goes and how
it reports may change).

Nothing is ever mixed. One training at a time holds a folder (`claimed`: a lock the system
releases when the process ends, even by SIGKILL). Checkpoints without the ``run.json`` that says
whose they are, a ``run.json`` whose checkpoints are gone, and a ``checkpoints`` that is not a
folder are refused before anything is written; a ``run.json`` of the wrong shape is refused as
damaged, naming what is wrong. Each run has an id, kept in ``run.json`` and in every checkpoint,
so that a checkpoint is only ever skipped or restored when it is this run's.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import json
import os
import platform
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lbdl_dsl.core.errors import LbdlError, os_error
from lbdl_dsl.output import write_atomic
from lbdl_dsl.training.config import TrainConfig

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
CHECKPOINTS = "checkpoints"
VERSIONED = ("lbdl-dsl", "jax", "jaxlib", "optax", "orbax-checkpoint", "numpy")


def spec_hash(sources: dict[str, str]) -> str:
    """SHA-256 of the spec's text and its imports' (in a fixed order; paths play no part, so a
    moved spec is the same spec)."""
    digest = hashlib.sha256()
    for text in sorted(sources.values()):
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return digest.hexdigest()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[name] = importlib.metadata.version(name)
    return out


def new_run_id() -> str:
    return secrets.token_hex(8)


@contextlib.contextmanager
def claimed(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for one training: a second one is refused while this one runs. The
    folder is made if missing, and removed again if the run leaves nothing in it but the lock."""
    try:
        import fcntl
    except ImportError:  # not on this system: one training a folder is then the user's care
        yield
        return
    made = [d for d in (run_dir, *run_dir.parents) if not d.exists()]  # what mkdir will make
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0))
    except (OSError, RuntimeError) as exc:
        raise os_error(exc, "create the run folder", run_dir) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise os_error(exc, "lock", run_dir / LOCK_FILE) from None
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            raise LbdlError(
                f"{run_dir}: another training is writing this run folder (process {holder})",
                None,
                hint="wait for it to finish, or train into another folder with -o",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
        if made:
            with contextlib.suppress(OSError):
                if [e.name for e in os.scandir(run_dir)] == [LOCK_FILE]:
                    (run_dir / LOCK_FILE).unlink()
                    for folder in made:  # the run folder, then the parents made for it
                        folder.rmdir()


def read_record(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``run.json``, checked for the shape it is written in; None when absent."""
    path = run_dir / RUN_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        record = json.loads(path.read_text("utf-8"))
        problem = _record_problem(record)
    except (OSError, RuntimeError, ValueError) as exc:
        problem = str(exc) or type(exc).__name__
    if problem is not None:
        raise LbdlError(
            f"{path}: damaged ({problem})",
            None,
            hint="this folder's run record cannot be trusted: train into a new -o folder",
        ) from None
    return record  # type: ignore[no-any-return]


def used_record(run_dir: Path) -> dict[str, Any] | None:
    """The ``run.json`` of a run whose parameters are used (``generate``, ``evaluate``,
    ``predict``), or None when the folder has none: a JSON object whose ``config`` is one, its
    ``overrides`` one and its ``data`` one if present; else an error naming the file. Laxer
    than `read_record`, which guards a resume: these verbs read the spec, its ``--set`` values
    and the vocabulary, and nothing of the run is written."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        return None
    problem = None
    try:
        record = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        record, problem = None, str(exc) or type(exc).__name__
    if problem is None:
        if not isinstance(record, dict):
            problem = f"a JSON {type(record).__name__}, not an object"
        elif not isinstance(record.get("config"), dict):
            problem = "no `config` object"
        elif not isinstance(record["config"].get("spec", ""), str):
            problem = "its `config.spec` is not text"
        elif not isinstance(record["config"].get("overrides", {}), dict):
            problem = "its `config.overrides` is not an object"
        elif not isinstance(record.get("data") or {}, dict):
            problem = "its `data` is not an object"
    if problem is not None:
        raise LbdlError(
            f"{path}: damaged ({problem})",
            None,
            hint="give the SPEC with its --set values and the parameters file "
            f"{run_dir / 'params.safetensors'}",
        )
    return record  # type: ignore[no-any-return]


def _record_problem(record: Any) -> str | None:
    """What is wrong with a parsed ``run.json``, or None."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if not isinstance(record.get("config"), dict):
        return "no `config` object"
    if not isinstance(record.get("spec_hash"), str):
        return "no `spec_hash` text"
    step = record.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"`step` is {step!r}, not a whole number ≥ 0"
    if not isinstance(record.get("run_id", ""), str):
        return "`run_id` is not text"
    try:
        TrainConfig.from_json(record["config"])
    except (LbdlError, TypeError, ValueError) as exc:
        first = exc.first.message if isinstance(exc, LbdlError) else str(exc)
        return f"its config does not hold: {first}"
    return None


def saved_steps(run_dir: Path) -> list[int]:
    """The step numbers of the folders in ``checkpoints/`` (orbax names them by step)."""
    folder = run_dir / CHECKPOINTS
    try:
        return sorted(int(e.name) for e in os.scandir(folder) if e.name.isdigit())
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise os_error(exc, "read", folder) from None


def spec_places(run_dir: Path, record: dict[str, Any]) -> list[Path]:
    """Where the run's spec may be, most likely first: its path as given to `lbdl train`, from
    here and from the folder above ``runs/`` (where the run was started, for a path that was
    relative there), then the absolute path recorded when it started."""
    named = record["config"].get("spec")
    places = [Path(named), run_dir.parent.parent / named] if named else []
    kept = record.get("spec_file")
    return places + ([Path(kept)] if isinstance(kept, str) and kept else [])


def run_spec(run_dir: Path, record: dict[str, Any]) -> Path | None:
    """The run's spec where it is found (`spec_places`), or None."""
    return next((p for p in spec_places(run_dir, record) if p.is_file()), None)


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    write_atomic(run_dir / RUN_FILE, json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def check_claim(run_dir: Path, config: TrainConfig, digest: str) -> dict[str, Any] | None:
    """Refuse to start in a folder that holds another run; return the old record when resuming
    the same run (None for a fresh start)."""
    ckpt_dir = run_dir / CHECKPOINTS
    if ckpt_dir.exists() and not ckpt_dir.is_dir():
        raise LbdlError(
            f"{ckpt_dir}: not a folder; the run's checkpoints go there",
            None,
            hint="move that file away, or train into another folder with -o",
        )
    old = read_record(run_dir)
    if old is None:
        leftovers = [f"{CHECKPOINTS}/" for _ in saved_steps(run_dir)[:1]]
        with contextlib.suppress(OSError):
            if (run_dir / "metrics.jsonl").stat().st_size:  # an empty one is nobody's history
                leftovers.append("metrics.jsonl")
        if leftovers:
            raise LbdlError(
                f"{run_dir} holds a run's files ({', '.join(leftovers)}) but no {RUN_FILE} "
                "to say whose they are",
                None,
                hint="train into another folder with -o (lbdl neither mixes runs nor deletes "
                "their files)",
            )
        return None
    then = TrainConfig.from_json(old["config"])
    if not config.resume:
        raise LbdlError(
            f"{run_dir} already holds a run (of {then.spec}, {old.get('step', 0)} steps so far)",
            None,
            hint="continue it with --resume, or train into another folder with -o",
        )
    if old.get("spec_hash") != digest:
        raise LbdlError(
            f"{run_dir}: its checkpoints are of a different spec: {then.spec} (text hash "
            f"{old.get('spec_hash', '?')[:12]}), and {config.spec} is {digest[:12]}",
            None,
            hint="resume with the spec the run started with, or train into another folder with -o",
        )
    differences = config.differences(then)
    if differences:
        raise LbdlError(
            f"{run_dir}: --resume continues the same run, and this command differs from it:\n  "
            + "\n  ".join(differences),
            None,
            hint="only --steps or --epochs, --eval-every, --eval-samples, --save-every, "
            "--save-minutes, --keep and --log-every may change; train into another folder with "
            "-o for anything else",
        )
    if old.get("step", 0) > 0 and not saved_steps(run_dir):
        raise LbdlError(
            f"{run_dir}: {RUN_FILE} records {old['step']} steps, but {CHECKPOINTS}/ holds no "
            "checkpoint to continue from",
            None,
            hint="its checkpoints are gone: train into a new -o folder",
        )
    return old
