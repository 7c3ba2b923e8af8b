"""Where a sweep's results go, chunk by chunk: memory, or a netCDF file.

`NetcdfStore` streams every chunk into `OUT.nc.partial` (compressed, chunked
on disk), flushes it, and then records the chunk in `OUT.nc.partial.json`.
Only a finished sweep is renamed to `OUT.nc`, so nothing at the output path
ever looks complete before it is. A sweep that was killed resumes from the
chunks its journal lists, provided the journal belongs to the same sweep:
same resolved scenario, same contents of every file it reads (traces), same
program, chunk size and device count (`identity`). Otherwise it starts over
and says why. While it runs, the store holds an exclusive lock on
`OUT.nc.lock` (which names its pid), so a second run on the same output is
refused instead of corrupting it.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import math
import os
import sys
from pathlib import Path

import h5netcdf
import h5py
import numpy as np
import xarray as xr

from kernels.outputs import OUTPUT
from sweep.atomic import write_text
from sweep.engine.plan import structural_groups
from sweep.graph.compiler import compile_structure
from sweep.graph import zoo
from sweep.graph.layer_trace import file_digest
from sweep.graph.zoo.model_file import file_digest as model_file_digest
from sweep.scenario.sensitivity import is_sensitivity, key_of, variable_name
from sweep.scenario.sensitivity import units as sensitivity_units
from sweep.scenario.schema import KEYS
from sweep.errors import SpecError
from sweep.scenario.spec import Spec, structural_keys

SPACE_MARGIN = 1 << 20  # bytes kept free beyond a chunk's data, for HDF5's metadata and the journal
RESUME_HINT = "; the finished chunks are journaled: free space and run the same command again to resume"
# Errors that mean "this output cannot be written here"; reported in one line.
WRITE_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "read-only file system",
                errno.EACCES: "permission denied", errno.EPERM: "operation not permitted (immutable?)",
                errno.EDQUOT: "disk quota exceeded"}

@dataclasses.dataclass(frozen=True)
class Layout:
    """Names, shapes, types and labels of a sweep's cube."""
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    coords: dict  # dimension coordinate name -> (values, attrs)
    sampled: dict  # sampled-key coordinate name -> (kind, attrs, choices or None), along `config`
    variables: dict  # name -> (dtype, attrs)
    attrs: dict
    disk_chunks: tuple[int, ...]


def make_layout(spec: Spec, devices: int, disk_chunks: tuple[int, ...], inputs: str | None = None) -> Layout:
    coords = {}
    for axis in spec.axes:
        key = KEYS[axis.key]
        coords[axis.name] = (np.asarray(axis.values), {"units": key.units, "long_name": key.long_name})
    sampled = {}
    if spec.sample is not None:
        for d in spec.sample.dimensions:
            key = KEYS[d.key]
            attrs = {"units": key.units, "long_name": f"{key.long_name} (sampled)"}
            kind = key.kind
            if d.choices is not None and all(isinstance(c, str) and c and not any(ch.isspace() for ch in c)
                                             for c in d.choices):
                kind = CODE  # names stored as small integers, labelled CF-style (open_cube decodes them)
                attrs.update(flag_values=np.arange(len(d.choices), dtype=_code_dtype(d.choices)),
                             flag_meanings=" ".join(d.choices))
            sampled[d.name] = (kind, attrs, d.choices)
    variables = {}
    for name in spec.outputs:
        if is_sensitivity(name):
            key = key_of(name)
            variables[variable_name(name)] = (np.float32, {
                "units": sensitivity_units(key),
                "long_name": f"sensitivity d(iteration_time)/d({key})"})
            continue
        output = OUTPUT[name]
        attrs = {"units": output.units, "long_name": output.long_name}
        if output.flags:
            attrs.update(flag_values=np.arange(len(output.flags), dtype=output.dtype),
                         flag_meanings=" ".join(output.flags))
        variables[name] = (output.dtype, attrs)
    attrs = {"title": "ssgd-sweep result cube", "spec": spec.to_toml(), "devices": devices,
             "lowering": lowering_summary(spec)}
    if inputs is not None:  # what `identity` says of scenario, input files and program
        attrs["inputs_sha256"] = inputs
    return Layout(spec.dims, spec.shape, coords, sampled, variables, attrs, disk_chunks)


