"""Generate docs/layers.md from the layer registry, so that the reference cannot drift.

``python -m lbdl_dsl.tools.layer_docs > docs/layers.md`` (``make docs``) rewrites it, and a test
fails when the committed file differs from what this module prints. Everything on the page comes
from the registry entries, and the example of each entry is compiled on the spot: the output
shape, the trainable parameters and the cost shown under it are the checker's, not prose that
could fall out of date.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.layers import LAYERS, REQUIRED, Layer
from lbdl_dsl.core.layers.base import HP, PSpec, example_model, fmt_shape
from lbdl_dsl.core.symbolic import Expr, fmt_count

CATEGORIES = (
    ("Dense", "Layers on the last axis and on tokens."),
    ("Convolution", "Convolutions on channels-first C×T and C×H×W maps."),
    ("Pooling", "Pooling, upsampling and patches."),
    ("Normalisation", "Normalisation layers (book § 4.6)."),
    ("Activation", "Activations and dropout: shape-preserving, parameter-free."),
    ("Maths", "Elementwise functions: shape-preserving, parameter-free, Booleans refused."),
    ("Attention", "The attention operator and multi-head attention (book § 4.8)."),
    ("Transformer", "The three transformer blocks of Fig. 5.6, each drawn as one tall box."),
    ("Tensor", "Moving and picking values without parameters."),
    ("Combine", "Boxes that read the flowing tensor and tensors named in parentheses."),
    ("Recurrent", "Recurrent layers over a T×D sequence."),
    (
        "Constant",
        "Tensors the compiler computes from sizes (position tables, masks, indices): boxes "
        "that read no input and have neither parameters nor state.",
    ),
)

_KINDS = {
    "size": "size",
    "sizes": "size, or a tuple with one per axis",
    "padding": "size, tuple, or `same`",
    "float": "number",
    "bool": "`true` or `false`",
    "axis": "axis (negative counts from the end)",
    "index": "position (negative counts from the end)",
    "axes": "tuple of axes",
    "shape": "shape",
    "name": "tensor name",
}


def example_spec(layer: Layer) -> str:
    """The smallest model holding the entry's example: extra inputs are declared before X."""
    return example_model(*layer.example)


def _number(value: float) -> str:
    text = repr(value)
    return re.sub(r"e-0*(\d)", r"e-\1", text)


def _default(layer: Layer, hp: HP) -> str:
    if hp.default is REQUIRED:
        filled = any(name == hp.name for name, _ in layer.from_annotation)
        return "required, or from the annotation" if filled else "required"
    if hp.default is None:
        return "—"
    if isinstance(hp.default, bool):
        return f"`{'true' if hp.default else 'false'}`"
    if isinstance(hp.default, float):
        return f"`{_number(hp.default)}`"
    return f"`{hp.default}`"


def _kind(hp: HP) -> str:
    if hp.kind == "choice":
        return "one of " + ", ".join(f"`{c}`" for c in hp.choices)
    return _KINDS.get(hp.kind, hp.kind)


def _inputs(layer: Layer) -> str:
    lo, hi = layer.arity
    if layer.source:
        return "none: a constant, computed from its sizes (neither a parameter nor state)"
    if hi == 1:
        return "the flowing tensor"
    extra = f"{lo - 1}" if lo == hi else f"{lo - 1} to {hi - 1}"
    return f"the flowing tensor and {extra} named in parentheses"


def _params_line(title: str, specs: dict[str, PSpec]) -> str:
    if not specs:
        return f"- {title}: none"
    total = Expr()
    parts = []
    for name, spec in specs.items():
        size = Expr.lift(1)
        for d in spec.shape:
            size = size * d
        total = total + size
        parts.append(f"`{name}` {fmt_shape(spec.shape)} ({_init(spec)})")
    return f"- {title} on the example: {', '.join(parts)}; {fmt_count(total)} in all"


def _init(spec: PSpec) -> str:
    """How the generated ``init`` fills the array (runtime.init_table), in words."""
    return spec.init.describe()


def _entry(layer: Layer) -> Iterable[str]:
    yield f"### `{layer.name}`"
    yield ""
    yield layer.doc
    yield ""
    if layer.aliases:
        yield "- Also written: " + ", ".join(f"`{a}`" for a in layer.aliases)
    yield f"- Inputs: {_inputs(layer)}"
    notes = []
    if layer.composite:
        notes.append("drawn as one tall box, as the book draws composite layers")
    if layer.stochastic:
        notes.append("random in training (it takes a key), the identity or the mean otherwise")
    for op, mapping in layer.ties:
        shared = ", ".join(
            f"`{mine}` ← `{op}`'s `{theirs}`" for mine, (theirs, _) in mapping.items()
        )
        notes.append(
            f"`tie=NAME` shares parameters with an `{op}` or another `{layer.name}` ({shared})"
        )
    for note in notes:
        yield f"- {note[0].upper()}{note[1:]}"
    compiled = compile_spec(example_spec(layer), file=f"<{layer.name} example>")
    assert compiled is not None  # a failing example raises; the registry test says which
    (inst,) = [i for i in compiled.root if i.node.kind == "layer"]
    assert inst.output is not None
    yield _params_line("Trainable parameters", inst.params)
    if inst.state:
        yield _params_line("State", inst.state)
    yield ""
    if layer.hparams:
        yield "| hyper-parameter | value | default | meaning |"
        yield "|---|---|---|---|"
        for hp in layer.hparams:
            yield f"| `{hp.name}` | {_kind(hp)} | {_default(layer, hp)} | {hp.doc} |"
    else:
        yield "No hyper-parameters."
    yield ""
    yield "Example (a complete spec):"
    yield ""
    yield "```lbdl"
    yield example_spec(layer).rstrip("\n")
    yield "```"
    yield ""
    yield (
        f"The box gives {fmt_shape(inst.output.shape)} with {fmt_count(inst.macs)} "
        "multiply-accumulates."
    )
    yield ""


def render() -> str:
    """The whole of docs/layers.md."""
    lines = [
        "<!-- Generated by `python -m lbdl_dsl.tools.layer_docs` from the layer registry "
        "(lbdl_dsl/core/layers/); do not edit: run `make docs`. -->",
        "",
        "# Layers",
        "",
        "Every box the language knows, by category. A box line is `name key=value ... SHAPE`: "
        "hyper-parameters left out take the default below, and for `fc`, `conv-2d`, `embed` and "
        "a few others the output size may be left to the annotation at the right of the box, as "
        "the book writes it. Each example is compiled when this page is generated; its "
        "parameters and cost are the checker's. See docs/language.md for the language itself.",
        "",
    ]
    by_category: dict[str, list[Layer]] = {}
    for layer in LAYERS.values():
        by_category.setdefault(layer.category, []).append(layer)
    known = [c for c, _ in CATEGORIES]
    extra = sorted(c for c in by_category if c not in known)
    lines.append("| category | layers |")
    lines.append("|---|---|")
    for category in known + extra:
        names = ", ".join(f"`{layer.name}`" for layer in by_category.get(category, []))
        if names:
            lines.append(f"| {category} | {names} |")
    lines.append("")
    blurbs = dict(CATEGORIES)
    for category in known + extra:
        if category not in by_category:
            continue
        lines += [f"## {category}", "", blurbs.get(category, ""), ""]
        for layer in by_category[category]:
            lines += list(_entry(layer))
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the page (``make docs`` redirects it into docs/layers.md)."""
    del argv
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
