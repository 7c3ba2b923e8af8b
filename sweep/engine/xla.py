"""Which evaluator a sweep's program gets on a CPU, and XLA's settings for it.

On a CPU an unrolled program can run as straight-line code, one [C] value
per task (`kernels.straight`), which XLA compiles into one loop over the
configurations: 2.7-4.6x the rate of the segments' scans, but 5-22x
their compile time. Measured on the benchmark grid (2**16 configurations, one
device, 2-core Xeon; first call, then steady rate; since its maxima are
`kernels.smooth.select_max`):

    DAG (tasks)                  scans           straight-line
    resnet50 layer-wise (1,614)  2.6 s, 0.47 M/s 13.1 s, 2.18 M/s
    resnet50 ZeRO-3 (1,617)      1.4 s, 0.80 M/s 11.8 s, 2.32 M/s
    gpt2 ZeRO-3 (1,215)          1.3 s, 1.10 M/s  7.4 s, 2.93 M/s
    bert_large ZeRO-3 (3,111)    1.5 s, 0.37 M/s 33.1 s, 1.06 M/s

so the straight-line code only wins from 6.3 M (layer-wise) to 18 M
(bert_large ZeRO-3) configurations of one DAG (4.6 M to 38 M before the
selects: 7.8 s, 1.84 M/s; 12.4 s, 1.64; 6.7 s, 1.86; 42.1 s, 0.70 M/s
in the same order); `explain` of a 1,215-task
ZeRO-3 DAG (every task's times, one configuration) compiled in 145 s
against 2.5 s. A sweep therefore takes it from `STRAIGHT_FROM`
configurations per structural group (`straight_code`); explain and the
fits, which evaluate a few configurations, run the scans.

XLA's newer CPU fusion emitter duplicates a fused value for each of its
readers instead of computing it once: on ResNet-50's ZeRO-3 program the
generated code held 15x the additions of the HLO, was not vectorised and
ran 5x slower, and a layer-wise program compiled for 9 minutes instead of
6 s. The older emitter computes each value once. The contracted programs
are faster with the newer one (resnet50/mgwfbp `sweep.run` 3.1 against
6.2-8.8 M/s with the older, 2-core Xeon), so only the straight-line
programs get `COMPILER_OPTIONS` (XLA's CPU backend's own; other backends
ignore them).
"""
from __future__ import annotations

import functools

import jax

from kernels.iteration import straight_line

COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# Configurations of one structural group from which a sweep runs an
# unrolled program as straight-line code on a CPU: within the measured
# break-even range above, past the layer-wise one.
STRAIGHT_FROM = 1 << 24


def straight_code(dag, configurations: int) -> bool:
    """Whether a sweep evaluating `configurations` configurations of the
    compiled DAG `dag` runs its program as straight-line code."""
    return straight_line(dag) and configurations >= STRAIGHT_FROM


def closed_form(dag, fixed_buckets: bool) -> bool:
    """Whether a sweep evaluates `dag`'s program as bsp/wfbp's closed form (a
    contracted DAG, fixed buckets): untiled, large loops that XLA's CPU
    backend already spreads over the cores of one device."""
    return fixed_buckets and dag.mode == "contracted"


def program_jit(fn=None, **kwargs):
    """`jax.jit(fn, **kwargs)` for a function with a static keyword argument
    `straight` (straight-line code, `kernels.straight`): compiled with
    `COMPILER_OPTIONS` when it is true. Also a decorator factory through
    `functools.partial(program_jit, static_argnames=...)`."""
    plain = jax.jit(fn, **kwargs)
    fused = jax.jit(fn, compiler_options=COMPILER_OPTIONS, **kwargs)

    @functools.wraps(fn)
    def call(*args, **kw):
        return (fused if kw.get("straight", False) else plain)(*args, **kw)

    return call
