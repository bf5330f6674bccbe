#!/usr/bin/python3
"""make_resnet50.py - exports torchvision's ResNet-50 to ONNX for the benchmark.

A real ~100 MB model with the layout exporters produce: 320 initializers
of very different sizes (conv weights up to 9 MB, BatchNorm vectors of a
few KB), node attributes, value names from PyTorch. Weights are random
(weights=None: no download is possible here) and the BatchNorm running
statistics are randomised with a fixed seed so that they are not the
trivial 0/1 defaults; TrainingMode.PRESERVE with do_constant_folding=False
keeps the BatchNormalization nodes and their four initializers in the
graph instead of folding them into the convolutions.

usage: /usr/bin/python3 bench/make_resnet50.py [OUT]
Default OUT: $OQ_CACHE/bench/resnet50.onnx ($OQ_CACHE defaults to <repo>/.cache).
Needs Debian's python3-torch and python3-torchvision.
"""
import os
import sys

import torch
import torchvision


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = os.environ.get("OQ_CACHE", os.path.join(root, ".cache"))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache, "bench", "resnet50.onnx")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None)
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) * 0.5 + 0.75)
    model.eval()
    x = torch.randn(1, 3, 224, 224, generator=gen)
    tmp = out + ".tmp.export"
    torch.onnx.export(model, x, tmp, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False,
                      input_names=["input"], output_names=["logits"])
    os.replace(tmp, out)
    print(f"make_resnet50: wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
