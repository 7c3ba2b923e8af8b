"""Pure JAX kernels: task durations, collectives, the program, outputs.

Every array that varies per configuration keeps configurations on its last
(minor) axis. No I/O and no validation here: the host checks inputs first.
Nothing here imports `sweep`; the program format the host writes (cost rows,
edge switches, category codes) is `kernels.codes`.

Public: `iteration_outputs` (every output of DESIGN 2.4 for a compiled DAG
and parameter arrays), `context` (the per-configuration costs it starts
from), the output registry (`OUTPUTS`, `OUTPUT`: name, units, long name,
dtype, flags), the category codes, and `codes` itself (the program format).
"""
from kernels import codes
from kernels.codes import ALGORITHMS, BOTTLENECKS, STRATEGIES
from kernels.iteration import context, iteration_outputs
from kernels.outputs import OUTPUT, OUTPUTS

__all__ = ["ALGORITHMS", "BOTTLENECKS", "OUTPUT", "OUTPUTS", "STRATEGIES", "codes", "context", "iteration_outputs"]
