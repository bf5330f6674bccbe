/*
 * quant_math.c - scalar quantization arithmetic and the small float formats
 * (see quant_math.h for the rounding rules and their sources).
 *
 * The small float formats are described by a table (exponent/mantissa bits,
 * bias, largest finite encoding, NaN/Inf/-0 conventions) rather than one
 * hand-written converter per type, so all five share one rounding path.
 */
#include "src/quant/quant_math.h"

#include <math.h>
#include <string.h>

#include "src/ir/dtype.h"

int oq_quant_range(int dtype, int32_t *qmin, int32_t *qmax)
{
	switch (dtype) {
	case OQ_DT_INT8:
		*qmin = -128;
		*qmax = 127;
		return 1;
	case OQ_DT_UINT8:
		*qmin = 0;
		*qmax = 255;
		return 1;
	case OQ_DT_INT16:
		*qmin = -32768;
		*qmax = 32767;
		return 1;
	case OQ_DT_UINT16:
		*qmin = 0;
		*qmax = 65535;
		return 1;
	case OQ_DT_INT4:
		*qmin = -8;
		*qmax = 7;
		return 1;
	case OQ_DT_UINT4:
		*qmin = 0;
		*qmax = 15;
		return 1;
	case OQ_DT_INT2:
		*qmin = -2;
		*qmax = 1;
		return 1;
	case OQ_DT_UINT2:
		*qmin = 0;
		*qmax = 3;
		return 1;
	case OQ_DT_INT32:
		*qmin = INT32_MIN;
		*qmax = INT32_MAX;
		return 1;
	default: return 0;
	}
}

int32_t oq_quant_int(float x, float scale, int32_t zp, int32_t qmin, int32_t qmax)
{
	/* float32 throughout, as MLAS: the zero point is added after rounding */
	float q = nearbyintf(x / scale) + (float)zp;
	if (isnan(q))
		return zp < qmin ? qmin : zp > qmax ? qmax : zp;
	if (q <= (float)qmin)
		return qmin;
	if (q >= (float)qmax)
		return qmax; /* (float)INT32_MAX rounds up: compare before converting */
	return (int32_t)q;
}

void oq_quant_row8(const void *src, size_t n, float scale, int32_t zp, int32_t qmin, int32_t qmax, void *out)
{
	const float magic = 12582912.0f, lo = (float)(qmin - zp), hi = (float)(qmax - zp);
	const unsigned char *x = src;
	unsigned char *q = out;

	for (size_t i = 0; i < n; i++) {
		float v;
		memcpy(&v, x + 4 * i, sizeof v);
		v = v / scale;
		v = v == v ? v : 0.0f;
		v = v < lo ? lo : v;
		v = v > hi ? hi : v;
		v = (v + magic) - magic;
		q[i] = (unsigned char)((int32_t)v + zp);
	}
}

/* A small float format. */
typedef struct sf_format {
	int dtype;
	int bits;         /* 8, or 4 for float4e2m1 */
	int mbits;        /* mantissa bits */
	int bias;         /* exponent bias */
	uint8_t max_bits; /* encoding of the largest finite value (sign clear) */
	int fnuz;         /* no -0, NaN is the lone 0x80 */
	int fn;           /* e4m3fn: no Inf, NaN is S.1111.111 */
	int ieee;         /* e5m2: IEEE-style Inf (exp all ones, mantissa 0) and NaN */
} sf_format;

static const sf_format formats[] = {
    {OQ_DT_FLOAT8E4M3FN, 8, 3, 7, 0x7E, 0, 1, 0}, {OQ_DT_FLOAT8E4M3FNUZ, 8, 3, 8, 0x7F, 1, 0, 0},
    {OQ_DT_FLOAT8E5M2, 8, 2, 15, 0x7B, 0, 0, 1},  {OQ_DT_FLOAT8E5M2FNUZ, 8, 2, 16, 0x7F, 1, 0, 0},
    {OQ_DT_FLOAT4E2M1, 4, 1, 1, 0x7, 0, 0, 0},
};

static const sf_format *format(int dtype)
{
	for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
		if (formats[i].dtype == dtype)
			return &formats[i];
	return NULL;
}

int oq_quant_is_smallfloat(int dtype)
{
	return format(dtype) != NULL;
}

/* Value of an unsigned encoding (sign bit clear). */
static double magnitude(const sf_format *f, unsigned e)
{
	unsigned ebits_mask = (1u << (f->bits - 1 - f->mbits)) - 1;
	unsigned ex = (e >> f->mbits) & ebits_mask, m = e & ((1u << f->mbits) - 1);
	if (ex == 0)
		return ldexp((double)m, 1 - f->bias - f->mbits);
	return ldexp(1.0 + ldexp((double)m, -f->mbits), (int)ex - f->bias);
}

uint8_t oq_smallfloat_from_f32(int dtype, float x, int saturate)
{
	const sf_format *f = format(dtype);
	uint8_t sign;
	double a, q, r, maxv;
	int e, emin;

	if (!f)
		return 0;
	sign = signbit(x) ? (uint8_t)(1u << (f->bits - 1)) : 0;
	if (isnan(x)) {
		if (f->fnuz)
			return 0x80;
		if (f->bits == 4)
			return f->max_bits; /* e2m1 has no NaN: the ONNX reference gives +6 */
		return (uint8_t)(sign | 0x7F);
	}
	maxv = magnitude(f, f->max_bits);
	a = fabs((double)x);
	if (isinf(x)) {
		r = INFINITY;
	} else {
		emin = 1 - f->bias;
		frexp(a, &e);
		e -= 1; /* a = 1.m * 2^e */
		if (a == 0 || e < emin)
			e = emin; /* subnormal range: fixed step 2^(emin - mbits) */
		q = ldexp(1.0, e - f->mbits);
		r = rint(a / q) * q; /* a / q is exact: q is a power of two */
	}
	if (r > maxv) {
		if (saturate || f->bits == 4)
			return (uint8_t)(sign | f->max_bits);
		if (f->ieee)
			return (uint8_t)(sign | 0x7C);
		return f->fnuz ? 0x80 : (uint8_t)(sign | 0x7F);
	}
	if (r == 0)
		return f->fnuz ? 0 : sign;
	/* encode the exact grid value r */
	{
		int emin2 = 1 - f->bias;
		unsigned ex, m;
		frexp(r, &e);
		e -= 1;
		if (e < emin2) {
			ex = 0;
			m = (unsigned)ldexp(r, f->mbits - emin2);
		} else {
			ex = (unsigned)(e + f->bias);
			m = (unsigned)(ldexp(r, -e) * (double)(1u << f->mbits)) - (1u << f->mbits);
		}
		return (uint8_t)(sign | (ex << f->mbits) | m);
	}
}

float oq_smallfloat_to_f32(int dtype, uint8_t bits)
{
	const sf_format *f = format(dtype);
	unsigned signbit_, mag;
	double v;

	if (!f)
		return 0;
	signbit_ = 1u << (f->bits - 1);
	bits = (uint8_t)(bits & ((1u << f->bits) - 1));
	mag = bits & (signbit_ - 1);
	if (f->fnuz && bits == 0x80)
		return NAN;
	if (f->fn && mag == 0x7F)
		return NAN;
	if (f->ieee && (mag >> 2) == 0x1F)
		return (mag & 3) ? NAN : (bits & signbit_) ? -INFINITY : INFINITY;
	v = magnitude(f, mag);
	return (float)((bits & signbit_) ? -v : v);
}

uint16_t oq_quant_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)
		return 0x7fc0;
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
