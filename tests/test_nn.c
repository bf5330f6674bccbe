/*
 * test_nn.c - the 'nn' kernel family (calib/kernels/nn/):
 * pooling geometry (ceil_mode, dropped windows, count_include_pad, auto_pad,
 * MaxPool indices in both storage orders), Softmax coerce-to-2D (opset 11)
 * vs single axis (opset 13), Reduce* axes as attribute / input, keepdims,
 * noop_with_empty_axes and empty-set values, ArgMax select_last_index,
 * TopK tie order, CumSum exclusive/reverse, the normalisations, and
 * thread-count independence.
 *
 * Every expected value is computed by hand in the comment next to it (or,
 * for the randomized pooling test, by a naive per-tap loop written here
 * independently of the kernel). Models are built in C with gen_model and
 * run through the real executor.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/nn/nn.h"

/* ------------------------------------------------------------------ harness */

typedef struct nt {
	gen_model *g;
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	oq_model *m;
	oq_exec *e;
	oq_rt out[4];
	size_t n_out;
	oq_diag d;
} nt;

/* A model with one node `op` at `opset`; outs is a comma-separated list of graph outputs. */
static void nt_begin(nt *t, const char *op, int opset, const char *ins, const char *outs)
{
	char buf[256], *s, *save = NULL;
	memset(t, 0, sizeof *t);
	t->g = gen_new(8);
	gen_opset(t->g, "", opset);
	t->gp = gen_graph(t->g);
	t->n = gen_node(t->g, t->gp, op, "n", ins, outs);
	snprintf(buf, sizeof buf, "%s", outs);
	for (s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		gen_output(t->g, t->gp, s, 0, -1, NULL);
		t->n_out++;
	}
	oq_diag_init(&t->d);
}

/* Runs with `threads` workers; returns the executor status (message in t->d). */
static int nt_run(nt *t, int threads, const oq_rt *in, size_t n_in)
{
	oq_exec_opts o = {.threads = threads};
	int rc;
	for (size_t i = 0; i < t->n_out; i++)
		oq_rt_release(&t->out[i]);
	if (t->e)
		oq_exec_free(t->e);
	if (t->m)
		oq_model_free(t->m);
	t->e = NULL;
	t->m = NULL;
	oq_diag_init(&t->d);
	cr_assert_eq(gen_load(t->g, &t->m, &t->d), OQ_OK, "load: %s", t->d.msg);
	if ((rc = oq_exec_new(t->m, &o, &t->e, &t->d)))
		return rc;
	return oq_exec_run(t->e, in, n_in, t->out, t->n_out, &t->d);
}

static void nt_end(nt *t)
{
	for (size_t i = 0; i < t->n_out; i++)
		oq_rt_release(&t->out[i]);
	oq_exec_free(t->e);
	oq_model_free(t->m);
	gen_free(t->g);
}

static void run_ok(nt *t)
{
	int rc = nt_run(t, 2, NULL, 0);
	cr_assert_eq(rc, OQ_OK, "run failed: %s", t->d.msg);
}

/* Output i has this shape and these values within tol. */
static void expect(const nt *t, size_t i, int dtype, int rank, const int64_t *dims, const double *want, double tol)
{
	const oq_rt *r = &t->out[i];
	char a[128];
	cr_assert_eq(r->dtype, dtype, "output %zu: got %s", i, oq_rt_describe(r, a, sizeof a));
	cr_assert_eq(r->rank, rank, "output %zu: got %s, want rank %d", i, oq_rt_describe(r, a, sizeof a), rank);
	for (int d = 0; d < rank; d++)
		cr_assert_eq(r->dims[d], dims[d], "output %zu: got %s", i, oq_rt_describe(r, a, sizeof a));
	for (size_t j = 0; j < r->nelem; j++) {
		double g = oq_rt_get(r, j), w = want[j];
		if (isnan(w)) {
			cr_assert(isnan(g), "output %zu[%zu]: got %.9g, want NaN", i, j, g);
			continue;
		}
		if (isinf(w)) {
			cr_assert(g == w, "output %zu[%zu]: got %.9g, want %.9g", i, j, g, w);
			continue;
		}
		cr_assert(fabs(g - w) <= tol, "output %zu[%zu]: got %.9g, want %.9g", i, j, g, w);
	}
}

#define SHAPE(...) GEN_SHAPE(__VA_ARGS__)
#define VALS(...) GEN_VALS(__VA_ARGS__)
#define I64(...) (const int64_t[]){__VA_ARGS__}

/* ------------------------------------------------------------------ pooling */

Test(pool, maxpool_ceil_mode)
{
	/* x = 1..16 in 4x4, k 3, s 2: floor -> 1x1 {11}; ceil -> 2x2, windows rows/cols {0..2},{2..3}:
	 * max(1..11 block) 11, {rows 0-2, cols 2-3} 12, {rows 2-3, cols 0-2} 15, 16 */
	double x[16];
	for (int i = 0; i < 16; i++)
		x[i] = i + 1;
	for (int ceil = 0; ceil <= 1; ceil++) {
		nt t;
		nt_begin(&t, "MaxPool", 12, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 4, 4), x);
		gen_attr_ints(t.g, t.n, "kernel_shape", 2, I64(3, 3));
		gen_attr_ints(t.g, t.n, "strides", 2, I64(2, 2));
		gen_attr_int(t.g, t.n, "ceil_mode", ceil);
		run_ok(&t);
		if (ceil)
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 2, 2), VALS(11, 12, 15, 16), 0);
		else
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 1, 1), VALS(11), 0);
		nt_end(&t);
	}
}

