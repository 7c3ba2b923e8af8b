"""Out-of-sample validation against naive baselines (`ssgd-sweep validate`).

    ssgd-sweep validate DATA.csv --fit KEY [--fit KEY ...] [--base SPEC.toml]
        --split gpus|method|rows|size|KEY [--folds K] [--cut X] [--reference METHOD_COLUMN]
        [--min-gpus N] [--format csv|nccl-tests|nccl-tests-csv|osu] [-o OUT.csv] [--table OUT.md]

DATA is a `calibrate` CSV (scenario-key columns, targets, `message_bytes`),
plus optionally a free-text `method` column naming each row's method. Each
fold fits the keys on its training rows exactly as `calibrate` does and
predicts its held-out rows as `predict` does (with the 90 % interval); the
errors are relative, |predicted / measured - 1|.

Splits (the held-out rows of each fold):
- `gpus`: scale-out. Fold i trains on rows with at most c workers (nodes x
  gpus_per_node) and predicts the rows with more, for the K largest cuts c
  that leave at least two trained counts (`--cut` names one).
- `method`: cross-method. One fit on the reference method's rows (`--reference`,
  else the method with the most rows), a fold per other method. A row's
  method is its `method` cell, else its values of `METHOD_KEYS`.
- `rows`: K-fold over rows (seeded shuffle, default K = 5).
- `size`: trains on messages up to `--cut` bytes (default 1 MiB) and
  predicts the larger ones.
- any scenario key (e.g. `nodes`): leave one value out, a fold per value.
`--min-gpus N` keeps only held-out rows with at least N workers.

The naive baseline of every held-out observation is the nearest training
observation of the same target: same method, then the fewest other differing
keys, then the nearest worker count and message size (in log). Its value is
scaled as a ruler would: throughput linearly with the workers (linear
scaling from the largest trained GPU count), all-reduce time linearly with
the message size (the nearest size's bandwidth), iteration time unchanged.
For `method` this is "same as the reference method"; for `gpus` "linear
from the largest trained GPU count"; for `size` "the nearest measured size".
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
from collections.abc import Sequence

import numpy as np
from scipy import stats

from sweep.fit import optimise
from sweep.errors import SpecError
from sweep.fit.calibrate import fit_document
from sweep.fit.conformal import held_out_quantile
from sweep.fit.data import Row, load_rows, read_base
from sweep.fit.folds import (METHOD_COLUMN, METHOD_KEYS, Fold, check_split, make_folds, method_of,
                             with_fitted_values, workers)
from sweep.fit.model import expand_fit
from sweep.fit.optimise import FitOptions
from sweep.fit.uncertainty import predict_rows

LEVEL = 0.9


@dataclasses.dataclass
class FoldResult:
    fold: Fold
    fit: object  # calibrate.FitResult
    records: list  # dicts, one per held-out observation


def _comparable(row: Row) -> dict:
    # The layout, and what follows from it (ps's busiest server), is the distance's, not a differing key
    skip = set(METHOD_KEYS) | {"nodes", "gpus_per_node", "ps.imbalance"}
    return {k: v for k, v in row.point.items() if k not in skip}


def naive(train: list[Row], row: Row, target: str) -> float:
    """The ruler's prediction of `row`'s `target` from the nearest training
    observation (module docstring); NaN when no training row has the target."""
    best, best_score = None, None
    mine, method = _comparable(row), method_of(row)
    for other in train:
        if other.targets.get(target) is None:
            continue
        theirs = _comparable(other)
        differ = sum(mine.get(k) != theirs.get(k) for k in set(mine) | set(theirs))
        distance = abs(math.log(workers(other) / workers(row)))
        if row.message_bytes and other.message_bytes:
            distance += abs(math.log(other.message_bytes / row.message_bytes))
        score = (method_of(other) != method, differ, distance)
        if best_score is None or score < best_score:
            best, best_score = other, score
    if best is None:
        return math.nan
    value = best.targets[target]
    if target == "throughput":
        return value * workers(row) / workers(best)
    if target == "allreduce_time" and row.message_bytes and best.message_bytes:
        return value * row.message_bytes / best.message_bytes
    return value


def run_fold(rows: list[Row], fold: Fold, fitted: list[str], base: dict, options: FitOptions,
             label: str = "", ruler: Sequence[int] | None = None, fit=None, log=None) -> FoldResult:
    """Fit `fitted` on the fold's training rows, predict its held-out rows
    and their naive baseline (`naive`, from the rows `ruler` names, else the
    same training rows): one FoldResult. `fit`: the caller's fit of those
    training rows (`optimise.fit`), which is then used, not redone. `log`:
    the fit's progress, a line per stage."""
    train = [rows[i] for i in fold.train]
    ruler_rows = train if ruler is None else [rows[i] for i in ruler]
    result = optimise.fit(train, fitted, base, options, log) if fit is None else fit
    doc = fit_document({k: v for k, v in base.items() if k not in fitted}, result, label)
    test, targets = with_fitted_values(rows, fold.test, result)
    predicted = predict_rows(test, targets, doc["fit"], LEVEL)
    records = []
    for j, (i, row) in enumerate(zip(fold.test, test)):
        for target in targets:
            measured = row.targets.get(target)
            if measured is None:
                continue
            value = predicted[target][j]
            baseline = naive(ruler_rows, row, target)
            records.append({
                "fold": fold.name, "line": row.line, "method": method_of(row), "workers": workers(row),
                "message_bytes": row.message_bytes, "target": target, "measured": measured,
                "predicted": value, "low": predicted[f"{target}_low"][j], "high": predicted[f"{target}_high"][j],
                "naive": baseline, "model_error": abs(value / measured - 1),
                "naive_error": abs(baseline / measured - 1),
                "inside": bool(predicted[f"{target}_low"][j] <= measured <= predicted[f"{target}_high"][j]),
            })
    return FoldResult(fold, result, records)


