"""Runtime library for the JAX backend: one module per family of layers, named as the family's
registry entries (`core/layers/<family>.py`) and lowerings (`lowering/<family>.py`), plus
`inits` (the initial parameters), `module` (a generated module's own plumbing: layouts, keys,
×N groups, nested parameters) and `decode` (the boxes of a decoding module).

The code generator copies the functions of these modules, one by one (together with the
functions they call by name), into the standalone module it emits (`runtime_source.py`).
Every function is therefore a plain top-level ``def`` that only relies on ``jax``,
``jax.numpy as jnp``, ``numpy as np`` and, for ``init_arrays``' threads and memory, ``mmap``,
``os`` and ``concurrent.futures.ThreadPoolExecutor``. A module that calls the functions of
another imports them by name at its top, for its tests and callers; the copy takes only the
functions, so the generated module never imports lbdl. This package imports none of its
modules: import the one you need.

Layout conventions
------------------
The language's shapes are channels-first (as in PyTorch), but generated code keeps spatial
tensors channels-LAST internally because XLA is faster that way:

* images ``(B, H, W, C)``, 1-D signals ``(B, T, C)``, sequences ``(B, T, D)``.

All hyper-parameters (ints, tuples, bools, strings, floats) are expected to be static Python
values; no function inspects array values from Python, so everything is jittable. Each
module's docstring gives its parameters' layouts (user visible).
"""
