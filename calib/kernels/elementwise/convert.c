/*
 * convert.c - element conversion for the element-wise family: chunked
 * loads/stores between any numeric dtype and the double/int64 compute
 * domains, float16/bfloat16/float8 encoders, and the Cast/CastLike kernels.
 *
 * Cast semantics (https://onnx.ai/onnx/operators/onnx__Cast.html):
 * float -> float rounds to nearest even directly from the source value (a
 * double goes to float16 in one rounding, not through float); float -> int
 * truncates toward zero (numpy astype, ORT static_cast) and, where the
 * spec leaves out-of-range values undefined, saturates (NaN -> 0);
 * int -> int keeps the low bits (wraps) as numpy and ORT do; anything -> bool
 * is x != 0. Float8 targets (opset 19) honour `saturate`: with it,
 * out-of-range values and infinities become the largest finite value of
 * their sign, without it NaN (or Inf for float8e5m2, which has one).
 * Strings parse with strtod ("INF", "-INF", "NaN" in any case) and numbers
 * print in the shortest form that reads back to the same value.
 * float4e2m1 and float8e8m0 are refused with an error. float32 to and from
 * float16 / bfloat16 run the vector conversions of half.h (same rounding;
 * a NaN keeps the top of its payload, as the hardware converts it).
 */
#include "calib/kernels/elementwise/elementwise.h"
#include "calib/kernels/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int oq_elementwise_numeric(int dt)
{
	char kind = oq_dtype_kind(dt);
	if (dt == OQ_DT_FLOAT4E2M1 || dt == OQ_DT_FLOAT8E8M0)
		return 0;
	return kind == 'f' || kind == 's' || kind == 'u' || kind == 'b';
}

/* ------------------------------------------------------ small float formats */

typedef struct sfmt {
	int e, m;      /* exponent and mantissa bits */
	int bias;
	char kind;     /* 'i' IEEE (Inf, NaN = all-ones exponent), 'f' fn (no Inf, NaN = all ones), 'u' fnuz (NaN = 0x80) */
	double max;    /* largest finite value */
} sfmt;

static int small_fmt(int dt, sfmt *f)
{
	switch (dt) {
	case OQ_DT_FLOAT16: *f = (sfmt){5, 10, 15, 'i', 65504.0}; return 1;
	case OQ_DT_BFLOAT16: *f = (sfmt){8, 7, 127, 'i', 3.3895313892515355e38}; return 1;
	case OQ_DT_FLOAT8E4M3FN: *f = (sfmt){4, 3, 7, 'f', 448.0}; return 1;
	case OQ_DT_FLOAT8E4M3FNUZ: *f = (sfmt){4, 3, 8, 'u', 240.0}; return 1;
	case OQ_DT_FLOAT8E5M2: *f = (sfmt){5, 2, 15, 'i', 57344.0}; return 1;
	case OQ_DT_FLOAT8E5M2FNUZ: *f = (sfmt){5, 2, 16, 'u', 57344.0}; return 1;
	default: return 0;
	}
}

