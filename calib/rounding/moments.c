/*
 * moments.c - the input moments of a layer (see rounding.h): for every output position p of a
 * sample, the patch x~_p the layer reads in the quantized-so-far model and x_p in the float
 * one, summed into
 *
 *   qq += x~_p x~_p^T,  qf += x~_p x_p^T,  sq += x~_p,  sf += x_p,  sa += |x~_p|,  n += 1
 *
 * per conv group (K = C/group * prod(kernel) values per patch, in the weight's (c, ky, kx)
 * order; MatMul/Gemm: the K values of one row of the input's last axis, or one column for
 * Gemm transA). Without a separate float input (unpaired) only qq and sq are kept, the others
 * being the same.
 *
 * Budget: at most OQ_WR_POSITIONS positions of a sample per layer, evenly spread (position
 * floor(j P / cap) of P), and at most OQ_WR_PATCH_FLOATS patch values at once; a sample's
 * products are summed in float32 by cblas_sgemm over its patches, then added to the double
 * accumulators (2 K^2 + 2 K doubles per group). Layers with few positions (fully connected
 * ones: one per sample) also keep their patches while there are at most K / 2 of them (at most
 * K^2 floats): their solvers then work on the patches, N K per product instead of K^2.
 *
 * Parallel work splits a layer over its groups, or a single group's products into fixed tiles
 * of OQ_WR_TILE rows of the K x K result, each one sgemm: the same bits for any thread count.
 */
#include "calib/rounding/moments.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/threadpool.h"

#define OQ_WR_TILE 64

void oq_wr_moments_free(oq_wr_moments *mo)
{
	free(mo->rq);
	free(mo->rf);
	free(mo->qq);
	free(mo->qf);
	free(mo->sq);
	free(mo->sf);
	free(mo->sa);
	memset(mo, 0, sizeof *mo);
}

int oq_wr_moments_init(oq_wr_moments *mo, size_t K, int paired)
{
	memset(mo, 0, sizeof *mo);
	mo->K = K;
	mo->paired = paired;
	mo->cap_rows = K / 2;
	mo->qq = oq_calloc(K * K, sizeof *mo->qq);
	mo->sq = oq_calloc(K, sizeof *mo->sq);
	mo->sa = oq_calloc(K, sizeof *mo->sa);
	if (paired) {
		mo->qf = oq_calloc(K * K, sizeof *mo->qf);
		mo->sf = oq_calloc(K, sizeof *mo->sf);
	}
	if (!mo->qq || !mo->sq || !mo->sa || (paired && (!mo->qf || !mo->sf))) {
		oq_wr_moments_free(mo);
		return OQ_ENOMEM;
	}
	return OQ_OK;
}

void oq_wr_moments_add(oq_wr_moments *dst, const oq_wr_moments *src)
{
	size_t K = dst->K;
	for (size_t i = 0; i < K * K; i++) {
		dst->qq[i] += src->qq[i];
		if (dst->paired)
			dst->qf[i] += src->qf[i];
	}
	for (size_t k = 0; k < K; k++) {
		dst->sq[k] += src->sq[k];
		dst->sa[k] += src->sa[k];
		if (dst->paired)
			dst->sf[k] += src->sf[k];
	}
	/* the patches, while both sets still have theirs and they fit together */
	if (dst->rq && src->rq && dst->n + src->n <= dst->cap_rows && (!dst->paired || (dst->rf && src->rf))) {
		memcpy(dst->rq + dst->n * K, src->rq, src->n * K * sizeof *src->rq);
		if (dst->paired)
			memcpy(dst->rf + dst->n * K, src->rf, src->n * K * sizeof *src->rf);
	} else {
		free(dst->rq);
		free(dst->rf);
		dst->rq = dst->rf = NULL;
		dst->cap_rows = 0;
	}
	dst->n += src->n;
}

