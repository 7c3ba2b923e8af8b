"""Where a sweep's results go, chunk by chunk: memory, or a netCDF file.

`NetcdfStore` streams every chunk into `OUT.nc.partial` (compressed, chunked
on disk), flushes it, and then records the chunk in `OUT.nc.partial.json`.
Only a finished sweep is renamed to `OUT.nc`, so nothing at the output path
ever looks complete before it is. A sweep that was killed resumes from the
chunks its journal lists, provided the journal belongs to the same sweep.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import h5netcdf
import h5py
import numpy as np
import xarray as xr

from kernels.codes import BOTTLENECKS
from sweep.cube import OUTPUT_ATTRS
from sweep.sensitivity import is_sensitivity, key_of, variable_name
from sweep.sensitivity import units as sensitivity_units
from sweep.schema import KEYS
from sweep.spec import Spec

@dataclasses.dataclass(frozen=True)
class Layout:
    """Names, shapes, types and labels of a sweep's cube."""
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    coords: dict  # dimension coordinate name -> (values, attrs)
    sampled: dict  # sampled-key coordinate name -> (kind, attrs), along `config`
    variables: dict  # name -> (dtype, attrs)
    attrs: dict
    disk_chunks: tuple[int, ...]


def make_layout(spec: Spec, devices: int, disk_chunks: tuple[int, ...]) -> Layout:
    coords = {}
    for axis in spec.axes:
        key = KEYS[axis.key]
        coords[axis.name] = (np.asarray(axis.values), {"units": key.units, "long_name": key.long_name})
    sampled = {}
    if spec.sample is not None:
        for d in spec.sample.dimensions:
            key = KEYS[d.key]
            sampled[d.name] = (key.kind, {"units": key.units, "long_name": f"{key.long_name} (sampled)"})
    variables = {}
    for name in spec.outputs:
        if is_sensitivity(name):
            key = key_of(name)
            variables[variable_name(name)] = (np.float32, {
                "units": sensitivity_units(key),
                "long_name": f"sensitivity d(iteration_time)/d({key})"})
            continue
        units, long_name = OUTPUT_ATTRS[name]
        attrs = {"units": units, "long_name": long_name}
        if name == "bottleneck":
            attrs.update(flag_values=np.arange(len(BOTTLENECKS), dtype=np.int8),
                         flag_meanings=" ".join(BOTTLENECKS))
        variables[name] = (np.int8 if name == "bottleneck" else np.float32, attrs)
    attrs = {"title": "ssgd-sweep result cube", "spec": spec.to_toml(), "devices": devices}
    return Layout(spec.dims, spec.shape, coords, sampled, variables, attrs, disk_chunks)


