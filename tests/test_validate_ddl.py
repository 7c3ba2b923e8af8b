"""experiments/validate_ddl.py, ddl_data and ddl_mapping: the method mapping, the baselines, (slow) --quick runs."""
from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import numpy as np
import pytest

from experiment_modules import load_study
from sweep.scenario.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data" / "ddl_benchmarks_10gbe.csv"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"measured data not available: {DATA} is absent")


MAPPING = load_study("ddl_mapping")  # methods -> scenario keys
LABELS = load_study("network_labels")


def module():
    return load_study("validate_ddl")


@needs_data
def test_every_row_maps_to_a_valid_scenario():
    vd = module()
    records, single = vd.load(vd.DATA)
    assert set(single) == {"resnet50", "bert_base", "bert_large"}
    assert {r["method"] for r in records} == set(vd.METHODS)
    for r in records:
        keys = MAPPING.scenario_keys(r, single)
        scenario = {k: v for k, v in keys.items() if v != ""}
        for key in ("ps.pipelined", "fuse_posted"):  # the rows' CSV spelling of a bool
            if scenario.get(key) == "true":
                scenario[key] = True
        spec = load_spec(scenario)  # every mapped row is a valid scenario
        assert spec.fixed["nodes"] * spec.fixed["gpus_per_node"] == r["gpus"]
        if r["method"].endswith("-PS") and r["nodes"] > 1:
            assert spec.fixed["algorithm"] == "ps" and spec.fixed["ps.pipelined"] is True
        else:
            assert spec.fixed["algorithm"] == "nccl"  # NCCL's ring and protocols
    # Task (c) also predicts ByteScheduler as the WFBP of its family
    pick = {(r["method"], r["nodes"]): MAPPING.scenario_keys(r, single, priority=False)
            for r in records if r["dnn"] == "resnet50"}
    for family in ("A2A", "PS"):
        a, b = pick[(f"ByteScheduler-{family}", 4)], pick[(f"WFBP-{family}", 4)]
        assert {k: v for k, v in a.items()} == {k: v for k, v in b.items()}
        # ... and by default ByteScheduler-A2A as the priority strategy with layer-wise updates and
        # the launcher's partition and credit (4 and 16 million float32 parameters), its partitions
        # fused as Horovod fuses what the credit lets out while the channel is busy; ByteScheduler-PS
        # ran BytePS's own optimizer (an update barrier) and keeps WFBP-PS's mapping
        records_4 = [r for r in records if r["dnn"] == "resnet50" and r["nodes"] == 4]
        record = next(r for r in records_4 if r["method"] == f"ByteScheduler-{family}")
        keys = MAPPING.scenario_keys(record, single)
        if family == "A2A":
            assert keys["strategy"] == "priority" and keys["update"] == "layerwise"
            assert (keys["partition_bytes"], keys["credit_bytes"], keys["fuse_posted"]) == (16_000_000, 64_000_000,
                                                                                          "true")
        else:
            assert keys == b
        load_spec({k: (True if v == "true" else v) for k, v in keys.items() if v != ""})


@pytest.mark.parametrize("row, named", [("resnet50,64,,x,WFBP-A3A,8,2,4,1000,", "method = 'WFBP-A3A'"),
                                         ("resnet50,64,,x,WFBP-A2A,8,2,4,fast,", "throughput = 'fast'"),
                                         ("bert_base,64,64,x,WFBP-A2A,8,2,4,500,", "dnn = 'bert_base'")])
def test_bad_data_exits_2_with_one_line(tmp_path, capsys, row, named):
    vd = module()
    path = tmp_path / "bad.csv"
    path.write_text("dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput,throughput_std\n"
                    "resnet50,64,,x,single-gpu,1,1,1,253.1,\n" + row + "\n")
    with pytest.raises(SystemExit) as exit_:
        vd.load(path)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1


def test_rows_of_methods_the_mapping_does_not_know_are_left_out_with_a_note(tmp_path, capsys):
    """A file with more methods than the mapping knows keeps the known ones
    and names the others; one with none left exits 2 (the case above)."""
    vd = module()
    path = tmp_path / "more.csv"
    path.write_text("dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput\n"
                    "resnet50,64,,x,single-gpu,1,1,1,253.1\nresnet50,64,,x,WFBP-A2A,8,2,4,1900\n"
                    "resnet50,64,,x,Horovod-fp16,8,2,4,2100\nresnet50,64,,x,Horovod-fp16,16,4,4,4000\n")
    rows, single = vd.load(path)
    assert [r["method"] for r in rows] == ["WFBP-A2A"] and single == {"resnet50": 253.1}
    err = capsys.readouterr().err
    assert "'Horovod-fp16' (2) left out" in err and len(err.strip().splitlines()) == 1


