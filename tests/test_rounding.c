/*
 * test_rounding.c - learned weight rounding (calib/rounding): the solvers on problems whose
 * best answer is known by enumeration or by hand, the input moments against a direct
 * computation, and the whole step on small models (the held-out guard of the rounding and of
 * weight-only bias correction).
 *
 * Losses in these tests are computed directly from the inputs, sum_i (w . x_i - w~ . x_i)^2,
 * never through the solver's A and T.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/rounding/moments.h"
#include "calib/rounding/rounding.h"
#include "gen_model.h"
#include "src/io/npy.h"
#include "src/io/onnx_io.h"
#include "src/pipeline/pipeline.h"
#include "tmpdir.h"

/* A and T = A w of inputs x[n][K] (second moments, the solver's form). */
static void moments_of(const double *x, size_t n, size_t K, const float *w, size_t rows, float *A, float *T)
{
	for (size_t a = 0; a < K; a++)
		for (size_t b = 0; b < K; b++) {
			double s = 0;
			for (size_t i = 0; i < n; i++)
				s += x[i * K + a] * x[i * K + b];
			A[a * K + b] = (float)(s / (double)n);
		}
	for (size_t m = 0; m < rows; m++)
		for (size_t k = 0; k < K; k++) {
			double s = 0;
			for (size_t j = 0; j < K; j++)
				s += (double)A[k * K + j] * w[m * K + j];
			T[m * K + k] = (float)s;
		}
}

/* sum over inputs of (w . x - wq . x)^2 */
static double direct_loss(const double *x, size_t n, size_t K, const float *w, const float *wq)
{
	double l = 0;
	for (size_t i = 0; i < n; i++) {
		double e = 0;
		for (size_t k = 0; k < K; k++)
			e += ((double)w[k] - (double)wq[k]) * x[i * K + k];
		l += e * e;
	}
	return l;
}

/* Best of the 2^K floor / floor + 1 choices on scale 0.1, by enumeration; its loss. */
static double enumerate(const double *x, size_t n, size_t K, const float *w, int *mask)
{
	double best = INFINITY;
	float wq[8];
	for (int m = 0; m < 1 << K; m++) {
		double l;
		for (size_t k = 0; k < K; k++)
			wq[k] = (floorf(w[k] / 0.1f) + (float)((m >> k) & 1)) * 0.1f;
		l = direct_loss(x, n, K, w, wq);
		if (l < best) {
			best = l;
			*mask = m;
		}
	}
	return best;
}

/* AdaRound's directions as weights (scale 0.1, zero point 0) and their loss. */
static double ada_loss(const double *x, size_t n, size_t K, const float *w, size_t *kept)
{
	float A[64], T[8], S[8], Z[8], wq[8];
	uint8_t up[8];
	oq_adaround_opts o;
	oq_wr_problem p;

	moments_of(x, n, K, w, 1, A, T);
	for (size_t k = 0; k < K; k++) {
		S[k] = 0.1f;
		Z[k] = 0;
	}
	oq_adaround_defaults(&o);
	p = (oq_wr_problem){K, 1, A, T, w, S, Z, -127, 127, NULL, 0, 0, NULL};
	cr_assert_eq(oq_adaround(&p, &o, NULL, up, NULL, NULL, kept), OQ_OK);
	for (size_t k = 0; k < K; k++)
		wq[k] = (floorf(w[k] / 0.1f) + (float)up[k]) * 0.1f;
	return direct_loss(x, n, K, w, wq);
}

static double near_loss(const double *x, size_t n, size_t K, const float *w)
{
	float wq[8];
	for (size_t k = 0; k < K; k++)
		wq[k] = rintf(w[k] / 0.1f) * 0.1f;
	return direct_loss(x, n, K, w, wq);
}

/*
 * One output channel, 3 weights on scale 0.1 (w / s = 0.97, 3.52, -2.24), 4 positive inputs:
 * nearest (1, 4, -2) leaves errors that add up; the best of the 8 up/down choices, found by
 * enumeration, rounds 3.52 down, and AdaRound must reach its loss.
 */
