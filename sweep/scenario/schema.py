"""Every scenario key: its type, bounds, default, units and meaning (DESIGN 4).

Keys are canonical dotted names. A table given by a bare string (`gpu =
"a100"`, `inter = "ib-edr"`) stands for its `name` field. A default of None
means "derived": from the preset, the catalog entry, or the model.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from kernels.codes import ALGORITHMS, OPTIMIZERS, PRECISIONS, STRATEGIES
from sweep.scenario import catalog
from sweep.scenario import presets
from sweep.graph import zoo
from sweep.graph.compiler import DEFAULT_PARTITION_BYTES
from sweep.graph.dag import UPDATES
from sweep.errors import SpecError, closest

KEYS_HELP = "README 'Scenario files' for every key"


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    kind: type  # int, float, str or bool
    default: object
    units: str
    long_name: str
    minimum: float | None = None  # inclusive unless `positive`
    positive: bool = False  # strictly > 0
    maximum: float | None = None
    choices: Callable[[], tuple[str, ...]] | None = None
    required: bool = False


# Bounds. The kernels compute in float32 (integers exact up to 2**24), so
# every value must be representable there and leave headroom for products;
# beyond that, physics: no link is slower than a byte per second or waits an
# hour to start, no device does a zettaFLOP/s. Values outside are input
# errors, never silent infinities, wraps or perfect scores.
FLOAT32_MAX = 3.4028234663852886e38
EXACT_INT = 2**24  # largest range of integers float32 holds exactly
MAX_WORKERS = EXACT_INT  # nodes x gpus_per_node
MAX_SECONDS = 3600.0  # a latency or per-sample time above an hour is a typo
MIN_BANDWIDTH, MAX_BANDWIDTH = 1.0, 1e18  # bytes/s: a byte per second to an exabyte per second
MAX_BYTES = 1e18  # message sizes, buckets, samples
MAX_EXPONENT = 4.0  # (k/2)**e over up to 2**24 processes stays finite in float32


def _bandwidth(name: str, units: str, long_name: str) -> Key:
    return Key(name, float, None, units, long_name, minimum=MIN_BANDWIDTH, maximum=MAX_BANDWIDTH)


def _latency(name: str, long_name: str) -> Key:
    return Key(name, float, None, "s", long_name, minimum=0.0, maximum=MAX_SECONDS)


def _exponent(name: str, long_name: str) -> Key:
    return Key(name, float, None, "1", long_name, minimum=-MAX_EXPONENT, maximum=MAX_EXPONENT)


def _link_keys(table: str, what: str, default: str, collective: bool = True) -> list[Key]:
    keys = [
        Key(f"{table}.name", str, default, "", f"{what} link", choices=lambda: tuple(catalog.LINKS)),
        _latency(f"{table}.alpha", f"{what} link latency"),
        _bandwidth(f"{table}.bandwidth", "bytes/s", f"{what} link bandwidth"),
    ]
    if not collective:
        return keys
    # The link model's extensions (kernels/collectives.py); unset, each is a no-op.
    return keys + [
        Key(f"{table}.protocol_bytes", float, None, "bytes",
            f"{what} all-reduce size above which the large-message pair applies (unset: never)", positive=True,
            maximum=MAX_BYTES),
        _latency(f"{table}.large_alpha", f"{what} latency above protocol_bytes (unset: alpha)"),
        _bandwidth(f"{table}.large_bandwidth", "bytes/s", f"{what} bandwidth above protocol_bytes (unset: bandwidth)"),
        Key(f"{table}.chunk_bytes", float, None, "bytes",
            f"{what} per-process share M/k above which the chunk pair applies (unset: never)", positive=True,
            maximum=MAX_BYTES),
        _latency(f"{table}.chunk_alpha", f"{what} latency above chunk_bytes (unset: large_alpha)"),
        _bandwidth(f"{table}.chunk_bandwidth", "bytes/s", f"{what} bandwidth above chunk_bytes (unset: large_bandwidth)"),
        _exponent(f"{table}.alpha_exponent", f"{what} latency per step scales as (k/2)**this with k processes (unset: 0)"),
        _exponent(f"{table}.large_alpha_exponent", f"{what} alpha_exponent above protocol_bytes (unset: alpha_exponent)"),
        _exponent(f"{table}.bandwidth_exponent",
                  f"{what} bandwidth per process scales as (k/2)**-this with k processes (unset: 0)"),
        Key(f"{table}.overhead", float, None, "s",
            f"{what} software overhead of one all-reduce call, once per collective whatever the "
            "process count (unset: 0)", minimum=0.0, maximum=3600.0),
        Key(f"{table}.line_rate", float, None, "bytes/s",
            f"{what} line rate per direction (per node for inter): no all-reduce is faster than its wire "
            "lower bound at this rate, and a fit keeps every bandwidth of the link below it (unset: the "
            "catalog entry's, raised to any bandwidth the scenario gives)", minimum=1.0, maximum=1e18),
    ]


KEYS: dict[str, Key] = {k.name: k for k in [
    Key("model", str, None, "", "DNN model: a zoo name, \"transformer\", or a model file (.csv, .json)",
        choices=lambda: zoo.MODEL_NAMES + (zoo.TRANSFORMER,), required=True),
    # The parametric GPT-style decoder (`model = "transformer"`, sweep.graph.zoo.decoder).
    Key("transformer.layers", int, None, "", "decoder blocks", positive=True, maximum=4096),
    Key("transformer.hidden", int, None, "", "hidden size", positive=True, maximum=1 << 20),
    Key("transformer.heads", int, None, "", "attention heads", positive=True, maximum=4096),
    Key("transformer.ffn", int, None, "", "MLP width (unset: 4 x hidden)", positive=True, maximum=1 << 22),
    Key("transformer.vocab", int, None, "tokens", "vocabulary size (unset: GPT-2's 50,257)", positive=True,
        maximum=1 << 24),
    Key("batch_size", int, None, "samples", "per-GPU batch size", positive=True, maximum=EXACT_INT, required=True),
    Key("seq_len", int, None, "tokens", "sequence length (transformers)", positive=True, maximum=EXACT_INT),
    Key("nodes", int, 1, "", "nodes", positive=True, maximum=MAX_WORKERS),
    Key("gpus_per_node", int, 1, "", "GPUs per node", positive=True, maximum=MAX_WORKERS),
    Key("gpu.name", str, "v100", "", "GPU", choices=lambda: tuple(catalog.GPUS)),
    Key("gpu.peak_flops", float, None, "FLOP/s", "GPU peak FP32 rate", minimum=1.0, maximum=1e21),
    Key("gpu.memory", float, None, "bytes", "GPU memory (fits_in_memory compares memory_per_gpu with it)",
        positive=True, maximum=1e18),
    _bandwidth("gpu.memory_bandwidth", "bytes/s", "GPU memory bandwidth"),
    Key("strategy", str, None, "", "gradient communication strategy", choices=lambda: STRATEGIES),
    Key("algorithm", str, None, "", "all-reduce algorithm", choices=lambda: ALGORITHMS),
    Key("bucket_bytes", int, None, "bytes", "fusion bucket size", positive=True, maximum=MAX_BYTES),
    # MG-WFBP as implemented (ddl-benchmarks mgwfbp/hv_distributed_optimizer.py): its buckets are
    # planned before training with the implementation's own all-reduce model, alpha + bytes / bandwidth,
    # and tensors smaller than a floor always merge into the next (kernels.channel).
    _latency("mgwfbp.alpha", "mgwfbp: latency of the planner's all-reduce model (unset: the link's own cost)"),
    _bandwidth("mgwfbp.bandwidth", "bytes/s",
               "mgwfbp: bandwidth of the planner's all-reduce model (with mgwfbp.alpha)"),
    Key("mgwfbp.min_params", float, None, "parameters",
        "mgwfbp: a bucket holding fewer parameters than this is never sent alone (unset: 0)", minimum=0.0,
        maximum=EXACT_INT),
    # ByteScheduler's defaults (its ByteCore: BYTESCHEDULER_PARTITION = 1,000,000 and
    # BYTESCHEDULER_CREDIT = 4,000,000 parameters, float32).
    Key("partition_bytes", int, DEFAULT_PARTITION_BYTES, "bytes", "priority strategy: largest partition a tensor is cut into",
        positive=True, maximum=MAX_BYTES),
    Key("credit_bytes", float, 16_000_000.0, "bytes",
        "priority strategy: bytes posted and not yet sent above which no further partition is posted",
        positive=True, maximum=MAX_BYTES),
    Key("fuse_posted", bool, None, "",
        "priority strategy: the channel, when it falls free, sends every partition posted and not yet sent as "
        "one call (Horovod's tensor fusion under ByteScheduler; unset: one partition a call)"),
    Key("preset", str, None, "", "framework preset", choices=lambda: tuple(presets.PRESETS)),
    Key("iterations", int, 3, "", "unrolled iterations K", minimum=2, maximum=64),
    Key("grad_bytes", int, 4, "bytes", "bytes per gradient element", positive=True, maximum=64),
    *_link_keys("intra", "intra-node", "pcie3"),
    *_link_keys("inter", "inter-node", "10gbe"),
    *_link_keys("h2d", "host-to-device", "pcie3", collective=False),
    Key("compute.efficiency", float, 0.6, "1", "peak efficiency at large batch", positive=True, maximum=1.0),
    Key("compute.b_half", float, 8.0, "samples", "batch of half efficiency", minimum=0.0, maximum=EXACT_INT),
    Key("compute.bwd_ratio", float, 2.0, "1", "backward/forward time ratio", positive=True, maximum=1e3),
    Key("compute.measured_throughput", float, None, "samples/s", "measured single-GPU throughput", positive=True,
        maximum=1e12),
    Key("compute.trace", str, None, "",
        "measured per-layer forward and backward times: CSV (layer, forward_time, backward_time) "
        "or PyTorch profiler Chrome trace JSON"),
    # A host-bound framework launches a task's kernels no faster than this, however little the task
    # computes: ByteScheduler's plugin polls in a Python thread that shares the interpreter with the
    # training loop (bytescheduler/pytorch/horovod.py), and ResNet-50's many light layers then wait for it.
    Key("compute.task_floor", float, None, "s",
        "least time of a forward or backward task (unset: none; a host-bound framework's launch cost)",
        minimum=0.0, maximum=MAX_SECONDS),
    Key("compute.update_bytes_per_param", float, 16.0, "bytes", "memory traffic of the update per parameter",
        positive=True, maximum=1e6),
    Key("io.time_per_sample", float, 1e-4, "s", "read and decode time per sample", minimum=0.0, maximum=MAX_SECONDS),
    Key("io.sample_bytes", int, None, "bytes", "bytes per sample copied to the GPU", positive=True, maximum=MAX_BYTES),
    Key("io.prefetch", bool, None, "", "input prefetch"),
    Key("ps.servers", int, None, "", "parameter servers", positive=True, maximum=MAX_WORKERS),
    _bandwidth("ps.bandwidth", "bytes/s",
               "ps: push/pull bandwidth per node, every regime (unset: the inter link's; at most twice its line "
               "rate, push and pull in the NIC's two directions)"),
    Key("ps.imbalance", float, None, "",
        "ps: the busiest server's bytes over an even share (unset: 1, every server moves n M / S); BytePS "
        "hashes each partition to one server", minimum=1.0, maximum=MAX_WORKERS),
    Key("ps.pipelined", bool, None, "",
        "ps phases overlap, as BytePS streams partitions (latencies add, the slower phase sets the pace)"),
    # NCCL's protocols where its defaults differ by machine (kernels/nccl.py).
    Key("nccl.ll128", bool, None, "",
        "nccl: LL128 may run (unset: true; NCCL's default only where GPUs of compute capability 7.0, 8.0, 9.0 or "
        "10.0 meet over NVLink)"),
    Key("nccl.ll_share", float, None, "",
        "nccl: LL's share of the bandwidth (unset: NCCL's 1/4; 1/2 where the wire limits LL, 4 data bytes per "
        "8-byte line)", positive=True, maximum=0.5),
    # DAG shapes (DESIGN 2.5); the defaults are the barrier model.
    Key("update", str, "barrier", "",
        "parameter update: one barrier after all communication, or per layer once its bucket is done",
        choices=lambda: UPDATES),
    Key("hierarchical.pipelined", bool, False, "",
        "hierarchical all-reduce as three pipelined stages (intra reduce-scatter, inter all-reduce, intra "
        "all-gather) on channels of their own"),
    Key("zero", int, 0, "", "ZeRO stage (3: FSDP full sharding)", minimum=0, maximum=3),
    # Memory per GPU (kernels.memory): model states by optimizer, precision and ZeRO stage, and activations.
    Key("optimizer", str, "momentum", "", "optimizer, for its states in memory (sgd: none, momentum: 1, adam: 2)",
        choices=lambda: OPTIMIZERS),
    Key("precision", str, "fp32", "", "training precision (mixed: fp16 weights, gradients and activations, "
                                      "fp32 master weights; the GPU's FP16/BF16 peak, 2-byte gradients)",
        choices=lambda: PRECISIONS),
    Key("activation_checkpointing", bool, False, "", "keep only segment boundaries' activations and recompute "
                                                     "the rest in backward (memory only)"),
    Key("accumulation", int, 1, "micro-batches", "micro-batches per step (gradient accumulation)", positive=True,
        maximum=1024),
]}

# Keys that change the DAG's shape or layer data: a sweep compiles once per value.
STRUCTURAL = ("model", "seq_len", "iterations", "compute.trace", "update", "hierarchical.pipelined", "zero",
              "accumulation", "partition_bytes", *zoo.TRANSFORMER_KEYS)

# A bare string for these tables names the catalog entry.
TABLES_WITH_NAME = ("gpu", "intra", "inter", "h2d")


def canonical(key: str) -> str:
    return f"{key}.name" if key in TABLES_WITH_NAME else key


def check_value(written: str, value: object) -> object:
    """The validated value of one scalar for key `written` (as the user wrote it)."""
    key = KEYS.get(canonical(written))
    if key is None:
        raise SpecError(written, value, f"unknown key; {closest(written, sorted(KEYS), KEYS_HELP)}")
    if key.kind is bool:
        if not isinstance(value, bool):
            raise SpecError(written, value, "must be true or false")
        return value
    if key.kind is str:
        if not isinstance(value, str):
            raise SpecError(written, value, "must be a string")
        valid = key.choices() if key.choices else None
        if key.name == "model" and zoo.is_model_file(value):
            return value  # a path: read and checked with the scenario's other keys (spec._check_models)
        if valid is not None and value not in valid:
            raise SpecError(written, value, f"unknown {key.long_name}; "
                                            f"{closest(value, valid, 'ssgd-sweep models' if key.name == 'model' else '')}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(written, value, f"must be a number ({key.kind.__name__})")
    if not math.isfinite(value):
        raise SpecError(written, value, "must be finite")
    if key.kind is int:
        if value != int(value):
            raise SpecError(written, value, "must be an integer")
        value = int(value)
    else:
        value = float(value)
    if key.positive and value <= 0:
        raise SpecError(written, value, "must be > 0")
    if key.minimum is not None and value < key.minimum:
        raise SpecError(written, value, f"must be >= {_bound(key.minimum)}{_units(key)}")
    if key.maximum is not None and value > key.maximum:
        raise SpecError(written, value, f"must be <= {_bound(key.maximum)}{_units(key)}")
    if key.kind is float and abs(value) > FLOAT32_MAX:
        raise SpecError(written, value, "beyond float32 (the kernels' type)")
    return value


def _bound(x: float) -> str:
    return f"{int(x):,}" if x == int(x) and abs(x) < 1e9 else f"{x:g}"


def _units(key: Key) -> str:
    return f" {key.units}" if key.units and key.units != "1" else ""
