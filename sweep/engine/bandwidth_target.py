"""The inter-node bandwidth each configuration needs for a target scaling efficiency.

Solved per configuration, not read off a grid: a bisection in log-bandwidth
runs on every configuration of a group at once (one kernel call per step).
It relies on monotonicity: more bandwidth never slows an iteration (true for
fixed buckets, bsp, wfbp and fusion; MG-WFBP re-buckets with the bandwidth,
so there the answer is one crossing of the target, checked by
`efficiency_at_required`). Where even the highest bandwidth searched cannot
reach the target (latency- or input-bound), the answer is "unreachable"
(NaN), not a number.
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from sweep.graph import zoo
from sweep.graph.compiler import compile_structure
from sweep.engine.evaluate import evaluate_params
from sweep.engine.params import grid_columns, kernel_params
from sweep.engine.plan import structural_groups
from sweep.scenario.schema import KEYS
from sweep.errors import SpecError
from sweep.scenario.spec import Spec, structural_keys

LOWEST, HIGHEST = 1e6, 1e13  # bytes/s: 8 Mb/s to 80 Tb/s
STEPS = 32  # halves a 7-decade bracket to a ratio of 1 + 4e-9
SOLUTION_FLAGS = ("solved", "below_search_range", "unreachable")


def required_inter_bandwidth(spec: Spec, target: float = 0.9, steps: int = STEPS,
                             lowest: float = LOWEST, highest: float = HIGHEST) -> xr.Dataset:
    """A cube over `spec`'s axes: `required_inter_bandwidth` [bytes/s] (NaN where
    unreachable), `efficiency_at_required`, and `solution` (a flag, see SOLUTION_FLAGS)."""
    if getattr(spec, "sample", None) is not None:
        raise SpecError("sample", "...", "this study solves on a grid: give lists, not a [sample] table")
    if spec.given("inter.bandwidth"):
        raise SpecError("inter.bandwidth", spec.fixed.get("inter.bandwidth", "swept"),
                        "is what this study solves for: leave it unset")
    if not 0 < target < 1:
        raise SpecError("target", target, "must be between 0 and 1")
    required = np.empty(spec.shape)
    efficiency = np.empty(spec.shape)
    solution = np.empty(spec.shape, np.int8)
    for selector, params, model_dag in _groups(spec):
        def efficiency_at(bandwidth, params=params):
            params = params.replace(inter_bandwidth=bandwidth.astype(np.float32))
            return np.asarray(evaluate_params(model_dag, params)["scaling_efficiency"], np.float64)

        size = params["workers"].shape[0]
        lo, hi = np.full(size, lowest), np.full(size, highest)
        reachable = efficiency_at(hi) >= target
        below_range = efficiency_at(lo) >= target
        for _ in range(steps):
            mid = np.sqrt(lo * hi)  # bisection in log-bandwidth
            ok = efficiency_at(mid) >= target
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        answer = np.where(below_range, lowest, hi)
        flag = np.where(~reachable, 2, np.where(below_range, 1, 0))
        shape = required[selector].shape
        required[selector] = np.where(reachable, answer, np.nan).reshape(shape)
        efficiency[selector] = efficiency_at(np.where(reachable, answer, highest)).reshape(shape)
        solution[selector] = flag.reshape(shape)

    dims = [a.name for a in spec.axes]
    cube = xr.Dataset(coords={a.name: (a.name, np.asarray(a.values), {
        "units": KEYS[a.key].units, "long_name": KEYS[a.key].long_name}) for a in spec.axes},
        attrs={"spec": spec.to_toml()})
    cube["required_inter_bandwidth"] = (dims, required, {
        "units": "bytes/s",
        "long_name": f"inter-node bandwidth needed for {target:.0%} scaling efficiency"})
    cube["efficiency_at_required"] = (dims, efficiency, {
        "units": "1", "long_name": "scaling efficiency at that bandwidth (at the search maximum if unreachable)"})
    cube["solution"] = (dims, solution, {
        "units": "1", "long_name": "outcome of the search",
        "flag_values": np.arange(len(SOLUTION_FLAGS), dtype=np.int8),
        "flag_meanings": " ".join(SOLUTION_FLAGS)})
    cube.attrs.update(target_efficiency=target, search_lowest=lowest, search_highest=highest,
                      bisection_steps=steps)
    return cube


def _groups(spec: Spec):
    """(grid selector, parameter arrays, compiled DAG) per structural group
    (`sweep.engine.plan.structural_groups`), every other configuration in one block."""
    structural = structural_keys(spec)
    inner_axes = [i for i, a in enumerate(spec.axes) if a.key not in structural]
    inner_shape = tuple(len(spec.axes[i].values) for i in inner_axes)
    size = math.prod(inner_shape)
    per_axis = np.unravel_index(np.arange(size), inner_shape) if inner_shape else ()
    for structure, group in structural_groups(spec):
        dag = compile_structure(structure)
        indices = {spec.axes[i].key: idx for i, idx in zip(inner_axes, per_axis)}
        indices.update({spec.axes[i].key: np.full(size, j) for i, j in group.items()})
        model = zoo.model_of(structure)
        params = kernel_params(grid_columns(spec, indices, size), model, size)
        selector = [slice(None)] * len(spec.axes)
        for i, j in group.items():
            selector[i] = j
        yield tuple(selector), params, dag
