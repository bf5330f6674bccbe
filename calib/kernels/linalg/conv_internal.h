/*
 * conv_internal.h - private to the convolution engine (conv.c and the
 * conv_*.c files beside it): the x86 kernel switches, the shapes the
 * register tiles share, the epilogue in registers, and the entry points
 * one file of the engine calls in another.
 *
 * Every float32 path of the engine forms each output the same way (GEMM:
 * init + sum_k w * x in k order, one FMA per term; depthwise: b + sum of
 * w * x over the taps in (i, j) order, separate multiply and add), and
 * every epilogue uses the element-wise kernels' float expressions, so the
 * paths give the same bits and tests compare them.
 */
#ifndef OQ_CONV_INTERNAL_H
#define OQ_CONV_INTERNAL_H

#include "calib/kernels/linalg/linalg.h"

#include <stdatomic.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

static inline int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static inline int64_t round_up(int64_t v, int64_t q)
{
	return (v + q - 1) / q * q;
}

/* Element i of a float (OQ_LT_F32) or double array, as double; and the store back. */
static inline double getv(oq_ltype t, const void *p, int64_t i)
{
	return t == OQ_LT_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void setv(oq_ltype t, void *p, int64_t i, double v)
{
	if (t == OQ_LT_F32)
		((float *)p)[i] = (float)v;
	else
		((double *)p)[i] = v;
}

/* Multi-index of flat position p in dims[0..n). */
static inline void unflat(int64_t p, int n, const int64_t *dims, int64_t *idx)
{
	for (int d = n - 1; d >= 0; d--) {
		idx[d] = p % dims[d];
		p /= dims[d];
	}
}

/*
 * Flat index, in a grid of dims lim, of pos * stride + kp * dil - pad in
 * every spatial dim: tap kp of output position pos of a convolution (lim =
 * g->in), or where tap kp of input position pos of a transposed one lands
 * (lim = g->out). -1 when it falls outside the grid.
 */
static inline int64_t tap_index(const oq_conv_geom *g, const int64_t *pos, const int64_t *kp, const int64_t *lim)
{
	int64_t idx = 0;
	for (int d = 0; d < g->nsp; d++) {
		int64_t i = pos[d] * g->stride[d] + kp[d] * g->dil[d] - g->pad[d];
		if (i < 0 || i >= lim[d])
			return -1;
		idx = idx * lim[d] + i;
	}
	return idx;
}

/* 1-D problems run as 2-D ones with a unit leading spatial dim (conv.c). */
void oq_conv_as_2d(const oq_conv_geom *g, oq_conv_geom *o);
/*
 * Rows [r0, r0 + nr) of the float32 im2col matrix of one image and group
 * (x: the group's first input channel) for output positions [p0, p0 + pp),
 * into col (row r - r0 at col + (r - r0) * pp). Row r = (input channel,
 * kernel offset), kernel offsets in row-major order as W stores them; taps
 * outside the input give 0. conv.c.
 */
void oq_conv_im2col_f(const oq_conv_geom *g, const float *x, int64_t r0, int64_t nr, int64_t p0, int64_t pp,
		      float *col);

/*
 * Steps [0, ns) of s (a part of ep's steps) on y[0..n): output channel ch,
 * y[0] being element off of the output (tensor operands are read from
 * there). The element-wise kernels' float expressions. conv_epilogue.c.
 */
void oq_conv_epi_steps(const oq_kfuse *ep, const oq_epi_step *s, int ns, int64_t ch, size_t off, float *y, size_t n);
/* ep's activation must run on the stored values (oq_act_apply), not in registers: NaN and ordering of fmaxf / expf. */
int oq_conv_late_act(const oq_kfuse *ep);
/*
 * ep's steps are a residual Add (either operand order: float addition is
 * commutative bit for bit) and optionally a Relu: 1 or 2 (tile_epi.res),
 * else 0 (the steps then run in a pass over the stored tile).
 */
int oq_conv_res_steps(const oq_kfuse *ep);

/*
 * Float32 depthwise convolution (g 2-D, one input and one output channel
 * per group): the fastest kernel the CPU has, all with the same bits.
 * OQ_OK or OQ_ENOMEM. conv_depthwise.c.
 */
int oq_conv_depthwise(oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w, const float *b,
		      const oq_kfuse *ep, float *y) OQ_WUR;

#if defined(__GNUC__) && defined(__x86_64__)
/* The AVX2 and AVX-512 kernels are built (each runs only where the CPU has it). */
#define HAVE_X86_KERNELS 1
#define AVX2_FMA __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,fma")))

#define KC_DEPTH 256        /* GEMM depth slice: the partial sums pass through C in float between slices */
#define MC_ROWS 96          /* weight rows per block of a depth slice (they stay in L2) */
#define TILE_MR 12          /* rows (output channels) of the largest positions-in-lanes register tile */
#define TILE_NR 32          /* columns (positions) of a packed col panel and of that tile */

/* Float32 Conv tiles run on these kernels: an AVX2+FMA / AVX-512F CPU, not overridden by the oq_linalg_ switches. */
int oq_conv_use_avx2(void);
int oq_conv_use_avx512(void);

/*
 * The conv GEMM's A (the weights of a tile's channels): rows in place, lda
 * apart with k-stride 1, or packed panels (pstride > 0: row m in panel
 * m / OQ_PACKED_W_NR, pstride floats apart, at lane m % OQ_PACKED_W_NR,
 * k-stride OQ_PACKED_W_NR; row 0 starts a panel). Register tiles take a
 * pointer per row, so a 12-row tile may straddle two panels.
 */
typedef struct tile_a {
	const float *a;        /* row 0 */
	int64_t lda;           /* in place: floats from one row to the next */
	int64_t pstride;       /* packed: floats from one panel to the next (0: in place) */
} tile_a;

/*
 * The fused epilogue the register tiles apply before their last store, when
 * it is BN, Relu / Clip (not oq_conv_late_act) and at most a residual Add
 * and Relu (oq_conv_res_steps): per row r of the tile the BN affine in
 * double, the activation, then + t and Relu - the expressions of
 * epi_regs_vec and the steps, so the bits of the separate pass.
 */
typedef struct tile_epi {
	const double *scale, *shift; /* BN of the tile's first row on, or NULL */
	int act;               /* OQ_ACT_NONE, OQ_ACT_RELU or OQ_ACT_CLIP */
	float lo, hi;          /* Clip bounds */
	int res;               /* 0; 1: + t (a residual Add); 2: + t, then Relu */
	int64_t ldc;           /* row stride of the output and of t */
	const float *t;        /* the residual at the tile's first element */
} tile_epi;

/* Floats of the packed col of a tile of pt positions: [ceil(pt / TILE_NR)][kc][TILE_NR]. */
static inline size_t packed_col_floats(int64_t kc, int64_t pt)
{
	return (size_t)(kc * ((pt + TILE_NR - 1) / TILE_NR * TILE_NR));
}

#define IM2COL_PACKED_MAX_KW 16 /* widest kernel the direct packing of im2col rows takes */

/* The im2col rows of g can be written straight into packed panels: 2-D, horizontal stride 1 or 2, kernel width at most IM2COL_PACKED_MAX_KW. */
static inline int im2col_packed_fits(const oq_conv_geom *g)
{
	return g->nsp == 2 && (g->stride[1] == 1 || g->stride[1] == 2) && g->k[1] <= IM2COL_PACKED_MAX_KW;
}

/*
 * Rows [r0, r1) of the packed col of one tile (kc rows, positions [p0, p0 +
 * pp)): rows of x (ldx apart) when direct (a 1x1 convolution's input is its
 * col), else the im2col rows, straight into the panels (im2col_packed_fits:
 * r0, r1 then whole input channels) or each built in row (pp floats)
 * first. conv_gemm.c.
 */
void oq_conv_pack_col(const oq_conv_geom *g, const float *x, int64_t ldx, int direct, int64_t r0, int64_t r1,
		      int64_t kc, int64_t p0, int64_t pp, float *row, float *bp);
/*
 * C[mm, pp] (ldc) = init + A[mm, kd] * B with the positions in the vector
 * lanes, init = bias[row] (NULL: 0), then the epilogue e (rows from C's
 * first; NULL: none). B: the packed col bp of kd rows, or (bp NULL) rows
 * br[k] read in place, positions 0..pp of each, every row readable 32
 * floats past pp (conv_in_place). conv_gemm.c.
 */
AVX512 void oq_conv_gemm_pos(int64_t mm, int64_t pp, int64_t kd, const tile_a *A, const float *bp,
			     const float *const *br, float *c, int64_t ldc, const float *bias, const tile_epi *e);
/*
 * The same product with the channels in the lanes (for small planes and
 * deep kernels): A in packed panels wp (mm channels from a panel start,
 * pstride floats apart); B the rows of the positions, row(q) = x + q
 * (k-stride ks) for a 1x1 input read in place, or (x unused) the packed col
 * bp. conv_gemm.c.
 */
AVX512 void oq_conv_gemm_chan(int64_t mm, int64_t pp, int64_t kd, const float *wp, int64_t pstride, const float *x,
			      int64_t ks, const float *bp, float *c, int64_t ldc, const float *bias, const tile_epi *e);
/*
 * oq_conv_gemm_chan with position q's value of depth k at x[q + offs[k]] (a padded input read in
 * place: conv_in_place). Same sums in the same order as on the packed col. conv_gemm.c.
 */
AVX512 void oq_conv_gemm_chan_off(int64_t mm, int64_t pp, int64_t kd, const float *wp, int64_t pstride, const float *x,
				  const int64_t *offs, float *c, int64_t ldc, const float *bias, const tile_epi *e);
/* Channels in the lanes (oq_conv_gemm_chan) fill more lanes than positions for this shape. conv.c. */
int oq_conv_use_chan_lanes(const oq_conv_geom *g, int64_t kc, int64_t mg);
/*
 * What the AVX2 GEMM applies to its sums before the last store: BN (scale / shift per row, from
 * the tile's first row; NULL: none) and act (0: none, else Relu or Clip with lo <= hi as
 * min(hi, max(lo, x)); Relu: lo 0, hi +Inf). oq_conv_avx2_epi fills it from a fused epilogue.
 * The GEMM (oq_conv_avx2_gemm, not the other users) also takes a residual Add after them: res 1
 * adds t (same layout as C, ldt apart, from C's first element), res 2 then takes max(0, x), as
 * the AVX-512 tile's epilogue does.
 */
typedef struct oq_conv_epi2 {
	const double *scale, *shift;
	int act;
	float lo, hi;
	int res;
	const float *t;
	int64_t ldt;
} oq_conv_epi2;

/*
 * Eight values of row r (from e's first row) through e: BN as x * a + b in double rounded once,
 * then Relu / Clip as min(hi, max(lo, x)) (NaN and -0 pass): the bits of oq_epi_apply.
 */
AVX2_FMA static inline __m256 oq_conv_avx2_epi8(const oq_conv_epi2 *e, int64_t r, __m256 x)
{
	if (e->scale) {
		const __m256d a = _mm256_set1_pd(e->scale[r]), b = _mm256_set1_pd(e->shift[r]);
		__m256d l = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), a), b);
		__m256d u = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), a), b);
		x = _mm256_set_m128(_mm256_cvtpd_ps(u), _mm256_cvtpd_ps(l));
	}
	if (e->act)
		x = _mm256_min_ps(_mm256_set1_ps(e->hi), _mm256_max_ps(_mm256_set1_ps(e->lo), x));
	return x;
}

