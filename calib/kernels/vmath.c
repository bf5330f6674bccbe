/*
 * vmath.c - vectorised float32 math shared by the kernels, 16 lanes at a
 * time on AVX-512 and 8 on AVX2, each with a scalar reference doing exactly
 * the same operations (tests compare the bits of all three):
 * - Erf (GELU in transformer exports: Div, Erf, Add, Mul, Mul);
 * - Sigmoid (SiLU and squeeze-excitation gates, detection heads);
 * - exp(x - m) of a line with its sum in double (Softmax);
 * - the sum of a line in double (ReduceMean / ReduceSum over the last
 *   axis: LayerNorm's mean and variance in exports);
 * - the maximum of a line and scaling by a constant.
 *
 * Erf (|x| = a; coefficients fitted with mpmath chebyfit, rounded to float):
 *   a < 0.921875:  erf(x) = x * P(a^2), P of degree 6 (fit error 4e-10);
 *   otherwise:     erf(x) = sign(x) * (1 - exp(Q(min(a, 3.92) - 2.42))),
 *                  Q of degree 10 fitting log(erfc) (fit error 3e-9
 *                  relative in erfc); past 3.92, erfc < 6e-9 rounds away
 *                  and the result is +-1.
 * exp(q) = 2^n * E(r), n = nearest(q / ln 2), r = q - n ln 2 (ln 2 in two
 * parts, so n ln2_hi is exact), E of degree 6 on [-ln2/2, ln2/2] (fit
 * error 2e-9): within 1 ulp of expf over the ranges used here. Every
 * polynomial step is one fused multiply-add. Erf was checked exhaustively
 * against erf in double over all positive floats: at most 2 ulp (glibc's
 * erff: 1 ulp), 0.25 % of inputs at 2 ulp. NaN stays NaN, +-Inf gives
 * +-1, -0 gives -0.
 *
 * 2^n: AVX-512 scales by n directly (vscalefps) and the reference by
 * ldexpf, one rounding each; AVX2 multiplies by 2^(n + 64) (exact: the
 * result is normal) and then by 2^-64 (the one rounding, where the result
 * is subnormal): the same value.
 * Sigmoid(x) = (x >= 0 ? 1 : e) / (1 + e), e = exp(-|x|) (exp(-104) and
 * below: 0): one division, no overflow; within 2 ulp of the exact value
 * (tests); NaN stays NaN, +-Inf give 1 and 0.
 *
 * Sums: element i goes to stripe i % 16 (a double accumulator each, the
 * padding of the last vector adding +0), then the stripes are added
 * pairwise in a fixed order (j += j + 8, j + 4, j + 2, j + 1), so the result
 * depends only on the data, not on the thread or the entry point.
 *
 * Without AVX-512 or AVX2 (and FMA) the callers of Erf, exp and the sums
 * keep their scalar loops (erff, expf, serial sums): the references use
 * fmaf, which is a slow library call there. Sigmoid is the reference on
 * every CPU, so its bits do not depend on the CPU.
 */
#include "calib/kernels/vmath.h"
#include "calib/exec/cpu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const float ERF_P[7] = {
    8.387590787606314e-05f, -0.0008147202315740287f, 0.0052014668472111225f, -0.026859592646360397f,
    0.11283699423074722f,   -0.37612634897232056f,   1.128379225730896f};
static const float ERF_Q[11] = {
    -5.593435403739022e-08f,  -2.3575008611942394e-08f, 1.9513875031407224e-06f,
    -1.4208043467078824e-05f, 8.442359830951318e-05f,   -0.00045938396942801774f,
    0.0023415079340338707f,   -0.011578889563679695f,   -0.9412024617195129f,
    -5.201870918273926f,      -7.384636402130127f};
static const float EXP_E[7] = {0.0013941108481958508f,
                               0.00837512593716383f,
                               0.04166635125875473f,
                               0.16666415333747864f,
                               0.5f,
                               1.0f,
                               1.0f};
