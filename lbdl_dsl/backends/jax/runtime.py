"""Runtime library for the JAX backend.

The code generator copies the functions of this module, one by one (together with the
functions of this module they call by name), into the standalone module it emits. Every
function is therefore a plain top-level ``def`` that only relies on the imports below: JAX,
NumPy, and three modules of Python's standard library for ``init_arrays``' threads and memory.

Layout conventions
------------------
The language's shapes are channels-first (as in PyTorch), but generated code keeps spatial
tensors channels-LAST internally because XLA is faster that way:

* images ``(B, H, W, C)``, 1-D signals ``(B, T, C)``, sequences ``(B, T, D)``.

Parameter layouts (user visible):

* dense: ``w`` (Din, Dout), ``b`` (Dout,)
* conv N-d: ``w`` (k1[, k2], Cin // groups, Cout), ``b`` (Cout,)        (WIO / HWIO)
* transposed conv N-d: ``w`` (k1[, k2], Cin, Cout // groups), ``b`` (Cout,)
* batch norm: ``scale``, ``bias``, state ``mean``, ``var``, all (C,)
* layer norm: ``scale``, ``bias`` of the normalised (trailing) shape
* group norm: ``scale``, ``bias`` (C,); rms norm: ``scale`` (D,)
* embed: ``table`` (N, D); learned positions: ``table`` (Tmax, D)
* mha: ``wq`` (D, H*Dqk), ``wk`` (Dkv, H*Dqk), ``wv`` (Dkv, H*Dv), ``wo`` (H*Dv, Dout),
  optional ``bq``, ``bk`` (H*Dqk,), ``bv`` (H*Dv,), ``bo`` (Dout,); with KV key/value heads
  (grouped-query, ``mha_lm`` in runtime_extra/lm_attention.py) ``wk`` (Dkv, KV*Dqk), ``wv``
  (Dkv, KV*Dv), ``bk``, ``bv`` likewise; query head h reads key/value head h // (H/KV)
* gated feed-forward (ffw act=swiglu): ``gate/w``, ``up/w`` (D, F), ``down/w`` (F, D)
* rnn / lstm / gru: ``w_ih`` (D, G*Hd), ``w_hh`` (Hd, G*Hd), ``b_ih``, ``b_hh`` (G*Hd,)
  with G = 1, 4 (gates i, f, g, o) or 3 (gates r, z, n), in PyTorch's gate order.

All hyper-parameters (ints, tuples, bools, strings, floats) are expected to be static Python
values; no function inspects array values from Python, so everything is jittable.
"""

import mmap
import os
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

# ---------------------------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------------------------


def to_channels_last(x: jax.Array) -> jax.Array:
    """(B, C, *S) -> (B, *S, C): from the language's (PyTorch) layout to the internal one."""
    return jnp.moveaxis(x, 1, -1)


def to_channels_first(x: jax.Array) -> jax.Array:
    """(B, *S, C) -> (B, C, *S): from the internal layout back to the language's layout."""
    return jnp.moveaxis(x, -1, 1)


# ---------------------------------------------------------------------------------------------
# Initialisers
# ---------------------------------------------------------------------------------------------


def init_arrays(key_data, table: dict, workers: int = 0) -> list:
    """NumPy arrays for a table of ``path: (shape, how, arg)``, from the words of a key.

    "fan_in": uniform with variance 1/arg (LeCun's scaling, as Flax's default, from the
    uniform law PyTorch and Keras draw from); "std": uniform with standard deviation ``arg``
    (embeddings); "const": every value ``arg``. Uniform, and drawn by NumPy's PCG64
    from one stream, because JAX's threefry normal spent 1.8 s of CPU on GPT-2's 124M numbers
    where this takes 0.4 s; a megabyte at a time, so that each number is scaled while it is
    still in the cache. Pieces start on 64-byte boundaries of one buffer, so that
    ``jax.device_put`` can hand them to the CPU device without copying.

    The stream is cut into ``workers`` spans drawn by as many threads (NumPy lets go of the
    GIL while it draws), each jumping to its span's first number: the numbers are the same
    whatever the count, and a fresh process's first touch of the buffer is shared out too
    (GPT-2: 0.6 s to 0.3 s on two cores). 0 picks one thread per 4M numbers, at most one
    per usable core and 8.
    """
    entropy = [int(w) for w in np.asarray(key_data, np.uint32).ravel()]
    random = ("fan_in", "std", "normal", "truncated_normal")
    sizes = [int(np.prod(shape)) if how in random else 0 for shape, how, _ in table.values()]
    starts = np.cumsum([0] + [-(-n // 16) * 16 for n in sizes]).tolist()
    noise = float32_buffer(starts[-1])
    runs = []  # (where in noise, how many, bound), in the stream's order, 1 MB at most each
    for (_, how, scale), start, n in zip(table.values(), starts, sizes):
        if not n:
            continue
        bound = np.float32(init_bound(how, scale))
        runs += [(start + at, min(1 << 18, n - at), bound) for at in range(0, n, 1 << 18)]
    total = sum(sizes)
    if not workers:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = max(1, min(8, cpus or 1, total >> 22))
    spans, first, at = [], [], 0  # each worker's runs, and the stream number it starts from
    for where, n, bound in runs:
        if not spans or (at * workers >= total * len(spans) and len(spans) < workers):
            spans.append([])
            first.append(at)
        spans[-1].append((where, n, bound))
        at += n
    if len(spans) > 1:
        with ThreadPoolExecutor(len(spans)) as pool:
            list(pool.map(draw_runs, [entropy] * len(spans), [noise] * len(spans), spans, first))
    elif spans:
        draw_runs(entropy, noise, spans[0], 0)
    out = []
    for (shape, how, scale), start, n in zip(table.values(), starts, sizes):
        if not n:
            out.append(np.full(shape, scale if how == "const" else 0.0, np.float32))
            continue
        piece = noise[start : start + n]
        if how in ("normal", "truncated_normal"):
            normal_from_uniform(piece, scale, truncated=how == "truncated_normal")
        out.append(piece.reshape(shape))
    return out


def init_bound(how: str, scale: float) -> float:
    """The half-width of the uniform numbers a law is drawn from: √(3/fan) or √3·std for the
    uniform laws; 1 for the normal ones, which `normal_from_uniform` transforms."""
    if how == "fan_in":
        return float(np.sqrt(3.0 / scale))
    return 1.0 if how in ("normal", "truncated_normal") else float(np.sqrt(3.0) * scale)


def normal_from_uniform(u, std: float, *, truncated: bool = False) -> None:
    """Uniform numbers in [-1, 1) turned, in place and one by one, into a normal law of ``std``
    by its inverse distribution function (Acklam's rational approximation, relative error
    1.2e-9); ``truncated`` keeps the law within ±2σ by drawing from its middle 95.4%. One
    number per value, so that every block of an array is drawn as the whole array draws it."""
    lo = 0.022750131948179195 if truncated else 1e-7  # Φ(−2), or away from 0
    p = lo + (u.astype(np.float64) + 1.0) * 0.5 * (1.0 - 2.0 * lo)
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)  # fmt: skip
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01)  # fmt: skip
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)  # fmt: skip
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
         3.754408661907416e00)  # fmt: skip
    tail = np.minimum(p, 1.0 - p)
    q = np.sqrt(-2.0 * np.log(np.maximum(tail, 1e-300)))
    z_tail = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
        (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0
    )
    z_tail = np.where(p < 0.5, z_tail, -z_tail)
    r = (p - 0.5) ** 2
    z_mid = (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * (p - 0.5)
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
    )
    z = np.where(tail < 0.02425, z_tail, z_mid)
    u[...] = (z * std).astype(u.dtype)


