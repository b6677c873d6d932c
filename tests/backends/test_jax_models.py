"""Whole models through the JAX backend: shapes, training, scan, the emitted module, files."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax import storage, weights
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.cli.compat import main
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]


def _compiled(spec: str, *, stacked: bool = False, **kwargs):
    """The model, or with ``stacked`` the model as if every ×N group were too long to keep its
    copies apart (`storage`): a scan over stacked arrays."""
    with pytest.MonkeyPatch.context() as patch:
        if stacked:
            patch.setattr(storage, "per_copy", lambda inst: False)
        return lbdl_dsl.compile(spec, **kwargs)


def _apart(model, tree: dict) -> dict:
    """A stacked model's ``params`` or ``state`` as ``model`` (copies apart) stores them: each
    stored array cut from its stacked array (the stacked view is the stacked model's layout)."""
    flat = weights.flatten(tree)
    stored = {}
    for arr in storage.stored(model.checked.root):
        if arr.path in model.module["PARAMS"] or arr.path in model.module["STATE"]:
            whole = flat.get(arr.view or arr.path)
            if whole is not None:
                stored[arr.path] = whole[arr.copy] if arr.copy else whole
    return unflatten(stored)


SPECS = sorted((REPO / "specs").glob("*.lbdl"))

# Reduced sizes, so that every spec traces in a blink; shapes are checked, nothing is run.
SMALL: dict[str, dict] = {
    "gpt": dict(T=16, N=2),
    "gpt2": dict(N=2, T=16),
    "gpt3": dict(N=2, D=64, H=4, T=16),
    "bert-base": dict(T=16, N=2),
    "lstm-lm": dict(T=16),
    "transformer": dict(T=16, S=12, N=2),
    "transformer_blocks": dict(T=8, S=6),
    "whisper": dict(S=8),
    "vit-b16": dict(N=2),
    "resnet50-torchvision": dict(I=64),
    "llama2-7b": dict(N=2, D=64, H=4, F=172, V=100, T=16),
    "mistral-7b": dict(N=2, D=64, H=4, KV=2, F=128, V=100, W=8, T=16),
    "llama3-8b": dict(N=2, D=64, H=4, KV=2, F=128, V=100, C=16, T=16),
    "gemma-7b": dict(N=2, D=64, H=4, KV=4, Dh=16, F=128, V=100, T=16),
    "qwen2-7b": dict(N=2, D=64, H=4, KV=2, F=128, V=100, T=16),
    "qwen3-8b": dict(N=2, D=64, H=4, KV=2, Dh=16, F=128, V=100, T=16),
    "gemma2-9b": dict(N=2, D=64, H=4, KV=2, Dh=16, F=128, V=100, W=8, T=16),
    "gemma3-4b": dict(G=1, R=1, D=64, H=4, KV=2, Dh=16, F=128, V=100, W=8, T=16),
    "qwen3-30b-a3b": dict(N=2, D=64, H=4, KV=2, Dh=16, F=32, E=8, K=2, V=100, T=16),
    "phi3-mini": dict(N=2, D=64, H=4, KV=2, F=128, V=100, W=8, T=16),
    "olmo2-13b": dict(N=2, D=64, H=4, KV=2, F=128, V=100, T=16),
    "mixtral-8x7b": dict(N=2, D=64, H=4, KV=2, F=128, E=4, V=100, T=16),
    "t5-small": dict(N=2, D=32, H=4, F=64, V=100, T=12, S=10),
    "mamba-130m": dict(N=2, D=32, V=100, T=16),
}


def _compile(path: Path, **extra):
    return lbdl_dsl.compile(str(path), **(SMALL.get(path.stem, {}) | extra))


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_checker_shapes_equal_eval_shape(spec):
    """The checker's output shapes are exactly what the generated code computes."""
    model = _compile(spec)
    params, state = jax.eval_shape(model.init, jax.random.key(0))
    inputs = [
        jax.ShapeDtypeStruct((3, *shape), jnp.dtype(dtype))
        for shape, dtype in model.inputs.values()
    ]
    out, new_state = jax.eval_shape(
        lambda p, s, *x: model.apply(p, s, *x, train=True, key=jax.random.key(1)),
        params,
        state,
        *inputs,
    )
    want = {k: (3, *v) for k, v in model.outputs.items()}
    got = (
        {k: v.shape for k, v in out.items()}
        if isinstance(out, dict)
        else {next(iter(want)): out.shape}
    )
    assert got == want
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    counted = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(params))
    assert counted == model.param_count


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_spec_runs_forward(spec):
    """Every spec of the library really runs (jitted, one sample) to finite outputs."""
    model = _compile(spec)
    params, state = model.init(jax.random.key(0))
    inputs = model.example_inputs(jax.random.key(1), batch=1)
    out, _ = model.jit_apply(params, state, *inputs)
    for name, value in out.items() if isinstance(out, dict) else [("", out)]:
        assert np.isfinite(np.asarray(value)).all(), name


