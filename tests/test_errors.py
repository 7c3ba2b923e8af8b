"""Bad input: exit status 2, one line naming the key and the value, no file left."""
import subprocess
import sys

import pytest

from sweep.errors import SpecError
from sweep.scenario.spec import load_spec

GOOD = """
model = "resnet50"
batch_size = 32
nodes = [1, 2]
gpus_per_node = 4
"""

# (scenario text, key the message must name, value the message must show)
BAD = {
    "unknown key": ('model = "resnet50"\nbatch_size = 32\nbatchsize = 4\n', "batchsize", "4"),
    "unknown model": ('model = "resnet51"\nbatch_size = 32\n', "model", "resnet51"),
    "zero nodes": ('model = "resnet50"\nbatch_size = 32\nnodes = 0\n', "nodes", "0"),
    "negative bandwidth": ('model = "resnet50"\nbatch_size = 32\n[inter]\nbandwidth = -1e9\n',
                           "inter.bandwidth", "-1000000000.0"),
    "nan latency": ('model = "resnet50"\nbatch_size = 32\n[inter]\nalpha = nan\n', "inter.alpha", "nan"),
    "string batch size": ('model = "resnet50"\nbatch_size = "big"\n', "batch_size", "big"),
    "empty axis": ('model = "resnet50"\nbatch_size = 32\nnodes = []\n', "nodes", "[]"),
    "broken toml": ('model = "resnet50"\nbatch_size = = 32\n', "scenario", "TOML"),
    "unknown strategy": ('model = "resnet50"\nbatch_size = 32\nstrategy = "wfpb"\n', "strategy", "wfpb"),
    "zero bandwidth in axis": ('model = "resnet50"\nbatch_size = 32\ninter.bandwidth = [1e9, 0]\n',
                               "inter.bandwidth", "0"),
    "fractional integer": ('model = "resnet50"\nbatch_size = 32.5\n', "batch_size", "32.5"),
    "unknown link": ('model = "resnet50"\nbatch_size = 32\ninter = "carrier-pigeon"\n', "inter", "carrier-pigeon"),
    "missing model": ("batch_size = 32\n", "model", "None"),
    "seq_len too long": ('model = "bert_base"\nbatch_size = 8\nseq_len = 4096\n', "seq_len", "4096"),
    "unknown output": ('model = "resnet50"\nbatch_size = 32\noutputs = ["latency"]\n', "outputs", "latency"),
    "repeated axis value": ('model = "resnet50"\nbatch_size = [32, 32]\n', "batch_size", "32"),
    # MG-WFBP's planner: an alpha-beta pair, both or neither.
    "planner alpha alone": ('model = "resnet50"\nbatch_size = 32\nstrategy = "mgwfbp"\n[mgwfbp]\nalpha = 5e-4\n',
                            "mgwfbp.alpha", "0.0005"),
    "negative planner floor": ('model = "resnet50"\nbatch_size = 32\n[mgwfbp]\nmin_params = -1\n',
                               "mgwfbp.min_params", "-1"),
    # The DAG shape keys of DESIGN 2.5.
    "unknown update": ('model = "resnet50"\nbatch_size = 32\nupdate = "eager"\n', "update", "eager"),
    "zero stage 4": ('model = "resnet50"\nbatch_size = 32\nzero = 4\n', "zero", "4"),
    "zero with ps": ('model = "resnet50"\nbatch_size = 32\nzero = 2\nalgorithm = "ps"\n', "zero", "ps"),
    "zero with layerwise": ('model = "resnet50"\nbatch_size = 32\nzero = 3\nupdate = "layerwise"\n',
                            "zero", "layerwise"),
    "zero accumulation": ('model = "resnet50"\nbatch_size = 32\naccumulation = 0\n', "accumulation", "0"),
    "pipelined without hierarchical": ('model = "resnet50"\nbatch_size = 32\nalgorithm = "ring"\n'
                                       '[hierarchical]\npipelined = true\n', "hierarchical.pipelined", "ring"),
    "pipelined not a bool": ('model = "resnet50"\nbatch_size = 32\nalgorithm = "hierarchical"\n'
                             '[hierarchical]\npipelined = "yes"\n', "hierarchical.pipelined", "yes"),
    "zero with ps in an axis": ('model = "resnet50"\nbatch_size = 32\nzero = [0, 1]\nalgorithm = ["ring", "ps"]\n',
                                "zero", "ps"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenario_exits_2_with_one_line_and_no_file(case, cli, write_spec, tmp_path):
    text, key, value = BAD[case]
    out = tmp_path / "out.nc"
    status, stdout, stderr = cli("run", write_spec(text), "-o", out)
    assert status == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert key in lines[0] and value in lines[0], lines[0]
    assert "Traceback" not in stderr
    assert not out.exists()
    assert list(tmp_path.glob("*.nc*")) == [] and list(tmp_path.glob(".*part")) == []


@pytest.mark.parametrize("command", ["run", "explain"])
def test_missing_file(command, cli, tmp_path):
    missing = tmp_path / "nope.toml"
    args = [command, missing] + (["-o", tmp_path / "out.nc"] if command == "run" else [])
    status, _, stderr = cli(*args)
    assert status == 2
    assert str(missing) in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.nc").exists()


def test_output_directory_missing(cli, write_spec, tmp_path):
    status, _, stderr = cli("run", write_spec(GOOD), "-o", tmp_path / "no" / "such" / "dir.nc")
    assert status == 2 and "output" in stderr


def test_explain_refuses_a_grid(cli, write_spec):
    status, _, stderr = cli("explain", write_spec(GOOD))
    assert status == 2 and "nodes" in stderr and "one configuration" in stderr


@pytest.mark.parametrize("strategy", ['strategy = "priority"\nupdate = "layerwise"', 'preset = "bytescheduler"'])
def test_explain_refuses_a_fusing_priority_channel_in_one_line(cli, write_spec, strategy):
    spec = write_spec(f'model = "resnet50"\nbatch_size = 32\n{strategy}\nfuse_posted = true\n')
    status, _, stderr = cli("explain", spec)
    assert status == 2 and "fuse_posted" in stderr and "True" in stderr and len(stderr.strip().splitlines()) == 1


def test_explain_takes_fuse_posted_where_no_priority_channel_runs(cli, write_spec):
    spec = write_spec('model = "resnet50"\nbatch_size = 32\nstrategy = "wfbp"\nfuse_posted = true\n')
    assert cli("explain", spec)[0] == 0


def test_existing_output_is_kept_when_a_rerun_fails(cli, write_spec, tmp_path):
    out = tmp_path / "out.nc"
    out.write_bytes(b"previous result")
    status, _, _ = cli("run", write_spec('model = "resnet50"\nbatch_size = 0\n'), "-o", out)
    assert status == 2 and out.read_bytes() == b"previous result"


def test_key_given_twice_in_two_spellings():
    with pytest.raises(SpecError, match="given twice"):
        load_spec({"model": "resnet50", "batch_size": 32, "gpu": "v100", "gpu.name": "a100"})


def test_spec_error_is_a_value_error_with_key_and_value():
    with pytest.raises(SpecError) as info:
        load_spec({"model": "resnet50", "batch_size": 32, "compute": {"efficiency": 1.5}})
    assert info.value.key == "compute.efficiency" and info.value.value == 1.5
    assert isinstance(info.value, ValueError)


def test_bad_input_through_the_console_script(tmp_path):
    """The real entry point: no traceback on stderr, status 2."""
    spec = tmp_path / "bad.toml"
    spec.write_text('model = "resnet50"\nbatch_size = 32\nnodes = 0\n')
    result = subprocess.run([sys.executable, "-m", "sweep", "run", str(spec), "-o", str(tmp_path / "o.nc")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "nodes" in result.stderr
    assert not (tmp_path / "o.nc").exists()


# A misspelt name gets the nearest valid one, in the same single line (issue 12).
MISSPELT = {
    "key": ('model = "resnet50"\nbatch_size = 32\n[inter]\nbandwith = 1e9\n', "did you mean inter.bandwidth?"),
    "model": ('model = "resnet5"\nbatch_size = 32\n', "did you mean resnet50?"),
    "strategy": ('model = "resnet50"\nbatch_size = 32\nstrategy = "wfpb"\n', "did you mean wfbp?"),
    "link": ('model = "resnet50"\nbatch_size = 32\ninter = "10gbee"\n', "did you mean 10gbe?"),
    "output": ('model = "resnet50"\nbatch_size = 32\noutputs = ["throughputt"]\n', "did you mean throughput?"),
    "sampled key": ('model = "resnet50"\nbatch_size = 32\n[sample]\nn = 4\nnodez = {min = 1, max = 4}\n',
                    "did you mean nodes?"),
}


@pytest.mark.parametrize("case", sorted(MISSPELT))
def test_a_misspelt_name_gets_the_nearest_one(case, cli, write_spec, tmp_path):
    text, hint = MISSPELT[case]
    out = tmp_path / "out.nc"
    status, _, err = cli("run", write_spec(text), "-o", out)
    assert status == 2 and not out.exists()
    assert err.count("\n") == 1 and hint in err, err


def test_a_key_far_from_every_key_names_where_the_keys_are(cli, write_spec, tmp_path):
    status, _, err = cli("run", write_spec('model = "resnet50"\nbatch_size = 32\nzzz = 1\n'), "-o", tmp_path / "o.nc")
    assert status == 2 and "did you mean" not in err and "Scenario files" in err and len(err) < 200, err


def test_a_misspelt_fitted_key_gets_the_nearest_one(cli, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("nodes,gpus_per_node,message_bytes,allreduce_time\n2,1,1e6,1e-3\n")
    status, _, err = cli("calibrate", data, "--fit", "inter.bandwith", "-o", tmp_path / "fit.toml")
    assert status == 2 and err.count("\n") == 1 and "did you mean inter.bandwidth?" in err, err
    assert not (tmp_path / "fit.toml").exists()


def test_a_long_value_keeps_its_end():
    """A long path is cut in the middle: its file name, the part that says
    which file, stays in the one line."""
    path = "/tmp/" + "deep/" * 40 + "measurements.csv"
    message = str(SpecError("data", path, "cannot read file"))
    shown = message.split(" = ", 1)[1].rsplit(": ", 1)[0]
    assert len(shown) == 160 and shown.startswith("'/tmp/deep/") and shown.endswith("/measurements.csv'")
    assert "..." in shown
    assert str(SpecError("data", "short.csv", "x")) == "data = 'short.csv': x"
