"""The two value types of the zoo: a parameterised layer and a whole model."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Layer:
    """One module that owns parameters (or, for attention scores, real FLOPs).

    ``forward_flops`` is per sample; one multiply-add counts as 2 FLOPs.
    """

    name: str
    params: int
    forward_flops: float


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
