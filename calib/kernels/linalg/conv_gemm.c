/*
 * conv_gemm.c - the float32 conv GEMM of one tile, Y[mm, pp] = init +
 * W[mm, kc] x col[kc, pp] (kc = input channels per group x kernel size, pp
 * output positions), on x86 register tiles; and the packing of the
 * operands it reads (oq_packed_w: the weights, once per plan; the col
 * panels, per tile).
 *
 * Kernels:
 * - AVX2 + FMA (oq_conv_avx2_gemm): a 6 x 16 tile, W rows and col rows
 *   read in place.
 * - AVX-512, positions in the lanes (oq_conv_gemm_pos): 12 channel rows x
 *   32 positions (24 zmm accumulators) and narrower tiles for the tails;
 *   col in 32-position panels [kc][32] written once per tile
 *   (oq_conv_pack_col: straight from the input, or from the im2col rows),
 *   or, for the in-place path, rows of a padded input copy read directly.
 * - AVX-512, channels in the lanes (oq_conv_gemm_chan): 4..8 positions x
 *   32 channels of a packed weight panel, each tile transposed (16 x 16)
 *   before its store; for small planes (7 x 7) and deep kernels.
 * W is read in place (one pointer per row) or from the 32-channel panels
 * of oq_packed_w.
 *
 * Arithmetic: every output is init + sum_k w * x in k order with one FMA
 * per term; partial sums pass through C as float32 (exact) between depth
 * slices. So no kernel, tile shape, blocking or thread split changes a bit,
 * and all of them equal each other (tests compare them).
 */
#include "calib/kernels/linalg/conv_internal.h"
#include "calib/exec/cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(HAVE_X86_KERNELS)
/* ------------------------------------------------ AVX2 conv GEMM (float) */

/*
 * Y[mm, pp] = init + W[mm, kc] * col[kc, pp] for one conv tile, without
 * packing: W rows are read in place (6 at a time, one broadcast each per k)
 * and col rows 16 floats at a time, so neither operand is copied (BLAS
 * would pack both on every call). Blocking: KC_DEPTH deep slices; per slice
 * a 16-column panel of col (16 KiB, stays in L1) meets MC_ROWS rows of W
 * (96 KiB, L2). Every output is init + sum_k w*x formed in k order with one
 * FMA per term; the partial sums between slices go through C as float32
 * (exact), so the result does not depend on the blocking or on which
 * thread runs the tile. Edges: rows past mm reuse row 0 and are not
 * stored; columns past pp use masked loads and stores (nothing outside the
 * arrays is touched).
 */

/*
 * C[mr, nr] (ldc) = (load ? C : bias ? bias[r] : 0) + A[mr, kd] (rows lda apart) * B[kd, nr]
 * (rows ldb apart from b, or row k at br[k] + b0 when br is not NULL), then e applied (when not
 * NULL), mr <= 6, nr <= 16 (masked loads and stores below 16). Inlined into callers with br a
 * constant NULL or not, so the row choice leaves the loop.
 */
AVX2_FMA static inline __attribute__((always_inline)) void
avx2_tile_6x16(int64_t kd, const float *a, int64_t lda, int mr, const float *b, int64_t ldb, const float *const *br,
	       int64_t bcol, float *c, int64_t ldc, int load, const float *bias, const oq_conv_epi2 *e, int nr)
{
	const float *a0 = a, *a1 = mr > 1 ? a + lda : a, *a2 = mr > 2 ? a + 2 * lda : a;
	const float *a3 = mr > 3 ? a + 3 * lda : a, *a4 = mr > 4 ? a + 4 * lda : a, *a5 = mr > 5 ? a + 5 * lda : a;
	__m256i m0 = _mm256_set1_epi32(-1), m1 = m0;
	__m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;

	if (nr < 16) {
		const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
		m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), idx);
		m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), idx);
	}
#define LD(r, x0, x1)                                                                             \
	do {                                                                                      \
		if (load && mr > (r)) {                                                           \
			x0 = nr < 16 ? _mm256_maskload_ps(c + (r) * ldc, m0) : _mm256_loadu_ps(c + (r) * ldc); \
			x1 = nr < 16 ? _mm256_maskload_ps(c + (r) * ldc + 8, m1)                  \
				     : _mm256_loadu_ps(c + (r) * ldc + 8);                         \
		} else {                                                                          \
			x0 = x1 = bias && mr > (r) ? _mm256_set1_ps(bias[r]) : _mm256_setzero_ps(); \
		}                                                                                 \
	} while (0)
	LD(0, c00, c01);
	LD(1, c10, c11);
	LD(2, c20, c21);
	LD(3, c30, c31);
	LD(4, c40, c41);
	LD(5, c50, c51);
#undef LD
	/* one k-loop body, instantiated with plain loads (full 16 columns) and masked loads */
#define KLOOP(LOADB)                                                                       \
	for (int64_t k = 0; k < kd; k++) {                                                 \
		const float *bk = br ? br[k] + bcol : b + k * ldb;                         \
		__m256 b0 = LOADB(bk, m0), b1 = LOADB(bk + 8, m1), t;                      \
		FMA2(a0, c00, c01);                                                        \
		FMA2(a1, c10, c11);                                                        \
		FMA2(a2, c20, c21);                                                        \
		FMA2(a3, c30, c31);                                                        \
		FMA2(a4, c40, c41);                                                        \
		FMA2(a5, c50, c51);                                                        \
	}
#define FMA2(ar, x0, x1)                                                                   \
	(t = _mm256_broadcast_ss(ar + k), x0 = _mm256_fmadd_ps(t, b0, x0),                 \
	 x1 = _mm256_fmadd_ps(t, b1, x1))
#define LOADU(p, m) _mm256_loadu_ps(p)
#define LOADM(p, m) _mm256_maskload_ps(p, m)
	/* at most 8 columns (the tail of a short row of positions): the second vector's lanes are all
	 * masked off (loaded as 0, never stored), so only the first is computed */
#define KLOOP8(LOADB)                                                                      \
	for (int64_t k = 0; k < kd; k++) {                                                 \
		const float *bk = br ? br[k] + bcol : b + k * ldb;                         \
		__m256 b0 = LOADB(bk, m0);                                                 \
		c00 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + k), b0, c00);               \
		c10 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + k), b0, c10);               \
		c20 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + k), b0, c20);               \
		c30 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + k), b0, c30);               \
		c40 = _mm256_fmadd_ps(_mm256_broadcast_ss(a4 + k), b0, c40);               \
		c50 = _mm256_fmadd_ps(_mm256_broadcast_ss(a5 + k), b0, c50);               \
	}
	if (nr == 16) {
		KLOOP(LOADU)
	} else if (nr == 8) {
		KLOOP8(LOADU)
	} else if (nr < 8) {
		KLOOP8(LOADM)
	} else {
		KLOOP(LOADM)
	}
