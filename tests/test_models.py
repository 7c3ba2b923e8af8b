"""A user's own model (CSV or JSON file) and the parametric transformer
(issue 10, DESIGN 2.5): a file that reproduces a zoo model gives the zoo
model's cube bit for bit; the transformer reproduces GPT-2 layer for layer;
bad model files exit 2 with one line and no file."""
import csv
import json

import numpy as np
import pytest
import xarray as xr

from sweep.errors import SpecError
from sweep.graph import zoo
from sweep.graph.zoo.decoder import DecoderShape
from sweep.graph.zoo.gpt2 import SHAPES as GPT2_SHAPES
from sweep.scenario.spec import load_spec

GRID = """
batch_size = [16, 32]
nodes = [1, 4]
gpus_per_node = 4
strategy = ["wfbp", "mgwfbp"]
zero = [0, 2]
precision = ["fp32", "mixed"]
"""


def export_json(cli, name: str, path):
    status, out, _ = cli("models", name, "--json")
    assert status == 0
    path.write_text(out)
    return path


def export_csv(model: zoo.Model, path):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "params", "forward_flops", "output_bytes", "input_bytes"])
        for i, layer in enumerate(model.layers):
            writer.writerow([layer.name, layer.params, repr(layer.forward_flops), repr(layer.output_bytes),
                             model.input_bytes if i == 0 else ""])
    return path


def cube(cli, write_spec, tmp_path, model: str, extra: str = GRID, name: str = "out"):
    out = tmp_path / f"{name}.nc"
    status, _, stderr = cli("run", write_spec(f'model = "{model}"\n{extra}'), "-o", out)
    assert status == 0, stderr
    with xr.open_dataset(out) as data:
        return data.load()


def test_a_file_that_reproduces_a_zoo_model_gives_identical_cubes(cli, write_spec, tmp_path):
    zoo_cube = cube(cli, write_spec, tmp_path, "resnet50", name="zoo")
    export_json(cli, "resnet50", tmp_path / "mine.json")
    export_csv(zoo.get_model("resnet50"), tmp_path / "mine.csv")
    for path in ("mine.json", "mine.csv"):  # relative to the scenario file
        own = cube(cli, write_spec, tmp_path, path, name=path.replace(".", "_"))
        assert list(own.data_vars) == list(zoo_cube.data_vars)
        for var in zoo_cube.data_vars:
            np.testing.assert_array_equal(own[var].values, zoo_cube[var].values, err_msg=f"{path}: {var}")


def test_a_model_file_in_calibrate_and_predict_rows(cli, tmp_path, monkeypatch):
    """Data rows may name a model file, relative to the data file (as a
    scenario's is to the scenario): a fit on rows made by `run` with the
    zoo's AlexNet recovers their inter bandwidth, and predict gives `run`'s
    throughput for the held-out row."""
    import sweep

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    export_json(cli, "alexnet", data_dir / "mine.json")
    cube = sweep.run({"model": "alexnet", "batch_size": 32, "nodes": [2, 4, 8], "gpus_per_node": 2,
                      "inter": {"alpha": 4e-5, "bandwidth": 3e8}, "outputs": ["throughput"]})
    header = ["model", "batch_size", "nodes", "gpus_per_node", "throughput"]
    row = {n: ["mine.json", 32, n, 2, float(cube["throughput"].sel(nodes=n))] for n in (2, 4, 8)}
    for name, rows in (("train.csv", [row[2], row[4]]), ("query.csv", [row[8]])):
        with open(data_dir / name, "w", newline="") as handle:
            csv.writer(handle).writerows([header, *rows])
    (tmp_path / "base.toml").write_text("[inter]\nalpha = 4e-5\nbandwidth = 1e9\n")
    monkeypatch.chdir(tmp_path)  # not the data's folder
    status, _, err = cli("calibrate", "data/train.csv", "--base", "base.toml", "--fit", "inter.bandwidth",
                         "-o", "fit.toml", "--prior", "0")
    assert status == 0, err
    status, _, err = cli("predict", "fit.toml", "data/query.csv", "-o", "pred.csv")
    assert status == 0, err
    with open(tmp_path / "pred.csv", newline="") as handle:
        predicted = float(next(csv.DictReader(handle))["predicted_throughput"])
    assert predicted == pytest.approx(row[8][-1], rel=1e-4)


