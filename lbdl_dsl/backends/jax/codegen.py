"""The standalone JAX module of a checked model, as source text.

It imports only ``jax``, ``jax.numpy`` and ``numpy`` (and, from Python's standard library, ``os``,
``concurrent.futures`` and ``mmap`` for the threads that draw the initial parameters and the
memory they draw into) and reads like
hand-written code: a header
naming the spec, a table of parameter shapes with an ``init(key)`` that splits its key once, one
function per block definition, a pure ``apply``, then the runtime functions it uses (copied from
`runtime/`). Every box is one line preceded by its spec line and output shape (`lower.py`).
Initialisation is eager, array by array: it needs no compilation of the whole model.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import PurePath
from typing import Any

from lbdl_dsl.backends.jax import layout, roles_table, storage
from lbdl_dsl.backends.jax.lower import Dicts, Fn, Lowerer, Var, printable
from lbdl_dsl.backends.jax.names import LOCAL_RESERVED, RESERVED, Namespace
from lbdl_dsl.backends.jax.runtime_source import available, bound_names, source_for
from lbdl_dsl.compiler import decoding
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers.base import Const, FanIn, Init, Normal, Std, fmt_shape
from lbdl_dsl.core.symbolic import Expr, sym

_DTYPES = {"float32": "jnp.float32", "bfloat16": "jnp.bfloat16"}


def init_row(init: Init) -> tuple[str, float]:
    """An initialiser as a row of the module's tables, which the runtime's `init_arrays` reads."""
    match init:
        case FanIn(fan=fan):
            value = fan.as_int() if isinstance(fan, Expr) else fan
            if value is None:
                raise ValueError(f"fan-in {fan} has no value")
            return "fan_in", float(value)
        case Std(std=std):
            return "std", float(std)
        case Const(value=value):
            return "const", float(value)
        case Normal(std=std, truncated=truncated):
            return ("truncated_normal" if truncated else "normal"), float(std)
    raise AssertionError(init)


def _standard_imports(runtime: str) -> str:
    """The standard library a module imports: `init`'s threads and memory always, and the
    names the annotations of the runtime functions it copies use (`Callable`, `Any`, `Literal`) when
    they do, so that no import is left unused."""
    lines = ["import mmap", "import os"]
    if re.search(r"\bCallable\b", runtime):
        lines.append("from collections.abc import Callable")
    lines.append("from concurrent.futures import ThreadPoolExecutor")
    typing = [name for name in ("Any", "Literal") if re.search(rf"\b{name}\b", runtime)]
    if typing:
        lines.append(f"from typing import {', '.join(typing)}")
    return "\n".join(lines)


def _unread_arguments(function: str) -> list[str]:
    """The arguments of a generated function that its body never reads, in their order:
    ``del``-ed at its top, so that a linter's unused-argument rule (ruff ARG) holds of the
    module while the signature stays the one every module shares."""
    node = ast.parse(function).body[0]
    assert isinstance(node, ast.FunctionDef)
    read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    given = [*node.args.args, *node.args.kwonlyargs]
    return [a.arg for a in given if a.arg not in read]


Row = tuple[str, tuple[int, ...], str, float]
"""A table's row: (path, shape, how, arg)."""


def param_table(compiled: Checked) -> tuple[list[Row], list[Row]]:
    """(path, shape, how, arg) for every parameter and state array, as the module stores them
    (`storage.stored`): stacked for long ×N groups, one set per copy for short ones."""
    params: list[Row] = []
    state: list[Row] = []
    for array in storage.stored(compiled.root):
        shape: list[int] = []
        for d in array.shape:
            v = d.as_int() if isinstance(d, Expr) else d
            if v is None:
                assert isinstance(d, Expr)  # a whole number is never symbolic
                raise LbdlError(
                    f"the parameters of `{array.owner.node.op}` have the symbolic shape "
                    f"{fmt_shape(array.spec.shape)}",
                    array.owner.node.span,
                    hint=f"give {', '.join(sorted(d.free_symbols))} a value (--set) to build it",
                )
            shape.append(v)
        how, arg = init_row(array.spec.init)
        (params if array.trainable else state).append((array.path, tuple(shape), how, arg))
    return params, state


def _table(name: str, rows: list[Row], doc: str) -> str:
    if not rows:
        return f"# {doc}\n{name} = {{}}"
    lines = [f"# {doc}", f"{name} = {{"]
    for path, *row in rows:
        lines += layout.entry(layout.quote(path), layout.literal(tuple(row)), "    ")
    lines.append("}")
    return "\n".join(lines)


def _input_symbols(fn: Fn, inputs: list[tuple[str, Any]]) -> None:
    """Sizes only known at run time (a sequence's T), read off the arrays where a box needs them."""
    for var, t in inputs:
        for axis, d in enumerate(t.shape):
            (name,) = d.free_symbols if len(d.free_symbols) == 1 else (None,)
            if name is not None and name not in fn.sources and d == sym(name):
                fn.sources[name] = f"{var}.shape[{axis + 1}]"