Test(pool, ceil_mode_drops_window_starting_in_right_pad)
{
	/* in 4, k 2, s 2, pads (0, 1), ceil: ceil((4+1-2)/2)+1 = 3 windows, but the third starts at 4,
	 * inside the right padding, so it is dropped (ONNX spec, PyTorch): windows {1,2}, {3,4} -> 2, 4 */
	nt t;
	nt_begin(&t, "MaxPool", 12, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 4), VALS(1, 2, 3, 4));
	gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(2));
	gen_attr_ints(t.g, t.n, "strides", 1, I64(2));
	gen_attr_ints(t.g, t.n, "pads", 2, I64(0, 1));
	gen_attr_int(t.g, t.n, "ceil_mode", 1);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 2), VALS(2, 4), 0);
	nt_end(&t);
}

Test(pool, maxpool_indices_storage_order)
{
	/* channel 0 = [[1,6,3],[4,5,2]], channel 1 = channel 0 + 10; k 2x2, s 1 -> 1x2 windows
	 * cols {0,1} and {1,2}: both maxima are at (h0, w1): row-major 0*3+1 = 1, column-major
	 * 0 + 1*2 = 2; channel 1 adds its plane offset 6 */
	for (int so = 0; so <= 1; so++) {
		nt t;
		nt_begin(&t, "MaxPool", 12, "x", "y,i");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2, 3),
			 VALS(1, 6, 3, 4, 5, 2, 11, 16, 13, 14, 15, 12));
		gen_attr_ints(t.g, t.n, "kernel_shape", 2, I64(2, 2));
		gen_attr_int(t.g, t.n, "storage_order", so);
		run_ok(&t);
		expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 1, 2), VALS(6, 6, 16, 16), 0);
		if (so)
			expect(&t, 1, OQ_DT_INT64, SHAPE(1, 2, 1, 2), VALS(2, 2, 8, 8), 0);
		else
			expect(&t, 1, OQ_DT_INT64, SHAPE(1, 2, 1, 2), VALS(1, 1, 7, 7), 0);
		nt_end(&t);
	}
}

Test(pool, averagepool_count_include_pad)
{
	/* x = 1..9 in 3x3, k 3, pads 1: corner window holds 1,2,4,5 (sum 12), edge (0,1) holds
	 * 1..6 (sum 21), centre all (45). exclude pad: 12/4, 21/6, 45/9; include: /9 everywhere */
	for (int inc = 0; inc <= 1; inc++) {
		nt t;
		nt_begin(&t, "AveragePool", 11, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 3, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
		gen_attr_ints(t.g, t.n, "kernel_shape", 2, I64(3, 3));
		gen_attr_ints(t.g, t.n, "pads", 4, I64(1, 1, 1, 1));
		gen_attr_int(t.g, t.n, "count_include_pad", inc);
		run_ok(&t);
		if (inc)
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 3, 3),
			       VALS(12 / 9., 21 / 9., 16 / 9., 27 / 9., 45 / 9., 33 / 9., 24 / 9., 39 / 9., 28 / 9.), 1e-6);
		else
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 3, 3),
			       VALS(3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7), 1e-6);
		nt_end(&t);
	}
}

Test(pool, averagepool_ceil_mode_partial_window)
{
	/* in 5, k 2, s 2, ceil: windows {1,2}, {3,4}, {5, past the end}. The past-the-end tap is
	 * neither input nor padding, so even count_include_pad divides the last window by 1 */
	for (int inc = 0; inc <= 1; inc++) {
		nt t;
		nt_begin(&t, "AveragePool", 19, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 5), VALS(1, 2, 3, 4, 5));
		gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(2));
		gen_attr_ints(t.g, t.n, "strides", 1, I64(2));
		gen_attr_int(t.g, t.n, "ceil_mode", 1);
		gen_attr_int(t.g, t.n, "count_include_pad", inc);
		run_ok(&t);
		expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 3), VALS(1.5, 3.5, 5), 1e-6);
		nt_end(&t);
	}
}

Test(pool, averagepool_dilations_same_upper)
{
	/* in 5 (1..5), k 2, dilation 2 (span 3), s 1, SAME_UPPER: out 5, total pad 2 -> (1, 1).
	 * window at o covers taps o-1 and o+1: {_,2}, {1,3}, {2,4}, {3,5}, {4,_} -> 2, 2, 3, 4, 4 */
	nt t;
	nt_begin(&t, "AveragePool", 19, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 5), VALS(1, 2, 3, 4, 5));
	gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(2));
	gen_attr_ints(t.g, t.n, "dilations", 1, I64(2));
	gen_attr_str(t.g, t.n, "auto_pad", "SAME_UPPER");
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 5), VALS(2, 2, 3, 4, 4), 1e-6);
	nt_end(&t);
}

Test(pool, same_lower_puts_odd_pad_first)
{
	/* in 4 (1..4), k 2, s 1: out 4, total pad 1; SAME_LOWER pads the start: windows {_,1}, {1,2},
	 * {2,3}, {3,4} -> max 1, 2, 3, 4; SAME_UPPER pads the end -> 2, 3, 4, 4 */
	const char *modes[2] = {"SAME_LOWER", "SAME_UPPER"};
	for (int m = 0; m < 2; m++) {
		nt t;
		nt_begin(&t, "MaxPool", 12, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 4), VALS(1, 2, 3, 4));
		gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(2));
		gen_attr_str(t.g, t.n, "auto_pad", modes[m]);
		run_ok(&t);
		if (m == 0)
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 4), VALS(1, 2, 3, 4), 0);
		else
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 4), VALS(2, 3, 4, 4), 0);
		nt_end(&t);
	}
}

Test(pool, lppool_and_global)
{
	/* LpPool p 2, k 2 over [3, 4, 0]: sqrt(9+16) = 5, sqrt(16) = 4.
	 * GlobalAveragePool of [1, 2, 3, 6] = 3; GlobalMaxPool = 6; GlobalLpPool p 1 = 12 */
	nt t;
	nt_begin(&t, "LpPool", 18, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 3), VALS(3, 4, 0));
	gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(2));
	gen_attr_int(t.g, t.n, "p", 2);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 2), VALS(5, 4), 1e-6);
	nt_end(&t);

	const char *ops[3] = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"};
	const double want[3] = {3, 6, 12};
	for (int i = 0; i < 3; i++) {
		nt_begin(&t, ops[i], 2, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 2, 2), VALS(1, 2, 3, 6));
		if (i == 2)
			gen_attr_int(t.g, t.n, "p", 1);
		run_ok(&t);
		expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 1, 1), &want[i], 1e-6);
		nt_end(&t);
	}
}

