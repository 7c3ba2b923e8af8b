"""Result cubes: labels for their variables, in-memory assembly, atomic writes."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

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


def make_cube(spec, results: dict[str, np.ndarray], devices: int = 1) -> xr.Dataset:
    """A labelled Dataset from full-grid result arrays (shaped `spec.shape`)."""
    from sweep.store import MemoryStore, make_layout

    store = MemoryStore(make_layout(spec, devices, tuple(1 for _ in spec.shape)))
    store.arrays.update({name: np.asarray(values) for name, values in results.items()})
    return store.finish()


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
