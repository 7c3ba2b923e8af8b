"""The chain recurrence f_i = max(f_{i-1} + g_i, r_i) + d_i, two ways, against a plain loop."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.chain import chain_finish, prefix, sequential


def loop(r, d, g, temperature=None):
    """One configuration at a time, one task at a time (NumPy)."""
    n, c = d.shape
    out = np.empty((n, c))
    for k in range(c):
        previous = -np.inf
        for i in range(n):
            a, b = previous + g[i, k], r[i, k]
            if temperature is None:
                start = max(a, b)
            else:
                t = temperature[k]
                start = t * np.logaddexp(a / t, b / t)
            previous = out[i, k] = start + d[i, k]
    return out


def random_chain(seed, n=23, c=5):
    rng = np.random.default_rng(seed)
    r = rng.uniform(0, 10, (n, c))
    r[rng.random((n, c)) < 0.3] = -np.inf  # rows without an input
    r[0] = np.where(np.isfinite(r[0]), r[0], 0.0)
    d = rng.uniform(0, 2, (n, c))
    g = np.where(rng.random((n, c)) < 0.3, -np.inf, 0.0)
    g[0] = -np.inf
    return r, d, g


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("evaluate", [sequential, prefix, chain_finish], ids=lambda f: f.__name__)
@pytest.mark.parametrize("gated", [False, True])
def test_chain_matches_a_plain_loop(evaluate, gated):
    for seed in range(3):
        r, d, g = random_chain(seed)
        if not gated:
            g = np.zeros_like(d)
            g[0] = -np.inf  # the first task has no task before it either way
        got = evaluate(jnp.asarray(r), jnp.asarray(d), jnp.asarray(g) if gated else None)
        np.testing.assert_allclose(np.asarray(got), loop(r, d, g), rtol=1e-12)


@pytest.mark.parametrize("evaluate", [sequential, prefix], ids=lambda f: f.__name__)
def test_smooth_chain_matches_a_plain_loop(evaluate):
    r, d, g = random_chain(7)
    temperature = np.linspace(0.05, 0.5, d.shape[1])
    got = evaluate(jnp.asarray(r), jnp.asarray(d), jnp.asarray(g), jnp.asarray(temperature))
    np.testing.assert_allclose(np.asarray(got), loop(r, d, g, temperature), rtol=1e-10)


def test_constant_rows_broadcast_over_configurations():
    """Per-task constants [n, 1] against per-configuration inputs [n, C]."""
    r, d, _ = random_chain(3)
    d_const = d[:, :1]
    got = chain_finish(jnp.asarray(r), jnp.asarray(d_const))
    g = np.zeros_like(d)
    np.testing.assert_allclose(np.asarray(got), loop(r, np.broadcast_to(d_const, d.shape), g), rtol=1e-12)


def test_chain_is_differentiable_both_ways():
    r, d, g = random_chain(5)
    for evaluate in (sequential, prefix):
        grad = jax.grad(lambda x: evaluate(jnp.asarray(r), x, jnp.asarray(g))[-1].sum())(jnp.asarray(d))
        # d(f_last)/d(d_i) is 1 on the critical path of each configuration and 0 elsewhere.
        assert set(np.unique(np.asarray(grad))) <= {0.0, 1.0}
        assert (np.asarray(grad)[-1] == 1.0).all()


def test_sent_bytes_rows_gather_across_channel_blocks():
    """`SentBytes.rows` reads any rows of any channels' [n, C] blocks in the order asked."""
    from kernels.program import SentBytes

    first, second = jnp.arange(12.0).reshape(4, 3), 100 + jnp.arange(6.0).reshape(2, 3)
    sent = SentBytes()
    sent.add(range(10, 14), first)
    sent.add([20, 21], second)
    assert len(sent) == 6 and sorted(sent) == [10, 11, 12, 13, 20, 21]
    np.testing.assert_array_equal(sent[12], first[2])
    for refs in ([11, 12, 13], [13, 10], [21, 10, 20, 12], [20]):
        expected = np.stack([np.asarray(first[r - 10] if r < 20 else second[r - 20]) for r in refs])
        np.testing.assert_array_equal(np.asarray(sent.rows(refs)), expected)
