"""The sweep's stream-reduced evaluation equals the full level-array longest path."""
import jax
import numpy as np
import pytest

from kernels.codes import ALGORITHMS, STRATEGIES
from kernels.iteration import iteration_outputs, steady_iteration_time, task_durations
from sweep import zoo
from sweep.compiler import compile_zoo_model
from sweep.params import Column, kernel_params

C = 256


def random_columns(rng):
    """Per-configuration keys drawn over wide ranges, every strategy and algorithm."""
    def pick(values):
        return Column(tuple(values), rng.integers(0, len(values), C))

    def log_uniform(lo, hi):
        values = tuple(np.exp(rng.uniform(np.log(lo), np.log(hi), C)))
        return Column(values, np.arange(C))

    return {
        "batch_size": pick([1, 8, 32, 128]),
        "nodes": pick([1, 2, 3, 8]),
        "gpus_per_node": pick([1, 2, 4]),
        "strategy": pick(STRATEGIES),
        "algorithm": pick(ALGORITHMS),
        "bucket_bytes": pick([1, 1 << 20, 25 << 20, 1 << 30]),
        "io.prefetch": pick([True, False]),
        "io.time_per_sample": log_uniform(1e-6, 1e-2),
        "inter.alpha": log_uniform(1e-7, 1e-2),
        "inter.bandwidth": log_uniform(1e7, 1e11),
        "intra.bandwidth": log_uniform(1e9, 1e12),
        "compute.efficiency": log_uniform(0.05, 1.0),
    }


@pytest.mark.parametrize("model,iterations", [("googlenet", 2), ("resnet50", 3), ("bert_base", 4)])
def test_stream_reduction_matches_level_arrays(model, iterations):
    rng = np.random.default_rng(iterations)
    dag, _ = compile_zoo_model(model, None, iterations)
    params = kernel_params(random_columns(rng), zoo.get_model(model), C)

    fast = jax.jit(iteration_outputs)(dag, params)

    @jax.jit
    def full(dag, params):
        table, _ = task_durations(dag, params)
        return steady_iteration_time(dag, table, params["prefetch"])

    np.testing.assert_allclose(fast["iteration_time"], full(dag, params), rtol=2e-5)


def test_reduction_is_differentiable():
    """Gradients flow through the channel scan: more bandwidth, less time."""
    dag, _ = compile_zoo_model("resnet50", None, 3)
    columns = {"batch_size": Column((32,), np.zeros(1, int)), "nodes": Column((4,), np.zeros(1, int)),
               "gpus_per_node": Column((4,), np.zeros(1, int)), "strategy": Column(("bsp",), np.zeros(1, int))}
    params = kernel_params(columns, zoo.get_model("resnet50"), 1)

    def time_of(bandwidth):
        return iteration_outputs(dag, {**params, "inter_bandwidth": bandwidth})["iteration_time"].sum()

    bw = params["inter_bandwidth"]
    grad = jax.grad(time_of)(bw)
    # bsp: the whole ring all-reduce is exposed, d t / d bw = -2(P-1)/P * M / bw^2.
    workers, message = 16, 4 * zoo.get_model("resnet50").params
    expected = -2 * (workers - 1) / workers * message / bw.astype(np.float64) ** 2
    np.testing.assert_allclose(grad, expected, rtol=1e-4)


def test_closed_form_channel_equals_the_scan():
    """bsp and wfbp in closed form (max of suffix sums) against the scan, on
    random slots with empty ones, per-configuration scales and strategies."""
    from kernels.channel import comm_channel, fixed_bucket_channel
    from kernels.codes import BSP, WFBP

    rng = np.random.default_rng(5)
    slots, configs = 40, 64
    slot_bytes = rng.integers(0, 5, (slots, 1)) * rng.uniform(1e3, 1e7, (slots, 1))
    slot_ready = np.cumsum(rng.uniform(0, 1, (slots, 1)), axis=0)
    strategy = rng.choice([BSP, WFBP], configs).astype(np.int32)
    latency, per_byte = rng.uniform(0, 0.2, configs), rng.uniform(1e-9, 1e-7, configs)
    bytes_scale, ready_scale = rng.uniform(1, 4, configs), rng.uniform(0.1, 10, configs)
    args = [np.asarray(a, np.float32) for a in (slot_bytes, slot_ready)]
    _, finish, busy = comm_channel(strategy, *args, np.float32(1), latency.astype(np.float32),
                                   per_byte.astype(np.float32), bytes_scale.astype(np.float32),
                                   ready_scale.astype(np.float32), return_sent=False)
    closed_finish, closed_busy = fixed_bucket_channel(strategy, *args, latency.astype(np.float32),
                                                      per_byte.astype(np.float32), bytes_scale.astype(np.float32),
                                                      ready_scale.astype(np.float32))
    np.testing.assert_allclose(closed_finish, finish, rtol=1e-5)
    np.testing.assert_allclose(closed_busy, busy, rtol=1e-5)


@pytest.mark.parametrize("prefetch", [True, False])
def test_bsp_and_wfbp_sweeps_match_explain(prefetch):
    """A scenario with only bsp and wfbp takes the closed-form channel."""
    import sweep
    from kernels.codes import ALGORITHMS
    from sweep.explain import explain
    from sweep.spec import load_spec

    base = {"model": "googlenet", "batch_size": 16, "nodes": 3, "gpus_per_node": 2,
            "io": {"prefetch": prefetch, "time_per_sample": 5e-4},
            "inter": {"alpha": 3e-4, "bandwidth": 2e9}}
    cube = sweep.run({**base, "strategy": ["bsp", "wfbp"], "algorithm": list(ALGORITHMS)})
    for strategy in ("bsp", "wfbp"):
        for algorithm in ALGORITHMS:
            doc = explain(load_spec({**base, "strategy": strategy, "algorithm": algorithm}))
            got = cube.sel(strategy=strategy, algorithm=algorithm)
            assert float(got["iteration_time"]) == pytest.approx(doc["iteration_time"], rel=2e-5)
            assert float(got["communication_time"]) == pytest.approx(doc["breakdown"]["communication_time"],
                                                                      rel=2e-5)


@pytest.mark.parametrize("model", ["resnet152", "bert_large", "gpt2_xl"])
def test_deep_models_compile_quickly_and_match_explain(model):
    """The deepest DAGs (hundreds of comm slots) compile in seconds, on both channel paths."""
    import time

    import sweep
    from sweep.explain import explain
    from sweep.spec import load_spec

    base = {"model": model, "batch_size": 4, "nodes": 2, "gpus_per_node": 4}
    for strategies in (["wfbp"], ["wfbp", "mgwfbp"]):
        start = time.perf_counter()
        cube = sweep.run({**base, "strategy": strategies})
        assert time.perf_counter() - start < 30
        doc = explain(load_spec({**base, "strategy": "wfbp"}))
        assert float(cube["iteration_time"].sel(strategy="wfbp")) == pytest.approx(doc["iteration_time"], rel=2e-5)