uint16_t oq_elementwise_encode_small(double v, int dt, int sat)
{
	sfmt f;
	unsigned expmask, sbit, nan, inf, maxc;
	int ex, emin, q_exp;
	double a, r, rv;

	if (!small_fmt(dt, &f))
		return 0;
	expmask = (1u << f.e) - 1;
	sbit = signbit(v) ? 1u << (f.e + f.m) : 0;
	if (f.kind == 'i') {
		nan = (expmask << f.m) | (1u << (f.m - 1));
		inf = expmask << f.m;
		maxc = ((expmask - 1) << f.m) | ((1u << f.m) - 1);
	} else if (f.kind == 'f') {
		nan = (expmask << f.m) | ((1u << f.m) - 1);
		inf = nan;
		maxc = nan - 1;
	} else {
		nan = 1u << (f.e + f.m);
		inf = nan;
		maxc = nan - 1;
	}
	if (dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16)
		sat = 0; /* saturate applies to float8 targets only */
	if (isnan(v))
		return (uint16_t)(f.kind == 'u' ? nan : sbit | nan);
	a = fabs(v);
	if (isinf(a)) {
		if (sat)
			return (uint16_t)(sbit | maxc);
		return (uint16_t)(f.kind == 'i' ? sbit | inf : f.kind == 'u' ? nan : sbit | nan);
	}
	if (a == 0)
		return (uint16_t)(f.kind == 'u' ? 0 : sbit);
	emin = 1 - f.bias;
	frexp(a, &ex);
	q_exp = (ex - 1 < emin ? emin : ex - 1) - f.m; /* value of one unit in the last place */
	r = nearbyint(ldexp(a, -q_exp));              /* ties to even */
	rv = ldexp(r, q_exp);
	if (r == 0)
		return (uint16_t)(f.kind == 'u' ? 0 : sbit);
	if (rv > f.max) {
		if (sat)
			return (uint16_t)(sbit | maxc);
		return (uint16_t)(f.kind == 'i' ? sbit | inf : f.kind == 'u' ? nan : sbit | nan);
	}
	if (rv < ldexp(1, emin)) /* subnormal: the count of quanta is the mantissa field */
		return (uint16_t)(sbit | (unsigned)r);
	frexp(rv, &ex);
	{
		unsigned ef = (unsigned)(ex - 1 + f.bias);
		unsigned mf = (unsigned)(ldexp(rv, -(ex - 1)) * (1u << f.m)) - (1u << f.m);
		return (uint16_t)(sbit | (ef << f.m) | mf);
	}
}

double oq_elementwise_decode_small(uint16_t b, int dt)
{
	sfmt f;
	unsigned expmask, ef, mf;
	double v;

	if (!small_fmt(dt, &f))
		return 0;
	expmask = (1u << f.e) - 1;
	ef = (b >> f.m) & expmask;
	mf = b & ((1u << f.m) - 1);
	if (f.kind == 'u' && b == (1u << (f.e + f.m)))
		return NAN;
	if (f.kind == 'f' && ef == expmask && mf == (1u << f.m) - 1)
		return NAN;
	if (f.kind == 'i' && ef == expmask)
		v = mf ? NAN : INFINITY;
	else if (ef == 0)
		v = ldexp(mf, 1 - f.bias - f.m);
	else
		v = ldexp(mf + (1u << f.m), (int)ef - f.bias - f.m);
	return (b >> (f.e + f.m)) & 1 ? -v : v;
}

/* ------------------------------------------------------------ load / store */

#define LD(T, dst)                                                   \
	do {                                                         \
		const T *p_ = (const T *)t->data + off;              \
		for (size_t i = 0; i < n; i++)                       \
			buf[i] = (dst)p_[i * (size_t)s];             \
	} while (0)

void oq_elementwise_load_double(const oq_rt *t, size_t off, int s, size_t n, double *buf)
{
	switch (t->dtype) {
	case OQ_DT_FLOAT: LD(float, double); return;
	case OQ_DT_DOUBLE: LD(double, double); return;
	case OQ_DT_INT8: LD(int8_t, double); return;
	case OQ_DT_INT16: LD(int16_t, double); return;
	case OQ_DT_INT32: LD(int32_t, double); return;
	case OQ_DT_INT64: LD(int64_t, double); return;
	case OQ_DT_UINT8: case OQ_DT_BOOL: LD(uint8_t, double); return;
	case OQ_DT_UINT16: LD(uint16_t, double); return;
	case OQ_DT_UINT32: LD(uint32_t, double); return;
	case OQ_DT_UINT64: LD(uint64_t, double); return;
	case OQ_DT_FLOAT16: {
		const uint16_t *p = (const uint16_t *)t->data + off;
		for (size_t i = 0; i < n; i++)
			buf[i] = oq_f16_to_f32(p[i * (size_t)s]);
		return;
	}
	case OQ_DT_BFLOAT16: {
		const uint16_t *p = (const uint16_t *)t->data + off;
		for (size_t i = 0; i < n; i++)
			buf[i] = oq_bf16_to_f32(p[i * (size_t)s]);
		return;
	}
	case OQ_DT_FLOAT8E4M3FN: case OQ_DT_FLOAT8E4M3FNUZ: case OQ_DT_FLOAT8E5M2: case OQ_DT_FLOAT8E5M2FNUZ: {
		const uint8_t *p = (const uint8_t *)t->data + off;
		for (size_t i = 0; i < n; i++)
			buf[i] = oq_elementwise_decode_small(p[i * (size_t)s], t->dtype);
		return;
	}
	default: /* sub-byte integers */
		for (size_t i = 0; i < n; i++)
			buf[i] = oq_rt_get(t, off + i * (size_t)s);
		return;
	}
}

