/*
 * test_linalg.c - the linalg kernel family (Conv, ConvTranspose, Gemm,
 * MatMul, Einsum, ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul).
 *
 * Two kinds of checks:
 * - small cases whose expected outputs are computed by hand in the
 *   comments (padding, strides, groups, transposes, broadcasting, zero
 *   points, round-half-to-even and saturation of the requantisation);
 * - random shapes (fixed seeds) run through the executor three ways: the
 *   fast path with 1 and 2 threads must be bit-identical, and must agree
 *   with the direct-loop reference path (oq_linalg_use_ref) within a
 *   float32 tolerance.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/linalg/linalg.h"

/* ------------------------------------------------------------- helpers */

typedef struct tin {
	const char *name;
	int dtype;
	int rank;
	int64_t dims[8];
	const double *vals;  /* NULL: random in [-1, 1) (float) or [lo, hi] for ints via rnd */
} tin;

static uint64_t rng = 1;

static void seed(uint64_t s)
{
	rng = s * 0x9E3779B97F4A7C15ull + 1;
}

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int irand(int lo, int hi) /* inclusive */
{
	return lo + (int)(next() % (uint64_t)(hi - lo + 1));
}

static double frand(void)
{
	return (double)(next() >> 11) / 9007199254740992.0 * 2 - 1;
}

static void make_rt(const tin *t, oq_rt *r)
{
	cr_assert_eq(oq_rt_alloc(r, t->dtype, t->rank, t->dims), OQ_OK);
	for (size_t i = 0; i < r->nelem; i++) {
		double v;
		if (t->vals)
			v = t->vals[i];
		else if (t->dtype == OQ_DT_UINT8)
			v = irand(0, 255);
		else if (t->dtype == OQ_DT_INT8)
			v = irand(-128, 127);
		else
			v = frand();
		oq_rt_set(r, i, v);
	}
}

/*
 * One-node model: inputs `in` (all graph inputs), op with its attributes set
 * by `attrs`, one output of dtype out_dt; runs with `threads` and returns
 * the output in *out (owned). Returns the run status (0 ok).
 */
typedef void (*attr_fn)(gen_model *g, Onnx__NodeProto *n, const void *ctx);

static int run_op(const char *op, int opset, const tin *in, size_t nin, const oq_rt *vals, attr_fn attrs,
		  const void *ctx, int out_dt, int threads, oq_rt *out, char *err, size_t errn)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	char names[256] = "";
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	int rc;

	gen_opset(g, "", opset);
	gp = gen_graph(g);
	for (size_t i = 0; i < nin; i++) {
		if (in[i].name[0])
			gen_input(g, gp, in[i].name, in[i].dtype, in[i].rank, in[i].dims);
		strcat(names, i ? "," : "");
		strcat(names, in[i].name);
	}
	n = gen_node(g, gp, op, "node", names, "y");
	if (attrs)
		attrs(g, n, ctx);
	gen_output(g, gp, "y", out_dt, -1, NULL);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	memset(out, 0, sizeof *out);
	{
		oq_rt fed[16];
		size_t nf = 0;
		for (size_t i = 0; i < nin; i++)
			if (in[i].name[0])
				fed[nf++] = vals[i];
		rc = oq_exec_new(m, &o, &e, &d);
		if (!rc)
			rc = oq_exec_run(e, fed, nf, out, 1, &d);
	}
	if (rc && err)
		snprintf(err, errn, "%s", d.msg);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
	return rc;
}