def float32_buffer(n: int) -> np.ndarray:
    """Room for ``n`` float32 values, starting on a 64-byte boundary, not yet touched.

    From 32 MiB on, an anonymous private mapping of the kernel's own pages rather than NumPy's
    heap: NumPy asks for transparent huge pages on large arrays, and a 2 MiB page is zeroed
    (and, on a virtual machine, often backed by the host) at its first touch. On the 2-core
    virtual machine of docs/performance.md, GPT-2's 500 MB took 0.35 to 1.9 s (about 1 s) to
    draw in NumPy's memory and 0.45 to 0.8 s (about 0.6 s) in these pages (one thread, fresh
    processes, in turn).
    """
    if n * 4 >= 1 << 25 and hasattr(mmap, "MAP_PRIVATE"):  # MAP_PRIVATE: not on Windows
        pages = mmap.mmap(-1, n * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return np.frombuffer(pages, np.float32)  # page-aligned; the array keeps the map
    raw = np.empty(n + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip : skip + n]


def draw_runs(entropy: list, noise, runs: list, first: int) -> None:
    """Fill ``noise``'s ``runs`` (where, how many, bound) with the init stream's numbers from
    number ``first`` on, scaled from [0, 1) to [-bound, bound) in place.

    NumPy makes a float32 from half of one 64-bit output, the low half first: number ``i``
    is half of output ``i // 2``, which ``advance`` reaches in logarithmic time.
    """
    bits = np.random.PCG64(np.random.SeedSequence(entropy))
    bits.advance(first // 2)
    draw = np.random.Generator(bits).random
    if first % 2:
        draw(dtype=np.float32)  # the span starts on a high half: drop the low one
    for where, n, bound in runs:
        chunk = noise[where : where + n]
        draw(out=chunk, dtype=np.float32)
        chunk *= np.float32(2.0) * bound
        chunk -= bound


# ---------------------------------------------------------------------------------------------
# Dense and convolutions
# ---------------------------------------------------------------------------------------------


def trailing(v: jax.Array, ndim: int) -> jax.Array:
    """``v`` with leading axes of size 1, to broadcast over the last axes of an ndim array.

    Written out rather than left to NumPy's implicit rank promotion, which strict JAX refuses.
    """
    return jnp.reshape(v, (1,) * (ndim - v.ndim) + v.shape)


def dense(x: jax.Array, w: jax.Array, b=None) -> jax.Array:
    """x @ w (+ b) over the last axis; ``w`` is (Din, Dout), i.e. PyTorch's weight transposed."""
    y = jnp.matmul(x, w)
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


def conv_dimension_numbers(n: int) -> tuple:
    """Channels-last dimension numbers for an n-d convolution (n <= 3): ("NHWC", "HWIO", "NHWC")."""
    spatial = "DHW"[3 - n :]
    return ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")


def same_padding(kernel: tuple, dilation: tuple) -> tuple:
    """Padding giving "same" output size for stride 1.

    PyTorch's convention: total = dilation * (kernel - 1) is split as
    (total // 2, total - total // 2), i.e. the extra element (odd total) goes at the end.
    """
    pads = []
    for k, d in zip(kernel, dilation, strict=True):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def plain_convolutions() -> bool:
    """Whether `conv` leaves every convolution and its gradients to XLA as they are: off a CPU
    (the module looks this up when it runs: a benchmark may replace it)."""
    return jax.default_backend() != "cpu"


def conv(
    x: jax.Array,
    w: jax.Array,
    b=None,
    *,
    stride: tuple | None = None,
    padding=None,
    dilation: tuple | None = None,
    groups: int = 1,
) -> jax.Array:
    """N-d channels-last convolution (cross-correlation, as in PyTorch).

    ``x`` is (B, *S, Cin), ``w`` is (*k, Cin // groups, Cout), ``b`` is (Cout,) or None.
    ``padding`` is a tuple of (low, high) pairs per spatial axis (see ``same_padding``) or a
    string understood by ``jax.lax.conv_general_dilated`` ("SAME" / "VALID").
    A PyTorch Conv weight (Cout, Cin // g, *k) converts with ``transpose(2, ..., 1, 0)``.

    On a CPU, a pointwise convolution (1×1 kernel, no padding, one group: two thirds of
    ResNet-50's) is computed as the matrix product it is, which XLA:CPU runs faster than a
    convolution, and the gradients are `conv_input_grad` and `conv_weight_grad`, channels-last
    convolutions like this one: JAX's own transposition rule writes them with permuted
    dimension numbers, which XLA:CPU runs on a slow path inside loops (jax-ml/jax#12868), and
    the body of a ×N group is a loop (``jax.lax.scan``): ResNet-50's training step took ten
    times as long. Both modes of differentiation must work (``jax.jvp`` and ``jax.jacfwd`` as
    well as ``jax.grad``), so the rule is a JVP (`conv_tangent`) rather than a VJP, whose
    tangent JAX transposes into exactly those gradients; vmap and higher orders need nothing
    more.

    Off a CPU (`plain_convolutions`) every convolution is one ``conv_general_dilated`` with
    JAX's own rules: on an H200, ResNet-50's training step compiled in 16.2 s that way against
    23.6 s (the Flax peer's: 16.7 s), each in a fresh process, and ran as fast (31.1 ms against
    31.4 ms at batch 128).
    """
    n = x.ndim - 2
    stride, dilation = tuple(stride or (1,) * n), tuple(dilation or (1,) * n)
    padding = ((0, 0),) * n if padding is None else padding
    if isinstance(padding, str):
        window = [d * (k - 1) + 1 for k, d in zip(w.shape[:n], dilation, strict=True)]
        padding = jax.lax.padtype_to_pads(x.shape[1:-1], window, stride, padding)
    pads = tuple((int(lo), int(hi)) for lo, hi in padding)

    def convolve(x, w):
        return jax.lax.conv_general_dilated(
            x,
            w,
            window_strides=stride,
            padding=pads,
            rhs_dilation=dilation,
            dimension_numbers=conv_dimension_numbers(n),
            feature_group_count=groups,
        )

    if plain_convolutions():
        y = convolve(x, w)
    elif pointwise(w.shape, pads, groups):
        y = pointwise_conv(x, w, stride)
    else:

        def tangent(primals, tangents):
            y = convolve(*primals)
            return y, conv_tangent(primals, tangents, y, stride, pads, dilation, groups)

        rule = jax.custom_jvp(convolve)
        rule.defjvp(tangent, symbolic_zeros=True)
        y = rule(x, w)
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


def conv_tangent(primals, tangents, y, stride, pads, dilation, groups: int):
    """The tangent of `conv` (without bias), written so that its transpose is our gradients.

    A tangent is linear in ``dx`` and ``dw``; JAX differentiates in reverse by transposing it.
    Each term is therefore computed as the transpose of the gradient function itself
    (``jax.linear_transpose``): transposing it again gives back `conv_input_grad` and
    `conv_weight_grad` op for op, with their plain dimension numbers, since transposing a
    convolution, a flip or a reshape twice gives the same operation. Zero tangents (an input
    that nothing differentiates) come as symbolic zeros and cost nothing.
    """
    x, w = primals
    dx, dw = tangents
    out = jax.ShapeDtypeStruct(y.shape, y.dtype)
    terms = []
    if type(dx) is not jax.custom_derivatives.SymbolicZero:

        def input_grad(g):
            return conv_input_grad(g, w, x.shape, stride, pads, dilation, groups).astype(x.dtype)

        terms.append(jax.linear_transpose(input_grad, out)(dx)[0])
    if type(dw) is not jax.custom_derivatives.SymbolicZero:

        def weight_grad(g):
            return conv_weight_grad(g, x, w.shape, stride, pads, dilation, groups).astype(w.dtype)

        terms.append(jax.linear_transpose(weight_grad, out)(dw)[0])
    if not terms:
        return jnp.zeros_like(y)
    return terms[0] + terms[1] if len(terms) == 2 else terms[0]


def pointwise_conv(x: jax.Array, w: jax.Array, stride: tuple) -> jax.Array:
    """A 1×1 convolution without padding as the matrix product it is (see `conv`).

    Its tangent is written for the transpose JAX makes of it in reverse mode: the kernel's
    term multiplies the input's rows laid out as (Cin, B·H·W), so that its transpose is the
    product XLA:CPU runs on its fast path, (Cin, B·H·W) by (B·H·W, Cout); JAX's own rule
    transposes the cotangent instead, a third slower inside a ×N group's loop.
    """
    n = x.ndim - 2

    @jax.custom_jvp
    def product(x, w):
        return jnp.matmul(strided(x, stride), w.reshape(w.shape[n:]))

    def tangent(primals, tangents):
        x, w = primals
        dx, dw = tangents
        xs = strided(x, stride)
        w2 = w.reshape(w.shape[n:])
        y = jnp.matmul(xs, w2)
        terms = []
        if type(dx) is not jax.custom_derivatives.SymbolicZero:
            terms.append(jnp.matmul(strided(dx, stride), w2))
        if type(dw) is not jax.custom_derivatives.SymbolicZero:
            rows = xs.reshape(-1, xs.shape[-1]).T  # (Cin, B·H·W)
            dy = jax.lax.dot_general(rows, dw.reshape(w2.shape), (((0,), (0,)), ((), ())))
            terms.append(dy.reshape(y.shape))
        if not terms:
            return y, jnp.zeros_like(y)
        return y, terms[0] + terms[1] if len(terms) == 2 else terms[0]

    product.defjvp(tangent, symbolic_zeros=True)
    return product(x, w)


def pointwise(w_shape: tuple, pads, groups: int) -> bool:
    """Whether a convolution is a matrix product: a 1×1 kernel, no padding, one group."""
    spatial = w_shape[:-2]
    return groups == 1 and all(k == 1 for k in spatial) and all(p == (0, 0) for p in pads)


def strided(x: jax.Array, stride: tuple) -> jax.Array:
    """Every ``stride``-th position of each spatial axis: where a 1×1 kernel lands."""
    return jax.lax.slice(x, (0,) * x.ndim, x.shape, (1, *stride, 1))


def conv_input_grad(g, w, x_shape: tuple, stride, pads, dilation, groups: int) -> jax.Array:
    """The gradient of `conv` for its input: ``g`` convolved with the flipped kernel.

    The kernel's input and output channels swap places (group by group), the stride becomes a
    dilation of ``g``, and the padding is what puts every input position under the window.
    """
    n = g.ndim - 2
    kernel = w.shape[:n]
    cin_g, cout_g = w.shape[n], w.shape[n + 1] // groups
    wt = w.reshape(*kernel, cin_g, groups, cout_g)
    wt = jnp.moveaxis(wt, n, n + 2)  # (*k, groups, Cout // groups, Cin // groups)
    wt = jnp.moveaxis(wt, n, n + 1).reshape(*kernel, cout_g, groups * cin_g)
    wt = jnp.flip(wt, axis=tuple(range(n)))
    padding = []
    for i in range(n):
        window = dilation[i] * (kernel[i] - 1) + 1
        covered = (g.shape[1 + i] - 1) * stride[i] + 1
        before = window - pads[i][0] - 1
        padding.append((before, x_shape[1 + i] + window - 1 - covered - before))
    return jax.lax.conv_general_dilated(
        g,
        wt,
        window_strides=(1,) * n,
        padding=padding,
        lhs_dilation=stride,
        rhs_dilation=dilation,
        dimension_numbers=conv_dimension_numbers(n),
        feature_group_count=groups,
    )


def conv_weight_grad(g, x, w_shape: tuple, stride, pads, dilation, groups: int) -> jax.Array:
    """The gradient of `conv` for its kernel: ``x`` convolved with ``g`` over the batch.

    The channels of ``x`` play the batch and its batch the channels, ``g`` is the kernel (its
    batch as input channels), the dilation becomes the stride and the stride the dilation.
    """
    n = x.ndim - 2
    xt = jnp.transpose(x, (n + 1, *range(1, n + 1), 0))  # (Cin, *S, B)
    gt = jnp.transpose(g, (*range(1, n + 1), 0, n + 1))  # (*S_out, B, Cout)
    padding = []
    for i in range(n):
        window = dilation[i] * (w_shape[i] - 1) + 1
        covered = (g.shape[1 + i] - 1) * stride[i] + 1
        high = covered - x.shape[1 + i] + window - pads[i][0] - 1
        padding.append((pads[i][0], high))
    dw = jax.lax.conv_general_dilated(
        xt,
        gt,
        window_strides=dilation,
        padding=padding,
        rhs_dilation=stride,
        dimension_numbers=conv_dimension_numbers(n),
        batch_group_count=groups,
    )
    return jnp.transpose(dw, (*range(1, n + 1), 0, n + 1))  # (*k, Cin // groups, Cout)


def conv_transpose(
    x: jax.Array,
    w: jax.Array,
    b=None,
    *,
    stride: tuple,
    padding: tuple,
    output_padding: tuple | None = None,
    dilation: tuple | None = None,
    groups: int = 1,
) -> jax.Array:
    """N-d channels-last transposed convolution with PyTorch's ConvTranspose semantics.

    Output size per spatial axis: (in - 1) * s - 2 * p + d * (k - 1) + output_padding + 1.

    Weight convention: ``w`` is (*k, Cin, Cout // groups) and
    ``out[o_g, i * s + j * d - p] += x[c, i] * w[j, c, o]`` where input channel ``c`` belongs to
    group ``g = c // (Cin // groups)`` and writes output channel ``g * (Cout // groups) + o``.
    A PyTorch ConvTranspose weight (Cin, Cout // g, *k) therefore converts with
    ``transpose(2, ..., 0, 1)`` (for any ``groups``).

    Implemented as the gradient of a convolution: dilate the input by ``stride``
    (``lhs_dilation``), pad by ``d * (k - 1) - p`` (plus ``output_padding`` at the end) and
    correlate with the spatially flipped kernel.
    """
    n = x.ndim - 2
    output_padding, dilation = output_padding or (0,) * n, dilation or (1,) * n
    kernel = w.shape[:n]
    cin, cout_g = w.shape[n], w.shape[n + 1]
    cin_g = cin // groups
    # (*k, Cin, Cout // g) -> (*k, Cin // g, Cout) with output channels grouped like the input.
    w = w.reshape(*kernel, groups, cin_g, cout_g)
    w = jnp.moveaxis(w, n, n + 1)
    w = w.reshape(*kernel, cin_g, groups * cout_g)
    w = jnp.flip(w, axis=tuple(range(n)))
    pads = []
    for k, p, op, d in zip(kernel, padding, output_padding, dilation, strict=True):
        edge = d * (k - 1) - p
        pads.append((edge, edge + op))
    y = jax.lax.conv_general_dilated(
        x,
        w,
        window_strides=(1,) * n,
        padding=tuple(pads),
        lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation),
        dimension_numbers=conv_dimension_numbers(n),
        feature_group_count=groups,
    )
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


# ---------------------------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------------------------


def max_pool(
    x: jax.Array, *, window: tuple, stride: tuple, padding: tuple, dilation: tuple | None = None
) -> jax.Array:
    """Channels-last N-d max pooling; PyTorch's MaxPool semantics (ceil_mode=False).

    ``padding`` is one int per spatial axis (both sides, with -inf) or a (low, high) pair.
    """
    windows = (1, *window, 1)
    strides = (1, *stride, 1)
    pads = ((0, 0), *((p, p) if isinstance(p, int) else tuple(p) for p in padding), (0, 0))
    dilations = (1, *(dilation or (1,) * len(window)), 1)
    return jax.lax.reduce_window(
        x, -jnp.inf, jax.lax.max, windows, strides, pads, window_dilation=dilations
    )


def avg_pool(x: jax.Array, *, window: tuple, stride: tuple, padding: tuple) -> jax.Array:
    """Channels-last N-d average pooling; PyTorch's AvgPool defaults.

    count_include_pad=True: zero padding counts, every window is divided by prod(kernel).
    ``padding`` is one int per spatial axis (both sides) or a (low, high) pair.
    """
    windows = (1, *window, 1)
    strides = (1, *stride, 1)
    pads = ((0, 0), *((p, p) if isinstance(p, int) else tuple(p) for p in padding), (0, 0))
    summed = jax.lax.reduce_window(x, 0.0, jax.lax.add, windows, strides, pads)
    return summed / int(np.prod(window))


def global_avg_pool(x: jax.Array) -> jax.Array:
    """Mean over all spatial axes of a channels-last tensor, keeping them: (B, 1, 1, C)."""
    return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)), keepdims=True)


