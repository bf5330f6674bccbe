#!/usr/bin/env bash
# stats_cli.sh - sharded calibration through the CLI on models/tiny_cnn.onnx
# and models/tiny_cnn_calib/ (16 samples):
#   - `calibrate --shard I/N` + `merge-stats` + `quantize --stats` (one round
#     for every method) gives a model byte-identical (cmp) to `quantize
#     --calib --no-bias-correction` on the same samples (statistics carry no
#     samples for the default empirical bias correction: `quantize --stats`
#     says so in one line, and refuses an explicit --bias-correction):
#     minmax, mse (default), entropy,
#     percentile --act-symmetric, N = 1, 2, 3, 5 (16 samples: uneven blocks),
#     shards merged in reverse order; with --calib-limit 11 and N = 4; with
#     int16 overrides (a tensor entry, and a node entry on a Conv whose Relu
#     quantize folds); --calib-batch; merging in another order gives a
#     byte-identical statistics file;
#   - --method auto (per-fold histograms, statistics format 3): N = 1, 3, 5,
#     --calib-folds 3 with int16 activations, --calib-batch 3, the int16 default
#     (auto without --method); an auto file
#     also serves mse; a file without folds or of other folds is refused;
#   - one histogram file serves every histogram method and grid: mse shards,
#     then quantize --stats --method percentile / entropy / mse --act-type
#     int8 / minmax == quantize --calib with those options;
#   - --threads 1 and 2, sample order (the samples under reversed names) and
#     --calib-batch 3 give byte-identical models for every method but ema
#     (auto: threads and batches; its folds follow the sample order);
#   - control: fewer samples give a different model, so cmp can fail;
#   - every quantize runs with --prefer accuracy (ONNX Runtime runs the tiny CNN faster in
#     float, so the default placement leaves it float and the comparisons would be vacuous);
#     the default placement itself gives the same bytes through --stats and --calib (its
#     cost model sizes the model by the fixed declared input shapes either way);
#   - refusals (documented exit codes, one line naming the file): incomplete
#     set, shard given twice, different N, corrupted and truncated files,
#     another model / other rewrite options, ranges-only file for a histogram
#     method, files of different methods merged, a version 1 (two-round)
#     file, ema, --stats with --calib, --ranges (gone: a usage error saying
#     so); OUT untouched.
# usage: tests/integration/stats_cli.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
model=$root/models/tiny_cnn.onnx
calib=$root/models/tiny_cnn_calib
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # NAME CMD...: must exit 0
	local name=$1
	shift
	if "$@" >"$tmp/out" 2>"$tmp/err"; then return 0; fi
	bad "$name failed: $(head -c 300 "$tmp/err")"
	return 1
}

expect_exit() { # CODE NAME CMD...: stderr kept in $tmp/err
	local want=$1 name=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	local got=$?
	if [ "$got" -eq "$want" ]; then ok "$name (exit $got)"; else
		bad "$name: exit $got, expected $want: $(head -c 300 "$tmp/err")"
	fi
}

expect_msg() { # NAME PATTERN: the last stderr is one line matching PATTERN
	if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qE -- "$2" "$tmp/err"; then ok "$1 message"; else
		bad "$1 message: $(head -c 300 "$tmp/err")"
	fi
}

[ -x "$onnxq" ] || die "$onnxq not found"

# shards N [extra options...]: one round; writes $tmp/final.bin (shards merged in reverse order)
shards() {
	local n=$1
	shift 1
	local files i
	rm -f "$tmp"/r_*.bin
	for i in $(seq 0 $((n - 1))); do
		"$onnxq" calibrate "$model" --calib "$calib" --shard "$i/$n" -o "$tmp/r_$i.bin" --quiet "$@" 2>"$tmp/err" ||
			{ echo "calibrate shard $i/$n: $(cat "$tmp/err")"; return 1; }
	done
	files=$(for i in $(seq $((n - 1)) -1 0); do echo "$tmp/r_$i.bin"; done)
	# shellcheck disable=SC2086
	"$onnxq" merge-stats $files -o "$tmp/final.bin" --quiet 2>"$tmp/err" || { cat "$tmp/err"; return 1; }
}

