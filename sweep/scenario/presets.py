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
)}
