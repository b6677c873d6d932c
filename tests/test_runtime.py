"""Tests of the JAX runtime library against the NumPy references in ``numpy_ref``.

The runtime works channels-last; the references are channels-first, so inputs and outputs are
transposed with ``cl`` / ``cf``. Runtime functions are called through ``call``, which jits them
with every non-array argument static, as generated code does. Every test runs with 64-bit
floats enabled (scoped to this module by an autouse fixture) so comparisons can be tight.
"""

import mmap
import sys
from functools import cache, partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

_TESTS = Path(__file__).resolve().parent
for _p in (_TESTS, _TESTS.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import numpy_ref as ref  # noqa: E402

from lbdl_dsl.backends.jax.runtime import (  # noqa: E402
    activation,
    attention,
    conv,
    dense,
    inits,
    module,
    norm,
)

TOL = {"rtol": 1e-9, "atol": 1e-10}


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def rand(rng, *shape):
    return rng.standard_normal(shape)


def cl(x):
    """Channels-first array -> channels-last NumPy array."""
    return np.moveaxis(np.asarray(x), 1, -1)


def cf(x):
    """Channels-last array -> channels-first NumPy array."""
    return np.moveaxis(np.asarray(x), -1, 1)


@cache
def _jitted(fn, static: tuple, keywords: tuple, dynamic_keys: tuple):
    def bound(*args, **arrays):
        return fn(*args, **arrays, **dict(keywords))

    return jax.jit(bound, static_argnums=static)


def call(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` under ``jax.jit`` with every non-array argument static.

    This is how generated code calls the runtime (hyper-parameters are Python constants), and
    one compilation per call is much cheaper than compiling each primitive eagerly.
    """
    dynamic = (np.ndarray, jax.Array, dict)
    static = tuple(i for i, a in enumerate(args) if not isinstance(a, dynamic))
    arrays = {k: v for k, v in kwargs.items() if isinstance(v, dynamic)}
    keywords = tuple(sorted((k, v) for k, v in kwargs.items() if k not in arrays))
    return _jitted(fn, static, keywords, tuple(sorted(arrays)))(*args, **arrays)


# ---------------------------------------------------------------------------------------------
# Layout helpers, initialisers, dense
# ---------------------------------------------------------------------------------------------


def test_layout_roundtrip():
    x = jnp.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)
    y = module.to_channels_last(x)
    assert y.shape == (2, 4, 5, 3)
    np.testing.assert_array_equal(np.asarray(y), np.transpose(np.asarray(x), (0, 2, 3, 1)))
    np.testing.assert_array_equal(np.asarray(module.to_channels_first(y)), np.asarray(x))


INIT_TABLE = {
    "a/w": ((400, 300), "fan_in", 400.0),
    "a/b": ((300,), "const", 0.0),
    "n/scale": ((4,), "const", 1.0),
    "ls/gamma": ((6,), "const", 1e-6),
    "e/table": ((500, 200), "std", 0.02),
    "odd": ((3, 5), "fan_in", 3.0),
    "empty": ((0, 4), "fan_in", 0.0),
}


def test_init_table_laws():
    out = inits.init_table(jax.random.key(0), INIT_TABLE)
    assert list(out) == list(INIT_TABLE)
    for path, (shape, _, _) in INIT_TABLE.items():
        assert out[path].shape == shape and out[path].dtype == jnp.float32, path
    w, e = np.asarray(out["a/w"]), np.asarray(out["e/table"])
    assert abs(w.std() - np.sqrt(1 / 400)) < 0.001 and abs(w.mean()) < 0.001
    assert np.abs(w).max() <= np.sqrt(3 / 400) and np.abs(w).max() > 0.99 * np.sqrt(3 / 400)
    assert abs(e.std() - 0.02) < 0.0005
    assert not np.any(np.asarray(out["a/b"])) and np.all(np.asarray(out["n/scale"]) == 1)
    assert np.all(np.asarray(out["ls/gamma"]) == np.float32(1e-6))
    assert np.unique(np.asarray(out["odd"])).size == 15  # its own numbers, not a neighbour's
    arrays = inits.init_arrays(jax.random.key_data(jax.random.key(0)), INIT_TABLE)
    drawn = [a for a, row in zip(arrays, INIT_TABLE.values()) if row[1] in ("fan_in", "std")]
    assert all(a.ctypes.data % 64 == 0 for a in drawn if a.size)  # device_put need not copy


def test_init_table_is_a_function_of_the_key():
    key = jax.random.key(0)
    eager = inits.init_table(key, INIT_TABLE)

    def same(a: dict, b: dict) -> bool:
        return all(np.array_equal(np.asarray(a[p]), np.asarray(b[p])) for p in INIT_TABLE)

    assert same(eager, inits.init_table(key, INIT_TABLE))
    assert not same(eager, inits.init_table(jax.random.key(1), INIT_TABLE))
    assert same(eager, jax.jit(lambda k: inits.init_table(k, INIT_TABLE))(key))
    keys = jax.random.split(key, 2)
    batched = jax.vmap(lambda k: inits.init_table(k, INIT_TABLE))(keys)
    assert same({p: v[1] for p, v in batched.items()}, inits.init_table(keys[1], INIT_TABLE))
    old_style = inits.init_table(jax.random.PRNGKey(0), INIT_TABLE)  # raw uint32 keys too
    assert same(old_style, eager)
    with pytest.raises(ValueError, match="init takes one key, not"):
        inits.init_table(keys, INIT_TABLE)
    shapes = jax.eval_shape(lambda k: inits.init_table(k, INIT_TABLE), key)
    assert {p: s.shape for p, s in shapes.items()} == {p: r[0] for p, r in INIT_TABLE.items()}


def _one_stream(key_data, table: dict) -> list:
    """What init_arrays must give, written the plain way: every random number of the table
    drawn at once from one generator, then cut and scaled array by array."""
    entropy = [int(w) for w in np.asarray(key_data, np.uint32).ravel()]
    draw = np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy))).random
    sizes = [int(np.prod(s)) if how in ("fan_in", "std") else 0 for s, how, _ in table.values()]
    flat, at, out = draw(sum(sizes), dtype=np.float32), 0, []
    for (shape, how, arg), n in zip(table.values(), sizes):
        if not n:
            out.append(np.full(shape, arg if how == "const" else 0.0, np.float32))
            continue
        bound = np.float32(np.sqrt(3.0 / arg) if how == "fan_in" else np.sqrt(3.0) * arg)
        out.append((flat[at : at + n] * (np.float32(2.0) * bound) - bound).reshape(shape))
        at += n
    return out


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 64])
def test_init_arrays_threads_draw_the_one_stream(workers):
    # odd sizes start the threads' spans on high halves of the 64-bit outputs, the long array
    # crosses the 1 MB runs, and 64 workers are more than there are runs
    table = {
        "odd": ((3, 5), "fan_in", 3.0),
        "c": ((7,), "const", 1.0),
        "long": ((3, 100_003), "std", 0.02),
        "s": ((), "fan_in", 1.0),
        "w": ((129, 1031), "fan_in", 129.0),
        "empty": ((0, 4), "fan_in", 0.0),
    }
    key = jax.random.key_data(jax.random.key(7))
    got = inits.init_arrays(key, table, workers)
    for path, a, b in zip(table, got, _one_stream(key, table), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=path)


def test_init_arrays_uses_threads_by_itself_for_big_tables(monkeypatch):
    counts = []
    real = inits.ThreadPoolExecutor

    def counting(n):
        counts.append(n)
        return real(n)

    monkeypatch.setattr(inits, "ThreadPoolExecutor", counting)
    monkeypatch.setattr(inits.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    table = {"big": (((1 << 23) + 3,), "fan_in", 4.0), "small": ((5,), "std", 1.0)}
    key = jax.random.key_data(jax.random.key(3))
    got = inits.init_arrays(key, table)
    assert counts == [2]  # 8M numbers: two threads, as many as the usable cores
    for a, b in zip(got, _one_stream(key, table), strict=True):
        np.testing.assert_array_equal(a, b)
    assert inits.init_arrays(key, {"small": ((5,), "std", 1.0)}) and counts == [2]  # no pool


def test_each_copy_drops_the_checkpoint_only_on_a_cpu_and_only_when_told(monkeypatch):
    w = jnp.ones((3, 3))
    xs = {"0": w, "1": 2 * w}

    def step(x, w):
        return jnp.tanh(x @ w), None

    def primitives(remat_on_cpu: bool) -> set[str]:
        def f(x):
            return module.each_copy(step, x, xs, 0, 2, remat_on_cpu=remat_on_cpu)[0].sum()

        jaxpr = jax.make_jaxpr(jax.value_and_grad(f))(jnp.ones((2, 3)))
        return {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}

    assert "remat2" in primitives(True)  # the checkpoint, everywhere by default
    assert "remat2" not in primitives(False) and "jit" in primitives(False)  # on this CPU
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert "remat2" in primitives(False)  # an accelerator keeps it: it saves memory there
    # one function decides, looked up when the copies run (bench/accelerator_variants.py's
    # cpu-copies replaces it in a generated module)
    monkeypatch.setattr(module, "checkpoint_copies", lambda remat_on_cpu: remat_on_cpu)
    assert "remat2" not in primitives(False)
    # the same numbers either way
    x = jnp.arange(6.0).reshape(2, 3) / 6
    monkeypatch.undo()
    a = jax.grad(lambda x: module.each_copy(step, x, xs, 0, 2)[0].sum())(x)
    b = jax.grad(lambda x: module.each_copy(step, x, xs, 0, 2, remat_on_cpu=False)[0].sum())(x)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


@pytest.mark.parametrize(
    ("kernel", "options"),
    [
        ((1, 1, 4, 6), {"stride": (2, 2)}),
        ((7, 7, 4, 6), {"padding": ((3, 3), (3, 3)), "stride": (2, 2)}),
        ((3, 3, 2, 6), {"padding": "SAME", "groups": 2}),
    ],
)
def test_conv_off_a_cpu_is_one_plain_convolution_with_the_same_values(monkeypatch, kernel, options):
    # off a CPU `conv` leaves the convolution and its gradients to XLA: one conv_general_dilated
    # per pass, no rule of ours, no matrix product for a 1×1 kernel; the values and both
    # gradients are the CPU path's, for pointwise, strided, padded and grouped kernels
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 4))
    w = jax.random.normal(jax.random.key(1), kernel) / 4

    def grads(x, w):
        return jax.grad(lambda x, w: jnp.sum(conv.conv(x, w, **options) ** 2), argnums=(0, 1))(x, w)

    def program() -> str:  # a new function each time: JAX caches a traced one by identity
        return str(jax.make_jaxpr(lambda x, w: grads(x, w))(x, w))

    on_cpu = conv.conv(x, w, **options), grads(x, w)
    cpu = program()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert conv.plain_convolutions()
    plain = program()
    assert plain != cpu
    assert plain.count("conv_general_dilated[") == 3  # forward, input and weight gradients
    assert "dot_general[" not in plain  # a 1×1 kernel too stays a convolution
    np.testing.assert_allclose(conv.conv(x, w, **options), on_cpu[0], atol=1e-5)
    for got, want in zip(grads(x, w), on_cpu[1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n", [0, 5, 1 << 23])
def test_init_buffer_is_aligned_writable_and_shared_with_the_device(n):
    # from 32 MiB on the buffer is its own mapping of plain pages, not NumPy's heap
    buf = inits.float32_buffer(n)
    assert buf.shape == (n,) and buf.dtype == np.float32 and buf.flags.writeable
    assert buf.ctypes.data % 64 == 0 or not n
    mapped = isinstance(buf.base, memoryview) and isinstance(buf.base.obj, mmap.mmap)
    assert mapped == (n >= 1 << 23 and hasattr(mmap, "MAP_PRIVATE"))
    if n:
        buf[:] = np.arange(n, dtype=np.float32)
        piece = buf[:5]
        on_device = jax.device_put(piece)
        assert on_device.unsafe_buffer_pointer() == piece.ctypes.data  # no copy
        del buf, piece
        np.testing.assert_array_equal(np.asarray(on_device), np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("bias", [True, False])
def test_dense(bias):
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, 2, 3, 5), rand(rng, 5, 4), rand(rng, 4)
    b = b if bias else None
    np.testing.assert_allclose(call(dense.dense, x, w, b), ref.dense_ref(x, w, b), **TOL)


# ---------------------------------------------------------------------------------------------
# Convolutions
# ---------------------------------------------------------------------------------------------

# (spatial size, cin, cout, kernel, stride, padding, dilation, groups, bias)
CONV_CASES = [
    ((11,), 3, 4, (3,), (1,), ((1, 1),), (1,), 1, True),
    ((12,), 4, 6, (4,), (2,), ((2, 1),), (1,), 2, False),
    ((13,), 4, 4, (3,), (1,), "same", (2,), 4, True),  # depthwise, dilated, same
    ((14,), 2, 3, (4,), (1,), "same", (1,), 1, False),  # even kernel: extra pad at the end
    ((7, 8), 3, 5, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, True),
    ((9, 10), 4, 6, (3, 2), (2, 3), ((0, 1), (2, 2)), (1, 2), 2, True),
    ((8, 8), 6, 6, (3, 3), (1, 1), "same", (2, 1), 6, False),  # depthwise
    ((8, 7), 6, 12, (2, 3), (2, 1), ((1, 1), (0, 0)), (1, 1), 3, True),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(case):
    size, cin, cout, kernel, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(1)
    x = rand(rng, 2, cin, *size)
    w = rand(rng, *kernel, cin // groups, cout)
    b = rand(rng, cout) if bias else None
    pads = conv.same_padding(kernel, dilation) if padding == "same" else padding
    y = call(conv.conv, cl(x), w, b, stride=stride, padding=pads, dilation=dilation, groups=groups)
    expected = ref.conv_nd_ref(x, w, b, stride, padding, dilation, groups)
    if padding == "same":
        assert expected.shape[2:] == size
    np.testing.assert_allclose(cf(y), expected, **TOL)


def test_same_padding():
    assert conv.same_padding((3, 4), (1, 1)) == ((1, 1), (1, 2))
    assert conv.same_padding((3,), (2,)) == ((2, 2),)
    assert conv.same_padding((1, 2), (1, 3)) == ((0, 0), (1, 2))


# (spatial size, cin, cout, kernel, stride, padding, output_padding, dilation, groups, bias)
CONV_T_CASES = [
    ((5,), 3, 4, (3,), (1,), (0,), (0,), (1,), 1, True),
    ((5,), 4, 6, (3,), (2,), (1,), (1,), (1,), 1, True),
    ((6,), 4, 6, (4,), (3,), (2,), (2,), (2,), 2, False),
    ((4, 5), 4, 6, (3, 2), (2, 3), (1, 0), (1, 2), (1, 1), 2, True),
    ((4, 4), 3, 2, (3, 3), (2, 2), (2, 1), (1, 0), (2, 2), 1, True),
    ((5, 4), 4, 4, (3, 3), (2, 1), (1, 1), (0, 0), (1, 1), 4, False),  # depthwise
]


@pytest.mark.parametrize("case", CONV_T_CASES)
def test_conv_transpose(case):
    size, cin, cout, kernel, stride, padding, out_pad, dilation, groups, bias = case
    rng = np.random.default_rng(2)
    x = rand(rng, 2, cin, *size)
    w = rand(rng, *kernel, cin, cout // groups)
    b = rand(rng, cout) if bias else None
    y = call(
        conv.conv_transpose,
        cl(x),
        w,
        b,
        stride=stride,
        padding=padding,
        output_padding=out_pad,
        dilation=dilation,
        groups=groups,
    )
    expected = ref.conv_transpose_nd_ref(x, w, b, stride, padding, out_pad, dilation, groups)
    out_size = tuple(
        (n - 1) * s - 2 * p + d * (k - 1) + op + 1
        for n, s, p, d, k, op in zip(size, stride, padding, dilation, kernel, out_pad, strict=True)
    )
    assert expected.shape == (2, cout, *out_size)
    np.testing.assert_allclose(cf(y), expected, **TOL)


def test_conv_transpose_is_gradient_of_conv():
    """PyTorch defines ConvTranspose as the input-gradient of Conv with the same weight.

    Our transposed-conv weight (k1, k2, Cin_t, Cout_t) read as HWIO with I/O swapped is the
    forward conv (Cout_t -> Cin_t) whose input-gradient conv_transpose must reproduce.
    """
    rng = np.random.default_rng(3)
    w_t = rand(rng, 3, 2, 3, 4)  # (k1, k2, Cin_t=3, Cout_t=4)
    w_conv = np.transpose(w_t, (0, 1, 3, 2))  # (k1, k2, I=4, O=3)
    stride, padding, dilation = (2, 3), (1, 1), (1, 2)
    x = jnp.asarray(rand(rng, 2, 9, 10, 4))

    def fwd(x):
        return conv.conv(
            x, w_conv, stride=stride, padding=tuple((p, p) for p in padding), dilation=dilation
        )

    y, vjp = jax.vjp(fwd, x)
    ct = jnp.asarray(rand(rng, *y.shape))
    (grad,) = vjp(ct)
    no_pad = call(conv.conv_transpose, ct, w_t, stride=stride, padding=padding, dilation=dilation)
    out_pad = tuple(a - b for a, b in zip(x.shape[1:3], no_pad.shape[1:3], strict=True))
    tx = call(
        conv.conv_transpose,
        ct,
        w_t,
        stride=stride,
        padding=padding,
        output_padding=out_pad,
        dilation=dilation,
    )
    np.testing.assert_allclose(tx, grad, **TOL)


# ---------------------------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------------------------

POOL_CASES = [
    # (spatial size, kernel, stride, padding, dilation)
    ((10,), (3,), (2,), (1,), (1,)),
    ((11,), (2,), (2,), (0,), (1,)),
    ((12,), (3,), (1,), (1,), (2,)),
    ((7, 8), (2, 2), (2, 2), (0, 0), (1, 1)),
    ((9, 8), (3, 2), (2, 1), (1, 1), (1, 1)),
    ((9, 9), (3, 3), (2, 3), (1, 0), (2, 1)),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool(case):
    size, kernel, stride, padding, dilation = case
    x = rand(np.random.default_rng(4), 2, 3, *size)
    y = call(conv.max_pool, cl(x), window=kernel, stride=stride, padding=padding, dilation=dilation)
    np.testing.assert_allclose(cf(y), ref.max_pool_ref(x, kernel, stride, padding, dilation), **TOL)


@pytest.mark.parametrize("case", [c for c in POOL_CASES if all(d == 1 for d in c[4])])
def test_avg_pool(case):
    size, kernel, stride, padding, _ = case
    x = rand(np.random.default_rng(5), 2, 3, *size)
    y = call(conv.avg_pool, cl(x), window=kernel, stride=stride, padding=padding)
    np.testing.assert_allclose(cf(y), ref.avg_pool_ref(x, kernel, stride, padding), **TOL)


def test_global_avg_pool():
    x = rand(np.random.default_rng(6), 2, 3, 5, 4)
    y = call(conv.global_avg_pool, cl(x))
    assert y.shape == (2, 1, 1, 3)
    np.testing.assert_allclose(cf(y), ref.global_avg_pool_ref(x), **TOL)
    x1 = rand(np.random.default_rng(6), 2, 3, 7)
    np.testing.assert_allclose(
        cf(call(conv.global_avg_pool, cl(x1))), ref.global_avg_pool_ref(x1), **TOL
    )


# ---------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (3, 5, 7), (6, 4)])
def test_batch_norm(train, shape):
    rng = np.random.default_rng(7)
    c = shape[1]
    x = rand(rng, *shape) * 2 + 1
    scale, bias = rand(rng, c), rand(rng, c)
    mean, var = rand(rng, c), rng.uniform(0.5, 2.0, c)
    xl = cl(x) if x.ndim > 2 else jnp.asarray(x)
    y, new_mean, new_var = call(
        norm.batch_norm, xl, scale, bias, mean, var, train=train, momentum=0.1, eps=1e-5
    )
    ey, emean, evar = ref.batch_norm_ref(x, scale, bias, mean, var, train, 0.1, 1e-5)
    y = cf(y) if x.ndim > 2 else np.asarray(y)
    np.testing.assert_allclose(y, ey, **TOL)
    np.testing.assert_allclose(new_mean, emean, **TOL)
    np.testing.assert_allclose(new_var, evar, **TOL)
    if not train:
        np.testing.assert_array_equal(np.asarray(new_mean), mean)
        np.testing.assert_array_equal(np.asarray(new_var), var)


def test_batch_norm_unbiased_running_var():
    """Explicit PyTorch numbers: x = [0, 2] per channel, momentum 0.1, running var 1."""
    x = jnp.asarray([[0.0], [2.0]])
    y, m, v = call(norm.batch_norm, x, None, None, jnp.zeros(1), jnp.ones(1), train=True, eps=0.0)
    np.testing.assert_allclose(np.asarray(y)[:, 0], [-1.0, 1.0])  # biased var 1
    np.testing.assert_allclose(np.asarray(m), [0.1])
    np.testing.assert_allclose(np.asarray(v), [0.9 + 0.1 * 2.0])  # unbiased var 2


@pytest.fixture
def one_pass(monkeypatch):
    """`batch_norm` as it runs off a CPU: each batch's statistics in one pass."""
    monkeypatch.setattr(norm, "one_pass_statistics", lambda: True)


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 4)])
def test_batch_norm_one_pass(one_pass, shape):
    """The one pass gives the two-pass reference's outputs and statistics, and its gradients
    are the finite differences' (jitted afresh: `call`'s cache holds two-pass traces)."""
    rng = np.random.default_rng(35)
    c = shape[1]
    x = rand(rng, *shape) * 2 + 1
    scale, bias = rand(rng, c), rand(rng, c)
    mean, var = rand(rng, c), rng.uniform(0.5, 2.0, c)
    xl = cl(x) if x.ndim > 2 else x

    def f(x, scale, bias):
        return norm.batch_norm(x, scale, bias, mean, var, train=True, momentum=0.1, eps=1e-5)

    y, new_mean, new_var = jax.jit(f)(xl, scale, bias)
    ey, emean, evar = ref.batch_norm_ref(x, scale, bias, mean, var, True, 0.1, 1e-5)
    np.testing.assert_allclose(cf(y) if x.ndim > 2 else y, ey, **TOL)
    np.testing.assert_allclose(new_mean, emean, **TOL)
    np.testing.assert_allclose(new_var, evar, **TOL)
    check_grads(jax.jit(lambda *a: f(*a)[0]), (xl, scale, bias), order=1, modes=["rev"])


def test_batch_norm_one_pass_keeps_a_far_means_variance(one_pass):
    """In float32, the sums of x and x^2 lose a variance of 1 under a mean of 10,000 (the
    ulp of 10^8 is 8); less each channel's first value, the one pass keeps it."""
    x = (1e4 + np.random.default_rng(36).standard_normal((4096, 2))).astype(np.float32)
    mean, var = jax.jit(norm.batch_statistics, static_argnums=1)(x, (0,))
    assert mean.dtype == var.dtype == jnp.float32
    exact = x.astype(np.float64)
    np.testing.assert_allclose(mean, exact.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(var, exact.var(axis=0), rtol=1e-3)


def test_batch_norm_bfloat16_gradients_keep_a_far_means_digits(one_pass):
    """As a GPU runs it: the scale's gradient sums g·x less the mean times the sum of g;
    products rounded to bfloat16 would lose it under a mean 50 times the deviation."""
    rng = np.random.default_rng(37)
    x = jnp.asarray(50 + rng.standard_normal((64, 3)), jnp.bfloat16)
    g = rng.standard_normal((64, 3))

    def grad_scale(x, dtype):
        def loss(scale):
            y, _, _ = norm.batch_norm(
                x.astype(dtype), scale, None, jnp.zeros(3), jnp.ones(3), train=True
            )
            return jnp.sum(y.astype(jnp.float64) * g)

        return jax.jit(jax.grad(loss))(jnp.ones(3, dtype))

    exact = grad_scale(x, jnp.float64)  # the same bfloat16 values, in float64
    np.testing.assert_allclose(grad_scale(x, jnp.bfloat16).astype(np.float64), exact, rtol=2e-2)


@pytest.mark.parametrize("n_axes", [1, 2])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(n_axes, affine):
    rng = np.random.default_rng(8)
    x = rand(rng, 2, 3, 4, 5)
    shape = x.shape[-n_axes:]
    scale, bias = (rand(rng, *shape), rand(rng, *shape)) if affine else (None, None)
    y = call(norm.layer_norm, x, scale, bias, eps=1e-5, axes=n_axes)
    np.testing.assert_allclose(y, ref.layer_norm_ref(x, scale, bias, 1e-5, n_axes), **TOL)


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 5), 3), ((2, 4, 7), 2), ((3, 6, 3, 3), 6)])
def test_group_norm(shape, groups):
    rng = np.random.default_rng(9)
    x = rand(rng, *shape)
    scale, bias = rand(rng, shape[1]), rand(rng, shape[1])
    y = call(norm.group_norm, cl(x), scale, bias, groups=groups, eps=1e-5)
    np.testing.assert_allclose(cf(y), ref.group_norm_ref(x, scale, bias, groups, 1e-5), **TOL)


def test_rms_norm():
    rng = np.random.default_rng(10)
    x, scale = rand(rng, 2, 3, 8), rand(rng, 8)
    np.testing.assert_allclose(
        call(norm.rms_norm, x, scale, eps=1e-6), ref.rms_norm_ref(x, scale, 1e-6), **TOL
    )


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------

ACTIVATIONS = [
    (activation.relu, ref.relu_ref),
    (activation.tanh, ref.tanh_ref),
    (activation.sigmoid, ref.sigmoid_ref),
    (partial(activation.leaky_relu, slope=0.1), partial(ref.leaky_relu_ref, a=0.1)),
    (partial(activation.gelu, approximate=False), partial(ref.gelu_ref, approximate=False)),
    (partial(activation.gelu, approximate=True), partial(ref.gelu_ref, approximate=True)),
    (activation.silu, ref.silu_ref),
]


@pytest.mark.parametrize("fn,ref_fn", ACTIVATIONS)
def test_activations(fn, ref_fn):
    x = rand(np.random.default_rng(11), 3, 17) * 3
    np.testing.assert_allclose(fn(x), ref_fn(x), **TOL)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis):
    x = rand(np.random.default_rng(12), 3, 4, 5) * 5
    y = call(activation.softmax, x, axis=axis)
    np.testing.assert_allclose(y, ref.softmax_ref(x, axis), **TOL)
    np.testing.assert_allclose(np.sum(np.asarray(y), axis=axis), 1.0, **TOL)


# ---------------------------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------------------------


def test_dropout_train():
    x = rand(np.random.default_rng(13), 8, 100) + 5.0  # nonzero everywhere
    key = jax.random.PRNGKey(1)
    p = 0.3
    y = np.asarray(call(activation.dropout, jnp.asarray(x), p, train=True, key=key))
    keep = y != 0
    np.testing.assert_allclose(y, ref.dropout_ref(x, keep, p), **TOL)
    assert 0.6 < keep.mean() < 0.8
    np.testing.assert_array_equal(
        y, np.asarray(call(activation.dropout, jnp.asarray(x), p, train=True, key=key))
    )
    other = np.asarray(
        call(activation.dropout, jnp.asarray(x), p, train=True, key=jax.random.PRNGKey(2))
    )
    assert np.any(other != y)
    eager = activation.dropout(
        jnp.asarray(x), p, train=True, key=key
    )  # eager and jitted draw the same mask
    np.testing.assert_array_equal(np.asarray(eager), y)


def test_dropout_identity_and_errors():
    x = jnp.asarray(rand(np.random.default_rng(14), 4, 5))
    assert activation.dropout(x, 0.5, train=False, key=None) is x
    assert activation.dropout(x, 0.0, train=True, key=None) is x
    x4 = x[:, None, None]
    assert activation.dropout_channels(x4, 0.5, train=False, key=None) is x4
    assert activation.dropout_channels(x4, 0.0, train=True, key=None) is x4
    with pytest.raises(ValueError, match="key"):
        activation.dropout(x, 0.5, train=True, key=None)
    with pytest.raises(ValueError, match="key"):
        activation.dropout_channels(x4, 0.5, train=True, key=None)
    np.testing.assert_array_equal(
        np.asarray(activation.dropout(x, 1.0, train=True, key=jax.random.PRNGKey(0))), 0
    )


def test_dropout_channels():
    x = rand(np.random.default_rng(15), 6, 8, 3, 4) + 5.0  # channels-first (B, C, H, W)
    key = jax.random.PRNGKey(3)
    p = 0.5
    y = cf(call(activation.dropout_channels, cl(x), p, train=True, key=key))
    keep = np.all(y != 0, axis=(2, 3))  # (B, C)
    dropped = np.all(y == 0, axis=(2, 3))
    assert np.all(keep | dropped)  # whole channels are dropped
    assert 0 < keep.sum() < keep.size
    np.testing.assert_allclose(y, ref.dropout_ref(x, keep[:, :, None, None], p), **TOL)
    np.testing.assert_array_equal(
        y, cf(call(activation.dropout_channels, cl(x), p, train=True, key=key))
    )
    x1 = cl(x[:, :, 0])  # 1-D signals (B, T, C)
    y1 = np.asarray(call(activation.dropout_channels, x1, p, train=True, key=key))
    assert np.all(np.all(y1 != 0, axis=1) | np.all(y1 == 0, axis=1))
    assert activation.dropout_channels(cl(x), p, train=False, key=key).shape == (6, 3, 4, 8)


# ---------------------------------------------------------------------------------------------
# Embeddings and positions
# ---------------------------------------------------------------------------------------------


def test_embed():
    rng = np.random.default_rng(16)
    table = rand(rng, 10, 4)
    ids = rng.integers(0, 10, (2, 5))
    y = call(dense.embed, jnp.asarray(ids), table)
    assert y.shape == (2, 5, 4)
    np.testing.assert_allclose(y, ref.embed_ref(ids, table), **TOL)


@pytest.mark.parametrize("T,D", [(7, 8), (5, 9), (1, 2)])
def test_sinusoidal_positions(T, D):
    pe = dense.sinusoidal_positions(T, D, jnp.float64)
    assert pe.shape == (T, D) and pe.dtype == jnp.float64
    np.testing.assert_allclose(pe, ref.sinusoidal_positions_ref(T, D), **TOL)
    assert dense.sinusoidal_positions(T, D, jnp.float32).dtype == jnp.float32


def test_add_positions():
    rng = np.random.default_rng(17)
    x = rand(rng, 2, 6, 8)
    np.testing.assert_allclose(
        call(dense.add_positions, jnp.asarray(x)), ref.add_positions_ref(x), **TOL
    )
    table = rand(rng, 10, 8)
    np.testing.assert_allclose(
        call(dense.add_learned_positions, jnp.asarray(x), table),
        ref.add_learned_positions_ref(x, table),
        **TOL,
    )


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_attention(use_mask, causal):
    rng = np.random.default_rng(18)
    q, k, v = rand(rng, 2, 3, 5, 4), rand(rng, 2, 3, 5, 4), rand(rng, 2, 3, 5, 6)
    mask = rng.uniform(size=(2, 1, 5, 5)) < 0.7 if use_mask else None
    y = call(attention.attention, q, k, v, mask, causal=causal)
    np.testing.assert_allclose(y, ref.attention_ref(q, k, v, mask, causal), **TOL)


def test_attention_cross_lengths_and_fully_masked_rows():
    rng = np.random.default_rng(19)
    q, k, v = rand(rng, 2, 2, 3, 4), rand(rng, 2, 2, 6, 4), rand(rng, 2, 2, 6, 5)
    mask = np.ones((2, 2, 3, 6), dtype=bool)
    mask[0, 1, 2] = False  # one query sees nothing
    mask[1, :, :, 4:] = False  # key padding
    y = np.asarray(call(attention.attention, q, k, v, mask))
    assert np.all(np.isfinite(y))
    np.testing.assert_array_equal(y[0, 1, 2], 0.0)
    np.testing.assert_allclose(y, ref.attention_ref(q, k, v, mask, False), **TOL)
    yc = call(attention.attention, q, k, v, None, causal=True)
    np.testing.assert_allclose(yc, ref.attention_ref(q, k, v, None, True), **TOL)


def test_attention_dropout():
    rng = np.random.default_rng(20)
    q, k, v = (jnp.asarray(rand(rng, 1, 2, 6, 4)) for _ in range(3))
    key = jax.random.PRNGKey(5)
    base = call(attention.attention, q, k, v, None, dropout=0.5, train=False, key=key)
    np.testing.assert_allclose(base, ref.attention_ref(q, k, v), **TOL)
    y1 = call(attention.attention, q, k, v, None, dropout=0.5, train=True, key=key)
    y2 = call(attention.attention, q, k, v, None, dropout=0.5, train=True, key=key)
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))
    assert not np.allclose(np.asarray(y1), np.asarray(base))


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_takes_heads_last_and_agrees(causal):
    # XLA's implementation of the call stands in for cuDNN's, which needs a GPU: what is
    # checked is the layout (B, T, H, D) in and out and the causal mask handed over
    rng = np.random.default_rng(23)
    q, k, v = (rand(rng, 2, 5, 3, 4) for _ in range(3))
    fused = partial(attention.fused_attention, causal=causal, implementation="xla")
    y = call(fused, q, k, v)
    heads_first = [a.transpose(0, 2, 1, 3) for a in (q, k, v)]
    expected = ref.attention_ref(*heads_first, None, causal).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)  # its softmax is float32


def test_fused_attention_runs_only_where_cudnn_does():
    rng = np.random.default_rng(24)
    q = jnp.asarray(rand(rng, 1, 8, 2, 8), dtype=jnp.bfloat16)
    if jax.default_backend() != "gpu":  # no cuDNN here: the caller computes it itself
        assert attention.fused_attention(q, q, q, causal=True) is None
    wide = jnp.asarray(rand(rng, 1, 8, 2, 8))  # float32: never the half-precision kernel
    assert attention.fused_attention(wide, wide, wide, causal=False) is None
    cross = partial(attention.fused_attention, causal=True, implementation="xla")
    assert cross(q, q[:, :4], q[:, :4]) is None  # a causal mask over unequal lengths
    assert cross(q, q, q[..., :4]) is None  # values of another head size


def test_mha_without_the_fused_kernel_keeps_its_dropout_and_mask(monkeypatch):
    # the fused call is asked only where it computes the same: no mask, no active dropout
    asked = []
    monkeypatch.setattr(attention, "fused_attention", lambda *a, **k: asked.append(k) or None)
    rng = np.random.default_rng(25)
    x = jnp.asarray(rand(rng, 1, 4, 8))
    p = mha_params(rng, 8, 8, 2, 4, 4, 8, True)
    key = jax.random.PRNGKey(1)
    attention.mha(x, x, p, heads=2, causal=True)
    attention.mha(x, x, p, heads=2, dropout=0.5, train=False, key=key)
    assert asked == [{"causal": True}, {"causal": False}]
    attention.mha(x, x, p, heads=2, dropout=0.5, train=True, key=key)
    attention.mha(x, x, p, heads=2, mask=np.ones((1, 1, 4, 4), bool))
    assert len(asked) == 2


def mha_params(rng, d, dkv, heads, dqk, dv, dout, bias):
    p = {
        "wq": rand(rng, d, heads * dqk),
        "wk": rand(rng, dkv, heads * dqk),
        "wv": rand(rng, dkv, heads * dv),
        "wo": rand(rng, heads * dv, dout),
    }
    if bias:
        p.update(
            bq=rand(rng, heads * dqk),
            bk=rand(rng, heads * dqk),
            bv=rand(rng, heads * dv),
            bo=rand(rng, dout),
        )
    return p


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_mha_self(bias, causal):
    rng = np.random.default_rng(21)
    x = rand(rng, 2, 5, 8)
    p = mha_params(rng, 8, 8, 2, 4, 3, 7, bias)
    y = call(attention.mha, jnp.asarray(x), jnp.asarray(x), p, heads=2, causal=causal)
    assert y.shape == (2, 5, 7)
    np.testing.assert_allclose(y, ref.mha_ref(x, x, p, 2, causal), **TOL)


@pytest.mark.parametrize("bias", [True, False])
def test_mha_cross(bias):
    rng = np.random.default_rng(22)
    x, z = rand(rng, 2, 4, 6), rand(rng, 2, 7, 5)
    p = mha_params(rng, 6, 5, 3, 2, 4, 6, bias)
    y = call(attention.mha, jnp.asarray(x), jnp.asarray(z), p, heads=3)
    assert y.shape == (2, 4, 6)
    np.testing.assert_allclose(y, ref.mha_ref(x, z, p, 3), **TOL)
    mask = rng.uniform(size=(2, 1, 1, 7)) < 0.6
    mask[:, :, :, 0] = True
    ym = call(attention.mha, jnp.asarray(x), jnp.asarray(z), p, heads=3, mask=mask)
    np.testing.assert_allclose(ym, ref.mha_ref(x, z, p, 3, mask=mask), **TOL)


# ---------------------------------------------------------------------------------------------
# Patches and upsampling
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,size", [((2, 3, 8, 8), 4), ((1, 2, 9, 10), 3), ((2, 3, 9, 10), 4)])
def test_patches(shape, size):
    x = rand(np.random.default_rng(23), *shape)
    y = call(conv.patches, cl(x), size)
    np.testing.assert_allclose(y, ref.patches_ref(x, size), **TOL)


@pytest.mark.parametrize("factor", [2, 3])
def test_upsample_nearest(factor):
    x = rand(np.random.default_rng(24), 2, 3, 4, 5)
    y = call(conv.upsample_nearest, cl(x), factor)
    np.testing.assert_allclose(cf(y), ref.upsample_nearest_ref(x, factor), **TOL)
    x1 = rand(np.random.default_rng(24), 2, 3, 4)
    y1 = call(conv.upsample_nearest, cl(x1), factor)
    np.testing.assert_allclose(cf(y1), ref.upsample_nearest_ref(x1, factor), **TOL)


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_upsample_bilinear(factor):
    x = rand(np.random.default_rng(25), 2, 3, 4, 5)
    y = call(conv.upsample_bilinear, cl(x), factor)
    np.testing.assert_allclose(cf(y), ref.upsample_bilinear_ref(x, factor), **TOL)


def test_upsample_bilinear_known_pytorch_values():
    """F.interpolate(arange(4).view(1,1,2,2), scale_factor=2, mode="bilinear")."""
    x = jnp.arange(4.0).reshape(1, 1, 2, 2)
    expected = [
        [0.0, 0.25, 0.75, 1.0],
        [0.5, 0.75, 1.25, 1.5],
        [1.5, 1.75, 2.25, 2.5],
        [2.0, 2.25, 2.75, 3.0],
    ]
    np.testing.assert_allclose(cf(call(conv.upsample_bilinear, cl(x), 2))[0, 0], expected, **TOL)
    row = cf(call(conv.upsample_bilinear, cl(jnp.asarray([[[[0.0, 1.0]]]])), 3))[0, 0, 0]
    np.testing.assert_allclose(row, [0, 0, 1 / 3, 2 / 3, 1, 1], **TOL)


# ---------------------------------------------------------------------------------------------
# Recurrent layers
# ---------------------------------------------------------------------------------------------


def rnn_params(rng, d, hd, gates, bias=True):
    p = {"w_ih": rand(rng, d, gates * hd) * 0.5, "w_hh": rand(rng, hd, gates * hd) * 0.5}
    if bias:
        p["b_ih"] = rand(rng, gates * hd) * 0.5
        p["b_hh"] = rand(rng, gates * hd) * 0.5
    return p


@pytest.mark.parametrize(
    "fn,ref_fn,gates",
    [(dense.rnn, ref.rnn_ref, 1), (dense.lstm, ref.lstm_ref, 4), (dense.gru, ref.gru_ref, 3)],
)
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent(fn, ref_fn, gates, bias):
    rng = np.random.default_rng(26)
    x = rand(rng, 2, 6, 3)
    p = rnn_params(rng, 3, 4, gates, bias)
    y = fn(jnp.asarray(x), p)
    assert y.shape == (2, 6, 4)
    np.testing.assert_allclose(y, ref_fn(x, p), **TOL)


# ---------------------------------------------------------------------------------------------
# Jit and gradients
# ---------------------------------------------------------------------------------------------


def test_grad_conv():
    rng = np.random.default_rng(28)
    x, w, b = rand(rng, 1, 5, 4), rand(rng, 3, 2, 4), rand(rng, 4)

    def f(x, w, b):
        return conv.conv(x, w, b, stride=(2,), padding=((1, 1),), groups=2)

    check_grads(jax.jit(f), (x, w, b), order=1, modes=["rev"])


def test_grad_conv_transpose():
    rng = np.random.default_rng(29)
    x, w, b = rand(rng, 1, 3, 3, 2), rand(rng, 2, 2, 2, 3), rand(rng, 3)

    def f(x, w, b):
        return conv.conv_transpose(x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0))

    check_grads(jax.jit(f), (x, w, b), order=1, modes=["rev"])


def test_grad_batch_norm():
    rng = np.random.default_rng(30)
    x, s, b = rand(rng, 3, 2, 2, 3), rand(rng, 3), rand(rng, 3)
    mean, var = np.zeros(3), np.ones(3)

    def f(x, s, b):
        return norm.batch_norm(x, s, b, mean, var, train=True)[0]

    check_grads(jax.jit(f), (x, s, b), order=1, modes=["rev"])


def test_grad_layer_norm():
    rng = np.random.default_rng(31)
    x, s, b = rand(rng, 2, 3, 4), rand(rng, 3, 4), rand(rng, 3, 4)
    f = jax.jit(lambda x, s, b: norm.layer_norm(x, s, b, axes=2))
    check_grads(f, (x, s, b), order=1, modes=["rev"])


def textbook_normalized(x, axes, eps, centred):
    """What `norm.normalized` computes, in plain JAX operations, for JAX to differentiate."""
    if centred:
        return (x - jnp.mean(x, axis=axes, keepdims=True)) * jax.lax.rsqrt(
            jnp.var(x, axis=axes, keepdims=True) + eps
        )
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("axes,centred", [((2,), True), ((1, 2), True), ((-1,), False)])
def test_normalized_derivatives_are_jax_own(axes, centred):
    """The written-out tangent gives JAX's derivatives of the textbook formula, both ways."""
    rng = np.random.default_rng(34)
    x, dx, ct = (rand(rng, 2, 3, 5) * 3 + 1 for _ in range(3))

    def ours(x):
        return norm.normalized(x, axes, 1e-5, centred)

    def theirs(x):
        return textbook_normalized(x, axes, 1e-5, centred)

    for f_ours, f_theirs in [(ours, theirs), (jax.jit(ours), jax.jit(theirs))]:
        y, t = jax.jvp(f_ours, (x,), (dx,))
        y_ref, t_ref = jax.jvp(f_theirs, (x,), (dx,))
        np.testing.assert_allclose(y, y_ref, **TOL)
        np.testing.assert_allclose(t, t_ref, rtol=1e-9, atol=1e-9)
        grad = jax.vjp(f_ours, x)[1](ct)[0]
        grad_ref = jax.vjp(f_theirs, x)[1](ct)[0]
        np.testing.assert_allclose(grad, grad_ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, s, b: norm.layer_norm(x, s, b, axes=1),
        lambda x, s, b: norm.group_norm(x, s, b, groups=2),
        lambda x, s, b: norm.rms_norm(x, s) + b.reshape(1, 1, -1),
        lambda x, s, b: norm.layer_norm_at(x, s, b, axis=-1),
        lambda x, s, b: norm.rms_norm_at(x, s, axis=-1) + b.reshape(1, 1, -1),
    ],
    ids=["layer_norm", "group_norm", "rms_norm", "layer_norm_at", "rms_norm_at"],
)
def test_grad_norms_both_modes_second_order(fn):
    """Every norm built on `norm.normalized` differentiates forward and in reverse, twice."""
    rng = np.random.default_rng(35)
    x, s, b = rand(rng, 2, 3, 4) * 2 + 0.5, rand(rng, 4), rand(rng, 4)
    check_grads(jax.jit(fn), (x, s, b), order=2, modes=["fwd", "rev"])


def test_grad_mha():
    rng = np.random.default_rng(32)
    x = rand(rng, 1, 3, 4)
    p = mha_params(rng, 4, 4, 2, 2, 2, 4, True)
    f = jax.jit(lambda x, p: attention.mha(x, x, p, heads=2, causal=True))
    check_grads(f, (x, p), order=1, modes=["rev"])


@pytest.mark.parametrize("fn,gates", [(dense.lstm, 4), (dense.gru, 3)])
def test_grad_recurrent(fn, gates):
    rng = np.random.default_rng(33)
    x = rand(rng, 1, 3, 2)
    p = rnn_params(rng, 2, 3, gates)
    check_grads(jax.jit(fn), (x, p), order=1, modes=["rev"])
