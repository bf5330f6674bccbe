#!/usr/bin/env bash
# weight_rounding.sh - cross-layer equalization, learned weight rounding and weight-only bias
# correction (issue 17) against round-to-nearest, judged by ONNX Runtime on held-out samples.
#
# Per model (the acceptance data of quant_accuracy.sh: calibration samples DATA/KIND/calib,
# held-out DATA/KIND/held) and variant: `onnxq quantize MODEL -o Q [variant options]` (wall and
# CPU (user + system) seconds, --threads $WR_THREADS, default 2), then ONNX Runtime (quant_accuracy_ort.js, level
# basic) runs the float model and Q on the held-out samples; quant_accuracy_eval.py gives the SQNR
# of Q's outputs against the float model's (min over samples / mean over samples, of the output
# with the lowest min) and the task metric on ORT's outputs: rec character error rate against the
# true strings, det text-mask IoU (prob > 0.3; min over pages), cls and torchvision share of
# samples whose argmax equals the float model's.
#
# Variants (WO = --weight-only --op-types Conv,MatMul,Gemm,ConvTranspose; @C = --calib DATA/KIND/calib):
#   wo8            WO                                      (int8 per channel, round to nearest)
#   wo8+cle        WO --cle
#   wo8 adaround   WO --weight-rounding adaround @C
#   wo8 seq-mse    WO --weight-rounding seq-mse @C
#   wo8 ada+bc     WO --weight-rounding adaround --bias-correction @C
#   wo8 awq        WO --awq @C                             (activation-aware input-channel scales)
#   wo8 awq+ada+bc WO --awq --weight-rounding adaround --bias-correction @C
#   w8a8           @C                                       (the default: mse ranges, empirical bias
#                                                           correction)
#   w8a8 bcw       @C --bias-correction-weights on          (empirical correction starting from
#                                                           the weights' shifts, activations float)
#   w8a8 ada+bcw   @C --weight-rounding adaround --bias-correction-weights on
#   w8a8+cle       @C --cle
#   w8a8 adaround  @C --weight-rounding adaround
#   w8a8 tensor    @C --granularity tensor                  (per-tensor weights, where CLE is meant
#   w8a8 tensor+cle @C --granularity tensor --cle            to help)
#   int4 nearest   WO --weight-type int4 --granularity block --block-size 32   (rec only)
#   int4 adaround  ... --weight-rounding adaround @C
#   int4 ada+bc    ... --weight-rounding adaround --bias-correction @C
#   int4 awq       ... --awq @C
#   int4 awq+ada+bc ... --awq --weight-rounding adaround --bias-correction @C
#
# usage: bench/weight_rounding.sh ONNXQ [MODEL...]   (default: rec det cls mobilenet_v2)
#   env OQ_CACHE (default <repo>/.cache), WR_THREADS, WR_VARIANTS (a subset of the names above,
#   comma-separated, spaces as written)
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,39p' "$0"; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OQ_CACHE:-$ROOT/.cache}
export OQ_CACHE=$CACHE
DATA=$(ls -d "$CACHE"/acc/data-* 2> /dev/null | sed -n 1p)
PY=/usr/bin/python3
EVAL=$ROOT/tests/integration/quant_accuracy_eval.py
ORTJS=$ROOT/tests/integration/quant_accuracy_ort.js
DICT=$CACHE/acc/ppocr_keys_v1.txt
onnxq=$1
shift
models=${*:-rec det cls mobilenet_v2}
thr=${WR_THREADS:-2}
[ -d "$DATA" ] || { echo "weight_rounding: no acceptance data in $CACHE/acc (run quant_accuracy.sh once)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

WO="--weight-only --op-types Conv,MatMul,Gemm,ConvTranspose"
I4="$WO --weight-type int4 --granularity block --block-size 32"
variants() { # MODEL -> "name|options" lines (@C stands for --calib DIR)
	cat <<EOF
wo8|$WO
wo8+cle|$WO --cle
wo8 adaround|$WO --weight-rounding adaround @C
wo8 seq-mse|$WO --weight-rounding seq-mse @C
wo8 ada+bc|$WO --weight-rounding adaround --bias-correction @C
wo8 awq|$WO --awq @C
wo8 awq+ada+bc|$WO --awq --weight-rounding adaround --bias-correction @C
w8a8|@C
w8a8 bcw|@C --bias-correction-weights on
w8a8 ada+bcw|@C --weight-rounding adaround --bias-correction-weights on
w8a8+cle|@C --cle
w8a8 adaround|@C --weight-rounding adaround
w8a8 tensor|@C --granularity tensor
w8a8 tensor+cle|@C --granularity tensor --cle
EOF
	if [ "$1" = rec ]; then
		cat <<EOF
int4 nearest|$I4
int4 adaround|$I4 --weight-rounding adaround @C
int4 ada+bc|$I4 --weight-rounding adaround --bias-correction @C
int4 awq|$I4 --awq @C
int4 awq+ada+bc|$I4 --awq --weight-rounding adaround --bias-correction @C
EOF
	fi
}

task_of() { # FLOAT_OUT Q_OUT (kind in $kind)
	case $kind in
	rec) echo "CER $("$PY" "$EVAL" cer "$DICT" "$DATA/rec/held.txt" "$2" | sed -n 1p | awk '{ printf "%.2f %%", 100 * $1 }')" ;;
	det) echo "IoU min $("$PY" "$EVAL" iou "$1" "$2" 0.3 | sed -n 1p | awk '{ printf "%.3f", $1 }')" ;;
	*) echo "argmax $("$PY" "$EVAL" argmax "$1" "$2" | sed -n 1p | awk '{ printf "%.0f %%", 100 * $1 }')" ;;
	esac
}

