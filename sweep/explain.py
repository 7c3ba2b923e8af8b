"""One configuration in full: every task's timing, the critical path, a breakdown.

Durations come from the kernels, evaluated in float64; the schedule comes from
the independent NumPy evaluator (`sweep.reference`) on the configuration's own
DAG (empty comm slots removed), so `explain` also cross-checks the kernels.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from kernels.codes import ALGORITHMS, BOTTLENECKS, STRATEGIES
from kernels.iteration import iteration_outputs, task_durations
from sweep import reference, zoo
from sweep.compiler import compile_zoo_model
from sweep.dag import concretize
from sweep.params import point_params
from sweep.spec import Spec, SpecError


_durations = jax.jit(task_durations)
_outputs = jax.jit(iteration_outputs)


def single_point(spec: Spec) -> dict[str, object]:
    for axis in spec.axes:
        if len(axis.values) > 1:
            raise SpecError(axis.name, list(axis.values), "explain takes one configuration: give a single value")
    return spec.point((0,) * len(spec.axes))


def explain(spec: Spec) -> dict:
    """The JSON document of DESIGN 4 for a single-configuration spec."""
    point = single_point(spec)
    name = point["model"]
    seq_len = spec.value("seq_len", point)
    iterations = spec.value("iterations", point)
    model = zoo.get_model(name, seq_len)
    trace = spec.value("compute.trace", point)
    compiled, dag = compile_zoo_model(name, seq_len, iterations, trace)
    params = point_params(point, model, np.float64)
    # Model data in float64 too, straight from the zoo (the compiled copy is float32).
    slot_params = np.array([model.layers[l].params for l in compiled.slot_layer], np.float64)
    compiled = dataclasses.replace(
        compiled, layer_flops=np.array([l.forward_flops for l in model.layers], np.float64),
        slot_params=slot_params, total_params=np.float64(model.params))
    if trace is not None:
        from sweep.layer_trace import trace_times

        forward, backward = trace_times(trace, name, seq_len)
        compiled = dataclasses.replace(compiled, layer_forward_time=np.asarray(forward, np.float64),
                                       layer_backward_time=np.asarray(backward, np.float64))

    with jax.enable_x64(True):
        p64 = {k: jnp.asarray(v) for k, v in params.items()}
        table, sent = _durations(compiled, p64)
        outputs = {k: np.asarray(v)[0] for k, v in _outputs(compiled, p64).items()}
    table = np.asarray(table)[:, 0]
    sent = np.asarray(sent)[:, 0]
    prefetch = bool(params["prefetch"][0])

    concrete, old_ids = concretize(dag, sent > 0, prefetch)
    durations = table[compiled.task_row[old_ids]]
    start, finish = reference.schedule(concrete, durations)
    path = reference.critical_path(concrete, start, finish)
    updates = [t.id for t in concrete.tasks if t.kind == "update"]
    iteration_time = (finish[updates[-1]] - finish[updates[0]]) / (len(updates) - 1)

    tasks = []
    for t in concrete.tasks:
        tasks.append({
            "id": t.id,
            "name": t.name,
            "kind": t.kind,
            "iteration": t.iteration,
            "layer": t.layer,
            "layer_name": model.layers[t.layer - 1].name if t.layer is not None else None,
            "bytes": float(sent[dag.tasks[old_ids[t.id]].slot]) if t.kind == "comm" else None,
            "duration": float(durations[t.id]),
            "start": float(start[t.id]),
            "finish": float(finish[t.id]),
        })
    first = [t for t in tasks if t["iteration"] == 1]
    phase = {kind: sum(t["duration"] for t in first if t["kind"] == kind)
             for kind in ("io", "h2d", "forward", "backward", "comm", "update")}
    breakdown = {k: (BOTTLENECKS[int(v)] if k == "bottleneck" else float(v)) for k, v in outputs.items()}
    breakdown["phases"] = phase
    return {
        "model": name,
        "configuration": {
            "workers": int(params["workers"][0]),
            "batch_size": int(params["batch_size"][0]),
            "strategy": STRATEGIES[int(params["strategy"][0])],
            "algorithm": ALGORITHMS[int(params["algorithm"][0])],
            "prefetch": prefetch,
        },
        "iteration_time": float(iteration_time),
        "iterations": iterations,
        "makespan": float(finish.max()),
        "tasks": tasks,
        "edges": [[src, dst] for src, dst, _ in concrete.edges],
        "critical_path": path,
        "breakdown": breakdown,
    }


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
        "",
        "per iteration            time",
    ]
    for kind, seconds in b["phases"].items():
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
