"""What inter-node bandwidth does each model need for 90 % scaling efficiency?

Solved per configuration by bisection in log-bandwidth (`sweep.engine.bandwidth_target`),
not read off a grid: for ten models of the zoo (batch per GPU chosen per model),
on 2 to 64 nodes of 4 V100s (PCIe 3.0 inside), PyTorch-DDP-style 25 MiB fusion,
with a flat ring or a hierarchical all-reduce, at an RDMA-like (1.5 us) and a
TCP-like (30 us) inter-node latency. "Unreachable": even 10 TB/s cannot reach
90 % (the latency or the intra-node link bounds it).

    python experiments/bandwidth_target.py [--quick] [--out DIR]
"""
from __future__ import annotations

import sys
import time

from matplotlib.colors import LogNorm
import numpy as np
import xarray as xr

from sweep import (catalog, load_spec, markdown_table, pyplot, required_inter_bandwidth, save_figure,
                   study_arguments, write_dataset, write_text)

TARGET = 0.9
GPUS_PER_NODE = 4
LATENCIES = {1.5e-6: "1.5 us (RDMA)", 3e-5: "30 us (TCP)"}
BATCH = {"alexnet": 64, "googlenet": 64, "inception_v3": 64, "resnet50": 64, "resnet152": 64, "vgg16": 64,
         "bert_base": 32, "bert_large": 16, "gpt2": 8, "gpt2_medium": 4}
REFERENCE_LINKS = ("10gbe", "25gbe", "ib-fdr", "ib-edr", "ib-hdr", "ib-ndr")

FULL = dict(models=tuple(BATCH), nodes=(2, 4, 8, 16, 32, 64), algorithms=("ring", "hierarchical"))
QUICK = dict(models=("alexnet", "resnet50"), nodes=(2, 16), algorithms=("ring",))


def solve(models, nodes, algorithms) -> xr.Dataset:
    cubes = []
    for model in models:
        spec = load_spec({
            "model": [model], "batch_size": BATCH[model], "gpu": "v100", "preset": "pytorch-ddp",
            "intra": "pcie3", "gpus_per_node": GPUS_PER_NODE, "algorithm": list(algorithms),
            "inter": {"alpha": list(LATENCIES)}, "nodes": list(nodes),
        })
        cubes.append(required_inter_bandwidth(spec, TARGET).assign_coords(
            batch_size=("model", [BATCH[model]], {"units": "samples", "long_name": "per-GPU batch size"})))
    cube = xr.concat(cubes, dim="model", combine_attrs="drop_conflicts")
    cube = cube.assign_coords(gpus=("nodes", cube["nodes"].values * GPUS_PER_NODE,
                                    {"units": "GPUs", "long_name": "GPUs in total"}))
    cube.attrs["title"] = f"inter-node bandwidth needed for {TARGET:.0%} scaling efficiency"
    return cube


def plot_heatmaps(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    algorithms, latencies = cube["algorithm"].values, cube["inter.alpha"].values
    models, gpus = cube["model"].values, cube["gpus"].values
    fig, axes = plt.subplots(len(algorithms), len(latencies), squeeze=False, sharey=True, layout="constrained",
                             figsize=(2.2 + 0.8 * len(gpus) * len(latencies), 1.0 + 0.4 * len(models) * len(algorithms)))
    gbps = cube["required_inter_bandwidth"] / 1e9
    finite = gbps.values[np.isfinite(gbps.values)]
    norm = LogNorm(vmin=max(finite.min(), 1e-2), vmax=max(finite.max(), 1.0)) if finite.size else LogNorm(0.1, 10)
    for r, algorithm in enumerate(algorithms):
        for c, alpha in enumerate(latencies):
            ax = axes[r, c]
            block = gbps.sel({"algorithm": algorithm, "inter.alpha": alpha}).transpose("model", "nodes").values
            ax.set_facecolor("#dddddd")  # unreachable cells stay grey
            mesh = ax.pcolormesh(np.ma.masked_invalid(block), cmap="viridis", norm=norm, edgecolors="white")
            for (i, j), value in np.ndenumerate(block):
                text = "unreachable" if not np.isfinite(value) else f"{value:.3g}"
                dark = np.isfinite(value) and norm(value) < 0.6
                ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=6.5 if np.isfinite(value) else 5.5,
                        color="white" if dark else "black")
            ax.set_xticks(np.arange(len(gpus)) + 0.5, [str(g) for g in gpus])
            ax.set_yticks(np.arange(len(models)) + 0.5, models)
            ax.set_xlabel("GPUs [count]")
            if c == 0:
                ax.set_ylabel("model")
            ax.set_title(f"{algorithm} all-reduce, latency {LATENCIES.get(float(alpha), f'{alpha:g} s')}", fontsize=9)
    bar = fig.colorbar(mesh, ax=axes, shrink=0.8, pad=0.02)
    bar.set_label(f"inter-node bandwidth for {TARGET:.0%} efficiency [GB/s]")
    # Ticks where real links sit on the scale.
    marks = {name: catalog.LINKS[name].bandwidth / 1e9 for name in REFERENCE_LINKS}
    marks = {n: v for n, v in marks.items() if norm.vmin <= v <= norm.vmax}
    bar.ax.yaxis.set_minor_locator(plt.NullLocator())
    bar.set_ticks(list(marks.values()), labels=[f"{v:g} {n}" for n, v in marks.items()])
    fig.suptitle(f"Inter-node bandwidth needed for {TARGET:.0%} scaling efficiency "
                 f"(V100, {GPUS_PER_NODE} GPUs per node, DDP-style 25 MiB fusion; batch per model in table.md)",
                 fontsize=10)
    save_figure(fig, path)


def table(cube: xr.Dataset) -> str:
    gpus = [int(g) for g in cube["gpus"].values]
    shown = sorted({gpus[len(gpus) // 2], gpus[-1]}) if len(gpus) > 1 else gpus
    columns = [(a, l) for a in cube["algorithm"].values for l in cube["inter.alpha"].values]
    header = ["model", "batch", "GPUs"] + [f"{a}, {LATENCIES.get(float(l), l)} [GB/s]" for a, l in columns]
    rows = []
    for model in cube["model"].values:
        for g in shown:
            cells = []
            for a, l in columns:
                value = float(cube["required_inter_bandwidth"].sel(
                    {"model": model, "algorithm": a, "inter.alpha": l, "nodes": g // GPUS_PER_NODE}))
                cells.append(f"{value / 1e9:.3g}" if np.isfinite(value) else "unreachable")
            rows.append([model, int(cube["batch_size"].sel(model=model)), g] + cells)
    return (f"Inter-node bandwidth (GB/s, 1 GB = 1e9 bytes) needed for {TARGET:.0%} scaling efficiency; "
            f"for reference 10GbE = 1.25, 56 Gb IB = 6.8, 100 Gb IB = 12.5 GB/s.\n\n" + markdown_table(header, rows))


def main(argv=None) -> int:
    args = study_arguments("bandwidth_target", __doc__.splitlines()[0], argv)
    started = time.perf_counter()
    cube = solve(**(QUICK if args.quick else FULL))
    write_dataset(cube, args.out / "cube.nc")
    plot_heatmaps(cube, args.out / "required_bandwidth.png")
    write_text(args.out / "table.md", table(cube))
    print(f"bandwidth_target: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
