#!/usr/bin/env python3
"""make_act_cnn.py - a small CNN with the activation units runtime-aware placement is about,
for tests/integration/ort_placement.sh: Conv -> decomposed HardSwish (Add 3, Clip 0..6, Div 6,
Mul), Conv -> SiLU (Sigmoid, Mul), Conv -> HardSigmoid gate, a residual Add, global pooling and
a Gemm. Channels 64 at 32x32 so that ONNX Runtime's integer kernels beat its float ones.
Weights from a seeded generator; calibration and held-out samples [1, 3, 32, 32] in DIR/calib and
DIR/held (8 and 4 .npy files).

Also chain_cnn.onnx (same input, same samples): four Conv -> SiLU units in series, 64 channels,
no biases anywhere, global pooling and a Gemm: every value between units lies on the one path, so
an error that wipes out one of them wipes out the output whatever happens elsewhere.

usage: make_act_cnn.py OUT_DIR     writes OUT_DIR/act_cnn.onnx, OUT_DIR/chain_cnn.onnx and the
                                   sample folders
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(20240519)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def conv(name, x, cin, cout, k, group=1, stride=1, bias=0.1):
        w = rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * np.sqrt(2.0 / (cin // group * k * k))
        b = rng.standard_normal(cout).astype(np.float32) * bias
        nodes.append(helper.make_node("Conv", [x, const(name + ".w", w), const(name + ".b", b)], [name], name=name,
                                      kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride], group=group))
        return name

    def hswish(x):
        a, c, h, y = x + ".a", x + ".c", x + ".h", x + ".hs"
        nodes.append(helper.make_node("Add", [x, const(x + ".3", 3.0)], [a], name=a))
        nodes.append(helper.make_node("Clip", [a, const(x + ".0", 0.0), const(x + ".6", 6.0)], [c], name=c))
        nodes.append(helper.make_node("Div", [c, const(x + ".d6", 6.0)], [h], name=h))
        nodes.append(helper.make_node("Mul", [x, h], [y], name=y))
        return y

    def silu(x):
        s, y = x + ".sg", x + ".silu"
        nodes.append(helper.make_node("Sigmoid", [x], [s], name=s))
        nodes.append(helper.make_node("Mul", [x, s], [y], name=y))
        return y

    t = hswish(conv("c1", "x", 3, 64, 3))
    t = silu(conv("c2", t, 64, 64, 3))
    r = hswish(conv("c3", t, 64, 64, 1))
    nodes.append(helper.make_node("Add", [t, r], ["res"], name="res"))
    g = conv("c4", "res", 64, 64, 3, stride=2)
    nodes.append(helper.make_node("HardSigmoid", [g], ["gate"], name="gate", alpha=1.0 / 6, beta=0.5))
    nodes.append(helper.make_node("Mul", [g, "gate"], ["gated"], name="gated"))
    nodes.append(helper.make_node("GlobalAveragePool", ["gated"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    fw = rng.standard_normal((10, 64)).astype(np.float32) * 0.1
    nodes.append(helper.make_node("Gemm", ["flat", const("fc.w", fw), const("fc.b", np.zeros(10))], ["logits"],
                                  name="fc", transB=1))
    graph = helper.make_graph(nodes, "act_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_act_cnn.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(out, exist_ok=True)
    onnx.save(model, os.path.join(out, "act_cnn.onnx"))

    for d, n in (("calib", 8), ("held", 4)):
        os.makedirs(os.path.join(out, d), exist_ok=True)
        for i in range(n):
            np.save(os.path.join(out, d, "%03d.npy" % i), rng.standard_normal((1, 3, 32, 32)).astype(np.float32))

    inits.clear()
    nodes.clear()
    t = "x"
    for i, cin in enumerate((3, 64, 64, 64)):
        t = silu(conv("c%d" % (i + 1), t, cin, 64, 3, bias=0))
    nodes.append(helper.make_node("GlobalAveragePool", [t], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    nodes.append(helper.make_node("Gemm", ["flat", const("fc.w", fw), const("fc.b", np.zeros(10))], ["logits"],
                                  name="fc", transB=1))
    graph = helper.make_graph(nodes, "chain_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    chain = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_act_cnn.py")
    chain.ir_version = 8
    onnx.checker.check_model(chain)
    onnx.save(chain, os.path.join(out, "chain_cnn.onnx"))


if __name__ == "__main__":
    main()