/* Output size and leading pad of one spatial axis (ONNX Conv, auto_pad included). */
static int64_t out_size(const oq_wr_geom *g, int a, int64_t in, int64_t *pad0)
{
	int64_t k = g->dil[a] * (g->kernel[a] - 1) + 1, out, total;
	if (g->auto_pad == OQ_WR_PAD_SAME_UPPER || g->auto_pad == OQ_WR_PAD_SAME_LOWER) {
		out = (in + g->stride[a] - 1) / g->stride[a];
		total = (out - 1) * g->stride[a] + k - in;
		if (total < 0)
			total = 0;
		*pad0 = g->auto_pad == OQ_WR_PAD_SAME_UPPER ? total / 2 : total - total / 2;
		return out;
	}
	*pad0 = g->auto_pad == OQ_WR_PAD_VALID ? 0 : g->pads[a];
	total = g->auto_pad == OQ_WR_PAD_VALID ? 0 : g->pads[a] + g->pads[g->nsp + a];
	out = (in + total - k) / g->stride[a] + 1;
	return out > 0 ? out : 0;
}

/* Where the patches of one sample come from. */
typedef struct src {
	const oq_wr_geom *g;
	const float *x;      /* the tensor */
	int64_t nb, C, H, W; /* batch, channels, spatial (H = 1 for 1-D convs) */
	int64_t OH, OW, ph, pw; /* output size and leading pads */
	size_t P, cap;       /* positions, positions taken */
} src;

static int src_init(src *s, const oq_wr_geom *g, const oq_rt *t)
{
	memset(s, 0, sizeof *s);
	s->g = g;
	s->x = t->data;
	if (t->dtype != OQ_DT_FLOAT || t->kind != OQ_RT_TENSOR)
		return OQ_EUNSUP;
	if (g->kind == OQ_WR_CONV) {
		if (t->rank != g->nsp + 2 || (size_t)t->dims[1] != g->cin_g * g->groups)
			return OQ_EINVAL;
		s->nb = t->dims[0];
		s->C = t->dims[1];
		s->H = g->nsp == 2 ? t->dims[2] : 1;
		s->W = t->dims[t->rank - 1];
		if (g->nsp == 2)
			s->OH = out_size(g, 0, s->H, &s->ph);
		else
			s->OH = 1;
		s->OW = out_size(g, g->nsp - 1, s->W, &s->pw);
		s->P = (size_t)(s->nb * s->OH * s->OW);
	} else if (g->kind == OQ_WR_ROWS) {
		if (t->rank < 1 || (size_t)t->dims[t->rank - 1] != g->K)
			return OQ_EINVAL;
		s->P = t->nelem / g->K;
	} else {
		if (t->rank != 2 || (size_t)t->dims[0] != g->K)
			return OQ_EINVAL;
		s->P = (size_t)t->dims[1];
	}
	s->cap = s->P;
	if (s->cap > OQ_WR_POSITIONS)
		s->cap = OQ_WR_POSITIONS;
	if (s->cap > OQ_WR_PATCH_FLOATS / (g->K ? g->K : 1))
		s->cap = OQ_WR_PATCH_FLOATS / (g->K ? g->K : 1);
	if (s->cap == 0 && s->P)
		s->cap = 1;
	return OQ_OK;
}

/* Patch j (of cap) of group gi into out[K]. */
static void patch(const src *s, size_t gi, size_t j, float *out)
{
	const oq_wr_geom *g = s->g;
	/* floor(j P / cap) without overflow: j < cap <= OQ_WR_POSITIONS */
	size_t p = s->cap == s->P ? j : j * (s->P / s->cap) + j * (s->P % s->cap) / s->cap;

	if (g->kind == OQ_WR_ROWS) {
		memcpy(out, s->x + p * g->K, g->K * sizeof *out);
		return;
	}
	if (g->kind == OQ_WR_COLS) {
		for (size_t k = 0; k < g->K; k++)
			out[k] = s->x[k * s->P + p];
		return;
	}
	{
		int64_t ox = (int64_t)(p % (size_t)s->OW), oy = (int64_t)((p / (size_t)s->OW) % (size_t)s->OH),
			b = (int64_t)(p / (size_t)(s->OW * s->OH));
		int64_t kh = g->nsp == 2 ? g->kernel[0] : 1, kw = g->kernel[g->nsp - 1];
		int64_t sh = g->nsp == 2 ? g->stride[0] : 1, sw = g->stride[g->nsp - 1];
		int64_t dh = g->nsp == 2 ? g->dil[0] : 1, dw = g->dil[g->nsp - 1];
		size_t k = 0;
		for (size_t c = 0; c < g->cin_g; c++) {
			const float *plane = s->x + ((size_t)b * (size_t)s->C + gi * g->cin_g + c) * (size_t)(s->H * s->W);
			for (int64_t i = 0; i < kh; i++) {
				int64_t y = oy * sh - s->ph + i * dh;
				for (int64_t q = 0; q < kw; q++, k++) {
					int64_t x = ox * sw - s->pw + q * dw;
					out[k] = y >= 0 && y < s->H && x >= 0 && x < s->W ? plane[y * s->W + x] : 0.0f;
				}
			}
		}
	}
}

