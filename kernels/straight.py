"""An unrolled program as straight-line code: one [C] finish per task.

`kernels.program.run_program` evaluates each segment of a lowered program
(`sweep.graph.lowering`) at once, a scan over its tasks with every row an
[n, C] array. On a CPU an unrolled program (every task of K iterations)
then spends its time on the scans' steps, a few vector passes over the
configurations per task. Here the same segments are walked task by task in
the trace instead: each task's finish is one [C] value, its start the
maximum of its (switched) inputs and of the task before it on its
resource, and the policy channels take the same step as their scan
(`kernels.channel.channel_step`), called slot by slot. Every operation is
then elementwise over the configurations, and XLA's CPU backend compiles the
whole program into one loop over them that keeps each finish in a register:
what a hand-written evaluator of the DAG does.

The segment semantics are `kernels.program`'s, row by row: a chain's
f_i = max(f_{i-1} + g_i, r_i) + d_i (its first task starts at 0 without
inputs), a map's f_i = r_i + d_i, a register scan's f_i = max(inputs,
in-segment predecessors) + d_i over the same register file, a follow stage's
durations from the bytes its slot sent. Priority channels are not unrolled
(`applies`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from kernels.channel import channel_step
from kernels.codes import COMM_COSTS, switch_rule
from kernels.program import NEG, Run, SentBytes, switches_on, task_durations
from kernels.smooth import later


def applies(lowered, priority_steps: int) -> bool:
    """Whether a lowered DAG runs as straight-line code: an unrolled program
    without a priority channel (its partitions are a scan of their own)."""
    return lowered.mode == "unrolled" and priority_steps == 0


@dataclasses.dataclass
class Rows:
    """A segment's finishes, one [C] value (or scalar) per task; read as rows
    of the run's common `shape`."""
    values: list
    shape: tuple = ()

    def rows(self, idx):
        return jnp.stack([jnp.broadcast_to(self.values[i], self.shape) for i in idx])

    def last(self):
        return self.values[-1]

    def dense(self):
        return self.rows(range(len(self.values)))


def run_straight(program, ctx, want_all: bool = False) -> Run:
    """`kernels.program.run_program` of `program`, task by task."""
    values: list[Rows] = []
    sent = SentBytes()
    busy: dict = {}
    durations = [] if want_all else None
    for seg in program.segments:
        if seg.kind == "policy":
            finish, seg_sent, d, seg_busy = _policy(program, seg, values, sent, ctx)
            first_row = program.tasks.index(seg.tasks[0])
            sent.add(range(first_row, first_row + len(seg)), seg_sent)  # a list of [C]: read slot by slot
            busy_by = {seg.resource: seg_busy}
        elif seg.kind == "scan":
            finish, d, busy_by = _scan(program, seg, values, sent, ctx)
        else:
            finish, d = _rows(program, seg, values, sent, ctx)
            busy_by = {seg.resource: sum(d)} if seg.cost in COMM_COSTS else {}
        values.append(Rows(finish))
        if seg.iteration == 1:
            for resource, b in busy_by.items():
                busy[resource] = busy.get(resource, 0.0) + b
        if want_all:
            durations.append(d)
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for rows in values for v in rows.values))
    for rows in values:
        rows.shape = shape
    if want_all:
        durations = [jnp.stack([jnp.broadcast_to(x, shape) for x in d]) for d in durations]
    return Run(program, values, sent, busy, durations)


def _switched_on(switch, ctx, sent):
    """Whether an edge with this switch is on ([C] bool, `switches_on`), or
    True (always)."""
    if switch == 0:
        return True
    sends = (sent[switch_rule(switch)[1]] > 0)[None] if switch >= 2 else None
    return switches_on([switch], ctx.prefetch, sends)[0]


def _input(program, inputs, values, sent, ctx):
    """The latest finish among a task's inputs from earlier segments, each
    gated by its switch; None without inputs."""
    out = None
    for src, switch in inputs:
        s, j = program.where[src]
        v = values[s].values[j]
        on = _switched_on(switch, ctx, sent)
        if on is not True:
            v = jnp.where(on, v, NEG)
        out = v if out is None else later(out, v, ctx.temperature)
    return out


def _after(start, d):
    """start + d, leaving out a duration that is zero by construction (free
    communication, a task without cost), which XLA would still add."""
    return start if isinstance(d, float) and d == 0.0 else start + d


def _rows(program, seg, values, sent, ctx):
    """A chain, follow stage or map, task by task: (finishes, durations)."""
    finishes, durations = [], []
    previous = None
    for i, coef in enumerate(seg.coef):
        nbytes = sent[seg.refs[i]] if seg.kind == "follow" else None
        d = task_durations(seg.cost, float(coef), ctx, nbytes)
        start = _input(program, seg.inputs[i], values, sent, ctx)
        if seg.kind != "map" and previous is not None:
            on = True if seg.gates is None else _switched_on(seg.gates[i], ctx, sent)
            after = previous if on is True else jnp.where(on, previous, NEG)
            start = after if start is None else later(after, start, ctx.temperature)
        if start is None:  # no predecessor at all: the program starts at 0
            start = 0.0
        previous = _after(start, d)
        finishes.append(previous)
        durations.append(d)
    return finishes, durations


def _policy(program, seg, values, sent, ctx):
    """A policy channel, slot by slot with the channel's own step:
    (finishes, sent bytes, durations, busy time)."""
    ready = []
    for i in range(len(seg)):
        r = _input(program, seg.inputs[i], values, sent, ctx)
        ready.append(0.0 if r is None and i == 0 else (NEG if r is None else r))
    cost = None if ctx.free else ctx.comm[seg.cost]  # None: free, no durations to compute
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in (*ready, ctx.grad_bytes, ctx.strategy,
                                                           *(() if cost is None else (cost.latency,)))))
    carry, step = channel_step(ctx.strategy, ctx.threshold, cost, shape, ctx.grad_bytes.dtype,
                               bytes_scale=ctx.grad_bytes, temperature=ctx.temperature, width=ctx.width,
                               planner=ctx.planner, fixed_buckets=ctx.fixed_buckets)
    finishes, sent_bytes, durations = [], [], []
    n = len(seg)
    for i in range(n):
        carry, (finish, sent_i, d) = step(carry, float(seg.coef[i]), ready[i], ready[min(i + 1, n - 1)], i == n - 1)
        finishes.append(finish)
        sent_bytes.append(sent_i)
        durations.append(d)
    return finishes, sent_bytes, durations, carry[2]


def _scan(program, seg, values, sent, ctx):
    """A register scan's tasks one by one over the same register file (a
    Python list): (finishes, durations, busy time by resource)."""
    regs: list[Any] = [NEG] * (seg.num_regs + 1)
    finishes, durations, busy = [], [], {}
    for i in range(len(seg)):
        ready = [regs[r] for r in seg.pred_regs[i] if r != seg.num_regs]
        ext = _input(program, seg.inputs[i], values, sent, ctx)
        if ext is not None:
            ready.append(ext)
        if seg.roots[i]:
            ready.append(0.0)
        start = ready[0] if ready else NEG
        for r in ready[1:]:
            start = later(start, r, ctx.temperature)
        d = task_durations(seg.costs[i], float(seg.coef[i]), ctx)
        finish = _after(start, d)
        regs[seg.dst[i]] = finish
        finishes.append(finish)
        durations.append(d)
        if seg.costs[i] in COMM_COSTS:
            busy[seg.resources[i]] = busy.get(seg.resources[i], 0.0) + d
    return finishes, durations, busy
