"""Predictions for the rows of a CSV from a fitted scenario (`ssgd-sweep predict`).

FIT.toml (what `calibrate` writes, or any scenario of fixed values) is the
base; each QUERY row sets keys on top of it, as in `calibrate`'s data. For
every target the query names (a `throughput`, `iteration_time` or
`allreduce_time` column, empty or not) a `predicted_<target>` column is
added; a query naming none gets `predicted_allreduce_time` where rows give
`message_bytes` and `predicted_throughput` and `predicted_iteration_time`
where they give a model. A row that cannot have a prediction (an
all-reduce without `message_bytes`, a throughput without a model) gets an
empty cell.

When FIT.toml comes from `calibrate` (its [fit] table holds the covariance
of the fitted keys and the residual scale), every prediction also gets
`predicted_<target>_low` and `predicted_<target>_high`: a 90 % prediction
interval (`LEVEL`), from the parameters' uncertainty and the scatter the
fit left unexplained (`sweep.fit.uncertainty.predict_rows`). `validate` measures
how often held-out measurements fall inside it.
"""
from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import warnings

import numpy as np

from sweep.errors import SpecError
from sweep.fit.data import MESSAGE, TARGETS, load_rows, read_base
from sweep.fit.model import FITTABLE
from sweep.fit.uncertainty import predict_rows
from sweep.atomic import write_text
from sweep.scenario.spec import read_scenario_file

LEVEL = 0.9  # nominal coverage of the prediction intervals


def fit_table(fit_path) -> dict | None:
    """The [fit] table of FIT.toml when it can give intervals, else None;
    SpecError where the fields the intervals read are malformed (a hand-edited
    or truncated file), naming the field."""
    table = read_scenario_file(fit_path).get("fit")
    if not isinstance(table, dict) or "covariance" not in table or "residual_scale" not in table:
        return None
    fitted = table.get("fitted")
    if not isinstance(fitted, list) or not all(isinstance(k, str) for k in fitted):
        raise SpecError("fit.fitted", fitted, f"in {fit_path}: must be a list of the fitted keys' names")
    unknown = [k for k in fitted if k not in FITTABLE]
    if unknown:
        raise SpecError("fit.fitted", unknown[0], f"in {fit_path}: not a key a fit sets")
    covariance = table["covariance"]
    k = len(fitted)
    if (not isinstance(covariance, list) or len(covariance) != k
            or not all(isinstance(r, list) and len(r) == k and all(_is_real(x) for x in r) for r in covariance)):
        raise SpecError("fit.covariance", covariance, f"in {fit_path}: must be {k} rows of {k} numbers "
                                                      "(a row and a column per fitted key)")
    for name, optional in (("residual_scale", False), ("residual_quantile_90", True)):
        value = table.get(name)
        if (value is None and optional) or (_is_real(value) and math.isfinite(value) and value >= 0):
            continue
        raise SpecError(f"fit.{name}", value, f"in {fit_path}: must be a finite number >= 0")
    dof = table.get("degrees_of_freedom", 1)
    if isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
        raise SpecError("fit.degrees_of_freedom", dof, f"in {fit_path}: must be a whole number >= 1")
    return table


def _is_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@contextlib.contextmanager
def _named(argument: str, key: str):
    """A file reader's SpecError about `key` (its generic name for the file)
    raised under `argument`, the name `predict FIT QUERY` gives the file."""
    try:
        yield
    except SpecError as err:
        if err.key != key:
            raise
        raise SpecError(argument, err.value, err.reason) from None


def predict(fit_path: str | os.PathLike, query_path: str | os.PathLike,
            fmt: str | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the output table: the query's cells plus predictions.
    `fmt`: the query's format (`measurements.FORMATS`; default: detected)."""
    with _named("fit", "scenario"):
        base = read_base(fit_path)
        uncertainty = fit_table(fit_path)
    with _named("query", "data"):
        header, rows, odd = load_rows(query_path, base, need_target=False, fmt=fmt)  # CSV, or benchmark output
    if odd:  # benchmark output: rows its reader leaves out (warm-up, spikes, unreadable) get no line
        warnings.warn(f"{len(odd)} row(s) of {query_path} left out as anomalous, not predicted: "
                      + "; ".join(f"line {a.line}: {a.reason}" for a in odd))
    targets = [t for t in TARGETS if t in header]
    if not targets:
        if MESSAGE in header:
            targets.append("allreduce_time")
        if "model" in header or "model" in base:
            targets += ["throughput", "iteration_time"]
    predictions = predict_rows(rows, targets, uncertainty, LEVEL) if targets else {}
    columns = [t for t in targets]
    if uncertainty is not None:
        columns = [c for t in targets for c in (t, f"{t}_low", f"{t}_high")]
    out_header = header + [f"predicted_{c}" for c in columns]
    out_rows = []
    for i, row in enumerate(rows):
        cells = [row.cells[c] for c in header]
        cells += ["" if np.isnan(predictions[c][i]) else repr(float(predictions[c][i])) for c in columns]
        out_rows.append(cells)
    return out_header, out_rows


def write_predictions(fit_path, query_path, output, fmt: str | None = None) -> int:
    """Write OUT.csv atomically; returns the number of rows."""
    header, rows = predict(fit_path, query_path, fmt)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_text(output, text.getvalue())
    return len(rows)
