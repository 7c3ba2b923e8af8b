"""Plain data parallelism against ZeRO-1/2/3 (FSDP): time and memory per GPU.

Large models are trained data-parallel with ZeRO or FSDP because of memory:
this study sets iteration time, exposed communication and memory per GPU
side by side, and says which configurations fit.

Models: GPT-3 1.3B and 6.7B (`gpt3_1.3b`, `gpt3_6.7b`: Brown et al. 2020,
Table 2.1), sequences of 2,048 tokens, 1 and 4 sequences per GPU. Cluster:
H100 SXM (80 GiB), 8 per node over NVLink 4, 1 to 32 nodes (8 to 256 GPUs)
joined by 100 or 400 Gb/s per node (catalog `100gbe`, `400gbe`: RoCE v2).
Training: mixed precision (BF16 tensor-core peak, 2-byte gradients) with
Adam. Stages: DDP (`zero = 0`, PyTorch DDP's 25 MiB buckets), ZeRO-1, ZeRO-2,
ZeRO-3 (= FSDP full sharding), each as DESIGN 2.5 defines it; ring
collectives. Compute: 50 % of peak at large batch and half of it at half a
sequence (`compute.efficiency = 0.5`, `compute.b_half = 0.5`): an
assumption about large matmuls, not a measurement. Memory per GPU is model
states and activations (`kernels/memory.py`; buffers and fragmentation not
counted).

Writes `zero_memory.md` (tables and findings), `zero_memory.png` and the cube
`zero_memory.nc` to experiments/results/zero_memory/ (a few seconds on 2 CPU
cores; `--quick`: GPT-2 small, 1 and 2 nodes, about 5 s).

    python experiments/zero_memory.py [--quick] [--out DIR]
"""
from __future__ import annotations

import sys
import time

import numpy as np
import xarray as xr

import sweep
from sweep import markdown_table, pyplot, save_figure, study_arguments, write_dataset, write_text

GPUS_PER_NODE = 8
SEQ_LEN = 2048
STAGES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}
NETWORK_LABELS = {"100gbe": "100 Gb/s", "400gbe": "400 Gb/s"}
COMMON = {
    "gpu": "h100", "intra": "nvlink4", "gpus_per_node": GPUS_PER_NODE, "preset": "pytorch-ddp",
    "algorithm": "ring", "optimizer": "adam", "precision": "mixed",
    "compute": {"efficiency": 0.5, "b_half": 0.5},
    "outputs": ["iteration_time", "throughput", "compute_time", "exposed_communication", "memory_per_gpu",
                "fits_in_memory"],
}
FULL = dict(models=("gpt3_1.3b", "gpt3_6.7b"), seq_len=SEQ_LEN, batch=(1, 4), nodes=(1, 2, 4, 8, 16, 32),
            networks=("100gbe", "400gbe"))
QUICK = dict(models=("gpt2",), seq_len=256, batch=(1, 4), nodes=(1, 2), networks=("100gbe", "400gbe"))


def sweep_cube(models, seq_len, batch, nodes, networks) -> xr.Dataset:
    cube = sweep.run({**COMMON, "model": list(models), "seq_len": seq_len, "batch_size": list(batch),
                      "nodes": list(nodes), "inter": list(networks), "zero": list(STAGES)})
    cube = cube.assign_coords(gpus=("nodes", np.asarray(cube["nodes"].values) * GPUS_PER_NODE,
                                    {"long_name": "GPUs in total", "units": "GPUs"}))
    cube["tokens_per_second"] = (cube["throughput"] * seq_len).assign_attrs(
        long_name="training throughput over all GPUs", units="tokens/s")
    cube.attrs.update(title="ZeRO stages against plain data parallelism: time and memory per GPU",
                      seq_len=seq_len, gpus_per_node=GPUS_PER_NODE)
    return cube


def _gb(x) -> str:
    return f"{float(x) / 1e9:.1f}"