# ---------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------


def one_pass_statistics() -> bool:
    """Whether `batch_statistics` reads a batch once for its mean and variance: off a CPU (the
    module looks this up when it runs: a benchmark may replace it)."""
    return jax.default_backend() != "cpu"


def batch_statistics(x: jax.Array, axes: tuple) -> tuple:
    """A batch's mean and biased variance over ``axes``, per channel.

    A GPU's training step of batch norms is bound by memory, and a second pass over every
    activation for the variance costs more than its arithmetic. On an H200, ResNet-50's step
    took 25.3 ms with one pass (the sums of the values and of their squares, in float32) and
    `batch_norm`'s multiply-add (in bfloat16), against 27.7 with two and the Flax peer's 26.2,
    each side in a process of its own; with this one pass and the former ``(x - mean) *
    factor + bias``, 26.5 ms against the peer's 25.4 in one process (docs/performance-gpu.md).
    On a 2-core CPU the one pass made the step slower (1.75 s against 1.62) and its compile
    too (4.6 s against 4.2), so a CPU keeps two. The one pass sums the values less each
    channel's first value, so that a mean far from zero leaves the variance its digits:
    E[x^2] - E[x]^2 in float32 loses them all at x = 10,000 + noise.
    """
    if not one_pass_statistics():
        mean = jnp.mean(x, axis=axes)
        return mean, jnp.mean(jnp.square(x - trailing(mean, x.ndim)), axis=axes)
    wide = jnp.promote_types(x.dtype, jnp.float32)
    shift = jax.lax.stop_gradient(x[(0,) * len(axes)]).astype(wide)
    d = x.astype(wide) - trailing(shift, x.ndim)
    d_mean = jnp.mean(d, axis=axes)
    var = jnp.maximum(jnp.mean(jnp.square(d), axis=axes) - jnp.square(d_mean), 0.0)
    return shift + d_mean, var


