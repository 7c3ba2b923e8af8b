"""kernels.critical_path.finish_times against independent references.

References: sweep.reference.schedule (plain NumPy, float64, topological order),
closed forms (chain = sum, fork-join = max of branches) and exhaustive path
enumeration for small DAGs (tests/reference_rules.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.critical_path import finish_times
from sweep import reference
from sweep.compiler import compile_model, level_arrays, topological_order
from sweep.dag import ALWAYS, NO_PREFETCH, Dag, Task

from reference_rules import all_path_lengths

RTOL = 1e-5
C = 4
PREFETCH = np.array([1.0, 0.0, 1.0, 0.0], np.float32)  # per configuration


def make_dag(num_tasks, edges):
    """A Dag of generic tasks; edges are (src, dst, switch)."""
    tasks = tuple(Task(i, "forward", 1, None) for i in range(num_tasks))
    return Dag(tasks, tuple(edges))


def random_dag(rng, num_tasks, max_in=4, p_switch=0.25):
    """A random DAG whose topological order is a random permutation of the ids."""
    ids = rng.permutation(num_tasks)  # ids[r] = task at topological rank r
    edges = []
    for r in range(1, num_tasks):
        k = int(rng.integers(0, min(r, max_in) + 1))
        for q in rng.choice(r, size=k, replace=False):
            switch = NO_PREFETCH if rng.random() < p_switch else ALWAYS
            edges.append((int(ids[q]), int(ids[r]), switch))
    return make_dag(num_tasks, edges)


def random_durations(rng, num_tasks, configs=C):
    d = rng.uniform(0.0, 1.0, size=(num_tasks, configs))
    d[rng.random(d.shape) < 0.2] = 0.0
    return d.astype(np.float32)


def run_kernel(dag, durations, prefetch=PREFETCH):
    """finish [T + 1, C] from the kernel; switch row 1 = 1 - prefetch."""
    tasks, preds, switch = level_arrays(dag)
    padded = np.concatenate([durations, np.zeros((1, durations.shape[1]), np.float32)])
    switches = np.stack([np.ones_like(prefetch), 1.0 - prefetch]).astype(np.float32)
    return np.asarray(finish_times(tasks, preds, switch, jnp.asarray(padded), jnp.asarray(switches)))


def random_cases():
    rng = np.random.default_rng(20240601)
    sizes = [1, 2, 3, 5, 8, 13, 21, 40] + [int(n) for n in rng.integers(1, 41, size=12)]
    cases = []
    for n in sizes:
        cases.append((random_dag(rng, n), random_durations(rng, n)))
    return cases


CASES = random_cases()


@pytest.fixture(scope="module")
def kernel_results():
    return [run_kernel(dag, d) for dag, d in CASES]


def test_random_dags_match_reference_schedule(kernel_results):
    switched = 0
    for (dag, durations), finish in zip(CASES, kernel_results):
        n = len(dag.tasks)
        assert finish.shape == (n + 1, C)
        for c in range(C):
            _, expected = reference.schedule(dag, durations[:, c].astype(np.float64),
                                             prefetch=bool(PREFETCH[c]))
            np.testing.assert_allclose(finish[:n, c], expected, rtol=RTOL, atol=1e-6,
                                       err_msg=f"{n} tasks, config {c}, edges {dag.edges}")
        # the data exercise the switch: toggling prefetch changes this config's schedule
        _, other = reference.schedule(dag, durations[:, 1].astype(np.float64), prefetch=True)
        _, without = reference.schedule(dag, durations[:, 1].astype(np.float64), prefetch=False)
        switched += int(not np.allclose(other, without))
    assert switched >= 5


def test_sentinel_row_stays_zero(kernel_results):
    for (dag, _), finish in zip(CASES, kernel_results):
        np.testing.assert_array_equal(finish[len(dag.tasks)], np.zeros(C))


def test_chain_is_sum_of_durations():
    rng = np.random.default_rng(1)
    n = 17
    # ids in shuffled order so the chain is not laid out by id
    order = rng.permutation(n)
    edges = [(int(order[i]), int(order[i + 1]), ALWAYS) for i in range(n - 1)]
    dag = make_dag(n, edges)
    d = random_durations(rng, n)
    finish = run_kernel(dag, d)
    d64 = d.astype(np.float64)
    np.testing.assert_allclose(finish[order[-1]], d64.sum(0), rtol=RTOL)
    # every prefix too
    np.testing.assert_allclose(finish[order], np.cumsum(d64[order], axis=0), rtol=RTOL, atol=1e-7)


def test_fork_join_is_max_of_branches():
    rng = np.random.default_rng(2)
    branch_lengths = [1, 4, 2, 6, 3]
    edges, branches = [], []
    source, nxt = 0, 1
    for length in branch_lengths:
        ids = list(range(nxt, nxt + length))
        nxt += length
        edges.append((source, ids[0], ALWAYS))
        edges += [(a, b, ALWAYS) for a, b in zip(ids, ids[1:])]
        branches.append(ids)
    sink = nxt
    edges += [(ids[-1], sink, ALWAYS) for ids in branches]
    dag = make_dag(sink + 1, edges)
    d = random_durations(rng, sink + 1).astype(np.float64)
    d[d == 0] = 0.5
    d = d.astype(np.float32)
    finish = run_kernel(dag, d)
    d64 = d.astype(np.float64)
    expected = d64[source] + np.max([d64[ids].sum(0) for ids in branches], axis=0) + d64[sink]
    np.testing.assert_allclose(finish[sink], expected, rtol=RTOL)


def test_no_prefetch_edge_switch_per_configuration():
    """a -> c (always), b -> c (switch 1): c waits for b only without prefetch."""
    dag = make_dag(3, [(0, 2, ALWAYS), (1, 2, NO_PREFETCH)])
    d = np.array([[1.0, 1.0], [5.0, 5.0], [2.0, 2.0]], np.float32)
    finish = run_kernel(dag, d, np.array([1.0, 0.0], np.float32))
    np.testing.assert_allclose(finish[2], [3.0, 7.0], rtol=RTOL)


def test_topological_order_rejects_cycles():
    with pytest.raises(ValueError):
        topological_order(make_dag(3, [(0, 1, ALWAYS), (1, 2, ALWAYS), (2, 0, ALWAYS)]))
    with pytest.raises(ValueError):
        topological_order(make_dag(2, [(0, 1, ALWAYS), (1, 1, ALWAYS)]))


def test_topological_order_respects_edges():
    rng = np.random.default_rng(3)
    for _ in range(10):
        dag = random_dag(rng, int(rng.integers(1, 41)))
        order = topological_order(dag)
        assert sorted(order) == list(range(len(dag.tasks)))
        position = {t: i for i, t in enumerate(order)}
        assert all(position[s] < position[t] for s, t, _ in dag.edges)


@pytest.mark.parametrize("iterations", [2, 3])
def test_compiled_model_levels_follow_predecessors(iterations):
    layer_params = [0, 10, 0, 5]
    compiled, dag = compile_model(layer_params, [1.0, 2.0, 3.0, 4.0], iterations)
    n = len(dag.tasks)
    tasks = np.asarray(compiled.level_tasks)
    # every task sits in exactly one level; the rest is sentinel padding
    real = tasks[tasks != n]
    assert sorted(real.tolist()) == list(range(n))
    level_of = {int(t): lv for lv, row in enumerate(tasks) for t in row if t != n}
    for src, dst, _ in dag.edges:
        assert level_of[src] < level_of[dst], (dag.tasks[src].name, dag.tasks[dst].name)
    # the level arrays list exactly each task's predecessors, with their switches
    expected = {t: sorted((s, sw) for s, d_, sw in dag.edges if d_ == t) for t in range(n)}
    for lv, row in enumerate(tasks):
        for w, t in enumerate(row):
            if t == n:
                assert np.all(compiled.level_preds[lv, w] == n)
                continue
            got = sorted((int(s), int(sw)) for s, sw in zip(compiled.level_preds[lv, w], compiled.level_switch[lv, w])
                         if s != n)
            assert got == expected[int(t)]
            pads = compiled.level_preds[lv, w] == n
            assert np.all(compiled.level_switch[lv, w][pads] == 0)
    # slots: layers with parameters in backward order, plus layer 1 (DESIGN 2.3)
    assert compiled.slot_layer.tolist() == [3, 1, 0]
    assert compiled.slot_params.tolist() == [5.0, 10.0, 0.0]
    assert compiled.update_tasks.shape == (iterations,)
    assert all(dag.tasks[t].kind == "update" and dag.tasks[t].iteration == k + 1
               for k, t in enumerate(compiled.update_tasks))
    # task_row follows the documented table layout
    # [io, h2d, fwd 1..L, bwd 1..L, comm slot 1..S, update, zero]
    L, S = 4, 3
    slot_of_layer = {4: 0, 2: 1, 1: 2}
    for t in dag.tasks:
        want = {"io": 0, "h2d": 1, "update": 2 + 2 * L + S}.get(t.kind)
        if t.kind == "forward":
            want = 2 + t.layer - 1
        elif t.kind == "backward":
            want = 2 + L + t.layer - 1
        elif t.kind == "comm":
            want = 2 + 2 * L + slot_of_layer[t.layer]
        assert compiled.task_row[t.id] == want, t.name
    assert compiled.task_row[-1] == 3 + 2 * L + S


def test_compiled_model_edges_follow_design():
    """Spot checks of DESIGN 2.3 edges on the compiled fake model (K = 2)."""
    _, dag = compile_model([0, 10, 0, 5], [1.0, 2.0, 3.0, 4.0], 2)
    by_name = {t.name: t.id for t in dag.tasks}
    edges = {(s, d): sw for s, d, sw in dag.edges}

    def has(a, b, sw=ALWAYS):
        return edges.get((by_name[a], by_name[b])) == sw

    assert has("h2d@1", "forward[1]@1")
    assert has("forward[4]@1", "backward[4]@1")
    assert has("backward[2]@1", "backward[1]@1")
    assert has("backward[4]@1", "comm[4]@1") and has("backward[2]@1", "comm[2]@1")
    assert has("comm[4]@1", "comm[2]@1") and has("comm[2]@1", "comm[1]@1")
    assert has("comm[1]@1", "update@1") and has("backward[1]@1", "update@1")
    assert has("update@1", "forward[1]@2") and has("h2d@2", "forward[1]@2")
    assert has("io@1", "io@2") and has("update@1", "io@2", NO_PREFETCH)
    assert "comm[3]@1" not in by_name


def test_reference_critical_path_is_tight():
    for dag, durations in CASES:
        preds = dag.predecessors()
        for c, prefetch in ((0, True), (1, False)):
            d = durations[:, c].astype(np.float64)
            start, finish = reference.schedule(dag, d, prefetch=prefetch)
            path = reference.critical_path(dag, start, finish, prefetch=prefetch)
            assert path, dag.edges
            assert start[path[0]] == 0.0
            assert finish[path[-1]] == pytest.approx(finish.max(), rel=1e-12)
            assert sum(d[t] for t in path) == pytest.approx(finish.max(), rel=1e-9, abs=1e-12)
            for a, b in zip(path, path[1:]):
                enabled = [s for s, sw in preds[b] if sw == ALWAYS or not prefetch]
                assert a in enabled
                assert finish[a] == pytest.approx(start[b], rel=1e-12, abs=1e-12)


def test_reference_schedule_against_path_enumeration():
    """sweep.reference itself against exhaustive path enumeration (small DAGs)."""
    rng = np.random.default_rng(4)
    for _ in range(15):
        n = int(rng.integers(1, 12))
        dag = random_dag(rng, n, p_switch=0.0)
        d = rng.uniform(0.0, 1.0, n)
        _, finish = reference.schedule(dag, d)
        longest = max(length for length, _ in all_path_lengths(n, [(s, t) for s, t, _ in dag.edges], d))
        assert finish.max() == pytest.approx(longest, rel=1e-12)


def _unique_critical_dag():
    """A random 12-task DAG whose longest path beats the runner-up clearly."""
    rng = np.random.default_rng(5)
    while True:
        n = 12
        dag = random_dag(rng, n, max_in=3, p_switch=0.0)
        d = rng.uniform(0.1, 1.0, size=(n, 2))
        ok = True
        paths = []
        for c in range(2):
            lengths = sorted(all_path_lengths(n, [(s, t) for s, t, _ in dag.edges], d[:, c]),
                             key=lambda x: -x[0])
            if len(lengths) > 1 and lengths[0][0] - lengths[1][0] < 0.05:
                ok = False
            paths.append(lengths[0][1])
        if ok and len(dag.edges) >= 10:
            return dag, d.astype(np.float32), paths


def test_gradient_of_makespan_is_critical_path_indicator():
    dag, d, paths = _unique_critical_dag()
    n = len(dag.tasks)
    tasks, preds, switch = level_arrays(dag)
    switches = jnp.ones((2, 2), jnp.float32)

    def total_makespan(durations):
        finish = finish_times(tasks, preds, switch, durations, switches)
        return finish[:n].max(axis=0).sum()  # sum over configurations: columns independent

    padded = jnp.asarray(np.concatenate([d, np.zeros((1, 2), np.float32)]))
    grad = np.asarray(jax.grad(total_makespan)(padded))
    for c in range(2):
        indicator = np.zeros(n)
        indicator[paths[c]] = 1.0
        np.testing.assert_allclose(grad[:n, c], indicator, atol=1e-6, err_msg=f"config {c}")
    # and the makespan itself equals the longest path
    value = float(total_makespan(padded))
    expected = sum(d[paths[c], c].astype(np.float64).sum() for c in range(2))
    assert value == pytest.approx(expected, rel=RTOL)
