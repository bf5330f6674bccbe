#!/usr/bin/env bash
# grids_cli.sh - the quantization grids from the command line (docs/design.md "Grids and data types"),
# on models/tiny_cnn.onnx with its calibration and held-out folders:
#   - --act-type/--weight-type float8e4m3fn: opset 19 chosen, float8e4m3fn Q/DQ and weights,
#     QuantizeLinear saturate=1, `check` clean, held-out SQNR >= 15 dB (measured 18.4 min);
#     per tensor weights and every --method (mse models the FP8 grid) run;
#   - --act-symmetric=unsigned: tensors without negatives (post-ReLU) get zero point 0 on the
#     whole uint8 grid (AIMET unsigned symmetric), the logits (negatives) symmetric narrow zp 127,
#     where plain --act-symmetric gives post-ReLU tensors zp 127 too;
#   - --weight-method mse: different weights from minmax, byte-identical on a second run;
#   - impossible combinations: exit 1 (usage) or 3 (unsupported), one message naming the
#     option, a pre-existing output file untouched.
# ORT agreement for the same options is in quant_patterns.sh. Every model is quantized with
# --prefer accuracy: ONNX Runtime runs the tiny CNN faster in float, so the default
# (runtime-aware) placement leaves its units float, and these grids need them quantized.
# usage: tests/integration/grids_cli.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
model=$root/models/tiny_cnn.onnx
calib=$root/models/tiny_cnn_calib
held=$root/models/tiny_cnn_test
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ -x "$onnxq" ] || die "$onnxq not found"

# q NAME OPTS...: quantize the tiny CNN into $tmp/NAME.onnx
q() {
	local name=$1
	shift
	if "$onnxq" quantize "$model" -o "$tmp/$name.onnx" --calib "$calib" --quiet --prefer accuracy "$@" 2>"$tmp/err"; then
		ok "$name: quantize"
		return 0
	fi
	bad "$name: quantize: $(head -c 300 "$tmp/err")"
	return 1
}

# min_sqnr NAME DB: held-out SQNR of $tmp/NAME.onnx at least DB (compare --min-sqnr exits 6 otherwise)
min_sqnr() {
	if "$onnxq" compare "$model" "$tmp/$1.onnx" --data "$held" --min-sqnr "$2" >"$tmp/cmp" 2>&1; then
		ok "$1: SQNR >= $2 dB ($(grep -o 'min [0-9.-]* dB' "$tmp/cmp" | head -1))"
	else
		bad "$1: SQNR below $2 dB: $(head -c 300 "$tmp/cmp")"
	fi
}

# ---------------------------------------------------------------- FP8
if q fp8 --act-type float8e4m3fn --weight-type float8e4m3fn; then
	"$onnxq" inspect "$tmp/fp8.onnx" >"$tmp/insp" 2>&1
	if grep -q 'opsets *ai.onnx 19' "$tmp/insp"; then ok "fp8: opset 19"; else bad "fp8: opset: $(grep opsets "$tmp/insp")"; fi
	if grep -qE '^ *types +float8e4m3fn [0-9]+$' "$tmp/insp"; then ok "fp8: all Q/DQ float8e4m3fn"; else
		bad "fp8: Q/DQ types: $(grep types "$tmp/insp")"; fi
	if grep -qE 'float8e4m3fn +[0-9]+ tensors' "$tmp/insp"; then ok "fp8: float8e4m3fn initializers"; else
		bad "fp8: no float8e4m3fn initializers"; fi
	if "$onnxq" check "$tmp/fp8.onnx" >"$tmp/err" 2>&1; then ok "fp8: check"; else bad "fp8: check: $(head -c 300 "$tmp/err")"; fi
	# inspect counts the stored float8 weights like integer ones: the model's 4 Conv/Gemm weights
	# (tiny_cnn: conv1..conv3 and fc; biases stay float on FP8 layers)
	nw=$(sed -nE 's/^ *weights +([0-9]+) quantized initializers.*/\1/p' "$tmp/insp")
	if [ "$nw" = 4 ]; then ok "fp8: inspect counts 4 float8 weights"; else bad "fp8: inspect weights: '${nw}', want 4"; fi
	# saturate=1 on every QuantizeLinear: the attribute name and value 1 (AttributeProto i = 1 -> 0x18 0x01)
	nq=$(grep -oE '^ *QuantizeLinear [0-9]+,' "$tmp/insp" | grep -oE '[0-9]+')
	if [ "$(grep -ao 'saturate' "$tmp/fp8.onnx" | wc -l)" -eq "$nq" ] && [ "$nq" -gt 0 ]; then
		ok "fp8: saturate on each of the $nq QuantizeLinear"
	else
		bad "fp8: saturate attributes $(grep -ao 'saturate' "$tmp/fp8.onnx" | wc -l) for $nq Q"
	fi
	min_sqnr fp8 15
