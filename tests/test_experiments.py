"""The studies in experiments/, each in --quick mode: files, table vs cube, and physics."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import sweep
from experiment_modules import load_study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Run a study once per module in --quick mode: (module, out dir, cube, table rows)."""
    done = {}

    def get(name):
        if name not in done:
            module = load_study(name)
            out = tmp_path_factory.mktemp(name)
            assert module.main(["--quick", "--out", str(out)]) == 0
            cube = xr.load_dataset(out / "cube.nc", engine="h5netcdf")
            done[name] = module, out, cube, parse_table((out / "table.md").read_text())
        return done[name]

    return get


def parse_table(markdown: str) -> list[dict]:
    lines = [l for l in markdown.splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "")) == {"-"}
    return [dict(zip(header, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:]]


def assert_pngs(out: Path, names):
    for name in names:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    assert not list(out.glob(".*.part")), "temporary files left behind"


def close(text: str, value: float, digits_rel=0.051):
    """A table cell printed with one decimal (or 3 significant digits) matches `value`."""
    printed = float(text)
    return math.isclose(printed, value, rel_tol=1e-3, abs_tol=digits_rel)


# interconnects ----------------------------------------------------------------------------

def test_interconnects_files_and_table(study):
    module, out, cube, rows = study("interconnects")
    assert_pngs(out, ["scaling_efficiency.png", "communication_overhead.png"])
    assert set(cube.dims) == {"model", "preset", "link", "gpus"}
    assert cube["scaling_efficiency"].attrs["units"] == "1"
    assert len(rows) == cube.sizes["model"] * cube.sizes["preset"]
    for row in rows:
        for column, value in row.items():
            if column.startswith("efficiency"):
                link = next(l for l, label in module.LINK_LABELS.items() if f" {label} @" in column)
                gpus = int(column.split("@")[1].split()[0])
                expected = 100 * float(cube["scaling_efficiency"].sel(
                    model=row["model"], preset=row["preset"], link=link, gpus=gpus))
                assert close(value, expected), (row, column, expected)


def test_interconnects_faster_links_never_scale_worse(study):
    _, _, cube, _ = study("interconnects")
    eff = cube["scaling_efficiency"]
    nvlink, pcie = eff.sel(link="nvlink2").dropna("gpus"), eff.sel(link="pcie3").dropna("gpus")
    assert nvlink.size and (nvlink >= pcie - 1e-6).all()
    ib, tengbe = eff.sel(link="ib-fdr").dropna("gpus"), eff.sel(link="10gbe").dropna("gpus")
    assert ib.size and (ib >= tengbe - 1e-6).all()
    # One GPU is its own baseline; the all-reduce presets gain from NVLink at 8 GPUs.
    assert np.allclose(eff.sel(link="pcie3", gpus=1), 1.0)
    assert (nvlink.sel(gpus=8, preset=["caffe-mpi", "cntk"]) > pcie.sel(gpus=8, preset=["caffe-mpi", "cntk"])).all()


# bottlenecks -------------------------------------------------------------------------------

def test_bottlenecks_breakdown_adds_up_and_matches_table(study):
    module, out, cube, rows = study("bottlenecks")
    assert_pngs(out, ["breakdown.png", "bottleneck_map.png"])
    parts = cube["compute_time"] + cube["exposed_input"] + cube["exposed_communication"].clip(min=0)
    np.testing.assert_allclose(parts, cube["iteration_time"], rtol=1e-4)
    assert rows
    for row in rows:
        sel = cube.sel({"model": row["model"], "inter": row["inter-node link"],
                        "io.time_per_sample": float(row["input [s/sample]"]),
                        "gpus_per_node": module.GPUS_PER_NODE, "nodes": int(cube["nodes"].max())})
        assert close(row["compute [ms]"], 1e3 * float(sel["compute_time"]))
        assert close(row["exposed communication [ms]"], max(0.0, 1e3 * float(sel["exposed_communication"])))
        assert close(row["iteration [ms]"], 1e3 * float(sel["iteration_time"]))
        assert row["bottleneck"] == str(cube["bottleneck"].attrs["flag_meanings"].split()[int(sel["bottleneck"])])


def test_bottlenecks_follow_the_slowest_resource(study):
    _, _, cube, _ = study("bottlenecks")
    names = cube["bottleneck"].attrs["flag_meanings"].split()
    at = dict(model="alexnet", gpus_per_node=4, nodes=int(cube["nodes"].max()))
    # AlexNet's 61 M parameters over 10GbE: communication bounds it with a fast input pipeline ...
    fast = cube.sel({**at, "inter": "10gbe", "io.time_per_sample": 1e-4})
    assert names[int(fast["bottleneck"])] == "communication"
    # ... and with CPU decoding over InfiniBand the GPUs wait for input instead.
    slow = cube.sel({**at, "inter": "ib-fdr", "io.time_per_sample": 2e-3})
    assert names[int(slow["bottleneck"])] == "input" and float(slow["exposed_input"]) > 0
    # Slower links expose more communication.
    assert (cube["exposed_communication"].sel(inter="10gbe") >= cube["exposed_communication"].sel(inter="ib-fdr")
            - 1e-6).all()


# bandwidth_target --------------------------------------------------------------------------

def test_bandwidth_target_reaches_90_percent_when_evaluated(study):
    module, out, cube, rows = study("bandwidth_target")
    assert_pngs(out, ["required_bandwidth.png"])
    flags = cube["solution"].attrs["flag_meanings"].split()
    solved = cube["solution"] == flags.index("solved")
    unreachable = cube["solution"] == flags.index("unreachable")
    assert solved.any() and unreachable.any(), "the quick grid should show both outcomes"
    required = cube["required_inter_bandwidth"].values
    assert np.isnan(required[unreachable.values]).all() and not np.isnan(required[~unreachable.values]).any()
    for model in cube["model"].values:
        block = cube.sel(model=model)
        for index in np.argwhere(block["solution"].values == flags.index("solved")):
            point = {d: block[d].values[i] for d, i in zip(block["solution"].dims, index)}
            bandwidth = float(block["required_inter_bandwidth"].sel(point))
            eff = [_efficiency(module, model, point, bandwidth * f) for f in (1.0, 0.98)]
            assert abs(eff[0] - module.TARGET) <= 0.005, (model, point, eff)
            assert eff[1] < module.TARGET, "2 % less bandwidth must miss the target (the answer is minimal)"
        for index in np.argwhere(block["solution"].values == flags.index("unreachable")):
            point = {d: block[d].values[i] for d, i in zip(block["solution"].dims, index)}
            assert _efficiency(module, model, point, 1e13) < module.TARGET


def _efficiency(module, model, point, bandwidth):
    cube = sweep.run({
        "model": model, "batch_size": module.BATCH[model], "gpu": "v100", "preset": "pytorch-ddp",
        "intra": "pcie3", "gpus_per_node": module.GPUS_PER_NODE, "algorithm": str(point["algorithm"]),
        "inter": {"alpha": float(point["inter.alpha"]), "bandwidth": bandwidth}, "nodes": int(point["nodes"]),
        "outputs": ["scaling_efficiency"],
    })
    return float(cube["scaling_efficiency"])


def test_bandwidth_target_table_matches_cube(study):
    module, _, cube, rows = study("bandwidth_target")
    assert rows
    for row in rows:
        for column, text in row.items():
            if not column.endswith("[GB/s]"):
                continue
            algorithm = column.split(",")[0]
            alpha = next(a for a, label in module.LATENCIES.items() if label in column)
            value = float(cube["required_inter_bandwidth"].sel(
                {"model": row["model"], "algorithm": algorithm, "inter.alpha": alpha,
                 "nodes": int(row["GPUs"]) // module.GPUS_PER_NODE}))
            if text == "unreachable":
                assert np.isnan(value)
            else:
                assert math.isclose(float(text), value / 1e9, rel_tol=5e-3)


# fusion_buckets ----------------------------------------------------------------------------

def test_fusion_buckets_best_is_the_minimum_and_grows_with_latency(study):
    _, out, cube, rows = study("fusion_buckets")
    assert_pngs(out, ["best_bucket.png", "bucket_curves.png"])
    assert (cube["best_iteration_time"] <= cube["iteration_time"]).all()
    best_time = cube["iteration_time"].sel(bucket_bytes=cube["best_bucket_bytes"])
    np.testing.assert_array_equal(best_time, cube["best_iteration_time"])
    # Higher latency per all-reduce favours fewer, larger buckets.
    best = cube["best_bucket_bytes"]
    alphas = cube["inter.alpha"].values
    assert (best.sel({"inter.alpha": alphas.max()}) >= best.sel({"inter.alpha": alphas.min()})).all()
    assert (best.sel({"inter.alpha": alphas.max()}) > best.sel({"inter.alpha": alphas.min()})).any()
    for row in rows:
        sel = cube.sel({"model": row["model"], "inter.bandwidth": float(row["bandwidth [GB/s]"]) * 1e9,
                        "inter.alpha": float(row["latency [us]"]) * 1e-6}, method="nearest")
        assert math.isclose(float(row["best bucket [MiB]"]), float(sel["best_bucket_bytes"]) / 2**20, rel_tol=5e-3)
        assert close(row["best iteration [ms]"], 1e3 * float(sel["best_iteration_time"]))


# strategies --------------------------------------------------------------------------------

def test_strategies_mgwfbp_never_loses_and_table_matches(study):
    module, out, cube, rows = study("strategies")
    assert_pngs(out, ["mgwfbp_gain.png", "throughput.png"])
    assert (cube["gain_over_wfbp"] >= -1e-3).all() and (cube["gain_over_bsp"] >= -1e-3).all()
    # Over 10GbE merging pays off against per-layer all-reduces once there are several nodes.
    assert float(cube["gain_over_wfbp"].sel(inter="10gbe", nodes=cube["nodes"].max()).max()) > 0.05
    assert rows
    nodes = int(cube["nodes"].max())
    for row in rows:
        link = next(l for l, label in module.LINK_LABELS.items() if label == row["inter-node link"])
        sel = cube.sel(model=row["model"], inter=link, nodes=nodes)
        for strategy in module.STRATEGIES:
            assert math.isclose(float(row[f"{strategy} [samples/s]"]),
                                float(sel["throughput"].sel(strategy=strategy)), abs_tol=0.51)
        assert close(row["mgwfbp vs wfbp [%]"], 100 * float(sel["gain_over_wfbp"]))
        assert close(row["mgwfbp vs bsp [%]"], 100 * float(sel["gain_over_bsp"]))


def test_benchmark_reduce_compares_device_counts_in_alternating_pairs(monkeypatch, capsys):
    # Each two-device rate is divided by the one-device rate of its own round
    # (the child next to it in time), and the counts' order alternates.
    from experiments import benchmark_reduce

    calls, rates = [], {(0, 1): 10.0, (0, 2): 20.0, (1, 2): 30.0, (1, 1): 20.0, (2, 1): 40.0, (2, 2): 20.0}

    def child(devices, what, *args):
        if what == "side_by_side":
            return {"reference_rate": 1.0, "full_cube_rate": 1.0}
        calls.append(devices)
        rate = rates[(sum(1 for d in calls if d == devices) - 1, devices)] * 1e6
        return {"grid": 4, "kernel_rate": 2 * rate, "peak_rss_mib": 100.0 * devices,
                **{f"{name}_{key}": value for name in ("optimum", "reduce")
                   for key, value in (("rate", rate), ("vs_kernel", 0.5))}}

    monkeypatch.setattr(benchmark_reduce, "child", child)
    assert benchmark_reduce.main(["--rounds", "3", "--size-log2", "10"]) == 0
    assert calls == [1, 2, 2, 1, 1, 2]
    lines = capsys.readouterr().out.splitlines()
    two = json.loads(lines[1])
    assert two["optimum_vs_one_device_rounds"] == pytest.approx([2.0, 1.5, 0.5])
    assert two["optimum_vs_one_device"] == pytest.approx(1.5 ** (1 / 3))
    assert two["optimum_rate"] == pytest.approx(70e6 / 3)
    assert "1.14x one device [0.50-2.00]" in lines[-1]
