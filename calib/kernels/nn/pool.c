/*
 * pool.c - pooling: MaxPool (with the Indices output), AveragePool,
 * LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool, MaxRoiPool.
 *
 * Geometry (https://onnx.ai/onnx/operators/onnx__MaxPool.html): with
 * explicit pads, out = floor_or_ceil((in + pb + pe - ((k-1)*d+1)) / s) + 1,
 * and with ceil_mode a window that would start in the right padding is
 * dropped ((out-1)*s >= in + pb), as the current spec and PyTorch do.
 * SAME_UPPER/SAME_LOWER: out = ceil(in / s), total pad
 * (out-1)*s + (k-1)*d+1 - in split with the odd unit at the end (UPPER) or
 * the start (LOWER). VALID: no pads.
 *
 * 1-, 2- and 3-D pooling share one loop: missing spatial dims have size 1.
 * For each output position the range of window taps [j0, j1) that land in
 * the input is computed per dim, so the inner loops carry no bound checks.
 * AveragePool divides by the in-input taps, or with count_include_pad by the
 * taps inside [-pb, in + pe) (taps past the end padding that ceil_mode adds
 * never count). Padding never takes part in max/Lp. MaxPool indices are
 * flat offsets into X: (n*C + c) * prod(spatial) + the spatial offset in
 * row-major order (storage_order 0) or column-major order (1).
 * Work is split over the N*C planes.
 *
 * Fast path (AVX-512F CPUs): 2-D float MaxPool without Indices, dilation 1
 * and horizontal stride 1 or 2 computes 16 outputs of a row per vector. Each
 * lane runs the reference's recurrence over the window taps in the same
 * (row, column) order: the first tap inside the input sets the lane, each
 * later one replaces it when greater (maxps(v, best) is v > best ? v : best),
 * and taps outside the input are masked off. So NaN and signed-zero results
 * equal the scalar loop's bit for bit (oq_nn_use_ref selects that loop; the
 * tests compare the two).
 */
#include "calib/kernels/nn/nn.h"
#include "calib/exec/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_Z 1
#define AVX512 __attribute__((target("avx512f")))
#endif

int oq_nn_use_ref;

enum { P_MAX, P_AVG, P_LP };

typedef struct geom {
	int ns;                        /* real spatial dims (1..3) */
	int64_t in[3], out[3];         /* spatial sizes, padded with 1 */
	int64_t k[3], s[3], d[3];      /* kernel, strides, dilations */
	int64_t pb[3], pe[3];          /* pads at begin and end */
} geom;

typedef struct pool_job {
	const geom *g;
	int kind;                      /* P_MAX, P_AVG or P_LP */
	int include_pad;               /* AveragePool count_include_pad */
	int col_major;                 /* MaxPool storage_order 1 */
	float p;                       /* LpPool exponent */
	const float *x;
	float *y;
	int64_t *ind;                  /* MaxPool indices or NULL */
	size_t in_plane, out_plane;
} pool_job;

