"""experiments/zero_memory.py in --quick mode: files, and memory per GPU by
stage against the ZeRO paper's closed form (same activations in every stage)."""

import numpy as np
import pytest
import xarray as xr

from experiment_modules import load_study
from sweep.graph import zoo


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    module = load_study("zero_memory")
    out = tmp_path_factory.mktemp("zero_memory")
    assert module.main(["--quick", "--out", str(out)]) == 0
    return module, out, xr.load_dataset(out / "zero_memory.nc", engine="h5netcdf")


def test_files(run):
    _, out, _ = run
    assert (out / "zero_memory.png").read_bytes().startswith(b"\x89PNG")
    text = (out / "zero_memory.md").read_text()
    assert "## Findings" in text and "fastest that fits" in text


def test_model_states_follow_the_zero_closed_form(run):
    _, _, cube = run
    psi = zoo.get_model("gpt2", 256).params
    p = cube["gpus"]
    states = {0: 16 * psi + 0 * p, 1: 4 * psi + 12 * psi / p, 2: 2 * psi + 14 * psi / p, 3: 16 * psi / p}
    memory = cube["memory_per_gpu"]
    activations = memory.sel(zero=0) - states[0]  # whatever the stage, the same activations
    assert float(activations.min()) > 0
    for stage, expected in states.items():
        error = abs(memory.sel(zero=stage) / (expected + activations) - 1)
        assert float(error.max()) < 1e-5, stage


def test_fastest_fitting_is_the_fastest_among_those_that_fit(run):
    module, _, cube = run
    best = module.fastest_fitting(cube)
    t = cube["iteration_time"].where(cube["fits_in_memory"] == 1)
    for cell in np.ndindex(best.shape):
        where = dict(zip(best.dims, cell))
        times = t.isel(where)
        if int(best.isel(where)) == -1:
            assert times.isnull().all()
        else:
            assert float(times.sel(zero=int(best.isel(where)))) == float(times.min())
