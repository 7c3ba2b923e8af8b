"""A random sample's parameters made on the devices.

For a sampled chunk the host sends O(axes + table sizes) values, not one per
configuration: each device makes the chunk's draws from its first index
(`kernels.draws`, the same bits as the host's `Sample.uniforms`) and turns
them into parameters itself.

- A discrete dimension (choices, or an integer range of at most
  `sample.MAX_TABLE` values) becomes an extra trailing axis of the host's
  parameters: `kernel_params` resolves every value once (catalog and preset
  look-ups included), and a device gathers each configuration's value by its
  drawn position. A parameter that depends on several discrete dimensions
  is a table over all of them.
- A float range (or an integer range too long for a table, floored) draws
  on the device in float32 (`kernels.draws.scaled`), so
  it must reach the kernels as its own value: the parameters it changes must
  equal it. A probe (`DrawPlan.of`) checks that per scenario; where it does
  not hold (a float range of a key the host transforms), the sample is drawn
  on the host instead, with the same generator.

Sobol samples and scenarios with sensitivity outputs are drawn on the host.
A float key's value on the device and in the cube's coordinates (float64 on
the host) come from the same draw and differ by float32 rounding only
(within 1e-6 relative); a key of an integer range too long for a table can
land one unit off the coordinate where the draw sits on a boundary.
"""
from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from kernels import draws
from sweep.engine.params import Column, grid_columns
from sweep.scenario.sample import seed_words

MAX_TABLE_ENTRIES = 1 << 22  # a parameter's table over the discrete dimensions, at most


@dataclasses.dataclass(frozen=True)
class DrawPlan:
    """How a sample's dimensions reach the kernels (static: part of the
    compiled expansion's signature)."""
    discrete: tuple[int, ...]  # sampled dimensions on the trailing table axes, in order
    floats: tuple[tuple, ...]  # (dimension, low, span, log, integer top or None): drawn in float32
    identity: tuple[tuple[str, int], ...]  # (parameter, dimension): the parameter is that float draw

    @staticmethod
    def of(spec, model, params_of) -> "DrawPlan | None":
        """The plan for `spec`'s sample, or None where the devices cannot
        draw it. `params_of(columns)` is the host's column -> parameter map."""
        sample = spec.sample
        if sample is None or sample.method != "random":
            return None
        dims = sample.dimensions
        discrete = tuple(d for d, dim in enumerate(dims) if dim.discrete)
        if any(math.prod(dims[d].count for d in discrete[:i + 1]) > MAX_TABLE_ENTRIES for i in range(len(discrete))):
            return None
        floats = tuple(d for d in range(len(dims)) if d not in discrete)
        identity = []
        for d in floats:
            dim = dims[d]
            low, high = _probe(spec, dims, d, dim.low, params_of), _probe(spec, dims, d, dim.high, params_of)
            changed = [name for name in low if not np.array_equal(low[name], high[name])]
            for name in changed:
                if not (np.all(low[name] == np.float32(dim.low)) and np.all(high[name] == np.float32(dim.high))):
                    return None  # the host transforms this key: draw there
                identity.append((name, d))
        return DrawPlan(discrete, tuple(_scaling(d, dims[d]) for d in floats), tuple(identity))


def _scaling(d: int, dim) -> tuple:
    """(dimension, low, span, log, integer top or None) for `kernels.draws.scaled`,
    as `Dimension.values` maps a uniform draw (integers: [low, high + 1), floored)."""
    high = dim.high + 1 if dim.integer else dim.high
    span = math.log(high / dim.low) if dim.scale == "log" else high - dim.low
    return (d, dim.low, span, dim.scale == "log", dim.high if dim.integer else None)


def _probe(spec, dims, d: int, value: float, params_of) -> dict:
    """Host parameters with every axis at its first value, float dimension d
    at `value` and the others at their lows, discrete ones at their first."""
    columns = {key: Column((v,), np.zeros(1, np.int64)) for key, v in spec.fixed.items()}
    columns.update({a.key: Column(a.values, np.zeros(1, np.int64)) for a in spec.axes})
    for i, dim in enumerate(dims):
        chosen = value if i == d else (dim.table[0] if dim.discrete else dim.low)
        columns[dim.key] = Column((chosen,), np.zeros(1, np.int64))
    return {name: np.asarray(v) for name, v in params_of(columns).items()}


def host_columns(spec, plan, chunk, draw_plan: DrawPlan) -> dict[str, Column]:
    """The columns of a sampled chunk for `kernel_params`: the grid's over
    the box (the config axis of size 1), one trailing axis per discrete
    dimension holding its whole table, float dimensions at a placeholder
    (the devices draw them)."""
    tables = len(draw_plan.discrete)
    box = plan.padded_box_shape()
    index = plan.indices(chunk)
    trailing = (1,) * tables
    columns = grid_columns(spec, {a.key: index[i].reshape(index[i].shape + trailing) for i, a in enumerate(spec.axes)},
                           (1,) * (len(box) + tables))
    dims = spec.sample.dimensions
    for j, d in enumerate(draw_plan.discrete):
        shape = [1] * (len(box) + tables)
        shape[len(box) + j] = dims[d].count
        columns[dims[d].key] = Column(dims[d].table, np.arange(dims[d].count).reshape(shape))
    for d, *_ in draw_plan.floats:
        columns[dims[d].key] = Column((dims[d].low,), np.zeros((1,) * (len(box) + tables), np.int64))
    return columns


def chunk_words(spec, chunk) -> np.ndarray:
    """[seed low, seed high, first index low, first index high, last offset]
    of a sampled chunk, uint32: all a device needs to make its draws."""
    first, last = chunk.box[-1].indices(spec.sample.n)[:2]
    return np.asarray([*seed_words(spec.sample.seed), first & 0xFFFFFFFF, first >> 32, last - 1 - first], np.uint32)


def thresholds(spec, draw_plan: DrawPlan) -> tuple[np.ndarray, ...]:
    """Per discrete dimension its thresholds (`Dimension.thresholds`), int32."""
    return tuple(spec.sample.dimensions[d].thresholds().astype(np.int32) for d in draw_plan.discrete)


def sampler(limits, words, box: tuple[int, ...], draw_plan: DrawPlan):
    """For `sweep.engine.evaluate.expand` (traced there): the chunk's draws
    made from `words` (`chunk_words`), and a function that turns one host
    parameter (name, value, its host shape) into one that broadcasts over the
    box: discrete dimensions gathered from the host's table by drawn position
    (`limits`: their thresholds), float dimensions scaled in float32."""
    seed = (words[0], words[1])
    low, high = draws.chunk_indices(words[2], words[3], words[4], box[-1])
    position = [draws.positions(jnp, draws.words(jnp, seed, d, low, high), limit).astype(jnp.int32)
                for d, limit in zip(draw_plan.discrete, limits)]
    drawn = {}
    for d, start, span, log, top in draw_plan.floats:
        x = draws.scaled(draws.words(jnp, seed, d, low, high), start, span, log)
        drawn[d] = x if top is None else jnp.minimum(jnp.floor(x), jnp.float32(top))
    identity = dict(draw_plan.identity)

    def sampled(name: str, value, shape: tuple[int, ...]):
        if name in identity:
            return drawn[identity[name]].reshape((1,) * (len(box) - 1) + (box[-1],))
        if any(n > 1 for n in shape[len(box):]):
            at = tuple(p if n > 1 else 0 for p, n in zip(position, shape[len(box):]))
            return value[(Ellipsis, 0, *at)]  # [..., box[-1]]: the config axis gathered
        return value.reshape(shape[:len(box)])

    return sampled
