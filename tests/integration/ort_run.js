#!/usr/bin/env node
// ort_run.js - runs two ONNX models in ONNX Runtime (onnxruntime-node) on
// the same inputs and checks that every output is bit-identical.
//
//   node ort_run.js MODEL_A MODEL_B [--inputs DIR] [--expect DIR]
//                   [--shape NAME=D0,D1,...]... [--seed N] [--quiet]
//
// Used to prove that `onnxq convert` (plain, external data, back) changes
// nothing ORT can observe: same input/output names and types, same numbers
// to the bit. Sessions run with graph optimizations disabled and one
// intra-op thread, so the two runs execute the same kernels in the same
// order.
//
// Inputs: with --inputs DIR, DIR/input_K.pb (serialized ONNX TensorProto,
// as in the ONNX backend node tests; decoded by the small protobuf reader
// below, matched to inputs by name, else by position). Otherwise inputs are
// generated from a seeded PRNG (mulberry32): floats uniform in [0, 1),
// integers in [0, 4), bools at random. Shapes come from the session's input
// metadata; symbolic dims become dim 0 -> 1, dims 2 and 3 of a rank-4
// (NCHW image) input -> 64, any other -> 8, unless --shape gives the shape.
//
// With --expect DIR, MODEL_B's outputs are also checked against
// DIR/output_K.pb (the ONNX reference results) with the ONNX backend-test
// tolerance |x - ref| <= 1e-7 + 1e-3 |ref| (exact for integers, strings and
// bools; NaN matches NaN). Outputs on which ORT misses the reference even
// for MODEL_A are only noted.
//
// ORT is found in $OQ_CACHE/ort/node_modules (default <repo>/.cache).
// Exit 0 when all outputs match, 1 on a mismatch, 2 on usage/load errors.
'use strict';
const fs = require('fs');
const path = require('path');

const repo = path.resolve(__dirname, '..', '..');
const cache = process.env.OQ_CACHE || path.join(repo, '.cache');
const ort = require(path.join(cache, 'ort', 'node_modules', 'onnxruntime-node'));

function usage(msg) {
  if (msg) console.error('ort_run: ' + msg);
  console.error('usage: node ort_run.js MODEL_A MODEL_B [--inputs DIR] [--expect DIR] [--shape NAME=D0,D1,...] [--seed N] [--quiet]');
  process.exit(2);
}

// ---- minimal protobuf reader for onnx.TensorProto ----------------------

// ONNX element type number -> [ORT type name, typed array constructor or null].
const DTYPES = {
  1: ['float32', Float32Array], 2: ['uint8', Uint8Array], 3: ['int8', Int8Array],
  4: ['uint16', Uint16Array], 5: ['int16', Int16Array], 6: ['int32', Int32Array],
  7: ['int64', BigInt64Array], 8: ['string', null], 9: ['bool', Uint8Array],
  10: ['float16', Uint16Array], 11: ['float64', Float64Array], 12: ['uint32', Uint32Array],
  13: ['uint64', BigUint64Array],
};

class Reader {
  constructor(buf) { this.b = buf; this.p = 0; }
  eof() { return this.p >= this.b.length; }
  varint() {
    let r = 0n, s = 0n;
    for (;;) {
      if (this.p >= this.b.length) throw new Error('truncated varint');
      const c = this.b[this.p++];
      r |= BigInt(c & 0x7f) << s;
      if (!(c & 0x80)) return r;
      s += 7n;
      if (s > 63n) throw new Error('varint too long');
    }
  }
  bytes() {
    const n = Number(this.varint());
    if (this.p + n > this.b.length) throw new Error('truncated field');
    const v = this.b.subarray(this.p, this.p + n);
    this.p += n;
    return v;
  }
  skip(wt) {
    if (wt === 0) this.varint();
    else if (wt === 1) this.p += 8;
    else if (wt === 5) this.p += 4;
    else if (wt === 2) this.bytes();
    else throw new Error('unsupported wire type ' + wt);
  }
}

function toSigned64(v) { return BigInt.asIntN(64, v); }

