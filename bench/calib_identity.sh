#!/usr/bin/env bash
# calib_identity.sh - a calibration speed-up must not change a single byte (a comparison of two
# builds, so it lives in bench/ and tests/run_all.sh does not run it):
# models quantized by ONNXQ (the build under test) are cmp-identical to the
# ones a reference build REF (e.g. main's Release binary, built before the
# change) writes, on the bench models and the acceptance harness' samples:
#   mobilenet_v2 (16 samples) and PaddleOCR det (4 pages), default method
#   (mse), with the default empirical bias correction and with
#   --no-bias-correction; ONNXQ at --threads 1 and 2, REF at 1 (its own
#   thread-independence is stats_cli.sh's business);
#   plus --method percentile and entropy on mobilenet_v2 (the other histogram
#   readers) and minmax on det; control: REF on 8 of the 16 samples gives
#   another model.
# Models and samples come from OQ_CACHE (tests/integration/fetch.sh,
# torchvision_export.py, quant_accuracy.sh); missing ones are skipped.
# usage: bench/calib_identity.sh ONNXQ REF   Closing line: "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
onnxq=${1:-$root/build/onnxq}
ref=${2:?usage: calib_identity.sh ONNXQ REF (the reference binary)}
cache=${OQ_CACHE:-$root/.cache}
data=$(ls -d "$cache"/acc/data-* 2>/dev/null | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
skip=0

ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; }

# name|model|calib folder
MODELS="mobilenet_v2|$cache/tv/mobilenet_v2.onnx|$data/img/calib
ocr_det|$cache/ocr/ch_PP-OCRv4_det_infer.onnx|$data/det/calib"

# check NAME MODEL DIR OPTIONS...: REF at 1 thread, ONNXQ at 1 and 2, cmp.
check() {
	local name=$1 model=$2 dir=$3
	shift 3
	local tag="$name ${*:-(default)}"
	if ! "$ref" quantize "$model" -o "$tmp/ref.onnx" --calib "$dir" --threads 1 "$@" 2>"$tmp/err"; then
		bad "$tag: the reference failed: $(tail -1 "$tmp/err")"
		return
	fi
	for t in 1 2; do
		if ! "$onnxq" quantize "$model" -o "$tmp/new.onnx" --calib "$dir" --threads "$t" "$@" 2>"$tmp/err"; then
			bad "$tag --threads $t: failed: $(tail -1 "$tmp/err")"
		elif cmp -s "$tmp/ref.onnx" "$tmp/new.onnx"; then
			ok "$tag --threads $t: byte-identical to the reference"
		else
			bad "$tag --threads $t: differs from the reference"
		fi
	done
}

while IFS='|' read -r name model dir; do
	if [ -z "$data" ] || [ ! -f "$model" ] || [ ! -d "$dir" ]; then
		echo "skip  $name (missing $model or its samples)"
		skip=$((skip + 1))
		continue
	fi
	check "$name" "$model" "$dir"
	check "$name" "$model" "$dir" --no-bias-correction
	if [ "$name" = mobilenet_v2 ]; then
		check "$name" "$model" "$dir" --no-bias-correction --method percentile
		check "$name" "$model" "$dir" --no-bias-correction --method entropy
	else
		check "$name" "$model" "$dir" --no-bias-correction --method minmax
	fi
done <<<"$MODELS"

# control: fewer samples give another model, so cmp can fail
name=mobilenet_v2
model=$cache/tv/mobilenet_v2.onnx
if [ -n "$data" ] && [ -f "$model" ] &&
	"$ref" quantize "$model" -o "$tmp/ref.onnx" --calib "$data/img/calib" --calib-limit 8 --no-bias-correction 2>/dev/null &&
	"$onnxq" quantize "$model" -o "$tmp/new.onnx" --calib "$data/img/calib" --no-bias-correction 2>/dev/null; then
	if cmp -s "$tmp/ref.onnx" "$tmp/new.onnx"; then
		bad "control: 8 and 16 samples give the same model"
	else
		ok "control: 8 and 16 samples give different models"
	fi
fi

[ "$skip" -eq 0 ] || echo "($skip models skipped)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
