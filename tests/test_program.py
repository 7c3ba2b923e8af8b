"""The compiled program (sweep.graph.lowering + kernels.program) against the NumPy oracle.

The oracle (tests/oracle.py) walks the slotted DAG task by task and decides
buckets by the strategy rules as written in DESIGN 2.3; the program is what
sweeps, fits, sensitivities and explain run. They must agree on every shape
of DESIGN 2.5, every strategy, random costs, and on DAGs edited by hand.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.channel import Planner
from kernels.codes import FIFO_STRATEGIES as STRATEGIES
from kernels.collectives import CollectiveCost
from kernels.iteration import busy_compute, context, iteration_outputs, lowered_schedule, straight_line
from kernels.iteration import iteration_time as eager_iteration_time
from kernels.program import Context
from kernels.smooth import select_max
from oracle import iteration_time as oracle_time
from oracle import simulate
from sweep.graph import zoo
from sweep.graph.compiler import compile_model, compile_zoo_model
from kernels.codes import ALWAYS, COMM_COSTS
from sweep.graph.dag import Dag, Shape, Task, build_dag
from sweep.graph.lowering import LoweringError, lower
from sweep.engine.params import Column, kernel_params
from sweep.engine.xla import COMPILER_OPTIONS, STRAIGHT_FROM, program_jit, straight_code

# Both evaluators of a program: its segments' scans (`kernels.program`) and
# straight-line code (`kernels.straight`), which runs large sweeps of
# unrolled programs on CPUs; compiled as straight-line code is
# (`sweep.engine.xla`) for both.
iteration_time = jax.jit(lambda lowered, ctx: (eager_iteration_time(lowered, ctx)[0], None),
                         static_argnums=(0,), compiler_options=COMPILER_OPTIONS)
lowered_schedule = jax.jit(lowered_schedule, static_argnums=(0,), compiler_options=COMPILER_OPTIONS)
EVALUATORS = {"scans": False, "straight": True}

SHAPES = [Shape(), Shape(update="layerwise"), Shape(pipelined=True), Shape(zero=1), Shape(zero=2), Shape(zero=3),
          Shape(accumulation=3), Shape(update="layerwise", pipelined=True), Shape(update="layerwise", accumulation=2),
          Shape(zero=3, accumulation=2)]


def small_model(seed=0, layers=9):
    rng = np.random.default_rng(seed)
    params = rng.integers(0, 3, layers) * rng.uniform(1e5, 1e7, layers)
    params[3] = 0
    return params, rng.uniform(1, 10, layers), rng.uniform(1, 20, layers)


def random_costs(rng):
    units = {"io": rng.uniform(0, 5), "h2d": rng.uniform(0, 2), "forward": rng.uniform(0.1, 1),
             "backward": rng.uniform(0.1, 2), "update": rng.uniform(0, 3), "update_shard": rng.uniform(0, 1)}
    comm = {n: (rng.uniform(0, 2), rng.uniform(0, 1e-6)) for n in COMM_COSTS}
    return units, comm, rng.uniform(1e6, 3e7), bool(rng.integers(0, 2))


def make_context(units, comm, threshold, prefetch, strategy, grad_bytes=4.0, free=False, straight=False):
    """One configuration's context; straight-line code also takes bsp's and
    wfbp's fixed buckets (`fixed_buckets`), as a sweep of only those does."""
    one = lambda x: jnp.array([x], jnp.float64)  # noqa: E731
    return Context(compute={k: one(v) for k, v in units.items()},
                   comm={k: CollectiveCost(one(a), one(b), None) for k, (a, b) in comm.items()},
                   grad_bytes=one(grad_bytes), strategy=jnp.array([STRATEGIES.index(strategy)]),
                   threshold=one(threshold), prefetch=one(float(prefetch)), free=free, straight=straight,
                   fixed_buckets=straight and strategy in ("bsp", "wfbp"))


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("straight", EVALUATORS.values(), ids=EVALUATORS.keys())
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_program_matches_the_oracle(shape, straight):
    """Iteration time and every task's finish, each strategy, random costs."""
    params, forward, backward = small_model()
    compiled = compile_model(params, forward, 4, shape, backward)
    rng = np.random.default_rng(1)
    for strategy in STRATEGIES:
        for _ in range(3):
            units, comm, threshold, prefetch = random_costs(rng)
            finish, _, sent = simulate(compiled.dag, units, comm, 4.0, strategy, threshold, prefetch)
            ctx = make_context(units, comm, threshold, prefetch, strategy, straight=straight)
            t, _ = iteration_time(compiled.lowered, ctx)
            got_finish, _, got_sent, _ = lowered_schedule(compiled.lowered, ctx)
            assert float(t[0]) == pytest.approx(oracle_time(compiled.dag, finish), rel=1e-12)
            np.testing.assert_allclose(np.asarray(got_finish)[:, 0], finish, rtol=1e-12, atol=1e-12)
            assert {k: float(v[0]) for k, v in got_sent.items()} == pytest.approx(sent)


