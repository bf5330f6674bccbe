#!/usr/bin/env bash
# stats_cli.sh - sharded calibration through the CLI on models/tiny_cnn.onnx
# and models/tiny_cnn_calib/ (16 samples):
#   - `calibrate --shard I/N` + `merge-stats` + `quantize --stats` gives a
#     model byte-identical (cmp) to `quantize --calib` on the same samples:
#     minmax (one round) and mse (default) / entropy / percentile
#     --act-symmetric (two rounds: ranges, then histograms over the merged
#     ranges), N = 1, 2, 3, 5 (16 samples: uneven blocks), shards merged in
#     shuffled order; with --calib-limit 11 and N = 4;
#   - control: fewer samples give a different model, so cmp can fail;
#   - refusals (documented exit codes, one line naming the file): incomplete
#     set, shard given twice, different N, corrupted and truncated files,
#     another model / other rewrite options, ranges-only file for a histogram
#     method, ema, --stats with --calib; OUT untouched.
# usage: tests/integration/stats_cli.sh [ONNXQ]   Closing line: "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
onnxq=${1:-$root/build/onnxq}
model=$root/models/tiny_cnn.onnx
calib=$root/models/tiny_cnn_calib
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; }

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

if [ ! -x "$onnxq" ]; then echo "stats_cli: $onnxq not found" >&2; echo "0 passed, 1 failed"; exit 1; fi

# shards N [extra options...]: one round (minmax) or two; writes $tmp/final.bin
shards() {
	local n=$1 two=$2
	shift 2
	local order files i
	rm -f "$tmp"/r_*.bin "$tmp"/h_*.bin
	order=$(seq 0 $((n - 1)) | sort -r) # merge in reverse order
	for i in $(seq 0 $((n - 1))); do
		"$onnxq" calibrate "$model" --calib "$calib" --shard "$i/$n" -o "$tmp/r_$i.bin" --quiet "$@" 2>"$tmp/err" ||
			{ echo "calibrate shard $i/$n: $(cat "$tmp/err")"; return 1; }
	done
	files=$(for i in $order; do echo "$tmp/r_$i.bin"; done)
	# shellcheck disable=SC2086
	"$onnxq" merge-stats $files -o "$tmp/ranges.bin" --quiet 2>"$tmp/err" || { cat "$tmp/err"; return 1; }
	if [ "$two" = 1 ]; then
		for i in $(seq 0 $((n - 1))); do
			"$onnxq" calibrate "$model" --calib "$calib" --shard "$i/$n" --ranges "$tmp/ranges.bin" \
				-o "$tmp/h_$i.bin" --quiet "$@" 2>"$tmp/err" || { echo "round 2 shard $i: $(cat "$tmp/err")"; return 1; }
		done
		files=$(for i in $order; do echo "$tmp/h_$i.bin"; done)
		# shellcheck disable=SC2086
		"$onnxq" merge-stats $files -o "$tmp/final.bin" --quiet 2>"$tmp/err" || { cat "$tmp/err"; return 1; }
	else
		cp "$tmp/ranges.bin" "$tmp/final.bin"
	fi
}

# same NAME N TWO [options...]: sharded result == one-machine result
same() {
	local name=$1 n=$2 two=$3
	shift 3
	if ! "$onnxq" quantize "$model" --calib "$calib" -o "$tmp/ref.onnx" --quiet "$@" 2>"$tmp/err"; then
		bad "$name: one-machine quantize failed: $(head -c 300 "$tmp/err")"
		return
	fi
	local msg
	if ! msg=$(shards "$n" "$two" "$@"); then bad "$name N=$n: $msg"; return; fi
	if ! "$onnxq" quantize "$model" --stats "$tmp/final.bin" -o "$tmp/sh.onnx" --quiet "$@" 2>"$tmp/err"; then
		bad "$name N=$n: quantize --stats failed: $(head -c 300 "$tmp/err")"
		return
	fi
	if cmp -s "$tmp/ref.onnx" "$tmp/sh.onnx"; then ok "$name N=$n: byte-identical"; else
		bad "$name N=$n: sharded model differs from the one-machine model"
	fi
}

for n in 1 2 3 5; do same "minmax" "$n" 0 --method minmax; done
for n in 1 2 3 5; do same "mse (default)" "$n" 1; done
same "entropy" 3 1 --method entropy
same "percentile --act-symmetric" 2 1 --method percentile --act-symmetric --percentile 99.9
same "mse --calib-limit 11" 4 1 --calib-limit 11
same "minmax int8 per-tensor" 3 0 --method minmax --act-type int8 --granularity tensor

# control: the data matters, so the cmp above can fail
run "control" "$onnxq" quantize "$model" --calib "$calib" --calib-limit 5 -o "$tmp/few.onnx" --quiet &&
	run "control ref" "$onnxq" quantize "$model" --calib "$calib" -o "$tmp/all.onnx" --quiet &&
	if cmp -s "$tmp/few.onnx" "$tmp/all.onnx"; then bad "control: 5 and 16 samples give the same model"; else
		ok "control: 5 and 16 samples give different models"; fi

