"""Fuzz the compiler: every input must compile or be refused with our error, never crash or hang.

A spec is untrusted text, so the promise of ``lbdl-compile --check`` is total: exit 0, or exit 1
with ``FILE:LINE:COL: error: ...`` pointing inside the file, in bounded time. This harness tests
that promise on inputs nobody would write by hand, through the very code path of the CLI
(`lbdl_dsl.cli.compat.main` on a file in a scratch copy of ``specs/``, so that imports still
resolve):

- *mutate*: each spec of ``specs/`` (block libraries included) with 1-4 random edits: lines
  deleted, duplicated, swapped, re-indented or spliced from another spec; tokens deleted,
  duplicated, swapped or replaced; numbers turned into 0, -1 or something huge; random bytes or
  awkward unicode inserted; the file truncated;
- *generate*: a small random model drawn from the layer registry, with random (valid and
  invalid) hyper-parameters, annotations, groups, named tensors and blocks, which reaches the
  shape rules that mutations of the shipped specs rarely do;
- *tokens*: random sequences of the grammar's terminals.

Case ``i`` of seed ``S`` depends only on ``(S, i)``, so ``--start i --cases 1 --save DIR``
reproduces any case. ``--jobs J`` runs J shards as subprocesses (a hang in C code cannot stop
the others) and merges their counts. Run: ``python bench/fuzz.py --cases 100000 --jobs 2``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not part of the package; run from anywhere
    sys.path.insert(0, str(ROOT))

from lbdl_dsl.cli import compat as cli  # noqa: E402
from lbdl_dsl.core.layers import LAYERS, all_names  # noqa: E402

KINDS = (
    ("mutate", 0.5),
    ("generate", 0.24),
    ("tokens", 0.1),
    ("set", 0.08),
    ("api", 0.04),
    ("files", 0.04),
)
HEADER = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<kind>error|note): \S")


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` can swallow it."""


# -- cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    """One input: the files written over the scratch copy of specs/, and the one compiled."""

    index: int
    kind: str
    entry: str
    files: dict[str, bytes]
    what: str
    argv: tuple[str, ...] = ()  # flags after the spec (`set`, `files`)
    setup: str = ""  # a file-system condition made before the run (`files`)
    call: tuple = ()  # the API call's arguments (`api`), as (spec, text, overrides)


