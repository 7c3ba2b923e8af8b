"""What are the main bottlenecks when scaling S-SGD to more GPUs and nodes?

Time per iteration split into compute (forward, backward, update), exposed
input (time the GPUs wait for data) and exposed communication (time the
all-reduces add beyond the computation), as the GPU count grows from 1 to 64
(4 V100s per node, PCIe 3.0 inside, PyTorch-DDP-style 25 MiB fusion over a
ring), for two input pipelines (a fast one, 10,000 samples/s per GPU, and
CPU JPEG decoding at 500 samples/s per GPU) and five inter-node links; and a
map of which resource bounds each configuration (the model's `bottleneck`:
the resource with the most busy time per iteration).

    python experiments/bottlenecks.py [--quick] [--out DIR]
"""
from __future__ import annotations

import sys
import time

from matplotlib.colors import ListedColormap
import numpy as np
import xarray as xr

import sweep
from kernels import BOTTLENECKS
from sweep import markdown_table, pyplot, save_figure, study_arguments, write_dataset, write_text

BATCH = 64
GPUS_PER_NODE = 4
INPUT_PIPELINES = {1e-4: "fast input (1e-4 s/sample)", 2e-3: "CPU decoding (2e-3 s/sample)"}
BREAKDOWN_LINKS = ("10gbe", "ib-fdr")
COMPONENT_COLORS = {"compute": "#1f77b4", "exposed input": "#7f7f7f", "exposed communication": "#d62728"}
BOTTLENECK_COLORS = ("#1f77b4", "#d62728", "#7f7f7f")  # compute, communication, input

FULL = dict(models=("alexnet", "googlenet", "resnet50", "vgg16"),
            links=("10gbe", "25gbe", "ib-fdr", "100gbe", "ib-edr"), nodes=(1, 2, 4, 8, 16))
QUICK = dict(models=("alexnet",), links=("10gbe", "ib-fdr"), nodes=(1, 2, 4))


def sweep_cube(models, links, nodes) -> xr.Dataset:
    cube = sweep.run({
        "model": list(models), "batch_size": BATCH, "gpu": "v100", "preset": "pytorch-ddp", "intra": "pcie3",
        "io": {"time_per_sample": list(INPUT_PIPELINES)},
        "inter": list(links), "gpus_per_node": [1, GPUS_PER_NODE], "nodes": list(nodes),
    })
    # The three parts add up to the iteration time: compute runs as one chain,
    # waiting for input or for the channel is what the iteration adds to it.
    without_comm = cube["iteration_time"] - cube["exposed_communication"]
    cube["exposed_input"] = np.maximum(without_comm - cube["compute_time"], 0.0)
    cube["exposed_input"].attrs.update(units="s", long_name="time waiting for input beyond the computation")
    cube.attrs["title"] = "bottlenecks: time breakdown per iteration and the bounding resource"
    return cube


def scaling_points(cube: xr.Dataset):
    """(GPUs, selection) from 1 GPU, then 1 to N nodes of GPUS_PER_NODE GPUs."""
    points = [(1, dict(gpus_per_node=1, nodes=1))]
    points += [(GPUS_PER_NODE * int(n), dict(gpus_per_node=GPUS_PER_NODE, nodes=int(n))) for n in cube["nodes"].values]
    return points


def components(cube: xr.Dataset, **where) -> dict[str, float]:
    """Seconds per iteration of compute, exposed input and exposed communication."""
    sel = cube.sel(**where)
    return {"compute": float(sel["compute_time"]), "exposed input": float(sel["exposed_input"]),
            "exposed communication": float(sel["exposed_communication"])}


def plot_breakdown(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    models = list(cube["model"].values)
    rows = [(link, io) for io in INPUT_PIPELINES for link in BREAKDOWN_LINKS if link in cube["inter"].values]
    fig, axes = plt.subplots(len(rows), len(models), figsize=(3.3 * len(models), 2.7 * len(rows)), squeeze=False)
    points = scaling_points(cube)
    for r, (link, io) in enumerate(rows):
        for c, model in enumerate(models):
            ax = axes[r, c]
            bottom = np.zeros(len(points))
            for part, color in COMPONENT_COLORS.items():
                where = {"model": model, "inter": link, "io.time_per_sample": io}
                ms = np.array([1e3 * components(cube, **where, **at)[part] for _, at in points])
                ax.bar(range(len(points)), ms, bottom=bottom, color=color, label=part, width=0.7)
                bottom += ms
            ax.set_xticks(range(len(points)), [str(g) for g, _ in points])
            ax.set_title(f"{model}, {link}\n{INPUT_PIPELINES[io]}", fontsize=9)
            ax.set_xlabel("GPUs [count]")
            ax.grid(axis="y", alpha=0.3)
        axes[r, 0].set_ylabel("time per iteration [ms]")
    axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"Where an iteration's time goes (V100, batch {BATCH}, {GPUS_PER_NODE} GPUs per node, "
                 "DDP-style fusion)", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)


