"""A structural group's parameters resolved once, and cut per chunk by one gather.

A chunk of a grid is a box of its structural group (`sweep.engine.plan`):
fixed indices on the leading inner axes, a range on the split axis (padded
by repeating its last index), the trailing axes whole. Resolving each
chunk's parameters from its columns (catalog and preset look-ups, derived
parameters) and packing them took 0.28 ms of host Python per chunk of
2**18 configurations, and on a CPU that host work runs on a core the
devices' loops are spread over, while they compute. So a group's
parameters are resolved over all of its inner axes once and packed once;
a chunk's buffers are then one gather from the group's, at positions
affine in the chunk's leading indices and split start (the padding is a
clamp). The values gathered are the ones the chunk's own resolution gives
(elementwise formulas on the same inputs), bit for bit:
tests/test_group_params.py checks it chunk by chunk.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from sweep.engine.params import grid_columns, pack

# Elements of a group's parameters beyond which chunks resolve their own
# (a parameter that depends on many inner axes would make the group's
# table as large as the group).
LIMIT = 1 << 22


@dataclasses.dataclass(frozen=True)
class Gather:
    """Where each element of a chunk's buffer lies in the group's buffer:
    `base + leading @ lead_strides + min(start + along, last) * split_stride`."""
    source: np.ndarray  # the group's buffer
    base: np.ndarray  # [n] int64
    along: np.ndarray  # [n] position along the split axis within the chunk
    split_stride: np.ndarray  # [n], 0 for a parameter the split axis leaves alone
    lead_strides: np.ndarray  # [leading axes, n]

    def cut(self, leading: np.ndarray, start: int, last: int) -> np.ndarray:
        return self.source[self.base + leading @ self.lead_strides
                           + np.minimum(start + self.along, last) * self.split_stride]


@dataclasses.dataclass(frozen=True)
class GroupParams:
    """The packed parameters (`sweep.engine.params.pack`) of every chunk
    of one structural group; `layout` the chunks' (the same for all of them)."""
    layout: tuple
    tangents: tuple
    floats: Gather
    ints: Gather
    split: int  # inner axes before it are fixed per chunk
    last: int  # the split axis's last index

    def packed(self, plan, chunk) -> tuple[tuple, np.ndarray, np.ndarray]:
        """(layout, float buffer, int buffer) of one chunk of the group."""
        box = chunk.box
        leading = np.asarray([box[plan.inner_axes[j]] for j in range(self.split)], np.int64)
        start = box[plan.inner_axes[self.split]].start or 0
        return (self.layout, self.floats.cut(leading, start, self.last),
                self.ints.cut(leading, start, self.last))


def group_key(plan, chunk) -> tuple:
    """The chunk's indices on the structural axes: which group it is in."""
    return tuple(chunk.box[i] for i in plan.group_axes)


def build(spec, plan, chunk, resolve) -> GroupParams | None:
    """The parameters of `chunk`'s whole group, from `resolve(columns) ->
    (Params, tangents)`; None where chunks resolve their own: a sample
    (its configurations are drawn, not a box of axes), a scenario without
    inner axes, or a group whose parameters would exceed `LIMIT`."""
    if spec.sample is not None or not plan.inner_shape:
        return None
    rank = len(plan.inner_shape)
    index = {i: np.full((1,) * rank, chunk.box[i], np.intp) for i in plan.group_axes}
    for j, i in enumerate(plan.inner_axes):
        index[i] = np.arange(plan.inner_shape[j]).reshape((1,) * j + (-1,) + (1,) * (rank - j - 1))
    columns = grid_columns(spec, {a.key: index[i] for i, a in enumerate(spec.axes)}, (1,) * rank)
    params, tangents = resolve(columns)
    if sum(v.size for v in params.values()) > LIMIT:
        return None
    group_layout, group_floats, group_ints = pack(params)
    split, step = plan.split, plan.padded_box_shape()[0]
    layout, parts, sizes = [], {False: [], True: []}, {False: 0, True: 0}
    for name, shape, integer, offset in group_layout:
        if len(shape) != rank:  # one value for every configuration: [1] in every chunk too
            chunk_shape, strides = (1,), np.zeros(rank, np.int64)
        else:
            chunk_shape = (step if shape[split] > 1 else 1,) + tuple(shape[split + 1:])
            strides = np.asarray(_strides(shape), np.int64)
        position = np.indices(chunk_shape).reshape(len(chunk_shape), -1)  # [chunk rank, n]
        rest = strides[split + 1:] if len(shape) == rank else np.zeros(len(chunk_shape) - 1, np.int64)
        base = offset + rest @ position[1:]  # [n] int64 (zeros @ an empty position when nothing trails)
        parts[integer].append((base, position[0], np.broadcast_to(strides[split], base.shape),
                               np.repeat(strides[:split, None], base.size, axis=1)))
        layout.append((name, chunk_shape, integer, sizes[integer]))
        sizes[integer] += base.size
    return GroupParams(tuple(layout), tangents, _gather(group_floats, parts[False], split),
                       _gather(group_ints, parts[True], split), split, plan.inner_shape[split] - 1)


def _strides(shape) -> list[int]:
    """Element strides of a C-ordered array of `shape`, 0 along its unit axes
    (a parameter that does not vary along an axis reads the same element)."""
    strides, stride = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        strides[d] = stride if shape[d] > 1 else 0
        stride *= shape[d]
    return strides


def _gather(source: np.ndarray, parts: list, split: int) -> Gather:
    if not parts:  # `pack`'s placeholder for an empty buffer
        empty = np.zeros(1, np.int64)
        return Gather(source, empty, empty, empty, np.zeros((split, 1), np.int64))
    base, along, split_stride, lead = (np.concatenate(p, axis=-1) for p in zip(*parts))
    return Gather(source, base, along, split_stride.astype(np.int64), lead.astype(np.int64))


__all__ = ["GroupParams", "Gather", "build", "group_key", "LIMIT"]
