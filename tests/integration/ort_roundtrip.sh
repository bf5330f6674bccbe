#!/usr/bin/env bash
# `onnxq convert` on the real PaddleOCR models, judged by ONNX Runtime.
#
#   tests/integration/ort_roundtrip.sh [ONNXQ]
#
# For each of det / rec / cls (fetched by fetch.sh):
#   plain      onnxq convert MODEL -> copy; ORT runs both on the same seeded
#              inputs and every output must be bit-identical (ort_run.js)
#   external   onnxq convert --external-data -> a .data file must exist; ORT
#              loads the copy from its folder, outputs bit-identical
#   back       onnxq convert of the external-data copy to one file (no .data
#              written), outputs bit-identical
# Before that, the roundtrip tool (tests/tools/roundtrip.c) checks the three
# models in onnxq's own terms: plain, external data, and its self-test (each
# model one test per mode).
# Input shapes: det [1,3,96,128] (H, W multiples of 32), rec [1,3,48,320],
# cls [1,3,48,192]. Closes with "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}

cache=$("$here/fetch.sh") || die "fetch.sh failed (no npm registry?)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rt=${OQ_ROUNDTRIP:-$(dirname "$onnxq")/tests/roundtrip}
for mode in "" --external-data --self-test; do
	if ! [ -x "$rt" ]; then
		bad "roundtrip tool missing at $rt"
		break
	fi
	out=$("$rt" "$cache/ocr" $mode 2>&1)
	line=$(tail -n1 <<<"$out")
	if tally "$line"; then
		grep -v -F "$line" <<<"$out"
		echo "roundtrip ${mode:-plain}: $line"
	else
		bad "roundtrip ${mode:-plain} died: $(tail -n 5 <<<"$out")"
	fi
done

declare -A shape=(
	[ch_PP-OCRv4_det_infer]="1,3,96,128"
	[ch_PP-OCRv4_rec_infer]="1,3,48,320"
	[ch_ppocr_mobile_v2.0_cls_infer]="1,3,48,192"
)

for name in ch_PP-OCRv4_det_infer ch_PP-OCRv4_rec_infer ch_ppocr_mobile_v2.0_cls_infer; do
	src=$cache/ocr/$name.onnx
	if [ ! -f "$src" ]; then
		bad "$name: $src missing"
		continue
	fi
	args=(--shape "x=${shape[$name]}")
	d=$tmp/$name
	mkdir -p "$d/plain" "$d/ext" "$d/back"

	# plain copy
	if ! "$onnxq" convert "$src" -o "$d/plain/$name.onnx"; then
		bad "$name plain: onnxq convert failed"
	elif out=$(node "$here/ort_run.js" "$src" "$d/plain/$name.onnx" "${args[@]}" 2>&1); then
		ok "$name plain: $out"
	else
		bad "$name plain: $out"
	fi

	# external data
	ext=$d/ext/$name.onnx
	if ! "$onnxq" convert "$src" -o "$ext" --external-data; then
		bad "$name external: onnxq convert --external-data failed"
		continue
	fi
	# The data file is named per write: NAME.onnx.<16 hex>.data.
	data=$(ls "$ext".*.data 2>/dev/null | head -n 1)
	if [ -z "$data" ] || [ ! -s "$data" ]; then
		bad "$name external: no $ext.*.data was written"
	else
		msize=$(stat -c %s "$ext")
		dsize=$(stat -c %s "$data")
		# Run from another folder: ORT must resolve the data file next to the model.
		if out=$(cd / && node "$here/ort_run.js" "$src" "$ext" "${args[@]}" 2>&1); then
			ok "$name external ($msize + $dsize bytes): $out"
		else
			bad "$name external: $out"
		fi
	fi

	# back to a single file
	back=$d/back/$name.onnx
	if ! "$onnxq" convert "$ext" -o "$back"; then
		bad "$name back: onnxq convert of the external-data model failed"
	elif ls "$back".*data >/dev/null 2>&1; then
		bad "$name back: a .data file was written although external data was not asked for"
	elif out=$(node "$here/ort_run.js" "$src" "$back" "${args[@]}" 2>&1); then
		ok "$name back: $out"
	else
		bad "$name back: $out"
	fi
done

finish
