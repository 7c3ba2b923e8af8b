"""Validation against measurements: S-SGD throughput on a 10GbE cluster.

Data: ../shared/data/ddl_benchmarks_10gbe.csv, measured by the HKBU
ddl-benchmarks (Shi et al., "Communication-Efficient Distributed Deep
Learning: Survey, Evaluation, and Challenges", results of 2020-05-29):
ResNet-50 (batch 64), BERT-Base (batch 64) and BERT-Large (batch 8), sequence
length 64, PyTorch on 1 to 32 GPUs, 4 GPUs per node on PCIe 3.0, nodes on
10GbE (TCP), seven ways of exchanging gradients.

Each row becomes one scenario as `ddl_mapping` says (the seven methods onto
strategies and algorithms: its docstring has the table; the file is read
and checked by `ddl_data`). One fit per task (`sweep.fit.calibrate`, shared
by all rows) sets the intra link (alpha, bandwidth), the inter link (alpha,
bandwidth) and the software overhead of one all-reduce call on each
(`FIT`), and where multi-node PS rows train, what only their push/pull
reads (`PS_FIT`: the inter link's protocol switch with a second
latency/bandwidth pair, and `ps.bandwidth`; else BytePS's push/pull at the
inter line rate where the fitted links fill the wire: `PS_FILLS_WIRE`),
within the physical bounds (bandwidths at most the wire allows at the line
rate). ByteScheduler-A2A's forward and backward tasks take a least time,
`compute.task_floor`, fitted to its one-node rows (`with_task_floor`: its
plugin's Python poller); its rows inform that floor alone, never the links.

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
skipped with a note (`missing_rows`); a file that holds none exits 2. Rows
of a method the mapping does not know are left out with a note
(`ddl_data.load`).

    python experiments/validate_ddl.py [--quick] [--out DIR] [--data CSV] [--base TOML] [--single CSV]
                                       [--prior SIGMA] [--tail T] [--held-out-scatter]

`--data` takes any file in the 10GbE file's format (columns dnn, batch_size,
seq_len, network, method, gpus, nodes, gpus_per_node, throughput; the
single-gpu rows give each model's measured throughput, else its one-GPU
rows of any method; `--single` takes them from another file of the same
GPUs for models the data has neither of; without `--single`, where the
base's GPUs are the 10GbE cluster's, as the default base's are, the 10GbE
file: `single_source`); `--base` a scenario
of fixed keys under every row (default: rtx2080ti GPUs and pcie3, `ddl_mapping.BASE`),
e.g. another GPU and network for another cluster. Unless the base names
the inter link, it is the catalog link the file's `network` names
(`network_labels.link_of_network`: "10gbe-tcp" -> 10gbe, "100GbE RoCE" -> 100gbe,
"100Gb InfiniBand" or "IB EDR" -> ib-edr; where it names none, 10gbe's
values as the start with no line-rate bound, and a note). The mapping adds `inter.alpha_exponent = ddl_mapping.TREE_ALPHA_EXPONENT` to any base that
does not set it, NCCL's LL hop latency as `intra.alpha` to any base
that does not set the intra link's latency, and, where the file's
`network` says TCP (or IPoIB), the base's fabric as used through TCP
(`ddl_mapping.through_tcp`: `100gbe` -> `100gbe-tcp`, the socket stack's latency)
unless the base sets the inter link's latency (`ddl_mapping.mapped_base`); a file of
several networks runs once per network, each into OUT/<network>/. The folds
run through `sweep.validate` (the same code as `ssgd-sweep validate`), so
each task also reports the in-sample errors of its fit and the coverage of
the 90 % prediction intervals on the held-out rows.

`--held-out-scatter` gives each task's intervals the scatter of its own
training rows held out of refits (`held_out_scatter`, as `--interval-split`
does for `calibrate` and `validate`): (a) by GPU count, (b) and (c) by
method; on the 10GbE file it leaves every band as it was (README).

Writes table.md (median and max relative error of model and baseline, per
task and per method), predictions.csv (every predicted row) and each task's
fit_<task>.toml.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tomli_w

from sweep import (Fold, FitOptions, coverage_text, fit_document, fit_summary, interval_score, make_folds,
                   markdown_table, read_base, require_data, run_fold, study_arguments, study_error,
                   study_fit_options, write_text)
from sweep.errors import SpecError
from sweep.fit import optimise
from sweep.fit.conformal import HeldOutQuantile, conformal_quantile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ddl_data import DATA, load  # noqa: E402
from ddl_mapping import BASE, GPU, METHODS, mapped_base, mapped_rows  # noqa: E402
from network_labels import label_words  # noqa: E402

# The links' latency and bandwidth, plus the per-call software overhead of
# each link: it halved the cross-method error out of sample (README
# "Validation against measurements": what was tried, kept and dropped).
FIT = ("intra.alpha", "intra.bandwidth", "inter.alpha", "inter.bandwidth", "intra.overhead", "inter.overhead")
# What only the parameter servers' push/pull reads (the all-reduce methods run
# NCCL's protocols, `ddl_mapping.ALLREDUCE`, which the link's protocol switch does not
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
BYTESCHEDULER = ("ByteScheduler-A2A", "ByteScheduler-PS")
FULL = FitOptions()
QUICK = FitOptions(starts=2, steps=300, polish=100)


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



def run_task(name: str, records: list[dict], single: dict, out: Path, options: FitOptions, base_text: str,
             data_name: str, priority: bool = True, folds=None, floored: tuple[str, ...] = FLOORED_METHODS,
             held_out: HeldOutQuantile | None = None, **split) -> dict:
    """One fold of `sweep.validate` (`split`: its make_folds arguments, or
    `folds` given) on the mapped rows; errors of the model and the baseline.
    The mapped rows live in a temporary folder: no copy of the data stays.
    `held_out` (`held_out_scatter`): the intervals' scatter from rows held
    out of refits of the task's training rows, where it is the larger."""
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
    fit = links() if held_out is None else dataclasses.replace(links(), held_out=held_out)
    result = run_fold(rows, link_fold, fitted, base, options, label, ruler=fold.train, fit=fit)
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