/* Expects out == want (n values) within tol. */
static void expect_vals(const oq_rt *out, const double *want, size_t n, double tol, const char *what)
{
	cr_assert_eq(out->nelem, n, "%s: %zu elements, want %zu", what, out->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_expect(fabs(oq_rt_get(out, i) - want[i]) <= tol, "%s: element %zu is %g, want %g", what, i,
			  oq_rt_get(out, i), want[i]);
}

static void expect_dims(const oq_rt *out, int rank, const int64_t *dims, const char *what)
{
	cr_assert_eq(out->rank, rank, "%s: rank %d, want %d", what, out->rank, rank);
	for (int i = 0; i < rank; i++)
		cr_expect_eq(out->dims[i], dims[i], "%s: dim %d is %lld, want %lld", what, i, (long long)out->dims[i],
			     (long long)dims[i]);
}

/* Generic attribute list for the tests: ints lists and single ints/floats/strings. */
typedef struct attrs {
	const char *iname[8];
	size_t in_n[8];
	int64_t iv[8][16];
	const char *sname[2], *sval[2];
	const char *fname[4];
	float fv[4];
	const char *one_name[4];
	int64_t one_v[4];
} attrs;

static void set_attrs(gen_model *g, Onnx__NodeProto *n, const void *ctx)
{
	const attrs *a = ctx;
	for (int i = 0; i < 8 && a->iname[i]; i++)
		gen_attr_ints(g, n, a->iname[i], a->in_n[i], a->iv[i]);
	for (int i = 0; i < 2 && a->sname[i]; i++)
		gen_attr_str(g, n, a->sname[i], a->sval[i]);
	for (int i = 0; i < 4 && a->fname[i]; i++)
		gen_attr_float(g, n, a->fname[i], a->fv[i]);
	for (int i = 0; i < 4 && a->one_name[i]; i++)
		gen_attr_int(g, n, a->one_name[i], a->one_v[i]);
}

static void add_ints(attrs *a, const char *name, size_t n, const int64_t *v)
{
	int i = 0;
	while (a->iname[i])
		i++;
	a->iname[i] = name;
	a->in_n[i] = n;
	memcpy(a->iv[i], v, n * sizeof *v);
}

static void add_int(attrs *a, const char *name, int64_t v)
{
	int i = 0;
	while (a->one_name[i])
		i++;
	a->one_name[i] = name;
	a->one_v[i] = v;
}

static void add_float(attrs *a, const char *name, float v)
{
	int i = 0;
	while (a->fname[i])
		i++;
	a->fname[i] = name;
	a->fv[i] = v;
}

/* Runs fast (threads 1 and 2) and reference; checks 1 vs 2 bit-identical and fast vs ref. */
static void fast_vs_ref(const char *op, int opset, const tin *in, size_t nin, const attrs *a, double tol,
			const char *what)
{
	oq_rt vals[16], o1, o2, oref;
	char err[1024] = "";
	for (size_t i = 0; i < nin; i++)
		make_rt(&in[i], &vals[i]);
	oq_linalg_use_ref = 0;
	cr_assert_eq(run_op(op, opset, in, nin, vals, set_attrs, a, OQ_DT_FLOAT, 1, &o1, err, sizeof err), 0,
		     "%s: %s", what, err);
	cr_assert_eq(run_op(op, opset, in, nin, vals, set_attrs, a, OQ_DT_FLOAT, 2, &o2, err, sizeof err), 0,
		     "%s: %s", what, err);
	oq_linalg_use_ref = 1;
	cr_assert_eq(run_op(op, opset, in, nin, vals, set_attrs, a, OQ_DT_FLOAT, 1, &oref, err, sizeof err), 0,
		     "%s: %s", what, err);
	oq_linalg_use_ref = 0;
	cr_assert_eq(o1.nelem, o2.nelem);
	cr_assert_eq(o1.nelem, oref.nelem, "%s: %zu vs %zu elements", what, o1.nelem, oref.nelem);
	cr_expect(o1.nbytes == 0 || memcmp(o1.data, o2.data, o1.nbytes) == 0, "%s: threads 1 and 2 differ", what);
	for (size_t i = 0; i < o1.nelem; i++) {
		double x = ((float *)o1.data)[i], r = ((float *)oref.data)[i];
		if (!(fabs(x - r) <= tol + tol * fabs(r))) {
			cr_expect(0, "%s: element %zu fast %.8g ref %.8g", what, i, x, r);
			break;
		}
	}
	for (size_t i = 0; i < nin; i++)
		oq_rt_release(&vals[i]);
	oq_rt_release(&o1);
	oq_rt_release(&o2);
	oq_rt_release(&oref);
}

/* ---------------------------------------------------------- hand cases */

static const double x9[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

Test(linalg, conv_2x2_ones_valid_and_bias)
{
	/* x = [[1,2,3],[4,5,6],[7,8,9]], w = ones(2x2): window sums 12 16 24 28, + bias 0.5 */
	static const double w[] = {1, 1, 1, 1}, b[] = {0.5};
	tin in[] = {{"x", OQ_DT_FLOAT, 4, {1, 1, 3, 3}, x9}, {"w", OQ_DT_FLOAT, 4, {1, 1, 2, 2}, w},
		    {"b", OQ_DT_FLOAT, 1, {1}, b}};
	oq_rt v[3], out;
	static const double want[] = {12.5, 16.5, 24.5, 28.5};
	for (int i = 0; i < 3; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("Conv", 13, in, 3, v, NULL, NULL, OQ_DT_FLOAT, 2, &out, NULL, 0), 0);
	expect_dims(&out, 4, (const int64_t[]){1, 1, 2, 2}, "conv");
	expect_vals(&out, want, 4, 1e-6, "conv");
	oq_rt_release(&out);
	for (int i = 0; i < 3; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, conv_pads_strides_same_upper)
{
	/*
	 * x 3x3 as above, w = ones(2x2), strides 2, auto_pad SAME_UPPER: out = ceil(3/2) = 2,
	 * total pad = (2-1)*2 + 2 - 3 = 1 -> 0 before, 1 after. Windows at rows {0,1},{2,(pad)}:
	 * [1+2+4+5, 3+6, 7+8, 9] = [12, 9, 15, 9]. SAME_LOWER puts the pad first:
	 * windows rows {(pad),0},{1,2} cols likewise: [1, 2+3, 4+7, 5+6+8+9] = [1, 5, 11, 28].
	 */
	static const double w[] = {1, 1, 1, 1};
	tin in[] = {{"x", OQ_DT_FLOAT, 4, {1, 1, 3, 3}, x9}, {"w", OQ_DT_FLOAT, 4, {1, 1, 2, 2}, w}};
	oq_rt v[2], out;
	attrs a;
	static const double up[] = {12, 9, 15, 9}, lo[] = {1, 5, 11, 28};
	for (int i = 0; i < 2; i++)
		make_rt(&in[i], &v[i]);
	memset(&a, 0, sizeof a);
	add_ints(&a, "strides", 2, (const int64_t[]){2, 2});
	a.sname[0] = "auto_pad";
	a.sval[0] = "SAME_UPPER";
	cr_assert_eq(run_op("Conv", 11, in, 2, v, set_attrs, &a, OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	expect_vals(&out, up, 4, 1e-6, "same_upper");
	oq_rt_release(&out);
	a.sval[0] = "SAME_LOWER";
	cr_assert_eq(run_op("Conv", 11, in, 2, v, set_attrs, &a, OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	expect_vals(&out, lo, 4, 1e-6, "same_lower");
	oq_rt_release(&out);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, conv_depthwise_padded)
{
	/*
	 * 2 channels, group 2, 3x3 kernel of ones (channel 0) / centre-only 2 (channel 1), pads 1.
	 * Channel 0 = x9: out[0][0] = 1+2+4+5 = 12, centre = 45, corner (2,2) = 5+6+8+9 = 28.
	 * Channel 1 = x9 * 2 (centre tap 2): out = 2 * x.
	 */
	double x[18], w[18];
	tin in[] = {{"x", OQ_DT_FLOAT, 4, {1, 2, 3, 3}, x}, {"w", OQ_DT_FLOAT, 4, {2, 1, 3, 3}, w}};
	oq_rt v[2], out;
	attrs a;
	for (int i = 0; i < 9; i++) {
		x[i] = x[9 + i] = i + 1;
		w[i] = 1;
		w[9 + i] = i == 4 ? 2 : 0;
	}
	for (int i = 0; i < 2; i++)
		make_rt(&in[i], &v[i]);
	memset(&a, 0, sizeof a);
	add_ints(&a, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	add_int(&a, "group", 2);
	cr_assert_eq(run_op("Conv", 11, in, 2, v, set_attrs, &a, OQ_DT_FLOAT, 2, &out, NULL, 0), 0);
	cr_expect_float_eq(((float *)out.data)[0], 12, 1e-6);
	cr_expect_float_eq(((float *)out.data)[4], 45, 1e-6);
	cr_expect_float_eq(((float *)out.data)[8], 28, 1e-6);
	for (int i = 0; i < 9; i++)
		cr_expect_float_eq(((float *)out.data)[9 + i], 2 * (i + 1), 1e-6);
	oq_rt_release(&out);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, conv_transpose_1d_and_output_padding)
{
	/*
	 * x = [1, 2], w = [1, 1] (C=1, M=1), stride 2: y[2i + k] += x[i] w[k] -> [1, 1, 2, 2];
	 * output_padding 1 adds one more position (bias only): [1, 1, 2, 2, 0] + bias 1.
	 */
	static const double x[] = {1, 2}, w[] = {1, 1}, b[] = {1};
	tin in[] = {{"x", OQ_DT_FLOAT, 3, {1, 1, 2}, x}, {"w", OQ_DT_FLOAT, 3, {1, 1, 2}, w},
		    {"b", OQ_DT_FLOAT, 1, {1}, b}};
	oq_rt v[3], out;
	attrs a;
	static const double want[] = {2, 2, 3, 3, 1};
	for (int i = 0; i < 3; i++)
		make_rt(&in[i], &v[i]);
	memset(&a, 0, sizeof a);
	add_ints(&a, "strides", 1, (const int64_t[]){2});
	add_ints(&a, "output_padding", 1, (const int64_t[]){1});
	cr_assert_eq(run_op("ConvTranspose", 11, in, 3, v, set_attrs, &a, OQ_DT_FLOAT, 2, &out, NULL, 0), 0);
	expect_dims(&out, 3, (const int64_t[]){1, 1, 5}, "convt");
	expect_vals(&out, want, 5, 1e-6, "convt");
	oq_rt_release(&out);
	for (int i = 0; i < 3; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, gemm_trans_alpha_beta_row_bias)
{
	/*
	 * A^T with A = [[1,2],[3,4]] (2x2) -> [[1,3],[2,4]]; B^T with B = [[1,0],[1,1],[0,2]] (3x2) ->
	 * [[1,1,0],[0,1,2]]. A^T B^T = [[1,4,6],[2,6,8]]; alpha 2 -> [[2,8,12],[4,12,16]];
	 * C = [1,2,3] broadcast over rows, beta 0.5 -> + [0.5,1,1.5].
	 */
	static const double A[] = {1, 2, 3, 4}, B[] = {1, 0, 1, 1, 0, 2}, C[] = {1, 2, 3};
	tin in[] = {{"a", OQ_DT_FLOAT, 2, {2, 2}, A}, {"b", OQ_DT_FLOAT, 2, {3, 2}, B}, {"c", OQ_DT_FLOAT, 1, {3}, C}};
	oq_rt v[3], out;
	attrs a;
	static const double want[] = {2.5, 9, 13.5, 4.5, 13, 17.5};
	for (int i = 0; i < 3; i++)
		make_rt(&in[i], &v[i]);
	memset(&a, 0, sizeof a);
	add_int(&a, "transA", 1);
	add_int(&a, "transB", 1);
	add_float(&a, "alpha", 2);
	add_float(&a, "beta", 0.5f);
	cr_assert_eq(run_op("Gemm", 13, in, 3, v, set_attrs, &a, OQ_DT_FLOAT, 2, &out, NULL, 0), 0);
	expect_dims(&out, 2, (const int64_t[]){2, 3}, "gemm");
	expect_vals(&out, want, 6, 1e-6, "gemm");
	oq_rt_release(&out);
	for (int i = 0; i < 3; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, gemm_column_bias_and_missing_c)
{
	/* A = [[1,2]], B = [[3],[4]] -> 11; C of shape [1,1] = 5 -> 16; C omitted (opset 11) -> 11 */
	static const double A[] = {1, 2}, B[] = {3, 4}, C[] = {5};
	tin in[] = {{"a", OQ_DT_FLOAT, 2, {1, 2}, A}, {"b", OQ_DT_FLOAT, 2, {2, 1}, B}, {"c", OQ_DT_FLOAT, 2, {1, 1}, C}};
	oq_rt v[3], out;
	for (int i = 0; i < 3; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("Gemm", 13, in, 3, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	expect_vals(&out, (const double[]){16}, 1, 1e-6, "gemm C");
	oq_rt_release(&out);
	cr_assert_eq(run_op("Gemm", 13, in, 2, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	expect_vals(&out, (const double[]){11}, 1, 1e-6, "gemm no C");
	oq_rt_release(&out);
	/* before opset 11 C is required */
	cr_expect_neq(run_op("Gemm", 9, in, 2, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	oq_rt_release(&out);
	for (int i = 0; i < 3; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, matmul_1d_and_broadcast)
{
	/* [1,2] (1-D) x [[1,2,3],[4,5,6]] = [9,12,15], shape [3] */
	static const double a1[] = {1, 2}, b[] = {1, 2, 3, 4, 5, 6};
	/* batch broadcast: A [2,1,2] x B [2,3] -> [2,1,3]; A = [[1,2]], [[0,1]] -> [9,12,15], [4,5,6] */
	static const double a2[] = {1, 2, 0, 1};
	tin in[] = {{"a", OQ_DT_FLOAT, 1, {2}, a1}, {"b", OQ_DT_FLOAT, 2, {2, 3}, b}};
	tin in2[] = {{"a", OQ_DT_FLOAT, 3, {2, 1, 2}, a2}, {"b", OQ_DT_FLOAT, 2, {2, 3}, b}};
	oq_rt v[2], out;
	for (int i = 0; i < 2; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("MatMul", 13, in, 2, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	expect_dims(&out, 1, (const int64_t[]){3}, "1-D matmul");
	expect_vals(&out, (const double[]){9, 12, 15}, 3, 1e-6, "1-D matmul");
	oq_rt_release(&out);
	oq_rt_release(&v[0]);
	make_rt(&in2[0], &v[0]);
	cr_assert_eq(run_op("MatMul", 13, in2, 2, v, NULL, NULL, OQ_DT_FLOAT, 2, &out, NULL, 0), 0);
	expect_dims(&out, 3, (const int64_t[]){2, 1, 3}, "batched matmul");
	expect_vals(&out, (const double[]){9, 12, 15, 4, 5, 6}, 6, 1e-6, "batched matmul");
	oq_rt_release(&out);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, matmul_int32_exact)
{
	/* int64: [[100000, 1]] x [[30000],[7]] = 3000000007, above 2^31 and exact */
	static const double a[] = {100000, 1}, b[] = {30000, 7};
	tin in[] = {{"a", OQ_DT_INT64, 2, {1, 2}, a}, {"b", OQ_DT_INT64, 2, {2, 1}, b}};
	oq_rt v[2], out;
	for (int i = 0; i < 2; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("MatMul", 13, in, 2, v, NULL, NULL, OQ_DT_INT64, 1, &out, NULL, 0), 0);
	cr_expect_eq(((int64_t *)out.data)[0], 3000000007LL);
	oq_rt_release(&out);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, bad_shapes_are_errors)
{
	static const double z[64] = {0};
	tin in[] = {{"a", OQ_DT_FLOAT, 2, {2, 3}, z}, {"b", OQ_DT_FLOAT, 2, {2, 3}, z}};
	tin cin[] = {{"x", OQ_DT_FLOAT, 4, {1, 3, 4, 4}, z}, {"w", OQ_DT_FLOAT, 4, {2, 2, 3, 3}, z}};
	oq_rt v[2], out;
	char err[512];
	for (int i = 0; i < 2; i++)
		make_rt(&in[i], &v[i]);
	cr_expect_neq(run_op("MatMul", 13, in, 2, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, err, sizeof err), 0);
	cr_expect(strstr(err, "inner dims"), "message: %s", err);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
	for (int i = 0; i < 2; i++)
		make_rt(&cin[i], &v[i]);
	cr_expect_neq(run_op("Conv", 13, cin, 2, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, err, sizeof err), 0);
	cr_expect(strstr(err, "channels"), "message: %s", err);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
	/* a kernel with a zero-sized spatial dim (found by fuzz_quantize: a division by zero) */
	cin[1].dims[1] = 3;
	cin[1].dims[2] = 0;
	for (int i = 0; i < 2; i++)
		make_rt(&cin[i], &v[i]);
	cr_expect_eq(run_op("Conv", 13, cin, 2, v, NULL, NULL, OQ_DT_FLOAT, 1, &out, err, sizeof err), OQ_EINVAL);
	cr_expect(strstr(err, "empty kernel"), "message: %s", err);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, conv_integer_zero_points)
{
	/*
	 * x uint8 [[2,3],[4,5]] with zp 1 -> [[1,2],[3,4]]; w uint8 1x2 ones, zp 0; one pad on the
	 * left (pads [0,1,0,0]). The padded position is a real zero (the zero point), so the
	 * windows are [0,1],[1,2] and [0,3],[3,4] -> [1, 3, 3, 7].
	 */
	static const double x[] = {2, 3, 4, 5}, w[] = {1, 1}, xz[] = {1}, wz[] = {0};
	tin in[] = {{"x", OQ_DT_UINT8, 4, {1, 1, 2, 2}, x}, {"w", OQ_DT_UINT8, 4, {1, 1, 1, 2}, w},
		    {"xz", OQ_DT_UINT8, 0, {0}, xz}, {"wz", OQ_DT_UINT8, 0, {0}, wz}};
	oq_rt v[4], out;
	attrs a;
	for (int i = 0; i < 4; i++)
		make_rt(&in[i], &v[i]);
	memset(&a, 0, sizeof a);
	add_ints(&a, "pads", 4, (const int64_t[]){0, 1, 0, 0});
	cr_assert_eq(run_op("ConvInteger", 10, in, 4, v, set_attrs, &a, OQ_DT_INT32, 1, &out, NULL, 0), 0);
	cr_assert_eq(out.dtype, OQ_DT_INT32);
	expect_dims(&out, 4, (const int64_t[]){1, 1, 2, 2}, "convinteger");
	expect_vals(&out, (const double[]){1, 3, 3, 7}, 4, 0, "convinteger");
	oq_rt_release(&out);
	for (int i = 0; i < 4; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, matmul_integer_per_row_and_column_zero_points)
{
	/*
	 * A int8 [[1,2],[3,4]] with per-row zp [1, 2] -> [[0,1],[1,2]];
	 * B int8 [[1,1],[1,1]] with per-column zp [0, 1] -> [[1,0],[1,0]].
	 * A'B' = [[1,0],[3,0]].
	 */
	static const double A[] = {1, 2, 3, 4}, B[] = {1, 1, 1, 1}, az[] = {1, 2}, bz[] = {0, 1};
	tin in[] = {{"a", OQ_DT_INT8, 2, {2, 2}, A}, {"b", OQ_DT_INT8, 2, {2, 2}, B},
		    {"az", OQ_DT_INT8, 1, {2}, az}, {"bz", OQ_DT_INT8, 1, {2}, bz}};
	oq_rt v[4], out;
	for (int i = 0; i < 4; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("MatMulInteger", 10, in, 4, v, NULL, NULL, OQ_DT_INT32, 2, &out, NULL, 0), 0);
	expect_vals(&out, (const double[]){1, 0, 3, 0}, 4, 0, "matmulinteger");
	oq_rt_release(&out);
	for (int i = 0; i < 4; i++)
		oq_rt_release(&v[i]);
}

Test(linalg, qlinear_matmul_round_half_even_and_saturate)
{
	/*
	 * A uint8 1x1 [x], B uint8 1x1 [1], zps 0, scales a=0.5 b=1 y=1 -> y = round(x/2) + yzp:
	 * x = 5 -> 2.5 -> 2; x = 7 -> 3.5 -> 4; x = 1 -> 0.5 -> 0; x = 3 -> 1.5 -> 2.
	 * Use A 4x1 and B 1x1, y zp 10 -> [12, 14, 10, 12]. Saturation: x = 255 with
	 * y scale 0.01 -> 12750 + 10 -> 255; int8 output zp -128 and negative b -> -128.
	 */
	static const double A[] = {5, 7, 1, 3}, B[] = {1}, as[] = {0.5}, z[] = {0}, bs[] = {1}, ys[] = {1},
			    yz[] = {10};
	tin in[] = {{"a", OQ_DT_UINT8, 2, {4, 1}, A},   {"as", OQ_DT_FLOAT, 0, {0}, as}, {"az", OQ_DT_UINT8, 0, {0}, z},
		    {"b", OQ_DT_UINT8, 2, {1, 1}, B},   {"bs", OQ_DT_FLOAT, 0, {0}, bs}, {"bz", OQ_DT_UINT8, 0, {0}, z},
		    {"ys", OQ_DT_FLOAT, 0, {0}, ys},    {"yz", OQ_DT_UINT8, 0, {0}, yz}};
	oq_rt v[8], out;
	for (int i = 0; i < 8; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("QLinearMatMul", 10, in, 8, v, NULL, NULL, OQ_DT_UINT8, 1, &out, NULL, 0), 0);
	expect_vals(&out, (const double[]){12, 14, 10, 12}, 4, 0, "qlinearmatmul ties");
	oq_rt_release(&out);
	/* saturation high */
	((uint8_t *)v[0].data)[0] = 255;
	((float *)v[6].data)[0] = 0.01f;
	cr_assert_eq(run_op("QLinearMatMul", 10, in, 8, v, NULL, NULL, OQ_DT_UINT8, 1, &out, NULL, 0), 0);
	cr_expect_eq(((uint8_t *)out.data)[0], 255);
	oq_rt_release(&out);
	for (int i = 0; i < 8; i++)
		oq_rt_release(&v[i]);
	{
		/* int8: a = 100, b = -100 (zp 0), scales 1,1, y scale 1, y zp -128 -> -10000 - 128 -> -128 */
		static const double A2[] = {100}, B2[] = {-100}, one[] = {1}, yz2[] = {-128};
		tin in2[] = {{"a", OQ_DT_INT8, 2, {1, 1}, A2}, {"as", OQ_DT_FLOAT, 0, {0}, one}, {"az", OQ_DT_INT8, 0, {0}, z},
			     {"b", OQ_DT_INT8, 2, {1, 1}, B2}, {"bs", OQ_DT_FLOAT, 0, {0}, one}, {"bz", OQ_DT_INT8, 0, {0}, z},
			     {"ys", OQ_DT_FLOAT, 0, {0}, one}, {"yz", OQ_DT_INT8, 0, {0}, yz2}};
		for (int i = 0; i < 8; i++)
			make_rt(&in2[i], &v[i]);
		cr_assert_eq(run_op("QLinearMatMul", 10, in2, 8, v, NULL, NULL, OQ_DT_INT8, 1, &out, NULL, 0), 0);
		cr_expect_eq(((int8_t *)out.data)[0], -128);
		oq_rt_release(&out);
		for (int i = 0; i < 8; i++)
			oq_rt_release(&v[i]);
	}
}

Test(linalg, qlinear_conv_per_channel)
{
	/*
	 * x uint8 1x1x1x2 = [10, 20], zp 10 -> [0, 10]; w int8 2x1x1x1 = [3, -4], per-channel zp 0,
	 * scales x 0.1, w [0.5, 0.25], y 1, y zp 100 (uint8); bias [5, -7] (int32, scale x*w).
	 * channel 0: acc = 3*[0,10] + 5 = [5, 35];  * 0.05 = [0.25, 1.75] -> [0, 2] + 100 = [100, 102]
	 * channel 1: acc = -4*[0,10] - 7 = [-7, -47]; * 0.025 = [-0.175, -1.175] -> [0, -1] -> [100, 99]
	 */
	static const double x[] = {10, 20}, xs[] = {0.1}, xz[] = {10}, w[] = {3, -4}, ws[] = {0.5, 0.25},
			    wz[] = {0, 0}, ys[] = {1}, yz[] = {100}, b[] = {5, -7};
	tin in[] = {{"x", OQ_DT_UINT8, 4, {1, 1, 1, 2}, x}, {"xs", OQ_DT_FLOAT, 0, {0}, xs},
		    {"xz", OQ_DT_UINT8, 0, {0}, xz},          {"w", OQ_DT_INT8, 4, {2, 1, 1, 1}, w},
		    {"ws", OQ_DT_FLOAT, 1, {2}, ws},          {"wz", OQ_DT_INT8, 1, {2}, wz},
		    {"ys", OQ_DT_FLOAT, 0, {0}, ys},          {"yz", OQ_DT_UINT8, 0, {0}, yz},
		    {"b", OQ_DT_INT32, 1, {2}, b}};
	oq_rt v[9], out;
	for (int i = 0; i < 9; i++)
		make_rt(&in[i], &v[i]);
	cr_assert_eq(run_op("QLinearConv", 10, in, 9, v, NULL, NULL, OQ_DT_UINT8, 2, &out, NULL, 0), 0);
	expect_dims(&out, 4, (const int64_t[]){1, 2, 1, 2}, "qlinearconv");
	expect_vals(&out, (const double[]){100, 102, 100, 99}, 4, 0, "qlinearconv");
	oq_rt_release(&out);
	for (int i = 0; i < 9; i++)
		oq_rt_release(&v[i]);
}

static void einsum_eq(gen_model *g, Onnx__NodeProto *n, const void *ctx)
{
	gen_attr_str(g, n, "equation", ctx);
}

Test(linalg, einsum_forms)
{
	/* m = [[1,2],[3,4]]: trace 5, diagonal [1,4], transpose [1,3,2,4], row sums [3,7],
	 * outer [1,2]x[3,4] = [3,4,6,8], implicit "ij,jk" = m@m = [[7,10],[15,22]] */
	static const double m[] = {1, 2, 3, 4}, u[] = {1, 2}, w[] = {3, 4};
	tin in[] = {{"m", OQ_DT_FLOAT, 2, {2, 2}, m}, {"n", OQ_DT_FLOAT, 2, {2, 2}, m}};
	tin vin[] = {{"u", OQ_DT_FLOAT, 1, {2}, u}, {"w", OQ_DT_FLOAT, 1, {2}, w}};
	oq_rt v[2], out;
	struct {
		const char *eq;
		int two;
		size_t n;
		double want[4];
	} cases[] = {{"ii->", 0, 1, {5}},        {"ii->i", 0, 2, {1, 4}},        {"ij->ji", 0, 4, {1, 3, 2, 4}},
		     {"ij->i", 0, 2, {3, 7}},    {"ij,jk", 1, 4, {7, 10, 15, 22}}, {"...j,...j->...", 1, 2, {5, 25}}};
	for (int i = 0; i < 2; i++)
		make_rt(&in[i], &v[i]);
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		cr_assert_eq(run_op("Einsum", 12, in, cases[c].two ? 2 : 1, v, einsum_eq, cases[c].eq, OQ_DT_FLOAT, 1,
				    &out, NULL, 0),
			     0, "%s", cases[c].eq);
		expect_vals(&out, cases[c].want, cases[c].n, 1e-6, cases[c].eq);
		oq_rt_release(&out);
	}
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
	for (int i = 0; i < 2; i++)
		make_rt(&vin[i], &v[i]);
	cr_assert_eq(run_op("Einsum", 12, vin, 2, v, einsum_eq, "i,j->ij", OQ_DT_FLOAT, 1, &out, NULL, 0), 0);
	expect_vals(&out, (const double[]){3, 4, 6, 8}, 4, 1e-6, "outer");
	oq_rt_release(&out);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&v[i]);
}

/* ---------------------------------------------------------- random */

/* A random valid convolution: fills in[] (x, w, b?) and attributes. Returns the number of inputs. */
static size_t random_conv(int transpose, int nsp, tin *in, attrs *a)
{
	int64_t n = irand(1, 2), group, cg, mg, k[3], s[3], d[3], pads[6], inn[3];
	int depthwise = !transpose && irand(0, 3) == 0;
	int one = !transpose && irand(0, 4) == 0;
	group = depthwise ? irand(1, 12) : irand(0, 2) ? 1 : irand(2, 3);
	cg = depthwise ? 1 : irand(1, 5);
	mg = depthwise ? 1 : irand(1, 6);
	memset(a, 0, sizeof *a);
	for (int i = 0; i < nsp; i++) {
		k[i] = one ? 1 : irand(1, nsp == 3 ? 3 : 5);
		s[i] = one ? 1 : irand(1, 3);
		d[i] = one ? 1 : irand(1, 2);
		pads[i] = one ? 0 : irand(0, 2);
		pads[i + nsp] = one ? 0 : irand(0, 2);
		inn[i] = (k[i] - 1) * d[i] + 1 + irand(0, nsp == 3 ? 4 : 20);
		if (transpose && pads[i] + pads[i + nsp] > (inn[i] - 1) * s[i] + (k[i] - 1) * d[i])
			pads[i] = pads[i + nsp] = 0;
	}
	if (nsp == 2 && irand(0, 3) == 0) /* a big plane now and then: several tiles */
		inn[0] = inn[1] = irand(40, 70);
	in[0].name = "x";
	in[0].dtype = OQ_DT_FLOAT;
	in[0].rank = nsp + 2;
	in[0].dims[0] = n;
	in[0].dims[1] = group * cg;
	in[1].name = "w";
	in[1].dtype = OQ_DT_FLOAT;
	in[1].rank = nsp + 2;
	in[1].dims[0] = transpose ? group * cg : group * mg;
	in[1].dims[1] = transpose ? mg : cg;
	for (int i = 0; i < nsp; i++) {
		in[0].dims[i + 2] = inn[i];
		in[1].dims[i + 2] = k[i];
	}
	in[0].vals = in[1].vals = NULL;
	add_ints(a, "strides", (size_t)nsp, s);
	add_ints(a, "dilations", (size_t)nsp, d);
	if (group > 1)
		add_int(a, "group", group);
	if (irand(0, 3) == 0 && !transpose) {
		a->sname[0] = "auto_pad";
		a->sval[0] = irand(0, 1) ? "SAME_UPPER" : "SAME_LOWER";
	} else {
		add_ints(a, "pads", 2 * (size_t)nsp, pads);
	}
	if (transpose && irand(0, 2) == 0) {
		int64_t op[3];
		for (int i = 0; i < nsp; i++)
			op[i] = irand(0, (int)(s[i] > d[i] ? s[i] : d[i]) - 1);
		add_ints(a, "output_padding", (size_t)nsp, op);
	}
	if (irand(0, 1)) {
		in[2].name = "b";
		in[2].dtype = OQ_DT_FLOAT;
		in[2].rank = 1;
		in[2].dims[0] = group * mg;
		in[2].vals = NULL;
		return 3;
	}
	return 2;
}

Test(linalg, random_conv_fast_vs_ref)
{
	for (uint64_t sd = 1; sd <= 60; sd++) {
		tin in[3];
		attrs a;
		char what[64];
		size_t nin;
		seed(sd);
		nin = random_conv(0, sd % 6 == 0 ? 3 : sd % 6 == 1 ? 1 : 2, in, &a);
		snprintf(what, sizeof what, "conv seed %llu", (unsigned long long)sd);
		fast_vs_ref("Conv", 11, in, nin, &a, 1e-4, what);
	}
}

Test(linalg, random_conv_transpose_fast_vs_ref)
{
	for (uint64_t sd = 100; sd <= 140; sd++) {
		tin in[3];
		attrs a;
		char what[64];
		size_t nin;
		seed(sd);
		nin = random_conv(1, sd % 5 == 0 ? 3 : sd % 5 == 1 ? 1 : 2, in, &a);
		snprintf(what, sizeof what, "convtranspose seed %llu", (unsigned long long)sd);
		fast_vs_ref("ConvTranspose", 11, in, nin, &a, 1e-4, what);
	}
}

Test(linalg, big_conv_layers_fast_vs_ref)
{
	/* shapes like resnet / mobilenet layers, big enough to use channel and position tiles */
	static const int64_t shapes[][8] = {
		/* c, h, m, k, stride, pad, group, n */
		{64, 28, 64, 3, 1, 1, 1, 1},   {256, 14, 64, 1, 1, 0, 1, 2}, {32, 30, 32, 3, 2, 1, 32, 1},
		{24, 33, 24, 5, 1, 2, 24, 1},  {128, 7, 256, 3, 1, 1, 1, 1}, {3, 64, 16, 7, 2, 3, 1, 1},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		const int64_t *s = shapes[i];
		tin in[3] = {{"x", OQ_DT_FLOAT, 4, {s[7], s[0], s[1], s[1]}, NULL},
			     {"w", OQ_DT_FLOAT, 4, {s[2], s[0] / s[6], s[3], s[3]}, NULL},
			     {"b", OQ_DT_FLOAT, 1, {s[2]}, NULL}};
		attrs a;
		char what[64];
		memset(&a, 0, sizeof a);
		add_ints(&a, "strides", 2, (const int64_t[]){s[4], s[4]});
		add_ints(&a, "pads", 4, (const int64_t[]){s[5], s[5], s[5], s[5]});
		add_int(&a, "group", s[6]);
		seed(1000 + i);
		snprintf(what, sizeof what, "layer %zu", i);
		fast_vs_ref("Conv", 11, in, 3, &a, 1e-4, what);
	}
}

Test(linalg, random_gemm_matmul_fast_vs_ref)
{
	for (uint64_t sd = 200; sd <= 240; sd++) {
		tin in[3];
		attrs a;
		char what[64];
		int64_t m, n, kd;
		int ta, tb;
		seed(sd);
		m = irand(1, sd % 4 == 0 ? 300 : 40);
		n = irand(1, sd % 3 == 0 ? 300 : 40);
		kd = irand(1, 200);
		ta = irand(0, 1);
		tb = irand(0, 1);
		memset(&a, 0, sizeof a);
		memset(in, 0, sizeof in);
		add_int(&a, "transA", ta);
		add_int(&a, "transB", tb);
		add_float(&a, "alpha", (float)frand() + 2);
		add_float(&a, "beta", (float)frand());
		in[0] = (tin){"a", OQ_DT_FLOAT, 2, {ta ? kd : m, ta ? m : kd}, NULL};
		in[1] = (tin){"b", OQ_DT_FLOAT, 2, {tb ? n : kd, tb ? kd : n}, NULL};
		switch (irand(0, 3)) {
		case 0:
			in[2] = (tin){"c", OQ_DT_FLOAT, 1, {n}, NULL};
			break;
		case 1:
			in[2] = (tin){"c", OQ_DT_FLOAT, 2, {m, 1}, NULL};
			break;
		case 2:
			in[2] = (tin){"c", OQ_DT_FLOAT, 2, {m, n}, NULL};
			break;
		default:
			in[2] = (tin){"c", OQ_DT_FLOAT, 0, {0}, NULL};
		}
		snprintf(what, sizeof what, "gemm seed %llu", (unsigned long long)sd);
		fast_vs_ref("Gemm", 13, in, 3, &a, 1e-4, what);

		/* MatMul with broadcast batch dims */
		{
			int64_t b0 = irand(1, 3), b1 = irand(1, 4);
			memset(&a, 0, sizeof a);
			in[0] = (tin){"a", OQ_DT_FLOAT, 4, {b0, irand(0, 1) ? b1 : 1, m, kd}, NULL};
			in[1] = (tin){"b", OQ_DT_FLOAT, 3, {b1, kd, n}, NULL};
			if (irand(0, 3) == 0)
				in[1] = (tin){"b", OQ_DT_FLOAT, 1, {kd}, NULL};
			snprintf(what, sizeof what, "matmul seed %llu", (unsigned long long)sd);
			fast_vs_ref("MatMul", 13, in, 2, &a, 1e-4, what);
			/* a 2-D B: the batch folds into the rows of one product */
			in[1] = (tin){"b", OQ_DT_FLOAT, 2, {kd, n}, NULL};
			snprintf(what, sizeof what, "matmul 2-D B seed %llu", (unsigned long long)sd);
			fast_vs_ref("MatMul", 13, in, 2, &a, 1e-4, what);
		}
	}
}

/*
 * Depthwise Conv on odd shapes through the float engines: on AVX-512 the
 * channel-blocked kernel (16 channels per vector, used when the blocks are
 * nearly full: channels a multiple of 16 here every third seed) and the row
 * kernels (16 outputs per vector, masked loads at the row edges, horizontal
 * stride 1 and 2; forced with oq_linalg_dw_rows), the AVX2 kernels
 * (oq_linalg_no_avx512; on an AVX2 CPU the best engine too): 8 channels in
 * the lanes where the 8-channel blocks are nearly full, else (and with
 * oq_linalg_dw_rows) the rows of a zero-padded copy, and the SSE kernel on
 * that copy (oq_linalg_use_blas turns AVX2 off). All add b + w * x over every tap
 * in (i, j) order with separate multiply and add, so their outputs must be
 * the same bits; also the same for 1 and 2 threads and within 1e-4 of the
 * double-precision reference. Shapes: channels not a multiple of 8 or 16,
 * widths 1..17 (and a few wider, for several 16-lane blocks), kernels 1..7
 * not square, asymmetric pads up to 3, dilations up to 3, strides 1..3
 * (horizontal stride 3 takes the SSE path in the row kernels).
 */
Test(linalg, depthwise_avx512_vs_sse_vs_ref)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX2 and FMA on this CPU: nothing to compare");
	for (uint64_t sd = 1; sd <= 120; sd++) {
		int64_t c, kh, kw, sh, sw, dh, dw, pads[4], h, w;
		tin in[3];
		attrs a;
		oq_rt vals[3], o1, o2, os, osse, orow, oref;
		char what[192], err[1024] = "";
		size_t nin;
		seed(5000 + sd);
		c = sd % 3 == 0 ? 16 * irand(1, 3) : irand(1, 37);
		kh = sd % 4 == 0 ? 3 : sd % 4 == 1 ? 5 : irand(1, 7);
		kw = sd % 4 == 0 ? 3 : sd % 4 == 1 ? 5 : irand(1, 7);
		sh = irand(1, 3);
		sw = sd % 10 == 0 ? 3 : irand(1, 2);
		dh = irand(0, 2) ? 1 : irand(2, 3);
		dw = irand(0, 2) ? 1 : irand(2, 3);
		for (int i = 0; i < 4; i++)
			pads[i] = irand(0, 3);
		h = (kh - 1) * dh + 1 - pads[0] - pads[2] + irand(0, 12);
		w = sd % 7 == 0 ? irand(18, 70) : irand(1, 17);
		if (h < 1)
			h = 1;
		/* the padded extents must hold one kernel */
		while (h + pads[0] + pads[2] < (kh - 1) * dh + 1)
			pads[2]++;
		while (w + pads[1] + pads[3] < (kw - 1) * dw + 1)
			pads[3]++;
		memset(&a, 0, sizeof a);
		memset(in, 0, sizeof in);
		in[0] = (tin){"x", OQ_DT_FLOAT, 4, {irand(1, 2), c, h, w}, NULL};
		in[1] = (tin){"w", OQ_DT_FLOAT, 4, {c, 1, kh, kw}, NULL};
		in[2] = (tin){"b", OQ_DT_FLOAT, 1, {c}, NULL};
		nin = irand(0, 1) ? 3 : 2;
		add_ints(&a, "strides", 2, (const int64_t[]){sh, sw});
		add_ints(&a, "dilations", 2, (const int64_t[]){dh, dw});
		add_ints(&a, "pads", 4, pads);
		add_int(&a, "group", c);
		snprintf(what, sizeof what, "seed %llu: c %lld %lldx%lld k %lldx%lld s %lld,%lld d %lld,%lld",
			 (unsigned long long)sd, (long long)c, (long long)h, (long long)w, (long long)kh,
			 (long long)kw, (long long)sh, (long long)sw, (long long)dh, (long long)dw);
		for (size_t i = 0; i < nin; i++)
			make_rt(&in[i], &vals[i]);
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &o1, err, sizeof err), 0,
			     "%s: %s", what, err);
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 2, &o2, err, sizeof err), 0,
			     "%s: %s", what, err);
		oq_linalg_dw_rows = 1;
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &orow, err, sizeof err),
			     0, "%s: %s", what, err);
		oq_linalg_dw_rows = 0;
		oq_linalg_no_avx512 = 1;
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &os, err, sizeof err), 0,
			     "%s: %s", what, err);
		oq_linalg_no_avx512 = 0;
		oq_linalg_use_blas = 1;
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &osse, err, sizeof err),
			     0, "%s: %s", what, err);
		oq_linalg_use_blas = 0;
		oq_linalg_use_ref = 1;
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &oref, err, sizeof err),
			     0, "%s: %s", what, err);
		oq_linalg_use_ref = 0;
		cr_assert(o1.nelem > 0 && o1.nbytes == os.nbytes && o1.nbytes == o2.nbytes && o1.nelem == oref.nelem &&
				  o1.nbytes == osse.nbytes,
			  "%s: output sizes", what);
		cr_expect(!memcmp(o1.data, os.data, o1.nbytes), "%s: AVX-512 and AVX2 outputs differ", what);
		cr_expect(!memcmp(o1.data, osse.data, o1.nbytes), "%s: AVX-512 and SSE outputs differ", what);
		cr_expect(o1.nbytes == orow.nbytes && !memcmp(o1.data, orow.data, o1.nbytes),
			  "%s: channel-blocked and row kernels differ", what);
		cr_expect(!memcmp(o1.data, o2.data, o1.nbytes), "%s: threads 1 and 2 differ", what);
		for (size_t i = 0; i < o1.nelem; i++) {
			double x = ((float *)o1.data)[i], r = ((float *)oref.data)[i];
			if (!(fabs(x - r) <= 1e-4 + 1e-4 * fabs(r))) {
				cr_expect(0, "%s: element %zu fast %.8g ref %.8g", what, i, x, r);
				break;
			}
		}
		for (size_t i = 0; i < nin; i++)
			oq_rt_release(&vals[i]);
		oq_rt_release(&o1);
		oq_rt_release(&o2);
		oq_rt_release(&os);
		oq_rt_release(&osse);
		oq_rt_release(&orow);
		oq_rt_release(&oref);
	}
}

/*
 * Plain Conv (group 1) through the AVX-512 GEMM, whose row tails of at most
 * 4 or 8 rows and last panels of at most 16 positions run narrower register
 * tiles than the 12 x 32 one, and through
 * the AVX2 kernel (oq_linalg_no_avx512). Every output is init + sum of w * x
 * in k order with one FMA per term in both, so the bits must be equal; also
 * threads 1 vs 2 bit-identical and within 1e-4 of the double reference.
 * Output channels 1..24 and 97..108 (every tail after 0 and 8 whole tiles),
 * then random up to 200; the other shape parameters as in the depthwise test.
 */
Test(linalg, conv_gemm_avx512_row_tails_vs_avx2_vs_ref)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX-512F on this CPU: nothing to compare");
	for (uint64_t sd = 1; sd <= 60; sd++) {
		int64_t c, m, kh, kw, sh, sw, dh, dw, pads[4], h, w;
		tin in[3];
		attrs a;
		oq_rt vals[3], o1, o2, os, oref;
		char what[192], err[1024] = "";
		size_t nin;
		seed(6000 + sd);
		c = irand(1, 40);
		/* every row tail of the 12-row tile: 1..12 rows past a multiple of 12, and whole 96-row blocks */
		m = sd <= 24 ? (int64_t)sd : sd <= 36 ? 96 + (int64_t)sd - 24 : irand(1, 200);
		kh = sd % 4 == 0 ? 3 : sd % 4 == 1 ? 5 : irand(1, 7);
		kw = sd % 4 == 0 ? 3 : sd % 4 == 1 ? 5 : irand(1, 7);
		sh = irand(1, 3);
		sw = sd % 10 == 0 ? 3 : irand(1, 2);
		dh = irand(0, 2) ? 1 : irand(2, 3);
		dw = irand(0, 2) ? 1 : irand(2, 3);
		for (int i = 0; i < 4; i++)
			pads[i] = irand(0, 3);
		h = (kh - 1) * dh + 1 - pads[0] - pads[2] + irand(0, 12);
		w = sd % 7 == 0 ? irand(18, 70) : irand(1, 17);
		if (h < 1)
			h = 1;
		/* the padded extents must hold one kernel */
		while (h + pads[0] + pads[2] < (kh - 1) * dh + 1)
			pads[2]++;
		while (w + pads[1] + pads[3] < (kw - 1) * dw + 1)
			pads[3]++;
		memset(&a, 0, sizeof a);
		memset(in, 0, sizeof in);
		in[0] = (tin){"x", OQ_DT_FLOAT, 4, {irand(1, 2), c, h, w}, NULL};
		in[1] = (tin){"w", OQ_DT_FLOAT, 4, {m, c, kh, kw}, NULL};
		in[2] = (tin){"b", OQ_DT_FLOAT, 1, {m}, NULL};
		nin = irand(0, 1) ? 3 : 2;
		add_ints(&a, "strides", 2, (const int64_t[]){sh, sw});
		add_ints(&a, "dilations", 2, (const int64_t[]){dh, dw});
		add_ints(&a, "pads", 4, pads);
		snprintf(what, sizeof what, "seed %llu: c %lld m %lld %lldx%lld k %lldx%lld s %lld,%lld d %lld,%lld",
			 (unsigned long long)sd, (long long)c, (long long)m, (long long)h, (long long)w, (long long)kh,
			 (long long)kw, (long long)sh, (long long)sw, (long long)dh, (long long)dw);
		for (size_t i = 0; i < nin; i++)
			make_rt(&in[i], &vals[i]);
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &o1, err, sizeof err), 0,
			     "%s: %s", what, err);
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 2, &o2, err, sizeof err), 0,
			     "%s: %s", what, err);
		oq_linalg_no_avx512 = 1;
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &os, err, sizeof err), 0,
			     "%s: %s", what, err);
		oq_linalg_no_avx512 = 0;
		oq_linalg_use_ref = 1;
		cr_assert_eq(run_op("Conv", 11, in, nin, vals, set_attrs, &a, OQ_DT_FLOAT, 1, &oref, err, sizeof err),
			     0, "%s: %s", what, err);
		oq_linalg_use_ref = 0;
		cr_assert(o1.nelem > 0 && o1.nbytes == os.nbytes && o1.nbytes == o2.nbytes && o1.nelem == oref.nelem,
			  "%s: output sizes", what);
		cr_expect(!memcmp(o1.data, os.data, o1.nbytes), "%s: AVX-512 and AVX2 outputs differ", what);
		cr_expect(!memcmp(o1.data, o2.data, o1.nbytes), "%s: threads 1 and 2 differ", what);
		for (size_t i = 0; i < o1.nelem; i++) {
			double x = ((float *)o1.data)[i], r = ((float *)oref.data)[i];
			if (!(fabs(x - r) <= 1e-4 + 1e-4 * fabs(r))) {
				cr_expect(0, "%s: element %zu fast %.8g ref %.8g", what, i, x, r);
				break;
			}
		}
		for (size_t i = 0; i < nin; i++)
			oq_rt_release(&vals[i]);
		oq_rt_release(&o1);
		oq_rt_release(&o2);
		oq_rt_release(&os);
		oq_rt_release(&oref);
	}
}

