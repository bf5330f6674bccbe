/*
 * histogram.c - the calibration histogram and the range selections of
 * histogram.h: the fill (AVX-512 or plain C, chosen at run time), merging
 * and regridding, the min/max scan, and the EMA, percentile, entropy and
 * MSE selections.
 *
 * Contract: the counts are integers and a function of the multiset of
 * values alone, so every fill path gives the counts of the one-value-at-a-
 * time reference (oq_hist_add_f32_ref) in any order, batching or thread
 * split, and the min/max scan agrees with oq_minmax_f32_ref bit for bit;
 * the selections are pure functions of their bins. The grid: a side's bin
 * of a finite non-zero x is floor(|x| * 2^(L - e)), L = OQ_HIST_LOG2 and
 * 2^e strictly above every |x| so far; a larger |x| raising e by s moves
 * bin k to k >> s, exactly where its values fall on the new grid.
 */
#include "calib/histogram.h"
#include "calib/exec/cpu.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/quant/qparams.h"

static const char *const method_names[] = {"minmax", "ema", "percentile", "entropy", "mse", "auto"};

int oq_calib_method_parse(const char *s)
{
	for (int i = 0; i < (int)(sizeof method_names / sizeof *method_names); i++)
		if (!strcmp(s, method_names[i]))
			return i;
	return -1;
}

const char *oq_calib_method_name(int method)
{
	if (method < 0 || method >= (int)(sizeof method_names / sizeof *method_names))
		return "?";
	return method_names[method];
}

/* ------------------------------------------------------------ histogram */

#define SIDE ((size_t)OQ_HIST_SIDE)
#define NBINS (2 * SIDE)  /* both sides */
#define ZSLOT (2 * SIDE)  /* plain-C fill: scratch slot of exact zeros */
#define BSLOT (2 * SIDE + 1) /* ... and of NaN/Inf */

void oq_hist_init(oq_hist *h)
{
	memset(h, 0, sizeof *h);
	h->e = OQ_HIST_EMIN;
}

void oq_hist_free(oq_hist *h)
{
	free(h->b32);
	free(h->b64);
	oq_hist_init(h);
}

uint64_t oq_hist_narrow_max = UINT32_MAX;

/* The sum of h's bin counts (the fill's slots are empty between calls), saturating. */
static uint64_t bins_sum(const oq_hist *h)
{
	uint64_t t = 0;
	for (size_t k = 0; k < NBINS; k++) {
		uint64_t v = oq_hist_at(h, k);
		t = v > UINT64_MAX - t ? UINT64_MAX : t + v;
	}
	return t;
}

/* h's count k += v: within its bound when 32-bit (room), and 64-bit counts of values scanned
 * cannot overflow (2^64 values are out of reach). */
static inline void bump(oq_hist *h, size_t k, uint64_t v)
{
	if (h->b64)
		h->b64[k] += v;
	else
		h->b32[k] += (uint32_t)v;
}

/* h's count k := 0. */
static inline void clear(oq_hist *h, size_t k)
{
	if (h->b64)
		h->b64[k] = 0;
	else
		h->b32[k] = 0;
}

/* Moves h's counts (bins and slots) to 64 bits. OQ_ENOMEM (h unchanged). */
static int widen(oq_hist *h)
{
	uint64_t *w;

	if (!h->b32)
		return OQ_OK;
	if (!(w = oq_malloc((NBINS + 2) * sizeof *w)))
		return OQ_ENOMEM;
	for (size_t k = 0; k < NBINS + 2; k++)
		w[k] = h->b32[k];
	free(h->b32);
	h->b32 = NULL;
	h->b64 = w;
	return OQ_OK;
}

/*
 * Room in h's counts for n more values: its bound raised by n while that stays within
 * oq_hist_narrow_max (after a recount of the exact sum, when the running bound would pass it),
 * else 64-bit counts. h has bins. OQ_ENOMEM.
 */
static int room(oq_hist *h, uint64_t n)
{
	uint64_t max = oq_hist_narrow_max;

	if (!h->b32)
		return OQ_OK;
	if (n > max || h->bound > max - n)
		h->bound = bins_sum(h);
	if (n > max || h->bound > max - n)
		return widen(h);
	h->bound += n;
	return OQ_OK;
}

uint64_t *oq_hist_wide_bins(oq_hist *h, int e)
{
	if (!oq_hist_has_bins(h)) {
		e = e < OQ_HIST_EMIN ? OQ_HIST_EMIN : e > OQ_HIST_EMAX ? OQ_HIST_EMAX : e;
		if (!(h->b64 = oq_calloc(NBINS + 2, sizeof *h->b64)))
			return NULL;
		h->e = e;
		return h->b64;
	}
	return widen(h) ? NULL : h->b64;
}

void oq_hist_fit(oq_hist *h)
{
	uint64_t t;
	uint32_t *n;

	if (!h->b64 || (t = bins_sum(h)) > oq_hist_narrow_max || !(n = oq_malloc((NBINS + 2) * sizeof *n)))
		return;
	for (size_t k = 0; k < NBINS + 2; k++)
		n[k] = (uint32_t)h->b64[k]; /* each count is at most their sum */
	free(h->b64);
	h->b64 = NULL;
	h->b32 = n;
	h->bound = t;
}

int oq_hist_exponent(double a)
{
	int e;
	(void)frexp(a, &e); /* a = m 2^e with m in [0.5, 1): 2^(e-1) <= a < 2^e */
	return e < OQ_HIST_EMIN ? OQ_HIST_EMIN : e > OQ_HIST_EMAX ? OQ_HIST_EMAX : e;
}

/* The float scale of exponent e: 2^(L - e), a normal float for EMIN <= e <= EMAX. */
static float scale_of(int e)
{
	return ldexpf(1.0f, OQ_HIST_LOG2 - e);
}

/* Raises h's exponent to e (> h->e): bin k of each side moves to k >> (e - h->e). In place and
 * in increasing k: the target k >> s < k was emptied before anything arrives there (its own
 * values left when it was visited), except bin 0, which keeps its values. */
static void rescale(oq_hist *h, int e)
{
	int s = e - h->e;
	for (size_t side = 0; side < 2; side++) {
		size_t o = side * SIDE;
		for (size_t k = 1; k < SIDE; k++) {
			uint64_t v = oq_hist_at(h, o + k);
			if (!v)
				continue;
			clear(h, o + k);
			bump(h, o + (s >= OQ_HIST_LOG2 ? 0 : k >> s), v);
		}
	}
	h->e = e;
}

int oq_hist_reserve(oq_hist *h, int e)
{
	e = e < OQ_HIST_EMIN ? OQ_HIST_EMIN : e > OQ_HIST_EMAX ? OQ_HIST_EMAX : e;
	if (!oq_hist_has_bins(h)) {
		if (!(h->b32 = oq_calloc(NBINS + 2, sizeof *h->b32)))
			return OQ_ENOMEM;
		h->e = e;
		h->bound = 0;
	} else if (e > h->e) {
		rescale(h, e);
	}
	return OQ_OK;
}

/*
 * Bin (both sides: index into bin[]) of a finite non-zero x at scale sc =
 * 2^(L - e): a multiplication by a power of two, exact while the scale is a
 * normal float (OQ_HIST_EMIN sees to it; a product below 2^-126 rounds but
 * stays below 1, so k = 0 either way), hence k < 2^L. e is a strict bound
 * (2^e > |x|): with 2^e >= |x|, 2^e itself would be clamped into bin 2^L - 1
 * at e but fall into bin 2^(L-1) at e + 1, and the counts would depend on
 * the order of arrival. Sign and magnitude are kept apart (two sides
 * aligned at 0), so |x| is the sum of the sides and every edge k w is exact.
 */
static size_t bin_of(float x, float sc)
{
	float u = fabsf(x) * sc;
	size_t k = u < (float)(SIDE - 1) ? (size_t)u : SIDE - 1;
	return x < 0 ? SIDE + k : k;
}

int oq_hist_add_f32_ref(oq_hist *h, const float *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = p[i];
		int rc;
		if (!(fabsf(x) < INFINITY))
			continue;
		if (x == 0.0f) {
			h->n_zero++;
			continue;
		}
		if ((rc = oq_hist_reserve(h, oq_hist_exponent(fabsf(x)))) || (rc = room(h, 1)))
			return rc;
		bump(h, bin_of(x, scale_of(h->e)), 1);
	}
	return OQ_OK;
}

int oq_hist_simd = 1;
int oq_hist_runs = 1;

