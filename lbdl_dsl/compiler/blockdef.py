"""One block definition on its own: built without a model and checked with symbolic inputs.

The book draws its blocks apart from any network (Fig. 5.3's ``resblock``, Fig. 5.4's
``dresblock``), with shapes in the block's own symbols: C×H×W in, C/4×H×W after the first 1×1
convolution. `compile_block` builds every block of a file (and of the files it imports), then
checks one of them as a call would, with its input pattern as the input (C, H and W stay
symbols unless ``--set`` gives them values) and its parameters at their defaults, or at
``--set`` values, or, lacking both, as symbols.

A parameter left as a symbol cannot always be checked: a convolution's stride must be a known
number. The boxes from the first such one on are then unchecked (their instances stop there),
and `BlockCompiled.unchecked` names the parameters that stopped it, so that the figure draws
those boxes from their declarations (their annotations, in the block's symbols) rather than as
errors. Any other failure is the block's error, reported as a model's would be.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbdl_dsl.compiler.build import build_blocks
from lbdl_dsl.compiler.graph import Block, Model, ParamRef, Program, verify
from lbdl_dsl.compiler.imports import load, read_spec
from lbdl_dsl.compiler.infer import Checker, _subs
from lbdl_dsl.compiler.instance import Checked, Inst, Tensor, sum_totals
from lbdl_dsl.compiler.stages import Built, Parsed
from lbdl_dsl.compiler.values import setting
from lbdl_dsl.core.errors import LbdlError, Span, did_you_mean
from lbdl_dsl.core.layers import LAYERS
from lbdl_dsl.core.symbolic import Expr, sym


@dataclass(frozen=True)
class BlockCompiled(Checked):
    """A `Checked` whose model is one block's body (``program.model``), checked on its own.

    ``unchecked`` lists the block parameters left as symbols that some box needed as a number;
    those boxes and what follows them are drawn from their declarations."""

    block: Block | None = None
    unchecked: tuple[str, ...] = ()


def _env(block: Block, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The block's symbols: ``--set`` values, then defaults, then the parameter itself."""
    env: dict[str, Any] = {}
    free: list[str] = []
    pattern = {s for sig in block.inputs for d in sig.dims for s in d.free_symbols}
    for key, value in overrides.items():
        if key in pattern:
            env[key] = setting(key, value, None, f"--set {key}={value}", size=True)
    for p in block.params:
        if p.name in overrides:
            value = overrides[p.name]
            env[p.name] = setting(p.name, value, p.default, f"--set {p.name}={value}")
        elif p.default is not None:
            env[p.name] = _subs(p.default, env) if isinstance(p.default, Expr) else p.default
        else:
            env[p.name] = sym(p.name)
            free.append(p.name)
    known = {p.name for p in block.params} | pattern
    for key in overrides:
        if key not in known:
            raise LbdlError(
                f"block `{block.name}` has no parameter or input size `{key}` to set",
                Span.point(block.span.file, block.span.line, block.span.column),
                hint=did_you_mean(key, sorted(known))
                or f"its parameters and sizes are {', '.join(sorted(known)) or 'none'}",
            )
    return env, free


def check_block(program: Program, block: Block, env: dict[str, Any]) -> Checked:
    """Check ``block``'s body with its input patterns as inputs, in the symbols of ``env``."""
    exprs = {k: v for k, v in env.items() if isinstance(v, Expr)}
    body = block.body
    ins: dict[str, Tensor] = {}
    tensors: list[Tensor | None] = []
    for nid, sig in zip(body.inputs, block.inputs, strict=True):
        dims = tuple(d.subs(exprs) for d in sig.dims)
        t = Tensor(dims, made_by=f"the input of block `{block.name}`", span=sig.span)
        tensors.append(t)
        ins[body.node(nid).name or ""] = t
    checker = Checker(program, env)
    checker.stack.append((f"in block `{block.name}`, used here", block.span))
    root, result, _ = checker.graph(body, tensors, env)
    totals = sum_totals(root)
    free = sorted({s for t in ins.values() for d in t.shape for s in d.free_symbols})
    return Checked(
        program,
        env,
        root,
        ins,
        {"": result},
        totals,
        checker.diagnostics,
        sorted(set(checker.assumptions)),
        free,
    )


def compile_block(
    path: str | Path, name: str, overrides: dict[str, Any] | None = None
) -> BlockCompiled:
    """The block ``name`` of the file at ``path``, built and checked on its own."""
    file = str(path)
    loaded = load(read_spec(file), file)
    blocks = build_blocks(loaded.modules)
    if name not in blocks:
        known = sorted(blocks)
        raise LbdlError(
            f"no block named `{name}` in {file}",
            hint=did_you_mean(name, known)
            or (f"its blocks are {', '.join(known)}" if known else "it defines no blocks"),
        )
    block = blocks[name]
    body = dataclasses.replace(block.body, outputs=[("", block.body.result or "")])
    model = Model(name, block.params, body, block.span)
    program = Program(model, blocks, dict(loaded.sources), file)
    verify(program, set(LAYERS))
    env, free = _env(block, dict(overrides or {}))
    checked = check_block(program, block, env)
    stopped = _stopped_by(checked, free) if checked.diagnostics and free else ()
    built = Built(Parsed(file, loaded), program)
    fields = {f.name: getattr(checked, f.name) for f in dataclasses.fields(checked)}
    out = BlockCompiled(**{**fields, "built": built}, block=block, unchecked=stopped)
    if checked.diagnostics and not stopped:
        from lbdl_dsl.compiler.driver import CheckFailed

        raise CheckFailed(out)
    return out


def _stopped_by(checked: Checked, free: list[str]) -> tuple[str, ...]:
    """The parameters without a value that the failing boxes read: a failure there comes from
    a size the block leaves open (a stride ``S`` that must be a known number), not from an
    error in the block. Empty if any failing box reads none of them."""
    found: set[str] = set()

    def uses(value: Any) -> set[str]:
        if isinstance(value, ParamRef):
            return {value.name} & set(free)
        if isinstance(value, Expr):
            return set(value.free_symbols) & set(free)
        if isinstance(value, tuple):
            return set().union(*(uses(v) for v in value)) if value else set()
        return set()

    def leaves(insts: list[Inst]) -> list[Inst]:
        out = []
        for inst in insts:
            out.append(inst)
            out += leaves([c for _, c, _ in inst.children()])
        return out

    failed = [i for i in leaves(checked.root) if i.output is None and i.kind == "layer"]
    for diag in checked.diagnostics:
        span = diag.span
        at = [
            i
            for i in failed
            if span is not None
            and i.node.span.file == span.file
            and i.node.span.line <= span.line <= i.node.span.end_line
        ]
        params = set().union(*(uses(v) for i in at for _, v in getattr(i.node, "hparams", ())))
        if not params:
            return ()
        found.update(params)
    return tuple(p for p in free if p in found)