static int64_t ceil_div(int64_t a, int64_t b)
{
	return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/* Taps j in [*j0, *j1) of the window starting at st fall inside [lo, hi). */
static void taps(int64_t st, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t *j0, int64_t *j1)
{
	int64_t a = st >= lo ? 0 : ceil_div(lo - st, d);
	int64_t b = st >= hi ? 0 : ceil_div(hi - st, d);
	if (b > k)
		b = k;
	if (a > b)
		a = b;
	*j0 = a;
	*j1 = b;
}

static void pool_planes(void *ctx, size_t begin, size_t end)
{
	const pool_job *J = ctx;
	const geom *g = J->g;
	const int64_t W = g->in[2], HW = g->in[1] * g->in[2];

	for (size_t pl = begin; pl < end; pl++) {
		const float *x = J->x + pl * J->in_plane;
		float *y = J->y + pl * J->out_plane;
		int64_t *ind = J->ind ? J->ind + pl * J->out_plane : NULL;
		size_t o = 0;
		for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
			int64_t s0 = o0 * g->s[0] - g->pb[0], a0, b0, c0a, c0b;
			taps(s0, g->k[0], g->d[0], 0, g->in[0], &a0, &b0);
			taps(s0, g->k[0], g->d[0], -g->pb[0], g->in[0] + g->pe[0], &c0a, &c0b);
			for (int64_t o1 = 0; o1 < g->out[1]; o1++) {
				int64_t s1 = o1 * g->s[1] - g->pb[1], a1, b1, c1a, c1b;
				taps(s1, g->k[1], g->d[1], 0, g->in[1], &a1, &b1);
				taps(s1, g->k[1], g->d[1], -g->pb[1], g->in[1] + g->pe[1], &c1a, &c1b);
				for (int64_t o2 = 0; o2 < g->out[2]; o2++, o++) {
					int64_t s2 = o2 * g->s[2] - g->pb[2], a2, b2, c2a, c2b;
					int64_t best_i = -1;
					float best = -INFINITY;
					double acc = 0;
					taps(s2, g->k[2], g->d[2], 0, g->in[2], &a2, &b2);
					c2a = c2b = 0;
					if (J->kind == P_AVG && J->include_pad)
						taps(s2, g->k[2], g->d[2], -g->pb[2], g->in[2] + g->pe[2], &c2a, &c2b);
					/* one loop nest per kind keeps the tap loop free of branches on the op */
					if (J->kind == P_MAX && !ind) {
						/* no Indices output: the same first-wins maximum without index math */
						int any = 0;
						for (int64_t j0 = a0; j0 < b0; j0++) {
							const float *plane = x + (s0 + j0 * g->d[0]) * HW;
							for (int64_t j1 = a1; j1 < b1; j1++) {
								const float *row = plane + (s1 + j1 * g->d[1]) * W + s2;
								const int64_t d2 = g->d[2];
								for (int64_t j2 = a2; j2 < b2; j2++) {
									float v = row[j2 * d2];
									if (!any || v > best) {
										best = v;
										any = 1;
									}
								}
							}
						}
						best_i = any ? 0 : -1;
					} else if (J->kind == P_MAX) {
						for (int64_t j0 = a0; j0 < b0; j0++) {
							int64_t i0 = s0 + j0 * g->d[0];
							for (int64_t j1 = a1; j1 < b1; j1++) {
								int64_t i1 = s1 + j1 * g->d[1];
								const float *row = x + i0 * HW + i1 * W;
								for (int64_t j2 = a2; j2 < b2; j2++) {
									int64_t i2 = s2 + j2 * g->d[2];
									if (best_i < 0 || row[i2] > best) {
										best = row[i2];
										best_i = J->col_major
											 ? i0 + i1 * g->in[0] + i2 * g->in[0] * g->in[1]
											 : i0 * HW + i1 * W + i2;
									}
								}
							}
						}
					} else {
						for (int64_t j0 = a0; j0 < b0; j0++) {
							int64_t i0 = s0 + j0 * g->d[0];
							for (int64_t j1 = a1; j1 < b1; j1++) {
								const float *row = x + i0 * HW + (s1 + j1 * g->d[1]) * W + s2;
								const int64_t d2 = g->d[2];
								if (J->kind == P_AVG)
									for (int64_t j2 = a2; j2 < b2; j2++)
										acc += row[j2 * d2];
								else if (J->p == 1)
									for (int64_t j2 = a2; j2 < b2; j2++)
										acc += fabsf(row[j2 * d2]);
								else if (J->p == 2)
									for (int64_t j2 = a2; j2 < b2; j2++)
										acc += (double)row[j2 * d2] * row[j2 * d2];
								else
									for (int64_t j2 = a2; j2 < b2; j2++)
										acc += pow(fabs(row[j2 * d2]), J->p);
							}
						}
					}
					if (J->kind == P_MAX) {
						y[o] = best;
						if (ind)
							ind[o] = best_i < 0 ? -1 : (int64_t)(pl * J->in_plane) + best_i;
					} else if (J->kind == P_AVG) {
						int64_t n = J->include_pad ? (c0b - c0a) * (c1b - c1a) * (c2b - c2a)
									   : (b0 - a0) * (b1 - a1) * (b2 - a2);
						y[o] = n > 0 ? (float)(acc / (double)n) : 0.0f;
					} else {
						y[o] = (float)(J->p == 1 ? acc : J->p == 2 ? sqrt(acc) : pow(acc, 1.0 / J->p));
					}
				}
			}
		}
	}
}

