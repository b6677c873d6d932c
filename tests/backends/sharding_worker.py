"""Runs in a process of its own for tests/backends/test_sharding_devices.py; prints one JSON line.

Virtual CPU devices must be configured before JAX starts, which the test processes (pytest-xdist
workers) have long done; so the multi-device work runs here, in a fresh interpreter:

- ``devices OUT``: 4 virtual CPU devices. GPT (small) trained 3 Adam steps on one device, then
  under dp, fsdp, tp and fsdp+tp; ResNet (small, with batchnorm) under dp; XLA's argument bytes
  and the residuals the forward pass keeps for the backward pass, beside the checker's figures;
  the sharded init against ``model.init``; a checkpoint saved under fsdp (orbax) and restored
  onto the tp mesh.
- ``processes OUT``: one of 2 processes × 2 devices (started by ``lbdl launch``): GPT under fsdp
  over the 4 devices of both processes, each process feeding its half of the batch, against
  one device of its own; process 0 saves a checkpoint the test restores elsewhere.

Small models, and XLA's backend optimisations off (the test's XLA_FLAGS): compile time is most
of the cost, and none of the figures compared depends on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax

MODE = sys.argv[1]
OUT = Path(sys.argv[2])
if MODE == "devices":
    jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_numpy_rank_promotion", "raise")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import lbdl_dsl  # noqa: E402
from lbdl_dsl.backends.jax.parallel import Parallel  # noqa: E402
from lbdl_dsl.backends.jax.sharding import Sharded, restore_target  # noqa: E402
from lbdl_dsl.compiler.memory import per_device  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GPT = {"N": 2, "D": 32, "H": 4, "V": 64, "T": 16}
RESNET = """import "blocks/resnet.lbdl"
model tiny_resnet(classes=10):
  input X: 3×16×16
  conv-2d k=3 p=1 bias=false   8×16×16
  batchnorm
  relu
  basicblock
  dbasicblock                  16×8×8
  avgpool k=8                  16×1×1
  reshape                      16
  fc                           classes
  output Y
"""
LAYOUTS = {
    "dp": ("data=4", ["dp"]),
    "fsdp": ("data=2,fsdp=2", ["fsdp"]),
    "tp": ("data=2,tensor=2", ["tp"]),
    "fsdp+tp": ("fsdp=2,tensor=2", ["fsdp+tp"]),
}
BATCH, STEPS = 8, 3
TX = optax.adam(1e-2)


def gpt_loss(model):
    def loss(params, state, key, x):
        p, new_state = model.apply(params, state, x, train=True, key=key)
        logp = jax.nn.log_softmax(p[:, :-1], axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, x[:, 1:, None], axis=-1)), new_state

    return loss


def classifier_loss(model):
    def loss(params, state, key, x, y):
        logits, new_state = model.apply(params, state, x, train=True, key=key)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1)), new_state

    return loss


def make_step(loss):
    """A minimal optax step: what `lbdl train`'s is, with nothing else around it."""

    def step(params, state, opt_state, *batch):
        key = jax.random.PRNGKey(7)
        grad = jax.value_and_grad(loss, has_aux=True)
        (value, new_state), grads = grad(params, state, key, *batch)
        updates, opt_state = TX.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, value

    return step


def residual_bytes(model, loss, batch) -> int:
    """What XLA's compiled forward pass hands to the backward pass, less what it passes through
    unchanged (parameters, inputs): its activations, on one device for the per-device batch
    ``batch`` (jit's own choice of output shardings would replicate some of them)."""
    params, state = model.init(jax.random.PRNGKey(0))
    args = (params, state, *batch)

    def forward(params, state, *batch):
        return jax.vjp(lambda p: loss(p, state, jax.random.PRNGKey(7), *batch)[0], params)[1]

    closed = jax.make_jaxpr(forward)(*args)
    passed = {id(v) for v in closed.jaxpr.invars}
    compiled = jax.jit(forward).lower(*args).compile()
    shardings = jax.tree.leaves(compiled.output_shardings)
    total = 0
    for var, aval, sharding in zip(closed.jaxpr.outvars, closed.out_avals, shardings):
        if id(var) not in passed:
            total += int(np.prod(sharding.shard_shape(aval.shape))) * aval.dtype.itemsize
    return total


