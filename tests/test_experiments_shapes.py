"""experiments/shapes.py on a tiny setting (alexnet, 2 nodes x 4 GPUs, 10GbE):
identities that follow from the DAG of sweep/dag.py and the ring costs, so a
wrong edge, cost row or output definition breaks them."""

import numpy as np
import pytest
import xarray as xr

from experiment_modules import load_study
from sweep.graph import zoo

NODES = 2
WORKERS = NODES * 4
RTOL = 1e-5  # float32 kernels


@pytest.fixture(scope="module")
def shapes():
    return load_study("shapes")


@pytest.fixture(scope="module")
def cube(shapes):
    # bsp and wfbp send fixed buckets, so the orderings below hold for every cost.
    full = shapes.sweep_cube(models=("alexnet",), networks=("10gbe",), nodes=(NODES,),
                             strategies=("wfbp", "bsp", "mgwfbp"))
    return full.sel(model="alexnet", inter="10gbe", nodes=NODES)


def close(a, b, atol=1e-6):
    """a == b to float32 precision, aligned by dimension name (xarray broadcasting)."""
    a, b = xr.broadcast(xr.DataArray(a), xr.DataArray(b))
    np.testing.assert_allclose(a.transpose(*b.dims).values, b.values, rtol=RTOL, atol=atol)


def test_cube_layout_and_throughput_counts_every_micro_batch(cube, shapes):
    assert list(cube["shape"].values) == list(shapes.SHAPES)
    assert int(cube["micro_batches"].sel(shape="accumulation4")) == 4
    samples = WORKERS * cube["micro_batches"] * int(cube["batch_size"])
    close(cube["throughput"], samples / cube["iteration_time"], atol=0)
    close(cube["time_vs_barrier"].sel(shape="barrier"), 1.0)
    close(cube["time_vs_reference"].sel(shape="hierarchical_pipelined"),
          cube["iteration_time"].sel(shape="hierarchical_pipelined") / cube["iteration_time"].sel(shape="hierarchical"))
    for name in cube.data_vars:
        assert "units" in cube[name].attrs and "long_name" in cube[name].attrs, name


def test_with_free_communication_the_barrier_shapes_are_their_compute_chain(cube):
    """Iteration minus exposed communication is the iteration with free
    communication: with an update barrier that is the compute chain (input is
    prefetched and shorter here); layerwise moves the update off that chain."""
    free = cube["iteration_time"] - cube["exposed_communication"]
    barrier_shapes = [s for s in cube["shape"].values if s != "layerwise"]
    close(free.sel(shape=barrier_shapes), cube["compute_time"].sel(shape=barrier_shapes))
    lw = free.sel(shape="layerwise")
    assert (lw <= cube["compute_time"].sel(shape="layerwise") + 1e-6).all()
    assert (lw.sel(strategy="wfbp") < cube["compute_time"].sel(shape="layerwise", strategy="wfbp") - 1e-4)
    assert (cube["exposed_communication"] > 0).all()


def test_layerwise_never_slower_and_with_one_bucket_saves_the_other_updates(cube):
    t = cube["iteration_time"]
    for strategy in ("wfbp", "bsp"):
        assert float(t.sel(shape="layerwise", strategy=strategy)) <= float(t.sel(shape="barrier", strategy=strategy)) \
            * (1 + RTOL)
    assert float(t.sel(shape="layerwise", strategy="wfbp")) < float(t.sel(shape="barrier", strategy="wfbp"))
    # bsp: one bucket after bwd_1, so every layer's update starts when it is in, all at once (updates share no
    # resource); fwd_1 waits for layer 1's update only, where the barrier waits for the whole update: the
    # layer-wise iteration saves the other layers' share of the update (16 bytes per parameter at 900 GB/s).
    layers = zoo.get_model("alexnet").layers
    update = 16 * sum(l.params for l in layers) / 900e9
    saved = float(t.sel(shape="barrier", strategy="bsp")) - float(t.sel(shape="layerwise", strategy="bsp"))
    assert saved == pytest.approx(update * (1 - layers[0].params / sum(l.params for l in layers)), rel=2e-3)


