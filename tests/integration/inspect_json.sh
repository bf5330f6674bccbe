#!/usr/bin/env bash
# inspect_json.sh - `onnxq inspect --json` emits one valid JSON object with the
# documented top-level keys, and `onnxq inspect` (text) exits 0, on a spread of
# ONNX backend node tests (about 50: every 20th case plus the ones with
# subgraphs, Q/DQ, symbolic dims, sequences and non-default domains) and on the
# PaddleOCR models when the cache has them (tests/integration/fetch.sh).
# JSON is parsed by node's JSON.parse, not by anything in onnxq.
#   $1 or env ONNXQ   binary (default <repo>/build/onnxq)
#   env OQ_CACHE   third-party cache (default <repo>/.cache)
# Prints `N passed, N failed, N skipped`; exits non-zero on any failure.
set -u
. "$(dirname "$0")/lib.sh"
onnxq=${1:-${ONNXQ:-$root/build/onnxq}}
cache=${OQ_CACHE:-$root/.cache}
nodes=/usr/share/libonnx-testdata/data/node

[ -x "$onnxq" ] || die "no binary at $onnxq"
command -v node >/dev/null 2>&1 || die "node not found"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

models=()
if [ -d "$nodes" ]; then
  i=0
  for d in "$nodes"/*/; do
    c=$(basename "$d")
    case $c in
      test_if|test_if_seq|test_if_opt|test_loop11|test_loop13_seq|test_scan9_sum|test_scan_sum|\
      test_quantizelinear|test_quantizelinear_axis|test_dequantizelinear|test_dequantizelinear_axis|\
      test_dynamicquantizelinear_expanded|test_qlinearconv|test_qlinearmatmul_2D|\
      test_sequence_map_add_1_sequence_1_tensor|test_adagrad|test_conv_with_strides_padding)
        models+=("$d/model.onnx") ;;
      *) [ $((i % 20)) -eq 0 ] && models+=("$d/model.onnx") ;;
    esac
    i=$((i + 1))
  done
else
  skip "node tests: $nodes missing (apt-get install libonnx-testdata)"
fi
for f in "$cache"/ocr/*.onnx; do
  if [ -f "$f" ]; then models+=("$f"); else skip "PaddleOCR models: $cache/ocr is empty (tests/integration/fetch.sh)"; fi
done

# Checked in node: parses, and has the keys (and kinds) scripts rely on.
check='
const fs = require("fs");
const j = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const need = {path: "string", producer: "object", ir_version: "number", opsets: "array",
  functions: "number", training_info: "number", inputs: "array", initializer_inputs: "number",
  outputs: "array", ops: "object", parameters: "object", quantization: "object"};
for (const [k, t] of Object.entries(need)) {
  const v = j[k];
  const ok = t === "array" ? Array.isArray(v) : typeof v === t && v !== null;
  if (!ok) throw new Error("key " + k + " missing or not " + t);
}
const census = j.ops.census.reduce((s, e) => s + e.count, 0);
if (census !== j.ops.nodes) throw new Error("census sums to " + census + ", nodes " + j.ops.nodes);
const q = j.quantization, g = q.by_granularity;
if (g.per_tensor + g.per_channel + g.blockwise + g.unknown !== q.quantize_linear + q.dequantize_linear)
  throw new Error("granularity counts do not add up");
if (q.nodes.length !== q.quantize_linear + q.dequantize_linear) throw new Error("node list length");
'

for m in "${models[@]}"; do
  name=${m#"$nodes"/}
  if ! "$onnxq" inspect --json "$m" >"$tmp/out.json" 2>"$tmp/err"; then
    bad "$name: inspect --json exited $? ($(head -c 300 "$tmp/err"))"; continue
  fi
  if ! node -e "$check" "$tmp/out.json" 2>"$tmp/err"; then
    bad "$name: $(grep -m1 -E 'Error|error' "$tmp/err")"; continue
  fi
  if ! "$onnxq" inspect "$m" >/dev/null 2>"$tmp/err"; then
    bad "$name: inspect (text) failed: $(head -c 300 "$tmp/err")"; continue
  fi
  ok
done
finish
