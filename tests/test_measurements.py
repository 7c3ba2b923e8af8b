"""calibrate reads nccl-tests and OSU output as the tools print it (issue 8, item 5)."""
from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import numpy as np
import pytest

from experiment_modules import load_study
from sweep.fit.measurements import detect, read_measurements

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "nccl_tests"

NCCL = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 8388608 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41017 on      nodeA device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  41018 on      nodeA device  1 [0x0b] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  51017 on      nodeB device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  51018 on      nodeB device  1 [0x0b] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
nodeA:41017:41017 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
           8             2     float     sum      -1    95.31    0.00    0.00      0    30.12    0.00    0.00      0
          16             4     float     sum      -1    30.40    0.00    0.00      0    30.33    0.00    0.00      0
          32             8     float     sum      -1    30.52    0.00    0.00      0    30.41    0.00    0.00      0
          64            16     float     sum      -1    31.05    0.00    0.00      0    30.98    0.00    0.00      0
         128            32     float     sum      -1    80.00    0.00    0.00      0    31.20    0.00    0.00      0
         256            64     float     sum      -1    31.70    0.01    0.01      0    31.66    0.01    0.01      0
     1048576        262144     float     sum      -1    210.5    4.98    7.47      0    209.9    5.00    7.49      0
     8388608       2097152     float     sum      -1   1240.1    6.76   10.15      0   1238.7    6.77   10.16      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 2.1
"""

# nccl-tests before 2.0: no root column, an `error` column instead of #wrong, no device lines here
NCCL_OLD = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float     sum    39.61    0.00    0.00  0e+00    39.41    0.00    0.00  0e+00
          16             4   float     sum    39.28    0.00    0.00  0e+00    39.36    0.00    0.00  0e+00
     1048576        262144   float     sum    98.33   10.66   18.66  0e+00    97.48   10.76   18.83  0e+00
"""

OSU = """\
# OSU MPI Allreduce Latency Test v5.4.0
# Size       Avg Latency(us)
4                      31.92
8                      32.20
16                     32.38
1048576              1839.14
"""


def test_nccl_tests_text(tmp_path):
    path = tmp_path / "allreduce.txt"
    path.write_text(NCCL)
    assert detect(path) == "nccl-tests"
    rows, odd, fmt = read_measurements(path, {})
    # layout from the device lines: 4 ranks on 2 hosts
    assert {(r["nodes"], r["gpus_per_node"]) for r in rows} == {(2, 2)}
    # the warm-up row (95 us, 3x the next) and the 128-byte spike are reported, not fitted
    assert [a.message_bytes for a in odd] == [8, 128]
    assert "warm-up" in odd[0].reason and "outlier" in odd[1].reason
    assert [r["message_bytes"] for r in rows] == [16, 32, 64, 256, 1048576, 8388608]
    assert rows[-1]["allreduce_time"] == pytest.approx(1240.1e-6)  # out-of-place time, not busbw


def test_old_nccl_tests_text_needs_the_layout(tmp_path):
    path = tmp_path / "old.txt"
    path.write_text(NCCL_OLD)
    assert detect(path) == "nccl-tests"
    with pytest.raises(ValueError, match="nodes"):
        read_measurements(path, {})
    rows, odd, _ = read_measurements(path, {"nodes": 1, "gpus_per_node": 8})
    assert [r["allreduce_time"] for r in rows] == pytest.approx([39.61e-6, 39.28e-6, 98.33e-6]) and not odd


def test_osu_text_takes_the_processes_from_the_base(tmp_path):
    path = tmp_path / "osu.txt"
    path.write_text(OSU)
    assert detect(path) == "osu"
    rows, _, _ = read_measurements(path, {"nodes": 4, "gpus_per_node": 1})
    assert [(r["message_bytes"], r["nodes"]) for r in rows][-1] == (1048576, 4)
    assert rows[0]["allreduce_time"] == pytest.approx(31.92e-6)


OSU_CSV = """\
processes,message_bytes,latency_us
2,4,31.92
2,1048576,1839.1
4,4,54.5
4,1048576,2252.0
"""


