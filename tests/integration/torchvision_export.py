#!/usr/bin/python3
"""torchvision_export.py - exports torchvision classifiers to ONNX for torchvision_ort.sh.

usage: /usr/bin/python3 torchvision_export.py OUTDIR MODEL...

Writes OUTDIR/<model>.onnx for every MODEL (resnet18, resnet50, mobilenet_v2,
mobilenet_v3_small, efficientnet_b0, squeezenet1_1, vit_b_16) that is not
there yet, and OUTDIR/input.npy when missing: one float32 [1, 3, 224, 224]
image normalised with the ImageNet mean/std. The image is a photo shipped by
Debian's python3-skimage (astronaut) when importable, else seeded random
pixels; the first line printed says which.

Models use weights=None (no download) with a fixed seed; BatchNorm running
statistics and affine parameters are randomised so that the exported
BatchNormalization nodes do real work, and vit_b_16's all-zero head is
re-initialised (normal, std 0.02). Export: opset 13, TrainingMode.PRESERVE on
an eval() model, no constant folding. Files are written through a temporary
name and renamed, so an interrupted run leaves no half model behind.
"""
import os
import sys

import numpy as np
import torch
import torchvision

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def make_input(path):
    """Writes the [1, 3, 224, 224] input to PATH; returns a description."""
    try:
        from skimage import data
        img = data.astronaut()  # 512 x 512 x 3 uint8
        what = 'skimage.data.astronaut (resized to 224x224)'
    except Exception:  # skimage missing, or its data files are
        img = np.random.default_rng(7).integers(0, 256, (224, 224, 3), dtype=np.uint8)
        what = 'seeded random pixels (no python3-skimage)'
    x = torch.from_numpy(np.ascontiguousarray(img[:, :, :3])).permute(2, 0, 1)[None].float() / 255.0
    if x.shape[2:] != (224, 224):
        x = torch.nn.functional.interpolate(x, size=(224, 224), mode='bilinear', align_corners=False,
                                            antialias=True).clamp(0.0, 1.0)
    x = (x - torch.from_numpy(MEAN)[None, :, None, None]) / torch.from_numpy(STD)[None, :, None, None]
    x = x.contiguous().numpy().astype(np.float32)
    tmp = path + '.tmp.npy'
    np.save(tmp, x)
    os.replace(tmp, path)
    return what


def build(name):
    torch.manual_seed(1234)
    model = getattr(torchvision.models, name)(weights=None)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.8, 1.2)
                m.bias.normal_(0.0, 0.1)
        if name == 'vit_b_16':
            torch.nn.init.normal_(model.heads.head.weight, std=0.02)
            torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    return model.eval()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    inp = os.path.join(out, 'input.npy')
    if not os.path.exists(inp):
        print('input: ' + make_input(inp))
    else:
        print('input: cached ' + inp)
    for name in sys.argv[2:]:
        f = os.path.join(out, name + '.onnx')
        if os.path.exists(f):
            continue
        model = build(name)
        x = torch.from_numpy(np.load(inp))
        tmp = f + '.tmp'
        torch.onnx.export(model, x, tmp, opset_version=13, training=torch.onnx.TrainingMode.PRESERVE,
                          do_constant_folding=False, input_names=['input'], output_names=['logits'])
        os.replace(tmp, f)
        print('exported ' + f)


if __name__ == '__main__':
    main()
