#!/usr/bin/env bash
# criterion.sh - the Criterion tests that need downloaded material: every
# tests/integration/*.c, built beside the unit tests as <build>/tests/NAME
# (passes_real: the rewrite passes on the PaddleOCR and torchvision models;
# weight_only_ort: a weight-only int4 model in ONNX Runtime).
#
# Fills the cache first: fetch.sh (ONNX Runtime, PaddleOCR) and, when
# python3 can import torch and torchvision, torchvision_export.py. Each
# Criterion test is one check, read from the executable's TAP report: ok,
# FAIL, or SKIP with the test's reason (a model that is not in the cache).
# A test the report does not list (a crash) fails.
#
# usage: tests/integration/criterion.sh [ONNXQ]   (default build/onnxq; the
#   executables are taken from <dir of ONNXQ>/tests/)
#   env OQ_CACHE (fetch.sh). Closing line "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
bin=$(dirname "$onnxq")/tests
py=/usr/bin/python3

cache=$("$here/fetch.sh" | tail -n 1) || die "fetch.sh failed"
export OQ_CACHE=$cache OQ_SOURCE_DIR=$root
if [ -x "$py" ] && "$py" -c 'import torch, torchvision' 2>/dev/null; then
	"$py" "$here/torchvision_export.py" "$cache/tv" resnet18 mobilenet_v2 mobilenet_v3_small \
		efficientnet_b0 squeezenet1_1 vit_b_16 >/dev/null || die "torchvision_export.py failed"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for src in "$here"/*.c; do
	name=$(basename "$src" .c)
	exe=$bin/$name
	if [ ! -x "$exe" ]; then
		bad "$name: $exe not built"
		continue
	fi
	echo "=== $name"
	: >"$tmp/$name.tap"
	"$exe" --jobs 1 --tap="$tmp/$name.tap"
	rc=$?
	planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$tmp/$name.tap")
	seen=0 failed=0
	while IFS= read -r line; do
		case $line in
		"not ok - "*)
			seen=$((seen + 1)) failed=$((failed + 1))
			bad "${line#not ok - }"
			;;
		"ok - "*"# SKIP "*)
			seen=$((seen + 1))
			line=${line#ok - }
			skip "${line%%  # SKIP *}: ${line#*# SKIP }"
			;;
		"ok - "*)
			seen=$((seen + 1))
			ok "${line#ok - }"
			;;
		esac
	done <"$tmp/$name.tap"
	[ "$seen" -eq "${planned:-0}" ] && [ "$seen" -gt 0 ] ||
		bad "$name: the report lists $seen of ${planned:-?} tests (exit $rc)"
	[ "$rc" -eq 0 ] || [ "$failed" -gt 0 ] || bad "$name: exit $rc without a failed test"
done
finish
