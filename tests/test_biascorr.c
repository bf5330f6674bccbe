/*
 * test_biascorr.c - bias correction (calib/biascorr/): analytic mode's input
 * sums (sums.c) and bias update (analytic.c), empirical mode's measurement
 * (measure.c), keep rule (tables.c) and rounds through the pipeline
 * (empirical.c).
 *
 * Hand cases: weights chosen so that the per-channel int8 scale is 2^-7
 * (absmax 127 * 2^-7) and the small weights land on known rounding cases:
 *   0.01171875 = 1.5 * 2^-7   -> q = 2 (ties to even), error +2^-8
 *   0.0048828125 = 0.625 * 2^-7 -> q = 1, error +0.375 * 2^-7 = 0.0029296875
 * With the big weights exact on the grid, the shift of a channel is its
 * small weight's error times the mean of the input it multiplies, exact in
 * binary, so biases are compared with ==.
 *
 * Border case: a strided, asymmetrically padded 3x3 Conv (and ConvTranspose) on samples of two
 * different sizes; the executor judges: with the corrected bias and the
 * dequantized weights (from oq_weight_quantize, dequantized here), every
 * output channel's mean over all output positions of all samples equals
 * the float model's, while without the correction it does not.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/biascorr/analytic.h"
#include "calib/biascorr/sums.h"
#include "calib/exec/exec.h"
#include "gen_model.h"
#include "passes/quantize/qweight.h"

static oq_model *load(gen_model *g)
{
	oq_model *m = NULL;
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	return m;
}

static oq_node *node_named(oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (!g->nodes[i]->dead && strcmp(g->nodes[i]->name, name) == 0)
			return g->nodes[i];
	cr_assert_fail("no node %s", name);
	return NULL;
}

static void rt_from(oq_rt *t, int rank, const int64_t *dims, const float *v)
{
	memset(t, 0, sizeof *t);
	cr_assert_eq(oq_rt_alloc(t, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(t->data, v, t->nelem * sizeof *v);
}

/* Plans with default options, observes the samples as calibration would, corrects. */
static void correct(oq_model *m, const oq_rt *xs, size_t n, size_t want_layers)
{
	oq_opts o;
	oq_bc_sums s;
	oq_bc_collector *c = NULL;
	oq_diag d;

	oq_diag_init(&d);
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY;
	cr_assert_eq(oq_bc_analytic_plan(m->graph, &o, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s.n, want_layers);
	cr_assert_eq(oq_bc_collector_new(m->graph, &s, &c, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(oq_bc_observe(c, m->graph->inputs[0], &xs[i]), 0);
	for (size_t i = 0; i < s.n; i++)
		cr_assert(!s.v[i].failed, "layer %zu failed", i);
	cr_assert_eq(oq_bc_analytic_fold(m->graph, &o, &s, NULL, &d), OQ_OK, "%s", d.msg);
	oq_bc_collector_free(c);
	oq_bc_sums_free(&s);
}

static const oq_tensor *input_init(oq_node *n, size_t idx)
{
	cr_assert(idx < n->n_inputs && n->inputs[idx] && n->inputs[idx]->init, "node %s has no constant input %zu",
		  n->name, idx);
	return n->inputs[idx]->init;
}

/* x [1, 2, 2, 2]: channel 0 all 1, channel 1 all 4. */
static const float x_chan[] = {1, 1, 1, 1, 4, 4, 4, 4};
/* rows with column means 1 and 4 */
static const float x_rows[] = {1, 4, 0, 5, 2, 3};

static void conv1x1(int with_bias, const float *want)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	oq_model *m;
	oq_rt x;
	const oq_tensor *b;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 2, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1),
		 GEN_VALS(0.9921875, 0.01171875, -0.9921875, 0.0048828125));
	if (with_bias)
		gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.5, -0.25));
	gen_node(g, mg, "Conv", "conv", with_bias ? "x,W,B" : "x,W", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 2, 2));
	m = load(g);
	rt_from(&x, GEN_SHAPE(1, 2, 2, 2), x_chan);
	correct(m, &x, 1, 1);
	b = input_init(node_named(m->graph, "conv"), 2);
	cr_assert_eq(b->rank, 1);
	cr_assert_eq(b->dims[0], 2);
	cr_expect_eq(oq_tensor_get(b, 0), want[0], "bias[0] %.10g, want %.10g", oq_tensor_get(b, 0), want[0]);
	cr_expect_eq(oq_tensor_get(b, 1), want[1], "bias[1] %.10g, want %.10g", oq_tensor_get(b, 1), want[1]);
	oq_rt_release(&x);
	oq_model_free(m);
	gen_free(g);
}

/* shift = (2^-8 * 4, 0.0029296875 * 4) = (0.015625, 0.01171875) */
Test(biascorr, conv_1x1_hand)
{
	conv1x1(1, (const float[]){0.484375f, -0.26171875f});
}

Test(biascorr, conv_without_bias_gets_one)
{
	conv1x1(0, (const float[]){-0.015625f, -0.01171875f});
}

/* Gemm transB, alpha 2, beta 0.5, no C: C = -alpha * shift / beta. */
Test(biascorr, gemm_creates_c)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	oq_model *m;
	oq_rt x;
	const oq_tensor *c;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "a", OQ_DT_FLOAT, GEN_SHAPE(3, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2),
		 GEN_VALS(0.9921875, 0.01171875, -0.9921875, 0.0048828125));
	n = gen_node(g, mg, "Gemm", "gemm", "a,W", "y");
	gen_attr_int(g, n, "transB", 1);
	gen_attr_float(g, n, "alpha", 2);
	gen_attr_float(g, n, "beta", 0.5);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(3, 2));
	m = load(g);
	rt_from(&x, GEN_SHAPE(3, 2), x_rows);
	correct(m, &x, 1, 1);
	c = input_init(node_named(m->graph, "gemm"), 2);
	cr_assert_eq(c->nelem, 2);
	cr_expect_eq(oq_tensor_get(c, 0), -0.0625);
	cr_expect_eq(oq_tensor_get(c, 1), -0.046875);
	oq_rt_release(&x);
	oq_model_free(m);
	gen_free(g);
}

/* MatMul [.., K] x [K, N] -> Add(bias [1, N], .): the Add's constant is corrected, its shape kept. */
Test(biascorr, matmul_bias_add)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	oq_model *m;
	oq_rt x;
	const oq_tensor *b;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2),
		 GEN_VALS(0.9921875, -0.9921875, 0.01171875, 0.0048828125));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1, 2), GEN_VALS(0.5, -0.25));
	gen_node(g, mg, "MatMul", "mm", "x,W", "t");
	gen_node(g, mg, "Add", "add", "B,t", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 2));
	m = load(g);
	rt_from(&x, GEN_SHAPE(1, 3, 2), x_rows);
	correct(m, &x, 1, 1);
	b = input_init(node_named(m->graph, "add"), 0);
	cr_assert_eq(b->rank, 2);
	cr_assert_eq(b->dims[1], 2);
	cr_expect_eq(oq_tensor_get(b, 0), 0.484375);
	cr_expect_eq(oq_tensor_get(b, 1), -0.26171875);
	oq_rt_release(&x);
	oq_model_free(m);
	gen_free(g);
}

/* ------------------------------------------------------------ border handling, judged by the executor */

#define CI 2
#define CO 3
#define KS 9

static float urand(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return (float)(*s >> 8) / 16777216.0f;
}

static int transpose; /* the border tests run Conv, then ConvTranspose */

static gen_model *conv_model(const double *w, const double *b)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, -1, NULL); /* any spatial size */
	if (transpose)
		gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(CI, CO, 3, 3), w);
	else
		gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(CO, CI, 3, 3), w);
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(CO), b);
	n = gen_node(g, mg, transpose ? "ConvTranspose" : "Conv", "conv", "x,W,B", "y");
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){2, 1});
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 0, 1, 2});
	gen_output(g, mg, "y", OQ_DT_FLOAT, -1, NULL);
	return g;
}

/* Per output channel mean over every output position of every sample. */
static void out_means(const double *w, const double *b, const oq_rt *xs, size_t n, double *mean)
{
	gen_model *g = conv_model(w, b);
	oq_model *m = load(g);
	oq_exec *e = NULL;
	oq_exec_opts eo = {.threads = 1};
	oq_diag d;
	double cnt = 0;

	oq_diag_init(&d);
	memset(mean, 0, CO * sizeof *mean);
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < n; i++) {
		oq_rt y;
		size_t plane;
		cr_assert_eq(oq_exec_run(e, &xs[i], 1, &y, 1, &d), OQ_OK, "%s", d.msg);
		plane = y.nelem / CO;
		for (size_t j = 0; j < y.nelem; j++)
			mean[j / plane] += oq_rt_get(&y, j);
		cnt += (double)plane;
		oq_rt_release(&y);
	}
	for (int c = 0; c < CO; c++)
		mean[c] /= cnt;
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
}

