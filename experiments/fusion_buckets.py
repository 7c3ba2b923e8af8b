"""Which tensor-fusion bucket size is best, as inter-node bandwidth and latency change?

Fusion (Horovod tensor fusion, PyTorch DDP buckets) fills a bucket in
backward order until it holds `bucket_bytes`, then all-reduces it. Small
buckets overlap better with the backward pass but pay the all-reduce startup
latency more often; large ones pay it rarely but start late. Swept for
resnet50 (batch 64) and bert_base (batch 32) on 8 nodes of 4 V100s (PCIe 3.0
inside, ring all-reduce), bucket sizes 64 KiB to 1 GiB in half-power-of-two
steps plus PyTorch DDP's 25 MiB, inter-node bandwidth 1 to 100 GB/s and
latency 1 us to 1 ms.

    python experiments/fusion_buckets.py [--quick] [--out DIR]
"""
from __future__ import annotations

import sys
import time

from matplotlib.colors import LogNorm
import numpy as np
import xarray as xr

import sweep
from sweep import markdown_table, pyplot, save_figure, study_arguments, write_dataset, write_text

MiB = 1 << 20
DDP_BUCKET = 25 * MiB
NEAR_OPTIMAL = 0.01  # buckets within 1 % of the best iteration time
BATCH = {"resnet50": 64, "bert_base": 32}
NODES, GPUS_PER_NODE = 8, 4

FULL = dict(models=("resnet50", "bert_base"),
            buckets=tuple(sorted({int(2 ** (k / 2)) for k in range(32, 61)} | {DDP_BUCKET})),
            bandwidths=tuple(np.logspace(9, 11, 9)), latencies=tuple(np.logspace(-6, -3, 7)))
QUICK = dict(models=("resnet50",), buckets=tuple(sorted({1 << k for k in range(18, 29)} | {DDP_BUCKET})),
             bandwidths=(1e9, 1e10), latencies=(1e-6, 1e-4))


def sweep_cube(models, buckets, bandwidths, latencies) -> xr.Dataset:
    cubes = []
    for model in models:
        cube = sweep.run({
            "model": [model], "batch_size": BATCH[model], "gpu": "v100", "intra": "pcie3",
            "nodes": NODES, "gpus_per_node": GPUS_PER_NODE, "strategy": "fusion", "algorithm": "ring",
            "inter": {"bandwidth": [float(b) for b in bandwidths], "alpha": [float(a) for a in latencies]},
            "bucket_bytes": [int(b) for b in buckets],
            "outputs": ["iteration_time", "scaling_efficiency", "exposed_communication", "compute_time"],
        })
        cubes.append(cube.assign_coords(
            batch_size=("model", [BATCH[model]], {"units": "samples", "long_name": "per-GPU batch size"})))
    cube = xr.concat(cubes, dim="model", combine_attrs="drop_conflicts")
    time_ = cube["iteration_time"]
    best = time_.min("bucket_bytes")
    cube["best_bucket_bytes"] = cube["bucket_bytes"][time_.argmin("bucket_bytes")].drop_vars("bucket_bytes")
    cube["best_bucket_bytes"].attrs.update(units="bytes", long_name="bucket size with the shortest iteration")
    cube["best_iteration_time"] = best.assign_attrs(units="s", long_name="iteration time at the best bucket size")
    near = time_ <= best * (1 + NEAR_OPTIMAL)
    cube["near_optimal_min_bytes"] = cube["bucket_bytes"].where(near).min("bucket_bytes").assign_attrs(
        units="bytes", long_name=f"smallest bucket within {NEAR_OPTIMAL:.0%} of the best time")
    cube["near_optimal_max_bytes"] = cube["bucket_bytes"].where(near).max("bucket_bytes").assign_attrs(
        units="bytes", long_name=f"largest bucket within {NEAR_OPTIMAL:.0%} of the best time")
    cube["gain_over_ddp_default"] = (time_.sel(bucket_bytes=DDP_BUCKET) / best - 1).assign_attrs(
        units="1", long_name="iteration time at 25 MiB over the best, minus 1")
    cube.attrs["title"] = "fusion bucket size vs inter-node bandwidth and latency"
    return cube


