"""Everything that varies from one training run to another, as one frozen record.

`TrainConfig` is what ``lbdl train``'s flags and `lbdl_dsl.train`'s keywords become. It is
written into the run folder (``run.json``) and into every checkpoint, so a run can be reproduced,
or continued, from its folder alone. Validation happens here, once, with messages that name the
flag; later modules trust the values. Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lbdl_dsl.core.errors import ArgumentError, LbdlError

OPTIMIZERS = ("adamw", "adam", "sgd", "momentum", "lion", "rmsprop", "adafactor")
SCHEDULES = ("constant", "cosine", "linear")
TASKS = ("auto", "classify", "next-token", "mse", "reconstruct")
DTYPES = ("float32", "bfloat16")
MAX_SEED = 2**63 - 1  # what a JAX key and NumPy's generators both take
MAX_STEPS = 2**31 - 1  # the step counter of the training state is an int32

# Fields that may change when a run is resumed: how long it goes on and how it reports, never
# what it computes. Everything else must match the checkpoint's, or resuming is refused. The spec
# is compared by the hash of its text (`rundir.spec_hash`), not by its path.
RESUMABLE_CHANGES = frozenset(
    {
        "spec",
        "steps",
        "epochs",
        "eval_every",
        "save_every",
        "save_minutes",
        "keep",
        "log_every",
        "output_dir",
        "resume",
        "mesh",  # a checkpoint restores onto any mesh (docs/scaling.md)
        "unroll",  # the same function and parameters, lowered without the scan
        "shard",
    }
)


@dataclass(frozen=True)
class TrainConfig:
    """One run: the spec and its ``--set`` values, the data, the optimiser, and the schedule."""

    spec: str
    data: str
    output_dir: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    task: str = "auto"
    target: str | None = None  # the spec output the loss reads; None: the only (or token) one
    steps: int | None = None
    epochs: float | None = None
    batch: int = 32
    optimizer: str = "adamw"
    lr: float = 1e-3
    schedule: str = "constant"
    warmup: int = 0
    clip: float | None = None
    weight_decay: float | None = None  # None: the optimiser's own default (adamw: 1e-4)
    eval_every: int | None = None
    eval_samples: int | None = None  # None: the whole evaluation split
    save_every: int | None = None
    save_minutes: float | None = 5.0  # also a checkpoint every so many minutes (None or 0: not)
    keep: int = 3
    log_every: int = 10
    seed: int = 0
    dtype: str = "float32"
    unroll: bool = False  # ×N groups as straight-line code (faster steps on a GPU)
    resume: bool = False
    mesh: str | None = None  # a device mesh, data=2,fsdp=2 (None: one device)
    shard: tuple[str, ...] = ()  # --shard's presets and rules (default dp)

    def __post_init__(self) -> None:
        for problem in _type_problems(self):  # the Python API's keywords, before any comparison
            raise ArgumentError(problem)
        object.__setattr__(self, "shard", tuple(self.shard))  # JSON gives a list
        for message, hint in _problems(self):
            raise LbdlError(message, None, hint=hint)
        if self.mesh is not None:
            from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules

            parse_rules(list(self.shard), parse_mesh(self.mesh))  # names the flag if bad

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready values (overrides as a plain, sorted dictionary)."""
        out = dataclasses.asdict(self)
        out["overrides"] = {k: self.overrides[k] for k in sorted(self.overrides)}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def differences(self, other: TrainConfig) -> list[str]:
        """What differs from ``other`` in the fields a resumed run may not change."""
        lines = []
        mine, theirs = self.to_json(), other.to_json()
        for name in mine:
            if name not in RESUMABLE_CHANGES and mine[name] != theirs[name]:
                lines.append(f"{_flag(name)}: {_show(theirs[name])} then, {_show(mine[name])} now")
        return lines


_KINDS = {"int": (int,), "float": (int, float), "str": (str,)}


def _type_problems(c: TrainConfig) -> list[str]:
    """Each field whose value is not of its annotated kind (``int | None``, ``float``, ...)."""
    out = []
    for f in dataclasses.fields(c):
        value, kinds = getattr(c, f.name), str(f.type).replace(" ", "").split("|")
        if value is None and "None" in kinds:
            continue
        allowed = tuple(t for k in kinds for t in _KINDS.get(k, ()))
        if f.name == "overrides":
            ok = isinstance(value, Mapping)
        elif f.name == "shard":
            ok = isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value)
        elif not allowed:  # bool fields
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, allowed) and not isinstance(value, bool)
        if not ok:
            out.append(f"{_flag(f.name)}: {value!r} is not {_KIND_WORDS.get(kinds[0], kinds[0])}")
    return out


