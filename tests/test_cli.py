"""The `models`, `demo` and `explain` commands, and the scenario grammar."""
import json
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

from sweep.graph import zoo
from sweep.scenario.spec import load_spec


def test_models_json(cli):
    status, out, _ = cli("models", "--json")
    assert status == 0
    doc = json.loads(out)
    assert set(doc) == set(zoo.MODEL_NAMES)
    assert doc["resnet50"]["params"] == 25_557_032  # torchvision
    assert doc["vgg16"]["params"] == 138_357_544  # torchvision
    for entry in doc.values():
        assert sum(l["params"] for l in entry["layers"]) == entry["params"]
        assert sum(l["forward_flops"] for l in entry["layers"]) == pytest.approx(entry["forward_flops"])
        assert all(set(l) >= {"name", "params", "forward_flops"} for l in entry["layers"])


def test_models_table(cli):
    status, out, _ = cli("models")
    assert status == 0
    assert "25,557,032" in out and "gpt2_xl" in out


def test_demo_writes_a_cube_and_a_summary(cli, tmp_path):
    out = tmp_path / "demo.nc"
    status, stdout, _ = cli("demo", "-o", out)
    assert status == 0
    assert "resnet50" in stdout and "ib-fdr" in stdout and "horovod" in stdout
    with xr.open_dataset(out, engine="h5netcdf") as cube:
        assert set(cube["model"].values) == {"alexnet", "googlenet", "resnet50"}
        eff = cube["scaling_efficiency"]
        # Faster links never hurt: InfiniBand scales at least as well as 10GbE everywhere.
        assert (eff.sel(inter="ib-fdr") >= eff.sel(inter="10gbe") - 1e-6).all()


def test_python_dash_m_entry_point(tmp_path):
    spec = tmp_path / "one.toml"
    spec.write_text('model = "alexnet"\nbatch_size = 16\nnodes = 2\ngpus_per_node = 2\n')
    result = subprocess.run([sys.executable, "-m", "sweep", "explain", str(spec), "--json"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # stdout carries the JSON alone
    assert doc["iterations"] == 3


def test_dotted_keys_tables_and_strings_are_equivalent():
    a = load_spec({"model": "resnet50", "batch_size": 8, "inter": "ib-edr"})
    b = load_spec({"model": "resnet50", "batch_size": 8, "inter": {"name": "ib-edr"}})
    assert a.fixed == b.fixed == {"model": "resnet50", "batch_size": 8, "inter.name": "ib-edr"}


def test_integral_floats_accepted_for_integer_keys():
    spec = load_spec({"model": "resnet50", "batch_size": 32.0, "bucket_bytes": 25e6})
    assert spec.fixed["bucket_bytes"] == 25_000_000 and isinstance(spec.fixed["bucket_bytes"], int)


def test_link_override_keeps_catalog_latency(cli, write_spec):
    """`name` picks the catalog entry; a given field overrides just that field."""
    from sweep.scenario import catalog
    base = 'model = "alexnet"\nbatch_size = 16\nnodes = 2\nalgorithm = "ring"\nstrategy = "bsp"\n'
    doc = json.loads(cli("explain", write_spec(base + '[inter]\nname = "10gbe"\nbandwidth = 5e9\n'), "--json")[1])
    comm = next(t for t in doc["tasks"] if t["kind"] == "comm")
    alpha = catalog.LINKS["10gbe"].alpha
    assert comm["duration"] == pytest.approx(2 * alpha + comm["bytes"] / 5e9, rel=1e-12)


def test_tcp_links_keep_the_wire_and_take_the_socket_latency(cli, write_spec):
    """`<fabric>-tcp`: the fabric's bandwidth and line rate, TCP's 30 us (the
    10gbe entry's); a ring over it costs exactly that (explain's closed form)."""
    from sweep.scenario import catalog
    for name in catalog.TCP_FABRICS:
        wire, tcp = catalog.LINKS[name], catalog.LINKS[f"{name}-tcp"]
        assert (tcp.bandwidth, tcp.line_rate) == (wire.bandwidth, wire.line_rate)
        assert tcp.alpha == catalog.TCP_LATENCY == catalog.LINKS["10gbe"].alpha >= 10 * wire.alpha
    assert "IPoIB" in catalog.LINKS["ib-edr-tcp"].source and "IPoIB" not in catalog.LINKS["100gbe-tcp"].source
    base = 'model = "alexnet"\nbatch_size = 16\nnodes = 2\nalgorithm = "ring"\nstrategy = "bsp"\n'
    doc = json.loads(cli("explain", write_spec(base + 'inter = "ib-edr-tcp"\n'), "--json")[1])
    comm = next(t for t in doc["tasks"] if t["kind"] == "comm")
    assert comm["duration"] == pytest.approx(2 * 30e-6 + comm["bytes"] / 12.5e9, rel=1e-6)


def test_outputs_selects_variables(tmp_path):
    import sweep
    cube = sweep.run({"model": "alexnet", "batch_size": 16, "nodes": [1, 2],
                      "outputs": ["throughput", "bottleneck"]})
    assert set(cube.data_vars) == {"throughput", "bottleneck"}
    assert cube["bottleneck"].attrs["flag_meanings"] == "compute communication input"


def test_measured_throughput_is_reproduced_by_one_gpu():
    import sweep
    cube = sweep.run({"model": "resnet50", "batch_size": 64, "io": {"time_per_sample": 0.0},
                      "compute": {"measured_throughput": [253.1, 400.0]}})
    np.testing.assert_allclose(cube["throughput"].values, [253.1, 400.0], rtol=1e-5)


def test_input_bound_without_prefetch_is_slower():
    import sweep
    cube = sweep.run({"model": "alexnet", "batch_size": 64, "io": {"time_per_sample": 1e-3,
                                                                   "prefetch": [True, False]}})
    t = cube["iteration_time"]
    assert float(t.sel({"io.prefetch": False})) > float(t.sel({"io.prefetch": True}))
    # With prefetch, a slow reader bounds the iteration: io time per batch.
    assert float(t.sel({"io.prefetch": True})) == pytest.approx(64 * 1e-3, rel=1e-5)
    assert (cube["bottleneck"].values == 2).all()  # input: the reader is the busiest resource
