"""Plain NumPy longest-path evaluation in topological order (float64).

Written independently of the JAX kernels: `explain` uses it for one
configuration, and the tests hold the kernels to it.
"""
from __future__ import annotations

import numpy as np

from sweep.compiler import topological_order
from sweep.dag import ALWAYS, Dag


def schedule(dag: Dag, durations, prefetch: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(start, finish) of every task: a task starts when all its enabled
    predecessors have finished (edges switched NO_PREFETCH count only
    without prefetch)."""
    durations = np.asarray(durations, np.float64)
    start = np.zeros(len(dag.tasks))
    finish = np.zeros(len(dag.tasks))
    preds = dag.predecessors()
    for t in topological_order(dag):
        enabled = [finish[s] for s, switch in preds[t] if switch == ALWAYS or not prefetch]
        start[t] = max(enabled, default=0.0)
        finish[t] = start[t] + durations[t]
    return start, finish


def critical_path(dag: Dag, start, finish, prefetch: bool = True, rtol: float = 1e-12) -> list[int]:
    """Task ids of one critical path, from time 0 to the latest finish.

    Walks back from the last task to finish, each time to a predecessor that
    finishes exactly when the current task starts.
    """
    preds = dag.predecessors()
    current = int(np.argmax(finish))
    path = [current]
    scale = max(float(finish[current]), 1e-300)
    while start[current] > rtol * scale:
        tight = [s for s, switch in preds[current]
                 if (switch == ALWAYS or not prefetch) and abs(finish[s] - start[current]) <= rtol * scale]
        # Among tight predecessors prefer the one that started earliest: ties are
        # broken deterministically and zero-length tasks are not preferred.
        current = min(tight, key=lambda s: (start[s], s))
        path.append(current)
    return path[::-1]
