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
from kernels.collectives import LINK_FIELDS, allreduce_time, collective_cost
from kernels.compute import compute_profile, input_times
from kernels.critical_path import finish_times
from kernels.smooth import maximum

PARAMS = (
    "batch_size", "nodes", "gpus_per_node", "workers", "log2_workers", "servers",
    "peak_flops", "memory_bandwidth", "efficiency", "b_half", "bwd_ratio",
    "measured_throughput", "update_bytes_per_param", "grad_bytes",
    "intra_alpha", "intra_bandwidth", "inter_alpha", "inter_bandwidth",
    # Link model extensions: `sweep.params.kernel_params` adds them only when a
    # scenario sets one (else the kernels use the alpha-beta links).
    *(f"{table}_{field}" for table in ("intra", "inter") for field in LINK_FIELDS[2:]),
    "h2d_alpha", "h2d_bandwidth", "io_time_per_sample", "sample_bytes",
    "prefetch", "strategy", "algorithm", "bucket_bytes",
    "ps_pipelined",  # only when a scenario sets ps.pipelined (kernels.collectives)
)

OUTPUTS = (
    "iteration_time", "throughput", "speedup", "scaling_efficiency", "compute_time",
    "communication_time", "exposed_communication", "io_time", "bottleneck",
)


# Optional entries of `p` for fitting (absent in sweeps, so the hard max stays):
#   max_temperature [C] s: smooth max in the channel and the recursion;
#   switch_width [C] ln bytes: smooth protocol steps (kernels.collectives).
SMOOTHING = ("max_temperature", "switch_width")


def slot_ready_flops(dag, backward_units=None):
    """Backward work done when each slot's gradient is ready [S]: backward
    runs from layer L down, so a slot waits for every layer >= its own.
    Work is in FLOPs, or in the units of `backward_units` [L] when given."""
    units = dag.layer_flops if backward_units is None else backward_units
    return jnp.cumsum(units[::-1])[::-1][dag.slot_layer]


def steady_state(work, io, h2d, prefetch, iterations: int, temperature=None):
    """(U_K - U_1) / (K - 1) for update finish times U_k of the recursion

        I_1 = io,  I_k = max(I_{k-1}, [no prefetch] U_{k-1}) + io
        U_1 = I_1 + h2d + work,  U_k = max(I_k + h2d, U_{k-1}) + work

    which is what the DAG's io, h2d and forward-start edges give when one
    iteration's compute and communication take `work` from forward start to
    update finish. `temperature` makes each max smooth (`kernels.smooth`).
    """
    reader = io
    update = io + h2d + work
    first = update
    for _ in range(iterations - 1):
        reader = maximum(reader, jnp.where(prefetch > 0, 0.0, update), temperature) + io
        update = maximum(reader + h2d, update, temperature) + work
    return (update - first) / (iterations - 1)


def iteration_primaries(dag, p, fixed_buckets=False):
    """Iteration time, single-GPU (free communication) time, and the busy
    time of compute, communication and input, as [C] arrays."""
    forward_units, backward_units, forward, backward, update = compute_profile(dag, p)
    cost = collective_cost(p)
    temperature, width = (p.get(name) for name in SMOOTHING)
    _, channel_end, busy = comm_channel(
        p["strategy"], dag.slot_params[:, None], slot_ready_flops(dag, backward_units)[:, None],
        p["bucket_bytes"], cost.latency, cost.per_byte, bytes_scale=p["grad_bytes"], ready_scale=backward,
        return_sent=False, steps=cost.steps, temperature=temperature, width=width, fixed_buckets=fixed_buckets)
    io, h2d = input_times(p)

    forward_time = forward_units.sum() * forward
    backward_time = backward_units.sum() * backward
    compute_time = forward_time + backward_time + update
    # The channel's overhang past the backward pass; an idle channel (P = 1,
    # nothing to send) has none. Work is compute time plus the overhang and is
    # evaluated in one call with it, so no overhang gives bit-identical times.
    overhang = jnp.where(busy > 0, maximum(backward_time, channel_end, temperature) - backward_time, 0.0)
    work = compute_time + overhang
    iterations = dag.update_tasks.shape[0]
    work, compute_time = jnp.broadcast_arrays(work, compute_time)
    t, t_free_comm = steady_state(jnp.stack([work, compute_time]), io, h2d, p["prefetch"], iterations, temperature)
    return {"iteration_time": t, "single_gpu_time": t_free_comm, "compute_time": compute_time,
            "communication_time": busy, "io_time": io + h2d}


def derived_outputs(primary, p):
    """The outputs of DESIGN 2.4 from `iteration_primaries`.

    A separate step on purpose: a sweep jits it apart from the primaries, so
    XLA cannot fuse the channel evaluation into every output that divides by
    the iteration time (it did, computing it once per such output).
    """
    t, t_free_comm = primary["iteration_time"], primary["single_gpu_time"]
    compute_time, busy, io_time = primary["compute_time"], primary["communication_time"], primary["io_time"]
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


def iteration_outputs(dag, p, fixed_buckets=False):
    """All outputs of DESIGN 2.4 as a dict of [C] arrays.

    The iteration with free communication is also the single-GPU case (P = 1
    costs nothing): it gives speedup, efficiency and exposed communication.
    `bottleneck` is the resource with the most busy time per iteration
    (compute, the communication channel, or input): the one that bounds
    throughput once everything else overlaps. `fixed_buckets` (static)
    promises every strategy is bsp or wfbp: the channel then has a closed form.
    """
    return derived_outputs(iteration_primaries(dag, p, fixed_buckets), p)


def task_durations(dag, p):
    """Per-iteration duration table [rows, C] (row layout: `duration_rows`)
    and the bytes each comm slot sends [S, C]."""
    forward_units, backward_units, forward_scale, backward_scale, update = compute_profile(dag, p)
    forward = forward_units[:, None] * forward_scale
    backward = backward_units[:, None] * backward_scale
    io, h2d = input_times(p)
    cost = collective_cost(p)
    slot_bytes = dag.slot_params[:, None] * p["grad_bytes"][None, :]
    ready_by_layer = jnp.cumsum(backward[::-1], axis=0)[::-1]
    sent, _, _ = comm_channel(p["strategy"], slot_bytes, ready_by_layer[dag.slot_layer],
                              p["bucket_bytes"], cost.latency, cost.per_byte, steps=cost.steps)
    comm = allreduce_time(sent, *cost)
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
