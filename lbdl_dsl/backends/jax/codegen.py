"""The standalone JAX module of a checked model, as source text.

It imports only ``jax``, ``jax.numpy`` and ``numpy`` and reads like hand-written code: a header
naming the spec, a table of parameter shapes with an ``init(key)`` that splits its key once, one
function per block definition, a pure ``apply``, then the runtime functions it uses (copied from
`runtime.py`). Every box is one line preceded by its spec line and output shape (`lower.py`).
Initialisation is eager, array by array: it needs no compilation of the whole model.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from typing import Any

from lbdl_dsl.backends.jax import roles_table
from lbdl_dsl.backends.jax.lower import Fn, Lowerer, Var, printable
from lbdl_dsl.backends.jax.names import LOCAL_RESERVED, RESERVED, Namespace
from lbdl_dsl.backends.jax.runtime_source import available, bound_names, source_for
from lbdl_dsl.compiler.driver import Compiled
from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.core import cache
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers.base import Const, FanIn, Init, PSpec, Std, fmt_shape
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
    raise AssertionError(init)


def param_table(compiled: Compiled) -> tuple[list[tuple], list[tuple]]:
    """(path, shape, how, scale) for every parameter and state array, stacked for ×N groups."""
    params: list[tuple] = []
    state: list[tuple] = []

    def spec_row(path: str, spec: PSpec, stack: tuple[int, ...], inst: Inst) -> tuple:
        shape = []
        for d in spec.shape:
            v = d.as_int() if isinstance(d, Expr) else d
            if v is None:
                raise LbdlError(
                    f"the parameters of `{inst.node.op}` have the symbolic shape "
                    f"{fmt_shape(spec.shape)}",
                    inst.node.span,
                    hint=f"give {', '.join(sorted(d.free_symbols))} a value (--set) to build it",
                )
            shape.append(v)
        how, scale = init_row(spec.init)
        return (path, (*stack, *shape), how, scale)

    def visit(insts: list[Inst], prefix: str, stack: tuple[int, ...]) -> None:
        for inst in insts:
            here = f"{prefix}{inst.id}"
            for name, spec in inst.params.items():
                params.append(spec_row(f"{here}/{name}", spec, stack, inst))
            for name, spec in inst.state.items():
                state.append(spec_row(f"{here}/{name}", spec, stack, inst))
            visit(inst.body, f"{here}/", stack)
            visit(inst.shortcut, f"{here}/shortcut/", stack)
            for ci, cp in enumerate(inst.copies):
                sub = f"{here}/{ci}/" if len(inst.copies) > 1 else f"{here}/"
                visit(cp.body, sub, (*stack, cp.count.as_int()))

    visit(compiled.checked.root, "", ())
    return params, state


def _table(name: str, rows: list[tuple], doc: str) -> str:
    lines = [f"# {doc}", f"{name} = {{"]
    for path, shape, how, scale in rows:
        lines.append(f"    {path!r}: ({shape!r}, {how!r}, {scale!r}),")
    lines.append("}")
    return "\n".join(lines)


def _input_symbols(fn: Fn, inputs: list[tuple[str, Any]]) -> None:
    """Free input symbols (a sequence's T) read off the arrays, for shapes that need them."""
    for var, t in inputs:
        for axis, d in enumerate(t.shape):
            (name,) = d.free_symbols if len(d.free_symbols) == 1 else (None,)
            if name is not None and name not in fn.symbols and d == sym(name):
                fn.symbols[name] = fn.names(name)
                fn.line(f"{fn.symbols[name]} = {var}.shape[{axis + 1}]")


def generate(compiled: Compiled, *, unroll: bool = False, dtype: str = "float32") -> str:
    """The module's text for a checked model (``--emit py``)."""
    checked = compiled.checked
    program = compiled.program
    model = program.model
    graph = model.body
    names = Namespace(RESERVED | LOCAL_RESERVED | available() | bound_names())
    for block in sorted(program.blocks):
        names(block)  # block functions keep their spec names; nothing else may take them
    low = Lowerer(program, compiled.sources, names, unroll)
    apply_locals = low.local_names()
    fn = Fn(apply_locals, {})
    input_vars = []
    for nid in graph.inputs:
        node = graph.node(nid)
        input_vars.append((nid, apply_locals(node.name), checked.inputs[node.name]))
    _input_symbols(fn, [(v, t) for _, v, t in input_vars])
    compute = _DTYPES[dtype]
    if dtype != "float32":
        fn.line(f"params = jax.tree.map(lambda a: a.astype({compute}), params)")
        for _, var, t in input_vars:
            if t.dtype == "float":
                fn.line(f"{var} = {var}.astype({compute})")
    fn.line("p, s, ns = params, state, {}")
    env = {nid: Var(var, "cf", len(t.shape)) for nid, var, t in input_vars}
    keep = frozenset(nid for _, nid in graph.outputs)
    values = low.values(fn, checked.root, graph, env, "p", "s", "ns", apply_locals.fresh("x"), keep)
    outs = [values[nid] for _, nid in graph.outputs]
    results = []
    for (name, _), var in zip(graph.outputs, outs):
        var = low.convert(fn, var, "cf", reuse=False)
        cast = ".astype(jnp.float32)" if dtype != "float32" else ""
        results.append((name, f"{var.name}{cast}"))
    if dtype != "float32":
        fn.line("ns = jax.tree.map(lambda a: a.astype(jnp.float32), ns)")
    if len(results) == 1:
        fn.line(f"return {results[0][1]}, ns")
    else:
        items = ", ".join(f"{name!r}: {expr}" for name, expr in results)
        fn.line(f"return {{{items}}}, ns")
    args = ", ".join(v for _, v, _ in input_vars)
    params_rows, state_rows = param_table(compiled)
    spec_file = printable(compiled.file)
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
    header = f'''"""{printable(model.name)}: generated by lbdl from {spec_file}.

Edit the spec, not this file.

Inputs (per sample, channels first): {inputs_doc}.
Outputs: {outputs_doc}.
Parameters: {checked.totals["params"]} trainable, {checked.totals["state"]} state.
apply(params, state, {args}, train=False, key=None) -> (outputs, new_state); jit it as a whole.
"""

import jax
import jax.numpy as jnp
import numpy as np

CONFIG = {config!r}
COMPUTE = {compute}
'''
    init_fn = '''def init(key):
    """Fresh (params, state), eagerly: no compilation of the whole model is needed."""
    return unflatten(init_table(key, PARAMS)), unflatten(init_table(key, STATE))'''
    low.runtime |= {"init_table", "unflatten"}
    apply_doc = (
        f'    """The model, for a batch: {args} have a leading batch axis; returns '
        '(outputs, new state)."""'
    )
    apply_fn = "\n".join(
        [f"def apply(params, state, {args}, *, train=False, key=None):", apply_doc, *fn.lines]
    )
    parts = [
        header,
        _table("PARAMS", params_rows, "path: (shape, initialiser, its fan-in, std or value)"),
        _table("STATE", state_rows, "path: (shape, initialiser, its value)"),
        roles_table.render(compiled),
        init_fn,
        *low.functions,
        apply_fn,
        "# -- runtime functions (copied from lbdl's runtime) --",
        source_for(low.runtime),
    ]
    return format_source("\n\n\n".join(p.strip("\n") for p in parts) + "\n")


def format_source(text: str) -> str:
    """The module in ruff's standard format, so that it passes ``ruff format --check``.

    ruff (a dependency of the ``jax`` extra) is run with its defaults, ignoring any project
    configuration, so the bytes do not depend on where the module is written. Without ruff the
    text is returned as written, which is valid Python but not wrapped to 88 columns. Running
    ruff is a fifth of building GPT-2 (40 ms), so its answer for the same text and the same
    ruff is kept in the user's cache folder.
    """
    try:
        ruff = importlib.metadata.version("ruff")
    except importlib.metadata.PackageNotFoundError:
        return text
    name = cache.digest("ruff format", ruff, text) + ".py"
    cached = cache.read_text(name)
    if cached is not None:
        return cached
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--isolated", "--stdin-filename", "m.py", "-"],
            input=text.encode("utf-8"),
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return text
    if done.returncode != 0:
        return text
    formatted = done.stdout.decode("utf-8")
    cache.write_text(name, formatted)
    return formatted
