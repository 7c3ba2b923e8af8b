"""What does each DAG shape beyond the update barrier change (DESIGN 2.5)?

Today's model ends every iteration with one update barrier after all
communication. DESIGN 2.5 adds the shapes real frameworks use; this study
sets each against that barrier baseline (ring all-reduce, same strategy):

- `layerwise`: each layer is updated once its bucket is all-reduced, and the
  next forward of that layer waits only for its own update;
- `hierarchical`, non-pipelined vs `hierarchical.pipelined = true`: the intra
  reduce-scatter, inter all-reduce and intra all-gather of each bucket on
  three FIFO channels of their own (compared with each other, and with the
  flat ring barrier);
- `zero = 1, 2, 3` (ZeRO / FSDP): reduce-scatter the gradients, update 1/P of
  the parameters, all-gather them (stage 3: before every forward and backward
  of each layer);
- `accumulation = 4`: four micro-batches per step, communication after the
  last one. One iteration then covers 4x the samples, so the study also
  reports the time per micro-batch (iteration / 4); `throughput` counts every
  sample of the step.

Models: resnet50 (batch 64), bert_large (batch 16, sequence 128) and gpt2
(GPT-2 small, batch 8, sequence 1024) on V100s, 4 per node over PCIe 3.0, on
4 and 8 nodes joined by 10GbE (catalog `10gbe`: 30 us, 1.25 GB/s, TCP) or a
100 Gb RDMA network (catalog `100gbe`: 3 us, 12.5 GB/s, RoCE v2), with the
wfbp and mgwfbp strategies. Writes `shapes.md` (tables and findings),
`shapes.png` and the cube `shapes.nc` to experiments/results/ (under a minute
on 2 CPU cores; `--quick`: resnet50, 4 nodes, wfbp, about 30 s).

    python experiments/shapes.py [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

import sweep
from sweep import markdown_table, pyplot, save_figure, write_dataset, write_text

# Each shape: (label, scenario keys over the common ones, the shape it is compared with).
SHAPES = {
    "barrier": ({"algorithm": "ring"}, "barrier"),
    "layerwise": ({"algorithm": "ring", "update": "layerwise"}, "barrier"),
    "hierarchical": ({"algorithm": "hierarchical", "hierarchical.pipelined": False}, "barrier"),
    "hierarchical_pipelined": ({"algorithm": "hierarchical", "hierarchical.pipelined": True}, "hierarchical"),
    "zero1": ({"algorithm": "ring", "zero": 1}, "barrier"),
    "zero2": ({"algorithm": "ring", "zero": 2}, "barrier"),
    "zero3": ({"algorithm": "ring", "zero": 3}, "barrier"),
    "accumulation4": ({"algorithm": "ring", "accumulation": 4}, "barrier"),
}
SHAPE_LABELS = {"barrier": "barrier", "layerwise": "layerwise", "hierarchical": "hier.",
                "hierarchical_pipelined": "hier. pipelined", "zero1": "ZeRO-1", "zero2": "ZeRO-2",
                "zero3": "ZeRO-3", "accumulation4": "accum. 4"}
MODELS = {  # per-GPU batch and sequence length: typical fp32 V100 settings
    "resnet50": {"batch_size": 64},
    "bert_large": {"batch_size": 16, "seq_len": 128},
    "gpt2": {"batch_size": 8, "seq_len": 1024},
    "alexnet": {"batch_size": 64},  # for the tests' tiny setting
}
NETWORKS = ("10gbe", "100gbe")
NETWORK_LABELS = {"10gbe": "10GbE (30 us, 1.25 GB/s)", "100gbe": "100 Gb RDMA (3 us, 12.5 GB/s)"}
STRATEGIES = ("wfbp", "mgwfbp")
GPUS_PER_NODE = 4
COMMON = {"gpu": "v100", "intra": "pcie3", "gpus_per_node": GPUS_PER_NODE}

FULL = dict(models=("resnet50", "bert_large", "gpt2"), networks=NETWORKS, nodes=(4, 8), strategies=STRATEGIES)
QUICK = dict(models=("resnet50",), networks=NETWORKS, nodes=(4,), strategies=("wfbp",))

OUTPUTS = ("iteration_time", "throughput", "compute_time", "communication_time", "exposed_communication",
           "scaling_efficiency")


def micro_batches(shape: str) -> int:
    return int(SHAPES[shape][0].get("accumulation", 1))


def _run_shape(model, shape, networks, nodes, strategies) -> xr.Dataset:
    keys, _ = SHAPES[shape]
    spec = {**COMMON, "model": model, **MODELS[model], **keys, "strategy": list(strategies),
            "outputs": list(OUTPUTS)}
    cube = sweep.run({**spec, "inter": list(networks), "nodes": list(nodes)})
    return cube.transpose("strategy", "inter", "nodes")


def sweep_cube(models, networks, nodes, strategies) -> xr.Dataset:
    per_model = []
    for model in models:
        cubes = [_run_shape(model, shape, networks, nodes, strategies).drop_attrs(deep=False)
                 for shape in SHAPES]
        per_model.append(xr.concat(cubes, dim=xr.DataArray(list(SHAPES), dims="shape"), combine_attrs="override"))
    cube = xr.concat(per_model, dim=xr.DataArray(list(models), dims="model"), combine_attrs="override")
    cube = cube[list(OUTPUTS)].transpose("model", "inter", "nodes", "strategy", "shape")
    cube["model"].attrs.update(long_name="DNN model", units="")
    cube["shape"].attrs.update(long_name="DAG shape (DESIGN 2.5)", units="")
    micro = xr.DataArray([micro_batches(s) for s in SHAPES], dims="shape",
                         attrs={"long_name": "micro-batches per step", "units": "micro-batches"})
    batch = xr.DataArray([MODELS[m]["batch_size"] for m in models], dims="model",
                         attrs={"long_name": "per-GPU micro-batch size", "units": "samples"})
    reference = xr.DataArray([SHAPES[s][1] for s in SHAPES], dims="shape",
                             attrs={"long_name": "shape each shape is compared with", "units": ""})
    cube = cube.assign_coords(micro_batches=micro, batch_size=batch, reference=reference,
                              gpus=("nodes", np.asarray(cube["nodes"].values) * GPUS_PER_NODE,
                                    {"long_name": "GPUs in total", "units": "GPUs"}))
    t = cube["iteration_time"]
    cube["time_per_micro_batch"] = (t / cube["micro_batches"]).assign_attrs(
        long_name="iteration time per micro-batch", units="s")
    base = t.sel(shape="barrier", drop=True)
    cube["time_vs_barrier"] = (cube["time_per_micro_batch"] / base).assign_attrs(
        long_name="time per micro-batch relative to the ring barrier baseline", units="1")
    ref = xr.concat([cube["time_per_micro_batch"].sel(shape=r, drop=True) for r in reference.values], dim="shape")
    cube["time_vs_reference"] = (cube["time_per_micro_batch"] / ref.assign_coords(shape=cube["shape"])).assign_attrs(
        long_name="time per micro-batch relative to the shape's reference (hierarchical for the pipelined one, "
                  "else the ring barrier)", units="1")
    cube["throughput_vs_barrier"] = (cube["throughput"] / cube["throughput"].sel(shape="barrier", drop=True)) \
        .assign_attrs(long_name="throughput (samples/s) relative to the ring barrier baseline", units="1")
    cube.attrs.update(title="shapes: each DAG shape of DESIGN 2.5 against the update barrier",
                      gpus_per_node=GPUS_PER_NODE, gpu=COMMON["gpu"], intra=COMMON["intra"],
                      models=repr({m: MODELS[m] for m in models}))
    return cube


def _ms(x) -> str:
    return f"{1e3 * float(x):.1f}"


def main_table(cube: xr.Dataset, nodes: int, strategy: str) -> str:
    header = ["model", "network", "shape", "iteration [ms]", "per micro-batch [ms]", "throughput [samples/s]",
              "compute [ms]", "communication [ms]", "exposed comm. [ms]", "vs barrier [x]", "vs reference [x]"]
    rows = []
    for model in cube["model"].values:
        for inter in cube["inter"].values:
            for shape in cube["shape"].values:
                c = cube.sel(model=model, inter=inter, nodes=nodes, strategy=strategy, shape=shape)
                ref = str(c["reference"].values)
                rows.append([model, NETWORK_LABELS[inter].split(" (")[0], SHAPE_LABELS[shape],
                             _ms(c["iteration_time"]), _ms(c["time_per_micro_batch"]), f"{float(c['throughput']):.0f}",
                             _ms(c["compute_time"]), _ms(c["communication_time"]),
                             _ms(c["exposed_communication"]), f"{float(c['time_vs_barrier']):.3f}",
                             f"{float(c['time_vs_reference']):.3f}" + ("" if ref == "barrier" else f" (vs {ref})")])
    return markdown_table(header, rows)


def ratio_table(cube: xr.Dataset) -> str:
    shapes = [s for s in cube["shape"].values if s != "barrier"]
    header = ["model", "network", "GPUs", "strategy", "barrier [ms]"] + [f"{SHAPE_LABELS[s]} [x]" for s in shapes]
    rows = []
    for model in cube["model"].values:
        for inter in cube["inter"].values:
            for nodes in cube["nodes"].values:
                for strategy in cube["strategy"].values:
                    c = cube.sel(model=model, inter=inter, nodes=nodes, strategy=strategy)
                    rows.append([model, NETWORK_LABELS[inter].split(" (")[0], int(nodes) * GPUS_PER_NODE, strategy,
                                 _ms(c["iteration_time"].sel(shape="barrier"))]
                                + [f"{float(c['time_vs_barrier'].sel(shape=s)):.3f}" for s in shapes])
    return markdown_table(header, rows)


def _value(x):
    return x.item() if hasattr(x, "item") else x


def _where(da: xr.DataArray, how: str) -> tuple[dict, float]:
    """Coordinates and value of the arg-`how` ("argmin"/"argmax") cell of `da`."""
    flat = int(getattr(np, f"nan{how}")(da.values))
    idx = dict(zip(da.dims, np.unravel_index(flat, da.shape)))
    return {d: _value(da[d].values[i]) for d, i in idx.items()}, float(da.isel(idx))


def _cell(at: dict) -> str:
    parts = [str(at[k]) for k in ("model",) if k in at]
    if "inter" in at:
        parts.append(NETWORK_LABELS[at["inter"]].split(" (")[0])
    if "nodes" in at:
        parts.append(f"{int(at['nodes']) * GPUS_PER_NODE} GPUs")
    if "strategy" in at:
        parts.append(str(at["strategy"]))
    return ", ".join(parts)


def _span(da: xr.DataArray) -> str:
    lo, hi = float(da.min()), float(da.max())
    return f"{lo:.3f}x" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f}-{hi:.3f}x"


def _count(mask: xr.DataArray) -> str:
    return f"{int(mask.sum())} of {mask.size}"


def findings(cube: xr.Dataset) -> list[str]:
    """Statements read off the cube (every number is computed from it), over
    all models, networks, node counts and strategies unless they say otherwise."""
    out = []
    r = cube["time_vs_barrier"]
    t = cube["iteration_time"]
    free = t - cube["exposed_communication"]  # the iteration with free communication
    ms = 1e3

    # Layerwise update.
    lw = r.sel(shape="layerwise")
    gain = t.sel(shape="barrier") - t.sel(shape="layerwise")
    free_gain = free.sel(shape="barrier") - free.sel(shape="layerwise")
    more_exposed = cube["exposed_communication"].sel(shape="layerwise") - cube["exposed_communication"].sel(
        shape="barrier")
    at, best = _where(lw, "argmin")
    worst_at, worst = _where(more_exposed, "argmax")
    text = (f"**Layerwise update**: {_span(lw)} of the barrier time (best {best:.3f}x: {_cell(at)}); faster in "
            f"{_count(lw < 1)} cells, by {ms * float(gain.min()):.1f}-{ms * float(gain.max()):.1f} ms. With free "
            f"communication it saves {ms * float(free_gain.min()):.1f}-{ms * float(free_gain.max()):.1f} ms: the "
            "per-layer updates leave the compute chain (each runs once its gradient is in).")
    if float(more_exposed.min()) > -1e-4:
        text += (" It hides no communication (exposed communication never falls by more than "
                 f"{ms * max(0.0, -float(more_exposed.min())):.2f} ms): the channel sends in backward order, so "
                 "layer 1's gradient goes last and the next `fwd_1` waits for it as it waits for the barrier")
        if worst > 1e-4:
            text += f" ({ms * worst:.1f} ms more exposed at worst: {_cell(worst_at)})"
        text += "."
    out.append(text)

    # Hierarchical, and its pipelining.
    pip = cube["time_vs_reference"].sel(shape="hierarchical_pipelined")
    hier = r.sel(shape="hierarchical")
    at, best = _where(pip, "argmin")
    parts = []
    for inter in cube["inter"].values:
        h = hier.sel(inter=inter)
        parts.append(f"{NETWORK_LABELS[inter].split(' (')[0]} {_span(h)}")
    out.append(
        f"**Pipelined hierarchical all-reduce**: {_span(pip)} of the non-pipelined hierarchical time"
        + (", never slower" if float(pip.max()) <= 1 + 1e-5 else f", slower in {_count(pip > 1 + 1e-5)} cells")
        + f" ({_count(pip < 0.9995)} cells gain more than 0.05 %; best {best:.3f}x: {_cell(at)}). "
        "The hierarchical algorithm itself, against the flat ring barrier: " + "; ".join(parts)
        + "; pipelined against the flat ring barrier: "
        f"{_span(r.sel(shape='hierarchical_pipelined'))}.")

    # ZeRO.
    out.append("**ZeRO** against the barrier with the same strategy (time per iteration):")
    for z in (1, 2, 3):
        zr = r.sel(shape=f"zero{z}")
        by_net = "; ".join(f"{NETWORK_LABELS[i].split(' (')[0]} {_span(zr.sel(inter=i))}" for i in cube["inter"].values)
        faster = zr < 1
        text = f"  - ZeRO-{z}: {by_net}; slower in {_count(zr > 1)} cells"
        if bool(faster.any()):
            cells = [_cell({d: _value(zr[d].values[i]) for d, i in zip(zr.dims, idx)})
                     + f" {float(zr.values[idx]):.3f}x" for idx in zip(*np.nonzero(faster.values))]
            text += f", faster in {len(cells)} ({'; '.join(cells)})"
        same = float(abs(t.sel(shape=f"zero{z}") / t.sel(shape=f"zero{z}").isel(strategy=0) - 1).max())
        if cube.sizes["strategy"] > 1 and same < 1e-5:
            text += f". Identical for {' and '.join(cube['strategy'].values)} in every cell"
        out.append(text + ".")
    if cube.sizes["strategy"] > 1:
        out.append("  - ZeRO-1 sends all gradients in one reduce-scatter after the backward pass (no overlap, "
                   "like BSP), then all-gathers every parameter after the update; in ZeRO-2 only that final "
                   "all-gather cannot overlap. Against mgwfbp's barrier (which already merges buckets), ZeRO-1 is "
                   f"{_span(r.sel(shape='zero1', strategy='mgwfbp'))} and ZeRO-2 "
                   f"{_span(r.sel(shape='zero2', strategy='mgwfbp'))}.")
    z3 = cube["communication_time"].sel(shape="zero3") / cube["communication_time"].sel(shape="barrier",
                                                                                         strategy="wfbp")
    out.append(f"  - ZeRO-3 spends {_span(z3)} the wfbp barrier's communication time: a reduce-scatter per layer "
               "and two all-gathers of it (forward and backward); with ring costs each half costs half an "
               "all-reduce. Gathers and reduce-scatters run on channels of their own, at the same time.")

    # Accumulation.
    acc = r.sel(shape="accumulation4")
    tp = cube["throughput_vs_barrier"].sel(shape="accumulation4")
    exposed_diff = abs(cube["exposed_communication"].sel(shape="accumulation4")
                       - cube["exposed_communication"].sel(shape="barrier"))
    share = cube["exposed_communication"] / t
    at, best = _where(acc, "argmin")
    out.append(
        f"**Accumulation 4**: time per micro-batch {_span(acc)} of the barrier iteration, i.e. throughput "
        f"x{float(tp.min()):.2f}-x{float(tp.max()):.2f} (best: {_cell(at)}). Exposed communication per step is "
        f"the barrier's to within {1e6 * float(exposed_diff.max()):.0f} us (it follows the last micro-batch's "
        f"backward exactly as in one iteration), so its share of the step falls from "
        f"{100 * float(share.sel(shape='barrier').min()):.1f}-{100 * float(share.sel(shape='barrier').max()):.1f} % "
        f"to {100 * float(share.sel(shape='accumulation4').min()):.1f}-"
        f"{100 * float(share.sel(shape='accumulation4').max()):.1f} %.")

    # Best shape per cell (within 0.05 % of the fastest; hierarchical counts once, pipelined or not).
    per_micro = cube["time_per_micro_batch"]
    near = per_micro <= per_micro.min("shape") * 1.0005
    groups = {"accum. 4": ["accumulation4"], "hierarchical (pipelined or not)": ["hierarchical",
              "hierarchical_pipelined"], "layerwise": ["layerwise"], "barrier": ["barrier"],
              "ZeRO-1/2/3": ["zero1", "zero2", "zero3"]}
    counts = {g: int(near.sel(shape=[s for s in members if s in cube["shape"].values]).any("shape").sum())
              for g, members in groups.items()}
    out.append(f"**Fastest per micro-batch** (within 0.05 % of the best; a tie counts for each; "
               f"{near.isel(shape=0).size} cells): "
               + ", ".join(f"{g} {n}" for g, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n) + ".")
    return out


def plot_shapes(cube: xr.Dataset, path, nodes: int, strategy: str) -> None:
    plt = pyplot()
    models, networks = list(cube["model"].values), list(cube["inter"].values)
    shapes = list(cube["shape"].values)
    fig, axes = plt.subplots(len(networks), len(models), figsize=(3.6 * len(models), 3.3 * len(networks)),
                             squeeze=False, sharey=True, layout="constrained")
    colors = dict(zip(shapes, plt.get_cmap("tab10").colors))
    x = np.arange(len(shapes))
    for r, inter in enumerate(networks):
        for c, model in enumerate(models):
            ax = axes[r, c]
            sel = cube.sel(model=model, inter=inter, nodes=nodes, strategy=strategy)
            base = float(sel["iteration_time"].sel(shape="barrier"))
            micro = sel["micro_batches"].values
            total = sel["iteration_time"].values / micro / base
            exposed = np.clip(sel["exposed_communication"].values, 0, None) / micro / base
            ax.bar(x, total - exposed, color=[colors[s] for s in shapes], label="rest of the iteration")
            ax.bar(x, exposed, bottom=total - exposed, color="none", edgecolor="black", hatch="///", linewidth=0.6,
                   label="exposed communication")
            for xi, v in zip(x, total):
                ax.text(xi, v + 0.02, f"{v:.2f}", ha="center", va="bottom", fontsize=6.5, rotation=90)
            ax.axhline(1.0, color="black", linewidth=0.7, linestyle="--")
            ax.set_xticks(x, [SHAPE_LABELS[s] for s in shapes], rotation=60, ha="right", fontsize=8)
            ax.set_title(f"{model}, {NETWORK_LABELS[inter]}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if c == 0:
                ax.set_ylabel("time per micro-batch / barrier [1]")
    top = float((cube["time_per_micro_batch"] / cube["iteration_time"].sel(shape="barrier"))
                .sel(nodes=nodes, strategy=strategy).max())
    axes[0, 0].set_ylim(0, max(1.25, 1.15 * top + 0.1))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles[-1:], [f"{labels[-1]} (hatched; bar colour: the rest of the iteration)"], fontsize=8,
               loc="outside lower center")
    fig.suptitle(f"Each DAG shape against the update barrier: {nodes} nodes x {GPUS_PER_NODE} V100, {strategy}, "
                 "ring (hier.: hierarchical); accum. 4 per micro-batch", fontsize=10)
    save_figure(fig, path)


def report(cube: xr.Dataset, seconds: float) -> str:
    nodes = int(cube["nodes"].min())
    strategy = str(cube["strategy"].values[0])
    models = ", ".join(f"{m} (batch {MODELS[m]['batch_size']}"
                       + (f", sequence {MODELS[m]['seq_len']})" if "seq_len" in MODELS[m] else ")")
                       for m in cube["model"].values)
    lines = [
        "# DAG shapes against the update barrier",
        "",
        f"`experiments/shapes.py` ({seconds:.0f} s on this machine): {models} on V100s, {GPUS_PER_NODE} per node "
        f"over PCIe 3.0, {' and '.join(str(int(n)) for n in cube['nodes'].values)} nodes over "
        + " or ".join(NETWORK_LABELS[i] for i in cube["inter"].values)
        + f"; strategies {', '.join(cube['strategy'].values)}. The baseline is today's shape: ring all-reduce, "
        "one update barrier after all communication. `hier.` is the hierarchical all-reduce without pipelining "
        "(the reference of `hier. pipelined`). `accum. 4` runs four micro-batches of the same per-GPU batch per "
        "step, so its iteration covers 4x the samples: it is compared per micro-batch (iteration / 4), and its "
        "throughput counts every sample.",
        "",
        "Communication time is the sum of the communication tasks' durations in one iteration, over every "
        "channel (DESIGN 2.4; shapes with several channels: the pipelined stages, ZeRO's parameter "
        "all-gathers); exposed communication is the iteration time minus the same iteration with free "
        "communication.",
        "",
        f"## {nodes * GPUS_PER_NODE} GPUs ({nodes} nodes), {strategy}",
        "",
        main_table(cube, nodes, strategy),
        "## Time per micro-batch relative to the barrier, every setting",
        "",
        ratio_table(cube),
        "## Findings",
        "",
    ]
    lines += [f"- {f}" if not f.startswith("  ") else f for f in findings(cube)]
    lines += ["", "![Time per micro-batch relative to the barrier](shapes.png)", ""]
    return "\n".join(lines)


def arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="experiments/shapes.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a small grid (resnet50, 4 nodes, wfbp; about 30 s)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="output folder for shapes.md, shapes.png and shapes.nc (default: experiments/results/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def main(argv=None) -> int:
    args = arguments(argv)
    started = time.perf_counter()
    grid = QUICK if args.quick else FULL
    cube = sweep_cube(**grid)
    seconds = time.perf_counter() - started
    write_dataset(cube, args.out / "shapes.nc")
    plot_shapes(cube, args.out / "shapes.png", nodes=int(cube["nodes"].min()), strategy=grid["strategies"][0])
    write_text(args.out / "shapes.md", report(cube, seconds))
    print(f"shapes: wrote {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
