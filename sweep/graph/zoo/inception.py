"""Inception v3 (Szegedy et al. 2016) as in torchvision, at 299x299, including
the auxiliary classifier (AuxLogits), which is trained and so counted here.

Every conv is torchvision's BasicConv2d: bias-free conv + BatchNorm.
"""

from __future__ import annotations

from .builder import LayerRecorder, image_input_bytes
from .layers import FeatureMap, adaptive_pool2d, pool2d

IMAGE_SIZE = 299
NUM_CLASSES = 1000


def _concat(*branches: FeatureMap) -> FeatureMap:
    assert len({(b.height, b.width) for b in branches}) == 1
    return branches[0].with_channels(sum(b.channels for b in branches))


def _block_a(r: LayerRecorder, p: str, x: FeatureMap, pool_features: int) -> FeatureMap:
    b1 = r.conv_bn(f"{p}.branch1x1", x, 64, 1)
    b5 = r.conv_bn(f"{p}.branch5x5_1", x, 48, 1)
    b5 = r.conv_bn(f"{p}.branch5x5_2", b5, 64, 5, padding=2)
    b3 = r.conv_bn(f"{p}.branch3x3dbl_1", x, 64, 1)
    b3 = r.conv_bn(f"{p}.branch3x3dbl_2", b3, 96, 3, padding=1)
    b3 = r.conv_bn(f"{p}.branch3x3dbl_3", b3, 96, 3, padding=1)
    bp = r.conv_bn(f"{p}.branch_pool", pool2d(x, 3, 1, 1), pool_features, 1)
    return _concat(b1, b5, b3, bp)


def _block_b(r: LayerRecorder, p: str, x: FeatureMap) -> FeatureMap:
    """Grid reduction 35 -> 17."""
    b3 = r.conv_bn(f"{p}.branch3x3", x, 384, 3, stride=2)
    bd = r.conv_bn(f"{p}.branch3x3dbl_1", x, 64, 1)
    bd = r.conv_bn(f"{p}.branch3x3dbl_2", bd, 96, 3, padding=1)
    bd = r.conv_bn(f"{p}.branch3x3dbl_3", bd, 96, 3, stride=2)
    return _concat(b3, bd, pool2d(x, 3, 2))


def _block_c(r: LayerRecorder, p: str, x: FeatureMap, c7: int) -> FeatureMap:
    """Factorised 7x7 convolutions as 1x7 and 7x1 pairs."""
    b1 = r.conv_bn(f"{p}.branch1x1", x, 192, 1)
    b7 = r.conv_bn(f"{p}.branch7x7_1", x, c7, 1)
    b7 = r.conv_bn(f"{p}.branch7x7_2", b7, c7, (1, 7), padding=(0, 3))
    b7 = r.conv_bn(f"{p}.branch7x7_3", b7, 192, (7, 1), padding=(3, 0))
    bd = r.conv_bn(f"{p}.branch7x7dbl_1", x, c7, 1)
    bd = r.conv_bn(f"{p}.branch7x7dbl_2", bd, c7, (7, 1), padding=(3, 0))
    bd = r.conv_bn(f"{p}.branch7x7dbl_3", bd, c7, (1, 7), padding=(0, 3))
    bd = r.conv_bn(f"{p}.branch7x7dbl_4", bd, c7, (7, 1), padding=(3, 0))
    bd = r.conv_bn(f"{p}.branch7x7dbl_5", bd, 192, (1, 7), padding=(0, 3))
    bp = r.conv_bn(f"{p}.branch_pool", pool2d(x, 3, 1, 1), 192, 1)
    return _concat(b1, b7, bd, bp)


