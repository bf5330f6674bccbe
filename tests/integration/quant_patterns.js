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

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);

function die(msg) {
  console.error('quant_patterns: ' + msg);
  process.exit(2);
}

function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.length < 10 || !b.subarray(0, 6).equals(MAGIC)) die(file + ': not a .npy file');
  const v = b[6];
  const hlen = v === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = (v === 1 ? 10 : 12) + hlen;
  const h = b.subarray(v === 1 ? 10 : 12, off).toString('latin1');
  const shape = /'shape':\s*\(([^)]*)\)/.exec(h);
  if (!/'descr':\s*'<f4'/.test(h) || !shape || /'fortran_order':\s*True/.test(h)) die(file + ': want float32 C order');
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, x) => a * x, 1);
  if (b.length !== off + n * 4) die(file + ': size does not match the shape');
  return { dims, data: new Float32Array(b.buffer.slice(b.byteOffset + off, b.byteOffset + off + n * 4)) };
}

function writeNpy(file, dims, data) {
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let h = `{'descr': '<f4', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = Math.ceil((10 + h.length + 1) / 64) * 64;
  h = h + ' '.repeat(total - 10 - h.length - 1) + '\n';
  const pre = Buffer.alloc(10);
  MAGIC.copy(pre);
  pre[6] = 1;
  pre.writeUInt16LE(h.length, 8);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(h, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

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
    const t = readNpy(s.slice(i + 1));
    feeds[s.slice(0, i)] = new ort.Tensor('float32', t.data, t.dims);
  }
  const out = await sess.run(feeds);
  fs.mkdirSync(outdir, { recursive: true });
  for (const name of sess.outputNames) {
    const t = out[name];
    if (t.type !== 'float32') die(`output ${name} is ${t.type}, want float32`);
    writeNpy(path.join(outdir, name.replace(/\//g, '_') + '.npy'), t.dims, t.data);
  }
}

main().catch((e) => die(e.message || String(e)));
