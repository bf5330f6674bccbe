#!/usr/bin/env bash
# convert.sh - throughput and peak memory of `onnxq convert` and `onnxq
# inspect` on large models, measured side by side with physical references.
#
# Targets (issue 1): convert of a >= 100 MB model at >= 1 GB/s, and peak RSS
# of inspect and convert <= 1.5x the model file size. Speeds are reported as
# ratios to references run in the same session on the same file, never as
# absolute timed assertions:
#   - `cp MODEL OUT`: the physical floor (read + write of the same bytes);
#   - ONNX Runtime (onnxruntime-node) creating an InferenceSession on the
#     same model: the load cost of a real runtime.
# Each command is timed best of N (default 5) after a warm-up read of the
# input, so the page cache holds the input; outputs are deleted and `sync`ed
# before each timed run (not timed), so every run writes a fresh file.
#
# Models (made once into the git-ignored cache $OQ_CACHE/bench, default
# <repo>/.cache/bench):
#   resnet50.onnx  torchvision ResNet-50, ~100 MB (bench/make_resnet50.py;
#                  needs Debian python3-torch + python3-torchvision, skipped
#                  with a note when the export fails)
#   big.onnx       synthetic MatMul/Add chain, ~218 MB (bench/make_big.c,
#                  written by onnxq's own IR and saver)
# Extra model paths may be given as arguments.
#
# usage: bench/convert.sh [-n RUNS] [--alt ONNXQ] [--no-results] [MODEL...]
#   --alt ONNXQ  also time another onnxq binary's convert side by side (to
#                measure a candidate fix against the same cp run)
# env:   OQ_CACHE (cache root), OQ_BENCH_BUILD (Release build dir, default
#        <repo>/build-bench), OQ_BENCH_TIMER=loop (bash timer, not hyperfine)
# Writes the table to stdout and to bench/RESULTS.md (unless --no-results).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${OQ_CACHE:-$root/.cache}
build=${OQ_BENCH_BUILD:-$root/build-bench}
runs=5
write_results=1
alt=
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) runs=$2; shift 2 ;;
    --no-results) write_results=0; shift ;;
    --alt) alt=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "convert.sh: unknown option $1" >&2; exit 1 ;;
    *) extra+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"); shift ;;
  esac
done
cmdline="bench/convert.sh -n $runs${alt:+ --alt $alt}${extra:+ ${extra[*]}}"
benchdir=$cache/bench
outdir=$benchdir/out
mkdir -p "$benchdir" "$outdir"
log=$benchdir/convert.log
: >"$log"
note() { echo "convert.sh: $*" >&2; }

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- build (Release, incremental) ----
note "building Release onnxq in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DONNXQ_TESTS=OFF >>"$log" 2>&1
make -C "$build" -j"$(nproc)" onnxq >>"$log" 2>&1 || { note "build failed, see $log"; exit 1; }
onnxq=$build/onnxq
if [ ! -x "$build/make_big" ] || [ "$root/bench/make_big.c" -nt "$build/make_big" ] ||
   [ "$build/libonnxq.a" -nt "$build/make_big" ]; then
  cc -std=c11 -O2 -Wall -Wextra -Wpedantic -Wshadow -Wvla -D_POSIX_C_SOURCE=200809L \
    -I"$root" "$root/bench/make_big.c" \
    "$build/libonnxq.a" $(pkg-config --libs libprotobuf-c openblas libcjson) -lpthread -lm -o "$build/make_big"
fi

# ---- models ----
models=()
notes=()
if [ ! -s "$benchdir/resnet50.onnx" ]; then
  note "exporting ResNet-50 (torch)"
  if ! /usr/bin/python3 "$root/bench/make_resnet50.py" "$benchdir/resnet50.onnx" >>"$log" 2>&1; then
    notes+=("resnet50: skipped, the torch export failed (needs apt-get install python3-torch python3-torchvision; see $log)")
  fi
fi
[ -s "$benchdir/resnet50.onnx" ] && models+=("$benchdir/resnet50.onnx")
if [ ! -s "$benchdir/big.onnx" ]; then
  note "writing the synthetic model"
  "$build/make_big" "$benchdir/big.onnx" >>"$log" 2>&1
fi
models+=("$benchdir/big.onnx")
models+=("${extra[@]}")

# ---- ONNX Runtime reference ----
ort_pkg=$cache/ort/node_modules/onnxruntime-node
if ! command -v node >/dev/null; then
  notes+=("ORT: skipped, node is not installed")
  ort_pkg=
