#!/usr/bin/env bash
# target_sqnr.sh - the fold SQNR `quantize` reports against the held-out SQNR `onnxq compare`
# measures, for the default options and for --target-sqnr DB (issue 16's table).
#
# Per model: `onnxq quantize MODEL --calib CALIB -o Q [--target-sqnr DB --report R]`, then
# `onnxq compare MODEL Q --data HELD --json`. Columns: the worst output's fold SQNR (from the
# quantize log), its held-out SQNR (pooled over the held-out samples: 10 log10(sum r^2 /
# sum e^2) from compare's per-sample mean is not pooled, so both min / mean of the per-sample
# dB are given), the share of MACs left 8-bit (--report), the wall and CPU time of quantize.
# Data: the acceptance data (quant_accuracy_data.py: $OQ_CACHE/acc/data-*/{img,det,rec,cls}/
# {calib,held}); models: PaddleOCR det/rec/cls ($OQ_CACHE/ocr), torchvision exports ($OQ_CACHE/tv).
#
# usage: bench/target_sqnr.sh ONNXQ [MODEL...]   (default: det rec cls)
# env: OQ_CACHE, DB (30), THREADS (2), OPTS (more quantize options for every run, e.g.
# "--weight-rounding seq-mse"), RUNS ("default target": which runs), LOGDIR (keep each quantize log there)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
onnxq=$(realpath "${1:?usage: target_sqnr.sh ONNXQ [MODEL...]}")
shift
cache=${OQ_CACHE:-$root/.cache}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
data=$(acc_data "$cache") || exit 1
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(det rec cls)
db=${DB:-30}
threads=${THREADS:-2}
read -r -a extra <<< "${OPTS:-}"
read -r -a runs <<< "${RUNS:-default target}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


printf '| model | run | fold SQNR (dB) | held-out min / mean (dB) | 8-bit MACs | quantize s | CPU s |\n'
printf '|---|---|---:|---:|---:|---:|---:|\n'
for key in "${models[@]}"; do
	read -r model set <<< "$(acc_model "$key" "$cache")"
	dir=$data/$set
	[ -f "$model" ] || { echo "| $key | missing | | | | |"; continue; }
	for run in "${runs[@]}"; do
		opts=("${extra[@]}")
		[ "$run" = default ] || opts+=(--target-sqnr "$db" --report "$tmp/r.json")
		rm -f "$tmp/r.json"
		t0=$(date +%s.%N)
		/usr/bin/time -f %U+%S -o "$tmp/cpu" "$onnxq" quantize "$model" --calib "$dir/calib" -o "$tmp/q.onnx" \
			--threads "$threads" "${opts[@]}" 2>"$tmp/log" ||
			{ echo "| $key | $run | failed: $(tail -1 "$tmp/log") | | | | |"; continue; }
		t1=$(date +%s.%N)
		[ -z "${LOGDIR:-}" ] || cp "$tmp/log" "$LOGDIR/$key-${run// /}.log"
		fold=$(sed -n "s/.*fold SQNR (held-out.*): //p" "$tmp/log" | grep -o "[-0-9.a-z]* dB" |
			awk '{ print $1 }' | sort -g | head -1)
		held=$("$onnxq" compare "$model" "$tmp/q.onnx" --data "$dir/held" --json --threads "$threads" | worst_sqnr "%.1f / %.1f")
		share=-
		[ -f "$tmp/r.json" ] && share=$(python3 -c 'import json,sys; print("%.1f %%" % (100 * json.load(open(sys.argv[1]))["macs_8bit_share"]))' "$tmp/r.json")
		printf '| %s | %s %s | %s | %s | %s | %.1f | %.1f |\n' "$key" "${run/target/target $db}" "${extra[*]}" "${fold:-?}" "$held" \
			"$share" "$(echo "$t1 - $t0" | bc)" "$(tail -1 "$tmp/cpu" | bc)"
	done
done