def generate(
    compiled: Checked, *, unroll: bool = False, dtype: str = "float32", decode: bool = False
) -> str:
    """The module's text for a checked model (``--emit py``).

    With ``decode``, the module decodes (`backends/jax/decode.py`): ``apply`` takes the tokens
    at positions ``pos`` to ``pos + T - 1`` and, in ``state``, each box's cache for a context
    of ``context`` positions (`compiler/decoding.py`), and returns the caches updated beside
    the new state; everything else is the same module."""
    checked = compiled
    program = compiled.program
    model = program.model
    graph = model.body
    names = Namespace(RESERVED | LOCAL_RESERVED | available() | bound_names())
    for block in sorted(program.blocks):
        names(block)  # block functions keep their spec names; nothing else may take them
    low = Lowerer(program, compiled.sources, names, unroll, RESERVED | available(), decode)
    apply_locals = low.local_names()
    fn = Fn(apply_locals)
    input_vars = []
    for nid in graph.inputs:
        node = graph.node(nid)
        assert node.name is not None, nid  # an input node is named
        input_vars.append((nid, apply_locals(node.name), checked.inputs[node.name]))
    _input_symbols(fn, [(v, t) for _, v, t in input_vars])
    compute = _DTYPES[dtype]
    if dtype != "float32":
        fn.line(f"params = jax.tree.map(lambda a: a.astype({compute}), params)")
        for _, var, t in input_vars:
            if t.dtype == "float":
                fn.line(f"{var} = {var}.astype({compute})")
    has_state = checked.totals["state"] != Expr() or any(map(low.stateful, checked.root))
    if has_state:
        fn.line("new_state = {}")
    dicts = Dicts("params", "state" if has_state else None, "new_state" if has_state else None)
    env = {nid: Var(var, "cf", len(t.shape)) for nid, var, t in input_vars}
    keep = frozenset(nid for _, nid in graph.outputs)
    last = decoding.last_only_from(checked.root, graph) if decode else None
    values = low.values(fn, checked.root, graph, env, dicts, apply_locals.fresh("x"), keep, last)
    outs = [values[nid] for _, nid in graph.outputs]
    results = []
    for (name, _), out in zip(graph.outputs, outs):
        converted = low.convert(fn, out, "cf", reuse=False)
        cast = ".astype(jnp.float32)" if dtype != "float32" else ""
        results.append((name, f"{converted.name}{cast}"))
    if has_state and dtype != "float32":
        fn.line("new_state = jax.tree.map(lambda a: a.astype(jnp.float32), new_state)")
    new_state = "new_state" if has_state else "{}"
    if len(results) == 1:
        fn.line(f"return {results[0][1]}, {new_state}")
    else:
        items = ", ".join(f"{layout.quote(name)}: {expr}" for name, expr in results)
        fn.line(f"return {{{items}}}, {new_state}")
    symbols = [f"{fn.symbols[s]} = {fn.sources[s]}" for s in fn.used_symbols()]
    body = [f"    {line}" for line in symbols] + fn.lines
    args = ", ".join(v for _, v, _ in input_vars)
    params_rows, state_rows = param_table(compiled)
    spec_file = printable(PurePath(compiled.file).name)
    inputs_doc = ", ".join(f"{printable(k)}: {t}" for k, t in checked.inputs.items())
    outputs_doc = ", ".join(f"{printable(k)}: {t}" for k, t in checked.outputs.items())
    config = {
        k: (
            v.as_int()
            if isinstance(v, Expr) and v.as_int() is not None
            else str(v)
            if isinstance(v, Expr)
            else v
        )
        for k, v in checked.env.items()
    }
    summary = [
        f"Inputs (per sample, channels first): {inputs_doc}.",
        f"Outputs: {outputs_doc}.",
        f"Parameters: {checked.totals['params']} trainable, {checked.totals['state']} state.",
        f"apply(params, state, {args}, train=False, key=None) -> (outputs, new_state); "
        "jit it as a whole.",
    ]
    wrapped = "\n".join(textwrap.fill(p, layout.WIDTH, break_on_hyphens=False) for p in summary)
    low.runtime |= {"init_table", "unflatten"}
    runtime = source_for(low.runtime)
    header = f'''"""{printable(model.name)}: generated by lbdl from {spec_file}.

Edit the spec, not this file.

{wrapped}
"""

{_standard_imports(runtime)}

import jax
import jax.numpy as jnp
import numpy as np

{chr(10).join(layout.statement("CONFIG = " + layout.literal(config)))}
COMPUTE = {compute}
'''
    init_fn = '''def init(key):
    """Fresh (params, state), eagerly: no compilation of the whole model is needed."""
    return unflatten(init_table(key, PARAMS)), unflatten(init_table(key, STATE))'''
    apply_doc = (
        '    """The model on a batch: a leading axis on every input; '
        'returns (outputs, new state)."""'
    )
    decode_keys = ", pos=0, context=0" if decode else ""
    head = layout.statement(
        f"def apply(params, state, {args}, *, train=False, key=None{decode_keys}):"
    )
    unread = _unread_arguments("\n".join([*head, apply_doc, *body]))
    if unread:  # every apply has the same signature, so a model may not read all of it
        body = [f"    del {', '.join(unread)}  # the common signature; not read here", *body]
    apply_fn = "\n".join([*head, apply_doc, *layout.lines(body)])
    parts = [
        header,
        _table("PARAMS", params_rows, "path: (shape, initialiser, its fan-in, std or value)"),
        _table("STATE", state_rows, "path: (shape, initialiser, its value)"),
        roles_table.render(compiled),
        init_fn,
        *low.functions,
        apply_fn,
        "# -- runtime functions (copied from lbdl's runtime) --",
        runtime,
    ]
    return "\n\n\n".join(p.strip("\n") for p in parts) + "\n"