def test_osu_csv_places_each_process_count(tmp_path):
    # The file in ../shared/data: one row per process count and size, one process to a node by default.
    path = tmp_path / "osu_allreduce_latency.csv"
    path.write_text(OSU_CSV)
    assert detect(path) == "osu-csv"
    rows, odd, fmt = read_measurements(path, {})
    assert fmt == "osu-csv" and not odd
    assert [(r["nodes"], r["gpus_per_node"], r["message_bytes"]) for r in rows] == [
        (2, 1, 4), (2, 1, 1048576), (4, 1, 4), (4, 1, 1048576)]
    assert [r["allreduce_time"] for r in rows] == pytest.approx([31.92e-6, 1839.1e-6, 54.5e-6, 2252.0e-6])
    rows, _, _ = read_measurements(path, {"gpus_per_node": 2})  # two processes to a node
    assert [(r["nodes"], r["gpus_per_node"]) for r in rows] == [(1, 2), (1, 2), (2, 2), (2, 2)]


@pytest.mark.parametrize("base, key", [("gpus_per_node = 4\n", "gpus_per_node = 4"),
                                       ("gpus_per_node = [1, 2]\n", "gpus_per_node = [1, 2]")])
def test_osu_csv_processes_that_do_not_fill_nodes_exit_2(tmp_path, cli, base, key):
    path = tmp_path / "osu.csv"
    path.write_text(OSU_CSV)
    spec = tmp_path / "base.toml"
    spec.write_text(base)
    status, _, err = cli("calibrate", path, "--base", spec, "--fit", "inter.alpha", "-o", tmp_path / "f.toml")
    assert status == 2 and key in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "f.toml").exists()


@pytest.mark.parametrize("cell", ["inf", "-54.5", "abc", ""])
def test_osu_csv_rows_without_a_positive_latency_are_reported(tmp_path, cell):
    # As in the other three readers: the row is left out and named, the rest is read.
    path = tmp_path / "osu.csv"
    path.write_text(OSU_CSV.replace("54.5", cell) + "8,4")  # and a last row cut off mid-line
    rows, odd, _ = read_measurements(path, {})
    assert [(r["nodes"], r["message_bytes"]) for r in rows] == [(2, 4), (2, 1048576), (4, 1048576)]
    assert [a.line for a in odd] == [4, 6] and all(a.reason.startswith("unreadable row: ") for a in odd)
    assert f"latency_us = {cell!r}" in odd[0].reason and "cut off after 2 of 3 columns" in odd[1].reason


@pytest.mark.parametrize("text, key", [(OSU_CSV.replace("4,4,54.5", "2.5,4,54.5"), "processes = '2.5'"),
                                       (OSU_CSV.replace("4,4,54.5", "0,4,54.5"), "processes = '0'"),
                                       (OSU_CSV.replace("latency_us", "latency"), "latency_us"),
                                       ("processes,message_bytes,latency_us\n2,4,inf\n", "latency_us = 'inf'")])
def test_osu_csv_layout_errors_and_files_of_no_row_exit_2(tmp_path, cli, text, key):
    path = tmp_path / "osu.csv"
    path.write_text(text)
    fmt = [] if "latency_us" in text else ["--format", "osu-csv"]  # (no longer detected without it)
    status, _, err = cli("calibrate", path, *fmt, "--fit", "inter.alpha", "-o", tmp_path / "f.toml")
    assert status == 2 and key in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "f.toml").exists()


@pytest.mark.skipif(not (DATA.parent / "osu_allreduce_latency.csv").exists(),
                    reason=f"OSU latencies not available: {DATA.parent / 'osu_allreduce_latency.csv'} is absent")
def test_osu_csv_reads_as_its_calibrate_mapping():
    # Read directly, the file gives the rows its mapping to calibrate's own CSV did (nodes = processes).
    path = DATA.parent / "osu_allreduce_latency.csv"
    rows, odd, _ = read_measurements(path, {})
    with open(path, newline="") as handle:
        expected = [(int(r["processes"]), float(r["message_bytes"]), float(r["latency_us"]) * 1e-6)
                    for r in csv.DictReader(handle)]
    assert not odd and len(rows) == len(expected) == 798
    assert [(r["nodes"], r["message_bytes"], r["allreduce_time"]) for r in rows] == expected