Test(adaround, reaches_the_enumerated_optimum)
{
	const double x[4 * 3] = {0.92, 0.56, 1.08, 1.36, 0.79, 1.49, 0.94, 0.54, 0.90, 1.15, 0.79, 1.33};
	const float w[3] = {0.097f, 0.352f, -0.224f};
	int mask = -1;
	size_t kept = 0;
	double best = enumerate(x, 4, 3, w, &mask), got = ada_loss(x, 4, 3, w, &kept);

	cr_assert_gt(near_loss(x, 4, 3, w), 3 * best, "nearest %g, best %g", near_loss(x, 4, 3, w), best);
	cr_assert_eq((mask >> 1) & 1, 0, "the best rounds 3.52 down (mask %d)", mask);
	cr_assert_float_eq(got, best, 1e-9 * (1 + best), "adaround loss %g, optimum %g (mask %d)", got, best, mask);
	cr_assert_eq(kept, 1);
}

/*
 * 40 pseudo-random 4-weight problems (w in [-0.4, 0.4), inputs in [0.5, 1.5)): AdaRound is a
 * heuristic, so not every one reaches the enumerated optimum; it must never be worse than
 * nearest (the guard), reach the optimum in at least half, and close on average at least 60 %
 * of nearest's gap to it (nearest itself closes none of it).
 */
Test(adaround, random_problems_against_enumeration)
{
	uint32_t r = 12345;
	double gap = 0;
	int exact = 0;

	for (int trial = 0; trial < 40; trial++) {
		float w[4];
		double x[6 * 4], best, got, nl;
		int mask;
		for (int k = 0; k < 4; k++) {
			r = r * 1664525u + 1013904223u;
			w[k] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.8f;
		}
		for (int i = 0; i < 24; i++) {
			r = r * 1664525u + 1013904223u;
			x[i] = 1.0 + ((double)(r >> 8) / 16777216.0 - 0.5);
		}
		best = enumerate(x, 6, 4, w, &mask);
		got = ada_loss(x, 6, 4, w, NULL);
		nl = near_loss(x, 6, 4, w);
		cr_assert_leq(got, nl * (1 + 1e-9), "trial %d: adaround %g, nearest %g", trial, got, nl);
		exact += got <= best * (1 + 1e-9);
		gap += nl > best ? (got - best) / (nl - best) : 0;
	}
	cr_expect_geq(exact, 20, "optimum reached in %d of 40", exact);
	cr_expect_leq(gap / 40, 0.4, "mean remaining gap %.3f", gap / 40);
}

/* A row where nearest is already optimal: the guard keeps nearest's directions. */
Test(adaround, keeps_nearest_when_it_is_best)
{
	const size_t K = 2;
	/* orthogonal unit inputs: the loss is the plain sum of squared weight errors */
	const double x[2 * 2] = {1, 0, 0, 1};
	const float w[2] = {0.12f, -0.33f};
	float A[4], T[2], S[2] = {0.1f, 0.1f}, Z[2] = {0, 0};
	uint8_t up[2];
	oq_adaround_opts o;
	oq_wr_problem p;

	moments_of(x, 2, K, w, 1, A, T);
	oq_adaround_defaults(&o);
	p = (oq_wr_problem){K, 1, A, T, w, S, Z, -127, 127, NULL, 0, 0, NULL};
	cr_assert_eq(oq_adaround(&p, &o, NULL, up, NULL, NULL, NULL), OQ_OK);
	/* 1.2 -> 1 (down), -3.3 -> -3 (up from floor -4) */
	cr_assert_eq(up[0], 0);
	cr_assert_eq(up[1], 1);
}

/*
 * Sequential MSE with three candidate scales for w = (1, 0.75, 0.75) on int4 [-7, 7] and
 * inputs that weigh the first weight 0.01 and the others 1 (A = diag(0.01, 1, 1)):
 *   s = 1/7:  q = (7, 5, 5):  errors (0, -0.0357, -0.0357): loss 0.0025510
 *   s = 1/8:  q = (7, 6, 6):  errors (-0.125, 0, 0):         loss 0.01 * 0.015625 = 0.00015625
 *   s = 0.15: q = (7, 5, 5):  errors (0.05, 0, 0):           loss 0.01 * 0.0025 = 0.000025
 * so candidate 2. The same row split into two scale groups ({0}, {1, 2}) with the same
 * candidates: group 0 keeps 1/7 (1 = 7/7 exactly), group 1 takes 1/8 (0.75 = 6/8 exactly; 0.15
 * ties with it and a tie keeps the earlier candidate): no error left, the loss drops by 0.0025510.
 */