static void border_case(void)
{
	double w[CO * CI * KS], wq[CO * CI * KS], b[CO] = {0.1, -0.2, 0.3}, bc[CO];
	double mf[CO], mq[CO], mraw[CO];
	const int64_t sizes[2][2] = {{5, 5}, {4, 7}};
	oq_rt xs[2];
	uint32_t seed = 7;
	gen_model *g;
	oq_model *m;
	oq_tensor *q = NULL, *sc = NULL, *zp = NULL;
	oq_wspec sp;
	oq_diag d;
	const oq_tensor *bt;
	double worst = 0, moved = 0;

	oq_diag_init(&d);
	for (int i = 0; i < CO * CI * KS; i++)
		w[i] = urand(&seed) * 2 - 1;
	for (int s = 0; s < 2; s++) {
		int64_t dims[4] = {1, CI, sizes[s][0], sizes[s][1]};
		memset(&xs[s], 0, sizeof xs[s]);
		cr_assert_eq(oq_rt_alloc(&xs[s], OQ_DT_FLOAT, 4, dims), OQ_OK);
		for (size_t i = 0; i < xs[s].nelem; i++) /* positive, with a mean far from 0 */
			((float *)xs[s].data)[i] = urand(&seed) * 2 + (float)(i % 3);
	}
	g = conv_model(w, b);
	m = load(g);
	/* the quantized weight of the quantize pass (per channel int8, symmetric narrow), dequantized here */
	memset(&sp, 0, sizeof sp);
	sp.dtype = OQ_DT_INT8;
	sp.axis = transpose ? 1 : 0;
	sp.symmetric = 1;
	cr_assert_eq(oq_weight_quantize(node_named(m->graph, "conv")->inputs[1]->init, &sp, &q, &sc, &zp, &d), OQ_OK,
		     "%s", d.msg);
	for (int i = 0; i < CO * CI * KS; i++) {
		size_t ch = transpose ? (size_t)(i / KS % CO) : (size_t)(i / (CI * KS));
		wq[i] = (double)((float)oq_tensor_get(q, (size_t)i) * (float)oq_tensor_get(sc, ch));
	}
	correct(m, xs, 2, 1);
	bt = input_init(node_named(m->graph, "conv"), 2);
	for (int c = 0; c < CO; c++)
		bc[c] = oq_tensor_get(bt, (size_t)c);
	out_means(w, b, xs, 2, mf);
	out_means(wq, bc, xs, 2, mq);
	out_means(wq, b, xs, 2, mraw);
	for (int c = 0; c < CO; c++) {
		worst = fmax(worst, fabs(mq[c] - mf[c]));
		moved = fmax(moved, fabs(mraw[c] - mf[c]));
	}
	cr_expect_lt(worst, 2e-6, "corrected means differ from float by %g", worst);
	cr_expect_gt(moved, 1e-4, "weight quantization moved the means by only %g: the test cannot fail", moved);
	oq_tensor_free(q);
	oq_tensor_free(sc);
	oq_tensor_free(zp);
	oq_rt_release(&xs[0]);
	oq_rt_release(&xs[1]);
	oq_model_free(m);
	gen_free(g);
}

Test(biascorr, strided_padded_conv_varying_sizes)
{
	transpose = 0;
	border_case();
}

Test(biascorr, strided_padded_convtranspose_varying_sizes)
{
	transpose = 1;
	border_case();
}

/*
 * Empirical mode (calib/biascorr/measure.c, empirical.c): a 1x1 Conv y = 2x + 0.5 on x [1, 1, 1, 4],
 * and its "quantized" model with x behind a uint8 Q/DQ of scale 0.25, zero
 * point 0 (ties to even). Samples and what the quantized model sees:
 *   x1 = {0.125, 0.375, 1, 0.625} -> {0, 0.5, 1, 0.5}    (0.5->0, 1.5->2, 2.5->2)
 *   x2 = {0.625, 0, 0, 0}         -> {0.5, 0, 0, 0}
 * Sample 0 (x1) is fold 0, sample 1 (x2) fold 1. Output sums: float 6.25
 * and 3.25, quantized 6 and 3, over 4 positions each: shift -0.0625 in
 * both folds, so the corrected bias is 0.5625. Output SQNR: sample 1
 * sum y^2 = 11.4375, sum err^2 = 0.1875; sample 2 3.8125 and 0.0625: both
 * 10 log10(61) dB. With the corrected bias (0.5625) the quantized outputs
 * are {0.5625, 1.5625, 2.5625, 1.5625} against {0.75, 1.25, 2.5, 1.75}:
 * sum err^2 = 0.03515625 + 0.09765625 + 0.00390625 + 0.03515625 = 0.171875,
 * SQNR 10 log10(11.4375 / 0.171875) = 10 log10(732 / 11); sample 2:
 * {1.5625, 0.5625 x3} against {1.75, 0.5 x3}: 0.046875, 10 log10(244 / 3).
 */
#include "calib/biascorr/empirical.h"
#include "calib/biascorr/fold.h"
#include "calib/biascorr/measure.h"
#include "calib/biascorr/pre.h"
#include "src/io/npy.h"
#include "src/pipeline/pipeline.h"

static gen_model *conv_2x_w(int quantized, double bias, int64_t width)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, width));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(2));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(bias));
	if (quantized) {
		gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.25));
		gen_init(g, mg, "z", OQ_DT_UINT8, 0, NULL, GEN_VALS(0));
		gen_node(g, mg, "QuantizeLinear", "q", "x,s,z", "xq");
		gen_node(g, mg, "DequantizeLinear", "dq", "xq,s,z", "xd");
		gen_node(g, mg, "Conv", "conv", "xd,W,B", "y");
	} else {
		gen_node(g, mg, "Conv", "conv", "x,W,B", "y");
	}
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, width));
	return g;
}

static gen_model *conv_2x(int quantized, double bias)
{
	return conv_2x_w(quantized, bias, 4);
}

/* Writes samples n x [dims] (values v, n * count floats) as dir/000.npy, 001.npy, ... */
static void write_samples(const char *dir, size_t n, int rank, const int64_t *dims, const float *v, size_t count)
{
	char path[160];
	oq_diag d;
	oq_diag_init(&d);
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%03zu.npy", dir, i);
		cr_assert_eq(oq_npy_write(path, OQ_DT_FLOAT, rank, dims, v + i * count, count * sizeof *v, &d), OQ_OK,
			     "%s", d.msg);
	}
}

/* The float, quantized and corrected models of a measurement test and their generators. */
static void free_models(oq_model *mf, oq_model *mq, oq_model *mc, gen_model *gf, gen_model *gq, gen_model *gc)
{
	oq_model_free(mf);
	oq_model_free(mq);
	oq_model_free(mc);
	gen_free(gf);
	gen_free(gq);
	gen_free(gc);
}

