#!/usr/bin/env bash
# control_flow_ort.sh - networks inside If / Loop / Scan bodies quantized, judged by ONNX Runtime.
#
# tests/integration/control_flow_models.py (torch.jit.script -> ONNX, opset 13) writes
#   branch  an If picking one of two Conv stacks by an input flag (weights: main-graph
#           initializers the branches capture); its samples alternate the flag, so
#           calibration takes both branches
#   loop    a Loop over the frames of its input whose body holds Gemm, MatMul and Conv
#           (carried state h through tanh, and a running sum of the outputs)
#   scan    an ONNX Scan over frames (onnx.helper) whose body has its own MatMul weights
#   lstm    torch.nn.LSTM(8, 16, bidirectional) and a Linear head (no body); gru and rnn the
#           same with torch.nn.GRU / torch.nn.RNN
#   lstm_loop  a scripted loop over frames calling torch.nn.LSTM(8, 16) with the carried (h, c):
#           the ONNX LSTM sits in the Loop body, its W / R / B sliced and concatenated there
#           from main-graph Constants
# into a temporary folder (nothing is committed), with calibration and held-out samples.
# Checks per model, after `onnxq quantize M -o Q --calib CALIB`:
#   bodies  Q has QuantizeLinear nodes inside every If branch / the Loop / Scan body
#   ort     ONNX Runtime (graphOptimizationLevel 'disabled', as run_ort.js runs) loads Q
#           and runs every held-out sample
#   ort all ONNX Runtime loads and runs Q at level 'all' (its QDQ fusions; the integer
#           kernels it formed inside the bodies are listed)
#   sqnr    SQNR of ORT(Q) against ORT(M) over the held-out samples >= 25 dB (branch) /
#           15 dB (loop) / 20 dB (scan). int8 activations and per-channel int8 weights on
#           these small random-weight nets give about 40 dB (branch: 3 quantized layers;
#           quantize's own fold estimate agrees), about 27 dB (loop: the error of every frame
#           feeds the next through the carried state, and the output sums 3-6 frames) and
#           about 32 dB (scan: a carried state, no sum), so the thresholds leave 12-16 dB
#           for other machines' float rounding and ORT versions while still failing a body
#           whose scales are off by a factor of a few (about 10 dB per factor of 3 in step)
#   qdq     `onnxq run Q` against ORT(Q) on the held-out samples: max|ort - onnxq| /
#           max|ort| <= 1e-3 over the outputs, as quant_accuracy.sh asks of main-graph models
#   threads `onnxq quantize --threads 1` and `--threads 2` write the same bytes
#   captured no body holds a QuantizeLinear of a value it captures; for branch, x's Q sits in
#           the main graph (once per call) and ORT at level 'all' still forms QLinearConv 3
#           inside the branches (fused)
# then --weight-only (branch: --op-types Conv, loop: Conv,MatMul,Gemm, scan: default):
#   bodies  every body has a DequantizeLinear, the model no QuantizeLinear; ort, ort all, qdq as
#           above; sqnr >= 30 dB: int8 per-channel weights alone give 46-50 dB on these nets,
#           so 30 dB leaves 16 dB for other machines while a weight read on the wrong axis or
#           with a scale off by a factor of 10 (saturating int8) lands far below it
# and lstm: `--weight-only` (default op types) leaves no DequantizeLinear on the LSTM; with
# `--op-types LSTM,MatMul` its W and R each get one, per channel on axis 1 (ORT 1.30 loads and
# runs per-axis DQ there); ort, qdq and sqnr >= 30 dB (measured about 50 dB) as above.
# gru and rnn: the same with `--op-types GRU` / `RNN` (no DQ by default, W and R per channel on
# axis 1 with it); sqnr >= 30 dB as for lstm: int8 per-channel W and R alone give about 54 dB
# (gru) and 50 dB (rnn), so 30 dB leaves 20 dB for other machines and ORT versions while W or
# R scales off by a factor of 10 fail (below 0 dB; scales of the wrong axis have the wrong
# length, which the axis check and ORT refuse). It does not catch scales swapped between
# channels: these random weights have alike ranges per channel (reversed scales: 29-31 dB).
# lstm_loop: `--weight-only --op-types LSTM` after cleanup has folded the body's Slice / Concat /
# Unsqueeze chains into body initializers: W and R get their DQ (axis 1) inside the Loop body,
# no weight is named as "computed by nodes", and no float copy of them is left in the file
# (the main-graph Constants only the folded chains read are gone); ort, qdq, sqnr >= 30 dB (the
# error of every frame reaches the next through (h, c); measured about 60 dB).
# and for branch, calibration on samples of one flag only: the branch never taken keeps
# float (no QuantizeLinear inside it) and the log names it; for loop, `calibrate --shard`
# x 2 + `merge-stats` + `quantize --stats` writes the bytes of `quantize --no-bias-correction`.
#
# usage: tests/integration/control_flow_ort.sh [ONNXQ]   (default build/onnxq)
#   env OQ_CACHE (fetch.sh); OQ_CF_KEEP=1 keeps the work folder.
# Needs /usr/bin/python3 with torch, onnx and numpy (skipped otherwise) and onnxruntime-node.
# Closing line: "N passed, N failed, N skipped". Exit 1 on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
py=/usr/bin/python3
js=$here/run_ort.js

