#!/usr/bin/env node
// quant_patterns.js - runs a model in onnxruntime-node for quant_patterns.sh
// and tests/integration/weight_only_ort.c.
//
//   node quant_patterns.js MODEL OUTDIR NAME=FILE.npy...
//
// float32 .npy inputs; writes OUTDIR/<output name>.npy (float32 outputs only).
// The session uses graphOptimizationLevel 'basic' (constant folding and
// redundant-node removal, which includes ORT's Q/DQ cleanups, but not the
// DQ -> MatMul to MatMulNBits swap of level 'all', which quantizes the
// activations and changes the arithmetic by about 1%) and one
// thread. ORT is found in $OQ_CACHE/ort/node_modules (default <repo>/.cache).
'use strict';
const fs = require('fs');
const path = require('path');

function die(msg) {
  console.error('quant_patterns: ' + msg);
  process.exit(2);
}

const npy = require('./npy.js');

async function main() {
  const [model, outdir, ...specs] = process.argv.slice(2);
  if (!model || !outdir || !specs.length) die('usage: quant_patterns.js MODEL OUTDIR NAME=FILE.npy...');
  const cache = process.env.OQ_CACHE || path.join(__dirname, '..', '..', '.cache');
  const ort = require(path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));
  const sess = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'basic', intraOpNumThreads: 1, interOpNumThreads: 1,
  });
  const feeds = {};
  for (const s of specs) {
    const i = s.indexOf('=');
    const t = npy.readNpy(s.slice(i + 1), die);
    if (t.type !== 'float32') die(`${s.slice(i + 1)}: ${t.descr}, want float32`);
    feeds[s.slice(0, i)] = new ort.Tensor('float32', t.data, t.dims);
  }
  const out = await sess.run(feeds);
  fs.mkdirSync(outdir, { recursive: true });
  for (const name of sess.outputNames) {
    const t = out[name];
    if (t.type !== 'float32') die(`output ${name} is ${t.type}, want float32`);
    npy.writeNpy(path.join(outdir, name.replace(/\//g, '_') + '.npy'), '<f4', t.dims, t.data);
  }
}

main().catch((e) => die(e.message || String(e)));
