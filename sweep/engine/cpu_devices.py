"""One CPU device per core for a sweep (JAX's own default is one CPU device,
which runs most programs on one core). Only the CPU backend reads the
count: GPUs are unaffected.

Not for a scenario whose every program is bsp/wfbp's closed form (fixed
buckets, a contracted DAG): XLA already splits its large loops over the
cores of one device, and a second device on two cores made a reduced
2**30-configuration resnet50/wfbp sweep slower (0.75x and 0.81x one device,
experiments/BENCHMARKS.md), where every other program ran 1.6-2.2x faster."""
from __future__ import annotations

import os
import sys

COUNT_ENV = "JAX_NUM_CPU_DEVICES"  # JAX's own variable for its `jax_num_cpu_devices` option
_XLA_COUNT_FLAG = "xla_force_host_platform_device_count"


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def use_every_core(spec=None) -> int | None:
    """Ask JAX for one CPU device per core, before it starts, for a sweep of
    `spec` (None: any sweep). Left alone where the user chose a count
    (JAX_NUM_CPU_DEVICES, or --xla_force_host_platform_device_count in
    XLA_FLAGS), where JAX has started already, and for closed-form scenarios
    (`closed_form_only`). Returns the count asked for, or None. Costs no JAX
    import when JAX is not loaded yet."""
    if COUNT_ENV in os.environ or _XLA_COUNT_FLAG in os.environ.get("XLA_FLAGS", ""):
        return None
    if spec is not None and closed_form_only(spec):
        return None
    count = cores()
    if "jax" not in sys.modules:
        os.environ[COUNT_ENV] = str(count)  # read when JAX loads its options
        return count
    import jax

    if jax.config.jax_num_cpu_devices != -1:
        return None
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backends are up (the caller ran JAX first): keep theirs
        return None
    return count


def closed_form_only(spec) -> bool:
    """Whether every structural group of the scenario evaluates bsp/wfbp's
    closed form (`sweep.engine.xla.closed_form`); host work only: the DAGs
    are built, JAX's backend is not started."""
    from sweep.engine.plan import structural_groups
    from sweep.engine.xla import closed_form
    from sweep.graph.compiler import compile_structure
    from sweep.scenario.spec import has_fixed_buckets

    fixed = has_fixed_buckets(spec)
    return fixed and all(closed_form(compile_structure(structure), fixed) for structure, _ in structural_groups(spec))
