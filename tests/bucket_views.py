"""Gradient buckets per strategy (DESIGN 2.3), over comm slots in backward order.

Every function returns the bytes each slot sends, [S, C]: a bucket's bytes sit
on the slot of its last layer in backward order, every other slot sends 0.
They are views of `kernels.channel.policy_channel`, which forms the buckets and
runs the FIFO channel in one scan.
"""
from __future__ import annotations

import jax.numpy as jnp

from kernels.channel import policy_channel
from kernels.collectives import CollectiveCost
from kernels.codes import BSP, FUSION, MGWFBP


def bucket_bytes(strategy, slot_bytes, slot_ready, threshold, latency, per_byte):
    """Bytes sent per slot [S, C] for each configuration's strategy code."""
    return policy_channel(strategy, threshold, slot_bytes, slot_ready, CollectiveCost(latency, per_byte, None),
                          want_sent=True)[1]


def _code(code, like):
    return jnp.full(like.shape[1:], code, jnp.int32)


def bsp_buckets(slot_bytes):
    """One bucket of everything, released by the last slot (layer 1)."""
    zeros = jnp.zeros(slot_bytes.shape[1:], slot_bytes.dtype)
    return bucket_bytes(_code(BSP, slot_bytes), slot_bytes, jnp.zeros_like(slot_bytes), zeros, zeros, zeros)


def fusion_buckets(slot_bytes, threshold):
    """Fill a bucket in backward order until it holds >= threshold bytes."""
    zeros = jnp.zeros(slot_bytes.shape[1:], slot_bytes.dtype)
    return bucket_bytes(_code(FUSION, slot_bytes), slot_bytes, jnp.zeros_like(slot_bytes), threshold, zeros, zeros)


def mgwfbp_buckets(slot_bytes, slot_ready, latency, per_byte):
    """MG-WFBP merging; `slot_ready` is each slot's gradient-ready time from
    the start of the backward pass."""
    return bucket_bytes(_code(MGWFBP, slot_bytes), slot_bytes, slot_ready, jnp.zeros_like(latency),
                        latency, per_byte)
