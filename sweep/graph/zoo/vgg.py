"""VGG-16 (configuration "D" of Simonyan & Zisserman), without batch norm."""

from __future__ import annotations

from .builder import LayerRecorder, image_input_bytes
from .layers import FeatureMap, adaptive_pool2d, pool2d

IMAGE_SIZE = 224
NUM_CLASSES = 1000

# Output channels of each 3x3 conv; "M" is a 2x2 stride-2 max pool.
VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                512, 512, 512, "M", 512, 512, 512, "M")


def vgg(config) -> LayerRecorder:
    r = LayerRecorder()
    x = FeatureMap(3, IMAGE_SIZE, IMAGE_SIZE)
    index = 0  # torchvision's nn.Sequential index: conv and ReLU each take one
    for item in config:
        if item == "M":
            x = pool2d(x, 2, 2)
            index += 1
        else:
            x = r.conv(f"features.{index}", x, item, 3, padding=1)
            index += 2
    x = adaptive_pool2d(x, 7)
    f = r.linear("classifier.0", x.elements, 4096)
    f = r.linear("classifier.3", f, 4096)
    r.linear("classifier.6", f, NUM_CLASSES)
    return r


def build_vgg16():
    return vgg(VGG16_CONFIG).build("vgg16", image_input_bytes(IMAGE_SIZE))