Test(seqmse, picks_the_hand_computed_scale)
{
	const size_t K = 3;
	const double x[3 * 3] = {0.1 * sqrt(3.0), 0, 0, 0, sqrt(3.0), 0, 0, 0, sqrt(3.0)};
	const float w[3] = {1.0f, 0.75f, 0.75f};
	const float cs[2 * 3] = {1.0f / 7, 0.125f, 0.15f, 1.0f / 7, 0.125f, 0.15f};
	const float cz[2 * 3] = {0};
	float A[9], T[3];
	size_t grp1[3] = {0, 0, 0}, grp2[3] = {0, 1, 1}, choice[2];
	double ln, lo;
	size_t kept;
	oq_wr_problem p;

	moments_of(x, 3, K, w, 1, A, T);
	cr_assert_float_eq(A[0], 0.01, 1e-7);
	cr_assert_float_eq(A[4], 1.0, 1e-7);
	p = (oq_wr_problem){K, 1, A, T, w, NULL, NULL, -7, 7, NULL, 0, 0, NULL};
	cr_assert_eq(oq_seqmse(&p, grp1, 1, 3, cs, cz, NULL, choice, &ln, &lo, &kept), OQ_OK);
	cr_assert_eq(choice[0], 2);
	/* the solver's losses drop the constant w A w: differences are the hand numbers */
	cr_assert_float_eq(ln - lo, 0.0025510 - 0.000025, 2e-6);
	cr_assert_eq(kept, 1);

	cr_assert_eq(oq_seqmse(&p, grp2, 2, 3, cs, cz, NULL, choice, &ln, &lo, &kept), OQ_OK);
	cr_assert_eq(choice[0], 0);
	cr_assert_eq(choice[1], 1);
	cr_assert_float_eq(ln - lo, 0.0025510, 2e-6);
}

/*
 * Few positions (N = 5 < K / 2 = 8): the solvers' products through the centred patches X and
 * their mean instead of A = 0.9 Cov + 0.1 diag(Cov) + mu mu^T give the same choices (seq-mse)
 * and the same losses (AdaRound, float rounding apart), computed directly from the inputs.
 */
