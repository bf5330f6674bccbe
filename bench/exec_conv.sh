#!/usr/bin/env bash
# exec_conv.sh - the executor's speed against ONNX Runtime on Conv-heavy
# models: ResNet-50 (BatchNormalization unfolded, [1,3,224,224]),
# MobileNetV2 (folded, depthwise convolutions, [1,3,224,224]) and the
# PaddleOCR v4 detector ([1,3,640,640]); a U2-Net-style U-Net (dilated
# 3x3 convs, bilinear Resize, Concat; [1,3,320,320]); and on a transformer, torchvision's
# vit_b_16 ([1,3,224,224]; exported without constant folding, so weights sit
# behind Transpose / Identity: the executor's plan folds them).
#
# Builds bench/exec_bench.c against an existing build directory (the
# executor's static libraries), then for each model prints the median
# time of onnxq (oq_exec_run) and of ORT (onnxruntime-node, optimisation
# level 'all', i.e. ORT's real speed with Conv+BN folding and activation
# fusion) for 1 and 2 threads, and the ratio onnxq / ORT (target <= 1.25).
# It also checks that onnxq's outputs are bit-identical for 1 and 2 threads,
# and prints per model: the executor's fused Conv groups, GFLOP/s of onnxq
# and ORT at 1 thread (Conv/Gemm/MatMul FLOPs over median CPU time), onnxq's
# GFLOP/s as a fraction of the machine's single-core sgemm peak (oq_peak:
# bench/sgemm_peak.c, OpenBLAS sgemm at n = 2048, measured once per run of
# this script), and a memory line (peak RSS of exec_bench over its timed
# runs vs initializers + 2 x the executor's peak of live activations; also
# without the process's RSS before loading the model, base_mb).
# Absent models are skipped (ResNet-50: bench/make_resnet50.py;
# MobileNetV2: bench/exec_make_mobilenet_v2.py; U-Net: bench/exec_make_unet.py; OCR and ORT:
# tests/integration/fetch.sh; vit_b_16: tests/integration/torchvision_export.py
# via torchvision_ort.sh). Use a Release build for meaningful numbers.
#
# usage: bench/exec_conv.sh [MODEL_FILTER]
# env: OQ_BUILD (default <repo>/build), OQ_CACHE (default <repo>/.cache), RUNS (default 10)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OQ_CACHE:-$ROOT/.cache}
BUILD=${OQ_BUILD:-$ROOT/build}
RUNS=${RUNS:-10}
FILTER=${1:-}
ORT=$CACHE/ort/node_modules/onnxruntime-node
# onnxq sets OpenBLAS to one thread itself (it runs its own pool), but OpenBLAS starts its
# workers at load time and they spin (sched_yield) for a while: that would show as CPU time
# of the first runs
export OPENBLAS_NUM_THREADS=1

for lib in libonnxq.a; do
	[ -f "$BUILD/$lib" ] || { echo "exec_conv: $BUILD/$lib missing: build first (cmake -DCMAKE_BUILD_TYPE=Release)" >&2; exit 1; }
