#!/usr/bin/python3
"""Builds models/tiny_cnn.onnx: a small image classifier in the shape of a
PyTorch export (Conv -> BatchNormalization -> Relu blocks, MaxPool, a
depthwise Conv with Clip (ReLU6), GlobalAveragePool, Flatten, Gemm, Softmax),
opset 13, with seeded random weights and non-trivial BatchNorm statistics so
that folding and quantization have real work to do.

Input  'image'  float32 [N, 3, 32, 32] (N symbolic: 'batch')
Output 'probs'  float32 [N, 10]

Needs Debian's python3-onnx and python3-numpy:
    apt-get install python3-onnx python3-numpy
    /usr/bin/python3 models/make_tiny_cnn.py models/tiny_cnn.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(20261122)
inits = []
nodes = []


def param(name, shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    s = scale if scale is not None else (2.0 / fan_in) ** 0.5
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
    return name


def bn(prefix, c, x, y):
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), prefix + ".weight"))
    inits.append(numpy_helper.from_array(rng.uniform(-0.2, 0.2, c).astype(np.float32), prefix + ".bias"))
    inits.append(numpy_helper.from_array(rng.uniform(-0.3, 0.3, c).astype(np.float32), prefix + ".running_mean"))
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 2.0, c).astype(np.float32), prefix + ".running_var"))
    nodes.append(helper.make_node(
        "BatchNormalization",
        [x, prefix + ".weight", prefix + ".bias", prefix + ".running_mean", prefix + ".running_var"],
        [y], name=prefix, epsilon=1e-5, momentum=0.9))


def conv(name, x, y, cin, cout, k, stride=1, group=1, bias=True):
    ins = [x, param(name + ".weight", [cout, cin // group, k, k])]
    if bias:
        ins.append(param(name + ".bias", [cout], 0.05))
    nodes.append(helper.make_node("Conv", ins, [y], name=name, kernel_shape=[k, k],
                                  pads=[k // 2] * 4, strides=[stride, stride], group=group))


conv("conv1", "image", "c1", 3, 16, 3, bias=False)
bn("bn1", 16, "c1", "b1")
nodes.append(helper.make_node("Relu", ["b1"], ["r1"], name="relu1"))
nodes.append(helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]))
conv("conv2", "p1", "c2", 16, 16, 3, group=16)  # depthwise
inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "clip.min"))
inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "clip.max"))
nodes.append(helper.make_node("Clip", ["c2", "clip.min", "clip.max"], ["r2"], name="relu6"))
conv("conv3", "r2", "c3", 16, 32, 1, bias=False)
bn("bn3", 32, "c3", "b3")
nodes.append(helper.make_node("Relu", ["b3"], ["r3"], name="relu3"))
nodes.append(helper.make_node("GlobalAveragePool", ["r3"], ["gap"], name="gap"))
nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
nodes.append(helper.make_node("Gemm", ["flat", param("fc.weight", [10, 32]), param("fc.bias", [10], 0.05)],
                              ["logits"], name="fc", transB=1))
nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1))

graph = helper.make_graph(
    nodes, "tiny_cnn",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
    inits)
model = helper.make_model(graph, producer_name="onnxq models/make_tiny_cnn.py",
                          opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 7
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1] if len(sys.argv) > 1 else "tiny_cnn.onnx")
