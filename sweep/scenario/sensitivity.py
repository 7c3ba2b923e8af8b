"""Sensitivities: `outputs = ["d_iteration_time/d_inter.bandwidth", ...]`.

Each names a numeric scenario key; the sweep computes d(iteration_time)/d(key)
for every configuration by forward-mode autodiff through the kernels. A key
reaches the kernels as one or more parameters: the tangent of each is given
here as (parameter, multiplier), the multiplier being another parameter (the
chain rule through a product, e.g. workers = nodes * gpus_per_node) or None.
Integer keys are differentiated as if continuous.
"""
from __future__ import annotations

from sweep.scenario.parameter_table import PARAMETER_OF_KEY
from sweep.scenario.schema import KEYS, KEYS_HELP
from sweep.errors import SpecError, closest

PREFIX = "d_iteration_time/d_"

def is_sensitivity(name: str) -> bool:
    return name.startswith(PREFIX)


def key_of(name: str) -> str:
    return name[len(PREFIX):]


def variable_name(name: str) -> str:
    """netCDF (HDF5) names cannot hold '/': d_iteration_time_d_<key>."""
    return name.replace("/", "_")


def tangent_rule(key: str, servers_given: bool) -> tuple[tuple[str, str | None], ...]:
    """(parameter, multiplier) pairs whose tangents a unit change of `key` sets."""
    if key in PARAMETER_OF_KEY:
        return ((PARAMETER_OF_KEY[key].name, None),)
    if key == "nodes":
        return (("nodes", None), ("workers", "gpus_per_node")) + ((("servers", None),) if not servers_given else ())
    if key == "gpus_per_node":
        return (("gpus_per_node", None), ("workers", "nodes"))
    raise KeyError(key)


def check_sensitivity(name: str) -> str:
    """Validate an output name `d_iteration_time/d_<key>`; returns it."""
    key = key_of(name)
    spec_key = KEYS.get(key)
    if spec_key is None or spec_key.kind not in (int, float):
        numeric = sorted(k for k, v in KEYS.items() if v.kind in (int, float))
        raise SpecError("outputs", name, f"not a numeric key to differentiate by; {closest(key, numeric, KEYS_HELP)}")
    try:
        tangent_rule(key, False)
    except KeyError:
        raise SpecError("outputs", name, "this key has no derivative in the model")
    return name


def units(key: str) -> str:
    unit = KEYS[key].units
    return f"s/({unit})" if unit and unit != "1" else "s"
