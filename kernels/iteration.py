"""One steady-state S-SGD iteration for every configuration (DESIGN 2.3, 2.4).

`p` maps parameter names to [C] arrays (see `PARAMS`); `dag` is a
`sweep.compiler.CompiledDag` (a pytree of arrays shared by all configurations).
"""
from __future__ import annotations

import jax.numpy as jnp

from kernels.buckets import bucket_bytes
from kernels.collectives import allreduce_cost, allreduce_time
from kernels.compute import input_times, layer_times
from kernels.critical_path import finish_times

PARAMS = (
    "batch_size", "nodes", "gpus_per_node", "workers", "log2_workers", "servers",
    "peak_flops", "memory_bandwidth", "efficiency", "b_half", "bwd_ratio",
    "measured_throughput", "update_bytes_per_param", "grad_bytes",
    "intra_alpha", "intra_bandwidth", "inter_alpha", "inter_bandwidth",
    "h2d_alpha", "h2d_bandwidth", "io_time_per_sample", "sample_bytes",
    "prefetch", "strategy", "algorithm", "bucket_bytes",
)

OUTPUTS = (
    "iteration_time", "throughput", "speedup", "scaling_efficiency", "compute_time",
    "communication_time", "exposed_communication", "io_time", "bottleneck",
)


def task_durations(dag, p):
    """Per-iteration duration table [rows, C] (row layout: `duration_rows`)."""
    forward, backward, update = layer_times(dag.layer_flops, dag.total_params, p)
    io, h2d = input_times(p)
    latency, per_byte = allreduce_cost(p)
    slot_bytes = dag.slot_params[:, None] * p["grad_bytes"][None, :]
    # Gradient-ready time of each slot, from the start of the backward pass.
    ready_by_layer = jnp.cumsum(backward[::-1], axis=0)[::-1]
    sent = bucket_bytes(p["strategy"], slot_bytes, ready_by_layer[dag.slot_layer],
                        p["bucket_bytes"], latency, per_byte)
    comm = allreduce_time(sent, latency, per_byte)
    zero = jnp.zeros_like(io)
    table = jnp.concatenate([io[None], h2d[None], forward, backward, comm, update[None], zero[None]])
    return table, sent


def steady_iteration_time(dag, table, prefetch):
    """(finish(update_K) - finish(update_1)) / (K - 1) for a duration table."""
    durations = table[dag.task_row]
    switches = jnp.stack([jnp.ones_like(prefetch), 1.0 - prefetch])
    finish = finish_times(dag.level_tasks, dag.level_preds, dag.level_switch, durations, switches)
    updates = finish[dag.update_tasks]
    return (updates[-1] - updates[0]) / (updates.shape[0] - 1)


def iteration_outputs(dag, p):
    """All outputs of DESIGN 2.4 as a dict of [C] arrays.

    The iteration is evaluated twice in one pass (configurations concatenated
    on the minor axis): as given, and with free communication, which is also
    the single-GPU case (P = 1 costs nothing). `bottleneck` is the resource
    with the most busy time per iteration (compute, the communication channel,
    or input): the one that bounds throughput once everything else overlaps.
    """
    table, _ = task_durations(dag, p)
    rows = _rows(dag)
    comm = slice(rows["comm"], rows["update"])
    free_comm = table.at[comm].set(0.0)
    c = table.shape[1]
    prefetch = jnp.tile(p["prefetch"], 2)
    times = steady_iteration_time(dag, jnp.concatenate([table, free_comm], axis=1), prefetch)
    t, t_free_comm = times[:c], times[c:]

    compute_time = table[rows["forward"]:rows["comm"]].sum(0) + table[rows["update"]]
    communication_time = table[comm].sum(0)
    io_time = table[rows["io"]] + table[rows["h2d"]]
    return {
        "iteration_time": t,
        "throughput": p["workers"] * p["batch_size"] / t,
        "speedup": p["workers"] * t_free_comm / t,
        "scaling_efficiency": t_free_comm / t,
        "compute_time": compute_time,
        "communication_time": communication_time,
        "exposed_communication": t - t_free_comm,
        "io_time": io_time,
        "bottleneck": jnp.argmax(jnp.stack([compute_time, communication_time, io_time]), axis=0).astype(jnp.int32),
    }


def duration_rows(num_layers: int, num_slots: int) -> dict[str, int]:
    """Row offsets of the per-iteration duration table:
    [io, h2d, forward 1..L, backward 1..L, comm slot 1..S, update, zero]."""
    return {"io": 0, "h2d": 1, "forward": 2, "backward": 2 + num_layers,
            "comm": 2 + 2 * num_layers, "update": 2 + 2 * num_layers + num_slots,
            "zero": 3 + 2 * num_layers + num_slots}


def _rows(dag):
    return duration_rows(dag.layer_flops.shape[0], dag.slot_layer.shape[0])
