"""Which ×N groups the JAX module keeps apart (`storage`), and the paths that follow.

The compiler names arrays one way, the logical layout (`paths.arrays`); the module's stored
layout must agree with it array for array: every stored copy is one index of a logical array,
with its shape."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lbdl_dsl.backends.jax import storage
from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.instance import Checked, GroupInst

REPO = Path(__file__).resolve().parents[2]

STACKS = """\
model m:
  input X: 8
  fc 8
  ×{outer}:
    fc 8
    ×{inner}:
      fc 8
      relu
  fc 2
  output Y
"""


def _arrays(compiled: Checked, stacked: bool = False) -> dict[str, paths.Array]:
    """The logical layout (``stacked``), or the JAX module's."""
    walked = paths.arrays(compiled.root) if stacked else storage.stored(compiled.root)
    return {a.path: a for a in walked}


def _ints(shape: tuple) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else d.as_int() for d in shape)


def test_resnet50s_stages_keep_each_copy_apart() -> None:
    compiled = compile_spec(REPO / "specs" / "resnet50.lbdl")
    stored, view = _arrays(compiled), _arrays(compiled, stacked=True)
    w = "resblock_0/residual_0/conv_2d_0/w"
    # the third stage: 5 bottlenecks after the one that changes the shape, numbered 0 to 4
    for k in range(5):
        arr = stored[f"repeat_2/{k}/{w}"]
        assert arr.stack == () and arr.stack_roles == ()
        assert (arr.view, arr.copy) == (f"repeat_2/{w}", (k,))
        assert _ints(arr.shape) == (1, 1, 1024, 256)
    assert f"repeat_2/5/{w}" not in stored
    assert _ints(view[f"repeat_2/{w}"].shape) == (5, 1, 1, 1024, 256)
    assert view[f"repeat_2/{w}"].roles[0] == "layers"


def test_gpt2s_twelve_blocks_stay_stacked() -> None:
    compiled = compile_spec(REPO / "specs" / "gpt2.lbdl")
    stored, view = _arrays(compiled), _arrays(compiled, stacked=True)
    assert stored.keys() == view.keys()
    assert all(a.view == "" and a.copy == () for a in stored.values())
    stacked = [a for a in stored.values() if a.stack]
    assert stacked and all(_ints(a.stack) == (12,) for a in stacked)


@pytest.mark.parametrize("stacked", [False, True])
def test_every_stored_array_is_one_copy_of_the_view(
    compile_text: Callable[..., Checked], stacked: bool
) -> None:
    """Apart outside and inside; or stacked outside, and then inside too. Groups of fully
    connected layers keep at most `PER_COPY_ANY` copies apart."""
    outer = storage.PER_COPY_ANY + 1 if stacked else storage.PER_COPY_ANY
    compiled = compile_text(STACKS.format(outer=outer, inner=2))
    stored, view = _arrays(compiled), _arrays(compiled, stacked=True)
    total = sum(_numel(a.shape) for a in stored.values())
    assert total == sum(_numel(a.shape) for a in view.values())
    for arr in stored.values():
        whole = view[arr.view or arr.path]
        assert _ints(whole.shape) == (*(n for n in _counts(whole, arr)), *_ints(arr.shape))
    inner = [p for p in stored if p.endswith("/fc_0/w") and p.count("repeat_0") == 2]
    if stacked:  # one array of both stacks
        assert inner == ["repeat_0/repeat_0/fc_0/w"]
        assert _ints(stored[inner[0]].shape) == (outer, 2, 8, 8)
    else:  # the inner group is short and outside every stack too: each of the 2 × 2 apart
        assert len(inner) == 4
        arr = stored["repeat_0/1/repeat_0/1/fc_0/w"]
        assert arr.copy == (1, 1) and _ints(arr.shape) == (8, 8)
        assert arr.view == "repeat_0/repeat_0/fc_0/w"


def _counts(whole: paths.Array, arr: paths.Array) -> tuple[int, ...]:
    """The view's leading sizes the stored array was cut along."""
    return _ints(whole.shape)[: len(arr.copy)]


def _numel(shape: tuple) -> int:
    n = 1
    for d in _ints(shape):
        n *= d
    return n