Test(solvers, patches_match_moments)
{
	const size_t K = 16, N = 5, R = 3;
	double x[5 * 16], mu[16] = {0};
	float X[5 * 16], muf[16], A[16 * 16], T[3 * 16], W[3 * 16], S[3 * 16], Z[3 * 16] = {0}, cs[3 * 6],
		cz[3 * 6] = {0};
	size_t grp[3 * 16], c1[3], c2[3];
	uint8_t u1[3 * 16], u2[3 * 16];
	uint32_t r = 777;
	oq_adaround_opts o;
	oq_wr_problem pa, px;

	for (size_t i = 0; i < N * K; i++) {
		r = r * 1664525u + 1013904223u;
		x[i] = (double)(r >> 8) / 16777216.0 * 2 - 0.5;
		mu[i % K] += x[i] / (double)N;
	}
	for (size_t i = 0; i < N * K; i++)
		X[i] = (float)(x[i] - mu[i % K]);
	for (size_t k = 0; k < K; k++)
		muf[k] = (float)mu[k];
	for (size_t i = 0; i < R * K; i++) {
		r = r * 1664525u + 1013904223u;
		W[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.6f;
		S[i] = 0.05f;
		grp[i] = i / K;
	}
	for (size_t g = 0; g < R; g++)
		for (size_t c = 0; c < 6; c++)
			cs[g * 6 + c] = 0.05f * (1.0f - 0.07f * (float)c);
	moments_of(x, N, K, W, R, A, T);
	/* the covariance (second moment - mu mu^T) shrunk 10 % towards its diagonal, the mean kept */
	for (size_t a = 0; a < K; a++)
		for (size_t b = 0; b < K; b++) {
			double cov = A[a * K + b] - mu[a] * mu[b];
			A[a * K + b] = (float)((a == b ? 1.0 : 0.9) * cov + mu[a] * mu[b]);
		}
	pa = (oq_wr_problem){K, R, A, T, W, S, Z, -127, 127, NULL, 0, 0, NULL};
	px = pa;
	px.X = X;
	px.N = N;
	px.alpha = 0.1f;
	px.mu = muf;
	cr_assert_eq(oq_seqmse(&pa, grp, R, 6, cs, cz, NULL, c1, NULL, NULL, NULL), OQ_OK);
	cr_assert_eq(oq_seqmse(&px, grp, R, 6, cs, cz, NULL, c2, NULL, NULL, NULL), OQ_OK);
	for (size_t g = 0; g < R; g++)
		cr_assert_eq(c1[g], c2[g], "row %zu: candidate %zu vs %zu", g, c1[g], c2[g]);
	oq_adaround_defaults(&o);
	cr_assert_eq(oq_adaround(&pa, &o, NULL, u1, NULL, NULL, NULL), OQ_OK);
	cr_assert_eq(oq_adaround(&px, &o, NULL, u2, NULL, NULL, NULL), OQ_OK);
	for (size_t m = 0; m < R; m++) {
		float q1[16], q2[16];
		for (size_t k = 0; k < K; k++) {
			q1[k] = (floorf(W[m * K + k] / 0.05f) + (float)u1[m * K + k]) * 0.05f;
			q2[k] = (floorf(W[m * K + k] / 0.05f) + (float)u2[m * K + k]) * 0.05f;
		}
		double l1 = direct_loss(x, N, K, W + m * K, q1), l2 = direct_loss(x, N, K, W + m * K, q2);
		cr_assert_float_eq(l1, l2, 0.05 * l1 + 1e-12, "row %zu: %g vs %g", m, l1, l2);
	}
}

/* ------------------------------------------------------------ moments */

/*
 * Moments of a grouped, strided, padded, dilated 2-D conv against a direct loop over the
 * patches: x [1, 4, 5, 6], 2 groups, kernel 2x3, strides (2, 1), dilations (1, 2), pads
 * (1, 0, 0, 2). Paired with a second input: qf = sum x~ x^T.
 */
Test(moments, conv_patches_direct)
{
	oq_wr_geom g;
	oq_rt xq, xf;
	oq_wr_moments mo[2];
	const int64_t dims[4] = {1, 4, 5, 6};
	size_t K = 2 * 2 * 3;

	memset(&g, 0, sizeof g);
	memset(&xq, 0, sizeof xq);
	memset(&xf, 0, sizeof xf);
	g.kind = OQ_WR_CONV;
	g.nsp = 2;
	g.groups = 2;
	g.cin_g = 2;
	g.K = K;
	g.kernel[0] = 2;
	g.kernel[1] = 3;
	g.stride[0] = 2;
	g.stride[1] = 1;
	g.dil[0] = 1;
	g.dil[1] = 2;
	g.pads[0] = 1; /* top */
	g.pads[1] = 0; /* left */
	g.pads[2] = 0; /* bottom */
	g.pads[3] = 2; /* right */
	cr_assert_eq(oq_rt_alloc(&xq, OQ_DT_FLOAT, 4, dims), OQ_OK);
	cr_assert_eq(oq_rt_alloc(&xf, OQ_DT_FLOAT, 4, dims), OQ_OK);
	for (size_t i = 0; i < xq.nelem; i++) {
		((float *)xq.data)[i] = (float)sin(0.7 * (double)i) + 0.25f;
		((float *)xf.data)[i] = (float)cos(0.3 * (double)i);
	}
	for (int gi = 0; gi < 2; gi++)
		cr_assert_eq(oq_wr_moments_init(&mo[gi], K, 1), OQ_OK);
	cr_assert_eq(oq_wr_accumulate(&g, &xq, &xf, mo, NULL), OQ_OK);
	/* output: H (5 + 1 - 2) / 2 + 1 = 3, W (6 + 2 - 5) / 1 + 1 = 4 */
	for (int gi = 0; gi < 2; gi++) {
		double qq[144] = {0}, qf[144] = {0}, sq[12] = {0};
		cr_assert_eq(mo[gi].n, 12);
		for (int oy = 0; oy < 3; oy++)
			for (int ox = 0; ox < 4; ox++) {
				double pq[12], pf[12];
				int k = 0;
				for (int c = 0; c < 2; c++)
					for (int i = 0; i < 2; i++)
						for (int j = 0; j < 3; j++, k++) {
							int y = oy * 2 - 1 + i, xx = ox - 0 + j * 2;
							int in = y >= 0 && y < 5 && xx >= 0 && xx < 6;
							size_t at = ((size_t)(gi * 2 + c) * 5 + (size_t)(in ? y : 0)) * 6 + (size_t)(in ? xx : 0);
							pq[k] = in ? ((float *)xq.data)[at] : 0;
							pf[k] = in ? ((float *)xf.data)[at] : 0;
						}
				for (int a = 0; a < 12; a++) {
					sq[a] += pq[a];
					for (int b = 0; b < 12; b++) {
						qq[a * 12 + b] += pq[a] * pq[b];
						qf[a * 12 + b] += pq[a] * pf[b];
					}
				}
			}
		for (int a = 0; a < 144; a++) {
			cr_assert_float_eq(mo[gi].qq[a], qq[a], 1e-5, "group %d qq[%d]: %g vs %g", gi, a, mo[gi].qq[a], qq[a]);
			cr_assert_float_eq(mo[gi].qf[a], qf[a], 1e-5, "group %d qf[%d]", gi, a);
		}
		for (int a = 0; a < 12; a++)
			cr_assert_float_eq(mo[gi].sq[a], sq[a], 1e-5);
		oq_wr_moments_free(&mo[gi]);
	}
	oq_rt_release(&xq);
	oq_rt_release(&xf);
}

/* ------------------------------------------------------------ the held-out guard */

/*
 * Writes g and n samples x[i] (shape [1, K]) to a fresh folder and returns the model of
 * `onnxq quantize --weight-only --calib` with --weight-rounding `rounding` (and
 * --bias-correction when bias), loaded.
 */
static oq_model *quantize_samples(gen_model *g, const float *x, int n, int64_t K, int rounding, int bias)
{
	const int64_t dims[2] = {1, K};
	char in[256], out[256], cal[256], smp[300];
	oq_pipeline_opts po;
	oq_model *m = NULL;
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_not_null(tmpdir_make("oq_wround"));
	snprintf(in, sizeof in, "%s", tmpdir_at("m.onnx"));
	snprintf(out, sizeof out, "%s", tmpdir_at("q.onnx"));
	snprintf(cal, sizeof cal, "%s", tmpdir_at("calib"));
	cr_assert_eq(mkdir(cal, 0755), 0);
	cr_assert_eq(gen_write(g, in), 0);
	for (int i = 0; i < n; i++) {
		snprintf(smp, sizeof smp, "%s/%03d.npy", cal, i);
		cr_assert_eq(oq_npy_write(smp, OQ_DT_FLOAT, 2, dims, x + i * K, (size_t)K * sizeof(float), &d), OQ_OK,
			     "%s", d.msg);
	}
	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.in_path = in;
	po.out_path = out;
	po.calib.source = cal;
	po.calib.threads = 1;
	po.q.weight_only = 1;
	po.q.weight_rounding = rounding;
	if (bias)
		po.bias_correction = OQ_BC_EMPIRICAL;
	po.quiet = 1;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_model_load(out, &m, &d), OQ_OK, "%s", d.msg);
	tmpdir_remove();
	return m;
}

