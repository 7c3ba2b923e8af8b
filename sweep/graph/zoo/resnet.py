"""Bottleneck ResNets (He et al. 2016) as in torchvision, i.e. ResNet v1.5:
the stride-2 of a downsampling block sits on the 3x3 conv, not the first 1x1."""

from __future__ import annotations

from .builder import LayerRecorder, image_input_bytes
from .layers import FeatureMap, adaptive_pool2d, pool2d

IMAGE_SIZE = 224
NUM_CLASSES = 1000
EXPANSION = 4  # a bottleneck's last 1x1 widens its channels four-fold

BLOCKS = {
    "resnet50": (3, 4, 6, 3),
    "resnet101": (3, 4, 23, 3),
    "resnet152": (3, 8, 36, 3),
}


def _bottleneck(r: LayerRecorder, prefix: str, x: FeatureMap, width: int,
                stride: int) -> FeatureMap:
    inp = x
    x = r.bn(f"{prefix}.bn1", r.conv(f"{prefix}.conv1", x, width, 1, bias=False))
    x = r.bn(f"{prefix}.bn2", r.conv(f"{prefix}.conv2", x, width, 3, stride, 1, bias=False))
    x = r.bn(f"{prefix}.bn3", r.conv(f"{prefix}.conv3", x, width * EXPANSION, 1, bias=False))
    # The shortcut needs a projection whenever the shape changes; it runs
    # after the main path in torchvision's forward.
    if stride != 1 or inp.channels != x.channels:
        s = r.conv(f"{prefix}.downsample.0", inp, x.channels, 1, stride, bias=False)
        r.bn(f"{prefix}.downsample.1", s)
    return x


def resnet(blocks: tuple[int, int, int, int]) -> LayerRecorder:
    r = LayerRecorder()
    x = FeatureMap(3, IMAGE_SIZE, IMAGE_SIZE)
    x = r.bn("bn1", r.conv("conv1", x, 64, 7, 2, 3, bias=False))
    x = pool2d(x, 3, 2, 1)
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(count):
            stride = 2 if (i == 0 and stage > 0) else 1
            x = _bottleneck(r, f"layer{stage + 1}.{i}", x, width, stride)
    x = adaptive_pool2d(x, 1)
    r.linear("fc", x.elements, NUM_CLASSES)
    return r


def build(name: str):
    return resnet(BLOCKS[name]).build(name, image_input_bytes(IMAGE_SIZE))