#undef KLOOP8
#undef KLOOP
#undef FMA2
#undef LOADU
#undef LOADM
#define ST(r, x0, x1)                                                          \
	do {                                                                   \
		if (mr > (r)) {                                                \
			if (e) {                                               \
				x0 = oq_conv_avx2_epi8(e, r, x0);              \
				x1 = oq_conv_avx2_epi8(e, r, x1);              \
			}                                                      \
			if (e && e->res) {                                     \
				RES(x0, e->t + (r) * e->ldt, m0, nr > 0);      \
				RES(x1, e->t + (r) * e->ldt + 8, m1, nr > 8);  \
			}                                                      \
			if (nr < 16) {                                         \
				_mm256_maskstore_ps(c + (r) * ldc, m0, x0);     \
				_mm256_maskstore_ps(c + (r) * ldc + 8, m1, x1); \
			} else {                                               \
				_mm256_storeu_ps(c + (r) * ldc, x0);           \
				_mm256_storeu_ps(c + (r) * ldc + 8, x1);       \
			}                                                      \
		}                                                              \
	} while (0)
	/* + the residual (masked past nr), then max(0, x) for res 2 */
#define RES(x, tp, m, any)                                                                      \
	do {                                                                                    \
		if (any) {                                                                      \
			x = _mm256_add_ps(x, nr < 16 ? _mm256_maskload_ps(tp, m) : _mm256_loadu_ps(tp)); \
			if (e->res == 2)                                                        \
				x = _mm256_max_ps(_mm256_setzero_ps(), x);                      \
		}                                                                               \
	} while (0)
	ST(0, c00, c01);
	ST(1, c10, c11);
	ST(2, c20, c21);
	ST(3, c30, c31);
	ST(4, c40, c41);
	ST(5, c50, c51);
#undef RES
#undef ST
}

/*
 * The last few columns of a product whose width is not a multiple of 16 (a 7 x 7 plane: 49 = 3 x
 * 16 + 1; a 1 x 1 plane: 1), channels in the lanes: a 6 x 16 tile there would compute 8 lanes for
 * each useful one, with six accumulators too few to hide the FMA latency. Here A is transposed in
 * blocks of TAIL_K depth (8 x 8 register transposes into `at`), and each of V vectors of 8 rows
 * meets each of the NR columns: V x NR accumulators, each one output's init + sum_k w * x in k
 * order with one FMA per term, so the same bits as the tile. Rows past mm read row 0 and are not
 * stored; the epilogue e (BN, Relu / Clip, the residual) runs lane by lane with each lane's channel,
 * in the arithmetic of the tile's.
 */
enum { TAIL_K = 128, TAIL_MAX = 4, TAIL_V = 4 };

/* 8 rows of A from row r (rows past rv: row 0) at depth k .. k + 7, transposed: depth k + i to at[i * ld]. */
AVX2_FMA static inline __attribute__((always_inline)) void
tail_t8(const float *a, int64_t lda, int64_t r, int64_t rv, int64_t k, float *at, int64_t ld)
{
	__m256 x[8], t[8];

	for (int i = 0; i < 8; i++)
		x[i] = _mm256_loadu_ps(a + (r + i < rv ? r + i : 0) * lda + k);
	for (int i = 0; i < 8; i += 2) {
		t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
		t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
	}
	for (int i = 0; i < 8; i += 4) {
		x[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
		x[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
		x[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
		x[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
	}
	for (int i = 0; i < 4; i++) {
		_mm256_storeu_ps(at + i * ld, _mm256_permute2f128_ps(x[i], x[i + 4], 0x20));
		_mm256_storeu_ps(at + (i + 4) * ld, _mm256_permute2f128_ps(x[i], x[i + 4], 0x31));
	}
}

/* Rows [g0, g0 + 8 V) (rv valid in all) x columns [0, NR) of the tail; V, NR constants. */
AVX2_FMA static inline __attribute__((always_inline)) void
tail_block(const int V, const int NR, int64_t g0, int64_t rv, int64_t kd, const float *a, int64_t lda,
	   const float *b, int64_t ldb, const float *const *br, int64_t bcol, float *c, int64_t ldc,
	   int load, const float *bias, const oq_conv_epi2 *e, float *at)
{
	__m256 acc[TAIL_V][TAIL_MAX];
	float buf[8];

	for (int v = 0; v < V; v++) {
		__m256 init = _mm256_setzero_ps();
		if (bias && !load) {
			for (int l = 0; l < 8; l++)
				buf[l] = 8 * v + l < rv ? bias[g0 + 8 * v + l] : 0.0f;
			init = _mm256_loadu_ps(buf);
		}
		for (int j = 0; j < NR; j++) {
			acc[v][j] = init;
			if (load) {
				for (int l = 0; l < 8; l++)
					buf[l] = 8 * v + l < rv ? c[(g0 + 8 * v + l) * ldc + j] : 0.0f;
				acc[v][j] = _mm256_loadu_ps(buf);
			}
		}
	}
	for (int64_t k0 = 0; k0 < kd; k0 += TAIL_K) {
		int64_t kb = kd - k0 < TAIL_K ? kd - k0 : TAIL_K, k8 = kb & ~(int64_t)7;
		for (int v = 0; v < V; v++) {
			for (int64_t k = 0; k < k8; k += 8)
				tail_t8(a, lda, g0 + 8 * v, g0 + rv, k0 + k, at + k * 8 * V + 8 * v, 8 * V);
			for (int64_t k = k8; k < kb; k++)
				for (int l = 0; l < 8; l++)
					at[k * 8 * V + 8 * v + l] = a[(8 * v + l < rv ? g0 + 8 * v + l : 0) * lda + k0 + k];
		}
		for (int64_t k = 0; k < kb; k++) {
			const float *bk = br ? br[k0 + k] + bcol : b + (k0 + k) * ldb;
			for (int j = 0; j < NR; j++) {
				__m256 x = _mm256_broadcast_ss(bk + j);
				for (int v = 0; v < V; v++)
					acc[v][j] = _mm256_fmadd_ps(_mm256_loadu_ps(at + k * 8 * V + 8 * v), x, acc[v][j]);
			}
		}
	}
	for (int v = 0; v < V; v++)
		for (int j = 0; j < NR; j++) {
			__m256 y = acc[v][j];
			int64_t r = g0 + 8 * v, n = rv - 8 * v < 8 ? rv - 8 * v : 8;
			if (n <= 0)
				break;
			if (e && e->scale) {
				double sc[8] = {0}, sh[8] = {0};
				for (int64_t l = 0; l < n; l++) {
					sc[l] = e->scale[r + l];
					sh[l] = e->shift[r + l];
				}
				__m256d lo = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(y)),
									 _mm256_loadu_pd(sc)), _mm256_loadu_pd(sh));
				__m256d hi = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)),
									 _mm256_loadu_pd(sc + 4)), _mm256_loadu_pd(sh + 4));
				y = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
			}
			if (e && e->act)
				y = _mm256_min_ps(_mm256_set1_ps(e->hi), _mm256_max_ps(_mm256_set1_ps(e->lo), y));
			if (e && e->res) {
				for (int64_t l = 0; l < 8; l++)
					buf[l] = l < n ? e->t[(r + l) * e->ldt + j] : 0.0f;
				y = _mm256_add_ps(y, _mm256_loadu_ps(buf));
				if (e->res == 2)
					y = _mm256_max_ps(_mm256_setzero_ps(), y);
			}
			_mm256_storeu_ps(buf, y);
			for (int64_t l = 0; l < n; l++)
				c[(r + l) * ldc + j] = buf[l];
		}
}

