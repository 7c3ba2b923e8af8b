"""A priority channel: ByteScheduler's order (Peng et al., SOSP 2019; DESIGN 2.5).

Each slot's gradient is cut into n = ceil(bytes / partition_bytes) equal
partitions, all ready when the slot's backward is done. The scheduler posts
partitions to the channel, which sends them one at a time in posting order;
each lasts `kernels.collectives.piecewise_time` of its bytes. A partition is
posted at the first moment when
  - the bytes posted and not yet sent are below `credit` (a partition counts
    as sent from the moment it finishes), and
  - some partition is ready;
and the one posted is the ready partition of the frontmost layer (the
highest slot: slots are in backward order). Ties in time count as ready
and as sent.

With `fuse` (per configuration, 1), the channel sends, when it falls
free, every partition posted and not yet sent as one call, as Horovod's
tensor fusion does with what ByteScheduler hands it within a cycle: a
partition posted while the last call waits for the channel (the call's
start at or after the posting) joins it, the call then lasts the time of
all its bytes, and its partitions all finish when it does (the credit
reads those finishes). `sending` stays each slot's time if sent alone.

The walk takes one step per partition, `steps` of them (a static bound;
steps past the last partition change nothing), configurations on the minor
axis. Decisions are hard (no smoothing): a fit differentiates through the
durations of the order that resulted.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.broadcast import lead
from kernels.collectives import piecewise_time


def priority_channel(slot_bytes, ready, cost, partition_bytes: float, credit, steps: int, width=None,
                     want_steps: bool = False, fuse=None):
    """(finish [S, C], busy [C], sending time per slot [S, C], steps).

    `slot_bytes` and `ready` are [S, C] (or broadcast): each slot's gradient
    bytes and the time it is ready. A slot's finish is when its last
    partition has been sent (a slot without bytes finishes when it is
    ready); busy is the channel's total sending time. With `want_steps`,
    `steps` is (slot [steps, C], start [steps, C], finish [steps, C]) of
    each partition in the order posted (slot -1: past the last partition;
    a fused partition's start and finish are its call's), else None.
    """
    latency, per_byte, protocol = cost
    shape = jnp.broadcast_shapes(slot_bytes.shape, ready.shape, jnp.shape(latency), jnp.shape(per_byte),
                                 jnp.shape(credit), jnp.shape(protocol.breaks)[1:] if protocol is not None else (),
                                 (1, *jnp.shape(fuse)) if fuse is not None else ())
    dtype = jnp.result_type(slot_bytes, ready, latency)
    slot_bytes = jnp.broadcast_to(slot_bytes, shape)
    ready = jnp.broadcast_to(ready, shape)
    num_slots = shape[0]
    count = jnp.ceil(slot_bytes / partition_bytes)
    size = slot_bytes / jnp.maximum(count, 1.0)
    duration = jnp.where(count > 0, piecewise_time(size, latency, per_byte, protocol, width), 0.0)
    slot = jnp.arange(num_slots, dtype=jnp.int32)[:, None]
    inf = jnp.array(jnp.inf, dtype)

    fusing = jnp.zeros(shape[1:], bool) if fuse is None else jnp.broadcast_to(lead(fuse, 1) > 0, shape[1:])

    def call_time(nbytes):  # [C]: one call of `nbytes`
        return jnp.where(nbytes > 0, piecewise_time(nbytes[None], latency, per_byte, protocol, width)[0], 0.0)

    def step(carry, j):
        remaining, finish, channel, posted, history, busy, call = carry
        sent_before, finish_before, call_of = history  # per step: bytes posted before it, its finish, its call
        call_start, call_bytes, call_id, slot_call = call  # the last call; the call of each slot's last partition
        # Credit: the latest finish among posted partitions that must be sent
        # before the bytes posted after them fall below the credit.
        pending_span = posted[None] - sent_before
        release = jnp.max(jnp.where(pending_span >= lead(credit, 2), finish_before, -inf), axis=0)
        waiting = remaining > 0
        earliest = jnp.min(jnp.where(waiting, ready, inf), axis=0)
        decide = jnp.maximum(release, earliest)
        chosen = jnp.max(jnp.where(waiting & (ready <= decide[None]), slot, -1), axis=0)
        active = chosen >= 0
        pick = (slot == chosen[None]) & active[None]
        d = jnp.sum(jnp.where(pick, duration, 0.0), axis=0)
        s = jnp.sum(jnp.where(pick, size, 0.0), axis=0)
        # Fused: join the last call where it has not started when this partition is posted.
        join = fusing & active & (call_id >= 0) & (call_start >= decide)
        start = jnp.where(join, call_start, jnp.maximum(decide, channel))
        fused_bytes = jnp.where(join, call_bytes, 0.0) + s
        end = start + jnp.where(join, call_time(fused_bytes), d)
        grown = jnp.where(join, end - channel, d)  # what the channel's busy time gains
        cid = jnp.where(join, call_id, j)
        call_of = call_of.at[j].set(jnp.where(active, cid, -1))
        members = (call_of == cid[None]) & active[None]
        slot_call = jnp.where(pick, cid[None], slot_call)
        finish = jnp.where((slot_call == cid[None]) & active[None], end[None], finish)  # slots whose last is in it
        history = (sent_before.at[j].set(jnp.where(active, posted, 0.0)), jnp.where(members, end[None], finish_before),
                   call_of)
        call = (jnp.where(active, start, call_start), jnp.where(active, fused_bytes, call_bytes),
                jnp.where(active, cid, call_id), slot_call)
        channel = jnp.where(active, end, channel)
        posted = posted + jnp.where(active, s, 0.0)
        record = (chosen, start) if want_steps else None
        return (remaining - pick.astype(dtype), finish, channel, posted, history, busy + jnp.where(active, grown, 0.0),
                call), record

    columns = shape[1:]
    history = (jnp.zeros((steps, *columns), dtype), jnp.full((steps, *columns), -inf, dtype),
               jnp.full((steps, *columns), -1, jnp.int32))
    call = (jnp.full(columns, -inf, dtype), jnp.zeros(columns, dtype), jnp.full(columns, -1, jnp.int32),
            jnp.full(shape, -1, jnp.int32))
    init = (count, ready, jnp.full(columns, -inf, dtype), jnp.zeros(columns, dtype), history,
            jnp.zeros(columns, dtype), call)
    (_, finish, _, _, (_, ends, _), busy, _), record = jax.lax.scan(step, init, jnp.arange(steps, dtype=jnp.int32))
    if want_steps:  # each partition's finish is its call's, known once the call stops growing
        record = (record[0], record[1], ends)
    return finish, busy, count * duration, record
