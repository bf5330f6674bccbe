#!/usr/bin/env bash
# compare_cli.sh - `onnxq compare` from the command line: exit codes (0, 6 for
# --min-sqnr, 1 usage, 2 mismatched models), the text line, the JSON shape,
# and the numbers checked against independent computations:
#  - two hand-encoded models (protobuf written by node here, not by onnxq):
#    y = x vs y = x + 0.125 on x = {1, 2, -3, 4}, whose SQNR is exactly
#    10 log10(30 / (4/64)) = 10 log10(480) dB;
#  - models/tiny_cnn.onnx against itself (inf, JSON 999), and against a copy
#    with every weight scaled by 1.02 (bytes patched by node): onnxq's numbers
#    versus ONNX Runtime's outputs of both models (below), --per-tensor shape;
#  - tiny_cnn against its int8 quantization (made by `onnxq quantize`; skipped
#    when that fails): onnxq's SQNR/cosine/max-abs per output versus the same
#    statistics computed in node from ONNX Runtime's outputs of both models,
#    within 0.2 dB (float rounding in the two runtimes differs slightly; when
#    both say > 80 dB the difference is rounding noise and only that is checked);
#    --per-tensor lists tensors with name/op/sqnr_db.
#   $1 or env ONNXQ   binary (default <repo>/build/onnxq)
#   env OQ_CACHE      third-party cache with ort/ (default <repo>/.cache; ORT
#                     checks are skipped without it)
# Prints `N passed, N failed, N skipped`; exits non-zero on any failure.
set -u
. "$(dirname "$0")/lib.sh"
onnxq=${1:-${ONNXQ:-$root/build/onnxq}}
cache=${OQ_CACHE:-$root/.cache}

[ -x "$onnxq" ] || die "no binary at $onnxq"
command -v node >/dev/null 2>&1 || die "node not found"
"$onnxq" compare --help >/dev/null 2>&1 || die "$onnxq has no compare command"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect CODE LABEL CMD... : runs CMD (stdout -> $tmp/out, stderr -> $tmp/err), checks the exit code.
expect() {
  local want=$1 label=$2 rc
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq "$want" ]; then ok; return 0; fi
  bad "$label: exit $rc, want $want; stderr: $(head -c 400 "$tmp/err")"
  return 1
}

