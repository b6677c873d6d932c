"""Plain NumPy reference implementations of the JAX runtime functions.

Written independently of JAX, with straightforward loops, in CHANNELS-FIRST layout as PyTorch
does: images (B, C, H, W), 1-D signals (B, C, T), sequences (B, T, D).

Parameters use the SAME layouts as ``lbdl_dsl.backends.jax.runtime`` (the user-visible ones),
so a model's parameters can be fed to both:

* dense ``w`` (Din, Dout); conv ``w`` (*k, Cin // groups, Cout);
  transposed conv ``w`` (*k, Cin, Cout // groups);
* mha ``wq`` (D, H*Dqk), ``wk`` (Dkv, H*Dqk), ``wv`` (Dkv, H*Dv), ``wo`` (H*Dv, Dout);
* rnn/lstm/gru ``w_ih`` (D, G*Hd), ``w_hh`` (Hd, G*Hd), ``b_ih``, ``b_hh`` (G*Hd,).

Everything is computed in float64.
"""

import math

import numpy as np

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _pad_pairs(padding, n, kernel=None, dilation=None):
    """Normalise ``padding`` (int, ints, (lo, hi) pairs or "same") to n (lo, hi) pairs."""
    if isinstance(padding, str):
        assert padding == "same"
        pairs = []
        for k, d in zip(kernel, dilation, strict=True):
            total = d * (k - 1)
            left = total // 2
            pairs.append((left, total - left))
        return pairs
    if isinstance(padding, int):
        return [(padding, padding)] * n
    pairs = []
    for p in padding:
        if isinstance(p, int):
            pairs.append((p, p))
        else:
            pairs.append((int(p[0]), int(p[1])))
    return pairs


def _tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


# ---------------------------------------------------------------------------------------------
# Dense and convolutions
# ---------------------------------------------------------------------------------------------


def dense_ref(x, w, b=None):
    """y[..., o] = sum_i x[..., i] w[i, o] + b[o]."""
    x = np.asarray(x, np.float64)
    y = np.zeros((*x.shape[:-1], w.shape[1]))
    for i in range(w.shape[0]):
        y += x[..., i : i + 1] * w[i]
    if b is not None:
        y = y + b
    return y


