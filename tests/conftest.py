import os
import textwrap

import jax
import pytest

# Strict promotion, as diffrax's tests do: a silent float64 promotion (a
# float32 kernel meeting a float64 or int array) or an unintended broadcast
# between arrays of different rank becomes a test failure instead of a
# quietly different result.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

from sweep.cli import main
from sweep.engine.compile_cache import ENV as COMPILE_CACHE_ENV

# The commands the tests start as scripts compile from scratch, as on a
# fresh machine, and leave nothing in the user's cache
# (tests/test_compile_cache.py names a folder of its own).
os.environ.setdefault(COMPILE_CACHE_ENV, "off")


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit status, stdout, stderr)."""

    def run(*argv):
        status = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture
def write_spec(tmp_path):
    """Write a scenario file from TOML text; returns its path."""
    counter = iter(range(10_000))

    def write(text: str, name: str | None = None):
        path = tmp_path / (name or f"spec{next(counter)}.toml")
        path.write_text(textwrap.dedent(text))
        return path

    return write



@pytest.fixture(autouse=True, scope="session")
def every_fit_respects_the_wire():
    """Every fit the test suite makes (through sweep.fit.optimise.fit, which
    calibrate and validate call) is checked: no all-reduce, on any algorithm
    and cluster shape, is faster than its wire lower bound at the links' line
    rates (issue 8). Session-wide, so module fixtures that fit are checked too."""
    from sweep.fit import optimise, wire

    fit = optimise.fit

    def checked(rows, fitted, base, options=optimise.FitOptions(), log=None):
        result = fit(rows, fitted, base, options, log)
        violations = wire.wire_bound_violations(rows, result)
        assert not violations, "fit below the wire lower bound:\n" + "\n".join(violations[:10])
        checked.count += 1
        return result

    checked.count = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optimise, "fit", checked)
        yield checked