# same NAME N [options...]: sharded result == one-machine result
same() {
	local name=$1 n=$2
	shift 2
	if ! "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" -o "$tmp/ref.onnx" --quiet --no-bias-correction "$@" 2>"$tmp/err"; then
		bad "$name: one-machine quantize failed: $(head -c 300 "$tmp/err")"
		return
	fi
	local msg
	if ! msg=$(shards "$n" "$@"); then bad "$name N=$n: $msg"; return; fi
	if ! "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/final.bin" -o "$tmp/sh.onnx" --quiet "$@" 2>"$tmp/err"; then
		bad "$name N=$n: quantize --stats failed: $(head -c 300 "$tmp/err")"
		return
	fi
	if cmp -s "$tmp/ref.onnx" "$tmp/sh.onnx"; then ok "$name N=$n: byte-identical"; else
		bad "$name N=$n: sharded model differs from the one-machine model"
	fi
}

for n in 1 2 3 5; do same "minmax" "$n" --method minmax; done
for n in 1 2 3 5; do same "mse (default)" "$n"; done
same "entropy" 3 --method entropy
same "percentile --act-symmetric" 2 --method percentile --act-symmetric --percentile 99.9
same "mse --calib-limit 11" 4 --calib-limit 11
same "minmax int8 per-tensor" 3 --method minmax --act-type int8 --granularity tensor
for n in 1 3 5; do same "auto" "$n" --method auto; done
same "auto int16 --calib-folds 3" 2 --method auto --calib-folds 3 --act-type int16
same "auto --calib-batch 3" 3 --method auto --calib-batch 3
same "int16 default (auto)" 2 --act-type int16
if shards 3 --method auto >/dev/null; then
	run "auto file for mse" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/final.bin" -o "$tmp/am.onnx" --quiet &&
		run "mse ref" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" -o "$tmp/mr.onnx" --quiet --no-bias-correction &&
		if cmp -s "$tmp/am.onnx" "$tmp/mr.onnx"; then ok "an auto file serves --method mse: byte-identical"; else
			bad "an auto file with --method mse differs from quantize --calib"; fi
	run "auto ref" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" -o "$tmp/ar.onnx" --quiet --no-bias-correction --method auto &&
		if cmp -s "$tmp/ar.onnx" "$tmp/mr.onnx"; then bad "control: auto gives the mse model"; else
			ok "control: auto and mse give different models"; fi
	expect_exit 2 "auto with other folds" "$onnxq" quantize "$model" --stats "$tmp/final.bin" -o "$tmp/keep.onnx" --method auto --calib-folds 2
	expect_msg "auto with other folds" "final\.bin holds 4 folds.*needs 2"
else bad "auto file: calibrate failed"; fi
if shards 2 --method mse >/dev/null; then
	expect_exit 2 "auto without folds" "$onnxq" quantize "$model" --stats "$tmp/final.bin" -o "$tmp/keep.onnx" --method auto
	expect_msg "auto without folds" "final\.bin holds 0 folds.*--method auto"
else bad "mse file for auto: calibrate failed"; fi
# per-tensor grids: r2 (a tensor entry) and r3 (the output of relu3, which quantize folds into
# conv3: conv3's node entry) get int16 mse searches, in both paths (the unit tests pin the search
# itself: test_observers per_tensor_grid_from_overrides)
printf '{"tensors": {"r2": {"dtype": "int16"}}, "nodes": {"conv3": {"dtype": "int16"}}}' >"$tmp/ov16.json"
same "mse int16 overrides" 2 --overrides "$tmp/ov16.json"
run "int16 control" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" -o "$tmp/u8.onnx" --quiet &&
	if cmp -s "$tmp/u8.onnx" "$tmp/ref.onnx"; then bad "control: the int16 overrides changed nothing"; else
		ok "control: the int16 overrides change the model"; fi

