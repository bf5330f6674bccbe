/*
 * test_exec_fuse.c - the executor's plan-time fusion of Conv [->
 * BatchNormalization] [-> activation] (calib/exec/plan.c, epilogues in
 * calib/kernels/linalg/conv_epilogue.c).
 *
 * Each model is built with gen_model.h and run three ways:
 * - fused (no observer): must match a direct double-precision reference
 *   computed here from the same weights (conv loop, BN formula
 *   (y - mean) / sqrt(var + eps) * scale + B, activation) within 1e-5
 *   relative to the output's largest magnitude;
 * - unfused (an observer attached, which must see every intermediate value):
 *   the fused epilogue applies BN with the BatchNormalization kernel's own
 *   double expression and the activation with the element-wise kernel's
 *   float formula to the same conv result, so the two runs must be
 *   bit-identical (and within 1e-5 relative, the brief's bound, a fortiori);
 * - fused with 2 threads: bit-identical to 1 thread.
 * Groups that must not fuse (intermediate used twice, or a graph output)
 * are checked with oq_exec_n_fused and give bit-identical fused/unfused runs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/kernel.h"
#include "calib/kernels/linalg/linalg.h"

/* ------------------------------------------------------------- helpers */

static uint64_t rng = 1;

static void seed(uint64_t s)
{
	rng = s * 0x9E3779B97F4A7C15ull + 1;
}

/* Uniform in [-1, 1), representable as float (weights are stored as float32). */
static double frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

/* A Conv [-> BN] [-> act] model. */
typedef struct spec {
	int opset;
	int64_t n, c, h, w, m, k, stride, pad, group;
	int bias;              /* Conv has B */
	int bn;                /* BatchNormalization after the Conv */
	const char *act;       /* activation op after it, or NULL */
	int conv_twice;        /* the Conv output also feeds an Add (y2 = conv + last) */
	int conv_out;          /* the Conv output is a graph output too */
	int bn_out;            /* the BN output is a graph output too */
	float lo, hi;          /* Clip bounds */
} spec;

/* Parameters as doubles (float values), for the reference. */
typedef struct params {
	double *w, *b, *s, *be, *mu, *va;
	double eps;
} params;

static double *rand_vec(size_t n, double scale, double shift)
{
	double *v = calloc(n, sizeof *v);
	cr_assert(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (double)(float)(frand() * scale + shift);
	return v;
}

static int64_t out_dim(const spec *s, int64_t in)
{
	return (in + 2 * s->pad - s->k) / s->stride + 1;
}

static void free_params(params *p)
{
	free(p->w);
	free(p->b);
	free(p->s);
	free(p->be);
	free(p->mu);
	free(p->va);
}

static gen_model *build(const spec *s, params *p)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	int64_t cg = s->c / s->group, oh = out_dim(s, s->h), ow = out_dim(s, s->w);
	size_t nw = (size_t)(s->m * cg * s->k * s->k), m = (size_t)s->m;
	char last[8] = "c";

	memset(p, 0, sizeof *p);
	p->w = rand_vec(nw, 1.0 / sqrt((double)(cg * s->k * s->k)), 0);
	p->b = s->bias ? rand_vec(m, 0.5, 0) : calloc(m, sizeof *p->b);
	p->s = rand_vec(m, 0.5, 1.0);
	p->be = rand_vec(m, 0.5, 0.1);
	p->mu = rand_vec(m, 0.3, 0);
	p->va = rand_vec(m, 0.4, 0.6);
	p->eps = (double)1e-3f;
	gen_opset(g, "", s->opset);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(s->n, s->c, s->h, s->w));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(s->m, cg, s->k, s->k), p->w);
	if (s->bias)
		gen_init(g, gp, "B", OQ_DT_FLOAT, GEN_SHAPE(s->m), p->b);
	n = gen_node(g, gp, "Conv", "conv", s->bias ? "x,W,B" : "x,W", "c");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){s->pad, s->pad, s->pad, s->pad});
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){s->stride, s->stride});
	gen_attr_int(g, n, "group", s->group);
	if (s->bn) {
		gen_init(g, gp, "bs", OQ_DT_FLOAT, GEN_SHAPE(s->m), p->s);
		gen_init(g, gp, "bb", OQ_DT_FLOAT, GEN_SHAPE(s->m), p->be);
		gen_init(g, gp, "bm", OQ_DT_FLOAT, GEN_SHAPE(s->m), p->mu);
		gen_init(g, gp, "bv", OQ_DT_FLOAT, GEN_SHAPE(s->m), p->va);
		n = gen_node(g, gp, "BatchNormalization", "bn", "c,bs,bb,bm,bv", "t");
		gen_attr_float(g, n, "epsilon", 1e-3f);
		strcpy(last, "t");
	}
	if (s->act) {
		char in[32];
		if (!strcmp(s->act, "Clip") && s->opset >= 11) {
			/* min from a Constant node, max from an initializer */
			Onnx__NodeProto *k = gen_node(g, gp, "Constant", "lo", "", "lo");
			Onnx__AttributeProto *a = gen_attr(g, k, "value", OQ_ATTR_TENSOR);
			a->t = gen_tensor(g, "", OQ_DT_FLOAT, 0, NULL, (const double[]){s->lo});
			gen_init(g, gp, "hi", OQ_DT_FLOAT, 0, NULL, (const double[]){s->hi});
			snprintf(in, sizeof in, "%s,lo,hi", last);
		} else {
			snprintf(in, sizeof in, "%s", last);
		}
		n = gen_node(g, gp, s->act, "act", in, "a");
		if (!strcmp(s->act, "Clip") && s->opset < 11) {
			gen_attr_float(g, n, "min", s->lo);
			gen_attr_float(g, n, "max", s->hi);
		} else if (!strcmp(s->act, "LeakyRelu")) {
			gen_attr_float(g, n, "alpha", 0.1f);
		} else if (!strcmp(s->act, "HardSigmoid")) {
			gen_attr_float(g, n, "alpha", 0.25f);
			gen_attr_float(g, n, "beta", 0.375f);
		}
		strcpy(last, "a");
	}
	gen_node(g, gp, "Identity", "id", last, "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(s->n, s->m, oh, ow));
	if (s->conv_twice) {
		char in[16];
		snprintf(in, sizeof in, "c,%s", last);
		gen_node(g, gp, "Add", "add", in, "y2");
		gen_output(g, gp, "y2", OQ_DT_FLOAT, GEN_SHAPE(s->n, s->m, oh, ow));
	}
	if (s->conv_out)
		gen_output(g, gp, "c", OQ_DT_FLOAT, GEN_SHAPE(s->n, s->m, oh, ow));
	if (s->bn_out)
		gen_output(g, gp, "t", OQ_DT_FLOAT, GEN_SHAPE(s->n, s->m, oh, ow));
	return g;
}

