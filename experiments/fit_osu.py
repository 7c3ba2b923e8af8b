"""One joint fit of the inter-link model to OSU MPI all-reduce latencies.

Data: ../shared/data/osu_allreduce_latency.csv (OSU 5.4.0 MPI_Allreduce on
2, 4 and 8 processes, 4 B to 1 MiB, from the MG-WFBP authors' repository),
read by `calibrate` as it is with one process per node: nodes = processes,
gpus_per_node = 1, so every all-reduce runs over the inter link. Two fits of
the same rows: every parameter of the link model (`--fit inter`) and the
plain alpha-beta ring (`inter.alpha`, `inter.bandwidth`); median and max
relative error per process count.

    python experiments/fit_osu.py [--quick] [--out DIR] [--prior SIGMA] [--tail T]

Writes table.md and fit_inter.toml.
"""
from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

from sweep import (FitOptions, calibrate, fit_summary, markdown_table, require_data, study_arguments, study_fit_options,
                   write_text)

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "osu_allreduce_latency.csv"
QUICK = FitOptions(starts=4, steps=600, polish=300)


def fit(keys, output: Path | None, options: FitOptions):
    result, _ = calibrate(DATA, keys, None, output, options, label=f"{DATA.name} (nodes = processes)")
    with open(DATA, newline="") as handle:
        processes = np.array([int(r["processes"]) for r in csv.DictReader(handle)])
    errors = np.abs(result.predicted / result.measured - 1)
    return result, {p: errors[processes == p] for p in sorted(set(processes))}


def main(argv=None) -> int:
    args = study_arguments("fit_osu", __doc__.splitlines()[0], argv, fits=True)
    require_data("fit_osu", DATA)
    started = time.perf_counter()
    options = study_fit_options(args, QUICK if args.quick else FitOptions())
    full, by_p = fit(["inter"], args.out / "fit_inter.toml", options)
    plain, by_p_plain = fit(["inter.alpha", "inter.bandwidth"], None, options)
    print(fit_summary(full), file=sys.stderr)
    rows = [[p, len(e), f"{100 * np.median(e):.1f} %", f"{100 * e.max():.1f} %",
             f"{100 * np.median(by_p_plain[p]):.1f} %", f"{100 * by_p_plain[p].max():.1f} %"]
            for p, e in by_p.items()]
    text = markdown_table(["processes", "rows", "link model median", "link model max",
                           "alpha-beta ring median", "alpha-beta ring max"], rows)
    values = ", ".join(f"{k} = {full.values[k]:.4g}" for k in full.keys)
    text += f"\nJoint fit of {len(full.keys)} inter-link parameters to {full.observations} latencies: {values}.\n"
    text += ("\nThe alpha-beta ring is fitted with the same loss (log error plus a smooth maximum); "
             "by least squares alone it scores median 9 / 24 / 22 % and max 50 / 143 / 306 %.\n")
    write_text(args.out / "table.md", text)
    print(text)
    print(f"fit_osu: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from sweep.engine.compile_cache import enable

    enable()  # a rerun loads the compiled programs (sweep.engine.compile_cache)
    raise SystemExit(main())