/*
 * C[m, j] (ldc) = (load ? C : bias ? bias[m] : 0) + A[m, kd] * B[kd, j] for every row m < mm and
 * column j < nr <= TAIL_MAX (B's column 0 at b, or br[k] + bcol), then e (when not NULL).
 */
AVX2_FMA static void avx2_tail_cols(int64_t mm, int64_t kd, const float *a, int64_t lda, const float *b,
				    int64_t ldb, const float *const *br, int64_t bcol, int nr, float *c, int64_t ldc,
				    int load, const float *bias, const oq_conv_epi2 *e)
{
	float at[TAIL_K * 8 * TAIL_V];
	/* V x NR <= 12 accumulators, at least 4 independent */
	const int V = nr <= 3 ? 4 : 2, G = 8 * V;

	for (int64_t g0 = 0; g0 < mm; g0 += G) {
		int64_t rv = mm - g0 < G ? mm - g0 : G;
		switch (nr) {
		case 1:
			tail_block(4, 1, g0, rv, kd, a, lda, b, ldb, br, bcol, c, ldc, load, bias, e, at);
			break;
		case 2:
			tail_block(4, 2, g0, rv, kd, a, lda, b, ldb, br, bcol, c, ldc, load, bias, e, at);
			break;
		case 3:
			tail_block(4, 3, g0, rv, kd, a, lda, b, ldb, br, bcol, c, ldc, load, bias, e, at);
			break;
		default:
			tail_block(2, 4, g0, rv, kd, a, lda, b, ldb, br, bcol, c, ldc, load, bias, e, at);
			break;
		}
	}
}

/* epi for the block of C from row m, column p on (its BN rows and residual moved there). */
static inline oq_conv_epi2 epi_at(const oq_conv_epi2 *epi, int64_t m, int64_t p)
{
	oq_conv_epi2 e = *epi;
	e.scale = e.scale ? e.scale + m : NULL;
	e.shift = e.shift ? e.shift + m : NULL;
	e.t = e.res ? e.t + m * e.ldt + p : NULL;
	return e;
}

/* oq_conv_avx2_gemm, B's rows at b (ldb apart) or at br[k] (br not NULL). */
AVX2_FMA static inline __attribute__((always_inline)) void
avx2_gemm(int64_t mm, int64_t pp, int64_t kd, const float *a, int64_t lda, const float *b, int64_t ldb,
	  const float *const *br, float *c, int64_t ldc, const float *bias, const oq_conv_epi2 *epi)
{
	int64_t k0 = 0, tail = pp % 16;

	/* a narrow last panel over enough rows: channels in the lanes (avx2_tail_cols), per block of
	 * rows and depth slice, after the tiles that read the same rows of A */
	if (tail > TAIL_MAX || mm < 16 || !oq_conv_avx2_tail)
		tail = 0;
	pp -= tail;
	do {
		int64_t kb = kd - k0 < KC_DEPTH ? kd - k0 : KC_DEPTH;
		int load = k0 > 0, last = k0 + kb == kd;
		for (int64_t mb = 0; mb < mm; mb += MC_ROWS) {
			int64_t me = mb + MC_ROWS < mm ? mb + MC_ROWS : mm;
			for (int64_t p = 0; p < pp; p += 16) {
				int nr = pp - p < 16 ? (int)(pp - p) : 16;
				for (int64_t m = mb; m < me; m += 6) {
					oq_conv_epi2 e = last && epi ? epi_at(epi, m, p) : (oq_conv_epi2){0};
					avx2_tile_6x16(kb, a + m * lda + k0, lda, me - m < 6 ? (int)(me - m) : 6,
						       br ? NULL : b + k0 * ldb + p, ldb, br ? br + k0 : NULL, p,
						       c + m * ldc + p, ldc, load, bias ? bias + m : NULL, last && epi ? &e : NULL,
						       nr);
				}
			}
			if (tail) {
				oq_conv_epi2 e = last && epi ? epi_at(epi, mb, pp) : (oq_conv_epi2){0};
				avx2_tail_cols(me - mb, kb, a + mb * lda + k0, lda, br ? NULL : b + k0 * ldb + pp, ldb,
					       br ? br + k0 : NULL, pp, (int)tail, c + mb * ldc + pp, ldc, load,
					       bias ? bias + mb : NULL, last && epi ? &e : NULL);
			}
		}
		k0 += kb;
	} while (k0 < kd);
}

AVX2_FMA void oq_conv_avx2_gemm(int64_t mm, int64_t pp, int64_t kd, const float *a, int64_t lda, const float *b,
				int64_t ldb, float *c, int64_t ldc, const float *bias, const oq_conv_epi2 *epi)
{
	avx2_gemm(mm, pp, kd, a, lda, b, ldb, NULL, c, ldc, bias, epi);
}

AVX2_FMA void oq_conv_avx2_gemm_rows(int64_t mm, int64_t pp, int64_t kd, const float *a, int64_t lda,
				     const float *const *br, float *c, int64_t ldc, const float *bias,
				     const oq_conv_epi2 *epi)
{
	avx2_gemm(mm, pp, kd, a, lda, NULL, 0, br, c, ldc, bias, epi);
}

int oq_conv_use_avx2(void)
{
	return oq_cpu_avx2_fma() && !oq_linalg_use_blas;
}

int oq_conv_use_avx512(void)
{
	return oq_cpu_avx512_fma() && !oq_linalg_no_avx512 && !oq_linalg_use_blas;
}

/* -------------------------------------------- AVX-512 conv GEMM (float) */

/*
 * The same product on AVX-512F CPUs, positions in the lanes: a 12 x 32
 * register tile (24 zmm accumulators), W read in place or from its packed
 * panels (12 rows, one broadcast each per k) and col in 32-column panels
 * [kc][32] (zero past pp), written once per tile by oq_conv_pack_col
 * straight from the input or from each im2col row, so every B load is
 * contiguous and aligned. Blocking as in oq_conv_avx2_gemm: KC_DEPTH
 * slices (a B panel slice, 32 KiB, stays in L1) times MC_ROWS rows of W
 * (L2). Each output is still init + sum_k w*x in k order with one FMA per
 * term (float partial sums through C between slices), so the bits equal
 * the AVX2 kernel's and do not depend on the blocking or on the thread.
 */

/* The tile epilogue e on vector q (16 columns, lanes m) of row r. */
AVX512 static inline __m512 tile_epi_vec(const tile_epi *e, int r, int q, __mmask16 m, __m512 v)
{
	if (e->scale) {
		__m512d a = _mm512_set1_pd(e->scale[r]), b = _mm512_set1_pd(e->shift[r]);
		v = bn_vec(v, a, a, b, b);
	}
	v = act_vec(v, e->act, _mm512_set1_ps(e->lo), _mm512_set1_ps(e->hi));
	if (e->res) {
		v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, e->t + r * e->ldc + 16 * q));
		if (e->res == 2)
			v = _mm512_max_ps(_mm512_setzero_ps(), v);
	}
	return v;
}

