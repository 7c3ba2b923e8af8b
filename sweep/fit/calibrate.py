"""`ssgd-sweep calibrate` (DESIGN 4): fit scenario keys to measurements, write FIT.toml.

Reads the data (`sweep.fit.data`), fits (`sweep.fit.optimise`: the model
is the kernels themselves, `sweep.fit.model`), and writes the base scenario
with the fitted values and a [fit] table of errors, uncertainties and
bounds, atomically.
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

import tomli_w

from sweep.atomic import write_text
from sweep.errors import SpecError
from sweep.fit.data import load_rows, read_base
from sweep.fit.model import FITTABLE, expand_fit
from sweep.fit import optimise
from sweep.fit.conformal import held_out_quantile, interval_folds
from sweep.fit.optimise import FitResult, FitOptions

def fit_document(base: dict, result: FitResult, data: str) -> dict:
    """FIT.toml as a nested mapping: the base scenario, the fitted values in
    their tables, and a [fit] table of metadata."""
    values = {**result.line_rates, **base, **result.values}
    doc: dict = {}
    for key, value in values.items():
        _put(doc, key, value)
    fit_table = {
        "data": str(data),
        "fitted": list(result.keys),
        "rows": result.rows,
        "observations": result.observations,
        "targets": sorted(set(result.targets)),
        "median_relative_error": result.median_relative_error,
        "max_relative_error": result.max_relative_error,
        "loss": result.loss,
        "starts": result.starts,
        # Prediction intervals (sweep.fit.predict): log-space covariance of the
        # fitted coordinates (log of log-space keys, exponents as they are)
        # in the order of `fitted`, and the robust scale of the log residuals.
        "residual_scale": result.residual_scale,
        "residual_quantile_90": result.residual_quantile,
        "degrees_of_freedom": max(1, result.observations - len(result.keys)),
        "at_bound": {},
        # Keys whose value is their start's (base or catalog) more than the rows': optimise.PRIOR_SHARE.
        "not_identified": list(result.not_identified),
        "excluded": list(result.excluded),
        "uncertainty": {},
        "relative_uncertainty": {},
        "start": {},
    }
    held = result.held_out
    if held is not None and math.isfinite(held.value):
        # The interval's scatter: the larger of the fit's own and the held-out rows' (sweep.fit.conformal)
        fit_table["residual_quantile_90"] = max(result.residual_quantile, held.value)
        fit_table["residual_quantile_90_in_sample"] = result.residual_quantile
        fit_table["interval_split"] = {"split": held.split, "folds": held.folds,
                                       "observations": held.observations, "quantile_90": held.value}
    if result.covariance is not None:
        fit_table["covariance"] = [[float(x) for x in row] for row in result.covariance]
    for key, why in result.at_bound.items():
        _put(fit_table["at_bound"], key, why)
    for key in result.keys:
        _put(fit_table["uncertainty"], key, result.uncertainty[key])
        _put(fit_table["start"], key, result.start[key])
        if key in result.relative_uncertainty:
            _put(fit_table["relative_uncertainty"], key, result.relative_uncertainty[key])
    doc["fit"] = fit_table
    return doc


def _put(doc: dict, key: str, value) -> None:
    *tables, leaf = key.split(".")
    node = doc
    for table in tables:
        node = node.setdefault(table, {})
    node[leaf] = value


def calibrate(data: str | os.PathLike, fit_keys: Sequence[str], base_path=None, output=None,
              options: FitOptions = FitOptions(), label: str | None = None,
              fmt: str | None = None, log=None, interval_split: str | None = None) -> tuple[FitResult, dict]:
    """Read, fit, and (with `output`) write FIT.toml; returns (result, document).
    `label` describes the data in [fit] (default: its path); `log` gets a
    line at each stage of the fit. `interval_split` (a `validate --split`):
    the intervals' scatter also from rows held out of refits along it
    (`sweep.fit.conformal`). Benchmark output
    (nccl-tests, OSU) is read directly; its anomalous rows are left out and
    listed in the result and in [fit] `excluded`."""
    fitted = expand_fit(fit_keys)
    base = read_base(base_path)
    for key in fitted:
        if key in base and FITTABLE[key][1] == "log" and base[key] <= 0:
            raise SpecError(key, base[key], "a fitted key must start > 0")
    _, rows, odd = load_rows(data, {k: v for k, v in base.items()}, fmt=fmt)
    if interval_split is not None:
        interval_folds(rows, interval_split, options.seed)  # a split that cannot divide the rows fails first
    result = optimise.fit(rows, fitted, base, options, log)  # (the summary lists the rows left out)
    result = dataclasses.replace(result, excluded=tuple(f"line {a.line}: {a.reason}" for a in odd))
    if interval_split is not None:
        result = dataclasses.replace(result, held_out=held_out_quantile(rows, fitted, base, options,
                                                                         interval_split, log))
    doc = fit_document({k: v for k, v in base.items() if k not in fitted}, result, label or str(data))
    if output is not None:
        write_text(output, tomli_w.dumps(doc))
    return result, doc


def fit_summary(result: FitResult) -> str:
    """A few lines for people: errors, each fitted value with its spread and
    any bound it sits on, and the rows left out as anomalous."""
    lines = [f"fitted {len(result.keys)} key(s) to {result.observations} observation(s) "
             f"({result.rows} rows, best of {result.starts} starts)",
             f"relative error: median {100 * result.median_relative_error:.1f} %, "
             f"max {100 * result.max_relative_error:.1f} %"]
    for key in result.keys:
        rel = result.relative_uncertainty.get(key)
        spread = f"+- {100 * rel:.1f} %" if rel is not None else f"+- {result.uncertainty[key]:.3g}"
        bound = f"  (at {result.at_bound[key]})" if key in result.at_bound else ""
        weak = "  (not identified: its start's value more than the data's)" if key in result.not_identified else ""
        lines.append(f"  {key:<30} {result.values[key]:12.5g}  {spread}{bound}{weak}")
    held = result.held_out
    if held is not None:
        lines.append(f"interval scatter (90 % of |log error|): {result.residual_quantile:.3f} in sample, "
                     f"{held.value:.3f} on {held.observations} observation(s) held out of {held.folds} "
                     f"refit(s) by {held.split}; the intervals take the larger")
    if result.excluded:
        lines.append(f"left out of the fit as anomalous ({len(result.excluded)}):")
        lines += [f"  {line}" for line in result.excluded]
    return "\n".join(lines)
