/*
 * test_vmath.c - the vectorised float32 math of calib/kernels/vmath.c and the
 * kernels that use it (Softmax / LogSoftmax over the last axis, ReduceMean /
 * ReduceSum over contiguous axes).
 *
 * - The AVX-512 and AVX2 entry points (oq_vm_simd 1 and 2, where the CPU
 *   runs them) against their scalar references (same operations):
 *   bit-identical for every length (every tail of a vector) and offset.
 * - The references against the definitions in double / long double: exp
 *   within 1 ulp, sums within 1e-15 relative (they add in double).
 * - Through the executor: Softmax, LogSoftmax and ReduceMean against the
 *   formulas in double (1e-6 relative), incl. lines with -Inf, +Inf and NaN
 *   (which keep the scalar loop's results: hand-computed below), and for
 *   threads 1 and 2 bit-identical.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/vmath.h"

static uint64_t rng = 1;

static double frand(void) /* [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

static int64_t ulp_diff(float a, float b)
{
	int32_t ia, ib;
	memcpy(&ia, &a, 4);
	memcpy(&ib, &b, 4);
	if (ia < 0)
		ia = INT32_MIN - ia;
	if (ib < 0)
		ib = INT32_MIN - ib;
	return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* The vector paths this CPU has: oq_vm_simd levels 1 (AVX-512) and 2 (AVX2), each if it runs here. */
static int level_runs(int level)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("fma"))
		return 0;
	return level == 1 ? __builtin_cpu_supports("avx512f") : __builtin_cpu_supports("avx2");
}

Test(vmath, sums_and_exp_vector_vs_ref)
{
	enum { N = 2100 };
	float *x = malloc(N * sizeof *x), *y1 = malloc(N * sizeof *y1), *y2 = malloc(N * sizeof *y2);
	int levels = 0;

	cr_assert(x && y1 && y2);
	rng = 77;
	for (int i = 0; i < N; i++) /* magnitudes over 2^-20 .. 2^20, both signs */
		x[i] = (float)(frand() * ldexp(1.0, (int)(frand() * 20)));
	for (int level = 1; level <= 2; level++) {
		if (!level_runs(level))
			continue;
		levels++;
		oq_vm_simd = level;
		for (size_t off = 0; off < 17; off++)
			for (size_t n = 0; n + off <= N; n += n < 48 ? 1 : 331) {
				double a = oq_vm_sum(x + off, n), b = oq_vm_sum_ref(x + off, n);
				int nan;
				float m = oq_vm_max(x + off, n, &nan), mr = -INFINITY;
				cr_assert(memcmp(&a, &b, sizeof a) == 0, "sum n %zu off %zu: %.17g vs %.17g", n, off, a, b);
				for (size_t i = 0; i < n; i++)
					mr = x[off + i] > mr ? x[off + i] : mr;
				cr_assert(m == mr && !nan, "max n %zu off %zu", n, off);
				if (n == 0)
					continue;
				a = oq_vm_expsum(x + off, m, y1, n);
				b = oq_vm_expsum_ref(x + off, m, y2, n);
				cr_assert(memcmp(&a, &b, sizeof a) == 0, "expsum n %zu off %zu: %.17g vs %.17g", n, off, a, b);
				cr_assert(memcmp(y1, y2, n * sizeof *y1) == 0, "exp values n %zu off %zu", n, off);
			}
		x[5] = NAN;
		{
			int nan = 0;
			oq_vm_max(x, 40, &nan);
			cr_assert(nan, "NaN in a line is reported");
			oq_vm_max(x + 6, 40, &nan);
			cr_assert(!nan);
			oq_vm_max(x, 6, &nan);
			cr_assert(nan, "NaN in a line's tail is reported");
		}
		x[5] = 0.5f;
	}
	oq_vm_simd = 1;
	free(x);
	free(y1);
	free(y2);
	if (!levels)
		cr_skip_test("no AVX-512F or AVX2 with FMA on this CPU: the vector paths do not run");
}

Test(vmath, refs_against_definitions)
{
	enum { N = 3000 };
	float x[N];
	long double exact = 0;

	/* exp over [-104, 0]: within 1 ulp of the correctly rounded value; -104 and below: 0 */
	for (int i = 0; i <= 20000; i++) {
		float v = (float)(-104.0 * i / 20000.0), w = (float)exp((double)v), g = oq_vm_exp_ref(v);
		cr_assert(ulp_diff(g, w) <= 1, "exp(%.9g) = %.9g, want %.9g", (double)v, (double)g, (double)w);
	}
	cr_assert(oq_vm_exp_ref(0.0f) == 1.0f && oq_vm_exp_ref(-104.0f) == 0.0f && oq_vm_exp_ref(-INFINITY) == 0.0f);
	/* the stripe sum in double against a long double sum */
	rng = 99;
	for (int i = 0; i < N; i++) {
		x[i] = (float)(frand() * 1000);
		exact += x[i];
	}
	cr_assert(fabsl(oq_vm_sum_ref(x, N) - exact) <= 1e-15L * fabsl(exact) + 1e-300L);
	cr_assert(oq_vm_sum_ref(x, 0) == 0);
}

