"""Text to token ids and back, for `lbdl generate`: a checkpoint's ``tokenizer.json`` through the
``tokenizers`` library (offline: the file is read, nothing is fetched), or the character
vocabulary `lbdl train` records in a run folder's ``run.json`` (``shakespeare``, a ``.txt``).

Both hold to one small protocol (`Tokenizer`): ``encode``, ``decode`` and ``size``, the number of
ids they may give, which must fit the model's vocabulary (`fit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lbdl_dsl.core.errors import LbdlError


class Tokenizer(Protocol):
    size: int
    where: str

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class Characters:
    """One token per character: the sorted characters of the training text (``run.json``'s
    ``data.vocab``)."""

    vocab: str
    where: str

    @property
    def size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        index = {c: i for i, c in enumerate(self.vocab)}
        missing = sorted({c for c in text if c not in index})
        if missing:
            shown = ", ".join(repr(c) for c in missing[:5])
            raise LbdlError(
                f"--prompt has characters the model never saw: {shown}",
                hint=f"the vocabulary is {self.where}'s {self.size} characters",
            )
        return [index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] if 0 <= i < len(self.vocab) else "\ufffd" for i in ids)


class Pretrained:
    """A ``tokenizer.json`` of the Hugging Face ``tokenizers`` library."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as Hf
        except ImportError:
            raise LbdlError(
                "reading tokenizer.json needs the tokenizers library",
                hint="pip install 'lbdl-dsl[text]'",
            ) from None
        try:
            self._tok: Any = Hf.from_file(str(path))
        except Exception as exc:  # the library's own error types, for a file that is not one
            raise LbdlError(
                f"{path}: not a tokenizer.json the tokenizers library reads: {exc}"
            ) from None
        self.size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self.where = str(path)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))


def from_run(record: dict[str, Any], folder: Path) -> Characters | None:
    """The character vocabulary a run folder's record holds, if its data was text."""
    vocab = (record.get("data") or {}).get("vocab")
    return Characters(vocab, f"{folder}/run.json") if isinstance(vocab, str) and vocab else None


def fit(tokenizer: Tokenizer, vocab: int) -> None:
    """Refuse a tokenizer whose ids do not all lie in the model's vocabulary."""
    if tokenizer.size > vocab:
        raise LbdlError(
            f"the tokenizer ({tokenizer.where}) has {tokenizer.size} tokens, more than the "
            f"model's vocabulary of {vocab}",
            hint="use the tokenizer the model was trained with, or --set V to its size",
        )
