#!/bin/sh
# make_corpus.sh - builds the fuzz seed corpus (not committed: it is made
# from the ONNX backend node tests installed on the machine).
#
# usage: tests/fuzz/make_corpus.sh OUTDIR [MAX]
#
# Copies up to MAX (default 400) small node-test models from
# $OQ_NODE_TESTS (default /usr/share/libonnx-testdata/data/node): every
# model with a subgraph (If/Loop/Scan/SequenceMap) or a tensor attribute
# first, then an even spread of the rest; plus the handcrafted seeds in
# tests/fuzz/corpus/. Files larger than 8 KiB are skipped (libFuzzer
# mutates small inputs far better).
set -eu
out=${1:?usage: make_corpus.sh OUTDIR [MAX]}
max=${2:-400}
src=${OQ_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}
here=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$out"
cp "$here"/corpus/*.onnx "$out"/ 2>/dev/null || true
if [ ! -d "$src" ]; then
	echo "make_corpus: $src not found: only the handcrafted seeds were copied" >&2
	exit 0
fi
list=$(mktemp)
trap 'rm -f "$list"' EXIT
# Priority: names hinting at subgraphs or constant tensors, then the rest.
for d in "$src"/*/; do
	f=$d/model.onnx
	[ -f "$f" ] || continue
	[ "$(wc -c <"$f")" -le 8192 ] || continue
	n=$(basename "$d")
	case $n in
	*_if*|*_loop*|*_scan*|*sequence_map*|*constant*|*_cast*|*dequantize*|*quantize*) echo "0 $n" ;;
	*) echo "1 $n" ;;
	esac
done | sort >"$list"
total=$(wc -l <"$list")
first=$(grep -c '^0 ' "$list" || true)
# Keep all priority cases, then every k-th other case to reach MAX.
rest=$((total - first))
room=$((max - first))
[ "$room" -gt 0 ] || room=0
step=1
[ "$room" -gt 0 ] && [ "$rest" -gt "$room" ] && step=$(( (rest + room - 1) / room ))
i=0
n=0
while read -r prio name; do
	if [ "$prio" = 1 ]; then
		i=$((i + 1))
		[ "$room" -gt 0 ] || continue
		[ $(( (i - 1) % step )) -eq 0 ] || continue
	fi
	[ "$n" -lt "$max" ] || break
	cp "$src/$name/model.onnx" "$out/$name.onnx"
	n=$((n + 1))
done <"$list"
echo "make_corpus: $n node-test models + $(ls "$here"/corpus/*.onnx 2>/dev/null | wc -l) handcrafted seeds in $out"
