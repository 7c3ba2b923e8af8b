"""A fused, unrolled max-plus evaluation of one DAG: the speed reference.

Generates straight-line code with one local variable per task (the DAG's
ids are topological), durations computed inline from a few per-configuration
scalars, and compiles it with numba, parallel over configurations. This is
what a hand-written evaluator for one fixed DAG and strategy looks like; the
benchmark holds `sweep.run` to it. The strategy is `wfbp`: every policy slot
sends its own layer's gradients, so every bucket, and every slot switch, is
known before any configuration is seen. It is generic over the task costs,
so it evaluates every `sweep.graph.dag.Shape`; collectives must be affine
(latency + per_byte * bytes: no protocol steps, no smoothing).

    python experiments/fused_reference.py   # check it against sweep.run
"""
from __future__ import annotations

import numpy as np

import kernels
import sweep
from kernels.codes import ALWAYS, COMM_COSTS, COMPUTE_COSTS, IF_SENDS, NO_PREFETCH, switch_rule
from sweep import Dag, Task


def used_costs(dag: Dag) -> tuple[list[str], list[str]]:
    """(compute rows, collective rows) that the DAG's tasks name."""
    used = {t.cost for t in dag.tasks}
    return [c for c in COMPUTE_COSTS if c in used], [c for c in COMM_COSTS if c in used]


def scalar_names(dag: Dag) -> tuple[str, ...]:
    """Arguments of the generated function before `out`, one [C] array each:
    seconds per unit of each compute row, latency and per-byte seconds of
    each collective row, gradient bytes per parameter, and 1 where input is
    not prefetched."""
    compute, comm = used_costs(dag)
    return (*compute, *(f"{c}_{part}" for c in comm for part in ("latency", "per_byte")),
            "grad_bytes", "no_prefetch")


def wfbp_sends(dag: Dag) -> dict[int, bool]:
    """Whether each policy slot sends under wfbp: when its layer has
    gradients (a slot with none sends zero bytes, which is not sending)."""
    return {t.id: t.coef > 0 for t in dag.tasks if t.policy == "policy"}


def edge_term(src: int, switch: int, sends: dict[int, bool]) -> str | None:
    """The finish an edge contributes to its task's start, None when off."""
    if switch == ALWAYS:
        return f"t{src}"
    if switch == NO_PREFETCH:  # finishes are >= 0, so 0 stands for "no edge"
        return f"t{src} * no_prefetch_"
    rule, ref = switch_rule(switch)
    return f"t{src}" if sends[ref] == (rule == IF_SENDS) else None


def duration_term(task: Task, dag: Dag) -> str | None:
    """The task's seconds as an expression of the loaded scalars, None when zero."""
    if task.cost is None:
        return None
    if task.cost in COMPUTE_COSTS:
        return f"{task.coef!r} * {task.cost}_" if task.coef else None
    # wfbp: a follow stage carries exactly what its policy slot sent.
    units = dag.tasks[task.ref].coef if task.policy == "follow" else task.coef
    return f"({task.cost}_latency_ + {units!r} * {task.cost}_per_unit_)" if units else None


def max_tree(terms: list[str]) -> str:
    """The maximum of `terms` as a balanced tree of two-argument max: numba
    does not vectorise a max of many arguments over configurations (a
    layer-wise exit waits for 108 tasks: 8x slower)."""
    while len(terms) > 1:
        terms = [f"max({a}, {b})" for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) & ~1:]
    return terms[0]


def task_line(task: Task, preds, dag: Dag, sends) -> str:
    ready = [term for src, switch in preds if (term := edge_term(src, switch, sends)) is not None]
    start = max_tree(ready) if ready else "0.0"
    duration = duration_term(task, dag)
    return f"t{task.id} = {start}" + (f" + {duration}" if duration else "")


