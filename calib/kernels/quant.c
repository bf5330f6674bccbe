/*
 * quant.c - QuantizeLinear, DequantizeLinear (ai.onnx opsets 10-23
 * and com.microsoft) and DynamicQuantizeLinear.
 *
 *   Q:  y = saturate(round_half_even(x / scale) + zp)      (integer y)
 *       y = cast_saturate(x / scale + zp)                   (float8/float4 y)
 *   DQ: y = (x - zp) * scale
 *
 * Granularity follows the scale's shape (opset 21 wording): a scalar (or a
 * one-element tensor) is per-tensor; a 1-D scale of length dims[axis] is
 * per-axis (opset 13+); with block_size B (opset 21+) the scale has x's
 * shape except ceil(dims[axis] / B) along axis, and element j along the
 * axis uses scale entry j / B (the last block may be partial). All three
 * reduce to one loop over (outer, axis, inner) with scale strides.
 *
 * Opset rules enforced here (they change what a model means or may hold):
 * axis and 1-D scales from 13; float16/bfloat16 x and scale, float8 and
 * `saturate` from 19; int16/uint16/int4/uint4, block_size and Q's
 * output_dtype from 21; float4e2m1 and DQ's output_dtype from 23. The
 * com.microsoft ops take the opset-21 set of types (and block_size when
 * present); their DQ output type is the scale's type.
 * Arithmetic is float32 (ONNX Runtime's choice; see quant_math.h); the
 * float16/bfloat16 DQ outputs are rounded from that float32 result.
 */
#include "calib/kernels/kernel.h"
#include "calib/exec/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/quant/quant_math.h"

/* Iteration shape and scale strides: element (o, a, i) uses scale[o*so + (a/block)*sa + i*si]. */
typedef struct qshape {
	size_t outer, alen, inner; /* x viewed as [outer, alen, inner] around the axis */
	size_t block;              /* elements along the axis sharing one scale (>= 1) */
	size_t so, sa, si;         /* scale strides for outer, axis block and inner */
	size_t nscale;             /* scale entries */
} qshape;

/* A Q/DQ node's resolved operands. */
typedef struct qjob {
	const oq_rt *x;
	oq_rt *y;
	qshape sh;
	float *scale;       /* nscale scales as float32 */
	int32_t *zpi;       /* nscale integer zero points (integer types) */
	float *zpf;         /* nscale float zero points (float8/float4 types) */
	int32_t qmin, qmax; /* integer Q range */
	int saturate;       /* float8 Q: saturate out-of-range values */
	int qdt;            /* oq_k_qdq: the code type (uint8 or int8) */
} qjob;

static int is_ms(const oq_kctx *k)
{
	return k->node->op == OQ_OP_ms_QuantizeLinear || k->node->op == OQ_OP_ms_DequantizeLinear;
}

/* Effective opset for type rules: com.microsoft ops follow opset 21's type set. */
static int64_t type_opset(const oq_kctx *k)
{
	return is_ms(k) ? 21 : k->opset;
}

/* First opset where `dt` may be a quantized type (x of DQ, y of Q); 0 when never. */
static int64_t qtype_since(int dt, int dq)
{
	switch (dt) {
	case OQ_DT_INT8:
	case OQ_DT_UINT8: return 10;
	case OQ_DT_INT32: return dq ? 10 : 0;
	case OQ_DT_FLOAT8E4M3FN:
	case OQ_DT_FLOAT8E4M3FNUZ:
	case OQ_DT_FLOAT8E5M2:
	case OQ_DT_FLOAT8E5M2FNUZ: return 19;
	case OQ_DT_INT16:
	case OQ_DT_UINT16:
	case OQ_DT_INT4:
	case OQ_DT_UINT4: return 21;
	case OQ_DT_FLOAT4E2M1: return 23;
	default: return 0;
	}
}

static int is_float_any(int dt)
{
	return dt == OQ_DT_FLOAT || dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16;
}

/* Element i of a float/float16/bfloat16/int32 tensor as float32. */
static inline float ldf(const void *p, int dt, size_t i)
{
	switch (dt) {
	case OQ_DT_FLOAT: return ((const float *)p)[i];
	case OQ_DT_FLOAT16: return oq_f16_to_f32(((const uint16_t *)p)[i]);
	case OQ_DT_BFLOAT16: return oq_bf16_to_f32(((const uint16_t *)p)[i]);
	case OQ_DT_INT32: return (float)((const int32_t *)p)[i];
	default: return 0;
	}
}

