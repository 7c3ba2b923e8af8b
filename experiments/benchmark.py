"""Sweep throughput, compile time and peak memory, against a fused reference.

    python experiments/benchmark.py                  # CPU: 1 device and one per core
    python experiments/benchmark.py --size-log2 14   # a quick run on a 16,384-configuration grid
    python experiments/benchmark.py --memory         # also a 10^8-configuration sampled sweep

For every device count the script runs, side by side in one process (best of
several repeats):
  reference  a fused, unrolled max-plus evaluation of the scenario's own DAG
             under wfbp (experiments/fused_reference.py: straight-line numba
             code, one variable per task, parallel over configurations);
  kernel     the sweep kernel alone on one pre-built chunk (resnet50/wfbp);
  sweep.run  the whole path: parameter resolution, sharding, kernel, results.
The scenarios (`SCENARIOS`): resnet50/wfbp with an update barrier on a
2**20-configuration grid, held to >= 1.0 times its reference; mgwfbp on the
same DAG (data-dependent buckets need the channel scan), >= 0.5 times the
wfbp reference; the layer-wise update and ZeRO-3, whose DAGs are lowered
unrolled, on 2**24 configurations (where a sweep runs them as straight-line
code), >= 0.3 times their own reference, and the same on bert_large, on
smaller grids (2**16 configurations, 2**12 for bert_large's layer-wise
update; the scans). `--size-log2` scales every grid alike. It also
reports each DAG shape's lowering mode, the compile time of a 3-iteration
bert_large DAG (host DAG build + XLA, < 10 s) and the process's peak
resident memory. On a GPU machine it adds a large grid.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np

import jax

import sweep
try:
    from experiments.fused_reference import compile_reference, reference_inputs
except ModuleNotFoundError:  # run as a script: its own folder is on sys.path, the repository root is not
    from fused_reference import compile_reference, reference_inputs

GRID = {
    "model": "resnet50",
    "strategy": "wfbp",
    "algorithm": "ring",
    "batch_size": [8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096],
    "nodes": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256],
    "gpus_per_node": [1, 2, 4, 8],
}


class Scenario(NamedTuple):
    keys: dict  # set over GRID
    reference: str | None  # the scenario whose fused reference (wfbp) it is held to
    target: float | None  # the least sweep.run / reference wanted
    log2: int = 20  # its grid's size, 2**log2 configurations at the default --size-log2 (20)


# resnet50's layer-wise and ZeRO-3 grids are 2**24 configurations: a sweep
# runs an unrolled program as straight-line code from
# `sweep.engine.xla.STRAIGHT_FROM` (2**24) configurations of one DAG shape,
# and with the scans below that. bert_large's layer-wise grid is small: that
# unrolled program, as scans, is slow and memory-hungry (2**14
# configurations peaked at about 7 GiB).
SCENARIOS = {
    "resnet50/wfbp": Scenario({}, "resnet50/wfbp", 1.0),
    # Data-dependent buckets need the channel scan.
    "resnet50/mgwfbp": Scenario({"strategy": "mgwfbp"}, "resnet50/wfbp", 0.5),
    "resnet50/layerwise": Scenario({"update": "layerwise"}, "resnet50/layerwise", 0.3, 24),
    "resnet50/zero3": Scenario({"zero": 3}, "resnet50/zero3", 0.3, 24),
    "bert_large/layerwise": Scenario({"model": "bert_large", "update": "layerwise"}, None, None, 12),
    "bert_large/zero3": Scenario({"model": "bert_large", "zero": 3}, None, None, 16),
}
# Every DAG shape, for its lowering mode.
SHAPES = {
    "barrier": {},
    "layerwise": {"update": "layerwise"},
    "zero3": {"zero": 3},
    "accumulation4": {"accumulation": 4},
    "pipelined": {"algorithm": "hierarchical", "hierarchical": {"pipelined": True}},
}
SWEEP_BUDGET_S = 60.0  # fewer repeats for slow scenarios
BERT_COMPILE_TARGET_S = 10.0


def grid(size_log2: int = 20, **keys) -> dict:
    """The benchmark grid with 2**size_log2 configurations (inter link swept),
    with `keys` set over GRID."""
    rest = size_log2 - 10  # GRID holds 2**10 configurations
    if rest < 0:
        raise ValueError("the grid needs size_log2 >= 10")
    return {**GRID, **keys,
            "inter": {"bandwidth": [float(x) for x in np.geomspace(1e8, 1e12, 2 ** (rest - rest // 2))],
                      "alpha": [float(x) for x in np.geomspace(1e-7, 1e-2, 2 ** (rest // 2))]}}


@contextlib.contextmanager
def drawn_on_the_host():
    """Random samples drawn on the host inside the block (the reference for
    drawing them on the devices: `sweep.engine.device_draws`)."""
    from sweep.engine import device_draws

    on_devices = device_draws.DrawPlan.of
    device_draws.DrawPlan.of = staticmethod(lambda *args: None)
    try:
        yield
    finally:
        device_draws.DrawPlan.of = on_devices


def best_of(fn, repeats: int, budget_s: float = float("inf")) -> float:
    """The least seconds of `repeats` calls, stopping early once they took `budget_s`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if sum(times) > budget_s:
            break
    return min(times)


