#!/usr/bin/env bash
# float16_ort.sh - float16 models in `onnxq run` and `onnxq quantize`, judged by ONNX Runtime.
#
# Each model has a float32 twin (M32) and its float16 form (M16), made by
# tests/float16_model.py as onnxconverter-common's convert_float_to_float16
# (keep_io_types) leaves it: float32 graph inputs / outputs with Casts, Resize
# in float32 between Casts, nodes out of topological order.
#   tiny  models/tiny_cnn.onnx, its calibration and test sample folders
#   det   PaddleOCR det (fetch.sh) at S x S (S = $OQ_DET_SIZE, default 640),
#         its BatchNormalization folded first (`onnxq convert --passes
#         cleanup,fold-bn`): its running variances reach 1e8, beyond float16,
#         so a float16 form of the raw file computes nothing like it;
#         8 calibration and 4 test samples are text images drawn with
#         ImageMagick (skipped without it: on random pixels det finds no text,
#         its output is ~0 everywhere and SQNRs say nothing)
# Checks per model:
#   twin      (det) ORT runs M32 like the raw file (max relative error <= 1e-3)
#   run       `onnxq run M16` (float32 inside) against ORT's run of M32: SQNR
#             within 1 dB of ORT's own run of M16 against M32 (ORT computes some
#             ops in float16), and >= 30 dB against ORT's run of M16; the same
#             bits at --threads 1 and 2
#   quantize  (with --prefer accuracy: the default leaves the float32 tiny CNN float)
#             M16 -> Q16: `onnxq check` valid; the file keeps float16 (no
#             float32 initializer but Resize's roi / scales; Q/DQ scales float16; opset >= 19; inputs
#             and outputs of M16's types); ORT loads it at optimization level
#             'disabled' and at 'all', its default, where its QDQ fusions run
#   sqnr      SQNR (ORT, test samples) of Q16 against M16 within 1 dB of that
#             of Q32 (`quantize` of M32, same options) against M32
#   default   the default (balanced) placement on M16: SQNR (ORT, test samples) against M16 at
#             most 1 dB below Q16's (the accuracy-first placement's), balanced's budget
#   hp32      `--high-precision float32` on M16: no float16 initializer, ORT
#             loads it, SQNR within 1 dB of Q32's
#   hp16      `--high-precision float16` on M32: float16 like Q16, ORT loads
#             it, SQNR within 1 dB of Q32's
#   stats     (tiny) `calibrate --shard` x 2 + `merge-stats` + `quantize --stats`
#             on M16 writes the bytes of `quantize --no-bias-correction`
# io16 (tiny): float16 inputs and outputs too (the converter's default,
# keep_io_types=False), float16 samples: run (float16 outputs, >= 30 dB against
# ORT), quantize (float16 interface kept, check valid, SQNR within 1 dB of Q32's).
# bfloat16 (tiny): ONNX Runtime has no bfloat16 Conv, so it cannot judge;
# `onnxq run` of the bfloat16 form must stay within 2^-7 relative of ORT's
# float32 twin output, and `quantize` must write a model `check` accepts.
#
# usage: tests/integration/float16_ort.sh [ONNXQ]   (default build/onnxq)
#   env OQ_CACHE (fetch.sh), OQ_DET_SIZE, OQ_FLOAT16_KEEP=1 keeps the work folder.
# Needs /usr/bin/python3 with the onnx package (skipped otherwise).
# Closing line: "N passed, N failed, N skipped". Exit 1 on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
det_size=${OQ_DET_SIZE:-640}
py=/usr/bin/python3
js=$here/run_ort.js
fjs=$here/float16_ort.js

[ -x "$onnxq" ] || die "$onnxq not found (build first)"
if ! "$py" -c 'import onnx, numpy' 2> /dev/null; then
	skip "float16: $py has no onnx module" 7
	finish
	exit
fi
cache=$("$here/fetch.sh" | tail -n 1) || die "fetch.sh failed"
export OQ_CACHE=$cache
tmp=$(mktemp -d)
if [ "${OQ_FLOAT16_KEEP:-0}" = 1 ]; then echo "float16: work folder $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

