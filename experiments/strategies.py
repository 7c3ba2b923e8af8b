"""What does merged-gradient WFBP (MG-WFBP) gain over WFBP and BSP?

BSP sends all gradients in one all-reduce after the backward pass; WFBP sends
each layer's gradient as soon as it is ready (overlap, but one startup
latency per layer); MG-WFBP (Shi, Chu and Li, INFOCOM 2019) merges layers
whenever that cannot delay the end of communication. Throughput of each
strategy (and 25 MiB fusion, for reference) on 1 to 16 nodes of 4 V100s
(PCIe 3.0 inside, ring all-reduce) over 10GbE and 56 Gb InfiniBand.

    python experiments/strategies.py [--quick] [--out DIR]
"""
from __future__ import annotations

import sys
import time

import xarray as xr

import sweep
from sweep import markdown_table, pyplot, save_figure, study_arguments, write_dataset, write_text

STRATEGIES = ("bsp", "wfbp", "fusion", "mgwfbp")
BASELINES = ("wfbp", "bsp")
LINKS = ("10gbe", "ib-fdr")
LINK_LABELS = {"10gbe": "10GbE", "ib-fdr": "56 Gb IB (FDR)"}
BATCH = {"alexnet": 64, "googlenet": 64, "resnet50": 64, "vgg16": 64, "bert_base": 32}
GPUS_PER_NODE = 4

FULL = dict(models=tuple(BATCH), nodes=(1, 2, 4, 8, 16))
QUICK = dict(models=("alexnet", "resnet50"), nodes=(1, 4))


def sweep_cube(models, nodes) -> xr.Dataset:
    cubes = []
    for model in models:
        cube = sweep.run({
            "model": [model], "batch_size": BATCH[model], "gpu": "v100", "intra": "pcie3", "algorithm": "ring",
            "bucket_bytes": 25 << 20, "gpus_per_node": GPUS_PER_NODE,
            "inter": list(LINKS), "nodes": list(nodes), "strategy": list(STRATEGIES),
        })
        cubes.append(cube.assign_coords(
            batch_size=("model", [BATCH[model]], {"units": "samples", "long_name": "per-GPU batch size"})))
    cube = xr.concat(cubes, dim="model", combine_attrs="drop_conflicts")
    throughput = cube["throughput"]
    for baseline in BASELINES:
        ratio = throughput.sel(strategy="mgwfbp", drop=True) / throughput.sel(strategy=baseline, drop=True)
        cube[f"gain_over_{baseline}"] = (ratio - 1).assign_attrs(
            units="1", long_name=f"throughput gain of mgwfbp over {baseline}")
    cube = cube.assign_coords(gpus=("nodes", cube["nodes"].values * GPUS_PER_NODE,
                                    {"units": "GPUs", "long_name": "GPUs in total"}))
    cube.attrs["title"] = "strategies: gain of MG-WFBP over WFBP and BSP"
    return cube


def plot_gains(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(len(LINKS), len(BASELINES), figsize=(5.2 * len(BASELINES), 3.4 * len(LINKS)),
                             squeeze=False, layout="constrained")
    for r, link in enumerate(LINKS):
        for c, baseline in enumerate(BASELINES):
            ax = axes[r, c]
            for model in cube["model"].values:
                gain = cube[f"gain_over_{baseline}"].sel(model=model, inter=link)
                ax.plot(cube["gpus"], 100 * gain, marker="o", ms=3, label=model)
            ax.axhline(0, color="black", linewidth=0.6)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(plt.ScalarFormatter())
            ax.set_xlabel("GPUs [count]")
            ax.set_ylabel(f"gain over {baseline} [%]")
            ax.set_title(f"MG-WFBP vs {baseline.upper()}, {LINK_LABELS[link]}", fontsize=10)
            ax.grid(alpha=0.3)
    axes[0, -1].legend(fontsize=8)
    fig.suptitle(f"Throughput gain of MG-WFBP ({GPUS_PER_NODE} V100 per node, ring all-reduce)", fontsize=11)
    save_figure(fig, path)


def plot_throughput(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    models = cube["model"].values
    fig, axes = plt.subplots(len(LINKS), len(models), figsize=(3.1 * len(models), 3.0 * len(LINKS)),
                             squeeze=False, layout="constrained")
    for r, link in enumerate(LINKS):
        for c, model in enumerate(models):
            ax = axes[r, c]
            for strategy in STRATEGIES:
                ax.plot(cube["gpus"], cube["throughput"].sel(model=model, inter=link, strategy=strategy),
                        marker="o", ms=3, label=strategy)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(plt.ScalarFormatter())
            ax.set_xlabel("GPUs [count]")
            ax.set_ylabel("throughput [samples/s]")
            ax.set_title(f"{model}, {LINK_LABELS[link]}", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0, -1].legend(fontsize=8)
    fig.suptitle("Throughput per strategy", fontsize=11)
    save_figure(fig, path)


def table(cube: xr.Dataset) -> str:
    nodes = int(cube["nodes"].max())
    rows = []
    for model in cube["model"].values:
        for link in LINKS:
            sel = cube.sel(model=model, inter=link, nodes=nodes)
            rows.append([model, LINK_LABELS[link]]
                        + [f"{float(sel['throughput'].sel(strategy=s)):.0f}" for s in STRATEGIES]
                        + [f"{100 * float(sel[f'gain_over_{b}']):+.1f}" for b in BASELINES])
    header = (["model", "inter-node link"] + [f"{s} [samples/s]" for s in STRATEGIES]
              + [f"mgwfbp vs {b} [%]" for b in BASELINES])
    return (f"Throughput at {nodes * GPUS_PER_NODE} GPUs ({nodes} nodes x {GPUS_PER_NODE} V100, ring all-reduce; "
            "fusion uses 25 MiB buckets).\n\n" + markdown_table(header, rows))


def main(argv=None) -> int:
    args = study_arguments("strategies", __doc__.splitlines()[0], argv)
    started = time.perf_counter()
    cube = sweep_cube(**(QUICK if args.quick else FULL))
    write_dataset(cube, args.out / "cube.nc")
    plot_gains(cube, args.out / "mgwfbp_gain.png")
    plot_throughput(cube, args.out / "throughput.png")
    write_text(args.out / "table.md", table(cube))
    print(f"strategies: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
