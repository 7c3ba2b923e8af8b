"""All-reduce cost models (DESIGN 2.2), piecewise affine in the message size M.

Each link is the DESIGN 2.2 alpha-beta link plus, optionally, the behaviour of
real MPI and NCCL collectives (all defaults make these no-ops, leaving the
closed forms of DESIGN 2.2 exactly):

- a protocol switch: all-reduces of more than `protocol_bytes` use a second
  (`large_alpha`, `large_bandwidth`) pair (eager -> rendezvous, or the switch
  from a latency-optimal to a bandwidth-optimal algorithm);
- a chunk switch: once each process's share M/k of the message exceeds
  `chunk_bytes`, a third (`chunk_alpha`, `chunk_bandwidth`) pair applies
  (the per-step message of a ring outgrows the transport's pipeline unit);
- scaling with the k processes a phase spans: latency per step times
  (k/2)**alpha_exponent (`large_alpha_exponent` above the protocol switch),
  bandwidth per process times (k/2)**-bandwidth_exponent (congestion). Two
  processes see the link's own figures.

An algorithm runs one phase per link it uses. A phase with k processes,
`steps` latency terms and `volume` bytes sent per byte of its message m costs
    steps * alpha_r * (k/2)**ea_r + volume * m * (k/2)**eb / bandwidth_r
in regime r (1 below the protocol switch, 2 above it, 3 above the chunk switch,
which takes precedence). Flat algorithms run one phase on the intra-node link
on one node and on the inter-node link (which bounds them) on several:
  ring  2(P-1) steps, volume 2(P-1)/P;  rhd  2 ceil(log2 P), 2(P-1)/P;
  tree  2 ceil(log2 P) steps, volume 2 ceil(log2 P).
`hierarchical` is an intra ring on M (k = g) plus an inter ring on M/g
(k = n). `ps` is BytePS-style: reduce-scatter inside the node, every node
pushes its M bytes to S servers (on machines of their own) and pulls them
back, so each server moves n*M/S bytes per direction, then an all-gather
inside the node: the intra phase of `hierarchical` plus an inter phase of 2
steps and volume 2 max(1, n/S) (k = n, chunk M/S). `ps_imbalance` (scenario
key `ps.imbalance`, >= 1) is the busiest server's bytes over that even
share: it sets the pace, volume 2 max(1, imbalance n/S) (BytePS sends each
partition to one server, so a tensor of few partitions cannot spread
evenly). With `ps_pipelined`
(scenario key `ps.pipelined`, as BytePS streams tensor partitions through
local reduce, push and pull) the two phases overlap: their latencies add and
the slower per-byte cost sets the pace, lat_a + lat_b + M max(pb_a, pb_b).
`nccl` is NCCL's ring with its three protocols (`kernels.nccl`): a flat
ring's bytes on the slowest link, each protocol's latency by NCCL's tuning
tables from the links' alphas, the fastest protocol for each message; the
link extension fields do not apply to it (the wire floor does).
`ps_bandwidth` (scenario key `ps.bandwidth`), when set, is the push/pull
phase's bandwidth in every regime: a parameter server's transport need not
reach what the collective library reaches on the same link.

Physical bounds. Bandwidth never grows with the number of processes: a
negative `bandwidth_exponent` acts as 0. When `p` carries the links' line
rates (`intra_line_rate`, `inter_line_rate` [bytes/s per direction; for the
inter link, per node]: `sweep.fit.calibrate` adds them, a sweep may), no regime's
per-byte cost falls below the wire's: every phase pays at least its share of
`wire_lower_bound`,
  one node      2(g-1)/g * M / line_rate_intra   (each GPU sends and receives
                                                  (g-1)/g of M twice);
  several nodes 2(n-1)/n * M / line_rate_inter   (each node's NIC, whatever
                                                  the algorithm; Patarasuk and
                                                  Yuan 2009), and for ps with
                max(1, n/S) * M / line_rate_inter (every worker sends and
                                                  receives M, each server n*M/S,
                                                  the busiest that times
                                                  `ps_imbalance`);
hierarchical adds its intra phase's bound. Only the inter phase of
`hierarchical` (g rings of M/g sharing a node's NIC) can reach these floors
with bandwidths at or below the line rate.

A cost is a `CollectiveCost`: the affine part below every switch
(`latency`, `per_byte`) and `Steps`: at each break b (a message size), the
cost gains `latency + per_byte * M` for every M > b. P = 1 or M = 0 costs
nothing. Sources: Thakur, Rabenseifner and Gropp (2005); Patarasuk and Yuan
(2009); Open MPI's tuned all-reduce decision (recursive doubling below
10,000 bytes, ring above) for the protocol switch.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from kernels.broadcast import lead
from kernels.codes import HIERARCHICAL, NCCL, PS, RING, TREE  # rhd is the flat default: log-depth steps, ring volume
from kernels.nccl import lower_envelope, protocol_lines
from kernels.parameters import Params

# What an unset extension field of a link is (one table for the kernels,
# `sweep.engine.params` and `sweep.fit.calibrate`): a number, or the name of the field
# whose value it takes (always one listed before it). Every default leaves
# the alpha-beta link exactly.
LINK_FALLBACK = {
    "protocol_bytes": float("inf"), "large_alpha": "alpha", "large_bandwidth": "bandwidth",
    "chunk_bytes": float("inf"), "chunk_alpha": "large_alpha", "chunk_bandwidth": "large_bandwidth",
    "alpha_exponent": 0.0, "large_alpha_exponent": "alpha_exponent", "bandwidth_exponent": 0.0,
}
LINK_FIELDS = ("alpha", "bandwidth", *LINK_FALLBACK)
# Optional per-link fields read only when present in `p` (`{table}_{field}`):
#   overhead [s]: software cost of one all-reduce call, once per collective
#   whatever the process count (framework and launch: Horovod/PyTorch, NCCL
#   kernel launch, the TCP stack's per-call work); the flat link's on one
#   level, the inter link's whenever the collective spans nodes.
EXTRA_LINK_FIELDS = ("overhead",)
# A link's bandwidth fields, one per regime (`ps_bandwidth` replaces them all for ps's push/pull;
# `sweep.fit.optimise` bounds them by the line rate).
BANDWIDTHS = ("bandwidth", "large_bandwidth", "chunk_bandwidth")


class Steps(NamedTuple):
    """Cost added above each break: [K, C] arrays (break +inf: never)."""
    breaks: jax.Array
    latency: jax.Array
    per_byte: jax.Array


class CollectiveCost(NamedTuple):
    latency: jax.Array  # [C]
    per_byte: jax.Array  # [C]
    steps: Steps | None  # None: affine


def _or(value, default):
    """An optional parameter's value, or `default` when it is not set."""
    return default if value is None else value


