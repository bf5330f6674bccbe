#!/usr/bin/env bash
# errors.sh - bad input gets one clear line and a documented exit code.
#
# usage: tests/integration/errors.sh BUILD/onnxq
#
# Generates malicious and malformed models with tests/tools/mkbad (built
# beside onnxq, or compiled here) and runs `onnxq check`, `inspect` and
# `convert -o OUT` on each. For every failing case it asserts:
#   - the exact exit code (src/oq.h: 2 invalid, 3 unsupported, 4 I/O);
#   - stderr is exactly one line, naming the file and a case keyword;
#   - no sanitizer report; the command ends within `timeout 20`;
#   - convert created nothing: OUT, OUT.data and temp files are absent, and
#     a pre-existing OUT keeps its bytes.
# Valid contrast models must load, check, convert and reload. The models
# claiming 1e12-element tensors run under a 200 MB address-space limit
# (ulimit -v; for ASan binaries, which reserve terabytes of shadow memory,
# ASan's own hard_rss_limit_mb/max_allocation_size_mb instead). Output
# paths in missing, non-writable or occupied folders must fail with exit 4
# and leave nothing behind.
# Ends with `N passed, N failed, N skipped`; exits 1 on any failure.
set -u
. "$(dirname "$0")/lib.sh"

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
	echo "usage: $0 BUILD/onnxq" >&2
	exit 1
fi
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
bdir=$(dirname "$bin")
t=$(mktemp -d "${TMPDIR:-/tmp}/oq-errors.XXXXXX")
trap 'chmod -R u+w "$t" 2>/dev/null; rm -rf "$t"' EXIT
# ---- the generator
mkbad=${MKBAD:-$bdir/tests/mkbad}
if [ ! -x "$mkbad" ] && [ -f "$bdir/Makefile" ]; then
	make -C "$bdir" mkbad >/dev/null 2>&1
fi
if [ ! -x "$mkbad" ]; then
	mkbad=$t/mkbad
	if ! cc -std=c11 -D_POSIX_C_SOURCE=200809L -I"$bdir/gen" -o "$mkbad" \
		"$root/tests/tools/mkbad.c" "$bdir/gen/onnx.pb-c.c" -lprotobuf-c; then
		die "cannot build mkbad"
	fi
fi
m=$t/models
mkdir -p "$m"
"$mkbad" "$m" || die "mkbad failed"

# ASan-instrumented binaries cannot run under ulimit -v; detect that once.
if (sh -c 'ulimit -v 204800 && exec "$0" --version' "$bin") >/dev/null 2>&1; then
	asan=0
else
	asan=1
