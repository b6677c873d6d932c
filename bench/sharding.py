"""Sharding's figures: how fast GPT-3 checks on a big mesh, and how the checker's memory per
device compares with XLA's.

Run ``python bench/sharding.py`` from the repository root. It prints Markdown tables:

1. ``lbdl check specs/gpt3.lbdl --mesh data=8,fsdp=16,tensor=8 --shard fsdp+tp`` timed as a whole
   process (interpreter, imports, parse, build, check, the sharding and memory passes, the
   tables), which the issue wants under a second; and the two passes alone, in process;
2. with ``--xla``, on 4 virtual CPU devices (a process of its own): for a few models and
   layouts, the checker's bytes of a training step's arguments (parameters, Adam's state, the
   inputs) beside XLA's ``memory_analysis()``, and its activations beside the residuals XLA's
   compiled forward pass keeps for the backward pass (docs/scaling.md quotes both).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GPT3 = ["specs/gpt3.lbdl", "--mesh", "data=8,fsdp=16,tensor=8", "--shard", "fsdp+tp"]
MODELS = {
    "mlp": ("specs/mlp.lbdl", {}),
    "lenet": ("specs/lenet.lbdl", {}),
    "gpt (N=2, D=64, T=32)": ("specs/gpt.lbdl", {"N": 2, "D": 64, "H": 4, "V": 128, "T": 32}),
    "vit (small)": ("specs/vit.lbdl", {"N": 2, "D": 64, "H": 4}),
}
LAYOUTS = {"dp": ("data=4", ["dp"]), "fsdp": ("data=2,fsdp=2", ["fsdp"])}
BATCH = 8


def lbdl_command() -> list[str]:
    script = Path(sys.executable).parent / "lbdl"
    if script.exists():
        return [str(script)]
    found = shutil.which("lbdl")
    return [found] if found else [sys.executable, "-m", "lbdl_dsl"]


def best_of(repeats: int, fn) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def check_times(repeats: int) -> None:
    command = [*lbdl_command(), "check", *GPT3]

    def run() -> None:
        subprocess.run(command, check=True, capture_output=True, cwd=REPO)

    run()
    best, median = best_of(repeats, run)
    from lbdl_dsl.compiler import memory
    from lbdl_dsl.compiler.driver import compile_spec
    from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve

    checked = compile_spec(REPO / "specs" / "gpt3.lbdl")
    assert checked is not None

    def passes() -> None:
        mesh = parse_mesh("data=8,fsdp=16,tensor=8")
        layout = resolve(checked, mesh, parse_rules(["fsdp+tp"], mesh))
        memory.per_device(checked, layout, [])

    in_process, _ = best_of(repeats, passes)
    print("| GPT-3, data=8,fsdp=16,tensor=8, fsdp+tp | best | median |")
    print("|---|---|---|")
    print(
        f"| `lbdl check ... --mesh ... --shard fsdp+tp`, whole process | {best * 1e3:.0f} ms "
        f"| {median * 1e3:.0f} ms |"
    )
    print(f"| the sharding and memory passes, in process | {in_process * 1e3:.1f} ms | |")
    print()


def xla_figures() -> dict:
    """On 4 virtual devices: checker vs XLA for each model and layout (run in a subprocess)."""
    import jax

    jax.config.update("jax_num_cpu_devices", 4)
    import jax.numpy as jnp
    import numpy as np
    import optax

    import lbdl_dsl
    from lbdl_dsl.backends.jax.sharding import Sharded
    from lbdl_dsl.compiler.memory import per_device

    tx = optax.adam(1e-3)
    out: dict = {}
    for name, (spec, overrides) in MODELS.items():
        model = lbdl_dsl.compile(REPO / spec, **overrides)

        def loss(params, state, *xs, model=model):
            y, _ = model.apply(params, state, *xs, train=True, key=jax.random.PRNGKey(0))
            return jnp.mean(jnp.asarray(y, jnp.float32) ** 2)

        def step(params, state, opt_state, *xs, loss=loss):
            grads = jax.grad(loss)(params, state, *xs)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        for layout, (mesh, shard) in LAYOUTS.items():
            sharded = Sharded.of(model, mesh, shard)
            params, state = sharded.init(model, jax.random.PRNGKey(0))
            opt_state = sharded.init_opt_state(tx, params)
            xs = sharded.put_batch(
                [np.asarray(x) for x in model.example_inputs(jax.random.PRNGKey(1), BATCH)]
            )
            compiled = jax.jit(step).lower(params, state, opt_state, *xs).compile()
            b = BATCH // sharded.layout.batch_pieces
            whole, _ = per_device(model.checked, sharded.layout, [], batch=b)
            local = [np.asarray(x)[:b] for x in model.example_inputs(jax.random.PRNGKey(1), b)]
            p1, s1 = model.init(jax.random.PRNGKey(0))

            def forward(p, s, *x, loss=loss):
                return jax.vjp(lambda q: loss(q, s, *x), p)[1]

            closed = jax.make_jaxpr(forward)(p1, s1, *local)
            passed = {id(v) for v in closed.jaxpr.invars}
            kept = sum(
                int(np.prod(a.shape)) * a.dtype.itemsize
                for v, a in zip(closed.jaxpr.outvars, closed.out_avals)
                if id(v) not in passed
            )
            out[f"{name} | {layout}"] = {
                "checker_arguments": whole.arguments.as_int(),
                "xla_arguments": int(compiled.memory_analysis().argument_size_in_bytes),
                "checker_activations": whole.activations.as_int(),
                "xla_residuals": kept,
            }
    return out


def xla_table() -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0")
    proc = subprocess.run(
        [sys.executable, __file__, "--xla-worker"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
    )
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"Bytes per device, a global batch of {BATCH} over 4 virtual CPU devices.\n")
    head = ["model", "layout", "arguments: checker", "XLA", "activations: checker", "XLA residuals"]
    print("| " + " | ".join([*head, "ratio"]) + " |")
    print("|---|---|---|---|---|---|---|")
    for key, r in rows.items():
        ratio = r["xla_residuals"] / r["checker_activations"]
        print(
            f"| {key} | {r['checker_arguments']:,} | {r['xla_arguments']:,} | "
            f"{r['checker_activations']:,} | {r['xla_residuals']:,} | {ratio:.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--xla", action="store_true", help="also compare with XLA (4 devices)")
    parser.add_argument("--xla-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.xla_worker:
        print(json.dumps(xla_figures()))
        return 0
    check_times(args.repeats)
    if args.xla:
        xla_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