/*
 * The 12 x 32 positions-in-lanes tile: C[mr, nr] (ldc) = init + A[mr, kd]
 * (row r at ar[r], k-stride ks: 1 in place, OQ_PACKED_W_NR in packed
 * panels) * Bp[kd][32]; init: C when load, else bias[r] (bias NULL: 0);
 * then the epilogue e (NULL: none). Rows past mr read row 0 and, like
 * columns past nr, are not stored.
 */
AVX512 static inline void pos_tile_12x32(int64_t kd, const float *const *ar, int64_t ks, const float *bp, float *c,
					 int64_t ldc, int mr, int nr, int load, const float *bias, const tile_epi *e)
{
#define AR(r) (mr > (r) ? ar[r] : ar[0])
	const float *a0 = ar[0], *a1 = AR(1), *a2 = AR(2), *a3 = AR(3), *a4 = AR(4), *a5 = AR(5);
	const float *a6 = AR(6), *a7 = AR(7), *a8 = AR(8), *a9 = AR(9), *aa = AR(10), *ab = AR(11);
#undef AR
	__mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	__mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
	__m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
	__m512 c60, c61, c70, c71, c80, c81, c90, c91, ca0, ca1, cb0, cb1;

#define LD(r, x0, x1)                                                                         \
	do {                                                                                  \
		if (load && mr > (r)) {                                                       \
			x0 = _mm512_maskz_loadu_ps(m0, c + (r) * ldc);                        \
			x1 = _mm512_maskz_loadu_ps(m1, c + (r) * ldc + 16);                   \
		} else {                                                                      \
			x0 = x1 = _mm512_set1_ps(!load && bias && mr > (r) ? bias[r] : 0.0f); \
		}                                                                             \
	} while (0)
	LD(0, c00, c01);
	LD(1, c10, c11);
	LD(2, c20, c21);
	LD(3, c30, c31);
	LD(4, c40, c41);
	LD(5, c50, c51);
	LD(6, c60, c61);
	LD(7, c70, c71);
	LD(8, c80, c81);
	LD(9, c90, c91);
	LD(10, ca0, ca1);
	LD(11, cb0, cb1);
#undef LD
#define FMA2(ar, x0, x1) (t = _mm512_set1_ps(ar[o]), x0 = _mm512_fmadd_ps(t, b0, x0), x1 = _mm512_fmadd_ps(t, b1, x1))
	for (int64_t k = 0, o = 0; k < kd; k++, o += ks, bp += TILE_NR) {
		__m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16), t;
		FMA2(a0, c00, c01);
		FMA2(a1, c10, c11);
		FMA2(a2, c20, c21);
		FMA2(a3, c30, c31);
		FMA2(a4, c40, c41);
		FMA2(a5, c50, c51);
		FMA2(a6, c60, c61);
		FMA2(a7, c70, c71);
		FMA2(a8, c80, c81);
		FMA2(a9, c90, c91);
		FMA2(aa, ca0, ca1);
		FMA2(ab, cb0, cb1);
	}
#undef FMA2
#define ST(r, x0, x1)                                                      \
	do {                                                               \
		if (mr > (r)) {                                            \
			if (e) {                                           \
				x0 = tile_epi_vec(e, r, 0, m0, x0);            \
				x1 = tile_epi_vec(e, r, 1, m1, x1);            \
			}                                                  \
			_mm512_mask_storeu_ps(c + (r) * ldc, m0, x0);      \
			_mm512_mask_storeu_ps(c + (r) * ldc + 16, m1, x1); \
		}                                                          \
	} while (0)
	ST(0, c00, c01);
	ST(1, c10, c11);
	ST(2, c20, c21);
	ST(3, c30, c31);
	ST(4, c40, c41);
	ST(5, c50, c51);
	ST(6, c60, c61);
	ST(7, c70, c71);
	ST(8, c80, c81);
	ST(9, c90, c91);
	ST(10, ca0, ca1);
	ST(11, cb0, cb1);
#undef ST
}

/* Complete unrolling of a register tile's row and vector loops: their counts are constants, and
 * the accumulators stay in registers only when every index is (GCC at -O2 keeps a loop, and the
 * accumulator array in memory, with a load and a store around each FMA). */
#define UNROLL _Pragma("GCC unroll 16")

/*
 * The same product on narrower register tiles, for the tails of a block
 * (pos_tile_RxC: R output-channel rows x C positions, like pos_tile_12x32):
 * at most R (4, 8 or 12) rows times NV (1 or 2) 16-column vectors, the
 * accumulators in arrays the compiler keeps in registers (R and NV are
 * constants in each function). A 64-row block then costs 5 x 12 + 4 rows of
 * FMAs instead of 6 x 12, and a last panel of at most 16 positions (196 =
 * 6 x 32 + 4) one vector instead of two. Same sum order per output as
 * pos_tile_12x32, hence the same bits.
 */
#define DEFINE_POS_TILE(R, NV, NAME, BLOAD, BSTEP, ...)                                                       \
	AVX512 static void NAME(int64_t kd, const float *const *ar0, int64_t ks, __VA_ARGS__, float *c,    \
				int64_t ldc, int mr, int nr, int load, const float *bias, const tile_epi *e)  \
	{                                                                                               \
		const float *ar[R];                                                                     \
		__m512 acc[R][NV];                                                                      \
		__mmask16 mk[NV];                                                                       \
		UNROLL for (int v = 0; v < NV; v++)                                                     \
			mk[v] = lane_mask(16 * v, nr);                                                  \
		UNROLL for (int r = 0; r < R; r++) {                                                    \
			ar[r] = mr > r ? ar0[r] : ar0[0];                                               \
			UNROLL for (int v = 0; v < NV; v++)                                             \
				acc[r][v] = load && mr > r ? _mm512_maskz_loadu_ps(mk[v], c + r * ldc + 16 * v) \
					: _mm512_set1_ps(!load && bias && mr > r ? bias[r] : 0.0f);   \
		}                                                                                       \
		for (int64_t k = 0, o = 0; k < kd; k++, o += ks) {                                      \
			__m512 b[NV];                                                                   \
			UNROLL for (int v = 0; v < NV; v++)                                             \
				b[v] = BLOAD;                                                           \
			UNROLL for (int r = 0; r < R; r++) {                                            \
				__m512 t = _mm512_set1_ps(ar[r][o]);                                    \
				UNROLL for (int v = 0; v < NV; v++)                                     \
					acc[r][v] = _mm512_fmadd_ps(t, b[v], acc[r][v]);                \
			}                                                                               \
			BSTEP;                                                                          \
		}                                                                                       \
		UNROLL for (int r = 0; r < R && r < mr; r++)                                            \
			UNROLL for (int v = 0; v < NV; v++)                                             \
				_mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk[v],                      \
						      e ? tile_epi_vec(e, r, v, mk[v], acc[r][v]) : acc[r][v]); \
	}
