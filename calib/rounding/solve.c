/*
 * solve.c - the per-layer solvers of learned rounding: AdaRound and sequential MSE on the
 * moments A, T of a layer's inputs (see rounding.h for the loss).
 *
 * Rows are cut into chunks of output channels (chunk_rows); a chunk is one pool item and
 * every product in it is one cblas_sgemm of that chunk's fixed shape, so the result does not
 * depend on how many threads run the chunks. Losses are summed in double per row, rows in
 * order.
 */
#include "calib/rounding/rounding.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/threadpool.h"
#include "src/quant/qparams.h"

/* Output channels per pool item: more for long rows, so that one pass over A serves more rows
 * (A of K = 2880 is 33 MB). A function of K only. */
static size_t chunk_rows(size_t K)
{
	return K >= 1024 ? 32 : K >= 256 ? 16 : 8;
}

void oq_adaround_defaults(oq_adaround_opts *o)
{
	o->iters = 200;
	o->lr = 0.01f;
	o->lambda = 0.01f;
	o->beta_hi = 20;
	o->beta_lo = 2;
	o->warm = 0.2f;
}

/*
 * e^x and log(x) for the AdaRound loop (which runs them once per weight per step): plain float
 * arithmetic (the same bits on every machine, and loops the compiler can vectorize), errors
 * of a few 1e-6 -- ample for a descent direction. fexp: 2^n (exponent bits) times a degree-7
 * Taylor polynomial of 2^f, f = t - rint(t) in [-1/2, 1/2], t = x log2(e), x clamped to
 * [-87, 88]. flog (x > 0 normal): e ln 2 + log(m), m in [1, 2) from the bits, log(m) =
 * 2 atanh(z), z = (m - 1) / (m + 1) <= 1/3, to z^11.
 */
static inline float fexp(float x)
{
	float t, n, f, p, two;
	int32_t e;
	uint32_t b;

	x = x < -87.0f ? -87.0f : x;
	x = x > 88.0f ? 88.0f : x;
	t = x * 1.44269504f;
	n = (t + 12582912.0f) - 12582912.0f; /* rint for |t| < 2^22: 1.5 * 2^23 drops the fraction */
	f = (t - n) * 0.693147181f;
	p = 1 + f * (1 + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720 + f * (1.0f / 5040)))))));
	e = (int32_t)n + 127;
	b = (uint32_t)e << 23;
	memcpy(&two, &b, 4);
	return p * two;
}

static inline float flog(float x)
{
	uint32_t b;
	float m, z, z2;
	int32_t e;

	memcpy(&b, &x, 4);
	e = (int32_t)(b >> 23) - 127;
	b = (b & 0x007fffffu) | 0x3f800000u;
	memcpy(&m, &b, 4);
	z = (m - 1) / (m + 1);
	z2 = z * z;
	return (float)e * 0.693147181f + 2 * z * (1 + z2 * (1.0f / 3 + z2 * (1.0f / 5 + z2 * (1.0f / 7 + z2 * (1.0f / 9)))));
}

/* Dequantized w on grid (s, z) at nearest rounding: what DequantizeLinear(QuantizeLinear(w)) gives. */
static float near_dq(float w, float s, float z, float qmin, float qmax)
{
	float q = rintf(w / s) + z;
	q = q < qmin ? qmin : q > qmax ? qmax : q;
	return (q - z) * s;
}

/* Dequantized w rounded down (up = 0) or up (up = 1) on grid (s, z). */
static float dir_dq(float w, float s, float z, float qmin, float qmax, int up)
{
	float q = floorf(w / s) + (float)up + z;
	q = q < qmin ? qmin : q > qmax ? qmax : q;
	return (q - z) * s;
}

/*
 * P = Wq A for nr rows; through X (N x K) when the problem has it: (1 - alpha) (Wq X^T) X / N
 * + alpha Wq diag(X^T X / N) + (Wq mu) mu^T (diag(X^T X / N) = diag(A) - mu^2); U: nr x N
 * scratch.
 */
