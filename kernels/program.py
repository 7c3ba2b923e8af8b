"""Evaluate a lowered DAG program (`sweep.graph.lowering.Program`) for every configuration.

Each segment's finish times come out at once ([n, C], configurations on the
minor axis):
- a chain with inputs only at its first task and a linear cost stays *lazy*:
  f_i = base + prefix_i * scale, a [C] base and per-task constants, never
  materialised unless a later segment reads its rows;
- a chain with inputs along it is the recurrence f_i = max(f_{i-1}, r_i) + d_i
  (`kernels.chain`: a scan on CPU, prefix sums and maxima elsewhere), with
  an edge along it that may be switched off;
- a map (tasks that do not wait for one another) is f_i = r_i + d_i;
- a policy channel is one scan (`kernels.channel.policy_channel`), given its
  inputs relative to a lazy base when they come from one lazy chain.
An input is the finish of a task in an earlier segment, gated by its edge's
switch (input prefetch, or whether a policy slot sent its bucket). With a
`temperature` every max is smooth (`kernels.smooth`); its running form is a
cumulative log-sum-exp.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels.broadcast import lead
from kernels.chain import chain_finish
from kernels.channel import policy_channel
from kernels.priority import priority_channel
from kernels.collectives import CollectiveCost, allreduce_time, piecewise_time
from kernels.smooth import max_along, maximum
from kernels.codes import COMM_COSTS, IF_SENDS, NO_PREFETCH, PRIORITY, switch_rule

NEG = -jnp.inf
FLOORED_COSTS = ("forward", "backward")  # the compute costs `Context.floor` bounds below


def has_floor(cost, ctx) -> bool:
    """Whether `ctx.floor` bounds tasks of this cost below (a floor is set
    and the cost is forward or backward)."""
    return ctx.floor is not None and cost in FLOORED_COSTS


def floored(cost: str, d, ctx) -> Any:
    """Compute durations `d` of one cost row ([n, C] or [C]), at least
    `ctx.floor` where the row is forward or backward."""
    return at_least_floor(d, ctx) if has_floor(cost, ctx) else d


def at_least_floor(d, ctx) -> Any:
    """`d` ([n, C] or [C]) at least `ctx.floor` (a smooth max with a temperature)."""
    return maximum(d, lead(ctx.floor, jnp.ndim(d)), ctx.temperature)


def compute_durations(cost: str, coef, ctx) -> Any:
    """Seconds of compute tasks of one cost row: their work (`coef`, [n, 1],
    or a scalar for one task) times its rate, floored (`floored`)."""
    return floored(cost, coef * lead(ctx.compute[cost], max(jnp.ndim(coef), 1)), ctx)


def task_durations(cost, coef, ctx, nbytes=None, zero=0.0) -> Any:
    """Seconds of tasks of one cost ([n, C] for `coef` [n, 1], [C] for a
    scalar): `coef` units of a compute cost (`compute_durations`), or a
    collective of `nbytes` (default `coef` gradient units); `zero` where
    nothing is computed (no cost, or free communication)."""
    if cost is None:
        return zero
    if cost not in COMM_COSTS:
        return compute_durations(cost, coef, ctx)
    if ctx.free:
        return zero
    if nbytes is None:
        if isinstance(coef, float):
            # One task (straight-line code): its bytes, coef * grad_bytes, are > 0 exactly where
            # coef is (grad_bytes > 0 by the schema), known when tracing: no test per configuration.
            return piecewise_time(coef * ctx.grad_bytes, *ctx.comm[cost], width=ctx.width) if coef > 0 else zero
        nbytes = coef * lead(ctx.grad_bytes, max(jnp.ndim(coef), 1))
    return allreduce_time(nbytes, *ctx.comm[cost], width=ctx.width)


def _row(x):
    """A per-configuration value [C] as a row [1, C] of an [n, C] array (a scalar stays one)."""
    return lead(x, 2)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["compute", "comm", "grad_bytes", "strategy", "threshold", "prefetch", "temperature",
                                "width", "credit", "fuse", "planner", "floor"], meta_fields=["fixed_buckets", "free", "partition_bytes",
                                                                 "priority_steps", "straight"])
@dataclasses.dataclass(frozen=True)
class Context:
    """What one evaluation needs besides the program: per-configuration
    seconds per unit of each compute cost, collective costs, and switches."""
    compute: dict  # cost -> [C] seconds per unit
    comm: Any  # cost -> CollectiveCost (a lazily filled mapping)
    grad_bytes: Any  # [C]
    strategy: Any
    threshold: Any
    prefetch: Any
    temperature: Any = None
    width: Any = None
    credit: Any = None  # [C] bytes: the priority channel's credit
    fuse: Any = None  # [C] 1: the priority channel fuses what is posted (None: one partition a call)
    planner: Any = None  # kernels.channel.Planner: mgwfbp's buckets as its implementation plans them
    floor: Any = None  # [C] seconds: least time of a forward or backward task (None: none)
    fixed_buckets: bool = False
    free: bool = False  # communication costs nothing (the single-GPU reference)
    partition_bytes: float = 4_000_000.0  # the priority channel's largest partition
    priority_steps: int = 0  # its partitions per iteration at most (0: no configuration may use it)
    straight: bool = False  # evaluate an unrolled program task by task (`kernels.straight`)


@dataclasses.dataclass
class Lazy:
    base: Any  # [C] or scalar
    prefix: np.ndarray  # [n] cumulative units
    scale: Any  # [C] seconds per unit

    def rows(self, idx):
        # The per-task constants in the dtype of the per-configuration values.
        prefix = jnp.asarray(self.prefix[np.asarray(idx)][:, None], jnp.result_type(self.base, self.scale))
        return _row(self.base) + prefix * _row(self.scale)

    def last(self):
        return self.base + float(self.prefix[-1]) * self.scale

    def dense(self):
        return self.rows(np.arange(len(self.prefix)))


@dataclasses.dataclass
class Dense:
    finish: Any  # [n, C]

    def rows(self, idx):
        # (Most reads are one row or a run of them: a slice, which traces and
        # compiles faster than the gather it equals.)
        return _take(self.finish, idx)

    def last(self):
        return self.finish[-1]

    def dense(self):
        return self.finish


@dataclasses.dataclass
class Tail:
    """Only the last finish is kept (nothing reads the others)."""
    value: Any
    size: int

    def rows(self, idx):
        idx = np.asarray(idx)
        if not (idx == self.size - 1).all():
            raise AssertionError("a tail-only segment was read before its end")
        return jnp.broadcast_to(self.value, (len(idx), *jnp.shape(self.value)))

    def last(self):
        return self.value


@dataclasses.dataclass
class Registers:
    """A scan segment's result: the registers that hold finishes read later."""
    regs: Any  # [R, C]
    out_reg: dict
    ys: Any = None  # [m, C] every finish, when asked for

    def rows(self, idx):
        if self.ys is not None:
            return self.ys[np.asarray(idx)]
        return self.regs[np.asarray([self.out_reg[i] for i in idx])]

    def last(self):
        return self.regs[self.out_reg[max(self.out_reg)]]

    def dense(self):
        return self.ys


