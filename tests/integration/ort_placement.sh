#!/usr/bin/env bash
# ort_placement.sh - runtime-aware placement judged by ONNX Runtime itself (onnxruntime-node,
# graph optimization 'all', one thread), on a small CNN whose Convs feed the activation units
# the placement is about (make_act_cnn.py: decomposed HardSwish, SiLU, a HardSigmoid gate, a
# residual Add):
#   - --prefer speed and the default (balanced): ONNX Runtime's optimized graph (session option
#     optimizedModelFilePath, op types counted by bench/ort_ops.py) has a QLinearConv for each of
#     the 4 Convs and no float Conv left; `check --target ort --json` agrees (every Conv in an
#     integer kernel, integer_share 1);
#   - --prefer accuracy (Conv + activation fused in float): those Convs stay float in ONNX
#     Runtime, and `check --target ort` names them with "no QuantizeLinear after the Conv";
#   - balanced measures the speed placement against accuracy's: with a narrow range forced on a
#     value only the speed placement quantizes, it floats units for fidelity until its
#     estimated SQNR is within 1 dB of accuracy's (speed keeps every unit integer); when the
#     units left integer then save less than the speed search's margin, the model is written float;
#   - it re-measures the groups still integer after each group it floats: an error masked by a
#     larger one upstream is found once that one is float; errors that hide each other (no group
#     gains alone) are named in the summary as traded for speed;
#   - every dtype option loads and runs in ONNX Runtime: profile ort at optimization 'all'
#     (float8 units ONNX Runtime would fuse into 8-bit-only kernels are broken up by the quantize
#     pass), profile trt at 'basic' (its float8 models are for TensorRT; ONNX Runtime's fusions
#     reject float8 zero points); `check` accepts each.
# usage: tests/integration/ort_placement.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
py=/usr/bin/python3

if ! [ -x "$py" ] || ! "$py" -c 'import numpy, onnx' 2>/dev/null || ! command -v node >/dev/null; then
	skip "ort_placement: needs /usr/bin/python3 with numpy and onnx, and node"
	finish
	exit
fi
[ -x "$onnxq" ] || die "$onnxq not found"
cache=$("$here/fetch.sh" 2>/dev/null | tail -n 1) && [ -d "$cache/ort/node_modules/onnxruntime-node" ] ||
	die "onnxruntime-node unavailable (fetch.sh)"
export OQ_CACHE=$cache
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$here/make_act_cnn.py" "$tmp" || die "make_act_cnn.py failed"
model=$tmp/act_cnn.onnx

# ops NAME: ORT's optimized graph of $tmp/NAME.onnx, "count op" lines in $tmp/NAME.ops
ops() {
	node "$here/ort_optimized.js" "$tmp/$1.onnx" all "$tmp/$1.opt.onnx" 2>"$tmp/$1.err" &&
		"$py" "$root/bench/ort_ops.py" "$tmp/$1.opt.onnx" >"$tmp/$1.ops"
}
count() { awk -v op="$2" '{ n = $2; sub(/.*::/, "", n); if (n == op) s += $1 } END { print s + 0 }' "$tmp/$1.ops"; }

# bought_back LOG: balanced's summary in LOG says the speed placement missed accuracy's estimate
# by more than 1 dB and the chosen one is within 1 dB of it (inf: the model was left float)
bought_back() {
	"$py" - "$1" <<'EOF'
import re, sys
m = re.search(r"estimated output SQNR (-?[0-9.]+|inf) dB \(accuracy-first (-?[0-9.]+), speed (-?[0-9.]+)\)",
              open(sys.argv[1]).read())
chosen, acc, speed = map(float, m.groups())
sys.exit(0 if speed < acc - 1 and chosen >= acc - 1 else 1)
EOF
}

for pref in speed balanced; do
	if ! "$onnxq" quantize "$model" -o "$tmp/$pref.onnx" --calib "$tmp/calib" --prefer "$pref" >"$tmp/$pref.log" 2>&1; then
		bad "$pref: quantize: $(tail -n 1 "$tmp/$pref.log")"
		continue
	fi
	if ! ops "$pref"; then bad "$pref: ONNX Runtime: $(cat "$tmp/$pref.err")"; continue; fi
	n=$(count "$pref" QLinearConv)
	f=$(($(count "$pref" Conv) + $(count "$pref" FusedConv)))
	if [ "$n" = 4 ] && [ "$f" = 0 ]; then ok "$pref: ONNX Runtime runs the 4 Convs as QLinearConv"
	else bad "$pref: QLinearConv $n, float Conv $f (want 4, 0): $(tr '\n' ';' <"$tmp/$pref.ops")"; fi
	if "$onnxq" check "$tmp/$pref.onnx" --target ort --json --data "$tmp/held" >"$tmp/$pref.json" 2>/dev/null &&
		"$py" - "$tmp/$pref.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["coverage"]
convs = [n for n in c["not_integer"] if n["op"] == "Conv"]
sys.exit(0 if c["macs_known"] and c["integer_share"] > 0.999 and not convs else 1)
EOF
	then ok "$pref: check --target ort: every Conv integer"
	else bad "$pref: check --target ort: $(head -c 400 "$tmp/$pref.json")"; fi