static double act_ref(const spec *s, double x)
{
	if (!s->act)
		return x;
	if (!strcmp(s->act, "Relu"))
		return x < 0 ? 0 : x;
	if (!strcmp(s->act, "Clip"))
		return x < s->lo ? s->lo : x > s->hi ? s->hi : x;
	if (!strcmp(s->act, "LeakyRelu"))
		return x < 0 ? (double)0.1f * x : x;
	if (!strcmp(s->act, "HardSigmoid"))
		return fmax(0, fmin(1, 0.25 * x + 0.375));
	if (!strcmp(s->act, "HardSwish"))
		return x * fmax(0, fmin(1, x / 6 + 0.5));
	if (!strcmp(s->act, "Sigmoid"))
		return 1 / (1 + exp(-x));
	cr_assert_fail("no reference for %s", s->act);
	return 0;
}

/* y = act(BN(conv(x))) in double, directly from the definitions. */
static double *reference(const spec *s, const params *p, const oq_rt *x)
{
	int64_t cg = s->c / s->group, mg = s->m / s->group, oh = out_dim(s, s->h), ow = out_dim(s, s->w);
	double *y = calloc((size_t)(s->n * s->m * oh * ow), sizeof *y);
	const float *xv = x->data;

	cr_assert(y);
	for (int64_t n = 0; n < s->n; n++)
		for (int64_t m = 0; m < s->m; m++)
			for (int64_t i = 0; i < oh; i++)
				for (int64_t j = 0; j < ow; j++) {
					double acc = p->b[m];
					for (int64_t c = 0; c < cg; c++)
						for (int64_t u = 0; u < s->k; u++)
							for (int64_t v = 0; v < s->k; v++) {
								int64_t ih = i * s->stride - s->pad + u, iw = j * s->stride - s->pad + v;
								int64_t ch = (m / mg) * cg + c;
								if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
									continue;
								acc += xv[((n * s->c + ch) * s->h + ih) * s->w + iw] *
								       p->w[((m * cg + c) * s->k + u) * s->k + v];
							}
					if (s->bn)
						acc = (acc - p->mu[m]) / sqrt(p->va[m] + p->eps) * p->s[m] + p->be[m];
					y[((n * s->m + m) * oh + i) * ow + j] = act_ref(s, acc);
				}
	return y;
}

/* Names of the values an observer saw. */
typedef struct seen {
	int n;
	char names[32][16];
	int unwanted;          /* for want(): 1: "c" is not wanted; 2: neither "c" nor "t" */
} seen;

static int want(void *ctx, const oq_value *v)
{
	const seen *s = ctx;
	return !(!strcmp(v->name, "c") || (s->unwanted == 2 && !strcmp(v->name, "t")));
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	seen *s = ctx;
	(void)t;
	if (s->n < 32)
		snprintf(s->names[s->n++], sizeof s->names[0], "%s", v->name);
	return 0;
}

static int saw(const seen *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->names[i], name))
			return 1;
	return 0;
}

/* Runs m with `threads`; ob non-NULL attaches the observer. Returns the number of fused groups. */
static size_t run(oq_model *m, int threads, seen *ob, const oq_rt *x, oq_rt *out, size_t nout)
{
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	size_t nf;

	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec_new: %s", d.msg);
	if (ob)
		oq_exec_set_observer(e, observe, ob);
	cr_assert_eq(oq_exec_run(e, x, 1, out, nout, &d), OQ_OK, "run: %s", d.msg);
	nf = oq_exec_n_fused(e);
	oq_exec_free(e);
	return nf;
}

