"""Catalogs of GPUs and links: datasheet figures, each with a one-line source.

Units: FLOP/s, bytes/s, seconds. Bandwidths are per direction. Latencies are
typical small-message figures for the stack named in the source line; they are
starting points for calibration, not measurements of any one cluster.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    peak_flops: float  # dense FP32 FLOP/s: what the FLOP-based compute model divides by
    peak_flops_fp16: float  # dense FP16/BF16 (tensor cores where present), for reference
    memory_bandwidth: float  # bytes/s
    memory: float  # bytes of device memory (the datasheet's GB are GiB for these HBM/GDDR sizes, except H200's 141 GB)
    source: str


@dataclasses.dataclass(frozen=True)
class Link:
    name: str
    alpha: float  # latency per message or per hop [s]
    bandwidth: float  # bytes/s, per direction
    source: str
    # Signalling rate per direction after line coding [bytes/s]: no collective
    # moves bytes faster than this (kernels.collectives.wire_lower_bound); a
    # fit's bandwidths are bounded by it. Unset: the datasheet bandwidth.
    line_rate: float | None = None

    def __post_init__(self):
        if self.line_rate is None:
            object.__setattr__(self, "line_rate", self.bandwidth)


_T = 1e12
_G = 1e9
_GiB = 2**30

GPUS: dict[str, Gpu] = {g.name: g for g in (
    Gpu("k80", 4.37 * _T, 4.37 * _T, 240 * _G, 12 * _GiB,
        "NVIDIA Tesla K80 datasheet: 8.73 TFLOPS FP32 boost, 480 GB/s per board of two GK210; one GPU is half, 12 GB GDDR5 per GPU"),
    Gpu("p100", 10.6 * _T, 21.2 * _T, 732 * _G, 16 * _GiB,
        "NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOPS FP32, 21.2 FP16, 732 GB/s HBM2, 16 GB"),
    Gpu("p40", 11.76 * _T, 11.76 * _T, 346 * _G, 24 * _GiB,
        "NVIDIA Tesla P40 datasheet: 11.76 TFLOPS FP32 (no fast FP16), 346 GB/s GDDR5, 24 GB"),
    Gpu("v100", 15.7 * _T, 125 * _T, 900 * _G, 32 * _GiB,
        "NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOPS FP32, 125 tensor, 900 GB/s HBM2 (32 GB model)"),
    Gpu("rtx2080ti", 13.45 * _T, 53.8 * _T, 616 * _G, 11 * _GiB,
        "NVIDIA Turing TU102 whitepaper (GeForce RTX 2080 Ti): 13.45 TFLOPS FP32, 53.8 FP16 tensor (FP32 accumulate), 616 GB/s, 11 GB GDDR6"),
    Gpu("a100", 19.5 * _T, 312 * _T, 2039 * _G, 80 * _GiB,
        "NVIDIA A100 80GB SXM datasheet: 19.5 TFLOPS FP32, 312 BF16 tensor dense, 2,039 GB/s HBM2e, 80 GB"),
    Gpu("h100", 67 * _T, 989 * _T, 3350 * _G, 80 * _GiB,
        "NVIDIA H100 SXM datasheet: 67 TFLOPS FP32, 989 BF16 tensor dense, 3.35 TB/s HBM3, 80 GB"),
    Gpu("h200", 67 * _T, 989 * _T, 4800 * _G, 141e9,
        "NVIDIA H200 SXM datasheet: 67 TFLOPS FP32, 989 BF16 tensor dense, 4.8 TB/s HBM3e, 141 GB"),
)}

LINKS: dict[str, Link] = {l.name: l for l in (
    Link("pcie3", 5e-6, 15.75 * _G, "PCI-SIG: PCIe 3.0 x16, 8 GT/s x 16 lanes, 128b/130b coding = 15.75 GB/s per direction"),
    Link("pcie4", 5e-6, 31.5 * _G, "PCI-SIG: PCIe 4.0 x16, 16 GT/s x 16 lanes = 31.5 GB/s per direction"),
    Link("pcie5", 5e-6, 63.0 * _G, "PCI-SIG: PCIe 5.0 x16, 32 GT/s x 16 lanes = 63 GB/s per direction"),
    Link("nvlink1", 2e-6, 80 * _G, "NVIDIA P100 whitepaper: 4 NVLink 1.0 links x 20 GB/s per direction"),
    Link("nvlink2", 2e-6, 150 * _G, "NVIDIA V100 whitepaper: 6 NVLink 2.0 links x 25 GB/s per direction"),
    Link("nvlink3", 2e-6, 300 * _G, "NVIDIA A100 whitepaper: 12 NVLink 3.0 links x 25 GB/s per direction"),
    Link("nvlink4", 2e-6, 450 * _G, "NVIDIA H100 whitepaper: 18 NVLink 4.0 links x 25 GB/s per direction"),
    Link("10gbe", 30e-6, 1.25 * _G, "IEEE 802.3ae 10 Gb/s Ethernet; latency typical of TCP sockets"),
    Link("25gbe", 10e-6, 3.125 * _G, "IEEE 802.3by 25 Gb/s Ethernet; latency typical of TCP with kernel bypass off"),
    Link("100gbe", 3e-6, 12.5 * _G, "IEEE 802.3 100 Gb/s Ethernet; latency typical of RoCE v2"),
    Link("200gbe", 3e-6, 25 * _G, "IEEE 802.3bs 200 Gb/s Ethernet; latency typical of RoCE v2"),
    Link("400gbe", 3e-6, 50 * _G, "IEEE 802.3bs 400 Gb/s Ethernet; latency typical of RoCE v2"),
    Link("ib-fdr", 1.5e-6, 6.8 * _G, "InfiniBand FDR 4x: 56 Gb/s signalling, 64b/66b coding = 6.8 GB/s; MPI latency ~1-2 us"),
    Link("ib-edr", 1.2e-6, 12.5 * _G, "InfiniBand EDR 4x: 100 Gb/s = 12.5 GB/s; MPI latency ~1 us"),
    Link("ib-hdr", 1.0e-6, 25 * _G, "InfiniBand HDR 4x: 200 Gb/s = 25 GB/s; MPI latency ~1 us"),
    Link("ib-ndr", 1.0e-6, 50 * _G, "InfiniBand NDR 4x: 400 Gb/s = 50 GB/s; MPI latency ~1 us"),
    Link("nvlink5", 2e-6, 900 * _G, "NVIDIA Blackwell (B200) datasheet: 18 NVLink 5 links x 50 GB/s per direction"),
    # Nodes with several NICs: the node's aggregate rate is what bounds an inter-node collective.
    Link("efa-p4d", 15e-6, 50 * _G, "AWS p4d/p4de: 4 x 100 Gb/s EFA per node = 50 GB/s; libfabric/EFA latency ~15 us"),
    Link("efa-p5", 15e-6, 400 * _G, "AWS p5: 32 EFA v2 interfaces, 3,200 Gb/s per node = 400 GB/s"),
    Link("ib-hdr-8x", 1.0e-6, 200 * _G, "8 x InfiniBand HDR 200 Gb/s per node (e.g. Azure NDm A100 v4) = 200 GB/s"),
    Link("ib-ndr-8x", 1.0e-6, 400 * _G, "8 x InfiniBand NDR 400 Gb/s per node (DGX H100 compute fabric) = 400 GB/s"),
)}

# A fabric used through kernel TCP sockets (IPoIB on InfiniBand) keeps its
# wire but pays the socket stack's latency, which does not shrink with the
# line rate: 30 us, as the catalog's 10gbe (TCP) has it; OSU MPI_Allreduce of
# 4 B between 2 processes over 10GbE TCP takes 31.9 us (../shared/data).
# As a fit's start and prior centre it matters: a TCP stack fitted around an
# RDMA latency ten times smaller extrapolates the latency per step wrongly
# (README "Validation against measurements", synthetic fabrics).
TCP_LATENCY = 30e-6
TCP_FABRICS = ("100gbe", "200gbe", "400gbe", "ib-fdr", "ib-edr", "ib-hdr", "ib-ndr")


def _through_tcp(link: Link) -> Link:
    """`link`'s wire with the TCP socket stack's latency, named `<name>-tcp`."""
    how = "IPoIB" if link.name.startswith("ib-") else "TCP sockets"
    return Link(f"{link.name}-tcp", TCP_LATENCY, link.bandwidth,
                f"{link.source.split(';')[0]}, used through {how}: the socket stack's latency, 30 us as on 10GbE",
                link.line_rate)


LINKS.update({f"{name}-tcp": _through_tcp(LINKS[name]) for name in TCP_FABRICS})


def is_pcie(name: str) -> bool:
    """Whether the catalog link `name` is PCIe (NCCL's intra-node hops take
    its PCIe figures there, NVLink's elsewhere: `kernels.nccl`)."""
    return LINKS[name].name.startswith("pcie")


# NCCL's LL hop latency [s] per path (NVIDIA/nccl src/graph/tuning.cc; the LL
# column of `kernels.nccl`'s tables, there in us): with `algorithm = "nccl"` a
# link's alpha is its LL hop, so these start (and centre the priors of) fits of
# NCCL rows, where the catalog's alphas are point-to-point message latencies.
NCCL_LL_HOP = {"nvlink": 0.47e-6, "pcie": 1.0e-6, "net": 2.7e-6}


def nccl_ll_hop(name: str) -> float:
    """NCCL's LL hop latency [s] on the catalog intra link `name`."""
    return NCCL_LL_HOP["pcie" if is_pcie(name) else "nvlink"]
