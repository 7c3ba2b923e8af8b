"""How does communication overhead change across PCIe, NVLink, 10GbE and InfiniBand,
and how do the frameworks' strategies differ? (Shi, Wang, Chu and Li, ICPADS 2018)

Scaling efficiency vs GPU count for alexnet, googlenet, resnet50 and vgg16
(batch 64 per V100), per framework preset (caffe-mpi, cntk, mxnet,
tensorflow): on one node over PCIe 3.0 or NVLink 2.0 (1 to 8 GPUs), and on 1
to 16 nodes of 4 GPUs (PCIe inside) over 10GbE or 56 Gb InfiniBand (FDR).

The two sweeps are merged into one cube over (model, preset, link, gpus);
cells a link does not cover (NVLink at 64 GPUs) are NaN. Note that the mxnet
and tensorflow presets use parameter servers on machines of their own, so
even on one node their gradients cross the inter-node link (10GbE here).

    python experiments/interconnects.py [--quick] [--out DIR]
"""
from __future__ import annotations

import sys
import time

import numpy as np
import xarray as xr

import sweep
from sweep import markdown_table, pyplot, save_figure, study_arguments, write_dataset, write_text

FRAMEWORKS = ("caffe-mpi", "cntk", "mxnet", "tensorflow")
SINGLE_NODE_LINKS = ("pcie3", "nvlink2")
MULTI_NODE_LINKS = ("10gbe", "ib-fdr")
LINK_LABELS = {"pcie3": "PCIe 3.0", "nvlink2": "NVLink 2.0", "10gbe": "10GbE", "ib-fdr": "56 Gb IB (FDR)"}
GPUS_PER_NODE = 4
BATCH = 64

FULL = dict(models=("alexnet", "googlenet", "resnet50", "vgg16"),
            single_gpus=tuple(range(1, 9)), nodes=tuple(range(1, 17)))
QUICK = dict(models=("alexnet", "resnet50"), single_gpus=(1, 2, 4, 8), nodes=(1, 2, 4))


def sweep_cube(models, single_gpus, nodes) -> xr.Dataset:
    common = {"model": list(models), "batch_size": BATCH, "gpu": "v100", "preset": list(FRAMEWORKS)}
    single = sweep.run({**common, "intra": list(SINGLE_NODE_LINKS), "gpus_per_node": list(single_gpus)})
    multi = sweep.run({**common, "gpus_per_node": GPUS_PER_NODE, "intra": "pcie3",
                       "inter": list(MULTI_NODE_LINKS), "nodes": list(nodes)})
    single = single.rename(intra="link", gpus_per_node="gpus")
    multi = multi.rename(inter="link", nodes="gpus").assign_coords(gpus=multi["nodes"].values * GPUS_PER_NODE)
    cube = xr.concat([single, multi], dim="link", join="outer", combine_attrs="drop")
    cube["link"].attrs.update(long_name="interconnect the all-reduce crosses", units="")
    cube["gpus"].attrs.update(long_name="GPUs in total", units="GPUs")
    cube["model"].attrs.update(single["model"].attrs)
    cube["preset"].attrs.update(single["preset"].attrs)
    for name in cube.data_vars:
        cube[name].attrs.update(single[name].attrs)
    cube.attrs.update(title="interconnects: scaling efficiency per link and framework",
                      spec_single_node=single.attrs["spec"], spec_multi_node=multi.attrs["spec"],
                      gpus_per_node_multi_node=GPUS_PER_NODE)
    return cube


