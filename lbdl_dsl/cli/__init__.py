"""``lbdl VERB ...``: the one command line, one module per verb.

Each verb module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``
(and ``EXTRAS``, the optional extras it needs, when it needs any), and imports its heavy
dependencies (JAX, optax, orbax, Graphviz's runs) inside ``run`` only.
Only the verb asked for has its parser built, so ``lbdl --help`` and ``lbdl check`` need nothing
but the base install, and a verb whose extra is missing says which one (`common.guarded`).
``lbdl-compile`` is ``lbdl build`` under its first name (`compat`).
"""

from __future__ import annotations

import difflib
import importlib
import sys
from types import ModuleType

from lbdl_dsl.cli.common import Parser, declare_extras

# verb -> module under lbdl_dsl.cli; one line each, in the order `lbdl --help` lists them
VERBS: dict[str, str] = {
    "check": "check",
    "build": "build",
    "run": "run",
    "diff": "diff",
    "serve": "serve",
    "train": "train",
    "evaluate": "evaluate",
    "predict": "predict",
    "generate": "generate",
    "from-hf": "from_hf",
    "import": "import_",
    "export": "export",
    "launch": "launch",
}

DESCRIPTION = (
    "Neural architectures written as The Little Book of Deep Learning draws them: check, draw, "
    "lower to JAX, train, import and export."
)


def module_of(verb: str) -> ModuleType:
    return importlib.import_module(f"lbdl_dsl.cli.{VERBS[verb]}")


def overview() -> str:
    """``lbdl --help``: the usage and every verb with its one line."""
    width = max(map(len, VERBS))
    rows = "\n".join(f"  {verb:<{width}}  {module_of(verb).HELP}" for verb in VERBS)
    return (
        "usage: lbdl [--version] VERB [ARGS...]\n\n"
        f"{DESCRIPTION}\n\nverbs:\n{rows}\n\n"
        "`lbdl VERB --help` gives a verb's flags. Exit codes: 0 done, 1 an error in what you "
        "gave (with a hint), 3 a bug in lbdl.\n"
    )


def parser_of(verb: str, prog: str | None = None, version: bool = False) -> Parser:
    """``verb``'s own parser (what ``lbdl VERB --help`` prints; tests read its flags)."""
    module = module_of(verb)
    prog = prog or f"lbdl {verb}"
    parser = Parser(prog=prog, description=module.HELP)
    if version:
        from lbdl_dsl import __version__

        parser.add_argument("--version", action="version", version=f"{prog} {__version__}")
    module.add_arguments(parser)
    return parser


def verb_main(verb: str, argv: list[str], *, prog: str, version: bool = False) -> int:
    """Parse ``argv`` with ``verb``'s own parser and run it."""
    parser = parser_of(verb, prog, version)
    declare_extras(getattr(module_of(verb), "EXTRAS", ()))
    args = parser.parse_args(argv)
    args.parser = parser
    return int(module_of(verb).run(args))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(overview())
        return 0 if args else 1
    if args[0] == "--version":
        from lbdl_dsl import __version__

        print(f"lbdl {__version__}")
        return 0
    verb = args[0]
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, VERBS, n=1)
        hint = f"did you mean `lbdl {close[0]}`?" if close else "see `lbdl --help`"
        sys.stderr.write(
            f"usage: lbdl [--version] VERB [ARGS...]\nlbdl: error: unknown verb {verb!r} "
            f"(choose from {', '.join(VERBS)})\nhint: {hint}\n"
        )
        return 1
    return verb_main(verb, args[1:], prog=f"lbdl {verb}")
