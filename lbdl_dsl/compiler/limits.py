"""The documented limits on what a spec may ask for (docs/language.md, "Limits").

They exist so that any input, however hostile, is answered in bounded time and memory with a
clear error instead of a hang: a spec is untrusted text.
"""

MAX_SOURCE_BYTES = 4 * 1024 * 1024
"""A spec file larger than this is refused before parsing."""

MAX_NAME = 256
"""Characters in one name (a model, a block, a tensor, a parameter): Graphviz, file names and
generated code all carry it."""

MAX_NESTING = 64
"""Indentation levels (nested groups) and parenthesis depth in one expression."""

MAX_CALL_DEPTH = 64
"""Block calls nested inside block calls."""

MAX_IMPORTS = 256
"""Files reachable through imports from one spec."""

MAX_REPEAT = 1_000_000
"""The largest ×N a spec may write."""

MAX_EXPANDED_LAYERS = 200_000
"""Layers after every block call and ×N group is expanded (diagrams, unrolled code)."""

MAX_DIM = 2**62
"""The largest size any dimension, parameter count or cost may reach."""
