"""Gradient buckets per strategy (DESIGN 2.3), over comm slots in backward order.

Every function returns the bytes each slot sends, [S, C]: a bucket's bytes sit
on the slot of its last layer in backward order, every other slot sends 0.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.codes import BSP, FUSION, MGWFBP


def bsp_buckets(slot_bytes):
    """One bucket of everything, released by the last slot (layer 1)."""
    last = jnp.arange(slot_bytes.shape[0])[:, None] == slot_bytes.shape[0] - 1
    return jnp.where(last, slot_bytes.sum(0, keepdims=True), 0.0)


def fusion_buckets(slot_bytes, threshold):
    """Fill a bucket in backward order until it holds >= threshold bytes."""
    last = slot_bytes.shape[0] - 1

    def step(held, xs):
        index, add = xs
        held = held + add
        send = (held >= threshold) | (index == last)
        return jnp.where(send, 0.0, held), jnp.where(send, held, 0.0)

    _, sent = jax.lax.scan(step, jnp.zeros_like(threshold), (jnp.arange(last + 1), slot_bytes))
    return sent


def mgwfbp_buckets(slot_bytes, slot_ready, latency, per_byte):
    """MG-WFBP merging (Shi, Chu and Li, INFOCOM 2019).

    Walking slots in backward order with the open bucket ending at slot s: its
    all-reduce could start at max(ready_s, channel free). Merge slot s+1 into
    it when that start is not before ready_{s+1} (no idle link is lost), or
    when the wait ready_{s+1} - start is shorter than the startup latency a
    merge saves; otherwise send it. `slot_ready` is each slot's gradient-ready
    time measured from the start of the backward pass.
    """
    last = slot_bytes.shape[0] - 1
    next_ready = jnp.concatenate([slot_ready[1:], slot_ready[-1:]], axis=0)

    def step(carry, xs):
        held, free = carry
        index, add, ready, ready_next = xs
        held = held + add
        start = jnp.maximum(ready, free)
        merge = (start >= ready_next) | (ready_next - start < latency)
        send = (index == last) | ~merge
        cost = jnp.where(held > 0, latency + per_byte * held, 0.0)
        free = jnp.where(send, start + cost, free)
        return (jnp.where(send, 0.0, held), free), jnp.where(send, held, 0.0)

    init = (jnp.zeros_like(latency), jnp.zeros_like(latency))
    _, sent = jax.lax.scan(step, init, (jnp.arange(last + 1), slot_bytes, slot_ready, next_ready))
    return sent


def bucket_bytes(strategy, slot_bytes, slot_ready, threshold, latency, per_byte):
    """Bytes sent per slot [S, C] for each configuration's strategy code."""
    sent = slot_bytes  # wfbp: every slot sends its own layer's gradients
    sent = jnp.where(strategy == BSP, bsp_buckets(slot_bytes), sent)
    sent = jnp.where(strategy == FUSION, fusion_buckets(slot_bytes, threshold), sent)
    sent = jnp.where(strategy == MGWFBP, mgwfbp_buckets(slot_bytes, slot_ready, latency, per_byte), sent)
    return sent