def batch_norm(
    x: jax.Array,
    scale,
    bias,
    mean: jax.Array,
    var: jax.Array,
    *,
    train: bool,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple:
    """Batch norm over every axis but the last (channel) one; returns (y, new_mean, new_var).

    PyTorch's convention: in training, normalise with the batch mean and BIASED batch variance,
    and update the running statistics as ``(1 - momentum) * old + momentum * batch`` using the
    UNBIASED batch variance (the update carries no gradient). In eval mode, normalise with the
    running statistics and return them unchanged. ``scale`` / ``bias`` may be None (no affine).
    The mean, the scale and the bias are folded into a per-channel factor and shift, so that
    each value takes one multiply-add: ResNet-50's training step ran in 1.55 s against 1.65 on
    a 2-core CPU, with ``(x - mean) * factor + bias``. The multiply-add is in float32 at least:
    the factor's gradient is then a sum of g·x less the mean times a sum of g, which bfloat16
    products would round to noise where the mean is large against the deviation.
    """
    axes = tuple(range(x.ndim - 1))
    if train:
        batch_mean, batch_var = batch_statistics(x, axes)
        n = x.size // x.shape[-1]
        unbiased_var = batch_var * (n / max(n - 1, 1))
        new_mean = (1.0 - momentum) * mean + momentum * batch_mean
        new_var = (1.0 - momentum) * var + momentum * unbiased_var
        new_mean = jax.lax.stop_gradient(new_mean)
        new_var = jax.lax.stop_gradient(new_var)
        use_mean, use_var = batch_mean, batch_var
    else:
        new_mean, new_var = mean, var
        use_mean, use_var = mean, var
    factor = jax.lax.rsqrt(use_var + eps)
    if scale is not None:
        factor = factor * scale
    shift = -use_mean * factor
    if bias is not None:
        shift = shift + bias
    wide = jnp.promote_types(x.dtype, jnp.float32)
    y = x.astype(wide) * trailing(factor.astype(wide), x.ndim) + trailing(shift, x.ndim)
    # back to the input's type: the running statistics are float32 state, which would promote
    # a bfloat16 input to float32, and the next convolution would refuse the mixed types
    return y.astype(x.dtype), new_mean, new_var


def layer_norm(x: jax.Array, scale, bias, *, eps: float = 1e-5, axes: int = 1) -> jax.Array:
    """Layer norm over the last ``axes`` axes (PyTorch's LayerNorm: biased variance).

    ``scale`` and ``bias`` have the normalised shape ``x.shape[-axes:]``; either may be None.
    """
    y = normalized(x, tuple(range(x.ndim - axes, x.ndim)), eps)
    if scale is not None:
        y = y * trailing(scale, y.ndim)
    if bias is not None:
        y = y + trailing(bias, y.ndim)
    return y


def normalized(x: jax.Array, axes: tuple, eps: float, centred: bool = True) -> jax.Array:
    """``x`` over ``axes`` less its mean and divided by its root mean square plus ``eps``: the
    part of every norm that has no parameters (not ``centred``: RMS norm's, no mean taken).

    Its tangent is written out, r·(c − y·mean(c·y)) with r = 1 / sqrt(var + eps) and c the
    tangent less its mean (itself when not centred), where JAX's own rule steps through the
    mean, the variance and ``rsqrt`` and transposes each: GPT-2 small's training step on a
    CPU then has 114 distinct kernels against 117 and 18 % fewer operations in them, and
    compiles 5 % faster at 12 blocks and 11 % at one, for the same step time
    (docs/performance.md). Forward mode, vmap and higher orders go through it as through
    any JAX function.
    """

    def value(x):
        return standardised(x, axes, eps, centred)[0]

    def tangent(primals, tangents):
        (x,), (dx,) = primals, tangents
        y, r = standardised(x, axes, eps, centred)
        if centred:
            dx = dx - jnp.mean(dx, axis=axes, keepdims=True)
        return y, r * (dx - y * jnp.mean(dx * y, axis=axes, keepdims=True))

    rule = jax.custom_jvp(value)
    rule.defjvp(tangent)
    return rule(x)


def standardised(x: jax.Array, axes: tuple, eps: float, centred: bool) -> tuple:
    """(`normalized`'s output, the factor r it multiplies by), computed as the norms always
    have: the mean, then the biased variance of what is left, then ``rsqrt``."""
    if centred:
        x = x - jnp.mean(x, axis=axes, keepdims=True)
    r = jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)
    return x * r, r


