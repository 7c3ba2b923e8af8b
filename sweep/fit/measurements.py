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
single-size outliers: a larger message cannot be that much faster), and
data rows that cannot be read ("unreadable row": cut off mid-line, a time
that is not a positive number). Lines that are no data rows (`#` lines,
NCCL INFO lines, warnings) are passed over. A file with no readable row, a
CSV without a needed column, a CSV `nodes`, `gpus_per_node` or `processes`
that is no whole number >= 1, or `processes` that do not fill whole nodes
is a SpecError: those say where rows run, not what they measured. A UTF-8 byte-order mark is allowed.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from pathlib import Path

from sweep.errors import SpecError, show

FORMATS = ("csv", "nccl-tests", "nccl-tests-csv", "osu", "osu-csv")
SPIKE = 1.5  # a time this many times the next larger size's is anomalous
REDOPS = {"sum", "prod", "min", "max", "avg", "premulsum"}
NCCL_CSV_COLUMNS = ("size_bytes", "time_us_oop", "nodes", "gpus_per_node")  # what nccl-tests-csv needs
NCCL_TIME, OSU_LATENCY = "out-of-place time [us]", "latency [us]"  # the text formats' time columns, as named in errors
OSU_CSV_COLUMNS = ("processes", "message_bytes", "latency_us")  # what osu-csv needs


@dataclasses.dataclass(frozen=True)
class Measurement:
    line: int  # line in the file
    nodes: int | None
    gpus_per_node: int | None
    message_bytes: float
    seconds: float
    cell: tuple[str, str]  # (column, text) of the time as the file writes it, for error messages


@dataclasses.dataclass(frozen=True)
class Anomaly:
    line: int
    message_bytes: float
    seconds: float
    reason: str


def detect(path: str | os.PathLike) -> str:
    """The format of a measurement file (FORMATS), from its first lines."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
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
    if set(OSU_CSV_COLUMNS) <= {c.strip() for c in first.split(",")}:
        return "osu-csv"
    return "csv"


def _float(token: str) -> float | None:
    """A finite number, or None (a word, nan or inf is no measurement)."""
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _unreadable(line: int, why: str, text: str) -> Anomaly:
    """A data row that cannot be read, reported as left out."""
    return Anomaly(line, math.nan, math.nan, f"unreadable row: {why}: {show(' '.join(text.split()))}")


def _data_row(words: list[str]) -> bool:
    """Whether a (non-`#`) line of benchmark text is a data row, whole or cut
    off: it starts with a number and goes on with a number or ends within
    two words. NCCL INFO lines, warnings and MPI's messages ("1 more process
    has sent help message ...") are no data rows."""
    return bool(words) and _float(words[0]) is not None and (len(words) <= 2 or _float(words[1]) is not None)


def _nccl_row(words: list[str], columns: list[str] | None) -> tuple[float, float, tuple[str, str]] | str:
    """(size [B], out-of-place time [s], its cell) of an nccl-tests data row,
    or why it is unreadable. `columns`: the header line's column names, when
    seen."""
    size = _float(words[0])
    if size is None or size < 0:
        return f"size {words[0]!r} is not a number >= 0"
    if columns:
        if len(words) < len(columns):
            return f"cut off after {len(words)} of {len(columns)} columns"
        if "redop" in columns and words[columns.index("redop")].lower() not in REDOPS:
            return f"redop {words[columns.index('redop')]!r} is not an all-reduce's"
        token = words[columns.index("time")]
    else:  # no header line: size, count, type, redop, [root,] time, ...
        if len(words) < 6:
            return f"cut off after {len(words)} columns"
        rest = words[3:]
        if rest[0].lower() in REDOPS:
            rest = rest[1:]
            if rest[0].lstrip("-").isdigit() and len(rest) in (5, 9):  # a root column
                rest = rest[1:]
        token = rest[0]
    return _not_positive((NCCL_TIME, token)) or (size, _float(token) * 1e-6, (NCCL_TIME, token))


def read_nccl_tests(path) -> tuple[list[Measurement], dict, list[Anomaly]]:
    """(rows, layout, unreadable rows) of nccl-tests text; layout: ranks and
    nodes when printed."""
    ranks, hosts, rows, bad = 0, [], [], []
    columns = None  # the header line's column names: size count type redop [root] time ...
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
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
                elif words[:3] == ["size", "count", "type"] and "time" in words:
                    columns = words
                continue
            words = stripped.split()
            if not _data_row(words):
                continue  # e.g. NCCL INFO lines, warnings
            measured = _nccl_row(words, columns)
            if isinstance(measured, str):
                bad.append(_unreadable(number, measured, stripped))
            else:
                rows.append(Measurement(number, None, None, *measured))
    return rows, {"ranks": ranks or None, "nodes": len(hosts) or None}, bad


def _not_positive(*cells: tuple[str, str]) -> str | None:
    """Why the first of (name, text) cells that is not a finite number > 0 is not, or None."""
    for name, text in cells:
        value = _float(text)
        if value is None or value <= 0:
            return f"{name} = {text!r} is not a positive number"
    return None


def _whole(name: str, column: str, number: int, raw: str | None) -> int:
    """A CSV cell that must be a whole number >= 1 (nodes, gpus_per_node)."""
    value = _float(raw or "")
    if value is None or value < 1 or value != int(value):
        raise SpecError(column, raw, f"line {number} of {name}: must be a whole number >= 1")
    return int(value)


