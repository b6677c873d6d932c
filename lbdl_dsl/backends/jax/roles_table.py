"""The generated module's ``ROLES`` table: each parameter axis's logical role, by path.

Sharding rules map roles to mesh axes (docs/scaling.md), so a user of the standalone module can
place its parameters on a mesh of their own without lbdl:
``ROLES["repeat_0/tlayer_0/self_att_0/att/wq"]`` is ``("layers", "embed", "heads")``. The roles
are those ``--shard`` reads (`compiler.roles.logical_roles`: a feed-forward pair's hidden width
is ``mlp``); the paths are ``PARAMS``'s, then ``STATE``'s.
"""

from __future__ import annotations

from lbdl_dsl.backends.jax import layout, storage
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.roles import logical_roles


def render(compiled: Checked) -> str:
    """``ROLES = {path: (role, ...)}`` as module text, laid out like the other tables."""
    assert compiled is not None, "a module is generated from a checked spec"
    doc = "# path: the logical role of each axis, which sharding rules map to mesh axes"
    root = compiled.root
    roles = logical_roles(root, storage.per_copy)
    walked = list(storage.stored(root))
    order = [a.path for a in walked if a.trainable] + [a.path for a in walked if not a.trainable]
    if not roles:
        return f"{doc}\nROLES = {{}}"
    lines = [doc, "ROLES = {"]
    for path in order:
        lines += layout.entry(layout.quote(path), layout.literal(roles[path]), "    ")
    lines.append("}")
    return "\n".join(lines)
