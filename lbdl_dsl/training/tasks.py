"""What the loss is: chosen from the spec's outputs, or named with ``--task``.

- ``next-token``: a token model, whose output is T×V over an input of T tokens in ``int<V>``;
  cross-entropy of each position against the next token (the data shifts the text by one).
- ``classify``: an output whose last axis holds class scores (10 for digits); cross-entropy
  against integer labels of the output's other axes, and accuracy.
- ``mse``: mean squared error against targets of the output's shape.
- ``reconstruct``: mean squared error against the input of the output's shape (autoencoders).

The choice (`choose`) reads only the model's `Signature`, so it needs no JAX; the losses
(`per_sample`) are pure functions of arrays, used inside the jitted train and eval steps.
Outputs made by ``softargmax`` are probabilities, so their cross-entropy takes the log of them
instead of a log-softmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.errors import LbdlError, did_you_mean
from lbdl_dsl.training.config import TASKS
from lbdl_dsl.training.signature import Port, Signature


@dataclass(frozen=True)
class Task:
    """The loss of a run: its kind, the output it reads, and the target it compares with."""

    kind: str  # "classify", "next-token", "mse", "reconstruct"
    output: Port
    target_shape: tuple[int, ...]  # per sample; () for one label per sample
    target_dtype: str | None  # "int32", "float32", or None (reconstruct: no target array)
    source: str | None = None  # next-token: the token input; reconstruct: the input compared

    @property
    def classes(self) -> int | None:
        return self.output.shape[-1] if self.kind in ("classify", "next-token") else None

    @property
    def metrics(self) -> tuple[str, ...]:
        """Metrics the eval step reports beside the loss."""
        return ("accuracy",) if self.classes else ()

    def describe(self) -> str:
        what = {
            "classify": f"cross-entropy over {self.classes} classes",
            "next-token": f"next-token cross-entropy over {self.classes} tokens",
            "mse": "mean squared error",
            "reconstruct": f"mean squared error against the input {self.source}",
        }[self.kind]
        return f"{self.kind} ({what}) on output {self.output.name} ({self.output.shape_text})"


def _token_source(out: Port, sig: Signature) -> Port | None:
    """The token input a T×V output predicts the next values of, if there is one."""
    if len(out.shape) != 2:
        return None
    for port in sig.token_inputs():
        if port.shape == out.shape[:1] and port.vocab == out.shape[1]:
            return port
    return None


def _same_shape_input(out: Port, sig: Signature) -> Port | None:
    return next(
        (p for p in sig.inputs.values() if p.shape == out.shape and p.dtype == "float32"), None
    )


def _pick_output(sig: Signature, target: str | None) -> Port:
    names = list(sig.outputs)
    if target is not None:
        if target not in sig.outputs:
            raise LbdlError(
                f"--target: the spec has no output `{target}`",
                None,
                hint="its outputs: " + ", ".join(names),
            )
        return sig.outputs[target]
    if len(names) == 1:
        return sig.outputs[names[0]]
    tokens = [p for p in sig.outputs.values() if _token_source(p, sig) is not None]
    if len(tokens) == 1:
        return tokens[0]
    raise LbdlError(
        f"the spec has {len(names)} outputs ({', '.join(names)}); which one does the loss read?",
        None,
        hint=f"name it: --target {names[-1]}",
    )


def _auto_kind(out: Port, sig: Signature) -> str:
    if _token_source(out, sig) is not None:
        return "next-token"
    if len(out.shape) == 1 and out.shape[0] >= 2:
        return "classify"
    return "mse"


def choose(sig: Signature, task: str = "auto", target: str | None = None) -> Task:
    """The task for a model: ``task`` as given, or chosen from the output's shape."""
    if task not in TASKS:  # model.evaluate(task="clasify") would otherwise fall to mse
        hint = did_you_mean(str(task), TASKS)
        raise LbdlError(
            f"--task: unknown task `{task}`",
            None,
            hint=(hint + " " if hint else "") + f"the tasks: {', '.join(TASKS)}",
        )
    out = _pick_output(sig, target)
    kind = _auto_kind(out, sig) if task == "auto" else task
    if kind == "next-token":
        source = _token_source(out, sig)
        if source is None:
            raise LbdlError(
                f"--task next-token needs a T×V output over an input of T tokens int<V>; "
                f"output {out.name} is {out.shape_text}",
                None,
                hint="a token model: `input X: T int<V>` ... `fc T×V`; or choose another --task",
            )
        return Task(kind, out, out.shape[:1], "int32", source.name)
    if kind == "classify":
        if not out.shape or out.shape[-1] < 2:
            raise LbdlError(
                f"--task classify needs an output whose last axis holds class scores; "
                f"output {out.name} is {out.shape_text}",
                None,
                hint="give the spec a last `fc CLASSES`, or use --task mse",
            )
        return Task(kind, out, out.shape[:-1], "int32")
    if kind == "reconstruct":
        source_port = _same_shape_input(out, sig)
        if source_port is None:
            raise LbdlError(
                f"--task reconstruct compares output {out.name} ({out.shape_text}) with an input "
                "of the same shape, and the spec has none",
                None,
                hint="inputs: "
                + ", ".join(f"{p.name} {p.shape_text}" for p in sig.inputs.values()),
            )
        return Task(kind, out, out.shape, None, source_port.name)
    return Task("mse", out, out.shape, "float32")


# -- the losses, inside jit ------------------------------------------------------------------


def per_sample(task: Task, outputs: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
    """Per-sample loss (and accuracy) of a batch: arrays of shape (B,), in float32."""
    import jax
    import jax.numpy as jnp

    pred = outputs[task.output.name].astype(jnp.float32)
    axes = tuple(range(1, pred.ndim))
    if task.kind in ("classify", "next-token"):
        labels = batch["target"]
        if task.output.probabilities:
            logp = jnp.log(jnp.clip(pred, 1e-30, 1.0))
        else:
            logp = jax.nn.log_softmax(pred, axis=-1)
        picked = jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
        label_axes = tuple(range(1, labels.ndim))
        correct = (jnp.argmax(pred, axis=-1) == labels).astype(jnp.float32)
        return {
            "loss": -jnp.mean(picked, axis=label_axes),
            "accuracy": jnp.mean(correct, axis=label_axes),
        }
    target = batch["inputs"][task.source] if task.kind == "reconstruct" else batch["target"]
    return {"loss": jnp.mean(jnp.square(pred - target.astype(jnp.float32)), axis=axes)}