#if defined(HAVE_Z)
/* Lanes l of 16 (l < nl) whose column c0 + l * sw lies in [0, w). */
static __mmask16 col_mask(int64_t c0, int64_t sw, int64_t w, int64_t nl)
{
	int64_t lo = c0 >= 0 ? 0 : (-c0 + sw - 1) / sw, hi = c0 >= w ? 0 : (w - 1 - c0) / sw + 1;
	if (hi > nl)
		hi = nl;
	if (lo >= hi)
		return 0;
	return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

#define ZMAX_KW 16 /* widest window the vector path takes */

/*
 * The window taps of 16 outputs of one row (see the file comment); sw is 1
 * or 2; m[j]: the lanes whose tap j lies inside the row, lo[j] / hi[j]: the
 * columns of the two 16-float loads of tap j inside the row (stride 2).
 */
AVX512 static inline __m512 zmax_vec(const float *x, int64_t H, int64_t W, int64_t ih0, int64_t kh, int64_t kw,
				     int64_t c0, int64_t sw, const __mmask16 *m, const __mmask16 *lo,
				     const __mmask16 *hi)
{
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	__m512 best = _mm512_set1_ps(-INFINITY);
	__mmask16 have = 0;

	for (int64_t i = 0; i < kh; i++) {
		const float *row;
		if (ih0 + i < 0 || ih0 + i >= H)
			continue;
		row = x + (ih0 + i) * W + c0;
		for (int64_t j = 0; j < kw; j++) {
			__m512 v;
			if (!m[j])
				continue;
			if (sw == 1)
				v = _mm512_maskz_loadu_ps(m[j], row + j);
			else /* columns c .. c + 31 as two halves, then the even ones */
				v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo[j], row + j), even,
							   _mm512_maskz_loadu_ps(hi[j], row + j + 16));
			best = _mm512_mask_mov_ps(best, m[j] & (__mmask16)~have, v);
			best = _mm512_mask_max_ps(best, m[j] & have, v, best);
			have |= m[j];
		}
	}
	return best;
}

#define ZMAX_STRIPS 32 /* 16-output strips of a row whose masks are kept, so rows are walked in order */

/* 16 outputs of row oh at column ow of one plane (masks m, lo, hi of their strip). */
AVX512 static inline void zmax_store(const float *x, float *y, const geom *g, int64_t oh, int64_t ow,
				     const __mmask16 *m, const __mmask16 *lo, const __mmask16 *hi)
{
	int64_t H = g->in[0], W = g->in[1], OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->s[1];
	int64_t nl = OW - ow < 16 ? OW - ow : 16, c0 = ow * sw - g->pb[1], ih0 = oh * g->s[0] - g->pb[0];
	__mmask16 keep = (__mmask16)((1u << nl) - 1u);
	float *yr = y + oh * OW + ow;

	if (kh == 3 && kw == 3 && sw == 2)
		_mm512_mask_storeu_ps(yr, keep, zmax_vec(x, H, W, ih0, 3, 3, c0, 2, m, lo, hi));
	else if (kh == 3 && kw == 3 && sw == 1)
		_mm512_mask_storeu_ps(yr, keep, zmax_vec(x, H, W, ih0, 3, 3, c0, 1, m, lo, hi));
	else if (kh == 2 && kw == 2 && sw == 2)
		_mm512_mask_storeu_ps(yr, keep, zmax_vec(x, H, W, ih0, 2, 2, c0, 2, m, lo, hi));
	else
		_mm512_mask_storeu_ps(yr, keep, zmax_vec(x, H, W, ih0, kh, kw, c0, sw, m, lo, hi));
}

