"""Scenario files: load, validate, and split into fixed keys and swept axes.

Every key may be a scalar (fixed) or a list (a swept axis, which becomes a
cube dimension named as written, in file order). Validation happens here,
once, on the host; everything downstream trusts a `Spec`.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

import tomli_w

from kernels.outputs import OUTPUTS
from sweep.graph import zoo
from sweep.graph.layer_trace import refresh, trace_times
from sweep.scenario.presets import (DEFAULT_ALGORITHM, DEFAULT_STRATEGY, PRESET_STRUCTURE, PRESETS, preset_sets,
                                    preset_zero)
from sweep.scenario.reduction import Reduction, parse_reduce
from sweep.scenario.sample import Sample, parse_sample
from sweep.scenario.sensitivity import check_sensitivity, is_sensitivity
from sweep.scenario.schema import KEYS, MAX_WORKERS, STRUCTURAL, TABLES_WITH_NAME, canonical, check_value
from sweep.errors import SpecError, closest

# Top-level keys that are not model parameters.
CONTROL_KEYS = ("outputs",)
# Top-level tables that are metadata, not scenario keys: `[fit]` (fit quality
# and uncertainties that `ssgd-sweep calibrate` writes next to fitted values).
METADATA_TABLES = ("fit",)


@dataclasses.dataclass(frozen=True)
class Axis:
    name: str  # as written in the scenario (`gpu`, `inter.bandwidth`)
    key: str  # canonical key (`gpu.name`, `inter.bandwidth`)
    values: tuple


SAMPLE_DIM = "config"


@dataclasses.dataclass(frozen=True)
class Spec:
    fixed: Mapping[str, object]  # canonical key -> value
    axes: tuple[Axis, ...]  # grid axes, in file order
    outputs: tuple[str, ...]
    sample: Sample | None = None  # adds a last `config` dimension
    reduce: Reduction | None = None  # the `[reduce]` table: statistics over some dimensions

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes) + ((SAMPLE_DIM,) if self.sample else ())

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes) + ((self.sample.n,) if self.sample else ())

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis(self, key: str) -> Axis | None:
        return next((a for a in self.axes if a.key == key), None)

    def given(self, key: str) -> bool:
        """Whether the scenario sets `key` (fixed, swept or sampled)."""
        sampled = self.sample is not None and any(d.key == key for d in self.sample.dimensions)
        return key in self.fixed or self.axis(key) is not None or sampled

    def value(self, key: str, point: Mapping[str, object] | None = None):
        """A key's value at `point` (canonical key -> value), else its fixed value, else its default."""
        if point is not None and key in point:
            return point[key]
        return self.fixed.get(key, KEYS[key].default)

    def values(self, key: str) -> tuple:
        """Every value a categorical or structural key takes: its axis, its
        sampled choices, or its one fixed (or default) value."""
        axis = self.axis(key)
        if axis is not None:
            return axis.values
        for d in self.sample.dimensions if self.sample is not None else ():
            if d.key == key:
                if d.choices is None:
                    raise ValueError(f"{key} is sampled over a range, not from choices")
                return d.choices
        return (self.value(key),)

    def point(self, index: tuple[int, ...]) -> dict[str, object]:
        """Every given key's value at one grid index."""
        values = dict(self.fixed)
        values.update({a.key: a.values[i] for a, i in zip(self.axes, index)})
        return values

    def to_toml(self) -> str:
        """The scenario as TOML, with defaults filled in where they are fixed."""
        flat = {k.name: k.default for k in KEYS.values() if k.default is not None}
        flat.update(self.fixed)
        flat.update({a.key: list(a.values) for a in self.axes})
        nested: dict = {"outputs": list(self.outputs)}
        if self.sample is not None:
            nested["sample"] = sample_table(self.sample)
        if self.reduce is not None:
            nested["reduce"] = self.reduce.table()
        for key, value in flat.items():
            *tables, leaf = key.split(".")
            node = nested
            for table in tables:
                node = node.setdefault(table, {})
            node[leaf] = value
        return tomli_w.dumps(nested)


