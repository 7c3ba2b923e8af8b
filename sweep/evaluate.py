"""Evaluate a grid sweep: group by DAG structure, run fixed-size chunks.

Configurations that share a model, sequence length and iteration count share
one compiled DAG. Within a group every other swept key varies per
configuration inside the kernel. Chunks have a fixed size (the last one is
padded by repeating its final configuration), so a group compiles once.
"""
from __future__ import annotations

import itertools
import math

import jax
import numpy as np

from kernels.iteration import iteration_outputs
from sweep import zoo
from sweep.compiler import compile_zoo_model
from sweep.params import grid_columns, kernel_params
from sweep.schema import KEYS, STRUCTURAL
from sweep.spec import Spec

DEFAULT_CHUNK = 1 << 14


@jax.jit
def evaluate_params(dag, params):
    """Outputs ([C] arrays) for explicit per-configuration parameter arrays.

    `params` is what `sweep.params.kernel_params` returns, possibly edited
    (e.g. a bisection over `inter_bandwidth`); `dag` from `compile_zoo_model`.
    """
    return iteration_outputs(dag, params)


def structural_value(spec: Spec, key: str, values: dict[str, object]):
    if key in values:
        return values[key]
    return spec.fixed.get(key, KEYS[key].default)


def evaluate_grid(spec: Spec, chunk: int = DEFAULT_CHUNK) -> dict[str, np.ndarray]:
    """Every requested output over the full grid, shaped `spec.shape`."""
    results = {name: np.empty(spec.shape, np.int8 if name == "bottleneck" else np.float32)
               for name in spec.outputs}
    group_axes = [i for i, a in enumerate(spec.axes) if a.key in STRUCTURAL]
    inner_axes = [i for i, a in enumerate(spec.axes) if a.key not in STRUCTURAL]
    inner_shape = tuple(len(spec.axes[i].values) for i in inner_axes)
    inner_size = math.prod(inner_shape)
    # Small sweeps use the next power of two: few distinct shapes, little padding.
    chunk = min(chunk, 1 << max(0, (inner_size - 1).bit_length()))
    for group_index in itertools.product(*(range(len(spec.axes[i].values)) for i in group_axes)):
        chosen = {spec.axes[i].key: spec.axes[i].values[j] for i, j in zip(group_axes, group_index)}
        name = structural_value(spec, "model", chosen)
        seq_len = structural_value(spec, "seq_len", chosen)
        iterations = structural_value(spec, "iterations", chosen)
        model = zoo.get_model(name, seq_len)
        dag, _ = compile_zoo_model(name, seq_len, iterations)
        flat = {name: np.empty(inner_size, results[name].dtype) for name in spec.outputs}
        for start in range(0, inner_size, chunk):
            stop = min(start + chunk, inner_size)
            # Pad to a full chunk by repeating the last configuration: one compile per group.
            flat_index = np.minimum(np.arange(start, start + chunk), stop - 1)
            per_axis = np.unravel_index(flat_index, inner_shape) if inner_shape else ()
            indices = {spec.axes[i].key: idx for i, idx in zip(inner_axes, per_axis)}
            indices.update({spec.axes[i].key: np.full(chunk, j) for i, j in zip(group_axes, group_index)})
            params = kernel_params(grid_columns(spec, indices, chunk), model, chunk)
            out = evaluate_params(dag, params)
            for name in spec.outputs:
                flat[name][start:stop] = np.asarray(out[name])[: stop - start]
        # Place this group's block into the full grid.
        selector = [slice(None)] * len(spec.axes)
        for i, j in zip(group_axes, group_index):
            selector[i] = j
        for name in spec.outputs:
            block = flat[name].reshape(inner_shape)
            results[name][tuple(selector)] = block
    return results