def _block_d(r: LayerRecorder, p: str, x: FeatureMap) -> FeatureMap:
    """Grid reduction 17 -> 8."""
    b3 = r.conv_bn(f"{p}.branch3x3_1", x, 192, 1)
    b3 = r.conv_bn(f"{p}.branch3x3_2", b3, 320, 3, stride=2)
    b7 = r.conv_bn(f"{p}.branch7x7x3_1", x, 192, 1)
    b7 = r.conv_bn(f"{p}.branch7x7x3_2", b7, 192, (1, 7), padding=(0, 3))
    b7 = r.conv_bn(f"{p}.branch7x7x3_3", b7, 192, (7, 1), padding=(3, 0))
    b7 = r.conv_bn(f"{p}.branch7x7x3_4", b7, 192, 3, stride=2)
    return _concat(b3, b7, pool2d(x, 3, 2))


def _block_e(r: LayerRecorder, p: str, x: FeatureMap) -> FeatureMap:
    """Expanded filter bank: 1x3 and 3x1 convs run side by side, then concatenate."""
    b1 = r.conv_bn(f"{p}.branch1x1", x, 320, 1)
    b3 = r.conv_bn(f"{p}.branch3x3_1", x, 384, 1)
    b3a = r.conv_bn(f"{p}.branch3x3_2a", b3, 384, (1, 3), padding=(0, 1))
    b3b = r.conv_bn(f"{p}.branch3x3_2b", b3, 384, (3, 1), padding=(1, 0))
    bd = r.conv_bn(f"{p}.branch3x3dbl_1", x, 448, 1)
    bd = r.conv_bn(f"{p}.branch3x3dbl_2", bd, 384, 3, padding=1)
    bda = r.conv_bn(f"{p}.branch3x3dbl_3a", bd, 384, (1, 3), padding=(0, 1))
    bdb = r.conv_bn(f"{p}.branch3x3dbl_3b", bd, 384, (3, 1), padding=(1, 0))
    bp = r.conv_bn(f"{p}.branch_pool", pool2d(x, 3, 1, 1), 192, 1)
    return _concat(b1, b3a, b3b, bda, bdb, bp)


def _aux(r: LayerRecorder, p: str, x: FeatureMap) -> None:
    x = pool2d(x, 5, 3)  # 17 -> 5
    x = r.conv_bn(f"{p}.conv0", x, 128, 1)
    x = r.conv_bn(f"{p}.conv1", x, 768, 5)  # 5 -> 1
    x = adaptive_pool2d(x, 1)
    r.linear(f"{p}.fc", x.elements, NUM_CLASSES)


def inception_v3() -> LayerRecorder:
    r = LayerRecorder()
    x = FeatureMap(3, IMAGE_SIZE, IMAGE_SIZE)
    x = r.conv_bn("Conv2d_1a_3x3", x, 32, 3, stride=2)
    x = r.conv_bn("Conv2d_2a_3x3", x, 32, 3)
    x = r.conv_bn("Conv2d_2b_3x3", x, 64, 3, padding=1)
    x = pool2d(x, 3, 2)
    x = r.conv_bn("Conv2d_3b_1x1", x, 80, 1)
    x = r.conv_bn("Conv2d_4a_3x3", x, 192, 3)
    x = pool2d(x, 3, 2)
    x = _block_a(r, "Mixed_5b", x, 32)
    x = _block_a(r, "Mixed_5c", x, 64)
    x = _block_a(r, "Mixed_5d", x, 64)
    x = _block_b(r, "Mixed_6a", x)
    x = _block_c(r, "Mixed_6b", x, 128)
    x = _block_c(r, "Mixed_6c", x, 160)
    x = _block_c(r, "Mixed_6d", x, 160)
    x = _block_c(r, "Mixed_6e", x, 192)
    _aux(r, "AuxLogits", x)
    x = _block_d(r, "Mixed_7a", x)
    x = _block_e(r, "Mixed_7b", x)
    x = _block_e(r, "Mixed_7c", x)
    x = adaptive_pool2d(x, 1)
    r.linear("fc", x.elements, NUM_CLASSES)
    return r


def build():
    return inception_v3().build("inception_v3", image_input_bytes(IMAGE_SIZE))