Test(pool, maxpool_int8)
{
	/* int8 stays int8: max of {-5, -3}, {-3, 7} = -3, 7 */
	nt t;
	nt_begin(&t, "MaxPool", 12, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_INT8, SHAPE(1, 1, 3), VALS(-5, -3, 7));
	gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(2));
	run_ok(&t);
	expect(&t, 0, OQ_DT_INT8, SHAPE(1, 1, 2), VALS(-3, 7), 0);
	nt_end(&t);
}

Test(pool, bad_attributes_are_errors)
{
	/* a kernel larger than the padded input has no valid output */
	nt t;
	nt_begin(&t, "MaxPool", 12, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 2), VALS(1, 2));
	gen_attr_ints(t.g, t.n, "kernel_shape", 1, I64(3));
	cr_assert_eq(nt_run(&t, 1, NULL, 0), OQ_EINVAL);
	cr_assert(strstr(t.d.msg, "larger than padded input"), "%s", t.d.msg);
	nt_end(&t);
	nt_begin(&t, "AveragePool", 11, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 2), VALS(1, 2));
	cr_assert_eq(nt_run(&t, 1, NULL, 0), OQ_EINVAL); /* no kernel_shape */
	nt_end(&t);
}

/* Naive pooling written independently of the kernel: every tap bound-checked. */
static void naive_pool2d(const float *x, int H, int W, int kh, int kw, int sh, int sw, int dh, int dw, int pt,
			 int pl, int pb, int pr, int OH, int OW, int avg, int inc, float *y)
{
	for (int oh = 0; oh < OH; oh++)
		for (int ow = 0; ow < OW; ow++) {
			double acc = 0;
			float m = -INFINITY;
			int cnt = 0, cnt_pad = 0;
			for (int i = 0; i < kh; i++)
				for (int j = 0; j < kw; j++) {
					int h = oh * sh - pt + i * dh, w = ow * sw - pl + j * dw;
					if (h >= -pt && h < H + pb && w >= -pl && w < W + pr)
						cnt_pad++;
					if (h < 0 || h >= H || w < 0 || w >= W)
						continue;
					cnt++;
					acc += x[h * W + w];
					if (x[h * W + w] > m)
						m = x[h * W + w];
				}
			y[oh * OW + ow] = avg ? (float)(acc / (inc ? cnt_pad : cnt)) : m;
		}
}

Test(pool, random_configs_match_naive_loop)
{
	unsigned seed = 12345;
	for (int trial = 0; trial < 60; trial++) {
		int H, W, kh, kw, sh, sw, dh, dw, pads[4], ceil_m, avg, inc, OH, OW, span;
		float x[2 * 9 * 11], *want;
		nt t;
		oq_rt in;
#define RND(n) (int)((seed = seed * 1103515245u + 12345u) >> 16) % (n)
		H = 3 + RND(7);
		W = 3 + RND(9);
		kh = 1 + RND(3);
		kw = 1 + RND(3);
		sh = 1 + RND(3);
		sw = 1 + RND(3);
		dh = 1 + RND(2);
		dw = 1 + RND(2);
		for (int i = 0; i < 4; i++)
			pads[i] = RND(kh < kw ? kh : kw);
		ceil_m = RND(2);
		avg = RND(2);
		inc = RND(2);
		for (int i = 0; i < 2 * H * W; i++)
			x[i] = (float)(RND(1000) - 500) / 10.0f;
#undef RND
		span = H + pads[0] + pads[2] - ((kh - 1) * dh + 1);
		if (span < 0 || W + pads[1] + pads[3] - ((kw - 1) * dw + 1) < 0)
			continue;
		OH = (ceil_m ? (span + sh - 1) / sh : span / sh) + 1;
		if (ceil_m && (OH - 1) * sh >= H + pads[0])
			OH--;
		span = W + pads[1] + pads[3] - ((kw - 1) * dw + 1);
		OW = (ceil_m ? (span + sw - 1) / sw : span / sw) + 1;
		if (ceil_m && (OW - 1) * sw >= W + pads[1])
			OW--;
		want = malloc(2 * (size_t)(OH * OW) * sizeof *want);
		for (int c = 0; c < 2; c++)
			naive_pool2d(x + c * H * W, H, W, kh, kw, sh, sw, dh, dw, pads[0], pads[1], pads[2], pads[3], OH,
				     OW, avg, inc, want + c * OH * OW);
		nt_begin(&t, avg ? "AveragePool" : "MaxPool", 19, "x", "y");
		gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, H, W));
		gen_attr_ints(t.g, t.n, "kernel_shape", 2, I64(kh, kw));
		gen_attr_ints(t.g, t.n, "strides", 2, I64(sh, sw));
		gen_attr_ints(t.g, t.n, "dilations", 2, I64(dh, dw));
		gen_attr_ints(t.g, t.n, "pads", 4, I64(pads[0], pads[1], pads[2], pads[3]));
		gen_attr_int(t.g, t.n, "ceil_mode", ceil_m);
		if (avg)
			gen_attr_int(t.g, t.n, "count_include_pad", inc);
		cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, 4, I64(1, 2, H, W)), OQ_OK);
		memcpy(in.data, x, in.nbytes);
		cr_assert_eq(nt_run(&t, 3, &in, 1), OQ_OK, "trial %d: %s", trial, t.d.msg);
		cr_assert_eq(t.out[0].nelem, (size_t)(2 * OH * OW), "trial %d: shape", trial);
		for (size_t i = 0; i < t.out[0].nelem; i++)
			cr_assert_float_eq(((float *)t.out[0].data)[i], want[i], 1e-4, "trial %d elem %zu", trial, i);
		oq_rt_release(&in);
		free(want);
		nt_end(&t);
	}
}