/* Element i of an integer quantized tensor (sub-byte packed low nibble first). */
static inline int32_t ldi(const void *p, int dt, size_t i)
{
	const uint8_t *b = p;
	switch (dt) {
	case OQ_DT_INT8: return ((const int8_t *)p)[i];
	case OQ_DT_UINT8: return b[i];
	case OQ_DT_INT16: return ((const int16_t *)p)[i];
	case OQ_DT_UINT16: return ((const uint16_t *)p)[i];
	case OQ_DT_INT32: return ((const int32_t *)p)[i];
	case OQ_DT_UINT4: return (b[i / 2] >> (4 * (i % 2))) & 0xF;
	case OQ_DT_INT4: {
		int v = (b[i / 2] >> (4 * (i % 2))) & 0xF;
		return v >= 8 ? v - 16 : v;
	}
	default: return 0;
	}
}

/* Raw 8-bit (or packed 4-bit) code of a small float element. */
static inline uint8_t ldcode(const void *p, int dt, size_t i)
{
	const uint8_t *b = p;
	if (dt == OQ_DT_FLOAT4E2M1)
		return (uint8_t)((b[i / 2] >> (4 * (i % 2))) & 0xF);
	return b[i];
}

/* Stores integer v (already in range) into element i; sub-byte types update their nibble. */
static inline void sti(void *p, int dt, size_t i, int32_t v)
{
	uint8_t *b = p;
	switch (dt) {
	case OQ_DT_INT8: ((int8_t *)p)[i] = (int8_t)v; return;
	case OQ_DT_UINT8: b[i] = (uint8_t)v; return;
	case OQ_DT_INT16: ((int16_t *)p)[i] = (int16_t)v; return;
	case OQ_DT_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; return;
	case OQ_DT_INT4:
	case OQ_DT_UINT4: {
		unsigned sh = 4 * (unsigned)(i % 2);
		b[i / 2] = (uint8_t)((b[i / 2] & ~(0xFu << sh)) | (((unsigned)v & 0xFu) << sh));
		return;
	}
	default: return;
	}
}

static inline void stcode(void *p, int dt, size_t i, uint8_t c)
{
	uint8_t *b = p;
	if (dt == OQ_DT_FLOAT4E2M1) {
		unsigned sh = 4 * (unsigned)(i % 2);
		b[i / 2] = (uint8_t)((b[i / 2] & ~(0xFu << sh)) | ((c & 0xFu) << sh));
		return;
	}
	b[i] = c;
}

static inline void stf(void *p, int dt, size_t i, float v)
{
	switch (dt) {
	case OQ_DT_FLOAT: ((float *)p)[i] = v; return;
	case OQ_DT_FLOAT16: ((uint16_t *)p)[i] = oq_f32_to_f16(v); return;
	case OQ_DT_BFLOAT16: ((uint16_t *)p)[i] = oq_quant_f32_to_bf16(v); return;
	default: return;
	}
}

/*
 * Resolves granularity from the shapes of x and scale (and zp) and checks
 * them; fills job->sh.
 */