# merge order does not matter: the same statistics file, byte for byte
if shards 3 >/dev/null && cp "$tmp/final.bin" "$tmp/fwd.bin" &&
	"$onnxq" merge-stats "$tmp/r_1.bin" "$tmp/r_0.bin" "$tmp/r_2.bin" -o "$tmp/mix.bin" --quiet; then
	if cmp -s "$tmp/fwd.bin" "$tmp/mix.bin"; then ok "merge order: byte-identical statistics"; else
		bad "merge order changed the statistics file"; fi
else bad "merge order: calibrate/merge failed"; fi

# one histogram file, any histogram method and grid at quantize time
if shards 3 --method mse >/dev/null; then
	for opts in "--method percentile" "--method entropy" "--method mse --act-type int8" "--method minmax"; do
		# shellcheck disable=SC2086
		run "calib $opts" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" -o "$tmp/a.onnx" --quiet $opts &&
			# shellcheck disable=SC2086
			run "stats $opts" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/final.bin" -o "$tmp/b.onnx" --quiet $opts &&
			if cmp -s "$tmp/a.onnx" "$tmp/b.onnx"; then ok "mse histograms serve $opts: byte-identical"; else
				bad "mse histograms with $opts differ from quantize --calib"; fi
	done
else bad "histogram file for other methods: calibrate failed"; fi

