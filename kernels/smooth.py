"""Hard and smooth maxima.

Sweeps take the hard max. Fitting can take a smooth one instead, so that the
branch that loses a max still passes a gradient (a hard max gives exactly
zero to it, and a fit whose parameter only acts there stalls):

    smax_T(a, b) = T * log(exp(a / T) + exp(b / T))

which is >= max(a, b), exceeds it by at most T * log 2 (at a tie), and tends
to it as the temperature T [s] goes to 0.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import logsumexp

from kernels.broadcast import lead


def maximum(a, b, temperature=None):
    """max(a, b), or its smooth version at `temperature` (broadcasts)."""
    if temperature is None:
        return jnp.maximum(a, b)
    t = lead(temperature, max(jnp.ndim(a), jnp.ndim(b)))  # [C] against e.g. [n, C]
    return t * jnp.logaddexp(a / t, b / t)


def max_along(x, axis: int, temperature=None):
    """max over `axis`, or T * logsumexp(x / T) over it (T [C] broadcasts
    against x with configurations on its last axis)."""
    if temperature is None:
        return jnp.max(x, axis=axis)
    return temperature * logsumexp(x / lead(temperature, jnp.ndim(x)), axis=axis)