/*
 * Sigmoid: the vector paths (every level this CPU runs, every tail of a
 * vector and offset, in place too) give oq_vm_sigmoid_ref's bits; the
 * reference is within 2 ulp of 1 / (1 + exp(-x)) in double over a sweep of
 * magnitudes 2^-30 .. 2^7 (subnormal results included), and exact at the
 * special values (hand values: sigmoid(0) = 0.5, +Inf 1, -Inf 0, NaN NaN).
 */
Test(vmath, sigmoid)
{
	enum { N = 1200 };
	float x[N], y1[N], y2[N];

	rng = 31;
	for (int i = 0; i < N; i++)
		x[i] = (float)(frand() * ldexp(1.0, (int)(frand() * 7)));
	x[3] = NAN;
	x[4] = INFINITY;
	x[5] = -INFINITY;
	x[6] = -0.0f;
	x[7] = -100.0f; /* subnormal result */
	x[8] = -110.0f; /* 0 */
	x[9] = 90.0f;
	for (int level = 0; level <= 2; level++) {
		if (level && !level_runs(level))
			continue;
		oq_vm_simd = level;
		for (size_t off = 0; off < 17; off++)
			for (size_t n = 0; n + off <= N; n += n < 40 ? 1 : 97) {
				oq_vm_sigmoid(x + off, y1, n);
				memcpy(y2, x + off, n * sizeof *y2);
				oq_vm_sigmoid(y2, y2, n);
				for (size_t i = 0; i < n; i++) {
					float r = oq_vm_sigmoid_ref(x[off + i]);
					cr_assert(!memcmp(&r, y1 + i, 4) && !memcmp(&r, y2 + i, 4),
						  "level %d: sigmoid(%.9g) = %.9g / %.9g in place, reference %.9g (n %zu off %zu)",
						  level, (double)x[off + i], (double)y1[i], (double)y2[i], (double)r, n, off);
				}
			}
	}
	oq_vm_simd = 1;
	for (int i = 0; i <= 40000; i++) {
		double v = (i % 2 ? -1 : 1) * ldexp(1.0, -30 + (int)(37.0 * i / 40000));
		float xf = (float)(v * (1 + (i % 1000) / 1000.0)), g = oq_vm_sigmoid_ref(xf);
		float w = (float)(1.0 / (1.0 + exp(-(double)xf)));
		cr_assert(ulp_diff(g, w) <= 2, "sigmoid(%.9g) = %.9g, want %.9g", (double)xf, (double)g, (double)w);
	}
	for (float v = -104.0f; v <= -80.0f; v += 0.125f) { /* results near and below the least normal */
		float g = oq_vm_sigmoid_ref(v), w = (float)(1.0 / (1.0 + exp(-(double)v)));
		cr_assert(ulp_diff(g, w) <= 2, "sigmoid(%.9g) = %.9g, want %.9g", (double)v, (double)g, (double)w);
	}
	cr_assert(oq_vm_sigmoid_ref(0.0f) == 0.5f && oq_vm_sigmoid_ref(-0.0f) == 0.5f);
	cr_assert(oq_vm_sigmoid_ref(INFINITY) == 1.0f && oq_vm_sigmoid_ref(-INFINITY) == 0.0f);
	cr_assert(isnan(oq_vm_sigmoid_ref(NAN)));
	cr_assert(oq_vm_sigmoid_ref(-110.0f) == 0.0f && oq_vm_sigmoid_ref(110.0f) == 1.0f);
}

/* ----------------------------------------------------- through the executor */

static int run1(const char *op, int opset, const oq_rt *x, const char *axes, int threads, oq_rt *y)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	int rc;

	gen_opset(g, "", opset);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, x->rank, x->dims);
	n = gen_node(g, gp, op, "n", "x", "y");
	if (axes)
		gen_attr_ints(g, n, "axes", 1, (const int64_t[]){strtoll(axes, NULL, 10)});
	gen_output(g, gp, "y", OQ_DT_FLOAT, -1, NULL);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	memset(y, 0, sizeof *y);
	rc = oq_exec_new(m, &o, &e, &d);
	if (!rc)
		rc = oq_exec_run(e, x, 1, y, 1, &d);
	cr_assert_eq(rc, OQ_OK, "%s: %s", op, d.msg);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
	return rc;
}