/* Tap masks of the strip of 16 outputs at column ow (see zmax_vec). */
static void zmax_masks(const geom *g, int64_t ow, __mmask16 *m, __mmask16 *lo, __mmask16 *hi)
{
	int64_t W = g->in[1], OW = g->out[1], sw = g->s[1];
	int64_t nl = OW - ow < 16 ? OW - ow : 16, c0 = ow * sw - g->pb[1];

	for (int64_t j = 0; j < g->k[1]; j++) {
		m[j] = col_mask(c0 + j, sw, W, nl);
		lo[j] = col_mask(c0 + j, 1, W, 16);
		hi[j] = col_mask(c0 + j + 16, 1, W, 16);
	}
}

AVX512 static void zmax_planes(void *ctx, size_t begin, size_t end)
{
	const pool_job *J = ctx;
	const geom *g = J->g;
	int64_t OH = g->out[0], OW = g->out[1];
	__mmask16 m[ZMAX_KW], lo[ZMAX_KW], hi[ZMAX_KW];

	if (OW <= 16 * ZMAX_STRIPS) { /* row by row, every strip's masks computed once */
		__mmask16 sm[ZMAX_STRIPS][ZMAX_KW], slo[ZMAX_STRIPS][ZMAX_KW], shi[ZMAX_STRIPS][ZMAX_KW];
		int64_t ns = (OW + 15) / 16;
		for (int64_t s = 0; s < ns; s++)
			zmax_masks(g, 16 * s, sm[s], slo[s], shi[s]);
		for (size_t pl = begin; pl < end; pl++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t s = 0; s < ns; s++)
					zmax_store(J->x + pl * J->in_plane, J->y + pl * J->out_plane, g, oh, 16 * s, sm[s],
						   slo[s], shi[s]);
		return;
	}
	for (size_t pl = begin; pl < end; pl++) /* wider rows: strip by strip */
		for (int64_t ow = 0; ow < OW; ow += 16) {
			zmax_masks(g, ow, m, lo, hi);
			for (int64_t oh = 0; oh < OH; oh++)
				zmax_store(J->x + pl * J->in_plane, J->y + pl * J->out_plane, g, oh, ow, m, lo, hi);
		}
}
#endif

/* The AVX-512 MaxPool path applies (see the file comment). */
static int zmax_fits(const pool_job *J)
{
#if defined(HAVE_Z)
	const geom *g = J->g;
	return !oq_nn_use_ref && oq_cpu_avx512() && J->kind == P_MAX && !J->ind && g->ns == 2 && g->d[0] == 1 &&
	       g->d[1] == 1 && (g->s[1] == 1 || g->s[1] == 2) && g->k[1] <= ZMAX_KW;
#else
	(void)J;
	return 0;
#endif
}

