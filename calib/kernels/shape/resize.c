/*
 * resize.c - Resize (opsets 10, 11, 13, 18, 19) and the deprecated
 * Upsample (7: scales attribute, 9: scales input).
 *
 * Follows the ONNX reference (onnx/backend/test/case/node/resize.py,
 * onnx/reference/ops/op_resize.py): interpolation is separable, so each
 * axis gets, per output coordinate, a short list of (source index, weight)
 * taps and an output element is the sum over the tensor product of its
 * axes' taps. Per axis and output coordinate x:
 *   x_ori   = coordinate_transformation_mode(x)      (computed in double,
 *             rounded to float32 like onnxruntime, so nearest breaks ties
 *             such as (3 + 0.5) / 0.7f - 0.5 = 4.5 the way it does)
 *   ratio   = x_ori - floor(x_ori), or 1 when x_ori is an integer, so the
 *             taps sit at base-n/2+1 .. base+n/2 with base = x_ori - ratio
 *   weights = nearest / linear / cubic(A) coefficients of ratio (antialias:
 *             the stretched kernel of width n > 4 when downsampling)
 *   indices outside [0, W) read the edge (numpy 'edge' padding);
 *   exclude_outside zeroes their weights and renormalises.
 * tf_crop_and_resize returns extrapolation_value when x_ori leaves
 * [0, W-1] on any axis. align_corners and the "output length is 1" checks
 * use the fractional length scale*W as the reference does.
 *
 * Before opset 11 (and for Upsample) the coordinates are asymmetric and
 * nearest picks floor(x_ori) when upsampling, ceil(x_ori) when downsampling
 * (onnxruntime's behaviour for these versions).
 * Output lengths are floor(W * scale) in float32 (onnxruntime; see out_len).
 * Nearest copies elements (any dtype); linear and cubic compute in double
 * and store floats rounded, integers truncated (numpy astype).
 */
#include "calib/kernels/shape/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXR OQ_RT_MAX_RANK

enum { M_NEAREST, M_LINEAR, M_CUBIC };
enum { C_HALF_PIXEL, C_HALF_PIXEL_SYM, C_PYTORCH, C_ALIGN, C_ASYM, C_TF_NN, C_TF_CROP };
enum { N_ROUND_FLOOR, N_ROUND_CEIL, N_FLOOR, N_CEIL, N_SIMPLE };

typedef struct rparams {
	int mode, ctm, nearest, exclude, antialias;
	double cubic_a, extrapolation;
} rparams;

/* Taps of one axis: for output coordinate x, cnt[x] taps at idx[x*n ..], w[x*n ..]. */
typedef struct axis_taps {
	int n;           /* taps per coordinate before pruning */
	int *cnt;
	int64_t *idx;    /* element offsets (source index * stride) */
	double *w;
	char *extrap;    /* 1: this coordinate is outside the crop box */
} axis_taps;

int oq_sh_resize_ref;

static double cubic_kernel(double x, double A)
{
	x = fabs(x);
	if (x <= 1)
		return ((A + 2) * x - (A + 3)) * x * x + 1;
	if (x < 2)
		return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
	return 0;
}