fi
# Under ASan, a single giant allocation is an error in every run.
asan_opts=${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=1024:detect_leaks=1
export ASAN_OPTIONS=$asan_opts
export UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1

# run LABEL CMD... : runs with a timeout; sets rc, leaves $t/out and $t/err.
run() {
	timeout 20 "$@" >"$t/out" 2>"$t/err"
	rc=$?
}

# expect_fail LABEL WANT_RC KEYWORD PATH : checks the last run.
expect_fail() {
	local label=$1 want=$2 kw=$3 path=$4 lines
	lines=$(wc -l <"$t/err")
	if [ "$rc" -eq 124 ]; then
		bad "$label: timed out (hang)"
	elif grep -qE 'Sanitizer|runtime error:' "$t/err"; then
		bad "$label: sanitizer report: $(grep -m1 -E 'Sanitizer|runtime error:' "$t/err")"
	elif [ "$rc" -ne "$want" ]; then
		bad "$label: exit $rc, want $want: $(head -c 300 "$t/err")"
	elif [ "$lines" -ne 1 ]; then
		bad "$label: stderr has $lines lines, want 1: $(head -c 300 "$t/err" | tr '\n' '|')"
	elif ! grep -qF -- "$path" "$t/err"; then
		bad "$label: message does not name '$path': $(cat "$t/err")"
	elif ! grep -qiE -- "$kw" "$t/err"; then
		bad "$label: message lacks /$kw/: $(cat "$t/err")"
	else
		ok
	fi
}

# expect_ok LABEL : checks the last run succeeded quietly.
expect_ok() {
	if [ "$rc" -eq 124 ]; then
		bad "$1: timed out (hang)"
	elif [ "$rc" -ne 0 ]; then
		bad "$1: exit $rc, want 0: $(head -c 300 "$t/err")"
	elif [ -s "$t/err" ]; then
		bad "$1: unexpected stderr: $(head -c 300 "$t/err")"
	else
		ok
	fi
}

# nothing_in DIR LABEL : the convert output folder must be empty (emptied
# after a failure, so one case cannot fail the ones after it).
nothing_in() {
	local left
	left=$(ls -A "$1")
	if [ -n "$left" ]; then
		bad "$2: convert left files behind: $(echo $left)"
		rm -rf "${1:?}"/* "${1:?}"/.[!.]*
	else
		ok
	fi
}

# ---- failing cases: path (relative to the models folder) | exit | keyword (ERE)
cases='
trunc_18.onnx|2|truncated
trunc_28.onnx|2|truncated
trunc_48.onnx|2|truncated
trunc_68.onnx|2|truncated
trunc_78.onnx|2|truncated
trunc_last.onnx|2|truncated
trunc_1.onnx|2|truncated|malformed
random.onnx|2|not a valid
empty.onnx|2|empty
wiretype_graph.onnx|2|wrong type|not a valid
wiretype_group.onnx|2|malformed|not a valid
wiretype_dims.onnx|2|wrong type|not a valid
field_zero.onnx|2|not a valid|malformed|field 0|field number 0|invalid
forged_ref.onnx|2|float_data
dims_overflow_i64.onnx|2|overflow
dims_overflow_bytes.onnx|2|overflow
dims_overflow_wrap.onnx|2|overflow
raw_short.onnx|2|raw_data.*truncated
huge_raw.onnx|2|raw_data
huge_float_data.onnx|2|float_data
huge_nodata.onnx|2|float_data
dims_negative.onnx|2|negative
dtype_0.onnx|2|data_type
dtype_99.onnx|2|data_type
dtype_neg.onnx|2|data_type
rank_65.onnx|2|rank
int4_count.onnx|2|int32_data
segment.onnx|3|segment
string_raw.onnx|2|raw_data
init_noname.onnx|2|no name
ctrl_name.onnx|2|raw_data
init_twice.onnx|2|defined twice
ir_2.onnx|3|IR version
no_ir.onnx|2|ir_version
no_graph.onnx|2|no graph
nested_10000.onnx|2|nested
nested_65.onnx|2|nested
nested_type.onnx|2|nested
ext_abs/model.onnx|2|path traversal
ext_dotdot/model.onnx|2|path traversal
ext_dotdot_mid/model.onnx|2|path traversal
ext_symlink/model.onnx|2|path traversal
ext_offset/model.onnx|2|past the end
ext_offset_huge/model.onnx|2|offset
ext_offset_neg/model.onnx|2|offset
ext_tail/model.onnx|2|past the end
ext_length/model.onnx|2|length
ext_missing/model.onnx|4|No such file
ext_noloc/model.onnx|2|location
ext_ctrl/model.onnx|4|No such file
ext_dir/model.onnx|2|not a regular file
ext_fifo/model.onnx|2|not a regular file
ext_huge/model.onnx|2|past the end
adir.onnx|4|not a regular file
fifo.onnx|4|not a regular file
does_not_exist.onnx|4|No such file
'

outdir=$t/convert-out
mkdir -p "$outdir"
while IFS='|' read -r rel want kw; do
	[ -n "$rel" ] || continue
	p=$m/$rel
	for cmd in check inspect; do
		run "$bin" "$cmd" "$p"
		expect_fail "$cmd $rel" "$want" "$kw" "$p"
	done
	run "$bin" convert "$p" -o "$outdir/out.onnx"
	expect_fail "convert $rel" "$want" "$kw" "$p"
	nothing_in "$outdir" "convert $rel"
	run "$bin" convert "$p" -o "$outdir/out.onnx" --external-data --external-threshold 1
	expect_fail "convert --external-data $rel" "$want" "$kw" "$p"
	nothing_in "$outdir" "convert --external-data $rel"
done <<EOF
$cases
EOF

# A failing convert leaves an existing OUT (and OUT.data) byte-for-byte unchanged.
printf 'precious model bytes\n' >"$outdir/keep.onnx"
printf 'precious data bytes\n' >"$outdir/keep.onnx.data"
cp "$outdir/keep.onnx" "$t/keep.ref"
cp "$outdir/keep.onnx.data" "$t/keep.data.ref"
run "$bin" convert "$m/raw_short.onnx" -o "$outdir/keep.onnx" --external-data
expect_fail "convert over an existing OUT" 2 "truncated" "$m/raw_short.onnx"
if cmp -s "$outdir/keep.onnx" "$t/keep.ref" && cmp -s "$outdir/keep.onnx.data" "$t/keep.data.ref" &&
	[ "$(ls -A "$outdir" | wc -l)" -eq 2 ]; then
	ok
else
	bad "convert over an existing OUT: OUT or OUT.data changed, or files left: $(ls -A "$outdir")"
fi
rm -f "$outdir"/*

# ---- valid contrast models: load, check, inspect, convert, reload
valid='valid.onnx valid_typed.onnx valid_ir3.onnx valid_ext/model.onnx valid_ext_link/model.onnx nested_8.onnx'
for rel in $valid; do
	p=$m/$rel
	run "$bin" check "$p"
	if [ "$rel" = nested_8.onnx ]; then
		# Loads fine; its empty If nodes may be reported by the checker (exit 6).
		if [ "$rc" -eq 0 ] || [ "$rc" -eq 6 ]; then ok; else bad "check $rel: exit $rc: $(head -c 300 "$t/err")"; fi
	else
		expect_ok "check $rel"
	fi
	run "$bin" inspect "$p"
	expect_ok "inspect $rel"
	run "$bin" convert "$p" -o "$outdir/v.onnx"
	expect_ok "convert $rel"
	run "$bin" inspect "$outdir/v.onnx"
	expect_ok "reload converted $rel"
	run "$bin" convert "$p" -o "$outdir/ve.onnx" --external-data --external-threshold 1
	expect_ok "convert --external-data $rel"
	run "$bin" inspect "$outdir/ve.onnx"
	expect_ok "reload external-data $rel"
	rm -f "$outdir"/*
done

# ---- no giant allocation: 1e12-element claims under a 200 MB limit
for rel in huge_raw.onnx huge_float_data.onnx huge_nodata.onnx ext_huge/model.onnx; do
	p=$m/$rel
	if [ "$asan" = 0 ]; then
		timeout 20 sh -c 'ulimit -v 204800 && exec "$0" check "$1"' "$bin" "$p" >"$t/out" 2>"$t/err"
	else
		ASAN_OPTIONS=$asan_opts:hard_rss_limit_mb=200:max_allocation_size_mb=200:allocator_may_return_null=0 \
			timeout 20 "$bin" check "$p" >"$t/out" 2>"$t/err"
	fi
	rc=$?
	expect_fail "200 MB limit: check $rel" 2 "" "$p"
done

# ---- output folder missing, a file, not writable, or OUT is a folder
good=$m/valid.onnx
run "$bin" convert "$good" -o "$t/nodir/sub/out.onnx"
expect_fail "convert into a missing folder" 4 "No such file" "$t/nodir/sub/out.onnx"
if [ -e "$t/nodir" ]; then bad "convert into a missing folder created it"; else ok; fi

printf x >"$t/afile"
run "$bin" convert "$good" -o "$t/afile/out.onnx" --external-data --external-threshold 1
expect_fail "convert below a regular file" 4 "Not a directory" "$t/afile/out.onnx"

mkdir -p "$t/occupied/isdir"
printf 'old data\n' >"$t/occupied/isdir.data"
printf 'old data\n' >"$t/old.ref"
run "$bin" convert "$good" -o "$t/occupied/isdir" --external-data --external-threshold 1
expect_fail "convert onto a folder" 4 "directory" "$t/occupied/isdir"
left=$(cd "$t/occupied" && ls -A)
if [ "$left" = "$(printf 'isdir\nisdir.data')" ] && [ -z "$(ls -A "$t/occupied/isdir")" ] &&
	cmp -s "$t/occupied/isdir.data" "$t/old.ref"; then
	ok
else
	bad "convert onto a folder: OUT.data replaced or temp files left: $(echo $left)"
fi

mkdir -p "$t/ro"
chmod 555 "$t/ro"
if [ -w "$t/ro" ]; then
	skip "read-only folder test (running as root: permissions are not enforced)"
else
	run "$bin" convert "$good" -o "$t/ro/out.onnx" --external-data --external-threshold 1
	expect_fail "convert into a read-only folder" 4 "Permission denied" "$t/ro/out.onnx"
	if [ -z "$(ls -A "$t/ro")" ]; then ok; else bad "convert into a read-only folder left $(ls -A "$t/ro")"; fi
fi

finish