void oq_elementwise_load_int64(const oq_rt *t, size_t off, int s, size_t n, int64_t *buf)
{
	switch (t->dtype) {
	case OQ_DT_INT8: LD(int8_t, int64_t); return;
	case OQ_DT_INT16: LD(int16_t, int64_t); return;
	case OQ_DT_INT32: LD(int32_t, int64_t); return;
	case OQ_DT_INT64: LD(int64_t, int64_t); return;
	case OQ_DT_UINT8: case OQ_DT_BOOL: LD(uint8_t, int64_t); return;
	case OQ_DT_UINT16: LD(uint16_t, int64_t); return;
	case OQ_DT_UINT32: LD(uint32_t, int64_t); return;
	case OQ_DT_UINT64: LD(uint64_t, int64_t); return;
	default:
		break;
	}
	if (oq_dtype_kind(t->dtype) == 'f') {
		double d[OQ_ELEMENTWISE_CHUNK];
		for (size_t b = 0; b < n; b += OQ_ELEMENTWISE_CHUNK) {
			size_t m = n - b < OQ_ELEMENTWISE_CHUNK ? n - b : OQ_ELEMENTWISE_CHUNK;
			oq_elementwise_load_double(t, off + b * (size_t)s, s, m, d);
			for (size_t i = 0; i < m; i++)
				buf[b + i] = isnan(d[i]) ? 0
					     : d[i] >= 9.2233720368547758e18 ? INT64_MAX
					     : d[i] <= -9.2233720368547758e18 ? INT64_MIN
									       : (int64_t)d[i];
		}
		return;
	}
	for (size_t i = 0; i < n; i++) /* sub-byte integers */
		buf[i] = oq_rt_get_int(t, off + i * (size_t)s);
}

/* Truncation toward zero into [lo, hi]; NaN -> 0. */
static double trunc_sat(double v, double lo, double hi)
{
	if (isnan(v))
		return 0;
	v = trunc(v);
	return v < lo ? lo : v > hi ? hi : v;
}

#define ST_F(T, expr)                                        \
	do {                                                 \
		T *p_ = (T *)t->data + off;                  \
		for (size_t i = 0; i < n; i++)               \
			p_[i] = (T)(expr);                   \
	} while (0)

