/*
 * gemm_packed.c - float32 GEMM with a constant B packed once at plan time
 * (MatMul / Gemm whose weight is an initializer or a folded constant), on
 * AVX-512 or AVX2 register tiles; and its plain-C reference.
 *
 * Why: BLAS repacks B on every call (and on every tile of a split call);
 * a weight does not change between runs, so the executor's plan packs it
 * once (calib/exec/plan_fold.c) and every run reads the panels straight away.
 *
 * Layout (oq_packed_b): op(B) [kd, n] in panels of OQ_PACKED_B_NR = 64
 * columns, panel p holding rows k = 0..kd-1 of columns [64p, 64p + 64)
 * contiguously (64 floats = 4 vectors per k, 64-byte aligned), zero past
 * n. The packed copy replaces the weight: the plan lets go of the original
 * when only packed products read it, and rebuilds it (oq_packed_b_unpack)
 * for an observer.
 *
 * Kernel: C[6 rows, 64 columns] in 24 zmm accumulators (tile_6x64); per k,
 * 4 aligned loads of the B panel and 6 broadcasts of A (read in place, row
 * pointers lda apart), 24 FMAs: fewer loads per FMA than a 12 x 32 tile
 * (10 against 14 per 24). Row tails use 4-, 2- and 1-row tiles (1 row: the
 * GEMV of a classifier);
 * the last panel's columns past n are masked on load and store of C.
 * Without AVX-512 (or with oq_linalg_no_avx512), AVX2 + FMA tiles of 6 x 16,
 * 4 x 16, 2 x 32 and 1 x 64 columns walk the same panels (tile2_*): the same
 * arithmetic, so the same bits on either CPU, where BLAS would sum in an
 * order of its own kernel's (and repack a constant B on every call: a
 * classifier's GEMV on OpenBLAS is mostly that packing).
 * Loops: per work unit (a block of rows x one panel) the depth is cut in
 * KC slices (the panel slice, 64 x KC floats, stays in L2; 6 A rows of KC
 * in L1), the partial sums passing through C in float between slices.
 *
 * Arithmetic: every output is init + sum_k a[i,k] * b[k,j] in k order with
 * one fused multiply-add per term, init = C's old value (accumulate) or 0.
 * Storing a float partial sum and loading it back is exact, so neither the
 * depth slices nor the tile shapes nor the split over threads change a bit:
 * outputs are identical for any --threads, and oq_packed_b_gemm_ref (fmaf
 * in the same order) gives the same bits, which the tests check.
 */
#include "calib/kernels/linalg/linalg.h"
#include "calib/exec/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KC 768     /* depth slice */
#define PACK_K 64  /* depth of a transposing block of oq_packed_b_pack */
#define MB_MAX 240 /* rows per work unit (a multiple of 6) */

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

int oq_packed_b_pack(const float *b, int64_t kd, int64_t n, int tb, int64_t ldb, oq_packed_b *out)
{
	size_t np, nf;

	memset(out, 0, sizeof *out);
	if (kd < 0 || n < 0)
		return OQ_EINVAL;
	np = (size_t)ceil_div(n, OQ_PACKED_B_NR);
	if (!oq_mul_size(np, (size_t)kd, &nf) || !oq_mul_size(nf, OQ_PACKED_B_NR * sizeof(float), &nf) ||
	    nf > SIZE_MAX - 64)
		return OQ_ENOMEM;
	out->p = aligned_alloc(64, (nf + 63) / 64 * 64 + 64);
	if (!out->p)
		return OQ_ENOMEM;
	out->kd = kd;
	out->n = n;
	/* memcpy: b may be a file's bytes at any alignment */
	for (size_t p = 0; p < np; p++) {
		int64_t j0 = (int64_t)p * OQ_PACKED_B_NR, nj = n - j0 < OQ_PACKED_B_NR ? n - j0 : OQ_PACKED_B_NR;
		float *dst = out->p + p * (size_t)kd * OQ_PACKED_B_NR;
		if (!tb) { /* row k of the panel: nj consecutive floats of B's row k */
			for (int64_t k = 0; k < kd; k++, dst += OQ_PACKED_B_NR) {
				memcpy(dst, (const char *)b + (size_t)(k * ldb + j0) * sizeof(float), (size_t)nj * sizeof(float));
				for (int64_t j = nj; j < OQ_PACKED_B_NR; j++)
					dst[j] = 0.0f;
			}
			continue;
		}
		/* B's rows are op(B)'s columns: transposed in blocks of PACK_K depth (the panel's
		 * PACK_K x 64 block stays in L1 while the rows are read in order) */
		for (int64_t k0 = 0; k0 < kd; k0 += PACK_K) {
			int64_t kb = kd - k0 < PACK_K ? kd - k0 : PACK_K;
			float row[PACK_K], *blk = dst + k0 * OQ_PACKED_B_NR;
			for (int64_t j = 0; j < OQ_PACKED_B_NR; j++) {
				if (j < nj)
					memcpy(row, (const char *)b + (size_t)((j0 + j) * ldb + k0) * sizeof(float),
					       (size_t)kb * sizeof(float));
				for (int64_t k = 0; k < kb; k++)
					blk[k * OQ_PACKED_B_NR + j] = j < nj ? row[k] : 0.0f;
			}
		}
	}
	return OQ_OK;
}

