/*
 * test_exec_steps.c - the executor's fused epilogue steps (calib/exec/plan.c
 * plan_fusion, applied by calib/kernels/linalg/conv_epilogue.c): element-wise ops after a
 * Conv [-> BN] [-> activation] absorbed into its group - a residual Add
 * (ResNet), Mul / Add / Sub / Div by scalar or per-channel constants and a
 * HardSwish written as Add, Clip, Mul, Div (PP-LCNet), x * Sigmoid(x).
 *
 * Each model is built with gen_model.h and run fused (no observer), unfused
 * (an observer attached: every node on its own) and with 2 threads. The
 * epilogue uses the element-wise kernels' float expressions, so fused ==
 * unfused bit for bit, on the AVX-512 engine and with oq_linalg_no_avx512
 * (the SSE / scalar epilogue); and fused is within 1e-5 (relative to the
 * largest magnitude) of a double reference computed here from the same
 * parameters by the op definitions. A residual whose shape differs from the
 * Conv output at run time (a broadcast [1, M, 1, 1] input) makes the group
 * run node by node, with the same results.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/kernel.h"
#include "calib/kernels/linalg/linalg.h"
#include "src/quant/quant_math.h"

static uint64_t rng = 1;

/* Uniform in [-1, 1), representable as float. */
static double frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static double *rand_vec(size_t n, double scale)
{
	double *v = calloc(n, sizeof *v);
	cr_assert(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (double)(float)(frand() * scale);
	return v;
}

/* The chain after the Conv (and BN when bn). */
enum {
	CH_RESIDUAL_RELU,   /* Add(t, r) -> Relu; r a graph input of the output's shape */
	CH_RESIDUAL_REV,    /* Sub(r, t) (the tensor on the left) */
	CH_LCNET,           /* Mul(s, t) -> Add(., per-channel) -> x*clip(x+3,0,6)/6 -> Mul(., 0.5) -> Sub(1.5, .) */
	CH_SILU,            /* Mul(t, Sigmoid(t)) */
	CH_BROADCAST,       /* Add(t, r) with r [1, M, 1, 1]: shape differs at run time */
	CH_QDQ,             /* a quantized HardSwish unit as onnxq writes it (see build) */
};

typedef struct model {
	int64_t c, h, w, m, k, stride, pad, group;
	int bn;
	int chain;
	/* parameters as doubles (float values) */
	double *wt, *b, *bs, *bb, *bm, *bv, *pc;
	double s_mul;
} model;

static int64_t odim(const model *s, int64_t in)
{
	return (in + 2 * s->pad - s->k) / s->stride + 1;
}

static gen_model *build(model *s)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	int64_t cg = s->c / s->group, oh = odim(s, s->h), ow = odim(s, s->w);
	const char *last = "c";

	s->wt = rand_vec((size_t)(s->m * cg * s->k * s->k), 1.0 / sqrt((double)(cg * s->k * s->k)));
	s->b = rand_vec((size_t)s->m, 0.5);
	s->bs = rand_vec((size_t)s->m, 0.5);
	s->bb = rand_vec((size_t)s->m, 0.5);
	s->bm = rand_vec((size_t)s->m, 0.3);
	s->bv = rand_vec((size_t)s->m, 0.4);
	s->pc = rand_vec((size_t)s->m, 2.0);
	for (int64_t i = 0; i < s->m; i++) {
		s->bs[i] += 1.0;
		s->bv[i] += 0.6;
	}
	s->s_mul = (double)1.75f;
	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, s->c, s->h, s->w));
	if (s->chain == CH_RESIDUAL_RELU || s->chain == CH_RESIDUAL_REV)
		gen_input(g, gp, "r", OQ_DT_FLOAT, GEN_SHAPE(1, s->m, oh, ow));
	if (s->chain == CH_BROADCAST)
		gen_input(g, gp, "r", OQ_DT_FLOAT, GEN_SHAPE(1, s->m, 1, 1));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(s->m, cg, s->k, s->k), s->wt);
	gen_init(g, gp, "B", OQ_DT_FLOAT, GEN_SHAPE(s->m), s->b);
	n = gen_node(g, gp, "Conv", "conv", "x,W,B", "c");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){s->pad, s->pad, s->pad, s->pad});
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){s->stride, s->stride});
	gen_attr_int(g, n, "group", s->group);
	if (s->bn) {
		gen_init(g, gp, "bs", OQ_DT_FLOAT, GEN_SHAPE(s->m), s->bs);
		gen_init(g, gp, "bb", OQ_DT_FLOAT, GEN_SHAPE(s->m), s->bb);
		gen_init(g, gp, "bm", OQ_DT_FLOAT, GEN_SHAPE(s->m), s->bm);
		gen_init(g, gp, "bv", OQ_DT_FLOAT, GEN_SHAPE(s->m), s->bv);
		n = gen_node(g, gp, "BatchNormalization", "bn", "c,bs,bb,bm,bv", "t");
		gen_attr_float(g, n, "epsilon", 1e-3f);
		last = "t";
	}
	switch (s->chain) {
	case CH_RESIDUAL_RELU: {
		char in[16];
		snprintf(in, sizeof in, "%s,r", last);
		gen_node(g, gp, "Add", "add", in, "s");
		gen_node(g, gp, "Relu", "relu", "s", "y");
		break;
	}
	case CH_RESIDUAL_REV: {
		char in[16];
		snprintf(in, sizeof in, "r,%s", last);
		gen_node(g, gp, "Sub", "sub", in, "y");
		break;
	}
	case CH_BROADCAST: {
		char in[16];
		snprintf(in, sizeof in, "%s,r", last);
		gen_node(g, gp, "Add", "add", in, "y");
		break;
	}
	case CH_LCNET: {
		char in[16];
		Onnx__NodeProto *k;
		gen_init(g, gp, "sm", OQ_DT_FLOAT, GEN_SHAPE(1), &s->s_mul);
		gen_init(g, gp, "pc", OQ_DT_FLOAT, GEN_SHAPE(s->m, 1, 1), s->pc);
		gen_init(g, gp, "three", OQ_DT_FLOAT, 0, NULL, GEN_VALS(3));
		gen_init(g, gp, "zero", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0));
		gen_init(g, gp, "six", OQ_DT_FLOAT, 0, NULL, GEN_VALS(6));
		gen_init(g, gp, "half", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(0.5));
		/* 1.5 from a Constant node's value_float */
		k = gen_node(g, gp, "Constant", "k15", "", "k15");
		gen_attr_float(g, k, "value_float", 1.5f);
		snprintf(in, sizeof in, "sm,%s", last);
		gen_node(g, gp, "Mul", "mul0", in, "u0");
		gen_node(g, gp, "Add", "add0", "u0,pc", "u1");
		gen_node(g, gp, "Add", "add3", "u1,three", "u2");
		gen_node(g, gp, "Clip", "clip", "u2,zero,six", "u3");
		gen_node(g, gp, "Mul", "gate", "u1,u3", "u4");
		gen_node(g, gp, "Div", "div6", "u4,six", "u5");
		gen_node(g, gp, "Mul", "mulh", "u5,half", "u6");
		gen_node(g, gp, "Sub", "sub", "k15,u6", "y");
		break;
	}
	case CH_QDQ: {
		/* t -> Q/DQ (uint8, zp 128: t beyond +-3 saturates) -> Add(DQ(int8 96, 1/32) = 3) -> Q/DQ (uint8,
		 * [0, 6]: the Clip folded into the Q) -> Mul with t's DQ -> Q (int8, zp -5) -> DQ with the
		 * scale / 6 (a Div folded) -> Add(DQ(per-channel int8 constants, 0.05)) -> Q (int8, zp 3)
		 * -> DQ with zp 1: every step a QDQ or a constant, one group */
		double *pq = calloc((size_t)s->m, sizeof *pq);
		char in[32];
		cr_assert(pq);
		for (int64_t i = 0; i < s->m; i++)
			pq[i] = (double)((i * 37) % 201 - 100);
		gen_init(g, gp, "s1", OQ_DT_FLOAT, 0, NULL, GEN_VALS(6.0 / 255));
		gen_init(g, gp, "z1", OQ_DT_UINT8, 0, NULL, GEN_VALS(128));
		gen_init(g, gp, "k3q", OQ_DT_INT8, 0, NULL, GEN_VALS(96));
		gen_init(g, gp, "k3s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1.0 / 32));
		gen_init(g, gp, "k3z", OQ_DT_INT8, 0, NULL, GEN_VALS(0));
		gen_init(g, gp, "s2", OQ_DT_FLOAT, 0, NULL, GEN_VALS(6.0 / 255));
		gen_init(g, gp, "s3", OQ_DT_FLOAT, 0, NULL, GEN_VALS(36.0 / 255));
		gen_init(g, gp, "z3", OQ_DT_INT8, 0, NULL, GEN_VALS(-5));
		gen_init(g, gp, "s4", OQ_DT_FLOAT, 0, NULL, GEN_VALS(6.0 / 255));
		gen_init(g, gp, "pq", OQ_DT_INT8, GEN_SHAPE(s->m, 1, 1), pq);
		gen_init(g, gp, "ps", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.05));
		gen_init(g, gp, "s5", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.05));
		gen_init(g, gp, "z5", OQ_DT_INT8, 0, NULL, GEN_VALS(3));
		gen_init(g, gp, "z6", OQ_DT_INT8, 0, NULL, GEN_VALS(1));
		free(pq);
		snprintf(in, sizeof in, "%s,s1,z1", last);
		gen_node(g, gp, "QuantizeLinear", "q1", in, "c1");
		gen_node(g, gp, "DequantizeLinear", "dq1", "c1,s1,z1", "d1");
		gen_node(g, gp, "DequantizeLinear", "dqk", "k3q,k3s,k3z", "k3");
		gen_node(g, gp, "Add", "add3", "d1,k3", "u1");
		gen_node(g, gp, "QuantizeLinear", "q2", "u1,s2", "c2");
		gen_node(g, gp, "DequantizeLinear", "dq2", "c2,s2", "d2");
		gen_node(g, gp, "Mul", "gate", "d1,d2", "u3");
		gen_node(g, gp, "QuantizeLinear", "q3", "u3,s3,z3", "c3");
		gen_node(g, gp, "DequantizeLinear", "dq3", "c3,s4,z3", "d3");
		gen_node(g, gp, "DequantizeLinear", "dqp", "pq,ps", "pc");
		gen_node(g, gp, "Add", "addp", "d3,pc", "u5");
		gen_node(g, gp, "QuantizeLinear", "q5", "u5,s5,z5", "c5");
		gen_node(g, gp, "DequantizeLinear", "dq5", "c5,s5,z6", "y");
		break;
	}
	case CH_SILU: {
		char in[16];
		gen_node(g, gp, "Sigmoid", "sig", last, "g");
		snprintf(in, sizeof in, "g,%s", last);
		gen_node(g, gp, "Mul", "silu", in, "y");
		break;
	}
	default:
		break;
	}
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, s->m, oh, ow));
	return g;
}