static double max_abs(const double *v, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs(v[i]));
	return m;
}

/* |a - want| <= 1e-5 * max|want| elementwise. */
static void expect_close(const oq_rt *a, const double *want, size_t n, const char *what)
{
	double tol = 1e-5 * fmax(max_abs(want, n), 1e-30);
	const float *av = a->data;
	cr_assert_eq(a->nelem, n, "%s: %zu elements, want %zu", what, a->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_assert(fabs(av[i] - want[i]) <= tol, "%s: element %zu is %.9g, want %.9g (tol %.3g)", what, i,
			  (double)av[i], want[i], tol);
}

static double *as_doubles(const oq_rt *t)
{
	double *v = calloc(t->nelem + 1, sizeof *v);
	cr_assert(v);
	for (size_t i = 0; i < t->nelem; i++)
		v[i] = ((const float *)t->data)[i];
	return v;
}

/*
 * The whole protocol for a fusable spec: fused == reference, fused ~ unfused
 * (bit-identical without BN), every intermediate observed, threads 1 == 2.
 * want_fused: expected oq_exec_n_fused.
 */
static void check_spec(const spec *s, uint64_t sd, size_t want_fused)
{
	params p;
	gen_model *g;
	oq_model *m = NULL;
	oq_diag d;
	oq_rt x, fused[3], unf[3], two[3];
	size_t nout = 1 + (s->conv_twice != 0) + (s->conv_out != 0) + (s->bn_out != 0), ny;
	double *ref, *uv;
	seen ob;
	char what[96];

	seed(sd);
	g = build(s, &p);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 4, (const int64_t[]){s->n, s->c, s->h, s->w}), OQ_OK);
	for (size_t i = 0; i < x.nelem; i++)
		((float *)x.data)[i] = (float)frand();
	ref = reference(s, &p, &x);

	cr_assert_eq(run(m, 1, NULL, &x, fused, nout), want_fused, "fused groups");
	memset(&ob, 0, sizeof ob);
	run(m, 1, &ob, &x, unf, nout);
	run(m, 2, NULL, &x, two, nout);
	ny = fused[0].nelem;

	snprintf(what, sizeof what, "%s%s fused vs reference", s->bn ? "BN+" : "", s->act ? s->act : "none");
	expect_close(&fused[0], ref, ny, what);
	uv = as_doubles(&unf[0]);
	snprintf(what, sizeof what, "%s%s fused vs unfused", s->bn ? "BN+" : "", s->act ? s->act : "none");
	expect_close(&fused[0], uv, ny, what);
	for (size_t o = 0; o < nout; o++)
		cr_assert(unf[o].nbytes == fused[o].nbytes && !memcmp(fused[o].data, unf[o].data, fused[o].nbytes),
			  "output %zu: fused and unfused runs are not bit-identical", o);
	for (size_t o = 0; o < nout; o++)
		cr_assert(two[o].nbytes == fused[o].nbytes && !memcmp(fused[o].data, two[o].data, fused[o].nbytes),
			  "output %zu differs between 1 and 2 threads", o);
	/* the observer saw every node output */
	cr_assert(saw(&ob, "c") && saw(&ob, "y"), "observer missed the conv output or y");
	if (s->bn)
		cr_assert(saw(&ob, "t"), "observer missed the BN output");
	if (s->act)
		cr_assert(saw(&ob, "a"), "observer missed the activation output");

	for (size_t o = 0; o < nout; o++) {
		oq_rt_release(&fused[o]);
		oq_rt_release(&unf[o]);
		oq_rt_release(&two[o]);
	}
	free(uv);
	free(ref);
	oq_rt_release(&x);
	oq_model_free(m);
	gen_free(g);
	free_params(&p);
}

/* ------------------------------------------------------------- tests */

Test(exec_fuse, conv_bn_relu)
{
	spec s = {.opset = 13, .n = 1, .c = 3, .h = 9, .w = 9, .m = 8, .k = 3, .stride = 1, .pad = 1, .group = 1,
		  .bias = 1, .bn = 1, .act = "Relu"};
	check_spec(&s, 1, 1);
	s.bias = 0; /* the folded bias comes from BN alone */
	s.n = 2;
	check_spec(&s, 2, 1);
}

Test(exec_fuse, conv_bn_every_activation)
{
	static const char *acts[] = {"Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Clip"};
	for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
		spec s = {.opset = 13, .n = 1, .c = 5, .h = 11, .w = 7, .m = 12, .k = 3, .stride = 2, .pad = 1,
			  .group = 1, .bias = 1, .bn = 1, .act = acts[i], .lo = -0.25f, .hi = 0.5f};
		check_spec(&s, 10 + i, 1);
	}
}

Test(exec_fuse, conv_bn_no_activation)
{
	spec s = {.opset = 9, .n = 1, .c = 4, .h = 8, .w = 8, .m = 6, .k = 1, .stride = 1, .pad = 0, .group = 1,
		  .bias = 1, .bn = 1};
	check_spec(&s, 3, 1); /* 1x1: the direct (no im2col) path */
}

