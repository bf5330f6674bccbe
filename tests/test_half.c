/*
 * test_half.c - float16 / bfloat16 array conversions (calib/kernels/half.c):
 * the vector paths (AVX-512F, F16C) against the plain-C references, bit for
 * bit, on every 16-bit pattern and on float32 values around every rounding
 * boundary; and the references against hand-worked values (IEEE 754
 * binary16: 1 = 0x3c00, largest finite 65504 = 0x7bff, smallest subnormal
 * 2^-24 = 0x0001; bfloat16 = the top 16 bits of a float32).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "calib/kernels/half.h"

static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* float32 inputs that test the rounding: every float16 value, the midpoints to the next one and
 * one float32 ulp either side of them, plus pseudo-random bit patterns. */
static float *boundary_inputs(size_t *n)
{
	size_t cap = 65536 * 6 + 200000, k = 0;
	float *v = malloc(cap * sizeof *v);
	uint64_t s = 0x9e3779b97f4a7c15ull;

	cr_assert(v);
	for (uint32_t h = 0; h < 65536; h++) {
		float a = oq_half_to_float_ref((uint16_t)h), b = oq_half_to_float_ref((uint16_t)(h + 1));
		uint32_t mid;
		v[k++] = a;
		if (isnan(a) || isnan(b) || isinf(a) || (h & 0x7fff) == 0x7fff || (h & 0x8000) != ((h + 1) & 0x8000))
			continue;
		/* midpoint of a and b, exact in float32 (11 + 1 significant bits) */
		mid = bits((float)(((double)a + (double)b) / 2));
		v[k++] = from_bits(mid);
		v[k++] = from_bits(mid - 1);
		v[k++] = from_bits(mid + 1);
	}
	for (int i = 0; i < 200000; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		v[k++] = from_bits((uint32_t)(s >> 32));
	}
	*n = k;
	return v;
}

static void each_limit(void (*fn)(int limit))
{
	for (int l = 0; l <= 2; l++) {
		oq_half_limit = l;
		fn(l);
	}
	oq_half_limit = 0;
}

static void half_to_float_all(int limit)
{
	uint16_t *h = malloc(65536 * sizeof *h);
	float *f = malloc(65536 * sizeof *f);
	cr_assert(h && f);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	/* an odd count and offset exercise the vector loops' tails */
	oq_half_to_float(h + 1, f + 1, 65535);
	for (uint32_t i = 1; i < 65536; i++)
		cr_assert_eq(bits(f[i]), bits(oq_half_to_float_ref((uint16_t)i)), "limit %d: 0x%04x -> 0x%08x", limit, i,
			     bits(f[i]));
	oq_bf16_to_float(h + 1, f + 1, 65535);
	for (uint32_t i = 1; i < 65536; i++)
		cr_assert_eq(bits(f[i]), i << 16, "limit %d: bf16 0x%04x", limit, i);
	free(h);
	free(f);
}

Test(half, to_float_vector_equals_reference)
{
	each_limit(half_to_float_all);
}

static void float_to_half_all(int limit)
{
	size_t n;
	float *v = boundary_inputs(&n);
	uint16_t *h = malloc(n * sizeof *h), *b = malloc(n * sizeof *b);
	cr_assert(h && b);
	oq_float_to_half(v, h, n);
	oq_float_to_bf16(v, b, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(h[i], oq_float_to_half_ref(v[i]), "limit %d: 0x%08x -> 0x%04x, reference 0x%04x", limit,
			     bits(v[i]), h[i], oq_float_to_half_ref(v[i]));
		cr_assert_eq(b[i], oq_float_to_bf16_ref(v[i]), "limit %d: bf16 of 0x%08x -> 0x%04x, reference 0x%04x",
			     limit, bits(v[i]), b[i], oq_float_to_bf16_ref(v[i]));
	}
	free(v);
	free(h);
	free(b);
}

Test(half, from_float_vector_equals_reference)
{
	each_limit(float_to_half_all);
}

Test(half, reference_hand_values)
{
	/* float16 */
	cr_expect_eq(oq_float_to_half_ref(1.0f), 0x3c00);
	cr_expect_eq(oq_float_to_half_ref(-2.0f), 0xc000);
	cr_expect_eq(oq_float_to_half_ref(65504.0f), 0x7bff);
	cr_expect_eq(oq_float_to_half_ref(65519.0f), 0x7bff); /* below the midpoint 65520 */
	cr_expect_eq(oq_float_to_half_ref(65520.0f), 0x7c00); /* the midpoint: to even, i.e. Inf */
	cr_expect_eq(oq_float_to_half_ref(ldexpf(1, -24)), 0x0001);
	cr_expect_eq(oq_float_to_half_ref(ldexpf(1, -25)), 0x0000);     /* half of 2^-24: to even (0) */
	cr_expect_eq(oq_float_to_half_ref(ldexpf(3, -25)), 0x0002);     /* 1.5 quanta: to even (2) */
	cr_expect_eq(oq_float_to_half_ref(1.0f + ldexpf(1, -11)), 0x3c00); /* tie: to even */
	cr_expect_eq(oq_float_to_half_ref(1.0f + ldexpf(3, -11)), 0x3c02); /* tie: to even (up) */
	cr_expect_eq(oq_float_to_half_ref(from_bits(0x7f812345)), 0x7e09); /* NaN: quiet, top payload */
	cr_expect_eq(bits(oq_half_to_float_ref(0x3555)), 0x3eaaa000u);     /* 0.33325195 */
	cr_expect_eq(bits(oq_half_to_float_ref(0x7c01)), 0x7fc02000u);     /* signalling NaN made quiet */
	cr_expect_eq(bits(oq_half_to_float_ref(0x03ff)), 0x387fc000u);     /* largest subnormal */
	/* bfloat16 */
	cr_expect_eq(oq_float_to_bf16_ref(1.0f), 0x3f80);
	cr_expect_eq(oq_float_to_bf16_ref(1.0f + ldexpf(1, -8)), 0x3f80); /* tie: to even */
	cr_expect_eq(oq_float_to_bf16_ref(1.0f + ldexpf(3, -8)), 0x3f82); /* tie: to even (up) */
	cr_expect_eq(oq_float_to_bf16_ref(from_bits(0x00010000u + 0x8000u)), 0x0002); /* subnormal tie up */
	cr_expect_eq(oq_float_to_bf16_ref(from_bits(0x7f7fffffu)), 0x7f80); /* rounds to Inf */
	cr_expect_eq(oq_float_to_bf16_ref(from_bits(0xff812345u)), 0xffc1); /* NaN: quiet, sign kept */
}
