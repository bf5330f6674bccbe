#!/usr/bin/env bash
# calib_cv.sh - calibration accuracy over many calibration / held-out splits, for builds side by
# side. One fixed split (what quant_accuracy.sh judges) is a single draw: on the PaddleOCR models a
# 2 % change of one tensor's range moves the held-out minimum SQNR by several dB (bench/RESULTS.md,
# "Calibration in one pass"), so comparing calibration methods or builds needs averages.
#
# Splits: the acceptance data's calibration and held-out samples of the model are pooled
# ($OQ_CACHE/acc/data-*/{img,rec,det}/{calib,held}) and shuffled with seed s = 1..SPLITS; the first
# NCAL samples calibrate, the others judge. With CV_POOL=DIR and CV_EVAL=DIR instead, every split
# calibrates on NCAL samples of DIR drawn with seed s and judges on the fixed folder CV_EVAL (e.g.
# 160 text lines from bench/rec_lines.py: the first 60 as the pool, the other 100 as CV_EVAL).
# Per build: `onnxq quantize MODEL --calib SPLIT [CV_OPTS]`, then `onnxq compare` on the judged
# samples; prints the lowest output's min / mean SQNR per split and their averages.
#
# usage: bench/calib_cv.sh MODEL NCAL SPLITS ONNXQ...   MODEL: rec, det, cls or a torchvision name
#   env OQ_CACHE, CV_OPTS (extra quantize options), CV_POOL + CV_EVAL (see above)
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,17p' "$0"; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OQ_CACHE:-$ROOT/.cache}
DATA=$(ls -d "$CACHE"/acc/data-* 2>/dev/null | head -1)
key=$1 ncal=$2 splits=$3
shift 3
case $key in
rec) model=$CACHE/ocr/ch_PP-OCRv4_rec_infer.onnx dir=$DATA/rec ;;
det) model=$CACHE/ocr/ch_PP-OCRv4_det_infer.onnx dir=$DATA/det ;;
cls) model=$CACHE/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx dir=$DATA/cls ;;
*) model=$CACHE/tv/$key.onnx dir=$DATA/img ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${CV_POOL:-}" ]; then
	pool=$(ls "$CV_POOL"/*.npy)
else
	pool=$(ls "$dir"/calib/*.npy "$dir"/held/*.npy)
fi
for s in $(seq 1 "$splits"); do
	mkdir -p "$tmp/$s/c" "$tmp/$s/h"
	i=0
	for f in $(echo "$pool" | python3 -c "import random, sys; l = sys.stdin.read().split(); random.Random($s).shuffle(l); print('\n'.join(l))"); do
		if [ $i -lt "$ncal" ]; then ln -s "$f" "$tmp/$s/c/$(printf %03d $i).npy"
		elif [ -z "${CV_EVAL:-}" ]; then ln -s "$f" "$tmp/$s/h/$(printf %03d $i).npy"; fi
		i=$((i + 1))
	done
done
for b in "$@"; do
	res=
	for s in $(seq 1 "$splits"); do
		# shellcheck disable=SC2086
		"$b" quantize "$model" -o "$tmp/q.onnx" --calib "$tmp/$s/c" --quiet ${CV_OPTS:-}
		res="$res$("$b" compare "$model" "$tmp/q.onnx" --data "${CV_EVAL:-$tmp/$s/h}" --json | python3 -c '
import json, sys
o = min(json.load(sys.stdin)["outputs"], key=lambda o: o["sqnr_min_db"])
print("%.2f %.2f" % (o["sqnr_min_db"], o["sqnr_mean_db"]))')
"
	done
	printf '%s' "$res" | awk -v b="$b" 'NF == 2 { n++; a += $1; m += $2; s = s sprintf(" %s/%s", $1, $2) }
		END { printf "%s: average min %.2f mean %.2f dB over %d splits:%s\n", b, a / n, m / n, n, s }'
done