static void times_a(const oq_wr_problem *p, size_t nr, const float *Wq, float *U, float *P)
{
	int K = (int)p->K, N = (int)p->N;
	if (!p->X) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, K, K, 1.0f, Wq, K, p->A, K, 0.0f, P, K);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, N, K, 1.0f, Wq, K, p->X, K, 0.0f, U, N);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, K, N, (1 - p->alpha) / (float)p->N, U, N, p->X,
		    K, 0.0f, P, K);
	for (size_t m = 0; m < nr; m++) {
		float wm = 0;
		for (size_t k = 0; p->mu && k < p->K; k++)
			wm += Wq[m * p->K + k] * p->mu[k];
		for (size_t k = 0; k < p->K; k++) {
			float mk = p->mu ? p->mu[k] : 0;
			P[m * p->K + k] += p->alpha * (p->A[k * p->K + k] - mk * mk) * Wq[m * p->K + k] + wm * mk;
		}
	}
}

/* Per row m of a chunk: loss[m] = Wq[m] . (Wq[m] A - 2 T[m]); P: rows x K scratch. */
static void row_losses(const oq_wr_problem *p, size_t r0, size_t nr, const float *Wq, float *P, double *loss)
{
	size_t K = p->K;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)K, (int)K, 1.0f, Wq, (int)K, p->A,
		    (int)K, 0.0f, P, (int)K);
	for (size_t m = 0; m < nr; m++) {
		double l = 0;
		const float *t = p->T + (r0 + m) * K;
		for (size_t k = 0; k < K; k++)
			l += (double)Wq[m * K + k] * ((double)P[m * K + k] - 2.0 * (double)t[k]);
		loss[m] = l;
	}
}

double oq_wr_loss(const oq_wr_problem *p, const float *Wq)
{
	size_t K = p->K;
	float *P = oq_calloc(K + 1, sizeof *P);
	double total = 0, l;

	if (!P)
		return NAN;
	for (size_t m = 0; m < p->rows; m++) {
		row_losses(p, m, 1, Wq + m * K, P, &l);
		total += l;
	}
	free(P);
	return total;
}

/* ------------------------------------------------------------ AdaRound */

/* Adam's first and second moment decay, and its epsilon. */
#define ADAM_B1 0.9f
#define ADAM_B2 0.999f
#define ADAM_EPS 1e-8f

/*
 * The loops below run once per weight per step: branch-free float arithmetic on arrays, so
 * that they vectorize (calib/rounding is built with -O3 -fno-math-errno: the same bits, IEEE
 * operations one element at a time).
 */

/* sig = sigmoid(V); Wq = s * (clip(fl + h(V) + z, qmin, qmax) - z); free_ = 1 where unclipped. */
static void soft_weights(const float *restrict V, const float *restrict fl, const float *restrict S,
			 const float *restrict Z, float qmin, float qmax, size_t n, float *restrict sig,
			 float *restrict free_, float *restrict Wq)
{
	const float zg = OQ_ADAROUND_ZETA - OQ_ADAROUND_GAMMA;
	for (size_t e = 0; e < n; e++) {
		float s = 1 / (1 + fexp(-V[e])), h = s * zg + OQ_ADAROUND_GAMMA, q;
		h = h < 0 ? 0 : h;
		h = h > 1 ? 1 : h;
		sig[e] = s;
		q = fl[e] + h + Z[e];
		free_[e] = (float)((q >= qmin) & (q <= qmax));
		q = q < qmin ? qmin : q;
		q = q > qmax ? qmax : q;
		Wq[e] = (q - Z[e]) * S[e];
	}
}