def link(p: Params, table: str) -> dict:
    """The fields of one link (`intra` or `inter`) from the parameters,
    missing extension fields by `LINK_FALLBACK`."""
    out = {"alpha": p[f"{table}_alpha"], "bandwidth": p[f"{table}_bandwidth"]}
    for name, fallback in LINK_FALLBACK.items():
        value = p.get(f"{table}_{name}")
        out[name] = value if value is not None else out[fallback] if isinstance(fallback, str) else fallback
    return out


def line_rates(p):
    """(intra, inter) line rates from `p`, or None when `p` has none."""
    if p.intra_line_rate is None and p.inter_line_rate is None:
        return None
    return (_or(p.intra_line_rate, jnp.inf), _or(p.inter_line_rate, jnp.inf))


def busiest_server_share(p):
    """Per byte of M, what ps's busiest server receives (and sends) from the
    n nodes: n/S with an even spread, times `ps_imbalance` when set."""
    return p.nodes / p.servers * _or(p.ps_imbalance, 1.0)


def wire_floors(p):
    """Per byte of M, the wire's least cost of an all-reduce [C]: the intra
    share (one node, or the intra phase of two-level algorithms) and the inter
    share (several nodes), or None without line rates (module docstring)."""
    rates = line_rates(p)
    if rates is None:
        return None
    n, g = p.nodes, p.gpus_per_node
    intra = 2.0 * (g - 1) / g / rates[0]
    all_reduce = 2.0 * (n - 1) / n / rates[1]
    ps = jnp.maximum(1.0, busiest_server_share(p)) / rates[1]
    inter = jnp.where(p.algorithm == PS, ps, all_reduce)
    return intra, jnp.where(n > 1, inter, 0.0)