/* ------------------------------------------- packed constant B (gemm_packed.c) */

/* Random floats in [-1, 1) for an array of n. */
static float *rand_floats(size_t n)
{
	float *v = malloc((n ? n : 1) * sizeof *v);
	cr_assert(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (float)frand();
	return v;
}

/*
 * The conv engine on weights packed as the executor's plan packs them
 * (oq_packed_w_pack: 32-channel panels) against the same engine reading W in
 * place (oq_conv_run_epilogue): gemm_pos then takes its rows from the panels
 * (12-row tiles straddling two panels), and where channels in the lanes
 * fill more lanes (small planes, deep kernels) gemm_chan runs on either
 * (packing per call without a plan). Every output is init + sum of w * x
 * in k order with one FMA per term on all paths, so the bits must be
 * equal, and equal to the AVX2 kernel's (the panels unpacked for it).
 * Shapes: groups 1..3, 1x1 in place and im2col, planes of 1..400
 * positions (7x7: 49), depths 1..1800, channels per group 1..100, with
 * and without bias and a fused Relu.
 */
Test(linalg, conv_packed_weights_vs_in_place)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX-512F on this CPU: nothing to compare");
	for (uint64_t sd = 1; sd <= 80; sd++) {
		oq_conv_geom g;
		oq_packed_w cw;
		oq_kfuse ep;
		int64_t grp, cg, mg, kk, nw, nx, ny;
		float *x, *w, *b, *y1, *y2, *y3;
		int relu;
		char what[160];

		seed(7000 + sd);
		memset(&g, 0, sizeof g);
		grp = irand(0, 3) ? 1 : irand(2, 3);
		cg = sd % 3 == 0 ? irand(40, 200) : irand(1, 40);
		mg = sd % 5 == 0 ? 32 * irand(1, 3) : irand(1, 100);
		kk = irand(0, 1) ? 1 : 3;
		g.nsp = 2;
		g.n = irand(1, 2);
		g.c = grp * cg;
		g.m = grp * mg;
		g.group = grp;
		for (int d = 0; d < 2; d++) {
			g.in[d] = sd % 4 == 0 ? 7 : irand(1, 20);
			g.k[d] = kk;
			g.stride[d] = kk == 3 && irand(0, 3) == 0 ? 2 : 1;
			g.dil[d] = 1;
			g.pad[d] = kk == 3 ? 1 : 0;
			g.out[d] = (g.in[d] + 2 * g.pad[d] - kk) / g.stride[d] + 1;
		}
		g.in_size = g.in[0] * g.in[1];
		g.out_size = g.out[0] * g.out[1];
		g.k_size = kk * kk;
		nx = g.n * g.c * g.in_size;
		nw = g.m * cg * g.k_size;
		ny = g.n * g.m * g.out_size;
		x = malloc((size_t)nx * sizeof *x);
		w = malloc((size_t)nw * sizeof *w);
		b = malloc((size_t)g.m * sizeof *b);
		y1 = malloc((size_t)ny * sizeof *y1);
		y2 = malloc((size_t)ny * sizeof *y2);
		y3 = malloc((size_t)ny * sizeof *y3);
		cr_assert(x && w && b && y1 && y2 && y3);
		for (int64_t i = 0; i < nx; i++)
			x[i] = (float)frand();
		for (int64_t i = 0; i < nw; i++)
			w[i] = (float)frand();
		for (int64_t i = 0; i < g.m; i++)
			b[i] = (float)frand();
		relu = irand(0, 1);
		memset(&ep, 0, sizeof ep);
		ep.act.kind = OQ_ACT_RELU;
		snprintf(what, sizeof what, "seed %llu: n %lld c %lld m %lld group %lld %lldx%lld k %lld s %lld",
			 (unsigned long long)sd, (long long)g.n, (long long)g.c, (long long)g.m, (long long)grp,
			 (long long)g.in[0], (long long)g.in[1], (long long)kk, (long long)g.stride[0]);
		cr_assert_eq(oq_packed_w_pack(w, g.m, cg * g.k_size, grp, &cw), OQ_OK, "%s: pack", what);
		cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, w, sd % 2 ? b : NULL, relu ? &ep : NULL, y1), OQ_OK);
		cr_assert_eq(oq_conv_run_packed(NULL, OQ_LT_F32, &g, x, NULL, &cw, sd % 2 ? b : NULL, relu ? &ep : NULL, y2),
			     OQ_OK);
		oq_linalg_no_avx512 = 1;
		cr_assert_eq(oq_conv_run_packed(NULL, OQ_LT_F32, &g, x, NULL, &cw, sd % 2 ? b : NULL, relu ? &ep : NULL, y3),
			     OQ_OK);
		oq_linalg_no_avx512 = 0;
		cr_expect(!memcmp(y1, y2, (size_t)ny * sizeof *y1), "%s: packed and in-place weights differ", what);
		cr_expect(!memcmp(y1, y3, (size_t)ny * sizeof *y1), "%s: AVX-512 and AVX2 differ", what);
		oq_packed_w_free(&cw);
		free(x);
		free(w);
		free(b);
		free(y1);
		free(y2);
		free(y3);
	}
}

