#!/usr/bin/env bash
# weight_only_rss.sh - peak memory of weight-only int4 quantization on a model
# far larger than what it should need.
#
# Makes a synthetic MatMul/Add chain with bench/make_big.c (default D=8192,
# L=12: 12 float32 [8192, 8192] weights, about 3.2 GB, written with external
# data because it passes the 2 GB protobuf limit), then runs weight-only int4
# blocked (block 32, axis 0) on it under /usr/bin/time -v and reports the peak
# RSS against the model size. The loader mmaps the external data, the weights
# are read in place and their pages are released (madvise) once quantized,
# so the peak should be near the quantized output (~1/8 of the model plus
# scales), not the model. Until the CLI wires `onnxq quantize --weight-only`
# the run uses bench/weight_only_driver.c (same library calls).
# The big files are deleted at the end (also on failure).
#
# usage: bench/weight_only_rss.sh [D [L]]
# env:   OQ_BENCH_BUILD (Release build dir, default <repo>/build-bench),
#        OQ_BENCH_TMP (where the model goes, default /tmp)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${OQ_BENCH_BUILD:-$root/build-bench}
D=${1:-8192}
L=${2:-12}
work=$(mktemp -d "${OQ_BENCH_TMP:-/tmp}/oq_wo_rss.XXXXXX")
trap 'rm -rf "$work"' EXIT
note() { echo "weight_only_rss.sh: $*" >&2; }

need=$(( D * D * 4 * L * 13 / 10 / 1024 / 1024 ))
avail=$(df -Pm "$work" | awk 'NR==2 {print $4}')
if [ "$avail" -lt "$need" ]; then
  note "need about $need MB free in $work, have $avail MB"; exit 1
fi

note "building Release libraries in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DONNXQ_TESTS=OFF >"$work/build.log" 2>&1
make -C "$build" -j2 onnxq_passes onnxq_core onnx_proto >>"$work/build.log" 2>&1 ||
  { note "build failed:"; tail -20 "$work/build.log" >&2; exit 1; }
flags=(-std=c11 -O2 -Wall -Wextra -Wpedantic -Wshadow -Wvla -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
       -I"$root")
cc "${flags[@]}" "$root/bench/make_big.c" "$build/libonnxq.a" \
  $(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm -o "$work/make_big"
cc "${flags[@]}" "$root/bench/weight_only_driver.c" "$build/libonnxq.a" \
  $(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm -o "$work/driver"

note "generating D=$D L=$L"
"$work/make_big" "$work/big.onnx" "$D" "$L"
model_bytes=$(du -cb "$work"/big.onnx* | tail -1 | cut -f1)
sync
# drop what generating left in the page cache of this file is not possible
# without root; RSS counts only pages this process maps, so it does not matter.

note "weight-only int4 block 32"
/usr/bin/time -v "$work/driver" "$work/big.onnx" "$work/q.onnx" int4 block 32 2>"$work/time.log" ||
  { cat "$work/time.log" >&2; exit 1; }
grep weight_only_driver "$work/time.log" >&2
peak_kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$work/time.log")
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time.log")
out_bytes=$(du -cb "$work"/q.onnx* | tail -1 | cut -f1)

awk -v mb="$model_bytes" -v pk="$peak_kb" -v ob="$out_bytes" -v w="$wall" -v d="$D" -v l="$L" 'BEGIN {
  printf "| model | size | output | peak RSS | peak / model | wall |\n|---|---|---|---|---|---|\n"
  printf "| MatMul chain %d x [%d,%d] fp32 | %.0f MB | %.0f MB | %.0f MB | %.2f | %s |\n",
    l, d, d, mb / 1048576, ob / 1048576, pk / 1024, pk * 1024 / mb, w
}'