def train(model, loss, batch, sharded: Sharded | None, steps: int = STEPS) -> dict:
    """Losses of ``steps`` steps, XLA's argument bytes, and the final arrays."""
    key = jax.random.PRNGKey(0)
    if sharded is None:
        device = jax.local_devices()[0]
        params, state = jax.device_put(model.init(key), device)
        opt_state = jax.device_put(TX.init(params), device)
        args = [jax.device_put(b, device) for b in batch]
    else:
        params, state = sharded.init(model, key)
        opt_state = sharded.init_opt_state(TX, params)
        args = sharded.put_batch(batch)
    step = jax.jit(make_step(loss))
    compiled = step.lower(params, state, opt_state, *args).compile()
    out = {"arguments": int(compiled.memory_analysis().argument_size_in_bytes), "losses": []}
    for _ in range(steps):
        params, state, opt_state, value = compiled(params, state, opt_state, *args)
        out["losses"].append(float(value))
    out["arrays"] = (params, state, opt_state)
    return out


def checker(model, sharded: Sharded, per_device_batch: int) -> dict:
    whole, _ = per_device(model.checked, sharded.layout, [], batch=per_device_batch)
    return {
        "arguments": whole.arguments.as_int(),
        "activations": whole.activations.as_int(),
        "inputs": whole.inputs.as_int(),
    }