def lowering_summary(spec: Spec) -> str:
    """How each structural group's DAG is evaluated (sweep.graph.lowering): the
    contracted stream program or the unrolled one, with the reason, labelled by
    the structural keys that vary across the cube."""
    structural = structural_keys(spec)
    varying = [a.key for a in spec.axes if a.key in structural]
    parts = []
    for structure, _ in structural_groups(spec):
        lowered = compile_structure(structure).lowered
        text = lowered.mode + (f" ({lowered.reason})" if lowered.reason else "")
        label = ", ".join(f"{key}={structure[key]}" for key in varying)
        parts.append(f"{label}: {text}" if label else text)
    return "; ".join(parts)


CODE = "code"  # the kind of a sampled name stored as its index among the choices


def _code_dtype(choices) -> type:
    return np.int8 if len(choices) <= 127 else np.int16 if len(choices) <= 32767 else np.int32


def without_flags(attrs: dict) -> dict:
    """Labels without the CF flags of a code (for the decoded values)."""
    return {k: v for k, v in attrs.items() if not k.startswith("flag_")}


def decode_sampled(layout: Layout, name: str, values: np.ndarray) -> np.ndarray:
    """A sampled key's values from what `sweep.engine.plan.Plan.columns`
    gives (indices into the choices, for a list of choices)."""
    _, _, choices = layout.sampled[name]
    return values if choices is None else np.asarray(choices)[values]


def open_cube(path) -> xr.Dataset:
    """A cube written by `run`, with sampled names decoded from their codes
    (CF `flag_values` / `flag_meanings`, which xarray leaves as integers) back
    to strings; outputs such as `bottleneck` keep their codes."""
    ds = xr.open_dataset(path, engine="h5netcdf")
    for name, coord in list(ds.coords.items()):
        if name in ds.dims or "flag_meanings" not in coord.attrs:
            continue
        meanings = np.asarray(coord.attrs["flag_meanings"].split(), dtype=object)
        ds = ds.assign_coords({name: (coord.dims, meanings[coord.values], without_flags(coord.attrs))})
    return ds


class MemoryStore:
    """Collects results in memory and returns an xarray Dataset."""
    already_complete = False

    def __init__(self, layout: Layout):
        self.layout = layout
        self.completed: set[int] = set()
        self.arrays = {name: np.empty(layout.shape, dtype) for name, (dtype, _) in layout.variables.items()}
        n = layout.shape[-1] if layout.sampled else 0
        self.sampled = {name: np.empty(n, object if kind in (str, CODE) else kind)
                        for name, (kind, _, _) in layout.sampled.items()}

    def write(self, chunk, block: dict[str, np.ndarray], sampled: dict[str, np.ndarray]) -> None:
        check_finite(self.layout, chunk, block, sampled)
        for name, values in block.items():
            self.arrays[name][chunk.box] = values
        for name, values in sampled.items():
            self.sampled[name][chunk.box[-1]] = decode_sampled(self.layout, name, values)

    def finish(self) -> xr.Dataset:
        lay = self.layout
        coords = {name: (name, values, attrs) for name, (values, attrs) in lay.coords.items()}
        for name, (_, attrs, _) in lay.sampled.items():
            coords[name] = (lay.dims[-1], self.sampled[name], without_flags(attrs))
        data = {name: (lay.dims, self.arrays[name], attrs) for name, (_, attrs) in lay.variables.items()}
        return xr.Dataset(data, coords=coords, attrs=lay.attrs)

    def abort(self) -> None:
        pass

    discard = abort


class NullStore:
    """For processes other than 0 in a cluster: they compute, process 0 writes.
    Every process has every result, so all stop together on a non-finite one."""
    completed: frozenset = frozenset()
    already_complete = False

    def __init__(self, layout: Layout | None = None):
        self.layout = layout

    def write(self, chunk, block, sampled) -> None:
        if self.layout is not None:
            check_finite(self.layout, chunk, block, sampled)

    def abort(self) -> None:
        pass

    discard = abort


