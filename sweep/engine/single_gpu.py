"""The single-GPU time of a chunk, evaluated over the values it depends on.

Speedup, scaling efficiency and exposed communication compare with the
iteration when communication is free (`kernels.iteration.single_gpu_time`),
a second evaluation of the DAG's program. For an unrolled program that
costs as much as the iteration itself, yet it reads only some of the
parameters: never the links, and on a grid usually only the batch and the
compute keys. A chunk's parameters reach the devices compact, each varying
only along the box axes of the keys it depends on (`sweep.engine.evaluate.expand`),
so the single-GPU time is evaluated once per combination of the values of
the parameters it reads and broadcast to the chunk's configurations, where
that is at most 1/`FEWER` of them. Which parameters it reads is found by
tracing it (`reads`), not by a list kept by hand.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from kernels.broadcast import over_box
from kernels.iteration import single_gpu_time
from sweep.engine.params import unpack

FEWER = 8  # evaluate compact when that is at most 1/FEWER of the chunk's configurations
_READS: dict = {}  # (compiled DAG, fixed_buckets, parameter names) -> the names read


def reads(dag, fixed_buckets: bool, layout: tuple) -> frozenset:
    """Names of the parameters (of `expand`'s `layout`) that
    `single_gpu_time` reads for `dag`: the inputs its traced program uses,
    by a backward walk over the jaxpr (an equation with a used output uses
    all its inputs, so the answer may name more, never fewer). Cached."""
    names = tuple(sorted(name for name, *_ in layout))
    key = (dag, fixed_buckets, names)
    if key not in _READS:
        integer = {name: i for name, _, i, _ in layout}
        example = {name: jnp.zeros((1,), jnp.int32 if integer[name] else jnp.float32) for name in names}
        jaxpr = jax.make_jaxpr(lambda p: single_gpu_time(dag, p, fixed_buckets))(example).jaxpr
        used = {v for v in jaxpr.outvars if not isinstance(v, Literal)}
        for eqn in reversed(jaxpr.eqns):
            if any(v in used for v in eqn.outvars):
                used.update(v for v in eqn.invars if not isinstance(v, Literal))
        _READS[key] = frozenset(name for name, var in zip(names, jaxpr.invars) if var in used)  # dicts flatten sorted
    return _READS[key]


def compact_shape(layout: tuple, varying: frozenset, read: frozenset) -> tuple[int, ...]:
    """The box shape the parameters `read` vary over (() when none does)."""
    return tuple(np.broadcast_shapes(*(shape for name, shape, _, _ in layout if name in read and name in varying)))


def plan(dag, fixed_buckets: bool, static: dict) -> frozenset | None:
    """The parameters to evaluate a chunk's single-GPU time over (`compact`),
    given `expand`'s static arguments; None where it is evaluated with the
    rest: a contracted program (its single-GPU time is cheap), a sample
    drawn on the devices (its values are per configuration), or a chunk
    with too few repeats."""
    if dag.lowered.mode != "unrolled" or static["draw_plan"] is not None:
        return None
    read = reads(dag, fixed_buckets, static["layout"])
    if math.prod(compact_shape(static["layout"], static["varying"], read)) * FEWER > static["length"]:
        return None
    return read


@functools.partial(jax.jit, static_argnames=("layout", "box", "length", "sharding", "varying", "read",
                                             "fixed_buckets"))
def compact(dag, floats, ints, layout: tuple, box: tuple, length: int, sharding, varying: frozenset,
            read: frozenset, fixed_buckets: bool):
    """A chunk's single-GPU time [length], from `expand`'s packed buffers:
    the parameters `read` broadcast over the box shape they vary over, one
    configuration each of that shape, the others a single value (unread),
    then broadcast to the chunk."""
    shape = compact_shape(layout, varying, read)
    params = {}
    for (name, *_), value in zip(layout, unpack(floats, ints, layout)):
        params[name] = jnp.broadcast_to(value, shape).reshape(-1) if name in read and name in varying \
            else value.reshape(-1)[:1]
    t = jnp.broadcast_to(single_gpu_time(dag, params, fixed_buckets), (math.prod(shape),)).reshape(shape)
    return jax.lax.with_sharding_constraint(over_box(t, box, length), sharding)