@dataclasses.dataclass
class Run:
    program: Any
    values: list  # per segment: Lazy | Dense | Tail
    sent: dict  # program row of a policy slot -> [C] bytes it sent
    busy: dict  # resource -> [C] busy seconds in iteration 1
    durations: list | None  # per segment [n, C], when asked for
    # program row of a priority channel's first slot -> (slot index, start, finish) [steps, C]
    # of its partitions in the order sent, when every duration is asked for
    partitions: dict = dataclasses.field(default_factory=dict)

    def finish(self, row):
        seg, i = self.program.where[row]
        value = self.values[seg]
        return value.last() if i == len(self.program.segments[seg]) - 1 else value.rows([i])[0]

    def all_finishes(self):
        return jnp.concatenate([v.dense() for v in self.values], axis=0)  # segment order = row order


class SentBytes(Mapping):
    """Bytes each policy slot sent ([C]), by program row; kept as the [n, C]
    blocks of their channels, so that many rows are read in one gather
    (`rows`) instead of one slice each."""

    def __init__(self):
        self._where: dict = {}  # row -> (block number, index)
        self._blocks: list = []

    def add(self, rows, block):
        for i, row in enumerate(rows):
            self._where[row] = (len(self._blocks), i)
        self._blocks.append(block)

    def __getitem__(self, row):
        b, i = self._where[row]
        return self._blocks[b][i]

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)

    def rows(self, refs):
        """[m, C]: the bytes sent by each of the rows `refs`."""
        located = [self._where[r] for r in refs]
        blocks = sorted({b for b, _ in located})
        if len(blocks) == 1:
            return _take(self._blocks[blocks[0]], [i for _, i in located])
        parts = [self._blocks[b] for b in blocks]
        offsets = np.cumsum([0] + [len(x) for x in parts])
        return _take(jnp.concatenate(parts), [offsets[blocks.index(b)] + i for b, i in located])


