"""The run folder: what it holds, and whether a new command may write into it.

``run.json`` is the run's identity, written when it starts: the config, the hash of the spec's
text (with the files it imports), the ``--set`` values, the task, the data's facts (a text
model's vocabulary among them) and the versions of what computed it. A folder that already holds
a run is never overwritten: without ``--resume`` the command is refused, and with it the new
command must describe the same run (same spec text, same values; only how long it goes and how
it reports may change).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any

from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.output import write_atomic
from lbdl_dsl.training.config import TrainConfig

RUN_FILE = "run.json"
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


def read_record(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise LbdlError(
            f"{path}: unreadable ({exc})",
            None,
            hint="this folder's run record is damaged: train into a new -o folder",
        ) from None


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    write_atomic(run_dir / RUN_FILE, json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def check_claim(run_dir: Path, config: TrainConfig, digest: str) -> dict[str, Any] | None:
    """Refuse to start in a folder that holds another run; return the old record when resuming
    the same run (None for a fresh start)."""
    old = read_record(run_dir)
    if old is None:
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
            hint="only --steps or --epochs, --eval-every, --eval-samples, --save-every, --keep "
            "and --log-every may change; train into another folder with -o for anything else",
        )
    return old
