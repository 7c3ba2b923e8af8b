"""`sweep.run`: evaluate a scenario over its grid or sample into a cube.

Ties the engine together: the chunk plan, the devices, the store (memory,
netCDF, or none on processes other than 0) and the progress bar, with the
resume, replace and clean-up rules of DESIGN 2.6.
"""
from __future__ import annotations

import numpy as np

from sweep.engine import interrupt
from sweep.engine.evaluate import default_chunk, make_progress, run_plan, visible_devices
from sweep.engine.plan import Plan
from sweep.engine.store import MemoryStore, NetcdfStore, NullStore, WriteError, identity, make_layout, open_cube
from sweep.errors import SpecError
from sweep.scenario.spec import Spec, load_spec


def run(spec, output=None, chunk: int | None = None, quiet: bool = True, log=None, open_result: bool = True,
        lock=None):
    """Evaluate a scenario; return the cube.

    With `output`, results stream into `output.partial` chunk by chunk and the
    file is renamed to `output` when complete; an interrupted run resumes from
    its completed chunks when called again with the same scenario, input files
    and output (otherwise it starts over, saying why through `log`). An
    existing `output` computed from the same inputs is kept as it is.
    The returned Dataset then reads lazily from the file (xarray still loads
    coordinates, which for a sampled sweep hold one value per configuration:
    pass `open_result=False` to get None instead and keep memory bounded).
    While it writes, it holds an exclusive lock on `output.lock` (`lock`: one
    the caller took already, `sweep.engine.store.OutputLock`); a second run on the
    same output is refused with SpecError.
    """
    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    if spec.reduce is not None:  # statistics folded on the devices: see sweep.engine.reducer
        from sweep.engine.reducer import run_reduced
        return run_reduced(spec, output, chunk, quiet, log, open_result, lock)
    devices = visible_devices()
    target = chunk or default_chunk(devices.platforms)
    plan = Plan(spec, target, multiple=devices.count)
    ident = identity(spec, plan.length, target, devices.count)
    layout = make_layout(spec, devices.count, plan.disk_chunks(), ident["inputs"])
    log = log or (lambda message: None)
    if output is None:
        store = MemoryStore(layout)
    elif devices.leader:
        store = NetcdfStore(output, layout, ident, log, lock)
    else:
        store = NullStore(layout)
    if devices.agree(np.array([store.already_complete]))[0]:  # process 0 decides for all
        store.finish()
        log(f"{output} is already complete for this scenario and these inputs: nothing to do")
        return open_cube(output) if open_result else None
    progress = _Progress(make_progress(spec.size, quiet or not devices.leader))
    try:
        run_plan(spec, store, plan, devices, progress)
    except WriteError:
        store.abort()  # a full disk: the journaled chunks stay for a resume
        raise
    except SpecError:
        store.discard()
        raise
    except BaseException:
        store.abort()  # an interrupted run keeps its finished chunks for a resume
        raise
    finally:
        progress.close()
    if output is None:
        return store.finish()
    if devices.leader:
        if store.finish():
            log(f"replaced the existing {output}")
        if open_result:
            return open_cube(output)
    return None


class _Progress:
    """The progress bar (if any), and a check for a stop request after every
    chunk, once it is written and journaled (on every process of a cluster)."""

    def __init__(self, bar):
        self.bar = bar

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)
        interrupt.check_all()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
