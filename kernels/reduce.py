"""Statistics of a sweep's outputs, accumulated chunk by chunk on the device.

A chunk is a box of the result cube (`sweep.engine.plan`): per dimension a
start and a length, configurations in C order. Every configuration falls in
one *cell* of the dimensions that remain after the reduction and has a
position (its index on each reduced dimension). The accumulators, one set
per output, hold per cell:

- `min` / `max`: the extreme value (`max` stored negated, so both are a
  scatter-min), and with `argmin` / `argmax` the position of the first
  configuration that reaches it, in C order of the reduced dimensions (what
  numpy's argmin returns): compared word by word, one word per reduced
  dimension and two (high and low 30 bits) for a sample's `config` index,
  so no position needs more than int32;
- `sum`: a compensated (Kahan) sum over chunks of each chunk's float32 sum;
- `hist`: counts in logarithmic bins of relative width `accuracy` (DDSketch's
  bins: Masson, Rim and Lee, VLDB 2019), for quantiles; one int32 word, or two
  (low 30 bits and carries) when a cell can count 2**31 or more.

Pure functions of arrays; the host (`sweep.engine.reducer`) builds the shape,
the boxes and reads the statistics out.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

WORD_BITS = 30
LOW = (1 << WORD_BITS) - 1
NONE = np.iinfo(np.int32).max  # the position of a cell nothing reached yet
SMALLEST = 1e-18  # |x| below this counts as 0 in the histogram; the bins span SMALLEST..1/SMALLEST


class ReduceShape(NamedTuple):
    """What decides the accumulators' layout: static, one compile per sweep."""
    reduced: tuple[bool, ...]  # per cube dimension
    config_dim: int  # the sampled `config` dimension, -1 if none
    strides: tuple[int, ...]  # per cube dimension: its stride among the cells (0 when reduced)
    cells: int
    statistics: frozenset  # of "min", "max", "argmin", "argmax", "sum", "hist"
    accuracy: float
    hist_words: int  # 1 or 2
    box_dims: tuple[int, ...]  # the cube dimension along each axis of a chunk's box (the rest are fixed)
    box_shape: tuple[int, ...]  # every chunk's box, its first axis padded to full length

    @property
    def words(self) -> int:
        """Position words per configuration."""
        return sum(2 if d == self.config_dim else 1 for d, r in enumerate(self.reduced) if r)


class Box(NamedTuple):
    """One chunk's place in the cube (dynamic: chunks of a sweep share a compile)."""
    starts: jax.Array  # [D] int32; for the `config` dimension, its low 30 bits
    start_high: jax.Array  # [] int32: the `config` start's bits above 30
    size: jax.Array  # [] int32: configurations in the box (the rest is padding)


def bins(accuracy: float) -> tuple[float, int, int]:
    """(log gamma, lowest exponent, bins per sign) of the histogram."""
    log_gamma = math.log((1 + accuracy) / (1 - accuracy))
    lowest = math.floor(math.log(SMALLEST) / log_gamma)
    per_sign = math.ceil(-math.log(SMALLEST) / log_gamma) - lowest + 1
    return log_gamma, lowest, per_sign


def layout(shape: ReduceShape, outputs: tuple[str, ...]) -> dict:
    """Per output, per accumulator: (shape, dtype, initial value)."""
    own = {}
    for stat in ("min", "max"):
        if stat in shape.statistics:
            own[stat] = ((shape.cells,), np.float32, np.inf)
            if "arg" + stat in shape.statistics:
                own["arg" + stat] = ((shape.words, shape.cells), np.int32, NONE)
    if "sum" in shape.statistics:
        own["sum"] = ((shape.cells,), np.float32, 0)
        own["carry"] = ((shape.cells,), np.float32, 0)  # Kahan's compensation
    if "hist" in shape.statistics:
        own["hist"] = ((shape.hist_words, shape.cells, 2 * bins(shape.accuracy)[2] + 1), np.int32, 0)
    return {name: own for name in outputs}


def init(shape: ReduceShape, outputs: tuple[str, ...]) -> dict:
    """Empty accumulators, as host (NumPy) arrays."""
    return {name: {stat: np.full(size, value, dtype) for stat, (size, dtype, value) in own.items()}
            for name, own in layout(shape, outputs).items()}


def _first_minimum(best, best_at, x, cell, words, valid):
    """Scatter-min of x into `best`; with `best_at`, the lexicographically
    first position reaching the minimum, over the old and the new candidates."""
    new = best.at[cell].min(x, mode="drop")
    if best_at is None or words is None:
        return new, None
    keep = best == new  # the old optimum is still among the best
    candidate = valid & (x == new[cell])
    chosen = []
    for w, word in enumerate(words):
        first = jnp.where(keep, best_at[w], NONE).at[cell].min(jnp.where(candidate, word, NONE), mode="drop")
        keep = keep & (best_at[w] == first)
        candidate = candidate & (word == first[cell])
        chosen.append(first)
    return new, jnp.stack(chosen)


