"""Plain-Python re-implementations of the model's rules, used only by tests.

Written from DESIGN 2.2 / 2.3 and the documented rules (kernels/buckets.py and
kernels/collectives.py docstrings), never by calling the code under test.
Everything here is float64 / exact Python arithmetic, one configuration at a time.
"""
from __future__ import annotations


# --------------------------------------------------------------------------- buckets


def wfbp_rule(slot_bytes):
    """Every slot sends its own gradients."""
    return list(slot_bytes)


def bsp_rule(slot_bytes):
    """One bucket of everything, sent from the last slot in backward order."""
    out = [0.0] * len(slot_bytes)
    out[-1] = sum(slot_bytes)
    return out


def fusion_rule(slot_bytes, threshold):
    """Fill a bucket in backward order until it holds >= threshold; the last slot flushes."""
    out = [0.0] * len(slot_bytes)
    held = 0.0
    for s, b in enumerate(slot_bytes):
        held += b
        if held >= threshold or s == len(slot_bytes) - 1:
            out[s] = held
            held = 0.0
    return out


def mgwfbp_rule(slot_bytes, slot_ready, latency, per_byte):
    """The MG-WFBP merge rule as the kernels/buckets.py docstring states it.

    The open bucket ends at slot s; its all-reduce could start at
    max(ready_s, time the channel is free). Merge slot s+1 into it if that start
    is not before ready_{s+1}, or if the wait ready_{s+1} - start is shorter than
    the startup latency; otherwise send it (costing latency + per_byte * bytes,
    nothing when empty). The last slot always sends.
    """
    n = len(slot_bytes)
    out = [0.0] * n
    held = 0.0
    free = 0.0
    for s in range(n):
        held += slot_bytes[s]
        start = max(slot_ready[s], free)
        if s == n - 1:
            send = True
        else:
            nxt = slot_ready[s + 1]
            merge = start >= nxt or (nxt - start) < latency
            send = not merge
        if send:
            cost = latency + per_byte * held if held > 0 else 0.0
            free = start + cost
            out[s] = held
            held = 0.0
    return out


# ----------------------------------------------------------------------- collectives


def ceil_log2(p: int) -> int:
    """ceil(log2 p) for an integer p >= 1, exactly (no floating point)."""
    return (p - 1).bit_length()


def allreduce_closed_form(algorithm, m, nodes, gpus, a_i, bw_i, a_e, bw_e, servers=None, pci=False):
    """Seconds for one all-reduce of m bytes (DESIGN 2.2), float64. `pci`:
    nccl's intra-node hops are PCIe (else NVLink)."""
    n, g = nodes, gpus
    p = n * g
    if p <= 1 or m <= 0:
        return 0.0
    s = n if servers is None else servers
    a, bw = (a_e, bw_e) if n > 1 else (a_i, bw_i)
    if algorithm == "ring":
        return 2 * (p - 1) * a + 2 * (p - 1) / p * m / bw
    if algorithm == "rhd":
        return 2 * ceil_log2(p) * a + 2 * (p - 1) / p * m / bw
    if algorithm == "tree":
        return 2 * ceil_log2(p) * (a + m / bw)
    if algorithm == "hierarchical":
        return (2 * (g - 1) * a_i + 2 * (g - 1) / g * m / bw_i
                + 2 * (n - 1) * a_e + 2 * (n - 1) / n * (m / g) / bw_e)
    if algorithm == "ps":
        # kernels/collectives.py docstring: intra reduce-scatter + all-gather, and a
        # push and a pull of M bytes per node to S servers on machines of their own.
        return (2 * (g - 1) * a_i + 2 * (g - 1) / g * m / bw_i
                + 2 * (a_e + max(1.0, n / s) * m / bw_e))
    if algorithm == "nccl":
        return nccl_time(m, n, g, a_i, a_e, bw, pci)
    raise ValueError(algorithm)


def nccl_time(m, n, g, a_i, a_e, bw, pci, only=None, ll128=True, ll_share=0.25):
    """The fastest of NCCL's LL, LL128 and Simple ring all-reduces, from the
    tables in NVIDIA/nccl src/graph/tuning.cc (kernels/nccl.py's docstring):
    each protocol priced on its own and the least taken (`only`: that
    protocol's time, 0 LL, 1 LL128, 2 Simple); without `ll128` the least of
    LL and Simple, LL at `ll_share` of the bandwidth."""
    p = n * g
    hops_inter = 2 * (n - 1)
    hops_intra = 2 * (p - 1) - hops_inter
    intra_us = (1.0, 2.5, 5.7) if pci else (0.47, 1.9, 3.4)
    net_us = (2.7, 4.0, 9.6)
    times = []
    for q, (base_us, share) in enumerate(((6.6, ll_share), (14.0, 0.92), (8.4, 1.0))):
        hop_intra = a_i * intra_us[q] / intra_us[0] * (1.8 if q == 0 and n > 1 else 1.0)
        hop_inter = a_e * net_us[q] / net_us[0]
        latency = base_us * 1e-6 + hops_intra * hop_intra + hops_inter * hop_inter
        if q == 2 and n > 1:
            latency *= 1.9
        times.append(latency + 2 * (p - 1) / p * m / (bw * share))
    if not ll128:
        times[1] = float("inf")
    return min(times) if only is None else times[only]


# ------------------------------------------------------------------------- DAG paths


def all_path_lengths(num_tasks, edges, durations):
    """Length (sum of durations) of every source-to-sink path of a small DAG,
    by exhaustive enumeration: [(length, [task ids])]."""
    succs = {t: [] for t in range(num_tasks)}
    has_pred = [False] * num_tasks
    for src, dst in edges:
        succs[src].append(dst)
        has_pred[dst] = True
    out = []

    def walk(t, path, length):
        path = path + [t]
        length = length + durations[t]
        if not succs[t]:
            out.append((length, path))
        for s in succs[t]:
            walk(s, path, length)

    for t in range(num_tasks):
        if not has_pred[t]:
            walk(t, [], 0.0)
    return out

