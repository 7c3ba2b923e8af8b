"""Measured per-layer times (`compute.trace = "FILE"`): load, and match to the zoo.

Two formats, told apart by content (a JSON document or not):

- CSV with a header naming `layer`, `forward_time` and `backward_time`
  (seconds for one batch at the scenario's batch size), one row per layer.
- A Chrome trace (JSON, what `torch.profiler.profile(...).export_chrome_trace`
  writes): complete events (`"ph": "X"`, `dur` in microseconds) named after
  layers. A layer's forward event carries its name (`layer1.0.conv1`, the
  PyTorch module name, which is also the zoo's), optionally prefixed
  `nn.Module: ` or `forward: `; its backward event is named `<layer>.backward`,
  `<layer> (backward)` or `backward: <layer>`. Such events come from
  `torch.profiler.record_function(name)` around each module's forward and
  backward (module hooks): events of category `user_annotation` (or with no
  category); operator, kernel and runtime events are ignored. When GPU-side
  annotations (`gpu_user_annotation`) exist they are used instead of the
  CPU-side ones, since they time the kernels.

A layer seen several times (several profiled iterations) gets its mean time;
in a CSV, where one row per layer is expected, that draws a warning.
Durations and timestamps must be finite numbers, durations >= 0, as in a CSV.
Matching: by name when every zoo layer appears in the trace; entries that are
not zoo layers (activations, pooling: the zoo lists only layers that hold
parameters) are added to the zoo layer before them in forward order (or the
first one), so the measured total is kept. Otherwise by order, when the trace
has exactly as many entries as the model has layers (with a warning: the
names say nothing). Anything else is an error naming the missing layers.

The sha256 of every trace's contents is kept (`file_digest`): a resumed sweep
compares it, so results of an edited trace never mix with the old ones.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import re
import warnings

import numpy as np

from sweep.graph import zoo
from sweep.errors import SpecError

KEY = "compute.trace"
CSV_COLUMNS = ("layer", "forward_time", "backward_time")
_BACKWARD = (re.compile(r"^(?P<name>.+)\.backward$"), re.compile(r"^(?P<name>.+) \(backward\)$"),
             re.compile(r"^backward: (?P<name>.+)$"))
_FORWARD_PREFIXES = ("nn.Module: ", "forward: ")
# Event categories that hold layer annotations (record_function); operators,
# kernels and runtime events (cpu_op, kernel, cuda_runtime, ...) are not layers.
_ANNOTATIONS = ("user_annotation", "gpu_user_annotation")
# path -> sha256 of the contents last loaded from it
DIGESTS: dict[str, str] = {}


class TraceWarning(UserWarning):
    """A trace that loads, but whose matching or contents deserve a look."""


@dataclasses.dataclass(frozen=True)
class LayerTrace:
    path: str
    names: tuple[str, ...]  # in order of first appearance
    forward: tuple[float, ...]  # seconds, mean over occurrences
    backward: tuple[float, ...]


def load_trace(path: str | os.PathLike) -> LayerTrace:
    """A trace from a CSV or Chrome-trace JSON file; SpecError if unreadable."""
    path = str(path)
    data = _read(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(KEY, path, f"cannot read file: not UTF-8 text (byte {err.start})")
    DIGESTS[path] = hashlib.sha256(data).hexdigest()
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        return _from_chrome(path, text)
    return _from_csv(path, text)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise SpecError(KEY, path, f"cannot read file ({err.__class__.__name__}: {err.strerror or err})")


def file_digest(path: str) -> str:
    """sha256 of the trace's contents as loaded (or as on disk now, if never loaded)."""
    return DIGESTS.get(str(path)) or hashlib.sha256(_read(str(path))).hexdigest()


def refresh(path: str) -> None:
    """Forget cached times of a trace whose file changed since it was loaded
    (compiled DAGs are keyed by the trace's digest, `file_digest`)."""
    path = str(path)
    if path in DIGESTS and hashlib.sha256(_read(path)).hexdigest() != DIGESTS[path]:
        trace_times.cache_clear()


def _from_csv(path: str, text: str) -> LayerTrace:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise SpecError(KEY, path, f"CSV needs columns {', '.join(CSV_COLUMNS)}; missing {', '.join(missing)}")
    sums: dict[str, list[float]] = {}
    for line, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        name = row["layer"]
        if not name:
            raise SpecError(KEY, path, f"line {line}: empty layer name")
        times = []
        for column in CSV_COLUMNS[1:]:
            try:
                value = float(row[column])
            except ValueError:
                raise SpecError(KEY, path, f"line {line}: {column} = {row[column]!r} is not a number")
            if not math.isfinite(value) or value < 0:
                raise SpecError(KEY, path, f"line {line}: {column} = {row[column]!r} must be finite and >= 0")
            times.append(value)
        _add(sums, name, *times)
    repeated = [name for name, (f, _) in sums.items() if len(f) > 1]
    if repeated:
        warnings.warn(f"{KEY} = {path!r}: {len(repeated)} layer(s) on several rows ({', '.join(repeated[:3])}"
                      f"{', ...' if len(repeated) > 3 else ''}); using the mean of their rows", TraceWarning,
                      stacklevel=2)
    return _trace(path, sums)