@pytest.mark.parametrize("straight", EVALUATORS.values(), ids=EVALUATORS.keys())
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_least_task_time_matches_the_oracle(shape, straight):
    """`compute.task_floor`: every forward and backward task lasts at least
    the floor, set between the shortest and the longest task so that it
    lengthens some and not others; the busy compute time follows."""
    params, forward, backward = small_model(2)
    compiled = compile_model(params, forward, 4, shape, backward)
    rng = np.random.default_rng(3)
    for strategy in STRATEGIES:
        units, comm, threshold, prefetch = random_costs(rng)
        floor = float(np.median(forward) * units["forward"])
        finish, duration, _ = simulate(compiled.dag, units, comm, 4.0, strategy, threshold, prefetch, floor=floor)
        ctx = dataclasses.replace(make_context(units, comm, threshold, prefetch, strategy, straight=straight),
                                  floor=jnp.array([floor]))
        t, _ = iteration_time(compiled.lowered, ctx)
        got_finish, _, _, _ = lowered_schedule(compiled.lowered, ctx)
        assert float(t[0]) == pytest.approx(oracle_time(compiled.dag, finish), rel=1e-12)
        np.testing.assert_allclose(np.asarray(got_finish)[:, 0], finish, rtol=1e-12, atol=1e-12)
        unfloored, _, _ = simulate(compiled.dag, units, comm, 4.0, strategy, threshold, prefetch)
        assert oracle_time(compiled.dag, finish) > oracle_time(compiled.dag, unfloored)
        one_iteration = [t.id for t in compiled.dag.tasks if t.iteration == 1 and t.cost in units
                         and t.kind in ("forward", "backward", "update")]
        assert float(busy_compute(compiled.lowered, ctx)[0]) == pytest.approx(duration[one_iteration].sum(),
                                                                              rel=1e-12)


@pytest.mark.parametrize("straight", EVALUATORS.values(), ids=EVALUATORS.keys())
@pytest.mark.parametrize("shape", [Shape(), Shape(update="layerwise"), Shape(pipelined=True)], ids=str)
def test_mgwfbp_planned_with_its_own_model_matches_the_oracle(shape, straight):
    """MG-WFBP as implemented: buckets planned on the planner's channel
    (its own alpha-beta model, a floor on bucket size), run on the true one;
    also the floor alone (alpha NaN: planned with the true costs)."""
    params, forward, backward = small_model(4)
    compiled = compile_model(params, forward, 4, shape, backward)
    rng = np.random.default_rng(5)
    merged = []
    for trial in range(8):
        units, comm, threshold, prefetch = random_costs(rng)
        alpha = None if trial % 4 == 3 else rng.uniform(0, 4)
        planner = (alpha, rng.uniform(0, 2e-6), rng.choice([0.0, rng.uniform(1e6, 3e7)]))
        finish, _, sent = simulate(compiled.dag, units, comm, 4.0, "mgwfbp", threshold, prefetch, planner=planner)
        one = lambda x: jnp.array([x], jnp.float64)  # noqa: E731
        ctx = dataclasses.replace(make_context(units, comm, threshold, prefetch, "mgwfbp", straight=straight),
                                  planner=Planner(one(np.nan if alpha is None else alpha), one(planner[1]),
                                                  one(planner[2])))
        t, _ = iteration_time(compiled.lowered, ctx)
        got_finish, _, got_sent, _ = lowered_schedule(compiled.lowered, ctx)
        assert float(t[0]) == pytest.approx(oracle_time(compiled.dag, finish), rel=1e-12)
        np.testing.assert_allclose(np.asarray(got_finish)[:, 0], finish, rtol=1e-12, atol=1e-12)
        assert {k: float(v[0]) for k, v in got_sent.items()} == pytest.approx(sent)
        merged.append(sum(v > 0 for v in sent.values()))
    assert len(set(merged)) > 1  # the planners chose different buckets