/* Reads kernel_shape/strides/dilations/pads/auto_pad/ceil_mode and derives the output shape. */
static int get_geom(oq_kctx *k, const oq_rt *x, geom *g)
{
	const int64_t *ks, *st, *dl, *pads;
	size_t nk, nst, ndl, npads;
	const char *ap = oq_k_str(k, "auto_pad", "NOTSET");
	int64_t ceil_mode = oq_k_int(k, "ceil_mode", 0);

	if (x->rank < 3)
		return oq_k_err(k, OQ_EINVAL, "input must have rank >= 3 (N, C, spatial...), got rank %d", x->rank);
	g->ns = x->rank - 2;
	if (g->ns > 3)
		return oq_k_err(k, OQ_EUNSUP, "%d spatial dims; at most 3 are supported", g->ns);
	nk = oq_k_ints(k, "kernel_shape", &ks);
	nst = oq_k_ints(k, "strides", &st);
	ndl = oq_k_ints(k, "dilations", &dl);
	npads = oq_k_ints(k, "pads", &pads);
	if (nk != (size_t)g->ns)
		return oq_k_err(k, OQ_EINVAL, "kernel_shape has %zu values for %d spatial dims", nk, g->ns);
	if (nst && nst != (size_t)g->ns)
		return oq_k_err(k, OQ_EINVAL, "strides has %zu values for %d spatial dims", nst, g->ns);
	if (ndl && ndl != (size_t)g->ns)
		return oq_k_err(k, OQ_EINVAL, "dilations has %zu values for %d spatial dims", ndl, g->ns);
	if (npads && npads != 2 * (size_t)g->ns)
		return oq_k_err(k, OQ_EINVAL, "pads has %zu values for %d spatial dims", npads, g->ns);
	if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && strcmp(ap, "SAME_UPPER") && strcmp(ap, "SAME_LOWER"))
		return oq_k_err(k, OQ_EINVAL, "unknown auto_pad '%s'", ap);
	for (int i = 0; i < 3; i++) {
		int64_t dk, span;
		if (i >= g->ns) {
			g->in[i] = g->out[i] = g->k[i] = g->s[i] = g->d[i] = 1;
			g->pb[i] = g->pe[i] = 0;
			continue;
		}
		g->in[i] = x->dims[2 + i];
		g->k[i] = ks[i];
		g->s[i] = nst ? st[i] : 1;
		g->d[i] = ndl ? dl[i] : 1;
		g->pb[i] = npads ? pads[i] : 0;
		g->pe[i] = npads ? pads[g->ns + i] : 0;
		if (g->k[i] < 1 || g->s[i] < 1 || g->d[i] < 1 || g->pb[i] < 0 || g->pe[i] < 0 ||
		    g->k[i] > INT32_MAX || g->s[i] > INT32_MAX || g->d[i] > INT32_MAX || g->pb[i] > INT32_MAX ||
		    g->pe[i] > INT32_MAX)
			return oq_k_err(k, OQ_EINVAL,
					"spatial dim %d: kernel %lld, stride %lld, dilation %lld, pads %lld/%lld out of range",
					i, (long long)g->k[i], (long long)g->s[i], (long long)g->d[i],
					(long long)g->pb[i], (long long)g->pe[i]);
		dk = (g->k[i] - 1) * g->d[i] + 1;
		if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
			int64_t total;
			g->out[i] = ceil_div(g->in[i], g->s[i]);
			total = (g->out[i] - 1) * g->s[i] + dk - g->in[i];
			if (total < 0)
				total = 0;
			g->pb[i] = !strcmp(ap, "SAME_UPPER") ? total / 2 : (total + 1) / 2;
			g->pe[i] = total - g->pb[i];
			continue;
		}
		if (!strcmp(ap, "VALID"))
			g->pb[i] = g->pe[i] = 0;
		span = g->in[i] + g->pb[i] + g->pe[i] - dk;
		if (span < 0)
			return oq_k_err(k, OQ_EINVAL, "spatial dim %d: window (%lld) larger than padded input (%lld)", i,
					(long long)dk, (long long)(g->in[i] + g->pb[i] + g->pe[i]));
		g->out[i] = (ceil_mode ? ceil_div(span, g->s[i]) : span / g->s[i]) + 1;
		if (ceil_mode && (g->out[i] - 1) * g->s[i] >= g->in[i] + g->pb[i])
			g->out[i]--;
	}
	return OQ_OK;
}

