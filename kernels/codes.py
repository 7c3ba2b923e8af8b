"""Integer codes the kernels read: categorical choices per configuration, and the
program format's cost rows and edge switches (written by `sweep.graph.dag`)."""

# The FIFO strategies form buckets and send them in backward order; `priority`
# (ByteScheduler) sends partitions frontmost layer first (`kernels.priority`).
FIFO_STRATEGIES = ("bsp", "wfbp", "fusion", "mgwfbp")
STRATEGIES = FIFO_STRATEGIES + ("priority",)
ALGORITHMS = ("ring", "rhd", "tree", "hierarchical", "ps", "nccl")
BOTTLENECKS = ("compute", "communication", "input")
OPTIMIZERS = ("sgd", "momentum", "adam")
PRECISIONS = ("fp32", "mixed")
FITS = ("no", "yes")

BSP, WFBP, FUSION, MGWFBP, PRIORITY = range(len(STRATEGIES))
RING, RHD, TREE, HIERARCHICAL, PS, NCCL = range(len(ALGORITHMS))
SGD, MOMENTUM, ADAM = range(len(OPTIMIZERS))
FP32, MIXED = range(len(PRECISIONS))

# Cost rows (`kernels.program`): compute and input scale with `coef`; the
# communication rows are collective costs of `coef` * gradient bytes.
COMPUTE_COSTS = ("io", "h2d", "forward", "backward", "update", "update_shard")
COMM_COSTS = ("allreduce", "reduce_scatter", "all_gather",
              "intra_reduce_scatter", "inter_allreduce", "intra_all_gather")
COSTS = COMPUTE_COSTS + COMM_COSTS

# Edge switches. 0 and 1 are fixed; 2 + 2 * ref + rule gates an edge on what
# slot `ref` (a policy task) did in the configuration.
ALWAYS = 0
NO_PREFETCH = 1
IF_SENDS = 0  # the slot sends its bucket
IF_HOLDS = 1  # the slot sends nothing: its gradients ride with a later slot


def switch_of(rule: int, ref: int) -> int:
    return 2 + 2 * ref + rule


def switch_rule(switch: int) -> tuple[int, int]:
    """(rule, ref) of a slot switch (>= 2)."""
    return (switch - 2) % 2, (switch - 2) // 2