done
grep -q '^placement: [0-9]* of 5 Conv/Gemm/MatMul units integer' "$tmp/balanced.log" &&
	grep -q '^coverage (ort): ' "$tmp/balanced.log" && ok "balanced: the summary has the placement and coverage lines" ||
	bad "balanced: summary: $(grep -E 'placement|coverage' "$tmp/balanced.log" | head -3)"

# accuracy-first: the Convs before the activations stay float
if "$onnxq" quantize "$model" -o "$tmp/acc.onnx" --calib "$tmp/calib" --prefer accuracy --quiet && ops acc; then
	n=$(count acc QLinearConv)
	f=$(($(count acc Conv) + $(count acc FusedConv)))
	if [ "$f" -ge 3 ] && [ "$n" -le 1 ]; then ok "accuracy: the Convs fused with their activation stay float ($f float, $n QLinearConv)"
	else bad "accuracy: QLinearConv $n, float Conv $f: $(tr '\n' ';' <"$tmp/acc.ops")"; fi
	if "$onnxq" check "$tmp/acc.onnx" --target ort | grep -q "node 'c1' (Conv): float.*no QuantizeLinear after the Conv"; then
		ok "accuracy: check --target ort names c1: no QuantizeLinear after the Conv"
	else bad "accuracy: check --target ort: $("$onnxq" check "$tmp/acc.onnx" --target ort | head -5)"; fi
else
	bad "accuracy: quantize or ONNX Runtime: $(cat "$tmp/acc.err" 2>/dev/null)"
fi

# balanced measures what speed costs: a narrow range forced on c2's output (a value only the
# speed placement quantizes: under accuracy it lies inside the Conv + SiLU unit) wrecks the speed
# placement's output; balanced floats units for fidelity until it is within 1 dB of accuracy's.
# What the other units then save (c4 and c3 integer: 85 % of the all-float time expected) is
# inside the speed search's margin (OQ_PLACEMENT_MARGIN, 0.85), so the model is written float and
# the warning says both reasons.
printf '{"tensors": {"c2": {"range": [-0.05, 0.05]}}}' >"$tmp/narrow.json"
for pref in speed balanced; do
	"$onnxq" quantize "$model" -o "$tmp/n$pref.onnx" --calib "$tmp/calib" --overrides "$tmp/narrow.json" \
		--prefer "$pref" >"$tmp/n$pref.log" 2>&1 || bad "narrow c2, $pref: quantize: $(tail -n 1 "$tmp/n$pref.log")"
done
if grep -q '^placement: 4 of 5 .*, 0: fidelity)' "$tmp/nspeed.log" &&
	grep -q '^placement: 0 of 5 .*, [1-9]: fidelity)' "$tmp/nbalanced.log" &&
	grep -q 'left float: of its 5 Conv/Gemm/MatMul units [1-9] lose more than 1.0 dB in 8 bits, and the other [0-9] are not expected to save 15%' "$tmp/nbalanced.log" &&
	bought_back "$tmp/nbalanced.log"
then ok "narrow c2: balanced floats units for fidelity, the rest saves too little: float; speed does not"
else bad "narrow c2: $(grep -h '^placement' "$tmp/nspeed.log" "$tmp/nbalanced.log" | tr '\n' ';')"; fi

# a masked error re-measured: c2's narrow range and a narrower one on c3's output (also inside
# its Conv + HardSwish unit under accuracy, so only speed quantizes it). Balanced's groups (graph
# order, about equal MACs: c1 1.8, c2 37.7, c3 4.2, c4 9.4 MMAC of 53; fc is float, faster so)
# are {c1, c2}, {c3}, {c4}. Round 0 measures each float alone: c2's error dominates the output,
# so {c3} alone gains next to nothing (under OQ_PLACEMENT_MIN_GAIN_DB, 0.2 dB) and {c4} nothing;
# {c1, c2} gains and goes float. c3's clipping then holds the model many dB below accuracy, and
# round 1 re-measures {c3} and {c4} on top of {c1, c2} float: {c3} now removes the dominant error
# and goes float; with c1..c3 float and c4 integer (accuracy quantizes c4's unit too) the
# estimate is within the budget. So no trade is named and c1, c2, c3 are floated for fidelity
# (measured once alone, c3 would have stayed integer and the budget missed). c4 alone is then
# expected at 93 % of the all-float time, inside the margin: it goes float too (faster so).
printf '{"tensors": {"c2": {"range": [-0.05, 0.05]}, "c3": {"range": [-0.3, 0.3]}}}' >"$tmp/masked.json"
if "$onnxq" quantize "$model" -o "$tmp/masked.onnx" --calib "$tmp/calib" --overrides "$tmp/masked.json" \
	--verbose >"$tmp/masked.log" 2>&1; then
	if ! grep -q '^placement: traded for speed' "$tmp/masked.log" &&
		! grep -q '^placement: [0-9.]* dB below the accuracy-first placement' "$tmp/masked.log" &&
		grep -q '^placement: round 1: group 1 (units 2..2) float' "$tmp/masked.log" &&
		grep -q '^placement: group 1 float: estimated SQNR' "$tmp/masked.log" &&
		grep -q '^placement: with the units floated for fidelity the expected time is 9[0-9]% of all units float' "$tmp/masked.log" &&
		grep -q '^placement: 0 of 5 .*(2 float: faster so, 3: fidelity)' "$tmp/masked.log" &&
		grep -q "^placement: unit 'c1' .*: float (fidelity)" "$tmp/masked.log" &&
		grep -q "^placement: unit 'c2' .*: float (fidelity)" "$tmp/masked.log" &&
		grep -q "^placement: unit 'c3' .*: float (fidelity)" "$tmp/masked.log" &&
		grep -q "^placement: unit 'c4' .*: float (faster so)" "$tmp/masked.log" &&
		bought_back "$tmp/masked.log"
	then ok "narrow c2 and c3: balanced re-measures c3 after c1, c2 go float and floats it; c4 then saves too little"
	else bad "narrow c2 and c3: $(grep -h '^placement: [^u]' "$tmp/masked.log" | tr '\n' ';')"; fi
