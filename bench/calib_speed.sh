#!/usr/bin/env bash
# calib_speed.sh - calibration throughput against plain inference, side by side
# in one run (issue 5's speed target: calibration >= 0.8x ONNX Runtime's
# inference throughput on the same model and samples, observers costing
# < 25 % over a bare executor run).
#
# Per model, THREADS threads on both sides (default 1), the acceptance harness' calibration samples
# (.cache/acc/data-*/, made by tests/integration/quant_accuracy.sh):
#   calib   `onnxq quantize --verbose`: the "calibrate" stage time (executor +
#           observers over every sample; Conv+activation groups stay fused as
#           calibration declines their OQ_QM_INTERNAL intermediates) -> samples/s
#   run     `onnxq run --data DIR` wall time (bare executor + .npy loading)
#   ort     onnxruntime-node 1.30, level 'all', median session.run over REP x n runs
#           (as many as the steady figure's samples: a few runs gave medians 1.7x apart
#           at 2 threads) (bench/exec_ort.js)
# Prints samples/s for each and the ratios calib/ort and calib/run.
# steady: the same quantize over REP x the samples (symlinks cycling through
#   them; default REP 4): (REP - 1) n extra samples over the extra calibrate
#   time, i.e. the per-sample rate without the fixed costs (executor plan,
#   the per-tensor range search) that n samples amortise -> steady_s/s and
#   steady/ort; fixed_s = the 16-sample time minus n / steady.
#
# usage: bench/calib_speed.sh   env: OQ_BUILD (default <repo>/build, Release recommended), OQ_CACHE,
#   THREADS (onnxq --threads and ORT's intra-op threads; default 1), REP, METHOD (--method;
#   default: quantize's default, mse; METHOD=minmax gives the executor plus the min/max scan alone,
#   the floor under every histogram method)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
CACHE=${OQ_CACHE:-$ROOT/.cache}
BUILD=${OQ_BUILD:-$ROOT/build}
ONNXQ=$BUILD/onnxq
ORT=$CACHE/ort/node_modules/onnxruntime-node
DATA=$(acc_data "$CACHE") || exit 1
[ -x "$ONNXQ" ] || { echo "calib_speed: $ONNXQ missing (build first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name|model|calib folder|input name|shape
MODELS="mobilenet_v2|$CACHE/tv/mobilenet_v2.onnx|$DATA/img/calib|input|1,3,224,224
resnet18|$CACHE/tv/resnet18.onnx|$DATA/img/calib|input|1,3,224,224
ocr_rec|$CACHE/ocr/ch_PP-OCRv4_rec_infer.onnx|$DATA/rec/calib|x|1,3,48,640
ocr_det|$CACHE/ocr/ch_PP-OCRv4_det_infer.onnx|$DATA/det/calib|x|1,3,320,480"

REP=${REP:-4}
THREADS=${THREADS:-1}
METHOD_ARG=()
[ -z "${METHOD:-}" ] || METHOD_ARG=(--method "$METHOD")
now() { date +%s.%N; }
# calib_time MODEL DIR: the "calibrate" stage time of quantize (seconds)
calib_time() {
	"$ONNXQ" quantize "$1" -o "$tmp/q.onnx" --calib "$2" --threads "$THREADS" "${METHOD_ARG[@]}" --verbose 2>&1 |
		sed -n 's/.*calibrate \([0-9.]*\) s.*/\1/p' | tail -1
}
printf '%-14s %7s %12s %12s %12s %10s %10s %12s %11s %8s\n' model samples calib_s/s run_s/s ort_s/s \
	calib/ort calib/run steady_s/s steady/ort fixed_s
while IFS='|' read -r name model dir input shape; do
	[ -f "$model" ] && [ -d "$dir" ] || { printf '%-14s skipped (missing %s)\n' "$name" "$model"; continue; }
	n=$(ls "$dir" | wc -l)
	cal=$(calib_time "$model" "$dir")
	rep_dir "$dir" "$REP" "$tmp/rep" >/dev/null
	cal_rep=$(calib_time "$model" "$tmp/rep")
	t0=$(now)
	"$ONNXQ" run "$model" --data "$dir" --threads "$THREADS" >/dev/null
	t1=$(now)
	ort_ms=$(node "$ROOT/bench/exec_ort.js" "$ORT" "$model" "$input=$shape" "$THREADS" "$((REP * n))" all 2>/dev/null |
		sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
	awk -v name="$name" -v n="$n" -v cal="$cal" -v run="$(echo "$t1 - $t0" | bc)" -v ort="$ort_ms" \
		-v rep="$REP" -v cal_rep="$cal_rep" 'BEGIN {
		c = n / cal; r = n / run; o = 1000 / ort
		s = cal_rep > cal ? (rep - 1) * n / (cal_rep - cal) : 0
		f = s > 0 ? cal - n / s : 0
		printf "%-14s %7d %12.2f %12.2f %12.2f %10.2f %10.2f %12.2f %11.2f %8.3f\n", name, n, c, r, o,
			c / o, c / r, s, s / o, f }'
done <<<"$MODELS"
