"""A recorder that collects layers in forward order while shapes flow through.

Network definitions call its methods in the order the network runs; each call
appends the layer and returns the output shape for the next call.
"""

from __future__ import annotations

import dataclasses

from . import layers as L
from .layers import FeatureMap, Size2
from .model import Layer, Model



@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Width and depth of a BERT or GPT-style stack (4x wide MLPs unless `ffn` is given)."""
    hidden: int
    num_layers: int
    heads: int
    ffn: int | None = None

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden if self.ffn is None else self.ffn


class LayerRecorder:
    def __init__(self) -> None:
        self._layers: list[Layer] = []

    def add(self, layer: Layer) -> None:
        self._layers.append(layer)

    def conv(self, name: str, x: FeatureMap, out_channels: int, kernel: Size2,
             stride: Size2 = 1, padding: Size2 = 0, *, groups: int = 1,
             bias: bool = True) -> FeatureMap:
        layer, out = L.conv2d(name, x, out_channels, kernel, stride, padding,
                              groups=groups, bias=bias)
        self.add(layer)
        return out

    def bn(self, name: str, x: FeatureMap) -> FeatureMap:
        self.add(L.batchnorm2d(name, x))
        return x

    def conv_bn(self, prefix: str, x: FeatureMap, out_channels: int, kernel: Size2,
                stride: Size2 = 1, padding: Size2 = 0) -> FeatureMap:
        """Bias-free conv followed by BatchNorm, named ``prefix.conv``/``prefix.bn``
        (torchvision's BasicConv2d in GoogLeNet and Inception v3)."""
        x = self.conv(f"{prefix}.conv", x, out_channels, kernel, stride, padding, bias=False)
        return self.bn(f"{prefix}.bn", x)

    def linear(self, name: str, in_features: int, out_features: int, *,
               tokens: int = 1, bias: bool = True) -> int:
        self.add(L.linear(name, in_features, out_features, tokens=tokens, bias=bias))
        return out_features

    def build(self, name: str, input_bytes: int, seq_len: int | None = None) -> Model:
        names = [layer.name for layer in self._layers]
        if len(set(names)) != len(names):
            raise AssertionError(f"{name}: duplicate layer names")
        return Model(name, tuple(self._layers), input_bytes, seq_len)


def image_input_bytes(size: int) -> int:
    """One RGB float32 image, copied host to device."""
    return 3 * size * size * 4
