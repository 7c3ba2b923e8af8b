"""kernels.collectives against the DESIGN 2.2 closed forms (float64, in the test).

Parameters come from sweep.engine.params.point_params (canonical scenario keys), so the
derived values it feeds the kernel (workers, ceil(log2 P), default servers)
are checked too; one dict is also built by hand. The end-to-end tests check
that `explain` gives every comm task the closed-form duration of its bytes.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.codes import ALGORITHMS
from kernels.collectives import allreduce_cost, allreduce_time, collective_cost
from kernels.parameters import REQUIRED, UNSET
from sweep.graph import zoo
from sweep.report.explain import explain
from sweep.engine.params import point_params
from sweep.scenario.spec import load_spec

from reference_rules import allreduce_closed_form, ceil_log2

RTOL = 1e-5  # float32 kernel vs float64 closed form

# (nodes, gpus_per_node, ps servers or None): one node (intra link), several nodes
# (inter link), P = 1, and P that are not powers of two (3, 6, 15, 12).
SHAPES = [
    (1, 1, None), (1, 2, None), (1, 3, None), (1, 8, None),
    (2, 1, None), (2, 4, None), (3, 2, None), (4, 4, None), (5, 3, None), (3, 4, None),
    (4, 4, 2), (4, 2, 8), (3, 2, 2),
]
MESSAGES = np.array([0.0, 1.0, 4096.0, 3.0e6, 1.0e8])
# The algorithms whose cost is affine in the message (DESIGN 2.2); nccl's is
# piecewise (kernels.nccl) and has tests of its own below.
AFFINE = tuple(a for a in ALGORITHMS if a != "nccl")


def _points():
    rng = np.random.default_rng(7)
    points = []
    for algorithm in AFFINE:
        for n, g, servers in SHAPES:
            if servers is not None and algorithm != "ps":
                continue
            point = {
                "model": "resnet50", "batch_size": 32, "nodes": n, "gpus_per_node": g,
                "algorithm": algorithm,
                "intra.alpha": float(rng.choice([1e-6, 2.5e-6, 5e-6])),
                "intra.bandwidth": float(rng.choice([1.5e10, 1.5e11, 3e11])),
                "inter.alpha": float(rng.choice([1e-5, 3e-5, 1.2e-6])),
                "inter.bandwidth": float(rng.choice([1.25e9, 1.25e10, 2.5e10])),
            }
            if servers is not None:
                point["ps.servers"] = servers
            points.append(point)
    return points


POINTS = _points()


def _expected(point, m):
    return allreduce_closed_form(point["algorithm"], m, point["nodes"], point["gpus_per_node"],
                                 point["intra.alpha"], point["intra.bandwidth"],
                                 point["inter.alpha"], point["inter.bandwidth"],
                                 point.get("ps.servers"))


@pytest.fixture(scope="module")
def stacked():
    """point_params of every point, concatenated on the configuration axis."""
    model = zoo.get_model("resnet50")
    per_point = [point_params(p, model) for p in POINTS]
    return {k: np.concatenate([pp[k] for pp in per_point]) for k in per_point[0]}


@pytest.fixture(scope="module")
def kernel_times(stacked):
    latency, per_byte = allreduce_cost({k: jnp.asarray(v) for k, v in stacked.items()})
    times = allreduce_time(jnp.asarray(MESSAGES, jnp.float32)[:, None], latency, per_byte)
    return np.asarray(latency), np.asarray(per_byte), np.asarray(times)


def test_point_params_derived_values(stacked):
    for c, point in enumerate(POINTS):
        n, g = point["nodes"], point["gpus_per_node"]
        assert stacked["workers"][c] == n * g
        assert stacked["log2_workers"][c] == ceil_log2(n * g)
        assert stacked["servers"][c] == point.get("ps.servers", n)
        assert ALGORITHMS[int(stacked["algorithm"][c])] == point["algorithm"]


def test_allreduce_time_matches_closed_forms(kernel_times):
    _, _, times = kernel_times
    for c, point in enumerate(POINTS):
        expected = [_expected(point, m) for m in MESSAGES]
        np.testing.assert_allclose(times[:, c], expected, rtol=RTOL, atol=0.0,
                                   err_msg=f"{point['algorithm']} n={point['nodes']} g={point['gpus_per_node']}")


def test_cost_is_affine_latency_plus_per_byte(kernel_times):
    """(latency, per_byte) are the intercept and slope of the closed form."""
    latency, per_byte, _ = kernel_times
    for c, point in enumerate(POINTS):
        t1, t2 = _expected(point, 1e6), _expected(point, 2e6)
        slope = (t2 - t1) / 1e6
        np.testing.assert_allclose(per_byte[c], slope, rtol=RTOL, atol=0.0, err_msg=str(point))
        np.testing.assert_allclose(latency[c], t1 - slope * 1e6, rtol=1e-4, atol=1e-12, err_msg=str(point))


def test_single_worker_and_empty_message_cost_nothing(kernel_times):
    latency, per_byte, times = kernel_times
    single = [c for c, p in enumerate(POINTS) if p["nodes"] * p["gpus_per_node"] == 1]
    assert len(single) == len(AFFINE)
    np.testing.assert_array_equal(latency[single], 0.0)
    np.testing.assert_array_equal(per_byte[single], 0.0)
    np.testing.assert_array_equal(times[:, single], 0.0)
    np.testing.assert_array_equal(times[MESSAGES == 0], 0.0)
    # and everything else costs something
    others = [c for c in range(len(POINTS)) if c not in single]
    assert np.all(times[1:, others] > 0)


def test_one_node_uses_the_intra_link_only(stacked):
    """Flat algorithms on one node ignore the inter link entirely."""
    one_node = [c for c, p in enumerate(POINTS)
                if p["nodes"] == 1 and p["algorithm"] in ("ring", "rhd", "tree", "hierarchical")]
    p = {k: jnp.asarray(v[one_node]) for k, v in stacked.items()}
    base = allreduce_cost(p)
    p["inter_alpha"] = p["inter_alpha"] * 1000.0
    p["inter_bandwidth"] = p["inter_bandwidth"] / 1000.0
    changed = allreduce_cost(p)
    np.testing.assert_array_equal(np.asarray(base[0]), np.asarray(changed[0]))
    np.testing.assert_array_equal(np.asarray(base[1]), np.asarray(changed[1]))


def test_hand_built_parameters():
    """Parameters built by hand (no point_params): P = 12 on 3 nodes, every algorithm."""
    n, g = 3, 4
    a_i, bw_i, a_e, bw_e, servers = 2e-6, 1e11, 2e-5, 5e9, 2
    codes = np.asarray([ALGORITHMS.index(a) for a in AFFINE], np.int32)
    c = codes.shape[0]

    def full(x):
        return jnp.full(c, x, jnp.float32)

    p = {"nodes": full(n), "gpus_per_node": full(g), "workers": full(n * g),
         "log2_workers": full(4.0), "servers": full(servers),
         "intra_alpha": full(a_i), "intra_bandwidth": full(bw_i),
         "inter_alpha": full(a_e), "inter_bandwidth": full(bw_e),
         "algorithm": jnp.asarray(codes)}
    unused = {name: full(0.0) for name in REQUIRED if name not in p}  # compute and input: not read here
    latency, per_byte = allreduce_cost({**unused, **p})
    m = 5.0e7
    got = np.asarray(allreduce_time(jnp.float32(m), latency, per_byte))
    p_ = n * g
    expected = {
        "ring": 2 * 11 * a_e + 2 * 11 / 12 * m / bw_e,
        "rhd": 2 * 4 * a_e + 2 * 11 / 12 * m / bw_e,
        "tree": 2 * 4 * (a_e + m / bw_e),
        "hierarchical": 2 * 3 * a_i + 2 * 3 / 4 * m / bw_i + 2 * 2 * a_e + 2 * 2 / 3 * (m / 4) / bw_e,
        "ps": 2 * 3 * a_i + 2 * 3 / 4 * m / bw_i + 2 * (a_e + 1.5 * m / bw_e),
    }
    assert p_ == 12
    for i, name in enumerate(AFFINE):
        assert got[i] == pytest.approx(expected[name], rel=RTOL), name
        assert got[i] == pytest.approx(allreduce_closed_form(name, m, n, g, a_i, bw_i, a_e, bw_e, servers),
                                          rel=RTOL), name


def _ps_key_times(key, value, nodes, servers, m, links):
    """{algorithm: (seconds without `key`, with it = value)} of one all-reduce
    of m bytes on `nodes` nodes of 4 GPUs, with `servers` parameter servers."""
    a_i, bw_i, a_e, bw_e = links
    model = zoo.get_model("resnet50")
    out = {}
    for algorithm in ALGORITHMS:
        point = {"model": "resnet50", "batch_size": 32, "nodes": nodes, "gpus_per_node": 4, "algorithm": algorithm,
                 "intra.alpha": a_i, "intra.bandwidth": bw_i, "inter.alpha": a_e, "inter.bandwidth": bw_e,
                 "ps.servers": servers}
        times = []
        for extra in ({}, {key: value}):
            p = {k: jnp.asarray(v) for k, v in point_params({**point, **extra}, model).items()}
            times.append(float(allreduce_time(jnp.float32(m), *allreduce_cost(p))[0]))
        out[algorithm] = tuple(times)
    return out


@pytest.mark.parametrize("name", ["ps_pipelined", "ps_imbalance", "nccl_pci", "nccl_ll128", "nccl_ll_share"])
def test_a_fields_unset_value_prices_as_its_absence(name):
    """`kernels.parameters.UNSET`, what a fit fills into the rows of a group
    that lack an optional field, prices every algorithm's all-reduce as the
    field's absence does (NCCL's rows always carry `nccl_pci`)."""
    model = zoo.get_model("resnet50")
    m = jnp.asarray(np.geomspace(10.0, 1e9, 25))[:, None]
    other = {"ps_pipelined": 1.0, "ps_imbalance": 2.0, "nccl_ll128": 0.0, "nccl_ll_share": 0.5}  # set, and felt
    felt = []
    for algorithm in ALGORITHMS:
        if name == "nccl_pci" and algorithm == "nccl":
            continue
        point = {"model": "resnet50", "batch_size": 32, "nodes": 3, "gpus_per_node": 4, "algorithm": algorithm,
                 "intra.name": "nvlink3", "inter.alpha": 3e-6, "inter.bandwidth": 2.5e10, "ps.servers": 2}
        p = point_params(point, model)

        def times(value):
            q = p.replace(**{name: None if value is None else np.full(1, value, np.float32)})
            return np.asarray(allreduce_time(m, *collective_cost(q)))

        absent = times(None)
        np.testing.assert_allclose(times(UNSET[name]), absent, rtol=1e-6, err_msg=f"{name}, {algorithm}")
        if name in other:
            felt.append(not np.allclose(times(other[name]), absent, rtol=1e-3))
    assert name not in other or any(felt)  # not vacuous: another value moves some algorithm's times


def test_ps_bandwidth_prices_the_push_pull_phase_only():
    """`ps.bandwidth` replaces the inter link's bandwidth in ps's push/pull
    phase (closed form with its own rate), and nothing else: the flat and
    hierarchical algorithms, and the intra phase, keep the link's."""
    a_i, bw_i, a_e, bw_e, bw_ps, m = 2e-6, 1e11, 2e-5, 5e9, 2e9, 5.0e7
    times = _ps_key_times("ps.bandwidth", bw_ps, 3, 2, m, (a_i, bw_i, a_e, bw_e))
    for algorithm, (without, with_key) in times.items():
        if algorithm == "ps":
            assert with_key == pytest.approx(2 * 3 * a_i + 2 * 3 / 4 * m / bw_i + 2 * (a_e + 1.5 * m / bw_ps),
                                             rel=RTOL)
        else:
            assert with_key == without, algorithm


