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
# Each model x mode is one test. Closes with "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
onnxq=${1:-$root/build/onnxq}
rt=${OQ_ROUNDTRIP:-$(dirname "$onnxq")/tests/roundtrip}
nodes=${OQ_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}
passed=0
failed=0

if [ ! -x "$rt" ]; then
	echo "roundtrip_node: roundtrip tool not found at $rt (build the tests first)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
if [ ! -d "$nodes" ]; then
	echo "roundtrip_node: $nodes missing (apt-get install libonnx-testdata)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # label, roundtrip args...
	local label=$1 out p f
	shift
	out=$("$rt" "$nodes" --tmpdir "$tmp" "$@" 2>&1)
	# A crash or sanitizer abort leaves no totals line: count it as a failure.
	if ! tail -n1 <<<"$out" | grep -Eq '^[0-9]+ passed, [0-9]+ failed$'; then
		echo "roundtrip_node [$label]: the roundtrip tool died:" >&2
		tail -n 20 <<<"$out" >&2
		failed=$((failed + 1))
		return
	fi
	grep -v -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out" | sed "s/^/[$label] /"
	read -r p _ f _ < <(tail -n1 <<<"$out")
	echo "roundtrip_node [$label]: $p passed, $f failed"
	passed=$((passed + p))
	failed=$((failed + f))
}

run plain
run external --external-data
run external-all --external-data --external-threshold 1
run self-test --self-test

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
