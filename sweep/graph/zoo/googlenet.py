"""GoogLeNet (Szegedy et al. 2015) as in torchvision, with batch norm after
every conv and both auxiliary classifiers, which are trained (they produce
gradients) and so are counted here.

torchvision's "5x5" branch really uses a 3x3 kernel; we follow torchvision
so that the parameter count matches it.
"""

from __future__ import annotations

from .builder import LayerRecorder, image_input_bytes
from .layers import FeatureMap, adaptive_pool2d, pool2d

IMAGE_SIZE = 224
NUM_CLASSES = 1000

# name -> (1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection)
INCEPTION = {
    "inception3a": (64, 96, 128, 16, 32, 32),
    "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64),
    "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64),
    "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128),
    "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}


def _inception(r: LayerRecorder, p: str, x: FeatureMap) -> FeatureMap:
    c1, c3r, c3, c5r, c5, cp = INCEPTION[p]
    b1 = r.conv_bn(f"{p}.branch1", x, c1, 1)
    b2 = r.conv_bn(f"{p}.branch2.1", r.conv_bn(f"{p}.branch2.0", x, c3r, 1), c3, 3, 1, 1)
    b3 = r.conv_bn(f"{p}.branch3.1", r.conv_bn(f"{p}.branch3.0", x, c5r, 1), c5, 3, 1, 1)
    pooled = pool2d(x, 3, 1, 1, ceil_mode=True)
    b4 = r.conv_bn(f"{p}.branch4.1", pooled, cp, 1)
    assert b1.height == b2.height == b3.height == b4.height
    return b1.with_channels(b1.channels + b2.channels + b3.channels + b4.channels)


def _aux(r: LayerRecorder, p: str, x: FeatureMap) -> None:
    x = adaptive_pool2d(x, 4)
    x = r.conv_bn(f"{p}.conv", x, 128, 1)
    f = r.linear(f"{p}.fc1", x.elements, 1024)
    r.linear(f"{p}.fc2", f, NUM_CLASSES)


def googlenet() -> LayerRecorder:
    r = LayerRecorder()
    x = FeatureMap(3, IMAGE_SIZE, IMAGE_SIZE)
    x = r.conv_bn("conv1", x, 64, 7, 2, 3)
    x = pool2d(x, 3, 2, ceil_mode=True)
    x = r.conv_bn("conv2", x, 64, 1)
    x = r.conv_bn("conv3", x, 192, 3, 1, 1)
    x = pool2d(x, 3, 2, ceil_mode=True)
    x = _inception(r, "inception3a", x)
    x = _inception(r, "inception3b", x)
    x = pool2d(x, 3, 2, ceil_mode=True)
    x = _inception(r, "inception4a", x)
    _aux(r, "aux1", x)  # forward order: the aux heads branch off mid-network
    x = _inception(r, "inception4b", x)
    x = _inception(r, "inception4c", x)
    x = _inception(r, "inception4d", x)
    _aux(r, "aux2", x)
    x = _inception(r, "inception4e", x)
    x = pool2d(x, 2, 2, ceil_mode=True)
    x = _inception(r, "inception5a", x)
    x = _inception(r, "inception5b", x)
    x = adaptive_pool2d(x, 1)
    r.linear("fc", x.elements, NUM_CLASSES)
    return r


def build():
    return googlenet().build("googlenet", image_input_bytes(IMAGE_SIZE))
