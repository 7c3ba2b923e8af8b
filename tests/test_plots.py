"""`explain --plot/--trace` (Gantt chart, Chrome trace) and `plot` (quick looks at cubes)."""
import json

import numpy as np
import pytest
import xarray as xr

import sweep
from sweep.report.gantt import steady_window
from sweep.report.quicklook import draw

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SCENARIOS = {
    "bsp_no_prefetch": """
        model = "alexnet"
        batch_size = 32
        nodes = 2
        gpus_per_node = 2
        strategy = "bsp"
        io.prefetch = false
        """,
    "mgwfbp": """
        model = "resnet50"
        batch_size = 32
        nodes = 2
        gpus_per_node = 4
        strategy = "mgwfbp"
        """,
    # ByteScheduler's partitions (comm[l]#k) and ZeRO-3's all-gathers and reduce-scatters on the timeline.
    "priority": """
        model = "alexnet"
        batch_size = 32
        nodes = 2
        gpus_per_node = 2
        preset = "bytescheduler"
        partition_bytes = 8000000
        """,
    "zero3": """
        model = "alexnet"
        batch_size = 32
        nodes = 2
        gpus_per_node = 2
        zero = 3
        """,
    # A parametric transformer (issue 10's fourth feature) on the timeline too.
    "transformer": """
        model = "transformer"
        seq_len = 128
        batch_size = 4
        nodes = 2
        gpus_per_node = 2
        transformer.layers = 3
        transformer.hidden = 256
        transformer.heads = 4
        transformer.vocab = 1000
        """,
}


def flat(label: str) -> str:
    """A label with xarray's line wrapping undone."""
    return " ".join(label.split())


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5_000


def assert_refused(status, err, *never_written):
    assert status == 2
    assert err.startswith("ssgd-sweep: error:") and err.count("\n") == 1, err
    for path in never_written:
        assert not path.exists()
        assert not list(path.parent.glob(f".{path.name}.*")), "temporary file left behind"


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def timeline(request, tmp_path_factory):
    """(explain document, trace document, PNG path) of one scenario, from one CLI call."""
    import contextlib
    import io
    import textwrap

    from sweep.cli import main

    folder = tmp_path_factory.mktemp(request.param)
    spec = folder / "spec.toml"
    spec.write_text(textwrap.dedent(SCENARIOS[request.param]))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["explain", str(spec), "--json", "--plot", str(folder / "gantt.png"),
                       "--trace", str(folder / "trace.json")])
    assert status == 0
    doc = json.loads(out.getvalue())  # stdout still carries the JSON alone
    return doc, json.loads((folder / "trace.json").read_text()), folder / "gantt.png"


def test_gantt_png_is_written(timeline):
    doc, _, png = timeline
    assert_png(png)
    # The chart's window is one steady-state iteration: exactly the reported time long.
    start, end, iteration = steady_window(doc)
    assert end - start == pytest.approx(doc["iteration_time"], rel=1e-9)
    assert iteration == doc["iterations"]


def test_trace_has_every_task_once_with_its_timing(timeline):
    doc, trace, _ = timeline
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["args"]["id"] for e in events) == [t["id"] for t in doc["tasks"]]
    tasks = {t["id"]: t for t in doc["tasks"]}
    for event in events:
        task = tasks[event["args"]["id"]]
        assert event["name"] == task["name"]
        assert event["ts"] == pytest.approx(task["start"] * 1e6, abs=1e-6)
        assert event["dur"] == pytest.approx(task["duration"] * 1e6, abs=1e-6)
        assert event["args"]["layer"] == task["layer"] and event["args"]["bytes"] == task["bytes"]
    critical = {e["args"]["id"] for e in events if e["args"]["critical"]}
    assert critical == set(doc["critical_path"])


def test_trace_streams_are_named_and_never_overlap(timeline):
    _, trace, _ = timeline
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_kind = {}
    for e in events:
        by_kind.setdefault(e["cat"].split(",")[0], set()).add(e["tid"])
    assert all(len(tids) == 1 for tids in by_kind.values())  # one stream per kind
    assert by_kind["forward"] == by_kind["backward"] == by_kind["update"]
    assert set(names) == {t for tids in by_kind.values() for t in tids}  # every stream named has events
    # Complete events on one track must not overlap, or trace viewers mis-nest them.
    for tid in names:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == tid)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))


def test_explain_refuses_bad_outputs_and_writes_nothing(cli, write_spec, tmp_path):
    spec = write_spec(SCENARIOS["mgwfbp"])
    png, trace = tmp_path / "g.png", tmp_path / "t.json"
    assert_refused(*cli("explain", spec, "--plot", tmp_path / "missing" / "g.png", "--trace", trace)[::2], trace)
    assert_refused(*cli("explain", spec, "--plot", png, "--trace", tmp_path / "t.txt")[::2], png)
    bad = write_spec(SCENARIOS["mgwfbp"].replace("nodes = 2", "nodes = 0"))
    assert_refused(*cli("explain", bad, "--plot", png, "--trace", trace)[::2], png, trace)
    swept = write_spec(SCENARIOS["mgwfbp"].replace("nodes = 2", "nodes = [1, 2]"))
    assert_refused(*cli("explain", swept, "--plot", png)[::2], png)


# plot ---------------------------------------------------------------------------------------

BASE = {"model": "alexnet", "batch_size": 32, "gpus_per_node": 2,
        "outputs": ["iteration_time", "scaling_efficiency", "bottleneck"]}
