"""One steady-state S-SGD iteration for every configuration (DESIGN 2.3, 2.4).

`p` is a `kernels.parameters.Params` (or a mapping of its field names, converted
at each entry point); `dag` is a
`sweep.graph.compiler.CompiledDag`, whose lowered program (`sweep.graph.lowering`) is
the DAG of `sweep.graph.dag` as the kernels run it. Every output here, for sweeps,
fits, sensitivities and `explain`, comes from that one program:
- contracted (an update barrier, input only at the iteration boundary): the
  body of one iteration is evaluated once, as offsets from its entry, and
  the K iterations are the input/update recursion of `steady_state`;
- unrolled: every task of the K iterations, and the iteration time is
  (F_K - F_1) / (K - 1) for the finish F_k of iteration k's exit. A large
  sweep on a CPU runs it as straight-line code (`kernels.straight`; the
  caller asks with `straight`, where `straight_line` allows it), with the
  same segment semantics as `kernels.program`'s scans.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.channel import Planner
from kernels.collectives import stage_costs
from kernels.compute import compute_profile, input_times
from kernels.memory import activation_bytes, model_state_bytes
from kernels.parameters import Params
from kernels.program import Context, compute_durations, run_program
from kernels.smooth import maximum
from kernels.straight import applies as straight_applies, run_straight

def input_recursion(work, io, h2d, prefetch, iterations: int, temperature=None):
    """Lists (I_k, E_k, U_k), k = 1..K, of the recursion

        I_1 = io,  I_k = max(I_{k-1}, [no prefetch] U_{k-1}) + io
        E_k = max(I_k + h2d, U_{k-1}),  U_k = E_k + work

    which is what the DAG's input, entry and barrier edges give when one
    iteration takes `work` from its entry's start (E_k) to its exit's finish
    (U_k). `temperature` makes each max smooth (`kernels.smooth`).
    """
    reader, start, update = [io], [io + h2d], [io + h2d + work]
    for _ in range(iterations - 1):
        reader.append(maximum(reader[-1], jnp.where(prefetch > 0, 0.0, update[-1]), temperature) + io)
        start.append(maximum(reader[-1] + h2d, update[-1], temperature))
        update.append(start[-1] + work)
    return reader, start, update


def steady_state(work, io, h2d, prefetch, iterations: int, temperature=None):
    """(U_K - U_1) / (K - 1) of `input_recursion`."""
    update = input_recursion(work, io, h2d, prefetch, iterations, temperature)[2]
    return (update[-1] - update[0]) / (iterations - 1)


def context(dag, p, fixed_buckets=False, free=False, straight=False) -> Context:
    """The per-configuration costs and switches a program run needs;
    `straight` (static): run it as straight-line code (`straight_line` must allow it)."""
    p = Params.of(p)
    forward, backward, update = compute_profile(dag.forward_total, dag.backward_total, dag.total_params,
                                                dag.traced, p)
    io, h2d = input_times(p)
    compute = {"io": io, "h2d": h2d, "forward": forward, "backward": backward, "update": update,
               "update_shard": update / p.workers}
    temperature, width = p.max_temperature, p.switch_width
    return Context(compute=compute, comm=stage_costs(p), grad_bytes=p.grad_bytes, strategy=p.strategy,
                   threshold=p.bucket_bytes, prefetch=p.prefetch, temperature=temperature, width=width,
                   credit=p.credit_bytes, fuse=p.fuse_posted, planner=planner(p), floor=p.task_floor,
                   fixed_buckets=fixed_buckets, free=free,
                   partition_bytes=dag.partition_bytes, priority_steps=dag.priority_steps,
                   straight=straight)


def straight_line(dag) -> bool:
    """Whether the DAG's program may run as straight-line code (`kernels.straight`):
    an unrolled program without a priority channel, on a CPU. Elsewhere the
    segments' scans run (on an accelerator every unrolled step of a scan
    would be a kernel of its own; the straight program there is not
    measured). Whether it pays is the caller's call: it compiles 3-30x
    slower (`sweep.engine.xla.straight_code`)."""
    return straight_applies(dag.lowered, dag.priority_steps) and jax.default_backend() == "cpu"


def evaluate_program(program, ctx: Context, keep=(), want_all: bool = False):
    """`program` evaluated by `kernels.straight` or `kernels.program`, as `ctx` says."""
    if ctx.straight:
        return run_straight(program, ctx, want_all=want_all)
    return run_program(program, ctx, keep=keep, want_all=want_all)


def planner(p: Params) -> Planner | None:
    """mgwfbp's planner (`kernels.channel.Planner`) when `p` sets one of its
    fields, else None (buckets planned with the true costs)."""
    if p.mgwfbp_alpha is None and p.mgwfbp_min_params is None:
        return None
    nan = jnp.full_like(p.grad_bytes, jnp.nan)
    alpha = nan if p.mgwfbp_alpha is None else p.mgwfbp_alpha
    per_byte = nan if p.mgwfbp_bandwidth is None else 1.0 / p.mgwfbp_bandwidth
    min_params = 0.0 if p.mgwfbp_min_params is None else p.mgwfbp_min_params
    return Planner(alpha, per_byte, min_params * p.grad_bytes)


def iteration_time(lowered, ctx: Context, work_override=None):
    """Steady-state iteration time [C] and the program run."""
    program = lowered.program
    iterations = lowered.iterations
    if lowered.mode == "contracted":
        exit_row = program.row(lowered.exits[0])
        run = None
        if work_override is None:
            run = run_program(program, ctx, keep=[exit_row])
            work = run.finish(exit_row)
        else:
            work = work_override
        io_task, h2d_task = (lowered.dag.tasks[t] for t in lowered.inputs[0])
        io, h2d = io_task.coef * ctx.compute["io"], h2d_task.coef * ctx.compute["h2d"]
        return steady_state(work, io, h2d, ctx.prefetch, iterations, ctx.temperature), run
    exits = [program.row(t) for t in lowered.exits]
    run = evaluate_program(program, ctx, keep=exits)
    return (run.finish(exits[-1]) - run.finish(exits[0])) / (iterations - 1), run


def busy_compute(lowered, ctx: Context):
    """Seconds of compute in one iteration [C]: every task's work times its
    rate, each forward and backward task at least `ctx.floor`."""
    if ctx.floor is None:
        return sum(units * ctx.compute[cost] for cost, units in lowered.compute_units.items())
    total = 0.0
    for cost, coefs in lowered.compute_coefs.items():
        total = total + jnp.sum(compute_durations(cost, jnp.asarray(np.asarray(coefs)[:, None], ctx.grad_bytes.dtype), ctx), 0)
    return total


def single_gpu_time(dag, p, fixed_buckets=False, straight=False, compute_time=None):
    """The iteration time with free communication [C]: the single-GPU case
    (P = 1 costs nothing). `compute_time`: `busy_compute`'s, if known."""
    p = Params.of(p)
    lowered = dag.lowered
    free_ctx = context(dag, p, fixed_buckets, free=True, straight=straight)
    if lowered.mode == "contracted" and lowered.free_by_compute:
        # With free communication the exit waits only for the compute chain.
        if compute_time is None:
            compute_time = busy_compute(lowered, free_ctx)
        return iteration_time(lowered, free_ctx, work_override=compute_time)[0]
    return iteration_time(lowered, free_ctx)[0]