/* Random conv test data in a fixed order: input x (in [0, 2)), weights, per channel bias, BN scale
 * (in [1.5, 2.5)) and shift, and a residual r. */
static void conv_fill(float *x, int64_t nx, float *w, int64_t nw, float *b, double *scale, double *shift,
		      int64_t m, float *r, int64_t ny)
{
	for (int64_t i = 0; i < nx; i++)
		x[i] = (float)frand() * 2;
	for (int64_t i = 0; i < nw; i++)
		w[i] = (float)frand();
	for (int64_t i = 0; i < m; i++) {
		b[i] = (float)frand();
		scale[i] = frand() + 1.5;
		shift[i] = frand();
	}
	for (int64_t i = 0; i < ny; i++)
		r[i] = (float)frand();
}

/*
 * Fused epilogue `kind` of the conv tests into ep (steps in st[0..4)): 0 none, 1 Relu, 2 Clip
 * 0..6, 3 BN (scale / shift per channel) + Clip, 4 + the residual r then Relu, 5 a HardSwish-style
 * gate x * (clip(x + 3, 0, 6) / 6).
 */
static void conv_epi_kind(int kind, oq_kfuse *ep, oq_epi_step *st, double *scale, double *shift, const float *r)
{
	memset(ep, 0, sizeof *ep);
	memset(st, 0, 4 * sizeof *st);
	if (kind == 1)
		ep->act = (oq_act){OQ_ACT_RELU, 0, 0};
	if (kind == 2 || kind == 3)
		ep->act = (oq_act){OQ_ACT_CLIP, 0.0f, 6.0f};
	if (kind == 3) {
		ep->scale = scale;
		ep->shift = shift;
	}
	if (kind == 4) {
		st[0] = (oq_epi_step){.kind = OQ_EPI_TENSOR, .bop = OQ_EPI_ADD, .t = 0};
		st[1] = (oq_epi_step){.kind = OQ_EPI_ACT, .act = {OQ_ACT_RELU, 0, 0}};
		ep->steps = st;
		ep->n_steps = 2;
		ep->n_t = 1;
		ep->t[0] = r;
	}
	if (kind == 5) {
		st[0] = (oq_epi_step){.kind = OQ_EPI_GATE, .n_gate = 3};
		st[1] = (oq_epi_step){.kind = OQ_EPI_CONST, .bop = OQ_EPI_ADD, .s = 3.0f};
		st[2] = (oq_epi_step){.kind = OQ_EPI_ACT, .act = {OQ_ACT_CLIP, 0.0f, 6.0f}};
		st[3] = (oq_epi_step){.kind = OQ_EPI_CONST, .bop = OQ_EPI_DIV, .s = 6.0f};
		ep->steps = st;
		ep->n_steps = 4;
	}
}