Test(exec_fuse, conv_clip_many_tiles)
{
	/* kc = 64 * 9 = 576: 455 positions per tile, 1600 positions -> 4 tiles; Clip bounds from
	 * a Constant node and an initializer (opset 13) */
	spec s = {.opset = 13, .n = 1, .c = 64, .h = 40, .w = 40, .m = 24, .k = 3, .stride = 1, .pad = 1,
		  .group = 1, .bias = 1, .act = "Clip", .lo = 0, .hi = 0.25f};
	check_spec(&s, 4, 1);
}

Test(exec_fuse, depthwise_clip)
{
	/* Relu6 as Clip attributes (opset 6), stride 2 and stride 1 depthwise paths */
	spec s = {.opset = 6, .n = 1, .c = 16, .h = 20, .w = 19, .m = 16, .k = 3, .stride = 2, .pad = 1,
		  .group = 16, .bias = 1, .act = "Clip", .lo = 0, .hi = 0.3f};
	check_spec(&s, 5, 1);
	s.stride = 1;
	s.opset = 13;
	check_spec(&s, 6, 1);
}

Test(exec_fuse, depthwise_bn_hardswish)
{
	spec s = {.opset = 14, .n = 2, .c = 8, .h = 13, .w = 13, .m = 8, .k = 5, .stride = 1, .pad = 2,
		  .group = 8, .bias = 0, .bn = 1, .act = "HardSwish"};
	check_spec(&s, 7, 1);
}

Test(exec_fuse, grouped_conv_bn_relu)
{
	spec s = {.opset = 13, .n = 1, .c = 8, .h = 10, .w = 10, .m = 12, .k = 3, .stride = 1, .pad = 1,
		  .group = 4, .bias = 1, .bn = 1, .act = "Relu"};
	check_spec(&s, 8, 1);
}

Test(exec_fuse, conv_output_used_twice_not_fused)
{
	/* Conv -> BN -> Relu, and Add(conv, relu): the conv output must be materialised */
	spec s = {.opset = 13, .n = 1, .c = 3, .h = 9, .w = 9, .m = 8, .k = 3, .stride = 1, .pad = 1, .group = 1,
		  .bias = 1, .bn = 1, .act = "Relu", .conv_twice = 1};
	check_spec(&s, 20, 0);
}

Test(exec_fuse, graph_outputs_not_fused_away)
{
	/* the Conv output is a graph output: nothing fuses */
	spec s = {.opset = 13, .n = 1, .c = 3, .h = 9, .w = 9, .m = 8, .k = 3, .stride = 1, .pad = 1, .group = 1,
		  .bias = 1, .act = "Relu", .conv_out = 1};
	check_spec(&s, 21, 0);
	/* the BN output is a graph output: Conv+BN fuse, the Relu stays separate */
	spec t = {.opset = 13, .n = 1, .c = 3, .h = 9, .w = 9, .m = 8, .k = 3, .stride = 1, .pad = 1, .group = 1,
		  .bias = 1, .bn = 1, .act = "Relu", .bn_out = 1};
	check_spec(&t, 22, 1);
}

Test(exec_fuse, reference_engine)
{
	/* oq_linalg_use_ref: the direct-loop conv plus the activation over the whole output */
	spec s = {.opset = 13, .n = 1, .c = 4, .h = 7, .w = 7, .m = 5, .k = 3, .stride = 1, .pad = 1, .group = 1,
		  .bias = 1, .bn = 1, .act = "LeakyRelu"};
	oq_linalg_use_ref = 1;
	check_spec(&s, 30, 1);
	oq_linalg_use_ref = 0;
}

Test(exec_fuse, gemm_edges_own_and_blas)
{
	/* kc = 40 * 9 = 360: two KC slices of the own GEMM; 13 channels: a 1-row remainder after
	 * two 6-row panels; 9 x 7 = 63 positions: a 15-column masked panel. Both engines must match
	 * the double reference and fused == unfused. */
	spec s = {.opset = 13, .n = 2, .c = 40, .h = 9, .w = 7, .m = 13, .k = 3, .stride = 1, .pad = 1,
		  .group = 1, .bias = 1, .bn = 1, .act = "Relu"};
	check_spec(&s, 40, 1);
	oq_linalg_use_blas = 1;
	check_spec(&s, 41, 1);
	oq_linalg_use_blas = 0;
	/* 1x1 on the input itself (direct path), 7 channels, no bias */
	spec t = {.opset = 13, .n = 1, .c = 300, .h = 5, .w = 5, .m = 7, .k = 1, .stride = 1, .pad = 0,
		  .group = 1, .bias = 0, .act = "HardSwish"};
	check_spec(&t, 42, 1);
}

/* One fused run of s with the given engine switches; the output in *y. */
/*
 * s run on one engine: mode 0 the CPU's best, 1 without AVX-512 (oq_linalg_no_avx512: the AVX2
 * kernels), 2 without the own GEMMs (oq_linalg_use_blas: BLAS, SSE depthwise, the portable
 * epilogue), 3 the best unfused (an observer on every value: each node its own kernel); nan puts
 * NaN into a few inputs (NaN must pass BN and Relu / Clip alike).
 */
