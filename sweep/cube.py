"""Result cubes: labelled xarray Datasets, written atomically as netCDF."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

from kernels.codes import BOTTLENECKS
from sweep.schema import KEYS
from sweep.spec import Spec

# name -> (units, long_name)
OUTPUT_ATTRS = {
    "iteration_time": ("s", "steady-state iteration time"),
    "throughput": ("samples/s", "training throughput over all GPUs"),
    "speedup": ("1", "speedup over one GPU with the same settings"),
    "scaling_efficiency": ("1", "scaling efficiency (speedup / GPUs)"),
    "compute_time": ("s", "compute time per iteration (forward, backward, update)"),
    "communication_time": ("s", "communication time per iteration (sum of all-reduces)"),
    "exposed_communication": ("s", "communication time not hidden by computation"),
    "io_time": ("s", "input time per iteration (read and decode, host-to-device copy)"),
    "bottleneck": ("1", "resource with the most busy time per iteration"),
}


def make_cube(spec: Spec, results: dict[str, np.ndarray], devices: int = 1) -> xr.Dataset:
    dims = [a.name for a in spec.axes]
    coords = {}
    for axis in spec.axes:
        key = KEYS[axis.key]
        values = np.asarray(axis.values, dtype=object if key.kind is str else None)
        if key.kind is str:
            values = values.astype(str)
        coords[axis.name] = (axis.name, values, {"units": key.units, "long_name": key.long_name})
    data_vars = {}
    for name, array in results.items():
        units, long_name = OUTPUT_ATTRS[name]
        attrs = {"units": units, "long_name": long_name}
        if name == "bottleneck":
            attrs.update(flag_values=np.arange(len(BOTTLENECKS), dtype=np.int8),
                         flag_meanings=" ".join(BOTTLENECKS))
        data_vars[name] = (dims, array, attrs)
    return xr.Dataset(data_vars, coords=coords, attrs={
        "title": "ssgd-sweep result cube",
        "spec": spec.to_toml(),
        "devices": devices,
    })


def write_cube(cube: xr.Dataset, path: str | os.PathLike) -> None:
    """Write to a temporary file beside `path`, then rename: a reader never
    sees a half-written cube, and a failure leaves nothing at `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent or ".")
    os.close(fd)
    try:
        cube.to_netcdf(tmp, engine="h5netcdf")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