def load_corpus(root: Path = ROOT / "specs") -> dict[str, bytes]:
    """Every spec and block library, by path relative to ``specs/``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.lbdl"))}


def make_case(seed: int, index: int, corpus: dict[str, bytes]) -> Case:
    """Case ``index`` of ``seed``: the same pair always gives the same bytes."""
    rng = random.Random(f"{seed}:{index}")
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    if kind == "mutate":
        return _mutate_case(rng, index, corpus)
    if kind == "generate":
        return Case(index, kind, "fuzz_gen.lbdl", {"fuzz_gen.lbdl": generate_spec(rng)}, "")
    if kind == "set":
        return _set_case(rng, index, corpus)
    if kind == "api":
        return _api_case(rng, index, corpus)
    if kind == "files":
        return _files_case(rng, index)
    return Case(index, kind, "fuzz_tok.lbdl", {"fuzz_tok.lbdl": token_soup(rng)}, "")


# -- flags, the Python API and the file system -----------------------------------------------

_NAME = re.compile(rb"\b([A-Za-z_]\w*)\s*=")
ODD_VALUES = (
    "abc", "1.5", "nan", "inf", "-inf", "1e400", "0", "-1", "-0", "2", "7", "64",
    "9223372036854775808", "1" * 50, "", " ", "0x10", "1_000", "true", "False", "×", "\x1b[2J",
    "a\u202eb", "3/2", "N", "(1, 2)", "None", "'8'",
)  # fmt: skip


def _set_case(rng: random.Random, index: int, corpus: dict[str, bytes]) -> Case:
    """A shipped spec with ``--set`` values that are right, wrong, odd or for no parameter."""
    entry = rng.choice(sorted(p for p in corpus if "/" not in p))
    header = corpus[entry].split(b"model ", 1)[-1].split(b"\n", 1)[0]
    names = sorted({m.decode() for m in _NAME.findall(header)} | {"T", "N", "Q", "x y", "1N"})
    values = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        key = rng.choice(names)
        value = rng.choice(ODD_VALUES) if rng.random() < 0.8 else str(rng.randint(1, 300))
        values.append(f"{key}={value}" if rng.random() < 0.95 else key)
    return Case(index, "set", entry, {}, " ".join(values), ("--set", *values))


def _api_case(rng: random.Random, index: int, corpus: dict[str, bytes]) -> Case:
    """`lbdl_dsl.check` with arguments of the right and wrong kinds."""
    entry = rng.choice(sorted(p for p in corpus if "/" not in p))
    spec = rng.choice(
        [entry, entry.removesuffix(".lbdl"), "missing.lbdl", "", None, 42, b"x.lbdl", "blocks",
         "model m:\n  input X: 3\n", ["mlp.lbdl"]]
    )  # fmt: skip
    text = rng.choice([None, None, None, corpus[entry].decode("utf-8", "replace"), b"\xff\xfe", 3])
    overrides = {}
    if rng.random() < 0.5:
        key = rng.choice(["N", "D", "T", "zzz", "not a name", "_"])
        overrides[key] = rng.choice([8, 0, -3, 1.5, float("nan"), True, None, "12", [1], 2**70])
    what = f"check({spec!r}, text={'…' if isinstance(text, str) else text!r}, **{overrides!r})"
    return Case(index, "api", entry, {}, what[:200], call=(spec, text, overrides))


FILE_CONDITIONS = (
    "directory", "fifo", "loop", "outside", "dangling", "empty", "out-is-file",
    "out-in-file", "out-is-dir",
)  # fmt: skip


def _files_case(rng: random.Random, index: int) -> Case:
    """A file-system condition in the way of the spec or of the outputs."""
    setup = rng.choice(FILE_CONDITIONS)
    if setup.startswith("out-"):
        return Case(index, "files", "mlp.lbdl", {}, setup, ("--emit", "json"), setup)
    return Case(index, "files", "fuzz_fs.lbdl", {}, setup, ("--check",), setup)


def _make_condition(case: Case, work: Path) -> list[Path]:
    """Create the case's condition in ``work``; returns what to remove afterwards."""
    target = work / case.entry
    made = [target]
    if case.setup == "directory":
        target.mkdir()
    elif case.setup == "fifo":
        os.mkfifo(target)
    elif case.setup == "loop":
        other = work / "fuzz_fs2.lbdl"
        target.symlink_to(other)
        other.symlink_to(target)
        made.append(other)
    elif case.setup == "outside":
        target.symlink_to("/etc/hostname" if os.path.exists("/etc/hostname") else "/dev/null")
    elif case.setup == "dangling":
        target.symlink_to(work / "nowhere.lbdl")
    elif case.setup == "empty":
        target.write_bytes(b"")
    else:
        out = work / "fuzz_out"
        made = [out]
        if case.setup == "out-is-file":
            out.write_text("the user's file", "utf-8")
        elif case.setup == "out-in-file":
            out.write_text("the user's file", "utf-8")
            out = out / "sub"
        else:  # a folder where the output file goes
            (out / "mlp.json").mkdir(parents=True)
        return made + [Path(str(out))]
    return made


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _run_api(case: Case) -> Outcome:
    import lbdl_dsl

    spec, text, overrides = case.call
    try:
        lbdl_dsl.check(spec, text=text, **overrides)
    except lbdl_dsl.LbdlError as err:
        shown = str(err)
        if not (HEADER.match(shown) or shown.startswith("error: ")) or "Traceback" in shown:
            return Outcome("crash", 0.0, f"a malformed message: {shown[:500]}")
        return Outcome("error", 0.0)
    return Outcome("ok", 0.0)


def _mutate_case(rng: random.Random, index: int, corpus: dict[str, bytes]) -> Case:
    target = rng.choice(sorted(corpus))
    data, edits = corpus[target], []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        op = rng.choice(MUTATIONS)
        data = op(rng, data, corpus)
        edits.append(op.__name__.lstrip("_"))
    entry = target
    if "/" in target:  # a library: compile a spec that imports it, when one does
        users = [p for p, d in corpus.items() if Path(target).name.encode() in d and p != target]
        entry = rng.choice(sorted(users)) if users and rng.random() < 0.7 else target
    return Case(index, "mutate", entry, {target: data}, f"{target}: {', '.join(edits)}")