else
	bad "narrow c2 and c3: quantize: $(tail -n 1 "$tmp/masked.log")"
fi

# errors that hide each other: chain_cnn (make_act_cnn.py: four Conv -> SiLU units in series, no
# biases). The outputs of c2 and c4 lie inside their fused units under accuracy, so only the speed
# placement quantizes them; both are forced to [-1e-6, 1e-6]. With c2's alone, floating c2's group
# buys the loss back (control). With both, each still wrecks the one path while the other group
# is floated, so no group gains OQ_PLACEMENT_MIN_GAIN_DB (0.2 dB) alone: balanced floats nothing
# for fidelity, names the groups holding c2 and c4 as traded for speed, and says how far below
# accuracy-first it ends.
chain=$tmp/chain_cnn.onnx
printf '{"tensors": {"c2": {"range": [-1e-6, 1e-6]}}}' >"$tmp/wreck1.json"
printf '{"tensors": {"c2": {"range": [-1e-6, 1e-6]}, "c4": {"range": [-1e-6, 1e-6]}}}' >"$tmp/wreck2.json"
for w in wreck1 wreck2; do
	"$onnxq" quantize "$chain" -o "$tmp/$w.onnx" --calib "$tmp/calib" --overrides "$tmp/$w.json" --verbose \
		>"$tmp/$w.log" 2>&1 || bad "$w: quantize: $(tail -n 1 "$tmp/$w.log")"
done
if grep -q "^placement: unit 'c2' .*: float (fidelity)" "$tmp/wreck1.log" &&
	! grep -q '^placement: traded for speed' "$tmp/wreck1.log" &&
	grep -q '^placement: [0-9] of 5 .*, 0: fidelity)' "$tmp/wreck2.log" &&
	grep -q "^placement: traded for speed: .*'c2'" "$tmp/wreck2.log" &&
	grep -q "^placement: traded for speed: .*'c4'" "$tmp/wreck2.log" &&
	grep -q '^placement: [0-9.]* dB below the accuracy-first placement' "$tmp/wreck2.log"
then ok "chain, c2 and c4 narrow: no group gains alone; the summary names c2's and c4's groups as traded"
else bad "chain: $(grep -h '^placement: [^u]' "$tmp/wreck1.log" "$tmp/wreck2.log" | tr '\n' ';')"; fi

# every dtype option: check accepts the model, ONNX Runtime loads and runs it
i=0
while IFS='|' read -r level opts; do
	[ -n "$level" ] || continue
	i=$((i + 1))
	# shellcheck disable=SC2086
	if ! "$onnxq" quantize "$model" -o "$tmp/dt$i.onnx" --calib "$tmp/calib" --quiet $opts 2>"$tmp/dt$i.err"; then
		bad "dtype [$opts]: quantize: $(tail -n 1 "$tmp/dt$i.err")"
		continue
	fi
	if ! "$onnxq" check "$tmp/dt$i.onnx" >/dev/null 2>&1; then bad "dtype [$opts]: check"; continue; fi
	if node "$here/ort_optimized.js" "$tmp/dt$i.onnx" "$level" 2>"$tmp/dt$i.err"; then
		ok "dtype [$opts]: ONNX Runtime ($level) loads and runs it"
	else bad "dtype [$opts]: ONNX Runtime ($level): $(cat "$tmp/dt$i.err")"; fi
done <<'EOF'
all|
all|--prefer speed
all|--prefer accuracy
all|--act-type int8
all|--act-type int8 --prefer accuracy
all|--act-type uint16
all|--act-type int16
all|--weight-type uint8
all|--weight-type int16
all|--weight-type int4
all|--weight-type uint4 --granularity block --block-size 16
all|--granularity tensor
all|--act-symmetric
all|--act-type float8e4m3fn
all|--weight-type float8e4m3fn
all|--act-type float8e4m3fn --weight-type float8e4m3fn
all|--act-type float8e4m3fn --weight-type float8e4m3fn --granularity tensor
all|--profile trt
basic|--profile trt --act-type float8e4m3fn --weight-type float8e4m3fn
EOF

finish