static int plan_shape(oq_kctx *k, const oq_rt *x, const oq_rt *scale, const oq_rt *zp, qshape *sh)
{
	int64_t block = 0, axis_attr = 1;
	int ax;

	memset(sh, 0, sizeof *sh);
	if (zp && (zp->rank != scale->rank || zp->nelem != scale->nelem))
		return oq_k_err(
		    k, OQ_EINVAL,
		    "zero point has %zu elements (rank %d) but the scale has %zu (rank %d)",
		    zp->nelem, zp->rank, scale->nelem, scale->rank);
	for (int i = 0; zp && i < zp->rank; i++)
		if (zp->dims[i] != scale->dims[i])
			return oq_k_err(k, OQ_EINVAL,
			                "zero point shape differs from the scale shape at dim %d",
			                i);
	if (k->opset >= 21 || is_ms(k))
		block = oq_k_int(k, "block_size", 0);
	else if (oq_k_attr(k, "block_size"))
		return oq_k_err(k, OQ_EINVAL, "block_size needs opset 21 (the model imports %lld)",
		                (long long)k->opset);
	if (block < 0)
		return oq_k_err(k, OQ_EINVAL, "block_size %lld is negative", (long long)block);
	if (k->opset >= 13 || is_ms(k))
		axis_attr = oq_k_int(k, "axis", 1);
	sh->nscale = scale->nelem;
	if (scale->nelem == 0)
		return oq_k_err(k, OQ_EINVAL, "empty scale");
	if (block == 0 && scale->nelem == 1) { /* per-tensor */
		sh->outer = 1;
		sh->alen = 1;
		sh->inner = x->nelem;
		sh->block = 1;
		return OQ_OK;
	}
	if (k->opset < 13 && !is_ms(k))
		return oq_k_err(k, OQ_EINVAL,
		                "the scale must be a scalar before opset 13 (it has %zu elements)",
		                scale->nelem);
	if ((ax = oq_axis(axis_attr, x->rank)) < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for an input of rank %d",
		                (long long)axis_attr, x->rank);
	sh->outer = 1;
	for (int i = 0; i < ax; i++)
		sh->outer *= (size_t)x->dims[i];
	sh->alen = (size_t)x->dims[ax];
	sh->inner = 1;
	for (int i = ax + 1; i < x->rank; i++)
		sh->inner *= (size_t)x->dims[i];
	if (block == 0) { /* per-axis */
		if (scale->rank != 1 || (size_t)scale->dims[0] != sh->alen)
			return oq_k_err(k, OQ_EINVAL,
			                "per-axis scale must be 1-D of length %zu (input dim %d), "
			                "got %zu elements "
			                "of rank %d",
			                sh->alen, ax, scale->nelem, scale->rank);
		sh->block = 1;
		sh->sa = 1;
		return OQ_OK;
	}
	/* blocked */
	if (scale->rank != x->rank)
		return oq_k_err(k, OQ_EINVAL,
		                "blocked scale must have the input's rank %d, got rank %d", x->rank,
		                scale->rank);
	for (int i = 0; i < x->rank; i++) {
		int64_t want = i == ax ? (x->dims[i] + block - 1) / block : x->dims[i];
		if (scale->dims[i] != want)
			return oq_k_err(k, OQ_EINVAL,
			                "blocked scale dim %d is %lld, expected %lld (input dim "
			                "%lld, block_size %lld, "
			                "axis %d)",
			                i, (long long)scale->dims[i], (long long)want,
			                (long long)x->dims[i], (long long)block, ax);
	}
	sh->block = (size_t)block;
	sh->sa = sh->inner;
	sh->si = 1;
	sh->so = (size_t)scale->dims[ax] * sh->inner;
	return OQ_OK;
}

/* Scale (and zero point) arrays as float32 / int32; zero points default to 0. */
static int load_params(oq_kctx *k, qjob *j, const oq_rt *scale, const oq_rt *zp, int qdt)
{
	size_t n = scale->nelem;
	j->scale = malloc(n * sizeof *j->scale);
	j->zpi = calloc(n, sizeof *j->zpi);
	j->zpf = calloc(n, sizeof *j->zpf);
	if (!j->scale || !j->zpi || !j->zpf)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		j->scale[i] = ldf(scale->data, scale->dtype, i);
	for (size_t i = 0; zp && i < n; i++) {
		if (oq_quant_is_smallfloat(qdt))
			j->zpf[i] = oq_smallfloat_to_f32(qdt, ldcode(zp->data, qdt, i));
		else
			j->zpi[i] = ldi(zp->data, qdt, i);
	}
	return OQ_OK;
}

static void free_job(qjob *j)
{
	free(j->scale);
	free(j->zpi);
	free(j->zpf);
}

static inline size_t sidx(const qshape *sh, size_t o, size_t a, size_t i)
{
	return o * sh->so + (a / sh->block) * sh->sa + i * sh->si;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_Q_AVX512 1

/* q_row_f32_8's loop 16 values at a time, the same float operations lane by lane (division,
 * NaN to 0, clamp, +- 1.5 * 2^23, exact conversion), the low byte of (int32) v + zp stored;
 * returns how many it did (a multiple of 16). */
__attribute__((target("avx512f"))) static size_t q_row_avx512(const float *x, void *y, size_t n,
							      float scale, int32_t zp, float lo, float hi)
{
	const __m512 sv = _mm512_set1_ps(scale), lov = _mm512_set1_ps(lo), hiv = _mm512_set1_ps(hi);
	const __m512 magic = _mm512_set1_ps(12582912.0f);
	const __m512i zv = _mm512_set1_epi32(zp);
	char *q = y;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), sv);
		v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
		v = _mm512_max_ps(v, lov); /* v < lo ? lo : v with v not NaN */
		v = _mm512_min_ps(v, hiv);
		v = _mm512_sub_ps(_mm512_add_ps(v, magic), magic);
		_mm_storeu_si128((__m128i *)(q + i),
				 _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvttps_epi32(v), zv)));
	}
	return i;
}

