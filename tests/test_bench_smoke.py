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


def test_accelerator_quick_gives_every_row_and_renders_again(tmp_path: Path) -> None:
    from bench import accelerator

    out = tmp_path / "performance-gpu.md"
    record = accelerator.main(["--quick", "--only", "gpt", "--out", str(out)])
    tiny = accelerator.cases(True)[0].name
    metrics = {name: [r["metric"] for r in case["rows"]] for name, case in record["cases"].items()}
    assert metrics == {
        tiny: [
            "compile: forward (s)",
            "steady: forward (s)",
            "compile: training step (s)",
            "steady: training step (s)",
            "memory: training step (GiB)",
        ],
    }
    case = record["cases"][tiny]
    assert all(r["ours"] > 0 and r["peer"] > 0 for r in case["rows"]), case["rows"]
    flops = 6 * case["macs_per_sample"] * case["batch"]
    assert case["train_flops"] == flops and case["mfu"]["ours"]["of_peak"] is None  # a CPU
    step = next(r for r in case["rows"] if r["metric"] == "steady: training step (s)")
    assert case["mfu"]["ours"]["tflops"] == pytest.approx(flops / step["ours"] / 1e12)
    text = out.read_text(encoding="utf-8")
    assert "| model | FLOPs per step |" in text and "python bench/accelerator.py --quick" in text
    assert f"- {tiny}, MFU: no data-sheet peak for this device" in text
    assert "each in a fresh process" not in text  # said only for rows measured otherwise
    again = tmp_path / "again.md"
    accelerator.main(["--render", str(out.with_suffix(".json")), "--out", str(again)])
    assert again.read_text(encoding="utf-8") == text


def test_accelerator_compiles_a_peer_once_for_the_cases_that_share_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the scanned and the unrolled GPT have the same Flax model: its compile is measured once
    from bench import accelerator

    scanned, unrolled, resnet = accelerator.cases(True)
    calls: list[tuple[str, str, str]] = []

    def one(self: object, case: accelerator.Case, what: str, side: str) -> float:
        calls.append((case.key, what, side))
        return float(len(calls))

    monkeypatch.setattr(accelerator.FreshCompiles, "one", one)
    fresh = accelerator.FreshCompiles(quick=True)
    assert fresh.pair(scanned, "train", "ours") == (1.0, 2.0)
    assert fresh.pair(unrolled, "train", "peer") == (3.0, 2.0)
    assert fresh.pair(resnet, "train", "peer") == (5.0, 4.0)
    assert calls == [
        ("gpt", "train", "ours"),
        ("gpt", "train", "peer"),
        ("gpt-unrolled", "train", "ours"),
        ("resnet50", "train", "peer"),
        ("resnet50", "train", "ours"),
    ]


def test_accelerator_takes_compile_rows_from_another_run() -> None:
    from bench import accelerator

    def case(name: str, compile_: float) -> dict:
        rows = [
            {"model": name, "metric": "compile: training step (s)", "ours": compile_, "peer": 2.0},
            {"model": name, "metric": "steady: training step (s)", "ours": 0.5, "peer": 0.4},
        ]
        return {"rows": rows, "kind": "gpt", "mfu_target": False}

    record = {"cases": {"a": case("a", 9.0), "b": case("b", 8.0)}, "compile_method": "in one go"}
    fresh = {"command": "python bench/accelerator.py --compile-only", "kind": "GPU"}
    fresh["cases"] = {"a": {"rows": case("a", 1.0)["rows"][:1]}}
    merged = accelerator.with_compiles(record, fresh)
    assert [r["ours"] for r in merged["cases"]["a"]["rows"]] == [1.0, 0.5]
    assert [r["ours"] for r in merged["cases"]["b"]["rows"]] == [8.0, 0.5]
    note = merged["compile_note"]
    assert note.startswith("compile rows of a: `python bench/accelerator.py --compile-only`")
    assert note.endswith("; of b: this run's, in one go")