#define FILL_BLOCK 1024 /* values whose bin indices are computed at a time */
#define NSUB 4           /* interleaved sub-histograms of the fill */
/* blocks counted into the sub-histograms between two flushes: each gets a quarter of the
 * values, at most 255 * 1024 / 4 = 65280 < 65536, so uint16 counts cannot overflow */
#define SUB_BLOCKS 255

/*
 * Index kernels: for p[0..m), write bin indices to idx (m + 16 slots) and
 * return how many; a side's index is clamped to top (the bin of the
 * block's largest |x|, so the clamp never moves a value when the caller's
 * amax is right, and a wrong amax cannot reach a bin the fill did not
 * clear). The plain-C kernel writes one per value, ZSLOT for an exact
 * zero and BSLOT for NaN/Inf (branch-free, so the compiler vectorises it).
 * The AVX-512 and AVX2 kernels count zeros in *nzero instead and store only
 * the indices of finite non-zero values.
 */
static inline size_t idx_tail(const float *p, size_t m, float sc, uint32_t top, uint16_t *idx,
			      uint64_t *nzero)
{
	size_t k = 0;
	for (size_t j = 0; j < m; j++) {
		float x = p[j], u = fabsf(x) * sc;
		unsigned fin = fabsf(x) < INFINITY, nz = fin & (x != 0.0f);
		uint32_t b = nz ? (u < (float)top ? (uint32_t)u : top) : 0;
		*nzero += fin & !nz;
		idx[k] = (uint16_t)(x < 0 ? (uint32_t)SIDE + b : b);
		k += nz;
	}
	return k;
}

/* The body of idx_c, which the compiler vectorises. */
static inline __attribute__((always_inline)) size_t idx_body(const float *p, size_t m, float sc, uint32_t topi,
							     uint16_t *idx, uint64_t *nzero, oq_hist *h)
{
	const float top = (float)topi;

	(void)nzero;
	(void)h;
	for (size_t j = 0; j < m; j++) {
		/* sign and magnitude from the bits (fabsf or x < 0 ? ... made GCC 12 give up
		 * vectorising the loop) */
		float x = p[j], u;
		uint32_t b, neg;
		int fin = (x - x) == 0.0f; /* false for NaN and +-Inf */
		memcpy(&b, &x, sizeof b);
		neg = (b >> 31) << OQ_HIST_LOG2;
		b &= 0x7fffffffu;
		memcpy(&u, &b, sizeof u);
		u *= sc;
		u = u < top ? u : top; /* also maps NaN and Inf into range before the cast */
		idx[j] = (uint16_t)(!fin ? (uint32_t)BSLOT : x == 0.0f ? (uint32_t)ZSLOT : (uint32_t)u + neg);
	}
	return m;
}

static size_t idx_c(const float *p, size_t m, float sc, uint32_t topi, uint16_t *idx, uint64_t *nzero,
		    oq_hist *h)
{
	return idx_body(p, m, sc, topi, idx, nzero, h);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

/* The same with 16 values a step: compare masks, zeros by popcount, indices compressed. */
AVX512 static size_t idx_avx512(const float *p, size_t m, float sc, uint32_t topi, uint16_t *idx,
				uint64_t *nzero, oq_hist *h)
{
	const __m512 scv = _mm512_set1_ps(sc), inf = _mm512_set1_ps(INFINITY);
	const __m512 zero = _mm512_setzero_ps();
	const __m512i top = _mm512_set1_epi32((int)topi), side = _mm512_set1_epi32((int)SIDE);
	uint64_t z = 0;
	size_t j = 0, k = 0;
	/* vectors left before the next one-bin test (never, within one call of at most 1024 values,
	 * when oq_hist_runs is 0) */
	unsigned skip = oq_hist_runs ? 0 : UINT_MAX;

	for (; j + 16 <= m; j += 16) {
		__m512 x = _mm512_loadu_ps(p + j), a = _mm512_abs_ps(x);
		__mmask16 fin = _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ);
		__mmask16 nz = _mm512_mask_cmp_ps_mask(fin, a, zero, _CMP_GT_OQ);
		__mmask16 neg = _mm512_mask_cmp_ps_mask(nz, x, zero, _CMP_LT_OQ);
		/* NaN/Inf lanes convert to 0x80000000 and are clamped, then compressed away */
		__m512i b = _mm512_min_epu32(_mm512_cvttps_epi32(_mm512_mul_ps(a, scv)), top);
		b = _mm512_mask_add_epi32(b, neg, b, side);
		if (nz == 0xFFFF && !skip) {
			/* 16 values in one bin (a flat region: a blank page's background, a saturated
			 * Clip) are one count of 16, not 16 increments of the same bin in a chain; after
			 * a vector that is not, the next 7 are not checked (the test itself is not
			 * free where nothing is flat) */
			__m512i b0 = _mm512_permutexvar_epi32(_mm512_setzero_si512(), b);
			if (_mm512_cmpeq_epi32_mask(b, b0) == 0xFFFF) {
				bump(h, (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(b)), 16);
				continue;
			}
			skip = 8;
		}
		skip -= skip > 0;
		z += (unsigned)__builtin_popcount(fin & (unsigned)~nz);
		_mm256_storeu_si256((__m256i *)(idx + k), _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(nz, b)));
		k += (unsigned)__builtin_popcount(nz);
	}
	*nzero += z;
	return k + idx_tail(p + j, m - j, sc, topi, idx + k, nzero);
}

/* The sums of bins [k, k + 16) of the four sub-histograms, which are cleared. */
AVX512 static inline __m512i sub_sum16(uint16_t *s0, uint16_t *s1, uint16_t *s2, uint16_t *s3, size_t k)
{
	const __m256i z = _mm256_setzero_si256();
	__m512i t = _mm512_add_epi32(
		_mm512_add_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s0 + k))),
				 _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s1 + k)))),
		_mm512_add_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s2 + k))),
				 _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s3 + k)))));
	_mm256_storeu_si256((__m256i *)(s0 + k), z);
	_mm256_storeu_si256((__m256i *)(s1 + k), z);
	_mm256_storeu_si256((__m256i *)(s2 + k), z);
	_mm256_storeu_si256((__m256i *)(s3 + k), z);
	return t;
}

/* sum_side for the first n / 16 * 16 bins, 16 a step; returns how many it did. Bins no value
 * reached stay unwritten. */
AVX512 static size_t sum_side_avx512(uint64_t *b, uint16_t *s0, uint16_t *s1, uint16_t *s2, uint16_t *s3, size_t n)
{
	size_t k = 0;

	for (; k + 16 <= n; k += 16) {
		__m512i t = sub_sum16(s0, s1, s2, s3, k);
		if (_mm512_test_epi32_mask(t, t)) {
			__m512i lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(t));
			__m512i hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(t, 1));
			_mm512_storeu_si512(b + k, _mm512_add_epi64(_mm512_loadu_si512(b + k), lo));
			_mm512_storeu_si512(b + k + 8, _mm512_add_epi64(_mm512_loadu_si512(b + k + 8), hi));
		}
	}
	return k;
}

/* The same into 32-bit counts. */
AVX512 static size_t sum_side32_avx512(uint32_t *b, uint16_t *s0, uint16_t *s1, uint16_t *s2, uint16_t *s3,
				       size_t n)
{
	size_t k = 0;

	for (; k + 16 <= n; k += 16) {
		__m512i t = sub_sum16(s0, s1, s2, s3, k);
		if (_mm512_test_epi32_mask(t, t))
			_mm512_storeu_si512(b + k, _mm512_add_epi32(_mm512_loadu_si512(b + k), t));
	}
	return k;
}

/* The sums of bins [k, k + 8) of the four sub-histograms, which are cleared (AVX2). */
__attribute__((target("avx2"))) static inline __m256i sub_sum8(uint16_t *s0, uint16_t *s1, uint16_t *s2,
								 uint16_t *s3, size_t k)
{
	const __m128i z = _mm_setzero_si128();
	__m256i t = _mm256_add_epi32(
		_mm256_add_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s0 + k))),
				 _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s1 + k)))),
		_mm256_add_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s2 + k))),
				 _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s3 + k)))));
	_mm_storeu_si128((__m128i *)(s0 + k), z);
	_mm_storeu_si128((__m128i *)(s1 + k), z);
	_mm_storeu_si128((__m128i *)(s2 + k), z);
	_mm_storeu_si128((__m128i *)(s3 + k), z);
	return t;
}

