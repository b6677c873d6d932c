"""``lbdl-compile``: the first command line, kept as a thin alias of ``lbdl build``.

Same flags, same output, same exit codes: ``lbdl-compile SPEC --check`` is ``lbdl check SPEC``
and ``lbdl-compile SPEC -o DIR`` is ``lbdl build SPEC -o DIR``, so nothing written against it
breaks.
"""

from __future__ import annotations

import sys

from lbdl_dsl.cli import verb_main


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return verb_main("build", args, prog="lbdl-compile", version=True)


if __name__ == "__main__":
    sys.exit(main())
