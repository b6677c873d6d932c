"""Each documented limit (lbdl_dsl/compiler/limits.py), hit through the real command line.

A spec is untrusted text, so whatever it asks for must be answered in bounded time with our
error: exit 1, ``FILE:LINE:COL: error: MESSAGE`` naming the place that asks too much, and no
traceback. Each test runs ``python -m lbdl_dsl SPEC --check`` as a subprocess with a timeout, so a
hang (reading a FIFO, a regular-expression blow-up) fails the test instead of stalling it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lbdl_dsl.compiler.limits import (
    MAX_CALL_DEPTH,
    MAX_DIM,
    MAX_EXPANDED_LAYERS,
    MAX_IMPORTS,
    MAX_NESTING,
    MAX_REPEAT,
    MAX_SOURCE_BYTES,
)

BOUND = 30.0  # seconds: generous for a slow CI machine; each case takes about one here
HEAD = "model m:\n  input X: 3\n"


def check(spec: Path, *, prelude: str = "") -> tuple[str, float]:
    """The first line of what ``lbdl-compile SPEC --check`` prints, after asserting it is ours.

    ``prelude`` is Python run before the CLI in the same process (to lower a limit that is
    otherwise too costly to reach in a test).
    """
    code = f"import sys\n{prelude}\nfrom lbdl_dsl.cli.compat import main\nsys.exit(main())"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code, spec.name, "--check"] if prelude
        else [sys.executable, "-m", "lbdl_dsl.cli.compat", spec.name, "--check"],
        cwd=spec.parent, capture_output=True, text=True, timeout=BOUND,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    return proc.stderr.split("\n", 1)[0], elapsed


def write(path: Path, text: str) -> Path:
    path.write_text(text, "utf-8")
    return path


# -- size of the text ---------------------------------------------------------------------------


def test_a_10_mb_spec_is_refused_before_it_is_read(tmp_path: Path) -> None:
    spec = write(tmp_path / "big.lbdl", HEAD + "  relu\n" * (10 * 2**20 // 7))
    size = spec.stat().st_size
    first, _ = check(spec)
    assert first == (
        f"big.lbdl:1:1: error: big.lbdl is too large ({size:,} bytes; "
        f"the limit is {MAX_SOURCE_BYTES:,})"
    )


def test_a_million_lines_are_read_in_bounded_time_and_memory(tmp_path: Path) -> None:
    """Two megabytes of comment lines once took 1.2 GB in the regular-expression engine."""
    spec = write(tmp_path / "long.lbdl", HEAD + "#\n" * 1_000_000 + "  nosuch\n")
    first, elapsed = check(spec)
    assert first == "long.lbdl:1000003:3: error: unknown layer `nosuch`"
    assert elapsed < BOUND


# -- nesting ------------------------------------------------------------------------------------


def test_parentheses_10000_deep(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "parens.lbdl", HEAD + "  fc " + "(" * 10_000 + "3" + ")" * 10_000 + "\n"
    )
    first, _ = check(spec)
    col = len("  fc ") + MAX_NESTING + 1
    assert first == f"parens.lbdl:3:{col}: error: parentheses nested deeper than {MAX_NESTING}"


def _nested_groups(levels: int) -> str:
    groups = "".join(" " * (i + 2) + "×1:\n" for i in range(levels))
    return HEAD + groups + " " * (levels + 2) + "relu\n"


def test_groups_nested_past_the_limit(tmp_path: Path) -> None:
    spec = write(tmp_path / "deep.lbdl", _nested_groups(2_000))
    first, _ = check(spec)
    line = 2 + MAX_NESTING  # the line that opens a level past the limit (with the model's own)
    assert first == (
        f"deep.lbdl:{line}:{MAX_NESTING + 2}: error: groups nested deeper than {MAX_NESTING} levels"
    )


def test_indentation_10000_deep_is_refused_by_its_size(tmp_path: Path) -> None:
    """10,000 levels of one space each are 50 MB of indentation: the size limit answers first."""
    spec = write(tmp_path / "deeper.lbdl", _nested_groups(10_000))
    first, _ = check(spec)
    assert first.startswith("deeper.lbdl:1:1: error: deeper.lbdl is too large (")


# -- what the spec asks to build ------------------------------------------------------------


def test_a_repeat_count_past_the_limit(tmp_path: Path) -> None:
    spec = write(tmp_path / "rep.lbdl", HEAD + "  relu ×1000000000\n")
    first, _ = check(spec)
    assert first == (
        f"rep.lbdl:3:9: error: ×1,000,000,000 is more than the {MAX_REPEAT:,} copies a spec "
        "may repeat"
    )


def test_a_block_calling_itself_through_three_others(tmp_path: Path) -> None:
    blocks = "".join(f"block {a} on C:\n  {b}\n" for a, b in zip("abcd", "bcda", strict=True))
    spec = write(tmp_path / "rec.lbdl", blocks + HEAD + "  a\n")
    first, _ = check(spec)
    assert first == "rec.lbdl:8:3: error: block `a` calls itself: a → b → c → d → a"


def test_block_calls_nested_past_the_limit(tmp_path: Path) -> None:
    n = MAX_CALL_DEPTH + 6
    blocks = "".join(f"block b{i} on C:\n  b{i + 1}\n" for i in range(n))
    spec = write(tmp_path / "calls.lbdl", blocks + f"block b{n} on C:\n  relu\n" + HEAD + "  b0\n")
    first, _ = check(spec)
    line = 2 * MAX_CALL_DEPTH  # the call of b64, inside b63: the 65th call down
    assert first == f"calls.lbdl:{line}:3: error: block calls nested deeper than {MAX_CALL_DEPTH}"


def test_more_boxes_than_the_checker_expands(tmp_path: Path) -> None:
    """A ×N group whose copies keep changing shape is checked copy by copy. At the real limit
    that is 200,000 checks (about 30 s here), so the limit is lowered for the test."""
    body = "  ×10000:\n    concat(X)\n" + "    relu\n" * 9
    spec = write(tmp_path / "wide.lbdl", "model m:\n  input X: 1\n" + body)
    prelude = "import lbdl_dsl.compiler.infer as infer\ninfer.MAX_EXPANDED_LAYERS = 1000"
    first, _ = check(spec, prelude=prelude)
    assert first == (
        "wide.lbdl:13:5: error: the model has more than 1,000 boxes once its block calls "
        "and ×N groups are expanded"
    )
    assert MAX_EXPANDED_LAYERS == 200_000  # the documented value the message would carry


def test_blocks_calling_the_previous_block_twice(tmp_path: Path) -> None:
    """29 levels of `block bK: bK-1 / bK-1`: 833 bytes that once hung the recursion check (it
    walked every path, 2^29 of them) and, once past it, checked fine at 2^29 boxes since a
    memoised call cost the box count nothing. Each call counts its expanded boxes now."""
    levels = "".join(f"block b{k} on C:\n  b{k - 1}\n  b{k - 1}\n" for k in range(1, 30))
    spec = write(tmp_path / "calls.lbdl", "block b0 on C:\n  relu\n" + levels + HEAD + "  b29\n")
    first, elapsed = check(spec)
    assert first.endswith(
        f"error: the model has more than {MAX_EXPANDED_LAYERS:,} boxes once its block calls "
        "and ×N groups are expanded"
    )
    assert elapsed < BOUND


def test_copies_of_a_group_count_as_boxes(tmp_path: Path) -> None:
    """A ×N group whose copies keep their shape is checked once, but has N copies of boxes."""
    spec = write(tmp_path / "copies.lbdl", HEAD + "  ×100000:\n    relu\n    relu\n    relu\n")
    first, _ = check(spec)
    assert first == (
        f"copies.lbdl:3:3: error: the model has more than {MAX_EXPANDED_LAYERS:,} boxes once "
        "its block calls and ×N groups are expanded"
    )


@pytest.mark.parametrize("op", ["+", "-"])
def test_thousands_of_chained_operators(tmp_path: Path, op: str) -> None:
    """`1+1+...` and `----4` parse and evaluate without recursion (they once ended in a
    RecursionError, reported as our bug)."""
    size = "+".join(["1"] * 3000) if op == "+" else "-" * 3000 + "4"
    spec = write(tmp_path / "ops.lbdl", f"model m:\n  input X: {size}\n  relu\n")
    proc = subprocess.run(
        [sys.executable, "-m", "lbdl_dsl.cli.compat", spec.name, "--check"],
        cwd=tmp_path, capture_output=True, text=True, timeout=BOUND,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "relu  3000" in proc.stdout if op == "+" else "relu  4 " in proc.stdout


def test_a_shape_overflowing_64_bits(tmp_path: Path) -> None:
    spec = write(tmp_path / "huge.lbdl", "model m:\n  input X: 4294967296×4294967296\n  relu\n")
    first, _ = check(spec)
    assert first == (
        "huge.lbdl:2:3: error: the number of elements of input `X` is "
        f"{2**64:,}, which overflows 64 bits"
    )
    assert MAX_DIM < 2**64


def test_a_symbol_division_by_zero(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "zero.lbdl",
        "block b(S) on C×H×W:\n  maxpool k=1 s=S   C×H/S×W/S\n"
        "model m:\n  input X: 3×8×8\n  b S=0\n",
    )
    first, _ = check(spec)
    assert first == "zero.lbdl:2:23: error: division by zero in the annotation `H/S`"


# -- files --------------------------------------------------------------------------------------


def test_an_import_cycle(tmp_path: Path) -> None:
    write(tmp_path / "a.lbdl", 'import "b.lbdl"\nblock ba on C:\n  relu\n')
    write(tmp_path / "b.lbdl", 'import "a.lbdl"\nblock bb on C:\n  relu\n')
    spec = write(tmp_path / "main.lbdl", 'import "a.lbdl"\n' + HEAD + "  ba\n")
    first, _ = check(spec)
    assert first == "b.lbdl:1:1: error: import cycle: a.lbdl → b.lbdl → a.lbdl"


def test_more_imported_files_than_the_limit(tmp_path: Path) -> None:
    imports = ""
    for i in range(MAX_IMPORTS + 10):
        write(tmp_path / f"l{i}.lbdl", f"block k{i} on C:\n  relu\n")
        imports += f'import "l{i}.lbdl"\n'
    spec = write(tmp_path / "many.lbdl", imports + HEAD + "  relu\n")
    first, _ = check(spec)
    line = MAX_IMPORTS + 1
    assert first == f"many.lbdl:{line}:1: error: more than {MAX_IMPORTS} imported files"


def _unreadable(tmp_path: Path, kind: str) -> str:
    """Make ``lib.lbdl`` a file that cannot be a spec; returns the start of the message."""
    target = tmp_path / "lib.lbdl"
    if kind == "directory":
        target.mkdir()
    elif kind == "device":
        target.symlink_to("/dev/zero")  # endless: reading it would never finish
    elif kind == "fifo":
        os.mkfifo(target)  # nobody writes: opening it would block forever
    else:
        return "no such file: lib.lbdl"
    return "not a regular file: lib.lbdl"


@pytest.mark.parametrize("kind", ["missing", "directory", "device", "fifo"])
def test_an_import_that_cannot_be_read(tmp_path: Path, kind: str) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    message = _unreadable(tmp_path, kind)
    if kind == "device":  # a link out of the spec's folder is refused before it is opened
        message = "cannot import `lib.lbdl`: it is outside the spec's folder"
    spec = write(tmp_path / "main.lbdl", 'import "lib.lbdl"\n' + HEAD + "  relu\n")
    first, elapsed = check(spec)
    assert first == f"main.lbdl:1:1: error: {message}"
    assert elapsed < BOUND


@pytest.mark.parametrize("kind", ["directory", "device", "fifo"])
def test_a_spec_that_cannot_be_read(tmp_path: Path, kind: str) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    message = _unreadable(tmp_path, kind)
    first, _ = check(tmp_path / "lib.lbdl")
    assert first == f"lib.lbdl:1:1: error: {message}"