echo "weight_rounding: $(date -u '+%F %T UTC'), $(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null), threads $thr, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| model | variant | SQNR min / mean dB | task | quantize s (CPU s) |"
echo "|---|---|---|---|---:|"
for m in $models; do
	case $m in
	rec) model=$CACHE/ocr/ch_PP-OCRv4_rec_infer.onnx kind=rec ;;
	det) model=$CACHE/ocr/ch_PP-OCRv4_det_infer.onnx kind=det ;;
	cls) model=$CACHE/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx kind=cls ;;
	*) model=$CACHE/tv/$m.onnx kind=img ;;
	esac
	calib=$DATA/$kind/calib held=$DATA/$kind/held
	node "$ORTJS" "$model" "$held" "$tmp/$m.f" 2> "$tmp/err" || { echo "| $m | float model: $(tail -1 "$tmp/err") | | | |"; continue; }
	[ "$kind" = rec ] && echo "| $m | float | | $(task_of "$tmp/$m.f" "$tmp/$m.f") | |"
	while IFS='|' read -r name opts; do
		if [ -n "${WR_VARIANTS:-}" ] && [[ ",$WR_VARIANTS," != *",$name,"* ]]; then continue; fi
		q=$tmp/q.onnx
		o=${opts/@C/--calib $calib}
		# shellcheck disable=SC2086
		if ! /usr/bin/time -f '%e %U %S' -o "$tmp/time" "$onnxq" quantize "$model" -o "$q" $o --threads "$thr" \
			--quiet 2> "$tmp/err"; then
			echo "| $m | $name | quantize failed: $(tail -1 "$tmp/err") | | |"
			continue
		fi
		rm -rf "$tmp/q.out"
		if ! node "$ORTJS" "$q" "$held" "$tmp/q.out" 2> "$tmp/err"; then
			echo "| $m | $name | ORT failed: $(tail -1 "$tmp/err") | | |"
			continue
		fi
		read -r smin smean <<< "$("$PY" "$EVAL" sqnr "$tmp/$m.f" "$tmp/q.out" | sed -n 1p)"
		task=$(task_of "$tmp/$m.f" "$tmp/q.out")
		printf '| %s | %s | %.2f / %.2f | %s | %s |\n' "$m" "$name" "$smin" "$smean" "$task" \
			"$(awk '{ printf "%.1f (%.1f)", $1, $2 + $3 }' "$tmp/time")"
	done < <(variants "$m")
done