/* sum_side_avx512 and sum_side32_avx512 on AVX2, 8 bins a step. */
__attribute__((target("avx2"))) static size_t sum_side_avx2(uint64_t *b, uint16_t *s0, uint16_t *s1, uint16_t *s2,
							      uint16_t *s3, size_t n)
{
	size_t k = 0;

	for (; k + 8 <= n; k += 8) {
		__m256i t = sub_sum8(s0, s1, s2, s3, k);
		if (!_mm256_testz_si256(t, t)) {
			__m256i lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(t));
			__m256i hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256(t, 1));
			_mm256_storeu_si256((__m256i *)(b + k),
					    _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(b + k)), lo));
			_mm256_storeu_si256((__m256i *)(b + k + 4),
					    _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(b + k + 4)), hi));
		}
	}
	return k;
}

__attribute__((target("avx2"))) static size_t sum_side32_avx2(uint32_t *b, uint16_t *s0, uint16_t *s1, uint16_t *s2,
								uint16_t *s3, size_t n)
{
	size_t k = 0;

	for (; k + 8 <= n; k += 8) {
		__m256i t = sub_sum8(s0, s1, s2, s3, k);
		if (!_mm256_testz_si256(t, t))
			_mm256_storeu_si256((__m256i *)(b + k),
					    _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(b + k)), t));
	}
	return k;
}

/*
 * compress_lut[m]: the lanes of an 8-bit mask m in ascending order, one per
 * nibble from the lowest (lane i of the j-th set bit in nibble j; the
 * nibbles past popcount(m) are 0). The AVX2 fill's compress: AVX2 has no
 * compress instruction, so a permutation from this table packs the indices
 * of the finite non-zero values of 8 at the front.
 */
static const uint32_t compress_lut[256] = {
	0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
	0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
	0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
	0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
	0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
	0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
	0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
	0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
	0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
	0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
	0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
	0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
	0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
	0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
	0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
	0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
	0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
	0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
	0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
	0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
	0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
	0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
	0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
	0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
	0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
	0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
	0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
	0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
	0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
	0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
	0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
	0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};

/*
 * idx_avx512 on 8 lanes: compare masks, zeros counted by popcount, a vector
 * of 8 values in one bin counted as one +8 (with the same skip rule), and the
 * indices of the other finite non-zero values packed by compress_lut.
 */
__attribute__((target("avx2,popcnt"))) static size_t idx_avx2(const float *p, size_t m, float sc, uint32_t topi,
							       uint16_t *idx, uint64_t *nzero, oq_hist *h)
{
	const __m256 scv = _mm256_set1_ps(sc), inf = _mm256_set1_ps(INFINITY), zero = _mm256_setzero_ps();
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256i top = _mm256_set1_epi32((int)topi), side = _mm256_set1_epi32((int)SIDE);
	const __m256i nib = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), low4 = _mm256_set1_epi32(15);
	uint64_t z = 0;
	size_t j = 0, k = 0;
	unsigned skip = oq_hist_runs ? 0 : UINT_MAX;

	for (; j + 8 <= m; j += 8) {
		__m256 x = _mm256_loadu_ps(p + j), a = _mm256_and_ps(x, absm);
		__m256 fin = _mm256_cmp_ps(a, inf, _CMP_LT_OQ);
		__m256 nzv = _mm256_and_ps(fin, _mm256_cmp_ps(a, zero, _CMP_GT_OQ));
		unsigned nz = (unsigned)_mm256_movemask_ps(nzv), fm = (unsigned)_mm256_movemask_ps(fin);
		/* NaN/Inf lanes convert to 0x80000000 and are clamped, then packed away */
		__m256i b = _mm256_min_epu32(_mm256_cvttps_epi32(_mm256_mul_ps(a, scv)), top);
		__m256i neg = _mm256_and_si256(_mm256_castps_si256(nzv), _mm256_srai_epi32(_mm256_castps_si256(x), 31));
		__m256i perm;
		b = _mm256_add_epi32(b, _mm256_and_si256(neg, side));
		if (nz == 0xFF && !skip) {
			__m256i b0 = _mm256_permutevar8x32_epi32(b, _mm256_setzero_si256());
			if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(b, b0)) == -1) {
				bump(h, (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(b)), 8);
				continue;
			}
			skip = 8;
		}
		skip -= skip > 0;
		z += (unsigned)__builtin_popcount(fm & ~nz);
		perm = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)compress_lut[nz]), nib), low4);
		b = _mm256_permutevar8x32_epi32(b, perm);
		_mm_storeu_si128((__m128i *)(idx + k),
				 _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
		k += (unsigned)__builtin_popcount(nz);
	}
	*nzero += z;
	return k + idx_tail(p + j, m - j, sc, topi, idx + k, nzero);
}
#else
#define idx_avx512 idx_c
#define idx_avx2 idx_c
#endif

/* h's counts [o, o + n) += s0[k] + s1[k] + s2[k] + s3[k] (k < n), and the four cleared. */
static void sum_side(oq_hist *h, size_t o, uint16_t *s0, uint16_t *s1, uint16_t *s2, uint16_t *s3, size_t n)
{
	size_t k = 0;

#if defined(__GNUC__) && defined(__x86_64__)
	if (oq_hist_simd == 1 && oq_cpu_avx512())
		k = h->b64 ? sum_side_avx512(h->b64 + o, s0, s1, s2, s3, n)
			   : sum_side32_avx512(h->b32 + o, s0, s1, s2, s3, n);
	else if (oq_hist_simd && oq_cpu_avx2_fma())
		k = h->b64 ? sum_side_avx2(h->b64 + o, s0, s1, s2, s3, n)
			   : sum_side32_avx2(h->b32 + o, s0, s1, s2, s3, n);
#endif
	for (; k < n; k++) {
		uint32_t v = (uint32_t)s0[k] + s1[k] + s2[k] + s3[k];
		if (v)
			bump(h, o + k, v);
		s0[k] = s1[k] = s2[k] = s3[k] = 0;
	}
}

/* Adds the sub-histograms' bins [0, top] of each side and the two slots to h, and clears them. */
static void flush_sub(oq_hist *h, uint16_t (*sub)[NBINS + 2], size_t top)
{
	for (size_t side = 0; side < 2; side++)
		sum_side(h, side * SIDE, sub[0] + side * SIDE, sub[1] + side * SIDE, sub[2] + side * SIDE,
			 sub[3] + side * SIDE, top + 1);
	for (size_t k = ZSLOT; k <= BSLOT; k++) {
		uint32_t v = (uint32_t)sub[0][k] + sub[1][k] + sub[2][k] + sub[3][k];
		if (v)
			bump(h, k, v);
		sub[0][k] = sub[1][k] = sub[2][k] = sub[3][k] = 0;
	}
}

/* the fill's bin indices (both sides and the two slots) are 16-bit */
_Static_assert(NBINS + 2 <= 65536, "histogram bins must fit uint16_t indices");

/*
 * The caller's min/max scan gives the block's largest |x|, which fixes e
 * before any value is counted; then the indices of a block are computed
 * branch-free (AVX-512 and AVX2: zeros counted by mask / popcount, the
 * indices of finite non-zero values compacted; a vector of 16 / 8 values
 * that share one bin counted as one +16 / +8; plain C: zeros and NaN / Inf through two scratch
 * slots after the bins) and counted into interleaved 16-bit
 * sub-histograms.
 */