/*
 * MaxPool's vector path (16 outputs of a row at a time, AVX-512 CPUs) against
 * its scalar loop (oq_nn_use_ref): rows of 1 to 70 outputs (vector tails),
 * strides 1 and 2 across (any down), pads and ceil_mode, on inputs with
 * NaNs, +0/-0 and repeated values, where the first-wins order of the taps
 * decides the bits. Bit-identical for 1 and 3 threads too.
 */
Test(pool, maxpool_fast_matches_scalar_bits)
{
	unsigned seed = 777;
	for (int trial = 0; trial < 80; trial++) {
		int H, W, kh, kw, sh, sw, pads[4], ceil_m;
		nt t;
		oq_rt in, ref;
#define RND(n) (int)(((seed = seed * 1103515245u + 12345u) >> 16) % (unsigned)(n))
		H = 1 + RND(12);
		W = 1 + RND(140);
		kh = 1 + RND(4);
		kw = 1 + RND(4);
		sh = 1 + RND(3);
		sw = 1 + RND(2);
		for (int i = 0; i < 4; i++)
			pads[i] = RND(kh < kw ? kh : kw);
		ceil_m = RND(2);
		if (H + pads[0] + pads[2] < kh || W + pads[1] + pads[3] < kw)
			continue;
		cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, 4, I64(1, 3, H, W)), OQ_OK);
		for (size_t i = 0; i < in.nelem; i++) {
			int r = RND(20);
			((float *)in.data)[i] = r == 0 ? NAN : r == 1 ? 0.0f : r == 2 ? -0.0f : (float)(RND(9) - 4);
		}
#undef RND
		nt_begin(&t, "MaxPool", 12, "x", "y");
		gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 3, H, W));
		gen_attr_ints(t.g, t.n, "kernel_shape", 2, I64(kh, kw));
		gen_attr_ints(t.g, t.n, "strides", 2, I64(sh, sw));
		gen_attr_ints(t.g, t.n, "pads", 4, I64(pads[0], pads[1], pads[2], pads[3]));
		gen_attr_int(t.g, t.n, "ceil_mode", ceil_m);
		oq_nn_use_ref = 1;
		cr_assert_eq(nt_run(&t, 1, &in, 1), OQ_OK, "trial %d: %s", trial, t.d.msg);
		oq_nn_use_ref = 0;
		cr_assert_eq(oq_rt_copy(&ref, &t.out[0]), OQ_OK);
		for (int threads = 1; threads <= 3; threads += 2) {
			cr_assert_eq(nt_run(&t, threads, &in, 1), OQ_OK, "trial %d: %s", trial, t.d.msg);
			cr_assert_eq(t.out[0].nbytes, ref.nbytes);
			cr_assert(memcmp(t.out[0].data, ref.data, ref.nbytes) == 0,
				  "trial %d (H %d W %d k %dx%d s %dx%d): fast and scalar MaxPool differ (%d threads)", trial,
				  H, W, kh, kw, sh, sw, threads);
		}
		oq_rt_release(&ref);
		oq_rt_release(&in);
		nt_end(&t);
	}
}

/* ------------------------------------------------------------------ softmax */

Test(softmax, coerce_2d_before_13_single_axis_from_13)
{
	/* x [1,2,2] = {0, 0, 0, ln 5}.
	 * opset 11, axis 1: rows of prod(dims[1:]) = 4: exp {1,1,1,5}/8 -> .125 .125 .125 .625
	 * opset 13, axis 1: along dim 1: pairs (x0,x2) = (0,0) -> .5,.5; (x1,x3) = (0,ln5) -> 1/6, 5/6
	 * opset 13, default axis -1: pairs (x0,x1) -> .5,.5; (x2,x3) -> 1/6, 5/6 */
	struct {
		int opset, axis;
		double want[4];
	} c[3] = {{11, 1, {.125, .125, .125, .625}}, {13, 1, {.5, 1 / 6., .5, 5 / 6.}}, {13, -99, {.5, .5, 1 / 6., 5 / 6.}}};
	for (int i = 0; i < 3; i++) {
		nt t;
		nt_begin(&t, "Softmax", c[i].opset, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 0, 0, log(5.0)));
		if (c[i].axis != -99)
			gen_attr_int(t.g, t.n, "axis", c[i].axis);
		run_ok(&t);
		expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 2), c[i].want, 1e-6);
		nt_end(&t);
	}
}

Test(softmax, logsoftmax_and_hardmax)
{
	/* LogSoftmax opset 11 default axis 1 on [1,2,2] -> one row of 4: log(.125) etc.
	 * Hardmax opset 11: single 1 at the row max (index 3); opset 13 default axis -1: per pair,
	 * ties pick the first index: (0,0) -> 1,0; (0,ln5) -> 0,1 */
	nt t;
	nt_begin(&t, "LogSoftmax", 11, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 0, 0, log(5.0)));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(log(.125), log(.125), log(.125), log(.625)), 1e-6);
	nt_end(&t);
	nt_begin(&t, "Hardmax", 11, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 0, 0, log(5.0)));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 0, 0, 1), 0);
	nt_end(&t);
	nt_begin(&t, "Hardmax", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 0, 0, log(5.0)));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(1, 0, 0, 1), 0);
	nt_end(&t);
}

Test(softmax, large_values_are_stable)
{
	/* softmax is shift-invariant: {1000, 1001} -> 1/(1+e), e/(1+e) */
	nt t;
	double e = exp(1.0);
	nt_begin(&t, "Softmax", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2), VALS(1000, 1001));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(1 / (1 + e), e / (1 + e)), 1e-6);
	nt_end(&t);
}

/* ------------------------------------------------------------------ reductions */