def _take(x, idx):
    """x[idx] along the first axis; a slice when `idx` is a contiguous run."""
    idx = np.asarray(idx, np.int64)
    if len(idx) and (np.diff(idx) == 1).all():
        return x[int(idx[0]):int(idx[-1]) + 1]
    return x[idx]


def _zero_cost(like) -> CollectiveCost:
    zero = jnp.zeros_like(like)
    return CollectiveCost(zero, zero, None)


def run_program(program, ctx: Context, keep=(), want_all: bool = False) -> Run:
    """Evaluate `program`; `keep` names program rows whose finish is read
    afterwards, `want_all` keeps every finish, duration and sent bytes."""
    needed = _needed_rows(program, keep)
    values: list = []
    sent = SentBytes()
    busy: dict = {}
    partitions: dict = {}
    durations = [] if want_all else None
    refs = set(program.switch_refs)
    for g, seg in enumerate(program.segments):
        if seg.kind == "scan":
            value, seg_busy_by, d = _scan(program, seg, values, sent, ctx, want_all)
            if seg.iteration == 1:
                for resource, b in seg_busy_by.items():
                    busy[resource] = busy.get(resource, 0.0) + b
            values.append(value)
            if want_all:
                durations.append(d)
            continue
        if seg.kind == "policy":
            value, seg_sent, seg_busy, d, seg_partitions = _policy(program, seg, g, values, sent, ctx, needed[g], refs,
                                                                   want_all)
            if seg_sent is not None:
                first_row = program.tasks.index(seg.tasks[0])
                sent.add(range(first_row, first_row + len(seg)), seg_sent)
            if seg_partitions is not None:
                partitions[program.tasks.index(seg.tasks[0])] = seg_partitions
        elif seg.kind == "map":
            value, seg_busy, d = _map(program, seg, values, sent, ctx, want_all)
        else:
            value, seg_busy, d = _chain(program, seg, values, sent, ctx, needed[g], want_all)
        values.append(value)
        if seg_busy is not None and seg.iteration == 1:
            busy[seg.resource] = busy.get(seg.resource, 0.0) + seg_busy
        if want_all:
            durations.append(d)
    return Run(program, values, sent, busy, durations, partitions)


def _needed_rows(program, keep) -> list[set[int]]:
    """Rows of each segment that something reads after it."""
    needed: list[set[int]] = [set() for _ in program.segments]
    for seg in program.segments:
        rows = [src for row in seg.inputs for src, _ in row] + list(seg.refs or ())
        for src in rows:
            s, i = program.where[src]
            needed[s].add(i)
    for row in keep:
        s, i = program.where[row]
        needed[s].add(i)
    return needed


