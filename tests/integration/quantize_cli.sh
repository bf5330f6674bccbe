#!/usr/bin/env bash
# quantize_cli.sh - `onnxq quantize` / `convert --passes` / `compare` from the
# command line, on the bundled models/tiny_cnn.onnx and its sample folders
# (models/tiny_cnn_calib, models/tiny_cnn_test: photo crops):
#   - the default form `onnxq MODEL -o OUT --calib DIR` writes a model that
#     `check` accepts and says that ONNX Runtime runs this small CNN faster in
#     float (the placement leaves it float, and the summary warns so, naming
#     --prefer accuracy); with --prefer accuracy every unit
#     gets QuantizeLinear/DequantizeLinear and int8 weights, and ONNX Runtime runs
#     it with the same outputs as onnxq's executor;
#   - byte-identical output for --threads 1 and 2 and for a second run;
#   - compare: identical models -> exit 0, --min-sqnr above the measured
#     SQNR -> exit 6 (the documented check-failed code);
#   - convert --passes cleanup,fold-bn removes BatchNormalization and keeps
#     the outputs (compare SQNR >= 100 dB, i.e. relative error ~1e-5);
#   - --weight-rounding adaround|seq-mse with --bias-correction, weight-only (--calib accepted) and
#     W8A8 with --cle: byte-identical for --threads 1 and 2, not worse than nearest on held-out
#     samples; W8A8 learned rounding with --target-sqnr: byte-identical for --threads 1 and 2; convert --passes ...,cle keeps the float outputs (100 dB);
#   - errors: missing --calib, bad option values, unknown pass, a sample with
#     the wrong shape, a missing or corrupt model: documented exit code, one
#     line naming the problem, and a pre-existing output file untouched.
# usage: tests/integration/quantize_cli.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
model=$root/models/tiny_cnn.onnx
calib=$root/models/tiny_cnn_calib
held=$root/models/tiny_cnn_test
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_exit CODE NAME CMD...: runs CMD, checks its exit code, keeps stderr in $tmp/err
expect_exit() {
	local want=$1 name=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	local got=$?
	if [ "$got" -eq "$want" ]; then ok "$name (exit $got)"; else
		bad "$name: exit $got, expected $want: $(head -c 300 "$tmp/err")"
	fi
}

# expect_msg NAME PATTERN: the last command's stderr is one line matching PATTERN
expect_msg() {
	if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qE -- "$2" "$tmp/err"; then ok "$1 message"; else
		bad "$1 message: $(head -c 300 "$tmp/err")"
	fi
}

# expect_usage NAME PATTERN: the last command's stderr starts with a line matching PATTERN (usage
# errors add a line pointing at --help)
expect_usage() {
	if head -n 1 "$tmp/err" | grep -qE -- "$2"; then ok "$1 message"; else bad "$1 message: $(head -c 300 "$tmp/err")"; fi
}

[ -x "$onnxq" ] || die "$onnxq not found"

# --- the main job
q=$tmp/q.onnx
expect_exit 0 "quantize (default form)" "$onnxq" "$model" -o "$q" --calib "$calib" --threads 1
expect_exit 0 "check quantized" "$onnxq" check "$q"
# the tiny CNN runs faster in float in ONNX Runtime (its convolutions are too small for the
# integer kernels to pay): the default placement says so; --prefer accuracy quantizes it all
"$onnxq" "$model" -o "$tmp/qd.onnx" --calib "$calib" >"$tmp/qd.log" 2>&1
if grep -q '^placement: 0 of 4 Conv/Gemm/MatMul units integer (4 float: faster so' "$tmp/qd.log"; then
	ok "default placement: the tiny CNN stays float"
else bad "default placement: the tiny CNN stays float: $(grep placement "$tmp/qd.log")"; fi
if grep -q '^quantize: warning: the model was left float: ONNX Runtime runs it faster in float (.* 4 Conv/Gemm/MatMul units .*--prefer accuracy quantizes it anyway' "$tmp/qd.log"; then
	ok "default placement: a warning says the model was left float and names --prefer accuracy"
