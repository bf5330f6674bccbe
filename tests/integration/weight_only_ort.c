/*
 * weight_only_ort.c - a weight-only int4 block-32 model, written by onnxq,
 * run by ONNX Runtime (onnxruntime-node from $OQ_CACHE/ort, fetch.sh,
 * through quant_patterns.js: graphOptimizationLevel 'basic', one thread).
 *
 * y = x W with x [3, 80] and W [80, 8] (blocks of 32 along K = 80: the last
 * one partial) is quantized by oq_quantize_weight_only and saved; ORT's y
 * must equal the executor's within 1e-5 of max|y|, and differ from the
 * float model's y by more than 1e-3 of max|y| (ORT really ran the 4-bit
 * weights). Run by criterion.sh; skipped when node or ORT is missing.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_model.h"
#include "passes/quantize/qweight.h"
#include "runmodel.h"
#include "src/io/npy.h"
#include "src/io/onnx_io.h"
#include "tmpdir.h"

enum { M = 3, K = 80, N = 8 };


/* The executor's output of m (float or weight-only int4) on x. */
static void run_y(oq_model *m, const oq_rt *x, oq_rt *y)
{
	oq_diag d;
	size_t n;
	oq_diag_init(&d);
	cr_assert_eq(runmodel_run(m, x, 1, y, 1, &n, &d), OQ_OK, "run: %s", d.msg);
	cr_assert_eq(y->nelem, (size_t)M * N);
}

Test(weight_only, onnxruntime_runs_int4_block32)
{
	const char *src = getenv("OQ_SOURCE_DIR"), *cache = getenv("OQ_CACHE");
	char ort[1024], js[1024], cmd[4096], model[1024], xin[1024], yout[1024];
	uint64_t state = RUNMODEL_SEED;
	static double w[K * N];
	gen_model *g;
	oq_model *m = NULL, *mf = NULL;
	oq_opts o;
	oq_diag d;
	oq_rt x = {0}, y = {0}, yf = {0};
	oq_npy yo = {0};
	int changed = 0;
	double md = 0, mx = 0, df = 0;

	src = src ? src : ".";
	if (cache)
		snprintf(ort, sizeof ort, "%s/ort/node_modules/onnxruntime-node", cache);
	else
		snprintf(ort, sizeof ort, "%s/.cache/ort/node_modules/onnxruntime-node", src);
	if (access(ort, R_OK) != 0 || system("node --version > /dev/null 2>&1") != 0)
		cr_skip_test("node or onnxruntime-node (%s) not available", ort);
	cr_assert_not_null(tmpdir_make("oq_weight_only_ort"));
	snprintf(model, sizeof model, "%s", tmpdir_at("m.onnx"));
	snprintf(xin, sizeof xin, "%s", tmpdir_at("x.npy"));
	snprintf(yout, sizeof yout, "%s", tmpdir_at("ort/y.npy"));
	snprintf(js, sizeof js, "%s/tests/integration/quant_patterns.js", src);

	for (size_t i = 0; i < K * N; i++)
		w[i] = runmodel_urand(&state);
	g = gen_matmul(M, K, N, w);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 2, (const int64_t[]){M, K}), OQ_OK);
	for (size_t i = 0; i < x.nelem; i++)
		oq_rt_set(&x, i, runmodel_urand(&state));
	oq_diag_init(&d);
	cr_assert_eq(oq_npy_write(xin, OQ_DT_FLOAT, 2, x.dims, x.data, x.nbytes, &d), OQ_OK, "%s", d.msg);

	oq_opts_init(&o);
	o.weight_only = 1;
	o.weight_type = OQ_DT_INT4;
	o.granularity = OQ_GRAN_BLOCK;
	o.block_size = 32;
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_model_save(m, model, NULL, NULL, &d), OQ_OK, "%s", d.msg);
	run_y(m, &x, &y);

	snprintf(cmd, sizeof cmd, "node '%s' '%s' '%s' 'x=%s'", js, model, tmpdir_at("ort"), xin);
	cr_assert_eq(system(cmd), 0, "%s failed", cmd);
	cr_assert_eq(oq_npy_read(yout, 0, &yo, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(yo.nelem, y.nelem, "ORT output size");
	for (size_t i = 0; i < y.nelem; i++) {
		double r = oq_rt_get(&y, i);
		md = fmax(md, fabs(r - ((const float *)yo.data)[i]));
		mx = fmax(mx, fabs(r));
	}
	cr_expect(md <= 1e-5 * mx, "ORT vs executor: max diff %g (max |y| %g)", md, mx);
	oq_model_free(m); /* it borrows g's buffer, which the next gen_load replaces */

	/* and ORT really ran the 4-bit weights: its output is not the float model's */
	cr_assert_eq(gen_load(g, &mf, &d), OQ_OK, "%s", d.msg);
	run_y(mf, &x, &yf);
	for (size_t i = 0; i < yf.nelem; i++)
		df = fmax(df, fabs(oq_rt_get(&yf, i) - ((const float *)yo.data)[i]));
	cr_expect(df > 1e-3 * mx, "ORT output equals the float output (diff %g)", df);
	cr_log_info("ORT vs executor on int4 block-32 MatMul: max diff %g, max |y| %g", md, mx);

	oq_npy_free(&yo);
	oq_rt_release(&x);
	oq_rt_release(&y);
	oq_rt_release(&yf);
	oq_model_free(mf);
	gen_free(g);
	tmpdir_remove();
}
