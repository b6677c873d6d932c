"""The runtime side of sharding in this process (one CPU device): blocks of the init, the mesh,
the generated module's ROLES table, jax.distributed's set-up and the ``lbdl launch`` verb.

What needs several devices runs in test_sharding_devices.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl import cli as main
from lbdl_dsl.backends.jax import distributed, shard_init, storage
from lbdl_dsl.backends.jax.runtime.inits import init_arrays
from lbdl_dsl.backends.jax.sharding import Sharded, make_mesh
from lbdl_dsl.cli.launch import environments
from lbdl_dsl.compiler.sharding import parse_mesh
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]
GPT = {"N": 2, "D": 32, "H": 4, "V": 64, "T": 16}


def _random_block(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[slice, ...]:
    out = []
    for n in shape:
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo + 1, n + 1))
        out.append(slice(lo, hi) if rng.random() < 0.7 else slice(None))
    return tuple(out)


def test_any_block_is_drawn_bit_for_bit_as_in_the_whole_init() -> None:
    # odd sizes put arrays at odd offsets of the stream (half a 64-bit output), constants draw
    # nothing, a scalar is one number, and a long run crosses init_arrays' 1 MB chunks
    table = {
        "a": ((3, 5), "fan_in", 5.0),
        "c": ((7,), "const", 1.0),
        "b": ((4, 6, 9), "std", 0.02),
        "s": ((), "fan_in", 1.0),
        "e": ((2, 3, 100_003), "fan_in", 3.0),
    }
    key = np.array([0, 42], np.uint32)
    whole = dict(zip(table, init_arrays(key, table)))
    starts = shard_init.offsets(table)
    stream = shard_init.Stream(key)
    rng = np.random.default_rng(0)
    for _ in range(200):
        path = list(table)[int(rng.integers(len(table)))]
        index = _random_block(rng, table[path][0])
        got = shard_init.block(stream, table[path], starts[path], index)
        np.testing.assert_array_equal(got, whole[path][index], err_msg=f"{path}{index}")


def test_a_one_device_mesh_gives_model_init_and_the_layouts_shardings() -> None:
    model = lbdl_dsl.compile(REPO / "specs" / "gpt.lbdl", **GPT)
    sharded = Sharded.of(model, "data=1,fsdp=1,tensor=1", ["fsdp+tp"])
    params, state = sharded.init(model, jax.random.PRNGKey(5))
    ref, _ = model.init(jax.random.PRNGKey(5))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    wq = params["repeat_0"]["1"]["tlayer_0"]["self_att_0"]["att"]["wq"]  # the second block's
    assert tuple(wq.sharding.spec) == ("fsdp", "tensor")
    assert tuple(sharded.batch(2).spec) == (("data", "fsdp"), None)
    (x,) = sharded.put_batch([np.zeros((4, 16), np.int32)])
    assert x.shape == (4, 16) and tuple(x.sharding.spec)[0] == ("data", "fsdp")


def test_a_mesh_needs_as_many_devices_as_its_sizes_multiply_to() -> None:
    with pytest.raises(LbdlError) as info:
        make_mesh(parse_mesh("data=2,tensor=2"))
    message = info.value.render()
    assert "needs 4 devices, and there are 1" in message
    assert "JAX_NUM_CPU_DEVICES=4" in message and "lbdl launch" in message


@pytest.mark.parametrize("spec", ["gpt.lbdl", "resnet18.lbdl"])
def test_the_generated_module_names_each_axis_role(spec: str) -> None:
    # GPT deep enough that its blocks stay stacked (`storage`): their axis is `layers`
    overrides = {**GPT, "N": storage.PER_COPY_ANY + 1} if spec == "gpt.lbdl" else {}
    module = lbdl_dsl.compile(REPO / "specs" / spec, **overrides).module
    tables = {**module["PARAMS"], **module["STATE"]}
    assert list(module["ROLES"]) == list(tables)
    for path, roles in module["ROLES"].items():
        assert len(roles) == len(tables[path][0]), path
    if spec == "gpt.lbdl":
        assert module["ROLES"]["repeat_0/tlayer_0/ffw_0/fc1/w"] == ("layers", "in", "mlp")
    else:
        assert module["ROLES"]["conv_2d_0/w"] == ("kernel", "kernel", "in", "out")


# -- jax.distributed -----------------------------------------------------------------------------


def test_processes_come_from_flags_a_launcher_or_a_cluster() -> None:
    kwargs, source = distributed.detect("10.0.0.1:1234", 4, 2, env={})
    assert source == "flags" and kwargs == {
        "coordinator_address": "10.0.0.1:1234",
        "num_processes": 4,
        "process_id": 2,
    }
    env = environments(2, 5555, 2, {})[1]
    kwargs, source = distributed.detect(env=env)
    assert source == "lbdl launch" and kwargs["process_id"] == 1
    assert kwargs["local_device_ids"] == [2, 3] and env["JAX_NUM_CPU_DEVICES"] == "2"
    assert distributed.detect(env={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "8"}) == ({}, "SLURM")
    assert distributed.detect(env={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"})[1] == "single process"
    ompi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    assert distributed.detect(env=ompi) == ({}, "Open MPI")
    assert distributed.detect(env={"LBDL_DISTRIBUTED": "auto"}) == ({}, "auto-detected")
    assert distributed.initialize() == distributed.Processes(0, 1, "single process")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("10.0.0.1:1234", 4, None), "go together"),
        (("10.0.0.1", 4, 0), "is not HOST:PORT"),
        (("10.0.0.1:1234", 4, 4), "the id must be 0 to N-1"),
    ],
)
def test_bad_process_flags_are_user_errors(args: tuple, says: str) -> None:
    with pytest.raises(LbdlError, match=says):
        distributed.detect(*args, env={})


def test_each_process_feeds_its_own_rows() -> None:
    rows = [distributed.process_rows(12, i, 3) for i in range(3)]
    assert [(r.start, r.stop) for r in rows] == [(0, 4), (4, 8), (8, 12)]
    with pytest.raises(LbdlError, match="does not split over 5 processes"):
        distributed.process_rows(12, 0, 5)


# -- lbdl launch ---------------------------------------------------------------------------------


def test_launch_runs_n_processes_with_their_rank(capfd: pytest.CaptureFixture[str]) -> None:
    code = "import os; print(os.environ['LBDL_PROCESS_ID'], os.environ['LBDL_NUM_PROCESSES'])"
    assert main.main(["launch", "-n", "3", "--force", "--", sys.executable, "-c", code]) == 0
    lines = sorted(capfd.readouterr().out.splitlines())
    assert lines == ["0 3", "[1] 1 3", "[2] 2 3"]


def test_the_first_failure_stops_the_others_and_is_the_exit_code() -> None:
    code = (
        "import os, sys, time\n"
        "if os.environ['LBDL_PROCESS_ID'] == '1': sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lbdl_dsl",
            "launch",
            "-n",
            "2",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3 and time.monotonic() - start < 30


def test_launch_without_a_command_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["launch", "-n", "2"]) == 1
    assert "no command" in capsys.readouterr().err


# -- the layer lbdl train stands on --------------------------------------------------------------


class _TrainState(NamedTuple):
    step: Any
    params: Any
    state: Any
    opt_state: Any
    key: Any


def test_parallel_runs_a_train_state_step_like_one_device() -> None:
    import argparse

    import jax.numpy as jnp
    import optax

    from lbdl_dsl.cli import mesh_flags

    model = lbdl_dsl.compile(REPO / "specs" / "mlp.lbdl")
    tx = optax.adam(1e-2)

    def train_step(ts: _TrainState, batch: dict):
        def loss(params):
            y, _ = model.apply(params, ts.state, batch["x"])
            return jnp.mean((y - batch["y"]) ** 2)

        value, grads = jax.value_and_grad(loss)(ts.params)
        updates, opt_state = tx.update(grads, ts.opt_state, ts.params)
        params = optax.apply_updates(ts.params, updates)
        return _TrainState(ts.step + 1, params, ts.state, opt_state, ts.key), {"loss": value}

    p = argparse.ArgumentParser()
    mesh_flags.add_parallel_arguments(p)
    assert mesh_flags.parallel(p.parse_args([]), model) is None
    par = mesh_flags.parallel(p.parse_args(["--mesh", "data=1", "--shard", "in=data"]), model)
    assert par is not None and par.is_main and par.rows(8) == slice(0, 8)
    key = jax.random.PRNGKey(0)
    ts = par.init_state(_TrainState, model, tx, key, jax.random.key(1))
    host = {"x": np.ones((8, 50), np.float32), "y": np.zeros((8, 2), np.float32)}
    step = par.jit(train_step, ts, tx)
    params, state = model.init(key)
    plain = _TrainState(jnp.zeros((), jnp.int32), params, state, tx.init(params), key)
    plain_step = jax.jit(train_step)
    for _ in range(2):
        ts, metrics = step(ts, par.put(host))
        plain, plain_metrics = plain_step(plain, host)
        assert float(metrics["loss"]) == pytest.approx(float(plain_metrics["loss"]), rel=1e-6)
    assert int(ts.step) == 2
    w = ts.params["fc_0"]["w"]
    assert tuple(w.sharding.spec) == ("data", None)  # in=data
    with pytest.raises(LbdlError, match="--shard: needs a mesh"):
        mesh_flags.parallel(p.parse_args(["--shard", "fsdp"]), model)
