#!/usr/bin/python3
"""Independent losslessness check: for every model given, `onnxq convert` it
and compare original and copy as parsed by the official ONNX Python package
(Debian's python3-onnx), after bringing tensors stored in typed fields to the
raw_data form that onnxq writes. Any other difference (a node, attribute,
doc string, metadata, value_info, function, unknown field...) fails.

usage: pyonnx_roundtrip.py ONNXQ MODEL...
"""
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import numpy_helper


def to_raw(t):
    if t.data_type == onnx.TensorProto.STRING or t.data_location == onnx.TensorProto.EXTERNAL:
        return
    if not (t.float_data or t.int32_data or t.int64_data or t.double_data or t.uint64_data):
        return
    raw = numpy_helper.from_array(numpy_helper.to_array(t)).raw_data
    for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        t.ClearField(f)
    t.raw_data = raw


def walk_graph(g):
    for t in g.initializer:
        to_raw(t)
    for s in g.sparse_initializer:
        to_raw(s.values)
        to_raw(s.indices)
    for n in g.node:
        for a in n.attribute:
            if a.HasField("t"):
                to_raw(a.t)
            for t in a.tensors:
                to_raw(t)
            if a.HasField("g"):
                walk_graph(a.g)
            for sub in a.graphs:
                walk_graph(sub)


def canon(path):
    m = onnx.load(path, load_external_data=False)
    walk_graph(m.graph)
    return m.SerializeToString(deterministic=True)


def main():
    onnxq, models = sys.argv[1], sys.argv[2:]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "copy.onnx")
        for model in models:
            r = subprocess.run([onnxq, "convert", model, "-o", out], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {model}: convert exit {r.returncode}: {r.stderr.strip()}")
                failed += 1
                continue
            try:
                same = canon(model) == canon(out)
            except Exception as e:  # the copy must parse whenever the original does
                print(f"FAIL {model}: {e}")
                failed += 1
                continue
            if same:
                passed += 1
            else:
                print(f"FAIL {model}: differs from the original beyond raw_data normalisation")
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
