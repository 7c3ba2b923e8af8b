import textwrap

import pytest

from sweep.cli import main


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

