"""Validation against measurements: S-SGD throughput on a 10GbE cluster.

Data: ../shared/data/ddl_benchmarks_10gbe.csv, measured by the HKBU
ddl-benchmarks (Shi et al., "Communication-Efficient Distributed Deep
Learning: Survey, Evaluation, and Challenges", results of 2020-05-29):
ResNet-50 (batch 64), BERT-Base (batch 64) and BERT-Large (batch 8), sequence
length 64, PyTorch on 1 to 32 GPUs, 4 GPUs per node on PCIe 3.0, nodes on
10GbE (TCP), seven ways of exchanging gradients.

How the seven methods map onto the model (`scenario_keys`):
  BSP-A2A            strategy bsp     all-reduce after the backward pass
  WFBP-A2A           strategy wfbp    one all-reduce per tensor (Horovod, threshold 0)
  MG-WFBP            strategy mgwfbp  the model's own merged-gradient rule
  ByteScheduler-A2A  strategy wfbp    per tensor; NOT modelled: ByteScheduler's
                                      partitioning, credit-based priority scheduling
                                      and overlap of communication with the next
                                      forward pass (the DAG's FIFO channel and update
                                      barrier cannot express them), so it is
                                      predicted as WFBP-A2A
  BSP-PS, WFBP-PS    strategy bsp / wfbp, algorithm ps (BytePS: S = nodes servers
                     on machines of their own) with ps.pipelined, as BytePS streams
                     tensor partitions through local reduce, push and pull
  ByteScheduler-PS   as WFBP-PS (same caveat as ByteScheduler-A2A)
The all-to-all methods (NCCL through Horovod/PyTorch) use algorithm `rhd`:
a log-depth latency term (NCCL runs trees for small tensors) with the
bandwidth term of a ring. On one node the PS methods are modelled as a local
all-reduce: the measurements show no network cost there (BSP-PS is within
6 % of BSP-A2A on 4 GPUs for every model). Every row's compute comes from
the measured single-GPU throughput (`compute.measured_throughput`, the
1-GPU rows); GPUs are RTX 2080 Ti, links start from the catalog's pcie3 and
10gbe. The fit (`sweep.calibrate`, shared by all rows) sets the intra link
(alpha, bandwidth) and the inter link (alpha, bandwidth, and a protocol
switch with a second latency/bandwidth pair for large messages).

Two tasks, each against a naive baseline computed here:
  (a) scale-out: calibrate on rows with <= 8 GPUs, predict 16 and 32 GPUs;
      naive: linear from 8 GPUs (throughput(P) = throughput(8) * P / 8);
  (b) cross-method: calibrate on WFBP-A2A rows only (every GPU count), predict
      the other six methods at >= 8 GPUs; naive: the WFBP-A2A throughput.

    python experiments/validate_ddl.py [--quick] [--out DIR] [--data CSV]

Writes table.md (median and max relative error of model and baseline, per
task and per method), predictions.csv (every predicted row) and the two
FIT.toml files.
"""
from __future__ import annotations

import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sweep.calibrate import Options, calibrate, predict_rows, read_base, read_rows, summary
from sweep.report import markdown_table, require_data, study_arguments, write_text

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "ddl_benchmarks_10gbe.csv"
BASE = 'gpu = "rtx2080ti"\nintra = "pcie3"\ninter = "10gbe"\n'
FIT = ("intra.alpha", "intra.bandwidth", "inter.alpha", "inter.bandwidth",
       "inter.protocol_bytes", "inter.large_alpha", "inter.large_bandwidth")
METHODS = {  # method -> (strategy, family)
    "BSP-A2A": ("bsp", "a2a"), "WFBP-A2A": ("wfbp", "a2a"), "MG-WFBP": ("mgwfbp", "a2a"),
    "ByteScheduler-A2A": ("wfbp", "a2a"), "BSP-PS": ("bsp", "ps"), "WFBP-PS": ("wfbp", "ps"),
    "ByteScheduler-PS": ("wfbp", "ps"),
}
COLUMNS = ("model", "batch_size", "seq_len", "nodes", "gpus_per_node", "strategy", "algorithm", "ps.pipelined",
           "compute.measured_throughput", "throughput")
FULL = Options()
QUICK = Options(starts=2, steps=300, polish=100)


def load(path: Path) -> tuple[list[dict], dict[str, float]]:
    """(multi-GPU records, single-GPU throughput per model) from the CSV."""
    with open(path, newline="") as handle:
        records = list(csv.DictReader(handle))
    single = {r["dnn"]: float(r["throughput"]) for r in records if r["method"] == "single-gpu"}
    rows = [r for r in records if r["method"] != "single-gpu"]
    for r in rows:
        r["gpus"], r["nodes"], r["gpus_per_node"] = int(r["gpus"]), int(r["nodes"]), int(r["gpus_per_node"])
        r["throughput"] = float(r["throughput"])
        if r["method"] not in METHODS:
            raise SystemExit(f"validate_ddl: unknown method {r['method']!r} in {path}")
    return rows, single


def scenario_keys(record: dict, single: dict[str, float]) -> dict:
    """The scenario of one measured configuration (the mapping in the docstring)."""
    strategy, family = METHODS[record["method"]]
    keys = {"model": record["dnn"], "batch_size": int(record["batch_size"]),
            "seq_len": int(float(record["seq_len"])) if record["seq_len"] else "",
            "nodes": record["nodes"], "gpus_per_node": record["gpus_per_node"], "strategy": strategy,
            "algorithm": "rhd", "ps.pipelined": "", "compute.measured_throughput": single[record["dnn"]]}
    if family == "ps" and record["nodes"] > 1:
        keys.update({"algorithm": "ps", "ps.pipelined": "true"})
    return keys


