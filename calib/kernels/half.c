/*
 * half.c - float16 / bfloat16 arrays to and from float32 (see half.h).
 *
 * float16 uses the hardware conversions (VCVTPH2PS / VCVTPS2PH with
 * round-to-nearest-even, 16 lanes on AVX-512F, 8 with F16C); bfloat16 has
 * no exact hardware conversion on x86 before AVX512-BF16, whose
 * VCVTNEPS2BF16 treats subnormals as zero, so it is done on the integer
 * bits: up = h << 16; down = (u + 0x7fff + ((u >> 16) & 1)) >> 16, NaN
 * made quiet first. The references below compute the same bits one
 * element at a time (tests compare them on every 16-bit pattern and on
 * float32 rounding boundaries).
 */
#include "calib/kernels/half.h"

#include <string.h>

#include "calib/exec/cpu.h"
#include "src/ir/dtype.h"

int oq_half_limit;

float oq_half_to_float_ref(uint16_t h)
{
	float f = oq_f16_to_f32(h);
	uint32_t u;

	if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN: quiet, as VCVTPH2PS makes it */
		memcpy(&u, &f, 4);
		u |= 0x400000;
		memcpy(&f, &u, 4);
	}
	return f;
}

uint16_t oq_float_to_half_ref(float f)
{
	return oq_f32_to_f16(f);
}

float oq_bf16_to_float_ref(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t oq_float_to_bf16_ref(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define F16C __attribute__((target("avx,f16c")))
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

AVX512 static size_t h2f_avx512(const uint16_t *h, float *f, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(f + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
	return i;
}

AVX512 static size_t f2h_avx512(const float *f, uint16_t *h, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtps_ph(_mm512_loadu_ps(f + i), RNE));
	return i;
}

F16C static size_t h2f_f16c(const uint16_t *h, float *f, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
	return i;
}

F16C static size_t f2h_f16c(const float *f, uint16_t *h, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), RNE));
	return i;
}

AVX512 static size_t b2f_avx512(const uint16_t *h, float *f, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
		_mm512_storeu_si512(f + i, _mm512_slli_epi32(u, 16));
	}
	return i;
}

AVX512 static size_t f2b_avx512(const float *f, uint16_t *h, size_t n)
{
	const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
	const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x400000);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i u = _mm512_loadu_si512(f + i);
		__mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absmask), inf);
		__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
		r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, quiet));
		_mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
	}
	return i;
}

/* Which vector path runs: 2 AVX-512F, 1 F16C (float16 only), 0 none. */
static int path(void)
{
	if (oq_half_limit < 1 && oq_cpu_avx512())
		return 2;
	if (oq_half_limit < 2 && oq_cpu_f16c())
		return 1;
	return 0;
}
#endif

void oq_half_to_float(const uint16_t *h, float *f, size_t n)
{
	size_t i = 0;
#if defined(__GNUC__) && defined(__x86_64__)
	int p = path();
	i = p == 2 ? h2f_avx512(h, f, n) : p == 1 ? h2f_f16c(h, f, n) : 0;
#endif
	for (; i < n; i++)
		f[i] = oq_half_to_float_ref(h[i]);
}

void oq_float_to_half(const float *f, uint16_t *h, size_t n)
{
	size_t i = 0;
#if defined(__GNUC__) && defined(__x86_64__)
	int p = path();
	i = p == 2 ? f2h_avx512(f, h, n) : p == 1 ? f2h_f16c(f, h, n) : 0;
#endif
	for (; i < n; i++)
		h[i] = oq_float_to_half_ref(f[i]);
}

void oq_bf16_to_float(const uint16_t *h, float *f, size_t n)
{
	size_t i = 0;
#if defined(__GNUC__) && defined(__x86_64__)
	if (path() == 2)
		i = b2f_avx512(h, f, n);
#endif
	for (; i < n; i++)
		f[i] = oq_bf16_to_float_ref(h[i]);
}

void oq_float_to_bf16(const float *f, uint16_t *h, size_t n)
{
	size_t i = 0;
#if defined(__GNUC__) && defined(__x86_64__)
	if (path() == 2)
		i = f2b_avx512(f, h, n);
#endif
	for (; i < n; i++)
		h[i] = oq_float_to_bf16_ref(f[i]);
}