[ -x "$onnxq" ] || die "$onnxq not found (build first)"
if ! "$py" -c 'import torch, onnx, numpy' 2> /dev/null; then
	skip "control_flow: $py cannot import torch, onnx and numpy" 60
	finish
	exit
fi
cache=$("$here/fetch.sh" | tail -n 1) || die "fetch.sh failed"
export OQ_CACHE=$cache
tmp=$(mktemp -d)
if [ "${OQ_CF_KEEP:-0}" = 1 ]; then echo "control_flow: work folder $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
if ! "$py" "$here/control_flow_models.py" "$tmp" > "$tmp/export.log" 2>&1; then
	tail -n 20 "$tmp/export.log" >&2
	die "control_flow_models.py failed (above)"
fi

# bodies Q [OP]: one line "OP ATTR N" per body (any depth), N its OP nodes (QuantizeLinear)
bodies() {
	"$py" - "$1" "${2:-QuantizeLinear}" << 'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
def walk(g):
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                print(n.op_type, a.name, sum(x.op_type == sys.argv[2] for x in a.g.node))
                walk(a.g)
walk(m.graph)
PY
}

# captured_q Q: "MAIN BODY": QuantizeLinear nodes of the main graph whose output some body
# captures, and QuantizeLinear nodes inside bodies reading a value their body does not define
captured_q() {
	"$py" - "$1" << 'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
def local(g):
    return ({i.name for i in g.initializer} | {i.name for i in g.input} |
            {o for n in g.node for o in n.output})
def caps(g, out):
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out |= {i for x in a.g.node for i in x.input} - local(a.g)
                caps(a.g, out)
    return out
def inner(g, depth):
    c = 0
    for n in g.node:
        if depth and n.op_type == "QuantizeLinear" and n.input[0] not in local(g):
            c += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                c += inner(a.g, depth + 1)
    return c
cap = caps(m.graph, set())
print(sum(n.op_type == "QuantizeLinear" and n.output[0] in cap for n in m.graph.node), inner(m.graph, 0))
PY
}

