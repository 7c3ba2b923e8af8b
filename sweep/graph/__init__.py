"""The DAG of one training iteration, from a model to a program the kernels run.

Owns the model zoo (`zoo`), measured per-layer times (`layer_trace`), the
task graph and its scheduling rules (`dag`: every rule lives there, once),
its lowering into a stream or register-scan program with checked
preconditions (`lowering`), and the cached compile of both (`compiler`).

May import: `kernels.codes` (the program format) and `sweep.errors`;
nothing else from `sweep`, so every other layer may build on it.

Implementation details: users and `experiments/` import `sweep.__all__`.
"""
__all__: list[str] = []
