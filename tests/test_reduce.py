"""`[reduce]`: statistics folded on the devices equal xarray's reduction of
the full cube (exactly for min, max and the arg-statistics, to float32
summation for the mean, within the stated accuracy for quantiles), however
the sweep is chunked, sharded or interrupted."""
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr

import sweep
import test_devices  # the grid that one device, four and two processes all compute
from kernels.outputs import OUTPUT

GRID = {
    "model": ["alexnet", "googlenet"],
    "batch_size": [8, 32],
    "nodes": [1, 2, 4, 8],
    "gpus_per_node": [1, 4],
    "strategy": ["bsp", "wfbp", "fusion", "mgwfbp"],
    "bucket_bytes": [1e6, 25e6],
    "inter": {"bandwidth": [1e9, 1e10, 1e11]},
    "outputs": ["iteration_time", "throughput", "exposed_communication", "bottleneck"],
}
STATISTICS = ["min", "argmin", "max", "argmax", "mean", "q0", "q10", "q50", "q90", "q100"]


def reduced(grid, over, statistics=STATISTICS, **run):
    return sweep.run({**grid, "reduce": {"over": over, "statistics": statistics}}, **run)


@pytest.fixture(scope="module")
def full_cube():
    return sweep.run(GRID)


def reference(cube: xr.Dataset, over: list[str], name: str, statistic: str):
    """What xarray gives for one statistic of one variable (arg-statistics:
    a dict of the reduced keys' values at the first optimum)."""
    da = cube[name]
    over = [d for d in da.dims if d in over]  # cube order: what "first" means
    if statistic in ("min", "max"):
        return getattr(da, statistic)(over)
    if statistic == "mean":
        return da.astype(np.float64).mean(over)
    if statistic in ("argmin", "argmax"):
        stacked = da.stack(z=over)
        index = getattr(stacked, statistic)("z")
        return {key: stacked[key].isel(z=index) for key in over}
    q = int(statistic[1:]) / 100
    method = "lower" if OUTPUT[name].flags else "linear"
    return da.astype(np.float64).quantile(q, over, method=method).drop_vars("quantile")


@pytest.mark.parametrize("over", [["strategy", "bucket_bytes"], ["model", "inter.bandwidth"],
                                  ["batch_size", "nodes", "gpus_per_node", "strategy"]])
def test_statistics_equal_xarrays_reduction_of_the_full_cube(full_cube, over):
    result = reduced(GRID, over, chunk=37)  # odd chunks: boxes split mid-axis, the last one padded
    kept = [d for d in full_cube.dims if d not in over]
    assert list(result.dims) == kept
    for name in GRID["outputs"]:
        integer = bool(OUTPUT[name].flags)
        for statistic in STATISTICS:
            expected = reference(full_cube, over, name, statistic)
            if statistic in ("argmin", "argmax"):
                for key, values in expected.items():
                    got = result[f"{name}_{statistic}_{key}"]
                    np.testing.assert_array_equal(got.values, values.values, err_msg=f"{name} {statistic} {key}")
                continue
            got = result[f"{name}_{statistic}"]
            assert got.dims == expected.dims
            if statistic in ("min", "max") or (integer and statistic.startswith("q")):
                np.testing.assert_array_equal(got.values, expected.values, err_msg=f"{name} {statistic}")
            elif statistic == "mean":
                np.testing.assert_allclose(got.values, expected.values, rtol=2e-6, err_msg=name)
            else:
                accuracy = 0.01
                np.testing.assert_allclose(got.values, expected.values, rtol=accuracy, atol=1e-18,
                                           err_msg=f"{name} {statistic}")


def test_chunking_does_not_change_the_answer():
    over = ["strategy", "bucket_bytes", "inter.bandwidth"]
    whole = reduced(GRID, over)
    for chunk in (5, 64):
        split = reduced(GRID, over, chunk=chunk)
        for name, values in whole.data_vars.items():
            if name.endswith("_mean"):
                np.testing.assert_allclose(split[name].values, values.values, rtol=2e-6)
            else:
                np.testing.assert_array_equal(split[name].values, values.values, err_msg=name)


def test_labels_and_flags():
    result = reduced(GRID, ["strategy"], ["min", "argmin", "mean"])
    assert result["iteration_time_min"].attrs["units"] == "s"
    assert "minimum" in result["iteration_time_argmin_strategy"].attrs["long_name"]
    assert result["bottleneck_min"].attrs["flag_meanings"] == " ".join(OUTPUT["bottleneck"].flags)
    assert result.attrs["reduced_over"] == "strategy"
    assert "[reduce]" in result.attrs["spec"]


