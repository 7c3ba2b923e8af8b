"""Sweep throughput, compile time and peak memory, against a fused reference.

    python experiments/benchmark.py            # CPU: 1 device and one per core
    python experiments/benchmark.py --memory   # also a 10^8-configuration sampled sweep

For every device count the script runs, side by side in one process:
  reference  a fused, unrolled max-plus evaluation of the same resnet50/wfbp/ring
             DAG (experiments/fused_reference.py: straight-line numba code, one
             variable per task, parallel over configurations);
  kernel     the sweep kernel alone on one pre-built chunk;
  sweep.run  the whole path: parameter resolution, sharding, kernel, results
             (and the same grid under mgwfbp, whose buckets need the channel scan).
on a 1,048,576-configuration grid, best of several repeats. It also reports
the compile time of a 3-iteration bert_large DAG (host DAG build + XLA) and
the process's peak resident memory. On a GPU machine it adds a large grid.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

GRID = {
    "model": "resnet50",
    "strategy": "wfbp",
    "algorithm": "ring",
    "batch_size": [8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096],
    "nodes": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256],
    "gpus_per_node": [1, 2, 4, 8],
}


def grid(size_log2: int = 20) -> dict:
    """The benchmark grid with 2**size_log2 configurations (inter link swept)."""
    import numpy as np

    rest = 2 ** size_log2 // (16 * 16 * 4)
    side = int(round(rest ** 0.5))
    return {**GRID, "inter": {"bandwidth": [float(x) for x in np.geomspace(1e8, 1e12, rest // side)],
                              "alpha": [float(x) for x in np.geomspace(1e-7, 1e-2, side)]}}


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def worker(devices: int, memory: bool, gpu_log2: int) -> dict:
    if devices:
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    import jax
    import numpy as np

    import sweep
    from experiments.fused_reference import compile_reference, reference_scalars
    from sweep import evaluate, zoo
    from sweep.compiler import compile_zoo_model
    from sweep.params import kernel_params
    from sweep.plan import Plan
    from sweep.spec import load_spec

    result = {"platform": jax.devices()[0].platform, "devices": jax.device_count()}
    spec_dict = grid(20)
    spec = load_spec(spec_dict)
    n = spec.size
    model = zoo.get_model("resnet50")
    compiled, dag = compile_zoo_model("resnet50", None, 3)

    # Reference on the same configurations (setup not timed).
    plan = Plan(spec, n)
    chunk = next(plan.chunks())
    params = kernel_params(plan.columns(chunk)[0], model, chunk.padded)
    scalars = list(reference_scalars(params, compiled).values())
    if result["platform"] == "cpu":
        start = time.perf_counter()
        reference = compile_reference(dag, [l.forward_flops for l in model.layers], [l.params for l in model.layers])
        out = np.empty(n, np.float32)
        reference(*scalars, out)
        result["reference_compile_s"] = time.perf_counter() - start
        result["reference_rate"] = n / best_of(lambda: reference(*scalars, out), 5)

    # The sweep kernel alone on one pre-built, pre-sharded chunk.
    devs = evaluate.visible_devices()
    kplan = Plan(spec, evaluate.DEFAULT_CHUNK, multiple=devs.count)
    kchunk = next(kplan.chunks())
    kparams = devs.put(kernel_params(kplan.columns(kchunk)[0], model, kchunk.padded, compact=True))
    outputs = spec.outputs

    fixed = evaluate.spec_strategies(spec) <= {"bsp", "wfbp"}

    def kernel():
        jax.block_until_ready(evaluate._sweep_kernel(compiled, kparams, outputs, kchunk.padded, (), fixed))

    kernel()
    result["kernel_rate"] = kchunk.padded / best_of(kernel, 5)

    # The whole path.
    cube = sweep.run(spec)
    if result["platform"] == "cpu":
        assert np.allclose(cube["iteration_time"].values.reshape(-1), out, rtol=2e-5)
    result["sweep_rate"] = n / best_of(lambda: sweep.run(spec), 3)
    if "reference_rate" in result:
        result["sweep_over_reference"] = result["sweep_rate"] / result["reference_rate"]
    # The same grid under mgwfbp: data-dependent buckets take the channel scan.
    mg = load_spec({**spec_dict, "strategy": "mgwfbp"})
    sweep.run(mg)
    result["mgwfbp_sweep_rate"] = n / best_of(lambda: sweep.run(mg), 3)

    # Compile time of a 3-iteration bert_large DAG: host DAG + XLA compile.
    start = time.perf_counter()
    bert, _ = compile_zoo_model("bert_large", None, 3)
    bspec = load_spec({"model": "bert_large", "batch_size": [8, 16], "nodes": [1, 2]})
    bplan = Plan(bspec, evaluate.DEFAULT_CHUNK, multiple=devs.count)
    bchunk = next(bplan.chunks())
    bparams = devs.put(kernel_params(bplan.columns(bchunk)[0], zoo.get_model("bert_large"), bchunk.padded,
                                     compact=True))
    evaluate._primary_kernel.lower(bert, bparams, (), True).compile()
    result["bert_large_compile_s"] = time.perf_counter() - start
    result["bert_large_tasks"] = int(bert.num_tasks)

    if result["platform"] == "gpu":
        big = load_spec(grid(gpu_log2))
        sweep.run(big, chunk=1 << 22)
        result["gpu_grid"] = big.size
        result["gpu_sweep_rate"] = big.size / best_of(lambda: sweep.run(big, chunk=1 << 22), 2)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    if memory:
        result.update(sampled_memory())
    return result


def sampled_memory(n: int = 10**8) -> dict:
    """Peak memory of a sampled sweep of n configurations streamed to disk,
    measured in a child process (so nothing else counts)."""

    code = f"""