# ---- helper (node): tiny ONNX models, .npy files, JSON checks, ORT statistics
cat >"$tmp/h.js" <<'EOF'
'use strict';
const fs = require('fs');
const path = require('path');
// protobuf wire format: varint / length-delimited fields
function varint(n) { const b = []; n = BigInt(n); do { let x = Number(n & 0x7fn); n >>= 7n; if (n) x |= 0x80; b.push(x); } while (n); return Buffer.from(b); }
function key(f, w) { return varint((f << 3) | w); }
function vi(f, n) { return Buffer.concat([key(f, 0), varint(n)]); }
function ld(f, b) { if (typeof b === 'string') b = Buffer.from(b); return Buffer.concat([key(f, 2), varint(b.length), b]); }
function vinfo(name, dims) { // ValueInfoProto float tensor
  const shape = Buffer.concat(dims.map((d) => ld(1, vi(1, d))));
  return Buffer.concat([ld(1, name), ld(2, ld(1, Buffer.concat([vi(1, 1), ld(2, shape)])))]);
}
function node(op, ins, outs, name) {
  return Buffer.concat([...ins.map((s) => ld(1, s)), ...outs.map((s) => ld(2, s)), ld(3, name), ld(4, op)]);
}
function scalar(name, v) { const r = Buffer.alloc(4); r.writeFloatLE(v); return Buffer.concat([vi(2, 1), ld(8, name), ld(9, r)]); }
function model(c) { // y = x (c == 0) or y = x + c, x float[1, 4]
  const g = [ld(1, c ? node('Add', ['x', 'c'], ['y'], 'add') : node('Identity', ['x'], ['y'], 'id')), ld(2, 'g')];
  if (c) g.push(ld(5, scalar('c', c)));
  g.push(ld(11, vinfo('x', [1, 4])), ld(12, vinfo('y', [1, 4])));
  return Buffer.concat([vi(1, 8), ld(8, Buffer.concat([ld(1, ''), vi(2, 13)])), ld(7, Buffer.concat(g))]);
}
function writeNpy(file, dims, data) {
  let h = `{'descr': '<f4', 'fortran_order': False, 'shape': (${dims.join(', ')}), }`;
  const total = Math.ceil((10 + h.length + 1) / 64) * 64;
  h = h + ' '.repeat(total - 10 - h.length - 1) + '\n';
  const pre = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, 0, 0]);
  pre.writeUInt16LE(h.length, 8);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(h, 'latin1'), Buffer.from(new Float32Array(data).buffer)]));
}
function readNpy(file) {
  const b = fs.readFileSync(file);
  const hl = b.readUInt16LE(8), h = b.subarray(10, 10 + hl).toString('latin1');
  if (!/'<f4'/.test(h)) throw new Error(file + ': not float32');
  const dims = /'shape':\s*\(([^)]*)\)/.exec(h)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const ab = b.buffer.slice(b.byteOffset + 10 + hl, b.byteOffset + b.length);
  return { dims, data: new Float32Array(ab) };
}
function fail(m) { console.error(m); process.exit(1); }
function near(a, b, tol, what) { if (!(Math.abs(a - b) <= tol)) fail(`${what}: ${a} vs ${b} (tol ${tol})`); }
const [cmd, ...a] = process.argv.slice(2);
(async () => {
  if (cmd === 'models') { // DIR: ref.onnx, test.onnx, data/000.npy
    fs.writeFileSync(path.join(a[0], 'ref.onnx'), model(0));
    fs.writeFileSync(path.join(a[0], 'test.onnx'), model(0.125));
    fs.mkdirSync(path.join(a[0], 'data'));
    writeNpy(path.join(a[0], 'data', '000.npy'), [1, 4], [1, 2, -3, 4]);
  } else if (cmd === 'known') { // JSON file: the hand-computed numbers
    const j = JSON.parse(fs.readFileSync(a[0], 'utf8'));
    if (j.samples !== 1 || j.outputs.length !== 1 || j.outputs[0].name !== 'y') fail('shape: ' + JSON.stringify(j));
    const o = j.outputs[0];
    near(o.sqnr_min_db, 10 * Math.log10(480), 1e-5, 'sqnr_min_db');
    near(o.sqnr_mean_db, 10 * Math.log10(480), 1e-5, 'sqnr_mean_db');
    near(o.cosine_mean, 30.5 / Math.sqrt(30 * 31.0625), 1e-8, 'cosine_mean');
    near(o.max_abs_err, 0.125, 0, 'max_abs_err');
  } else if (cmd === 'shape') { // JSON REF TEST SAMPLES IDENTICAL(0/1) PER_TENSOR(0/1)
    const j = JSON.parse(fs.readFileSync(a[0], 'utf8'));
    if (j.ref !== a[1] || j.test !== a[2]) fail('ref/test: ' + j.ref + ' ' + j.test);
    if (j.samples !== Number(a[3])) fail('samples ' + j.samples + ', want ' + a[3]);
    if (!Array.isArray(j.outputs) || !j.outputs.length || !Array.isArray(j.tensors)) fail('outputs/tensors');
    for (const o of j.outputs) {
      for (const k of ['sqnr_min_db', 'sqnr_mean_db', 'cosine_mean', 'max_abs_err']) {
        if (typeof o[k] !== 'number') fail(`${o.name}.${k} is ${o[k]}`);
      }
      if (typeof o.name !== 'string' || o.sqnr_min_db > o.sqnr_mean_db) fail('output ' + JSON.stringify(o));
      if (a[4] === '1' && (o.sqnr_min_db !== 999 || o.cosine_mean !== 1 || o.max_abs_err !== 0)) fail('not identical: ' + JSON.stringify(o));
    }
    if (a[5] === '1') {
      if (!j.tensors.length) fail('no tensors with --per-tensor');
      for (const t of j.tensors) if (typeof t.name !== 'string' || typeof t.op !== 'string' || typeof t.sqnr_db !== 'number') fail('tensor ' + JSON.stringify(t));
      for (let i = 1; i < j.tensors.length; i++) if (j.tensors[i].sqnr_db < j.tensors[i - 1].sqnr_db) fail('tensors not worst first');
    } else if (j.tensors.length) fail('tensors without --per-tensor');
  } else if (cmd === 'ort') { // JSON REF TEST DATA: onnxq's numbers vs ORT outputs of both models
    const ort = require(path.join(process.env.OQ_CACHE, 'ort', 'node_modules', 'onnxruntime-node'));
    const j = JSON.parse(fs.readFileSync(a[0], 'utf8'));
    const opt = { graphOptimizationLevel: 'disabled', intraOpNumThreads: 1, interOpNumThreads: 1 };
    const r = await ort.InferenceSession.create(a[1], opt), t = await ort.InferenceSession.create(a[2], opt);
    const files = fs.readdirSync(a[3]).filter((f) => f.endsWith('.npy')).sort();
    const st = {};
    for (const f of files) {
      const x = readNpy(path.join(a[3], f));
      const feed = { [r.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims) };
      const ro = await r.run(feed), to = await t.run(feed);
      for (const name of r.outputNames) {
        const p = ro[name].data, q = to[name].data;
        let r2 = 0, t2 = 0, d2 = 0, rt = 0, m = 0;
        for (let i = 0; i < p.length; i++) {
          const d = p[i] - q[i];
          r2 += p[i] * p[i]; t2 += q[i] * q[i]; d2 += d * d; rt += p[i] * q[i]; m = Math.max(m, Math.abs(d));
        }
        const s = st[name] || (st[name] = { min: Infinity, sum: 0, cos: 0, m: 0 });
        const db = 10 * Math.log10(r2 / d2);
        s.min = Math.min(s.min, db); s.sum += db; s.cos += rt / Math.sqrt(r2 * t2); s.m = Math.max(s.m, m);
      }
    }
    for (const o of j.outputs) {
      const s = st[o.name];
      if (!s) fail('ORT has no output ' + o.name);
      // above ~80 dB the difference is float rounding, which differs between the two runtimes
      const noise = (x, y) => x > 80 && y > 80;
      if (!noise(o.sqnr_min_db, s.min)) near(o.sqnr_min_db, s.min, 0.2, o.name + ' sqnr_min_db');
      if (!noise(o.sqnr_mean_db, s.sum / files.length)) near(o.sqnr_mean_db, s.sum / files.length, 0.2, o.name + ' sqnr_mean_db');
      near(o.cosine_mean, s.cos / files.length, 1e-3, o.name + ' cosine_mean');
      if (!noise(o.sqnr_min_db, s.min)) near(o.max_abs_err, s.m, 0.05 * s.m + 1e-6, o.name + ' max_abs_err');
      console.log(`${o.name}: onnxq ${o.sqnr_min_db.toFixed(3)}/${o.sqnr_mean_db.toFixed(3)} dB, ORT ${s.min.toFixed(3)}/${(s.sum / files.length).toFixed(3)} dB`);
    }
  } else if (cmd === 'perturb') { // IN OUT: every float raw_data initializer of the main graph * 1.02
    const b = fs.readFileSync(a[0]);
    const rv = (p) => { let n = 0, s = 1, x; do { x = b[p.i++]; n += (x & 0x7f) * s; s *= 128; } while (x & 0x80); return n; };
    const walk = (st, en, depth) => { // ModelProto.graph(7) -> GraphProto.initializer(5) -> TensorProto.raw_data(9)
      const p = { i: st };
      while (p.i < en) {
        const k = rv(p), f = Math.floor(k / 8), w = k & 7;
        if (w === 0) rv(p); else if (w === 5) p.i += 4; else if (w === 1) p.i += 8;
        else if (w === 2) {
          const l = rv(p), s = p.i;
          p.i += l;
          if (depth === 0 && f === 7) walk(s, s + l, 1);
          else if (depth === 1 && f === 5) walk(s, s + l, 2);
          else if (depth === 2 && f === 9) for (let j = s; j + 4 <= s + l; j += 4) b.writeFloatLE(b.readFloatLE(j) * 1.02, j);
        } else fail('unexpected wire type ' + w);
      }
    };
    walk(0, b.length, 0);
    fs.writeFileSync(a[1], b);
  } else fail('unknown command ' + cmd);
})().catch((e) => fail(String(e && e.stack || e)));
EOF
h() { node "$tmp/h.js" "$@"; }

