"""A compiled model in Python: the generated module, executed, with conveniences around it.

`Model.apply` *is* the ``apply`` of the module ``--emit py`` writes: the text is generated once
and executed here, so the two cannot disagree. The text comes from our code generator, never
from the spec: every spec-provided name in it went through the sanitising namespace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax import storage, weights
from lbdl_dsl.backends.jax.checks import InputSpec, check_inputs, check_tokens, check_tree
from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.backends.jax.runtime.inits import on_host
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import ArgumentError
from lbdl_dsl.core.symbolic import Expr, fmt_count


class Model:
    """``init(key) -> (params, state)``; ``apply(params, state, *inputs, train, key)``."""

    def __init__(self, compiled: Checked, *, unroll: bool = False, dtype: str = "float32") -> None:
        self.checked = compiled
        self.dtype = dtype
        self.source = generate(compiled, unroll=unroll, dtype=dtype)
        namespace: dict[str, Any] = {"__name__": f"lbdl_generated_{self.name}"}
        exec(compile(self.source, f"<lbdl {compiled.file}>", "exec"), namespace)  # noqa: S102
        self.module = namespace
        self._init: Callable[[Any], tuple[Any, Any]] = namespace["init"]
        self._apply: Callable[..., tuple[Any, Any]] = namespace["apply"]
        self._specs = [
            InputSpec(name, tuple(t.shape), t.dtype, t.vocab.as_int() if t.vocab else None)
            for name, t in self.checked.inputs.items()
        ]
        # draws random numbers in training: the generated module carries the functions
        self._random = any(f in namespace for f in ("dropout_mask_apply", "reparameterize"))
        self._seen: set[tuple[object, ...]] = set()  # signatures that passed the checks
        # what `evaluate` runs: `lbdl_dsl.training.evaluate.evaluate`, which opens the data
        # and chooses the loss as `lbdl train` does; `lbdl_dsl.compile` connects it (the
        # training floor is above this one, which names none of its modules)
        self.evaluator: Callable[..., dict[str, Any]] | None = None

    def init(self, key: Any) -> tuple[Any, Any]:
        """The generated module's ``init(key) -> (params, state)``, after checking that ``key``
        is a JAX key (``jax.random.key(0)``, or a legacy ``PRNGKey``)."""
        if not isinstance(key, (jax.Array, np.ndarray)):
            raise ArgumentError(
                f"key must be a JAX random key, got {type(key).__name__}",
                hint="model.init(jax.random.key(0))",
            )
        return self._init(key)

    def apply(
        self, params: Any, state: Any, *inputs: Any, train: bool = False, key: Any = None
    ) -> tuple[Any, Any]:
        """The generated module's ``apply``, after checking what it is given.

        Shapes, dtypes and the structure of ``params`` and ``state`` are checked once per
        distinct signature (under ``jax.jit``, once per compilation), token ranges whenever
        the values are at hand; then ``self.module["apply"]`` runs, unchanged.
        """
        signature = self._signature(params, state, inputs, train, key)
        if signature not in self._seen:
            self._check(params, state, inputs, train, key)
            self._seen.add(signature)
        check_tokens(self._specs, inputs)
        return self._apply(params, state, *inputs, train=train, key=key)

    def _signature(
        self, params: Any, state: Any, inputs: tuple[Any, ...], train: bool, key: Any
    ) -> tuple[object, ...]:
        leaves, tree = jax.tree.flatten((params, state))
        shapes = tuple(getattr(x, "shape", type(x)) for x in leaves)
        ins = tuple((getattr(x, "shape", None), str(getattr(x, "dtype", type(x)))) for x in inputs)
        return (tree, shapes, ins, train, key is None)

    def _check(
        self, params: Any, state: Any, inputs: tuple[Any, ...], train: bool, key: Any
    ) -> None:
        if not isinstance(train, bool):
            raise ArgumentError(f"train must be True or False, got {train!r}")
        if train and key is None and self._random:
            raise ArgumentError(
                f"model `{self.name}` draws random numbers in training (dropout, sampling): "
                "apply(..., train=True) needs key=",
                hint="pass a new key each step: key=jax.random.key(step)",
            )
        check_tree(params, self.module["PARAMS"], "params", weights.flatten)
        check_tree(state, self.module["STATE"], "state", weights.flatten)
        check_inputs(self.name, self._specs, inputs)

    @property
    def name(self) -> str:
        return self.checked.program.model.name

    @functools.cached_property
    def jit_apply(self) -> Callable[..., tuple[Any, Any]]:
        """``apply`` compiled with ``jax.jit`` (``train`` is static)."""
        return jax.jit(self.apply, static_argnames=("train",))

    @property
    def param_count(self) -> int:
        return _int(self.checked.totals["params"], "the parameter count")

    @property
    def inputs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Input name → (per-sample shape, dtype), in the spec's channels-first order."""
        out = {}
        for name, t in self.checked.inputs.items():
            shape = tuple(_int(d, name) for d in t.shape)
            out[name] = (
                shape,
                "int32" if t.dtype == "int" else t.dtype.replace("float", "float32"),
            )
        return out

    @property
    def outputs(self) -> dict[str, tuple[int, ...]]:
        out = {}
        for k, t in self.checked.outputs.items():
            assert t is not None, k  # a checked model's outputs have their shapes
            out[k] = tuple(_int(d, k) for d in t.shape)
        return out

    def example_inputs(self, key: jax.Array, batch: int = 2) -> list[jax.Array]:
        """Random inputs of the spec's shapes: standard normal values, tokens uniform in their
        range, booleans even.

        Drawn by NumPy from the key's words and each input's position, as ``init`` draws the
        parameters: nothing is compiled (JAX's normal compiled a program for each new shape,
        0.3 to 0.5 s on a 2-core CPU), and under ``jax.jit`` or ``vmap`` a callback gives the
        very numbers of an eager call.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ArgumentError(f"batch must be a whole number ≥ 1, got {batch!r}")
        wanted = []
        for name, t in self.checked.inputs.items():
            shape = (batch, *self.inputs[name][0])
            kind = t.dtype if t.dtype in ("int", "bool") else "float"
            wanted.append((shape, kind, _int(t.vocab, name) if kind == "int" else 0))
        data = None if isinstance(key, jax.core.Tracer) else jax.random.key_data(key)
        if data is not None and data.ndim != 1:
            raise ArgumentError(f"example_inputs takes one key, not {data.shape[:-1]} of them")
        out = [jax.ShapeDtypeStruct(shape, _EXAMPLE_DTYPES[kind]) for shape, kind, _ in wanted]
        return on_host(key, lambda data: example_arrays(data, wanted), out, "example_inputs")

    def summary(self, depth: int | None = 1) -> str:
        from lbdl_dsl import report

        return report.render_table(self.checked, depth)

    def diagram(self, fmt: str = "svg", expand: str | None = None, scale: float = 1.0) -> Any:
        """The diagram in the book's style: SVG text by default (shown as a figure in a
        notebook; ``.save("model.png")`` writes it in any format), DOT text, or png/pdf bytes,
        ``scale`` times the default size."""
        from lbdl_dsl.backends.diagram.notebook import figure

        return figure(self.checked, fmt, expand, scale)

    def _repr_html_(self) -> str:
        """In a notebook: the summary table, then the figure."""
        from lbdl_dsl.backends.diagram import html_figure

        return html_figure(self.checked)

    def __repr__(self) -> str:
        dtype = "" if self.dtype == "float32" else f", {self.dtype}"
        params = fmt_count(self.checked.totals["params"])
        return f"<lbdl Model {self.name}: {params} parameters{dtype}>"

    # -- using a trained model -----------------------------------------------------------------
    def predict(
        self, params: Any, state: Any, *inputs: Any, output: str | None = None
    ) -> jax.Array:
        """Class probabilities for a batch: the classifier output (``output``, or the only
        one) passed through a softmax over its last axis, unless a ``softargmax`` made it."""
        name = output or next(iter(self.checked.outputs))
        if name not in self.checked.outputs:
            raise ArgumentError(
                f"the spec has no output `{name}`", hint=f"its outputs: {', '.join(self.outputs)}"
            )
        check_tokens(self._specs, inputs)  # under jit_apply an id out of range is a NaN row
        outs, _ = self.jit_apply(params, state, *inputs)
        scores: jax.Array = outs[name] if isinstance(outs, dict) else outs
        made_by = getattr(self.checked.outputs[name], "made_by", "") or ""
        if made_by.startswith("`softargmax`"):
            return scores
        probabilities: jax.Array = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
        return probabilities

    def evaluate(self, params: Any, state: Any, data: Any, **options: Any) -> dict[str, Any]:
        """Loss, and accuracy or perplexity, on ``data``: a name or file as ``lbdl train
        --data`` takes (its test split), or arrays by input name with the targets as ``y``
        (`lbdl_dsl.training.evaluate.evaluate`, whose options these are)."""
        if self.evaluator is None:
            raise ArgumentError(
                "this model was not made by lbdl_dsl.compile, which gives it its evaluation",
                hint="lbdl_dsl.compile(spec) or lbdl_dsl.from_pretrained(folder)",
            )
        return self.evaluator(self, params, state, data, **options)

    # -- text generation --------------------------------------------------------------------------
    @functools.cached_property
    def decoder(self) -> Any:
        """The model's `decode.Decoder` (made on first use; refused, with the reason, for a
        model that is not a causal language model)."""
        from lbdl_dsl.backends.jax.decode import Decoder

        return Decoder(self)

    def generate(
        self,
        params: Any,
        ids: Any,
        max_new: int = 32,
        *,
        greedy: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        state: Any = None,
    ) -> Any:
        """``max_new`` tokens after the prompt ``ids`` ((T,) or (B, T) token ids), with a KV
        cache: the most likely each time (``greedy``), or drawn from the softmax of
        logits/``temperature`` kept to ``top_k`` tokens and to the ``top_p`` mass, with the
        random numbers of ``seed``. Returns a `decode.Generation`: ``ids`` (B, T + max_new),
        ``tokens`` (B, max_new) and their ``logprobs``."""
        from lbdl_dsl.backends.jax.decode import Sampling

        sampling = Sampling(greedy, temperature, top_k, top_p)
        return self.decoder.generate(params, ids, max_new, sampling, seed, state)

    # -- parameters on disk ---------------------------------------------------------------------
    def save(self, path: str | Path, params: Any, state: Any = None) -> Path:
        """Parameters (and state) to ``.safetensors`` (or ``.npz``), keyed by their logical
        paths: every ×N group's copies stacked, whatever this module's layout (`load` reads
        it back into that layout)."""
        return weights.save(path, params, state, self.cut())

    def cut(self) -> weights.Cut:
        """Each stored array that is one copy of a logical array (`storage.cut`), sizes known:
        those this module keeps apart (its tables say so, whatever was decided elsewhere)."""
        tables = {**self.module["PARAMS"], **self.module["STATE"]}
        out = {}
        for p, (v, i, s) in storage.cut(self.checked.root).items():
            shape = tuple(_int(d, v) for d in s)
            if p in tables and tuple(tables[p][0]) == shape[len(i) :]:
                out[p] = (v, i, shape)
        return out

    def load(self, path: str | Path, *, allow_nonfinite: bool = False) -> tuple[Any, Any]:
        """(params, state) from a file written by `save`, `lbdl train` or `lbdl import`.

        Every path and shape is checked against the model first; a file of another model (or of
        this one with other ``--set`` values) is refused with the list of differences. A file
        whose short ×N groups are stacked (lbdl's layout before they kept their copies apart,
        `storage`) is read too, each copy cut from its stack. Values that are not real numbers
        are refused, and NaN or infinite ones too unless ``allow_nonfinite``.
        """
        tables = self.module["PARAMS"], self.module["STATE"]
        params, state = weights.load_checked(path, *tables, self.cut(), allow_nonfinite)
        as_jax = {k: jnp.asarray(v) for k, v in params.items()}
        return unflatten(as_jax), unflatten({k: jnp.asarray(v) for k, v in state.items()})


def model_of(
    spec: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    text: str | None = None,
    unroll: bool = False,
    dtype: str = "float32",
) -> Model:
    """The `Model` of a spec file (or of ``text`` named ``spec``) with ``--set`` values: how
    the floors above the backends (training, interop) compile a spec they were given, without
    going through the front door (`lbdl_dsl.compile`) above them."""
    from lbdl_dsl.compiler.driver import compile_spec

    source: str | Path = text if text is not None else Path(spec)
    file = str(spec) if text is not None else None
    checked = compile_spec(source, file=file, overrides=dict(overrides or {}))
    return Model(checked, unroll=unroll, dtype=dtype)


_EXAMPLE_DTYPES = {"int": np.int32, "bool": np.bool_, "float": np.float32}


def example_arrays(
    key_data: Any, wanted: list[tuple[tuple[int, ...], str, int]]
) -> list[np.ndarray]:
    """NumPy arrays for ``(shape, kind, vocab)`` rows (kind ``int``, ``bool`` or ``float``),
    each from its own PCG64 stream seeded by the key's words and the row's position."""
    words = [int(w) for w in np.asarray(key_data, np.uint32).ravel()]
    out: list[np.ndarray] = []
    for i, (shape, kind, vocab) in enumerate(wanted):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([*words, i])))
        if kind == "int":
            out.append(rng.integers(0, vocab, shape, dtype=np.int32))
        elif kind == "bool":
            out.append(rng.random(shape) < 0.5)
        else:
            out.append(rng.standard_normal(shape, dtype=np.float32))
    return out


def _int(d: Expr | int | None, where: str) -> int:
    v = d.as_int() if isinstance(d, Expr) else d
    if v is None:
        symbols = sorted(d.free_symbols) if isinstance(d, Expr) else []
        example = symbols[0] if symbols else "T"
        raise ArgumentError(
            f"the size {d} of `{where}` is symbolic: it needs a value here",
            hint=f"give it one when compiling: lbdl_dsl.compile(spec, {example}=...), "
            f"or --set {example}=... on the command line",
        )
    return int(v)