def test_mgwfbp_planner_bounds_bsp_and_its_own_rule():
    """A planner that thinks every all-reduce costs an hour merges every
    gradient into one bucket: bsp exactly; one that prices them as the true
    link, with no floor, plans what the plain rule plans."""
    import sweep
    base = {"model": "resnet50", "batch_size": 32, "nodes": [1, 2, 8], "gpus_per_node": 4, "strategy": "mgwfbp",
            "outputs": ["iteration_time"]}
    plain = sweep.run(sweep.load_spec(base))["iteration_time"].values
    bsp = sweep.run(sweep.load_spec({**base, "strategy": "bsp"}))["iteration_time"].values
    slow = sweep.run(sweep.load_spec({**base, "mgwfbp": {"alpha": 3600.0, "bandwidth": 1.0}}))["iteration_time"]
    np.testing.assert_array_equal(slow.values, bsp)
    floor = sweep.run(sweep.load_spec({**base, "mgwfbp": {"min_params": 0}}))["iteration_time"].values
    np.testing.assert_array_equal(floor, plain)
    assert not np.array_equal(bsp, plain)


def test_lowering_modes():
    """Barrier shapes contract to one iteration's body; the others unroll,
    and the reason names the property that fails."""
    params, forward, backward = small_model()
    modes = {str(s): compile_model(params, forward, 3, s, backward).lowered for s in SHAPES}
    assert modes[str(Shape())].mode == "contracted"
    assert modes[str(Shape(pipelined=True))].mode == "contracted"
    assert modes[str(Shape(accumulation=3))].mode == "contracted"
    assert "update barrier" in modes[str(Shape(update="layerwise"))].reason
    assert "entry" in modes[str(Shape(zero=3))].reason


def test_select_max_is_jnp_maximum_with_its_derivative():
    """Straight-line code's max (`a > b ? a : b`) has jnp.maximum's values
    and, at ties too, its derivative, bit for bit: sensitivities do not
    depend on which evaluator a sweep takes."""
    rng = np.random.default_rng(0)
    pool = np.array([-np.inf, -1.5, 0.0, 0.25, 3.0, 1e30], np.float32)  # few values: many ties
    a, b = (jnp.asarray(rng.choice(pool, 4096)) for _ in range(2))
    da, db = (jnp.asarray(rng.normal(size=4096).astype(np.float32)) for _ in range(2))
    assert int(jnp.sum(a == b)) > 400
    np.testing.assert_array_equal(select_max(a, b), jnp.maximum(a, b))
    for args in ((a, b), (a, 0.0), (2.0, b)):  # arrays and the Python floats straight-line code passes
        tangents = tuple(t if isinstance(x, jax.Array) else 0.0 for x, t in zip(args, (da, db)))
        got = jax.jvp(select_max, args, tangents)
        want = jax.jvp(jnp.maximum, args, tangents)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_large_sweeps_of_unrolled_programs_run_as_straight_line_code_on_cpu():
    """Which evaluator a sweep gets: straight-line code for an unrolled
    program on a CPU from STRAIGHT_FROM configurations of it (it compiles
    slower), the scans below that, for a contracted program and for a
    priority channel (whose partitions are a scan of their own)."""
    assert jax.default_backend() == "cpu"
    model = zoo.get_model("resnet50")
    layerwise = compile_zoo_model(model, 3, None, Shape(update="layerwise"), priority=False)
    assert straight_code(layerwise, STRAIGHT_FROM) and not straight_code(layerwise, STRAIGHT_FROM - 1)
    assert straight_code(compile_zoo_model(model, 3, None, Shape(zero=3)), STRAIGHT_FROM)
    assert not straight_code(compile_zoo_model(model, 3, None, Shape()), STRAIGHT_FROM)
    priority = compile_zoo_model(model, 3, None, Shape(update="layerwise"), priority=True)
    assert priority.priority_steps > 0 and not straight_code(priority, STRAIGHT_FROM)


