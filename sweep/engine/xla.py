"""XLA settings for the jitted programs that evaluate a DAG.

On a CPU an unrolled program runs as straight-line code, one [C] value per
task (`kernels.straight`), which XLA compiles into one loop over the
configurations. XLA's newer CPU fusion emitter duplicates a fused value for
each of its readers instead of computing it once: on ResNet-50's ZeRO-3
program (1,617 tasks) the generated code held 15x the additions of the HLO,
was not vectorised and ran 5x slower, and a layer-wise program compiled for
9 minutes instead of 6 s. The older emitter computes each value once. The
contracted programs are faster with the newer one (resnet50/mgwfbp
`sweep.run` 3.1 against 6.2-8.8 M/s with the older, 2-core Xeon), so only
the straight-line programs get `COMPILER_OPTIONS` (XLA's CPU backend's
own; other backends ignore them).
"""
from __future__ import annotations

import functools

import jax

from kernels.iteration import straight_line

COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


def program_jit(fn=None, *, dag: int = 0, straight: bool | None = None, **kwargs):
    """`jax.jit(fn, **kwargs)`, compiled with `COMPILER_OPTIONS` when the
    program runs as straight-line code: as `straight` says, or else as
    `kernels.iteration.straight_line` says of the compiled DAG passed as
    positional argument `dag`. Also a decorator factory through
    `functools.partial(program_jit, dag=..., static_argnames=...)`."""
    plain = jax.jit(fn, **kwargs)
    fused = jax.jit(fn, compiler_options=COMPILER_OPTIONS, **kwargs)

    @functools.wraps(fn)
    def call(*args, **kw):
        use = straight if straight is not None else straight_line(args[dag])
        return (fused if use else plain)(*args, **kw)

    return call
