"""The GPU check in one command: correctness against the CPU, then speed.

    PYTHONPATH=. python experiments/gpu_check.py          # on a machine whose jax sees an NVIDIA GPU

Needs nothing beyond the project's dependencies (no network: put the
checkout on PYTHONPATH, use the machine's own jax; tqdm, tomli-w and numba
are optional here). Steps, each timed, within about 8 minutes on an H200:

1. agreement: a small grid (four models, strategies,
   algorithms, links and batches) on the GPU and, in a child process, on the
   CPU (JAX_PLATFORMS=cpu): every output within 1e-5 relative;
2. a 2**30-configuration resnet50/wfbp grid with `[reduce]` (min and argmin
   over the inter-node link): configurations per second;
3. a 2**28-configuration sampled sweep (bandwidth, latency, batch, strategy)
   reduced over its configurations (min, argmin, q50);
4. resnet50/mgwfbp, 2**28 configurations, with `[reduce]`.

Prints one JSON object per step and a summary line; with `--out DIR`, also
writes gpu_check.json there. `--allow-cpu --scale N` runs the same steps on
a CPU, N powers of two smaller (to check the script itself).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import jax  # noqa: E402
import numpy as np  # noqa: E402

import sweep  # noqa: E402
from benchmark import grid  # noqa: E402

AGREEMENT = {
    "model": ["alexnet", "resnet50", "googlenet", "bert_base"],
    "batch_size": [16, 64],
    "nodes": [1, 4, 16],
    "gpus_per_node": [4, 8],
    "strategy": ["bsp", "wfbp", "fusion", "mgwfbp"],
    "algorithm": ["ring", "hierarchical"],
    "inter": {"bandwidth": [1.25e9, 1.25e10, 5e10, 1e11, 2.5e11]},
}
OPTIMUM = {"over": ["inter.bandwidth", "inter.alpha"], "statistics": ["min", "argmin"]}
CHUNK = 1 << 22  # a GPU wants large chunks


def agreement(tmp: Path) -> dict:
    """Every output of a small grid, GPU against CPU."""
    cpu_cube = tmp / "cpu.nc"
    code = (f"import sys; sys.path[:0] = [{str(ROOT)!r}]; import sweep, json; "
            f"sweep.run(json.loads({json.dumps(json.dumps(AGREEMENT))}), output={str(cpu_cube)!r}, open_result=False)")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the CPU reference failed: {done.stderr.strip().splitlines()[-1:]}")
    start = time.perf_counter()
    here = sweep.run(AGREEMENT)
    seconds = time.perf_counter() - start
    worst = 0.0
    with sweep.open_cube(cpu_cube) as cpu:
        for name, values in here.data_vars.items():
            a, b = values.values.astype(np.float64), cpu[name].values.astype(np.float64)
            worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-30))))
    return {"step": "agreement", "configurations": int(here.iteration_time.size), "max_rel_diff": worst,
            "ok": worst <= 1e-5, "seconds": seconds}


def timed(name: str, spec: dict, warm: dict) -> dict:
    """sweep.run's rate on `spec` after a run of `warm` (same chunk shapes) compiled it."""
    sweep.run(warm, chunk=CHUNK)
    start = time.perf_counter()
    result = sweep.run(spec, chunk=CHUNK)
    seconds = time.perf_counter() - start
    size = sweep.load_spec(spec).size
    assert np.isfinite(result["iteration_time_min"].values).all()
    return {"step": name, "configurations": size, "seconds": seconds, "rate": size / seconds}


def steps(scale: int) -> list:
    big, mid = 30 - scale, 28 - scale
    wfbp = {**grid(big), "outputs": ["iteration_time"], "reduce": OPTIMUM}
    one = {"batch_size": [8], "nodes": [1], "gpus_per_node": [1]}
    mgwfbp = {**grid(mid), "strategy": "mgwfbp", "outputs": ["iteration_time"], "reduce": OPTIMUM}
    sample = {"model": "resnet50", "gpus_per_node": 8, "nodes": [4, 16, 64, 256],
              "outputs": ["iteration_time", "scaling_efficiency"],
              "sample": {"n": 2 ** mid, "seed": 1,
                         "inter": {"bandwidth": {"min": 1.25e9, "max": 5e11, "scale": "log"},
                                   "alpha": {"min": 1e-6, "max": 1e-3, "scale": "log"}},
                         "batch_size": {"min": 8, "max": 256, "scale": "log"},
                         "strategy": ["wfbp", "fusion", "mgwfbp"]},
              "reduce": {"over": ["config"], "statistics": ["min", "argmin", "q50"]}}
    small_sample = {**sample, "sample": {**sample["sample"], "n": 2 ** 16}}
    return [lambda: timed("resnet50/wfbp grid, [reduce]", wfbp, {**wfbp, **one}),
            lambda: timed("resnet50 sample, [reduce] over config", sample, small_sample),
            lambda: timed("resnet50/mgwfbp grid, [reduce]", mgwfbp, {**mgwfbp, **one})]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for gpu_check.json")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU (to test the script)")
    parser.add_argument("--scale", type=int, default=0, help="sizes this many powers of two smaller")
    args = parser.parse_args(argv)
    platform = jax.devices()[0].platform
    if platform != "gpu" and not args.allow_cpu:
        print(f"gpu_check: jax sees no GPU (platform {platform}); pass --allow-cpu to test the script",
              file=sys.stderr)
        return 2
    rows = [{"step": "devices", "platform": platform, "devices": [str(d) for d in jax.devices()],
             "jax": jax.__version__}]
    print(json.dumps(rows[0]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for step in [lambda: agreement(Path(tmp)), *steps(args.scale)]:
            rows.append(step())
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(rows, indent=1))
    rates = "; ".join(f"{r['step']}: {r['rate'] / 1e6:,.1f} M/s over {r['configurations']:,}"
                      for r in rows if "rate" in r)
    print(f"summary: {platform}, agreement with the CPU {'ok' if rows[1]['ok'] else 'FAILED'} "
          f"(max rel {rows[1]['max_rel_diff']:.1e}); {rates}")
    return 0 if rows[1]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
