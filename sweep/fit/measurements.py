"""Read all-reduce measurements as the benchmarks print them (issue 8, item 5).

`calibrate`, `validate` and `predict` take, besides their own CSV, the files
people have, detected from their first lines:

- nccl-tests `all_reduce_perf` text: `#` header lines (the devices, one
  `Rank` line each with its host), then one line per size: size, count,
  type, redop, [root,] then time, algbw, busbw, #wrong (or `error` in older
  versions) out of place and again in place. The out-of-place time is
  fitted (time, never busbw: nccl-tests' busbw assumes a ring). Ranks and
  nodes come from the `Rank ... on HOST` lines; the base scenario's
  `nodes` and `gpus_per_node` override them (and are needed when the
  device lines were cut).
- nccl-tests tables as CSV (the files in ../shared/data/nccl_tests/: a
  `time_us_oop` column with `size_bytes`, `nodes`, `gpus_per_node`).
- OSU `osu_allreduce` text: `# OSU MPI Allreduce Latency Test`, then size
  and average latency [us] per line (more columns with `-f`). OSU does not
  print the process count: the base scenario gives `nodes` and
  `gpus_per_node`.
- OSU latencies as CSV (../shared/data/osu_allreduce_latency.csv: columns
  `processes`, `message_bytes`, `latency_us`): `processes` per row, spread
  `gpus_per_node` to a node (the base's, else 1: one process per node,
  OSU's usual way to measure the network).

Each becomes rows of `nodes, gpus_per_node, message_bytes, allreduce_time`.
Anomalous rows are kept out of the fit and reported: a size whose time is
more than `SPIKE` times the next larger size's (the first, warm-up row, and
single-size outliers: a larger message cannot be that much faster).
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from pathlib import Path

from sweep.errors import SpecError

FORMATS = ("csv", "nccl-tests", "nccl-tests-csv", "osu", "osu-csv")
SPIKE = 1.5  # a time this many times the next larger size's is anomalous
REDOPS = {"sum", "prod", "min", "max", "avg", "premulsum"}


@dataclasses.dataclass(frozen=True)
class Measurement:
    line: int  # line in the file
    nodes: int | None
    gpus_per_node: int | None
    message_bytes: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class Anomaly:
    line: int
    message_bytes: float
    seconds: float
    reason: str


def detect(path: str | os.PathLike) -> str:
    """The format of a measurement file (FORMATS), from its first lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = [next(handle, "") for _ in range(40)]
    except OSError:
        return "csv"  # the CSV reader says what is wrong
    text = "".join(head)
    first = next((line for line in head if line.strip()), "")
    if "OSU MPI" in text and "Allreduce" in text:
        return "osu"
    if first.lstrip().startswith("#") and ("nThread" in text or "out-of-place" in text or "busbw" in text):
        return "nccl-tests"
    if "time_us_oop" in first and "size_bytes" in first:
        return "nccl-tests-csv"
    if {"processes", "message_bytes", "latency_us"} <= {c.strip() for c in first.split(",")}:
        return "osu-csv"
    return "csv"


def _float(token: str) -> float | None:
    """A finite number, or None (a word, nan or inf is no measurement)."""
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_nccl_tests(path) -> tuple[list[Measurement], dict]:
    """(rows, layout) of nccl-tests text; layout: ranks and nodes when printed."""
    ranks, hosts, rows = 0, [], []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("#"):
                words = stripped.lstrip("#").split()
                if len(words) >= 2 and words[0] == "Rank" and " on " in stripped:
                    ranks += 1
                    host = stripped.split(" on ", 1)[1].split()[0]
                    if host not in hosts:
                        hosts.append(host)
                continue
            words = stripped.split()
            if len(words) < 6 or _float(words[0]) is None or _float(words[1]) is None:
                continue  # e.g. NCCL INFO lines, warnings
            rest = words[3:]
            if rest and rest[0].lower() in REDOPS:
                rest = rest[1:]
                if rest and rest[0].lstrip("-").isdigit() and len(rest) in (5, 9):  # a root column
                    rest = rest[1:]
            time = _float(rest[0]) if rest else None
            if time is None or time <= 0:
                continue
            rows.append(Measurement(number, None, None, float(words[0]), time * 1e-6))
    return rows, {"ranks": ranks or None, "nodes": len(hosts) or None}


def read_nccl_tests_csv(path) -> list[Measurement]:
    rows = []
    with open(path, newline="", encoding="utf-8") as handle:
        for number, r in enumerate(csv.DictReader(handle), start=2):
            time = _float(r.get("time_us_oop", "") or "")
            size = _float(r.get("size_bytes", "") or "")
            if time is None or size is None or time <= 0 or size <= 0:
                continue
            rows.append(Measurement(number, int(r["nodes"]), int(r["gpus_per_node"]), size, time * 1e-6))
    return rows


