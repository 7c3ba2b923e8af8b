"""A fused, unrolled max-plus evaluation of one DAG: the speed reference.

Generates straight-line code with one local variable per task (topological
order, configurations on the minor axis, durations computed inline from a few
per-configuration scalars) and compiles it with numba, parallel over
configurations. This is what a hand-written evaluator for one fixed DAG and
strategy (`wfbp`: every slot sends its own layer) looks like; the benchmark
holds `sweep.run` to it.
"""
from __future__ import annotations

import numpy as np

from sweep.compiler import topological_order
from sweep.dag import ALWAYS, Dag

SCALARS = ("forward", "backward", "update", "io", "h2d", "latency", "per_byte", "grad_bytes", "no_prefetch")


def generate_source(dag: Dag, layer_flops, layer_params) -> str:
    """Python source of `evaluate(*SCALARS, out)` for `dag` under wfbp."""
    preds = dag.predecessors()
    body = []
    for t in topological_order(dag):
        task = dag.tasks[t]
        if task.kind in ("forward", "backward"):
            duration = f"{float(layer_flops[task.layer - 1])!r} * {task.kind}_c"
        elif task.kind == "comm":
            params = int(layer_params[task.layer - 1])
            duration = f"(latency_c + per_byte_c * grad_bytes_c * {float(params)!r})" if params else "0.0"
        else:
            duration = f"{task.kind}_c"
        ready = [f"t{s}" if switch == ALWAYS else f"t{s} * no_prefetch_c" for s, switch in preds[t]]
        start = ready[0] if len(ready) == 1 else f"max({', '.join(ready)})" if ready else "0.0"
        body.append(f"        t{t} = {start} + {duration}")
    updates = [t.id for t in dag.tasks if t.kind == "update"]
    loads = "\n".join(f"        {name}_c = {name}[c]" for name in SCALARS)
    return (
        f"def evaluate({', '.join(SCALARS)}, out):\n"
        f"    for c in prange(out.shape[0]):\n{loads}\n" + "\n".join(body) +
        f"\n        out[c] = (t{updates[-1]} - t{updates[0]}) / {len(updates) - 1}\n")


def compile_reference(dag: Dag, layer_flops, layer_params):
    """The compiled numba function for `dag` (numba is a benchmark-only dependency)."""
    import numba

    namespace = {"prange": numba.prange}
    exec(compile(generate_source(dag, layer_flops, layer_params), "<fused-reference>", "exec"), namespace)
    return numba.njit(parallel=True, fastmath=False, cache=False)(namespace["evaluate"])


def reference_scalars(params: dict[str, np.ndarray], dag_compiled) -> dict[str, np.ndarray]:
    """The per-configuration scalars of SCALARS, from kernel parameter arrays
    (with NumPy: this is setup, not timed)."""
    import jax

    from kernels.collectives import allreduce_cost
    from kernels.compute import compute_scales, input_times

    forward, backward, update = compute_scales(dag_compiled.layer_flops.sum(), dag_compiled.total_params, params)
    latency, per_byte = allreduce_cost(params)
    io, h2d = input_times(params)
    out = dict(forward=forward, backward=backward, update=update, io=io, h2d=h2d, latency=latency,
               per_byte=per_byte, grad_bytes=params["grad_bytes"], no_prefetch=1.0 - params["prefetch"])
    return {k: np.asarray(jax.device_get(v), np.float32) for k, v in out.items()}