def _loss(model, output_key=None):
    """Cross-entropy of the (first) output against integer targets of its leading shape."""

    def loss(params, state, inputs, targets, key):
        out, new_state = model.apply(params, state, *inputs, train=True, key=key)
        logits = out[output_key] if output_key else out
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        return ce.mean(), new_state

    return loss


# (spec, overrides, output, learning rate). The rate is one at which four steps of plain SGD
# lower the loss at every step: ResNet-50 on two 64² images (batch norm over two samples) and
# LeNet overshoot at 0.01, where the loss went 6.9, 1.3, 4.8, 7.5 on one CPU and fell below
# its start on another. A test that reads a chaotic trajectory tests the CPU's rounding.
TRAINING = [
    ("mlp", {}, None, 0.01),
    ("lenet", {}, None, 0.003),
    ("resnet50", {"H": 64, "W": 64}, None, 0.001),
    ("gpt", {"N": 2, "D": 32, "H": 4, "V": 50, "T": 12}, None, 0.01),
    ("transformer", {"N": 1, "D": 32, "H": 4, "F": 64, "V": 40, "T": 10, "S": 9}, None, 0.01),
    ("vit", {"N": 1, "D": 32, "H": 4, "P": 8, "I": 32, "C": 10}, None, 0.01),
    ("llama2-7b", {"N": 2, "D": 32, "H": 4, "F": 86, "V": 50, "T": 12}, None, 0.01),
    (
        "mistral-7b",
        {"N": 2, "D": 32, "H": 4, "KV": 2, "F": 64, "V": 50, "T": 12, "W": 4},
        None,
        0.01,
    ),
]


@pytest.mark.parametrize("name,overrides,key,rate", TRAINING, ids=[t[0] for t in TRAINING])
def test_sgd_steps_reduce_the_loss(name, overrides, key, rate):
    model = lbdl_dsl.compile(str(REPO / "specs" / f"{name}.lbdl"), **overrides)
    params, state = model.init(jax.random.key(0))
    inputs = model.example_inputs(jax.random.key(1), batch=2)
    out_shape = next(iter(model.outputs.values()))
    classes = out_shape[-1]
    targets = jax.random.randint(jax.random.key(2), (2, *out_shape[:-1]), 0, classes)
    opt = optax.sgd(rate)
    opt_state = opt.init(params)
    grad = jax.jit(jax.value_and_grad(_loss(model, key), has_aux=True))

    @jax.jit  # one program, rather than every operation on every array compiled alone
    def sgd(grads, opt_state, params):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    losses = []
    for step in range(4):
        (loss, state), grads = grad(params, state, inputs, targets, jax.random.key(10 + step))
        params, opt_state = sgd(grads, opt_state, params)
        losses.append(float(loss))
    assert all(np.isfinite(losses)), losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_scan_and_unrolled_loops_give_the_same_numbers():
    spec = str(REPO / "specs" / "gpt.lbdl")
    small = dict(N=3, D=32, H=4, V=50, T=8)
    scanned = _compiled(spec, stacked=True, **small)
    unrolled = _compiled(spec, stacked=True, unroll=True, **small)
    assert "= scan_group(" in scanned.source and "= unrolled(" in unrolled.source
    assert "scan_group" not in unrolled.source
    params, state = scanned.init(jax.random.key(0))
    (ids,) = scanned.example_inputs(jax.random.key(1))
    a, _ = scanned.jit_apply(params, state, ids)
    b, _ = unrolled.jit_apply(params, state, ids)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)

    def grads(model):  # the scan's backward pass recomputes what it does not keep
        def loss(p):
            out, _ = model.apply(p, state, ids, train=True, key=jax.random.key(2))
            return jnp.mean(out**2)

        return jax.jit(jax.grad(loss))(params)

    ga, gb = grads(scanned), grads(unrolled)
    for path, x in jax.tree_util.tree_leaves_with_path(ga):
        y = gb
        for part in path:
            y = y[part.key]
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)


