"""Lowering checked instances to lines of JAX code, one box per line.

A `Lowerer` writes the body of a function: it walks one graph in order, asks each box's
lowering (`lowering.LOWERINGS`, one per registry entry) for its expression through the `Emit`
protocol, and keeps track of where each value lives (its identifier and its layout: the spec's
channels-first, or channels-last where convolutions and pools want it). Block calls become calls
of one function per block definition and distinct body, residual groups are written inline, and
×N groups become ``jax.lax.scan`` over stacked parameters (``scan_group``), or for a short group
that keeps each copy's arrays apart (`storage`), one call per copy (``each_copy``), and a mixture
of experts one function for its body, ``jax.vmap``-ed over the stacked experts and their buffers.

Functions take only what their body reads: parameters and state only where there are some,
``train`` and ``key`` only where a box needs them, and a size that is only known when the model
runs (a sequence's T) as a keyword argument where it is used. The lines are written first and
the signature after, from what the lines used.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from lbdl_dsl.backends.jax import layout, storage
from lbdl_dsl.backends.jax.lowering import DECODE_LOWERINGS, LOWERINGS
from lbdl_dsl.backends.jax.names import LOCAL_RESERVED, Code, Namespace, rate_code, size_code
from lbdl_dsl.backends.jax.runtime_source import defaults
from lbdl_dsl.compiler import composite, decoding, paths
from lbdl_dsl.compiler.graph import (
    ExpertsNode,
    Graph,
    Program,
    RepeatNode,
)
from lbdl_dsl.compiler.instance import (
    CallInst,
    ExpertsInst,
    Inst,
    LayerInst,
    RepeatInst,
    ResidualInst,
    ScanInst,
    Tensor,
)
from lbdl_dsl.core.errors import LbdlError, Span
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.layers.base import Attrs, fmt_shape
from lbdl_dsl.core.symbolic import Expr, PerCopy

_INDENT = "    "
DECODE_KEYS = ("pos", "context")
"""The keywords a decoding module threads to the boxes that read them (`_Emit.decoding`)."""


@dataclass(frozen=True)
class Var:
    """A value in generated code: its identifier, layout and per-sample rank in the spec."""

    name: str
    layout: str  # "cf" (the spec's order) or "cl" (channels last)
    rank: int


@dataclass(frozen=True)
class Dicts:
    """Where one scope's parameters, state and new state are, in the code (None: it has none)."""

    p: str | None
    s: str | None
    ns: str | None

    def sub(self, key: str, params: bool, state: bool) -> Dicts:
        return Dicts(
            f'{self.p}["{key}"]' if params and self.p else None,
            f'{self.s}["{key}"]' if state and self.s else None,
            self.ns,
        )


@dataclass
class Fn:
    """A function body being written, with its own namespace of locals.

    ``owner`` is the function whose signature receives what this body uses: itself, or for the
    step function of a ×N group (a nested ``def``), the function around it.
    """

    names: Namespace
    symbols: dict[str, str] = field(default_factory=dict)  # spec symbol → local identifier
    sources: dict[str, str] = field(default_factory=dict)  # symbol → code that computes it
    params: bool = False  # unknown symbols become keyword arguments (block functions)
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    keys: int = 0
    uses: set[str] = field(default_factory=set)  # "train", "key", and the symbols read
    shapes: bool = True  # comment output shapes (not in block functions, shared by calls)
    owner: Fn | None = None

    def line(self, text: str) -> None:
        self.lines.append(_INDENT * self.depth + text)

    def comment(self, text: str) -> None:
        room = layout.WIDTH - len(_INDENT) * self.depth - 2
        self.line("# " + printable(text, room))

    def next_key(self) -> str:
        self.keys += 1
        self.uses.add("key")
        return f"fold(key, {self.keys})"

    def symbol(self, name: str) -> str:
        """The local identifier of a size symbol, marking it used; our bug if it has none."""
        owner = self.owner or self
        if name not in owner.symbols:
            if name in owner.sources or owner.params:
                owner.symbols[name] = owner.names(name)
            else:
                raise LbdlError(
                    f"the size `{name}` is not known when the model runs",
                    None,
                    hint=f"give it a value with --set {name}=...",
                )
        owner.uses.add(f"${name}")
        return owner.symbols[name]

    def used_symbols(self) -> list[str]:
        return sorted(u[1:] for u in self.uses if u.startswith("$"))


