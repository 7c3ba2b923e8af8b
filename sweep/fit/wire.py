"""The physics check every fit must pass: no all-reduce beats the wire.

`wire_bound_violations` evaluates the fitted links for every algorithm and a
range of cluster shapes and message sizes against
`kernels.collectives.wire_lower_bound`; the test suite runs it on every fit
it makes (tests/conftest.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from kernels.codes import ALGORITHMS
from kernels.collectives import allreduce_time, collective_cost, wire_lower_bound
from sweep.fit.data import Row
from sweep.fit.model import LINK_TABLES, row_params
from sweep.fit.optimise import FitResult

BOUND_SHAPES = ((1, 2), (1, 4), (1, 8), (2, 1), (2, 4), (4, 1), (4, 4), (8, 1), (8, 4), (16, 8), (64, 1))


BOUND_MESSAGES = np.geomspace(1.0, 1e10, 41)


def wire_bound_violations(rows: list[Row], result: FitResult, shapes=BOUND_SHAPES,
                          messages=BOUND_MESSAGES) -> list[str]:
    """Where the fitted links predict an all-reduce faster than the wire
    allows (`kernels.collectives.wire_lower_bound`), for every row's scenario
    with the fitted values, every algorithm (ps pipelined or not) and a range
    of cluster shapes and sizes: one line per case, empty when none."""

    points = {}
    for row in rows:
        point = {**row.point, **result.values, **{k: v for k, v in result.line_rates.items()
                                                  if k not in row.point}}
        points.setdefault(repr(sorted((k, str(v)) for k, v in point.items()
                                      if k.split(".")[0] in LINK_TABLES)), point)
    found = []
    with jax.enable_x64(True):
        for point in points.values():
            for algorithm in ALGORITHMS:
                for pipelined in (False, True) if algorithm == "ps" else (False,):
                    for n, g in shapes:
                        q = {**point, "nodes": n, "gpus_per_node": g, "algorithm": algorithm}
                        q.pop("ps.servers", None)
                        if pipelined:
                            q["ps.pipelined"] = True
                        p = {k: jnp.asarray(v) for k, v in row_params(q, True).items()}
                        m = jnp.asarray(messages)[:, None]
                        time = np.asarray(allreduce_time(m, *collective_cost(p)))[:, 0]
                        bound = np.asarray(wire_lower_bound(p, m))[:, 0]
                        bad = time < bound * (1 - 1e-9)
                        if bad.any():
                            i = int(np.argmax(bad))
                            found.append(f"{algorithm}{' pipelined' if pipelined else ''} n={n} g={g} "
                                         f"M={messages[i]:.3g}: {time[i]:.4g} s < wire bound {bound[i]:.4g} s")
    return found
