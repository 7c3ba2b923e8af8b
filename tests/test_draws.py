"""Counter-based draws (kernels/draws.py) and a random sample's parameters
made on the devices (sweep/engine/device_draws.py)."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import sweep
from kernels import draws
from sweep.engine import device_draws, evaluate
from sweep.engine.plan import Plan
from sweep.graph import zoo

# Known-answer vectors of Threefry-2x32-20 from the Random123 library
# (Salmon et al., SC 2011): (key, counter, output).
KNOWN = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
         ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
         ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]

SAMPLE = {"model": "resnet50", "gpus_per_node": [4, 8], "nodes": [4, 16],
          "outputs": ["iteration_time", "communication_time"],
          "sample": {"n": 3000, "seed": 7,
                     "inter": {"bandwidth": {"min": 1.25e9, "max": 5e11, "scale": "log"},
                               "alpha": {"min": 1e-6, "max": 1e-3, "scale": "log"}},
                     "batch_size": {"min": 8, "max": 256, "scale": "log"},
                     "bucket_bytes": {"min": 1e5, "max": 1e8},
                     "compute.efficiency": {"min": 0.3, "max": 0.9},
                     "gpu.name": ["v100", "a100"],
                     "strategy": ["wfbp", "fusion", "mgwfbp"]}}


@pytest.mark.parametrize("key, counter, expected", KNOWN)
def test_threefry_known_answers_on_host_and_device(key, counter, expected):
    host = draws.threefry2x32(np, *key, np.uint32([counter[0]]), np.uint32([counter[1]]))
    device = jax.jit(lambda a, b: draws.threefry2x32(jnp, *key, a, b))(jnp.uint32([counter[0]]),
                                                                        jnp.uint32([counter[1]]))
    assert [int(v[0]) for v in host] == [int(v[0]) for v in device] == list(expected)


def test_chunk_indices_carry_past_two_to_the_32():
    first = 2**32 - 3
    low, high = jax.jit(draws.chunk_indices, static_argnums=3)(
        jnp.uint32(first & 0xFFFFFFFF), jnp.uint32(first >> 32), jnp.uint32(4), 8)
    index = np.asarray(high, np.int64) << 32 | np.asarray(low, np.int64)
    assert index.tolist() == [first + i for i in range(5)] + [first + 4] * 3  # padding repeats the last


def test_uniforms_are_independent_of_the_range_asked_for():
    sample = sweep.load_spec({**SAMPLE, "sample": {**SAMPLE["sample"], "n": 10**12}}).sample
    whole = sample.uniforms(2**32 - 5, 2**32 + 5)
    assert np.array_equal(whole[3:7], sample.uniforms(2**32 - 2, 2**32 + 2))
    assert np.array_equal(whole, sample.uniforms_at(np.arange(2**32 - 5, 2**32 + 5)))
    assert ((whole >= 0) & (whole < 1)).all() and np.all(whole * 2**24 == np.floor(whole * 2**24))


def test_discrete_dimensions_by_thresholds_match_the_continuous_formula():
    """Positions counted from thresholds equal floor(u * count) for choices
    and integer ranges, and the log formula's floor for log integer ranges."""
    spec = sweep.load_spec(SAMPLE)
    dims = {d.key: d for d in spec.sample.dimensions}
    u = np.arange(2**24, dtype=np.float64)[::97] / 2**24
    strategy, batch = dims["strategy"], dims["batch_size"]
    assert np.array_equal(strategy.values(u), np.floor(u * 3).astype(np.int64))
    expected = np.minimum(np.floor(np.exp(np.log(8) + u * (np.log(257) - np.log(8)))), 256)
    mismatch = batch.values(u) != expected
    assert mismatch.mean() < 1e-4  # only where float64 rounding sits on an integer boundary
    assert batch.values(u).min() == 8 and batch.values(u).max() == 256


def _params_both_ways(spec, chunk_size=1024):
    devices = evaluate.visible_devices()
    plan = Plan(spec, chunk_size)
    for chunk in plan.chunks():
        drawing = evaluate._draws(spec, plan, chunk)
        assert drawing is not None
        varying = evaluate._varying(spec, plan, chunk)
        model = zoo.model_of(chunk.structure)
        host, _ = evaluate._params(spec, plan.columns(chunk)[0], model)
        on_host = evaluate._on_devices(host, plan, chunk, devices, varying)
        tables, _ = evaluate._params(spec, device_draws.host_columns(spec, plan, chunk, drawing[0]), model)
        yield chunk, on_host, evaluate._on_devices(tables, plan, chunk, devices, varying, drawing)


@pytest.mark.parametrize("n, chunk", [(3000, 1024), (200, 1024)])  # the config axis split; a box of 2 x 2 x 200
def test_device_drawn_parameters_equal_the_hosts(n, chunk):
    """Discrete keys (and what the host derives from them: catalog look-ups,
    strategy codes) bit for bit; float ranges within float32 rounding of
    the float64 formula."""
    spec = sweep.load_spec({**SAMPLE, "sample": {**SAMPLE["sample"], "n": n}})
    drawn_floats = {"inter_bandwidth", "inter_alpha", "bucket_bytes", "efficiency"}
    for chunk, host, device in _params_both_ways(spec, chunk):
        assert set(host) == set(device)
        for name in host:
            a, b = np.asarray(host[name]), np.asarray(device[name])
            if name == "bucket_bytes":  # a long integer range, floored in float32: one off at a boundary
                assert np.all(np.abs(b - a) <= np.maximum(1, 1e-6 * a)), chunk.id
            elif name in drawn_floats:
                np.testing.assert_allclose(b, a, rtol=1e-6, err_msg=name)
            else:
                assert np.array_equal(a, b), (chunk.id, name)


def test_device_draws_do_not_depend_on_chunking(tmp_path):
    spec = {**SAMPLE, "outputs": ["iteration_time"]}
    small, large = sweep.run(spec, chunk=500), sweep.run(spec, chunk=4096)
    assert np.array_equal(small["iteration_time"].values, large["iteration_time"].values)
    assert np.array_equal(small["bucket_bytes"].values, large["bucket_bytes"].values)


def test_integer_ranges_are_tables_and_sobol_stays_on_the_host():
    """A sampled node count is transformed by the host (workers, their log):
    as an integer range short enough it is a table the devices gather from;
    a Sobol sample is always drawn on the host."""
    keys = {k: v for k, v in SAMPLE.items() if k != "nodes"}
    spec = sweep.load_spec({**keys, "sample": {**SAMPLE["sample"], "nodes": {"min": 1, "max": 64}}})
    plan = Plan(spec, 1024)
    draw_plan, _ = evaluate._draws(spec, plan, next(plan.chunks()))
    assert {spec.sample.dimensions[d].key for d in draw_plan.discrete} == {"batch_size", "nodes", "gpu.name",
                                                                            "strategy"}
    sobol = sweep.load_spec({**SAMPLE, "sample": {**SAMPLE["sample"], "method": "sobol"}})
    plan = Plan(sobol, 1024)
    assert evaluate._draws(sobol, plan, next(plan.chunks())) is None


@pytest.mark.parametrize("seed", [-1, 2**64, True, 1.5])
def test_seeds_outside_the_generators_key_are_refused(seed):
    with pytest.raises(sweep.SpecError, match="sample.seed"):
        sweep.load_spec({**SAMPLE, "sample": {**SAMPLE["sample"], "seed": seed}})
    sweep.load_spec({**SAMPLE, "sample": {**SAMPLE["sample"], "seed": 2**64 - 1}})  # the largest key
