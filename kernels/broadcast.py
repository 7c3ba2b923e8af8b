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


def over_box(value, box: tuple[int, ...], length: int):
    """A chunk parameter that varies along its box's axes (any shape that
    broadcasts to `box`) as the chunk's `length` configurations: broadcast,
    flattened in C order, padded by repeating the last configuration."""
    flat = jnp.broadcast_to(value, box).reshape(-1)
    if length > flat.size:
        flat = jnp.concatenate([flat, jnp.broadcast_to(flat[-1:], (length - flat.size,))])
    return flat