// Decodes a TensorProto into {name, type, dims, data} for ort.Tensor.
function decodeTensor(buf) {
  const r = new Reader(buf);
  const t = { name: '', dtype: 0, dims: [], raw: null, f32: [], i32: [], i64: [], f64: [], u64: [], strs: [] };
  // A repeated numeric field, packed (wire type 2) or not.
  const rep = (wt, out, readOne, width) => {
    if (wt !== 2) { out.push(readOne(r)); return; }
    const sub = new Reader(r.bytes());
    while (!sub.eof()) out.push(readOne(sub, width));
  };
  const f32 = (x) => { const v = x.b.readFloatLE(x.p); x.p += 4; return v; };
  const f64 = (x) => { const v = x.b.readDoubleLE(x.p); x.p += 8; return v; };
  while (!r.eof()) {
    const tag = Number(r.varint());
    const f = tag >>> 3, wt = tag & 7;
    if (f === 1) rep(wt, t.dims, (x) => Number(toSigned64(x.varint())));
    else if (f === 2 && wt === 0) t.dtype = Number(r.varint());
    else if (f === 4) rep(wt, t.f32, wt === 2 ? f32 : (x) => f32(x));
    else if (f === 5) rep(wt, t.i32, (x) => Number(BigInt.asIntN(32, x.varint())));
    else if (f === 6 && wt === 2) t.strs.push(Buffer.from(r.bytes()).toString('utf8'));
    else if (f === 7) rep(wt, t.i64, (x) => toSigned64(x.varint()));
    else if (f === 8 && wt === 2) t.name = Buffer.from(r.bytes()).toString('utf8');
    else if (f === 9 && wt === 2) t.raw = Buffer.from(r.bytes());
    else if (f === 10) rep(wt, t.f64, f64);
    else if (f === 11) rep(wt, t.u64, (x) => x.varint());
    else if (f === 14 && wt === 0) {
      if (Number(r.varint()) === 1) throw new Error('external data in an input .pb is not supported');
    } else r.skip(wt);
  }
  const info = DTYPES[t.dtype];
  if (!info) throw new Error('unsupported element type ' + t.dtype + ' in tensor ' + t.name);
  const [type, Ctor] = info;
  const n = t.dims.reduce((a, b) => a * b, 1);
  let data;
  if (type === 'string') {
    data = t.strs;
  } else if (t.raw) {
    const copy = new Uint8Array(t.raw); // aligned copy
    data = new Ctor(copy.buffer, 0, copy.byteLength / Ctor.BYTES_PER_ELEMENT);
  } else {
    data = new Ctor(n);
    // Typed storage per the ONNX spec: which field holds which type.
    let src;
    if (t.dtype === 1) src = t.f32;
    else if (t.dtype === 11) src = t.f64;
    else if (t.dtype === 7) src = t.i64;
    else if (t.dtype === 12 || t.dtype === 13) src = t.u64.map((v) => (t.dtype === 12 ? Number(v) : v));
    else src = t.i32; // int8/16/32, uint8/16, bool, float16 (bits)
    if (src.length !== n) throw new Error(`tensor ${t.name}: ${src.length} values for ${n} elements`);
    for (let i = 0; i < n; i++) data[i] = src[i];
  }
  if (data.length !== n) throw new Error(`tensor ${t.name}: ${data.length} values for ${n} elements`);
  return { name: t.name, type, dims: t.dims, data };
}

