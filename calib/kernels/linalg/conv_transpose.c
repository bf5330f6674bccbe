/*
 * conv_transpose.c - ConvTranspose, fast and reference, float32 and double.
 *
 * Fast: per image, col[Mg * K, Pin] = W_g^T X_g through the batched GEMM
 * (oq_gemm_run), then col2im adds each column into the output planes, one
 * output channel per work item, so each output sum has a fixed order
 * whatever the thread count. The reference is a direct loop accumulating
 * in double.
 * Spec: https://onnx.ai/onnx/operators/onnx__ConvTranspose.html
 */
#include "calib/kernels/linalg/conv_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct col2im_job {
	oq_ltype t;
	const oq_conv_geom *g;
	const void *col;       /* [m * k_size, in_size] for one image */
	const void *b;
	void *y;               /* one image */
} col2im_job;

#define COL2IM(T, NAME)                                                                             \
	static void NAME(const col2im_job *j, int64_t m)                                            \
	{                                                                                           \
		const oq_conv_geom *g = j->g;                                                       \
		const T *col = (const T *)j->col + m * g->k_size * g->in_size;                      \
		T *y = (T *)j->y + m * g->out_size;                                                 \
		T bv = j->b ? ((const T *)j->b)[m] : (T)0;                                          \
		int64_t kp[OQ_CONV_MAX_SP], ip[OQ_CONV_MAX_SP];                                     \
		for (int64_t p = 0; p < g->out_size; p++)                                           \
			y[p] = bv;                                                                  \
		for (int64_t q = 0; q < g->k_size; q++, col += g->in_size) {                        \
			unflat(q, g->nsp, g->k, kp);                                                \
			if (g->nsp == 2) {                                                          \
				int64_t W = g->in[1], OW = g->out[1], sw = g->stride[1];            \
				int64_t off = kp[1] * g->dil[1] - g->pad[1];                        \
				int64_t lo = off >= 0 ? 0 : ceil_div(-off, sw);                     \
				int64_t hi = OW - 1 - off >= 0 ? (OW - 1 - off) / sw + 1 : 0;       \
				if (hi > W)                                                         \
					hi = W;                                                     \
				for (int64_t ih = 0; ih < g->in[0]; ih++) {                         \
					int64_t oh = ih * g->stride[0] + kp[0] * g->dil[0] - g->pad[0]; \
					if (oh < 0 || oh >= g->out[0])                              \
						continue;                                           \
					T *yr = y + oh * OW + off;                                  \
					const T *cr = col + ih * W;                                 \
					for (int64_t iw = lo; iw < hi; iw++)                        \
						yr[iw * sw] += cr[iw];                              \
				}                                                                   \
				continue;                                                           \
			}                                                                           \
			for (int64_t i = 0; i < g->in_size; i++) {                                  \
				int64_t idx;                                                        \
				unflat(i, g->nsp, g->in, ip);                                       \
				if ((idx = tap_index(g, ip, kp, g->out)) >= 0)                      \
					y[idx] += col[i];                                           \
			}                                                                           \
		}                                                                                   \
	}

COL2IM(float, col2im_f)
COL2IM(double, col2im_d)

static void col2im_range(void *ctx, size_t begin, size_t end)
{
	const col2im_job *j = ctx;
	for (size_t m = begin; m < end; m++) {
		if (j->t == OQ_LT_F32)
			col2im_f(j, (int64_t)m);
		else
			col2im_d(j, (int64_t)m);
	}
}

