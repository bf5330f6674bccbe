#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer target (tests/fuzz/fuzz_load.c) with clang
# and runs it for a bounded time on a seed corpus.
#
# usage: tests/integration/fuzz.sh [BUILD_DIR | ONNXQ_BINARY]
#   BUILD_DIR   where to build (default: <repo>/build-fuzz; given the onnxq
#               binary, as run_all.sh does, the build-fuzz beside its build folder)
#   FUZZ_TIME   seconds to fuzz (default 60)
#   FUZZ_OUT    where crash/leak/timeout reproducers are kept on failure
#               (default: BUILD_DIR/fuzz-artifacts)
#
# The corpus is made fresh by tests/fuzz/make_corpus.sh (node-test models
# + the committed seeds). Any crash, sanitizer report, leak, timeout
# (-timeout=10) or memory blow-up (-rss_limit_mb=1024) fails the run:
# `0 passed, 1 failed`, exit 1, with the reproducer's path printed. Without
# clang the test is skipped (`0 passed, 0 failed, 1 skipped`, exit 0).
set -u
. "$(dirname "$0")/lib.sh"

bdir=${1:-$root/build-fuzz}
# run_all.sh passes the onnxq binary: build beside its build folder instead
[ -f "$bdir" ] && bdir=$(cd "$(dirname "$bdir")/.." && pwd)/build-fuzz
time=${FUZZ_TIME:-60}

if ! command -v clang >/dev/null 2>&1; then
	skip "clang not found: the fuzz target needs clang's libFuzzer"
	finish
	exit
fi

mkdir -p "$bdir"
if ! cmake -S "$root" -B "$bdir" -DONNXQ_FUZZ=ON -DONNXQ_TESTS=OFF -DCMAKE_C_COMPILER=clang \
	>"$bdir/cmake.log" 2>&1; then
	cat "$bdir/cmake.log"
	die "cmake for the fuzz build failed"
fi
if ! make -C "$bdir" -j2 fuzz_load >"$bdir/make.log" 2>&1; then
	tail -30 "$bdir/make.log"
	die "building fuzz_load failed"
fi
fuzzer=$bdir/tests/fuzz/fuzz_load

work=$(mktemp -d "${TMPDIR:-/tmp}/oq-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/art"
"$root/tests/fuzz/make_corpus.sh" "$work/corpus" 400 || die "make_corpus.sh failed"

"$fuzzer" "$work/corpus" -dict="$root/tests/fuzz/onnx.dict" -max_total_time="$time" \
	-rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
	-artifact_prefix="$work/art/" >"$work/log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
arts=$(ls -A "$work/art")
if [ "$rc" -ne 0 ] || [ -n "$arts" ]; then
	out=${FUZZ_OUT:-$bdir/fuzz-artifacts}
	mkdir -p "$out"
	[ -n "$arts" ] && cp "$work/art/"* "$out/"
	cp "$work/log" "$out/fuzz.log"
	grep -m5 -E 'ERROR|runtime error|fuzz_load:|SUMMARY' "$work/log"
	for a in $arts; do
		echo "reproduce: $fuzzer $out/$a"
	done
	die "fuzz_load exited $rc after ${execs:-?} runs; log and reproducers in $out"
fi
ok "fuzz_load: ${execs:-?} runs in ${time}s, no crash, leak or timeout"
finish
