/*
 * qparams.h - scale and zero point from a range, for every grid onnxq
 * offers (REFERENCE.md section 2), and the Q arithmetic itself.
 *
 * Asymmetric (ONNX Runtime compute_scale_zp): rmin = min(min, 0),
 *   rmax = max(max, 0), scale = (rmax - rmin) / (qmax - qmin) in double,
 *   zp = round_half_even(qmin - rmin / scale), so 0.0 is exactly representable.
 * Symmetric narrow (ORT symmetric=True): the same formula on [-absmax, absmax]
 *   over ORT's symmetric grid: signed [-(2^(b-1)-1), 2^(b-1)-1] (zp 0,
 *   scale = absmax / (2^(b-1)-1)); unsigned [0, 2^b-2], which gives the mid
 *   point zp = 2^(b-1)-1 (uint8: [0,254] zp 127, as ORT's
 *   ONNX_INT_TYPE_SYMMETRIC_RANGE; not Quark's 128).
 * Symmetric full (AIMET): signed [-2^(b-1), 2^(b-1)-1], zp 0,
 *   scale = max(max / qmax, -min / -qmin); unsigned: zp 0 and
 *   scale = max / qmax (negatives clamp to 0, AIMET's "symmetric unsigned").
 * reduce_range uses ORT's 7-bit grids (uint8 [0,127], int8 [-64,64], and
 *   the same halving for the other widths); a symmetric signed grid is
 *   narrowed to [-m, m], m = min(-qmin, qmax).
 * A scale below FLT_MIN (e.g. min == max == 0) becomes 1 (ORT) with the
 * form's zero point (0, or the mid point for unsigned symmetric narrow).
 */
#ifndef OQ_QPARAMS_H
#define OQ_QPARAMS_H

#include <math.h>
#include <stdint.h>

#include "oq.h"

/* Grid limits of a quantized dtype; reduce_range gives ORT's 7-bit ranges. 1 on success,
 * 0 for unsupported types (outputs untouched). */
int oq_qrange(int dtype, int reduce_range, int64_t *qmin, int64_t *qmax);

enum { OQ_QP_ASYM = 0, OQ_QP_SYM_NARROW, OQ_QP_SYM_FULL };

/* The [qmin, qmax] grid that a form uses (narrowed for symmetric narrow); 1 on success, else 0. */
int oq_qgrid(int dtype, int form, int reduce_range, int64_t *qmin, int64_t *qmax);

/* Scale and zero point for [min, max] on dtype's grid with the given form. OQ_EINVAL for bad input
 * (NaN, min > max, unknown dtype/form); +-Inf is clamped to +-FLT_MAX/2 as ORT does. */
int oq_qparams(double min, double max, int dtype, int form, int reduce_range, float *scale,
	       int64_t *zp) OQ_WUR;

/* round_half_to_even(x / scale) + zp, saturated to [qmin, qmax]: MLAS's float32 loop
 * (nearbyintf(x / scale) + zp, then clamp); NaN gives zp. Inline: it runs once per weight. */
static inline int64_t oq_quantize_value(float x, float scale, int64_t zp, int64_t qmin,
					int64_t qmax)
{
	float v = rintf(x / scale);

	if (v != v) /* NaN */
		return zp < qmin ? qmin : zp > qmax ? qmax : zp;
	v += (float)zp;
	if (v <= (float)qmin)
		return qmin;
	if (v >= (float)qmax)
		return qmax;
	return (int64_t)v;
}

#endif
