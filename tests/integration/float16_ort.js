#!/usr/bin/env node
// float16_ort.js - ONNX Runtime's side of float16_ort.sh.
//
//   node float16_ort.js sqnr REF TEST INPUT DIR [OUT.txt]
//       runs models REF and TEST in onnxruntime-node (graphOptimizationLevel 'disabled', one
//       thread) on every DIR/NNN.npy (float32 or float16, fed to input INPUT) and prints
//       "sqnr S min M samples N": the SQNR in dB of TEST's first output against REF's,
//       10 log10(sum ref^2 / sum (test - ref)^2) over all samples (S), and the lowest of the
//       per-sample values (M).
//   node float16_ort.js npy REF TEST
//       the SQNR in dB of .npy file TEST against REF (float32 or float16): prints "sqnr S".
//   node float16_ort.js load MODEL
//       creates sessions for MODEL at graphOptimizationLevel 'disabled' and 'all' (ORT's
//       default, where its QDQ fusions run): prints "ok" or "reject (level L) <ORT's first line>".
//
// ORT is found in $OQ_CACHE/ort/node_modules (default <repo>/.cache).
'use strict';
const fs = require('fs');
const path = require('path');

const cache = process.env.OQ_CACHE || path.join(__dirname, '..', '..', '.cache');
const ort = require(path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));

// float16 bits -> number (exact)
function halfToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

// A float32 ('<f4') or float16 ('<f2') .npy file as an ORT tensor of that type.
function readNpy(file) {
  const b = fs.readFileSync(file);
  const v = b[6];
  const hlen = v === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = (v === 1 ? 10 : 12) + hlen;
  const h = b.subarray(v === 1 ? 10 : 12, off).toString('latin1');
  const f16 = /'descr':\s*'<f2'/.test(h);
  if (!f16 && !/'descr':\s*'<f4'/.test(h)) throw new Error(file + ': not float32 or float16');
  const shape = /'shape':\s*\(([^)]*)\)/.exec(h)[1].split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  const ab = b.buffer.slice(b.byteOffset + off, b.byteOffset + b.length);
  return f16 ? new ort.Tensor('float16', new Uint16Array(ab), shape) : new ort.Tensor('float32', new Float32Array(ab), shape);
}

function toNumbers(t) {
  if (t.type === 'float32' || t.type === 'float64') return Array.from(t.data);
  if (t.type === 'float16') return t.data instanceof Uint16Array ? Array.from(t.data, halfToNumber) : Array.from(t.data);
  throw new Error('output type ' + t.type + ' (float32 or float16 expected)');
}

async function session(model) {
  return ort.InferenceSession.create(model, {graphOptimizationLevel: 'disabled', intraOpNumThreads: 1});
}

async function sqnr(ref, test, input, dir) {
  const a = await session(ref), b = await session(test);
  const files = fs.readdirSync(dir).filter((f) => /\.npy$/.test(f)).sort();
  let sig = 0, err = 0, worst = Infinity;
  for (const f of files) {
    const x = readNpy(path.join(dir, f));
    const ra = toNumbers((await a.run({[input]: x}))[a.outputNames[0]]);
    const rb = toNumbers((await b.run({[input]: x}))[b.outputNames[0]]);
    let s = 0, e = 0;
    for (let i = 0; i < ra.length; i++) {
      s += ra[i] * ra[i];
      e += (rb[i] - ra[i]) * (rb[i] - ra[i]);
    }
    sig += s;
    err += e;
    worst = Math.min(worst, 10 * Math.log10(s / Math.max(e, 1e-30)));
  }
  const total = 10 * Math.log10(sig / Math.max(err, 1e-30));
  console.log(`sqnr ${total.toFixed(3)} min ${worst.toFixed(3)} samples ${files.length}`);
}

function npy(ref, test) {
  const a = toNumbers(readNpy(ref)), b = toNumbers(readNpy(test));
  if (a.length !== b.length) throw new Error(`${test}: ${b.length} elements, ${ref} has ${a.length}`);
  let s = 0, e = 0;
  for (let i = 0; i < a.length; i++) {
    s += a[i] * a[i];
    e += (b[i] - a[i]) * (b[i] - a[i]);
  }
  console.log(`sqnr ${(10 * Math.log10(s / Math.max(e, 1e-30))).toFixed(3)}`);
  return Promise.resolve();
}

async function load(model) {
  for (const level of ['disabled', 'all']) {
    try {
      await ort.InferenceSession.create(model, {graphOptimizationLevel: level, intraOpNumThreads: 1, logSeverityLevel: 3});
    } catch (e) {
      console.log(`reject (level ${level}) ` + String(e.message || e).split('\n')[0]);
      return;
    }
  }
  console.log('ok');
}

const [cmd, ...args] = process.argv.slice(2);
const cmds = {sqnr, npy, load};
(cmds[cmd] ? cmds[cmd](...args) : Promise.reject(new Error('usage: see the header')))
  .catch((e) => { console.error('float16_ort: ' + (e.message || e)); process.exit(2); });
