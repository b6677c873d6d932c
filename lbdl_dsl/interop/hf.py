"""A Hugging Face checkpoint folder as a spec and its parameters, in one step.

``from_pretrained(folder)`` reads ``config.json`` and the weights (``model.safetensors``, or a
sharded ``model.safetensors.index.json``; float32, float16 or bfloat16 storage, widened to
float32), writes the spec a person would write for that configuration (`spec_text`: the
library's blocks imported, the published configuration named in the header, the sizes of
``config.json`` as the model's parameters, the checkpoint's parameter count asserted), compiles
it, and fills its parameters through the family's import map (`maps`, `importer`), so that
every tensor is checked against the spec before one is read.

The families are a table (`hf_families.FAMILIES`): a ``model_type`` → the function that writes
its spec; a model_type known and refused is in `REFUSED`, with the reason.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.interop.hf_families import FAMILIES, REFUSED, Draft

__all__ = ["HfSpec", "from_pretrained", "read_config", "read_json", "spec_for", "write"]

MARK = "# Written by `lbdl from-hf`"
"""The line every spec `render` writes begins with: a file with it is from-hf's to replace."""


@dataclass(frozen=True)
class HfSpec:
    """What a checkpoint folder becomes: the spec's text, its name, the map that fills it, and
    the parameter count its ``assert`` holds."""

    folder: Path
    model_type: str
    name: str
    text: str
    family: str
    params: int
    tensors: int
    dtypes: tuple[str, ...] = ()  # the stored dtypes (safetensors' names: F32, F16, BF16)
    left_out: tuple[str, ...] = ()  # tensors the map leaves out (buffers, pre-training heads)


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file (config.json, generation_config.json) as an object, {} where
    there is none, or the refusal that names it."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LbdlError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise LbdlError(f"{path}: a JSON object was expected, got {type(data).__name__}")
    return data


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``config.json`` of a checkpoint folder, or the error that says what is missing."""
    path = Path(folder)
    if not path.is_dir():
        raise LbdlError(
            f"{path}: no such folder",
            hint="give the folder of a Hugging Face checkpoint (config.json, model.safetensors)",
        )
    config = path / "config.json"
    if not config.is_file():
        raise LbdlError(
            f"{path}: no config.json in this folder",
            hint="a Hugging Face checkpoint folder holds config.json beside its weights "
            "(save_pretrained writes both)",
        )
    data = read_json(config)
    if not isinstance(data.get("model_type"), str):
        raise LbdlError(
            f"{config}: no `model_type`",
            hint="transformers writes it in every config.json; is this a model's config?",
        )
    return data


def supported() -> str:
    return ", ".join(FAMILIES)


def spec_for(folder: str | os.PathLike[str]) -> HfSpec:
    """The spec of the checkpoint in ``folder``, from its config and its tensors' names and
    shapes (no tensor is read)."""
    from lbdl_dsl.interop.readers import open_checkpoint

    path = Path(folder)
    config = read_config(path)
    kind = config["model_type"]
    if kind in REFUSED:
        raise LbdlError(
            f"{path}: model_type `{kind}` is not supported yet: {REFUSED[kind]}",
            hint=f"the supported model types are {supported()}",
        )
    if kind not in FAMILIES:
        raise LbdlError(
            f"{path}: model_type `{kind}` is not supported",
            hint=f"the supported model types are {supported()}",
        )
    with open_checkpoint(path) as ckpt:
        shapes = dict(ckpt.shapes)
        dtypes = tuple(sorted(set(ckpt.dtypes.values())))
    draft = FAMILIES[kind](Config(config, path), shapes)
    counted = _counted(draft, shapes)
    name = identifier(path.name)
    total = sum(map(math.prod, counted.values()))
    text = render(draft, name, path, config, total)
    left_out = tuple(k for k in shapes if k not in counted)
    return HfSpec(path, kind, name, text, draft.family, total, len(counted), dtypes, left_out)


def _counted(draft: Draft, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The checkpoint's tensors the spec holds: all but those its map leaves out on purpose
    (buffers, heads the spec does not have). A tied tensor is stored once, so counted once."""
    from lbdl_dsl.interop.fit import bind, choose_variant
    from lbdl_dsl.interop.importer import resolve_family

    fam = choose_variant(resolve_family(draft.family), {}, shapes)
    left_out = set(bind(fam, shapes).ignored)
    return {k: v for k, v in shapes.items() if k not in left_out}