def wire_lower_bound(p, message_bytes):
    """Seconds no all-reduce of `message_bytes` can beat on these links (needs
    line rates in `p`): on one node the intra share of `wire_floors`; on
    several the inter share (the NICs), plus the intra share for
    hierarchical and unpipelined ps, which run their phases in turn, or the
    larger of the two for pipelined ps."""
    p = Params.of(p)
    intra, inter = wire_floors(p)
    multi = p.nodes > 1
    algorithm = p.algorithm
    two_level = (algorithm == HIERARCHICAL) | (algorithm == PS)
    pipelined = jnp.asarray(_or(p.ps_pipelined, 0.0)) > 0  # an array: ~ is a logical not
    sequential = (algorithm == HIERARCHICAL) | ((algorithm == PS) & ~pipelined)
    several = jnp.where(sequential, intra + inter, jnp.where(two_level, jnp.maximum(intra, inter), inter))
    per_byte = jnp.where(multi, several, intra)
    nd = jnp.ndim(message_bytes)  # the [C] bound gains the leading axes of e.g. [M, C] bytes
    return jnp.where(lead(p.workers > 1, nd), lead(per_byte, nd) * message_bytes, 0.0)


def _select(cond, a: dict, b: dict) -> dict:
    return {k: jnp.where(cond, a[k], b[k]) for k in a}


def _phase(lk: dict, k, steps, volume, scale, chunk_divisor, floor=None):
    """(latency, per_byte, Steps with 2 breaks) of one phase, in terms of the
    all-reduce's M: the phase moves m = scale * M bytes, its chunk is
    m / chunk_divisor. `floor` [C]: the least per-byte cost of any regime."""
    half = k / 2.0
    lat = [steps * a * half ** e for a, e in ((lk["alpha"], lk["alpha_exponent"]),
                                              (lk["large_alpha"], lk["large_alpha_exponent"]),
                                              (lk["chunk_alpha"], lk["large_alpha_exponent"]))]
    # Bandwidth per process never grows with the processes: exponent >= 0.
    congestion = volume * scale * half ** jnp.maximum(lk["bandwidth_exponent"], 0.0)
    byte = [congestion / bw for bw in (lk["bandwidth"], lk["large_bandwidth"], lk["chunk_bandwidth"])]
    if floor is not None:
        byte = [jnp.maximum(b, floor) for b in byte]
    protocol = lk["protocol_bytes"] / scale
    chunk = lk["chunk_bytes"] * chunk_divisor / scale
    # Regime 3 takes precedence: if the chunk switch comes first, regime 2 never occurs.
    chunk_first = chunk <= protocol
    first = jnp.minimum(protocol, chunk)
    to_first = (jnp.where(chunk_first, lat[2], lat[1]) - lat[0], jnp.where(chunk_first, byte[2], byte[1]) - byte[0])
    second = jnp.where(chunk_first, jnp.inf, chunk)
    to_second = (jnp.where(chunk_first, 0.0, lat[2] - lat[1]), jnp.where(chunk_first, 0.0, byte[2] - byte[1]))
    return lat[0], byte[0], ((first, *to_first), (second, *to_second))


def _select_phase(cond, a, b):
    """Phase `a` where `cond`, else phase `b` (phases as `_phase` returns
    them; the one with fewer steps gains steps that never apply)."""
    never = (jnp.inf, 0.0, 0.0)
    count = max(len(a[2]), len(b[2]))
    steps_a, steps_b = (tuple(x[2]) + (never,) * (count - len(x[2])) for x in (a, b))
    return (jnp.where(cond, a[0], b[0]), jnp.where(cond, a[1], b[1]),
            tuple(tuple(jnp.where(cond, x, y) for x, y in zip(sa, sb)) for sa, sb in zip(steps_a, steps_b)))


