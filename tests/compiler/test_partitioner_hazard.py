"""A layout XLA's SPMD partitioner gets wrong is refused, and the plain-JAX reproducer stays.

Two dense layers, the batch over ``('data', 'fsdp')``, the first matrix ``P(None, 'tensor')``
and the second ``P('fsdp', 'tensor')``: the first matrix's gradient is wrong by 109 % (jax
0.10). That is what ``--shard fsdp out=tensor`` (the rule `lbdl check` suggests for a CNN
under tp) gives every convolution on a mesh with ``data`` beside ``fsdp``; `resolve` refuses it
and names the mesh that splits the same batch over one axis. The reproducer runs in a process
of its own (8 virtual CPU devices): when it stops reproducing, the refusal can go.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import lbdl_dsl
from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]
SIZES = {"W": 8, "I": 32, "classes": 10, "L2": 1, "L3": 1, "L4": 1}

REPRODUCER = textwrap.dedent(
    """
    import json, jax
    jax.config.update("jax_num_cpu_devices", 8)
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    x, w1, w2 = (jax.random.normal(k[0], (8, 16)), jax.random.normal(k[1], (16, 8)) / 4,
                 jax.random.normal(k[2], (8, 8)) / 3)
    loss = lambda w1, w2, x: jnp.mean(jnp.tanh(jnp.tanh(x @ w1) @ w2) ** 2)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    put = lambda a, *spec: jax.device_put(a, NamedSharding(mesh, P(*spec)))
    out = {}
    for name, batch in (("data,fsdp", ("data", "fsdp")), ("fsdp", "fsdp")):
        one = grad(w1, w2, x)
        got = grad(put(w1, None, "tensor"), put(w2, "fsdp", "tensor"), put(x, batch))
        out[name] = [float(jnp.abs(a - b).max() / jnp.abs(a).max()) for a, b in zip(one, got)]
    print(json.dumps(out))
    """
)


def _model():
    return lbdl_dsl.compile(REPO / "specs" / "resnet18.lbdl", **SIZES)


def test_out_on_tensor_beside_fsdp_with_data_is_refused_naming_a_correct_mesh() -> None:
    checked = _model().checked
    mesh = parse_mesh("data=2,fsdp=2,tensor=2")
    with pytest.raises(LbdlError) as err:
        resolve(checked, mesh, parse_rules(["fsdp", "out=tensor"], mesh))
    text = str(err.value)
    assert "XLA's partitioner computes wrong gradients" in text
    assert "--mesh fsdp=4,tensor=2" in text
    folded = parse_mesh("fsdp=4,tensor=2")  # the hint's mesh is accepted
    layout = resolve(checked, folded, parse_rules(["fsdp", "out=tensor"], folded))
    assert layout.batch == ("fsdp",)


def test_the_same_rule_without_a_second_batch_axis_or_tensor_split_is_accepted() -> None:
    checked = _model().checked
    for mesh_text, rules in (("data=2,tensor=2", ["out=tensor"]), ("data=2,fsdp=2", ["fsdp"])):
        mesh = parse_mesh(mesh_text)
        assert resolve(checked, mesh, parse_rules(rules, mesh)).arrays


def test_lbdl_check_refuses_it_with_exit_1(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = ["check", "specs/resnet18.lbdl", "--set", "W=8", "I=32", "classes=10",
            "--mesh", "data=2,fsdp=2,tensor=2", "--shard", "fsdp", "out=tensor"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "lbdl_dsl", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "--mesh fsdp=4,tensor=2" in done.stderr


def test_the_plain_jax_reproducer_still_reproduces() -> None:
    """When this fails, XLA computes the layout right: lift `_partitioner_hazard`'s refusal."""
    env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0")
    env.pop("JAX_NUM_CPU_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", REPRODUCER], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rel = json.loads(done.stdout.strip().splitlines()[-1])
    assert max(rel["fsdp"]) < 1e-5  # the batch over one axis: right
    assert rel["data,fsdp"][0] > 0.5, "XLA now partitions this layout right: lift the refusal"
