"""Writing figures, tables and study folders: atomically, checked before work starts.

Shared by `explain --plot/--trace`, `plot` and the scripts in `experiments/`.
Every file is written to a temporary name beside its target and renamed, so a
failure never leaves a half-written PNG, JSON or table behind.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from sweep.schema import SpecError

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
DPI = 100


def pyplot():
    """matplotlib.pyplot on the Agg backend: files only, no screen needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_output(key: str, path: str | os.PathLike, suffixes: Sequence[str] | None = None) -> Path:
    """`path` as a Path, or SpecError if it cannot be written as asked."""
    out = Path(path)
    if out.is_dir():
        raise SpecError(key, str(path), "is a directory")
    if suffixes and out.suffix.lower() not in suffixes:
        raise SpecError(key, str(path), f"unsupported file type; use one of {', '.join(suffixes)}")
    if not out.parent.resolve().is_dir():
        raise SpecError(key, str(path), "its directory does not exist")
    return out


def write_atomically(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call `write(tmp)` on a temporary file beside `path`, then rename it to `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_figure(fig, path: str | os.PathLike, dpi: int = DPI) -> Path:
    """Save a matplotlib figure (format from the suffix) and close it."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    try:
        return write_atomically(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight"))
    finally:
        pyplot().close(fig)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_atomically(path, lambda tmp: Path(tmp).write_text(text))


def write_dataset(dataset, path: str | os.PathLike) -> Path:
    """An xarray Dataset as netCDF (h5netcdf), like the cubes `run` writes."""
    return write_atomically(path, lambda tmp: dataset.to_netcdf(tmp, engine="h5netcdf"))


def require_data(study: str, path: str | os.PathLike) -> None:
    """Exit 2 with one line when a study's measurements are missing (they live
    in ../shared/data beside the repository, not in it)."""
    if not Path(path).is_file():
        import sys

        print(f"{study}: error: data = {str(path)!r}: not found; the measurements live in ../shared/data "
              "beside the repository (see DESIGN.md, section 5)", file=sys.stderr)
        raise SystemExit(2)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; cells are used as given (format numbers before)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def study_arguments(name: str, description: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """`--quick` and `--out DIR` (default experiments/results/NAME/, created)."""
    parser = argparse.ArgumentParser(prog=f"experiments/{name}.py", description=description)
    parser.add_argument("--quick", action="store_true",
                        help="a small grid that runs in seconds (used by the tests)")
    default = Path(__file__).resolve().parents[1] / "experiments" / "results" / name
    parser.add_argument("--out", type=Path, default=default,
                        help=f"output folder (default: experiments/results/{name}/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return args
