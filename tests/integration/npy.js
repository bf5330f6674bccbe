// npy.js - NumPy .npy files for the Node scripts of the tests and benches (format versions 1 and
// 2, C order, little endian), in ONNX Runtime's tensor types.
//
//   const npy = require('./npy.js');
//   npy.readNpy(FILE, fail) -> { descr, type, dims, data }: type the ORT tensor type, data a
//     typed array on an aligned copy; fail(message) (which must not return) on a file that is not
//     an .npy, has another layout or dtype, or whose size does not match its shape.
//   npy.writeNpy(FILE, DESCR, DIMS, DATA): a version 1 file, header padded to 64 bytes.
//   npy.ORT_DESCR[ORT type] -> descr.
'use strict';
const fs = require('fs');

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);
// npy descr -> [ORT tensor type, TypedArray, bytes per element]
const DESCR = {
  '<f4': ['float32', Float32Array, 4], '<f8': ['float64', Float64Array, 8], '<f2': ['float16', Uint16Array, 2],
  '<i8': ['int64', BigInt64Array, 8], '<i4': ['int32', Int32Array, 4], '<i2': ['int16', Int16Array, 2],
  '|i1': ['int8', Int8Array, 1], '|u1': ['uint8', Uint8Array, 1], '<u2': ['uint16', Uint16Array, 2],
  '<u4': ['uint32', Uint32Array, 4], '<u8': ['uint64', BigUint64Array, 8], '|b1': ['bool', Uint8Array, 1],
};
const ORT_DESCR = Object.fromEntries(Object.entries(DESCR).map(([d, t]) => [t[0], d]));

function readNpy(file, fail) {
  const b = fs.readFileSync(file);
  if (b.length < 10 || !b.subarray(0, 6).equals(MAGIC)) fail(file + ': not a .npy file');
  const v = b[6];
  const hlen = v === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = (v === 1 ? 10 : 12) + hlen;
  const h = b.subarray(v === 1 ? 10 : 12, off).toString('latin1');
  const descr = /'descr':\s*'([^']*)'/.exec(h);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(h);
  if (!descr || !shape || /'fortran_order':\s*True/.test(h)) fail(file + ': unsupported header ' + h.trim());
  const t = DESCR[descr[1]];
  if (!t) fail(file + ': unsupported dtype ' + descr[1]);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, x) => a * x, 1);
  if (b.length !== off + n * t[2]) fail(file + ': size does not match the shape');
  const ab = b.buffer.slice(b.byteOffset + off, b.byteOffset + off + n * t[2]); // aligned copy
  return { descr: descr[1], type: t[0], dims, data: new t[1](ab) };
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

module.exports = { ORT_DESCR, readNpy, writeNpy };
