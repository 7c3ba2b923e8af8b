"""Sweeps with a `[reduce]` table: statistics accumulated on the devices.

The chunks are those of any sweep (`sweep.engine.plan`); each chunk's outputs
stay on the devices and fold into accumulators there (`kernels.reduce`), so
only the small result cube ever reaches the host. Every `CHECKPOINT_SECONDS`
the accumulators and the finished chunks go to `OUT.nc.partial.npz` in one
atomic write, so a killed sweep resumes from its last checkpoint; the result
is written to `OUT.nc` when complete.
"""
from __future__ import annotations

import functools
import io
import json
import math
import time
from pathlib import Path

import jax
import numpy as np
import xarray as xr

from kernels import reduce as kernel
from kernels.outputs import OUTPUT
from sweep.atomic import write_atomically
from sweep.engine.devices import single_device
from sweep.engine.evaluate import DEFAULT_CHUNK, _dispatch, make_progress, selected_outputs, visible_devices
from sweep.engine.plan import Plan
from sweep.engine.store import (OutputLock, WriteError, _cube_inputs, _changes, _writing, check_finite, identity,
                                open_cube,
                                make_layout)
from sweep.errors import SpecError
from sweep.scenario.sensitivity import is_sensitivity, variable_name
from sweep.scenario.spec import Spec, load_spec

ACCUMULATOR_LIMIT = 4 << 30  # bytes of accumulators a sweep may hold on its devices
CHECKPOINT_SECONDS = 30.0
_STATE = {"min": "min", "argmin": "min", "max": "max", "argmax": "max", "mean": "sum"}


def reduce_shape(spec: Spec, plan: Plan | None = None) -> kernel.ReduceShape:
    """The accumulators' static layout for a scenario with a `[reduce]` table
    (and the chunks' boxes, from `plan`)."""
    reduction = spec.reduce
    reduced = tuple(d in reduction.over for d in spec.dims)
    strides, stride = [0] * len(spec.dims), 1
    for d in reversed(range(len(spec.dims))):
        if not reduced[d]:
            strides[d], stride = stride, stride * spec.shape[d]
    statistics = {_STATE.get(s, "hist") for s in reduction.statistics} | \
        {s for s in reduction.statistics if s in ("argmin", "argmax")}
    words = 2 if per_cell(spec) >= 2**31 else 1
    box_dims, box_shape = (), ()
    if plan is not None:
        box_dims = tuple(d for d, b in enumerate(next(plan.chunks()).box) if isinstance(b, slice))
        box_shape = plan.padded_box_shape() if box_dims else (1,)
    return kernel.ReduceShape(reduced, len(spec.dims) - 1 if spec.sample else -1, tuple(strides), stride,
                              frozenset(statistics), reduction.accuracy, words, box_dims, box_shape)


def per_cell(spec: Spec) -> int:
    """Configurations that fold into each cell of the result."""
    return math.prod(n for d, n in zip(spec.dims, spec.shape) if d in spec.reduce.over)


def accumulator_bytes(spec: Spec) -> int:
    shape = reduce_shape(spec)
    per_output = 0
    for stat in ("min", "max"):
        if stat in shape.statistics:
            per_output += 4 + (4 * shape.words if "arg" + stat in shape.statistics else 0)
    if "sum" in shape.statistics:
        per_output += 8
    if "hist" in shape.statistics:
        per_output += 4 * shape.hist_words * (2 * kernel.bins(shape.accuracy)[2] + 1)
    return per_output * shape.cells * len(spec.outputs)


def check_reduction(spec: Spec) -> None:
    """Accumulators that fit on the devices, or SpecError naming reduce.over."""
    need = accumulator_bytes(spec)
    if need > ACCUMULATOR_LIMIT:
        cells = reduce_shape(spec).cells
        raise SpecError("reduce.over", list(spec.reduce.over),
                        f"keeps {cells:,} cells, whose accumulators take {need / 2**30:.1f} GiB (at most "
                        f"{ACCUMULATOR_LIMIT / 2**30:.0f} GiB): reduce over more keys, or select fewer outputs "
                        "or statistics (a quantile's histogram is the largest; a larger reduce.accuracy shrinks it)")