/* G += d/dh lambda (1 - |2h-1|^beta) = -2 lambda beta |u|^(beta-1) sign(u), u = 2h - 1. */
static void reg_grad(const float *restrict sig, size_t n, float lam, float beta, float *restrict G)
{
	const float zg = OQ_ADAROUND_ZETA - OQ_ADAROUND_GAMMA;
	for (size_t e = 0; e < n; e++) {
		float h = sig[e] * zg + OQ_ADAROUND_GAMMA, u, a, pw;
		h = h < 0 ? 0 : h;
		h = h > 1 ? 1 : h;
		u = 2 * h - 1;
		a = fabsf(u);
		pw = fexp((beta - 1) * flog(a > 1e-30f ? a : 1e-30f));
		G[e] -= 2 * lam * beta * pw * (u > 0 ? 1.0f : -1.0f);
	}
}

/* One Adam step on V from dL/dh in G (dh/dV = (zeta - gamma) s (1 - s) inside (0, 1), else 0);
 * c1, c2: the bias corrections 1 / (1 - b^t). */
static void adam(float *restrict V, float *restrict m1, float *restrict m2, const float *restrict G,
		 const float *restrict sig, size_t n, float lr, float c1, float c2)
{
	const float zg = OQ_ADAROUND_ZETA - OQ_ADAROUND_GAMMA;
	for (size_t e = 0; e < n; e++) {
		float s = sig[e], h = s * zg + OQ_ADAROUND_GAMMA;
		float dv = (float)((h > 0) & (h < 1)) * (G[e] * zg * s * (1 - s));
		m1[e] = ADAM_B1 * m1[e] + (1 - ADAM_B1) * dv;
		m2[e] = ADAM_B2 * m2[e] + (1 - ADAM_B2) * dv * dv;
		V[e] -= lr * (m1[e] * c1) / (sqrtf(m2[e] * c2) + ADAM_EPS);
	}
}

/* A solver's per-row results, summed in row order once every chunk is done. */
typedef struct rows_out {
	double *ln, *lo;     /* per row: nearest's and the result's loss */
	uint8_t *kept;       /* per row: the learned result kept */
	int failed;          /* an allocation failed (only ever set to 1) */
} rows_out;

typedef struct ada_job {
	rows_out r;
	const oq_wr_problem *p;
	const oq_adaround_opts *o;
	uint8_t *up;
} ada_job;

