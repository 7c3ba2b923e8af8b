"""Running a sweep: from a `Spec` to a labelled cube, chunk by chunk.

Owns the chunk plan over the grid or sample (`plan`), resolving scenario
values to kernel parameter arrays (`params`), devices and processes
(`devices`), how many CPU devices a CLI sweep asks for (`cpu_devices`),
the jitted evaluation loop (`evaluate`), the single-GPU time over the
values it depends on (`single_gpu`), which evaluator a
sweep's program gets and its XLA options (`xla`), the resumable netCDF
store and its identity (`store`), stop requests (`interrupt`), and the
inverse query "which inter-node bandwidth reaches a target" (`bandwidth_target`).

May import: `kernels`, `sweep.errors`, `sweep.scenario`, `sweep.graph`.

Implementation details: users and `experiments/` import `sweep.__all__`.
"""
__all__: list[str] = []