elif [ ! -f "$ort_pkg/package.json" ]; then
  note "fetching onnxruntime-node"
  if ! OQ_CACHE=$cache bash "$root/tests/integration/fetch.sh" >>"$log" 2>&1; then
    notes+=("ORT: skipped, tests/integration/fetch.sh failed (see $log)")
    ort_pkg=
  fi
fi

# ---- timing ----
# best_of NAME PREP CMD...: prints the best wall time in seconds of N runs of
# CMD, running the shell snippet PREP before each run (untimed).
timer=${OQ_BENCH_TIMER:-}
if [ -z "$timer" ]; then
  if command -v hyperfine >/dev/null; then timer=hyperfine; else timer=loop; fi
fi
best_of() {
  local prep=$1; shift
  if [ "$timer" = hyperfine ]; then
    local js=$outdir/hf.json
    hyperfine -N --runs "$runs" --warmup 1 --prepare "sh -c '$prep'" --export-json "$js" \
      -- "$(printf '%q ' "$@")" >>"$log" 2>&1
    # "min": <seconds>, of the one benchmark in the file
    sed -n 's/^ *"min": *\([0-9.e+-]*\),*$/\1/p' "$js" | head -1
  else
    local best="" t0 t1 i
    sh -c "$prep"
    "$@" >/dev/null 2>>"$log" # warm-up
    for ((i = 0; i < runs; i++)); do
      sh -c "$prep"
      t0=$(date +%s.%N)
      "$@" >/dev/null 2>>"$log"
      t1=$(date +%s.%N)
      best=$(awk -v a="$t0" -v b="$t1" -v m="$best" 'BEGIN { t = b - a; if (m == "" || t < m) m = t; printf "%.6f", m }')
    done
    echo "$best"
  fi
}
# peak_kb CMD...: peak resident set size in KiB (GNU time %M).
peak_kb() {
  /usr/bin/time -f %M -o "$outdir/time.txt" "$@" >/dev/null 2>>"$log"
  tail -1 "$outdir/time.txt"
}
fmt() { awk -v x="$1" -v f="$2" 'BEGIN { if (x == "" || x == "-") print "-"; else printf f, x }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print ""; else printf "%.6f", a / b }'; }

if [ ! -x /usr/bin/time ]; then
  note "/usr/bin/time is missing (apt-get install time): peak RSS is not measured"
fi

