"""The embedded default study behind `ssgd-sweep demo`.

The DAG paper's question: which framework strategy and which interconnect
scale how far, for alexnet, googlenet and resnet50 on 4-GPU nodes.
"""
from __future__ import annotations

import xarray as xr

DEMO_SCENARIO = """\
# Which framework and interconnect scale how far? (after Shi et al., ICPADS 2018)
model = ["alexnet", "googlenet", "resnet50"]
batch_size = 64
gpu = "v100"
gpus_per_node = 4
intra = "pcie3"
inter = ["10gbe", "ib-fdr"]
preset = ["caffe-mpi", "cntk", "mxnet", "tensorflow", "horovod", "pytorch-ddp", "byteps"]
nodes = [1, 2, 4, 8, 16]
"""

EFFICIENCY_TARGET = 0.8


def summarize(cube: xr.Dataset) -> str:
    """Per model and interconnect: the best preset at the largest cluster, and
    the most GPUs at which each preset keeps >= 80 % scaling efficiency
    ("-": not even one node does)."""
    eff = cube["scaling_efficiency"]
    nodes = cube["nodes"].values
    gpus_per_node = 4
    largest = int(nodes.max()) * gpus_per_node
    lines = [f"scaling efficiency at {largest} GPUs, and the most GPUs with >= "
             f"{EFFICIENCY_TARGET:.0%} efficiency (4 GPUs per node, batch 64 per GPU)", ""]
    header = f"{'model':<10} {'inter':<7} {'best preset':<12} {'eff@' + str(largest):>7}   " + \
        "  ".join(f"{p:>11}" for p in cube["preset"].values)
    lines += [header, "-" * len(header)]
    for model in cube["model"].values:
        for inter in cube["inter"].values:
            block = eff.sel(model=model, inter=inter)
            at_max = block.sel(nodes=nodes.max())
            best = str(at_max.idxmax("preset").values)
            reach = []
            for preset in cube["preset"].values:
                ok = nodes[block.sel(preset=preset).values >= EFFICIENCY_TARGET]
                reach.append(f"{int(ok.max()) * gpus_per_node:>11}" if ok.size else f"{'-':>11}")
            lines.append(f"{model:<10} {inter:<7} {best:<12} {float(at_max.max()):>7.1%}   " + "  ".join(reach))
    return "\n".join(lines)
