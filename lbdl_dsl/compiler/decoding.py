"""Whether a checked model decodes token by token, and the cache it keeps: pure, no JAX.

A model generates text when it reads one sequence of tokens (``X: T int<V>``), writes one
distribution per position (``T×V``), and every box on the way either works on each position
alone, or is told where its tokens are (positional encodings), or keeps a cache from step to
step (a causal attention's keys and values, a recurrent layer's carry). Each box's registry
entry says which (`Layer.step`, `Step`); nothing here tests a layer's name. The cache's arrays
are named like state arrays (`paths`), stacked over ×N groups, so a ×N group of attentions keeps
one stacked cache and the JAX backend scans over it as over the parameters.

`plan` checks a model and returns what decoding needs; `cache_arrays` lists the cache for a
context of S positions, per sample; `cache_bytes` counts it (`--check` prints it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.graph import Graph, InputNode, Program
from lbdl_dsl.compiler.instance import Checked, ExpertsInst, Inst, LayerInst, ScanInst
from lbdl_dsl.core.errors import LbdlError, Span
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.layers.base import ZEROS, Ctx, PSpec, Step
from lbdl_dsl.core.symbolic import Expr, sym

_HINT = (
    "generate needs a causal language model: one input `X: T int<V>`, an output T×V, and "
    "attention with causal=true (specs/gpt.lbdl, specs/llama2-7b.lbdl)"
)


@dataclass(frozen=True)
class Plan:
    """What decoding a model needs: its token input and vocabulary, the output it samples
    from, the symbol of the sequence's length (None when given a value), and the most
    positions it takes (None: no bound in the spec)."""

    input: str
    vocab: int
    output: str
    seq: str | None
    limit: int | None


def sequence_symbol(program: Program) -> str | None:
    """The symbol a model's token input is written with (``T`` of ``X: T int<V>``), if one:
    decoding keeps it free, as the length changes from call to call."""
    graph = program.model.body
    for nid in graph.inputs:
        node = graph.node(nid)
        if isinstance(node, InputNode) and node.dtype == "int" and node.annotation is not None:
            free = sorted(node.annotation.dims[0].free_symbols) if node.annotation.dims else []
            if len(free) == 1 and node.annotation.dims[0] == sym(free[0]):
                return free[0]
    return None


def step_of(inst: LayerInst) -> Step:
    """A primitive box's `Step`, from its entry, resolved record and input shapes."""
    layer = lookup(inst.node.op)
    assert layer is not None, inst.node.op  # checked models hold known boxes only
    ctx = Ctx(
        inst.node.op,
        [t.shape for t in inst.inputs],
        inst.hp,
        [t.dtype for t in inst.inputs],
        [t.vocab for t in inst.inputs],
        inst.output.shape if inst.output is not None else None,
        inst.attrs,
    )
    return layer.step(ctx)


def primitives(insts: list[Inst], at: Span | None = None) -> Iterator[tuple[LayerInst, Span]]:
    """Every primitive box a sequence flows through, depth first, with the span to show for it
    (a composite's own line for the boxes inside it, ``at``); a mixture of experts' inside
    works on one token's vector and is not entered (its routing is per token), nor is a scan's
    step, which sees one position and carries its state through the scan's own cache."""
    for inst in insts:
        if isinstance(inst, (ExpertsInst, ScanInst)):
            continue
        if isinstance(inst, LayerInst):
            span = at or inst.node.span
            if inst.inside is None:
                yield inst, span
            else:
                yield from primitives(inst.body, span)
            continue
        for part in inst.parts():
            yield from primitives(part, at)