void oq_packed_b_unpack(const oq_packed_b *pb, int tb, float *b)
{
	for (int64_t k = 0; k < pb->kd; k++)
		for (int64_t j = 0; j < pb->n; j++) {
			float v =
			    pb->p[((size_t)(j / OQ_PACKED_B_NR) * (size_t)pb->kd + (size_t)k) * OQ_PACKED_B_NR +
			          (size_t)(j % OQ_PACKED_B_NR)];
			if (tb)
				b[j * pb->kd + k] = v;
			else
				b[k * pb->n + j] = v;
		}
}

void oq_packed_b_free(oq_packed_b *pb)
{
	if (pb)
		free(pb->p);
}

/* Element (k, j) of the packed B. */
static float packed_at(const oq_packed_b *pb, int64_t k, int64_t j)
{
	return pb->p[((size_t)(j / OQ_PACKED_B_NR) * (size_t)pb->kd + (size_t)k) * OQ_PACKED_B_NR +
	             (size_t)(j % OQ_PACKED_B_NR)];
}

void oq_packed_b_gemm_ref(int64_t m, const float *a, int64_t lda, const oq_packed_b *pb, float *c, int64_t ldc,
			  int load)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < pb->n; j++) {
			float acc = load ? c[i * ldc + j] : 0.0f;
			for (int64_t k = 0; k < pb->kd; k++)
				acc = fmaf(a[i * lda + k], packed_at(pb, k, j), acc);
			c[i * ldc + j] = acc;
		}
}

/* ------------------------------------------------------------ AVX-512 */

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,fma")))

/*
 * C[mr, nr] (ldc) = init + A[mr, kd] (rows lda apart) * Bp[kd][64], at most
 * R rows (rows past mr read row 0 and are not stored; columns past nr are
 * masked). init: C (load) or 0. R is a constant per function, and the
 * loops over it are unrolled so the accumulators stay in registers.
 */
#define DEFINE_TILE(R, NAME)                                                                           \
	AVX512 static void NAME(int64_t kd, const float *a, int64_t lda, const float *bp,          \
	                        float *c, int64_t ldc, int mr, const __mmask16 *mk, int load)      \
	{                                                                                          \
		const float *ar[R];                                                                \
		__m512 acc[R][4];                                                                  \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                \
		{                                                                                  \
			ar[r] = mr > r ? a + r * lda : a;                                          \
			_Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) acc[r][v] =            \
			    load && mr > r ? _mm512_maskz_loadu_ps(mk[v], c + r * ldc + 16 * v)    \
			                   : _mm512_setzero_ps();                                  \
		}                                                                                  \
		for (int64_t k = 0; k < kd; k++, bp += OQ_PACKED_B_NR) {                                 \
			__m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);              \
			__m512 b2 = _mm512_load_ps(bp + 32), b3 = _mm512_load_ps(bp + 48);         \
			_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                        \
			{                                                                          \
				__m512 t = _mm512_set1_ps(ar[r][k]);                               \
				acc[r][0] = _mm512_fmadd_ps(t, b0, acc[r][0]);                     \
				acc[r][1] = _mm512_fmadd_ps(t, b1, acc[r][1]);                     \
				acc[r][2] = _mm512_fmadd_ps(t, b2, acc[r][2]);                     \
				acc[r][3] = _mm512_fmadd_ps(t, b3, acc[r][3]);                     \
			}                                                                          \
		}                                                                                  \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                \
		{                                                                                  \
			if (r >= mr)                                                               \
				break;                                                             \
			_Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                        \
			    _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk[v], acc[r][v]);         \
		}                                                                                  \
	}