int oq_convt_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w,
		 const void *b, void *y)
{
	oq_conv_geom g;
	size_t es = t == OQ_LT_F32 ? 4 : 8, *aoff = NULL, *boff = NULL, *coff = NULL;
	int64_t cg, mg, rows;
	void *col = NULL;
	int rc = OQ_OK;

	if (oq_linalg_use_ref) {
		oq_convt_ref(t, g0, x, w, b, y);
		return OQ_OK;
	}
	oq_conv_as_2d(g0, &g);
	if (g.n == 0 || g.m == 0 || g.out_size == 0)
		return OQ_OK;
	cg = g.c / g.group;
	mg = g.m / g.group;
	rows = mg * g.k_size;
	col = malloc((size_t)(g.m * g.k_size * g.in_size) * es + 64);
	aoff = oq_calloc((size_t)g.group, sizeof *aoff);
	boff = oq_calloc((size_t)g.group, sizeof *boff);
	coff = oq_calloc((size_t)g.group, sizeof *coff);
	if (!col || !aoff || !boff || !coff) {
		rc = OQ_ENOMEM;
		goto done;
	}
	for (int64_t n = 0; n < g.n; n++) {
		oq_gemm_batch gb;
		col2im_job cj;
		memset(&gb, 0, sizeof gb);
		for (int64_t grp = 0; grp < g.group; grp++) {
			aoff[grp] = (size_t)(grp * cg * rows);
			boff[grp] = (size_t)((n * g.c + grp * cg) * g.in_size);
			coff[grp] = (size_t)(grp * rows * g.in_size);
		}
		gb.t = t;
		gb.ta = 1;
		gb.m = rows;
		gb.n = g.in_size;
		gb.kd = cg;
		gb.alpha = 1;
		gb.beta = 0;
		gb.a = w;
		gb.lda = rows;
		gb.b = x;
		gb.ldb = g.in_size;
		gb.c = col;
		gb.ldc = g.in_size;
		gb.batch = (size_t)g.group;
		gb.aoff = aoff;
		gb.boff = boff;
		gb.coff = coff;
		oq_gemm_run(k, &gb);
		cj.t = t;
		cj.g = &g;
		cj.col = col;
		cj.b = b;
		cj.y = (char *)y + (size_t)(n * g.m * g.out_size) * es;
		oq_k_parallel(k, (size_t)g.m, 1, col2im_range, &cj);
	}
done:
	free(col);
	free(aoff);
	free(boff);
	free(coff);
	return rc;
}

void oq_convt_ref(oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const void *b, void *y)
{
	int64_t cg = g->c / g->group, mg = g->m / g->group;
	int64_t ip[OQ_CONV_MAX_SP], kp[OQ_CONV_MAX_SP];
	size_t ny = (size_t)(g->n * g->m * g->out_size);
	double *acc = calloc(ny ? ny : 1, sizeof *acc);

	if (!acc) { /* reference path for tests: fall back to accumulating in place */
		for (size_t i = 0; i < ny; i++)
			setv(t, y, (int64_t)i, b ? getv(t, b, (int64_t)(i / (size_t)g->out_size) % g->m) : 0);
	} else {
		for (size_t i = 0; i < ny; i++)
			acc[i] = b ? getv(t, b, (int64_t)(i / (size_t)g->out_size) % g->m) : 0;
	}
	for (int64_t n = 0; n < g->n; n++)
		for (int64_t c = 0; c < g->c; c++)
			for (int64_t i = 0; i < g->in_size; i++) {
				double xv = getv(t, x, (n * g->c + c) * g->in_size + i);
				int64_t grp = c / cg;
				unflat(i, g->nsp, g->in, ip);
				for (int64_t mm = 0; mm < mg; mm++)
					for (int64_t q = 0; q < g->k_size; q++) {
						int64_t idx, yi;
						unflat(q, g->nsp, g->k, kp);
						if ((idx = tap_index(g, ip, kp, g->out)) < 0)
							continue;
						yi = (n * g->m + grp * mg + mm) * g->out_size + idx;
						if (acc)
							acc[yi] += xv * getv(t, w, (c * mg + mm) * g->k_size + q);
						else
							setv(t, y, yi, getv(t, y, yi) + xv * getv(t, w, (c * mg + mm) * g->k_size + q));
					}
			}
	if (acc)
		for (size_t i = 0; i < ny; i++)
			setv(t, y, (int64_t)i, acc[i]);
	free(acc);
}
