"""The single-GPU time evaluated over the values it depends on
(`sweep.engine.single_gpu`): the parameters it reads are the ones that
change it, and sweeps give the same cube with it as without."""
import jax
import numpy as np
import pytest

import sweep
import sweep.engine.single_gpu as single_gpu
from kernels.iteration import single_gpu_time
from sweep.engine.evaluate import _chunk_inputs, _packed, _varying
from sweep.engine.devices import visible_devices
from sweep.engine.plan import Plan

GRID = {"model": "resnet50", "batch_size": [8, 64], "nodes": [1, 2, 4, 8], "gpus_per_node": [1, 4],
        "inter": {"bandwidth": [1e9, 1e10, 1e11], "alpha": [1e-6, 1e-5, 1e-4]}}


def chunk_of(keys):
    """(compiled DAG, host parameters, `expand`'s static arguments) of a scenario's first chunk."""
    spec = sweep.load_spec(keys)
    devices = visible_devices()
    plan = Plan(spec, 1 << 18, multiple=devices.count)
    chunk = next(plan.chunks())
    dag, params, _, fixed_buckets, _ = _chunk_inputs(spec, plan, chunk)
    _, static = _packed(params, plan, chunk, devices, _varying(spec, plan, chunk))
    return dag, params, static, fixed_buckets


@pytest.mark.parametrize("shape", [{"update": "layerwise"}, {"zero": 3}], ids=["layerwise", "zero3"])
def test_the_parameters_read_are_those_that_change_it(shape):
    """Against the kernel itself: changing a parameter not read leaves the
    single-GPU time bit for bit, changing the batch size does not; the links
    are never read, the worker count only where ZeRO-3 shards the update."""
    dag, params, static, fixed_buckets = chunk_of({**GRID, **shape})
    read = single_gpu.reads(dag, fixed_buckets, static["layout"])
    assert "batch_size" in read and not any(name.startswith(("inter_", "intra_")) for name in read)
    assert ("workers" in read) == (shape == {"zero": 3})
    point = {k: np.asarray(v).reshape(-1)[:1] for k, v in params.items()}
    # Compiled once, as a sweep runs it (eagerly, every call dispatches the DAG op by op).
    time_of = jax.jit(lambda values: single_gpu_time(dag, values, fixed_buckets))
    base = np.asarray(time_of(point))
    for name, value in point.items():
        if name in read or not np.issubdtype(value.dtype, np.floating):
            continue
        moved = np.asarray(time_of({**point, name: value * 3.0 + 1.0}))
        np.testing.assert_array_equal(moved, base, err_msg=name)
    more = np.asarray(time_of({**point, "batch_size": point["batch_size"] * 2}))
    assert more > base


def test_only_unrolled_chunks_with_repeats_evaluate_it_apart():
    """A contracted program's single-GPU time is cheap, and a chunk with as
    many distinct values as configurations gains nothing: both keep it
    inline."""
    dag, _, static, fixed_buckets = chunk_of({**GRID, "update": "layerwise"})
    assert single_gpu.plan(dag, fixed_buckets, static) is not None
    dag, _, static, fixed_buckets = chunk_of(GRID)
    assert single_gpu.plan(dag, fixed_buckets, static) is None
    dag, _, static, fixed_buckets = chunk_of({**GRID, "update": "layerwise", "batch_size": list(range(1, 97)),
                                              "inter": {}, "gpus_per_node": 1, "nodes": [1, 2]})
    assert single_gpu.plan(dag, fixed_buckets, static) is None


@pytest.mark.parametrize("reduce", [False, True], ids=["cube", "reduce"])
@pytest.mark.parametrize("shape", [{"update": "layerwise"}, {"zero": 3}], ids=["layerwise", "zero3"])
def test_sweeps_agree_with_it_evaluated_inline(monkeypatch, shape, reduce):
    """Every output of a cube or a reduction, with the single-GPU time
    evaluated apart and inline."""
    keys = {**GRID, **shape, "compute": {"efficiency": [0.3, 0.6]}}
    if reduce:
        keys["reduce"] = {"over": ["nodes", "inter.alpha"], "statistics": ["mean", "max"]}
    spec = sweep.load_spec(keys)
    calls = []
    compact = single_gpu.compact
    monkeypatch.setattr(single_gpu, "compact", lambda *a, **k: calls.append(1) or compact(*a, **k))
    apart = sweep.run(spec)
    assert calls  # evaluated apart
    monkeypatch.setattr(single_gpu, "FEWER", spec.size + 1)  # never worth it: inline
    calls.clear()
    inline = sweep.run(spec)
    assert not calls
    for name in inline.data_vars:
        np.testing.assert_allclose(apart[name].values, inline[name].values, rtol=1e-6, err_msg=name)
