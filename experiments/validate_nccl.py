"""The link model against published nccl-tests all_reduce_perf tables.

Data: ../shared/data/nccl_tests/*.csv (see its README: sources, hardware,
flags). Read by `calibrate` directly (`sweep.fit.measurements`: out-of-place
time, never busbw; warm-up rows and spikes left out and reported). Tables
flagged anomalous in the README are left out of every task.

Tasks, through `sweep.validate` (the code of `ssgd-sweep validate`):
  (a) multi-node tables: fit the inter link on the sizes up to 1 MiB,
      predict the larger sizes; naive: the nearest measured size at its
      bandwidth (time scaled with the size). Two fits: the flexible link
      (`INTER_KEYS`: latency, bandwidth, a protocol switch and a second
      pair) and physics first (the bandwidth at the line rate, only the
      latency fitted): sizes up to 1 MiB say little about the bandwidth. Flat `ring` over all ranks on
      the inter link; the line rate is the node's aggregate NIC rate
      (`LINE_RATES`: from the README's hardware column; where the README
      says "not stated" the usual fabric of that machine class is assumed
      and marked so in the table). With NCCL's protocols each table runs
      those NCCL runs on its machine (`WITHOUT_LL128`: no LL128 where its
      GPUs do not meet over NVLink; LL at half the link where they have none).
  (b) single-node PCIe and NVLink tables: the intra link fitted per table
      on every size (in-sample, `INTRA_IN_SAMPLE`: with the chunk regime;
      priors weighed as `DESCRIBE_PRIOR`, since this asks what the link model
      can describe, not what it predicts), and also by size as in (a).
  (c) across rank counts on the same hardware: the data hold no two tables
      of the same machine at two rank counts; the nearest case, Azure NC A100
      v4 with 2 GPUs (one NVLink-bridged pair) and 4 GPUs (two pairs joined
      over PCIe/SYS), is reported, knowing the topology differs: with a
      flexible link, then with each table's rows bounded by the line rate of
      the slowest edge its ring crosses (`RANK_LINE_RATES`, from the tables'
      README), then also with NCCL's protocols (a base latency per call).

    python experiments/validate_nccl.py [--quick] [--out DIR] [--prior SIGMA] [--tail T] [--held-out-scatter]

`--held-out-scatter`: the by-size folds' intervals take the scatter of
their training sizes held out of refits (`validate --interval-split size`:
the smaller half fitted, the larger predicted) where it is the larger.

Writes table.md (with (d): the held-out coverage and interval score of the
90 % intervals, by variant over every table) and records.csv (every
held-out size of every table and variant: its prediction, interval and
both errors; the measured times stay in ../shared/data).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sweep import (FitOptions, calibrate, catalog, coverage_text, markdown_table, read_measurements,
                   records_interval_score, study_arguments, study_fit_options, validate, write_text)

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "nccl_tests"
MEBI = 1 << 20
INTER_KEYS = ("inter.alpha", "inter.bandwidth", "inter.protocol_bytes", "inter.large_alpha", "inter.large_bandwidth")
INTRA_KEYS = ("intra.alpha", "intra.bandwidth", "intra.protocol_bytes", "intra.large_alpha", "intra.large_bandwidth")
# In sample, the chunk regime too (NCCL's per-channel chunks outgrow the
# pipeline: a third latency/bandwidth pair): 7-8 % -> 3 % median on PCIe tables.
INTRA_IN_SAMPLE = INTRA_KEYS + ("intra.chunk_bytes", "intra.chunk_alpha", "intra.chunk_bandwidth")
ANOMALOUS = ("azure_nc48ads_a100v4_1x2_graphfile", "nccltests290_h100_2x8_ndr_degraded",
             "nccltests293_a100pcie_2x1_hdr_gdrsys", "nccltests293_a100pcie_2x1_hdr_nps4")
# Per node, bytes/s per direction; (rate, assumed?). From the README's hardware column.
LINE_RATES = {
    "aws_p4de_2x8_efa": (50e9, False),  # 4 x 100 Gb/s EFA
    "aws_p5_2x8_efa": (400e9, False),  # 3,200 Gb/s EFA
    "azure_ndm_a100v4_aks_2x8": (200e9, False),  # 8 x 200 Gb/s HDR
    "dstack_crusoe_a100_2x8_ib": (200e9, True),  # 8 HCAs, rate not stated: HDR assumed (A100 class)
    "dstack_nebius_h100_2x8_ib": (400e9, True),  # not stated: 8 x NDR assumed (H100 class)
    "dstack_lambda_b200_2x8_ib": (400e9, True),  # not stated: 8 x NDR assumed
    "dstack_gcp_a4_b200_2x8_roce": (400e9, False),  # 3.2 Tbps RoCE
    "gcp_a3mega_h100_2x8": (200e9, True),  # TCPXO, 8 NICs: 8 x 200 Gb/s assumed
    "hpe_crayex_gh200_2x4_slingshot_tree": (100e9, True),  # Slingshot, 4 x 200 Gb/s assumed
    "nccltests323_l40s_2x1_tcp": (None, True),  # TCP, link speed not stated: no line rate to assume
}
# Where no line rate is known the fits run unbounded (`UNBOUNDED`), nothing
# fixes the bandwidth at a line rate, and NCCL's protocols fit it with the
# latencies (`NCCL_KEYS` + inter.bandwidth): a bandwidth "at" an unbounded
# rate would be infinite (the L40S TCP table read 94.5 % that way: README).
UNBOUNDED = 1e12
# Single-node tables: the catalog link of the GPUs' path (README hardware column).
INTRA_LINKS = {
    "nvidia_exemplar_h100_dgx_1x8": "nvlink4",
    "konnase_v100_sxm2_1x8_hcm": "nvlink2",
    "aikitoria_rtx5090_8x_pcie": "pcie5",
    "chlc_rtx4090_8x_pcie_p2poff": "pcie4",
    "chlc_rtx4090_8x_pcie_p2pon": "pcie4",
    "nccltests287_rtx5090_1x4_pcie": "pcie5",
    "azure_nc96ads_a100v4_1x4": "nvlink3",
    "azure_nc48ads_a100v4_1x2_topoonly": "nvlink3",
    "autodl_rtx2080ti_1x2_pcie3": "pcie3",
}
# NVLink SHARP (NVLS) reduces inside the NVSwitch: a GPU sends and receives
# about M, not a ring's 2(g-1)/g M, so the wire bound is half the ring's: the
# line rate is doubled to say so (README caveat: busbw above the wire).
NVLS = ("nvidia_exemplar_h100_dgx_1x8",)
# Four GPUs as two NVLink-bridged pairs joined through the host's PCIe 4.0
# (the tables' README): the ring crosses that edge, whose line rate bounds it.
SLOWEST_EDGE = {"azure_nc96ads_a100v4_1x4": "pcie4"}
# algorithm "nccl": both hop latencies fitted; NCCL's LL hop figures
# (`catalog.NCCL_LL_HOP`) as their start. The 2 x 8 tables' nodes are
# NVSwitch boxes of the table's GPU (README hardware column): its NVLink
# generation is the intra link, which NCCL's ring crosses too.
NCCL_KEYS = ("intra.alpha", "inter.alpha")
NCCL_INTRA = {"aws_p4de_2x8_efa": "nvlink3", "aws_p5_2x8_efa": "nvlink4", "azure_ndm_a100v4_aks_2x8": "nvlink3",
              "dstack_crusoe_a100_2x8_ib": "nvlink3", "dstack_nebius_h100_2x8_ib": "nvlink4",
              "dstack_lambda_b200_2x8_ib": "nvlink5", "dstack_gcp_a4_b200_2x8_roce": "nvlink5",
              "gcp_a3mega_h100_2x8": "nvlink4", "hpe_crayex_gh200_2x4_slingshot_tree": "nvlink4",
              "nccltests323_l40s_2x1_tcp": "pcie4"}
# NCCL's protocol defaults where they differ from the kernel's (kernels/nccl.py). Its tuning.cc
# enables LL128 only where GPUs of compute capability 7.0, 8.0, 9.0 or 10.0 meet over NVLink (the
# ring's worst intra path at most NVB); the tables' NCCL versions, where printed, are 2.21-2.29.
WITHOUT_LL128 = {
    "nccltests323_l40s_2x1_tcp": "L40S, compute capability 8.9; TCP sockets",
    "aikitoria_rtx5090_8x_pcie": "PCIe",
    "chlc_rtx4090_8x_pcie_p2poff": "PCIe, compute capability 8.9",
    "chlc_rtx4090_8x_pcie_p2pon": "PCIe, compute capability 8.9",
    "nccltests287_rtx5090_1x4_pcie": "PCIe",
    "autodl_rtx2080ti_1x2_pcie3": "PCIe, compute capability 7.5",
    "azure_nc96ads_a100v4_1x4": "the ring crosses PCIe/SYS between the NVLink pairs",
}
# Where the GPUs have no NVLink (their intra link is PCIe), LL's 8-byte lines of 4 data bytes cross
# PCIe, host memory or sockets, whose wire limits them: LL at half the link, not NCCL's quarter (its
# estimate where the GPUs' stores limit LL, as over NVLink). README: tried and kept, each half alone.
WIRE_BOUND_LL = 0.5


def nccl_protocol_keys(name: str, intra: str) -> dict:
    """Table `name`'s NCCL protocol keys where NCCL's defaults differ from
    the kernel's (`WITHOUT_LL128`; LL at `WIRE_BOUND_LL` where the `intra`
    link is PCIe); empty for the others."""
    keys = {"nccl.ll128": False} if name in WITHOUT_LL128 else {}
    return {**keys, "nccl.ll_share": WIRE_BOUND_LL} if catalog.is_pcie(intra) else keys


FULL = FitOptions()
DESCRIBE_PRIOR = 0.05
QUICK = FitOptions(starts=2, steps=300, polish=150)


def single_node_base(name: str, link: str) -> str:
    """The base scenario of a single-node table: a ring on its catalog intra link."""
    return f'algorithm = "ring"\n[intra]\nname = "{link}"\n' + intra_line_rate(name, link)


def intra_line_rate(name: str, link: str) -> str:
    """The intra line-rate line of a table that reduces in the switch (`NVLS`:
    each GPU sends half a ring's bytes), or whose ring crosses a slower edge
    than its GPUs' own link (`SLOWEST_EDGE`); empty for the others."""
    if name in SLOWEST_EDGE:
        return f"line_rate = {catalog.LINKS[SLOWEST_EDGE[name]].line_rate!r}\n"
    return f"line_rate = {2 * catalog.LINKS[link].line_rate!r}\n" if name in NVLS else ""


def nccl_base(inter_rate: float | None, intra: str, name: str = "", nodes: bool = False) -> str:
    """The base scenario of the `nccl` algorithm (kernels/nccl.py) for table
    `name`: the hop latencies start at (and the priors centre on) NCCL's own
    tuning figures, LL on NVLink or PCIe inside the node and on the network
    between nodes (`nodes`); the inter bandwidth at the node's line rate
    where one is known, else unbounded and left to the fit."""
    hop = catalog.nccl_ll_hop(intra)
    text = f'algorithm = "nccl"\n[intra]\nname = "{intra}"\nalpha = {hop!r}\n' + intra_line_rate(name, intra)
    if nodes:
        text += f"[inter]\nalpha = {catalog.NCCL_LL_HOP['net']!r}\n"
        text += (f"bandwidth = {inter_rate!r}\nline_rate = {inter_rate!r}\n" if inter_rate is not None
                 else f"line_rate = {UNBOUNDED!r}\n")
    protocols = nccl_protocol_keys(name, intra)
    if protocols:
        text += "[nccl]\n" + "".join(f"{key.split('.')[1]} = {str(value).lower()}\n"
                                     for key, value in protocols.items())
    return text


# (c) Azure NC A100 v4: 2 GPUs (one NVLink-bridged pair) and 4 (two pairs
# joined over PCIe/SYS, as the tables' README describes the machines).
RANK_TABLES = ("azure_nc48ads_a100v4_1x2_topoonly", "azure_nc96ads_a100v4_1x4")
# The line rate of the slowest edge a ring crosses on each machine: the
# bridge on the pair, the host's PCIe 4.0 x16 between the pairs of four.
RANK_LINE_RATES = tuple(catalog.LINKS[SLOWEST_EDGE.get(name, INTRA_LINKS[name])].line_rate for name in RANK_TABLES)
_PAIR_LINK = INTRA_LINKS[RANK_TABLES[0]]  # the fitted table's own link
RANK_VARIANTS = (  # (label, fitted keys, base, per-table intra line rates or None, NCCL's protocols?)
    ("flexible link", INTRA_KEYS, single_node_base(RANK_TABLES[0], _PAIR_LINK), None, False),
    ("flexible link, slowest edge's line rate", INTRA_KEYS, single_node_base(RANK_TABLES[0], _PAIR_LINK),
     RANK_LINE_RATES, False),
    ("nccl protocols, slowest edge's line rate", ("intra.alpha", "intra.bandwidth"), nccl_base(None, _PAIR_LINK),
     RANK_LINE_RATES, True),
)
_PROTOCOL_KEYS = ("nccl.ll128", "nccl.ll_share")


def rank_table(path: Path, rates, protocols: bool = False) -> Path:
    """Both rank counts' rows in one file; with `rates`, each table's rows
    carry the intra line rate of its slowest edge (`intra.line_rate`); with
    `protocols`, NCCL's protocol defaults on its machine (`nccl_protocol_keys`:
    the four GPUs' ring crosses PCIe, so no LL128 there)."""
    lines = ["nodes,gpus_per_node,message_bytes,allreduce_time" + (",intra.line_rate" if rates else "")
             + ("".join(f",{key}" for key in _PROTOCOL_KEYS) if protocols else "")]
    for name, rate in zip(RANK_TABLES, rates or (None,) * len(RANK_TABLES)):
        rows, _, _ = read_measurements(DATA / f"{name}.csv", {})
        keys = nccl_protocol_keys(name, INTRA_LINKS[name])  # an empty cell: the kernel's default
        extra = "".join(f",{str(keys.get(key, '')).lower()}" for key in _PROTOCOL_KEYS) if protocols else ""
        lines += [f"{r['nodes']},{r['gpus_per_node']},{r['message_bytes']!r},{r['allreduce_time']!r}"
                  + (f",{rate!r}" if rates else "") + extra for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def run(path: Path, keys, base_text: str, split: str, options: FitOptions, folder: Path, **kw):
    base = folder / f"{path.stem}.toml"
    base.write_text(base_text)
    return validate(path, keys, base, split, options=options, **kw)


def main(argv=None) -> int:
    def held_out_scatter(parser):
        parser.add_argument("--held-out-scatter", action="store_true",
                            help="the 90 %% intervals' scatter also from each table's training sizes held out "
                                 "of refits (validate --interval-split size: fit the smaller half, predict the "
                                 "larger)")

    args = study_arguments("validate_nccl", __doc__.splitlines()[0], argv, extra=held_out_scatter, fits=True)
    started = time.perf_counter()
    options = study_fit_options(args, QUICK if args.quick else FULL)
    scatter = {"interval_split": "size"} if args.held_out_scatter else {}
    size_rows, fit_rows, records, bands = [], [], [], {}

    def report(name, kind, results, note):
        """One variant of one table: its row of table.md, its lines of records.csv
        and its held-out bands (pooled by variant across tables)."""
        size_rows.append(_row(name, kind, results, note))
        records.extend(held_out(name, kind, results))
        bands.setdefault(variant(kind), []).extend(r for f in results for r in f.records)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)

        def by_size(path, keys, base_text):
            """(a, b)'s folds: fit the sizes up to 1 MiB, predict the larger."""
            return run(path, keys, base_text, "size", options, folder, cut=MEBI, **scatter)

        for name, (rate, assumed) in LINE_RATES.items():
            path = DATA / f"{name}.csv"
            base = f'algorithm = "ring"\n[inter]\nline_rate = {rate or UNBOUNDED!r}\n'
            small = sum(r["message_bytes"] <= MEBI for r in read_measurements(path, {})[0])
            if small < 4:
                size_rows.append(_skipped(name, "multi-node", f"{small} sizes up to 1 MiB"))
                continue
            results = by_size(path, INTER_KEYS, base)
            report(name, "multi-node", results, "no line rate stated: unbounded" if rate is None
                   else "line rate assumed" if assumed else "")
            # physics first: the bandwidth at the line rate, only the latency fitted
            if rate is None:
                size_rows.append(_skipped(name, "multi-node, alpha only", "no line rate to fix the bandwidth at"))
            else:
                physics = by_size(path, ("inter.alpha",), base + f"bandwidth = {rate!r}\n")
                report(name, "multi-node, alpha only", physics, "bandwidth = line rate")
            # NCCL's protocols (algorithm "nccl"): bandwidth at the line rate (fitted too where none is
            # known), the two hop latencies fitted
            keys = NCCL_KEYS + (("inter.bandwidth",) if rate is None else ())
            protocols = by_size(path, keys, nccl_base(rate, NCCL_INTRA[name], name, nodes=True))
            report(name, "multi-node, nccl protocols",
                   protocols, "bandwidth fitted" if rate is None else "bandwidth = line rate")
            print(f"{name}: done", file=sys.stderr)
        for name, link in INTRA_LINKS.items():
            path = DATA / f"{name}.csv"
            base = single_node_base(name, link)
            results = by_size(path, INTRA_KEYS, base)
            report(name, f"single node ({link})", results, "")
            physics = by_size(path, ("intra.alpha",), base)
            report(name, f"single node ({link}), alpha only", physics, "bandwidth = catalog")
            protocols = by_size(path, ("intra.alpha",), nccl_base(None, link, name))
            report(name, f"single node ({link}), nccl protocols", protocols, "bandwidth = catalog")
            (folder / "whole.toml").write_text(base)
            # In sample the question is what the link model can describe, not
            # what it predicts: the priors weigh as little as before the default
            # became 0.5 (with it, two more tables miss 5 %: README).
            describe = dataclasses.replace(options, prior=DESCRIBE_PRIOR)
            whole, _ = calibrate(path, INTRA_IN_SAMPLE, folder / "whole.toml", None, describe)
            # The same question with NCCL's protocols: a base latency per call
            # and a hop per step (only the hop and the bandwidth are free).
            (folder / "whole_nccl.toml").write_text(nccl_base(None, link, name))
            protocols, _ = calibrate(path, ("intra.alpha", "intra.bandwidth"), folder / "whole_nccl.toml", None,
                                     describe)
            fit_rows.append([name, link, whole.observations, pct(whole.median_relative_error),
                             pct(whole.max_relative_error), pct(protocols.median_relative_error),
                             pct(protocols.max_relative_error), len(whole.excluded)])
            print(f"{name}: done", file=sys.stderr)
        # (c) the nearest thing to two rank counts on the same hardware
        rank_rows = []
        for label, keys, base, rates, protocols in RANK_VARIANTS:
            both = rank_table(folder / "azure_nc_a100v4.csv", rates, protocols)
            ranks = run(both, keys, base, "gpus_per_node", options, folder)
            ranks = [r for r in ranks if r.fold.name.endswith("= 4")]
            rank_rows.append(_row("azure NC A100 v4: fit 2 GPUs, predict 4", label, ranks,
                                  "topology differs (pair vs two pairs over SYS)"))
    head = ["table", "kind", "held out", "in-sample median", "in-sample max", "model median", "model max",
            "naive median", "naive max", "note"]
    text = "(a, b) fit sizes <= 1 MiB, predict the larger sizes; naive: nearest measured size at its bandwidth\n\n"
    text += markdown_table(head, size_rows)
    text += "\n(b) intra link fitted per single-node table on every size (in-sample)\n\n"
    text += markdown_table(["table", "intra link", "sizes fitted", "flexible ring: median", "max",
                            "nccl protocols: median", "max", "left out as anomalous"], fit_rows)
    text += "\n(c) across rank counts\n\n" + markdown_table(head, rank_rows)
    text += ("\n(d) the 90 % intervals of (a, b)'s held-out sizes, by variant over every table"
             + (" (their scatter also from training sizes held out of refits: --held-out-scatter)"
                if args.held_out_scatter else "") + "\n\n")
    text += markdown_table(["variant", "held out", "90 % interval coverage (95 % range)", "interval score"],
                           [[kind, len(recs), coverage_text([r["inside"] for r in recs]),
                             f"{records_interval_score(recs):.3f}"] for kind, recs in bands.items()])
    write_text(args.out / "table.md", text)
    lines = io.StringIO()
    csv.writer(lines, lineterminator="\n").writerows([HELD_OUT, *records])
    write_text(args.out / "records.csv", lines.getvalue())
    print(text)
    print(f"validate_nccl: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


HELD_OUT = ("table", "kind", "message_bytes", "predicted", "low", "high", "model_error", "naive_error", "inside")


def held_out(name: str, kind: str, results) -> list[list[str]]:
    """records.csv's lines of one table and variant (`HELD_OUT`)."""
    return [[name, kind, f"{r['message_bytes']:.0f}",
             *(f"{r[c]:.6g}" for c in ("predicted", "low", "high", "model_error", "naive_error")), str(r["inside"])]
            for f in results for r in f.records]


def variant(kind: str) -> str:
    """A kind without its link ("single node (pcie4), alpha only" -> "single node, alpha only")."""
    return re.sub(r" \([^)]*\)", "", kind)


def _skipped(name, kind, why):
    """table.md's row of a variant not run, saying why."""
    return [name, kind, "-", "-", "-", "-", "-", "-", "-", f"skipped: {why}"]


def _row(name, kind, results, note):
    recs = [r for f in results for r in f.records]
    m = np.array([r["model_error"] for r in recs])
    n = np.array([r["naive_error"] for r in recs])
    fit = results[0].fit
    return [name, kind, len(recs), pct(fit.median_relative_error), pct(fit.max_relative_error),
            pct(np.median(m)), pct(m.max()), pct(np.nanmedian(n)), pct(np.nanmax(n)), note]


if __name__ == "__main__":
    from sweep.engine.compile_cache import enable

    enable()  # a rerun loads the compiled programs (sweep.engine.compile_cache)
    raise SystemExit(main())