def read_osu(path) -> list[Measurement]:
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            words = line.split()
            if not words or line.lstrip().startswith("#"):
                continue
            size, latency = (_float(words[0]), _float(words[1])) if len(words) >= 2 else (None, None)
            if size is None or latency is None or size <= 0 or latency <= 0:
                continue
            rows.append(Measurement(number, None, None, size, latency * 1e-6))
    return rows


def read_osu_csv(path, per_node: int) -> list[Measurement]:
    """OSU latencies as CSV, `per_node` processes to a node."""
    rows = []
    with open(path, newline="", encoding="utf-8") as handle:
        for number, r in enumerate(csv.DictReader(handle), start=2):
            values = {k: _float(r.get(k) or "") for k in ("processes", "message_bytes", "latency_us")}
            for key, value in values.items():
                if value is None or value <= 0:
                    raise SpecError(key, r.get(key), f"{Path(path).name} line {number}: not a positive number")
            processes, size, latency = values.values()
            if processes != int(processes) or int(processes) % per_node:
                raise SpecError("gpus_per_node", per_node, f"{Path(path).name} line {number}: {processes:g} "
                                                           f"processes do not fill nodes of {per_node}")
            rows.append(Measurement(number, int(processes) // per_node, per_node, size, latency * 1e-6))
    return rows


def anomalies(rows: list[Measurement]) -> list[Anomaly]:
    """Rows whose time exceeds SPIKE x the next larger size's time (per layout)."""
    out = []
    curves: dict[tuple, list[Measurement]] = {}
    for r in rows:
        curves.setdefault((r.nodes, r.gpus_per_node), []).append(r)
    for curve in curves.values():
        curve = sorted(curve, key=lambda r: (r.message_bytes, r.line))
        for i, r in enumerate(curve[:-1]):
            after = next((q for q in curve[i + 1:] if q.message_bytes > r.message_bytes), None)
            if after is not None and r.seconds > SPIKE * after.seconds:
                where = "first row (warm-up)" if i == 0 else "outlier"
                out.append(Anomaly(r.line, r.message_bytes, r.seconds,
                                   f"{where}: {r.seconds * 1e6:.4g} us, more than {SPIKE:g} x the "
                                   f"{after.message_bytes:.0f}-byte time ({after.seconds * 1e6:.4g} us)"))
    return out


def _per_node(base: dict) -> int:
    """Processes to a node for OSU latencies as CSV: the base's `gpus_per_node`, else 1."""
    value = base.get("gpus_per_node", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError("gpus_per_node", value, "must be a whole number >= 1 (processes to a node) "
                                                "to place OSU latencies given per process count")
    return value


def read_measurements(path, base: dict, fmt: str | None = None) -> tuple[list[dict], list[Anomaly], str]:
    """(rows as dicts of nodes, gpus_per_node, message_bytes, allreduce_time,
    anomalies left out, format) of a benchmark file."""
    fmt = fmt or detect(path)
    if fmt not in FORMATS[1:]:  # (calibrate.load_rows reads "csv" itself)
        raise SpecError("--format", fmt, f"not a benchmark format; choose {', '.join(FORMATS[1:])}")
    layout: dict = {}
    try:
        if fmt == "nccl-tests":
            rows, layout = read_nccl_tests(path)
        elif fmt == "nccl-tests-csv":
            rows = read_nccl_tests_csv(path)
        elif fmt == "osu-csv":
            rows = read_osu_csv(path, _per_node(base))
        else:
            rows = read_osu(path)
    except SpecError:
        raise
    except (OSError, UnicodeDecodeError, KeyError, ValueError) as err:
        raise SpecError("data", str(path), f"cannot read {fmt} output ({err.__class__.__name__}: {err})")
    if not rows:
        raise SpecError("data", str(path), f"no measurements found in this {fmt} output")
    nodes, gpus = base.get("nodes"), base.get("gpus_per_node")
    if nodes is None and layout.get("nodes"):
        nodes = layout["nodes"]
    if gpus is None and layout.get("ranks") and nodes:
        gpus = layout["ranks"] // nodes
    resolved = [dataclasses.replace(r, nodes=r.nodes or nodes, gpus_per_node=r.gpus_per_node or gpus) for r in rows]
    missing = [r for r in resolved if r.nodes is None or r.gpus_per_node is None]
    if missing:
        raise SpecError("nodes", None, f"{Path(path).name}: {fmt} output does not say how many processes ran; "
                                       "give nodes and gpus_per_node in --base")
    if any(r.nodes * r.gpus_per_node < 2 for r in resolved):
        raise SpecError("nodes", nodes, f"{Path(path).name}: an all-reduce needs at least 2 processes")
    odd = anomalies(resolved)
    skip = {a.line for a in odd}
    out = [{"nodes": r.nodes, "gpus_per_node": r.gpus_per_node, "message_bytes": r.message_bytes,
            "allreduce_time": r.seconds, "line": r.line} for r in resolved if r.line not in skip]
    return out, odd, fmt
