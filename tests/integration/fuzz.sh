#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer targets (tests/fuzz/) with clang and runs
# each for a bounded time on a seed corpus:
#   fuzz_load      model bytes: load, inspect, check, save, reload
#   fuzz_quantize  model bytes: rewrites, calibrate on random:1, quantize, save
#   fuzz_readers   .npy, overrides JSON, encodings JSON and stats files
#                  (seeds made here from models/tiny_cnn*)
#
# usage: tests/integration/fuzz.sh [BUILD_DIR | ONNXQ_BINARY]
#   BUILD_DIR   where to build (default: <repo>/build-fuzz; given the onnxq
#               binary, as run_all.sh does, the build-fuzz beside its build folder)
#   FUZZ_TIME   seconds to fuzz each target (default 60)
#   FUZZ_OUT    where crash/leak/timeout reproducers are kept on failure
#               (default: BUILD_DIR/fuzz-artifacts)
#
# The corpus is made fresh by tests/fuzz/make_corpus.sh (node-test models
# + the committed seeds). Any crash, sanitizer report, leak, timeout
# (-timeout=10) or memory blow-up (-rss_limit_mb=1024) fails that target's
# check, with the reproducer's path printed; one check per target. Without
# clang the checks are skipped.
set -u
. "$(dirname "$0")/lib.sh"

bdir=${1:-$root/build-fuzz}
# run_all.sh passes the onnxq binary: build beside its build folder instead
onnxq=$root/build/onnxq
[ -f "$bdir" ] && onnxq=$bdir
[ -f "$bdir" ] && bdir=$(cd "$(dirname "$bdir")/.." && pwd)/build-fuzz
time=${FUZZ_TIME:-60}

if ! command -v clang >/dev/null 2>&1; then
	skip "clang not found: the fuzz targets need clang's libFuzzer" 3
	finish
	exit
fi

mkdir -p "$bdir"
if ! cmake -S "$root" -B "$bdir" -DONNXQ_FUZZ=ON -DONNXQ_TESTS=OFF -DCMAKE_C_COMPILER=clang \
	>"$bdir/cmake.log" 2>&1; then
	cat "$bdir/cmake.log"
	die "cmake for the fuzz build failed"
fi
if ! make -C "$bdir" -j2 fuzz_load fuzz_quantize fuzz_readers >"$bdir/make.log" 2>&1; then
	tail -30 "$bdir/make.log"
	die "building the fuzz targets failed"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/oq-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/rcorpus"
"$root/tests/fuzz/make_corpus.sh" "$work/corpus" 400 || die "make_corpus.sh failed"
# reader seeds: a selector byte (0 npy, 1 overrides, 2 encodings, 3 stats) + a file
{ printf '\000'; cat "$root/models/tiny_cnn_test/000.npy"; } >"$work/rcorpus/npy"
{ printf '\001'; echo '{"tensors": {"x": {"dtype": "int16", "symmetric": true}}, "nodes": {"relu": {"exclude": true}}}'; } >"$work/rcorpus/overrides"
{ printf '\002'; echo '{"version": "0.6.1", "activation_encodings": {"x": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "False", "max": 1.0, "min": -1.0, "offset": -128, "scale": 0.0078}]}, "param_encodings": {}}'; } >"$work/rcorpus/encodings"
if [ -x "$onnxq" ]; then
	"$onnxq" calibrate "$root/models/tiny_cnn.onnx" --calib random:2 --method minmax -o "$work/st.bin" --quiet 2>/dev/null &&
		{ printf '\003'; cat "$work/st.bin"; } >"$work/rcorpus/stats"
	"$onnxq" calibrate "$root/models/tiny_cnn.onnx" --calib random:2 --method mse -o "$work/sth.bin" --quiet 2>/dev/null &&
		{ printf '\003'; cat "$work/sth.bin"; } >"$work/rcorpus/stats_hist"
fi

# run_target TARGET CORPUS [ARGS...]: one check
run_target() {
	local name=$1 corpus=$2 rc execs arts out
	shift 2
	rm -rf "$work/art"
	mkdir -p "$work/art"
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1 \
		"$bdir/tests/fuzz/$name" "$corpus" "$@" -max_total_time="$time" \
		-rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$work/art/" >"$work/log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
	arts=$(ls -A "$work/art")
	if [ "$rc" -ne 0 ] || [ -n "$arts" ]; then
		out=${FUZZ_OUT:-$bdir/fuzz-artifacts}/$name
		mkdir -p "$out"
		[ -n "$arts" ] && cp "$work/art/"* "$out/"
		cp "$work/log" "$out/fuzz.log"
		grep -m5 -E 'ERROR|runtime error|fuzz_[a-z]*:|SUMMARY' "$work/log"
		for a in $arts; do
			echo "reproduce: $bdir/tests/fuzz/$name $out/$a"
		done
		bad "$name exited $rc after ${execs:-?} runs; log and reproducers in $out"
		return
	fi
	ok "$name: ${execs:-?} runs in ${time}s, no crash, leak or timeout"
}

run_target fuzz_load "$work/corpus" -dict="$root/tests/fuzz/onnx.dict"
run_target fuzz_quantize "$work/corpus" -dict="$root/tests/fuzz/onnx.dict"
run_target fuzz_readers "$work/rcorpus"
finish
