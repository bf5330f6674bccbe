#!/usr/bin/env bash
# calib_methods.sh - the cost side of the method table (docs/accuracy.md, "Calibration methods"): for each
# acceptance model and each --method, the calibrate stage's seconds (`quantize --verbose`) and the
# whole quantize process's peak RSS (GNU time %M), 1 thread by default, bias correction off (it
# runs after the ranges and would dominate both figures). The accuracy side (SQNR, task metric) is
# tests/integration/quant_accuracy.sh's and bench/calib_cv.sh's.
#
# usage: bench/calib_methods.sh   env: OQ_BUILD (default <repo>/build, Release recommended),
#   OQ_CACHE, THREADS (default 1), METHODS (default "minmax ema percentile entropy mse")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OQ_CACHE:-$ROOT/.cache}
BUILD=${OQ_BUILD:-$ROOT/build}
ONNXQ=$BUILD/onnxq
THREADS=${THREADS:-1}
METHODS=${METHODS:-minmax ema percentile entropy mse}
DATA=$(ls -d "$CACHE"/acc/data-* 2>/dev/null | head -1)
[ -x "$ONNXQ" ] || { echo "calib_methods: $ONNXQ missing (build first)" >&2; exit 1; }
[ -n "$DATA" ] || { echo "calib_methods: no $CACHE/acc/data-*: run tests/integration/quant_accuracy.sh once" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "calib_methods: needs GNU time (apt-get install time)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name|model|calib folder
MODELS="ocr_rec|$CACHE/ocr/ch_PP-OCRv4_rec_infer.onnx|$DATA/rec/calib
ocr_det|$CACHE/ocr/ch_PP-OCRv4_det_infer.onnx|$DATA/det/calib
ocr_cls|$CACHE/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx|$DATA/cls/calib
mobilenet_v2|$CACHE/tv/mobilenet_v2.onnx|$DATA/img/calib
resnet18|$CACHE/tv/resnet18.onnx|$DATA/img/calib
efficientnet_b0|$CACHE/tv/efficientnet_b0.onnx|$DATA/img/calib"

printf '%-16s %7s' model samples
for m in $METHODS; do printf ' %18s' "$m s/MB"; done
echo
while IFS='|' read -r name model dir; do
	[ -f "$model" ] && [ -d "$dir" ] || { printf '%-16s skipped (missing %s)\n' "$name" "$model"; continue; }
	printf '%-16s %7d' "$name" "$(ls "$dir" | wc -l)"
	for m in $METHODS; do
		if /usr/bin/time -f 'rss_kb %M' "$ONNXQ" quantize "$model" -o "$tmp/q.onnx" --calib "$dir" \
			--method "$m" --no-bias-correction --threads "$THREADS" --verbose >"$tmp/log" 2>&1; then
			s=$(sed -n 's/.*calibrate \([0-9.]*\) s.*/\1/p' "$tmp/log" | tail -1)
			kb=$(sed -n 's/^rss_kb \([0-9]*\)$/\1/p' "$tmp/log" | tail -1)
			printf ' %18s' "$(awk -v s="$s" -v kb="$kb" 'BEGIN { printf "%.2f / %.0f", s, kb / 1024 }')"
		else
			printf ' %18s' "error"
		fi
	done
	echo
done <<<"$MODELS"
