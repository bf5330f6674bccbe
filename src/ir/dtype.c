/*
 * dtype.c - the element type table and half-precision conversions.
 */
#include "src/ir/dtype.h"
#include "src/oq.h"

#include <string.h>

struct dtinfo {
	const char *name; /* lower-case ONNX name as used in type strings */
	int bits;         /* storage bits per element */
	char kind;        /* 'f' 's' 'u' 'b' 'c' 'S' '-' */
};

static const struct dtinfo table[] = {
	[OQ_DT_UNDEFINED] = {"undefined", 0, '-'},
	[OQ_DT_FLOAT] = {"float", 32, 'f'},
	[OQ_DT_UINT8] = {"uint8", 8, 'u'},
	[OQ_DT_INT8] = {"int8", 8, 's'},
	[OQ_DT_UINT16] = {"uint16", 16, 'u'},
	[OQ_DT_INT16] = {"int16", 16, 's'},
	[OQ_DT_INT32] = {"int32", 32, 's'},
	[OQ_DT_INT64] = {"int64", 64, 's'},
	[OQ_DT_STRING] = {"string", 0, 'S'},
	[OQ_DT_BOOL] = {"bool", 8, 'b'},
	[OQ_DT_FLOAT16] = {"float16", 16, 'f'},
	[OQ_DT_DOUBLE] = {"double", 64, 'f'},
	[OQ_DT_UINT32] = {"uint32", 32, 'u'},
	[OQ_DT_UINT64] = {"uint64", 64, 'u'},
	[OQ_DT_COMPLEX64] = {"complex64", 64, 'c'},
	[OQ_DT_COMPLEX128] = {"complex128", 128, 'c'},
	[OQ_DT_BFLOAT16] = {"bfloat16", 16, 'f'},
	[OQ_DT_FLOAT8E4M3FN] = {"float8e4m3fn", 8, 'f'},
	[OQ_DT_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 8, 'f'},
	[OQ_DT_FLOAT8E5M2] = {"float8e5m2", 8, 'f'},
	[OQ_DT_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 8, 'f'},
	[OQ_DT_UINT4] = {"uint4", 4, 'u'},
	[OQ_DT_INT4] = {"int4", 4, 's'},
	[OQ_DT_FLOAT4E2M1] = {"float4e2m1", 4, 'f'},
	[OQ_DT_FLOAT8E8M0] = {"float8e8m0", 8, 'f'},
	[OQ_DT_UINT2] = {"uint2", 2, 'u'},
	[OQ_DT_INT2] = {"int2", 2, 's'},
};

/* The table above and the X-macro list must describe the same types. */
_Static_assert(sizeof table / sizeof table[0] == OQ_DT_COUNT, "dtype table out of sync");
#define X(n, v, b, k) _Static_assert(v < OQ_DT_COUNT, "dtype " #n);
OQ_DTYPES(X)
#undef X

static int check_table(void)
{
	static const struct { int v, bits; char kind; } x[] = {
#define X(n, v, b, k) {v, b, k},
		OQ_DTYPES(X)
#undef X
	};
	for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
		if (table[x[i].v].bits != x[i].bits || table[x[i].v].kind != x[i].kind)
			return 0;
	return 1;
}

int oq_dtype_valid(int v)
{
	return v > 0 && v < OQ_DT_COUNT;
}

const char *oq_dtype_name(int v)
{
	if (v < 0 || v >= OQ_DT_COUNT)
		return "?";
	return table[v].name;
}

int oq_dtype_from_name(const char *s)
{
	for (int v = 1; v < OQ_DT_COUNT; v++)
		if (strcmp(table[v].name, s) == 0)
			return v;
	return -1;
}

int oq_dtype_bits(int v)
{
	static int checked;
	if (!checked)
		checked = check_table() ? 1 : -1;
	if (checked < 0 || v < 0 || v >= OQ_DT_COUNT)
		return 0;
	return table[v].bits;
}

char oq_dtype_kind(int v)
{
	return (v < 0 || v >= OQ_DT_COUNT) ? '-' : table[v].kind;
}

int oq_dtype_is_float8(int v)
{
	return (v >= OQ_DT_FLOAT8E4M3FN && v <= OQ_DT_FLOAT8E5M2FNUZ) || v == OQ_DT_FLOAT8E8M0;
}

int oq_dtype_is_subbyte(int v)
{
	int b = oq_dtype_bits(v);
	return b > 0 && b < 8;
}

int oq_dtype_nbytes(int v, size_t n, size_t *bytes)
{
	int b = oq_dtype_bits(v);
	if (b == 0)
		return 0;
	if (b < 8) {
		size_t per = (size_t)(8 / b);
		*bytes = n / per + (n % per != 0);
		return 1;
	}
	return oq_mul_size(n, (size_t)b / 8, bytes);
}

float oq_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else { /* subnormal: normalise */
			exp = 127 - 15 + 1;
			while (!(man & 0x400)) {
				man <<= 1;
				exp--;
			}
			man &= 0x3ff;
			bits = sign | (exp << 23) | (man << 13);
		}
	} else if (exp == 31) {
		bits = sign | 0x7f800000u | (man << 13);
	} else {
		bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t oq_f32_to_f16(float f)
{
	uint32_t x, sign, man;
	int exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	exp = (int)((x >> 23) & 0xff);
	man = x & 0x7fffff;
	if (exp == 255) /* inf or nan (keep nan quiet) */
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
	exp = exp - 127 + 15;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		uint32_t shift, r, half;
		if (exp < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		shift = (uint32_t)(14 - exp);
		r = man >> shift;
		half = 1u << (shift - 1);
		if ((man & ((half << 1) - 1)) > half || ((man & ((half << 1) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t r = ((uint32_t)exp << 10) | (man >> 13);
		uint32_t rest = man & 0x1fff;
		if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
			r++; /* may carry into the exponent, which is correct */
		return (uint16_t)(sign | r);
	}
}

float oq_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}
