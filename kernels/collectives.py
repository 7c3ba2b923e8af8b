"""All-reduce cost models (DESIGN 2.2), each affine in the message size M.

`allreduce_cost` returns (latency, per_byte) so that one all-reduce of M > 0
bytes costs latency + per_byte * M; P = 1 or M = 0 costs nothing. Sources:
Thakur, Rabenseifner and Gropp (2005); Patarasuk and Yuan (2009).
"""
from __future__ import annotations

import jax.numpy as jnp

from kernels.codes import HIERARCHICAL, PS, RHD, RING, TREE


def allreduce_cost(p):
    """(latency [C], per_byte [C]) of one all-reduce for every configuration.

    Flat algorithms (ring, rhd, tree) run over the intra-node link on one node
    and are bounded by the inter-node link on several. `ps` is BytePS-style:
    reduce-scatter inside the node, every node pushes its M bytes to S servers
    (on machines of their own) and pulls them back, so each server moves
    n*M/S bytes per direction, then an all-gather inside the node:
      2(g-1) a_i + 2(g-1)/g M/bw_i + 2 (a_e + max(1, n/S) M/bw_e).
    """
    n, g, workers, log2p = p["nodes"], p["gpus_per_node"], p["workers"], p["log2_workers"]
    a_i, bw_i, a_e, bw_e = p["intra_alpha"], p["intra_bandwidth"], p["inter_alpha"], p["inter_bandwidth"]
    multi_node = n > 1
    alpha = jnp.where(multi_node, a_e, a_i)
    bw = jnp.where(multi_node, bw_e, bw_i)
    share = (workers - 1) / workers

    intra_lat = 2 * (g - 1) * a_i
    intra_byte = 2 * (g - 1) / g / bw_i
    candidates = {
        RING: (2 * (workers - 1) * alpha, 2 * share / bw),
        RHD: (2 * log2p * alpha, 2 * share / bw),
        TREE: (2 * log2p * alpha, 2 * log2p / bw),
        HIERARCHICAL: (intra_lat + 2 * (n - 1) * a_e, intra_byte + 2 * (n - 1) / n / g / bw_e),
        PS: (intra_lat + 2 * a_e, intra_byte + 2 * jnp.maximum(1.0, n / p["servers"]) / bw_e),
    }
    algorithm = p["algorithm"]
    latency = jnp.zeros_like(alpha)
    per_byte = jnp.zeros_like(alpha)
    for code, (lat, byte) in candidates.items():
        latency = jnp.where(algorithm == code, lat, latency)
        per_byte = jnp.where(algorithm == code, byte, per_byte)
    single = workers <= 1
    return jnp.where(single, 0.0, latency), jnp.where(single, 0.0, per_byte)


def allreduce_time(message_bytes, latency, per_byte):
    """Seconds for all-reduces of `message_bytes` (broadcasts against [C])."""
    return jnp.where(message_bytes > 0, latency + per_byte * message_bytes, 0.0)