static void run_engine(const spec *s, uint64_t sd, int mode, int nan, int threads, oq_rt *y)
{
	seen ob;
	params p;
	gen_model *g;
	oq_model *m = NULL;
	oq_diag d;
	oq_rt x;

	seed(sd);
	g = build(s, &p);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 4, (const int64_t[]){s->n, s->c, s->h, s->w}), OQ_OK);
	for (size_t i = 0; i < x.nelem; i++)
		((float *)x.data)[i] = (float)frand();
	for (size_t i = 5; nan && i < x.nelem; i += 97)
		((float *)x.data)[i] = NAN;
	oq_linalg_no_avx512 = mode == 1;
	oq_linalg_use_blas = mode == 2;
	memset(&ob, 0, sizeof ob);
	run(m, threads, mode == 3 ? &ob : NULL, &x, y, 1);
	oq_linalg_no_avx512 = 0;
	oq_linalg_use_blas = 0;
	oq_rt_release(&x);
	oq_model_free(m);
	gen_free(g);
	free_params(&p);
}

Test(exec_fuse, avx512_gemm_bit_identical_to_avx2)
{
	/* Both GEMMs form init + sum_k w*x in k order with one FMA per term, so their outputs must be
	 * the same bits. Edges of the 12 x 32 AVX-512 tile: 13 and 25 channels (1-row remainders),
	 * 63 positions (31-column masked panel), 4 positions (one partial panel), kc = 360 (two
	 * depth slices), 1x1 direct with 300 channels (two slices), grouped, bias on and off, BN +
	 * Clip; also with NaN among the inputs, and the fused outputs the same bits as the unfused
	 * run's (each node its own kernel), so the AVX2 GEMM's epilogue is checked on AVX2 CPUs too. */
	static const spec cases[] = {
		{.opset = 13, .n = 2, .c = 40, .h = 9, .w = 7, .m = 13, .k = 3, .stride = 1, .pad = 1, .group = 1,
		 .bias = 1, .bn = 1, .act = "Relu"},
		{.opset = 13, .n = 1, .c = 300, .h = 5, .w = 5, .m = 25, .k = 1, .stride = 1, .pad = 0, .group = 1,
		 .bias = 0, .act = "HardSwish"},
		{.opset = 13, .n = 1, .c = 16, .h = 4, .w = 4, .m = 40, .k = 3, .stride = 2, .pad = 1, .group = 2,
		 .bias = 1},
		{.opset = 13, .n = 1, .c = 8, .h = 40, .w = 30, .m = 70, .k = 3, .stride = 1, .pad = 1, .group = 1,
		 .bias = 1, .act = "Relu"},
		{.opset = 13, .n = 1, .c = 24, .h = 11, .w = 13, .m = 19, .k = 1, .stride = 1, .pad = 0, .group = 1,
		 .bias = 1, .bn = 1, .act = "Clip", .lo = 0, .hi = 0.3f},
	};
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX2 and FMA on this CPU: nothing to compare");
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		for (int nan = 0; nan < 2; nan++) {
			oq_rt a, b, c, u;
			run_engine(&cases[i], 60 + i, 0, nan, 1, &a);
			run_engine(&cases[i], 60 + i, 1, nan, 1, &b);
			run_engine(&cases[i], 60 + i, 0, nan, 2, &c);
			run_engine(&cases[i], 60 + i, 3, nan, 1, &u);
			cr_assert(a.nbytes == b.nbytes && !memcmp(a.data, b.data, a.nbytes),
				  "case %zu nan %d: AVX-512 and AVX2 GEMM outputs differ", i, nan);
			cr_assert(a.nbytes == u.nbytes && !memcmp(a.data, u.data, a.nbytes),
				  "case %zu nan %d: fused and unfused outputs differ", i, nan);
			oq_rt_release(&u);
			cr_assert(a.nbytes == c.nbytes && !memcmp(a.data, c.data, a.nbytes),
				  "case %zu nan %d: AVX-512 output differs between 1 and 2 threads", i, nan);
			oq_rt_release(&a);
			oq_rt_release(&b);
			oq_rt_release(&c);
		}
}

