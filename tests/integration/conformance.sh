#!/usr/bin/env bash
# ONNX backend node tests through onnxq's executor (tests/tools/conformance.c):
# every case whose ops all have kernels must match the reference outputs;
# cases with an op onnxq does not run are skipped with the reason, and the
# documented exceptions in conformance_known_failures.txt are skipped with
# theirs. Runs with 1 and 2 threads. $1 = onnxq binary (the tool is found
# beside it in tests/).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
tool=$(dirname "$onnxq")/tests/conformance
for t in 1 2; do
  out=$("$tool" --threads "$t" --known "$here/conformance_known_failures.txt")
  rc=$?
  echo "$out" | grep -v '^SKIP' || true
  echo "$out" | grep -c '^SKIP' | sed "s/^/threads $t: skipped cases: /"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | tail -n 1)
  if ! tally "$line"; then
    bad "conformance (threads $t) printed no summary (exit $rc)"
    continue
  fi
  [ "$rc" -ne 0 ] && [[ $line == *" 0 failed"* ]] && bad "conformance (threads $t) exited $rc"
done
echo "skip reasons (threads 2 run):"
"$tool" --threads 2 --known "$here/conformance_known_failures.txt" | grep '^SKIP' | sed 's/^SKIP [^:]*: //; s/node .* (\([A-Za-z]*\), domain.*/no kernel for \1/' | sort | uniq -c | sort -rn | head -40
finish
