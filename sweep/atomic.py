"""Atomic file writes: every file goes to a temporary name beside its target
and is renamed, so a failure never leaves a half-written file behind.

The one writer for cubes written whole, FIT.toml, predictions, validation
tables, figures and study files (streamed cubes journal their own chunks:
`sweep.engine.store`). Imports nothing from the project but `sweep.errors`.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from sweep.errors import SpecError


def check_output(key: str, path: str | os.PathLike, suffixes: Sequence[str] | None = None) -> Path:
    """`path` as a Path, or SpecError if it cannot be written as asked."""
    if not str(path).strip():
        raise SpecError(key, str(path), "empty file name")
    out = Path(path)
    try:
        if out.is_dir():
            raise SpecError(key, str(path), "is a directory")
        if suffixes and out.suffix.lower() not in suffixes:
            raise SpecError(key, str(path), f"unsupported file type; use one of {', '.join(suffixes)}")
        if not out.parent.resolve().is_dir():
            folder = out.parent
            reason = "its folder is a file" if folder.exists() else "its directory does not exist"
            raise SpecError(key, str(path), reason)
    except OSError as err:  # a name too long, a path through a file: the system's own words
        raise SpecError(key, str(path), f"cannot be written ({err.strerror or err})") from None
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


def write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8 text, newlines as given."""
    return write_atomically(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8", newline=""))


def write_dataset(dataset, path: str | os.PathLike) -> Path:
    """An xarray Dataset as netCDF (h5netcdf), like the cubes `run` writes."""
    return write_atomically(path, lambda tmp: dataset.to_netcdf(tmp, engine="h5netcdf"))