# rec_dq Q OP: "N AXES": DequantizeLinear nodes feeding an OP node (LSTM, GRU, RNN; any depth)
# and their axis attributes
rec_dq() {
	"$py" - "$1" "$2" << 'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
n_dq, axes = 0, []
def walk(g):
    global n_dq
    dq = {o: n for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    for n in g.node:
        if n.op_type == sys.argv[2]:
            for i in n.input:
                if i in dq:
                    n_dq += 1
                    axes.append(str(next((a.i for a in dq[i].attribute if a.name == "axis"), "none")))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                walk(a.g)
walk(m.graph)
print(n_dq, ",".join(axes) or "-")
PY
}

# float_big Q: the number of float32 initializers (any depth) of 512 elements or more
float_big() {
	"$py" - "$1" << 'PY'
import sys, math, onnx
m = onnx.load(sys.argv[1])
def walk(g):
    c = sum(1 for i in g.initializer if i.data_type == onnx.TensorProto.FLOAT and
            math.prod(i.dims) >= 512)
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                c += walk(a.g)
    return c
print(walk(m.graph))
PY
}

# bodies_ops OPT: the integer kernels ORT fused inside bodies ("QLinearConv 3, QGemm 2")
bodies_ops() {
	"$py" - "$1" << 'PY'
import sys, onnx, collections
m = onnx.load(sys.argv[1])
c = collections.Counter()
def walk(g, inside):
    for n in g.node:
        if inside and (n.op_type.startswith("QLinear") or n.op_type in ("QGemm", "MatMulInteger", "ConvInteger")):
            c[n.op_type] += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                walk(a.g, True)
walk(m.graph, False)
print(", ".join("%s %d" % kv for kv in sorted(c.items())) or "no integer kernel in bodies")
PY
}

# stat sqnr|diff REFDIR GOTDIR: over every sample folder and output file of REFDIR;
# sqnr: 10 log10(sum ref^2 / sum (ref - got)^2); diff: the largest per-output
# max|ref - got| / max|ref|
stat() {
	"$py" - "$@" << 'PY'
import sys, os, math
import numpy as np
mode, ref, got = sys.argv[1:4]
s = e = worst = 0.0
for d in sorted(os.listdir(ref)):
    for f in sorted(os.listdir(os.path.join(ref, d))):
        r = np.load(os.path.join(ref, d, f)).astype(np.float64)
        g = np.load(os.path.join(got, d, f)).astype(np.float64)
        if r.shape != g.shape:
            print("nan")
            sys.exit(0)
        s += float((r * r).sum())
        e += float(((r - g) ** 2).sum())
        worst = max(worst, float(np.abs(r - g).max()) / max(float(np.abs(r).max()), 1e-12))
if mode == "sqnr":
    print("%.2f" % (10 * math.log10(s / e)) if e > 0 else "inf")
else:
    print("%.3g" % worst)
PY
}

# ort MODEL SAMPLES OUTDIR: ORT on every sample folder into OUTDIR/NNN/
ort() {
	local m=$1 samples=$2 out=$3 d f
	local -a args
	for d in "$samples"/*/; do
		args=()
		for f in "$d"*.npy; do args+=("$(basename "$f" .npy)=$f"); done
		node "$js" run "$m" "$out/$(basename "$d")" "${args[@]}" || return 1
	done
}

cmp_threads() { # NAME MODEL CALIB W
	if "$onnxq" quantize "$2" -o "$4/q1.onnx" --calib "$3" --threads 1 --quiet 2> /dev/null &&
		"$onnxq" quantize "$2" -o "$4/q2.onnx" --calib "$3" --threads 2 --quiet 2> /dev/null &&
		cmp -s "$4/q1.onnx" "$4/q2.onnx"; then
		ok "$1: threads: --threads 1 and 2 write the same bytes"
	else
		bad "$1: threads: --threads 1 and 2 differ (or failed)"
	fi
}

# judge NAME MODEL Q TEST MIN_SQNR W: ORT runs Q (levels disabled and all), SQNR of ORT(Q) vs
# ORT(MODEL) >= MIN_SQNR, `onnxq run Q` matches ORT(Q)
judge() {
	local name=$1 m=$2 q=$3 test=$4 min=$5 w=$6 s
	if ! ort "$m" "$test" "$w/ortf" 2> "$w/ort.err" || ! ort "$q" "$test" "$w/ortq" 2>> "$w/ort.err"; then
		bad "$name: ort: $(head -n 1 "$w/ort.err")"
		return
	fi
	ok "$name: ort: ONNX Runtime runs Q on $(ls "$test" | wc -l) held-out samples"
	if node "$here/ort_optimized.js" "$q" all "$w/opt.onnx" 2> "$w/opt.err"; then
		ok "$name: ort all: ONNX Runtime loads and runs Q at optimization level 'all' ($(bodies_ops "$w/opt.onnx"))"
	else
		bad "$name: ort all: $(head -n 1 "$w/opt.err")"
	fi
	s=$(stat sqnr "$w/ortf" "$w/ortq")
	if awk -v s="$s" -v m="$min" 'BEGIN { exit !(s == "inf" || s + 0 >= m) }'; then
		ok "$name: sqnr: ORT(Q) vs ORT(float) $s dB (>= $min)"
	else
		bad "$name: sqnr: ORT(Q) vs ORT(float) '$s' dB (< $min)"
	fi
	if ! "$onnxq" run "$q" --data "$test" --output-dir "$w/oq" > /dev/null 2> "$w/run.err"; then
		bad "$name: qdq: onnxq run: $(head -n 1 "$w/run.err")"
		return
	fi
	s=$(stat diff "$w/ortq" "$w/oq")
	if awk -v s="$s" 'BEGIN { exit !(s != "nan" && s + 0 <= 1e-3) }'; then
		ok "$name: qdq: onnxq run vs ORT on Q: max relative error $s (<= 1e-3)"
	else
		bad "$name: qdq: onnxq run vs ORT on Q: max relative error '$s' (> 1e-3)"
	fi
}

model_case() { # NAME MIN_SQNR
	local name=$1 min=$2 w=$tmp/$1 m=$tmp/$1.onnx calib=$tmp/$1_calib test=$tmp/$1_test b nq s
	mkdir -p "$w"
	if ! "$onnxq" quantize "$m" -o "$w/q.onnx" --calib "$calib" --threads 2 2> "$w/q.log" > /dev/null; then
		bad "$name: quantize failed: $(grep -m1 -i error "$w/q.log")"
		return
	fi
	cmp_threads "$name" "$m" "$calib" "$w"
	b=$(bodies "$w/q.onnx")
	if [ -z "$b" ]; then
		bad "$name: bodies: Q has no If/Loop/Scan body"
	elif awk '$3 == 0 { none = 1 } END { exit !none }' <<< "$b"; then
		bad "$name: bodies: a body has no QuantizeLinear: $(tr '\n' ';' <<< "$b")"
	else
		nq=$(sed -n 's/.*wrote .*: \([0-9]*\) QuantizeLinear.*/\1/p' "$w/q.log")
		ok "$name: bodies: QuantizeLinear inside $(awk '{ printf "%s%s.%s %s", s, $1, $2, $3; s = ", " }' <<< "$b") ($nq in the model)"
	fi
	b=$(captured_q "$w/q.onnx")
	if [ "${b#* }" = 0 ] && { [ "$name" != branch ] || [ "${b% *}" -ge 1 ]; }; then
		ok "$name: captured: no body quantizes a captured value; ${b% *} QuantizeLinear in the main graph feed bodies"
	else
		bad "$name: captured: main-graph Q feeding bodies / body Q of captures: $b"
	fi
	judge "$name" "$m" "$w/q.onnx" "$test" "$min" "$w"
	if [ -n "${3:-}" ]; then
		b=$(bodies_ops "$w/opt.onnx")
		if grep -q "$3" <<< "$b"; then
			ok "$name: fused: ORT formed $3 inside the bodies with the captured Q outside"
		else
			bad "$name: fused: ORT formed '$b' inside the bodies, want $3"
		fi
	fi
}

# wo_case NAME MIN_SQNR OPTIONS...: `quantize --weight-only OPTIONS`; every body has a
# DequantizeLinear, no QuantizeLinear anywhere, then judge
wo_case() {
	local name=$1 min=$2 w=$tmp/wo_$1 m=$tmp/$1.onnx test=$tmp/$1_test b
	shift 2
	mkdir -p "$w"
	if ! "$onnxq" quantize "$m" -o "$w/q.onnx" --weight-only "$@" 2> "$w/q.log" > /dev/null; then
		bad "$name weight-only: quantize failed: $(grep -m1 -i error "$w/q.log")"
		return
	fi
	b=$(bodies "$w/q.onnx" DequantizeLinear)
	if [ -z "$b" ] || awk '$3 == 0 { none = 1 } END { exit !none }' <<< "$b" ||
		grep -q " [1-9][0-9]* QuantizeLinear" "$w/q.log" || ! grep -q " 0 QuantizeLinear" "$w/q.log"; then
		bad "$name weight-only: bodies: $(tr '\n' ';' <<< "$b") $(grep -o '[0-9]* QuantizeLinear' "$w/q.log")"
	else
		ok "$name weight-only: bodies: DequantizeLinear inside $(awk '{ printf "%s%s.%s %s", s, $1, $2, $3; s = ", " }' <<< "$b"), no QuantizeLinear"
	fi
	judge "$name weight-only" "$m" "$w/q.onnx" "$test" "$min" "$w"
}

model_case branch 25 "QLinearConv 3"
model_case loop 15
model_case scan 20
wo_case branch 30 --op-types Conv
wo_case loop 30 --op-types Conv,MatMul,Gemm
wo_case scan 30

# an LSTM: its W and R get a DequantizeLinear (per channel, axis 1) only when --op-types names it
w=$tmp/wo_lstm
mkdir -p "$w"
if "$onnxq" quantize "$tmp/lstm.onnx" -o "$w/d.onnx" --weight-only 2> "$w/d.log" > /dev/null &&
	"$onnxq" quantize "$tmp/lstm.onnx" -o "$w/q.onnx" --weight-only --op-types LSTM,MatMul 2> "$w/q.log" > /dev/null; then
	dd=$(rec_dq "$w/d.onnx" LSTM)
	dq=$(rec_dq "$w/q.onnx" LSTM)
	if [ "$dd" = "0 -" ] && [ "$dq" = "2 1,1" ]; then
		ok "lstm weight-only: DequantizeLinear feeding the LSTM: 0 by default, 2 (W, R; axis 1) with --op-types LSTM"
	else
		bad "lstm weight-only: DequantizeLinear feeding the LSTM (count axes): default '$dd', --op-types LSTM '$dq'"
	fi
	judge "lstm weight-only" "$tmp/lstm.onnx" "$w/q.onnx" "$tmp/lstm_test" 30 "$w"
else
	bad "lstm weight-only: quantize failed: $(cat "$w/d.log" "$w/q.log" | grep -m1 -i error)"
fi

# a GRU and an RNN: the same DequantizeLinear on W and R with --op-types GRU / RNN
for r in gru:GRU rnn:RNN; do
	name=${r%:*} op=${r#*:} w=$tmp/wo_${r%:*}
	mkdir -p "$w"
	if ! "$onnxq" quantize "$tmp/$name.onnx" -o "$w/d.onnx" --weight-only 2> "$w/d.log" > /dev/null ||
		! "$onnxq" quantize "$tmp/$name.onnx" -o "$w/q.onnx" --weight-only --op-types "$op" 2> "$w/q.log" > /dev/null; then
		bad "$name weight-only: quantize failed: $(cat "$w/d.log" "$w/q.log" | grep -m1 -i error)"
		continue
	fi
	dd=$(rec_dq "$w/d.onnx" "$op")
	dq=$(rec_dq "$w/q.onnx" "$op")
	if [ "$dd" = "0 -" ] && [ "$dq" = "2 1,1" ]; then
		ok "$name weight-only: DequantizeLinear feeding the $op: 0 by default, 2 (W, R; axis 1) with --op-types $op"
	else
		bad "$name weight-only: DequantizeLinear feeding the $op (count axes): default '$dd', --op-types $op '$dq'"
	fi
	judge "$name weight-only" "$tmp/$name.onnx" "$w/q.onnx" "$tmp/${name}_test" 30 "$w"
done

# an LSTM in a Loop body, its W and R computed there from captured constants: cleanup folds them
# into body initializers, which then get their DequantizeLinear like main-graph weights
w=$tmp/wo_lstm_loop
mkdir -p "$w"
if "$onnxq" quantize "$tmp/lstm_loop.onnx" -o "$w/q.onnx" --weight-only --op-types LSTM --verbose 2> "$w/q.log" > /dev/null; then
	dq=$(rec_dq "$w/q.onnx" LSTM)
	b=$(bodies "$w/q.onnx" DequantizeLinear)
	if [ "$dq" = "2 1,1" ] && [ "$b" = "Loop body 2" ] && ! grep -q "computed by nodes" "$w/q.log"; then
		ok "lstm_loop weight-only: DequantizeLinear feeding the LSTM: 2 (W, R; axis 1) inside the Loop body"
	else
		bad "lstm_loop weight-only: DequantizeLinear feeding the LSTM '$dq', in bodies '$(tr '\n' ';' <<< "$b")'; $(grep -m1 'computed by nodes' "$w/q.log")"
	fi
	b=$(float_big "$w/q.onnx")
	if [ "$b" = 0 ] && grep -q "inside If/Loop/Scan bodies" "$w/q.log"; then
		ok "lstm_loop weight-only: folded in the body; no float initializer of 512+ elements is left"
	else
		bad "lstm_loop weight-only: float initializers of 512+ elements left: $b; $(grep -m1 '^cleanup' "$w/q.log")"
	fi
	judge "lstm_loop weight-only" "$tmp/lstm_loop.onnx" "$w/q.onnx" "$tmp/lstm_loop_test" 30 "$w"
else
	bad "lstm_loop weight-only: quantize failed: $(grep -m1 -i error "$w/q.log")"
fi

# a branch no calibration sample takes keeps float, named in the log
mkdir -p "$tmp/one"
for d in "$tmp"/branch_calib/*/; do
	if [ "$("$py" -c 'import sys, numpy; print(int(numpy.load(sys.argv[1])[0] > 0))' "$d/flag.npy")" = 1 ]; then
		cp -r "$d" "$tmp/one/"
	fi
done
if ! "$onnxq" quantize "$tmp/branch.onnx" -o "$tmp/one.onnx" --calib "$tmp/one" 2> "$tmp/one.log" > /dev/null; then
	bad "untaken branch: quantize failed: $(head -n 1 "$tmp/one.log")"
else
	b=$(bodies "$tmp/one.onnx")
	if grep -q "then_branch [1-9]" <<< "$b" && grep -q "else_branch 0" <<< "$b" &&
		grep -q "body 'else_branch\|never ran during calibration" "$tmp/one.log"; then
		ok "untaken branch: then_branch quantized, else_branch float and named in the log"
	else
		bad "untaken branch: $(tr '\n' ';' <<< "$b") / $(grep -c 'never ran' "$tmp/one.log") log lines"
	fi
fi

# statistics files hold body values too: two shards merged give `quantize --no-bias-correction`
w=$tmp/stats
mkdir -p "$w"
if "$onnxq" calibrate "$tmp/loop.onnx" --calib "$tmp/loop_calib" --shard 0/2 -o "$w/s0" --quiet 2> "$w/err" &&
	"$onnxq" calibrate "$tmp/loop.onnx" --calib "$tmp/loop_calib" --shard 1/2 -o "$w/s1" --quiet 2>> "$w/err" &&
	"$onnxq" merge-stats "$w/s0" "$w/s1" -o "$w/s" > /dev/null 2>> "$w/err" &&
	"$onnxq" quantize "$tmp/loop.onnx" --stats "$w/s" -o "$w/st.onnx" --quiet 2>> "$w/err" &&
	"$onnxq" quantize "$tmp/loop.onnx" --calib "$tmp/loop_calib" --no-bias-correction -o "$w/nb.onnx" --quiet 2>> "$w/err" &&
	cmp -s "$w/st.onnx" "$w/nb.onnx"; then
	ok "loop: stats: 2 shards + merge-stats + quantize --stats = quantize --no-bias-correction, byte for byte"
else
	bad "loop: stats: sharded statistics differ from one run ($(head -n 1 "$w/err"))"
fi

finish
