"""The ZeRO / FSDP presets (issue 10): each equals its explicit keys in `run`
(the preset sets a structural key, so a preset axis groups by DAG shape),
`explain` and `predict`; an explicit `zero` wins; a ZeRO preset cannot be
sampled."""
import csv
import json
import re

import numpy as np
import pytest
import xarray as xr

from sweep.scenario.presets import PRESETS

ZERO_PRESETS = ("deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "pytorch-fsdp")
BASE = 'model = "gpt2"\nseq_len = 128\nbatch_size = 2\nnodes = [1, 2]\ngpus_per_node = 4\ngpu = "a100"\n'


def explicit(name: str) -> str:
    p = PRESETS[name]
    return (f'strategy = "{p.strategy}"\nalgorithm = "{p.algorithm}"\nbucket_bytes = {p.bucket_bytes}\n'
            f'zero = {p.zero}\noptimizer = "{p.optimizer}"\nprecision = "{p.precision}"\n')


def run(cli, write_spec, tmp_path, text, name="out"):
    out = tmp_path / f"{name}.nc"
    status, _, stderr = cli("run", write_spec(text), "-o", out)
    assert status == 0, stderr
    with xr.open_dataset(out) as data:
        return data.load()


def test_each_zero_preset_equals_its_explicit_keys(cli, write_spec, tmp_path):
    names = ["pytorch-ddp", *ZERO_PRESETS]
    axis = run(cli, write_spec, tmp_path, BASE + f"preset = {json.dumps(names)}\n", "axis")
    assert "preset=deepspeed-zero3: unrolled" in axis.attrs["lowering"]
    for name in ZERO_PRESETS:
        own = run(cli, write_spec, tmp_path, BASE + explicit(name), name)
        for var in own.data_vars:
            # Equal up to float32 rounding: a lone wfbp takes the channel's closed form, a preset axis
            # mixing strategies the general channel scan.
            np.testing.assert_allclose(axis[var].sel(preset=name).values, own[var].values, rtol=1e-6,
                                       err_msg=f"{name} {var}")
    memory = axis["memory_per_gpu"].sel(nodes=2)
    # Sharding by stage: ZeRO-1 < DDP (which also trains in fp32 here), and 3 < 2 < 1.
    assert memory.sel(preset="deepspeed-zero3") < memory.sel(preset="deepspeed-zero2") \
        < memory.sel(preset="deepspeed-zero1") < memory.sel(preset="pytorch-ddp")


def test_an_explicit_zero_wins_over_the_preset(cli, write_spec, tmp_path):
    a = run(cli, write_spec, tmp_path, BASE + 'preset = "deepspeed-zero3"\nzero = 1\n', "a")
    b = run(cli, write_spec, tmp_path, BASE + 'preset = "deepspeed-zero1"\n', "b")
    np.testing.assert_array_equal(a["iteration_time"].values, b["iteration_time"].values)


def test_explain_reports_the_preset_stage(cli, write_spec):
    spec = write_spec(BASE.replace("nodes = [1, 2]", "nodes = 2") + 'preset = "pytorch-fsdp"\n')
    status, out, stderr = cli("explain", spec, "--json")
    assert status == 0, stderr
    doc = json.loads(out)
    assert doc["configuration"]["zero"] == 3 and doc["configuration"]["optimizer"] == "adam"
    assert any(t["kind"] == "gather" for t in doc["tasks"])
    status, text, stderr = cli("explain", spec)  # the readable form shows the gathers' phase ...
    assert status == 0, stderr
    assert re.search(r"^  gather +\d", text, re.M)
    plain = write_spec(BASE.replace("nodes = [1, 2]", "nodes = 2"))
    status, text, stderr = cli("explain", plain)  # ... only where parameters are sharded
    assert status == 0, stderr
    assert "gather" not in text and re.search(r"^  update +\d", text, re.M)


def test_predict_rows_with_a_zero_preset(cli, write_spec, tmp_path):
    cube = run(cli, write_spec, tmp_path, BASE + 'preset = ["deepspeed-zero2", "pytorch-fsdp"]\n')
    fit = tmp_path / "fit.toml"
    fit.write_text('seq_len = 128\ngpus_per_node = 4\ngpu = "a100"\n[fit]\nrows = 1\n')
    query = tmp_path / "q.csv"
    with open(query, "w", newline="") as handle:
        csv.writer(handle).writerows([["model", "batch_size", "nodes", "preset", "iteration_time"],
                                      ["gpt2", 2, 2, "deepspeed-zero2", ""], ["gpt2", 2, 2, "pytorch-fsdp", ""]])
    out = tmp_path / "p.csv"
    status, _, stderr = cli("predict", fit, query, "-o", out)
    assert status == 0, stderr
    with open(out) as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        want = float(cube["iteration_time"].sel(nodes=2, preset=row["preset"]))
        assert float(row["predicted_iteration_time"]) == pytest.approx(want, rel=1e-5)


def test_a_zero_preset_cannot_be_sampled(cli, write_spec, tmp_path):
    text = BASE.replace("nodes = [1, 2]", "nodes = 2") + '[sample]\nn = 4\npreset = ["pytorch-ddp", "pytorch-fsdp"]\n'
    status, _, stderr = cli("run", write_spec(text), "-o", tmp_path / "o.nc")
    assert status == 2 and len(stderr.strip().splitlines()) == 1
    assert "sample.preset = 'pytorch-fsdp'" in stderr and "changes the DAG" in stderr
    assert not (tmp_path / "o.nc").exists()


def test_a_zero_preset_with_ps_is_refused_but_a_preset_axis_mixing_them_is_not(cli, write_spec, tmp_path):
    status, _, stderr = cli("run", write_spec(BASE + 'preset = "deepspeed-zero2"\nalgorithm = "ps"\n'), "-o",
                            tmp_path / "o.nc")
    assert status == 2 and stderr.startswith("ssgd-sweep: error: zero = 2") and "ps" in stderr
    # mxnet's parameter servers and DeepSpeed's ring, each with its own preset: fine.
    run(cli, write_spec, tmp_path, BASE + 'preset = ["mxnet", "deepspeed-zero2"]\n')
