"""A reduced sweep of 2**30 configurations against the fused reference.

    python experiments/benchmark_reduce.py                 # 2**30 configurations, 1 and 2 CPU devices
    python experiments/benchmark_reduce.py --size-log2 24  # a quick run

For each device count, in one child process (so the device count is its
own and its peak memory is its own):
  reference  the fused numba evaluation of resnet50/wfbp (experiments/
             fused_reference.py) on a 2**22-configuration grid;
  full cube  sweep.run into an in-memory cube, 2**22 configurations;
and in a second child, alone: sweep.run with a `[reduce]` table over the
2**size_log2 grid (resnet50/wfbp: 16 batch sizes x 16 node counts x 4 GPUs
per node x inter-node bandwidths x latencies), reduced over the link
(`inter.bandwidth`, `inter.alpha`), two outputs, with min and argmin
("optimum") and with min, argmin, max, mean and q50 ("reduce"), each run
once to compile and then `--repeats` times, timed; before, between and after
the timed runs the sweep kernel alone on one pre-built chunk of the reduced
grid, called back to back for KERNEL_SECONDS. Each run is compared with the
mean of the kernel's rates just before and after it: on a 2-core VM the
kernel's best of 5 calls (20 ms) ranged from 39 to 78 M/s within minutes,
so only rates measured over a similar time, close together, compare.

For the same reason the device counts are compared in pairs: the reduced
children run `--rounds` times, the device counts alternating in order
(1, 2, then 2, 1, ...), and each device count's rate is divided by that of
one device in the child next to it in time (the same round). Rates, ratios
(means over the rounds; "x one device" as the geometric mean of the paired
ratios, with their range), and each child's peak resident memory. Prints
one JSON object per device count and a summary line.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np

import sweep

try:
    from experiments.benchmark import best_of, drawn_on_the_host, grid, peak_rss_mib, reference
except ModuleNotFoundError:  # run as a script
    from benchmark import best_of, drawn_on_the_host, grid, peak_rss_mib, reference

SIDE_LOG2 = 22  # the reference and the full cube
KERNEL_SECONDS = 5.0
REDUCE = {"over": ["inter.bandwidth", "inter.alpha"], "statistics": ["min", "argmin", "max", "mean", "q50"]}
OPTIMUM = {**REDUCE, "statistics": ["min", "argmin"]}  # the question "which link is best": the lightest fold
OUTPUTS = ["iteration_time", "scaling_efficiency"]


def side_by_side(size_log2: int) -> dict:
    spec = sweep.load_spec({**grid(SIDE_LOG2), "outputs": OUTPUTS})
    ref = reference(spec)
    sweep.run(spec)  # compiles
    full = spec.size / best_of(lambda: sweep.run(spec), 3)
    return {"reference_rate": ref["rate"], "full_cube_rate": full}


def sustained_kernel_rate(spec, seconds: float = KERNEL_SECONDS) -> float:
    """The sweep kernel alone on the first chunk of `spec`, called back to back
    for `seconds`: configurations per second over the whole time."""
    prepared = sweep.prepare_chunk(spec)
    prepared.evaluate()  # compiles
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        prepared.evaluate()
        calls += 1
    return calls * prepared.size / (time.perf_counter() - start)


def reduced(size_log2: int, repeats: int = 1) -> dict:
    """Each reduced sweep `repeats` times (after one run that compiles),
    alternating with the kernel alone: each run's ratio is to the mean of the
    kernel's sustained rates just before and just after it; rates and ratios
    are the means over the repeats."""
    # The kernel alone on the first chunk of the reduced grid itself (its boxes).
    kernel_spec = sweep.load_spec({**grid(size_log2), "outputs": OUTPUTS})
    specs = {name: sweep.load_spec({**grid(size_log2), "outputs": OUTPUTS, "reduce": table})
             for name, table in (("optimum", OPTIMUM), ("reduce", REDUCE))}
    for spec in specs.values():
        # The same scenario first (a smaller grid would not do: which parameters
        # vary decides the compiled programs, so its timed run would compile).
        sweep.run(spec)
    kernels = [sustained_kernel_rate(kernel_spec)]
    rates, ratios = {name: [] for name in specs}, {name: [] for name in specs}
    for _ in range(repeats):
        for name, spec in specs.items():
            start = time.perf_counter()
            result = sweep.run(spec)
            rate = spec.size / (time.perf_counter() - start)
            assert result["iteration_time_min"].notnull().all()
            kernels.append(sustained_kernel_rate(kernel_spec))
            rates[name].append(rate)
            ratios[name].append(rate / ((kernels[-2] + kernels[-1]) / 2))
    out = {"grid": kernel_spec.size, "kernel_rates": kernels, "kernel_rate": float(np.mean(kernels)),
           "peak_rss_mib": peak_rss_mib()}
    for name in specs:
        out.update({f"{name}_rates": rates[name], f"{name}_rate": float(np.mean(rates[name])),
                    f"{name}_vs_kernel": float(np.mean(ratios[name]))})
    return out


SAMPLE = {"model": "resnet50", "gpus_per_node": 8, "nodes": 16, "outputs": ["iteration_time"],
          "sample": {"seed": 1, "inter": {"bandwidth": {"min": 1.25e9, "max": 5e11, "scale": "log"},
                                          "alpha": {"min": 1e-6, "max": 1e-3, "scale": "log"}},
                     "batch_size": {"min": 8, "max": 256, "scale": "log"},
                     "strategy": ["wfbp", "fusion", "mgwfbp"]},
          "reduce": {"over": ["config"], "statistics": ["min", "argmin", "q50"]}}


def sampled(size_log2: int) -> dict:
    """A random sample reduced over its configurations, drawn on the devices
    and (side by side, same process) on the host: rates of the second runs."""
    spec = sweep.load_spec({**SAMPLE, "sample": {**SAMPLE["sample"], "n": 2 ** size_log2}})
    out = {"sample": spec.size}
    for name, drawn_where in (("device_draws", contextlib.nullcontext), ("host_draws", drawn_on_the_host)):
        with drawn_where():
            sweep.run(spec)  # compiles
            out[f"{name}_rate"] = spec.size / best_of(lambda: sweep.run(spec), 2)
    return out


def child(devices: int, what: str, *args) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    code = (f"import sys, json; sys.path[:0] = [{_root()!r}, {os.path.dirname(os.path.abspath(__file__))!r}]; "
            f"import benchmark_reduce as b; print(json.dumps(b.{what}(*{args!r})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-log2", type=int, default=30)
    parser.add_argument("--devices", default="1,2", help="CPU device counts (comma-separated; the first is "
                        "the one the others are compared with)")
    parser.add_argument("--rounds", type=int, default=3, help="reduced children per device count, the counts' "
                        "order alternating (default 3)")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each reduced sweep per child")
    parser.add_argument("--sampled", type=int, metavar="LOG2", help="only the sampled sweep of 2**LOG2, "
                        "drawn on the devices against drawn on the host, on one device")
    args = parser.parse_args(argv)
    if args.sampled:
        row = child(1, "sampled", args.sampled)
        print(json.dumps(row))
        print(f"summary: sample of {row['sample']:,} reduced over config: drawn on the device "
              f"{row['device_draws_rate'] / 1e6:.2f} M/s, on the host {row['host_draws_rate'] / 1e6:.2f} M/s "
              f"({row['device_draws_rate'] / row['host_draws_rate']:.2f}x)")
        return 0
    counts = [int(d) for d in args.devices.split(",")]
    rows = {d: {"devices": d, "platform": jax.devices()[0].platform, **child(d, "side_by_side", args.size_log2)}
            for d in counts}
    rounds = []  # per round: {devices: the reduced child's row}
    for r in range(args.rounds):
        order = counts if r % 2 == 0 else counts[::-1]
        rounds.append({d: child(d, "reduced", args.size_log2, args.repeats) for d in order})
    names = ("optimum", "reduce")
    for d, row in rows.items():
        runs = [one[d] for one in rounds]
        row.update(grid=runs[0]["grid"], rounds=runs, peak_rss_mib=max(run["peak_rss_mib"] for run in runs),
                   kernel_rate=float(np.mean([run["kernel_rate"] for run in runs])))
        for name in names:
            row[f"{name}_rate"] = float(np.mean([run[f"{name}_rate"] for run in runs]))
            row[f"{name}_vs_kernel"] = float(np.mean([run[f"{name}_vs_kernel"] for run in runs]))
            row[f"{name}_vs_reference"] = row[f"{name}_rate"] / row["reference_rate"]
            paired = [one[d][f"{name}_rate"] / one[counts[0]][f"{name}_rate"] for one in rounds]
            row[f"{name}_vs_one_device_rounds"] = paired
            row[f"{name}_vs_one_device"] = float(np.exp(np.mean(np.log(paired))))
        print(json.dumps(row), flush=True)
    print("summary: " + "; ".join(
        f"{r['devices']} device(s), {r['grid']:,} configurations, {args.rounds} round(s): " + ", ".join(
            f"{name} {r[name + '_rate'] / 1e6:.1f} M/s ({r[name + '_vs_reference']:.2f}x reference, "
            f"{r[name + '_vs_kernel']:.2f}x kernel, {r[name + '_vs_one_device']:.2f}x one device"
            + (f" [{min(r[name + '_vs_one_device_rounds']):.2f}-{max(r[name + '_vs_one_device_rounds']):.2f}]"
               if r["devices"] != counts[0] else "") + ")"
            for name in names) + f", peak {r['peak_rss_mib']:.0f} MiB" for r in rows.values()))
    return 0


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


if __name__ == "__main__":
    sys.exit(main())
