"""An independent NumPy evaluator of a slotted DAG, one configuration at a time.

It walks the tasks in id order (the DAG's topological order) and gives each
the latest finish of its enabled predecessors plus its duration, deciding
buckets as it goes by the strategy rules of DESIGN 2.3, written here from
the design rather than from the kernels. Collectives are affine: latency +
per_byte * bytes per cost row. Used only by the tests.
"""
from __future__ import annotations

import numpy as np

from kernels.codes import ALWAYS, IF_SENDS, NO_PREFETCH
from sweep.graph.dag import Dag

TINY32 = np.finfo(np.float32).tiny


def simulate(dag: Dag, units: dict, comm: dict, grad_bytes: float, strategy: str, threshold: float,
             prefetch: bool, free: bool = False, tiny: float = np.finfo(np.float64).tiny, planner=None,
             floor: float = 0.0):
    """(finish [T], duration [T], sent {policy task id: bytes}).

    `units[cost]` is seconds per unit of a compute cost row, `comm[cost]`
    (latency, per_byte) of a collective row; `free` makes every collective
    cost nothing. `planner` (alpha, per_byte, min_bytes): mgwfbp decides its
    buckets on a channel of its own that costs alpha + per_byte * bytes per
    bucket (alpha None: the true channel), and never sends a bucket of fewer
    than min_bytes but at the last slot. Every forward and backward task
    lasts at least `floor` seconds."""
    preds = dag.predecessors()
    finish = np.zeros(len(dag.tasks))
    duration = np.zeros(len(dag.tasks))
    sent: dict[int, float] = {}
    held: dict[tuple, float] = {}

    def enabled(switch):
        if switch == ALWAYS:
            return True
        if switch == NO_PREFETCH:
            return not prefetch
        rule, ref = (switch - 2) % 2, (switch - 2) // 2
        return (sent[ref] > 0) == (rule == IF_SENDS)

    def cost_of(name, nbytes):
        if free or nbytes <= 0:
            return 0.0
        latency, per_byte = comm[name]
        return latency + per_byte * nbytes

    plan_free: dict[tuple, float] = {}  # the planner's channel: when it is free
    policy_slots = {}
    for t in dag.tasks:
        if t.policy == "policy":
            policy_slots.setdefault((t.resource, t.iteration), []).append(t.id)

    def ready_of(task_id):  # latest finish of a policy slot's inputs other than the channel
        chain = {s for s in policy_slots[(dag.tasks[task_id].resource, dag.tasks[task_id].iteration)]}
        return max((finish[s] for s, sw in preds[task_id] if s not in chain and enabled(sw)), default=0.0)

    for t in dag.tasks:
        start = max((finish[s] for s, sw in preds[t.id] if enabled(sw)), default=0.0)
        if t.policy == "policy":
            key = (t.resource, t.iteration)
            slots = policy_slots[key]
            position = slots.index(t.id)
            bucket = held.get(key, 0.0) + t.coef * grad_bytes
            last = position == len(slots) - 1
            latency = 0.0 if free else comm[t.cost][0]
            send = (last or strategy == "wfbp" or (strategy == "fusion" and bucket >= threshold))
            plan_alpha, plan_start = latency, start
            if planner is not None and planner[0] is not None:
                plan_alpha = planner[0]
                plan_start = max(ready_of(t.id), plan_free.get(key, -np.inf))
            if strategy == "mgwfbp" and not last:
                wait = ready_of(slots[position + 1]) - plan_start
                big_enough = planner is None or bucket >= planner[2]
                send = send or (wait >= max(plan_alpha, tiny) and big_enough)
            if planner is not None and planner[0] is not None:
                plan_free[key] = plan_start + (planner[0] + planner[1] * bucket if send and bucket > 0 else 0.0)
            sent[t.id] = bucket if send else 0.0
            held[key] = 0.0 if send else bucket
            d = cost_of(t.cost, sent[t.id])
        elif t.policy == "follow":
            d = cost_of(t.cost, sent[t.ref])
        elif t.cost is None:
            d = 0.0
        elif t.cost in units:
            d = t.coef * units[t.cost]
            if t.cost in ("forward", "backward"):
                d = max(d, floor)
        else:
            d = cost_of(t.cost, t.coef * grad_bytes)
        duration[t.id] = d
        finish[t.id] = start + d
    return finish, duration, sent


def longest_path(num_tasks: int, edges, duration):
    """Finish times of a plain DAG (every edge always on), ids topological."""
    finish = np.zeros(num_tasks)
    preds = [[] for _ in range(num_tasks)]
    for src, dst, _ in edges:
        preds[dst].append(src)
    for t in range(num_tasks):
        finish[t] = max((finish[s] for s in preds[t]), default=0.0) + duration[t]
    return finish


def iteration_time(dag: Dag, finish) -> float:
    exits = [t.id for t in dag.tasks if t.kind == "exit"]
    return (finish[exits[-1]] - finish[exits[0]]) / (len(exits) - 1)