def test_pipelining_the_hierarchical_stages_never_hurts(cube):
    t = cube["iteration_time"]
    for strategy in ("wfbp", "bsp"):  # same buckets, each stage on its own FIFO channel
        assert float(t.sel(shape="hierarchical_pipelined", strategy=strategy)) \
            <= float(t.sel(shape="hierarchical", strategy=strategy)) * (1 + RTOL)
    # AlexNet over 10GbE: per-layer buckets pipeline; one bsp bucket cannot.
    assert float(cube["time_vs_reference"].sel(shape="hierarchical_pipelined", strategy="wfbp")) < 0.95
    close(t.sel(shape="hierarchical_pipelined", strategy="bsp"), t.sel(shape="hierarchical", strategy="bsp"))


def test_accumulation_adds_compute_and_keeps_the_exposed_tail(cube):
    """Communication follows the last micro-batch's backward exactly as it
    follows the only one: 3 more micro-batches of compute, same exposed tail."""
    t, c = cube["iteration_time"], cube["compute_time"]
    close(cube["exposed_communication"].sel(shape="accumulation4"),
          cube["exposed_communication"].sel(shape="barrier"))
    close(t.sel(shape="accumulation4") - t.sel(shape="barrier"), c.sel(shape="accumulation4") - c.sel(shape="barrier"))
    assert (cube["time_vs_barrier"].sel(shape="accumulation4") < 1).all()  # per micro-batch


def test_zero_costs_are_the_halves_of_the_ring_all_reduce(cube):
    t, c, comm = cube["iteration_time"], cube["compute_time"], cube["communication_time"]
    # ZeRO-1: one reduce-scatter after backward, whatever the strategy, and ZeRO-2 with one bsp bucket is it.
    close(t.sel(shape="zero1"), t.sel(shape="zero1", strategy="wfbp"))
    close(t.sel(shape="zero2", strategy="bsp"), t.sel(shape="zero1", strategy="bsp"))
    # Ring reduce-scatter + all-gather = all-reduce: ZeRO-1 is bsp with the update cut to 1/P.
    assert float(c.sel(shape="zero1", strategy="bsp")) < float(c.sel(shape="barrier", strategy="bsp"))
    close(t.sel(shape="zero1") - t.sel(shape="barrier", strategy="bsp"),
          c.sel(shape="zero1") - c.sel(shape="barrier", strategy="bsp"))
    # Communication time sums every channel (DESIGN 2.4); ring halves are half an all-reduce each.
    # ZeRO-1: one reduce-scatter and one all-gather of everything, an all-reduce of it.
    close(comm.sel(shape="zero1"), comm.sel(shape="barrier", strategy="bsp"))
    # ZeRO-2 (wfbp): a reduce-scatter per layer, then the all-gather of everything.
    close(comm.sel(shape="zero2", strategy="wfbp"),
          (comm.sel(shape="barrier", strategy="wfbp") + comm.sel(shape="barrier", strategy="bsp")) / 2)
    # ZeRO-3 (wfbp): a reduce-scatter per layer and two all-gathers of it (forward and backward).
    close(comm.sel(shape="zero3", strategy="wfbp"), 1.5 * comm.sel(shape="barrier", strategy="wfbp"))
    # ZeRO-3 waits for those gathers inside the compute chain: slower than ZeRO-2 here.
    assert (t.sel(shape="zero3") > t.sel(shape="zero2")).all()


def test_report_and_figure(cube, shapes, tmp_path):
    full = cube.expand_dims(model=["alexnet"], inter=["10gbe"], nodes=[NODES])
    text = shapes.report(full.transpose("model", "inter", "nodes", "strategy", "shape"), 1.0)
    rows = [line for line in text.splitlines() if line.startswith("| alexnet | 10GbE | ")]
    assert len(rows) == cube.sizes["shape"] + cube.sizes["strategy"]  # main table + ratio table
    assert "## Findings" in text and "**Layerwise update**" in text
    shapes.plot_shapes(full, tmp_path / "shapes.png", nodes=NODES, strategy="wfbp")
    assert (tmp_path / "shapes.png").read_bytes().startswith(b"\x89PNG")
