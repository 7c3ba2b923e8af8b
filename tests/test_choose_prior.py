"""experiments/choose_prior.py: the prior strength (and tail weight) is the one its rule picks
from the per-split errors it wrote (a --quick run on two nccl-tests tables)."""
from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "nccl_tests").exists() or not (DATA / "osu_allreduce_latency.csv").exists(),
                                reason=f"measured data not available: {DATA} lacks nccl_tests/ or the OSU latencies")


@needs_data
@pytest.mark.parametrize("knob, fields, grid, suffix", [  # `--knob tail` runs prior's path with another field
    ("prior", ("prior",), [(0.05,), (0.5,)], ""),
    pytest.param("joint", ("prior", "tail"), [(0.5, 0.3), (1.0, 1.0)], "_joint", marks=pytest.mark.slow)])
def test_quick_run_chooses_the_lowest_geometric_mean(tmp_path, knob, fields, grid, suffix):
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "choose_prior.py"), "--quick", "--knob", knob,
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(tmp_path / f"scores{suffix}.csv", newline="") as handle:
        scores = list(csv.DictReader(handle))
    value = lambda row: tuple(float(row[f]) for f in fields)  # noqa: E731
    priors = sorted({value(r) for r in scores})
    splits = sorted({r["split"] for r in scores})
    assert priors == grid and len(splits) == 2 and len(scores) == 4
    assert all(0 < float(r["median"]) <= float(r["max"]) for r in scores)
    geo = {p: math.exp(sum(math.log(float(r["median"])) for r in scores if value(r) == p) / len(splits))
           for p in priors}
    chosen = min(priors, key=geo.get)
    table = (tmp_path / f"table{suffix}.md").read_text()
    assert f"chosen: {' / '.join(fields)} = {' / '.join(f'{v:g}' for v in chosen)}" in table
    assert f"{100 * geo[chosen]:.1f} %" in table