class NetcdfStore:
    """Streams chunks into OUT.nc.partial; renames to OUT.nc when complete.

    `identity` (see `identity`) says which sweep this is: a journal of another
    sweep is discarded with a one-line note through `log`; an existing OUT.nc
    of the same inputs makes `already_complete` true and nothing is written.
    `lock`: an OutputLock the caller already holds (else one is taken); the
    store releases it when it finishes, aborts or discards.
    """

    def __init__(self, path: str | os.PathLike, layout: Layout, identity: dict, log=None,
                 lock: "OutputLock | None" = None):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.journal = self.path.with_name(self.path.name + ".partial.json")
        self.layout = layout
        self.identity = identity
        self.log = log or (lambda message: None)
        self.file = None
        self.lock = lock or OutputLock(self.path)  # refuses a second writer; raises SpecError
        try:
            self.already_complete = self.path.exists() and _cube_inputs(self.path) == identity["inputs"]
            if self.already_complete:
                self.completed = set()
                return
            with _writing(self.path):
                self.completed = self._resume()
                if self.completed is None:
                    self.completed = set()
                    self._check_space(0, mid_run=False)
                    self._create()
                # Chunks are written with h5py itself: its flush reaches the file
                # (h5netcdf's flush does not write HDF5's caches out).
                self.file = h5py.File(self.partial, "a")
        except BaseException:
            self._close()
            self.lock.release()
            raise

    def _resume(self) -> set[int] | None:
        if not self.journal.exists():
            return None
        try:
            record = json.loads(self.journal.read_text())
            done = set(record["completed"])
        except (OSError, ValueError, KeyError, TypeError):
            self.log(f"starting over: the journal {self.journal.name} is unreadable")
            return None
        changed = _changes(record.get("identity"), self.identity)
        if changed:
            self.log(f"starting over: {changed} since {self.partial.name} was written "
                     f"({len(done)} finished chunk(s) discarded)")
            return None
        try:
            with h5netcdf.File(self.partial, "r"):
                pass  # a file killed mid-write may not open: then start over
        except (OSError, ValueError):
            self.log(f"starting over: {self.partial.name} is damaged ({len(done)} finished chunk(s) discarded)")
            return None
        if done:
            self.log(f"resuming {self.partial.name}: {len(done)} chunks already done")
        return done

    def _create(self) -> None:
        try:
            self._create_files()
        except BaseException:
            self.partial.unlink(missing_ok=True)  # nothing to resume: leave no file
            self.journal.unlink(missing_ok=True)
            raise

    def _create_files(self) -> None:
        self.journal.unlink(missing_ok=True)
        lay = self.layout
        with h5netcdf.File(self.partial, "w") as f:
            f.dimensions = dict(zip(lay.dims, lay.shape))
            for name, (values, attrs) in lay.coords.items():
                _coordinate(f, name, (name,), values, attrs)
            for name, (kind, attrs, choices) in lay.sampled.items():
                _coordinate(f, name, (lay.dims[-1],), None, attrs, _code_dtype(choices) if kind == CODE else kind)
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
        check_finite(self.layout, chunk, block, sampled)
        self._check_space(sum(v.nbytes for v in block.values()) + sum(np.asarray(v).nbytes for v in sampled.values()))
        with _writing(self.path, mid_run=True):
            for name, values in block.items():
                self.file[name][chunk.box] = values
            for name, values in sampled.items():
                var = self.file[name]
                if self.layout.sampled[name][0] != CODE:
                    values = decode_sampled(self.layout, name, values)
                if var.dtype.kind == "O":
                    var[chunk.box[-1]] = values.astype(object)
                else:
                    var[chunk.box[-1]] = values.astype(var.dtype)
            self.file.flush()
            self.completed.add(chunk.id)
            self._write_journal()

    def _check_space(self, need: int, mid_run: bool = True) -> None:
        """Stop before HDF5 meets a full disk: a write that fails inside it
        leaves its caches dirty, and HDF5 then crashes the process on exit."""
        try:
            st = os.statvfs(self.partial.parent)
        except OSError:
            return
        free = st.f_bavail * st.f_frsize
        need += SPACE_MARGIN
        if free < need:
            raise WriteError(self.path, f"cannot write {self.partial}: no space left on the device ({free:,} bytes "
                                        f"free, {'a chunk needs' if mid_run else 'the sweep needs at least'} "
                                        f"{need:,}){RESUME_HINT if mid_run else ''}", mid_run=mid_run)

    def _write_journal(self) -> None:
        write_text(self.journal, json.dumps({"identity": self.identity, "completed": sorted(self.completed)}))

    def finish(self) -> bool:
        """Rename the complete cube to OUT.nc; True if it replaced an existing file."""
        try:
            replaced = self.path.exists()
            if self.file is not None:
                with _writing(self.path, mid_run=True):
                    self._close()
                    os.replace(self.partial, self.path)
                self.journal.unlink(missing_ok=True)
            return replaced
        finally:
            self.lock.release()

    def abort(self) -> None:
        """Keep what is done for a resume; the output path stays untouched."""
        try:
            self._close()
        finally:
            self.lock.release()

    def discard(self) -> None:
        """Bad input: nothing to resume, leave no file behind."""
        try:
            self._close()
            self.partial.unlink(missing_ok=True)
            self.journal.unlink(missing_ok=True)
        finally:
            self.lock.release()

    def _close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except (OSError, RuntimeError, ValueError):
                pass  # a failed disk: the journal still lists only chunks that were flushed
            self.file = None


