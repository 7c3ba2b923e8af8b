"""Split a sweep into chunks: fixed-size boxes of the result cube.

Configurations that share a model, sequence length and iteration count (the
structural keys) share a compiled DAG, so the cube is walked group by group.
Inside a group, a chunk is a box: fixed indices on the leading inner axes, a
range along one axis, and every trailing axis in full, sized to at most
`target` configurations. Boxes map to hyperslabs of the netCDF variables, and
every chunk of a group pads to the same length, so a group compiles once.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from sweep.engine.params import Column, grid_columns
from sweep.graph.compiler import PRIORITY_KEY
from sweep.scenario.spec import Spec, possible_values, resolve_structure, structural_keys


@dataclasses.dataclass(frozen=True)
class Chunk:
    id: int
    structure: dict  # structural key -> value, for this chunk's group
    box: tuple  # per cube dimension: an int, or a slice
    size: int  # configurations in the box
    padded: int  # configurations evaluated (size, padded to the chunk length)


class Plan:
    """The chunks of a sweep, and the columns (scenario values) of each."""

    def __init__(self, spec: Spec, target: int, multiple: int = 1):
        self.spec = spec
        grid = list(spec.axes)
        structural = structural_keys(spec)
        self.group_axes = [i for i, a in enumerate(grid) if a.key in structural]
        self.inner_axes = [i for i, a in enumerate(grid) if a.key not in structural]
        if spec.sample is not None:
            self.inner_axes.append(len(grid))  # the `config` dimension, last
        inner_shape = [spec.shape[i] for i in self.inner_axes]
        # Split along the first inner axis whose trailing block fits the target.
        self.split, self.step, self.trailing = len(inner_shape), 1, 1
        for j in range(len(inner_shape) - 1, -1, -1):
            if inner_shape[j] * self.trailing > target:
                self.split, self.step = j, max(1, target // self.trailing)
                break
            self.trailing *= inner_shape[j]
        else:
            self.split, self.step, self.trailing = 0, inner_shape[0] if inner_shape else 1, \
                self.trailing // (inner_shape[0] if inner_shape else 1)
        self.inner_shape = inner_shape
        self.length = _round_up(self.step * self.trailing, multiple)
        self.varying: dict = {}  # per structural group: the parameters that vary (sweep.engine.evaluate._varying)
        self.draws: dict = {}  # per structural group: how devices draw a sample (sweep.engine.evaluate._draws)
        self.spreads: dict = {}  # per structural group: a closed form on CPUs (sweep.engine.evaluate.spreads_itself)
        self.group_params = None  # the latest group's parameters, or None (sweep.engine.evaluate.packed_chunk)

    def chunks(self):
        spec, shape = self.spec, self.spec.shape
        group_ranges = [range(shape[i]) for i in self.group_axes]
        leading = [range(self.inner_shape[j]) for j in range(self.split)]
        split_len = self.inner_shape[self.split] if self.inner_shape else 1
        chunk_id = 0
        for group in itertools.product(*group_ranges):
            chosen = {spec.axes[i].key: spec.axes[i].values[g] for i, g in zip(self.group_axes, group)}
            structure = structure_of(spec, chosen)
            for lead in itertools.product(*leading):
                for start in range(0, split_len, self.step):
                    stop = min(start + self.step, split_len)
                    box: list = [slice(None)] * len(shape)
                    for i, g in zip(self.group_axes, group):
                        box[i] = g
                    for j, index in enumerate(lead):
                        box[self.inner_axes[j]] = index
                    if self.inner_shape:
                        box[self.inner_axes[self.split]] = slice(start, stop)
                    size = (stop - start) * self.trailing
                    yield Chunk(chunk_id, structure, tuple(box), size, self.length)
                    chunk_id += 1

    @property
    def group_size(self) -> int:
        """Configurations per structural group (all groups have as many)."""
        return math.prod(self.inner_shape)

    @property
    def num_chunks(self) -> int:
        groups = math.prod(self.spec.shape[i] for i in self.group_axes)
        leading = math.prod(self.inner_shape[:self.split])
        split_len = self.inner_shape[self.split] if self.inner_shape else 1
        return groups * leading * math.ceil(split_len / self.step)

    def box_shape(self, chunk: Chunk) -> tuple[int, ...]:
        """Shape of the chunk's results as a block of the cube (ints dropped)."""
        shape = self.spec.shape
        return tuple(len(range(*b.indices(shape[i]))) for i, b in enumerate(chunk.box) if isinstance(b, slice))

    def disk_chunks(self) -> tuple[int, ...]:
        """On-disk (HDF5) chunk shape: the first compute chunk's box, 1 along
        the axes a chunk holds fixed."""
        first = next(self.chunks())
        dims = iter(self.box_shape(first))
        return tuple(next(dims) if isinstance(b, slice) else 1 for b in first.box)

    def padded_box_shape(self) -> tuple[int, ...]:
        """Shape of every chunk's box with its split axis padded to full length:
        what `indices` and `columns` broadcast to (the same for all chunks)."""
        if not self.inner_shape:
            return (1,)  # every axis structural: one configuration per chunk
        return (self.step,) + tuple(self.inner_shape[self.split + 1:])

    def indices(self, chunk: Chunk) -> dict[int, np.ndarray]:
        """Per cube dimension, the index of each configuration of the chunk, as
        arrays that broadcast to `padded_box_shape()`: a box is a product of
        ranges, so each axis varies along its own box dimension only (and the
        host never builds a [C] array). The split axis is padded to full length
        by repeating its last index; dimensions the chunk holds fixed are
        all-ones arrays."""
        shape = self.spec.shape
        box = self.padded_box_shape()
        ones = (1,) * len(box)
        index = {i: np.full(ones, b, np.intp) for i, b in enumerate(chunk.box) if not isinstance(b, slice)}
        slices = [(i, range(*b.indices(shape[i]))) for i, b in enumerate(chunk.box) if isinstance(b, slice)]
        for j, (i, values) in enumerate(slices):
            column = np.asarray(values, np.intp)
            if len(column) < box[j]:  # the split axis's last, shorter range
                column = np.concatenate([column, np.full(box[j] - len(column), column[-1], np.intp)])
            index[i] = column.reshape(ones[:j] + (box[j],) + ones[j + 1:])
        return index

    def columns(self, chunk: Chunk) -> tuple[dict[str, Column], dict[str, np.ndarray]]:
        """Columns of every given key for the chunk's configurations (index
        arrays that broadcast to `padded_box_shape()`), and the sampled values
        per configuration (unpadded; a list of choices gives indices into
        it), for the cube's coordinates."""
        spec = self.spec
        index = self.indices(chunk)
        columns = grid_columns(spec, {a.key: index[i] for i, a in enumerate(spec.axes)},
                               (1,) * len(self.padded_box_shape()))
        sampled = self.sampled_values(chunk)
        if sampled:
            position = index[len(spec.axes)] - chunk.box[-1].indices(spec.sample.n)[0]
            for dim in spec.sample.dimensions:
                values = sampled[dim.name]
                columns[dim.key] = Column(dim.choices, values[position]) if dim.choices is not None \
                    else Column(values, position)
        return columns, sampled

    def sampled_values(self, chunk: Chunk) -> dict[str, np.ndarray]:
        """Per sampled key, its values over the chunk's configurations
        (unpadded; a list of choices gives indices into it); {} for a grid."""
        sample = self.spec.sample
        if sample is None:
            return {}
        first, last = chunk.box[-1].indices(sample.n)[:2]
        draws = sample.uniforms(first, last)
        return {dim.name: dim.values(draws[:, d]) for d, dim in enumerate(sample.dimensions)}


def structure_of(spec: Spec, chosen: dict) -> dict:
    """The structural keys' values (`sweep.scenario.spec.structural_keys`) of a
    group, from the values `chosen` on its structural axes: what decides the
    DAG (what a preset sets of them included)."""
    structure = resolve_structure({key: spec.value(key, chosen) for key in structural_keys(spec)}, spec.given)
    return {**structure, PRIORITY_KEY: "priority" in possible_values(spec, "strategy")}


def structural_groups(spec: Spec):
    """(structure, {axis index: value index}) of every structural group."""
    structural = structural_keys(spec)
    group_axes = [i for i, a in enumerate(spec.axes) if a.key in structural]
    for group in itertools.product(*(range(len(spec.axes[i].values)) for i in group_axes)):
        chosen = {spec.axes[i].key: spec.axes[i].values[g] for i, g in zip(group_axes, group)}
        yield structure_of(spec, chosen), dict(zip(group_axes, group))


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