def printable(text: str, width: int = 90) -> str:
    """Spec text made safe for a comment or docstring: one line, printable, bounded."""
    clean = "".join(c if c.isprintable() and c not in '"\\' else " " for c in text)
    return clean.strip()[:width].rstrip()


def has_state(inst: Inst) -> bool:
    return inst.totals.get("state", Expr()) != Expr()


def has_params(inst: Inst) -> bool:
    return inst.totals.get("params", Expr()) != Expr()


def _any(insts: Iterable[Inst], test: Any) -> bool:
    return any(test(i) for i in insts)


class _AttrView:
    """An `Attrs` record as a lowering sees it: sizes as numbers, or code where they are only
    known at run time (reading one marks its symbols used by the function)."""

    def __init__(self, attrs: Attrs | None, fn: Fn) -> None:
        self._attrs, self._fn = attrs, fn

    def __getattr__(self, name: str) -> Any:
        return _code_value(getattr(self._attrs, name), self._fn)


def _code_value(value: Any, fn: Fn) -> Any:
    if isinstance(value, PerCopy):  # a rate of the copy's index: computed in its step
        e = value.expr
        return Code(rate_code(e, {s: fn.symbol(s) for s in e.free_symbols}))
    if isinstance(value, Expr):
        v = value.as_int()
        if v is not None:
            return v
        if value.is_const:
            return float(value.const_value)
        return Code(size_code(value, {s: fn.symbol(s) for s in value.free_symbols}))
    if isinstance(value, tuple):
        return tuple(_code_value(v, fn) for v in value)
    return value


class _Emit:
    """The `Emit` protocol (emit.py) for one layer instance."""

    def __init__(self, low: Lowerer, fn: Fn, inst: LayerInst, xs: list[str], d: Dicts, target: str):
        self.low, self.fn, self.inst, self.d = low, fn, inst, d
        self.x, self.target = xs, target
        self.a = _AttrView(inst.attrs, fn)
        self.new_state: dict[str, str] = {}

    def param(self, name: str) -> str:
        if name in self.inst.tied:
            other, theirs, transposed = self.inst.tied[name]
            return f'{self.d.p}["{other}"]["{theirs}"]' + (".T" if transposed else "")
        return f'{self.d.p}["{self.inst.id}"]["{name}"]'

    def has_param(self, name: str) -> bool:
        return name in self.inst.params or name in self.inst.tied

    def params(self) -> str | None:
        """The box's own dictionary of parameters, whole (for a runtime function that may be
        handed more than the box declares: `Decoder.split`'s fused projections); None where
        one of them is another box's (tied), so not in that dictionary."""
        return None if self.inst.tied else f'{self.d.p}["{self.inst.id}"]'

    def state(self, name: str) -> str:
        return f'{self.d.s}["{self.inst.id}"]["{name}"]'

    def set_state(self, name: str, expr: str) -> None:
        self.new_state[name] = expr

    def call(self, fn: str, *args: Any, **kwargs: Any) -> str:
        """``fn(args, k=v)``, leaving out keywords equal to the function's own defaults."""
        self.low.runtime.add(fn)
        given = defaults(fn)
        kwargs = {k: v for k, v in kwargs.items() if k not in given or given[k] != v}
        parts = [a if isinstance(a, str) else repr(a) for a in args]
        parts += [f"{k}={v if isinstance(v, str) else repr(v)}" for k, v in kwargs.items()]
        return f"{fn}({', '.join(parts)})"

    def bind(self, expr: str, hint: str = "t") -> str:
        name = self.fn.names.fresh(hint)
        self.fn.line(f"{name} = {expr}")
        return name

    def unpack(self, expr: str, *hints: str) -> list[str]:
        names = [hints[0]] + [self.fn.names.fresh(h) for h in hints[1:]]
        self.fn.line(f"{', '.join(names)} = {expr}")
        return names

    def key(self) -> str:
        self.low.runtime.add("fold")
        return self.fn.next_key()

    @property
    def train(self) -> str:
        (self.fn.owner or self.fn).uses.add("train")
        return "train"

    def decoding(self, name: str) -> str:
        """``pos`` (the position of the step's first token) or ``context`` (the cache's length,
        static), keywords of a decoding module's ``apply``, passed down to where used."""
        assert name in DECODE_KEYS, name
        (self.fn.owner or self.fn).uses.add(name)
        return name