def validate(data: str | os.PathLike, fit_keys: Sequence[str], base_path=None, split: str = "rows",
             folds: int | None = None, cut: float | None = None, reference: str | None = None,
             min_gpus: int | None = None, options: FitOptions = FitOptions(), log=None,
             fmt: str | None = None, interval_split: str | None = None) -> list[FoldResult]:
    """Every fold's fit and held-out records. `interval_split`: each fold's
    intervals also take the scatter of its training rows held out of refits
    along that split (`sweep.fit.conformal`, as `calibrate
    --interval-split`); a fold whose training rows that split cannot divide
    keeps its in-sample scatter, and the log says so."""
    fitted = expand_fit(fit_keys)
    base = read_base(base_path)
    try:
        with open(data, newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError):
        header = []  # read_rows says what is wrong
    labels = (METHOD_COLUMN,) if METHOD_COLUMN in [h.strip() for h in header] else ()
    _, rows, odd = load_rows(data, dict(base), labels=labels, fmt=fmt)
    if log and odd:
        log("left out as anomalous: " + "; ".join(f"line {a.line}: {a.reason}" for a in odd))
    if interval_split is not None:
        check_split(interval_split, "--interval-split")
    out = []
    for fold in make_folds(rows, split, folds, cut, reference, min_gpus, options.seed):
        if log:
            log(f"{fold.name}: fitting {len(fold.train)} rows, predicting {len(fold.test)}")
        stage = (lambda message, name=fold.name: log(f"{name}: {message}")) if log else None
        fit = None
        if interval_split is not None:
            train = [rows[i] for i in fold.train]
            fit = optimise.fit(train, fitted, base, options, stage)
            try:
                held = held_out_quantile(train, fitted, base, options, interval_split, stage)
                fit = dataclasses.replace(fit, held_out=held)
                if stage:
                    stage(f"interval scatter {held.value:.3f} held out ({held.observations} observations, "
                          f"{held.folds} refits), {fit.residual_quantile:.3f} in sample: the larger is used")
            except SpecError as error:
                if stage:
                    stage(f"interval scatter in sample only: {error}")
        out.append(run_fold(rows, fold, fitted, base, options, f"{data}: {fold.name}", fit=fit, log=stage))
    return out