# -- mutations: each takes and returns the bytes of one file -----------------------------------

_TOKEN = re.compile(r"\s+|[^\W\d][\w-]*|\d[\d_]*(?:\.\d+)?|->|\*\*|<=|>=|==|\S", re.UNICODE)
NUMBERS = (
    "0",
    "-1",
    "1",
    "2",
    "7",
    "1_000_000_000",
    "4294967296",
    "9223372036854775808",
    "340282366920938463463374607431768211456",
    "1e400",
    "0.5",
    "2^62",
    "(0)",
    "1/0",
)
ODD_TEXT = (
    "×",
    "x",
    "→",
    "−",
    "÷",
    "·",
    "**",
    "Ŷ",
    "\u0301",
    "\u2028",
    "\x85",
    "\x0c",
    "\x0b",
    "\ufeff",
    "\u200b",
    "漢",
    "🙂",
    "\U0010ffff",
    "\t",
    "\r",
    "\r\n",
    "\\",
    '"',
    "#",
    ":",
    "(",
    ")",
    ",",
    "=",
    "->",
    "<",
    "  ",
    "\n",
    "\n    ",
    "ﬁ",
    "Ａ",
    "١",
)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _lines_op(data: bytes, fn) -> bytes:
    lines = _text(data).split("\n")
    return _bytes("\n".join(fn(lines)))


def _delete_line(rng, data, corpus):
    return _lines_op(data, lambda ls: ls[: (i := rng.randrange(len(ls)))] + ls[i + 1 :])


def _duplicate_line(rng, data, corpus):
    return _lines_op(data, lambda ls: ls[: (i := rng.randrange(len(ls)))] + [ls[i]] + ls[i:])


def _swap_lines(rng, data, corpus):
    def swap(ls):
        i, j = rng.randrange(len(ls)), rng.randrange(len(ls))
        ls[i], ls[j] = ls[j], ls[i]
        return ls

    return _lines_op(data, swap)


def _reindent_line(rng, data, corpus):
    def reindent(ls):
        i = rng.randrange(len(ls))
        ls[i] = " " * rng.choice((0, 1, 2, 3, 4, 6, 8, 40)) + ls[i].lstrip(" ")
        return ls

    return _lines_op(data, reindent)


def _splice_line(rng, data, corpus):
    donor = _text(corpus[rng.choice(sorted(corpus))]).split("\n")
    line = rng.choice(donor)
    return _lines_op(data, lambda ls: ls[: (i := rng.randrange(len(ls) + 1))] + [line] + ls[i:])


def _tokens_op(data: bytes, fn) -> bytes:
    toks = _TOKEN.findall(_text(data))
    return _bytes("".join(fn(toks) if toks else toks))


def _delete_token(rng, data, corpus):
    return _tokens_op(data, lambda ts: ts[: (i := rng.randrange(len(ts)))] + ts[i + 1 :])


def _duplicate_token(rng, data, corpus):
    return _tokens_op(data, lambda ts: ts[: (i := rng.randrange(len(ts)))] + [ts[i]] + ts[i:])


def _swap_tokens(rng, data, corpus):
    def swap(ts):
        i, j = rng.randrange(len(ts)), rng.randrange(len(ts))
        ts[i], ts[j] = ts[j], ts[i]
        return ts

    return _tokens_op(data, swap)


def _replace_token(rng, data, corpus):
    def replace(ts):
        ts[rng.randrange(len(ts))] = rng.choice(TERMINALS)
        return ts

    return _tokens_op(data, replace)


def _change_number(rng, data, corpus):
    def change(ts):
        spots = [i for i, t in enumerate(ts) if t[0].isdigit()]
        if spots:
            ts[rng.choice(spots)] = rng.choice(NUMBERS)
        return ts

    return _tokens_op(data, change)


def _insert_text(rng, data, corpus):
    text = _text(data)
    i = rng.randrange(len(text) + 1)
    return _bytes(text[:i] + rng.choice(ODD_TEXT) + text[i:])


def _insert_bytes(rng, data, corpus):
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.randbytes(rng.randint(1, 6)) + data[i:]


def _truncate(rng, data, corpus):
    return data[: rng.randrange(len(data) + 1)]