/*
 * Stride-1 convolutions read their input in place (a zero-padded copy, no
 * im2col; conv.c conv_in_place) where the output rows are wide enough: at
 * most 24 output channels on the positions-in-lanes tiles (1 to 4 channels
 * on the wide ones), more (seeds 49..64: 25 to 72 channels, depth >= 172)
 * on the channels-in-lanes tiles (57..64: rows of 64 outputs and more, written
 * straight into the output). Same FMAs in the same order as the packed
 * im2col tiles, then the epilogue over the stored rows: the bits must equal
 * the im2col path's (oq_linalg_no_in_place) for weights in place and packed,
 * with no epilogue, Relu, Clip, BN + Clip, a residual Add + Relu and a
 * HardSwish-style gate (x * clip(x + 3, 0, 6) / 6); kernels 1x3 to 5x5,
 * dilations 1..2, begin and end pads 0..3 (an end pad larger than needed
 * widens the padded copy), batch 1..2, depth up to 40 x 25; and within
 * rounding of the direct-loop reference. The counter proves the in-place
 * path ran. Then the same on the AVX2 engine (oq_linalg_no_avx512; up to
 * 64 channels, fewer than the depth: oq_conv_avx2_gemm_rows on the padded
 * rows against its im2col path), where the CPU has each.
 */