/*
 * C[mm, pp] (ldc) = (bias ? bias[row] : 0) + A[mm, kd] (lda) * B[kd, pp] (ldb) on AVX2 + FMA,
 * then epi (NULL: none) applied (C is only written). conv_gemm.c.
 */
AVX2_FMA void oq_conv_avx2_gemm(int64_t mm, int64_t pp, int64_t kd, const float *a, int64_t lda, const float *b,
				int64_t ldb, float *c, int64_t ldc, const float *bias, const oq_conv_epi2 *epi);
/* The same with row k of B at br[k] (the in-place path: rows of a padded input), the same bits. */
AVX2_FMA void oq_conv_avx2_gemm_rows(int64_t mm, int64_t pp, int64_t kd, const float *a, int64_t lda,
				     const float *const *br, float *c, int64_t ldc, const float *bias,
				     const oq_conv_epi2 *epi);
/*
 * e for rows from channel ch0 of ep: its BN and its Relu / Clip unless they must run late
 * (oq_conv_late_act). 0 when that leaves nothing to do in registers. conv_epilogue.c.
 */
int oq_conv_avx2_epi(const oq_kfuse *ep, int64_t ch0, oq_conv_epi2 *e);
/* The rest of oq_epi_apply after oq_conv_avx2_epi's part: the late activation and the steps. */
void oq_conv_epi_after_regs(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n);
/* The epilogue of a GEMM tile: rows of channels ch0 .. ch0 + mm - 1, pp values each, ldc apart, the first at output element off. conv_epilogue.c. */
AVX512 void oq_conv_epi_tile(const oq_kfuse *ep, int64_t ch0, int64_t mm, size_t off, float *y, int64_t ldc,
			     int64_t pp);