/* The first live node of m with op `op`. */
static const oq_node *node_of(const oq_model *m, oq_op op)
{
	for (size_t i = 0; i < m->graph->n_nodes; i++)
		if (!m->graph->nodes[i]->dead && m->graph->nodes[i]->op == op)
			return m->graph->nodes[i];
	return NULL;
}

/*
 * y = x W, W = (10.4, 20.4, 127) / 127: per channel int8 scale 1/127, nearest (10, 20, 127),
 * errors d = (-0.4, -0.4, 0) steps. Samples 0-2 (learned from) have x1 = x2, x3 = 0, where
 * rounding one of the first two up (d = (0.6, -0.4) or (-0.4, 0.6)) leaves an output error of
 * 0.2 steps instead of 0.8: AdaRound takes it (with the shrunk covariances the loss is 0.088
 * vs 0.608 steps^2 per unit input). Sample 3 is held out: with x = (1, -1, 0) nearest's error is
 * 0 and the learned one's 1 step, so the layer keeps nearest; with x = (3, 3, 0) the learned
 * rounding is kept (q1 + q2 = 31).
 */
static void guard_case(const float *held, int want_sum)
{
	static const double w[3] = {10.4 / 127, 20.4 / 127, 1.0};
	float x[12] = {1, 1, 0, 2, 2, 0, -1, -1, 0};
	gen_model *g = gen_matmul(1, 3, 1, w);
	oq_model *m;
	const oq_node *dq;
	const int8_t *v;

	memcpy(x + 9, held, 3 * sizeof *x);
	m = quantize_samples(g, x, 4, 3, OQ_WROUND_ADAROUND, 0);
	dq = node_of(m, OQ_OP_DequantizeLinear);
	cr_assert(dq && dq->inputs[0]->init && dq->inputs[0]->init->dtype == OQ_DT_INT8 && dq->inputs[0]->init->nelem == 3,
		  "no int8 weight behind a DequantizeLinear");
	v = dq->inputs[0]->init->data;
	cr_expect_eq(v[2], 127);
	cr_expect_eq(v[0] + v[1], want_sum, "weights %d %d, want a sum of %d", v[0], v[1], want_sum);
	if (want_sum == 30)
		cr_expect(v[0] == 10 && v[1] == 20, "nearest: %d %d", v[0], v[1]);
	oq_model_free(m);
	gen_free(g);
}