/* dq_rows' per-tensor 8-bit loop 16 values at a time: ((float) x - z) * scale lane by lane, the
 * same float operations (the conversions and the subtraction are exact); returns how many it did. */
__attribute__((target("avx512f"))) static size_t dq_row_avx512(const void *x, int is_u8, float *y, size_t n,
							       float scale, float z)
{
	const __m512 sv = _mm512_set1_ps(scale), zv = _mm512_set1_ps(z);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m128i b = _mm_loadu_si128((const __m128i *)((const char *)x + i));
		__m512i w = is_u8 ? _mm512_cvtepu8_epi32(b) : _mm512_cvtepi8_epi32(b);
		_mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(w), zv), sv));
	}
	return i;
}

/* q_row_avx512 on AVX2, 8 values at a time: the same float operations; the clamped codes packed
 * to bytes with saturating packs (exact: they are within [qmin, qmax]). A multiple of 8. */
__attribute__((target("avx2"))) static size_t q_row_avx2(const float *x, void *y, size_t n, float scale,
							   int32_t zp, float lo, float hi, int is_u8)
{
	const __m256 sv = _mm256_set1_ps(scale), lov = _mm256_set1_ps(lo), hiv = _mm256_set1_ps(hi);
	const __m256 magic = _mm256_set1_ps(12582912.0f);
	const __m256i zv = _mm256_set1_epi32(zp);
	char *q = y;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), sv);
		__m256i c;
		__m128i h;
		v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
		v = _mm256_max_ps(v, lov); /* v < lo ? lo : v with v not NaN */
		v = _mm256_min_ps(v, hiv);
		v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
		c = _mm256_add_epi32(_mm256_cvttps_epi32(v), zv);
		h = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
		_mm_storel_epi64((__m128i *)(q + i), is_u8 ? _mm_packus_epi16(h, h) : _mm_packs_epi16(h, h));
	}
	return i;
}

/* dq_row_avx512 on AVX2, 8 values at a time; a multiple of 8. */
__attribute__((target("avx2"))) static size_t dq_row_avx2(const void *x, int is_u8, float *y, size_t n,
							    float scale, float z)
{
	const __m256 sv = _mm256_set1_ps(scale), zv = _mm256_set1_ps(z);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m128i b = _mm_loadl_epi64((const __m128i *)((const char *)x + i));
		__m256i w = is_u8 ? _mm256_cvtepu8_epi32(b) : _mm256_cvtepi8_epi32(b);
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(w), zv), sv));
	}
	return i;
}
#endif

/*
 * Which vector loops QuantizeLinear's float32 -> 8-bit rows and DequantizeLinear's 8-bit -> float32
 * rows may take: 1 the CPU's best (AVX-512, else AVX2 where there is one), 2 at most AVX2, 0 the
 * portable loops (tests compare them).
 */
int oq_quant_simd = 1;

/* The common case, float32 -> uint8/int8 with one scale for the whole row: q_row_avx512's whole
 * vectors on AVX-512 CPUs (q_row_avx2's on AVX2 ones), then oq_quant_row8 (the same operations). */
static void q_row_f32_8(int ydt, const float *x, void *y, size_t n, float scale, int32_t zp)
{
	int32_t qmin = ydt == OQ_DT_UINT8 ? 0 : -128, qmax = ydt == OQ_DT_UINT8 ? 255 : 127;
#ifdef HAVE_Q_AVX512
	size_t k = 0;
	if (oq_quant_simd == 1 && oq_cpu_avx512())
		k = q_row_avx512(x, y, n, scale, zp, (float)(qmin - zp), (float)(qmax - zp));
	else if (oq_quant_simd && oq_cpu_avx2_fma())
		k = q_row_avx2(x, y, n, scale, zp, (float)(qmin - zp), (float)(qmax - zp), ydt == OQ_DT_UINT8);
	x += k;
	y = (char *)y + k;
	n -= k;
#endif
	oq_quant_row8(x, n, scale, zp, qmin, qmax, y);
}