def group_norm(x: jax.Array, scale, bias, *, groups: int, eps: float = 1e-5) -> jax.Array:
    """Channels-last group norm (B, *S, C); PyTorch's GroupNorm.

    Channels are split into ``groups`` contiguous groups; each (sample, group) is normalised
    over its channels and all spatial positions (biased variance). ``scale``/``bias`` are (C,).
    """
    c = x.shape[-1]
    xg = x.reshape(*x.shape[:-1], groups, c // groups)
    y = normalized(xg, (*range(1, x.ndim - 1), x.ndim), eps).reshape(x.shape)
    if scale is not None:
        y = y * trailing(scale, y.ndim)
    if bias is not None:
        y = y + trailing(bias, y.ndim)
    return y


def rms_norm(x: jax.Array, scale, *, eps: float = 1e-6) -> jax.Array:
    """RMS norm over the last axis: x / sqrt(mean(x**2) + eps) * scale (PyTorch's RMSNorm),
    normalised in at least float32 and scaled in x's type, as LLaMA's is under bfloat16."""
    xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # at least float32
    y = normalized(xf, (-1,), eps, centred=False).astype(x.dtype)
    if scale is not None:
        y = y * trailing(scale, y.ndim)
    return y


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def relu(x: jax.Array) -> jax.Array:
    """max(x, 0)."""
    return jax.nn.relu(x)


def tanh(x: jax.Array) -> jax.Array:
    """Hyperbolic tangent."""
    return jnp.tanh(x)


def sigmoid(x: jax.Array) -> jax.Array:
    """Logistic sigmoid 1 / (1 + exp(-x))."""
    return jax.nn.sigmoid(x)


def leaky_relu(x: jax.Array, slope: float = 0.01) -> jax.Array:
    """x if x >= 0 else slope * x (PyTorch's negative_slope)."""
    return jnp.where(x >= 0, x, slope * x)


def gelu(x: jax.Array, approximate: bool = False) -> jax.Array:
    """GELU; exact (erf) form unless ``approximate`` (PyTorch's approximate="tanh")."""
    return jax.nn.gelu(x, approximate=approximate)


def silu(x: jax.Array) -> jax.Array:
    """x * sigmoid(x) (a.k.a. swish)."""
    return jax.nn.silu(x)


def softmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """Numerically stable softmax along ``axis``."""
    return jax.nn.softmax(x, axis=axis)


# ---------------------------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------------------------


def dropout_mask_apply(x: jax.Array, p: float, key, mask_shape: tuple) -> jax.Array:
    """Inverted dropout with a keep-mask of ``mask_shape`` broadcast against ``x``."""
    if key is None:
        raise ValueError("dropout in training mode needs a PRNG key, but key is None")
    if isinstance(p, (int, float)) and p >= 1.0:
        return jnp.zeros_like(x)
    keep = jax.random.bernoulli(key, 1.0 - p, mask_shape)
    return jnp.where(keep, x / (1.0 - p), jnp.zeros_like(x))


def dropout(x: jax.Array, p: float, *, train: bool, key) -> jax.Array:
    """Element-wise inverted dropout (PyTorch's Dropout): kept values are scaled by 1/(1-p).

    Identity when not training or p == 0. The same key gives the same mask.
    """
    if not train or (isinstance(p, (int, float)) and p == 0):  # p traced: a copy's rate
        return x
    return dropout_mask_apply(x, p, key, x.shape)


def dropout_weights(weights: jax.Array, p: float, train: bool, key) -> jax.Array:
    """Dropout of attention weights (`attention` names its rate ``dropout``)."""
    return dropout(weights, p, train=train, key=key)


def dropout_channels(x: jax.Array, p: float, *, train: bool, key) -> jax.Array:
    """Channel dropout (PyTorch's Dropout1d/2d) on a channels-last tensor (B, *S, C).

    One Bernoulli draw per (batch, channel) zeroes whole feature maps; kept ones are scaled
    by 1/(1-p). Identity when not training or p == 0.
    """
    if not train or (isinstance(p, (int, float)) and p == 0):  # p traced: a copy's rate
        return x
    mask_shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
    return dropout_mask_apply(x, p, key, mask_shape)


# ---------------------------------------------------------------------------------------------
# Embeddings and positions
# ---------------------------------------------------------------------------------------------


def embed(ids: jax.Array, table: jax.Array) -> jax.Array:
    """Look up rows of ``table`` (N, D) for integer ``ids`` of any shape -> (*ids.shape, D)."""
    return jnp.take(table, ids, axis=0)


def sinusoidal_positions(T: int, D: int, dtype) -> jax.Array:
    """Transformer sinusoidal encodings (T, D), computed once as a constant.

    PE[t, 2i] = sin(t / 10000^(2i/D)), PE[t, 2i+1] = cos(t / 10000^(2i/D)).
    """
    pos = np.arange(T, dtype=np.float64)[:, None]
    even = np.arange(0, D, 2, dtype=np.float64)
    angle = pos / np.power(10000.0, even / D)
    pe = np.zeros((T, D), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : D // 2])
    return jnp.asarray(pe, dtype=dtype)


def add_positions(x: jax.Array) -> jax.Array:
    """x (B, T, D) + sinusoidal encodings (T, D)."""
    return x + sinusoidal_positions(x.shape[-2], x.shape[-1], x.dtype)[None]


def add_learned_positions(x: jax.Array, table: jax.Array) -> jax.Array:
    """x (B, T, D) + table[:T], where ``table`` is (Tmax, D) with Tmax >= T."""
    return x + table[None, : x.shape[-2]].astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask=None,
    *,
    causal: bool = False,
    dropout: float = 0.0,
    train: bool = False,
    key=None,
    bias=None,
    scale=None,
) -> jax.Array:
    """Scaled dot-product attention: q (B, H, Tq, Dqk), k (B, H, Tk, Dqk), v (B, H, Tk, Dv).

    ``bias`` (optional) is added to the scores before the softmax, broadcast from its last
    axes to (B, H, Tq, Tk) (T5's relative positions, ALiBi); ``scale`` replaces 1/sqrt(Dqk)
    (1.0: none, as T5).

    ``mask`` is a boolean broadcastable to (B, H, Tq, Tk), True = attend (PyTorch's bool
    ``attn_mask`` convention), or None. ``causal`` keeps key j for query i iff j <= i
    (top-left aligned, as PyTorch's ``is_causal``). Scores are scaled by 1/sqrt(Dqk); masked
    scores are replaced by the dtype's most negative finite value, and where a ``mask`` is
    given, weights of masked keys are zeroed after the softmax, so that a fully masked row
    yields zeros instead of a uniform average.
    Dropout is applied to the attention weights in training mode.
    """
    tq, tk = q.shape[-2], k.shape[-2]
    factor = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * factor
    if bias is not None:
        scores = scores + jnp.broadcast_to(trailing(bias, 4), scores.shape).astype(scores.dtype)
    keep = None if mask is None else jnp.broadcast_to(trailing(mask, 4), scores.shape)
    if causal:
        tri = jnp.broadcast_to(jnp.tril(jnp.ones((tq, tk), dtype=bool)), scores.shape)
        keep = tri if keep is None else jnp.logical_and(keep, tri)
    if keep is not None:
        scores = jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores, axis=-1)
    if mask is not None:  # causality alone never masks a whole row: key 0 is always kept
        weights = jnp.where(keep, weights, jnp.zeros_like(weights))
    weights = dropout_weights(weights, dropout, train, key)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v)