def fastest_fitting(cube: xr.Dataset) -> xr.DataArray:
    """Per cell, the stage with the shortest iteration among those that fit (-1: none fits)."""
    t = cube["iteration_time"].where(cube["fits_in_memory"] == 1)
    best = t.fillna(np.inf).argmin("zero")
    return xr.where(t.notnull().any("zero"), cube["zero"].values[best], -1)


def table(cube: xr.Dataset, model: str, batch: int, inter: str) -> str:
    header = ["GPUs"] + [f"{STAGES[z]} [ms / GB]" for z in cube["zero"].values] + ["fastest that fits"]
    best = fastest_fitting(cube)
    rows = []
    for nodes in cube["nodes"].values:
        c = cube.sel(model=model, batch_size=batch, inter=inter, nodes=nodes)
        cells = []
        for z in cube["zero"].values:
            s = c.sel(zero=z)
            mark = "" if int(s["fits_in_memory"]) else " (does not fit)"
            cells.append(f"{1e3 * float(s['iteration_time']):.0f} / {_gb(s['memory_per_gpu'])}{mark}")
        b = int(best.sel(model=model, batch_size=batch, inter=inter, nodes=nodes))
        rows.append([int(nodes) * GPUS_PER_NODE] + cells + [STAGES.get(b, "none")])
    return markdown_table(header, rows)


def findings(cube: xr.Dataset) -> list[str]:
    """Statements read off the cube; every number is computed from it."""
    out = []
    fits = cube["fits_in_memory"] == 1
    t = cube["iteration_time"]
    for model in cube["model"].values:
        for batch in cube["batch_size"].values:
            f = fits.sel(model=model, batch_size=batch).isel(inter=0)
            fit_at = {STAGES[int(z)]: [int(g) for g, ok in zip(cube["gpus"].values, f.sel(zero=z).values) if ok]
                      for z in cube["zero"].values}
            parts = [f"{name} at {', '.join(map(str, gpus))} GPUs" if gpus else f"{name} nowhere"
                     for name, gpus in fit_at.items()]
            out.append(f"**{model}, {int(batch)} sequence(s) per GPU fits** " + "; ".join(parts) + ".")
    best = fastest_fitting(cube)
    counts = {STAGES.get(int(z), "none"): int((best == z).sum()) for z in (*cube["zero"].values, -1)}
    out.append(f"**Fastest stage that fits** ({best.size} cells): "
               + ", ".join(f"{k} {v}" for k, v in counts.items() if v) + ".")
    ratio3 = (t.sel(zero=3) / t.sel(zero=0))
    ratio2 = (t.sel(zero=2) / t.sel(zero=0))
    ratio1 = (t.sel(zero=1) / t.sel(zero=0))
    out.append(f"**Time against DDP** (all cells): ZeRO-1 {float(ratio1.min()):.2f}-{float(ratio1.max()):.2f}x "
               f"(one reduce-scatter after backward, nothing overlaps it), ZeRO-2 {float(ratio2.min()):.2f}-"
               f"{float(ratio2.max()):.2f}x (reduce-scatter during backward, all-gather after the 1/P update), "
               f"ZeRO-3 {float(ratio3.min()):.2f}-{float(ratio3.max()):.2f}x (all-gathers before every "
               "forward and backward). Where ZeRO-1 wins it is the ring's latency: its one reduce-scatter pays "
               "the 2(P-1) steps once, DDP's buckets once each.")
    multi = cube.sel(nodes=cube["nodes"].values[cube["nodes"].values > 1])
    if multi["nodes"].size:
        faster = multi["iteration_time"].sel(inter="100gbe") / multi["iteration_time"].sel(inter="400gbe")
        out.append(f"**400 against 100 Gb/s** on 2 nodes or more: {float(faster.min()):.2f}-"
                   f"{float(faster.max()):.2f}x faster iterations.")
    exposed = (cube["exposed_communication"] / t).sel(nodes=cube["nodes"].values[-1])
    out.append(f"**Exposed communication at {int(cube['gpus'].values[-1])} GPUs**: "
               f"{100 * float(exposed.min()):.0f}-{100 * float(exposed.max()):.0f} % of the iteration.")
    return out