def chunk_box(spec: Spec, shape: kernel.ReduceShape, chunk) -> kernel.Box:
    """Where a chunk lies in the cube, as the kernel reads it (host arrays)."""
    starts, high = [], 0
    for d, b in enumerate(chunk.box):
        start = b.indices(spec.shape[d])[0] if isinstance(b, slice) else b
        if d == shape.config_dim:
            high, start = start >> kernel.WORD_BITS, start & kernel.LOW
        starts.append(start)
    return kernel.Box(np.asarray(starts, np.int32), np.int32(high), np.int32(chunk.size))


@functools.lru_cache(maxsize=None)
def _accumulator(shape: kernel.ReduceShape, outputs: tuple[str, ...], size: int):
    """The jitted step after the primary kernel, for one accumulator layout:
    the selected outputs, folded at once (never stored), on the device of
    its inputs."""
    def step(acc, primary, params, box):
        return kernel.accumulate(acc, selected_outputs(primary, params, outputs, size), box, shape)

    return jax.jit(step, donate_argnums=0)


class _Lane:
    """One device: whole chunks go to it in turn, and fold into its own
    accumulators, so devices never exchange anything until the end."""

    def __init__(self, device, accumulators):
        self.devices = single_device(device)
        self.acc = self.devices.replicate(accumulators)


def run_reduced(spec: Spec, output=None, chunk: int | None = None, quiet: bool = True, log=None,
                open_result: bool = True, lock=None):
    """`sweep.run` for a scenario with a `[reduce]` table: the small cube of
    statistics (see `sweep.run` for output, resume and lock rules).

    Chunks are dealt round-robin to processes and, within a process, to its
    devices; each device folds whole chunks into its own accumulators, which
    are merged on the host (`merge`) for a checkpoint and at the end."""
    from sweep.engine.runner import _Progress

    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    check_reduction(spec)
    devices = visible_devices()
    target = chunk or DEFAULT_CHUNK
    plan = Plan(spec, target)
    ident = identity(spec, plan.length, target, devices.count)
    log = log or (lambda message: None)
    shape = reduce_shape(spec, plan)
    store = ReduceStore(output if devices.leader else None, ident, log, lock)
    if devices.agree(np.array([store.already_complete]))[0]:
        store.release()
        log(f"{output} is already complete for this scenario and these inputs: nothing to do")
        return open_cube(output) if open_result else None
    empty = kernel.init(shape, spec.outputs)
    state = store.restore(empty)
    done = np.zeros(plan.num_chunks, bool)
    done[list(state.completed)] = True
    done = devices.agree(done)
    restored = devices.agree_tree(state.accumulators)  # process 0 read the checkpoint
    leader_lane = jax.process_index() == 0
    lanes = [_Lane(d, restored if leader_lane and i == 0 else empty) for i, d in enumerate(jax.local_devices())]
    fold = _accumulator(shape, spec.outputs, plan.length)
    completed = set(np.flatnonzero(done).tolist())
    todo = [c for c in plan.chunks() if not done[c.id]]
    processes, rank = jax.process_count(), jax.process_index()
    mine = todo[rank::processes]
    rounds = len(todo) // processes  # local chunks every process has: where they may checkpoint together
    progress = _Progress(make_progress(spec.size, quiet or not devices.leader))
    progress.update(spec.size - sum(c.size for c in todo))
    checked = []  # (lane, chunk, flag): chunks whose outputs are not yet known to be finite
    folded = []  # chunk ids of this process folded so far
    last_checkpoint = time.monotonic()
    try:
        for i, chunk_ in enumerate(mine):
            lane = lanes[i % len(lanes)]
            (primary, params), _ = _dispatch(spec, plan, chunk_, lane.devices, primaries_only=True)
            lane.acc, bad = fold(lane.acc, primary, params, lane.devices.replicate(chunk_box(spec, shape, chunk_)))
            checked.append((lane, chunk_, bad))
            folded.append(chunk_.id)
            _check_finite(spec, plan, checked, keep=len(lanes))
            progress.update(chunk_.size * processes)
            if i + 1 < rounds and _checkpoint_due(devices, last_checkpoint, i):
                _check_finite(spec, plan, checked, keep=0)
                store.checkpoint(_gather(lanes, shape), _completed(todo, completed, processes, i + 1))
                last_checkpoint = time.monotonic()
        _check_finite(spec, plan, checked, keep=0)
        result = statistics(spec, shape, _gather(lanes, shape), devices.count)
        result.attrs["inputs_sha256"] = ident["inputs"]
    except SpecError as err:
        if isinstance(err, WriteError):
            store.release()
        else:
            store.discard()
        raise
    except BaseException:
        if processes == 1:  # a stop request or an error: keep what is folded for a resume
            try:
                _check_finite(spec, plan, checked, keep=0)
                store.checkpoint(_gather(lanes, shape), completed | set(folded))
            finally:
                store.release()
        else:
            store.release()
        raise
    finally:
        progress.close()
    if output is None:
        return result
    if devices.leader:
        if store.finish(result):
            log(f"replaced the existing {output}")
        if open_result:
            return open_cube(output)
    else:
        store.release()
    return None