#define ERF_SMALL 0.921875f /* below: x * P(x^2) */
#define ERF_BIG 3.92f       /* above: +-1 */
#define ERF_MID 2.42f       /* Q's centre */
#define LOG2E 1.4426950216293335f
#define LN2_HI 0.693359375f /* 9 significant bits: n * LN2_HI is exact */
#define LN2_LO (-0.00021219444170128554f)
#define EXP_LO (-104.0f) /* exp(-104) < half the least subnormal: 0 */
#define STRIPES 16

/* exp(q) for q in [EXP_LO, 0] (see the file comment). */
static float exp_ref(float q)
{
	float n = nearbyintf(q * LOG2E), r = fmaf(n, -LN2_HI, q), e = EXP_E[0];
	r = fmaf(n, -LN2_LO, r);
	for (int i = 1; i < 7; i++)
		e = fmaf(e, r, EXP_E[i]);
	return ldexpf(e, (int)n);
}

float oq_vm_sigmoid_ref(float x)
{
	float e;

	if (x != x)
		return x;
	e = exp_ref(fmaxf(-fabsf(x), EXP_LO));
	return (x >= 0 ? 1.0f : e) / (1.0f + e);
}

float oq_vm_exp_ref(float x)
{
	return exp_ref(fmaxf(x, EXP_LO));
}

float oq_erf_ref(float x)
{
	float a = fabsf(x), u, q;

	if (x != x)
		return x;
	if (a < ERF_SMALL) {
		float t = a * a, p = ERF_P[0];
		for (int i = 1; i < 7; i++)
			p = fmaf(p, t, ERF_P[i]);
		return x * p;
	}
	u = fminf(a, ERF_BIG) - ERF_MID;
	q = ERF_Q[0];
	for (int i = 1; i < 11; i++)
		q = fmaf(q, u, ERF_Q[i]);
	return copysignf(1.0f - exp_ref(q), x);
}

/* Adds stripe sums pairwise in the fixed order of the file comment. */
static double stripes_total(double *acc)
{
	for (int step = STRIPES / 2; step >= 1; step /= 2)
		for (int j = 0; j < step; j++)
			acc[j] += acc[j + step];
	return acc[0];
}

double oq_vm_sum_ref(const float *x, size_t n)
{
	double acc[STRIPES] = {0};
	for (size_t i = 0; i < (n + STRIPES - 1) / STRIPES * STRIPES; i++)
		acc[i % STRIPES] += i < n ? (double)x[i] : 0.0;
	return stripes_total(acc);
}

double oq_vm_expsum_ref(const float *x, float m, float *y, size_t n)
{
	double acc[STRIPES] = {0};
	for (size_t i = 0; i < (n + STRIPES - 1) / STRIPES * STRIPES; i++) {
		float e = i < n ? oq_vm_exp_ref(x[i] - m) : 0.0f;
		if (i < n)
			y[i] = e;
		acc[i % STRIPES] += (double)e;
	}
	return stripes_total(acc);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,fma")))


/* exp_ref on 16 lanes. */
AVX512 static __m512 exp16(__m512 q)
{
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(q, _mm512_set1_ps(LOG2E)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), q), e = _mm512_set1_ps(EXP_E[0]);
	r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
	for (int i = 1; i < 7; i++)
		e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(EXP_E[i]));
	return _mm512_scalef_ps(e, n);
}

/* oq_erf_ref on 16 lanes (the same operations in the same order). */
AVX512 static __m512 erf16(__m512 x)
{
	__m512i sx = _mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
	__m512 a = _mm512_abs_ps(x), t = _mm512_mul_ps(a, a), p = _mm512_set1_ps(ERF_P[0]);
	__m512 u, q, big;
	__mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(ERF_SMALL), _CMP_LT_OQ);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);

	for (int i = 1; i < 7; i++)
		p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(ERF_P[i]));
	p = _mm512_mul_ps(x, p);
	u = _mm512_sub_ps(_mm512_min_ps(a, _mm512_set1_ps(ERF_BIG)), _mm512_set1_ps(ERF_MID));
	q = _mm512_set1_ps(ERF_Q[0]);
	for (int i = 1; i < 11; i++)
		q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(ERF_Q[i]));
	big = _mm512_sub_ps(_mm512_set1_ps(1.0f), exp16(q));
	big = _mm512_castsi512_ps(
	    _mm512_or_epi32(_mm512_castps_si512(big), sx)); /* 1 - e > 0: copysign */
	return _mm512_mask_mov_ps(_mm512_mask_mov_ps(big, small, p), nan, x);
}

