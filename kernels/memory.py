"""Memory per GPU: model states and activations (DESIGN 2.5).

Model states follow ZeRO (Rajbhandari et al., SC 2020, sections 3.1 and 5):
with Psi parameters, mixed-precision Adam keeps 2 Psi bytes of fp16
parameters, 2 Psi of fp16 gradients and K Psi of optimizer states with
K = 12 (fp32 parameters, momentum and variance); stage 1 shards the
optimizer states over the P data-parallel GPUs, stage 2 the gradients too,
stage 3 the parameters too. The same accounting gives the other cases:
fp32 training keeps 4 + 4 bytes of parameters and gradients and 4 bytes per
state (SGD none, momentum one, Adam two); mixed precision adds the fp32
master copy of the parameters to the states (K = 4, 8, 12).

Activations: the model's per-sample layer outputs (float32; half in mixed
precision) times the micro-batch, all of them or, with checkpointing, the
segment boundaries plus one recomputed segment (`sweep.graph.zoo.Model`).

Not counted: temporary buffers (gathered layers under ZeRO-3, fusion buckets,
communication staging), the framework's workspace and allocator
fragmentation, which depend on the implementation.
"""
from __future__ import annotations

import jax.numpy as jnp

from kernels.codes import ADAM, MIXED, MOMENTUM

# (parameter, gradient, per-state) bytes per parameter, and the master copy in mixed precision.
FP32_BYTES = 4.0
HALF_BYTES = 2.0


def model_state_bytes(params, workers, zero: int, optimizer, precision):
    """Bytes per GPU of parameters, gradients and optimizer states (ZeRO
    stage `zero`, static; `optimizer` and `precision` are integer codes of
    `kernels.codes`, per configuration)."""
    mixed = precision == MIXED
    weight = jnp.where(mixed, HALF_BYTES, FP32_BYTES)
    states = jnp.where(optimizer == ADAM, 2.0, jnp.where(optimizer == MOMENTUM, 1.0, 0.0)) * FP32_BYTES
    states = states + jnp.where(mixed, FP32_BYTES, 0.0)  # the fp32 master parameters
    def sharded(stage: int):
        return workers if zero >= stage else 1.0

    return params * (weight / sharded(3) + weight / sharded(2) + states / sharded(1))


def activation_bytes(per_sample, checkpointed_per_sample, samples, checkpointing, precision):
    """Bytes per GPU of the activations kept for the backward pass of one micro-batch."""
    kept = jnp.where(checkpointing > 0, checkpointed_per_sample, per_sample)
    return samples * kept * jnp.where(precision == MIXED, HALF_BYTES / FP32_BYTES, 1.0)
