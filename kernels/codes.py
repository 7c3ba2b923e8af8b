"""Integer codes of the categorical choices a kernel selects per configuration."""

STRATEGIES = ("bsp", "wfbp", "fusion", "mgwfbp")
ALGORITHMS = ("ring", "rhd", "tree", "hierarchical", "ps")
BOTTLENECKS = ("compute", "communication", "input")

BSP, WFBP, FUSION, MGWFBP = range(len(STRATEGIES))
RING, RHD, TREE, HIERARCHICAL, PS = range(len(ALGORITHMS))
