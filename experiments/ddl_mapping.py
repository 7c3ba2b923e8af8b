"""How a measured method of the ddl-benchmarks files maps onto the model.

One row of a file in the 10GbE file's format (`ddl_data`) becomes one
scenario (`scenario_keys`), and the fixed keys under every row come from a
base scenario plus what the mapping adds (`mapped_base`):
  BSP-A2A            strategy bsp     all-reduce after the backward pass
  WFBP-A2A           strategy wfbp    one all-reduce per tensor (Horovod, threshold 0)
  MG-WFBP            strategy mgwfbp  the merged-gradient rule, its buckets planned as its
                                      code plans them (`MGWFBP_PLANNER`: its own alpha-beta
                                      table by process count, tensors under 8,192
                                      parameters merged)
  ByteScheduler-A2A  strategy priority, update layerwise: ByteScheduler's partitions
                                      and credit as its launcher set them (16 MB, 64 MB:
                                      `BYTESCHEDULER_A2A`), priority order and overlap with
                                      the next forward pass (`priority = False` maps it as
                                      WFBP-A2A, per tensor)
  BSP-PS, WFBP-PS    strategy bsp / wfbp, algorithm ps (BytePS: S = nodes servers
                     on machines of their own) with ps.pipelined, as BytePS streams
                     tensor partitions through local reduce, push and pull; BSP-PS's one
                     fused tensor with ps.imbalance, the busiest server's share of its
                     partitions (`byteps_servers`)
  ByteScheduler-PS   as WFBP-PS: BytePS with scheduling at the servers, whose update
                     is a barrier (not ByteScheduler's layer-wise plugin)
The all-to-all methods (NCCL through Horovod/PyTorch) use algorithm `nccl`
(`ALLREDUCE`); on one node the PS methods are a local all-reduce (the
measurements show no network cost there). Every row's compute comes from
the measured single-GPU throughput (`compute.measured_throughput`). BERT is
BertForPreTraining, as the benchmark code trains it (`MODELS`).
What the fit then sets, and why, is `validate_ddl`'s.
"""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from sweep import METHOD_COLUMN, read_base, read_rows
from sweep.scenario import catalog
from sweep.scenario.schema import KEYS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from byteps_servers import fused_imbalance  # noqa: E402
from network_labels import link_of_network, says_tcp  # noqa: E402

# The inter link's latency per step grows with the processes as NCCL's tree
# does: `rhd` charges 2 ceil(log2 P) steps, NCCL's tree 2 ceil(log2 n)
# inter-node steps (its intra-node chain is on the intra link), so from 8 to
# 32 GPUs at 4 per node rhd's steps grow 10/6 and the tree's 6/2; latency per
# step times (P/2)**e makes the first the second when 4**e = 1.8 (e = 0.42;
# exact at 8 and 32 GPUs, 1.79x against 2x at 16). README: tried and kept.
TREE_ALPHA_EXPONENT = 0.42
# NCCL's protocols for every all-reduce (the A2A methods, and the PS methods'
# local reduce on one node): held out, (a) 4.0 / 25.5 -> 4.0 / 18.9 % and
# (b) 8.9 / 31.2 -> 6.6 / 40.0 % against `rhd` with TREE_ALPHA_EXPONENT (README).
ALLREDUCE = "nccl"
# The 10GbE cluster's GPU and intra link; the inter link is the one the data's
# `network` names (`link_of_network`: 10gbe for the 10GbE file).
GPU = "rtx2080ti"
BASE = (f'gpu = "{GPU}"\nintra = "pcie3"\n\n[inter]\n'
        f'alpha_exponent = {TREE_ALPHA_EXPONENT}\n')