# ---- 1. hand-encoded models with a known SQNR
mkdir "$tmp/k"
if h models "$tmp/k"; then
  k=$tmp/k
  if expect 0 "known: text" "$onnxq" compare "$k/ref.onnx" "$k/test.onnx" --data "$k/data"; then
    grep -qx "output 'y': SQNR min 26.8 dB mean 26.8 dB, cosine 0.999128, max abs err 0.125 (1 samples)" "$tmp/out" \
      && ok || bad "known: text is: $(cat "$tmp/out")"
  fi
  if expect 0 "known: json" "$onnxq" compare "$k/ref.onnx" "$k/test.onnx" --data "$k/data" --json; then
    h known "$tmp/out" && ok || bad "known: JSON numbers"
    if [ -d "$cache/ort/node_modules/onnxruntime-node" ]; then
      OQ_CACHE=$cache h ort "$tmp/out" "$k/ref.onnx" "$k/test.onnx" "$k/data" >/dev/null && ok || bad "known: numbers differ from ONNX Runtime's"
    else
      skip "known: ORT check ($cache/ort missing; tests/integration/fetch.sh)"
    fi
  fi
  # 10 log10(480) = 26.81 dB
  if expect 6 "known: --min-sqnr 30" "$onnxq" compare "$k/ref.onnx" "$k/test.onnx" --data "$k/data" --min-sqnr 30; then
    grep -q "compare: output 'y' SQNR 26.8 dB is below --min-sqnr 30" "$tmp/err" && ok || bad "known: message: $(cat "$tmp/err")"
    [ -s "$tmp/out" ] && ok || bad "known: no report with a failing --min-sqnr"
  fi
  expect 0 "known: --min-sqnr 26" "$onnxq" compare "$k/ref.onnx" "$k/test.onnx" --data "$k/data" --min-sqnr 26
  expect 0 "known: --threads 2" "$onnxq" compare "$k/ref.onnx" "$k/test.onnx" --data "$k/data" --threads 2
  # usage and mismatches
  expect 1 "usage: no --data" "$onnxq" compare "$k/ref.onnx" "$k/test.onnx"
  expect 1 "usage: one model" "$onnxq" compare "$k/ref.onnx" --data "$k/data"
  expect 2 "tiny_cnn vs y=x: different inputs" "$onnxq" compare "$root/models/tiny_cnn.onnx" "$k/ref.onnx" --data "$k/data"
