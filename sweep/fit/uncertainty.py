"""Uncertainty of a fit, and predictions with intervals.

Gauss-Newton: the covariance of the fitted coordinates from the log
residuals at the optimum and the priors, infinite for keys the data cannot
pin down. `predict_rows` turns it, with the fit's 90 % quantile of its
log residuals, into a stated prediction interval per row.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from sweep.fit.data import Row
from sweep.fit.model import FITTABLE, Model, build_groups

def jacobian(f, theta) -> np.ndarray:
    """d f / d theta [N, k] of a jit-able `f`: [k] -> [N] (`value_and_jacobian`)."""
    return value_and_jacobian(f, theta)[1]


def value_and_jacobian(f, theta) -> tuple[np.ndarray, np.ndarray]:
    """(f(theta) [N], d f / d theta [N, k]) of a jit-able `f`: [k] -> [N], one
    forward-mode column at a time: one jitted `jvp`, called k times, whose
    primal output is f(theta), so that a caller needs no second program for
    the value. jax.jacfwd batches the k columns, and a `lax.map` of the jvp
    nests the model's loops in another: on the fits' DAG programs XLA
    compiles these in up to 51 s and 17 s, against 9.5 s for the plain jvp
    (and 5 s for the whole Adam fit of the same rows;
    experiments/BENCHMARKS.md, 2026-12-07), for the same values."""
    theta = jnp.asarray(theta)
    column = jax.jit(lambda t, v: jax.jvp(f, (t,), (v,)))
    basis = jnp.eye(theta.shape[0], dtype=theta.dtype)
    pairs = [column(theta, v) for v in basis]
    value = np.asarray(pairs[0][0] if pairs else jax.jit(f)(theta))
    columns = [np.asarray(tangent) for _, tangent in pairs]
    return value, np.stack(columns, axis=1) if columns else np.zeros((value.shape[0], 0))


def posterior_covariance(jac: np.ndarray, residual: np.ndarray, prior_precision: np.ndarray,
                         fixed: list[int]) -> np.ndarray:
    """Covariance of the fitted coordinates (fit space) from the log residuals
    and the priors: (J^T J / s^2 + diag(prior_precision))^-1, s^2 =
    |r|^2 / (N - k); `fixed` coordinates (hard switches) are left out (0)."""
    count, k = jac.shape
    s2 = max(float(residual @ residual) / max(1, count - k), 1e-12)
    free = np.array([i for i in range(k) if i not in fixed], int)
    out = np.zeros((k, k))
    if free.size:
        h = jac[:, free].T @ jac[:, free] / s2 + np.diag(prior_precision[free])
        w, v = np.linalg.eigh(h)
        w = np.maximum(w, max(float(w.max(initial=0.0)), 1e-300) * 1e-14)
        out[np.ix_(free, free)] = (v / w) @ v.T
    return out


def gauss_newton_sigma(jac: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """1-sigma of each fitted coordinate from s^2 (J^T J)^-1, s^2 = |r|^2 / (N - k).

    A coordinate the data cannot pin down (a direction of J^T J with no
    curvature, e.g. a switch between two data points, or more keys than the
    rows can tell apart) gets an infinite uncertainty rather than pinv's 0."""
    count, k = jac.shape
    s2 = float(residual @ residual) / max(1, count - k)
    w, v = np.linalg.eigh(jac.T @ jac)
    flat = w <= max(float(w.max(initial=0.0)), 1e-300) * 1e-12
    variance = s2 * (v[:, ~flat] ** 2 / w[~flat]).sum(axis=1)
    unidentified = (np.abs(v[:, flat]) > 1e-6).any(axis=1) if flat.any() else np.zeros(k, bool)
    return np.where(unidentified, np.inf, np.sqrt(variance))


# How the unexplained scatter enters prediction intervals: "quantile" (the
# fit's own 90 % quantile of |log residual|, heavy tails kept) or "normal" (t
# quantile x the robust residual scale). Held out on the 10GbE tasks the
# quantile's 90 % intervals covered 100, 90.7, 66.7 and 94.4 % of the rows,
# the normal ones 81.0, 100, 61.1 and 77.8 %, with a better interval score
# in three tasks of four (README "Training throughput on 10GbE").
INTERVAL = "quantile"