Test(exec_fuse, avx512_depthwise_epilogue_bit_identical_to_sse)
{
	/* The AVX-512 and AVX2 depthwise kernels run BN (in double), Relu and Clip on the registers
	 * and the other activations on the stored row; the SSE kernel runs the portable
	 * oq_epi_apply on each row. Same bits expected, also with NaN among the inputs, for: BN +
	 * Relu, Clip (lo < hi), Clip with lo > hi (every value becomes hi, done on the row),
	 * HardSwish and LeakyRelu (on the row), no epilogue; 5x5 stride 2, 3x3 stride 1 and 2;
	 * widths 7, 17, 19, 33; 13 and 24 channels (row kernels), 16, 32, 40 and 48
	 * (channel-blocked, BN per lane); 2 images. */
	static const spec cases[] = {
		{.opset = 13, .n = 2, .c = 13, .h = 9, .w = 17, .m = 13, .k = 3, .stride = 1, .pad = 1, .group = 13,
		 .bias = 1, .bn = 1, .act = "Relu"},
		{.opset = 13, .n = 1, .c = 24, .h = 20, .w = 33, .m = 24, .k = 3, .stride = 2, .pad = 1,
		 .group = 24, .bias = 1, .act = "Clip", .lo = 0, .hi = 0.3f},
		{.opset = 13, .n = 1, .c = 13, .h = 7, .w = 7, .m = 13, .k = 3, .stride = 1, .pad = 1, .group = 13,
		 .bias = 0, .bn = 1, .act = "Clip", .lo = 0.5f, .hi = -0.5f},
		{.opset = 14, .n = 1, .c = 24, .h = 19, .w = 19, .m = 24, .k = 5, .stride = 2, .pad = 2,
		 .group = 24, .bias = 1, .bn = 1, .act = "HardSwish"},
		{.opset = 13, .n = 1, .c = 13, .h = 11, .w = 17, .m = 13, .k = 5, .stride = 1, .pad = 2,
		 .group = 13, .bias = 1, .act = "LeakyRelu"},
		{.opset = 13, .n = 1, .c = 13, .h = 11, .w = 17, .m = 13, .k = 3, .stride = 2, .pad = 0,
		 .group = 13, .bias = 1},
		/* channel-blocked kernel (nearly full 16-channel blocks): BN per lane, the same cases */
		{.opset = 13, .n = 2, .c = 32, .h = 9, .w = 17, .m = 32, .k = 3, .stride = 1, .pad = 1, .group = 32,
		 .bias = 1, .bn = 1, .act = "Relu"},
		{.opset = 13, .n = 1, .c = 48, .h = 7, .w = 7, .m = 48, .k = 3, .stride = 1, .pad = 1, .group = 48,
		 .bias = 0, .bn = 1, .act = "Clip", .lo = 0.5f, .hi = -0.5f},
		{.opset = 14, .n = 1, .c = 16, .h = 19, .w = 19, .m = 16, .k = 5, .stride = 2, .pad = 2,
		 .group = 16, .bias = 1, .bn = 1, .act = "HardSwish"},
		{.opset = 13, .n = 1, .c = 40, .h = 11, .w = 33, .m = 40, .k = 3, .stride = 2, .pad = 1,
		 .group = 40, .bias = 1, .bn = 1, .act = "Clip", .lo = 0, .hi = 0.3f},
		{.opset = 13, .n = 1, .c = 40, .h = 11, .w = 17, .m = 40, .k = 5, .stride = 1, .pad = 2,
		 .group = 40, .bias = 1, .act = "LeakyRelu"},
	};
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX2 and FMA on this CPU: nothing to compare");
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		for (int nan = 0; nan < 2; nan++) {
			oq_rt a, b, c, e;
			run_engine(&cases[i], 80 + i, 0, nan, 1, &a);
			run_engine(&cases[i], 80 + i, 1, nan, 1, &b);
			run_engine(&cases[i], 80 + i, 2, nan, 1, &e);
			run_engine(&cases[i], 80 + i, 0, nan, 2, &c);
			cr_assert(a.nbytes == b.nbytes && !memcmp(a.data, b.data, a.nbytes),
				  "case %zu nan %d: AVX-512 and AVX2 depthwise outputs differ", i, nan);
			cr_assert(a.nbytes == e.nbytes && !memcmp(a.data, e.data, a.nbytes),
				  "case %zu nan %d: vector and SSE depthwise outputs differ", i, nan);
			cr_assert(a.nbytes == c.nbytes && !memcmp(a.data, c.data, a.nbytes),
				  "case %zu nan %d: output differs between 1 and 2 threads", i, nan);
			oq_rt_release(&a);
			oq_rt_release(&b);
			oq_rt_release(&c);
			oq_rt_release(&e);
		}
}

Test(exec_fuse, observer_without_intermediates_keeps_fusion)
{
	/* An observer that wants neither the Conv nor the BN output keeps the group fused (it sees
	 * only the group's last output and later values); one that wants the BN output does not.
	 * Outputs are bit-identical to the unobserved fused run either way. */
	spec s = {.opset = 13, .n = 1, .c = 6, .h = 9, .w = 9, .m = 8, .k = 3, .stride = 1, .pad = 1, .group = 1,
		  .bias = 1, .bn = 1, .act = "Relu"};
	params p;
	gen_model *g;
	oq_model *m = NULL;
	oq_diag d;
	oq_rt x, ref, y;

	seed(70);
	g = build(&s, &p);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 4, (const int64_t[]){s.n, s.c, s.h, s.w}), OQ_OK);
	for (size_t i = 0; i < x.nelem; i++)
		((float *)x.data)[i] = (float)frand();
	run(m, 1, NULL, &x, &ref, 1);
	for (int u = 1; u <= 2; u++) {
		seen ob;
		oq_exec *e = NULL;
		oq_exec_opts o = {.threads = 1};
		memset(&ob, 0, sizeof ob);
		ob.unwanted = u;
		cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec_new: %s", d.msg);
		oq_exec_set_observer(e, observe, &ob);
		oq_exec_set_observe_want(e, want);
		cr_assert_eq(oq_exec_run(e, &x, 1, &y, 1, &d), OQ_OK, "run: %s", d.msg);
		oq_exec_free(e);
		cr_assert(y.nbytes == ref.nbytes && !memcmp(y.data, ref.data, y.nbytes),
			  "unwanted=%d: output differs from the unobserved fused run", u);
		cr_assert(saw(&ob, "a") && saw(&ob, "y"), "unwanted=%d: observer missed a or y", u);
		if (u == 2)
			cr_assert(!saw(&ob, "c") && !saw(&ob, "t"), "fused group still computed c or t");
		else
			cr_assert(saw(&ob, "c") && saw(&ob, "t"), "BN output wanted: the group must run unfused");
		oq_rt_release(&y);
	}
	oq_rt_release(&ref);
	oq_rt_release(&x);
	oq_model_free(m);
	gen_free(g);
	free_params(&p);
}