/* B in packed panels bp[kd][32] */
#define DEFINE_PACKED_POS_TILE(R, NV, NAME) DEFINE_POS_TILE(R, NV, NAME, _mm512_load_ps(bp + 16 * v), bp += TILE_NR, const float *bp)
DEFINE_PACKED_POS_TILE(4, 2, pos_tile_4x32)
DEFINE_PACKED_POS_TILE(8, 2, pos_tile_8x32)
DEFINE_PACKED_POS_TILE(4, 1, pos_tile_4x16)
DEFINE_PACKED_POS_TILE(8, 1, pos_tile_8x16)
DEFINE_PACKED_POS_TILE(12, 1, pos_tile_12x16)
#undef DEFINE_PACKED_POS_TILE
/* B read in place: row k at br[k], the tile's positions from q on (conv_in_place) */
#define DEFINE_IN_PLACE_POS_TILE(R, NV, NAME) \
	DEFINE_POS_TILE(R, NV, NAME, _mm512_loadu_ps(br[k] + q + 16 * v), (void)0, const float *const *br, int64_t q)
DEFINE_IN_PLACE_POS_TILE(12, 2, pos_tile_in_place_12x32)
DEFINE_IN_PLACE_POS_TILE(8, 2, pos_tile_in_place_8x32)
DEFINE_IN_PLACE_POS_TILE(4, 2, pos_tile_in_place_4x32)
#undef DEFINE_IN_PLACE_POS_TILE
/* the same, masked loads: tiles wider than the 32 floats readable past a row's last position */
#define DEFINE_WIDE_POS_TILE(R, NV, NAME) \
	DEFINE_POS_TILE(R, NV, NAME, _mm512_maskz_loadu_ps(mk[v], br[k] + q + 16 * v), (void)0, const float *const *br, int64_t q)
DEFINE_WIDE_POS_TILE(1, 8, pos_tile_in_place_1x128)
DEFINE_WIDE_POS_TILE(2, 8, pos_tile_in_place_2x128)
DEFINE_WIDE_POS_TILE(4, 4, pos_tile_in_place_4x64)
#undef DEFINE_WIDE_POS_TILE
#undef DEFINE_POS_TILE

/* Row r (pp values at src) into the packed col bp (kc rows), zero past pp. */
AVX512 static void pack_col_row(const float *src, int64_t pp, int64_t r, int64_t kc, float *bp)
{
	for (int64_t q0 = 0; q0 < pp; q0 += TILE_NR) {
		int64_t nq = pp - q0 < TILE_NR ? pp - q0 : TILE_NR;
		__mmask16 m0 = nq >= 16 ? 0xffff : (__mmask16)((1u << nq) - 1);
		__mmask16 m1 = nq >= 32 ? 0xffff : nq <= 16 ? 0 : (__mmask16)((1u << (nq - 16)) - 1);
		float *dst = bp + (q0 / TILE_NR * kc + r) * TILE_NR;
		_mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, src + q0));
		_mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, src + q0 + 16));
	}
}

#define IM2COL_PIECES (TILE_NR + 3) /* 16-lane pieces of one panel's runs, at most */

/*
 * Rows of input channels [c0, c1) of the 2-D im2col matrix (as oq_conv_im2col_f)
 * of positions [p0, p0 + pp), horizontal stride 1 or 2, written straight
 * into the packed col bp of kc rows (zero past pp) in one pass, panel by panel so the stores are sequential. A
 * panel's 32 positions fall into runs along output rows, cut into pieces of
 * at most 16 lanes; per panel the pieces and their column masks for each
 * kernel column are found once, then each im2col row (c, i, j) is per piece
 * one or two masked loads of an input row (columns outside the row, and
 * rows outside the plane, give 0) and a masked store.
 */
AVX512 static void im2col_packed(const oq_conv_geom *g, const float *x, int64_t c0, int64_t c1, int64_t kc, int64_t p0,
				 int64_t pp, float *bp)
{
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	int64_t H = g->in[0], W = g->in[1], OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->stride[1];
	int64_t dw = g->dil[1];
	int64_t pc_oh[IM2COL_PIECES], pc_col[IM2COL_PIECES], pc_lane[IM2COL_PIECES];
	__mmask16 pc_n[IM2COL_PIECES], lo[IM2COL_PIECES][IM2COL_PACKED_MAX_KW], hi[IM2COL_PIECES][IM2COL_PACKED_MAX_KW];
	const float *rowp[IM2COL_PIECES];

	for (int64_t q0 = 0; q0 < pp; q0 += TILE_NR) {
		int64_t nq = pp - q0 < TILE_NR ? pp - q0 : TILE_NR, npc = 0;
		float *dst = bp + (q0 * kc + c0 * kh * kw * TILE_NR);
		for (int64_t l = 0; l < nq;) {
			int64_t p = p0 + q0 + l, ow = p % OW, run = OW - ow < nq - l ? OW - ow : nq - l;
			for (int64_t k = 0; k < run; k += 16, npc++) {
				int64_t n = run - k < 16 ? run - k : 16;
				pc_oh[npc] = p / OW;
				pc_col[npc] = (ow + k) * sw - g->pad[1];
				pc_lane[npc] = l + k;
				pc_n[npc] = (__mmask16)((1u << n) - 1u);
				for (int64_t j = 0; j < kw; j++) {
					lo[npc][j] = lane_mask(pc_col[npc] + j * dw, W);
					hi[npc][j] = lane_mask(pc_col[npc] + j * dw + 16, W);
				}
			}
			l += run;
		}
		for (int64_t c = c0; c < c1; c++) {
			const float *xc = x + c * H * W;
			for (int64_t i = 0; i < kh; i++) {
				for (int64_t u = 0; u < npc; u++) {
					int64_t ih = pc_oh[u] * g->stride[0] - g->pad[0] + i * g->dil[0];
					rowp[u] = ih >= 0 && ih < H ? xc + ih * W + pc_col[u] : NULL;
				}
				for (int64_t j = 0; j < kw; j++, dst += TILE_NR) {
					if (nq < TILE_NR) {
						_mm512_store_ps(dst, _mm512_setzero_ps());
						_mm512_store_ps(dst + 16, _mm512_setzero_ps());
					}
					for (int64_t u = 0; u < npc; u++) {
						__m512 v = _mm512_setzero_ps();
						if (rowp[u] && sw == 1)
							v = _mm512_maskz_loadu_ps(lo[u][j], rowp[u] + j * dw);
						else if (rowp[u])
							v = _mm512_permutex2var_ps(
								_mm512_maskz_loadu_ps(lo[u][j], rowp[u] + j * dw), even,
								_mm512_maskz_loadu_ps(hi[u][j], rowp[u] + j * dw + 16));
						_mm512_mask_storeu_ps(dst + pc_lane[u], pc_n[u], v);
					}
				}
			}
		}
	}
}