/* oq_vm_sigmoid_ref on 16 lanes. */
AVX512 static __m512 sigmoid16(__m512 x)
{
	__m512 e = exp16(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)), _mm512_set1_ps(EXP_LO)));
	__mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	__m512 y = _mm512_div_ps(_mm512_mask_mov_ps(e, pos, _mm512_set1_ps(1.0f)), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
	return _mm512_mask_mov_ps(y, nan, x);
}

static __mmask16 tail_mask(size_t left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

AVX512 static void erf_avx512(const float *x, float *y, size_t n)
{
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		_mm512_mask_storeu_ps(y + i, m, erf16(_mm512_maskz_loadu_ps(m, x + i)));
	}
}

AVX512 static void sigmoid_avx512(const float *x, float *y, size_t n)
{
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		_mm512_mask_storeu_ps(y + i, m, sigmoid16(_mm512_maskz_loadu_ps(m, x + i)));
	}
}

/* 16 floats (x, or exp(x - m) stored to y) into the 16 stripes lo (0..7) and hi (8..15). */
AVX512 static double sum_avx512(const float *x, size_t n, int expm, float m, float *y)
{
	__m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
	double acc[STRIPES];

	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);
		__m512 v = _mm512_maskz_loadu_ps(k, x + i);
		if (expm) {
			v = exp16(_mm512_max_ps(_mm512_sub_ps(v, _mm512_set1_ps(m)),
			                        _mm512_set1_ps(EXP_LO)));
			v = _mm512_maskz_mov_ps(k, v);
			_mm512_mask_storeu_ps(y + i, k, v);
		}
		lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
		hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(
		                           _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
	}
	_mm512_storeu_pd(acc, lo);
	_mm512_storeu_pd(acc + 8, hi);
	return stripes_total(acc);
}

AVX512 static float max_avx512(const float *x, size_t n, int *nan)
{
	__m512 m = _mm512_set1_ps(-INFINITY);
	__mmask16 bad = 0;
	float out[16], r;

	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);
		__m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i);
		bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
		m = _mm512_max_ps(m, v);
	}
	*nan = bad != 0;
	_mm512_storeu_ps(out, m);
	r = out[0];
	for (int j = 1; j < 16; j++)
		r = out[j] > r ? out[j] : r;
	return r;
}

AVX512 static void scale_avx512(float *y, size_t n, float s)
{
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = tail_mask(n - i);
		_mm512_mask_storeu_ps(
		    y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), _mm512_set1_ps(s)));
	}
}

/*
 * The AVX2 twins: the same operations on 8 lanes. A tail shorter than a
 * vector is copied into a padded buffer (zeros, or -Inf for the maximum),
 * so every element takes the vector's operations.
 */
#define AVX2 __attribute__((target("avx2,fma")))

/* exp_ref on 8 lanes; 2^n as two exact-then-rounding products (file comment). */
AVX2 static __m256 exp8(__m256 q)
{
	__m256 n = _mm256_round_ps(_mm256_mul_ps(q, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), q), e = _mm256_set1_ps(EXP_E[0]);
	__m256i k = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127 + 64));

	r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
	for (int i = 1; i < 7; i++)
		e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(EXP_E[i]));
	e = _mm256_mul_ps(e, _mm256_castsi256_ps(_mm256_slli_epi32(k, 23)));
	return _mm256_mul_ps(e, _mm256_set1_ps(0x1p-64f));
}