def plan(checked: Checked) -> Plan:
    """The model's decoding plan, or an `LbdlError` saying why it cannot generate."""
    tokens = [(n, t) for n, t in checked.inputs.items() if t.dtype == "int" and len(t.shape) == 1]
    if len(checked.inputs) != 1 or not tokens or tokens[0][1].vocab is None:
        shown = ", ".join(f"{n}: {t}" for n, t in checked.inputs.items())
        raise LbdlError(f"model has inputs {shown}, not one sequence of tokens", None, _HINT)
    name, tensor = tokens[0]
    seq = tensor.shape[0]
    outs = [
        n
        for n, t in checked.outputs.items()
        if t is not None and len(t.shape) == 2 and t.shape[0] == seq
    ]
    if not outs:
        raise LbdlError("model has no output of one vector per position (T×V)", None, _HINT)
    given = seq.as_int()
    limits: list[int] = [int(given)] if given is not None else []
    for inst, span in primitives(checked.root):
        step = step_of(inst)
        if not step.kind:
            raise LbdlError(f"cannot decode token by token: {step.why}", span, _HINT)
        bound = step.limit.as_int() if step.limit is not None else None
        if bound is not None:
            limits.append(int(bound))
    vocab = tensor.vocab.as_int() if tensor.vocab is not None else None
    if vocab is None:
        raise LbdlError(f"the vocabulary {tensor.vocab} of `{name}` has no value", None, _HINT)
    free = sorted(seq.free_symbols)
    return Plan(
        name, int(vocab), outs[0], free[0] if len(free) == 1 else None, min(limits, default=None)
    )


def last_only_from(root: list[Inst], graph: Graph) -> str | None:
    """The first box of the model's tail that works on each position alone (`Step` kind
    ``token``: GPT-2's final layernorm and output layer), when the model has one output and
    nothing else reads the tail's values; None if there is no such tail.

    Decoding samples from the last position only, so a decoding module gives this box the
    last position of its input alone: a prompt's prefill then computes one row of logits,
    not one per position (128 × 50,257 of them for GPT-2 small and a 128-token prompt, a
    third of the prefill's work), as transformers' ``generate`` does (``logits_to_keep=1``).
    A mixture of experts is not cut (its capacity depends on how many tokens it routes)."""
    if len(graph.outputs) != 1:
        return None
    by_id = {inst.id: inst for inst in root}
    nid, first = graph.outputs[0][1], None
    while True:
        inst = by_id.get(nid)
        if not isinstance(inst, LayerInst) or inst.inside is not None:
            return first
        readers = graph.successors(nid)
        if readers != ([] if first is None else [first]) or step_of(inst).kind != "token":
            return first
        preds = graph.preds(nid)
        if len(preds) != 1:
            return first
        first, nid = nid, preds[0]


def caches(inst: Inst, s: Expr) -> dict[str, PSpec]:
    """One box's cache arrays, per sample, for a context of ``s`` positions ({} if none): a
    scan group keeps its carry, named as it is."""
    if isinstance(inst, ScanInst) and inst.output is not None:
        shape = inst.output.shape[1:]
        return {inst.node.carry: PSpec(shape, ZEROS, ("hidden",) * len(shape))}
    if not isinstance(inst, LayerInst) or inst.inside is not None:
        return {}
    step = step_of(inst)
    return step.cache(s) if step.kind == "cache" and step.cache is not None else {}


def cache_arrays(
    root: list[Inst], s: Expr | int, storage: paths.Storage | None = None
) -> list[paths.Array]:
    """Every cache array, per sample, named and stacked as state arrays are (with
    ``storage``, as that backend stores them)."""
    size = Expr.lift(s)
    return list(paths.arrays_of(root, lambda inst: caches(inst, size), storage))


def keeps_cache(inst: Inst, memo: dict[int, bool]) -> bool:
    """Whether a box, or one inside it, keeps a cache (the code then threads it through)."""
    key = id(inst)
    if key not in memo:
        inner = [i for part in inst.parts() for i in part]
        memo[key] = bool(caches(inst, Expr.lift(1))) or any(keeps_cache(i, memo) for i in inner)
    return memo[key]


def cache_bytes(root: list[Inst], s: Expr | int, itemsize: int = 4) -> Expr:
    """The cache's bytes per sample for a context of ``s`` positions."""
    total = Expr.lift(0)
    for array in cache_arrays(root, s):
        n = Expr.lift(itemsize)
        for d in array.shape:
            n = n * d
        total = total + n
    return total