else
  bad "could not write the hand-encoded models"
fi

# ---- 2. tiny_cnn against itself and against its int8 quantization
cnn=$root/models/tiny_cnn.onnx
data=$root/models/tiny_cnn_test
if [ -f "$cnn" ] && [ -d "$data" ]; then
  n=$(find "$data" -mindepth 1 -maxdepth 1 ! -name '.*' | wc -l)
  if expect 0 "cnn self: text" "$onnxq" compare "$cnn" "$cnn" --data "$data"; then
    grep -q "SQNR min inf dB mean inf dB, cosine 1.000000, max abs err 0 ($n samples)" "$tmp/out" \
      && ok || bad "cnn self: text is: $(cat "$tmp/out")"
  fi
  if expect 0 "cnn self: json" "$onnxq" compare "$cnn" "$cnn" --data "$data" --json; then
    h shape "$tmp/out" "$cnn" "$cnn" "$n" 1 0 && ok || bad "cnn self: JSON shape"
  fi
  # every weight scaled by 1.02 (tiny_cnn's initializers are all float32 raw_data)
  p=$tmp/p.onnx
  if h perturb "$cnn" "$p" && expect 0 "cnn x1.02: per-tensor json" "$onnxq" compare "$cnn" "$p" --data "$data" --json --per-tensor --top 5; then
    cp "$tmp/out" "$tmp/p.json"
    h shape "$tmp/p.json" "$cnn" "$p" "$n" 0 1 && ok || bad "cnn x1.02: JSON shape"
    if [ -d "$cache/ort/node_modules/onnxruntime-node" ]; then
      OQ_CACHE=$cache h ort "$tmp/p.json" "$cnn" "$p" "$data" >/dev/null && ok || bad "cnn x1.02: numbers differ from ONNX Runtime's"
    else
      skip "cnn x1.02: ORT check ($cache/ort missing; tests/integration/fetch.sh)"
    fi
  fi
  q=$tmp/q.onnx
  # --prefer accuracy: the default placement leaves the tiny CNN float
  if "$onnxq" quantize "$cnn" -o "$q" --calib "$root/models/tiny_cnn_calib" --prefer accuracy >/dev/null 2>"$tmp/qerr"; then
    if expect 0 "cnn int8: per-tensor json" "$onnxq" compare "$cnn" "$q" --data "$data" --json --per-tensor; then
      cp "$tmp/out" "$tmp/q.json"
      h shape "$tmp/q.json" "$cnn" "$q" "$n" 0 1 && ok || bad "cnn int8: JSON shape"
      if [ -d "$cache/ort/node_modules/onnxruntime-node" ]; then
        OQ_CACHE=$cache h ort "$tmp/q.json" "$cnn" "$q" "$data" && ok || bad "cnn int8: numbers differ from ONNX Runtime's"
      else
        skip "cnn int8: ORT check ($cache/ort missing; tests/integration/fetch.sh)"
      fi
    fi
    expect 6 "cnn int8: --min-sqnr 200" "$onnxq" compare "$cnn" "$q" --data "$data" --min-sqnr 200
    if expect 0 "cnn int8: text per-tensor" "$onnxq" compare "$cnn" "$q" --data "$data" --per-tensor --top 3; then
      [ "$(grep -c "^tensor '.*' (.*): SQNR " "$tmp/out")" -eq 3 ] && ok || bad "cnn int8: --top 3 lines: $(cat "$tmp/out")"
    fi
  else
    skip "int8 checks: onnxq quantize failed: $(head -c 300 "$tmp/qerr")" 4
  fi
else
  skip "tiny_cnn checks (models/tiny_cnn.onnx or tiny_cnn_test missing)" 9
fi

finish
