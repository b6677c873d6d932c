"""A spec cannot steer the generated code: hostile names become safe, unique identifiers.

The language's names may be Python keywords, builtins, our generated module's own names, dunder
names or any unicode letters. Whatever they are, the emitted module must parse, must not contain
them raw as identifiers where they would mean something else, and must still compute.
"""

from __future__ import annotations

import ast
import keyword

import jax
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.layers import lookup

HOSTILE = [
    *keyword.kwlist[3:],  # skip False/None/True, which the language reads as booleans
    "print",
    "eval",
    "exec",
    "__import__",
    "open",
    "__builtins__",
    "globals",
    "jax",
    "jnp",
    "np",
    "p",
    "s",
    "ns",
    "xs",
    "key",
    "train",
    "params",
    "state",
    "init",
    "apply",
    "CONFIG",
    "PARAMS",
    "STATE",
    "COMPUTE",
    "relu",
    "conv",
    "dense",
    "fold",
    "unflatten",
    "init_table",
    "x",
    "h",
    "t",
    "resblock",
    "Ŷ",
    "π",
    "ẞ",
    "аpply",  # the last has a Cyrillic а
    "_",
    "__",
    "__class__",
    "x1",
]

# the language's own keywords are refused by its parser, as `class` is by Python's
LBDL_KEYWORDS = {
    "input",
    "output",
    "from",
    "assert",
    "import",
    "block",
    "model",
    "on",
    "residual",
    "shortcut",
}
names = st.sampled_from([n for n in HOSTILE if n.isidentifier() and n not in LBDL_KEYWORDS])


def spec_text(a: str, b: str, block: str, param: str) -> str:
    return f"""
block {block}({param}=2) on C×H:
  fc  C×H
  -> {b}
  relu
  +({b})

model m:
  input {a}: 4×3
  {block} {param}=3
  -> {b}
  fc  4×3
  +( {b} )
  output {a}2
"""


def _shadowed_globals(source: str) -> set[str]:
    """Locals of any function that shadow a module-level name (an import, a function, a table).

    That is how a spec's name could change what generated code means: a tensor called `relu`
    or `jnp` would replace the function or the module the code calls.
    """
    tree = ast.parse(source)
    module_names = {
        a.asname or a.name.split(".")[0]
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    module_names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    module_names |= {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    shadowed: set[str] = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        local = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        local |= {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        local |= {n.name for n in ast.walk(fn) if isinstance(n, ast.FunctionDef) and n is not fn}
        shadowed |= local & module_names
    return shadowed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=names, b=names, block=names, param=names)
def test_hostile_names_give_safe_code(a, b, block, param):
    text = spec_text(a, b, block, param)
    if len({a, b, f"{a}2", block, param}) < 5 or lookup(block) is not None:
        return  # the language itself refuses these (duplicates, a block named like a layer)
    if "x1" in (block, param) or (block == "x" and param[:1].isupper()):
        # `x` before a digit, a capital or `(` reads as `×` (docs/language.md): after a
        # layer's name `x1` is `×1`, and a call `x CONFIG=3` of a block named `x` is `×CONFIG`
        return
    source = generate(compile_spec(text, file="hostile.lbdl"))
    tree = ast.parse(source)  # it parses
    assert tree is not None
    assert not _shadowed_globals(source)  # and keywords cannot be identifiers: it parsed
    namespace: dict = {}
    exec(compile(source, "<hostile>", "exec"), namespace)  # noqa: S102 - our own output
    params, state = namespace["init"](jax.random.key(0))
    x = jax.numpy.ones((2, 4, 3))
    out, _ = namespace["apply"](params, state, x)
    assert out.shape == (2, 4, 3)


def test_spec_comments_cannot_break_out_of_generated_comments():
    text = 'model m:\n  input X: 4\n  relu   # """ ; import os ; os.system("x") \\\n  output Y\n'
    source = generate(compile_spec(text, file="comment.lbdl"))
    tree = ast.parse(source)
    calls = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    assert "system" not in calls

    def imports(tree: ast.Module) -> list[str]:
        return [
            ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
        ]

    # the comment's `import os` made no statement: the imports are those of the same spec
    # without it (the header's, `os` among them for init's threads)
    clean = generate(compile_spec(text.split("#")[0] + "\n  output Y\n", file="comment.lbdl"))
    assert imports(tree) == imports(ast.parse(clean))
