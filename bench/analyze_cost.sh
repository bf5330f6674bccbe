#!/usr/bin/env bash
# analyze_cost.sh - what `onnxq analyze` costs against the plain default quantize (issue 16: within
# 15x on PaddleOCR det, 12 samples, 2 threads), and what the fold SQNR adds to quantize.
#
# Samples: the first 12 of the acceptance data's det calib + held samples, cycled (symlinks).
# Runs, one after the other, each REP times (the median is kept; other sessions share the machine):
#   quantize   `onnxq quantize MODEL --calib S -o Q --threads T` (default options: the fold SQNR
#              included)
#   ref        the same with REF_ONNXQ (a build without the fold SQNR), when given
#   analyze    `onnxq analyze MODEL --calib S --threads T --json J`
# Prints wall and CPU (user + sys) seconds of each and the ratios analyze / quantize.
#
# usage: bench/analyze_cost.sh ONNXQ [REF_ONNXQ]
# env: OQ_CACHE, MODEL (default: det), N (12), THREADS (2), REP (3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
onnxq=$(realpath "${1:?usage: analyze_cost.sh ONNXQ [REF_ONNXQ]}")
ref=${2:+$(realpath "$2")}
cache=${OQ_CACHE:-$root/.cache}
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
data=$(acc_data "$cache")
read -r model key <<< "$(acc_model "${MODEL:-det}" "$cache")"
n=${N:-12}
threads=${THREADS:-2}
rep=${REP:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir "$tmp/s"
i=0
while [ "$i" -lt "$n" ]; do
	for f in "$data/$key"/calib/*.npy "$data/$key"/held/*.npy; do
		[ "$i" -lt "$n" ] || break
		ln -s "$f" "$tmp/s/$(printf '%03d' "$i").npy"
		i=$((i + 1))
	done
done

# timed LABEL CMD...: the median over REP runs of "wall cpu" (seconds)
timed() {
	local label=$1 r
	shift
	for r in $(seq "$rep"); do
		/usr/bin/time -f '%e %U %S' -o "$tmp/t" "$@" >/dev/null 2>"$tmp/err" ||
			{ cat "$tmp/err" >&2; exit 1; }
		awk '{ printf "%.2f %.2f\n", $1, $2 + $3 }' "$tmp/t"
	done | sort -n | awk -v k=$(((rep + 1) / 2)) 'NR == k'
}

q=$(timed quantize "$onnxq" quantize "$model" --calib "$tmp/s" -o "$tmp/q.onnx" --threads "$threads")
a=$(timed analyze "$onnxq" analyze "$model" --calib "$tmp/s" --threads "$threads" --json "$tmp/a.json")
printf '%-10s %8s %8s   (%s, %d samples, %d threads, median of %d)\n' run wall_s cpu_s "$(basename "$model")" \
	"$n" "$threads" "$rep"
printf '%-10s %8s %8s\n' quantize $q
if [ -n "$ref" ]; then
	r=$(timed ref "$ref" quantize "$model" --calib "$tmp/s" -o "$tmp/r.onnx" --threads "$threads")
	printf '%-10s %8s %8s\n' ref $r
fi
printf '%-10s %8s %8s\n' analyze $a
set -- $q $a
awk -v qw="$1" -v qc="$2" -v aw="$3" -v ac="$4" 'BEGIN {
	printf "analyze / quantize: %.1fx wall, %.1fx cpu\n", aw / qw, ac / qc }'
