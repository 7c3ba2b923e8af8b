"""compute.trace: measured per-layer times from CSV or a Chrome trace (sweep/layer_trace.py).

The traces are generated here: a FLOP-based `explain` gives every layer's
forward and backward duration; written as a trace and read back, they must
reproduce that explain exactly (round trip), through `explain`, through
`evaluate_params` and through `sweep.run`.
"""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import sweep
from sweep.graph import zoo
from sweep.graph.compiler import compile_zoo_model
from sweep.engine.evaluate import evaluate_params
from sweep.report.explain import explain
from sweep.graph.layer_trace import TraceWarning, load_trace, match_trace
from sweep.engine.params import point_params
from sweep.errors import SpecError
from sweep.scenario.spec import load_spec

BASE = {"model": "alexnet", "batch_size": 32, "nodes": 2, "gpus_per_node": 2, "strategy": "wfbp",
        "iterations": 2, "io": {"time_per_sample": 1e-6}}


@pytest.fixture(scope="module")
def reference():
    """explain of the FLOP-based model: per-layer (name, forward, backward) and the document."""
    doc = explain(load_spec(BASE))
    first = [t for t in doc["tasks"] if t["iteration"] == 1]
    forward = {t["layer_name"]: t["duration"] for t in first if t["kind"] == "forward"}
    backward = {t["layer_name"]: t["duration"] for t in first if t["kind"] == "backward"}
    names = [layer.name for layer in zoo.get_model("alexnet").layers]
    return [(n, forward[n], backward[n]) for n in names], doc


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "forward_time", "backward_time"])
        for name, f, b in rows:
            writer.writerow([name, repr(float(f)), repr(float(b))])
    return path


def write_chrome(path, rows, iterations=3, extra=(), gpu=False):
    """A PyTorch-profiler-like trace: record_function events per layer, forward
    then backward, `iterations` times with times scattered around the mean."""
    events, ts = [], 0.0
    cat = "gpu_user_annotation" if gpu else "user_annotation"
    for k in range(iterations):
        jitter = 1.0 + 0.1 * (k - (iterations - 1) / 2)  # mean over iterations is exact
        for name, f, _ in rows:
            events.append({"ph": "X", "cat": cat, "name": f"nn.Module: {name}", "ts": ts, "dur": f * 1e6 * jitter})
            ts += f * 1e6 + 1
            for extra_name, extra_f, after in extra:
                if after == name:
                    events.append({"ph": "X", "cat": cat, "name": extra_name, "ts": ts, "dur": extra_f * 1e6})
                    ts += 1
        for name, _, b in reversed(rows):
            events.append({"ph": "X", "cat": cat, "name": f"{name}.backward", "ts": ts, "dur": b * 1e6 * jitter})
            ts += b * 1e6 + 1
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 0.0, "dur": 5.0})
    if gpu:  # CPU-side annotations exist too, with launch-time durations: must be ignored
        events += [{"ph": "X", "cat": "user_annotation", "name": n, "ts": 0.0, "dur": 1.0} for n, _, _ in rows]
    path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return path


def durations(doc, kind):
    return {t["layer_name"]: t["duration"] for t in doc["tasks"] if t["iteration"] == 1 and t["kind"] == kind}


@pytest.mark.parametrize("fmt", ["csv", "chrome", "chrome-gpu"])
def test_round_trip_reproduces_flop_based_explain(reference, tmp_path, fmt):
    rows, doc = reference
    path = (write_csv(tmp_path / "trace.csv", rows) if fmt == "csv"
            else write_chrome(tmp_path / "trace.json", rows, gpu=fmt == "chrome-gpu"))
    traced = explain(load_spec({**BASE, "compute": {"trace": str(path)}}))
    assert traced["iteration_time"] == pytest.approx(doc["iteration_time"], rel=1e-9)
    for kind in ("forward", "backward"):
        got, want = durations(traced, kind), durations(doc, kind)
        assert got.keys() == want.keys()
        for name in want:
            assert got[name] == pytest.approx(want[name], rel=1e-9, abs=1e-15), (kind, name)
    assert [t["bytes"] for t in traced["tasks"]] == [t["bytes"] for t in doc["tasks"]]


def test_measured_times_replace_flops_and_are_matched_by_name(tmp_path):
    model = zoo.get_model("alexnet")
    names = [layer.name for layer in model.layers]
    rng = np.random.default_rng(3)
    forward, backward = rng.uniform(1e-4, 5e-3, len(names)), rng.uniform(1e-4, 9e-3, len(names))
    # shuffled rows, and one layer listed twice (two measurements: the mean counts)
    order = rng.permutation(len(names))
    rows = [(names[i], forward[i], backward[i]) for i in order]
    rows.append((names[0], forward[0] * 1.5, backward[0] * 0.5))
    rows.append((names[0], forward[0] * 0.5, backward[0] * 1.5))
    path = write_csv(tmp_path / "t.csv", rows)
    with pytest.warns(TraceWarning, match=r"1 layer\(s\) on several rows \(features.0\); using the mean"):
        f, b = match_trace(load_trace(path), model)
    np.testing.assert_allclose(f, forward, rtol=1e-12)
    np.testing.assert_allclose(b, backward, rtol=1e-12)

    # Through evaluate_params on one GPU: the iteration is compute + update (input negligible).
    with pytest.warns(TraceWarning, match="several rows"):  # the compiler reads the same trace
        dag = compile_zoo_model(zoo.get_model("alexnet"), 3, str(path))
    point = {"model": "alexnet", "batch_size": 16, "io.time_per_sample": 1e-9}
    params = point_params(point, model)
    out = evaluate_params(dag, params)
    update = 16.0 * model.params / 900e9  # update_bytes_per_param * params / v100 memory bandwidth
    expected = forward.sum() + backward.sum() + update
    assert float(out["iteration_time"][0]) == pytest.approx(expected, rel=2e-5)
    assert float(out["compute_time"][0]) == pytest.approx(expected, rel=2e-5)
    # A different batch size does not rescale measured times (they are taken as given).
    out32 = evaluate_params(dag, point_params({**point, "batch_size": 32}, model))
    assert float(out32["compute_time"][0]) == pytest.approx(expected, rel=2e-5)