def test_layerwise_updates_are_one_map_per_iteration():
    """The per-layer updates wait only for their joins: one vectorised map
    segment per iteration, not a task-by-task scan."""
    params, forward, backward = small_model()
    lowered = compile_model(params, forward, 3, Shape(update="layerwise"), backward).lowered
    maps = [seg for seg in lowered.program.segments if seg.kind == "map"]
    assert [seg.iteration for seg in maps] == [1, 2, 3]
    assert all({lowered.dag.tasks[t].kind for t in seg.tasks} == {"update"} for seg in maps)
    assert all(len(seg) == int((params > 0).sum()) for seg in maps)
    assert not any(seg.kind == "scan" for seg in lowered.program.segments)


def test_free_communication_shortcut_equals_a_free_run():
    """With a barrier, single-GPU time is the compute chain: the same as
    running the program with communication that costs nothing."""
    params, forward, backward = small_model(2)
    for shape in (Shape(), Shape(pipelined=True), Shape(zero=2), Shape(accumulation=2)):
        lowered = compile_model(params, forward, 3, shape, backward).lowered
        assert lowered.free_by_compute
        rng = np.random.default_rng(3)
        for strategy in STRATEGIES:
            units, comm, threshold, prefetch = random_costs(rng)
            ctx = make_context(units, comm, threshold, prefetch, strategy, free=True)
            compute = sum(u * ctx.compute[c] for c, u in lowered.compute_units.items())
            shortcut = eager_iteration_time(lowered, ctx, work_override=compute)[0]
            assert float(iteration_time(lowered, ctx)[0][0]) == pytest.approx(float(shortcut[0]), rel=1e-12)


def _edit(dag: Dag, drop) -> Dag:
    return Dag(dag.tasks, tuple(e for e in dag.edges if not drop(dag.tasks[e[0]], dag.tasks[e[1]])))


@pytest.mark.parametrize("shape,drop", [
    # layerwise: the next forward waits for its layer's update
    (Shape(update="layerwise"), lambda s, d: s.kind == "update" and d.kind == "forward"),
    # ZeRO-3: forward and backward wait for their layer's all-gather
    (Shape(zero=3), lambda s, d: s.kind == "gather" and d.kind in ("forward", "backward")),
    # pipelined stages: the inter stage waits for the intra reduce-scatter of its bucket
    (Shape(pipelined=True), lambda s, d: s.policy == "policy" and d.policy == "follow"),
    # accumulation: communication waits for the last micro-batch's backward
    (Shape(accumulation=2), lambda s, d: s.kind == "backward" and d.kind == "comm"),
], ids=["layerwise", "zero3", "pipelined", "accumulation"])
@pytest.mark.parametrize("straight", EVALUATORS.values(), ids=EVALUATORS.keys())
def test_features_live_in_the_dag(shape, drop, straight):
    """Removing a shape's edges from the DAG changes the program's results
    exactly as it changes the oracle's: nothing else encodes the feature."""
    params, forward, backward = small_model(4)
    dag = build_dag(params.tolist(), forward.tolist(), 3, shape, backward.tolist())
    edited = _edit(dag, drop)
    assert len(edited.edges) < len(dag.edges)
    rng = np.random.default_rng(5)
    changed = False
    for strategy in ("wfbp", "mgwfbp"):
        units, comm, threshold, prefetch = random_costs(rng)
        units["io"] = 0.0
        ctx = make_context(units, comm, threshold, prefetch, strategy, straight=straight)
        times = []
        for graph in (dag, edited):
            finish, _, _ = simulate(graph, units, comm, 4.0, strategy, threshold, prefetch)
            got = float(iteration_time(lower(graph), ctx)[0][0])
            assert got == pytest.approx(oracle_time(graph, finish), rel=1e-12)
            times.append(got)
        changed |= times[0] != pytest.approx(times[1], rel=1e-9)
    assert changed