def test_calibrate_and_predict_read_benchmark_output(tmp_path, cli):
    path = tmp_path / "allreduce.txt"
    path.write_text(NCCL)
    base = tmp_path / "base.toml"
    base.write_text('inter = "100gbe"\n')
    fit = tmp_path / "fit.toml"
    status, _, err = cli("calibrate", path, "--base", base, "--fit", "inter.alpha", "--fit", "inter.bandwidth",
                         "-o", fit, "--starts", 2, "--steps", 300)
    assert status == 0, err
    assert "left out of the fit as anomalous (2)" in err and "warm-up" in err
    # progress, stage by stage, before the summary
    stages = [line for line in err.splitlines() if line.startswith("ssgd-sweep: ")]
    assert [line.split(" ")[1] for line in stages] == ["fitting", "Adam", "best"], err
    assert "fitting 2 key(s) to 6 observation(s) from 2 start(s), 300 + 500 Adam steps each" in stages[0]
    doc = tomllib.loads(fit.read_text())
    assert doc["fit"]["rows"] == 6 and len(doc["fit"]["excluded"]) == 2
    assert doc["inter"]["bandwidth"] <= 12.5e9  # 100gbe's line rate bounds the fit
    out = tmp_path / "pred.csv"
    status, _, err = cli("predict", fit, path, "-o", out)
    assert status == 0, err
    assert "warning: 2 row(s) of" in err and "left out as anomalous, not predicted" in err  # said, not silent
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 and all(float(r["predicted_allreduce_time_low"]) < float(r["predicted_allreduce_time"])
                                  < float(r["predicted_allreduce_time_high"]) for r in rows)


def test_osu_without_processes_exits_2(tmp_path, cli):
    path = tmp_path / "osu.txt"
    path.write_text(OSU)
    status, _, err = cli("calibrate", path, "--fit", "inter.alpha", "-o", tmp_path / "f.toml")
    assert status == 2 and "nodes" in err and not (tmp_path / "f.toml").exists()


@pytest.mark.skipif(not DATA.exists(), reason=f"nccl-tests tables not available: {DATA} is absent")
def test_every_nccl_tests_table_reads():
    tables = sorted(DATA.glob("*.csv"))
    assert len(tables) == 23
    for path in tables:
        assert detect(path) == "nccl-tests-csv", path.name
        rows, odd, _ = read_measurements(path, {})
        assert len(rows) + len(odd) >= 11, path.name
        assert all(r["nodes"] * r["gpus_per_node"] >= 2 for r in rows)


@pytest.mark.skipif(not DATA.exists(), reason=f"nccl-tests tables not available: {DATA} is absent")
@pytest.mark.slow
def test_validate_nccl_quick_run(tmp_path):
    module = load_study("validate_nccl")
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "aws_p5_2x8_efa" in table and "(c) across rank counts" in table and "alpha only" in table
    assert "nccl protocols, slowest edge's line rate" in table
    # records.csv: every held-out size of every table and variant, the measured times left out
    with open(tmp_path / "records.csv", newline="") as handle:
        records = list(csv.DictReader(handle))
    assert tuple(records[0]) == module.HELD_OUT and "measured" not in records[0]
    kind = "multi-node, nccl protocols"
    errors = [float(r["model_error"]) for r in records if r["table"] == "aws_p5_2x8_efa" and r["kind"] == kind]
    cells = next(line for line in table.splitlines() if line.startswith(f"| aws_p5_2x8_efa | {kind} |")).split("|")
    assert int(cells[3]) == len(errors) and cells[6].strip() == f"{100 * np.median(errors):.1f} %"


def test_validate_nccl_fits_the_bandwidth_where_no_line_rate_is_known():
    """A table whose source states no link speed runs unbounded: NCCL's
    protocols fit its bandwidth (no bandwidth "at" an infinite line rate);
    a known rate fixes the bandwidth there; a single node has no inter link."""
    module = load_study("validate_nccl")
    assert [n for n, (rate, _) in module.LINE_RATES.items() if rate is None] == ["nccltests323_l40s_2x1_tcp"]
    unknown = tomllib.loads(module.nccl_base(None, "pcie4", nodes=True))
    assert "bandwidth" not in unknown["inter"] and unknown["inter"]["line_rate"] == module.UNBOUNDED
    known = tomllib.loads(module.nccl_base(50e9, "nvlink3", nodes=True))
    assert known["inter"]["bandwidth"] == known["inter"]["line_rate"] == 50e9
    assert "inter" not in tomllib.loads(module.nccl_base(None, "pcie4"))


def test_validate_nccl_runs_the_protocols_nccl_runs_on_each_machine():
    """NCCL enables LL128 only where GPUs of compute capability 7.0-10.0 meet
    over NVLink: every PCIe table, the L40S pair and the Azure VM whose ring
    crosses PCIe run without it, the NVSwitch boxes with it; LL at half the
    link where the GPUs have no NVLink, NCCL's quarter elsewhere."""
    module = load_study("validate_nccl")
    for name, link in module.INTRA_LINKS.items():
        keys = tomllib.loads(module.nccl_base(None, link, name)).get("nccl", {})
        assert keys.get("ll128", True) is ("pcie" not in link and name != "azure_nc96ads_a100v4_1x4"), name
        assert keys.get("ll_share", 0.25) == (0.5 if link.startswith("pcie") else 0.25), name
    for name, link in module.NCCL_INTRA.items():
        keys = tomllib.loads(module.nccl_base(1e11, link, name, nodes=True)).get("nccl", {})
        assert keys == ({"ll128": False, "ll_share": 0.5} if name == "nccltests323_l40s_2x1_tcp" else {}), name


