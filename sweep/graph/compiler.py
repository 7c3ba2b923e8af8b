"""Compile a model's DAG into the program the kernels run.

`compile_model` builds the slotted DAG of `sweep.graph.dag` for a model's layers
and a `sweep.graph.dag.Shape`, and lowers it (`sweep.graph.lowering`): every
configuration of the model and shape shares the result, which is why a sweep
groups its configurations by the structural keys (`sweep.engine.plan`). The
`CompiledDag` is a pytree without array leaves: its program is static, so
jit specialises on it (one compile per model and shape) and the program's
per-task constants are baked into the kernel.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from sweep.graph import zoo
from sweep.graph.dag import Dag, Shape, build_dag
from sweep.graph.layer_trace import file_digest, trace_times
from sweep.graph.lowering import Lowered, lower


@functools.partial(jax.tree_util.register_dataclass, data_fields=[],
                   meta_fields=["lowered", "forward_total", "backward_total", "total_params", "traced",
                                "micro_batches", "zero", "activation_bytes", "checkpointed_activation_bytes",
                                "partition_bytes", "priority_steps"])
@dataclasses.dataclass(frozen=True, eq=False)
class CompiledDag:
    lowered: Lowered
    forward_total: float  # one micro-batch's forward units (FLOPs per sample, or traced seconds)
    backward_total: float
    total_params: float
    traced: bool  # units are measured seconds (compute.trace)
    micro_batches: int
    zero: int = 0  # ZeRO stage: how the model states are sharded (kernels.memory)
    activation_bytes: float = 0.0  # per sample, float32: every layer's output
    checkpointed_activation_bytes: float = 0.0  # per sample, float32, with activation checkpointing
    partition_bytes: float = 4_000_000.0  # priority strategy: largest partition (DEFAULT_PARTITION_BYTES)
    priority_steps: int = 0  # partitions the priority channel walks per iteration (0: no priority channel)

    @property
    def dag(self) -> Dag:
        return self.lowered.dag

    @property
    def mode(self) -> str:
        return self.lowered.mode


def compile_model(layer_params, forward_work, iterations: int, shape: Shape = Shape(),
                  backward_work=None, traced: bool = False, activations: tuple[float, float] = (0.0, 0.0),
                  partition_bytes: float = 4_000_000.0, priority: bool = True) -> CompiledDag:
    """Build and lower the DAG of a model (per-layer parameters and work);
    `activations` are the per-sample bytes kept for backward without and
    with checkpointing (`sweep.graph.zoo.Model`), for the memory outputs.
    A layer-wise DAG that may run the `priority` strategy (`priority`) also
    gets the bound of the priority channel's walk: one step per partition of
    at most `partition_bytes` at up to `MAX_PRIORITY_GRAD_BYTES` per
    gradient value; without it the program has no priority channel at all."""
    forward_work = np.asarray(forward_work, np.float64)
    backward_work = forward_work if backward_work is None else np.asarray(backward_work, np.float64)
    dag = build_dag([float(x) for x in layer_params], forward_work.tolist(), iterations, shape,
                    backward_work.tolist())
    return CompiledDag(lower(dag), float(forward_work.sum()), float(backward_work.sum()),
                       float(np.sum(np.asarray(layer_params, np.float64))), traced, shape.accumulation, shape.zero,
                       *map(float, activations), float(partition_bytes),
                       priority_steps(layer_params, partition_bytes) if priority and shape.update == "layerwise" else 0)


DEFAULT_PARTITION_BYTES = 4_000_000  # ByteScheduler's 1,000,000 float32 parameters
# A structure's flag (not a scenario key): whether any of its configurations
# may use the priority strategy. Absent: assume they may.
PRIORITY_KEY = "uses_priority"

# The priority channel walks one step per partition; with gradients of at most
# this many bytes (`sweep.scenario.spec` checks it) the count is static.
MAX_PRIORITY_GRAD_BYTES = 8


def priority_steps(layer_params, partition_bytes: float) -> int:
    """Partitions of one iteration's gradients at the largest gradient size."""
    nbytes = np.asarray(layer_params, np.float64) * MAX_PRIORITY_GRAD_BYTES
    return int(np.ceil(nbytes / partition_bytes).sum())


@functools.lru_cache(maxsize=64)
def compile_zoo_model(model: zoo.Model, iterations: int, trace: str | None = None,
                      shape: Shape = Shape(), trace_digest: str | None = None,
                      partition_bytes: float = 4_000_000.0, priority: bool = True) -> CompiledDag:
    """Compiled DAG of a model (`sweep.graph.zoo.model_of`), cached: every
    chunk of a sweep shares it. With `trace` (a `compute.trace` file) the
    compute tasks carry the measured per-layer forward and backward seconds
    (`sweep.graph.layer_trace`); `trace_digest` (its contents' sha256) only
    keys the cache, so an edited trace compiles afresh."""
    params = [l.params for l in model.layers]
    activations = (model.activation_bytes, model.checkpointed_activation_bytes)
    if trace is None:
        return compile_model(params, [l.forward_flops for l in model.layers], iterations, shape,
                             activations=activations, partition_bytes=partition_bytes, priority=priority)
    forward, backward = trace_times(trace, model)
    return compile_model(params, forward, iterations, shape, backward, traced=True, activations=activations,
                         partition_bytes=partition_bytes, priority=priority)


def shape_of(structure: dict) -> Shape:
    """The DAG shape of a group's structural keys (`sweep.scenario.schema.STRUCTURAL`)."""
    return Shape(update=structure.get("update") or "barrier", pipelined=bool(structure.get("hierarchical.pipelined")),
                 zero=int(structure.get("zero") or 0), accumulation=int(structure.get("accumulation") or 1))


def compile_structure(structure: dict) -> CompiledDag:
    """The compiled DAG every configuration of a structural group shares:
    the one entry point for sweeps, fits and the bandwidth target."""
    return compile_zoo_model(*_compile_arguments(structure))


def compile_structure_uncached(structure: dict) -> CompiledDag:
    """`compile_structure` built afresh (for timing what a new group costs)."""
    return compile_zoo_model.__wrapped__(*_compile_arguments(structure))


def _compile_arguments(structure: dict) -> tuple:
    trace = structure.get("compute.trace")
    return (zoo.model_of(structure), structure["iterations"], trace, shape_of(structure),
            file_digest(trace) if trace is not None else None,
            float(structure.get("partition_bytes") or DEFAULT_PARTITION_BYTES), bool(structure.get(PRIORITY_KEY, True)))
