"""`explain --json` on resnet50, 2 nodes x 4 GPUs, ring: the DESIGN 2.3 contract."""
import collections

import pytest

from sweep.graph import zoo

INTRA_ALPHA, INTRA_BW = 8e-6, 1.2e10
INTER_ALPHA, INTER_BW = 4e-5, 1.1e9
NODES, GPUS = 2, 4
WORKERS = NODES * GPUS

SPEC = """
model = "resnet50"
batch_size = 32
nodes = 2
gpus_per_node = 4
algorithm = "ring"
strategy = "{strategy}"
iterations = {iterations}
[intra]
alpha = 8e-6
bandwidth = 1.2e10
[inter]
alpha = 4e-5
bandwidth = 1.1e9
"""


@pytest.fixture(scope="module", params=[("wfbp", 3), ("bsp", 3), ("wfbp", 4)])
def doc(request, tmp_path_factory):
    from sweep.cli import main
    import io
    import contextlib
    import json

    strategy, iterations = request.param
    path = tmp_path_factory.mktemp("explain") / "spec.toml"
    path.write_text(SPEC.format(strategy=strategy, iterations=iterations))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["explain", str(path), "--json"]) == 0
    document = json.loads(out.getvalue())  # stdout carries the JSON alone
    document["_strategy"] = strategy
    return document


def ring_time(message_bytes):
    # DESIGN 2.2 ring over the inter-node link (several nodes).
    return 2 * (WORKERS - 1) * INTER_ALPHA + 2 * (WORKERS - 1) / WORKERS * message_bytes / INTER_BW


def test_document_fields(doc):
    assert set(doc) >= {"iteration_time", "iterations", "tasks", "edges", "critical_path", "breakdown"}
    kinds = {t["kind"] for t in doc["tasks"]}
    assert kinds == {"io", "h2d", "forward", "backward", "comm", "update"}
    for t in doc["tasks"]:
        assert set(t) >= {"id", "kind", "iteration", "layer", "bytes", "duration", "start", "finish"}
        assert (t["layer"] is None) == (t["kind"] in ("io", "h2d", "update"))
        assert (t["bytes"] is None) == (t["kind"] != "comm")
    assert [t["id"] for t in doc["tasks"]] == list(range(len(doc["tasks"])))


def test_every_start_is_latest_predecessor_finish(doc):
    tasks = doc["tasks"]
    preds = collections.defaultdict(list)
    for src, dst in doc["edges"]:
        preds[dst].append(src)
    for t in tasks:
        expected = max((tasks[p]["finish"] for p in preds[t["id"]]), default=0.0)
        assert t["start"] == expected
        assert t["finish"] == pytest.approx(t["start"] + t["duration"], rel=1e-12, abs=1e-15)


def test_critical_path_is_tight_from_zero_to_makespan(doc):
    tasks = doc["tasks"]
    edges = {tuple(e) for e in doc["edges"]}
    path = [tasks[i] for i in doc["critical_path"]]
    assert path[0]["start"] == 0.0
    assert path[-1]["finish"] == max(t["finish"] for t in tasks)
    for a, b in zip(path, path[1:]):
        assert (a["id"], b["id"]) in edges
        assert a["finish"] == b["start"]


def test_steady_state_iteration_time(doc):
    updates = sorted((t for t in doc["tasks"] if t["kind"] == "update"), key=lambda t: t["iteration"])
    k = doc["iterations"]
    assert len(updates) == k
    expected = (updates[-1]["finish"] - updates[0]["finish"]) / (k - 1)
    assert doc["iteration_time"] == pytest.approx(expected, rel=1e-12)
    assert doc["breakdown"]["iteration_time"] == pytest.approx(expected, rel=1e-9)


def test_comm_follows_its_backward(doc):
    tasks = doc["tasks"]
    edges = {tuple(e) for e in doc["edges"]}
    model = zoo.get_model("resnet50")
    with_params = {i + 1 for i, layer in enumerate(model.layers) if layer.params > 0}
    for k in range(1, doc["iterations"] + 1):
        comms = [t for t in tasks if t["kind"] == "comm" and t["iteration"] == k]
        backward = {t["layer"]: t for t in tasks if t["kind"] == "backward" and t["iteration"] == k}
        if doc["_strategy"] == "wfbp":
            # One comm per layer with parameters, each after that layer's backward.
            assert {c["layer"] for c in comms} == with_params
            assert len(comms) == len(with_params)
            for c in comms:
                assert (backward[c["layer"]]["id"], c["id"]) in edges
                assert c["start"] >= backward[c["layer"]]["finish"]
        else:
            # bsp: a single bucket after the last backward (layer 1).
            assert len(comms) == 1
            assert comms[0]["layer"] == 1
            assert (backward[1]["id"], comms[0]["id"]) in edges
            assert comms[0]["start"] >= max(b["finish"] for b in backward.values())


def test_comm_bytes_add_up_to_all_gradients(doc):
    total = 4 * 25_557_032  # fp32 gradients of resnet50 (torchvision parameter count)
    for k in range(1, doc["iterations"] + 1):
        sent = sum(t["bytes"] for t in doc["tasks"] if t["kind"] == "comm" and t["iteration"] == k)
        assert sent == total


def test_each_comm_costs_the_ring_formula(doc):
    comms = [t for t in doc["tasks"] if t["kind"] == "comm"]
    assert comms
    for c in comms:
        assert c["duration"] == pytest.approx(ring_time(c["bytes"]), rel=1e-12)
    assert doc["breakdown"]["communication_time"] == pytest.approx(
        sum(ring_time(c["bytes"]) for c in comms if c["iteration"] == 1), rel=1e-9)


def test_fifo_comm_channel(doc):
    for k in range(1, doc["iterations"] + 1):
        comms = sorted((t for t in doc["tasks"] if t["kind"] == "comm" and t["iteration"] == k),
                       key=lambda t: t["start"])
        # Backward order: layer numbers fall, and no two comm tasks overlap.
        assert [c["layer"] for c in comms] == sorted((c["layer"] for c in comms), reverse=True)
        for a, b in zip(comms, comms[1:]):
            assert b["start"] >= a["finish"]


def test_bsp_is_compute_plus_comm(doc):
    """bsp with prefetch hidden input: the iteration is forward + backward + comm + update."""
    if doc["_strategy"] != "bsp":
        pytest.skip("closed form holds for bsp only")
    phases = doc["breakdown"]["phases"]
    assert phases["io"] + phases["h2d"] < phases["forward"]  # input hidden by prefetch
    expected = phases["forward"] + phases["backward"] + phases["comm"] + phases["update"]
    assert doc["iteration_time"] == pytest.approx(expected, rel=1e-9)


def test_readable_explain(cli, write_spec):
    status, out, err = cli("explain", write_spec(SPEC.format(strategy="wfbp", iterations=3)))
    assert status == 0, err
    for word in ("iteration time", "throughput", "forward", "backward", "comm", "critical path", "exposed"):
        assert word in out
