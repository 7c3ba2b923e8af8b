"""`compute.task_floor`: every forward and backward task lasts at least the
floor (a host that launches kernels no faster). Checked against closed forms
on measured per-layer times, its derivative, a fit that recovers it, and bad
values. (The program against the NumPy oracle on every DAG shape and
strategy: tests/test_program.py.)"""
import csv
import tomllib

import numpy as np
import pytest

import sweep
from sweep.errors import SpecError
from sweep.graph import zoo
from sweep.scenario.spec import load_spec

FORWARD = np.array([0.4e-3, 2.0e-3, 0.1e-3, 1.5e-3, 0.7e-3, 0.2e-3, 3.0e-3, 0.5e-3])  # s, one per layer


@pytest.fixture
def traced(tmp_path):
    """A scenario of AlexNet's eight layers with measured times (backward
    twice forward), so each task's time is known without the FLOP model."""
    layers = zoo.get_model("alexnet").layers
    assert len(layers) == len(FORWARD)
    trace = tmp_path / "trace.csv"
    trace.write_text("layer,forward_time,backward_time\n" + "".join(
        f"{layer.name},{float(f)!r},{float(2 * f)!r}\n" for layer, f in zip(layers, FORWARD)))
    return {"model": "alexnet", "batch_size": 16, "compute": {"trace": str(trace)}, "io": {"time_per_sample": 0.0}}


@pytest.mark.parametrize("floor", [0.0, 0.3e-3, 1.0e-3, 5.0e-3])
def test_compute_time_is_each_task_at_least_the_floor(traced, floor):
    spec = {**traced, "compute": {**traced["compute"], "task_floor": floor},
            "outputs": ["compute_time", "iteration_time"]}
    got = sweep.run(spec)
    plain = sweep.run({**traced, "outputs": ["compute_time", "iteration_time"]})
    params = zoo.get_model("alexnet").params
    update = 16 * params / 900e9  # memory-bound update: 16 bytes per parameter over the V100's 900 GB/s
    want = np.maximum(FORWARD, floor).sum() + np.maximum(2 * FORWARD, floor).sum() + update
    assert float(got.compute_time) == pytest.approx(want, rel=1e-5)
    # One GPU: the iteration is its compute chain plus the same input and update, so it grows as compute does.
    grown = float(got.iteration_time) - float(plain.iteration_time)
    assert grown == pytest.approx(want - float(plain.compute_time), rel=1e-4, abs=1e-7)


def test_the_derivative_counts_the_tasks_below_the_floor(traced):
    floor = 1.2e-3  # no task's own time equals it, where the derivative would be a half
    spec = {**traced, "compute": {**traced["compute"], "task_floor": floor},
            "outputs": ["iteration_time", "d_iteration_time/d_compute.task_floor"]}
    derivative = float(sweep.run(spec)["d_iteration_time_d_compute.task_floor"])
    # One GPU: the compute chain is the critical path, and each task below the floor lasts exactly the floor.
    below = (FORWARD < floor).sum() + (2 * FORWARD < floor).sum()
    assert below == 9
    assert derivative == pytest.approx(below, rel=1e-3)


def test_calibrate_recovers_the_floor(cli, tmp_path):
    """Rows made by `run` with a floor of 2 ms (ResNet-50's light layers
    take less): a fit of the floor alone from a start of 0.5 ms finds it."""
    base = {"model": "resnet50", "gpus_per_node": 4, "compute": {"measured_throughput": 250.0}}
    rows = []
    for batch in (16, 32, 64):
        cube = sweep.run({**base, "batch_size": batch, "nodes": [1, 2],
                          "compute": {**base["compute"], "task_floor": 2e-3}, "outputs": ["throughput"]})
        rows += [["resnet50", batch, n, 4, 250.0, float(cube["throughput"].sel(nodes=n))] for n in (1, 2)]
    with open(tmp_path / "rows.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([["model", "batch_size", "nodes", "gpus_per_node",
                                       "compute.measured_throughput", "throughput"], *rows])
    status, _, err = cli("calibrate", tmp_path / "rows.csv", "--fit", "compute.task_floor", "-o",
                         tmp_path / "fit.toml", "--prior", "0")
    assert status == 0, err
    doc = tomllib.loads((tmp_path / "fit.toml").read_text())
    # float32 rows, and the fit's smooth maximum where a task's time meets the floor: a few parts in 1e3
    assert doc["compute"]["task_floor"] == pytest.approx(2e-3, rel=5e-3)
    assert doc["fit"]["max_relative_error"] < 5e-3


@pytest.mark.parametrize("value", [-1e-3, float("nan"), 7200.0, "fast"])
def test_bad_floors_are_refused_with_the_key_and_value(value):
    with pytest.raises(SpecError, match=r"^compute\.task_floor = "):
        load_spec({"model": "alexnet", "batch_size": 16, "compute": {"task_floor": value}})