# threads, sample order, batching: byte-identical models for every order-free method
mkdir -p "$tmp/rev"
i=15
for f in "$calib"/*; do cp -r "$f" "$tmp/rev/$(printf '%03d' "$i").${f##*.}"; i=$((i - 1)); done
for m in minmax mse percentile entropy; do
	run "$m t1" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method "$m" --threads 1 -o "$tmp/t1.onnx" --quiet &&
		run "$m t2" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method "$m" --threads 2 -o "$tmp/t2.onnx" --quiet &&
		run "$m rev" "$onnxq" quantize --prefer accuracy "$model" --calib "$tmp/rev" --method "$m" -o "$tmp/rv.onnx" --quiet &&
		run "$m b3" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method "$m" --calib-batch 3 -o "$tmp/b3.onnx" --quiet &&
		if cmp -s "$tmp/t1.onnx" "$tmp/t2.onnx" && cmp -s "$tmp/t1.onnx" "$tmp/rv.onnx" &&
			cmp -s "$tmp/t1.onnx" "$tmp/b3.onnx"; then
			ok "--method $m: threads 1/2, reversed sample order, --calib-batch 3: byte-identical"
		else bad "--method $m: threads, order or batching changed the model"; fi
done
run "auto t1" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method auto --threads 1 -o "$tmp/t1.onnx" --quiet &&
	run "auto t2" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method auto --threads 2 -o "$tmp/t2.onnx" --quiet &&
	run "auto b3" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method auto --calib-batch 3 -o "$tmp/b3.onnx" --quiet &&
	if cmp -s "$tmp/t1.onnx" "$tmp/t2.onnx" && cmp -s "$tmp/t1.onnx" "$tmp/b3.onnx"; then
		ok "--method auto: threads 1/2, --calib-batch 3: byte-identical"
	else bad "--method auto: threads or batching changed the model"; fi

# the default (runtime-aware) placement: the same placement through --stats as through --calib
run "default placement calib" "$onnxq" quantize "$model" --calib "$calib" -o "$tmp/dp1.onnx" --quiet --no-bias-correction &&
	run "default placement stats" "$onnxq" quantize "$model" --stats "$tmp/final.bin" -o "$tmp/dp2.onnx" --quiet &&
	if cmp -s "$tmp/dp1.onnx" "$tmp/dp2.onnx"; then ok "default placement: --stats gives the --calib model"; else
		bad "default placement: --stats and --calib models differ"; fi

# control: the data matters, so the cmp above can fail
run "control" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --calib-limit 5 -o "$tmp/few.onnx" --quiet &&
	run "control ref" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" -o "$tmp/all.onnx" --quiet &&
	if cmp -s "$tmp/few.onnx" "$tmp/all.onnx"; then bad "control: 5 and 16 samples give the same model"; else
		ok "control: 5 and 16 samples give different models"; fi

# --calib-batch: same model as one sample at a time (tiny_cnn's batch dim is symbolic), also with shards
for m in minmax mse; do
	run "batch ref $m" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method "$m" -o "$tmp/b1.onnx" --quiet &&
		run "batch 5 $m" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method "$m" --calib-batch 5 -o "$tmp/b5.onnx" --quiet &&
		if cmp -s "$tmp/b1.onnx" "$tmp/b5.onnx"; then ok "--calib-batch 5 --method $m: byte-identical"; else
			bad "--calib-batch 5 --method $m: model differs"; fi
done
same "mse --calib-batch 4" 3 --calib-batch 4
run "ema ref" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method ema -o "$tmp/e1.onnx" --quiet &&
	run "ema batch" "$onnxq" quantize --prefer accuracy "$model" --calib "$calib" --method ema --calib-batch 4 -o "$tmp/e4.onnx" --quiet &&
	if cmp -s "$tmp/e1.onnx" "$tmp/e4.onnx"; then bad "control: ema per batch equals ema per sample (batching not in effect?)"; else
		ok "control: ema updates per batch, so --calib-batch changes its model"; fi
# the same model with batch fixed to 1: TensorShapeProto.Dimension dim_param "batch" (12 05 batch)
# becomes dim_value 1 + denotation "one" (08 01 1a 03 one), the same length, so no enclosing
# length changes
run "fixed-batch model" python3 - "$model" "$tmp/fixed.onnx" <<'EOF2'
import sys
b = open(sys.argv[1], "rb").read()
assert b.count(b"\x12\x05batch") == 2
open(sys.argv[2], "wb").write(b.replace(b"\x12\x05batch", b"\x08\x01\x1a\x03one"))
EOF2
expect_exit 1 "--calib-batch on a fixed batch dim" "$onnxq" quantize "$tmp/fixed.onnx" --calib "$calib" --calib-batch 2 -o "$tmp/keep.onnx"
expect_msg "--calib-batch on a fixed batch dim" "input 'image' has a fixed batch dimension"

# --- refusals
echo keep >"$tmp/keep.onnx"
for i in 0 1 2; do
	run "shard $i/3" "$onnxq" calibrate "$model" --calib "$calib" --shard "$i/3" -o "$tmp/s$i.bin" --quiet --method minmax
done
run "merge 0,2" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/s2.bin" -o "$tmp/s02.bin" --quiet
expect_exit 2 "incomplete set" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/s02.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "incomplete set" "s02\.bin.*stats cover shards 0,2 of 3.*missing 1"
expect_exit 2 "shard given twice" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/s1.bin" "$tmp/s0.bin" -o "$tmp/x.bin"
expect_msg "shard given twice" "s0\.bin: shard 0 of 3 is already"
run "shard 0/2" "$onnxq" calibrate "$model" --calib "$calib" --shard 0/2 -o "$tmp/t0.bin" --quiet --method minmax
expect_exit 2 "different N" "$onnxq" merge-stats "$tmp/s1.bin" "$tmp/t0.bin" -o "$tmp/x.bin"
expect_msg "different N" "t0\.bin splits 16 samples into 2 shards"
run "merge all" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/s1.bin" "$tmp/s2.bin" -o "$tmp/all.bin" --quiet
expect_exit 2 "ranges only for mse" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/all.bin" -o "$tmp/keep.onnx"
expect_msg "ranges only for mse" "all\.bin holds ranges only.*--method mse"
run "mse shard 1/3" "$onnxq" calibrate "$model" --calib "$calib" --shard 1/3 -o "$tmp/h1.bin" --quiet
expect_exit 2 "ranges and histograms merged" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/h1.bin" -o "$tmp/x.bin"
expect_msg "ranges and histograms merged" "h1\.bin holds histograms.*same --method"
# a version 1 file (the two-round format): the version field rewritten, the checksum left alone
python3 - "$tmp/all.bin" "$tmp/v1.bin" <<'EOF3'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[8] = 1
open(sys.argv[2], "wb").write(b)
EOF3
expect_exit 2 "version 1 file" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/v1.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "version 1 file" "v1\.bin has format version 1; this onnxq reads version 2"
python3 - "$tmp/all.bin" "$tmp/corrupt.bin" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x01
open(sys.argv[2], "wb").write(b)
EOF
expect_exit 2 "corrupted file" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/corrupt.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "corrupted file" "corrupt\.bin is corrupted"
head -c 100 "$tmp/all.bin" >"$tmp/trunc.bin"
expect_exit 2 "truncated file" "$onnxq" merge-stats "$tmp/trunc.bin" "$tmp/s0.bin" -o "$tmp/x.bin"
expect_msg "truncated file" "trunc\.bin is corrupted"
expect_exit 2 "not a stats file" "$onnxq" quantize --prefer accuracy "$model" --stats "$model" -o "$tmp/keep.onnx" --method minmax
expect_msg "not a stats file" "not an onnxq statistics file"
expect_exit 4 "missing file" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/nope.bin" -o "$tmp/keep.onnx"
expect_msg "missing file" "nope\.bin"
run "other model" "$onnxq" convert "$model" -o "$tmp/other.onnx" --passes fold-bn
expect_exit 2 "another model" "$onnxq" quantize "$tmp/other.onnx" --stats "$tmp/all.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "another model" "all\.bin was computed for another model"
expect_exit 2 "other rewrite options" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/all.bin" -o "$tmp/keep.onnx" --method minmax --no-fold-bn
expect_exit 1 "ema" "$onnxq" calibrate "$model" --calib "$calib" --method ema -o "$tmp/x.bin"
expect_msg "ema" "ema.*cannot be split or merged"
expect_exit 1 "--stats with --calib" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/all.bin" --calib "$calib" -o "$tmp/keep.onnx"
expect_exit 1 "--stats with --bias-correction" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/all.bin" --method minmax --bias-correction -o "$tmp/keep.onnx"
if grep -q -- "--bias-correction needs the samples" "$tmp/err"; then ok "--stats with --bias-correction message"; else
	bad "--stats with --bias-correction message: $(head -c 300 "$tmp/err")"; fi
expect_exit 1 "calibrate with --bias-correction" "$onnxq" calibrate "$model" --calib "$calib" --bias-correction -o "$tmp/x.bin"
# the default correction is off with --stats: one line says so (not with --no-bias-correction)
if run "--stats note" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/all.bin" --method minmax -o "$tmp/note.onnx"; then
	if [ "$(grep -c 'bias correction' "$tmp/err")" -eq 1 ] &&
		grep -q -- "no bias correction with --stats.*--no-bias-correction" "$tmp/err"; then ok "--stats: one line on bias correction"; else
		bad "--stats: want one line on bias correction: $(head -c 400 "$tmp/err")"; fi
fi
if run "--stats --no-bias-correction" "$onnxq" quantize --prefer accuracy "$model" --stats "$tmp/all.bin" --method minmax --no-bias-correction -o "$tmp/note2.onnx"; then
	if ! grep -q 'bias correction' "$tmp/err" && cmp -s "$tmp/note.onnx" "$tmp/note2.onnx"; then
		ok "--stats --no-bias-correction: no note, same model"; else bad "--stats --no-bias-correction: $(head -c 400 "$tmp/err")"; fi
fi
expect_exit 1 "bad --shard" "$onnxq" calibrate "$model" --calib "$calib" --shard 3/3 -o "$tmp/x.bin"
expect_exit 1 "--ranges (gone)" "$onnxq" calibrate "$model" --calib "$calib" --ranges "$tmp/all.bin" -o "$tmp/x.bin"
if grep -q -- "--ranges is no longer needed" "$tmp/err"; then ok "--ranges message"; else
	bad "--ranges message: $(head -c 300 "$tmp/err")"; fi
if [ "$(cat "$tmp/keep.onnx")" = keep ]; then ok "OUT untouched on errors"; else bad "OUT changed on an error"; fi
if [ ! -e "$tmp/x.bin" ]; then ok "no statistics file written on errors"; else bad "x.bin written on an error"; fi

finish
