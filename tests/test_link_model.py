"""The link model's extensions (kernels/collectives.py) against a plain-Python reference.

The reference below is written from the module docstring: per phase, the
regime of the message (protocol switch on the phase's message, chunk switch
on each process's share, the chunk regime first), latency per step scaled by
(k/2)**exponent, bandwidth by (k/2)**-bandwidth_exponent (exponent >= 0).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.collectives import allreduce_time, collective_cost, piecewise_time
from kernels.iteration import iteration_outputs, steady_state
from kernels.smooth import maximum
from sweep.graph import zoo
from sweep.graph.compiler import compile_zoo_model
from sweep.report.explain import explain
from sweep.engine.params import point_params
from sweep.scenario.spec import load_spec

from reference_rules import allreduce_closed_form

FIELDS = ("alpha", "bandwidth", "protocol_bytes", "large_alpha", "large_bandwidth", "chunk_bytes",
          "chunk_alpha", "chunk_bandwidth", "alpha_exponent", "large_alpha_exponent", "bandwidth_exponent")


def resolved(link: dict) -> dict:
    """Unset fields follow the documented rule."""
    out = dict(link)
    out.setdefault("protocol_bytes", math.inf)
    out.setdefault("large_alpha", out["alpha"])
    out.setdefault("large_bandwidth", out["bandwidth"])
    out.setdefault("chunk_bytes", math.inf)
    out.setdefault("chunk_alpha", out["large_alpha"])
    out.setdefault("chunk_bandwidth", out["large_bandwidth"])
    out.setdefault("alpha_exponent", 0.0)
    out.setdefault("large_alpha_exponent", out["alpha_exponent"])
    out.setdefault("bandwidth_exponent", 0.0)
    return out


def phase(m, k, steps, volume, link, chunk):
    latency, per_byte = phase_parts(m, k, steps, volume, link, chunk)
    return latency + per_byte * m


def phase_parts(m, k, steps, volume, link, chunk):
    """(latency, seconds per byte of m) of one phase."""
    link = resolved(link)
    if chunk > link["chunk_bytes"]:
        alpha, bw, ea = link["chunk_alpha"], link["chunk_bandwidth"], link["large_alpha_exponent"]
    elif m > link["protocol_bytes"]:
        alpha, bw, ea = link["large_alpha"], link["large_bandwidth"], link["large_alpha_exponent"]
    else:
        alpha, bw, ea = link["alpha"], link["bandwidth"], link["alpha_exponent"]
    half = k / 2
    # bandwidth never grows with the processes: a negative exponent acts as 0
    return steps * alpha * half ** ea, volume / (bw * half ** -max(0.0, link["bandwidth_exponent"]))


def reference(algorithm, m, n, g, intra, inter, servers=None):
    p = n * g
    if p == 1 or m == 0:
        return 0.0
    lg = math.ceil(math.log2(p))
    if algorithm in ("ring", "rhd", "tree"):
        link = inter if n > 1 else intra
        steps = {"ring": 2 * (p - 1), "rhd": 2 * lg, "tree": 2 * lg}[algorithm]
        volume = {"ring": 2 * (p - 1) / p, "rhd": 2 * (p - 1) / p, "tree": 2 * lg}[algorithm]
        return phase(m, p, steps, volume, link, m / p)
    local = phase(m, g, 2 * (g - 1), 2 * (g - 1) / g, intra, m / g)
    if algorithm == "hierarchical":
        return local + phase(m / g, n, 2 * (n - 1), 2 * (n - 1) / n, inter, m / g / n)
    s = servers or n
    return local + phase(m, n, 2, 2 * max(1.0, n / s), inter, m / s)


def pipelined_ps(m, n, g, intra, inter, servers=None):
    """Both ps phases overlap: latencies add, the slower per-byte cost sets the pace."""
    if n * g == 1 or m == 0:
        return 0.0
    s = servers or n
    lat_a, pb_a = phase_parts(m, g, 2 * (g - 1), 2 * (g - 1) / g, intra, m / g)
    lat_b, pb_b = phase_parts(m, n, 2, 2 * max(1.0, n / s), inter, m / s)
    return lat_a + lat_b + m * max(pb_a, pb_b)


def random_link(rng, alpha, bandwidth):
    link = {"alpha": alpha, "bandwidth": bandwidth}
    for name, value in (("protocol_bytes", rng.choice([6e3, 5e4, 3e5])),
                        ("large_alpha", alpha * rng.uniform(1.5, 4)),
                        ("large_bandwidth", bandwidth * rng.uniform(0.5, 2)),
                        ("chunk_bytes", rng.choice([2e4, 7e4, 1.5e5])),
                        ("chunk_alpha", alpha * rng.uniform(2, 6)),
                        ("chunk_bandwidth", bandwidth * rng.uniform(0.5, 2)),
                        ("alpha_exponent", rng.uniform(-0.8, 0.5)),
                        ("large_alpha_exponent", rng.uniform(0.0, 1.3)),
                        ("bandwidth_exponent", rng.uniform(-0.6, 0.6))):
        if rng.random() < 0.8:  # some left unset: they follow
            link[name] = float(value)
    return link


SHAPES = [(1, 2), (1, 4), (1, 8), (2, 1), (4, 1), (8, 1), (3, 2), (2, 4), (4, 4), (5, 3)]
ALGORITHMS = ["ring", "rhd", "tree", "hierarchical", "ps"]
# Message sizes off every break (breaks are round numbers times small integers).
MESSAGES = np.array([0.0, 3.3, 1000.7, 7777.7, 33333.3, 123456.7, 987654.3, 3.1e6, 2.9e7])


def cases():
    rng = np.random.default_rng(11)
    out = []
    for algorithm in ALGORITHMS:
        for n, g in SHAPES:
            intra = random_link(rng, float(rng.choice([2e-6, 6e-6])), float(rng.choice([1e10, 6e10])))
            inter = random_link(rng, float(rng.choice([1e-5, 4e-5])), float(rng.choice([1e9, 5e9])))
            servers = int(rng.choice([1, 2, n])) if algorithm == "ps" else None
            out.append((algorithm, n, g, intra, inter, servers))
    return out


CASES = cases()


def params_of(algorithm, n, g, intra, inter, servers):
    point = {"model": "alexnet", "batch_size": 8, "nodes": n, "gpus_per_node": g, "algorithm": algorithm}
    for table, link in (("intra", intra), ("inter", inter)):
        point.update({f"{table}.{k}": v for k, v in link.items()})
    if servers is not None:
        point["ps.servers"] = servers
    return point_params(point, zoo.get_model("alexnet"), np.float64)


def test_piecewise_cost_matches_reference():
    import jax

    with jax.enable_x64(True):
        for algorithm, n, g, intra, inter, servers in CASES:
            p = {k: jnp.asarray(v) for k, v in params_of(algorithm, n, g, intra, inter, servers).items()}
            cost = collective_cost(p)
            assert cost.steps is not None
            got = np.asarray(allreduce_time(jnp.asarray(MESSAGES)[:, None], *cost))[:, 0]
            want = [reference(algorithm, m, n, g, intra, inter, servers) for m in MESSAGES]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{algorithm} n={n} g={g}")


@pytest.mark.parametrize("extended", [False, True])
def test_pipelined_ps_matches_reference(extended):
    import jax

    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        for n, g in SHAPES:
            if extended:
                intra = random_link(rng, 4e-6, float(rng.choice([2e9, 1e10])))
                inter = random_link(rng, 3e-5, float(rng.choice([1e9, 8e9])))
            else:  # plain links: the pipelined cost stays affine
                intra, inter = {"alpha": 4e-6, "bandwidth": float(rng.choice([2e9, 1e10]))}, \
                    {"alpha": 3e-5, "bandwidth": float(rng.choice([1e9, 8e9]))}
            servers = int(rng.choice([1, n]))
            point = {"model": "alexnet", "batch_size": 8, "nodes": n, "gpus_per_node": g, "algorithm": "ps",
                     "ps.pipelined": True, "ps.servers": servers}
            for table, link in (("intra", intra), ("inter", inter)):
                point.update({f"{table}.{k}": v for k, v in link.items()})
            p = {k: jnp.asarray(v) for k, v in point_params(point, zoo.get_model("alexnet"), np.float64).items()}
            cost = collective_cost(p)
            assert (cost.steps is None) == (not extended)
            got = np.asarray(allreduce_time(jnp.asarray(MESSAGES)[:, None], *cost))[:, 0]
            want = [pipelined_ps(m, n, g, intra, inter, servers) for m in MESSAGES]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"n={n} g={g}")
            # never slower than the sequential ps, and false is the sequential formula
            sequential = [reference("ps", m, n, g, intra, inter, servers) for m in MESSAGES]
            assert np.all(got <= np.array(sequential) * (1 + 1e-12))
            off = {k: jnp.asarray(v) for k, v in point_params({**point, "ps.pipelined": False},
                                                              zoo.get_model("alexnet"), np.float64).items()}
            np.testing.assert_allclose(np.asarray(allreduce_time(jnp.asarray(MESSAGES)[:, None],
                                                                 *collective_cost(off)))[:, 0],
                                       sequential, rtol=1e-12, atol=0)


def test_unset_fields_follow_their_rule():
    model = zoo.get_model("alexnet")
    p = point_params({"model": "alexnet", "batch_size": 8, "inter.alpha": 3e-5, "inter.bandwidth": 2e9,
                      "inter.large_bandwidth": 4e9, "inter.alpha_exponent": 0.25}, model, np.float64)
    assert p["inter_large_alpha"][0] == 3e-5 and p["inter_chunk_alpha"][0] == 3e-5
    assert p["inter_chunk_bandwidth"][0] == 4e9
    assert p["inter_large_alpha_exponent"][0] == 0.25 and p["inter_bandwidth_exponent"][0] == 0.0
    assert np.isinf(p["inter_protocol_bytes"][0]) and np.isinf(p["inter_chunk_bytes"][0])
    # the intra link gets its catalog figures (pcie3) and no-op extensions
    assert p["intra_large_bandwidth"][0] == p["intra_bandwidth"][0] == 15.75e9
    # without any extension key the parameters stay plain and the cost affine
    plain = point_params({"model": "alexnet", "batch_size": 8}, model)
    assert "inter_protocol_bytes" not in plain
    assert collective_cost({k: jnp.asarray(v) for k, v in plain.items()}).steps is None


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_op_values_reproduce_design_closed_forms(algorithm):
    """Extension keys given at their no-op values: DESIGN 2.2 exactly, and the same iteration."""
    model = zoo.get_model("resnet50")
    dag = compile_zoo_model(zoo.get_model("resnet50"), 3)
    for n, g in [(1, 4), (2, 4), (3, 2), (4, 1)]:
        base = {"model": "resnet50", "batch_size": 32, "nodes": n, "gpus_per_node": g, "algorithm": algorithm,
                "strategy": "mgwfbp", "intra.alpha": 3e-6, "intra.bandwidth": 2e10,
                "inter.alpha": 2.5e-5, "inter.bandwidth": 1.5e9}
        noop = {**base, "inter.alpha_exponent": 0.0, "intra.bandwidth_exponent": 0.0,
                "inter.large_alpha": 2.5e-5, "intra.large_bandwidth": 2e10}
        p_plain, p_noop = point_params(base, model), point_params(noop, model)
        assert "inter_protocol_bytes" in p_noop
        cost = collective_cost({k: jnp.asarray(v) for k, v in p_noop.items()})
        got = np.asarray(allreduce_time(jnp.asarray(MESSAGES, jnp.float32)[:, None], *cost))[:, 0]
        want = [allreduce_closed_form(algorithm, m, n, g, 3e-6, 2e10, 2.5e-5, 1.5e9, None) for m in MESSAGES]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
        a = iteration_outputs(dag, {k: jnp.asarray(v) for k, v in p_plain.items()})
        b = iteration_outputs(dag, {k: jnp.asarray(v) for k, v in p_noop.items()})
        for name in a:
            np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)


def test_explain_comm_durations_follow_the_regimes():
    """Through the channel: every bucket lasts the reference time of its bytes."""
    inter = {"alpha": 2e-5, "bandwidth": 1.2e9, "protocol_bytes": 2.0e5, "large_alpha": 7e-5,
             "large_bandwidth": 0.9e9, "chunk_bytes": 1.0e6, "chunk_alpha": 1.5e-4,
             "alpha_exponent": -0.3, "large_alpha_exponent": 0.8, "bandwidth_exponent": 0.2}
    intra = {"alpha": 5e-6, "bandwidth": 1.0e10}
    for algorithm in ("ring", "hierarchical"):
        doc = explain(load_spec({"model": "alexnet", "batch_size": 16, "nodes": 4, "gpus_per_node": 2,
                                 "strategy": "wfbp", "algorithm": algorithm, "iterations": 2,
                                 "intra": intra, "inter": inter}))
        comms = [t for t in doc["tasks"] if t["kind"] == "comm"]
        sizes = {t["bytes"] for t in comms}
        assert min(sizes) < 2.0e5 < 8.0e6 < max(sizes), "buckets should span all three regimes"
        for t in comms:
            assert t["duration"] == pytest.approx(reference(algorithm, t["bytes"], 4, 2, intra, inter),
                                                  rel=1e-9), (algorithm, t["bytes"])


def test_smooth_versions_tend_to_the_hard_ones():
    a = jnp.asarray([1.0, 2.0, 3.0, 5.0])
    b = jnp.asarray([1.0, 2.5, 2.0, -1.0])
    hard = np.asarray(jnp.maximum(a, b))
    for t in (0.3, 0.01):
        soft = np.asarray(maximum(a, b, jnp.float32(t)))
        assert np.all(soft >= hard - 1e-6) and np.all(soft <= hard + t * math.log(2) + 1e-6)
    # smooth steps at a small width agree with the hard ones away from the breaks
    inter = {"alpha": 2e-5, "bandwidth": 1.2e9, "protocol_bytes": 2.0e5, "large_alpha": 7e-5}
    p = {k: jnp.asarray(v) for k, v in params_of("ring", 4, 1, {"alpha": 5e-6, "bandwidth": 1e10},
                                                    inter, None).items()}
    cost = collective_cost(p)
    m = jnp.asarray([1e3, 1e5, 1.5e5, 3e5, 1e6])[:, None]
    hard = np.asarray(piecewise_time(m, *cost))
    soft = np.asarray(piecewise_time(m, *cost, width=jnp.float32(0.01)))
    np.testing.assert_allclose(soft, hard, rtol=1e-4)
    # the program: smooth at a small temperature ~ hard, and a gradient for every branch
    import jax

    dag = compile_zoo_model(zoo.get_model("alexnet"), 3)
    base = {k: jnp.asarray(v) for k, v in params_of("ring", 4, 1, {"alpha": 5e-6, "bandwidth": 1e10},
                                                       {"alpha": 2e-5, "bandwidth": 1.2e9}, None).items()}

    def time_of(inter_bandwidth, io_time, temperature=None):
        p = {**base, "inter_bandwidth": inter_bandwidth, "io_time_per_sample": io_time}
        if temperature is not None:
            p["max_temperature"] = temperature
        return iteration_outputs(dag, p)["iteration_time"][0]

    bw, io_time = base["inter_bandwidth"], base["io_time_per_sample"]
    hard_t = float(time_of(bw, io_time))
    assert float(time_of(bw, io_time, jnp.asarray([1e-6]))) == pytest.approx(hard_t, rel=1e-3)
    # an input-bound iteration: the hard max gives the link no gradient, the smooth one does
    slow_io = io_time * 0 + 1.05 * hard_t / 8  # the batch of 8 takes a little longer to read than the rest
    assert float(jax.grad(time_of)(bw, slow_io)[0]) == 0.0
    assert float(jax.grad(time_of)(bw, slow_io, jnp.asarray([0.1 * hard_t]))[0]) < 0.0
    # and the recursion: K iterations of a max-plus system
    work, io, h2d = jnp.asarray([1.0, 0.2]), jnp.asarray([0.3, 0.5]), jnp.asarray([0.1, 0.1])
    hard_t = np.asarray(steady_state(work, io, h2d, jnp.asarray([0.0, 1.0]), 4))
    soft_t = np.asarray(steady_state(work, io, h2d, jnp.asarray([0.0, 1.0]), 4, jnp.float32(1e-4)))
    np.testing.assert_allclose(soft_t, hard_t, rtol=1e-3)


# ----------------------------------------------------------------------------- physical bounds (issue 8)

def _bound_params(algorithm, n, g, intra_bw, inter_bw, line_rates=True, **extra):
    point = {"nodes": n, "gpus_per_node": g, "algorithm": algorithm, "intra.alpha": 0.0,
             "intra.bandwidth": intra_bw, "inter.alpha": 0.0, "inter.bandwidth": inter_bw, **extra}
    p = {k: jnp.asarray(v) for k, v in point_params(point, zoo.get_model("alexnet"), np.float64).items()}
    if line_rates:
        p["intra_line_rate"], p["inter_line_rate"] = jnp.asarray([1.5e10]), jnp.asarray([1.25e9])
    return p


def test_wire_lower_bound_by_hand():
    import jax

    from kernels.collectives import wire_lower_bound

    with jax.enable_x64(True):
        m = 8.4e6
        p = _bound_params("ring", 8, 1, 1.5e10, 1.25e9)
        # the figure: 8.4 MB on 8 nodes of 10GbE, 2(P-1)/P * M / line rate = 11.76 ms
        assert float(wire_lower_bound(p, m)[0]) == pytest.approx(2 * 7 / 8 * m / 1.25e9, rel=1e-12)
        p = _bound_params("ring", 1, 4, 1.5e10, 1.25e9)
        assert float(wire_lower_bound(p, m)[0]) == pytest.approx(2 * 3 / 4 * m / 1.5e10, rel=1e-12)
        p = _bound_params("ps", 4, 1, 1.5e10, 1.25e9, **{"ps.servers": 2})
        assert float(wire_lower_bound(p, m)[0]) == pytest.approx(2 * m / 1.25e9, rel=1e-12)
        # the busiest of 4 servers holds 1.5x an even share: it moves 1.5 M each way
        p = _bound_params("ps", 4, 1, 1.5e10, 1.25e9, **{"ps.servers": 4, "ps.imbalance": 1.5})
        assert float(wire_lower_bound(p, m)[0]) == pytest.approx(1.5 * m / 1.25e9, rel=1e-12)
        p = _bound_params("hierarchical", 2, 4, 1.5e10, 1.25e9)
        want = 2 * 3 / 4 * m / 1.5e10 + 2 * 1 / 2 * m / 1.25e9
        assert float(wire_lower_bound(p, m)[0]) == pytest.approx(want, rel=1e-12)


def test_no_collective_beats_the_wire_with_line_rates():
    """hierarchical's g inter rings of M/g share the node's NIC: at the line rate
    its formula alone would beat the wire; with line rates in p it cannot."""
    import jax

    from kernels.collectives import wire_lower_bound

    with jax.enable_x64(True):
        m = jnp.asarray(MESSAGES)[:, None]
        free = _bound_params("hierarchical", 4, 4, 1.5e10, 1.25e9, line_rates=False)
        bounded = _bound_params("hierarchical", 4, 4, 1.5e10, 1.25e9)
        bound = np.asarray(wire_lower_bound(bounded, m))[:, 0]
        assert (np.asarray(allreduce_time(m, *collective_cost(free)))[:, 0][1:] < bound[1:]).all()
        got = np.asarray(allreduce_time(m, *collective_cost(bounded)))[:, 0]
        assert (got >= bound * (1 - 1e-12)).all()
        for algorithm in ALGORITHMS:
            for n, g in SHAPES:
                p = _bound_params(algorithm, n, g, 1.5e10, 1.25e9)
                got = np.asarray(allreduce_time(m, *collective_cost(p)))[:, 0]
                assert (got >= np.asarray(wire_lower_bound(p, m))[:, 0] * (1 - 1e-12)).all(), (algorithm, n, g)


def test_bandwidth_never_grows_with_processes():
    """A negative bandwidth_exponent (the old OSU fit's -0.71) acts as 0: a
    large all-reduce never gets faster per byte as processes are added."""
    import jax

    with jax.enable_x64(True):
        times = []
        for n in (2, 4, 8, 16):
            p = _bound_params("ring", n, 1, 1.5e10, 1.25e9, line_rates=False, **{"inter.bandwidth_exponent": -0.71})
            latency, per_byte = collective_cost(p)[:2]
            times.append(float(per_byte[0]) / (2 * (n - 1) / n))  # seconds per byte on the wire
        assert times == pytest.approx([1 / 1.25e9] * 4, rel=1e-12)
