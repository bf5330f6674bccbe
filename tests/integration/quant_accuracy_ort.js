#!/usr/bin/env node
// quant_accuracy_ort.js - the ONNX Runtime side of quant_accuracy.sh.
//
//   node quant_accuracy_ort.js MODEL DATA_DIR OUT_DIR [LEVEL]
//
// Runs MODEL (one input) in onnxruntime-node on every DATA_DIR/NNN.npy (sorted)
// and writes OUT_DIR/NNN/<output name>.npy ('/' -> '_'), the layout of
// `onnxq run --output-dir`, so both runtimes' outputs compare file by file.
// LEVEL is ORT's graphOptimizationLevel (default 'basic', as the acceptance asks:
// constant folding and redundant-node removal; the QDQ fusions into QLinear*
// kernels belong to 'extended'). One intra-op thread; warnings are not logged.
// ORT is found in $OQ_CACHE/ort/node_modules (default <repo>/.cache), filled
// by fetch.sh. Exit 2 with one line on stderr when the model does not load or run.
'use strict';
const fs = require('fs');
const path = require('path');

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);
// npy descr -> [ORT tensor type, TypedArray, bytes per element]
const DESCR = {
  '<f4': ['float32', Float32Array, 4], '<f8': ['float64', Float64Array, 8],
  '<i8': ['int64', BigInt64Array, 8], '<i4': ['int32', Int32Array, 4],
  '|i1': ['int8', Int8Array, 1], '|u1': ['uint8', Uint8Array, 1], '|b1': ['bool', Uint8Array, 1],
  '<i2': ['int16', Int16Array, 2], '<u2': ['uint16', Uint16Array, 2],
};
const ORT_DESCR = Object.fromEntries(Object.entries(DESCR).map(([d, t]) => [t[0], d]));

function die(msg) {
  console.error('quant_accuracy_ort: ' + msg);
  process.exit(2);
}

function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.length < 10 || !b.subarray(0, 6).equals(MAGIC)) die(file + ': not a .npy file');
  const v = b[6];
  const hlen = v === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = (v === 1 ? 10 : 12) + hlen;
  const h = b.subarray(v === 1 ? 10 : 12, off).toString('latin1');
  const descr = /'descr':\s*'([^']*)'/.exec(h);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(h);
  if (!descr || !shape || /'fortran_order':\s*True/.test(h)) die(file + ': unsupported header ' + h.trim());
  const t = DESCR[descr[1]];
  if (!t) die(file + ': unsupported dtype ' + descr[1]);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, x) => a * x, 1);
  if (b.length !== off + n * t[2]) die(file + ': size does not match the shape');
  const ab = b.buffer.slice(b.byteOffset + off, b.byteOffset + off + n * t[2]); // aligned copy
  return { type: t[0], dims, data: new t[1](ab) };
}

function writeNpy(file, descr, dims, data) {
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = Math.ceil((10 + h.length + 1) / 64) * 64;
  h = h + ' '.repeat(total - 10 - h.length - 1) + '\n';
  const pre = Buffer.alloc(10);
  MAGIC.copy(pre);
  pre[6] = 1;
  pre.writeUInt16LE(h.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(h, 'latin1'), body]));
}

async function main(model, dataDir, outDir, level) {
  const repo = path.resolve(__dirname, '..', '..');
  const cache = process.env.OQ_CACHE || path.join(repo, '.cache');
  const ort = require(path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));
  const sess = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: level, intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3,
  });
  if (sess.inputNames.length !== 1) die(`${model}: ${sess.inputNames.length} inputs, want 1`);
  const files = fs.readdirSync(dataDir).filter((f) => /^\d+\.npy$/.test(f)).sort();
  if (!files.length) die(dataDir + ': no NNN.npy samples');
  for (const f of files) {
    const a = readNpy(path.join(dataDir, f));
    const res = await sess.run({ [sess.inputNames[0]]: new ort.Tensor(a.type, a.data, a.dims) });
    const dir = path.join(outDir, f.replace(/\.npy$/, ''));
    fs.mkdirSync(dir, { recursive: true });
    for (const name of sess.outputNames) {
      const t = res[name];
      const d = ORT_DESCR[t.type];
      if (!d) die(`output ${name}: type ${t.type} has no .npy form`);
      writeNpy(path.join(dir, name.replace(/\//g, '_') + '.npy'), d, t.dims, t.data);
    }
  }
}

const args = process.argv.slice(2);
if (args.length < 3 || args.length > 4) die('usage: quant_accuracy_ort.js MODEL DATA_DIR OUT_DIR [LEVEL]');
main(args[0], args[1], args[2], args[3] || 'basic').catch((e) => die(String(e.message || e)));
