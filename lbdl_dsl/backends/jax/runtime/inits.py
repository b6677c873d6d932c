"""Initial parameters drawn on the host: NumPy's PCG64 stream, cut into spans drawn by threads
(``init_arrays``), and ``init_table``, a generated module's ``init``. These need three modules of
Python's standard library besides JAX and NumPy (``mmap``, ``os``, ``concurrent.futures``),
which every generated module imports.
"""

import mmap
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np


def init_arrays(
    key_data: jax.typing.ArrayLike,
    table: dict[str, tuple[tuple[int, ...], str, float]],
    workers: int = 0,
) -> list[np.ndarray]:
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
    for (_, how, scale), start, n in zip(table.values(), starts[:-1], sizes, strict=True):
        if not n:
            continue
        bound = np.float32(init_bound(how, scale))
        runs += [(start + at, min(1 << 18, n - at), bound) for at in range(0, n, 1 << 18)]
    total = sum(sizes)
    if not workers:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = max(1, min(8, cpus or 1, total >> 22))
    # each worker's runs, and the stream number it starts from
    spans: list[list[tuple[int, int, np.float32]]] = []
    first: list[int] = []
    at = 0
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
    for (shape, how, scale), start, n in zip(table.values(), starts[:-1], sizes, strict=True):
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


def normal_from_uniform(u: np.ndarray, std: float, *, truncated: bool = False) -> None:
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


def draw_runs(
    entropy: list[int], noise: np.ndarray, runs: list[tuple[int, int, np.float32]], first: int
) -> None:
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


def init_table(
    key: jax.Array, table: dict[str, tuple[tuple[int, ...], str, float]]
) -> dict[str, jax.Array]:
    """Arrays for a table of ``path: (shape, how, scale)`` (see ``init_arrays``).

    Drawn on the host, so that initialising compiles nothing; under ``jax.jit``, ``vmap`` or
    ``eval_shape`` the same function runs as a callback, so a jitted ``init`` gives the very
    numbers of an eager one.
    """
    shapes = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape, _, _ in table.values()]
    arrays = on_host(key, lambda data: init_arrays(data, table), shapes, "init")
    return dict(zip(table, arrays, strict=True))


def on_host(
    key: jax.Array,
    draw: Callable[[jax.Array], list[np.ndarray]],
    shapes: list[jax.ShapeDtypeStruct],
    what: str,
) -> list[jax.Array]:
    """``draw(key_data)``'s NumPy arrays (of ``shapes``) on the device: drawn at once for a
    concrete key, by a host callback for a traced one, so that both give the same numbers."""
    data = jax.random.key_data(key)
    if isinstance(key, jax.core.Tracer):
        return list(jax.pure_callback(draw, shapes, data, vmap_method="sequential"))
    if data.ndim != 1:
        raise ValueError(f"{what} takes one key, not {data.shape[:-1]} of them: vmap it")
    return [jax.device_put(a) for a in draw(data)]