int oq_hist_add_f32(oq_hist *h, const float *p, size_t n, float amax)
{
	uint16_t idx[FILL_BLOCK + 16];
	/* NSUB interleaved histograms of uint16 counts (value j of a block goes to j % NSUB), summed
	 * into bin[] every SUB_BLOCKS blocks: incrementing one bin again and again is a serial
	 * dependency, and 16-bit counts keep the bins in use within L1. Only bins [0, top] of each
	 * side and the two slots are cleared and summed: worth it for enough values per bin. */
	uint16_t sub[NSUB][NBINS + 2];
	size_t (*kern)(const float *, size_t, float, uint32_t, uint16_t *, uint64_t *, oq_hist *) =
		!oq_hist_simd			       ? idx_c
		: oq_hist_simd == 1 && oq_cpu_avx512() ? idx_avx512
		: oq_cpu_avx2_fma()		       ? idx_avx2
						       : idx_c;
	uint64_t nzero = 0;
	uint32_t top;
	float sc, u;
	int rc, use_sub;

	if (!(amax > 0)) { /* no finite non-zero value: only zeros to count */
		for (size_t i = 0; i < n; i++)
			h->n_zero += p[i] == 0.0f;
		return OQ_OK;
	}
	if (amax > FLT_MAX)
		amax = FLT_MAX;
	if ((rc = oq_hist_reserve(h, oq_hist_exponent(amax))) || (rc = room(h, n)))
		return rc;
	sc = scale_of(h->e);
	u = amax * sc;
	top = u < (float)(SIDE - 1) ? (uint32_t)u : (uint32_t)(SIDE - 1);
	use_sub = n >= (size_t)top + 64;
	if (use_sub) {
		for (int q = 0; q < NSUB; q++) {
			memset(sub[q], 0, ((size_t)top + 1) * sizeof **sub);
			memset(sub[q] + SIDE, 0, ((size_t)top + 1) * sizeof **sub);
			sub[q][ZSLOT] = sub[q][BSLOT] = 0;
		}
	}
	for (size_t i = 0, blocks = 0; i < n; i += FILL_BLOCK) {
		size_t m = n - i < FILL_BLOCK ? n - i : FILL_BLOCK;
		size_t k = kern(p + i, m, sc, top, idx, &nzero, h), j = 0;
		if (use_sub) {
			for (; j + NSUB <= k; j += NSUB) {
				uint64_t w;
				memcpy(&w, idx + j, sizeof w);
				sub[0][(uint16_t)w]++;
				sub[1][(uint16_t)(w >> 16)]++;
				sub[2][(uint16_t)(w >> 32)]++;
				sub[3][w >> 48]++;
			}
			if (++blocks == SUB_BLOCKS) {
				flush_sub(h, sub, top);
				blocks = 0;
			}
		}
		if (h->b64)
			for (; j < k; j++)
				h->b64[idx[j]]++;
		else
			for (; j < k; j++)
				h->b32[idx[j]]++;
	}
	if (use_sub)
		flush_sub(h, sub, top);
	h->n_zero += nzero + oq_hist_at(h, ZSLOT);
	clear(h, ZSLOT);
	clear(h, BSLOT);
	return OQ_OK;
}

/* x as the fill sees it: finite doubles beyond float's range saturate (NaN/Inf stay). */
static float as_fill(double x)
{
	if ((x - x) != 0.0)
		return (float)x;
	return x > FLT_MAX ? FLT_MAX : x < -FLT_MAX ? -FLT_MAX : (float)x;
}

int oq_hist_add_f64(oq_hist *h, const double *p, size_t n)
{
	float buf[FILL_BLOCK];
	for (size_t i = 0; i < n; i += FILL_BLOCK) {
		size_t m = n - i < FILL_BLOCK ? n - i : FILL_BLOCK;
		float lo = INFINITY, hi = -INFINITY;
		uint64_t bad = 0;
		int rc;
		for (size_t j = 0; j < m; j++)
			buf[j] = as_fill(p[i + j]);
		oq_minmax_f32(buf, m, &lo, &hi, &bad);
		if ((rc = oq_hist_add_f32(h, buf, m, lo <= hi ? fmaxf(-lo, hi) : 0)))
			return rc;
	}
	return OQ_OK;
}

static int add_u64(uint64_t *a, uint64_t b)
{
	if (b > UINT64_MAX - *a)
		return 0;
	*a += b;
	return 1;
}

int oq_hist_merge(oq_hist *a, const oq_hist *b)
{
	int s, rc;

	if (!add_u64(&a->n_zero, b->n_zero))
		return OQ_EINVAL;
	if (!oq_hist_has_bins(b))
		return OQ_OK;
	if ((rc = oq_hist_reserve(a, b->e)) || (rc = room(a, b->b32 ? b->bound : bins_sum(b))))
		return rc;
	s = a->e - b->e; /* >= 0 now */
	for (size_t side = 0; side < 2; side++)
		for (size_t k = 0; k < SIDE; k++) {
			uint64_t v = oq_hist_at(b, side * SIDE + k);
			size_t to = side * SIDE + (s >= OQ_HIST_LOG2 ? 0 : k >> s);
			if (!v)
				continue;
			if (a->b64 && v > UINT64_MAX - a->b64[to])
				return OQ_EINVAL;
			bump(a, to, v);
		}
	return OQ_OK;
}

int oq_hist_regrid(oq_hist *h, int e)
{
	e = e < OQ_HIST_EMIN ? OQ_HIST_EMIN : e > OQ_HIST_EMAX ? OQ_HIST_EMAX : e;
	if (!oq_hist_has_bins(h) && !(h->b32 = oq_calloc(NBINS + 2, sizeof *h->b32)))
		return OQ_ENOMEM;
	h->e = e; /* every count is 0: any grid describes them */
	h->bound = 0;
	return OQ_OK;
}

int oq_hist_drain(oq_hist *dst, oq_hist *src)
{
	int rc;

	if (oq_hist_has_bins(src)) {
		if ((!oq_hist_has_bins(dst) && (rc = oq_hist_regrid(dst, src->e))) ||
		    (rc = room(dst, src->b32 ? src->bound : bins_sum(src))))
			return rc;
		for (size_t k = 0; k < NBINS; k++) {
			uint64_t v = oq_hist_at(src, k);
			if (!v)
				continue;
			bump(dst, k, v);
			clear(src, k);
		}
		src->bound = 0;
	}
	dst->n_zero += src->n_zero;
	src->n_zero = 0;
	return OQ_OK;
}

int oq_hist_copy(oq_hist *dst, const oq_hist *src)
{
	oq_hist_init(dst);
	dst->n_zero = src->n_zero;
	if (src->b32) {
		if (!(dst->b32 = oq_malloc((NBINS + 2) * sizeof *dst->b32)))
			return OQ_ENOMEM;
		memcpy(dst->b32, src->b32, (NBINS + 2) * sizeof *dst->b32);
	} else if (src->b64) {
		if (!(dst->b64 = oq_malloc((NBINS + 2) * sizeof *dst->b64)))
			return OQ_ENOMEM;
		memcpy(dst->b64, src->b64, (NBINS + 2) * sizeof *dst->b64);
	}
	dst->e = src->e;
	dst->bound = src->bound;
	return OQ_OK;
}

/* ------------------------------------------------------------ min/max scan */

#define LANES 16

void oq_minmax_f32_ref(const float *p, size_t n, float *lo, float *hi, uint64_t *bad)
{
	for (size_t i = 0; i < n; i++) {
		float x = p[i] + 0.0f;
		if ((x - x) != 0.0f) {
			(*bad)++;
			continue;
		}
		*lo = x < *lo ? x : *lo;
		*hi = x > *hi ? x : *hi;
	}
}

/* LANES independent lanes of compare-and-select (vectorisable without -ffast-math); inlined into
 * minmax_c and minmax_c_avx2. */
static inline __attribute__((always_inline)) void minmax_body(const float *p, size_t n, float *lo_out,
							      float *hi_out, uint64_t *bad_out)
{
	float lo[LANES], hi[LANES];
	uint32_t bad[LANES];
	size_t i = 0;

	for (int j = 0; j < LANES; j++) {
		lo[j] = INFINITY;
		hi[j] = -INFINITY;
		bad[j] = 0;
	}
	while (i + LANES <= n) {
		/* lane counters are flushed every 2^24 blocks so they cannot overflow */
		size_t stop = n - i > ((size_t)LANES << 24) ? i + ((size_t)LANES << 24) : n;
		for (; i + LANES <= stop; i += LANES) {
			for (int j = 0; j < LANES; j++) {
				float x = p[i + (size_t)j] + 0.0f;
				int fin = (x - x) == 0.0f;
				float a = fin ? x : lo[j];
				float b = fin ? x : hi[j];
				lo[j] = a < lo[j] ? a : lo[j];
				hi[j] = b > hi[j] ? b : hi[j];
				bad[j] += (uint32_t)!fin;
			}
		}
		for (int j = 0; j < LANES; j++) {
			*bad_out += bad[j];
			bad[j] = 0;
		}
	}
	oq_minmax_f32_ref(p + i, n - i, &lo[0], &hi[0], bad_out);
	for (int j = 0; j < LANES; j++) {
		*lo_out = lo[j] < *lo_out ? lo[j] : *lo_out;
		*hi_out = hi[j] > *hi_out ? hi[j] : *hi_out;
	}
}

static void minmax_c(const float *p, size_t n, float *lo_out, float *hi_out, uint64_t *bad_out)
{
	minmax_body(p, n, lo_out, hi_out, bad_out);
}

#if defined(__GNUC__) && defined(__x86_64__)
/* minmax_c compiled for AVX2: per lane the same compares and selects, so the same results. */
__attribute__((target("avx2"))) static void minmax_c_avx2(const float *p, size_t n, float *lo_out, float *hi_out,
							    uint64_t *bad_out)
{
	minmax_body(p, n, lo_out, hi_out, bad_out);
}