def held_out_scatter(records: list[dict], folds: list[Fold], split: str, single: dict, options: FitOptions,
                     base_text: str, data_name: str) -> HeldOutQuantile | None:
    """`sweep.fit.conformal` through this study's own pipeline (`run_task`:
    the floor, BytePS's push/pull, the mapped rows): each of `folds` over
    `records` (a task's training rows) refitted and its held-out rows
    predicted; the conformal 90 % quantile of their |log error|. None
    without folds."""
    errors = []
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()):
        for j, fold in enumerate(folds):
            task = run_task(f"inner_{j}", records, single, Path(folder), options, base_text, data_name,
                            folds=[fold])
            errors += np.abs(np.log(task["predicted"] / task["measured"])).tolist()
    return HeldOutQuantile(split, conformal_quantile(errors), len(folds), len(errors)) if errors else None


def scale_out_scatter(train: list[dict], single, options, base_text, data_name) -> HeldOutQuantile | None:
    """(a)'s held-out scatter: its training rows fitted up to the
    second-largest GPU count, the largest predicted (<= 4 GPUs, 8 on the
    10GbE file: one node predicts two)."""
    counts = sorted({r["gpus"] for r in train})
    if len(counts) < 2:
        return None
    fold = Fold(f"fit <= {counts[-2]} GPUs, predict {counts[-1]}",
                tuple(i for i, r in enumerate(train) if r["gpus"] <= counts[-2]),
                tuple(i for i, r in enumerate(train) if r["gpus"] == counts[-1]))
    return held_out_scatter(train, [fold], "gpus", single, options, base_text, data_name)


def method_scatter(train: list[dict], single, options, base_text, data_name) -> HeldOutQuantile | None:
    """(b) and (c)'s held-out scatter: each training method left out in
    turn (its rows at >= 8 GPUs predicted, as the tasks hold out), the
    others fitted; None for one method ((b))."""
    methods = list(dict.fromkeys(r["method"] for r in train))
    folds = [Fold(f"leave out {m}", tuple(i for i, r in enumerate(train) if r["method"] != m),
                  tuple(i for i, r in enumerate(train) if r["method"] == m and r["gpus"] >= 8))
             for m in methods] if len(methods) > 1 else []
    return held_out_scatter(train, [f for f in folds if f.test], "method", single, options, base_text, data_name)


def scale_out(records, single, out, options, base_text=BASE, data_name=DATA.name, scatter: bool = False):
    """(a) fit <= 8 GPUs, predict 16 and 32; naive: linear from 8 GPUs."""
    cut = 8
    train = [r for r in records if r["gpus"] <= cut]
    held = scale_out_scatter(train, single, options, base_text, data_name) if scatter else None
    return run_task("scale_out", records, single, out, options, base_text, data_name, held_out=held,
                    split="gpus", cut=cut)


def cross_method(records, single, out, options, base_text=BASE, data_name=DATA.name, scatter: bool = False):
    """(b) fit WFBP-A2A, predict the other methods at >= 8 GPUs; naive: the WFBP-A2A throughput."""
    reference = "WFBP-A2A"
    train = [r for r in records if r["method"] == reference]
    held = method_scatter(train, single, options, base_text, data_name) if scatter else None
    return run_task("cross_method", records, single, out, options, base_text, data_name, held_out=held,
                    split="method", reference=reference, min_gpus=8)


def bytescheduler(records, single, out, options, priority: bool, base_text=BASE, data_name=DATA.name,
                  held: HeldOutQuantile | None = None):
    """(c) fit the five other methods, predict ByteScheduler at >= 8 GPUs,
    mapped as WFBP or (`priority`) as the priority strategy. `held`:
    `bytescheduler_scatter`'s (one for both mappings: no training row is
    ByteScheduler's)."""
    train = tuple(i for i, r in enumerate(records) if r["method"] not in BYTESCHEDULER)
    test = tuple(i for i, r in enumerate(records) if r["method"] in BYTESCHEDULER and r["gpus"] >= 8)
    mapping = "priority" if priority else "wfbp"
    fold = Fold(f"fit the other methods, predict ByteScheduler as {mapping}", train, test)
    return run_task(f"bytescheduler_{mapping}", records, single, out, options, base_text, data_name,
                    priority=priority, folds=[fold], held_out=held)


