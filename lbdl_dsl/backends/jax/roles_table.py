"""The generated module's ``ROLES`` table: each parameter axis's logical role, by path.

Sharding rules map roles to mesh axes (docs/scaling.md), so a user of the standalone module can
place its parameters on a mesh of their own without lbdl: ``ROLES["repeat_0/self_att_0/wq"]``
is ``("layers", "embed", "heads")``. Arrays and their order are those of ``PARAMS`` and
``STATE`` (the compiler's `sharding.arrays` walks the tree the same way); the stacked copies of
a ×N group add a leading ``layers`` axis.
"""

from __future__ import annotations

from lbdl_dsl.compiler.driver import Compiled
from lbdl_dsl.compiler.sharding import arrays


def render(compiled: Compiled) -> str:
    """``ROLES = {path: (role, ...)}`` as module text."""
    lines = [
        "# path: the logical role of each axis, which sharding rules map to mesh axes",
        "ROLES = {",
    ]
    assert compiled.checked is not None, "a module is generated from a checked spec"
    walked = list(arrays(compiled.checked.root))
    for arr in [a for a in walked if a.kind == "param"] + [a for a in walked if a.kind == "state"]:
        roles = ("layers",) * len(arr.stack) + arr.spec.roles
        lines.append(f"    {arr.path!r}: {roles!r},")
    lines.append("}")
    return "\n".join(lines)
