#!/usr/bin/python3
"""exec_make_unet.py - exports a U2-Net-style segmentation U-Net to ONNX for the executor benchmark.

The network follows U2-Net's layout (Qin et al. 2020; ISNet reuses its blocks): residual U-blocks
(RSU-L: a 3x3 input conv, an encoder of 3x3 convs with 2x2 max pooling, a dilation-2 3x3 conv at the
bottom, a decoder of 3x3 convs over Concat(skip, bilinear upsample), added to the input conv), six
stages down to 1/32 of the input, RSU-4F stages with dilations 2, 4 and 8 at the low resolutions, and
side outputs upsampled bilinearly to the input size, fused by a 1x1 conv, each through a Sigmoid.
Convs carry BatchNormalization + ReLU, folded by the export (eval mode, constant folding). Upsampling
is F.interpolate(mode='bilinear', align_corners=False): ONNX Resize, linear, half_pixel-style.
Random weights (speed does not depend on the values).

usage: /usr/bin/python3 bench/exec_make_unet.py [OUT] [SIZE] [MID] [OUTCH]
Default OUT: $OQ_CACHE/bench/unet.onnx ($OQ_CACHE defaults to <repo>/.cache); SIZE 320 (input
[1,3,SIZE,SIZE]); MID 16 and OUTCH 64: the channels of U2-Net's small variant (U2-NetP).
Needs Debian's python3-torch.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBnRelu(nn.Module):
    def __init__(self, cin, cout, dil=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=dil, dilation=dil)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def up_like(x, ref):
    return F.interpolate(x, size=ref.shape[2:], mode="bilinear", align_corners=False)


class RSU(nn.Module):
    """RSU-L: `height` levels with pooling, a dilation-2 conv at the bottom."""

    def __init__(self, height, cin, mid, cout):
        super().__init__()
        self.cin = ConvBnRelu(cin, cout)
        self.enc = nn.ModuleList([ConvBnRelu(cout, mid)] + [ConvBnRelu(mid, mid) for _ in range(height - 2)])
        self.bottom = ConvBnRelu(mid, mid, dil=2)
        self.dec = nn.ModuleList([ConvBnRelu(2 * mid, mid) for _ in range(height - 2)] + [ConvBnRelu(2 * mid, cout)])

    def forward(self, x):
        hxin = self.cin(x)
        skips = []
        h = hxin
        for i, conv in enumerate(self.enc):
            if i > 0:
                h = F.max_pool2d(h, 2, stride=2, ceil_mode=True)
            h = conv(h)
            skips.append(h)
        h = self.bottom(h)
        for i, conv in enumerate(self.dec):
            skip = skips[-1 - i]
            if h.shape[2:] != skip.shape[2:]:
                h = up_like(h, skip)
            h = conv(torch.cat((h, skip), 1))
        return h + hxin


class RSUF(nn.Module):
    """RSU-4F: no pooling, dilations 1, 2, 4, 8 instead."""

    def __init__(self, cin, mid, cout):
        super().__init__()
        self.cin = ConvBnRelu(cin, cout)
        self.e1 = ConvBnRelu(cout, mid, 1)
        self.e2 = ConvBnRelu(mid, mid, 2)
        self.e3 = ConvBnRelu(mid, mid, 4)
        self.e4 = ConvBnRelu(mid, mid, 8)
        self.d3 = ConvBnRelu(2 * mid, mid, 4)
        self.d2 = ConvBnRelu(2 * mid, mid, 2)
        self.d1 = ConvBnRelu(2 * mid, cout, 1)

    def forward(self, x):
        hxin = self.cin(x)
        h1 = self.e1(hxin)
        h2 = self.e2(h1)
        h3 = self.e3(h2)
        h4 = self.e4(h3)
        d3 = self.d3(torch.cat((h4, h3), 1))
        d2 = self.d2(torch.cat((d3, h2), 1))
        d1 = self.d1(torch.cat((d2, h1), 1))
        return d1 + hxin


class U2Net(nn.Module):
    def __init__(self, mid, out):
        super().__init__()
        self.s1 = RSU(7, 3, mid, out)
        self.s2 = RSU(6, out, mid, out)
        self.s3 = RSU(5, out, mid, out)
        self.s4 = RSU(4, out, mid, out)
        self.s5 = RSUF(out, mid, out)
        self.s6 = RSUF(out, mid, out)
        self.s5d = RSUF(2 * out, mid, out)
        self.s4d = RSU(4, 2 * out, mid, out)
        self.s3d = RSU(5, 2 * out, mid, out)
        self.s2d = RSU(6, 2 * out, mid, out)
        self.s1d = RSU(7, 2 * out, mid, out)
        self.side = nn.ModuleList([nn.Conv2d(out, 1, 3, padding=1) for _ in range(6)])
        self.fuse = nn.Conv2d(6, 1, 1)

    def forward(self, x):
        pool = lambda t: F.max_pool2d(t, 2, stride=2, ceil_mode=True)
        h1 = self.s1(x)
        h2 = self.s2(pool(h1))
        h3 = self.s3(pool(h2))
        h4 = self.s4(pool(h3))
        h5 = self.s5(pool(h4))
        h6 = self.s6(pool(h5))
        d5 = self.s5d(torch.cat((up_like(h6, h5), h5), 1))
        d4 = self.s4d(torch.cat((up_like(d5, h4), h4), 1))
        d3 = self.s3d(torch.cat((up_like(d4, h3), h3), 1))
        d2 = self.s2d(torch.cat((up_like(d3, h2), h2), 1))
        d1 = self.s1d(torch.cat((up_like(d2, h1), h1), 1))
        sides = [self.side[0](d1)]
        for conv, d in zip(self.side[1:], (d2, d3, d4, d5, h6)):
            sides.append(up_like(conv(d), d1))
        fused = self.fuse(torch.cat(sides, 1))
        return tuple(torch.sigmoid(s) for s in [fused] + sides)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = os.environ.get("OQ_CACHE", os.path.join(root, ".cache"))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache, "bench", "unet.onnx")
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 320
    mid = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    outch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.manual_seed(0)
    model = U2Net(mid, outch)
    # non-trivial BatchNormalization statistics, so the folded weights are not plain init values
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    model.eval()
    x = torch.rand(1, 3, size, size)
    tmp = out + ".tmp.export"
    names = ["d0"] + [f"d{i}" for i in range(1, 7)]
    torch.onnx.export(model, x, tmp, opset_version=13, do_constant_folding=True,
                      input_names=["input"], output_names=names)
    os.replace(tmp, out)
    print(f"exec_make_unet: wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
