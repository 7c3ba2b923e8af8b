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
  MG-WFBP            strategy mgwfbp  the merged-gradient rule, its buckets planned as its
                                      code plans them (`MGWFBP_PLANNER`: its own alpha-beta
                                      table by process count, tensors under 8,192
                                      parameters merged)
  ByteScheduler-A2A  strategy priority, update layerwise: ByteScheduler's partitions
                                      and credit as its launcher set them (16 MB, 64 MB:
                                      `BYTESCHEDULER_A2A`), priority order and overlap with
                                      the next forward pass; each forward and backward task
                                      at least `compute.task_floor`, fitted to its one-node
                                      rows (`with_task_floor`: its plugin's Python poller).
                                      Its rows inform that floor alone, never the links.
                                      Task c also maps it as WFBP-A2A (per tensor), with
                                      the same floor, side by side
  BSP-PS, WFBP-PS    strategy bsp / wfbp, algorithm ps (BytePS: S = nodes servers
                     on machines of their own) with ps.pipelined, as BytePS streams
                     tensor partitions through local reduce, push and pull; push/pull
                     at a bandwidth of their own (`ps.bandwidth`, fitted when the
                     training rows hold multi-node PS rows: `fit_keys`; else the
                     inter line rate where the fitted links fill the wire:
                     `PS_FILLS_WIRE`)
  ByteScheduler-PS   as WFBP-PS: BytePS with scheduling at the servers, whose update
                     is a barrier (not ByteScheduler's layer-wise plugin)
The all-to-all methods (NCCL through Horovod/PyTorch) use algorithm `nccl`:
NCCL's ring with its LL, LL128 and Simple protocols, the fastest for each
bucket (kernels/nccl.py); it replaced `rhd` with the inter link's latency
per step growing as NCCL's tree's inter-node steps do (`TREE_ALPHA_EXPONENT`,
which still sets how the PS methods' push/pull latency grows): README
"Validation against measurements" has both side by side.
On one node the PS methods are modelled as a local all-reduce: the
measurements show no network cost there (BSP-PS is within 6 % of BSP-A2A on
4 GPUs for every model). Every row's compute comes from
the measured single-GPU throughput (`compute.measured_throughput`, the
1-GPU rows); GPUs are RTX 2080 Ti, links start from the catalog's pcie3 and
10gbe, the intra link's latency from NCCL's LL hop on PCIe (1 us:
`catalog.nccl_ll_hop`). BERT is BertForPreTraining, as the benchmark code trains
it (`MODELS`: the zoo's `bert_*_pretraining`, with the masked-LM and
next-sentence heads). The fit (`sweep.fit.calibrate`, shared by all rows) sets the intra link
(alpha, bandwidth), the inter link (alpha, bandwidth) and the software
overhead of one all-reduce call on each (`FIT`), and where multi-node PS
rows train, what only their push/pull reads (`PS_FIT`: the inter link's
protocol switch with a second latency/bandwidth pair, and `ps.bandwidth`),
within the physical bounds (bandwidths at most the wire allows at the line
rate).

Three tasks, each against a naive baseline computed here:
  (a) scale-out: calibrate on rows with <= 8 GPUs, predict 16 and 32 GPUs;
      naive: linear from 8 GPUs (throughput(P) = throughput(8) * P / 8);
  (b) cross-method: calibrate on WFBP-A2A rows only (every GPU count), predict
      the other six methods at >= 8 GPUs; naive: the WFBP-A2A throughput.
  (c) ByteScheduler: calibrate on the five other methods (every GPU count),
      predict the ByteScheduler rows at >= 8 GPUs, once mapped as WFBP and
      once as the priority strategy (the same fit); naive: the nearest
      training row (the same model and GPUs with WFBP) scaled linearly.
A task whose rows the file does not hold (no ByteScheduler rows, say) is
skipped with a note (`missing_rows`); a file that holds none exits 2.

    python experiments/validate_ddl.py [--quick] [--out DIR] [--data CSV] [--base TOML] [--single CSV]
                                       [--prior SIGMA] [--tail T]

`--data` takes any file in the 10GbE file's format (columns dnn, batch_size,
seq_len, network, method, gpus, nodes, gpus_per_node, throughput; the
single-gpu rows give each model's measured throughput, else its one-GPU
rows of any method; `--single` takes them from another file of the same
GPUs, e.g. the 10GbE file, for models the data has neither of); `--base` a scenario
of fixed keys under every row (default: rtx2080ti GPUs and pcie3, `BASE`),
e.g. another GPU and network for another cluster. Unless the base names
the inter link, it is the catalog link the file's `network` names
(`link_of_network`: "10gbe-tcp" -> 10gbe, "100GbE RoCE" -> 100gbe,
"100Gb InfiniBand" or "IB EDR" -> ib-edr; 10gbe, with a note, where it
names none). The mapping adds `inter.alpha_exponent = TREE_ALPHA_EXPONENT` to any base that
does not set it, NCCL's LL hop latency as `intra.alpha` to any base
that does not set the intra link's latency, and, where the file's
`network` says TCP (or IPoIB), the base's fabric as used through TCP
(`through_tcp`: `100gbe` -> `100gbe-tcp`, the socket stack's latency)
unless the base sets the inter link's latency (`mapped_base`); a file of
several networks runs once per network, each into OUT/<network>/. The folds
run through `sweep.validate` (the same code as `ssgd-sweep validate`), so
each task also reports the in-sample errors of its fit and the coverage of
the 90 % prediction intervals on the held-out rows.

Writes table.md (median and max relative error of model and baseline, per
task and per method), predictions.csv (every predicted row) and the two
FIT.toml files.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import io
import math
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tomli_w

from sweep import (METHOD_COLUMN, Fold, FitOptions, fit_document, fit_summary, interval_score, make_folds,
                   markdown_table, read_base, read_rows, require_data, run_fold, study_arguments, study_error,
                   study_fit_options, write_text)
from sweep.errors import SpecError
from sweep.fit import optimise
from sweep.scenario import catalog
from sweep.scenario.schema import KEYS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from network_labels import label_words, link_of_network, says_tcp  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "ddl_benchmarks_10gbe.csv"
# The inter link's latency per step grows with the processes as NCCL's tree
# does: `rhd` charges 2 ceil(log2 P) steps, NCCL's tree 2 ceil(log2 n)
# inter-node steps (its intra-node chain is on the intra link), so from 8 to
# 32 GPUs at 4 per node rhd's steps grow 10/6 and the tree's 6/2; latency per
# step times (P/2)**e makes the first the second when 4**e = 1.8 (e = 0.42;
# exact at 8 and 32 GPUs, 1.79x against 2x at 16). README: tried and kept.
TREE_ALPHA_EXPONENT = 0.42
# NCCL's protocols for every all-reduce (the A2A methods, and the PS methods'
# local reduce on one node): held out, (a) 4.0 / 25.5 -> 4.0 / 18.9 % and
# (b) 8.9 / 31.2 -> 6.6 / 40.0 % against `rhd` with TREE_ALPHA_EXPONENT (README).
ALLREDUCE = "nccl"
# The 10GbE cluster's GPU and intra link; the inter link is the one the data's
# `network` names (`link_of_network`: 10gbe for the 10GbE file).
BASE = ('gpu = "rtx2080ti"\nintra = "pcie3"\n\n[inter]\n'
        f'alpha_exponent = {TREE_ALPHA_EXPONENT}\n')
# The links' latency and bandwidth, plus the per-call software overhead of
# each link: it halved the cross-method error out of sample (README
# "Validation against measurements": what was tried, kept and dropped).
FIT = ("intra.alpha", "intra.bandwidth", "inter.alpha", "inter.bandwidth", "intra.overhead", "inter.overhead")
# What only the parameter servers' push/pull reads (the all-reduce methods run
# NCCL's protocols, `ALLREDUCE`, which the link's protocol switch does not
# shape): that switch and its large-message pair, and BytePS's own push/pull
# bandwidth (its prior: the inter link's base bandwidth). Fitted only where
# the training rows hold a multi-node PS row to tell them: unfitted, a key no
# row informs would rest wherever its start put it.
PS_FIT = ("inter.protocol_bytes", "inter.large_alpha", "inter.large_bandwidth", "ps.bandwidth")
# ByteScheduler-A2A's PyTorch plugin polls every tensor's readiness and
# all-reduce, and runs each tensor's update, in a Python thread that spins
# on one queue beside the training loop (bytescheduler/pytorch/horovod.py
# `_poll`): measured on one node, ResNet-50 runs at 0.65x WFBP-A2A with
# nothing to wait for on PCIe, and at about 0.39 s per iteration from 4
# to 16 GPUs. A least time per forward and backward task describes a host
# that launches light layers no faster than that. Its rows alone take it,
# fitted to its one-node rows (`with_task_floor`); README: tried and kept.
FLOOR_FIT = ("compute.task_floor",)
# Where no multi-node PS row trains, nothing tells BytePS's push/pull bandwidth
# (`ps.bandwidth`), and by default it runs at the collective library's. Where
# that library already fills most of the wire (its fitted inter bandwidth at
# least PS_FILLS_WIRE of the line rate), the wire, not the stack, limits, and
# BytePS's push/pull runs at the line rate: every fit with PS rows puts it
# there (1.28 GB/s on 10GbE's 1.25, against NCCL's 1.10-1.16). Below that
# share the stack limits both alike (TCP on a faster fabric), and push/pull
# keeps the collective's bandwidth. README: tried and kept.
PS_FILLS_WIRE = 0.8
FLOORED_METHODS = ("ByteScheduler-A2A",)
# The benchmark code trains BERT as Hugging Face's BertForPreTraining (ddl-benchmarks,
# */bert_benchmark.py): its masked-LM and next-sentence heads on top of the encoder,
# the decoder onto the vocabulary tied to the word embeddings. README: tried and kept.
MODELS = {"bert_base": "bert_base_pretraining", "bert_large": "bert_large_pretraining"}
METHODS = {  # method -> (strategy, family)
    "BSP-A2A": ("bsp", "a2a"), "WFBP-A2A": ("wfbp", "a2a"), "MG-WFBP": ("mgwfbp", "a2a"),
    "ByteScheduler-A2A": ("wfbp", "a2a"), "BSP-PS": ("bsp", "ps"), "WFBP-PS": ("wfbp", "ps"),
    "ByteScheduler-PS": ("wfbp", "ps"),
}
# MG-WFBP as the measured code plans it (ddl-benchmarks, mgwfbp/hv_distributed_optimizer.py,
# `_generate_groups_mgwfbp`, with layer-wise times given, as its imagenet and bert benchmarks do):
# its own all-reduce model alpha + beta * bytes from a table by process count, and tensors of
# under 8,192 parameters always merged. Its launcher (mgwfbp/horovod_mpi_cj.sh) takes the 10GbE
# table on 10GbE and passes --rdma, the InfiniBand table, on the 100 Gb fabric (RDMA or TCP).
MGWFBP_PLANNER = {  # workers -> (alpha [s], beta [s/byte])
    "10gbe": {2: (2.554691138304671e-06, 9.837548167872609e-11), 4: (4.204298980348825e-05, 2.0589360830118177e-10),
              8: (5.230272768511732e-04, 8.570746975492128e-10), 16: (9.080981007148093e-04, 7.395651186836712e-10),
              32: (3 * 1.3476410788581382e-03, 8.643300782166769e-10),
              64: (3 * 2.3476410788581382e-03, 9.643300782166769e-10)},
    "ib": {2: (2.554691138304671e-06, 9.837548167872609e-11), 4: (4.204298980348825e-05, 2.0589360830118177e-10),
           8: (9.75367204301171e-05, 3.0568230536676206e-10), 16: (3 * 2.3583677659915685e-04, 4.0594787739537565e-10),
           32: (4.0632079996292579e-04, 1.5 * 3.2713239529771973e-10),
           64: (8.0632079996292579e-04, 1.8 * 3.2713239529771973e-10)},
}
MGWFBP_MIN_PARAMS = 8192
COLUMNS = ("method", "model", "batch_size", "seq_len", "nodes", "gpus_per_node", "strategy", "algorithm",
           "ps.pipelined", "update", "partition_bytes", "credit_bytes", "mgwfbp.alpha", "mgwfbp.bandwidth",
           "mgwfbp.min_params", "compute.measured_throughput", "throughput")
BYTESCHEDULER = ("ByteScheduler-A2A", "ByteScheduler-PS")
# ByteScheduler-A2A as the measured code ran it (ddl-benchmarks
# bytescheduler/horovod_mpi_cj.sh): ByteScheduler's PyTorch
# ScheduledOptimizer, whose forward pre-hooks wait for each layer's update
# (update = "layerwise"), with BYTESCHEDULER_PARTITION = 4,000,000 and
# BYTESCHEDULER_CREDIT = 16,000,000 *parameters* (its core counts a tensor's
# elements: bytescheduler/pytorch/horovod_task.py `_tensor_size`), float32:
# 16 MB partitions and a 64 MB credit, credit tuning off. (Its own defaults,
# 1,000,000 and 4,000,000 parameters, were this mapping's before: README.)
# ByteScheduler-PS is not that plugin: byteps/launch.sh with bytescheduler=1
# runs BytePS's own DistributedOptimizer, whose step() waits for every
# push/pull (an update barrier, which the priority strategy does not
# describe), with scheduling at the servers (BYTEPS_SERVER_ENABLE_SCHEDULE):
# it keeps WFBP-PS's mapping in both.
BYTESCHEDULER_A2A = {"strategy": "priority", "update": "layerwise", "partition_bytes": 16_000_000,
                     "credit_bytes": 64_000_000.0}
FULL = FitOptions()
QUICK = FitOptions(starts=2, steps=300, polish=100)


def load(path: Path, single_path: Path | None = None) -> tuple[list[dict], dict[str, float]]:
    """(multi-GPU records, single-GPU throughput per model) from the CSV.
    A model's single-GPU throughput is its `single-gpu` row's; else the
    median of its one-GPU rows of any method (one GPU uses no network), with
    a note; else the `single-gpu` row of `single_path` (`--single`: another
    file of the same GPUs). One-GPU rows train nothing. A bad cell exits 2
    with one line naming its column, value and line."""
    records = read_records(path)
    single = {r["dnn"]: r["throughput"] for r in records if r["method"] == "single-gpu"}
    one_gpu = {}
    for r in records:
        if r["method"] != "single-gpu" and r["gpus"] == 1 and r["dnn"] not in single:
            one_gpu.setdefault(r["dnn"], []).append(r["throughput"])
    for dnn, throughputs in one_gpu.items():
        single[dnn] = float(np.median(throughputs))
        print(f"validate_ddl: {dnn} has no single-gpu row: its single-GPU throughput is the median of its "
              f"{len(throughputs)} one-GPU row(s), {single[dnn]:.6g}", file=sys.stderr)
    rows = [r for r in records if r["method"] != "single-gpu" and r["gpus"] > 1]
    if not rows:
        study_error("validate_ddl", "data", str(path), "holds no row on more than one GPU")
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
    for r in rows:
        if r["dnn"] not in single:
            study_error("validate_ddl", "dnn", r["dnn"],
                        f"{path}: has no single-gpu row to give its measured throughput "
                        f"(--single FILE takes it from another file of the same GPUs)")
    return rows, single


# The columns a data file needs (seq_len, throughput_std and others may be absent).
DATA_COLUMNS = ("dnn", "batch_size", "network", "method", "gpus", "nodes", "gpus_per_node", "throughput")


def read_records(path: Path) -> list[dict]:
    """Every row of a file in the 10GbE file's format, its numbers parsed."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(line for line in handle if not line.startswith("#"))
        records = list(reader)
        columns = reader.fieldnames or []
    lacking = [c for c in DATA_COLUMNS if c not in columns]
    if lacking:
        study_error("validate_ddl", "columns", ", ".join(columns), f"{path}: needs {', '.join(lacking)} too")
    for line, r in enumerate(records, start=2):
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
        if r.get("method") not in (*METHODS, "single-gpu"):
            study_error("validate_ddl", "method", r.get("method"),
                        f"{path}, line {line}: one of {', '.join(METHODS)} or single-gpu")
    return records


def scenario_keys(record: dict, single: dict[str, float], priority: bool = True) -> dict:
    """The scenario of one measured configuration (the mapping in the docstring);
    `priority` maps ByteScheduler-A2A onto the priority strategy."""
    strategy, family = METHODS[record["method"]]
    keys = {"model": MODELS.get(record["dnn"], record["dnn"]), "batch_size": int(float(record["batch_size"])),
            "seq_len": int(float(record["seq_len"])) if record["seq_len"] else "",
            "nodes": record["nodes"], "gpus_per_node": record["gpus_per_node"], "strategy": strategy,
            "algorithm": ALLREDUCE, "ps.pipelined": "", "update": "", "partition_bytes": "", "credit_bytes": "",
            "compute.measured_throughput": single[record["dnn"]]}
    if priority and record["method"] == "ByteScheduler-A2A":
        keys.update(BYTESCHEDULER_A2A)
    if family == "ps" and record["nodes"] > 1:
        keys.update({"algorithm": "ps", "ps.pipelined": "true"})
    keys.update({"mgwfbp.alpha": "", "mgwfbp.bandwidth": "", "mgwfbp.min_params": ""})
    if strategy == "mgwfbp":
        alpha, beta = mgwfbp_planner(record["network"], record["gpus"])
        keys.update({"mgwfbp.alpha": alpha, "mgwfbp.bandwidth": 1.0 / beta, "mgwfbp.min_params": MGWFBP_MIN_PARAMS})
    return keys


def mgwfbp_planner(network: str, workers: int) -> tuple[float, float]:
    """(alpha, beta) of MG-WFBP's own all-reduce model for `workers` processes:
    its 10GbE table when the network's name says 10GbE, else (the faster
    fabric) its InfiniBand table; a count the table lacks takes the nearest
    one (in log)."""
    table = MGWFBP_PLANNER["10gbe" if link_of_network(network) == "10gbe" else "ib"]
    nearest = min(table, key=lambda p: abs(math.log(p / workers)))
    return table[nearest]


def write_rows(path: Path, records: list[dict], single: dict, measured: bool, priority: bool = True) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for r in records:
            keys = {**scenario_keys(r, single, priority), "method": r["method"]}
            writer.writerow([keys[c] for c in COLUMNS[:-1]] + [r["throughput"] if measured else ""])
    return path


def fit_keys(train: list[dict]) -> list[str]:
    """`FIT`, and the keys only the PS methods' push/pull reads when the
    training rows hold a multi-node PS row to tell them (`PS_FIT`)."""
    has_ps = any(METHODS[r["method"]][1] == "ps" and r["nodes"] > 1 for r in train)
    return list(FIT) + (list(PS_FIT) if has_ps else [])


def link_rows(records: list[dict], fold: Fold, methods: tuple[str, ...]) -> tuple[int, ...]:
    """The fold's training rows that fit the links: all but those of `methods`."""
    return tuple(i for i in fold.train if records[i]["method"] not in methods)


def link_fit(rows: list, records: list[dict], fold: Fold, fitted: list[str], base: dict, options: FitOptions,
             methods: tuple[str, ...]):
    """The links fitted on the fold's training rows but those of `methods`
    (ByteScheduler-A2A's, which inform its least task time alone), as a
    callable that fits once, when first asked: what the floor and BytePS's
    push/pull bandwidth are set on, and the fold's fit."""
    train = link_rows(records, fold, methods)
    return functools.cache(lambda: optimise.fit([rows[i] for i in train], fitted, base, options))


def ps_bandwidth_at_line_rate(records: list[dict], fold: Fold, fitted: list[str], links) -> float | None:
    """BytePS's push/pull bandwidth for the held-out PS rows when no training
    row tells it (`PS_FILLS_WIRE`): the inter line rate if the links
    (`link_fit`) reach at least that share of it, else None (the
    collective's bandwidth)."""
    if "ps.bandwidth" in fitted or not any(METHODS[records[i]["method"]][1] == "ps" and records[i]["nodes"] > 1
                                           for i in fold.test):
        return None
    rate = links().line_rates.get("inter.line_rate")
    if rate is None or links().values["inter.bandwidth"] < PS_FILLS_WIRE * rate:
        return None
    return float(rate)


def with_point(rows: list, key: str, value: float, which=lambda i: True) -> list:
    """`rows` with `key` set to `value` (a given, not fitted, key) in those `which` picks."""
    return [dataclasses.replace(row, point={**row.point, key: value}, given=row.given | {key}) if which(i) else row
            for i, row in enumerate(rows)]


def with_task_floor(rows: list, records: list[dict], fold: Fold, links, base: dict, options: FitOptions,
                    methods: tuple[str, ...], wfbp_rows: list) -> tuple[list, Fold, float | None]:
    """(rows, fold, floor): the least task time (`FLOOR_FIT`) of `methods`,
    fitted to their one-node rows on the links that the fold's other
    training rows fit, set in every row of theirs; and the fold without
    their rows, which inform the floor alone. One-node rows are not held
    out here (every task predicts 8 GPUs or more, on 4 GPUs per node), as
    the one-GPU rows that give compute are not; one that a task holds out
    does not inform the floor. The floor is fitted on the one-node rows as
    WFBP maps them (`wfbp_rows`): a fit through the priority channel of
    three models' unrolled programs outgrew this machine's memory while
    compiling, and on one node, where PCIe hides the communication, the
    two mappings differ little. Without such rows the floor is None and
    their rows, unfloored, still train nothing; without `methods`: rows,
    fold, None."""
    if not methods:
        return rows, fold, None
    train = link_rows(records, fold, methods)
    held_out = set(fold.test)
    one_node = [i for i, r in enumerate(records) if r["method"] in methods and r["nodes"] == 1 and i not in held_out]
    if not one_node:
        return rows, Fold(fold.name, train, fold.test), None
    (key,) = FLOOR_FIT
    floor = float(optimise.fit([wfbp_rows[i] for i in one_node], [key],
                               {**base, **links().line_rates, **links().values}, options).values[key])
    out = with_point(rows, key, floor, lambda i: records[i]["method"] in methods)
    return out, Fold(fold.name, train, fold.test), floor


def mapped_base(base_text: str, path: Path, network: str = "") -> dict:
    """The fixed keys under every row: the base's, NCCL's tree latency
    growth (`TREE_ALPHA_EXPONENT`) unless the base sets `inter.alpha_exponent`
    itself, and, unless it sets the intra link's latency, that link's hop
    latency as NCCL's LL protocol has it (`catalog.nccl_ll_hop`; the link
    the base names, else the scenario default's): with `algorithm = "nccl"`
    a link's alpha is its LL hop, and the catalog's (5 us for pcie3) is a
    point-to-point message latency; as the intra link's start and prior
    centre NCCL's figure extrapolates better (README: tried and kept).
    Both belong to the mapping of the all-to-all methods, not to one
    network, so a `--base` for another cluster gets them too. Unless the
    base names the inter link, the link the data's `network` names
    (`link_of_network`); and where it says TCP, that link as used through
    TCP (`through_tcp`)."""
    path.write_text(base_text)
    base = through_tcp(with_network_link(read_base(path), network), network)
    base.setdefault("inter.alpha_exponent", TREE_ALPHA_EXPONENT)
    base.setdefault("intra.alpha", catalog.nccl_ll_hop(base.get("intra.name", KEYS["intra.name"].default)))
    return base


def with_network_link(base: dict, network: str) -> dict:
    """`base` with the inter link the data's `network` names, unless it
    names one itself; the scenario default (10gbe) where the label names
    none, with a note to name it in `--base`."""
    if "inter.name" in base or not network:
        return base
    link = link_of_network(network)
    if link is None:
        print(f"validate_ddl: network {network!r} names no catalog link: inter link "
              f"{KEYS['inter.name'].default} (name yours in --base)", file=sys.stderr)
        return base
    return {**base, "inter.name": link}


def through_tcp(base: dict, network: str) -> dict:
    """`base` with its inter link's TCP entry (`<name>-tcp`: the same wire,
    the socket stack's latency, `catalog.TCP_LATENCY`) when the data's
    `network` says TCP and the base neither sets the link's latency nor
    names a link that is TCP already (10gbe, or one without such an
    entry). The latency is the fit's start and prior centre: around an
    RDMA fabric's 3 us, a TCP stack's latency per step extrapolates
    wrongly (README: synthetic fabrics)."""
    name = base.get("inter.name", KEYS["inter.name"].default)
    if not says_tcp(network) or "inter.alpha" in base or f"{name}-tcp" not in catalog.LINKS:
        return base
    print(f"validate_ddl: network {network!r} is TCP: inter link {name}-tcp (the socket stack's latency)",
          file=sys.stderr)
    return {**base, "inter.name": f"{name}-tcp"}


def mapped_rows(folder: Path, records: list[dict], single: dict, base: dict, priority: bool) -> list:
    """`records` as the fit reads them: their scenarios (`scenario_keys`)
    written to `folder` and read back under `base`."""
    data = write_rows(folder / ("rows.csv" if priority else "wfbp_rows.csv"), records, single, measured=True,
                      priority=priority)
    return read_rows(data, dict(base), labels=(METHOD_COLUMN,))[1]


def run_task(name: str, records: list[dict], single: dict, out: Path, options: FitOptions, base_text: str,
             data_name: str, priority: bool = True, folds=None, floored: tuple[str, ...] = FLOORED_METHODS,
             **split) -> dict:
    """One fold of `sweep.validate` (`split`: its make_folds arguments, or
    `folds` given) on the mapped rows; errors of the model and the baseline.
    The mapped rows live in a temporary folder: no copy of the data stays."""
    with tempfile.TemporaryDirectory() as folder:
        base = mapped_base(base_text, Path(folder) / "base.toml", records[0]["network"])
        rows = mapped_rows(Path(folder), records, single, base, priority)
        wfbp_rows = mapped_rows(Path(folder), records, single, base, priority=False) if priority and floored else rows
    folds = folds or make_folds(rows, **split)
    assert all(f.train == folds[0].train for f in folds)  # one fit: pool the held-out rows
    fold = Fold(folds[0].name if len(folds) == 1 else f"fit {split.get('reference')}, predict the others",
                    folds[0].train, tuple(sorted(i for f in folds for i in f.test)))
    label = f"{data_name}: {fold.name}, mapped by experiments/validate_ddl.py"
    fitted = fit_keys([records[i] for i in fold.train])
    links = link_fit(rows, records, fold, fitted, base, options, floored)
    rows, link_fold, floor = with_task_floor(rows, records, fold, links, base, options, floored, wfbp_rows)
    ps_rate = ps_bandwidth_at_line_rate(records, fold, fitted, links)
    if ps_rate is not None:
        rows, base = with_point(rows, "ps.bandwidth", ps_rate), {**base, "ps.bandwidth": ps_rate}
    # The links' fit is the fold's own (the same training rows: the floor and
    # BytePS's push/pull bandwidth reach no training row's cost), so it is
    # not redone. The ruler still reads every training row.
    assert link_fold.train == link_rows(records, fold, floored)
    result = run_fold(rows, link_fold, fitted, base, options, label, ruler=fold.train, fit=links())
    doc = fit_document({k: v for k, v in base.items() if k not in fitted}, result.fit, label)
    write_text(out / f"fit_{name}.toml", tomli_w.dumps(doc))
    print(f"{name}:\n{fit_summary(result.fit)}", file=sys.stderr)
    if floor is not None:
        print(f"  {FLOOR_FIT[0]} (fitted to {', '.join(floored)} on one node)  {floor:.4g}", file=sys.stderr)
    if ps_rate is not None:
        print(f"  ps.bandwidth (no PS row trains; the links fill the wire)  {ps_rate:.4g}", file=sys.stderr)
    test = [records[i] for i in fold.test]
    pick = lambda column: np.array([r[column] for r in result.records])  # noqa: E731
    return {"name": name, "test": test, "predicted": pick("predicted"), "naive": pick("naive"),
            "measured": pick("measured"), "model_error": pick("model_error"), "naive_error": pick("naive_error"),
            "inside": pick("inside"), "low": pick("low"), "high": pick("high"), "fit": result.fit, "task_floor": floor,
            "ps_bandwidth": ps_rate}


def scale_out(records, single, out, options, base_text=BASE, data_name=DATA.name):
    """(a) fit <= 8 GPUs, predict 16 and 32; naive: linear from 8 GPUs."""
    return run_task("scale_out", records, single, out, options, base_text, data_name, split="gpus", cut=8)


def cross_method(records, single, out, options, base_text=BASE, data_name=DATA.name):
    """(b) fit WFBP-A2A, predict the other methods at >= 8 GPUs; naive: the WFBP-A2A throughput."""
    return run_task("cross_method", records, single, out, options, base_text, data_name, split="method",
                    reference="WFBP-A2A", min_gpus=8)


def bytescheduler(records, single, out, options, priority: bool, base_text=BASE, data_name=DATA.name):
    """(c) fit the five other methods, predict ByteScheduler at >= 8 GPUs,
    mapped as WFBP or (`priority`) as the priority strategy."""
    train = tuple(i for i, r in enumerate(records) if r["method"] not in BYTESCHEDULER)
    test = tuple(i for i, r in enumerate(records) if r["method"] in BYTESCHEDULER and r["gpus"] >= 8)
    mapping = "priority" if priority else "wfbp"
    fold = Fold(f"fit the other methods, predict ByteScheduler as {mapping}", train, test)
    return run_task(f"bytescheduler_{mapping}", records, single, out, options, base_text, data_name,
                    priority=priority, folds=[fold])


def missing_rows(records: list[dict]) -> dict[str, str]:
    """The tasks the data cannot hold, with what they lack (a file may hold
    fewer methods or GPU counts than the 10GbE one): (a) needs rows at <= 8
    GPUs and above; (b) WFBP-A2A rows and another method's at >= 8 GPUs;
    (c) ByteScheduler rows at >= 8 GPUs and another method's rows."""
    def some(test):
        return any(test(r) for r in records)
    bytescheduler = some(lambda r: r["method"] in BYTESCHEDULER and r["gpus"] >= 8)
    others = some(lambda r: r["method"] not in BYTESCHEDULER)
    needs = {"scale_out": (some(lambda r: r["gpus"] <= 8) and some(lambda r: r["gpus"] > 8),
                           "rows at <= 8 GPUs and at more"),
             "cross_method": (some(lambda r: r["method"] == "WFBP-A2A")
                              and some(lambda r: r["method"] != "WFBP-A2A" and r["gpus"] >= 8),
                              "WFBP-A2A rows and another method's at >= 8 GPUs"),
             "bytescheduler": (bytescheduler and others, "ByteScheduler rows at >= 8 GPUs and another method's")}
    return {task: lacks for task, (holds, lacks) in needs.items() if not holds}


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def table(tasks: list[dict]) -> str:
    labels = {"scale_out": "(a) scale-out: fit <= 8 GPUs, predict 16 and 32",
              "cross_method": "(b) cross-method: fit WFBP-A2A, predict the others at >= 8 GPUs",
              "bytescheduler_wfbp": "(c) ByteScheduler as WFBP: fit the five other methods, predict it at >= 8 GPUs",
              "bytescheduler_priority": "(c) ByteScheduler as the priority strategy: the same fit and rows"}
    summary_rows = []
    for t in tasks:
        m, n, fit = t["model_error"], t["naive_error"], t["fit"]
        summary_rows.append([labels[t["name"]], len(m), pct(fit.median_relative_error), pct(fit.max_relative_error),
                             pct(np.median(m)), pct(m.max()), pct(np.median(n)), pct(n.max()),
                             pct(np.mean(t["inside"])), f"{interval_score(t['measured'], t['low'], t['high']):.3f}"])
    text = markdown_table(["task", "rows", "in-sample median", "in-sample max", "model median", "model max",
                           "naive median", "naive max", "90 % interval coverage", "interval score"], summary_rows)
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
        values = ", ".join(f"{k} = {fit.values[k]:.3g}" + (" (on its bound)" if k in fit.at_bound else "")
                           + (" (not identified)" if k in fit.not_identified else "") for k in fit.keys)
        if t["task_floor"] is not None:
            values += f"; {FLOOR_FIT[0]} = {t['task_floor']:.3g} (fitted to {', '.join(FLOORED_METHODS)} on one node)"
        if t["ps_bandwidth"] is not None:
            values += (f"; ps.bandwidth = {t['ps_bandwidth']:.3g} (the inter line rate: no PS row trains, and the "
                       f"links reach {PS_FILLS_WIRE:.0%} of it or more)")
        text += (f"\nFitted on {fit.observations} rows (median {pct(fit.median_relative_error)}, "
                 f"max {pct(fit.max_relative_error)} in-sample): {values}.\n")
    return text


def write_predictions(path: Path, tasks: list[dict]) -> None:
    """Every predicted row with its 90 % interval and both errors (the measurements stay in ../shared/data)."""
    lines = [["task", "model", "method", "gpus", "predicted", "low", "high", "model_error", "naive_error"]]
    for t in tasks:
        for r, p, lo, hi, em, en in zip(t["test"], t["predicted"], t["low"], t["high"], t["model_error"],
                                        t["naive_error"]):
            lines.append([t["name"], r["dnn"], r["method"], r["gpus"], f"{p:.6g}", f"{lo:.6g}", f"{hi:.6g}",
                          f"{em:.4f}", f"{en:.4f}"])
    write_text(path, "".join(",".join(str(c) for c in line) + "\n" for line in lines))


def arguments(argv):
    """`study_arguments` (`--quick`, `--out`, `--prior`, `--tail`) with `--data` and `--base`."""
    def data_and_base(parser):
        parser.add_argument("--data", type=Path, default=DATA, help="measurements in the 10GbE file's format")
        parser.add_argument("--base", type=Path, help="scenario of fixed keys under every row (default: the "
                                                      "10GbE cluster's GPU and PCIe link; the inter link the "
                                                      "data's network names)")
        parser.add_argument("--single", type=Path, help="single-gpu rows for models the data has none of, "
                                                        "from another file of the same GPUs")
    return study_arguments("validate_ddl", __doc__.splitlines()[0], argv, extra=data_and_base, fits=True)


def main(argv=None) -> int:
    args = arguments(argv)
    require_data("validate_ddl", args.data)
    if args.single is not None and not args.single.is_file():
        study_error("validate_ddl", "single", str(args.single), "not found")
    if args.base is not None and not args.base.is_file():
        study_error("validate_ddl", "base", str(args.base), "not found")
    started = time.perf_counter()
    records, single = load(args.data, args.single)
    base_text = args.base.read_text() if args.base else BASE
    options = study_fit_options(args, QUICK if args.quick else FULL)
    by_network = {}
    for r in records:
        by_network.setdefault(r["network"] or "", []).append(r)
    check_inputs(by_network, single, base_text, args.base)
    missing = {network: missing_rows(rows) for network, rows in by_network.items()}
    if all(len(m) == 3 for m in missing.values()):
        study_error("validate_ddl", "data", str(args.data), "holds the rows of no task: " + "; ".join(
            f"{t} needs {lacks}" for t, lacks in next(iter(missing.values())).items()))
    # A file of several networks runs once per network (the base's links are
    # every row's), each into a folder of its own.
    several = len(by_network) > 1
    for network, rows in by_network.items():
        out = args.out / network_folder(network) if several else args.out
        if several:
            print(f"validate_ddl: network {network!r}: {len(rows)} rows, into {out}", file=sys.stderr)
        if len(missing[network]) == 3:
            print(f"validate_ddl: network {network!r} skipped: it holds the rows of no task", file=sys.stderr)
            continue
        for task, lacks in missing[network].items():
            print(f"validate_ddl: task {task} skipped: {args.data} holds no {lacks}"
                  + (f" on {network!r}" if several else ""), file=sys.stderr)
        text = run_study(rows, single, out, options, base_text, args.data.name, missing[network])
        print(text)
    print(f"validate_ddl: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def check_inputs(by_network: dict, single: dict, base_text: str, base_path: Path | None) -> None:
    """Exit 2 with one line, before any output, where the base or a row
    cannot make a scenario (a TOML error, an unknown GPU, link or model):
    every network's rows read through their mapped base, as `run_task` reads them."""
    try:
        if base_path is not None:
            read_base(base_path)  # its errors name the user's file
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()):
            for network, rows in by_network.items():
                base = mapped_base(base_text, Path(folder) / "base.toml", network)
                for priority in (True, False):
                    mapped_rows(Path(folder), rows, single, base, priority)
    except SpecError as err:
        study_error("validate_ddl", err.key, err.value, err.reason)


def network_folder(network: str) -> str:
    """The output folder of one network's rows ("100Gb IPoIB" -> 100gb-ipoib)."""
    return "-".join(label_words(network)) or "unlabelled"


def run_study(records, single, out: Path, options, base_text: str, data_name: str, missing: dict) -> str:
    """The tasks `records` (one network's rows) hold, written to `out`: table.md and predictions.csv."""
    out.mkdir(parents=True, exist_ok=True)
    tasks = [*([scale_out(records, single, out, options, base_text, data_name)]
               if "scale_out" not in missing else []),
             *([cross_method(records, single, out, options, base_text, data_name)]
               if "cross_method" not in missing else []),
             *(bytescheduler(records, single, out, options, priority, base_text, data_name)
               for priority in (False, True) if "bytescheduler" not in missing)]
    text = table(tasks)
    write_text(out / "table.md", text)
    write_predictions(out / "predictions.csv", tasks)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