else bad "default placement: no warning that the model was left float: $(grep quantize: "$tmp/qd.log")"; fi
# left float, nothing needs a range: calibration runs (its checks stand), bias correction and the
# fold report do not; with --prefer accuracy both do
"$onnxq" quantize "$model" -o "$tmp/qv.onnx" --calib "$calib" --threads 1 --verbose >"$tmp/qv.log" 2>&1
"$onnxq" quantize "$model" -o "$tmp/qav.onnx" --calib "$calib" --threads 1 --prefer accuracy --verbose >"$tmp/qav.log" 2>&1
if grep -q '^placement: every unit float and no tensor needs a range: no bias correction or fold report' "$tmp/qv.log" &&
	grep -q '^calibrate: ' "$tmp/qv.log" && ! grep -qE '^bias correction:|fold SQNR' "$tmp/qv.log" &&
	grep -q '^bias correction: ' "$tmp/qav.log" && grep -q 'fold SQNR' "$tmp/qav.log"; then
	ok "left float: calibrated, not corrected or measured; --prefer accuracy is"
else bad "left float: bias correction skipped only when nothing is quantized: $(grep -E '^(placement: every|calibrate:|bias correction:)' "$tmp/qv.log" "$tmp/qav.log" | head -5)"; fi
if cmp -s "$tmp/qv.onnx" "$tmp/qd.onnx"; then ok "left float: --verbose and --threads change no byte"; else
	bad "left float: --verbose / --threads 1 wrote other bytes"; fi
"$onnxq" quantize "$model" -o "$tmp/qa.onnx" --calib "$calib" --threads 1 --prefer accuracy --quiet
"$onnxq" inspect --json "$tmp/qa.onnx" >"$tmp/insp.json" 2>/dev/null
if grep -q '"QuantizeLinear"' "$tmp/insp.json" && grep -q '"DequantizeLinear"' "$tmp/insp.json" &&
	! grep -q '"BatchNormalization"' "$tmp/insp.json"; then ok "Q/DQ present, BN folded"; else
	bad "Q/DQ present, BN folded: $(head -c 400 "$tmp/insp.json")"
fi
if grep -q '"int8"' "$tmp/insp.json"; then ok "int8 weights"; else bad "int8 weights"; fi

# an int16 override on one weight raises the default opset to 21 (upgrade-opset counts overrides)
echo '{"tensors": {"fc.weight": {"dtype": "int16"}}}' >"$tmp/ov16.json"
expect_exit 0 "quantize --overrides int16 weight" "$onnxq" quantize "$model" -o "$tmp/q16.onnx" --calib "$calib" --overrides "$tmp/ov16.json" --quiet
if "$onnxq" inspect "$tmp/q16.onnx" 2>/dev/null | grep -qE '^opsets +ai.onnx 21'; then ok "int16 override -> opset 21"; else
	bad "int16 override -> opset 21: $("$onnxq" inspect "$tmp/q16.onnx" 2>&1 | grep opsets)"
fi
expect_exit 0 "quantize --threads 2" "$onnxq" quantize "$model" -o "$tmp/q2.onnx" --calib "$calib" --threads 2 --quiet
if cmp -s "$q" "$tmp/q2.onnx"; then ok "threads 1 vs 2 byte-identical"; else bad "threads 1 vs 2 byte-identical"; fi
"$onnxq" quantize "$model" -o "$tmp/q3.onnx" --calib "$calib" --threads 1 --quiet 2>/dev/null
if cmp -s "$q" "$tmp/q3.onnx"; then ok "second run byte-identical"; else bad "second run byte-identical"; fi

# --- compare
expect_exit 0 "compare identical" "$onnxq" compare "$model" "$model" --data "$held" --json
expect_exit 0 "compare quantized" "$onnxq" compare "$model" "$q" --data "$held" --json
cp "$tmp/out" "$tmp/cmp.json"
sqnr=$(sed -n 's/.*"sqnr_min_db": *\([-0-9.e+]*\).*/\1/p' "$tmp/cmp.json" | head -1)
echo "      tiny_cnn int8 SQNR (held-out, min over samples): ${sqnr:-?} dB"
# A smoke floor, not an accuracy target (random weights, 4 held-out crops; the real-model floors are
# in quant_accuracy.sh): a wrong scale, axis or zero point drives the SQNR below 10 dB.
if [ -n "$sqnr" ] && awk -v s="$sqnr" 'BEGIN { exit !(s >= 15) }'; then ok "tiny_cnn SQNR >= 15 dB"; else
	bad "tiny_cnn SQNR >= 15 dB (got ${sqnr:-none}): $(head -c 300 "$tmp/cmp.json")"