static int run_pool(oq_kctx *k, int kind)
{
	oq_rt *x = oq_k_in(k, 0), *y, *ind = NULL;
	geom g;
	pool_job J;
	int64_t od[OQ_RT_MAX_RANK];
	const float *xf;
	float *xo = NULL, *yo = NULL;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (x->dtype != OQ_DT_FLOAT && !oq_nn_is_float(x->dtype) &&
	    !(kind == P_MAX && (x->dtype == OQ_DT_INT8 || x->dtype == OQ_DT_UINT8)))
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported", oq_dtype_name(x->dtype));
	if ((rc = get_geom(k, x, &g)))
		return rc;
	memset(&J, 0, sizeof J);
	J.g = &g;
	J.kind = kind;
	J.include_pad = kind == P_AVG && oq_k_int(k, "count_include_pad", 0) != 0;
	if (kind == P_LP) {
		const oq_attr *pa = oq_k_attr(k, "p");
		J.p = pa && pa->type == OQ_ATTR_FLOAT ? pa->f : (float)oq_k_int(k, "p", 2);
		if (!(J.p > 0))
			return oq_k_err(k, OQ_EINVAL, "p must be positive");
	}
	if (kind == P_MAX) {
		int64_t so = oq_k_int(k, "storage_order", 0);
		if (so != 0 && so != 1)
			return oq_k_err(k, OQ_EINVAL, "storage_order must be 0 or 1, got %lld", (long long)so);
		J.col_major = so == 1;
	}
	od[0] = x->dims[0];
	od[1] = x->dims[1];
	for (int i = 0; i < g.ns; i++)
		od[2 + i] = g.out[i];
	/* every output element is written (a window with no tap inside gives -inf / 0) */
	if ((rc = oq_k_output_raw(k, 0, x->dtype, x->rank, od, &y)))
		return rc;
	if (kind == P_MAX && k->n_out > 1 && k->node->outputs[1]) {
		if ((rc = oq_k_output(k, 1, OQ_DT_INT64, x->rank, od, &ind)))
			return rc;
		J.ind = ind->data;
	}
	if ((rc = oq_nn_f32_in(k, x, kind == P_MAX, &xf, &xo)))
		return rc;
	if ((rc = oq_nn_f32_buf(k, y, &J.y, &yo))) {
		free(xo);
		return rc;
	}
	J.x = xf;
	J.in_plane = oq_nn_prod(x->dims, 2, x->rank);
	J.out_plane = oq_nn_prod(od, 2, x->rank);
	{
		size_t work = J.out_plane * (size_t)(g.k[0] * g.k[1] * g.k[2]) + 1;
		size_t grain = work >= 4096 ? 1 : 4096 / work;
		oq_range_fn fn = pool_planes;
#if defined(HAVE_Z)
		if (zmax_fits(&J))
			fn = zmax_planes;
#endif
		oq_k_parallel(k, (size_t)(x->dims[0] * x->dims[1]), grain, fn, &J);
	}
	oq_nn_f32_out(y, yo);
	free(xo);
	return OQ_OK;
}

int oq_nn_maxpool(oq_kctx *k)
{
	return run_pool(k, P_MAX);
}

int oq_nn_averagepool(oq_kctx *k)
{
	return run_pool(k, P_AVG);
}

int oq_nn_lppool(oq_kctx *k)
{
	return run_pool(k, P_LP);
}

/* ---- global pooling: one contiguous plane per (n, c) ---- */

typedef struct gjob {
	int kind;
	double p;
	const float *x;
	float *y;
	size_t plane;
} gjob;

/*
 * Sum of x[0..n) in double for GlobalAveragePool: eight partial sums (lane
 * l takes the elements i = l mod 8 of the whole blocks of 8), combined as
 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the tail in
 * order. A fixed order (not one long dependent chain of additions), the
 * same on every path and thread.
 */