/* One sample of a layer: its sources and the groups' accumulators. */
typedef struct job {
	const oq_wr_geom *g;
	src q, f;            /* f.x NULL: unpaired */
	oq_wr_moments *mo;   /* per group */
	float *Xq, *Xf;      /* group-at-a-time mode: cap x K patches */
	float *tile;         /* per tile scratch (single-group mode), OQ_WR_TILE x K per tile */
	size_t gi;           /* the group of single-group mode */
	int failed;
} job;

/* Adds the float products rows [r0, r1) of X^T Y (X, Y: cap x K) into acc (double K x K). */
static void gram_rows(const float *X, const float *Y, size_t cap, size_t K, size_t r0, size_t r1, float *tmp,
		      double *acc)
{
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(r1 - r0), (int)K, (int)cap, 1.0f, X + r0, (int)K, Y,
		    (int)K, 0.0f, tmp, (int)K);
	for (size_t r = r0; r < r1; r++)
		for (size_t c = 0; c < K; c++)
			acc[r * K + c] += (double)tmp[(r - r0) * K + c];
}

/* Keeps the patches X (and Y, paired) of one sample while the rows stay within cap_rows. */
static void keep_rows(oq_wr_moments *mo, const float *X, const float *Y, size_t cap)
{
	size_t K = mo->K;
	if (mo->n + cap > mo->cap_rows || (mo->n && !mo->rq)) {
		free(mo->rq);
		free(mo->rf);
		mo->rq = mo->rf = NULL;
		mo->cap_rows = 0;
		return;
	}
	if (!mo->rq && !(mo->rq = malloc(mo->cap_rows * K * sizeof *mo->rq))) {
		mo->cap_rows = 0;
		return;
	}
	if (mo->paired && Y && !mo->rf && !(mo->rf = malloc(mo->cap_rows * K * sizeof *mo->rf))) {
		free(mo->rq);
		mo->rq = NULL;
		mo->cap_rows = 0;
		return;
	}
	memcpy(mo->rq + mo->n * K, X, cap * K * sizeof *X);
	if (mo->rf)
		memcpy(mo->rf + mo->n * K, Y, cap * K * sizeof *Y);
}

/* s[k] += the sum of X[., k]; with a (may be NULL) a[k] += the sum of |X[., k]|. */
static void sums(const float *X, size_t cap, size_t K, double *s, double *a)
{
	for (size_t j = 0; j < cap; j++)
		for (size_t k = 0; k < K; k++) {
			s[k] += (double)X[j * K + k];
			if (a)
				a[k] += fabs((double)X[j * K + k]);
		}
}