// ---- generated inputs ---------------------------------------------------

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function makeInput(meta, shapes, rnd) {
  if (!meta.isTensor) throw new Error(`input ${meta.name} is not a tensor; give --inputs`);
  let dims = shapes[meta.name];
  if (!dims) {
    const rank = meta.shape.length;
    dims = meta.shape.map((d, i) => {
      if (typeof d === 'number' && d >= 0) return d;
      if (i === 0) return 1;
      if (rank === 4 && i >= 2) return 64;
      return 8;
    });
  }
  const n = dims.reduce((a, b) => a * b, 1);
  const type = meta.type;
  let data;
  switch (type) {
    case 'float32': data = Float32Array.from({ length: n }, () => rnd()); break;
    case 'float64': data = Float64Array.from({ length: n }, () => rnd()); break;
    case 'int8': data = Int8Array.from({ length: n }, () => Math.floor(rnd() * 4)); break;
    case 'uint8': data = Uint8Array.from({ length: n }, () => Math.floor(rnd() * 4)); break;
    case 'int16': data = Int16Array.from({ length: n }, () => Math.floor(rnd() * 4)); break;
    case 'uint16': data = Uint16Array.from({ length: n }, () => Math.floor(rnd() * 4)); break;
    case 'int32': data = Int32Array.from({ length: n }, () => Math.floor(rnd() * 4)); break;
    case 'uint32': data = Uint32Array.from({ length: n }, () => Math.floor(rnd() * 4)); break;
    case 'int64': data = BigInt64Array.from({ length: n }, () => BigInt(Math.floor(rnd() * 4))); break;
    case 'uint64': data = BigUint64Array.from({ length: n }, () => BigInt(Math.floor(rnd() * 4))); break;
    case 'bool': data = Uint8Array.from({ length: n }, () => (rnd() < 0.5 ? 1 : 0)); break;
    case 'float16': data = Uint16Array.from({ length: n }, () => 0x3c00 /* 1.0 */); break;
    default: throw new Error(`input ${meta.name}: cannot generate type ${type}; give --inputs`);
  }
  return new ort.Tensor(type, data, dims);
}

// ---- comparison ---------------------------------------------------------

