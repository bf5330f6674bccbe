/*
 * test_biascorr.c - bias correction: statistics (calib/biascorr.c) and the
 * bias update (passes/bias_correct.c).
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

#include "bias_correct.h"
#include "biascorr.h"
#include "exec.h"
#include "gen_model.h"
#include "qweight.h"

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
	oq_bc_stats s;
	oq_bc_collect *c = NULL;
	oq_diag d;

	oq_diag_init(&d);
	oq_opts_init(&o);
	cr_assert_eq(oq_bias_correct_plan(m->graph, &o, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s.n, want_layers);
	cr_assert_eq(oq_bc_collect_new(m->graph, &s, &c, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(oq_bc_observe(c, m->graph->inputs[0], &xs[i]), 0);
	for (size_t i = 0; i < s.n; i++)
		cr_assert(!s.v[i].failed, "layer %zu failed", i);
	cr_assert_eq(oq_bias_correct(m->graph, &o, &s, NULL, &d), OQ_OK, "%s", d.msg);
	oq_bc_collect_free(c);
	oq_bc_stats_free(&s);
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
	oq_exec_opts eo = {1};
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
 * Empirical mode (calib/bcemp.c): a 1x1 Conv y = 2x + 0.5 on x [1, 1, 1, 4],
 * and its "quantized" model with x behind a uint8 Q/DQ of scale 0.25, zero
 * point 0 (ties to even). Samples and what the quantized model sees:
 *   x1 = {0.125, 0.375, 1, 0.625} -> {0, 0.5, 1, 0.5}    (0.5->0, 1.5->2, 2.5->2)
 *   x2 = {0.625, 0, 0, 0}         -> {0.5, 0, 0, 0}
 * Output sums: float 6.25 + 3.25 = 9.5, quantized 6 + 3 = 9, over 8
 * positions: shift -0.0625, so the corrected bias is 0.5625. Output SQNR:
 * sample 1 sum y^2 = 11.4375, sum err^2 = 0.1875; sample 2 3.8125 and
 * 0.0625: both 10 log10(61) dB.
 */
#include "bcemp.h"
#include "npy.h"

static gen_model *conv_2x(int quantized)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 4));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(2));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(0.5));
	if (quantized) {
		gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.25));
		gen_init(g, mg, "z", OQ_DT_UINT8, 0, NULL, GEN_VALS(0));
		gen_node(g, mg, "QuantizeLinear", "q", "x,s,z", "xq");
		gen_node(g, mg, "DequantizeLinear", "dq", "xq,s,z", "xd");
		gen_node(g, mg, "Conv", "conv", "xd,W,B", "y");
	} else {
		gen_node(g, mg, "Conv", "conv", "x,W,B", "y");
	}
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 4));
	return g;
}

Test(biascorr, empirical_measure_and_apply_hand)
{
	static const float x1[] = {0.125f, 0.375f, 1, 0.625f}, x2[] = {0.625f, 0, 0, 0};
	gen_model *gf = conv_2x(0), *gq = conv_2x(1);
	oq_model *mf = load(gf), *mq = load(gq);
	oq_calib_opts co;
	oq_opts o;
	oq_bce b;
	oq_node *rn[1], *qn[1];
	oq_diag d;
	char dir[64] = "/tmp/oq_bce_XXXXXX", path[128];
	const int64_t dims[] = {1, 1, 1, 4};

	oq_diag_init(&d);
	oq_opts_init(&o);
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/000.npy", dir);
	cr_assert_eq(oq_npy_write(path, OQ_DT_FLOAT, 4, dims, x1, sizeof x1, &d), OQ_OK, "%s", d.msg);
	snprintf(path, sizeof path, "%s/001.npy", dir);
	cr_assert_eq(oq_npy_write(path, OQ_DT_FLOAT, 4, dims, x2, sizeof x2, &d), OQ_OK, "%s", d.msg);

	cr_assert_eq(oq_bias_correct_targets(mf->graph, &o, &b, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(b.n, 1);
	cr_expect_str_eq(b.v[0].node, "y");
	cr_expect_str_eq(b.v[0].measured, "y");
	cr_expect_eq(b.v[0].M, 1);
	rn[0] = oq_bias_correct_node(mf->graph, "y");
	qn[0] = oq_bias_correct_node(mq->graph, "y");
	cr_assert(rn[0] && qn[0]);
	memset(&co, 0, sizeof co);
	co.source = dir;
	co.threads = 1;
	cr_assert_eq(oq_bce_measure(mf, mq, rn, qn, &co, &b, &d), OQ_OK, "%s", d.msg);
	cr_assert(!b.v[0].failed);
	cr_expect_eq(b.v[0].n_f, 8);
	cr_expect_eq(b.v[0].n_q, 8);
	cr_expect_eq(b.v[0].sum_f[0], 9.5);
	cr_expect_eq(b.v[0].sum_q[0], 9.0);
	cr_expect(fabs(b.sqnr_min - 10 * log10(61.0)) < 1e-9, "min %.12g", b.sqnr_min);
	cr_expect(fabs(b.sqnr_mean - 10 * log10(61.0)) < 1e-9, "mean %.12g", b.sqnr_mean);

	/* fold the shift into the float model's bias */
	b.v[0].corr[0] = b.v[0].sum_q[0] / 8 - b.v[0].sum_f[0] / 8;
	cr_expect_eq(b.v[0].corr[0], -0.0625);
	cr_assert_eq(oq_bias_correct_apply(mf->graph, &b, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(oq_tensor_get(input_init(node_named(mf->graph, "conv"), 2), 0), 0.5625);

	oq_bce_free(&b);
	oq_model_free(mf);
	oq_model_free(mq);
	gen_free(gf);
	gen_free(gq);
	snprintf(path, sizeof path, "rm -rf '%s'", dir);
	cr_expect_eq(system(path), 0);
}
