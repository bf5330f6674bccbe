#!/usr/bin/env bash
# Losslessness of `onnxq convert` judged by the official ONNX Python package
# (Debian python3-onnx) over all ONNX backend node-test models and the
# bundled models. $1 = onnxq binary. pyonnx_roundtrip.py prints the closing
# line "N passed, N failed".
set -euo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
/usr/bin/python3 -c 'import onnx' 2>/dev/null || die "python3-onnx missing (apt-get install python3-onnx)"
cache=$("$here/fetch.sh") || die "fetch.sh failed"
exec /usr/bin/python3 "$here/pyonnx_roundtrip.py" "$onnxq" \
  /usr/share/libonnx-testdata/data/node/*/model.onnx "$here"/../../models/*.onnx "$cache"/ocr/*.onnx