def identifier(text: str) -> str:
    """A model name from a folder's (``Qwen2-0.5B`` → ``qwen2_0_5b``)."""
    name = re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")
    return name if name and name[0].isalpha() else f"m_{name}"


def render(draft: Draft, name: str, folder: Path, config: dict[str, Any], params: int) -> str:
    """The spec's text: header, imports, the model with its sizes, the count asserted."""
    arch = ", ".join(config.get("architectures") or []) or config["model_type"]
    version = config.get("transformers_version")
    # the Hub's name where the config kept it (`Qwen/Qwen2-0.5B`), else the folder's
    published = str(config.get("_name_or_path") or "").strip() or folder.name
    header = [
        f"# {draft.title}: the Hugging Face checkpoint `{published}`",
        f"# ({arch}" + (f", saved by transformers {version})," if version else "),"),
        *draft.header,
        f"{MARK}: the sizes are its config.json's, and the assert holds the",
        "# checkpoint's parameter count (a tied tensor counted once).",
    ]
    sizes = ", ".join(f"{k}={_literal(v)}" for k, v in draft.sizes.items())
    lines = [*(f"# {h}" if not h.startswith("#") else h for h in header)]
    lines = [line.rstrip() for line in lines]
    lines += [f'import "{i}"' for i in draft.imports]
    if draft.imports:
        lines.append("")
    lines.append(f"model {name}({sizes}):")
    lines += [f"  {line}" for line in draft.body]
    lines.append(f"  assert params == {params:_}")
    return "\n".join(lines) + "\n"


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v:_}" if v >= 10_000 else str(v)
    return repr(float(v))


