#!/usr/bin/python3
"""exec_make_mobilenet_v2.py - exports torchvision's MobileNetV2 to ONNX for the executor benchmark.

Random weights (weights=None: no download is possible here; speed does not
depend on the values), eval mode with constant folding, as a deployed model
is exported: BatchNormalization is folded into the convolutions, leaving
Conv (incl. 3x3 depthwise) + Clip (ReLU6), Add, GlobalAveragePool, Gemm.

usage: /usr/bin/python3 bench/exec_make_mobilenet_v2.py [OUT]
Default OUT: $OQ_CACHE/bench/mobilenet_v2.onnx ($OQ_CACHE defaults to <repo>/.cache).
Needs Debian's python3-torch and python3-torchvision.
"""
import os
import sys

import torch
import torchvision


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = os.environ.get("OQ_CACHE", os.path.join(root, ".cache"))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache, "bench", "mobilenet_v2.onnx")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None)
    model.eval()
    x = torch.randn(1, 3, 224, 224)
    tmp = out + ".tmp.export"
    torch.onnx.export(model, x, tmp, opset_version=13, do_constant_folding=True,
                      input_names=["input"], output_names=["logits"])
    os.replace(tmp, out)
    print(f"exec_make_mobilenet_v2: wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