fi
expect_exit 6 "compare --min-sqnr 200" "$onnxq" compare "$model" "$q" --data "$held" --min-sqnr 200

# --- ONNX Runtime runs the quantized model like onnxq's executor
if cache=$("$here/fetch.sh" 2>/dev/null | tail -n 1) && [ -d "$cache/ort/node_modules/onnxruntime-node" ]; then
	export OQ_CACHE=$cache
	mkdir -p "$tmp/ort" "$tmp/oq"
	if "$onnxq" run "$tmp/qa.onnx" --input "image=$held/000.npy" --output-dir "$tmp/oq" >/dev/null 2>&1 &&
		node "$here/run_ort.js" run "$tmp/qa.onnx" "$tmp/ort" "image=$held/000.npy" >/dev/null 2>"$tmp/err" &&
		node "$here/run_ort.js" compare "$tmp/oq" "$tmp/ort" 1e-3 >"$tmp/out" 2>&1; then
		ok "ORT runs the quantized model, agrees with onnxq run (1e-3)"
	else
		bad "ORT vs onnxq on the quantized model: $(head -c 400 "$tmp/err") $(head -c 400 "$tmp/out")"
	fi
else
	bad "ORT unavailable (fetch.sh failed)"
fi

# --- rewrites only
expect_exit 0 "convert --passes cleanup,fold-bn" "$onnxq" convert "$model" -o "$tmp/f.onnx" --passes cleanup,fold-bn
if "$onnxq" inspect "$tmp/f.onnx" | grep -q BatchNormalization; then bad "fold-bn removed BN"; else ok "fold-bn removed BN"; fi
expect_exit 0 "folded model within 100 dB" "$onnxq" compare "$model" "$tmp/f.onnx" --data "$held" --min-sqnr 100
expect_exit 0 "convert without --passes" "$onnxq" convert "$model" -o "$tmp/c.onnx"
if "$onnxq" inspect "$tmp/c.onnx" | grep -q BatchNormalization; then ok "plain convert rewrites nothing"; else
	bad "plain convert rewrites nothing"
fi
"$onnxq" convert "$model" -o "$tmp/d.onnx" --passes cleanup,fold-bn,fuse --dump-after fuse >/dev/null 2>"$tmp/err"
if grep -q "^# after fuse" "$tmp/err" && grep -q "Conv" "$tmp/err"; then ok "--dump-after fuse"; else bad "--dump-after fuse"; fi

# --- weight-only needs no data
expect_exit 0 "weight-only" "$onnxq" quantize "$model" -o "$tmp/w.onnx" --weight-only --op-types Conv,Gemm --quiet
expect_exit 0 "check weight-only" "$onnxq" check "$tmp/w.onnx"