/* Rows [r0, r1) of x (ldx apart, pp values each) into the packed col bp of kc rows, panel by panel (sequential stores). */
AVX512 static void pack_col_direct(const float *x, int64_t ldx, int64_t r0, int64_t r1, int64_t kc, int64_t pp,
				   float *bp)
{
	for (int64_t q0 = 0; q0 < pp; q0 += TILE_NR) {
		int64_t nq = pp - q0 < TILE_NR ? pp - q0 : TILE_NR;
		__mmask16 m0 = nq >= 16 ? 0xffff : (__mmask16)((1u << nq) - 1);
		__mmask16 m1 = nq >= 32 ? 0xffff : nq <= 16 ? 0 : (__mmask16)((1u << (nq - 16)) - 1);
		const float *src = x + r0 * ldx + q0;
		float *dst = bp + q0 * kc + r0 * TILE_NR;
		for (int64_t r = r0; r < r1; r++, src += ldx, dst += TILE_NR) {
			_mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, src));
			_mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, src + 16));
		}
	}
}

/*
 * Rows [r0, r1) of the packed col of one tile (kc rows): rows of x (ldx
 * apart) when direct, else the im2col rows, straight into the panels (2-D,
 * horizontal stride 1 or 2; r0, r1 then whole input channels) or each
 * built in row (pp floats) first.
 */
void oq_conv_pack_col(const oq_conv_geom *g, const float *x, int64_t ldx, int direct, int64_t r0, int64_t r1,
		      int64_t kc, int64_t p0, int64_t pp, float *row, float *bp)
{
	if (!direct && im2col_packed_fits(g)) {
		im2col_packed(g, x, r0 / g->k_size, r1 / g->k_size, kc, p0, pp, bp);
		return;
	}
	if (direct) {
		pack_col_direct(x + p0, ldx, r0, r1, kc, pp, bp);
		return;
	}
	for (int64_t r = r0; r < r1; r++) {
		oq_conv_im2col_f(g, x, r, 1, p0, pp, row);
		pack_col_row(row, pp, r, kc, bp);
	}
}

/* Row m of A (see tile_a). */
static inline const float *tile_a_row(const tile_a *A, int64_t m)
{
	return A->pstride ? A->a + m / OQ_PACKED_W_NR * A->pstride + m % OQ_PACKED_W_NR : A->a + m * A->lda;
}

/*
 * Depth slices of the packed col up to this many bytes go through
 * oq_conv_gemm_pos one register tile of rows at a time (every panel for
 * rows m..m+11, then the next 12) instead of every MC_ROWS block per
 * panel: the slice stays in L2 between row tiles, and C is written in 12
 * long runs instead of up to 96 short ones, which matters when C is not in
 * cache (calibration stores and observes every Conv output). Each output
 * is the same sum in the same order either way.
 */
#define ROWWISE_BYTES (256 * 1024)

/*
 * C[mm, pp] (ldc) = init + A[mm, kd] * B, init = bias[row] (NULL: 0), then
 * the epilogue e (rows from C's first; NULL: none) with the last depth
 * slice. B: the packed col bp of kd rows, or (bp NULL) rows br[k] read in
 * place, positions 0..pp of each, every row readable 32 floats past pp
 * (the in-place tiles; see conv_in_place).
 */
AVX512 void oq_conv_gemm_pos(int64_t mm, int64_t pp, int64_t kd, const tile_a *A, const float *bp, const float *const *br,
			     float *c, int64_t ldc, const float *bias, const tile_epi *e)
{
	int64_t k0 = 0, ks = A->pstride ? OQ_PACKED_W_NR : 1;

	if (!bp && mm <= 4 && !e) { /* B in place, at most 4 rows: wide position tiles, each row of B read once per tile */
		int64_t step = mm <= 2 ? 128 : 64;
		do {
			int64_t kb = kd - k0 < KC_DEPTH ? kd - k0 : KC_DEPTH;
			int load = k0 > 0;
			const float *am[4];
			for (int r = 0; r < 4; r++)
				am[r] = tile_a_row(A, r < mm ? r : 0) + k0 * ks;
			for (int64_t q0 = 0; q0 < pp; q0 += step) {
				int nr = pp - q0 < step ? (int)(pp - q0) : (int)step;
				if (mm == 1)
					pos_tile_in_place_1x128(kb, am, ks, br + k0, q0, c + q0, ldc, (int)mm, nr, load, bias, NULL);
				else if (mm == 2)
					pos_tile_in_place_2x128(kb, am, ks, br + k0, q0, c + q0, ldc, (int)mm, nr, load, bias, NULL);
				else
					pos_tile_in_place_4x64(kb, am, ks, br + k0, q0, c + q0, ldc, (int)mm, nr, load, bias, NULL);
			}
			k0 += kb;
		} while (k0 < kd);
		return;
	}
	do {
		int64_t kb = kd - k0 < KC_DEPTH ? kd - k0 : KC_DEPTH;
		int load = k0 > 0;
		const tile_epi *el = k0 + kb == kd ? e : NULL;
		int64_t mcr = kb * round_up(pp, TILE_NR) * (int64_t)sizeof(float) <= ROWWISE_BYTES ? TILE_MR : MC_ROWS;
		for (int64_t mb = 0; mb < mm; mb += mcr) {
			int64_t me = mb + mcr < mm ? mb + mcr : mm;
			for (int64_t q0 = 0; q0 < pp; q0 += TILE_NR) {
				const float *bk = bp ? bp + (q0 / TILE_NR * kd + k0) * TILE_NR : NULL;
				int nr = pp - q0 < TILE_NR ? (int)(pp - q0) : TILE_NR;
				for (int64_t m = mb; m < me; m += TILE_MR) {
					int mr = me - m < TILE_MR ? (int)(me - m) : TILE_MR;
					const float *bm = bias ? bias + m : NULL, *am[TILE_MR];
					float *cm = c + m * ldc + q0;
					tile_epi em, *ep = NULL;
					for (int r = 0; r < TILE_MR; r++) /* rows past mr: row m, never read */
						am[r] = tile_a_row(A, m + (r < mr ? r : 0)) + k0 * ks;
					if (el) {
						em = *el;
						em.scale = el->scale ? el->scale + m : NULL;
						em.shift = el->shift ? el->shift + m : NULL;
						em.t = el->res ? el->t + m * ldc + q0 : NULL;
						ep = &em;
					}
					if (!bp && mr <= 4)
						pos_tile_in_place_4x32(kb, am, ks, br + k0, q0, cm, ldc, mr, nr, load, bm, ep);
					else if (!bp && mr <= 8)
						pos_tile_in_place_8x32(kb, am, ks, br + k0, q0, cm, ldc, mr, nr, load, bm, ep);
					else if (!bp)
						pos_tile_in_place_12x32(kb, am, ks, br + k0, q0, cm, ldc, mr, nr, load, bm, ep);
					else if (nr <= 16 && mr <= 4)
						pos_tile_4x16(kb, am, ks, bk, cm, ldc, mr, nr, load, bm, ep);
					else if (nr <= 16 && mr <= 8)
						pos_tile_8x16(kb, am, ks, bk, cm, ldc, mr, nr, load, bm, ep);
					else if (nr <= 16)
						pos_tile_12x16(kb, am, ks, bk, cm, ldc, mr, nr, load, bm, ep);
					else if (mr <= 4)
						pos_tile_4x32(kb, am, ks, bk, cm, ldc, mr, nr, load, bm, ep);
					else if (mr <= 8)
						pos_tile_8x32(kb, am, ks, bk, cm, ldc, mr, nr, load, bm, ep);
					else
						pos_tile_12x32(kb, am, ks, bk, cm, ldc, mr, nr, load, bm, ep);
				}
			}
		}
		k0 += kb;
	} while (k0 < kd);
}

