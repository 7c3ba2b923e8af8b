"""Bad command-line values and output paths: exit status 2, one line naming
the flag (or field) and the value, nothing written, and no input replaced."""
import subprocess
import sys

import pytest

from sweep.cli import main

ALLREDUCE = "nodes,gpus_per_node,message_bytes,allreduce_time\n" + "".join(
    f"{n},1,{m},{1e-5 * n + m / 1e9 * n:.6g}\n" for n in (2, 4) for m in (1e3, 1e5, 1e7))


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(ALLREDUCE)
    return path


def after_progress(err):
    """stderr less the progress lines a fit prints before it fails
    (`ssgd-sweep: fitting ...`): what is left must be the one error line."""
    lines = err.splitlines(keepends=True)
    assert all(not line.startswith("ssgd-sweep: error") for line in lines[:-1]), err
    return "".join(line for line in lines if not line.startswith("ssgd-sweep: ") or "error: " in line)


def one_line(status, err, *words):
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("ssgd-sweep: error: ")
    for word in words:
        assert word in err, (word, err)


def test_argparse_errors_are_one_line_through_the_script():
    result = subprocess.run([sys.executable, "-m", "sweep", "run", "x.toml", "-o", "y.nc", "--chunk", "abc"],
                            capture_output=True, text=True)
    one_line(result.returncode, result.stderr, "--chunk", "'abc'", "ssgd-sweep run --help")
    assert "usage:" not in result.stderr


@pytest.mark.parametrize("argv,words", [
    (["calibrate", "d.csv", "--fit", "inter", "-o", "f.toml", "--prior", "abc"], ["--prior", "'abc'"]),
    (["validate", "d.csv", "--fit", "inter", "--format", "xls"], ["--format", "'xls'"]),
    (["nonsense"], ["'nonsense'"]),
])
def test_argparse_errors_are_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    one_line(stop.value.code, capsys.readouterr().err, *words)


def test_validate_never_writes_over_its_inputs_or_one_output_over_the_other(cli, data, tmp_path):
    before = data.read_text()
    base = tmp_path / "base.toml"
    base.write_text("[inter]\nalpha = 1e-5\n")
    fit = ["--fit", "inter.alpha", "--split", "rows", "--folds", 2]
    for flag, path, extra, what in (("-o", data, [], "data"), ("--table", data, [], "data"),
                                    ("--table", base, ["--base", base], "base scenario")):
        status, _, err = cli("validate", data, *fit, flag, path, *extra)
        one_line(status, err, "--output" if flag == "-o" else "--table", str(path), what)
    assert data.read_text() == before and base.read_text() == "[inter]\nalpha = 1e-5\n"
    same = tmp_path / "same.csv"
    status, _, err = cli("validate", data, *fit, "-o", same, "--table", same)
    one_line(status, err, "--table", "--output")
    status, _, err = cli("validate", data, *fit, "--table", tmp_path)
    one_line(status, err, "--table", "is a directory")
    assert not same.exists()


def test_fit_option_and_fold_values(cli, data, tmp_path):
    status, _, err = cli("calibrate", data, "--fit", "inter.alpha", "-o", tmp_path / "f.toml", "--seed", -1)
    one_line(status, err, "--seed", "-1")
    status, _, err = cli("validate", data, "--fit", "inter.alpha", "--split", "rows", "--folds", 100)
    one_line(status, err, "--folds", "100", "more folds than rows (6)")
    assert not (tmp_path / "f.toml").exists()