static void ada_chunk(ada_job *j, size_t r0, size_t nr)
{
	const oq_wr_problem *p = j->p;
	const oq_adaround_opts *o = j->o;
	const float b1 = ADAM_B1, b2 = ADAM_B2, zg = OQ_ADAROUND_ZETA - OQ_ADAROUND_GAMMA;
	size_t K = p->K, n = nr * K;
	/* the steps of this problem: o->iters, fewer (not below OQ_ADAROUND_MIN_ITERS) where one
	 * step's products would make the layer cost more than OQ_ADAROUND_WORK operations */
	double step = 2.0 * (double)p->rows * (double)K * (p->X ? 2.0 * (double)p->N : (double)K);
	int iters = step * o->iters > OQ_ADAROUND_WORK ? (int)(OQ_ADAROUND_WORK / step) : o->iters;
	size_t warm;
	if (iters < OQ_ADAROUND_MIN_ITERS)
		iters = o->iters < OQ_ADAROUND_MIN_ITERS ? o->iters : OQ_ADAROUND_MIN_ITERS;
	warm = (size_t)((float)iters * o->warm);
	const float *W = p->W + r0 * K, *S = p->S + r0 * K, *Z = p->Z + r0 * K, *T = p->T + r0 * K;
	float *V = malloc(n * sizeof *V), *m1 = calloc(n, sizeof *m1), *m2 = calloc(n, sizeof *m2);
	float *fl = malloc(n * sizeof *fl), *Wq = calloc(n, sizeof *Wq), *G = calloc(n, sizeof *G);
	float *sig = malloc(n * sizeof *sig);
	float *free_ = malloc(n * sizeof *free_);
	uint8_t *clip = malloc(n), *near = malloc(n);
	double *lnear = malloc(nr * sizeof *lnear), *llearn = malloc(nr * sizeof *llearn);
	float *U = p->X ? malloc(nr * p->N * sizeof *U + 1) : NULL;
	float p1 = 1, p2 = 1, qmin = p->qmin, qmax = p->qmax;

	if (!V || !m1 || !m2 || !fl || !Wq || !G || !sig || !free_ || !clip || !near || !lnear || !llearn ||
	    (p->X && !U)) {
		j->r.failed = 1;
		goto out;
	}
	for (size_t e = 0; e < n; e++) {
		float x = W[e] / S[e], f = floorf(x), h = x - f, q;
		fl[e] = f;
		near[e] = (uint8_t)(rintf(x) - f);
		/* h(V) = frac: sigmoid(V) = (h - gamma) / (zeta - gamma), kept off the flat ends */
		q = (h - OQ_ADAROUND_GAMMA) / zg;
		q = q < 1e-4f ? 1e-4f : q > 1 - 1e-4f ? 1 - 1e-4f : q;
		V[e] = logf(q / (1 - q));
	}
	for (int it = 0; it < iters; it++) {
		float beta = 0, lam = 0, c1, c2;
		if ((size_t)it >= warm) {
			float rel = (float)((size_t)it - warm) / (float)((size_t)iters - warm);
			beta = o->beta_lo + (o->beta_hi - o->beta_lo) * (1 - rel);
			lam = o->lambda;
		}
		soft_weights(V, fl, S, Z, qmin, qmax, n, sig, free_, Wq);
		/* G = Wq A - T: half the gradient of the reconstruction loss */
		times_a(p, nr, Wq, U, G);
		p1 *= b1;
		p2 *= b2;
		c1 = 1 / (1 - p1);
		c2 = 1 / (1 - p2);
		/* dL/dh: the reconstruction's where the grid does not clip, 0 where it does */
		for (size_t e = 0; e < n; e++)
			G[e] = free_[e] * 2 * (G[e] - T[e]) * S[e];
		if (lam > 0)
			reg_grad(sig, n, lam, beta, G);
		adam(V, m1, m2, G, sig, n, o->lr, c1, c2);
	}
	/* discrete polish: flip single weights while a flip lowers the row's loss */
	for (size_t m = 0; m < nr; m++) {
		float *g = G + m * K, *wq = Wq + m * K;
		const float *wm = W + m * K, *sm = S + m * K, *zm = Z + m * K;
		uint8_t *u = clip + m * K; /* the directions, as bytes */
		for (size_t k = 0; k < K; k++) {
			u[k] = V[m * K + k] >= 0;
			wq[k] = dir_dq(wm[k], sm[k], zm[k], p->qmin, p->qmax, u[k]);
		}
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)K, (int)K, 1.0f, p->A, (int)K, wq, 1, 0.0f, g, 1);
		for (size_t k = 0; k < K; k++)
			g[k] -= T[m * K + k];
		for (int sweep = 0, any = 1; sweep < OQ_ADAROUND_POLISH && any; sweep++) {
			any = 0;
			for (size_t k = 0; k < K; k++) {
				float nw = dir_dq(wm[k], sm[k], zm[k], p->qmin, p->qmax, !u[k]), dw = nw - wq[k];
				double dl = 2.0 * (double)dw * (double)g[k] + (double)dw * (double)dw * (double)p->A[k * K + k];
				if (!(dl < 0))
					continue;
				u[k] = !u[k];
				wq[k] = nw;
				for (size_t a = 0; a < K; a++)
					g[a] += p->A[a * K + k] * dw;
				any = 1;
			}
		}
		for (size_t k = 0; k < K; k++)
			V[m * K + k] = u[k] ? 1.0f : -1.0f;
	}
	/* the learned directions against nearest's, row by row (G is scratch) */
	for (size_t e = 0; e < n; e++)
		Wq[e] = dir_dq(W[e], S[e], Z[e], p->qmin, p->qmax, near[e]);
	row_losses(p, r0, nr, Wq, G, lnear);
	for (size_t e = 0; e < n; e++)
		Wq[e] = dir_dq(W[e], S[e], Z[e], p->qmin, p->qmax, V[e] >= 0);
	row_losses(p, r0, nr, Wq, G, llearn);
	for (size_t m = 0; m < nr; m++) {
		int keep = llearn[m] < lnear[m];
		for (size_t k = 0; k < K; k++)
			j->up[(r0 + m) * K + k] = keep ? V[m * K + k] >= 0 : near[m * K + k];
		j->r.ln[r0 + m] = lnear[m];
		j->r.lo[r0 + m] = keep ? llearn[m] : lnear[m];
		j->r.kept[r0 + m] = (uint8_t)keep;
	}
