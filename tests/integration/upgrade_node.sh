#!/usr/bin/env bash
# upgrade_node.sh - the upgrade-opset pass on real material.
#
# 1. ONNX backend node tests (/usr/share/libonnx-testdata/data/node): every
#    case whose ai.onnx opset is below 13 is upgraded to 13, every case below
#    21 to 21 (tests/tools/upgrade_conf node: verifier on, save + reload), and
#    the upgraded model must still match output_K.pb with onnxq's executor
#    (rtol 1e-3, atol 1e-5). Each case counts once per target; cases at or
#    above the target, refused by the pass, or that the executor cannot run
#    even before the upgrade count as skipped (reasons printed).
# 2. PaddleOCR models (cache of tests/integration/fetch.sh): cls (opset 9,
#    [1,3,48,192]), rec (opset 9, [1,3,48,320]), det (opset 11, [1,3,S,S],
#    S = $OQ_DET_SIZE, default 320, a multiple of 32), on seeded random pixels
#    normalised as PaddleOCR does (run_ort.js noise). Per model and target
#    (13, 21), three checks:
#      convert  upgrade_conf convert --opset T succeeds (verifier on);
#      onnxq    `onnxq run` of the upgraded model equals `onnxq run` of the
#               original: max|a - b| / max|b| <= 1e-4 per output;
#      ort      ONNX Runtime (run_ort.js: graph run as written, no fusions)
#               on the upgraded model equals ORT on the original, same tolerance.
# 3. Node-test cases of ops the executor has no kernel for but the pass
#    converts (GridSample 16 -> 20: mode names; DFT 17 -> 20: axis input):
#    upgraded to 21 and run in ONNX Runtime against output_K.pb (max|a - b| /
#    max|b| <= 1e-4); skipped when ORT does not match on the original either.
#
# usage: tests/integration/upgrade_node.sh [ONNXQ]   (default build/onnxq; the
#   tool is taken from the same build folder: <dir of ONNXQ>/tests/upgrade_conf,
#   or $OQ_UPGRADE_CONF). Closing line "N passed, N failed, N skipped"; exit 1
#   on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
uc=${OQ_UPGRADE_CONF:-$(dirname "$onnxq")/tests/upgrade_conf}
det_size=${OQ_DET_SIZE:-320}
tol=1e-4
data=/usr/share/libonnx-testdata/data/node

flat() { [ -f "$1" ] && tr '\n' ' ' < "$1" | sed 's/\x1b\[[0-9;]*m//g'; } # FILE: one line, no colours
first() { [ -f "$1" ] && head -n 1 "$1" | sed 's/\x1b\[[0-9;]*m//g'; }     # FILE: first line, no colours

[ -x "$onnxq" ] && [ -x "$uc" ] || die "$onnxq or $uc not found (build first)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- 1. node tests
if [ -d "$data" ]; then
  for t in 13 21; do
    echo "=== node tests upgraded to opset $t"
    "$uc" node --opset "$t" --dir "$data" > "$tmp/node$t.txt" 2>&1
    rc=$?
    sed 's/^/  /' "$tmp/node$t.txt" | grep -v '^  PASS' | cut -c1-300
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$tmp/node$t.txt" | tail -n 1)
    if ! tally "$line"; then
      bad "node tests, opset $t: upgrade_conf exited $rc without a summary"
      continue
    fi
    if [ "$rc" != 0 ] && [[ $line == *" 0 failed"* ]]; then bad "node tests, opset $t: upgrade_conf exited $rc"; fi
  done
else
  skip "node tests: $data missing (apt-get install libonnx-testdata)"
fi

