"""`explain --json` for every DAG shape of DESIGN 2.5 and every strategy.

The edges it prints are exactly the edges evaluated (resource order
included): an independent longest path over them (tests/oracle.py) gives
back every start and finish. Its iteration time is the sweep's.
"""
import contextlib
import io
import json

import numpy as np
import pytest

from oracle import longest_path

BASE = {"model": "alexnet", "batch_size": 16, "nodes": 2, "gpus_per_node": 2, "iterations": 3,
        "intra": {"alpha": 8e-6, "bandwidth": 1.2e10}, "inter": {"alpha": 4e-5, "bandwidth": 1.1e9},
        "io": {"prefetch": False, "time_per_sample": 2e-4}}

SHAPES = {
    "barrier": {},
    "layerwise": {"update": "layerwise"},
    "pipelined": {"algorithm": "hierarchical", "hierarchical": {"pipelined": True}},
    "layerwise-pipelined": {"update": "layerwise", "algorithm": "hierarchical", "hierarchical": {"pipelined": True}},
    "zero1": {"zero": 1},
    "zero2": {"zero": 2},
    "zero3": {"zero": 3},
    "accumulation": {"accumulation": 3},
    "zero3-accumulation": {"zero": 3, "accumulation": 2},
}


def toml_of(table, prefix=""):
    """A flat TOML rendering of a two-level dict (enough for a spec)."""
    lines, tables = [], []
    for key, value in table.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    for key, value in tables:
        lines.append(f"[{key}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in value.items()]
    return "\n".join(lines) + "\n"


def explain_json(tmp_path, spec):
    from sweep.cli import main

    path = tmp_path / "spec.toml"
    path.write_text(toml_of(spec))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["explain", str(path), "--json"]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("strategy", ["bsp", "wfbp", "mgwfbp", "fusion"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_edges_reproduce_every_start_and_finish(tmp_path, shape, strategy):
    doc = explain_json(tmp_path, {**BASE, **SHAPES[shape], "strategy": strategy})
    tasks = doc["tasks"]
    assert [t["id"] for t in tasks] == list(range(len(tasks)))
    duration = np.array([t["duration"] for t in tasks])
    finish = longest_path(len(tasks), [(a, b, None) for a, b in doc["edges"]], duration)
    np.testing.assert_allclose([t["finish"] for t in tasks], finish, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose([t["start"] for t in tasks], finish - duration, rtol=1e-9, atol=1e-12)
    # The critical path is a chain of evaluated edges, tight end to end.
    edges = {tuple(e) for e in doc["edges"]}
    path = doc["critical_path"]
    assert tasks[path[0]]["start"] == 0.0
    assert tasks[path[-1]]["finish"] == pytest.approx(max(finish), rel=1e-12)
    for a, b in zip(path, path[1:]):
        assert (a, b) in edges
        assert tasks[a]["finish"] == pytest.approx(tasks[b]["start"], rel=1e-12, abs=1e-15)
    assert doc["configuration"]["zero"] == SHAPES[shape].get("zero", 0)
    assert doc["lowering"]["mode"] in ("contracted", "unrolled")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_explain_and_sweep_agree_on_every_shape(tmp_path, shape):
    import sweep

    spec = {**BASE, **SHAPES[shape]}
    cube = sweep.run({**spec, "strategy": ["wfbp", "mgwfbp"]})
    for strategy in ("wfbp", "mgwfbp"):
        doc = explain_json(tmp_path, {**spec, "strategy": strategy})
        got = cube.sel(strategy=strategy)
        assert float(got["iteration_time"]) == pytest.approx(doc["iteration_time"], rel=2e-5)
        assert float(got["communication_time"]) == pytest.approx(doc["breakdown"]["communication_time"], rel=2e-5)
    assert cube.attrs["lowering"]


def test_lowering_is_reported(tmp_path):
    """Barrier DAGs contract to the stream program; layerwise and ZeRO-3 unroll, with the reason."""
    contracted = explain_json(tmp_path, {**BASE, "strategy": "wfbp"})["lowering"]
    assert contracted["mode"] == "contracted"
    for extra in (SHAPES["layerwise"], SHAPES["zero3"]):
        lowering = explain_json(tmp_path, {**BASE, **extra, "strategy": "wfbp"})["lowering"]
        assert lowering["mode"] == "unrolled"
        assert lowering["reason"]
