"""Counter-based draws for sampled sweeps, the same bits on the host and the devices.

A draw is a pure function of (seed, sampled dimension, configuration index),
so a device makes its chunk's draws from the chunk's first index alone, and
any chunking, device count or process count draws the same sample. The
generator is Threefry-2x32 with 20 rounds (Salmon, Moraes, Dror and Shaw,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator
behind JAX's own PRNG), written once over an array namespace (`numpy` or
`jax.numpy`): 32-bit unsigned adds, rotations and xors, bit-identical on
every backend.

    key     = the seed's low and high 32-bit words
    counter = (index mod 2**32, index // 2**32 + 2**16 * (dimension // 2))
    word    = output word (dimension mod 2) >> 8   (24 bits)
    u       = word / 2**24                     (exact in float32)

A discrete dimension (a list of choices, or an integer range) maps a word
to a position by counting thresholds (`positions`): integer comparisons,
so host and devices agree exactly. A float range maps `u` linearly or
logarithmically (`scaled`), in float32 on the devices.
"""
from __future__ import annotations

import jax.numpy as jnp

BITS = 24  # uniform resolution: exact in float32
DIMENSION_SHIFT = 16  # configuration indices stay below 2**48
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
PARITY = 0x1BD11BDA  # Threefry's key-schedule constant


def threefry2x32(xp, k0, k1, x0, x1):
    """Threefry-2x32-20 of counters (x0, x1) under key (k0, k1): two uint32 words."""
    u32 = lambda v: xp.asarray(v, dtype=xp.uint32)  # noqa: E731
    keys = (u32(k0), u32(k1), u32(k0) ^ u32(k1) ^ u32(PARITY))
    x0, x1 = u32(x0) + keys[0], u32(x1) + keys[1]
    for i in range(20):
        r = ROTATIONS[i % 8]
        x0 = x0 + x1
        x1 = ((x1 << u32(r)) | (x1 >> u32(32 - r))) ^ x0
        if i % 4 == 3:  # key injection every four rounds
            s = (i + 1) // 4
            x0 = x0 + keys[s % 3]
            x1 = x1 + keys[(s + 1) % 3] + u32(s)
    return x0, x1


def words(xp, seed_words, dimension: int, low, high):
    """24-bit draws (uint32) of one dimension at configuration indices given
    as low and high 32-bit words. Dimensions 2k and 2k + 1 take the two
    output words of one block (the compiler computes it once)."""
    counter_high = xp.asarray(high, dtype=xp.uint32) + \
        xp.asarray((dimension // 2) << DIMENSION_SHIFT, dtype=xp.uint32)
    block = threefry2x32(xp, seed_words[0], seed_words[1], low, counter_high)
    return block[dimension % 2] >> xp.asarray(32 - BITS, dtype=xp.uint32)


def positions(xp, drawn, thresholds):
    """Positions in a discrete dimension: how many thresholds (ascending
    24-bit words) each draw reaches."""
    return xp.searchsorted(thresholds, xp.asarray(drawn, dtype=thresholds.dtype), side="right")


def scaled(drawn, low, span, log: bool):
    """A float range's values, float32, from 24-bit draws (on the devices):
    `low + u span`, or `low exp(u span)` on a log scale (`span` the log of
    the range's ratio: the exponent stays small, so float32 keeps the value
    within a few ulps of the float64 formula's)."""
    u = drawn.astype(jnp.float32) * jnp.float32(2.0 ** -BITS)
    return jnp.float32(low) * jnp.exp(u * jnp.float32(span)) if log else jnp.float32(low) + u * jnp.float32(span)


def chunk_indices(start_low, start_high, last_offset, count: int):
    """(low, high) words of the configuration indices of a chunk's `count`
    positions, from its first index's words; positions past `last_offset`
    (the chunk's last index minus its first) repeat the last index, as a
    padded chunk does. 32-bit arithmetic with a carry, so indices past 2**32
    need no 64-bit integers."""
    step = jnp.minimum(jnp.arange(count, dtype=jnp.uint32), last_offset)
    low = start_low + step
    return low, start_high + (low < start_low).astype(jnp.uint32)