done
cc -std=c11 -O2 -Wall -Wextra -Wpedantic -Wshadow -Wvla -D_POSIX_C_SOURCE=200809L \
	-I"$ROOT" "$ROOT/bench/exec_bench.c" -o "$BUILD/exec_bench" \
	"$BUILD/libonnxq.a" $(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm
cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L $(pkg-config --cflags openblas) "$ROOT/bench/sgemm_peak.c" \
	-o "$BUILD/sgemm_peak" $(pkg-config --libs openblas) -lm
PEAK=$("$BUILD/sgemm_peak" 2048 5 | awk '{for (i = 1; i <= NF; i++) if (index($i, "gflops=") == 1) { sub("gflops=", "", $i); print $i }}')
echo "sgemm peak (OpenBLAS, 1 core, n=2048): ${PEAK:-?} GFLOP/s; load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

# name|file|input name|shape
MODELS="resnet50|$CACHE/bench/resnet50.onnx|input|1,3,224,224
mobilenet_v2|$CACHE/bench/mobilenet_v2.onnx|input|1,3,224,224
ocr_det|$CACHE/ocr/ch_PP-OCRv4_det_infer.onnx|x|1,3,640,640
vit_b_16|$CACHE/tv/vit_b_16.onnx|input|1,3,224,224
unet|$CACHE/bench/unet.onnx|input|1,3,320,320"

field() { # tool threads key <output
	awk -v t="$2" -v tool="$1" -v key="$3" '$1 == tool && $2 == "threads=" t {
		for (i = 3; i <= NF; i++) if (index($i, key "=") == 1) { sub(key "=", "", $i); print $i } }'
}
ratio() { [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}' || echo -; }

# wall: median wall time per run; cpu: median process CPU time per run (1 thread only:
# the robust figure when other work shares the machine)
printf '%-14s %7s %10s %10s %6s %10s %10s %6s %8s %8s %7s %5s %7s\n' model threads onnxq_ms ort_ms ratio onnxq_cpu ort_cpu \
	ratio oq_gfs ort_gfs oq_peak fused chained
fails=0
while IFS='|' read -r name file input shape; do
	[ -n "$FILTER" ] && [[ $name != *$FILTER* ]] && continue
	if [ ! -f "$file" ]; then
		printf '%-14s skipped: %s missing\n' "$name" "$file"
		continue
	fi
	out=$("$BUILD/exec_bench" "$file" --threads 1,2 --runs "$RUNS" --shape "$shape" --check 2>&1) || {
		printf '%-14s onnxq failed: %s\n' "$name" "$(echo "$out" | tail -1)"
		fails=$((fails + 1))
		continue
	}
	grep -q 'bit-identical' <<<"$out" || { echo "$name: outputs differ between thread counts"; fails=$((fails + 1)); }
	if [ -d "$ORT" ]; then
		ort=$(node "$ROOT/bench/exec_ort.js" "$ORT" "$file" "$input=$shape" 1,2 "$RUNS" all 2>&1) || {
			printf '%-14s ORT failed: %s\n' "$name" "$(echo "$ort" | tail -1)"
			ort=""
		}
	else
		ort=""
	fi
	for t in 1 2; do
		a=$(field onnxq "$t" median_ms <<<"$out")
		b=$(field ort "$t" median_ms <<<"$ort")
		ac=$(field onnxq "$t" cpu_ms <<<"$out")
		bc=$(field ort "$t" cpu_ms <<<"$ort")
		gf=$(field onnxq "$t" gflop <<<"$out")
		fu=$(field onnxq "$t" fused <<<"$out")
		ch=$(field onnxq "$t" chained <<<"$out")
		if [ "$t" != 1 ]; then ac=-; bc=; fi
		gfs=$( [ "$ac" != - ] && ratio "$(awk -v g="$gf" 'BEGIN{print g*1000}')" "$ac" || echo -)
		printf '%-14s %7s %10s %10s %6s %10s %10s %6s %8s %8s %7s %5s %7s\n' "$name" "$t" "$a" "${b:--}" \
			"$(ratio "$a" "$b")" "$ac" "${bc:--}" "$( [ -n "$bc" ] && ratio "$ac" "$bc" || echo -)" "$gfs" \
			"$( [ -n "$bc" ] && ratio "$(awk -v g="$gf" 'BEGIN{print g*1000}')" "$bc" || echo -)" \
			"$( [ "$gfs" != - ] && [ -n "$PEAK" ] && ratio "$gfs" "$PEAK" || echo -)" "${fu:--}" "${ch:--}"
	done
	printf '%-14s %s\n' "$name" "$(grep '^mem ' <<<"$out" | cut -c5-)"
done <<<"$MODELS"
exit $((fails > 0))
