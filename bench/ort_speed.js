// ort_speed.js - session.run time of several models in onnxruntime-node, runs interleaved.
//
// usage: node ort_speed.js ORT_PACKAGE_DIR INPUT.npy THREADS RUNS ROUNDS MODEL...
//
// One session per model (graphOptimizationLevel 'all', THREADS intra-op threads, sequential),
// one warm-up run each, then ROUNDS rounds; a round runs the models one after the other RUNS
// times (float, int8, float, int8, ...), so a load change on a shared machine hits every model
// alike. Prints per model the median of its per-round medians and their range:
//   model=PATH median_ms=X min_round_ms=A max_round_ms=B cpu_ms=C
// and, for every model after the first, the speedup of the first over it per round:
//   speedup model=PATH median=X min=A max=B cpu=S
// cpu_ms is the median process CPU time per run (user + system): with one thread it is the
// time the run computed, less sensitive to other processes than the wall time; with more
// threads ORT's spinning pool threads inflate it. cpu= is the ratio of the cpu_ms medians.
// Env OQ_ORT_OPT_DIR=DIR: each session also writes ORT's optimized graph to DIR/<basename>
// (session option optimizedModelFilePath) to see which node units were fused.
'use strict';
const path = require('path');

function die(msg) {
	console.error('ort_speed: ' + msg);
	process.exit(2);
}

const npy = require('../tests/integration/npy.js');

function median(a) {
	const s = [...a].sort((x, y) => x - y);
	const m = s.length >> 1;
	return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main() {
	const [pkg, input, threadsArg, runsArg, roundsArg, ...models] = process.argv.slice(2);
	if (!pkg || !input || !models.length)
		die('usage: node ort_speed.js ORT_PACKAGE_DIR INPUT.npy THREADS RUNS ROUNDS MODEL...');
	const ort = require(path.resolve(pkg));
	const x = npy.readNpy(input, die);
	if (x.type !== 'float32') die(`${input}: ${x.descr}, want float32`);
	const threads = Number(threadsArg), runs = Number(runsArg), rounds = Number(roundsArg);
	const optDir = process.env.OQ_ORT_OPT_DIR;
	const sess = [];
	for (const m of models) {
		const so = {
			graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1,
			executionMode: 'sequential', logSeverityLevel: 3,
		};
		if (optDir) so.optimizedModelFilePath = path.join(optDir, path.basename(m));
		const s = await ort.InferenceSession.create(m, so);
		const feeds = { [s.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims) };
		await s.run(feeds); // warm-up
		sess.push({ s, feeds, med: [], cpu: [] });
	}
	for (let r = 0; r < rounds; r++) {
		const t = sess.map(() => []), c = sess.map(() => []);
		for (let i = 0; i < runs; i++)
			for (let k = 0; k < sess.length; k++) {
				const c0 = process.cpuUsage();
				const t0 = process.hrtime.bigint();
				await sess[k].s.run(sess[k].feeds);
				t[k].push(Number(process.hrtime.bigint() - t0) / 1e6);
				const u = process.cpuUsage(c0);
				c[k].push((u.user + u.system) / 1e3);
			}
		sess.forEach((e, k) => {
			e.med.push(median(t[k]));
			e.cpu.push(median(c[k]));
		});
	}
	sess.forEach((e, k) => {
		console.log(`model=${models[k]} median_ms=${median(e.med).toFixed(3)} ` +
			`min_round_ms=${Math.min(...e.med).toFixed(3)} max_round_ms=${Math.max(...e.med).toFixed(3)} ` +
			`cpu_ms=${median(e.cpu).toFixed(3)}`);
	});
	for (let k = 1; k < sess.length; k++) {
		const sp = sess[0].med.map((f, r) => f / sess[k].med[r]);
		const cs = sess[0].cpu.map((f, r) => f / sess[k].cpu[r]);
		console.log(`speedup model=${models[k]} median=${median(sp).toFixed(3)} ` +
			`min=${Math.min(...sp).toFixed(3)} max=${Math.max(...sp).toFixed(3)} cpu=${median(cs).toFixed(3)}`);
	}
	for (const e of sess) await e.s.release();
}

main().catch((e) => die(e.message || String(e)));