/* Lanes l of 16 with 0 <= i0 + l < n. */
static inline __mmask16 lane_mask(int64_t i0, int64_t n)
{
	int64_t lo = i0 < 0 ? -i0 : 0, hi = n - i0;
	if (hi > 16)
		hi = 16;
	if (lo >= hi)
		return 0;
	return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/*
 * The BatchNormalization kernel's x * a + b in double, rounded once to
 * float, on 16 lanes: lanes 0..7 with a_lo / b_lo, 8..15 with a_hi / b_hi
 * (the same values for one channel, per-lane ones for 16 channels).
 */
AVX512 static inline __m512 bn_vec(__m512 v, __m512d a_lo, __m512d a_hi, __m512d b_lo, __m512d b_hi)
{
	__m512d l = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m512d h = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	l = _mm512_add_pd(_mm512_mul_pd(l, a_lo), b_lo);
	h = _mm512_add_pd(_mm512_mul_pd(h, a_hi), b_hi);
	return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(l))),
						   _mm256_castps_pd(_mm512_cvtpd_ps(h)), 1));
}

/*
 * Relu as maxps(0, x) and Clip as minps(hi, maxps(lo, x)): x < 0 ? 0 : x
 * and x < lo ? lo : x > hi ? hi : x bit for bit (NaN and -0 kept; Clip
 * needs lo <= hi). Any other act: v unchanged.
 */