Test(linalg, conv_in_place_rows_vs_im2col_bits)
{
	int engines = 0;

	__builtin_cpu_init();
	for (int avx2 = 0; avx2 <= 1; avx2++) { /* the AVX-512 engine, then the AVX2 one (oq_linalg_no_avx512) */
		if (!__builtin_cpu_supports("fma") || !(avx2 ? __builtin_cpu_supports("avx2") : __builtin_cpu_supports("avx512f")))
			continue;
		engines++;
		oq_linalg_no_avx512 = avx2;
		size_t runs0 = oq_linalg_in_place_runs;
		for (uint64_t sd = 1; sd <= 64; sd++) {
			oq_conv_geom g;
			oq_packed_w cw;
			oq_kfuse ep;
			oq_epi_step st[4];
			double scale[72], shift[72];
			int64_t nw, nx, ny, pe[2];
			float *x, *w, *b, *r, *y1, *y2, *y3, *y4;
			int kind = (int)(sd % 6);
			char what[200];

			seed(7300 + sd);
			memset(&g, 0, sizeof g);
			g.nsp = 2;
			g.n = irand(1, 2);
			g.c = sd <= 48 ? irand(1, 40) : irand(43, 64);
			g.m = sd <= 24 ? (int64_t)sd : sd <= 48 ? irand(1, 24) : irand(25, 72);
			g.group = 1;
			for (int d = 0; d < 2; d++) {
				g.k[d] = d == 0 ? irand(sd <= 48 ? 1 : 2, 5) : irand(2, 5);
				g.dil[d] = irand(0, 3) ? 1 : 2;
				g.stride[d] = 1;
				g.pad[d] = irand(0, 3);
				pe[d] = irand(0, 3);
				g.in[d] = d == 1 ? (sd > 56 ? irand(64, 100) : irand(20, 70)) : irand(1, 12);
				g.out[d] = g.in[d] + g.pad[d] + pe[d] - (g.k[d] - 1) * g.dil[d];
				if (g.out[d] < 1) { /* the padded extent must hold one kernel */
					g.in[d] += 1 - g.out[d];
					g.out[d] = 1;
				}
			}
			g.in_size = g.in[0] * g.in[1];
			g.out_size = g.out[0] * g.out[1];
			g.k_size = g.k[0] * g.k[1];
			nx = g.n * g.c * g.in_size;
			nw = g.m * g.c * g.k_size;
			ny = g.n * g.m * g.out_size;
			x = malloc((size_t)nx * sizeof *x);
			w = malloc((size_t)nw * sizeof *w);
			b = malloc((size_t)g.m * sizeof *b);
			r = malloc((size_t)ny * sizeof *r);
			y1 = malloc((size_t)ny * sizeof *y1);
			y2 = malloc((size_t)ny * sizeof *y2);
			y3 = malloc((size_t)ny * sizeof *y3);
			y4 = malloc((size_t)ny * sizeof *y4);
			cr_assert(x && w && b && r && y1 && y2 && y3 && y4);
			conv_fill(x, nx, w, nw, b, scale, shift, g.m, r, ny);
			conv_epi_kind(kind, &ep, st, scale, shift, r);
			snprintf(what, sizeof what,
				 "%s seed %llu: n %lld c %lld m %lld %lldx%lld k %lldx%lld d %lld,%lld pads %lld,%lld,%lld,%lld epi %d",
				 avx2 ? "AVX2" : "AVX-512", (unsigned long long)sd, (long long)g.n, (long long)g.c, (long long)g.m, (long long)g.in[0],
				 (long long)g.in[1], (long long)g.k[0], (long long)g.k[1], (long long)g.dil[0],
				 (long long)g.dil[1], (long long)g.pad[0], (long long)g.pad[1], (long long)pe[0],
				 (long long)pe[1], kind);
			cr_assert_eq(oq_packed_w_pack(w, g.m, g.c * g.k_size, 1, &cw), OQ_OK, "%s: pack", what);
			cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, w, sd % 2 ? b : NULL, kind ? &ep : NULL, y1), OQ_OK);
			cr_assert_eq(oq_conv_run_packed(NULL, OQ_LT_F32, &g, x, NULL, &cw, sd % 2 ? b : NULL, kind ? &ep : NULL, y2),
				     OQ_OK);
			oq_linalg_no_in_place = 1;
			cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, w, sd % 2 ? b : NULL, kind ? &ep : NULL, y3), OQ_OK);
			oq_linalg_no_in_place = 0;
			/* and both against the direct-loop reference (double sums), within rounding */
			oq_linalg_use_ref = 1;
			cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, w, sd % 2 ? b : NULL, kind ? &ep : NULL, y4), OQ_OK);
			oq_linalg_use_ref = 0;
			for (int64_t i = 0; i < ny; i++)
				if (!(fabs((double)y1[i] - y4[i]) <= 1e-4 + 1e-4 * fabs((double)y4[i]))) {
					cr_expect(0, "%s: element %lld in place %.8g reference %.8g", what, (long long)i, y1[i], y4[i]);
					break;
				}
			oq_linalg_no_in_place = 1;
			cr_assert_eq(oq_conv_run_packed(NULL, OQ_LT_F32, &g, x, NULL, &cw, sd % 2 ? b : NULL, kind ? &ep : NULL, y4),
				     OQ_OK);
			oq_linalg_no_in_place = 0;
			cr_expect(!memcmp(y1, y3, (size_t)ny * sizeof *y1), "%s: in place and im2col differ", what);
			cr_expect(!memcmp(y2, y4, (size_t)ny * sizeof *y1), "%s: in place and im2col differ (packed W)", what);
			cr_expect(!memcmp(y1, y2, (size_t)ny * sizeof *y1), "%s: packed and in-place weights differ", what);
			oq_packed_w_free(&cw);
			free(x);
			free(w);
			free(b);
			free(r);
			free(y1);
			free(y2);
			free(y3);
			free(y4);
		}
		/* 2 runs of every seed whose output rows are wide enough (at least 8 x the widest tap) */
		cr_expect(oq_linalg_in_place_runs - runs0 >= 40, "%s: the in-place path ran %zu times", avx2 ? "AVX2" : "AVX-512",
			  oq_linalg_in_place_runs - runs0);
	oq_linalg_no_avx512 = 0;
		}
	if (!engines)
		cr_skip_test("no AVX-512F or AVX2 with FMA on this CPU: nothing to compare");
}