def test_lowering_checks_its_preconditions():
    params, forward, backward = small_model()
    dag = build_dag(params.tolist(), forward.tolist(), 2, Shape(), backward.tolist())
    fifo = [e for e in dag.edges if dag.tasks[e[0]].kind == "forward" and dag.tasks[e[1]].kind == "forward"][0]
    with pytest.raises(LoweringError, match="FIFO"):
        lower(Dag(dag.tasks, tuple(e for e in dag.edges if e != fifo)))
    backwards = Dag(dag.tasks, dag.edges + ((5, 3, ALWAYS),))
    with pytest.raises(LoweringError, match="topological"):
        lower(backwards)
    # a policy channel split by a task of another kind on the same resource
    tasks = list(dag.tasks)
    slots = [t.id for t in tasks if t.policy == "policy" and t.iteration == 1]
    tasks[slots[1]] = dataclasses.replace(tasks[slots[1]], policy=None)
    with pytest.raises(LoweringError, match="one run of slots"):
        lower(Dag(tuple(tasks), dag.edges))


def random_columns(rng, C):
    def pick(values):
        return Column(tuple(values), rng.integers(0, len(values), C))

    def log_uniform(lo, hi):
        return Column(tuple(np.exp(rng.uniform(np.log(lo), np.log(hi), C))), np.arange(C))

    return {
        "batch_size": pick([1, 8, 32, 128]), "nodes": pick([1, 2, 3, 8]), "gpus_per_node": pick([1, 2, 4]),
        "strategy": pick(STRATEGIES), "algorithm": pick(["ring", "rhd", "tree", "hierarchical"]),
        "bucket_bytes": pick([1, 1 << 20, 25 << 20, 1 << 30]), "io.prefetch": pick([True, False]),
        "io.time_per_sample": log_uniform(1e-6, 1e-2), "inter.alpha": log_uniform(1e-7, 1e-2),
        "inter.bandwidth": log_uniform(1e7, 1e11), "intra.bandwidth": log_uniform(1e9, 1e12),
        "compute.efficiency": log_uniform(0.05, 1.0),
    }


SLOW = pytest.mark.slow  # (20-30 s each on 2 cores: resnet50's 107 layers unrolled)


@pytest.mark.parametrize("model,shape", [
    ("googlenet", Shape()), ("alexnet", Shape(update="layerwise")), ("alexnet", Shape(zero=3)),
    pytest.param("resnet50", Shape(update="layerwise"), marks=SLOW), pytest.param("resnet50", Shape(zero=3), marks=SLOW),
    ("bert_base", Shape(pipelined=True)), ("resnet50", Shape(accumulation=2))], ids=str)
