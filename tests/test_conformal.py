"""`--interval-split` (sweep.fit.conformal): the intervals' scatter from rows
held out of refits, against a reference computed by hand from the fitted
values and the ring's closed form."""
from __future__ import annotations

import csv
import dataclasses
import math
import tomllib

import numpy as np
import pytest

from sweep.fit.calibrate import calibrate
from sweep.fit.conformal import conformal_quantile
from sweep.fit.optimise import FitOptions
from sweep.fit.data import load_rows, read_base
from sweep.fit.validate import records_interval_score, run_fold, validate

FAST = FitOptions(starts=2, steps=200, polish=100, prior=0.0)
KEYS = ["inter.alpha", "inter.bandwidth"]
HEADER = ["nodes", "gpus_per_node", "message_bytes", "allreduce_time"]
NODES, SIZES = (2, 4, 8), (1e3, 3e4, 1e6, 3e7)


def ring(p, m, alpha, bw):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * m / bw


def lacking(p, m):
    """A ring whose bandwidth falls as the processes grow (p^-0.15) and whose
    latency carries 3 % scatter: structure a two-key fit cannot follow across
    process counts."""
    wobble = 1 + 0.03 * math.sin(7 * p + 3 * math.log(m))
    return ring(p, m, 2e-5, 1e9 * p ** -0.15) * wobble


def write(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def lacking_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformal")
    rows = [[p, 1, m, lacking(p, m)] for p in NODES for m in SIZES]
    return folder, write(folder / "all.csv", rows), rows


def test_conformal_quantile_is_the_kth_smallest():
    errors = np.arange(1, 21) / 100.0  # 0.01 .. 0.20
    assert conformal_quantile(errors) == pytest.approx(0.19)  # k = ceil(0.9 x 21) = 19
    assert conformal_quantile(errors[:10]) == pytest.approx(0.10)  # k = ceil(9.9) = 10: the largest
    assert conformal_quantile([0.3, 0.1]) == pytest.approx(0.3)  # k = 3 > n: capped at the largest
    assert conformal_quantile(errors, level=0.5) == pytest.approx(0.11)  # k = ceil(10.5) = 11


def test_calibrate_takes_the_held_out_scatter_by_hand(lacking_data, cli):
    folder, data, rows = lacking_data
    out = folder / "fit.toml"
    status, _, err = cli("calibrate", data, "--fit", KEYS[0], "--fit", KEYS[1], "--interval-split", "nodes",
                         "-o", out, "--starts", 2, "--steps", 200, "--polish", 100, "--prior", 0)
    assert status == 0, err
    assert "held out of 3 refit(s) by nodes" in err
    fit = tomllib.loads(out.read_text())["fit"]
    # by hand: leave each process count out, calibrate on the rest, price the
    # held-out rows with the ring's closed form at the fitted values
    errors = []
    for p in NODES:
        train = write(folder / f"without_{p}.csv", [r for r in rows if r[0] != p])
        result, _ = calibrate(train, KEYS, options=FAST)
        alpha, bw = result.values["inter.alpha"], result.values["inter.bandwidth"]
        errors += [abs(math.log(ring(p, m, alpha, bw) / t)) for q, _, m, t in rows if q == p]
    want = sorted(errors)[math.ceil(0.9 * (len(errors) + 1)) - 1]
    held = fit["interval_split"]
    assert held["split"] == "nodes" and held["folds"] == 3 and held["observations"] == len(rows)
    assert held["quantile_90"] == pytest.approx(want, rel=1e-3)
    # what a process count the fit never saw costs is more than its own scatter, and the band takes the larger
    assert held["quantile_90"] > 1.4 * fit["residual_quantile_90_in_sample"]  # 0.189 against 0.128
    assert fit["residual_quantile_90"] == max(held["quantile_90"], fit["residual_quantile_90_in_sample"])


def test_validate_bands_widen_to_what_held_out_rows_miss(lacking_data):
    _, data, _ = lacking_data
    lines = []
    nested = validate(data, KEYS, split="nodes", options=FAST, interval_split="nodes", log=lines.append)
    # each fold says which scatter it took, after a line per refit
    assert "leave out nodes = 8: interval scatter, fold 2/2 (leave out nodes = 4): fitting 4 rows" in lines
    took = [line for line in lines if "the larger is used" in line]
    assert len(took) == 3 and all("held out (8 observations, 2 refits)" in line for line in took)
    # the same fits without the held-out scatter: the plain validate's bands
    _, rows, _ = load_rows(data, read_base(None))
    plain = [run_fold(rows, f.fold, KEYS, read_base(None), FAST, fit=dataclasses.replace(f.fit, held_out=None))
             for f in nested]
    for a, b in zip(plain, nested):
        assert b.fit.held_out.folds == 2  # two process counts left: each predicted from the other
        assert b.fit.held_out.value > b.fit.residual_quantile
        for r, s in zip(a.records, b.records):
            assert s["high"] / s["predicted"] >= r["high"] / r["predicted"] * (1 - 1e-12)

    def inside(results):
        return np.mean([r["inside"] for f in results for r in f.records])

    def score(results):
        return records_interval_score([r for f in results for r in f.records])

    # 8 -> 9 of the 12 held-out latencies inside, and a better interval score
    assert inside(nested) > inside(plain)
    assert score(nested) < score(plain)


def test_bad_interval_split_exits_2_with_one_line(lacking_data, cli, tmp_path):
    _, data, _ = lacking_data
    status, _, err = cli("calibrate", data, "--fit", "inter.alpha", "--interval-split", "colour",
                         "-o", tmp_path / "f.toml")
    assert status == 2 and "--interval-split = 'colour'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "f.toml").exists()
    # one method only: a method split leaves no fold, before any fit runs
    status, _, err = cli("calibrate", data, "--fit", "inter.alpha", "--interval-split", "method",
                         "-o", tmp_path / "f.toml")
    assert status == 2 and "--interval-split = 'method'" in err and "no fold" in err
    status, _, err = cli("validate", data, "--fit", "inter.alpha", "--split", "nodes", "--interval-split", "colour")
    assert status == 2 and "--interval-split = 'colour'" in err


def test_validate_keeps_the_in_sample_scatter_where_the_split_cannot_divide(lacking_data, cli):
    _, data, _ = lacking_data
    # one method: the training rows cannot be split by method, and the fold keeps its own scatter
    status, _, err = cli("validate", data, "--fit", KEYS[0], "--fit", KEYS[1], "--split", "size", "--cut", 1e5,
                         "--interval-split", "method", "--starts", 1, "--steps", 100, "--polish", 50)
    assert status == 0, err
    assert "interval scatter in sample only: --interval-split = 'method'" in err