static double sum_f(const float *x, size_t n)
{
	size_t i = 0, nb = n / 8 * 8;
	double s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t;
#if defined(__SSE2__)
	__m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	for (; i < nb; i += 8) {
		__m128 lo = _mm_loadu_ps(x + i), hi = _mm_loadu_ps(x + i + 4);
		a0 = _mm_add_pd(a0, _mm_cvtps_pd(lo));
		a1 = _mm_add_pd(a1, _mm_cvtps_pd(_mm_movehl_ps(lo, lo)));
		a2 = _mm_add_pd(a2, _mm_cvtps_pd(hi));
		a3 = _mm_add_pd(a3, _mm_cvtps_pd(_mm_movehl_ps(hi, hi)));
	}
	_mm_storeu_pd(s, a0);
	_mm_storeu_pd(s + 2, a1);
	_mm_storeu_pd(s + 4, a2);
	_mm_storeu_pd(s + 6, a3);
#endif
	for (; i < nb; i += 8)
		for (int l = 0; l < 8; l++)
			s[l] += x[i + l];
	t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	for (; i < n; i++)
		t += x[i];
	return t;
}

static void global_planes(void *ctx, size_t begin, size_t end)
{
	const gjob *J = ctx;
	for (size_t pl = begin; pl < end; pl++) {
		const float *x = J->x + pl * J->plane;
		if (J->kind == P_MAX) {
			float m = J->plane ? x[0] : -INFINITY;
			for (size_t i = 1; i < J->plane; i++)
				if (x[i] > m)
					m = x[i];
			J->y[pl] = m;
		} else if (J->kind == P_AVG) {
			J->y[pl] = J->plane ? (float)(sum_f(x, J->plane) / (double)J->plane) : NAN;
		} else {
			double acc = 0;
			for (size_t i = 0; i < J->plane; i++)
				acc += J->p == 1 ? fabs(x[i]) : J->p == 2 ? (double)x[i] * x[i] : pow(fabs(x[i]), J->p);
			J->y[pl] = (float)(J->p == 1 ? acc : J->p == 2 ? sqrt(acc) : pow(acc, 1.0 / J->p));
		}
	}
}

static int run_global(oq_kctx *k, int kind)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t od[OQ_RT_MAX_RANK];
	gjob J;
	const float *xf;
	float *xo = NULL, *yo = NULL;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (x->rank < 2)
		return oq_k_err(k, OQ_EINVAL, "input must have rank >= 2 (N, C, spatial...), got rank %d", x->rank);
	memset(&J, 0, sizeof J);
	J.kind = kind;
	if (kind == P_LP) {
		const oq_attr *pa = oq_k_attr(k, "p");
		J.p = pa && pa->type == OQ_ATTR_FLOAT ? pa->f : (double)oq_k_int(k, "p", 2);
		if (!(J.p > 0))
			return oq_k_err(k, OQ_EINVAL, "p must be positive");
	}
	for (int i = 0; i < x->rank; i++)
		od[i] = i < 2 ? x->dims[i] : 1;
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, od, &y)))
		return rc;
	if ((rc = oq_nn_f32_in(k, x, 0, &xf, &xo)))
		return rc;
	if ((rc = oq_nn_f32_buf(k, y, &J.y, &yo))) {
		free(xo);
		return rc;
	}
	J.x = xf;
	J.plane = oq_nn_prod(x->dims, 2, x->rank);
	oq_k_parallel(k, (size_t)(x->dims[0] * x->dims[1]), J.plane >= 4096 ? 1 : 4096 / (J.plane + 1), global_planes,
		      &J);
	oq_nn_f32_out(y, yo);
	free(xo);
	return OQ_OK;
}

int oq_nn_globalaveragepool(oq_kctx *k)
{
	return run_global(k, P_AVG);
}

int oq_nn_globalmaxpool(oq_kctx *k)
{
	return run_global(k, P_MAX);
}

int oq_nn_globallppool(oq_kctx *k)
{
	return run_global(k, P_LP);
}

/* ---- MaxRoiPool (Caffe ROIPooling): rois rows are [batch, x1, y1, x2, y2] ---- */

typedef struct roijob {
	const float *x, *rois;
	float *y;
	int64_t N, C, H, W, ph, pw;
	float scale;
} roijob;

