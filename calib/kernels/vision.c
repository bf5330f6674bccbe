/*
 * vision.c - kernel family 'vision': NonMaxSuppression, RoiAlign,
 * GridSample and MaxUnpool. Specs: https://onnx.ai/onnx/operators/.
 *
 * Values are read and written through the generic element accessors
 * (float16/double inputs work unchanged); coordinates and weights are
 * computed in double, sums run in a fixed order, and every output element
 * is computed the same way whatever the thread count.
 *
 * - NonMaxSuppression (10, 11): per batch and class, candidates with
 *   score > score_threshold in descending score order (ties: lower box
 *   index first), greedily kept unless IoU > iou_threshold with a kept box,
 *   at most max_output_boxes_per_class. Boxes with zero area never suppress.
 * - RoiAlign (10, 16): average (or max) of bilinear samples on a regular
 *   grid per bin, as ONNX Runtime and the ONNX reference compute it;
 *   opset 16's coordinate_transformation_mode half_pixel shifts by -0.5,
 *   output_half_pixel (opset 10's only behaviour) does not and clamps the
 *   roi size to at least 1. Max mode takes, per sample, the largest of the
 *   four weighted corner values (ONNX Runtime's definition).
 * - GridSample (16, 20): 4-D input, modes nearest (half to even), bilinear
 *   / linear and bicubic (A = -0.75), padding zeros, border, reflection, and
 *   align_corners, following the PyTorch formulas the spec cites.
 * - MaxUnpool (9, 11): scatters X into zeros at the flat indices I (over
 *   the whole output tensor, as MaxPool's Indices output gives them).
 */
#include "calib/kernels/kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------- NonMaxSuppression */

typedef struct cand {
	double score;
	int64_t box;
} cand;

static int cand_cmp(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return x->box < y->box ? -1 : x->box > y->box;
}

/* Box b as ymin, xmin, ymax, xmax. */
static void corners(const oq_rt *boxes, size_t at, int center, double *c)
{
	double v[4];
	for (int i = 0; i < 4; i++)
		v[i] = oq_rt_get(boxes, at + (size_t)i);
	if (center) { /* x_center, y_center, width, height */
		c[0] = v[1] - v[3] / 2;
		c[1] = v[0] - v[2] / 2;
		c[2] = v[1] + v[3] / 2;
		c[3] = v[0] + v[2] / 2;
		return;
	}
	c[0] = fmin(v[0], v[2]);
	c[1] = fmin(v[1], v[3]);
	c[2] = fmax(v[0], v[2]);
	c[3] = fmax(v[1], v[3]);
}

static int suppress(const double *a, const double *b, double thr)
{
	double ih = fmin(a[2], b[2]) - fmax(a[0], b[0]), iw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
	double aa = (a[2] - a[0]) * (a[3] - a[1]), ab = (b[2] - b[0]) * (b[3] - b[1]), inter, uni;
	if (ih <= 0 || iw <= 0 || aa <= 0 || ab <= 0)
		return 0;
	inter = ih * iw;
	uni = aa + ab - inter;
	return uni > 0 && inter / uni > thr;
}