# --calib-batch: same model as one sample at a time (tiny_cnn's batch dim is symbolic), also with shards
for m in minmax mse; do
	run "batch ref $m" "$onnxq" quantize "$model" --calib "$calib" --method "$m" -o "$tmp/b1.onnx" --quiet &&
		run "batch 5 $m" "$onnxq" quantize "$model" --calib "$calib" --method "$m" --calib-batch 5 -o "$tmp/b5.onnx" --quiet &&
		if cmp -s "$tmp/b1.onnx" "$tmp/b5.onnx"; then ok "--calib-batch 5 --method $m: byte-identical"; else
			bad "--calib-batch 5 --method $m: model differs"; fi
done
same "mse --calib-batch 4" 3 1 --calib-batch 4
run "ema ref" "$onnxq" quantize "$model" --calib "$calib" --method ema -o "$tmp/e1.onnx" --quiet &&
	run "ema batch" "$onnxq" quantize "$model" --calib "$calib" --method ema --calib-batch 4 -o "$tmp/e4.onnx" --quiet &&
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
	run "shard $i/3" "$onnxq" calibrate "$model" --calib "$calib" --shard "$i/3" -o "$tmp/s$i.bin" --quiet
done
run "merge 0,2" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/s2.bin" -o "$tmp/s02.bin" --quiet
expect_exit 2 "incomplete set" "$onnxq" quantize "$model" --stats "$tmp/s02.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "incomplete set" "s02\.bin.*stats cover shards 0,2 of 3.*missing 1"
expect_exit 2 "shard given twice" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/s1.bin" "$tmp/s0.bin" -o "$tmp/x.bin"
expect_msg "shard given twice" "s0\.bin: shard 0 of 3 is already"
run "shard 0/2" "$onnxq" calibrate "$model" --calib "$calib" --shard 0/2 -o "$tmp/t0.bin" --quiet
expect_exit 2 "different N" "$onnxq" merge-stats "$tmp/s1.bin" "$tmp/t0.bin" -o "$tmp/x.bin"
expect_msg "different N" "t0\.bin splits 16 samples into 2 shards"
run "merge all" "$onnxq" merge-stats "$tmp/s0.bin" "$tmp/s1.bin" "$tmp/s2.bin" -o "$tmp/all.bin" --quiet
expect_exit 2 "ranges only for mse" "$onnxq" quantize "$model" --stats "$tmp/all.bin" -o "$tmp/keep.onnx"
expect_msg "ranges only for mse" "all\.bin holds ranges only"
python3 - "$tmp/all.bin" "$tmp/corrupt.bin" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x01
open(sys.argv[2], "wb").write(b)
EOF
expect_exit 2 "corrupted file" "$onnxq" quantize "$model" --stats "$tmp/corrupt.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "corrupted file" "corrupt\.bin is corrupted"
head -c 100 "$tmp/all.bin" >"$tmp/trunc.bin"
expect_exit 2 "truncated file" "$onnxq" merge-stats "$tmp/trunc.bin" "$tmp/s0.bin" -o "$tmp/x.bin"
expect_msg "truncated file" "trunc\.bin is corrupted"
expect_exit 2 "not a stats file" "$onnxq" quantize "$model" --stats "$model" -o "$tmp/keep.onnx" --method minmax
expect_msg "not a stats file" "not an onnxq statistics file"
expect_exit 4 "missing file" "$onnxq" quantize "$model" --stats "$tmp/nope.bin" -o "$tmp/keep.onnx"
expect_msg "missing file" "nope\.bin"
run "other model" "$onnxq" convert "$model" -o "$tmp/other.onnx" --passes fold-bn
expect_exit 2 "another model" "$onnxq" quantize "$tmp/other.onnx" --stats "$tmp/all.bin" -o "$tmp/keep.onnx" --method minmax
expect_msg "another model" "all\.bin was computed for another model"
expect_exit 2 "other rewrite options" "$onnxq" quantize "$model" --stats "$tmp/all.bin" -o "$tmp/keep.onnx" --method minmax --no-fold-bn
expect_exit 1 "ema" "$onnxq" calibrate "$model" --calib "$calib" --method ema -o "$tmp/x.bin"
expect_msg "ema" "ema.*cannot be split or merged"
expect_exit 1 "--stats with --calib" "$onnxq" quantize "$model" --stats "$tmp/all.bin" --calib "$calib" -o "$tmp/keep.onnx"
expect_exit 1 "bad --shard" "$onnxq" calibrate "$model" --calib "$calib" --shard 3/3 -o "$tmp/x.bin"
expect_exit 1 "--ranges with minmax" "$onnxq" calibrate "$model" --calib "$calib" --method minmax --ranges "$tmp/all.bin" -o "$tmp/x.bin"
if [ "$(cat "$tmp/keep.onnx")" = keep ]; then ok "OUT untouched on errors"; else bad "OUT changed on an error"; fi
if [ ! -e "$tmp/x.bin" ]; then ok "no statistics file written on errors"; else bad "x.bin written on an error"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