@dataclass
class BlockFn:
    name: str
    out_layout: str
    params: bool
    state: bool
    symbols: list[str]  # keyword arguments: run-time sizes the body reads
    train: bool
    key: bool
    decode: tuple[str, ...] = ()  # the `DECODE_KEYS` its body reads


class Lowerer:
    """Writes function bodies for one model; collects the runtime and block functions used."""

    def __init__(
        self,
        program: Program,
        sources: dict[str, str],
        globals_: Namespace,
        unroll: bool,
        module_names: frozenset[str] = frozenset(),
        decode: bool = False,
    ) -> None:
        self.decode = decode  # a decoding module: caches threaded as state, `pos` passed down
        self._keeps: dict[int, bool] = {}
        self.program = program
        self.module_names = module_names
        self.sources = sources
        self.globals = globals_
        self.unroll = unroll
        self.runtime: set[str] = set()
        self.functions: list[str] = []
        self.blocks: dict[tuple[object, ...], BlockFn] = {}
        self.stacked = 0  # stacked groups and mixtures of experts around what is lowered now

    def stateful(self, inst: Inst) -> bool:
        """Whether a box reads and writes state: its own, or in a decoding module a cache."""
        return has_state(inst) or (self.decode and decoding.keeps_cache(inst, self._keeps))

    # -- values ---------------------------------------------------------------------------------
    def convert(self, fn: Fn, var: Var, layout: str, reuse: bool) -> Var:
        if var.layout == layout or var.rank < 2:
            return var
        helper = "to_channels_last" if layout == "cl" else "to_channels_first"
        self.runtime.add(helper)
        name = var.name if reuse else fn.names.fresh(f"{var.name}_{layout}")
        fn.line(f"{name} = {helper}({var.name})")
        return Var(name, layout, var.rank)

    def where(self, span: Span) -> str:
        """``resnet.lbdl:13: conv-2d k=7 s=2``: the file's name (never its path) and line."""
        lines = (self.sources.get(span.file) or composite.SOURCES.get(span.file, "")).splitlines()
        text = lines[span.line - 1].strip() if 0 < span.line <= len(lines) else ""
        return f"{PurePath(composite.shown_name(span.file)).name}:{span.line}: {text}"

    # -- one graph ------------------------------------------------------------------------------
    def scope(
        self, fn: Fn, insts: list[Inst], graph: Graph, env: dict[str, Var], d: Dicts, chain: str
    ) -> Var:
        """Emit one graph's boxes and return its result; ``env`` gives its input nodes' values,
        ``chain`` the name its boxes reuse while the value flows straight down."""
        assert graph.result is not None, "a built graph has its result"
        return self.values(fn, insts, graph, env, d, chain)[graph.result]

    def values(
        self,
        fn: Fn,
        insts: list[Inst],
        graph: Graph,
        env: dict[str, Var],
        d: Dicts,
        chain: str,
        keep: frozenset[str] = frozenset(),
        last_from: str | None = None,
    ) -> dict[str, Var]:
        """Like `scope`, returning every node's value; ``keep`` nodes get names of their own;
        the box ``last_from`` gets the last position of its input alone (`last_position`)."""
        by_id = {inst.id: inst for inst in insts}
        order = [nid for nid in graph.order() if nid in by_id]
        labels = {nid: name for name, nid in sorted(graph.names.items())}
        values = dict(env)
        # an input of the scope that a later box still reads must not be overwritten
        position = {nid: pos for pos, nid in enumerate(order)}
        read_until = {
            var.name: max((position.get(v, -1) for v, _ in graph.out_edges(nid)), default=-1)
            for nid, var in env.items()
        }
        for pos, nid in enumerate(order):
            inst = by_id[nid]
            uses = graph.out_edges(nid)
            nxt = order[pos + 1] if pos + 1 < len(order) else None
            single = len(uses) == 1 and uses[0] == (nxt, 0)
            last = nid == graph.result and not uses
            label = labels.get(nid)
            named = label is not None or nid in keep
            free = read_until.get(chain, -1) <= pos
            reuse = (single or last) and not named and free
            target = chain if reuse else fn.names.fresh(label or inst.id)
            ins = [values[u] for u in graph.preds(nid)]
            if nid == last_from:
                ins = [self.last_position(fn, ins[0])]
            values[nid] = self.box(fn, inst, ins, d, target)
        return values

    def last_position(self, fn: Fn, v: Var) -> Var:
        """``v`` (B, T, …) cut to its last position (B, 1, …), in a new variable
        (`decoding.last_only_from`); a value in another layout is left whole."""
        if v.layout != "cf" or v.rank < 1:
            return v
        cut = fn.names.fresh("last")
        fn.comment("decoding samples from the last position only")
        fn.line(f"{cut} = {v.name}[:, -1:]")
        return Var(cut, v.layout, v.rank)

    def box(self, fn: Fn, inst: Inst, ins: list[Var], d: Dicts, target: str) -> Var:
        written = inst.node.annotation is not None
        shape = f"  ->  {fmt_shape(_output(inst).shape)}" if fn.shapes and not written else ""
        fn.comment(f"{self.where(inst.node.span)}{shape}")
        match inst:
            case LayerInst():
                return self.layer(fn, inst, ins, d, target)
            case CallInst():
                return self.call(fn, inst, ins, d, target)
            case ResidualInst():
                return self.residual(fn, inst, ins, d, target)
            case RepeatInst():
                return self.repeat(fn, inst, ins, d, target)
            case ExpertsInst():
                return self.experts(fn, inst, ins, d, target)
            case ScanInst():
                return self.scan(fn, inst, ins, d, target)
        raise AssertionError(inst.node)

    # -- layers ---------------------------------------------------------------------------------
    def layer(self, fn: Fn, inst: LayerInst, ins: list[Var], d: Dicts, target: str) -> Var:
        if inst.inside is not None:  # a composite: its primitives, inline
            stateful = self.stateful(inst)
            inner = d.sub(inst.id, has_params(inst), stateful)
            if stateful:  # its boxes' new states gathered under its id
                inner = Dicts(inner.p, inner.s, fn.names.fresh(f"ns_{inst.id}"))
                fn.line(f"{inner.ns} = {{}}")
            env = dict(zip(inst.inside.body.inputs, ins))
            out = self.scope(fn, inst.body, inst.inside.body, env, inner, target)
            if stateful:
                fn.line(f'{d.ns}["{inst.id}"] = {inner.ns}')
            return out
        layer = lookup(inst.node.op)
        assert layer is not None, inst.node.op  # the checker knew it
        want = layer.layout
        if want == "attrs":  # the axis a norm or a scale works on is chosen per box
            chosen = getattr(inst.attrs, "layout", None)
            assert isinstance(chosen, str), inst.node.op
            want = chosen
        if want == "any":
            want = ins[0].layout if all(v.rank == ins[0].rank for v in ins) else "cf"
        xs = [self.convert(fn, v, want, reuse=v.name == target) for v in ins]
        emit = _Emit(self, fn, inst, [v.name for v in xs], d, target)
        lowering = DECODE_LOWERINGS.get(layer.name) if self.decode else None
        expr = (lowering or LOWERINGS[layer.name])(emit)
        if expr != target:
            fn.line(f"{target} = {expr}")
        if emit.new_state:
            items = ", ".join(f'"{k}": {v}' for k, v in emit.new_state.items())
            fn.line(f'{d.ns}["{inst.id}"] = {{{items}}}')
        layout = layer.out_layout or want
        rank = len(_output(inst).shape)
        return Var(target, layout if rank >= 2 else "cf", rank)

    # -- residual groups ------------------------------------------------------------------------
    def residual(self, fn: Fn, inst: ResidualInst, ins: list[Var], d: Dicts, target: str) -> Var:
        node = inst.node
        nb = len(node.body.inputs)
        inner = d.sub(inst.id, has_params(inst), self.stateful(inst))
        if self.stateful(inst):
            ns = fn.names.fresh(f"ns_{inst.id}")
            fn.line(f"{ns} = {{}}")
            inner = Dicts(inner.p, inner.s, ns)
        env = dict(zip(node.body.inputs, [ins[0], *ins[1:nb]]))
        main = self.scope(fn, inst.body, node.body, env, inner, fn.names.fresh("h"))
        added = ins[0]
        if node.shortcut is not None:
            fn.comment("shortcut")
            env = dict(zip(node.shortcut.inputs, [ins[0], *ins[nb:]]))
            short = inner.sub(
                "shortcut", _any(inst.shortcut, has_params), _any(inst.shortcut, self.stateful)
            )
            if short.s is not None:
                ns_short = fn.names.fresh("ns_shortcut")
                fn.line(f'{ns_short} = {inner.ns}["shortcut"] = {{}}')
                short = Dicts(short.p, short.s, ns_short)
            added = self.scope(fn, inst.shortcut, node.shortcut, env, short, fn.names.fresh("sc"))
        added = self.convert(fn, added, main.layout, reuse=False)
        fn.comment("+ (the residual sum)")
        fn.line(f"{target} = {main.name} + {added.name}")
        if self.stateful(inst):
            fn.line(f'{d.ns}["{inst.id}"] = {inner.ns}')
        return Var(target, main.layout, main.rank)

    # -- block calls ----------------------------------------------------------------------------
    def call(self, fn: Fn, inst: CallInst, ins: list[Var], d: Dicts, target: str) -> Var:
        bfn = self.block_function(inst, [v.layout for v in ins])
        sub = d.sub(inst.id, bfn.params, bfn.state)
        args = [a for a in (sub.p, sub.s) if a is not None] + [v.name for v in ins]
        args += [f"{s}={fn.symbol(s)}" for s in bfn.symbols]
        if bfn.train:
            (fn.owner or fn).uses.add("train")
            args.append("train=train")
        for name in bfn.decode:
            (fn.owner or fn).uses.add(name)
            args.append(f"{name}={name}")
        if bfn.key:
            args.append(f"key={fn.next_key()}")
        out = f'{target}, {d.ns}["{inst.id}"]' if bfn.state else target
        fn.line(f"{out} = {bfn.name}({', '.join(args)})")
        return Var(target, bfn.out_layout, len(_output(inst).shape))

    def local_names(self) -> Namespace:
        """A function's namespace: nothing may shadow a module-level name (a runtime or block
        function, ``jnp``...) or our own locals (``p``, ``train``...)."""
        return Namespace(frozenset(LOCAL_RESERVED | self.globals.used | self.module_names))

    def block_function(self, inst: CallInst, layouts: list[str]) -> BlockFn:
        block = self.program.blocks[inst.node.op]
        local = self.local_names()
        args = [local(block.body.node(nid).name or "x") for nid in block.body.inputs]
        fn = Fn(local, params=True, shapes=False)
        params, state = has_params(inst), self.stateful(inst)
        env = {
            nid: Var(a, lay, len(t.shape))
            for nid, a, lay, t in zip(block.body.inputs, args, layouts, inst.inputs)
        }
        if state:
            fn.line("ns = {}")
        first = block.body.inputs[0]
        reuse = block.body.out_degree(first) == 1  # the input is read once: `x = f(x)`
        chain = args[0] if reuse else local.fresh("h")
        d = Dicts("p" if params else None, "s" if state else None, "ns" if state else None)
        result = self.scope(fn, inst.body, block.body, env, d, chain)
        fn.line(f"return {result.name}, ns" if state else f"return {result.name}")
        symbols = fn.used_symbols()
        train, key = "train" in fn.uses, "key" in fn.uses
        decode = tuple(k for k in DECODE_KEYS if k in fn.uses)
        signature = (params, state, tuple(symbols), train, key, decode)
        cache_key = (block.name, "\n".join(fn.lines), tuple(layouts), signature)
        if cache_key not in self.blocks:
            taken = {b.name for b in self.blocks.values()}
            name = self.globals(block.name)
            if name in taken:
                name = self.globals.fresh(f"{name}_v")
            head = [p for p, on in (("p", params), ("s", state)) if on] + args
            keywords = [fn.symbols[s] for s in symbols]
            keywords += (["train=False"] if train else []) + (["key=None"] if key else [])
            keywords += [f"{k}=0" for k in decode]
            star = ["*", *keywords] if keywords else []
            returns = "(output, new state)" if state else "its output"
            where = PurePath(composite.shown_name(block.span.file)).name
            doc = (
                f'{_INDENT}"""Block `{printable(block.name)}` of '
                f'{where}:{block.span.line}; returns {returns}."""'
            )
            head_lines = layout.statement(f"def {name}({', '.join(head + star)}):")
            self.functions.append("\n".join([*head_lines, doc, *layout.lines(fn.lines)]))
            self.blocks[cache_key] = BlockFn(
                name, result.layout, params, state, symbols, train, key, decode
            )
        return self.blocks[cache_key]

    # -- ×N groups ------------------------------------------------------------------------------
    def repeat(self, fn: Fn, inst: RepeatInst, ins: list[Var], d: Dicts, target: str) -> Var:
        """A ×N group: one step function per run of identical copies, scanned over its
        stacked arrays, or, for a short group kept apart (`storage`), called once per copy
        with that copy's arrays."""
        assert isinstance(inst.node, RepeatNode)
        body = inst.node.body
        x = ins[0]
        outer = d.sub(inst.id, has_params(inst), self.stateful(inst))
        apart = not self.stacked and storage.per_copy(inst)
        several = len(inst.copies) > 1
        collected = []
        for ci, (first, count, copies) in enumerate(paths.numbered(inst)):
            if apart or not several:
                group = Dicts(
                    outer.p if _any(copies.body, has_params) else None,
                    outer.s if _any(copies.body, self.stateful) else None,
                    outer.ns,
                )
            else:
                group = outer.sub(
                    str(ci), _any(copies.body, has_params), _any(copies.body, self.stateful)
                )
            step = fn.names.fresh(f"step_{inst.id}")
            carry = fn.names.fresh("x")
            sub = Fn(fn.names, depth=fn.depth + 1, shapes=fn.shapes, owner=fn.owner or fn)
            inner = Dicts(
                "p" if group.p else None, "s" if group.s else None, "ns" if group.s else None
            )
            if group.s:
                sub.line("ns = {}")
            env = dict(zip(body.inputs, [Var(carry, x.layout, x.rank), *ins[1:]]))
            index = inst.node.index if isinstance(inst.node, RepeatNode) else None
            owner = fn.owner or fn
            hidden = owner.symbols.get(index) if index else None
            if index:  # the copy's index, a step's input (its values by copy: `first` on)
                owner.symbols[index] = fn.names.fresh(index)
            self.stacked += not apart
            result = self.scope(sub, copies.body, body, env, inner, fn.names.fresh("h"))
            self.stacked -= not apart
            read = bool(index) and f"${index}" in owner.uses
            var = ""
            if index:
                var = owner.symbols.pop(index)
                owner.uses.discard(f"${index}")
                if hidden is not None:
                    owner.symbols[index] = hidden
            result = self.convert(sub, result, x.layout, reuse=False)
            sub.line(f"return {result.name}, {'ns' if group.s else 'None'}")
            parts = [
                (name, expr)
                for name, expr in (
                    ("p", group.p),
                    ("s", group.s),
                    (var, f"jnp.arange({first}, {first + count})" if read else ""),
                    ("key", "key" if "key" in sub.uses else ""),  # split below
                )
                if name and expr
            ]
            if "key" in sub.uses:
                self.runtime.add("split_keys")
                parts[-1] = ("key", f"split_keys({fn.next_key()}, {count})")
            if len(parts) == 1:
                fn.line(f"def {step}({carry}, {parts[0][0]}):")
                xs = parts[0][1]
            else:
                fn.line(f"def {step}({carry}, xs):")
                if parts:
                    fn.line(f"{_INDENT}{', '.join(n for n, _ in parts)} = xs")
                xs = f"({', '.join(e for _, e in parts)})" if parts else "None"
            fn.lines += sub.lines
            out = fn.names.fresh(f"ns_{inst.id}") if group.s else "_"
            call = self.copies_call(inst, step, f"{x.name}, {xs}", first, count, apart)
            fn.line(f"{target}, {out} = {call}")
            collected.append(out)
            x = Var(target, x.layout, x.rank)
        if self.stateful(inst):
            news = [r for r in collected if r != "_"]
            if apart:  # each run's new states by copy number: one dict of them all
                value = news[0] if len(news) == 1 else "{" + ", ".join(f"**{r}" for r in news) + "}"
            elif several:
                items = [f'"{i}": {r}' for i, r in enumerate(collected) if r != "_"]
                value = "{" + ", ".join(items) + "}"
            else:
                value = collected[0]
            fn.line(f'{d.ns}["{inst.id}"] = {value}')
        return x

    def copies_call(
        self, inst: RepeatInst, step: str, args: str, first: int, count: int, apart: bool
    ) -> str:
        """The call that runs one run of a ×N group's copies: each copy with its own arrays
        (kept apart), or a loop over the stacked ones (a scan, or unrolled)."""
        if apart:
            self.runtime.add("each_copy")
            remat = "" if storage.checkpointed_on_cpu(inst) else ", remat_on_cpu=False"
            return f"each_copy({step}, {args}, {first}, {count}{remat})"
        # a copy that changes the shape (always counted once) cannot be a scan's body
        loop = "unrolled" if self.unroll or count == 1 else "scan_group"
        if self.decode and loop == "unrolled":  # weights split per layer beforehand
            loop = "each_layer"
        self.runtime.add(loop)
        return f"{loop}({step}, {args}, {count})"

    # -- recurrences ----------------------------------------------------------------------------
    def scan(self, fn: Fn, inst: ScanInst, ins: list[Var], d: Dicts, target: str) -> Var:
        """``scan h: H:``: a step function of (carry, x_t), run by ``jax.lax.scan`` over the
        sequence axis (axis 1, after the batch); the step reads the group's parameters (one
        set for every step) and the outer tensors it names from the function around it. A
        decoding module starts from the carry its cache holds and keeps the last one."""
        node = inst.node
        out = inst.output
        assert out is not None, "a module is generated from a model that checked"
        x = self.convert(fn, ins[0], "cf", reuse=False)
        start = ins[1] if node.init else None
        captures = ins[2:] if node.init else ins[1:]
        step, carry, xt = (fn.names.fresh(n) for n in (f"step_{inst.id}", node.carry, "x_t"))
        sub = Fn(fn.names, depth=fn.depth + 1, shapes=fn.shapes, owner=fn.owner or fn)
        inner = Dicts(d.sub(inst.id, has_params(inst), False).p, None, None)
        rank = len(node.carry_shape.dims)
        values = [Var(xt, "cf", x.rank - 1), Var(carry, "cf", rank), *captures]
        env = dict(zip(node.body.inputs, values))
        result = self.scope(sub, inst.body, node.body, env, inner, fn.names.fresh("h"))
        result = self.convert(sub, result, "cf", reuse=False)
        sub.line(f"return {result.name}, {result.name}")
        keyed = "key" in sub.uses
        fn.line(f"def {step}({carry}, {'xs' if keyed else xt}):")
        if keyed:  # one key per step
            fn.line(f"{_INDENT}{xt}, key = xs")
        fn.lines += sub.lines
        cached = f'{d.s}["{inst.id}"]["{node.carry}"]' if self.decode and d.s else None
        if cached is not None:  # decoding: the carry the previous tokens left
            h0 = fn.names.fresh(f"{node.carry}_0")
            fn.line(f"{h0} = {cached}.astype(COMPUTE)")
        elif start is not None:
            h0 = self.convert(fn, start, "cf", reuse=False).name
        else:  # zeros of the compute type, the type the step gives back
            dims = [str(_code_value(e, fn)) for e in out.shape[1:]]
            h0 = fn.names.fresh(f"{node.carry}_0")
            fn.line(f"{h0} = jnp.zeros(({x.name}.shape[0], {', '.join(dims)}), COMPUTE)")
        seq = f"jnp.swapaxes({x.name}, 0, 1)"
        if keyed:
            self.runtime.add("split_keys")
            seq = f"({seq}, split_keys({fn.next_key()}, {x.name}.shape[1]))"
        last = fn.names.fresh(f"{node.carry}_last") if cached is not None else "_"
        fn.line(f"{last}, {target} = jax.lax.scan({step}, {h0}, {seq})")
        fn.line(f"{target} = jnp.swapaxes({target}, 0, 1)")
        if cached is not None:
            fn.line(f'{d.ns}["{inst.id}"] = {{"{node.carry}": {last}}}')
        return Var(target, "cf", len(out.shape))

    # -- mixtures of experts --------------------------------------------------------------------
    def experts(self, fn: Fn, inst: ExpertsInst, ins: list[Var], d: Dicts, target: str) -> Var:
        """Dispatch the tokens to (E, G·C, D) buffers, run one function of the body on every
        expert's buffer under ``jax.vmap`` (the experts' arrays stacked), gather back by the
        routes and sum by the gates."""
        node = inst.node
        assert isinstance(node, ExpertsNode), "`box` dispatches mixtures of experts here"
        (cp,) = inst.copies
        x = self.convert(fn, ins[0], "cf", reuse=False)
        outer = d.sub(inst.id, True, True)
        buffers, routes, aux = (fn.names.fresh(n) for n in ("buffers", "routes", "aux"))
        self.runtime |= {"moe_dispatch", "moe_combine"}
        keywords = f"k={inst.hp['k']}"
        if inst.hp["cap"] is not None:  # a capacity bounds the buffers in training only
            (fn.owner or fn).uses.add("train")
            keywords += f", capacity={inst.hp['cap']!r}, train=train"
        fn.line(
            f'{buffers}, {routes}, {aux} = moe_dispatch({x.name}, {outer.p}["router"], {keywords})'
        )
        expert = fn.names.fresh(f"expert_{inst.id}")
        token = fn.names.fresh("tokens")
        sub = Fn(fn.names, depth=fn.depth + 1, shapes=fn.shapes, owner=fn.owner or fn)
        params = _any(cp.body, has_params)
        inner = Dicts("p" if params else None, None, None)
        env = {node.body.inputs[0]: Var(token, "cf", 1)}
        self.stacked += 1
        result = self.scope(sub, cp.body, node.body, env, inner, token)
        self.stacked -= 1
        sub.line(f"return {result.name}")
        args = [("p", f'{outer.p}["expert"]')] if params else []
        args.append((token, buffers))
        if "key" in sub.uses:
            self.runtime.add("split_keys")
            args.append(("key", f"split_keys({fn.next_key()}, {inst.hp['e']})"))
        fn.line(f"def {expert}({', '.join(name for name, _ in args)}):")
        fn.lines += sub.lines
        ys = fn.names.fresh("ys")
        fn.line(f"{ys} = jax.vmap({expert})({', '.join(value for _, value in args)})")
        fn.line(f"{target} = moe_combine({ys}, {routes}, {x.name}.shape[:-1])")
        fn.line(f'{d.ns}["{inst.id}"] = {{"aux": {aux}}}')
        return Var(target, "cf", len(_output(inst).shape))


def _output(inst: Inst) -> Tensor:
    """A box's output: set on every box the checker passed, the only ones lowered."""
    assert inst.output is not None, inst.id
    return inst.output
