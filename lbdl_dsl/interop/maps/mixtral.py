"""Mixtral (Hugging Face's ``MixtralForCausalLM``) into specs/mixtral-8x7b.lbdl.

The spec names its boxes (``-> attn``, and ``-> norm``, ``-> moe`` inside the residual of the
feed-forward half), so the paths are the ones its header documents, per layer stacked over
``×N``: the attention half as LLaMA's (``repeat_0/attn/ln/scale``,
``repeat_0/attn/att/w{q,k,v,o}``: `maps.llama` says why q and k are taken as stored and why
grouped-query k/v need nothing more), then ``repeat_0/residual_0/norm/scale`` and the experts'
``repeat_0/residual_0/moe/{router,gate,up,down}``; the final ``rmsnorm_0/scale`` and the
untied output layer ``fc_0/w``. Nothing has a bias.

Two layouts of the experts are read, each a variant; the importer takes the one whose names
the checkpoint has:

- **Each expert apart** (`EXPERTS`): the released checkpoints on the Hub
  (``mistralai/Mixtral-8x7B-v0.1``...), and what transformers 5's ``save_pretrained`` still
  writes by default. Per layer i, ``block_sparse_moe.gate.weight`` ``(E, D)`` is the router; per
  expert j, ``experts.{j}.w1.weight`` ``(F, D)`` the gate projection (the one under SiLU),
  ``w3`` ``(F, D)`` the up projection, ``w2`` ``(D, F)`` the down projection. Each is a
  PyTorch ``Linear``, ``(out, in)``, transposed to our ``(in, out)``, and stacked layer-major:
  ``moe/gate[i, j]`` is layer i's expert j, our ``(N, E, D, F)``.
- **Fused** (`FUSED`): the state dict transformers 5 holds in memory (and writes with
  ``save_pretrained(save_original_format=False)``). Per layer, ``mlp.gate.weight`` ``(E, D)``
  is the router; ``mlp.experts.gate_up_proj`` ``(E, 2F, D)`` holds every expert's w1 then w3
  along its second axis, split in two and each ``(E, F, D)`` transposed to ``(E, D, F)``;
  ``mlp.experts.down_proj`` ``(E, D, F)`` is transposed to ``(E, F, D)``.

The router: Hugging Face's scores are ``x @ gate.weight.T``, ours ``x @ router`` with
``router`` ``(D, E)``, so it is transposed; both take the softmax over the E scores, keep the
top k and renormalise their weights to sum to one. Neither drops a token: our `moe` bounds its
experts' buffers only where a spec asks for a capacity (`cap=`), and then only in training,
where an expert chosen by more than ⌈cap·k·tokens/E⌉ tokens drops the rest; after an import
into such a spec with cap under E/k, the importer says so. The layers' load-balancing losses (the
state ``moe/aux``) are computed, not read: they start at 0.

ε (1e-5) and θ (1e6) are the spec's, the released model's config values.
"""

from dataclasses import replace
from typing import Any

from lbdl_dsl.compiler.instance import LayerInst
from lbdl_dsl.core.layers.moe import MoeAttrs
from lbdl_dsl.interop.layout import FamilyMap, Rule, split, transpose
from lbdl_dsl.interop.maps.llama import ATTENTION, HEAD, IGNORE, T, X

MOE = "repeat_0/residual_0/"
SWAP = (transpose(0, 2, 1),)  # the last two axes of a fused (E, out, in) tensor
EXPERT = X + "block_sparse_moe.experts.{j}."
NORM = Rule(X + "post_attention_layernorm.weight", MOE + "norm/scale")


def drops(model: Any) -> str:
    """What to say after an import into a spec whose experts may drop tokens in training (a
    capacity factor under E/k), which transformers' Mixtral never does."""
    for path, inst, _ in model.checked.walk():
        a = inst.attrs if isinstance(inst, LayerInst) else None  # a mixture's record
        if not isinstance(a, MoeAttrs) or a.capacity is None:
            continue
        if a.capacity * a.k < a.experts:
            return (
                f"transformers' Mixtral drops no token, where in training `{'/'.join(path)}` "
                f"keeps at most ⌈{a.capacity:g}·{a.k}·tokens/{a.experts}⌉ tokens of a batch per "
                f"expert (evaluation routes every token; drop `cap=` or make it "
                f"{a.experts / a.k:g} or more to train as transformers computes)"
            )
    return ""


EXPERTS = FamilyMap(
    name="mixtral",
    doc="Mixtral (Hugging Face MixtralForCausalLM)",
    spec="specs/mixtral-8x7b.lbdl",
    prefixes=("model.",),
    ignore=IGNORE,
    inner="experts",
    computed=("{*}moe/aux",),
    sizes=(
        "Mixtral's config names the experts num_local_experts (E), those active per token "
        "num_experts_per_tok (K), their hidden size intermediate_size (F), the key/value "
        "heads num_key_value_heads (KV)"
    ),
    note=drops,
    rules=(
        *ATTENTION,
        NORM,
        Rule(X + "block_sparse_moe.gate.weight", MOE + "moe/router", T),
        Rule(EXPERT + "w1.weight", MOE + "moe/gate", T),
        Rule(EXPERT + "w3.weight", MOE + "moe/up", T),
        Rule(EXPERT + "w2.weight", MOE + "moe/down", T),
        *HEAD,
    ),
)

FUSED = replace(
    EXPERTS,
    rules=(
        *ATTENTION,
        NORM,
        Rule(X + "mlp.gate.weight", MOE + "moe/router", T),
        Rule(
            X + "mlp.experts.gate_up_proj", (MOE + "moe/gate", MOE + "moe/up"), (split(2, 1), *SWAP)
        ),
        Rule(X + "mlp.experts.down_proj", MOE + "moe/down", SWAP),
        *HEAD,
    ),
)

VARIANTS = (EXPERTS, FUSED)