function bytesOf(t) {
  if (Array.isArray(t.data)) return Buffer.from(JSON.stringify(t.data));
  return Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

function sameOutput(name, a, b) {
  if (a.type !== b.type) return `output ${name}: type ${a.type} vs ${b.type}`;
  if (a.dims.join(',') !== b.dims.join(',')) return `output ${name}: shape [${a.dims}] vs [${b.dims}]`;
  const ba = bytesOf(a), bb = bytesOf(b);
  if (!ba.equals(bb)) {
    let i = 0;
    while (i < ba.length && ba[i] === bb[i]) i++;
    return `output ${name}: data differs first at byte ${i} of ${ba.length}`;
  }
  return null;
}

// ONNX backend test tolerance (onnx/backend/test/runner: rtol 1e-3, atol 1e-7).
function closeToRef(name, got, ref) {
  if (got.dims.join(',') !== ref.dims.join(',')) return `output ${name}: shape [${got.dims}] vs reference [${ref.dims}]`;
  const g = got.data, r = ref.data;
  if (g.length !== r.length) return `output ${name}: ${g.length} vs ${r.length} reference elements`;
  const approx = got.type === 'float32' || got.type === 'float64';
  for (let i = 0; i < g.length; i++) {
    if (approx) {
      const x = g[i], y = r[i];
      if (Number.isNaN(x) && Number.isNaN(y)) continue;
      if (x === y) continue;
      if (!(Math.abs(x - y) <= 1e-7 + 1e-3 * Math.abs(y))) return `output ${name}: element ${i} is ${x}, reference ${y}`;
    } else if (g[i] !== r[i]) {
      return `output ${name}: element ${i} is ${g[i]}, reference ${r[i]}`;
    }
  }
  return null;
}

function metaMap(s) {
  const m = {};
  const list = Array.isArray(s.inputMetadata) ? s.inputMetadata : [];
  for (const x of list) m[x.name] = x;
  return m;
}

async function main() {
  const args = process.argv.slice(2);
  const models = [];
  const shapes = {};
  let inputsDir = null, expectDir = null, seed = 1234, quiet = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--inputs') inputsDir = args[++i];
    else if (a === '--expect') expectDir = args[++i];
    else if (a === '--seed') seed = Number(args[++i]);
    else if (a === '--quiet') quiet = true;
    else if (a === '--shape') {
      const m = /^(.+)=([0-9,]+)$/.exec(args[++i] || '');
      if (!m) usage('--shape wants NAME=D0,D1,...');
      shapes[m[1]] = m[2].split(',').map(Number);
    } else if (a.startsWith('-')) usage('unknown option ' + a);
    else models.push(a);
  }
  if (models.length !== 2) usage('need exactly two models');

  // logSeverityLevel 4: ORT's own log lines would repeat the errors reported below.
  const opts = { graphOptimizationLevel: 'disabled', intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 };
  let sa, sb;
  try {
    sa = await ort.InferenceSession.create(models[0], opts);
  } catch (e) {
    console.error(`ort_run: ${models[0]}: ORT cannot load it: ${e.message}`);
    process.exit(2);
  }
  try {
    sb = await ort.InferenceSession.create(models[1], opts);
  } catch (e) {
    console.error(`ort_run: ${models[1]}: ORT cannot load it: ${e.message}`);
    process.exit(1); // the original loads, the copy does not: a real failure
  }
  const fail = (msg) => { console.error(`ort_run: ${path.basename(models[1])}: ${msg}`); process.exit(1); };
  if (sa.inputNames.join('\n') !== sb.inputNames.join('\n')) fail(`input names [${sa.inputNames}] vs [${sb.inputNames}]`);
  if (sa.outputNames.join('\n') !== sb.outputNames.join('\n')) fail(`output names [${sa.outputNames}] vs [${sb.outputNames}]`);

  const feeds = {};
  const metaA = metaMap(sa);
  for (const name of sa.inputNames) {
    if (metaA[name] && !metaA[name].isTensor) {
      console.error(`ort_run: ${models[0]}: input ${name} is not a tensor (sequence/optional/map); not supported here`);
      process.exit(2);
    }
  }
  if (inputsDir) {
    const files = fs.readdirSync(inputsDir).filter((f) => /^input_\d+\.pb$/.test(f))
      .sort((x, y) => Number(x.slice(6, -3)) - Number(y.slice(6, -3)));
    files.forEach((f, k) => {
      const t = decodeTensor(fs.readFileSync(path.join(inputsDir, f)));
      const name = sa.inputNames.includes(t.name) ? t.name : sa.inputNames[k];
      if (name === undefined) throw new Error(`${f}: more input files than model inputs`);
      feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
    });
  } else {
    const rnd = mulberry32(seed);
    for (const name of sa.inputNames) feeds[name] = makeInput(metaA[name] || { name, isTensor: true, type: 'float32', shape: [] }, shapes, rnd);
  }

  let ra;
  try {
    ra = await sa.run(feeds);
  } catch (e) {
    console.error(`ort_run: ${models[0]}: ORT cannot run it: ${e.message}`);
    process.exit(2);
  }
  let rb;
  try {
    rb = await sb.run(feeds);
  } catch (e) {
    fail(`ORT cannot run the copy: ${e.message}`);
  }
  if (expectDir) {
    const files = fs.readdirSync(expectDir).filter((f) => /^output_\d+\.pb$/.test(f))
      .sort((x, y) => Number(x.slice(7, -3)) - Number(y.slice(7, -3)));
    files.forEach((f, k) => {
      const t = decodeTensor(fs.readFileSync(path.join(expectDir, f)));
      const name = sb.outputNames.includes(t.name) ? t.name : sb.outputNames[k];
      if (name === undefined || !rb[name]) fail(`${f}: no matching output`);
      // ORT itself may miss a reference (e.g. float->string formatting): then
      // only the bitwise A/B comparison below counts.
      const msgA = closeToRef(name, ra[name], t);
      if (msgA) {
        if (!quiet) console.error(`ort_run: note: ORT misses the reference on the original: ${msgA}`);
        return;
      }
      const msg = closeToRef(name, rb[name], t);
      if (msg) fail(msg + ` (${f})`);
    });
  }
  let bytes = 0;
  for (const name of sa.outputNames) {
    const msg = sameOutput(name, ra[name], rb[name]);
    if (msg) fail(msg);
    bytes += bytesOf(ra[name]).length;
  }
  if (!quiet) {
    const shp = Object.entries(feeds).map(([k, v]) => `${k}[${v.dims}]`).join(' ');
    console.log(`ort_run: ${path.basename(models[1])}: ${sa.outputNames.length} outputs (${bytes} bytes) bit-identical; inputs ${shp}`);
  }
}

main().catch((e) => { console.error('ort_run: ' + (e && e.message ? e.message : e)); process.exit(2); });