def _nccl_phase(p, intra, inter, flat_per_byte, floor):
    """NCCL's ring with its three protocols (`kernels.nccl`), as a phase: a
    flat ring's bytes (`flat_per_byte`, on the slowest link), never below
    the wire's `floor`."""
    if floor is not None:
        flat_per_byte = jnp.maximum(flat_per_byte, floor)
    return lower_envelope(protocol_lines(p.nodes, p.workers, intra["alpha"], inter["alpha"], flat_per_byte,
                                         p.nccl_pci, p.nccl_ll128, p.nccl_ll_share))


def _pipelined(a, b):
    """Two phases with partitions streaming through both: the latencies add,
    the slower phase's per-byte cost sets the pace,
        lat_a(M) + lat_b(M) + M * max(per_byte_a(M), per_byte_b(M)),
    as an affine part and steps at the four breaks in ascending order."""
    breaks = jnp.sort(jnp.stack(jnp.broadcast_arrays(*[brk for phase in (a, b) for brk, _, _ in phase[2]])), axis=0)

    def at(phase, edge):  # the phase's (latency, per_byte) just above `edge`
        lat, byte = phase[0], phase[1]
        for brk, d_lat, d_byte in phase[2]:
            lat = lat + jnp.where(edge >= brk, d_lat, 0.0)
            byte = byte + jnp.where(edge >= brk, d_byte, 0.0)
        return lat, byte

    levels = [(a[0] + b[0], jnp.maximum(a[1], b[1]))]
    for k in range(breaks.shape[0]):
        (lat_a, byte_a), (lat_b, byte_b) = at(a, breaks[k]), at(b, breaks[k])
        levels.append((lat_a + lat_b, jnp.maximum(byte_a, byte_b)))
    steps = ([breaks[k] for k in range(breaks.shape[0])],
             [levels[k + 1][0] - levels[k][0] for k in range(breaks.shape[0])],
             [levels[k + 1][1] - levels[k][1] for k in range(breaks.shape[0])])
    return levels[0][0], levels[0][1], steps


def _two_phases(p):
    """(phase A, phase B, per-call overhead) of one all-reduce: A is the flat
    algorithm, or the intra phase of hierarchical and ps; B the inter phase
    of hierarchical (ring on M/g) and ps (push/pull to S servers), zero for
    flat algorithms. A phase is (latency, per_byte, ((break, latency, per_byte) x 2))."""
    n, g, workers, log2p = p.nodes, p.gpus_per_node, p.workers, p.log2_workers
    intra, inter = link(p, "intra"), link(p, "inter")
    multi_node = n > 1
    flat_link = _select(multi_node, inter, intra)
    share = (workers - 1) / workers
    algorithm = p.algorithm
    one = jnp.ones_like(workers)

    flat_steps = jnp.where(algorithm == RING, 2 * (workers - 1), 2 * log2p)
    flat_volume = jnp.where(algorithm == TREE, 2 * log2p, 2 * share)
    two_level = (algorithm == HIERARCHICAL) | (algorithm == PS)
    floors = wire_floors(p)
    floor_a = floor_b = None
    if floors is not None:  # a flat algorithm on several nodes is bounded by the nodes' NICs
        floor_a = jnp.where(two_level | ~multi_node, floors[0], floors[1])
        floor_b = floors[1]
    a = _phase(_select(two_level, intra, flat_link), jnp.where(two_level, g, workers),
               jnp.where(two_level, 2 * (g - 1), flat_steps),
               jnp.where(two_level, 2 * (g - 1) / g, flat_volume), one, jnp.where(two_level, g, workers), floor_a)
    if p.nccl_pci is not None:  # a scenario that may use NCCL's protocols
        # NCCL's ring on several nodes crosses intra edges too (with g > 1):
        # it runs at the slower of the two links, not at the inter link's.
        ring_bandwidth = jnp.where(multi_node & (g > 1), jnp.minimum(inter["bandwidth"], intra["bandwidth"]),
                                   flat_link["bandwidth"])
        nccl = _nccl_phase(p, intra, inter, 2 * share / ring_bandwidth, floor_a)
        a = _select_phase(algorithm == NCCL, nccl, a)
    is_ps = algorithm == PS
    if p.ps_bandwidth is not None:  # BytePS's push/pull at a rate of its own (every regime)
        own = is_ps & (p.ps_bandwidth > 0)
        inter = {**inter, **{f: jnp.where(own, p.ps_bandwidth, inter[f]) for f in BANDWIDTHS}}
    b = _phase(inter, n, jnp.where(is_ps, 2.0, 2 * (n - 1)),
               jnp.where(is_ps, 2 * jnp.maximum(1.0, busiest_server_share(p)), 2 * (n - 1) / n),
               jnp.where(is_ps, one, 1.0 / g), jnp.where(is_ps, p.servers, n), floor_b)
    on_b = jnp.where(two_level, 1.0, 0.0)
    b = (on_b * b[0], on_b * b[1], tuple((brk, on_b * lat, on_b * byte) for brk, lat, byte in b[2]))
    overhead = 0.0
    if p.inter_overhead is not None or p.intra_overhead is not None:
        overhead = jnp.where(multi_node, _or(p.inter_overhead, 0.0), _or(p.intra_overhead, 0.0))
    return a, b, overhead