class OutputLock:
    """An exclusive lock on OUT.lock for the whole run, holding the owner's pid.

    flock locks go with the process: a run that is killed leaves an unlocked
    file, which the next run takes over. The file is removed on release."""

    def __init__(self, path: Path):
        self.path = path.with_name(path.name + ".lock")
        self.fd = None
        for _ in range(10):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise write_error(path, err) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                owner = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise SpecError("output", str(path), f"in use by another run (pid {owner}, lock {self.path.name}); "
                                                     "wait for it to finish or choose another output") from None
            try:  # the previous owner may have removed the file between our open and lock: retry
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise SpecError("output", str(path), f"cannot take the lock {self.path.name}")
        self.fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as err:
            self.release()
            raise write_error(path, err) from None

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still held: no one else can hold this file
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


class WriteError(SpecError):
    """The output cannot be written (full disk, read-only, no permission).
    `mid_run`: after chunks were written (a resume can continue them)."""

    def __init__(self, path, reason: str, mid_run: bool = False, inside_hdf5: bool = False):
        self.mid_run = mid_run
        self.inside_hdf5 = inside_hdf5  # HDF5 itself failed: its state is not safe to clean up
        super().__init__("output", str(path), reason)


def write_error(path, err: BaseException, mid_run: bool = False, hdf5: bool = False) -> WriteError | BaseException:
    """A WriteError for a disk or permission failure; any other error unchanged.
    `hdf5`: the failure happened inside an HDF5 file (see WriteError.inside_hdf5)."""
    code = getattr(err, "errno", None)
    text = str(err)
    if code not in WRITE_ERRORS:  # h5py reports HDF5's errors without errno: read its message
        code = next((c for c, name in ((errno.ENOSPC, "No space left"), (errno.EROFS, "Read-only file system"),
                                       (errno.EACCES, "Permission denied"), (errno.EPERM, "Operation not permitted"),
                                       (errno.EDQUOT, "Disk quota exceeded")) if name in text), None)
    if code is None:
        return err
    where = getattr(err, "filename", None) or path
    what = f"cannot write {where}: {WRITE_ERRORS[code]}"
    if mid_run:
        what += RESUME_HINT
    return WriteError(path, what, mid_run and code == errno.ENOSPC, inside_hdf5=hdf5)


class _writing:
    """Turns a disk or permission failure into a one-line WriteError."""

    def __init__(self, path, mid_run: bool = False):
        self.path, self.mid_run = path, mid_run

    def __enter__(self):
        # When HDF5 fails, its objects fail again as they are freed while the
        # error unwinds (h5py prints "Exception ignored in ObjectID.__dealloc__"
        # with a traceback, through both hooks): the one line says it all.
        self.hooks = sys.excepthook, sys.unraisablehook
        sys.excepthook = sys.unraisablehook = _silent
        return self

    def __exit__(self, kind, err, tb):
        converted = None
        if isinstance(err, (OSError, RuntimeError)):
            converted = write_error(self.path, err, self.mid_run, hdf5=True)
        if converted is None or converted is err:
            sys.excepthook, sys.unraisablehook = self.hooks
            return False
        raise converted from None  # (the hooks stay silent: HDF5's state is beyond repair)


def _silent(*args) -> None:
    pass


def check_finite(layout: Layout, chunk, block: dict[str, np.ndarray], sampled: dict[str, np.ndarray]) -> None:
    """A non-finite output is an error naming the configuration, never a silent NaN."""
    for name, values in block.items():
        if values.dtype.kind != "f":
            continue
        bad = ~np.isfinite(values)
        if not bad.any():
            continue
        where = np.unravel_index(int(np.argmax(bad)), values.shape) if values.ndim else ()
        point = _configuration(layout, chunk, where, sampled)
        raise SpecError(name, float(values[where]), f"non-finite output at configuration {point}: its values "
                                                    "are beyond what the model can represent (float32)")


