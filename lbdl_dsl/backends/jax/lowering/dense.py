"""Lowerings of the dense, embedding and recurrent entries."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Layout, Lowering


def _optional(e: Emit, name: str) -> str | None:
    return e.param(name) if e.has_param(name) else None


def fc(e: Emit) -> str:
    bias = _optional(e, "b")
    return e.call("dense", e.x[0], e.param("w"), *([bias] if bias else []))


def recurrent(fn: str) -> Lowering:
    def lower(e: Emit) -> str:
        names = ("w_ih", "w_hh", "b_ih", "b_hh")
        weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in names) + "}"
        return e.call(fn, e.x[0], weights)

    return lower


def recurrent_from(kind: str) -> Lowering:
    """A recurrent layer in a decoding module: from the carry in its cache, which it updates."""

    def lower(e: Emit) -> str:
        names = ("w_ih", "w_hh", "b_ih", "b_hh")
        weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in names) + "}"
        held = ("h", "c") if kind == "lstm" else ("h",)
        carry = "(" + "".join(f"{e.state(n)}, " for n in held) + ")"
        y, new = e.unpack(
            e.call("recurrent_from", e.x[0], weights, carry, kind=repr(kind)), e.target, "carry"
        )
        for i, n in enumerate(held):
            e.set_state(n, f"{new}[{i}]")
        return y

    return lower


def fc_step(e: Emit) -> str:
    """`fc` in a decoding module: its own weight by rows where `Decoder.split` laid it out
    so (`decode_weights`). A weight tied to an embedding table, transposed (``….T``,
    the table (Dout, Din): GPT-2's output layer), is read by rows (`dense_rows`), as
    XLA:CPU copies the whole transposed table before a one-token product (154 MB for GPT-2
    small, every step)."""
    w = e.param("w")
    if not w.endswith(".T"):
        own = e.params()
        return e.call("dense_step", e.x[0], own) if own else fc(e)
    bias = _optional(e, "b")
    return e.call("dense_rows", e.x[0], w.removesuffix(".T"), *([bias] if bias else []))


DECODE: dict[str, Lowering] = {
    "fc": fc_step,
    "pos-enc": lambda e: e.call(
        "add_positions_at", e.x[0], pos=e.decoding("pos"), context=e.decoding("context")
    ),
    "pos-embed": lambda e: e.call(
        "add_learned_positions_at", e.x[0], e.param("table"), pos=e.decoding("pos")
    ),
    "rnn": recurrent_from("rnn"),
    "lstm": recurrent_from("lstm"),
    "gru": recurrent_from("gru"),
}
"""Lowerings that differ in a decoding module: positions from ``pos``, carries kept."""

LAYOUTS: dict[str, Layout] = {"fc": Layout(rows=("w",))}
"""The weights `dense_step` reads by rows where given so."""

LOWER: dict[str, Lowering] = {
    "fc": fc,
    "embed": lambda e: e.call("embed", e.x[0], e.param("table")),
    "pos-enc": lambda e: e.call("add_positions", e.x[0]),
    "pos-embed": lambda e: e.call("add_learned_positions", e.x[0], e.param("table")),
    "cls-token": lambda e: e.call("prepend_token", e.x[0], e.param("e0")),
    "scale": lambda e: f"{e.x[0]} * jnp.exp({e.param('log_s')})",
    "rnn": recurrent("rnn"),
    "lstm": recurrent("lstm"),
    "gru": recurrent("gru"),
}
