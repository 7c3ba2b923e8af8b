"""Explicit broadcasting of per-configuration values (configurations on the last axis).

The kernels mix [C] per-configuration values with [S, C] (or [S, 1]) per-slot
or per-task arrays. NumPy would add the leading axes silently; the tests run
with JAX's rank promotion raising, so the kernels add them here, on purpose.
"""
from __future__ import annotations

import jax.numpy as jnp


def lead(x, ndim: int):
    """`x` with leading unit axes up to `ndim` axes ([C] -> [1, C] for ndim 2);
    scalars and arrays already that deep are returned as they are."""
    extra = ndim - jnp.ndim(x)
    return jnp.expand_dims(x, tuple(range(extra))) if extra > 0 and jnp.ndim(x) else x
