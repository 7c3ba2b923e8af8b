"""`run`: the netCDF cube over a grid, its labels, and its physics."""
import functools
import itertools

import jax
import numpy as np
import pytest
import xarray as xr

import sweep
from sweep.report.explain import explain
from sweep.scenario.spec import load_spec

GRID = """
model = ["resnet50", "googlenet"]
nodes = [1, 2]
batch_size = 32
gpus_per_node = [1, 4]
strategy = ["bsp", "wfbp", "mgwfbp"]
inter.bandwidth = [1e9, 1e10, 1e11]
inter.alpha = 2e-5
"""


@pytest.fixture(scope="module")
def cube_path(tmp_path_factory):
    from sweep.cli import main

    directory = tmp_path_factory.mktemp("run")
    spec = directory / "grid.toml"
    spec.write_text(GRID)
    out = directory / "cube.nc"
    assert main(["run", str(spec), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def cube(cube_path):
    with xr.open_dataset(cube_path, engine="h5netcdf") as ds:
        return ds.load()


def test_dims_follow_file_order(cube):
    assert list(cube["iteration_time"].dims) == ["model", "nodes", "gpus_per_node", "strategy", "inter.bandwidth"]
    assert list(cube["model"].values) == ["resnet50", "googlenet"]
    np.testing.assert_array_equal(cube["inter.bandwidth"].values, [1e9, 1e10, 1e11])


def test_file_is_netcdf4_hdf5(cube_path):
    assert cube_path.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"


def test_every_variable_and_coordinate_is_labelled(cube):
    names = list(cube.data_vars) + list(cube.coords)
    assert set(cube.data_vars) == set(sweep_outputs())
    for name in names:
        assert "units" in cube[name].attrs, name
        assert cube[name].attrs.get("long_name"), name
    assert cube["iteration_time"].attrs["units"] == "s"
    assert cube["throughput"].attrs["units"] == "samples/s"
    assert cube["inter.bandwidth"].attrs["units"] == "bytes/s"


def sweep_outputs():
    from kernels import OUTPUTS
    return OUTPUTS


def test_resolved_spec_attribute(cube):
    import tomllib
    resolved = tomllib.loads(cube.attrs["spec"])
    assert resolved["model"] == ["resnet50", "googlenet"]
    assert resolved["inter"]["bandwidth"] == [1e9, 1e10, 1e11]
    assert resolved["inter"]["alpha"] == 2e-5
    assert resolved["iterations"] == 3  # defaults are filled in
    assert int(cube.attrs["devices"]) == 1


def test_one_gpu_has_efficiency_one_and_no_communication(cube):
    one = cube.sel(nodes=1, gpus_per_node=1)
    np.testing.assert_allclose(one["scaling_efficiency"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(one["speedup"], 1.0, rtol=1e-6)
    assert float(np.abs(one["communication_time"]).max()) == 0.0
    assert float(np.abs(one["exposed_communication"]).max()) == 0.0


def test_more_bandwidth_never_slows_an_iteration(cube):
    t = cube["iteration_time"].values
    assert (np.diff(t, axis=-1) <= 1e-7 * t[..., 1:]).all()
    # ...and it does speed up some multi-GPU configurations.
    assert (np.diff(t, axis=-1) < -1e-3 * t[..., 1:]).any()


def test_throughput_and_efficiency_are_consistent(cube):
    workers = cube["nodes"] * cube["gpus_per_node"]
    dims = cube["throughput"].dims
    np.testing.assert_allclose(cube["throughput"], (workers * 32 / cube["iteration_time"]).transpose(*dims),
                               rtol=1e-5)
    np.testing.assert_allclose(cube["speedup"], (workers * cube["scaling_efficiency"]).transpose(*dims), rtol=1e-5)
    assert float(cube["scaling_efficiency"].max()) <= 1.0 + 1e-6
    exposed = cube["exposed_communication"]
    assert float(exposed.min()) >= -1e-7
    assert (exposed <= cube["communication_time"] * (1 + 1e-5) + 1e-9).all()


def test_cube_agrees_with_explain_point_by_point(cube):
    for model, nodes, gpus, strategy, bw in itertools.product(*(cube[d].values for d in cube["iteration_time"].dims)):
        point = {"model": str(model), "nodes": int(nodes), "batch_size": 32, "gpus_per_node": int(gpus),
                 "strategy": str(strategy), "inter": {"bandwidth": float(bw), "alpha": 2e-5}}
        doc = explain(load_spec(point))
        cell = cube.sel(model=model, nodes=nodes, gpus_per_node=gpus, strategy=strategy)
        cell = cell.sel({"inter.bandwidth": bw})
        assert float(cell["iteration_time"]) == pytest.approx(doc["iteration_time"], rel=2e-5)
        for name in ("communication_time", "compute_time", "io_time", "throughput"):
            assert float(cell[name]) == pytest.approx(doc["breakdown"][name], rel=2e-5, abs=1e-9)


def test_python_api_returns_the_same_cube(cube, tmp_path):
    import tomllib
    out = tmp_path / "api.nc"
    ds = sweep.run(tomllib.loads(GRID), output=out)
    assert out.exists()
    xr.testing.assert_allclose(ds["iteration_time"], cube["iteration_time"])


def test_prepared_chunk_is_the_sweep_kernel():
    """`sweep.prepare_chunk` (the kernel alone, for benchmarks) computes what
    `sweep.run` puts in the cube for the same configurations."""
    spec = sweep.load_spec({"model": "alexnet", "batch_size": [8, 32], "nodes": [1, 2, 4], "strategy": "mgwfbp"})
    prepared = sweep.prepare_chunk(spec)
    out = prepared.evaluate()
    assert prepared.size >= spec.size and set(out) == set(spec.outputs)
    cube = sweep.run(spec)
    np.testing.assert_array_equal(np.asarray(out["iteration_time"])[:spec.size],
                                  cube["iteration_time"].values.reshape(-1))
    assert prepared.compile_fresh().mode == prepared.compiled.mode


@pytest.mark.parametrize("reduce", [False, True], ids=["cube", "reduce"])
def test_a_large_sweep_runs_unrolled_programs_as_straight_line_code(monkeypatch, reduce):
    """From STRAIGHT_FROM configurations per structural group a sweep (a
    cube or a reduction) evaluates an unrolled program as straight-line
    code (`kernels.straight`), below it by the segments' scans: the same
    results either way, for each structural group."""
    import sweep.engine.evaluate
    import sweep.engine.reducer
    import sweep.engine.xla

    keys = {"model": "alexnet", "batch_size": [8, 64], "nodes": [1, 2, 4], "gpus_per_node": [1, 4],
            "update": ["barrier", "layerwise"], "inter": {"bandwidth": [1e9, 1e10]}}
    if not reduce:  # with a derivative, which takes straight-line code's max through `select_max`
        keys["outputs"] = ["iteration_time", "exposed_communication", "scaling_efficiency",
                           "d_iteration_time/d_inter.bandwidth"]
    if reduce:
        keys["reduce"] = {"over": ["nodes", "inter.bandwidth"], "statistics": ["mean", "max"]}
    spec = sweep.load_spec(keys)
    chosen = []  # (DAG mode, straight-line code) of each chunk

    def spied(dag, configurations):
        chosen.append((dag.mode, sweep.engine.xla.straight_code(dag, configurations)))
        return chosen[-1][1]

    monkeypatch.setattr(sweep.engine.reducer if reduce else sweep.engine.evaluate, "straight_code", spied)
    scans = sweep.run(spec)
    assert sorted(chosen) == [("contracted", False), ("unrolled", False)]
    chosen.clear()
    monkeypatch.setattr(sweep.engine.xla, "STRAIGHT_FROM", spec.size // 2)  # two structural groups
    straight = sweep.run(spec)
    assert sorted(chosen) == [("contracted", False), ("unrolled", True)]
    # float32 rounding of the same sums in another order; a difference of two times (exposed
    # communication) keeps their absolute error.
    atol = 2e-6 * float(scans["iteration_time"].max()) if not reduce else 0.0
    for name in scans.data_vars:
        np.testing.assert_allclose(straight[name].values, scans[name].values, rtol=2e-6, atol=atol, err_msg=name)


@pytest.mark.parametrize("shape", [{"strategy": "mgwfbp"}, {"update": "layerwise"}, {"zero": 3}])
def test_tiles_give_the_whole_chunk(shape):
    """Evaluating tile by tile (sweep.engine.evaluate.by_tiles) is the same
    program on fewer configurations: it agrees with the whole chunk, [1]
    parameters and sensitivities included."""
    from sweep.engine.evaluate import _primaries, by_tiles

    spec = sweep.load_spec({"model": "alexnet", "batch_size": [8, 64], "nodes": [1, 2, 4, 8],
                            "gpus_per_node": [1, 4], "inter": {"bandwidth": [1e9, 1e10]}, **shape,
                            "outputs": ["iteration_time", "d_iteration_time/d_inter.bandwidth"]})
    prepared = sweep.prepare_chunk(spec)
    assert prepared.size == 32
    fn = functools.partial(_primaries, prepared.compiled, tangents=prepared.tangents,
                           fixed_buckets=prepared.fixed_buckets, straight=prepared.straight)
    whole = jax.jit(fn)(prepared.params)  # compiled: op by op, the unrolled programs took 10-20 s
    tiled = jax.jit(lambda params: by_tiles(fn, params, 8))(prepared.params)
    assert whole.keys() == tiled.keys()
    for name in whole:
        np.testing.assert_allclose(np.asarray(tiled[name]), np.asarray(whole[name]), rtol=1e-6, err_msg=name)
        assert np.shape(tiled[name]) == np.shape(whole[name])


def test_unrolled_tile_keeps_the_registers_in_the_cache_budget():
    """An unrolled program's tile (per device) halves from TILE until its
    largest register file ([R, tile]) is below REGISTER_BUDGET_BYTES: ResNet-50's
    ZeRO-3 scan (113 registers) keeps 1,024 configurations in float32 and
    halves in float64; BERT-Large's (203) halves; a DAG without a register
    scan keeps TILE; tiles split over devices grow by their number."""
    from sweep.engine.evaluate import REGISTER_BUDGET_BYTES, TILE, unrolled_tile

    def compiled(model, **keys):
        return sweep.prepare_chunk(sweep.load_spec({"model": model, "batch_size": 32, **keys}), chunk=8).compiled

    def registers(dag):
        return max((s.num_regs + 1 for s in dag.lowered.program.segments if s.kind == "scan"), default=0)

    for dag in (compiled("resnet50", zero=3), compiled("bert_large", zero=3)):
        regs = registers(dag)
        for itemsize in (4, 8):
            tile = unrolled_tile(dag, itemsize)
            assert regs * tile * itemsize < REGISTER_BUDGET_BYTES <= regs * (2 * tile) * itemsize or tile == TILE
            assert tile & (tile - 1) == 0 and tile <= TILE
    assert unrolled_tile(compiled("resnet50", zero=3), 4) == TILE == 1024
    assert unrolled_tile(compiled("resnet50", zero=3), 8) == 512
    assert unrolled_tile(compiled("bert_large", zero=3), 4) == 512
    assert unrolled_tile(compiled("bert_large", zero=3), 4, shards=2) == 1024  # 512 on each of two devices
    layerwise = compiled("resnet50", update="layerwise")
    assert registers(layerwise) == 0 and unrolled_tile(layerwise, 8) == TILE