def load_spec(source: str | os.PathLike | Mapping) -> Spec:
    """A validated Spec from a TOML path or an already-parsed mapping."""
    if isinstance(source, Mapping):
        raw, base_dir = source, None
    else:
        raw, base_dir = read_scenario_file(source), Path(source).parent
    from_fit = isinstance(raw.get("fit"), Mapping)
    raw = {k: v for k, v in raw.items() if k not in METADATA_TABLES}
    fixed: dict[str, object] = {}
    axes: list[Axis] = []
    written_as: dict[str, str] = {}
    outputs = tuple(OUTPUTS)
    sample_raw = raw.get("sample")
    for written, value in _flatten({k: v for k, v in raw.items() if k not in ("sample", "reduce")}):
        if written == "outputs":
            outputs = _check_outputs(value)
            continue
        key = canonical(written)
        if key in written_as:
            raise SpecError(written, value, f"given twice (also as {written_as[key]})")
        written_as[key] = written
        if isinstance(value, list):
            axes.append(Axis(written, key, _check_axis(written, value)))
        else:
            fixed[key] = check_value(written, value)
    sample = parse_sample(sample_raw, set(written_as)) if sample_raw is not None else None
    fixed, axes = _resolve_traces(fixed, axes, base_dir)
    spec = Spec(fixed, tuple(axes), outputs, sample)
    if "reduce" in raw:
        spec = dataclasses.replace(spec, reduce=parse_reduce(raw["reduce"], spec.dims))
    _check_required(spec, from_fit)
    _check_workers(spec)
    _check_models(spec)
    _check_traces(spec)
    _check_shapes(spec)
    check_mgwfbp_planner(spec.given, lambda key: spec.fixed.get(key, "(swept or sampled)"))
    return spec


def _resolve_traces(fixed: dict, axes: list, base_dir: Path | None) -> tuple[dict, list]:
    """`compute.trace` and model file paths relative to the scenario file's directory."""
    if base_dir is None:
        return fixed, axes

    def resolve(key: str, value: str) -> str:
        if key == "model" and not zoo.is_model_file(value):
            return value
        return value if os.path.isabs(value) else str(base_dir / value)

    for key in ("compute.trace", "model"):
        if key in fixed:
            fixed = {**fixed, key: resolve(key, fixed[key])}
        axes = [dataclasses.replace(a, values=tuple(resolve(key, v) for v in a.values)) if a.key == key else a
                for a in axes]
    return fixed, axes


def model_combinations(spec: Spec):
    """Every combination of the keys that name a model (`model`, `seq_len`,
    `transformer.*`) the scenario can take, as dicts of canonical keys."""
    keys = ("model", "seq_len", *zoo.TRANSFORMER_KEYS)
    for values in itertools.product(*(spec.values(k) for k in keys)):
        yield dict(zip(keys, values))


def _check_traces(spec: Spec) -> None:
    """Every trace must load and match every model it is paired with."""
    traces = [t for t in spec.values("compute.trace") if t is not None]
    if not traces:
        return
    for trace in traces:
        refresh(trace)  # a file edited since it was loaded in this process is read again
        for values in model_combinations(spec):
            trace_times(trace, zoo.model_of(values))


def sample_table(sample: Sample) -> dict:
    """The `[sample]` table of a Sample, as it would be written."""
    table: dict = {"n": sample.n, "method": sample.method, "seed": sample.seed}
    for d in sample.dimensions:
        table[d.key] = list(d.choices) if d.choices is not None else {"min": d.low, "max": d.high, "scale": d.scale}
    return table


