"""A model on a device mesh: shardings, a sharded init, sharded batches, a sharded step.

The compiler's pass (`compiler.sharding`) says where each parameter axis lives; this module
turns that table into ``jax.sharding.NamedSharding``s on a ``jax.sharding.Mesh`` whose axes are
all ``Auto`` (GSPMD: XLA propagates shardings from the arguments through the whole program, so
the model's code never mentions a mesh). Everything here plugs into a training loop from
outside: ``params``/``state`` shardings, the optimiser state's (`opt_state`, through optax's
own map over parameter-shaped state), the batch's, `init` (each device draws only its own
blocks of the very numbers ``model.init`` draws: a full replica never exists), `put_batch`
(each process gives its own rows), and `jit_step`.

``Sharded.of(model, "data=2,fsdp=2", ["fsdp"])`` builds one for a `Model`; the JSON-free
pieces work on the generated module's tables too (``PARAMS``, ``STATE``). The compiler's layout
names the logical arrays; the module may keep a short ×N group's copies apart (`storage`), and
each copy then lives as its logical array does, less the stacked axes it was cut from (`specs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from lbdl_dsl.backends.jax import shard_init, storage
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.backends.jax.xla_options import step_options
from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.sharding import (
    Layout,
    MeshSpec,
    Placement,
    parse_mesh,
    parse_rules,
    resolve,
)
from lbdl_dsl.core.errors import LbdlError


def make_mesh(spec: MeshSpec, devices: Sequence[Any] | None = None) -> Mesh:
    """The mesh ``spec`` names, over ``devices`` (default: every device of every process)."""
    found = list(devices) if devices is not None else jax.devices()
    if len(found) != spec.devices:
        kind = found[0].platform if found else "no"
        raise LbdlError(
            f"--mesh {spec}: needs {spec.devices} devices, and there are {len(found)} "
            f"({kind}, over {jax.process_count()} process(es))",
            None,
            hint="make the sizes multiply to the number of devices; on a CPU, try "
            f"JAX_NUM_CPU_DEVICES={spec.devices}, or `lbdl launch -n N --devices-per-process K`",
        )
    axis_types = (AxisType.Auto,) * len(spec.axes)
    return jax.make_mesh(spec.shape, spec.names, axis_types=axis_types, devices=found)


def partition_spec(spec: tuple[str | tuple[str, ...] | None, ...]) -> PartitionSpec:
    return PartitionSpec(*spec)


@dataclass(frozen=True)
class Sharded:
    """A layout on a concrete mesh; see the module docstring."""

    mesh: Mesh
    layout: Layout
    stored: tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]]]  # params, state → specs

    @classmethod
    def of(
        cls,
        model: Any,
        mesh: str | MeshSpec,
        shard: Sequence[str] = (),
        devices: Sequence[Any] | None = None,
    ) -> Sharded:
        """``model`` (a `Model`) on ``mesh`` (``"data=2,fsdp=2"``) by ``shard`` (``["fsdp"]``)."""
        spec = parse_mesh(mesh) if isinstance(mesh, str) else mesh
        layout = resolve(model.checked, spec, parse_rules(list(shard), spec))
        stored = stored_specs(layout, storage.cut(model.checked.root))
        _same_tables(stored, model.module["PARAMS"], model.module["STATE"])
        return cls(make_mesh(spec, devices), layout, stored)

    # -- shardings ------------------------------------------------------------------------------
    def named(self, path: str) -> NamedSharding:
        params, state = self.stored
        return NamedSharding(
            self.mesh, partition_spec(params[path] if path in params else state[path])
        )

    @property
    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())

    def params(self) -> dict[str, Any]:
        """The params pytree's shardings, nested as ``init`` nests the arrays."""
        return unflatten({p: self.named(p) for p in self.stored[0]})

    def state(self) -> dict[str, Any]:
        return unflatten({p: self.named(p) for p in self.stored[1]})

    def batch(self, ndim: int) -> NamedSharding:
        """An input's sharding: its leading (batch) axis over the batch axes, the rest whole."""
        axes = self.layout.batch
        lead = None if not axes else axes[0] if len(axes) == 1 else axes
        return NamedSharding(self.mesh, PartitionSpec(lead, *([None] * (ndim - 1))))

    def opt_state(self, tx: Any, params: Any) -> Any:
        """Shardings of ``tx``'s state: moments placed like their parameters (optax's own map
        over parameter-shaped state), counters replicated."""
        import optax

        abstract = jax.eval_shape(tx.init, params)
        return optax.tree_map_params(
            tx,
            lambda _, sharding: sharding,
            abstract,
            self.params(),
            transform_non_params=lambda _: self.replicated,
        )

    # -- arrays ---------------------------------------------------------------------------------
    def init(self, model: Any, key: jax.Array) -> tuple[dict[str, Any], dict[str, Any]]:
        """``model.init(key)``'s very numbers, each device drawing only its own blocks."""
        data = np.asarray(jax.random.key_data(key))
        if data.ndim != 1:
            raise ValueError(f"init takes one key, not {data.shape[:-1]} of them")
        out = []
        for table in (model.module["PARAMS"], model.module["STATE"]):
            stream = shard_init.Stream(data)
            starts = shard_init.offsets(table)
            arrays = {
                path: _from_blocks(self.named(path), entry, stream, starts[path])
                for path, entry in table.items()
            }
            out.append(unflatten(arrays))
        return out[0], out[1]

    def replicate(self, value: Any) -> jax.Array:
        """A value every process holds the same of (a step count, a key), on every device of
        the mesh; from host data, as ``device_put`` cannot reach other processes' devices."""
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            impl = jax.random.key_impl(value)
            data = self.replicate(jax.random.key_data(value))
            wrap = jax.jit(
                lambda d: jax.random.wrap_key_data(d, impl=impl), out_shardings=self.replicated
            )
            wrapped: jax.Array = wrap(data)
            return wrapped
        host = np.asarray(value)
        return jax.make_array_from_callback(host.shape, self.replicated, lambda _: host)

    def init_opt_state(self, tx: Any, params: Any) -> Any:
        """``tx.init(params)``, made directly in its shardings."""
        return jax.jit(tx.init, out_shardings=self.opt_state(tx, params))(params)

    def put_batch(self, arrays: Sequence[np.ndarray]) -> list[jax.Array]:
        """Global batch arrays from this process's rows (all of them in a single process):
        process ``i`` of ``n`` gives rows ``i·b/n ... (i+1)·b/n`` of a global batch ``b``."""
        out = []
        for a in arrays:
            a = np.asarray(a)
            sharding = self.batch(a.ndim)
            global_shape = (a.shape[0] * jax.process_count(), *a.shape[1:])
            pieces = self.layout.batch_pieces
            if global_shape[0] % pieces:
                raise LbdlError(
                    f"a batch of {global_shape[0]} does not split over {pieces} batch shards "
                    f"({', '.join(self.layout.batch)})",
                    None,
                    hint=f"use a global batch that is a multiple of {pieces}",
                )
            out.append(jax.make_array_from_process_local_data(sharding, a, global_shape))
        return out

    def jit_step(
        self,
        step: Callable[..., Any],
        state_shardings: Any,
        batch_shardings: Any,
        donate: bool = True,
    ) -> Callable[..., Any]:
        """``step(state, batch) -> (state, metrics)`` jitted with the state kept in its
        shardings, the batch split, and the metrics replicated (read on every process). A step
        jitted already (`training.step.make_train_step`'s) is jitted again from its function: JAX
        takes compiler options (`xla_options`) only on the outer jit."""
        return jax.jit(
            getattr(step, "__wrapped__", step),
            in_shardings=(state_shardings, batch_shardings),
            out_shardings=(state_shardings, self.replicated),
            donate_argnums=(0,) if donate else (),
            compiler_options=step_options(self.mesh.devices.flat[0].platform),
        )


