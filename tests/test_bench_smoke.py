"""The benchmark's quick mode runs end to end and gives every row (bench/run.py --quick).

The figures of tiny models mean nothing; what is checked is the code path the full benchmark
takes: both models compiled by lbdl and built in Flax, compile, steady and first-output
measurements, the Markdown table and the report written from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("flax")

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import run  # noqa: E402

pytestmark = pytest.mark.bench

METRICS = [
    "compile: forward (s)",
    "compile: training step (s)",
    "steady: forward (s)",
    "steady: training step (s)",
    "first output, Flax init eager (s)",
    "first output, Flax init jitted (s)",
]


def test_quick_mode_gives_every_row(tmp_path: Path) -> None:
    out = tmp_path / "performance.md"
    rows = run.main(["--quick", "--out", str(out)])
    models = [case.name for case in run.cases(quick=True)]
    depths = [run.growth_metric(b) for b in run.GROWTH_BLOCKS[True]]
    growth = [*depths, "growth, 1 to 2 blocks (s)", "4 blocks over 2 (×)"]
    assert [(row.model, row.metric) for row in rows] == [
        *((m, x) for m in models for x in METRICS),
        *((run.GROWTH, x) for x in growth),
    ]
    for row in rows:  # a growth of one sample each may come out below zero: checked below
        if not row.metric.startswith("growth"):
            assert row.ours is not None and row.ours > 0, row
            assert row.peer is not None and row.peer > 0, row
    text = out.read_text(encoding="utf-8")
    assert "| model | metric | ours | Flax | ratio |" in text
    assert "python bench/run.py --quick" in text
    targets = text.split("## Targets")[1].split("## Machine")[0]
    assert targets.count("target ≤") == len(rows) - len(depths)  # a depth alone has none
    # the growth is the difference of the depths' times, the deep stack's over the base one
    by = {row.metric: row for row in rows if row.model == run.GROWTH}
    one, base, deep = (by[d] for d in depths)
    assert by[growth[3]].ours == pytest.approx(base.ours - one.ours)
    assert by[growth[3]].peer == pytest.approx(base.peer - one.peer)
    assert by[growth[4]].ours == pytest.approx(deep.ours / base.ours)
    assert f"4 blocks over 2, ours: {deep.ours / base.ours:.2f} (target ≤ 1.2" in targets
    # the figures are kept beside the report, which can be rewritten from them alone
    saved = out.with_suffix(".json")
    assert saved.is_file()
    again = tmp_path / "again.md"
    assert run.main(["--render", str(saved), "--out", str(again)]) == rows
    assert again.read_text(encoding="utf-8") == text


def test_kernel_counts_see_equal_bodies_as_one() -> None:
    import jax
    import jax.numpy as jnp

    from bench import kernels

    def twice(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.tanh(a @ a) * 2.0, jnp.tanh(b @ b) * 2.0

    same = (jax.ShapeDtypeStruct((8, 8), jnp.float32),) * 2
    other = (same[0], jax.ShapeDtypeStruct((16, 16), jnp.float32))
    n_same, distinct_same, _ = kernels.count(twice, same)
    n_other, distinct_other, _ = kernels.count(twice, other)
    assert n_same == n_other >= 2
    assert distinct_same < distinct_other <= n_other


def test_memory_plans_compare_every_field_of_both_models() -> None:
    from bench import memory

    table = memory.main(["--quick"])
    rows = [line.split(" | ") for line in table[2:]]
    models = [case.name for case in run.cases(quick=True)]
    assert [(r[0].lstrip("| "), r[1]) for r in rows] == [
        (m, f"{f} (MiB)") for m in models for f in memory.FIELDS
    ]
    for r in rows:  # the same parameters and optimiser on both sides: equal arguments
        if r[1] == "argument (MiB)":
            assert r[2] == r[3], r
        assert float(r[2].replace(",", "")) > 0 and float(r[3].replace(",", "")) > 0, r


def test_a_growth_the_peer_did_not_have_is_no_ratio() -> None:
    # one sample each (--quick) can make the peer's growth negative: not a ratio to meet
    rows = [
        run.harness.Row(run.GROWTH, "growth, 1 to 2 blocks (s)", 0.02, -0.48),
        run.harness.Row(run.GROWTH, "growth, 1 to 12 blocks (s)", 0.5, 2.0),
    ]
    lines = run.verdicts(rows, {run.GROWTH: "growth"})
    assert "no ratio, the peer's compile did not grow (-0.48 s)" in lines[0]
    assert lines[0].endswith("(target ≤ 0.25: **not met**)")
    assert lines[1].endswith(": 0.25 (target ≤ 0.25: met)")
