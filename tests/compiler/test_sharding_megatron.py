"""Megatron's split of gated feed-forward blocks and language-model heads, and the ``ep`` preset.

LLaMA's per-device parameters under ``tp`` must be Megatron's: every weight matrix (attention,
gate, up, down), the embedding and the head divided by the tensor size, the norms whole,
computed here from the published shapes, not from the pass.
"""

from __future__ import annotations

from math import prod
from pathlib import Path

import pytest

import lbdl_dsl
from lbdl_dsl.compiler.roles import logical_roles
from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve

REPO = Path(__file__).resolve().parents[2]


def _layout(spec: str, mesh_text: str, words: list[str], **sizes):
    model = lbdl_dsl.compile(REPO / "specs" / f"{spec}.lbdl", **sizes)
    mesh = parse_mesh(mesh_text)
    return model, resolve(model.checked, mesh, parse_rules(words, mesh))


def _per_device(layout) -> int:
    return sum(prod(d.as_int() for d in p.shape) // p.pieces for p in layout.params.values())


@pytest.mark.parametrize("t", [2, 8])
def test_llama2_7b_under_tp_holds_megatrons_share_per_device(t: int) -> None:
    n, d, f, v = 32, 4096, 11008, 32000
    _, layout = _layout("llama2-7b", f"tensor={t}", ["tp"])
    matrices = n * (4 * d * d + 3 * d * f) + 2 * v * d  # attention, gated FFN, embed, head
    norms = (2 * n + 1) * d
    assert _per_device(layout) == matrices // t + norms


@pytest.mark.parametrize("spec", ["llama2-7b", "mistral-7b"])
def test_gated_ffn_is_column_column_then_row(spec: str) -> None:
    sizes = {"N": 2, "D": 64, "H": 4, "V": 128} | ({"KV": 2} if spec == "mistral-7b" else {})
    model, layout = _layout(spec, "tensor=2", ["tp"], **sizes)
    roles = logical_roles(model.checked.root)
    ffn = {
        p.rsplit("/", 2)[-2]: r[-2:] for p, r in roles.items() if "/mlp/" in p and p.endswith("/w")
    }
    assert ffn == {
        "gate": ("in", "mlp"),
        "up": ("in", "mlp"),
        "down": ("mlp", "out"),
    }
    for path, placement in layout.params.items():
        if "/mlp/" in path and path.endswith("/w"):
            assert placement.pieces == 2 and "tensor" in placement.spec


def test_mlp_on_tensor_is_accepted_for_llama() -> None:
    _, layout = _layout("llama2-7b", "tensor=2", ["mlp=tensor"], N=2, D=64, H=4, V=128)
    split = [p for p, a in layout.params.items() if a.pieces == 2]
    assert split and all("/mlp/" in p for p in split)


def test_a_plain_ffn_still_pairs_and_the_head_is_vocab() -> None:
    model, _ = _layout("gpt", "tensor=2", ["tp"], N=1, D=64, H=4, V=128)
    roles = logical_roles(model.checked.root)
    assert roles["repeat_0/tlayer_0/ffw_0/fc1/w"] == ("layers", "in", "mlp")
    assert roles["repeat_0/tlayer_0/ffw_0/fc2/w"] == ("layers", "mlp", "out")
    assert roles["fc_0/w"] == ("in", "vocab")


def test_mixtral_under_tp_splits_every_experts_width_and_ep_places_experts() -> None:
    sizes = {"N": 1, "D": 64, "H": 4, "KV": 2, "F": 128, "E": 8, "V": 128}
    _, tp = _layout("mixtral-8x7b", "tensor=2", ["tp"], **sizes)
    for name in ("gate", "up", "down"):
        assert tp.params[f"repeat_0/residual_0/moe/{name}"].pieces == 2
    _, ep = _layout("mixtral-8x7b", "data=2,experts=4", ["ep"], **sizes)
    assert ep.batch == ("data", "experts")
    for name in ("gate", "up", "down"):
        assert ep.params[f"repeat_0/residual_0/moe/{name}"].spec[:2] == (None, "experts")
    assert ep.params["embed_0/table"].pieces == 1
