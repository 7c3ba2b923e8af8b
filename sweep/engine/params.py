"""Resolve scenario keys into the kernels' numeric parameter arrays.

Works on a block of configurations at once: each key is a `Column` (its
distinct values and, per configuration, an index into them), so catalog and
preset look-ups run once per distinct value, not once per configuration.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kernels.codes import ALGORITHMS, MIXED, OPTIMIZERS, PRECISIONS, STRATEGIES
from kernels.collectives import LINK_FALLBACK, LINK_FIELDS
from kernels.parameters import CODES, Params
from sweep.scenario import catalog
from sweep.scenario import presets
from sweep.graph import zoo
from sweep.scenario.parameter_table import PARAMETER_OF_KEY
from sweep.scenario.schema import KEYS
from sweep.scenario.spec import Spec

DEFAULT_BUCKET_BYTES = 25 << 20
DEFAULT_PREFETCH = True


@dataclasses.dataclass(frozen=True)
class Column:
    values: tuple | np.ndarray  # distinct values (a tuple), or sampled numbers (an array)
    index: np.ndarray  # [C] into values

    def map(self, fn=None, dtype=np.float64) -> np.ndarray:
        if fn is None and isinstance(self.values, np.ndarray):
            return self.values.astype(dtype, copy=False)[self.index]
        table = np.asarray([v if fn is None else fn(v) for v in self.values], dtype)
        return table[self.index]


def grid_columns(spec: Spec, axis_indices: dict[str, np.ndarray], size: int | tuple) -> dict[str, Column]:
    """Columns for every given key: swept keys from per-axis indices, fixed
    keys constant (of shape `size`: a count, or a shape to broadcast with)."""
    constant = np.zeros(size, np.int64)
    columns = {key: Column((value,), constant) for key, value in spec.fixed.items()}
    for axis in spec.axes:
        columns[axis.key] = Column(axis.values, axis_indices[axis.key])
    return columns


def kernel_params(columns: dict[str, Column], model: zoo.Model, size: int,
                  dtype=np.float32, compact: bool = False) -> Params:
    """The kernels' parameters (`kernels.parameters.Params`) for `size` configurations.

    With `compact`, a parameter that depends only on single-valued keys is a
    [1] array that broadcasts: less to build, copy and shard. Which parameters
    are compact depends on the scenario alone, so chunk shapes stay fixed.
    The columns' index arrays may have any shapes that broadcast together
    (`sweep.engine.plan.Plan.indices`: one box axis per swept key); every
    parameter then has the broadcast shape of the keys it depends on.
    """
    single = {key for key, c in columns.items() if compact and isinstance(c.values, tuple) and len(c.values) == 1}
    default_size = 1 if compact else size
    value_dtype = dtype

    def get(key: str, fn=None, dtype=value_dtype) -> np.ndarray:
        column = columns.get(key)
        if column is None:
            default = KEYS[key].default
            return np.full(default_size, default if fn is None else fn(default), dtype)
        values = column.map(fn, dtype)
        return values.reshape(-1)[:1] if key in single else values

    def given_or(key: str, fallback: np.ndarray) -> np.ndarray:
        return get(key) if key in columns else fallback

    def from_preset(key: str, field: str, default, encode=lambda v: v) -> np.ndarray:
        """The key's values, else its preset's (a field a preset leaves None: the default)."""
        if key in columns:
            return get(key, encode)
        if "preset" in columns:
            return get("preset", lambda name: encode(_or(getattr(presets.PRESETS[name], field), default)))
        return np.full(default_size, encode(default), value_dtype)

    # Mixed precision computes on the tensor cores and sends 2-byte gradients,
    # unless the scenario gives gpu.peak_flops or grad_bytes itself.
    precision = from_preset("precision", "precision", KEYS["precision"].default, PRECISIONS.index)
    mixed = precision == MIXED
    nodes = get("nodes")
    gpus_per_node = get("gpus_per_node")
    workers = nodes * gpus_per_node
    p = {
        "batch_size": get("batch_size"),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "workers": workers,
        "log2_workers": np.ceil(np.log2(workers)),
        "servers": given_or("ps.servers", nodes),
        "peak_flops": given_or("gpu.peak_flops", np.where(mixed, get("gpu.name", lambda g: catalog.GPUS[g].peak_flops_fp16),
                                                          get("gpu.name", lambda g: catalog.GPUS[g].peak_flops))),
        "memory_bandwidth": given_or("gpu.memory_bandwidth",
                                     get("gpu.name", lambda g: catalog.GPUS[g].memory_bandwidth)),
        "efficiency": get("compute.efficiency"),
        "b_half": get("compute.b_half"),
        "bwd_ratio": get("compute.bwd_ratio"),
        "measured_throughput": given_or("compute.measured_throughput", np.zeros(default_size)),
        "update_bytes_per_param": get("compute.update_bytes_per_param"),
        "grad_bytes": given_or("grad_bytes", np.where(mixed, 2.0, get("grad_bytes"))),
        "io_time_per_sample": get("io.time_per_sample"),
        "sample_bytes": given_or("io.sample_bytes", np.full(default_size, float(model.input_bytes))),
        "prefetch": from_preset("io.prefetch", "prefetch", DEFAULT_PREFETCH, float),
        "strategy": from_preset("strategy", "strategy", presets.DEFAULT_STRATEGY, STRATEGIES.index),
        "algorithm": from_preset("algorithm", "algorithm", presets.DEFAULT_ALGORITHM, ALGORITHMS.index),
        "bucket_bytes": from_preset("bucket_bytes", "bucket_bytes", DEFAULT_BUCKET_BYTES),
        "credit_bytes": get("credit_bytes"),
        "optimizer": from_preset("optimizer", "optimizer", KEYS["optimizer"].default, OPTIMIZERS.index),
        "precision": precision,
        "activation_checkpointing": get("activation_checkpointing", float),
        "gpu_memory": given_or("gpu.memory", get("gpu.name", lambda g: catalog.GPUS[g].memory)),
    }
    for table in ("intra", "inter", "h2d"):
        p[f"{table}_alpha"] = given_or(f"{table}.alpha", get(f"{table}.name", lambda n: catalog.LINKS[n].alpha))
        p[f"{table}_bandwidth"] = given_or(f"{table}.bandwidth",
                                           get(f"{table}.name", lambda n: catalog.LINKS[n].bandwidth))
    for table in ("intra", "inter"):  # only when set: per-call overhead, and the wire's bound (kernels.collectives)
        for field in ("overhead", "line_rate"):
            if f"{table}.{field}" in columns:
                p[f"{table}_{field}"] = get(f"{table}.{field}")
    if "nccl" in _algorithms(columns):  # NCCL's protocols take PCIe or NVLink hop ratios (kernels.nccl)
        p["nccl_pci"] = get("intra.name", lambda name: float(catalog.is_pcie(name)))
        if "nccl.ll128" in columns:  # only when set: else LL128 runs and LL takes NCCL's quarter
            p["nccl_ll128"] = get("nccl.ll128", float)
        if "nccl.ll_share" in columns:
            p["nccl_ll_share"] = get("nccl.ll_share")
    if "ps.pipelined" in columns:  # only when set: the default is the sequential ps formula
        p["ps_pipelined"] = get("ps.pipelined", float)
    if "fuse_posted" in columns:  # only when set: the priority channel sends one partition a call
        p["fuse_posted"] = get("fuse_posted", float)
    # Only when set: else ps pushes and pulls at the inter link's bandwidths, its servers evenly loaded,
    # mgwfbp plans with the true costs, and compute tasks take their work's time however short.
    for key in ("ps.bandwidth", "ps.imbalance", "mgwfbp.alpha", "mgwfbp.bandwidth", "mgwfbp.min_params",
                "compute.task_floor"):
        if key in columns:
            p[PARAMETER_OF_KEY[key].name] = get(key)
    # The link model's extensions only when a scenario sets one: without them the
    # kernels take the affine alpha-beta cost, and the channel scan stays lean.
    if any(f"{table}.{field}" in columns for table in ("intra", "inter") for field in LINK_FIELDS[2:]):
        for table in ("intra", "inter"):
            p.update(link_extension(table, p[f"{table}_alpha"], p[f"{table}_bandwidth"],
                                    lambda field, fallback: given_or(f"{table}.{field}", fallback),
                                    default_size))
    out = {k: v.astype(dtype, copy=False) for k, v in p.items()}
    out.update({name: p[name].astype(np.int32) for name in CODES})
    return Params.of(out)


def _algorithms(columns: dict[str, Column]) -> set:
    """Every algorithm the scenario may use (its values, its presets', or the
    default): the same for every chunk, so the parameters' structure is too."""
    if "algorithm" in columns:
        values = columns["algorithm"].values
        return set(values.tolist() if isinstance(values, np.ndarray) else values)
    if "preset" in columns:
        return {_or(presets.PRESETS[name].algorithm, presets.DEFAULT_ALGORITHM) for name in columns["preset"].values}
    return {presets.DEFAULT_ALGORITHM}