DEFINE_TILE(6, tile_6x64)
DEFINE_TILE(4, tile_4x64)
DEFINE_TILE(2, tile_2x64)
DEFINE_TILE(1, tile_1x64)
#undef DEFINE_TILE

/*
 * The AVX2 + FMA twins: C[mr, nr] (ldc) = init + A[mr, kd] * Bp[kd][64] as R rows x W vectors of
 * 8 columns, the panel's columns in chunks of 8 W (chunks past nr skipped, columns past nr masked
 * on load and store of C). Each output the same FMA chain in k order as the AVX-512 tile: the
 * same bits.
 */
#define AVX2_FMA __attribute__((target("avx2,fma")))

AVX2_FMA static inline __m256i lanes_below(int64_t left)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? (left > 0 ? left : 0) : 8)),
				  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define DEFINE_TILE2(R, W, NAME)                                                                       \
	AVX2_FMA static void NAME(int64_t kd, const float *a, int64_t lda, const float *bp, float *c, \
				  int64_t ldc, int mr, int64_t nr, int load)                           \
	{                                                                                          \
		const float *ar[R];                                                                \
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++) ar[r] = mr > r ? a + r * lda : a; \
		for (int64_t c0 = 0; c0 < nr; c0 += 8 * W) {                                      \
			__m256 acc[R][W];                                                          \
			__m256i mk[W];                                                             \
			const float *bk = bp + c0;                                                 \
			_Pragma("GCC unroll 8") for (int v = 0; v < W; v++) mk[v] =                \
			    lanes_below(nr - c0 - 8 * v);                                          \
			_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                        \
			    _Pragma("GCC unroll 8") for (int v = 0; v < W; v++) acc[r][v] =        \
				load && mr > r ? _mm256_maskload_ps(c + r * ldc + c0 + 8 * v, mk[v]) \
					       : _mm256_setzero_ps();                              \
			for (int64_t k = 0; k < kd; k++, bk += OQ_PACKED_B_NR) {                   \
				_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                \
				{                                                                  \
					__m256 t = _mm256_broadcast_ss(ar[r] + k);                 \
					_Pragma("GCC unroll 8") for (int v = 0; v < W; v++) acc[r][v] = \
					    _mm256_fmadd_ps(t, _mm256_load_ps(bk + 8 * v), acc[r][v]); \
				}                                                                  \
			}                                                                          \
			_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                        \
			{                                                                          \
				if (r >= mr)                                                       \
					break;                                                     \
				_Pragma("GCC unroll 8") for (int v = 0; v < W; v++)                \
				{                                                                  \
					if (nr - c0 - 8 * v >= 8)                                  \
						_mm256_storeu_ps(c + r * ldc + c0 + 8 * v, acc[r][v]); \
					else if (nr - c0 - 8 * v > 0)                              \
						_mm256_maskstore_ps(c + r * ldc + c0 + 8 * v, mk[v], acc[r][v]); \
				}                                                                  \
			}                                                                          \
		}                                                                                  \
	}
DEFINE_TILE2(6, 2, tile2_6x16)
DEFINE_TILE2(4, 2, tile2_4x16)
DEFINE_TILE2(2, 4, tile2_2x32)
DEFINE_TILE2(1, 8, tile2_1x64)
#undef DEFINE_TILE2