Test(reduce, keepdims_and_axes_attribute_vs_input)
{
	/* [[1,2,3],[4,5,6]] summed over axis 1: {6, 15}; keepdims -> [2,1], else [2] */
	for (int opset = 11; opset <= 13; opset += 2)
		for (int keep = 0; keep <= 1; keep++) {
			nt t;
			nt_begin(&t, "ReduceSum", opset, opset >= 13 ? "x,axes" : "x", "y");
			gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 3), VALS(1, 2, 3, 4, 5, 6));
			if (opset >= 13)
				gen_init(t.g, t.gp, "axes", OQ_DT_INT64, SHAPE(1), VALS(-1));
			else
				gen_attr_ints(t.g, t.n, "axes", 1, I64(-1));
			gen_attr_int(t.g, t.n, "keepdims", keep);
			run_ok(&t);
			if (keep)
				expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 1), VALS(6, 15), 0);
			else
				expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(6, 15), 0);
			nt_end(&t);
		}
}

Test(reduce, mean_axes_attribute_until_18)
{
	/* ReduceMean opset 13 takes axes as attribute, opset 18 as input: mean over axis 0 of
	 * [[1,2],[3,6]] = {2, 4} */
	nt t;
	nt_begin(&t, "ReduceMean", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 2, 3, 6));
	gen_attr_ints(t.g, t.n, "axes", 1, I64(0));
	gen_attr_int(t.g, t.n, "keepdims", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(2, 4), 1e-6);
	nt_end(&t);
	nt_begin(&t, "ReduceMean", 18, "x,axes", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 2, 3, 6));
	gen_init(t.g, t.gp, "axes", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_attr_int(t.g, t.n, "keepdims", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(2, 4), 1e-6);
	nt_end(&t);
}

Test(reduce, empty_axes_noop_or_all)
{
	/* no axes: reduce everything (21, keepdims [1,1]) unless noop_with_empty_axes (identity) */
	for (int noop = 0; noop <= 1; noop++) {
		nt t;
		nt_begin(&t, "ReduceSum", 13, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 3), VALS(1, 2, 3, 4, 5, 6));
		gen_attr_int(t.g, t.n, "noop_with_empty_axes", noop);
		run_ok(&t);
		if (noop)
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 3), VALS(1, 2, 3, 4, 5, 6), 0);
		else
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1), VALS(21), 0);
		nt_end(&t);
	}
}

Test(reduce, empty_set_values)
{
	/* reducing a [2, 0] tensor over axis 1 gives each op's identity */
	struct {
		const char *op;
		double want;
	} c[] = {{"ReduceSum", 0},	   {"ReduceProd", 1},	       {"ReduceMax", -INFINITY},
		 {"ReduceMin", INFINITY},  {"ReduceL1", 0},	       {"ReduceL2", 0},
		 {"ReduceSumSquare", 0},   {"ReduceLogSum", -INFINITY}, {"ReduceLogSumExp", -INFINITY},
		 {"ReduceMean", NAN}};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		nt t;
		nt_begin(&t, c[i].op, 18, "x,axes", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 0), NULL);
		gen_init(t.g, t.gp, "axes", OQ_DT_INT64, SHAPE(1), VALS(1));
		run_ok(&t);
		expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 1), (const double[]){c[i].want, c[i].want}, 0);
		nt_end(&t);
	}
	/* integers: Max of nothing is the lowest int32, Min the highest */
	nt t;
	nt_begin(&t, "ReduceMax", 18, "x,axes", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_INT32, SHAPE(2, 0), NULL);
	gen_init(t.g, t.gp, "axes", OQ_DT_INT64, SHAPE(1), VALS(1));
	run_ok(&t);
	expect(&t, 0, OQ_DT_INT32, SHAPE(2, 1), VALS(INT32_MIN, INT32_MIN), 0);
	nt_end(&t);
}

Test(reduce, integer_inputs_are_exact)
{
	/* int64 sum of 2^53 + 1 and 2: 9007199254740995 exactly (a double would round);
	 * int32 mean of {1, 2} truncates to 1, of {3, 6} is 4; prod {3, 5} = 15 */
	nt t;
	nt_begin(&t, "ReduceSum", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_INT64, SHAPE(2), NULL);
	run_ok(&t); /* zeros: shape check only */
	nt_end(&t);
	{
		oq_rt in;
		nt_begin(&t, "ReduceSum", 13, "x", "y");
		gen_input(t.g, t.gp, "x", OQ_DT_INT64, SHAPE(2));
		gen_attr_int(t.g, t.n, "keepdims", 0);
		cr_assert_eq(oq_rt_alloc(&in, OQ_DT_INT64, 1, I64(2)), OQ_OK);
		((int64_t *)in.data)[0] = ((int64_t)1 << 53) + 1;
		((int64_t *)in.data)[1] = 2;
		cr_assert_eq(nt_run(&t, 1, &in, 1), OQ_OK, "%s", t.d.msg);
		cr_assert_eq(t.out[0].dtype, OQ_DT_INT64);
		cr_assert_eq(((int64_t *)t.out[0].data)[0], ((int64_t)1 << 53) + 3);
		oq_rt_release(&in);
		nt_end(&t);
	}
	nt_begin(&t, "ReduceMean", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_INT32, SHAPE(2, 2), VALS(1, 2, 3, 6));
	gen_attr_ints(t.g, t.n, "axes", 1, I64(1));
	run_ok(&t);
	expect(&t, 0, OQ_DT_INT32, SHAPE(2, 1), VALS(1, 4), 0);
	nt_end(&t);
	nt_begin(&t, "ReduceProd", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_INT32, SHAPE(2), VALS(3, 5));
	gen_attr_int(t.g, t.n, "keepdims", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_INT32, 0, NULL, VALS(15), 0);
	nt_end(&t);
}