def test_copies_kept_apart_give_the_scans_numbers():
    """GPT's 2 blocks kept apart (`each_copy`) against the same blocks scanned over stacked
    arrays: the same outputs and gradients, copy for copy, dropout's keys included."""
    spec = str(REPO / "specs" / "gpt.lbdl")
    small = dict(N=2, D=32, H=4, V=50, T=8)
    apart, scanned = _compiled(spec, **small), _compiled(spec, stacked=True, **small)
    assert "= each_copy(" in apart.source and "scan_group" not in apart.source
    params, state = scanned.init(jax.random.key(0))
    mine, my_state = _apart(apart, params), _apart(apart, state)
    assert jax.tree.structure((mine, my_state)) == jax.tree.structure(apart.init(jax.random.key(0)))
    (ids,) = scanned.example_inputs(jax.random.key(1))
    key = jax.random.key(2)

    def loss(model, p, s):
        out, _ = model.apply(p, s, ids, train=True, key=key)
        return jnp.mean(out**2)

    a = jax.jit(lambda p: loss(scanned, p, state))
    b = jax.jit(lambda p: loss(apart, p, my_state))
    np.testing.assert_allclose(float(a(params)), float(b(mine)), rtol=1e-5)
    ga, gb = jax.jit(jax.grad(a))(params), jax.jit(jax.grad(b))(mine)
    flat_a, flat_b = weights.flatten(_apart(apart, ga)), weights.flatten(gb)
    assert flat_a.keys() == flat_b.keys() and any("/1/" in k for k in flat_b)
    for path, g in flat_b.items():
        np.testing.assert_allclose(np.asarray(g), np.asarray(flat_a[path]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("stacked", [False, True], ids=["apart", "stacked"])
def test_batchnorm_state_is_updated_through_groups(stacked: bool):
    model = _compiled(str(REPO / "specs" / "resnet50.lbdl"), stacked=stacked, H=32, W=32)
    params, state = model.init(jax.random.key(0))
    (x,) = model.example_inputs(jax.random.key(1))
    _, new_state = model.jit_apply(params, state, x, train=True, key=jax.random.key(2))
    if stacked:  # one row per copy
        before = state["repeat_0"]["resblock_0"]["residual_0"]["batchnorm_0"]["mean"]
        after = new_state["repeat_0"]["resblock_0"]["residual_0"]["batchnorm_0"]["mean"]
        assert before.shape == after.shape == (2, 64)
        assert not np.allclose(before[0], after[0]) and not np.allclose(before[1], after[1])
    else:  # each copy its own
        for k in ("0", "1"):
            before = state["repeat_0"][k]["resblock_0"]["residual_0"]["batchnorm_0"]["mean"]
            after = new_state["repeat_0"][k]["resblock_0"]["residual_0"]["batchnorm_0"]["mean"]
            assert before.shape == after.shape == (64,)
            assert not np.allclose(before, after)
    _, same = model.jit_apply(params, state, x)
    np.testing.assert_array_equal(
        np.asarray(same["batchnorm_0"]["var"]), np.asarray(state["batchnorm_0"]["var"])
    )


def test_causal_model_does_not_see_the_future():
    model = lbdl_dsl.compile(str(REPO / "specs" / "gpt.lbdl"), N=2, D=32, H=4, V=50, T=8)
    params, state = model.init(jax.random.key(0))
    ids = np.arange(16, dtype=np.int32).reshape(2, 8) % 50
    changed = ids.copy()
    changed[:, 5:] = (changed[:, 5:] + 7) % 50
    a, _ = model.apply(params, state, ids)
    b, _ = model.apply(params, state, changed)
    np.testing.assert_allclose(np.asarray(a)[:, :5], np.asarray(b)[:, :5], atol=1e-5)
    assert not np.allclose(np.asarray(a)[:, 5:], np.asarray(b)[:, 5:])


def test_emitted_module_is_the_model(tmp_path):
    """`--emit py` writes exactly the source the API runs; it stands alone and is formatted."""
    spec = REPO / "specs" / "lenet.lbdl"
    assert main([str(spec), "--emit", "py", "-o", str(tmp_path)]) == 0
    path = tmp_path / "lenet.py"
    model = lbdl_dsl.compile(str(spec))
    assert path.read_text(encoding="utf-8") == model.source
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(model.source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    # JAX and NumPy, and from the standard library what init_arrays' threads and memory need
    # and the names the copied functions' annotations use (lenet's conv: Callable, Any)
    base = {"jax", "jax.numpy", "numpy", "os", "concurrent.futures", "mmap"}
    assert base <= imported <= base | {"collections.abc", "typing"}
    standard = imported - {"jax", "jax.numpy", "numpy"}
    assert all(name.split(".")[0] in sys.stdlib_module_names for name in standard)
    module_spec = importlib.util.spec_from_file_location("lenet_generated", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    params, state = module.init(jax.random.key(0))
    (x,) = model.example_inputs(jax.random.key(1))
    a, _ = module.apply(params, state, x)
    b, _ = model.apply(params, state, x)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_generated_code_mirrors_the_spec():
    model = lbdl_dsl.compile(str(REPO / "specs" / "resnet50.lbdl"), H=64, W=64)
    src = model.source
    assert src.count("\ndef resblock(") == 1  # one body for the four stages' widths
    assert "\ndef dresblock(" in src and "\ndef dresblock_v(" in src  # strides 1 and 2
    assert "# resnet50.lbdl:10: conv-2d k=7 s=2 p=3 bias=false" in src
    assert "stride=(2, 2), padding=((3, 3), (3, 3))" in src
    # the third stage's five copies called in turn, without the checkpoint on a CPU
    call = 'each_copy( step_repeat_2, x, (params["repeat_2"], state["repeat_2"]), 0, 5, '
    call += "remat_on_cpu=False"
    assert call in " ".join(src.split())
    longer = lbdl_dsl.compile(str(REPO / "specs" / "resnet101.lbdl"))
    assert "jax.lax.scan" in longer.source and "= scan_group(" in longer.source  # 22 blocks


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_parameters_round_trip_through_a_file(tmp_path, suffix):
    model = lbdl_dsl.compile(str(REPO / "specs" / "resnet18.lbdl"), L1=1, L2=1, L3=1, L4=1)
    params, state = model.init(jax.random.key(0))
    path = model.save(tmp_path / f"resnet18{suffix}", params, state)
    loaded, loaded_state = model.load(path)
    assert jax.tree.structure(loaded) == jax.tree.structure(params)
    assert jax.tree.structure(loaded_state) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves((params, state)), jax.tree.leaves((loaded, loaded_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    keys = sorted(weights.read(path))
    assert "params/conv_2d_0/w" in keys and any(k.startswith("state/") for k in keys)
    other = lbdl_dsl.compile(str(REPO / "specs" / "mlp.lbdl"))
    with pytest.raises(LbdlError, match="do not fit this model") as err:
        other.load(path)
    assert "missing parameter `fc_1/w` (25, 10)" in str(err.value)


def test_a_file_of_the_stacked_layout_loads_copy_by_copy(tmp_path):
    """A file whose short ×N groups are stacked (what lbdl wrote before they kept their copies
    apart, or a stacked model's) loads into the model that keeps them apart, each copy cut
    from its stack: a group of two runs (`×3` whose first copy changes the shape) included."""
    text = "model m:\n  input X: 3×4×4\n  ×3:\n    conv-2d k=3 p=1  8×4×4\n    batchnorm\n"
    text += "  flatten\n  fc 2\n  output Y\n"
    spec = tmp_path / "m.lbdl"
    spec.write_text(text, encoding="utf-8")
    apart, stacked = _compiled(str(spec)), _compiled(str(spec), stacked=True)
    params, state = stacked.init(jax.random.key(0))
    assert params["repeat_0"]["0"]["conv_2d_0"]["w"].shape == (1, 3, 3, 3, 8)  # runs, stacked
    path = stacked.save(tmp_path / "old.safetensors", params, state)
    loaded, loaded_state = apart.load(path)
    want, want_state = _apart(apart, params), _apart(apart, state)
    assert loaded["repeat_0"]["2"]["conv_2d_0"]["w"].shape == (3, 3, 8, 8)
    for a, b in zip(jax.tree.leaves((want, want_state)), jax.tree.leaves((loaded, loaded_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(
        np.asarray(loaded["repeat_0"]["2"]["conv_2d_0"]["w"]),
        np.asarray(params["repeat_0"]["1"]["conv_2d_0"]["w"][1]),
    )
    # a stacked file of other sizes is still refused, with the stored layout's differences
    bad = {
        **weights.flatten(params),
        "repeat_0/1/conv_2d_0/w": np.zeros((2, 3, 3, 8, 9), np.float32),
    }
    path = weights.save(tmp_path / "bad.safetensors", unflatten(bad), state)
    with pytest.raises(LbdlError, match="do not fit this model"):
        apart.load(path)


def test_safetensors_files_are_plain_safetensors(tmp_path):
    from safetensors import safe_open

    model = lbdl_dsl.compile(str(REPO / "specs" / "mlp.lbdl"))
    params, state = model.init(jax.random.key(0))
    path = model.save(tmp_path / "mlp.safetensors", params, state)
    with safe_open(str(path), framework="numpy") as f:
        assert set(f.keys()) == {f"params/{k}" for k in model.module["PARAMS"]}
        w = f.get_tensor("params/fc_0/w")
    np.testing.assert_array_equal(w, np.asarray(params["fc_0"]["w"]))


def test_a_weights_file_of_the_wrong_shape_is_refused_with_every_difference(tmp_path):
    small = lbdl_dsl.compile(str(REPO / "specs" / "mlp.lbdl"))
    params, _ = small.init(jax.random.key(0))
    params["fc_0"]["w"] = params["fc_0"]["w"][:, :3]
    path = small.save(tmp_path / "bad.safetensors", params)
    with pytest.raises(LbdlError) as err:
        small.load(path)
    assert "`fc_0/w` has shape" in str(err.value)
    (tmp_path / "junk.safetensors").write_bytes(b"not a file")
    with pytest.raises(LbdlError, match="not a readable"):
        small.load(tmp_path / "junk.safetensors")


def test_parameter_paths_are_stable_and_readable():
    a = lbdl_dsl.compile(str(REPO / "specs" / "resnet50.lbdl"), H=32, W=32)
    b = lbdl_dsl.compile(str(REPO / "specs" / "resnet50.lbdl"), H=32, W=32)
    assert list(a.module["PARAMS"]) == list(b.module["PARAMS"])
    assert "dresblock_1/residual_0/shortcut/conv_2d_0/w" in a.module["PARAMS"]
    assert a.source == b.source


def test_bfloat16_computes_in_bfloat16_with_float32_parameters():
    spec = str(REPO / "specs" / "lenet.lbdl")
    f32, bf16 = lbdl_dsl.compile(spec), lbdl_dsl.compile(spec, dtype="bfloat16")
    params, state = f32.init(jax.random.key(0))
    (x,) = f32.example_inputs(jax.random.key(1))
    a, _ = f32.apply(params, state, x)
    b, _ = bf16.apply(params, state, x)
    assert b.dtype == jnp.float32 and "jnp.bfloat16" in bf16.source
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0.1, atol=0.1)


def test_run_flag_prints_shapes_and_times(capsys):
    assert main([str(REPO / "specs" / "mlp.lbdl"), "--check", "--run", "--batch", "3"]) == 0
    out = capsys.readouterr().out
    assert "Y: (3, 2)" in out
    assert "compile" in out and "step" in out


def test_words_and_flags_given_to_a_block_reach_its_code():
    """`act=act` in a block called with relu and with gelu-tanh computes each, not one for both."""
    block = "block b(act=gelu, bias=true) on X: T×D:\n  ffw hidden=8 act=act p=0\n"
    block += "  fc bias=bias  T×D\n"
    x = jax.random.normal(jax.random.key(1), (2, 4, 6))

    def run(body: str, params=None) -> tuple:
        text = f"{block}\nmodel m:\n  input X: 4×6\n{body}  output Y\n"
        model = lbdl_dsl.compile("b.lbdl", text=text)
        fresh, state = model.init(jax.random.key(0))
        params = fresh if params is None else params
        return model, params, np.asarray(model.apply(params, state, x)[0])

    model, params, via_block = run("  b act=relu bias=false\n  b act=gelu-tanh\n")
    assert "relu(" in model.source and "gelu(" in model.source
    inline = "  ffw hidden=8 act=relu p=0\n  fc bias=false  4×6\n"
    inline += "  ffw hidden=8 act=gelu-tanh p=0\n  fc  4×6\n"
    same = {f"{op}_{i}": params[f"b_{i}"][f"{op}_0"] for op in ("ffw", "fc") for i in (0, 1)}
    _, _, written_out = run(inline, same)
    np.testing.assert_allclose(written_out, via_block, rtol=1e-6)
    _, _, swapped = run("  b act=gelu-tanh bias=false\n  b act=relu\n", params)
    assert not np.allclose(swapped, via_block)


def test_example_inputs_are_drawn_on_the_host_and_the_same_under_jit_and_vmap() -> None:
    text = (
        "model m:\n  input M: 5 bool\n  input X: 5×8\n  input I: 5 int<7>\n"
        "  embed d=8\n  +(X)\n  self-att(M) h=2\n  output Y\n"
    )
    model = lbdl_dsl.compile("m.lbdl", text=text)
    key = jax.random.key(3)
    eager = model.example_inputs(key, batch=4)
    assert [(a.shape, a.dtype) for a in eager] == [
        ((4, 5), jnp.bool_),
        ((4, 5, 8), jnp.float32),
        ((4, 5), jnp.int32),
    ]
    mask, x, tokens = (np.asarray(a) for a in eager)
    assert tokens.min() >= 0 and tokens.max() < 7 and 0 < mask.sum() < mask.size
    assert np.unique(x).size == x.size and abs(x.mean()) < 0.5 and 0.6 < x.std() < 1.4
    # NumPy's stream for the key's words and the input's position: nothing for XLA to compile
    words = [int(w) for w in np.asarray(jax.random.key_data(key), np.uint32)]
    stream = np.random.Generator(np.random.PCG64(np.random.SeedSequence([*words, 1])))
    assert np.array_equal(x, stream.standard_normal((4, 5, 8), dtype=np.float32))
    other = model.example_inputs(jax.random.key(4), 4)[1]
    assert not np.array_equal(x, np.asarray(other))  # a function of the key
    jitted = jax.jit(model.example_inputs, static_argnums=1)(key, 4)
    assert all(np.array_equal(a, b) for a, b in zip(eager, jitted, strict=True))
    keys = jax.random.split(key, 2)
    batched = jax.vmap(lambda k: model.example_inputs(k, 4))(keys)
    assert np.array_equal(batched[1][1], np.asarray(model.example_inputs(keys[1], 4)[1]))
    model.apply(*model.init(jax.random.key(0)), *eager)  # inputs the model takes
    with pytest.raises(LbdlError, match="batch must be a whole number"):
        model.example_inputs(key, 0)


def test_a_model_trains_the_same_with_an_accelerators_plain_convolutions() -> None:
    # off a CPU the module's `conv` is one conv_general_dilated with JAX's gradient rules
    # (runtime.plain_convolutions); a ×N group of pointwise, strided, grouped and padded
    # convolutions gives the loss and gradients of the CPU's way
    text = """\
block unit(C) on C×H×W:
  conv-2d k=1 bias=false        2C×H×W
  relu
  conv-2d k=3 p=1 g=2C          2C×H×W
  conv-2d k=1                   C×H×W

model m:
  input X: 4×12×12
  conv-2d k=1 s=2               8×6×6
  unit ×3 C=8                   8×6×6
  conv-2d k=3 p=2 d=2           6×6×6
  output Y
"""
    model = lbdl_dsl.compile("m.lbdl", text=text)
    assert "if plain_convolutions():" in model.source
    params, state = model.init(jax.random.key(0))
    (x,) = model.example_inputs(jax.random.key(1), batch=2)

    def loss(p, x):
        return jnp.mean(jnp.square(model.apply(p, state, x)[0]))

    on_cpu = jax.jit(jax.value_and_grad(loss))(params, x)
    model.module["plain_convolutions"] = lambda: True
    plain = jax.jit(jax.value_and_grad(loss))(params, x)
    np.testing.assert_allclose(plain[0], on_cpu[0], rtol=1e-5)
    for got, want in zip(jax.tree.leaves(plain[1]), jax.tree.leaves(on_cpu[1]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    hlo = jax.jit(jax.grad(loss)).lower(params, x).as_text()
    assert "dot_general" not in hlo  # the 1×1 kernels too stay convolutions