static int nms(oq_kctx *k)
{
	oq_rt *boxes = oq_k_in(k, 0), *scores = oq_k_in(k, 1), *mo = oq_k_in(k, 2), *it = oq_k_in(k, 3),
	      *st = oq_k_in(k, 4), *y;
	int center = (int)oq_k_int(k, "center_point_box", 0), rc = OQ_OK;
	int64_t maxo = 0, nb, nc, nbox, nsel = 0, od[2];
	double iou = 0, sthr = 0;
	cand *cs = NULL;
	int64_t *sel = NULL, *kept = NULL;
	double *bc = NULL;
	size_t cap = 0;

	if (center != 0 && center != 1)
		return oq_k_err(k, OQ_EINVAL, "center_point_box must be 0 or 1, not %d", center);
	if (!boxes || !scores || boxes->rank != 3 || boxes->dims[2] != 4 || scores->rank != 3 ||
	    scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
		return oq_k_err(k, OQ_EINVAL, "needs boxes [batch, boxes, 4] and scores [batch, classes, boxes]");
	if (mo && mo->nelem)
		maxo = oq_rt_get_int(mo, 0);
	if (it && it->nelem)
		iou = oq_rt_get(it, 0);
	if (st && st->nelem)
		sthr = oq_rt_get(st, 0);
	if (iou < 0 || iou > 1)
		return oq_k_err(k, OQ_EINVAL, "iou_threshold %g must be in [0, 1]", iou);
	nb = boxes->dims[0];
	nc = scores->dims[1];
	nbox = boxes->dims[1];
	if (maxo > nbox)
		maxo = nbox;
	cs = oq_calloc(nbox ? (size_t)nbox : 1, sizeof *cs);
	kept = oq_calloc(nbox ? (size_t)nbox : 1, sizeof *kept);
	bc = oq_calloc(nbox ? (size_t)nbox * 4 : 1, sizeof *bc);
	if (!cs || !kept || !bc) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	for (int64_t b = 0; maxo > 0 && b < nb; b++) {
		for (int64_t i = 0; i < nbox; i++)
			corners(boxes, (size_t)(b * nbox + i) * 4, center, bc + 4 * i);
		for (int64_t c = 0; c < nc; c++) {
			size_t n = 0, nk = 0;
			for (int64_t i = 0; i < nbox; i++) {
				double s = oq_rt_get(scores, (size_t)((b * nc + c) * nbox + i));
				if (!(st && st->nelem) || s > sthr) {
					cs[n].score = s;
					cs[n++].box = i;
				}
			}
			qsort(cs, n, sizeof *cs, cand_cmp);
			for (size_t i = 0; i < n && (int64_t)nk < maxo; i++) {
				const double *bx = bc + 4 * cs[i].box;
				int drop = 0;
				for (size_t j = 0; j < nk && !drop; j++)
					drop = suppress(bc + 4 * kept[j], bx, iou);
				if (drop)
					continue;
				kept[nk++] = cs[i].box;
				if (oq_grow(&sel, &cap, (size_t)(nsel + 1) * 3, sizeof *sel)) {
					rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
					goto done;
				}
				sel[nsel * 3] = b;
				sel[nsel * 3 + 1] = c;
				sel[nsel * 3 + 2] = cs[i].box;
				nsel++;
			}
		}
	}
	od[0] = nsel;
	od[1] = 3;
	if ((rc = oq_k_output_raw(k, 0, OQ_DT_INT64, 2, od, &y)))
		goto done;
	if (nsel)
		memcpy(y->data, sel, (size_t)nsel * 3 * sizeof *sel);
done:
	free(cs);
	free(kept);
	free(bc);
	free(sel);
	return rc;
}

/* ------------------------------------------------------------ RoiAlign */

/* Bilinear sample of plane p (h x w) at (y, x) by RoiAlign's rules; 0 outside [-1, size]. */
static void roi_sample(const oq_rt *x, size_t p, int64_t h, int64_t w, double yy, double xx, double *sum,
		       double *mx)
{
	int64_t yl, xl, yh, xh;
	double ly, lx, v[4], wt[4];
	if (!(yy >= -1.0 && yy <= (double)h && xx >= -1.0 && xx <= (double)w)) { /* NaN too */
		*sum += 0;
		*mx = fmax(*mx, 0);
		return;
	}
	if (yy <= 0)
		yy = 0;
	if (xx <= 0)
		xx = 0;
	yl = (int64_t)yy;
	xl = (int64_t)xx;
	if (yl >= h - 1) {
		yl = yh = h - 1;
		yy = (double)yl;
	} else {
		yh = yl + 1;
	}
	if (xl >= w - 1) {
		xl = xh = w - 1;
		xx = (double)xl;
	} else {
		xh = xl + 1;
	}
	ly = yy - (double)yl;
	lx = xx - (double)xl;
	wt[0] = (1 - ly) * (1 - lx);
	wt[1] = (1 - ly) * lx;
	wt[2] = ly * (1 - lx);
	wt[3] = ly * lx;
	v[0] = oq_rt_get(x, p + (size_t)(yl * w + xl));
	v[1] = oq_rt_get(x, p + (size_t)(yl * w + xh));
	v[2] = oq_rt_get(x, p + (size_t)(yh * w + xl));
	v[3] = oq_rt_get(x, p + (size_t)(yh * w + xh));
	for (int i = 0; i < 4; i++) {
		*sum += wt[i] * v[i];
		*mx = fmax(*mx, wt[i] * v[i]);
	}
}

static int roialign(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *rois = oq_k_in(k, 1), *bi = oq_k_in(k, 2), *y;
	int64_t oh = oq_k_int(k, "output_height", 1), ow = oq_k_int(k, "output_width", 1);
	int64_t sr = oq_k_int(k, "sampling_ratio", 0), od[4], nr, C, H, W;
	double scale = oq_k_float(k, "spatial_scale", 1.0f);
	const char *mode = oq_k_str(k, "mode", "avg");
	const char *ctm = k->opset >= 16 ? oq_k_str(k, "coordinate_transformation_mode", "half_pixel")
					 : "output_half_pixel";
	int half, ismax, rc;

	if (strcmp(mode, "avg") && strcmp(mode, "max"))
		return oq_k_err(k, OQ_EINVAL, "mode '%s' is not avg or max", mode);
	if (strcmp(ctm, "half_pixel") && strcmp(ctm, "output_half_pixel"))
		return oq_k_err(k, OQ_EINVAL, "coordinate_transformation_mode '%s' is not half_pixel or output_half_pixel",
				ctm);
	half = !strcmp(ctm, "half_pixel");
	ismax = !strcmp(mode, "max");
	if (!x || !rois || !bi || x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 || bi->rank != 1 ||
	    bi->dims[0] != rois->dims[0] || oq_dtype_kind(bi->dtype) != 's')
		return oq_k_err(k, OQ_EINVAL, "needs X [N, C, H, W], rois [num_rois, 4] and batch_indices [num_rois]");
	if (oh < 1 || ow < 1 || sr < 0)
		return oq_k_err(k, OQ_EINVAL, "output_height/width must be positive and sampling_ratio >= 0");
	nr = rois->dims[0];
	C = x->dims[1];
	H = x->dims[2];
	W = x->dims[3];
	od[0] = nr;
	od[1] = C;
	od[2] = oh;
	od[3] = ow;
	if ((rc = oq_k_output_raw(k, 0, x->dtype, 4, od, &y)))
		return rc;
	for (int64_t r = 0; r < nr; r++) {
		int64_t b = oq_rt_get_int(bi, (size_t)r), gh, gw;
		double off = half ? 0.5 : 0.0, x1, y1, rw, rh, bh, bw, cnt, gd, wd;
		if (b < 0 || b >= x->dims[0])
			return oq_k_err(k, OQ_EINVAL, "roi %lld: batch index %lld out of range [0, %lld)", (long long)r,
					(long long)b, (long long)x->dims[0]);
		x1 = oq_rt_get(rois, (size_t)r * 4) * scale - off;
		y1 = oq_rt_get(rois, (size_t)r * 4 + 1) * scale - off;
		rw = oq_rt_get(rois, (size_t)r * 4 + 2) * scale - off - x1;
		rh = oq_rt_get(rois, (size_t)r * 4 + 3) * scale - off - y1;
		if (!half) {
			rw = fmax(rw, 1.0);
			rh = fmax(rh, 1.0);
		}
		bh = rh / (double)oh;
		bw = rw / (double)ow;
		gd = ceil(rh / (double)oh);
		wd = ceil(rw / (double)ow);
		/* NaN or a huge roi: out of range before any conversion to an integer */
		if (sr <= 0 && !(gd >= 0 && wd >= 0 && gd <= (1 << 20) && wd <= (1 << 20)))
			return oq_k_err(k, OQ_EINVAL, "roi %lld: sampling grid out of range", (long long)r);
		gh = sr > 0 ? sr : (int64_t)gd;
		gw = sr > 0 ? sr : (int64_t)wd;
		if (gh < 0 || gw < 0 || gh > (1 << 20) || gw > (1 << 20))
			return oq_k_err(k, OQ_EINVAL, "roi %lld: sampling grid out of range", (long long)r);
		cnt = gh * gw > 0 ? (double)(gh * gw) : 1.0;
		for (int64_t c = 0; c < C; c++) {
			size_t plane = (size_t)((b * C + c) * H * W);
			for (int64_t ph = 0; ph < oh; ph++)
				for (int64_t pw = 0; pw < ow; pw++) {
					double sum = 0, mx = -INFINITY;
					for (int64_t iy = 0; iy < gh; iy++) {
						double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
						for (int64_t ix = 0; ix < gw; ix++) {
							double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
							roi_sample(x, plane, H, W, yy, xx, &sum, &mx);
						}
					}
					oq_rt_set(y, (size_t)(((r * C + c) * oh + ph) * ow + pw),
						  ismax ? (gh > 0 && gw > 0 ? mx : 0) : sum / cnt);
				}
		}
	}
	return OQ_OK;
}

/* ---------------------------------------------------------- GridSample */

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECT };

