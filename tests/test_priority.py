"""ByteScheduler's priority channel (kernels/priority.py, DESIGN 2.5) against an
independent event-driven simulation: on random inputs for the channel alone,
and end to end through `explain` (whose partitions are the kernel's), whose
edges reproduce every start and finish, and whose iteration time is the
sweep's."""
import heapq
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.collectives import CollectiveCost
from kernels.priority import priority_channel
from oracle import longest_path
from test_explain_shapes import BASE, explain_json


def simulate(ready, nbytes, partition, credit, latency, per_byte):
    """ByteScheduler as events: each tensor of `nbytes[s]` is cut into
    ceil(nbytes / partition) equal partitions, ready at `ready[s]`; the
    scheduler posts the ready partition of the highest slot (the frontmost
    layer) whenever the bytes posted and not yet sent are below `credit`;
    the channel sends posted partitions one at a time, in posting order, each
    taking latency + per_byte * bytes. Returns [(slot, start, finish)] in the
    order sent."""
    queue = []  # (-slot, index) of ready partitions
    events = []  # (time, kind, payload): kind 0 = a partition finished, 1 = a tensor became ready
    for s, (r, b) in enumerate(zip(ready, nbytes)):
        if b > 0:
            heapq.heappush(events, (r, 1, s))
    remaining = {s: math.ceil(b / partition) for s, b in enumerate(nbytes) if b > 0}
    size = {s: nbytes[s] / n for s, n in remaining.items()}
    in_flight = 0.0  # bytes posted and not yet sent
    channel_free, sent = -math.inf, []
    while events:
        now = events[0][0]
        while events and events[0][0] == now:  # everything that happens at this instant, first
            _, kind, payload = heapq.heappop(events)
            if kind == 0:
                in_flight -= payload
            else:
                for i in range(remaining[payload]):
                    heapq.heappush(queue, (-payload, i))
        while queue and in_flight < credit:
            slot = -heapq.heappop(queue)[0]
            start = max(now, channel_free)
            finish = start + latency + per_byte * size[slot]
            channel_free = finish
            in_flight += size[slot]
            sent.append((slot, start, finish))
            heapq.heappush(events, (finish, 0, size[slot]))
    return sent


def simulate_fused(ready, nbytes, partition, credit, latency, per_byte):
    """The same scheduler over a channel that fuses, as events: a partition
    posted while a call waits for the channel (up to and at the instant it
    starts) rides in that call; a call takes latency + per_byte * all its
    bytes and its partitions count as sent when it finishes. Returns
    [(slot, start, finish)] in posting order and the calls' total time."""
    queue, events = [], []  # events: (time, kind, payload): 0 a call finished, 1 a tensor ready, 2 a call starts
    for s, (r, b) in enumerate(zip(ready, nbytes)):
        if b > 0:
            heapq.heappush(events, (r, 1, s))
    remaining = {s: math.ceil(b / partition) for s, b in enumerate(nbytes) if b > 0}
    size = {s: nbytes[s] / n for s, n in remaining.items()}
    in_flight, channel_free, waiting_call, calls, posted = 0.0, -math.inf, None, [], []
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, payload = heapq.heappop(events)
            if kind == 0:
                in_flight -= payload
            elif kind == 1:
                for i in range(remaining[payload]):
                    heapq.heappush(queue, (-payload, i))
        while queue and in_flight < credit:
            slot = -heapq.heappop(queue)[0]
            if waiting_call is None:
                waiting_call = {"start": max(now, channel_free), "members": []}
                calls.append(waiting_call)
                heapq.heappush(events, (waiting_call["start"], 2, len(calls) - 1))
            waiting_call["members"].append(len(posted))
            posted.append(slot)
            in_flight += size[slot]
        if waiting_call is not None and waiting_call["start"] <= now:  # it starts: nothing joins it any more
            nbytes_call = sum(size[posted[i]] for i in waiting_call["members"])
            waiting_call["finish"] = waiting_call["start"] + latency + per_byte * nbytes_call
            channel_free = waiting_call["finish"]
            heapq.heappush(events, (channel_free, 0, nbytes_call))
            waiting_call = None
    sent = [None] * len(posted)
    for call in calls:
        for i in call["members"]:
            sent[i] = (posted[i], call["start"], call["finish"])
    return sent, sum(c["finish"] - c["start"] for c in calls)


