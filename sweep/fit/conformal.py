"""The scatter of a prediction interval from held-out rows (`--interval-split`).

A fit's own residuals say how far its training rows lie from it; a row it
never saw, across a process count or a method it was not fitted on, lies
further (README "Validation against measurements": the OSU intervals from
in-sample residuals covered 40.5 % of held-out latencies). Split the
training rows as `validate --split` would (`sweep.fit.folds`), refit on each
fold's training part, and take the 90 % conformal quantile of
|log(predicted / measured)| over every fold's held-out rows: the k-th
smallest of n, k = ceil(0.9 (n + 1)) (the largest when k > n), which
covers a new row at least 90 % of the time when it is exchangeable with
those held-out ones (split conformal prediction: Vovk, Gammerman and Shafer,
"Algorithmic Learning in a Random World", 2005; Lei et al., "Distribution-
Free Predictive Inference for Regression", JASA 2018). `calibrate` and
`validate` then use the larger of it and the fit's in-sample quantile as
the interval's scatter term (`sweep.fit.uncertainty.predict_rows`).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from sweep.errors import SpecError
from sweep.fit import optimise
from sweep.fit.data import Row
from sweep.fit.folds import check_split, make_folds, with_fitted_values
from sweep.fit.optimise import FitOptions
from sweep.fit.uncertainty import predict_rows

LEVEL = 0.9


@dataclasses.dataclass(frozen=True)
class HeldOutQuantile:
    split: str
    value: float  # the conformal quantile of |log(predicted / measured)|
    folds: int
    observations: int  # held-out observations behind it


def conformal_quantile(errors: Sequence[float], level: float = LEVEL) -> float:
    """The k-th smallest of the n errors, k = ceil(level (n + 1)), capped at n."""
    ordered = np.sort(np.asarray(errors, np.float64))
    k = min(len(ordered), math.ceil(level * (len(ordered) + 1)))
    return float(ordered[k - 1])


def inner_folds(rows: list[Row], split: str, seed: int = 0):
    """`make_folds` with its defaults; a size split cuts at the median size
    of the rows (fit the smaller half, predict the larger), as the default
    1 MiB may lie above every training row."""
    cut = None
    if split == "size" and all(r.message_bytes is not None for r in rows):
        cut = float(np.median([r.message_bytes for r in rows]))
    return make_folds(rows, split, cut=cut, seed=seed)


def held_out_errors(rows: list[Row], train: Sequence[int], test: Sequence[int], fitted: list[str], base: dict,
                    options: FitOptions) -> list[float]:
    """|log(predicted / measured)| of every observation of the `test` rows
    after fitting `fitted` on the `train` rows."""
    result = optimise.fit([rows[i] for i in train], fitted, base, options)
    held, targets = with_fitted_values(rows, test, result)
    predicted = predict_rows(held, targets)
    errors = []
    for target in targets:
        for row, value in zip(held, predicted[target]):
            measured = row.targets.get(target)
            if measured is not None and np.isfinite(value) and value > 0:
                errors.append(abs(math.log(value / measured)))
    return errors


def interval_folds(rows: list[Row], split: str, seed: int = 0):
    """`inner_folds`, its errors naming `--interval-split`."""
    check_split(split, "--interval-split")
    try:
        return inner_folds(rows, split, seed)
    except SpecError as error:
        raise SpecError("--interval-split", split, error.reason) from None


def held_out_quantile(rows: list[Row], fitted: list[str], base: dict, options: FitOptions, split: str,
                      log=None) -> HeldOutQuantile:
    """Refit on each fold of `split` over `rows` and pool the held-out
    errors (module docstring). Raises SpecError (`--interval-split`) when
    the split names no split or key, or leaves no fold."""
    folds = interval_folds(rows, split, options.seed)
    errors: list[float] = []
    for j, fold in enumerate(folds):
        if log:
            log(f"interval scatter, fold {j + 1}/{len(folds)} ({fold.name}): fitting {len(fold.train)} rows")
        errors += held_out_errors(rows, fold.train, fold.test, fitted, base, options)
    return HeldOutQuantile(split, conformal_quantile(errors) if errors else math.nan, len(folds), len(errors))