def test_ps_imbalance_scales_the_busiest_servers_bytes():
    """`ps.imbalance` multiplies what ps's busiest server moves, n/S of M on
    an even spread, in the push/pull volume (closed form: 2 max(1, i n/S));
    with more servers than nodes the workers' own M still bounds it, and
    the other algorithms do not read it."""
    n, a_i, bw_i, a_e, bw_e, m = 4, 2e-6, 1e11, 2e-5, 5e9, 5.0e7
    intra = 2 * 3 * a_i + 2 * 3 / 4 * m / bw_i
    for servers, imbalance in ((4, 1.25), (8, 1.25), (8, 3.0)):
        times = _ps_key_times("ps.imbalance", imbalance, n, servers, m, (a_i, bw_i, a_e, bw_e))
        for algorithm, (without, with_key) in times.items():
            if algorithm == "ps":
                volume = 2 * max(1.0, imbalance * n / servers)
                assert with_key == pytest.approx(intra + 2 * a_e + volume * m / bw_e, rel=RTOL), (servers, imbalance)
            else:
                assert with_key == without, algorithm


def test_allreduce_time_broadcasts_over_slots():
    latency = jnp.asarray([1.0, 2.0], jnp.float32)
    per_byte = jnp.asarray([0.5, 0.25], jnp.float32)
    m = jnp.asarray([[0.0, 4.0], [2.0, 0.0], [8.0, 8.0]], jnp.float32)
    np.testing.assert_allclose(np.asarray(allreduce_time(m, latency, per_byte)),
                               [[0.0, 3.0], [2.0, 0.0], [5.0, 4.0]])