/* Masked min/max (NaN/Inf lanes keep the old value), two accumulators against the latency. */
AVX512 static void minmax_avx512(const float *p, size_t n, float *lo_out, float *hi_out,
				 uint64_t *bad_out)
{
	const __m512 zero = _mm512_setzero_ps();
	__m512 lo0 = _mm512_set1_ps(INFINITY), lo1 = lo0, hi0 = _mm512_set1_ps(-INFINITY), hi1 = hi0;
	uint64_t bad = 0;
	size_t i = 0;
	float lo, hi;

	for (; i + 32 <= n; i += 32) {
		__m512 x = _mm512_add_ps(_mm512_loadu_ps(p + i), zero);
		__m512 y = _mm512_add_ps(_mm512_loadu_ps(p + i + 16), zero);
		__mmask16 fx = _mm512_cmp_ps_mask(_mm512_sub_ps(x, x), zero, _CMP_EQ_OQ);
		__mmask16 fy = _mm512_cmp_ps_mask(_mm512_sub_ps(y, y), zero, _CMP_EQ_OQ);
		lo0 = _mm512_mask_min_ps(lo0, fx, lo0, x);
		hi0 = _mm512_mask_max_ps(hi0, fx, hi0, x);
		lo1 = _mm512_mask_min_ps(lo1, fy, lo1, y);
		hi1 = _mm512_mask_max_ps(hi1, fy, hi1, y);
		bad += 32u - (unsigned)__builtin_popcount(fx) - (unsigned)__builtin_popcount(fy);
	}
	lo = _mm512_reduce_min_ps(_mm512_min_ps(lo0, lo1));
	hi = _mm512_reduce_max_ps(_mm512_max_ps(hi0, hi1));
	oq_minmax_f32_ref(p + i, n - i, &lo, &hi, &bad);
	*lo_out = lo < *lo_out ? lo : *lo_out;
	*hi_out = hi > *hi_out ? hi : *hi_out;
	*bad_out += bad;
}
#else
#define minmax_avx512 minmax_c
#define minmax_c_avx2 minmax_c
#endif

void oq_minmax_f32(const float *p, size_t n, float *lo, float *hi, uint64_t *bad)
{
	if (oq_hist_simd == 1 && oq_cpu_avx512())
		minmax_avx512(p, n, lo, hi, bad);
	else if (oq_hist_simd && oq_cpu_avx2_fma())
		minmax_c_avx2(p, n, lo, hi, bad);
	else
		minmax_c(p, n, lo, hi, bad);
}

/* ------------------------------------------------------------ bins for the selections */

int oq_hbins_init(oq_hbins *b, double lo, double hi, size_t n, int abs)
{
	memset(b, 0, sizeof *b);
	if (!(lo < hi) || !isfinite(lo) || !isfinite(hi) || n < 1 || (abs && lo != 0))
		return OQ_EINVAL;
	if (n > (1u << 24) || !(b->bin = oq_calloc(n, sizeof *b->bin)))
		return OQ_ENOMEM;
	b->lo = lo;
	b->hi = hi;
	b->n = n;
	b->abs = abs;
	return OQ_OK;
}

void oq_hbins_free(oq_hbins *b)
{
	free(b->bin);
	memset(b, 0, sizeof *b);
}

/* Signed cell of x on h's grid (see oq_hist_view): k >= 0 for x >= 0, -1 - k for x < 0. */
static long cell(const oq_hist *h, double x)
{
	float f = as_fill(x);
	size_t k;
	if (!(fabsf(f) < INFINITY))
		f = x < 0 ? -FLT_MAX : FLT_MAX; /* not for data ranges, which are finite */
	k = bin_of(f, scale_of(h->e)) % SIDE;
	return f < 0 ? -1 - (long)k : (long)k;
}

/*
 * Signed cell g of x is k for x >= 0 and -1 - k for x < 0 (cells [g w,
 * (g+1) w), up to which side an edge value falls on), so the signed view is
 * cells cell(lo)..cell(hi), and the |x| view adds the sides. A tensor whose
 * dominant side reaches max|x| in [2^(e-1), 2^e) has more than 2^(L-1)
 * bins over [0, max|x|].
 */
int oq_hist_view(const oq_hist *h, double lo, double hi, int abs, oq_hbins *out)
{
	double w = ldexp(1.0, h->e - OQ_HIST_LOG2);
	long g0, g1;
	int rc;

	memset(out, 0, sizeof *out);
	if (!oq_hist_has_bins(h) || !(lo <= hi))
		return OQ_EINVAL;
	if (abs) {
		g0 = 0;
		g1 = cell(h, fmax(-lo, hi));
	} else {
		g0 = cell(h, lo);
		g1 = cell(h, hi);
	}
	if ((rc = oq_hbins_init(out, (double)g0 * w, (double)(g1 + 1) * w, (size_t)(g1 - g0 + 1), abs)))
		return rc;
	out->n_zero = h->n_zero;
	for (long g = g0; g <= g1; g++) {
		size_t k = (size_t)(g - g0);
		if (abs)
			out->bin[k] = oq_hist_at(h, k) + oq_hist_at(h, SIDE + k); /* no overflow: counts are checked */
		else
			out->bin[k] = oq_hist_at(h, g >= 0 ? (size_t)g : SIDE + (size_t)(-1 - g));
	}
	return OQ_OK;
}

/* Count of bin k with the zeros put back where 0 falls. */
static double count_at(const oq_hbins *h, size_t k, size_t zbin)
{
	return (double)h->bin[k] + (k == zbin ? (double)h->n_zero : 0.0);
}

/* The bin 0 falls into (n when outside the range). */
static size_t zero_bin(const oq_hbins *h)
{
	double u;

	if (h->abs)
		return 0;
	if (h->lo > 0 || h->hi < 0)
		return h->n;
	u = floor(-h->lo * (double)h->n / (h->hi - h->lo));
	return u < (double)(h->n - 1) ? (size_t)u : h->n - 1;
}

static double total(const oq_hbins *h)
{
	double t = (double)h->n_zero;
	for (size_t k = 0; k < h->n; k++)
		t += (double)h->bin[k];
	return t;
}

static void clip_to(double lo, double hi, double *out_lo, double *out_hi)
{
	if (*out_lo < lo)
		*out_lo = lo;
	if (*out_hi > hi)
		*out_hi = hi;
	if (*out_lo > *out_hi) /* cannot happen with p > 0; keep a valid range anyway */
		*out_lo = *out_hi;
}

/* Edge k of h (k = 0..n). */
static double edge(const oq_hbins *h, size_t k)
{
	return k == h->n ? h->hi : h->lo + (h->hi - h->lo) * (double)k / (double)h->n;
}

/* ------------------------------------------------------------ EMA */

/* PyTorch's MovingAverageMinMaxObserver, ONNX Runtime's CalibMovingAverage: min <- min + c (sample_min - min), max alike. */
void oq_ema_update(double *lo, double *hi, int *init, double blo, double bhi, double c)
{
	if (!*init) {
		*lo = blo;
		*hi = bhi;
		*init = 1;
		return;
	}
	*lo += c * (blo - *lo);
	*hi += c * (bhi - *hi);
}

/* ------------------------------------------------------------ percentile */

/* The largest k such that the top k bins hold at most q values. */
static size_t top_cut(const oq_hbins *h, double q, size_t zb)
{
	double acc = 0;
	size_t k = 0;
	while (k < h->n) {
		acc += count_at(h, h->n - 1 - k, zb);
		if (acc > q)
			break;
		k++;
	}
	return k;
}

/*
 * ONNX Runtime's HistogramCollector, conservative on bin edges. Signed:
 * q = N (100 - p) / 200; lower end lo + k w for the largest k with
 * count(bins < k) <= q, upper end hi - k' w for the largest k' with
 * count(top k' bins) <= q (p = 100 gives min / max exactly). |x|: t = amax
 * - k' w, the largest k' with count(top k' bins) <= N (100 - p) / 100,
 * range [-t, t]. Both clipped to [lo, hi].
 */
