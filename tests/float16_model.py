#!/usr/bin/python3
"""float16_model.py - a float32 ONNX model as float16 (or bfloat16) converters leave it.

    /usr/bin/python3 tests/float16_model.py IN.onnx OUT.onnx [--dtype float16|bfloat16] [--sorted] [--io16]

Does what onnxconverter-common's convert_float_to_float16(keep_io_types=True)
does to a model, written here with the onnx package only:
  - types from onnx shape inference; every float32 initializer, Constant
    tensor, value type (inputs, outputs, value_info, subgraphs) becomes
    float16, with the converter's clamping (|x| below 1e-7 -> 1e-7, above 1e4
    -> 1e4, zero/Inf/NaN kept);
  - Cast(to=float) inside becomes Cast(to=float16);
  - graph inputs and outputs stay float32: a Cast at each boundary
    (graph_input_cast_K / graph_output_cast_K);
  - ops the converter blocks (Resize, Upsample, Range, TopK, NonMaxSuppression,
    RoiAlign, CumSum, Min, Max) keep float32, with Casts around their
    float16 inputs and outputs;
  - every added Cast goes at the END of the node list, so the graph is not
    topologically sorted (unless --sorted), as the converter leaves it.
--dtype bfloat16 makes the same conversion to bfloat16 (no clamping; the
values are rounded to nearest even). --io16 converts the graph inputs and
outputs too, with no boundary Casts (the converter's default,
keep_io_types=False).
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCKED = {"Resize", "Upsample", "Range", "TopK", "NonMaxSuppression", "RoiAlign", "CumSum", "Min", "Max"}


def to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bits, round to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def low_tensor(t, dtype):
    """A float32 TensorProto converted to dtype (float16 with the converter's clamping)."""
    a = numpy_helper.to_array(t).astype(np.float32)
    if dtype == TensorProto.FLOAT16:
        mag = np.abs(a)
        small = (mag > 0) & (mag < 1e-7)
        big = np.isfinite(a) & (mag > 1e4)
        a = np.where(small, np.sign(a) * np.float32(1e-7), a)
        a = np.where(big, np.sign(a) * np.float32(1e4), a)
        n = numpy_helper.from_array(a.astype(np.float16), t.name)
    else:
        n = helper.make_tensor(t.name, TensorProto.BFLOAT16, a.shape, to_bf16_bits(a).tobytes(), raw=True)
    n.doc_string = t.doc_string
    return n


def float_type(vi):
    return vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT


def convert_graph(g, dtype, low_names, blocked, top):
    """Converts graph g in place; low_names collects the names that hold dtype values."""
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(low_tensor(t, dtype))
            low_names.add(t.name)
    keep = set()
    if top:
        keep = {v.name for v in list(g.input) + list(g.output) if float_type(v)}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if float_type(vi) and vi.name not in keep:
            vi.type.tensor_type.elem_type = dtype
            low_names.add(vi.name)
    for n in g.node:
        if n.op_type in BLOCKED:
            blocked.append((g, n))
            continue
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = dtype
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(low_tensor(a.t, dtype))
            for k, t in enumerate(a.tensors):
                if t.data_type == TensorProto.FLOAT:
                    a.tensors[k].CopyFrom(low_tensor(t, dtype))
            if a.type == onnx.AttributeProto.GRAPH:
                convert_graph(a.g, dtype, low_names, blocked, False)
            for sg in a.graphs:
                convert_graph(sg, dtype, low_names, blocked, False)


def convert(m, dtype, sort, io16=False):
    m = onnx.shape_inference.infer_shapes(m)
    g = m.graph
    appended = []
    rename = {}
    if io16:
        low_names = set()
        blocked = []
        convert_graph(g, dtype, low_names, blocked, False)
        cast_blocked(blocked, low_names, dtype)
        if sort:
            onnx_sort(g)
        return m
    for k, vi in enumerate(g.input):
        if float_type(vi) and vi.name not in {t.name for t in g.initializer}:
            rename[vi.name] = "graph_input_cast_%d" % k
            appended.append(helper.make_node("Cast", [vi.name], [rename[vi.name]], to=dtype,
                                             name="graph_input_cast%d" % k))
    out_rename = {}
    for k, vi in enumerate(g.output):
        if float_type(vi):
            out_rename[vi.name] = "graph_output_cast_%d" % k
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
            elif x in out_rename:
                n.input[i] = out_rename[x]
        for i, y in enumerate(n.output):
            if y in out_rename:
                n.output[i] = out_rename[y]
    for k, vi in enumerate(g.output):
        if vi.name in out_rename:
            appended.append(helper.make_node("Cast", [out_rename[vi.name]], [vi.name], to=TensorProto.FLOAT,
                                             name="graph_output_cast%d" % k))
    low_names = set(rename.values()) | set(out_rename.values())
    blocked = []
    convert_graph(g, dtype, low_names, blocked, True)
    cast_blocked(blocked, low_names, dtype)
    g.node.extend(appended)
    if sort:
        onnx_sort(g)
    return m


def cast_blocked(blocked, low_names, dtype):
    """Blocked ops run in float32: Casts around their low-precision inputs and outputs."""
    for owner, n in blocked:
        for i, x in enumerate(n.input):
            if x in low_names:
                c = "%s_input_cast_%d" % (n.name, i)
                owner.node.append(helper.make_node("Cast", [x], [c], to=TensorProto.FLOAT, name=c))
                n.input[i] = c
        for i, y in enumerate(n.output):
            if y in low_names:
                c = "%s_output_cast_%d" % (n.name, i)
                owner.node.append(helper.make_node("Cast", [c], [y], to=dtype, name=c))
                n.output[i] = c


def onnx_sort(g):
    """Orders g's nodes topologically (file order kept where valid)."""
    known = {x.name for x in g.input} | {t.name for t in g.initializer} | {""}
    nodes, out = list(g.node), []
    while nodes:
        rest = []
        for n in nodes:
            if all(x in known for x in n.input):
                out.append(n)
                known.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(nodes):
            raise SystemExit("cannot sort: a node reads a value nothing produces")
        nodes = rest
    del g.node[:]
    g.node.extend(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    ap.add_argument("--sorted", action="store_true", help="sort the nodes (the converter does not)")
    ap.add_argument("--io16", action="store_true", help="graph inputs and outputs in dtype too (no boundary Casts)")
    a = ap.parse_args()
    dtype = TensorProto.FLOAT16 if a.dtype == "float16" else TensorProto.BFLOAT16
    m = convert(onnx.load(a.input), dtype, a.sorted, a.io16)
    onnx.save(m, a.output)


if __name__ == "__main__":
    main()