# ------------------------------------------------------------------ end to end


# Decimal link parameters (not exact in float32): explain evaluates in float64
# from the spec's values, so its durations are held to rtol 1e-9.
LINKS = {"intra": {"alpha": 1e-6, "bandwidth": 1.5e10},
         "inter": {"alpha": 1.3e-5, "bandwidth": 1.1e9}}


def _explain(algorithm, strategy="wfbp", links=LINKS, **extra):
    spec = {"model": "alexnet", "batch_size": 32, "nodes": 2, "gpus_per_node": 4,
            "algorithm": algorithm, "strategy": strategy, "iterations": 2,
            "intra": dict(links["intra"]), "inter": dict(links["inter"]), **extra}
    return explain(load_spec(spec))


def _check_comm_durations(doc, algorithm, links, rtol):
    comms = [t for t in doc["tasks"] if t["kind"] == "comm"]
    assert comms
    for t in comms:
        expected = allreduce_closed_form(algorithm, t["bytes"], 2, 4,
                                         links["intra"]["alpha"], links["intra"]["bandwidth"],
                                         links["inter"]["alpha"], links["inter"]["bandwidth"],
                                         pci=True)  # the default intra link is pcie3
        assert t["duration"] == pytest.approx(expected, rel=rtol, abs=0.0), (algorithm, t["name"])
    return comms


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_explain_comm_durations_are_closed_form(algorithm):
    doc = _explain(algorithm)
    comms = _check_comm_durations(doc, algorithm, LINKS, 1e-9)
    # wfbp: every alexnet layer has parameters and sends its own fp32 gradients
    model = zoo.get_model("alexnet")
    for t in comms:
        assert t["bytes"] == 4 * model.layers[t["layer"] - 1].params
    assert len(comms) == doc["iterations"] * len(model.layers)


def test_explain_fusion_buckets_are_closed_form():
    bucket = 8 << 20
    doc = _explain("ring", strategy="fusion", bucket_bytes=bucket)
    comms = _check_comm_durations(doc, "ring", LINKS, 1e-9)
    model = zoo.get_model("alexnet")
    first = [t for t in comms if t["iteration"] == 1]
    assert sum(t["bytes"] for t in first) == 4 * sum(layer.params for layer in model.layers)
    # fusion rule in backward order, written out for alexnet's layers
    held, expected = 0, []
    layers = list(range(len(model.layers), 0, -1))
    for i, layer in enumerate(layers):
        held += 4 * model.layers[layer - 1].params
        if held >= bucket or i == len(layers) - 1:
            expected.append((layer, held))
            held = 0
    assert [(t["layer"], t["bytes"]) for t in first] == expected
