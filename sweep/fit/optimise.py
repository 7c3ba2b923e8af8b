"""The bounded fit: optax's Adam from several starts, then switches snapped.

The loss is

    mean(log(pred / measured)^2) + tail * mean(|pred / measured - 1|^32)^(1/16)

the mean squared log error plus a smooth stand-in for the largest relative
error (weight `tail`), so that no observation is sacrificed to the bulk,
plus Gaussian priors around the base or catalog values. Adam minimises it
from several starts at once (the catalog or base values, jittered; a grid
of positions for protocol and chunk switches), projected onto the physical
bounds (`fit_bounds`) at every step. While fitting, maxima are smooth
(`kernels.smooth`, temperature a fraction of each row's measured iteration
time) and protocol switches are sigmoids in log message size, both annealed
towards the hard versions that sweeps use; the fit is scored with the hard
ones. A hard switch only matters through which side of it each message
falls: it is moved to the log-middle of the interval that leaves every
prediction unchanged, and half that interval is its (relative) uncertainty.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import time
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
import optax

from kernels.codes import ALGORITHMS
from kernels.collectives import BANDWIDTHS
from sweep.errors import SpecError
from sweep.fit.data import Row
from sweep.fit.options import FitOptions
from sweep.fit.model import FITTABLE, LINK_TABLES, SWITCHES, Group, Model, build_groups, loss_terms
from sweep.fit.uncertainty import gauss_newton_sigma, jacobian, posterior_covariance

if TYPE_CHECKING:  # conformal refits through this module
    from sweep.fit.conformal import HeldOutQuantile

@dataclasses.dataclass(frozen=True)
class FitResult:
    keys: tuple[str, ...]
    values: dict  # key -> fitted value
    start: dict  # key -> starting value of the chosen start
    uncertainty: dict  # key -> 1-sigma, in the key's units
    relative_uncertainty: dict  # key -> 1-sigma relative (log-space keys)
    median_relative_error: float
    max_relative_error: float
    loss: float
    observations: int
    rows: int
    starts: int
    predicted: np.ndarray  # [observations] with the hard model
    measured: np.ndarray
    targets: tuple[str, ...]  # per observation
    covariance: np.ndarray | None = None  # [k, k] of the fit-space coordinates (switches: 0)
    residual_scale: float = 0.0  # s: robust scale of the log residuals (1.4826 MAD x sqrt(N / (N - k)))
    residual_quantile: float = 0.0  # 90 % quantile of |log residual|, x sqrt(N / (N - k))
    at_bound: dict = dataclasses.field(default_factory=dict)  # key -> which bound, and why
    not_identified: tuple = ()  # keys the rows pin down less than their prior does, or not at all
    line_rates: dict = dataclasses.field(default_factory=dict)  # `{table}.line_rate` the fit was bounded by
    excluded: tuple = ()  # anomalous rows left out of the fit, one line each
    held_out: HeldOutQuantile | None = None  # the scatter of rows held out of refits (--interval-split)



def wire_slack(groups: list[Group]) -> float:
    """How much faster than the line rate the inter link's `bandwidth` may be
    on every row without any row's all-reduce beating the wire: the smallest,
    over multi-node rows, of the flat algorithm's bytes per process per byte
    of M (2(P-1)/P for ring and rhd, 2 ceil(log2 P) for tree) over the wire's
    2(n-1)/n, or ps's 2 max(1, n/S) over max(1, n/S). 1 without multi-node
    rows, and for hierarchical (its inter phase is bounded in the kernels).
    With one process per node this is 1: the line rate itself."""
    ratios = []
    for g in groups:
        n, p = g.params["nodes"], g.params["workers"]
        algorithm = g.params["algorithm"]
        wire = np.where(n > 1, 2 * (n - 1) / np.maximum(n, 1), 1.0)
        flat = np.where(algorithm == ALGORITHMS.index("tree"), 2 * np.ceil(np.log2(p)), 2 * (p - 1) / p)
        ratio = np.where(algorithm == ALGORITHMS.index("ps"), 2.0,
                         np.where(algorithm == ALGORITHMS.index("hierarchical"), 1.0, flat / wire))
        ratios += list(np.where(n > 1, np.maximum(ratio, 1.0), np.inf))
    finite = [r for r in ratios if np.isfinite(r)]
    return float(min(finite)) if finite else 1.0


def fit_bounds(fitted: list[str], groups: list[Group]) -> tuple[np.ndarray, np.ndarray, dict]:
    """(lower, upper) of each fitted key in fit space, and why each finite one
    is there. A link's bandwidths stay where no row's all-reduce beats the
    wire at the link's line rate (the lowest over the rows: the keys are
    shared): the intra link's at its line rate, the inter link's at its line
    rate times `wire_slack` (a flat ring over P processes on n nodes sends
    2(P-1)/P of M per process but only 2(n-1)/n of M per node must cross the
    NIC); `bandwidth_exponent` >= 0, so that bandwidth never grows with the
    number of processes."""
    lower, upper, why = np.full(len(fitted), -np.inf), np.full(len(fitted), np.inf), {}
    slack = wire_slack(groups)
    for i, key in enumerate(fitted):
        table, _, field = key.partition(".")
        if table in LINK_TABLES and field in BANDWIDTHS:
            rate = lowest_line_rate(groups, table)
            factor = slack if table == "inter" else 1.0
            upper[i] = math.log(rate * factor)
            why[key] = ("upper", f"line rate {rate:.4g} bytes/s" + (f" x {factor:.3g} (wire slack of the rows' "
                                                                    "algorithms)" if factor != 1.0 else ""))
        elif key == "ps.bandwidth":  # push and pull use the NIC's two directions: 2 M per M/line rate
            rate = lowest_line_rate(groups, "inter")
            upper[i] = math.log(2.0 * rate)
            why[key] = ("upper", f"twice the inter line rate {rate:.4g} bytes/s (push and pull, both directions)")
        elif table in LINK_TABLES and field == "bandwidth_exponent":
            lower[i] = 0.0
            why[key] = ("lower", "bandwidth may not grow with processes")
    return lower, upper, why


# A fitted key is "not identified" (`FitResult.not_identified`, FIT.toml's
# [fit] not_identified) when its posterior keeps at least this share of its
# prior's variance: the rows carry less of its precision than the prior does.
PRIOR_SHARE = 0.5

# How far inside its finite bounds every start sits (fit space: ln units for
# log keys); `at_bound` reports keys within 1e-6 of a bound.
START_MARGIN = 1e-7

# Starting values of fittable keys whose unset value (0) cannot start a log-space fit:
# a number, or the parameter whose value they take when unset.
# A least task time starts at half a millisecond, within the range of light layers' times, where
# it shapes some tasks and so has a gradient (far below every task it would have none).
UNSET_START = {"intra_overhead": 1e-5, "inter_overhead": 1e-5, "ps_bandwidth": "inter_bandwidth",
               "task_floor": 5e-4}


def starting_values(fitted: list[str], groups: list[Group], options: FitOptions) -> np.ndarray:
    """[starts, k] starting points in fit space (log or linear).

    The first start is the base scenario's value of each key, else its
    catalog or derived value (exponents 0); the others jitter it (x/÷ up to
    3 in log space, +-0.3 in linear space). Protocol and chunk switches, unset
    by default, start spread over the message sizes in the data."""
    rng = np.random.default_rng(options.seed)
    first = groups[0]  # rows carry the base scenario, so its values are here
    def unset_start(name):
        start = UNSET_START.get(name, 0.0)
        return first.params[start][0] if isinstance(start, str) else start

    center = np.array([first.params[FITTABLE[k][0]][0] or unset_start(FITTABLE[k][0]) for k in fitted],
                      np.float64)
    space = np.array([FITTABLE[k][1] for k in fitted])
    switches = [i for i, k in enumerate(fitted) if FITTABLE[k][0] in SWITCHES and not np.isfinite(center[i])]
    center[switches] = 1.0
    bad = (space == "log") & (center <= 0)
    if bad.any():
        key = fitted[int(np.argmax(bad))]
        raise SpecError(key, float(center[bad][0]), "a fitted key must start > 0: give a start in --base")
    theta0 = np.where(space == "log", np.log(np.where(space == "log", center, 1.0)), center)
    starts = np.repeat(theta0[None], options.starts, axis=0)
    jitter = rng.uniform(-1.0, 1.0, starts.shape) * np.where(space == "log", math.log(3.0), 0.3)
    jitter[0] = 0.0
    messages = np.concatenate([g.message[g.message > 0] for g in groups if g.dag is None] or [np.zeros(0)])
    low, high = (messages.min(), messages.max()) if messages.size else (1e4, 1e9)
    if switches:
        per_axis = max(2, math.ceil(options.starts ** (1.0 / len(switches))))
        grid = np.geomspace(low, high, per_axis + 2)[1:-1]
        jumps = jump_candidates(groups)
        axes = []
        for i in switches:
            by_jump = jumps["chunk" if "chunk" in fitted[i] else "protocol"][:3]
            even = grid / 4.0 if "chunk" in fitted[i] else grid  # a chunk is a share of the message
            axes.append(list(by_jump) + [v for v in even if all(abs(math.log(v / c)) > 0.5 for c in by_jump)])
        combos = _ordered_product(axes)[:options.starts]
        combos = [combos[j % len(combos)] for j in range(options.starts)]
        for j, i in enumerate(switches):
            starts[:, i] = np.log([c[j] for c in combos])
            jitter[:, i] = 0.0
    lower, upper, _ = fit_bounds(fitted, groups)
    # A start exactly on a bound gets no gradient where the wire's floor ties
    # the link's cost (a catalog link's bandwidth is its line rate, and the
    # floor, computed the other way round, wins by an ulp): every start sits
    # a hair inside its finite bounds, which projected Adam may return to.
    inside_lower = np.where(np.isfinite(lower), lower + START_MARGIN, lower)
    inside_upper = np.where(np.isfinite(upper), upper - START_MARGIN, upper)
    return np.clip(starts + jitter, np.minimum(inside_lower, upper), np.maximum(inside_upper, lower))


def jump_candidates(groups: list[Group]) -> dict[str, list[float]]:
    """Where measured all-reduce times jump: candidate protocol switches (in
    message bytes) and chunk switches (in bytes per process), best first.

    Rows that differ only in message size form a curve; each step between
    consecutive sizes (at most 2x apart) scores the log of its time ratio,
    and scores of nearby positions (within 25 %) add up across curves. A
    switch sits at the geometric middle of its step."""
    scores: dict[str, dict[float, float]] = {"protocol": {}, "chunk": {}}
    for g in groups:
        if g.dag is not None:
            continue
        ok = ~np.isnan(g.measured)
        table = np.nan_to_num(np.stack([np.asarray(v, np.float64) for v in g.params.values()], axis=1), nan=-1.0)
        keys = [tuple(row) for row in table]
        for curve in set(k for k, good in zip(keys, ok) if good):
            rows = [i for i, k in enumerate(keys) if k == curve and ok[i]]
            rows.sort(key=lambda i: g.message[i])
            m, t = g.message[rows], g.measured[rows]
            workers = float(g.params["workers"][rows[0]])
            for j in range(len(rows) - 1):
                if not 1.0 < m[j + 1] / m[j] <= 2.0:
                    continue
                score = math.log(t[j + 1] / t[j])
                middle = math.sqrt(m[j] * m[j + 1])
                for kind, where in (("protocol", middle), ("chunk", middle / workers)):
                    near = next((x for x in scores[kind] if abs(math.log(x / where)) < math.log(1.25)), where)
                    scores[kind][near] = scores[kind].get(near, 0.0) + score
    return {kind: [x for x, _ in sorted(table.items(), key=lambda kv: -kv[1])] for kind, table in scores.items()}


def _ordered_product(axes: list[list[float]]) -> list[tuple]:
    """Every combination, those of early (better) entries first."""
    combos = list(itertools.product(*[range(len(a)) for a in axes]))
    combos.sort(key=lambda c: (max(c), sum(c)))
    return [tuple(a[i] for a, i in zip(axes, c)) for c in combos]


def fit(rows: list[Row], fitted: list[str], base: dict, options: FitOptions = FitOptions(),
        log=None) -> FitResult:
    """Fit `fitted` keys to every measured observation of `rows`. `log`, when
    given, is called with a line at the start of each stage (a fit of large
    DAG rows spends minutes compiling before its first step)."""
    say = log or (lambda message: None)
    clock = time.perf_counter()
    with jax.enable_x64(True):
        groups, observations = build_groups(rows, fitted)
        spaces = [FITTABLE[k][1] for k in fitted]
        model = Model(groups, spaces, len(observations))
        measured = jnp.asarray(model.measured)
        needs_smooth = any(g.dag is not None for g in groups)
        starts = jnp.asarray(starting_values(fitted, groups, options))
        lower, upper, why = fit_bounds(fitted, groups)
        lo, hi = jnp.asarray(lower), jnp.asarray(upper)
        # Priors around the first start (base or catalog values), none on switches.
        switch_index = [i for i, k in enumerate(fitted) if FITTABLE[k][0] in SWITCHES]
        prior_mask = np.array([i not in switch_index for i in range(len(fitted))]) & (options.prior > 0)
        prior_width = np.where(np.array(spaces) == "log", options.prior_width, options.prior_width_linear)
        prior_center = jnp.asarray(starts[0])
        prior_weight = options.prior ** 2 / max(1, len(observations))
        prior_scale = jnp.asarray(np.where(prior_mask, 1.0 / prior_width, 0.0))
        # Adam, annealing the smooth max and the switch width, then a polish
        # with hard switches: a smooth switch may rest on a data point, half in
        # each regime, which the hard model never is.
        progress = np.linspace(0.0, 1.0, options.steps)
        temps = options.temperature[0] * (options.temperature[1] / options.temperature[0]) ** progress
        widths = options.width[0] * (options.width[1] / options.width[0]) ** progress
        temps = np.concatenate([temps, np.full(options.polish, temps[-1])])
        widths = np.concatenate([widths, np.zeros(options.polish)])
        schedule = optax.join_schedules(
            [optax.cosine_decay_schedule(options.learning_rate, options.steps, alpha=0.02),
             optax.cosine_decay_schedule(0.1 * options.learning_rate, max(1, options.polish), alpha=0.01)],
            [options.steps])
        optimizer = optax.adam(schedule)

        def prior(theta):
            return prior_weight * jnp.sum(((theta - prior_center) * prior_scale) ** 2)

        def loss(theta, temperature, width):
            pred = model.predict(theta, temperature if needs_smooth else None, width)
            return loss_terms(pred, measured, options.tail) + prior(theta)

        def run(theta):
            state = optimizer.init(theta)

            def step(carry, xs):
                theta, state = carry
                temperature, width = xs
                value, grad = jax.value_and_grad(loss)(theta, temperature, width)
                grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
                # optax's own arithmetic mixes its int32 step count with Python floats
                # (Adam's bias correction 1 - decay**count): not ours to make explicit.
                with jax.numpy_dtype_promotion("standard"):
                    updates, state = optimizer.update(grad, state, theta)
                # Projected Adam: the physical bounds hold at every step.
                return (jnp.clip(optax.apply_updates(theta, updates), lo, hi), state), value

            (theta, _), history = jax.lax.scan(step, (theta, state), (jnp.asarray(temps), jnp.asarray(widths)))
            return theta, history

        dags = sum(g.dag is not None for g in groups)
        parts = ([f"{dags} DAG(s)"] if dags else []) + (["all-reduce rows"] if dags < len(groups) else [])
        say(f"fitting {len(fitted)} key(s) to {len(observations)} observation(s) from {options.starts} start(s), "
            f"{options.steps} + {options.polish} Adam steps each: compiling first ({', '.join(parts)})")
        final, _ = jax.jit(jax.vmap(run))(starts)
        say(f"Adam done ({time.perf_counter() - clock:.1f} s); scoring the starts with the hard model")
        # Score every start with the hard model (hard max, hard switches), as sweeps evaluate it.
        predictions = np.asarray(jax.jit(jax.vmap(model.predict))(final))
        with np.errstate(all="ignore"):
            hard = np.array([float(loss_terms(q, model.measured, options.tail, np) + prior(t))
                             for q, t in zip(predictions, final)])
        hard = np.where(np.isfinite(hard), hard, np.inf)
        best = int(np.argmin(hard))
        if not np.isfinite(hard[best]):
            raise _no_finite_loss(predictions[best], model.measured, observations)
        theta = final[best]
        pred = predictions[best]
        theta, switch_sigma = snap_switches(jax.jit(model.predict), theta, pred, switch_index)
        say(f"best start's loss {hard[best]:.4g} ({time.perf_counter() - clock:.1f} s); its Jacobian for "
            "the uncertainty")
        # Gauss-Newton covariance of the log residuals (switches smooth at the final width).
        final_temperature = temps[-1] if needs_smooth else None
        residual = lambda t: jnp.log(model.predict(t, final_temperature, options.width[1])) - jnp.log(measured)  # noqa: E731
        jac = jacobian(residual, theta)
        values = np.exp(np.asarray(theta)) * model.log_mask + np.asarray(theta) * ~model.log_mask

    r = np.log(pred) - np.log(model.measured)
    # The scatter predictions carry (`sweep.fit.uncertainty.INTERVAL`): the
    # 90 % quantile of |log residual|, and a robust scale (1.4826 x median
    # |log residual|, the rms for normal errors) for other levels.
    scale = float(1.4826 * np.median(np.abs(r)) * math.sqrt(len(r) / max(1, len(r) - len(fitted))))
    if prior_mask.any():
        covariance = posterior_covariance(jac, r, np.where(prior_mask, 1.0 / prior_width ** 2, 0.0), switch_index)
        sigma = np.sqrt(np.diag(covariance))
    else:
        sigma = gauss_newton_sigma(jac, r)
        covariance = np.diag(np.where(np.isfinite(sigma), sigma, np.inf) ** 2)
        covariance[switch_index, switch_index] = 0.0
    sigma[switch_index] = switch_sigma
    # Keys the rows pin down less than their prior does (the posterior keeps
    # at least PRIOR_SHARE of the prior's variance), or, without priors, not
    # at all: their values are the start's (base or catalog), not measured.
    weak = np.where(prior_mask, sigma ** 2 >= PRIOR_SHARE * prior_width ** 2, ~np.isfinite(sigma))
    not_identified = tuple(k for i, k in enumerate(fitted) if i not in switch_index and weak[i])
    theta_host = np.asarray(theta)
    at_bound = {k: f"{why[k][0]}: {why[k][1]}" for i, k in enumerate(fitted) if k in why
                and abs(theta_host[i] - (upper[i] if why[k][0] == "upper" else lower[i])) < 1e-6}
    rel = np.abs(pred / model.measured - 1.0)
    keys = tuple(fitted)
    start_values = np.where(np.array(spaces) == "log", np.exp(np.asarray(starts[best])), np.asarray(starts[best]))
    return FitResult(
        keys=keys,
        values={k: float(v) for k, v in zip(keys, values)},
        start={k: float(v) for k, v in zip(keys, start_values)},
        uncertainty={k: float(s * v if sp == "log" else s) for k, s, v, sp in zip(keys, sigma, values, spaces)},
        relative_uncertainty={k: float(s) for k, s, sp in zip(keys, sigma, spaces) if sp == "log"},
        median_relative_error=float(np.median(rel)),
        max_relative_error=float(np.max(rel)),
        loss=float(hard[best]),
        observations=len(observations),
        rows=len({row.line for row, _ in observations}),
        starts=int(starts.shape[0]),
        predicted=pred,
        measured=model.measured.copy(),
        targets=tuple(t for _, t in observations),
        covariance=covariance,
        residual_scale=scale,
        residual_quantile=float(np.quantile(np.abs(r), 0.9) * math.sqrt(len(r) / max(1, len(r) - len(fitted)))),
        at_bound=at_bound,
        not_identified=not_identified,
        line_rates=line_rates_of(groups, fitted),
    )


def _no_finite_loss(pred: np.ndarray, measured: np.ndarray, observations: list) -> SpecError:
    """The error for data that no start explains with a finite loss (a time
    of 1e-300 s: the tail term's |pred / measured - 1|^32 overflows): it names
    the observation with the largest relative error under the best start, one
    the model cannot predict at all (zero, infinite, NaN) first, by the
    column and text its file gives it (`Row.origin`, else the target's cell)."""
    with np.errstate(all="ignore"):
        ratio = pred / measured
        misfit = np.where(np.isfinite(np.log(ratio)), np.abs(ratio - 1.0), np.inf)  # (NaN: not finite)
    worst = int(np.argmax(misfit))
    row, target = observations[worst]
    column, text = row.origin.get(target) or (target, (row.cells.get(target) or "").strip() or f"{measured[worst]:.6g}")
    unit = "s" if target != "throughput" else "samples/s"
    return SpecError(column, text,
                     f"line {row.line}: no start of the fit reached a finite loss, and this value is the furthest "
                     f"from its prediction ({target} {pred[worst]:.3g} {unit}): check the measured values and their "
                     "units")


def line_rates_of(groups: list[Group], fitted: list[str]) -> dict:
    """`{table}.line_rate` of each link table with a fitted key (the bound the
    fit used, so that predictions apply the same one)."""
    tables = {k.split(".", 1)[0] for k in fitted if k.split(".", 1)[0] in LINK_TABLES}
    return {f"{t}.line_rate": lowest_line_rate(groups, t) for t in sorted(tables)}


def lowest_line_rate(groups: list[Group], table: str) -> float:
    """A link's line rate over all rows (keys are shared: the slowest bounds them)."""
    return min(float(np.min(g.params[f"{table}_line_rate"])) for g in groups)


def snap_switches(predict, theta, pred, index: list[int], reach: float = math.log(1e3), steps: int = 40):
    """Hard switches only matter through which side of them each message
    falls: move each to the log-middle of the interval over which the hard
    predictions stay exactly the same, and report half that interval (in
    log space: relative) as its uncertainty, infinite if the interval is
    open within a factor 1000."""
    theta = jnp.asarray(theta)
    sigma = []
    for i in index:
        def same(value):
            return bool(np.array_equal(np.asarray(predict(theta.at[i].set(value))), pred))

        center = float(theta[i])
        edges = []
        for direction in (-1.0, 1.0):
            inside, outside = center, center + direction * reach
            if same(outside):
                edges.append(None)
                continue
            for _ in range(steps):
                middle = 0.5 * (inside + outside)
                inside, outside = (middle, outside) if same(middle) else (inside, middle)
            edges.append(inside)
        if None in edges:
            sigma.append(np.inf)
            continue
        theta = theta.at[i].set(0.5 * (edges[0] + edges[1]))
        sigma.append(0.5 * (edges[1] - edges[0]))
    return theta, np.array(sigma, np.float64)
