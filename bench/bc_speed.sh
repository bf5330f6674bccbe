#!/usr/bin/env bash
# bc_speed.sh - what `onnxq quantize` spends per stage with the default empirical bias
# correction: the "calibrate" stage (executor + observers) and the "quantize" stage (Q/DQ
# placement, then bias correction: the float model once and the quantized candidates over the
# calibration samples), wall seconds and peak RSS, for one build or two side by side (REF: an
# older build to compare with; both must write the same model, checked with cmp).
#
# Samples: the acceptance harness' calibration samples (.cache/acc/data-*/, made by
# tests/integration/quant_accuracy.sh), REP times over (symlinks; default 4: 64 images for the
# torchvision models and rec, 16 for det).
#
# usage: bench/bc_speed.sh [REF_ONNXQ]   env: OQ_BUILD (default <repo>/build; Release
#   recommended), OQ_CACHE, THREADS (default 1), REP (default 4)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
CACHE=${OQ_CACHE:-$ROOT/.cache}
BUILD=${OQ_BUILD:-$ROOT/build}
NEW=$BUILD/onnxq
REF=${1:-}
THREADS=${THREADS:-1}
REP=${REP:-4}
DATA=$(acc_data "$CACHE") || exit 1
[ -x "$NEW" ] || { echo "bc_speed: $NEW missing (build first)" >&2; exit 1; }
[ -z "$REF" ] || [ -x "$REF" ] || { echo "bc_speed: $REF is not an executable" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

MODELS="mobilenet_v2|$CACHE/tv/mobilenet_v2.onnx|$DATA/img/calib
resnet18|$CACHE/tv/resnet18.onnx|$DATA/img/calib
ocr_rec|$CACHE/ocr/ch_PP-OCRv4_rec_infer.onnx|$DATA/rec/calib
ocr_det|$CACHE/ocr/ch_PP-OCRv4_det_infer.onnx|$DATA/det/calib"

# stages BIN MODEL DIR OUT: "calibrate_s quantize_s rss_mb"
stages() {
	/usr/bin/time -f 'rss_kb=%M' -o "$tmp/time" "$1" quantize "$2" -o "$4" --calib "$3" \
		--threads "$THREADS" --verbose 2>"$tmp/log" >/dev/null
	awk '/^timings:/ { for (i = 1; i <= NF; i++) { if ($i == "calibrate") c = $(i + 1);
		if ($i == "quantize") q = $(i + 1) } } END { printf "%s %s", c, q }' "$tmp/log"
	sed -n 's/rss_kb=\([0-9]*\)/ \1/p' "$tmp/time" | awk '{ printf " %.0f\n", $1 / 1024 }'
}

printf '%-13s %7s %8s %11s %10s %7s' model samples threads calibrate_s quantize_s rss_mb
[ -n "$REF" ] && printf ' %15s %14s %10s %9s' ref_calibrate_s ref_quantize_s ref_rss_mb quant/ref
printf '\n'
while IFS='|' read -r name model dir; do
	[ -f "$model" ] && [ -d "$dir" ] || { printf '%-13s skipped (missing %s)\n' "$name" "$model"; continue; }
	i=$(rep_dir "$dir" "$REP" "$tmp/rep")
	read -r c q m <<<"$(stages "$NEW" "$model" "$tmp/rep" "$tmp/new.onnx")"
	printf '%-13s %7d %8d %11s %10s %7s' "$name" "$i" "$THREADS" "$c" "$q" "$m"
	if [ -n "$REF" ]; then
		read -r rc rq rm_ <<<"$(stages "$REF" "$model" "$tmp/rep" "$tmp/ref.onnx")"
		printf ' %15s %14s %10s %9.2f' "$rc" "$rq" "$rm_" "$(echo "$q / $rq" | bc -l)"
		cmp -s "$tmp/new.onnx" "$tmp/ref.onnx" || printf '  (models differ)'
	fi
	printf '\n'
done <<<"$MODELS"
