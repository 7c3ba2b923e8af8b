"""The kernels' parameters: one typed pytree, `Params`.

Every field holds per-configuration values, configurations on the last axis
([C], or [1] when one value serves every configuration of a chunk). The
required fields are set for every configuration. The optional ones are None
unless a scenario (or a fit) sets them; a None field is an empty pytree
node, so jit specialises on which are set, and a kernel reading one takes
the richer model only when it is set: the alpha-beta link unless a link
extension is given, the sequential parameter server unless `ps_pipelined`,
MG-WFBP planning with the true costs unless `mgwfbp_alpha`, hard maxima
unless `max_temperature`, hard protocol steps unless `switch_width`.

Scenario keys map onto these fields in one table
(`sweep.scenario.parameter_table`), and `sweep.engine.params` builds a
`Params` for a block of configurations. A `Params` also reads as a mapping
of its set fields (`p["inter_bandwidth"]`, `"ps_pipelined" in p`,
`dict(p)`): the fit and the sensitivities address parameters by name.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Mapping
from typing import Any

import jax

Array = Any  # jax.Array or numpy array: [C], or [1] for one value for all


@dataclasses.dataclass(frozen=True, eq=False)
class Params(Mapping):
    # the cluster
    batch_size: Array  # samples per GPU per step
    nodes: Array
    gpus_per_node: Array
    workers: Array  # nodes x gpus_per_node
    log2_workers: Array  # ceil(log2(workers))
    servers: Array  # parameter servers
    # compute
    peak_flops: Array  # FLOP/s
    memory_bandwidth: Array  # bytes/s
    efficiency: Array  # fraction of peak at large batch
    b_half: Array  # batch at half the efficiency
    bwd_ratio: Array  # backward / forward work
    measured_throughput: Array  # samples/s of one GPU, 0: use the roofline
    update_bytes_per_param: Array  # bytes the update reads and writes per parameter
    grad_bytes: Array  # bytes per gradient value
    # links and input
    intra_alpha: Array  # s
    intra_bandwidth: Array  # bytes/s
    inter_alpha: Array  # s
    inter_bandwidth: Array  # bytes/s
    h2d_alpha: Array  # s
    h2d_bandwidth: Array  # bytes/s
    io_time_per_sample: Array  # s
    sample_bytes: Array  # bytes per input sample
    prefetch: Array  # 1: input of the next iteration overlaps this one
    # the framework (integer codes: kernels.codes)
    strategy: Array
    algorithm: Array
    bucket_bytes: Array  # fusion bucket size
    credit_bytes: Array  # priority strategy: bytes posted and unsent above which nothing more is posted
    # memory (`kernels.memory`)
    optimizer: Array  # integer code, kernels.codes.OPTIMIZERS
    precision: Array  # integer code, kernels.codes.PRECISIONS
    activation_checkpointing: Array  # 1: keep segment boundaries only
    gpu_memory: Array  # bytes
    # intra link model extensions (`kernels.collectives.LINK_FALLBACK` when None)
    intra_protocol_bytes: Array | None = None  # bytes
    intra_large_alpha: Array | None = None  # s
    intra_large_bandwidth: Array | None = None  # bytes/s
    intra_chunk_bytes: Array | None = None  # bytes per process
    intra_chunk_alpha: Array | None = None  # s
    intra_chunk_bandwidth: Array | None = None  # bytes/s
    intra_alpha_exponent: Array | None = None  # 1
    intra_large_alpha_exponent: Array | None = None  # 1
    intra_bandwidth_exponent: Array | None = None  # 1
    # inter link model extensions (`kernels.collectives.LINK_FALLBACK` when None)
    inter_protocol_bytes: Array | None = None  # bytes
    inter_large_alpha: Array | None = None  # s
    inter_large_bandwidth: Array | None = None  # bytes/s
    inter_chunk_bytes: Array | None = None  # bytes per process
    inter_chunk_alpha: Array | None = None  # s
    inter_chunk_bandwidth: Array | None = None  # bytes/s
    inter_alpha_exponent: Array | None = None  # 1
    inter_large_alpha_exponent: Array | None = None  # 1
    inter_bandwidth_exponent: Array | None = None  # 1
    # per-call software overhead [s], and the wire's line rate [bytes/s] (`kernels.collectives.wire_floors`)
    intra_overhead: Array | None = None
    inter_overhead: Array | None = None
    intra_line_rate: Array | None = None
    inter_line_rate: Array | None = None
    ps_pipelined: Array | None = None  # 1: partitions stream through both ps phases (BytePS)
    ps_bandwidth: Array | None = None  # bytes/s per node of the push/pull phase; <= 0: the inter link's
    ps_imbalance: Array | None = None  # 1: the busiest server's bytes over an even share (>= 1)
    # set when a scenario may use algorithm "nccl" (`kernels.nccl`): 1 where its intra-node hops are PCIe, 0 NVLink
    nccl_pci: Array | None = None
    nccl_ll128: Array | None = None  # 1: LL128 may run (unset: 1); 0: NCCL's default off (GPUs without NVLink)
    nccl_ll_share: Array | None = None  # LL's share of the bandwidth (unset: NCCL's 1/4; at most 1/2)
    # mgwfbp as implemented (`kernels.channel`): the planner's all-reduce model (NaN alpha: the link's own
    # cost), and the fewest parameters a bucket is sent with
    mgwfbp_alpha: Array | None = None  # s
    mgwfbp_bandwidth: Array | None = None  # bytes/s
    mgwfbp_min_params: Array | None = None  # parameters
    task_floor: Array | None = None  # s: least time of a forward or backward task (unset: none)
    fuse_posted: Array | None = None  # 1: the priority channel sends all it has posted as one call (unset: 0)
    # fitting only: smooth-max temperature [s], smooth protocol steps [ln bytes]
    max_temperature: Array | None = None
    switch_width: Array | None = None

    @classmethod
    def of(cls, values: Mapping[str, Array]) -> Params:
        """A `Params` from a mapping of field names (a `Params` is returned as
        it is); a name that is not a field, or a missing required one, is a
        TypeError that names it."""
        if isinstance(values, Params):
            return values
        unknown = [name for name in values if name not in NAMES]
        if unknown:
            near = difflib.get_close_matches(unknown[0], NAMES, n=1)
            raise TypeError(f"unknown kernel parameter {unknown[0]!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
        missing = [name for name in REQUIRED if name not in values]
        if missing:
            raise TypeError(f"missing kernel parameter {missing[0]!r}")
        return cls(**values)

    def replace(self, **changes: Array | None) -> Params:
        """A copy with `changes` (None unsets an optional field)."""
        return dataclasses.replace(self, **changes)

    # A mapping of the fields that are set.
    def __getitem__(self, name: str) -> Array:
        value = getattr(self, name, None) if name in NAMES else None
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return (name for name in NAMES if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    # Mapping's __eq__ would compare arrays; identity is all a pytree node needs.
    __eq__ = object.__eq__
    __hash__ = object.__hash__


NAMES = tuple(f.name for f in dataclasses.fields(Params))
jax.tree_util.register_dataclass(Params, data_fields=list(NAMES), meta_fields=[])
REQUIRED = tuple(f.name for f in dataclasses.fields(Params) if f.default is dataclasses.MISSING)
OPTIONAL = tuple(name for name in NAMES if name not in REQUIRED)
CODES = ("strategy", "algorithm", "optimizer", "precision")  # integer codes (kernels.codes), int32
# The value that means "unset" for the optional fields a block of rows may set
# in some rows only (a fit concatenates rows: `sweep.fit.model` fills the rest
# with these, which the kernels read as the field's absence): sequential ps,
# its servers evenly loaded; mgwfbp planned with the true costs (NaN), no
# least bucket; NVLink hop ratios, LL128 allowed and LL at NCCL's quarter; no
# least task time; one partition a call on the priority channel.
UNSET = {"ps_pipelined": 0.0, "ps_imbalance": 1.0, "mgwfbp_alpha": float("nan"), "mgwfbp_bandwidth": float("nan"),
         "mgwfbp_min_params": 0.0, "nccl_pci": 0.0, "nccl_ll128": 1.0, "nccl_ll_share": 0.25, "task_floor": 0.0,
         "fuse_posted": 0.0}
