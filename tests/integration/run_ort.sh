#!/usr/bin/env bash
# run_ort.sh - `onnxq run` against ONNX Runtime on the same .npy inputs.
#
# Models: models/tiny_cnn.onnx ([1, 3, 32, 32], random input) and the three
# PaddleOCR models from the cache (tests/integration/fetch.sh):
#   det  ch_PP-OCRv4_det_infer.onnx       [1, 3, S, S], S = $OQ_DET_SIZE (default 640, a multiple of 32)
#   rec  ch_PP-OCRv4_rec_infer.onnx       [1, 3, 48, 320]
#   cls  ch_ppocr_mobile_v2.0_cls_infer   [1, 3, 48, 192]
# The OCR inputs are real text images drawn with ImageMagick (/usr/bin/convert,
# DejaVu-Sans) and normalised as PaddleOCR does (run_ort.js image); without
# ImageMagick they are deterministic random pixels normalised the same way
# (run_ort.js noise); tiny_cnn gets random floats in [0, 1) (run_ort.js random).
#
# Per model, three checks:
#   run      `onnxq run MODEL --data D --output-dir T1 --threads 1` exits 0
#            (D/000.npy: the sample-folder path of the CLI);
#   ort      every output matches ORT (graphOptimizationLevel 'disabled'):
#            same dtype and shape, and max relative error
#              max|onnxq - ort| / max(max|ort|, 1e-6)  <= 1e-4  (per output);
#   threads  `--threads 2` writes byte-identical .npy files (cmp).
# When `run` fails the other two count as failed too; for an op without a
# kernel the script lists the model's op types that no file under calib/kernels/
# table row names (a grep: for information only).
#
# usage: tests/integration/run_ort.sh [ONNXQ]   (default build/onnxq)
#   env OQ_CACHE (fetch.sh), OQ_DET_SIZE, OQ_RUN_ORT_KEEP=1 keeps the work folder,
#   OQ_NO_MAGICK=1 uses random inputs even when ImageMagick is installed.
# Closing line: "N passed, N failed, N skipped". Exit 1 on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
det_size=${OQ_DET_SIZE:-640}
tol=1e-4

[ -x "$onnxq" ] || die "$onnxq not found (build first)"
if [ $((det_size % 32)) -ne 0 ]; then echo "run_ort: OQ_DET_SIZE must be a multiple of 32" >&2; exit 1; fi
cache=$("$here/fetch.sh" | tail -n 1) || die "fetch.sh failed"
export OQ_CACHE=$cache
tmp=$(mktemp -d)
if [ "${OQ_RUN_ORT_KEEP:-0}" = 1 ]; then echo "run_ort: work folder $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

# --- inputs
magick=0
if [ "${OQ_NO_MAGICK:-0}" != 1 ] && [ -x /usr/bin/convert ] && [[ $(/usr/bin/convert -version 2>/dev/null) == *ImageMagick* ]] &&
   /usr/bin/convert -list font 2>/dev/null | grep -q 'Font: DejaVu-Sans$'; then
  magick=1
fi
# text_image NAME W H MODE TEXT...: one line of text per argument, 48 px apart
text_image() {
  local name=$1 w=$2 h=$3 mode=$4; shift 4
  local args=() y=35
  for line in "$@"; do args+=(-annotate "+5+$y" "$line"); y=$((y + 48)); done
  /usr/bin/convert -size "${w}x${h}" xc:white -font DejaVu-Sans -pointsize 28 -fill black "${args[@]}" \
    -depth 8 "rgb:$tmp/$name.rgb" &&
    node "$here/run_ort.js" image "$tmp/$name.rgb" "$w" "$h" "$mode" "$tmp/$name.npy"
}
make_input() { # NAME W H MODE TEXT...
  local name=$1 w=$2 h=$3 mode=$4; shift 4
  if [ "$mode" = random ]; then
    node "$here/run_ort.js" random "1,3,$h,$w" 7 "$tmp/$name.npy"
  elif [ "$magick" = 1 ]; then
    text_image "$name" "$w" "$h" "$mode" "$@"
  else
    node "$here/run_ort.js" noise "$w" "$h" "$mode" 7 "$tmp/$name.npy"
  fi
}
det_lines=()
for ((y = 0; y < det_size / 48 - 1; y += 2)); do det_lines+=("Invoice 2024-$((y / 2 + 1)) total 1,234.56" ""); done
make_input tiny_cnn 32 32 random || die "cannot make inputs"
make_input det "$det_size" "$det_size" det "${det_lines[@]}" &&
  make_input rec 320 48 rec 'onnxq runs PaddleOCR' &&
  make_input cls 192 48 rec 'Hello, world' ||
  die "cannot make inputs"
echo "inputs: $([ "$magick" = 1 ] && echo "text images (ImageMagick)" || echo "random pixels (no ImageMagick)"), det ${det_size}x${det_size}"

# --- ops without a kernel row (information for a failed run)
missing_ops() {
  local m=$1 ops missing=()
  ops=$("$onnxq" inspect --json "$m" | node -e '
    let s = ""; process.stdin.on("data", (c) => (s += c)).on("end", () => {
      for (const o of JSON.parse(s).ops.census) console.log(o.op); });')
  for op in $ops; do grep -rq "OQ_OP_$op[,}]" "$root"/calib/kernels/ || missing+=("$op"); done
  echo "${missing[*]:-(none: the failure is elsewhere)}"
}

# --- models
run_case() { # NAME MODEL INPUT_NAME
  local name=$1 model=$2 input=$3 w=$tmp/$1
  mkdir -p "$w/data"
  cp "$tmp/$name.npy" "$w/data/000.npy"
  if ! [ -f "$model" ]; then
    bad "$name: run (model $model missing)"; bad "$name: ort"; bad "$name: threads"; return
  fi
  if ! node "$here/run_ort.js" run "$model" "$w/ort" "$input=$w/data/000.npy" 2> "$w/ort.err"; then
    bad "$name: ORT could not run the model: $(head -n 1 "$w/ort.err")"; bad "$name: ort"; bad "$name: threads"; return
  fi
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$onnxq" run "$model" --data "$w/data" --output-dir "$w/t1" --threads 1 > "$w/t1.out" 2> "$w/t1.err"
  rc=$?
  t1=$(date +%s.%N)
  if [ "$rc" != 0 ]; then
    bad "$name: run exit $rc: $(head -n 1 "$w/t1.err")"
    [ "$rc" = 3 ] && echo "    ops of $(basename "$model") with no kernel row: $(missing_ops "$model")"
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
  local same=1 n=0
  for f in "$w"/t1/000/*.npy; do
    n=$((n + 1))
    cmp -s "$f" "$w/t2/000/$(basename "$f")" || { same=0; echo "    $(basename "$f") differs between 1 and 2 threads"; }
  done
  [ "$(ls "$w/t2/000" | wc -l)" = "$n" ] || same=0
  if [ "$same" = 1 ] && [ "$n" -gt 0 ]; then ok "$name: threads (1 and 2 byte-identical, $n files)"; else bad "$name: threads"; fi
}

run_case tiny_cnn "$root/models/tiny_cnn.onnx" image
run_case det "$cache/ocr/ch_PP-OCRv4_det_infer.onnx" x
run_case rec "$cache/ocr/ch_PP-OCRv4_rec_infer.onnx" x
run_case cls "$cache/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx" x

finish
