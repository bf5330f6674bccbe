#!/usr/bin/env bash
# calib_cv.sh - calibration accuracy over many calibration / held-out splits, for builds and option
# sets side by side. One fixed split (what quant_accuracy.sh judges) is a single draw: on the
# PaddleOCR models a 2 % change of one tensor's range moves the held-out minimum SQNR by several dB
# (bench/RESULTS.md, "Calibration in one pass"), so comparing calibration methods, options or builds
# needs averages.
#
# Splits: the acceptance data's calibration and held-out samples of the model are pooled
# ($OQ_CACHE/acc/data-*/{img,rec,det,cls}/{calib,held}) and shuffled with seed s = 1..SPLITS; the
# first NCAL samples calibrate, the others judge. With CV_POOL=DIR and CV_EVAL=DIR instead, every
# split calibrates on NCAL samples of DIR drawn with seed s and judges on the fixed folder CV_EVAL
# (e.g. 160 text lines from bench/rec_lines.py: the first 60 as the pool, the other 100 as CV_EVAL).
#
# Per variant and split: `onnxq quantize MODEL --calib SPLIT [CV_OPTS] [variant options]` (timed,
# wall seconds), then `onnxq run` of the float model (once per split) and of Q on the judged
# samples; quant_accuracy_eval.py computes from those outputs the lowest output's min / mean SQNR
# (the numbers `onnxq compare` prints) and the task metric on onnxq's outputs:
#   rec  character error rate against the true strings (pooled mode: the data's calib.txt and
#        held.txt; CV_EVAL mode: CV_TEXT, the lines.txt of bench/rec_lines.py, whose line k is
#        sample k of pool followed by eval)
#   det  text-mask IoU (prob > 0.3) against the float model's mask, min and mean over pages
#   cls, torchvision models: share of judged samples whose argmax equals the float model's
# Prints per variant the per-split values and the averages, and per split the difference from the
# first variant (min and mean SQNR: average and worst), which is what "never worse" is judged on.
#
# usage: bench/calib_cv.sh MODEL NCAL SPLITS VARIANT...
#   MODEL: rec, det, cls or a torchvision name ($OQ_CACHE/tv/MODEL.onnx)
#   VARIANT: "ONNXQ [quantize options]", one argument, word-split (e.g. "build/onnxq
#   --bias-correction=analytic"); the binary alone compares builds as before
#   env OQ_CACHE, CV_OPTS (options for every variant), CV_POOL + CV_EVAL (+ CV_TEXT) (see above),
#   CV_THREADS (--threads of every onnxq command; default: theirs)
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,30p' "$0"; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OQ_CACHE:-$ROOT/.cache}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
DATA=$(acc_data "$CACHE")
PY=/usr/bin/python3
EVAL=$ROOT/tests/integration/quant_accuracy_eval.py
DICT=$CACHE/acc/ppocr_keys_v1.txt
key=$1 ncal=$2 splits=$3
shift 3
read -r model set <<< "$(acc_model "$key" "$CACHE")"
dir=$DATA/$set
case $set in
rec) task=cer ;;
det) task=iou ;;
*) task=argmax ;;
esac
thr=()
[ -n "${CV_THREADS:-}" ] && thr=(--threads "$CV_THREADS")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# pool: one "file<TAB>truth" line per sample (truth: the rec string, or - )
if [ -n "${CV_POOL:-}" ]; then
	ls "$CV_POOL"/*.npy | awk '{ print $0 "\t-" }' > "$tmp/pool"
	if [ "$task" = cer ]; then
		[ -n "${CV_TEXT:-}" ] && [ -f "$CV_TEXT" ] || task=none
	fi
	if [ "$task" = cer ]; then
		npool=$(wc -l < "$tmp/pool")
		ls "$CV_EVAL"/*.npy | awk '{ print $0 }' > "$tmp/evalfiles"
		sed -n "$((npool + 1)),\$p" "$CV_TEXT" | head -n "$(wc -l < "$tmp/evalfiles")" > "$tmp/evaltext"
	fi
else
	for part in calib held; do
		if [ "$task" = cer ]; then
			paste <(ls "$dir/$part"/*.npy) <(grep -v '^[[:space:]]*$' "$dir/$part.txt")
		else
			ls "$dir/$part"/*.npy | awk '{ print $0 "\t-" }'
		fi
	done > "$tmp/pool"
fi
for s in $(seq 1 "$splits"); do
	mkdir -p "$tmp/$s/c" "$tmp/$s/h"
	python3 -c "import random, sys
l = open(sys.argv[1]).read().splitlines()
random.Random($s).shuffle(l)
print('\n'.join(l))" "$tmp/pool" > "$tmp/$s/order"
	i=0
	: > "$tmp/$s/held.txt"
	while IFS=$'\t' read -r f t; do
		if [ $i -lt "$ncal" ]; then
			ln -s "$f" "$tmp/$s/c/$(printf %03d $i).npy"
		elif [ -z "${CV_EVAL:-}" ]; then
			ln -s "$f" "$tmp/$s/h/$(printf %03d $i).npy"
			printf '%s\n' "$t" >> "$tmp/$s/held.txt"
		fi
		i=$((i + 1))
	done < "$tmp/$s/order"
	if [ -n "${CV_EVAL:-}" ]; then
		rmdir "$tmp/$s/h"
		ln -s "$(cd "$CV_EVAL" && pwd)" "$tmp/$s/h"
		[ "$task" = cer ] && cp "$tmp/evaltext" "$tmp/$s/held.txt"
	fi
done
echo "calib_cv: $key, $ncal calibration samples, $splits splits; $(uptime | sed 's/.*load/load/')"
# taskval DIR_F DIR_Q HELD_TXT -> "value" (cer, argmax) or "min/mean" (iou); "-" when none
taskval() {
	case $task in
	cer) "$PY" "$EVAL" cer "$DICT" "$3" "$2" | sed -n 1p ;;
	iou) "$PY" "$EVAL" iou "$1" "$2" 0.3 | sed -n 1p | tr ' ' / ;;
	argmax) "$PY" "$EVAL" argmax "$1" "$2" | sed -n 1p ;;
	*) echo - ;;
	esac
}
v=0
for spec in "$@"; do
	v=$((v + 1))
	# shellcheck disable=SC2086
	set -- $spec
	b=$1
	shift
	: > "$tmp/res.$v"
	for s in $(seq 1 "$splits"); do
		if [ ! -d "$tmp/$s/f" ]; then
			"$b" run "$model" --data "$tmp/$s/h" --output-dir "$tmp/$s/f" "${thr[@]}" > /dev/null
			[ "$task" = cer ] && taskval "$tmp/$s/f" "$tmp/$s/f" "$tmp/$s/held.txt" >> "$tmp/floatcer"
		fi
		t0=$(date +%s.%N)
		# shellcheck disable=SC2086
		"$b" quantize "$model" -o "$tmp/q.onnx" --calib "$tmp/$s/c" --quiet "${thr[@]}" ${CV_OPTS:-} "$@"
		t1=$(date +%s.%N)
		rm -rf "$tmp/qo"
		"$b" run "$tmp/q.onnx" --data "$tmp/$s/h" --output-dir "$tmp/qo" "${thr[@]}" > /dev/null
		sq=$("$PY" "$EVAL" sqnr "$tmp/$s/f" "$tmp/qo" | sed -n 1p)
		tv=$(taskval "$tmp/$s/f" "$tmp/qo" "$tmp/$s/held.txt")
		echo "$sq $tv $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" >> "$tmp/res.$v"
	done
	awk -v name="$spec" -v task="$task" '
		{ n++; a += $1; m += $2; t += $4; s = s sprintf(" %.2f/%.2f", $1, $2)
		  if ($3 != "-") { split($3, x, "/"); k++; ta += x[1]; tb += x[2]; ts = ts " " $3 } }
		END {
			printf "%s: average min %.2f mean %.2f dB over %d splits, quantize %.2f s", name, a / n, m / n, n, t / n
			if (k && task == "iou") printf ", IoU min %.4f mean %.4f", ta / k, tb / k
			else if (k && task == "cer") printf ", CER %.2f%%", 100 * ta / k
			else if (k) printf ", argmax = float %.1f%%", 100 * ta / k
			printf "\n    SQNR per split:%s\n", s
			if (k) printf "    %s per split:%s\n", task, ts
		}' "$tmp/res.$v"
	if [ "$v" = 1 ] && [ -f "$tmp/floatcer" ]; then
		awk '{ n++; a += $1 } END { printf "    (the float model: CER %.2f%%)\n", 100 * a / n }' "$tmp/floatcer"
	fi
	if [ "$v" -gt 1 ]; then
		paste -d ' ' "$tmp/res.1" "$tmp/res.$v" | awk '
			{ n++; dn = $5 - $1; dm = $6 - $2; a += dn; m += dm
			  if (n == 1 || dn < wn) wn = dn; if (n == 1 || dm < wm) wm = dm
			  if (dn < 0) ln++; if (dm < 0) lm++; s = s sprintf(" %+.2f/%+.2f", dn, dm) }
			END { printf "    vs the first: min %+.2f (worst %+.2f, lower on %d of %d), mean %+.2f (worst %+.2f, lower on %d); per split:%s\n",
				a / n, wn, ln, n, m / n, wm, lm, s }'
	fi
done