def peak_rss_mib() -> float:
    """This process's peak resident memory [MiB] since it started its
    program: Linux's VmHWM. Not `ru_maxrss`, which a child started by
    subprocess inherits from its parent across exec (a child of a 1.5 GB
    process reads at least 1.5 GB)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def lowering(spec):
    """(mode, reason) of the DAG of a single-group scenario."""
    lowered = sweep.prepare_chunk(spec, chunk=1024).compiled.lowered
    return lowered.mode, lowered.reason


def reference(spec) -> dict:
    """The fused reference on the scenario's configurations: compile time,
    rate and iteration times (setup untimed)."""
    compiled, scalars = reference_inputs(spec)
    args = list(scalars.values())
    out = np.empty(spec.size, np.float32)
    start = time.perf_counter()
    fn = compile_reference(compiled.dag)
    fn(*args, out)
    compile_s = time.perf_counter() - start
    return {"compile_s": compile_s, "rate": spec.size / best_of(lambda: fn(*args, out), 5), "times": out}


def scenario(spec, expected=None) -> dict:
    """sweep.run's rate (after a warm-up run), its lowering, and its largest
    relative difference from `expected` iteration times."""
    cube = sweep.run(spec)  # compiles
    mode, reason = lowering(spec)
    out = {"mode": mode, "reason": reason}
    if expected is not None:
        times = cube["iteration_time"].values.reshape(-1)
        out["max_rel_diff"] = float(np.max(np.abs(times - expected) / times))
        assert out["max_rel_diff"] <= 2e-5, out  # the same model, evaluated two ways
    del cube
    out["sweep_rate"] = spec.size / best_of(lambda: sweep.run(spec), 3, SWEEP_BUDGET_S)
    return out


def kernel_rate(spec) -> float:
    """The sweep kernel alone on one pre-built chunk, on every visible device."""
    prepared = sweep.prepare_chunk(spec)

    prepared.evaluate()  # compiles
    return prepared.size / best_of(prepared.evaluate, 5)


def compile_time(model: str) -> dict:
    """Host DAG build (bypassing the compile cache) plus XLA compile of the
    sweep's primary kernel, for a 3-iteration DAG of `model`."""
    prepared = sweep.prepare_chunk(sweep.load_spec({"model": model, "batch_size": [8, 16], "nodes": [1, 2],
                                                    "iterations": 3}))
    start = time.perf_counter()
    compiled = prepared.compile_fresh()
    return {"compile_s": time.perf_counter() - start, "tasks": len(compiled.dag.tasks), "mode": compiled.mode}


def worker(memory: bool, gpu_log2: int, size_log2: int) -> dict:
    """Every measurement, on the devices JAX sees (the parent sets XLA_FLAGS)."""
    result = {"platform": jax.devices()[0].platform, "devices": jax.device_count(), "grid": 2 ** size_log2}
    cpu = result["platform"] == "cpu"  # the reference runs on the host: compare like with like

    references, scenarios = {}, {}
    for name, sc in SCENARIOS.items():
        spec = sweep.load_spec(grid(max(10, sc.log2 + size_log2 - 20), **sc.keys))
        if cpu and sc.reference == name:
            references[name] = reference(spec)
        expected = references[name].pop("times") if name in references else None
        scenarios[name] = {**scenario(spec, expected), "grid": spec.size, "target": sc.target,
                           "peak_rss_mib": peak_rss_mib()}
        if sc.reference in references:
            scenarios[name]["reference"] = sc.reference
            scenarios[name]["ratio"] = scenarios[name]["sweep_rate"] / references[sc.reference]["rate"]
    result["references"], result["scenarios"] = references, scenarios
    result["kernel_rate"] = kernel_rate(sweep.load_spec(grid(size_log2)))
    result["modes"] = {name: lowering(sweep.load_spec(grid(10, **keys)))[0] for name, keys in SHAPES.items()}
    result["bert_large_compile"] = compile_time("bert_large")

    if result["platform"] == "gpu":
        big = sweep.load_spec(grid(gpu_log2))
        sweep.run(big, chunk=1 << 22)
        result["gpu_grid"] = big.size
        result["gpu_sweep_rate"] = big.size / best_of(lambda: sweep.run(big, chunk=1 << 22), 2)
    result["peak_rss_mib"] = peak_rss_mib()

    if memory:
        result.update(sampled_memory())
    return result


