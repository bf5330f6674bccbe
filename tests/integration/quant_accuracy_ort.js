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

function die(msg) {
  console.error('quant_accuracy_ort: ' + msg);
  process.exit(2);
}

const npy = require('./npy.js');
const { ORT_DESCR, writeNpy } = npy;
const readNpy = (file) => npy.readNpy(file, die);

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