void oq_elementwise_store_double(oq_rt *t, size_t off, size_t n, const double *v, int sat)
{
	switch (t->dtype) {
	case OQ_DT_FLOAT: ST_F(float, v[i]); return;
	case OQ_DT_DOUBLE: ST_F(double, v[i]); return;
	case OQ_DT_BOOL: ST_F(uint8_t, v[i] != 0); return;
	case OQ_DT_INT8: ST_F(int8_t, trunc_sat(v[i], -128.0, 127.0)); return;
	case OQ_DT_INT16: ST_F(int16_t, trunc_sat(v[i], -32768.0, 32767.0)); return;
	case OQ_DT_INT32: ST_F(int32_t, trunc_sat(v[i], -2147483648.0, 2147483647.0)); return;
	case OQ_DT_UINT8: ST_F(uint8_t, trunc_sat(v[i], 0, 255.0)); return;
	case OQ_DT_UINT16: ST_F(uint16_t, trunc_sat(v[i], 0, 65535.0)); return;
	case OQ_DT_UINT32: ST_F(uint32_t, trunc_sat(v[i], 0, 4294967295.0)); return;
	case OQ_DT_INT64: {
		int64_t *p = (int64_t *)t->data + off;
		for (size_t i = 0; i < n; i++)
			p[i] = isnan(v[i]) ? 0
			       : v[i] >= 9.2233720368547758e18 ? INT64_MAX
			       : v[i] <= -9.2233720368547758e18 ? INT64_MIN
								 : (int64_t)v[i];
		return;
	}
	case OQ_DT_UINT64: {
		uint64_t *p = (uint64_t *)t->data + off;
		for (size_t i = 0; i < n; i++)
			p[i] = isnan(v[i]) || v[i] <= 0 ? 0 : v[i] >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v[i];
		return;
	}
	case OQ_DT_FLOAT16: case OQ_DT_BFLOAT16:
		ST_F(uint16_t, oq_elementwise_encode_small(v[i], t->dtype, 0));
		return;
	case OQ_DT_FLOAT8E4M3FN: case OQ_DT_FLOAT8E4M3FNUZ: case OQ_DT_FLOAT8E5M2: case OQ_DT_FLOAT8E5M2FNUZ:
		ST_F(uint8_t, oq_elementwise_encode_small(v[i], t->dtype, sat));
		return;
	default: /* sub-byte integers: oq_rt_set saturates an integral value */
		for (size_t i = 0; i < n; i++)
			oq_rt_set(t, off + i, trunc_sat(v[i], -1e300, 1e300));
		return;
	}
}

void oq_elementwise_store_int64(oq_rt *t, size_t off, size_t n, const int64_t *v, int uns)
{
	switch (t->dtype) {
	case OQ_DT_INT8: case OQ_DT_UINT8: ST_F(uint8_t, (uint64_t)v[i]); return;
	case OQ_DT_INT16: case OQ_DT_UINT16: ST_F(uint16_t, (uint64_t)v[i]); return;
	case OQ_DT_INT32: case OQ_DT_UINT32: ST_F(uint32_t, (uint64_t)v[i]); return;
	case OQ_DT_INT64: case OQ_DT_UINT64: ST_F(uint64_t, (uint64_t)v[i]); return;
	case OQ_DT_BOOL: ST_F(uint8_t, v[i] != 0); return;
	case OQ_DT_FLOAT:
		if (uns)
			ST_F(float, (uint64_t)v[i]);
		else
			ST_F(float, v[i]);
		return;
	default:
		break;
	}
	if (oq_dtype_kind(t->dtype) == 'f') {
		double d[OQ_ELEMENTWISE_CHUNK];
		for (size_t b = 0; b < n; b += OQ_ELEMENTWISE_CHUNK) {
			size_t m = n - b < OQ_ELEMENTWISE_CHUNK ? n - b : OQ_ELEMENTWISE_CHUNK;
			for (size_t i = 0; i < m; i++)
				d[i] = uns ? (double)(uint64_t)v[b + i] : (double)v[b + i];
			oq_elementwise_store_double(t, off + b, m, d, 1);
		}
		return;
	}
	for (size_t i = 0; i < n; i++) { /* sub-byte integers: keep the low bits */
		int bits = oq_dtype_bits(t->dtype);
		uint64_t u = (uint64_t)v[i] & ((1u << bits) - 1);
		int64_t x = oq_dtype_kind(t->dtype) == 's' && (u >> (bits - 1)) ? (int64_t)u - (1 << bits) : (int64_t)u;
		oq_rt_set(t, off + i, (double)x);
	}
}

/* ------------------------------------------------------------------- Cast */

