"""Hard and smooth maxima.

Sweeps take the hard max. Fitting can take a smooth one instead, so that the
branch that loses a max still passes a gradient (a hard max gives exactly
zero to it, and a fit whose parameter only acts there stalls):

    smax_T(a, b) = T * log(exp(a / T) + exp(b / T))

which is >= max(a, b), exceeds it by at most T * log 2 (at a tie), and tends
to it as the temperature T [s] goes to 0.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from kernels.broadcast import lead


def maximum(a, b, temperature=None):
    """max(a, b), or its smooth version at `temperature` (broadcasts)."""
    if temperature is None:
        return jnp.maximum(a, b)
    t = lead(temperature, max(jnp.ndim(a), jnp.ndim(b)))  # [C] against e.g. [n, C]
    return t * jnp.logaddexp(a / t, b / t)


@jax.custom_jvp
def select_max(a, b):
    """max(a, b) as `a > b ? a : b`: one compare and select, which x86
    compiles to one `maxps`, where jnp.maximum (IEEE 754 maximum: NaN and
    signed zeros) takes several instructions. The same value but for a NaN
    in `a` (it gives `b`; the host's checks keep every duration finite) and
    for the sign of a zero; the same derivative as jnp.maximum (ties split
    evenly), so sensitivities do not depend on which one a program took."""
    a, b = _operands(a, b)
    return jax.lax.select(jax.lax.gt(a, b), a, b)


def _operands(a, b):
    """a and b as arrays of one dtype and shape (lax takes no broadcasting)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    dtype = jnp.result_type(a, b)
    shape = jnp.broadcast_shapes(a.shape, b.shape)
    return (jax.lax.broadcast_in_dim(x.astype(dtype), shape, tuple(range(len(shape) - x.ndim, len(shape))))
            for x in (a, b))


@select_max.defjvp
def _select_max_jvp(primals, tangents):
    a, b = _operands(*primals)
    da, db = _operands(*tangents)
    out = jax.lax.select(jax.lax.gt(a, b), a, b)
    return out, da * _share(a, out, b) + db * _share(b, out, a)


def _share(x, out, y):
    """The weight of operand x in max's derivative, as JAX's own rule for
    `lax.max`: 1 where it is the maximum, 1/2 where both are."""
    one, zero = jnp.ones_like(out), jnp.zeros_like(out)
    return jax.lax.select(jax.lax.eq(x, out), one, zero) / jax.lax.select(jax.lax.eq(y, out), one + one, one)


def later(a, b, temperature=None):
    """`maximum` for code that unrolls one max per task or slot (straight-line
    code, the channel's step): the hard max as `select_max`, which made
    ResNet-50's unrolled programs a third faster on a CPU. Elsewhere
    jnp.maximum traces and compiles faster (a custom derivative costs about
    twice the trace of a primitive), and its speed does not matter."""
    return select_max(a, b) if temperature is None else maximum(a, b, temperature)


def max_along(x, axis: int, temperature=None):
    """max over `axis`, or T * logsumexp(x / T) over it (T [C] broadcasts
    against x with configurations on its last axis)."""
    if temperature is None:
        return jnp.max(x, axis=axis)
    return temperature * logsumexp(x / lead(temperature, jnp.ndim(x)), axis=axis)