def predict_rows(rows: list[Row], targets: Sequence[str], uncertainty: dict | None = None,
                 level: float = 0.9) -> dict[str, np.ndarray]:
    """Per target, the prediction of every row (NaN where the row cannot have one).

    With `uncertainty` (the [fit] table of a FIT.toml: `fitted`, `covariance`,
    `residual_scale`, `degrees_of_freedom`) also `<target>_low` and
    `<target>_high`: a `level` prediction interval in log space,
        log(pred) +- sqrt(q^2 + z^2 g C g^T),
    q the fit's 90 % quantile of |log residual| (what the model does not
    explain, heavy tails included; `FitResult.residual_quantile`),
    z = t_{dof}((1 + level) / 2), g the gradient of log(pred) in the fitted
    coordinates, C their covariance (parameter uncertainty). At another
    level, or from a FIT.toml without the quantile, z * sqrt(g C g^T + s^2),
    s the fit's robust scale of log residuals (`FitResult.residual_scale`);
    `INTERVAL`. Rows that set a fitted key themselves get the parameter part
    without that key."""
    out = {t: np.full(len(rows), np.nan) for t in targets}
    asked = []
    for row in rows:
        wanted = {}
        for t in targets:
            if t == "allreduce_time" and row.message_bytes is not None:
                wanted[t] = None
            elif t != "allreduce_time" and "model" in row.point and "batch_size" in row.point:
                wanted[t] = None
        asked.append(dataclasses.replace(row, targets=wanted))
    fitted, covariance = [], np.zeros((0, 0))
    if uncertainty is not None and uncertainty.get("covariance") is not None:
        names = list(uncertainty["fitted"])
        keep = [j for j, k in enumerate(names) if k in FITTABLE and all(k in r.point for r in rows)
                and not any(k in r.given for r in rows)]
        fitted = [names[j] for j in keep]
        covariance = np.asarray(uncertainty["covariance"], np.float64)[np.ix_(keep, keep)]
    with jax.enable_x64(True):
        groups, observations = build_groups(asked, fitted, predict=True)
        model = Model(groups, [FITTABLE[k][1] for k in fitted], len(observations))
        theta = np.array([math.log(rows[0].point[k]) if FITTABLE[k][1] == "log" else rows[0].point[k]
                          for k in fitted], np.float64)
        if uncertainty is None:
            pred = np.asarray(jax.jit(model.predict)(jnp.asarray(theta)))
        else:  # the value comes with the gradient from one program: d log(pred) = d pred / pred
            pred, dpred = value_and_jacobian(model.predict, theta)
            with np.errstate(all="ignore"):
                grad = dpred / pred[:, None]
            parameters = np.maximum(np.einsum("ij,jk,ik->i", grad, covariance, grad), 0.0)
            z = stats.t.ppf(0.5 + level / 2, int(uncertainty.get("degrees_of_freedom", 1)))
            quantile = uncertainty.get("residual_quantile_90")
            if INTERVAL == "quantile" and quantile is not None and abs(level - 0.9) < 1e-12:
                # the fit's own 90 % quantile of |log error| (heavy tails stay heavy)
                spread = np.exp(np.sqrt(float(quantile) ** 2 + z ** 2 * parameters))
            else:
                spread = np.exp(z * np.sqrt(parameters + float(uncertainty["residual_scale"]) ** 2))
            for t in targets:
                out[f"{t}_low"], out[f"{t}_high"] = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    position = {id(row): i for i, row in enumerate(asked)}  # rows keep their data line for error messages
    for j, ((row, target), value) in enumerate(zip(observations, pred)):
        i = position[id(row)]
        out[target][i] = value
        if uncertainty is not None:
            out[f"{target}_low"][i] = value / spread[j]
            out[f"{target}_high"][i] = value * spread[j]
    return out
