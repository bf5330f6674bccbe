#!/usr/bin/env bash
# Lossless load/save over the ONNX backend node tests (932 models).
#
#   tests/integration/roundtrip_node.sh [ONNXQ]
#
# Runs the roundtrip tool (tests/tools/roundtrip.c, built next to ONNXQ as
# <build>/tests/roundtrip) over every model.onnx of $OQ_NODE_TESTS (default
# /usr/share/libonnx-testdata/data/node) four times:
#   plain             load -> save -> load, deep compare, second save byte-identical
#   external          the same with --external-data (default threshold 1024)
#   external-all      --external-data --external-threshold 1 (every tensor external)
#   self-test         the comparison itself must catch small mutations
# Each model x mode is one test. Closes with "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
rt=${OQ_ROUNDTRIP:-$(dirname "$onnxq")/tests/roundtrip}
nodes=${OQ_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}

[ -x "$rt" ] || die "roundtrip tool not found at $rt (build the tests first)"
[ -d "$nodes" ] || die "$nodes missing (apt-get install libonnx-testdata)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # label, roundtrip args...
	local label=$1 out line
	shift
	out=$("$rt" "$nodes" --tmpdir "$tmp" "$@" 2>&1)
	line=$(tail -n1 <<<"$out")
	# A crash or sanitizer abort leaves no totals line: count it as a failure.
	if ! tally "$line"; then
		tail -n 20 <<<"$out"
		bad "[$label] the roundtrip tool died (above)"
		return
	fi
	grep -v -F -x "$line" <<<"$out" | sed "s/^/[$label] /"
	echo "roundtrip_node [$label]: $line"
}

run plain
run external --external-data
run external-all --external-data --external-threshold 1
run self-test --self-test

finish
