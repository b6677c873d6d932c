"""A model out to serving stacks: StableHLO through ``jax.export``; ONNX from the checked graph
(`lbdl_dsl.backends.onnx`), or through jax2onnx where a box has no ONNX lowering there.

``export(spec, "model.onnx")`` traces the generated ``apply`` in evaluation mode with the batch
size symbolic (``batch=`` fixes it) and the parameters baked in as constants (from ``weights=``,
a file `Model.load` reads, or drawn by ``init``), or taken as inputs (``params="inputs"``).
Then, unless ``verify=False``, it runs the exported file on example inputs (StableHLO back
through ``jax.export.deserialize``, ONNX in onnxruntime) and compares it with the JAX model,
so a converter's mistranslation is an error here rather than a surprise in production.

Where the converter cannot express a box, the error names the box and its line, found from
the equation the converter stopped at: its source location is a line of the generated module,
and each statement there follows a ``# line N: BOX`` comment naming the spec line it lowers.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import ArgumentError, LbdlError
from lbdl_dsl.interop.traced import failure, forward, input_specs

FORMATS = {"stablehlo": ".stablehlo", "mlir": ".mlir", "onnx": ".onnx"}
TOLERANCE = 1e-5  # max |exported − JAX| / max |JAX|, float32


@dataclass
class Exported:
    """What was written, and how closely it reproduces the JAX model."""

    path: Path
    format: str
    inputs: list[str]
    outputs: list[str]
    batch: int | None  # None: symbolic
    params_as_inputs: bool
    random_weights: bool
    max_error: float | None = None  # on example inputs, relative; None when not verified
    fold: bool = False  # ONNX: batchnorms folded into the convolutions before them
    functions: bool = True  # ONNX: block calls as local functions (else inline)
    output_names: list[str] | None = None  # ONNX: the outputs' names (default: ASCII spec's)
    lowering: str = "traced"  # ONNX: "graph" (box by box) or "traced" (jax2onnx)
    nodes: int = 0  # ONNX from the graph: nodes, with the functions' inlined
    functions_written: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        batch = "symbolic batch" if self.batch is None else f"batch {self.batch}"
        where = "as inputs" if self.params_as_inputs else "baked in"
        out = [f"wrote {self.path} ({self.format}, {batch}, parameters {where})"]
        if self.format == "onnx" and self.lowering == "graph":
            n = self.functions_written
            fns = f", {n} block function{'s' if n > 1 else ''}" if n else ""
            folded = ", batchnorms folded" if self.fold else ""
            out.append(f"lowered box by box: {self.nodes} nodes{fns}{folded}")
        out += self.notes
        if self.random_weights and not self.params_as_inputs:
            out.append("note: the parameters are init's random ones; give --weights FILE")
        if self.max_error is not None:
            runner = "onnxruntime" if self.format == "onnx" else "jax.export.deserialize"
            out.append(f"checked in {runner}: max relative difference {self.max_error:.1e}")
        return out


def export(
    spec: Any,
    output: str | os.PathLike[str] | None = None,
    *,
    format: str | None = None,  # noqa: A002 - the CLI's --format
    weights: str | os.PathLike[str] | None = None,
    params: str = "baked",
    batch: int | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    verify: bool = True,
    fold: bool = False,
    functions: bool = True,
    output_names: list[str] | None = None,
) -> Exported:
    """Write ``spec`` (a path, or a compiled `Model`) as StableHLO or ONNX; see the module.
    For ONNX, ``fold`` folds each batchnorm into the convolution before it, ``functions=False``
    writes block calls inline, and ``output_names`` names the outputs."""
    import jax

    from lbdl_dsl.backends.jax.model import Model

    fmt = _format(format, output)
    _check_arguments(params, batch, seed)
    if fmt != "onnx" and (fold or output_names):
        raise LbdlError("--fold and --output-names are for --format onnx")
    if isinstance(spec, Model):
        model = spec
    else:
        from lbdl_dsl.backends.jax.model import model_of

        model = model_of(spec, overrides)
    if output is None:
        from lbdl_dsl.compiler.driver import spec_name

        output = Path("build") / spec_name(model.checked.file) / f"{model.name}{FORMATS[fmt]}"
    output = Path(output)
    verifies = verify and fmt != "mlir" and (fmt != "onnx" or _has_onnxruntime())
    if verifies and batch is not None:
        _check_example_size(model, batch)
    if weights is not None:
        values = model.load(Path(weights))
    elif params == "baked" or verifies:
        values = model.init(jax.random.key(seed))
    else:  # the program needs the parameters' shapes alone: nothing drawn, nothing held
        values = jax.eval_shape(model.init, jax.random.key(seed))
    result = Exported(
        output,
        fmt,
        list(model.inputs),
        list(model.outputs),
        batch,
        params == "inputs",
        weights is None,
        fold=fold,
        functions=functions,
        output_names=list(output_names) if output_names else None,
    )
    if fmt == "onnx":
        from lbdl_dsl.interop import onnx_export

        onnx_export.write(model, values, result)
    else:
        _write_stablehlo(model, values, result)
    if verifies:
        result.max_error = _verify(model, values, result)
        if not math.isfinite(result.max_error):
            raise LbdlError(
                f"{output}: the check cannot compare the outputs: the JAX model's or the "
                "exported file's hold NaN or infinity on the example inputs",
                None,
                hint="look at the weights (`Model.load` names arrays that are not finite), or "
                "pass --no-verify to write the file unchecked",
            )
        if result.max_error > TOLERANCE:
            raise LbdlError(
                f"{output}: the exported model differs from the JAX model by "
                f"{result.max_error:.1e} (relative), more than {TOLERANCE:.0e}",
                None,
                hint="this is a converter's mistranslation; report it with the spec",
            )
    return result


def _check_arguments(params: str, batch: int | None, seed: int) -> None:
    if params not in ("baked", "inputs"):
        raise LbdlError(f"--params: `{params}` is not `baked` or `inputs`")
    for name, value in (("batch", batch), ("seed", seed)):
        if (value is not None or name == "seed") and (
            not isinstance(value, int) or isinstance(value, bool)
        ):
            raise ArgumentError(f"{name} must be a whole number, got {value!r}")
    if batch is not None and batch < 1:
        raise LbdlError(f"--batch {batch}: a batch holds at least one sample")
    if batch is not None and batch > MAX_BATCH:
        raise LbdlError(f"--batch {batch}: more than 2^31−1 samples", hint="e.g. --batch 8")
    if not 0 <= seed <= MAX_SEED:
        raise LbdlError(f"--seed {seed}: a seed is a whole number from 0 to 2^63−1")


MAX_BATCH = 2**31 - 1
MAX_SEED = 2**63 - 1  # what a JAX key takes
MAX_EXAMPLE_BYTES = 2**31  # the check's example inputs, at a fixed --batch


def _check_example_size(model: Any, batch: int) -> None:
    """Refuse a check whose example inputs would not fit in memory, before drawing them."""
    per_sample = sum(
        math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in model.inputs.values()
    )
    if batch * per_sample > MAX_EXAMPLE_BYTES:
        raise LbdlError(
            f"--batch {batch}: the check's example inputs would take {batch * per_sample:,} "
            f"bytes (more than {MAX_EXAMPLE_BYTES:,})",
            None,
            hint="export with a smaller --batch (or none: the batch stays symbolic), or pass "
            "--no-verify",
        )


def _format(fmt: str | None, output: Any) -> str:
    """The format asked for, else the output's suffix's, else StableHLO (the one every spec
    exports to, needing no extra)."""
    if fmt is None and output is None:
        return "stablehlo"
    if fmt is None:
        suffix = Path(output).suffix
        fmt = next((f for f, s in FORMATS.items() if s == suffix), None)
        if fmt is None:
            raise LbdlError(
                "--format: give one of " + ", ".join(FORMATS) + " (or an output file with "
                "their suffix: " + ", ".join(FORMATS.values()) + ")"
            )
    if fmt not in FORMATS:
        raise LbdlError(f"--format: `{fmt}` is not one of {', '.join(FORMATS)}")
    return fmt


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _write_stablehlo(model: Any, values: tuple[Any, Any], result: Exported) -> None:
    import jax

    from lbdl_dsl.output import write_atomic

    f = forward(model, values, result.params_as_inputs)
    args = input_specs(model, result.batch)
    if result.params_as_inputs:
        args = [*jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), values), *args]
    try:
        exported = jax.export.export(jax.jit(f))(*args)
    except Exception as exc:  # noqa: BLE001 - named at the box that raised it
        raise failure(model, exc, "jax.export") from None
    data = exported.mlir_module() if result.format == "mlir" else bytes(exported.serialize())
    write_atomic(result.path, data)


def _verify(model: Any, values: tuple[Any, Any], result: Exported) -> float:
    """The largest difference between the exported file (StableHLO or ONNX; MLIR text is for
    reading and other tools) and the JAX model on example inputs, relative to the largest
    output."""
    import jax

    xs = model.example_inputs(jax.random.key(1), batch=result.batch or 2)
    want = jax.jit(forward(model, values, False))(*xs)
    want = list(want) if isinstance(want, tuple) else [want]
    if result.format == "onnx":
        from lbdl_dsl.interop import onnx_export

        got = onnx_export.run(result.path, values if result.params_as_inputs else None, xs)
    else:
        exported = jax.export.deserialize(bytearray(result.path.read_bytes()))
        args = [*values, *xs] if result.params_as_inputs else xs
        out = exported.call(*args)
        got = list(out) if isinstance(out, tuple) else [out]
    return relative_error(got, want)


def relative_error(got: list[Any], want: list[Any]) -> float:
    """max |got − want| over every output, divided by the largest |want|; NaN when any output
    holds NaN or infinity (a difference of NaNs says nothing)."""
    if not all(np.isfinite(np.asarray(a, np.float64)).all() for a in [*got, *want]):
        return math.nan
    scale = max(float(np.max(np.abs(np.asarray(w)))) for w in want) or 1.0
    return max(
        float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)))) / scale
        for g, w in zip(got, want, strict=True)
    )