def test_accelerator_peaks_and_kernels_are_read_as_written() -> None:
    from bench import accelerator

    assert accelerator.peak("NVIDIA H100 80GB HBM3") == 989.4e12
    assert accelerator.peak("NVIDIA H100 PCIe") == 756e12
    assert accelerator.peak("cpu") is None
    found = {"__cudnn$fmhaSoftmaxBackward": 1, "__cudnn$fmhaSoftmax": 2}
    assert accelerator.kernels_said(found) == "fmhaSoftmax ×2, fmhaSoftmaxBackward ×1"
    assert accelerator.kernels_said({}) == "none"


def test_accelerator_variants_compute_the_same_model() -> None:
    # each way of lowering the step is the same function: the same loss after one step
    import jax

    from bench import accelerator, accelerator_variants

    case = accelerator.cases(True)[0]
    ours, peer = accelerator.sides(case)
    x, y = peer.train_args[2:]
    loss = jax.jit(ours.train_step)(*ours.train_args)[-1]
    for name in accelerator_variants.VARIANTS["gpt"]:
        side = accelerator_variants.variant(case, name, x, y)
        assert float(jax.jit(side.train_step)(*side.train_args)[-1]) == pytest.approx(
            float(loss), rel=2e-2
        ), name


def test_cpu_variants_replace_the_functions_the_module_asks() -> None:
    # cpu-copies swaps `checkpoint_copies` in the module and cpu-conv `plain_convolutions`:
    # ResNet-50's module must call both, and the swap must reach the traced program
    import jax

    import lbdl_dsl
    from bench import accelerator, accelerator_variants

    model = lbdl_dsl.compile(str(run.ROOT / "specs" / "resnet50.lbdl"))
    assert "if checkpoint_copies(remat_on_cpu):" in model.source
    assert "if plain_convolutions():" in model.source
    assert {"cpu-copies", "cpu-conv"} <= set(accelerator_variants.VARIANTS["resnet50"])
    case = next(c for c in accelerator.cases(True) if c.key == "resnet50")
    theirs = accelerator.peer_side(case, shapes=True)
    x, y = theirs.train_args[2:]
    x = accelerator.image_as_declared(x)

    def convolutions(name: str) -> int:
        side = accelerator_variants.variant(case, name, x, y, shapes=True)
        text = str(jax.make_jaxpr(side.forward)(*side.forward_args))
        return text.count("conv_general_dilated")

    # on this CPU ours is the CPU's way already; the plain way (an accelerator's) convolves
    # where the CPU's multiplies 1×1 kernels
    assert convolutions("ours") == convolutions("cpu-conv")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(jax, "default_backend", lambda: "gpu")
        assert convolutions("ours") > convolutions("cpu-conv")


def test_accelerator_says_where_the_mfu_stops_from_the_figures() -> None:
    from bench import accelerator

    def mfu(of_peak: float, of_matmul: float) -> dict:
        return {"of_peak": of_peak, "of_matmul": of_matmul, "tflops": 1.0}

    case = {"mfu_target": True, "mfu": {"ours": mfu(0.52, 0.7), "peer": mfu(0.3, 0.4)}}
    record = {"kind": "NVIDIA H100 80GB HBM3", "matmul_tflops": 742.05, "cases": {"a": case}}
    [said] = accelerator.mfu_said(record)
    assert "reaches 70% of the rate" in said and "reaches 75% of the data sheet's peak" in said
    assert said.endswith("not met (at best 30.0%) for Flax.")
    assert "met (at best 52.0%) for lbdl" in said
    assert accelerator.mfu_said({**record, "kind": "cpu"}) == []