def bytescheduler_scatter(records, single, options, base_text=BASE, data_name=DATA.name) -> HeldOutQuantile | None:
    """(c)'s held-out scatter (`method_scatter` over its training rows)."""
    train = [r for r in records if r["method"] not in BYTESCHEDULER]
    return method_scatter(train, single, options, base_text, data_name)


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
                             coverage_text(t["inside"]), f"{interval_score(t['measured'], t['low'], t['high']):.3f}"])
    text = markdown_table(["task", "rows", "in-sample median", "in-sample max", "model median", "model max",
                           "naive median", "naive max", "90 % interval coverage (95 % range)", "interval score"],
                          summary_rows)
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
        parser.add_argument("--held-out-scatter", action="store_true",
                            help="the 90 %% intervals' scatter also from each task's training rows held out "
                                 "of refits (sweep.fit.conformal): (a) by GPU count, (b) and (c) by method")
        parser.add_argument("--single", type=Path, help="single-gpu rows for models the data has none of, "
                                                        "from another file of the same GPUs (default, where the "
                                                        "base's GPUs are the 10GbE cluster's: the 10GbE file)")
    return study_arguments("validate_ddl", __doc__.splitlines()[0], argv, extra=data_and_base, fits=True)


def main(argv=None) -> int:
    args = arguments(argv)
    require_data("validate_ddl", args.data)
    if args.single is not None and not args.single.is_file():
        study_error("validate_ddl", "single", str(args.single), "not found")
    if args.base is not None and not args.base.is_file():
        study_error("validate_ddl", "base", str(args.base), "not found")
    started = time.perf_counter()
    base_text = args.base.read_text() if args.base else BASE
    records, single = load(args.data, single_source(args, base_gpu(args.base)))
    options = study_fit_options(args, QUICK if args.quick else FULL)
    by_network = {}
    for r in records:
        by_network.setdefault(r["network"] or "", []).append(r)
    check_inputs(by_network, single, base_text)
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
        text = run_study(rows, single, out, options, base_text, args.data.name, missing[network],
                         args.held_out_scatter)
        print(text)
    print(f"validate_ddl: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def base_gpu(base_path: Path | None) -> str | None:
    """The GPU the base names (the default base's: the 10GbE cluster's);
    exits 2 in one line, naming the user's file, where it cannot be read."""
    if base_path is None:
        return GPU
    try:
        return read_base(base_path).get("gpu.name")
    except SpecError as err:
        study_error("validate_ddl", err.key, err.value, err.reason)


def single_source(args, gpu: str | None) -> Path | None:
    """The file whose single-gpu rows serve models the data has no one-GPU
    row of: `--single`; else, where the base's `gpu` is the 10GbE
    cluster's (RTX 2080 Ti, the default base's), the 10GbE file where it is
    there and is not the data itself (one GPU uses no network, so a faster
    fabric's file of the same cluster need not repeat them); else none."""
    if args.single is not None:
        return args.single
    if gpu == GPU and DATA.is_file() and args.data.resolve() != DATA.resolve():
        return DATA
    return None


def check_inputs(by_network: dict, single: dict, base_text: str) -> None:
    """Exit 2 with one line, before any output, where the base or a row
    cannot make a scenario (an unknown GPU, link or model; `base_gpu` has
    read the user's file): every network's rows read through their mapped
    base, as `run_task` reads them."""
    try:
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


def run_study(records, single, out: Path, options, base_text: str, data_name: str, missing: dict,
              scatter: bool = False) -> str:
    """The tasks `records` (one network's rows) hold, written to `out`:
    table.md and predictions.csv. `scatter`: every task's intervals also
    from its training rows held out of refits (`held_out_scatter`)."""
    out.mkdir(parents=True, exist_ok=True)
    held = bytescheduler_scatter(records, single, options, base_text, data_name) \
        if scatter and "bytescheduler" not in missing else None
    tasks = [*([scale_out(records, single, out, options, base_text, data_name, scatter)]
               if "scale_out" not in missing else []),
             *([cross_method(records, single, out, options, base_text, data_name, scatter)]
               if "cross_method" not in missing else []),
             *(bytescheduler(records, single, out, options, priority, base_text, data_name, held)
               for priority in (False, True) if "bytescheduler" not in missing)]
    text = table(tasks)
    write_text(out / "table.md", text)
    write_predictions(out / "predictions.csv", tasks)
    return text


if __name__ == "__main__":
    from sweep.engine.compile_cache import enable

    enable()  # a rerun loads the compiled programs (sweep.engine.compile_cache)
    raise SystemExit(main())