/* Q over rows [b, e) of the [outer * alen] row space. */
static void q_rows(void *ctx, size_t b, size_t e)
{
	const qjob *j = ctx;
	const qshape *sh = &j->sh;
	int xdt = j->x->dtype, ydt = j->y->dtype, sf = oq_quant_is_smallfloat(ydt);
	const void *xp = j->x->data;
	void *yp = j->y->data;

	for (size_t r = b; r < e; r++) {
		size_t o = r / sh->alen, a = r % sh->alen, base = r * sh->inner;
		if (sh->si == 0 && xdt == OQ_DT_FLOAT && (ydt == OQ_DT_UINT8 || ydt == OQ_DT_INT8)) {
			size_t s = sidx(sh, o, a, 0);
			q_row_f32_8(ydt, (const float *)xp + base, (char *)yp + base, sh->inner, j->scale[s],
				    j->zpi[s]);
			continue;
		}
		for (size_t i = 0; i < sh->inner; i++) {
			size_t s = sidx(sh, o, a, i), idx = base + i;
			float xv = ldf(xp, xdt, idx);
			if (sf)
				stcode(yp, ydt, idx,
				       oq_smallfloat_from_f32(ydt, xv / j->scale[s] + j->zpf[s],
				                              j->saturate));
			else if (xdt == OQ_DT_FLOAT && ydt == OQ_DT_UINT8)
				((uint8_t *)yp)[idx] =
				    (uint8_t)oq_quant_int(xv, j->scale[s], j->zpi[s], 0, 255);
			else if (xdt == OQ_DT_FLOAT && ydt == OQ_DT_INT8)
				((int8_t *)yp)[idx] =
				    (int8_t)oq_quant_int(xv, j->scale[s], j->zpi[s], -128, 127);
			else
				sti(yp, ydt, idx,
				    oq_quant_int(xv, j->scale[s], j->zpi[s], j->qmin, j->qmax));
		}
	}
}

/* The common case of DQ, 8-bit codes to float32 with one scale for the whole row: dq_row_avx512's
 * (AVX2: dq_row_avx2's) whole vectors, then y = ((float) x - zp) * scale one at a time. */
static void dq_row_8_f32(int is_u8, const void *x, float *y, size_t n, float scale, int32_t zp)
{
	float z = (float)zp;
	size_t i = 0;

#ifdef HAVE_Q_AVX512
	if (oq_quant_simd == 1 && oq_cpu_avx512())
		i = dq_row_avx512(x, is_u8, y, n, scale, z);
	else if (oq_quant_simd && oq_cpu_avx2_fma())
		i = dq_row_avx2(x, is_u8, y, n, scale, z);
#endif
	if (is_u8)
		for (const uint8_t *p = x; i < n; i++)
			y[i] = ((float)p[i] - z) * scale;
	else
		for (const int8_t *p = x; i < n; i++)
			y[i] = ((float)p[i] - z) * scale;
}

#ifdef HAVE_Q_AVX512
/* dq_last_axis' loop, 16 elements a step (the scales and zero points of 16 consecutive channels). */
__attribute__((target("avx512f"))) static size_t dq_last_avx512(const void *x, int is_u8, float *y, size_t n,
								 const float *sc, const int32_t *zp)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m128i b = _mm_loadu_si128((const __m128i *)((const char *)x + i));
		__m512i w = is_u8 ? _mm512_cvtepu8_epi32(b) : _mm512_cvtepi8_epi32(b);
		__m512 z = _mm512_cvtepi32_ps(_mm512_loadu_si512(zp + i));
		_mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(w), z), _mm512_loadu_ps(sc + i)));
	}
	return i;
}
#endif

/* DQ of 8-bit x per axis on its last axis, elements [b, e): y = ((float) x - (float) zp[a]) * scale[a], a
 * the element's index along the axis, in runs of consecutive a. */
static void dq_last_axis(const qjob *j, int is_u8, size_t b, size_t e)
{
	size_t alen = j->sh.alen;
	float *y = j->y->data;

	while (b < e) {
		size_t a = b % alen, n = alen - a < e - b ? alen - a : e - b, i = 0;
		const float *sc = j->scale + a;
		const int32_t *zp = j->zpi + a;
		const char *x = (const char *)j->x->data + b;
#ifdef HAVE_Q_AVX512
		if (oq_quant_simd == 1 && oq_cpu_avx512())
			i = dq_last_avx512(x, is_u8, y + b, n, sc, zp);
#endif
		for (; i < n; i++)
			y[b + i] = ((float)(is_u8 ? (int)(uint8_t)x[i] : (int)(int8_t)x[i]) - (float)zp[i]) * sc[i];
		b += n;
	}
}