@dataclass(frozen=True)
class Config:
    """``config.json``'s values, each read with its key named in any error."""

    data: dict[str, Any]
    folder: Path

    def get(self, *keys: str, default: Any = None) -> Any:
        """The first of ``keys`` present (configs renamed some across versions)."""
        for k in keys:
            if self.data.get(k) is not None:
                return self.data[k]
        return default

    def whole(self, *keys: str, default: int | None = None) -> int:
        v = self.get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.error(f"`{keys[0]}` must be a whole number, got {v!r}")
        return v

    def number(self, *keys: str, default: float | None = None) -> float:
        v = self.get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(f"`{keys[0]}` must be a number, got {v!r}")
        return float(v)

    def _rope(self) -> tuple[str, dict[str, Any]]:
        """The rotary's type and parameters, from transformers 5's ``rope_parameters`` or 4's
        ``rope_scaling`` (with ``rope_theta`` beside it); where a config has both, transformers
        5 takes ``rope_scaling`` (`convert_rope_params_to_dict`), and so does this."""
        rope = self.data.get("rope_scaling") or self.data.get("rope_parameters") or {}
        if not isinstance(rope, dict):
            raise self.error(f"`rope_scaling` must be an object, got {rope!r}")
        return str(rope.get("rope_type", rope.get("type", "default"))), rope

    def rope_theta(self, default: float = 10_000.0, *, scalable: bool = False) -> float:
        """The rotary base. A scaled rotary is refused where the family's block cannot say it
        (not ``scalable``), and everywhere when it is not `linear`, `llama3` or `yarn` (dynamic,
        LongRoPE: another formula, or one that depends on the length): rotating
        otherwise would give other outputs than the checkpoint's."""
        kind, rope = self._rope()
        if kind != "default" and not (scalable and kind in ("linear", "llama3", "yarn")):
            known = "scales as rope_type `linear`, `llama3` or `yarn`, or not at all"
            raise self.error(
                f"rotary scaling `{kind}` is not supported for `{self.data.get('model_type')}`",
                f"lbdl's rope here {known if scalable else 'is not scaled (rope_type `default`)'}",
            )
        theta = rope.get("rope_theta")
        return float(theta if theta is not None else self.number("rope_theta", default=default))

    def rotary_fraction(self, default: float = 0.5) -> float:
        """The fraction of each head's features that rotate: ``partial_rotary_factor``, which
        transformers 5 writes inside ``rope_parameters`` and 4 beside it (read there, the
        top-level default of 0.5 would rotate another part of each head)."""
        _, rope = self._rope()
        v = rope.get("partial_rotary_factor", self.get("partial_rotary_factor", default=default))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise self.error(f"`partial_rotary_factor` must be in (0, 1], got {v!r}")
        return float(v)

    def rope_scaling(self) -> str:
        """The attention box's rotary scaling as hyper-parameters (`rscale=`...), or nothing;
        the config's type is checked by `rope_theta`."""
        kind, rope = self._rope()
        if kind == "default":
            return ""
        if kind == "yarn":
            return self._yarn(rope)
        text = f" rscale={kind} rfactor={self._scale_number(rope, 'factor')!r}"
        if kind == "llama3":
            keys = ("low_freq_factor", "high_freq_factor")
            low, high = (self._scale_number(rope, k) for k in keys)
            context = rope.get("original_max_position_embeddings")
            if isinstance(context, bool) or not isinstance(context, int) or context < 1:
                raise self.error(
                    "rope_scaling's `original_max_position_embeddings` must be a whole number, "
                    f"got {context!r}"
                )
            text += f" rlow={low!r} rhigh={high!r} rctx={context}"
        return text

    def _yarn(self, rope: dict[str, Any]) -> str:
        """YaRN's hyper-parameters, as transformers reads them (`_compute_yarn_parameters`):
        a factor left out is the context's growth (max_position_embeddings over the
        original's, DeepSeek's way); beta_fast and beta_slow default to 32 and 1; the factor
        on the rotated features is ``attention_factor``, else from ``mscale`` and
        ``mscale_all_dim``, else 0.1·ln(factor) + 1, the spec's own default (then not
        written)."""
        context = rope.get("original_max_position_embeddings")
        if isinstance(context, bool) or not isinstance(context, int) or context < 1:
            raise self.error(
                "rope_scaling's `original_max_position_embeddings` must be a whole number, "
                f"got {context!r}"
            )
        if rope.get("truncate", True) is not True:
            raise self.error(
                "rope_scaling's `truncate` is false",
                "lbdl's YaRN rounds its ramp's bounds to whole pairs, as truncate: true does",
            )
        if rope.get("factor") is None:
            factor = self.whole("max_position_embeddings") / context
        else:
            factor = self._scale_number(rope, "factor")
        fast = self._scale_number(rope, "beta_fast") if rope.get("beta_fast") else 32.0
        slow = self._scale_number(rope, "beta_slow") if rope.get("beta_slow") else 1.0

        def gain(m: float = 1.0) -> float:
            return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

        if rope.get("attention_factor") is not None:
            attn = self._scale_number(rope, "attention_factor")
        elif rope.get("mscale") and rope.get("mscale_all_dim"):
            m, m_all = (self._scale_number(rope, k) for k in ("mscale", "mscale_all_dim"))
            attn = gain(m) / gain(m_all)
        else:
            attn = gain()
        text = f" rscale=yarn rfactor={factor!r} rlow={slow!r} rhigh={fast!r} rctx={context}"
        return text + ("" if attn == gain() else f" rattn={attn!r}")

    def _scale_number(self, rope: dict[str, Any], key: str) -> float:
        v = rope.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise self.error(f"rope_scaling's `{key}` must be a positive number, got {v!r}")
        return float(v)

    def require(self, key: str, wanted: Any, why: str) -> None:
        """Refuse a config whose ``key`` is not ``wanted`` (a variant the spec cannot say)."""
        got = self.data.get(key, wanted)
        if got != wanted:
            raise self.error(f"`{key}` is {got!r}, and only {wanted!r} is supported", why)

    def error(self, message: str, hint: str | None = None) -> LbdlError:
        return LbdlError(f"{self.folder / 'config.json'}: {message}", hint=hint)


def from_pretrained(
    folder: str | os.PathLike[str], *, dtype: str = "float32"
) -> tuple[Any, Any, Any]:
    """``(model, params, state)`` of the checkpoint in ``folder``: the spec of `spec_for`,
    compiled, its parameters the checkpoint's tensors (widened to float32)."""
    spec = spec_for(folder)
    model, params, state = load(spec, dtype=dtype)
    return model, params, state


