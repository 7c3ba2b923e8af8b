"""Parameter and FLOP counts of single layers, derived from their shapes.

Every helper returns a :class:`Layer`; the convolution also returns the shape
of its output so a network definition can thread shapes through its stages.
FLOP convention (see the package docstring): 2 per multiply-accumulate, 2 per
output element of a norm layer, 0 for embedding look-ups, biases ignored.
Activations: each layer's output per sample, 4 bytes (float32) per element.
"""

from __future__ import annotations

import dataclasses
import math

from .model import Layer

ACTIVATION_BYTES = 4  # float32

Size2 = int | tuple[int, int]


@dataclasses.dataclass(frozen=True)
class FeatureMap:
    """Shape of one sample's activation in a CNN (channels, height, width)."""

    channels: int
    height: int
    width: int

    @property
    def elements(self) -> int:
        return self.channels * self.height * self.width

    def with_channels(self, channels: int) -> "FeatureMap":
        return FeatureMap(channels, self.height, self.width)


def _pair(value: Size2) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else value


def _conv_extent(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _pool_extent(size: int, kernel: int, stride: int, padding: int, ceil_mode: bool) -> int:
    span = size + 2 * padding - kernel
    if not ceil_mode:
        return span // stride + 1
    out = math.ceil(span / stride) + 1
    # As in PyTorch: the last window must start inside the input or left padding.
    if (out - 1) * stride >= size + padding:
        out -= 1
    return out


def pool2d(x: FeatureMap, kernel: Size2, stride: Size2 | None = None,
           padding: Size2 = 0, ceil_mode: bool = False) -> FeatureMap:
    """Output shape of a max/avg pooling (no parameters, so no Layer)."""
    kh, kw = _pair(kernel)
    sh, sw = _pair(kernel if stride is None else stride)
    ph, pw = _pair(padding)
    return FeatureMap(x.channels,
                      _pool_extent(x.height, kh, sh, ph, ceil_mode),
                      _pool_extent(x.width, kw, sw, pw, ceil_mode))


def adaptive_pool2d(x: FeatureMap, size: Size2) -> FeatureMap:
    """Output shape of an adaptive pooling: the target size, whatever the input."""
    h, w = _pair(size)
    return FeatureMap(x.channels, h, w)


def conv2d(name: str, x: FeatureMap, out_channels: int, kernel: Size2,
           stride: Size2 = 1, padding: Size2 = 0, *, groups: int = 1,
           bias: bool = True) -> tuple[Layer, FeatureMap]:
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    if x.channels % groups or out_channels % groups:
        raise ValueError(f"{name}: channels not divisible by groups={groups}")
    out = FeatureMap(out_channels,
                     _conv_extent(x.height, kh, sh, ph),
                     _conv_extent(x.width, kw, sw, pw))
    weights = out_channels * (x.channels // groups) * kh * kw
    params = weights + (out_channels if bias else 0)
    # Each output element is a dot product over (in/groups)*kh*kw inputs.
    macs = out.height * out.width * weights
    return Layer(name, params, 2.0 * macs, ACTIVATION_BYTES * out.elements), out


def batchnorm2d(name: str, x: FeatureMap) -> Layer:
    # Trainable: per-channel scale and shift (running stats are buffers).
    return Layer(name, 2 * x.channels, 2.0 * x.elements, ACTIVATION_BYTES * x.elements)


def linear(name: str, in_features: int, out_features: int, *,
           tokens: int = 1, bias: bool = True) -> Layer:
    """A dense layer applied to ``tokens`` positions of one sample."""
    params = in_features * out_features + (out_features if bias else 0)
    return Layer(name, params, 2.0 * tokens * in_features * out_features, ACTIVATION_BYTES * tokens * out_features)


def layernorm(name: str, features: int, *, tokens: int = 1) -> Layer:
    return Layer(name, 2 * features, 2.0 * tokens * features, ACTIVATION_BYTES * tokens * features)


def embedding(name: str, num_embeddings: int, dim: int, *, tokens: int = 1) -> Layer:
    # A table look-up: parameters but no arithmetic.
    return Layer(name, num_embeddings * dim, 0.0, ACTIVATION_BYTES * tokens * dim)


def attention_scores(name: str, seq_len: int, hidden: int, heads: int) -> Layer:
    """Q K^T and attention-weights x V over all heads of one sample.

    Each is seq_len x seq_len x head_dim MACs per head, i.e. seq_len^2 * hidden
    MACs over all heads (whatever the head count); the full square is
    computed even for causal masks. Its outputs are the attention weights
    (heads x seq_len^2) and the weighted values (seq_len x hidden).
    """
    macs = 2 * seq_len * seq_len * hidden
    return Layer(name, 0, 2.0 * macs, ACTIVATION_BYTES * (heads * seq_len * seq_len + seq_len * hidden))