MUTATIONS = (
    _delete_line, _duplicate_line, _swap_lines, _reindent_line, _splice_line,
    _delete_token, _duplicate_token, _swap_tokens, _replace_token, _replace_token,
    _change_number, _change_number, _change_number, _insert_text, _insert_bytes, _truncate,
)  # fmt: skip


# -- generated specs --------------------------------------------------------------------------

TERMINALS = (
    "model", "block", "on", "input", "output", "from", "import", "residual", "shortcut",
    "assert", "params", "macs", "state", "int", "float", "bool", "true", "false", "same",
    "X", "C", "H", "W", "D", "T", "S", "N", "Ŷ", "x1", "skip", "×", "x", "->", "→", ":", "(",
    ")", ",", "=", "+", "-", "*", "/", "^", "<", "<=", "==", ">", "0", "1", "3", "64", "4C",
    "2.5", "1e3", '"blocks/resnet.lbdl"', '"a.lbdl"', "#", "\n", "\n  ", "\n    ", " ",
    "leaky relu", *sorted(LAYERS), *all_names()[:40],
)  # fmt: skip


def token_soup(rng: random.Random) -> bytes:
    """A random sequence of terminals, usually starting like a spec so the parser goes deep."""
    head = rng.choice(("", "model m:\n  input X: 3×8×8\n  ", "block b on C:\n  ", "model m:\n"))
    body = " ".join(rng.choice(TERMINALS) for _ in range(rng.randint(0, 40)))
    return _bytes(head + body + rng.choice(("", "\n")))


BAD = 0.03  # the chance of a deliberately invalid value where a valid one would be drawn


def _size(rng: random.Random, symbols: list[str]) -> str:
    """Mostly a plausible size, sometimes one that must be refused (0, -1, huge, x/0, 7/2)."""
    if rng.random() < BAD:
        zero = f"{symbols[0]}/0" if symbols else "1/0"
        return rng.choice(("0", "-1", "1000000000000", "4294967296", zero, "7/2"))
    options = ["1", "2", "3", "4", "8", "16"]
    if symbols:
        s = rng.choice(symbols)
        options += [s, s, f"{s}/2", f"2{s}", f"{s}-1"]
    return rng.choice(options)


def _value(rng: random.Random, hp, symbols: list[str]) -> str:
    """A value for ``hp``: of its kind (so that the checker is reached), rarely of another."""
    if rng.random() < BAD:
        return rng.choice(("x", '"s"', "(1, 2)", "1.5", "maybe", "-7", "0"))
    kind = hp.kind
    if kind in ("size", "sizes", "padding", "axes", "shape"):
        one = _size(rng, symbols)
        if kind != "size" and rng.random() < 0.2:
            return f"({one}, {_size(rng, symbols)})"
        return "same" if kind == "padding" and rng.random() < 0.2 else one
    if kind == "bool":
        return rng.choice(("true", "false"))
    if kind == "float":
        return rng.choice(("0.1", "0", "1e-5", "0.5", "2"))
    if kind == "choice" and hp.choices:
        return rng.choice(hp.choices)
    if kind == "axis":
        return rng.choice(("-1", "0", "1", "2"))
    return rng.choice(("3", "1"))


def _box(rng: random.Random, symbols: list[str], names: list[str], blocks: dict) -> str:
    """One box: a layer (or a block: name → inputs) with hyper-parameters, annotation, name."""
    ops = [n for n, lay in LAYERS.items() if lay.arity[0] == 1 or names] + list(blocks) * 4
    op = rng.choice(ops) if rng.random() > BAD / 4 else "nosuch"
    layer = LAYERS.get(op)
    parts = [op]
    if layer is not None and layer.arity[0] > 1:
        parts[0] += "(" + ", ".join(rng.choice(names) for _ in range(layer.arity[0] - 1)) + ")"
    for hp in layer.hparams if layer is not None else ():
        if (hp.required and rng.random() > BAD) or rng.random() < 0.2:
            parts.append(f"{hp.name}={_value(rng, hp, symbols)}")
    if blocks.get(op, 0) > 1 and names:
        parts[0] += f"({rng.choice(names)})"
    if op in blocks and rng.random() < 0.5:
        parts.append(f"S={rng.choice(('1', '2', '3'))}")
    if rng.random() < 0.25:
        parts.append("×".join(_size(rng, symbols) for _ in range(rng.randint(1, 3))))
    if rng.random() < 0.2:
        names.append(f"t{len(names)}")
        parts.append(f"-> {names[-1]}")
    return " ".join(parts)