/* DQ over rows [b, e). */
static void dq_rows(void *ctx, size_t b, size_t e)
{
	const qjob *j = ctx;
	const qshape *sh = &j->sh;
	int xdt = j->x->dtype, ydt = j->y->dtype, sf = oq_quant_is_smallfloat(xdt);
	const void *xp = j->x->data;
	void *yp = j->y->data;

	if (sh->inner == 1 && sh->si == 0 && sh->so == 0 && sh->block == 1 && ydt == OQ_DT_FLOAT &&
	    (xdt == OQ_DT_UINT8 || xdt == OQ_DT_INT8)) {
		/* per axis on the last axis (a MatMul weight per column): each row is one element, so
		 * the rows go along the axis together, element r with scale r % alen (same formula) */
		dq_last_axis(j, xdt == OQ_DT_UINT8, b, e);
		return;
	}
	for (size_t r = b; r < e; r++) {
		size_t o = r / sh->alen, a = r % sh->alen, base = r * sh->inner;
		if (sh->si == 0 && ydt == OQ_DT_FLOAT && (xdt == OQ_DT_UINT8 || xdt == OQ_DT_INT8)) {
			size_t s = sidx(sh, o, a, 0);
			dq_row_8_f32(xdt == OQ_DT_UINT8, (const char *)xp + base, (float *)yp + base, sh->inner,
				     j->scale[s], j->zpi[s]);
			continue;
		}
		for (size_t i = 0; i < sh->inner; i++) {
			size_t s = sidx(sh, o, a, i), idx = base + i;
			float v;
			if (sf)
				v = (oq_smallfloat_to_f32(xdt, ldcode(xp, xdt, idx)) - j->zpf[s]) *
				    j->scale[s];
			else /* int64 difference: int32 inputs minus a zero point cannot overflow */
				v = (float)((int64_t)ldi(xp, xdt, idx) - j->zpi[s]) * j->scale[s];
			stf(yp, ydt, idx, v);
		}
	}
}

static int run_rows(oq_kctx *k, qjob *j, int subbyte, oq_range_fn fn)
{
	size_t rows = j->sh.outer * j->sh.alen;
	if (j->x->nelem == 0)
		return OQ_OK;
	if (subbyte) /* two elements share a byte: one thread, no torn nibbles */
		fn(j, 0, rows);
	else
		oq_k_parallel(k, rows, (16384 + j->sh.inner - 1) / (j->sh.inner ? j->sh.inner : 1),
		              fn, j);
	return OQ_OK;
}

static int check_scale_type(oq_kctx *k, const oq_rt *scale)
{
	if (scale->dtype == OQ_DT_FLOAT)
		return OQ_OK;
	if ((scale->dtype == OQ_DT_FLOAT16 || scale->dtype == OQ_DT_BFLOAT16) &&
	    type_opset(k) >= 19)
		return OQ_OK;
	if (scale->dtype == OQ_DT_FLOAT16 && is_ms(k))
		return OQ_OK;
	return oq_k_err(k, OQ_EUNSUP, "scale of type %s is not supported at this opset (float%s)",
	                oq_dtype_name(scale->dtype),
	                type_opset(k) >= 19 ? ", float16 or bfloat16" : "");
}