out:
	free(V);
	free(m1);
	free(m2);
	free(fl);
	free(Wq);
	free(G);
	free(sig);
	free(free_);
	free(clip);
	free(near);
	free(lnear);
	free(llearn);
	free(U);
}

static void ada_range(void *ctx, size_t b, size_t e)
{
	ada_job *j = ctx;
	for (size_t c = b; c < e; c++) {
		size_t ch = chunk_rows(j->p->K), r0 = c * ch, nr = j->p->rows - r0 < ch ? j->p->rows - r0 : ch;
		ada_chunk(j, r0, nr);
	}
}

/* Sums the per-row results in row order. */
static void totals(const double *ln, const double *lo, const uint8_t *kept, size_t rows, double *l_near,
		   double *l_out, size_t *n_kept)
{
	double a = 0, b = 0;
	size_t k = 0;
	for (size_t m = 0; m < rows; m++) {
		a += ln[m];
		b += lo[m];
		k += kept[m];
	}
	if (l_near)
		*l_near = a;
	if (l_out)
		*l_out = b;
	if (n_kept)
		*n_kept = k;
}

/*
 * Runs fn over p's row chunks (one pool item each; job starts with its rows_out r) and sums the
 * per-row results into *l_near, *l_out, *n_kept (each may be NULL).
 */
static int run_rows(const oq_wr_problem *p, oq_pool *pool, oq_range_fn fn, void *job, rows_out *r, double *l_near,
		    double *l_out, size_t *n_kept)
{
	size_t nchunks = (p->rows + chunk_rows(p->K) - 1) / chunk_rows(p->K);
	int rc = OQ_ENOMEM;

	r->ln = oq_calloc(p->rows + 1, sizeof *r->ln);
	r->lo = oq_calloc(p->rows + 1, sizeof *r->lo);
	r->kept = oq_calloc(p->rows + 1, 1);
	if (!r->ln || !r->lo || !r->kept)
		goto out;
	if (pool)
		oq_pool_run(pool, nchunks, 1, fn, job);
	else
		fn(job, 0, nchunks);
	if (r->failed)
		goto out;
	totals(r->ln, r->lo, r->kept, p->rows, l_near, l_out, n_kept);
	rc = OQ_OK;
out:
	free(r->ln);
	free(r->lo);
	free(r->kept);
	memset(r, 0, sizeof *r);
	return rc;
}

int oq_adaround(const oq_wr_problem *p, const oq_adaround_opts *o, oq_pool *pool, uint8_t *up, double *l_near,
		double *l_out, size_t *n_kept)
{
	ada_job j = {{NULL, NULL, NULL, 0}, p, o, up};
	return run_rows(p, pool, ada_range, &j, &j.r, l_near, l_out, n_kept);
}

/* ------------------------------------------------------------ sequential MSE */

typedef struct seq_job {
	rows_out r;
	const oq_wr_problem *p;
	const size_t *grp;
	size_t ngroups;
	size_t ncand;
	const float *cs, *cz;
	size_t *choice;
} seq_job;

