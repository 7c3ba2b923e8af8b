"""Evaluate a sweep chunk by chunk, streaming results to a store.

Chunks come from `sweep.engine.plan.Plan`; each chunk's scenario values are resolved
to kernel parameters on the host, sharded over every device, and evaluated by
one jitted kernel per DAG shape. Chunk i+1 is dispatched before chunk i's
results are fetched and written, so the devices compute while the host writes.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from kernels.broadcast import over_box
from kernels.iteration import derived_outputs, iteration_outputs, iteration_primaries
from kernels.parameters import Params
from sweep.graph import zoo
from sweep.graph.compiler import CompiledDag, compile_structure, compile_structure_uncached
from sweep.engine import device_draws, group_params, single_gpu
from sweep.engine.devices import Devices, single_device, visible_devices
from sweep.engine.params import Column, kernel_params, pack, unpack
from sweep.engine.plan import Plan
from sweep.engine.xla import closed_form, program_jit, straight_code
from sweep.errors import SpecError
from sweep.scenario.sensitivity import is_sensitivity, key_of, tangent_rule, variable_name
from sweep.scenario.spec import Spec, has_fixed_buckets

DEFAULT_CHUNK = 1 << 18  # on CPUs
# On a GPU a chunk must be large enough to hide the host's fixed work per
# chunk: a 2**30 resnet50/wfbp [reduce] sweep on one H200 ran at 79 M/s with
# chunks of 2**18, 0.78 G/s with 2**22 and 1.69 G/s with 2**24 (2**26: 1.84).
GPU_CHUNK = 1 << 24


def default_chunk(platforms) -> int:
    """Configurations per chunk when the caller names none, for devices of
    these platforms (`jax.Device.platform` strings)."""
    return GPU_CHUNK if any(p == "gpu" for p in platforms) else DEFAULT_CHUNK

# Traces of the sweep kernel per output selection: tests assert there are no recompiles.
TRACES: collections.Counter = collections.Counter()


@jax.jit
def evaluate_params(dag, params):
    """Outputs ([C] arrays) for explicit per-configuration parameter arrays.

    `params` is what `sweep.engine.params.kernel_params` returns, possibly edited
    (e.g. a bisection over `inter_bandwidth`); `dag` from `sweep.graph.compiler.compile_structure`.
    """
    return iteration_outputs(dag, params)


@functools.partial(program_jit, static_argnames=("outputs", "size", "tangents", "fixed_buckets", "straight"))
def _sweep_kernel(dag, params, outputs, size, tangents=(), fixed_buckets=False, straight=False, single_gpu=None):
    """The requested outputs for one chunk: `fenced_primaries`, then the
    outputs. `tangents` holds, per sensitivity output, its (parameter,
    multiplier) pairs (see sweep.scenario.sensitivity); `fixed_buckets`,
    that the scenario only ever uses bsp or wfbp; `straight`, that the
    program runs as straight-line code (`sweep.engine.xla.straight_code`);
    `single_gpu`, the chunk's single-GPU time if evaluated apart
    (`sweep.engine.single_gpu`)."""
    TRACES[outputs] += 1  # runs only while tracing
    return selected_outputs(fenced_primaries(dag, params, tangents, fixed_buckets, straight, single_gpu), params,
                            outputs, size)


@functools.partial(program_jit, static_argnames=("expansion", "outputs", "size", "tangents", "fixed_buckets",
                                                 "straight"))
def _chunk_kernel(dag, packed, expansion, outputs, size, tangents=(), fixed_buckets=False, straight=False,
                  single_gpu=None):
    """`_sweep_kernel` on a chunk's packed parameters (`_packed`), expanded
    in the same program (`expanded`)."""
    return _sweep_kernel(dag, expanded(packed, expansion), outputs, size, tangents, fixed_buckets, straight,
                         single_gpu)


def fenced_primaries(dag, params, tangents, fixed_buckets, straight=False, single_gpu=None):
    """The primary kernel between optimisation barriers, for use inside a
    larger program. Fenced, it compiles to the same code whatever surrounds
    it (a full cube's outputs, a reduction's fold), so the two agree bit for
    bit (unfenced, a sample's iteration times moved by an ulp); and XLA
    cannot fuse the channel evaluation into every output that divides by
    the iteration time (`kernels.iteration.derived_outputs`)."""
    barrier = jax.lax.optimization_barrier
    inputs = dict(params) if single_gpu is None else {**params, SINGLE_GPU: single_gpu}
    return barrier(_primary_kernel(dag, barrier(inputs), tangents, fixed_buckets, straight))


# The key under which `_primary_kernel` gets a single-GPU time evaluated apart.
SINGLE_GPU = "single_gpu_time"


@functools.partial(jax.jit, static_argnames=("tangents", "fixed_buckets", "straight"))
def _primary_kernel(dag, params, tangents, fixed_buckets, straight=False):
    """`_primaries` over a chunk, tile by tile on CPUs; `params`, a dict
    of kernel parameters (and `SINGLE_GPU`, if evaluated apart)."""
    TRACES[tangents, fixed_buckets] += 1  # runs only while tracing
    primaries = functools.partial(_primaries, dag, tangents=tangents, fixed_buckets=fixed_buckets,
                                  straight=straight)
    if closed_form(dag, fixed_buckets):
        return primaries(params)  # it streams well untiled (tiles measured no faster)
    if jax.default_backend() != "cpu":
        return primaries(params)  # a GPU wants the whole chunk: one tile could not fill it (not measured)
    if dag.mode == "contracted":
        return by_tiles(primaries, params, CHANNEL_TILE)
    if straight:  # no registers: each device's share is TILE
        return by_tiles(primaries, params, TILE * jax.device_count())
    itemsize = max(v.dtype.itemsize for v in params.values() if jnp.issubdtype(v.dtype, jnp.floating))
    # A chunk spread over every device leaves each a tile's share (`by_tiles`).
    return by_tiles(primaries, params, unrolled_tile(dag, itemsize, jax.device_count()))


def _primaries(dag, params, tangents, fixed_buckets, straight):
    params = dict(params)
    t_free = params.pop(SINGLE_GPU, None)
    params = Params.of(params)
    out = iteration_primaries(dag, params, fixed_buckets, straight, t_free)
    floats = {k: v for k, v in params.items() if jnp.issubdtype(v.dtype, jnp.floating)}

    def iteration_time(float_params):
        return iteration_primaries(dag, {**params, **float_params}, fixed_buckets, straight)["iteration_time"]

    for name, rule in tangents:
        direction = {k: jnp.zeros_like(v) for k, v in floats.items()}
        for param, multiplier in rule:
            scale = 1.0 if multiplier is None else floats[multiplier]  # host made it no wider than param
            direction[param] = jnp.ones_like(floats[param]) * scale
        out[name] = jax.jvp(iteration_time, (floats,), (direction,))[1]
    return out


# Configurations per tile on CPUs. Evaluating a chunk tile by tile (a loop
# over tiles, each a whole program on [TILE] vectors) keeps a program's live
# values in cache: on 2 cores the mgwfbp channel ran 2.2x, the unrolled
# ZeRO-3 program 13x and the layer-wise one 1.5x faster with 1,024 than on
# a whole 2**16-2**18 chunk (the layer-wise one 3.7x since its chains are
# scans: 0.90 against 0.25 M/s on 2**16, EPYC); bsp/wfbp's closed form gains
# nothing. 512 was no faster in sweep.run, and 2,048 fell off a cliff for
# ZeRO-3 (0.42 -> 0.15 M/s; layer-wise 0.73 M/s): the best tile depends on
# the cache.
TILE = 1024
# The contracted program's channel scan (mgwfbp, fusion, mixed strategies)
# carries a few [tile] values through ~160 steps: larger tiles amortise each
# step's overhead. resnet50/mgwfbp sweep.run on 2**20, one device, EPYC,
# alternating: 1,024 -> 7.9 / 7.5 M/s, 4,096 -> 10.2 / 9.2 M/s (two
# devices: 10.6 / 10.2 against 10.2 / 11.5, level); the whole 2**16 chunk
# was slower again (kernel 9.1 against 12.6 M/s at 4,096 and 8,192).
CHANNEL_TILE = 4096
# A register scan (`kernels.program._scan`) carries its registers, [R, tile],
# through every step, and ZeRO-3 fell off a cliff once they reached half a
# MiB (sweep.run on the benchmark's grids, 2-core Xeon, float32: resnet50,
# 113 registers, 695 k/s at 1,024 (462 KiB) and 108 k/s at 2,048; bert_large,
# 203 registers, 72 k/s at 1,024 (831 KiB) and 314 k/s at 512). That is XLA's
# CPU parallel task assignment: it splits a loop fusion over threads by the
# size of its output, one share per 256 KiB, and the fusion that writes one
# register in place has the whole register file as its output, so from 512
# KiB on every step of the scan waits for a second thread (on one core,
# `taskset -c 0`, the 2,048 tile ran at 330 k/s, not 108). The tile of an
# unrolled program halves from TILE until its largest register file is
# below the budget.
REGISTER_BUDGET_BYTES = 512 * 1024
MIN_TILE = 128


def unrolled_tile(dag: CompiledDag, itemsize: int, shards: int = 1) -> int:
    """Configurations per tile of an unrolled program whose tiles are
    split over `shards` devices: each device's share is TILE, halved while
    the largest register scan's registers ([R, share] of `itemsize` bytes)
    would reach `REGISTER_BUDGET_BYTES`."""
    registers = max((seg.num_regs + 1 for seg in dag.lowered.program.segments if seg.kind == "scan"), default=0)
    share = TILE
    while share > MIN_TILE and registers * share * itemsize >= REGISTER_BUDGET_BYTES:
        share //= 2
    return share * shards


def by_tiles(fn, params, tile: int):
    """`fn(params)` (a dict of [C] or [1] arrays) evaluated `tile`
    configurations at a time. Configuration c = i * T + t sits in tile t at
    position i, so the tiles interleave and a chunk sharded over devices
    (contiguous blocks of configurations) stays sharded within every tile.
    Chunks that are not a multiple of `tile` run whole."""
    size = max(v.shape[-1] for v in params.values())
    if size <= tile or size % tile:
        return fn(params)
    count = size // tile
    wide = {k: v.reshape(tile, count).T for k, v in params.items() if v.shape[-1] == size}
    narrow = {k: v for k, v in params.items() if k not in wide}
    tiles = jax.lax.map(lambda w: fn({**narrow, **w}), wide)  # [count, tile] or [count, 1]
    return {k: v.T.reshape(size) if v.shape[-1] == tile else v[0] for k, v in tiles.items()}


def selected_outputs(primary, params, outputs, size):
    """The outputs asked for, [size] each, from the primaries."""
    out = {**primary, **derived_outputs(primary, params)}
    # Outputs that depend on single-valued keys only come out as [1]: broadcast.
    return {name: jnp.broadcast_to(out[name], (size,)) for name in outputs}


def run_plan(spec: Spec, store, plan: Plan, devices: Devices, progress=None) -> None:
    """Evaluate every chunk of `plan` not yet in `store.completed`."""
    done = np.zeros(plan.num_chunks, bool)
    done[list(store.completed)] = True
    done = devices.agree(done)
    pending = None
    for chunk in plan.chunks():
        if done[chunk.id]:
            if progress is not None:
                progress.update(chunk.size)
            continue
        out, sampled = _dispatch(spec, plan, chunk, devices)
        if pending is not None:
            _finish(*pending, plan, store, devices, progress)
        pending = (chunk, out, sampled)
    if pending is not None:
        _finish(*pending, plan, store, devices, progress)


def _dispatch(spec, plan, chunk, devices):
    """Start a chunk on the devices: its outputs and its sampled values."""
    devices = chunk_devices(plan, chunk, devices)
    dag, (args, static), tangents, fixed_buckets, sampled = packed_chunk(spec, plan, chunk, devices)
    out = _chunk_kernel(dag, args, expansion(static), spec.outputs, chunk.padded, tangents, fixed_buckets,
                        straight=straight_code(dag, plan.group_size),
                        single_gpu=single_gpu_apart(dag, args, static, fixed_buckets))
    return out, sampled  # asynchronous


def single_gpu_apart(dag, args, static, fixed_buckets):
    """A chunk's single-GPU time [C], evaluated over the values it depends
    on (`sweep.engine.single_gpu`), from `packed_chunk`'s arguments; None
    where the kernel evaluates it with the rest."""
    read = single_gpu.plan(dag, fixed_buckets, static)
    if read is None:
        return None
    return single_gpu.compact(dag, args[0], args[1], layout=static["layout"], box=static["box"],
                              length=static["length"], sharding=static["sharding"], varying=static["varying"],
                              read=read, fixed_buckets=fixed_buckets)


def spreads_itself(plan: Plan, chunk, devices: Devices) -> bool:
    """Whether the chunk's program is bsp/wfbp's closed form (`closed_form`)
    on CPU devices: untiled, its large loops already run on every core of
    one device (XLA's CPU backend splits them), so a second device on the
    same cores only contends with the first. Split over two devices on two
    cores, a reduced 2**30 resnet50/wfbp sweep ran at 0.75-0.81x the rate of
    one (experiments/BENCHMARKS.md). Cached on the plan per structural group."""
    cache_key = _group_key(chunk)
    if cache_key not in plan.spreads:
        plan.spreads[cache_key] = closed_form(compile_structure(chunk.structure), has_fixed_buckets(plan.spec))
    return plan.spreads[cache_key] and devices.platforms == {"cpu"}


def chunk_devices(plan: Plan, chunk, devices: Devices) -> Devices:
    """The devices a chunk of a full cube runs on: all of them, but the
    first alone for a program that spreads itself (`spreads_itself`) in a
    single process (several processes evaluate every chunk together)."""
    if devices.count > 1 and jax.process_count() == 1 and spreads_itself(plan, chunk, devices):
        return single_device(devices.mesh.devices.flat[0])
    return devices


def packed_chunk(spec, plan, chunk, devices, sampled_values: bool = True):
    """(compiled DAG, `_packed` parameters, tangent rules, fixed_buckets,
    sampled values) of a chunk: everything its kernel needs, the parameters
    still compact (`expand` makes them [C] on the devices)."""
    drawing = _draws(spec, plan, chunk)
    group = _group_params(spec, plan, chunk) if drawing is None else None
    if group is not None:  # a grid: the chunk's buffers cut from its group's
        packed = _placed(*group.packed(plan, chunk), plan, chunk, devices, _varying(spec, plan, chunk))
        return compile_structure(chunk.structure), packed, group.tangents, has_fixed_buckets(spec), {}
    dag, params, tangents, fixed_buckets, sampled = _chunk_inputs(spec, plan, chunk, drawing, sampled_values)
    packed = _packed(params, plan, chunk, devices, _varying(spec, plan, chunk), drawing)
    return dag, packed, tangents, fixed_buckets, sampled


def _group_params(spec, plan, chunk) -> group_params.GroupParams | None:
    """The parameters of the chunk's structural group (`sweep.engine.group_params`),
    built when the chunks reach a new group; None where chunks resolve their own."""
    key = group_params.group_key(plan, chunk)
    if plan.group_params is None or plan.group_params[0] != key:
        model = zoo.model_of(chunk.structure)
        plan.group_params = key, group_params.build(spec, plan, chunk, lambda columns: _params(spec, columns, model))
    return plan.group_params[1]


def _group_key(chunk) -> tuple:
    """A chunk's structural group, as a key of the plan's per-group caches."""
    return tuple(sorted((k, str(v)) for k, v in chunk.structure.items()))


def _draws(spec, plan, chunk):
    """(DrawPlan, thresholds) where the devices draw this
    scenario's sample (`sweep.engine.device_draws`), else None. Cached on
    the plan per structural group."""
    if spec.sample is None:
        return None
    cache_key = _group_key(chunk)
    if cache_key not in plan.draws:
        model = zoo.model_of(chunk.structure)
        found = None
        if not any(is_sensitivity(name) for name in spec.outputs):
            found = device_draws.DrawPlan.of(spec, model, lambda columns: _params(spec, columns, model)[0])
        plan.draws[cache_key] = found and (found, device_draws.thresholds(spec, found))
    return plan.draws[cache_key]


def _on_devices(params: Params, plan: Plan, chunk, devices: Devices, varying: frozenset, drawing=None) -> Params:
    """A chunk's compact host parameters as the kernels' [C] parameters on
    the devices: packed into one float and one integer buffer (two copies to
    the devices, not one per parameter), then `expand`ed there (with the
    draws of a sample drawn on the devices: `drawing`, from `_draws`)."""
    args, static = _packed(params, plan, chunk, devices, varying, drawing)
    return expand(*args, **static)


def _packed(params: Params, plan: Plan, chunk, devices: Devices, varying: frozenset, drawing=None):
    """(`expand`'s array arguments, on the devices; its static arguments)."""
    return _placed(*pack(params), plan, chunk, devices, varying, drawing)


def _placed(layout: tuple, floats, ints, plan: Plan, chunk, devices: Devices, varying: frozenset, drawing=None):
    """`_packed` from the packed host buffers."""
    draw_plan, limits = drawing or (None, ())
    words = device_draws.chunk_words(plan.spec, chunk) if drawing else np.zeros(0, np.uint32)
    static = dict(layout=layout, box=plan.padded_box_shape(), length=chunk.padded, sharding=devices.sharded,
                  varying=varying, draw_plan=draw_plan)
    if devices.count == 1 and jax.process_count() == 1:
        # One device: one copy commits `expand` to it, the rest go as host
        # arrays (jit copies them itself, a tenth of device_put's cost).
        return [jax.device_put(floats, devices.mesh.devices.flat[0]), ints, limits, words], static
    return devices.replicate([floats, ints, limits, words]), static


@functools.partial(jax.jit, static_argnames=("layout", "box", "length", "sharding", "varying", "draw_plan"))
def expand(floats, ints, limits, words, layout: tuple, box: tuple[int, ...], length: int, sharding,
           varying: frozenset, draw_plan=None) -> Params:
    """The kernels' [C] parameters on the devices from the host's compact
    ones (packed: per parameter its name, shape, whether an integer and its
    offset in its buffer). Each parameter varies only along the box
    dimensions of the keys it depends on (`sweep.engine.plan.Plan.indices`),
    so the host builds and copies O(axis lengths) values and the devices
    broadcast them to the chunk's `length` configurations (padding repeats
    the last one), sharded. A parameter not in `varying` (one value in the
    whole scenario) stays [1]: which are [1] never depends on the chunking,
    nor then do the results. For a random sample drawn here (`draw_plan`),
    `device_draws.sampler` makes the chunk's draws from `words` and turns
    the host's tables into per-configuration values (`limits`: thresholds)."""
    sampled = device_draws.sampler(limits, words, box, draw_plan) if draw_plan else None
    out = {}
    for (name, shape, _, _), value in zip(layout, unpack(floats, ints, layout)):
        if sampled is not None:
            value = sampled(name, value, shape)
        out[name] = value.reshape(1) if name not in varying else \
            jax.lax.with_sharding_constraint(over_box(value, box, length), sharding)
    return Params.of(out)


def expansion(static: dict) -> tuple:
    """`expand`'s static arguments as one static argument of a program
    that expands a chunk's parameters itself (`expanded`)."""
    return tuple(static.items())


def expanded(packed, expansion: tuple) -> Params:
    """`expand` inside a larger program, its parameters materialised (a
    barrier): a chunk's own program expands them on the devices, where run
    apart the CPU client ran `expand`, a cheap program, on the host's
    thread (1-2 ms per 2**18 configurations, single-threaded, holding back
    the host). The barrier keeps the parameters what `expand` run apart
    gives, so a sample's draws round the same in every program."""
    return jax.lax.optimization_barrier(expand(*packed, **dict(expansion)))


def _chunk_inputs(spec: Spec, plan: Plan, chunk, drawing=None, sampled_values: bool = True):
    """(compiled DAG, host parameters, tangent rules, fixed_buckets, sampled
    values for the cube's coordinates, with `sampled_values`) of one chunk;
    for a sample the devices draw (`drawing`), the host's parameters are
    tables over its discrete dimensions (`device_draws.host_columns`)."""
    s = chunk.structure
    dag = compile_structure(s)
    if drawing is None:
        columns, sampled = plan.columns(chunk)
    else:
        columns = device_draws.host_columns(spec, plan, chunk, drawing[0])
        sampled = plan.sampled_values(chunk) if sampled_values else {}
    params, tangents = _params(spec, columns, zoo.model_of(s))  # shaped to broadcast over the box
    return dag, params, tangents, has_fixed_buckets(spec), sampled


def _varying(spec: Spec, plan: Plan, chunk) -> frozenset:
    """The parameters that take more than one value somewhere in the
    scenario (for this structural group): from a probe chunk in which every
    key with more than one value takes two. Cached on the plan."""
    cache_key = _group_key(chunk)
    cache = plan.varying
    if cache_key not in cache:
        columns = {key: Column((value,), np.zeros(1, np.int64)) for key, value in spec.fixed.items()}
        for axis in spec.axes:
            columns[axis.key] = Column(axis.values, np.arange(min(len(axis.values), 2)))
        for dim in spec.sample.dimensions if spec.sample is not None else ():
            columns[dim.key] = Column(dim.choices or (dim.low, dim.high), np.arange(2 if not dim.choices else
                                                                                   min(len(dim.choices), 2)))
        params, _ = _params(spec, columns, zoo.model_of(chunk.structure))
        cache[cache_key] = frozenset(name for name, value in params.items() if value.size > 1)
    return cache[cache_key]


def _params(spec: Spec, columns: dict, model) -> tuple[Params, tuple]:
    """Kernel parameters from columns, widened where a sensitivity needs it;
    and the tangent rules of the scenario's sensitivity outputs."""
    params = kernel_params(columns, model, 1, compact=True)
    tangents = tuple((name, tangent_rule(key_of(name), spec.given("ps.servers")))
                     for name in spec.outputs if is_sensitivity(name))
    for name, rule in tangents:  # a multiplier that varies makes its parameter vary too
        for param, multiplier in rule:
            if param not in params:
                raise SpecError("outputs", name, "nothing in this scenario depends on that key (it is unset, or "
                                                 "its algorithm or strategy does not use it)")
            if multiplier is not None and params[multiplier].size > params[param].size:
                wide = np.broadcast_shapes(params[param].shape, params[multiplier].shape)
                params = params.replace(**{param: np.broadcast_to(params[param], wide).copy()})
    return params, tangents


@dataclasses.dataclass(frozen=True)
class PreparedChunk:
    """The first chunk of a sweep, ready for the kernel: for timing or
    inspecting the kernel apart from the host work `sweep.run` adds
    (`experiments/benchmark.py`). `params` are on the devices; `size` is the
    padded chunk length."""
    spec: Spec
    structure: dict  # the chunk's structural keys
    compiled: CompiledDag
    params: Params
    size: int
    tangents: tuple
    fixed_buckets: bool
    straight: bool  # the program runs as straight-line code (`sweep.engine.xla.straight_code`)

    def evaluate(self) -> dict:
        """Every output of `spec.outputs` for the chunk, [size] each, computed
        (it waits for the devices, so that timing it times the work)."""
        return jax.block_until_ready(_sweep_kernel(self.compiled, self.params, self.spec.outputs, self.size,
                                                   self.tangents, self.fixed_buckets, straight=self.straight))

    def compile_fresh(self) -> CompiledDag:
        """Build and lower the DAG again (bypassing the compile cache) and
        XLA-compile the primary kernel for it: what a new structural group costs."""
        compiled = compile_structure_uncached(self.structure)
        _primary_kernel.lower(compiled, self.params, self.tangents, self.fixed_buckets, self.straight).compile()
        return compiled


def prepare_chunk(spec: Spec, chunk: int | None = None, devices: Devices | None = None,
                  straight: bool | None = None) -> PreparedChunk:
    """The first chunk of `spec` (at most `chunk` configurations, default
    `default_chunk`, in cube order), its parameters resolved and put on
    `devices` (default: every visible device); its program evaluated as
    `sweep.run` would (`straight` None) or as straight-line code or not."""
    devices = devices or visible_devices()
    plan = Plan(spec, chunk or default_chunk(devices.platforms), multiple=devices.count)
    first = next(plan.chunks())
    dag, params, tangents, fixed_buckets, _ = _chunk_inputs(spec, plan, first)
    params = jax.block_until_ready(_on_devices(params, plan, first, devices, _varying(spec, plan, first)))
    if straight is None:
        straight = straight_code(dag, plan.group_size)
    return PreparedChunk(spec, first.structure, dag, params, first.padded, tangents, fixed_buckets, straight)


def _finish(chunk, out, sampled, plan, store, devices, progress):
    results = devices.fetch(out)  # every process gets every result
    shape = plan.box_shape(chunk)
    block = {variable_name(name): values[:chunk.size].reshape(shape) for name, values in results.items()}
    store.write(chunk, block, sampled)  # a NullStore on processes that do not write
    if progress is not None:
        progress.update(chunk.size)


def make_progress(total: int, quiet: bool):
    """A progress bar on a terminal (configurations, rate, time left); none otherwise."""
    if quiet or not sys.stderr.isatty():
        return None
    return tqdm(total=total, unit="cfg", unit_scale=True, file=sys.stderr, smoothing=0.1)


__all__ = ["DEFAULT_CHUNK", "GPU_CHUNK", "TRACES", "default_chunk", "evaluate_params", "make_progress", "run_plan", "visible_devices"]
