"""The task graph of K unrolled S-SGD iterations (DESIGN 2.3, 2.5).

This file is the model's schedule: every ordering rule of an iteration is an
edge here, and nowhere else. `sweep.graph.lowering` derives the program the kernels
run from these tasks and edges.

A task has a `cost` (a row of the per-configuration cost table, see
`COSTS`) and a `coef` (its units of that cost), and may sit on a `resource`
that runs its tasks one at a time in id order (FIFO: `build_dag` adds the
edge from the resource's previous task). Gradient communication is *slotted*:
one comm task per layer that holds parameters (plus layer 1, where a `bsp`
bucket is released), in backward order. The first channel's slots form
buckets by the configuration's strategy (`policy`); the stages after it
(pipelined hierarchical all-reduce) carry what their `ref` slot sent
(`follow`). A slot that sends nothing lasts zero seconds. Some edges exist
only in some configurations (`switch`): without input prefetch, or only
when a slot sends (or holds) its bucket; `concretize` resolves them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kernels.codes import ALWAYS, IF_HOLDS, IF_SENDS, NO_PREFETCH, switch_of, switch_rule

KINDS = ("io", "h2d", "forward", "backward", "comm", "gather", "update", "join", "exit")

UPDATES = ("barrier", "layerwise")


@dataclasses.dataclass(frozen=True)
class Task:
    id: int
    kind: str
    iteration: int  # 1..K
    layer: int | None = None  # 1..L for forward, backward, comm, gather and layerwise update
    slot: int | None = None  # comm slot in backward order
    resource: str | None = None  # FIFO resource ("compute", "channel", ...), None: none
    cost: str | None = None  # row of COSTS, None: zero seconds
    coef: float = 0.0  # units of `cost`: work, parameters (bytes / gradient bytes) or a share
    policy: str | None = None  # "policy": forms buckets; "follow": sends what `ref` sent
    ref: int | None = None  # follow: the policy task whose bucket this stage carries
    micro: int = 1  # micro-batch (gradient accumulation)
    before: str | None = None  # a ZeRO-3 all-gather: the kind of compute task it feeds
    part: int | None = None  # a priority channel's partition of its slot (`split_partitions`), 1-based

    @property
    def name(self) -> str:
        where = f"[{self.layer}]" if self.layer is not None else ""
        where += f"#{self.part}" if self.part is not None else ""
        where += f">{self.before}" if self.before else ""
        micro = f".{self.micro}" if self.micro > 1 else ""
        stage = f"/{self.resource.split('.', 1)[1]}" if self.kind == "comm" and "." in self.resource else ""
        return f"{self.kind}{stage}{where}{micro}@{self.iteration}"


@dataclasses.dataclass(frozen=True)
class Dag:
    tasks: tuple[Task, ...]
    edges: tuple[tuple[int, int, int], ...]  # (src, dst, switch)

    def predecessors(self) -> list[list[tuple[int, int]]]:
        preds: list[list[tuple[int, int]]] = [[] for _ in self.tasks]
        for src, dst, switch in self.edges:
            preds[dst].append((src, switch))
        return preds


@dataclasses.dataclass(frozen=True)
class Shape:
    """The structural keys of DESIGN 2.5 that change the DAG."""
    update: str = "barrier"  # "barrier" | "layerwise"
    pipelined: bool = False  # hierarchical all-reduce as three pipelined stages
    zero: int = 0  # ZeRO stage 0..3
    accumulation: int = 1  # micro-batches per step

    def __post_init__(self):
        if self.update not in UPDATES:
            raise ValueError(f"update must be one of {UPDATES}, not {self.update!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0, 1, 2 or 3, not {self.zero!r}")
        if self.accumulation < 1:
            raise ValueError(f"accumulation must be >= 1, not {self.accumulation!r}")
        if self.zero and (self.pipelined or self.update != "barrier"):
            raise ValueError("zero > 0 combines only with update = 'barrier' and no pipelined stages")


def slot_layers(layer_params: Sequence[int]) -> tuple[int, ...]:
    """Layers (1-based) that own a comm slot, in backward order.

    Every layer with parameters, and layer 1 always: `bsp` sends its single
    bucket after the backward of layer 1 even when layer 1 has no parameters.
    """
    return tuple(l for l in range(len(layer_params), 0, -1) if layer_params[l - 1] > 0 or l == 1)


def build_dag(layer_params: Sequence[float], forward_work: Sequence[float], iterations: int,
              shape: Shape = Shape(), backward_work: Sequence[float] | None = None) -> Dag:
    """The slotted DAG of `iterations` unrolled iterations.

    `forward_work` and `backward_work` are each layer's units of the forward
    and backward cost (FLOPs per sample, or measured seconds); backward
    defaults to forward (the backward cost row carries the ratio).
    """
    num_layers = len(layer_params)
    backward_work = forward_work if backward_work is None else backward_work
    total_params = float(sum(layer_params))
    slots = slot_layers(layer_params)
    slot_of_layer = {layer: s for s, layer in enumerate(slots)}
    tasks: list[Task] = []
    edges: list[tuple[int, int, int]] = []
    last_on: dict[str, int] = {}

    def add(kind, k, *, resource=None, after=(), **fields) -> int:
        task = Task(len(tasks), kind, k, resource=resource, **fields)
        tasks.append(task)
        if resource is not None and resource in last_on:  # FIFO order on the resource
            edges.append((last_on[resource], task.id, ALWAYS))
        if resource is not None:
            last_on[resource] = task.id
        edges.extend((src, task.id, ALWAYS) for src in after)
        return task.id

    zero = shape.zero
    grad_cost = "reduce_scatter" if zero else ("intra_reduce_scatter" if shape.pipelined else "allreduce")
    update_cost = "update_shard" if zero else "update"
    micro = shape.accumulation
    prev_exit = None
    prev_updates: dict[int, int] = {}  # layerwise: slot -> update task of the previous iteration
    for k in range(1, iterations + 1):
        first = len(tasks)
        # Input: the step's micro-batches are read and copied at the iteration boundary.
        io = add("io", k, resource="input", cost="io", coef=float(micro))
        if prev_exit is not None:
            edges.append((prev_exit, io, NO_PREFETCH))
        h2d = add("h2d", k, cost="h2d", coef=float(micro), after=(io,))
        entry = [h2d] + ([prev_exit] if prev_exit is not None and shape.update == "barrier" else [])

        # Compute, micro-batch by micro-batch: forward 1..L then backward L..1.
        order = [(kind, l, m) for m in range(1, micro + 1)
                 for kind, layers in (("forward", range(1, num_layers + 1)), ("backward", range(num_layers, 0, -1)))
                 for l in layers]
        compute: list[int] = []
        backward_of: dict[int, int] = {}
        for i, (kind, layer, m) in enumerate(order):
            after = list(entry) if i == 0 else []
            if kind == "forward" and m == 1 and layer in slot_of_layer and shape.update == "layerwise":
                if prev_updates:
                    after.append(prev_updates[slot_of_layer[layer]])
            if zero == 3 and layer_params[layer - 1] > 0:
                # Gather this layer's parameters, issued when the task before it starts.
                issue = compute[i - 2] if i >= 2 else None
                gather_after = [issue] if issue is not None else list(entry)
                after.append(add("gather", k, resource="channel.gather", cost="all_gather",
                                 coef=float(layer_params[layer - 1]), layer=layer, micro=m, before=kind,
                                 after=gather_after))
            work = forward_work if kind == "forward" else backward_work
            task = add(kind, k, resource="compute", cost=kind, coef=float(work[layer - 1]),
                       layer=layer, micro=m, after=after)
            compute.append(task)
            if kind == "backward" and m == micro:
                backward_of[layer] = task
        last_backward = compute[-1]

        # Gradient communication, after the last micro-batch's backward.
        if zero == 1:  # one reduce-scatter of every gradient after backward
            done = [add("comm", k, resource="channel", cost="reduce_scatter", coef=total_params,
                        after=(last_backward,))]
            policy_tasks = None
        else:
            policy_tasks = [add("comm", k, resource="channel", cost=grad_cost, coef=float(layer_params[l - 1]),
                                layer=l, slot=s, policy="policy", after=(backward_of[l],))
                            for s, l in enumerate(slots)]
            last_stage = policy_tasks
            if shape.pipelined:
                for resource, cost in (("channel.inter", "inter_allreduce"), ("channel.intra", "intra_all_gather")):
                    last_stage = [add("comm", k, resource=resource, cost=cost, coef=float(layer_params[l - 1]),
                                      layer=l, slot=s, policy="follow", ref=policy_tasks[s], after=(last_stage[s],))
                                  for s, l in enumerate(slots)]
            done = [last_stage[-1]]

        # Update.
        if shape.update == "barrier":
            update = add("update", k, resource="compute", cost=update_cost, coef=1.0, after=done)
            sinks = [update]
            if zero in (1, 2):  # all-gather the updated shards
                sinks = [add("gather", k, resource="channel.gather", cost="all_gather", coef=total_params,
                             after=(update,))]
        else:
            # The bucket carrying slot s's gradient is done when the first sending
            # slot s' >= s has finished its last stage: a join chain, back to front.
            joins: dict[int, int] = {}
            for s in range(len(slots) - 1, -1, -1):
                after_join = [(last_stage[s], switch_of(IF_SENDS, policy_tasks[s]))]
                if s + 1 < len(slots):
                    after_join.append((joins[s + 1], switch_of(IF_HOLDS, policy_tasks[s])))
                joins[s] = add("join", k, slot=s, layer=slots[s])
                edges.extend((src, joins[s], switch) for src, switch in after_join)
            # Each layer's update runs once its gradient is in, on no shared
            # resource: a priority channel (`kernels.priority`) completes the
            # front layers first, and their updates must not queue behind
            # the back layers' (a FIFO channel completes them in slot order anyway).
            prev_updates = {s: add("update", k, cost="update",
                                   coef=float(layer_params[l - 1]) / total_params if total_params else 0.0,
                                   layer=l, slot=s, after=(joins[s],))
                            for s, l in enumerate(slots)}
            sinks = [last_backward, *prev_updates.values()]
        exit_task = add("exit", k, after=sinks)
        _check_exit(tasks, edges, first, exit_task)
        prev_exit = exit_task
    return Dag(tuple(tasks), tuple(dict.fromkeys(edges)))


def _check_exit(tasks, edges, first, exit_task):
    """Every task of the iteration must precede its exit (F_k is its finish)."""
    succs = {t: [] for t in range(first, exit_task + 1)}
    for src, dst, _ in edges:
        if first <= src and dst <= exit_task:
            succs[src].append(dst)
    for t in range(first, exit_task):
        if not succs[t]:
            raise AssertionError(f"{tasks[t].name} has no successor in its iteration: add it to the exit")


def concretize(dag: Dag, slot_sends, prefetch: bool) -> tuple[Dag, list[int]]:
    """The DAG of one configuration: switches resolved, and the tasks that
    last zero seconds by construction (slots that send nothing, the stages
    following them, joins and exits) removed. A removed task's successors
    inherit its enabled predecessors, which keeps every path length.
    `slot_sends` maps policy task ids to whether they send. Returns the new
    DAG and, for each new task, the id it had in `dag`."""
    def enabled(switch: int) -> bool:
        if switch == ALWAYS:
            return True
        if switch == NO_PREFETCH:
            return not prefetch
        rule, ref = switch_rule(switch)
        return bool(slot_sends[ref]) == (rule == IF_SENDS)

    def removed(t: Task) -> bool:
        if t.kind in ("join", "exit"):
            return True
        if t.policy == "policy":
            return not slot_sends[t.id]
        return t.policy == "follow" and not slot_sends[t.ref]

    keep = [not removed(t) for t in dag.tasks]
    preds = dag.predecessors()
    live: list[set[int]] = []
    for t in dag.tasks:  # ids are topological
        out: set[int] = set()
        for src, switch in preds[t.id]:
            if enabled(switch):
                out |= {src} if keep[src] else live[src]
        live.append(out)
    old_ids = [t.id for t in dag.tasks if keep[t.id]]
    new_id = {old: new for new, old in enumerate(old_ids)}
    tasks = tuple(dataclasses.replace(dag.tasks[old], id=new_id[old], ref=None) for old in old_ids)
    edges = tuple(sorted((new_id[src], new_id[old], ALWAYS) for old in old_ids for src in live[old]))
    return Dag(tasks, edges), old_ids


def split_partitions(dag: Dag, sent_order: dict[int, list[int]]) -> tuple[Dag, list[int]]:
    """A concrete DAG (`concretize`) with the slots of priority channels cut
    into the partitions they sent, in the order sent (`kernels.priority`).

    `sent_order` maps each channel (its first slot's id in `dag`) to the
    slot id of every partition, in the order the channel sent them. The
    partitions form one FIFO chain; every edge into a slot goes to each of
    its partitions (their common ready time), every edge out of a slot
    leaves from its last partition, and the slots' own FIFO edges are
    dropped: the order is the one that resulted, not backward order. The
    longest path of the result gives every partition's start and finish.
    Returns the new DAG and, for each new task, the id of its task in `dag`.
    """
    channel_of = {slot: first for first, order in sent_order.items() for slot in order}
    parts: dict[int, list[int]] = {}
    tasks: list[Task] = []
    old_of: list[int] = []
    emitted: set[int] = set()
    for task in dag.tasks:
        first = channel_of.get(task.id)
        if first is None:
            old_of.append(task.id)
            tasks.append(dataclasses.replace(task, id=len(tasks)))
            continue
        if first in emitted:
            continue
        emitted.add(first)
        counts: dict[int, int] = {}
        for slot in sent_order[first]:  # every partition of the channel, where its first slot was
            counts[slot] = counts.get(slot, 0) + 1
            parts.setdefault(slot, []).append(len(tasks))
            old_of.append(slot)
            tasks.append(dataclasses.replace(dag.tasks[slot], id=len(tasks), part=counts[slot]))
    new_of = {old: new for new, old in enumerate(old_of) if old not in parts}
    edges: list[tuple[int, int, int]] = []
    for src, dst, switch in dag.edges:
        if src in parts and dst in parts and channel_of[src] == channel_of[dst]:
            continue  # the backward-order FIFO edge between two slots of one channel
        source = parts[src][-1] if src in parts else new_of[src]
        targets = parts[dst] if dst in parts else [new_of[dst]]
        edges.extend((source, target, switch) for target in targets)
    for first, order in sent_order.items():
        chain = [p for slot in dict.fromkeys(order) for p in parts[slot]]
        chain.sort()
        edges.extend((a, b, ALWAYS) for a, b in zip(chain, chain[1:]))
    return Dag(tuple(tasks), tuple(sorted(dict.fromkeys(edges)))), old_of