import resource, time, sweep, tempfile, os
spec = {{"model": "resnet50", "batch_size": 64, "gpus_per_node": 4,
        "outputs": ["iteration_time", "scaling_efficiency", "bottleneck"],
        "sample": {{"n": {n}, "seed": 1, "nodes": {{"min": 1, "max": 256, "scale": "log"}},
                    "inter": {{"bandwidth": {{"min": 1e8, "max": 1e12, "scale": "log"}},
                              "alpha": {{"min": 1e-7, "max": 1e-2, "scale": "log"}}}},
                    "strategy": ["bsp", "wfbp", "fusion", "mgwfbp"]}}}}
with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
    start = time.perf_counter()
    sweep.run(spec, output=os.path.join(d, "sampled.nc"), open_result=False)
    print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, rss = map(float, done.stdout.split())
    return {"sampled_configs": n, "sampled_seconds": seconds, "sampled_peak_rss_mib": rss}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help="also measure a 10^8-configuration sampled sweep")
    parser.add_argument("--gpu-log2", type=int, default=28, help="log2 of the GPU grid size (default 28)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.devices, args.memory, args.gpu_log2)))
        return 0

    cores = os.cpu_count() or 1
    runs = []
    for devices, memory in [(1, False), (cores, args.memory)]:
        cmd = [sys.executable, __file__, "--worker", "--devices", str(devices), "--gpu-log2", str(args.gpu_log2)]
        done = subprocess.run(cmd + (["--memory"] if memory else []), capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": _root()})
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"machine: {platform.processor() or platform.machine()}, {cores} cores, Python {platform.python_version()}")
    for r in runs:
        print(f"\n{r['devices']} {r['platform']} device(s), 1,048,576-configuration resnet50/wfbp/ring grid")
        for key, label, scale in [("reference_rate", "fused reference", 1e6), ("kernel_rate", "sweep kernel", 1e6),
                                  ("sweep_rate", "sweep.run", 1e6), ("mgwfbp_sweep_rate", "sweep.run, mgwfbp", 1e6),
                                  ("gpu_sweep_rate", "GPU sweep.run", 1e9)]:
            if key in r:
                unit = "G" if scale == 1e9 else "M"
                print(f"  {label:<22} {r[key] / scale:8.2f} {unit} configurations/s")
        if "sweep_over_reference" in r:
            print(f"  {'sweep.run / reference':<22} {r['sweep_over_reference']:8.2f}")
        print(f"  {'bert_large compile':<22} {r['bert_large_compile_s']:8.2f} s ({r['bert_large_tasks']} tasks)")
        print(f"  {'peak memory':<22} {r['peak_rss_mib']:8.0f} MiB")
        if "sampled_configs" in r:
            print(f"  {'10^8 sampled sweep':<22} {r['sampled_seconds']:8.1f} s, peak {r['sampled_peak_rss_mib']:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


if __name__ == "__main__":
    raise SystemExit(main())