def plot_best_bucket(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    models = cube["model"].values
    bandwidths, latencies = cube["inter.bandwidth"].values, cube["inter.alpha"].values
    fig, axes = plt.subplots(1, len(models), figsize=(1.5 + 0.75 * len(bandwidths) * len(models), 4.2),
                             squeeze=False, layout="constrained")
    mib = cube["best_bucket_bytes"] / MiB
    norm = LogNorm(vmin=float(cube["bucket_bytes"].min()) / MiB, vmax=float(cube["bucket_bytes"].max()) / MiB)
    for ax, model in zip(axes[0], models):
        block = mib.sel(model=model).transpose("inter.alpha", "inter.bandwidth").values
        mesh = ax.pcolormesh(block, cmap="magma", norm=norm, edgecolors="white")
        for (i, j), value in np.ndenumerate(block):
            ax.text(j + 0.5, i + 0.5, f"{value:.3g}", ha="center", va="center", fontsize=6.5,
                    color="white" if norm(value) < 0.5 else "black")
        ax.set_xticks(np.arange(len(bandwidths)) + 0.5, [f"{b / 1e9:.3g}" for b in bandwidths])
        ax.set_yticks(np.arange(len(latencies)) + 0.5, [_us(a) for a in latencies])
        ax.set_xlabel("inter-node bandwidth [GB/s]")
        ax.set_ylabel("inter-node latency per message [us]")
        ax.set_title(f"{model}, batch {int(cube['batch_size'].sel(model=model))}", fontsize=10)
    fig.colorbar(mesh, ax=axes, label="best fusion bucket [MiB]")
    fig.suptitle(f"Best fusion bucket size ({NODES} nodes x {GPUS_PER_NODE} V100, ring all-reduce)", fontsize=11)
    save_figure(fig, path)


def plot_curves(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    models = cube["model"].values
    bandwidths = cube["inter.bandwidth"].values
    shown_bw = bandwidths[[0, len(bandwidths) // 2, -1]] if len(bandwidths) > 2 else bandwidths
    latencies = cube["inter.alpha"].values
    shown_alpha = latencies[:: max(1, len(latencies) // 3)]
    fig, axes = plt.subplots(len(models), len(shown_bw), figsize=(3.8 * len(shown_bw), 3.1 * len(models)),
                             squeeze=False, layout="constrained")
    for r, model in enumerate(models):
        for c, bw in enumerate(shown_bw):
            ax = axes[r, c]
            for alpha in shown_alpha:
                sel = cube.sel({"model": model, "inter.bandwidth": bw, "inter.alpha": alpha})
                line, = ax.plot(sel["bucket_bytes"] / MiB, 1e3 * sel["iteration_time"], label=f"{_us(alpha)} us")
                ax.plot(float(sel["best_bucket_bytes"]) / MiB, 1e3 * float(sel["best_iteration_time"]), "o",
                        color=line.get_color())
            ax.axvline(DDP_BUCKET / MiB, color="grey", linestyle=":", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "25" else ""))
            ax.set_xlabel("fusion bucket size [MiB]")
            ax.set_ylabel("iteration time [ms]")
            ax.set_title(f"{model}, {bw / 1e9:.3g} GB/s", fontsize=10)
            ax.grid(alpha=0.3)
        axes[r, -1].legend(title="latency", fontsize=8, title_fontsize=8)
    fig.suptitle("Iteration time vs bucket size (dots: best; dotted: PyTorch DDP's 25 MiB)", fontsize=11)
    save_figure(fig, path)


def _us(seconds: float) -> str:
    micro = 1e6 * seconds
    return f"{micro:.0f}" if micro >= 100 else f"{micro:.3g}"


def table(cube: xr.Dataset) -> str:
    bandwidths = cube["inter.bandwidth"].values
    latencies = cube["inter.alpha"].values
    shown_bw = bandwidths[[0, len(bandwidths) // 2, -1]] if len(bandwidths) > 2 else bandwidths
    shown_alpha = latencies[[0, -1]] if len(latencies) > 1 else latencies
    rows = []
    for model in cube["model"].values:
        for bw in shown_bw:
            for alpha in shown_alpha:
                sel = cube.sel({"model": model, "inter.bandwidth": bw, "inter.alpha": alpha})
                rows.append([model, f"{bw / 1e9:.3g}", _us(alpha),
                             f"{float(sel['best_bucket_bytes']) / MiB:.3g}",
                             f"{float(sel['near_optimal_min_bytes']) / MiB:.3g} - "
                             f"{float(sel['near_optimal_max_bytes']) / MiB:.3g}",
                             f"{1e3 * float(sel['best_iteration_time']):.1f}",
                             f"{100 * float(sel['gain_over_ddp_default']):.1f}"])
    header = ["model", "bandwidth [GB/s]", "latency [us]", "best bucket [MiB]",
              f"within {NEAR_OPTIMAL:.0%} [MiB]", "best iteration [ms]", "25 MiB is slower by [%]"]
    return (f"Best fusion bucket size, {NODES} nodes x {GPUS_PER_NODE} V100, ring all-reduce.\n\n"
            + markdown_table(header, rows))


def main(argv=None) -> int:
    args = study_arguments("fusion_buckets", __doc__.splitlines()[0], argv)
    started = time.perf_counter()
    cube = sweep_cube(**(QUICK if args.quick else FULL))
    write_dataset(cube, args.out / "cube.nc")
    plot_best_bucket(cube, args.out / "best_bucket.png")
    plot_curves(cube, args.out / "bucket_curves.png")
    write_text(args.out / "table.md", table(cube))
    print(f"fusion_buckets: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