fi
q fp8_tensor --act-type float8e4m3fn --weight-type float8e4m3fn --granularity tensor && min_sqnr fp8_tensor 15
for m in minmax percentile entropy; do
	q "fp8_$m" --act-type float8e4m3fn --method "$m" && min_sqnr "fp8_$m" 10
done
q fp8_acts_only --act-type float8e4m3fn && min_sqnr fp8_acts_only 15

# ---------------------------------------------------------------- unsigned symmetric
# (zero point = -offset in the encodings; the rows of one tensor are on one line)
if q unsigned --act-symmetric=unsigned --export-encodings "$tmp/unsigned.json" &&
	q symmetric --act-symmetric --export-encodings "$tmp/symmetric.json"; then
	# post-ReLU tensors (calibrated min 0) use the whole uint8 grid: zero point 0
	n=$(grep -c '"min": 0, .*"onnx_type": "uint8"' "$tmp/unsigned.json")
	nz=$(grep -c '"offset": 0, "min": 0, .*"onnx_type": "uint8"' "$tmp/unsigned.json")
	if [ "$n" -ge 5 ] && [ "$n" -eq "$nz" ]; then ok "unsigned: the $n tensors without negatives have zero point 0"; else
		bad "unsigned: $nz of $n non-negative tensors with zero point 0"; fi
	# the logits have negatives: symmetric narrow, zero point 127 (clamping them would destroy them)
	if grep -A1 '"logits": \[' "$tmp/unsigned.json" | grep -q '"offset": -127,'; then ok "unsigned: logits zero point 127"; else
		bad "unsigned: logits: $(grep -A1 '"logits": \[' "$tmp/unsigned.json" | tail -1)"; fi
	# plain --act-symmetric puts the same post-ReLU tensor on [0,254] with zero point 127
	if grep -A1 '"r1": \[' "$tmp/symmetric.json" | grep -q '"offset": -127,'; then ok "symmetric: r1 zero point 127"; else
		bad "symmetric: r1: $(grep -A1 '"r1": \[' "$tmp/symmetric.json" | tail -1)"; fi
	min_sqnr unsigned 15
fi
q unsigned16 --act-symmetric=unsigned --act-type uint16

# ---------------------------------------------------------------- --weight-method mse
# int8 channels of 27..288 weights never gain from clipping (rounding error N s^2/12 is far below
# the cost of clipping the largest weight by 1%); int4's 16x coarser step does
if q wmse --weight-method mse --weight-type int4 && q wmse2 --weight-method mse --weight-type int4 &&
	q wminmax --weight-method minmax --weight-type int4 && q wdefault --weight-type int4; then
	if cmp -s "$tmp/wmse.onnx" "$tmp/wmse2.onnx"; then ok "wmse: deterministic"; else bad "wmse: two runs differ"; fi
	if ! cmp -s "$tmp/wmse.onnx" "$tmp/wminmax.onnx"; then ok "wmse: differs from minmax"; else
		bad "wmse: same bytes as minmax"; fi
	if cmp -s "$tmp/wminmax.onnx" "$tmp/wdefault.onnx"; then ok "wminmax: minmax is the default"; else
		bad "wminmax: --weight-method minmax differs from the default"; fi
	min_sqnr wmse 5