def _checkpoint_due(devices, last: float, i: int) -> bool:
    """Whether to checkpoint after the i-th local chunk: every
    CHECKPOINT_SECONDS, as process 0's clock says (every process must join)."""
    due = time.monotonic() - last >= CHECKPOINT_SECONDS
    if jax.process_count() == 1:
        return due
    return bool(devices.agree(np.array([due]))[0]) if i % 16 == 15 else False


def _completed(todo, completed: set, processes: int, rounds: int) -> set:
    """Chunks folded once every process has done `rounds` of its own."""
    return completed | {c.id for c in todo[:rounds * processes]}


def _gather(lanes, shape) -> dict:
    """Every device's accumulators, on every process, merged into one (host arrays)."""
    local = merge([jax.device_get(lane.acc) for lane in lanes], shape)
    if jax.process_count() == 1:
        return local
    from jax.experimental import multihost_utils

    stacked = multihost_utils.process_allgather(local)
    return merge([jax.tree.map(lambda a, p=p: np.asarray(a[p]), stacked) for p in range(jax.process_count())],
                 shape)


def merge(parts: list[dict], shape: kernel.ReduceShape) -> dict:
    """One set of accumulators from several (host arrays): the least value
    and, among equal ones, the lexicographically first position; sums and
    counts added."""
    out = {}
    for name in parts[0]:
        own = {}
        first = parts[0][name]
        for stat in ("min", "max"):
            if stat not in first:
                continue
            best, at = first[stat].copy(), first.get("arg" + stat)
            at = None if at is None else at.copy()
            for part in parts[1:]:
                value, where = part[name][stat], part[name].get("arg" + stat)
                better = value < best
                if at is not None:
                    tie, earlier = value == best, np.zeros_like(better)
                    undecided = np.ones_like(better)
                    for w in range(len(at)):
                        earlier |= undecided & (where[w] < at[w])
                        undecided &= where[w] == at[w]
                    better |= tie & earlier
                    at = np.where(better, where, at)
                best = np.where(better, value, best)
            own[stat] = best
            if at is not None:
                own["arg" + stat] = at
        if "sum" in first:
            total = sum(part[name]["sum"].astype(np.float64) - part[name]["carry"] for part in parts)
            own["sum"] = total.astype(np.float32)
            own["carry"] = (own["sum"] - total).astype(np.float32)
        if "hist" in first:
            counts = sum(_counts(part[name]["hist"]) for part in parts)
            if shape.hist_words == 2:
                own["hist"] = np.stack([counts & kernel.LOW, counts >> kernel.WORD_BITS]).astype(np.int32)
            else:
                own["hist"] = counts[None].astype(np.int32)
        out[name] = own
    return out