/*
 * The AVX2 conv GEMM (oq_linalg_no_avx512: the 6 x 16 tile, its at most
 * 8-column tail tile, the in-place rows) against a scalar reference written
 * here: each output is init (bias or +0) then fmaf(w, x, acc) over the
 * im2col order (channel, kernel row, kernel column), a padded input giving
 * x = 0, which is the kernel's documented arithmetic, so the bits must be
 * equal. Shapes: 1x1 and 3x3 (pad 1, stride 1 and 2), planes 1x1 .. 15x15
 * and 7x7, 14x14, 20x20 (every tail of a 16-column panel), 1..70 output
 * channels (every 6-row tail, in place and not), 1..20 input channels.
 */
Test(linalg, conv_avx2_bits_vs_fmaf)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX2 and FMA on this CPU: nothing to compare");
	oq_linalg_no_avx512 = 1;
	for (uint64_t sd = 1; sd <= 90; sd++) {
		oq_conv_geom g;
		int64_t k, h, w, nx, nw, ny;
		float *x, *wt, *b, *y;
		int bias;

		seed(9100 + sd);
		memset(&g, 0, sizeof g);
		k = irand(0, 2) ? 3 : 1;
		h = sd % 9 == 0 ? 7 : sd % 9 == 1 ? 14 : sd % 9 == 2 ? 20 : irand(1, 15);
		w = sd % 9 <= 2 ? h : irand(1, 15);
		g.nsp = 2;
		g.n = 1;
		g.c = irand(1, 20);
		g.m = sd % 4 == 0 ? irand(40, 70) : irand(1, 13);
		g.group = 1;
		g.k[0] = g.k[1] = k;
		g.stride[0] = g.stride[1] = k == 3 && irand(0, 3) == 0 ? 2 : 1;
		g.dil[0] = g.dil[1] = 1;
		g.pad[0] = g.pad[1] = k == 3 ? 1 : 0;
		g.in[0] = h;
		g.in[1] = w;
		for (int d = 0; d < 2; d++)
			g.out[d] = (g.in[d] + 2 * g.pad[d] - k) / g.stride[d] + 1;
		g.in_size = h * w;
		g.out_size = g.out[0] * g.out[1];
		g.k_size = k * k;
		nx = g.c * g.in_size;
		nw = g.m * g.c * g.k_size;
		ny = g.m * g.out_size;
		x = malloc((size_t)nx * sizeof *x);
		wt = malloc((size_t)nw * sizeof *wt);
		b = malloc((size_t)g.m * sizeof *b);
		y = malloc((size_t)ny * sizeof *y);
		cr_assert(x && wt && b && y);
		for (int64_t i = 0; i < nx; i++)
			x[i] = (float)frand();
		for (int64_t i = 0; i < nw; i++)
			wt[i] = (float)frand();
		for (int64_t i = 0; i < g.m; i++)
			b[i] = (float)frand();
		bias = irand(0, 1);
		cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, wt, bias ? b : NULL, NULL, y), OQ_OK);
		for (int64_t m = 0; m < g.m; m++)
			for (int64_t oh = 0; oh < g.out[0]; oh++)
				for (int64_t ow = 0; ow < g.out[1]; ow++) {
					float acc = bias ? b[m] : 0.0f, got = y[m * g.out_size + oh * g.out[1] + ow];
					for (int64_t c = 0; c < g.c; c++)
						for (int64_t i = 0; i < k; i++)
							for (int64_t j = 0; j < k; j++) {
								int64_t ih = oh * g.stride[0] - g.pad[0] + i, iw = ow * g.stride[1] - g.pad[1] + j;
								float xv = ih >= 0 && ih < h && iw >= 0 && iw < w ? x[c * g.in_size + ih * w + iw] : 0.0f;
								acc = fmaf(wt[((m * g.c + c) * k + i) * k + j], xv, acc);
							}
					cr_assert(!memcmp(&acc, &got, sizeof acc),
						  "seed %llu: c %lld m %lld %lldx%lld k %lld s %lld: output (%lld, %lld, %lld) %.9g, want %.9g",
						  (unsigned long long)sd, (long long)g.c, (long long)g.m, (long long)h, (long long)w,
						  (long long)k, (long long)g.stride[0], (long long)m, (long long)oh, (long long)ow,
						  (double)got, (double)acc);
				}
		free(x);
		free(wt);
		free(b);
		free(y);
	}
	oq_linalg_no_avx512 = 0;
}

/*
 * The AVX2 GEMM's narrow last panel (oq_conv_avx2_tail: the last 1..4
 * columns of a width not a multiple of 16, channels in the lanes) against
 * its 6 x 16 tile there, bit for bit: planes 7 x 7, 1 x 1, 2 x 9, 1 x 19,
 * 14 x 14, 4 x 5 (tails 1, 1, 2, 3, 4, 4), 1x1 and 3x3 kernels (3x3
 * stride 1 on up to 64 channels reads the padded rows in place), depths
 * below 8, not a multiple of 8 and past one depth slice (256: C carries the
 * partial sums), 16..200 output channels (row blocks of 96 and their
 * tails), with and without bias, and each epilogue the registers apply
 * (Relu, Clip, BN + Clip) or that runs after them (residual Add + Relu).
 */
Test(linalg, conv_avx2_tail_vs_tile_bits)
{
	static const int64_t planes[][2] = {{7, 7}, {1, 1}, {2, 9}, {1, 19}, {14, 14}, {4, 5}};

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX2 and FMA on this CPU: nothing to compare");
	oq_linalg_no_avx512 = 1;
	for (uint64_t sd = 1; sd <= 60; sd++) {
		oq_conv_geom g;
		oq_kfuse ep;
		oq_epi_step st[4];
		double scale[200], shift[200];
		int64_t nx, nw, ny;
		float *x, *w, *b, *r, *y0, *y1;
		int kind = (int)(sd % 5), bias = (int)(sd / 5 % 2);

		seed(9700 + sd);
		memset(&g, 0, sizeof g);
		g.nsp = 2;
		g.n = 1;
		g.k[0] = g.k[1] = sd % 3 == 0 ? 3 : 1;
		g.c = sd % 4 == 0 ? irand(1, 7) : sd % 4 == 1 ? irand(9, 64) : irand(257, 400);
		g.m = sd % 6 == 0 ? irand(97, 200) : irand(16, 96);
		g.group = 1;
		g.stride[0] = g.stride[1] = 1;
		g.dil[0] = g.dil[1] = 1;
		g.pad[0] = g.pad[1] = g.k[0] == 3 ? 1 : 0;
		g.out[0] = g.in[0] = planes[sd % 6][0];
		g.out[1] = g.in[1] = planes[sd % 6][1];
		g.in_size = g.out_size = g.in[0] * g.in[1];
		g.k_size = g.k[0] * g.k[1];
		nx = g.c * g.in_size;
		nw = g.m * g.c * g.k_size;
		ny = g.m * g.out_size;
		x = malloc((size_t)nx * sizeof *x);
		w = malloc((size_t)nw * sizeof *w);
		b = malloc((size_t)g.m * sizeof *b);
		r = malloc((size_t)ny * sizeof *r);
		y0 = malloc((size_t)ny * sizeof *y0);
		y1 = malloc((size_t)ny * sizeof *y1);
		cr_assert(x && w && b && r && y0 && y1);
		conv_fill(x, nx, w, nw, b, scale, shift, g.m, r, ny);
		conv_epi_kind(kind, &ep, st, scale, shift, r);
		oq_conv_avx2_tail = 0;
		cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, w, bias ? b : NULL, kind ? &ep : NULL, y0), OQ_OK);
		oq_conv_avx2_tail = 1;
		cr_assert_eq(oq_conv_run_epilogue(NULL, OQ_LT_F32, &g, x, w, bias ? b : NULL, kind ? &ep : NULL, y1), OQ_OK);
		for (int64_t i = 0; i < ny; i++)
			cr_assert(!memcmp(&y0[i], &y1[i], sizeof *y0),
				  "seed %llu: c %lld m %lld %lldx%lld k %lld epi %d bias %d: output %lld (channel %lld) %.9g, "
				  "tile %.9g", (unsigned long long)sd, (long long)g.c, (long long)g.m, (long long)g.out[0],
				  (long long)g.out[1], (long long)g.k[0], kind, bias, (long long)i, (long long)(i / g.out_size),
				  (double)y1[i], (double)y0[i]);
		free(x);
		free(w);
		free(b);
		free(r);
		free(y0);
		free(y1);
	}
	oq_linalg_no_avx512 = 0;
}

