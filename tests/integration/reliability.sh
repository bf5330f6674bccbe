#!/usr/bin/env bash
# reliability.sh - outputs that never destroy or mismatch, bounded work on
# hostile or huge inputs, and honest errors (issue 15), one case per finding:
#   - non-regular outputs (device, FIFO, symlink) refused or written through
#     as documented; a replaced file keeps its mode;
#   - --external-data writes a model/data pair that always matches, and
#     leaves no temporary or backup file behind;
#   - --export-encodings is written after the model, atomically;
#   - an output that is one of the command's inputs is refused;
#   - SIGTERM during a save leaves no temporary file;
#   - long graphs (chains of 20k nodes) rewrite and quantize in linear time;
#   - --max-loop-iterations bounds a Loop that never ends, naming the node;
#   - FIFOs given as samples or models are refused, never waited on;
#   - stdout write errors give exit 4 and a message;
#   - NaN in a calibration sample does not break bias correction;
#   - a value written by two nodes, a non-finite --min-sqnr, sparse indices
#     out of bounds, external data location ".", Slice-1 without starts,
#     and names with control characters are refused or escaped.
# Models come from tests/tools/mkrel.c and bench/make_chain.c (built beside
# onnxq, or compiled here).
#
# usage: tests/integration/reliability.sh BUILD/onnxq
# Ends with `N passed, N failed, N skipped` (lib.sh); exits 1 on any failure.
set -u
. "$(dirname "$0")/lib.sh"