def plot_efficiency(cube: xr.Dataset, path) -> None:
    plt = pyplot()
    models = cube["model"].values
    fig, axes = plt.subplots(2, len(models), figsize=(3.4 * len(models), 6.4), sharey=True, squeeze=False)
    colors = dict(zip(FRAMEWORKS, plt.get_cmap("tab10").colors))
    for row, (links, where) in enumerate([(SINGLE_NODE_LINKS, "1 node"),
                                          (MULTI_NODE_LINKS, f"{GPUS_PER_NODE} GPUs per node")]):
        for col, model in enumerate(models):
            ax = axes[row, col]
            for link, style in zip(links, ("--", "-")):
                for preset in FRAMEWORKS:
                    eff = cube["scaling_efficiency"].sel(model=model, link=link, preset=preset).dropna("gpus")
                    ax.plot(eff["gpus"], 100 * eff, style, color=colors[preset], marker=".", ms=4,
                            label=f"{preset}, {LINK_LABELS[link]}")
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(plt.ScalarFormatter())
            ax.set_title(f"{model}, {where}", fontsize=10)
            ax.set_xlabel("GPUs [count]")
            ax.grid(alpha=0.3)
            ax.set_ylim(0, 105)
        axes[row, 0].set_ylabel("scaling efficiency [%]")
        axes[row, -1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"S-SGD scaling efficiency, V100, batch {BATCH} per GPU "
                 f"(dashed: slower link, solid: faster link)", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)


def plot_overhead(cube: xr.Dataset, path) -> None:
    """Share of the iteration lost to communication at the largest GPU count of each link."""
    plt = pyplot()
    models = list(cube["model"].values)
    links = SINGLE_NODE_LINKS + MULTI_NODE_LINKS
    fig, axes = plt.subplots(1, len(FRAMEWORKS), figsize=(3.6 * len(FRAMEWORKS), 3.6), sharey=True)
    width = 0.8 / len(links)
    for ax, preset in zip(axes, FRAMEWORKS):
        for i, link in enumerate(links):
            share = [100 * float(_at_largest(cube, "exposed_communication", model, preset, link)
                                 / _at_largest(cube, "iteration_time", model, preset, link)) for model in models]
            ax.bar(np.arange(len(models)) + (i - (len(links) - 1) / 2) * width, share, width,
                   label=f"{LINK_LABELS[link]} ({_largest_gpus(cube, link)} GPUs)")
        ax.set_xticks(range(len(models)), models, rotation=20)
        ax.set_title(preset, fontsize=10)
        ax.set_xlabel("model")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("exposed communication [% of iteration]")
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("Communication overhead at the largest GPU count of each link", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)


def _largest_gpus(cube, link) -> int:
    eff = cube["scaling_efficiency"].sel(link=link).isel(model=0, preset=0).dropna("gpus")
    return int(eff["gpus"].max())


def _at_largest(cube, name, model, preset, link) -> float:
    return float(cube[name].sel(model=model, preset=preset, link=link, gpus=_largest_gpus(cube, link)))


def table(cube: xr.Dataset) -> str:
    links = SINGLE_NODE_LINKS + MULTI_NODE_LINKS
    header = ["model", "preset"] + [f"efficiency {LINK_LABELS[l]} @{_largest_gpus(cube, l)} GPUs [%]" for l in links]
    rows = []
    for model in cube["model"].values:
        for preset in FRAMEWORKS:
            rows.append([model, preset] + [
                f"{100 * _at_largest(cube, 'scaling_efficiency', model, preset, l):.1f}" for l in links])
    return (f"Scaling efficiency (speedup / GPUs) at the largest GPU count of each link; V100, batch {BATCH} "
            f"per GPU; multi-node runs use {GPUS_PER_NODE} GPUs per node over PCIe 3.0.\n\n"
            + markdown_table(header, rows))


def main(argv=None) -> int:
    args = study_arguments("interconnects", __doc__.splitlines()[0], argv)
    started = time.perf_counter()
    cube = sweep_cube(**(QUICK if args.quick else FULL))
    write_dataset(cube, args.out / "cube.nc")
    plot_efficiency(cube, args.out / "scaling_efficiency.png")
    plot_overhead(cube, args.out / "communication_overhead.png")
    write_text(args.out / "table.md", table(cube))
    print(f"interconnects: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