static void free_model(model *s)
{
	free(s->wt);
	free(s->b);
	free(s->bs);
	free(s->bb);
	free(s->bm);
	free(s->bv);
	free(s->pc);
}

/* The chain in double from the op definitions; r the residual (or NULL). */
static double *reference(const model *s, const oq_rt *x, const oq_rt *r)
{
	int64_t cg = s->c / s->group, mg = s->m / s->group, oh = odim(s, s->h), ow = odim(s, s->w);
	double *y = calloc((size_t)(s->m * oh * ow), sizeof *y);
	const float *xv = x->data, *rv = r ? r->data : NULL;

	cr_assert(y);
	for (int64_t m = 0; m < s->m; m++)
		for (int64_t i = 0; i < oh; i++)
			for (int64_t j = 0; j < ow; j++) {
				double v = s->b[m], u;
				size_t o = (size_t)((m * oh + i) * ow + j);
				for (int64_t c = 0; c < cg; c++)
					for (int64_t p = 0; p < s->k; p++)
						for (int64_t q = 0; q < s->k; q++) {
							int64_t ih = i * s->stride - s->pad + p, iw = j * s->stride - s->pad + q;
							if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
								continue;
							v += xv[((m / mg * cg + c) * s->h + ih) * s->w + iw] *
							     s->wt[((m * cg + c) * s->k + p) * s->k + q];
						}
				if (s->bn)
					v = (v - s->bm[m]) / sqrt(s->bv[m] + (double)1e-3f) * s->bs[m] + s->bb[m];
				switch (s->chain) {
				case CH_RESIDUAL_RELU:
					v += rv[o];
					v = v < 0 ? 0 : v;
					break;
				case CH_RESIDUAL_REV:
					v = rv[o] - v;
					break;
				case CH_BROADCAST:
					v += rv[m];
					break;
				case CH_LCNET:
					v = v * s->s_mul + s->pc[m];
					u = v + 3 < 0 ? 0 : v + 3 > 6 ? 6 : v + 3;
					v = 1.5 - v * u / 6 * 0.5;
					break;
				case CH_SILU:
					v = v / (1 + exp(-v));
					break;
				default:
					break;
				}
				y[o] = v;
			}
	return y;
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	(void)ctx;
	(void)v;
	(void)t;
	return 0;
}