AVX512 static inline __m512 act_vec(__m512 v, int act, __m512 lo, __m512 hi)
{
	if (act == OQ_ACT_RELU)
		return _mm512_max_ps(_mm512_setzero_ps(), v);
	if (act == OQ_ACT_CLIP)
		return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
	return v;
}

/*
 * The epilogue of one channel (or, for the channel-blocked depthwise
 * kernel, of 16 channels in the lanes), ready for the registers.
 */
typedef struct epi_regs {
	int bn;                /* BN affine: x * a + b in double, rounded once */
	int act;               /* OQ_ACT_NONE, OQ_ACT_RELU or OQ_ACT_CLIP (lo <= hi) */
	__m512d a_lo, a_hi;    /* BN scale of lanes 0..7 / 8..15 (bn_vec) */
	__m512d b_lo, b_hi;    /* BN shift likewise */
	__m512 lo, hi;         /* Clip bounds */
	const oq_kfuse *ep;    /* for its steps and tensor operands (NULL: no steps) */
	int steps;             /* ep's steps run on the registers too (all binary ops, Relu, Clip lo <= hi) */
	int64_t ch;            /* the output channel (per-channel constants of the steps) */
} epi_regs;

/*
 * The part of ep done in registers for channel ch, broadcast to all lanes
 * (late: the activation and the steps are left to the caller). conv_epilogue.c.
 */
