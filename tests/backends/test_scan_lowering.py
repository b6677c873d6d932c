"""The `scan h: H:` group through the JAX backend: an Elman RNN written as one step, against a
NumPy loop written here and against the `rnn` box given the same weights; its gradient; the
checker's output shape against `jax.eval_shape` of the generated module; the module's text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl

REPO = Path(__file__).resolve().parents[2]

ELMAN = """\
model elman(D=5, H=7):
  input X: T×D
  scan h: H:
    fc out=H          -> wx
    from h
    fc out=H
    +(wx)
    tanh
  output Y
"""

BOX = "model box(D=5, H=7):\n  input X: T×D\n  rnn h=H\n  output Y\n"


LSTM = """\
model lstm_scan(D=5, H=7):
  input X: T×D
  scan hc: 2H:
    -> x
    from hc
    slice stop=H                -> h
    from hc
    slice start=H               -> c
    from x
    fc out=4H                   -> gx
    from h
    fc out=4H
    +(gx)                       -> g
    slice stop=H
    sigmoid                     -> i
    from g
    slice start=H stop=2H
    sigmoid                     -> f
    from g
    slice start=2H stop=3H
    tanh                        -> u
    from g
    slice start=3H
    sigmoid                     -> o
    from f
    mul(c)                      -> kept
    from i
    mul(u)
    +(kept)                     -> c2
    tanh
    mul(o)
    concat(c2)
  output Y
