"""One configuration in full: every task's timing, the critical path, a breakdown.

Every time comes from the same compiled program the sweep runs
(`kernels.iteration.schedule`), evaluated in float64. The document lists the
configuration's own DAG (`sweep.graph.dag.concretize`: switches resolved, empty
slots, joins and exits removed) and its edges, resource order included, so
an independent longest path over them reproduces every start and finish.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from kernels.codes import ALGORITHMS, OPTIMIZERS, PRECISIONS, PRIORITY, STRATEGIES
from kernels.iteration import iteration_outputs, schedule
from kernels.outputs import OUTPUT
from sweep.graph import zoo
from sweep.graph.compiler import compile_structure
from sweep.graph.dag import concretize, split_partitions
from sweep.engine.params import point_params
from sweep.engine.plan import structure_of
from sweep.scenario.spec import Spec, SpecError

_schedule = jax.jit(schedule)
_outputs = jax.jit(iteration_outputs)
PHASES = ("io", "h2d", "forward", "backward", "comm", "gather", "update")


def single_point(spec: Spec) -> dict[str, object]:
    for axis in spec.axes:
        if len(axis.values) > 1:
            raise SpecError(axis.name, list(axis.values), "explain takes one configuration: give a single value")
    return spec.point((0,) * len(spec.axes))


def explain(spec: Spec) -> dict:
    """The JSON document of DESIGN 4 for a single-configuration spec."""
    point = single_point(spec)
    structure = structure_of(spec, point)
    name = point["model"]
    model = zoo.model_of(structure)
    compiled = compile_structure(structure)
    params = point_params(point, model, np.float64)
    # A priority channel runs (its strategy given or a preset's) and fuses: its DAG draws one partition a task.
    if compiled.priority_steps and params.get("fuse_posted", np.zeros(1))[0] > 0:
        raise SpecError("fuse_posted", True, "explain draws one partition a call; a fusing channel's calls are not "
                                             "drawn yet (sweep, predict and calibrate take it)")
    with jax.enable_x64(True):
        p64 = {k: jnp.asarray(v) for k, v in params.items()}
        finish, durations, sent, partitions = _schedule(compiled, p64)
        outputs = {k: np.asarray(v)[0] for k, v in _outputs(compiled, p64).items()}
    finish = np.asarray(finish)[:, 0]
    durations = np.asarray(durations)[:, 0]
    sent = {t: float(np.asarray(v)[0]) for t, v in sent.items()}
    prefetch = bool(params["prefetch"][0])
    dag = compiled.dag
    exits = [t.id for t in dag.tasks if t.kind == "exit"]
    iteration_time = (finish[exits[-1]] - finish[exits[0]]) / (len(exits) - 1)

    concrete, old_ids = concretize(dag, {t: v > 0 for t, v in sent.items()}, prefetch)
    finish, durations = finish[old_ids], durations[old_ids]
    part_bytes: dict[int, float] = {}
    if params["strategy"][0] == PRIORITY:
        concrete, old_ids, finish, durations, part_bytes = _partitions(concrete, old_ids, finish, durations,
                                                                       partitions, sent)
    preds: list[list[int]] = [[] for _ in concrete.tasks]
    for src, dst, _ in concrete.edges:
        preds[dst].append(src)
    start = np.array([max((finish[s] for s in preds[t]), default=0.0) for t in range(len(concrete.tasks))])
    grad_bytes = float(params["grad_bytes"][0])

    def bytes_of(old):
        if old in part_bytes:
            return part_bytes[old]
        task = dag.tasks[old]
        if task.policy == "policy":
            return sent[old]
        if task.policy == "follow":
            return sent[task.ref]
        return task.coef * grad_bytes if task.kind in ("comm", "gather") else None

    tasks = []
    for t, old in zip(concrete.tasks, old_ids):
        tasks.append({
            "id": t.id,
            "name": t.name,
            "kind": t.kind,
            "iteration": t.iteration,
            "layer": t.layer,
            "layer_name": model.layers[t.layer - 1].name if t.layer is not None else None,
            "resource": t.resource,
            "bytes": bytes_of(old),
            "duration": float(durations[t.id]),
            "start": float(start[t.id]),
            "finish": float(finish[t.id]),
        })
    first = [t for t in tasks if t["iteration"] == 1]
    phase = {kind: sum(t["duration"] for t in first if t["kind"] == kind) for kind in PHASES}
    breakdown = {k: (OUTPUT[k].flags[int(v)] if OUTPUT[k].flags else float(v)) for k, v in outputs.items()}
    breakdown["phases"] = phase
    lowered = compiled.lowered
    return {
        "model": name,
        "configuration": {
            "workers": int(params["workers"][0]),
            "batch_size": int(params["batch_size"][0]),
            "strategy": STRATEGIES[int(params["strategy"][0])],
            "algorithm": ALGORITHMS[int(params["algorithm"][0])],
            "prefetch": prefetch,
            "update": structure["update"],
            "hierarchical.pipelined": bool(structure["hierarchical.pipelined"]),
            "zero": int(structure["zero"]),
            "accumulation": int(structure["accumulation"]),
            "optimizer": OPTIMIZERS[int(params["optimizer"][0])],
            "precision": PRECISIONS[int(params["precision"][0])],
            "activation_checkpointing": bool(params["activation_checkpointing"][0]),
            "gpu_memory": float(params["gpu_memory"][0]),
        },
        "lowering": {"mode": lowered.mode, "reason": lowered.reason,
                     "segments": len(lowered.program.segments), "tasks": len(dag.tasks)},
        "iteration_time": float(iteration_time),
        "iterations": int(structure["iterations"]),
        "makespan": float(finish.max()),
        "tasks": tasks,
        "edges": [[src, dst] for src, dst, _ in concrete.edges],
        "critical_path": critical_path(preds, start, finish),
        "breakdown": breakdown,
    }


def _partitions(concrete, old_ids, finish, durations, partitions, sent):
    """The concrete DAG with each priority channel's slots cut into the
    partitions sent, in the order sent (`sweep.graph.dag.split_partitions`),
    their finish and duration from the program, and each partition's bytes
    (per original slot id)."""
    new_of = {old: new for new, old in enumerate(old_ids)}
    sent_order, times = {}, {}
    for slot_ids, start, end in partitions.values():
        slot_ids, start, end = (np.asarray(a)[:, 0] for a in (slot_ids, start, end))
        used = slot_ids >= 0
        order = [new_of[int(s)] for s in slot_ids[used]]
        sent_order[min(order)] = order
        times[min(order)] = (start[used], end[used])
    split, old_of = split_partitions(concrete, sent_order)
    new_finish = np.empty(len(split.tasks))
    new_durations = np.empty(len(split.tasks))
    position: dict[int, int] = {}
    for t in split.tasks:
        first = next((f for f, order in sent_order.items() if t.part is not None and old_of[t.id] in order), None)
        if first is None:
            new_finish[t.id], new_durations[t.id] = finish[old_of[t.id]], durations[old_of[t.id]]
            continue
        k = position[first] = position.get(first, -1) + 1  # partitions are numbered in the order sent
        start, end = times[first]
        new_finish[t.id], new_durations[t.id] = end[k], end[k] - start[k]
    counts: dict[int, int] = {}
    for t in split.tasks:
        if t.part is not None:
            counts[old_of[t.id]] = counts.get(old_of[t.id], 0) + 1
    part_bytes = {old_ids[slot]: float(np.asarray(sent[old_ids[slot]])) / n for slot, n in counts.items()}
    return split, [old_ids[o] for o in old_of], new_finish, new_durations, part_bytes


def critical_path(preds, start, finish, rtol: float = 1e-12) -> list[int]:
    """Task ids of one critical path, from time 0 to the latest finish:
    walking back from the last task to finish, each time to a predecessor
    that finishes exactly when the current task starts (the earliest-started
    one on ties, so zero-length tasks are not preferred)."""
    current = int(np.argmax(finish))
    path = [current]
    scale = max(float(finish[current]), 1e-300)
    while start[current] > rtol * scale:
        tight = [s for s in preds[current] if abs(finish[s] - start[current]) <= rtol * scale]
        current = min(tight, key=lambda s: (start[s], s))
        path.append(current)
    return path[::-1]


def format_explain(doc: dict) -> str:
    """A readable summary: configuration, breakdown, and the critical path."""
    b = doc["breakdown"]
    c = doc["configuration"]
    lines = [
        f"{doc['model']}: {c['workers']} GPU(s) x batch {c['batch_size']}, "
        f"{c['strategy']} / {c['algorithm']}, prefetch {'on' if c['prefetch'] else 'off'}",
        f"steady-state iteration time  {_ms(doc['iteration_time'])}   (K = {doc['iterations']} unrolled)",
        f"throughput                   {b['throughput']:12.1f} samples/s",
        f"speedup / efficiency         {b['speedup']:12.2f} x  / {100 * b['scaling_efficiency']:.1f} %",
        f"bottleneck                   {b['bottleneck']:>12}",
        f"memory per GPU               {b['memory_per_gpu'] / 2**30:12.2f} GiB ({c['optimizer']}, {c['precision']}, "
        f"fits: {b['fits_in_memory']})",
        "",
        "per iteration            time",
    ]
    kinds = {t["kind"] for t in doc["tasks"]}
    for kind, seconds in b["phases"].items():
        if kind == "gather" and "gather" not in kinds:
            continue  # ZeRO's parameter gathers: a phase only where the scenario shards parameters
        lines.append(f"  {kind:<20} {_ms(seconds)}")
    lines += [
        f"  {'exposed comm':<20} {_ms(b['exposed_communication'])}",
        "",
        f"critical path ({len(doc['critical_path'])} tasks):",
    ]
    tasks = doc["tasks"]
    for run in _runs([tasks[i] for i in doc["critical_path"]]):
        first, last = run[0], run[-1]
        label = first["name"] if len(run) == 1 else f"{first['name']} .. {last['name']}"
        lines.append(f"  {_ms(first['start'])} -> {_ms(last['finish'])}  {label}")
    return "\n".join(lines)


def _runs(path: list[dict]) -> list[list[dict]]:
    """Consecutive critical-path tasks of the same kind and iteration, grouped."""
    runs: list[list[dict]] = []
    for task in path:
        if runs and (runs[-1][-1]["kind"], runs[-1][-1]["iteration"]) == (task["kind"], task["iteration"]):
            runs[-1].append(task)
        else:
            runs.append([task])
    return runs


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:10.3f} ms"