def write_rows(path: Path, records: list[dict], single: dict, measured: bool) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for r in records:
            keys = scenario_keys(r, single)
            writer.writerow([keys[c] for c in COLUMNS[:-1]] + [r["throughput"] if measured else ""])
    return path


def run_task(name: str, train: list[dict], test: list[dict], naive: np.ndarray, single: dict, out: Path,
             options: Options, label: str) -> dict:
    """Calibrate on `train`, predict `test`; errors of the model and the baseline.
    The mapped rows live in a temporary folder: no copy of the data stays."""
    fit_path = out / f"fit_{name}.toml"
    with tempfile.TemporaryDirectory() as folder:
        data = write_rows(Path(folder) / "train.csv", train, single, measured=True)
        query = write_rows(Path(folder) / "query.csv", test, single, measured=False)
        base = Path(folder) / "base.toml"
        base.write_text(BASE)
        result, _ = calibrate(data, FIT, base, fit_path, options, label=f"{DATA.name}: {label}")
        _, rows = read_rows(query, read_base(fit_path), need_target=False)
    print(f"{name}:\n{summary(result)}", file=sys.stderr)
    predicted = predict_rows(rows, ["throughput"])["throughput"]
    measured = np.array([r["throughput"] for r in test])
    return {"name": name, "test": test, "predicted": predicted, "naive": naive, "measured": measured,
            "model_error": np.abs(predicted / measured - 1), "naive_error": np.abs(naive / measured - 1),
            "fit": result}


def scale_out(records, single, out, options):
    train = [r for r in records if r["gpus"] <= 8]
    test = [r for r in records if r["gpus"] >= 16]
    at8 = {(r["dnn"], r["method"]): r["throughput"] for r in records if r["gpus"] == 8}
    naive = np.array([at8[(r["dnn"], r["method"])] * r["gpus"] / 8 for r in test])
    return run_task("scale_out", train, test, naive, single, out, options,
                    "rows with <= 8 GPUs, mapped by experiments/validate_ddl.py")


def cross_method(records, single, out, options):
    train = [r for r in records if r["method"] == "WFBP-A2A"]
    test = [r for r in records if r["method"] != "WFBP-A2A" and r["gpus"] >= 8]
    wfbp = {(r["dnn"], r["gpus"]): r["throughput"] for r in train}
    naive = np.array([wfbp[(r["dnn"], r["gpus"])] for r in test])
    return run_task("cross_method", train, test, naive, single, out, options,
                    "WFBP-A2A rows, mapped by experiments/validate_ddl.py")


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def table(tasks: list[dict]) -> str:
    labels = {"scale_out": "(a) scale-out: fit <= 8 GPUs, predict 16 and 32",
              "cross_method": "(b) cross-method: fit WFBP-A2A, predict the others at >= 8 GPUs"}
    summary_rows = []
    for t in tasks:
        m, n = t["model_error"], t["naive_error"]
        summary_rows.append([labels[t["name"]], len(m), pct(np.median(m)), pct(m.max()), pct(np.median(n)),
                             pct(n.max())])
    text = markdown_table(["task", "rows", "model median", "model max", "naive median", "naive max"], summary_rows)
    for t in tasks:
        text += f"\n{labels[t['name']]}, per method (median relative error, model / naive):\n\n"
        methods = [m for m in METHODS if any(r["method"] == m for r in t["test"])]
        rows = []
        for method in methods:
            pick = np.array([r["method"] == method for r in t["test"]])
            rows.append([method, int(pick.sum()), pct(np.median(t["model_error"][pick])),
                         pct(np.median(t["naive_error"][pick]))])
        text += markdown_table(["method", "rows", "model", "naive"], rows)
        fit = t["fit"]
        values = ", ".join(f"{k} = {fit.values[k]:.3g}" for k in fit.keys)
        text += (f"\nFitted on {fit.observations} rows (median {pct(fit.median_relative_error)}, "
                 f"max {pct(fit.max_relative_error)} in-sample): {values}.\n")
    return text


def write_predictions(path: Path, tasks: list[dict]) -> None:
    """Every predicted row with both errors (the measurements stay in ../shared/data)."""
    lines = [["task", "model", "method", "gpus", "predicted", "model_error", "naive_error"]]
    for t in tasks:
        for r, p, em, en in zip(t["test"], t["predicted"], t["model_error"], t["naive_error"]):
            lines.append([t["name"], r["dnn"], r["method"], r["gpus"], f"{p:.6g}", f"{em:.4f}", f"{en:.4f}"])
    write_text(path, "".join(",".join(str(c) for c in line) + "\n" for line in lines))


def main(argv=None) -> int:
    args = study_arguments("validate_ddl", __doc__.splitlines()[0], argv)
    require_data("validate_ddl", DATA)
    started = time.perf_counter()
    records, single = load(DATA)
    options = QUICK if args.quick else FULL
    tasks = [scale_out(records, single, args.out, options), cross_method(records, single, args.out, options)]
    text = table(tasks)
    write_text(args.out / "table.md", text)
    write_predictions(args.out / "predictions.csv", tasks)
    print(text)
    print(f"validate_ddl: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
