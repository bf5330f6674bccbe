"""control_flow_models.py - torch-scripted models whose networks sit inside ONNX control flow.

    /usr/bin/python3 control_flow_models.py OUTDIR

writes into OUTDIR (random weights, fixed seed):
  branch.onnx  inputs x float32[1, 3, 16, 16], flag float32[1]; a scripted `if flag > 0`
               becomes an ONNX If whose branches hold different Conv stacks (their weights are
               main-graph initializers the branches capture); a 1x1 Conv head follows the If
  loop.onnx    input x float32[T, 1, 8] (T symbolic); a scripted `for t in range(T)` becomes an
               ONNX Loop whose body runs Linear layers (MatMul / Gemm) and a Conv1d on frame t,
               carrying a state h and a running sum of the outputs
  scan.onnx    input x float32[T, 8] (T symbolic); an ONNX Scan (built with onnx.helper: torch
               exports no Scan) over the frames whose body holds its own MatMul weights
               (initializers of the body): h = tanh(x_t W + h R + b), outputs the last h and
               every frame's h
  lstm.onnx    input x float32[T, 1, 8] (T symbolic); torch.nn.LSTM(8, 16, bidirectional)
               (one ONNX LSTM, W [2, 64, 8], R [2, 64, 16] initializers) and a Linear head
  gru.onnx     the same with torch.nn.GRU (W [2, 48, 8], R [2, 48, 16])
  rnn.onnx     the same with torch.nn.RNN (tanh; W [2, 16, 8], R [2, 16, 16])
  lstm_loop.onnx  input x float32[T, 1, 8] (T symbolic); a scripted `for t in range(T)` runs
               torch.nn.LSTM(8, 16) on frame t with the carried (h, c) and sums a Linear head
               over the frames: the ONNX LSTM sits in the Loop body, and torch 1.13 builds its
               W, R and B there with Slice / Concat / Unsqueeze from main-graph Constants
               (gate reordering), not as initializers
and the samples in OUTDIR/<model>_{calib,test}/NNN/<input>.npy: branch samples take both
branches (flag +1 and -1 alternate); the other models' samples have 3 to 6 frames.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper


class Branch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.a2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.b1 = torch.nn.Conv2d(3, 8, 5, padding=2)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x, flag):
        if bool(flag[0] > 0):
            y = self.a2(torch.relu(self.a1(x)))
        else:
            y = torch.relu(self.b1(x))
        return self.head(y)


class Frames(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.rec = torch.nn.Linear(16, 16, bias=False)
        self.conv = torch.nn.Conv1d(1, 2, 3, padding=1)
        self.out = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = torch.zeros(1, 16)
        acc = torch.zeros(1, 8)
        for t in range(x.size(0)):
            h = torch.tanh(self.inp(x[t]) + self.rec(h))
            c = torch.relu(self.conv(h.unsqueeze(1))).reshape(1, 32)
            acc = acc + self.out(c)
        return acc


class Recurrent(torch.nn.Module):
    def __init__(self, cell=torch.nn.LSTM):
        super().__init__()
        self.rec = cell(8, 16, bidirectional=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.rec(x)
        return self.head(y)


class LstmFrames(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.zeros(1, 1, 16)
        c = torch.zeros(1, 1, 16)
        acc = torch.zeros(1, 4)
        for t in range(x.size(0)):
            y, (h, c) = self.lstm(x[t].unsqueeze(0), (h, c))
            acc = acc + self.head(y[0])
        return acc


def scan_model(path, rng):
    w = numpy_helper.from_array((rng.standard_normal((8, 16)) * 0.4).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.2).astype(np.float32), "R")
    b = numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b")
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "W"], ["xw"], name="xw"),
         helper.make_node("MatMul", ["h_in", "R"], ["hr"], name="hr"),
         helper.make_node("Add", ["xw", "hr"], ["s1"], name="add1"),
         helper.make_node("Add", ["s1", "b"], ["s2"], name="add2"),
         helper.make_node("Tanh", ["s2"], ["h_out"], name="tanh"),
         helper.make_node("Identity", ["h_out"], ["y_t"], name="out")],
        "scan_body",
        [helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [1, 16])],
        [w, r, b])
    g = helper.make_graph(
        [helper.make_node("Scan", ["h0", "x"], ["h", "ys"], name="scan", body=body,
                          num_scan_inputs=1)],
        "scan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, 8])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, ["T", 1, 16])],
        [numpy_helper.from_array(np.zeros((1, 16), np.float32), "h0")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def save(path, arr):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, arr)


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    rng_lstm = np.random.default_rng(2)  # its own stream: the other models' samples stay as they were
    b = torch.jit.script(Branch().eval())
    x = torch.randn(1, 3, 16, 16)
    torch.onnx.export(b, (x, torch.ones(1)), os.path.join(out, "branch.onnx"), opset_version=13,
                      input_names=["x", "flag"], output_names=["y"])
    f = torch.jit.script(Frames().eval())
    torch.onnx.export(f, (torch.randn(4, 1, 8),), os.path.join(out, "loop.onnx"), opset_version=13,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "T"}})
    scan_model(os.path.join(out, "scan.onnx"), rng)
    torch.onnx.export(Recurrent().eval(), (torch.randn(4, 1, 8),), os.path.join(out, "lstm.onnx"),
                      opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "T"}})
    # made after the models above, so their weights stay as they were
    rec = {"gru": Recurrent(torch.nn.GRU).eval(), "rnn": Recurrent(torch.nn.RNN).eval(),
           "lstm_loop": torch.jit.script(LstmFrames().eval())}
    for name, model in rec.items():
        torch.onnx.export(model, (torch.randn(4, 1, 8),), os.path.join(out, name + ".onnx"),
                          opset_version=13, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "T"}})
    rng_rec = {name: np.random.default_rng(3 + k) for k, name in enumerate(rec)}
    for kind, n in (("calib", 8), ("test", 6)):
        for i in range(n):
            d = os.path.join(out, "branch_%s" % kind, "%03d" % i)
            save(os.path.join(d, "x.npy"), rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
            save(os.path.join(d, "flag.npy"), np.array([1.0 if i % 2 == 0 else -1.0], np.float32))
            d = os.path.join(out, "loop_%s" % kind, "%03d" % i)
            t = 3 + i % 4
            save(os.path.join(d, "x.npy"), rng.standard_normal((t, 1, 8)).astype(np.float32))
            d = os.path.join(out, "scan_%s" % kind, "%03d" % i)
            save(os.path.join(d, "x.npy"), rng.standard_normal((t, 1, 8)).astype(np.float32))
            d = os.path.join(out, "lstm_%s" % kind, "%03d" % i)
            save(os.path.join(d, "x.npy"), rng_lstm.standard_normal((t, 1, 8)).astype(np.float32))
            for name, r in rng_rec.items():
                d = os.path.join(out, "%s_%s" % (name, kind), "%03d" % i)
                save(os.path.join(d, "x.npy"), r.standard_normal((t, 1, 8)).astype(np.float32))


if __name__ == "__main__":
    main()
