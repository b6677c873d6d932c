"""What training needs to know about a model: its inputs and outputs as plain numbers.

The compiled `Model` knows shapes as the checker's symbolic sizes; training needs numbers, token
vocabularies and whether an output is already a probability. `signature` reads them once, through
the model's public attributes, and turns a size left symbolic (a GPT's ``T``) into an error that
says which ``--set`` value is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError


@dataclass(frozen=True)
class Port:
    """One input or output of the model, per sample."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32", "int32" or "bool"
    vocab: int | None = None  # token inputs: the range of their values
    probabilities: bool = False  # outputs made by `softargmax`: probabilities, not logits

    @property
    def shape_text(self) -> str:
        return "×".join(str(d) for d in self.shape) or "a scalar"


@dataclass(frozen=True)
class Signature:
    inputs: dict[str, Port]
    outputs: dict[str, Port]

    def token_inputs(self) -> list[Port]:
        return [p for p in self.inputs.values() if p.dtype == "int32"]


def _size(value: Any, where: str) -> int:
    number = value.as_int() if hasattr(value, "as_int") else value
    if number is None:
        symbols = sorted(getattr(value, "free_symbols", set())) or [str(value)]
        raise LbdlError(
            f"{where} has the symbolic size `{value}`; training needs it as a number",
            None,
            hint="give it a value with --set, e.g. "
            + " ".join(f"--set {s}=64" if i == 0 else f"{s}=64" for i, s in enumerate(symbols)),
        )
    return int(number)


def signature(checked: Checked) -> Signature:
    """The ports of a checked spec (a `Model`'s ``checked``), with every size a number (or an
    error naming the missing ``--set``)."""
    inputs = {}
    for name, t in checked.inputs.items():
        shape = tuple(_size(d, f"the spec's input {name}") for d in t.shape)
        dtype = {"int": "int32", "bool": "bool"}.get(t.dtype, "float32")
        vocab = _size(t.vocab, f"the vocabulary of input {name}") if t.vocab is not None else None
        inputs[name] = Port(name, shape, dtype, vocab)
    outputs = {}
    for name, out in checked.outputs.items():
        assert out is not None, "a model is built from a spec whose check passed"
        shape = tuple(_size(d, f"the spec's output {name}") for d in out.shape)
        made_by = out.made_by or ""
        outputs[name] = Port(
            name, shape, "float32", probabilities=made_by.startswith("`softargmax`")
        )
    return Signature(inputs, outputs)
