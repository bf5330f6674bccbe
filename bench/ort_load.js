// ort_load.js - ONNX Runtime reference for the convert benchmark: how long
// onnxruntime-node takes to create an InferenceSession on a model (read,
// parse, build the session), the same work class as `onnxq convert`'s load.
//
// usage: node ort_load.js ORT_PACKAGE_DIR MODEL [RUNS] [LEVEL]
// Prints one line: "best_s=<seconds> runs=<n> level=<level>". The module is
// required and one session is created and released before timing, so the
// figure excludes node start-up and the native library's first load.
'use strict';

async function main() {
	const [pkg, model, runsArg, levelArg] = process.argv.slice(2);
	if (!pkg || !model) {
		console.error('usage: node ort_load.js ORT_PACKAGE_DIR MODEL [RUNS] [LEVEL]');
		process.exit(1);
	}
	const runs = Number(runsArg || 5);
	const level = levelArg || 'disabled';
	const ort = require(pkg);
	const opts = { graphOptimizationLevel: level };
	let s = await ort.InferenceSession.create(model, opts); // warm-up
	await s.release();
	let best = Infinity;
	for (let i = 0; i < runs; i++) {
		const t0 = process.hrtime.bigint();
		s = await ort.InferenceSession.create(model, opts);
		const t = Number(process.hrtime.bigint() - t0) / 1e9;
		await s.release();
		if (t < best) best = t;
	}
	console.log(`best_s=${best.toFixed(6)} runs=${runs} level=${level}`);
}

main().catch((e) => {
	console.error(`ort_load: ${e.message || e}`);
	process.exit(1);
});