def flat(tree, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        out |= flat(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def trim(spec) -> tuple:
    spec = tuple(spec)
    while spec and spec[-1] is None:
        spec = spec[:-1]
    return spec


def specs_match(tree, sharded: Sharded) -> bool:
    """Every array lives where the compiler's layout says."""
    want = {p: trim(spec) for p, spec in sharded.stored[0].items()}
    got = {p: trim(a.sharding.spec) for p, a in flat(tree).items()}
    return want == got


def equal(a, b) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def tokens(n: int) -> np.ndarray:
    return np.asarray(jax.random.randint(jax.random.PRNGKey(1), (n, GPT["T"]), 0, GPT["V"]))


def four_devices() -> dict:
    model = lbdl_dsl.compile(REPO / "specs" / "gpt.lbdl", **GPT)
    loss = gpt_loss(model)
    batch = [tokens(BATCH).astype(np.int32)]
    ref = train(model, loss, batch, None)
    out: dict = {"gpt": {"reference": ref["losses"]}, "devices": len(jax.devices())}
    saved = None
    for name, (mesh, shard) in LAYOUTS.items():
        sharded = Sharded.of(model, mesh, shard)
        run = train(model, loss, batch, sharded)
        row = {"losses": run["losses"], "xla_arguments": run["arguments"]}
        row |= {"specs_match": specs_match(run["arrays"][0], sharded)}
        row["checker"] = checker(model, sharded, BATCH // sharded.layout.batch_pieces)
        if name == "fsdp":
            saved = (run["arrays"][0], run["arrays"][2])
        out["gpt"][name] = row
    sharded = Sharded.of(model, *LAYOUTS["fsdp+tp"])
    params, _ = sharded.init(model, jax.random.PRNGKey(3))
    whole, _ = model.init(jax.random.PRNGKey(3))
    out["init_equal"] = all(jax.tree.leaves(jax.tree.map(equal, params, whole)))
    out["gpt"]["xla_residuals"] = residual_bytes(model, loss, [batch[0][: BATCH // 4]])
    out["restore"] = restore_elsewhere(model, saved)
    out["resnet"] = resnet()
    return out


def restore_elsewhere(model, saved) -> dict:
    """Save (params, opt_state) split by fsdp; restore them onto the tp mesh."""
    import orbax.checkpoint as ocp

    path = (OUT / "ckpt").absolute()
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, {"params": saved[0], "opt_state": saved[1]})
    target = Sharded.of(model, *LAYOUTS["tp"])
    abstract = {
        "params": restore_target(saved[0], target.params()),
        "opt_state": restore_target(saved[1], target.opt_state(TX, saved[0])),
    }
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(path, abstract)
    same = jax.tree.map(equal, {"params": saved[0], "opt_state": saved[1]}, back)
    return {
        "equal": all(jax.tree.leaves(same)),
        "specs_match": specs_match(back["params"], target),
    }


def resnet() -> dict:
    path = OUT / "tiny_resnet.lbdl"
    path.write_text(RESNET, "utf-8")
    model = lbdl_dsl.compile(path, import_path=[REPO / "specs"])  # specs/blocks/resnet.lbdl
    loss = classifier_loss(model)
    key = jax.random.PRNGKey(2)
    x = np.asarray(jax.random.normal(key, (BATCH, 3, 16, 16)), np.float32)
    y = np.asarray(jax.random.randint(key, (BATCH,), 0, 10), np.int32)
    ref = train(model, loss, [x, y], None, steps=2)
    sharded = Sharded.of(model, *LAYOUTS["dp"])
    run = train(model, loss, [x, y], sharded, steps=2)
    mean = [np.asarray(a) for a in jax.tree.leaves(run["arrays"][1])]
    ref_mean = [np.asarray(a) for a in jax.tree.leaves(ref["arrays"][1])]
    return {
        "reference": ref["losses"],
        "dp": run["losses"],
        "state_close": all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(mean, ref_mean)),
        "xla_arguments": run["arguments"],
        "checker": checker(model, sharded, BATCH // sharded.layout.batch_pieces),
        "labels": BATCH // sharded.layout.batch_pieces * 4,
        "xla_residuals": residual_bytes(model, loss, [x[: BATCH // 4], y[: BATCH // 4]]),
    }


class TrainState(NamedTuple):
    """The shape of `lbdl train`'s state: what `Parallel` is written for."""

    step: Any
    params: Any
    state: Any
    opt_state: Any
    key: Any


def two_processes() -> dict:
    """Through `Parallel`, the thin layer `lbdl train --mesh` stands on."""
    model = lbdl_dsl.compile(REPO / "specs" / "gpt.lbdl", **GPT)
    par = Parallel.start(model, *LAYOUTS["fsdp"])  # joins the other process first
    loss = gpt_loss(model)
    everything = tokens(BATCH).astype(np.int32)
    ref = train(model, loss, [everything], None) if par.is_main else None

    def train_step(ts: TrainState, batch: dict):
        grad = jax.value_and_grad(loss, has_aux=True)
        (value, new_state), grads = grad(ts.params, ts.state, jax.random.PRNGKey(7), batch["x"])
        updates, opt_state = TX.update(grads, ts.opt_state, ts.params)
        params = optax.apply_updates(ts.params, updates)
        return TrainState(ts.step + 1, params, new_state, opt_state, ts.key), {"loss": value}

    key = jax.random.PRNGKey(0)
    ts = par.init_state(TrainState, model, TX, key, jax.random.key(9))  # a typed key
    step = par.jit(train_step, ts, TX)
    batch = par.put({"x": everything[par.rows(BATCH)]})
    losses = []
    for _ in range(STEPS):
        ts, metrics = step(ts, batch)
        losses.append(float(metrics["loss"]))
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save((OUT / "ckpt").absolute(), {"params": ts.params})
    if ref is not None:  # one device's parameters after the same steps, for the test
        reference = {k: np.asarray(v) for k, v in flat(ref["arrays"][0]).items()}
        np.savez(OUT / "reference.npz", **reference)
    processes = par.processes
    return {
        "process": processes.index,
        "processes": processes.count,
        "source": processes.source,
        "devices": len(jax.devices()),
        "local_devices": len(jax.local_devices()),
        "reference": ref["losses"] if ref is not None else None,
        "fsdp": losses,
        "specs_match": specs_match(ts.params, par.sharded),
        "step": int(ts.step),
    }


if __name__ == "__main__":
    result = four_devices() if MODE == "devices" else two_processes()
    print("RESULT " + json.dumps(result), flush=True)
