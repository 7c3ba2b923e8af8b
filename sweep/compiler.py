"""Compile a slotted DAG into dense level-ordered arrays for the kernels.

Tasks are grouped by topological level (longest edge count from a source), so
every task's predecessors lie in earlier levels. Each level is a row of task
ids padded to the widest level; each task's predecessors are padded to the
largest in-degree. Padding points at a sentinel task (index T) whose finish
time stays 0, and since every finish time is >= 0 a padded predecessor never
changes a max. Durations come from a per-iteration table whose rows are
[io, h2d, forward 1..L, backward 1..L, comm slot 1..S, update, zero]; the
table varies per configuration, the arrays here do not.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from kernels.iteration import duration_rows
from sweep import zoo
from sweep.dag import Dag, build_dag, slot_layers


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CompiledDag:
    level_tasks: np.ndarray  # [levels, width] int32, sentinel-padded
    level_preds: np.ndarray  # [levels, width, max_preds] int32, sentinel-padded
    level_switch: np.ndarray  # [levels, width, max_preds] int32: 0 always, 1 only without prefetch
    task_row: np.ndarray  # [T + 1] int32: row of the duration table for each task (+ sentinel)
    update_tasks: np.ndarray  # [K] int32: the update task of each iteration
    layer_flops: np.ndarray  # [L] float32: forward FLOPs per sample
    slot_layer: np.ndarray  # [S] int32: 0-based layer owning each comm slot, backward order
    slot_params: np.ndarray  # [S] float32: parameters whose gradients that slot carries
    total_params: np.ndarray  # [] float32
    # Measured per-layer seconds (compute.trace), replacing FLOP-based times; None without a trace.
    layer_forward_time: np.ndarray | None = None  # [L] float32
    layer_backward_time: np.ndarray | None = None  # [L] float32

    @property
    def num_tasks(self) -> int:
        return self.task_row.shape[0] - 1


def levels(dag: Dag) -> list[list[int]]:
    """Tasks grouped by longest distance (in edges) from a source."""
    preds = dag.predecessors()
    level = [0] * len(dag.tasks)
    for t in topological_order(dag):
        level[t] = max((level[s] + 1 for s, _ in preds[t]), default=0)
    grouped: list[list[int]] = [[] for _ in range(max(level) + 1)]
    for t, lv in enumerate(level):
        grouped[lv].append(t)
    return grouped


def topological_order(dag: Dag) -> list[int]:
    """Kahn's algorithm; raises ValueError on a cycle."""
    indegree = [0] * len(dag.tasks)
    succs: list[list[int]] = [[] for _ in dag.tasks]
    for src, dst, _ in dag.edges:
        indegree[dst] += 1
        succs[src].append(dst)
    ready = [t for t, d in enumerate(indegree) if d == 0]
    order = []
    while ready:
        t = ready.pop()
        order.append(t)
        for s in succs[t]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
    if len(order) != len(dag.tasks):
        raise ValueError("the task graph has a cycle")
    return order


def level_arrays(dag: Dag) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(level_tasks, level_preds, level_switch) of any DAG, sentinel-padded."""
    sentinel = len(dag.tasks)
    groups = levels(dag)
    preds = dag.predecessors()
    width = max(len(g) for g in groups)
    max_preds = max(1, max(len(p) for p in preds))
    tasks = np.full((len(groups), width), sentinel, np.int32)
    pred_ids = np.full((len(groups), width, max_preds), sentinel, np.int32)
    switch = np.zeros((len(groups), width, max_preds), np.int32)
    for lv, group in enumerate(groups):
        for w, t in enumerate(group):
            tasks[lv, w] = t
            for j, (src, sw) in enumerate(preds[t]):
                pred_ids[lv, w, j] = src
                switch[lv, w, j] = sw
    return tasks, pred_ids, switch


def compile_model(layer_params, layer_flops, iterations: int) -> tuple[CompiledDag, Dag]:
    """Compile the slotted DAG of a model (per-layer params and FLOPs)."""
    layer_params = np.asarray(layer_params, np.int64)
    slots = slot_layers(layer_params.tolist())
    dag = build_dag(len(layer_params), slots, iterations)
    rows = duration_rows(len(layer_params), len(slots))
    task_row = np.empty(len(dag.tasks) + 1, np.int32)
    for t in dag.tasks:
        offset = t.slot if t.kind == "comm" else (t.layer - 1 if t.layer is not None else 0)
        task_row[t.id] = rows[t.kind] + offset
    task_row[-1] = rows["zero"]
    level_tasks, level_preds, level_switch = level_arrays(dag)
    compiled = CompiledDag(
        level_tasks=level_tasks,
        level_preds=level_preds,
        level_switch=level_switch,
        task_row=task_row,
        update_tasks=np.array([t.id for t in dag.tasks if t.kind == "update"], np.int32),
        layer_flops=np.asarray(layer_flops, np.float32),
        slot_layer=np.array([l - 1 for l in slots], np.int32),
        slot_params=layer_params[[l - 1 for l in slots]].astype(np.float32),
        total_params=np.float32(layer_params.sum()),
    )
    return compiled, dag


@functools.lru_cache(maxsize=64)
def compile_zoo_model(name: str, seq_len: int | None, iterations: int,
                      trace: str | None = None) -> tuple[CompiledDag, Dag]:
    """Compiled DAG of a zoo model, cached: every chunk of a sweep shares it.
    With `trace` (a `compute.trace` file) it carries the measured per-layer
    forward and backward seconds (`sweep.layer_trace`)."""
    model = zoo.get_model(name, seq_len)
    compiled, dag = compile_model([l.params for l in model.layers], [l.forward_flops for l in model.layers],
                                  iterations)
    if trace is not None:
        from sweep.layer_trace import trace_times

        forward, backward = trace_times(trace, name, seq_len)
        compiled = dataclasses.replace(compiled, layer_forward_time=np.asarray(forward, np.float32),
                                       layer_backward_time=np.asarray(backward, np.float32))
    return compiled, dag