/* Reflects v into [lo2 / 2, hi2 / 2] (PyTorch reflect_coordinates). */
static double reflect(double v, double lo2, double hi2)
{
	double mn, span, extra, flips;
	if (lo2 == hi2)
		return 0;
	mn = lo2 / 2;
	span = (hi2 - lo2) / 2;
	v = fabs(v - mn);
	extra = fmod(v, span);
	flips = floor(v / span);
	return fmod(flips, 2) == 0 ? extra + mn : span - extra + mn;
}

/* Applies the padding mode to a source coordinate (border/reflection: into [0, size - 1]). */
static double gs_pad(double v, int64_t size, int pad, int align)
{
	if (pad == GS_BORDER) {
		v = fmin(fmax(v, 0), (double)(size - 1));
	} else if (pad == GS_REFLECT) {
		v = align ? reflect(v, 0, 2.0 * (double)(size - 1)) : reflect(v, -1, 2.0 * (double)size - 1);
		v = fmin(fmax(v, 0), (double)(size - 1));
	}
	return v;
}

/* Pixel (iy, ix) of plane p, 0 outside (after padding only zeros mode can be outside) or NaN. */
static double gs_px(const oq_rt *x, size_t p, int64_t h, int64_t w, double iy, double ix)
{
	if (!(iy >= 0 && iy < (double)h && ix >= 0 && ix < (double)w))
		return 0;
	return oq_rt_get(x, p + (size_t)((int64_t)iy * w + (int64_t)ix));
}

