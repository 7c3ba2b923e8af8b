"""The DAG shapes of DESIGN 2.5 through every command: run (with
sensitivities), calibrate, predict. Shape keys may be CSV columns, so one fit
spans several shapes; the fit finds the link the data came from."""
from __future__ import annotations

import csv
import tomllib

import numpy as np
import pytest

import sweep

BASE = {"model": "alexnet", "batch_size": 32, "gpus_per_node": 2, "strategy": "wfbp",
        "intra": {"alpha": 8e-6, "bandwidth": 1.2e10}, "inter": {"alpha": 4e-5, "bandwidth": 1.1e9}}
TRUE_BANDWIDTH = 1.1e9

# Each row: the shape keys as CSV cells (algorithm included: pipelined needs hierarchical).
SHAPES = [
    {"update": "barrier", "zero": 0, "accumulation": 1, "algorithm": "ring", "hierarchical.pipelined": "false"},
    {"update": "layerwise", "zero": 0, "accumulation": 1, "algorithm": "ring", "hierarchical.pipelined": "false"},
    {"update": "barrier", "zero": 0, "accumulation": 1, "algorithm": "hierarchical",
     "hierarchical.pipelined": "true"},
    {"update": "barrier", "zero": 1, "accumulation": 1, "algorithm": "ring", "hierarchical.pipelined": "false"},
    {"update": "barrier", "zero": 3, "accumulation": 1, "algorithm": "ring", "hierarchical.pipelined": "false"},
    {"update": "barrier", "zero": 0, "accumulation": 3, "algorithm": "ring", "hierarchical.pipelined": "false"},
]


def as_spec(shape: dict) -> dict:
    spec = {k: v for k, v in shape.items() if k != "hierarchical.pipelined"}
    return {**spec, "hierarchical": {"pipelined": shape["hierarchical.pipelined"] == "true"}}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['update']}-z{s['zero']}-a{s['accumulation']}-"
                                                      f"{s['algorithm']}")
def test_sensitivity_is_the_derivative_of_the_sweep(shape):
    """d(iteration_time)/d(inter.bandwidth) against a central difference of `run` itself."""
    spec = {**BASE, **as_spec(shape), "nodes": 4,
            "outputs": ["iteration_time", "d_iteration_time/d_inter.bandwidth"]}
    got = float(sweep.run(spec)["d_iteration_time_d_inter.bandwidth"])
    h = 0.02
    times = [float(sweep.run({**spec, "inter": {**BASE["inter"], "bandwidth": TRUE_BANDWIDTH * s},
                              "outputs": ["iteration_time"]})["iteration_time"]) for s in (1 + h, 1 - h)]
    numeric = (times[0] - times[1]) / (2 * h * TRUE_BANDWIDTH)
    assert got < 0  # a faster link never slows an iteration, and these are communication bound
    assert got == pytest.approx(numeric, rel=0.03)


@pytest.mark.parametrize("shapes", [
    pytest.param([SHAPES[0], SHAPES[4]], id="barrier-and-zero3"),
    pytest.param(SHAPES, id="all-six", marks=pytest.mark.slow)])  # (40 s on 2 cores)
def test_calibrate_and_predict_across_shapes(tmp_path, cli, shapes):
    header = ["model", "batch_size", "nodes", "gpus_per_node", "strategy", *SHAPES[0], "throughput"]
    rows, truth = [], {}
    for i, shape in enumerate(shapes):
        cube = sweep.run({**BASE, **as_spec(shape), "nodes": [2, 4, 8], "outputs": ["throughput"]})
        for nodes in (2, 4, 8):
            value = float(cube["throughput"].sel(nodes=nodes))
            truth[(i, nodes)] = value
            rows.append(["alexnet", 32, nodes, 2, "wfbp", *shape.values(), value if nodes < 8 else ""])
    train = [r for r in rows if r[-1] != ""]
    with open(tmp_path / "data.csv", "w", newline="") as f:
        csv.writer(f).writerows([header, *train])
    base = tmp_path / "base.toml"
    base.write_text('model = "alexnet"\nbatch_size = 32\ngpus_per_node = 2\n'
                    '[intra]\nalpha = 8e-6\nbandwidth = 1.2e10\n[inter]\nalpha = 4e-5\nbandwidth = 1.1e10\n')
    fit = tmp_path / "fit.toml"
    # Noise-free rows and a base 10x off: the priors' pull would be the only error, so they are off.
    status, _, err = cli("calibrate", tmp_path / "data.csv", "--base", base, "--fit", "inter.bandwidth",
                         "-o", fit, "--starts", "1", "--prior", "0")
    assert status == 0, err
    doc = tomllib.loads(fit.read_text())
    assert doc["inter"]["bandwidth"] == pytest.approx(TRUE_BANDWIDTH, rel=1e-3)
    assert doc["fit"]["max_relative_error"] < 1e-3
    # predict the unmeasured 8-node rows of every shape
    query = [r for r in rows if r[-1] == ""]
    with open(tmp_path / "query.csv", "w", newline="") as f:
        csv.writer(f).writerows([header, *query])
    status, _, err = cli("predict", fit, tmp_path / "query.csv", "-o", tmp_path / "pred.csv")
    assert status == 0, err
    with open(tmp_path / "pred.csv", newline="") as f:
        predicted = [float(r["predicted_throughput"]) for r in csv.DictReader(f)]
    want = [truth[(i, 8)] for i in range(len(shapes))]
    np.testing.assert_allclose(predicted, want, rtol=2e-3)
    assert len(set(np.round(want, 3))) == len(shapes)  # the shapes really differ
