"""The observations as a function of the fitted keys, evaluated by the kernels.

Rows that share a DAG (model, sequence length, iterations, trace and the
other structural keys) are evaluated together by
`kernels.iteration.iteration_outputs` through the compiled program, all-reduce
rows by `kernels.collectives`. The fitted keys are shared by all rows and
live in log space (exponents, which may be negative, in linear space).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from kernels.collectives import EXTRA_LINK_FIELDS, LINK_FALLBACK, LINK_FIELDS, allreduce_time, collective_cost
from kernels.iteration import iteration_outputs
from kernels.parameters import CODES, UNSET
from sweep.engine.params import link_extension, point_params
from sweep.errors import SpecError, closest
from sweep.fit.data import MESSAGE, TARGETS, Row
from sweep.graph import zoo
from sweep.graph.compiler import PRIORITY_KEY, compile_structure
from sweep.graph.layer_trace import trace_times
from sweep.scenario import catalog
from sweep.scenario.parameter_table import LINK_TABLES, PARAMETERS
from sweep.scenario.schema import KEYS, STRUCTURAL
from sweep.scenario.spec import check_mgwfbp_planner, check_point_shapes, resolve_structure
from sweep.scenario.presets import DEFAULT_STRATEGY, PRESETS

# Keys a fit may set: parameter name in the kernels, and the space it is fitted in.
FITTABLE: dict[str, tuple[str, str]] = {p.key: (p.name, p.fit) for p in PARAMETERS if p.fit}


KEY_OF_PARAM = {param: key for key, (param, _) in FITTABLE.items()}


# A parameter whose key is unset takes the value of another (sweep.engine.params.link_extension).
FOLLOWS = {f"{t}_{field}": f"{t}_{source}" for t in LINK_TABLES
           for field, source in LINK_FALLBACK.items() if isinstance(source, str)}


SWITCHES = tuple(f"{t}_{f}" for t in LINK_TABLES for f in ("protocol_bytes", "chunk_bytes"))


def expand_fit(names: Sequence[str]) -> list[str]:
    """Canonical fitted keys: a table name (`inter`) stands for all its link fields."""
    keys: list[str] = []
    for name in names:
        if name in LINK_TABLES:
            expanded = [f"{name}.{f}" for f in LINK_FIELDS]
        elif name in FITTABLE:
            expanded = [name]
        else:
            raise SpecError("--fit", name, "cannot be fitted; "
                            + closest(name, [*LINK_TABLES, *FITTABLE], "README 'Commands and API' (calibrate)"))
        keys += [k for k in expanded if k not in keys]
    return keys


class _NoModel:
    input_bytes = 0


def row_params(point: dict, extended: bool) -> dict[str, np.ndarray]:
    """One row's kernel parameters by name (a dict: rows of a group are
    concatenated, and the fit sets its keys by name), with every field a fit
    may set present."""
    model = zoo.model_of(point) if "model" in point else _NoModel()
    p = dict(point_params(point, model, np.float64))
    if extended and "inter_protocol_bytes" not in p:
        for table in LINK_TABLES:
            p.update(link_extension(table, p[f"{table}_alpha"], p[f"{table}_bandwidth"],
                                    lambda field, fallback: fallback, 1))
    for table in LINK_TABLES:  # the wire's bounds hold in every fit and prediction
        p[f"{table}_line_rate"] = np.array([line_rate(point, table)], np.float64)
        for field in EXTRA_LINK_FIELDS:  # (0: none) present, so that a fit can set them
            p[f"{table}_{field}"] = np.array([float(point.get(f"{table}.{field}", 0.0))], np.float64)
    p.setdefault("ps_bandwidth", np.zeros(1))  # 0: the inter link's (present, so that a fit can set it)
    return p


def line_rate(point: dict, table: str) -> float:
    """A link's line rate [bytes/s]: `{table}.line_rate` when given, else the
    catalog entry's, raised to any bandwidth the scenario gives for the link
    (a user who writes a faster bandwidth means a faster link)."""
    if f"{table}.line_rate" in point:
        return float(point[f"{table}.line_rate"])
    rate = catalog.LINKS[point.get(f"{table}.name", KEYS[f"{table}.name"].default)].line_rate
    given = [point[f"{table}.{f}"] for f in ("bandwidth", "large_bandwidth", "chunk_bandwidth") if f"{table}.{f}" in point]
    return float(max([rate, *given]))


def _structure(point: dict) -> tuple:
    """The structural keys of a row (what its preset sets of them included)."""
    values = resolve_structure({k: point.get(k, KEYS[k].default) for k in STRUCTURAL} | {"preset": point.get("preset")},
                               point.__contains__)
    preset = point.get("preset")
    strategy = point.get("strategy") or (PRESETS[preset].strategy if preset else DEFAULT_STRATEGY)
    return (*(values[k] for k in STRUCTURAL), strategy == "priority")


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
    for key, members in buckets.items():
        rows_here = [observations[i][0] for i in members]
        per_row = [row_params(r.point, extended) for r in rows_here]
        # Optional fields set in some rows only, or fitted: the others get the value that means "unset"
        # (`kernels.parameters.UNSET`; a least task time only then, since a floor costs the lazy chains).
        for name, unset in UNSET.items():
            if name in fitted_params or any(name in q for q in per_row):
                for q in per_row:
                    q.setdefault(name, np.full(1, unset))
        names = per_row[0].keys()
        params = {n: np.concatenate([p[n] for p in per_row]).astype(np.float64) for n in names}
        for name in CODES:
            params[name] = params[name].astype(np.int32)
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
            structure = dict(zip((*STRUCTURAL, PRIORITY_KEY), key))
            dag = compile_structure(structure)  # its constants take the parameters' dtype (float64 here)
            work = params["workers"] * params["batch_size"] * structure["accumulation"]
            scale = np.where(targets == 0, work / measured, measured)
            scale = np.where(np.isnan(scale), 1.0, scale)
        groups.append(Group(dag, params, source, targets, measured, message, scale, np.array(members)))
    return groups, observations


def _check_point(row: Row) -> None:
    point = row.point
    try:
        model = zoo.model_of(point)
    except SpecError as err:
        raise SpecError(err.key, err.value, f"line {row.line}: {err.reason}")
    except ValueError as err:
        raise SpecError("seq_len", point.get("seq_len"), f"line {row.line}: invalid for {point['model']}: {err}")
    if point.get("compute.trace") is not None:
        trace_times(point["compute.trace"], model)
    check_mgwfbp_planner(point.__contains__, point.get, f"line {row.line}: ")
    check_point_shapes(point, f"line {row.line}: ")


def _source(name: str, given: frozenset, fitted_params: dict) -> int:
    key = KEY_OF_PARAM.get(name)
    if key is not None and key in given:
        return -1
    if name in fitted_params:
        return fitted_params[name]
    if name in FOLLOWS:
        return _source(FOLLOWS[name], given, fitted_params)
    return -1


def _predict_group(group_arrays, dag, values, temperature, width):
    """Predictions [N] of one group for fitted `values` [k] (physical units)."""

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
        return jnp.where(self.log_mask, jnp.exp(theta), theta)

    def predict(self, theta, temperature=None, width=None):
        values = self.values(theta)
        out = jnp.zeros(self.count, values.dtype)
        for g, arrays in zip(self.groups, self.arrays):
            out = out.at[g.index].set(_predict_group(arrays, g.dag, values, temperature, width))
        return out


def loss_terms(pred, measured, tail: float, xp=None):
    """mean(log(pred / measured)^2) + tail * mean(|pred / measured - 1|^32)^(1/16)
    (`xp`: the array module, jax.numpy by default, numpy for host values)."""
    xp = jnp if xp is None else xp
    log_error = xp.log(pred) - xp.log(measured)
    rel = pred / measured - 1.0
    return xp.mean(log_error ** 2) + tail * xp.mean(xp.abs(rel) ** 32) ** (1.0 / 16)
