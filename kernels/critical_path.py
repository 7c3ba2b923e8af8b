"""Longest path (finish times) over level-ordered task arrays.

finish[t] = duration[t] + max over enabled predecessors p of finish[p].
A level's tasks only depend on earlier levels, so one scan step evaluates a
whole level for every configuration at once.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.smooth import max_along


def finish_times(level_tasks, level_preds, level_switch, durations, switches, temperature=None):
    """Finish time of every task (with `temperature` [C], a smooth max over
    predecessors, for fitting: `kernels.smooth.max_along`; padded and
    disabled predecessors then add at most temperature * log(P)).

    level_tasks [NL, W], level_preds [NL, W, P], level_switch [NL, W, P]: int
    arrays from the compiler, padded with the sentinel index T.
    durations [T + 1, C]: per-task durations, row T zero.
    switches [NS, C]: 0/1 per edge switch and configuration; row 0 is all ones.
    Returns finish [T + 1, C] (row T stays zero).
    """
    finish = jnp.zeros_like(durations)

    def step(finish, level):
        tasks, preds, switch = level
        # Disabled edges contribute 0, which never wins: all finish times are >= 0.
        ready = finish[preds] * switches[switch]  # [W, P, C]
        start = max_along(ready, 1, temperature)
        return finish.at[tasks].set(start + durations[tasks]), None

    finish, _ = jax.lax.scan(step, finish, (level_tasks, level_preds, level_switch))
    return finish