[ $# -eq 1 ] && [ -x "$1" ] || die "usage: $0 BUILD/onnxq"
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
bdir=$(dirname "$bin")
src=$root
t=$(mktemp -d "${TMPDIR:-/tmp}/oq-rel.XXXXXX")
trap 'rm -rf "$t"' EXIT
export UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1
M=$src/models/tiny_cnn.onnx
CAL=$src/models/tiny_cnn_calib

# ---- the generators
mkrel=$bdir/tests/mkrel
if [ ! -x "$mkrel" ] && [ -f "$bdir/Makefile" ]; then
	make -C "$bdir" mkrel >/dev/null 2>&1
fi
[ -x "$mkrel" ] || die "tests/mkrel is not built beside $bin"
m=$t/models
mkdir -p "$m"
"$mkrel" "$m" || die "mkrel failed"
chain=$t/make_chain
if ! cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I"$src" -I"$bdir/gen" \
	"$src/bench/make_chain.c" "$bdir/libonnxq.a" \
	$(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm -o "$chain" 2>"$t/cc.err"; then
	# an ASan build's library needs the sanitizer runtime too
	cc -std=c11 -O1 -fsanitize=address,undefined -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
		-I"$src" -I"$bdir/gen" "$src/bench/make_chain.c" "$bdir/libonnxq.a" \
		$(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm -o "$chain" 2>>"$t/cc.err" ||
		die "cannot build make_chain: $(head -c 300 "$t/cc.err")"
fi

# run CMD... : runs with a timeout; sets rc, leaves $t/out and $t/err.
run() {
	timeout 60 "$@" >"$t/out" 2>"$t/err"
	rc=$?
}

# expect NAME RC REGEX : the last run exited RC, stderr matches REGEX (empty: anything), no sanitizer report.
expect() {
	local name=$1 want=$2 re=$3
	if [ "$rc" -eq 124 ]; then
		bad "$name: timed out (hang)"
	elif grep -qE 'Sanitizer|runtime error:' "$t/err"; then
		bad "$name: sanitizer report: $(grep -m1 -E 'Sanitizer|runtime error:' "$t/err")"
	elif [ "$rc" -ne "$want" ]; then
		bad "$name: exit $rc, want $want: $(head -c 300 "$t/err")"
	elif [ -n "$re" ] && ! grep -qiE -- "$re" "$t/err"; then
		bad "$name: stderr lacks /$re/: $(head -c 300 "$t/err")"
	else
		ok "$name"
	fi
}

# ---- 1. -o onto a device, FIFO or symlink; a replaced file keeps its mode; -o - streams
o=$t/outs
mkdir -p "$o"
if mknod "$o/dev" c 1 7 2>/dev/null; then
	run "$bin" convert "$M" -o "$o/dev"
	expect "convert -o DEVICE refused" 4 "is a device, not a regular file"
	[ -c "$o/dev" ] && ok "the device node is still a device" || bad "the device node was replaced"
else
	skip "mknod unavailable (not root): device case"
fi
mkfifo "$o/ff"
run "$bin" convert "$M" -o "$o/ff"
expect "convert -o FIFO refused, not blocked" 4 "is a FIFO, not a regular file"
[ -p "$o/ff" ] && ok "the FIFO is still a FIFO" || bad "the FIFO was replaced"
echo "not a model yet" >"$o/real.onnx"
chmod 640 "$o/real.onnx"
ln -s real.onnx "$o/link.onnx"
run "$bin" convert "$M" -o "$o/link.onnx" --passes cleanup
expect "convert -o SYMLINK writes its target" 0 ""
if [ -L "$o/link.onnx" ] && [ "$(stat -c %a "$o/real.onnx")" = 640 ] &&
	"$bin" check "$o/real.onnx" >/dev/null 2>&1; then
	ok "the link stays, its target is replaced and keeps mode 640"
else
	bad "symlink output: link $(stat -c %F "$o/link.onnx"), target mode $(stat -c %a "$o/real.onnx")"
fi
ln -s nothing "$o/dangling.onnx"
run "$bin" convert "$M" -o "$o/dangling.onnx"
expect "convert -o DANGLING-SYMLINK refused" 4 "symlink to nothing"
timeout 60 "$bin" convert "$M" -o - >"$o/stream.onnx" 2>"$t/err"
rc=$?
expect "convert -o - streams the model to stdout" 0 ""
run "$bin" check "$o/stream.onnx"
expect "the streamed model checks" 0 ""
left=$(ls -A "$o" | grep -E '\.tmp\.|\.bak\.' || true)
[ -z "$left" ] && ok "no temporary or backup files left" || bad "left behind: $left"

# ---- 2. --external-data: model and data always match; concurrent writers; no leftovers
e=$t/ext
mkdir -p "$e"
"$bin" quantize "$M" -o "$t/other.onnx" --calib random:1 --quiet 2>/dev/null
for i in 1 2 3 4; do
	"$bin" convert "$M" -o "$e/m.onnx" --external-data --external-threshold 16 2>/dev/null &
	"$bin" convert "$t/other.onnx" -o "$e/m.onnx" --external-data --external-threshold 16 2>/dev/null &
	wait
done
run "$bin" check "$e/m.onnx"
expect "concurrent --external-data writers: the model checks" 0 ""
n_data=$(ls "$e" | grep -c '^m\.onnx\.[0-9a-f]\{16\}\.data$')
n_all=$(ls -A "$e" | wc -l)
if [ "$n_data" -eq 1 ] && [ "$n_all" -eq 2 ]; then
	ok "one model and its one data file, nothing else"
else
	bad "after concurrent writers: $(ls -A "$e" | tr '\n' ' ')"
fi
run "$bin" run "$e/m.onnx" --input image=random:1
expect "the model runs on its data" 0 ""
run "$bin" convert "$e/m.onnx" -o "$e/m.onnx"
[ "$(ls -A "$e")" = m.onnx ] && ok "saving without external data removes the old data file" ||
	bad "left: $(ls -A "$e" | tr '\n' ' ')"

# ---- 3. --export-encodings is written after the model, atomically
echo old >"$t/enc.json"
run "$bin" quantize "$M" -o "$t/nodir/q.onnx" --calib random:1 --export-encodings "$t/enc.json"
expect "quantize into a missing folder fails" 4 ""
[ "$(cat "$t/enc.json")" = old ] && ok "the encodings file is untouched when the model save fails" ||
	bad "the encodings file changed although the model was not written"
run "$bin" quantize "$M" -o "$t/q_enc.onnx" --calib random:1 --export-encodings "$t/enc.json" --quiet
expect "quantize --export-encodings" 0 ""
grep -q activation_encodings "$t/enc.json" && ok "encodings written after the model" || bad "no encodings written"

# ---- 4. an output that is an input of the same command is refused
cp "$M" "$t/self.onnx"
cp "$M" "$t/self_keep.onnx"
run "$bin" quantize "$t/self.onnx" -o "$t/q2.onnx" --calib random:1 --export-encodings "$t/self.onnx"
expect "--export-encodings MODEL refused" 1 "is the input"
cmp -s "$t/self.onnx" "$t/self_keep.onnx" && ok "the model is untouched" || bad "the model was overwritten"
run "$bin" calibrate "$t/self.onnx" --calib random:1 -o "$t/self.onnx"
expect "calibrate M -o M refused" 1 "is the input"
mkdir -p "$t/extin"
"$bin" convert "$M" -o "$t/extin/model.onnx" --external-data --external-threshold 16 2>/dev/null
data=$(ls "$t/extin"/model.onnx.*.data)
run "$bin" convert "$t/extin/model.onnx" -o "$data"
expect "convert ext/model.onnx -o its data file refused" 1 "is the input"
mkdir -p "$t/rundata"
cp "$src/models/tiny_cnn_test/000.npy" "$t/rundata/"
run "$bin" run "$M" --data "$t/rundata" --output-dir "$t/rundata"
expect "run --data D --output-dir D refused" 1 "is the input"
run "$bin" quantize "$t/self.onnx" -o "$t/self.onnx" --calib random:1 --quiet
expect "-o MODEL (atomic replace) stays allowed" 0 ""

# ---- 5. SIGTERM during a save leaves no temporary file
"$chain" relu 100000 "$t/r100k.onnx"
mkdir -p "$t/sig"
"$bin" convert "$t/r100k.onnx" -o "$t/sig/out.onnx" 2>/dev/null &
pid=$!
for i in $(seq 3000); do
	ls "$t/sig/" | grep -q '\.tmp\.' && break
	sleep 0.002
done
seen=$(ls "$t/sig/")
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
if [ "$rc" -eq 143 ] && [ -z "$(ls -A "$t/sig")" ] && [ -n "$seen" ]; then
	ok "SIGTERM during a save removes the temporary file (saw $seen)"
elif [ "$rc" -eq 0 ]; then
	ok "SIGTERM came after the save finished (not timed; nothing to check)"
else
	bad "SIGTERM during a save: exit $rc, left: $(ls -A "$t/sig" | tr '\n' ' ')"
fi

# ---- 6. long graphs: passes and save near-linear (the quadratic versions took minutes here)
"$chain" conv 20000 "$t/c20k.onnx" && "$chain" relu 20000 "$t/r20k.onnx"
run "$bin" quantize "$t/c20k.onnx" -o "$t/c20k_q.onnx" --calib random:1 --method minmax --quiet
expect "quantize a chain of 20k Convs within 60 s" 0 ""
run "$bin" convert --passes cleanup "$t/r20k.onnx" -o "$t/r20k_c.onnx"
expect "cleanup (toposort) of a reversed chain of 20k Relus within 60 s" 0 ""
run "$bin" check "$t/r20k_c.onnx"
expect "the sorted chain checks" 0 ""

# ---- 7. a Loop that never ends is stopped at --max-loop-iterations, naming the node
run "$bin" run "$m/loop.onnx" --input x=random:1 --max-loop-iterations 1000
expect "run: Loop bounded by --max-loop-iterations" 2 "node 'forever' \(Loop.*ran 1000 iterations without ending"
run "$bin" quantize "$m/loop.onnx" -o "$t/loop_q.onnx" --calib random:1 --max-loop-iterations 500
expect "quantize: Loop bounded by --max-loop-iterations" 2 "node 'forever' \(Loop.*ran 500 iterations"
run "$bin" compare "$m/loop.onnx" "$m/loop.onnx" --data "$t" --max-loop-iterations 0
expect "compare --max-loop-iterations 0 is a usage error" 1 "positive number"
if "$bin" run --help | grep -q "max-loop-iterations N.*default 10000000"; then
	ok "run --help documents the default"
else
	bad "run --help lacks --max-loop-iterations and its default"
fi

# ---- 8. FIFOs as samples and models are refused, never waited on
mkfifo "$t/f.npy" "$t/f.onnx"
mkdir -p "$t/fifo_calib"
mkfifo "$t/fifo_calib/000.npy"
run "$bin" run "$M" --input image="$t/f.npy"
expect "run --input FIFO.npy refused" 4 "not a regular file \(a FIFO\)"
run "$bin" check "$t/f.onnx"
expect "check FIFO model refused" 4 "not a regular file \(a FIFO\)"
run "$bin" run "$M" --data "$t/fifo_calib"
expect "run --data with a FIFO sample refused" 2 "not a regular|FIFO"

# ---- 9. stdout write errors: exit 4 and a message
for c in "check --json" "check" "inspect"; do
	timeout 60 "$bin" $c "$M" >/dev/full 2>"$t/err"
	rc=$?
	expect "$c >/dev/full" 4 "cannot write the output to stdout"
done
timeout 60 "$bin" run "$M" --input image=random:1 >/dev/full 2>"$t/err"
rc=$?
expect "run >/dev/full" 4 "cannot write the output to stdout"
timeout 60 "$bin" compare "$M" "$M" --data "$src/models/tiny_cnn_test" >/dev/full 2>"$t/err"
rc=$?
expect "compare >/dev/full" 4 "cannot write the output to stdout"

# ---- 10. one NaN element in one calibration sample: bias correction skips the sample
cp -r "$CAL" "$t/nancal"
f=$t/nancal/000.npy
hl=$(od -An -tu2 -j8 -N2 "$f" | tr -d ' ')
printf '\000\000\300\177' | dd of="$f" conv=notrunc bs=1 seek=$((10 + hl + 400)) 2>/dev/null
# --prefer accuracy: the default placement leaves the tiny CNN float (no bias correction to run)
run "$bin" quantize "$M" -o "$t/nan_q.onnx" --calib "$t/nancal" --prefer accuracy
expect "NaN in a calibration sample: quantize with bias correction" 0 "1 samples with NaN/Inf outputs left out"
run "$bin" check "$t/nan_q.onnx"
expect "NaN in a calibration sample: the model checks" 0 ""

# ---- 11. a value written by two nodes is refused before any pass
run "$bin" quantize "$m/dup.onnx" -o "$t/dup_q.onnx" --calib random:1
expect "quantize: value written by two nodes refused" 2 "value 'y' is written by node 'a' \(Relu\) and node 'b' \(Sigmoid\)"
[ -e "$t/dup_q.onnx" ] && bad "quantize dup.onnx wrote an output" || ok "quantize dup.onnx wrote nothing"

# ---- 12. compare --min-sqnr must be finite
for v in nan inf -inf; do
	run "$bin" compare "$M" "$M" --data "$src/models/tiny_cnn_test" --min-sqnr "$v"
	expect "compare --min-sqnr $v is a usage error" 1 "finite number"
done

# ---- 13. names with control characters are escaped in check and run output
run "$bin" check "$m/evil_bad.onnx"
if [ "$rc" -eq 6 ] && [ "$(wc -l <"$t/out")" -eq 1 ] && ! grep -q $'\x1b' "$t/out" && ! grep -q ': valid$' "$t/out"; then
	ok "check text output escapes names"
else
	bad "check text output: exit $rc: $(cat -A "$t/out" | head -c 300)"
fi
run "$bin" run "$m/evil.onnx" --input x=random:1
if [ "$rc" -eq 0 ] && [ "$(wc -l <"$t/out")" -eq 1 ] && ! grep -q $'\x1b' "$t/out"; then
	ok "run summary escapes names"
else
	bad "run summary: exit $rc: $(cat -A "$t/out" | head -c 300)"
fi

# ---- 14. sparse indices out of bounds fail check; external data location "."
run "$bin" check "$m/sparse_oob.onnx"
if [ "$rc" -eq 6 ] && grep -q "index 100 (entry 0) is outside the dense shape \[sparse-index\]" "$t/out"; then
	ok "check: sparse index out of bounds"
else
	bad "check sparse_oob.onnx: exit $rc: $(head -c 300 "$t/out")"
fi
run "$bin" run "$m/sparse_oob.onnx" --input x=random:1
expect "run: a sparse initializer is unsupported, not 'run onnxq check'" 3 "sparse initializer"
run "$bin" check "$m/ext_dot.onnx"
expect "external data location '.' named truthfully" 2 "names the model's folder, not a file"

# ---- 15. UBSan: empty graph through cleanup; Slice-1 without starts/ends
run "$bin" convert --passes cleanup "$m/empty.onnx" -o "$t/empty2.onnx"
expect "convert --passes cleanup on a graph without nodes" 0 ""
run "$bin" run "$m/slice9.onnx" --input x=random:1
expect "Slice-1 without starts/ends refused" 2 "required attributes starts and ends are missing"

# ---- fuzz findings: fold-bn and fuse read output/input 0 of nodes that have none
for f in "$src"/tests/fuzz/corpus/seed_regress_*.onnx; do
	run "$bin" convert --passes cleanup,upgrade-opset,fold-bn,fuse "$f" -o "$t/fz.onnx"
	if [ "$rc" -ne 124 ] && [ "$rc" -lt 128 ] && ! grep -qE 'Sanitizer|runtime error:' "$t/err"; then
		ok "rewrites on fuzz finding $(basename "$f")"
	else
		bad "fuzz regression $(basename "$f"): exit $rc: $(head -c 300 "$t/err")"
	fi
done

finish
