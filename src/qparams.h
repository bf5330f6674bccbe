/*
 * qparams.h - scale and zero point from a range, for every grid onnxq
 * offers (REFERENCE.md section 2), and the Q/DQ arithmetic itself.
 *
 * Asymmetric (ONNX Runtime): rmin = min(min, 0), rmax = max(max, 0),
 *   scale = (rmax - rmin) / (qmax - qmin) in double, zp = round(qmin - rmin / scale),
 *   so 0.0 is exactly representable. Symmetric narrow: scale = absmax / qmax_narrow
 *   ([-127,127] for int8; unsigned uses the mid-point as zero point, ORT's [0,254] zp 127).
 *   Symmetric full (AIMET): scale = max(max / qmax, -min / -qmin) on [-128,127].
 *   A scale below the smallest normal float becomes 1 with zp 0 (ORT).
 */
#ifndef OQ_QPARAMS_H
#define OQ_QPARAMS_H

#include <stdint.h>

#include "oq.h"

/* Grid limits of a quantized dtype; reduce_range gives ORT's 7-bit ranges. 0 for unsupported types. */
int oq_qrange(int dtype, int reduce_range, int64_t *qmin, int64_t *qmax);

enum { OQ_QP_ASYM = 0, OQ_QP_SYM_NARROW, OQ_QP_SYM_FULL };

/* Scale and zero point for [min, max] on dtype's grid with the given form. OQ_EINVAL for bad input. */
int oq_qparams(double min, double max, int dtype, int form, int reduce_range, float *scale,
	       int64_t *zp) OQ_WUR;

/* round_half_to_even(x / scale) + zp, saturated to [qmin, qmax]. */
int64_t oq_quantize_value(float x, float scale, int64_t zp, int64_t qmin, int64_t qmax);

#endif
