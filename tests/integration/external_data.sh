#!/usr/bin/env bash
# External data written by onnxq, read back by ONNX Runtime and by onnxq.
#
#   tests/integration/external_data.sh [ONNXQ]
#
# Every ONNX backend node-test model ($OQ_NODE_TESTS) is converted with
# `onnxq convert --external-data --external-threshold 1`; the ones that hold
# tensors at all (Constant values, initializers, subgraph constants: a .data
# file is written) are then checked three ways, each one test:
#   onnxq   the copy loads to the same model as the original
#           (roundtrip --compare: IR + protobuf, tensors bitwise)
#   reload  the copy survives load -> save (external) -> load (roundtrip)
#   ort     ORT runs original and copy on test_data_set_0's inputs: outputs
#           bit-identical, and the copy meets output_K.pb within the ONNX
#           backend tolerance wherever ORT meets it on the original
# A model ORT cannot load or run in its original form is an ORT gap, not an
# onnxq one: its ort test is skipped. Closes with
# "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
rt=${OQ_ROUNDTRIP:-$(dirname "$onnxq")/tests/roundtrip}
nodes=${OQ_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}
[ -x "$rt" ] && [ -d "$nodes" ] || die "need $rt (build the tests) and $nodes (libonnx-testdata)"
"$here/fetch.sh" >/dev/null || die "fetch.sh failed"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cases=0
for dir in "$nodes"/*/; do
	c=$(basename "$dir")
	src=$dir/model.onnx
	[ -f "$src" ] || continue
	mkdir -p "$tmp/$c"
	copy=$tmp/$c/model.onnx
	if ! err=$("$onnxq" convert "$src" -o "$copy" --external-data --external-threshold 1 2>&1); then
		bad "$c: onnxq convert --external-data failed: $err"
		continue
	fi
	if ! ls "$tmp/$c"/model.onnx.*.data >/dev/null 2>&1; then
		rm -rf "${tmp:?}/$c"
		continue # no tensor went external: nothing to test here
	fi
	cases=$((cases + 1))

	if out=$("$rt" --compare "$src" "$copy" 2>&1); then
		ok
	else
		bad "$c onnxq: $(head -n1 <<<"$out")"
	fi
	if out=$("$rt" "$copy" --external-data --external-threshold 1 --tmpdir "$tmp" 2>&1); then
		ok
	else
		bad "$c reload: $(head -n1 <<<"$out")"
	fi
	out=$(cd / && node "$here/ort_run.js" "$src" "$copy" --quiet \
		--inputs "$dir/test_data_set_0" --expect "$dir/test_data_set_0" 2>&1)
	case $? in
	0) ok ;;
	2) skip "$c ort: $(head -n1 <<<"$out")" ;;
	*) bad "$c ort: $out" ;;
	esac
	rm -rf "${tmp:?}/$c"
done

echo "external_data: $cases node-test models wrote external data"
finish