def _body(rng: random.Random, depth: int, symbols, names, blocks, indent: str) -> list[str]:
    """A few statements: boxes, `from`, and (to depth 3) ×N and residual groups."""
    lines = []
    for _ in range(rng.randint(1, 5)):
        r, inner = rng.random(), indent + "  "
        if r < 0.1 and depth < 3:
            count = rng.choice(("2", "3", "1", rng.choice(symbols), "0" if r < 0.01 else "2"))
            lines += [f"{indent}×{count}:", *_body(rng, depth + 1, symbols, names, blocks, inner)]
        elif r < 0.2 and depth < 3:
            lines += [f"{indent}residual:", *_body(rng, depth + 1, symbols, names, blocks, inner)]
            if rng.random() < 0.4:
                lines += [f"{indent}shortcut:", *_body(rng, depth + 1, symbols, [], blocks, inner)]
        elif r < 0.25 and names:
            lines.append(f"{indent}from {rng.choice(names)}")
        else:
            lines.append(indent + _box(rng, symbols, names, blocks))
    return lines


def generate_spec(rng: random.Random) -> bytes:
    """A small random model drawn from the registry, with up to two blocks it may call."""
    lines: list[str] = []
    blocks: dict[str, int] = {}  # name → number of inputs
    for b in range(rng.randint(0, 2)):
        pattern = rng.choice(("C×H×W", "C", "T×D", "C×H×H", "X: C×H×W", "X: T×D, Z: S×D"))
        names = ["X"] if "X:" in pattern else []
        symbols = sorted(set(re.findall(r"\b[CHWTDS]\b", pattern)) | {"S"})
        lines.append(f"block blk{b}(S=2) on {pattern}:")
        lines += _body(rng, 1, symbols, names, blocks, "  ")
        blocks[f"blk{b}"] = pattern.count(",") + 1
    dims = rng.choices(("3", "8", "16", "32", "1", "N", "D"), k=rng.randint(1, 4))
    dtype = rng.choice(("", "", "", "", " int<V>", " bool"))
    lines += ["model fuzz(N=8, D=16, V=50):", f"  input X: {'×'.join(dims)}{dtype}"]
    lines += _body(rng, 1, ["N", "D"], ["X"], blocks, "  ")
    if rng.random() < 0.3:
        lines.append(rng.choice(("  output Ŷ", "  assert params < 1000", "  assert X: 3")))
    return _bytes("\n".join(lines) + "\n")


# -- running one case -------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # "ok", "error" (our LbdlError, well formed), "crash" or "timeout"
    seconds: float
    detail: str = ""


def _on_alarm(signum, frame):
    raise CaseTimeout