void oq_select_percentile(const oq_hbins *h, double lo, double hi, double p, double *out_lo,
			  double *out_hi)
{
	double n = total(h);
	size_t zb = zero_bin(h);

	if (!(p < 100) || n <= 0) {
		*out_lo = lo;
		*out_hi = hi;
		return;
	}
	if (h->abs) {
		size_t k = top_cut(h, n * (100 - p) / 100, zb);
		double t = edge(h, h->n - k);
		*out_lo = -t;
		*out_hi = t;
	} else {
		double q = n * (100 - p) / 200, acc = 0;
		size_t k = 0, k2 = top_cut(h, q, zb);
		while (k < h->n) {
			acc += count_at(h, k, zb);
			if (acc > q)
				break;
			k++;
		}
		*out_lo = edge(h, k);
		*out_hi = edge(h, h->n - k2);
	}
	clip_to(lo, hi, out_lo, out_hi);
}

/* ------------------------------------------------------------ entropy */

#define KL_EPS 1e-4 /* counts given to an empty Q bin where P is not empty */

static double xlogx(double x)
{
	return x > 0 ? x * log(x) : 0;
}

/*
 * TensorRT's calibrator (NVIDIA pytorch-quantization _compute_amax_entropy,
 * MXNet _get_optimal_threshold) on the |x| histogram h of n bins, T target
 * bins. For every candidate i = T..n:
 *     P = h[0:i], with the outlier mass O = sum h[i:] added to P[i-1];
 *     Q: bins 0..i-1 in T groups (bin k -> group floor(k T / i)), each
 *        group's mass from h[0:i] spread evenly over its bins where P != 0;
 *     KL(P||Q) of the normalised P (total N) and Q (total N - O).
 * Q is constant over a group, so
 *     KL = (sum_k P_k ln P_k - sum_j (G_j + [j last] O) ln(G_j / n_j)) / N + ln((N - O) / N)
 * with G_j a group's mass and n_j its non-empty bins: O(T) per candidate
 * from prefix sums. Where the outliers land in a last group h leaves empty,
 * Q gets KL_EPS counts instead of 0 (MXNet's smoothing), so a sparse tail
 * costs a large but finite KL. Exact zeros are left out of P
 * (pytorch-quantization's skip_zeros): every grid holds them exactly, and
 * after a Relu their spike in bin 0 would dominate KL. The smallest i with
 * the least KL wins: t = i w, range [-t, t] clipped to [lo, hi].
 */
int oq_select_entropy(const oq_hbins *h, double lo, double hi, int target, double *out_lo,
		      double *out_hi)
{
	size_t n = h->n, T = (size_t)target, best_i = n;
	double *C = NULL, *PL = NULL, *NZ = NULL, N, best = INFINITY, t;

	*out_lo = lo;
	*out_hi = hi;
	if (!h->abs || target < 2 || n < T)
		return OQ_EINVAL;
	C = oq_malloc((n + 1) * sizeof *C);
	PL = oq_malloc((n + 1) * sizeof *PL);
	NZ = oq_malloc((n + 1) * sizeof *NZ);
	if (!C || !PL || !NZ) {
		free(C);
		free(PL);
		free(NZ);
		return OQ_ENOMEM;
	}
	C[0] = PL[0] = NZ[0] = 0;
	for (size_t k = 0; k < n; k++) {
		double c = (double)h->bin[k]; /* exact zeros left out (see above) */
		C[k + 1] = C[k] + c;
		PL[k + 1] = PL[k] + xlogx(c);
		NZ[k + 1] = NZ[k] + (c > 0);
	}
	N = C[n];
	for (size_t i = T; i <= n && N > 0; i++) {
		double O = N - C[i], last = C[i] - C[i - 1] + O;
		double plogp = PL[i - 1] + xlogx(last), plogq = 0, kl;
		if (C[i] <= 0)
			continue;
		for (size_t j = 0; j < T; j++) {
			size_t s = (j * i + T - 1) / T, e = ((j + 1) * i + T - 1) / T;
			double G = C[e] - C[s], nz = NZ[e] - NZ[s];
			double mass = G + (j == T - 1 ? O : 0);
			if (j == T - 1 && C[i] - C[i - 1] == 0 && O > 0)
				nz += 1; /* the outliers made P[i-1] non-empty */
			if (nz == 0 || mass == 0)
				continue;
			plogq += mass * log(G > 0 ? G / nz : KL_EPS);
		}
		kl = (plogp - plogq) / N + log(C[i] / N);
		if (kl < best) {
			best = kl;
			best_i = i;
		}
	}
	free(C);
	free(PL);
	free(NZ);
	t = edge(h, best_i);
	*out_lo = -t;
	*out_hi = t;
	clip_to(lo, hi, out_lo, out_hi);
	return OQ_OK;
}

/* ------------------------------------------------------------ MSE */

/*
 * Our model, in the spirit of PyTorch's HistogramObserver and AIMET's
 * tf_enhanced: a candidate range gets the quantize pass' own qparams
 * (oq_qparams on the activation dtype), step s and grid ends gl = (qmin -
 * zp) s, gh = (qmax - zp) s. The expected squared error, c a bin's centre
 * and cnt its count:
 *     c > gh: cnt (c - gh)^2;  c < gl: cnt (gl - c)^2      (clipping)
 *     |c| < s/2: cnt c^2       (rounds to the exact 0 of every grid)
 *     otherwise: cnt s^2/12    (rounding, uniform over one step)
 * and exact zeros cost nothing; each term is O(1) from prefix sums of cnt,
 * cnt c and cnt c^2. Candidates: the data's own range and the bin edges
 * inside it; symmetric t = max|x| or k w; asymmetric: each end in turn
 * (coordinate descent from [min, max], at most 8 rounds). Ties keep the
 * wider range. AIMET's unsigned symmetric grid (zero point 0) reads signed
 * bins with gl = 0 and moves the upper end only. FP8 E4M3FN (|x| bins,
 * s = t / 448): the step is 2^(e-3) s on each binade [2^e s, 2^(e+1) s),
 * e = -6..8, and 2^-9 s below (subnormals); a bin costs cnt step^2 / 12 in
 * range, c^2 when |c| < 2^-10 s, (c - t)^2 above t.
 */

/* Prefix sums over the bins: count, count*c, count*c^2 (c = bin centre). */
typedef struct msectx {
	const oq_hbins *h;
	double *C, *S1, *S2; /* n + 1 entries each */
	double w, inv_w;     /* bin width and its inverse */
	int dtype, form;     /* target grid: activation dtype and oq_qparams form */
	int fp8;             /* dtype is float8e4m3fn (|x| bins, binade model) */
	int64_t qmin, qmax;  /* the form's grid */
} msectx;

/* Bins [a, b) clamped to [0, n]; sums of count, count*c, count*c^2. */
static void sums(const msectx *m, double a, double b, double *c0, double *c1, double *c2)
{
	double n = (double)m->h->n;
	size_t ia, ib;
	a = a < 0 ? 0 : a > n ? n : a;
	b = b < 0 ? 0 : b > n ? n : b;
	ia = (size_t)a;
	ib = (size_t)b;
	if (ib <= ia) {
		*c0 = *c1 = *c2 = 0;
		return;
	}
	*c0 = m->C[ib] - m->C[ia];
	*c1 = m->S1[ib] - m->S1[ia];
	*c2 = m->S2[ib] - m->S2[ia];
}

/* First bin index whose centre is > x (centre k = lo + (k + 0.5) w), as a double for sums(). */
static double first_above(const msectx *m, double x)
{
	double u = (x - m->h->lo) / m->w - 0.5;
	double k = floor(u) + 1;
	return k < 0 ? 0 : k;
}

/* First bin index whose centre is >= x. */
static double first_at_or_above(const msectx *m, double x)
{
	double u = (x - m->h->lo) / m->w - 0.5;
	double k = ceil(u);
	return k < 0 ? 0 : k;
}

/* The level (integer code) the quantize pass gives x on the grid (s, zp): round half to even,
 * saturated. */
static int64_t level(const msectx *m, double x, double s, int64_t zp)
{
	double q = nearbyint(x / s) + (double)zp;
	return q < (double)m->qmin ? m->qmin : q > (double)m->qmax ? m->qmax : (int64_t)q;
}

/* Squared error of cnt values spread evenly over [l, r] that all become v. */
static double seg(double cnt, double l, double r, double v)
{
	double d = 0.5 * (l + r) - v, len = r - l;
	return cnt * (d * d + len * len / 12);
}