/* ------------------------------------------------------------- chains */

/*
 * A Conv group whose output only a depthwise Conv reads runs with it as
 * one kernel (plan.c plan_chains, conv_chain.c oq_conv_chain_run: bands of
 * the depthwise rows, the first output never stored whole). Model:
 *   a = Conv(x, Wa [ma, c, ka, ka], Ba), stride sa, pad ka / 2 [-> act_a]
 *   y = Conv(a, Wb [ma, 1, kb, kb], Bb), group ma, stride sb, pad kb / 2 [-> BN] [-> act_b]
 * Chained (no observer) must equal: no chain (oq_exec_no_chain), the
 * observed run (every node on its own), 2 threads, and the AVX2 / SSE
 * kernels run one after the other (oq_linalg_no_avx512), bit for bit.
 */
typedef struct chain_spec {
	int64_t c, h, w, ma, ka, sa, kb, sb;
	int bias;              /* both Convs have B */
	const char *act_a, *act_b; /* Relu or Clip (0, 6), or NULL */
	int bn_b;              /* BatchNormalization after the depthwise Conv */
} chain_spec;

static void add_act(gen_model *g, Onnx__GraphProto *gp, const char *act, const char *in, const char *out,
		    const char *tag)
{
	char lo[32], hi[32], ins[96];
	if (!strcmp(act, "Clip")) {
		snprintf(lo, sizeof lo, "%s_lo", tag);
		snprintf(hi, sizeof hi, "%s_hi", tag);
		gen_init(g, gp, lo, OQ_DT_FLOAT, 0, NULL, GEN_VALS(0));
		gen_init(g, gp, hi, OQ_DT_FLOAT, 0, NULL, GEN_VALS(6));
		snprintf(ins, sizeof ins, "%s,%s,%s", in, lo, hi);
		gen_node(g, gp, "Clip", tag, ins, out);
	} else {
		gen_node(g, gp, act, tag, in, out);
	}
}

static gen_model *build_chain(const chain_spec *s, double **vals, int *nv)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	int64_t oh = (s->h + 2 * (s->ka / 2) - s->ka) / s->sa + 1, ow = (s->w + 2 * (s->ka / 2) - s->ka) / s->sa + 1;
	int64_t yh = (oh + 2 * (s->kb / 2) - s->kb) / s->sb + 1, yw = (ow + 2 * (s->kb / 2) - s->kb) / s->sb + 1;
	size_t sizes[8] = {(size_t)(s->ma * s->c * s->ka * s->ka), (size_t)s->ma, (size_t)(s->ma * s->kb * s->kb),
			   (size_t)s->ma, (size_t)s->ma, (size_t)s->ma, (size_t)s->ma, (size_t)s->ma};
	const char *a = s->act_a ? "a" : "a2";

	for (int i = 0; i < 8; i++) {
		vals[i] = calloc(sizes[i], sizeof **vals);
		cr_assert(vals[i]);
		for (size_t j = 0; j < sizes[i]; j++)
			vals[i][j] = i == 7 ? 0.5 + fabs(frand()) : frand(); /* BN variance > 0 */
	}
	*nv = 8;
	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, s->c, s->h, s->w));
	gen_init(g, gp, "Wa", OQ_DT_FLOAT, GEN_SHAPE(s->ma, s->c, s->ka, s->ka), vals[0]);
	gen_init(g, gp, "Ba", OQ_DT_FLOAT, GEN_SHAPE(s->ma), vals[1]);
	gen_init(g, gp, "Wb", OQ_DT_FLOAT, GEN_SHAPE(s->ma, 1, s->kb, s->kb), vals[2]);
	gen_init(g, gp, "Bb", OQ_DT_FLOAT, GEN_SHAPE(s->ma), vals[3]);
	n = gen_node(g, gp, "Conv", "ca", s->bias ? "x,Wa,Ba" : "x,Wa", a);
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){s->sa, s->sa});
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){s->ka / 2, s->ka / 2, s->ka / 2, s->ka / 2});
	if (s->act_a)
		add_act(g, gp, s->act_a, "a", "a2", "acta");
	n = gen_node(g, gp, "Conv", "cb", s->bias ? "a2,Wb,Bb" : "a2,Wb", s->bn_b || s->act_b ? "b" : "y");
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){s->sb, s->sb});
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){s->kb / 2, s->kb / 2, s->kb / 2, s->kb / 2});
	gen_attr_int(g, n, "group", s->ma);
	if (s->bn_b) {
		gen_init(g, gp, "bs", OQ_DT_FLOAT, GEN_SHAPE(s->ma), vals[4]);
		gen_init(g, gp, "bb", OQ_DT_FLOAT, GEN_SHAPE(s->ma), vals[5]);
		gen_init(g, gp, "bm", OQ_DT_FLOAT, GEN_SHAPE(s->ma), vals[6]);
		gen_init(g, gp, "bv", OQ_DT_FLOAT, GEN_SHAPE(s->ma), vals[7]);
		gen_node(g, gp, "BatchNormalization", "bn", "b,bs,bb,bm,bv", s->act_b ? "b2" : "y");
	}
	if (s->act_b)
		add_act(g, gp, s->act_b, s->bn_b ? "b2" : "b", "y", "actb");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, s->ma, yh, yw));
	return g;
}

