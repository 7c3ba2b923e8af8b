"""A policy channel: bucket formation and FIFO collectives, in one scan.

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
With a `Planner`, mgwfbp decides as its implementation does (ddl-benchmarks,
mgwfbp/hv_distributed_optimizer.py): the buckets are planned before training
by simulating the channel with the planner's own all-reduce model, alpha +
per_byte * bytes (a table per process count there, not the link's true
cost), and a bucket of fewer than `min_bytes` is never sent alone (that code
merges tensors of under 8,192 parameters); the planned buckets then run on
the true link. The planner's channel is a second clock in the same scan.
A sent bucket starts when both it and the channel are ready and lasts
`kernels.collectives.piecewise_time` of its bytes: latency + per_byte * bytes,
plus the protocol steps of the link model when given. `kernels.program`
passes times relative to a per-configuration base (max-plus is
shift-invariant), so per-slot constants stay constants. For fitting, `temperature` makes the start time a smooth max and
`width` the protocol steps smooth (`kernels.smooth`).

Per-slot inputs are [S, C] or [S, 1] (broadcast over configurations): the
sweep passes per-slot constants and per-configuration scale factors.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from kernels.codes import FUSION, MGWFBP, WFBP
from kernels.collectives import piecewise_time
from kernels.smooth import later


class Planner(NamedTuple):
    """How mgwfbp plans its buckets, per configuration ([C] or scalars):
    the planner's all-reduce model `alpha` + `per_byte` * bytes (alpha NaN:
    plan with the true cost, as without a planner), and the fewest bytes a
    bucket is sent with (`min_bytes`, 0: any)."""
    alpha: jax.Array
    per_byte: jax.Array
    min_bytes: jax.Array


def policy_channel(strategy, threshold, slot_bytes, ready, cost, *, ready_scale=1.0, bytes_scale=1.0,
                   want_slots=False, want_sent=False, want_durations=False, temperature=None, width=None,
                   fixed_buckets=False, planner: Planner | None = None):
    """(finish [S, C] or None, sent [S, C] or None, channel finish [C], busy
    time [C], each slot's seconds on the channel [S, C] or None), the
    optional ones as `want_slots`, `want_sent` and `want_durations` ask.

    `slot_bytes` [S, 1] or [S, C] and `ready` [S, 1] or [S, C] are each
    slot's gradient bytes and the time its inputs are ready, multiplied by
    `bytes_scale` and `ready_scale` ([C] or scalars) inside the scan so that
    per-slot constants are never materialised per configuration. `cost` is a
    `kernels.collectives.CollectiveCost`. A slot's finish is when the
    channel is free after it (a slot that sends nothing takes no time: it
    finishes when it starts); `sent` holds each bucket's bytes on the slot
    that sends it, 0 elsewhere. With `fixed_buckets` (a static promise that
    every strategy is bsp or wfbp, whose buckets do not depend on timing)
    and only the channel finish wanted, the channel has a closed form.
    `planner`: mgwfbp's buckets as its implementation plans them (module
    docstring); its decisions are discrete and carry no gradient.
    """
    latency, per_byte, steps = cost
    if fixed_buckets and temperature is None and not (want_slots or want_sent or want_durations):
        return (None, None, *fixed_bucket_channel(strategy, slot_bytes, ready, latency, per_byte,
                                                  bytes_scale, ready_scale, steps, width), None)
    num_slots = slot_bytes.shape[0]
    shape = jnp.broadcast_shapes(slot_bytes.shape[1:], ready.shape[1:], jnp.shape(latency),
                                 jnp.shape(strategy), jnp.shape(bytes_scale), jnp.shape(ready_scale),
                                 jnp.shape(per_byte), jnp.shape(threshold),
                                 jnp.shape(steps.breaks)[1:] if steps is not None else (),
                                 *(jnp.shape(x) for x in (planner or ())))
    dtype = jnp.result_type(slot_bytes, ready, latency)
    next_ready = jnp.concatenate([ready[1:], ready[-1:]], axis=0)
    is_last = jnp.arange(num_slots) == num_slots - 1
    carry, step = channel_step(strategy, threshold, cost, shape, dtype, ready_scale=ready_scale,
                               bytes_scale=bytes_scale, temperature=temperature, width=width, planner=planner)

    def scan_step(carry, xs):
        carry, (finish, sent, duration) = step(carry, *xs)
        return carry, tuple(x if wanted else None for x, wanted in ((finish, want_slots), (sent, want_sent),
                                                                     (duration, want_durations)))

    (_, last, busy, *_), (finish, sent, durations) = jax.lax.scan(scan_step, carry,
                                                                  (slot_bytes, ready, next_ready, is_last))
    return finish, sent, last, busy, durations


def channel_step(strategy, threshold, cost, shape, dtype, *, ready_scale=1.0, bytes_scale=1.0, temperature=None,
                 width=None, planner: Planner | None = None, fixed_buckets: bool = False):
    """(initial carry, step) of the channel: `step(carry, add, ready_now,
    ready_next, last)` takes one slot (its gradient bytes and input time
    before scaling, the next slot's input time, and whether it is the last)
    to (carry, (finish, sent, seconds on the channel)). The carry starts with (bytes held, time the
    channel is free, busy time). `policy_channel` scans it; an unrolled
    program (`kernels.straight`) calls it slot by slot. `cost` None: free
    communication (every bucket takes no time). With `fixed_buckets`
    (every strategy bsp or wfbp) the fusion and mgwfbp rules, which never
    fire then, are left out of the step."""
    latency, per_byte, steps = (0.0, 0.0, None) if cost is None else cost
    if fixed_buckets:
        planner = None  # it plans mgwfbp's buckets only
    # The strategy rules as loop-invariant thresholds, so the step is the
    # same few vector operations for every strategy:
    #   send = last | wfbp | held >= fusion threshold | next wait >= mgwfbp threshold.
    inf = jnp.array(jnp.inf, dtype)
    always = strategy == WFBP
    fill_threshold = jnp.where(strategy == FUSION, threshold, inf)
    # mgwfbp sends when the next gradient's wait w is >= latency and w > 0; the
    # smallest normal number stands in for "> 0" when the latency is zero.
    tiny = jnp.array(jnp.finfo(dtype).tiny, dtype)
    is_mgwfbp = strategy == MGWFBP
    if planner is None:
        wait_threshold = jnp.where(is_mgwfbp, jnp.maximum(latency, tiny), inf)
    else:
        planned = ~jnp.isnan(planner.alpha)  # else the planner's clock is the true one
        plan_alpha = jax.lax.stop_gradient(jnp.where(planned, planner.alpha, 0.0))
        plan_per_byte = jax.lax.stop_gradient(jnp.where(planned, planner.per_byte, 0.0))
        wait_threshold = jnp.where(is_mgwfbp, jnp.maximum(jnp.where(planned, plan_alpha, latency), tiny), inf)
        min_bytes = jnp.where(is_mgwfbp, planner.min_bytes, 0.0)
    # bsp is the case where none of the three fires: only the last slot sends.

    def step(carry, add, ready_now, ready_next, last):
        held, free, busy, *plan = carry  # plan: the planner's channel free time, with a planner
        held = held + add * bytes_scale
        start = later(ready_now * ready_scale, free, temperature)
        send = always | last
        if not fixed_buckets:
            if planner is None:
                wait_ok = ready_next * ready_scale - start >= wait_threshold
            else:
                now = jax.lax.stop_gradient(ready_now * ready_scale)
                nxt = jax.lax.stop_gradient(ready_next * ready_scale)
                plan_start = jnp.where(planned, jnp.maximum(now, plan[0]), jax.lax.stop_gradient(start))
                wait_ok = (nxt - plan_start >= wait_threshold) & (jax.lax.stop_gradient(held) >= min_bytes)
            send = send | (held >= fill_threshold) | wait_ok
        sent = jnp.where(send, held, 0.0)
        if cost is None:  # free communication: nothing to compute for the duration
            duration, finish = 0.0, start
        else:
            duration = jnp.where(send & (held > 0), piecewise_time(held, latency, per_byte, steps, width), 0.0)
            finish = start + duration
        if planner is not None:
            plan = [jax.lax.stop_gradient(plan_start + jnp.where(send & (held > 0),
                                                                 plan_alpha + plan_per_byte * held, 0.0))]
        return (held - sent, finish, busy + duration, *plan), (finish, sent, duration)

    zeros = jnp.zeros(shape, dtype)
    plan = (jnp.full(shape, -inf, dtype),) if planner is not None else ()
    return (zeros, jnp.full(shape, -inf), zeros, *plan), step


def fixed_bucket_channel(strategy, slot_bytes, ready, latency, per_byte, bytes_scale=1.0, ready_scale=1.0,
                         steps=None, width=None):
    """(channel finish [C], busy time [C]) for bsp and wfbp in closed form.

    wfbp sends every slot: the FIFO recurrence c_s = max(c_{s-1}, r_s) + d_s
    unrolls to c = max_s (r_s + sum_{j >= s} d_j). With an affine cost (no
    `steps`), d_j = latency + per_byte * bytes_j for non-empty slots and the
    suffix sums are per-slot constants: a running maximum of affine terms,
    one carry instead of the general scan's three. With `steps` (protocol
    regimes, NCCL's protocols) d_j is piecewise in the bytes and its suffix
    sums are not constants: one backward scan carries the suffix sum and the
    running maximum. bsp sends one bucket of everything from the last slot,
    which starts once every slot's input is ready.
    """
    # A scan, not a reduction over [S, C] (which does not fuse on the CPU) or
    # an unrolled chain (which makes XLA's compile explode for deep models).
    shape = jnp.broadcast_shapes(ready.shape[1:], jnp.shape(latency), jnp.shape(per_byte),
                                 jnp.shape(bytes_scale), jnp.shape(ready_scale))
    dtype = jnp.result_type(latency, ready_scale)
    if steps is None:
        nonempty = (slot_bytes > 0).astype(slot_bytes.dtype)
        count_after = jnp.cumsum(nonempty[::-1], axis=0)[::-1]
        bytes_after = jnp.cumsum(slot_bytes[::-1], axis=0)[::-1]

        def running_max(best, xs):
            ready_now, count, nbytes = xs
            return jnp.maximum(best, ready_now * ready_scale + latency * count + per_byte * bytes_scale * nbytes), None

        wfbp_finish, _ = jax.lax.scan(running_max, jnp.full(shape, -jnp.inf, dtype), (ready, count_after, bytes_after))
        total = bytes_after[0] * bytes_scale
        wfbp_busy = latency * count_after[0] + per_byte * total
    else:
        def suffix(carry, xs):
            after, best = carry
            nbytes, ready_now = xs
            held = nbytes * bytes_scale
            after = after + jnp.where(held > 0, piecewise_time(held, latency, per_byte, steps, width), 0.0)
            return (after, jnp.maximum(best, ready_now * ready_scale + after)), None

        start = (jnp.zeros(shape, dtype), jnp.full(shape, -jnp.inf, dtype))
        (wfbp_busy, wfbp_finish), _ = jax.lax.scan(suffix, start, (slot_bytes, ready), reverse=True)
        total = jnp.sum(slot_bytes, axis=0) * bytes_scale
    bsp_busy = jnp.where(total > 0, piecewise_time(total, latency, per_byte, steps, width), 0.0)
    is_wfbp = strategy == WFBP
    latest = jnp.max(ready, axis=0) * ready_scale  # ready_scale >= 0
    finish = jnp.where(is_wfbp, wfbp_finish, latest + bsp_busy)
    return finish, jnp.where(is_wfbp, wfbp_busy, bsp_busy)
