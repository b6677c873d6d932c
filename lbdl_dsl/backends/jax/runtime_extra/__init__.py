"""Runtime functions of newer families of boxes, one module per family.

Same rule as `runtime.py`: plain top-level functions that need only ``jax``, ``jax.numpy as
jnp`` and ``numpy as np`` (and may call the functions of `runtime.py` by name), because the code
generator copies each function a model uses into the standalone module it writes. A module
that calls functions of `runtime.py` imports them by name at its top, for its tests; the copy
takes only the functions, so the generated module never imports lbdl.
"""