def switches_on(switches, prefetch, sends) -> Any:
    """Whether edges with these switches are on ([m, C] or [m, 1] bool):
    always (0), without input prefetch (NO_PREFETCH: `prefetch` <= 0), or
    as the policy slot each names sent (IF_SENDS) or held (IF_HOLDS) its
    bucket; `sends` [m, C] says whether each switch's slot sent (any row
    where a switch names none; None when no switch does)."""
    out = jnp.ones((len(switches), 1), bool)
    by_slot = np.array([switch >= 2 for switch in switches])
    if by_slot.any():
        holds = np.array([switch >= 2 and switch_rule(switch)[0] != IF_SENDS for switch in switches])
        out = jnp.where(by_slot[:, None], jnp.where(holds[:, None], ~sends, sends), out)
    no_prefetch = np.array([switch == NO_PREFETCH for switch in switches])
    if no_prefetch.any():
        out = jnp.where(no_prefetch[:, None], _row(prefetch <= 0), out)
    return out


def _enabled_rows(switches, ctx: Context, sent):
    """`switches_on` for a program run: the slots are read in one gather."""
    switches = list(switches)
    refs = [switch_rule(switch)[1] for switch in switches if switch >= 2]
    sends = None
    if refs:
        sends = sent.rows([switch_rule(switch)[1] if switch >= 2 else refs[0] for switch in switches]) > 0
    return switches_on(switches, ctx.prefetch, sends)


def _gate(switch, value, ctx: Context, sent):
    return value if switch == 0 else jnp.where(_enabled_rows([switch], ctx, sent)[0], value, NEG)


def _combine(values, temperature):
    out = values[0]
    for v in values[1:]:
        out = maximum(out, v, temperature)
    return out


def _ready(program, seg, values, sent, ctx):
    """Each row's input time r [n, C] (-inf where a row has none; 0 for a
    first row with no predecessor at all: the program starts at 0).

    Inputs are gathered per source segment (one gather, one gate mask and
    one scatter for all its rows, whatever their switches), so a chain fed
    by many slots (a layerwise forward pass) costs O(n C), not O(n^2 C)."""
    n = len(seg)
    groups: dict = {}  # (source segment, occurrence) -> ([dst], [src row], [switch])
    for i, row in enumerate(seg.inputs):
        seen: dict = {}
        for src, switch in row:
            s, j = program.where[src]
            key = (s, seen.get(s, 0))
            seen[s] = key[1] + 1
            dst, rows, switches = groups.setdefault(key, ([], [], []))
            dst.append(i)
            rows.append(j)
            switches.append(switch)
    parts = []
    for (s, _), (dst, rows, switches) in groups.items():
        vals = values[s].rows(rows)
        if len(set(switches)) == 1:
            vals = _gate(switches[0], vals, ctx, sent)
        else:
            vals = jnp.where(_enabled_rows(switches, ctx, sent), vals, NEG)
        if dst != list(range(n)):  # spread over the n rows by a gather (a scatter is slow on CPU)
            position = np.zeros(n, np.int64)
            position[np.asarray(dst)] = np.arange(len(dst))
            present = np.zeros(n, bool)
            present[np.asarray(dst)] = True
            vals = jnp.where(present[:, None], _take(vals, position), NEG)
        parts.append(vals)
    if not parts:
        return None
    return _combine(jnp.broadcast_arrays(*parts) if len(parts) > 1 else parts, ctx.temperature)


def _ready_or_start(program, seg, values, sent, ctx, dtype):
    """`_ready`, with a first row that has no input starting at 0 ([n, C] or [n, 1])."""
    r = _ready(program, seg, values, sent, ctx)
    if seg.inputs[0]:
        return r
    if r is None:
        return jnp.full((len(seg), 1), NEG, dtype).at[0].set(0.0)
    return r.at[0].set(0.0)