def _from_chrome(path: str, text: str) -> LayerTrace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(KEY, path, f"not valid JSON: {err}")
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise SpecError(KEY, path, "a Chrome trace needs a traceEvents list")
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "name" in e and "dur" in e
                and e.get("cat", "user_annotation") in _ANNOTATIONS]
    if any(e.get("cat") == "gpu_user_annotation" for e in complete):
        complete = [e for e in complete if e.get("cat") == "gpu_user_annotation"]
    for index, event in enumerate(complete):
        _check_time(path, index, event, "dur")
        if "ts" in event:
            _check_time(path, index, event, "ts", negative=True)
    sums: dict[str, list[float]] = {}
    for event in sorted(complete, key=lambda e: float(e.get("ts", 0.0))):
        name, seconds = str(event["name"]), float(event["dur"]) * 1e-6
        for pattern in _BACKWARD:
            match = pattern.match(name)
            if match:
                _add(sums, _strip(match["name"]), None, seconds)
                break
        else:
            _add(sums, _strip(name), seconds, None)
    if not sums:
        raise SpecError(KEY, path, "no complete (\"ph\": \"X\") events named after layers")
    return _trace(path, sums)


def _check_time(path: str, index: int, event: dict, field: str, negative: bool = False) -> None:
    """A Chrome trace's `dur` or `ts` must be a finite number (a duration >= 0), as in a CSV."""
    value = event[field]
    try:
        number = float(value)
        if isinstance(value, bool) or value is None:
            raise TypeError
    except (TypeError, ValueError):
        raise SpecError(KEY, path, f"event {event.get('name')!r}: {field} = {value!r} is not a number") from None
    if not math.isfinite(number) or (number < 0 and not negative):
        raise SpecError(KEY, path, f"event {event.get('name')!r}: {field} = {value!r} must be finite"
                                   f"{'' if negative else ' and >= 0'}")


def _strip(name: str) -> str:
    for prefix in _FORWARD_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _add(sums: dict, name: str, forward: float | None, backward: float | None) -> None:
    """Record one occurrence of a layer's forward and/or backward time."""
    entry = sums.setdefault(name, ([], []))
    if forward is not None:
        entry[0].append(forward)
    if backward is not None:
        entry[1].append(backward)


def _trace(path: str, sums: dict) -> LayerTrace:
    if not sums:
        raise SpecError(KEY, path, "the trace holds no layers")
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return LayerTrace(path, tuple(sums), tuple(mean(f) for f, _ in sums.values()),
                      tuple(mean(b) for _, b in sums.values()))


def match_trace(trace: LayerTrace, model: zoo.Model) -> tuple[np.ndarray, np.ndarray]:
    """(forward [L], backward [L]) seconds per zoo layer, in forward order."""
    layer_names = [layer.name for layer in model.layers]
    where = {name: i for i, name in enumerate(layer_names)}
    forward = np.zeros(len(layer_names))
    backward = np.zeros(len(layer_names))
    missing = [name for name in layer_names if name not in trace.names]
    if not missing:
        owner = 0
        for name, f, b in zip(trace.names, trace.forward, trace.backward):
            owner = where.get(name, owner)  # not a zoo layer: belongs to the layer before it
            forward[owner] += f
            backward[owner] += b
        return forward, backward
    if len(trace.names) == len(layer_names):
        warnings.warn(f"{KEY} = {trace.path!r}: no entry is named after {model.name}'s layers "
                      f"({len(missing)} of {len(layer_names)} missing); matched by order, first entry to first "
                      "layer", TraceWarning, stacklevel=2)
        return np.asarray(trace.forward, np.float64), np.asarray(trace.backward, np.float64)
    shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
    raise SpecError(KEY, trace.path,
                    f"does not match {model.name}: {len(missing)} of its {len(layer_names)} layers are not in the "
                    f"trace ({shown}), and its {len(trace.names)} entries cannot be matched by order "
                    f"({model.name} has {len(layer_names)} layers)")


@functools.lru_cache(maxsize=64)
def trace_times(path: str, model: zoo.Model) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Matched (forward, backward) seconds per layer of a model, cached."""
    forward, backward = match_trace(load_trace(path), model)
    return tuple(forward.tolist()), tuple(backward.tolist())