CUBES = {
    1: {"nodes": [1, 2, 4]},
    2: {"strategy": ["bsp", "wfbp"], "nodes": [1, 2, 4]},
    3: {"inter": ["10gbe", "ib-fdr"], "strategy": ["bsp", "wfbp"], "nodes": [1, 2, 4]},
    4: {"batch_size": [16, 32], "inter": ["10gbe", "ib-fdr"], "strategy": ["bsp", "wfbp"], "nodes": [1, 2]},
    5: {"gpus_per_node": [1, 2], "batch_size": [16, 32], "inter": ["10gbe", "ib-fdr"],
        "strategy": ["bsp", "wfbp"], "nodes": [1, 2]},
}


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cubes")
    paths = {}
    for dims, axes in CUBES.items():
        paths[dims] = folder / f"cube{dims}.nc"
        sweep.run({**BASE, **axes}, paths[dims])
    return paths


@pytest.mark.parametrize("dims", sorted(CUBES))
def test_plot_any_cube_next_to_it(cli, cubes, dims):
    status, _, err = cli("plot", cubes[dims])
    assert status == 0, err
    assert_png(cubes[dims].with_suffix(".png"))
    with xr.open_dataset(cubes[dims], engine="h5netcdf") as cube:
        assert len(cube["iteration_time"].dims) == dims
        first = cube["iteration_time"].dims[0]
    held = f"note: {first} held at its first value"
    assert (held in err) == (dims > 4)  # two facet dimensions at most: the rest are held, and said so


def test_plot_chooses_var_and_output(cli, cubes, tmp_path):
    out = tmp_path / "eff.png"
    status, _, err = cli("plot", cubes[2], "-o", out, "--var", "bottleneck")
    assert status == 0, err
    assert_png(out)


def test_plot_labels_axes_with_long_name_and_units(cubes):
    with xr.open_dataset(cubes[1], engine="h5netcdf") as cube:
        fig, _ = draw(cube["scaling_efficiency"].load())
    ax = fig.axes[0]
    assert flat(ax.get_ylabel()) == "scaling efficiency (speedup / GPUs) [1]"
    assert ax.get_xlabel() == "nodes"
    with xr.open_dataset(cubes[3], engine="h5netcdf") as cube:
        fig, _ = draw(cube["iteration_time"].load())
    labels = {flat(a.get_xlabel()) for a in fig.axes} | {flat(a.get_ylabel()) for a in fig.axes}
    assert {"nodes", "gradient communication strategy", "steady-state iteration time [s]"} <= labels
    titles = " ".join(a.get_title() for a in fig.axes)
    assert "10gbe" in titles and "ib-fdr" in titles  # one facet per inter-node link
    # Heatmap cells are positional; the tick labels carry the real values.
    heat = next(a for a in fig.axes if a.get_xlabel() == "nodes")
    assert [t.get_text() for t in heat.get_xticklabels()] == ["1", "2", "4"]
    assert np.isclose(fig.axes[0].collections[0].get_array().max(), float(cube["iteration_time"].max()))


def test_plot_sampled_cube_scatters_against_the_sampled_key(cli, tmp_path):
    path = tmp_path / "sampled.nc"
    sweep.run({**BASE, "nodes": [1, 2], "sample": {
        "n": 32, "seed": 1, "inter": {"bandwidth": {"min": 1e9, "max": 1e11, "scale": "log"}},
        "strategy": ["bsp", "wfbp"]}}, path)
    status, _, err = cli("plot", path)
    assert status == 0, err
    assert_png(path.with_suffix(".png"))
    with sweep.open_cube(path) as cube:  # sampled names come back from their codes
        fig, _ = draw(cube["iteration_time"].load())
    panels = [a for a in fig.axes if a.collections]
    assert len(panels) == 2  # one per number of nodes
    for ax in panels:
        assert flat(ax.get_xlabel()) == "inter-node link bandwidth (sampled) [bytes/s]"
        assert ax.get_xscale() == "log"
        assert sum(len(c.get_offsets()) for c in ax.collections) == 32  # every sampled configuration
    assert {t.get_text() for t in panels[-1].get_legend().get_texts()} == {"bsp", "wfbp"}


def test_plot_refuses_bad_input_and_writes_nothing(cli, cubes, tmp_path):
    text = tmp_path / "notes.nc"
    text.write_text("not a cube\n")
    assert_refused(*cli("plot", text)[::2], text.with_suffix(".png"))
    assert_refused(*cli("plot", tmp_path / "missing.nc")[::2], tmp_path / "missing.png")
    out = tmp_path / "x.png"
    assert_refused(*cli("plot", cubes[1], "-o", out, "--var", "nope")[::2], out)
    assert_refused(*cli("plot", cubes[1], "-o", tmp_path / "no" / "x.png")[::2], tmp_path / "no" / "x.png")
    assert_refused(*cli("plot", cubes[1], "-o", tmp_path / "x.txt")[::2], tmp_path / "x.txt")


def test_trace_shows_partitions_gathers_and_scatters(timeline):
    """What issue 10 asks the timeline to show: ByteScheduler's partitions,
    each its own event, and ZeRO-3's all-gathers (before each layer's forward
    and backward) next to its gradient reduce-scatters."""
    doc, trace, _ = timeline
    names = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
    comm = [n for n in names if n.startswith("comm[")]
    gathers = [n for n in names if n.startswith("gather[")]
    if doc["configuration"]["strategy"] == "priority":
        layers = {n.split("#")[0] for n in comm}
        assert all("#" in n for n in comm) and len(comm) > len(layers)  # some layer cut into several
    else:
        assert not any("#" in n for n in comm)
    if doc["configuration"].get("zero") == 3:
        assert {n.split(">")[1].split("@")[0] for n in gathers} == {"forward", "backward"}
        assert comm  # the reduce-scatters of the gradients
    else:
        assert not gathers