def _row0_input(program, seg, values, sent, ctx):
    """The first row's input time [C] (0 when it has none)."""
    if not seg.inputs[0]:
        return 0.0
    vals = []
    for src, switch in seg.inputs[0]:
        s, j = program.where[src]
        vals.append(_gate(switch, values[s].rows([j])[0], ctx, sent))
    return _combine(vals, ctx.temperature)


def _durations(seg, ctx, sent, program):
    """[n, C] (or [n, 1]) seconds of each task of a non-policy segment."""
    dtype = ctx.grad_bytes.dtype  # of the per-task constants, as of the per-configuration values
    coef = jnp.asarray(seg.coef[:, None], dtype)
    nbytes = sent.rows(seg.refs) if seg.kind == "follow" and not ctx.free else None
    return task_durations(seg.cost, coef, ctx, nbytes, zero=jnp.zeros((len(seg), 1), dtype))


def _chain(program, seg, values, sent, ctx, needed, want_all):
    # A floor makes a compute chain's durations nonlinear in its rate: no lazy prefix sums then.
    linear = seg.cost is None or (seg.cost not in COMM_COSTS and not has_floor(seg.cost, ctx))
    comm = seg.cost in COMM_COSTS
    if linear and seg.gates is None and not any(seg.inputs[1:]):
        scale = 0.0 if seg.cost is None else ctx.compute[seg.cost]
        value = Lazy(_row0_input(program, seg, values, sent, ctx), np.cumsum(seg.coef), scale)
        d = jnp.asarray(seg.coef[:, None], ctx.grad_bytes.dtype) * _row(scale) if want_all else None
        return value, None, d
    d = _durations(seg, ctx, sent, program)
    d, r = jnp.broadcast_arrays(d, _ready_or_start(program, seg, values, sent, ctx, d.dtype))
    g = None
    if seg.gates is not None:  # the edge from the row before; row 0 has none
        first = np.arange(len(seg)) == 0
        g = jnp.where(first[:, None], NEG, jnp.where(_enabled_rows(seg.gates, ctx, sent), 0.0, NEG))
    finish = chain_finish(r, d, g, ctx.temperature)
    seg_busy = jnp.sum(d, axis=0) if comm else None
    return Dense(finish), seg_busy, (d if want_all else None)


def _map(program, seg, values, sent, ctx, want_all):
    """Tasks that wait only for earlier segments: each starts at its input
    time (0 without one) and finishes a duration later, all at once."""
    d = _durations(seg, ctx, sent, program)
    r = _ready(program, seg, values, sent, ctx)
    roots = np.array([not row for row in seg.inputs])
    if r is None:
        r = jnp.zeros((len(seg), 1), d.dtype)
    elif roots.any():
        r = jnp.where(roots[:, None], 0.0, r)
    finish = r + d
    seg_busy = jnp.sum(jnp.broadcast_to(d, finish.shape), axis=0) if seg.cost in COMM_COSTS else None
    return Dense(finish), seg_busy, (jnp.broadcast_to(d, finish.shape) if want_all else None)


def _lazy_source(program, seg, values):
    """(source Lazy, its rows) when every row has exactly one always-on
    input and all come from the same lazy segment, else None."""
    sources = set()
    rows = []
    for row in seg.inputs:
        if len(row) != 1 or row[0][1] != 0:
            return None
        s, j = program.where[row[0][0]]
        sources.add(s)
        rows.append(j)
    if len(sources) != 1 or not isinstance(values[next(iter(sources))], Lazy):
        return None
    return values[sources.pop()], np.asarray(rows)