/* The shortest "%.*g" text that converts back to the same value of dtype. */
static void num_to_str(const oq_rt *x, size_t i, char *buf, size_t n)
{
	char kind = oq_dtype_kind(x->dtype);
	double v;
	int maxp = x->dtype == OQ_DT_DOUBLE ? 17 : 9;

	if (kind == 'b') {
		snprintf(buf, n, "%s", oq_rt_get_int(x, i) ? "1" : "0");
		return;
	}
	if (kind == 's' || kind == 'u') {
		int64_t iv;
		oq_elementwise_load_int64(x, i, 1, 1, &iv);
		if (kind == 'u')
			snprintf(buf, n, "%llu", (unsigned long long)(uint64_t)iv);
		else
			snprintf(buf, n, "%lld", (long long)iv);
		return;
	}
	oq_elementwise_load_double(x, i, 1, 1, &v);
	if (isnan(v)) {
		snprintf(buf, n, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, n, "%s", v > 0 ? "INF" : "-INF");
		return;
	}
	for (int p = 1; p <= maxp; p++) {
		double back;
		snprintf(buf, n, "%.*g", p, v);
		back = strtod(buf, NULL);
		if (x->dtype == OQ_DT_DOUBLE ? back == v
		    : x->dtype == OQ_DT_FLOAT ? (float)back == (float)v
					      : oq_elementwise_encode_small(back, x->dtype, 1) == oq_elementwise_encode_small(v, x->dtype, 1))
			return;
	}
}

/* Parses s into element i of y (numeric dtype). */
static void str_to_num(oq_rt *y, size_t i, const char *s)
{
	char kind = oq_dtype_kind(y->dtype);
	char *end;

	if (kind == 's' || kind == 'u' || kind == 'b') {
		int64_t iv;
		while (*s == ' ' || *s == '\t')
			s++;
		iv = kind == 'u' ? (int64_t)strtoull(s, &end, 10) : (int64_t)strtoll(s, &end, 10);
		if (end != s && *end == '\0') {
			oq_elementwise_store_int64(y, i, 1, &iv, kind == 'u');
			return;
		}
	}
	double v = strtod(s, &end);
	oq_elementwise_store_double(y, i, 1, &v, 1);
}

typedef struct cast_job {
	const oq_rt *x;
	oq_rt *y;
	int sat;
} cast_job;

/* float32 <-> float16 / bfloat16: the vector conversions (half.h); 0 for other pairs. */
static int cast_half(const oq_rt *x, oq_rt *y, size_t b, size_t e)
{
	const void *src = (const char *)x->data + b * (size_t)(oq_dtype_bits(x->dtype) / 8);
	void *dst = (char *)y->data + b * (size_t)(oq_dtype_bits(y->dtype) / 8);

	if (x->dtype == OQ_DT_FLOAT && y->dtype == OQ_DT_FLOAT16)
		oq_float_to_half(src, dst, e - b);
	else if (x->dtype == OQ_DT_FLOAT && y->dtype == OQ_DT_BFLOAT16)
		oq_float_to_bf16(src, dst, e - b);
	else if (x->dtype == OQ_DT_FLOAT16 && y->dtype == OQ_DT_FLOAT)
		oq_half_to_float(src, dst, e - b);
	else if (x->dtype == OQ_DT_BFLOAT16 && y->dtype == OQ_DT_FLOAT)
		oq_bf16_to_float(src, dst, e - b);
	else
		return 0;
	return 1;
}

static void cast_range(void *ctx, size_t b, size_t e)
{
	cast_job *j = ctx;
	char sk = oq_dtype_kind(j->x->dtype);
	int from_int = sk != 'f';

	if (cast_half(j->x, j->y, b, e))
		return;
	for (size_t o = b; o < e; o += OQ_ELEMENTWISE_CHUNK) {
		size_t n = e - o < OQ_ELEMENTWISE_CHUNK ? e - o : OQ_ELEMENTWISE_CHUNK;
		if (from_int && j->y->dtype == OQ_DT_FLOAT) {
			int64_t iv[OQ_ELEMENTWISE_CHUNK];
			float *p = (float *)j->y->data + o;
			oq_elementwise_load_int64(j->x, o, 1, n, iv);
			for (size_t i = 0; i < n; i++) /* one rounding, even for int64 */
				p[i] = sk == 'u' ? (float)(uint64_t)iv[i] : (float)iv[i];
		} else if (from_int) {
			int64_t iv[OQ_ELEMENTWISE_CHUNK];
			oq_elementwise_load_int64(j->x, o, 1, n, iv);
			oq_elementwise_store_int64(j->y, o, n, iv, sk == 'u');
		} else {
			double dv[OQ_ELEMENTWISE_CHUNK];
			oq_elementwise_load_double(j->x, o, 1, n, dv);
			oq_elementwise_store_double(j->y, o, n, dv, j->sat);
		}
	}
}

