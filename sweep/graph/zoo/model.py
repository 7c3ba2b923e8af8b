"""The two value types of the zoo: a parameterised layer and a whole model."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Layer:
    """One module that owns parameters (or, for attention scores, real FLOPs).

    ``forward_flops`` is per sample; one multiply-add counts as 2 FLOPs.
    ``output_bytes`` is the layer's output per sample in float32 (4 bytes per
    element): what training keeps for the backward pass (the activation
    memory model, `kernels.memory`); 0 when unknown.
    """

    name: str
    params: int
    forward_flops: float
    output_bytes: float = 0.0


@dataclasses.dataclass(frozen=True)
class Model:
    """A network as its parameterised layers in forward (execution) order."""

    name: str
    layers: tuple[Layer, ...]
    input_bytes: int
    seq_len: int | None

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        return float(sum(layer.forward_flops for layer in self.layers))

    @property
    def activation_bytes(self) -> float:
        """Per sample (float32): every layer's output, kept for the backward pass."""
        return float(sum(layer.output_bytes for layer in self.layers))

    @property
    def checkpointed_activation_bytes(self) -> float:
        """Per sample (float32) with activation checkpointing, after Chen et al.
        2016 ("Training Deep Nets with Sublinear Memory Cost", section 4.1):
        the L layers are cut into segments of ceil(sqrt(L)) layers; only each
        segment's output is kept, and the backward pass recomputes one segment
        at a time, holding its outputs: kept outputs + the largest segment."""
        sizes = [layer.output_bytes for layer in self.layers]
        if not sizes:
            return 0.0
        width = math.isqrt(len(sizes) - 1) + 1  # ceil(sqrt(L))
        segments = [sizes[i:i + width] for i in range(0, len(sizes), width)]
        return float(sum(s[-1] for s in segments) + max(sum(s) for s in segments))