def test_calibrate_predict_and_validate_take_a_format(tmp_path, cli):
    path = tmp_path / "osu.txt"
    path.write_text(OSU.replace("# OSU MPI Allreduce Latency Test v5.4.0\n", ""))  # no banner: not detected
    base = tmp_path / "base.toml"
    base.write_text("nodes = 2\ngpus_per_node = 1\n")
    fit = tmp_path / "fit.toml"
    status, _, err = cli("calibrate", path, "--base", base, "--fit", "inter.alpha", "-o", fit,
                         "--starts", 1, "--steps", 100)
    assert status == 2 and "unknown column" in err and not fit.exists()  # read as calibrate's own CSV
    status, _, err = cli("calibrate", path, "--base", base, "--fit", "inter.alpha", "-o", fit, "--format", "osu",
                         "--starts", 1, "--steps", 100)
    assert status == 0, err
    out = tmp_path / "pred.csv"
    status, _, err = cli("predict", fit, path, "-o", out, "--format", "osu")
    assert status == 0, err
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["message_bytes"]) for r in rows] == [4, 8, 16, 1048576]
    assert all(float(r["predicted_allreduce_time"]) > 0 for r in rows)
    status, _, err = cli("validate", path, "--base", base, "--fit", "inter.alpha", "--split", "size", "--cut", 20,
                         "--format", "osu", "--starts", 1, "--steps", 100)
    assert status == 0, err


# Malformed data rows are reported as anomalies left out, never dropped silently (line 19 is the 1048576-byte row).
CUT_ROWS = {
    "cut after the type": "     1048576        262144     float\n",
    "cut in the time": "     1048576        262144     float     sum      -1    210.\n",
    "cut in the in-place columns": "     1048576        262144     float     sum      -1    210.5    4.98    7.47      0    209\n",
    "nan time": "     1048576        262144     float     sum      -1      nan    4.98    7.47      0    209.9    5.00    7.49      0\n",
    "negative time": "     1048576        262144     float     sum      -1   -210.5    4.98    7.47      0    209.9    5.00    7.49      0\n",
}


@pytest.mark.parametrize("case", sorted(CUT_ROWS))
def test_unreadable_nccl_tests_rows_are_reported(tmp_path, case):
    lines = NCCL.splitlines(keepends=True)
    assert lines[18].split()[0] == "1048576"
    lines[18] = CUT_ROWS[case]
    path = tmp_path / "allreduce.txt"
    path.write_text("".join(lines))
    rows, odd, _ = read_measurements(path, {})
    assert [r["message_bytes"] for r in rows] == [16, 32, 64, 256, 8388608]
    # the warm-up row, the spike and the cut row; banner, NCCL INFO and summary lines are not data rows
    assert [a.line for a in odd] == [13, 17, 19]
    assert odd[2].reason.startswith("unreadable row: ") and "1048576" in odd[2].reason


def test_unreadable_rows_without_a_header_line_are_reported(tmp_path):
    text = "".join(line for line in NCCL_OLD.splitlines(keepends=True) if "size" not in line)
    text = text.replace("98.33   10.66   18.66  0e+00    97.48   10.76   18.83  0e+00", "nan")
    path = tmp_path / "old.txt"
    path.write_text(text + "     2097152        524288   float\n")
    rows, odd, _ = read_measurements(path, {"nodes": 1, "gpus_per_node": 8})
    assert [r["message_bytes"] for r in rows] == [8, 16]
    assert [a.line for a in odd] == [7, 8] and all(a.reason.startswith("unreadable row: ") for a in odd)


@pytest.mark.parametrize("row", ["8   abc\n", "16      \n", "32   -5.0\n"])
def test_unreadable_osu_rows_are_reported(tmp_path, row):
    path = tmp_path / "osu.txt"
    path.write_text(OSU.replace("16                     32.38\n", row) + "1 more process has sent help message help-mpi-btl-openib.txt\n")
    rows, odd, _ = read_measurements(path, {"nodes": 2, "gpus_per_node": 1})
    assert [r["message_bytes"] for r in rows] == [4, 8, 1048576]
    assert [a.line for a in odd] == [5] and odd[0].reason.startswith("unreadable row: ")