def test_methods_and_models_spelled_another_way_are_read_as_the_mapping_names_them(tmp_path):
    """Case, spaces, hyphens and underscores aside, a method or model cell is the
    name it spells (where exactly one name does), so no row is left out for it;
    column names are read whatever their case."""
    vd = module()
    path = tmp_path / "spelled.csv"
    path.write_text("DNN,Batch_Size,seq_len, Network ,Method,GPUs,nodes,gpus_per_node,Throughput\n"
                    "ResNet-50,64,,x,Single GPU,1,1,1,253.1\nresnet50,64,,x,wfbp_a2a,8,2,4,1900\n"
                    " RESNET50 ,64,,x,bytescheduler ps,16,4,4,3700\nBERT-Base,64,128,x,single-gpu,1,1,1,100\n"
                    "bert base,64,128,x,MG WFBP,8,2,4,700\n")
    rows, single = vd.load(path)
    assert [(r["dnn"], r["method"]) for r in rows] == [("resnet50", "WFBP-A2A"), ("resnet50", "ByteScheduler-PS"),
                                                        ("bert_base", "MG-WFBP")]
    assert single == {"resnet50": 253.1, "bert_base": 100.0}
    data = load_study("ddl_data")
    assert data.spelled("gpt3 13b", data.DNN_NAMES) == "gpt3 13b"  # gpt3_1.3b spells alike: neither is chosen
    assert data.spelled("gpt3_13b", data.DNN_NAMES) == "gpt3_13b"


def test_ps_bandwidth_is_fitted_only_where_multi_node_ps_rows_train():
    vd = module()
    row = lambda method, nodes: {"method": method, "nodes": nodes}  # noqa: E731
    assert vd.fit_keys([row("WFBP-A2A", 2), row("BSP-PS", 2)]) == [*vd.FIT, *vd.PS_FIT]
    assert "ps.bandwidth" in vd.PS_FIT and "inter.large_bandwidth" in vd.PS_FIT
    assert vd.fit_keys([row("WFBP-A2A", 2), row("BSP-PS", 1)]) == list(vd.FIT)  # one node: a local all-reduce
    assert vd.fit_keys([row("WFBP-A2A", 8)]) == list(vd.FIT)


@needs_data
def test_bytescheduler_a2a_rows_inform_only_their_floor(tmp_path, monkeypatch):
    """The plumbing of `with_task_floor` (the fits stubbed): the links are
    fitted on the training rows without ByteScheduler-A2A; the floor on its
    one-node rows alone, as WFBP maps them, on those links; then every
    ByteScheduler-A2A row carries it, and none of them trains the links.
    The held-out rows stay as they were."""
    from sweep import make_folds, read_rows
    vd = module()
    records, single = vd.load(vd.DATA)
    base = vd.mapped_base(vd.BASE, tmp_path / "base.toml")
    rows, wfbp_rows = ([*read_rows(MAPPING.write_rows(tmp_path / f"{p}.csv", records, single, True, priority=p),
                                   dict(base), labels=("method",))[1]] for p in (True, False))
    fold = make_folds(rows, split="gpus", cut=8)[0]
    calls = []

    class Fitted:
        def __init__(self, fitted):
            self.values = {k: (1.5e-3 if k == "compute.task_floor" else 7.0) for k in fitted}
            self.line_rates = {}

    def fake_fit(fit_rows, fitted, fit_base, options):
        calls.append((fit_rows, list(fitted), fit_base))
        return Fitted(fitted)

    monkeypatch.setattr(vd.optimise, "fit", fake_fit)
    links = vd.link_fit(rows, records, fold, list(vd.FIT), base, vd.QUICK, vd.FLOORED_METHODS)
    out, link_fold, floor = vd.with_task_floor(rows, records, fold, links, base, vd.QUICK,
                                               vd.FLOORED_METHODS, wfbp_rows)
    scheduler = {i for i, r in enumerate(records) if r["method"] == "ByteScheduler-A2A"}
    (link_rows, link_keys, _), (floor_rows, floor_keys, floor_base) = calls
    assert link_keys == list(vd.FIT) and floor_keys == ["compute.task_floor"]
    assert link_rows == [rows[i] for i in fold.train if i not in scheduler]
    one_node = sorted(i for i in scheduler if records[i]["nodes"] == 1)
    assert len(one_node) == 3 and floor_rows == [wfbp_rows[i] for i in one_node]
    assert all(r.point["strategy"] == "wfbp" for r in floor_rows)
    assert floor_base["inter.bandwidth"] == 7.0  # on the fitted links
    assert floor == 1.5e-3 and link_fold.test == fold.test and not set(link_fold.train) & scheduler
    for i, row in enumerate(out):
        assert (row.point.get("compute.task_floor") == 1.5e-3) == (i in scheduler)
        assert row.point["strategy"] == ("priority" if i in scheduler else rows[i].point["strategy"])
    assert vd.with_task_floor(rows, records, fold, links, base, vd.QUICK, (), wfbp_rows) == (rows, fold, None)
    # Without one-node rows to tell the floor, the method's rows get none and still train nothing.
    several = [r if r["nodes"] > 1 else {**r, "method": "WFBP-A2A"} for r in records]
    calls.clear()
    links = vd.link_fit(rows, several, fold, list(vd.FIT), base, vd.QUICK, vd.FLOORED_METHODS)
    out, link_fold, floor = vd.with_task_floor(rows, several, fold, links, base, vd.QUICK,
                                               vd.FLOORED_METHODS, wfbp_rows)
    assert floor is None and out == rows and not calls
    assert not {i for i in link_fold.train if several[i]["method"] == "ByteScheduler-A2A"}


