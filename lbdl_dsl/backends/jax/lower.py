"""Lowering checked instances to lines of JAX code, one box per line.

A `Lowerer` writes the body of a function: it walks one graph in order, asks each registry entry
for its lowering through the `Emit` protocol, and keeps track of where each value lives (its
identifier and its layout: the spec's channels-first, or channels-last where convolutions and
pools want it). Block calls become calls of one function per block definition (written once,
taking the block's symbols as keyword arguments where its boxes use them), residual groups are
written inline, and ×N groups become ``jax.lax.scan`` over stacked parameters (``scan_group``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lbdl_dsl.backends.jax.names import LOCAL_RESERVED, Code, Namespace, size_code
from lbdl_dsl.compiler.graph import Graph, ParamRef
from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr

_INDENT = "    "


@dataclass(frozen=True)
class Var:
    """A value in generated code: its identifier, layout and per-sample rank in the spec."""

    name: str
    layout: str  # "cf" (the spec's order) or "cl" (channels last)
    rank: int


@dataclass
class Fn:
    """A function body being written, with its own namespace of locals."""

    names: Namespace
    symbols: dict[str, str]  # spec symbol → local identifier (a block's C, H, W, S...)
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    keys: int = 0
    used: set[str] = field(default_factory=set)  # spec symbols the body reads
    shapes: bool = True  # comment output shapes (not in block functions, shared by calls)

    def line(self, text: str) -> None:
        self.lines.append(_INDENT * self.depth + text)

    def comment(self, text: str) -> None:
        self.line("# " + printable(text))

    def next_key(self) -> str:
        self.keys += 1
        return f"fold(key, {self.keys})"


def printable(text: str) -> str:
    """Spec text made safe for a comment or docstring: one line, printable, bounded."""
    clean = "".join(c if c.isprintable() and c not in '"\\' else " " for c in text)
    return clean.strip()[:90]


def _dim(d: Expr) -> int | str:
    v = d.as_int()
    return v if v is not None else str(d)


def has_state(inst: Inst) -> bool:
    return inst.totals.get("state", Expr()) != Expr()


def has_params(inst: Inst) -> bool:
    return inst.totals.get("params", Expr()) != Expr()


class _Emit:
    """The `Emit` protocol (core/layers/base.py) for one layer instance."""

    def __init__(
        self,
        low: Lowerer,
        fn: Fn,
        inst: Inst,
        xs: list[str],
        pvar: str,
        svar: str,
        hp: dict[str, Any],
        out_shape: tuple,
    ) -> None:
        self.low, self.fn, self.inst = low, fn, inst
        self.x, self.hp, self.pvar, self.svar = xs, hp, pvar, svar
        self.in_shapes = [tuple(_dim(d) for d in t.shape) for t in inst.inputs]
        self.out_shape = out_shape
        self.new_state: dict[str, str] = {}

    def param(self, name: str) -> str:
        if name in self.inst.tied:
            other, theirs, transposed = self.inst.tied[name]
            return f'{self.pvar}["{other}"]["{theirs}"]' + (".T" if transposed else "")
        return f'{self.pvar}["{self.inst.id}"]["{name}"]'

    def has_param(self, name: str) -> bool:
        return name in self.inst.params or name in self.inst.tied

    def state(self, name: str) -> str:
        return f'{self.svar}["{self.inst.id}"]["{name}"]'

    def set_state(self, name: str, expr: str) -> None:
        self.new_state[name] = expr

    def call(self, fn: str, *args: Any, **kwargs: Any) -> str:
        self.low.runtime.add(fn)
        parts = [a if isinstance(a, str) else repr(a) for a in args]
        parts += [f"{k}={v if isinstance(v, str) else repr(v)}" for k, v in kwargs.items()]
        return f"{fn}({', '.join(parts)})"

    def bind(self, expr: str) -> str:
        name = self.fn.names.fresh("t")
        self.fn.line(f"{name} = {expr}")
        return name

    def key(self) -> str:
        self.low.runtime.add("fold")
        return self.fn.next_key()

    def static(self, value: Any) -> str:
        return repr(value)

    @property
    def train(self) -> str:
        return "train"


@dataclass
class BlockFn:
    name: str
    out_layout: str
    symbols: list[tuple[str, str]]  # (spec symbol, keyword name), in signature order


class Lowerer:
    """Writes function bodies for one model; collects the runtime and block functions used."""

    def __init__(self, program, sources: dict[str, str], globals_: Namespace, unroll: bool) -> None:
        self.program = program
        self.sources = sources
        self.globals = globals_
        self.unroll = unroll
        self.runtime: set[str] = {"fold"}
        self.functions: list[str] = []
        self.blocks: dict[tuple, BlockFn] = {}

    # -- values ---------------------------------------------------------------------------------
    def convert(self, fn: Fn, var: Var, layout: str, reuse: bool) -> Var:
        if var.layout == layout or var.rank < 2:
            return var
        helper = "to_channels_last" if layout == "cl" else "to_channels_first"
        self.runtime.add(helper)
        name = var.name if reuse else fn.names.fresh(f"{var.name}_{layout}")
        fn.line(f"{name} = {helper}({var.name})")
        return Var(name, layout, var.rank)

    def source_line(self, span) -> str:
        lines = self.sources.get(span.file, "").splitlines()
        return lines[span.line - 1].strip() if 0 < span.line <= len(lines) else ""

    # -- one graph ------------------------------------------------------------------------------
    def scope(self, fn: Fn, insts: list[Inst], graph: Graph, env: dict[str, Var], *names) -> Var:
        """Emit one graph's boxes and return its result; ``env`` gives its input nodes' values,
        ``names`` the variables `values` takes (parameters, state, new state, chain)."""
        return self.values(fn, insts, graph, env, *names)[graph.result]

    def values(
        self,
        fn: Fn,
        insts: list[Inst],
        graph: Graph,
        env: dict[str, Var],
        pvar: str,
        svar: str,
        nsvar: str,
        chain: str,
        keep: frozenset[str] = frozenset(),
    ) -> dict[str, Var]:
        """Like `scope`, returning every node's value; ``keep`` nodes get names of their own."""
        by_id = {inst.id: inst for inst in insts}
        order = [nid for nid in graph.order() if nid in by_id]
        labels = {nid: name for name, nid in sorted(graph.names.items())}
        values = dict(env)
        for pos, nid in enumerate(order):
            inst = by_id[nid]
            uses = list(graph.g.out_edges(nid, data="port"))
            nxt = order[pos + 1] if pos + 1 < len(order) else None
            single = len(uses) == 1 and uses[0][1] == nxt and uses[0][2] == 0
            last = nid == graph.result and not uses
            label = labels.get(nid)
            named = label is not None or nid in keep
            target = chain if (single or last) and not named else fn.names.fresh(label or inst.id)
            ins = [values[u] for u in graph.preds(nid)]
            values[nid] = self.box(fn, inst, ins, pvar, svar, nsvar, target)
        return values

    def box(
        self, fn: Fn, inst: Inst, ins: list[Var], pvar: str, svar: str, nsvar: str, target: str
    ) -> Var:
        written = inst.node.annotation is not None
        shape = f"  ->  {fmt_shape(inst.output.shape)}" if fn.shapes and not written else ""
        fn.comment(f"line {inst.node.span.line}: {self.source_line(inst.node.span)}{shape}")
        kind = inst.node.kind
        if kind == "layer":
            return self.layer(fn, inst, ins, pvar, svar, nsvar, target)
        if kind == "call":
            return self.call(fn, inst, ins, pvar, svar, nsvar, target)
        if kind == "residual":
            return self.residual(fn, inst, ins, pvar, svar, nsvar, target)
        return self.repeat(fn, inst, ins, pvar, svar, nsvar, target)

    # -- layers ---------------------------------------------------------------------------------
    def symbolic(self, raw: Any, fn: Fn, used: set[str]) -> Any:
        """The spec's own expression for a value, over the function's symbols, or None."""
        if isinstance(raw, ParamRef) and raw.name in fn.symbols:
            used.add(raw.name)
            return Code(fn.symbols[raw.name])
        if isinstance(raw, Expr) and raw.free_symbols and raw.free_symbols <= fn.symbols.keys():
            used |= raw.free_symbols
            return Code(size_code(raw, fn.symbols))
        if isinstance(raw, tuple) and raw and all(isinstance(r, Expr) for r in raw):
            parts = [self.symbolic(r, fn, used) for r in raw]
            if any(p is not None for p in parts):
                return tuple(p if p is not None else r.as_int() for p, r in zip(parts, raw))
        return None

    def plain(self, value: Any, fn: Fn, used: set[str]) -> Any:
        """A resolved value as Python: numbers as numbers, sizes left symbolic as code."""
        if isinstance(value, Expr):
            v = value.as_int()
            if v is not None:
                return v
            if value.is_const:
                return float(value.const_value)
            if value.free_symbols <= fn.symbols.keys():
                used |= value.free_symbols
                return Code(size_code(value, fn.symbols))
            return Code("-1")
        if isinstance(value, tuple):
            return tuple(self.plain(v, fn, used) for v in value)
        return value

    def out_shape(self, inst: Inst, fn: Fn, used: set[str]) -> tuple:
        out = []
        for d in inst.output.shape:
            v = d.as_int()
            if v is not None:
                out.append(v)
            elif d.free_symbols <= fn.symbols.keys():
                used |= d.free_symbols
                out.append(Code(size_code(d, fn.symbols)))
            else:
                out.append(Code("-1"))
        return tuple(out)

    def layer(
        self, fn: Fn, inst: Inst, ins: list[Var], pvar: str, svar: str, nsvar: str, target: str
    ) -> Var:
        layer = lookup(inst.node.op)
        want = layer.layout
        if want == "any":
            want = ins[0].layout if all(v.rank == ins[0].rank for v in ins) else "cf"
        xs = [self.convert(fn, v, want, reuse=v.name == target) for v in ins]
        mark = len(fn.lines)
        for symbolic in (True, False):
            used: set[str] = set()
            hp = {k: self.plain(v, fn, used) for k, v in inst.hp.items()}
            if symbolic:
                for key, raw in inst.node.hparams:
                    if isinstance(inst.hp.get(key), (str, bool)):
                        continue  # a word or a flag shapes the code: written as its value
                    code = self.symbolic(raw, fn, used)
                    if code is not None:
                        hp[key] = code
            emit = _Emit(
                self, fn, inst, [v.name for v in xs], pvar, svar, hp, self.out_shape(inst, fn, used)
            )
            try:
                expr = layer.lower(emit)
                break
            except (TypeError, ValueError, KeyError, AttributeError):
                del fn.lines[mark:]  # this lowering computes with the values: give it numbers
        fn.used |= used
        fn.line(f"{target} = {expr}")
        if emit.new_state:
            items = ", ".join(f'"{k}": {v}' for k, v in emit.new_state.items())
            fn.line(f'{nsvar}["{inst.id}"] = {{{items}}}')
        layout = layer.out_layout or want
        rank = len(inst.output.shape)
        return Var(target, layout if rank >= 2 else "cf", rank)

    # -- residual groups ------------------------------------------------------------------------
    def residual(
        self, fn: Fn, inst: Inst, ins: list[Var], pvar: str, svar: str, nsvar: str, target: str
    ) -> Var:
        node = inst.node
        nb = len(node.body.inputs)
        p_in = _sub(pvar, inst.id, has_params(inst))
        s_in = _sub(svar, inst.id, has_state(inst))
        ns = fn.names.fresh(f"ns_{inst.id}") if has_state(inst) else nsvar
        if ns != nsvar:
            fn.line(f"{ns} = {{}}")
        env = dict(zip(node.body.inputs, [ins[0], *ins[1:nb]]))
        main = self.scope(fn, inst.body, node.body, env, p_in, s_in, ns, fn.names.fresh("h"))
        added = ins[0]
        if node.shortcut is not None:
            fn.comment("shortcut")
            env = dict(zip(node.shortcut.inputs, [ins[0], *ins[nb:]]))
            ns_sc = ns
            if ns != nsvar:
                ns_sc = fn.names.fresh("ns_shortcut")
                fn.line(f'{ns_sc} = {ns}.setdefault("shortcut", {{}})')
            added = self.scope(
                fn,
                inst.shortcut,
                node.shortcut,
                env,
                _sub(p_in, "shortcut", _any(inst.shortcut, has_params)),
                _sub(s_in, "shortcut", _any(inst.shortcut, has_state)),
                ns_sc,
                fn.names.fresh("sc"),
            )
        added = self.convert(fn, added, main.layout, reuse=False)
        fn.comment("+ (the residual sum)")
        fn.line(f"{target} = {main.name} + {added.name}")
        if ns != nsvar:
            fn.line(f'{nsvar}["{inst.id}"] = {ns}')
        return Var(target, main.layout, main.rank)

    # -- block calls ----------------------------------------------------------------------------
    def call(
        self, fn: Fn, inst: Inst, ins: list[Var], pvar: str, svar: str, nsvar: str, target: str
    ) -> Var:
        bfn = self.block_function(inst, [v.layout for v in ins])
        args = ", ".join(v.name for v in ins)
        kwargs = "".join(f", {kw}={_literal(inst.bindings[s], fn)}" for s, kw in bfn.symbols)
        ns = f'{nsvar}["{inst.id}"]' if has_state(inst) else "_"
        p, s = _sub(pvar, inst.id, has_params(inst)), _sub(svar, inst.id, has_state(inst))
        fn.line(
            f"{target}, {ns} = {bfn.name}({p}, {s}, {args}{kwargs}, train=train, "
            f"key={fn.next_key()})"
        )
        return Var(target, bfn.out_layout, len(inst.output.shape))

    def local_names(self) -> Namespace:
        """A function's namespace: nothing may shadow a global or a runtime function."""
        return Namespace(frozenset(LOCAL_RESERVED | self.globals.used | self.globals.reserved))

    def block_function(self, inst: Inst, layouts: list[str]) -> BlockFn:
        block = self.program.blocks[inst.node.op]
        local = self.local_names()
        symbols = {p.name: "" for p in block.params}
        for sig in block.inputs:
            for d in sig.dims:
                symbols |= dict.fromkeys(sorted(d.free_symbols), "")
        args = []
        for nid in block.body.inputs:
            node = block.body.node(nid)
            args.append(local(node.name or "x"))
        symbols = {s: local(s) for s in symbols}
        fn = Fn(local, symbols, shapes=False)
        env = {
            nid: Var(a, lay, len(t.shape))
            for nid, a, lay, t in zip(block.body.inputs, args, layouts, inst.inputs)
        }
        fn.line("ns = {}")
        first = block.body.inputs[0]
        reuse = block.body.g.out_degree(first) == 1  # the input is read once: `x = f(x)`
        chain = args[0] if reuse else local.fresh("h")
        result = self.scope(fn, inst.body, block.body, env, "p", "s", "ns", chain)
        fn.line(f"return {result.name}, ns")
        used = [(s, symbols[s]) for s in symbols if s in fn.used]
        key = (block.name, "\n".join(fn.lines), tuple(layouts), tuple(used))
        if key not in self.blocks:
            taken = {b.name for b in self.blocks.values()}
            name = self.globals(block.name)
            if name in taken:
                name = self.globals.fresh(f"{name}_v")
            kw = "".join(f"{k}, " for _, k in used)
            head = f"def {name}(p, s, {', '.join(args)}, *, {kw}train=False, key=None):"
            doc = (
                f'{_INDENT}"""Block `{printable(block.name)}` of line {block.span.line}; '
                'returns (output, new state)."""'
            )
            self.functions.append("\n".join([head, doc, *fn.lines]))
            self.blocks[key] = BlockFn(name, result.layout, used)
        return self.blocks[key]

    # -- ×N groups ------------------------------------------------------------------------------
    def repeat(
        self, fn: Fn, inst: Inst, ins: list[Var], pvar: str, svar: str, nsvar: str, target: str
    ) -> Var:
        body = inst.node.body
        x = ins[0]
        p_all = _sub(pvar, inst.id, has_params(inst))
        s_all = _sub(svar, inst.id, has_state(inst))
        several = len(inst.copies) > 1
        collected = []
        for ci, copies in enumerate(inst.copies):
            count = copies.count.as_int()
            p_c = _sub(p_all, str(ci), _any(copies.body, has_params)) if several else p_all
            s_c = _sub(s_all, str(ci), _any(copies.body, has_state)) if several else s_all
            step = fn.names.fresh(f"step_{inst.id}")
            carry = fn.names.fresh("x")
            fn.line(f"def {step}({carry}, xs):")
            sub = Fn(fn.names, fn.symbols, depth=fn.depth + 1, shapes=fn.shapes)
            sub.line("p, s, key = xs")
            sub.line("ns = {}")
            env = dict(zip(body.inputs, [Var(carry, x.layout, x.rank), *ins[1:]]))
            result = self.scope(sub, copies.body, body, env, "p", "s", "ns", fn.names.fresh("h"))
            result = self.convert(sub, result, x.layout, reuse=False)
            sub.line(f"return {result.name}, ns")
            fn.lines += sub.lines
            fn.used |= sub.used
            self.runtime.add("split_keys")
            out = fn.names.fresh(f"ns_{inst.id}")
            # a copy that changes the shape (always counted once) cannot be a scan's body
            loop = "unrolled" if self.unroll or count == 1 else "scan_group"
            self.runtime.add(loop)
            extra = f", {count}" if loop == "unrolled" else ""
            fn.line(
                f"{target}, {out} = {loop}({step}, {x.name}, "
                f"({p_c}, {s_c}, split_keys({fn.next_key()}, {count})){extra})"
            )
            collected.append(out)
            x = Var(target, x.layout, x.rank)
        if has_state(inst):
            value = (
                collected[0]
                if not several
                else ("{" + ", ".join(f'"{i}": {r}' for i, r in enumerate(collected)) + "}")
            )
            fn.line(f'{nsvar}["{inst.id}"] = {value}')
        return x


def _sub(var: str, key: str, present: bool = True) -> str:
    """The sub-dictionary of a params or state dictionary, or ``{}`` when there is none."""
    return f'{var}["{key}"]' if present and var != "{}" else "{}"


def _any(insts: list[Inst], test) -> bool:
    return any(test(i) for i in insts)


def _literal(value: Any, fn: Fn) -> str:
    """A block argument at a call site: a number, or the caller's own expression for it."""
    if isinstance(value, Expr):
        v = value.as_int()
        if v is not None:
            return str(v)
        if value.free_symbols <= fn.symbols.keys():
            return size_code(value, fn.symbols)
        raise ValueError(f"the size {value} has no value in the generated code")
    return repr(value)


def used_identifiers(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
