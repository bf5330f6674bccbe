#!/usr/bin/env node
// run_ort.js - the ONNX Runtime side of run_ort.sh, plus the .npy plumbing.
//
//   node run_ort.js image RGB W H MODE OUT.npy     raw 8-bit RGB (ImageMagick `rgb:`) -> float32
//                                                 [1, 3, H, W] in BGR channel order, as PaddleOCR
//                                                 feeds cv2 images; MODE det: (x/255 - mean) / std
//                                                 with mean 0.485,0.456,0.406, std 0.229,0.224,0.225;
//                                                 MODE rec: (x/255 - 0.5) / 0.5
//   node run_ort.js random D0,D1,... SEED OUT.npy  float32 uniform in [0, 1) (mulberry32, seeded)
//   node run_ort.js noise W H MODE SEED OUT.npy    like `image` on uniform random pixels (mulberry32)
//   node run_ort.js run MODEL OUTDIR NAME=FILE...  runs MODEL in onnxruntime-node on .npy inputs,
//                                                 writes OUTDIR/<output name>.npy ('/' -> '_')
//   node run_ort.js compare GOT REF TOL            compares every REF/*.npy with GOT/*.npy: same
//                                                 dtype and shape, and max relative error
//                                                   max|got - ref| / max(max|ref|, 1e-6)
//                                                 at most TOL (NaN must meet NaN); prints one
//                                                 line per output; exit 1 on any mismatch.
//
// Sessions use graphOptimizationLevel 'disabled' (ORT runs the graph as
// written, no fusions) and one intra-op thread. ORT is found in
// $OQ_CACHE/ort/node_modules (default <repo>/.cache), filled by fetch.sh.
'use strict';
const fs = require('fs');
const path = require('path');

function die(msg) {
  console.error('run_ort: ' + msg);
  process.exit(2);
}

const npy = require('./npy.js');
const { ORT_DESCR, writeNpy } = npy;
const readNpy = (file) => npy.readNpy(file, die);

function mulberry32(a) {
  return function () {
    a |= 0; a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function cmdImage(rgb, w, h, mode, out, pixels) {
  const px = pixels || fs.readFileSync(rgb);
  w = Number(w); h = Number(h);
  if (px.length !== w * h * 3) die(`${rgb}: ${px.length} bytes, want ${w * h * 3}`);
  const mean = mode === 'det' ? [0.485, 0.456, 0.406] : [0.5, 0.5, 0.5];
  const std = mode === 'det' ? [0.229, 0.224, 0.225] : [0.5, 0.5, 0.5];
  const x = new Float32Array(3 * h * w);
  for (let c = 0; c < 3; c++) {
    const src = 2 - c; // BGR
    for (let i = 0; i < h * w; i++) x[c * h * w + i] = (px[i * 3 + src] / 255 - mean[c]) / std[c];
  }
  writeNpy(out, '<f4', [1, 3, h, w], x);
}

function cmdNoise(w, h, mode, seed, out) {
  const r = mulberry32(Number(seed));
  const px = Buffer.alloc(Number(w) * Number(h) * 3);
  for (let i = 0; i < px.length; i++) px[i] = Math.floor(r() * 256);
  cmdImage(null, w, h, mode, out, px);
}

function cmdRandom(shape, seed, out) {
  const dims = shape.split(',').map(Number);
  const n = dims.reduce((a, x) => a * x, 1);
  const r = mulberry32(Number(seed));
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = r();
  writeNpy(out, '<f4', dims, x);
}

async function cmdRun(model, outdir, specs) {
  const repo = path.resolve(__dirname, '..', '..');
  const cache = process.env.OQ_CACHE || path.join(repo, '.cache');
  const ort = require(path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));
  const sess = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'disabled', intraOpNumThreads: 1, interOpNumThreads: 1,
  });
  const feeds = {};
  for (const s of specs) {
    const eq = s.indexOf('=');
    if (eq < 0) die('expected NAME=FILE, got ' + s);
    const a = readNpy(s.slice(eq + 1));
    feeds[s.slice(0, eq)] = new ort.Tensor(a.type, a.data, a.dims);
  }
  const res = await sess.run(feeds);
  fs.mkdirSync(outdir, { recursive: true });
  for (const name of sess.outputNames) {
    const t = res[name];
    const d = ORT_DESCR[t.type];
    if (!d) die(`output ${name}: type ${t.type} has no .npy form`);
    writeNpy(path.join(outdir, name.replace(/\//g, '_') + '.npy'), d, t.dims, t.data);
  }
}

function cmdCompare(got, ref, tol) {
  tol = Number(tol);
  let bad = 0;
  const files = fs.readdirSync(ref).filter((f) => f.endsWith('.npy')).sort();
  if (!files.length) die(ref + ': no outputs');
  for (const f of files) {
    const b = readNpy(path.join(ref, f));
    if (!fs.existsSync(path.join(got, f))) { console.log(`  ${f}: missing from ${got}`); bad++; continue; }
    const a = readNpy(path.join(got, f));
    if (a.descr !== b.descr || a.dims.join(',') !== b.dims.join(',')) {
      console.log(`  ${f}: got ${a.descr}[${a.dims}], ORT ${b.descr}[${b.dims}]`);
      bad++;
      continue;
    }
    let maxDiff = 0, maxRef = 0, nanBad = 0;
    for (let i = 0; i < b.data.length; i++) {
      const x = Number(a.data[i]), y = Number(b.data[i]);
      if (Number.isNaN(x) || Number.isNaN(y)) { nanBad += Number.isNaN(x) !== Number.isNaN(y); continue; }
      maxDiff = Math.max(maxDiff, Math.abs(x - y));
      maxRef = Math.max(maxRef, Math.abs(y));
    }
    const rel = maxDiff / Math.max(maxRef, 1e-6);
    const ok = rel <= tol && !nanBad;
    console.log(`  ${f}: [${b.dims}] max|diff| ${maxDiff.toExponential(3)} max|ORT| ${maxRef.toExponential(3)} ` +
      `rel ${rel.toExponential(3)}${nanBad ? ` NaN mismatches ${nanBad}` : ''} ${ok ? 'ok' : `> ${tol}`}`);
    if (!ok) bad++;
  }
  process.exit(bad ? 1 : 0);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'image' && args.length === 5) cmdImage(...args);
else if (cmd === 'random' && args.length === 3) cmdRandom(...args);
else if (cmd === 'noise' && args.length === 5) cmdNoise(...args);
else if (cmd === 'run' && args.length >= 3) cmdRun(args[0], args[1], args.slice(2)).catch((e) => die(String(e.message || e)));
else if (cmd === 'compare' && args.length === 3) cmdCompare(...args);
else die('usage: run_ort.js image RGB W H MODE OUT | random SHAPE SEED OUT | noise W H MODE SEED OUT |\n' +
  '       run MODEL OUTDIR NAME=FILE... | compare GOT REF TOL');
