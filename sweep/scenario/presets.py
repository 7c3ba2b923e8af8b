"""Framework presets: named bundles of strategy, algorithm and input settings.

A preset only fills keys the scenario leaves unset; keys given explicitly win.
Each entry says which framework behaviour it stands for and why, after the
frameworks studied in the DAG paper (Shi, Wang, Chu and Li, ICPADS 2018) and
their successors.
"""
from __future__ import annotations

import dataclasses

# What a configuration without `strategy`, `algorithm` or a preset runs.
DEFAULT_STRATEGY = "wfbp"
DEFAULT_ALGORITHM = "ring"


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    strategy: str
    algorithm: str
    bucket_bytes: int
    prefetch: bool
    why: str
    # Set by some presets only (None: the key's own default). `zero` and
    # `update` are structural keys: such a preset is its own DAG shape.
    zero: int | None = None
    update: str | None = None
    optimizer: str | None = None
    precision: str | None = None


MiB = 1 << 20

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("caffe-mpi", "wfbp", "ring", 25 * MiB, True,
           "Caffe-MPI all-reduces each layer's gradient with NCCL as soon as its backward ends "
           "(wait-free backpropagation); a prefetch thread reads the next batch."),
    Preset("cntk", "bsp", "ring", 25 * MiB, True,
           "CNTK aggregates all gradients with an MPI all-reduce after the backward pass, "
           "so communication does not overlap computation; its reader prefetches."),
    Preset("mxnet", "wfbp", "ps", 25 * MiB, True,
           "MXNet's KVStore (dist_sync) pushes each layer's gradient to parameter servers as "
           "its backward ends and pulls the new weights; the data iterator prefetches."),
    Preset("tensorflow", "bsp", "ps", 25 * MiB, True,
           "TensorFlow 1.x with SyncReplicasOptimizer computes all gradients, then pushes them "
           "to parameter servers over gRPC; tf.data prefetches."),
    Preset("horovod", "fusion", "ring", 64 * MiB, True,
           "Horovod fuses ready tensors into buffers of up to HOROVOD_FUSION_THRESHOLD "
           "(64 MiB by default) and all-reduces them with NCCL's ring."),
    Preset("pytorch-ddp", "fusion", "ring", 25 * MiB, True,
           "PyTorch DistributedDataParallel groups gradients into 25 MiB buckets "
           "(bucket_cap_mb) in backward order and all-reduces each with NCCL."),
    Preset("byteps", "wfbp", "ps", 4 * MiB, True,
           "BytePS reduces inside the node, then pushes each tensor to servers as it "
           "becomes ready and pulls it back (per-tensor, priority scheduled)."),
    # ByteScheduler (Peng et al., SOSP 2019): tensors cut into partitions (`partition_bytes`) sent
    # frontmost layer first, at most `credit_bytes` unacknowledged; each layer is updated once its
    # gradient is in, and the next forward pass starts as soon as its first layers are.
    Preset("bytescheduler", "priority", "ring", 25 * MiB, True,
           "ByteScheduler over all-reduce (Horovod/NCCL): priority-scheduled partitions, layer-wise updates, "
           "so the next forward pass overlaps the tail of the communication.", update="layerwise"),
    Preset("bytescheduler-ps", "priority", "ps", 25 * MiB, True,
           "ByteScheduler over parameter servers (MXNet KVStore / BytePS): priority-scheduled push and pull "
           "of partitions, layer-wise updates.", update="layerwise"),
    # DeepSpeed's defaults (deepspeed.ai, "DeepSpeed Configuration JSON", zero_optimization):
    # reduce_bucket_size 5e8 elements (1e9 bytes of fp16 gradients), overlap_comm false
    # for stages 1 and 2, true for stage 3; trained with fp16/bf16 and Adam.
    Preset("deepspeed-zero1", "fusion", "ring", 1_000_000_000, True,
           "DeepSpeed ZeRO stage 1: optimizer states sharded; gradients reduce-scattered once backward ends "
           "(overlap_comm off by default), each GPU updates its shard, then the parameters are all-gathered.",
           zero=1, optimizer="adam", precision="mixed"),
    Preset("deepspeed-zero2", "fusion", "ring", 1_000_000_000, True,
           "DeepSpeed ZeRO stage 2: gradients sharded too, reduce-scattered bucket by bucket "
           "(reduce_bucket_size 5e8 elements) during backward; the updated shards are all-gathered.",
           zero=2, optimizer="adam", precision="mixed"),
    Preset("deepspeed-zero3", "fusion", "ring", 1_000_000_000, True,
           "DeepSpeed ZeRO stage 3: parameters sharded too, all-gathered before each layer's forward and "
           "backward (prefetched) and freed after; gradients reduce-scattered in 5e8-element buckets.",
           zero=3, optimizer="adam", precision="mixed"),
    Preset("pytorch-fsdp", "wfbp", "ring", 25 * MiB, True,
           "PyTorch FullyShardedDataParallel (FULL_SHARD): ZeRO-3 with each layer as its own unit: "
           "all-gather before its forward and backward (backward prefetch), reduce-scatter of its gradient "
           "as its backward ends; mixed precision and Adam as in typical use.",
           zero=3, optimizer="adam", precision="mixed"),
)}


# The structural keys a preset may set.
PRESET_STRUCTURE = ("zero", "update")


def preset_sets(name: str | None, key: str):
    """The value a preset gives a structural key of `PRESET_STRUCTURE` (None: it leaves it alone)."""
    return None if name is None else getattr(PRESETS[name], key)


def preset_zero(name: str | None) -> int | None:
    """The ZeRO stage a preset sets (None: it leaves `zero` alone)."""
    return preset_sets(name, "zero")
