"""Reading a file in the ddl-benchmarks 10GbE file's format.

Columns dnn, batch_size, seq_len (optional), network, method, gpus, nodes,
gpus_per_node, throughput; one row per measured configuration, the
`single-gpu` rows giving each model's measured single-GPU throughput.
Every cell is checked as it is read: a bad one exits 2 with one line
naming its column, value and line (`sweep.study_error`).
"""
from __future__ import annotations

import csv
import math
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from sweep import study_error
from sweep.graph import zoo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ddl_mapping import METHODS  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "ddl_benchmarks_10gbe.csv"


def load(path: Path, single_path: Path | None = None) -> tuple[list[dict], dict[str, float]]:
    """(multi-GPU records, single-GPU throughput per model) from the CSV.
    A model's single-GPU throughput is its `single-gpu` row's; else the
    median of its one-GPU rows of any method (one GPU uses no network), with
    a note; else the `single-gpu` row of `single_path` (`--single`: another
    file of the same GPUs). One-GPU rows train nothing; rows of a method
    the mapping does not know are left out with a note naming them (exit 2
    where no multi-GPU row of a known method is left; a method or model
    spelled another way is the name it spells: `spelled`). A bad cell
    exits 2 with one line naming its column, value and line."""
    records = read_records(path)
    unknown = Counter(r["method"] for r in records if r["method"] not in (*METHODS, "single-gpu"))
    records = [r for r in records if r["method"] not in unknown]
    rows = [r for r in records if r["method"] != "single-gpu" and r["gpus"] > 1]
    if not rows and unknown:  # a misspelt method, say
        study_error("validate_ddl", "method", next(iter(unknown)),
                    f"{path}: no multi-GPU row of a method the mapping knows ({', '.join(METHODS)})")
    if not rows:
        study_error("validate_ddl", "data", str(path), "holds no row on more than one GPU")
    if unknown:  # a file may hold more methods than the 10GbE one
        print(f"validate_ddl: {path}: rows of {', '.join(f'{m!r} ({n})' for m, n in unknown.items())} left out: "
              f"the mapping knows {', '.join(METHODS)} and single-gpu", file=sys.stderr)
    single = {r["dnn"]: r["throughput"] for r in records if r["method"] == "single-gpu"}
    one_gpu = {}
    for r in records:
        if r["method"] != "single-gpu" and r["gpus"] == 1 and r["dnn"] not in single:
            one_gpu.setdefault(r["dnn"], []).append(r["throughput"])
    for dnn, throughputs in one_gpu.items():
        single[dnn] = float(np.median(throughputs))
        print(f"validate_ddl: {dnn} has no single-gpu row: its single-GPU throughput is the median of its "
              f"{len(throughputs)} one-GPU row(s), {single[dnn]:.6g}", file=sys.stderr)
    if single_path is not None:
        batches = {(r["dnn"], r["batch_size"], r["seq_len"]) for r in rows}
        models = {r["dnn"] for r in rows}
        for r in read_records(single_path):
            if r["method"] != "single-gpu" or r["dnn"] in single or r["dnn"] not in models:
                continue
            if (r["dnn"], r["batch_size"], r["seq_len"]) not in batches:
                study_error("validate_ddl", "batch_size", r["batch_size"],
                            f"{single_path}: {r['dnn']}'s single-gpu row is not at the batch size and "
                            f"sequence length of {path}'s rows")
            single[r["dnn"]] = r["throughput"]
            print(f"validate_ddl: {r['dnn']} has no one-GPU row: its single-GPU throughput is {single_path.name}'s "
                  f"single-gpu row, {r['throughput']:.6g}", file=sys.stderr)
    for r in rows:
        if r["dnn"] not in single:
            study_error("validate_ddl", "dnn", r["dnn"],
                        f"{path}: has no single-gpu row to give its measured throughput "
                        f"(--single FILE takes it from another file of the same GPUs)")
    return rows, single


# The columns a data file needs (seq_len, throughput_std and others may be absent).
DATA_COLUMNS = ("dnn", "batch_size", "network", "method", "gpus", "nodes", "gpus_per_node", "throughput")
# The names a cell may spell another way ("wfbp_a2a", "ResNet-50", "BERT Base"): case, spaces,
# hyphens and underscores aside, a method the mapping knows, or a model of the zoo.
METHOD_NAMES = (*METHODS, "single-gpu")
DNN_NAMES = tuple(zoo.MODEL_NAMES)


def spelled(cell: str | None, names: tuple[str, ...]) -> str:
    """`cell` as the one of `names` it spells, case and separators aside
    (where exactly one does: gpt3_1.3b and gpt3_13b spell alike); else as
    given, stripped."""
    text = (cell or "").strip()
    if text in names:
        return text
    matches = [n for n in names if _letters_and_digits(n) == _letters_and_digits(text)]
    return matches[0] if len(matches) == 1 else text


def _letters_and_digits(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def read_records(path: Path) -> list[dict]:
    """Every row of a file in the 10GbE file's format, its numbers parsed."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    # Column names as the 10GbE file writes them, whatever their case and surrounding spaces.
    columns = [c.strip().lower() for c in next(csv.reader(lines[:1]), [])]
    records = list(csv.DictReader(lines[1:], fieldnames=columns))
    lacking = [c for c in DATA_COLUMNS if c not in columns]
    if lacking:
        study_error("validate_ddl", "columns", ", ".join(columns), f"{path}: needs {', '.join(lacking)} too")
    for line, r in enumerate(records, start=2):
        r["method"], r["dnn"] = spelled(r["method"], METHOD_NAMES), spelled(r["dnn"], DNN_NAMES)
        r["seq_len"] = r.get("seq_len") or ""  # optional: models without a sequence
        for column in ("batch_size", "seq_len"):  # kept as text; scenario_keys reads them as numbers
            if (r[column] or column == "batch_size") and not re.fullmatch(r"\d+(\.0*)?", (r[column] or "").strip()):
                study_error("validate_ddl", column, r[column], f"{path}, line {line}: not a whole number")
        for column, kind in (("gpus", int), ("nodes", int), ("gpus_per_node", int), ("throughput", float)):
            try:
                r[column] = kind(r.get(column))
            except (TypeError, ValueError):
                study_error("validate_ddl", column, r.get(column), f"{path}, line {line}: not a number")
            if not (math.isfinite(r[column]) and r[column] > 0):
                study_error("validate_ddl", column, r[column], f"{path}, line {line}: must be positive")
        if r["gpus"] != r["nodes"] * r["gpus_per_node"]:
            study_error("validate_ddl", "gpus", r["gpus"], f"{path}, line {line}: not nodes x gpus_per_node "
                                                          f"({r['nodes']} x {r['gpus_per_node']})")
    return records
