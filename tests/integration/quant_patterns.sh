#!/usr/bin/env bash
# quant_patterns.sh - the quantize pass's Q/DQ layouts judged by ONNX Runtime.
#
# tests/tools/quant_tool writes six small float models, one per placement
# pattern (Conv/Relu/MaxPool/Reshape/Gemm/Softmax; two Conv branches with a
# Clip(0,6) into Add/GlobalAveragePool/Flatten; a tensor with three
# consumers and two graph outputs; MatMul + bias + LeakyRelu + Gemm(beta);
# ConvTranspose/Relu/Resize/Slice/Pad/AveragePool; HardSigmoid/Mul/Split/
# Concat/Gather). Each is quantized with several option sets (default ORT
# layout, --profile trt, int8 symmetric activations, --keep-activations,
# per-tensor weights, blocked weights, int16 activations, float8e4m3fn
# activations and weights (per channel, per tensor), float8e4m3fn weights
# with uint8 activations, AIMET unsigned symmetric activations,
# --weight-method mse, hand ranges from an --overrides file) and for each result:
#   - `onnxq check` reports no problem;
#   - ONNX Runtime (onnxruntime-node, graphOptimizationLevel 'basic') loads
#     and runs it on a random input, and its outputs agree with onnxq's
#     executor: max|onnxq - ort| / max|ort| <= 1e-3 (run_ort.js compare), or
#     they differ by a rounding tie: the two runtimes sum in different orders,
#     so a Q input that lies exactly between two levels (an AveragePool of
#     FP8 levels can average to a midpoint) may round either way in one
#     element; then every Q's input and output is probed in both runtimes and
#     the first Q whose output differs must differ by one step where ORT's
#     input is within 1e-3 of a midpoint (quant_accuracy_eval.py ties, the
#     check of quant_accuracy.sh).
# usage: quant_patterns.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
build=$(dirname "$onnxq")
tool=$build/tests/quant_tool
cache=${OQ_CACHE:-$root/.cache}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# bad_err MSG: a failed check, followed by the first lines of $tmp/err
bad_err() { bad "$1"; [ -s "$tmp/err" ] && sed 's/^/      /' "$tmp/err" | head -5; }

[ -x "$onnxq" ] && [ -x "$tool" ] || die "$onnxq or $tool not built"
[ -d "$cache/ort/node_modules/onnxruntime-node" ] || die "ORT missing (run tests/integration/fetch.sh)"
export OQ_CACHE=$cache
"$tool" write "$tmp" || die "quant_tool failed"

# hand ranges for the cnn model (every activation the ORT layout quantizes)
cat >"$tmp/cnn_ranges.json" <<'JSON'
{"tensors": {"x": {"range": [0, 1]}, "r": {"range": [0, 3]}, "p": {"range": [0, 3]},
             "f": {"range": [0, 3]}, "logits": {"range": [-4, 4]}},
 "nodes": {"fc": {"granularity": "tensor"}}}
JSON

configs=(
	"default|"
	"trt|--profile trt"
	"int8sym|--act-type int8 --act-symmetric"
	"keepact|--keep-activations"
	"tensor|--granularity tensor"
	"block|--granularity block --block-size 2"
	"int16|--act-type int16"
	"fp8|--act-type float8e4m3fn --weight-type float8e4m3fn"
	"fp8tensor|--act-type float8e4m3fn --weight-type float8e4m3fn --granularity tensor --weight-method mse"
	"fp8w|--weight-type float8e4m3fn"
	"unsigned|--act-symmetric=unsigned"
	"wmse|--weight-method mse --weight-asymmetric"
)

# ties Q INPUT: the rounding-tie analysis of Q on INPUT (first line "ok ..." or "fail ...")
ties() {
	local q=$1 in=$2 ev="/usr/bin/python3 $here/quant_accuracy_eval.py"
	rm -rf "$tmp/tie_ort" "$tmp/tie_oq"
	$ev qprobe "$q" "$tmp/probe.onnx" >/dev/null 2>&1 || { echo "fail qprobe"; return 1; }
	node "$here/quant_patterns.js" "$tmp/probe.onnx" "$tmp/tie_ort" "x=$in" >/dev/null 2>&1 ||
		{ echo "fail ORT cannot run the probe model"; return 1; }
	"$onnxq" run "$tmp/probe.onnx" --input "x=$in" --output-dir "$tmp/tie_oq" >/dev/null 2>&1 ||
		{ echo "fail onnxq cannot run the probe model"; return 1; }
	# the whole report first, then its first line: `| head -1` under pipefail failed the
	# function whenever the analysis, still writing, died of SIGPIPE (a tie reported "ok"
	# counted as a failure)
	local out
	out=$($ev ties "$q" "$in" "$tmp/tie_ort" "$tmp/tie_oq" 2>&1)
	printf '%s\n' "${out%%$'\n'*}"
}

"$tool" list >"$tmp/list"
while read -r name dims; do
	node "$here/run_ort.js" random "$dims" 7 "$tmp/$name.in.npy" >/dev/null 2>&1 ||
		{ bad_err "$name: random input"; continue; }
	cfgs=("${configs[@]}")
	[ "$name" = cnn ] && cfgs+=("overrides|--overrides $tmp/cnn_ranges.json")
	for cfg in "${cfgs[@]}"; do
		tag=${cfg%%|*}
		opts=${cfg#*|}
		q=$tmp/$name.$tag.onnx
		: >"$tmp/err"
		# shellcheck disable=SC2086
		if ! "$onnxq" quantize "$tmp/$name.onnx" -o "$q" --calib random:8:3 --verify --quiet $opts \
			>"$tmp/err" 2>&1; then
			bad_err "$name/$tag: quantize"
			continue
		fi
		if ! grep -q '"QuantizeLinear"\|QuantizeLinear' <("$onnxq" inspect "$q" 2>&1); then
			echo "no QuantizeLinear in $q" >"$tmp/err"
			bad_err "$name/$tag: has Q/DQ"
			continue
		fi
		if "$onnxq" check "$q" >"$tmp/err" 2>&1; then ok "$name/$tag: check"; else bad_err "$name/$tag: check"; fi
		rm -rf "$tmp/oq" "$tmp/ort"
		if ! "$onnxq" run "$q" --input "x=$tmp/$name.in.npy" --output-dir "$tmp/oq" >"$tmp/err" 2>&1; then
			bad_err "$name/$tag: onnxq run"
			continue
		fi
		if ! node "$here/quant_patterns.js" "$q" "$tmp/ort" "x=$tmp/$name.in.npy" >"$tmp/err" 2>&1; then
			bad_err "$name/$tag: ORT loads and runs it"
			continue
		fi
		if node "$here/run_ort.js" compare "$tmp/oq" "$tmp/ort" 1e-3 >"$tmp/err" 2>&1; then
			ok "$name/$tag: onnxq == ORT ($(grep -o 'max[^,]*' "$tmp/err" | head -1))"
		elif tie=$(ties "$q" "$tmp/$name.in.npy") && [ "${tie%% *}" = ok ]; then
			ok "$name/$tag: onnxq == ORT but for a rounding tie (${tie#ok })"
		else
			echo "$tie" >>"$tmp/err"
			bad_err "$name/$tag: onnxq == ORT"
		fi
	done
done <"$tmp/list"

finish