/* erf16 on 8 lanes. */
AVX2 static __m256 erf8(__m256 x)
{
	__m256 sx = _mm256_and_ps(x, _mm256_set1_ps(-0.0f)), a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
	__m256 t = _mm256_mul_ps(a, a), p = _mm256_set1_ps(ERF_P[0]), u, q, big;
	__m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(ERF_SMALL), _CMP_LT_OQ);
	__m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);

	for (int i = 1; i < 7; i++)
		p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(ERF_P[i]));
	p = _mm256_mul_ps(x, p);
	u = _mm256_sub_ps(_mm256_min_ps(a, _mm256_set1_ps(ERF_BIG)), _mm256_set1_ps(ERF_MID));
	q = _mm256_set1_ps(ERF_Q[0]);
	for (int i = 1; i < 11; i++)
		q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(ERF_Q[i]));
	big = _mm256_or_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), exp8(q)), sx); /* 1 - e > 0: copysign */
	return _mm256_blendv_ps(_mm256_blendv_ps(big, p, small), x, nan);
}

/* sigmoid16 on 8 lanes. */
AVX2 static __m256 sigmoid8(__m256 x)
{
	__m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), one = _mm256_set1_ps(1.0f);
	__m256 e = exp8(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), _mm256_set1_ps(EXP_LO)));
	__m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
	__m256 y = _mm256_div_ps(_mm256_blendv_ps(e, one, pos), _mm256_add_ps(one, e));
	return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* y = erf(x) (sig 0) or sigmoid(x) (sig 1) elementwise; y may be x. */
AVX2 static void map_avx2(int sig, const float *x, float *y, size_t n)
{
	size_t i = 0;
	float buf[8] = {0};

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		_mm256_storeu_ps(y + i, sig ? sigmoid8(v) : erf8(v));
	}
	if (i < n) {
		__m256 v;
		memcpy(buf, x + i, (n - i) * sizeof *buf);
		v = _mm256_loadu_ps(buf);
		_mm256_storeu_ps(buf, sig ? sigmoid8(v) : erf8(v));
		memcpy(y + i, buf, (n - i) * sizeof *buf);
	}
}

/* Adds 8 floats to 8 stripes (two vectors of 4 doubles). */
AVX2 static void stripes8(__m256d *acc, __m256 v)
{
	acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
	acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/* exp(max(v - m, EXP_LO)) of the first `valid` lanes, +0 in the others. */
AVX2 static __m256 expm8(__m256 v, float m, size_t valid)
{
	__m256 e = exp8(_mm256_max_ps(_mm256_sub_ps(v, _mm256_set1_ps(m)), _mm256_set1_ps(EXP_LO)));
	if (valid < 8) {
		__m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
		__m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)valid), lane);
		e = _mm256_and_ps(e, _mm256_castsi256_ps(keep));
	}
	return e;
}

/* sum_avx512 on 8 lanes: the vectors at i and i + 8 feed stripes 0..7 and 8..15. */
AVX2 static double sum_avx2(const float *x, size_t n, int expm, float m, float *y)
{
	__m256d acc4[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
	double acc[STRIPES];

	for (size_t i = 0; i < n; i += 8) {
		size_t valid = n - i < 8 ? n - i : 8;
		float buf[8] = {0};
		__m256 v;
		if (valid == 8) {
			v = _mm256_loadu_ps(x + i);
		} else {
			memcpy(buf, x + i, valid * sizeof *buf);
			v = _mm256_loadu_ps(buf);
		}
		if (expm) {
			v = expm8(v, m, valid);
			if (valid == 8) {
				_mm256_storeu_ps(y + i, v);
			} else {
				_mm256_storeu_ps(buf, v);
				memcpy(y + i, buf, valid * sizeof *buf);
			}
		}
		stripes8(acc4 + (i / 8 % 2) * 2, v);
	}
	for (int j = 0; j < 4; j++)
		_mm256_storeu_pd(acc + 4 * j, acc4[j]);
	return stripes_total(acc);
}

AVX2 static float max_avx2(const float *x, size_t n, int *nan)
{
	__m256 m = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
	float out[8], r;
	size_t i = 0;

	for (; i < n; i += 8) {
		__m256 v;
		if (n - i >= 8) {
			v = _mm256_loadu_ps(x + i);
		} else {
			for (int j = 0; j < 8; j++)
				out[j] = i + (size_t)j < n ? x[i + (size_t)j] : -INFINITY;
			v = _mm256_loadu_ps(out);
		}
		bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
		m = _mm256_max_ps(m, v);
	}
	*nan = _mm256_movemask_ps(bad) != 0;
	_mm256_storeu_ps(out, m);
	r = out[0];
	for (int j = 1; j < 8; j++)
		r = out[j] > r ? out[j] : r;
	return r;
}

AVX2 static void scale_avx2(float *y, size_t n, float s)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_set1_ps(s)));
	for (; i < n; i++)
		y[i] *= s;
}
#endif

