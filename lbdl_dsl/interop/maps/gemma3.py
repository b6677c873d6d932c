"""Gemma 3's text model (Hugging Face's ``Gemma3ForCausalLM``, ``model_type: gemma3_text``)
into the spec ``lbdl from-hf`` writes: a ×G group of six layers, five through a sliding
window (``-> att0`` ... ``-> att4``, with ``-> mlp0`` ...) and a sixth over every key
(``-> att5``, ``-> mlp5``), as Gemma 3's layers go; then, where the layer count is not a
multiple of six, a ×R group of the sliding layers left over (``-> att``, ``-> mlp``).

Layer 6i + k fills copy i of the first group's k-th pair (``{6i+k<S}``, S the first layer
left over); layer S + i copy i of the second group's (``{i+S}``). S depends on the model, so
the map is named with it: ``--map gemma3@30`` for a model of 34 layers (30 in groups, 4 left
over); ``--map gemma3`` for a multiple of six. Each layer's norms and projections are Gemma
2's (`maps.gemma2`), and its ``q_norm``/``k_norm`` (read as stored: the spec's gains are
1 + w, `offset=1`) are the attention's ``qn``/``kn``.
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule
from lbdl_dsl.interop.maps.gemma2 import layer
from lbdl_dsl.interop.maps.llama import IGNORE, T

PATTERN = 6  # five sliding layers, then a full one (transformers' sliding_window_pattern)


def _layer(index: str, att: str, mlp: str, group: str, biased: bool) -> tuple[Rule, ...]:
    x, at = f"layers.{{{index}}}.self_attn.", f"{group}/{att}/att/"
    norms = (Rule(x + "q_norm.weight", at + "qn"), Rule(x + "k_norm.weight", at + "kn"))
    biases = tuple(Rule(x + f"{n}_proj.bias", at + f"b{n}") for n in "qkvo") if biased else ()
    return (*layer(index, att, mlp, group), *norms, *biases)


def _map(left: int | None, biased: bool) -> FamilyMap:
    end = f"<{left}" if left else ""
    rules: list[Rule] = [Rule("embed_tokens.weight", "embed_0/table")]
    for k in range(PATTERN):
        rules += _layer(f"{PATTERN}i+{k}{end}", f"att{k}", f"mlp{k}", "repeat_0", biased)
    if left:
        rules += _layer(f"i+{left}", "att", "mlp", "repeat_1", biased)
    rules += [Rule("norm.weight", "rmsnorm_0/scale"), Rule("lm_head.weight", "fc_0/w", T)]
    return FamilyMap(
        name="gemma3" + (f"@{left}" if left else ""),
        doc="Gemma 3's text model (Hugging Face Gemma3ForCausalLM)"
        + (", with attention_bias" if biased else ""),
        spec="lbdl from-hf (a ×G group of five sliding layers and a full one)",
        prefixes=("model.", "model.language_model.", "language_model.model."),
        ignore=IGNORE,
        sizes="Gemma 3's layers come in groups of six; name the first layer left over "
        "after them: --map gemma3@S",
        rules=tuple(rules),
    )


def build(left: int | None = None) -> tuple[FamilyMap, ...]:
    """The map of a model whose layers from ``left`` on are left over from the groups of
    six (None: none are), and its variant with biases on the four projections."""
    return (_map(left, False), _map(left, True))
