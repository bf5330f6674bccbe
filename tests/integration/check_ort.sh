#!/usr/bin/env bash
# check_ort.sh - `onnxq check` against ONNX Runtime on generated Q/DQ models.
#
# tests/tools/check_gen writes valid and malformed models (per-tensor,
# per-axis and blocked int8/int4, wrong scale lengths, axes out of range,
# blockwise scale shapes, block_size below opset 21, ...). For each one ORT
# (onnxruntime-node, session creation + one run with x = ones) decides:
#   ORT rejects  -> `onnxq check` must exit 6,
#   ORT accepts  -> `onnxq check` must exit 0,
# except spec_* cases, which the ONNX spec forbids but ORT tolerates: check
# must exit 6 (ORT's verdict is printed for information).
# Then every ONNX backend node-test model (valid models) must pass check.
#
# usage: tests/integration/check_ort.sh [ONNXQ]   (default build/onnxq)
#   env OQ_CHECK_GEN: path of check_gen (default: <ONNXQ dir>/tests/check_gen)
#   env OQ_NODE_TESTS: node-test dir (default /usr/share/libonnx-testdata/data/node)
# Closing line: "N passed, N failed, N skipped". Exit 1 on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
gen=${OQ_CHECK_GEN:-$(dirname "$onnxq")/tests/check_gen}
nodetests=${OQ_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}

for f in "$onnxq" "$gen"; do
  [ -x "$f" ] || die "$f not found (build first)"
done
cache=$("$here/fetch.sh" | tail -n 1) || die "fetch.sh failed"
ortpkg=$cache/ort/node_modules/onnxruntime-node
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$gen" "$tmp" || die "check_gen failed"
node "$here/check_ort.js" "$ortpkg" "$tmp" > "$tmp/ort.txt" 2> "$tmp/ort.err" || die "$(cat "$tmp/ort.err")"

while read -r name dims; do
  verdict=$(awk -v n="$name" '$1 == n { $1 = ""; sub(/^ /, ""); print; exit }' "$tmp/ort.txt")
  "$onnxq" check "$tmp/$name.onnx" > "$tmp/$name.out" 2>&1
  rc=$?
  case "$name:$verdict" in
    spec_*) want=6 ;;
    *:accept) want=0 ;;
    *:reject*) want=6 ;;
    *) want=none ;;
  esac
  rules=$(grep -o '\[[a-z0-9-]*\]$' "$tmp/$name.out" | sort -u | tr -d '[]' | paste -sd' ' -)
  if [ "$rc" = "$want" ]; then
    ok "$name: ORT ${verdict%% *}, check exit $rc ${rules:+($rules)}"
  else
    bad "$name: ORT ${verdict:-no answer}; check exit $rc, want $want"
    sed 's/^/    /' "$tmp/$name.out"
  fi
done < "$tmp/manifest.txt"

# Valid models: the ONNX backend node tests must all pass `check`.
if [ -d "$nodetests" ]; then
  n=0 flagged=0
  for d in "$nodetests"/*/; do
    [ -f "$d/model.onnx" ] || continue
    n=$((n + 1))
    if ! "$onnxq" check "$d/model.onnx" > "$tmp/node.out" 2>&1; then
      flagged=$((flagged + 1)); sed 's/^/    /' "$tmp/node.out" | head -n 5
    fi
  done
  if [ "$flagged" = 0 ] && [ "$n" -gt 0 ]; then
    ok "node tests: $n models, none flagged"
  else
    bad "node tests: $flagged of $n valid models flagged"
  fi
else
  skip "node tests: $nodetests not found"
fi
finish