def _policy(program, seg, g, values, sent, ctx, needed, refs, want_all):
    n = len(seg)
    first_row = program.tasks.index(seg.tasks[0])
    rows = range(first_row, first_row + n)
    want_sent = want_all or any(r in refs for r in rows)
    want_slots = want_all or bool(needed - {n - 1})
    cost = _zero_cost(ctx.grad_bytes) if ctx.free else ctx.comm[seg.cost]
    dtype = ctx.grad_bytes.dtype  # of the per-slot constants, as of the per-configuration values
    source = _lazy_source(program, seg, values)
    if source is not None:
        lazy, src_rows = source
        base, ready, ready_scale = lazy.base, jnp.asarray(lazy.prefix[src_rows][:, None], dtype), lazy.scale
    else:
        base, ready, ready_scale = 0.0, _ready_or_start(program, seg, values, sent, ctx, dtype), 1.0
    finish, seg_sent, last, busy, d = policy_channel(
        ctx.strategy, ctx.threshold, jnp.asarray(seg.coef[:, None], dtype), ready, cost, ready_scale=ready_scale,
        bytes_scale=ctx.grad_bytes, want_slots=want_slots, want_sent=want_sent, want_durations=want_all,
        temperature=ctx.temperature, width=ctx.width, fixed_buckets=ctx.fixed_buckets, planner=ctx.planner)
    partitions = None
    if ctx.priority_steps:
        finish, seg_sent, last, busy, d, record = _with_priority(seg, ctx, cost, ready, ready_scale, finish, seg_sent,
                                                                 last, busy, d)
        if record is not None:  # the partitions in the order sent, in absolute time
            slot, start, end = record
            used = slot >= 0
            partitions = (jnp.where(used, slot, -1), jnp.where(used, start + _row(base), 0.0),
                          jnp.where(used, end + _row(base), 0.0))
    value = Dense(finish + _row(base)) if want_slots else Tail(last + base, n)
    return value, seg_sent, busy, d, partitions


def _with_priority(seg, ctx: Context, cost, ready, ready_scale, finish, sent, last, busy, d):
    """The policy channel's results with those of the priority channel
    (`kernels.priority`) for the configurations whose strategy is `priority`.
    It runs only when some configuration of the chunk uses it."""
    dtype = ctx.grad_bytes.dtype
    slot_bytes = jnp.asarray(seg.coef[:, None], dtype) * _row(ctx.grad_bytes)
    relative_ready = ready * _row(ready_scale)

    def run(_):
        return priority_channel(slot_bytes, relative_ready, cost, ctx.partition_bytes, ctx.credit,
                                ctx.priority_steps, ctx.width, want_steps=d is not None, fuse=ctx.fuse)

    shapes = jax.eval_shape(run, None)
    p_finish, p_busy, p_sending, record = jax.lax.cond(
        jnp.any(ctx.strategy == PRIORITY), run,
        lambda _: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes), None)
    chosen = ctx.strategy == PRIORITY
    by_slot = _row(chosen)
    if finish is not None:
        finish = jnp.where(by_slot, p_finish, finish)
    if sent is not None:
        sent = jnp.where(by_slot, slot_bytes, sent)
    if d is not None:
        d = jnp.where(by_slot, p_sending, d)
    return finish, sent, jnp.where(chosen, p_finish[-1], last), jnp.where(chosen, p_busy, busy), d, record


