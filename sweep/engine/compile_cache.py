"""Compiled programs kept on disk between runs: JAX's persistent compilation
cache, so that a second `calibrate`, `validate`, `predict` or sweep of the
same shapes loads XLA's executables instead of compiling them again (most
of a fit's time on a CPU: `experiments/validate_ddl.py --quick` takes 125 s
cold and 64 s warm on a 2-core Xeon, with identical tables;
experiments/BENCHMARKS.md).

The cache lives in `$SSGD_SWEEP_COMPILE_CACHE`, else
`$XDG_CACHE_HOME/ssgd-sweep/xla`, else `~/.cache/ssgd-sweep/xla`; the value
`off` turns it off. Where the user set JAX's own `JAX_COMPILATION_CACHE_DIR`
their settings stand. The cache is bounded (least recently used entries go
first) and locked across processes (`filelock`), so concurrent runs share
it safely. A folder that cannot be written leaves the cache off: with one
line on stderr where the user named it, silently for the default.

Only a process's own entry point calls `enable` (the `ssgd-sweep` script,
the validation studies): a library caller keeps its process's JAX settings,
and the benchmarks, which time compiles, never read the cache.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "SSGD_SWEEP_COMPILE_CACHE"
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"  # JAX's own variable for `jax_compilation_cache_dir`
OFF = "off"
MAX_BYTES = 2 << 30  # least recently used entries go beyond 2 GiB (validate_ddl --quick writes 7 MB)
# Programs that compile faster than this are not kept. JAX's default, 1 s,
# kept 17 of validate_ddl --quick's 78 programs, and its warm run took 115 s
# instead of 102 s (measured before the fits' Jacobian compiled faster).
MIN_COMPILE_SECONDS = 0.0


def cache_dir(environ=os.environ) -> Path | None:
    """Where the cache lives, or None where it is off or JAX's own variable rules."""
    if JAX_ENV in environ:
        return None
    chosen = environ.get(ENV, "").strip()
    if chosen:  # (an empty value is no choice: not the current folder)
        return None if chosen.lower() == OFF else Path(chosen).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "ssgd-sweep" / "xla"


def _writable(path: Path) -> str | None:
    """None if `path` can hold cache entries, else why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def enable(environ=os.environ) -> Path | None:
    """Turn the cache on for this process, before its first compile. Returns
    the folder, or None where it stays off. Costs no JAX import when JAX is
    not loaded yet (JAX reads the variables set here when it loads)."""
    path = cache_dir(environ)
    if path is None:
        return None
    why = _writable(path)
    if why is not None:
        if environ.get(ENV, "").strip():
            print(f"ssgd-sweep: note: {ENV}={environ[ENV]} cannot be written ({why}): compile cache off",
                  file=sys.stderr)
        return None
    settings = {"jax_compilation_cache_dir": str(path),
                "jax_compilation_cache_max_size": MAX_BYTES,
                "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS}
    if "jax" not in sys.modules:
        for name, value in settings.items():
            environ[name.upper()] = str(value)
        return path
    import jax

    for name, value in settings.items():
        if hasattr(jax.config, name):  # (an older JAX without eviction keeps the cache unbounded)
            jax.config.update(name, value)
    return path
