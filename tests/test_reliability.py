"""Nothing lost, nothing silently wrong: interrupts, one writer per output,
resume keyed on content, inputs never outputs, write failures, bounds,
estimates, the coordinator timeout, and the smaller cases of the same kind."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import sweep
from sweep.engine import interrupt
from sweep.engine.store import NetcdfStore, OutputLock

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "sweep"]


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def open_cube(path):
    with sweep.open_cube(path) as ds:
        return ds.load()


def assert_same_cube(written, expected):
    """A cube the CLI wrote (one CPU device per core) and one made in this
    process (one device): identical but for the device count they record."""
    written, expected = written.copy(), expected.copy()
    for cube in (written, expected):
        cube.attrs.pop("devices")
    xr.testing.assert_identical(written, expected)


def wait_for(predicate, proc=None, limit=180.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended early: {proc.returncode} {proc.stderr.read()}")
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def chunks_done(journal: Path) -> int:
    try:
        return len(json.loads(journal.read_text())["completed"])
    except (OSError, ValueError, KeyError):
        return 0


# --------------------------------------------------------------------- interrupts

SAMPLED = """
model = "{model}"
nodes = [4, 16]
gpus_per_node = 4
outputs = ["iteration_time", "scaling_efficiency", "bottleneck"]
[sample]
n = {n}
seed = 1
inter.bandwidth = {{ min = 1e9, max = 1e11, scale = "log" }}
inter.alpha = {{ min = 1e-6, max = 1e-4 }}
batch_size = {{ min = 8, max = 256 }}
strategy = ["wfbp", "fusion", "mgwfbp"]
"""


def stop_limit() -> float:
    """2 s on a quiet machine; more in proportion when other work crowds the cores."""
    return 2.0 * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def interrupt_and_resume(tmp_path, model, n, chunk, trials, rng, wait_range, fresh_in_process=True):
    """Signal a running sweep `trials` times at random moments (alternating
    SIGINT and SIGTERM); each must stop within 2 s with exit 130 / 143 and the
    message, keep its journal, and the finished cube must equal a fresh one."""
    spec = tmp_path / "sampled.toml"
    spec.write_text(SAMPLED.format(model=model, n=n))
    out = tmp_path / "sampled.nc"
    journal = tmp_path / "sampled.nc.partial.json"
    cmd = CLI + ["run", str(spec), "-o", str(out), "--chunk", str(chunk), "--quiet"]
    stopped = []
    for trial in range(trials):
        sig = (signal.SIGINT, signal.SIGTERM)[trial % 2]
        before = chunks_done(journal)
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        # A random moment once the sweep is writing (after its start-up).
        wait_for(lambda: chunks_done(journal) > before, proc)
        time.sleep(rng.uniform(*wait_range))
        if proc.poll() is not None:
            break  # finished before the signal: nothing left to interrupt
        sent = time.time()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        took = time.time() - sent
        if out.exists() and proc.returncode in (0, -sig):
            break  # the signal landed after the cube was written (shutdown): nothing was interrupted
        assert proc.returncode == 128 + sig, err
        assert one_line(err) == "ssgd-sweep: interrupted; run the same command again to resume"
        assert took < stop_limit(), took
        assert not out.exists()
        assert chunks_done(journal) >= before
        stopped.append(took)
    resumed = subprocess.run(cmd, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    if fresh_in_process:
        assert_same_cube(open_cube(out), sweep.run(str(spec), chunk=chunk))
    else:
        fresh = tmp_path / "fresh.nc"
        assert subprocess.run(cmd[:6] + [str(fresh)] + cmd[7:], capture_output=True).returncode == 0
        xr.testing.assert_identical(open_cube(out), open_cube(fresh))
    return stopped


def test_sigint_and_sigterm_stop_cleanly_and_resume_identically(tmp_path):
    stopped = interrupt_and_resume(tmp_path, "alexnet", 400_000, 2048, 2, np.random.default_rng(0), (0.0, 0.4))
    assert len(stopped) == 2


@pytest.mark.slow
def test_sigint_and_sigterm_at_random_times_on_40m_configurations(tmp_path):
    # Enough work for 12 stops at up to 1 s apart: with 20M configurations and
    # up to 2 s, the faster sweep finished after 6.
    stopped = interrupt_and_resume(tmp_path, "resnet50", 20_000_000, 131_072, 12,
                                   np.random.default_rng(13), (0.0, 1.0), fresh_in_process=False)
    print(f"stopped {len(stopped)} times, in {min(stopped):.2f} to {max(stopped):.2f} s")
    assert len(stopped) >= 10


def test_interrupt_flag_stops_between_chunks_with_chunks_journaled(tmp_path, monkeypatch):
    """In-process: a signal only sets a flag; the chunk in hand is written and
    journaled, then the sweep stops, the partial intact and resumable."""
    spec = {"model": "alexnet", "batch_size": [8, 16, 32, 64], "nodes": [1, 2, 4, 8],
            "inter": {"bandwidth": [1e9, 1e10, 1e11]}}
    out = tmp_path / "cube.nc"
    real_write = NetcdfStore.write

    def write_then_signal(self, chunk, block, sampled):
        if chunk.id == 2:
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-write: must not interrupt it
        real_write(self, chunk, block, sampled)

    monkeypatch.setattr(NetcdfStore, "write", write_then_signal)
    with interrupt.deferred_signals(), pytest.raises(interrupt.Interrupted) as stop:
        sweep.run(spec, out, chunk=4)
    assert stop.value.status == 130
    assert not out.exists() and not (tmp_path / "cube.nc.lock").exists()
    assert json.loads((tmp_path / "cube.nc.partial.json").read_text())["completed"] == [0, 1, 2]
    monkeypatch.undo()
    sweep.run(spec, out, chunk=4).close()
    xr.testing.assert_identical(open_cube(out), sweep.run(spec))


# --------------------------------------------------------------------- one writer

def test_a_second_run_on_the_same_output_is_refused_naming_the_first(tmp_path, cli, write_spec):
    spec = write_spec(SAMPLED.format(model="alexnet", n=60_000))
    out = tmp_path / "busy.nc"
    first = subprocess.Popen(CLI + ["run", str(spec), "-o", str(out), "--chunk", "1024", "--quiet"],
                             stderr=subprocess.PIPE, text=True)
    wait_for(lambda: chunks_done(tmp_path / "busy.nc.partial.json") >= 1, first)
    status, _, err = cli("run", spec, "-o", out)
    assert first.poll() is None, "the first run ended too soon for the check"
    assert status == 2
    line = one_line(err)
    assert "in use by another run" in line and f"pid {first.pid}" in line and str(out) in line
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    assert_same_cube(open_cube(out), sweep.run(str(spec)))  # the first run's cube is valid
    assert not (tmp_path / "busy.nc.lock").exists()


@pytest.mark.slow
def test_two_runs_started_together_leave_one_valid_cube(tmp_path, write_spec):
    spec = write_spec(SAMPLED.format(model="alexnet", n=20_000))
    out = tmp_path / "both.nc"
    cmd = CLI + ["run", str(spec), "-o", str(out), "--chunk", "1024", "--quiet"]
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = sorted((p.wait(timeout=300), p.stderr.read()) for p in procs)
    if results[1][0] == 2:  # they overlapped: one refused, naming the other
        assert results[0][0] == 0 and "in use by another run" in one_line(results[1][1])
    else:  # one finished before the other looked: it found the cube complete
        assert [r[0] for r in results] == [0, 0]
        assert any("already complete" in r[1] for r in results)
    assert_same_cube(open_cube(out), sweep.run(str(spec)))


def test_a_held_lock_refuses_before_touching_anything(tmp_path, cli, write_spec):
    out = tmp_path / "o.nc"
    lock = OutputLock(out)
    try:
        status, _, err = cli("run", write_spec('model = "alexnet"\nbatch_size = [8, 16]\n'), "-o", out)
    finally:
        lock.release()
    assert status == 2 and f"pid {os.getpid()}" in one_line(err)
    assert not out.exists() and not (tmp_path / "o.nc.partial").exists()


# --------------------------------------------------------------------- resume keyed on content

TRACE_SPEC = """
model = "alexnet"
batch_size = 32
nodes = [1, 2, 4, 8]
gpus_per_node = [1, 2, 4]
inter.bandwidth = [1e9, 3e9, 1e10, 3e10]
compute.trace = "layers.csv"
"""
ALEXNET = ["features.0", "features.3", "features.6", "features.8", "features.10",
           "classifier.1", "classifier.4", "classifier.6"]


def write_trace(folder: Path, scale: float) -> Path:
    path = folder / "layers.csv"
    rows = [f"{name},{scale * (i + 1) * 1e-4},{scale * (i + 1) * 2e-4}" for i, name in enumerate(ALEXNET)]
    path.write_text("layer,forward_time,backward_time\n" + "\n".join(rows) + "\n")
    return path


def interrupted_run(spec, out, monkeypatch, chunk=6, after=2):
    real_write = NetcdfStore.write

    def stop_after(self, c, block, sampled):
        if len(self.completed) == after:
            raise interrupt.Interrupted(signal.SIGINT)
        real_write(self, c, block, sampled)

    monkeypatch.setattr(NetcdfStore, "write", stop_after)
    with pytest.raises(interrupt.Interrupted):
        sweep.run(spec, out, chunk=chunk)
    monkeypatch.undo()


def test_a_changed_trace_file_starts_over_and_never_mixes(tmp_path, monkeypatch):

    spec = tmp_path / "spec.toml"
    spec.write_text(TRACE_SPEC)
    write_trace(tmp_path, 1.0)
    out = tmp_path / "t.nc"
    interrupted_run(str(spec), out, monkeypatch)
    write_trace(tmp_path, 3.0)  # same path, new contents
    messages = []
    sweep.run(str(spec), out, chunk=6, log=messages.append).close()
    assert any(m.startswith("starting over: the compute.trace file") and "layers.csv changed" in m
               for m in messages), messages
    assert not any(m.startswith("resuming") for m in messages)
    xr.testing.assert_identical(open_cube(out), sweep.run(str(spec)))  # all of it from the new trace


def test_a_changed_model_file_starts_over_and_never_mixes(tmp_path, monkeypatch):
    spec = tmp_path / "spec.toml"
    spec.write_text(TRACE_SPEC.replace('model = "alexnet"', 'model = "mine.csv"').replace('compute.trace = "layers.csv"\n', ""))
    model = tmp_path / "mine.csv"

    def write_model(params: int):
        model.write_text("name,params,forward_flops\n" + "".join(f"{name},{params},1e8\n" for name in ALEXNET))

    write_model(1_000_000)
    out = tmp_path / "t.nc"
    interrupted_run(str(spec), out, monkeypatch)
    write_model(3_000_000)  # same path, new contents
    messages = []
    sweep.run(str(spec), out, chunk=6, log=messages.append).close()
    assert any(m.startswith("starting over: the model file") and "mine.csv changed" in m for m in messages), messages
    xr.testing.assert_identical(open_cube(out), sweep.run(str(spec)))


def test_a_chunk_change_starts_over_and_says_so(tmp_path, monkeypatch, cli, write_spec):
    spec = write_spec('model = "alexnet"\nbatch_size = [8, 16, 32]\nnodes = [1, 2, 4, 8]\n')
    out = tmp_path / "c.nc"
    interrupted_run(str(spec), out, monkeypatch, chunk=2)
    status, _, err = cli("run", spec, "-o", out, "--chunk", "5")
    assert status == 0, err
    assert "starting over: --chunk changed (2 -> 5)" in err
    xr.testing.assert_identical(open_cube(out), sweep.run(str(spec)))


def test_same_inputs_resume(tmp_path, monkeypatch, cli, write_spec):
    spec = write_spec('model = "alexnet"\nbatch_size = [8, 16, 32]\nnodes = [1, 2, 4, 8]\n')
    out = tmp_path / "r.nc"
    interrupted_run(str(spec), out, monkeypatch, chunk=2)
    status, _, err = cli("run", spec, "-o", out, "--chunk", "2")
    assert status == 0 and "resuming r.nc.partial: 2 chunks already done" in err and "starting over" not in err
    xr.testing.assert_identical(open_cube(out), sweep.run(str(spec)))


# --------------------------------------------------------------------- inputs never outputs

def test_run_refuses_its_scenario_a_link_to_it_and_its_trace_as_output(tmp_path, cli):
    spec = tmp_path / "spec.toml"
    spec.write_text(TRACE_SPEC)
    trace = write_trace(tmp_path, 1.0)
    link = tmp_path / "link.nc"
    link.symlink_to(spec)
    before = spec.read_text(), trace.read_text()
    for output in (spec, link, trace):
        status, _, err = cli("run", spec, "-o", output)
        assert status == 2, err
        line = one_line(err)
        assert f"--output = '{output}'" in line and "never replaces an input" in line
    assert (spec.read_text(), trace.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layers.csv", "link.nc", "spec.toml"]


def test_explain_refuses_its_chrome_trace_as_the_trace_it_writes(tmp_path, cli):
    events = [{"name": name, "ph": "X", "ts": float(i), "dur": 100.0} for i, name in enumerate(ALEXNET)]
    trace = tmp_path / "measured.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    spec = tmp_path / "s.toml"
    spec.write_text('model = "alexnet"\nbatch_size = 8\ncompute.trace = "measured.json"\n')
    before = trace.read_text()
    status, _, err = cli("explain", spec, "--trace", trace)
    assert status == 2 and "is the compute.trace file" in one_line(err)
    assert trace.read_text() == before


def test_calibrate_and_predict_refuse_their_inputs_as_output(tmp_path, cli, monkeypatch):
    import sweep.fit.optimise

    monkeypatch.setattr(sweep.fit.optimise, "fit", lambda *a, **k: pytest.fail("the fit ran"))
    data = tmp_path / "data.csv"
    data.write_text("nodes,message_bytes,allreduce_time\n2,1000,1e-5\n2,100000,5e-5\n")
    fit = tmp_path / "fit.toml"
    fit.write_text("[inter]\nalpha = 1e-5\nbandwidth = 1e9\n")
    query = tmp_path / "q.csv"
    query.write_text("nodes,message_bytes\n2,1000\n")
    cases = [("calibrate", data, "--fit", "inter.alpha", "-o", data),
             ("calibrate", data, "--fit", "inter.alpha", "--base", fit, "-o", fit),
             ("predict", fit, query, "-o", query),
             ("predict", fit, query, "-o", fit)]
    texts = {p: p.read_text() for p in (data, fit, query)}
    for args in cases:
        status, _, err = cli(*args)
        assert status == 2 and "never replaces an input" in one_line(err), err
    assert {p: p.read_text() for p in texts} == texts


def test_a_complete_cube_of_the_same_inputs_is_reported_done(tmp_path, cli, write_spec):
    spec = write_spec('model = "alexnet"\nbatch_size = [8, 16]\n')
    out = tmp_path / "done.nc"
    assert cli("run", spec, "-o", out)[0] == 0
    stamp = out.stat().st_mtime_ns
    status, _, err = cli("run", spec, "-o", out)
    assert status == 0 and "already complete for this scenario and these inputs: nothing to do" in err
    assert "wrote" not in err and out.stat().st_mtime_ns == stamp
    spec.write_text('model = "alexnet"\nbatch_size = [8, 32]\n')  # another scenario: replaced, and said
    status, _, err = cli("run", spec, "-o", out)
    assert status == 0 and f"replaced the existing {out}" in err
    assert list(open_cube(out)["batch_size"].values) == [8, 32]


# --------------------------------------------------------------------- write failures

def mount_tmpfs(folder: Path, options: str):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def umount(folder: Path):
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


GRID = """
model = "alexnet"
batch_size = [8, 16, 32, 64, 128, 256, 512, 1024]
nodes = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
gpus_per_node = [1, 2, 4, 8]
inter.bandwidth = {bandwidths}
inter.alpha = {alphas}
outputs = ["iteration_time", "scaling_efficiency", "bottleneck"]
"""


def test_full_disk_mid_run_exits_1_in_one_line_and_resumes_identically(tmp_path):
    spec = tmp_path / "spec.toml"
    text = GRID.format(bandwidths=[float(x) for x in np.geomspace(1e9, 1e12, 16)],
                       alphas=[float(x) for x in np.geomspace(1e-7, 1e-2, 16)])  # 131,072 configurations
    spec.write_text(text.replace('outputs = ["iteration_time", "scaling_efficiency", "bottleneck"]\n', ""))
    disk = tmp_path / "small"
    mount_tmpfs(disk, "size=2m")
    try:
        out = disk / "full.nc"
        cmd = CLI + ["run", str(spec), "-o", str(out), "--chunk", "8192", "--quiet", "--allow-large"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stderr
        line = one_line(done.stderr)
        assert "no space left on the device" in line and "resume" in line
        assert not out.exists() and not (disk / "full.nc.lock").exists()
        finished = chunks_done(disk / "full.nc.partial.json")
        assert finished >= 1
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        done = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"{finished} chunks already done" in done.stderr
        assert_same_cube(open_cube(out), sweep.run(str(spec)))
    finally:
        umount(disk)


@pytest.mark.slow
def test_a_full_disk_inside_hdf5_is_one_line_not_a_crash(tmp_path):
    """The space check before each chunk bypassed: HDF5 itself meets the full
    disk. Still one line and exit 1 (not a segfault or screens of h5py
    tracebacks), and the journal resumes."""
    spec = tmp_path / "spec.toml"
    spec.write_text(GRID.format(bandwidths=[float(x) for x in np.geomspace(1e9, 1e12, 16)],
                                alphas=[float(x) for x in np.geomspace(1e-7, 1e-2, 64)]))
    disk = tmp_path / "small"
    mount_tmpfs(disk, "size=1100k")
    try:
        out = disk / "full.nc"
        args = ["run", str(spec), "-o", str(out), "--chunk", "8192", "--quiet", "--allow-large"]
        code = ("import sys, sweep.engine.store as s; s.NetcdfStore._check_space = lambda *a, **k: None\n"
                f"from sweep.cli import main; sys.exit(main({args!r}, own_process=True))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stderr
        assert "no space left on the device" in one_line(done.stderr)
        finished = chunks_done(disk / "full.nc.partial.json")
        assert finished >= 1
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        done = subprocess.run(CLI + args[:-2], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and f"{finished} chunks already done" in done.stderr, done.stderr
        assert_same_cube(open_cube(out), sweep.run(str(spec)))
    finally:
        umount(disk)


def test_read_only_folders_fail_in_one_line_before_any_work(tmp_path, cli, monkeypatch):
    import sweep.fit.optimise

    spec = tmp_path / "spec.toml"
    spec.write_text('model = "alexnet"\nbatch_size = [8, 16]\n')
    data = tmp_path / "data.csv"
    data.write_text("nodes,message_bytes,allreduce_time\n2,1000,1e-5\n2,100000,5e-5\n")
    disk = tmp_path / "ro"
    mount_tmpfs(disk, "ro,size=1m")
    monkeypatch.setattr(sweep.fit.optimise, "fit", lambda *a, **k: pytest.fail("the fit ran before the check"))
    cube = tmp_path / "cube.nc"
    sweep.run(str(spec), cube).close()
    try:
        for args in (["run", spec, "-o", disk / "o.nc"], ["demo", "-o", disk / "d.nc"],
                     ["calibrate", data, "--fit", "inter.alpha", "-o", disk / "f.toml"],
                     ["predict", spec, data, "-o", disk / "p.csv"],
                     ["explain", spec.with_name("one.toml"), "--trace", disk / "t.json"],
                     ["plot", cube, "-o", disk / "p.png"]):
            spec.with_name("one.toml").write_text('model = "alexnet"\nbatch_size = 8\n')
            status, _, err = cli(*args)
            assert status == 2, (args, err)
            assert "read-only file system" in one_line(err), err
    finally:
        umount(disk)


# --------------------------------------------------------------------- representable values

@pytest.mark.parametrize("text,key,value", [
    ("inter.bandwidth = 1e-38", "inter.bandwidth", "1e-38"),
    ("inter.alpha = 1e39", "inter.alpha", "1e+39"),
    ("inter.alpha = 7200.0", "inter.alpha", "7200.0"),
    ("gpus_per_node = 3e9", "gpus_per_node", "3000000000"),
    ("nodes = 9e18", "nodes", "9000000000000000000"),
    ("nodes = [1, 1e20]", "nodes", "100000000000000000000"),
    ("nodes = 8192\ngpus_per_node = 4096", "gpus_per_node", "4096"),
    ("inter.bandwidth_exponent = 40.0", "inter.bandwidth_exponent", "40.0"),
    ("gpu.peak_flops = 1e40", "gpu.peak_flops", "1e+40"),
    ("[sample]\nn = 10\ninter.bandwidth = { min = 1e-3, max = 1e9 }", "inter.bandwidth", "0.001"),
])
def test_values_beyond_float32_or_physics_are_errors(text, key, value, tmp_path, cli):
    spec = tmp_path / "s.toml"
    spec.write_text(f'model = "alexnet"\nbatch_size = 8\n{text}\n')
    status, _, err = cli("run", spec, "-o", tmp_path / "o.nc")
    assert status == 2
    line = one_line(err)
    assert key in line and value in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_non_finite_output_is_an_error_naming_the_configuration(tmp_path, cli, write_spec, monkeypatch):
    from sweep.engine.devices import Devices

    real_fetch = Devices.fetch

    def poisoned(self, out):
        results = real_fetch(self, out)
        results["iteration_time"] = results["iteration_time"].copy()
        results["iteration_time"][3] = np.inf
        return results

    monkeypatch.setattr(Devices, "fetch", poisoned)
    spec = write_spec('model = "alexnet"\nbatch_size = [8, 16]\nnodes = [1, 2, 4]\n')
    out = tmp_path / "nan.nc"
    status, _, err = cli("run", spec, "-o", out, "--quiet")  # (no estimate line)
    assert status == 2
    line = one_line(err)
    # index 3 of the (batch_size, nodes) block is batch_size = 16, nodes = 1
    assert "iteration_time = inf" in line and "batch_size=16, nodes=1" in line, line
    assert list(tmp_path.glob("nan.nc*")) == []


@pytest.mark.parametrize("event,shown", [
    ({"dur": "abc"}, "dur = 'abc' is not a number"),
    ({"dur": "NaN"}, "dur = 'NaN' must be finite"),
    ({"dur": -5.0}, "dur = -5.0 must be finite and >= 0"),
    ({"dur": 5.0, "ts": None}, "ts = None is not a number"),
])
def test_chrome_trace_times_are_validated_like_csv(event, shown, tmp_path, cli):
    events = [{"name": name, "ph": "X", "ts": float(i), "dur": 100.0} for i, name in enumerate(ALEXNET)]
    events[2].update(event)
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    spec = tmp_path / "s.toml"
    spec.write_text('model = "alexnet"\nbatch_size = 8\ncompute.trace = "trace.json"\n')
    status, _, err = cli("run", spec, "-o", tmp_path / "o.nc")
    assert status == 2
    line = one_line(err)
    assert "compute.trace" in line and shown in line and ALEXNET[2] in line, line
    assert not (tmp_path / "o.nc").exists()


# --------------------------------------------------------------------- estimates

def test_run_prints_one_estimate_line_off_a_terminal(tmp_path, cli, write_spec):
    spec = write_spec('model = "alexnet"\nbatch_size = [8, 16, 32]\nnodes = [1, 2]\n')
    status, _, err = cli("run", spec, "-o", tmp_path / "e.nc", "--chunk", "2")
    assert status == 0
    lines = [l for l in err.splitlines() if "on this machine" in l]
    assert len(lines) == 1 and lines[0].startswith("ssgd-sweep: 6 configurations, about ")
    assert "cube up to" in lines[0]
    status, _, err = cli("run", spec, "-o", tmp_path / "one.nc")  # one chunk: no estimate
    assert status == 0 and "on this machine" not in err


def test_huge_cubes_are_refused_before_work_unless_insisted(tmp_path, cli, write_spec):
    spec = write_spec('model = "alexnet"\nbatch_size = 8\n[sample]\nn = 1e12\ninter.alpha = { min = 0.0, max = 1e-3 }\n')
    started = time.time()
    status, _, err = cli("run", spec, "-o", tmp_path / "huge.nc")
    assert status == 2 and time.time() - started < 30
    line = one_line(err)
    assert "1,000,000,000,000 configurations" in line and "--allow-large" in line and "TB" in line
    assert list(tmp_path.glob("huge*")) == []


def test_a_cube_beyond_the_free_space_is_refused(tmp_path, cli, write_spec, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6 - 10, 10))
    status, _, err = cli("run", write_spec('model = "alexnet"\nbatch_size = [8, 16]\n'), "-o", tmp_path / "f.nc")
    assert status == 2 and "10 B free" in err.strip().splitlines()[-1]
    assert list(tmp_path.glob("f.nc*")) == []


def test_sobol_beyond_2_to_the_30_is_refused_at_validation(tmp_path, cli, write_spec):
    spec = write_spec('model = "alexnet"\nbatch_size = 8\n[sample]\nn = 2_000_000_000\nmethod = "sobol"\n'
                      'inter.alpha = { min = 0.0, max = 1e-3 }\n')
    status, _, err = cli("run", spec, "-o", tmp_path / "s.nc", "--allow-large")
    assert status == 2
    line = one_line(err)
    assert "sample.n = 2000000000" in line and "2**30" in line


# --------------------------------------------------------------------- distributed

def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("rank", [0, 1])
def test_an_unreachable_coordinator_times_out_in_one_line(rank, tmp_path, cli, write_spec):
    """Process 0 alone (its peers never come), or another process whose
    coordinator does not listen: exit 2 after the timeout, one line, no file."""
    spec = write_spec('model = "alexnet"\nbatch_size = 8\n')
    started = time.time()
    status, _, err = cli("run", spec, "-o", tmp_path / "c.nc", "--coordinator", f"127.0.0.1:{closed_port()}",
                         "--num-processes", "2", "--process-id", rank, "--coordinator-timeout", "1")
    assert status == 2
    line = one_line(err)
    assert "--coordinator = '127.0.0.1:" in line and "1 s" in line and "--coordinator-timeout" in line
    assert 1 <= time.time() - started < 20
    assert list(tmp_path.glob("c.nc*")) == []


@pytest.mark.slow
def test_a_signal_to_one_process_of_a_cluster_stops_all_and_resumes(tmp_path, write_spec):
    spec = write_spec(SAMPLED.format(model="alexnet", n=400_000))
    out = tmp_path / "cluster.nc"
    journal = tmp_path / "cluster.nc.partial.json"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}

    def start(port):
        return [subprocess.Popen(CLI + ["run", str(spec), "-o", str(out), "--chunk", "4096", "--quiet",
                                        "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                                        "--process-id", str(rank)],
                                 env=env, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]

    procs = start(closed_port())
    wait_for(lambda: chunks_done(journal) >= 2, procs[0])
    procs[1].send_signal(signal.SIGINT)  # the process that does not write
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert one_line(err) == "ssgd-sweep: interrupted; run the same command again to resume"
    assert not out.exists() and chunks_done(journal) >= 2
    procs = start(closed_port())
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    xr.testing.assert_identical(open_cube(out).drop_attrs(), sweep.run(str(spec)).drop_attrs())


# --------------------------------------------------------------------- smaller cases

def test_version(capsys):
    from sweep.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"ssgd-sweep {sweep.__version__}"


def test_explain_refuses_a_sample_table(cli, write_spec):
    status, _, err = cli("explain", write_spec('model = "alexnet"\nbatch_size = 8\n[sample]\nn = 10\n'
                                                'inter.alpha = { min = 0.0, max = 1e-3 }\n'))
    assert status == 2 and one_line(err).startswith("ssgd-sweep: error: sample = 'n = 10'")


def test_order_matching_and_repeated_rows_warn(tmp_path, cli):
    spec = tmp_path / "s.toml"
    spec.write_text('model = "alexnet"\nbatch_size = 8\ncompute.trace = "t.csv"\n')
    rows = [f"layer{i},1e-4,2e-4" for i in range(8)]  # no zoo names: matched by order
    (tmp_path / "t.csv").write_text("layer,forward_time,backward_time\n" + "\n".join(rows) + "\n")
    status, out, err = cli("explain", spec, "--json")
    assert status == 0 and json.loads(out)
    assert [l for l in err.splitlines() if "warning" in l] == [
        next(l for l in err.splitlines() if "matched by order" in l)]
    rows = [f"{name},1e-4,2e-4" for name in ALEXNET] + [f"{ALEXNET[0]},3e-4,4e-4"]
    (tmp_path / "t.csv").write_text("layer,forward_time,backward_time\n" + "\n".join(rows) + "\n")
    spec.write_text('model = "alexnet"\nbatch_size = 16\ncompute.trace = "t.csv"\n')
    status, out, err = cli("explain", spec, "--json")
    assert status == 0
    assert any("1 layer(s) on several rows (features.0); using the mean" in l for l in err.splitlines()), err


def test_a_fit_without_base_names_what_is_missing(tmp_path, cli):
    fit = tmp_path / "fit.toml"
    fit.write_text('[inter]\nalpha = 1e-5\nbandwidth = 1e9\n\n[fit]\nrows = 3\n')
    for args in (["run", fit, "-o", tmp_path / "o.nc"], ["explain", fit]):
        status, _, err = cli(*args)
        assert status == 2 and "written without --base" in one_line(err) and "model" in err
    fit.write_text('model = "alexnet"\nbatch_size = 8\n' + fit.read_text())  # with the keys added, both accept it
    assert cli("explain", fit)[0] == 0
    assert cli("run", fit, "-o", tmp_path / "o.nc")[0] == 0


def test_skip_reasons_are_shown_and_partials_are_ignored_by_git():
    import tomllib

    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-rs" in addopts.split()
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "x.nc.partial", "x.nc.partial.json", "x.png",
                              "x.nc.lock"], cwd=REPO, capture_output=True, text=True)
    assert ignored.stdout.split() == ["x.nc.partial", "x.nc.partial.json", "x.png", "x.nc.lock"]


def test_a_closed_pipe_is_not_a_traceback():
    done = subprocess.run(" ".join(CLI) + " models --json | head -c 10", shell=True, capture_output=True, text=True)
    assert len(done.stdout) == 10 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_non_utf8_scenario_and_netcdf_as_fit_are_one_line(tmp_path, cli, write_spec):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('model = "alexnet"\nbatch_size = 8\n# caf\u00e9\n'.encode("latin-1"))
    status, _, err = cli("run", bad, "-o", tmp_path / "o.nc")
    assert status == 2 and "not UTF-8" in one_line(err) and str(bad) in err
    cube = tmp_path / "cube.nc"
    assert cli("run", write_spec('model = "alexnet"\nbatch_size = [8, 16]\n'), "-o", cube)[0] == 0
    query = tmp_path / "q.csv"
    query.write_text("model,batch_size\nalexnet,8\n")
    status, _, err = cli("predict", cube, query, "-o", tmp_path / "p.csv")
    assert status == 2 and "is a netCDF cube, not a TOML scenario" in one_line(err)
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("study", ["validate_ddl", "fit_osu"])
def test_validation_studies_without_the_data_say_so_in_one_line(study, tmp_path, monkeypatch, capsys):
    import importlib

    module = importlib.import_module(f"experiments.{study}")
    monkeypatch.setattr(module, "DATA", tmp_path / "missing" / "data.csv")
    with pytest.raises(SystemExit) as done:
        module.main(["--quick", "--out", str(tmp_path / "out")])
    assert done.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"{study}: error: data = ") and "../shared/data" in line


def test_a_device_count_change_starts_over(tmp_path, monkeypatch):
    """Padding and sharding differ with the device count: a journal of another
    count is not resumed (and the message says why)."""
    import sweep.engine.runner as runner

    spec = {"model": "alexnet", "batch_size": [8, 16, 32], "nodes": [1, 2, 4, 8]}
    out = tmp_path / "d.nc"
    interrupted_run(spec, out, monkeypatch, chunk=2)
    real_identity = runner.identity
    monkeypatch.setattr(runner, "identity", lambda *a: {**real_identity(*a), "devices": 4})
    messages = []
    sweep.run(spec, out, chunk=2, log=messages.append).close()
    assert any(m.startswith("starting over: the device count changed (1 -> 4)") for m in messages), messages
    xr.testing.assert_identical(open_cube(out).drop_attrs(), sweep.run(spec).drop_attrs())


def test_ctrl_c_while_waiting_for_the_coordinator_stops_at_once(tmp_path, cli, write_spec):
    import threading

    spec = write_spec('model = "alexnet"\nbatch_size = 8\n')
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    started = time.time()
    timer.start()
    status, _, err = cli("run", spec, "-o", tmp_path / "c.nc", "--coordinator", f"127.0.0.1:{closed_port()}",
                         "--num-processes", "2", "--process-id", "1", "--coordinator-timeout", "60")
    timer.join()
    assert status == 130 and "interrupted" in one_line(err)
    assert time.time() - started < 10


def test_immutable_outputs_and_folders_fail_in_one_line_before_the_fit(tmp_path, cli, monkeypatch):
    import sweep.fit.optimise

    folder = tmp_path / "frozen"
    folder.mkdir()
    existing = tmp_path / "fit.toml"
    existing.write_text("[inter]\nalpha = 1e-5\n")
    for path in (folder, existing):
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not available here: {done.stderr.strip()}")
    monkeypatch.setattr(sweep.fit.optimise, "fit", lambda *a, **k: pytest.fail("the fit ran before the check"))
    data = tmp_path / "data.csv"
    data.write_text("nodes,message_bytes,allreduce_time\n2,1000,1e-5\n2,100000,5e-5\n")
    spec = tmp_path / "s.toml"
    spec.write_text('model = "alexnet"\nbatch_size = [8, 16]\n')
    try:
        for args in (["calibrate", data, "--fit", "inter.alpha", "-o", existing],
                     ["calibrate", data, "--fit", "inter.alpha", "-o", folder / "f.toml"],
                     ["run", spec, "-o", folder / "o.nc"]):
            status, _, err = cli(*args)
            assert status == 2, (args, err)
            assert "operation not permitted" in one_line(err), err
    finally:
        subprocess.run(["chattr", "-i", str(folder), str(existing)], capture_output=True)
    assert existing.read_text() == "[inter]\nalpha = 1e-5\n"
