"""AlexNet in torchvision's single-tower form (Krizhevsky 2014 "one weird trick")."""

from __future__ import annotations

from .builder import LayerRecorder, image_input_bytes
from .layers import FeatureMap, adaptive_pool2d, pool2d

IMAGE_SIZE = 224
NUM_CLASSES = 1000


def alexnet() -> LayerRecorder:
    r = LayerRecorder()
    x = FeatureMap(3, IMAGE_SIZE, IMAGE_SIZE)
    # Indices follow torchvision's nn.Sequential, where ReLU/pool take slots too.
    x = r.conv("features.0", x, 64, 11, stride=4, padding=2)
    x = pool2d(x, 3, 2)
    x = r.conv("features.3", x, 192, 5, padding=2)
    x = pool2d(x, 3, 2)
    x = r.conv("features.6", x, 384, 3, padding=1)
    x = r.conv("features.8", x, 256, 3, padding=1)
    x = r.conv("features.10", x, 256, 3, padding=1)
    x = pool2d(x, 3, 2)
    x = adaptive_pool2d(x, 6)
    f = r.linear("classifier.1", x.elements, 4096)
    f = r.linear("classifier.4", f, 4096)
    r.linear("classifier.6", f, NUM_CLASSES)
    return r


def build():
    return alexnet().build("alexnet", image_input_bytes(IMAGE_SIZE))