def run_case(case: Case, work: Path, timeout: float) -> Outcome:
    """Compile the case as `lbdl-compile --check` does, in ``work``; restore the files after."""
    saved = {rel: (work / rel).read_bytes() for rel in case.files if (work / rel).is_file()}
    for rel, data in case.files.items():
        (work / rel).write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    t0 = time.perf_counter()
    made: list[Path] = []
    try:
        if case.kind == "api":
            outcome = _run_api(case)
        else:
            argv = [case.entry, *(case.argv or ("--check",))]
            if case.setup:
                made = _make_condition(case, work)
                if case.setup.startswith("out-"):
                    argv += ["-o", str(made[-1])]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = cli.main(argv)
                except SystemExit as exc:  # a bad flag: argparse's usage and our message
                    rc = exc.code if isinstance(exc.code, int) else 3
            outcome = _classify(rc, err.getvalue(), work, flags=bool(case.argv))
            if case.setup and outcome.status == "crash" and rc == 1:
                # the spec is not a readable text file: the message names it, quoting nothing
                first = err.getvalue().split("\n", 1)[0]
                if "Traceback" not in err.getvalue() and (
                    first.startswith(f"{case.entry}:1:1: error: ") or first.startswith("error: ")
                ):
                    outcome = Outcome("error", 0.0)
    except CaseTimeout:
        outcome = Outcome("timeout", 0.0, f"over {timeout} s")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - anything else escaping the CLI is a crash
        detail = "".join(traceback.format_exception(exc)[-6:])
        outcome = Outcome("crash", 0.0, f"{type(exc).__name__}: {exc}\n{detail}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        _remove(made)
        for rel in case.files:
            (work / rel).unlink(missing_ok=True)
        for rel, data in saved.items():
            (work / rel).write_bytes(data)
    outcome.seconds = time.perf_counter() - t0
    return outcome


def _classify(rc: int, stderr: str, work: Path, flags: bool = False) -> Outcome:
    if rc == 0:
        return Outcome("ok", 0.0)
    if rc != 1:
        return Outcome("crash", 0.0, f"exit {rc}: {stderr[-2000:]}")
    if flags and "Traceback" not in stderr and "hint: " in stderr:
        first = stderr.split("\n", 1)[0]
        if first.startswith(("error: ", "usage: ")):  # a flag's or the system's: no place
            return Outcome("error", 0.0)
    problem = check_message(stderr, work)
    return Outcome("crash", 0.0, f"{problem}\n{stderr[:2000]}") if problem else Outcome("error", 0)


def _as_shown(line: str) -> str:
    """A source line as a message quotes it: tabs as spaces, control characters as pictures."""
    line = line.replace("\t", " ")
    return "".join(
        chr(0x2400 + ord(c)) if ord(c) < 32 else "\u2421" if c == "\x7f" else c for c in line
    )


def check_message(stderr: str, work: Path) -> str | None:
    """Why a rendered error is malformed, or None: a header first, every place inside its file,
    and each quoted source line equal to the line it claims to be."""
    lines = stderr.rstrip("\n").split("\n")
    if "Traceback" in stderr or not HEADER.match(lines[0]):
        return "the message does not start with FILE:LINE:COL: error:"
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if not m:
            continue
        path = work / m["file"]
        if not path.is_file():
            return f"the message names {m['file']!r}, which is not a file of the case"
        text = _text(path.read_bytes()).removeprefix("\ufeff").replace("\r\n", "\n")
        src = text.replace("\r", "\n").split("\n")
        row, col = int(m["line"]), int(m["col"])
        if not (1 <= row <= len(src) and 1 <= col <= len(src[row - 1]) + 1):
            return f"{m['file']}:{row}:{col} is outside the file"
        shown = lines[i + 1] if i + 1 < len(lines) else ""
        real = src[row - 1]
        # a line with invalid UTF-8 is quoted decoded, one with a long line cut: not compared
        if len(real) <= 200 and "\ufffd" not in shown and shown != "  " + _as_shown(real):
            return f"the quoted line is not line {row} of {m['file']}"
    return None


# -- many cases -------------------------------------------------------------------------------


@dataclass
class Summary:
    cases: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    crashes: list[dict] = field(default_factory=list)
    timeouts: list[dict] = field(default_factory=list)
    slowest: dict = field(default_factory=lambda: {"seconds": 0.0})
    seconds: float = 0.0

    def add(self, case: Case, outcome: Outcome) -> None:
        self.cases += 1
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        self.kinds[case.kind] = self.kinds.get(case.kind, 0) + 1
        record = {
            "index": case.index,
            "kind": case.kind,
            "entry": case.entry,
            "what": case.what,
            "seconds": round(outcome.seconds, 4),
            "detail": outcome.detail,
        }
        if outcome.status == "crash":
            self.crashes.append(record)
        elif outcome.status == "timeout":
            self.timeouts.append(record)
        if outcome.seconds > self.slowest["seconds"]:
            self.slowest = record

    def merge(self, other: Summary) -> None:
        self.cases += other.cases
        for mine, theirs in ((self.counts, other.counts), (self.kinds, other.kinds)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        self.crashes += other.crashes
        self.timeouts += other.timeouts
        if other.slowest["seconds"] > self.slowest["seconds"]:
            self.slowest = other.slowest


def fuzz(
    cases: int, seed: int = 0, start: int = 0, timeout: float = 10.0, save: Path | None = None
) -> Summary:
    """Run cases ``start .. start+cases-1`` of ``seed`` in this process."""
    corpus = load_corpus()
    summary = Summary()
    debug = os.environ.get("LBDL_DEBUG")
    os.environ["LBDL_DEBUG"] = "1"  # our bugs raise, with their traceback, instead of exit 3
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lbdl-fuzz-") as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "specs", work, dirs_exist_ok=True)
        here = os.getcwd()
        os.chdir(work)  # messages name files as the CLI run from there would
        try:
            for index in range(start, start + cases):
                case = make_case(seed, index, corpus)
                outcome = run_case(case, work, timeout)
                summary.add(case, outcome)
                if save is not None and outcome.status in ("crash", "timeout"):
                    save_case(case, save)
        finally:
            os.chdir(here)
            if debug is None:
                os.environ.pop("LBDL_DEBUG")
            else:
                os.environ["LBDL_DEBUG"] = debug
    summary.seconds = time.perf_counter() - t0
    return summary


def save_case(case: Case, where: Path) -> None:
    """Write a case's files under ``where/case-INDEX/`` to reproduce it by hand."""
    for rel, data in case.files.items():
        target = where / f"case-{case.index}" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def fuzz_parallel(
    cases: int, seed: int, start: int, jobs: int, timeout: float, save: Path | None
) -> Summary:
    """Split the range into ``jobs`` subprocesses and merge their summaries."""
    per, procs, outs = -(-cases // jobs), [], []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lbdl-fuzz-out-") as tmp:
        for j in range(jobs):
            lo, n = start + j * per, min(per, cases - j * per)
            if n <= 0:
                break
            out = Path(tmp) / f"shard{j}.json"
            cmd = [
                sys.executable,
                __file__,
                "--cases",
                str(n),
                "--seed",
                str(seed),
                "--start",
                str(lo),
                "--timeout",
                str(timeout),
                "--summary-json",
                str(out),
            ]
            if save is not None:
                cmd += ["--save", str(save)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
            outs.append(out)
        total = Summary()
        for proc, out in zip(procs, outs, strict=True):
            proc.wait()
            total.merge(Summary(**json.loads(out.read_text())))
    total.seconds = time.perf_counter() - t0
    return total


def render(summary: Summary, seed: int, jobs: int) -> str:
    """The summary printed at the end of a run (and quoted in docs/reliability.md)."""
    c, rate = summary.counts, summary.cases / max(summary.seconds, 1e-9)
    slow = summary.slowest
    lines = [
        f"fuzz: {summary.cases:,} cases, seed {seed}, {jobs} job(s), {summary.seconds:,.1f} s "
        f"({rate:,.0f} cases/s)",
        f"  compiled {c.get('ok', 0):,}   refused with an error {c.get('error', 0):,}   "
        f"crashes {c.get('crash', 0):,}   timeouts {c.get('timeout', 0):,}",
        "  kinds: " + ", ".join(f"{k} {v:,}" for k, v in sorted(summary.kinds.items())),
        f"  slowest: case {slow.get('index')} ({slow.get('kind')} {slow.get('entry')}"
        f"{': ' + slow['what'] if slow.get('what') else ''}) {slow['seconds']:.3f} s",
    ]
    for rec in (summary.crashes + summary.timeouts)[:20]:
        lines.append(
            f"  FAILED case {rec['index']} ({rec['kind']} {rec['what'] or rec['entry']}):"
            f" {rec['detail'].strip().splitlines()[0] if rec['detail'] else ''}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000, help="how many cases (default 10,000)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--start", type=int, default=0, help="index of the first case (default 0)")
    p.add_argument("--jobs", type=int, default=1, help="parallel shards (default 1)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per case (default 10)")
    p.add_argument("--save", type=Path, help="write crashing and hanging cases here")
    p.add_argument("--summary-json", type=Path, help="also write the summary as JSON here")
    args = p.parse_args(argv)
    if args.jobs > 1:
        summary = fuzz_parallel(
            args.cases, args.seed, args.start, args.jobs, args.timeout, args.save
        )
    else:
        summary = fuzz(args.cases, args.seed, args.start, args.timeout, args.save)
    if args.summary_json:
        args.summary_json.write_text(json.dumps(asdict(summary)))
    print(render(summary, args.seed, args.jobs))
    return 1 if summary.crashes or summary.timeouts else 0


if __name__ == "__main__":
    sys.exit(main())
