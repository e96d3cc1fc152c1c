"""Generated images of shapes on noisy backgrounds, with semantic and instance masks, and a tiny real CNN."""

from __future__ import annotations

import numpy as np

BACKGROUND, SQUARE, DISK = 0, 1, 2
#: Squares are bright and flat; disks are dimmer and striped, so local features tell them apart.
CLASS_METADATA = {BACKGROUND: {"background": True, "is_thing": False}, SQUARE: {"background": False, "is_thing": True},
                  DISK: {"background": False, "is_thing": True}}


def shape_images(n: int = 24, size: int = 16, seed: int = 0):
    """``(images (n, 1, size, size), semantic masks, instance masks, image label)``; each image holds one square
    and one disk (image label: which of the two is larger)."""
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, 0.1, size=(n, 1, size, size)).astype(np.float32)
    semantic = np.zeros((n, size, size), dtype=np.int64)
    instance = np.zeros((n, size, size), dtype=np.int64)
    larger = np.empty(n, dtype=object)
    yy, xx = np.mgrid[0:size, 0:size]
    for i in range(n):
        side = int(rng.integers(4, 7))
        top, left = int(rng.integers(0, size // 2 - 2)), int(rng.integers(0, size - side))
        radius = float(rng.uniform(2.5, 3.5))
        cy, cx = float(rng.uniform(size / 2 + radius, size - radius)), float(rng.uniform(radius, size - radius))
        disk = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius ** 2
        square = np.zeros_like(disk)
        square[top:top + side, left:left + side] = True
        square &= ~disk
        images[i, 0][square] += 1.0
        images[i, 0][disk] += 0.5 + 0.4 * (xx[disk] % 2)
        semantic[i][square], semantic[i][disk] = SQUARE, DISK
        instance[i][square], instance[i][disk] = 1, 2
        larger[i] = "square" if square.sum() > disk.sum() else "disk"
    return images, semantic, instance, larger


def tiny_cnn(pooled: bool = False):
    """A small seeded convolutional network: ``(N, 1, H, W) -> (N, 8, H/2, W/2)`` (or pooled to ``(N, 8)``)."""
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
              torch.nn.ReLU(), torch.nn.AvgPool2d(2)]
    if pooled:
        layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
    return torch.nn.Sequential(*layers).eval()