Test(guard, held_out_sample_rejects_the_learned_rounding)
{
	static const float held[3] = {1, -1, 0};
	guard_case(held, 30);
}

Test(guard, held_out_sample_confirms_the_learned_rounding)
{
	static const float held[3] = {3, 3, 0};
	guard_case(held, 31);
}

/*
 * Weight-only bias correction at nearest rounding: y = Gemm(x, W, B), W = (127, 10.4) / 127
 * ([2, 1]), B = 0.25; x = (0, x2). Nearest rounds W2 to 10 / 127: the output's mean error is
 * 0.4 / 127 E[x2]. Samples 0-2 have x2 = 1: the correction +0.4/127. Held-out sample 3 with
 * x2 = 1 has the same error (the correction takes it to 0: kept, measured on all samples:
 * B = 0.25 + 0.4 / 127); with x2 = -1 its error is -0.4 / 127 and the correction would double it:
 * B stays 0.25.
 */
static void bias_case(float held_x2, double want_b)
{
	const float x[8] = {0, 1, 0, 1, 0, 1, 0, held_x2};
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	const oq_node *gemm;
	const oq_tensor *b;
	oq_model *m;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 1), GEN_VALS(1.0, 10.4 / 127));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(0.25));
	gen_node(g, mg, "Gemm", "fc", "x,W,B", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1));
	m = quantize_samples(g, x, 4, 2, OQ_WROUND_NEAREST, 1);
	gemm = node_of(m, OQ_OP_Gemm);
	cr_assert(gemm && gemm->n_inputs == 3 && gemm->inputs[2] && (b = gemm->inputs[2]->init), "Gemm lost its bias");
	cr_assert_eq(b->dtype, OQ_DT_FLOAT);
	cr_expect_float_eq(oq_tensor_get(b, 0), want_b, 1e-6, "bias %.7f, want %.7f", oq_tensor_get(b, 0), want_b);
	oq_model_free(m);
	gen_free(g);
}

Test(guard, held_out_sample_confirms_the_bias_correction)
{
	bias_case(1, 0.25 + 0.4 / 127);
}

Test(guard, held_out_sample_rejects_the_bias_correction)
{
	bias_case(-1, 0.25);
}