/* One row whose elements form one group: all candidates at once, Wc [ncand x K] times A. */
static void seq_row_whole(seq_job *j, size_t m, float *Wc, float *P, double *lc)
{
	const oq_wr_problem *p = j->p;
	size_t K = p->K, g = j->grp[m * K], best = 0;
	const float *w = p->W + m * K;

	for (size_t c = 0; c < j->ncand; c++)
		for (size_t k = 0; k < K; k++)
			Wc[c * K + k] = near_dq(w[k], j->cs[g * j->ncand + c], j->cz[g * j->ncand + c], p->qmin, p->qmax);
	if (p->X) /* loss = (1 - alpha) |X w~|^2 / N + alpha w~ diag(X^T X / N) w~ + (w~ . mu)^2 - 2 w~ . t */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->ncand, (int)p->N, (int)K, 1.0f, Wc, (int)K,
			    p->X, (int)K, 0.0f, P, (int)p->N);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->ncand, (int)K, (int)K, 1.0f, Wc, (int)K,
			    p->A, (int)K, 0.0f, P, (int)K);
	for (size_t c = 0; c < j->ncand; c++) {
		double l = 0;
		if (p->X) {
			double q = 0;
			for (size_t i = 0; i < p->N; i++)
				q += (double)P[c * p->N + i] * (double)P[c * p->N + i];
			double wm = 0;
			l = (1 - (double)p->alpha) * q / (double)p->N;
			for (size_t k = 0; k < K; k++) {
				double mk = p->mu ? (double)p->mu[k] : 0;
				wm += (double)Wc[c * K + k] * mk;
				l += (double)Wc[c * K + k] * ((double)p->alpha * ((double)p->A[k * K + k] - mk * mk) *
								(double)Wc[c * K + k] - 2.0 * (double)p->T[m * K + k]);
			}
			l += wm * wm;
		} else {
			for (size_t k = 0; k < K; k++)
				l += (double)Wc[c * K + k] * ((double)P[c * K + k] - 2.0 * (double)p->T[m * K + k]);
		}
		lc[c] = l;
		if (l < lc[best])
			best = c;
	}
	j->choice[g] = best;
	j->r.ln[m] = lc[0];
	j->r.lo[m] = lc[best];
	j->r.kept[m] = best != 0;
}

/*
 * A row of several groups (blocks): coordinate search, two sweeps over its groups in the
 * order of their first elements. wq, gv, dv: K floats; idx: K entries; seen: ngroups flags
 * (all 0 on entry and on return).
 */