def plot_bottleneck_map(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    models = list(cube["model"].values)
    links = list(cube["inter"].values)
    nodes = cube["nodes"].values
    fig, axes = plt.subplots(len(INPUT_PIPELINES), len(models), figsize=(3.4 * len(models), 5.6), squeeze=False)
    cmap = ListedColormap(BOTTLENECK_COLORS)
    for r, io in enumerate(INPUT_PIPELINES):
        for c, model in enumerate(models):
            ax = axes[r, c]
            sel = cube.sel({"model": model, "io.time_per_sample": io, "gpus_per_node": GPUS_PER_NODE})
            codes = sel["bottleneck"].transpose("inter", "nodes").values
            eff = sel["scaling_efficiency"].transpose("inter", "nodes").values
            ax.pcolormesh(codes, cmap=cmap, vmin=-0.5, vmax=len(BOTTLENECKS) - 0.5, edgecolors="white")
            for (i, j), value in np.ndenumerate(eff):
                ax.text(j + 0.5, i + 0.5, f"{100 * value:.0f}", ha="center", va="center", fontsize=7, color="white")
            ax.set_xticks(np.arange(len(nodes)) + 0.5, [str(GPUS_PER_NODE * int(n)) for n in nodes])
            ax.set_yticks(np.arange(len(links)) + 0.5, links)
            ax.set_xlabel("GPUs [count]")
            ax.set_ylabel("inter-node link")
            ax.set_title(f"{model}, {INPUT_PIPELINES[io]}", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in BOTTLENECK_COLORS]
    fig.legend(handles, [f"bound by {b} (busiest resource)" for b in BOTTLENECKS], loc="lower center", ncol=3, fontsize=9,
               bbox_to_anchor=(0.5, -0.04))
    fig.suptitle("Which resource bounds each configuration (cell text: scaling efficiency [%])", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)


def table(cube: xr.Dataset) -> str:
    gpus = GPUS_PER_NODE * int(cube["nodes"].max())
    rows = []
    for model in cube["model"].values:
        for io in INPUT_PIPELINES:
            for link in BREAKDOWN_LINKS:
                if link not in cube["inter"].values:
                    continue
                at = {"model": model, "inter": link, "io.time_per_sample": io,
                      "gpus_per_node": GPUS_PER_NODE, "nodes": int(cube["nodes"].max())}
                parts = components(cube, **at)
                sel = cube.sel(at)
                rows.append([model, f"{io:g}", link] + [f"{1e3 * max(v, 0.0):.1f}" for v in parts.values()] + [
                    f"{1e3 * float(sel['iteration_time']):.1f}", f"{100 * float(sel['scaling_efficiency']):.1f}",
                    BOTTLENECKS[int(sel["bottleneck"])]])
    header = ["model", "input [s/sample]", "inter-node link", "compute [ms]", "exposed input [ms]",
              "exposed communication [ms]", "iteration [ms]", "efficiency [%]", "bottleneck"]
    return (f"Time per iteration at {gpus} GPUs ({GPUS_PER_NODE} per node), V100, batch {BATCH}, "
            "PyTorch-DDP-style fusion (25 MiB buckets, ring).\n\n" + markdown_table(header, rows))


def main(argv=None) -> int:
    args = study_arguments("bottlenecks", __doc__.splitlines()[0], argv)
    started = time.perf_counter()
    cube = sweep_cube(**(QUICK if args.quick else FULL))
    write_dataset(cube, args.out / "cube.nc")
    plot_breakdown(cube, args.out / "breakdown.png")
    plot_bottleneck_map(cube, args.out / "bottleneck_map.png")
    write_text(args.out / "table.md", table(cube))
    print(f"bottlenecks: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
