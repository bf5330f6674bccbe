#!/usr/bin/env bash
# ort_speed.sh - is onnxq's int8 output faster than the float model where it runs? Float vs
# onnxq-quantized models in onnxruntime-node (CPU, graphOptimizationLevel 'all', 1 and 2
# intra-op threads), with the held-out SQNR of each quantized model.
#
# For every model: `onnxq quantize MODEL -o Q --calib CALIB OPTS` per variant, then
# ort_speed.js times float and every variant interleaved (ROUNDS rounds of RUNS runs each after
# one warm-up; the median of the round medians and the range of the per-round speedups), and
# `onnxq compare MODEL Q --data HELD` gives the held-out SQNR (worst output, min over samples /
# mean). ORT's optimized graph of each model (optimizedModelFilePath) is saved and its op
# types counted (ort_ops.py): QLinearConv / float Conv / Q / DQ show what ORT fused.
#
# Models (what exists of): PaddleOCR det / rec / cls in $OQ_CACHE/ocr, torchvision exports in
# $OQ_CACHE/tv; calibration and held-out data from tests/integration/quant_accuracy.sh in
# $OQ_CACHE/acc/data-*/{img,det,rec,cls}/{calib,held} (vit_b_16: first 8 calibration images);
# tiny_cnn: the bundled models/tiny_cnn.onnx with models/tiny_cnn_calib and models/tiny_cnn_test.
#
# usage: bench/ort_speed.sh [ONNXQ]      (default build/onnxq)
#   env OQ_SPEED_MODELS="det rec cls ..." limits the models; OQ_SPEED_VARIANTS="int8=;nofuse=--no-fuse"
#   (';'-separated LABEL=OPTIONS, default "int8=": the default quantize); OQ_SPEED_THREADS="1 2";
#   RUNS (default 10) ROUNDS (default 3); OQ_SPEED_KEEP=DIR keeps models, logs and optimized graphs
#   there (and reuses quantized models already in it: delete them after changing onnxq).
# Prints one table row per model, variant and thread count:
#   model variant threads float_ms int8_ms speedup [min..max] cpu_x sqnr_min/mean QLinearConv/Conv/Q/DQ
# (speedup: wall-time medians; cpu_x, 1 thread only: the same from process CPU time per run,
# steadier when other processes load the machine).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
onnxq=${1:-$root/build/onnxq}
cache=${OQ_CACHE:-$root/.cache}
ort=$cache/ort/node_modules/onnxruntime-node
py=/usr/bin/python3
models=${OQ_SPEED_MODELS:-det rec cls resnet18 resnet50 mobilenet_v2 mobilenet_v3_small efficientnet_b0 squeezenet1_1 vit_b_16}
variants=${OQ_SPEED_VARIANTS:-int8=}
threads=${OQ_SPEED_THREADS:-1 2}
runs=${RUNS:-10}
rounds=${ROUNDS:-3}

[ -x "$onnxq" ] || { echo "ort_speed: $onnxq not found (build first)" >&2; exit 1; }
[ -d "$ort" ] || { echo "ort_speed: no onnxruntime-node in $ort (tests/integration/fetch.sh)" >&2; exit 1; }
data=$(ls -d "$cache"/acc/data-* 2> /dev/null | head -n 1)
[ -n "$data" ] || { echo "ort_speed: no data in $cache/acc (run tests/integration/quant_accuracy.sh once)" >&2; exit 1; }
if [ -n "${OQ_SPEED_KEEP:-}" ]; then
  work=$OQ_SPEED_KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

model_path() {
  case $1 in
    cls) echo "$cache/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx" ;;
    rec) echo "$cache/ocr/ch_PP-OCRv4_rec_infer.onnx" ;;
    det) echo "$cache/ocr/ch_PP-OCRv4_det_infer.onnx" ;;
    tiny_cnn) echo "$root/models/tiny_cnn.onnx" ;;
    *) echo "$cache/tv/$1.onnx" ;;
  esac
}
data_kind() { case $1 in cls | rec | det) echo "$1" ;; *) echo img ;; esac; }

printf '%-18s %-10s %2s %9s %9s %8s %-13s %7s %-13s %s\n' model variant th float_ms int8_ms speedup range cpu_x \
  'sqnr min/mean' 'QLinearConv/Conv/Q/DQ'
IFS=';' read -r -a vlist <<< "$variants"
for m in $models; do
  f=$(model_path "$m")
  [ -f "$f" ] || { echo "ort_speed: $m: $f missing, skipped" >&2; continue; }
  kind=$(data_kind "$m")
  calib=$data/$kind/calib
  held=$data/$kind/held
  if [ "$m" = tiny_cnn ]; then
    calib=$root/models/tiny_cnn_calib
    held=$root/models/tiny_cnn_test
  fi
  if [ "$m" = vit_b_16 ]; then
    mkdir -p "$work/vit_calib"
    for s in $(ls "$calib" | head -n 8); do ln -sf "$calib/$s" "$work/vit_calib/$s"; done
    calib=$work/vit_calib
  fi
  qs=() labels=() sq=()
  for v in "${vlist[@]}"; do
    label=${v%%=*}
    opts=${v#*=}
    q=$work/$m.$label.onnx
    if [ ! -s "$q" ]; then
      # shellcheck disable=SC2086
      if ! "$onnxq" quantize "$f" -o "$q" --calib "$calib" $opts > "$work/$m.$label.log" 2>&1; then
        echo "ort_speed: $m $label: quantize failed: $(tail -n 1 "$work/$m.$label.log")" >&2
        continue
      fi
    fi
    s=$("$onnxq" compare "$f" "$q" --data "$held" --json 2> /dev/null | "$py" -c '
import json, sys
r = json.load(sys.stdin)
outs = r["outputs"] if isinstance(r, dict) and "outputs" in r else r
w = min(outs, key=lambda o: o["sqnr_min_db"])
print("%.1f/%.1f" % (w["sqnr_min_db"], w["sqnr_mean_db"]))' 2> /dev/null) || s=-
    qs+=("$q")
    labels+=("$label")
    sq+=("$s")
  done
  [ ${#qs[@]} -gt 0 ] || continue
  for t in $threads; do
    opt=$work/opt.$m.t$t
    mkdir -p "$opt"
    out=$(OQ_ORT_OPT_DIR=$opt node "$here/ort_speed.js" "$ort" "$held/$(ls "$held" | head -n 1)" "$t" "$runs" \
      "$rounds" "$f" "${qs[@]}" 2>&1) || { echo "ort_speed: $m: $out" >&2; continue; }
    fms=$(echo "$out" | awk 'NR == 1 { sub("median_ms=", "", $2); print $2 }')
    for k in "${!qs[@]}"; do
      qms=$(echo "$out" | awk -v n=$((k + 2)) 'NR == n { sub("median_ms=", "", $2); print $2 }')
      sp=$(echo "$out" | grep "^speedup model=${qs[$k]} " |
        sed 's/.*median=\([^ ]*\) min=\([^ ]*\) max=\([^ ]*\) cpu=\([^ ]*\)/\1 \2..\3 \4/')
      cx=${sp##* }
      sp=${sp% *}
      [ "$t" = 1 ] || cx=-
      ops=$("$py" "$here/ort_ops.py" --brief "$opt/$(basename "${qs[$k]}")" 2> /dev/null || echo -)
      printf '%-18s %-10s %2s %9s %9s %8s %-13s %7s %-13s %s\n' "$m" "${labels[$k]}" "$t" "$fms" "$qms" \
        "${sp%% *}x" "${sp#* }" "$cx" "${sq[$k]}" "$ops"
    done
  done
done