/*
 * Expected squared error of range [a, b] on the target grid (+inf when it has no qparams),
 * each bin's count spread evenly over the bin (a piecewise-constant density) and quantized by
 * the pass' Q then DQ (round to nearest level, clipping at the grid ends). Level j takes
 * [v - s/2, v + s/2) (v = (j - zp) s; the end levels reach to -inf / +inf). Walking the levels
 * from the one holding the lowest bin edge to the one holding the highest, each boundary
 * v + s/2 cuts one bin: its left part goes to level j, its right part to j + 1, and the bins
 * wholly between two boundaries cost sum cnt ((c - v)^2 + w^2/12), O(1) from the prefix sums.
 * The result is exact for that density and continuous in a and b, so the search does not jump
 * between ranges that happen to align bin centres with levels (a bin-centre model did:
 * rounding error that depends on the binning). A step narrower than a bin (16-bit grids) makes
 * more levels than bins; then each bin costs its clipped parts exactly and s^2/12 per value
 * inside the grid (values spread over many steps).
 */
/* The level walk of mse_err (a step s >= w, levels j0..j1, zero point zp), one level at a time:
 * the reference of walk_fast. */
static double walk_ref(const msectx *m, double s, int64_t zp, int64_t j0, int64_t j1)
{
	double n = (double)m->h->n, lo = m->h->lo, w = m->w, e = 0;
	double cut_l = 0, cut_cnt = 0; /* the right part of the bin cut by the last boundary */
	size_t start = 0;               /* the first bin not yet counted */

	for (int64_t j = j0; j <= j1; j++) {
		double v = (double)(j - zp) * s, bd = v + 0.5 * s, u;
		size_t kb = m->h->n;
		if (cut_cnt > 0) /* what the previous boundary left of its bin */
			e += seg(cut_cnt, cut_l, lo + (double)start * w, v);
		cut_cnt = 0;
		if (j < j1) {
			/* boundary v + s/2, inside the bins' range (lo is in level j0's cell, hi in j1's) */
			u = (bd - lo) * m->inv_w;
			kb = u < 1 ? 0 : u >= n - 1 ? m->h->n - 1 : (size_t)u;
		}
		if (kb > start) {
			double c0 = m->C[kb] - m->C[start], c1 = m->S1[kb] - m->S1[start];
			double c2 = m->S2[kb] - m->S2[start] - 2 * v * c1 + v * v * c0;
			e += (c2 > 0 ? c2 : 0) + c0 * w * w / 12;
		}
		if (j < j1) {
			double cnt = (double)m->h->bin[kb], el = lo + (double)kb * w, f = (bd - el) * m->inv_w;
			f = f < 0 ? 0 : f > 1 ? 1 : f;
			if (cnt > 0 && f > 0)
				e += seg(cnt * f, el, bd, v);
			cut_cnt = cnt * (1 - f);
			cut_l = bd;
			start = kb + 1;
		}
	}
	return e;
}


#if defined(__SSE2__)
#include <emmintrin.h>
/* a > b ? a : b and a < b ? a : b as maxsd / minsd compute them (NaN, -0 included): no branch. */
static double max_sd(double a, double b)
{
	return _mm_cvtsd_f64(_mm_max_sd(_mm_set_sd(a), _mm_set_sd(b)));
}
static double min_sd(double a, double b)
{
	return _mm_cvtsd_f64(_mm_min_sd(_mm_set_sd(a), _mm_set_sd(b)));
}
#else
static double max_sd(double a, double b)
{
	return a > b ? a : b;
}
static double min_sd(double a, double b)
{
	return a < b ? a : b;
}
#endif

/*
 * walk_ref without its data-dependent branches: each level computes its three terms (the
 * previous boundary's leftover, the whole bins, this boundary's part of its bin) and adds
 * each one, masked to +0.0 where walk_ref adds nothing. e starts at +0 and only grows, so
 * e + 0.0 == e and the sum has walk_ref's bits; the terms are walk_ref's expressions (the
 * clamps as maxsd / minsd, which select exactly as its ?: do). The tests it drops (empty
 * bins, a cut at a bin edge, a block of bins summing to about 0) go either way level by level,
 * and mispredicting them cost more than the arithmetic. Bin indices are int64 (converted to and
 * from double in one instruction; the values are the same).
 */
static double walk_fast(const msectx *m, double s, int64_t zp, int64_t j0, int64_t j1)
{
	const double *C = m->C, *S1 = m->S1, *S2 = m->S2;
	const uint64_t *bin = m->h->bin;
	const int64_t nb = (int64_t)m->h->n;
	double n = (double)m->h->n, lo = m->h->lo, w = m->w, inv_w = m->inv_w, e = 0;
	double cut_l = 0, cut_cnt = 0;
	int64_t start = 0;

	for (int64_t j = j0; j <= j1; j++) {
		double v = (double)(j - zp) * s, bd = v + 0.5 * s, u;
		int64_t kb = nb;
		if (cut_cnt > 0)
			e += seg(cut_cnt, cut_l, lo + (double)start * w, v);
		cut_cnt = 0;
		if (j < j1) {
			u = (bd - lo) * inv_w;
			kb = u < 1 ? 0 : u >= n - 1 ? nb - 1 : (int64_t)u;
		}
		if (kb > start) {
			double c0 = C[kb] - C[start], c1 = S1[kb] - S1[start];
			double c2 = S2[kb] - S2[start] - 2 * v * c1 + v * v * c0;
			e += max_sd(c2, 0) + c0 * w * w / 12;
		}
		if (j < j1) {
			double cnt = (double)(int64_t)bin[kb], el = lo + (double)kb * w;
			double f = min_sd(1, max_sd(0, (bd - el) * inv_w));
			if (cnt > 0 && f > 0)
				e += seg(cnt * f, el, bd, v);
			cut_cnt = cnt * (1 - f);
			cut_l = bd;
			start = kb + 1;
		}
	}
	return e;
}

int oq_mse_ref;

static double mse_err(const msectx *m, double a, double b)
{
	float sf;
	int64_t zp, j0, j1;
	double s, lo = m->h->lo, w = m->w, e = 0, gl, gh;

	if (oq_qparams(a, b, m->dtype, m->form, 0, &sf, &zp) || !(sf > 0))
		return INFINITY;
	s = sf;
	gl = (double)(m->qmin - zp) * s;
	gh = (double)(m->qmax - zp) * s;
	if (s < w) {
		for (size_t k = 0; k < m->h->n; k++) {
			double l = lo + (double)k * w, r = l + w, cnt = (double)m->h->bin[k], x0, x1;
			if (!cnt)
				continue;
			x0 = l > gl ? l : gl; /* the part inside [gl, gh] */
			x1 = r < gh ? r : gh;
			if (l < gl)
				e += seg(cnt * ((r < gl ? r : gl) - l) / w, l, r < gl ? r : gl, gl);
			if (r > gh)
				e += seg(cnt * (r - (l > gh ? l : gh)) / w, l > gh ? l : gh, r, gh);
			if (x1 > x0)
				e += cnt * (x1 - x0) / w * s * s / 12;
		}
		return e;
	}
	j0 = level(m, lo, s, zp);
	j1 = level(m, m->h->hi, s, zp);
	return oq_mse_ref ? walk_ref(m, s, zp, j0, j1) : walk_fast(m, s, zp, j0, j1);
}

/* Expected squared error of [-t, t] on the FP8 E4M3FN grid (|x| histogram). */
static double mse_err_fp8(const msectx *m, double t)
{
	double s = t / OQ_FP8_E4M3FN_MAX, n = (double)m->h->n, e = 0, c0, c1, c2, a, b;

	if (!(s > 0))
		return INFINITY;
	/* clipping above t */
	a = first_above(m, t);
	sums(m, a, n, &c0, &c1, &c2);
	e += c2 - 2 * t * c1 + t * t * c0;
	/* below half the smallest subnormal: rounds to 0 */
	b = first_at_or_above(m, ldexp(s, -10));
	sums(m, 0, b, &c0, &c1, &c2);
	e += c2;
	/* subnormals (k = -7), then binades [2^k s, 2^(k+1) s) for k = -6..8, the last up to t */
	for (int k = -7; k <= 8; k++) {
		double top = k < 8 ? ldexp(s, k + 1) : t, step = ldexp(s, (k < -6 ? -6 : k) - 3);
		double ib = first_at_or_above(m, top);
		if (ib > a || k == 8)
			ib = a;
		if (ib < b)
			ib = b;
		sums(m, b, ib, &c0, &c1, &c2);
		e += c0 * step * step / 12;
		b = ib;
	}
	return e;
}

/* Which end a search moves. */
enum { END_SYM, END_HI, END_LO };

/* Error of the range with end `which` at t (the other end at a or b; END_SYM: [-t, t]). */
static double err_at(const msectx *m, int which, double a, double b, double t)
{
	if (which == END_SYM)
		return m->fp8 ? mse_err_fp8(m, t) : mse_err(m, -t, t);
	return which == END_HI ? mse_err(m, a, t) : mse_err(m, t, b);
}

