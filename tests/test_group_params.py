"""A grid chunk's packed parameters cut from its structural group's
(`sweep.engine.group_params`) equal the chunk's own resolution
(`sweep.engine.evaluate._chunk_inputs` then `pack`) bit for bit, chunk by
chunk: layouts, float and integer buffers."""
import numpy as np
import pytest

import sweep
from sweep.engine import evaluate, group_params
from sweep.engine.params import pack
from sweep.engine.plan import Plan

SCENARIOS = {
    # The split axis padded (3 bandwidths in steps of 2), leading axes fixed per chunk.
    "padded split": ({"model": "resnet50", "batch_size": [8, 32, 64], "nodes": [1, 2, 4], "gpus_per_node": [1, 4],
                      "inter": {"bandwidth": [1e9, 1e10, 1e11], "alpha": [1e-6, 1e-5]}}, 4),
    # Structural axes (two models), presets, a sensitivity output (widened parameters).
    "groups, presets, tangents": ({"model": ["resnet50", "bert_base"], "preset": ["horovod", "pytorch-ddp"],
                                   "nodes": [2, 8], "gpus_per_node": 4, "batch_size": [16, 32],
                                   "intra": {"name": "nvlink3"},
                                   "inter": {"bandwidth": [1e9, 1e10], "alpha": 2e-6},
                                   "outputs": ["iteration_time", "d_iteration_time/d_inter.bandwidth",
                                               "d_iteration_time/d_compute.efficiency"]}, 8),
    # The link model's extension keys and categorical names.
    "link extensions": ({"model": "resnet50", "batch_size": 32, "nodes": [1, 2, 4], "gpus_per_node": [2, 8],
                         "inter": {"name": ["10gbe", "100gbe"], "overhead": [0.0, 1e-5], "line_rate": 1.25e9},
                         "strategy": ["wfbp", "mgwfbp"], "algorithm": ["ring", "nccl"]}, 16),
    # Every inner axis in one chunk (the split at the first axis).
    "one chunk per group": ({"model": ["resnet50", "vgg16"], "nodes": [1, 2], "batch_size": [8, 16]}, 1 << 18),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_cut_from_the_group_equals_the_chunk_resolved(name):
    keys, target = SCENARIOS[name]
    spec = sweep.load_spec(keys)
    plan = Plan(spec, target)
    chunks = list(plan.chunks())
    assert len(chunks) > 1 or name == "one chunk per group"
    for chunk in chunks:
        group = evaluate._group_params(spec, plan, chunk)
        assert group is not None
        _, params, tangents, _, _ = evaluate._chunk_inputs(spec, plan, chunk)
        layout, floats, ints = pack(params)
        cut_layout, cut_floats, cut_ints = group.packed(plan, chunk)
        assert cut_layout == layout
        assert group.tangents == tangents
        np.testing.assert_array_equal(cut_floats, floats, strict=True)
        np.testing.assert_array_equal(cut_ints, ints, strict=True)


def test_samples_and_large_groups_resolve_per_chunk(monkeypatch):
    sample = sweep.load_spec({"model": "resnet50", "batch_size": 32,
                              "sample": {"seed": 1, "n": 64, "inter": {"bandwidth": {"min": 1e9, "max": 1e11}}}})
    plan = Plan(sample, 16)
    assert evaluate._group_params(sample, plan, next(plan.chunks())) is None
    grid = sweep.load_spec(SCENARIOS["padded split"][0])
    plan = Plan(grid, 4)
    monkeypatch.setattr(group_params, "LIMIT", 8)
    assert evaluate._group_params(grid, plan, next(plan.chunks())) is None