def _has_extensions(p) -> bool:
    """Whether the cost may have steps: a link extension field is set, or NCCL's protocols may run."""
    return p.nccl_pci is not None or any(p.get(f"{table}_{name}") is not None
                                         for table in ("intra", "inter") for name in LINK_FIELDS[2:])


def _finish(p, latency, per_byte, breaks, step_lat, step_byte) -> CollectiveCost:
    """Zero on one worker; affine (no steps) with plain alpha-beta links,
    whose steps are all zero."""
    single = p.workers <= 1

    def zero(x):
        return jnp.where(single, 0.0, x)

    def stack(xs):  # parameters may be [1] (broadcasting) or [C]
        return jnp.stack(jnp.broadcast_arrays(*xs))

    if not _has_extensions(p):
        return CollectiveCost(zero(latency), zero(per_byte), None)
    return CollectiveCost(zero(latency), zero(per_byte),
                          Steps(stack(breaks), stack([zero(x) for x in step_lat]), stack([zero(x) for x in step_byte])))


def collective_cost(p, phases=None) -> CollectiveCost:
    """The piecewise cost of one all-reduce for every configuration; affine
    (no `steps`) when `p` holds none of the links' extension fields.
    `phases`: `_two_phases(p)` when the caller has it already."""
    p = Params.of(p)
    a, b, overhead = _two_phases(p) if phases is None else phases
    latency = a[0] + b[0] + overhead
    per_byte = a[1] + b[1]
    breaks, step_lat, step_byte = (list(x) for x in zip(*a[2], *b[2]))
    if p.ps_pipelined is not None:  # BytePS-style: partitions stream through both phases
        pipelined = (p.algorithm == PS) & (p.ps_pipelined > 0)
        lat_p, byte_p, steps_p = _pipelined(a, b)
        latency = jnp.where(pipelined, lat_p + overhead, latency)
        per_byte = jnp.where(pipelined, byte_p, per_byte)
        breaks = [jnp.where(pipelined, x, y) for x, y in zip(steps_p[0], breaks)]
        step_lat = [jnp.where(pipelined, x, y) for x, y in zip(steps_p[1], step_lat)]
        step_byte = [jnp.where(pipelined, x, y) for x, y in zip(steps_p[2], step_byte)]
    return _finish(p, latency, per_byte, breaks, step_lat, step_byte)


