"""Gemma 2 (Hugging Face's ``Gemma2ForCausalLM``) into the spec ``lbdl from-hf`` writes: a
×N/2 group of two layers, the first through a sliding window (``-> local``, ``-> local_mlp``),
the second over every key (``-> attn``, ``-> mlp``), as Gemma 2's layers alternate.

Reference layer 2i fills copy i of the first pair's boxes, layer 2i + 1 copy i of the second's
(``{2i}``, ``{2i+1}``). Each half of a layer has two RMSNorms, both read as stored (the spec's
``offset=1`` makes the gain 1 + w, as Gemma's): ``input_layernorm`` and
``post_attention_layernorm`` are the attention box's ``ln`` and ``pn``,
``pre_feedforward_layernorm`` and ``post_feedforward_layernorm`` the feed-forward box's. The
projections are PyTorch ``Linear``s, transposed (`maps.llama` says why q and k need nothing
more). The output layer is tied to the embedding in the released models.
"""

from dataclasses import replace

from lbdl_dsl.interop.layout import FamilyMap, Rule
from lbdl_dsl.interop.maps.llama import IGNORE, T

FFW = ("gate", "up", "down")


def layer(index: str, att: str, mlp: str, group: str = "repeat_0") -> tuple[Rule, ...]:
    """The rules of reference layer ``index`` (a pattern's index: ``2i``, ``6i+5<30``) into
    the attention box ``att`` and the feed-forward box ``mlp`` of ``group``: each half's two
    norms, the projections transposed."""
    x, at, ff = f"layers.{{{index}}}.", f"{group}/{att}/", f"{group}/{mlp}/"
    return (
        Rule(x + "input_layernorm.weight", at + "ln/scale"),
        *(Rule(x + f"self_attn.{n}_proj.weight", at + f"att/w{n}", T) for n in "qkvo"),
        Rule(x + "post_attention_layernorm.weight", at + "pn/scale"),
        Rule(x + "pre_feedforward_layernorm.weight", ff + "ln/scale"),
        *(Rule(x + f"mlp.{n}_proj.weight", ff + f"{n}/w", T) for n in FFW),
        Rule(x + "post_feedforward_layernorm.weight", ff + "pn/scale"),
    )


MAP = FamilyMap(
    name="gemma2",
    doc="Gemma 2 (Hugging Face Gemma2ForCausalLM)",
    spec="lbdl from-hf (a ×N/2 group of a sliding and a full layer), specs/gemma2-9b.lbdl",
    prefixes=("model.",),
    ignore=IGNORE,
    sizes="Gemma 2's layers come in pairs (a sliding window, then full attention): N is even",
    rules=(
        Rule("embed_tokens.weight", "embed_0/table"),
        *layer("2i", "local", "local_mlp"),
        *layer("2i+1", "attn", "mlp"),
        Rule("norm.weight", "rmsnorm_0/scale"),
        Rule("lm_head.weight", "fc_0/w", T),
    ),
)

BIASED = replace(
    MAP,
    doc="Gemma 2 with attention_bias (on q_proj, k_proj, v_proj, o_proj)",
    rules=(
        *MAP.rules,
        *(
            Rule(f"layers.{{{i}}}.self_attn.{n}_proj.bias", f"repeat_0/{att}/att/b{n}")
            for i, att in (("2i", "local"), ("2i+1", "attn"))
            for n in "qkvo"
        ),
    ),
)

VARIANTS = (MAP, BIASED)
