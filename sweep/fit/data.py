"""Measured rows for `calibrate`, `predict` and `validate`, and base scenarios.

Data: a CSV whose columns are scenario keys (an empty cell leaves the key
unset for that row) plus target columns: `throughput` (samples/s over all
GPUs), `iteration_time` (s) or `allreduce_time` (s, one all-reduce of
`message_bytes` bytes). Every (row, target) cell with a value is one
observation. Rows are the base scenario (`--base`) with the row's keys on
top. Benchmark output (nccl-tests, OSU) is read by `sweep.fit.measurements`.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path

from sweep.errors import SpecError
from sweep.fit.measurements import detect, read_measurements
from sweep.graph import zoo
from sweep.scenario.schema import KEYS, canonical, check_value
from sweep.scenario.spec import read_fixed_keys

TARGETS = ("throughput", "iteration_time", "allreduce_time")


MESSAGE = "message_bytes"


@dataclasses.dataclass(frozen=True)
class Row:
    line: int  # line in the CSV (header is line 1)
    point: dict  # canonical key -> value: base scenario with the row's keys on top
    given: frozenset  # keys the row itself sets
    targets: dict  # target -> measured value (None: asked for, not measured)
    message_bytes: float | None
    cells: dict  # column -> cell text, as read
    # target -> (column, text) of its measured value as the file writes it, where that is not the
    # target's own column (benchmark output: `latency_us`, in microseconds); for error messages
    origin: dict = dataclasses.field(default_factory=dict)


def read_base(path: str | os.PathLike | None) -> dict:
    """The fixed keys of a base scenario (`sweep.scenario.spec.read_fixed_keys`); {} without one."""
    return {} if path is None else read_fixed_keys(path)


def read_rows(path: str | os.PathLike, base: dict, need_target: bool = True,
              labels: Sequence[str] = ()) -> tuple[list[str], list[Row]]:
    """(header, rows) of a calibrate or predict CSV, every cell validated.
    Columns named in `labels` are free text (kept in `cells`, not keys)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
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
    # Files a row names (a layer trace, a model file) are relative to the data file, as a scenario's are to it.
    if (key == "compute.trace" or (key == "model" and zoo.is_model_file(value))) and not os.path.isabs(value):
        value = str(folder / value)
    return value


def load_rows(data: str | os.PathLike, base: dict, labels: Sequence[str] = (), need_target: bool = True,
              fmt: str | None = None) -> tuple[list[str], list[Row], list]:
    """(header, rows, anomalies left out) of a calibrate CSV or of benchmark
    output (nccl-tests, OSU: `sweep.fit.measurements`, detected or `fmt`)."""
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
        rows.append(Row(m["line"], point, frozenset(), {"allreduce_time": m["allreduce_time"]}, m[MESSAGE], cells,
                        {"allreduce_time": m["cell"]}))
    return header, rows, odd