static void roi_rows(void *ctx, size_t begin, size_t end)
{
	const roijob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		const float *roi = J->rois + r * 5;
		int64_t b = (int64_t)roi[0];
		int64_t x1 = (int64_t)roundf(roi[1] * J->scale), y1 = (int64_t)roundf(roi[2] * J->scale);
		int64_t x2 = (int64_t)roundf(roi[3] * J->scale), y2 = (int64_t)roundf(roi[4] * J->scale);
		int64_t rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1, rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1;
		double bw = (double)rw / (double)J->pw, bh = (double)rh / (double)J->ph;
		for (int64_t c = 0; c < J->C; c++) {
			const float *x = J->x + (b * J->C + c) * J->H * J->W;
			float *y = J->y + ((int64_t)r * J->C + c) * J->ph * J->pw;
			for (int64_t i = 0; i < J->ph; i++) {
				int64_t hs = (int64_t)floor((double)i * bh) + y1, he = (int64_t)ceil((double)(i + 1) * bh) + y1;
				hs = hs < 0 ? 0 : hs > J->H ? J->H : hs;
				he = he < 0 ? 0 : he > J->H ? J->H : he;
				for (int64_t j = 0; j < J->pw; j++) {
					int64_t ws = (int64_t)floor((double)j * bw) + x1;
					int64_t we = (int64_t)ceil((double)(j + 1) * bw) + x1;
					float m = -INFINITY;
					ws = ws < 0 ? 0 : ws > J->W ? J->W : ws;
					we = we < 0 ? 0 : we > J->W ? J->W : we;
					if (he <= hs || we <= ws) {
						y[i * J->pw + j] = 0;
						continue;
					}
					for (int64_t h = hs; h < he; h++)
						for (int64_t w = ws; w < we; w++)
							if (x[h * J->W + w] > m)
								m = x[h * J->W + w];
					y[i * J->pw + j] = m;
				}
			}
		}
	}
}

int oq_nn_maxroipool(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *rois = oq_k_in(k, 1), *y;
	const int64_t *ps;
	int64_t od[4];
	roijob J;
	const float *xf, *rf;
	float *xo = NULL, *ro = NULL, *yo = NULL;
	int rc;

	if (!x || !rois)
		return oq_k_err(k, OQ_EINVAL, "inputs X and rois are required");
	if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 5)
		return oq_k_err(k, OQ_EINVAL, "needs X of rank 4 and rois of shape [num_rois, 5]");
	if (oq_k_ints(k, "pooled_shape", &ps) != 2 || ps[0] < 1 || ps[1] < 1)
		return oq_k_err(k, OQ_EINVAL, "pooled_shape must be 2 positive values");
	memset(&J, 0, sizeof J);
	J.N = x->dims[0];
	J.C = x->dims[1];
	J.H = x->dims[2];
	J.W = x->dims[3];
	J.ph = ps[0];
	J.pw = ps[1];
	J.scale = oq_k_float(k, "spatial_scale", 1.0f);
	od[0] = rois->dims[0];
	od[1] = J.C;
	od[2] = J.ph;
	od[3] = J.pw;
	if ((rc = oq_k_output(k, 0, x->dtype, 4, od, &y)))
		return rc;
	if ((rc = oq_nn_f32_in(k, x, 0, &xf, &xo)))
		return rc;
	if ((rc = oq_nn_f32_in(k, rois, 0, &rf, &ro)))
		goto done;
	for (int64_t r = 0; r < rois->dims[0]; r++) {
		float b = rf[r * 5];
		if (!(b >= 0 && b < (float)J.N)) {
			rc = oq_k_err(k, OQ_EINVAL, "roi %lld: batch index %g out of range [0, %lld)", (long long)r,
				      (double)b, (long long)J.N);
			goto done;
		}
	}
	if ((rc = oq_nn_f32_buf(k, y, &J.y, &yo)))
		goto done;
	J.x = xf;
	J.rois = rf;
	oq_k_parallel(k, (size_t)rois->dims[0], 1, roi_rows, &J);
	oq_nn_f32_out(y, yo);
done:
	free(xo);
	free(ro);
	return rc;
}
