"""``lbdl generate SPEC --params P|RUN_DIR|HF_DIR --prompt TEXT``: text from a causal language
model, with a KV cache (`backends/jax/decode.py`), streamed to the terminal as it is made.

Where the parameters come from decides the rest:
- a run folder of `lbdl train` (``run.json``): its ``--set`` values, its ``params.safetensors``
  and, for a character model, its vocabulary; the length it was trained on is the context;
- a Hugging Face folder (``config.json``): `lbdl_dsl.interop.hf.from_pretrained` and its
  ``tokenizer.json``; a SPEC given beside it must have the checkpoint's parameters;
- a parameters file (``.safetensors``, ``.npz``): the SPEC with ``--set``, and ``--tokenizer``.

``--json`` prints one object instead: the prompt's and the new ids, the new text and each new
token's log-probability under the model.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbdl_dsl.cli import common

EXTRAS = ("jax", "text")
HELP = "write text with a causal language model (a run folder, a checkpoint, a params file)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", help="the .lbdl file (optional with a run or HF folder)")
    p.add_argument("--set", nargs="+", default=[], metavar="K=V", help="override parameters")
    p.add_argument(
        "--params",
        required=True,
        metavar="P|RUN_DIR|HF_DIR",
        help="parameters: a .safetensors/.npz file, a run folder of `lbdl train`, or a "
        "Hugging Face checkpoint folder",
    )
    p.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue")
    p.add_argument("--max-new", type=int, default=64, metavar="N", help="new tokens (64)")
    p.add_argument("--tokenizer", metavar="FILE", help="a tokenizer.json (default: the folder's)")
    p.add_argument("--greedy", action="store_true", help="the most likely token each time")
    p.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (1.0)")
    p.add_argument("--top-k", type=int, metavar="K", help="draw among the K most likely (all)")
    p.add_argument("--top-p", type=float, metavar="P", help="draw within the mass P (1.0)")
    p.add_argument("--seed", type=int, default=0, help="the random numbers of sampling (0)")
    p.add_argument("--json", action="store_true", help="print ids, text and log-probabilities")


def run(args: argparse.Namespace) -> int:
    def work() -> int:
        from lbdl_dsl.core.errors import LbdlError

        if args.greedy and any(v is not None for v in (args.temperature, args.top_k, args.top_p)):
            raise LbdlError(
                "--greedy takes the most likely token: it has no --temperature, --top-k, --top-p"
            )
        _check_flags(args)
        overrides = common.parse_overrides(args.set, args.parser)
        return generate(args, overrides)

    return common.guarded(work, args.spec or args.params)


def _check_flags(args: argparse.Namespace) -> None:
    """Each number flag in its range, named as the user typed it (`Sampling` checks its
    fields again, by their Python names, for `model.generate`)."""
    import math

    from lbdl_dsl.core.errors import LbdlError

    wrong = [
        ("--max-new", args.max_new, args.max_new < 0, "a whole number ≥ 0"),
        ("--top-k", args.top_k, args.top_k is not None and args.top_k < 0, "a whole number ≥ 0"),
        (
            "--temperature",
            args.temperature,
            args.temperature is not None
            and not (args.temperature > 0 and math.isfinite(args.temperature)),
            "a positive number",
        ),
        (
            "--top-p",
            args.top_p,
            args.top_p is not None and not 0.0 < args.top_p <= 1.0,
            "a number in (0, 1]",
        ),
    ]
    for flag, value, bad, wanted in wrong:
        if bad:
            raise LbdlError(
                f"{flag} must be {wanted}, got {value}",
                hint="--greedy takes the likeliest token; --temperature 1 --top-k 0 --top-p 1 "
                "draw from the whole distribution"
                if flag != "--max-new"
                else "the number of tokens to write after the prompt",
            )


def generate(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    import jax  # noqa: F401  (a missing extra is `common.guarded`'s message)

    from lbdl_dsl.backends.jax.decode import Decoder, Sampling
    from lbdl_dsl.interop import text

    loaded = load(args.spec, Path(args.params), overrides, args.tokenizer)
    decoder = Decoder(loaded.model, limit=loaded.limit)
    tokenizer = loaded.tokenizer
    text.fit(tokenizer, decoder.plan.vocab)
    prompt = tokenizer.encode(args.prompt)
    if not prompt:
        from lbdl_dsl.core.errors import LbdlError

        raise LbdlError("the prompt has no tokens", hint="give --prompt some text")
    chosen = args.greedy or any(v is not None for v in (args.temperature, args.top_k, args.top_p))
    if not chosen and loaded.checkpoint is not None:  # as transformers' generate() would
        sampling, words = checkpoint_sampling(loaded.checkpoint)
        print(f"note: {words} (choose with --greedy or --temperature, --top-k, --top-p)",
              file=sys.stderr)  # fmt: skip
    else:
        sampling = Sampling(
            greedy=args.greedy,
            temperature=1.0 if args.temperature is None else args.temperature,
            top_k=args.top_k or 0,
            top_p=1.0 if args.top_p is None else args.top_p,
        )
    decoder.check_prompt(prompt)
    decoder.context(len(prompt) + args.max_new)  # refused here, before anything is printed
    stream = decoder.stream(loaded.params, prompt, args.max_new, sampling, args.seed, loaded.state)
    # the prefill runs before the prompt is echoed: a cache beyond the machine is refused with
    # nothing printed above the error
    first = next(stream, None)
    steps = itertools.chain([first] if first is not None else [], stream)
    new: list[int] = []
    logprobs: list[float] = []
    shown = ""
    # the new text is what decoding everything adds to the prompt's: a tokenizer may join a
    # token to the one before it (a word's leading space, half a character's bytes)
    before = tokenizer.decode(prompt)

    def continuation() -> str:
        return str(tokenizer.decode(prompt + new))[len(before) :]

    if not args.json:
        print(args.prompt, end="", flush=True)
    for token, logp, _ in steps:
        new.append(int(token[0]))
        logprobs.append(float(logp[0]))
        if not args.json:
            now = continuation()
            if not now.endswith("\ufffd"):  # half a character: wait for the rest
                print(now[len(shown) :], end="", flush=True)
                shown = now
        if new[-1] in loaded.stop:
            break
    written = continuation()
    if args.json:
        record = {
            "prompt": args.prompt,
            "prompt_ids": prompt,
            "ids": new,
            "text": written,
            "logprobs": [round(x, 6) for x in logprobs],
        }
        print(json.dumps(record, ensure_ascii=False))
    else:
        print(written[len(shown) :])
    return 0


@dataclass
class Loaded:
    """What generation reads: the model, its parameters and state, a tokenizer, the most
    positions to decode (a run's training length; None: the model's own), the ids that end
    the text (a checkpoint's end-of-sequence), and the checkpoint's folder, whose
    generation_config.json says how to choose tokens when no flag does."""

    model: Any
    params: Any
    state: Any
    tokenizer: Any
    limit: int | None = None
    stop: frozenset[int] = frozenset()
    checkpoint: Path | None = None  # a Hugging Face folder: its way of sampling is the default


def load(spec: str | None, where: Path, overrides: dict[str, Any], tokenizer: str | None) -> Loaded:
    from lbdl_dsl.core.errors import LbdlError
    from lbdl_dsl.interop import text

    if where.is_dir() and (where / "run.json").is_file():
        loaded = _from_run(spec, where, overrides)
    elif where.is_dir() and (where / "config.json").is_file():
        loaded = _from_hf(spec, where, overrides)
    elif where.is_dir():
        raise LbdlError(
            f"--params {where}: a folder without run.json (lbdl train) or config.json "
            "(a Hugging Face checkpoint)",
            hint="give a run folder, a checkpoint folder, or a parameters file with its SPEC",
        )
    elif not where.exists():
        raise LbdlError(f"--params {where}: no such file or folder", hint="check the path")
    else:
        if spec is None:
            raise LbdlError(f"--params {where}: a parameters file needs the SPEC it belongs to")
        model, limit = _compiled(spec, overrides)
        params, state = model.load(where)
        loaded = Loaded(model, params, state, None, limit)
    if tokenizer is not None:
        loaded.tokenizer = text.Pretrained(Path(tokenizer))
    if loaded.tokenizer is None:
        raise LbdlError(
            f"no tokenizer for {where}",
            hint="give --tokenizer tokenizer.json (a run folder of a text model has its own)",
        )
    return loaded


def _compiled(spec: str, overrides: dict[str, Any]) -> tuple[Any, int | None]:
    """The spec's model with the sequence's length left free (decoding changes it from call to
    call); a length given with --set is the most positions to decode."""
    import lbdl_dsl
    from lbdl_dsl.compiler import decoding
    from lbdl_dsl.compiler.driver import compile_spec

    seq = decoding.sequence_symbol(
        compile_spec(Path(spec), stop_after="build").program  # read as every spec is: guarded
    )
    limit = None
    if seq is not None and seq in overrides:
        limit = _length(seq, overrides.pop(seq))
    model = lbdl_dsl.compile(spec, **overrides)
    decoding.plan(model.checked)  # a model that cannot generate says so before any file is read
    return model, limit


def _length(symbol: str, value: Any) -> int:
    """``--set T=...`` (given, or a run's): the most positions to decode, a whole number ≥ 1."""
    import re

    from lbdl_dsl.core.errors import LbdlError

    text = str(value).replace("_", "")
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
        raise LbdlError(
            f"--set {symbol}={value}: {symbol} is the sequence's length, the most positions to "
            "decode: a whole number ≥ 1",
            hint=f"e.g. --set {symbol}=1024, or leave it out for the model's own limit",
        )
    return int(text)


def _from_run(spec: str | None, folder: Path, overrides: dict[str, Any]) -> Loaded:
    from lbdl_dsl.core.errors import LbdlError
    from lbdl_dsl.interop import text
    from lbdl_dsl.training.rundir import run_spec, spec_places, used_record

    record = used_record(folder)  # a damaged one is refused, naming what is wrong
    assert record is not None, "load() came here for the run.json it found"
    config = record["config"]
    named = config.get("spec")
    if spec is None:
        if not named:
            raise LbdlError(f"{folder}/run.json names no spec", hint="give the SPEC")
        found = run_spec(folder, record)
        if found is None:  # the run's spec, moved or renamed since
            tried = ", ".join(dict.fromkeys(str(p) for p in spec_places(folder, record)))
            raise LbdlError(
                f"{folder}/run.json: the run's spec {named} is not found (tried {tried})",
                hint=f"give the SPEC: lbdl generate SPEC --params {folder}",
            )
        spec = str(found)
    elif not Path(spec).is_file() and (folder.parent.parent / spec).is_file():
        spec = str(folder.parent.parent / spec)  # named from where `runs/` was made
    sets = config.get("overrides", {})
    try:
        model, limit = _compiled(spec, {**sets, **overrides})
    except LbdlError as exc:
        own = {p.resolve() for p in spec_places(folder, record)}
        if not sets or Path(spec).resolve() in own or "to set" not in exc.first.message:
            raise
        given = " ".join(f"{k}={v}" for k, v in sets.items())
        raise LbdlError(
            f"{spec} is not the spec of the run {folder} ({named}), and the run's "
            f"--set {given} (its run.json) does not fit it: {exc.first.message}",
            hint=f"leave the SPEC out to use the run's own: lbdl generate --params {folder}",
        ) from None
    params_file = folder / "params.safetensors"
    if not params_file.is_file():
        raise LbdlError(f"{folder} has no params.safetensors yet", hint="let the run finish")
    params, state = model.load(params_file)
    return Loaded(model, params, state, text.from_run(record, folder), limit)


def _from_hf(spec: str | None, folder: Path, overrides: dict[str, Any]) -> Loaded:
    from lbdl_dsl.core.errors import LbdlError
    from lbdl_dsl.interop import text

    try:
        from lbdl_dsl.interop.hf import from_pretrained
    except ImportError:
        raise LbdlError(
            f"--params {folder}: reading a Hugging Face folder needs `lbdl from-hf`",
            hint="or write its spec and parameters: lbdl import SPEC DIR --map FAMILY -o P",
        ) from None
    model, params, state = from_pretrained(folder)
    if spec is not None:
        mine, _ = _compiled(spec, overrides)
        _same_arrays(mine, model, folder)
        model = mine
    tokenizer = folder / "tokenizer.json"
    return Loaded(
        model,
        params,
        state,
        text.Pretrained(tokenizer) if tokenizer.is_file() else None,
        stop=_end_ids(folder),
        checkpoint=folder,
    )


def _same_arrays(mine: Any, theirs: Any, folder: Path) -> None:
    """Refuse a spec whose parameters are not the checkpoint's, naming the differences."""
    from lbdl_dsl.core.errors import LbdlError

    want = {k: tuple(v[0]) for k, v in mine.module["PARAMS"].items()}
    have = {k: tuple(v[0]) for k, v in theirs.module["PARAMS"].items()}
    wrong = [
        f"{k}: the spec has {want.get(k)}, the checkpoint {have.get(k)}"
        for k in sorted(want.keys() | have.keys())
        if want.get(k) != have.get(k)
    ]
    if wrong:
        raise LbdlError(
            f"the checkpoint in {folder} does not fit the spec: {len(wrong)} tensors differ: "
            + "; ".join(wrong[:5]),
            hint="write the checkpoint's own spec: lbdl from-hf DIR -o NAME.lbdl",
        )


def _end_ids(folder: Path) -> frozenset[int]:
    """The checkpoint's end-of-sequence ids (generation_config.json, else config.json)."""
    from lbdl_dsl.interop.hf import read_json

    for name in ("generation_config.json", "config.json"):
        eos = read_json(folder / name).get("eos_token_id")
        if eos is not None:
            ids = eos if isinstance(eos, list) else [eos]
            if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                return frozenset(ids)
    return frozenset()


IGNORED = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "num_beams": 1,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}
"""generation_config.json's other ways of choosing tokens, each with its value that changes
nothing: another value is said to be left out, never silently."""


def checkpoint_sampling(folder: Path) -> tuple[Any, str]:
    """How transformers' ``generate()`` chooses tokens for this checkpoint when told nothing:
    by its generation_config.json, whose absent keys are transformers' defaults (greedy
    unless ``do_sample``; then temperature 1.0, top-k 50, top-p 1.0). Returns the `Sampling`
    and the note's words."""
    from lbdl_dsl.backends.jax.decode import Sampling
    from lbdl_dsl.core.errors import ArgumentError, LbdlError
    from lbdl_dsl.interop.hf import read_json

    path = folder / "generation_config.json"
    config = read_json(path)
    unapplied = [
        f"{k} {config[k]}" for k, plain in IGNORED.items() if config.get(k, plain) != plain
    ]
    if unapplied:
        print(f"note: {path}'s {', '.join(unapplied)} not applied: lbdl generate samples or "
              "takes the likeliest token, nothing more", file=sys.stderr)  # fmt: skip
    if not config.get("do_sample", False):
        if "do_sample" in config:
            return Sampling(greedy=True), f"greedy, as {path} says"
        return Sampling(greedy=True), "greedy, as transformers' generate() is without do_sample"
    try:
        chosen = Sampling(
            temperature=float(config.get("temperature") or 1.0),
            top_k=int(config.get("top_k", 50) or 0),
            top_p=float(config.get("top_p") or 1.0),
        )
    except (ArgumentError, TypeError, ValueError) as exc:
        raise LbdlError(f"{path}: {exc}", hint="or choose with --greedy or --temperature") from None
    words = f"sampling at temperature {chosen.temperature:g}"
    words += f", top-k {chosen.top_k}" if chosen.top_k else ""
    words += f", top-p {chosen.top_p:g}" if chosen.top_p < 1.0 else ""
    return chosen, f"{words}, as {path} says"