def sampled_memory(n: int = 10**8) -> dict:
    """Peak memory of a sampled sweep of n configurations streamed to disk,
    measured in a child process (so nothing else counts)."""

    code = f"""
import sys; sys.path[:0] = [{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r}]
import time, sweep, tempfile, os
from experiments.benchmark import peak_rss_mib
spec = {{"model": "resnet50", "batch_size": 64, "gpus_per_node": 4,
        "outputs": ["iteration_time", "scaling_efficiency", "bottleneck"],
        "sample": {{"n": {n}, "seed": 1, "nodes": {{"min": 1, "max": 256, "scale": "log"}},
                    "inter": {{"bandwidth": {{"min": 1e8, "max": 1e12, "scale": "log"}},
                              "alpha": {{"min": 1e-7, "max": 1e-2, "scale": "log"}}}},
                    "strategy": ["bsp", "wfbp", "fusion", "mgwfbp"]}}}}
with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
    start = time.perf_counter()
    sweep.run(spec, output=os.path.join(d, "sampled.nc"), open_result=False)
    print(time.perf_counter() - start, peak_rss_mib())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, rss = map(float, done.stdout.split())
    return {"sampled_configs": n, "sampled_seconds": seconds, "sampled_peak_rss_mib": rss}


def rate(x: float) -> str:
    """Configurations per second, scaled (the unrolled path is orders of magnitude slower)."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:6.2f} {unit}/s"
    return f"{x:6.2f}  /s"


def report(r: dict) -> str:
    """The printed table of one worker's results."""
    lines = [f"\n{r['devices']} {r['platform']} device(s), ring all-reduce",
             f"  {'scenario':<21} {'grid':>9} {'lowering':<11} {'reference':>10} {'sweep.run':>10} {'ratio':>6}"
             f" {'peak RSS':>9}  target"]
    for name, s in r["scenarios"].items():
        ref = r["references"].get(s.get("reference"))
        reference_rate = rate(ref["rate"]) if ref else f"{'-':>10}"
        ratio, verdict = f"{'-':>6}", ""
        if "ratio" in s:
            ratio = f"{s['ratio']:6.2f}" if s["ratio"] >= 0.01 else f"{s['ratio']:6.0e}"
            held = f" (of {s['reference']})" if s["reference"] != name else ""
            verdict = f"  >= {s['target']}{held} {'ok' if s['ratio'] >= s['target'] else 'MISSED'}"
        lines.append(f"  {name:<21} {s['grid']:>9,} {s['mode']:<11} {reference_rate} {rate(s['sweep_rate'])} "
                     f"{ratio} {s['peak_rss_mib']:5.0f} MiB{verdict}")
    if r["scenarios"]["resnet50/wfbp"]["grid"] < 2 ** 18:
        lines.append("  (on grids this small sweep.run's fixed cost per call weighs on its rate: "
                     "the targets are for 2**20)")
    lines.append(f"  {'sweep kernel alone, resnet50/wfbp':<55}{rate(r['kernel_rate'])}")
    for name, ref in r["references"].items():
        diff = r["scenarios"][name]["max_rel_diff"]
        lines.append(f"  reference {name:<21} compile {ref['compile_s']:5.1f} s, max relative difference "
                     f"from sweep.run {diff:.1e}")
    lines.append("  resnet50 lowering: " + ", ".join(f"{name} {mode}" for name, mode in r["modes"].items()))
    bert = r["bert_large_compile"]
    verdict = "ok" if bert["compile_s"] < BERT_COMPILE_TARGET_S else "MISSED"
    lines.append(f"  {'bert_large compile':<22} {bert['compile_s']:8.2f} s ({bert['tasks']} tasks, {bert['mode']}; "
                 f"target < {BERT_COMPILE_TARGET_S:g} s {verdict})")
    if "gpu_sweep_rate" in r:
        lines.append(f"  {'GPU sweep.run':<22} {r['gpu_sweep_rate'] / 1e9:8.2f} G configurations/s "
                     f"({r['gpu_grid']:,} configurations)")
    lines.append(f"  {'peak memory':<22} {r['peak_rss_mib']:8.0f} MiB")
    if "sampled_configs" in r:
        lines.append(f"  {'10^8 sampled sweep':<22} {r['sampled_seconds']:8.1f} s, "
                     f"peak {r['sampled_peak_rss_mib']:.0f} MiB")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help="also measure a 10^8-configuration sampled sweep")
    parser.add_argument("--size-log2", type=int, default=20, help="log2 of the CPU grid size (default 20, least 10)")
    parser.add_argument("--gpu-log2", type=int, default=28, help="log2 of the GPU grid size (default 28)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.size_log2 < 10:
        parser.error("--size-log2 must be at least 10")
    if args.worker:
        print(json.dumps(worker(args.memory, args.gpu_log2, args.size_log2)))
        return 0

    cores = os.cpu_count() or 1
    runs = []
    for devices, memory in [(1, False), (cores, args.memory)]:
        cmd = [sys.executable, __file__, "--worker", "--gpu-log2", str(args.gpu_log2),
               "--size-log2", str(args.size_log2)]
        done = subprocess.run(cmd + (["--memory"] if memory else []), capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": _root(),
                                   "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"machine: {platform.processor() or platform.machine()}, {cores} cores, Python {platform.python_version()}")
    for r in runs:
        print(report(r))
    print("\n(rates in configurations per second; ratio = sweep.run / fused reference)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


if __name__ == "__main__":
    raise SystemExit(main())
