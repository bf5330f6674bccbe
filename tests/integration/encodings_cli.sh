#!/usr/bin/env bash
# encodings_cli.sh - `onnxq quantize --export-encodings / --import-encodings`
# (AIMET-style encodings, passes/quantize/encodings.h) on models/tiny_cnn.onnx, quantized
# with --prefer accuracy (the default leaves this small CNN float: ONNX Runtime runs it
# faster so):
#   - export writes JSON with "version", "activation_encodings" and
#     "param_encodings"; every integer record satisfies the AIMET relations
#     min = offset * scale, max = (offset + 2^bitwidth - 1) * scale;
#   - round trip: quantizing with the imported encodings and calibration on
#     OTHER samples (tiny_cnn_test) gives a byte-identical model to the
#     original run on tiny_cnn_calib (control: without the import the two
#     calibrations give different models, so the check can fail); bias
#     correction is off on both sides (it measures on the samples given:
#     other samples, other biases); with it (the default) and the same
#     samples, the import run is byte-identical too;
#   - an edited activation scale/offset in the file is what the quantized
#     model uses (exported again from the import run);
#   - errors: unknown tensor name, malformed JSON, missing file: documented
#     exit code, one line naming the tensor / the file, OUT untouched.
# usage: tests/integration/encodings_cli.sh [ONNXQ]   Closing line: "N passed, N failed[, N skipped]".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
model=$root/models/tiny_cnn.onnx
calib=$root/models/tiny_cnn_calib
other=$root/models/tiny_cnn_test
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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
help=$("$onnxq" quantize --help 2>&1)
case $help in *--export-encodings*--import-encodings*) ;; *)
	die "quantize --help lists no --export-encodings/--import-encodings" ;;
esac
command -v python3 >/dev/null || die "python3 needed"

q1=$tmp/q1.onnx e1=$tmp/e1.json
expect_exit 0 "quantize + export" "$onnxq" quantize --prefer accuracy "$model" -o "$q1" --calib "$calib" --threads 1 \
	--export-encodings "$e1" --no-bias-correction

# --- the file: structure and AIMET's min/max/offset relations, per record
if python3 - "$e1" >"$tmp/py" 2>&1 <<'EOF'; then ok "export format: $(cat "$tmp/py")"; else bad "export format: $(cat "$tmp/py")"; fi
import json, sys
e = json.load(open(sys.argv[1]))
assert e["version"] == "onnxq-encodings/1", e.get("version")
acts, params = e["activation_encodings"], e["param_encodings"]
assert acts and params, "empty sections"
n = 0
for sec in (acts, params):
    for name, recs in sec.items():
        assert isinstance(recs, list) and recs, name
        for r in recs:
            assert r["dtype"] == "int" and r["is_symmetric"] in ("True", "False"), (name, r)
            s, o, b = r["scale"], r["offset"], r["bitwidth"]
            assert s > 0 and o == int(o), (name, r)
            assert abs(r["min"] - o * s) <= 1e-6 * max(1, abs(r["min"])), (name, r)
            assert abs(r["max"] - (o + 2 ** b - 1) * s) <= 1e-6 * max(1, abs(r["max"])), (name, r)
            n += 1
# per-channel conv weights: more than one record for some weight
assert any(len(v) > 1 for v in params.values()), "no per-channel weight"
print(f"{len(acts)} activations, {len(params)} weights, {n} records")
EOF

# --- round trip: other calibration samples + import == the original model
q2=$tmp/q2.onnx q3=$tmp/q3.onnx
expect_exit 0 "quantize with import (other samples)" "$onnxq" quantize --prefer accuracy "$model" -o "$q2" --calib "$other" \
	--threads 1 --import-encodings "$e1" --no-bias-correction
if cmp -s "$q1" "$q2"; then ok "round trip: byte-identical model"; else bad "round trip: models differ"; fi
expect_exit 0 "control: other samples without import" "$onnxq" quantize --prefer accuracy "$model" -o "$q3" --calib "$other" --threads 1 \
	--no-bias-correction
if ! cmp -s "$q1" "$q3"; then ok "control: calibration alone changes the model"; else
	bad "control: other samples give the same model, the round trip proves nothing"
fi

# --- with bias correction (the default) and the same samples
q6=$tmp/q6.onnx q7=$tmp/q7.onnx e6=$tmp/e6.json
expect_exit 0 "quantize + export (bias correction)" "$onnxq" quantize --prefer accuracy "$model" -o "$q6" --calib "$calib" --threads 1 \
	--export-encodings "$e6"
expect_exit 0 "quantize with import (bias correction, same samples)" "$onnxq" quantize --prefer accuracy "$model" -o "$q7" \
	--calib "$calib" --threads 1 --import-encodings "$e6"
if cmp -s "$q6" "$q7"; then ok "round trip with bias correction: byte-identical model"; else
	bad "round trip with bias correction: models differ"; fi

# --- an edited activation encoding is used as given
e2=$tmp/e2.json e3=$tmp/e3.json q4=$tmp/q4.onnx
name=$(python3 - "$e1" "$e2" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))
name = sorted(k for k, v in e["activation_encodings"].items() if v[0]["onnx_type"] == "uint8")[0]
r = e["activation_encodings"][name][0]
r["scale"], r["offset"] = 0.0625, -37          # uint8 zp 37
r["min"], r["max"] = -37 * 0.0625, (255 - 37) * 0.0625
json.dump(e, open(sys.argv[2], "w"))
print(name)
EOF
)
expect_exit 0 "quantize with edited encoding" "$onnxq" quantize --prefer accuracy "$model" -o "$q4" --calib "$calib" --threads 1 \
	--import-encodings "$e2" --export-encodings "$e3"
if python3 - "$e3" "$name" <<'EOF'; then ok "edited encoding of '$name' used"; else bad "edited encoding of '$name' not used"; fi
import json, sys
r = json.load(open(sys.argv[1]))["activation_encodings"][sys.argv[2]][0]
sys.exit(0 if r["scale"] == 0.0625 and r["offset"] == -37 else 1)
EOF

# --- errors (exit 1 = usage, 4 = I/O), OUT untouched
echo keep >"$tmp/keep.onnx"
printf '{"activation_encodings": {"no_such_tensor": [{"bitwidth": 8, "scale": 0.1, "offset": 0}]}}' >"$tmp/unk.json"
expect_exit 1 "unknown tensor" "$onnxq" quantize --prefer accuracy "$model" -o "$tmp/keep.onnx" --calib "$calib" --import-encodings "$tmp/unk.json"
expect_msg "unknown tensor" "no_such_tensor"
printf '{"activation_encodings": {' >"$tmp/broken.json"
expect_exit 1 "malformed JSON" "$onnxq" quantize --prefer accuracy "$model" -o "$tmp/keep.onnx" --calib "$calib" --import-encodings "$tmp/broken.json"
expect_msg "malformed JSON" "broken\.json.*malformed"
expect_exit 4 "missing file" "$onnxq" quantize --prefer accuracy "$model" -o "$tmp/keep.onnx" --calib "$calib" --import-encodings "$tmp/nope.json"
expect_msg "missing file" "nope\.json"
if [ "$(cat "$tmp/keep.onnx")" = keep ]; then ok "OUT untouched on errors"; else bad "OUT changed on an error"; fi

finish
