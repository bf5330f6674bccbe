# lib.sh - shell helpers shared by the bench scripts (sourced, not run).

# rep_dir SRC REP DST: DST (made afresh) holds REP cycles of SRC's sample files as symlinks
# named 00000.npy, 00001.npy, ... in cycle order; prints the number of links.
rep_dir() {
	local src=$1 rep=$2 dst=$3 i=0 r f
	rm -rf "$dst"
	mkdir "$dst"
	for r in $(seq "$rep"); do
		for f in $(ls "$src"); do
			ln -s "$src/$f" "$dst/$(printf '%05d' $i)${f#"${f%%.*}"}"
			i=$((i + 1))
		done
	done
	echo "$i"
}

# acc_data CACHE: prints the acceptance data folder (made by tests/integration/quant_accuracy.sh:
# CACHE/acc/data-*/{img,det,rec,cls}/{calib,held}); fails with a message when there is none.
acc_data() {
	local d
	d=$(ls -d "$1"/acc/data-* 2> /dev/null | head -1)
	[ -n "$d" ] || { echo "$(basename "$0"): no $1/acc/data-*: run tests/integration/quant_accuracy.sh once" >&2; return 1; }
	echo "$d"
}

# acc_model KEY CACHE: prints "MODEL SET" for a model key: det, rec, cls (PaddleOCR in CACHE/ocr)
# or a torchvision export name (CACHE/tv/KEY.onnx); SET is the data set it is judged on
# (det, rec, cls or img).
acc_model() {
	case $1 in
	det) echo "$2/ocr/ch_PP-OCRv4_det_infer.onnx det" ;;
	rec) echo "$2/ocr/ch_PP-OCRv4_rec_infer.onnx rec" ;;
	cls) echo "$2/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx cls" ;;
	*) echo "$2/tv/$1.onnx img" ;;
	esac
}

# worst_sqnr FMT: the lowest output's per-sample min and mean SQNR (dB) from `onnxq compare
# --json` on stdin, printed with the printf-style FMT (two %f fields).
worst_sqnr() {
	python3 -c '
import json, sys
o = json.load(sys.stdin)["outputs"]
w = min(o, key=lambda x: x["sqnr_min_db"])
print(sys.argv[1] % (w["sqnr_min_db"], w["sqnr_mean_db"]))' "$1"
}
