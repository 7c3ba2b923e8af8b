"""Chunked, streamed, resumable sweeps; sampled sweeps; no recompiles."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr

import sweep
from sweep.engine import evaluate
from sweep.report.explain import explain
from sweep.scenario.spec import load_spec
from sweep.engine.store import NetcdfStore

GRID = {
    "model": ["alexnet", "googlenet"],
    "batch_size": [8, 32, 64],
    "nodes": [1, 2, 3, 4, 8],
    "gpus_per_node": [1, 4],
    "strategy": ["bsp", "wfbp", "fusion", "mgwfbp"],
    "inter": {"bandwidth": [1e9, 1e10, 1e11]},
}


def open_cube(path):
    with sweep.open_cube(path) as ds:
        return ds.load()


@pytest.fixture(scope="module")
def reference_cube():
    return sweep.run(GRID)


def test_chunking_does_not_change_results(reference_cube):
    chunked = sweep.run(GRID, chunk=7)  # odd chunk: boxes split mid-axis, last ones padded
    xr.testing.assert_identical(chunked, reference_cube)


def test_one_compile_per_dag_shape():
    spec = {**GRID, "outputs": ["iteration_time", "speedup"]}
    evaluate.TRACES.clear()
    sweep.run(spec, chunk=16)  # 2 models x 23 chunks each
    key = ("iteration_time", "speedup")
    assert evaluate.TRACES[key] <= 2
    sweep.run(spec, chunk=16)
    assert evaluate.TRACES[key] <= 2  # a rerun compiles nothing


def test_streamed_file_equals_in_memory_cube(tmp_path, reference_cube):
    out = tmp_path / "cube.nc"
    sweep.run(GRID, output=out, chunk=50).close()
    assert not (tmp_path / "cube.nc.partial").exists()
    assert not (tmp_path / "cube.nc.partial.json").exists()
    xr.testing.assert_identical(open_cube(out), reference_cube)
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        encoding = ds["iteration_time"].encoding
        assert encoding.get("zlib") or encoding.get("compression") == "gzip"
        assert encoding["chunksizes"] is not None


def test_interrupted_sweep_leaves_nothing_and_resumes(tmp_path, monkeypatch, reference_cube):
    out = tmp_path / "cube.nc"
    real_write = NetcdfStore.write
    writes = []

    def interrupt_after_three(self, chunk, block, sampled):
        if len(writes) == 3:
            raise KeyboardInterrupt
        writes.append(chunk.id)
        real_write(self, chunk, block, sampled)

    monkeypatch.setattr(NetcdfStore, "write", interrupt_after_three)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(GRID, output=out, chunk=50)
    assert not out.exists()
    journal = json.loads((tmp_path / "cube.nc.partial.json").read_text())
    assert journal["completed"] == writes == [0, 1, 2]

    monkeypatch.setattr(NetcdfStore, "write", lambda self, c, b, s: (writes.append(c.id), real_write(self, c, b, s)))
    sweep.run(GRID, output=out, chunk=50).close()
    assert sorted(writes[3:]) == list(range(3, max(writes) + 1))  # only the missing chunks ran
    xr.testing.assert_identical(open_cube(out), reference_cube)


def test_a_different_sweep_does_not_resume_a_stale_partial(tmp_path, monkeypatch):
    out = tmp_path / "cube.nc"
    monkeypatch.setattr(NetcdfStore, "write", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        sweep.run({**GRID, "batch_size": 16}, output=out)
    monkeypatch.undo()
    sweep.run(GRID, output=out).close()
    cube = open_cube(out)
    assert list(cube["batch_size"].values) == [8, 32, 64]


BIG = """
model = "resnet50"
strategy = "wfbp"
algorithm = "ring"
batch_size = [8, 16, 32, 64, 128, 256, 512, 1024]
nodes = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
gpus_per_node = [1, 2, 4, 8]
inter.bandwidth = {bandwidths}
inter.alpha = {alphas}
outputs = ["iteration_time", "scaling_efficiency", "bottleneck"]
"""


def test_sigkill_leaves_no_output_and_rerun_completes_identically(tmp_path):
    spec = tmp_path / "big.toml"
    spec.write_text(BIG.format(bandwidths=[float(x) for x in np.geomspace(1e8, 1e12, 64)],
                               alphas=[float(x) for x in np.geomspace(1e-7, 1e-2, 64)]))  # 2,097,152 configs
    out = tmp_path / "big.nc"
    journal = tmp_path / "big.nc.partial.json"
    cmd = [sys.executable, "-m", "sweep", "run", str(spec), "-o", str(out), "--chunk", "65536", "--quiet"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        if journal.exists() and len(json.loads(journal.read_text())["completed"]) >= 2:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    done_before = len(json.loads(journal.read_text())["completed"])
    assert 2 <= done_before < 32

    resumed = subprocess.run(cmd[:-1], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    fresh = tmp_path / "fresh.nc"
    assert subprocess.run(cmd[:6] + [str(fresh)] + cmd[7:], capture_output=True).returncode == 0
    xr.testing.assert_identical(open_cube(out), open_cube(fresh))


SAMPLED = {
    "model": "googlenet",
    "nodes": [2, 4],
    "gpus_per_node": 4,
    "sample": {
        "n": 1000, "seed": 3,
        "inter": {"bandwidth": {"min": 1e8, "max": 1e11, "scale": "log"}},
        "batch_size": {"min": 8, "max": 128, "scale": "log"},
        "compute.efficiency": {"min": 0.2, "max": 0.9},
        "strategy": ["bsp", "wfbp", "mgwfbp"],
    },
}


@pytest.fixture(scope="module")
def sampled_cube():
    return sweep.run(SAMPLED, chunk=300)


def test_sampled_sweep_has_a_config_dimension_with_sampled_coordinates(sampled_cube):
    cube = sampled_cube
    assert cube["iteration_time"].dims == ("nodes", "config")
    assert cube.sizes["config"] == 1000
    for name in ("inter.bandwidth", "batch_size", "compute.efficiency", "strategy"):
        assert cube[name].dims == ("config",)
        assert "units" in cube[name].attrs and cube[name].attrs["long_name"]
    bw = cube["inter.bandwidth"].values
    assert bw.min() >= 1e8 and bw.max() <= 1e11
    # log-uniform: about as many draws per decade
    counts = np.histogram(np.log10(bw), bins=3, range=(8, 11))[0]
    assert counts.min() > 250
    batch = cube["batch_size"].values
    assert batch.min() >= 8 and batch.max() <= 128 and np.all(batch == np.round(batch))
    assert set(cube["strategy"].values) == {"bsp", "wfbp", "mgwfbp"}


def test_sampled_points_agree_with_explain(sampled_cube):
    cube = sampled_cube
    for i in (0, 417, 999):
        point = {"model": "googlenet", "nodes": 4, "gpus_per_node": 4,
                 "batch_size": int(cube["batch_size"][i]), "strategy": cube["strategy"][i].item(),
                 "inter": {"bandwidth": float(cube["inter.bandwidth"][i])},
                 "compute": {"efficiency": float(cube["compute.efficiency"][i])}}
        doc = explain(load_spec(point))
        got = float(cube["iteration_time"].sel(nodes=4)[i])
        assert got == pytest.approx(doc["iteration_time"], rel=2e-5)


def test_sampling_is_reproducible_and_chunk_independent(sampled_cube):
    again = sweep.run(SAMPLED)  # default chunk size
    xr.testing.assert_identical(again, sampled_cube)
    other_seed = sweep.run({**SAMPLED, "sample": {**SAMPLED["sample"], "seed": 4}})
    assert not np.array_equal(other_seed["inter.bandwidth"].values, sampled_cube["inter.bandwidth"].values)


def test_sobol_sampling_covers_the_range_evenly():
    spec = {"model": "alexnet", "batch_size": 32, "nodes": 2,
            "sample": {"n": 1024, "method": "sobol", "inter": {"alpha": {"min": 0.0, "max": 1e-3}}}}
    alpha = sweep.run(spec)["inter.alpha"].values
    counts = np.histogram(alpha, bins=16, range=(0, 1e-3))[0]
    assert counts.min() == counts.max() == 64  # a scrambled Sobol net is exactly balanced


def test_sampled_streamed_file_matches_memory(tmp_path, sampled_cube):
    out = tmp_path / "sampled.nc"
    sweep.run(SAMPLED, output=out, chunk=300).close()
    xr.testing.assert_identical(open_cube(out), sampled_cube)


@pytest.mark.parametrize("sample,key", [
    ({"n": 0, "nodes": {"min": 1, "max": 4}}, "sample.n"),
    ({"n": 10, "method": "halton", "nodes": {"min": 1, "max": 4}}, "sample.method"),
    ({"n": 10, "nodes": {"min": 4, "max": 1}}, "sample.nodes"),
    ({"n": 10, "model": ["alexnet", "vgg16"]}, "sample.model"),
    ({"n": 10, "batch_size": {"min": 1, "max": 4}}, "sample.batch_size"),  # also given outside
    ({"n": 10, "inter": {"alpha": {"min": 0.0, "max": 1.0, "scale": "log"}}}, "sample.inter.alpha.min"),
    ({"n": 10, "strategy": []}, "sample.strategy"),
    ({"n": 10}, "sample"),
])
def test_bad_sample_tables_name_the_key(sample, key, cli, write_spec, tmp_path):
    import tomli_w
    text = tomli_w.dumps({"model": "alexnet", "batch_size": 8, "sample": sample})
    status, _, err = cli("run", write_spec(text), "-o", tmp_path / "o.nc")
    assert status == 2 and err.strip().startswith(f"ssgd-sweep: error: {key} =") and "\n" not in err.strip()
    assert not (tmp_path / "o.nc").exists()


def test_progress_bar_only_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert evaluate.make_progress(10, quiet=False) is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert evaluate.make_progress(10, quiet=True) is None
    bar = evaluate.make_progress(10, quiet=False)
    assert bar is not None and bar.total == 10
    bar.close()


def test_a_single_configuration_streams_to_a_scalar_cube(cli, write_spec, tmp_path):
    out = tmp_path / "one.nc"
    status, _, err = cli("run", write_spec('model = "alexnet"\nbatch_size = 16\nnodes = 2\n'), "-o", out)
    assert status == 0, err
    cube = open_cube(out)
    assert cube["iteration_time"].dims == ()
    doc = explain(load_spec({"model": "alexnet", "batch_size": 16, "nodes": 2}))
    assert float(cube["iteration_time"]) == pytest.approx(doc["iteration_time"], rel=2e-5)


@pytest.mark.parametrize("chunk", [7, 48, 1000])
def test_chunked_boxes_agree_with_single_configurations(reference_cube, chunk):
    """Chunks are boxes whose parameters the devices broadcast from per-axis
    values (sweep.engine.evaluate.expand); every configuration must equal the
    same configuration evaluated alone from flat parameters."""
    from sweep.engine.evaluate import evaluate_params
    from sweep.engine.params import point_params
    from sweep.graph import zoo
    from sweep.graph.compiler import compile_structure
    from sweep.engine.plan import structure_of

    cube = sweep.run(GRID, chunk=chunk)
    spec = load_spec(GRID)
    rng = np.random.default_rng(chunk)
    for _ in range(12):
        index = tuple(int(rng.integers(n)) for n in spec.shape)
        point = spec.point(index)
        structure = structure_of(spec, {k: point[k] for k in point if k in ("model",)})
        params = point_params(point, zoo.model_of(structure))
        expected = float(evaluate_params(compile_structure(structure), params)["iteration_time"][0])
        got = float(cube["iteration_time"].values[index])
        assert got == pytest.approx(expected, rel=1e-6), (point, chunk)


def test_sampled_names_are_stored_as_codes_and_read_back_as_names(tmp_path, sampled_cube):
    """Sampled categorical keys take one byte per configuration on disk
    (CF flag_values / flag_meanings); open_cube gives back the names."""
    out = tmp_path / "s.nc"
    sweep.run(SAMPLED, output=out, chunk=300, open_result=False)
    with xr.open_dataset(out, engine="h5netcdf") as raw:
        stored = raw["strategy"]
        assert stored.dtype == np.int8
        assert stored.attrs["flag_meanings"] == "bsp wfbp mgwfbp"
        np.testing.assert_array_equal(stored.attrs["flag_values"], [0, 1, 2])
        assert raw["batch_size"].dtype.kind == "i" and "flag_meanings" not in raw["batch_size"].attrs  # a range
    with sweep.open_cube(out) as cube:
        np.testing.assert_array_equal(cube["strategy"].values, sampled_cube["strategy"].values)
        assert "flag_meanings" not in cube["strategy"].attrs


@pytest.mark.parametrize("spec_dict, chunk", [(GRID, 7), (GRID, 90), (SAMPLED, 128),
                                              ({**GRID, "outputs": ["iteration_time", "d_iteration_time/d_inter.bandwidth"],
                                                "ps": {"servers": [1, 2]}}, 33)])
def test_parameters_broadcast_on_the_devices_equal_the_flat_host_ones(spec_dict, chunk):
    """The devices broadcast each parameter from its per-axis values
    (evaluate.expand); the host's flat resolution of every configuration
    (kernel_params on [C] columns, as before boxes) gives the same bits."""
    from sweep.engine import evaluate
    from sweep.engine.params import Column, kernel_params
    from sweep.engine.plan import Plan
    from sweep.graph import zoo

    spec = load_spec(spec_dict)
    devices = evaluate.visible_devices()
    plan = Plan(spec, chunk)
    box = plan.padded_box_shape()
    for chunk_ in list(plan.chunks())[:: max(1, plan.num_chunks // 5)]:
        _, params, _, _, _ = evaluate._chunk_inputs(spec, plan, chunk_)
        on_devices = evaluate._on_devices(params, plan, chunk_, devices, evaluate._varying(spec, plan, chunk_))
        columns, _ = plan.columns(chunk_)
        flat = {key: Column(c.values, np.broadcast_to(c.index, box).reshape(-1)[:chunk_.size])
                for key, c in columns.items()}
        expected = kernel_params(flat, zoo.model_of(chunk_.structure), chunk_.size)
        for name, value in on_devices.items():
            got = np.asarray(value)
            got = got[:chunk_.size] if got.size > 1 else np.broadcast_to(got, (chunk_.size,))
            np.testing.assert_array_equal(got, expected[name], err_msg=f"{name}, chunk {chunk_.id}")