/* Whole groups [b, e), one at a time (grouped convs: one thread per group). */
static void by_group(void *ctx, size_t b, size_t e)
{
	job *J = ctx;
	size_t K = J->g->K, cap = J->q.cap;
	float *Xq = malloc(cap * K * sizeof *Xq), *Xf = J->f.x ? malloc(cap * K * sizeof *Xf) : NULL;
	float *tmp = malloc(K * K * sizeof *tmp);

	if (!Xq || !tmp || (J->f.x && !Xf)) {
		J->failed = 1;
		goto out;
	}
	for (size_t gi = b; gi < e; gi++) {
		oq_wr_moments *mo = &J->mo[gi];
		for (size_t j = 0; j < cap; j++) {
			patch(&J->q, gi, j, Xq + j * K);
			if (Xf)
				patch(&J->f, gi, j, Xf + j * K);
		}
		gram_rows(Xq, Xq, cap, K, 0, K, tmp, mo->qq);
		sums(Xq, cap, K, mo->sq, mo->sa);
		if (Xf && mo->paired) {
			gram_rows(Xq, Xf, cap, K, 0, K, tmp, mo->qf);
			sums(Xf, cap, K, mo->sf, NULL);
		}
		if (mo->cap_rows)
			keep_rows(mo, Xq, Xf, cap);
		mo->n += cap;
	}
out:
	free(Xq);
	free(Xf);
	free(tmp);
}

/* Single-group mode, step 1: patches [b, e). */
static void build(void *ctx, size_t b, size_t e)
{
	job *J = ctx;
	size_t K = J->g->K;
	for (size_t j = b; j < e; j++) {
		patch(&J->q, J->gi, j, J->Xq + j * K);
		if (J->Xf)
			patch(&J->f, J->gi, j, J->Xf + j * K);
	}
}

/* Single-group mode, step 2: row tiles [b, e) of the K x K products. */
static void tiles(void *ctx, size_t b, size_t e)
{
	job *J = ctx;
	size_t K = J->g->K, cap = J->q.cap;
	oq_wr_moments *mo = &J->mo[J->gi];
	for (size_t t = b; t < e; t++) {
		size_t r0 = t * OQ_WR_TILE, r1 = r0 + OQ_WR_TILE < K ? r0 + OQ_WR_TILE : K;
		float *tmp = J->tile + t * OQ_WR_TILE * K;
		gram_rows(J->Xq, J->Xq, cap, K, r0, r1, tmp, mo->qq);
		if (J->Xf && mo->paired)
			gram_rows(J->Xq, J->Xf, cap, K, r0, r1, tmp, mo->qf);
	}
}

int oq_wr_accumulate(const oq_wr_geom *g, const oq_rt *xq, const oq_rt *xf, oq_wr_moments *mo, oq_pool *pool)
{
	job J;
	int rc;

	memset(&J, 0, sizeof J);
	J.g = g;
	J.mo = mo;
	if ((rc = src_init(&J.q, g, xq)))
		return rc;
	if (xf && (rc = src_init(&J.f, g, xf)))
		return rc;
	if (xf && (J.f.P != J.q.P || xf->nelem != xq->nelem))
		return OQ_EINVAL;
	if (J.q.cap == 0)
		return OQ_OK;
	if (g->groups > 1) {
		if (pool)
			oq_pool_run(pool, g->groups, 1, by_group, &J);
		else
			by_group(&J, 0, g->groups);
		return J.failed ? OQ_ENOMEM : OQ_OK;
	}
	{
		size_t K = g->K, cap = J.q.cap, nt = (K + OQ_WR_TILE - 1) / OQ_WR_TILE;
		J.Xq = malloc(cap * K * sizeof *J.Xq);
		J.Xf = xf ? malloc(cap * K * sizeof *J.Xf) : NULL;
		J.tile = malloc(nt * OQ_WR_TILE * K * sizeof *J.tile);
		if (!J.Xq || !J.tile || (xf && !J.Xf)) {
			free(J.Xq);
			free(J.Xf);
			free(J.tile);
			return OQ_ENOMEM;
		}
		if (pool) {
			oq_pool_run(pool, cap, 64, build, &J);
			oq_pool_run(pool, nt, 1, tiles, &J);
		} else {
			build(&J, 0, cap);
			tiles(&J, 0, nt);
		}
		sums(J.Xq, cap, K, mo[0].sq, mo[0].sa);
		if (J.Xf && mo[0].paired)
			sums(J.Xf, cap, K, mo[0].sf, NULL);
		if (mo[0].cap_rows)
			keep_rows(&mo[0], J.Xq, J.Xf, cap);
		mo[0].n += cap;
		free(J.Xq);
		free(J.Xf);
		free(J.tile);
	}
	return OQ_OK;
}