def test_ps_push_pull_at_the_line_rate_only_where_no_ps_row_trains_and_the_links_fill_the_wire():
    """`ps_bandwidth_at_line_rate`: the inter line rate for held-out
    multi-node PS rows when no PS row trains and the fitted inter bandwidth
    is at least PS_FILLS_WIRE of the line rate; otherwise None."""
    from sweep import Fold
    vd = module()
    records = [{"method": "WFBP-A2A", "nodes": 2}, {"method": "BSP-PS", "nodes": 2}, {"method": "BSP-PS", "nodes": 1}]

    class Links:
        def __init__(self, bandwidth):
            self.values, self.line_rates = {"inter.bandwidth": bandwidth}, {"inter.line_rate": 1.25e9}

    fold = Fold("x", (0,), (1,))
    rule = lambda bandwidth, fitted=list(vd.FIT), f=fold: vd.ps_bandwidth_at_line_rate(  # noqa: E731
        records, f, fitted, lambda: Links(bandwidth))
    assert rule(1.16e9) == 1.25e9  # 93 % of the wire: the wire limits
    assert rule(vd.PS_FILLS_WIRE * 1.25e9) == 1.25e9
    assert rule(0.79 * 1.25e9) is None  # the stack limits: the collective's bandwidth
    assert rule(1.16e9, fitted=[*vd.FIT, *vd.PS_FIT]) is None  # PS rows train: fitted instead
    assert rule(1.16e9, f=Fold("x", (0,), (2,))) is None  # a one-node PS row: a local all-reduce
    asked = []
    assert vd.ps_bandwidth_at_line_rate(records, Fold("x", (0,), (2,)), list(vd.FIT), lambda: asked.append(1)) is None
    assert not asked  # no fit where nothing needs it


def test_any_base_gets_the_tree_latency_growth_unless_it_sets_its_own(tmp_path):
    vd = module()
    other = vd.mapped_base('gpu = "rtx2080ti"\nintra = "pcie3"\ninter = "100gbe"\n', tmp_path / "a.toml")
    assert other["inter.alpha_exponent"] == MAPPING.TREE_ALPHA_EXPONENT and other["inter.name"] == "100gbe"
    own = vd.mapped_base('[inter]\nname = "10gbe"\nalpha_exponent = 0.0\n', tmp_path / "b.toml")
    assert own["inter.alpha_exponent"] == 0.0
    assert vd.mapped_base(vd.BASE, tmp_path / "c.toml")["inter.alpha_exponent"] == MAPPING.TREE_ALPHA_EXPONENT


def test_the_intra_link_starts_at_nccls_ll_hop_unless_the_base_sets_its_latency(tmp_path):
    """NCCL's tuning figures (kernels.nccl): 1.0 us per LL hop on PCIe, 0.47 us
    on NVLink; a base's own latency wins; no intra link named: the default
    link's (pcie3)."""
    vd = module()
    assert vd.mapped_base(vd.BASE, tmp_path / "a.toml")["intra.alpha"] == pytest.approx(1.0e-6, rel=1e-12)
    nvlink = vd.mapped_base('intra = "nvlink2"\n', tmp_path / "b.toml")
    assert nvlink["intra.alpha"] == pytest.approx(0.47e-6, rel=1e-12)
    own = vd.mapped_base('[intra]\nname = "pcie3"\nalpha = 3e-6\n', tmp_path / "c.toml")
    assert own["intra.alpha"] == 3e-6
    assert vd.mapped_base('gpu = "v100"\n', tmp_path / "d.toml")["intra.alpha"] == pytest.approx(1.0e-6, rel=1e-12)


def test_a_network_used_through_tcp_takes_the_fabrics_tcp_link(tmp_path, capsys):
    """Where the data's network says TCP, the base's fabric becomes its
    `-tcp` entry (the socket stack's 30 us as the latency's start and prior
    centre); not where the base sets the latency itself, names a link that
    is TCP already (10gbe) or the network is RDMA."""
    vd = module()
    assert LABELS.says_tcp("100gbe-tcp") and LABELS.says_tcp("100Gb IPoIB") and LABELS.says_tcp("10gbe-tcp")
    assert not LABELS.says_tcp("100gb-rdma") and not LABELS.says_tcp("tcpx")
    fabric = 'gpu = "rtx2080ti"\nintra = "pcie3"\ninter = "ib-edr"\n'
    tcp = vd.mapped_base(fabric, tmp_path / "a.toml", "100gb-ib-tcp")
    assert tcp["inter.name"] == "ib-edr-tcp" and "inter.alpha" not in tcp
    assert "ib-edr-tcp" in capsys.readouterr().err
    assert vd.mapped_base(fabric, tmp_path / "b.toml", "100gb-ib-rdma")["inter.name"] == "ib-edr"
    own = vd.mapped_base('[inter]\nname = "ib-edr"\nalpha = 5e-6\n', tmp_path / "c.toml", "ib-tcp")
    assert own["inter.name"] == "ib-edr" and own["inter.alpha"] == 5e-6
    assert vd.mapped_base(vd.BASE, tmp_path / "d.toml", "10gbe-tcp")["inter.name"] == "10gbe"
    assert vd.mapped_base("", tmp_path / "e.toml", "10gbe-tcp").get("inter.name", "10gbe") == "10gbe"


