#!/usr/bin/env bash
# same_bits.sh - a refactor must not change a single output byte: every file
# ONNXQ (the build under test) writes is cmp-identical to what REF (a build of
# the commit before the change) writes, over a matrix of commands and options:
#   quantize: default, --no-bias-correction, each --method, --bias-correction=analytic,
#     --profile trt, int16 activations and weights, per-tensor and blockwise int4
#     weights, --weight-only int4 block 32 on MatMul/Gemm/Conv, --act-symmetric,
#     --weight-method mse, --export-encodings (the JSON too), --calib-batch;
#   calibrate (two shards) + merge-stats + quantize --stats;
#   convert --passes cleanup,upgrade-opset,fold-bn,fuse; run (the output .npy files).
# Models: the bundled models/tiny_cnn.onnx always; PaddleOCR cls/rec/det and
# torchvision mobilenet_v2/resnet18 from OQ_CACHE when present (fetch.sh,
# torchvision_export.py and quant_accuracy.sh fill it), else skipped.
# ONNXQ runs at --threads 1 and 2, REF at 1 (each is thread-independent).
# A build that has --prefer (runtime-aware placement) quantizes and calibrates
# with --prefer accuracy, the placement of builds before it: @PA@ in a command
# stands for that option (or nothing).
# usage: bench/same_bits.sh ONNXQ REF [QUICK=1: tiny_cnn and cls only]
# Closing line: "N passed, N failed, N skipped".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
onnxq=$(realpath "${1:?usage: same_bits.sh ONNXQ REF}")
ref=$(realpath "${2:?usage: same_bits.sh ONNXQ REF}")
cache=${OQ_CACHE:-$root/.cache}
data=$(ls -d "$cache"/acc/data-* 2>/dev/null | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0 skip=0
# (the help is read whole: grep -q in a pipe could end it early, and pipefail would see SIGPIPE)
pa_of() { case $("$1" quantize --help 2>&1) in *--prefer*) echo "--prefer accuracy" ;; esac; }
pa_ref=$(pa_of "$ref")
pa_new=$(pa_of "$onnxq")

# expand BIN PA ARGS...: ARGS with @BIN@ as BIN and @PA@ as the words of PA (also inside a word,
# as in an sh -c script), into the array cmd.
expand() {
	local bin=$1 pa=$2 a
	shift 2
	cmd=()
	for a in "$@"; do
		if [ "$a" = @PA@ ]; then
			# shellcheck disable=SC2206
			cmd+=($pa)
		else
			a=${a//@BIN@/$bin}
			cmd+=("${a//@PA@/$pa}")
		fi
	done
}
ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; }

# same TAG CMD...: runs CMD with @BIN@ = REF into $tmp/r, then ONNXQ at 1 and
# 2 threads into $tmp/n, and compares every file the command wrote. With
# NOTHREADS=1 (a command without --threads) ONNXQ runs once.
same() {
	local tag=$1 t ts=(1 2) th
	shift
	[ "${NOTHREADS:-0}" = 1 ] && ts=(0)
	rm -rf "$tmp/r" "$tmp/n"
	mkdir -p "$tmp/r" "$tmp/n"
	th=(--threads 1)
	[ "${NOTHREADS:-0}" = 1 ] && th=()
	expand "$ref" "$pa_ref" "$@"
	if ! (cd "$tmp/r" && "${cmd[@]}" "${th[@]}" >stdout 2>stderr); then
		bad "$tag: REF failed: $(tail -1 "$tmp/r/stderr")"
		return
	fi
	rm -f "$tmp/r/stderr"
	for t in "${ts[@]}"; do
		rm -rf "$tmp/n"
		mkdir -p "$tmp/n"
		th=(--threads "$t")
		[ "$t" = 0 ] && th=()
		expand "$onnxq" "$pa_new" "$@"
		if ! (cd "$tmp/n" && "${cmd[@]}" "${th[@]}" >stdout 2>stderr); then
			bad "$tag --threads $t: failed: $(tail -1 "$tmp/n/stderr")"
			continue
		fi
		rm -f "$tmp/n/stderr"
		if diff -r -q "$tmp/r" "$tmp/n" >"$tmp/diff"; then
			ok "$tag --threads $t"
		else
			bad "$tag --threads $t: $(head -1 "$tmp/diff")"
		fi
	done
}