rows=()
verdicts=()
for model in "${models[@]}"; do
  name=$(basename "$model" .onnx)
  bytes=$(stat -c %s "$model")
  out=$outdir/$name.out.onnx
  note "$name: $bytes bytes, best of $runs ($timer)"
  cat "$model" >/dev/null # warm the page cache
  rmout="rm -f $out $out.data; sync"
  t_cp=$(best_of "$rmout" cp "$model" "$out")
  t_cv=$(best_of "$rmout" "$onnxq" convert "$model" -o "$out")
  t_ext=$(best_of "$rmout" "$onnxq" convert "$model" -o "$out" --external-data)
  t_in=$(best_of "true" "$onnxq" inspect "$model")
  t_alt=
  if [ -n "$alt" ]; then
    t_alt=$(best_of "$rmout" "$alt" convert "$model" -o "$out")
  fi
  # the default convert rewrites the same bytes for models onnxq reads losslessly
  sh -c "$rmout"
  "$onnxq" convert "$model" -o "$out" 2>>"$log"
  if cmp -s "$model" "$out"; then same=yes; else same=no; fi
  t_ort=
  if [ -n "$ort_pkg" ]; then
    t_ort=$(node "$root/bench/ort_load.js" "$ort_pkg" "$model" "$runs" disabled 2>>"$log" |
      sed -n 's/^best_s=\([0-9.]*\).*/\1/p') || true
    [ -z "$t_ort" ] && notes+=("ORT: session creation failed on $name (see $log)")
  fi
  rss_in= rss_cv= rss_ext=
  if [ -x /usr/bin/time ]; then
    rss_in=$(peak_kb "$onnxq" inspect "$model")
    sh -c "$rmout"
    rss_cv=$(peak_kb "$onnxq" convert "$model" -o "$out")
    sh -c "$rmout"
    rss_ext=$(peak_kb "$onnxq" convert "$model" -o "$out" --external-data)
  fi
  sh -c "$rmout"
  mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
  gbs_cp=$(div "$bytes" "$(awk -v t="$t_cp" 'BEGIN { print t * 1e9 }')")
  gbs_cv=$(div "$bytes" "$(awk -v t="$t_cv" 'BEGIN { print t * 1e9 }')")
  gbs_ext=$(div "$bytes" "$(awk -v t="$t_ext" 'BEGIN { print t * 1e9 }')")
  r_cp=$(div "$t_cp" "$t_cv")         # convert speed / cp speed
  r_ort=$(div "$t_cv" "$t_ort")       # convert time / ORT create time
  altcols=
  if [ -n "$alt" ]; then
    altcols=" $(fmt "$(div "$bytes" "$(awk -v t="$t_alt" 'BEGIN { print t * 1e9 }')")" %.2f) | $(fmt "$(div "$t_cp" "$t_alt")" %.2f) |"
  fi
  x_in=$(div "${rss_in:-}" "$(awk -v b="$bytes" 'BEGIN { print b / 1024 }')")
  x_cv=$(div "${rss_cv:-}" "$(awk -v b="$bytes" 'BEGIN { print b / 1024 }')")
  x_ext=$(div "${rss_ext:-}" "$(awk -v b="$bytes" 'BEGIN { print b / 1024 }')")
  rows+=("| $name | $mb | $(fmt "$t_cp" %.3f) | $(fmt "$gbs_cp" %.2f) | $(fmt "$t_cv" %.3f) | $(fmt "$gbs_cv" %.2f) | $(fmt "$r_cp" %.2f) | $(fmt "$gbs_ext" %.2f) | $(fmt "$t_in" %.3f) | $(fmt "$t_ort" %.3f) | $(fmt "$r_ort" %.2f) | $(fmt "$x_in" %.2f) | $(fmt "$x_cv" %.2f) | $(fmt "$x_ext" %.2f) | $same |$altcols")
  v="$name: convert $(fmt "$gbs_cv" %.2f) GB/s"
  v+=" ($(awk -v g="$gbs_cv" 'BEGIN { print (g >= 1) ? "meets" : "BELOW" }') the 1 GB/s target"
  v+=", $(fmt "$r_cp" %.2f)x the speed of cp)"
  if [ -n "$x_cv" ]; then
    v+="; peak RSS inspect $(fmt "$x_in" %.2f)x, convert $(fmt "$x_cv" %.2f)x, --external-data $(fmt "$x_ext" %.2f)x the file"
    v+=" ($(awk -v a="$x_in" -v b="$x_cv" -v c="$x_ext" 'BEGIN { print (a <= 1.5 && b <= 1.5 && c <= 1.5) ? "within" : "ABOVE" }') the 1.5x target)"
  fi
  verdicts+=("$v")
done

header="| model | MB | cp s | cp GB/s | convert s | convert GB/s | convert/cp speed | convert --external-data GB/s | inspect s | ORT create s | convert/ORT time | RSS inspect (x file) | RSS convert (x file) | RSS convert --ext (x file) | output == input |"
sep="|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
if [ -n "$alt" ]; then
  header+=" alt convert GB/s | alt convert/cp speed |"
  sep+="---:|---:|"
fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
fs=$(df -PT "$outdir" | awk 'NR == 2 { print $2 }')
when=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
report() {
  echo "# onnxq convert / inspect benchmark"
  echo
  echo "- date: $when; onnxq commit $commit (Release build)"
  echo "- machine: $(nproc) CPUs, $cpu, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r); files on $fs; load average $load_start at the start (other work on the machine makes single figures noisy: compare the ratios)"
  echo "- command: \`$cmdline\` (best of $runs, timer: $timer; input in the page cache; output deleted and synced before each run)"
  echo "- GB/s = 1e9 bytes of model file per second. convert/cp speed = cp time / convert time (1.00 = as fast as cp)."
  echo "  convert/ORT time = onnxq convert wall time / onnxruntime-node InferenceSession.create time (graphOptimizationLevel 'disabled', in-process, best of $runs)."
  [ -n "$alt" ] && echo "  alt = \`$alt convert\`, timed in the same run."
  echo "  RSS = peak resident set (GNU time %M, file-backed mapped pages included) / model file size."
  echo
  echo "$header"
  echo "$sep"
  printf '%s\n' "${rows[@]}"
  echo
  printf -- '- %s\n' "${verdicts[@]}"
  if [ ${#notes[@]} -gt 0 ]; then printf -- '- note: %s\n' "${notes[@]}"; fi
}
report
if [ "$write_results" = 1 ]; then
  report >"$root/bench/RESULTS.md"
  note "wrote bench/RESULTS.md"
fi
