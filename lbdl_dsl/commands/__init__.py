"""``lbdl VERB ...``: one module per verb, imported only when its verb is asked for.

Each verb module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Keeping the table of verbs here, and each verb in a file of its own, means ``lbdl check`` never
imports what ``lbdl train`` needs (JAX, optax, orbax), so it stays as fast as ``lbdl-compile
--check``.
"""

from __future__ import annotations

# verb -> module under lbdl_dsl.commands; one line each, in the order `lbdl --help` lists them
VERBS: dict[str, str] = {
    "check": "check",
    "build": "build",
    "diff": "diff",
    "train": "train",
    "import": "import_",
    "export": "export",
    "launch": "launch",
    "generate": "generate",
}