def _counts(hist: np.ndarray) -> np.ndarray:
    """Histogram counts (int64) from their words."""
    counts = hist[0].astype(np.int64)
    return counts + (hist[1].astype(np.int64) << kernel.WORD_BITS) if len(hist) > 1 else counts


def _check_finite(spec, plan, checked, keep: int) -> None:
    """Look at every folded chunk's non-finite flag but the last `keep` (whose
    fold may still be running). A chunk that had one is evaluated again to
    name the configuration, as an unreduced sweep does."""
    while len(checked) > keep:
        lane, chunk, bad = checked.pop(0)
        if not bool(jax.device_get(bad)):
            continue
        out, sampled = _dispatch(spec, plan, chunk, lane.devices)
        results = jax.device_get(out)
        block = {variable_name(n): v[:chunk.size].reshape(plan.box_shape(chunk)) for n, v in results.items()}
        check_finite(make_layout(spec, 1, plan.disk_chunks()), chunk, block, sampled)


def statistics(spec: Spec, shape: kernel.ReduceShape, acc: dict, devices: int) -> xr.Dataset:
    """The result cube from the accumulators (host arrays)."""
    reduction = spec.reduce
    kept = [(d, n) for d, n, r in zip(spec.dims, spec.shape, shape.reduced) if not r]
    dims = tuple(d for d, _ in kept)
    cell_shape = tuple(n for _, n in kept)
    full = make_layout(spec, devices, tuple(1 for _ in spec.dims))
    coords = {d: (d, full.coords[d][0], full.coords[d][1]) for d in dims if d in full.coords}
    if spec.sample is not None and spec.dims[-1] in dims:
        draws = spec.sample.uniforms(0, spec.sample.n)
        for i, dim in enumerate(spec.sample.dimensions):
            coords[dim.name] = (spec.dims[-1], _sampled_values(dim, draws[:, i]), _plain_attrs(full.sampled[dim.name][1]))
    over = ", ".join(reduction.over)
    count = per_cell(spec)
    data = {}
    for name in spec.outputs:
        var = variable_name(name)
        units, long_name, dtype, flags = _describe(name)
        own = acc[name]
        for stat in reduction.statistics:
            attrs = {"units": units, "long_name": f"{long_name}: {stat} over {over}"}
            if stat in ("min", "max"):
                values = own[stat] if stat == "min" else -own[stat]
                if flags:
                    values = values.astype(dtype)
                    attrs.update(flag_values=np.arange(len(flags), dtype=dtype), flag_meanings=" ".join(flags))
                data[f"{var}_{stat}"] = (dims, values.reshape(cell_shape), attrs)
            elif stat == "mean":
                values = (own["sum"].astype(np.float64) - own["carry"]) / count
                data[f"{var}_mean"] = (dims, values.astype(np.float32).reshape(cell_shape), attrs)
            elif stat in ("argmin", "argmax"):
                for key, (values, key_attrs) in _positions(spec, shape, own[stat], full).items():
                    key_attrs = {**key_attrs, "long_name": f"{key_attrs['long_name']} at the "
                                                           f"{stat[3:]}imum of {var} over {over}"}
                    data[f"{var}_{stat}_{key}"] = (dims, values.reshape(cell_shape), key_attrs)
            else:
                q = dict(reduction.quantiles)[stat]
                values = quantiles(own["hist"], q, reduction.accuracy, integer=bool(flags))
                if flags:
                    values = values.astype(dtype)
                    attrs.update(flag_values=np.arange(len(flags), dtype=dtype), flag_meanings=" ".join(flags))
                attrs["long_name"] += f" (within {reduction.accuracy:g} relative)"
                data[f"{var}_{stat}"] = (dims, values.astype(dtype if flags else np.float32).reshape(cell_shape),
                                         attrs)
    attrs = {**full.attrs, "title": "ssgd-sweep reduced cube", "reduced_over": over,
             "configurations": spec.size}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _describe(name: str):
    """(units, long name, dtype, flags) of an output."""
    if is_sensitivity(name):
        from sweep.scenario.sensitivity import key_of, units
        return units(key_of(name)), f"sensitivity d(iteration_time)/d({key_of(name)})", np.float32, ()
    output = OUTPUT[name]
    return output.units, output.long_name, output.dtype, output.flags


