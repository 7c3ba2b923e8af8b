"""How unevenly BytePS spreads one fused gradient tensor over its servers.

BytePS cuts every tensor it pushes into partitions of at most
`BYTEPS_PARTITION_BYTES` (4,096,000 in ddl-benchmarks' byteps/launch.sh)
and sends each partition to one server: a tensor's partitions take
consecutive keys (its declaration index << 16 plus the partition's index,
byteps/common/operations.cc), which its key rules deal to the servers in
turn (`key * 9973 % S` in its first releases; the default djb2 hash of the
key's digits, modulo a power-of-two S up to 32, is the digit sum plus 5381,
so consecutive keys go to consecutive servers but where a digit carries:
ResNet-50 on 8 servers 1.28x by djb2, 1.27x dealt in turn). BSP-PS pushes every
gradient as one fused tensor, so with P partitions on S servers the busiest
server holds ceil(P/S) of them: ResNet-50's 102 MB is 25 partitions, 4 on
the busiest of 8 servers against 3.1 on average. That server sets the pace
of push and pull: its bytes over an even share (`fused_imbalance`) scale
ps's push/pull volume (scenario key `ps.imbalance`).

Per-tensor pushes (WFBP-PS, ByteScheduler-PS) were tried with the djb2
rule over the optimizer's tensors (ddl-benchmarks
byteps/byteps_distributed_optimizer.py declares them in sorted name order)
and dropped: it put ResNet-50's busiest of 8 servers at 1.6x an even
share, and the 10GbE rows grow far less (README).
"""
from __future__ import annotations

import functools

from sweep.graph.zoo import get_model

PARTITION_BYTES = 4_096_000  # ddl-benchmarks byteps/launch.sh
GRAD_BYTES = 4  # float32 gradients


@functools.lru_cache(maxsize=None)
def fused_imbalance(model_name: str, servers: int, partition_bytes: int = PARTITION_BYTES) -> float:
    """The busiest server's bytes over an even share when a model's gradients
    go as one tensor, its partitions dealt to `servers` servers in turn."""
    total = GRAD_BYTES * get_model(model_name).params
    load = [0] * servers
    for index, start in enumerate(range(0, total, partition_bytes)):
        load[index % servers] += min(partition_bytes, total - start)
    return max(load) * servers / total
