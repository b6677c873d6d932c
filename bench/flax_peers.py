"""Hand-written Flax (linen) peers of the architectures our compiler generates.

The benchmark is only meaningful if the peer is what a careful engineer would write by
hand, so these models use the stock linen layers (``nn.Conv``, ``nn.BatchNorm``,
``nn.Dense``, ``nn.Embed``) and ``jax.nn.dot_product_attention`` instead of anything
tuned to look good (or bad) next to our output. Images are NHWC because that is the
layout XLA prefers for convolutions on every backend Flax targets.

Each ``make_*`` function returns a :class:`Peer`: plain, *un-jitted* callables, so that
the timing harness decides what gets compiled and when, exactly as it does for our
compiler's models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

Array = jax.Array
Variables = Any  # a Flax variable collection pytree ({"params": ..., "batch_stats": ...})

# Optimiser settings shared by every peer so timings compare like with like.
LEARNING_RATE = 0.01
MOMENTUM = 0.9

# PyTorch's BatchNorm momentum 0.1 means "new = 0.9 * old + 0.1 * batch"; Flax states the
# same rule with the weight on the *old* value, hence 0.9 here.
BN_MOMENTUM = 0.9
BN_EPS = 1e-5

# torchvision initialises ResNet convolutions with Kaiming-normal over fan-out; matching
# it keeps activations in a sane range so short training runs give finite losses.
_conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


# --------------------------------------------------------------------------- ResNet-50


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 bottleneck residual block (He et al. 2016, v1).

    The stride sits on the first 1x1 convolution, as in the original paper, rather than
    on the 3x3 ("v1.5"); it changes FLOPs, not parameter count, and our compiler emits
    the paper's placement, so the peer must too.
    """

    width: int
    stride: int = 1
    project: bool = False
    expansion: int = 4
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        out_ch = self.width * self.expansion
        conv = _conv_partial(self.dtype)
        norm = _bn_partial(self.dtype, train)

        y = conv(self.width, (1, 1), strides=(self.stride, self.stride), padding="VALID")(x)
        y = nn.relu(norm()(y))
        y = conv(self.width, (3, 3), padding=((1, 1), (1, 1)))(y)
        y = nn.relu(norm()(y))
        y = conv(out_ch, (1, 1), padding="VALID")(y)
        y = norm()(y)

        shortcut = x
        if self.project:
            shortcut = conv(out_ch, (1, 1), strides=(self.stride, self.stride), padding="VALID")(x)
            shortcut = norm()(shortcut)
        return nn.relu(y + shortcut)


def _conv_partial(dtype: Any) -> Callable[..., nn.Conv]:
    """Convolutions feeding batchnorm carry no bias: BN's shift would absorb it."""

    def build(features: int, kernel: tuple[int, int], **kwargs: Any) -> nn.Conv:
        return nn.Conv(
            features, kernel, use_bias=False, dtype=dtype, kernel_init=_conv_init, **kwargs
        )

    return build


def _bn_partial(dtype: Any, train: bool) -> Callable[[], nn.BatchNorm]:
    """One place for BN hyper-parameters so every norm layer agrees with PyTorch's."""

    def build() -> nn.BatchNorm:
        return nn.BatchNorm(
            use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS, dtype=dtype
        )

    return build


class ResNet50(nn.Module):
    """ResNet-50 for ImageNet: 25,557,032 trainable parameters."""

    stages: Sequence[int] = (3, 4, 6, 3)
    widths: Sequence[int] = (64, 128, 256, 512)
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, train: bool = False) -> Array:
        x = x.astype(self.dtype)
        x = _conv_partial(self.dtype)(64, (7, 7), strides=(2, 2), padding=((3, 3), (3, 3)))(x)
        x = nn.relu(_bn_partial(self.dtype, train)()(x))
        # max_pool pads with -inf, so the padded border never wins the max.
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for i, (blocks, width) in enumerate(zip(self.stages, self.widths, strict=True)):
            for j in range(blocks):
                # Only the first block of a stage changes shape, so only it needs a
                # projection shortcut; the first stage keeps resolution (stride 1).
                stride = (1 if i == 0 else 2) if j == 0 else 1
                x = Bottleneck(width, stride=stride, project=j == 0, dtype=self.dtype)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        # Logits in float32 so the loss is stable even when the body runs in bf16.
        return nn.Dense(self.num_classes, dtype=jnp.float32)(x)