def histogram_bin(x, accuracy: float):
    """Bin index of each x: negative bins, zero, positive bins, in value order."""
    log_gamma, lowest, per_sign = bins(accuracy)
    magnitude = jnp.abs(x)
    k = jnp.clip(jnp.ceil(jnp.log(jnp.maximum(magnitude, SMALLEST)) / log_gamma).astype(jnp.int32) - lowest,
                 0, per_sign - 1)
    return jnp.where(magnitude < SMALLEST, per_sign, jnp.where(x > 0, per_sign + 1 + k, per_sign - 1 - k))


def _blocks(shape: ReduceShape, box: Box, length: int):
    """A chunk seen as a [K, R] block: its box with the kept axes first and
    the reduced axes last (each row one cell), so min, max, their first
    positions and sums reduce densely along R; returns (to_block, cell [K],
    valid rows [K], valid entries [K, R], words(r) -> list of [K] int32)."""
    dims, box_shape = shape.box_dims, shape.box_shape
    kept = [j for j, d in enumerate(dims) if not shape.reduced[d]]
    reduced = [j for j, d in enumerate(dims) if shape.reduced[d]]
    order = kept + reduced
    rows = math.prod(box_shape[j] for j in kept)
    size = math.prod(box_shape)

    def to_block(x):
        return jnp.transpose(x[:size].reshape(box_shape), order).reshape(rows, -1)

    valid = to_block(jnp.arange(length, dtype=jnp.int32) < box.size)
    kept_shape = tuple(box_shape[j] for j in kept)
    axis = {dims[j]: i for i, j in enumerate(kept)}
    cell = jnp.zeros((), jnp.int32)
    for d, r in enumerate(shape.reduced):
        if r:
            continue
        index = box.starts[d] + (jax.lax.broadcasted_iota(jnp.int32, kept_shape, axis[d]) if d in axis else 0)
        if d == shape.config_dim:
            index = ((box.start_high + (index >> WORD_BITS)) << WORD_BITS) + (index & LOW)
        cell = cell + index * shape.strides[d]
    cell = jnp.broadcast_to(cell, kept_shape).reshape(rows)
    valid_rows = jnp.any(valid, axis=1)
    cell = jnp.where(valid_rows, cell, shape.cells)

    def words(r):
        """Position words of flat index r (C order over the reduced box axes)."""
        offset, stride = {}, 1
        for j in reversed(reduced):
            offset[dims[j]] = (r // stride) % box_shape[j]
            stride *= box_shape[j]
        out = []
        for d, red in enumerate(shape.reduced):
            if not red:
                continue
            index = box.starts[d] + offset.get(d, jnp.zeros(rows, jnp.int32))
            if d == shape.config_dim:
                out += [box.start_high + (index >> WORD_BITS), index & LOW]
            else:
                out.append(index)
        return out

    return to_block, cell, valid_rows, valid, words


def accumulate(acc: dict, outputs: dict, box: Box, shape: ReduceShape):
    """Fold one chunk's outputs ([C] each) into the accumulators; also
    whether any valid configuration gave a non-finite value. A box is a
    product of ranges in C order, so positions and cells come from iotas
    along its axes (`_blocks`): no division per configuration."""
    length = next(iter(outputs.values())).shape[-1]
    to_block, cell, valid_rows, valid, words = _blocks(shape, box, length)
    bad = jnp.zeros((), bool)
    new = {}
    for name, own in acc.items():
        x = outputs[name].astype(jnp.float32)
        block = to_block(x)
        bad = bad | jnp.any(valid & ~jnp.isfinite(block))
        out = {}
        for stat, sign in (("min", 1.0), ("max", -1.0)):
            if stat in own:
                masked = jnp.where(valid, sign * block, jnp.inf)
                least = jnp.min(masked, axis=1)
                first = None
                if "arg" + stat in own:  # a plain min of positions vectorises; XLA's argmin (a pair reduce) does not
                    column = jax.lax.broadcasted_iota(jnp.int32, masked.shape, 1)
                    first = words(jnp.min(jnp.where(masked == least[:, None], column, masked.shape[1]), axis=1))
                out[stat], at = _first_minimum(own[stat], own.get("arg" + stat), least, cell, first, valid_rows)
                if at is not None:
                    out["arg" + stat] = at
        if "sum" in own:
            chunk_sum = jnp.zeros_like(own["sum"]).at[cell].add(jnp.sum(jnp.where(valid, block, 0.0), axis=1),
                                                                mode="drop")
            y = chunk_sum - own["carry"]
            total = own["sum"] + y
            out["carry"] = (total - own["sum"]) - y
            out["sum"] = total
        if "hist" in own:
            entry_cell = jnp.where(valid, cell[:, None], shape.cells)  # padding: dropped
            low = own["hist"][0].at[entry_cell, histogram_bin(block, shape.accuracy)].add(1, mode="drop")
            if shape.hist_words == 2:
                high = own["hist"][1] + (low >> WORD_BITS)
                out["hist"] = jnp.stack([low & LOW, high])
            else:
                out["hist"] = low[None]
        new[name] = out
    return new, bad
