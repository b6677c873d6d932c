"""Autoregressive decoding: a prefill and one-token steps that are the same model.

`Decoder` executes the model's *decoding module*: the module ``--emit py`` writes, generated
with ``decode=True`` (`codegen.generate`), whose ``apply(params, cache, ids, pos=, context=)``
takes the tokens at positions ``pos`` to ``pos + t - 1`` and each box's cache in its state, and
returns the logits and the caches updated. The cache's layout comes from each box's registry
entry (`Layer.step`, gathered by `compiler.decoding`): a causal attention's keys and values
(kv heads only; the last W positions under a sliding window), a recurrent layer's carry.

One function is jitted: ``apply`` followed by the choice of the next token. JAX compiles it
once per shape, that is per (batch, tokens this call, context bucket): a prompt is prefilled in
chunks whose lengths are powers of two (37 tokens: 32, 4, 1), and the context is the smallest
power of two that holds prompt and new tokens (at least 16, at most the model's own limit), so
a generation compiles a few prefill shapes and one step shape, never one per token.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax import decode_weights, storage
from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.backends.jax.emit import Layout
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.compiler import decoding
from lbdl_dsl.core.errors import ArgumentError

MIN_CONTEXT = 16


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: the most likely (``greedy``), or drawn from the softmax of
    logits/temperature, kept to the ``top_k`` most likely (0: all) and then to the fewest whose
    probabilities sum to at least ``top_p`` (1.0: all), the order `transformers` applies them."""

    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (self.temperature > 0 and np.isfinite(self.temperature)):
            raise ArgumentError(f"temperature must be a positive number, got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ArgumentError(f"top_k must be a whole number ≥ 0, got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ArgumentError(f"top_p must be in (0, 1], got {self.top_p}")


def filtered_logits(logits: jax.Array, s: Sampling) -> jax.Array:
    """Logits (…, V) divided by the temperature, those outside top-k and top-p set to −inf:
    the distribution a token is drawn from is their softmax."""
    x = logits.astype(jnp.float32) / s.temperature
    if s.top_k and s.top_k < x.shape[-1]:
        kth = jax.lax.top_k(x, s.top_k)[0][..., -1:]
        x = jnp.where(x < kth, -jnp.inf, x)
    if s.top_p < 1.0:
        order = jnp.argsort(-x, axis=-1)
        sorted_x = jnp.take_along_axis(x, order, axis=-1)
        probs = jax.nn.softmax(sorted_x, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # the mass of the more likely tokens
        drop_sorted = before >= s.top_p
        drop = jnp.take_along_axis(drop_sorted, jnp.argsort(order, axis=-1), axis=-1)
        x = jnp.where(drop, -jnp.inf, x)
    return x


def choose(logits: jax.Array, key: jax.Array, s: Sampling) -> tuple[jax.Array, jax.Array]:
    """The next token of each row of logits (B, V), and its log-probability under the model
    (the softmax of the raw logits)."""
    if s.greedy:
        token = jnp.argmax(logits, axis=-1)
    else:
        token = jax.random.categorical(key, filtered_logits(logits, s), axis=-1)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return token.astype(jnp.int32), jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]


@dataclass(frozen=True)
class Generation:
    """What `Decoder.generate` returns: ``ids`` (B, prompt + new), the new tokens ``tokens``
    (B, new), each one's log-probability ``logprobs`` (B, new), and the logits of every step
    when asked for (B, new, V)."""

    ids: np.ndarray
    tokens: np.ndarray
    logprobs: np.ndarray
    logits: np.ndarray | None = None


def _known(d: Any) -> int:
    """A size that has its value (an `Expr`'s, or a whole number)."""
    v = d.as_int() if hasattr(d, "as_int") else d
    assert isinstance(v, int), d  # the model is compiled: every size has a value
    return v


def chunks(n: int) -> list[int]:
    """``n`` as a sum of powers of two, largest first: the prefill's call lengths."""
    return [1 << b for b in reversed(range(n.bit_length())) if n >> b & 1]


class Decoder:
    """Decodes with one model: ``prefill`` a prompt into a fresh cache, then ``step`` one token
    at a time; ``stream`` and ``generate`` do both."""

    def __init__(self, model: Any, limit: int | None = None) -> None:
        """``limit``: the most positions to decode, beside the model's own (the length a run
        was trained on, `lbdl generate`)."""
        self.model = model
        self.plan = decoding.plan(model.checked)
        if limit is not None:
            own = self.plan.limit
            self.plan = replace(self.plan, limit=limit if own is None else min(own, limit))
        # ×N groups unrolled: a one-token step reads each layer's weights once, and a loop
        # copies them out of their stack first (GPT-2 small's step: 69 ms unrolled, 102 ms
        # scanned, on an idle 2-core CPU)
        self.source = generate(model.checked, dtype=model.dtype, decode=True, unroll=True)
        namespace: dict[str, Any] = {"__name__": f"lbdl_decode_{model.name}"}
        exec(compile(self.source, f"<lbdl decode {model.checked.file}>", "exec"), namespace)  # noqa: S102
        self.module = namespace
        self._apply = namespace["apply"]
        self._many = len(model.checked.outputs) > 1
        self.traces = 0  # how many times a forward was traced (compiled): tests read it
        self._split: tuple[Any, Any] | None = None

    # -- the cache ------------------------------------------------------------------------------
    def context(self, needed: int) -> int:
        """The cache's length for ``needed`` positions: a power of two ≥ 16, within the limit."""
        limit = self.plan.limit
        if limit is not None and needed > limit:
            raise ArgumentError(
                f"{needed} positions (prompt and new tokens) exceed the model's context of {limit}",
                hint="shorten the prompt or ask for fewer new tokens (--max-new)",
            )
        size = max(MIN_CONTEXT, 1 << max(needed - 1, 0).bit_length())
        return size if limit is None else min(size, limit)

    def init_cache(self, batch: int, context: int, state: Any = None) -> dict[str, Any]:
        """Zeros for every box's cache, merged with the model's state (as the module's
        ``apply`` reads them both from one tree). A cache stacked over a ×N group is a list
        of its layers' arrays, as `split` makes the weights: each step updates them in place
        (`each_layer`)."""
        flat: dict[str, Any] = {}
        for path, (shape, _how, _arg) in self.model.module["STATE"].items():
            flat[path] = jnp.zeros(shape, jnp.float32)
        if state is not None:
            from lbdl_dsl.backends.jax import weights

            # copies: the cache is donated to each step, the caller's state must stay theirs
            flat.update({k: jnp.array(v) for k, v in weights.flatten(state).items()})
        for array in decoding.cache_arrays(self.model.checked.root, context, storage.per_copy):
            sizes = [_known(d) for d in array.stack]
            per = [_known(d) for d in array.spec.shape]
            if sizes and array.stack_roles[:1] == ("layers",):  # one array per layer
                rest = (*sizes[1:], batch, *per)
                flat[array.path] = [jnp.zeros(rest, jnp.float32) for _ in range(sizes[0])]
            else:
                flat[array.path] = jnp.zeros((*sizes, batch, *per), jnp.float32)
        tree: dict[str, Any] = unflatten(flat)
        return tree

    def split(self, params: Any) -> Any:
        """The parameters with each array stacked over an unrolled ×N group as a list of its
        layers (what the module's `each_layer` reads), made once per parameters given."""
        if self._split is not None and self._split[0] is params:
            return self._split[1]
        from lbdl_dsl.backends.jax import weights

        stacked = {
            a.path: _known(a.stack[0])
            for a in storage.stored(self.model.checked.root)
            if a.trainable and a.stack and a.stack_roles[:1] == ("layers",)
        }
        flat = weights.flatten(params)
        out = {k: [v[i] for i in range(stacked[k])] if k in stacked else v for k, v in flat.items()}
        tree = unflatten(decode_weights.prepare(out, self._layouts))
        if self.model.dtype != "float32":
            # the module casts every parameter to its compute type on entry; cast here, once,
            # the cast is a no-op there: on an H200, LLaMA-shaped 1B in bf16 spent half of each
            # decoded token (1.6 of 3.1 ms) converting its float32 weights
            compute = jnp.dtype(self.model.dtype)
            tree = jax.tree.map(lambda a: a.astype(compute), tree)
        self._split = (params, tree)
        return tree

    @functools.cached_property
    def _layouts(self) -> dict[str, Layout]:
        from lbdl_dsl.backends.jax.lowering import DECODE_LAYOUTS

        return decode_weights.layouts(storage.stored(self.model.checked.root), DECODE_LAYOUTS)

    # -- one call of the module -----------------------------------------------------------------
    @functools.cached_property
    def _forward(self) -> Any:
        def forward(
            params: Any,
            cache: Any,
            ids: Any,
            pos: Any,
            key: Any,
            *,
            context: int,
            sampling: Sampling,
            fresh: bool,
        ) -> tuple[Any, Any, Any, Any]:
            self.traces += 1
            # a fresh cache's first call: its position the int 0, which the runtime reads as
            # "nothing cached yet" (`cached_attention`, `ring_write`)
            at = 0 if fresh else pos
            out, cache = self._apply(params, cache, ids, pos=at, context=context)
            logits = (out[self.plan.output] if self._many else out)[:, -1].astype(jnp.float32)
            token, logp = choose(logits, key, sampling)
            return token, logp, logits, cache

        # the cache is donated: its buffers are the new cache's, updated in place
        return jax.jit(
            forward, static_argnames=("context", "sampling", "fresh"), donate_argnames="cache"
        )

    def run(
        self,
        params: Any,
        cache: Any,
        ids: Any,
        pos: int,
        key: Any,
        context: int,
        sampling: Sampling,
    ) -> Any:
        """The module on ``ids`` (B, t) at positions pos..pos+t-1; returns the next token, its
        log-probability and the logits after the last of them, and the cache. At ``pos`` 0 the
        cache must be fresh (`init_cache`): the prompt's first chunk attends to itself alone."""
        return self._forward(
            self.split(params),
            cache,
            ids,
            jnp.int32(pos),
            key,
            context=context,
            sampling=sampling,
            fresh=pos == 0,
        )

    # -- generation -----------------------------------------------------------------------------
    def check_prompt(self, ids: Any) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] == 0 or not np.issubdtype(arr.dtype, np.integer):
            raise ArgumentError(
                f"the prompt must be token ids of shape (T,) or (B, T), T ≥ 1; got "
                f"{arr.dtype} {arr.shape}"
            )
        bad = (arr < 0) | (arr >= self.plan.vocab)
        if bad.any():
            raise ArgumentError(
                f"token id {int(arr[bad][0])} is outside the model's vocabulary of "
                f"{self.plan.vocab} (ids 0 to {self.plan.vocab - 1})",
                hint="the tokenizer does not fit this model",
            )
        return arr.astype(np.int32)

    def prefill(
        self,
        params: Any,
        prompt: np.ndarray,
        context: int,
        sampling: Sampling,
        key: Any,
        state: Any,
    ) -> tuple[Any, Any, Any, Any, Any]:
        """A fresh cache filled with the prompt (B, t), in chunks (`chunks`); returns the first
        new token, its log-probability, the logits it came from, the cache and the key left."""
        batch, t = prompt.shape
        cache = self.init_cache(batch, context, state)
        pos = 0
        out: Any = None
        for n in chunks(t):
            key, sub = jax.random.split(key)
            piece = jnp.asarray(prompt[:, pos : pos + n])
            out = self.run(params, cache, piece, pos, sub, context, sampling)
            cache = out[3]
            pos += n
        token, logp, logits, cache = out
        return token, logp, logits, cache, key

    def stream(
        self,
        params: Any,
        ids: Any,
        max_new: int,
        sampling: Sampling = Sampling(),
        seed: int = 0,
        state: Any = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Yields (tokens (B,), their log-probabilities (B,), the logits they came from
        (B, V)) for each new token, as it is made: one call of the module per token."""
        _whole(max_new)
        prompt = self.check_prompt(ids)
        pos = prompt.shape[1]
        context = self.context(pos + max_new)
        token, logp, logits, cache, key = self.prefill(
            params, prompt, context, sampling, jax.random.key(seed), state
        )
        for i in range(max_new):
            yield np.asarray(token), np.asarray(logp), np.asarray(logits)
            if i + 1 == max_new:
                break
            key, sub = jax.random.split(key)
            token, logp, logits, cache = self.run(
                params, cache, token[:, None], pos, sub, context, sampling
            )
            pos += 1

    @functools.cached_property
    def _loop(self) -> Any:
        def loop(
            params: Any,
            cache: Any,
            first: tuple[Any, Any, Any],
            pos: Any,
            steps: Any,
            key: Any,
            *,
            context: int,
            sampling: Sampling,
            keep_logits: bool,
        ) -> tuple[Any, Any, Any, Any]:
            """The tokens after the first, one step at a time as `stream` makes them (the
            same splits of the key, the same module), inside one compiled loop: no dispatch,
            no copy to the host and no new buffers per token. The outputs hold ``context``
            rows (a size known when compiling; ``steps``, how many are made, is not)."""
            self.traces += 1
            token, logp, logits = first
            b = token.shape[0]
            tokens = jnp.zeros((b, context), jnp.int32).at[:, 0].set(token)
            logps = jnp.zeros((b, context), jnp.float32).at[:, 0].set(logp)
            kept = jnp.zeros((b, context if keep_logits else 1, logits.shape[-1]), jnp.float32)
            kept = kept.at[:, 0].set(logits)

            def body(i: Any, carry: tuple[Any, ...]) -> tuple[Any, ...]:
                cache, token, key, tokens, logps, kept = carry
                key, sub = jax.random.split(key)
                out, cache = self._apply(
                    params, cache, token[:, None], pos=pos + i, context=context
                )
                logits = (out[self.plan.output] if self._many else out)[:, -1].astype(jnp.float32)
                token, logp = choose(logits, sub, sampling)
                tokens = tokens.at[:, i + 1].set(token)
                logps = logps.at[:, i + 1].set(logp)
                if keep_logits:
                    kept = kept.at[:, i + 1].set(logits)
                return cache, token, key, tokens, logps, kept

            carry = (cache, token, key, tokens, logps, kept)
            cache, _, _, tokens, logps, kept = jax.lax.fori_loop(0, steps, body, carry)
            return tokens, logps, kept, cache  # the cache: where its donated buffers go

        return jax.jit(
            loop, static_argnames=("context", "sampling", "keep_logits"), donate_argnames="cache"
        )

    def generate(
        self,
        params: Any,
        ids: Any,
        max_new: int,
        sampling: Sampling = Sampling(),
        seed: int = 0,
        state: Any = None,
        keep_logits: bool = False,
    ) -> Generation:
        """``max_new`` tokens after the prompt: the prefill, then every other token in one
        call of a compiled loop (`_loop`); the same tokens, log-probabilities and logits as
        `stream` gives one call at a time."""
        _whole(max_new)
        prompt = self.check_prompt(ids)
        batch, t = prompt.shape
        context = self.context(t + max_new)
        if max_new == 0:
            empty = np.zeros((batch, 0), np.int32)
            return Generation(prompt, empty, np.zeros((batch, 0), np.float32))
        *first, cache, key = self.prefill(
            params, prompt, context, sampling, jax.random.key(seed), state
        )
        tokens, logps, kept, _ = self._loop(
            self.split(params),
            cache,
            tuple(first),
            jnp.int32(t),
            jnp.int32(max_new - 1),
            key,
            context=context,
            sampling=sampling,
            keep_logits=keep_logits,
        )
        new = np.asarray(tokens)[:, :max_new]
        logits = np.asarray(kept)[:, :max_new] if keep_logits else None
        return Generation(
            np.concatenate([prompt, new], 1), new, np.asarray(logps)[:, :max_new], logits
        )


def _whole(max_new: Any) -> None:
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 0:
        raise ArgumentError(f"max_new must be a whole number ≥ 0, got {max_new!r}")