def test_a_model_file_with_a_trace_and_in_explain(cli, write_spec, tmp_path):
    export_json(cli, "alexnet", tmp_path / "mine.json")
    trace = tmp_path / "trace.csv"
    trace.write_text("layer,forward_time,backward_time\n" + "".join(
        f"{layer.name},0.001,0.002\n" for layer in zoo.get_model("alexnet").layers))
    spec = write_spec('model = "mine.json"\nbatch_size = 16\nnodes = 2\n[compute]\ntrace = "trace.csv"\n')
    status, out, stderr = cli("explain", spec, "--json")
    assert status == 0, stderr
    doc = json.loads(out)
    # Measured forward + backward per layer, and the memory-bound update (16 bytes per parameter, V100's 900 GB/s).
    update = 16 * zoo.get_model("alexnet").params / 900e9
    assert doc["breakdown"]["compute_time"] == pytest.approx(8 * (0.001 + 0.002) + update, rel=1e-9)
    layer_names = {t["layer_name"] for t in doc["tasks"] if t["layer_name"]}
    assert layer_names == {layer.name for layer in zoo.get_model("alexnet").layers}


BAD_CSV = {
    "negative params": ("name,params,forward_flops\nfc,-3,10\n", "params = '-3'"),
    "fractional params": ("name,params,forward_flops\nfc,2.5,10\n", "must be an integer"),
    "not a number": ("name,params,forward_flops\nfc,3,lots\n", "forward_flops = 'lots'"),
    "missing value": ("name,params,forward_flops\nfc,3,\n", "forward_flops is missing"),
    "missing column": ("name,params\nfc,3\n", "missing forward_flops"),
    "unknown column": ("name,params,forward_flops,colour\nfc,3,10,red\n", "unknown column 'colour'"),
    "duplicate layer": ("name,params,forward_flops\nfc,3,10\nfc,3,10\n", "appears twice"),
    "no layers": ("name,params,forward_flops\n", "has no layers"),
    "input twice": ("name,params,forward_flops,input_bytes\na,3,10,4\nb,3,10,4\n", "first row only"),
    "no parameters": ("name,params,forward_flops\nrelu,0,10\n", "no parameters"),
}
BAD_JSON = {
    "not json": ("{", "not valid JSON"),
    "two models": ('{"a": {"layers": []}, "b": {"layers": []}}', "one model"),
    "unknown field": ('{"a": {"layers": [], "colour": 1}}', "unknown field 'colour'"),
    "unknown layer field": ('{"a": {"layers": [{"name": "x", "params": 1, "forward_flops": 1, "w": 2}]}}',
                            "unknown field 'w'"),
    "wrong total": ('{"a": {"params": 5, "layers": [{"name": "x", "params": 1, "forward_flops": 1}]}}',
                    "not the layers' sum"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSV) + sorted(BAD_JSON))
def test_a_bad_model_file_exits_2_with_one_line_and_no_file(case, cli, write_spec, tmp_path):
    text, reason = BAD_CSV[case] if case in BAD_CSV else BAD_JSON[case]
    model = tmp_path / ("bad.csv" if case in BAD_CSV else "bad.json")
    model.write_text(text)
    out = tmp_path / "out.nc"
    status, _, stderr = cli("run", write_spec(f'model = "{model.name}"\nbatch_size = 8\n'), "-o", out)
    assert status == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"ssgd-sweep: error: model = '{model}'") and reason in lines[0], lines[0]
    assert not out.exists() and list(tmp_path.glob("*.nc*")) == []


def test_missing_model_file_and_seq_len_with_a_file(cli, write_spec, tmp_path):
    status, _, stderr = cli("run", write_spec('model = "nope.csv"\nbatch_size = 8\n'), "-o", tmp_path / "o.nc")
    assert status == 2 and "cannot read model file" in stderr and "nope.csv" in stderr
    export_csv(zoo.get_model("alexnet"), tmp_path / "a.csv")
    status, _, stderr = cli("run", write_spec('model = "a.csv"\nbatch_size = 8\nseq_len = 128\n'), "-o",
                            tmp_path / "o.nc")
    assert status == 2 and stderr.startswith("ssgd-sweep: error: seq_len = 128") and "model file" in stderr