AVX512 void oq_conv_epi_regs_make(const oq_kfuse *ep, int64_t ch, int late, epi_regs *ev);
/* y[0..n) (output element off on): BN and Relu / Clip when epi, then the steps when ev->steps. conv_epilogue.c. */
AVX512 void oq_conv_epi_row(const epi_regs *ev, int epi, size_t off, float *y, size_t n);

/*
 * What the registers left of ev->ep (ev made with late) on a stored row
 * y[0..n), output element off on: the late activation, then the steps.
 * conv_epilogue.c.
 */
AVX512 void oq_conv_epi_rest(const epi_regs *ev, int late, size_t off, float *y, size_t n);

/* The epilogue on one vector: BN as the BatchNormalization kernel, then Relu / Clip (not the steps). */
AVX512 static inline __m512 epi_regs_vec(__m512 v, const epi_regs *ev)
{
	if (ev->bn)
		v = bn_vec(v, ev->a_lo, ev->a_hi, ev->b_lo, ev->b_hi);
	return act_vec(v, ev->act, ev->lo, ev->hi);
}

/* r[0..16) transposed in place: r[i] lane j <- r[j] lane i (written out and always inlined: r stays in registers). */
AVX512 __attribute__((always_inline)) static inline void transpose16x16(__m512 *r)
{
	__m512 t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15;
	__m512 u0, u1, u2, u3, u4, u5, u6, u7, u8, u9, u10, u11, u12, u13, u14, u15;

	t0 = _mm512_unpacklo_ps(r[0], r[1]);
	t1 = _mm512_unpackhi_ps(r[0], r[1]);
	t2 = _mm512_unpacklo_ps(r[2], r[3]);
	t3 = _mm512_unpackhi_ps(r[2], r[3]);
	t4 = _mm512_unpacklo_ps(r[4], r[5]);
	t5 = _mm512_unpackhi_ps(r[4], r[5]);
	t6 = _mm512_unpacklo_ps(r[6], r[7]);
	t7 = _mm512_unpackhi_ps(r[6], r[7]);
	t8 = _mm512_unpacklo_ps(r[8], r[9]);
	t9 = _mm512_unpackhi_ps(r[8], r[9]);
	t10 = _mm512_unpacklo_ps(r[10], r[11]);
	t11 = _mm512_unpackhi_ps(r[10], r[11]);
	t12 = _mm512_unpacklo_ps(r[12], r[13]);
	t13 = _mm512_unpackhi_ps(r[12], r[13]);
	t14 = _mm512_unpacklo_ps(r[14], r[15]);
	t15 = _mm512_unpackhi_ps(r[14], r[15]);
#define LO(x, y) _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)))
#define HI(x, y) _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)))
	u0 = LO(t0, t2);
	u1 = HI(t0, t2);
	u2 = LO(t1, t3);
	u3 = HI(t1, t3);
	u4 = LO(t4, t6);
	u5 = HI(t4, t6);
	u6 = LO(t5, t7);
	u7 = HI(t5, t7);
	u8 = LO(t8, t10);
	u9 = HI(t8, t10);
	u10 = LO(t9, t11);
	u11 = HI(t9, t11);
	u12 = LO(t12, t14);
	u13 = HI(t12, t14);
	u14 = LO(t13, t15);
	u15 = HI(t13, t15);
#undef LO
#undef HI
	/* 128-bit blocks: rows q and q + 4 of each group of 8, then q and q + 8 */
	t0 = _mm512_shuffle_f32x4(u0, u4, 0x88);
	t4 = _mm512_shuffle_f32x4(u0, u4, 0xdd);
	t1 = _mm512_shuffle_f32x4(u1, u5, 0x88);
	t5 = _mm512_shuffle_f32x4(u1, u5, 0xdd);
	t2 = _mm512_shuffle_f32x4(u2, u6, 0x88);
	t6 = _mm512_shuffle_f32x4(u2, u6, 0xdd);
	t3 = _mm512_shuffle_f32x4(u3, u7, 0x88);
	t7 = _mm512_shuffle_f32x4(u3, u7, 0xdd);
	t8 = _mm512_shuffle_f32x4(u8, u12, 0x88);
	t12 = _mm512_shuffle_f32x4(u8, u12, 0xdd);
	t9 = _mm512_shuffle_f32x4(u9, u13, 0x88);
	t13 = _mm512_shuffle_f32x4(u9, u13, 0xdd);
	t10 = _mm512_shuffle_f32x4(u10, u14, 0x88);
	t14 = _mm512_shuffle_f32x4(u10, u14, 0xdd);
	t11 = _mm512_shuffle_f32x4(u11, u15, 0x88);
	t15 = _mm512_shuffle_f32x4(u11, u15, 0xdd);
	r[0] = _mm512_shuffle_f32x4(t0, t8, 0x88);
	r[8] = _mm512_shuffle_f32x4(t0, t8, 0xdd);
	r[1] = _mm512_shuffle_f32x4(t1, t9, 0x88);
	r[9] = _mm512_shuffle_f32x4(t1, t9, 0xdd);
	r[2] = _mm512_shuffle_f32x4(t2, t10, 0x88);
	r[10] = _mm512_shuffle_f32x4(t2, t10, 0xdd);
	r[3] = _mm512_shuffle_f32x4(t3, t11, 0x88);
	r[11] = _mm512_shuffle_f32x4(t3, t11, 0xdd);
	r[4] = _mm512_shuffle_f32x4(t4, t12, 0x88);
	r[12] = _mm512_shuffle_f32x4(t4, t12, 0xdd);
	r[5] = _mm512_shuffle_f32x4(t5, t13, 0x88);
	r[13] = _mm512_shuffle_f32x4(t5, t13, 0xdd);
	r[6] = _mm512_shuffle_f32x4(t6, t14, 0x88);
	r[14] = _mm512_shuffle_f32x4(t6, t14, 0xdd);
	r[7] = _mm512_shuffle_f32x4(t7, t15, 0x88);
	r[15] = _mm512_shuffle_f32x4(t7, t15, 0xdd);
}