def _positions(spec: Spec, shape: kernel.ReduceShape, words: np.ndarray, full) -> dict:
    """Per reduced dimension (and sampled key), its value at each cell's optimum."""
    out, w = {}, 0
    for d, dim in enumerate(spec.dims):
        if not shape.reduced[d]:
            continue
        if d == shape.config_dim:
            index = (words[w].astype(np.int64) << kernel.WORD_BITS) + words[w + 1]
            w += 2
            out[dim] = (index, {"units": "1", "long_name": "sampled configuration index"})
            draws = spec.sample.uniforms_at(index)
            for i, sampled in enumerate(spec.sample.dimensions):
                out[sampled.name] = (_sampled_values(sampled, draws[:, i]), _plain_attrs(full.sampled[sampled.name][1]))
        else:
            out[dim] = (np.asarray(full.coords[dim][0])[words[w]], full.coords[dim][1])
            w += 1
    return out


def _plain_attrs(attrs: dict) -> dict:
    """A sampled key's labels without its codes' flags (the result holds the values)."""
    return {k: v for k, v in attrs.items() if not k.startswith("flag_")}


def _sampled_values(dim, draws: np.ndarray) -> np.ndarray:
    values = dim.values(draws)
    return np.asarray(dim.choices)[values] if dim.choices is not None else values


def quantiles(hist: np.ndarray, q: float, accuracy: float, integer: bool = False) -> np.ndarray:
    """Quantile q of each cell's histogram ([words, cells, bins]): numpy's
    "linear" definition with every order statistic replaced by its bin's
    representative (within `accuracy` relative); for integer codes, the lower
    order statistic, rounded."""
    counts = _counts(hist)
    cumulative = np.cumsum(counts, axis=-1)
    n = cumulative[:, -1]
    rank = q * (n - 1)
    lower = np.floor(rank)
    fraction = rank - lower
    ranks = (lower, np.minimum(lower + 1, n - 1))
    # The bin of the order statistic of rank r: the first whose cumulative count exceeds r.
    values = [_representative((cumulative <= r[:, None]).sum(axis=-1), accuracy) for r in ranks]
    if integer:
        return np.rint(values[0])
    return values[0] + fraction * (values[1] - values[0])


def _representative(index: np.ndarray, accuracy: float) -> np.ndarray:
    """The value a histogram bin stands for: 2 gamma^k / (gamma + 1), within
    `accuracy` of every value in (gamma^(k-1), gamma^k]."""
    log_gamma, lowest, per_sign = kernel.bins(accuracy)
    k = np.abs(index - per_sign) - 1 + lowest
    magnitude = 2 * np.exp(k * log_gamma) / (np.exp(log_gamma) + 1)
    return np.where(index == per_sign, 0.0, np.sign(index - per_sign) * magnitude)


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


def result_bytes(spec: Spec) -> int:
    """Size of a reduced sweep's result (uncompressed), roughly."""
    shape = reduce_shape(spec)
    arg = sum(shape.words for s in spec.reduce.statistics if s.startswith("arg"))
    return 8 * shape.cells * len(spec.outputs) * (len(spec.reduce.statistics) + arg)


__all__ = ["run_reduced", "check_reduction", "reduce_shape", "statistics", "quantiles", "result_bytes"]