def mha(
    x: jax.Array,
    z: jax.Array,
    p: dict,
    *,
    heads: int,
    causal: bool = False,
    dropout: float = 0.0,
    train: bool = False,
    key=None,
    mask=None,
    bias=None,
    scale=None,
) -> jax.Array:
    """Multi-head attention: queries from x (B, Tq, D), keys/values from z (B, Tk, Dkv).

    ``p`` holds wq (D, H*Dqk), wk (Dkv, H*Dqk), wv (Dkv, H*Dv), wo (H*Dv, Dout) and optionally
    bq, bk, bv, bo. Pass ``z = x`` for self-attention. Heads are contiguous slices of the
    projected features (head h uses columns h*Dqk:(h+1)*Dqk), as in PyTorch.
    ``mask`` (optional) is a boolean broadcastable to (B, H, Tq, Tk), True = attend; ``bias``
    and ``scale`` are `attention`'s.
    """
    b, tq, tk = x.shape[0], x.shape[1], z.shape[1]
    q = dense(x, p["wq"], p.get("bq"))
    k = dense(z, p["wk"], p.get("bk"))
    v = dense(z, p["wv"], p.get("bv"))
    dqk = q.shape[-1] // heads
    dv = v.shape[-1] // heads
    q = q.reshape(b, tq, heads, dqk)
    k = k.reshape(b, tk, heads, dqk)
    v = v.reshape(b, tk, heads, dv)
    out = None
    if mask is None and bias is None and scale is None and not (train and dropout > 0.0):
        out = fused_attention(q, k, v, causal=causal)
    if out is None:
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
        out = attention(
            q,
            k,
            v,
            mask,
            causal=causal,
            dropout=dropout,
            train=train,
            key=key,
            bias=bias,
            scale=scale,
        )
        out = out.transpose(0, 2, 1, 3)
    return dense(out.reshape(b, tq, heads * dv), p["wo"], p.get("bo"))