# describe MODEL: "opset N f32 N f16 N scales T io T,T,..." (T an ONNX element type number;
# f32 leaves out Resize's roi / scales, float32 in every opset)
describe() {
	"$py" - "$1" << 'EOF'
import sys, onnx
m = onnx.load(sys.argv[1])
g = m.graph
opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
# float32 initializers other than Resize's roi / scales (float32 in every opset)
resize = {x for n in g.node if n.op_type == "Resize" for x in n.input[1:3]}
dt = [t.data_type for t in g.initializer if t.name not in resize]
inits = {t.name: t.data_type for t in g.initializer}
scales = sorted({inits.get(n.input[1], 0) for n in g.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")})
io = [v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) if v.name not in inits]
print("opset", opset, "f32", dt.count(1), "f16", dt.count(10), "scales", ",".join(map(str, scales)),
      "io", ",".join(map(str, io)))
EOF
}

input_name() {
	"$onnxq" inspect --json "$1" | node -e '
		let s = ""; process.stdin.on("data", (c) => (s += c)).on("end", () => console.log(JSON.parse(s).inputs[0].name));'
}

# sqnr REF TEST INPUT DIR: the total SQNR in dB
sqnr() { node "$fjs" sqnr "$@" | awk '{ print $2 }'; }

# within A B: A >= B - 1 (dB)
within() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b - 1) }'; }