def kernel(ready, nbytes, partition, credit, latency, per_byte, steps, fuse=None):
    with jax.enable_x64(True):
        cost = CollectiveCost(jnp.array([latency]), jnp.array([per_byte]), None)
        finish, busy, sending, (slot, start, end) = priority_channel(
            jnp.asarray(nbytes)[:, None], jnp.asarray(ready)[:, None], cost, partition, jnp.array([credit]), steps,
            want_steps=True, fuse=None if fuse is None else jnp.array([fuse]))
        used = np.asarray(slot)[:, 0] >= 0
        order = [(int(s), float(a), float(b)) for s, a, b in
                 zip(np.asarray(slot)[used, 0], np.asarray(start)[used, 0], np.asarray(end)[used, 0])]
        return order, np.asarray(finish)[:, 0], float(busy[0])


@pytest.mark.parametrize("seed", range(40))
def test_the_channel_matches_the_event_simulation(seed):
    rng = np.random.default_rng(seed)
    slots = int(rng.integers(1, 12))
    nbytes = rng.choice([0.0, 1.0], slots, p=[0.15, 0.85]) * np.exp(rng.uniform(np.log(1e3), np.log(5e7), slots))
    # Backward order: ready times mostly increase, with ties and stragglers.
    ready = np.cumsum(rng.exponential(2e-3, slots)) * rng.choice([1.0, 0.0], slots, p=[0.9, 0.1])
    ready = np.round(ready, 4)
    partition = float(np.exp(rng.uniform(np.log(1e5), np.log(2e7))))
    credit = float(partition * rng.choice([0.5, 1.0, 2.0, 3.7, 100.0]))
    latency, per_byte = float(rng.uniform(0, 1e-3)), float(1 / rng.uniform(1e8, 1e10))
    steps = int(sum(math.ceil(b / partition) for b in nbytes)) + int(rng.integers(0, 4))  # a bound, not exact
    expected = simulate(ready, nbytes, partition, credit, latency, per_byte)
    got, finish, busy = kernel(ready, nbytes, partition, credit, latency, per_byte, steps)
    assert [s for s, _, _ in got] == [s for s, _, _ in expected]
    np.testing.assert_allclose([t for _, a, b in got for t in (a, b)],
                               [t for _, a, b in expected for t in (a, b)], rtol=1e-12, atol=1e-15)
    for s in range(slots):  # a slot finishes with its last partition; an empty one when it is ready
        last = [b for slot, _, b in expected if slot == s]
        assert finish[s] == pytest.approx(last[-1] if last else ready[s], rel=1e-12, abs=1e-15)
    assert busy == pytest.approx(sum(b - a for _, a, b in expected), rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_the_fusing_channel_matches_its_event_simulation(seed):
    rng = np.random.default_rng(100 + seed)
    slots = int(rng.integers(1, 12))
    nbytes = rng.choice([0.0, 1.0], slots, p=[0.15, 0.85]) * np.exp(rng.uniform(np.log(1e3), np.log(5e7), slots))
    ready = np.round(np.cumsum(rng.exponential(2e-3, slots)) * rng.choice([1.0, 0.0], slots, p=[0.9, 0.1]), 4)
    partition = float(np.exp(rng.uniform(np.log(1e5), np.log(2e7))))
    credit = float(partition * rng.choice([0.5, 1.0, 2.0, 3.7, 100.0]))
    latency, per_byte = float(rng.uniform(0, 1e-3)), float(1 / rng.uniform(1e8, 1e10))
    steps = int(sum(math.ceil(b / partition) for b in nbytes)) + int(rng.integers(0, 4))
    expected, expected_busy = simulate_fused(ready, nbytes, partition, credit, latency, per_byte)
    got, finish, busy = kernel(ready, nbytes, partition, credit, latency, per_byte, steps, fuse=1.0)
    assert [s for s, _, _ in got] == [s for s, _, _ in expected]
    np.testing.assert_allclose([t for _, a, b in got for t in (a, b)],
                               [t for _, a, b in expected for t in (a, b)], rtol=1e-12, atol=1e-15)
    for s in range(slots):
        last = [b for slot, _, b in expected if slot == s]
        assert finish[s] == pytest.approx(max(last) if last else ready[s], rel=1e-12, abs=1e-15)
    assert busy == pytest.approx(expected_busy, rel=1e-12)


def test_fusing_saves_latencies_only_when_partitions_queue():
    # Four partitions ready at once, credit for all: one call instead of four, three latencies saved.
    one_by_one, _, busy = kernel([0.0], [4e6], 1e6, 4e6, 1e-3, 1e-9, 4)
    fused, _, fused_busy = kernel([0.0], [4e6], 1e6, 4e6, 1e-3, 1e-9, 4, fuse=1.0)
    assert len({(a, b) for _, a, b in fused}) == 1 and busy - fused_busy == pytest.approx(3e-3)
    # One partition in flight at a time (credit of one): nothing queues, nothing fuses.
    assert kernel([0.0], [4e6], 1e6, 1e6, 1e-3, 1e-9, 4, fuse=1.0)[0] == kernel([0.0], [4e6], 1e6, 1e6, 1e-3, 1e-9, 4)[0]
    # fuse = 0 is the unfused channel.
    assert kernel([0.0], [4e6], 1e6, 4e6, 1e-3, 1e-9, 4, fuse=0.0)[0] == one_by_one


def test_the_front_layer_goes_first_and_credit_delays_it():
    # Slot 0 (the back layer) is ready first with 4 partitions; slot 1 (the front layer) a little later.
    ready, nbytes = [0.0, 0.15], [4e6, 1e6]
    fifo_like, _, _ = kernel(ready, nbytes, 1e6, 1e6, 0.0, 1e-7, 5)  # one partition in flight
    assert [s for s, _, _ in fifo_like] == [0, 0, 1, 0, 0]  # the front layer jumps in at 0.2
    ahead, _, _ = kernel(ready, nbytes, 1e6, 3e6, 0.0, 1e-7, 5)  # three posted ahead
    assert [s for s, _, _ in ahead] == [0, 0, 0, 0, 1]


PRIORITY = {"update": "layerwise", "strategy": "priority", "partition_bytes": 600_000, "credit_bytes": 1_500_000}


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_explain_partitions_are_the_simulated_ones_and_its_edges_reproduce_them(tmp_path, algorithm):
    doc = explain_json(tmp_path, {**BASE, **PRIORITY, "algorithm": algorithm})
    tasks = doc["tasks"]
    duration = np.array([t["duration"] for t in tasks])
    finish = longest_path(len(tasks), [(a, b, None) for a, b in doc["edges"]], duration)
    np.testing.assert_allclose([t["finish"] for t in tasks], finish, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose([t["start"] for t in tasks], finish - duration, rtol=1e-9, atol=1e-12)
    for k in (1, 2):  # iteration 2 starts from what iteration 1 left
        comm = [t for t in tasks if t["kind"] == "comm" and t["iteration"] == k]
        assert all("#" in t["name"] for t in comm)
        layers = sorted({t["layer"] for t in comm}, reverse=True)  # slots in backward order
        backward = {t["layer"]: t["finish"] for t in tasks if t["kind"] == "backward" and t["iteration"] == k}
        nbytes = [sum(t["bytes"] for t in comm if t["layer"] == l) for l in layers]
        ready = [backward[l] for l in layers]
        previous = [t for t in tasks if t["kind"] == "comm" and t["iteration"] == k - 1 and t["layer"] == min(layers)]
        if previous:  # the channel's order edge into the next iteration's first slot
            ready[0] = max(ready[0], previous[-1]["finish"])
        # The ring's cost of one partition, read off the first one: latency + per_byte * bytes is affine,
        # so two partition sizes give both.
        sizes = {t["bytes"]: t["duration"] for t in comm}
        (b1, d1), (b2, d2) = sorted(sizes.items())[0], sorted(sizes.items())[-1]
        per_byte = (d2 - d1) / (b2 - b1) if b2 > b1 else 0.0
        latency = d1 - per_byte * b1
        expected = simulate(ready, nbytes, PRIORITY["partition_bytes"], PRIORITY["credit_bytes"], latency, per_byte)
        assert [layers[s] for s, _, _ in expected] == [t["layer"] for t in comm]
        np.testing.assert_allclose([t["finish"] for t in comm], [b for _, _, b in expected], rtol=1e-9)


def test_sweep_and_explain_agree(tmp_path):
    import sweep

    spec = {**BASE, "update": "layerwise", "partition_bytes": 600_000, "credit_bytes": 1_500_000}
    cube = sweep.run({**spec, "strategy": ["wfbp", "priority"], "inter": {"alpha": 4e-5, "bandwidth": [1.1e9, 1e8]}})
    for bandwidth in (1.1e9, 1e8):
        doc = explain_json(tmp_path, {**spec, "strategy": "priority", "inter": {"alpha": 4e-5, "bandwidth": bandwidth}})
        got = cube.sel(strategy="priority", **{"inter.bandwidth": bandwidth})
        assert float(got["iteration_time"]) == pytest.approx(doc["iteration_time"], rel=2e-5)
        assert float(got["communication_time"]) == pytest.approx(doc["breakdown"]["communication_time"], rel=2e-5)


def test_priority_overlaps_the_next_forward_pass_for_resnet50():
    """ResNet-50's front layers are small and its back layers large: sent
    first, the front layers let the next forward pass start while the back
    layers are still on the wire (ByteScheduler's point). AlexNet, whose
    weight sits in the last layers, gains nothing (not asserted)."""
    import sweep

    cube = sweep.run({"model": "resnet50", "batch_size": 32, "nodes": 4, "update": "layerwise",
                      "strategy": ["wfbp", "priority"], "inter": {"bandwidth": [1.25e9, 1e8]}})
    t = cube["iteration_time"]
    assert (t.sel(strategy="priority") < t.sel(strategy="wfbp")).all()
    # On 10GbE the forward pass (a third of the compute) hides most of the tail: over 10 % faster.
    assert float(t.sel(strategy="priority", **{"inter.bandwidth": 1.25e9})) < \
        0.9 * float(t.sel(strategy="wfbp", **{"inter.bandwidth": 1.25e9}))


@pytest.mark.parametrize("text, key, shown", [
    ('strategy = "priority"\n', "strategy", "layerwise"),
    ('strategy = ["wfbp", "priority"]\nupdate = ["barrier", "layerwise"]\n', "strategy", "layerwise"),
    ('preset = "bytescheduler"\nupdate = "barrier"\n', "strategy", "layerwise"),
    ('preset = "bytescheduler"\ngrad_bytes = 16\n', "grad_bytes", "16"),
    ('strategy = "priority"\nupdate = "layerwise"\npartition_bytes = 0\n', "partition_bytes", "0"),
    ('strategy = "priority"\nupdate = "layerwise"\ncredit_bytes = -1\n', "credit_bytes", "-1"),
])
def test_bad_priority_scenarios_exit_2_with_one_line(text, key, shown, cli, write_spec, tmp_path):
    out = tmp_path / "o.nc"
    status, _, stderr = cli("run", write_spec('model = "alexnet"\nbatch_size = 8\nnodes = 2\n' + text), "-o", out)
    assert status == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith(f"ssgd-sweep: error: {key} = ") and shown in stderr
    assert not out.exists()


def test_bytescheduler_presets_bring_the_layerwise_update(cli, write_spec, tmp_path):
    import xarray as xr

    base = 'model = "alexnet"\nbatch_size = 32\nnodes = 4\n'
    out = tmp_path / "a.nc"
    assert cli("run", write_spec(base + 'preset = ["horovod", "bytescheduler", "bytescheduler-ps"]\n'), "-o", out)[0] == 0
    own = tmp_path / "b.nc"
    assert cli("run", write_spec(base + 'strategy = "priority"\nupdate = "layerwise"\nalgorithm = ["ring", "ps"]\n'
                                 'bucket_bytes = 26214400\n'), "-o", own)[0] == 0
    with xr.open_dataset(out) as a, xr.open_dataset(own) as b:
        assert "preset=bytescheduler: unrolled" in a.attrs["lowering"]
        for preset, algorithm in (("bytescheduler", "ring"), ("bytescheduler-ps", "ps")):
            np.testing.assert_allclose(a["iteration_time"].sel(preset=preset).values,
                                       b["iteration_time"].sel(algorithm=algorithm).values, rtol=1e-6)


def test_sensitivity_is_the_derivative_of_the_sweep():
    """d(iteration_time)/d(inter.bandwidth) of a priority sweep against a
    central difference of `run` (the order is held; the durations carry
    the derivative), on a link slow enough that the channel is exposed."""
    import sweep

    spec = {**BASE, **PRIORITY, "nodes": 4, "inter": {"alpha": 4e-5, "bandwidth": 1e8},
            "outputs": ["iteration_time", "d_iteration_time/d_inter.bandwidth"]}
    got = float(sweep.run(spec)["d_iteration_time_d_inter.bandwidth"])
    h = 0.01
    times = [float(sweep.run({**spec, "inter": {"alpha": 4e-5, "bandwidth": 1e8 * s},
                              "outputs": ["iteration_time"]})["iteration_time"]) for s in (1 + h, 1 - h)]
    numeric = (times[0] - times[1]) / (2 * h * 1e8)
    assert got < 0
    assert got == pytest.approx(numeric, rel=0.03)


@pytest.mark.slow  # (40 s on 2 cores: 250 Adam steps through the priority channel)
def test_calibrate_and_predict_priority_rows(tmp_path, cli):
    """Rows of the priority strategy, made by `run` at a known inter
    bandwidth, train a fit that recovers it, and `predict` gives `run`'s
    throughput for the held-out 8-node row."""
    import csv
    import tomllib

    import sweep

    true_bandwidth = 3e8
    cube = sweep.run({**BASE, **PRIORITY, "nodes": [2, 4, 8], "inter": {"alpha": 4e-5, "bandwidth": true_bandwidth},
                      "outputs": ["throughput"]})
    header = ["model", "batch_size", "nodes", "gpus_per_node", "strategy", "update", "partition_bytes",
              "credit_bytes", "throughput"]
    rows = [[BASE["model"], BASE["batch_size"], n, BASE["gpus_per_node"], "priority", "layerwise",
             PRIORITY["partition_bytes"], PRIORITY["credit_bytes"], float(cube["throughput"].sel(nodes=n))]
            for n in (2, 4, 8)]
    with open(tmp_path / "data.csv", "w", newline="") as f:
        csv.writer(f).writerows([header, *rows[:2]])
    with open(tmp_path / "query.csv", "w", newline="") as f:
        csv.writer(f).writerows([header[:-1], rows[2][:-1]])
    base = tmp_path / "base.toml"
    intra = "\n".join(f"{k} = {v!r}" for k, v in BASE["intra"].items())
    base.write_text(f"iterations = {BASE['iterations']}\n[intra]\n{intra}\n[inter]\nalpha = 4e-5\nbandwidth = 1e9\n"
                    "[io]\nprefetch = false\ntime_per_sample = 2e-4\n")  # BASE's
    fit = tmp_path / "fit.toml"
    status, _, err = cli("calibrate", tmp_path / "data.csv", "--base", base, "--fit", "inter.bandwidth", "-o", fit,
                         "--starts", "1", "--steps", "200", "--polish", "50", "--prior", "0")
    assert status == 0, err
    assert tomllib.loads(fit.read_text())["inter"]["bandwidth"] == pytest.approx(true_bandwidth, rel=1e-3)
    status, _, err = cli("predict", fit, tmp_path / "query.csv", "-o", tmp_path / "pred.csv")
    assert status == 0, err
    with open(tmp_path / "pred.csv", newline="") as f:
        predicted = float(next(csv.DictReader(f))["predicted_throughput"])
    assert predicted == pytest.approx(rows[2][-1], rel=1e-3)


def test_a_sweep_over_fuse_posted_is_each_value_alone():
    """`fuse_posted` as a swept axis (a per-configuration switch of one
    program) gives each configuration what it gives alone, and fusing is
    faster where a large layer's partitions queue behind the credit."""
    import sweep

    spec = {**BASE, "update": "layerwise", "strategy": "priority", "partition_bytes": 600_000,
            "credit_bytes": 2_400_000, "inter": {"alpha": 4e-5, "bandwidth": 1e9}}
    cube = sweep.run({**spec, "fuse_posted": [False, True]})
    alone = [float(sweep.run({**spec, "fuse_posted": value})["iteration_time"]) for value in (False, True)]
    np.testing.assert_allclose(cube["iteration_time"].values, alone, rtol=1e-6)
    assert alone[1] < alone[0]
