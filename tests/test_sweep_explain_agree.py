"""Sweeps and explain run the same program: they agree, on both channel paths."""
import pytest

@pytest.mark.parametrize("prefetch", [True, False])
def test_bsp_and_wfbp_sweeps_match_explain(prefetch):
    """A scenario with only bsp and wfbp takes the closed-form channel."""
    import sweep
    from kernels.codes import ALGORITHMS
    from sweep.report.explain import explain
    from sweep.scenario.spec import load_spec

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
    from sweep.report.explain import explain
    from sweep.scenario.spec import load_spec

    base = {"model": model, "batch_size": 4, "nodes": 2, "gpus_per_node": 4}
    for strategies in (["wfbp"], ["wfbp", "mgwfbp"]):
        start = time.perf_counter()
        cube = sweep.run({**base, "strategy": strategies})
        assert time.perf_counter() - start < 30
        doc = explain(load_spec({**base, "strategy": "wfbp"}))
        assert float(cube["iteration_time"].sel(strategy="wfbp")) == pytest.approx(doc["iteration_time"], rel=2e-5)
