"""The priority channel's speed against the FIFO policy channel, side by side.

Layer-wise ResNet-50 (batch 32, 4 GPUs per node) over a 4 x 256 x 16 grid
(nodes, inter.bandwidth, io.time_per_sample: 16,384 configurations, one
output), through `sweep.run`, wfbp and priority in the same process after a
warm-up run of each (figures in experiments/BENCHMARKS.md).

    python experiments/benchmark_priority.py
"""
from __future__ import annotations

import time

import numpy as np

import sweep


def grid(strategy: str) -> dict:
    return {"model": "resnet50", "batch_size": 32, "nodes": [2, 4, 8, 16], "gpus_per_node": 4,
            "update": "layerwise", "strategy": strategy, "outputs": ["iteration_time"],
            "inter": {"bandwidth": list(np.geomspace(1e8, 1e10, 256).round())},
            "io": {"time_per_sample": list(np.linspace(1e-5, 1e-4, 16))}}


def main() -> int:
    for strategy in ("wfbp", "priority"):
        sweep.run(grid(strategy))  # compile
    rates = {}
    for _ in range(2):
        for strategy in ("wfbp", "priority"):
            start = time.perf_counter()
            size = sweep.run(grid(strategy))["iteration_time"].size
            seconds = time.perf_counter() - start
            rates[strategy] = size / seconds
            print(f"{strategy:9s} {size} configurations in {seconds:.2f} s: {size / seconds:,.0f} /s")
    print(f"priority / wfbp: {rates['priority'] / rates['wfbp']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