Test(reduce, middle_axes_and_logsumexp)
{
	/* x [2,2,2] = 1..8, ReduceMax over axes {0, 2}: kept axis 1 -> index 0: {1,2,5,6} = 6,
	 * index 1: {3,4,7,8} = 8. ReduceLogSumExp({1000, 1000}) = 1000 + ln 2 (no overflow).
	 * ReduceL2({3, 4}) = 5, ReduceLogSum({1, e - 1}) = 1 */
	nt t;
	nt_begin(&t, "ReduceMax", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2, 2), VALS(1, 2, 3, 4, 5, 6, 7, 8));
	gen_attr_ints(t.g, t.n, "axes", 2, I64(0, 2));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 1), VALS(6, 8), 0);
	nt_end(&t);
	nt_begin(&t, "ReduceLogSumExp", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_DOUBLE, SHAPE(2), VALS(1000, 1000));
	run_ok(&t);
	expect(&t, 0, OQ_DT_DOUBLE, SHAPE(1), VALS(1000 + log(2.0)), 1e-9);
	nt_end(&t);
	nt_begin(&t, "ReduceL2", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2), VALS(3, 4));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1), VALS(5), 1e-6);
	nt_end(&t);
	nt_begin(&t, "ReduceLogSum", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2), VALS(1, exp(1.0) - 1));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1), VALS(1), 1e-6);
	nt_end(&t);
}

Test(reduce, repeated_axis_is_an_error)
{
	nt t;
	nt_begin(&t, "ReduceSum", 11, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 3), NULL);
	gen_attr_ints(t.g, t.n, "axes", 2, I64(1, -1));
	cr_assert_eq(nt_run(&t, 1, NULL, 0), OQ_EINVAL);
	cr_assert(strstr(t.d.msg, "repeated"), "%s", t.d.msg);
	nt_end(&t);
}

Test(reduce, argmax_select_last_index)
{
	/* [[1,3,3],[2,2,0]] along axis 1: first max 1, 0; last max 2, 1; argmin first 0, 2 */
	for (int last = 0; last <= 1; last++) {
		nt t;
		nt_begin(&t, "ArgMax", 13, "x", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 3), VALS(1, 3, 3, 2, 2, 0));
		gen_attr_int(t.g, t.n, "axis", 1);
		gen_attr_int(t.g, t.n, "keepdims", 0);
		gen_attr_int(t.g, t.n, "select_last_index", last);
		run_ok(&t);
		if (last)
			expect(&t, 0, OQ_DT_INT64, SHAPE(2), VALS(2, 1), 0);
		else
			expect(&t, 0, OQ_DT_INT64, SHAPE(2), VALS(1, 0), 0);
		nt_end(&t);
	}
	nt t;
	nt_begin(&t, "ArgMin", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_INT32, SHAPE(2, 3), VALS(1, 3, 3, 2, 2, 0));
	gen_attr_int(t.g, t.n, "axis", -1);
	run_ok(&t);
	expect(&t, 0, OQ_DT_INT64, SHAPE(2, 1), VALS(0, 2), 0);
	nt_end(&t);
}

/* ------------------------------------------------------------------ TopK, CumSum */

Test(topk, ties_take_the_smaller_index_first)
{
	/* x = {3, 1, 3, 2, 3}: largest 2 -> values 3, 3 at indices 0, 2;
	 * smallest 2 -> 1 (index 1), 2 (index 3) */
	for (int largest = 1; largest >= 0; largest--) {
		nt t;
		nt_begin(&t, "TopK", 11, "x,k", "v,i");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(5), VALS(3, 1, 3, 2, 3));
		gen_init(t.g, t.gp, "k", OQ_DT_INT64, SHAPE(1), VALS(2));
		gen_attr_int(t.g, t.n, "largest", largest);
		run_ok(&t);
		if (largest) {
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(3, 3), 0);
			expect(&t, 1, OQ_DT_INT64, SHAPE(2), VALS(0, 2), 0);
		} else {
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(1, 2), 0);
			expect(&t, 1, OQ_DT_INT64, SHAPE(2), VALS(1, 3), 0);
		}
		nt_end(&t);
	}
}

Test(topk, k_attribute_before_10_and_axis)
{
	/* opset 1: k attribute; [[1,4],[3,2]] top-1 along axis 0 -> values {3, 4}, indices {1, 0} */
	nt t;
	nt_begin(&t, "TopK", 1, "x", "v,i");
	gen_init(t.g, t.gp, "x", OQ_DT_INT32, SHAPE(2, 2), VALS(1, 4, 3, 2));
	gen_attr_int(t.g, t.n, "k", 1);
	gen_attr_int(t.g, t.n, "axis", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_INT32, SHAPE(1, 2), VALS(3, 4), 0);
	expect(&t, 1, OQ_DT_INT64, SHAPE(1, 2), VALS(1, 0), 0);
	nt_end(&t);
	/* k above the axis size is an error */
	nt_begin(&t, "TopK", 11, "x,k", "v,i");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2), VALS(1, 2));
	gen_init(t.g, t.gp, "k", OQ_DT_INT64, SHAPE(1), VALS(3));
	cr_assert_eq(nt_run(&t, 1, NULL, 0), OQ_EINVAL);
	nt_end(&t);
}

Test(cumsum, exclusive_reverse)
{
	/* {1, 2, 3}: plain 1 3 6; exclusive 0 1 3; reverse 6 5 3; reverse exclusive 5 3 0 */
	const double want[4][3] = {{1, 3, 6}, {0, 1, 3}, {6, 5, 3}, {5, 3, 0}};
	for (int m = 0; m < 4; m++) {
		nt t;
		nt_begin(&t, "CumSum", 14, "x,axis", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_INT64, SHAPE(3), VALS(1, 2, 3));
		gen_init(t.g, t.gp, "axis", OQ_DT_INT32, 0, NULL, VALS(0));
		gen_attr_int(t.g, t.n, "exclusive", m & 1);
		gen_attr_int(t.g, t.n, "reverse", m >> 1);
		run_ok(&t);
		expect(&t, 0, OQ_DT_INT64, SHAPE(3), want[m], 0);
		nt_end(&t);
	}
	/* axis 1 of [[1,2],[3,4]] in float: {1,3},{3,7} */
	nt t;
	nt_begin(&t, "CumSum", 14, "x,axis", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 2, 3, 4));
	gen_init(t.g, t.gp, "axis", OQ_DT_INT64, SHAPE(1), VALS(-1));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 3, 3, 7), 0);
	nt_end(&t);
}

