"""The task graph of K unrolled S-SGD iterations (DESIGN 2.3).

`build_dag` makes the *slotted* DAG that every configuration of a model shares:
one comm slot per layer that holds parameters (plus layer 1, where a `bsp`
bucket is released), chained FIFO in backward order. A configuration's buckets
decide which slots carry bytes; the rest last zero seconds and change nothing.
`concretize` drops those empty slots and the disabled input edge, giving the
DAG of one configuration that `explain` prints.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

KINDS = ("io", "h2d", "forward", "backward", "comm", "update")

# Edge switches: an edge is either always present or only without input prefetch.
ALWAYS = 0
NO_PREFETCH = 1


@dataclasses.dataclass(frozen=True)
class Task:
    id: int
    kind: str
    iteration: int  # 1..K
    layer: int | None  # 1..L for forward/backward/comm, else None
    slot: int | None = None  # comm slot index in backward order (comm only)

    @property
    def name(self) -> str:
        where = f"[{self.layer}]" if self.layer is not None else ""
        return f"{self.kind}{where}@{self.iteration}"


@dataclasses.dataclass(frozen=True)
class Dag:
    tasks: tuple[Task, ...]
    edges: tuple[tuple[int, int, int], ...]  # (src, dst, switch)

    def predecessors(self) -> list[list[tuple[int, int]]]:
        preds: list[list[tuple[int, int]]] = [[] for _ in self.tasks]
        for src, dst, switch in self.edges:
            preds[dst].append((src, switch))
        return preds


def slot_layers(layer_params: Sequence[int]) -> tuple[int, ...]:
    """Layers (1-based) that own a comm slot, in backward order.

    Every layer with parameters, and layer 1 always: `bsp` sends its single
    bucket after the backward of layer 1 even when layer 1 has no parameters.
    """
    owners = [l for l in range(len(layer_params), 0, -1) if layer_params[l - 1] > 0 or l == 1]
    return tuple(owners)


def build_dag(num_layers: int, slots: Sequence[int], iterations: int) -> Dag:
    """The slotted DAG of `iterations` unrolled iterations for `num_layers` layers."""
    tasks: list[Task] = []
    edges: list[tuple[int, int, int]] = []

    def add(kind: str, k: int, layer: int | None = None, slot: int | None = None) -> int:
        tasks.append(Task(len(tasks), kind, k, layer, slot))
        return len(tasks) - 1

    prev_io = prev_update = None
    for k in range(1, iterations + 1):
        io = add("io", k)
        if prev_io is not None:
            edges.append((prev_io, io, ALWAYS))
            edges.append((prev_update, io, NO_PREFETCH))
        h2d = add("h2d", k)
        edges.append((io, h2d, ALWAYS))

        fwd = [add("forward", k, l) for l in range(1, num_layers + 1)]
        edges.append((h2d, fwd[0], ALWAYS))
        if prev_update is not None:
            edges.append((prev_update, fwd[0], ALWAYS))
        edges += [(fwd[i], fwd[i + 1], ALWAYS) for i in range(num_layers - 1)]

        bwd = {l: add("backward", k, l) for l in range(num_layers, 0, -1)}
        edges.append((fwd[-1], bwd[num_layers], ALWAYS))
        edges += [(bwd[l], bwd[l - 1], ALWAYS) for l in range(num_layers, 1, -1)]

        prev_comm = None
        for s, layer in enumerate(slots):
            comm = add("comm", k, layer, s)
            edges.append((bwd[layer], comm, ALWAYS))
            if prev_comm is not None:
                edges.append((prev_comm, comm, ALWAYS))
            prev_comm = comm

        update = add("update", k)
        edges.append((bwd[1], update, ALWAYS))
        if prev_comm is not None:
            edges.append((prev_comm, update, ALWAYS))
        prev_io, prev_update = io, update
    return Dag(tuple(tasks), tuple(edges))


def concretize(dag: Dag, slot_sends: Sequence[bool], prefetch: bool) -> tuple[Dag, list[int]]:
    """The DAG of one configuration: empty comm slots removed, input edges fixed.

    A removed slot's successors inherit its comm predecessor, which keeps every
    path length: the slot lasted zero seconds, and its backward predecessor is
    already implied, since each successor (a later comm, or update) waits for
    a later backward. Returns the new DAG and, for each new task, the id it
    had in `dag`.
    """
    keep = [t.kind != "comm" or bool(slot_sends[t.slot]) for t in dag.tasks]
    preds = dag.predecessors()

    def live_preds(task_id: int, comm_only: bool = False) -> set[int]:
        out: set[int] = set()
        for src, switch in preds[task_id]:
            if (switch == NO_PREFETCH and prefetch) or (comm_only and dag.tasks[src].kind != "comm"):
                continue
            out |= {src} if keep[src] else live_preds(src, comm_only=True)
        return out

    old_ids = [t.id for t in dag.tasks if keep[t.id]]
    new_id = {old: new for new, old in enumerate(old_ids)}
    tasks = tuple(dataclasses.replace(dag.tasks[old], id=new_id[old]) for old in old_ids)
    edges = tuple(sorted((new_id[src], new_id[old], ALWAYS) for old in old_ids for src in live_preds(old)))
    return Dag(tasks, edges), old_ids