/* One run; observed: every node on its own. Returns the number of fused groups. */
static size_t run(oq_model *m, int threads, int observed, const oq_rt *in, size_t n_in, oq_rt *y)
{
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	size_t nf;

	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec_new: %s", d.msg);
	if (observed)
		oq_exec_set_observer(e, observe, NULL);
	cr_assert_eq(oq_exec_run(e, in, n_in, y, 1, &d), OQ_OK, "run: %s", d.msg);
	nf = oq_exec_n_fused(e);
	oq_exec_free(e);
	return nf;
}

/* The calls a profiled run of m made: the fused group's head when the whole chain is one group, and
 * the two DequantizeLinear of constants (computed every run: the plan folds them with fold_dq only). */
static void expect_one_call(oq_model *m, const oq_rt *in, size_t n_in, const char *what)
{
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 1};
	oq_exec_prof *pr = NULL;
	oq_diag d;
	oq_rt y;
	size_t n = 0;

	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec_new: %s", d.msg);
	oq_exec_profile(e, 1);
	cr_assert_eq(oq_exec_run(e, in, n_in, &y, 1, &d), OQ_OK, "run: %s", d.msg);
	cr_assert_eq(oq_exec_profile_get(e, &pr, &n), OQ_OK);
	cr_expect(n == 3 && !strcmp(pr[0].node->name, "conv") && !strcmp(pr[1].node->name, "dqk") &&
			  !strcmp(pr[2].node->name, "dqp"),
		  "%s: %zu calls, the first '%s' (%s)", what, n, n ? pr[0].node->name : "", n ? pr[0].label : "");
	free(pr);
	oq_rt_release(&y);
	oq_exec_free(e);
}

