"""Pure JAX kernels: task durations, collectives, buckets, critical path, outputs.

Every array that varies per configuration keeps configurations on its last
(minor) axis. No I/O and no validation here: the host checks inputs first.
"""
from kernels.codes import ALGORITHMS, BOTTLENECKS, STRATEGIES
from kernels.iteration import iteration_outputs
from kernels.outputs import OUTPUTS

__all__ = ["ALGORITHMS", "BOTTLENECKS", "OUTPUTS", "STRATEGIES", "iteration_outputs"]