def test_sweep_kernel_matches_the_oracle(model, shape):
    """The sweep's float32 kernel on zoo models, per configuration, against
    the oracle fed the kernel's own costs (collectives are tested elsewhere)."""
    C = 12
    rng = np.random.default_rng(7)
    # No priority channel (the strategies here are FIFO ones): unrolled DAGs run as straight-line code,
    # as a large sweep runs them.
    compiled = compile_zoo_model(zoo.get_model(model), 3, None, shape, priority=False)
    columns = random_columns(rng, C)
    if shape.pipelined:
        columns["algorithm"] = Column(("hierarchical",), np.zeros(C, int))
    p32 = kernel_params(columns, zoo.get_model(model), C)
    kernel = program_jit(iteration_outputs, static_argnames=("straight",))
    got = np.asarray(kernel(compiled, p32, straight=straight_line(compiled))["iteration_time"])
    p64 = {k: jnp.asarray(v, jnp.float64 if np.issubdtype(v.dtype, np.floating) else v.dtype)
           for k, v in p32.items()}
    ctx = context(compiled, p64)
    for c in range(C):
        units = {k: float(jnp.broadcast_to(v, (C,))[c]) for k, v in ctx.compute.items()}
        comm = {n: (float(jnp.broadcast_to(ctx.comm[n].latency, (C,))[c]),
                    float(jnp.broadcast_to(ctx.comm[n].per_byte, (C,))[c])) for n in COMM_COSTS}
        finish, _, _ = simulate(compiled.dag, units, comm, float(p64["grad_bytes"][0]),
                                STRATEGIES[int(jnp.broadcast_to(p32["strategy"], (C,))[c])],
                                float(jnp.broadcast_to(p64["bucket_bytes"], (C,))[c]),
                                bool(jnp.broadcast_to(p32["prefetch"], (C,))[c] > 0),
                                tiny=np.finfo(np.float32).tiny)
        assert got[c] == pytest.approx(oracle_time(compiled.dag, finish), rel=5e-5)


def test_program_is_differentiable():
    """Gradients flow through the program: more bandwidth, less time."""
    compiled = compile_zoo_model(zoo.get_model("resnet50"), 3)
    columns = {"batch_size": Column((32,), np.zeros(1, int)), "nodes": Column((4,), np.zeros(1, int)),
               "gpus_per_node": Column((4,), np.zeros(1, int)), "strategy": Column(("bsp",), np.zeros(1, int))}
    params = kernel_params(columns, zoo.get_model("resnet50"), 1)

    def time_of(bandwidth):
        return iteration_outputs(compiled, {**params, "inter_bandwidth": bandwidth})["iteration_time"].sum()

    bw = params["inter_bandwidth"]
    grad = jax.grad(time_of)(bw)
    # bsp: the whole ring all-reduce is exposed, d t / d bw = -2(P-1)/P * M / bw^2.
    workers, message = 16, 4 * zoo.get_model("resnet50").params
    expected = -2 * (workers - 1) / workers * message / bw.astype(np.float64) ** 2
    np.testing.assert_allclose(grad, expected, rtol=1e-4)


def test_closed_form_channel_equals_the_scan():
    """bsp and wfbp in closed form (max of suffix sums) against the scan, on
    random slots with empty ones, per-configuration scales and strategies."""
    from kernels.channel import fixed_bucket_channel, policy_channel
    from kernels.codes import BSP, WFBP

    rng = np.random.default_rng(5)
    slots, configs = 40, 64
    slot_bytes = rng.integers(0, 5, (slots, 1)) * rng.uniform(1e3, 1e7, (slots, 1))
    slot_ready = np.cumsum(rng.uniform(0, 1, (slots, 1)), axis=0)
    strategy = rng.choice([BSP, WFBP], configs).astype(np.int32)
    latency, per_byte = rng.uniform(0, 0.2, configs), rng.uniform(1e-9, 1e-7, configs)
    bytes_scale, ready_scale = rng.uniform(1, 4, configs), rng.uniform(0.1, 10, configs)
    _, _, finish, busy, _ = policy_channel(strategy, 1.0, slot_bytes, slot_ready,
                                        CollectiveCost(latency, per_byte, None), ready_scale=ready_scale,
                                        bytes_scale=bytes_scale)
    closed_finish, closed_busy = fixed_bucket_channel(strategy, slot_bytes, slot_ready, latency, per_byte,
                                                      bytes_scale, ready_scale)
    np.testing.assert_allclose(closed_finish, finish, rtol=1e-12)
    np.testing.assert_allclose(closed_busy, busy, rtol=1e-12)


def test_task_names_are_unique_within_an_iteration():
    params, forward, backward = small_model()
    for shape in SHAPES:
        dag = build_dag(params.tolist(), forward.tolist(), 2, shape, backward.tolist())
        names = [t.name for t in dag.tasks if t.kind not in ("join",)]
        assert len(names) == len(set(names)), shape
        assert all(isinstance(t, Task) for t in dag.tasks)