/* One run of m: threads, observer or not; *chained gets oq_exec_n_chained. */
static void run_chain(oq_model *m, int threads, int observe_all, const oq_rt *x, oq_rt *y, size_t *chained)
{
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	seen ob;

	memset(&ob, 0, sizeof ob);
	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec_new: %s", d.msg);
	if (observe_all)
		oq_exec_set_observer(e, observe, &ob);
	cr_assert_eq(oq_exec_run(e, x, 1, y, 1, &d), OQ_OK, "run: %s", d.msg);
	*chained = oq_exec_n_chained(e);
	oq_exec_free(e);
}

Test(exec_fuse, conv_depthwise_chain)
{
	/* bands (several per image), stride 2 and 1, a 3x3 stride-2 head (im2col), a head without
	 * epilogue, BN on the depthwise side, 5x5, channels in the lanes in the head (a 7x7 plane,
	 * depth 160), and 24 channels (the depthwise row kernels: the two kernels one after the other) */
	static const chain_spec cases[] = {
		{16, 60, 60, 64, 1, 1, 3, 2, 1, "Clip", "Clip", 0},
		{3, 61, 61, 32, 3, 2, 3, 1, 1, "Relu", NULL, 0},
		{24, 30, 30, 48, 1, 1, 5, 1, 0, NULL, "Relu", 1},
		{160, 7, 7, 96, 1, 1, 3, 1, 1, "Clip", "Clip", 0},
		{8, 20, 20, 24, 1, 1, 3, 1, 1, "Clip", "Clip", 0},
	};
	__builtin_cpu_init();
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const chain_spec *s = &cases[i];
		double *vals[8];
		int nv;
		gen_model *g;
		oq_model *m = NULL;
		oq_diag d;
		oq_rt x, y1, y2, y3, y4, y5;
		size_t ch;

		seed(900 + i);
		g = build_chain(s, vals, &nv);
		oq_diag_init(&d);
		cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
		cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 4, (const int64_t[]){1, s->c, s->h, s->w}), OQ_OK);
		for (size_t j = 0; j < x.nelem; j++)
			((float *)x.data)[j] = (float)frand();
		run_chain(m, 1, 0, &x, &y1, &ch);
		cr_expect_eq(ch, 1, "case %zu: one chain", i);
		run_chain(m, 2, 0, &x, &y2, &ch);
		run_chain(m, 1, 1, &x, &y3, &ch);
		oq_exec_no_chain = 1;
		run_chain(m, 1, 0, &x, &y4, &ch);
		oq_exec_no_chain = 0;
		cr_expect_eq(ch, 0, "case %zu: no chain when asked", i);
		oq_linalg_no_avx512 = 1;
		run_chain(m, 1, 0, &x, &y5, &ch);
		oq_linalg_no_avx512 = 0;
		cr_assert(y1.nelem > 0 && y1.nbytes == y2.nbytes && y1.nbytes == y3.nbytes && y1.nbytes == y4.nbytes &&
			  y1.nbytes == y5.nbytes, "case %zu: output sizes", i);
		cr_expect(!memcmp(y1.data, y2.data, y1.nbytes), "case %zu: threads 1 and 2 differ", i);
		cr_expect(!memcmp(y1.data, y3.data, y1.nbytes), "case %zu: chained and observed (unfused) differ", i);
		cr_expect(!memcmp(y1.data, y4.data, y1.nbytes), "case %zu: chained and not chained differ", i);
		cr_expect(!memcmp(y1.data, y5.data, y1.nbytes), "case %zu: AVX-512 chain and AVX2 / SSE differ", i);
		oq_rt_release(&x);
		oq_rt_release(&y1);
		oq_rt_release(&y2);
		oq_rt_release(&y3);
		oq_rt_release(&y4);
		oq_rt_release(&y5);
		for (int j = 0; j < nv; j++)
			free(vals[j]);
		oq_model_free(m);
		gen_free(g);
	}
}