def test_the_inter_link_is_the_one_the_network_names_unless_the_base_names_one(tmp_path, capsys):
    """Without an inter link in the base, the data's `network` label picks
    the catalog link (then its `-tcp` entry where the label says TCP); a
    label that names none leaves the default (10gbe) as the start, without
    its line rate as a bound, and says so."""
    vd = module()
    names = {"10gbe-tcp": "10gbe", "100gbe-tcp": "100gbe", "100GbE RoCE": "100gbe", "IB EDR": "ib-edr",
             "100Gb InfiniBand": "ib-edr", "100gbib": "ib-edr", "100Gb IPoIB": "ib-edr", "200Gb HDR IB": "ib-hdr",
             "ib-ndr-tcp": "ib-ndr", "25GbE": "25gbe", "ib100": "ib-edr", "IB-100-tcp": "ib-edr",
             "2x100Gbps IB": "ib-edr", "10Gb Ethernet": "10gbe", "efa": None, "nvlink3": None, "": None}
    assert {label: LABELS.link_of_network(label) for label in names} == names
    assert vd.mapped_base(vd.BASE, tmp_path / "a.toml", "10gbe-tcp")["inter.name"] == "10gbe"
    assert vd.mapped_base(vd.BASE, tmp_path / "b.toml", "100gb-rdma")["inter.name"] == "100gbe"
    assert vd.mapped_base(vd.BASE, tmp_path / "c.toml", "100Gb IPoIB")["inter.name"] == "ib-edr-tcp"
    assert vd.mapped_base('inter = "ib-edr"\n', tmp_path / "d.toml", "100gbe")["inter.name"] == "ib-edr"
    capsys.readouterr()
    unknown = vd.mapped_base(vd.BASE, tmp_path / "e.toml", "efa")
    assert "inter.name" not in unknown and "names no catalog link" in capsys.readouterr().err
    # ... and with no line rate to bound it: a fast fabric under 10GbE's rate could not be fitted
    assert unknown["inter.line_rate"] >= 1e12
    assert vd.mapped_base(vd.BASE + "line_rate = 5e9\n", tmp_path / "f.toml", "efa")["inter.line_rate"] == 5e9


def test_a_file_of_several_networks_runs_once_per_network(tmp_path, capsys, monkeypatch):
    """Each network's rows run alone (the base's links are every row's),
    into a folder named after it; the single-GPU rows serve them all; a
    network whose rows hold no task is skipped with a note."""
    vd = module()
    path = tmp_path / "two.csv"
    path.write_text("dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput,throughput_std\n"
                    "resnet50,64,,x,single-gpu,1,1,1,253.1,\n"
                    "resnet50,64,,100gb-rdma,WFBP-A2A,8,2,4,1900,\n"
                    "resnet50,64,,100gb-rdma,BSP-A2A,8,2,4,1850,\n"
                    "resnet50,64,,100Gb IPoIB,WFBP-A2A,8,2,4,1800,\n"
                    "resnet50,64,,100Gb IPoIB,BSP-A2A,16,4,4,3300,\n"
                    "resnet50,64,,25gbe,WFBP-A2A,4,1,4,1000,\n")
    runs = {}

    def run_study(records, single, out, options, base_text, data_name, missing, scatter=False):
        runs[out.name] = ({r["network"] for r in records}, dict(single), set(missing))
        return ""
    monkeypatch.setattr(vd, "run_study", run_study)
    assert vd.main(["--data", str(path), "--quick", "--out", str(tmp_path / "out")]) == 0
    assert runs == {"100gb-rdma": ({"100gb-rdma"}, {"resnet50": 253.1}, {"scale_out", "bytescheduler"}),
                    "100gb-ipoib": ({"100Gb IPoIB"}, {"resnet50": 253.1}, {"bytescheduler"})}
    assert "network '25gbe' skipped" in capsys.readouterr().err