#define COARSE 32 /* candidates of a search's first pass */
#define REFINE 8  /* each further pass looks 8 times closer */

/*
 * The least-error end among the edges k0..k1 of m's bins, or `cur` (error *best) when none is
 * better. Candidates are tried from the wide end (END_LO: k0 up, else k1 down) and only a
 * strictly smaller error wins, so ties keep the wider range. The error is smooth in the end
 * (mse_err), so the search narrows down instead of trying every edge: every step-th edge
 * (step = ceil(count / COARSE)), then around the best so far every step/REFINE-th edge within
 * one step, and so on down to single edges: about COARSE + 2 REFINE log_REFINE(count / COARSE)
 * evaluations (80 for 4096 edges) instead of count.
 */
static double search(const msectx *m, int which, double a, double b, size_t k0, size_t k1,
		     double cur, double *best)
{
	size_t cnt = k1 - k0 + 1, step = (cnt + COARSE - 1) / COARSE, bi = 0;
	double bt = cur;

	if (k1 < k0)
		return cur;
	for (size_t i = 0;;) {
		double t = edge(m->h, which == END_LO ? k0 + i : k1 - i), e = err_at(m, which, a, b, t);
		if (e < *best) {
			*best = e;
			bt = t;
			bi = i;
		}
		if ((i += step) >= cnt)
			break;
	}
	while (step > 1) {
		size_t ns = (step + REFINE - 1) / REFINE, c = bi, from = c > step ? c - step : 0;
		for (size_t i = from + ns; i < c + step && i < cnt; i += ns) {
			double t, e;
			if (i == c)
				continue;
			t = edge(m->h, which == END_LO ? k0 + i : k1 - i);
			if ((e = err_at(m, which, a, b, t)) < *best) {
				*best = e;
				bt = t;
				bi = i;
			}
		}
		step = ns;
	}
	return bt;
}

static void mse_free(msectx *m)
{
	free(m->C);
	free(m->S1);
	free(m->S2);
}

/* m for bins h and the grid (dtype, form): the prefix sums. OQ_EINVAL when h's kind (|x| or
 * signed) does not describe the grid, OQ_ENOMEM. */
static int mse_init(msectx *m, const oq_hbins *h, int dtype, int form)
{
	size_t n = h->n;

	memset(m, 0, sizeof *m);
	m->h = h;
	m->dtype = dtype;
	m->form = form;
	m->fp8 = oq_qtype_is_fp8(dtype);
	if (oq_qform_mirrored(dtype, form) != !!h->abs ||
	    (m->fp8 ? form == OQ_QP_ASYM : !oq_qgrid(dtype, form, 0, &m->qmin, &m->qmax)))
		return OQ_EINVAL;
	m->w = (h->hi - h->lo) / (double)n;
	m->inv_w = (double)n / (h->hi - h->lo);
	m->C = oq_malloc((n + 1) * sizeof *m->C);
	m->S1 = oq_malloc((n + 1) * sizeof *m->S1);
	m->S2 = oq_malloc((n + 1) * sizeof *m->S2);
	if (!m->C || !m->S1 || !m->S2) {
		mse_free(m);
		return OQ_ENOMEM;
	}
	m->C[0] = m->S1[0] = m->S2[0] = 0;
	for (size_t k = 0; k < n; k++) {
		double c = h->lo + ((double)k + 0.5) * m->w, cnt = (double)h->bin[k];
		m->C[k + 1] = m->C[k] + cnt;
		m->S1[k + 1] = m->S1[k] + cnt * c;
		m->S2[k + 1] = m->S2[k] + cnt * c * c;
	}
	return OQ_OK;
}

int oq_mse_error(const oq_hbins *h, double a, double b, int dtype, int form, double *err)
{
	return oq_mse_errors(h, 1, &a, &b, dtype, form, err, NULL);
}

/* The clipping part of [a, b]'s error: bins whose centre lies beyond a grid end g cost
 * cnt ((c - g)^2 + w^2 / 12) (centre model; |x| bins: the upper end only). */
static double clip_err(const msectx *m, double a, double b)
{
	double n = (double)m->h->n, w2 = m->w * m->w / 12, gl, gh, k, c0, c1, c2, e;
	float sf;
	int64_t zp;

	if (m->fp8) {
		gh = b;
		gl = -b;
	} else {
		if (oq_qparams(a, b, m->dtype, m->form, 0, &sf, &zp) || !(sf > 0))
			return INFINITY;
		gl = (double)(m->qmin - zp) * sf;
		gh = (double)(m->qmax - zp) * sf;
	}
	k = first_above(m, gh);
	sums(m, k, n, &c0, &c1, &c2);
	e = c2 - 2 * gh * c1 + gh * gh * c0 + c0 * w2;
	if (!m->h->abs) {
		k = first_at_or_above(m, gl);
		sums(m, 0, k, &c0, &c1, &c2);
		e += c2 - 2 * gl * c1 + gl * gl * c0 + c0 * w2;
	}
	return e > 0 ? e : 0;
}

int oq_mse_errors(const oq_hbins *h, size_t n, const double *a, const double *b, int dtype,
		  int form, double *err, double *clip)
{
	msectx m;
	int rc = mse_init(&m, h, dtype, form);

	for (size_t i = 0; !rc && i < n; i++) {
		err[i] = m.fp8 ? mse_err_fp8(&m, b[i]) : mse_err(&m, a[i], b[i]);
		if (clip)
			clip[i] = clip_err(&m, a[i], b[i]);
	}
	mse_free(&m);
	return rc;
}

int oq_select_mse(const oq_hbins *h, double lo, double hi, int dtype, int form, double *out_lo,
		  double *out_hi)
{
	msectx m;
	size_t n = h->n;
	int rc;

	*out_lo = lo;
	*out_hi = hi;
	if ((rc = mse_init(&m, h, dtype, form)))
		return rc;
	if (h->abs) {
		double bt = fmax(-lo, hi), best = err_at(&m, END_SYM, 0, 0, bt);
		bt = search(&m, END_SYM, 0, 0, 1, n - 1, bt, &best);
		*out_lo = -bt;
		*out_hi = bt;
	} else {
		/* edges above 0: k > -lo / w; below 0: k < -lo / w (edge k = lo + k w, exact) */
		double z = -h->lo / m.w, a = lo, b = hi, best = mse_err(&m, a, b);
		size_t kp = z < 0 ? 1 : (size_t)floor(z) + 1, kn = z <= 1 ? 0 : (size_t)ceil(z) - 1;
		for (int round = 0; round < 8; round++) {
			double na = a, nb = b;
			if (b > 0 && kp < n)
				nb = search(&m, END_HI, a, b, kp, n - 1, b, &best);
			if (a < 0 && form == OQ_QP_ASYM && kn >= 1)
				na = search(&m, END_LO, a, nb, 1, kn < n - 1 ? kn : n - 1, a, &best);
			if (na == a && nb == b)
				break;
			a = na;
			b = nb;
		}
		*out_lo = a;
		*out_hi = b;
	}
	clip_to(lo, hi, out_lo, out_hi);
	mse_free(&m);
	return OQ_OK;
}

/* ------------------------------------------------------------ by method */

int oq_select_range(const oq_hist *h, double lo, double hi, int method, int dtype, int form,
		    double p, int target, double *out_lo, double *out_hi)
{
	oq_hbins b;
	int abs = method == OQ_CALIB_ENTROPY || oq_qform_mirrored(dtype, form), rc = OQ_OK;

	*out_lo = lo;
	*out_hi = hi;
	if (method == OQ_CALIB_MINMAX)
		return OQ_OK;
	if (method != OQ_CALIB_PERCENTILE && method != OQ_CALIB_ENTROPY && method != OQ_CALIB_MSE)
		return OQ_EINVAL;
	if ((rc = oq_hist_view(h, lo, hi, abs, &b)))
		return rc;
	if (method == OQ_CALIB_PERCENTILE)
		oq_select_percentile(&b, lo, hi, p, out_lo, out_hi);
	else if (method == OQ_CALIB_ENTROPY && target > 0 && b.n >= (size_t)target)
		rc = oq_select_entropy(&b, lo, hi, target, out_lo, out_hi);
	else if (method == OQ_CALIB_MSE)
		rc = oq_select_mse(&b, lo, hi, dtype, form, out_lo, out_hi);
	oq_hbins_free(&b);
	if (rc) {
		*out_lo = lo;
		*out_hi = hi;
	}
	return rc;
}