static void cubic_coeffs(double t, double *c)
{
	const double A = -0.75;
	double x;
	x = t + 1;
	c[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
	x = t;
	c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
	x = 1 - t;
	c[2] = ((A + 2) * x - (A + 3)) * x * x + 1;
	x = 2 - t;
	c[3] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

static int gridsample(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *g = oq_k_in(k, 1), *y;
	const char *ms = oq_k_str(k, "mode", k->opset >= 20 ? "linear" : "bilinear");
	const char *ps = oq_k_str(k, "padding_mode", "zeros");
	int align = oq_k_int(k, "align_corners", 0) != 0, mode, pad, rc;
	int64_t N, C, H, W, OH, OW, od[4];

	if (!strcmp(ms, "nearest"))
		mode = GS_NEAREST;
	else if (!strcmp(ms, "bilinear") || !strcmp(ms, "linear"))
		mode = GS_LINEAR;
	else if (!strcmp(ms, "bicubic") || !strcmp(ms, "cubic"))
		mode = GS_CUBIC;
	else
		return oq_k_err(k, OQ_EINVAL, "mode '%s' is not nearest, linear/bilinear or cubic/bicubic", ms);
	if (!strcmp(ps, "zeros"))
		pad = GS_ZEROS;
	else if (!strcmp(ps, "border"))
		pad = GS_BORDER;
	else if (!strcmp(ps, "reflection"))
		pad = GS_REFLECT;
	else
		return oq_k_err(k, OQ_EINVAL, "padding_mode '%s' is not zeros, border or reflection", ps);
	if (!x || !g || x->rank != 4 || g->rank != 4)
		return oq_k_err(k, x && x->rank != 4 ? OQ_EUNSUP : OQ_EINVAL,
				"needs X [N, C, H, W] and grid [N, H_out, W_out, 2] (only 2-D sampling is supported)");
	if (g->dims[0] != x->dims[0] || g->dims[3] != 2)
		return oq_k_err(k, OQ_EINVAL, "grid must be [N, H_out, W_out, 2] with X's N");
	N = x->dims[0];
	C = x->dims[1];
	H = x->dims[2];
	W = x->dims[3];
	OH = g->dims[1];
	OW = g->dims[2];
	od[0] = N;
	od[1] = C;
	od[2] = OH;
	od[3] = OW;
	if ((rc = oq_k_output_raw(k, 0, x->dtype, 4, od, &y)))
		return rc;
	for (int64_t n = 0; n < N; n++)
		for (int64_t i = 0; i < OH * OW; i++) {
			double gx = oq_rt_get(g, (size_t)((n * OH * OW + i) * 2));
			double gy = oq_rt_get(g, (size_t)((n * OH * OW + i) * 2 + 1));
			double sx = align ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
			double sy = align ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
			if (mode != GS_CUBIC) {
				sx = gs_pad(sx, W, pad, align);
				sy = gs_pad(sy, H, pad, align);
			}
			for (int64_t c = 0; c < C; c++) {
				size_t p = (size_t)((n * C + c) * H * W);
				double v;
				if (mode == GS_NEAREST) {
					v = gs_px(x, p, H, W, nearbyint(sy), nearbyint(sx));
				} else if (mode == GS_LINEAR) {
					double fx = floor(sx), fy = floor(sy), lx = sx - fx, ly = sy - fy;
					v = gs_px(x, p, H, W, fy, fx) * (1 - ly) * (1 - lx) +
					    gs_px(x, p, H, W, fy, fx + 1) * (1 - ly) * lx +
					    gs_px(x, p, H, W, fy + 1, fx) * ly * (1 - lx) +
					    gs_px(x, p, H, W, fy + 1, fx + 1) * ly * lx;
				} else {
					double fx = floor(sx), fy = floor(sy), cx[4], cy[4];
					cubic_coeffs(sx - fx, cx);
					cubic_coeffs(sy - fy, cy);
					v = 0;
					for (int a = 0; a < 4; a++) {
						double row = 0;
						for (int b = 0; b < 4; b++) {
							/* each tap is padded on its own (PyTorch get_value_bounded) */
							double tx = gs_pad(fx - 1 + b, W, pad, align),
							       ty = gs_pad(fy - 1 + a, H, pad, align);
							row += cx[b] * gs_px(x, p, H, W, ty, tx);
						}
						v += cy[a] * row;
					}
				}
				oq_rt_set(y, (size_t)(((n * C + c) * OH * OW) + i), v);
			}
		}
	return OQ_OK;
}

/* ------------------------------------------------------------ MaxUnpool */

static int maxunpool(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ind = oq_k_in(k, 1), *osh = oq_k_in(k, 2), *y;
	const int64_t *ks, *st, *pd;
	size_t nk = oq_k_ints(k, "kernel_shape", &ks), ns = oq_k_ints(k, "strides", &st),
	       np = oq_k_ints(k, "pads", &pd);
	int64_t od[OQ_RT_MAX_RANK];
	int sp, rc;

	if (!x || !ind || x->rank < 3 || ind->rank != x->rank || oq_dtype_kind(ind->dtype) != 's')
		return oq_k_err(k, OQ_EINVAL, "needs X [N, C, D...] and integer indices I of the same shape");
	for (int i = 0; i < x->rank; i++)
		if (ind->dims[i] != x->dims[i])
			return oq_k_err(k, OQ_EINVAL, "indices shape differs from X's");
	sp = x->rank - 2;
	if (nk != (size_t)sp || (ns && ns != (size_t)sp) || (np && np != 2 * (size_t)sp))
		return oq_k_err(k, OQ_EINVAL, "kernel_shape needs %d values, strides %d and pads %d", sp, sp, 2 * sp);
	if (osh) {
		if (osh->rank != 1 || osh->nelem != (size_t)x->rank)
			return oq_k_err(k, OQ_EINVAL, "output_shape must hold %d values", x->rank);
		for (int i = 0; i < x->rank; i++)
			od[i] = oq_rt_get_int(osh, (size_t)i);
		if (od[0] != x->dims[0] || od[1] != x->dims[1])
			return oq_k_err(k, OQ_EINVAL, "output_shape must keep X's N and C");
	} else {
		od[0] = x->dims[0];
		od[1] = x->dims[1];
		for (int i = 0; i < sp; i++) {
			int64_t s = ns ? st[i] : 1, p = np ? pd[i] + pd[i + sp] : 0;
			if (s < 1 || ks[i] < 1 || x->dims[i + 2] > INT64_MAX / s / 2)
				return oq_k_err(k, OQ_EINVAL, "kernel_shape and strides must be positive");
			od[i + 2] = (x->dims[i + 2] - 1) * s - p + ks[i];
		}
	}
	for (int i = 0; i < x->rank; i++)
		if (od[i] < 0)
			return oq_k_err(k, OQ_EINVAL, "output dim %d would be %lld", i, (long long)od[i]);
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, od, &y)))
		return rc;
	for (size_t i = 0; i < x->nelem; i++) {
		int64_t at = oq_rt_get_int(ind, i);
		if (at < 0 || (uint64_t)at >= y->nelem)
			return oq_k_err(k, OQ_EINVAL, "index %lld at element %zu is outside the output (%zu elements)",
					(long long)at, i, y->nelem);
		oq_rt_set(y, (size_t)at, oq_rt_get(x, i));
	}
	return OQ_OK;
}

const oq_kreg oq_kernels_vision[] = {
	{OQ_OP_NonMaxSuppression, 0, nms},
	{OQ_OP_RoiAlign, 0, roialign},
	{OQ_OP_GridSample, 0, gridsample},
	{OQ_OP_MaxUnpool, 0, maxunpool},
	{OQ_OP_UNKNOWN, 0, NULL},
};
