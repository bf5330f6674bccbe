#!/usr/bin/env node
// ort_optimized.js - loads MODEL in onnxruntime-node at graph optimization LEVEL (disabled, basic,
// extended, all; one thread), runs it once on float inputs of the declared shapes (symbolic
// dims 1, values from a seeded generator) and, with OUT, writes ONNX Runtime's optimized graph
// there (session option optimizedModelFilePath) to count what it fused.
//
//   node ort_optimized.js MODEL LEVEL [OUT]
//
// Exit 0 when the session loads and runs, 2 with one line on stderr otherwise. ORT is found in
// $OQ_CACHE/ort/node_modules (default <repo>/.cache).
'use strict';
const path = require('path');

async function main() {
  const [model, level, out] = process.argv.slice(2);
  const repo = path.resolve(__dirname, '..', '..');
  const cache = process.env.OQ_CACHE || path.join(repo, '.cache');
  const ort = require(path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));
  const so = { graphOptimizationLevel: level, intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3 };
  if (out) so.optimizedModelFilePath = out;
  const s = await ort.InferenceSession.create(model, so);
  const feeds = {};
  let seed = 12345;
  for (const name of s.inputNames) {
    const meta = (s.inputMetadata || []).find((m) => m.name === name);
    const dims = meta && meta.shape ? meta.shape.map((d) => (typeof d === 'number' && d > 0 ? d : 1)) : [1];
    const n = dims.reduce((a, b) => a * b, 1);
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      a[i] = seed / 2147483648 - 0.5;
    }
    feeds[name] = new ort.Tensor('float32', a, dims);
  }
  await s.run(feeds);
}

main().catch((e) => {
  console.error('ort_optimized: ' + (e.message || e).split('\n')[0]);
  process.exit(2);
});
