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
