"""The JAX kernels equal the NumPy reference on every strategy, algorithm and preset."""
import itertools

import pytest

import sweep
from kernels.codes import ALGORITHMS, FIFO_STRATEGIES as STRATEGIES
from sweep.report.explain import explain
from sweep.scenario.presets import PRESETS
from sweep.scenario.spec import load_spec

BASE = {"model": "googlenet", "batch_size": 16, "nodes": 3, "gpus_per_node": 2, "bucket_bytes": 4e6,
        "intra": {"alpha": 5e-6, "bandwidth": 2e10}, "inter": {"alpha": 3e-5, "bandwidth": 2e9}}


def test_every_strategy_and_algorithm():
    cube = sweep.run({**BASE, "strategy": list(STRATEGIES), "algorithm": list(ALGORITHMS),
                      "io": {"prefetch": [True, False]}})
    for strategy, algorithm, prefetch in itertools.product(STRATEGIES, ALGORITHMS, (True, False)):
        doc = explain(load_spec({**BASE, "strategy": strategy, "algorithm": algorithm,
                                 "io": {"prefetch": prefetch}}))
        got = float(cube["iteration_time"].sel(strategy=strategy, algorithm=algorithm, **{"io.prefetch": prefetch}))
        assert got == pytest.approx(doc["iteration_time"], rel=2e-5), (strategy, algorithm, prefetch)


# Presets that also set a DAG shape (ZeRO, ByteScheduler) are checked against
# their explicit keys in tests/test_zero_presets.py and tests/test_priority.py.
BARRIER_PRESETS = {name: p for name, p in PRESETS.items() if p.zero is None and p.update is None}


def test_every_preset():
    cube = sweep.run({**BASE, "preset": list(BARRIER_PRESETS)})
    for name, preset in BARRIER_PRESETS.items():
        doc = explain(load_spec({**BASE, "preset": name}))
        assert doc["configuration"]["strategy"] == preset.strategy
        assert doc["configuration"]["algorithm"] == preset.algorithm
        assert float(cube["iteration_time"].sel(preset=name)) == pytest.approx(doc["iteration_time"], rel=2e-5)


def test_explicit_key_overrides_preset():
    doc = explain(load_spec({**BASE, "preset": "horovod", "strategy": "bsp"}))
    assert doc["configuration"]["strategy"] == "bsp"
    assert doc["configuration"]["algorithm"] == "ring"  # still from the preset


def test_strategies_rank_as_expected_when_communication_matters():
    """Without latency, overlap can only help (wfbp <= bsp); with a large
    latency per message, wfbp pays it per layer and loses to bsp, and mgwfbp's
    merging recovers most of that."""
    cube = sweep.run({**BASE, "strategy": list(STRATEGIES), "inter": {"alpha": [0.0, 1e-3],
                                                                     "bandwidth": [1e8, 1e9, 1e10]}})
    t = cube["iteration_time"]
    free = t.sel({"inter.alpha": 0.0})
    assert (free.sel(strategy="wfbp") <= free.sel(strategy="bsp") * (1 + 1e-6)).all()
    assert (free.sel(strategy="mgwfbp") <= free.sel(strategy="bsp") * (1 + 1e-6)).all()
    slow = t.sel({"inter.alpha": 1e-3})
    assert (slow.sel(strategy="wfbp") > slow.sel(strategy="bsp")).all()
    assert (slow.sel(strategy="mgwfbp") < 0.9 * slow.sel(strategy="wfbp")).all()
