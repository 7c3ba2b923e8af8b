"""bucket_views against plain-Python implementations of the DESIGN 2.3 rules.

All inputs sit on exact binary grids (integer bytes in multiples of 16 KiB,
times in multiples of 2**-12, per-byte costs that are powers of two), so the
float32 kernels and the float64 references do the same exact arithmetic and
threshold ties behave identically: results are compared exactly.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from bucket_views import bsp_buckets, bucket_bytes, fusion_buckets, mgwfbp_buckets
from kernels.codes import BSP, FUSION, MGWFBP, WFBP

from reference_rules import bsp_rule, fusion_rule, mgwfbp_rule, wfbp_rule

S, C = 12, 8  # one shape for every random case: one compile per function
TICK = 2.0 ** -12


def random_inputs(seed):
    rng = np.random.default_rng(seed)
    slot_bytes = 16384.0 * rng.integers(0, 13, size=(S, C))
    slot_bytes[rng.random((S, C)) < 0.2] = 0.0  # layers without parameters
    # gradient-ready times, nondecreasing in backward order (cumulative backward time)
    # coarse grids (1/16 s) make exact ties between waits, latencies and ready times likely
    steps = rng.integers(0, 16, size=(S, C)) / 16.0
    steps[rng.random((S, C)) < 0.15] = 0.0  # zero-FLOP layers: equal ready times
    slot_ready = np.cumsum(steps, axis=0)
    threshold = 16384.0 * rng.integers(1, 40, size=C)  # exact ties with running sums happen
    latency = rng.integers(0, 12, size=C) / 16.0
    latency[:2] = 0.0  # "start >= next ready" only decides when latency is 0
    per_byte = 2.0 ** rng.integers(-24, -18, size=C).astype(np.float64)
    return slot_bytes, slot_ready, threshold, latency, per_byte


SEEDS = [11, 12, 13, 14, 15, 16]


def f32(*arrays):
    return [jnp.asarray(a, jnp.float32) for a in arrays]


def per_config(rule, *arrays):
    """Apply a one-configuration rule column by column: [S, C]."""
    cols = []
    for c in range(C):
        args = [a[:, c].tolist() if np.ndim(a) == 2 else float(a[c]) for a in arrays]
        cols.append(rule(*args))
    return np.array(cols).T


@pytest.mark.parametrize("seed", SEEDS)
def test_fusion_matches_rule(seed):
    b, _, thr, _, _ = random_inputs(seed)
    got = np.asarray(fusion_buckets(*f32(b, thr)))
    np.testing.assert_array_equal(got, per_config(fusion_rule, b, thr))


@pytest.mark.parametrize("seed", SEEDS)
def test_mgwfbp_matches_rule(seed):
    b, ready, _, lat, per_byte = random_inputs(seed)
    got = np.asarray(mgwfbp_buckets(*f32(b, ready, lat, per_byte)))
    np.testing.assert_array_equal(got, per_config(mgwfbp_rule, b, ready, lat, per_byte))


def test_random_mgwfbp_cases_both_merge_and_split():
    """Guard on the data: the rule both merges and splits across the random cases."""
    buckets = []
    for seed in SEEDS:
        b, ready, _, lat, per_byte = random_inputs(seed)
        sent = per_config(mgwfbp_rule, b, ready, lat, per_byte)
        buckets += list((sent > 0).sum(0))
    assert min(buckets) == 1 and max(buckets) >= 4


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_bsp_matches_rule(seed):
    b, *_ = random_inputs(seed)
    np.testing.assert_array_equal(np.asarray(bsp_buckets(*f32(b))), per_config(bsp_rule, b))


@pytest.mark.parametrize("seed", SEEDS)
def test_bucket_bytes_selects_strategy_per_configuration(seed):
    b, ready, thr, lat, per_byte = random_inputs(seed)
    strategy = np.array([BSP, WFBP, FUSION, MGWFBP] * (C // 4), np.int32)
    got = np.asarray(bucket_bytes(jnp.asarray(strategy), *f32(b, ready, thr, lat, per_byte)))
    rules = {
        BSP: lambda bb, rr, tt, ll, pp: bsp_rule(bb),
        WFBP: lambda bb, rr, tt, ll, pp: wfbp_rule(bb),
        FUSION: lambda bb, rr, tt, ll, pp: fusion_rule(bb, tt),
        MGWFBP: lambda bb, rr, tt, ll, pp: mgwfbp_rule(bb, rr, ll, pp),
    }
    for c in range(C):
        expected = rules[int(strategy[c])](b[:, c].tolist(), ready[:, c].tolist(), float(thr[c]),
                                           float(lat[c]), float(per_byte[c]))
        np.testing.assert_array_equal(got[:, c], expected, err_msg=f"config {c}, strategy {strategy[c]}")


@pytest.mark.parametrize("code", [BSP, WFBP, FUSION, MGWFBP])
def test_bytes_are_conserved(code):
    for seed in SEEDS[:3]:
        b, ready, thr, lat, per_byte = random_inputs(seed)
        strategy = jnp.full(C, code, jnp.int32)
        got = np.asarray(bucket_bytes(strategy, *f32(b, ready, thr, lat, per_byte)))
        np.testing.assert_array_equal(got.sum(0), b.sum(0))
        assert np.all(got >= 0)


def test_wfbp_sends_each_slot_its_own_bytes():
    b, ready, thr, lat, per_byte = random_inputs(21)
    got = np.asarray(bucket_bytes(jnp.full(C, WFBP, jnp.int32), *f32(b, ready, thr, lat, per_byte)))
    np.testing.assert_array_equal(got, b)


def test_bsp_sends_everything_from_the_last_slot():
    b, *_ = random_inputs(22)
    got = np.asarray(bsp_buckets(*f32(b)))
    np.testing.assert_array_equal(got[:-1], 0.0)
    np.testing.assert_array_equal(got[-1], b.sum(0))


def test_fusion_with_huge_threshold_is_bsp_and_tiny_is_wfbp():
    b, *_ = random_inputs(23)
    huge = np.full(C, 1e12)
    tiny = np.full(C, 0.5)  # below any nonzero layer (whole bytes)
    np.testing.assert_array_equal(np.asarray(fusion_buckets(*f32(b, huge))), per_config(bsp_rule, b))
    np.testing.assert_array_equal(np.asarray(fusion_buckets(*f32(b, tiny))), b)


def test_fusion_hand_worked_example():
    # backward-order slots of 3, 2, 5, 1, 4, 0 bytes, threshold 5:
    # [3+2] reaches 5 at slot 1, [5] at slot 2, [1+4] at slot 4, the last slot flushes 0
    b = np.array([3, 2, 5, 1, 4, 0], np.float32)[:, None]
    got = np.asarray(fusion_buckets(jnp.asarray(b), jnp.asarray([5.0])))[:, 0]
    np.testing.assert_array_equal(got, [0, 5, 5, 0, 5, 0])
    # threshold 6: 3+2+5 = 10 at slot 2, 1+4+0 flushed at the last slot
    got = np.asarray(fusion_buckets(jnp.asarray(b), jnp.asarray([6.0])))[:, 0]
    np.testing.assert_array_equal(got, [0, 0, 10, 0, 0, 5])


def test_mgwfbp_zero_latency_far_apart_is_wfbp():
    b, *_ = random_inputs(24)
    per_byte = np.full(C, 2.0 ** -20)
    # gaps of 100 s between gradients, far longer than any all-reduce here (< 1 s)
    ready = 100.0 * np.arange(1, S + 1)[:, None] * np.ones((1, C))
    got = np.asarray(mgwfbp_buckets(*f32(b, ready, np.zeros(C), per_byte)))
    np.testing.assert_array_equal(got, b)


def test_mgwfbp_enormous_latency_merges_everything():
    b, ready, _, _, per_byte = random_inputs(25)
    got = np.asarray(mgwfbp_buckets(*f32(b, ready, np.full(C, 1e6), per_byte)))
    np.testing.assert_array_equal(got, per_config(bsp_rule, b))


def test_mgwfbp_hand_worked_example():
    """Four slots of 1 MiB, latency 1 s, 1 s per MiB, ready at 0, 5, 5.5, 20 s.

    slot 0: start 0, next ready 5, wait 5 >= 1 -> send [0], busy 0..2;
    slot 1: start 5, next 5.5, wait 0.5 < 1 -> merge;
    slot 2: start 5.5, next 20, wait 14.5 -> send [1, 2] (2 MiB), busy 5.5..8.5;
    slot 3: last -> send.
    """
    mib = float(1 << 20)
    b = np.full((4, 1), mib)
    ready = np.array([[0.0], [5.0], [5.5], [20.0]])
    got = np.asarray(mgwfbp_buckets(*f32(b, ready, [1.0], [1.0 / mib])))[:, 0]
    np.testing.assert_array_equal(got, [mib, 0.0, 2 * mib, mib])
    # the channel is still busy when the next gradient is ready -> merge.
    # latency 1/8 s: slot 0 starts at 0, next ready 0.5, wait 0.5 -> send, busy until 1.125;
    # slot 1: start max(0.5, 1.125) = 1.125 >= next ready 0.875 -> merge;
    # slot 2: start 1.125, next 10 -> send 2 MiB; slot 3 last -> send.
    ready = np.array([[0.0], [0.5], [0.875], [10.0]])
    got = np.asarray(mgwfbp_buckets(*f32(b, ready, [0.125], [1.0 / mib])))[:, 0]
    np.testing.assert_array_equal(got, [mib, 0.0, 2 * mib, mib])
