"""The communication channel: bucket formation and FIFO all-reduces, in one scan.

Slots are walked in backward order. Each slot adds its layer's gradient bytes
to the open bucket; the configuration's strategy decides whether the bucket
is sent now (DESIGN 2.3):
  bsp     only at the last slot (layer 1): one bucket after the backward pass;
  wfbp    at every slot: one bucket per layer;
  fusion  once the bucket holds >= `threshold` bytes (and at the last slot);
  mgwfbp  unless the next slot should be merged in (Shi, Chu and Li, INFOCOM
          2019): merge when the bucket's all-reduce could not start before the
          next gradient is ready, or when the wait for it is shorter than the
          startup latency a merge saves.
A sent bucket starts when both it and the channel are ready and lasts
`kernels.collectives.piecewise_time` of its bytes: latency + per_byte * bytes,
plus the protocol steps of the link model when given. Times are measured from
the start of the backward pass, so the same scan serves every unrolled
iteration. For fitting, `temperature` makes the start time a smooth max and
`width` the protocol steps smooth (`kernels.smooth`).

Per-slot inputs are [S, C] or [S, 1] (broadcast over configurations): the
sweep passes per-slot constants and per-configuration scale factors.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.codes import FUSION, MGWFBP, WFBP
from kernels.collectives import piecewise_time
from kernels.smooth import maximum


def comm_channel(strategy, slot_bytes, slot_ready, threshold, latency, per_byte,
                 bytes_scale=1.0, ready_scale=1.0, return_sent=True, steps=None,
                 temperature=None, width=None):
    """(sent [S, C] or None, channel finish [C], channel busy time [C]).

    `sent` holds each bucket's bytes on the slot that releases it, 0 elsewhere;
    the channel finish is when the last all-reduce ends (0 if none is sent).
    Slot bytes and ready times are multiplied by `bytes_scale` and
    `ready_scale` ([C] or scalars) inside the scan, so per-slot constants
    never need to be materialised per configuration. `steps`
    (`kernels.collectives.Steps`) adds the link's protocol regimes to the
    affine cost; MG-WFBP's merge rule keeps the affine `latency` as the
    startup latency a merge saves.
    """
    num_slots = slot_bytes.shape[0]
    shape = jnp.broadcast_shapes(slot_bytes.shape[1:], slot_ready.shape[1:], jnp.shape(latency),
                                 jnp.shape(strategy), jnp.shape(bytes_scale), jnp.shape(ready_scale),
                                 jnp.shape(per_byte), jnp.shape(steps.breaks)[1:] if steps is not None else ())
    dtype = slot_bytes.dtype
    next_ready = jnp.concatenate([slot_ready[1:], slot_ready[-1:]], axis=0)
    is_last = jnp.arange(num_slots) == num_slots - 1

    # The strategy rules as loop-invariant thresholds, so the scan body is the
    # same few vector operations for every strategy:
    #   send = last | wfbp | held >= fusion threshold | next wait >= mgwfbp threshold.
    inf = jnp.array(jnp.inf, dtype)
    always = strategy == WFBP
    fill_threshold = jnp.where(strategy == FUSION, threshold, inf)
    # mgwfbp sends when the next gradient's wait w is >= latency and w > 0; the
    # smallest normal number stands in for "> 0" when the latency is zero.
    tiny = jnp.array(jnp.finfo(dtype).tiny, dtype)
    wait_threshold = jnp.where(strategy == MGWFBP, jnp.maximum(latency, tiny), inf)
    # bsp is the case where none of the three fires: only the last slot sends.

    def step(carry, xs):
        held, free, busy = carry
        add, ready, ready_next, last = xs
        held = held + add * bytes_scale
        start = maximum(ready * ready_scale, free, temperature)
        send = (always | last) | (held >= fill_threshold) | (ready_next * ready_scale - start >= wait_threshold)
        cost = jnp.where(send & (held > 0), piecewise_time(held, latency, per_byte, steps, width), 0.0)
        free = jnp.where(send, start + cost, free)
        sent = jnp.where(send, held, 0.0)
        return (held - sent, free, busy + cost), (sent if return_sent else None)

    zeros = jnp.zeros(shape, dtype)
    (_, finish, busy), sent = jax.lax.scan(step, (zeros, zeros, zeros),
                                           (slot_bytes, slot_ready, next_ready, is_last))
    return sent, finish, busy