# --- learned weight rounding and bias correction on the calibration samples (weight-only and
# W8A8), and cross-layer equalization: deterministic for any --threads; the float model kept by cle;
# not worse than round-to-nearest on held-out samples beyond 0.2 dB (tiny_cnn: random weights)
sqnr_of() { "$onnxq" compare "$model" "$1" --data "$held" --json 2>/dev/null | sed -n 's/.*"sqnr_mean_db": *\([-0-9.e+]*\).*/\1/p' | head -1; }
near=$(sqnr_of "$tmp/w.onnx")
for alg in adaround seq-mse; do
	expect_exit 0 "weight-only --weight-rounding $alg --bias-correction" "$onnxq" quantize "$model" -o "$tmp/wr_$alg.onnx" \
		--weight-only --op-types Conv,Gemm --weight-rounding $alg --bias-correction --calib "$calib" --threads 1 --quiet
	expect_exit 0 "check weight-only $alg" "$onnxq" check "$tmp/wr_$alg.onnx"
	"$onnxq" quantize "$model" -o "$tmp/wr2_$alg.onnx" --weight-only --op-types Conv,Gemm --weight-rounding $alg \
		--bias-correction --calib "$calib" --threads 2 --quiet 2>/dev/null
	if cmp -s "$tmp/wr_$alg.onnx" "$tmp/wr2_$alg.onnx"; then ok "$alg: threads 1 vs 2 byte-identical"; else
		bad "$alg: threads 1 vs 2 byte-identical"; fi
	got=$(sqnr_of "$tmp/wr_$alg.onnx")
	echo "      tiny_cnn weight-only int8 mean SQNR: nearest ${near:-?} dB, $alg + bias correction ${got:-?} dB"
	if [ -n "$got" ] && [ -n "$near" ] && awk -v a="$got" -v b="$near" 'BEGIN { exit !(a >= b - 0.2) }'; then
		ok "$alg not worse than nearest on held-out samples"; else bad "$alg not worse than nearest (${got:-?} vs ${near:-?} dB)"; fi
done
# --awq (weight-only): deterministic, checked, not worse than nearest; refused for W8A8
expect_exit 0 "weight-only --awq --weight-rounding adaround --bias-correction" "$onnxq" quantize "$model" \
	-o "$tmp/awq.onnx" --weight-only --op-types Conv,Gemm --awq --weight-rounding adaround --bias-correction \
	--calib "$calib" --threads 1 --quiet
expect_exit 0 "check weight-only --awq" "$onnxq" check "$tmp/awq.onnx"
"$onnxq" quantize "$model" -o "$tmp/awq2.onnx" --weight-only --op-types Conv,Gemm --awq --weight-rounding adaround \
	--bias-correction --calib "$calib" --threads 2 --quiet 2>/dev/null
if cmp -s "$tmp/awq.onnx" "$tmp/awq2.onnx"; then ok "awq: threads 1 vs 2 byte-identical"; else
	bad "awq: threads 1 vs 2 byte-identical"; fi
got=$(sqnr_of "$tmp/awq.onnx")
if [ -n "$got" ] && [ -n "$near" ] && awk -v a="$got" -v b="$near" 'BEGIN { exit !(a >= b - 0.2) }'; then
	ok "awq not worse than nearest on held-out samples"; else bad "awq not worse than nearest (${got:-?} vs ${near:-?} dB)"; fi
expect_exit 1 "W8A8 --awq refused" "$onnxq" quantize "$model" -o "$tmp/awq3.onnx" --calib "$calib" --awq --quiet
expect_exit 0 "W8A8 --weight-rounding adaround --cle" "$onnxq" quantize "$model" -o "$tmp/wa.onnx" --calib "$calib" \
	--weight-rounding adaround --cle --threads 1 --quiet
"$onnxq" quantize "$model" -o "$tmp/wa2.onnx" --calib "$calib" --weight-rounding adaround --cle --threads 2 --quiet 2>/dev/null
if cmp -s "$tmp/wa.onnx" "$tmp/wa2.onnx"; then ok "W8A8 adaround + cle: threads 1 vs 2 byte-identical"; else
	bad "W8A8 adaround + cle: threads 1 vs 2 byte-identical"; fi
for alg in adaround seq-mse; do
	expect_exit 0 "W8A8 --weight-rounding $alg --target-sqnr 40" "$onnxq" quantize "$model" -o "$tmp/wt.onnx" \
		--calib "$calib" --prefer accuracy --weight-rounding $alg --target-sqnr 40 --threads 1 --quiet
	"$onnxq" quantize "$model" -o "$tmp/wt2.onnx" --calib "$calib" --prefer accuracy --weight-rounding $alg \
		--target-sqnr 40 --threads 2 --quiet 2>/dev/null
	if cmp -s "$tmp/wt.onnx" "$tmp/wt2.onnx"; then ok "W8A8 $alg + target-sqnr: threads 1 vs 2 byte-identical"; else
		bad "W8A8 $alg + target-sqnr: threads 1 vs 2 byte-identical"; fi