static void seq_row_groups(seq_job *j, size_t m, float *wq, float *gv, float *dv, size_t *idx, uint8_t *seen)
{
	const oq_wr_problem *p = j->p;
	size_t K = p->K, nc = j->ncand;
	const float *w = p->W + m * K, *t = p->T + m * K;
	const size_t *gr = j->grp + m * K;
	double l0 = 0, l = 0;

	/* start at candidate 0 (nearest) for every group of the row */
	for (size_t k = 0; k < K; k++) {
		j->choice[gr[k]] = 0;
		wq[k] = near_dq(w[k], j->cs[gr[k] * nc], j->cz[gr[k] * nc], p->qmin, p->qmax);
	}
	/* gv = A wq - t; loss = wq . (A wq - 2 t) = wq . (gv - t) */
	cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)K, (int)K, 1.0f, p->A, (int)K, wq, 1, 0.0f, gv, 1);
	for (size_t k = 0; k < K; k++) {
		gv[k] -= t[k];
		l0 += (double)wq[k] * ((double)gv[k] - (double)t[k]);
	}
	for (int sweep = 0; sweep < 2; sweep++) {
		for (size_t k0 = 0; k0 < K; k0++) {
			size_t g = gr[k0], ns = 0, cur, best;
			double bestd = 0;
			if (seen[g])
				continue;
			seen[g] = 1;
			cur = best = j->choice[g];
			for (size_t k = k0; k < K; k++)
				if (gr[k] == g)
					idx[ns++] = k;
			/* loss change of moving the group by d: 2 d . gv + d^T A d */
			for (size_t c = 0; c < nc; c++) {
				double dl = 0;
				if (c == cur)
					continue;
				for (size_t a = 0; a < ns; a++)
					dv[a] = near_dq(w[idx[a]], j->cs[g * nc + c], j->cz[g * nc + c], p->qmin, p->qmax) -
						wq[idx[a]];
				for (size_t a = 0; a < ns; a++) {
					double quad = 0;
					for (size_t b = 0; b < ns; b++)
						quad += (double)p->A[idx[a] * K + idx[b]] * (double)dv[b];
					dl += (double)dv[a] * (2 * (double)gv[idx[a]] + quad);
				}
				if (dl < bestd) {
					bestd = dl;
					best = c;
				}
			}
			if (best == cur)
				continue;
			for (size_t a = 0; a < ns; a++) {
				float nw = near_dq(w[idx[a]], j->cs[g * nc + best], j->cz[g * nc + best], p->qmin, p->qmax);
				float d = nw - wq[idx[a]];
				wq[idx[a]] = nw;
				for (size_t k = 0; k < K; k++)
					gv[k] += p->A[k * K + idx[a]] * d;
			}
			j->choice[g] = best;
		}
		for (size_t k = 0; k < K; k++)
			seen[gr[k]] = 0;
	}
	for (size_t k = 0; k < K; k++)
		l += (double)wq[k] * ((double)gv[k] - (double)t[k]);
	if (!(l < l0)) { /* no gain (or float drift): nearest */
		for (size_t k = 0; k < K; k++)
			j->choice[gr[k]] = 0;
		l = l0;
	}
	j->r.ln[m] = l0;
	j->r.lo[m] = l;
	j->r.kept[m] = l < l0;
}

static void seq_range(void *ctx, size_t b, size_t e)
{
	seq_job *j = ctx;
	const oq_wr_problem *p = j->p;
	size_t K = p->K, nc = j->ncand;
	float *Wc = malloc((nc > 3 ? nc : 3) * K * sizeof *Wc), *P = malloc((nc > 3 ? nc : 3) * K * sizeof *P);
	double *lc = malloc(nc * sizeof *lc);
	size_t *idx = malloc(K * sizeof *idx);
	uint8_t *seen = calloc(j->ngroups + 1, 1);

	if (!Wc || !P || !lc || !idx || !seen) {
		j->r.failed = 1;
		goto out;
	}
	for (size_t c = b; c < e; c++) {
		size_t ch = chunk_rows(K), r0 = c * ch, r1 = r0 + ch < p->rows ? r0 + ch : p->rows;
		for (size_t m = r0; m < r1; m++) {
			int whole = 1;
			for (size_t k = 1; k < K && whole; k++)
				whole = j->grp[m * K + k] == j->grp[m * K];
			if (whole)
				seq_row_whole(j, m, Wc, P, lc);
			else
				seq_row_groups(j, m, Wc, Wc + K, Wc + 2 * K, idx, seen);
		}
	}
out:
	free(Wc);
	free(P);
	free(lc);
	free(idx);
	free(seen);
}

int oq_seqmse(const oq_wr_problem *p, const size_t *grp, size_t ngroups, size_t ncand, const float *cs,
	      const float *cz, oq_pool *pool, size_t *choice, double *l_near, double *l_out, size_t *n_kept)
{
	seq_job j = {{NULL, NULL, NULL, 0}, p, grp, ngroups, ncand, cs, cz, choice};

	for (size_t g = 0; g < ngroups; g++)
		choice[g] = 0;
	if (ncand == 0)
		return OQ_EINVAL;
	return run_rows(p, pool, seq_range, &j, &j.r, l_near, l_out, n_kept);
}
