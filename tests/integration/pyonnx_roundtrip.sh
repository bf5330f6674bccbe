#!/usr/bin/env bash
# Losslessness of `onnxq convert` judged by the official ONNX Python package
# (Debian python3-onnx) over all ONNX backend node-test models and the
# bundled models. $1 = onnxq binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
onnxq=${1:-$here/../../build/onnxq}
if ! /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
  echo "python3-onnx missing (apt-get install python3-onnx)"
  echo "0 passed, 1 failed"
  exit 1
fi
cache=$("$here/fetch.sh")
exec /usr/bin/python3 "$here/pyonnx_roundtrip.py" "$onnxq" \
  /usr/share/libonnx-testdata/data/node/*/model.onnx "$here"/../../models/*.onnx "$cache"/ocr/*.onnx
