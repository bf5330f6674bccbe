// check_ort.js - asks ONNX Runtime whether each model of a check_gen manifest
// is accepted: session creation plus one run with x filled with ones.
// usage: node check_ort.js ORT_PACKAGE_DIR MODEL_DIR
// Prints one line per case: "<case> accept" or "<case> reject <first line of ORT's error>".
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(process.argv[2]);
const dir = process.argv[3];

async function one(name, dims) {
  const shape = dims === 'scalar' ? [] : dims.split(',').map(Number);
  const n = shape.reduce((a, b) => a * b, 1);
  try {
    const s = await ort.InferenceSession.create(path.join(dir, name + '.onnx'),
                                                {graphOptimizationLevel: 'disabled'});
    const x = new ort.Tensor('float32', new Float32Array(n).fill(1), shape);
    await s.run({x});
    return 'accept';
  } catch (e) {
    return 'reject ' + String(e.message || e).split('\n')[0];
  }
}

(async () => {
  const lines = fs.readFileSync(path.join(dir, 'manifest.txt'), 'utf8').split('\n').filter(Boolean);
  for (const line of lines) {
    const [name, dims] = line.split(' ');
    console.log(name + ' ' + await one(name, dims));
  }
})().catch((e) => { console.error(e); process.exit(1); });