/*
 * The engine alone: pack / unpack round trip in both orientations, and
 * oq_packed_b_gemm (AVX-512 tiles, then the AVX2 ones: depth slices of 768)
 * bit-identical to oq_packed_b_gemm_ref (fmaf in k order) over every row
 * tail of the 6-row tile, column counts around the 64-column panel and the
 * AVX2 tiles' 16- and 32-column chunks, depths 0, 1 and across a slice
 * boundary, with and without accumulating onto C.
 */
Test(linalg, packed_gemm_vs_ref_bits)
{
	static const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 11, 13, 197, 241};
	static const int64_t ns[] = {1, 15, 16, 17, 33, 63, 64, 65, 130, 200};
	static const int64_t ks[] = {0, 1, 7, 64, 769, 1600};

	__builtin_cpu_init();
	for (int eng = 0; eng < 2; eng++) {
		if (eng == 0 && !__builtin_cpu_supports("avx512f"))
			continue; /* the AVX-512 tiles (where the CPU has them), then the AVX2 ones */
		oq_linalg_no_avx512 = eng;
		seed(7100);
		for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
				int64_t kd = ks[ki], n = ns[ni];
				float *b = rand_floats((size_t)(kd * n)), *back = malloc((size_t)(kd * n + 1) * sizeof *back);
				oq_packed_b pb[2];
				for (int tb = 0; tb < 2; tb++) {
					cr_assert_eq(oq_packed_b_pack(b, kd, n, tb, tb ? kd : n, &pb[tb]), OQ_OK);
					oq_packed_b_unpack(&pb[tb], tb, back);
					cr_expect(kd * n == 0 || !memcmp(b, back, (size_t)(kd * n) * sizeof *b),
						  "unpack(pack(B)) != B (kd %lld n %lld tb %d)", (long long)kd, (long long)n, tb);
				}
				for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
					int64_t m = ms[mi], lda = kd + (mi % 3), ldc = n + (ni % 2);
					float *a = rand_floats((size_t)(m * lda)), *c0 = rand_floats((size_t)(m * ldc));
					float *c1 = malloc((size_t)(m * ldc) * sizeof *c1), *c2 = malloc((size_t)(m * ldc) * sizeof *c2);
					for (int load = 0; load < 2; load++)
						for (int tb = 0; tb < 2; tb++) {
							memcpy(c1, c0, (size_t)(m * ldc) * sizeof *c1);
							memcpy(c2, c0, (size_t)(m * ldc) * sizeof *c2);
							oq_packed_b_gemm(NULL, m, a, lda, &pb[tb], c1, ldc, load);
							oq_packed_b_gemm_ref(m, a, lda, &pb[tb], c2, ldc, load);
							cr_expect(!memcmp(c1, c2, (size_t)(m * ldc) * sizeof *c1),
								  "m %lld n %lld kd %lld load %d tb %d: fast and ref differ",
								  (long long)m, (long long)n, (long long)kd, load, tb);
							/* the ref against the definition (double), and untouched padding columns */
							for (int64_t i = 0; i < m; i++)
								for (int64_t j = 0; j < ldc; j++) {
									double s = load ? c0[i * ldc + j] : 0, r = c2[i * ldc + j];
									if (j >= n) {
										cr_assert(r == c0[i * ldc + j], "column %lld past n written",
											  (long long)j);
										continue;
									}
									for (int64_t q = 0; q < kd; q++)
										s += (double)a[i * lda + q] * (tb ? b[j * kd + q] : b[q * n + j]);
									cr_assert(fabs(r - s) <= 1e-5 * (double)(kd + 1),
										  "ref %.8g vs %.8g", r, s);
								}
						}
					free(a);
					free(c0);
					free(c1);
					free(c2);
				}
				oq_packed_b_free(&pb[0]);
				oq_packed_b_free(&pb[1]);
				free(b);
				free(back);
			}
	}
	oq_linalg_no_avx512 = 0;
}

/*
 * One MatMul / Gemm whose B (and C) are initializers, so the plan packs B:
 * A fed, attributes from a; returns the run status.
 */
static int run_const_b(const char *op, const tin *a_in, const oq_rt *a_val, const tin *b_in, const tin *c_in,
		       const attrs *a, int threads, oq_rt *out, char *err, size_t errn)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	int rc;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "a", OQ_DT_FLOAT, a_in->rank, a_in->dims);
	gen_init(g, gp, "b", OQ_DT_FLOAT, b_in->rank, b_in->dims, b_in->vals);
	if (c_in)
		gen_init(g, gp, "c", OQ_DT_FLOAT, c_in->rank, c_in->dims, c_in->vals);
	n = gen_node(g, gp, op, "node", c_in ? "a,b,c" : "a,b", "y");
	if (a)
		set_attrs(g, n, a);
	gen_output(g, gp, "y", OQ_DT_FLOAT, -1, NULL);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	memset(out, 0, sizeof *out);
	rc = oq_exec_new(m, &o, &e, &d);
	if (!rc)
		rc = oq_exec_run(e, a_val, 1, out, 1, &d);
	if (rc && err)
		snprintf(err, errn, "%s", d.msg);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
	return rc;
}

static double *rand_doubles(size_t n)
{
	double *v = malloc((n ? n : 1) * sizeof *v);
	cr_assert(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (double)(float)frand();
	return v;
}

/*
 * Through the executor: MatMul (A with batch dims, B 2-D or [1, kd, n]) and
 * Gemm (transB, C of every broadcast shape, beta; alpha 1 and transA 0 pack,
 * others take OpenBLAS) with constant B. The packed run must be the same
 * bits for 1 and 2 threads and for the reference (oq_linalg_use_ref: the
 * fmaf loop over the packed B), and within 1e-4 of the OpenBLAS path
 * (oq_exec_no_pack), which sums in another order.
 */
Test(linalg, packed_matmul_gemm_const_b)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("fma"))
		cr_skip_test("no AVX-512F on this CPU: weights are not packed");
	for (uint64_t sd = 1; sd <= 40; sd++) {
		int gemm = sd % 2 == 0, tb = 0, ta = 0;
		int64_t m, n, kd;
		tin ain, bin, cin;
		attrs at;
		oq_rt av, o1, o2, oref, oblas;
		double *bv, *cv = NULL, *avals;
		char what[128], err[1024] = "";
		float alpha = 1;

		seed(7300 + sd);
		m = sd % 5 == 0 ? 1 : irand(1, 70);
		n = sd % 7 == 0 ? irand(60, 200) : irand(1, 90);
		kd = sd % 9 == 0 ? irand(700, 900) : irand(1, 120);
		memset(&at, 0, sizeof at);
		memset(&cin, 0, sizeof cin);
		if (gemm) {
			tb = irand(0, 1);
			ta = sd % 8 == 0;
			alpha = sd % 6 == 0 ? 0.5f : 1.0f;
			add_int(&at, "transB", tb);
			add_int(&at, "transA", ta);
			add_float(&at, "alpha", alpha);
			add_float(&at, "beta", irand(0, 3) ? (float)frand() : 0.0f);
			ain = (tin){"a", OQ_DT_FLOAT, 2, {ta ? kd : m, ta ? m : kd}, NULL};
			bin = (tin){"b", OQ_DT_FLOAT, 2, {tb ? n : kd, tb ? kd : n}, NULL};
			switch (irand(0, 3)) {
			case 0: cin = (tin){"c", OQ_DT_FLOAT, 1, {n}, NULL}; break;
			case 1: cin = (tin){"c", OQ_DT_FLOAT, 2, {m, 1}, NULL}; break;
			case 2: cin = (tin){"c", OQ_DT_FLOAT, 2, {m, n}, NULL}; break;
			default: cin.rank = -1;
			}
		} else {
			int64_t b0 = irand(1, 3);
			ain = (tin){"a", OQ_DT_FLOAT, 3, {b0, m, kd}, NULL};
			bin = irand(0, 1) ? (tin){"b", OQ_DT_FLOAT, 2, {kd, n}, NULL}
					  : (tin){"b", OQ_DT_FLOAT, 3, {1, kd, n}, NULL};
		}
		bv = rand_doubles((size_t)(kd * n));
		bin.vals = bv;
		if (cin.rank >= 0 && gemm) {
			size_t nc = 1;
			for (int i = 0; i < cin.rank; i++)
				nc *= (size_t)cin.dims[i];
			cv = rand_doubles(nc);
			cin.vals = cv;
		}
		avals = rand_doubles((size_t)(ain.dims[0] * ain.dims[1] * (ain.rank == 3 ? ain.dims[2] : 1)));
		ain.vals = avals;
		make_rt(&ain, &av);
		snprintf(what, sizeof what, "%s seed %llu m %lld n %lld kd %lld tb %d ta %d alpha %g", gemm ? "gemm" : "matmul",
			 (unsigned long long)sd, (long long)m, (long long)n, (long long)kd, tb, ta, (double)alpha);
		{
			const tin *cp = gemm && cin.rank >= 0 ? &cin : NULL;
			const char *op = gemm ? "Gemm" : "MatMul";
			cr_assert_eq(run_const_b(op, &ain, &av, &bin, cp, &at, 1, &o1, err, sizeof err), 0, "%s: %s", what, err);
			cr_assert_eq(run_const_b(op, &ain, &av, &bin, cp, &at, 2, &o2, err, sizeof err), 0, "%s: %s", what, err);
			oq_linalg_use_ref = 1;
			cr_assert_eq(run_const_b(op, &ain, &av, &bin, cp, &at, 1, &oref, err, sizeof err), 0, "%s: %s", what,
				     err);
			oq_linalg_use_ref = 0;
			oq_exec_no_pack = 1;
			cr_assert_eq(run_const_b(op, &ain, &av, &bin, cp, &at, 1, &oblas, err, sizeof err), 0, "%s: %s", what,
				     err);
			oq_exec_no_pack = 0;
		}
		cr_assert(o1.nbytes == o2.nbytes && o1.nbytes == oref.nbytes && o1.nbytes == oblas.nbytes, "%s: sizes", what);
		cr_expect(!memcmp(o1.data, o2.data, o1.nbytes), "%s: threads 1 and 2 differ", what);
		if (!ta && alpha == 1)
			cr_expect(!memcmp(o1.data, oref.data, o1.nbytes), "%s: packed fast and ref differ", what);
		for (size_t i = 0; i < o1.nelem; i++) {
			double x = ((float *)o1.data)[i], r = ((float *)oblas.data)[i];
			if (!(fabs(x - r) <= 1e-4 + 1e-4 * fabs(r))) {
				cr_expect(0, "%s: element %zu packed %.8g OpenBLAS %.8g", what, i, x, r);
				break;
			}
		}
		oq_rt_release(&av);
		oq_rt_release(&o1);
		oq_rt_release(&o2);
		oq_rt_release(&oref);
		oq_rt_release(&oblas);
		free(bv);
		free(cv);
		free(avals);
	}
}