"""


def _weights(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"w_ih": (5, 7), "w_hh": (7, 7), "b_ih": (7,), "b_hh": (7,)}
    return {k: rng.normal(0, 0.5, size=s).astype(np.float32) for k, s in shapes.items()}


def _loop(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """h_t = tanh(W_ih x_t + b_ih + W_hh h_(t−1) + b_hh) from h_0 = 0, step by step."""
    x = x.astype(np.float64)
    h = np.zeros((x.shape[0], w["w_hh"].shape[0]))
    out = []
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ w["w_ih"] + w["b_ih"] + h @ w["w_hh"] + w["b_hh"])
        out.append(h)
    return np.stack(out, axis=1)


def _scan_params(w: dict[str, np.ndarray]) -> dict:
    return {
        "scan_0": {
            "wx": {"w": jnp.asarray(w["w_ih"]), "b": jnp.asarray(w["b_ih"])},
            "fc_0": {"w": jnp.asarray(w["w_hh"]), "b": jnp.asarray(w["b_hh"])},
        }
    }


def test_an_elman_step_scanned_is_the_loop_and_the_rnn_box() -> None:
    w = _weights()
    x = np.random.default_rng(0).normal(size=(3, 6, 5)).astype(np.float32)
    scan = lbdl_dsl.compile("elman.lbdl", text=ELMAN, T=6)
    params, state = scan.init(jax.random.key(0))
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, _scan_params(w))
    y, _ = scan.apply(_scan_params(w), state, x)
    np.testing.assert_allclose(np.asarray(y), _loop(x, w), rtol=1e-5, atol=1e-5)
    box = lbdl_dsl.compile("box.lbdl", text=BOX, T=6)
    _, bstate = box.init(jax.random.key(0))
    yb, _ = box.apply({"rnn_0": {k: jnp.asarray(v) for k, v in w.items()}}, bstate, x)
    np.testing.assert_allclose(np.asarray(y), np.asarray(yb), rtol=1e-5, atol=1e-5)


def test_an_lstm_step_with_its_two_carries_packed_in_one_is_the_lstm_box() -> None:
    """An LSTM carries (h, c): one carry of 2H, cut with `slice` and joined with `concat`; its
    parameters are the `lstm` box's (4 gates in PyTorch's order i, f, g, o), and so is h."""
    rng = np.random.default_rng(3)
    shapes = {"w_ih": (5, 28), "w_hh": (7, 28), "b_ih": (28,), "b_hh": (28,)}
    w = {k: jnp.asarray(rng.normal(0, 0.5, size=s).astype(np.float32)) for k, s in shapes.items()}
    x = rng.normal(size=(2, 6, 5)).astype(np.float32)
    scan = lbdl_dsl.compile("lstm.lbdl", text=LSTM, T=6)
    box = lbdl_dsl.compile("box.lbdl", text=BOX.replace("rnn", "lstm"), T=6)
    assert scan.param_count == box.param_count == 392
    packed = {"gx": {"w": w["w_ih"], "b": w["b_ih"]}, "fc_0": {"w": w["w_hh"], "b": w["b_hh"]}}
    y, _ = scan.apply({"scan_0": packed}, scan.init(jax.random.key(0))[1], x)
    yb, _ = box.apply({"lstm_0": w}, box.init(jax.random.key(0))[1], x)
    assert y.shape == (2, 6, 14)
    np.testing.assert_allclose(np.asarray(y[..., :7]), np.asarray(yb), rtol=1e-5, atol=1e-5)


def test_gradients_reach_the_shared_weights_from_every_step() -> None:
    w = _weights()
    x = np.random.default_rng(2).normal(size=(2, 4, 5)).astype(np.float32)
    scan = lbdl_dsl.compile("elman.lbdl", text=ELMAN, T=4)
    _, state = scan.init(jax.random.key(0))

    def loss(p: dict) -> jax.Array:
        return jnp.sum(scan.apply(p, state, x)[0][:, -1])  # the last step reads all before it

    grad = jax.grad(loss)(_scan_params(w))
    eps, key = 1e-3, ("scan_0", "fc_0", "w")
    bumped = _scan_params(w)
    bumped[key[0]][key[1]][key[2]] = bumped[key[0]][key[1]][key[2]].at[2, 3].add(eps)
    numeric = (loss(bumped) - loss(_scan_params(w))) / eps
    assert abs(float(grad[key[0]][key[1]][key[2]][2, 3]) - float(numeric)) < 1e-2


def test_the_checker_shape_is_what_jax_computes_and_the_carry_may_start_from_an_input() -> None:
    text = (
        "model m(D=4):\n  input X: T×D\n  input S: 3\n  from X\n"
        "  scan h: 3 = S:\n    concat(h)\n    fc out=3\n    relu\n  output Y\n"
    )
    model = lbdl_dsl.compile("m.lbdl", text=text, T=9)
    params, state = model.init(jax.random.key(0))
    x = jax.ShapeDtypeStruct((2, 9, 4), jnp.float32)
    s = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    out = jax.eval_shape(lambda a, b: model.apply(params, state, a, b)[0], x, s)
    assert out.shape[1:] == model.outputs["Y"] == (9, 3)
    start = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    xs = np.random.default_rng(1).normal(size=(2, 9, 4)).astype(np.float32)
    y, _ = model.apply(params, state, xs, start)
    p = {k: np.asarray(v) for k, v in params["scan_0"]["fc_0"].items()}
    h = start
    for t in range(9):  # concat(h): x_t then h, then fc and relu
        h = np.maximum(np.concatenate([xs[:, t], h], -1) @ p["w"] + p["b"], 0)
        np.testing.assert_allclose(np.asarray(y[:, t]), h, rtol=1e-5, atol=1e-5)


def test_the_module_runs_jax_lax_scan_and_is_formatted() -> None:
    source = lbdl_dsl.compile("elman.lbdl", text=ELMAN, T=6).source
    assert "def step_scan_0(h, x_t):" in source
    assert "jax.lax.scan(step_scan_0, h_0, jnp.swapaxes(X, 0, 1))" in source
    ruff = [sys.executable, "-m", "ruff", "format", "--isolated", "--line-length", "100"]
    done = subprocess.run(
        [*ruff, "--diff", "--stdin-filename", "m.py", "-"],
        input=source.encode(),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode()


def test_onnx_refuses_the_group_by_name_and_line_and_exports_it_traced(tmp_path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    from lbdl_dsl.backends.jax import weights as files
    from lbdl_dsl.backends.onnx import to_onnx
    from lbdl_dsl.cli import main

    model = lbdl_dsl.compile("elman.lbdl", text=ELMAN, T=6)
    params, state = model.init(jax.random.key(0))
    flat = {k: np.asarray(v) for k, v in (files.flatten(params) | files.flatten(state)).items()}
    (refused,) = to_onnx(model.checked, flat).unsupported
    assert (refused.path, refused.op, refused.span.line) == ("scan_0", "scan", 3)
    assert "loop over the sequence" in refused.reason
    spec = REPO / "tests" / "fixtures" / "scan" / "elman.lbdl"
    out = tmp_path / "elman.onnx"
    assert main(["export", str(spec), "--set", "T=6", "-o", str(out)]) == 0
    err = capsys.readouterr().err  # not the `scan` box's refusal: the group traces
    assert "traced through jax2onnx: no ONNX lowering here for `scan` at elman.lbdl:4" in err
    assert "checked in onnxruntime" in err


def test_a_language_model_with_a_scan_decodes_from_its_carried_state() -> None:
    """Decoding keeps the carry as the group's cache (`scan_0/h`): each step's logits equal a
    full pass over the whole text, prompt prefilled in chunks, then one token at a time."""
    from lbdl_dsl.backends.jax.decode import Sampling
    from lbdl_dsl.compiler import decoding

    text = (
        "model lm(D=8, V=20):\n  input X: T int<V>\n  embed  T×D\n"
        + ELMAN.split("  input X: T×D\n")[1].replace("H", "D").replace("  output Y\n", "")
        + "  fc out=V\n  output P\n"
    )
    model = lbdl_dsl.compile("lm.lbdl", text=text)
    assert [a.path for a in decoding.cache_arrays(model.checked.root, 16)] == ["scan_0/h"]
    params, state = model.init(jax.random.key(0))
    ids = np.random.default_rng(1).integers(0, 20, (2, 9)).astype(np.int32)
    out = model.decoder.generate(
        params, ids, 5, Sampling(greedy=True), state=state, keep_logits=True
    )
    full = np.asarray(model.apply(params, state, jnp.asarray(out.ids[:, :-1]))[0])
    for step in range(5):
        np.testing.assert_allclose(out.logits[:, step], full[:, 8 + step], atol=1e-5, rtol=0)


def test_a_scan_inside_a_repeat_group_is_a_deep_rnn_with_stacked_layers() -> None:
    """×3 around a scan: the layers' arrays stacked (3, ...) under `repeat_0/scan_0`, the
    outer `jax.lax.scan` over layers running the inner one over positions."""
    text = "model deep(D=5):\n  input X: T×D\n  ×3:\n" + "".join(
        "  " + line + "\n"
        for line in ELMAN.split("  input X: T×D\n")[1].replace("H", "D").splitlines()[:-1]
    )
    model = lbdl_dsl.compile("deep.lbdl", text=text, T=6)
    params, state = model.init(jax.random.key(0))
    layers = params["repeat_0"]["scan_0"]
    assert layers["fc_0"]["w"].shape == (3, 5, 5) and model.param_count == 3 * 60
    x = np.random.default_rng(4).normal(size=(2, 6, 5)).astype(np.float32)
    y, _ = model.apply(params, state, x)
    ref = x
    for k in range(3):
        w = {
            "w_ih": np.asarray(layers["wx"]["w"][k]),
            "b_ih": np.asarray(layers["wx"]["b"][k]),
            "w_hh": np.asarray(layers["fc_0"]["w"][k]),
            "b_hh": np.asarray(layers["fc_0"]["b"][k]),
        }
        ref = _loop(ref, w)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-5)