/*
 * The shifts W8A8 bias correction starts from (oq_wround_learn_shifts): y = Gemm(x, W, B,
 * beta 2), W = (127, 10.4) / 127 ([2, 1]): per channel int8 scale 1 / 127, nearest rounds W2
 * to 10 / 127, so with x = (0, 1) on every sample the quantized weights move the output by
 * (10 - 10.4) / 127 = -0.4 / 127, whatever beta: the shift is given in output units
 * (quantized - float), the held-out sample agreeing.
 */
Test(shifts, weight_shift_in_output_units)
{
	const int64_t dims[2] = {1, 2};
	const float x[2] = {0, 1};
	char in[256], cal[256], smp[300];
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	oq_wlearned_set set;
	oq_biascorr_shifts sh;
	oq_calib_opts co;
	oq_model *m = NULL;
	oq_opts q;
	oq_diag d;

	oq_diag_init(&d);
	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 1), GEN_VALS(1.0, 10.4 / 127));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(0.25));
	n = gen_node(g, mg, "Gemm", "fc", "x,W,B", "y");
	gen_attr_float(g, n, "beta", 2.0f);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1));
	cr_assert_not_null(tmpdir_make("oq_wshift"));
	snprintf(in, sizeof in, "%s", tmpdir_at("m.onnx"));
	snprintf(cal, sizeof cal, "%s", tmpdir_at("calib"));
	cr_assert_eq(mkdir(cal, 0755), 0);
	cr_assert_eq(gen_write(g, in), 0);
	for (int i = 0; i < 4; i++) {
		snprintf(smp, sizeof smp, "%s/%03d.npy", cal, i);
		cr_assert_eq(oq_npy_write(smp, OQ_DT_FLOAT, 2, dims, x, sizeof x, &d), OQ_OK, "%s", d.msg);
	}
	cr_assert_eq(oq_model_load(in, &m, &d), OQ_OK, "%s", d.msg);
	oq_opts_init(&q);
	memset(&co, 0, sizeof co);
	co.source = cal;
	co.threads = 1;
	cr_assert_eq(oq_wround_learn_shifts(m, &q, &co, 1, &set, &sh, NULL, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(sh.n, 1, "%zu layers corrected, want 1", sh.n);
	cr_expect_str_eq(sh.v[0].layer, "y");
	cr_assert_eq(sh.v[0].M, 1);
	cr_expect_float_eq(sh.v[0].shift[0], -0.4 / 127, 1e-7, "shift %.9f, want %.9f", sh.v[0].shift[0], -0.4 / 127);
	oq_biascorr_shifts_free(&sh);
	oq_wlearned_free(&set);
	oq_model_free(m);
	tmpdir_remove();
	gen_free(g);
}

/* ------------------------------------------------------------ the model-level guard of --cle */

/*
 * x [1, 2, 4, 4] -> Conv1 (1x1, W1 = diag(10, 0.1), bias b1) -> Conv2 (1x1, W2 = (w2a, w2b),
 * no bias) -> y, quantized W8A8 with --prefer accuracy (every Conv gets its Q/DQ), bias
 * correction off, 8 samples with x in [-1, 1]; returns Conv2's int8 weight (2 values) and its
 * scale, quantized with --cle. CLE's scales for the one pair are
 * s_i = sqrt(r1_i / r2_i), r1 = (10, 0.1), r2 = (|w2a|, |w2b|) (cle.c).
 */
static void cle_case(double b1, double w2a, double w2b, int8_t q[2], float *scale)
{
	const int64_t dims[4] = {1, 2, 4, 4};
	char in[256], out[256], cal[256], smp[300];
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;
	oq_pipeline_opts po;
	const oq_node *dq = NULL;
	oq_model *m = NULL;
	oq_diag d;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 4, 4));
	gen_init(g, mg, "W1", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(10, 0, 0, 0.1));
	gen_init(g, mg, "B1", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0, b1));
	gen_init(g, mg, "W2", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 1), GEN_VALS(w2a, w2b));
	gen_node(g, mg, "Conv", "c1", "x,W1,B1", "a");
	gen_node(g, mg, "Conv", "c2", "a,W2", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 4, 4));
	oq_diag_init(&d);
	cr_assert_not_null(tmpdir_make("oq_cleguard"));
	snprintf(in, sizeof in, "%s", tmpdir_at("m.onnx"));
	snprintf(out, sizeof out, "%s", tmpdir_at("q.onnx"));
	snprintf(cal, sizeof cal, "%s", tmpdir_at("calib"));
	cr_assert_eq(mkdir(cal, 0755), 0);
	cr_assert_eq(gen_write(g, in), 0);
	for (int s = 0; s < 8; s++) {
		float x[32];
		for (int i = 0; i < 32; i++)
			x[i] = (float)sin(1.3 * i + 2.1 * s);
		snprintf(smp, sizeof smp, "%s/%03d.npy", cal, s);
		cr_assert_eq(oq_npy_write(smp, OQ_DT_FLOAT, 4, dims, x, sizeof x, &d), OQ_OK, "%s", d.msg);
	}
	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.in_path = in;
	po.out_path = out;
	po.calib.source = cal;
	po.calib.threads = 1;
	po.q.cle = 1;
	po.q.prefer = OQ_PREFER_ACCURACY;
	po.bias_correction = OQ_BC_OFF;
	po.quiet = 1;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_model_load(out, &m, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < m->graph->n_nodes; i++) {
		const oq_node *n = m->graph->nodes[i];
		if (!n->dead && n->op == OQ_OP_Conv && !strcmp(n->name, "c2"))
			dq = n->inputs[1]->producer;
	}
	cr_assert(dq && dq->op == OQ_OP_DequantizeLinear && dq->inputs[0]->init && dq->inputs[0]->init->nelem == 2 &&
			  dq->inputs[0]->init->dtype == OQ_DT_INT8,
		  "c2's weight is not an int8 DequantizeLinear");
	memcpy(q, dq->inputs[0]->init->data, 2);
	*scale = (float)oq_tensor_get(dq->inputs[1]->init, 0);
	oq_model_free(m);
	tmpdir_remove();
	gen_free(g);
}