def iteration_primaries(dag, p, fixed_buckets=False, straight=False, t_free=None):
    """Iteration time, single-GPU (free communication) time, the busy time of
    compute, communication and input, and the samples per step, as [C]
    arrays. `fixed_buckets` (static) promises every strategy is bsp or
    wfbp; `straight` (static) runs an unrolled program as straight-line
    code; `t_free`, the single-GPU time if the caller has it
    (`single_gpu_time`)."""
    p = Params.of(p)
    lowered = dag.lowered
    ctx = context(dag, p, fixed_buckets, straight=straight)
    t, run = iteration_time(lowered, ctx)
    compute_time = busy_compute(lowered, ctx)
    if t_free is None:
        t_free = single_gpu_time(dag, p, fixed_buckets, straight, compute_time)
    # DESIGN 2.4: communication time is the sum of the comm durations of one
    # iteration (over every channel); the bottleneck compares the busiest one.
    busy = list(run.busy.values())
    communication = sum(busy, jnp.zeros_like(t))
    busiest = functools.reduce(jnp.maximum, busy, jnp.zeros_like(t))  # busy times are >= 0
    io, h2d = input_times(p)
    micro = dag.micro_batches
    t, t_free, compute_time, communication, busiest = jnp.broadcast_arrays(t, t_free, compute_time, communication,
                                                                          busiest)
    return {"iteration_time": t, "single_gpu_time": t_free, "compute_time": compute_time,
            "communication_time": communication, "busiest_channel_time": busiest, "io_time": micro * (io + h2d),
            "samples": micro * p.batch_size, "memory_per_gpu": memory_per_gpu(dag, p)}


def memory_per_gpu(dag, p):
    """Bytes per GPU: model states (ZeRO stage of the DAG) and one
    micro-batch's activations (`kernels.memory`)."""
    p = Params.of(p)
    states = model_state_bytes(dag.total_params, p.workers, dag.zero, p.optimizer, p.precision)
    activations = activation_bytes(dag.activation_bytes, dag.checkpointed_activation_bytes, p.batch_size,
                                   p.activation_checkpointing, p.precision)
    return states + activations


