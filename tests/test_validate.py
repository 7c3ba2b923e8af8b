"""`ssgd-sweep validate` (issue 8): folds, naive baselines, errors and interval
coverage against a case computed by hand, and through the CLI."""
from __future__ import annotations

import csv
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sweep.fit.data import Row
from sweep.fit.optimise import FitOptions
from sweep.fit.uncertainty import jacobian, predict_rows, value_and_jacobian
from sweep.fit.validate import make_folds, naive, validate

ALPHA, BW = 1e-5, 1e9
FAST = FitOptions(starts=2, steps=400, polish=200)
# Exact rows: without priors the fit must be the truth (priors pull towards the catalog values).
EXACT = FitOptions(starts=2, steps=400, polish=200, prior=0.0)


def ring(p, m, alpha=ALPHA, bw=BW):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * m / bw


def write(path, header, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def exact(tmp_path):
    """Ring all-reduce times on 2, 4 and 8 nodes of 1e3 and 1e6 bytes, exactly."""
    rows = [[p, 1, m, ring(p, m)] for p in (2, 4, 8) for m in (1e3, 1e6)]
    return write(tmp_path / "exact.csv", ["nodes", "gpus_per_node", "message_bytes", "allreduce_time"], rows)


def test_leave_one_process_count_out_by_hand(exact):
    results = validate(exact, ["inter.alpha", "inter.bandwidth"], split="nodes", options=EXACT)
    assert [r.fold.name for r in results] == ["leave out nodes = 2", "leave out nodes = 4", "leave out nodes = 8"]
    for result in results:
        assert len(result.fold.train) == 4 and len(result.records) == 2
        # two keys, four exact rows: the fit is the truth, and so is every prediction
        assert result.fit.values["inter.alpha"] == pytest.approx(ALPHA, rel=1e-3)
        assert result.fit.values["inter.bandwidth"] == pytest.approx(BW, rel=1e-3)
        for r in result.records:
            assert r["model_error"] < 2e-3
            assert r["low"] <= r["predicted"] <= r["high"]
    # naive: the nearest process count's time at the same size (2 for 4: a tie with 8, the first wins)
    by_fold = {r.fold.name: r.records for r in results}
    for fold, p, near in (("leave out nodes = 2", 2, 4), ("leave out nodes = 4", 4, 2),
                          ("leave out nodes = 8", 8, 4)):
        for r, m in zip(by_fold[fold], (1e3, 1e6)):
            assert r["naive"] == pytest.approx(ring(near, m), rel=1e-12)
            assert r["naive_error"] == pytest.approx(abs(ring(near, m) / ring(p, m) - 1), rel=1e-12)
    # e.g. 1 kB on 2 nodes: 2.1e-5 s measured, 6.15e-5 s on 4 nodes: the ruler is 192.9 % off
    assert by_fold["leave out nodes = 2"][0]["naive_error"] == pytest.approx(6.15e-5 / 2.1e-5 - 1, rel=1e-9)


def test_naive_baselines_scale_like_a_ruler():
    def row(line, nodes, g, target, value, message=None, **keys):
        point = {"nodes": nodes, "gpus_per_node": g, **keys}
        return Row(line, point, frozenset(point), {target: value}, message, {})

    train = [row(2, 1, 4, "throughput", 400.0, strategy="wfbp"), row(3, 2, 4, "throughput", 700.0, strategy="wfbp"),
             row(4, 2, 4, "throughput", 650.0, strategy="bsp")]
    # linear from the largest trained GPU count of the same method: 700 * 32 / 8
    assert naive(train, row(9, 8, 4, "throughput", 1.0, strategy="wfbp"), "throughput") == pytest.approx(2800.0)
    assert naive(train, row(9, 8, 4, "throughput", 1.0, strategy="bsp"), "throughput") == pytest.approx(2600.0)
    # ps's busiest server follows from the layout, like the node count: the same share does not make a
    # row nearer (else the 4-GPU row, 400 * 32 / 4)
    ps = [row(2, 2, 4, "throughput", 700.0, algorithm="ps", **{"ps.imbalance": 1.04}),
          row(3, 1, 4, "throughput", 400.0, algorithm="ps", **{"ps.imbalance": 1.27})]
    assert naive(ps, row(9, 8, 4, "throughput", 1.0, algorithm="ps", **{"ps.imbalance": 1.27}),
                 "throughput") == pytest.approx(2800.0)
    sizes = [row(2, 2, 1, "allreduce_time", 1e-3, 1e6), row(3, 2, 1, "allreduce_time", 2e-4, 1e5)]
    # the nearest measured size, at its bandwidth: 1e-3 s * 4e6 / 1e6
    assert naive(sizes, row(9, 2, 1, "allreduce_time", 1.0, 4e6), "allreduce_time") == pytest.approx(4e-3)


def test_folds_of_each_split():
    rows = [Row(i, {"nodes": n, "gpus_per_node": 4, "strategy": s}, frozenset(), {"throughput": 1.0}, None,
                    {}) for i, (n, s) in enumerate((n, s) for n in (1, 2, 4, 8) for s in ("wfbp", "bsp", "bsp"))]
    gpus = make_folds(rows, "gpus")
    assert [f.name for f in gpus] == ["fit <= 16 GPUs, predict more", "fit <= 8 GPUs, predict more"]
    assert [len(f.test) for f in gpus] == [3, 6]
    assert make_folds(rows, "gpus", cut=8)[0].test == tuple(range(6, 12))
    method = make_folds(rows, "method")
    assert len(method) == 1 and method[0].name == "fit strategy=bsp, predict strategy=wfbp"
    assert make_folds(rows, "method", reference="strategy=wfbp", min_gpus=16)[0].test == (7, 8, 10, 11)
    folds = make_folds(rows, "rows", folds=3)
    assert sorted(i for f in folds for i in f.test) == list(range(12))


def test_interval_coverage_on_held_out_folds(tmp_path):
    """5 % lognormal scatter around a ring: the held-out rows of 5 folds fall
    inside their 90 % intervals about 90 % of the time."""
    rng = np.random.default_rng(3)
    rows = [[p, 1, m, ring(p, m) * math.exp(rng.normal(0, 0.05))]
            for p in (2, 3, 4, 6, 8) for m in np.geomspace(1e3, 1e7, 16)]
    data = write(tmp_path / "noisy.csv", ["nodes", "gpus_per_node", "message_bytes", "allreduce_time"], rows)
    results = validate(data, ["inter.alpha", "inter.bandwidth"], split="rows", folds=5, options=FAST)
    inside = np.mean([r["inside"] for f in results for r in f.records])
    assert len([r for f in results for r in f.records]) == 80
    assert 0.8 <= inside <= 0.98, inside
    errors = np.array([r["model_error"] for f in results for r in f.records])
    assert np.median(errors) < 0.05


def test_validate_cli_writes_table_and_csv(exact, tmp_path, cli):
    out, table = tmp_path / "v.csv", tmp_path / "v.md"
    status, stdout, err = cli("validate", exact, "--fit", "inter.alpha", "--fit", "inter.bandwidth",
                              "--split", "size", "--cut", 1e4, "-o", out, "--table", table,
                              "--starts", 2, "--steps", 300)
    assert status == 0, err
    assert "fit <= 10000 bytes, predict larger" in stdout and table.read_text() in stdout + "\n"
    with open(out, newline="") as handle:
        records = list(csv.DictReader(handle))
    assert len(records) == 3 and {r["target"] for r in records} == {"allreduce_time"}
    status, _, err = cli("validate", exact, "--fit", "inter.alpha", "--split", "colour", "-o", out)
    assert status == 2 and "--split" in err


def test_run_and_predict_agree_on_overhead_and_line_rate(tmp_path):
    """A FIT.toml's overhead and line rate reach sweeps too (sweep.engine.params), so
    `run` and `predict` give the same iteration time."""
    import sweep

    point = {"model": "resnet50", "batch_size": 32, "nodes": 4, "gpus_per_node": 2, "strategy": "wfbp",
             "algorithm": "hierarchical", "inter.overhead": 2e-4, "intra.overhead": 5e-5,
             "inter.line_rate": 1.25e9, "inter.bandwidth": 1.2e9}
    cube = sweep.run(dict(point, outputs=["iteration_time"]))
    plain = sweep.run({k: v for k, v in point.items() if "overhead" not in k and "line_rate" not in k}
                      | {"outputs": ["iteration_time"]})
    row = Row(2, point, frozenset(point), {"iteration_time": None}, None, {})
    predicted = predict_rows([row], ["iteration_time"])["iteration_time"][0]
    assert float(cube["iteration_time"]) == pytest.approx(predicted, rel=1e-5)
    assert float(cube["iteration_time"]) > float(plain["iteration_time"])


def test_run_fold_uses_the_callers_fit(exact, monkeypatch):
    """Given a fit of the fold's training rows, run_fold predicts from it and
    fits nothing: the records equal those of its own fit."""
    from sweep.fit import optimise, validate as validation
    from sweep.fit.data import load_rows

    _, rows, _ = load_rows(exact, {})
    fold = make_folds(rows, "nodes")[0]
    keys = ["inter.alpha", "inter.bandwidth"]
    own = validation.run_fold(rows, fold, keys, {}, EXACT)
    given = optimise.fit([rows[i] for i in fold.train], keys, {}, EXACT)

    def no_fit(*args, **kwargs):
        raise AssertionError("run_fold refitted")

    monkeypatch.setattr(optimise, "fit", no_fit)
    reused = validation.run_fold(rows, fold, keys, {}, EXACT, fit=given)
    assert reused.fit is given
    assert [r["predicted"] for r in reused.records] == [r["predicted"] for r in own.records]


def test_interval_score_by_hand():
    # Width in log space, plus 2 / (1 - level) times the log distance outside the band.
    from sweep import interval_score

    width = math.log(1.1) - math.log(0.9)
    assert interval_score([1.0], [0.9], [1.1]) == pytest.approx(width)
    assert interval_score([1.2], [0.9], [1.1]) == pytest.approx(width + 20 * math.log(1.2 / 1.1))
    assert interval_score([0.5], [0.9], [1.1], level=0.5) == pytest.approx(width + 4 * math.log(0.9 / 0.5))
    assert interval_score([1.0, 1.2], [0.9, 0.9], [1.1, 1.1]) == pytest.approx(width + 10 * math.log(1.2 / 1.1))


def test_coverage_range_solves_the_wilson_equation():
    """The bounds are the two coverages q with (hits/n - q)^2 = z^2 q (1 - q) / n
    (the score test's acceptance edges), found here as a quadratic's roots."""
    from sweep import coverage_text
    from sweep.fit.validate import coverage_range

    z = 1.959963984540054
    for hits, n in ((15, 18), (11, 18), (42, 42), (0, 5), (50, 54)):
        p = hits / n
        roots = np.sort(np.roots([1 + z * z / n, -(2 * p + z * z / n), p * p]).real)
        low, high = coverage_range([True] * hits + [False] * (n - hits))
        assert (low, high) == pytest.approx(tuple(np.clip(roots, 0, 1)), abs=1e-12)
    assert coverage_range([True] * 15 + [False] * 3)[0] < 0.9 < coverage_range([True] * 15 + [False] * 3)[1]
    assert coverage_range([True] * 11 + [False] * 7)[1] < 0.9  # 61 % on 18 rows: too few inside
    assert coverage_range([True] * 42)[0] > 0.9  # 42 of 42: the bands are too wide
    assert coverage_text([True] * 15 + [False] * 3) == "83.3 % (61-94)"
    assert coverage_text([]) == "-"


def test_jacobian_column_by_column_is_the_closed_form():
    def f(t):
        return jnp.stack([t[0] * t[1], jnp.sin(t[0]), jnp.exp(t[1]) * t[0] ** 2, t[2] ** 3])

    t = np.array([0.7, -1.3, 2.0])
    expected = np.array([[t[1], t[0], 0.0],
                         [np.cos(t[0]), 0.0, 0.0],
                         [2 * t[0] * np.exp(t[1]), np.exp(t[1]) * t[0] ** 2, 0.0],
                         [0.0, 0.0, 3 * t[2] ** 2]])
    with jax.enable_x64(True):
        got = jacobian(f, t)
        value, again = value_and_jacobian(f, t)
        none_fitted = value_and_jacobian(lambda t: jnp.ones(3) * 2.5, np.zeros(0))
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(again, got)  # the value comes with the columns
    np.testing.assert_allclose(value, [t[0] * t[1], np.sin(t[0]), np.exp(t[1]) * t[0] ** 2, t[2] ** 3], rtol=1e-15)
    assert none_fitted[0].tolist() == [2.5] * 3 and none_fitted[1].shape == (3, 0)