def test_unreadable_rows_are_printed_by_calibrate_and_a_file_of_them_exits_2(tmp_path, cli):
    path = tmp_path / "allreduce.txt"
    path.write_text(NCCL.replace("210.5    4.98    7.47      0    209.9    5.00    7.49      0", "210."))
    fit = tmp_path / "fit.toml"
    status, _, err = cli("calibrate", path, "--fit", "inter.alpha", "-o", fit, "--starts", 1, "--steps", 50)
    assert status == 0, err
    assert "left out of the fit as anomalous (3)" in err and "line 19: unreadable row: " in err
    assert "line 19: unreadable row" in " ".join(tomllib.loads(fit.read_text())["fit"]["excluded"])
    lines = NCCL.splitlines(keepends=True)
    path.write_text("".join(lines[:12]) + "           8             2     float\n")
    status, _, err = cli("calibrate", path, "--fit", "inter.alpha", "-o", tmp_path / "f2.toml")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "line 13: unreadable row" in err and not (tmp_path / "f2.toml").exists()


NCCL_CSV = """\
gpu,size_bytes,nodes,gpus_per_node,time_us_oop,busbw_oop
A100,8,2,4,30.1,0.00
A100,16,2,4,30.4,0.00
A100,1048576,2,4,210.5,7.47
"""


def test_unreadable_nccl_tests_csv_rows_are_reported(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(NCCL_CSV.replace("30.4", "abc"))
    rows, odd, fmt = read_measurements(path, {})
    assert fmt == "nccl-tests-csv" and [r["message_bytes"] for r in rows] == [8, 1048576]
    assert [a.line for a in odd] == [3] and "unreadable row: time_us_oop = 'abc'" in odd[0].reason
    path.write_text(NCCL_CSV + "A100,2097152,2")  # cut off mid-row
    rows, odd, _ = read_measurements(path, {})
    assert len(rows) == 3 and [a.line for a in odd] == [5] and "cut off" in odd[0].reason


@pytest.mark.parametrize("cell, shown", [("eight", "'eight'"), ("", "''"), ("0", "'0'"), ("2.5", "'2.5'")])
def test_bad_nodes_in_an_nccl_tests_csv_exits_2_naming_the_line(tmp_path, cli, cell, shown):
    path = tmp_path / "t.csv"
    path.write_text(NCCL_CSV.replace("16,2,4", f"16,{cell},4"))
    status, _, err = cli("calibrate", path, "--fit", "inter.alpha", "-o", tmp_path / "f.toml")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"nodes = {shown}: line 3 of t.csv: must be a whole number >= 1" in err, err


@pytest.mark.parametrize("column", ["nodes", "gpus_per_node", "time_us_oop"])
def test_a_missing_nccl_tests_csv_column_is_named(tmp_path, cli, column):
    from sweep.errors import SpecError

    header, *rows = NCCL_CSV.splitlines()
    keep = [i for i, c in enumerate(header.split(",")) if c != column]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in [header, *rows]) + "\n")
    with pytest.raises(SpecError, match=rf"^{column} = None: t.csv: column missing .*missing {column}\)$"):
        read_measurements(path, {}, "nccl-tests-csv")
    if column != "time_us_oop":  # (without it the file is not detected as nccl-tests-csv)
        status, _, err = cli("calibrate", path, "--fit", "inter.alpha", "-o", tmp_path / "f.toml")
        assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert f"error: {column} = None: " in err and "missing" in err, err


def test_benchmark_csv_with_a_byte_order_mark_reads(tmp_path):
    for name, text, base in (("t.csv", NCCL_CSV, {}), ("osu.csv", OSU_CSV, {})):
        plain, marked = tmp_path / f"plain_{name}", tmp_path / f"bom_{name}"
        plain.write_text(text)
        marked.write_text(text, encoding="utf-8-sig")
        assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
        assert detect(marked) == detect(plain)
        assert read_measurements(marked, base) == read_measurements(plain, base)


@pytest.mark.skipif(not DATA.exists(), reason=f"nccl-tests tables not available: {DATA} is absent")
def test_every_nccl_tests_table_reads_every_row():
    for path in sorted(DATA.glob("*.csv")):
        rows, odd, _ = read_measurements(path, {})
        with open(path, newline="") as handle:
            assert len(rows) + len(odd) == sum(1 for _ in csv.DictReader(handle)), path.name
        assert not [a for a in odd if "unreadable" in a.reason], path.name