# --- 2. PaddleOCR models
cache=$("$here/fetch.sh" | tail -n 1) || { bad "fetch.sh failed"; finish; exit 1; }
export OQ_CACHE=$cache
ocr_case() { # NAME FILE H W MODE
  local name=$1 model=$cache/ocr/$2 h=$3 w=$4 mode=$5 d=$tmp/$1
  mkdir -p "$d"
  if [ ! -f "$model" ]; then bad "$name: $model missing"; return; fi
  if ! node "$here/run_ort.js" noise "$w" "$h" "$mode" 11 "$d/x.npy" ||
     ! "$onnxq" run "$model" --input "x=$d/x.npy" --output-dir "$d/oq" --threads 2 > /dev/null 2> "$d/err" ||
     ! node "$here/run_ort.js" run "$model" "$d/ort" "x=$d/x.npy" 2>> "$d/err"; then
    bad "$name: the original model does not run: $(first "$d/err")"
    return
  fi
  for t in 13 21; do
    local up=$d/up$t.onnx
    if ! "$uc" convert "$model" "$up" --opset "$t" 2> "$d/conv$t.err"; then
      bad "$name -> opset $t: convert: $(first "$d/conv$t.err")"
      bad "$name -> opset $t: onnxq (not converted)"
      bad "$name -> opset $t: ort (not converted)"
      continue
    fi
    ok "$name -> opset $t: convert"
    if "$onnxq" run "$up" --input "x=$d/x.npy" --output-dir "$d/oq$t" --threads 2 > /dev/null 2> "$d/run$t.err" &&
       node "$here/run_ort.js" compare "$d/oq$t" "$d/oq" "$tol" > "$d/cmp$t.txt" 2>&1; then
      ok "$name -> opset $t: onnxq run equals the original ($(flat "$d/cmp$t.txt"))"
    else
      bad "$name -> opset $t: onnxq run: $(first "$d/run$t.err") $(flat "$d/cmp$t.txt")"
    fi
    if node "$here/run_ort.js" run "$up" "$d/ort$t" "x=$d/x.npy" 2> "$d/ort$t.err" &&
       node "$here/run_ort.js" compare "$d/ort$t" "$d/ort" "$tol" > "$d/ocmp$t.txt" 2>&1; then
      ok "$name -> opset $t: ORT equals ORT on the original ($(flat "$d/ocmp$t.txt"))"
    else
      bad "$name -> opset $t: ORT: $(first "$d/ort$t.err") $(flat "$d/ocmp$t.txt")"
    fi
  done
}
echo "=== PaddleOCR models"
ocr_case cls ch_ppocr_mobile_v2.0_cls_infer.onnx 48 192 rec
ocr_case rec ch_PP-OCRv4_rec_infer.onnx 48 320 rec
ocr_case det ch_PP-OCRv4_det_infer.onnx "$det_size" "$det_size" det

# --- 3. converted ops without an executor kernel, in ONNX Runtime
ort_node_case() { # CASE
  local c=$1 src=$data/$1 d=$tmp/node_$1 names=() i nm
  mkdir -p "$d/in" "$d/ref"
  if ! "$uc" convert "$src/model.onnx" "$d/up.onnx" --opset 21 2> "$d/conv.err"; then
    bad "$c -> opset 21: convert: $(first "$d/conv.err")"; return
  fi
  for i in "$src"/test_data_set_0/input_*.pb; do
    nm=$("$uc" pb2npy "$i" "$d/in/$(basename "$i" .pb).npy") || { bad "$c: cannot read $i"; return; }
    names+=("$nm=$d/in/$(basename "$i" .pb).npy")
  done
  if ! node "$here/run_ort.js" run "$src/model.onnx" "$d/orig" "${names[@]}" 2> "$d/orig.err"; then
    skip "$c: ORT cannot run the original: $(first "$d/orig.err")"; return
  fi
  # the reference output under the name ORT gives it (single-output cases)
  nm=$(ls "$d/orig")
  "$uc" pb2npy "$src/test_data_set_0/output_0.pb" "$d/ref/$nm" > /dev/null || { bad "$c: cannot read output_0.pb"; return; }
  if ! node "$here/run_ort.js" compare "$d/orig" "$d/ref" "$tol" > /dev/null 2>&1; then
    skip "$c: ORT does not match the reference on the original either"; return
  fi
  if node "$here/run_ort.js" run "$d/up.onnx" "$d/up" "${names[@]}" 2> "$d/up.err" &&
     node "$here/run_ort.js" compare "$d/up" "$d/ref" "$tol" > "$d/cmp.txt" 2>&1; then
    ok "$c -> opset 21: ORT matches the reference ($(flat "$d/cmp.txt"))"
  else
    bad "$c -> opset 21: ORT: $(first "$d/up.err") $(flat "$d/cmp.txt")"
  fi
}
if [ -d "$data" ]; then
  echo "=== converted ops without an executor kernel, in ONNX Runtime"
  for c in "$data"/test_gridsample* "$data"/test_dft*; do
    [ -d "$c" ] && ort_node_case "$(basename "$c")"
  done
fi

finish