# name|model|calib folder|held-out folder
MODELS="tiny_cnn|$root/models/tiny_cnn.onnx|$root/models/tiny_cnn_calib|$root/models/tiny_cnn_test"
if [ -n "$data" ]; then
	MODELS="$MODELS
cls|$cache/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx|$data/cls/calib|$data/cls/held"
	[ "${QUICK:-0}" = 1 ] || MODELS="$MODELS
rec|$cache/ocr/ch_PP-OCRv4_rec_infer.onnx|$data/rec/calib|$data/rec/held
det|$cache/ocr/ch_PP-OCRv4_det_infer.onnx|$data/det/calib|$data/det/held
mobilenet_v2|$cache/tv/mobilenet_v2.onnx|$data/img/calib|$data/img/held
resnet18|$cache/tv/resnet18.onnx|$data/img/calib|$data/img/held"
fi

while IFS='|' read -r name model dir held; do
	if [ ! -f "$model" ] || [ ! -d "$dir" ]; then
		echo "skip  $name (missing $model or its samples)"
		skip=$((skip + 1))
		continue
	fi
	q=(@BIN@ quantize "$model" -o out.onnx --calib "$dir" --calib-limit 8 @PA@)
	same "$name default" "${q[@]}"
	same "$name no-bc" "${q[@]}" --no-bias-correction
	for m in minmax percentile entropy ema; do
		same "$name $m" "${q[@]}" --no-bias-correction --method "$m"
	done
	same "$name analytic bc" "${q[@]}" --bias-correction=analytic
	same "$name trt" "${q[@]}" --no-bias-correction --profile trt
	same "$name int16" "${q[@]}" --no-bias-correction --act-type int16 --weight-type int16 --method mse
	same "$name tensor" "${q[@]}" --no-bias-correction --granularity tensor --act-symmetric
	same "$name int4 block" "${q[@]}" --no-bias-correction --weight-type int4 --granularity block --block-size 16
	same "$name weight mse" "${q[@]}" --no-bias-correction --weight-method mse
	same "$name encodings" "${q[@]}" --no-bias-correction --export-encodings enc.json
	same "$name weight-only" @BIN@ quantize "$model" -o out.onnx @PA@ --weight-only --weight-type int4 \
		--granularity block --block-size 32 --op-types MatMul,Gemm,Conv
	NOTHREADS=1 same "$name convert" @BIN@ convert "$model" -o out.onnx --passes cleanup,upgrade-opset,fold-bn,fuse
	same "$name stats" sh -c "$(printf '%q ' @BIN@) calibrate $(printf '%q' "$model") -o s0.stats --calib $(printf '%q' "$dir") --calib-limit 8 --shard 0/2 @PA@ &&
		$(printf '%q ' @BIN@) calibrate $(printf '%q' "$model") -o s1.stats --calib $(printf '%q' "$dir") --calib-limit 8 --shard 1/2 @PA@ &&
		$(printf '%q ' @BIN@) merge-stats s0.stats s1.stats -o all.stats &&
		$(printf '%q ' @BIN@) quantize $(printf '%q' "$model") -o out.onnx --stats all.stats @PA@" _
	[ -d "$held" ] && same "$name run" @BIN@ run "$model" --data "$held" --output-dir outs
done <<<"$MODELS"

# control: the comparison can fail (4 samples give another model than 8)
m=$root/models/tiny_cnn.onnx c=$root/models/tiny_cnn_calib
# shellcheck disable=SC2086
if "$ref" quantize "$m" -o "$tmp/a.onnx" --calib "$c" --calib-limit 4 $pa_ref 2>/dev/null &&
	"$onnxq" quantize "$m" -o "$tmp/b.onnx" --calib "$c" --calib-limit 8 $pa_new 2>/dev/null &&
	! cmp -s "$tmp/a.onnx" "$tmp/b.onnx"; then
	ok "control: 4 and 8 samples give different models"
else
	bad "control: 4 and 8 samples gave the same model (or failed)"
fi

if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
