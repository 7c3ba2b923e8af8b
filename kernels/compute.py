"""Compute, update and input durations (DESIGN 2.1)."""
from __future__ import annotations

import jax.numpy as jnp


def efficiency(batch, eff_max, b_half):
    """Saturating GPU efficiency: eff(B) = eff_max * B / (B + b_half)."""
    return eff_max * batch / (batch + b_half)


def compute_scales(total_flops, total_params, p):
    """(forward seconds per FLOP [C], backward seconds per FLOP [C], update [C]).

    forward_l = B * flops_l / (peak * eff(B)); backward = bwd_ratio * forward;
    update = bytes moved per parameter * params / memory bandwidth (memory-bound).
    With a measured single-GPU throughput (> 0), all three are scaled so that
    one GPU computes B samples in exactly B / measured_throughput seconds.
    """
    batch = p.batch_size
    forward = batch / (p.peak_flops * efficiency(batch, p.efficiency, p.b_half))
    backward = forward * p.bwd_ratio
    update = p.update_bytes_per_param * total_params / p.memory_bandwidth

    measured = p.measured_throughput
    modelled = total_flops * (forward + backward) + update
    scale = jnp.where(measured > 0, batch / jnp.where(measured > 0, measured, 1.0) / modelled, 1.0)
    return forward * scale, backward * scale, update * scale


def compute_profile(forward_total, backward_total, total_params, traced: bool, p):
    """(forward s/unit [C], backward s/unit [C], update [C]) for a DAG whose
    compute tasks carry work in units (`sweep.graph.compiler.CompiledDag`).

    Without a trace a unit is a forward FLOP per sample and the scales come
    from `compute_scales`. With measured per-layer times (`compute.trace`) a
    unit is a second and the scale is 1, or, with a measured single-GPU
    throughput, the factor that makes one GPU's forward + backward + update
    take exactly B / measured_throughput. `*_total` are one micro-batch's
    units.
    """
    if not traced:
        return compute_scales(forward_total, total_params, p)
    update = p.update_bytes_per_param * total_params / p.memory_bandwidth
    measured = p.measured_throughput
    modelled = forward_total + backward_total + update
    scale = jnp.where(measured > 0, p.batch_size / jnp.where(measured > 0, measured, 1.0) / modelled, 1.0)
    return scale, scale, update * scale


def input_times(p):
    """(io [C], h2d [C]): read/decode of a batch, and its copy to the GPU."""
    io = p.io_time_per_sample * p.batch_size
    h2d = p.h2d_alpha + p.batch_size * p.sample_bytes / p.h2d_bandwidth
    return io, h2d