def _csv_rows(path, columns: tuple[str, ...], fmt: str, bad: list[Anomaly]):
    """(line, cells by column, the row's text) of each whole row of a
    benchmark CSV that needs `columns` (a header without one is a SpecError);
    rows cut off mid-line go to `bad`."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = [(c or "").strip() for c in reader.fieldnames or []]
        missing = [c for c in columns if c not in header]
        if missing:
            raise SpecError(missing[0], None, f"{Path(path).name}: column missing from the {fmt} header (it needs "
                                              f"{', '.join(columns)}; missing {', '.join(missing)})")
        for raw in reader:
            r = {k.strip(): v for k, v in raw.items() if k is not None}
            text = ",".join(v for v in r.values() if v is not None)
            if any(r.get(c) is None for c in columns):  # fewer fields than the header
                given = sum(v is not None for v in r.values())
                bad.append(_unreadable(reader.line_num, f"cut off after {given} of {len(header)} columns", text))
            else:
                yield reader.line_num, r, text


def read_nccl_tests_csv(path) -> tuple[list[Measurement], list[Anomaly]]:
    """(rows, unreadable rows) of an nccl-tests table as CSV."""
    rows, bad, name = [], [], Path(path).name
    for number, r, text in _csv_rows(path, NCCL_CSV_COLUMNS, "nccl-tests-csv", bad):
        nodes = _whole(name, "nodes", number, r["nodes"])
        gpus = _whole(name, "gpus_per_node", number, r["gpus_per_node"])
        why = _not_positive(("size_bytes", r["size_bytes"]), ("time_us_oop", r["time_us_oop"]))
        if why:
            bad.append(_unreadable(number, why, text))
        else:
            size, time = _float(r["size_bytes"]), _float(r["time_us_oop"])
            rows.append(Measurement(number, nodes, gpus, size, time * 1e-6, ("time_us_oop", r["time_us_oop"])))
    return rows, bad


def read_osu(path) -> tuple[list[Measurement], list[Anomaly]]:
    """(rows, unreadable rows) of OSU text."""
    rows, bad = [], []
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            words = line.split()
            if not words or line.lstrip().startswith("#") or not _data_row(words):
                continue
            why = "cut off after the size" if len(words) < 2 else _not_positive(("size", words[0]),
                                                                               (OSU_LATENCY, words[1]))
            if why:
                bad.append(_unreadable(number, why, line))
            else:
                rows.append(Measurement(number, None, None, _float(words[0]), _float(words[1]) * 1e-6,
                                        (OSU_LATENCY, words[1])))
    return rows, bad


def read_osu_csv(path, per_node: int) -> tuple[list[Measurement], list[Anomaly]]:
    """(rows, unreadable rows) of OSU latencies as CSV, `per_node` processes
    to a node. A `processes` cell that does not fill whole nodes is the
    layout's error (a SpecError), as a bad `nodes` cell is in an nccl-tests
    table; a size or latency that is no positive number, an unreadable row."""
    rows, bad, name = [], [], Path(path).name
    for number, r, text in _csv_rows(path, OSU_CSV_COLUMNS, "osu-csv", bad):
        processes = _whole(name, "processes", number, r["processes"])
        if processes % per_node:
            raise SpecError("gpus_per_node", per_node, f"{name} line {number}: {processes} "
                                                       f"processes do not fill nodes of {per_node}")
        why = _not_positive(("message_bytes", r["message_bytes"]), ("latency_us", r["latency_us"]))
        if why:
            bad.append(_unreadable(number, why, text))
        else:
            size, latency = _float(r["message_bytes"]), _float(r["latency_us"])
            rows.append(Measurement(number, processes // per_node, per_node, size, latency * 1e-6,
                                    ("latency_us", r["latency_us"])))
    return rows, bad


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
    line and cell (the time's column and text as written), anomalies left
    out, format) of a benchmark file."""
    fmt = fmt or detect(path)
    if fmt not in FORMATS[1:]:  # (calibrate.load_rows reads "csv" itself)
        raise SpecError("--format", fmt, f"not a benchmark format; choose {', '.join(FORMATS[1:])}")
    layout: dict = {}
    bad: list[Anomaly] = []  # unreadable rows
    try:
        if fmt == "nccl-tests":
            rows, layout, bad = read_nccl_tests(path)
        elif fmt == "nccl-tests-csv":
            rows, bad = read_nccl_tests_csv(path)
        elif fmt == "osu-csv":
            rows, bad = read_osu_csv(path, _per_node(base))
        else:
            rows, bad = read_osu(path)
    except SpecError:
        raise
    except (OSError, UnicodeDecodeError, KeyError, ValueError) as err:
        raise SpecError("data", str(path), f"cannot read {fmt} output ({err.__class__.__name__}: {err})")
    if not rows:
        first = f"; line {bad[0].line}: {bad[0].reason}" if bad else ""
        raise SpecError("data", str(path), f"no measurements found in this {fmt} output{first}")
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
    odd = sorted(odd + bad, key=lambda a: a.line)
    out = [{"nodes": r.nodes, "gpus_per_node": r.gpus_per_node, "message_bytes": r.message_bytes,
            "allreduce_time": r.seconds, "line": r.line, "cell": r.cell} for r in resolved if r.line not in skip]
    return out, odd, fmt