# ----------------------------------------------------------------------------- GPT-2


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused QKV projection, as in GPT-2."""

    d: int
    heads: int
    n_layer: int
    dtype: Any = jnp.float32
    attention: str | None = None  # jax.nn.dot_product_attention's implementation

    @nn.compact
    def __call__(self, x: Array) -> Array:
        b, t, _ = x.shape
        head_dim = self.d // self.heads
        qkv = nn.Dense(3 * self.d, dtype=self.dtype, kernel_init=_gpt_init, name="qkv")(x)
        q, k, v = jnp.split(qkv.reshape(b, t, 3, self.heads, head_dim), 3, axis=2)
        # jax.nn.dot_product_attention is the library's own fused path; a hand-written
        # softmax(QK^T)V would be slower than what a real Flax user gets.
        # (on a GPU, "cudnn" is its flash-attention kernel).
        y = jax.nn.dot_product_attention(
            q[:, :, 0], k[:, :, 0], v[:, :, 0], is_causal=True, implementation=self.attention
        )
        y = y.reshape(b, t, self.d)
        return nn.Dense(
            self.d, dtype=self.dtype, kernel_init=_residual_init(self.n_layer), name="proj"
        )(y)


_gpt_init = nn.initializers.normal(0.02)


def _residual_init(n_layer: int) -> nn.initializers.Initializer:
    """GPT-2 shrinks projections into the residual stream by 1/sqrt(2 * n_layer) so the
    stream's variance does not grow with depth."""
    return nn.initializers.normal(0.02 / math.sqrt(2 * n_layer))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    d: int
    heads: int
    n_layer: int
    dtype: Any = jnp.float32
    attention: str | None = None

    @nn.compact
    def __call__(self, x: Array) -> Array:
        h = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, name="ln_1")(x)
        attn = CausalSelfAttention(
            self.d, self.heads, self.n_layer, self.dtype, self.attention, name="attn"
        )
        x = x + attn(h)
        h = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, name="ln_2")(x)
        h = nn.Dense(4 * self.d, dtype=self.dtype, kernel_init=_gpt_init, name="fc")(h)
        # GPT-2 uses the tanh approximation of GELU, which is also flax's default.
        h = nn.gelu(h, approximate=True)
        h = nn.Dense(
            self.d, dtype=self.dtype, kernel_init=_residual_init(self.n_layer), name="fc_out"
        )(h)
        return x + h


class GPT(nn.Module):
    """GPT-2 shaped decoder; the defaults give GPT-2 small (124,439,808 parameters)."""

    n_layer: int = 12
    d: int = 768
    heads: int = 12
    vocab: int = 50257
    ctx: int = 1024
    dtype: Any = jnp.float32
    attention: str | None = None

    @nn.compact
    def __call__(self, tokens: Array) -> Array:
        t = tokens.shape[1]
        if t > self.ctx:
            raise ValueError(f"sequence length {t} exceeds context {self.ctx}")
        wte = nn.Embed(self.vocab, self.d, embedding_init=_gpt_init, dtype=self.dtype, name="wte")
        wpe = self.param("wpe", nn.initializers.normal(0.01), (self.ctx, self.d))
        x = wte(tokens) + wpe[None, :t].astype(self.dtype)
        for i in range(self.n_layer):
            x = Block(self.d, self.heads, self.n_layer, self.dtype, self.attention, name=f"h_{i}")(
                x
            )
        x = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, name="ln_f")(x)
        # Tied output layer: logits = h @ wte.T, no bias; float32 for a stable loss.
        return wte.attend(x.astype(jnp.float32)).astype(jnp.float32)


# ----------------------------------------------------------------------- harness glue


