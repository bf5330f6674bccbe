#!/usr/bin/env bash
# big_graph.sh - time onnxq on graphs of 10k-100k nodes (LLM exports are that
# long): the passes and the saver must stay near-linear in the node count.
#
# usage: bench/big_graph.sh [BUILD/onnxq]   (default: build/onnxq)
#   SIZES   node counts (default "10000 40000 100000")
#
# Models (bench/make_chain.c, compiled here against BUILD/libonnxq.a):
#   conv N   N Convs in a chain sharing one weight (the issue-15 reproducer)
#   convw N  N Convs with a weight each (one initializer per layer)
#   relu N   N Relus written in reverse order (every node out of place)
# Times each of
#   quantize MODEL -o OUT --calib random:1 --method minmax
#   convert --passes cleanup MODEL -o OUT     (relu: the toposort)
# and prints user and wall seconds and peak RSS. Not a timed test: it
# asserts nothing, it reports.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/onnxq}
bdir=$(cd "$(dirname "$bin")" && pwd)
sizes=${SIZES:-10000 40000 100000}
work=$(mktemp -d "${TMPDIR:-/tmp}/oq-big.XXXXXX")
trap 'rm -rf "$work"' EXIT

cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I"$root" -I"$bdir/gen" \
	"$root/bench/make_chain.c" "$bdir/libonnxq.a" \
	$(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm -o "$work/make_chain"

# timed LABEL CMD... : one line "LABEL  user U s  wall W s  rss R MB"
timed() {
	local label=$1
	shift
	/usr/bin/time -f "%U %e %M" -o "$work/time" "$@" >/dev/null 2>"$work/err" || {
		echo "$label: failed: $(head -c 300 "$work/err")"
		return
	}
	read -r u e r <"$work/time"
	printf '%-34s user %7.2f s  wall %7.2f s  rss %5d MB\n' "$label" "$u" "$e" $((r / 1024))
}

for n in $sizes; do
	for kind in conv convw relu; do
		"$work/make_chain" "$kind" "$n" "$work/$kind.onnx"
		timed "quantize $kind $n" "$bin" quantize "$work/$kind.onnx" -o "$work/q.onnx" \
			--calib random:1 --method minmax --quiet
		timed "convert --passes cleanup $kind $n" "$bin" convert --passes cleanup \
			"$work/$kind.onnx" -o "$work/c.onnx"
	done
done