model_case() { # NAME M32 CALIB TEST
	local name=$1 m32=$2 calib=$3 test=$4 w=$tmp/$1 in d32 d16 s32 s16 s
	mkdir -p "$w"
	local m16=$w/m16.onnx
	if ! "$py" "$root/tests/float16_model.py" "$m32" "$m16" 2> "$w/conv.err"; then
		bad "$name: float16_model.py failed: $(tail -n 1 "$w/conv.err")"
		return
	fi
	in=$(input_name "$m32")
	d32=$(describe "$m32")
	# run: onnxq (float32 inside) and ORT (float16 kernels where it has them) on the float16 model,
	# its nodes out of order as the converter leaves them; both against ORT's float32 twin
	mkdir -p "$w/one" && cp "$(ls "$test"/*.npy | head -n 1)" "$w/one/000.npy"
	local out s_oq s_ort s_x
	if ! node "$js" run "$m16" "$w/ort16" "$in=$w/one/000.npy" 2> "$w/ort.err" ||
		! node "$js" run "$m32" "$w/ort32" "$in=$w/one/000.npy" 2>> "$w/ort.err"; then
		bad "$name: ORT cannot run the models: $(head -n 1 "$w/ort.err")"
	elif ! "$onnxq" run "$m16" --data "$w/one" --output-dir "$w/q16" --threads 2 > /dev/null 2> "$w/run.err"; then
		bad "$name: run: $(head -n 1 "$w/run.err")"
	else
		out=$(cd "$w/ort16" && ls *.npy | head -n 1)
		s_oq=$(node "$fjs" npy "$w/ort32/$out" "$w/q16/000/$out" | awk '{ print $2 }')
		s_ort=$(node "$fjs" npy "$w/ort32/$out" "$w/ort16/$out" | awk '{ print $2 }')
		s_x=$(node "$fjs" npy "$w/ort16/$out" "$w/q16/000/$out" | awk '{ print $2 }')
		if [ -n "$s_oq" ] && within "$s_oq" "$s_ort" && awk -v x="$s_x" 'BEGIN { exit !(x >= 30) }'; then
			ok "$name: run: float16 model vs float32 twin $s_oq dB (ORT's float16 run $s_ort dB), vs ORT $s_x dB"
		else
			bad "$name: run: float16 model vs float32 twin '$s_oq' dB (ORT's float16 run $s_ort dB), vs ORT '$s_x' dB (>= 30 wanted)"
		fi
		if "$onnxq" run "$m16" --data "$w/one" --output-dir "$w/q16t1" --threads 1 > /dev/null 2>&1 &&
			cmp -s "$w/q16/000/$out" "$w/q16t1/000/$out"; then
			ok "$name: run --threads 1 and 2: same bits"
		else
			bad "$name: run --threads 1 and 2 differ"
		fi
	fi
	# quantize both twins with the same options
	if ! "$onnxq" quantize --prefer accuracy "$m32" -o "$w/q32.onnx" --calib "$calib" --quiet 2> "$w/q32.err" ||
		! "$onnxq" quantize --prefer accuracy "$m16" -o "$w/q16.onnx" --calib "$calib" --quiet 2> "$w/q16.err" ||
		! "$onnxq" quantize --prefer accuracy "$m16" -o "$w/q16f.onnx" --calib "$calib" --quiet --high-precision float32 2> "$w/q16f.err" ||
		! "$onnxq" quantize --prefer accuracy "$m32" -o "$w/q32h.onnx" --calib "$calib" --quiet --high-precision float16 2> "$w/q32h.err"; then
		bad "$name: quantize failed: $(cat "$w"/q*.err | head -n 1)"
		return
	fi
	s32=$(sqnr "$m32" "$w/q32.onnx" "$in" "$test")
	# quantize: float16 kept
	d16=$(describe "$w/q16.onnx")
	local io16
	io16=$(describe "$m16" | sed 's/.* io //')
	if ! "$onnxq" check "$w/q16.onnx" > "$w/check.txt" 2>&1; then
		bad "$name: quantize: check: $(head -n 1 "$w/check.txt")"
	elif ! [[ $d16 =~ ^opset\ (19|2[0-9])\ f32\ 0\ f16\ [1-9][0-9]*\ scales\ 10\ io\ $io16$ ]]; then
		bad "$name: quantize: not a float16 model: $d16 (want opset >= 19, f32 0, scales 10, io $io16)"
	elif [ "$(node "$fjs" load "$w/q16.onnx")" != ok ]; then
		bad "$name: quantize: ORT: $(node "$fjs" load "$w/q16.onnx")"
	else
		ok "$name: quantize keeps float16 ($d16), check valid, ORT loads it"
	fi
	s16=$(sqnr "$m16" "$w/q16.onnx" "$in" "$test")
	if [ -n "$s16" ] && [ -n "$s32" ] && within "$s16" "$s32"; then
		ok "$name: sqnr float16 $s16 dB, float32 twin $s32 dB"
	else
		bad "$name: sqnr float16 '$s16' dB, float32 twin '$s32' dB (more than 1 dB below)"
	fi
	# the default placement (balanced: runtime-aware, measured on the widened model as written)
	if "$onnxq" quantize "$m16" -o "$w/q16b.onnx" --calib "$calib" --quiet 2> "$w/q16b.err"; then
		s=$(sqnr "$m16" "$w/q16b.onnx" "$in" "$test")
		if [ -n "$s" ] && [ -n "$s16" ] && within "$s" "$s16"; then
			ok "$name: default placement on float16: sqnr $s dB, accuracy-first $s16 dB"
		else
			bad "$name: default placement on float16: sqnr '$s' dB, more than 1 dB below accuracy-first's '$s16' dB"
		fi
	else
		bad "$name: default quantize failed: $(head -n 1 "$w/q16b.err")"
	fi
	# --high-precision float32 on the float16 model
	s=$(sqnr "$m16" "$w/q16f.onnx" "$in" "$test")
	if [[ $(describe "$w/q16f.onnx") =~ \ f16\ 0\  ]] && [ "$(node "$fjs" load "$w/q16f.onnx")" = ok ] &&
		[ -n "$s" ] && within "$s" "$s32"; then
		ok "$name: --high-precision float32: float32 model, sqnr $s dB"
	else
		bad "$name: --high-precision float32: $(describe "$w/q16f.onnx"), sqnr '$s' dB"
	fi
	# --high-precision float16 on the float32 model
	s=$(sqnr "$m32" "$w/q32h.onnx" "$in" "$test")
	if [[ $(describe "$w/q32h.onnx") =~ ^opset\ (19|2[0-9])\ f32\ 0\ .*scales\ 10\ io\ ${d32##* io } ]] &&
		[ "$(node "$fjs" load "$w/q32h.onnx")" = ok ] && [ -n "$s" ] && within "$s" "$s32"; then
		ok "$name: --high-precision float16 on float32: float16 model, sqnr $s dB"
	else
		bad "$name: --high-precision float16 on float32: $(describe "$w/q32h.onnx"), sqnr '$s' dB"
	fi
}

# --- tiny_cnn
model_case tiny "$root/models/tiny_cnn.onnx" "$root/models/tiny_cnn_calib" "$root/models/tiny_cnn_test"

# --- tiny_cnn with float16 inputs and outputs (the converter's default, keep_io_types=False):
# float16 samples, run against ORT, quantize keeps the float16 interface
io=$tmp/io16
mkdir -p "$io/calib" "$io/test" "$io/one"
if ! "$py" "$root/tests/float16_model.py" "$root/models/tiny_cnn.onnx" "$io/m.onnx" --io16 2> "$io/err" ||
	! "$py" -c 'import sys, glob, os, numpy as np
for src, dst in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[4])):
    for f in sorted(glob.glob(src + "/*.npy")):
        np.save(os.path.join(dst, os.path.basename(f)), np.load(f).astype(np.float16))' \
		"$root/models/tiny_cnn_calib" "$root/models/tiny_cnn_test" "$io/calib" "$io/test" 2>> "$io/err"; then
	bad "io16: cannot make the model or samples: $(tail -n 1 "$io/err")" && bad "io16: quantize"
else
	cp "$io/test/000.npy" "$io/one/000.npy"
	if node "$js" run "$io/m.onnx" "$io/ort" "image=$io/one/000.npy" 2> "$io/err" &&
		"$onnxq" run "$io/m.onnx" --data "$io/one" --output-dir "$io/q" > /dev/null 2>> "$io/err" &&
		head -c 64 "$io/q/000/probs.npy" | grep -q "'<f2'" &&
		s=$(node "$fjs" npy "$io/ort/probs.npy" "$io/q/000/probs.npy" | awk '{ print $2 }') &&
		awk -v x="$s" 'BEGIN { exit !(x >= 30) }'; then
		ok "io16: run gives float16 outputs, $s dB against ORT"
	else
		bad "io16: run: $(head -n 1 "$io/err") sqnr against ORT '${s:-}' dB"
	fi
	s32=$(sqnr "$root/models/tiny_cnn.onnx" "$tmp/tiny/q32.onnx" image "$root/models/tiny_cnn_test")
	if "$onnxq" quantize --prefer accuracy "$io/m.onnx" --calib "$io/calib" -o "$io/q.onnx" --quiet 2> "$io/err" &&
		"$onnxq" check "$io/q.onnx" > /dev/null 2>> "$io/err" &&
		[[ $(describe "$io/q.onnx") =~ ^opset\ (19|2[0-9])\ f32\ 0\ .*scales\ 10\ io\ 10,10$ ]] &&
		[ "$(node "$fjs" load "$io/q.onnx")" = ok ] &&
		s=$(sqnr "$io/m.onnx" "$io/q.onnx" image "$io/test") && [ -n "$s" ] && within "$s" "$s32"; then
		ok "io16: quantize keeps float16 inputs / outputs, check valid, sqnr $s dB (float32 twin $s32 dB)"
	else
		bad "io16: quantize: $(head -n 1 "$io/err") $(describe "$io/q.onnx" 2> /dev/null) sqnr '${s:-}' dB (float32 twin $s32)"
	fi
fi

# --- sharded calibration of the float16 tiny_cnn: the bytes of one quantize --no-bias-correction
st=$tmp/stats
mkdir -p "$st"
if "$onnxq" calibrate "$tmp/tiny/m16.onnx" --calib "$root/models/tiny_cnn_calib" --shard 0/2 -o "$st/a.bin" --quiet 2> "$st/err" &&
	"$onnxq" calibrate "$tmp/tiny/m16.onnx" --calib "$root/models/tiny_cnn_calib" --shard 1/2 -o "$st/b.bin" --quiet 2>> "$st/err" &&
	"$onnxq" merge-stats "$st/a.bin" "$st/b.bin" -o "$st/m.bin" > /dev/null 2>> "$st/err" &&
	"$onnxq" quantize --prefer accuracy "$tmp/tiny/m16.onnx" --stats "$st/m.bin" -o "$st/s.onnx" --quiet 2>> "$st/err" &&
	"$onnxq" quantize --prefer accuracy "$tmp/tiny/m16.onnx" --calib "$root/models/tiny_cnn_calib" --no-bias-correction -o "$st/c.onnx" \
		--quiet 2>> "$st/err" && cmp -s "$st/s.onnx" "$st/c.onnx"; then
	ok "tiny: calibrate --shard 0/2, 1/2 + merge-stats + quantize --stats = quantize --no-bias-correction"
else
	bad "tiny: sharded calibration of the float16 model: $(head -n 1 "$st/err")"
fi

# --- tiny_cnn in bfloat16 (ONNX Runtime has no bfloat16 Conv: its float32 twin is the judge)
bf=$tmp/bf16
mkdir -p "$bf/one" && cp "$root/models/tiny_cnn_test/000.npy" "$bf/one/000.npy"
if ! "$py" "$root/tests/float16_model.py" "$root/models/tiny_cnn.onnx" "$bf/m.onnx" --dtype bfloat16 2> "$bf/err"; then
	bad "bfloat16: float16_model.py failed: $(tail -n 1 "$bf/err")"
elif node "$js" run "$root/models/tiny_cnn.onnx" "$bf/ort" "image=$bf/one/000.npy" &&
	"$onnxq" run "$bf/m.onnx" --data "$bf/one" --output-dir "$bf/q" > /dev/null 2> "$bf/err" &&
	node "$js" compare "$bf/q/000" "$bf/ort" 0.0078125 > "$bf/cmp.txt" 2>&1 &&
	"$onnxq" quantize --prefer accuracy "$bf/m.onnx" -o "$bf/q.onnx" --calib "$root/models/tiny_cnn_calib" --quiet 2>> "$bf/err" &&
	"$onnxq" check "$bf/q.onnx" > /dev/null 2>> "$bf/err" && [[ $(describe "$bf/q.onnx") =~ scales\ 16\  ]]; then
	ok "bfloat16: run within 2^-7 of ORT's float32 twin, quantize writes bfloat16 scales, check valid"
else
	bad "bfloat16: $(head -n 1 "$bf/err") $(cat "$bf/cmp.txt" 2> /dev/null)"
fi

# --- PaddleOCR det, BatchNormalization folded
det=$cache/ocr/ch_PP-OCRv4_det_infer.onnx
d=$tmp/det
mkdir -p "$d/calib" "$d/test" "$d/raw"
# (the tool's output is read whole: `| grep -q` under pipefail fails when grep exits first)
magick=0
if [ -x /usr/bin/convert ] && [[ $(/usr/bin/convert -version 2> /dev/null) == *ImageMagick* ]] &&
	/usr/bin/convert -list font 2> /dev/null > "$d/fonts.txt" && grep -q 'Font: DejaVu-Sans$' "$d/fonts.txt"; then
	magick=1
fi
if ! [ -f "$det" ]; then
	skip "det: $det missing" 7
elif [ "$magick" = 0 ]; then
	# on random pixels det finds no text: its output is ~0 everywhere and SQNRs say nothing
	skip "det: no ImageMagick with the DejaVu-Sans font to draw text images" 7
else
	# 8 calibration and 4 test images: lines of text, shifted and sized per image
	for i in 0 1 2 3 4 5 6 7 8 9 10 11; do
		out=$d/calib/$(printf %03d "$i").npy
		[ "$i" -ge 8 ] && out=$d/test/$(printf %03d $((i - 8))).npy
		args=() y=$((30 + i * 3))
		while [ "$y" -lt "$det_size" ]; do
			args+=(-annotate "+$((5 + i * 4))+$y" "Invoice $((2020 + i))-$y total $((i * 37 + y)).50")
			y=$((y + 40 + i % 3 * 8))
		done
		/usr/bin/convert -size "${det_size}x${det_size}" xc:white -font DejaVu-Sans -pointsize $((20 + i % 4 * 2)) \
			-fill black "${args[@]}" -depth 8 "rgb:$d/raw/$i.rgb" &&
			node "$js" image "$d/raw/$i.rgb" "$det_size" "$det_size" det "$out" || die "cannot make det inputs"
	done
	"$onnxq" convert "$det" -o "$d/det32.onnx" --passes cleanup,fold-bn 2> "$d/conv.err" || die "convert: $(head -n 1 "$d/conv.err")"
	if node "$js" run "$det" "$d/ort_raw" "x=$d/test/000.npy" && node "$js" run "$d/det32.onnx" "$d/ort32" "x=$d/test/000.npy" &&
		node "$js" compare "$d/ort32" "$d/ort_raw" 1e-3 > "$d/cmp.txt" 2>&1; then
		ok "det: twin (BatchNormalization folded) runs in ORT like the raw file"
	else
		bad "det: twin differs from the raw file in ORT"
		sed 's/^/    /' "$d/cmp.txt"
	fi
	model_case det "$d/det32.onnx" "$d/calib" "$d/test"
fi
finish