/*
 * Which vector paths run: 1 the CPU's best (AVX-512, else AVX2), 2 at most
 * AVX2, 0 none (the callers' scalar loops; Sigmoid's reference). Tests
 * compare the three.
 */
int oq_vm_simd = 1;

/* 16 (AVX-512 + FMA), 8 (AVX2 + FMA) or 0, as oq_vm_simd allows. */
static int vm_lanes(void)
{
	if (!oq_vm_simd)
		return 0;
	if (oq_vm_simd == 1 && oq_cpu_avx512_fma())
		return 16;
	return oq_cpu_avx2_fma() ? 8 : 0;
}

int oq_vm_fast(void)
{
	return vm_lanes() != 0;
}

void oq_erf_f32(const float *x, float *y, size_t n)
{
#if defined(__GNUC__) && defined(__x86_64__)
	int lanes = vm_lanes();
	if (lanes == 16) {
		erf_avx512(x, y, n);
		return;
	}
	if (lanes == 8) {
		map_avx2(0, x, y, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = erff(x[i]);
}

void oq_vm_sigmoid(const float *x, float *y, size_t n)
{
#if defined(__GNUC__) && defined(__x86_64__)
	int lanes = vm_lanes();
	if (lanes == 16) {
		sigmoid_avx512(x, y, n);
		return;
	}
	if (lanes == 8) {
		map_avx2(1, x, y, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = oq_vm_sigmoid_ref(x[i]);
}

double oq_vm_sum(const float *x, size_t n)
{
#if defined(__GNUC__) && defined(__x86_64__)
	int lanes = vm_lanes();
	if (lanes == 16)
		return sum_avx512(x, n, 0, 0, NULL);
	if (lanes == 8)
		return sum_avx2(x, n, 0, 0, NULL);
#endif
	return oq_vm_sum_ref(x, n);
}

double oq_vm_expsum(const float *x, float m, float *y, size_t n)
{
#if defined(__GNUC__) && defined(__x86_64__)
	int lanes = vm_lanes();
	if (lanes == 16)
		return sum_avx512(x, n, 1, m, y);
	if (lanes == 8)
		return sum_avx2(x, n, 1, m, y);
#endif
	return oq_vm_expsum_ref(x, m, y, n);
}

float oq_vm_max(const float *x, size_t n, int *nan)
{
	float m = -INFINITY;
#if defined(__GNUC__) && defined(__x86_64__)
	int lanes = vm_lanes();
	if (lanes == 16)
		return max_avx512(x, n, nan);
	if (lanes == 8)
		return max_avx2(x, n, nan);
#endif
	*nan = 0;
	for (size_t i = 0; i < n; i++) {
		if (x[i] != x[i])
			*nan = 1;
		m = x[i] > m ? x[i] : m;
	}
	return m;
}

void oq_vm_scale(float *y, size_t n, float s)
{
#if defined(__GNUC__) && defined(__x86_64__)
	int lanes = vm_lanes();
	if (lanes == 16) {
		scale_avx512(y, n, s);
		return;
	}
	if (lanes == 8) {
		scale_avx2(y, n, s);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] *= s;
}