/* ------------------------------------------------------------------ normalisation */

Test(norm, batchnorm_inference_and_training_error)
{
	/* C = 2: y0 = 2 * (1 - 1) / sqrt(3 + 1) + 0 = 0; y1 = 1 * (2 - 0) / sqrt(0 + 1) + 1 = 3 */
	nt t;
	nt_begin(&t, "BatchNormalization", 15, "x,s,b,m,v", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 1), VALS(1, 2));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(2), VALS(2, 1));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(2), VALS(0, 1));
	gen_init(t.g, t.gp, "m", OQ_DT_FLOAT, SHAPE(2), VALS(1, 0));
	gen_init(t.g, t.gp, "v", OQ_DT_FLOAT, SHAPE(2), VALS(3, 0));
	gen_attr_float(t.g, t.n, "epsilon", 1.0f);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 1), VALS(0, 3), 1e-6);
	nt_end(&t);

	nt_begin(&t, "BatchNormalization", 15, "x,s,b,m,v", "y,rm,rv");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 1), VALS(1, 2));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(2), VALS(2, 1));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(2), VALS(0, 1));
	gen_init(t.g, t.gp, "m", OQ_DT_FLOAT, SHAPE(2), VALS(1, 0));
	gen_init(t.g, t.gp, "v", OQ_DT_FLOAT, SHAPE(2), VALS(3, 0));
	gen_attr_int(t.g, t.n, "training_mode", 1);
	cr_assert_eq(nt_run(&t, 1, NULL, 0), OQ_EUNSUP);
	cr_assert(strstr(t.d.msg, "training_mode"), "%s", t.d.msg);
	nt_end(&t);
}

Test(norm, groupnorm_opset18_per_group_opset21_per_channel)
{
	/* x [1,2,2] = {0,2 | 4,6}, 1 group: mean 3, var (9+1+1+9)/4 = 5, eps 0: n = (x-3)/sqrt 5.
	 * opset 18: scale {2}, bias {1} -> 2n + 1 everywhere.
	 * opset 21: scale {1, 2}, bias {0, 1} -> channel 0: n, channel 1: 2n + 1 */
	double r5 = sqrt(5.0);
	nt t;
	nt_begin(&t, "GroupNormalization", 18, "x,s,b", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 2, 4, 6));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(1), VALS(2));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(1), VALS(1));
	gen_attr_int(t.g, t.n, "num_groups", 1);
	gen_attr_float(t.g, t.n, "epsilon", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(-6 / r5 + 1, -2 / r5 + 1, 2 / r5 + 1, 6 / r5 + 1), 1e-6);
	nt_end(&t);

	nt_begin(&t, "GroupNormalization", 21, "x,s,b", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 2, 4, 6));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(2), VALS(1, 2));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(2), VALS(0, 1));
	gen_attr_int(t.g, t.n, "num_groups", 1);
	gen_attr_float(t.g, t.n, "epsilon", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(-3 / r5, -1 / r5, 2 / r5 + 1, 6 / r5 + 1), 1e-6);
	nt_end(&t);

	/* opset 21 with per-group parameters is rejected, naming the rule */
	nt_begin(&t, "GroupNormalization", 21, "x,s,b", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2, 2), VALS(0, 2, 4, 6));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(1), VALS(2));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(1), VALS(1));
	gen_attr_int(t.g, t.n, "num_groups", 1);
	cr_assert_eq(nt_run(&t, 1, NULL, 0), OQ_EINVAL);
	cr_assert(strstr(t.d.msg, "one per channel"), "%s", t.d.msg);
	nt_end(&t);
}

Test(norm, layernorm_mean_invstddev)
{
	/* rows {1,3}: mean 2, var 1, eps 1 -> inv 1/sqrt 2, y = (x-2)/sqrt 2 * {1, 2} + {0, 1};
	 * row {2,2}: mean 2, var 0 -> inv 1, y = {0, 1} */
	double r2 = sqrt(2.0);
	nt t;
	nt_begin(&t, "LayerNormalization", 17, "x,s,b", "y,m,i");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 3, 2, 2));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(2), VALS(1, 2));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(2), VALS(0, 1));
	gen_attr_float(t.g, t.n, "epsilon", 1);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 2), VALS(-1 / r2, 2 / r2 + 1, 0, 1), 1e-6);
	expect(&t, 1, OQ_DT_FLOAT, SHAPE(2, 1), VALS(2, 2), 1e-6);
	expect(&t, 2, OQ_DT_FLOAT, SHAPE(2, 1), VALS(1 / r2, 1), 1e-6);
	nt_end(&t);
}

Test(norm, instancenorm_lrn_lpnorm_mvn)
{
	/* InstanceNorm over {1, 3}: mean 2, var 1, eps 0 -> {-1, 1} * 3 + 1 = {-2, 4} */
	nt t;
	nt_begin(&t, "InstanceNormalization", 6, "x,s,b", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 1, 2), VALS(1, 3));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, SHAPE(1), VALS(3));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, SHAPE(1), VALS(1));
	gen_attr_float(t.g, t.n, "epsilon", 0);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 1, 2), VALS(-2, 4), 1e-6);
	nt_end(&t);

	/* LRN size 3, alpha 3 (alpha/size 1), beta 1, bias 1 over channels {1,2,3}:
	 * c0: 1/(1+1+4) = 1/6, c1: 2/(1+14) = 2/15, c2: 3/(1+13) = 3/14 */
	nt_begin(&t, "LRN", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 3, 1, 1), VALS(1, 2, 3));
	gen_attr_int(t.g, t.n, "size", 3);
	gen_attr_float(t.g, t.n, "alpha", 3);
	gen_attr_float(t.g, t.n, "beta", 1);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(1, 3, 1, 1), VALS(1 / 6., 2 / 15., 3 / 14.), 1e-6);
	nt_end(&t);

	/* LpNormalization p 1 along axis 0 of [[1,2],[3,2]]: columns sum 4 and 4 -> .25 .5 .75 .5 */
	nt_begin(&t, "LpNormalization", 1, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 2, 3, 2));
	gen_attr_int(t.g, t.n, "axis", 0);
	gen_attr_int(t.g, t.n, "p", 1);
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 2), VALS(.25, .5, .75, .5), 1e-6);
	nt_end(&t);

	/* MVN over axes {1}: rows {1,3} -> (x-2)/1 = {-1, 1}; {5, 5} -> 0 */
	nt_begin(&t, "MeanVarianceNormalization", 13, "x", "y");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 3, 5, 5));
	gen_attr_ints(t.g, t.n, "axes", 1, I64(1));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, SHAPE(2, 2), VALS(-1, 1, 0, 0), 1e-6);
	nt_end(&t);
}