static void same_bits(const oq_rt *a, const oq_rt *b, const char *what)
{
	cr_assert(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes), "%s: not bit-identical", what);
}

/* The protocol of the file comment for model s; want_fused: oq_exec_n_fused of the fused run. */
static void check(model *s, uint64_t sd, size_t want_fused, const char *name)
{
	gen_model *g;
	oq_model *m = NULL;
	oq_diag d;
	oq_rt in[2], fused, unf, two, sse;
	size_t n_in = 1;
	int64_t oh = odim(s, s->h), ow = odim(s, s->w);
	double *ref, tol = 0;
	char what[128];

	rng = sd * 0x9E3779B97F4A7C15ull + 1;
	g = build(s);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(oq_rt_alloc(&in[0], OQ_DT_FLOAT, 4, (const int64_t[]){1, s->c, s->h, s->w}), OQ_OK);
	for (size_t i = 0; i < in[0].nelem; i++)
		((float *)in[0].data)[i] = (float)frand();
	if (s->chain == CH_RESIDUAL_RELU || s->chain == CH_RESIDUAL_REV || s->chain == CH_BROADCAST) {
		int64_t rd[4] = {1, s->m, s->chain == CH_BROADCAST ? 1 : oh, s->chain == CH_BROADCAST ? 1 : ow};
		cr_assert_eq(oq_rt_alloc(&in[1], OQ_DT_FLOAT, 4, rd), OQ_OK);
		for (size_t i = 0; i < in[1].nelem; i++)
			((float *)in[1].data)[i] = (float)frand();
		n_in = 2;
	}
	ref = reference(s, &in[0], n_in > 1 ? &in[1] : NULL);

	cr_assert_eq(run(m, 1, 0, in, n_in, &fused), want_fused, "%s: fused groups", name);
	run(m, 1, 1, in, n_in, &unf);
	run(m, 2, 0, in, n_in, &two);
	oq_linalg_no_avx512 = 1;
	run(m, 1, 0, in, n_in, &sse);
	oq_linalg_no_avx512 = 0;

	cr_assert_eq(fused.nelem, (size_t)(s->m * oh * ow));
	for (size_t i = 0; i < fused.nelem; i++)
		tol = fmax(tol, fabs(ref[i]));
	tol *= 1e-5;
	for (size_t i = 0; i < fused.nelem && s->chain != CH_QDQ; i++)
		cr_assert(fabs(((float *)fused.data)[i] - ref[i]) <= tol, "%s: element %zu is %.9g, want %.9g", name, i,
			  (double)((float *)fused.data)[i], ref[i]);
	if (s->chain == CH_QDQ) {
		/* a rounding boundary moves with the last bit of the Conv, so no reference within a
		 * tolerance: the unfused run below (the Q and DQ kernels) is the judge; here only that
		 * every output is a code of the last DQ, ((int8) - 1) * 0.05, and that codes vary */
		double lo = 1e9, hi = -1e9;
		for (size_t i = 0; i < fused.nelem; i++) {
			double c = ((float *)fused.data)[i] / (double)0.05f + 1;
			cr_assert(fabs(c - rint(c)) < 1e-3 && rint(c) >= -128 && rint(c) <= 127,
				  "%s: element %zu = %.9g is no code", name, i, (double)((float *)fused.data)[i]);
			lo = fmin(lo, c);
			hi = fmax(hi, c);
		}
		cr_assert(hi - lo >= 50, "%s: codes %.0f..%.0f", name, lo, hi);
		expect_one_call(m, in, n_in, name);
	}
	snprintf(what, sizeof what, "%s: fused vs unfused", name);
	same_bits(&fused, &unf, what);
	snprintf(what, sizeof what, "%s: 1 vs 2 threads", name);
	same_bits(&fused, &two, what);
	snprintf(what, sizeof what, "%s: AVX-512 vs SSE epilogue", name);
	same_bits(&fused, &sse, what);

	oq_rt_release(&fused);
	oq_rt_release(&unf);
	oq_rt_release(&two);
	oq_rt_release(&sse);
	for (size_t i = 0; i < n_in; i++)
		oq_rt_release(&in[i]);
	free(ref);
	oq_model_free(m);
	gen_free(g);
	free_model(s);
}

