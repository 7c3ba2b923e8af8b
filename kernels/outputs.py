"""The outputs a sweep computes: one registry of name, units, long name, dtype and flags.

`kernels.iteration.iteration_outputs` returns them in this order; the cube
(`sweep.engine.store`) labels and stores them from here, and the scenario
reader (`sweep.scenario.spec`) checks `outputs = [...]` against it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernels.codes import BOTTLENECKS, FITS


class Output(NamedTuple):
    name: str
    units: str
    long_name: str
    dtype: type = np.float32
    flags: tuple[str, ...] = ()  # category names of an integer code (CF flag_meanings), in code order


REGISTRY = (
    Output("iteration_time", "s", "steady-state iteration time"),
    Output("throughput", "samples/s", "training throughput over all GPUs"),
    Output("speedup", "1", "speedup over one GPU with the same settings"),
    Output("scaling_efficiency", "1", "scaling efficiency (speedup / GPUs)"),
    Output("compute_time", "s", "compute time per iteration (forward, backward, update)"),
    Output("communication_time", "s", "communication time per iteration (sum of all-reduces)"),
    Output("exposed_communication", "s", "communication time not hidden by computation"),
    Output("io_time", "s", "input time per iteration (read and decode, host-to-device copy)"),
    Output("bottleneck", "1", "resource with the most busy time per iteration", np.int8, BOTTLENECKS),
    Output("memory_per_gpu", "bytes", "memory per GPU: model states and activations (kernels.memory)"),
    Output("fits_in_memory", "1", "memory_per_gpu within gpu.memory", np.int8, FITS),
)

OUTPUT = {output.name: output for output in REGISTRY}
OUTPUTS = tuple(OUTPUT)