# The benchmark code trains BERT as Hugging Face's BertForPreTraining (ddl-benchmarks,
# */bert_benchmark.py): its masked-LM and next-sentence heads on top of the encoder,
# the decoder onto the vocabulary tied to the word embeddings. README: tried and kept.
MODELS = {"bert_base": "bert_base_pretraining", "bert_large": "bert_large_pretraining"}
METHODS = {  # method -> (strategy, family)
    "BSP-A2A": ("bsp", "a2a"), "WFBP-A2A": ("wfbp", "a2a"), "MG-WFBP": ("mgwfbp", "a2a"),
    "ByteScheduler-A2A": ("wfbp", "a2a"), "BSP-PS": ("bsp", "ps"), "WFBP-PS": ("wfbp", "ps"),
    "ByteScheduler-PS": ("wfbp", "ps"),
}
# MG-WFBP as the measured code plans it (ddl-benchmarks, mgwfbp/hv_distributed_optimizer.py,
# `_generate_groups_mgwfbp`, with layer-wise times given, as its imagenet and bert benchmarks do):
# its own all-reduce model alpha + beta * bytes from a table by process count, and tensors of
# under 8,192 parameters always merged. Its launcher (mgwfbp/horovod_mpi_cj.sh) takes the 10GbE
# table on 10GbE and passes --rdma, the InfiniBand table, on the 100 Gb fabric (RDMA or TCP).
MGWFBP_PLANNER = {  # workers -> (alpha [s], beta [s/byte])
    "10gbe": {2: (2.554691138304671e-06, 9.837548167872609e-11), 4: (4.204298980348825e-05, 2.0589360830118177e-10),
              8: (5.230272768511732e-04, 8.570746975492128e-10), 16: (9.080981007148093e-04, 7.395651186836712e-10),
              32: (3 * 1.3476410788581382e-03, 8.643300782166769e-10),
              64: (3 * 2.3476410788581382e-03, 9.643300782166769e-10)},
    "ib": {2: (2.554691138304671e-06, 9.837548167872609e-11), 4: (4.204298980348825e-05, 2.0589360830118177e-10),
           8: (9.75367204301171e-05, 3.0568230536676206e-10), 16: (3 * 2.3583677659915685e-04, 4.0594787739537565e-10),
           32: (4.0632079996292579e-04, 1.5 * 3.2713239529771973e-10),
           64: (8.0632079996292579e-04, 1.8 * 3.2713239529771973e-10)},
}
MGWFBP_MIN_PARAMS = 8192
# The mapped rows as `calibrate` reads them (`write_rows`): scenario keys, then the measurement.
COLUMNS = ("method", "model", "batch_size", "seq_len", "nodes", "gpus_per_node", "strategy", "algorithm",
           "ps.pipelined", "ps.imbalance", "update", "partition_bytes", "credit_bytes", "fuse_posted", "mgwfbp.alpha",
           "mgwfbp.bandwidth", "mgwfbp.min_params", "compute.measured_throughput", "throughput")
# ByteScheduler-A2A as the measured code ran it (ddl-benchmarks
# bytescheduler/horovod_mpi_cj.sh): ByteScheduler's PyTorch
# ScheduledOptimizer, whose forward pre-hooks wait for each layer's update
# (update = "layerwise"), with BYTESCHEDULER_PARTITION = 4,000,000 and
# BYTESCHEDULER_CREDIT = 16,000,000 *parameters* (its core counts a tensor's
# elements: bytescheduler/pytorch/horovod_task.py `_tensor_size`), float32:
# 16 MB partitions and a 64 MB credit, credit tuning off. (Its own defaults,
# 1,000,000 and 4,000,000 parameters, were this mapping's before: README.)
# Under it Horovod keeps its defaults (64 MiB fusion buffer, 5 ms cycle), so
# the partitions the credit lets out while the channel is busy go as one
# fused all-reduce when it falls free (`fuse_posted`; README, tried and kept).
# ByteScheduler-PS is not that plugin: byteps/launch.sh with bytescheduler=1
# runs BytePS's own DistributedOptimizer, whose step() waits for every
# push/pull (an update barrier, which the priority strategy does not
# describe), with scheduling at the servers (BYTEPS_SERVER_ENABLE_SCHEDULE):
# it keeps WFBP-PS's mapping in both.
BYTESCHEDULER_A2A = {"strategy": "priority", "update": "layerwise", "partition_bytes": 16_000_000,
                     "credit_bytes": 64_000_000.0, "fuse_posted": "true"}


def scenario_keys(record: dict, single: dict[str, float], priority: bool = True) -> dict:
    """The scenario of one measured configuration (the mapping in the docstring);
    `priority` maps ByteScheduler-A2A onto the priority strategy."""
    strategy, family = METHODS[record["method"]]
    keys = {"model": MODELS.get(record["dnn"], record["dnn"]), "batch_size": int(float(record["batch_size"])),
            "seq_len": int(float(record["seq_len"])) if record["seq_len"] else "",
            "nodes": record["nodes"], "gpus_per_node": record["gpus_per_node"], "strategy": strategy,
            "algorithm": ALLREDUCE, "ps.pipelined": "", "ps.imbalance": "", "update": "", "partition_bytes": "",
            "credit_bytes": "", "fuse_posted": "", "compute.measured_throughput": single[record["dnn"]]}
    if priority and record["method"] == "ByteScheduler-A2A":
        keys.update(BYTESCHEDULER_A2A)
    if family == "ps" and record["nodes"] > 1:
        keys.update({"algorithm": "ps", "ps.pipelined": "true"})
        if strategy == "bsp":  # one fused tensor: its partitions cannot spread evenly (`byteps_servers`)
            keys["ps.imbalance"] = fused_imbalance(keys["model"], int(record["nodes"]))
    keys.update({"mgwfbp.alpha": "", "mgwfbp.bandwidth": "", "mgwfbp.min_params": ""})
    if strategy == "mgwfbp":
        alpha, beta = mgwfbp_planner(record["network"], record["gpus"])
        keys.update({"mgwfbp.alpha": alpha, "mgwfbp.bandwidth": 1.0 / beta, "mgwfbp.min_params": MGWFBP_MIN_PARAMS})
    return keys


