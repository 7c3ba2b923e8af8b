"""ssgd-sweep: the DAG model of synchronous data-parallel SGD, swept with JAX.

`run(spec, output=None)` evaluates a scenario (a TOML path or a mapping) over
its whole grid and returns a labelled xarray Dataset, written to `output` as
netCDF when given.
"""
from __future__ import annotations

__version__ = "0.1.0"


def run(spec, output=None, chunk: int | None = None):
    """Evaluate a scenario; return the cube (and write it when `output` is given)."""
    from sweep.cube import make_cube, write_cube
    from sweep.evaluate import DEFAULT_CHUNK, evaluate_grid
    from sweep.spec import Spec, load_spec

    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    results = evaluate_grid(spec, chunk or DEFAULT_CHUNK)
    cube = make_cube(spec, results, devices=1)
    if output is not None:
        write_cube(cube, output)
    return cube


__all__ = ["run", "__version__"]
