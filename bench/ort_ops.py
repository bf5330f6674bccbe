#!/usr/bin/env python3
"""ort_ops.py - op types of an ONNX model (e.g. ONNX Runtime's optimized graph, written with the
session option optimizedModelFilePath), counted.

usage: ort_ops.py [--brief] MODEL
  default: one "count op_type" line per op type (domain-qualified when not ai.onnx), most first;
  --brief: "QLinearConv/Conv/QuantizeLinear/DequantizeLinear" counts on one line, where Conv
  counts every float convolution ORT kept (Conv, FusedConv, NchwcConv).
"""
import collections
import sys

import onnx


def main():
    args = sys.argv[1:]
    brief = "--brief" in args
    args = [a for a in args if a != "--brief"]
    if len(args) != 1:
        sys.exit(__doc__)
    m = onnx.load(args[0], load_external_data=False)
    c = collections.Counter()
    for n in m.graph.node:
        c[n.op_type if n.domain in ("", "ai.onnx") else n.domain + "::" + n.op_type] += 1
    if brief:
        conv = sum(v for k, v in c.items() if k.split("::")[-1] in ("Conv", "FusedConv"))
        qlc = sum(v for k, v in c.items() if k.split("::")[-1] == "QLinearConv")
        q = sum(v for k, v in c.items() if k.split("::")[-1] == "QuantizeLinear")
        dq = sum(v for k, v in c.items() if k.split("::")[-1] == "DequantizeLinear")
        print("%d/%d/%d/%d" % (qlc, conv, q, dq))
        return
    for k, v in c.most_common():
        print("%5d %s" % (v, k))


if __name__ == "__main__":
    main()