def fused_attention(q, k, v, *, causal: bool, implementation: str = "cudnn"):
    """Attention by ``jax.nn.dot_product_attention``'s cuDNN kernel, which never holds the
    T×T scores in memory (flash attention): q (B, Tq, H, Dqk), k (B, Tk, H, Dqk), v (B, Tk, H,
    Dv) in, (B, Tq, H, Dv) out. None where that kernel does not run: off an NVIDIA GPU, in
    float32, or where cuDNN's own checks refuse the head size or lengths; the caller then
    computes ``attention``. On a CPU, XLA's version of the same call compiled slower and ran
    no faster than ``attention``, so it is not used there."""
    half = q.dtype in (jnp.bfloat16, jnp.float16)
    if implementation == "cudnn" and (jax.default_backend() != "gpu" or not half):
        return None
    if v.shape != k.shape or (causal and q.shape[1] != k.shape[1]):
        return None  # the call takes one head size; cuDNN aligns a causal mask its own way
    try:
        return jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation=implementation
        )
    except (NotImplementedError, RuntimeError):  # cuDNN's checks, made while tracing
        return None


# ---------------------------------------------------------------------------------------------
# Patches and upsampling
# ---------------------------------------------------------------------------------------------


def patches(x: jax.Array, size: int) -> jax.Array:
    """Non-overlapping size x size patches of a channels-last image (B, H, W, C).

    Returns (B, M, C*P*P) with M = (H // P) * (W // P) patches in row-major order; each patch is
    flattened in CHANNELS-FIRST order (C, P, P), so it equals the channels-first computation.
    Rows/columns beyond a multiple of P are dropped (as a stride-P convolution would).
    """
    bsz, h, w, c = x.shape
    nh, nw = h // size, w // size
    x = x[:, : nh * size, : nw * size, :]
    x = x.reshape(bsz, nh, size, nw, size, c)
    x = x.transpose(0, 1, 3, 5, 2, 4)
    return x.reshape(bsz, nh * nw, c * size * size)


def upsample_nearest(x: jax.Array, factor: int) -> jax.Array:
    """Nearest-neighbour upsampling of every spatial axis of a channels-last tensor."""
    for axis in range(1, x.ndim - 1):
        x = jnp.repeat(x, factor, axis=axis)
    return x


def upsample_linear_axis(x: jax.Array, axis: int, factor: int) -> jax.Array:
    """Linear upsampling of one axis, PyTorch's align_corners=False convention.

    Output index o samples source position max((o + 0.5) / factor - 0.5, 0), interpolating
    between floor(src) and min(floor(src) + 1, n - 1). Indices and weights are constants.
    """
    n = x.shape[axis]
    src = np.maximum((np.arange(n * factor) + 0.5) / factor - 0.5, 0.0)
    lo = np.floor(src).astype(np.int32)
    lo = np.minimum(lo, n - 1)
    hi = np.minimum(lo + 1, n - 1)
    frac = src - lo
    shape = [1] * x.ndim
    shape[axis] = n * factor
    weight = jnp.asarray(frac.reshape(shape), dtype=x.dtype)
    a = jnp.take(x, lo, axis=axis)
    b = jnp.take(x, hi, axis=axis)
    return a * (1 - weight) + b * weight


def upsample_bilinear(x: jax.Array, factor: int) -> jax.Array:
    """Bilinear upsampling of a channels-last image (B, H, W, C) by an integer factor.

    Matches PyTorch's ``Upsample(scale_factor=factor, mode="bilinear", align_corners=False)``.
    """
    x = upsample_linear_axis(x, 1, factor)
    return upsample_linear_axis(x, 2, factor)


# ---------------------------------------------------------------------------------------------
# Recurrent layers
# ---------------------------------------------------------------------------------------------


def rnn_inputs(x: jax.Array, p: dict) -> jax.Array:
    """Input projections for all time steps, time-major: (T, B, G*Hd) = x @ w_ih + b_ih."""
    xi = dense(x, p["w_ih"], p.get("b_ih"))
    return jnp.swapaxes(xi, 0, 1)


def rnn(x: jax.Array, p: dict) -> jax.Array:
    """Elman RNN (PyTorch's nn.RNN, tanh): h_t = tanh(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh).

    x (B, T, D) -> all hidden states (B, T, Hd); the initial state is zero.
    """
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    hd = w_hh.shape[0]

    def step(h, xi):
        h = jnp.tanh(xi + dense(h, w_hh, b_hh))
        return h, h

    xs = rnn_inputs(x, p)
    h0 = jnp.zeros((x.shape[0], hd), dtype=jnp.result_type(xs, w_hh))
    _, hs = jax.lax.scan(step, h0, xs)
    return jnp.swapaxes(hs, 0, 1)


def lstm(x: jax.Array, p: dict) -> jax.Array:
    """LSTM (PyTorch's nn.LSTM, gate order i, f, g, o).

    i, f, o = sigmoid(...), g = tanh(...), c_t = f * c_{t-1} + i * g, h_t = o * tanh(c_t).
    x (B, T, D) -> all hidden states (B, T, Hd); initial h and c are zero.
    """
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    hd = w_hh.shape[0]

    def step(carry, xi):
        h, c = carry
        gates = xi + dense(h, w_hh, b_hh)
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    xs = rnn_inputs(x, p)
    zeros = jnp.zeros((x.shape[0], hd), dtype=jnp.result_type(xs, w_hh))
    _, hs = jax.lax.scan(step, (zeros, zeros), xs)
    return jnp.swapaxes(hs, 0, 1)