def _scan(program, seg, values, sent, ctx, want_all):
    """A register scan (`sweep.graph.lowering.ScanSegment`): one task per step."""
    m = len(seg)
    ext_rows = [i for i in range(m) if seg.inputs[i]]
    ext = []
    for i in ext_rows:
        vals = []
        for src, switch in seg.inputs[i]:
            s, j = program.where[src]
            vals.append(_gate(switch, values[s].rows([j])[0], ctx, sent))
        ext.append(_combine(vals, ctx.temperature))
    costs = sorted({c for c in seg.costs if c is not None})
    # Every register holds the broadcast of all per-configuration inputs.
    comm_shapes = [] if ctx.free else [
        jnp.shape(x)[1:] if k == "steps" else jnp.shape(x)  # steps are [K, C]
        for c in costs if c in COMM_COSTS
        for k, x in (("latency", ctx.comm[c].latency), ("per_byte", ctx.comm[c].per_byte),
                     *(("steps", y) for y in (ctx.comm[c].steps or ())))]
    shapes = [jnp.shape(ctx.grad_bytes), *(jnp.shape(ctx.compute[c]) for c in costs if c not in COMM_COSTS),
              *comm_shapes, *(jnp.shape(e) for e in ext), *([] if ctx.floor is None else [jnp.shape(ctx.floor)])]
    shape = jnp.broadcast_shapes(*shapes)
    dtype = jnp.result_type(ctx.grad_bytes)
    neg, zero = len(ext), len(ext) + 1
    table = jnp.stack([jnp.broadcast_to(jnp.asarray(e, dtype), shape) for e in ext]
                      + [jnp.full(shape, NEG, dtype), jnp.zeros(shape, dtype)])
    ext_index = np.full(m, neg)
    ext_index[np.asarray(ext_rows, np.int64)] = np.arange(len(ext_rows))
    ext_index[seg.roots] = zero
    # Compute costs are rows of one rate table, read by index each step (one
    # product, not one per cost: the where-chain over every cost made each
    # step's fusion evaluate all of them); communication costs stay a chain.
    compute_costs = [c for c in costs if c not in COMM_COSTS]
    comm_costs = [c for c in costs if c in COMM_COSTS]
    compute_index = np.array([compute_costs.index(c) if c in compute_costs else -1 for c in seg.costs])
    comm_index = np.array([comm_costs.index(c) if c in comm_costs else -1 for c in seg.costs])
    floor_here = np.array([has_floor(c, ctx) for c in seg.costs])
    comm_resources = sorted({r for r, c in zip(seg.resources, seg.costs) if c in COMM_COSTS})
    resource_index = np.array([comm_resources.index(r) if c in COMM_COSTS else -1
                               for r, c in zip(seg.resources, seg.costs)])
    temperature = ctx.temperature

    comm = {name: ctx.comm[name] for name in comm_costs if not ctx.free}  # outside the scan
    rates = jnp.stack([jnp.broadcast_to(ctx.compute[c], shape) for c in compute_costs]) if compute_costs else None

    def duration(ki, mi, fi, coef):
        d = jnp.zeros(shape, dtype)
        if compute_costs:
            value = coef * rates[jnp.maximum(ki, 0)]
            if floor_here.any():
                value = jnp.where(fi, at_least_floor(value, ctx), value)
            d = jnp.where(ki >= 0, value, d)
        for j, name in enumerate(comm_costs):
            value = jnp.zeros(shape, dtype) if ctx.free else allreduce_time(
                coef * ctx.grad_bytes, *comm[name], width=ctx.width)
            d = jnp.where(mi == j, value, d)
        return d

    def step(carry, xs):
        regs, busy = carry
        pred, dst, ei, ki, mi, ri, fi, coef = xs
        ready = regs[pred]  # [P, C]
        start = maximum(table[ei], ready[0] if ready.shape[0] == 1 else max_along(ready, 0, temperature), temperature)
        d = duration(ki, mi, fi, coef)
        finish = start + d
        regs = regs.at[dst].set(finish)
        busy = busy + jnp.where((jnp.arange(busy.shape[0], dtype=jnp.int32) == ri)[:, None], d, 0.0)
        return (regs, busy), ((finish, d) if want_all else None)

    regs = jnp.full((seg.num_regs + 1, *shape), NEG, dtype)
    busy = jnp.zeros((max(1, len(comm_resources)), *shape), dtype)
    # Fixed int32 indices: the same program may be traced with x64 on (explain) and off (sweeps).
    xs = (*(np.asarray(a, np.int32) for a in (seg.pred_regs, seg.dst, ext_index, compute_index, comm_index,
                                               resource_index)),
          floor_here, seg.coef.astype(dtype))
    (regs, busy), ys = jax.lax.scan(step, (regs, busy), xs)
    value = Registers(regs, seg.out_reg, ys[0] if want_all else None)
    return value, {r: busy[i] for i, r in enumerate(comm_resources)}, (ys[1] if want_all else None)