_KIND_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "str": "text",
    "bool": "True or False",
    "Mapping[str,Any]": "a dictionary of --set values",
    "tuple[str,...]": "a list of texts",
}


def _flag(name: str) -> str:
    return {"overrides": "--set", "spec": "the spec path"}.get(name, "--" + name.replace("_", "-"))


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    return "(none)" if value is None else str(value)


FLOAT32_MAX = 3.4028234663852886e38  # the learning rate and its kin are float32 in the step


def _positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and 0 < value <= FLOAT32_MAX


def _problems(c: TrainConfig) -> list[tuple[str, str]]:
    """Each invalid value as (message naming the flag, hint); the first is raised."""
    out: list[tuple[str, str]] = []

    def choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            out.append((f"{flag}: unknown value `{value}`", "choose from " + ", ".join(allowed)))

    choice("--optimizer", c.optimizer, OPTIMIZERS)
    choice("--schedule", c.schedule, SCHEDULES)
    choice("--task", c.task, TASKS)
    choice("--dtype", c.dtype, DTYPES)
    if c.steps is not None and c.epochs is not None:
        out.append(("--steps and --epochs both given", "give one: how long the run is"))
    if c.steps is None and c.epochs is None:
        out.append(("give --steps N or --epochs E", "how long to train, in steps or epochs"))
    if c.steps is not None and (not isinstance(c.steps, int) or not 1 <= c.steps <= MAX_STEPS):
        out.append(
            (f"--steps must be a whole number from 1 to 2^31−1, got {c.steps}", "e.g. --steps 500")
        )
    if c.epochs is not None and not _positive(c.epochs):
        out.append((f"--epochs must be > 0, got {c.epochs}", "e.g. --epochs 10 (or 0.5)"))
    if not isinstance(c.batch, int) or c.batch < 1:
        out.append((f"--batch must be a whole number ≥ 1, got {c.batch}", "e.g. --batch 64"))
    if c.shard and c.mesh is None:
        out.append(("--shard: needs a mesh", "give one with --mesh data=2,fsdp=2"))
    return out + _number_problems(c)


def _number_problems(c: TrainConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not _positive(c.lr):
        past = math.isfinite(c.lr) and c.lr > FLOAT32_MAX
        limit = " and at most 3.4e38 (a float32)" if past else ""
        out.append((f"--lr must be a number > 0{limit}, got {c.lr}", "e.g. --lr 1e-3"))
    if c.warmup < 0:
        out.append((f"--warmup must be ≥ 0 steps, got {c.warmup}", "e.g. --warmup 100"))
    if c.clip is not None and not _positive(c.clip):
        out.append((f"--clip must be a norm > 0, got {c.clip}", "e.g. --clip 1.0"))
    if c.weight_decay is not None and not (0 <= c.weight_decay <= FLOAT32_MAX):
        out.append((f"--weight-decay must be ≥ 0, got {c.weight_decay}", "e.g. 0.01"))
    every = (("--eval-every", c.eval_every), ("--save-every", c.save_every))
    for flag, value in (*every, ("--eval-samples", c.eval_samples)):
        if value is not None and value < 1:
            out.append((f"{flag} must be ≥ 1, got {value}", "or leave it out"))
    if c.save_minutes is not None and not (math.isfinite(c.save_minutes) and c.save_minutes >= 0):
        out.append((f"--save-minutes must be ≥ 0, got {c.save_minutes}", "e.g. 5, or 0 for none"))
    if not isinstance(c.seed, int) or not 0 <= c.seed <= MAX_SEED:
        out.append((f"--seed must be a whole number from 0 to 2^63−1, got {c.seed}", "e.g. 0"))
    if c.keep < 1:
        out.append((f"--keep must be ≥ 1 checkpoint, got {c.keep}", "e.g. --keep 3"))
    if c.log_every < 1:
        out.append((f"--log-every must be ≥ 1 step, got {c.log_every}", "e.g. --log-every 10"))
    return out