def plot(cube: xr.Dataset, path, batch: int) -> None:
    plt = pyplot()
    models, networks = list(cube["model"].values), list(cube["inter"].values)
    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 6.4), squeeze=False,
                             layout="constrained")
    colors = dict(zip(cube["zero"].values, plt.get_cmap("tab10").colors))
    styles = dict(zip(networks, ("-", "--")))
    for c, model in enumerate(models):
        sel = cube.sel(model=model, batch_size=batch)
        for z in cube["zero"].values:
            for inter in networks:
                ax = axes[0, c]
                s = sel.sel(zero=z, inter=inter)
                ax.plot(cube["gpus"].values, s["tokens_per_second"].values / cube["gpus"].values,
                        styles[inter], color=colors[z], marker="o", markersize=3,
                        label=f"{STAGES[int(z)]}, {NETWORK_LABELS[inter]}")
            axes[1, c].plot(cube["gpus"].values, sel.sel(zero=z).isel(inter=0)["memory_per_gpu"].values / 1e9,
                            color=colors[z], marker="o", markersize=3, label=STAGES[int(z)])
        axes[1, c].axhline(80 * 2**30 / 1e9, color="black", linewidth=0.8, linestyle=":", label="H100 memory")
        axes[0, c].set_title(f"{model}, {batch} x {int(cube.attrs['seq_len'])} tokens per GPU", fontsize=9)
        for ax in axes[:, c]:
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            ax.set_xlabel("GPUs")
        axes[0, c].set_ylabel("tokens/s per GPU")
        axes[1, c].set_ylabel("memory per GPU [GB]")
    axes[0, -1].legend(fontsize=6.5)
    axes[1, -1].legend(fontsize=7)
    save_figure(fig, path)


def report(cube: xr.Dataset, seconds: float) -> str:
    lines = [
        "# Plain data parallelism against ZeRO-1/2/3 (FSDP)",
        "",
        f"`experiments/zero_memory.py` ({seconds:.0f} s on this machine): "
        f"{', '.join(cube['model'].values)}, sequences of {cube.attrs['seq_len']} tokens, H100 SXM (80 GiB), "
        f"{GPUS_PER_NODE} per node over NVLink 4, {int(cube['gpus'].min())} to {int(cube['gpus'].max())} GPUs "
        f"over {' or '.join(NETWORK_LABELS[i] for i in cube['inter'].values)} per node; mixed precision Adam; "
        "ring collectives; DDP with 25 MiB buckets. Compute at 50 % of the BF16 peak (an assumption). Each cell: "
        "iteration time [ms] / memory per GPU [GB] (model states and activations; buffers and fragmentation "
        "not counted, so near 80 GiB read it as optimistic).",
        "",
    ]
    for model in cube["model"].values:
        for batch in cube["batch_size"].values:
            for inter in cube["inter"].values:
                lines += [f"## {model}, {int(batch)} sequence(s) per GPU, {NETWORK_LABELS[inter]}", "",
                          table(cube, model, batch, inter)]
    lines += ["## Findings", ""] + [f"- {f}" for f in findings(cube)] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = study_arguments("zero_memory", "DDP against ZeRO-1/2/3: time and memory per GPU", argv)
    setting = QUICK if args.quick else FULL
    start = time.perf_counter()
    cube = sweep_cube(**setting)
    seconds = time.perf_counter() - start
    write_dataset(cube, args.out / "zero_memory.nc")
    plot(cube, args.out / "zero_memory.png", batch=int(cube["batch_size"].values[0]))
    text = report(cube, seconds)
    write_text(args.out / "zero_memory.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