static void rm_rf(const char *dir)
{
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

Test(biascorr, empirical_measure_and_apply_hand)
{
	static const float xs[] = {0.125f, 0.375f, 1, 0.625f, 0.625f, 0, 0, 0};
	gen_model *gf = conv_2x(0, 0.5), *gq = conv_2x(1, 0.5), *gc = conv_2x(1, 0.5625);
	oq_model *mf = load(gf), *mq = load(gq), *mc = load(gc);
	oq_calib_opts co;
	oq_opts o;
	oq_bc_targets b;
	oq_bc_quantized runs[3];
	oq_node *rn[1], *qn[1];
	oq_diag d;
	char dir[64] = "/tmp/oq_bc_XXXXXX";
	const double db61 = 10 * log10(61.0), dbc0 = 10 * log10(732.0 / 11), dbc1 = 10 * log10(244.0 / 3);

	oq_diag_init(&d);
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY;
	cr_assert_not_null(mkdtemp(dir));
	write_samples(dir, 2, GEN_SHAPE(1, 1, 1, 4), xs, 4);

	cr_assert_eq(oq_bc_targets_find(mf->graph, &o, &b, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(b.n, 1);
	cr_expect_str_eq(b.v[0].node, "y");
	cr_expect_str_eq(b.v[0].measured, "y");
	cr_expect_eq(b.v[0].M, 1);
	rn[0] = oq_bc_node_writing(mf->graph, "y");
	qn[0] = oq_bc_node_writing(mq->graph, "y");
	cr_assert(rn[0] && qn[0]);
	memset(&co, 0, sizeof co);
	co.source = dir;
	co.threads = 1;
	/* the quantized model with sums on both folds; the corrected one on both and on fold 1 alone */
	runs[0] = (oq_bc_quantized){.qm = mq, .nodes = qn, .folds = 3};
	runs[1] = (oq_bc_quantized){.qm = mc, .folds = 3};
	runs[2] = (oq_bc_quantized){.qm = mc, .folds = 2};
	cr_assert_eq(oq_bc_measure(mf, rn, runs, 3, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	cr_assert(!b.v[0].failed);
	cr_expect_eq(b.v[0].n_f[0], 4);
	cr_expect_eq(b.v[0].n_f[1], 4);
	cr_expect_eq(b.v[0].n_q[0], 4);
	cr_expect_eq(b.v[0].n_q[1], 4);
	cr_expect_eq(b.v[0].sum_f[0], 6.25);
	cr_expect_eq(b.v[0].sum_f[1], 3.25);
	cr_expect_eq(b.v[0].sum_q[0], 6.0);
	cr_expect_eq(b.v[0].sum_q[1], 3.0);
	for (int f = 0; f < 2; f++) {
		cr_expect_eq(runs[0].sqnr.n[f], 1);
		cr_expect(fabs(runs[0].sqnr.min[f] - db61) < 1e-9, "fold %d min %.12g", f, runs[0].sqnr.min[f]);
		cr_expect(fabs(runs[0].sqnr.sum[f] - db61) < 1e-9, "fold %d sum %.12g", f, runs[0].sqnr.sum[f]);
	}
	cr_expect(fabs(oq_bc_sqnr_mean(&runs[0].sqnr, 3) - db61) < 1e-9);
	cr_expect(fabs(runs[1].sqnr.min[0] - dbc0) < 1e-9, "%.12g", runs[1].sqnr.min[0]);
	cr_expect(fabs(runs[1].sqnr.min[1] - dbc1) < 1e-9, "%.12g", runs[1].sqnr.min[1]);
	cr_expect(fabs(oq_bc_sqnr_min(&runs[1].sqnr, 3) - dbc0) < 1e-9);
	cr_expect(fabs(oq_bc_sqnr_mean(&runs[1].sqnr, 3) - (dbc0 + dbc1) / 2) < 1e-9);
	cr_expect(oq_bc_sqnr_better(&runs[1].sqnr, &runs[0].sqnr, 3));
	/* fold 1 alone: sample 0 never ran */
	cr_expect_eq(runs[2].sqnr.n[0], 0);
	cr_expect_eq(runs[2].sqnr.n[1], 1);
	cr_expect(fabs(runs[2].sqnr.sum[1] - dbc1) < 1e-9);
	cr_expect(isnan(oq_bc_sqnr_mean(&runs[2].sqnr, 1)));
	/* per sample */
	for (int r = 0; r < 3; r++)
		cr_assert_eq(runs[r].sqnr.n_per, 2);
	cr_expect(fabs(runs[0].sqnr.per[0] - db61) < 1e-9 && fabs(runs[0].sqnr.per[1] - db61) < 1e-9);
	cr_expect(fabs(runs[1].sqnr.per[0] - dbc0) < 1e-9 && fabs(runs[1].sqnr.per[1] - dbc1) < 1e-9);
	cr_expect(isnan(runs[2].sqnr.per[0]) && fabs(runs[2].sqnr.per[1] - dbc1) < 1e-9);
	for (int r = 0; r < 3; r++)
		oq_bc_sqnr_free(&runs[r].sqnr);

	/* fold the shift of both folds, (9 - 9.5) / 8, into the float model's bias */
	b.v[0].corr[0] = (b.v[0].sum_q[0] + b.v[0].sum_q[1]) / 8 - (b.v[0].sum_f[0] + b.v[0].sum_f[1]) / 8;
	cr_expect_eq(b.v[0].corr[0], -0.0625);
	cr_assert_eq(oq_bc_targets_apply(mf->graph, &b, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(oq_tensor_get(input_init(node_named(mf->graph, "conv"), 2), 0), 0.5625);

	oq_bc_targets_free(&b);
	free_models(mf, mq, mc, gf, gq, gc);
	rm_rf(dir);
}

/*
 * Per-sample output errors (oq_bc_outerr) and a run's sample range, on the
 * models of empirical_measure_and_apply_hand: y = 2x + 0.5 on [1, 1, 1, 4],
 * float outputs {0.75, 1.25, 2.5, 1.75} and {1.75, 0.5, 0.5, 0.5}
 * (sum r^2 11.4375 and 3.8125), quantized sums 0.25 lower on each sample
 * and SQNR 10 log10(61) on each: sum (r - q)^2 = 11.4375 / 61 = 0.1875 and
 * 3.8125 / 61 = 0.0625, channel 0's sum of q - r -0.25 over 4 elements.
 * With lo 1, hi 2 only sample 1 runs: sample 0's row stays NaN, no sum.
 */
Test(biascorr, measure_output_errors_and_sample_range)
{
	static const float xs[] = {0.125f, 0.375f, 1, 0.625f, 0.625f, 0, 0, 0};
	static const double r2[] = {11.4375, 3.8125}, d2[] = {0.1875, 0.0625};
	gen_model *gf = conv_2x(0, 0.5), *gq = conv_2x(1, 0.5);
	oq_model *mf = load(gf), *mq = load(gq);
	oq_calib_opts co;
	oq_bc_targets b = {0};
	oq_bc_outerr e = {.out = "y", .M = 1}, e1 = {.out = "y", .M = 1};
	oq_bc_quantized run;
	oq_diag d;
	char dir[64] = "/tmp/oq_bc_XXXXXX";

	oq_diag_init(&d);
	cr_assert_not_null(mkdtemp(dir));
	write_samples(dir, 2, GEN_SHAPE(1, 1, 1, 4), xs, 4);
	memset(&co, 0, sizeof co);
	co.source = dir;
	co.threads = 1;
	run = (oq_bc_quantized){.qm = mq, .folds = 3, .err = &e};
	cr_assert_eq(oq_bc_measure(mf, NULL, &run, 1, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(e.n, 2);
	cr_assert_eq(e.nout, 1);
	cr_expect_eq(e.out_k, 0);
	for (int i = 0; i < 2; i++) {
		cr_expect(fabs(e.r2[i] - r2[i]) < 1e-12, "sample %d r2 %.12g", i, e.r2[i]);
		cr_expect(fabs(e.d2[i] - d2[i]) < 1e-12, "sample %d d2 %.12g", i, e.d2[i]);
		cr_expect(fabs(e.e[i] + 0.25) < 1e-12, "sample %d e %.12g", i, e.e[i]);
		cr_expect_eq(e.cnt[i], 4);
	}
	oq_bc_sqnr_free(&run.sqnr);
	run = (oq_bc_quantized){.qm = mq, .folds = 3, .lo = 1, .hi = 2, .err = &e1};
	cr_assert_eq(oq_bc_measure(mf, NULL, &run, 1, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	cr_expect(isnan(run.sqnr.per[0]) && fabs(run.sqnr.per[1] - 10 * log10(61.0)) < 1e-9);
	cr_expect(isnan(e1.r2[0]) && isnan(e1.d2[0]) && e1.cnt[0] == 0 && e1.e[0] == 0);
	cr_expect(fabs(e1.d2[1] - d2[1]) < 1e-12 && e1.cnt[1] == 4);
	oq_bc_sqnr_free(&run.sqnr);
	oq_bc_outerr_free(&e);
	oq_bc_outerr_free(&e1);
	oq_bc_targets_free(&b);
	free_models(mf, mq, NULL, gf, gq, NULL);
	rm_rf(dir);
}

/*
 * The float outputs kept between measurements: a float-only measurement
 * fills the cache (outputs and float sums); the measurements after it (the
 * float model not run) give the sums and SQNR of an uncached one, exactly.
 * With a limit below one output (4 floats, 16 bytes) the outputs are not
 * kept (the float sums are) and the float model runs each time.
 */
Test(biascorr, empirical_measure_cache)
{
	static const float xs[] = {0.125f, 0.375f, 1, 0.625f, 0.625f, 0, 0, 0};
	gen_model *gf = conv_2x(0, 0.5), *gq = conv_2x(1, 0.5);
	oq_model *mf = load(gf), *mq = load(gq);
	oq_calib_opts co;
	oq_opts o;
	oq_bc_targets b;
	oq_bc_quantized run;
	oq_bc_float_cache cache = {0}, tiny = {.limit = 15};
	oq_node *rn[1], *qn[1];
	oq_diag d;
	char dir[64] = "/tmp/oq_bc_XXXXXX";
	const double db61 = 10 * log10(61.0);

	oq_diag_init(&d);
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY;
	cr_assert_not_null(mkdtemp(dir));
	write_samples(dir, 2, GEN_SHAPE(1, 1, 1, 4), xs, 4);
	cr_assert_eq(oq_bc_targets_find(mf->graph, &o, &b, &d), OQ_OK, "%s", d.msg);
	rn[0] = oq_bc_node_writing(mf->graph, "y");
	qn[0] = oq_bc_node_writing(mq->graph, "y");
	memset(&co, 0, sizeof co);
	co.source = dir;
	co.threads = 1;
	for (int pass = 0; pass < 5; pass++) {
		oq_bc_float_cache *c = pass == 0 ? NULL : pass < 3 ? &cache : &tiny;
		if (pass == 1 || pass == 3) {
			cr_assert_eq(oq_bc_measure(mf, rn, NULL, 0, &co, &b, c, &d), OQ_OK, "%s", d.msg);
			cr_expect_eq(c->state, pass == 1 ? 1 : -1, "pass %d: cache state %d", pass, c->state);
		}
		run = (oq_bc_quantized){.qm = mq, .nodes = qn, .folds = 3};
		cr_assert_eq(oq_bc_measure(mf, rn, &run, 1, &co, &b, c, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(b.v[0].sum_f[0], 6.25, "pass %d", pass);
		cr_expect_eq(b.v[0].sum_f[1], 3.25, "pass %d", pass);
		cr_expect_eq(b.v[0].sum_q[0], 6.0, "pass %d", pass);
		cr_expect_eq(b.v[0].sum_q[1], 3.0, "pass %d", pass);
		cr_expect_eq(b.v[0].n_f[0] + b.v[0].n_f[1], 8, "pass %d", pass);
		cr_expect_eq(b.v[0].n_q[0] + b.v[0].n_q[1], 8, "pass %d", pass);
		cr_expect_eq(run.sqnr.n[0] + run.sqnr.n[1], 2, "pass %d", pass);
		cr_expect(fabs(oq_bc_sqnr_min(&run.sqnr, 3) - db61) < 1e-9, "pass %d", pass);
		cr_expect(fabs(oq_bc_sqnr_mean(&run.sqnr, 3) - db61) < 1e-9, "pass %d", pass);
		oq_bc_sqnr_free(&run.sqnr);
	}
	cr_expect_eq(cache.bytes, 32); /* two samples' outputs of 4 floats */
	cr_expect_eq(tiny.bytes, 0);
	oq_bc_float_cache_free(&cache);
	oq_bc_float_cache_free(&tiny);
	oq_bc_targets_free(&b);
	oq_model_free(mf);
	oq_model_free(mq);
	gen_free(gf);
	gen_free(gq);
	rm_rf(dir);
}

/* oq_bc_sqnr with fold 0 / fold 1 given as {min, sum, n}. */
static oq_bc_sqnr sq(double min0, double sum0, size_t n0, double min1, double sum1, size_t n1)
{
	oq_bc_sqnr s = {{min0, min1}, {sum0, sum1}, {n0, n1}, NULL, 0};
	return s;
}

/*
 * The comparison that keeps a round (oq_bc_sqnr_better), by hand. base:
 * fold 0 {10, 12} dB, fold 1 {20, 30} dB (min 10, mean 18). A candidate
 * with fold 0 {11, 13}, fold 1 {20, 31} is better on all samples (min 11 >=
 * 10, mean 18.75 > 18) and on each fold (fold 0: 11 >= 10, 12 > 11; fold 1:
 * 20 >= 20, 25.5 > 25). Judged on one fold, the other fold's numbers do not
 * count; a fold without samples is never an improvement.
 */
Test(biascorr, empirical_better_hand)
{
	oq_bc_sqnr base = sq(10, 22, 2, 20, 50, 2), c = sq(11, 24, 2, 20, 51, 2);

	cr_expect_eq(oq_bc_sqnr_min(&base, 3), 10);
	cr_expect_eq(oq_bc_sqnr_min(&base, 2), 20);
	cr_expect_eq(oq_bc_sqnr_mean(&base, 3), 18);
	cr_expect_eq(oq_bc_sqnr_mean(&base, 1), 11);
	cr_expect(isnan(oq_bc_sqnr_min(&base, 0)));
	cr_expect(isnan(oq_bc_sqnr_mean(&base, 0)));

	cr_expect(oq_bc_sqnr_better(&c, &base, 3));
	cr_expect(oq_bc_sqnr_better(&c, &base, 1));
	cr_expect(oq_bc_sqnr_better(&c, &base, 2));
	/* the mean not up (sums 22 + 50: 18) */
	c = sq(11, 22, 2, 20, 50, 2);
	cr_expect(!oq_bc_sqnr_better(&c, &base, 3));
	/* the min down (9.99) although the mean rises (20) */
	c = sq(9.99, 30, 2, 20, 50, 2);
	cr_expect(!oq_bc_sqnr_better(&c, &base, 3));
	cr_expect(!oq_bc_sqnr_better(&c, &base, 1));
	/* ... which does not count when judged on fold 1 alone: 20 >= 20, 25.5 > 25 */
	c = sq(9.99, 30, 2, 20, 51, 2);
	cr_expect(oq_bc_sqnr_better(&c, &base, 2));
	/* fold 1's min down (19.99), its mean up (40): not better on fold 1 */
	c = sq(10, 22, 2, 19.99, 80, 2);
	cr_expect(!oq_bc_sqnr_better(&c, &base, 2));
	/* a fold without samples (one calibration sample: fold 1 is empty) */
	base = sq(10, 10, 1, 300, 0, 0);
	c = sq(11, 11, 1, 300, 0, 0);
	cr_expect(oq_bc_sqnr_better(&c, &base, 1));
	cr_expect(!oq_bc_sqnr_better(&c, &base, 2));
	cr_expect(!oq_bc_sqnr_better(&c, &base, 0));
}

/* Per-sample SQNR (one output per sample) and the fold sums it gives; per[] must outlive the result. */
static oq_bc_sqnr from_per(double *per, size_t n)
{
	oq_bc_sqnr s = {{300, 300}, {0, 0}, {0, 0}, per, n};
	for (size_t i = 0; i < n; i++)
		if (!isnan(per[i])) {
			s.sum[i % 2] += per[i];
			s.n[i % 2]++;
			s.min[i % 2] = fmin(s.min[i % 2], per[i]);
		}
	return s;
}

/*
 * The margin of the fold checks (oq_bc_sqnr_gain, oq_bc_sqnr_holds), by hand.
 * base per sample {10, 20, 12, 30} (samples 0 and 2 in fold 0), cand
 * {11, 20, 15, 31}: fold 0 gains {1, 3}: mean 2, sd sqrt(2), se 1, and
 * 2 > 2 * 1 fails by a hair; fold 1 {0, 1}: mean 0.5, se 0.5; all four
 * {1, 0, 3, 1}: mean 1.25, sd^2 = (0.0625 + 1.5625 + 3.0625 + 0.0625) / 3,
 * se = sqrt(4.75 / 12) = 0.6291. cand2 {11.5, 21, 12.9, 31}: fold 0 gains
 * {1.5, 0.9}: mean 1.2, sd 0.4243, se 0.3: holds (and min 11.5 >= 10, mean
 * 12.2 > 11). With sample 2 not run, fold 0 has one pair: no standard error.
 */
Test(biascorr, empirical_gain_margin_hand)
{
	double pb[] = {10, 20, 12, 30}, pc[] = {11, 20, 15, 31}, pc2[] = {11.5, 21, 12.9, 31}, g, se;
	oq_bc_sqnr base = from_per(pb, 4), c = from_per(pc, 4), c2 = from_per(pc2, 4);

	oq_bc_sqnr_gain(&c, &base, 1, &g, &se);
	cr_expect(fabs(g - 2) < 1e-12 && fabs(se - 1) < 1e-12, "fold 0: %.15g +- %.15g", g, se);
	oq_bc_sqnr_gain(&c, &base, 2, &g, &se);
	cr_expect(fabs(g - 0.5) < 1e-12 && fabs(se - 0.5) < 1e-12, "fold 1: %.15g +- %.15g", g, se);
	oq_bc_sqnr_gain(&c, &base, 3, &g, &se);
	cr_expect(fabs(g - 1.25) < 1e-12 && fabs(se - sqrt(4.75 / 12)) < 1e-12, "all: %.15g +- %.15g", g, se);
	cr_expect(oq_bc_sqnr_better(&c, &base, 1)); /* better, but not by the margin */
	cr_expect(!oq_bc_sqnr_holds(&c, &base, 1));
	cr_expect(!oq_bc_sqnr_holds(&c, &base, 2));
	cr_expect(!oq_bc_sqnr_holds(&c, &base, 3));

	oq_bc_sqnr_gain(&c2, &base, 1, &g, &se);
	cr_expect(fabs(g - 1.2) < 1e-12 && fabs(se - 0.3) < 1e-12, "cand2 fold 0: %.15g +- %.15g", g, se);
	cr_expect(oq_bc_sqnr_holds(&c2, &base, 1));

	pc2[2] = NAN;
	c2 = from_per(pc2, 4);
	oq_bc_sqnr_gain(&c2, &base, 1, &g, &se);
	cr_expect(fabs(g - 1.5) < 1e-12 && isnan(se), "one pair: %.15g +- %.15g", g, se);
	cr_expect(!oq_bc_sqnr_holds(&c2, &base, 1));
	oq_bc_sqnr_gain(&c2, &base, 0, &g, &se);
	cr_expect(isnan(g) && isnan(se));
}

/*
 * The whole pipeline (oq_biascorr_empirical, calib/biascorr/empirical.c) on y = Conv(x,
 * W = 1), x [1, 1, 1, 1], with x's Q fixed at uint8 scale 1, zero point 0
 * (round to nearest) and y left float (overrides), so the only error is
 * x's rounding: e = round(x) - x. W = 1 is exact on the int8 grid (scale
 * 1/127, q 127), and the bias the correction creates becomes int32 at
 * scale 1 * 1/127: -round(127 * shift). Samples 0 and 2 are fold 0, 1 and
 * 3 fold 1; SQNR_i = 20 log10(|x_i| / |e_i - c|) for a correction c.
 *
 * Consistent shift: x = 1.6, 10.6, 5.6, 15.6 all round up by 0.4: the
 * shift is 0.4 on every fold, c = 51/127 (127 * 0.4 = 50.8) leaves
 * |e - c| = 0.0016 everywhere: kept, bias -51.
 *
 * Shift that does not hold up: x = 1.6, 10.6, 5.6, 15.4, e = 0.4, 0.4,
 * 0.4, -0.4, SQNR 12.04, 28.46, 22.92, 31.71 dB (min 12.04, mean 23.78).
 * All samples: shift 0.2, c = 25/127 = 0.19685 (127 * 0.2 = 25.4):
 * |e - c| = 0.20315 x3, 0.59685: 17.93, 34.35, 28.81, 28.23 dB, min 17.93
 * and mean 27.33, both up: the in-sample check alone would keep it. Fold
 * 0's shift (0.4, c = 51/127 = 0.40157) on fold 1: sample 3's error grows
 * to 0.80157, 25.67 dB, below fold 1's uncorrected min 28.46. Fold 1's
 * shift is 0 (e1 + e3 = (11 - 10.6f) + (15 - 15.4f) = 0 exactly): nothing
 * changes on fold 0. Not kept: no bias.
 */
static void pipeline_case_b(const float *xs, size_t ns, int want_bias, int64_t want, int has_bias,
			    const char *keep_out);

static void pipeline_case(const float *xs, int want_bias, int64_t want)
{
	pipeline_case_b(xs, 4, want_bias, want, 0, NULL);
}

/* pipeline_case on ns samples; has_bias: the Conv has a zero bias already; keep_out: the
 * quantized model is copied there (before the temporary folder goes). */
static void pipeline_case_b(const float *xs, size_t ns, int want_bias, int64_t want, int has_bias,
			    const char *keep_out)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	oq_pipeline_opts po;
	oq_model *m = NULL;
	oq_node *conv = NULL;
	oq_diag d;
	char dir[64] = "/tmp/oq_bcp_XXXXXX", in[96], out[96], ov[96], cal[96];
	FILE *f;

	oq_diag_init(&d);
	cr_assert_not_null(mkdtemp(dir));
	snprintf(in, sizeof in, "%s/m.onnx", dir);
	snprintf(out, sizeof out, "%s/q.onnx", dir);
	snprintf(ov, sizeof ov, "%s/ov.json", dir);
	snprintf(cal, sizeof cal, "%s/calib", dir);
	cr_assert_eq(mkdir(cal, 0755), 0);
	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(1));
	if (has_bias)
		gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(0));
	gen_node(g, mg, "Conv", "conv", has_bias ? "x,W,B" : "x,W", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	cr_assert_eq(gen_write(g, in), 0);
	write_samples(cal, ns, GEN_SHAPE(1, 1, 1, 1), xs, 1);
	cr_assert_not_null(f = fopen(ov, "w"));
	fputs("{\"tensors\": {\"x\": {\"scale\": 1, \"zero_point\": 0}, \"y\": {\"skip\": true}}}\n", f);
	cr_assert_eq(fclose(f), 0);

	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.q.prefer = OQ_PREFER_ACCURACY;
	po.in_path = in;
	po.out_path = out;
	po.calib.source = cal;
	po.calib.method = OQ_CALIB_MINMAX;
	po.calib.threads = 1;
	po.overrides_path = ov;
	po.bias_correction = OQ_BC_EMPIRICAL;
	po.quiet = 1;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_model_load(out, &m, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < m->graph->n_nodes; i++)
		if (!m->graph->nodes[i]->dead && m->graph->nodes[i]->op == OQ_OP_Conv)
			conv = m->graph->nodes[i];
	cr_assert_not_null(conv);
	if (!want_bias) {
		cr_expect(conv->n_inputs < 3 || !conv->inputs[2], "the round was kept: Conv has a bias");
	} else {
		const oq_node *dq;
		const oq_tensor *b;
		int32_t bias;
		cr_assert(conv->n_inputs >= 3 && conv->inputs[2], "the round was not kept: no bias");
		dq = conv->inputs[2]->producer;
		cr_assert(dq && dq->op == OQ_OP_DequantizeLinear && dq->inputs[0]->init);
		b = dq->inputs[0]->init;
		cr_assert_eq(b->dtype, OQ_DT_INT32);
		cr_assert_eq(b->nelem, 1);
		memcpy(&bias, b->data, sizeof bias); /* borrowed data may be unaligned */
		cr_expect_eq(bias, want, "bias %d, want %d", (int)bias, (int)want);
	}
	oq_model_free(m);
	gen_free(g);
	if (keep_out) {
		char cmd[400];
		snprintf(cmd, sizeof cmd, "cp '%s' '%s'", out, keep_out);
		cr_assert_eq(system(cmd), 0);
	}
	rm_rf(dir);
}

Test(biascorr, empirical_pipeline_consistent_shift_kept)
{
	static const float xs[] = {1.6f, 10.6f, 5.6f, 15.6f};
	pipeline_case(xs, 1, -51);
}

Test(biascorr, empirical_pipeline_shift_fails_cross_validation)
{
	static const float xs[] = {1.6f, 10.6f, 5.6f, 15.4f};
	pipeline_case(xs, 0, 0);
}

/* Whether files a and b hold the same bytes. */
static int same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	int ca, cb, same = fa && fb;

	while (same && ((ca = fgetc(fa)) != EOF) + ((cb = fgetc(fb)) != EOF))
		same = ca == cb;
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return same;
}

/*
 * The probe (biascorr.h) on the pipeline above with 32 samples: the rounds are tried first on
 * samples 0-1, 8-9, 16-17 and 24-25 (sample i in fold i % 2). A shift that holds everywhere
 * (x = k + 0.6, k = 1..32: every error +0.4, as in the kept case above) passes there, and the
 * rounds keep it: bias -51. Errors whose sign flips every eight samples (x = k + 0.6 on samples
 * 0-7, 16-23, k + 0.4 on 8-15, 24-31: +0.4 and -0.4) leave both folds of the probe, as both
 * folds of all samples, no shift (sums of +0.4 and -0.4 in equal numbers): the probe stops,
 * and the Conv gets no bias. Either way the model is the bytes the rounds alone write
 * (oq_bc_probe 0). The probe's candidates run only the Conv (the last layer) and what its bias
 * reads, from what the uncorrected model's probe run kept: fold 0's candidate, on fold 1's four
 * probe samples (1, 9, 17, 25), cannot pass and the probe stops there: 4 tail runs, none with
 * oq_bc_tail 0 (the same bytes); so with a zero bias in the Conv already (a correction changes
 * only that initializer) and without one (it adds a bias input).
 */
Test(biascorr, empirical_probe_stops_only_where_no_round_passes)
{
	float hold[32], flip[32];
	char dir[64] = "/tmp/oq_bcq_XXXXXX", pa[96], pb[96], pc[96];
	size_t before, tails;

	for (int i = 0; i < 32; i++) {
		hold[i] = (float)(i + 1) + 0.6f;
		flip[i] = (float)(i + 1) + (i / 8 % 2 ? 0.4f : 0.6f);
	}
	cr_assert_not_null(mkdtemp(dir));
	snprintf(pa, sizeof pa, "%s/probe.onnx", dir);
	snprintf(pb, sizeof pb, "%s/rounds.onnx", dir);
	snprintf(pc, sizeof pc, "%s/whole.onnx", dir);

	before = oq_bc_probe_stops;
	pipeline_case_b(hold, 32, 1, -51, 0, pa);
	cr_expect_eq(oq_bc_probe_stops, before, "the probe stopped a shift that holds");
	oq_bc_probe = 0;
	pipeline_case_b(hold, 32, 1, -51, 0, pb);
	oq_bc_probe = 1;
	cr_expect(same_file(pa, pb), "a shift that holds: the models differ");

	before = oq_bc_probe_stops;
	tails = oq_bc_tail_runs;
	pipeline_case_b(flip, 32, 0, 0, 0, pa);
	cr_expect_eq(oq_bc_probe_stops, before + 1, "the probe did not stop a shift that flips");
	cr_expect_eq(oq_bc_tail_runs - tails, 4, "no bias: %zu tail runs in the probe", oq_bc_tail_runs - tails);
	oq_bc_probe = 0;
	oq_bc_tail = 0;
	pipeline_case_b(flip, 32, 0, 0, 0, pb);
	oq_bc_tail = 1;
	oq_bc_probe = 1;
	cr_expect_eq(oq_bc_probe_stops, before + 1, "the probe ran with oq_bc_probe 0");
	cr_expect(same_file(pa, pb), "a shift that flips: the models differ");

	/* the Conv with a (zero) bias already: a correction changes only its value, so tails */
	tails = oq_bc_tail_runs;
	pipeline_case_b(flip, 32, 1, 0, 1, pa);
	cr_expect_eq(oq_bc_probe_stops, before + 2, "the probe did not stop a shift that flips");
	cr_expect_eq(oq_bc_tail_runs - tails, 4, "%zu tail runs in the probe", oq_bc_tail_runs - tails);
	oq_bc_tail = 0;
	tails = oq_bc_tail_runs;
	pipeline_case_b(flip, 32, 1, 0, 1, pc);
	oq_bc_tail = 1;
	cr_expect_eq(oq_bc_tail_runs, tails, "tail runs with oq_bc_tail 0");
	cr_expect(same_file(pa, pc), "a shift that flips: tails and whole runs wrote other models");
	rm_rf(dir);
}

/*
 * Tails (measure.h): the last layer's round changes only the Conv's bias, so its fold
 * candidates (fold 0's shift on fold 1's two samples, then fold 1's on fold 0's) and then its
 * candidate on all four samples (the last round: no later round reads its sums) run only the
 * nodes the bias reaches, from the values round 0 kept: 8 tail runs, and the model written
 * (bias -51 as above) is the same bytes as with whole runs. With a bias in the Conv already
 * (has_bias 1) the candidates differ from round 0's model in that initializer alone; without
 * one, the correction adds a bias input and its DequantizeLinear, and the tails are views of
 * round 0's kept values (the Conv and its new bias's DequantizeLinear differ).
 */
static void tails_case(int has_bias)
{
	static const float xs[] = {1.6f, 10.6f, 5.6f, 15.6f};
	char a[64] = "/tmp/oq_bct_XXXXXX", pa[96], pb[96];
	size_t before = oq_bc_tail_runs, parts = oq_exec_runs(1);

	cr_assert_not_null(mkdtemp(a));
	snprintf(pa, sizeof pa, "%s/tail.onnx", a);
	snprintf(pb, sizeof pb, "%s/whole.onnx", a);
	oq_bc_tail = 1;
	pipeline_case_b(xs, 4, 1, -51, has_bias, pa);
	cr_expect_eq(oq_bc_tail_runs - before, 8, "has_bias %d: %zu tail runs", has_bias, oq_bc_tail_runs - before);
	/* the executor counts them as its partial runs (the verbose "model runs" line) */
	cr_expect_eq(oq_exec_runs(1) - parts, 8, "has_bias %d: %zu partial runs", has_bias, oq_exec_runs(1) - parts);
	oq_bc_tail = 0;
	before = oq_bc_tail_runs;
	parts = oq_exec_runs(1);
	pipeline_case_b(xs, 4, 1, -51, has_bias, pb);
	oq_bc_tail = 1;
	cr_expect_eq(oq_bc_tail_runs, before, "tail runs with oq_bc_tail 0");
	cr_expect_eq(oq_exec_runs(1), parts, "partial runs with oq_bc_tail 0");
	cr_expect(same_file(pa, pb), "has_bias %d: the models differ", has_bias);
	rm_rf(a);
}

Test(biascorr, empirical_pipeline_tails_same_model)
{
	tails_case(1);
}

Test(biascorr, empirical_pipeline_tails_when_the_correction_adds_a_bias)
{
	tails_case(0);
}

/*
 * Three Convs on [1, 1, 1, 4], each 1 x 1 with weight w and no bias: x -> c0 (w 2) -> t0 ->
 * c1 (w 1.5) -> t1 -> c2 (w 1) -> y. kind 0: float; 1 (the base): t0 and t1 each through a
 * QuantizeLinear / DequantizeLinear pair (q0 / dq0: scale 0.3, q1 / dq1: scale 0.2, uint8, zero
 * point 0); 2 (the candidate, as a placement that leaves c1 float writes it): c1 reads t0
 * itself, only t1's pair is left.
 */
static gen_model *chain3(int kind)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 4));
	gen_init(g, mg, "W0", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(2));
	gen_init(g, mg, "W1", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(1.5));
	gen_init(g, mg, "W2", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(1));
	gen_node(g, mg, "Conv", "c0", "x,W0", "t0");
	if (kind) {
		gen_init(g, mg, "s0", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.3));
		gen_init(g, mg, "s1", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.2));
		gen_init(g, mg, "z", OQ_DT_UINT8, 0, NULL, GEN_VALS(0));
	}
	if (kind == 1) {
		gen_node(g, mg, "QuantizeLinear", "q0", "t0,s0,z", "t0q");
		gen_node(g, mg, "DequantizeLinear", "dq0", "t0q,s0,z", "t0d");
	}
	gen_node(g, mg, "Conv", "c1", kind == 1 ? "t0d,W1" : "t0,W1", "t1");
	if (kind) {
		gen_node(g, mg, "QuantizeLinear", "q1", "t1,s1,z", "t1q");
		gen_node(g, mg, "DequantizeLinear", "dq1", "t1q,s1,z", "t1d");
	}
	gen_node(g, mg, "Conv", "c2", kind ? "t1d,W2" : "t1,W2", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 4));
	return g;
}

/*
 * Tails of a candidate whose nodes differ from the base's (oq_bc_prefix_view): the base
 * (chain3 kind 1) planned for a change at c1 (seeds c1, dq0, q0: downstream of them all but c0)
 * keeps t0 alone; the candidate (kind 2: q0 and dq0 gone, c1 reading t0) then computes c1, q1,
 * dq1 and c2 from that copy, not c0. Its output errors are those of its whole run, bit for bit,
 * and not the base's (t0 = 2x is off the 0.3 grid: 0.25 -> 0.3, 0.75 -> 0.6, ...). A base
 * that kept only t1d (seeds c2) cannot feed it: t0 is the same but not kept, its producer c0
 * reads the graph input: a whole run (state -1). Kept in the temporary file (spill 1) or in
 * memory (0): the same.
 */
static void view_case(int spill)
{
	static const float xs[] = {0.125f, 0.375f, 1, 0.625f, 0.625f, 0.25f, 0.5f, 0.875f};
	gen_model *gf = chain3(0), *gb = chain3(1), *gc = chain3(2);
	oq_model *mf = load(gf), *mb = load(gb), *mc = load(gc);
	oq_calib_opts co;
	oq_bc_targets b = {0};
	oq_bc_prefix pl, u, v;
	oq_bc_outerr eb = {0}, et = {0}, ew = {0};
	oq_bc_quantized run;
	oq_node *seed[3];
	oq_diag d;
	char dir[64] = "/tmp/oq_bcv_XXXXXX";
	size_t before;
	int differ = 0;

	oq_bc_spill = spill;
	oq_diag_init(&d);
	cr_assert_not_null(mkdtemp(dir));
	write_samples(dir, 2, GEN_SHAPE(1, 1, 1, 4), xs, 4);
	memset(&co, 0, sizeof co);
	co.source = dir;
	co.threads = 1;

	seed[0] = node_named(mb->graph, "c1");
	seed[1] = node_named(mb->graph, "dq0");
	seed[2] = node_named(mb->graph, "q0");
	cr_assert(seed[0] && seed[1] && seed[2]);
	cr_assert_eq(oq_bc_prefix_plan(mb, seed, 3, &pl, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_bc_prefix_union(&pl, 1, &u, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(u.state, 0);
	cr_assert_eq(u.nk, 1);
	cr_expect_str_eq(mb->graph->values[u.vidx[0]]->name, "t0");
	run = (oq_bc_quantized){.qm = mb, .folds = 3, .keep = &u, .err = &eb};
	cr_assert_eq(oq_bc_measure(mf, NULL, &run, 1, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	oq_bc_sqnr_free(&run.sqnr);
	cr_assert_eq(u.state, 1, "the base kept nothing");
	cr_expect_eq(u.has_fd, spill, "kept in %s", u.has_fd ? "a file" : "memory");

	cr_assert_eq(oq_bc_prefix_view(&u, mb, mc, &v, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(v.state, 1);
	cr_expect(!v.part[node_named(mc->graph, "c0")->index], "c0 is computed");
	cr_expect(v.part[node_named(mc->graph, "c1")->index] && v.part[node_named(mc->graph, "q1")->index] &&
		  v.part[node_named(mc->graph, "dq1")->index] && v.part[node_named(mc->graph, "c2")->index]);
	cr_assert_eq(v.nk, 1);
	cr_expect_str_eq(mc->graph->values[v.vidx[0]]->name, "t0");

	before = oq_bc_tail_runs;
	run = (oq_bc_quantized){.qm = mc, .folds = 3, .from = &v, .err = &et};
	cr_assert_eq(oq_bc_measure(mf, NULL, &run, 1, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	oq_bc_sqnr_free(&run.sqnr);
	cr_expect_eq(oq_bc_tail_runs - before, 2, "%zu tail runs", oq_bc_tail_runs - before);
	before = oq_bc_tail_runs;
	run = (oq_bc_quantized){.qm = mc, .folds = 3, .err = &ew};
	cr_assert_eq(oq_bc_measure(mf, NULL, &run, 1, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	oq_bc_sqnr_free(&run.sqnr);
	cr_expect_eq(oq_bc_tail_runs, before);
	cr_assert(et.n == 2 && ew.n == 2 && eb.n == 2);
	for (size_t i = 0; i < 2; i++) {
		cr_expect(!memcmp(&et.d2[i], &ew.d2[i], sizeof et.d2[i]) && !memcmp(&et.r2[i], &ew.r2[i], sizeof et.r2[i]),
			  "sample %zu: tail %.17g, whole run %.17g", i, et.d2[i], ew.d2[i]);
		cr_expect(ew.d2[i] > 0);
		differ |= eb.d2[i] != ew.d2[i];
	}
	cr_expect(differ, "the candidate's errors are the base's");
	oq_bc_prefix_free(&v);
	oq_bc_prefix_free(&u);
	oq_bc_prefix_free(&pl);

	/* a base that kept t1d only */
	seed[0] = node_named(mb->graph, "c2");
	cr_assert_eq(oq_bc_prefix_plan(mb, seed, 1, &pl, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_bc_prefix_union(&pl, 1, &u, &d), OQ_OK, "%s", d.msg);
	run = (oq_bc_quantized){.qm = mb, .folds = 3, .keep = &u};
	cr_assert_eq(oq_bc_measure(mf, NULL, &run, 1, &co, &b, NULL, &d), OQ_OK, "%s", d.msg);
	oq_bc_sqnr_free(&run.sqnr);
	cr_assert_eq(u.state, 1);
	cr_expect_str_eq(mb->graph->values[u.vidx[0]]->name, "t1d");
	cr_assert_eq(oq_bc_prefix_view(&u, mb, mc, &v, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(v.state, -1);
	oq_bc_prefix_free(&v);
	oq_bc_prefix_free(&u);
	oq_bc_prefix_free(&pl);

	oq_bc_outerr_free(&eb);
	oq_bc_outerr_free(&et);
	oq_bc_outerr_free(&ew);
	oq_bc_targets_free(&b);
	free_models(mf, mb, mc, gf, gb, gc);
	rm_rf(dir);
	oq_bc_spill = 1;
}

Test(biascorr, tails_of_a_candidate_with_other_nodes)
{
	view_case(1);
	view_case(0);
}

/*
 * Sample lanes: with several threads the samples after the first run a few at a time on
 * executor clones, each one's sums and SQNRs staged and added in sample order. Nine samples of
 * 64 K values spanning 1e-3 to 1e6 (so double sums depend on their order, and each sample runs
 * long enough for the lanes to overlap) measured at 1 and at 3 threads, float-only (cache) and
 * with two quantized runs: every sum, count and SQNR is the same bit for bit, and the float sums
 * match y = 2 x + 0.5 summed here (to 1e-9), fold f the samples i with i % 2 == f. The one-thread
 * pass keeps the float outputs in memory, the three-thread one in its temporary file: the same
 * outputs read back.
 */
Test(biascorr, empirical_measure_lanes_match_one_at_a_time)
{
	enum { NS = 9, W = 1 << 16 };
	float *xs = malloc(sizeof(float) * NS * W);
	gen_model *gf = conv_2x_w(0, 0.5, W), *gq = conv_2x_w(1, 0.5, W), *gc = conv_2x_w(1, 0.5625, W);
	oq_model *mf = load(gf), *mq = load(gq), *mc = load(gc);
	oq_opts o;
	oq_bc_targets b[2];
	oq_bc_quantized runs[2][2];
	oq_bc_float_cache cache[2] = {{0}, {0}};
	oq_node *rn[1], *qn[1];
	oq_diag d;
	char dir[64] = "/tmp/oq_bc_XXXXXX";
	double hand[2] = {0, 0};

	cr_assert_not_null(xs);
	for (int i = 0; i < NS; i++) /* magnitudes from 1e-3 to 1e6, varying by sample */
		for (int k = 0; k < W; k++)
			xs[(size_t)i * W + k] = (float)(ldexp(1.0 + (k % 97) / 97.0, (k * 7 + i * 5) % 31 - 10) *
			                               (k % 3 ? 1 : -1) / (i + 3));
	oq_diag_init(&d);
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY;
	cr_assert_not_null(mkdtemp(dir));
	write_samples(dir, NS, GEN_SHAPE(1, 1, 1, W), xs, W);
	rn[0] = oq_bc_node_writing(mf->graph, "y");
	qn[0] = oq_bc_node_writing(mq->graph, "y");
	for (int i = 0; i < NS; i++) /* the float y, summed in double */
		for (int k = 0; k < W; k++)
			hand[i % 2] += (double)(2 * xs[(size_t)i * W + k] + 0.5f);
	/* several times: whether lanes overlap, and so whether a commit out of order would show,
	 * depends on scheduling */
	for (int rep = 0; rep < 8; rep++) {
		for (int t = rep ? 1 : 0; t < 2; t++) {
			oq_calib_opts co;
			memset(&co, 0, sizeof co);
			co.source = dir;
			co.threads = t ? 3 : 1;
			oq_bc_spill = t;
			cr_assert_eq(oq_bc_targets_find(mf->graph, &o, &b[t], &d), OQ_OK, "%s", d.msg);
			cr_assert_eq(oq_bc_measure(mf, rn, NULL, 0, &co, &b[t], &cache[t], &d), OQ_OK, "%s", d.msg);
			oq_bc_spill = 1;
			for (int i = 0; i < NS; i++)
				cr_expect(t ? cache[t].at[i] != SIZE_MAX && !cache[t].out[i].data
				            : cache[t].at[i] == SIZE_MAX && cache[t].out[i].data,
				          "sample %d: %s", i, t ? "not in the file" : "not in memory");
			cr_expect_eq(oq_bc_measure_lanes, t ? 3 : 1, "%zu at a time", oq_bc_measure_lanes);
			runs[t][0] = (oq_bc_quantized){.qm = mq, .nodes = qn, .folds = 3};
			runs[t][1] = (oq_bc_quantized){.qm = mc, .folds = 2};
			cr_assert_eq(oq_bc_measure(mf, rn, runs[t], 2, &co, &b[t], &cache[t], &d), OQ_OK, "%s", d.msg);
			cr_expect_eq(oq_bc_measure_lanes, t ? 3 : 1, "%zu at a time", oq_bc_measure_lanes);
		}
		for (int f = 0; f < 2; f++) {
			cr_expect(fabs(b[0].v[0].sum_f[f] - hand[f]) <= 1e-9 * fabs(hand[f]), "fold %d: %.17g vs hand %.17g",
			          f, b[0].v[0].sum_f[f], hand[f]);
			cr_expect_eq(b[0].v[0].n_f[f], (f ? 4u : 5u) * W);
			cr_expect(b[0].v[0].sum_f[f] == b[1].v[0].sum_f[f], "fold %d float: %a vs %a", f,
			          b[0].v[0].sum_f[f], b[1].v[0].sum_f[f]);
			cr_expect(b[0].v[0].sum_q[f] == b[1].v[0].sum_q[f], "fold %d quantized: %a vs %a", f,
			          b[0].v[0].sum_q[f], b[1].v[0].sum_q[f]);
			cr_expect_eq(b[0].v[0].n_q[f], b[1].v[0].n_q[f]);
			for (int r = 0; r < 2; r++) {
				cr_expect(runs[0][r].sqnr.sum[f] == runs[1][r].sqnr.sum[f] &&
				              runs[0][r].sqnr.min[f] == runs[1][r].sqnr.min[f] &&
				              runs[0][r].sqnr.n[f] == runs[1][r].sqnr.n[f],
				          "run %d fold %d: sum %a vs %a", r, f, runs[0][r].sqnr.sum[f], runs[1][r].sqnr.sum[f]);
			}
		}
		cr_expect(b[0].v[0].sum_q[0] != b[0].v[0].sum_f[0]); /* the quantized model did run */
		cr_expect_eq(runs[0][1].sqnr.n[0], 0);           /* fold 1 only */
		for (int r = 0; r < 2; r++)
			for (int i = 0; i < NS; i++)
				cr_expect(!memcmp(&runs[0][r].sqnr.per[i], &runs[1][r].sqnr.per[i], sizeof(double)),
				          "run %d sample %d", r, i);
		for (int i = 0; i < NS; i++) {
			oq_rt got[2] = {{0}, {0}};
			const oq_rt *o2[2];
			for (int t = 0; t < 2; t++)
				cr_assert_eq(oq_bc_float_cache_get(&cache[t], (size_t)i, &got[t], &o2[t], &d), OQ_OK, "%s", d.msg);
			cr_expect(o2[0] == cache[0].out + i && o2[1] == &got[1] && o2[1]->nbytes == W * sizeof(float) &&
			          !memcmp(o2[0]->data, o2[1]->data, W * sizeof(float)), "cached output %d", i);
			oq_rt_release(&got[1]);
		}
		for (int r = 0; r < 2; r++)
			oq_bc_sqnr_free(&runs[1][r].sqnr);
		oq_bc_float_cache_free(&cache[1]);
		oq_bc_targets_free(&b[1]);
	}
	for (int r = 0; r < 2; r++)
		oq_bc_sqnr_free(&runs[0][r].sqnr);
	oq_bc_float_cache_free(&cache[0]);
	oq_bc_targets_free(&b[0]);
	{
		/* no temporary file can be made: the outputs stay in memory, the measurement the same */
		const char *keep = getenv("TMPDIR");
		char *saved = keep ? strdup(keep) : NULL;
		oq_calib_opts co;
		memset(&co, 0, sizeof co);
		co.source = dir;
		co.threads = 3;
		setenv("TMPDIR", "/nonexistent-oq-dir", 1);
		cr_assert_eq(oq_bc_targets_find(mf->graph, &o, &b[1], &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_bc_measure(mf, rn, NULL, 0, &co, &b[1], &cache[1], &d), OQ_OK, "%s", d.msg);
		if (saved)
			setenv("TMPDIR", saved, 1);
		else
			unsetenv("TMPDIR");
		free(saved);
		for (int i = 0; i < NS; i++)
			cr_expect(cache[1].state == 1 && cache[1].at[i] == SIZE_MAX && cache[1].out[i].data, "sample %d", i);
		for (int f = 0; f < 2; f++)
			cr_expect(fabs(b[1].v[0].sum_f[f] - hand[f]) <= 1e-9 * fabs(hand[f]), "no file: fold %d", f);
		oq_bc_float_cache_free(&cache[1]);
		oq_bc_targets_free(&b[1]);
	}
	free_models(mf, mq, mc, gf, gq, gc);
	free(xs);
	rm_rf(dir);
}

/*
 * oq_bc_sum_f32: the order measure.h fixes, computed here element by element, against both
 * loops, bit for bit, over lengths around the eight-element steps; +-1e20 in lane 0 swallow the
 * small values a single chain adds beside them, so another order gives other bits (checked).
 */
static double want_of(const float *v, size_t n)
{
	double acc[8] = {0}, w;
	size_t j = 0;
	for (; j + 8 <= n; j += 8)
		for (size_t k = 0; k < 8; k++)
			acc[k] += (double)v[j + k];
	w = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
	for (; j < n; j++)
		w += (double)v[j];
	return w;
}

Test(biascorr, channel_sum_order)
{
	float v[70];

	for (size_t i = 0; i < 70; i++)
		v[i] = i % 8 ? (i % 2 ? -1.0f : 1.0f) * (1.0f + (float)i * 0x1p-20f) : i % 16 ? -1e20f : 1e20f;
	v[5] = -0.0f;
	for (size_t n = 0; n <= 70; n++) {
		double want, seq = 0;
		for (size_t i = 0; i < n; i++)
			seq += (double)v[i];
		if (n == 64) /* the order shows: one chain loses the small values beside 1e20 */
			cr_assert(seq != want_of(v, n), "n %zu: order-insensitive data", n);
		want = want_of(v, n);
		for (int simd = 0; simd < 3; simd++) { /* plain, the best (AVX-512), at most AVX2 */
			double got;
			oq_bc_sum_simd = simd;
			got = oq_bc_sum_f32(v, n);
			cr_expect(memcmp(&got, &want, sizeof got) == 0, "n %zu simd %d: %.17g, want %.17g", n,
				  simd, got, want);
		}
	}
	oq_bc_sum_simd = 1;
}

/*
 * Bias correction's float side taken during calibration (pre.h). x [1, 2, 3, 3] -> c1 (1 x 1,
 * 2 -> 4, bias) -> t -> Relu -> r -> c2 (3 x 3, pad 1, 4 -> 2, bias) -> y. Calibration observes
 * x and r only (need_only), so its executor would fuse the Relu into c1 and never hand t over
 * were it not for the tap's want.
 */
static gen_model *pre_model(void)
{
	double w1[8], b1[4], w2[72], b2[2];
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;

	for (int k = 0; k < 8; k++)
		w1[k] = (k % 3 - 1) * 0.75 + k * 0.125;
	for (int k = 0; k < 4; k++)
		b1[k] = 0.25 * k - 0.375;
	for (int k = 0; k < 72; k++)
		w2[k] = ((k * 7) % 11 - 5) * 0.0625;
	b2[0] = 0.5;
	b2[1] = -0.25;
	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_init(g, mg, "W1", OQ_DT_FLOAT, GEN_SHAPE(4, 2, 1, 1), w1);
	gen_init(g, mg, "B1", OQ_DT_FLOAT, GEN_SHAPE(4), b1);
	gen_init(g, mg, "W2", OQ_DT_FLOAT, GEN_SHAPE(2, 4, 3, 3), w2);
	gen_init(g, mg, "B2", OQ_DT_FLOAT, GEN_SHAPE(2), b2);
	gen_node(g, mg, "Conv", "c1", "x,W1,B1", "t");
	gen_node(g, mg, "Relu", "relu", "t", "r");
	n = gen_node(g, mg, "Conv", "c2", "r,W2,B2", "y");
	gen_attr_ints(g, n, "pads", GEN_SHAPE(1, 1, 1, 1));
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	return g;
}

/* 40 samples of pre_model's input (more than OQ_MEASURE_SAMPLES: the measurements thin them). */
static void pre_samples(const char *dir)
{
	static float xs[40 * 18];
	uint32_t h = 12345;

	for (size_t k = 0; k < 40 * 18; k++) {
		h = h * 1664525u + 1013904223u;
		xs[k] = (float)((int)(h >> 20) - 2048) / 1024.0f;
	}
	write_samples(dir, 40, GEN_SHAPE(1, 2, 3, 3), xs, 18);
}

/* b's float side equals ref's, bit for bit. */
static void expect_same_float_side(const oq_bc_targets *b, const oq_bc_targets *ref, const char *what)
{
	cr_assert_eq(b->n, ref->n);
	cr_expect_eq(b->n_samples, ref->n_samples, "%s", what);
	cr_expect_eq(b->n_nonfinite, ref->n_nonfinite, "%s", what);
	for (size_t l = 0; l < b->n; l++) {
		const oq_bc_target *x = &b->v[l], *y = &ref->v[l];
		cr_expect_eq(x->failed, y->failed, "%s: layer %zu", what, l);
		cr_expect(!memcmp(x->sum_f, y->sum_f, OQ_BC_FOLDS * x->M * sizeof *x->sum_f), "%s: layer %zu's sums",
			  what, l);
		cr_expect(!memcmp(x->n_f, y->n_f, sizeof x->n_f), "%s: layer %zu's counts", what, l);
		cr_expect(!x->sum_fp == !y->sum_fp, "%s", what);
		if (x->sum_fp && y->sum_fp)
			cr_expect(!memcmp(x->sum_fp, y->sum_fp, OQ_BC_FOLDS * x->M * sizeof *x->sum_fp),
				  "%s: layer %zu's probe sums", what, l);
		cr_expect(!memcmp(x->n_fp, y->n_fp, sizeof x->n_fp), "%s", what);
	}
}

/* The outputs of caches a and b (state 1), equal bit for bit. */
static void expect_same_outputs(const oq_bc_float_cache *a, const oq_bc_float_cache *b, size_t n)
{
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(a->state, 1);
	cr_assert_eq(b->state, 1);
	cr_assert_eq(a->n, n);
	cr_assert_eq(b->n, n);
	cr_assert_eq(a->nout, 1);
	cr_assert_eq(b->nout, 1);
	for (size_t i = 0; i < n; i++) {
		oq_rt bx = {0}, by = {0};
		const oq_rt *x, *y;
		cr_assert_eq(oq_bc_float_cache_get(a, i, &bx, &x, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_bc_float_cache_get(b, i, &by, &y, &d), OQ_OK, "%s", d.msg);
		cr_expect(x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes), "sample %zu", i);
		oq_rt_release(&bx);
		oq_rt_release(&by);
	}
}

/*
 * Calibration with the pre's tap, then the float-only measurement: it runs no float model
 * (the executor's whole runs do not move) and leaves every layer's float sums, counts and
 * probe sums and the kept outputs bit for bit as the measurement that runs the float model
 * over the same 32 of the 40 samples; at 1 and 2 threads (sample lanes). The pre is then spent:
 * a second float-only measurement runs the model. A pre calibrated on other samples
 * (--calib-limit 20) does not cover it: the float model runs, with the same results. The pre's
 * second set, the outputs alone on the first 8 samples (the same in both), serves a
 * measurement of those (no layers) likewise.
 */
Test(biascorr, pre_replays_the_float_run_bit_for_bit)
{
	gen_model *gf = pre_model();
	oq_model *mf = load(gf);
	char dir[64] = "/tmp/oq_bcpre_XXXXXX";
	oq_diag d;
	oq_opts o;

	oq_diag_init(&d);
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY;
	cr_assert_not_null(mkdtemp(dir));
	pre_samples(dir);
	for (int threads = 1; threads <= 2; threads++)
		for (int limit = 0; limit <= 20; limit += 20) {
			oq_calib_opts co, cc, cm;
			oq_bc_targets ref, b;
			oq_bc_float_cache cref = {0}, c = {0};
			oq_bc_pre *pre = NULL;
			oq_node *rn[2];
			oq_ranges r;
			uint8_t *need = oq_calloc(mf->graph->n_values + 1, 1);
			size_t runs;

			memset(&co, 0, sizeof co);
			co.source = dir;
			co.threads = threads;
			cr_assert_eq(oq_bc_targets_find(mf->graph, &o, &ref, &d), OQ_OK, "%s", d.msg);
			cr_assert_eq(oq_bc_targets_find(mf->graph, &o, &b, &d), OQ_OK, "%s", d.msg);
			cr_assert_eq(b.n, 2);
			for (size_t l = 0; l < 2; l++)
				rn[l] = oq_bc_node_writing(mf->graph, b.v[l].measured);
			cr_assert_eq(oq_bc_measure(mf, rn, NULL, 0, &co, &ref, &cref, &d), OQ_OK, "%s", d.msg);
			cr_assert_eq(cref.state, 1);
			cr_assert_eq(cref.n, 32);

			cc = co;
			cc.limit = (size_t)limit;
			cr_assert_eq(oq_bc_pre_new(mf->graph, &o, &cc, 8, &pre, &d), OQ_OK, "%s", d.msg);
			cr_assert_not_null(need);
			need[oq_graph_value(mf->graph, "x")->index] = 1;
			need[oq_graph_value(mf->graph, "r")->index] = 1;
			cc.need_only = 1;
			cc.hist_need = need;
			cc.tap = oq_bc_pre_tap(pre);
			cr_assert_eq(oq_calibrate(mf, &cc, &r, &d), OQ_OK, "%s", d.msg);
			oq_ranges_free(&r);

			cm = co;
			cm.bc_pre = pre;
			runs = oq_exec_runs(0);
			cr_assert_eq(oq_bc_measure(mf, rn, NULL, 0, &cm, &b, &c, &d), OQ_OK, "%s", d.msg);
			cr_expect_eq(oq_exec_runs(0) - runs, limit ? 32 : 0, "threads %d, limit %d: %zu float runs",
				     threads, limit, oq_exec_runs(0) - runs);
			expect_same_float_side(&b, &ref, limit ? "other samples" : "replayed");
			expect_same_outputs(&c, &cref, 32);
			{ /* the first 8 samples' outputs alone */
				oq_bc_targets none = {0};
				oq_bc_float_cache c8 = {0}, r8 = {0};
				oq_calib_opts c8o = cm;
				c8o.limit = 8;
				runs = oq_exec_runs(0);
				cr_assert_eq(oq_bc_measure(mf, NULL, NULL, 0, &c8o, &none, &c8, &d), OQ_OK, "%s", d.msg);
				cr_expect_eq(oq_exec_runs(0) - runs, 0, "limit %d: %zu float runs of 8", limit,
					     oq_exec_runs(0) - runs);
				c8o.bc_pre = NULL;
				cr_assert_eq(oq_bc_measure(mf, NULL, NULL, 0, &c8o, &none, &r8, &d), OQ_OK, "%s", d.msg);
				expect_same_outputs(&c8, &r8, 8);
				oq_bc_float_cache_free(&c8);
				oq_bc_float_cache_free(&r8);
				oq_bc_targets_free(&none);
			}
			if (!limit) { /* spent */
				oq_bc_float_cache_free(&c);
				runs = oq_exec_runs(0);
				cr_assert_eq(oq_bc_measure(mf, rn, NULL, 0, &cm, &b, &c, &d), OQ_OK, "%s", d.msg);
				cr_expect_eq(oq_exec_runs(0) - runs, 32, "a spent pre replayed again");
				expect_same_float_side(&b, &ref, "after the pre");
			}
			oq_bc_float_cache_free(&c);
			oq_bc_float_cache_free(&cref);
			oq_bc_pre_free(pre);
			oq_bc_targets_free(&b);
			oq_bc_targets_free(&ref);
			free(need);
		}
	oq_model_free(mf);
	gen_free(gf);
	rm_rf(dir);
}

/* Quantizes pre_model on dir's 40 samples (empirical bias correction, 2 threads) into out; the
 * executor's whole runs it made. */
static size_t pre_quantize(const char *in, const char *dir, const char *out)
{
	oq_pipeline_opts po;
	oq_diag d;
	size_t runs = oq_exec_runs(0);

	oq_diag_init(&d);
	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.in_path = in;
	po.out_path = out;
	po.calib.source = dir;
	po.calib.threads = 2;
	po.q.prefer = OQ_PREFER_ACCURACY;
	po.bias_correction = OQ_BC_EMPIRICAL;
	po.quiet = 1;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	return oq_exec_runs(0) - runs;
}

/* The pipeline with the pre and without: the same model, bit for bit, and the float run of
 * bias correction's 32 samples saved. */
Test(biascorr, pre_pipeline_same_model)
{
	gen_model *g = pre_model();
	char dir[64] = "/tmp/oq_bcpp_XXXXXX", cal[96], in[96], pa[96], pb[96];
	size_t with, without;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cal, sizeof cal, "%s/calib", dir);
	snprintf(in, sizeof in, "%s/m.onnx", dir);
	snprintf(pa, sizeof pa, "%s/a.onnx", dir);
	snprintf(pb, sizeof pb, "%s/b.onnx", dir);
	cr_assert_eq(mkdir(cal, 0755), 0);
	pre_samples(cal);
	cr_assert_eq(gen_write(g, in), 0);
	with = pre_quantize(in, cal, pa);
	oq_bc_pre_use = 0;
	without = pre_quantize(in, cal, pb);
	oq_bc_pre_use = 1;
	cr_expect_eq(without - with, 32, "whole runs: %zu with the pre, %zu without", with, without);
	cr_expect(same_file(pa, pb), "the models differ");
	gen_free(g);
	rm_rf(dir);
}