fi
q wmse_asym --weight-method mse --weight-asymmetric --granularity tensor
q wmse_block --weight-method mse --weight-type int4 --granularity block --block-size 4
if "$onnxq" quantize "$model" -o "$tmp/wonly.onnx" --weight-only --op-types Conv,Gemm --weight-method mse \
	--quiet 2>"$tmp/err"; then ok "wmse: --weight-only"; else bad "wmse: --weight-only: $(head -c 300 "$tmp/err")"; fi

# ---------------------------------------------------------------- impossible combinations
keep=$tmp/keep.onnx
# refuse CODE NAME PATTERN OPTS...: exit CODE, stderr's first line matches PATTERN, $keep untouched
refuse() {
	local want=$1 name=$2 pat=$3
	shift 3
	echo "previous content" >"$keep"
	"$onnxq" quantize "$model" -o "$keep" --quiet "$@" >/dev/null 2>"$tmp/err"
	local got=$?
	if [ "$got" -ne "$want" ]; then bad "$name: exit $got, expected $want: $(head -c 300 "$tmp/err")"; return; fi
	if head -1 "$tmp/err" | grep -qE -- "$pat"; then ok "$name (exit $got)"; else
		bad "$name: message: $(head -c 300 "$tmp/err")"; fi
	[ "$(cat "$keep")" = "previous content" ] || bad "$name: output changed"
}
C=(--calib "$calib")
refuse 1 "fp8 blocked weights" "float8e4m3fn.*granularity" "${C[@]}" --weight-type float8e4m3fn --granularity block
refuse 1 "fp8 asymmetric weights" "float8e4m3fn.*weight-asymmetric" "${C[@]}" --weight-type float8e4m3fn --weight-asymmetric
refuse 1 "fp8 reduce-range" "reduce-range" "${C[@]}" --weight-type float8e4m3fn --reduce-range
refuse 1 "fp8 with --profile trt" "profile trt.*weight-type" "${C[@]}" --profile trt --weight-type float8e4m3fn
refuse 1 "fp8 acts with --profile trt" "profile trt" "${C[@]}" --profile trt --act-type float8e4m3fn
refuse 3 "fp8 below opset 19" "opset 19" "${C[@]}" --act-type float8e4m3fn --opset 17
refuse 1 "other float8 types" "act-type is" "${C[@]}" --act-type float8e5m2
refuse 1 "unsigned with int8 activations" "unsigned.*uint8 or uint16" "${C[@]}" --act-symmetric=unsigned --act-type int8
refuse 1 "unsigned with fp8" "unsigned.*uint8 or uint16" "${C[@]}" --act-symmetric=unsigned --act-type float8e4m3fn
refuse 1 "--act-symmetric=bogus" "act-symmetric" "${C[@]}" --act-symmetric=signed
refuse 1 "--weight-method bogus" "weight-method is minmax or mse" "${C[@]}" --weight-method entropy
cat >"$tmp/ov.json" <<'JSON'
{"tensors": {"r1": {"symmetric": false}}}
JSON
refuse 1 "fp8 activation override symmetric false" "r1.*float8e4m3fn.*symmetric" "${C[@]}" --act-type float8e4m3fn --overrides "$tmp/ov.json"
cat >"$tmp/ov2.json" <<'JSON'
{"tensors": {"r1": {"dtype": "int8"}}}
JSON
refuse 1 "unsigned override on a signed type" "r1.*unsigned.*int8" "${C[@]}" --act-symmetric=unsigned --overrides "$tmp/ov2.json"

finish