def test_a_group_whose_first_copy_differs_numbers_its_copies_across_runs(
    compile_text: Callable[..., Checked],
) -> None:
    """A group whose first copy changes the shape has two runs; kept apart (convolutions, 3
    copies), its copies are numbered 0, 1, 2 across both, each mapped to its run's array."""
    text = """\
model m:
  input X: 3×8×8
  ×3:
    conv-2d k=3 p=1   4×8×8
  flatten
  fc 2
  output Y
"""
    compiled = compile_text(text)
    stored, view = _arrays(compiled), _arrays(compiled, stacked=True)
    assert [(p, a.view, a.copy) for p, a in stored.items() if p.startswith("repeat_0")] == [
        ("repeat_0/0/conv_2d_0/w", "repeat_0/0/conv_2d_0/w", (0,)),
        ("repeat_0/0/conv_2d_0/b", "repeat_0/0/conv_2d_0/b", (0,)),
        ("repeat_0/1/conv_2d_0/w", "repeat_0/1/conv_2d_0/w", (0,)),
        ("repeat_0/1/conv_2d_0/b", "repeat_0/1/conv_2d_0/b", (0,)),
        ("repeat_0/2/conv_2d_0/w", "repeat_0/1/conv_2d_0/w", (1,)),
        ("repeat_0/2/conv_2d_0/b", "repeat_0/1/conv_2d_0/b", (1,)),
    ]
    assert _ints(view["repeat_0/0/conv_2d_0/w"].shape) == (1, 3, 3, 3, 4)
    assert _ints(view["repeat_0/1/conv_2d_0/w"].shape) == (2, 3, 3, 4, 4)


@pytest.mark.parametrize(
    ("body", "count", "apart"),
    [
        ("conv-2d k=3 p=1 c=8", storage.PER_COPY_MAX, True),
        ("conv-2d k=3 p=1 c=8", storage.PER_COPY_MAX + 1, False),
        ("fc 8", storage.PER_COPY_ANY, True),
        ("fc 8", storage.PER_COPY_ANY + 1, False),
    ],
)
def test_what_is_short_depends_on_the_body(
    compile_text: Callable[..., Checked], body: str, count: int, apart: bool
) -> None:
    shape = "8×8×8" if body.startswith("conv") else "8"
    text = f"model m:\n  input X: {shape}\n  ×{count}:\n    {body}\n  output Y\n"
    compiled = compile_text(text)
    assert compiled is not None
    (group,) = [i for i in compiled.root if isinstance(i, GroupInst) and i.copies]
    assert storage.per_copy(group) is apart
    stacks = {_ints(a.stack) for a in _arrays(compiled).values()}
    assert stacks == ({()} if apart else {(count,)})


@pytest.mark.parametrize(
    ("body", "checkpointed"),
    [("conv-2d k=3 p=1 c=8\n    relu", False), ("fc 8\n    relu", True)],
)
def test_copies_of_convolutions_run_without_the_checkpoint_on_a_cpu(
    compile_text: Callable[..., Checked], body: str, checkpointed: bool
) -> None:
    # XLA:CPU planned the same memory for a convolution group's copies either way, and the
    # checkpoint cost compile and step time; a transformer's copies keep it (and accelerators
    # keep it for every group: the runtime's each_copy)
    shape = "8×8×8" if body.startswith("conv") else "8"
    text = f"model m:\n  input X: {shape}\n  ×2:\n    {body}\n  output Y\n"
    compiled = compile_text(text)
    assert compiled is not None
    (group,) = [i for i in compiled.root if isinstance(i, GroupInst) and i.copies]
    assert storage.per_copy(group) and storage.checkpointed_on_cpu(group) is checkpointed
    from lbdl_dsl.backends.jax.codegen import generate  # the call the generator writes

    call = next(line for line in generate(compiled).splitlines() if "= each_copy(" in line)
    assert call.endswith(", 0, 2)" if checkpointed else ", 0, 2, remat_on_cpu=False)"), call


def test_experts_stay_stacked_and_so_does_what_is_inside_them() -> None:
    """The fixture's second mixture sits in a ×2 frame: the frame keeps its two copies apart,
    each copy's experts stay stacked."""
    compiled = compile_spec(REPO / "tests" / "fixtures" / "experts" / "experts.lbdl")
    stored = _arrays(compiled)
    w = "experts_0/expert/ffn_0/residual_0/fc_0/w"
    for k in (0, 1):
        arr = stored[f"repeat_0/{k}/{w}"]
        assert arr.stack_roles == ("experts",) and _ints(arr.stack) == (3,)
        assert (arr.view, arr.copy) == (f"repeat_0/{w}", (k,))
    assert _ints(_arrays(compiled, stacked=True)[f"repeat_0/{w}"].shape)[:2] == (2, 3)


def test_the_compiler_names_arrays_one_way_whatever_the_backend_stores() -> None:
    """ResNet-50's groups are short, ResNet-101's third is long: the JAX module stores the one
    apart and the other stacked, but the compiler's names are stacked for both, so the paths
    the two share are the same (``lbdl diff`` carries every shared array)."""
    a = _arrays(compile_spec(REPO / "specs" / "resnet50.lbdl"), stacked=True)
    b = _arrays(compile_spec(REPO / "specs" / "resnet101.lbdl"), stacked=True)
    assert set(a) == set(b)
    assert all(not any(part.isdigit() for part in p.split("/")) for p in a)
    assert storage.cut(compile_spec(REPO / "specs" / "resnet50.lbdl").root)
