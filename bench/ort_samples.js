// ort_samples.js - ONNX Runtime over a sample folder once: the reference a whole `onnxq quantize`
// is held against (bench/quantize_cost.sh).
//
// usage: node ort_samples.js ORT_PACKAGE_DIR MODEL DIR THREADS
// DIR holds one .npy per sample (single-input models), run in lexical order. One session
// (graphOptimizationLevel 'all', THREADS intra-op threads, sequential), one warm-up run on the
// first sample (not counted), then every sample once. The samples are read before the runs, so
// the time is session.run's alone. Prints
//   ort samples=N wall_s=X cpu_s=Y
// wall_s: the runs' wall time, cpu_s: the process CPU time over them (user + system; ORT's pool
// threads spin while they wait, so with more than one thread it counts more than the work).
'use strict';
const fs = require('fs');
const path = require('path');
const npy = require('../tests/integration/npy.js');

function die(msg) {
	console.error('ort_samples: ' + msg);
	process.exit(2);
}

async function main() {
	const [pkg, model, dir, threadsArg] = process.argv.slice(2);
	if (!pkg || !model || !dir || !threadsArg)
		die('usage: node ort_samples.js ORT_PACKAGE_DIR MODEL DIR THREADS');
	const ort = require(path.resolve(pkg));
	const s = await ort.InferenceSession.create(model, {
		graphOptimizationLevel: 'all', intraOpNumThreads: Number(threadsArg), interOpNumThreads: 1,
		executionMode: 'sequential', logSeverityLevel: 3,
	});
	const files = fs.readdirSync(dir).filter((f) => f.endsWith('.npy')).sort();
	if (!files.length) die(dir + ': no .npy sample');
	const feeds = files.map((f) => {
		const x = npy.readNpy(path.join(dir, f), die);
		return { [s.inputNames[0]]: new ort.Tensor(x.type, x.data, x.dims) };
	});
	await s.run(feeds[0]); // warm-up
	const c0 = process.cpuUsage();
	const t0 = process.hrtime.bigint();
	for (const f of feeds)
		await s.run(f);
	const wall = Number(process.hrtime.bigint() - t0) / 1e9;
	const c = process.cpuUsage(c0);
	console.log(`ort samples=${files.length} wall_s=${wall.toFixed(3)} cpu_s=${((c.user + c.system) / 1e6).toFixed(3)}`);
	await s.release();
}

main().catch((e) => die(e.message || String(e)));
