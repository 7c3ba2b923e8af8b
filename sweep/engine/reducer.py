"""Sweeps with a `[reduce]` table: statistics accumulated on the devices.

The chunks are those of any sweep (`sweep.engine.plan`); each chunk's outputs
stay on the devices and fold into accumulators there (`kernels.reduce`), so
only the small result cube (`sweep.engine.reduce_result`) ever reaches the
host. Every `CHECKPOINT_SECONDS` the merged accumulators and the finished
chunks are checkpointed (`sweep.engine.reduce_store`), so a killed sweep
resumes from its last checkpoint.
"""
from __future__ import annotations

import functools
import math
import time

import jax
import numpy as np

from kernels import reduce as kernel
from sweep.engine.devices import single_device
from sweep.engine.evaluate import (_dispatch, default_chunk, expanded, expansion, fenced_primaries, make_progress,
                                   packed_chunk, selected_outputs, single_gpu_apart, spreads_itself, visible_devices)
from sweep.engine.plan import Plan
from sweep.engine.reduce_result import counts, per_cell, statistics
from sweep.engine.reduce_store import ReduceStore
from sweep.engine.store import WriteError, check_finite, identity, make_layout, open_cube
from sweep.engine.xla import program_jit, straight_code
from sweep.errors import SpecError
from sweep.scenario.sensitivity import variable_name
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


def accumulator_bytes(spec: Spec) -> int:
    return sum(math.prod(size) * np.dtype(dtype).itemsize
               for own in kernel.layout(reduce_shape(spec), spec.outputs).values()
               for size, dtype, _ in own.values())


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


@functools.partial(program_jit, donate_argnums=0,
                   static_argnames=("expansion", "tangents", "fixed_buckets", "shape", "outputs", "size", "straight"))
def _fold_chunk(acc, packed, expansion, box, dag, tangents, fixed_buckets, shape, outputs, size, straight=False,
                single_gpu=None):
    """One chunk's parameters (`expanded`), primaries (`fenced_primaries`,
    the same code as a full cube's), selected outputs and fold into the
    accumulators, in one compiled program: run as two, the primaries were
    written out and read back in a second dispatch, about half the rate on
    2 cores. Also whether any valid configuration gave a non-finite value."""
    params = expanded(packed, expansion)
    primary = fenced_primaries(dag, params, tangents, fixed_buckets, straight, single_gpu)
    return kernel.accumulate(acc, selected_outputs(primary, params, outputs, size), box, shape)


class _Lane:
    """One device: whole chunks go to it in turn, and fold into its own
    accumulators, so devices never exchange anything until the end. The
    chunk's box goes to the fold as host arrays: the accumulators commit
    the call to the lane's device."""

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
    target = chunk or default_chunk(devices.platforms)
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
        turn = 0
        for i, chunk_ in enumerate(mine):
            # Whole chunks in turn to the devices; a program that spreads
            # itself over the cores to the first alone (`spreads_itself`).
            if spreads_itself(plan, chunk_, devices):
                lane = lanes[0]
            else:
                lane, turn = lanes[turn % len(lanes)], turn + 1
            dag, (args, static), tangents, fixed_buckets, _ = packed_chunk(spec, plan, chunk_, lane.devices,
                                                                          sampled_values=False)
            lane.acc, bad = _fold_chunk(lane.acc, args, expansion(static), chunk_box(spec, shape, chunk_), dag,
                                        tangents, fixed_buckets, shape, spec.outputs, plan.length,
                                        straight=straight_code(dag, plan.group_size),
                                        single_gpu=single_gpu_apart(dag, args, static, fixed_buckets))
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
            total = sum(counts(part[name]["hist"]) for part in parts)
            if shape.hist_words == 2:
                own["hist"] = np.stack([total & kernel.LOW, total >> kernel.WORD_BITS]).astype(np.int32)
            else:
                own["hist"] = total[None].astype(np.int32)
        out[name] = own
    return out


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


def result_bytes(spec: Spec) -> int:
    """Size of a reduced sweep's result (uncompressed), roughly."""
    shape = reduce_shape(spec)
    arg = sum(shape.words for s in spec.reduce.statistics if s.startswith("arg"))
    return 8 * shape.cells * len(spec.outputs) * (len(spec.reduce.statistics) + arg)


__all__ = ["run_reduced", "check_reduction", "reduce_shape", "merge", "result_bytes"]
