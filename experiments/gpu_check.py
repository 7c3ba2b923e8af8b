"""The GPU check in one command: correctness against the CPU, then speed.

    PYTHONPATH=. python experiments/gpu_check.py --out DIR   # where jax sees an NVIDIA GPU

Needs the project's dependencies and nothing else; on a machine with no
network, put the checkout on PYTHONPATH, use the machine's own jax, and
carry what its image lacks as wheels (an image with jax, xarray, h5py,
optax, scipy and tqdm lacked h5netcdf and tomli-w):

    pip download --no-deps -d wheels h5netcdf tomli-w          # where there is a network
    pip install --no-index --no-deps --target /tmp/site wheels/*.whl
    PYTHONPATH=/tmp/site:. python experiments/gpu_check.py --out DIR

numba is optional (the fused host reference of step 5). Steps, each timed,
within about 5 minutes on an H200:

1. agreement: a small grid (four models, strategies,
   algorithms, links and batches) on the GPU and, in a child process, on the
   CPU (JAX_PLATFORMS=cpu): every output within 1e-5 relative (times
   relative to the configuration's iteration time: exposed communication is a
   difference of float32 times, 3.4e-5 s in a 0.013 s iteration at worst);
2. a 2**30-configuration resnet50/wfbp grid with `[reduce]` (min and argmin
   over the inter-node link): configurations per second;
3. a 2**28-configuration sampled sweep (bandwidth, latency, batch, strategy)
   reduced over its configurations (min, argmin, q50), drawn on the device
   (and, as step `sample_host`, 2**24 of it drawn on the host; as step
   `mix`, the same strategies, batch sizes and links as a grid);
4. resnet50/mgwfbp, 2**28 configurations, with `[reduce]`;
5. side by side: the sweep kernel alone on one chunk of step 2's grid, and
   the fused numba reference (experiments/fused_reference.py) on the host's
   cores over 2**22 configurations, so that step 2's rate reads as a ratio;
6. step 2 again with chunks of 2**18 to 2**26 configurations, if time is left
   (the default chunk on a GPU is `sweep.engine.evaluate.GPU_CHUNK`).

A step that fails prints its error and the others still run. Prints one
JSON object per step and a summary line; with `--out DIR`, also writes
gpu_check.json there. `--allow-cpu --scale N` runs the same steps on
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
from benchmark import best_of, drawn_on_the_host, grid, reference  # noqa: E402
from sweep.engine.evaluate import default_chunk  # noqa: E402

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
BUDGET_S = 300.0  # optional steps are skipped past this
CHUNK_LOG2S = (18, 20, 22, 26)  # the chunk-size study (optional steps)
ONE_RUN_S = 60.0  # a first run this long is timed as it is (compiles included) rather than run again


def agreement(tmp: Path, out: Path | None) -> dict:
    """Every output of a small grid, GPU against CPU: the largest relative
    difference per output, and where the largest one is. With `out`, both
    cubes are kept there (agreement_gpu.nc, agreement_cpu.nc)."""
    folder = out or tmp
    folder.mkdir(parents=True, exist_ok=True)
    cpu_cube, gpu_cube = folder / "agreement_cpu.nc", folder / "agreement_gpu.nc"
    code = (f"import sys; sys.path[:0] = [{str(ROOT)!r}]; import sweep, json; "
            f"sweep.run(json.loads({json.dumps(json.dumps(AGREEMENT))}), output={str(cpu_cube)!r}, open_result=False)")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the CPU reference failed: {done.stderr.strip().splitlines()[-1:]}")
    start = time.perf_counter()
    sweep.run(AGREEMENT, output=gpu_cube, open_result=False)
    seconds = time.perf_counter() - start
    per_output, worst = {}, (0.0, None)
    with sweep.open_cube(cpu_cube) as cpu, sweep.open_cube(gpu_cube) as here:
        iteration = cpu["iteration_time"].values.astype(np.float64)
        for name, values in here.data_vars.items():
            a, b = values.values.astype(np.float64), cpu[name].values.astype(np.float64)
            # Times are parts of one iteration: a small difference of two float32
            # times (exposed communication) is compared with the iteration.
            scale = np.maximum(np.abs(b), iteration if values.attrs.get("units") == "s" else 1e-30)
            rel = np.abs(a - b) / scale
            per_output[name] = float(rel.max())
            if per_output[name] > worst[0]:
                at = np.unravel_index(int(rel.argmax()), rel.shape)
                where = {dim: str(values[dim].values[i]) for dim, i in zip(values.dims, at)}
                worst = (per_output[name], {"output": name, "gpu": float(a[at]), "cpu": float(b[at]), **where})
    return {"step": "agreement", "configurations": int(np.prod(list(here.sizes.values()))),
            "max_rel_diff": worst[0], "ok": worst[0] <= 1e-5, "per_output": per_output, "worst": worst[1],
            "seconds": seconds}


def timed(name: str, spec: dict, chunk: int | None = None) -> dict:
    """sweep.run's rate on `spec`, run twice: the first run compiles (a
    smaller warm-up grid would not do: which parameters vary decides the
    compiled programs), the second is timed, unless the first took over
    ONE_RUN_S (then its time, compiles included, is the rate's)."""
    start = time.perf_counter()
    result = sweep.run(spec, chunk=chunk)
    first_s = seconds = time.perf_counter() - start
    if first_s <= ONE_RUN_S:
        start = time.perf_counter()
        result = sweep.run(spec, chunk=chunk)
        seconds = time.perf_counter() - start
    size = sweep.load_spec(spec).size
    assert np.isfinite(result["iteration_time_min"].values).all()
    chunk = chunk or default_chunk({d.platform for d in jax.devices()})
    return {"step": name, "configurations": size, "chunk": chunk, "seconds": seconds, "rate": size / seconds,
            "first_run_s": first_s, "compiles_timed": first_s > ONE_RUN_S}


def side_by_side(spec: dict) -> dict:
    """The sweep kernel alone on the first chunk of `spec`, and the fused
    reference on the host over 2**22 configurations of the same grid."""
    prepared = sweep.prepare_chunk(sweep.load_spec({k: v for k, v in spec.items() if k != "reduce"}))
    prepared.evaluate()  # compiles
    row = {"step": "side by side", "kernel_rate": prepared.size / best_of(prepared.evaluate, 5)}
    try:
        row["reference_rate"] = reference(sweep.load_spec(grid(22)))["rate"]
    except ImportError as error:  # numba missing: the kernel's rate stands alone
        row["reference_error"] = str(error)
    return row


def steps(scale: int) -> list:
    big, mid = 30 - scale, 28 - scale
    wfbp = {**grid(big), "outputs": ["iteration_time"], "reduce": OPTIMUM}
    mgwfbp = {**grid(mid), "strategy": "mgwfbp", "outputs": ["iteration_time"], "reduce": OPTIMUM}
    sample = {"model": "resnet50", "gpus_per_node": 8, "nodes": 16,
              "outputs": ["iteration_time", "scaling_efficiency"],
              "sample": {"n": 2 ** mid, "seed": 1,
                         "inter": {"bandwidth": {"min": 1.25e9, "max": 5e11, "scale": "log"},
                                   "alpha": {"min": 1e-6, "max": 1e-3, "scale": "log"}},
                         "batch_size": {"min": 8, "max": 256, "scale": "log"},
                         "strategy": ["wfbp", "fusion", "mgwfbp"]},
              "reduce": {"over": ["config"], "statistics": ["min", "argmin", "q50"]}}
    # The sample's own mix (three strategies, batch sizes, links) as a grid of
    # 2**mid: whether the sample's rate is the mix's or the sampling's.
    mix = {"model": "resnet50", "gpus_per_node": 8, "nodes": 16, "outputs": ["iteration_time"],
           "batch_size": [int(b) for b in np.geomspace(8, 256, 16)], "strategy": ["wfbp", "fusion", "mgwfbp"],
           "inter": {"bandwidth": [float(x) for x in np.geomspace(1.25e9, 5e11, 2 ** ((mid - 6) // 2 + 1))],
                     "alpha": [float(x) for x in np.geomspace(1e-6, 1e-3, 2 ** ((mid - 6) // 2))]},
           "reduce": {"over": ["batch_size", "strategy", "inter.bandwidth", "inter.alpha"],
                      "statistics": ["min", "argmin"]}}
    return {"wfbp": lambda: timed("resnet50/wfbp grid, [reduce]", wfbp),
            "mix": lambda: timed("resnet50 grid of the sample's mix, [reduce]", mix),
            "sample": lambda: timed("resnet50 sample, [reduce] over config", sample),
            "sample_host": lambda: host_drawn(timed, "resnet50 sample drawn on the host, 2**24",
                                              {**sample, "sample": {**sample["sample"], "n": 2 ** (24 - scale)}}),
            "mgwfbp": lambda: timed("resnet50/mgwfbp grid, [reduce]", mgwfbp),
            "side": lambda: side_by_side(wfbp),
            **{f"chunk{log2}": (lambda log2=log2: timed(f"resnet50/wfbp grid, [reduce], chunks of 2**{log2}",
                                                         wfbp, 1 << log2))
               for log2 in CHUNK_LOG2S}}


def host_drawn(step, *args) -> dict:
    """`step(*args)` with the sample drawn on the host (the reference for
    drawing it on the device)."""
    with drawn_on_the_host():
        return step(*args)


def attempt(step, started: float, optional: bool) -> dict:
    """One step's row; its error instead of a traceback, so later steps still run."""
    if optional and time.perf_counter() - started > BUDGET_S:
        return {"step": "skipped", "reason": f"past {BUDGET_S:.0f} s"}
    try:
        return step()
    except Exception as error:  # noqa: BLE001 - a report, not a crash: every step's outcome is printed
        return {"step": "failed", "error": f"{type(error).__name__}: {error}"[:2000]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for gpu_check.json")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU (to test the script)")
    parser.add_argument("--scale", type=int, default=0, help="sizes this many powers of two smaller")
    parser.add_argument("--steps", help="comma-separated steps after agreement (default all): wfbp, mix, sample, "
                        "sample_host, "
                        "mgwfbp, side, " + ", ".join(f"chunk{n}" for n in CHUNK_LOG2S))
    parser.add_argument("--no-agreement", action="store_true", help="skip step 1")
    args = parser.parse_args(argv)
    platform = jax.devices()[0].platform
    if platform != "gpu" and not args.allow_cpu:
        print(f"gpu_check: jax sees no GPU (platform {platform}); pass --allow-cpu to test the script",
              file=sys.stderr)
        return 2
    rows = [{"step": "devices", "platform": platform, "devices": [f"{d} {d.device_kind}" for d in jax.devices()],
             "jax": jax.__version__, "host_cores": os.cpu_count()}]
    print(json.dumps(rows[0]), flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        named = steps(args.scale)
        chosen = args.steps.split(",") if args.steps else list(named)
        unknown = sorted(set(chosen) - set(named))
        if unknown:
            print(f"gpu_check: unknown steps {unknown}; choose from {list(named)}", file=sys.stderr)
            return 2
        plan = [lambda: agreement(Path(tmp), args.out)] * (not args.no_agreement) + [named[n] for n in chosen]
        for number, step in enumerate(plan):
            rows.append(attempt(step, started, optional=number >= 4))
            print(json.dumps(rows[-1]), flush=True)
            if args.out:  # after every step: a run cut short keeps what it measured
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "gpu_check.json").write_text(json.dumps(rows, indent=1))
    rates = "; ".join(f"{r['step']}: {r['rate'] / 1e6:,.1f} M/s over {r['configurations']:,}"
                      for r in rows if "rate" in r)
    sides = "".join(f"; {name} {r[key] / 1e6:,.1f} M/s" for r in rows if r["step"] == "side by side"
                    for name, key in (("kernel alone", "kernel_rate"), ("host reference", "reference_rate"))
                    if key in r)
    checked = [r for r in rows if r["step"] == "agreement"]
    ok = all(r["ok"] for r in checked)
    agreed = (f"{'ok' if ok else 'FAILED'} (max rel {checked[0]['max_rel_diff']:.1e})" if checked
              else "not checked" if args.no_agreement else "FAILED")
    failed = sum(r["step"] == "failed" for r in rows)
    print(f"summary: {platform}, agreement with the CPU {agreed}; {rates}{sides}; {failed} step(s) failed")
    return 0 if (ok and (checked or args.no_agreement)) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
