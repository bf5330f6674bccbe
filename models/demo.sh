#!/usr/bin/env bash
# The README's first quick-start command: install the build dependencies
# (Debian, as root), build onnxq, and run it on the bundled model
# models/tiny_cnn.onnx: inspect, check, run (random input) and convert.
# Quantization of the same model joins this script when it lands.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "$(id -u)" -eq 0 ]; then
  bash .ci/setup
else
  echo "demo: not root: skipping package installation (run .ci/setup as root once)" >&2
fi
cmake -S . -B build >/dev/null
make -C build -j"$(nproc)" onnxq >/dev/null
set -x
build/onnxq inspect models/tiny_cnn.onnx
build/onnxq check models/tiny_cnn.onnx
build/onnxq run models/tiny_cnn.onnx --input image=random:1
build/onnxq convert models/tiny_cnn.onnx -o "${TMPDIR:-/tmp}/tiny_cnn_copy.onnx"