@pytest.mark.parametrize("name,words", [
    ("", ["''", "empty file name"]),
    ("a" * 300 + ".nc", ["--output", "File name too long"]),
    ("data.csv/x.nc", ["--output", "its folder is a file"]),
])
def test_output_paths_that_cannot_be(name, words, cli, write_spec, data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec('model = "resnet50"\nbatch_size = 32\n')
    status, _, err = cli("run", spec, "-o", name)
    one_line(status, err, *words)
    status, _, err = cli("calibrate", data, "--fit", "inter.alpha", "-o", name)
    one_line(status, err, *words[1:])


def test_plot_of_a_folder(cli, tmp_path):
    status, _, err = cli("plot", tmp_path, "-o", tmp_path / "p.png")
    one_line(status, err, "cube", "is a directory")


GOOD_FIT = ('[inter]\nalpha = 1e-5\n[fit]\nfitted = ["inter.alpha"]\ncovariance = [[0.01]]\n'
            "residual_scale = 0.05\nresidual_quantile_90 = 0.1\ndegrees_of_freedom = 4\n")


@pytest.mark.parametrize("old,new,field,value", [
    ('fitted = ["inter.alpha"]', 'fitted = ["inter.bogus"]', "fit.fitted", "inter.bogus"),
    ('fitted = ["inter.alpha"]', 'fitted = "inter.alpha"', "fit.fitted", "inter.alpha"),
    ("covariance = [[0.01]]", "covariance = [[0.01, 0.0]]", "fit.covariance", "0.01"),
    ("covariance = [[0.01]]", 'covariance = [["x"]]', "fit.covariance", "x"),
    ("residual_quantile_90 = 0.1", 'residual_quantile_90 = "abc"', "fit.residual_quantile_90", "abc"),
    ("residual_quantile_90 = 0.1", "residual_quantile_90 = -1.0", "fit.residual_quantile_90", "-1.0"),
    ("residual_scale = 0.05", "residual_scale = nan", "fit.residual_scale", "nan"),
    ("degrees_of_freedom = 4", "degrees_of_freedom = 0", "fit.degrees_of_freedom", "0"),
])
def test_predict_refuses_a_malformed_fit_table(old, new, field, value, cli, tmp_path):
    query = tmp_path / "q.csv"
    query.write_text("nodes,gpus_per_node,message_bytes\n2,1,1e6\n")
    good, bad, out = tmp_path / "good.toml", tmp_path / "bad.toml", tmp_path / "p.csv"
    good.write_text(GOOD_FIT)
    status, _, err = cli("predict", good, query, "-o", out)
    assert status == 0 and "predicted_allreduce_time_low" in out.read_text(), err
    out.unlink()
    assert old in GOOD_FIT
    bad.write_text(GOOD_FIT.replace(old, new))
    status, _, err = cli("predict", bad, query, "-o", out)
    one_line(status, err, field, value)
    assert not out.exists()


def test_a_byte_order_mark_is_not_part_of_the_first_name(tmp_path):
    """Spreadsheets and Windows editors start UTF-8 files with a BOM: the data's
    first column and the scenario's first key keep their names."""
    from sweep.fit.data import read_rows
    from sweep.scenario.spec import read_scenario_file

    data = tmp_path / "bom.csv"
    data.write_bytes(b"\xef\xbb\xbf" + ALLREDUCE.encode())
    header, rows = read_rows(data, {})
    assert header[0] == "nodes" and rows[0].point["nodes"] == 2
    spec = tmp_path / "bom.toml"
    spec.write_bytes(b'\xef\xbb\xbfmodel = "resnet50"\nbatch_size = 32\n')
    assert read_scenario_file(spec) == {"model": "resnet50", "batch_size": 32}


def test_a_fit_that_cannot_reach_a_finite_loss_writes_nothing(cli, tmp_path):
    """Times of 1e300 s (no unit mistake makes them sane) leave every start's loss
    infinite: exit 2 naming the row furthest from the fit, no FIT.toml of
    infinite errors, and `validate`, which fits through the same function,
    stops the same way instead of printing errors of 1e300 %."""
    data = tmp_path / "absurd.csv"
    data.write_text("nodes,gpus_per_node,message_bytes,allreduce_time\n"
                    "2,1,1000,1e300\n2,1,100000,1e-300\n4,1,1000,2e-5\n4,1,100000,1e-4\n")
    out = tmp_path / "fit.toml"
    fast = ("--starts", 1, "--steps", 5, "--polish", 0)
    status, _, err = cli("calibrate", data, "--fit", "inter.alpha", "--fit", "inter.bandwidth", "-o", out, *fast)
    one_line(status, after_progress(err), "allreduce_time = '1e-300'", "line 3:",
             "no start of the fit reached a finite loss")
    assert not out.exists()
    table = tmp_path / "table.md"
    status, _, err = cli("validate", data, "--fit", "inter.alpha", "--fit", "inter.bandwidth", "--split", "rows",
                         "--folds", 2, "-o", tmp_path / "errors.csv", "--table", table, *fast)
    assert status == 2 and "Traceback" not in err, err
    last = err.splitlines()[-1]  # (after validate's progress lines)
    assert last.startswith("ssgd-sweep: error: allreduce_time = '1e-300': line 3: no start of the fit"), last
    assert not table.exists() and not (tmp_path / "errors.csv").exists()


@pytest.mark.parametrize("fmt, text, cell", [
    ("osu", "# OSU MPI Allreduce Latency Test v5.4.0\n# Size       Avg Latency(us)\n"
            "1000 1e300\n100000 1e-300\n200000 150.0\n", "latency [us] = '1e-300'"),
    ("osu-csv", "processes,message_bytes,latency_us\n2,1000,1e300\n2,100000,1e-300\n2,200000,150.0\n",
     "latency_us = '1e-300'"),
    ("nccl-tests-csv", "size_bytes,nodes,gpus_per_node,time_us_oop\n1000,2,1,1e300\n100000,2,1,1e-300\n"
                       "200000,2,1,150.0\n", "time_us_oop = '1e-300'")])
def test_a_benchmark_file_that_no_fit_explains_is_named_by_its_own_column(cli, tmp_path, fmt, text, cell):
    # The error names the cell as the file writes it (microseconds), not the time in seconds it became.
    data = tmp_path / "absurd.txt"
    data.write_text(text)
    base = tmp_path / "base.toml"
    base.write_text("nodes = 2\ngpus_per_node = 1\n" if fmt == "osu" else "")
    status, _, err = cli("calibrate", data, "--base", base, "--format", fmt, "--fit", "inter.alpha",
                         "--fit", "inter.bandwidth", "-o", tmp_path / "fit.toml", "--starts", 1, "--steps", 5,
                         "--polish", 0)
    one_line(status, after_progress(err), cell, "line 4:" if fmt == "osu" else "line 3:", "allreduce_time", " s)")
    assert not (tmp_path / "fit.toml").exists()