Test(exec_steps, residual_add_relu)
{
	/* ResNet's Conv -> BN -> Add(., r) -> Relu: one group */
	model s = {.c = 8, .h = 9, .w = 9, .m = 16, .k = 3, .stride = 1, .pad = 1, .group = 1, .bn = 1,
		   .chain = CH_RESIDUAL_RELU};
	check(&s, 1, 1, "conv+bn+add+relu");
	/* 1x1 direct path without BN (MobileNetV2's projection + residual), 200 positions */
	model t = {.c = 24, .h = 10, .w = 20, .m = 12, .k = 1, .stride = 1, .pad = 0, .group = 1, .bn = 0,
		   .chain = CH_RESIDUAL_RELU};
	check(&t, 2, 1, "1x1+add+relu");
}

Test(exec_steps, residual_on_the_left)
{
	model s = {.c = 5, .h = 7, .w = 11, .m = 6, .k = 3, .stride = 2, .pad = 1, .group = 1, .bn = 0,
		   .chain = CH_RESIDUAL_REV};
	check(&s, 3, 1, "r - conv");
}

Test(exec_steps, lcnet_affine_and_decomposed_hardswish)
{
	/* dense 3x3 (30 channels: three register tiles of rows) and depthwise 3x3 (the register depthwise
	 * path), several 16-lane tails */
	model s = {.c = 6, .h = 13, .w = 21, .m = 30, .k = 3, .stride = 1, .pad = 1, .group = 1, .bn = 0,
		   .chain = CH_LCNET};
	check(&s, 4, 1, "lcnet dense");
	model t = {.c = 12, .h = 17, .w = 37, .m = 12, .k = 3, .stride = 1, .pad = 1, .group = 12, .bn = 1,
		   .chain = CH_LCNET};
	check(&t, 5, 1, "lcnet depthwise");
	model u = {.c = 12, .h = 17, .w = 37, .m = 12, .k = 5, .stride = 2, .pad = 2, .group = 12, .bn = 0,
		   .chain = CH_LCNET};
	check(&u, 6, 1, "lcnet depthwise stride 2");
}