def test_an_edited_model_file_is_read_again(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("name,params,forward_flops\nfc,3,10\n")
    assert zoo.get_model(str(path)).params == 3
    path.write_text("name,params,forward_flops\nfc,5,10\n")
    assert zoo.get_model(str(path)).params == 5


@pytest.mark.parametrize("name", sorted(GPT2_SHAPES))
def test_the_transformer_reproduces_gpt2_layer_for_layer(name):
    shape = GPT2_SHAPES[name]
    built = zoo.model_of({"model": "transformer", "seq_len": 1024, "transformer.layers": shape.layers,
                          "transformer.hidden": shape.hidden, "transformer.heads": shape.heads})
    reference = zoo.get_model(name)
    assert built.params == reference.params  # Hugging Face's counts (tests/test_zoo.py)
    assert built.layers == reference.layers


@pytest.mark.parametrize("layers, hidden, heads, ffn, vocab, seq_len", [
    (2, 64, 4, None, 1000, 32), (5, 96, 3, 200, 777, 50), (1, 8, 1, 8, 10, 1)])
def test_transformer_parameters_and_flops_follow_the_closed_form(layers, hidden, heads, ffn, vocab, seq_len):
    values = {"model": "transformer", "seq_len": seq_len, "transformer.layers": layers,
              "transformer.hidden": hidden, "transformer.heads": heads, "transformer.ffn": ffn,
              "transformer.vocab": vocab}
    model = zoo.model_of(values)
    f = 4 * hidden if ffn is None else ffn
    block = 4 * hidden**2 + 4 * hidden + 2 * hidden * f + f + hidden + 4 * hidden
    assert model.params == layers * block + (vocab + seq_len) * hidden + 2 * hidden
    assert model.params == DecoderShape(layers, hidden, heads, vocab, seq_len, ffn).params()
    # 2 FLOPs per weight per token in the matmuls, 4 s^2 h per block of attention, the LM head.
    matmul_weights = layers * (4 * hidden**2 + 2 * hidden * f)
    norms = (2 * layers + 1) * 2 * hidden * seq_len
    expected = 2 * seq_len * matmul_weights + 4 * layers * seq_len**2 * hidden + 2 * seq_len * hidden * vocab
    assert model.forward_flops == pytest.approx(expected + norms, rel=1e-12)


def test_transformer_keys_are_checked(tmp_path):
    base = {"model": "transformer", "batch_size": 4, "transformer": {"layers": 2, "hidden": 64, "heads": 4}}
    assert load_spec(base).value("transformer.hidden") == 64
    missing = {**base, "transformer": {"layers": 2, "heads": 4}}
    with pytest.raises(SpecError, match=r'^transformer.hidden = None: required with model = "transformer"'):
        load_spec(missing)
    with pytest.raises(SpecError, match=r"^transformer.layers = 2: applies to model = \"transformer\" only"):
        load_spec({"model": "gpt2", "batch_size": 4, "transformer": {"layers": 2}})
    with pytest.raises(SpecError, match=r"^transformer.heads = 0: must be > 0"):
        load_spec({**base, "transformer": {"layers": 2, "hidden": 64, "heads": 0}})


def test_transformer_depth_sweeps_as_a_structural_key(cli, write_spec, tmp_path):
    data = cube(cli, write_spec, tmp_path, "transformer",
                "batch_size = 4\nseq_len = 128\nnodes = 2\ngpus_per_node = 8\n"
                "[transformer]\nlayers = [2, 4, 8]\nhidden = 256\nheads = 4\n")
    assert data["transformer.layers"].values.tolist() == [2, 4, 8]
    compute = data.compute_time.values
    # Compute grows with depth, by the blocks' FLOPs (embeddings and LM head are shared).
    assert compute[0] < compute[1] < compute[2]
    assert (compute[2] - compute[1]) == pytest.approx(2 * (compute[1] - compute[0]), rel=1e-4)


def test_the_transformer_through_calibrate_predict_and_sensitivities(cli, tmp_path):
    """Rows may describe transformers by their `transformer.*` columns: a fit
    on rows made by `run` recovers their inter bandwidth and predicts the
    held-out row, and the sweep's derivative equals a central difference."""
    import sweep

    shape = {"layers": 4, "hidden": 256, "heads": 4, "vocab": 1000}
    base = {"model": "transformer", "seq_len": 128, "batch_size": 4, "gpus_per_node": 2, "transformer": shape,
            "inter": {"alpha": 4e-5, "bandwidth": 3e8}}
    cube = sweep.run({**base, "nodes": [2, 4, 8],
                      "outputs": ["throughput", "iteration_time", "d_iteration_time/d_inter.bandwidth"]})
    h = 0.02
    times = [float(sweep.run({**base, "nodes": 8, "inter": {"alpha": 4e-5, "bandwidth": 3e8 * s},
                              "outputs": ["iteration_time"]})["iteration_time"]) for s in (1 + h, 1 - h)]
    derivative = float(cube["d_iteration_time_d_inter.bandwidth"].sel(nodes=8))
    assert derivative < 0
    assert derivative == pytest.approx((times[0] - times[1]) / (2 * h * 3e8), rel=0.03)

    header = ["model", "seq_len", "batch_size", "nodes", "gpus_per_node",
              *(f"transformer.{key}" for key in shape), "throughput"]
    row = {n: ["transformer", 128, 4, n, 2, *shape.values(), float(cube["throughput"].sel(nodes=n))]
           for n in (2, 4, 8)}
    for name, rows in (("train.csv", [row[2], row[4]]), ("query.csv", [row[8]])):
        with open(tmp_path / name, "w", newline="") as handle:
            csv.writer(handle).writerows([header, *rows])
    (tmp_path / "base.toml").write_text("[inter]\nalpha = 4e-5\nbandwidth = 1e9\n")
    status, _, err = cli("calibrate", tmp_path / "train.csv", "--base", tmp_path / "base.toml",
                         "--fit", "inter.bandwidth", "-o", tmp_path / "fit.toml", "--prior", "0")
    assert status == 0, err
    status, _, err = cli("predict", tmp_path / "fit.toml", tmp_path / "query.csv", "-o", tmp_path / "pred.csv")
    assert status == 0, err
    with open(tmp_path / "pred.csv", newline="") as handle:
        predicted = float(next(csv.DictReader(handle))["predicted_throughput"])
    assert predicted == pytest.approx(row[8][-1], rel=1e-4)


def test_a_model_csv_with_a_column_given_twice_exits_2(cli, write_spec, tmp_path):
    model = tmp_path / "twice.csv"
    model.write_text("name,params,forward_flops,params\nfc,3,10,5\n")
    with pytest.raises(SpecError, match="column 'params' given twice"):
        zoo.get_model(str(model))
    status, _, stderr = cli("run", write_spec('model = "twice.csv"\nbatch_size = 8\n'), "-o", tmp_path / "o.nc")
    assert status == 2 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith(f"ssgd-sweep: error: model = '{model}'") and "column 'params' given twice" in stderr
    status, _, stderr = cli("models", model)
    assert status == 2 and "given twice" in stderr and len(stderr.strip().splitlines()) == 1


def test_a_model_file_with_a_byte_order_mark_reads(cli, tmp_path):
    # Spreadsheet programs write a UTF-8 byte-order mark before the header.
    csv_path, json_path = tmp_path / "bom.csv", tmp_path / "bom.json"
    csv_path.write_text("name,params,forward_flops\nfc,3,10\n", encoding="utf-8-sig")
    json_path.write_text('{"bom": {"layers": [{"name": "fc", "params": 3, "forward_flops": 10}]}}',
                         encoding="utf-8-sig")
    for path in (csv_path, json_path):
        assert path.read_bytes().startswith(b"\xef\xbb\xbf")
        model = zoo.get_model(str(path))
        assert [layer.name for layer in model.layers] == ["fc"] and model.params == 3
        status, out, stderr = cli("models", path)
        assert status == 0, stderr