def generate_source(dag: Dag) -> str:
    """Python source of `evaluate(*scalar_names(dag), out)`: out[c] is the
    steady iteration time (F_K - F_1) / (K - 1) of the exits' finishes."""
    preds = dag.predecessors()
    if any(src >= dst for src, dst, _ in dag.edges):
        raise ValueError("task ids must be topological")
    exits = [t.id for t in dag.tasks if t.kind == "exit"]
    if len(exits) < 2:
        raise ValueError("a steady iteration time needs at least two iterations")
    sends = wfbp_sends(dag)
    _, comm = used_costs(dag)
    names = scalar_names(dag)
    # Per configuration: each scalar once, and per collective its seconds per
    # gradient unit (per_byte * grad_bytes), hoisted out of the tasks.
    loads = [f"{name}_ = {name}[i]" for name in names if not name.endswith("_per_byte")]
    loads += [f"{c}_per_unit_ = {c}_per_byte[i] * grad_bytes[i]" for c in comm]
    body = [task_line(t, preds[t.id], dag, sends) for t in dag.tasks]
    body.append(f"out[i] = (t{exits[-1]} - t{exits[0]}) / {len(exits) - 1}")
    indent = "\n        "
    return (f"def evaluate({', '.join(names)}, out):\n"
            f"    for i in prange(out.shape[0]):{indent}" + indent.join(loads + body) + "\n")


def compile_reference(dag: Dag):
    """The compiled numba function for `dag` (numba is a benchmark-only dependency)."""
    import numba  # benchmark-only: the package does not depend on it

    namespace = {"prange": numba.prange}
    exec(compile(generate_source(dag), "<fused-reference>", "exec"), namespace)
    return numba.njit(parallel=True, fastmath=False, cache=False)(namespace["evaluate"])


def reference_scalars(params: dict[str, np.ndarray], compiled) -> dict[str, np.ndarray]:
    """The arguments of `scalar_names` as contiguous float32 [C] arrays, from
    kernel parameter arrays (`sweep.PreparedChunk.params`) and the project's
    own cost functions: setup, not timed."""
    ctx = kernels.context(compiled, params)
    compute, comm = used_costs(compiled.dag)
    values = {c: ctx.compute[c] for c in compute}
    for c in comm:
        cost = ctx.comm[c]
        if cost.steps is not None:
            raise ValueError(f"{c}: the fused reference models affine collectives only (no protocol steps)")
        values[f"{c}_latency"], values[f"{c}_per_byte"] = cost.latency, cost.per_byte
    values["grad_bytes"] = ctx.grad_bytes
    values["no_prefetch"] = np.where(np.asarray(ctx.prefetch) > 0, 0.0, 1.0)
    size = max(np.size(v) for v in params.values())
    return {name: np.ascontiguousarray(np.broadcast_to(np.asarray(values[name], np.float32), size))
            for name in scalar_names(compiled.dag)}


def reference_inputs(spec):
    """(compiled DAG, `reference_scalars`) of a single-group scenario, its
    configurations in the cube's order: setup, not timed."""
    prepared = sweep.prepare_chunk(spec, chunk=spec.size)  # one chunk of every configuration
    return prepared.compiled, reference_scalars(prepared.params, prepared.compiled)


def reference_times(spec) -> np.ndarray:
    """Iteration times [C] of a single-group scenario from the fused reference."""
    compiled, scalars = reference_inputs(spec)
    out = np.empty(spec.size, np.float32)
    compile_reference(compiled.dag)(*scalars.values(), out)
    return out


# Random configurations for the check, input prefetch on and off.
CHECK_SAMPLE = {"n": 64, "seed": 3, "batch_size": {"min": 8, "max": 1024, "scale": "log"},
                "nodes": {"min": 1, "max": 64, "scale": "log"}, "gpus_per_node": [1, 2, 4, 8],
                "inter": {"bandwidth": {"min": 1e8, "max": 1e12, "scale": "log"},
                          "alpha": {"min": 1e-7, "max": 1e-2, "scale": "log"}},
                "io": {"time_per_sample": {"min": 1e-5, "max": 1e-2, "scale": "log"}, "prefetch": [True, False]}}
CHECK_SHAPES = {"barrier": {}, "layerwise": {"update": "layerwise"}, "zero3": {"zero": 3}}


def max_relative_difference(scenario: dict) -> float:
    """Largest |reference - sweep.run| / sweep.run over the scenario's iteration times."""
    spec = sweep.load_spec(scenario)
    expected = sweep.run(spec)["iteration_time"].values.reshape(-1)
    return float(np.max(np.abs(reference_times(spec) - expected) / expected))


def main(model: str = "resnet50") -> int:
    worst = 0.0
    for name, extra in CHECK_SHAPES.items():
        diff = max_relative_difference({"model": model, "strategy": "wfbp", "sample": CHECK_SAMPLE, **extra})
        print(f"{model} {name:<10} max relative difference {diff:.2e}")
        worst = max(worst, diff)
    return int(not worst <= 2e-5)


if __name__ == "__main__":
    raise SystemExit(main())
