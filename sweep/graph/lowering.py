"""Lower a DAG to the stream program the kernels run (DESIGN 2.3).

The program is a list of *segments* in topological order. A segment is a run
of consecutive tasks on one resource (or a chain of joins) where each task
follows the one before it; its tasks may also wait for tasks of earlier
segments (its *inputs*). A chain's finish times are then a prefix sum and a
running maximum over the whole run at once,

    f_i = max(f_{i-1}, r_i) + d_i  =  S_i + max_{j <= i} (r_j - S_{j-1}),

instead of one step per task. A run of consecutive tasks on no resource
that do not wait for one another (the layer-wise updates) is one `map`
segment, f_i = r_i + d_i for all at once. The slots of a channel that forms
buckets are one `policy` segment, evaluated by one scan (`kernels.channel`); the stages
that carry those buckets on (`follow`) are chains whose costs come from the
bytes their slot sent.

When the DAG is periodic with an update barrier and input only at the
iteration boundary, one iteration's body is lowered once (`contracted`): its
times are offsets from its entry, and the K iterations reduce to the
max-plus recursion of `kernels.iteration.steady_state`. Otherwise every
task of the K iterations is in the program (`unrolled`). `Lowered.mode`
says which, and `Lowered.reason` why a DAG was not contracted.

The preconditions are checked here, with a message naming the property that
fails: topological ids, FIFO resources, and whole policy channels.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kernels.codes import ALWAYS, COMM_COSTS, NO_PREFETCH
from sweep.graph.dag import Dag


class LoweringError(ValueError):
    """A DAG that the stream program cannot evaluate; the message names the property."""


@dataclasses.dataclass(frozen=True, eq=False)
class Segment:
    kind: str  # "chain" | "map" | "policy" | "follow"
    tasks: tuple[int, ...]  # task ids (of the DAG) in order
    cost: str | None  # row of `sweep.graph.dag.COSTS`; None: zero seconds
    coef: np.ndarray  # [n] float64 units of the cost
    gates: tuple[int, ...] | None  # switch of the edge from the row before (row 0: unused); None: all ALWAYS
    inputs: tuple[tuple[tuple[int, int], ...], ...]  # per row: (program row of a source, switch)
    refs: tuple[int, ...] | None = None  # follow: program row of each row's policy slot
    resource: str | None = None
    iteration: int = 1

    def __len__(self):
        return len(self.tasks)


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """Segments over `tasks` (DAG ids); a task's program row is its index in
    `tasks`, and `where[row]` = (segment, row within the segment)."""
    tasks: tuple[int, ...]
    segments: tuple[Segment, ...]
    where: tuple[tuple[int, int], ...]
    switch_refs: tuple[int, ...]  # program rows of the policy slots that switches refer to

    def row(self, task_id: int) -> int:
        return self.tasks.index(task_id)


@dataclasses.dataclass(frozen=True, eq=False)
class Lowered:
    dag: Dag
    mode: str  # "contracted" | "unrolled"
    reason: str  # why not contracted ("" when contracted)
    program: Program  # contracted: one iteration's body, times from its entry; unrolled: every task
    iterations: int
    exits: tuple[int, ...]  # exit task of each iteration
    inputs: tuple[tuple[int, int], ...]  # (io, h2d) tasks of each iteration
    entry: int | None  # contracted: the body's entry task (iteration 1)
    body_offset: int  # contracted: id distance between iterations
    free_by_compute: bool  # with free communication the body's exit is its compute chain's sum
    compute_coefs: dict  # cost -> each task's units in one iteration, for compute_time

    @property
    def compute_units(self) -> dict:
        """cost -> units per iteration (the sum of its tasks' units)."""
        return {cost: sum(coefs) for cost, coefs in self.compute_coefs.items()}


def lower(dag: Dag) -> Lowered:
    """The fastest exact program for `dag`."""
    _check_topological(dag)
    _check_fifo(dag)
    iterations = max(t.iteration for t in dag.tasks)
    exits = tuple(t.id for t in dag.tasks if t.kind == "exit")
    io = [t.id for t in dag.tasks if t.kind == "io"]
    h2d = [t.id for t in dag.tasks if t.kind == "h2d"]
    if not (len(exits) == len(io) == len(h2d) == iterations):
        raise LoweringError("each iteration needs one io, one h2d and one exit task")
    coefs: dict[str, list[float]] = {}
    for t in dag.tasks:
        if t.iteration == 1 and t.cost is not None and t.kind in ("forward", "backward", "update"):
            coefs.setdefault(t.cost, []).append(t.coef)
    common = dict(dag=dag, iterations=iterations, exits=exits, inputs=tuple(zip(io, h2d)),
                  compute_coefs={cost: tuple(c) for cost, c in coefs.items()})
    reason, entry = _contraction(dag, exits, io, h2d)
    if reason:
        program = _program(dag, [t.id for t in dag.tasks])
        return Lowered(mode="unrolled", reason=reason, program=program, entry=None, body_offset=0,
                       free_by_compute=False, **common)
    body = [t.id for t in dag.tasks if t.iteration == 1 and t.id not in (io[0], h2d[0])]
    program = _program(dag, body)
    first_next = min(t.id for t in dag.tasks if t.iteration == 2) if iterations > 1 else len(dag.tasks)
    return Lowered(mode="contracted", reason="", program=program, entry=entry, body_offset=first_next,
                   free_by_compute=_free_by_compute(dag, body), **common)


def _check_topological(dag: Dag):
    for src, dst, _ in dag.edges:
        if not src < dst:
            raise LoweringError(f"task ids must be topological: edge {dag.tasks[src].name} -> {dag.tasks[dst].name}")


def _check_fifo(dag: Dag):
    """Each resource runs its tasks in id order: an edge from the one before."""
    edges = {(src, dst) for src, dst, switch in dag.edges if switch == ALWAYS}
    last: dict[str, int] = {}
    for t in dag.tasks:
        if t.resource is None:
            continue
        if t.resource in last and (last[t.resource], t.id) not in edges:
            raise LoweringError(f"resource {t.resource!r} is not FIFO: {t.name} does not wait for "
                                f"{dag.tasks[last[t.resource]].name}")
        last[t.resource] = t.id


def _contraction(dag: Dag, exits, io, h2d) -> tuple[str, int | None]:
    """("", entry) when the iterations reduce to the input/update recursion,
    else (the property that fails, None)."""
    iterations = len(exits)
    if iterations < 2:
        return "a single iteration", None
    sizes = {sum(1 for t in dag.tasks if t.iteration == k) for k in range(1, iterations + 1)}
    if len(sizes) != 1:
        return "iterations differ in their tasks", None
    preds = dag.predecessors()
    entries = [t.id for t in dag.tasks if any(src == h2d[t.iteration - 1] for src, _ in preds[t.id])
               and t.kind != "io"]
    if len(entries) != iterations:
        return "one entry per iteration: h2d feeds several tasks (work that starts before forward)", None
    input_tasks = set(io) | set(h2d)
    for k in range(iterations):
        expected_io = {(io[k - 1], ALWAYS), (exits[k - 1], NO_PREFETCH)} if k else set()
        expected_h2d = {(io[k], ALWAYS)}
        if set(preds[io[k]]) != expected_io or set(preds[h2d[k]]) != expected_h2d:
            return "input only at the iteration boundary: io or h2d has other predecessors", None
    descendants = _descendants(dag)
    for src, dst, switch in dag.edges:
        s, d = dag.tasks[src], dag.tasks[dst]
        if dst in input_tasks or (src in input_tasks and dst in entries):
            continue
        if src in input_tasks:
            return f"input only at the iteration boundary: {s.name} -> {d.name}", None
        if s.iteration == d.iteration:
            continue
        k = d.iteration - 1
        if d.iteration != s.iteration + 1:
            return f"edges only between consecutive iterations: {s.name} -> {d.name}", None
        entry = entries[k]
        if (exits[k - 1], ALWAYS) not in preds[entry]:
            return f"update barrier: {dag.tasks[entry].name} does not wait for {dag.tasks[exits[k - 1]].name}", None
        if dst != entry and dst not in descendants[entry]:
            return f"update barrier: {s.name} -> {d.name} enters the iteration past its entry", None
        if switch != ALWAYS:
            return f"update barrier: switched edge {s.name} -> {d.name}", None
    return "", entries[0]


def _descendants(dag: Dag) -> list[set[int]]:
    succs: list[list[int]] = [[] for _ in dag.tasks]
    for src, dst, _ in dag.edges:
        succs[src].append(dst)
    out: list[set[int]] = [set() for _ in dag.tasks]
    for t in reversed(range(len(dag.tasks))):
        for s in succs[t]:
            out[t].add(s)
            out[t] |= out[s]
    return out


def _free_by_compute(dag: Dag, body) -> bool:
    """With communication free, does the body's exit finish when its compute
    chain does? True when every task that costs time and is not
    communication runs on the one "compute" resource: a comm task then ends
    when its latest compute ancestor does, which the chain has passed."""
    return all(dag.tasks[t].cost is None or dag.tasks[t].cost in COMM_COSTS or dag.tasks[t].resource == "compute"
               for t in body)


def _program(dag: Dag, ids) -> Program:
    """Segments over `ids` (increasing, closed under the edges kept: edges
    from outside `ids` are dropped, which the caller has justified)."""
    preds = dag.predecessors()
    row_of = {t: r for r, t in enumerate(ids)}
    groups: list[list[int]] = []
    for t in ids:
        task = dag.tasks[t]
        current = groups[-1] if groups else None
        if current and _continues(dag, current, task, preds[t]):
            current.append(t)
        else:
            groups.append([t])
    groups, scans = _merge_interleaved(dag, groups, preds, row_of)
    group_of = {t: g for g, group in enumerate(groups) for t in group}
    read_outside = {src for t in ids for src, _ in preds[t] if src in row_of and group_of[src] != group_of[t]}
    segments, where, refs = [], [None] * len(ids), set()
    for g, group in enumerate(groups):
        first = dag.tasks[group[0]]
        if g in scans:
            segments.append(_scan_segment(dag, group, preds, row_of, read_outside))
            for i, t in enumerate(group):
                where[row_of[t]] = (g, i)
            continue
        unqueued = len(group) > 1 and _unqueued(first)  # several tasks, none waiting for another
        kind = {"policy": "policy", "follow": "follow"}.get(first.policy, "map" if unqueued else "chain")
        members = set(group)
        inputs, gates = [], []
        for i, t in enumerate(group):
            chain = group[i - 1] if i else None
            gate = ALWAYS
            row_inputs = []
            for src, switch in preds[t]:
                if src not in row_of:
                    continue
                if src == chain:
                    gate = switch
                elif src in members:
                    continue  # an earlier task on the same FIFO resource: implied
                else:
                    row_inputs.append((row_of[src], switch))
                if switch >= 2:
                    refs.add(row_of[(switch - 2) // 2])
            inputs.append(tuple(row_inputs))
            gates.append(gate)
            where[row_of[t]] = (g, i)
        if kind == "policy":
            for r, t in enumerate(group):
                if any(sw != ALWAYS for _, sw in inputs[r]) or gates[r] != ALWAYS:
                    raise LoweringError(f"a policy channel's slots take no switched edges ({dag.tasks[t].name})")
            same = [t.id for t in dag.tasks if t.policy == "policy" and t.resource == first.resource
                    and t.iteration == first.iteration]
            if sorted(same) != sorted(group):
                raise LoweringError(f"a policy channel must be one run of slots: {first.resource!r} in "
                                    f"iteration {first.iteration} is split")
        follow_refs = None
        if kind == "follow":
            if any(dag.tasks[t].ref not in row_of for t in group):
                raise LoweringError(f"a follow stage needs its policy slot in the program ({first.name})")
            follow_refs = tuple(row_of[dag.tasks[t].ref] for t in group)
            refs |= set(follow_refs)
        segments.append(Segment(
            kind=kind, tasks=tuple(group), cost=first.cost,
            coef=np.array([dag.tasks[t].coef for t in group], np.float64),
            gates=None if all(x == ALWAYS for x in gates[1:]) else tuple(gates),
            inputs=tuple(inputs), refs=follow_refs, resource=first.resource, iteration=first.iteration))
    return Program(tasks=tuple(ids), segments=tuple(segments), where=tuple(where), switch_refs=tuple(sorted(refs)))


# Runs of at least this many consecutive short chains (each at most SHORT
# tasks) interleave resources task by task (ZeRO-3's all-gathers between
# layers): one register scan evaluates them instead of a segment each.
SHORT, MIN_RUN = 4, 6


def _merge_interleaved(dag: Dag, groups, preds, row_of):
    """Groups with runs of short chains merged; and the merged groups' indices."""
    def short(group):
        t = dag.tasks[group[0]]
        return len(group) <= SHORT and t.policy is None and t.kind not in ("join", "exit")

    out, scans, run = [], set(), []

    def flush():
        members = {t for group in run for t in group}
        switched = any(src in members and switch != ALWAYS for t in members for src, switch in preds[t])
        if len(run) >= MIN_RUN and not switched:
            scans.add(len(out))
            out.append([t for group in run for t in group])
        else:
            out.extend(run)
        run.clear()

    for group in groups:
        if short(group):
            run.append(group)
            continue
        flush()
        out.append(group)
    flush()
    return out, scans


@dataclasses.dataclass(frozen=True, eq=False)
class ScanSegment:
    """Interleaved tasks evaluated one by one in a scan over a small register
    file (the level-array fallback, one task per level): each finish lives
    in a register from its task until its last reader in the segment; finishes
    read by later segments (and the last) keep theirs."""
    kind: str  # "scan"
    tasks: tuple[int, ...]
    costs: tuple[str | None, ...]  # per row
    coef: np.ndarray  # [m]
    resources: tuple[str | None, ...]  # per row
    inputs: tuple[tuple[tuple[int, int], ...], ...]  # per row: inputs from earlier segments
    roots: np.ndarray  # [m] bool: no predecessor at all (starts at 0)
    pred_regs: np.ndarray  # [m, P] int: registers of in-segment predecessors (num_regs: always -inf)
    dst: np.ndarray  # [m] int: the register each finish goes to
    num_regs: int
    out_reg: dict  # row -> register holding its finish at the end
    iteration: int = 1
    gates = None
    refs = None
    cost = None
    resource = None

    def __len__(self):
        return len(self.tasks)


def _scan_segment(dag: Dag, group, preds, row_of, read_outside) -> ScanSegment:
    local = {t: i for i, t in enumerate(group)}
    inputs, internal = [], []
    for t in group:
        inputs.append(tuple((row_of[src], sw) for src, sw in preds[t] if src in row_of and src not in local))
        internal.append(sorted({local[src] for src, _ in preds[t] if src in local}))
    last_use = {}
    for j, srcs in enumerate(internal):
        for i in srcs:
            last_use[i] = j
    keep = {i for i, t in enumerate(group) if t in read_outside} | {len(group) - 1}
    free: list[int] = []
    reg_of: dict[int, int] = {}
    dst = np.zeros(len(group), np.int64)
    count = 0
    ending: dict[int, list[int]] = {}
    for i, j in last_use.items():
        if i not in keep:
            ending.setdefault(j, []).append(i)
    for i in range(len(group)):
        free.extend(reg_of[r] for r in ending.get(i, ()))  # read this step, reusable for its write
        if free and i not in keep:
            reg = free.pop()
        else:
            reg, count = count, count + 1
        reg_of[i] = dst[i] = reg
        if i not in keep and i not in last_use:
            free.append(reg)  # nobody reads it
    width = max(1, max(len(srcs) for srcs in internal))
    pred_regs = np.full((len(group), width), count, np.int64)
    for i, srcs in enumerate(internal):
        pred_regs[i, :len(srcs)] = [reg_of[j] for j in srcs]
    tasks = [dag.tasks[t] for t in group]
    return ScanSegment(
        kind="scan", tasks=tuple(group), costs=tuple(t.cost for t in tasks),
        coef=np.array([t.coef for t in tasks], np.float64), resources=tuple(t.resource for t in tasks),
        inputs=tuple(inputs), roots=np.array([not inputs[i] and not internal[i] for i in range(len(group))]),
        pred_regs=pred_regs, dst=dst, num_regs=count, out_reg={i: reg_of[i] for i in keep},
        iteration=tasks[0].iteration)


def _unqueued(task) -> bool:
    """A task on no resource that is not a join: nothing orders it after its
    neighbours, so a run of them forms a map (`_continues`)."""
    return task.resource is None and task.kind != "join"


def _continues(dag: Dag, group, task, task_preds) -> bool:
    """Whether `task` extends the run `group`: the same resource (or both
    joins), kind, cost and policy, and an edge from the run's last task; or,
    for tasks on no resource, no edge from the run at all (a map)."""
    last = dag.tasks[group[-1]]
    same = (task.kind, task.cost, task.policy, task.resource, task.iteration) == \
           (last.kind, last.cost, last.policy, last.resource, last.iteration)
    if not same or task.id != last.id + 1 or task.kind == "exit":
        return False
    sources = {src for src, _ in task_preds}
    if _unqueued(task):  # side by side: a run that waits for none of its own tasks is one map
        return not (sources & set(group))
    if last.id not in sources:
        return False
    if task.resource is None:  # a join chain: no other edge from inside the run
        return not (sources & set(group[:-1]))
    return True
