"""One CPU device per core for a sweep (JAX's own default is one CPU device,
which runs most programs on one core). Only the CPU backend reads the
count: GPUs are unaffected. bsp/wfbp's closed form, whose loops XLA already
spreads over the cores of one device, runs on the first device alone
whatever the count (`sweep.engine.evaluate.spreads_itself`)."""
from __future__ import annotations

import os
import sys

COUNT_ENV = "JAX_NUM_CPU_DEVICES"  # JAX's own variable for its `jax_num_cpu_devices` option
_XLA_COUNT_FLAG = "xla_force_host_platform_device_count"


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def use_every_core() -> int | None:
    """Ask JAX for one CPU device per core, before it starts. Left alone
    where the user chose a count (JAX_NUM_CPU_DEVICES, or
    --xla_force_host_platform_device_count in XLA_FLAGS) and where JAX has
    started already. Returns the count asked for, or None. Costs no JAX
    import when JAX is not loaded yet."""
    if COUNT_ENV in os.environ or _XLA_COUNT_FLAG in os.environ.get("XLA_FLAGS", ""):
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