def conv_nd_ref(x, w, b, stride, padding, dilation, groups):
    """PyTorch Conv1d/Conv2d on channels-first x (B, Cin, *S) with w (*k, Cin // g, Cout).

    ``padding``: int, ints (symmetric), (lo, hi) pairs, or "same".
    """
    x = np.asarray(x, np.float64)
    n = x.ndim - 2
    stride, dilation = _tup(stride, n), _tup(dilation, n)
    kernel = w.shape[:n]
    pads = _pad_pairs(padding, n, kernel, dilation)
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    cin_g, cout = w.shape[n], w.shape[n + 1]
    cout_g = cout // groups
    out_size = [
        (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(n)
    ]
    out = np.zeros((x.shape[0], cout, *out_size))
    for pos in np.ndindex(*out_size):
        for tap in np.ndindex(*kernel):
            src = tuple(pos[i] * stride[i] + tap[i] * dilation[i] for i in range(n))
            xs = xp[(slice(None), slice(None)) + src]  # (B, Cin)
            for g in range(groups):
                xin = xs[:, g * cin_g : (g + 1) * cin_g]
                wk = w[tap][:, g * cout_g : (g + 1) * cout_g]
                out[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + pos] += xin @ wk
    if b is not None:
        out += np.reshape(b, (cout,) + (1,) * n)
    return out


def conv_transpose_nd_ref(x, w, b, stride, padding, output_padding, dilation, groups):
    """PyTorch ConvTranspose1d/2d on channels-first x (B, Cin, *S), w (*k, Cin, Cout // g).

    Scatter form: full[o, i * s + j * d] += x[c, i] * w[j, c, o] (within a group), then crop
    ``padding`` at the start and keep (in - 1) * s - 2p + d (k - 1) + output_padding + 1.
    ``w[j, c, o]`` is PyTorch's ``weight[c, o, j]``.
    """
    x = np.asarray(x, np.float64)
    n = x.ndim - 2
    stride, dilation = _tup(stride, n), _tup(dilation, n)
    padding, output_padding = _tup(padding, n), _tup(output_padding, n)
    kernel = w.shape[:n]
    cin, cout_g = w.shape[n], w.shape[n + 1]
    cin_g = cin // groups
    cout = cout_g * groups
    in_size = x.shape[2:]
    full_size = [
        (in_size[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + output_padding[i]
        for i in range(n)
    ]
    full = np.zeros((x.shape[0], cout, *full_size))
    for pos in np.ndindex(*in_size):
        xs = x[(slice(None), slice(None)) + pos]  # (B, Cin)
        for tap in np.ndindex(*kernel):
            dst = tuple(pos[i] * stride[i] + tap[i] * dilation[i] for i in range(n))
            for g in range(groups):
                contrib = xs[:, g * cin_g : (g + 1) * cin_g] @ w[tap][g * cin_g : (g + 1) * cin_g]
                full[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + dst] += contrib
    out_size = [
        (in_size[i] - 1) * stride[i]
        - 2 * padding[i]
        + dilation[i] * (kernel[i] - 1)
        + output_padding[i]
        + 1
        for i in range(n)
    ]
    crop = tuple(slice(padding[i], padding[i] + out_size[i]) for i in range(n))
    out = full[(slice(None), slice(None)) + crop]
    if b is not None:
        out = out + np.reshape(b, (cout,) + (1,) * n)
    return out


# ---------------------------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------------------------


def _pool_windows(x, kernel, stride, padding, dilation, fill):
    """Yield (output position, list of window values (B, C)) for channels-first x."""
    n = x.ndim - 2
    kernel, stride = _tup(kernel, n), _tup(stride, n)
    padding, dilation = _tup(padding, n), _tup(dilation, n)
    xp = np.pad(x, [(0, 0), (0, 0), *((p, p) for p in padding)], constant_values=fill)
    out_size = [
        (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(n)
    ]
    windows = []
    for pos in np.ndindex(*out_size):
        vals = []
        for tap in np.ndindex(*kernel):
            src = tuple(pos[i] * stride[i] + tap[i] * dilation[i] for i in range(n))
            vals.append(xp[(slice(None), slice(None)) + src])
        windows.append((pos, vals))
    return out_size, windows


def max_pool_ref(x, kernel, stride, padding, dilation=1):
    """PyTorch MaxPool1d/2d (ceil_mode=False), channels-first; padding is -inf."""
    x = np.asarray(x, np.float64)
    out_size, windows = _pool_windows(x, kernel, stride, padding, dilation, -np.inf)
    out = np.zeros((*x.shape[:2], *out_size))
    for pos, vals in windows:
        out[(slice(None), slice(None)) + pos] = np.max(np.stack(vals), axis=0)
    return out


def avg_pool_ref(x, kernel, stride, padding):
    """PyTorch AvgPool1d/2d with count_include_pad=True, channels-first."""
    x = np.asarray(x, np.float64)
    out_size, windows = _pool_windows(x, kernel, stride, padding, 1, 0.0)
    out = np.zeros((*x.shape[:2], *out_size))
    for pos, vals in windows:
        out[(slice(None), slice(None)) + pos] = np.sum(np.stack(vals), axis=0) / len(vals)
    return out


def global_avg_pool_ref(x):
    """Mean over spatial axes of channels-first x, keepdims: (B, C, 1, 1)."""
    x = np.asarray(x, np.float64)
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


# ---------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------


def batch_norm_ref(x, scale, bias, mean, var, train, momentum, eps):
    """PyTorch BatchNorm on channels-first x (B, C, *S); returns (y, new_mean, new_var)."""
    x = np.asarray(x, np.float64)
    c = x.shape[1]
    shape = (1, c) + (1,) * (x.ndim - 2)
    if train:
        # Gather each channel's values explicitly.
        per_channel = np.moveaxis(x, 1, 0).reshape(c, -1)
        n = per_channel.shape[1]
        bm = per_channel.sum(axis=1) / n
        bv = ((per_channel - bm[:, None]) ** 2).sum(axis=1) / n
        unbiased = ((per_channel - bm[:, None]) ** 2).sum(axis=1) / (n - 1)
        new_mean = (1 - momentum) * mean + momentum * bm
        new_var = (1 - momentum) * var + momentum * unbiased
        use_mean, use_var = bm, bv
    else:
        new_mean, new_var = np.asarray(mean), np.asarray(var)
        use_mean, use_var = mean, var
    y = (x - np.reshape(use_mean, shape)) / np.sqrt(np.reshape(use_var, shape) + eps)
    y = y * np.reshape(scale, shape) + np.reshape(bias, shape)
    return y, new_mean, new_var


def layer_norm_ref(x, scale, bias, eps, n_axes):
    """PyTorch LayerNorm over the last ``n_axes`` axes (biased variance)."""
    x = np.asarray(x, np.float64)
    lead = x.shape[: x.ndim - n_axes]
    flat = x.reshape(*lead, -1)
    mu = flat.mean(axis=-1, keepdims=True)
    var = ((flat - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((flat - mu) / np.sqrt(var + eps)).reshape(x.shape)
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


def group_norm_ref(x, scale, bias, groups, eps):
    """PyTorch GroupNorm on channels-first x (B, C, *S); scale/bias (C,)."""
    x = np.asarray(x, np.float64)
    b, c = x.shape[:2]
    cg = c // groups
    y = np.zeros_like(x)
    for i in range(b):
        for g in range(groups):
            chunk = x[i, g * cg : (g + 1) * cg]
            mu = chunk.mean()
            var = ((chunk - mu) ** 2).mean()
            y[i, g * cg : (g + 1) * cg] = (chunk - mu) / np.sqrt(var + eps)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * np.reshape(scale, shape) + np.reshape(bias, shape)


def rms_norm_ref(x, scale, eps):
    """PyTorch RMSNorm over the last axis."""
    x = np.asarray(x, np.float64)
    rms = np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    return x / rms * scale


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def relu_ref(x):
    return np.maximum(x, 0.0)


def tanh_ref(x):
    return np.tanh(x)


def sigmoid_ref(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def leaky_relu_ref(x, a):
    return np.where(x >= 0, x, a * x)


def gelu_ref(x, approximate=False):
    """Exact: 0.5 x (1 + erf(x / sqrt 2)); approximate: PyTorch's tanh formula."""
    x = np.asarray(x, np.float64)
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def silu_ref(x):
    return x * sigmoid_ref(x)


def softmax_ref(x, axis):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def dropout_ref(x, keep, p):
    """Inverted dropout given an explicit boolean keep-mask broadcastable to x."""
    return np.where(keep, np.asarray(x, np.float64) / (1 - p), 0.0)


# ---------------------------------------------------------------------------------------------
# Embeddings and positions
# ---------------------------------------------------------------------------------------------


def embed_ref(ids, table):
    ids = np.asarray(ids)
    out = np.zeros((*ids.shape, table.shape[1]))
    for idx in np.ndindex(*ids.shape):
        out[idx] = table[ids[idx]]
    return out


def sinusoidal_positions_ref(T, D):
    """PE[t, 2i] = sin(t / 10000^(2i/D)), PE[t, 2i+1] = cos(t / 10000^(2i/D))."""
    pe = np.zeros((T, D))
    for t in range(T):
        for j in range(D):
            i2 = j - (j % 2)
            angle = t / 10000 ** (i2 / D)
            pe[t, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def add_positions_ref(x):
    """x (B, T, D) + sinusoidal encodings."""
    return np.asarray(x, np.float64) + sinusoidal_positions_ref(x.shape[1], x.shape[2])[None]


def add_learned_positions_ref(x, table):
    """x (B, T, D) + table[:T]."""
    return np.asarray(x, np.float64) + table[None, : x.shape[1]]


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


def attention_ref(q, k, v, mask=None, causal=False):
    """Scaled dot-product attention, q (B, H, Tq, Dqk), k (B, H, Tk, Dqk), v (B, H, Tk, Dv).

    ``mask``: boolean broadcastable to (B, H, Tq, Tk), True = attend. Causal keeps j <= i.
    A query whose keys are all masked outputs zeros.
    """
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b, h, tq, d = q.shape
    tk = k.shape[2]
    keep = np.ones((b, h, tq, tk), dtype=bool)
    if mask is not None:
        keep &= np.broadcast_to(mask, (b, h, tq, tk))
    if causal:
        keep &= np.tri(tq, tk, dtype=bool)
    out = np.zeros((b, h, tq, v.shape[-1]))
    for bi in range(b):
        for hi in range(h):
            for i in range(tq):
                cols = [j for j in range(tk) if keep[bi, hi, i, j]]
                if not cols:
                    continue
                s = np.array([q[bi, hi, i] @ k[bi, hi, j] / math.sqrt(d) for j in cols])
                wts = np.exp(s - s.max())
                wts /= wts.sum()
                for wt, j in zip(wts, cols, strict=True):
                    out[bi, hi, i] += wt * v[bi, hi, j]
    return out


def mha_ref(x, z, p, heads, causal=False, mask=None):
    """Multi-head attention with separate projections (see module docstring for layouts)."""
    x, z = np.asarray(x, np.float64), np.asarray(z, np.float64)
    q = dense_ref(x, p["wq"], p.get("bq"))
    k = dense_ref(z, p["wk"], p.get("bk"))
    v = dense_ref(z, p["wv"], p.get("bv"))
    dqk = q.shape[-1] // heads
    dv = v.shape[-1] // heads
    outs = []
    for h in range(heads):
        qh = q[:, None, :, h * dqk : (h + 1) * dqk]
        kh = k[:, None, :, h * dqk : (h + 1) * dqk]
        vh = v[:, None, :, h * dv : (h + 1) * dv]
        mh = None
        if mask is not None:
            m = np.broadcast_to(mask, (x.shape[0], heads, x.shape[1], z.shape[1]))
            mh = m[:, h : h + 1]
        outs.append(attention_ref(qh, kh, vh, mh, causal)[:, 0])
    return dense_ref(np.concatenate(outs, axis=-1), p["wo"], p.get("bo"))


# ---------------------------------------------------------------------------------------------
# Patches and upsampling
# ---------------------------------------------------------------------------------------------


def patches_ref(x, size):
    """Channels-first image (B, C, H, W) -> (B, M, C*P*P), row-major patches, (C, P, P) order."""
    x = np.asarray(x, np.float64)
    b, c, h, w = x.shape
    nh, nw = h // size, w // size
    out = np.zeros((b, nh * nw, c * size * size))
    for i in range(nh):
        for j in range(nw):
            patch = x[:, :, i * size : (i + 1) * size, j * size : (j + 1) * size]
            out[:, i * nw + j] = patch.reshape(b, -1)
    return out


def upsample_nearest_ref(x, factor):
    """PyTorch nearest upsampling of channels-first (B, C, *S) by an integer factor."""
    x = np.asarray(x, np.float64)
    out_size = [s * factor for s in x.shape[2:]]
    out = np.zeros((*x.shape[:2], *out_size))
    for pos in np.ndindex(*out_size):
        src = tuple(p // factor for p in pos)
        out[(slice(None), slice(None)) + pos] = x[(slice(None), slice(None)) + src]
    return out


def upsample_bilinear_ref(x, factor):
    """PyTorch bilinear upsampling (align_corners=False) of (B, C, H, W) by an integer factor."""
    x = np.asarray(x, np.float64)
    b, c, h, w = x.shape

    def source(o, n):
        s = max((o + 0.5) / factor - 0.5, 0.0)
        i0 = min(int(math.floor(s)), n - 1)
        i1 = min(i0 + 1, n - 1)
        return i0, i1, s - i0

    out = np.zeros((b, c, h * factor, w * factor))
    for oy in range(h * factor):
        y0, y1, ly = source(oy, h)
        for ox in range(w * factor):
            x0, x1, lx = source(ox, w)
            out[:, :, oy, ox] = (
                (1 - ly) * (1 - lx) * x[:, :, y0, x0]
                + (1 - ly) * lx * x[:, :, y0, x1]
                + ly * (1 - lx) * x[:, :, y1, x0]
                + ly * lx * x[:, :, y1, x1]
            )
    return out


# ---------------------------------------------------------------------------------------------
# Recurrent layers (step-by-step loops, PyTorch equations and gate order)
# ---------------------------------------------------------------------------------------------


def _gate(p, xt, h, g):
    """(x_t W_i{g} + b_i{g}, h W_h{g} + b_h{g}) for gate number g."""
    hd = p["w_hh"].shape[0]
    cols = slice(g * hd, (g + 1) * hd)
    xi = xt @ p["w_ih"][:, cols]
    hh = h @ p["w_hh"][:, cols]
    if p.get("b_ih") is not None:
        xi = xi + p["b_ih"][cols]
    if p.get("b_hh") is not None:
        hh = hh + p["b_hh"][cols]
    return xi, hh


def rnn_ref(x, p):
    """Elman RNN (tanh), x (B, T, D) -> (B, T, Hd), zero initial state."""
    x = np.asarray(x, np.float64)
    hd = p["w_hh"].shape[0]
    h = np.zeros((x.shape[0], hd))
    out = []
    for t in range(x.shape[1]):
        xi, hh = _gate(p, x[:, t], h, 0)
        h = np.tanh(xi + hh)
        out.append(h)
    return np.stack(out, axis=1)


def lstm_ref(x, p):
    """LSTM with gates (i, f, g, o), x (B, T, D) -> (B, T, Hd), zero initial h and c."""
    x = np.asarray(x, np.float64)
    hd = p["w_hh"].shape[0]
    h = np.zeros((x.shape[0], hd))
    c = np.zeros((x.shape[0], hd))
    out = []
    for t in range(x.shape[1]):
        i = sigmoid_ref(sum(_gate(p, x[:, t], h, 0)))
        f = sigmoid_ref(sum(_gate(p, x[:, t], h, 1)))
        g = np.tanh(sum(_gate(p, x[:, t], h, 2)))
        o = sigmoid_ref(sum(_gate(p, x[:, t], h, 3)))
        c = f * c + i * g
        h = o * np.tanh(c)
        out.append(h)
    return np.stack(out, axis=1)


def gru_ref(x, p):
    """GRU with gates (r, z, n), x (B, T, D) -> (B, T, Hd), zero initial state."""
    x = np.asarray(x, np.float64)
    hd = p["w_hh"].shape[0]
    h = np.zeros((x.shape[0], hd))
    out = []
    for t in range(x.shape[1]):
        r = sigmoid_ref(sum(_gate(p, x[:, t], h, 0)))
        z = sigmoid_ref(sum(_gate(p, x[:, t], h, 1)))
        xn, hn = _gate(p, x[:, t], h, 2)
        n = np.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out, axis=1)