/* Coefficients for ratio in (0, 1]; returns the count. c has room for 4 + 4/scale taps. */
static int coeffs(const rparams *p, double ratio, double scale, double *c, int maxc)
{
	if (p->mode == M_LINEAR && p->antialias && scale < 1) {
		int start = (int)floor(-1 / scale) + 1, n = 2 - 2 * start;
		double sum = 0;
		if (n > maxc)
			return -1;
		for (int i = 0; i < n; i++) {
			double v = 1 - fabs(((double)(start + i) - ratio) * scale);
			c[i] = v < 0 ? 0 : v > 1 ? 1 : v;
			sum += c[i];
		}
		for (int i = 0; i < n; i++)
			c[i] /= sum;
		return n;
	}
	if (p->mode == M_CUBIC && p->antialias && scale < 1) {
		int start = (int)floor(-2 / scale) + 1, end = 2 - start, n = end - start;
		double sum = 0;
		if (n > maxc)
			return -1;
		for (int i = 0; i < n; i++) {
			c[i] = cubic_kernel(scale * ((double)(start + i) - ratio), p->cubic_a);
			sum += c[i];
		}
		for (int i = 0; i < n; i++)
			c[i] /= sum;
		return n;
	}
	if (p->mode == M_LINEAR) {
		c[0] = 1 - ratio;
		c[1] = ratio;
		return 2;
	}
	if (p->mode == M_CUBIC) {
		double A = p->cubic_a, r1 = ratio + 1, r0 = 1 - ratio, r2 = r0 + 1;
		c[0] = ((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A;
		c[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
		c[2] = ((A + 2) * r0 - (A + 3)) * r0 * r0 + 1;
		c[3] = ((A * r2 - 5 * A) * r2 + 8 * A) * r2 - 4 * A;
		return 4;
	}
	/* nearest: [floor, floor + 1] */
	c[0] = 0;
	c[1] = 1;
	if (ratio == 1)
		return 2;
	switch (p->nearest) {
	case N_ROUND_FLOOR: c[0] = ratio <= 0.5; break;
	case N_ROUND_CEIL: c[0] = ratio < 0.5; break;
	case N_FLOOR: c[0] = 1; break;
	case N_CEIL: c[0] = 0; break;
	default: c[0] = scale < 1 ? 0 : 1; break; /* SIMPLE: ceil when downsampling */
	}
	c[1] = 1 - c[0];
	return 2;
}

/* Maps output coordinate x to the input; returns 0 when tf_crop_and_resize leaves the box. */
static int transform(const rparams *p, double x, int64_t W, int64_t O, double s, double r0, double r1,
		     double *out)
{
	double ow = s * (double)W, xo;
	switch (p->ctm) {
	case C_HALF_PIXEL_SYM: {
		double adj = (double)O / ow, center = (double)W / 2, off = center * (1 - adj);
		xo = off + (x + 0.5) / s - 0.5;
		break;
	}
	case C_PYTORCH:
		xo = ow == 1 ? -0.5 : (x + 0.5) / s - 0.5;
		break;
	case C_ALIGN:
		xo = ow == 1 ? 0 : x * (double)(W - 1) / (ow - 1);
		break;
	case C_ASYM:
		xo = x / s;
		break;
	case C_TF_NN:
		xo = (x + 0.5) / s;
		break;
	case C_TF_CROP:
		if (ow == 1)
			xo = (r1 - r0) * (double)(W - 1) / 2;
		else
			xo = x * (r1 - r0) * (double)(W - 1) / (ow - 1);
		xo += r0 * (double)(W - 1);
		xo = (float)xo;
		*out = xo;
		return !(xo < 0 || xo > (double)(W - 1));
	default:
		xo = (x + 0.5) / s - 0.5;
		break;
	}
	*out = (float)xo;
	return 1;
}

static void free_taps(axis_taps *t)
{
	free(t->cnt);
	free(t->idx);
	free(t->w);
	free(t->extrap);
	memset(t, 0, sizeof *t);
}

/* Builds taps for one axis; nonzero weights only (a nearest axis gets one tap). */
static int make_taps(const rparams *p, int64_t W, int64_t O, double s, double r0, double r1, int64_t stride,
		     axis_taps *t)
{
	int maxc = 4;
	double c[4096];

	if (p->antialias && s < 1 && p->mode != M_NEAREST) {
		double m = (p->mode == M_CUBIC ? 4 : 2) / s + 4;
		if (m > 4096)
			return OQ_EUNSUP;
		maxc = (int)m;
	}
	t->n = maxc;
	t->cnt = calloc((size_t)O + 1, sizeof *t->cnt);
	t->idx = calloc(((size_t)O + 1) * (size_t)maxc, sizeof *t->idx);
	t->w = calloc(((size_t)O + 1) * (size_t)maxc, sizeof *t->w);
	t->extrap = calloc((size_t)O + 1, 1);
	if (!t->cnt || !t->idx || !t->w || !t->extrap)
		return OQ_ENOMEM;
	for (int64_t x = 0; x < O; x++) {
		double xo, ratio, sum = 0;
		int64_t base, start, pad;
		int n, m = 0;
		if (!transform(p, (double)x, W, O, s, r0, r1, &xo)) {
			t->extrap[x] = 1;
			continue;
		}
		base = (int64_t)floor(xo);
		ratio = xo - (double)base;
		if (ratio == 0) {
			ratio = 1;
			base -= 1;
		}
		n = coeffs(p, ratio, s, c, maxc);
		if (n < 0)
			return OQ_EUNSUP;
		/* the n nearest positions of the edge-padded axis */
		pad = (n + 1) / 2;
		start = base - n / 2 + 1;
		if (start > W + pad - n)
			start = W + pad - n;
		if (start < -pad)
			start = -pad;
		if (p->exclude) {
			for (int i = 0; i < n; i++)
				if (start + i < 0 || start + i >= W)
					c[i] = 0;
			for (int i = 0; i < n; i++)
				sum += c[i];
			for (int i = 0; i < n && sum != 0; i++)
				c[i] /= sum;
		}
		for (int i = 0; i < n; i++) {
			int64_t j = start + i;
			if (c[i] == 0)
				continue;
			j = j < 0 ? 0 : j >= W ? W - 1 : j;
			t->idx[x * maxc + m] = j * stride;
			t->w[x * maxc + m] = c[i];
			m++;
		}
		t->cnt[x] = m;
	}
	return OQ_OK;
}

typedef struct rjob {
	const oq_rt *x;
	oq_rt *y;
	int rank;
	const axis_taps *ax;
	double extrapolation;
	int nearest;     /* copy the single tap instead of computing */
	int rc;
} rjob;

static double rd(const oq_rt *t, int64_t i)
{
	return t->dtype == OQ_DT_FLOAT ? (double)((const float *)t->data)[i] : oq_rt_get(t, (size_t)i);
}

/* Integer outputs truncate toward zero (numpy astype, onnxruntime static_cast), then saturate. */
static void wr(oq_rt *t, size_t i, double v)
{
	char kind = oq_dtype_kind(t->dtype);
	if (t->dtype == OQ_DT_FLOAT)
		((float *)t->data)[i] = (float)v;
	else
		oq_rt_set(t, i, kind == 's' || kind == 'u' ? trunc(v) : v);
}

/* Output length floor(W * scale) computed in float32, as onnxruntime does: a float32 scale
 * like 1.4f (1.39999998) times 5 gives 7, the length the exporter meant, where double gives 6. */
static int64_t out_len(double scale, int64_t W)
{
	float v = (float)scale * (float)W;
	if (!(v >= 0) || v > 1e15f) /* NaN, negative or absurd: -1 is rejected as a dim */
		return -1;
	return (int64_t)floorf(v);
}

static void run_range(void *ctx, size_t begin, size_t end)
{
	rjob *j = ctx;
	int r = j->rank;
	int64_t c[MAXR], rem = (int64_t)begin;

	for (int a = r - 1; a >= 0; a--) {
		c[a] = rem % j->y->dims[a];
		rem /= j->y->dims[a];
	}
	for (size_t e = begin; e < end; e++) {
		int extrap = 0, multi[MAXR], nm = 0;
		int64_t off = 0;
		double w = 1;

		for (int a = 0; a < r; a++) {
			const axis_taps *t = &j->ax[a];
			if (t->extrap[c[a]]) {
				extrap = 1;
				break;
			}
			if (t->cnt[c[a]] == 1) {
				off += t->idx[c[a] * t->n];
				w *= t->w[c[a] * t->n];
			} else {
				multi[nm++] = a;
			}
		}
		if (extrap) {
			wr(j->y, e, j->extrapolation);
		} else if (j->nearest) {
			int rc = oq_sh_copy(j->y, e, j->x, (size_t)off, 1);
			if (rc)
				j->rc = rc;
		} else if (nm == 0) {
			wr(j->y, e, w * rd(j->x, off));
		} else {
			/* odometer over the axes with several taps */
			int tp[MAXR] = {0};
			double sum = 0;
			for (;;) {
				int64_t o = off;
				double ww = w;
				int i;
				for (i = 0; i < nm; i++) {
					const axis_taps *t = &j->ax[multi[i]];
					int64_t at = c[multi[i]] * t->n + tp[i];
					o += t->idx[at];
					ww *= t->w[at];
				}
				sum += ww * rd(j->x, o);
				for (i = nm - 1; i >= 0; i--) {
					if (++tp[i] < j->ax[multi[i]].cnt[c[multi[i]]])
						break;
					tp[i] = 0;
				}
				if (i < 0)
					break;
			}
			wr(j->y, e, sum);
		}
		for (int a = r - 1; a >= 0; a--) {
			if (++c[a] < j->y->dims[a])
				break;
			c[a] = 0;
		}
	}
}

/*
 * Linear/cubic over whole rows: the outer axes' taps of a row combine into
 * at most MAXCOMBO (source row offset, weight) pairs, then each output of
 * the row sums weight * last-axis taps over them. Same math as run_range,
 * which stays as the reference (oq_sh_resize_ref) for rows with more pairs.
 */
#define MAXCOMBO 64

static void interp_rows(void *ctx, size_t begin, size_t end)
{
	rjob *j = ctx;
	int r = j->rank, last = r - 1;
	const axis_taps *lt = &j->ax[last];
	int64_t c[MAXR], rem = (int64_t)begin, W = j->y->dims[last];
	int64_t co[MAXCOMBO];
	double cw[MAXCOMBO];
	/* float to float: direct loads and stores; two: every last-axis coordinate has 2 taps, none extrapolated */
	int f32 = j->x->dtype == OQ_DT_FLOAT && j->y->dtype == OQ_DT_FLOAT, two = 1;
	const float *src = j->x->data;
	float *dst = j->y->data;

	for (int64_t x = 0; x < W && two; x++)
		two = lt->cnt[x] == 2 && !lt->extrap[x];
	for (int a = last - 1; a >= 0; a--) {
		c[a] = rem % j->y->dims[a];
		rem /= j->y->dims[a];
	}
	for (size_t row = begin; row < end; row++) {
		int nc = 1, extrap = 0;
		size_t o = row * (size_t)W;
		co[0] = 0;
		cw[0] = 1;
		for (int a = 0; a < last && !extrap && nc > 0; a++) {
			const axis_taps *t = &j->ax[a];
			int n = t->cnt[c[a]], m = 0;
			if (t->extrap[c[a]]) {
				extrap = 1;
				break;
			}
			if (nc * n > MAXCOMBO) {
				nc = -1;
				break;
			}
			for (int i = nc - 1; i >= 0; i--) /* expand in place, last first */
				for (int q = n - 1; q >= 0; q--) {
					co[i * n + q] = co[i] + t->idx[c[a] * t->n + q];
					cw[i * n + q] = cw[i] * t->w[c[a] * t->n + q];
					m++;
				}
			nc = m;
		}
		if (extrap) {
			for (int64_t x = 0; x < W; x++)
				wr(j->y, o + (size_t)x, j->extrapolation);
		} else if (nc < 0) {
			run_range(j, o, o + (size_t)W);
		} else if (f32 && two && nc == 2) {
			/* the bilinear case: same products and sum order as the loop below */
			const float *r0 = src + co[0], *r1 = src + co[1];
			float *d = dst + o;
			double c0 = cw[0], c1 = cw[1];
			for (int64_t x = 0; x < W; x++) {
				const int64_t *li = lt->idx + x * lt->n;
				const double *lw = lt->w + x * lt->n;
				double sum = 0;
				sum += c0 * lw[0] * (double)r0[li[0]];
				sum += c0 * lw[1] * (double)r0[li[1]];
				sum += c1 * lw[0] * (double)r1[li[0]];
				sum += c1 * lw[1] * (double)r1[li[1]];
				d[x] = (float)sum;
			}
		} else if (f32) {
			float *d = dst + o;
			for (int64_t x = 0; x < W; x++) {
				const int64_t *li = lt->idx + x * lt->n;
				const double *lw = lt->w + x * lt->n;
				double sum = 0;
				if (lt->extrap[x]) {
					d[x] = (float)j->extrapolation;
					continue;
				}
				for (int k = 0; k < nc; k++)
					for (int q = 0; q < lt->cnt[x]; q++)
						sum += cw[k] * lw[q] * (double)src[co[k] + li[q]];
				d[x] = (float)sum;
			}
		} else {
			for (int64_t x = 0; x < W; x++) {
				const int64_t *li = lt->idx + x * lt->n;
				const double *lw = lt->w + x * lt->n;
				double sum = 0;
				if (lt->extrap[x]) {
					wr(j->y, o + (size_t)x, j->extrapolation);
					continue;
				}
				for (int k = 0; k < nc; k++)
					for (int q = 0; q < lt->cnt[x]; q++)
						sum += cw[k] * lw[q] * rd(j->x, co[k] + li[q]);
				wr(j->y, o + (size_t)x, sum);
			}
		}
		for (int a = last - 1; a >= 0; a--) {
			if (++c[a] < j->y->dims[a])
				break;
			c[a] = 0;
		}
	}
}

/*
 * Nearest over whole rows: outer axes give one source row, the last axis a
 * gather. An output row whose source row (and extrapolation) equals the
 * previous row's, as in an integer upsampling, is a copy of that row.
 */
static void nearest_rows(void *ctx, size_t begin, size_t end)
{
	rjob *j = ctx;
	int r = j->rank, last = r - 1;
	const axis_taps *lt = &j->ax[last];
	int64_t c[MAXR], rem = (int64_t)begin, W = j->y->dims[last], prev_off = -1;
	size_t e = (size_t)oq_dtype_bits(j->x->dtype) / 8;
	const unsigned char *src = j->x->data;
	unsigned char *dst = j->y->data;
	int lt_extrap = 0, prev_extrap = -1;

	for (int64_t x = 0; x < W; x++)
		lt_extrap |= lt->extrap[x];
	for (int a = last - 1; a >= 0; a--) {
		c[a] = rem % j->y->dims[a];
		rem /= j->y->dims[a];
	}
	for (size_t row = begin; row < end; row++) {
		int64_t off = 0;
		int extrap = 0;
		unsigned char *d = dst + row * (size_t)W * e;
		for (int a = 0; a < last; a++) {
			if (j->ax[a].extrap[c[a]])
				extrap = 1;
			off += j->ax[a].idx[c[a] * j->ax[a].n];
		}
		if (row > begin && off == prev_off && extrap == prev_extrap) {
			memcpy(d, d - (size_t)W * e, (size_t)W * e);
		} else if (!extrap && !lt_extrap && e == 4) {
			uint32_t *d32 = (uint32_t *)(void *)d;
			const uint32_t *s32 = (const uint32_t *)(const void *)src + off;
			for (int64_t x = 0; x < W; x++)
				d32[x] = s32[lt->idx[x * lt->n]];
		} else {
			for (int64_t x = 0; x < W; x++) {
				if (extrap || lt->extrap[x])
					wr(j->y, row * (size_t)W + (size_t)x, j->extrapolation);
				else
					memcpy(d + (size_t)x * e, src + (size_t)(off + lt->idx[x * lt->n]) * e, e);
			}
		}
		prev_off = off;
		prev_extrap = extrap;
		for (int a = last - 1; a >= 0; a--) {
			if (++c[a] < j->y->dims[a])
				break;
			c[a] = 0;
		}
	}
}

/* Runs the resize once scales (per axis), output dims and roi are known. */
static int resize_run(oq_kctx *k, const rparams *p, oq_rt *x, const double *scale, const int64_t *odims,
		      const double *roi)
{
	axis_taps ax[MAXR];
	int64_t xs[MAXR];
	oq_rt *y;
	rjob j;
	int rc = OQ_OK;
	char kind = oq_dtype_kind(x->dtype);

	memset(ax, 0, sizeof ax);
	if (p->mode != M_NEAREST && (kind != 'f' || oq_dtype_is_float8(x->dtype) || oq_dtype_bits(x->dtype) < 16) &&
	    kind != 's' && kind != 'u')
		return oq_k_err(k, OQ_EUNSUP, "%s interpolation of %s is not supported",
				p->mode == M_LINEAR ? "linear" : "cubic", oq_dtype_name(x->dtype));
	for (int a = 0; a < x->rank; a++)
		if (!(scale[a] > 0) || !isfinite(scale[a]) || odims[a] < 0)
			return oq_k_err(k, OQ_EINVAL, "scale %g for axis %d is not usable (must be positive and give "
						      "a representable length)", scale[a], a);
	/* nearest_rows writes every element (extrapolated ones too) */
	if ((rc = (p->mode == M_NEAREST && x->rank > 0 && x->dtype != OQ_DT_STRING && !oq_dtype_is_subbyte(x->dtype)
			   ? oq_k_output_raw
			   : oq_k_output)(k, 0, x->dtype, x->rank, odims, &y)))
		return rc;
	if (y->nelem == 0)
		return OQ_OK;
	if (x->nelem == 0)
		return oq_k_err(k, OQ_EINVAL, "cannot resize an empty input to a non-empty output");
	oq_sh_strides(x->rank, x->dims, xs);
	for (int a = 0; a < x->rank; a++) {
		if ((rc = make_taps(p, x->dims[a], odims[a], scale[a], roi ? roi[a] : 0, roi ? roi[a + x->rank] : 1,
				    xs[a], &ax[a]))) {
			rc = oq_k_err(k, rc, rc == OQ_ENOMEM ? "out of memory" : "antialias kernel too wide");
			goto done;
		}
	}
	j.x = x;
	j.y = y;
	j.rank = x->rank;
	j.ax = ax;
	j.extrapolation = p->extrapolation;
	j.nearest = p->mode == M_NEAREST;
	j.rc = OQ_OK;
	if (x->dtype == OQ_DT_STRING || oq_dtype_is_subbyte(x->dtype)) {
		run_range(&j, 0, y->nelem);
	} else if (j.nearest && x->rank > 0) {
		size_t w = (size_t)y->dims[x->rank - 1], rows = y->nelem / w;
		oq_k_parallel(k, rows, w >= 8192 ? 1 : 8192 / w, nearest_rows, &j);
	} else if (!oq_sh_resize_ref && x->rank > 0) {
		size_t w = (size_t)y->dims[x->rank - 1], rows = y->nelem / w;
		oq_k_parallel(k, rows, w >= 2048 ? 1 : 2048 / w, interp_rows, &j);
	} else {
		oq_k_parallel(k, y->nelem, 4096, run_range, &j);
	}
	if (j.rc)
		rc = oq_k_err(k, j.rc, "out of memory");
done:
	for (int a = 0; a < x->rank; a++)
		free_taps(&ax[a]);
	return rc;
}

static int parse_mode(oq_kctx *k, rparams *p)
{
	const char *m = oq_k_str(k, "mode", "nearest");
	if (!strcmp(m, "nearest"))
		p->mode = M_NEAREST;
	else if (!strcmp(m, "linear") || (!strcmp(m, "bilinear") && k->node->op == OQ_OP_Upsample))
		p->mode = M_LINEAR;
	else if (!strcmp(m, "cubic") && k->node->op == OQ_OP_Resize && k->opset >= 11)
		p->mode = M_CUBIC;
	else
		return oq_k_err(k, OQ_EINVAL, "unknown mode '%s'", m);
	return OQ_OK;
}

/* Reads a float tensor (float, float16, double) of n values into v. */
static int read_floats(oq_kctx *k, const oq_rt *t, const char *what, double *v, size_t n)
{
	if (oq_dtype_kind(t->dtype) != 'f')
		return oq_k_err(k, OQ_EINVAL, "'%s' must be a float tensor, not %s", what, oq_dtype_name(t->dtype));
	if (t->nelem != n)
		return oq_k_err(k, OQ_EINVAL, "'%s' has %zu values, %zu expected", what, t->nelem, n);
	for (size_t i = 0; i < n; i++)
		v[i] = oq_rt_get(t, i);
	return OQ_OK;
}

/* Resize-10 and Upsample share this: asymmetric, SIMPLE nearest, output floor(W * scale). */
static int resize_old(oq_kctx *k, oq_rt *x, const double *scale)
{
	rparams p;
	int64_t od[MAXR];
	int rc;
	memset(&p, 0, sizeof p);
	if ((rc = parse_mode(k, &p)))
		return rc;
	p.ctm = C_ASYM;
	p.nearest = N_SIMPLE;
	for (int a = 0; a < x->rank; a++)
		od[a] = out_len(scale[a], x->dims[a]);
	return resize_run(k, &p, x, scale, od, NULL);
}

int oq_k_upsample(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0);
	double s[MAXR];
	int rc;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if (k->opset < 7)
		return oq_k_err(k, OQ_EUNSUP, "Upsample-1 (height_scale/width_scale) is not supported");
	if (k->opset < 9) {
		const float *f;
		size_t n = oq_k_floats(k, "scales", &f);
		if (n != (size_t)x->rank)
			return oq_k_err(k, OQ_EINVAL, "attribute 'scales' has %zu values for rank %d", n, x->rank);
		for (size_t i = 0; i < n; i++)
			s[i] = f[i];
	} else {
		if (!oq_k_in(k, 1))
			return oq_k_err(k, OQ_EINVAL, "input 'scales' is missing");
		if ((rc = read_floats(k, oq_k_in(k, 1), "scales", s, (size_t)x->rank)))
			return rc;
	}
	for (int i = 0; i < x->rank; i++)
		if (!(s[i] >= 1))
			return oq_k_err(k, OQ_EINVAL, "Upsample scale %g for axis %d must be >= 1", s[i], i);
	return resize_old(k, x, s);
}

int oq_k_resize(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *roi_t, *sc_t, *sz_t;
	rparams p;
	double scale[MAXR], roi[2 * MAXR], given[2 * MAXR];
	int64_t od[MAXR], axes[MAXR], sizes[MAXR];
	size_t na = 0, n;
	const char *s;
	int rc, r;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	r = x->rank;
	if (k->opset < 11) {
		if (!oq_k_in(k, 1))
			return oq_k_err(k, OQ_EINVAL, "input 'scales' is missing");
		if ((rc = read_floats(k, oq_k_in(k, 1), "scales", scale, (size_t)r)))
			return rc;
		return resize_old(k, x, scale);
	}
	memset(&p, 0, sizeof p);
	if ((rc = parse_mode(k, &p)))
		return rc;
	s = oq_k_str(k, "coordinate_transformation_mode", "half_pixel");
	if (!strcmp(s, "half_pixel"))
		p.ctm = C_HALF_PIXEL;
	else if (!strcmp(s, "half_pixel_symmetric") && k->opset >= 19)
		p.ctm = C_HALF_PIXEL_SYM;
	else if (!strcmp(s, "pytorch_half_pixel"))
		p.ctm = C_PYTORCH;
	else if (!strcmp(s, "align_corners"))
		p.ctm = C_ALIGN;
	else if (!strcmp(s, "asymmetric"))
		p.ctm = C_ASYM;
	else if (!strcmp(s, "tf_half_pixel_for_nn") && k->opset < 13)
		p.ctm = C_TF_NN;
	else if (!strcmp(s, "tf_crop_and_resize"))
		p.ctm = C_TF_CROP;
	else
		return oq_k_err(k, OQ_EINVAL, "unknown coordinate_transformation_mode '%s'", s);
	s = oq_k_str(k, "nearest_mode", "round_prefer_floor");
	if (!strcmp(s, "round_prefer_floor"))
		p.nearest = N_ROUND_FLOOR;
	else if (!strcmp(s, "round_prefer_ceil"))
		p.nearest = N_ROUND_CEIL;
	else if (!strcmp(s, "floor"))
		p.nearest = N_FLOOR;
	else if (!strcmp(s, "ceil"))
		p.nearest = N_CEIL;
	else
		return oq_k_err(k, OQ_EINVAL, "unknown nearest_mode '%s'", s);
	p.cubic_a = oq_k_float(k, "cubic_coeff_a", -0.75f);
	p.exclude = p.mode != M_NEAREST && oq_k_int(k, "exclude_outside", 0) != 0;
	p.extrapolation = oq_k_float(k, "extrapolation_value", 0);
	p.antialias = k->opset >= 18 && oq_k_int(k, "antialias", 0) != 0;
	if (p.antialias && p.mode == M_NEAREST)
		return oq_k_err(k, OQ_EINVAL, "antialias is not defined for mode 'nearest'");

	/* axes (18+): the listed axes take the given scales/sizes/roi, the rest stay */
	if (k->opset >= 18 && oq_k_attr(k, "axes")) {
		const int64_t *a;
		char seen[MAXR] = {0};
		na = oq_k_ints(k, "axes", &a);
		if (na > (size_t)r)
			return oq_k_err(k, OQ_EINVAL, "axes has %zu entries for rank %d", na, r);
		for (size_t i = 0; i < na; i++) {
			int v = oq_axis(a[i], r);
			if (v < 0 || seen[v])
				return oq_k_err(k, OQ_EINVAL, "axes[%zu] = %lld is out of range or repeated", i,
						(long long)a[i]);
			seen[v] = 1;
			axes[i] = v;
		}
	} else {
		na = (size_t)r;
		for (int i = 0; i < r; i++)
			axes[i] = i;
	}
	roi_t = oq_k_in(k, 1);
	sc_t = oq_k_in(k, 2);
	sz_t = oq_k_in(k, 3);
	if (sc_t && sc_t->nelem == 0)
		sc_t = NULL;
	if (sz_t && sz_t->nelem == 0)
		sz_t = NULL;
	if ((sc_t != NULL) == (sz_t != NULL))
		return oq_k_err(k, OQ_EINVAL, "exactly one of 'scales' and 'sizes' must be given");
	for (int i = 0; i < r; i++) {
		roi[i] = 0;
		roi[i + r] = 1;
		scale[i] = 1;
		od[i] = x->dims[i];
	}
	if (p.ctm == C_TF_CROP && roi_t && roi_t->nelem) {
		if ((rc = read_floats(k, roi_t, "roi", given, 2 * na)))
			return rc;
		for (size_t i = 0; i < na; i++) {
			roi[axes[i]] = given[i];
			roi[axes[i] + r] = given[i + na];
		}
	}
	if (sc_t) {
		if ((rc = read_floats(k, sc_t, "scales", given, na)))
			return rc;
		for (size_t i = 0; i < na; i++) {
			scale[axes[i]] = given[i];
			od[axes[i]] = out_len(given[i], x->dims[axes[i]]);
		}
	} else {
		const char *pol = k->opset >= 18 ? oq_k_str(k, "keep_aspect_ratio_policy", "stretch") : "stretch";
		if ((rc = oq_sh_read_ints(k, sz_t, "sizes", sizes, MAXR, &n)))
			return rc;
		if (n != na)
			return oq_k_err(k, OQ_EINVAL, "'sizes' has %zu values, %zu expected", n, na);
		for (size_t i = 0; i < na; i++) {
			int64_t a = axes[i];
			if (sizes[i] < 0)
				return oq_k_err(k, OQ_EINVAL, "sizes[%zu] is negative", i);
			od[a] = sizes[i];
			scale[a] = x->dims[a] ? (double)sizes[i] / (double)x->dims[a] : 1;
		}
		if (strcmp(pol, "stretch")) {
			double sc;
			if (strcmp(pol, "not_larger") && strcmp(pol, "not_smaller"))
				return oq_k_err(k, OQ_EINVAL, "unknown keep_aspect_ratio_policy '%s'", pol);
			sc = scale[axes[0]];
			for (size_t i = 1; i < na; i++) {
				double v = scale[axes[i]];
				if (pol[4] == 'l' ? v < sc : v > sc) /* not_larger: min, not_smaller: max */
					sc = v;
			}
			for (size_t i = 0; i < na; i++) {
				scale[axes[i]] = sc;
				od[axes[i]] = (int64_t)(sc * (double)x->dims[axes[i]] + 0.5);
			}
		}
	}
	return resize_run(k, &p, x, scale, od, p.ctm == C_TF_CROP ? roi : NULL);
}