def test_gpu_report_is_rendered_from_every_run_beside_it(tmp_path: Path) -> None:
    """docs/performance-gpu.md is what bench/accelerator.py writes from the figures beside it:
    the main run, each variants run under its own device, and the sweep, with what they say."""
    import json
    import shutil

    from bench import accelerator

    docs = run.ROOT / "docs"
    for found in docs.glob("performance-gpu*.json"):
        shutil.copy(found, tmp_path)
    accelerator.write(
        tmp_path / "performance-gpu.md",
        json.loads((docs / "performance-gpu.json").read_text("utf-8")),
    )
    text = (tmp_path / "performance-gpu.md").read_text("utf-8")
    assert text == (docs / "performance-gpu.md").read_text("utf-8")
    assert "## Where the training step's time goes (NVIDIA H200)" in text
    assert "## Where the training step's time goes (NVIDIA H100 80GB HBM3)" in text
    assert "| fresh-process compile (s) | vs Flax |" in text
    assert "the plain way compiles in 0.97× and runs in 1.25×" in text
    assert "V=50,304 +4.2 points" in text and "moved the peer's by +5.0 points" in text
    assert "over the peer's, so an accelerator keeps the checkpoint" in text
    assert "  - ResNet-50, 224², batch 128: measured at f3cc643 with batch_norm's one pass" in text
    assert "Best MFU: Flax 46.2%" in text and "not met by either side (at best 46.5%)" in text
    assert "## GPT-2 medium's MFU, setting by setting (NVIDIA H200; at f3cc643)" in text
    assert "None raised it." in text and "lbdl 47.5% (--unroll, batch 16, V=50,304)" in text
    assert "## Where the GPU's time goes, kernel by kind (NVIDIA H200)" in text
    assert "at 47.5% MFU, 50% needs a 80.2 ms step, 4.2 ms less" in text


def test_gpu_profile_sorts_kernels_by_their_names() -> None:
    """Names as an H200's trace of GPT-2 medium and ResNet-50 gave them."""
    from bench import gpu_kernels as g

    products, triton, attention, reductions, memsets, rest = g.KINDS
    for name, kind in (
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", products),
        ("sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16", products),
        ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop", products),
        ("gemm_fusion_dot_459", triton),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma", attention),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*)", attention),
        ("input_add_reduce_fusion_23", reductions),
        ("Memset 0", memsets),
        ("loop_convert_multiply_fusion_23", rest),
        ("input_scatter_fusion", rest),
    ):
        assert g.kind(name) == kind, name


def test_gpu_profile_sums_the_device_kernels_per_step(tmp_path: Path) -> None:
    """Only the GPU process's complete events count, per step; the host's do not."""
    import json

    from bench import gpu_kernels as g
    from bench import gpu_profile

    def meta(pid: int, name: str) -> dict:
        return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}

    events = [
        meta(1, "/host:CPU"),
        meta(7, "/device:GPU:0"),
        {"ph": "X", "pid": 1, "name": "nvjet_host_side_name", "dur": 9_000},
        {"ph": "X", "pid": 7, "name": "nvjet_a", "dur": 3_000},
        {"ph": "X", "pid": 7, "name": "gemm_fusion_dot", "dur": 1_000},
        {"ph": "X", "pid": 7, "name": "input_reduce_fusion", "dur": 500},
        {"ph": "X", "pid": 7, "name": "loop_add_fusion", "dur": 1_500},
        {"ph": "B", "pid": 7, "name": "not complete"},
    ]
    got = g.summary(events, steps=2, wall=0.004)
    assert got["ms"][g.KINDS[0]] == 1.5 and got["kernels"][g.KINDS[0]] == 0.5
    assert got["ms"][g.KINDS[1]] == 0.5 and got["ms"][g.KINDS[3]] == 0.25
    assert got["ms"][g.KINDS[5]] == 0.75 and got["busy_ms"] == 3.0 and got["wall_ms"] == 4.0
    record = {"setting": "unroll-v64", "side": "ours", **got}
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [record, {**record, "side": "peer"}]}))
    text = gpu_profile.main(["--render", str(tmp_path / "runs.json")])
    assert "| unroll-v64 (lbdl) | unroll-v64 (Flax) |" in text
    assert "| all kernels | 3.0 | 3.0 |" in text and "| wall time, traced | 4.0 | 4.0 |" in text


