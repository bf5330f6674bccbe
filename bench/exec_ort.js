// exec_ort.js - ONNX Runtime reference for the executor benchmark: median
// and minimum time of session.run on a model, for each thread count, with
// the optimisation level ORT really runs at ('all': Conv+BN folding,
// Conv+activation fusion), one warm-up run excluded.
//
// usage: node exec_ort.js ORT_PACKAGE_DIR MODEL INPUT=d0,d1,... [THREADS=1,2] [RUNS=10] [LEVEL=all]
// Float inputs get the same generator as exec_bench.c (uniform [0, 1), fixed
// seed). Prints "ort threads=T median_ms=X min_ms=Y cpu_ms=Z runs=N" per thread
// count (cpu_ms: median process CPU time per run; ORT's pool threads spin, so
// it is only comparable for 1 thread).
'use strict';

function inputData(n) {
	const a = new Float32Array(n);
	let rng = 12345n;
	const mask = (1n << 64n) - 1n;
	for (let i = 0; i < n; i++) {
		rng = (rng * 6364136223846793005n + 1442695040888963407n) & mask;
		a[i] = Number(rng >> 40n) / 16777216;
	}
	return a;
}

async function main() {
	const [pkg, model, inputArg, threadsArg, runsArg, levelArg] = process.argv.slice(2);
	if (!pkg || !model || !inputArg) {
		console.error('usage: node exec_ort.js ORT_PACKAGE_DIR MODEL INPUT=d0,d1,... [THREADS] [RUNS] [LEVEL]');
		process.exit(1);
	}
	const ort = require(pkg);
	const [name, dimStr] = inputArg.split('=');
	const dims = dimStr.split(',').map(Number);
	const data = inputData(dims.reduce((a, b) => a * b, 1));
	const runs = Number(runsArg || 10);
	const level = levelArg || 'all';
	for (const t of (threadsArg || '1,2').split(',').map(Number)) {
		const s = await ort.InferenceSession.create(model, {
			graphOptimizationLevel: level,
			intraOpNumThreads: t,
			interOpNumThreads: 1,
			executionMode: 'sequential',
		});
		const feeds = { [name]: new ort.Tensor('float32', data, dims) };
		await s.run(feeds); // warm-up
		const times = [], cpus = [];
		for (let i = 0; i < runs; i++) {
			const c0 = process.cpuUsage();
			const t0 = process.hrtime.bigint();
			await s.run(feeds);
			times.push(Number(process.hrtime.bigint() - t0) / 1e6);
			const c = process.cpuUsage(c0);
			cpus.push((c.user + c.system) / 1e3);
		}
		times.sort((a, b) => a - b);
		cpus.sort((a, b) => a - b);
		const mid = Math.floor(runs / 2);
		console.log(`ort threads=${t} median_ms=${times[mid].toFixed(3)} min_ms=${times[0].toFixed(3)} cpu_ms=${cpus[mid].toFixed(3)} runs=${runs}`);
		await s.release();
	}
}

main().catch((e) => {
	console.error(`exec_ort: ${e.message || e}`);
	process.exit(1);
});