static int do_cast(oq_kctx *k, const oq_rt *x, int to, int sat)
{
	oq_rt *y;
	int rc;
	char buf[64];

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "missing input");
	if (!oq_dtype_valid(to) || (to != OQ_DT_STRING && !oq_elementwise_numeric(to)))
		return oq_k_err(k, OQ_EUNSUP, "cannot cast to %s (element type %d)", oq_dtype_name(to), to);
	if (x->dtype != OQ_DT_STRING && !oq_elementwise_numeric(x->dtype))
		return oq_k_err(k, OQ_EUNSUP, "cannot cast from %s", oq_dtype_name(x->dtype));
	if (x->dtype == to)
		return oq_k_output_like(k, 0, x, x->rank, x->dims, &y);
	if ((rc = oq_k_output(k, 0, to, x->rank, x->dims, &y)))
		return rc;
	if (x->dtype == OQ_DT_STRING) {
		for (size_t i = 0; i < x->nelem; i++)
			str_to_num(y, i, x->strs[i].p ? x->strs[i].p : "");
		return OQ_OK;
	}
	if (to == OQ_DT_STRING) {
		for (size_t i = 0; i < x->nelem; i++) {
			size_t len;
			num_to_str(x, i, buf, sizeof buf);
			len = strlen(buf);
			if (!(y->strs[i].p = malloc(len + 1)))
				return oq_k_err(k, OQ_ENOMEM, "out of memory");
			memcpy(y->strs[i].p, buf, len + 1);
			y->strs[i].len = len;
		}
		return OQ_OK;
	}
	{
		cast_job j = {x, y, sat};
		/* sub-byte outputs share bytes between neighbours: one range only */
		if (oq_dtype_is_subbyte(to) || oq_dtype_is_subbyte(x->dtype))
			cast_range(&j, 0, x->nelem);
		else
			oq_k_parallel(k, x->nelem, 1 << 15, cast_range, &j);
	}
	return OQ_OK;
}

/* Cast-1 names the target in a string ("FLOAT", "INT64", ...). */
static int dtype_by_name(const char *s)
{
	char low[32];
	size_t i;
	for (i = 0; s[i] && i + 1 < sizeof low; i++)
		low[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
	low[i] = '\0';
	return oq_dtype_from_name(low);
}

int oq_elementwise_cast(oq_kctx *k)
{
	const oq_attr *a = oq_k_attr(k, "to");
	int to;

	if (!a)
		return oq_k_err(k, OQ_EINVAL, "missing attribute 'to'");
	if (a->type == OQ_ATTR_STRING)
		to = dtype_by_name(a->s.p ? a->s.p : "");
	else if (a->type == OQ_ATTR_INT)
		to = a->i < 0 || a->i > 1000 ? -1 : (int)a->i;
	else
		return oq_k_err(k, OQ_EINVAL, "attribute 'to' must be an int (or a string before opset 6)");
	if (to <= 0)
		return oq_k_err(k, OQ_EINVAL, "attribute 'to' does not name an element type");
	return do_cast(k, oq_k_in(k, 0), to, (int)oq_k_int(k, "saturate", 1));
}

int oq_elementwise_castlike(oq_kctx *k)
{
	const oq_rt *like = oq_k_in(k, 1);
	if (!like)
		return oq_k_err(k, OQ_EINVAL, "missing input 'target_type'");
	return do_cast(k, oq_k_in(k, 0), like->dtype, (int)oq_k_int(k, "saturate", 1));
}
