"""One steady-state S-SGD iteration for every configuration (DESIGN 2.3, 2.4).

`p` maps parameter names to [C] arrays (see `PARAMS`); `dag` is a
`sweep.compiler.CompiledDag` (a pytree of arrays shared by all configurations).

Two evaluations of the same DAG live here:
- `iteration_outputs`, used by sweeps, reduces the DAG by its streams. Within
  an iteration every time is a fixed offset from the end of the forward pass:
  the backward chain is a prefix sum and the comm channel one scan over slots
  (`kernels.channel`). Across iterations only io, h2d, forward start and
  update remain, a K-step recursion. This is exact, and costs one short scan
  over [C] vectors instead of a pass over every task.
- `task_durations` + `steady_iteration_time` build the full duration table and
  run the general level-array longest path (`kernels.critical_path`); explain
  and the tests use it, and it is the path for DAGs of any other shape.
"""
from __future__ import annotations

import jax.numpy as jnp

from kernels.channel import comm_channel
from kernels.collectives import allreduce_cost, allreduce_time
from kernels.compute import compute_scales, input_times, layer_times
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


def slot_ready_flops(dag):
    """Backward FLOPs done when each slot's gradient is ready [S]: backward
    runs from layer L down, so a slot waits for every layer >= its own."""
    return jnp.cumsum(dag.layer_flops[::-1])[::-1][dag.slot_layer]


def steady_state(work, io, h2d, prefetch, iterations: int):
    """(U_K - U_1) / (K - 1) for update finish times U_k of the recursion

        I_1 = io,  I_k = max(I_{k-1}, [no prefetch] U_{k-1}) + io
        U_1 = I_1 + h2d + work,  U_k = max(I_k + h2d, U_{k-1}) + work

    which is what the DAG's io, h2d and forward-start edges give when one
    iteration's compute and communication take `work` from forward start to
    update finish.
    """
    reader = io
    update = io + h2d + work
    first = update
    for _ in range(iterations - 1):
        reader = jnp.maximum(reader, jnp.where(prefetch > 0, 0.0, update)) + io
        update = jnp.maximum(reader + h2d, update) + work
    return (update - first) / (iterations - 1)


def iteration_outputs(dag, p):
    """All outputs of DESIGN 2.4 as a dict of [C] arrays.

    The iteration with free communication is also the single-GPU case (P = 1
    costs nothing): it gives speedup, efficiency and exposed communication.
    `bottleneck` is the resource with the most busy time per iteration
    (compute, the communication channel, or input): the one that bounds
    throughput once everything else overlaps.
    """
    total_flops = dag.layer_flops.sum()
    forward, backward, update = compute_scales(total_flops, dag.total_params, p)
    latency, per_byte = allreduce_cost(p)
    _, channel_end, busy = comm_channel(
        p["strategy"], dag.slot_params[:, None], slot_ready_flops(dag)[:, None], p["bucket_bytes"],
        latency, per_byte, bytes_scale=p["grad_bytes"], ready_scale=backward, return_sent=False)
    io, h2d = input_times(p)

    forward_time = total_flops * forward
    backward_time = total_flops * backward
    compute_time = forward_time + backward_time + update
    work = forward_time + jnp.maximum(backward_time, channel_end) + update
    iterations = dag.update_tasks.shape[0]
    t = steady_state(work, io, h2d, p["prefetch"], iterations)
    t_free_comm = steady_state(compute_time, io, h2d, p["prefetch"], iterations)
    io_time = io + h2d
    return {
        "iteration_time": t,
        "throughput": p["workers"] * p["batch_size"] / t,
        "speedup": p["workers"] * t_free_comm / t,
        "scaling_efficiency": t_free_comm / t,
        "compute_time": compute_time,
        "communication_time": busy,
        "exposed_communication": t - t_free_comm,
        "io_time": io_time,
        "bottleneck": jnp.argmax(jnp.stack(jnp.broadcast_arrays(compute_time, busy, io_time)), axis=0)
        .astype(jnp.int32),
    }


def task_durations(dag, p):
    """Per-iteration duration table [rows, C] (row layout: `duration_rows`)
    and the bytes each comm slot sends [S, C]."""
    forward, backward, update = layer_times(dag.layer_flops, dag.total_params, p)
    io, h2d = input_times(p)
    latency, per_byte = allreduce_cost(p)
    slot_bytes = dag.slot_params[:, None] * p["grad_bytes"][None, :]
    ready_by_layer = jnp.cumsum(backward[::-1], axis=0)[::-1]
    sent, _, _ = comm_channel(p["strategy"], slot_bytes, ready_by_layer[dag.slot_layer],
                              p["bucket_bytes"], latency, per_byte)
    comm = allreduce_time(sent, latency, per_byte)
    zero = jnp.zeros_like(io)
    table = jnp.concatenate([io[None], h2d[None], forward, backward, comm, update[None], zero[None]])
    return table, sent


def steady_iteration_time(dag, table, prefetch):
    """(finish(update_K) - finish(update_1)) / (K - 1) over the level arrays."""
    durations = table[dag.task_row]
    switches = jnp.stack([jnp.ones_like(prefetch), 1.0 - prefetch])
    finish = finish_times(dag.level_tasks, dag.level_preds, dag.level_switch, durations, switches)
    updates = finish[dag.update_tasks]
    return (updates[-1] - updates[0]) / (updates.shape[0] - 1)


def duration_rows(num_layers: int, num_slots: int) -> dict[str, int]:
    """Row offsets of the per-iteration duration table:
    [io, h2d, forward 1..L, backward 1..L, comm slot 1..S, update, zero]."""
    return {"io": 0, "h2d": 1, "forward": 2, "backward": 2 + num_layers,
            "comm": 2 + 2 * num_layers, "update": 2 + 2 * num_layers + num_slots,
            "zero": 3 + 2 * num_layers + num_slots}