#define DW_MAX_TAPS 25 /* taps (kh * kw) and tap rows of the largest kernel the AVX-512 depthwise kernels take */

/*
 * A channel-blocked depthwise convolution (conv_depthwise.c): 16 channels
 * in the lanes, the input rows they need transposed into a ring of
 * 16-channel vectors. Work items: image x 16-channel block x band of
 * output rows.
 */
typedef struct dw_chan_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	const oq_conv_geom *g;
	const float *x, *w, *b;
	float *y;
	const oq_kfuse *ep;    /* fused epilogue, or NULL */
	int64_t nblk;          /* 16-channel blocks */
	int64_t nband, band;   /* bands of output rows per block, rows per band */
	int64_t wp;            /* padded row: vectors per transposed input row */
	int64_t span;          /* input rows one output row reads: (kh - 1) * dh + 1 */
	atomic_int oom;
} dw_chan_job;

/* g (depthwise) runs channel-blocked: its 16-channel blocks are nearly full and its kernel small enough. */
int oq_conv_dw_chan_fits(const oq_conv_geom *g);
/* A channel-blocked job for g (oq_conv_dw_chan_fits), cut into bands of output rows for the threads. */
void oq_conv_dw_chan_setup(dw_chan_job *dc, oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w,
			   const float *b, const oq_kfuse *ep, float *y);
/* Floats of a thread's buffer for oq_conv_dw_chan_block: the ring of span rows and the zero row. */
size_t oq_conv_dw_chan_scratch_floats(const dw_chan_job *j);
/*
 * Output rows [oh0, oh1) of channels c0 .. c0 + 15 (fewer at the end): xc
 * channel c0's input plane, yc its output plane; ring (span rows) and zero
 * (one row of zeros) from the thread's buffer, the zero row and the side
 * columns of the ring zeroed by the caller.
 */
AVX512 void oq_conv_dw_chan_block(const dw_chan_job *j, const float *xc, float *yc, int64_t c0, int64_t oh0,
				  int64_t oh1, float *ring, const float *zero);
#endif

#endif
