#!/usr/bin/env bash
# torchvision_ort.sh - `onnxq run` against ONNX Runtime on torchvision classifiers.
#
# tests/integration/torchvision_export.py (Debian python3-torch/torchvision, run
# with /usr/bin/python3) exports resnet18, resnet50, mobilenet_v2, mobilenet_v3_small,
# efficientnet_b0, squeezenet1_1 and vit_b_16 (weights=None, seeded, random
# BatchNorm statistics; opset 13, no constant folding) into $OQ_CACHE/tv/ once
# (later runs reuse them), plus one input [1, 3, 224, 224]: a skimage photo
# normalised with the ImageNet mean/std, or seeded random pixels.
#
# Per model, three checks (as in run_ort.sh, whose run_ort.js does the ORT side):
#   run      `onnxq run MODEL --data D --output-dir T1 --threads 1` exits 0;
#   ort      every output matches ORT (graphOptimizationLevel 'disabled'):
#            same dtype and shape, max|onnxq - ort| / max(max|ort|, 1e-6) <= 1e-4;
#   threads  `--threads 2` writes byte-identical .npy files (cmp).
# When `run` fails the other two count as failed too.
# Without an importable python3 torch/torchvision the script prints one skip line.
#
# usage: tests/integration/torchvision_ort.sh [ONNXQ]   (default build/onnxq)
#   env OQ_CACHE (fetch.sh), OQ_TV_MODELS="resnet18 ..." limits the model list,
#   OQ_TV_KEEP=1 keeps the work folder.
# Closing line: "N passed, N failed, N skipped". Exit 1 on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
py=/usr/bin/python3
tol=1e-4
models=${OQ_TV_MODELS:-resnet18 resnet50 mobilenet_v2 mobilenet_v3_small efficientnet_b0 squeezenet1_1 vit_b_16}

if ! [ -x "$py" ] || ! "$py" -c 'import torch, torchvision' 2> /dev/null; then
  skip "torchvision: $py cannot import torch and torchvision (apt-get install python3-torchvision)"
  finish
  exit
fi
[ -x "$onnxq" ] || die "$onnxq not found (build first)"
cache=$("$here/fetch.sh" | tail -n 1) || die "fetch.sh failed"
export OQ_CACHE=$cache
tv=$cache/tv
# shellcheck disable=SC2086
if ! "$py" "$here/torchvision_export.py" "$tv" $models > "$tv.export.log" 2>&1; then
  tail -n 20 "$tv.export.log" >&2
  die "export failed (above)"
fi
grep -v '^exported ' "$tv.export.log" | grep '^input:' || true
tmp=$(mktemp -d)
if [ "${OQ_TV_KEEP:-0}" = 1 ]; then echo "torchvision_ort: work folder $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

run_case() { # NAME
  local name=$1 model=$tv/$1.onnx w=$tmp/$1
  mkdir -p "$w/data"
  cp "$tv/input.npy" "$w/data/000.npy"
  if ! [ -f "$model" ]; then
    bad "$name: run (model $model missing)"; bad "$name: ort"; bad "$name: threads"; return
  fi
  if ! node "$here/run_ort.js" run "$model" "$w/ort" "input=$w/data/000.npy" 2> "$w/ort.err"; then
    bad "$name: ORT could not run the model: $(head -n 1 "$w/ort.err")"; bad "$name: ort"; bad "$name: threads"; return
  fi
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$onnxq" run "$model" --data "$w/data" --output-dir "$w/t1" --threads 1 > "$w/t1.out" 2> "$w/t1.err"
  rc=$?
  t1=$(date +%s.%N)
  if [ "$rc" != 0 ]; then
    bad "$name: run exit $rc: $(head -n 1 "$w/t1.err")"
    bad "$name: ort (no onnxq output)"; bad "$name: threads (no onnxq output)"
    return
  fi
  ok "$name: run ($(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s, 1 thread)"
  if node "$here/run_ort.js" compare "$w/t1/000" "$w/ort" "$tol" > "$w/cmp.txt" 2>&1; then
    ok "$name: ort (max relative error <= $tol)"
  else
    bad "$name: ort"
  fi
  sed 's/^/    /' "$w/cmp.txt"
  if ! "$onnxq" run "$model" --data "$w/data" --output-dir "$w/t2" --threads 2 > /dev/null 2> "$w/t2.err"; then
    bad "$name: threads (--threads 2 failed: $(head -n 1 "$w/t2.err"))"
    return
  fi
  local same=1 n=0 f
  for f in "$w"/t1/000/*.npy; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    cmp -s "$f" "$w/t2/000/$(basename "$f")" || { same=0; echo "    $(basename "$f") differs between 1 and 2 threads"; }
  done
  [ "$(ls "$w/t2/000" | wc -l)" = "$n" ] || same=0
  if [ "$same" = 1 ] && [ "$n" -gt 0 ]; then ok "$name: threads (1 and 2 byte-identical, $n files)"; else bad "$name: threads"; fi
}

for m in $models; do run_case "$m"; done

finish
