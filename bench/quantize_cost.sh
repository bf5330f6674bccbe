#!/usr/bin/env bash
# quantize_cost.sh - what a whole default `onnxq quantize` costs against inference (issue 18,
# items 5 and 6: wall time <= 3x ONNX Runtime running the calibration samples once, same
# threads, >= 100 samples; peak RSS <= 2x `onnxq run`'s on the same model and threads).
#
# Per model, side by side in one run, THREADS threads everywhere (default 2):
#   ort       ONNX Runtime (onnxruntime-node, level 'all') over the samples once
#             (bench/ort_samples.js: session.run time alone, one warm-up excluded); run before
#             and after quantize, the mean of the two taken (the machine's load moves)
#   quantize  `onnxq quantize MODEL --calib DIR` with default options (+ --verbose for the
#             step times), under /usr/bin/time: wall, CPU (user + system), peak RSS
#   run       `onnxq run MODEL --data DIR`: peak RSS (and wall)
# Samples: the acceptance harness' calibration samples (.cache/acc/data-*/, made by
# tests/integration/quant_accuracy.sh) repeated (symlinks) up to at least N (default 100).
# Prints per model: samples, ORT wall / CPU, quantize wall / CPU, the ratios, peak RSS of quantize
# and run and their ratio; then (STEPS=1, the default) each model's step times (wall / CPU s)
# from the "steps:" line of --verbose, and the model runs each step made ("model runs:" line). With
# REF=PATH (an older onnxq), the same quantize by it too, its wall / CPU / RSS, and whether both
# wrote the same bytes.
# ORT's CPU time with 2 threads counts its pool threads' spinning: compare walls first.
#
# usage: bench/quantize_cost.sh [MODEL_NAME ...]   (names: ocr_det ocr_rec ocr_cls mobilenet_v2)
#   env: OQ_BUILD (default <repo>/build; Release), OQ_CACHE, THREADS (2), N (100), REF, STEPS (1)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
CACHE=${OQ_CACHE:-$ROOT/.cache}
BUILD=${OQ_BUILD:-$ROOT/build}
ONNXQ=$BUILD/onnxq
ORT=$CACHE/ort/node_modules/onnxruntime-node
THREADS=${THREADS:-2}
N=${N:-100}
REF=${REF:-}
STEPS=${STEPS:-1}
[ -x "$ONNXQ" ] || { echo "quantize_cost: $ONNXQ missing (build first)" >&2; exit 1; }
[ -z "$REF" ] || [ -x "$REF" ] || { echo "quantize_cost: REF $REF is not an executable" >&2; exit 1; }
[ -d "$ORT" ] || { echo "quantize_cost: no $ORT (onnxruntime-node)" >&2; exit 1; }
DATA=$(acc_data "$CACHE") || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

MODELS=
for key in det rec cls mobilenet_v2; do
	read -r model set <<<"$(acc_model "$key" "$CACHE")"
	MODELS+="$([ "$set" = img ] && echo "$key" || echo "ocr_$key")|$model|$DATA/$set/calib"$'\n'
done

# ort MODEL DIR: "wall cpu" of ORT over DIR once
ort() {
	node "$ROOT/bench/ort_samples.js" "$ORT" "$1" "$2" "$THREADS" |
		sed -n 's/.*wall_s=\([0-9.]*\) cpu_s=\([0-9.]*\).*/\1 \2/p'
}
# timed OUT_PREFIX CMD...: runs CMD under /usr/bin/time; "wall cpu rss_mb" into OUT_PREFIX.t,
# its stderr into OUT_PREFIX.log
timed() {
	local out=$1
	shift
	/usr/bin/time -f '%e %U %S %M' -o "$out.time" "$@" >/dev/null 2>"$out.log"
	awk '{ printf "%s %.2f %.1f\n", $1, $2 + $3, $4 / 1024 }' "$out.time" >"$out.t"
}

printf '%-13s %7s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n' model samples ort_s ort_cpu q_wall q_cpu \
	wall/ort cpu/ort q_rss_mb run_rss rss/run
[ -n "$REF" ] && printf '%-13s %7s %8s %8s %8s %8s %8s %8s %8s\n' '' '' '' '' ref_wall ref_cpu \
	wall/ort '' ref_rss
steps=
runs=
while IFS='|' read -r name model dir; do
	if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
		continue
	fi
	[ -f "$model" ] && [ -d "$dir" ] || { printf '%-13s skipped (missing %s)\n' "$name" "$model"; continue; }
	n=$(ls "$dir" | wc -l)
	rep=$(((N + n - 1) / n))
	ns=$(rep_dir "$dir" "$rep" "$tmp/rep")
	read -r ow1 oc1 <<<"$(ort "$model" "$tmp/rep")"
	timed "$tmp/q" "$ONNXQ" quantize "$model" -o "$tmp/q.onnx" --calib "$tmp/rep" --threads "$THREADS" --verbose
	[ -z "$REF" ] || timed "$tmp/r" "$REF" quantize "$model" -o "$tmp/r.onnx" --calib "$tmp/rep" --threads "$THREADS"
	read -r ow2 oc2 <<<"$(ort "$model" "$tmp/rep")"
	timed "$tmp/run" "$ONNXQ" run "$model" --data "$tmp/rep" --threads "$THREADS"
	read -r qw qc qm <"$tmp/q.t"
	read -r _ _ rm_ <"$tmp/run.t"
	ow=$(echo "($ow1 + $ow2) / 2" | bc -l)
	oc=$(echo "($oc1 + $oc2) / 2" | bc -l)
	awk -v name="$name" -v n="$ns" -v ow="$ow" -v oc="$oc" -v qw="$qw" -v qc="$qc" -v qm="$qm" -v rm="$rm_" 'BEGIN {
		printf "%-13s %7d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.0f %8.0f %8.2f\n", name, n, ow, oc, qw, qc,
			qw / ow, qc / oc, qm, rm, qm / rm }'
	if [ -n "$REF" ]; then
		read -r rw rc rrm <"$tmp/r.t"
		same=same
		cmp -s "$tmp/q.onnx" "$tmp/r.onnx" || same='MODELS DIFFER'
		awk -v rw="$rw" -v rc="$rc" -v rrm="$rrm" -v ow="$ow" -v same="$same" 'BEGIN {
			printf "%-13s %7s %8s %8s %8.2f %8.2f %8.2f %8s %8.0f  %s\n", "  ref", "", "", "", rw, rc,
				rw / ow, "", rrm, same }'
	fi
	steps+="$name: $(sed -n 's/^steps (wall \/ CPU s): //p' "$tmp/q.log")"$'\n'
	runs+="$name: $(sed -n 's/^model runs (whole \/ partial): //p' "$tmp/q.log")"$'\n'
done <<<"${MODELS%$'\n'}"
[ "$STEPS" = 0 ] || printf '\nsteps (wall / CPU s):\n%s\nmodel runs (whole / partial):\n%s' "$steps" "$runs"