def load(spec: HfSpec, *, dtype: str = "float32") -> tuple[Any, Any, Any]:
    import jax.numpy as jnp

    from lbdl_dsl.backends.jax.runtime.module import unflatten
    from lbdl_dsl.interop.importer import import_weights

    model = compiled(spec, f"{spec.name}.lbdl", dtype)
    done = import_weights(model, spec.folder, spec.family)
    params = unflatten({k: jnp.asarray(v) for k, v in done.params.items()})
    state = unflatten({k: jnp.asarray(v) for k, v in done.state.items()})
    return model, params, state


def compiled(spec: HfSpec, file: str, dtype: str = "float32") -> Any:
    """The spec's `Model`. When its count is not the checkpoint's (the config says other sizes
    than the tensors have), the error is the import's, naming each tensor that does not fit
    and both shapes, rather than the assert's bare numbers."""
    from lbdl_dsl.backends.jax.model import model_of
    from lbdl_dsl.compiler.driver import CheckFailed
    from lbdl_dsl.interop.importer import import_weights

    try:
        return model_of(file, text=spec.text, dtype=dtype)
    except CheckFailed:
        lines = spec.text.splitlines()
        bare = "\n".join(x for x in lines if not x.strip().startswith("assert params"))
        model = model_of(file, text=bare + "\n", dtype=dtype)
        import_weights(model, spec.folder, spec.family)  # raises, naming the misfits
        raise


def class_names(config: dict[str, Any]) -> list[str]:
    """A classifier's class names, in order (``id2label``), unless they are transformers'
    placeholders (``LABEL_0``...)."""
    table = config.get("id2label") or {}
    try:
        names = [str(table[k]) for k in sorted(table, key=int)]
    except (TypeError, ValueError):
        return []
    return [] if all(n == f"LABEL_{i}" for i, n in enumerate(names)) else names


def write(
    folder: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
) -> tuple[HfSpec, list[Path]]:
    """``lbdl from-hf``: the spec written to ``output`` (default ``build/NAME.lbdl``), its
    parameters beside it (``NAME.safetensors``, read by ``--params``) and, for a classifier
    whose config names its classes, ``NAME.labels.txt`` (read by ``--labels``). Files of the
    user's are never replaced unless ``force`` (`_replaceable`)."""
    from lbdl_dsl.interop.importer import import_weights
    from lbdl_dsl.output import write_atomic

    spec = spec_for(folder)
    out = Path(output) if output is not None else Path("build") / f"{spec.name}.lbdl"
    if out.suffix != ".lbdl":
        raise LbdlError(f"-o {out}: a spec is written as .lbdl", hint="name it NAME.lbdl")
    params = out.with_suffix(".safetensors")
    if not force:
        _replaceable(out, [params, out.with_suffix(".labels.txt")])
    model = compiled(spec, str(out))
    import_weights(model, spec.folder, spec.family, output=params)
    written = [write_atomic(out, spec.text), params]
    names = class_names(read_config(spec.folder))
    if names:
        written.append(write_atomic(out.with_suffix(".labels.txt"), "\n".join(names) + "\n"))
    return spec, written


def _replaceable(out: Path, beside: list[Path]) -> None:
    """Refuse, before anything is written, to replace a spec from-hf did not write (a spec of
    the user's named by ``-o``), or files beside it that no from-hf spec stands with (the
    user's weights under the same name): three files are written, and only one was named."""
    try:
        ours = out.is_file() and MARK in out.read_text("utf-8", errors="replace")
    except OSError:
        ours = False
    if out.exists() and not ours:
        raise LbdlError(
            f"-o {out}: a file of that name exists, and lbdl from-hf did not write it",
            hint="choose another -o, or add --force to replace it",
        )
    taken = [p for p in beside if p.exists()]
    if taken and not ours:
        raise LbdlError(
            f"-o {out}: {taken[0]} exists beside it, and lbdl from-hf writes the "
            f"{'parameters' if taken[0].suffix == '.safetensors' else 'class names'} there",
            hint="choose another -o, or add --force to replace it",
        )