static int k_quantize(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *scale = oq_k_in(k, 1), *zp = oq_k_in(k, 2), *y;
	qjob j;
	int rc, ydt;
	int64_t odt = 0;

	memset(&j, 0, sizeof j);
	if (!x || !scale)
		return oq_k_err(k, OQ_EINVAL, "needs inputs x and y_scale");
	if (!(x->dtype == OQ_DT_FLOAT || x->dtype == OQ_DT_INT32 ||
	      ((x->dtype == OQ_DT_FLOAT16 || x->dtype == OQ_DT_BFLOAT16) &&
	       (type_opset(k) >= 19 || is_ms(k)))))
		return oq_k_err(k, OQ_EUNSUP, "input x of type %s is not supported at this opset",
		                oq_dtype_name(x->dtype));
	if ((rc = check_scale_type(k, scale)))
		return rc;
	if (k->opset >= 21 && !is_ms(k))
		odt = oq_k_int(k, "output_dtype", 0);
	if (zp && odt && odt != zp->dtype)
		return oq_k_err(k, OQ_EINVAL,
		                "output_dtype %s does not match the zero point type %s",
		                oq_dtype_name((int)odt), oq_dtype_name(zp->dtype));
	ydt = zp ? zp->dtype : odt ? (int)odt : OQ_DT_UINT8;
	if (!qtype_since(ydt, 0) || qtype_since(ydt, 0) > type_opset(k))
		return oq_k_err(k, OQ_EUNSUP, "cannot quantize to %s at this opset%s",
		                oq_dtype_name(ydt),
		                qtype_since(ydt, 0) ? " (needs a newer opset)" : "");
	j.saturate = k->opset >= 19 ? (int)oq_k_int(k, "saturate", 1) : 1;
	if (!oq_quant_is_smallfloat(ydt))
		oq_quant_range(ydt, &j.qmin, &j.qmax);
	if ((rc = plan_shape(k, x, scale, zp, &j.sh)) || (rc = load_params(k, &j, scale, zp, ydt)))
		goto fail;
	/* every element is written (rows x inner cover them); 4-bit codes share bytes: zeroed */
	if ((rc = (oq_dtype_bits(ydt) < 8 ? oq_k_output : oq_k_output_raw)(k, 0, ydt, x->rank, x->dims, &y)))
		goto fail;
	j.x = x;
	j.y = y;
	rc = run_rows(k, &j, oq_dtype_bits(ydt) < 8, q_rows);
fail:
	free_job(&j);
	return rc;
}

static int k_dequantize(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *scale = oq_k_in(k, 1), *zp = oq_k_in(k, 2), *y;
	qjob j;
	int rc, ydt;

	memset(&j, 0, sizeof j);
	if (!x || !scale)
		return oq_k_err(k, OQ_EINVAL, "needs inputs x and x_scale");
	if (!qtype_since(x->dtype, 1) || qtype_since(x->dtype, 1) > type_opset(k))
		return oq_k_err(k, OQ_EUNSUP, "cannot dequantize %s at this opset%s",
		                oq_dtype_name(x->dtype),
		                qtype_since(x->dtype, 1) ? " (needs a newer opset)" : "");
	if (zp && zp->dtype != x->dtype)
		return oq_k_err(k, OQ_EINVAL, "zero point type %s differs from the input type %s",
		                oq_dtype_name(zp->dtype), oq_dtype_name(x->dtype));
	if ((rc = check_scale_type(k, scale)))
		return rc;
	ydt = k->opset >= 19 || is_ms(k) ? scale->dtype : OQ_DT_FLOAT;
	if (k->opset >= 23 && !is_ms(k)) {
		int64_t odt = oq_k_int(k, "output_dtype", 0);
		if (odt && !is_float_any((int)odt))
			return oq_k_err(k, OQ_EINVAL,
			                "output_dtype %lld is not float, float16 or bfloat16",
			                (long long)odt);
		if (odt)
			ydt = (int)odt;
	}
	if ((rc = plan_shape(k, x, scale, zp, &j.sh)) ||
	    (rc = load_params(k, &j, scale, zp, x->dtype)))
		goto fail;
	if ((rc = oq_k_output_raw(k, 0, ydt, x->rank, x->dims, &y))) /* dq_rows writes every element */
		goto fail;
	j.x = x;
	j.y = y;
	rc = run_rows(k, &j, 0, dq_rows);
fail:
	free_job(&j);
	return rc;
}

#define QDQ_CHUNK 1024 /* codes oq_k_qdq holds at a time (on the stack, in L1) */

/* oq_k_qdq over rows [b, e): each row through the Q row into codes, then the DQ row, a chunk at a
 * time, so the bits are the two kernels' and the codes never reach memory beyond the chunk. */