/*
 * The product with the channels in the lanes (chan_tile_RxC: R positions x
 * C channels), for tiles where the
 * positions are few (a 7 x 7 plane) or the depth large: C[nch channels, rr
 * positions] (ldc) = init + Wp[kd][32] (one packed panel: 32 channels of
 * a k per two aligned loads) x the position rows ar[r] (k-stride ks: the
 * input in place for a 1x1 convolution, else the packed col), R x NV
 * accumulators (R positions, NV 16-channel vectors) over the whole depth;
 * then per 16 channels a 16 x 16 transpose into channel rows of R lanes,
 * the epilogue e (rows = channels, from C's first; NULL: none) and masked
 * stores. init = bias[channel] (NULL: 0). Every output is init + sum_k w*x
 * in k order with one FMA per term, as in pos_tile_12x32: the same bits. Positions
 * past rr repeat row 0 and are not stored; channels past nch are not stored.
 */
#define DEFINE_CHAN_TILE(R, NV, NAME, OARG, OSTEP, OFF)                                                               \
	AVX512 static void NAME(int64_t kd, const float *const *ar, OARG, const float *wp, float *c,          \
				int64_t ldc, int rr, int nch, const float *bias, const tile_epi *e)           \
	{                                                                                              \
		const float *a[R];                                                                     \
		__m512 acc[R][NV], init[NV];                                                           \
		__mmask16 pm = (__mmask16)((1u << rr) - 1u);                                           \
		UNROLL for (int v = 0; v < NV; v++)                                                     \
			init[v] = bias ? _mm512_maskz_loadu_ps(lane_mask(16 * v, nch), bias + 16 * v)     \
				       : _mm512_setzero_ps();                                          \
		UNROLL for (int r = 0; r < R; r++) {                                                    \
			a[r] = ar[r < rr ? r : 0];                                                     \
			UNROLL for (int v = 0; v < NV; v++)                                             \
				acc[r][v] = init[v];                                                   \
		}                                                                                      \
		for (int64_t k = 0, ok = 0; k < kd; k++, ok += OSTEP, wp += OQ_PACKED_W_NR) {          \
			__m512 w[NV];                                                                  \
			int64_t o = OFF;                                                               \
			UNROLL for (int v = 0; v < NV; v++)                                             \
				w[v] = _mm512_load_ps(wp + 16 * v);                                    \
			UNROLL for (int r = 0; r < R; r++) {                                            \
				__m512 t = _mm512_set1_ps(a[r][o]);                                    \
				UNROLL for (int v = 0; v < NV; v++)                                     \
					acc[r][v] = _mm512_fmadd_ps(t, w[v], acc[r][v]);               \
			}                                                                              \
		}                                                                                      \
		UNROLL for (int v = 0; v < NV; v++) {                                                   \
			__m512 x[16];                                                                  \
			int nl = nch - 16 * v < 16 ? nch - 16 * v : 16;                                \
			UNROLL for (int q = 0; q < 16; q++)                                             \
				x[q] = q < R ? acc[q < R ? q : 0][v] : _mm512_setzero_ps();            \
			transpose16x16(x);                                                                    \
			for (int l = 0; l < nl; l++)                                                   \
				_mm512_mask_storeu_ps(c + (16 * v + l) * ldc, pm,                      \
						      e ? tile_epi_vec(e, 16 * v + l, 0, pm, x[l]) : x[l]);     \
		}                                                                                      \
	}
/* position rows read at k * ks (the packed col, or a 1x1 input in place) */
#define DEFINE_STRIDED_CHAN_TILE(R, NV, NAME) DEFINE_CHAN_TILE(R, NV, NAME, int64_t ks, ks, ok)
DEFINE_STRIDED_CHAN_TILE(4, 2, chan_tile_4x32)
DEFINE_STRIDED_CHAN_TILE(5, 2, chan_tile_5x32)
DEFINE_STRIDED_CHAN_TILE(6, 2, chan_tile_6x32)
DEFINE_STRIDED_CHAN_TILE(7, 2, chan_tile_7x32)
DEFINE_STRIDED_CHAN_TILE(8, 2, chan_tile_8x32)
DEFINE_STRIDED_CHAN_TILE(4, 1, chan_tile_4x16)
DEFINE_STRIDED_CHAN_TILE(5, 1, chan_tile_5x16)
DEFINE_STRIDED_CHAN_TILE(6, 1, chan_tile_6x16)
DEFINE_STRIDED_CHAN_TILE(7, 1, chan_tile_7x16)
DEFINE_STRIDED_CHAN_TILE(8, 1, chan_tile_8x16)
#undef DEFINE_STRIDED_CHAN_TILE
/* position rows read at offs[k] (a padded input in place: conv_in_place) */
#define DEFINE_OFFSET_CHAN_TILE(R, NV, NAME) DEFINE_CHAN_TILE(R, NV, NAME, const int64_t *offs, 0, offs[k])
DEFINE_OFFSET_CHAN_TILE(4, 2, chan_tile_off_4x32)
DEFINE_OFFSET_CHAN_TILE(5, 2, chan_tile_off_5x32)
DEFINE_OFFSET_CHAN_TILE(6, 2, chan_tile_off_6x32)
DEFINE_OFFSET_CHAN_TILE(7, 2, chan_tile_off_7x32)
DEFINE_OFFSET_CHAN_TILE(8, 2, chan_tile_off_8x32)
DEFINE_OFFSET_CHAN_TILE(4, 1, chan_tile_off_4x16)
DEFINE_OFFSET_CHAN_TILE(5, 1, chan_tile_off_5x16)
DEFINE_OFFSET_CHAN_TILE(6, 1, chan_tile_off_6x16)
DEFINE_OFFSET_CHAN_TILE(7, 1, chan_tile_off_7x16)
DEFINE_OFFSET_CHAN_TILE(8, 1, chan_tile_off_8x16)
#undef DEFINE_OFFSET_CHAN_TILE
#undef DEFINE_CHAN_TILE

typedef void (*chan_tile_fn)(int64_t kd, const float *const *ar, int64_t ks, const float *wp, float *c, int64_t ldc, int rr,
		      int nch, const float *bias, const tile_epi *e);
typedef void (*chan_tile_off_fn)(int64_t kd, const float *const *ar, const int64_t *offs, const float *wp, float *c,
				 int64_t ldc, int rr, int nch, const float *bias, const tile_epi *e);

/*
 * The drivers below: panel by panel, the positions cut into tiles of 4 to 8 as evenly as possible (49 =
 * 7 x 7, 196 = 21 x 8 + 4 x 7); position q's row at row(q); offs NULL: k-stride ks, else row(q)[offs[k]].
 */