def test_single_gpu_rows_from_another_file(tmp_path, capsys):
    """A file without single-gpu rows takes them from `--single` (another
    file of the same GPUs), its own rows win, a row at another batch size
    exits 2 in one line, and without either the error names `--single`."""
    vd = module()
    head = "dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput,throughput_std\n"
    fast = tmp_path / "fast.csv"
    fast.write_text(head + "resnet50,64,,100gbib,WFBP-A2A,8,2,4,1990,\n"
                           "bert_base,64,64,100gbib,single-gpu,1,1,1,200.0,\n"
                           "bert_base,64,64,100gbib,WFBP-A2A,8,2,4,1500,\n")
    other = tmp_path / "other.csv"
    other.write_text(head + "resnet50,64,,10gbe-tcp,single-gpu,1,1,1,253.1,\n"
                            "bert_base,64,64,10gbe-tcp,single-gpu,1,1,1,212.8,\n"
                            "bert_large,8,64,10gbe-tcp,single-gpu,1,1,1,30.0,\n")
    rows, single = vd.load(fast, other)
    assert len(rows) == 2 and single == {"resnet50": 253.1, "bert_base": 200.0}
    with open(fast, "a") as handle:  # one-GPU rows of a method come before another file's
        handle.write("resnet50,64,,100gbib,WFBP-A2A,1,1,1,250.0,\nresnet50,64,,100gbib,BSP-A2A,1,1,1,252.0,\n")
    rows, single = vd.load(fast, other)
    assert len(rows) == 2 and single == {"resnet50": 251.0, "bert_base": 200.0}
    assert "median of its 2 one-GPU row(s)" in capsys.readouterr().err
    fast.write_text("\n".join(fast.read_text().splitlines()[:4]) + "\n")
    with pytest.raises(SystemExit) as exit_:
        vd.load(fast)
    assert exit_.value.code == 2 and "--single" in capsys.readouterr().err
    other.write_text(head + "resnet50,32,,10gbe-tcp,single-gpu,1,1,1,250.0,\n")
    with pytest.raises(SystemExit) as exit_:
        vd.load(fast, other)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "batch_size = '32'" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as exit_:
        vd.main(["--data", str(fast), "--single", str(tmp_path / "none.csv"), "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and "single = " in capsys.readouterr().err


@needs_data
def test_single_gpu_rows_default_to_the_10gbe_file_for_its_gpus(tmp_path, capsys):
    """Without --single, a model the data has no one-GPU row of takes the
    10GbE file's single-gpu row, with a note, where the base's GPUs are that
    cluster's (the default base's, or a --base naming them); under other
    GPUs, or on the 10GbE file itself, no file is assumed; --single wins.
    A base that cannot be read exits 2 in one line."""
    import argparse
    vd = module()
    fast = tmp_path / "fast.csv"
    fast.write_text("dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput\n"
                    "resnet50,64,,100gbib,WFBP-A2A,8,2,4,1990\n")
    args = argparse.Namespace(data=fast, single=None)
    assert vd.base_gpu(None) == vd.GPU == "rtx2080ti"
    base = tmp_path / "base.toml"
    base.write_text('gpu = "v100"\n[inter]\nname = "ib-edr"\n')
    assert vd.base_gpu(base) == "v100" and vd.single_source(args, "v100") is None
    base.write_text('gpu = "rtx2080ti"\n[inter]\nname = "ib-edr"\n')
    assert vd.single_source(args, vd.base_gpu(base)) == vd.single_source(args, vd.GPU) == vd.DATA
    assert vd.single_source(argparse.Namespace(data=vd.DATA, single=None), vd.GPU) is None
    assert vd.single_source(argparse.Namespace(data=fast, single=fast), "v100") == fast
    _, single = vd.load(fast, vd.single_source(args, vd.GPU))
    assert single == {"resnet50": vd.load(vd.DATA)[1]["resnet50"]}
    assert f"{vd.DATA.name}'s single-gpu row" in capsys.readouterr().err
    base.write_text('gpu = "rtx2080ti"\n[inter\n')
    with pytest.raises(SystemExit) as exit_:
        vd.main(["--data", str(fast), "--base", str(base), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and str(base) in err
    assert not any((tmp_path / "o").iterdir())  # no output written


def test_tasks_the_data_cannot_hold_are_skipped(tmp_path, capsys):
    """A file with fewer methods or GPU counts runs the tasks it can hold;
    one that holds none exits 2 in one line naming what each lacks."""
    vd = module()

    def rows(*specs):
        return [{"method": m, "gpus": g} for m, g in specs]

    full = rows(("WFBP-A2A", 8), ("WFBP-A2A", 16), ("BSP-PS", 16), ("ByteScheduler-A2A", 8))
    assert vd.missing_rows(full) == {}
    assert set(vd.missing_rows(rows(("WFBP-A2A", 8), ("WFBP-A2A", 16), ("BSP-PS", 16)))) == {"bytescheduler"}
    assert set(vd.missing_rows(rows(("BSP-A2A", 4), ("BSP-A2A", 16), ("ByteScheduler-PS", 8)))) == {"cross_method"}
    assert set(vd.missing_rows(rows(("WFBP-A2A", 4), ("BSP-A2A", 8)))) == {"scale_out", "bytescheduler"}
    path = tmp_path / "small.csv"
    path.write_text("dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput,throughput_std\n"
                    "resnet50,64,,10gbe-tcp,single-gpu,1,1,1,253.1,\n"
                    "resnet50,64,,10gbe-tcp,WFBP-A2A,4,1,4,1000,\n")
    with pytest.raises(SystemExit) as exit_:
        vd.main(["--data", str(path), "--quick", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert "holds the rows of no task" in err and "WFBP-A2A rows and another method's" in err
    assert not any((tmp_path / "out").glob("*"))


def test_a_file_without_a_needed_column_or_with_a_bad_batch_exits_2(tmp_path, capsys):
    """seq_len may be absent (ResNet-only files); a missing needed column or a
    batch size that is not a whole number exits 2 in one line."""
    vd = module()
    path = tmp_path / "d.csv"
    path.write_text("dnn,batch_size,network,method,gpus,nodes,gpus_per_node,throughput\n"
                    "resnet50,64,10gbe,single-gpu,1,1,1,250\nresnet50,64.0,10gbe,WFBP-A2A,8,2,4,1900\n")
    rows, single = vd.load(path)
    assert rows[0]["seq_len"] == "" and single == {"resnet50": 250.0}
    assert MAPPING.scenario_keys(rows[0], single)["batch_size"] == 64
    head = "dnn,batch_size,network,method,gpus,nodes,gpus_per_node,throughput\n"
    for text, key in (("dnn,network,method,gpus\nresnet50,10gbe,single-gpu,1\n", "columns"),
                      (head + "resnet50,6a4,10gbe,single-gpu,1,1,1,250\n", "batch_size"),
                      (head + "resnet50,64,10gbe,WFBP-A2A,8,2,2,1900\n", "gpus"),
                      (head + "resnet50,64,10gbe,WFBP-A2A,8,2,4,nan\n", "throughput"),
                      (head + "resnet50,64,10gbe,WFBP-A2A,8,2,4,-3\n", "throughput")):
        path.write_text(text)
        with pytest.raises(SystemExit) as exit_:
            vd.load(path)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and err.startswith(f"validate_ddl: error: {key} = ") and len(err.splitlines()) == 1


@pytest.mark.parametrize("base, dnn, key", [
    (None, "resnet5O", "model"), ('gpu = "nosuchgpu"\n', "resnet50", "gpu"), ("gpu = [\n", "resnet50", "scenario"),
    ("missing", "resnet50", "base")])
def test_a_bad_base_or_model_exits_2_before_any_output(tmp_path, capsys, base, dnn, key):
    vd = module()
    data = tmp_path / "d.csv"
    data.write_text("dnn,batch_size,seq_len,network,method,gpus,nodes,gpus_per_node,throughput\n"
                    f"{dnn},64,,10gbe-tcp,single-gpu,1,1,1,253.1\n{dnn},64,,10gbe-tcp,WFBP-A2A,8,2,4,1900\n"
                    f"{dnn},64,,10gbe-tcp,BSP-A2A,16,4,4,3000\n")
    argv = ["--data", str(data), "--quick", "--out", str(tmp_path / "out")]
    if base is not None:
        argv += ["--base", str(tmp_path / "base.toml")]
        if base != "missing":
            (tmp_path / "base.toml").write_text(base)
    with pytest.raises(SystemExit) as exit_:
        vd.main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.startswith(f"validate_ddl: error: {key} = ") and len(err.splitlines()) == 1
    assert not any((tmp_path / "out").glob("*"))


def test_bert_rows_map_onto_bertforpretraining():
    """The benchmark code trains Hugging Face's BertForPreTraining: BERT rows
    name the zoo's `bert_*_pretraining`, ResNet-50 stays itself."""
    single = {"bert_base": 212.8, "resnet50": 253.1}
    row = {"method": "WFBP-A2A", "batch_size": "64", "seq_len": "64", "nodes": 2, "gpus_per_node": 4,
           "gpus": 8, "network": "10gbe-tcp"}
    assert MAPPING.scenario_keys({**row, "dnn": "bert_base"}, single)["model"] == "bert_base_pretraining"
    assert MAPPING.scenario_keys({**row, "dnn": "resnet50", "seq_len": ""}, single)["model"] == "resnet50"


def test_mgwfbp_rows_plan_with_the_codes_own_table():
    """MG-WFBP's planner: the 10GbE table on 10GbE (0.52 ms at 8 processes,
    the published constant), the InfiniBand one on any other network, the
    nearest count in log where the table has none; other methods unplanned."""
    record = {"dnn": "resnet50", "batch_size": "64", "seq_len": "", "network": "10gbe-tcp", "method": "MG-WFBP",
              "gpus": 8, "nodes": 2, "gpus_per_node": 4}
    keys = MAPPING.scenario_keys(record, {"resnet50": 253.1})
    assert keys["mgwfbp.alpha"] == pytest.approx(5.230272768511732e-04)
    assert keys["mgwfbp.bandwidth"] == pytest.approx(1 / 8.570746975492128e-10)
    assert keys["mgwfbp.min_params"] == 8192
    load_spec({k: v for k, v in keys.items() if v != ""})
    assert MAPPING.mgwfbp_planner("100Gb-IB-RDMA", 8) == MAPPING.MGWFBP_PLANNER["ib"][8]
    assert MAPPING.mgwfbp_planner("100GbE", 8) == MAPPING.MGWFBP_PLANNER["ib"][8]  # not 10GbE
    assert MAPPING.mgwfbp_planner("10GbE", 12) == MAPPING.MGWFBP_PLANNER["10gbe"][16]  # 12/8 > 16/12
    assert MAPPING.mgwfbp_planner("10Gb Ethernet", 8) == MAPPING.MGWFBP_PLANNER["10gbe"][8]
    wfbp = MAPPING.scenario_keys({**record, "method": "WFBP-A2A"}, {"resnet50": 253.1})
    assert wfbp["mgwfbp.alpha"] == wfbp["mgwfbp.bandwidth"] == wfbp["mgwfbp.min_params"] == ""


def test_bsp_ps_rows_carry_the_busiest_servers_share_of_the_fused_tensor():
    """BSP-PS pushes one fused tensor in 4,096,000-byte partitions dealt to
    the servers in turn: ResNet-50's 25,557,032 float32 gradients are 24
    whole partitions and one of 3,924,128 bytes, so of 8 servers the first
    holds three whole ones and the short one, of 2 the first twelve and the
    short one (by hand); one server, or partitions that divide the tensor
    evenly among the servers, are balanced. Only multi-node BSP-PS rows
    carry it (per-tensor pushes: tried and dropped, README)."""
    servers = load_study("byteps_servers")
    total = 4 * 25_557_032
    assert total == 24 * 4_096_000 + 3_924_128
    assert servers.fused_imbalance("resnet50", 8) == pytest.approx((3 * 4_096_000 + 3_924_128) * 8 / total)
    assert servers.fused_imbalance("resnet50", 2) == pytest.approx((12 * 4_096_000 + 3_924_128) * 2 / total)
    assert servers.fused_imbalance("resnet50", 1) == 1.0
    assert total % 8 == 0 and servers.fused_imbalance("resnet50", 8, partition_bytes=total // 8) == 1.0
    row = {"dnn": "resnet50", "batch_size": "64", "seq_len": "", "network": "10gbe-tcp", "gpus_per_node": 4}
    single = {"resnet50": 253.1}
    for method in MAPPING.METHODS:
        for nodes in (1, 2, 8):
            keys = MAPPING.scenario_keys({**row, "method": method, "nodes": nodes, "gpus": 4 * nodes}, single)
            if method == "BSP-PS" and nodes > 1:
                assert keys["ps.imbalance"] == servers.fused_imbalance("resnet50", nodes)
                spec = load_spec({**{k: v for k, v in keys.items() if v != ""}, "ps.pipelined": True})
                assert spec.fixed["ps.imbalance"] == keys["ps.imbalance"]
            else:
                assert keys["ps.imbalance"] == "", (method, nodes)


@needs_data
def test_naive_baselines():
    vd = module()
    records, _ = vd.load(vd.DATA)
    with open(vd.DATA, newline="") as handle:
        raw = list(csv.DictReader(handle))
    at = {(r["dnn"], r["method"], int(r["gpus"])): float(r["throughput"]) for r in raw}
    test = [r for r in records if r["gpus"] >= 16]
    naive = np.array([at[(r["dnn"], r["method"], 8)] * r["gpus"] / 8 for r in test])
    assert len(test) == 42
    # e.g. resnet50 WFBP-A2A at 32 GPUs: 1795.74 * 4
    i = next(i for i, r in enumerate(test) if (r["dnn"], r["method"], r["gpus"]) == ("resnet50", "WFBP-A2A", 32))
    assert naive[i] == pytest.approx(1795.74 * 4)


@needs_data
@pytest.mark.slow
def test_quick_run_writes_table_and_predictions(tmp_path):
    vd = module()
    assert vd.main(["--quick", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "(a) scale-out" in table and "(b) cross-method" in table
    with open(tmp_path / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sum(r["task"] == "scale_out" for r in rows) == 42
    assert sum(r["task"] == "cross_method" for r in rows) == 54
    measured = {(r["dnn"], r["method"], int(r["gpus"])): float(r["throughput"]) for r in csv.DictReader(open(DATA))}
    for r in rows:
        want = measured[(r["model"], r["method"], int(r["gpus"]))]
        assert float(r["model_error"]) == pytest.approx(abs(float(r["predicted"]) / want - 1), abs=2e-4)
    assert sum(r["task"] == "bytescheduler_priority" for r in rows) == 18
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit_bytescheduler_priority.toml", "fit_bytescheduler_wfbp.toml",
                                                         "fit_cross_method.toml", "fit_scale_out.toml",
                                                         "predictions.csv", "table.md"]
    # scale-out trains on multi-node PS rows (2 nodes), cross-method on WFBP-A2A alone
    for task, fitted in (("scale_out", (*vd.FIT, *vd.PS_FIT)), ("cross_method", vd.FIT)):
        doc = tomllib.loads((tmp_path / f"fit_{task}.toml").read_text())
        assert doc["gpu"]["name"] == "rtx2080ti" and set(doc["fit"]["fitted"]) == set(fitted)
        assert doc["inter"]["bandwidth"] > 0 and ("large_bandwidth" in doc["inter"]) == (task == "scale_out")
    # where no PS row trains, push/pull at the line rate exactly when the fitted links fill the wire
    doc = tomllib.loads((tmp_path / "fit_cross_method.toml").read_text())
    fills = doc["inter"]["bandwidth"] >= vd.PS_FILLS_WIRE * doc["inter"]["line_rate"]
    assert doc.get("ps", {}).get("bandwidth") == (doc["inter"]["line_rate"] if fills else None)


def test_data_and_base_arguments(tmp_path):
    """--data and --base: the same study on any file in the 10GbE file's format."""
    vd = module()
    base = tmp_path / "base.toml"
    base.write_text('gpu = "v100"\n')
    args = vd.arguments(["--data", str(tmp_path / "other.csv"), "--base", str(base), "--out", str(tmp_path / "o")])
    assert args.data == tmp_path / "other.csv" and args.base == base and (tmp_path / "o").is_dir()
    assert vd.arguments(["--out", str(tmp_path)]).data == vd.DATA


def resnet50_rows(path: Path) -> Path:
    """The 10GbE file's ResNet-50 rows, written to `path`."""
    with open(DATA, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["dnn"] == "resnet50"]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@needs_data
@pytest.mark.slow
def test_quick_run_on_a_copy_with_another_base(tmp_path):
    """A subset of the file, written elsewhere, with a base naming other links:
    the fit files carry the base, the table the in-sample and interval columns."""
    vd = module()
    copy = resnet50_rows(tmp_path / "subset.csv")
    base = tmp_path / "base.toml"
    assert "name" not in vd.BASE  # the data's network names the inter link; this base names its own
    base.write_text(vd.BASE.replace("[inter]\n", '[inter]\nname = "25gbe"\n'))
    out = tmp_path / "out"
    assert vd.main(["--quick", "--data", str(copy), "--base", str(base), "--out", str(out)]) == 0
    doc = tomllib.loads((out / "fit_scale_out.toml").read_text())
    assert doc["inter"]["name"] == "25gbe" and doc["inter"]["line_rate"] == 3.125e9
    # 10GbE's rows fill well under 80 % of 25GbE's wire: push/pull keeps the collective's bandwidth
    cross = tomllib.loads((out / "fit_cross_method.toml").read_text())
    assert cross["inter"]["bandwidth"] < vd.PS_FILLS_WIRE * 3.125e9 and "bandwidth" not in cross.get("ps", {})
    assert "in-sample median" in (out / "table.md").read_text()


def test_prior_and_tail_from_the_command_line(tmp_path, capsys):
    """`--prior` and `--tail` replace those two fields of the study's options
    and nothing else; a negative or non-finite value exits 2 with one line,
    before the output folder exists."""
    import dataclasses

    from sweep import study_fit_options
    vd = module()
    given = study_fit_options(vd.arguments(["--prior", "1", "--tail", "0.5", "--out", str(tmp_path / "a")]), vd.FULL)
    assert given == dataclasses.replace(vd.FULL, prior=1.0, tail=0.5)
    assert study_fit_options(vd.arguments(["--quick", "--out", str(tmp_path / "b")]), vd.QUICK) == vd.QUICK
    for flag, value in (("--prior", "-1"), ("--tail", "nan")):
        with pytest.raises(SystemExit) as exit_:
            vd.arguments([flag, value, "--out", str(tmp_path / "never")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert f"{flag[2:]} = " in err and len(err.splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_held_out_scatter_folds_follow_each_task(monkeypatch):
    """`--held-out-scatter`: (a)'s training rows predict their largest GPU
    count from the rest, (b)/(c)'s leave each training method out (its rows
    at >= 8 GPUs), one method gives no fold; the quantile is the conformal
    one of every fold's |log error| (the k-th smallest, k = ceil(0.9 (n + 1)))."""
    vd = module()
    records = [{"method": m, "gpus": g} for m in ("WFBP-A2A", "BSP-PS", "MG-WFBP") for g in (4, 8)]
    seen = []

    def run_task(name, rows, single, out, options, base_text, data_name, folds):
        (fold,) = folds
        seen.append((fold.name, fold.train, fold.test))
        measured = np.ones(len(fold.test))
        return {"predicted": measured * np.exp(0.01 * (len(seen) + np.arange(len(fold.test)))), "measured": measured}

    monkeypatch.setattr(vd, "run_task", run_task)
    held = vd.scale_out_scatter(records, {}, vd.QUICK, vd.BASE, "x")
    assert seen == [("fit <= 4 GPUs, predict 8", (0, 2, 4), (1, 3, 5))]
    assert (held.split, held.folds, held.observations) == ("gpus", 1, 3)
    assert held.value == pytest.approx(0.03)  # errors 0.01, 0.02, 0.03: k = ceil(3.6) = 4 > 3, the largest
    seen.clear()
    held = vd.method_scatter(records, {}, vd.QUICK, vd.BASE, "x")
    assert seen == [("leave out WFBP-A2A", (2, 3, 4, 5), (1,)), ("leave out BSP-PS", (0, 1, 4, 5), (3,)),
                    ("leave out MG-WFBP", (0, 1, 2, 3), (5,))]
    assert (held.split, held.folds, held.observations, held.value) == ("method", 3, 3, pytest.approx(0.03))
    seen.clear()
    assert vd.method_scatter(records[:2], {}, vd.QUICK, vd.BASE, "x") is None and not seen


@needs_data
@pytest.mark.slow
def test_held_out_scatter_through_the_study(tmp_path):
    """`--held-out-scatter` end to end on ResNet-50's rows: (a) refits on 4
    GPUs and predicts its 8-GPU rows, (c) leaves each of its five training
    methods out; the predictions are those without it, the bands at least
    as wide, and each fit says where its scatter came from."""
    vd = module()
    copy = resnet50_rows(tmp_path / "resnet50.csv")
    runs = {}
    for flag in ((), ("--held-out-scatter",)):
        out = tmp_path / ("scatter" if flag else "plain")
        assert vd.main(["--quick", "--data", str(copy), "--out", str(out), *flag]) == 0
        with open(out / "predictions.csv", newline="") as handle:
            runs[bool(flag)] = (out, list(csv.DictReader(handle)))
    (_, plain), (out, scatter) = runs[False], runs[True]
    assert [r["predicted"] for r in plain] == [r["predicted"] for r in scatter]
    for a, b in zip(plain, scatter):
        assert float(b["high"]) / float(b["predicted"]) >= float(a["high"]) / float(a["predicted"]) * (1 - 1e-6)
    fit = tomllib.loads((out / "fit_scale_out.toml").read_text())["fit"]
    assert fit["interval_split"]["split"] == "gpus" and fit["interval_split"]["folds"] == 1
    assert fit["interval_split"]["observations"] == 7  # the seven methods' 8-GPU rows
    assert fit["residual_quantile_90"] == max(fit["residual_quantile_90_in_sample"], fit["interval_split"]["quantile_90"])
    fit = tomllib.loads((out / "fit_bytescheduler_wfbp.toml").read_text())["fit"]
    assert fit["interval_split"]["split"] == "method" and fit["interval_split"]["folds"] == 5
    assert "interval_split" not in tomllib.loads((out / "fit_cross_method.toml").read_text())["fit"]