static void qdq_rows(void *ctx, size_t b, size_t e)
{
	const qjob *j = ctx;
	const qshape *sh = &j->sh;
	unsigned char code[QDQ_CHUNK];

	for (size_t r = b; r < e; r++) {
		size_t s = sidx(sh, r / sh->alen, r % sh->alen, 0), base = r * sh->inner;
		const float *x = (const float *)j->x->data + base;
		float *y = (float *)j->y->data + base;
		for (size_t i = 0; i < sh->inner; i += QDQ_CHUNK) {
			size_t m = sh->inner - i < QDQ_CHUNK ? sh->inner - i : QDQ_CHUNK;
			q_row_f32_8(j->qdt, x + i, code, m, j->scale[s], j->zpi[s]);
			dq_row_8_f32(j->qdt == OQ_DT_UINT8, code, y + i, m, j->scale[s], j->zpi[s]);
		}
	}
}

int oq_k_qdq(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *scale = oq_k_in(k, 1), *zp = oq_k_in(k, 2), *y;
	qjob j;
	int rc, qdt = zp ? zp->dtype : OQ_DT_UINT8;

	memset(&j, 0, sizeof j);
	if (!x || !scale || x->dtype != OQ_DT_FLOAT || scale->dtype != OQ_DT_FLOAT ||
	    (qdt != OQ_DT_UINT8 && qdt != OQ_DT_INT8))
		return OQ_K_UNFUSED;
	if (k->opset >= 21 && oq_k_int(k, "output_dtype", 0) && oq_k_int(k, "output_dtype", 0) != qdt)
		return OQ_K_UNFUSED;
	if ((rc = plan_shape(k, x, scale, zp, &j.sh)))
		return rc;
	if (j.sh.si || j.sh.block != 1)
		return OQ_K_UNFUSED; /* blocked: not fused */
	if ((rc = load_params(k, &j, scale, zp, qdt)))
		goto fail;
	if ((rc = oq_k_output_raw(k, 0, OQ_DT_FLOAT, x->rank, x->dims, &y))) /* every element is written */
		goto fail;
	j.x = x;
	j.y = y;
	j.qdt = qdt;
	rc = run_rows(k, &j, 0, qdq_rows);
fail:
	free_job(&j);
	return rc;
}

/*
 * DynamicQuantizeLinear (uint8), as the ONNX function body: range widened
 * to include 0, scale = (max - min) / 255, zp = round_even(clamp(0 - min /
 * scale, 0, 255)), y = Q(x, scale, zp). An all-zero range would divide by
 * zero; like ONNX Runtime we then use scale 1 (so zp = 0 and y = 0).
 */
static int k_dynamic_quantize(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y, *ys, *yz;
	float mn = 0, mx = 0, scale, zpf;
	const float *xp;
	uint8_t *yp;
	int32_t zp;
	int rc;

	if (!x || x->dtype != OQ_DT_FLOAT)
		return oq_k_err(k, OQ_EUNSUP, "input must be float (got %s)",
		                x ? oq_dtype_name(x->dtype) : "none");
	xp = x->data;
	for (size_t i = 0; i < x->nelem; i++) { /* one thread: a reduction */
		if (xp[i] < mn)
			mn = xp[i];
		if (xp[i] > mx)
			mx = xp[i];
	}
	scale = mx == mn ? 1.0f : (mx - mn) / 255.0f;
	zpf = 0.0f - mn / scale;
	zpf = zpf < 0 ? 0 : zpf > 255 ? 255 : zpf;
	zp = (int32_t)nearbyintf(zpf);
	if ((rc = oq_k_output(k, 0, OQ_DT_UINT8, x->rank, x->dims, &y)) ||
	    (rc = oq_k_output(k, 1, OQ_DT_FLOAT, 0, NULL, &ys)) ||
	    (rc = oq_k_output(k, 2, OQ_DT_UINT8, 0, NULL, &yz)))
		return rc;
	*(float *)ys->data = scale;
	*(uint8_t *)yz->data = (uint8_t)zp;
	yp = y->data;
	for (size_t i = 0; i < x->nelem; i++)
		yp[i] = (uint8_t)oq_quant_int(xp[i], scale, zp, 0, 255);
	return OQ_OK;
}

const oq_kreg oq_kernels_quant[] = {
    {OQ_OP_QuantizeLinear, 10, k_quantize},
    {OQ_OP_DequantizeLinear, 10, k_dequantize},
    {OQ_OP_DynamicQuantizeLinear, 11, k_dynamic_quantize},
    {OQ_OP_ms_QuantizeLinear, 0, k_quantize},
    {OQ_OP_ms_DequantizeLinear, 0, k_dequantize},
    {OQ_OP_UNKNOWN, 0, NULL},
};