Test(exec_steps, silu_gate)
{
	/* x * Sigmoid(x): the Sigmoid runs on stored rows (not on registers) */
	model s = {.c = 7, .h = 8, .w = 9, .m = 9, .k = 3, .stride = 1, .pad = 1, .group = 1, .bn = 1,
		   .chain = CH_SILU};
	check(&s, 7, 1, "silu dense");
	model t = {.c = 16, .h = 8, .w = 30, .m = 16, .k = 3, .stride = 1, .pad = 1, .group = 16, .bn = 0,
		   .chain = CH_SILU};
	check(&t, 8, 1, "silu depthwise");
	/* a 7x7 plane: the flat depthwise path (several rows per vector) */
	model u = {.c = 16, .h = 7, .w = 7, .m = 16, .k = 3, .stride = 1, .pad = 1, .group = 16, .bn = 1,
		   .chain = CH_SILU};
	check(&u, 10, 1, "silu depthwise 7x7");
	model v = {.c = 24, .h = 5, .w = 9, .m = 24, .k = 5, .stride = 1, .pad = 2, .group = 24, .bn = 0,
		   .chain = CH_LCNET};
	check(&v, 11, 1, "lcnet depthwise 5x9");
}

Test(exec_steps, quantized_hardswish_unit)
{
	/* Q -> DQ pairs as steps (same and different scales and zero points), DQ'd constants (scalar
	 * and per channel): dense 3x3, 1x1 direct and depthwise, 16-lane tails */
	model s = {.c = 6, .h = 13, .w = 21, .m = 30, .k = 3, .stride = 1, .pad = 1, .group = 1, .bn = 0,
		   .chain = CH_QDQ};
	check(&s, 12, 1, "quantized unit dense");
	model t = {.c = 24, .h = 10, .w = 19, .m = 12, .k = 1, .stride = 1, .pad = 0, .group = 1, .bn = 1,
		   .chain = CH_QDQ};
	check(&t, 13, 1, "quantized unit 1x1");
	model u = {.c = 12, .h = 17, .w = 37, .m = 12, .k = 3, .stride = 2, .pad = 1, .group = 12, .bn = 0,
		   .chain = CH_QDQ};
	check(&u, 14, 1, "quantized unit depthwise");
}

/*
 * One QDQ step (oq_epi_apply) on values at and next to the rounding ties
 * (k + 1/2) * qs, the clamp bounds, huge, tiny, signed zeros, infinities
 * and NaN, against the Q kernel's scalar expression (oq_quant_row8: a
 * division) and the DQ formula ((float) code - dzp) * ds, bit for bit: on
 * the AVX-512 epilogue (whose quotient is a product by 1 / qs checked near
 * ties) and the SSE one. Scales with a normal reciprocal and one without
 * (qr 0: division only).
 */