/*
 * Softmax / LogSoftmax over the last axis of [3, 5, L] for lengths around
 * the vector width and an attention row (197), against the formula in
 * double. Row 0 of each case holds -Inf (exp gives 0), row 1 a NaN (the row
 * becomes NaN), row 2 a +Inf (max is +Inf: the scalar loop gives NaN for
 * the Inf lane's exp(Inf - Inf) and so the whole row is NaN).
 */
Test(vmath, softmax_last_axis)
{
	static const int64_t lens[] = {1, 7, 16, 17, 33, 197};
	for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
		for (int lg = 0; lg < 2; lg++) {
			int64_t L = lens[li];
			oq_rt x, y1, y2;
			cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 3, (const int64_t[]){3, 5, L}), OQ_OK);
			rng = 5 + (uint64_t)L;
			for (size_t i = 0; i < x.nelem; i++)
				((float *)x.data)[i] = (float)(frand() * 8);
			if (L > 1) {
				((float *)x.data)[0] = -INFINITY;
				((float *)x.data)[L + 1] = NAN;
				((float *)x.data)[2 * L] = INFINITY;
			}
			run1(lg ? "LogSoftmax" : "Softmax", 13, &x, NULL, 1, &y1);
			run1(lg ? "LogSoftmax" : "Softmax", 13, &x, NULL, 2, &y2);
			cr_assert(!memcmp(y1.data, y2.data, y1.nbytes), "threads 1 and 2 differ (L %lld)", (long long)L);
			for (size_t r = 0; r < x.nelem / (size_t)L; r++) {
				const float *xr = (const float *)x.data + r * (size_t)L, *yr = (const float *)y1.data + r * (size_t)L;
				double m = -INFINITY, s = 0;
				int bad = 0;
				for (int64_t i = 0; i < L; i++) {
					bad |= isnan(xr[i]) || xr[i] == INFINITY;
					m = xr[i] > m ? xr[i] : m;
				}
				for (int64_t i = 0; i < L; i++)
					s += exp(xr[i] - m);
				for (int64_t i = 0; i < L; i++) {
					double w = lg ? xr[i] - m - log(s) : exp(xr[i] - m) / s;
					if (bad && L > 1) {
						cr_assert(isnan(yr[i]), "row %zu (NaN or +Inf in it) element %lld: %g", r,
							  (long long)i, (double)yr[i]);
						continue;
					}
					if (isinf(w))
						cr_assert(yr[i] == w, "row %zu element %lld: %g, want %g", r, (long long)i,
							  (double)yr[i], w);
					else
						cr_assert(fabs(yr[i] - w) <= 1e-6 * fmax(fabs(w), lg ? 1 : 1e-30) + 1e-30,
							  "%s L %lld row %zu element %lld: %.9g, want %.9g",
							  lg ? "LogSoftmax" : "Softmax", (long long)L, r, (long long)i,
							  (double)yr[i], w);
				}
			}
			oq_rt_release(&x);
			oq_rt_release(&y1);
			oq_rt_release(&y2);
		}
}

/* ReduceMean / ReduceSum over the last axis of [4, L] (keepdims) against sums in double. */
Test(vmath, reduce_mean_sum_last_axis)
{
	static const int64_t lens[] = {1, 15, 16, 17, 768, 1000};
	for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
		for (int mean = 0; mean < 2; mean++) {
			int64_t L = lens[li];
			oq_rt x, y1, y2;
			cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 2, (const int64_t[]){4, L}), OQ_OK);
			rng = 11 + (uint64_t)L;
			for (size_t i = 0; i < x.nelem; i++)
				((float *)x.data)[i] = (float)(frand() * 3 + 0.5);
			run1(mean ? "ReduceMean" : "ReduceSum", 11, &x, "-1", 1, &y1);
			run1(mean ? "ReduceMean" : "ReduceSum", 11, &x, "-1", 2, &y2);
			cr_assert_eq(y1.nelem, 4);
			cr_assert(!memcmp(y1.data, y2.data, y1.nbytes), "threads 1 and 2 differ");
			for (int r = 0; r < 4; r++) {
				double s = 0;
				for (int64_t i = 0; i < L; i++)
					s += ((const float *)x.data)[r * L + i];
				if (mean)
					s /= (double)L;
				cr_assert(fabs(((const float *)y1.data)[r] - s) <= 1e-6 * fabs(s), "L %lld row %d: %.9g, want %.9g",
					  (long long)L, r, (double)((const float *)y1.data)[r], s);
			}
			oq_rt_release(&x);
			oq_rt_release(&y1);
			oq_rt_release(&y2);
		}
}
