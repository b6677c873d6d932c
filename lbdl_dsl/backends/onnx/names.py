"""ASCII names for an ONNX graph's inputs, outputs and functions: what every runtime and
tool accepts as a name, and what a user can type (``Ŷ`` → ``Y_hat``, ``α`` → ``alpha``)."""

from __future__ import annotations

import re
import unicodedata

MARKS = {  # combining marks, as a name's suffix
    "COMBINING CIRCUMFLEX ACCENT": "hat",
    "COMBINING TILDE": "tilde",
    "COMBINING MACRON": "bar",
    "COMBINING DOT ABOVE": "dot",
    "COMBINING DIAERESIS": "ddot",
    "COMBINING ACUTE ACCENT": "acute",
    "COMBINING GRAVE ACCENT": "grave",
    "COMBINING RIGHT ARROW ABOVE": "vec",
}


def ascii_name(name: str) -> str:
    """``name`` in ASCII letters, digits and ``_/.-:``: a letter with a mark becomes the
    letter and the mark's name (``Ŷ`` → ``Y_hat``), a Greek letter its name, a super- or
    subscript digit the digit, anything else ``_``."""
    parts: list[str] = []
    for ch in unicodedata.normalize("NFD", name):
        if ch.isascii():
            parts.append(ch if re.match(r"[\w/.:-]", ch) else "_")
            continue
        what = unicodedata.name(ch, "")
        if what in MARKS:
            parts.append(f"_{MARKS[what]}")
        elif what.startswith(("GREEK SMALL LETTER ", "GREEK CAPITAL LETTER ")):
            letter = what.rsplit(" ", 1)[1].lower()
            parts.append(letter if "SMALL" in what else letter.capitalize())
        elif (digit := unicodedata.digit(ch, None)) is not None:
            parts.append(str(digit))
        elif what.startswith("MODIFIER LETTER CAPITAL "):
            parts.append(what.rsplit(" ", 1)[1])
        else:
            parts.append("_")
    return "".join(parts) or "_"


def ascii_names(names: list[str]) -> list[str]:
    """`ascii_name` of each, made distinct (``Y_hat``, ``Y_hat_1``) where two meet."""
    out: list[str] = []
    for name in names:
        base = fresh = ascii_name(name)
        n = 0
        while fresh in out:
            n += 1
            fresh = f"{base}_{n}"
        out.append(fresh)
    return out
