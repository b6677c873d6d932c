"""The generated module's own plumbing, named by no layer: the layout at its edges (channels
first outside, last inside), a key per random draw, the ×N groups (scanned, one call per copy,
or unrolled) and the nested dictionaries of its parameters.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def to_channels_last(x: jax.Array) -> jax.Array:
    """(B, C, *S) -> (B, *S, C): from the language's (PyTorch) layout to the internal one."""
    return jnp.moveaxis(x, 1, -1)


def to_channels_first(x: jax.Array) -> jax.Array:
    """(B, *S, C) -> (B, C, *S): from the internal layout back to the language's layout."""
    return jnp.moveaxis(x, -1, 1)


def fold(key: jax.Array | None, i: int) -> jax.Array | None:
    """A key of its own for the i-th random draw of a function; None stays None (evaluation)."""
    return None if key is None else jax.random.fold_in(key, i)


def keep_products(prim: Any, *_: Any, **params: Any) -> bool:
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


def scan_group(
    step: Callable[..., tuple[Any, Any]], x: Any, xs: Any, length: int
) -> tuple[Any, Any]:
    """A ×N group: ``jax.lax.scan`` of one copy over the stacked parameters (compiled once,
    whatever N), its backward pass keeping only what ``keep_products`` names."""
    return jax.lax.scan(jax.checkpoint(step, policy=keep_products), x, xs, length=length)


def checkpoint_copies(remat_on_cpu: bool) -> bool:
    """Whether `each_copy` runs its copies under the checkpoint: off a CPU always, on a CPU when
    the group asks (the module looks this up when it runs: a benchmark may replace it)."""
    return remat_on_cpu or jax.default_backend() != "cpu"


def each_copy(
    step: Callable[..., tuple[Any, Any]],
    x: Any,
    xs: Any,
    first: int,
    length: int,
    remat_on_cpu: bool = True,
) -> tuple[Any, dict[str, Any]]:
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


def copy_of(xs: Any, k: int, first: int) -> Any:
    """Copy ``k``'s part of what a step reads: its arrays out of a dict by copy number, its key
    out of the keys split for the run that starts at copy ``first``."""
    if isinstance(xs, tuple):
        return tuple(copy_of(x, k, first) for x in xs)
    if isinstance(xs, dict):
        return xs[str(k)]
    return None if xs is None else xs[k - first]


def split_keys(key: jax.Array | None, n: int) -> jax.Array | None:
    """One key per copy of a ×N group, or None for all of them when no key was given."""
    return None if key is None else jax.random.split(key, n)


def unrolled(step: Callable[..., tuple[Any, Any]], x: Any, xs: Any, length: int) -> tuple[Any, Any]:
    """``jax.lax.scan``'s result, computed by a Python loop: ``--unroll``'s lowering of ×N."""
    ys = []
    for i in range(length):
        x, y = step(x, jax.tree.map(lambda a, i=i: a[i], xs))
        ys.append(y)
    return x, jax.tree.map(lambda *a: jnp.stack(a), *ys)


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """Nested dictionaries from "a/b/c" paths: the pytree whose paths mirror the spec."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
