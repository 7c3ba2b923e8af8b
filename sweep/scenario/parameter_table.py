"""Which kernel parameter each numeric scenario key is: one table.

Sweeps resolve scenario values into these parameters (`sweep.engine.params`),
sensitivities differentiate by them (`sweep.scenario.sensitivity`) and `calibrate`
fits them (`sweep.fit.calibrate`); a new numeric key is declared here once.
"""
from __future__ import annotations

import dataclasses

from kernels.collectives import EXTRA_LINK_FIELDS, LINK_FIELDS


@dataclasses.dataclass(frozen=True)
class Parameter:
    """How a numeric scenario key reaches the kernels: as parameter `name`
    (a field of `kernels.parameters.Params`), which sensitivities differentiate and, when
    `fit` names a space ("log" or "linear"), `calibrate` may fit."""
    key: str
    name: str
    fit: str | None = "log"


LINK_TABLES = ("intra", "inter")
# The one table of keys that map one-to-one onto a kernel parameter
# (`nodes` and `gpus_per_node` also set `workers`: `sweep.scenario.sensitivity`).
PARAMETERS = (
    Parameter("batch_size", "batch_size", None), Parameter("grad_bytes", "grad_bytes", None),
    Parameter("bucket_bytes", "bucket_bytes", None), Parameter("ps.servers", "servers", None),
    Parameter("gpu.peak_flops", "peak_flops"), Parameter("gpu.memory_bandwidth", "memory_bandwidth"),
    Parameter("compute.efficiency", "efficiency", None), Parameter("compute.b_half", "b_half"),
    Parameter("compute.bwd_ratio", "bwd_ratio"), Parameter("compute.measured_throughput", "measured_throughput"),
    Parameter("compute.update_bytes_per_param", "update_bytes_per_param"),
    Parameter("compute.task_floor", "task_floor"),
    Parameter("io.time_per_sample", "io_time_per_sample"), Parameter("io.sample_bytes", "sample_bytes", None),
    Parameter("h2d.alpha", "h2d_alpha"), Parameter("h2d.bandwidth", "h2d_bandwidth"),
    *(Parameter(f"{t}.{f}", f"{t}_{f}", "linear" if f.endswith("exponent") else "log")
      for t in LINK_TABLES for f in LINK_FIELDS + EXTRA_LINK_FIELDS),
    *(Parameter(f"{t}.line_rate", f"{t}_line_rate", None) for t in LINK_TABLES),
    Parameter("ps.bandwidth", "ps_bandwidth"), Parameter("ps.imbalance", "ps_imbalance", None),
    Parameter("mgwfbp.alpha", "mgwfbp_alpha", None), Parameter("mgwfbp.bandwidth", "mgwfbp_bandwidth", None),
    Parameter("mgwfbp.min_params", "mgwfbp_min_params", None), Parameter("nccl.ll_share", "nccl_ll_share", None),
)
PARAMETER_OF_KEY = {p.key: p for p in PARAMETERS}
