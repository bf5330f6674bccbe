/*
 * qparams.c - grids, scales and zero points (see qparams.h for the forms).
 *
 * Follows onnxruntime/python/tools/quantization/quant_utils.py
 * compute_scale_zp for the asymmetric and symmetric-narrow forms: the range
 * is widened to contain 0, rmax - rmin is taken in float32 (ORT's ranges
 * are float32 arrays), the division by (qmax - qmin) in float64, the zero
 * point rounded half to even with the float64 scale, and only then the
 * scale is narrowed to float32. The symmetric-full form is AIMET's signed
 * grid. Rounding everywhere is rint/rintf under the default rounding mode
 * (ties to even), never round/roundf (ties away from zero).
 */
#include "src/quant/qparams.h"

#include <float.h>
#include <math.h>

#include "src/ir/dtype.h"

int oq_qrange(int dtype, int reduce_range, int64_t *qmin, int64_t *qmax)
{
	int64_t lo, hi;

	/* ORT's ONNX_INT_TYPE_RANGE and ONNX_INT_TYPE_REDUCED_RANGE. */
	switch (dtype) {
	case OQ_DT_UINT8:
		lo = 0;
		hi = reduce_range ? 127 : 255;
		break;
	case OQ_DT_INT8:
		lo = reduce_range ? -64 : -128;
		hi = reduce_range ? 64 : 127;
		break;
	case OQ_DT_UINT16:
		lo = 0;
		hi = reduce_range ? 32767 : 65535;
		break;
	case OQ_DT_INT16:
		lo = reduce_range ? -16384 : -32768;
		hi = reduce_range ? 16384 : 32767;
		break;
	case OQ_DT_UINT4:
		lo = 0;
		hi = reduce_range ? 7 : 15;
		break;
	case OQ_DT_INT4:
		lo = reduce_range ? -4 : -8;
		hi = reduce_range ? 3 : 7;
		break;
	default: return 0;
	}
	*qmin = lo;
	*qmax = hi;
	return 1;
}

int oq_qgrid(int dtype, int form, int reduce_range, int64_t *qmin, int64_t *qmax)
{
	int64_t lo, hi;

	if (form < OQ_QP_ASYM || form > OQ_QP_SYM_FULL || !oq_qrange(dtype, reduce_range, &lo, &hi))
		return 0;
	if (form == OQ_QP_SYM_NARROW) {
		if (lo < 0) {
			/* signed: [-m, m] (int8 [-127,127]; reduced int8 stays [-64,64]) */
			int64_t m = -lo < hi ? -lo : hi;
			lo = -m;
			hi = m;
		} else if (!reduce_range) {
			/* unsigned: ORT's [0, 2^b - 2], even width so the mid point is a grid value
			 */
			hi -= 1;
		}
	}
	*qmin = lo;
	*qmax = hi;
	return 1;
}

int oq_qparams(double min, double max, int dtype, int form, int reduce_range, float *scale,
               int64_t *zp)
{
	int64_t qmin, qmax;
	double rmin, rmax, s, z;

	if (isnan(min) || isnan(max) || min > max)
		return OQ_EINVAL;
	if (oq_qtype_is_fp8(dtype)) {
		/* TensorRT/ModelOpt FP8: amax / 448 in double, then narrowed to float32 */
		double a;
		if (form == OQ_QP_ASYM || form > OQ_QP_SYM_FULL || reduce_range)
			return OQ_EINVAL;
		a = fmax(fabs(fmax(min, -FLT_MAX / 2)), fabs(fmin(max, FLT_MAX / 2)));
		s = (double)(float)a / OQ_FP8_E4M3FN_MAX;
		*scale = s < FLT_MIN ? 1.0f : (float)s;
		*zp = 0;
		return OQ_OK;
	}
	if (!oq_qgrid(dtype, form, reduce_range, &qmin, &qmax))
		return OQ_EINVAL;
	/* ORT replaces infinite (or huge) ends so that rmax - rmin stays finite. */
	if (min < -FLT_MAX / 2)
		min = -FLT_MAX / 2;
	if (max > FLT_MAX / 2)
		max = FLT_MAX / 2;
	rmin = (float)(min < 0 ? min : 0.0);
	rmax = (float)(max > 0 ? max : 0.0);

	if (form == OQ_QP_SYM_FULL) {
		/* AIMET: both ends on the full grid, zero point 0 */
		s = rmax / (double)qmax;
		if (qmin < 0 && rmin / (double)qmin > s)
			s = rmin / (double)qmin;
		if (s < FLT_MIN) {
			*scale = 1.0f;
			*zp = 0;
			return OQ_OK;
		}
		*scale = (float)s;
		*zp = 0;
		return OQ_OK;
	}
	if (form == OQ_QP_SYM_NARROW) {
		double a = -rmin > rmax ? -rmin : rmax;
		rmin = -a;
		rmax = a;
	}
	s = (double)(float)(rmax - rmin) / (double)(qmax - qmin);
	if (s < FLT_MIN) {
		/* ORT: scale 1; the zero point stays the form's (mid point for unsigned symmetric)
		 */
		*scale = 1.0f;
		*zp = (form == OQ_QP_SYM_NARROW && qmin == 0) ? (qmax + 1) / 2 : 0;
		return OQ_OK;
	}
	z = rint((double)qmin - rmin / s);
	if (z < (double)qmin)
		z = (double)qmin;
	if (z > (double)qmax)
		z = (double)qmax;
	*scale = (float)s;
	*zp = (int64_t)z;
	return OQ_OK;
}
