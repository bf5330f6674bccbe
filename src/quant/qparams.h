/*
 * qparams.h - scale and zero point from a range, for every grid onnxq
 * offers (docs/design.md "Grids and data types"), and the Q arithmetic
 * itself.
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
 * FP8 E4M3FN (TensorRT/ModelOpt; ONNX float8e4m3fn, opset 19): symmetric
 *   only, zero point +0, scale = absmax / 448 (448 = the largest finite
 *   E4M3FN value, S.1111.110); values are x / scale rounded to the E4M3FN
 *   grid (ties to even) and saturated to +-448 (QuantizeLinear saturate=1).
 *   Both symmetric forms give this scale; the asymmetric form is refused.
 * A scale below FLT_MIN (e.g. min == max == 0) becomes 1 (ORT) with the
 * form's zero point (0, or the mid point for unsigned symmetric narrow).
 */
#ifndef OQ_QPARAMS_H
#define OQ_QPARAMS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "src/ir/dtype.h"
#include "src/oq.h"

/* Grid limits of a quantized dtype; reduce_range gives ORT's 7-bit ranges. 1 on success,
 * 0 for unsupported types (outputs untouched). */
int oq_qrange(int dtype, int reduce_range, int64_t *qmin, int64_t *qmax);

enum { OQ_QP_ASYM = 0, OQ_QP_SYM_NARROW, OQ_QP_SYM_FULL };

/* Activation symmetry (--act-symmetric[=unsigned], the calibrate and quantize options). */
enum {
	OQ_ACT_ASYM = 0,        /* asymmetric (default) */
	OQ_ACT_SYM,             /* symmetric narrow: int8 [-127,127] zp 0, uint8 [0,254] zp 127 */
	OQ_ACT_SYM_UNSIGNED,    /* symmetric; AIMET's unsigned grid (uint8 [0,255], zp 0) for
				 * tensors whose range has no negatives, narrow for the others */
};

/* The oq_qparams form of an OQ_ACT_* setting for a tensor whose (calibrated) range starts at lo.
 * Unsigned symmetric is the full form on an unsigned type, used where lo >= 0 (post-ReLU
 * tensors; AIMET's use_unsigned_symmetric); a tensor with negatives gets symmetric narrow
 * (uint8 [0,254] zp 127), since clamping its negatives to 0 would destroy it. */
static inline int oq_act_form(int act_sym, double lo)
{
	return act_sym == OQ_ACT_SYM_UNSIGNED ? (lo >= 0 ? OQ_QP_SYM_FULL : OQ_QP_SYM_NARROW)
	       : act_sym                      ? OQ_QP_SYM_NARROW
	                                      : OQ_QP_ASYM;
}

/* 1 when the grid of (dtype, form) is (nearly) mirrored around 0, so a range follows from |x|
 * alone: the symmetric forms on signed types, symmetric narrow on unsigned ones (mid-point
 * zero point), and FP8; 0 for asymmetric and AIMET unsigned symmetric (zero point 0 at qmin). */
static inline int oq_qform_mirrored(int dtype, int form)
{
	return dtype == OQ_DT_FLOAT8E4M3FN ||
	       (form != OQ_QP_ASYM && !(form == OQ_QP_SYM_FULL && oq_dtype_kind(dtype) == 'u'));
}

/* Largest finite float8e4m3fn value: the FP8 grid ends at +-448 * scale. */
#define OQ_FP8_E4M3FN_MAX 448.0

/* 1 when dtype is float8e4m3fn, the FP8 type onnxq quantizes to. */
static inline int oq_qtype_is_fp8(int dtype)
{
	return dtype == OQ_DT_FLOAT8E4M3FN;
}

/* The [qmin, qmax] grid that a form uses (narrowed for symmetric narrow); 1 on success, else 0. */
int oq_qgrid(int dtype, int form, int reduce_range, int64_t *qmin, int64_t *qmax);

/* Scale and zero point for [min, max] on dtype's grid with the given form. OQ_EINVAL for bad input
 * (NaN, min > max, unknown dtype/form, float8e4m3fn with OQ_QP_ASYM or reduce_range); +-Inf is
 * clamped to +-FLT_MAX/2 as ORT does. float8e4m3fn: *zp = 0 (the encoding of +0). */
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

/* x / scale (+ 0, the zero point) rounded to the float8e4m3fn grid (ties to even) and saturated
 * to +-448, as a float: QuantizeLinear(saturate=1) followed by the cast back. NaN stays NaN. */
static inline float oq_fp8_round(float x, float scale)
{
	float v = x / scale + 0.0f, a = fabsf(v), q, inv;
	uint32_t u;
	int e;

	if (!(a < 464.0f)) /* 464 = halfway from 448 to the next (absent) binade value 480 */
		return v != v ? v : v < 0 ? -448.0f : 448.0f;
	/* binade [2^e, 2^(e+1)) of a from its float32 exponent bits; step 2^(e-3); below 2^-6
	 * (subnormals, and 0) the step stays 2^-9. The powers of two are built from bits: this
	 * runs once per weight per candidate in the mse search. */
	memcpy(&u, &a, 4);
	e = (int)(u >> 23) - 127;
	if (e < -6)
		e = -6;
	u = (uint32_t)(e - 3 + 127) << 23;
	memcpy(&q, &u, 4);
	u = (uint32_t)(3 - e + 127) << 23;
	memcpy(&inv, &u, 4);
	a = rintf(a * inv) * q; /* exact: powers of two */
	if (a > 448.0f)
		a = 448.0f;
	return v < 0 ? -a : a;
}

#endif