def test_measured_throughput_rescales_a_trace(tmp_path, reference):
    rows, _ = reference
    path = write_csv(tmp_path / "t.csv", rows)
    doc = explain(load_spec({"model": "alexnet", "batch_size": 32, "compute": {"trace": str(path),
                                                                             "measured_throughput": 2000.0}}))
    assert doc["breakdown"]["throughput"] == pytest.approx(2000.0, rel=1e-6)


def test_unmatched_entries_fold_into_the_layer_before(tmp_path, reference):
    rows, _ = reference
    extra = [("relu_after_conv1", 2e-4, "features.0"), ("maxpool", 3e-4, "features.0"),
             ("dropout", 1e-4, "classifier.1")]
    path = write_chrome(tmp_path / "t.json", rows, iterations=1, extra=extra)
    f, b = match_trace(load_trace(path), zoo.get_model("alexnet"))
    want = np.array([r[1] for r in rows])
    want[0] += 5e-4
    want[5] += 1e-4  # classifier.1 is the sixth layer
    np.testing.assert_allclose(f, want, rtol=1e-9)
    np.testing.assert_allclose(b, [r[2] for r in rows], rtol=1e-9)


def test_match_by_order_when_names_differ(tmp_path, reference):
    rows, _ = reference
    renamed = [(f"Layer_{i}", f, b) for i, (_, f, b) in enumerate(rows)]
    by_order = r"no entry is named after alexnet's layers \(8 of 8 missing\); matched by order"
    with pytest.warns(TraceWarning, match=by_order):
        f, _ = match_trace(load_trace(write_csv(tmp_path / "t.csv", renamed)), zoo.get_model("alexnet"))
    np.testing.assert_allclose(f, [r[1] for r in rows], rtol=1e-12)


def test_mismatch_is_a_clear_error(tmp_path, reference, cli, write_spec):
    rows, _ = reference
    path = write_csv(tmp_path / "short.csv", [(f"Layer_{i}", f, b) for i, (_, f, b) in enumerate(rows[:5])])
    with pytest.raises(SpecError) as err:
        load_spec({"model": "alexnet", "batch_size": 8, "compute": {"trace": str(path)}})
    assert err.value.key == "compute.trace"
    assert "features.0" in str(err.value) and "8 layers" in str(err.value)
    out = tmp_path / "out.nc"
    spec = write_spec(f'model = "alexnet"\nbatch_size = 8\ncompute.trace = "{path.name}"\n',
                      name="spec.toml")
    (spec.parent / path.name).write_bytes(path.read_bytes())  # relative to the scenario file
    status, _, stderr = cli("run", spec, "-o", out)
    assert status == 2 and not out.exists()
    assert stderr.count("\n") == 1 and "compute.trace" in stderr and "short.csv" in stderr


@pytest.mark.parametrize("content, reason", [
    ("layer,forward_time\nfeatures.0,1e-3\n", "backward_time"),
    ("layer,forward_time,backward_time\nfeatures.0,fast,1e-3\n", "not a number"),
    ("layer,forward_time,backward_time\nfeatures.0,nan,1e-3\n", "finite"),
    ('{"traceEvents": 3}', "traceEvents"),
    ('{"traceEvents": [', "not valid JSON"),
])
def test_bad_trace_files(tmp_path, content, reason):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(SpecError, match=reason):
        load_trace(path)
    with pytest.raises(SpecError, match="cannot read"):
        load_trace(tmp_path / "missing.csv")


def test_sweep_groups_by_trace(tmp_path, reference):
    """A swept compute.trace is structural: each value evaluates its own DAG."""
    rows, doc = reference
    slow = write_csv(tmp_path / "slow.csv", [(n, 2 * f, 2 * b) for n, f, b in rows])
    same = write_csv(tmp_path / "same.csv", rows)
    cube = sweep.run({**BASE, "compute": {"trace": [str(same), str(slow)]}})
    times = cube["iteration_time"].values
    assert times[0] == pytest.approx(doc["iteration_time"], rel=1e-5)
    assert times[1] > times[0]
    slow_doc = explain(load_spec({**BASE, "compute": {"trace": str(slow)}}))
    assert times[1] == pytest.approx(slow_doc["iteration_time"], rel=1e-5)