def restore_target(like: Any, shardings: Any) -> Any:
    """What orbax restores into: ``like``'s shapes and types (arrays, or a checkpoint's own
    metadata) in ``shardings`` (a pytree of the same structure, or one sharding for all). A
    checkpoint written on one mesh, by any number of processes, comes back on another so."""
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree.map(lambda _: shardings, like)
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(tuple(a.shape), a.dtype, sharding=s), like, shardings
    )


def _from_blocks(
    sharding: NamedSharding,
    entry: tuple[tuple[int, ...], str, float],
    stream: shard_init.Stream,
    offset: int,
) -> jax.Array:
    """A global array whose addressable blocks are drawn once each (replicas share one)."""
    shape = tuple(entry[0])
    cache: dict[tuple[tuple[int, int], ...], np.ndarray] = {}

    def callback(index: tuple[slice, ...] | None) -> np.ndarray:
        norm = tuple(s.indices(n)[:2] for s, n in zip(index or (slice(None),) * len(shape), shape))
        if norm not in cache:
            cache[norm] = shard_init.block(stream, entry, offset, index)
        return cache[norm]

    return jax.make_array_from_callback(shape, sharding, callback, dtype=jnp.float32)


def stored_specs(
    layout: Layout, cut: paths.Cut
) -> tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]]]:
    """The partition spec of each parameter and state array as the module stores it: a copy
    kept apart lives as its logical array does, less the stacked axes it was cut from."""
    copies: dict[str, list[tuple[str, int]]] = {}
    for path, (logical, index, _shape) in cut.items():
        copies.setdefault(logical, []).append((path, len(index)))

    def expand(table: dict[str, Placement]) -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {}
        for path, placement in table.items():
            for stored, lead in copies.get(path, [(path, 0)]):
                if any(axis is not None for axis in placement.spec[:lead]):
                    group = path.rsplit("/", 2)[0]
                    raise LbdlError(
                        f"--shard: the copies of the ×N group `{group}` are stored one at a "
                        f"time by the JAX backend (a short group), so `{path}`'s layers axis "
                        f"cannot be split over {placement.spec[0]}",
                        placement.span,
                        hint="leave the layers axis whole (no `layers=` rule) and split "
                        "another axis, e.g. --shard fsdp",
                    )
                out[stored] = tuple(placement.spec[lead:])
        return out

    return expand(layout.params), expand(layout.state)


def _same_tables(
    stored: tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]]],
    params: dict[str, tuple[tuple[int, ...], str, float]],
    state: dict[str, tuple[tuple[int, ...], str, float]],
) -> None:
    """The compiler's arrays, as the module stores them, are the module's, path for path
    (our bug if not: the walks of the instance tree have drifted apart)."""
    ours = (sorted(stored[0]), sorted(stored[1]))
    theirs = (sorted(params), sorted(state))
    if ours != theirs:
        raise AssertionError(f"sharding tables differ from the module's: {ours} != {theirs}")
