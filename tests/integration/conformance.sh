#!/usr/bin/env bash
# ONNX backend node tests through onnxq's executor (tests/tools/conformance.c):
# every case whose ops all have kernels must match the reference outputs;
# cases with an op onnxq does not run are skipped with the reason, and the
# documented exceptions in conformance_known_failures.txt are skipped with
# theirs. Runs with 1 and 2 threads. $1 = onnxq binary (the tool is found
# beside it in tests/).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
onnxq=${1:-$here/../../build/onnxq}
tool=$(dirname "$onnxq")/tests/conformance
p=0; f=0; s=0
for t in 1 2; do
  out=$("$tool" --threads "$t" --known "$here/conformance_known_failures.txt")
  rc=$?
  echo "$out" | grep -v '^SKIP' || true
  echo "$out" | grep -c '^SKIP' | sed "s/^/threads $t: skipped cases: /"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | tail -n 1)
  if [ -z "$line" ]; then
    echo "conformance (threads $t) printed no summary (exit $rc)"
    f=$((f + 1))
    continue
  fi
  read -r a _ b _ c _ <<<"$(echo "$line" | tr -d ',')"
  p=$((p + a)); f=$((f + b)); s=$((s + c))
  [ "$rc" -ne 0 ] && [ "$b" -eq 0 ] && f=$((f + 1))
done
echo "skip reasons (threads 2 run):"
"$tool" --threads 2 --known "$here/conformance_known_failures.txt" | grep '^SKIP' | sed 's/^SKIP [^:]*: //; s/node .* (\([A-Za-z]*\), domain.*/no kernel for \1/' | sort | uniq -c | sort -rn | head -40
echo "$p passed, $f failed, $s skipped"
[ "$f" -eq 0 ]