/* Rows [m0, m1) x panel pi of the product (see the file comment), on the AVX2 tiles or the AVX-512 ones. */
static void gemm_unit(const oq_packed_b *pb, int64_t m0, int64_t m1, int64_t pi, const float *a,
		      int64_t lda, float *c, int64_t ldc, int load, int avx2)
{
	int64_t j0 = pi * OQ_PACKED_B_NR, nr = pb->n - j0 < OQ_PACKED_B_NR ? pb->n - j0 : OQ_PACKED_B_NR;
	const float *panel = pb->p + (size_t)pi * (size_t)pb->kd * OQ_PACKED_B_NR;
	__mmask16 mk[4];
	int64_t k0 = 0;

	for (int v = 0; v < 4; v++) {
		int64_t left = nr - 16 * v;
		mk[v] = left >= 16  ? (__mmask16)0xffff
		        : left <= 0 ? (__mmask16)0
		                    : (__mmask16)((1u << left) - 1);
	}
	do {
		int64_t kb = pb->kd - k0 < KC ? pb->kd - k0 : KC;
		int ld = load || k0 > 0;
		for (int64_t i = m0; i < m1; i += 6) {
			int mr = m1 - i < 6 ? (int)(m1 - i) : 6;
			const float *ai = a + i * lda + k0, *bk = panel + (size_t)k0 * OQ_PACKED_B_NR;
			float *ci = c + i * ldc + j0;
			if (avx2) {
				if (mr == 1)
					tile2_1x64(kb, ai, lda, bk, ci, ldc, mr, nr, ld);
				else if (mr == 2)
					tile2_2x32(kb, ai, lda, bk, ci, ldc, mr, nr, ld);
				else if (mr <= 4)
					tile2_4x16(kb, ai, lda, bk, ci, ldc, mr, nr, ld);
				else
					tile2_6x16(kb, ai, lda, bk, ci, ldc, mr, nr, ld);
			} else if (mr == 1)
				tile_1x64(kb, ai, lda, bk, ci, ldc, mr, mk, ld);
			else if (mr == 2)
				tile_2x64(kb, ai, lda, bk, ci, ldc, mr, mk, ld);
			else if (mr <= 4)
				tile_4x64(kb, ai, lda, bk, ci, ldc, mr, mk, ld);
			else
				tile_6x64(kb, ai, lda, bk, ci, ldc, mr, mk, ld);
		}
		k0 += kb;
	} while (k0 < pb->kd);
}

typedef struct gemm_job {
	const oq_packed_b *pb;
	const float *a;
	float *c;
	int64_t m, lda, ldc, mb, nmb, np;
	int load;
	int avx2;  /* the AVX2 tiles (tile2_*), else the AVX-512 ones */
} gemm_job;

static void gemm_range(void *ctx, size_t begin, size_t end)
{
	const gemm_job *j = ctx;
	for (size_t u = begin; u < end; u++) {
		int64_t bi = (int64_t)u / j->np, pi = (int64_t)u % j->np;
		int64_t m0 = bi * j->mb, m1 = m0 + j->mb < j->m ? m0 + j->mb : j->m;
		gemm_unit(j->pb, m0, m1, pi, j->a, j->lda, j->c, j->ldc, j->load, j->avx2);
	}
}
#endif

/* 2: the AVX-512 tiles, 1: the AVX2 ones (also on an AVX-512 CPU with oq_linalg_no_avx512), 0: none. */
static int engine(void)
{
	if (oq_cpu_avx512_fma() && !oq_linalg_no_avx512)
		return 2;
	return oq_cpu_avx2_fma() ? 1 : 0;
}

int oq_packed_b_available(void)
{
	return engine() && !oq_linalg_use_blas;
}

void oq_packed_b_gemm(oq_kctx *k, int64_t m, const float *a, int64_t lda, const oq_packed_b *pb, float *c,
		      int64_t ldc, int load)
{
	if (m <= 0 || pb->n <= 0)
		return;
	if (pb->kd == 0) { /* the empty sum */
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; !load && j < pb->n; j++)
				c[i * ldc + j] = 0.0f;
		return;
	}
#if defined(__GNUC__) && defined(__x86_64__)
	int eng = oq_linalg_use_ref ? 0 : engine();

	if (eng) {
		gemm_job j;
		j.avx2 = eng == 1;
		j.pb = pb;
		j.a = a;
		j.c = c;
		j.m = m;
		j.lda = lda;
		j.ldc = ldc;
		j.load = load;
		j.np = ceil_div(pb->n, OQ_PACKED_B_NR);
		/* row blocks of at most MB_MAX rows, balanced, a multiple of 6 */
		j.nmb = ceil_div(m, MB_MAX);
		j.mb = ceil_div(ceil_div(m, j.nmb), 6) * 6;
		j.nmb = ceil_div(m, j.mb);
		/* units of at least ~2 MFLOP per thread: small products stay on the caller */
		oq_k_parallel(k, (size_t)(j.nmb * j.np), (size_t)ceil_div(1 << 20, j.mb * OQ_PACKED_B_NR * pb->kd),
		              gemm_range, &j);
		return;
	}
#endif
	(void)k;
	oq_packed_b_gemm_ref(m, a, lda, pb, c, ldc, load);
}
