"""Every verb, every flag that takes a path or a number, bad values: exit 0 or 1, no traceback
(issue 45's property test).

The verbs and their flags are read from the command line's own parsers (`cli.parser_of`), so a
verb added later is covered without a change here: each option whose value is a number (its
argparse type turns ``"1"`` into a number) is given numbers a careless or hostile user might
type, and every other option or positional that takes one value is given paths that are not
what they seem: a FIFO (nobody writing: reading it would wait forever), a folder, a symlink
loop, a dangling link, an empty file, a file of random bytes, a name that is not UTF-8. Every
other argument the verb needs gets a good value (`GOOD`), so that the bad one is what is tried.

A command runs in this process (`lbdl_dsl.cli.main`) in a scratch folder, with an alarm. A
verb that serves (`LONG_RUNNING`), and a huge number that is a valid request for a long run
(``--steps 2^40``), may still be running at the alarm: that is an answer too. Anything else
must end with exit 0 or 1 and print no traceback and no "internal error".

CI runs a bounded, derandomised sample; ``pytest -m full tests/test_bad_values.py`` (and
``make bad-values-nightly``) draws many more.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lbdl_dsl.cli import VERBS, parser_of

REPO = Path(__file__).resolve().parents[1]
TINY = "model tiny(D=8):\n  input X: 4\n  fc D\n  relu\n  fc 2\n  output Y\n"
ALARM_S = 30  # a case still running after this many seconds is stopped (a loaded machine)
LONG_RUNNING = {"serve"}  # verbs whose success is to keep running
SKIPPED = {"help", "version", "set", "set_a", "set_b", "command", "shard"}  # not one value

# good values for the arguments a verb requires, by argparse dest (others get the spec)
GOOD = {
    "spec": "tiny.lbdl",
    "a": "tiny.lbdl",
    "b": "tiny.lbdl",
    "data": "synthetic",
    "steps": "1",
    "map": "gpt2",
    "weights": "params.safetensors",
    "output": "out/result.safetensors",
    "processes": "1",
}
LAUNCH_COMMAND = ["--", sys.executable, "-c", "pass"]
EXTRA = {"export": ["--format", "mlir"]}  # a choice a verb needs that GOOD cannot give

NUMBERS = ["-1", "0", "-0", "2147483648", "1099511627776", str(2**70), str(-(2**70)),
           "nan", "inf", "-inf", "1e308", "1e400", "0x10"]  # fmt: skip
HUGE = {"2147483648", "1099511627776", str(2**70), "inf", "1e308", "1e400"}
SUFFIXES = ["", ".lbdl", ".npz", ".safetensors", ".svg", ".txt", ".stablehlo"]
PATH_KINDS = ["fifo", "folder", "loop", "dangling", "empty", "random", "non-utf8", "socket"]


@dataclass(frozen=True)
class Arg:
    verb: str
    dest: str
    flag: str | None  # None: a positional
    number: bool


def _is_number(action: argparse.Action) -> bool:
    if action.type is None:
        return False
    try:
        value = action.type("1")  # type: ignore[operator]
    except Exception:  # noqa: BLE001 - a type that refuses "1" takes no number
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def verbs() -> dict[str, argparse.ArgumentParser]:
    return {verb: parser_of(verb) for verb in VERBS}


def arguments() -> list[Arg]:
    """Every (verb, argument) that takes one path or one number."""
    out = []
    for verb, parser in verbs().items():
        for action in parser._actions:
            one_value = action.nargs in (None, "?") and not isinstance(
                action, (argparse._StoreConstAction, argparse._HelpAction)
            )
            if action.dest in SKIPPED or not one_value or action.choices is not None:
                continue
            flag = max(action.option_strings, key=len) if action.option_strings else None
            out.append(Arg(verb, action.dest, flag, _is_number(action)))
    return out


ARGS = arguments()


def command_line(arg: Arg, value: str) -> list[str]:
    """``lbdl VERB ...`` with ``value`` for ``arg`` and good values for what else is required."""
    parser = verbs()[arg.verb]
    before, after = [arg.verb], []
    for action in parser._actions:
        if action.dest == "command" and action.nargs == argparse.REMAINDER:
            after = LAUNCH_COMMAND
            continue
        is_it = action.dest == arg.dest
        needed = not action.option_strings or action.required
        if not (is_it or needed) or action.dest in SKIPPED:
            continue
        if isinstance(action, argparse._MutuallyExclusiveGroup):
            continue
        text = value if is_it else GOOD.get(action.dest, "tiny.lbdl")
        before += [text] if not action.option_strings else [max(action.option_strings, key=len),
                                                            text]  # fmt: skip
    for group in parser._mutually_exclusive_groups:  # a required choice: the first, unless tried
        if group.required and not any(a.dest == arg.dest for a in group._group_actions):
            first = group._group_actions[0]
            before += [max(first.option_strings, key=len), GOOD.get(first.dest, "1")]
    return before + EXTRA.get(arg.verb, []) + after


# -- the scratch folder --------------------------------------------------------------------------


def _scratch() -> Path:
    """A folder with the tiny spec, a weights file for it, and one file of each bad kind."""
    root = Path(tempfile.mkdtemp(prefix="lbdl-bad-values-"))
    (root / "tiny.lbdl").write_text(TINY, "utf-8")
    import jax

    import lbdl_dsl

    model = lbdl_dsl.compile(root / "tiny.lbdl")
    model.save(root / "params.safetensors", *model.init(jax.random.key(0)))
    for suffix in SUFFIXES:
        os.mkfifo(root / f"fifo{suffix}")
        (root / f"folder{suffix}").mkdir()
        os.symlink(f"loop{suffix}", root / f"loop{suffix}")
        os.symlink(f"nowhere/x{suffix}", root / f"dangling{suffix}")
        (root / f"empty{suffix}").write_bytes(b"")
        (root / f"random{suffix}").write_bytes(bytes(range(256)) * 4)
        (root / os.fsdecode(b"\xff\xfe" + suffix.encode())).write_bytes(b"\xff\xfe\x00")
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(root / f"socket{suffix}"))
    return root


def path_value(kind: str, suffix: str) -> str:
    return os.fsdecode(b"\xff\xfe" + suffix.encode()) if kind == "non-utf8" else kind + suffix


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    root = _scratch()
    yield root
    shutil.rmtree(root, ignore_errors=True)


# -- one case ------------------------------------------------------------------------------------


class _Alarm(BaseException):
    """The case ran past `ALARM_S` (a BaseException, so that no `except Exception` takes it)."""


@contextlib.contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: object) -> None:
        signal.alarm(1)  # again, should this one land where exceptions are swallowed (a gc hook)
        raise _Alarm

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_case(root: Path, argv: list[str]) -> tuple[int | None, str]:
    """(exit code, or None if stopped by the alarm; stdout and stderr) of ``lbdl ARGV``."""
    from lbdl_dsl.cli import main

    out = io.StringIO()
    cwd = os.getcwd()
    work = Path(tempfile.mkdtemp(dir=root, prefix="case-"))
    for name in os.listdir(root):  # each case in its own folder, the bad files linked beside it
        if not name.startswith("case-"):
            os.symlink(root / name, work / name)
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), _alarm(ALARM_S):
            try:
                rc: int | None = main(argv)
            except SystemExit as exit_:
                rc = exit_.code if isinstance(exit_.code, int) else 1
    except _Alarm:
        rc = None
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)
    return rc, out.getvalue()


def check_case(root: Path, arg: Arg, value: str) -> None:
    argv = command_line(arg, value)
    rc, text = run_case(root, argv)
    shown = f"lbdl {' '.join(map(repr, argv))}\n{text[-3000:]}"
    assert "Traceback" not in text, shown
    assert "internal error" not in text, shown
    if rc is None:
        assert arg.verb in LONG_RUNNING or (arg.number and value in HUGE), f"hangs: {shown}"
        return
    assert rc in (0, 1), f"exit {rc}: {shown}"


def values(arg: Arg) -> st.SearchStrategy[str]:
    if arg.number:
        return st.sampled_from(NUMBERS)
    return st.builds(path_value, st.sampled_from(PATH_KINDS), st.sampled_from(SUFFIXES))


CASES = st.sampled_from(ARGS).flatmap(lambda arg: st.tuples(st.just(arg), values(arg)))


# -- the tests -----------------------------------------------------------------------------------


def test_every_verb_has_arguments_to_try() -> None:
    """The enumeration sees each verb of `VERBS`, and the flags of this issue among them."""

    assert {a.verb for a in ARGS} == set(VERBS)
    seen = {(a.verb, a.flag or a.dest, a.number) for a in ARGS}
    expected = {("train", "--seed", True), ("train", "--batch", True), ("export", "--batch", True),
                ("export", "--weights", False), ("build", "--output", False),
                ("diff", "--figure", False), ("train", "--data", False),
                ("import", "weights", False), ("train", "--save-minutes", True),
                ("launch", "--processes", True)}  # fmt: skip
    assert expected <= seen


@pytest.mark.parametrize("verb", sorted(verbs()))
def test_a_special_file_for_each_verbs_spec_or_first_path(scratch: Path, verb: str) -> None:
    """One FIFO case a verb, always (the sample below may not draw every verb)."""
    arg = next((a for a in ARGS if a.verb == verb and not a.number), None)
    if arg is None:
        pytest.skip(f"{verb} takes no path")
    check_case(scratch, arg, "fifo.lbdl")


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=CASES)
def test_bad_values_get_exit_0_or_1(scratch: Path, case: tuple[Arg, str]) -> None:
    check_case(scratch, *case)


@pytest.mark.full
@settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=CASES)
def test_bad_values_get_exit_0_or_1_nightly(scratch: Path, case: tuple[Arg, str]) -> None:
    check_case(scratch, *case)


@pytest.mark.full
@pytest.mark.parametrize("arg", ARGS, ids=lambda a: f"{a.verb}-{a.flag or a.dest}")
def test_every_argument_with_every_bad_value(scratch: Path, arg: Arg) -> None:
    """Each argument with each bad value of its kind (a path's kinds under one suffix each)."""
    if arg.number:
        tried = NUMBERS
    else:
        tried = [path_value(k, SUFFIXES[i % len(SUFFIXES)]) for i, k in enumerate(PATH_KINDS)]
    for value in tried:
        check_case(scratch, arg, value)
