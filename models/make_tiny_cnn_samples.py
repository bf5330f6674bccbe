#!/usr/bin/python3
"""Writes the sample folders for models/tiny_cnn.onnx from real photos:
models/tiny_cnn_calib/NNN.npy (16 calibration samples) and
models/tiny_cnn_test/NNN.npy (4 held-out samples), each float32 [1, 3, 32, 32],
RGB scaled to [0, 1]. The crops come from different photos for the two sets.

Needs Debian's python3-skimage and python3-numpy:
    /usr/bin/python3 models/make_tiny_cnn_samples.py
"""
import os

import numpy as np
from skimage import data, transform

here = os.path.dirname(os.path.abspath(__file__))
calib_photos = ["astronaut", "chelsea", "coffee", "rocket"]
test_photos = ["cat", "immunohistochemistry"]


def crops(name, n, rng):
    img = getattr(data, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    img = img[..., :3].astype(np.float32) / 255.0
    h, w, _ = img.shape
    out = []
    for _ in range(n):
        s = int(rng.integers(min(h, w) // 4, min(h, w)))
        y = int(rng.integers(0, h - s + 1))
        x = int(rng.integers(0, w - s + 1))
        c = transform.resize(img[y:y + s, x:x + s], (32, 32), anti_aliasing=True)
        out.append(np.ascontiguousarray(c.transpose(2, 0, 1)[None].astype(np.float32)))
    return out


def write(folder, arrays):
    os.makedirs(folder, exist_ok=True)
    for i, a in enumerate(arrays):
        np.save(os.path.join(folder, "%03d.npy" % i), a)


rng = np.random.default_rng(20261122)
write(os.path.join(here, "tiny_cnn_calib"), [c for p in calib_photos for c in crops(p, 4, rng)])
write(os.path.join(here, "tiny_cnn_test"), [c for p in test_photos for c in crops(p, 2, rng)])
