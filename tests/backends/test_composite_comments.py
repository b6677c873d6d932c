"""Each composite box's generated comments quote its own inside, whatever was built before it:
the insides were once kept by the layer's name alone, so a second `self-att` with other
hyper-parameters was commented with the first one's lines."""

from __future__ import annotations

import re

import pytest

from lbdl_dsl.compiler import composite
from lbdl_dsl.compiler.driver import compile_spec

SPEC = """model twice(D=32):
  input X: 8×D
  self-att h=4 kv=1
  self-att h=4
  output Y
"""


def test_two_insides_of_one_layer_are_two_files() -> None:
    compile_spec(SPEC, file="twice.lbdl")
    insides = [f for f in composite.SOURCES if composite.shown_name(f) == "self-att"]
    texts = {composite.SOURCES[f] for f in insides}
    assert len(insides) == len(texts) >= 2


def test_each_box_s_comments_quote_its_own_inside() -> None:
    pytest.importorskip("jax")
    from lbdl_dsl.backends.jax.codegen import generate

    code = generate(compile_spec(SPEC, file="twice.lbdl"))
    boxes = re.split(r"# twice\.lbdl:\d+: ", code)[1:]  # each box's comment, then its inside's
    first, second = boxes[0], boxes[1]
    mha = re.compile(r"# self-att:\d+: mha [^\n]*")
    assert "kv=kv" in mha.search(first).group(0)  # type: ignore[union-attr]
    assert "kv=kv" not in mha.search(second).group(0)  # type: ignore[union-attr]
    assert "self-att@" not in code  # the digest is the file's name, never shown
