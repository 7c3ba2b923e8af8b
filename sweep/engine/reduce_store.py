"""Checkpoints and the result file of a reduced sweep.

A reduced sweep keeps its state on the devices; every checkpoint writes the
merged accumulators and the finished chunks to `OUT.nc.partial.npz` in one
atomic write (so the two always agree), and the result goes to `OUT.nc`
when complete. The identity, lock and "already complete" rules are those of
any sweep (`sweep.engine.store`).
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import xarray as xr

from sweep.atomic import write_atomically
from sweep.engine.store import OutputLock, _changes, _cube_inputs, _writing


class ReduceStore:
    """Checkpoints and the result of a reduced sweep at OUT.nc (or nothing
    when `path` is None: in memory, or a process that does not write)."""

    class State:
        def __init__(self, accumulators, completed):
            self.accumulators, self.completed = accumulators, completed

    def __init__(self, path, ident: dict, log, lock=None):
        self.path = None if path is None else Path(path)
        self.identity, self.log = ident, log
        self.already_complete = False
        self.lock = None
        if self.path is None:
            return
        self.checkpoint_path = self.path.with_name(self.path.name + ".partial.npz")
        self.lock = lock or OutputLock(self.path)
        self.already_complete = self.path.exists() and _cube_inputs(self.path) == ident["inputs"]

    def restore(self, empty: dict) -> "ReduceStore.State":
        """The last checkpoint of this same sweep, else `empty` accumulators."""
        fresh = self.State(empty, set())
        if self.path is None or not self.checkpoint_path.exists():
            return fresh
        try:
            with np.load(self.checkpoint_path) as saved:
                record = json.loads(str(saved["journal"]))
                accumulators = {name: {stat: saved[f"{name}/{stat}"] for stat in own} for name, own in empty.items()}
        except (OSError, ValueError, KeyError) as err:
            self.log(f"starting over: the checkpoint {self.checkpoint_path.name} is unreadable ({err})")
            return fresh
        changed = _changes(record.get("identity"), self.identity)
        if changed:
            self.log(f"starting over: {changed} since {self.checkpoint_path.name} was written")
            return fresh
        if any(accumulators[n][s].shape != empty[n][s].shape for n in empty for s in empty[n]):
            self.log(f"starting over: the checkpoint {self.checkpoint_path.name} has other shapes")
            return fresh
        self.log(f"resuming {self.checkpoint_path.name}: {len(record['completed'])} chunks already done")
        return self.State(accumulators, set(record["completed"]))

    def checkpoint(self, accumulators: dict, completed: set) -> None:
        if self.path is None:
            return
        arrays = {f"{name}/{stat}": values for name, own in accumulators.items() for stat, values in own.items()}
        journal = json.dumps({"identity": self.identity, "completed": sorted(completed)})

        def write(tmp):
            buffer = io.BytesIO()
            np.savez(buffer, journal=np.asarray(journal), **arrays)
            Path(tmp).write_bytes(buffer.getvalue())

        with _writing(self.path, mid_run=True):
            write_atomically(self.checkpoint_path, write)

    def finish(self, result: xr.Dataset) -> bool:
        """Write the result to OUT.nc; True if it replaced an existing file."""
        try:
            replaced = self.path.exists()
            with _writing(self.path):
                write_atomically(self.path, lambda tmp: result.to_netcdf(tmp, engine="h5netcdf"))
            self.checkpoint_path.unlink(missing_ok=True)
            return replaced
        finally:
            self.release()

    def discard(self) -> None:
        """Bad input: nothing to resume."""
        if self.path is not None:
            self.checkpoint_path.unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None
