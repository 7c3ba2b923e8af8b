"""Sensitivity outputs d(iteration_time)/d(key) against finite differences."""
import pytest

import sweep
from sweep.report.explain import explain
from sweep.scenario.spec import load_spec

BASE = {"model": "googlenet", "batch_size": 32, "nodes": 4, "gpus_per_node": 2,
        "inter": {"alpha": 2e-5, "bandwidth": 2e9}, "intra": {"alpha": 3e-6, "bandwidth": 1e10},
        "io": {"time_per_sample": 2e-4}}

KEYS = ["inter.bandwidth", "inter.alpha", "intra.bandwidth", "batch_size", "compute.efficiency",
        "gpu.peak_flops", "compute.b_half", "grad_bytes", "io.time_per_sample"]


def with_value(point: dict, key: str, value: float) -> dict:
    point = {k: dict(v) if isinstance(v, dict) else v for k, v in point.items()}
    table, _, field = key.rpartition(".")
    (point.setdefault(table, {}) if table else point)[field] = value
    return point


def value_of(point: dict, key: str) -> float:
    table, _, field = key.rpartition(".")
    if table:
        return point.get(table, {}).get(field, {"gpu.peak_flops": 15.7e12, "compute.efficiency": 0.6,
                                                 "compute.b_half": 8.0}.get(key))
    return point.get(field, {"grad_bytes": 4}.get(field))


def finite_difference(point: dict, key: str) -> float:
    """Central difference of explain's float64 iteration time."""
    x = float(value_of(point, key))
    h = 1e-5 * x
    up = explain(load_spec(with_value(point, key, x + h)))["iteration_time"]
    down = explain(load_spec(with_value(point, key, x - h)))["iteration_time"]
    return (up - down) / (2 * h)


@pytest.mark.parametrize("strategy", ["bsp", "wfbp", "mgwfbp"])
def test_sensitivities_match_finite_differences(strategy):
    point = {**BASE, "strategy": strategy}
    outputs = [f"d_iteration_time/d_{k}" for k in KEYS]
    cube = sweep.run({**point, "outputs": ["iteration_time", *outputs]})
    checked = 0
    for key in KEYS:
        if key in ("batch_size", "grad_bytes"):
            continue  # integer keys: no finite step in a scenario file (see test below)
        got = float(cube[f"d_iteration_time_d_{key}"])
        expected = finite_difference(point, key)
        # Below 1e-6 of the iteration time per 100 % change of the key, a
        # derivative is zero (e.g. input hidden by prefetch) up to rounding.
        negligible = 1e-6 * float(cube["iteration_time"]) / float(value_of(point, key))
        assert got == pytest.approx(expected, rel=1e-3, abs=negligible), key
        checked += 1
    assert checked == 7
    # Everything the compute model depends on matters; links matter when communication is exposed.
    assert float(cube["d_iteration_time_d_gpu.peak_flops"]) < 0
    assert float(cube["d_iteration_time_d_compute.efficiency"]) < 0


def test_integer_keys_by_closed_form():
    """bsp over a ring: d t / d nodes and d t / d grad_bytes from DESIGN 2.2."""
    point = {**BASE, "strategy": "bsp", "io": {"time_per_sample": 0.0}}
    cube = sweep.run({**point, "outputs": ["d_iteration_time/d_nodes", "d_iteration_time/d_grad_bytes",
                                           "d_iteration_time/d_batch_size"]})
    from sweep.graph import zoo
    params = zoo.get_model("googlenet").params
    n, g, alpha, bw = 4, 2, 2e-5, 2e9
    p = n * g
    message = 4 * params
    # t_comm = 2(P-1) alpha + 2(P-1)/P M/bw with P = n g: d/dn = g (2 alpha + 2 M / (P^2 bw))
    assert float(cube["d_iteration_time_d_nodes"]) == pytest.approx(g * (2 * alpha + 2 * message / (p * p * bw)),
                                                                      rel=1e-4)
    assert float(cube["d_iteration_time_d_grad_bytes"]) == pytest.approx(2 * (p - 1) / p * params / bw, rel=1e-4)
    # Compute time is B * F / (peak * eff_max * B / (B + b)) = F (B + b) / (peak eff_max): d/dB = F/(peak eff_max)
    # (the update does not depend on B, and input is hidden by prefetch).
    flops = 3 * zoo.get_model("googlenet").forward_flops
    assert float(cube["d_iteration_time_d_batch_size"]) == pytest.approx(flops / (15.7e12 * 0.6), rel=1e-4)


def test_sensitivity_output_is_labelled(tmp_path):
    out = tmp_path / "s.nc"
    import xarray as xr
    sweep.run({**BASE, "nodes": [2, 4], "outputs": ["d_iteration_time/d_inter.bandwidth"]}, output=out).close()
    with xr.open_dataset(out, engine="h5netcdf") as cube:
        var = cube["d_iteration_time_d_inter.bandwidth"]
        assert var.attrs["units"] == "s/(bytes/s)"
        assert "d(iteration_time)/d(inter.bandwidth)" in var.attrs["long_name"]
        assert (var.values < 0).all()


@pytest.mark.parametrize("name", ["d_iteration_time/d_strategy", "d_iteration_time/d_nosuch", "d_throughput/d_nodes"])
def test_bad_sensitivity_names(name):
    from sweep.errors import SpecError
    with pytest.raises(SpecError, match="outputs"):
        load_spec({**BASE, "outputs": [name]})


@pytest.mark.parametrize("key, extra", [("inter.protocol_bytes", ""),  # unset
                                        ("nccl.ll_share", "nccl.ll_share = 0.5\n")])  # set, unused by a ring
def test_sensitivity_to_a_key_nothing_depends_on_is_refused_without_leaving_files(cli, write_spec, tmp_path,
                                                                                   key, extra):
    spec = write_spec('model = "alexnet"\nbatch_size = 8\nnodes = [1, 2]\n'
                      f'outputs = ["d_iteration_time/d_{key}"]\n' + extra)
    status, _, err = cli("run", spec, "-o", tmp_path / "o.nc")
    assert status == 2 and key in err and "does not use it" in err and len(err.strip().splitlines()) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("o.nc")]