AVX512 static void gemm_chan(int64_t mm, int64_t pp, int64_t kd, const float *wp, int64_t pstride, const float *x,
			     int64_t ks, const int64_t *offs, const float *bp, float *c, int64_t ldc, const float *bias,
			     const tile_epi *e)
{
	/* by positions per tile: 4..8, fewer only for a plane of fewer than 4 (the 4-tile takes them) */
	static const chan_tile_fn f2[9] = {chan_tile_4x32, chan_tile_4x32, chan_tile_4x32,
					   chan_tile_4x32, chan_tile_4x32, chan_tile_5x32,
					   chan_tile_6x32, chan_tile_7x32, chan_tile_8x32};
	static const chan_tile_fn f1[9] = {chan_tile_4x16, chan_tile_4x16, chan_tile_4x16,
					   chan_tile_4x16, chan_tile_4x16, chan_tile_5x16,
					   chan_tile_6x16, chan_tile_7x16, chan_tile_8x16};
	static const chan_tile_off_fn o2[9] = {chan_tile_off_4x32, chan_tile_off_4x32, chan_tile_off_4x32,
					       chan_tile_off_4x32, chan_tile_off_4x32, chan_tile_off_5x32,
					       chan_tile_off_6x32, chan_tile_off_7x32, chan_tile_off_8x32};
	static const chan_tile_off_fn o1[9] = {chan_tile_off_4x16, chan_tile_off_4x16, chan_tile_off_4x16,
					       chan_tile_off_4x16, chan_tile_off_4x16, chan_tile_off_5x16,
					       chan_tile_off_6x16, chan_tile_off_7x16, chan_tile_off_8x16};
	int64_t nt = (pp + 7) / 8, base = pp / nt, extra = pp % nt;

	for (int64_t pc = 0; pc < mm; pc += OQ_PACKED_W_NR, wp += pstride) {
		int nch = mm - pc < OQ_PACKED_W_NR ? (int)(mm - pc) : OQ_PACKED_W_NR;
		tile_epi em, *ep = NULL;
		if (e) {
			em = *e;
			em.scale = e->scale ? e->scale + pc : NULL;
			em.shift = e->shift ? e->shift + pc : NULL;
			ep = &em;
		}
		for (int64_t i = 0, q = 0; i < nt; i++) {
			int rr = (int)(base + (i < extra));
			const float *ar[8];
			for (int r = 0; r < rr; r++)
				ar[r] = bp ? bp + (q + r) / TILE_NR * kd * TILE_NR + (q + r) % TILE_NR : x + q + r;
			if (e && e->res)
				em.t = e->t + pc * ldc + q;
			if (offs)
				(nch > 16 ? o2 : o1)[rr](kd, ar, offs, wp, c + pc * ldc + q, ldc, rr, nch,
							 bias ? bias + pc : NULL, ep);
			else
				(nch > 16 ? f2 : f1)[rr](kd, ar, bp ? TILE_NR : ks, wp, c + pc * ldc + q, ldc, rr, nch,
							 bias ? bias + pc : NULL, ep);
			q += rr;
		}
	}
}

/*
 * C[mm channels, pp positions] (ldc) = init + the packed panels wp (mm
 * channels from a panel start, pstride floats apart) x the positions' rows
 * (bp NULL: row(q) = x + q, a 1x1 input read in place, k-stride ks; else
 * the packed col bp, k-stride TILE_NR); e: the register epilogue (rows =
 * channels from C's first).
 */
AVX512 void oq_conv_gemm_chan(int64_t mm, int64_t pp, int64_t kd, const float *wp, int64_t pstride, const float *x,
			      int64_t ks, const float *bp, float *c, int64_t ldc, const float *bias, const tile_epi *e)
{
	gemm_chan(mm, pp, kd, wp, pstride, x, ks, NULL, bp, c, ldc, bias, e);
}

AVX512 void oq_conv_gemm_chan_off(int64_t mm, int64_t pp, int64_t kd, const float *wp, int64_t pstride, const float *x,
				  const int64_t *offs, float *c, int64_t ldc, const float *bias, const tile_epi *e)
{
	gemm_chan(mm, pp, kd, wp, pstride, x, 0, offs, NULL, c, ldc, bias, e);
}
#endif

/* ------------------------------------------------------ packed weights */

int oq_packed_w_pack(const float *w, int64_t m, int64_t kc, int64_t group, oq_packed_w *out)
{
	int64_t mg, npg;
	size_t nf;

	memset(out, 0, sizeof *out);
	if (m < 0 || kc < 0 || group <= 0 || m % group)
		return OQ_EINVAL;
	mg = m / group;
	npg = ceil_div(mg, OQ_PACKED_W_NR);
	if (!oq_mul_size((size_t)(group * npg), (size_t)kc, &nf) || !oq_mul_size(nf, OQ_PACKED_W_NR * sizeof(float), &nf) ||
	    nf > SIZE_MAX - 64)
		return OQ_ENOMEM;
	out->p = aligned_alloc(64, (nf + 63) / 64 * 64 + 64);
	if (!out->p)
		return OQ_ENOMEM;
	out->m = m;
	out->kc = kc;
	out->group = group;
	for (int64_t grp = 0; grp < group; grp++)
		for (int64_t pn = 0; pn < npg; pn++) {
			int64_t m0 = pn * OQ_PACKED_W_NR, nm = mg - m0 < OQ_PACKED_W_NR ? mg - m0 : OQ_PACKED_W_NR;
			const char *src = (const char *)(w + (grp * mg + m0) * kc);
			float *dst = out->p + (size_t)((grp * npg + pn) * kc * OQ_PACKED_W_NR);
			for (int64_t q = 0; q < kc; q++, dst += OQ_PACKED_W_NR) {
				/* memcpy: w may be a file's bytes at any alignment */
				for (int64_t r = 0; r < nm; r++)
					memcpy(&dst[r], src + (size_t)(r * kc + q) * sizeof(float), sizeof(float));
				for (int64_t r = nm; r < OQ_PACKED_W_NR; r++)
					dst[r] = 0.0f;
			}
		}
	return OQ_OK;
}

void oq_packed_w_unpack(const oq_packed_w *pw, float *w)
{
	int64_t mg = pw->m / pw->group, npg = ceil_div(mg, OQ_PACKED_W_NR);

	for (int64_t grp = 0; grp < pw->group; grp++)
		for (int64_t r = 0; r < mg; r++) {
			const float *src = pw->p + (size_t)((grp * npg + r / OQ_PACKED_W_NR) * pw->kc * OQ_PACKED_W_NR) + r % OQ_PACKED_W_NR;
			float *dst = w + (grp * mg + r) * pw->kc;
			for (int64_t q = 0; q < pw->kc; q++)
				dst[q] = src[q * OQ_PACKED_W_NR];
		}
}

void oq_packed_w_free(oq_packed_w *pw)
{
	free(pw->p);
	memset(pw, 0, sizeof *pw);
}

int oq_packed_w_available(void)
{
#if defined(HAVE_X86_KERNELS)
	return oq_conv_use_avx512();
#else
	return 0;
#endif
}
