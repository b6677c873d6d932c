"""Differential fuzzer: the checker's shapes against the shapes of the generated JAX module.

Issue 17, item 10: the checker and the generated code disagreed silently on two patterns (a
block input named on the block's first line and overwritten by the flowing tensor; a per-sample
broadcast of a 4×8 tensor with an 8-vector that put the batch axis in front of both). This
fuzzer closes the class. It writes random specs from the patterns that matter (names with
``-> n``, ``from n``, ``+(n)`` and ``mul(n)`` across ranks, broadcasts against lower ranks and
sizes of 1, convolutions (channels-last in the generated code) between them, blocks whose first
line names their input, block calls repeated ``×N``, ``×N:`` frames, several outputs) while
computing the shape every output must have, then compares three answers: the generator's, the
checker's (`Model.outputs`), and `jax.eval_shape` of the generated module's ``init`` and
``apply``, which traces without compiling. Any difference is a finding.

Run ``python bench/fuzz_shapes.py --cases 2000`` (nightly size);
``tests/test_differential_fuzz.py`` runs a few hundred seeded cases in CI.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

Shape = tuple[int, ...]
PATTERN = "ABC"


def _fmt(shape: Shape) -> str:
    return "×".join(str(d) for d in shape)


def _pattern(rank: int) -> list[str]:
    return list(PATTERN[3 - rank :])


def broadcast(a: Shape, b: Shape) -> Shape | None:
    """Per-sample broadcasting on trailing axes (the checker's rule), or None if they clash."""
    rank = max(len(a), len(b))
    out = []
    for i in range(-rank, 0):
        x = a[i] if -i <= len(a) else 1
        y = b[i] if -i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


# Blocks: (name, minimal rank, body lines on the pattern, how the output shape follows the input).
# Every body starts by naming its input: the pattern of item 10a.
def _blocks() -> dict[str, tuple[int, list[str], object]]:
    def same(s: Shape) -> Shape:
        return s

    def last3(s: Shape) -> Shape:
        return (*s[:-1], 3)

    return {
        "skipfc": (
            1,
            ["-> x_in", "fc {head}3", "relu", "fc {pat}", "+(x_in)"],
            same,
        ),
        "gate": (2, ["-> x_in", "slice stop=1", "-> g", "from x_in", "layernorm", "mul(g)"], same),
        "meanadd": (2, ["-> x_in", "mean", "-> v", "from x_in", "gelu", "+(v)"], same),
        "branch": (
            1,
            ["-> x_in", "fc {head}3", "-> y", "from x_in", "relu", "fc {head}3", "+(y)"],
            last3,
        ),
        "shrink": (2, ["-> x_in", "slice stop=1", "-> y", "from x_in", "fc {pat}", "+(y)"], same),
    }


BLOCKS = _blocks()


def block_source(name: str, rank: int) -> str:
    _, lines, _ = BLOCKS[name]
    pat = _pattern(rank)
    head = "".join(f"{p}×" for p in pat[:-1])
    body = [line.format(head=head, pat="×".join(pat)) for line in lines]
    return "\n".join([f"block {name}_{rank} on {'×'.join(pat)}:", *("  " + b for b in body)])


@dataclass
class Case:
    """One generated spec and the output shapes it must have."""

    seed: int
    text: str
    expected: dict[str, Shape]


@dataclass
class _Gen:
    rng: random.Random
    lines: list[str] = field(default_factory=list)
    names: dict[str, Shape] = field(default_factory=dict)
    outputs: dict[str, Shape] = field(default_factory=dict)
    blocks: set[tuple[str, int]] = field(default_factory=set)
    count: int = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def name(self, shape: Shape, indent: str = "  ") -> None:
        n = self.fresh("n")
        self.lines.append(f"{indent}-> {n}")
        self.names[n] = shape

    def combine(self, shape: Shape, same_only: bool, indent: str = "  ") -> Shape:
        """`+(n)` or `mul(n)` with a named tensor that broadcasts with the flowing one."""
        fits = []
        for n, s in self.names.items():
            out = broadcast(shape, s)
            if out is not None and (not same_only or out == shape):
                fits.append((n, out))
        if not fits:
            return shape
        n, out = self.rng.choice(sorted(fits))
        op = self.rng.choice(["+", "mul"])
        self.lines.append(f"{indent}{op}({n})")
        return out

    def simple(self, shape: Shape, indent: str = "  ") -> Shape:
        """One box that keeps the shape."""
        rng = self.rng
        kind = rng.choice(["relu", "gelu", "layernorm", "fc"])
        if kind == "fc":
            self.lines.append(f"{indent}fc {_fmt(shape)}")
        else:
            self.lines.append(f"{indent}{kind}")
        return shape

    def step(self, shape: Shape) -> Shape:
        rng = self.rng
        r = rng.random()
        if r < 0.15:
            return self.simple(shape)
        if r < 0.25:
            k = rng.randint(1, 6)
            new = (*shape[:-1], k)
            self.lines.append(f"  fc {_fmt(new)}")
            return new
        if r < 0.35 and len(shape) >= 2:
            k = rng.randint(1, shape[0])
            new = (k, *shape[1:])
            note = f"  {_fmt(new)}" if rng.random() < 0.5 else ""
            self.lines.append(f"  slice stop={k}{note}")
            return new
        if r < 0.42 and len(shape) >= 2:
            self.lines.append("  mean")
            return shape[1:]
        if r < 0.50 and len(shape) == 3:
            # a convolution runs channels-last in the generated code: what follows must see
            # the spec's layout again wherever it mixes ranks
            c = rng.randint(1, 4)
            k = rng.choice(["k=1", "k=3 p=1"])
            self.lines.append(f"  conv-2d {k}  {_fmt((c, *shape[1:]))}")
            return (c, *shape[1:])
        if r < 0.55:
            self.name(shape)
            return shape
        if r < 0.63 and self.names:
            n = rng.choice(sorted(self.names))
            self.lines.append(f"  from {n}")
            return self.names[n]
        if r < 0.78:
            return self.combine(shape, same_only=False)
        if r < 0.9:
            options = [b for b, (low, _, _) in BLOCKS.items() if len(shape) >= low]
            b = rng.choice(options)
            self.blocks.add((b, len(shape)))
            _, _, rule = BLOCKS[b]
            out = rule(shape)  # type: ignore[operator]
            times = rng.choice([1, 1, 2, 3]) if out == shape else 1
            self.lines.append(f"  {b}_{len(shape)}" + (f" ×{times}" if times > 1 else ""))
            return out
        if r < 0.95:
            self.lines.append(f"  ×{rng.randint(1, 3)}:")
            for _ in range(rng.randint(1, 3)):
                before = len(self.lines)
                if rng.random() < 0.3:
                    shape = self.combine(shape, same_only=True, indent="    ")
                if len(self.lines) == before:  # no tensor to combine with: a plain box
                    shape = self.simple(shape, indent="    ")
            return shape
        o = self.fresh("out")
        self.lines.append(f"  output {o}")
        self.outputs[o] = shape
        return shape


def generate(seed: int, steps: int = 10) -> Case:
    """A random spec within the patterns above, and the shapes of its outputs."""
    rng = random.Random(seed)
    g = _Gen(rng)
    rank = rng.randint(1, 3)
    x = tuple(rng.randint(2, 5) for _ in range(rank))
    # a second input broadcasting with X: a trailing part of its shape, some sizes made 1
    vrank = rng.randint(1, rank)
    v = tuple(d if rng.random() < 0.7 else 1 for d in x[rank - vrank :])
    header = ["model fuzz:", f"  input V: {_fmt(v)}", f"  input X: {_fmt(x)}"]
    g.names = {"V": v, "X": x}
    shape = g.simple(x)  # X is read before any `from` can leave it
    for _ in range(steps):
        shape = g.step(shape)
    if not any(line.strip() in ("+(V)", "mul(V)") for line in g.lines):
        g.lines.append("  from V")  # every input must be read
        shape = v
        g.lines.append("  relu")
    o = g.fresh("out")
    g.lines.append(f"  output {o}")
    g.outputs[o] = shape
    blocks = [block_source(b, r) for b, r in sorted(g.blocks)]
    text = "\n\n".join([*blocks, "\n".join(header + g.lines)]) + "\n"
    return Case(seed, text, dict(g.outputs))


@dataclass(frozen=True)
class Result:
    seed: int
    status: str  # "ok", "rejected" (the checker refused it), "mismatch", "crash"
    detail: str = ""


def run_case(case: Case, batch: int = 3) -> Result:
    """Check, generate and trace one case; compare the three sets of output shapes."""
    import jax
    import jax.numpy as jnp

    import lbdl_dsl
    from lbdl_dsl.core.errors import LbdlError

    try:
        model = lbdl_dsl.compile(f"fuzz_{case.seed}.lbdl", text=case.text)
    except LbdlError as err:
        return Result(case.seed, "rejected", str(err).splitlines()[0])
    checked = {k: tuple(v) for k, v in model.outputs.items()}
    if checked != case.expected:
        return Result(case.seed, "mismatch", f"checker {checked} != expected {case.expected}")
    try:
        ins = [jax.ShapeDtypeStruct((batch, *s), jnp.dtype(dt)) for s, dt in model.inputs.values()]
        params, state = jax.eval_shape(model.init, jax.ShapeDtypeStruct((2,), jnp.uint32))
        outs, _ = jax.eval_shape(lambda p, s, *xs: model.apply(p, s, *xs), params, state, *ins)
    except Exception as exc:  # noqa: BLE001 - any failure of the generated code is a finding
        return Result(case.seed, "crash", f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    traced = _shapes(outs, list(checked), batch)
    if traced != checked:
        return Result(case.seed, "mismatch", f"generated code {traced} != checker {checked}")
    return Result(case.seed, "ok")


def _shapes(outs: object, names: list[str], batch: int) -> dict[str, Shape] | str:
    """The per-sample output shapes of ``apply``, by name, or a description of what came back."""
    values = outs if isinstance(outs, (list, tuple)) else [outs]
    if isinstance(outs, dict):
        values = [outs[k] for k in names if k in outs]
    if len(values) != len(names):
        return f"{len(values)} outputs for {names}"
    out: dict[str, Shape] = {}
    for name, v in zip(names, values):
        shape = tuple(v.shape)  # type: ignore[attr-defined]
        if not shape or shape[0] != batch:
            return f"{name}: {shape}, no batch axis of {batch} in front"
        out[name] = shape[1:]
    return out


def fuzz(cases: int, seed: int = 0) -> list[Result]:
    return [run_case(generate(seed + i)) for i in range(cases)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="specs to try (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--show", type=int, default=None, help="print the spec of one seed")
    args = parser.parse_args(argv)
    if args.show is not None:
        print(generate(args.show).text)
        return 0
    start = time.perf_counter()
    results = fuzz(args.cases, args.seed)
    elapsed = time.perf_counter() - start
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status != "ok":
            print(f"seed {r.seed}: {r.status}: {r.detail}")
    print(f"{args.cases} cases in {elapsed:.1f} s: {counts}")
    return 0 if counts.get("ok", 0) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