def read_scenario_file(path: str | os.PathLike) -> dict:
    """A scenario file (TOML, also FIT.toml) as parsed; SpecError naming the file if it is not one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise SpecError("scenario", str(path), f"cannot read file ({err.__class__.__name__}: {err.strerror or err})")
    if data.startswith(b"\x89HDF") or data.startswith(b"CDF"):
        raise SpecError("scenario", str(path), "is a netCDF cube, not a TOML scenario")
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark (Windows editors) is not TOML
    except UnicodeDecodeError as err:
        raise SpecError("scenario", str(path), f"not UTF-8 text (byte {err.start}: {data[err.start:err.start + 1]!r}); "
                                               "save it as UTF-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError("scenario", str(path), f"not valid TOML: {err}")


def read_fixed_keys(path: str | os.PathLike) -> dict:
    """The fixed keys of a base scenario, canonical and checked (every value a
    scalar; [fit], outputs and the other metadata tables skipped; a relative
    `compute.trace` taken from the file's folder): what `calibrate`, `predict`
    and `validate` put under every row."""
    raw = read_scenario_file(path)
    base: dict = {}
    skipped = METADATA_TABLES + ("outputs", "reduce")
    for written, value in _flatten({k: v for k, v in raw.items() if k not in skipped}):
        if isinstance(value, list):
            raise SpecError(written, value, "a base scenario gives one value per key, not a swept axis")
        key = canonical(written)
        if key in base:
            raise SpecError(written, value, "given twice")
        base[key] = check_value(written, value)
    base, _ = _resolve_traces(base, [], Path(path).parent)
    return base


def _flatten(table: Mapping, prefix: str = ""):
    """(dotted key, value) pairs in file order."""
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            if not prefix and key in CONTROL_KEYS:
                raise SpecError(key, value, "must be a list")
            yield from _flatten(value, key + ".")
        else:
            yield key, value


def _check_axis(written: str, values: list) -> tuple:
    if not values:
        raise SpecError(written, values, "empty axis: give at least one value")
    if any(isinstance(v, (list, Mapping)) for v in values):
        raise SpecError(written, values, "an axis holds scalars only")
    checked = tuple(check_value(written, v) for v in values)
    if len(set(checked)) != len(checked):
        raise SpecError(written, values, "repeated value in axis")
    return checked


def _check_outputs(value) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise SpecError("outputs", value, "must be a non-empty list of output names")
    for name in value:
        if is_sensitivity(name):
            check_sensitivity(name)
        elif name not in OUTPUTS:
            raise SpecError("outputs", name, f"unknown output; {closest(name, OUTPUTS)} "
                            "(or d_iteration_time/d_<key>)")
    return tuple(dict.fromkeys(value))


def _check_required(spec: Spec, from_fit: bool = False) -> None:
    for key in KEYS.values():
        if key.required and not spec.given(key.name):
            hint = ("; this fit was written without --base, so it holds only the fitted keys: add the "
                    "missing keys to it, or calibrate with --base SPEC.toml") if from_fit else ""
            raise SpecError(key.name, None, f"required key is missing{hint}")


def _largest(spec: Spec, key: str) -> float:
    """The largest value a numeric key takes: fixed, swept or sampled."""
    axis = spec.axis(key)
    if axis is not None:
        return max(axis.values)
    for d in spec.sample.dimensions if spec.sample is not None else ():
        if d.key == key:
            return max(d.choices) if d.choices is not None else d.high
    return spec.value(key)


def _check_workers(spec: Spec) -> None:
    """nodes x gpus_per_node must stay an exact integer in float32 (the kernels' type)."""
    nodes, gpus = _largest(spec, "nodes"), _largest(spec, "gpus_per_node")
    if nodes * gpus > MAX_WORKERS:
        raise SpecError("nodes x gpus_per_node", f"{nodes:g} x {gpus:g}",
                        f"reaches {int(nodes * gpus):,} GPUs; at most {MAX_WORKERS:,} "
                        "(2**24, exact in float32)")


def _check_models(spec: Spec) -> None:
    """Every model (zoo name and sequence length, transformer shape, or
    model file) must build."""
    for values in model_combinations(spec):
        model, seq_len = values["model"], values["seq_len"]
        transformer = {k: values[k] for k in zoo.TRANSFORMER_KEYS if values[k] is not None}
        if transformer and model != zoo.TRANSFORMER:
            key = next(iter(transformer))
            raise SpecError(key, transformer[key], f'applies to model = "{zoo.TRANSFORMER}" only, not {model!r}')
        try:
            zoo.model_of(values)
        except SpecError:
            raise
        except ValueError as err:
            raise SpecError("seq_len", seq_len, f"invalid for {model}: {err}")


def structural_keys(spec: Spec) -> tuple[str, ...]:
    """The keys that decide a configuration's DAG: `STRUCTURAL`, and
    `preset` when a preset of the scenario sets a structural key (the ZeRO
    stage, the update) that the scenario does not set itself."""
    if any(not spec.given(key) and preset_sets(p, key) is not None
           for key in PRESET_STRUCTURE for p in spec.values("preset")):
        return STRUCTURAL + ("preset",)
    return STRUCTURAL


def resolve_structure(values: dict, given) -> dict:
    """`values` (structural keys and `preset`) with the structural keys a
    preset sets (`PRESET_STRUCTURE`) taken from it, unless `given(key)`
    (the scenario sets the key itself)."""
    out = dict(values)
    for key in PRESET_STRUCTURE:
        value = preset_sets(values.get("preset"), key)
        if value is not None and not given(key):
            out[key] = value
    return out


def _strategy_and_update(spec: Spec) -> set[tuple[str, str]]:
    """Each (strategy, update) pair the scenario's configurations can take
    (a preset brings its own strategy and, for ByteScheduler, its update)."""
    pairs = set()
    for preset in spec.values("preset"):
        strategies = spec.values("strategy") if spec.given("strategy") else \
            (PRESETS[preset].strategy if preset else DEFAULT_STRATEGY,)
        updates = spec.values("update") if spec.given("update") else (preset_sets(preset, "update") or "barrier",)
        pairs |= set(itertools.product(strategies, updates))
    return pairs


def _check_priority(spec: Spec) -> None:
    """ByteScheduler's priority channel: with layer-wise updates (the point of
    sending the front layers first), one channel, no ZeRO, and at most 8
    bytes per gradient (which bounds the partitions the kernel walks)."""
    pairs = _strategy_and_update(spec)
    if not any(strategy == "priority" for strategy, _ in pairs):
        return
    if ("priority", "barrier") in pairs:
        raise SpecError("strategy", "priority", 'needs update = "layerwise" in every configuration that uses it '
                                                '(the bytescheduler presets set it)')
    if True in spec.values("hierarchical.pipelined"):
        raise SpecError("strategy", "priority", "does not combine with hierarchical.pipelined = true")
    if _largest(spec, "grad_bytes") > 8:
        raise SpecError("grad_bytes", _largest(spec, "grad_bytes"), 'at most 8 with strategy = "priority"')


def _zero_and_algorithms(spec: Spec, algorithms: set[str]) -> set[tuple[int, frozenset]]:
    """Each ZeRO stage the scenario's configurations can take, with the
    algorithms that go with it (a ZeRO preset brings its own algorithm)."""
    if spec.given("zero") or all(preset_zero(p) is None for p in spec.values("preset")):
        return {(zero, frozenset(algorithms)) for zero in spec.values("zero")}
    pairs = set()
    for preset in spec.values("preset"):
        own = {PRESETS[preset].algorithm if preset else DEFAULT_ALGORITHM}
        pairs.add((preset_zero(preset) or 0, frozenset(spec.values("algorithm") if spec.given("algorithm") else own)))
    return pairs


def possible_values(spec: Spec, key: str) -> set[str]:
    """Every value of `strategy` or `algorithm` the scenario's configurations
    can take (explicit, or from their presets, or the default). Decided per
    scenario, not per chunk, so a configuration's result never depends on
    how the sweep is chunked."""
    if spec.given(key):
        return set(spec.values(key))
    if spec.given("preset"):
        return {getattr(PRESETS[p], key) for p in spec.values("preset")}
    return {{"strategy": DEFAULT_STRATEGY, "algorithm": DEFAULT_ALGORITHM}[key]}


def has_fixed_buckets(spec: Spec) -> bool:
    """Whether every configuration's strategy is bsp or wfbp, whose buckets
    never depend on timing (the kernels' `fixed_buckets`); per scenario, as
    `possible_values`."""
    return possible_values(spec, "strategy") <= {"bsp", "wfbp"}


def check_mgwfbp_planner(given, value_of, where: str = "") -> None:
    """MG-WFBP's planner model is an alpha-beta pair: both keys or neither
    (`given(key)`: whether a scenario or data row sets it; `value_of(key)`:
    the value to name; `where`: a prefix for the reason, e.g. a data line)."""
    alpha, bandwidth = given("mgwfbp.alpha"), given("mgwfbp.bandwidth")
    if alpha != bandwidth:
        key, missing = ("mgwfbp.alpha", "mgwfbp.bandwidth") if alpha else ("mgwfbp.bandwidth", "mgwfbp.alpha")
        raise SpecError(key, value_of(key), f"{where}needs {missing} too: the planner's model is alpha + bytes / "
                                            "bandwidth")


def check_point_shapes(point: Mapping[str, object], where: str = "") -> None:
    """The DAG-shape rules of a scenario (`_check_shapes`) for one
    configuration given by its keys, e.g. a data row (`where`: a prefix for
    the reason, such as its line), so calibrate and predict refuse what a
    sweep refuses."""
    try:
        _check_shapes(Spec(dict(point), (), ()))
    except SpecError as err:
        raise SpecError(err.key, err.value, f"{where}{err.reason}") from None


def _check_shapes(spec: Spec) -> None:
    """The DAG shapes of DESIGN 2.5 that do not combine."""
    algorithms = possible_values(spec, "algorithm")
    sampled = [d for d in (spec.sample.dimensions if spec.sample else ()) if d.key == "preset"]
    for key in PRESET_STRUCTURE:
        shaping = [p for d in sampled for p in d.choices if preset_sets(p, key) is not None]
        if shaping and not spec.given(key):
            raise SpecError(f"sample.{sampled[0].name}", shaping[0],
                            f"sets {key}, which changes the DAG: sweep presets with a list outside [sample]")
    for zero, algorithms in sorted(_zero_and_algorithms(spec, algorithms)):
        if zero == 0:
            continue
        if "layerwise" in spec.values("update"):
            raise SpecError("zero", zero, 'combines only with update = "barrier", not update = "layerwise" '
                                          '(the sharded update is one step)')
        if True in spec.values("hierarchical.pipelined"):
            raise SpecError("zero", zero, "does not combine with hierarchical.pipelined = true")
        if "ps" in algorithms:
            raise SpecError("zero", zero, 'needs a collective algorithm: reduce-scatter and all-gather are not '
                                          'modelled for algorithm = "ps"')
    _check_priority(spec)
    if True in spec.values("hierarchical.pipelined") and algorithms - {"hierarchical"}:
        raise SpecError("hierarchical.pipelined", True,
                        f'needs algorithm = "hierarchical" in every configuration, not {sorted(algorithms)}')


__all__ = ["Axis", "Spec", "SpecError", "load_spec", "STRUCTURAL", "TABLES_WITH_NAME"]
