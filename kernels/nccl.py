"""NCCL's ring all-reduce with its three protocols (`algorithm = "nccl"`).

NCCL runs an all-reduce with one of three protocols and picks, per call, the
one its tuning model says is fastest for the message (NVIDIA/nccl,
src/graph/tuning.cc, `ncclTopoTuneModel` and `ncclTopoGetAlgoTime`):
  LL      8-byte stores of 4 data + 4 flag bytes: the lowest latency, a
          quarter of the bus bandwidth;
  LL128   128-byte lines of 120 data bytes: 0.92 of the bandwidth, a higher
          latency;
  Simple  plain copies with fences: the whole bandwidth, the highest latency
          (times 1.9 on several nodes: NCCL's "plateau effect of ring";
          newer NCCL uses 1.4 on GPUs of compute capability 8.0 and up,
          kept at 1.9 here: README, nccl-tests).
A ring over P ranks on n nodes takes 2(P-1) steps, 2(n-1) of them between
nodes; a protocol's latency is its base plus one hop latency per step:
    lat_q = base_q + (2(P-1) - 2(n-1)) * hop_intra_q + 2(n-1) * hop_inter_q
(the intra hops of LL times 1.8 on several nodes, as NCCL has it). NCCL's
hop latencies, in us:
                   LL    LL128  Simple
    NVLink         0.47  1.9    3.4
    PCIe           1.0   2.5    5.7
    network        2.7   4.0    9.6
and base latencies 6.6, 14.0 and 8.4 us. Here a link's `alpha` is its LL hop
latency and the other protocols' hops keep NCCL's ratios to it, so a slower
network (a larger fitted alpha) slows every protocol alike; the intra hops
take the PCIe ratios where `nccl_pci` is 1, NVLink's elsewhere. The bytes
move as in a flat ring: 2(P-1)/P of M per rank on the slowest link (on
several nodes the slower of the inter and the intra link, whose edges the
ring crosses too; the inter link alone with one GPU per node), at the
link's bandwidth times the protocol's share (1/4, 0.92, 1). Two
optional per-configuration switches follow NCCL where its defaults differ
by machine: `ll128` 0 takes LL128 away (its line becomes Simple's: NCCL
enables LL128 by default only where GPUs of compute capability 7.0, 8.0,
9.0 or 10.0 meet over NVLink, tuning.cc), and `ll_share` replaces LL's
quarter (at most 1/2: each 8-byte line carries 4 data bytes, the rate
where the wire, not the GPUs' stores, limits LL). The time is
the least of the three lines, a piecewise-affine cost: the same `Steps` as
the link model's protocol switches (`kernels.collectives`), so every
kernel that prices an all-reduce prices this one too. NCCL's tree was
tried as three more lines, twice (its log-depth latency between nodes;
then also its two-node bandwidth, M per node on the network against the
ring's 2(P-1)/P M) and dropped: it made the out-of-sample errors worse
(README "Validation against measurements").
"""
from __future__ import annotations

import jax.numpy as jnp

US = 1e-6
BASE = (6.6 * US, 14.0 * US, 8.4 * US)  # LL, LL128, Simple
HOP_NVLINK = (0.47, 1.9, 3.4)
HOP_PCI = (1.0, 2.5, 5.7)
HOP_NET = (2.7, 4.0, 9.6)
LL_INTRA_SEVERAL_NODES = 1.8
SIMPLE_PLATEAU = 1.9
SHARE = (0.25, 0.92, 1.0)  # of the bandwidth