def _configuration(layout: Layout, chunk, where: tuple, sampled: dict) -> str:
    """`key=value` of every swept or sampled key at one position of a chunk's block."""
    positions = iter(where)
    parts = []
    for dim, b in zip(layout.dims, chunk.box):
        if isinstance(b, slice):
            offset = next(positions)
            index = (b.start or 0) + offset
        else:
            offset, index = None, b
        if dim in layout.coords:
            parts.append(f"{dim}={_plain(layout.coords[dim][0][index])!r}")
        else:  # the sampled `config` dimension
            parts.append(f"{dim}={index}")
            for name, values in sampled.items():
                value = decode_sampled(layout, name, np.asarray(values)[offset if offset is not None else 0])
                parts.append(f"{name}={_plain(value)!r}")
    return ", ".join(parts) or "the single configuration"


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _cube_inputs(path: Path) -> str | None:
    """The `inputs_sha256` attribute of an existing cube, or None."""
    try:
        with h5py.File(path, "r") as f:
            value = f.attrs.get("inputs_sha256")
    except (OSError, ValueError):
        return None
    return value.decode() if isinstance(value, bytes) else value


MODEL_FILE = "model "  # prefix of a model file's entry among the digested files (the others are traces)


def _changes(old: dict | None, new: dict) -> str | None:
    """What differs between two identities, in words, or None."""
    if not isinstance(old, dict):
        return "the journal is from an older version"
    if old.get("code") != new["code"]:
        return "the program changed"
    if old.get("scenario") != new["scenario"]:
        return "the scenario changed"
    old_files = old.get("files", {})
    for path, digest in new["files"].items():
        if old_files.get(path) != digest:
            if path.startswith(MODEL_FILE):
                return f"the model file {path[len(MODEL_FILE):]} changed"
            return f"the compute.trace file {path} changed"
    if set(old_files) != set(new["files"]):
        return "the input files changed"
    if old.get("chunk") != new["chunk"] or old.get("length") != new["length"]:
        return f"--chunk changed ({old.get('chunk')} -> {new['chunk']})"
    if old.get("devices") != new["devices"]:
        return f"the device count changed ({old.get('devices')} -> {new['devices']})"
    return None


def identity(spec: Spec, chunk_length: int, target: int, devices: int) -> dict:
    """What a journal must match to be resumed: the resolved scenario, the
    contents (sha256) of every file the sweep reads, the program, the chunk
    size and the device count. `inputs` digests the first three: a cube's
    `inputs_sha256` attribute."""
    scenario = hashlib.sha256(spec.to_toml().encode()).hexdigest()
    files = {path: file_digest(path) for path in sorted(t for t in spec.values("compute.trace") if t is not None)}
    files.update({f"{MODEL_FILE}{path}": model_file_digest(path) for path in sorted(m for m in spec.values("model")
                                                                                      if zoo.is_model_file(m))})
    code = code_digest()
    inputs = hashlib.sha256(json.dumps([scenario, files, code]).encode()).hexdigest()
    return {"inputs": inputs, "scenario": scenario, "files": files, "code": code,
            "chunk": target, "length": chunk_length, "devices": devices}


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of the program's sources (sweep and kernels): results of another version never mix."""
    digest = hashlib.sha256()
    for package in ("sweep", "kernels"):
        root = Path(__file__).resolve().parents[2] / package
        for source in sorted(root.rglob("*.py")):
            digest.update(str(source.relative_to(root.parent)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def estimate_bytes(layout: Layout) -> int:
    """Uncompressed size of a cube: its variables and coordinates."""
    size = math.prod(layout.shape)
    total = sum(np.dtype(dtype).itemsize for dtype, _ in layout.variables.values()) * size
    n = layout.shape[-1] if layout.sampled else 0
    total += sum(16 if kind is str else 1 if kind == CODE else 8 for kind, _, _ in layout.sampled.values()) * n
    total += sum(np.asarray(values).nbytes for values, _ in layout.coords.values())
    return int(total)


def _coordinate(f, name, dims, values, attrs, kind=None):
    """A coordinate variable; strings as variable-length UTF-8, booleans as
    int8 flagged for xarray's decoder."""
    kind = kind or (str if values.dtype.kind in "UO" else bool if values.dtype == bool else None)
    if isinstance(kind, type) and issubclass(kind, np.integer):  # codes of sampled names
        var = f.create_variable(name, dims, kind)
    elif kind is str:
        var = f.create_variable(name, dims, h5py.string_dtype(),
                                data=None if values is None else values.astype(object))
    elif kind is bool:
        var = f.create_variable(name, dims, np.int8, data=None if values is None else values.astype(np.int8))
        var.attrs["dtype"] = "bool"
    else:
        dtype = np.float64 if kind is float else np.int64 if kind is int else values.dtype
        var = f.create_variable(name, dims, dtype, data=values)
    var.attrs.update(attrs)