SAMPLED = {
    "model": "googlenet",
    "nodes": [2, 8],
    "gpus_per_node": 4,
    "outputs": ["iteration_time", "scaling_efficiency"],
    "sample": {
        "n": 700, "seed": 5,
        "inter": {"bandwidth": {"min": 1e8, "max": 1e11, "scale": "log"}},
        "batch_size": {"min": 8, "max": 128, "scale": "log"},
        "strategy": ["bsp", "wfbp", "mgwfbp"],
    },
}


def test_a_sample_reduced_over_its_configurations():
    cube = sweep.run(SAMPLED, chunk=256)
    result = reduced(SAMPLED, ["config"], ["min", "argmin", "q50"], chunk=96)
    assert list(result.dims) == ["nodes"]
    np.testing.assert_array_equal(result["iteration_time_min"], cube["iteration_time"].min("config"))
    first = cube["iteration_time"].argmin("config")
    np.testing.assert_array_equal(result["iteration_time_argmin_config"], first)
    for key in ("inter.bandwidth", "batch_size", "strategy"):  # the sampled keys at the optimum
        np.testing.assert_array_equal(result[f"iteration_time_argmin_{key}"], cube[key].isel(config=first))
    np.testing.assert_allclose(result["scaling_efficiency_q50"],
                               cube["scaling_efficiency"].astype(np.float64).quantile(0.5, "config"), rtol=0.01)


def test_a_sample_reduced_over_a_grid_key_keeps_its_coordinates():
    cube = sweep.run(SAMPLED, chunk=256)
    result = reduced(SAMPLED, ["nodes"], ["max"], chunk=100)
    np.testing.assert_array_equal(result["iteration_time_max"], cube["iteration_time"].max("nodes"))
    np.testing.assert_array_equal(result["strategy"], cube["strategy"])


def test_a_file_equals_the_memory_result_and_rerun_is_a_no_op(tmp_path):
    spec = {**GRID, "reduce": {"over": ["strategy"], "statistics": ["min", "argmin", "q50"]}}
    memory = sweep.run(spec, chunk=50)
    out = tmp_path / "r.nc"
    messages = []
    sweep.run(spec, output=out, chunk=50, open_result=False)
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load().drop_attrs(), memory.drop_attrs())
    sweep.run(spec, output=out, chunk=50, open_result=False, log=messages.append)
    assert any("nothing to do" in m for m in messages)


BIG = """
model = "resnet50"
nodes = [1, 2, 4, 8, 16, 32, 64, 128]
gpus_per_node = [1, 2, 4, 8]
strategy = ["bsp", "wfbp", "mgwfbp"]
batch_size = [16, 32, 64, 128]
inter.bandwidth = {bandwidths}
outputs = ["iteration_time", "throughput"]
[reduce]
over = ["strategy", "inter.bandwidth"]
statistics = ["min", "argmin", "mean", "q50"]
"""
RUN_WITH_CHECKPOINTS = ("import sys; import sweep.engine.reducer as r; r.CHECKPOINT_SECONDS = 0; "
                        "from sweep.cli import main; sys.exit(main(sys.argv[1:], own_process=True))")


