"""NCCL's ring all-reduce with its three protocols (`algorithm = "nccl"`).

NCCL runs an all-reduce with one of three protocols and picks, per call, the
one its tuning model says is fastest for the message (NVIDIA/nccl,
src/graph/tuning.cc, `ncclTopoTuneModel` and `ncclTopoGetAlgoTime`):
  LL      8-byte stores of 4 data + 4 flag bytes: the lowest latency, a
          quarter of the bus bandwidth;
  LL128   128-byte lines of 120 data bytes: 0.92 of the bandwidth, a higher
          latency;
  Simple  plain copies with fences: the whole bandwidth, the highest latency
          (times 1.9 on several nodes: NCCL's "plateau effect of ring").
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
move as in a flat ring: 2(P-1)/P of M per rank on the slowest link (the
inter link on several nodes), at the link's bandwidth times the protocol's
share (1/4, 0.92, 1). The time is the least of the three lines, which is a
piecewise-affine cost with at most two breaks: the same `Steps` as the link
model's protocol switches (`kernels.collectives`), so every kernel that
prices an all-reduce prices this one too.
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


def protocol_lines(nodes, workers, intra_alpha, inter_alpha, volume_per_byte, pci):
    """[(latency, per_byte)] of LL, LL128 and Simple for every configuration.
    `volume_per_byte`: seconds per byte of M at the full bandwidth (the flat
    ring's 2(P-1)/P over the slowest link's bandwidth, floored by the wire)."""
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
        lines.append((latency, volume_per_byte / SHARE[q]))
    return lines


def lower_envelope(lines):
    """The least of three lines (latency ascending, per_byte descending from
    LL to Simple) as (latency, per_byte, ((break, d_latency, d_per_byte) x 2)):
    LL up to its crossing with the next line that wins, then LL128 if it wins
    anywhere, then Simple."""
    (l1, b1), (l2, b2), (l3, b3) = lines

    def crossing(la, ba, lb, bb):  # where line b (higher latency, lower per_byte) starts to win
        gap = ba - bb
        return jnp.where(gap > 0, (lb - la) / jnp.where(gap > 0, gap, 1.0), jnp.inf)

    x13 = crossing(l1, b1, l3, b3)
    # LL128 wins somewhere iff it is below both others where they cross.
    middle = (l2 + b2 * jnp.where(jnp.isfinite(x13), x13, 0.0) < l1 + b1 * x13) & jnp.isfinite(x13)
    x12, x23 = crossing(l1, b1, l2, b2), crossing(l2, b2, l3, b3)
    first = (jnp.where(middle, x12, x13), jnp.where(middle, l2 - l1, l3 - l1), jnp.where(middle, b2 - b1, b3 - b1))
    second = (jnp.where(middle, x23, jnp.inf), jnp.where(middle, l3 - l2, 0.0), jnp.where(middle, b3 - b2, 0.0))
    return l1, b1, (first, second)