def scaled_cost(cost: CollectiveCost, factor) -> CollectiveCost:
    """`cost` with every latency and per-byte term times `factor` (breaks kept)."""
    steps = None if cost.steps is None else Steps(cost.steps.breaks, cost.steps.latency * factor,
                                                  cost.steps.per_byte * factor)
    return CollectiveCost(cost.latency * factor, cost.per_byte * factor, steps)


def stage_costs(p) -> dict:
    """Lazily evaluated costs of the collectives a DAG's comm tasks name
    (`sweep.graph.dag.COMM_COSTS`): the all-reduce; its reduce-scatter and
    all-gather halves (each half the steps and half the volume of the
    chosen algorithm); and the three pipelined stages of hierarchical
    all-reduce: intra reduce-scatter and all-gather (halves of phase A) and
    the inter all-reduce (phase B), which carries the per-call overhead."""
    p = Params.of(p)
    def phase(which: str) -> CollectiveCost:
        a, b, overhead = costs["phases"]
        ph, extra = (a, 0.0) if which == "a" else (b, overhead)
        return _finish(p, ph[0] + extra, ph[1], *(list(x) for x in zip(*ph[2])))

    # Each entry is built once, from the ones it needs, on first access.
    costs = _Lazy({
        "phases": lambda: _two_phases(p),
        "allreduce": lambda: collective_cost(p, costs["phases"]),
        "reduce_scatter": lambda: scaled_cost(costs["allreduce"], 0.5),
        "all_gather": lambda: scaled_cost(costs["allreduce"], 0.5),
        "intra_phase": lambda: phase("a"),
        "intra_reduce_scatter": lambda: scaled_cost(costs["intra_phase"], 0.5),
        "intra_all_gather": lambda: scaled_cost(costs["intra_phase"], 0.5),
        "inter_allreduce": lambda: phase("b"),
    })
    return costs


class _Lazy(dict):
    """A dict whose values are made on first access (tracing builds only what a program uses)."""

    def __init__(self, makers):
        super().__init__()
        self._makers = makers

    def __missing__(self, key):
        value = self[key] = self._makers[key]()
        return value


def allreduce_cost(p):
    """(latency [C], per_byte [C]): the affine cost below every protocol
    switch, which is the whole cost with the default (alpha-beta) links."""
    p = Params.of(p)
    cost = collective_cost(p)
    return cost.latency, cost.per_byte


def piecewise_time(message_bytes, latency, per_byte, steps: Steps | None = None, width=None):
    """latency + per_byte * M, plus each step's share above its break.

    `message_bytes` broadcasts against [C] (e.g. [S, C] or [S, 1]). With
    `width` (in ln bytes, [C]) each step turns on smoothly,
    sigmoid(ln(M / break) / width), instead of at the break: for fitting
    (a width of 0 is the hard step again).
    """
    nd = jnp.ndim(message_bytes)  # the [C] costs gain the leading axes of e.g. [S, C] bytes
    time = lead(latency, nd) + lead(per_byte, nd) * message_bytes
    if steps is None:
        return time
    if width is not None:
        width = lead(width, nd)
    for k in range(steps.breaks.shape[0]):
        extra = lead(steps.latency[k], nd) + lead(steps.per_byte[k], nd) * message_bytes
        brk = lead(steps.breaks[k], nd)
        above = message_bytes > brk
        if width is None:
            time = time + jnp.where(above, extra, 0.0)
        else:
            safe = jnp.maximum(message_bytes, 1.0)
            smooth = jax.nn.sigmoid((jnp.log(safe) - jnp.log(brk)) / jnp.where(width > 0, width, 1.0))
            time = time + extra * jnp.where(width > 0, smooth, above.astype(smooth.dtype))
    return time


def allreduce_time(message_bytes, latency, per_byte, steps: Steps | None = None, width=None):
    """Seconds for all-reduces of `message_bytes` (broadcasts against [C]);
    `steps` (from `collective_cost`) adds the protocol regimes."""
    return jnp.where(message_bytes > 0, piecewise_time(message_bytes, latency, per_byte, steps, width), 0.0)