def _or(value, default):
    return default if value is None else value


def link_extension(table: str, alpha: np.ndarray, bandwidth: np.ndarray, given_or, size: int) -> dict:
    """`{table}_{field}` arrays of the link model's extension fields, each
    from `given_or(field, fallback)`, the fallback by
    `kernels.collectives.LINK_FALLBACK`."""
    out = {"alpha": alpha, "bandwidth": bandwidth}
    for name, fallback in LINK_FALLBACK.items():
        out[name] = given_or(name, out[fallback] if isinstance(fallback, str) else np.full(size, fallback))
    return {f"{table}_{name}": out[name] for name in LINK_FALLBACK}


def point_params(point: dict[str, object], model: zoo.Model, dtype=np.float32) -> Params:
    """Parameters of a single configuration (`point` maps canonical keys to values)."""
    columns = {key: Column((value,), np.zeros(1, np.int64)) for key, value in point.items()}
    return kernel_params(columns, model, 1, dtype)


def pack(params: Params) -> tuple[tuple, np.ndarray, np.ndarray]:
    """(layout, float32 buffer, int32 buffer) of host parameters: one float
    and one integer buffer to copy to the devices, not one per parameter;
    the layout gives per parameter its name, shape, whether an integer and
    its offset in its buffer (`unpack` reads them back)."""
    layout, buffers = [], {np.float32: [], np.int32: []}
    offsets = {np.float32: 0, np.int32: 0}
    for name, value in params.items():
        kind = np.int32 if np.issubdtype(value.dtype, np.integer) else np.float32
        layout.append((name, value.shape, kind is np.int32, offsets[kind]))
        buffers[kind].append(np.ravel(value).astype(kind, copy=False))
        offsets[kind] += value.size
    floats, ints = (np.concatenate(buffers[kind]) if buffers[kind] else np.zeros(1, kind)
                    for kind in (np.float32, np.int32))
    return tuple(layout), floats, ints


def unpack(floats, ints, layout: tuple) -> list:
    """The parameters `pack` put in the buffers (NumPy or JAX arrays), in
    layout order, each in its own shape."""
    return [(ints if integer else floats)[offset:offset + int(np.prod(shape))].reshape(shape)
            for _, shape, integer, offset in layout]