/* ------------------------------------------------------------------ threads */

/* Same model, 1 vs 4 threads: outputs must be bit-identical. */
static void same_for_threads(const char *op, int opset, int rank, const int64_t *dims, void (*attrs)(nt *))
{
	nt t;
	oq_rt in, first;
	unsigned seed = 7;
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, rank, dims), OQ_OK);
	for (size_t i = 0; i < in.nelem; i++) {
		seed = seed * 1103515245u + 12345u;
		((float *)in.data)[i] = (float)((seed >> 8) % 20001) / 1000.0f - 10.0f;
	}
	nt_begin(&t, op, opset, "x", "y");
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, rank, dims);
	if (attrs)
		attrs(&t);
	cr_assert_eq(nt_run(&t, 1, &in, 1), OQ_OK, "%s: %s", op, t.d.msg);
	cr_assert_eq(oq_rt_copy(&first, &t.out[0]), OQ_OK);
	cr_assert_eq(nt_run(&t, 4, &in, 1), OQ_OK, "%s: %s", op, t.d.msg);
	cr_assert_eq(first.nbytes, t.out[0].nbytes);
	cr_assert(memcmp(first.data, t.out[0].data, first.nbytes) == 0, "%s differs between 1 and 4 threads", op);
	oq_rt_release(&first);
	oq_rt_release(&in);
	nt_end(&t);
}

static void a_pool(nt *t)
{
	gen_attr_ints(t->g, t->n, "kernel_shape", 2, I64(3, 3));
	gen_attr_ints(t->g, t->n, "strides", 2, I64(2, 2));
	gen_attr_ints(t->g, t->n, "pads", 4, I64(1, 1, 1, 1));
}

static void a_axes(nt *t)
{
	gen_attr_ints(t->g, t->n, "axes", 2, I64(0, 2));
}

static void a_lrn(nt *t)
{
	gen_attr_int(t->g, t->n, "size", 5);
}

Test(threads, outputs_do_not_depend_on_thread_count)
{
	const int64_t d4[] = {2, 16, 33, 35}, d3[] = {64, 48, 130};
	same_for_threads("MaxPool", 12, 4, d4, a_pool);
	same_for_threads("AveragePool", 11, 4, d4, a_pool);
	same_for_threads("GlobalAveragePool", 1, 4, d4, NULL);
	same_for_threads("Softmax", 13, 3, d3, NULL);
	same_for_threads("LogSoftmax", 13, 3, d3, NULL);
	same_for_threads("ReduceMean", 13, 3, d3, a_axes);
	same_for_threads("ReduceLogSumExp", 13, 3, d3, a_axes);
	same_for_threads("MeanVarianceNormalization", 13, 4, d4, NULL);
	same_for_threads("LRN", 13, 4, d4, a_lrn);
}

/* ------------------------------------------------------------------ losses */

Test(loss, nll_reductions_weights_ignore_index)
{
	/* log-probs [[-1,-2],[-3,-4]], target {0, 1}, weight {1, 3}: losses 1*1 = 1 and 4*3 = 12.
	 * none {1, 12}; sum 13; mean 13 / (1 + 3) = 3.25; with ignore_index 1: mean 1 / 1 = 1 */
	const char *red[3] = {"none", "sum", "mean"};
	for (int r = 0; r < 4; r++) {
		nt t;
		nt_begin(&t, "NegativeLogLikelihoodLoss", 13, "x,t,w", "y");
		gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(-1, -2, -3, -4));
		gen_init(t.g, t.gp, "t", OQ_DT_INT64, SHAPE(2), VALS(0, 1));
		gen_init(t.g, t.gp, "w", OQ_DT_FLOAT, SHAPE(2), VALS(1, 3));
		gen_attr_str(t.g, t.n, "reduction", red[r < 3 ? r : 2]);
		if (r == 3)
			gen_attr_int(t.g, t.n, "ignore_index", 1);
		run_ok(&t);
		if (r == 0)
			expect(&t, 0, OQ_DT_FLOAT, SHAPE(2), VALS(1, 12), 1e-6);
		else
			expect(&t, 0, OQ_DT_FLOAT, 0, NULL, r == 1 ? VALS(13) : r == 2 ? VALS(3.25) : VALS(1), 1e-6);
		nt_end(&t);
	}
}

Test(loss, softmax_cross_entropy_log_prob)
{
	/* scores {0, 0}, label 1: log_prob {-ln 2, -ln 2}, mean loss ln 2 */
	nt t;
	nt_begin(&t, "SoftmaxCrossEntropyLoss", 13, "x,t", "y,lp");
	gen_init(t.g, t.gp, "x", OQ_DT_FLOAT, SHAPE(1, 2), VALS(0, 0));
	gen_init(t.g, t.gp, "t", OQ_DT_INT32, SHAPE(1), VALS(1));
	run_ok(&t);
	expect(&t, 0, OQ_DT_FLOAT, 0, NULL, VALS(log(2.0)), 1e-6);
	expect(&t, 1, OQ_DT_FLOAT, SHAPE(1, 2), VALS(-log(2.0), -log(2.0)), 1e-6);
	nt_end(&t);
}