def test_gpu_profile_quick_runs_and_says_when_there_is_no_gpu() -> None:
    """On a CPU the trace has no device kernels: the step is timed, the table says why empty."""
    from bench import gpu_profile as g

    record = g.main(["--quick", "--setting", "unroll", "--steps", "1"])
    assert isinstance(record, dict) and record["step"] > 0 and record["busy_ms"] == 0
    assert g.table([record]).startswith("(no GPU kernels")
    with pytest.raises(SystemExit):
        g.main(["--quick", "--setting", "no-such-setting"])


def test_step_profile_sorts_a_loops_kernels_from_its_optimised_hlo() -> None:
    """A scanned product's gradient on XLA:CPU: its kernels fall in the loop's categories."""
    import jax
    import jax.numpy as jnp

    from bench import step_profile

    def loss(ws: jax.Array, x: jax.Array) -> jax.Array:
        def body(h: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
            return jnp.tanh(h @ w), None

        return jnp.sum(jax.lax.scan(body, x, ws)[0])

    ws, x = jnp.ones((3, 16, 16)) / 16, jnp.ones((4, 16))
    hlo = jax.jit(jax.grad(loss)).lower(ws, x).compile().as_text()
    kinds = step_profile.instructions(hlo)
    found = set(kinds.values())
    assert {"products", "stack reads", "stack writes", "loop control"} <= found, kinds
    assert found <= set(step_profile.CATEGORIES)
    assert step_profile.category("wrapped_broadcast.3", "fusion", None) == "fills"
    assert step_profile.category("copy.7", "copy", None) == "copies and transposes"
    reduce_body = ["  %r = f32[4] reduce(%p, %c), dimensions={1}, to_apply=%add"]
    assert step_profile.category("ynn_fusion.2", "fusion", reduce_body) == "reductions"


def test_step_profile_quick_tables_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import step_profile

    text = step_profile.main(["--quick", "--steps", "1"])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    for name in (*step_profile.CATEGORIES, "all kernels", "minor page faults"):
        assert name in rows, name
    products = [float(v) for v in rows["products"].strip(" |").split(" | ")[1:3]]
    assert all(v > 0 for v in products), rows["products"]
    assert text in capsys.readouterr().out


def test_step_profile_donates_copies_and_threads_the_state() -> None:
    """--donate gives the step copies of the caller's state and feeds each step the last one's
    output: the caller's arrays survive, and a step that adds to its state runs on its output."""
    import jax
    import jax.numpy as jnp

    from bench import step_profile

    seen: list[float] = []

    def step(state: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        jax.debug.callback(lambda s: seen.append(float(s)), state[0])
        new = state + x
        return new, jnp.sum(new * y)

    args = (jnp.zeros(4), jnp.ones(4), jnp.ones(4))
    result = step_profile.profile(step, args, steps=2, donate=True, warmup=3)
    assert not args[0].is_deleted()
    assert float(args[0][0]) == 0.0
    assert seen == [float(i) for i in range(5)], seen  # three warm-ups, two traced steps
    assert result.wall > 0 and set(result.ms) == set(step_profile.CATEGORIES)


def test_step_profile_one_side_tables_that_side_alone() -> None:
    from bench import step_profile

    text = step_profile.main(["--quick", "--steps", "1", "--side", "peer", "--donate"])
    header = next(line for line in text.splitlines() if line.startswith("| kernels"))
    assert header == "| kernels | Flax (ms) |", header
    assert "| per step | Flax |" in text
    products = next(line for line in text.splitlines() if line.startswith("| products"))
    assert float(products.strip(" |").split(" | ")[1]) > 0, products


_FAKE_TRAIN = """
import json, os, sys
from pathlib import Path
tunables = os.environ.get("GLIBC_TUNABLES", "")
per_step = 2.0 if "arena_max=1" in tunables else 1.0  # what the child saw, in its step times
held = bytearray(64 << 20)  # 64 MiB touched: a peak RSS to find
held[:: 4096] = b"x" * len(held[:: 4096])
out = Path(sys.argv[1])
out.mkdir(parents=True)
rows = [{"kind": "train", "step": s, "time": 10.0 + s * per_step} for s in range(1, 7)]
rows.insert(3, {"kind": "eval", "step": 3, "time": 99.0})
(out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
"""


def test_allocator_measures_each_child_with_its_tunables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for `lbdl train` that writes step times from the GLIBC_TUNABLES it was given:
    each setting's figures come from its own child's metrics and rusage, rounds interleaved,
    and the JSON record is what main returns."""
    import json

    from bench import allocator

    class FakeJob(allocator.Job):
        def command(self, folder: Path) -> list[str]:
            return [sys.executable, "-c", _FAKE_TRAIN, str(folder)]

    monkeypatch.setattr(allocator, "QUICK", FakeJob("fake.lbdl", ("N=1",), 6, 4))
    out = tmp_path / "allocator.json"
    results = allocator.main(["--quick", "--rounds", "2", "--out", str(out)])
    kept, default = results["freed memory kept"], results["glibc's defaults"]
    assert kept["step"] == pytest.approx(2.0) and default["step"] == pytest.approx(1.0)
    assert default["start"] == pytest.approx(12.0)  # the train row of step 2, not the eval row
    assert kept["rounds"] == default["rounds"] == 2
    # at least the child's 64 MiB (Linux counts the parent's own peak too: see measure)
    assert kept["peak_rss_mb"] > 64 and kept["wall"] > 0
    record = json.loads(out.read_text("utf-8"))
    assert record["results"] == results and len(record["runs"]["glibc's defaults"]) == 2
    assert record["tunables"] == {"glibc's defaults": "", "freed memory kept": allocator.KEPT}
    assert record["job"] == "lbdl train fake.lbdl --data synthetic --steps 6 --batch 4 --set N=1"
    table = allocator.table(results, allocator.QUICK)
    assert "| freed memory kept | 2.000 | 2.000 |" in table


def test_allocator_runs_lbdl_train_as_the_docs_say(tmp_path: Path) -> None:
    from bench import allocator

    cmd = allocator.FULL.command(tmp_path / "run")
    assert cmd[3:5] == ["train", str(allocator.ROOT / "specs/gpt2.lbdl")]
    said = " ".join(cmd[3:])
    for part in ("--data synthetic", "--steps 12", "--batch 4", "--set T=128", "--log-every 1"):
        assert part in said, part
    assert allocator.FULL.warm == 4 and cmd[-2:] == ["-o", str(tmp_path / "run")]


def test_allocator_settings_environment_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import allocator

    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    by_key = {s.key: s for s in allocator.SETTINGS}
    assert "GLIBC_TUNABLES" not in allocator.environment(by_key["default"])
    assert allocator.environment(by_key["kept"])["GLIBC_TUNABLES"] == allocator.KEPT
    both = allocator.environment(by_key["kept-huge-pages"])["GLIBC_TUNABLES"]
    assert both.split(":") == allocator.KEPT.split(":") + [allocator.HUGE]
    with pytest.raises(SystemExit):
        allocator.main(["--only", "kept,nope"])
    failed = allocator.summary([{"error": "Traceback\nMemoryError: out of memory"}])
    row = allocator.table({"freed memory kept": failed}, allocator.FULL).splitlines()[-1]
    assert row.startswith("| freed memory kept | failed: MemoryError: out of memory")
    ran = allocator.summary([{"error": "x"}, dict.fromkeys(allocator.FIGURES, 1.0)])
    assert ran["rounds"] == 1 and ran["step"] == 1.0


def test_accelerator_sweep_runs_each_setting_in_a_process_with_its_flags(tmp_path: Path) -> None:
    import json

    from bench import accelerator
    from bench import accelerator_sweep as sweep

    out = tmp_path / "sweep.json"
    results = sweep.main(["--quick", "--out", str(out)])
    assert list(results) == [s.name for s in sweep.QUICK]
    for setting in sweep.QUICK:
        got = results[setting.name]
        assert "error" not in got, got
        assert got["compile"] > 0 and got["step"] > 0 and got["tflops"] > 0
        assert setting.flags in got["xla_flags"]
    assert json.loads(out.read_text("utf-8"))["results"] == results
    assert accelerator.sweep_table(results).count("\n") == 1 + len(sweep.QUICK)


def test_accelerator_sweep_settings_are_gpt2_medium_at_their_sizes() -> None:
    from bench import accelerator
    from bench import accelerator_sweep as sweep

    assert len({s.key for s in sweep.SETTINGS}) == len(sweep.SETTINGS)
    for setting in sweep.SETTINGS:
        case = setting.case(quick=False)
        assert case.base.overrides["N"] == 24 and case.base.overrides["D"] == 1024
        assert case.base.overrides["V"] == case.base.peer_args["vocab"] == setting.vocab
        assert case.base.batch == setting.batch and case.unroll == setting.unroll
    plain, padded = (accelerator.macs_per_sample(s.case(False)) for s in sweep.SETTINGS[1:5:3])
    assert padded > plain
    with pytest.raises(SystemExit):
        sweep.main(["--only", "no-such-setting"])
    failed = {"x": {"error": "Traceback ...\nRuntimeError: out of memory"}}
    assert "out of memory" in accelerator.sweep_table(failed)


def _xla_log() -> str:
    """A process's compile log as XLA writes it: a small program of JAX's own, then the step."""

    def line(source: str, message: str) -> str:
        return f"I1127 11:17:03.187161    3797 {source}] {message}"

    def kernel(stage: str, module: str, us: int) -> str:
        source = "fusion_compiler.cc:494" if stage == "MLIR" else "ir_compiler.cc:293"
        return line(source, f"Compiled {stage} module: {module} time: {us / 1000} ms ({us} us)")

    step = "jit_profiled_step"
    return "\n".join(
        [
            kernel("MLIR", "xor_fusion_kernel_module", 5043),
            kernel("LLVM", "__compute_module_xor_fusion_kernel_module", 5161),
            line(
                "cpu_compiler.cc:1269",
                f"Running HLO passes on [{step}] for CPU time: 140 ms"
                " (139752 us) (cumulative: 163 ms)",
            ),
            line("cpu_compiler.cc:2091", f"Compiling: {step}"),
            kernel("MLIR", "wrapped_broadcast.2_kernel_module", 10200),
            kernel("LLVM", "__compute_module_wrapped_broadcast.2_kernel_module", 20000),
            kernel("LLVM", "__compute_module___compute_module_copy_bitcast_fusion.14", 74100),
            kernel("LLVM", "__compute_module_dynamic-slice_bitcast_fusion_kernel_module", 30000),
            kernel("LLVM", "__compute_module_multiply_add_fusion.3_kernel_module", 12000),
            line(
                "cpu_compiler.cc:2094",
                f"Compiling [{step}] for CPU using JIT time: 2.73 s"
                " (2731017 us) (cumulative: 3.27 s)",
            ),
        ]
    )


def test_compile_profile_reads_the_timers_of_its_program_alone() -> None:
    """XLA's log as `compile_profile` reads it: the kernels compiled for the step alone (not
    JAX's own small programs before it), each kernel's MLIR and LLVM times added together,
    sorted by the step profile's categories; the HLO passes and the backend's wall time."""
    from bench import compile_profile

    result = compile_profile.parse(_xla_log())
    assert result.kernels == {
        "wrapped_broadcast.2": pytest.approx(30.2),
        "copy_bitcast_fusion.14": pytest.approx(74.1),
        "dynamic-slice_bitcast_fusion": pytest.approx(30.0),
        "multiply_add_fusion.3": pytest.approx(12.0),
    }
    assert result.passes == pytest.approx(139.752) and result.backend == pytest.approx(2731.017)
    kinds = result.by_category()
    assert kinds["fills"] == (pytest.approx(30.2), 1)
    assert kinds["stack reads"] == (pytest.approx(30.0), 1)
    assert kinds["copies and transposes"] == (pytest.approx(74.1), 1)
    assert kinds["elementwise and the rest"] == (pytest.approx(12.0), 1)
    with pytest.raises(RuntimeError, match="no compile timers for jit_other"):
        compile_profile.parse(_xla_log(), "jit_other")


def test_compile_profile_quick_sees_a_scanned_groups_kernels(tmp_path: Path) -> None:
    """A tiny GPT of three blocks (a scan) compiled in a child with XLA's timers on: its
    table has the loop's stack reads among the kernels, and the whole compile's figures;
    ``--out`` writes the same table with the command and the machine."""
    from bench import compile_profile

    out = tmp_path / "compile.md"
    text = compile_profile.main(["--quick", "--side", "ours", "--blocks", "3", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert text in report and "## Machine" in report and "- CPU: " in report
    assert "`python bench/compile_profile.py --quick --side ours --blocks 3 --out" in report
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    assert "| part | ours, 3 blocks |" in text
    reads = rows["kernels: stack reads"].strip(" |").split(" | ")[1]
    assert float(reads.split(" ms")[0]) > 0 and not reads.endswith("(0)"), reads
    for name in ("kernels, all (CPU)", "HLO passes", "code generation (wall)", "compile (wall)"):
        assert name in rows, name
    with pytest.raises(SystemExit):
        compile_profile.main(["--blocks", "0"])


def test_generate_section_is_written_in_place(tmp_path: Path) -> None:
    """bench/generate.py --record's section of docs/performance.md: the ratios from the figures,
    replaced in place when written again, the rest of the document kept."""
    from bench import generate

    side = {"prefill_s": 0.5, "total_s": 4.0, "decode_tokens_per_s": 30.0, "tokens_per_s": 32.0}
    peer = side | {"prefill_s": 1.0, "decode_tokens_per_s": 20.0, "torch": "2", "threads": 2}
    record = {"lbdl": side, "transformers": peer | {"transformers": "5"}, "command": "c"}
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Analysis\n\ntext\n", encoding="utf-8")
    generate.write_section(doc, record)
    generate.write_section(doc, record | {"lbdl": side | {"prefill_s": 0.25}})
    text = doc.read_text(encoding="utf-8")
    assert text.count(generate.HEADING) == 1 and text.startswith("# Performance\n\n## Analysis")
    assert "| prefill, 128 tokens (ms) | 250 | 1000 | 0.25 | ≤ 1 |" in text
    assert "| decode (tokens/s) | 30 | 20 | 1.5 | ≥ 1 |" in text


def test_generate_section_gives_the_one_core_run_and_its_verdict(tmp_path: Path) -> None:
    """The run pinned to one core is written after the table, with its own verdict; a loaded
    main run says so."""
    from bench import generate

    side = {"prefill_s": 0.3, "total_s": 8.0, "decode_tokens_per_s": 16.0, "tokens_per_s": 16.0}
    peer = side | {"prefill_s": 0.25, "torch": "2", "threads": 1, "transformers": "5"}
    one = {"lbdl": side, "transformers": peer, "command": "taskset -c 0 python x", "load": [1.0]}
    main = {"lbdl": side, "transformers": peer | {"threads": 2}, "command": "c", "load": [9.0]}
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n", encoding="utf-8")
    generate.write_section(doc, main, one)
    text = doc.read_text(encoding="utf-8")
    assert "on one core (`taskset -c 0 python x`: torch with 1 thread" in text
    assert "a prefill of 300 ms against 250 ms (1.2)" in text
    assert "the prefill takes 1.20× the peer's time" in text
    assert "Under this load (9.0 runnable processes" in text
