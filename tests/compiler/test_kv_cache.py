"""The decoding cache's bytes, counted from the registry like the other memory figures (no JAX):
keys and values of every causal attention (kv heads only, at most the window), a recurrent
layer's carry, split under a mesh where tensor parallelism splits the kv heads."""

from __future__ import annotations

from pathlib import Path

import lbdl_dsl
from lbdl_dsl.cli import main
from lbdl_dsl.compiler import memory
from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve
from lbdl_dsl.core.symbolic import Expr, sym

SPECS = Path(__file__).resolve().parents[2] / "specs"


def cache(name: str, **sets):
    return memory.kv_cache(lbdl_dsl.check(str(SPECS / f"{name}.lbdl"), **sets))


def test_gpt2_keeps_keys_and_values_of_every_layer() -> None:
    c = cache("gpt2")
    assert c.per_token == Expr.lift(2 * 12 * 768 * 4)  # k and v, 12 layers, D=768, float32
    assert c.full == Expr.lift(2 * 12 * 768 * 4 * 1024) and c.context == Expr.lift(1024)


def test_grouped_query_heads_and_the_window_bound_it() -> None:
    c = cache("mistral-7b")
    assert c.per_token == Expr.lift(2 * 32 * 8 * 128 * 4)  # 8 kv heads of 128, not 32
    assert c.full == Expr.lift(2 * 32 * 8 * 128 * 4 * 4096)  # the window, whatever T
    llama = cache("llama2-7b")
    assert llama.full == llama.per_token * sym("T")


def test_a_recurrent_carry_does_not_grow() -> None:
    c = cache("lstm-lm")
    assert c.per_token == Expr() and c.fixed == Expr.lift(2 * 2 * 650 * 4)  # h, c; 2 layers


def test_models_that_do_not_generate_have_none() -> None:
    assert cache("resnet18") is None and cache("bert-base") is None


def test_a_mesh_splits_it_by_batch_and_kv_heads() -> None:
    checked = lbdl_dsl.check(str(SPECS / "gpt2.lbdl"))
    mesh = parse_mesh("data=2,tensor=4")
    layout = resolve(checked, mesh, parse_rules(["tp"], mesh))
    c = memory.kv_cache(checked, layout, batch=3)
    assert c.per_token == Expr.lift(2 * 12 * 768 * 4 * 3 // 4)


def test_check_prints_it(capsys) -> None:
    assert main(["check", str(SPECS / "gpt2.lbdl")]) == 0
    out = capsys.readouterr().out
    assert "kv cache 72.0 KiB per token, 72.0 MiB at the full context of 1024" in out