@dataclass(frozen=True)
class Peer:
    """Everything the timing harness needs, as un-jitted pure functions.

    Kept un-jitted so the harness (not the model) owns compilation: ``time_compile``
    must see the lowering cost, and ``time_steady`` decides what to jit and reuse.
    """

    name: str
    init: Callable[[Array], Variables]
    forward: Callable[[Variables, Array], Array]
    train_step: Callable[[Variables, Any, Array, Array], tuple[Variables, Any, Array]]
    opt_init: Callable[[Variables], Any]
    example_inputs: Callable[[Array], tuple[Array, Array]]
    module: nn.Module


def param_count(variables: Variables) -> int:
    """Trainable parameter count; works on real arrays and on ``jax.eval_shape`` output,
    so a model can be sized without allocating its weights."""
    params = variables.get("params", variables)
    return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params))


def _optimizer() -> optax.GradientTransformation:
    return optax.sgd(LEARNING_RATE, momentum=MOMENTUM)


def make_resnet50(batch: int, image: int = 224, dtype: Any = jnp.float32) -> Peer:
    """ResNet-50 peer on (batch, image, image, 3) NHWC inputs and 1000-way labels."""
    model = ResNet50(dtype=dtype)
    tx = _optimizer()
    shape = (batch, image, image, 3)

    def init(key: Array) -> Variables:
        return model.init(key, jnp.zeros(shape, dtype), train=False)

    def forward(variables: Variables, x: Array) -> Array:
        return model.apply(variables, x, train=False)

    def train_step(
        variables: Variables, opt_state: Any, x: Array, y: Array
    ) -> tuple[Variables, Any, Array]:
        def loss_fn(params: Any) -> tuple[Array, Any]:
            logits, updates = model.apply(
                {"params": params, "batch_stats": variables["batch_stats"]},
                x,
                train=True,
                mutable=["batch_stats"],
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, updates["batch_stats"]

        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
        updates, opt_state = tx.update(grads, opt_state, variables["params"])
        params = optax.apply_updates(variables["params"], updates)
        return {"params": params, "batch_stats": batch_stats}, opt_state, loss

    def opt_init(variables: Variables) -> Any:
        return tx.init(variables["params"])

    def example_inputs(key: Array) -> tuple[Array, Array]:
        kx, ky = jax.random.split(key)
        x = jax.random.normal(kx, shape, dtype)
        y = jax.random.randint(ky, (batch,), 0, model.num_classes, dtype=jnp.int32)
        return x, y

    return Peer("resnet50", init, forward, train_step, opt_init, example_inputs, model)


def make_gpt(
    batch: int,
    T: int,
    n_layer: int = 12,
    d: int = 768,
    heads: int = 12,
    vocab: int = 50257,
    ctx: int = 1024,
    dtype: Any = jnp.float32,
    attention: str | None = None,
) -> Peer:
    """GPT peer on (batch, T) int32 tokens with next-token targets; ``attention`` names
    ``jax.nn.dot_product_attention``'s implementation (None: the library's choice)."""
    if d % heads:
        raise ValueError(f"d={d} is not divisible by heads={heads}")
    model = GPT(
        n_layer=n_layer, d=d, heads=heads, vocab=vocab, ctx=ctx, dtype=dtype, attention=attention
    )
    tx = _optimizer()

    def init(key: Array) -> Variables:
        return model.init(key, jnp.zeros((batch, T), jnp.int32))

    def forward(variables: Variables, x: Array) -> Array:
        return model.apply(variables, x)

    def train_step(
        variables: Variables, opt_state: Any, x: Array, y: Array
    ) -> tuple[Variables, Any, Array]:
        def loss_fn(params: Any) -> Array:
            logits = model.apply({"params": params}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(variables["params"])
        updates, opt_state = tx.update(grads, opt_state, variables["params"])
        return {"params": optax.apply_updates(variables["params"], updates)}, opt_state, loss

    def opt_init(variables: Variables) -> Any:
        return tx.init(variables["params"])

    def example_inputs(key: Array) -> tuple[Array, Array]:
        # Draw T + 1 tokens so inputs and targets are the same sequence shifted by one.
        seq = jax.random.randint(key, (batch, T + 1), 0, vocab, dtype=jnp.int32)
        return seq[:, :-1], seq[:, 1:]

    return Peer("gpt", init, forward, train_step, opt_init, example_inputs, model)