Test(exec_steps, qdq_step_ties_and_edges)
{
	static const float scales[] = {6.0f / 255, 0.1f, 1.0f / 3, 0.0123f, 0.125f, 36.0f / 255, 1e-30f, 3e-39f};
	static const int32_t zps[][3] = {{0, 0, 1}, {128, 128, 1}, {-5, -5, 0}, {3, 1, 0}}; /* qzp, dzp, uint8 */
	enum { N = 4200 };
	float *x = calloc(N, sizeof *x), *y = calloc(N, sizeof *y), *want = calloc(N, sizeof *want);
	unsigned char code[N];

	cr_assert(x && y && want);
	for (size_t si = 0; si < sizeof scales / sizeof *scales; si++)
		for (size_t zi = 0; zi < sizeof zps / sizeof *zps; zi++) {
			float qs = scales[si], ds = qs * 0.75f;
			int32_t qzp = zps[zi][0], dzp = zps[zi][1], u8 = zps[zi][2];
			int32_t qmin = u8 ? 0 : -128, qmax = u8 ? 255 : 127;
			oq_epi_step st = {.kind = OQ_EPI_QDQ, .qs = qs, .qlo = (float)(qmin - qzp),
					  .qhi = (float)(qmax - qzp), .qoff = (float)(qzp - dzp), .ds = ds,
					  .qr = isnormal(qs) && isnormal(1.0f / qs) ? 1.0f / qs : 0.0f};
			oq_kfuse f = {.steps = &st, .n_steps = 1};
			size_t n = 0;

			cr_assert(si == sizeof scales / sizeof *scales - 1 ? st.qr == 0 : st.qr != 0);
			for (int k = -300; k < 300; k++) {
				float t = ((float)k + 0.5f) * qs;
				x[n++] = t;
				x[n++] = nextafterf(t, INFINITY);
				x[n++] = nextafterf(t, -INFINITY);
				x[n++] = nextafterf(nextafterf(t, INFINITY), INFINITY);
				x[n++] = nextafterf(nextafterf(t, -INFINITY), -INFINITY);
				x[n++] = (float)k * qs;
			}
			x[n++] = NAN;
			x[n++] = -NAN;
			x[n++] = INFINITY;
			x[n++] = -INFINITY;
			x[n++] = 0.0f;
			x[n++] = -0.0f;
			x[n++] = FLT_MAX;
			x[n++] = -FLT_MAX;
			x[n++] = 1e-45f;
			x[n++] = -1e-45f;
			x[n++] = qs * (float)(qmax - qzp) + qs * 0.49f;
			x[n++] = qs * (float)(qmin - qzp) - qs * 0.51f;
			while (n < N)
				x[n++] = (float)(frand() * 300) * qs;
			oq_quant_row8(x, N, qs, qzp, qmin, qmax, code);
			for (size_t i = 0; i < N; i++)
				want[i] = ((float)(u8 ? (int32_t)code[i] : (int32_t)(int8_t)code[i]) - (float)dzp) * ds;
			for (int sse = 0; sse < 2; sse++) {
				memcpy(y, x, N * sizeof *y);
				oq_linalg_no_avx512 = sse;
				oq_epi_apply(&f, 0, 0, y, N);
				oq_linalg_no_avx512 = 0;
				for (size_t i = 0; i < N; i++)
					cr_assert(!memcmp(&y[i], &want[i], sizeof *y),
						  "scale %.9g zp %d/%d %s: x %.9g -> %.9g, want %.9g", (double)qs, qzp, dzp,
						  sse ? "SSE" : "AVX-512", (double)x[i], (double)y[i], (double)want[i]);
			}
		}
	free(x);
	free(y);
	free(want);
}

Test(exec_steps, broadcast_residual_runs_unfused)
{
	/* planned as a group (the residual's shape is unknown before the run), run node by node */
	model s = {.c = 4, .h = 6, .w = 6, .m = 8, .k = 3, .stride = 1, .pad = 1, .group = 1, .bn = 1,
		   .chain = CH_BROADCAST};
	check(&s, 9, 1, "broadcast residual");
}