def test_sigkill_resumes_from_the_last_checkpoint(tmp_path):
    spec = tmp_path / "big.toml"
    spec.write_text(BIG.format(bandwidths=[float(x) for x in np.geomspace(1e8, 1e12, 256)]))  # 393,216 configs
    out, checkpoint = tmp_path / "big.nc", tmp_path / "big.nc.partial.npz"
    args = ["run", str(spec), "-o", str(out), "--chunk", "4096", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-c", RUN_WITH_CHECKPOINTS, *args], stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not checkpoint.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.02)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists() and checkpoint.exists()

    resumed = subprocess.run([sys.executable, "-m", "sweep", *args[:-1]], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    assert not checkpoint.exists()
    fresh = tmp_path / "fresh.nc"
    done = subprocess.run([sys.executable, "-m", "sweep", "run", str(spec), "-o", str(fresh), "--chunk", "4096",
                           "--quiet"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with xr.open_dataset(out, engine="h5netcdf") as a, xr.open_dataset(fresh, engine="h5netcdf") as b:
        for name in a.data_vars:
            if name.endswith("_mean"):  # the sum's order differs across a resume
                np.testing.assert_allclose(a[name], b[name], rtol=1e-6)
            else:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("table, key", [
    ({"over": ["gpus"], "statistics": ["min"]}, "reduce.over"),
    ({"over": ["model"], "statistics": ["median"]}, "reduce.statistics"),
    ({"over": ["model"], "statistics": ["q150"]}, "reduce.statistics"),
    ({"over": ["model"], "statistics": ["min", "min"]}, "reduce.statistics"),
    ({"over": [], "statistics": ["min"]}, "reduce.over"),
    ({"over": ["config"], "statistics": ["min"]}, "reduce.over"),  # not a sample
    ({"over": ["model"], "statistics": ["q50"], "accuracy": 0}, "reduce.accuracy"),
    ({"over": ["model"], "statistics": ["min"], "mean": True}, "reduce.mean"),
])
def test_bad_reduce_tables_exit_2_and_write_nothing(table, key, cli, tmp_path):
    import tomli_w

    spec = tmp_path / "bad.toml"
    spec.write_text(tomli_w.dumps({"model": ["alexnet", "resnet50"], "nodes": [1, 2], "reduce": table}))
    status, _, err = cli("run", spec, "-o", tmp_path / "out.nc")
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"ssgd-sweep: error: {key} = "), err
    assert list(tmp_path.iterdir()) == [spec]


def test_accumulators_beyond_the_limit_exit_2(cli, tmp_path):
    spec = tmp_path / "huge.toml"
    spec.write_text('model = "alexnet"\nbatch_size = 32\nnodes = [1, 2]\n'
                    '[sample]\nn = 100_000_000\ninter.bandwidth = { min = 1e9, max = 1e11 }\n'
                    '[reduce]\nover = ["nodes"]\nstatistics = ["q50"]\n')
    status, _, err = cli("run", spec, "-o", tmp_path / "out.nc")
    assert status == 2 and "reduce" in err, err
    assert list(tmp_path.iterdir()) == [spec]


SHARDED = test_devices.SPEC + """
outputs = ["iteration_time", "bottleneck"]
[reduce]
over = ["strategy", "inter.bandwidth", "batch_size"]
statistics = ["min", "argmin", "max", "mean", "q50"]
"""


# (33 s on 2 cores: three processes start JAX; test_devices.py's default tests
# run the cube path on two processes)
@pytest.mark.slow
def test_four_devices_and_two_processes_give_the_same_answer(tmp_path):
    (tmp_path / "spec.toml").write_text(SHARDED)

    def command(name, extra=()):
        return [sys.executable, "-m", "sweep", "run", str(tmp_path / "spec.toml"), "-o", str(tmp_path / name),
                "--chunk", "40", "--quiet", *extra]

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    done = subprocess.run(command("four.nc"), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    procs = [subprocess.Popen(command("cluster.nc", ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                                                     "--process-id", str(rank)]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    import tomllib

    one = sweep.run(tomllib.loads(SHARDED), chunk=40)
    for name in ("four.nc", "cluster.nc"):
        with xr.open_dataset(tmp_path / name, engine="h5netcdf") as other:
            assert int(other.attrs["devices"]) == 4
            for var in one.data_vars:
                if var.endswith("_mean"):
                    np.testing.assert_allclose(other[var], one[var], rtol=1e-6)
                else:
                    np.testing.assert_array_equal(other[var], one[var], err_msg=f"{name} {var}")


def test_merging_devices_keeps_the_first_optimum_and_carries_counts():
    """Accumulators of two devices, by hand: the lesser value wins, a tie
    goes to the lexicographically first position, histogram counts add
    across the 30-bit words."""
    from kernels import reduce as kernel
    from sweep.engine.reducer import merge

    shape = kernel.ReduceShape((True, True), -1, (0, 0), 3, frozenset({"min", "argmin", "sum", "hist"}), 0.01, 2,
                               (0, 1), (2, 2))
    low = (1 << 30) - 1
    a = {"x": {"min": np.float32([1, 2, 3]), "argmin": np.int32([[0, 1, 1], [5, 0, 0]]),
               "sum": np.float32([1, 1, 1]), "carry": np.float32([0, 0, 0]),
               "hist": np.zeros((2, 3, 4), np.int32)}}
    b = {"x": {"min": np.float32([1, 1, 4]), "argmin": np.int32([[0, 2, 0], [4, 9, 0]]),
               "sum": np.float32([2, 2, 2]), "carry": np.float32([0, 0, 0]),
               "hist": np.zeros((2, 3, 4), np.int32)}}
    a["x"]["hist"][0, 0, 1], b["x"]["hist"][0, 0, 1] = low, 3  # 2**30 + 2 in all
    a["x"]["hist"][1, 0, 1] = 1  # plus 2**30
    out = merge([a, b], shape)["x"]
    np.testing.assert_array_equal(out["min"], [1, 1, 3])
    np.testing.assert_array_equal(out["argmin"], [[0, 2, 1], [4, 9, 0]])  # cell 0: a tie, (0, 4) < (0, 5)
    np.testing.assert_array_equal(out["sum"], [3, 3, 3])
    total = out["hist"][0, 0, 1].astype(np.int64) + (out["hist"][1, 0, 1].astype(np.int64) << 30)
    assert total == low + 3 + (1 << 30) and out["hist"][0, 0, 1] <= low
