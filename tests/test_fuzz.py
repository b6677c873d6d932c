"""A few thousand fuzz cases in CI: any input compiles or gets our error, never a crash.

The full run (``python bench/fuzz.py --cases 100000 --jobs 2``, docs/reliability.md) is too long
for every commit; this one takes a fixed slice of the same cases, so a failure here reproduces
with ``python bench/fuzz.py --seed 0 --start I --cases 1 --save DIR``. A hypothesis test adds
random texts over the grammar's own vocabulary, which shrink to a minimal failing spec.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# bench/ is a top-level directory, not part of the installed package
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import fuzz  # noqa: E402
from lbdl_dsl.compiler.driver import compile_spec  # noqa: E402
from lbdl_dsl.core.errors import LbdlError  # noqa: E402

CI_CASES = 3_000


def test_a_slice_of_the_fuzz_run_has_no_crash() -> None:
    summary = fuzz.fuzz(CI_CASES, seed=0, timeout=10.0)
    report = fuzz.render(summary, seed=0, jobs=1)
    assert summary.cases == CI_CASES
    assert not summary.crashes, report
    assert not summary.timeouts, report
    assert set(summary.kinds) == {"mutate", "generate", "tokens", "set", "api", "files"}


@pytest.mark.parametrize("condition", fuzz.FILE_CONDITIONS)
def test_each_file_system_condition_is_refused_cleanly(condition: str) -> None:
    """Each condition the harness draws, run once: our error, and the scratch folder as before."""
    case = fuzz.Case(0, "files", "fuzz_fs.lbdl", {}, condition, ("--check",), condition)
    if condition.startswith("out-"):
        case = fuzz.Case(0, "files", "mlp.lbdl", {}, condition, ("--emit", "json"), condition)
    work = Path(fuzz.tempfile.mkdtemp(prefix="lbdl-fuzz-test-"))
    try:
        fuzz.shutil.copytree(fuzz.ROOT / "specs", work, dirs_exist_ok=True)
        before = sorted(p.name for p in work.iterdir())
        here = fuzz.os.getcwd()
        fuzz.os.chdir(work)
        try:
            outcome = fuzz.run_case(case, work, timeout=20.0)
        finally:
            fuzz.os.chdir(here)
        assert outcome.status == "error", outcome.detail
        assert sorted(p.name for p in work.iterdir()) == before
    finally:
        fuzz.shutil.rmtree(work, ignore_errors=True)


def test_cases_are_reproducible_from_seed_and_index() -> None:
    corpus = fuzz.load_corpus()
    for index in (0, 17, 4711):
        assert fuzz.make_case(5, index, corpus) == fuzz.make_case(5, index, corpus)
    assert fuzz.make_case(5, 1, corpus) != fuzz.make_case(6, 1, corpus)


@pytest.mark.parametrize(
    "stderr, problem",
    [
        ("x.lbdl: internal error: KeyError\n", "does not start with"),
        ("spec.lbdl:9:1: error: boom\n", "outside the file"),
        ("spec.lbdl:1:99: error: boom\n", "outside the file"),
        ("spec.lbdl:2:1: error: boom\n  model m:\n  ^\n", "not line 2"),
        ("other.lbdl:1:1: error: boom\n", "not a file of the case"),
    ],
)
def test_the_oracle_rejects_malformed_messages(tmp_path: Path, stderr: str, problem: str) -> None:
    """The harness counts these as crashes: a wrong place is as much a bug as a traceback."""
    (tmp_path / "spec.lbdl").write_text("model m:\n  input X: 3\n", "utf-8")
    assert problem in (fuzz.check_message(stderr, tmp_path) or "")


def test_the_oracle_accepts_a_real_message(tmp_path: Path) -> None:
    text = "model m:\n  input X: 3\n  relu:\n"
    (tmp_path / "spec.lbdl").write_text(text, "utf-8")
    with pytest.raises(LbdlError) as info:
        compile_spec(text, file="spec.lbdl")
    message = info.value.render({"spec.lbdl": text})
    assert fuzz.check_message(message, tmp_path) is None


_WORDS = st.sampled_from(fuzz.TERMINALS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_WORDS, max_size=30), st.sampled_from(["", "model m:\n  input X: 3×8×8\n  "]))
def test_any_sequence_of_terminals_compiles_or_gets_our_error(words: list[str], head: str) -> None:
    text = head + " ".join(words)
    try:
        compile_spec(text, file="<fuzz>")
    except LbdlError as err:
        first = err.first
        assert first.span is not None, err.render()
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        assert 1 <= first.span.line <= len(lines) + 1