def gru(x: jax.Array, p: dict) -> jax.Array:
    """GRU (PyTorch's nn.GRU, gate order r, z, n).

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z likewise,
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h_t = (1 - z) * n + z * h_{t-1}.
    x (B, T, D) -> all hidden states (B, T, Hd); the initial state is zero.
    """
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    hd = w_hh.shape[0]

    def step(h, xi):
        hh = dense(h, w_hh, b_hh)
        xr, xz, xn = jnp.split(xi, 3, axis=-1)
        hr, hz, hn = jnp.split(hh, 3, axis=-1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        return h, h

    xs = rnn_inputs(x, p)
    h0 = jnp.zeros((x.shape[0], hd), dtype=jnp.result_type(xs, w_hh))
    _, hs = jax.lax.scan(step, h0, xs)
    return jnp.swapaxes(hs, 0, 1)


# -- helpers of the generated modules themselves -------------------------------------------------


def fold(key, i: int):
    """A key of its own for the i-th random draw of a function; None stays None (evaluation)."""
    return None if key is None else jax.random.fold_in(key, i)


def keep_products(prim, *_, **params) -> bool:
    """What the backward pass of a ×N group keeps from its forward pass: the outputs of
    convolutions, of matrix products with no batch axes and of cuDNN's fused attention (its
    output and softmax statistics, which its backward kernel reads); everything else (norms,
    activations, softmax, attention's batched products) it computes again.

    Values that cross the loop's boundary are written into stacked buffers and read back;
    recomputing the cheap ones from the kept products costs less than storing them (GPT-2's
    ×12 training step: 2.23 to 2.01 s on a 2-core CPU, and its compile 1.4 to 1.3 s).
    """
    if prim.name == "conv_general_dilated" or prim.name.startswith("dot_product_attention_fwd"):
        return True
    if prim.name == "dot_general":
        (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
        return not lhs_batch and not rhs_batch
    return False


def scan_group(step, x, xs, length: int):
    """A ×N group: ``jax.lax.scan`` of one copy over the stacked parameters (compiled once,
    whatever N), its backward pass keeping only what ``keep_products`` names."""
    return jax.lax.scan(jax.checkpoint(step, policy=keep_products), x, xs, length=length)


def checkpoint_copies(remat_on_cpu: bool) -> bool:
    """Whether `each_copy` runs its copies under the checkpoint: off a CPU always, on a CPU when
    the group asks (the module looks this up when it runs: a benchmark may replace it)."""
    return remat_on_cpu or jax.default_backend() != "cpu"


def each_copy(step, x, xs, first: int, length: int, remat_on_cpu: bool = True):
    """A short ×N group whose copies keep arrays of their own (``storage`` in the compiler):
    copies ``first`` to ``first + length - 1`` called in turn, each with its own arrays and key,
    their backward passes keeping what ``keep_products`` names, as a scanned group's do. XLA
    sees straight-line code, with no stack to slice in either pass (ResNet-50's training step
    compiled in 5.7 s against 9.9 s scanned, on a 2-core CPU).

    Without ``remat_on_cpu`` (a group of convolutions: ``storage.checkpointed_on_cpu``), on a
    CPU the copies run without the checkpoint, as one jitted function traced once for all of
    them: XLA:CPU planned the same memory either way, and ResNet-50's training step compiled
    in 3.4 to 3.5 s so against 4.4 s checkpointed. On an accelerator the checkpoint stays: on
    an H100, ResNet-50 keeping every residual needed 7.3 GiB against 4.6 GiB checkpointed and
    the Flax peer's 5.0. Returns the output and the copies' new states by copy number."""
    news = {}
    if checkpoint_copies(remat_on_cpu):
        kept = jax.checkpoint(step, policy=keep_products)  # traced once for all the copies
    else:
        kept = jax.jit(step)
    for k in range(first, first + length):
        x, news[str(k)] = kept(x, copy_of(xs, k, first))
    return x, news


def copy_of(xs, k: int, first: int):
    """Copy ``k``'s part of what a step reads: its arrays out of a dict by copy number, its key
    out of the keys split for the run that starts at copy ``first``."""
    if isinstance(xs, tuple):
        return tuple(copy_of(x, k, first) for x in xs)
    if isinstance(xs, dict):
        return xs[str(k)]
    return None if xs is None else xs[k - first]


def split_keys(key, n: int):
    """One key per copy of a ×N group, or None for all of them when no key was given."""
    return None if key is None else jax.random.split(key, n)


def unrolled(step, x, xs, length: int):
    """``jax.lax.scan``'s result, computed by a Python loop: ``--unroll``'s lowering of ×N."""
    ys = []
    for i in range(length):
        x, y = step(x, jax.tree.map(lambda a, i=i: a[i], xs))
        ys.append(y)
    return x, jax.tree.map(lambda *a: jnp.stack(a), *ys)


def identity(x: jax.Array) -> jax.Array:
    """A named junction in a figure; no computation."""
    return x


def prepend_token(x: jax.Array, e0: jax.Array) -> jax.Array:
    """ViT's class token: one trainable vector concatenated in front of each sequence."""
    token = jnp.broadcast_to(e0.astype(x.dtype), (x.shape[0], 1, x.shape[-1]))
    return jnp.concatenate([token, x], axis=1)


def l2_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    """Each vector of the last axis divided by its Euclidean norm (CLIP's embeddings)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def reparameterize(mean: jax.Array, logvar: jax.Array, *, train: bool, key) -> jax.Array:
    """A VAE's sample mean + exp(logvar / 2)·ε in training; the mean in evaluation."""
    if not train:
        return mean
    if key is None:
        raise ValueError("sampling in training needs a PRNG key: apply(..., train=True, key=k)")
    return mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)


def init_table(key, table: dict) -> dict:
    """Arrays for a table of ``path: (shape, how, scale)`` (see ``init_arrays``).

    Drawn on the host, so that initialising compiles nothing; under ``jax.jit``, ``vmap`` or
    ``eval_shape`` the same function runs as a callback, so a jitted ``init`` gives the very
    numbers of an eager one.
    """
    shapes = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape, _, _ in table.values()]
    arrays = on_host(key, lambda data: init_arrays(data, table), shapes, "init")
    return dict(zip(table, arrays))


def on_host(key, draw, shapes: list, what: str) -> list:
    """``draw(key_data)``'s NumPy arrays (of ``shapes``) on the device: drawn at once for a
    concrete key, by a host callback for a traced one, so that both give the same numbers."""
    data = jax.random.key_data(key)
    if isinstance(key, jax.core.Tracer):
        return list(jax.pure_callback(draw, shapes, data, vmap_method="sequential"))
    if data.ndim != 1:
        raise ValueError(f"{what} takes one key, not {data.shape[:-1]} of them: vmap it")
    return [jax.device_put(a) for a in draw(data)]


def unflatten(flat: dict) -> dict:
    """Nested dictionaries from "a/b/c" paths: the pytree whose paths mirror the spec."""
    out: dict = {}
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
