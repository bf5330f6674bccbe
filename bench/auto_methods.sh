#!/usr/bin/env bash
# auto_methods.sh - held-out SQNR of each --method, --method auto included, at 8 and 16 bits: the
# table that decides the default method (docs/accuracy.md "--method auto").
#
# Per model, bit width and method: `onnxq quantize MODEL --calib CALIB --method M
# --no-bias-correction` (16 bits: --act-type int16 --weight-type int16), then `onnxq compare MODEL Q
# --data HELD --json`; the cell is the lowest output's min / mean SQNR over the held-out samples
# (dB). Data: the acceptance data (quant_accuracy_data.py: $OQ_CACHE/acc/data-*/{img,det,rec,cls}/
# {calib,held}); models: PaddleOCR det/rec/cls ($OQ_CACHE/ocr) and torchvision exports
# ($OQ_CACHE/tv). entropy has no 16-bit search (2^15 targets) and is skipped there.
#
# usage: bench/auto_methods.sh ONNXQ [MODEL...]   (default: det rec cls mobilenet_v2 resnet18
#        efficientnet_b0 squeezenet1_1 mobilenet_v3_small)
# env: OQ_CACHE, BITS ("8 16"), METHODS ("minmax percentile entropy mse auto"), THREADS (2),
#      QOPTS (more quantize options for every run)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
onnxq=$(realpath "${1:?usage: auto_methods.sh ONNXQ [MODEL...]}")
shift
cache=${OQ_CACHE:-$root/.cache}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
data=$(acc_data "$cache") || exit 1
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(det rec cls mobilenet_v2 resnet18 efficientnet_b0 squeezenet1_1 mobilenet_v3_small)
bits=${BITS:-8 16}
methods=${METHODS:-minmax percentile entropy mse auto}
threads=${THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


printf '| model | bits |'
for m in $methods; do printf ' %s |' "$m"; done
printf '\n|---|---|'
for m in $methods; do printf '%s' '---|'; done
printf '\n'
for key in "${models[@]}"; do
	read -r model set <<< "$(acc_model "$key" "$cache")"
	dir=$data/$set
	[ -f "$model" ] || { echo "| $key | missing |"; continue; }
	for b in $bits; do
		opts=()
		[ "$b" = 16 ] && opts=(--act-type int16 --weight-type int16)
		printf '| %s | %s |' "$key" "$b"
		for m in $methods; do
			if [ "$b" = 16 ] && [ "$m" = entropy ]; then printf ' - |'; continue; fi
			# shellcheck disable=SC2086
			if "$onnxq" quantize "$model" --calib "$dir/calib" -o "$tmp/q.onnx" --method "$m" \
				--no-bias-correction --threads "$threads" "${opts[@]}" ${QOPTS:-} 2>"$tmp/err" >/dev/null &&
				"$onnxq" compare "$model" "$tmp/q.onnx" --data "$dir/held" --json --threads "$threads" \
					>"$tmp/c.json" 2>"$tmp/err"; then
				printf ' %s |' "$(worst_sqnr "%.2f/%.2f" <"$tmp/c.json")"
			else
				printf ' fail: %s |' "$(tail -1 "$tmp/err" | head -c 80)"
			fi
		done
		printf '\n'
	done
done