def mgwfbp_planner(network: str, workers: int) -> tuple[float, float]:
    """(alpha, beta) of MG-WFBP's own all-reduce model for `workers` processes:
    its 10GbE table when the network's name says 10GbE, else (the faster
    fabric) its InfiniBand table; a count the table lacks takes the nearest
    one (in log)."""
    table = MGWFBP_PLANNER["10gbe" if link_of_network(network) == "10gbe" else "ib"]
    nearest = min(table, key=lambda p: abs(math.log(p / workers)))
    return table[nearest]


def write_rows(path: Path, records: list[dict], single: dict, measured: bool, priority: bool = True) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for r in records:
            keys = {**scenario_keys(r, single, priority), "method": r["method"]}
            writer.writerow([keys[c] for c in COLUMNS[:-1]] + [r["throughput"] if measured else ""])
    return path


def mapped_base(base_text: str, path: Path, network: str = "") -> dict:
    """The fixed keys under every row: the base's, NCCL's tree latency
    growth (`TREE_ALPHA_EXPONENT`) unless the base sets `inter.alpha_exponent`
    itself, and, unless it sets the intra link's latency, that link's hop
    latency as NCCL's LL protocol has it (`catalog.nccl_ll_hop`; the link
    the base names, else the scenario default's): with `algorithm = "nccl"`
    a link's alpha is its LL hop, and the catalog's (5 us for pcie3) is a
    point-to-point message latency; as the intra link's start and prior
    centre NCCL's figure extrapolates better (README: tried and kept).
    Both belong to the mapping of the all-to-all methods, not to one
    network, so a `--base` for another cluster gets them too. Unless the
    base names the inter link, the link the data's `network` names
    (`link_of_network`); and where it says TCP, that link as used through
    TCP (`through_tcp`)."""
    path.write_text(base_text)
    base = through_tcp(with_network_link(read_base(path), network), network)
    base.setdefault("inter.alpha_exponent", TREE_ALPHA_EXPONENT)
    base.setdefault("intra.alpha", catalog.nccl_ll_hop(base.get("intra.name", KEYS["intra.name"].default)))
    return base


# The inter line rate where the data's `network` names no link: the wire is
# unknown, so no bound (as validate_nccl's UNBOUNDED). Under the default
# link's 10GbE rate a faster fabric's rows could not be fitted at all; an
# unbounded rate only leaves the bandwidth to the data and its prior.
UNKNOWN_WIRE = 1e12


def with_network_link(base: dict, network: str) -> dict:
    """`base` with the inter link the data's `network` names, unless it
    names one itself. Where the label names none: the scenario default
    (10gbe) as the start and prior centre, but no line-rate bound
    (`UNKNOWN_WIRE`, unless the base sets `inter.line_rate`), with a note to
    name the link in `--base`."""
    if "inter.name" in base or not network:
        return base
    link = link_of_network(network)
    if link is None:
        print(f"validate_ddl: network {network!r} names no catalog link: inter link "
              f"{KEYS['inter.name'].default}'s values as the start, no line-rate bound (name yours in --base)",
              file=sys.stderr)
        return {**base, "inter.line_rate": base.get("inter.line_rate", UNKNOWN_WIRE)}
    return {**base, "inter.name": link}


def through_tcp(base: dict, network: str) -> dict:
    """`base` with its inter link's TCP entry (`<name>-tcp`: the same wire,
    the socket stack's latency, `catalog.TCP_LATENCY`) when the data's
    `network` says TCP and the base neither sets the link's latency nor
    names a link that is TCP already (10gbe, or one without such an
    entry). The latency is the fit's start and prior centre: around an
    RDMA fabric's 3 us, a TCP stack's latency per step extrapolates
    wrongly (README: synthetic fabrics)."""
    name = base.get("inter.name", KEYS["inter.name"].default)
    if not says_tcp(network) or "inter.alpha" in base or f"{name}-tcp" not in catalog.LINKS:
        return base
    print(f"validate_ddl: network {network!r} is TCP: inter link {name}-tcp (the socket stack's latency)",
          file=sys.stderr)
    return {**base, "inter.name": f"{name}-tcp"}


def mapped_rows(folder: Path, records: list[dict], single: dict, base: dict, priority: bool) -> list:
    """`records` as the fit reads them: their scenarios (`scenario_keys`)
    written to `folder` and read back under `base`."""
    data = write_rows(folder / ("rows.csv" if priority else "wfbp_rows.csv"), records, single, measured=True,
                      priority=priority)
    return read_rows(data, dict(base), labels=(METHOD_COLUMN,))[1]
