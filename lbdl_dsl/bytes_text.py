"""Byte counts as people read them (``72.0 KiB``), and the KV cache's line: the words of the
memory figures, apart from the memory report so that a plain summary needs neither it nor the
sharding pass it reads."""

from __future__ import annotations

from fractions import Fraction

from lbdl_dsl.compiler import memory
from lbdl_dsl.core.symbolic import Expr

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human(value: Fraction | int) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``2.7 GiB``."""
    v = float(value)
    for unit in _UNITS:
        if abs(v) < 1024 or unit == _UNITS[-1]:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    raise AssertionError


def fmt_bytes(e: Expr) -> str:
    """A byte count: in units when known, else each term's coefficient in units (× B·T)."""
    if e.is_const:
        return human(e.const_value)
    parts = []
    for mono, coef in sorted(e.terms, key=lambda t: bool(t[0])):  # the constant first
        factor = str(Expr({mono: Fraction(1)}))
        parts.append(f"{human(coef)} × {factor}" if mono else human(coef))
    return " + ".join(parts)


def kv_cache_text(cache: memory.KvCache) -> str:
    """``72.0 KiB per token, 72.0 MiB at the full context of 1024``; a cache whose size does
    not grow with the text (a recurrent carry) is one figure."""
    if cache.per_token == Expr():
        return f"{fmt_bytes(cache.fixed)} whatever the length"
    fixed = f" + {fmt_bytes(cache.fixed)}" if cache.fixed != Expr() else ""
    full = fmt_bytes(cache.full)
    if cache.context.as_int() is None and not cache.full.free_symbols & cache.context.free_symbols:
        return f"{fmt_bytes(cache.per_token)} per token up to its window{fixed}, {full} at most"
    per = fmt_bytes(cache.per_token)
    return f"{per} per token{fixed}, {full} at the full context of {cache.context}"
