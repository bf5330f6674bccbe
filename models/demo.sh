#!/usr/bin/env bash
# The README's first quick-start command: install the build dependencies
# (Debian packages, as root: `.ci/setup build`), build onnxq, and run it on
# the bundled model models/tiny_cnn.onnx: inspect it, quantize it to int8
# (calibrated on models/tiny_cnn_calib/, photo crops made by
# make_tiny_cnn_samples.py; --prefer accuracy, see below), check the result
# and compare it with the float model on held-out samples (models/tiny_cnn_test/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "$(id -u)" -eq 0 ]; then
  bash .ci/setup build
else
  echo "demo: not root: skipping package installation (run '.ci/setup build' as root once)" >&2
fi
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" --target onnxq >/dev/null
set -x
out=${TMPDIR:-/tmp}/tiny_cnn_int8.onnx
build/onnxq inspect models/tiny_cnn.onnx
# --prefer accuracy: ONNX Runtime runs this tiny model faster in float, so the default placement
# would write it float (with a warning); the demo shows the quantized model
build/onnxq models/tiny_cnn.onnx -o "$out" --calib models/tiny_cnn_calib --prefer accuracy
build/onnxq check "$out"
build/onnxq inspect "$out"
build/onnxq compare models/tiny_cnn.onnx "$out" --data models/tiny_cnn_test
