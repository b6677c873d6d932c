"""The Python API: ``lbdl_dsl.compile("specs/lenet.lbdl", N=4)``.

Checking needs neither JAX nor Graphviz; `compile` returns a JAX `Model` (importing JAX then) and
`check` returns the checked program alone, for tools that only need shapes and counts.

A spec is a path, or text passed as ``text=`` (never guessed from the string: `"specs/lenet"`
is a path without its suffix, not a spec). Every argument is checked before any work, and a bad
one is an `ArgumentError` (an `LbdlError` and a `ValueError`) that names it and says what it
accepts. Errors in the spec carry its sources, so ``str(error)`` shows the line and a caret,
as the command line does.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lbdl_dsl.compiler.driver import CheckFailed, compile_spec
from lbdl_dsl.compiler.imports import sources_for
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import ArgumentError, LbdlError
from lbdl_dsl.core.symbolic import fmt_count

if TYPE_CHECKING:
    from lbdl_dsl.backends.jax.model import Model

DTYPES = ("float32", "bfloat16")


class CheckedSpec(Checked):
    """What `check` returns: the compiler's result (`Checked`), with a short ``repr`` and,
    in a notebook, its summary table and figure."""

    def __repr__(self) -> str:
        name = self.program.model.name if self.program is not None else "?"
        t = self.totals
        return (
            f"<lbdl spec {name} ({self.file}): {fmt_count(t['params'])} parameters, "
            f"{fmt_count(t['macs'])} MACs per sample>"
        )

    def _repr_html_(self) -> str:
        from lbdl_dsl.backends.diagram import html_figure

        return html_figure(self)

    def diagram(self, fmt: str = "svg", expand: str | None = None, scale: float = 1.0) -> Any:
        """The figure, as `Model.diagram` draws it: ``check(spec).diagram().save("m.png")``."""
        from lbdl_dsl.backends.diagram.notebook import figure

        return figure(self, fmt, expand, scale)


def check(
    spec: str | os.PathLike[str] | None = None,
    *,
    text: str | bytes | None = None,
    import_path: Sequence[str | os.PathLike[str]] = (),
    **overrides: Any,
) -> CheckedSpec:
    """Parse, build and check a spec: a path, or ``text`` (which ``spec`` then names).

    Model parameters are keyword arguments (``N=24``); ``import_path`` lists folders where
    imports are also looked for (imports stay inside the spec's folder tree and these).
    """
    file, source = _source(spec, text)
    folders = _folders(import_path)
    _override_names(overrides)
    try:
        out = compile_spec(
            source, file=file, overrides=overrides, origin="keyword", import_path=folders
        )
        return CheckedSpec(**{f.name: getattr(out, f.name) for f in dataclasses.fields(out)})
    except CheckFailed as err:
        err.sources = err.checked.sources
        raise
    except LbdlError as err:
        if err.sources is None:
            sources = sources_for(err)
            if text is not None:
                sources[file or "<spec>"] = _text(text)
            err.sources = sources
        raise


def compile(  # noqa: A001 - the verb users expect, as in jax.jit(...).lower(...).compile()
    spec: str | os.PathLike[str] | None = None,
    *,
    text: str | bytes | None = None,
    unroll: bool = False,
    dtype: Any = "float32",
    import_path: Sequence[str | os.PathLike[str]] = (),
    **overrides: Any,
) -> Model:
    """A runnable `Model` for a spec; model parameters are keyword arguments (``N=24``).

    ``dtype`` is the compute type (``"float32"`` or ``"bfloat16"``, or the NumPy/JAX type);
    parameters stay float32. ``unroll`` lowers ×N groups as Python loops instead of a scan,
    over the same parameters: on a GPU the steps are faster and the compile longer
    (docs/performance-gpu.md); on a CPU the scan is as fast.
    """
    if not isinstance(unroll, bool):
        raise ArgumentError(f"unroll must be True or False, got {unroll!r}")
    name = dtype_name(dtype)
    checked = check(spec, text=text, import_path=import_path, **overrides)
    from lbdl_dsl.backends.jax.model import Model
    from lbdl_dsl.training.evaluate import evaluate

    model = Model(checked, unroll=unroll, dtype=name)
    model.evaluator = evaluate
    return model


def from_pretrained(folder: str | os.PathLike[str], *, dtype: Any = "float32") -> Any:
    """``(model, params, state)`` of a Hugging Face checkpoint folder (config.json and
    model.safetensors, or a sharded index): the spec `lbdl from-hf` writes, compiled, its
    parameters the checkpoint's (`lbdl_dsl.interop.hf`)."""
    from lbdl_dsl.interop.hf import from_pretrained as load
    from lbdl_dsl.training.evaluate import evaluate

    model, params, state = load(folder, dtype=dtype_name(dtype))
    model.evaluator = evaluate
    return model, params, state


def dtype_name(dtype: Any) -> str:
    """``"float32"`` or ``"bfloat16"`` from a name or a NumPy/JAX type; otherwise the error."""
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None)
    name = name if isinstance(name, str) else getattr(dtype, "__name__", None)
    if name not in DTYPES:
        raise ArgumentError(
            f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}",
            hint="the compute type of the model; parameters stay float32 "
            "(float64 would need JAX's x64 mode, which lbdl does not use)",
        )
    return str(name)


def _text(text: str | bytes) -> str:
    return text if isinstance(text, str) else text.decode("utf-8", "replace")


def _source(spec: Any, text: Any) -> tuple[str | None, Any]:
    """(file name, what compile_spec reads): a path stays a path, text stays text."""
    if text is not None:
        if not isinstance(text, (str, bytes)):
            raise ArgumentError(f"text must be a str or bytes, got {type(text).__name__}")
        if spec is not None and not isinstance(spec, (str, os.PathLike)):
            raise ArgumentError(f"spec must name the text, got {type(spec).__name__}")
        return (os.fspath(spec) if spec else "<spec>"), text
    if spec is None:
        raise ArgumentError(
            "give a spec: a path, or its text as text=...",
            hint='lbdl_dsl.check("specs/lenet.lbdl") or lbdl_dsl.check(text="model m: ...")',
        )
    if not isinstance(spec, (str, os.PathLike)):
        raise ArgumentError(
            f"spec must be a path (str or os.PathLike), got {type(spec).__name__}",
            hint="pass the text of a spec as text=...",
        )
    path = os.fspath(spec)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if "\n" in path or path.lstrip().startswith(("model ", "block ", "import ")):
        raise ArgumentError(
            "spec is a path, and this looks like the text of a spec",
            hint="pass the text as text=...: lbdl_dsl.check(text=source)",
        )
    from pathlib import Path

    return None, Path(path)


def _folders(import_path: Any) -> list[str]:
    if isinstance(import_path, (str, os.PathLike)):
        import_path = [import_path]  # one folder, as a convenience
    if not isinstance(import_path, (list, tuple)):
        raise ArgumentError(
            f"import_path must be a list of folders, got {type(import_path).__name__}"
        )
    out = []
    for folder in import_path:
        if not isinstance(folder, (str, os.PathLike)) or not os.path.isdir(folder):
            raise ArgumentError(
                f"import_path: {folder!r} is not a folder",
                hint="list the folders where imported .lbdl files may be found",
            )
        out.append(os.fspath(folder))
    return out


def _override_names(overrides: dict[str, Any]) -> None:
    """Override names are the spec's (checked against the model by the driver); their values
    are the driver's to read. Here only what no spec can name."""
    for key in overrides:
        if not key.isidentifier():
            raise ArgumentError(f"{key!r} cannot name a model parameter")
