"""ssgd-sweep: the DAG model of synchronous data-parallel SGD, swept with JAX.

`run(spec, output=None)` evaluates a scenario (a TOML path or a mapping) over
its whole grid (or sample) and returns a labelled xarray Dataset, streamed to
`output` as netCDF when given.
"""
from __future__ import annotations

__version__ = "0.1.0"


def run(spec, output=None, chunk: int | None = None, quiet: bool = True, log=None, open_result: bool = True):
    """Evaluate a scenario; return the cube.

    With `output`, results stream into `output.partial` chunk by chunk and the
    file is renamed to `output` when complete; an interrupted run resumes from
    its completed chunks when called again with the same scenario and output.
    The returned Dataset then reads lazily from the file (xarray still loads
    coordinates, which for a sampled sweep hold one value per configuration:
    pass `open_result=False` to get None instead and keep memory bounded).
    """
    import xarray as xr

    from sweep.evaluate import DEFAULT_CHUNK, make_progress, run_plan, visible_devices
    from sweep.plan import Plan
    from sweep.schema import SpecError
    from sweep.spec import Spec, load_spec
    from sweep.store import MemoryStore, NetcdfStore, NullStore, fingerprint, make_layout

    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    devices = visible_devices()
    target = chunk or DEFAULT_CHUNK
    plan = Plan(spec, target, multiple=devices.count)
    layout = make_layout(spec, devices.count, plan.disk_chunks())
    if output is None:
        store = MemoryStore(layout)
    elif devices.leader:
        store = NetcdfStore(output, layout, fingerprint(spec, plan.length, target), log)
    else:
        store = NullStore()
    progress = make_progress(spec.size, quiet or not devices.leader)
    try:
        run_plan(spec, store, plan, devices, progress)
    except SpecError:
        store.discard()
        raise
    except BaseException:
        store.abort()  # an interrupted run keeps its finished chunks for a resume
        raise
    finally:
        if progress is not None:
            progress.close()
    if output is None:
        return store.finish()
    if devices.leader:
        store.finish()
        if open_result:
            return xr.open_dataset(output, engine="h5netcdf")
    return None


__all__ = ["run", "__version__"]