/*
 * CLE helps: b1 = 0, W2 = (0.01, 10). Channel b of Conv1's output spans only +-0.1 under a
 * per-tensor grid sized by channel a's +-10 (step 20/255, so b is lost), and W2's 0.01 rounds to
 * 0 under the channel's step 10/127. With s = (sqrt(10 / 0.01), sqrt(0.1 / 10)) = (31.62, 0.1)
 * the activation spans +-0.316 and +-1 and W2 becomes (0.3162, 1): scale 1/127, q = (40, 127).
 * The guard keeps it.
 */
Test(guard, keeps_cle_where_it_helps)
{
	int8_t q[2];
	float s;

	cle_case(0, 0.01, 10, q, &s);
	cr_expect_float_eq(s, 1.0 / 127, 1e-6, "scale %g", s);
	cr_expect(q[0] == 40 && q[1] == 127, "q = (%d, %d), want (40, 127)", q[0], q[1]);
}

/*
 * CLE hurts: b1 = (0, 10), W2 = (1, 1): Conv1's channels span [-10, 10] and [9.9, 10.1], one
 * per-tensor grid serves both well, and W2 is exact at (127, 127) / 127. CLE's s = (3.162,
 * 0.3162) moves channel b to [31.3, 31.9] (the grid's step grows from 20.1/255 to 35.1/255 in
 * units of a's, times 3.162 back in y) and W2 to (3.162, 0.3162), whose 0.3162 rounds to 13 steps
 * of 3.162/127 (error 0.0068 times an activation of 31.6). The guard writes the model without
 * CLE: Conv2's weight (127, 127), scale 1/127.
 */
Test(guard, rejects_cle_where_it_hurts)
{
	int8_t q[2];
	float s;

	cle_case(10, 1, 1, q, &s);
	cr_expect_float_eq(s, 1.0 / 127, 1e-6, "scale %g", s);
	cr_expect(q[0] == 127 && q[1] == 127, "q = (%d, %d), want (127, 127): CLE was kept", q[0], q[1]);
}
