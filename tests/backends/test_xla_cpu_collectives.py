"""XLA:CPU all-reduces an FSDP gradient at full size, where a `psum_scatter` reduce-scatters it.

Plain JAX, 4 virtual CPU devices (a process of its own: the device count is set before JAX
starts): a weight split over ``fsdp`` like the training step's (`backends.jax.sharding`),
the batch split over the same axis, and the gradient asked for in the weight's split. The SPMD
partitioner sums the gradient with an all-reduce of the whole array and then slices this
device's piece (XLA:CPU has no pass that turns the pair into a reduce-scatter), so every device
holds the whole gradient first; `--check` counts the piece (docs/scaling.md, "Against XLA's
totals"). The same sum written by hand in ``shard_map`` (``jax.lax.psum_scatter``) compiles to
a reduce-scatter. So does JAX's own FSDP idiom in explicit mode (the weight gathered as
``reduced``, its gradient typed ``unreduced`` and resharded over ``fsdp``): Shardy asks for the
reduce-scatter, and XLA:CPU still all-reduces and slices. XLA:GPU's pipeline has the pass that
merges the pair (``ReduceScatterCreator``, in its collective optimisations); XLA:CPU's has none.
When `test_the_partitioner_still_all_reduces` fails, XLA:CPU reduce-scatters the training
step's gradients itself: measure bench/memory_ratio.py again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

REPRODUCER = textwrap.dedent(
    """
    import json, re, jax
    jax.config.update("jax_num_cpu_devices", 4)
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((4,), ("fsdp",), axis_types=(AxisType.Auto,))
    split = NamedSharding(mesh, P("fsdp"))
    w = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=split)
    x = jax.ShapeDtypeStruct((32, 64), jnp.float32, sharding=split)
    loss = lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)
    grad = jax.jit(jax.grad(loss), out_shardings=split)

    def by_hand(w, x):
        whole = jax.lax.all_gather(w, "fsdp", tiled=True)
        return jax.lax.psum_scatter(jax.grad(loss)(whole, x), "fsdp", tiled=True)

    scattered = jax.jit(jax.shard_map(by_hand, mesh=mesh, in_specs=(P("fsdp"), P("fsdp")),
                                      out_specs=P("fsdp")))
    # JAX's own FSDP idiom in explicit mode: gathered as `reduced`, the gradient `unreduced`
    explicit = jax.make_mesh((4,), ("fsdp",), axis_types=(AxisType.Explicit,))
    def typed(w, x):
        return loss(jax.sharding.reshard(w, P(None, None, reduced={"fsdp"})), x)
    out = {}
    for name, fn in (("partitioned", grad), ("shard_map", scattered), ("explicit", None)):
        if fn is None:
            with jax.set_mesh(explicit):
                args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=P("fsdp")) for a in (w, x)]
                text = jax.jit(jax.grad(typed)).lower(*args).compile().as_text()
        else:
            text = fn.lower(w, x).compile().as_text()
        out[name] = {op: len(re.findall(rf"= \\S+ {op}(?:-start)?\\(", text))
                     for op in ("all-reduce", "reduce-scatter", "all-gather")}
    print(json.dumps(out))
    """
)


def _collectives() -> dict[str, dict[str, int]]:
    env = dict(os.environ)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", REPRODUCER], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    counts: dict[str, dict[str, int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


def test_the_partitioner_still_all_reduces() -> None:
    """All in one process: the partitioner's gradient, and the explicit idiom's, are an
    all-reduce and no reduce-scatter; ``psum_scatter`` is one reduce-scatter and no all-reduce
    (XLA:CPU can run one)."""
    counts = _collectives()
    assert counts["shard_map"]["reduce-scatter"] == 1
    assert counts["shard_map"]["all-reduce"] == 0
    for how in ("partitioned", "explicit"):
        assert counts[how]["reduce-scatter"] == 0, f"XLA:CPU reduce-scatters ({how}): see above"
        assert counts[how]["all-reduce"] >= 1
