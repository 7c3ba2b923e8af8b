"""The on-disk compile cache (sweep.engine.compile_cache): where it lives, that
a second run loads the programs the first one wrote and computes the same
result, and that a folder it cannot write leaves it off with one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.engine.compile_cache import ENV, JAX_ENV, cache_dir

ROOT = Path(__file__).resolve().parents[1]

# A run of the CLI that counts the programs JAX loaded from its cache.
COUNT_HITS = """
import sys
import jax.monitoring
hits = []
jax.monitoring.register_event_listener(
    lambda name, **_: hits.append(name) if name == "/jax/compilation_cache/cache_hits" else None)
from sweep.cli import main
status = main(sys.argv[1:], own_process=True)
print("cache hits", len(hits))
raise SystemExit(status)
"""


@pytest.mark.parametrize("environ, expected", [
    ({ENV: "/somewhere/else"}, Path("/somewhere/else")),
    ({ENV: "off"}, None),
    ({ENV: " OFF "}, None),
    ({"XDG_CACHE_HOME": "/xdg"}, Path("/xdg/ssgd-sweep/xla")),
    ({ENV: "", "XDG_CACHE_HOME": "/xdg"}, Path("/xdg/ssgd-sweep/xla")),  # empty: unset, not the current folder
    ({}, Path("~/.cache/ssgd-sweep/xla").expanduser()),
    # JAX's own variable: the user's settings stand, ours are not applied.
    ({JAX_ENV: "/theirs", ENV: "/ours"}, None),
])
def test_where_the_cache_lives(environ, expected):
    assert cache_dir(environ) == expected


def _calibrate(tmp_path, cache, argv_prefix, out_name):
    data = tmp_path / "d.csv"
    data.write_text("nodes,gpus_per_node,message_bytes,allreduce_time\n"
                    "2,1,1024,5e-5\n2,1,1048576,1.1e-3\n4,1,1024,9e-5\n4,1,1048576,2.4e-3\n")
    env = {k: v for k, v in os.environ.items() if k != JAX_ENV}
    env.update({ENV: str(cache), "PYTHONPATH": str(ROOT)})
    out = tmp_path / out_name
    done = subprocess.run([sys.executable, *argv_prefix, "calibrate", str(data), "--fit", "inter", "-o", str(out),
                           "--steps", "50", "--starts", "2"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return done, out


def test_a_second_run_loads_the_first_runs_programs_and_fits_the_same(tmp_path):
    cache = tmp_path / "cache"
    # The console script's way: the variables are set before JAX loads.
    first, first_fit = _calibrate(tmp_path, cache, ["-m", "sweep"], "first.toml")
    assert first.returncode == 0, first.stderr
    entries = list(cache.glob("*-cache"))
    assert entries, sorted(p.name for p in cache.iterdir())
    # With JAX loaded first, the options are set through jax.config instead.
    second, second_fit = _calibrate(tmp_path, cache, ["-c", COUNT_HITS], "second.toml")
    assert second.returncode == 0, second.stderr
    assert int(second.stdout.split("cache hits")[1]) >= len(entries) > 0
    assert second_fit.read_bytes() == first_fit.read_bytes()


def test_off_writes_nothing(tmp_path):
    done, _ = _calibrate(tmp_path, "off", ["-c", COUNT_HITS], "fit.toml")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split("cache hits")[1]) == 0
    assert not (tmp_path / "off").exists()


def test_a_folder_that_cannot_be_written_leaves_the_cache_off_with_one_line(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    done, fit = _calibrate(tmp_path, blocked / "cache", ["-m", "sweep"], "fit.toml")
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if ENV in line]
    assert len(notes) == 1 and "compile cache off" in notes[0], done.stderr
    assert "Error writing persistent compilation cache" not in done.stderr
    assert fit.exists()