# ----------------------------------------------------------------------------- reports


def interval_score(measured, low, high, level: float = LEVEL) -> float:
    """Mean interval score of `level` prediction intervals in log space
    (Gneiting and Raftery 2007, eq. 43): the band's width plus 2 / (1 - level)
    times the distance by which a measurement falls outside it. Lower is
    better; it rewards narrow bands that still hold."""
    y, lo, hi = (np.log(np.asarray(x, np.float64)) for x in (measured, low, high))
    miss = np.maximum(lo - y, 0.0) + np.maximum(y - hi, 0.0)
    return float(np.mean(hi - lo + 2.0 / (1.0 - level) * miss))


def records_interval_score(records, level: float = LEVEL) -> float:
    """`interval_score` of the held-out records (`run_fold`'s dicts) that have
    a band; NaN when none has."""
    banded = [r for r in records if r["low"] is not None and np.isfinite(r["low"])]
    if not banded:
        return math.nan
    return interval_score(*zip(*[(r["measured"], r["low"], r["high"]) for r in banded]), level)


def coverage_range(inside, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a coverage from `inside` (one bool per
    held-out observation): the true coverage that these hits are consistent
    with. On 18 rows, 15 inside (83.3 %) is consistent with 90 % (range
    61-94 %) and 11 inside (61.1 %) is not (39-80 %)."""
    hits, n = int(np.sum(inside)), len(inside)
    if n == 0:
        return math.nan, math.nan
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def coverage_text(inside, confidence: float = 0.95) -> str:
    """`83.3 % (61-94)`: the held-out coverage and, in brackets, the
    `coverage_range` of the true coverage at `confidence`."""
    if len(inside) == 0:
        return "-"
    low, high = coverage_range(inside, confidence)
    return f"{100 * np.mean(inside):.1f} % ({100 * low:.0f}-{100 * high:.0f})"


def pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.1f} %"


def summary_rows(results: list[FoldResult]) -> list[list]:
    """Per fold and for all held-out observations together: rows, in-sample
    median and max, model and naive median and max, interval coverage and
    interval score (`interval_score`)."""
    out = []
    pooled = [r for f in results for r in f.records]
    for name, fit, records in [(f.fold.name, f.fit, f.records) for f in results] + [("all folds", None, pooled)]:
        if not records:
            continue
        m = np.array([r["model_error"] for r in records])
        n = np.array([r["naive_error"] for r in records])
        inside = [bool(r["inside"]) for r in records]
        score = records_interval_score(records)
        fits = [f.fit for f in results] if fit is None else [fit]
        ins_med = np.median([x.median_relative_error for x in fits])
        ins_max = max(x.max_relative_error for x in fits)
        out.append([name, len(records), pct(ins_med), pct(ins_max), pct(np.median(m)), pct(m.max()),
                    pct(np.nanmedian(n)), pct(np.nanmax(n)), coverage_text(inside),
                    "-" if not np.isfinite(score) else f"{score:.3f}"])
    return out


HEADER = ["fold", "held out", "in-sample median", "in-sample max", "model median", "model max",
          "naive median", "naive max", f"{int(100 * LEVEL)} % interval coverage (95 % range)", "interval score"]


RECORD_COLUMNS = ("fold", "line", "method", "workers", "message_bytes", "target", "measured", "predicted",
                  "low", "high", "naive", "model_error", "naive_error", "inside")


def records_csv(results: list[FoldResult]) -> str:
    """One CSV line per held-out observation of every fold (RECORD_COLUMNS):
    measured, predicted, interval and naive baseline."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(RECORD_COLUMNS)
    for f in results:
        for r in f.records:
            writer.writerow(["" if r[c] is None else (repr(float(r[c])) if isinstance(r[c], float) else r[c])
                             for c in RECORD_COLUMNS])
    return text.getvalue()