done
expect_exit 0 "convert --passes cleanup,fold-bn,cle" "$onnxq" convert "$model" -o "$tmp/cle.onnx" --passes cleanup,fold-bn,cle
expect_exit 0 "cle keeps the float model (100 dB)" "$onnxq" compare "$model" "$tmp/cle.onnx" --data "$held" --min-sqnr 100

# --- errors: exit code, one line, output untouched
keep=$tmp/keep.onnx
echo "previous content" >"$keep"
untouched() { if [ "$(cat "$keep")" = "previous content" ]; then ok "$1: output untouched"; else bad "$1: output changed"; fi; }

expect_exit 1 "missing --calib" "$onnxq" quantize "$model" -o "$keep"
expect_msg "missing --calib" "calib.*weight-only"
untouched "missing --calib"
expect_exit 1 "bad --weight-type" "$onnxq" quantize "$model" -o "$keep" --calib "$calib" --weight-type int7
untouched "bad --weight-type"
expect_exit 1 "unknown pass" "$onnxq" quantize "$model" -o "$keep" --calib "$calib" --passes cleanup,foo
expect_msg "unknown pass" "unknown pass 'foo'"
expect_exit 1 "unknown --no-PASS" "$onnxq" quantize "$model" -o "$keep" --calib "$calib" --no-foo
expect_exit 1 "--block-size without block" "$onnxq" quantize "$model" -o "$keep" --calib "$calib" --block-size 32
mkdir -p "$tmp/badcal"
cp "$calib/000.npy" "$tmp/badcal/000.npy"
/usr/bin/python3 -c "import numpy as np; np.save('$tmp/badcal/001.npy', np.zeros((1,3,16,16),np.float32))" 2>/dev/null ||
	cp "$root/models/tiny_cnn.onnx" "$tmp/badcal/001.npy"
expect_exit 2 "wrong-shape sample" "$onnxq" quantize "$model" -o "$keep" --calib "$tmp/badcal"
expect_msg "wrong-shape sample" "001.npy"
untouched "wrong-shape sample"
# a sample whose header is whole but whose data is cut short: an error, also where the
# placement leaves the model float
mkdir -p "$tmp/shortcal"
cp "$calib/000.npy" "$tmp/shortcal/000.npy"
head -c $(($(wc -c <"$calib/001.npy") - 8)) "$calib/001.npy" >"$tmp/shortcal/001.npy"
expect_exit 2 "sample with short data" "$onnxq" quantize "$model" -o "$keep" --calib "$tmp/shortcal"
expect_msg "sample with short data" "001.npy.*truncated"
untouched "sample with short data"
mkdir -p "$tmp/empty"
expect_exit 2 "empty calibration folder" "$onnxq" quantize "$model" -o "$keep" --calib "$tmp/empty"
untouched "empty calibration folder"
expect_exit 4 "missing model" "$onnxq" quantize "$tmp/nope.onnx" -o "$keep" --calib "$calib"
head -c 3000 "$model" >"$tmp/trunc.onnx"
expect_exit 2 "truncated model" "$onnxq" quantize "$tmp/trunc.onnx" -o "$keep" --calib "$calib"
expect_msg "truncated model" "trunc.onnx"
untouched "truncated model"
expect_exit 1 "compare without --data" "$onnxq" compare "$model" "$q"
expect_exit 1 "weight-only --calib alone" "$onnxq" quantize "$model" -o "$keep" --weight-only --calib "$calib"
expect_usage "weight-only --calib alone" "weight-rounding"
expect_exit 1 "bad --weight-rounding" "$onnxq" quantize "$model" -o "$keep" --calib "$calib" --weight-rounding up
expect_usage "bad --weight-rounding" "nearest, adaround or seq-mse"
expect_exit 1 "weight-only --weight-rounding without --calib" "$onnxq" quantize "$model" -o "$keep" --weight-only \
	--weight-rounding adaround
expect_usage "weight-only --weight-rounding without --calib" "calib"
untouched "learned rounding errors"

finish
