// ort_profile.js - where ONNX Runtime spends a model's run: kernel time per op type and the
// slowest nodes, from the session's own profile (session option enableProfiling).
//
// usage: node ort_profile.js ORT_PACKAGE_DIR MODEL INPUT.npy [RUNS] [TOP] [OPT_MODEL]
//
// One session (graphOptimizationLevel 'all', 1 intra-op thread, sequential), one warm-up run,
// then RUNS runs (default 10) profiled; prints per op type of the optimized graph the mean time
// per run (ms), its share and the node count, then the TOP (default 15) slowest nodes with
// their op type and mean ms. OPT_MODEL: also writes ORT's optimized graph there
// (optimizedModelFilePath). The profile file ORT writes is removed.
'use strict';
const fs = require('fs');
const path = require('path');
const npy = require('../tests/integration/npy.js');

function die(msg) {
	console.error('ort_profile: ' + msg);
	process.exit(2);
}

async function main() {
	const [pkg, model, input, runsArg, topArg, optModel] = process.argv.slice(2);
	if (!pkg || !model || !input) die('usage: node ort_profile.js ORT_PACKAGE_DIR MODEL INPUT.npy [RUNS] [TOP] [OPT_MODEL]');
	const ort = require(path.resolve(pkg));
	const runs = Number(runsArg || 10), top = Number(topArg || 15);
	const x = npy.readNpy(input, die);
	const so = {
		graphOptimizationLevel: 'all', intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
		logSeverityLevel: 3, enableProfiling: true, profileFilePrefix: path.join(require('os').tmpdir(), 'oq_prof_' + process.pid),
	};
	if (optModel) so.optimizedModelFilePath = optModel;
	const s = await ort.InferenceSession.create(model, so);
	const feeds = { [s.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims) };
	await s.run(feeds);
	for (let i = 0; i < runs; i++) await s.run(feeds);
	// onnxruntime-node's endProfiling() returns nothing: the file is PREFIX_<date>.json
	await s.endProfiling();
	const dir = path.dirname(so.profileFilePrefix), base = path.basename(so.profileFilePrefix);
	const hits = fs.readdirSync(dir).filter((f) => f.startsWith(base) && f.endsWith('.json'));
	if (hits.length !== 1) die(`no single profile ${so.profileFilePrefix}*.json`);
	const file = path.join(dir, hits[0]);
	const ev = JSON.parse(fs.readFileSync(file, 'utf8'));
	fs.unlinkSync(file);
	const byOp = new Map(), byNode = new Map();
	let total = 0, seen = 0;
	for (const e of ev) {
		if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
		const op = e.args.op_name, node = e.name.slice(0, -'_kernel_time'.length);
		const o = byOp.get(op) || { us: 0, nodes: new Set() };
		o.us += e.dur;
		o.nodes.add(node);
		byOp.set(op, o);
		const n = byNode.get(node) || { op, us: 0 };
		n.us += e.dur;
		byNode.set(node, n);
		total += e.dur;
		seen++;
	}
	// the warm-up run is profiled too: divide by runs + 1
	const per = runs + 1;
	console.log(`total ${(total / per / 1000).toFixed(2)} ms per run (${seen / per} kernels)`);
	for (const [op, o] of [...byOp].sort((a, b) => b[1].us - a[1].us))
		console.log(`${op.padEnd(28)} ${(o.us / per / 1000).toFixed(3).padStart(9)} ms ${(100 * o.us / total).toFixed(1).padStart(5)}% ${o.nodes.size} nodes`);
	console.log('slowest nodes:');
	for (const [n, o] of [...byNode].sort((a, b) => b[1].us - a[1].us).slice(0, top))
		console.log(`  ${(o.us / per / 1000).toFixed(3).padStart(8)} ms ${o.op.padEnd(24)} ${n}`);
}

main().catch((e) => die(e.message || String(e)));