class MemoryStore:
    """Collects results in memory and returns an xarray Dataset."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.completed: set[int] = set()
        self.arrays = {name: np.empty(layout.shape, dtype) for name, (dtype, _) in layout.variables.items()}
        n = layout.shape[-1] if layout.sampled else 0
        self.sampled = {name: np.empty(n, object if kind is str else kind) for name, (kind, _) in layout.sampled.items()}

    def write(self, chunk, block: dict[str, np.ndarray], sampled: dict[str, np.ndarray]) -> None:
        for name, values in block.items():
            self.arrays[name][chunk.box] = values
        for name, values in sampled.items():
            self.sampled[name][chunk.box[-1]] = values

    def finish(self) -> xr.Dataset:
        lay = self.layout
        coords = {name: (name, values, attrs) for name, (values, attrs) in lay.coords.items()}
        for name, (_, attrs) in lay.sampled.items():
            coords[name] = (lay.dims[-1], self.sampled[name], attrs)
        data = {name: (lay.dims, self.arrays[name], attrs) for name, (_, attrs) in lay.variables.items()}
        return xr.Dataset(data, coords=coords, attrs=lay.attrs)

    def abort(self) -> None:
        pass

    discard = abort


class NullStore:
    """For processes other than 0 in a cluster: they compute, process 0 writes."""
    completed: frozenset = frozenset()

    def write(self, chunk, block, sampled) -> None:
        pass

    def abort(self) -> None:
        pass

    discard = abort


class NetcdfStore:
    """Streams chunks into OUT.nc.partial; renames to OUT.nc when complete."""

    def __init__(self, path: str | os.PathLike, layout: Layout, fingerprint: str, log=None):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.journal = self.path.with_name(self.path.name + ".partial.json")
        self.layout = layout
        self.fingerprint = fingerprint
        self.completed = self._resume(log)
        if self.completed is None:
            self.completed = set()
            self._create()
        # Chunks are written with h5py itself: its flush reaches the file
        # (h5netcdf's flush does not write HDF5's caches out).
        self.file = h5py.File(self.partial, "a")

    def _resume(self, log) -> set[int] | None:
        try:
            record = json.loads(self.journal.read_text())
            if record.get("fingerprint") != self.fingerprint:
                return None
            with h5netcdf.File(self.partial, "r"):
                pass  # a file killed mid-write may not open: then start over
        except (OSError, ValueError):
            return None
        done = set(record["completed"])
        if log and done:
            log(f"resuming {self.partial.name}: {len(done)} chunks already done")
        return done

    def _create(self) -> None:
        self.journal.unlink(missing_ok=True)
        lay = self.layout
        with h5netcdf.File(self.partial, "w") as f:
            f.dimensions = dict(zip(lay.dims, lay.shape))
            for name, (values, attrs) in lay.coords.items():
                _coordinate(f, name, (name,), values, attrs)
            for name, (kind, attrs) in lay.sampled.items():
                _coordinate(f, name, (lay.dims[-1],), None, attrs, kind)
            extra = " ".join(lay.sampled)
            # A single configuration is a scalar: HDF5 neither chunks nor compresses those.
            storage = dict(chunks=lay.disk_chunks, compression="gzip", compression_opts=1, shuffle=True) \
                if lay.dims else {}
            for name, (dtype, attrs) in lay.variables.items():
                var = f.create_variable(name, lay.dims, dtype, **storage)
                var.attrs.update(attrs)
                if extra:
                    var.attrs["coordinates"] = extra
            f.attrs.update(lay.attrs)
        self._write_journal()

    def write(self, chunk, block: dict[str, np.ndarray], sampled: dict[str, np.ndarray]) -> None:
        for name, values in block.items():
            self.file[name][chunk.box] = values
        for name, values in sampled.items():
            var = self.file[name]
            if var.dtype.kind == "O":
                var[chunk.box[-1]] = values.astype(object)
            else:
                var[chunk.box[-1]] = values.astype(var.dtype)
        self.file.flush()
        self.completed.add(chunk.id)
        self._write_journal()

    def _write_journal(self) -> None:
        tmp = self.journal.with_name(self.journal.name + ".tmp")
        tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "completed": sorted(self.completed)}))
        os.replace(tmp, self.journal)

    def finish(self) -> None:
        self.file.close()
        os.replace(self.partial, self.path)
        self.journal.unlink(missing_ok=True)

    def abort(self) -> None:
        """Keep what is done for a resume; the output path stays untouched."""
        self.file.close()

    def discard(self) -> None:
        """Bad input: nothing to resume, leave no file behind."""
        self.file.close()
        self.partial.unlink(missing_ok=True)
        self.journal.unlink(missing_ok=True)


def fingerprint(spec: Spec, chunk_length: int, target: int) -> str:
    text = json.dumps([spec.to_toml(), chunk_length, target, 1])
    return hashlib.sha256(text.encode()).hexdigest()


def _coordinate(f, name, dims, values, attrs, kind=None):
    """A coordinate variable; strings as variable-length UTF-8, booleans as
    int8 flagged for xarray's decoder."""
    kind = kind or (str if values.dtype.kind in "UO" else bool if values.dtype == bool else None)
    if kind is str:
        var = f.create_variable(name, dims, h5py.string_dtype(),
                                data=None if values is None else values.astype(object))
    elif kind is bool:
        var = f.create_variable(name, dims, np.int8, data=None if values is None else values.astype(np.int8))
        var.attrs["dtype"] = "bool"
    else:
        dtype = np.float64 if kind is float else np.int64 if kind is int else values.dtype
        var = f.create_variable(name, dims, dtype, data=values)
    var.attrs.update(attrs)