def protocol_lines(nodes, workers, intra_alpha, inter_alpha, volume_per_byte, pci, ll128=None, ll_share=None):
    """[(latency, per_byte)] of LL, LL128 and Simple for every configuration.
    `volume_per_byte`: seconds per byte of M at the full bandwidth (the flat
    ring's 2(P-1)/P over the slowest link's bandwidth, floored by the wire);
    `ll128` (1 or 0, unset: 1) whether LL128 may run, `ll_share` (unset:
    1/4) LL's share of the bandwidth."""
    several = nodes > 1
    inter_steps = jnp.where(several, 2.0 * (nodes - 1), 0.0)
    intra_steps = 2.0 * (workers - 1) - inter_steps
    lines = []
    for q in range(3):
        intra_ratio = jnp.where(pci > 0, HOP_PCI[q] / HOP_PCI[0], HOP_NVLINK[q] / HOP_NVLINK[0])
        hop_intra = intra_alpha * intra_ratio * (jnp.where(several, LL_INTRA_SEVERAL_NODES, 1.0) if q == 0 else 1.0)
        hop_inter = inter_alpha * (HOP_NET[q] / HOP_NET[0])
        latency = BASE[q] + intra_steps * hop_intra + inter_steps * hop_inter
        if q == 2:
            latency = latency * jnp.where(several, SIMPLE_PLATEAU, 1.0)
        share = SHARE[q] if q != 0 or ll_share is None else ll_share
        lines.append((latency, volume_per_byte / share))
    if ll128 is not None:  # LL128 off: its line is Simple's, which then never loses to it
        lines[1] = tuple(jnp.where(ll128 > 0, a, b) for a, b in zip(lines[1], lines[2]))
    return lines


def lower_envelope(lines):
    """The least of affine lines l_i + b_i * M over M > 0, as (latency,
    per_byte, ((break, d_latency, d_per_byte), ...)): one step per line.

    Line i is the least on the interval (lo_i, hi_i]: lo_i is where it
    passes the last steeper line, hi_i where the first shallower line passes
    it; a line tied in slope with a lower (or equal and earlier) one never
    is. The active line starting at 0 is the affine part; every other active
    line is a step at its lo_i whose increment is the line minus the active
    line that starts last before it."""
    n = len(lines)
    crossing = {}
    for i in range(n):
        for j in range(i + 1, n):
            (li, bi), (lj, bj) = lines[i], lines[j]
            gap = bi - bj
            crossing[i, j] = crossing[j, i] = jnp.where(gap != 0, (lj - li) / jnp.where(gap != 0, gap, 1.0), jnp.inf)
    lo, hi, active = [], [], []
    for i, (li, bi) in enumerate(lines):
        start, end, beaten = 0.0, jnp.inf, False
        for j, (lj, bj) in enumerate(lines):
            if j == i:
                continue
            start = jnp.where(bj > bi, jnp.maximum(start, crossing[i, j]), start)
            end = jnp.where(bj < bi, jnp.minimum(end, crossing[i, j]), end)
            beaten = beaten | ((bj == bi) & ((lj < li) | ((lj == li) & (j < i))))
        lo.append(start)
        hi.append(end)
        active.append(~beaten & (start < end))
    first = [a & (start == 0) for a, start in zip(active, lo)]
    latency = sum(jnp.where(f, li, 0.0) for f, (li, _) in zip(first, lines))
    per_byte = sum(jnp.where(f, bi, 0.0) for f, (_, bi) in zip(first, lines))
    steps = []
    for i, (li, bi) in enumerate(lines):
        starts = active[i] & (lo[i] > 0)
        # The line before: the active one starting last before this one (intervals
        # are disjoint and ordered by their starts; no float equality needed).
        prev_lo, prev_l, prev_b = -jnp.inf, 0.0, 0.0
        for j, (lj, bj) in enumerate(lines):
            if j != i:
                later = active[j] & (lo[j] < lo[i]) & (lo[j] > prev_lo)
                prev_lo, prev_l, prev_b = (jnp.where(later, lo[j], prev_lo), jnp.where(later, lj, prev_l),
                                           jnp.where(later, bj, prev_b))
        steps.append((jnp.where(starts, lo[i], jnp.inf), jnp.where(starts, li - prev_l, 0.0),
                      jnp.where(starts, bi - prev_b, 0.0)))
    return latency, per_byte, tuple(steps)
