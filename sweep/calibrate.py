"""Fit scenario keys to measurements (DESIGN 4: `ssgd-sweep calibrate`).

Data: a CSV whose columns are scenario keys (an empty cell leaves the key
unset for that row) plus target columns: `throughput` (samples/s over all
GPUs), `iteration_time` (s) or `allreduce_time` (s, one all-reduce of
`message_bytes` bytes). Every (row, target) cell with a value is one
observation. Rows are the base scenario (`--base`) with the row's keys on top.

The model is the JAX kernels themselves: rows that share a DAG (model,
sequence length, iterations, trace) are evaluated together by
`kernels.iteration.iteration_outputs`, all-reduce rows by
`kernels.collectives`. The fitted keys are shared by all rows and live in
log space (exponents, which may be negative, in linear space). The loss is

    mean(log(pred / measured)^2) + tail * mean(|pred / measured - 1|^32)^(1/16)

the mean squared log error plus a smooth stand-in for the largest relative
error (weight `tail`), so that no observation is sacrificed to the bulk.
Optax's Adam minimises it from several starts at once (the catalog or base
values, jittered; a grid of positions for protocol and chunk switches).
While fitting, maxima are smooth (`kernels.smooth`, temperature a fraction
of each row's measured iteration time) and protocol switches are sigmoids
in log message size, both annealed towards the hard versions that sweeps
use; the fit is scored with the hard ones. Uncertainties are Gauss-Newton:
the covariance s^2 (J^T J)^-1 of the log residuals at the optimum, infinite
for keys the data cannot pin down. A hard switch only matters through which
side of it each message falls: it is moved to the log-middle of the interval
that leaves every prediction unchanged, and half that interval is its
(relative) uncertainty.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kernels.collectives import EXTRA_LINK_FIELDS, LINK_FALLBACK, LINK_FIELDS
from sweep import zoo
from sweep.parameter_table import LINK_TABLES, PARAMETERS
from sweep.schema import KEYS, STRUCTURAL, SpecError, canonical, check_value

TARGETS = ("throughput", "iteration_time", "allreduce_time")
MESSAGE = "message_bytes"

# Keys a fit may set: parameter name in the kernels, and the space it is fitted in.
FITTABLE: dict[str, tuple[str, str]] = {p.key: (p.name, p.fit) for p in PARAMETERS if p.fit}
KEY_OF_PARAM = {param: key for key, (param, _) in FITTABLE.items()}
# A parameter whose key is unset takes the value of another (sweep.params.link_extension).
FOLLOWS = {f"{t}_{field}": f"{t}_{source}" for t in LINK_TABLES
           for field, source in LINK_FALLBACK.items() if isinstance(source, str)}
SWITCHES = tuple(f"{t}_{f}" for t in LINK_TABLES for f in ("protocol_bytes", "chunk_bytes"))


@dataclasses.dataclass(frozen=True)
class Options:
    starts: int = 8
    steps: int = 1000  # Adam steps while annealing the smoothing
    polish: int = 500  # Adam steps with hard switches after the annealing
    learning_rate: float = 0.04
    tail: float = 0.3
    seed: int = 0
    temperature: tuple[float, float] = (3e-2, 3e-4)  # smooth max, fraction of each row's iteration time
    width: tuple[float, float] = (2.0, 0.002)  # protocol switches, ln bytes
    # Gaussian priors around the start (base or catalog values) as regularisation:
    # `prior` is the residual scale assumed when weighing them against the data
    # (0: no priors), `prior_width` their 1-sigma in ln units (a factor e**w) for
    # log-space keys and in linear units for exponents. Switches have none.
    prior: float = 0.05
    prior_width: float = math.log(10.0)
    prior_width_linear: float = 1.0


@dataclasses.dataclass(frozen=True)
class Row:
    line: int  # line in the CSV (header is line 1)
    point: dict  # canonical key -> value: base scenario with the row's keys on top
    given: frozenset  # keys the row itself sets
    targets: dict  # target -> measured value (None: asked for, not measured)
    message_bytes: float | None
    cells: dict  # column -> cell text, as read


# ----------------------------------------------------------------------------- input


def read_base(path: str | os.PathLike | None) -> dict:
    """The fixed keys of a base scenario (every value a scalar; [fit] skipped)."""
    if path is None:
        return {}
    from sweep.spec import METADATA_TABLES, _flatten, _read_toml

    raw = _read_toml(Path(path))
    base: dict = {}
    for written, value in _flatten({k: v for k, v in raw.items() if k not in METADATA_TABLES + ("outputs",)}):
        if isinstance(value, list):
            raise SpecError(written, value, "a base scenario gives one value per key, not a swept axis")
        key = canonical(written)
        if key in base:
            raise SpecError(written, value, "given twice")
        base[key] = check_value(written, value)
    if "compute.trace" in base and not os.path.isabs(base["compute.trace"]):
        base["compute.trace"] = str(Path(path).parent / base["compute.trace"])
    return base


def read_rows(path: str | os.PathLike, base: dict, need_target: bool = True,
              labels: Sequence[str] = ()) -> tuple[list[str], list[Row]]:
    """(header, rows) of a calibrate or predict CSV, every cell validated.
    Columns named in `labels` are free text (kept in `cells`, not keys)."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            table = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError("data", str(path), f"cannot read file ({err.__class__.__name__}: "
                                           f"{getattr(err, 'strerror', None) or err})")
    if not table or not any(h.strip() for h in table[0]):
        raise SpecError("data", str(path), "empty file: the first line must name the columns")
    header = [h.strip() for h in table[0]]
    keys: dict[str, str] = {}
    for column in header:
        if column in TARGETS or column == MESSAGE or column in labels:
            key = column
        else:
            key = canonical(column)
            if key not in KEYS:
                raise SpecError(column, column, f"unknown column in {path}: not a scenario key, "
                                                f"{MESSAGE} or a target ({', '.join(TARGETS)})")
        if key in keys.values():
            raise SpecError(column, column, f"column given twice in {path}")
        keys[column] = key
    if need_target and not any(c in TARGETS for c in header):
        raise SpecError("target", ", ".join(header), f"no target column in {path}: add one of {', '.join(TARGETS)}")
    rows = []
    for line, cells in enumerate(table[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise SpecError("data", f"line {line}", f"{len(cells)} cells for {len(header)} columns in {path}")
        point, given, targets, message = dict(base), set(), {}, None
        for column, cell in zip(header, cells):
            cell, key = cell.strip(), keys[column]
            if key in labels:
                continue
            if key in TARGETS:
                targets[key] = _number(column, cell, line, positive=True) if cell else None
            elif key == MESSAGE:
                message = _number(column, cell, line, positive=True) if cell else None
            elif cell:
                point[key] = _cell(column, key, cell, line, Path(path).parent)
                given.add(key)
        if need_target and not any(v is not None for v in targets.values()):
            raise SpecError(", ".join(t for t in TARGETS if t in header), "", f"line {line}: no measured value")
        rows.append(Row(line, point, frozenset(given), targets, message, dict(zip(header, cells))))
    if not rows:
        raise SpecError("data", str(path), "no rows")
    return header, rows


def _number(column: str, cell: str, line: int, positive: bool = False) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise SpecError(column, cell, f"line {line}: not a number")
    if not math.isfinite(value):
        raise SpecError(column, cell, f"line {line}: must be finite")
    if positive and value <= 0:
        raise SpecError(column, cell, f"line {line}: must be > 0")
    return value


def _cell(column: str, key: str, cell: str, line: int, folder: Path) -> object:
    kind = KEYS[key].kind
    if kind is bool:
        lowered = cell.lower()
        if lowered not in ("true", "false", "1", "0"):
            raise SpecError(column, cell, f"line {line}: must be true or false")
        value: object = lowered in ("true", "1")
    elif kind is str:
        value = cell
    else:
        try:
            value = float(cell)
        except ValueError:
            raise SpecError(column, cell, f"line {line}: not a number")
    try:
        value = check_value(column, value)
    except SpecError as err:
        raise SpecError(column, cell, f"line {line}: {err.reason}")
    if key == "compute.trace" and not os.path.isabs(value):
        value = str(folder / value)
    return value


def expand_fit(names: Sequence[str]) -> list[str]:
    """Canonical fitted keys: a table name (`inter`) stands for all its link fields."""
    keys: list[str] = []
    for name in names:
        if name in LINK_TABLES:
            expanded = [f"{name}.{f}" for f in LINK_FIELDS]
        elif name in FITTABLE:
            expanded = [name]
        else:
            raise SpecError("--fit", name, "cannot be fitted; choose a link table (intra, inter) or one of "
                                           + ", ".join(FITTABLE))
        keys += [k for k in expanded if k not in keys]
    return keys


# ----------------------------------------------------------------------------- the problem

class _NoModel:
    input_bytes = 0


def _row_params(point: dict, extended: bool) -> dict[str, np.ndarray]:
    from sweep.params import link_extension, point_params

    model = zoo.get_model(point["model"], point.get("seq_len")) if "model" in point else _NoModel()
    p = point_params(point, model, np.float64)
    if extended and "inter_protocol_bytes" not in p:
        for table in LINK_TABLES:
            p.update(link_extension(table, p[f"{table}_alpha"], p[f"{table}_bandwidth"],
                                    lambda field, fallback: fallback, 1))
    for table in LINK_TABLES:  # the wire's bounds hold in every fit and prediction
        p[f"{table}_line_rate"] = np.array([line_rate(point, table)], np.float64)
        for field in EXTRA_LINK_FIELDS:  # (0: none) present, so that a fit can set them
            p[f"{table}_{field}"] = np.array([float(point.get(f"{table}.{field}", 0.0))], np.float64)
    return p


# Starting values of fittable keys whose unset value (0) cannot start a log-space fit.
UNSET_START = {"intra_overhead": 1e-5, "inter_overhead": 1e-5}


def line_rate(point: dict, table: str) -> float:
    """A link's line rate [bytes/s]: `{table}.line_rate` when given, else the
    catalog entry's, raised to any bandwidth the scenario gives for the link
    (a user who writes a faster bandwidth means a faster link)."""
    from sweep import catalog

    if f"{table}.line_rate" in point:
        return float(point[f"{table}.line_rate"])
    rate = catalog.LINKS[point.get(f"{table}.name", KEYS[f"{table}.name"].default)].line_rate
    given = [point[f"{table}.{f}"] for f in ("bandwidth", "large_bandwidth", "chunk_bandwidth") if f"{table}.{f}" in point]
    return float(max([rate, *given]))


def _structure(point: dict) -> tuple:
    return tuple(point.get(k, KEYS[k].default) for k in STRUCTURAL)


@dataclasses.dataclass
class Group:
    """Observations evaluated together: one DAG (or all-reduce rows)."""
    dag: object  # CompiledDag, or None for all-reduce rows
    params: dict  # name -> [N] float64 (fixed values)
    source: dict  # name -> [N] int: fitted index, or -1 to keep `params`
    target: np.ndarray  # [N] int: index into TARGETS
    measured: np.ndarray  # [N]
    message: np.ndarray  # [N] (all-reduce rows)
    scale: np.ndarray  # [N] seconds: each row's iteration time (smooth-max temperature unit)
    index: np.ndarray  # [N] position of each observation in the flat list


def build_groups(rows: list[Row], fitted: list[str], predict: bool = False) -> tuple[list[Group], list]:
    """Groups of observations and, in order, (row, target) of each observation.

    For prediction (`predict`), every target each row can be evaluated for is
    an observation, measured or not (measured NaN)."""
    extended = any(k.split(".", 1)[0] in LINK_TABLES and k.split(".", 1)[1] in LINK_FIELDS[2:]
                   for k in fitted) or any(
        k.split(".", 1)[0] in LINK_TABLES and k.split(".", 1)[1] in LINK_FIELDS[2:] for r in rows for k in r.point)
    fitted_params = {FITTABLE[k][0]: i for i, k in enumerate(fitted)}
    observations: list[tuple[Row, str]] = []
    buckets: dict[tuple, list] = {}
    for row in rows:
        for target, value in row.targets.items():
            if value is None and not predict:
                continue
            observations.append((row, target))
    for i, (row, target) in enumerate(observations):
        clash = [k for k in fitted if k in row.given]
        if clash:
            raise SpecError(clash[0], row.point[clash[0]], f"line {row.line}: this key is fitted; leave it unset "
                                                           "in the data (a --base value is the start)")
        if target == "allreduce_time":
            if row.message_bytes is None:
                raise SpecError(MESSAGE, "", f"line {row.line}: an allreduce_time needs message_bytes")
            workers = row.point.get("nodes", 1) * row.point.get("gpus_per_node", 1)
            if workers < 2:
                raise SpecError("nodes", row.point.get("nodes", 1),
                                f"line {row.line}: an all-reduce needs at least 2 processes (nodes x gpus_per_node)")
            buckets.setdefault(("allreduce",), []).append(i)
        else:
            for key in ("model", "batch_size"):
                if key not in row.point:
                    raise SpecError(key, None, f"line {row.line}: required for a {target} target")
            _check_point(row)
            buckets.setdefault(_structure(row.point), []).append(i)
    groups = []
    from sweep.compiler import compile_structure

    for key, members in buckets.items():
        rows_here = [observations[i][0] for i in members]
        per_row = [_row_params(r.point, extended) for r in rows_here]
        if any("ps_pipelined" in q for q in per_row):  # set in some rows only: the others are sequential
            for q in per_row:
                q.setdefault("ps_pipelined", np.zeros(1))
        names = per_row[0].keys()
        params = {n: np.concatenate([p[n] for p in per_row]).astype(np.float64) for n in names}
        params["strategy"] = params["strategy"].astype(np.int32)
        params["algorithm"] = params["algorithm"].astype(np.int32)
        source = {}
        for name in names:
            src = np.array([_source(name, r.given, fitted_params) for r in rows_here], np.int32)
            if (src >= 0).any():
                source[name] = src
        targets = np.array([TARGETS.index(observations[i][1]) for i in members], np.int32)
        measured = np.array([np.nan if observations[i][0].targets[observations[i][1]] is None
                             else observations[i][0].targets[observations[i][1]] for i in members])
        message = np.array([r.message_bytes or 0.0 for r in rows_here])
        if key == ("allreduce",):
            dag, scale = None, np.where(np.isnan(measured), 1.0, measured)
        else:
            structure = dict(zip(STRUCTURAL, key))
            dag = compile_structure(structure)  # its constants take the parameters' dtype (float64 here)
            work = params["workers"] * params["batch_size"] * structure["accumulation"]
            scale = np.where(targets == 0, work / measured, measured)
            scale = np.where(np.isnan(scale), 1.0, scale)
        groups.append(Group(dag, params, source, targets, measured, message, scale, np.array(members)))
    return groups, observations


def _check_point(row: Row) -> None:
    point = row.point
    try:
        zoo.get_model(point["model"], point.get("seq_len"))
    except ValueError as err:
        raise SpecError("seq_len", point.get("seq_len"), f"line {row.line}: invalid for {point['model']}: {err}")
    if point.get("compute.trace") is not None:
        from sweep.layer_trace import trace_times

        trace_times(point["compute.trace"], point["model"], point.get("seq_len"))


def _source(name: str, given: frozenset, fitted_params: dict) -> int:
    key = KEY_OF_PARAM.get(name)
    if key is not None and key in given:
        return -1
    if name in fitted_params:
        return fitted_params[name]
    if name in FOLLOWS:
        return _source(FOLLOWS[name], given, fitted_params)
    return -1


# ----------------------------------------------------------------------------- the model in JAX


def _predict_group(group_arrays, dag, values, temperature, width):
    """Predictions [N] of one group for fitted `values` [k] (physical units)."""
    import jax.numpy as jnp

    from kernels.collectives import allreduce_time, collective_cost
    from kernels.iteration import iteration_outputs

    params, source, target, message, scale = group_arrays
    p = dict(params)
    for name, src in source.items():
        p[name] = jnp.where(src >= 0, values[jnp.maximum(src, 0)], params[name])
    if dag is None:
        cost = collective_cost(p)
        return allreduce_time(message, *cost, width=width)
    if temperature is not None:
        p["max_temperature"] = temperature * scale
    if width is not None:
        p["switch_width"] = jnp.broadcast_to(width, scale.shape)
    out = iteration_outputs(dag, p)
    return jnp.where(target == 0, out["throughput"], out["iteration_time"])


class Model:
    """Predictions of every observation as a function of the fitted vector."""

    def __init__(self, groups: list[Group], spaces: list[str], count: int):
        import jax.numpy as jnp

        self.groups = groups
        self.count = count
        self.log_mask = np.array([s == "log" for s in spaces])
        self.arrays = [({k: jnp.asarray(v) for k, v in g.params.items()},
                        {k: jnp.asarray(v) for k, v in g.source.items()},
                        jnp.asarray(g.target), jnp.asarray(g.message), jnp.asarray(g.scale)) for g in groups]
        self.measured = np.empty(count)
        for g in groups:
            self.measured[g.index] = g.measured

    def values(self, theta):
        import jax.numpy as jnp

        return jnp.where(self.log_mask, jnp.exp(theta), theta)

    def predict(self, theta, temperature=None, width=None):
        import jax.numpy as jnp

        values = self.values(theta)
        out = jnp.zeros(self.count, values.dtype)
        for g, arrays in zip(self.groups, self.arrays):
            out = out.at[g.index].set(_predict_group(arrays, g.dag, values, temperature, width))
        return out


def loss_terms(pred, measured, tail: float, xp=None):
    """mean(log(pred / measured)^2) + tail * mean(|pred / measured - 1|^32)^(1/16)
    (`xp`: the array module, jax.numpy by default, numpy for host values)."""
    if xp is None:
        import jax.numpy as xp
    log_error = xp.log(pred) - xp.log(measured)
    rel = pred / measured - 1.0
    return xp.mean(log_error ** 2) + tail * xp.mean(xp.abs(rel) ** 32) ** (1.0 / 16)


# ----------------------------------------------------------------------------- fitting


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
    line_rates: dict = dataclasses.field(default_factory=dict)  # `{table}.line_rate` the fit was bounded by
    excluded: tuple = ()  # anomalous rows left out of the fit, one line each


BANDWIDTHS = ("bandwidth", "large_bandwidth", "chunk_bandwidth")


def wire_slack(groups: list[Group]) -> float:
    """How much faster than the line rate the inter link's `bandwidth` may be
    on every row without any row's all-reduce beating the wire: the smallest,
    over multi-node rows, of the flat algorithm's bytes per process per byte
    of M (2(P-1)/P for ring and rhd, 2 ceil(log2 P) for tree) over the wire's
    2(n-1)/n, or ps's 2 max(1, n/S) over max(1, n/S). 1 without multi-node
    rows, and for hierarchical (its inter phase is bounded in the kernels).
    With one process per node this is 1: the line rate itself."""
    from kernels.codes import ALGORITHMS

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
            rate = min(float(np.min(g.params[f"{table}_line_rate"])) for g in groups)
            factor = slack if table == "inter" else 1.0
            upper[i] = math.log(rate * factor)
            why[key] = ("upper", f"line rate {rate:.4g} bytes/s" + (f" x {factor:.3g} (wire slack of the rows' "
                                                                    "algorithms)" if factor != 1.0 else ""))
        elif table in LINK_TABLES and field == "bandwidth_exponent":
            lower[i] = 0.0
            why[key] = ("lower", "bandwidth may not grow with processes")
    return lower, upper, why


def starting_values(fitted: list[str], groups: list[Group], options: Options) -> np.ndarray:
    """[starts, k] starting points in fit space (log or linear).

    The first start is the base scenario's value of each key, else its
    catalog or derived value (exponents 0); the others jitter it (x/÷ up to
    3 in log space, +-0.3 in linear space). Protocol and chunk switches, unset
    by default, start spread over the message sizes in the data."""
    rng = np.random.default_rng(options.seed)
    first = groups[0]  # rows carry the base scenario, so its values are here
    center = np.array([first.params[FITTABLE[k][0]][0] or UNSET_START.get(FITTABLE[k][0], 0.0) for k in fitted],
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
    return np.clip(starts + jitter, lower, upper)


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
    import itertools

    combos = list(itertools.product(*[range(len(a)) for a in axes]))
    combos.sort(key=lambda c: (max(c), sum(c)))
    return [tuple(a[i] for a, i in zip(axes, c)) for c in combos]


def fit(rows: list[Row], fitted: list[str], base: dict, options: Options = Options()) -> FitResult:
    """Fit `fitted` keys to every measured observation of `rows`."""
    import jax
    import jax.numpy as jnp
    import optax

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

        final, _ = jax.jit(jax.vmap(run))(starts)
        # Score every start with the hard model (hard max, hard switches), as sweeps evaluate it.
        predictions = np.asarray(jax.jit(jax.vmap(model.predict))(final))
        with np.errstate(all="ignore"):
            hard = np.array([float(loss_terms(q, model.measured, options.tail, np) + prior(t))
                             for q, t in zip(predictions, final)])
        hard = np.where(np.isfinite(hard), hard, np.inf)
        best = int(np.argmin(hard))
        theta = final[best]
        pred = predictions[best]
        theta, switch_sigma = snap_switches(jax.jit(model.predict), theta, pred, switch_index)
        # Gauss-Newton covariance of the log residuals (switches smooth at the final width).
        final_temperature = temps[-1] if needs_smooth else None
        residual = lambda t: jnp.log(model.predict(t, final_temperature, options.width[1])) - jnp.log(measured)  # noqa: E731
        jac = np.asarray(jax.jit(jax.jacfwd(residual))(theta))
        values = np.exp(np.asarray(theta)) * model.log_mask + np.asarray(theta) * ~model.log_mask

    r = np.log(pred) - np.log(model.measured)
    # The scatter predictions carry: a robust scale (1.4826 x median |log
    # residual|, the rms for normal errors), so that one anomalous row does
    # not widen every interval: on the 10GbE tasks the rms put every held-out
    # row inside (coverage 100 %), this scale 93 % and 98 % (README).
    scale = float(1.4826 * np.median(np.abs(r)) * math.sqrt(len(r) / max(1, len(r) - len(fitted))))
    if prior_mask.any():
        covariance = posterior_covariance(jac, r, np.where(prior_mask, 1.0 / prior_width ** 2, 0.0), switch_index)
        sigma = np.sqrt(np.diag(covariance))
    else:
        sigma = gauss_newton_sigma(jac, r)
        covariance = np.diag(np.where(np.isfinite(sigma), sigma, np.inf) ** 2)
        covariance[switch_index, switch_index] = 0.0
    sigma[switch_index] = switch_sigma
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
        line_rates=line_rates_of(groups, fitted),
    )


def line_rates_of(groups: list[Group], fitted: list[str]) -> dict:
    """`{table}.line_rate` of each link table with a fitted key (the bound the
    fit used, so that predictions apply the same one)."""
    tables = {k.split(".", 1)[0] for k in fitted if k.split(".", 1)[0] in LINK_TABLES}
    return {f"{t}.line_rate": min(float(np.min(g.params[f"{t}_line_rate"])) for g in groups) for t in sorted(tables)}


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


def snap_switches(predict, theta, pred, index: list[int], reach: float = math.log(1e3), steps: int = 40):
    """Hard switches only matter through which side of them each message
    falls: move each to the log-middle of the interval over which the hard
    predictions stay exactly the same, and report half that interval (in
    log space: relative) as its uncertainty, infinite if the interval is
    open within a factor 1000."""
    import jax.numpy as jnp

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


# How the unexplained scatter enters prediction intervals: "normal" (t quantile
# x the robust residual scale) or "quantile" (the fit's 90 % quantile of |log residual|).
INTERVAL = "normal"


def predict_rows(rows: list[Row], targets: Sequence[str], uncertainty: dict | None = None,
                 level: float = 0.9) -> dict[str, np.ndarray]:
    """Per target, the prediction of every row (NaN where the row cannot have one).

    With `uncertainty` (the [fit] table of a FIT.toml: `fitted`, `covariance`,
    `residual_scale`, `degrees_of_freedom`) also `<target>_low` and
    `<target>_high`: a `level` prediction interval in log space,
        log(pred) +- t_{dof}((1 + level) / 2) * sqrt(g C g^T + s^2),
    g the gradient of log(pred) in the fitted coordinates, C their
    covariance (parameter uncertainty), s the fit's robust scale of log
    residuals (what the model does not explain; `FitResult.residual_scale`). Rows that set a fitted key themselves
    get the parameter part without that key."""
    import jax

    out = {t: np.full(len(rows), np.nan) for t in targets}
    asked = []
    for i, row in enumerate(rows):
        wanted = {}
        for t in targets:
            if t == "allreduce_time" and row.message_bytes is not None:
                wanted[t] = None
            elif t != "allreduce_time" and "model" in row.point and "batch_size" in row.point:
                wanted[t] = None
        asked.append(dataclasses.replace(row, targets=wanted, line=i))
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
        pred = np.asarray(jax.jit(model.predict)(jax.numpy.asarray(theta)))
        if uncertainty is not None:
            from scipy import stats

            grad = (np.asarray(jax.jit(jax.jacfwd(lambda t: jax.numpy.log(model.predict(t))))(theta))
                    if fitted else np.zeros((len(observations), 0)))
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
    for j, ((row, target), value) in enumerate(zip(observations, pred)):
        out[target][row.line] = value
        if uncertainty is not None:
            out[f"{target}_low"][row.line] = value / spread[j]
            out[f"{target}_high"][row.line] = value * spread[j]
    return out


# ----------------------------------------------------------------------------- files


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
        # Prediction intervals (sweep.predict): log-space covariance of the
        # fitted coordinates (log of log-space keys, exponents as they are)
        # in the order of `fitted`, and the robust scale of the log residuals.
        "residual_scale": result.residual_scale,
        "residual_quantile_90": result.residual_quantile,
        "degrees_of_freedom": max(1, result.observations - len(result.keys)),
        "at_bound": {},
        "excluded": list(result.excluded),
        "uncertainty": {},
        "relative_uncertainty": {},
        "start": {},
    }
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


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write to a temporary file in the same directory, then rename."""
    path = Path(path)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def load_rows(data: str | os.PathLike, base: dict, labels: Sequence[str] = (), need_target: bool = True,
              fmt: str | None = None) -> tuple[list[str], list[Row], list]:
    """(header, rows, anomalies left out) of a calibrate CSV or of benchmark
    output (nccl-tests, OSU: `sweep.measurements`, detected or `fmt`)."""
    from sweep.measurements import detect, read_measurements

    fmt = fmt or detect(data)
    if fmt == "csv":
        header, rows = read_rows(data, base, need_target, labels)
        return header, rows, []
    measured, odd, _ = read_measurements(data, base, fmt)
    header = ["nodes", "gpus_per_node", MESSAGE, "allreduce_time"]
    rows = []
    for m in measured:
        point = {**base, "nodes": m["nodes"], "gpus_per_node": m["gpus_per_node"]}
        cells = {"nodes": str(m["nodes"]), "gpus_per_node": str(m["gpus_per_node"]),
                 MESSAGE: repr(m[MESSAGE]), "allreduce_time": repr(m["allreduce_time"])}
        rows.append(Row(m["line"], point, frozenset(), {"allreduce_time": m["allreduce_time"]}, m[MESSAGE], cells))
    return header, rows, odd


def calibrate(data: str | os.PathLike, fit_keys: Sequence[str], base_path=None, output=None,
              options: Options = Options(), label: str | None = None,
              fmt: str | None = None) -> tuple[FitResult, dict]:
    """Read, fit, and (with `output`) write FIT.toml; returns (result, document).
    `label` describes the data in [fit] (default: its path). Benchmark output
    (nccl-tests, OSU) is read directly; its anomalous rows are left out and
    listed in the result and in [fit] `excluded`."""
    import tomli_w

    fitted = expand_fit(fit_keys)
    base = read_base(base_path)
    for key in fitted:
        if key in base and FITTABLE[key][1] == "log" and base[key] <= 0:
            raise SpecError(key, base[key], "a fitted key must start > 0")
    _, rows, odd = load_rows(data, {k: v for k, v in base.items()}, fmt=fmt)
    result = fit(rows, fitted, base, options)
    result = dataclasses.replace(result, excluded=tuple(f"line {a.line}: {a.reason}" for a in odd))
    doc = fit_document({k: v for k, v in base.items() if k not in fitted}, result, label or str(data))
    if output is not None:
        write_atomic(output, tomli_w.dumps(doc))
    return result, doc


def summary(result: FitResult) -> str:
    lines = [f"fitted {len(result.keys)} key(s) to {result.observations} observation(s) "
             f"({result.rows} rows, best of {result.starts} starts)",
             f"relative error: median {100 * result.median_relative_error:.1f} %, "
             f"max {100 * result.max_relative_error:.1f} %"]
    for key in result.keys:
        rel = result.relative_uncertainty.get(key)
        spread = f"+- {100 * rel:.1f} %" if rel is not None else f"+- {result.uncertainty[key]:.3g}"
        bound = f"  (at {result.at_bound[key]})" if key in result.at_bound else ""
        lines.append(f"  {key:<30} {result.values[key]:12.5g}  {spread}{bound}")
    if result.excluded:
        lines.append(f"left out of the fit as anomalous ({len(result.excluded)}):")
        lines += [f"  {line}" for line in result.excluded]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- physics checks

BOUND_SHAPES = ((1, 2), (1, 4), (1, 8), (2, 1), (2, 4), (4, 1), (4, 4), (8, 1), (8, 4), (16, 8), (64, 1))
BOUND_MESSAGES = np.geomspace(1.0, 1e10, 41)


def wire_bound_violations(rows: list[Row], result: FitResult, shapes=BOUND_SHAPES,
                          messages=BOUND_MESSAGES) -> list[str]:
    """Where the fitted links predict an all-reduce faster than the wire
    allows (`kernels.collectives.wire_lower_bound`), for every row's scenario
    with the fitted values, every algorithm (ps pipelined or not) and a range
    of cluster shapes and sizes: one line per case, empty when none."""
    import jax
    import jax.numpy as jnp

    from kernels.codes import ALGORITHMS
    from kernels.collectives import allreduce_time, collective_cost, wire_lower_bound

    points = {}
    for row in rows:
        point = {**row.point, **result.values, **{k: v for k, v in result.line_rates.items()
                                                  if k not in row.point}}
        points.setdefault(repr(sorted((k, str(v)) for k, v in point.items()
                                      if k.split(".")[0] in LINK_TABLES)), point)
    found = []
    with jax.enable_x64(True):
        for point in points.values():
            for algorithm in ALGORITHMS:
                for pipelined in (False, True) if algorithm == "ps" else (False,):
                    for n, g in shapes:
                        q = {**point, "nodes": n, "gpus_per_node": g, "algorithm": algorithm}
                        q.pop("ps.servers", None)
                        if pipelined:
                            q["ps.pipelined"] = True
                        p = {k: jnp.asarray(v) for k, v in _row_params(q, True).items()}
                        m = jnp.asarray(messages)[:, None]
                        time = np.asarray(allreduce_time(m, *collective_cost(p)))[:, 0]
                        bound = np.asarray(wire_lower_bound(p, m))[:, 0]
                        bad = time < bound * (1 - 1e-9)
                        if bad.any():
                            i = int(np.argmax(bad))
                            found.append(f"{algorithm}{' pipelined' if pipelined else ''} n={n} g={g} "
                                         f"M={messages[i]:.3g}: {time[i]:.4g} s < wire bound {bound[i]:.4g} s")
    return found
