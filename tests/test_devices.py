"""One sweep on 1 device, on 4 simulated CPU devices, on 2 processes x 2
devices over loopback (the counts chosen by XLA_FLAGS, JAX_NUM_CPU_DEVICES
and XLA_FLAGS), and with the CLI's default (one CPU device per core, as
the scenario holds mgwfbp): identical cubes, with `devices` = 1, 4, 4 and
the core count. Closed-form chunks run on the first device alone."""
import json
import os
import socket
import subprocess
import sys

import pytest
import xarray as xr

from sweep.engine.cpu_devices import cores

SPEC = """
model = ["alexnet", "resnet50"]
batch_size = [16, 64]
nodes = [1, 2, 4, 8, 16]
gpus_per_node = 4
strategy = ["bsp", "wfbp", "mgwfbp"]
inter.bandwidth = [1e9, 3e9, 1e10]
"""


CORES = cores()


def run(tmp_path, name, devices, extra=(), process_env=None, variable="XLA_FLAGS"):
    """The command and environment of a run on `devices` CPU devices, chosen
    through `variable` (XLA_FLAGS or JAX_NUM_CPU_DEVICES: the CLI keeps
    either); None: nothing chosen, the CLI's default."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    if devices is not None:
        env[variable] = f"--xla_force_host_platform_device_count={devices}" if variable == "XLA_FLAGS" \
            else str(devices)
    out = tmp_path / f"{name}.nc"
    cmd = [sys.executable, "-m", "sweep", "run", str(tmp_path / "spec.toml"), "-o", str(out),
           "--chunk", "40", "--quiet", *extra]
    return cmd, env, out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("devices")
    (tmp / "spec.toml").write_text(SPEC)
    results = {}
    for name, devices, variable in (("one", 1, "XLA_FLAGS"), ("four", 4, "JAX_NUM_CPU_DEVICES"),
                                    ("default", None, None)):
        cmd, env, out = run(tmp, name, devices, variable=variable)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        results[name] = out
    port = free_port()
    procs = []
    for rank in (0, 1):
        cmd, env, out = run(tmp, "cluster", 2, ["--coordinator", f"127.0.0.1:{port}",
                                                "--num-processes", "2", "--process-id", str(rank)])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    results["cluster"] = out
    return {name: xr.open_dataset(path, engine="h5netcdf").load() for name, path in results.items()}


def test_device_counts_are_recorded(cubes):
    assert [int(cubes[n].attrs["devices"]) for n in ("one", "four", "cluster", "default")] == [1, 4, 4, CORES]


# (scenario keys, whether its every chunk is bsp/wfbp's closed form)
CLOSED_FORM = [({}, True), ({"strategy": ["bsp", "wfbp"], "zero": [0, 1]}, True),
               ({"strategy": ["wfbp", "mgwfbp"]}, False), ({"update": ["barrier", "layerwise"]}, False),
               ({"zero": 3}, False), ({"preset": "bytescheduler"}, False)]


def test_closed_form_chunks_run_on_the_first_cpu_device():
    """On two CPU devices, a chunk of bsp/wfbp's closed form (a contracted
    DAG: not layer-wise, not ZeRO-3) runs on the first device alone, XLA
    spreading it over the cores; every other chunk over both devices."""
    specs = [{"model": "resnet50", "batch_size": 32, "nodes": [1, 2], **keys} for keys, _ in CLOSED_FORM]
    code = ("import json, sys, jax, sweep\n"
            "from sweep.engine.evaluate import chunk_devices, spreads_itself, visible_devices\n"
            "from sweep.engine.plan import Plan\n"
            "devices = visible_devices()\n"
            "plans = [Plan(sweep.load_spec(spec), 1 << 18) for spec in " + repr(specs) + "]\n"
            "print(json.dumps([[[spreads_itself(plan, c, devices), chunk_devices(plan, c, devices).count] "
            "for c in plan.chunks()] for plan in plans]))\n")
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for (keys, closed), chunks in zip(CLOSED_FORM, json.loads(done.stdout.strip().splitlines()[-1])):
        spreads = [s for s, _ in chunks]
        assert (all(spreads) if closed else not all(spreads)), keys
        assert all(count == (1 if s else 2) for s, count in chunks), keys


def test_a_closed_form_scenario_takes_every_core_and_gives_the_same_cube(tmp_path):
    """The CLI asks for one device per core whatever the scenario; a
    closed-form one (its chunks on the first device) writes the cube that
    one device writes."""
    (tmp_path / "spec.toml").write_text('model = "alexnet"\nbatch_size = 32\nnodes = [1, 2, 4]\n'
                                        'strategy = ["bsp", "wfbp"]\n')
    cubes = {}
    for name, devices in (("closed_one", 1), ("closed_default", None)):
        cmd, env, out = run(tmp_path, name, devices)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        cubes[name] = xr.open_dataset(out, engine="h5netcdf").load()
    assert int(cubes["closed_default"].attrs["devices"]) == CORES
    xr.testing.assert_identical(cubes["closed_default"].drop_attrs(), cubes["closed_one"].drop_attrs())


def test_a_caller_passing_argv_keeps_its_jax_settings(tmp_path):
    """main(argv) in a process of its own caller (a test, a script) leaves
    JAX's device count alone, whatever ran first: one device here, where
    `python -m sweep` would take one per core."""
    (tmp_path / "spec.toml").write_text('model = "alexnet"\nbatch_size = 32\nnodes = [1, 2, 4]\n'
                                        'strategy = "mgwfbp"\n')
    cmd, env, out = run(tmp_path, "called", None)
    code = f"import sys; from sweep.cli import main; sys.exit(main({cmd[3:]!r}))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with xr.open_dataset(out, engine="h5netcdf") as cube:
        assert int(cube.attrs["devices"]) == 1


@pytest.mark.parametrize("name", ["four", "cluster", "default"])
def test_sharded_cubes_are_identical(cubes, name):
    reference = cubes["one"]
    other = cubes[name]
    assert set(other.data_vars) == set(reference.data_vars)
    for var in reference.data_vars:
        xr.testing.assert_identical(other[var], reference[var])
    assert {k: v for k, v in other.attrs.items() if k != "devices"} == \
        {k: v for k, v in reference.attrs.items() if k != "devices"}


def test_bad_cluster_arguments(cli, write_spec, tmp_path):
    spec = write_spec(SPEC)
    status, _, err = cli("run", spec, "-o", tmp_path / "o.nc", "--coordinator", "nohostport")
    assert status == 2 and "--coordinator" in err
    status, _, err = cli("run", spec, "-o", tmp_path / "o.nc", "--num-processes", "2")
    assert status == 2 and "--coordinator" in err


# 8,192 configurations: two tiles of sweep.engine.evaluate.CHANNEL_TILE (the
# contracted program of mgwfbp and fusion), sharded.
TILED = """
model = "alexnet"
batch_size = [8, 16, 32, 64, 128, 256, 512, 1024]
nodes = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
gpus_per_node = [1, 2, 4, 8]
strategy = ["mgwfbp", "fusion"]
inter.bandwidth = [1e9, 1e10, 1e11, 1e12]
inter.alpha = [1e-6, 1e-5]
outputs = ["iteration_time", "bottleneck", "d_iteration_time/d_inter.bandwidth"]
"""


def test_tiled_chunks_are_identical_when_sharded(tmp_path):
    """Chunks a multiple of the tile run tile by tile, the tiles interleaved
    so that each stays sharded: 1 and 4 devices give the same cube."""
    from sweep.engine.evaluate import CHANNEL_TILE

    (tmp_path / "spec.toml").write_text(TILED)
    cubes = []
    for name, devices in (("one", 1), ("four", 4), ("default", None)):
        cmd, env, out = run(tmp_path, name, devices)
        cmd[cmd.index("--chunk") + 1] = str(2 * CHANNEL_TILE)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        cubes.append(xr.open_dataset(out, engine="h5netcdf").load())
    assert cubes[0].sizes["nodes"] * cubes[0].sizes["batch_size"] * 64 == 2 * CHANNEL_TILE
    xr.testing.assert_identical(cubes[0].drop_attrs(), cubes[1].drop_attrs())


def test_default_chunk_is_large_on_gpus():
    """A GPU needs large chunks to hide the host's fixed work per chunk
    (BENCHMARKS.md: 79 M/s with 2**18 against 1.69 G/s with 2**24 on an H200)."""
    from sweep.engine.evaluate import DEFAULT_CHUNK, GPU_CHUNK, default_chunk

    assert default_chunk({"cpu"}) == DEFAULT_CHUNK == 1 << 18
    assert default_chunk({"gpu"}) == default_chunk({"cpu", "gpu"}) == GPU_CHUNK == 1 << 24


@pytest.mark.slow
def test_gpu_check_runs_on_a_cpu(tmp_path):
    """The GPU check's script, shrunk, on a CPU: every step runs and agrees."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "experiments", "gpu_check.py"), "--allow-cpu",
                           "--scale", "12", "--out", str(tmp_path), "--steps", "wfbp,mix,sample,sample_host,mgwfbp,side,chunk18"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agreement with the CPU ok" in done.stdout and "0 step(s) failed" in done.stdout
    assert (tmp_path / "gpu_check.json").exists()
