"""experiments/synthetic_fabrics.py: its rows are the truth's own predictions, as validate_ddl maps them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiment_modules import load_study

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data" / "ddl_benchmarks_10gbe.csv"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"measured data not available: {DATA} is absent")


@needs_data
def test_noise_free_rows_are_the_truth_as_validate_ddl_maps_the_file(tmp_path):
    """Read back as validate_ddl reads any file (its network label picks the
    mapping, MG-WFBP's planner table included), every synthetic row is the
    truth's prediction; single-GPU rows stay the measured ones; with scatter
    the log ratios have about the stated spread."""
    sf = load_study("synthetic_fabrics")
    vd = sf.vd
    records, single = vd.load(sf.synthesize("tcp", tmp_path / "clean.csv", scatter=0.0))
    assert {r["network"] for r in records} == {"100gbe-tcp"}
    assert single == vd.load(vd.DATA)[1]
    np.testing.assert_allclose([r["throughput"] for r in records], sf.truth_throughputs(records, single, "tcp"),
                               rtol=1e-5)
    # MG-WFBP planned with the fabric's (InfiniBand) table, not 10GbE's: the label matters
    mg = [r for r in records if r["method"] == "MG-WFBP" and r["gpus"] >= 8]
    mapping = sf.ddl_mapping
    assert all(mapping.scenario_keys(r, single)["mgwfbp.alpha"] == mapping.MGWFBP_PLANNER["ib"][r["gpus"]][0]
               for r in mg)
    clean = np.array([r["throughput"] for r in records])  # (the truth, as written: 6 digits)
    noisy, _ = vd.load(sf.synthesize("tcp", tmp_path / "noisy.csv", scatter=0.05, seed=1, truth=clean))
    spread = np.std(np.log([n["throughput"] / c["throughput"] for n, c in zip(noisy, records)]))
    assert 0.03 < spread < 0.07


@needs_data
def test_per_call_growth_slows_only_the_rows_beyond_two_nodes():
    """The variant outside the model class: rows on one or two nodes (every
    training row of scale-out) are the in-class truth's, per-tensor rows on
    four and eight nodes slower, the more so on eight."""
    sf = load_study("synthetic_fabrics")
    records, single = sf.vd.load(sf.vd.DATA)
    rows = [{**r, "network": "100gbe-tcp"} for r in records  # BERT-Base: 199 calls an iteration
            if r["dnn"] == "bert_base" and r["method"] in ("WFBP-A2A", "WFBP-PS")]
    plain = sf.truth_throughputs(rows, single, "tcp")
    grown = sf.truth_throughputs(rows, single, "tcp", growth=sf.GROWTH)
    nodes = np.array([r["nodes"] for r in rows])
    np.testing.assert_allclose(grown[nodes <= 2], plain[nodes <= 2], rtol=1e-6)
    slower = 1.0 - grown[nodes > 2] / plain[nodes > 2]
    assert (slower > 0.005).all(), slower
    # more nodes, more growth: each method's 8-node row loses more than its 4-node row
    for method in ("WFBP-A2A", "WFBP-PS"):
        loss = {r["nodes"]: 1.0 - g / p for r, g, p in zip(rows, grown, plain) if r["method"] == method}
        assert loss[8] > loss[4] > 0.0, (method, loss)