def derived_outputs(primary, p):
    """The outputs of DESIGN 2.4 from `iteration_primaries`.

    A separate step on purpose: a sweep fences the primaries with
    optimisation barriers (`sweep.engine.evaluate.fenced_primaries`), so XLA
    cannot fuse the channel evaluation into every output that divides by
    the iteration time (it did, computing it once per such output).
    """
    p = Params.of(p)
    t, t_free_comm = primary["iteration_time"], primary["single_gpu_time"]
    compute_time, busy, io_time = primary["compute_time"], primary["communication_time"], primary["io_time"]
    busiest = primary["busiest_channel_time"]
    return {
        "iteration_time": t,
        "throughput": p.workers * primary["samples"] / t,
        "speedup": p.workers * t_free_comm / t,
        "scaling_efficiency": t_free_comm / t,
        "compute_time": compute_time,
        "communication_time": busy,
        # Both are longest paths of the same DAG, the second with zero-cost
        # communication, so t >= t_free exactly and no communication means
        # nothing exposed; the two run through different (equally exact)
        # programs, so float32 rounding alone must not report exposed time.
        "exposed_communication": jnp.where(busy > 0, jnp.maximum(t - t_free_comm, 0.0), 0.0),
        "io_time": io_time,
        "bottleneck": jnp.argmax(jnp.stack(jnp.broadcast_arrays(compute_time, busiest, io_time)), axis=0)
        .astype(jnp.int32),
        "memory_per_gpu": primary["memory_per_gpu"],
        "fits_in_memory": (primary["memory_per_gpu"] <= p.gpu_memory).astype(jnp.int32),
    }


def iteration_outputs(dag, p, fixed_buckets=False, straight=False):
    """All outputs of DESIGN 2.4 as a dict of [C] arrays.

    The iteration with free communication is also the single-GPU case (P = 1
    costs nothing): it gives speedup, efficiency and exposed communication.
    `bottleneck` is the resource with the most busy time per iteration
    (compute, the busiest communication channel, or input): the one that bounds
    throughput once everything else overlaps. `fixed_buckets` (static)
    promises every strategy is bsp or wfbp: the channel then has a closed form;
    `straight` (static), as in `iteration_primaries`.
    """
    p = Params.of(p)
    return derived_outputs(iteration_primaries(dag, p, fixed_buckets, straight), p)


def schedule(dag, p):
    """(finish [T, C], durations [T, C], sent {policy task id: [C]},
    partitions) of every task of the DAG, from the same program the sweep
    runs (for `explain`). `partitions` maps the first slot task of each
    priority channel to (slot task id, start, finish) [steps, C] of its
    partitions in the order sent (task id -1: no partition)."""
    p = Params.of(p)
    return lowered_schedule(dag.lowered, context(dag, p))


def lowered_schedule(lowered, ctx: Context):
    """`schedule` for a lowered DAG and an evaluation context."""
    program = lowered.program
    run = evaluate_program(program, ctx, want_all=True)
    body_finish = run.all_finishes()
    body_durations = jnp.concatenate([jnp.broadcast_to(d, (d.shape[0], *body_finish.shape[1:]))
                                      for d in run.durations], axis=0)
    sent_by_row = run.sent
    num_tasks = len(lowered.dag.tasks)
    if lowered.mode == "unrolled":
        order = list(program.tasks)
        sent = {program.tasks[r]: v for r, v in sent_by_row.items()}
        partitions = {}
        for row, (slot, start, end) in run.partitions.items():
            size = len(program.segments[program.where[row][0]])
            ids = jnp.asarray(program.tasks[row:row + size] + (-1,))
            partitions[program.tasks[row]] = (ids[slot], start, end)  # slot -1 picks the appended -1
        return (_reorder(body_finish, order, num_tasks), _reorder(body_durations, order, num_tasks), sent,
                partitions)
    exit_row = program.row(lowered.exits[0])
    work = run.finish(exit_row)
    io_task, h2d_task = (lowered.dag.tasks[t] for t in lowered.inputs[0])
    io, h2d = io_task.coef * ctx.compute["io"], h2d_task.coef * ctx.compute["h2d"]
    reader, start, _ = input_recursion(work, io, h2d, ctx.prefetch, lowered.iterations)
    finishes, durations, order, sent = [], [], [], {}
    for k in range(lowered.iterations):
        shift = k * lowered.body_offset
        io_id, h2d_id = lowered.inputs[k]
        finishes += [reader[k][None], (reader[k] + h2d)[None], start[k][None] + body_finish]
        durations += [jnp.broadcast_to(io, reader[k].shape)[None], jnp.broadcast_to(h2d, reader[k].shape)[None],
                      body_durations]
        order += [io_id, h2d_id, *(t + shift for t in program.tasks)]
        sent.update({program.tasks[r] + shift: v for r, v in sent_by_row.items()})
    finish = jnp.concatenate([jnp.broadcast_to(f, (f.shape[0], *body_finish.shape[1:])) for f in finishes])
    duration = jnp.concatenate([jnp.broadcast_to(d, (d.shape[0], *body_finish.shape[1:])) for d in durations])
    return _reorder(finish, order, num_tasks), _reorder(duration, order, num_tasks), sent, {}


def _reorder(values, order, num_tasks):
    position = np.empty(num_tasks, np.int64)
    position[np.asarray(order)] = np.arange(len(order))
    return values[position]
