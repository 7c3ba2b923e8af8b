"""Peak memory of a 10^8-configuration sampled sweep stays under 2 GiB.

Slow (minutes on 2 cores): run with `python -m pytest -m slow`.
"""
import pytest

from experiments.benchmark import sampled_memory


@pytest.mark.slow
def test_hundred_million_sampled_configurations_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_TMP", str(tmp_path))
    result = sampled_memory(10**8)
    assert result["sampled_peak_rss_mib"] < 2048


def test_peak_memory_is_the_childs_own(tmp_path):
    # ru_maxrss survives exec, so a child of a large process would read the
    # parent's peak as its own; the benchmarks' children read VmHWM instead.
    import subprocess
    import sys
    from pathlib import Path

    from experiments.benchmark import peak_rss_mib

    ballast = bytearray(768 * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # resident, not just reserved
    assert peak_rss_mib() > 768
    root = Path(__file__).resolve().parents[1]
    code = (f"import sys; sys.path[:0] = [{str(root)!r}]; "
            "from experiments.benchmark import peak_rss_mib; print(peak_rss_mib())")
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    del ballast
    assert 0 < child < 512
