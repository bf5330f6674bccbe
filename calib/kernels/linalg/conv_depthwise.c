/*
 * conv_depthwise.c - float32 depthwise convolution (one input and one
 * output channel per group: MobileNet's 3x3 and 5x5 layers). No GEMM:
 * every output is b + sum of w * x over the taps in (i, j) order, with a
 * separate multiply and add, so all kernels here give the same bits
 * (tests compare them):
 * - dw_chan (AVX-512): 16 channels in the lanes, when the channels fill
 *   16-channel blocks; any kernel, stride, dilation and padding.
 * - dw_flat (AVX-512): small stride-1 planes (at most DW_FLAT_MAX_P
 *   outputs) as one flat row of positions.
 * - dw_rows (AVX-512): 16 outputs of a row per vector, horizontal stride 1
 *   or 2, read straight from the input with masked loads at the edges.
 * - dw_chan8 (AVX2 without AVX-512): dw_chan with 8 channels in the lanes.
 * - dw_pad (AVX2, SSE, portable): each channel plane copied into a
 *   zero-padded buffer, 8 outputs at a time (AVX2), then 4 (SSE).
 * The fused epilogue runs on the registers where it can (BN, Relu, Clip),
 * else on each stored row.
 */
#include "calib/kernels/linalg/conv_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------- on a zero-padded copy (dw_pad, SSE) */

/*
 * One output row, vectorised: yr[ow] = b + sum_{i,j} w[i,j] * x0[i*wp + ow*sw + j*dw]
 * for ow in [0, ow_n), ow_n a multiple of 4 (the padded plane is wide enough).
 * The sum is formed in (i, j) order with separate multiply and add, exactly
 * like the scalar loop, so every path gives the same bits. Inlined with
 * constant kh/kw (3, 5) the tap loops unroll and the weights stay in registers.
 */
static inline void dw_pad_row(float *yr, int64_t ow_n, const float *x0, int64_t wp, int64_t sw, int64_t dw,
			      const float *w, int64_t kh, int64_t kw, float b)
{
	int64_t ow = 0;
#if defined(__SSE2__)
	__m128 vb = _mm_set1_ps(b);
	if (sw == 1) {
		for (; ow + 4 <= ow_n; ow += 4) {
			__m128 acc = vb;
			for (int64_t i = 0; i < kh; i++) {
				const float *xr = x0 + i * wp + ow;
				for (int64_t j = 0; j < kw; j++)
					acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w[i * kw + j]),
									 _mm_loadu_ps(xr + j * dw)));
			}
			_mm_storeu_ps(yr + ow, acc);
		}
	} else if (sw == 2) {
		for (; ow + 4 <= ow_n; ow += 4) {
			__m128 acc = vb;
			for (int64_t i = 0; i < kh; i++) {
				const float *xr = x0 + i * wp + 2 * ow;
				for (int64_t j = 0; j < kw; j++) {
					const float *p = xr + j * dw;
					/* p[0], p[2], p[4], p[6] */
					__m128 lo = _mm_loadu_ps(p), hi = _mm_loadu_ps(p + 4);
					__m128 ev = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
					acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w[i * kw + j]), ev));
				}
			}
			_mm_storeu_ps(yr + ow, acc);
		}
	}
#endif
	for (; ow < ow_n; ow++) {
		float acc = b;
		for (int64_t i = 0; i < kh; i++)
			for (int64_t j = 0; j < kw; j++)
				acc = acc + w[i * kw + j] * x0[i * wp + ow * sw + j * dw];
		yr[ow] = acc;
	}
}

#if defined(HAVE_X86_KERNELS)
/*
 * dw_pad_row's vector loop 8 outputs at a time (AVX2: the same multiply and
 * add per tap in the same order, so the same bits), e (NULL: none) applied
 * before each store; returns how many outputs it wrote, a multiple of 8.
 * The stride-2 loads read p[0..15] for outputs ow..ow+7, no further than
 * the 4-output loop reads for ow_n.
 */
AVX2_FMA static inline int64_t dw_pad_row8(float *yr, int64_t ow_n, const float *x0, int64_t wp, int64_t sw,
					   int64_t dw, const float *w, int64_t kh, int64_t kw, float b,
					   const oq_conv_epi2 *e)
{
	__m256 vb = _mm256_set1_ps(b);
	int64_t ow = 0;

	if (sw == 1) {
		for (; ow + 8 <= ow_n; ow += 8) {
			__m256 acc = vb;
			for (int64_t i = 0; i < kh; i++) {
				const float *xr = x0 + i * wp + ow;
				for (int64_t j = 0; j < kw; j++)
					acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w[i * kw + j]),
									       _mm256_loadu_ps(xr + j * dw)));
			}
			_mm256_storeu_ps(yr + ow, e ? oq_conv_avx2_epi8(e, 0, acc) : acc);
		}
	} else if (sw == 2) {
		for (; ow + 8 <= ow_n; ow += 8) {
			__m256 acc = vb;
			for (int64_t i = 0; i < kh; i++) {
				const float *xr = x0 + i * wp + 2 * ow;
				for (int64_t j = 0; j < kw; j++) {
					const float *p = xr + j * dw;
					/* p[0], p[2], ... p[14]: per lane half p0 p2 p8 p10 | p4 p6 p12 p14, then the halves' middle pairs swapped */
					__m256 ev = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8),
								      _MM_SHUFFLE(2, 0, 2, 0));
					ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
					acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w[i * kw + j]), ev));
				}
			}
			_mm256_storeu_ps(yr + ow, e ? oq_conv_avx2_epi8(e, 0, acc) : acc);
		}
	}
	return ow;
}

/* dw_pad_row8 with the common kernel sizes as constants (the tap loops unroll). */
AVX2_FMA static int64_t dw_pad_row_avx2(float *yr, int64_t ow_n, const float *x0, int64_t wp, int64_t sw, int64_t dw,
					const float *w, int64_t kh, int64_t kw, float b, const oq_conv_epi2 *e)
{
	if (kh == 3 && kw == 3)
		return dw_pad_row8(yr, ow_n, x0, wp, sw, dw, w, 3, 3, b, e);
	if (kh == 5 && kw == 5)
		return dw_pad_row8(yr, ow_n, x0, wp, sw, dw, w, 5, 5, b, e);
	return dw_pad_row8(yr, ow_n, x0, wp, sw, dw, w, kh, kw, b, e);
}
#endif

/* A call of the dw_pad, dw_rows or dw_flat kernel: one work item per (image, channel) plane. */
typedef struct dw_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	const oq_conv_geom *g;
	const float *x, *w, *b;
	float *y;
	const oq_kfuse *ep;    /* fused epilogue, or NULL */
	int64_t ow4;           /* dw_pad: output width rounded up to a multiple of 4 */
	int64_t hp, wp;        /* dw_pad: padded plane, enough for ow4 outputs per row */
	int64_t nblk;          /* dw_rows: 16-output blocks per row */
	atomic_int oom;
} dw_job;

static void dw_pad_range(void *ctx, size_t begin, size_t end)
{
	dw_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
	int64_t kh = g->k[0], kw = g->k[1], sh = g->stride[0], sw = g->stride[1], dw = g->dil[1];
	size_t nbuf = (size_t)(j->hp * j->wp + 16);
	float *own = j->k ? NULL : malloc((nbuf + (size_t)j->ow4) * sizeof *own);
	float *buf = j->k ? oq_k_scratch(j->k, (nbuf + (size_t)j->ow4) * sizeof *buf) : own, *row;
#if defined(HAVE_X86_KERNELS)
	int avx2 = oq_conv_use_avx2();
#endif

	if (!buf) {
		atomic_store(&j->oom, 1);
		return;
	}
	row = buf + nbuf;
	memset(buf, 0, nbuf * sizeof *buf);
	for (size_t it = begin; it < end; it++) {
		int64_t ch = (int64_t)it % g->c;
		const float *xc = j->x + (int64_t)it * H * W;
		float *yc = j->y + (int64_t)it * OH * OW;
		const float *wc = j->w + ch * g->k_size;
		float b = j->b ? j->b[ch] : 0.0f;
#if defined(HAVE_X86_KERNELS)
		oq_conv_epi2 ev;
		int regs = avx2 && oq_conv_avx2_epi(j->ep, ch, &ev);
#endif
		/* zero-padded copy: buf[r][q] = x[r - pad0][q - pad1] */
		for (int64_t r = 0; r < j->hp; r++) {
			int64_t ih = r - g->pad[0];
			float *dst = buf + r * j->wp;
			int64_t a = g->pad[1] > 0 ? g->pad[1] : 0, e = g->pad[1] + W;
			if (e > j->wp)
				e = j->wp;
			if (ih < 0 || ih >= H || a >= e) {
				memset(dst, 0, (size_t)j->wp * sizeof *dst);
				continue;
			}
			memset(dst, 0, (size_t)a * sizeof *dst);
			memcpy(dst + a, xc + ih * W + (a - g->pad[1]), (size_t)(e - a) * sizeof *dst);
			memset(dst + e, 0, (size_t)(j->wp - e) * sizeof *dst);
		}
		for (int64_t oh = 0; oh < OH; oh++) {
			const float *x0 = buf + oh * sh * j->wp;
			int64_t rs = g->dil[0] * j->wp, d = 0, de = 0; /* outputs the AVX2 loop wrote; with e applied */
			size_t off = (size_t)(yc + oh * OW - j->y);
#if defined(HAVE_X86_KERNELS)
			if (avx2)
				d = dw_pad_row_avx2(row, j->ow4, x0, rs, sw, dw, wc, kh, kw, b, regs ? &ev : NULL);
			if (regs) {
				de = d < OW ? d : OW;
				oq_conv_epi_after_regs(j->ep, ch, off, row, (size_t)de);
			}
#endif
			if (kh == 3 && kw == 3)
				dw_pad_row(row + d, j->ow4 - d, x0 + d * sw, rs, sw, dw, wc, 3, 3, b);
			else if (kh == 5 && kw == 5)
				dw_pad_row(row + d, j->ow4 - d, x0 + d * sw, rs, sw, dw, wc, 5, 5, b);
			else
				dw_pad_row(row + d, j->ow4 - d, x0 + d * sw, rs, sw, dw, wc, kh, kw, b);
			oq_epi_apply(j->ep, ch, off + (size_t)de, row + de, (size_t)(OW - de));
			memcpy(yc + oh * OW, row, (size_t)OW * sizeof *row);
		}
	}
	free(own);
}

#if defined(HAVE_X86_KERNELS)
/* -------------------------------- AVX-512: rows of 16 outputs (dw_rows) */

/*
 * Depthwise float convolution with horizontal stride 1 or 2 on AVX-512F:
 * 16 outputs of a row per vector, read straight from the input plane (no
 * zero-padded copy): each tap loads the 16 (stride 2: 32, then the even
 * lanes) input columns it needs with a mask that zeroes the columns outside
 * the row, and a tap whose input row is outside the plane adds w * 0. So
 * every output is b + sum of w * x over all taps in (i, j) order with
 * separate multiply and add, exactly as dw_pad_row: the bits equal the SSE
 * path's (tests compare them). The column masks depend only on the geometry
 * and are built once per call. The fused epilogue runs on the registers
 * before the (masked) store: BN affine in double, Relu and Clip as maxps /
 * minps (other activations on the stored row, by oq_act_apply).
 */

/*
 * nr (1..DW_ROWS_AT_ONCE) output rows from oh0 of one channel plane: xc the input
 * plane, yc the output plane, cm the column masks [nblk][kw] (stride 2:
 * [nblk][kw][2]) and full[nblk] (all of a block's masks are whole), wv the
 * taps broadcast, ev the epilogue done in registers. The rows are
 * independent sums, so their add chains overlap; each one still adds its
 * taps in (i, j) order. Blocks whose taps all fall inside the plane use
 * plain loads.
 */
#define DW_ROWS_AT_ONCE 4

AVX512 static inline void dw_rows_block(const dw_job *j, const epi_regs *ev, const float *xc, float *yc, int64_t oh0,
					int nr, const __mmask16 *cm, const unsigned char *full, const __m512 *wv, float b,
					int64_t kh, int64_t kw, int64_t sw)
{
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1], OW = g->out[1], dh = g->dil[0], dw = g->dil[1];
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const float *xr[DW_ROWS_AT_ONCE][DW_MAX_TAPS];
	int ok[DW_ROWS_AT_ONCE][DW_MAX_TAPS], allok = 1;

	for (int r = 0; r < nr; r++)
		for (int64_t i = 0; i < kh; i++) {
			int64_t ih = (oh0 + r) * g->stride[0] - g->pad[0] + i * dh;
			ok[r][i] = ih >= 0 && ih < H;
			xr[r][i] = xc + (ok[r][i] ? ih : 0) * W;
			allok &= ok[r][i];
		}
	for (int64_t bk = 0; bk < j->nblk; bk++, cm += sw * kw) {
		int64_t ow = bk * 16, c0 = ow * sw - g->pad[1];
		__m512 acc[DW_ROWS_AT_ONCE];
		for (int r = 0; r < nr; r++)
			acc[r] = _mm512_set1_ps(b);
		if (allok && full[bk]) {
			for (int64_t i = 0; i < kh; i++)
				for (int r = 0; r < nr; r++) {
					const float *p = xr[r][i] + c0;
					for (int64_t jj = 0; jj < kw; jj++, p += dw) {
						__m512 v = sw == 1 ? _mm512_loadu_ps(p)
								   : _mm512_permutex2var_ps(_mm512_loadu_ps(p), even,
											    _mm512_loadu_ps(p + 16));
						acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(wv[i * kw + jj], v));
					}
				}
		} else {
			for (int64_t i = 0; i < kh; i++)
				for (int r = 0; r < nr; r++) {
					const float *p = xr[r][i] + c0;
					for (int64_t jj = 0; jj < kw; jj++, p += dw) {
						__m512 v = _mm512_setzero_ps();
						if (ok[r][i] && sw == 1)
							v = _mm512_maskz_loadu_ps(cm[jj], p);
						else if (ok[r][i])
							v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(cm[2 * jj], p), even,
										   _mm512_maskz_loadu_ps(cm[2 * jj + 1], p + 16));
						acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(wv[i * kw + jj], v));
					}
				}
		}
		for (int r = 0; r < nr; r++) {
			float *yr = yc + (oh0 + r) * OW + ow;
			__mmask16 m = lane_mask(ow, OW);
			_mm512_mask_storeu_ps(yr, m, epi_regs_vec(acc[r], ev));
		}
	}
}

/* All rows of one channel, DW_ROWS_AT_ONCE at a time; kh, kw, sw constant where inlined with constants. */
AVX512 static inline void dw_rows_plane(const dw_job *j, const epi_regs *ev, const float *xc, float *yc,
					const __mmask16 *cm, const unsigned char *full, const float *w, float b, int64_t kh,
					int64_t kw, int64_t sw)
{
	int64_t OH = j->g->out[0], oh = 0;
	__m512 wv[DW_MAX_TAPS];

	for (int64_t t = 0; t < kh * kw; t++)
		wv[t] = _mm512_set1_ps(w[t]);
	for (; oh + DW_ROWS_AT_ONCE <= OH; oh += DW_ROWS_AT_ONCE)
		dw_rows_block(j, ev, xc, yc, oh, DW_ROWS_AT_ONCE, cm, full, wv, b, kh, kw, sw);
	for (; oh < OH; oh++)
		dw_rows_block(j, ev, xc, yc, oh, 1, cm, full, wv, b, kh, kw, sw);
}

AVX512 static void dw_rows_range(void *ctx, size_t begin, size_t end)
{
	dw_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t W = g->in[1], OH = g->out[0], OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->stride[1];
	size_t nm = (size_t)(j->nblk * kw * sw), need = nm * sizeof(__mmask16) + (size_t)j->nblk;
	void *own = j->k ? NULL : malloc(need), *buf = j->k ? oq_k_scratch(j->k, need) : own;
	__mmask16 *cm = buf;
	unsigned char *full = (unsigned char *)(cm + nm);
	int late = oq_conv_late_act(j->ep);

	if (!buf) {
		atomic_store(&j->oom, 1);
		return;
	}
	/* input columns of block bk, tap jj: c0 + jj * dw + l (stride 2: + 2 l, as two 16-lane halves) */
	for (int64_t bk = 0, q = 0; bk < j->nblk; bk++) {
		int64_t c0 = bk * 16 * sw - g->pad[1];
		full[bk] = 1;
		for (int64_t jj = 0; jj < kw; jj++) {
			int64_t c = c0 + jj * g->dil[1];
			cm[q] = lane_mask(c, W);
			full[bk] &= cm[q++] == 0xffff;
			if (sw == 2) {
				cm[q] = lane_mask(c + 16, W);
				full[bk] &= cm[q++] == 0xffff;
			}
		}
	}
	for (size_t it = begin; it < end; it++) {
		int64_t ch = (int64_t)it % g->c;
		const float *xc = j->x + (int64_t)it * g->in_size;
		float *yc = j->y + (int64_t)it * OH * OW;
		const float *wc = j->w + ch * g->k_size;
		float b = j->b ? j->b[ch] : 0.0f;
		epi_regs ev;
		oq_conv_epi_regs_make(j->ep, ch, late, &ev);
		if (kh == 3 && kw == 3 && sw == 1)
			dw_rows_plane(j, &ev, xc, yc, cm, full, wc, b, 3, 3, 1);
		else if (kh == 3 && kw == 3)
			dw_rows_plane(j, &ev, xc, yc, cm, full, wc, b, 3, 3, 2);
		else if (kh == 5 && kw == 5 && sw == 1)
			dw_rows_plane(j, &ev, xc, yc, cm, full, wc, b, 5, 5, 1);
		else if (kh == 5 && kw == 5)
			dw_rows_plane(j, &ev, xc, yc, cm, full, wc, b, 5, 5, 2);
		else
			dw_rows_plane(j, &ev, xc, yc, cm, full, wc, b, kh, kw, sw);
		for (int64_t oh = 0; j->ep && (late || j->ep->n_steps) && oh < OH; oh++)
			oq_conv_epi_rest(&ev, late, (size_t)(yc + oh * OW - j->y), yc + oh * OW, (size_t)OW);
	}
	free(own);
}

/* --------------------- AVX-512: a small plane as one flat row (dw_flat) */

/*
 * Small planes (DW_FLAT_MAX_P outputs at most, rows of at most
 * DW_FLAT_MAX_W) with stride 1 and the output the input's size: the plane
 * is one flat row of positions,
 * and tap (i, j) of output p reads input p + (i * dh - pad0) * W + j * dw -
 * pad1, a fixed offset, so 16 positions (several output rows) fill each
 * vector instead of one short row. A mask per (vector, tap), built once per
 * call, zeroes the taps outside the plane (w * 0 is still added, as on the
 * padded copy): the same sums in the same (i, j) order.
 */
#define DW_FLAT_MAX_P 256 /* outputs of a plane, at most */
#define DW_FLAT_VECS (DW_FLAT_MAX_P / 16)
#define DW_FLAT_MAX_W 10 /* wider rows fill most of a vector already */

static int dw_flat_fits(const oq_conv_geom *g)
{
	return g->stride[0] == 1 && g->stride[1] == 1 && g->in[0] == g->out[0] && g->in[1] == g->out[1] &&
	       g->out[1] <= DW_FLAT_MAX_W && g->out_size <= DW_FLAT_MAX_P;
}

AVX512 static void dw_flat_range(void *ctx, size_t begin, size_t end)
{
	dw_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1], P = g->out_size, taps = g->k_size, nv = (P + 15) / 16;
	int64_t offs[DW_MAX_TAPS];
	__mmask16 mk[DW_FLAT_VECS * DW_MAX_TAPS];
	int late = oq_conv_late_act(j->ep);

	for (int64_t t = 0; t < taps; t++) {
		int64_t di = t / g->k[1] * g->dil[0] - g->pad[0], dj = t % g->k[1] * g->dil[1] - g->pad[1];
		offs[t] = di * W + dj;
		for (int64_t v = 0; v < nv; v++) {
			unsigned m = 0;
			for (int64_t l = 0; l < 16; l++) {
				int64_t p = v * 16 + l, ih = p / W + di, iw = p % W + dj;
				if (p < P && ih >= 0 && ih < H && iw >= 0 && iw < W)
					m |= 1u << l;
			}
			mk[v * taps + t] = (__mmask16)m;
		}
	}
	for (size_t it = begin; it < end; it++) {
		int64_t ch = (int64_t)it % g->c;
		const float *xc = j->x + (int64_t)it * g->in_size, *wc = j->w + ch * taps;
		float *yc = j->y + (int64_t)it * P;
		__m512 acc[DW_FLAT_VECS];
		epi_regs ev;
		oq_conv_epi_regs_make(j->ep, ch, late, &ev);
		for (int64_t v = 0; v < nv; v++)
			acc[v] = _mm512_set1_ps(j->b ? j->b[ch] : 0.0f);
		for (int64_t t = 0; t < taps; t++) {
			__m512 w = _mm512_set1_ps(wc[t]);
			for (int64_t v = 0; v < nv; v++)
				acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(w, _mm512_maskz_loadu_ps(mk[v * taps + t],
												   xc + v * 16 + offs[t])));
		}
		for (int64_t v = 0; v < nv; v++)
			_mm512_mask_storeu_ps(yc + v * 16, lane_mask(v * 16, P), epi_regs_vec(acc[v], &ev));
		if (j->ep && (late || j->ep->n_steps))
			oq_conv_epi_rest(&ev, late, (size_t)(yc - j->y), yc, (size_t)P);
	}
}

/* -------------------------- AVX-512: 16 channels in the lanes (dw_chan) */

/*
 * Depthwise float convolution with the channels in the vector lanes
 * (any kernel, stride, dilation and padding): 16 channels at a time, each
 * input row of those channels is transposed once into a row of 16-channel
 * vectors [pad | W | pad] x 16 (zero columns at both sides; rows outside
 * the plane read a zero row), kept in a ring of the kh-row window the
 * current output row needs; then each output position is b + sum of
 * w[tap] * x over the taps in (i, j) order with separate multiply and add,
 * one vector for 16 channels (the weights of a tap are a vector of 16
 * channels), 8 positions at a time as independent chains; the BN affine
 * and Relu / Clip run on those registers (per-lane scale and shift), and
 * 16 positions are transposed back and stored as 16 channel rows. Every
 * output is the sum dw_rows_block and dw_pad_row form, in the same order,
 * so the bits are theirs; what changes is that no lane is wasted on short rows
 * (7 x 7, 14 x 14 planes), a horizontal stride is a step through the row
 * (no permutes) and there are no per-tap masks or branches. Work items:
 * image x 16-channel block x band of output rows (bands only to give
 * every thread work: the first rows of a band are transposed again).
 */
#define DW_CHAN_ITEMS 16 /* work items a depthwise call is cut into at least, where rows allow */

/*
 * Input row ih of channels c0 .. c0 + nc - 1 (xc: channel c0's plane) into
 * dst[pad + w][16], lanes >= nc zero; whole 16-column groups are stored, the
 * columns past the row as zeros (the row is wide enough: dw_chan_job.wp).
 */
AVX512 static void dw_chan_row_in(const oq_conv_geom *g, const float *xc, int nc, int64_t ih, float *dst)
{
	int64_t W = g->in[1];
	const float *src[16];

	for (int l = 0; l < 16; l++)
		src[l] = xc + (int64_t)(l < nc ? l : 0) * g->in_size + ih * W;
	dst += g->pad[1] * 16;
	for (int64_t w0 = 0; w0 < W; w0 += 16, dst += 256) {
		__mmask16 m = W - w0 >= 16 ? 0xffff : (__mmask16)((1u << (W - w0)) - 1u);
		__m512 r[16];
		for (int l = 0; l < 16; l++)
			r[l] = _mm512_maskz_loadu_ps(l < nc ? m : 0, src[l] + w0);
		transpose16x16(r);
		for (int q = 0; q < 16; q++)
			_mm512_store_ps(dst + q * 16, r[q]);
	}
}

/*
 * 8 output positions from ow0 of one output row (past the row's end they
 * read the zero columns and are not stored): rows[i] the transposed input
 * row of tap row i, wv the tap vectors, out[q] the results.
 */
AVX512 static inline void dw_chan_8pos(const float *const *rows, const __m512 *wv, __m512 bias, const epi_regs *ev,
				       int64_t ow0, int64_t kh, int64_t kw, int64_t sw, int64_t dw, __m512 *out)
{
	__m512 a0 = bias, a1 = bias, a2 = bias, a3 = bias, a4 = bias, a5 = bias, a6 = bias, a7 = bias;
	for (int64_t i = 0; i < kh; i++) {
		const float *r = rows[i] + ow0 * sw * 16;
		for (int64_t j = 0; j < kw; j++) {
			__m512 wt = wv[i * kw + j];
			const float *p = r + j * dw * 16;
			int64_t st = sw * 16;
			a0 = _mm512_add_ps(a0, _mm512_mul_ps(wt, _mm512_load_ps(p)));
			a1 = _mm512_add_ps(a1, _mm512_mul_ps(wt, _mm512_load_ps(p + st)));
			a2 = _mm512_add_ps(a2, _mm512_mul_ps(wt, _mm512_load_ps(p + 2 * st)));
			a3 = _mm512_add_ps(a3, _mm512_mul_ps(wt, _mm512_load_ps(p + 3 * st)));
			a4 = _mm512_add_ps(a4, _mm512_mul_ps(wt, _mm512_load_ps(p + 4 * st)));
			a5 = _mm512_add_ps(a5, _mm512_mul_ps(wt, _mm512_load_ps(p + 5 * st)));
			a6 = _mm512_add_ps(a6, _mm512_mul_ps(wt, _mm512_load_ps(p + 6 * st)));
			a7 = _mm512_add_ps(a7, _mm512_mul_ps(wt, _mm512_load_ps(p + 7 * st)));
		}
	}
	out[0] = epi_regs_vec(a0, ev);
	out[1] = epi_regs_vec(a1, ev);
	out[2] = epi_regs_vec(a2, ev);
	out[3] = epi_regs_vec(a3, ev);
	out[4] = epi_regs_vec(a4, ev);
	out[5] = epi_regs_vec(a5, ev);
	out[6] = epi_regs_vec(a6, ev);
	out[7] = epi_regs_vec(a7, ev);
}

/* Output rows [oh0, oh1) of one block: ring slots of span rows (row ih in slot ih % span), yc channel c0's plane. */
AVX512 static inline void dw_chan_rows(const dw_chan_job *j, const float *xc, float *yc, int nc, const __m512 *wv,
				       __m512 bias, const epi_regs *ev, float *ring, const float *zero, int64_t oh0,
				       int64_t oh1, int64_t kh, int64_t kw, int64_t sw)
{
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], OW = g->out[1], OHW = g->out_size, dh = g->dil[0], dw = g->dil[1];
	int64_t have[DW_MAX_TAPS], span = j->span;
	const float *rows[DW_MAX_TAPS];

	for (int64_t s = 0; s < span; s++)
		have[s] = -1;
	for (int64_t oh = oh0; oh < oh1; oh++) {
		for (int64_t i = 0; i < kh; i++) {
			int64_t ih = oh * g->stride[0] - g->pad[0] + i * dh, s;
			if (ih < 0 || ih >= H) {
				rows[i] = zero;
				continue;
			}
			s = ih % span;
			rows[i] = ring + s * j->wp * 16;
			if (have[s] != ih) {
				dw_chan_row_in(g, xc, nc, ih, ring + s * j->wp * 16);
				have[s] = ih;
			}
		}
		for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
			int64_t nw = OW - ow0 < 16 ? OW - ow0 : 16;
			__m512 r[16];
			dw_chan_8pos(rows, wv, bias, ev, ow0, kh, kw, sw, dw, r);
			if (nw > 8)
				dw_chan_8pos(rows, wv, bias, ev, ow0 + 8, kh, kw, sw, dw, r + 8);
			else
				for (int q = 8; q < 16; q++)
					r[q] = _mm512_setzero_ps();
			transpose16x16(r);
			for (int l = 0; l < nc; l++)
				_mm512_mask_storeu_ps(yc + l * OHW + oh * OW + ow0, (__mmask16)((1u << nw) - 1u), r[l]);
		}
	}
}

/*
 * Channel-blocked where the 16-channel blocks are nearly full (C = 24 leaves
 * a third of the second block's lanes idle, C = 3 most): the row kernels
 * (dw_rows_range, dw_flat_range) are as fast or faster there.
 */
int oq_conv_dw_chan_fits(const oq_conv_geom *g)
{
	return !oq_linalg_dw_rows && g->k_size <= DW_MAX_TAPS && (g->k[0] - 1) * g->dil[0] + 1 <= DW_MAX_TAPS &&
	       g->c * 5 > round_up(g->c, 16) * 4;
}

/*
 * Output rows [oh0, oh1) of channels c0 .. c0 + 15 (fewer at the end): xc
 * channel c0's input plane, yc its output plane; ring and zero as dw_chan_rows.
 */
AVX512 void oq_conv_dw_chan_block(const dw_chan_job *j, const float *xc, float *yc, int64_t c0, int64_t oh0, int64_t oh1,
				  float *ring, const float *zero)
{
	const oq_conv_geom *g = j->g;
	int64_t OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->stride[1], taps = g->k_size;
	int nc = g->c - c0 < 16 ? (int)(g->c - c0) : 16, late = oq_conv_late_act(j->ep);
	__mmask16 cm = (__mmask16)((1u << nc) - 1u);
	__m512 wv[DW_MAX_TAPS], bias = j->b ? _mm512_maskz_loadu_ps(cm, j->b + c0) : _mm512_setzero_ps();
	epi_regs ev;

	for (int64_t t = 0; t < taps; t++) {
		float tw[16] = {0};
		for (int l = 0; l < nc; l++)
			tw[l] = j->w[(c0 + l) * taps + t];
		wv[t] = _mm512_loadu_ps(tw);
	}
	/* BN and Relu / Clip on the registers, per lane: the steps run on the stored rows below */
	oq_conv_epi_regs_make(j->ep, 0, late, &ev);
	ev.steps = 0;
	if (ev.bn) {
		ev.a_lo = _mm512_maskz_loadu_pd((__mmask8)cm, j->ep->scale + c0);
		ev.a_hi = _mm512_maskz_loadu_pd((__mmask8)(cm >> 8), j->ep->scale + c0 + 8);
		ev.b_lo = _mm512_maskz_loadu_pd((__mmask8)cm, j->ep->shift + c0);
		ev.b_hi = _mm512_maskz_loadu_pd((__mmask8)(cm >> 8), j->ep->shift + c0 + 8);
	}
	if (kh == 3 && kw == 3 && sw == 1 && g->dil[1] == 1)
		dw_chan_rows(j, xc, yc, nc, wv, bias, &ev, ring, zero, oh0, oh1, 3, 3, 1);
	else if (kh == 3 && kw == 3 && sw == 2 && g->dil[1] == 1)
		dw_chan_rows(j, xc, yc, nc, wv, bias, &ev, ring, zero, oh0, oh1, 3, 3, 2);
	else if (kh == 5 && kw == 5 && sw == 1 && g->dil[1] == 1)
		dw_chan_rows(j, xc, yc, nc, wv, bias, &ev, ring, zero, oh0, oh1, 5, 5, 1);
	else if (kh == 5 && kw == 5 && sw == 2 && g->dil[1] == 1)
		dw_chan_rows(j, xc, yc, nc, wv, bias, &ev, ring, zero, oh0, oh1, 5, 5, 2);
	else
		dw_chan_rows(j, xc, yc, nc, wv, bias, &ev, ring, zero, oh0, oh1, kh, kw, sw);
	/* what the registers did not do: a late activation, the steps (as dw_rows_range) */
	for (int l = 0; j->ep && (late || j->ep->n_steps) && l < nc; l++) {
		epi_regs sev;
		oq_conv_epi_regs_make(j->ep, c0 + l, late, &sev);
		for (int64_t oh = oh0; oh < oh1; oh++) {
			float *yr = yc + l * g->out_size + oh * OW;
			oq_conv_epi_rest(&sev, late, (size_t)(yr - j->y), yr, (size_t)OW);
		}
	}
}

/* dc's blocks of `lanes` channels, and bands of at least 8 rows: enough items for the threads when the planes are big. */
static void dw_chan_cut(dw_chan_job *dc, int64_t lanes)
{
	const oq_conv_geom *g = dc->g;

	dc->nblk = ceil_div(g->c, lanes);
	dc->nband = ceil_div(DW_CHAN_ITEMS, g->n * dc->nblk);
	if (dc->nband > g->out[0] / 8)
		dc->nband = g->out[0] / 8;
	if (dc->nband < 1)
		dc->nband = 1;
	dc->band = ceil_div(g->out[0], dc->nband);
	dc->nband = ceil_div(g->out[0], dc->band);
}

/* A channel-blocked job for g (depthwise, oq_conv_dw_chan_fits), cut into bands of output rows for the threads. */
void oq_conv_dw_chan_setup(dw_chan_job *dc, oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w, const float *b,
			   const oq_kfuse *ep, float *y)
{
	dc->k = k;
	dc->g = g;
	dc->x = x;
	dc->w = w;
	dc->b = b;
	dc->y = y;
	dc->ep = ep;
	dc->span = (g->k[0] - 1) * g->dil[0] + 1;
	dc->wp = g->pad[1] + round_up(g->in[1], 16);
	/* whole groups of 8 positions read zero columns past the row */
	if ((round_up(g->out[1], 8) - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1 > dc->wp)
		dc->wp = (round_up(g->out[1], 8) - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
	dw_chan_cut(dc, 16);
	atomic_init(&dc->oom, 0);
}

/* Floats of dw_chan_range's scratch: the ring of span rows and the zero row (a multiple of 16). */
size_t oq_conv_dw_chan_scratch_floats(const dw_chan_job *j)
{
	return ((size_t)j->span + 1) * (size_t)j->wp * 16;
}

AVX512 static void dw_chan_range(void *ctx, size_t begin, size_t end)
{
	dw_chan_job *j = ctx;
	const oq_conv_geom *g = j->g;
	size_t need = oq_conv_dw_chan_scratch_floats(j) * sizeof(float);
	float *own = j->k ? NULL : aligned_alloc(64, need), *ring = j->k ? oq_k_scratch(j->k, need) : own;

	if (!ring) {
		atomic_store(&j->oom, 1);
		return;
	}
	/* the side columns of every ring row and the zero row: never written below */
	memset(ring, 0, need);
	for (size_t it = begin; it < end; it++) {
		int64_t band = (int64_t)it % j->nband, rest = (int64_t)it / j->nband;
		int64_t blk = rest % j->nblk, n = rest / j->nblk, c0 = blk * 16;
		int64_t oh0 = band * j->band, oh1 = oh0 + j->band < g->out[0] ? oh0 + j->band : g->out[0];
		oq_conv_dw_chan_block(j, j->x + (n * g->c + c0) * g->in_size, j->y + (n * g->c + c0) * g->out_size, c0, oh0, oh1,
				      ring, ring + (size_t)j->span * (size_t)j->wp * 16);
	}
	free(own);
}
#endif

#if defined(HAVE_X86_KERNELS)
/* ------------------------------- AVX2: 8 channels in the lanes (dw_chan8) */

/*
 * dw_chan on AVX2: 8 channels per vector, the same design and the same
 * sums (b + w * x over the taps in (i, j) order, separate multiply and
 * add), so the bits of dw_pad_row. The ring holds transposed input rows
 * [wp][8] (half of the dw_chan scratch; the job's wp covers groups of 8
 * columns and of 8 positions), BN per lane (x * a + b in double, rounded
 * once) and Relu / Clip run on the registers, 8 positions are transposed
 * back and stored as 8 channel rows; the late activation and the steps run
 * on the stored rows. On planes of 7 x 7 and 14 x 14 the row kernel wastes
 * most lanes of a vector and pays its per-row costs once per channel.
 */

/* r[0..7] (8 rows of 8) transposed in place. */
AVX2_FMA static inline void transpose8x8(__m256 *r)
{
	__m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
	__m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
	__m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
	__m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
	__m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
	__m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
	__m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
	__m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
	r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
	r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
	r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
	r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
	r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
	r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
	r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
	r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Lanes 0..n-1 all ones (n <= 8). */
AVX2_FMA static inline __m256i lanes_mask(int64_t n)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Input row ih of channels c0 .. c0 + nc - 1 (xc: channel c0's plane) into dst[pad + w][8], lanes >= nc zero. */
AVX2_FMA static void dw_chan8_row_in(const oq_conv_geom *g, const float *xc, int nc, int64_t ih, float *dst)
{
	int64_t W = g->in[1];
	const float *src[8];

	for (int l = 0; l < 8; l++)
		src[l] = xc + (int64_t)(l < nc ? l : 0) * g->in_size + ih * W;
	dst += g->pad[1] * 8;
	for (int64_t w0 = 0; w0 < W; w0 += 8, dst += 64) {
		__m256i m = lanes_mask(W - w0 < 8 ? W - w0 : 8);
		__m256 r[8];
		for (int l = 0; l < 8; l++)
			r[l] = l < nc ? _mm256_maskload_ps(src[l] + w0, m) : _mm256_setzero_ps();
		transpose8x8(r);
		for (int q = 0; q < 8; q++)
			_mm256_store_ps(dst + q * 8, r[q]);
	}
}

/* Per-lane BN (a, b: channels 0..3 and 4..7; bn 0: none) and Relu / Clip (act) on 8 channels. */
typedef struct chan8_epi {
	int bn, act;
	__m256d a_lo, a_hi, b_lo, b_hi;
	__m256 lo, hi;
} chan8_epi;

AVX2_FMA static inline __m256 chan8_epi_apply(const chan8_epi *e, __m256 x)
{
	if (e->bn) {
		__m256d l = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), e->a_lo), e->b_lo);
		__m256d u = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), e->a_hi), e->b_hi);
		x = _mm256_set_m128(_mm256_cvtpd_ps(u), _mm256_cvtpd_ps(l));
	}
	if (e->act)
		x = _mm256_min_ps(e->hi, _mm256_max_ps(e->lo, x));
	return x;
}

/* 8 output positions from ow0 of one output row (as dw_chan_8pos), through e, into out[q]. */
AVX2_FMA static inline void dw_chan8_8pos(const float *const *rows, const __m256 *wv, __m256 bias, const chan8_epi *e,
					  int64_t ow0, int64_t kh, int64_t kw, int64_t sw, int64_t dw, __m256 *out)
{
	__m256 a0 = bias, a1 = bias, a2 = bias, a3 = bias, a4 = bias, a5 = bias, a6 = bias, a7 = bias;
	for (int64_t i = 0; i < kh; i++) {
		const float *r = rows[i] + ow0 * sw * 8;
		for (int64_t j = 0; j < kw; j++) {
			__m256 wt = wv[i * kw + j];
			const float *p = r + j * dw * 8;
			int64_t st = sw * 8;
			a0 = _mm256_add_ps(a0, _mm256_mul_ps(wt, _mm256_load_ps(p)));
			a1 = _mm256_add_ps(a1, _mm256_mul_ps(wt, _mm256_load_ps(p + st)));
			a2 = _mm256_add_ps(a2, _mm256_mul_ps(wt, _mm256_load_ps(p + 2 * st)));
			a3 = _mm256_add_ps(a3, _mm256_mul_ps(wt, _mm256_load_ps(p + 3 * st)));
			a4 = _mm256_add_ps(a4, _mm256_mul_ps(wt, _mm256_load_ps(p + 4 * st)));
			a5 = _mm256_add_ps(a5, _mm256_mul_ps(wt, _mm256_load_ps(p + 5 * st)));
			a6 = _mm256_add_ps(a6, _mm256_mul_ps(wt, _mm256_load_ps(p + 6 * st)));
			a7 = _mm256_add_ps(a7, _mm256_mul_ps(wt, _mm256_load_ps(p + 7 * st)));
		}
	}
	out[0] = chan8_epi_apply(e, a0);
	out[1] = chan8_epi_apply(e, a1);
	out[2] = chan8_epi_apply(e, a2);
	out[3] = chan8_epi_apply(e, a3);
	out[4] = chan8_epi_apply(e, a4);
	out[5] = chan8_epi_apply(e, a5);
	out[6] = chan8_epi_apply(e, a6);
	out[7] = chan8_epi_apply(e, a7);
}

/* Output rows [oh0, oh1) of one 8-channel block (as dw_chan_rows). */
AVX2_FMA static inline void dw_chan8_rows(const dw_chan_job *j, const float *xc, float *yc, int nc, const __m256 *wv,
					  __m256 bias, const chan8_epi *e, float *ring, const float *zero, int64_t oh0,
					  int64_t oh1, int64_t kh, int64_t kw, int64_t sw)
{
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], OW = g->out[1], OHW = g->out_size, dh = g->dil[0], dw = g->dil[1];
	int64_t have[DW_MAX_TAPS], span = j->span;
	const float *rows[DW_MAX_TAPS];

	for (int64_t s = 0; s < span; s++)
		have[s] = -1;
	for (int64_t oh = oh0; oh < oh1; oh++) {
		for (int64_t i = 0; i < kh; i++) {
			int64_t ih = oh * g->stride[0] - g->pad[0] + i * dh, s;
			if (ih < 0 || ih >= H) {
				rows[i] = zero;
				continue;
			}
			s = ih % span;
			rows[i] = ring + s * j->wp * 8;
			if (have[s] != ih) {
				dw_chan8_row_in(g, xc, nc, ih, ring + s * j->wp * 8);
				have[s] = ih;
			}
		}
		for (int64_t ow0 = 0; ow0 < OW; ow0 += 8) {
			int64_t nw = OW - ow0 < 8 ? OW - ow0 : 8;
			__m256 r[8];
			dw_chan8_8pos(rows, wv, bias, e, ow0, kh, kw, sw, dw, r);
			transpose8x8(r);
			for (int l = 0; l < nc; l++) {
				float *yr = yc + l * OHW + oh * OW + ow0;
				if (nw == 8) {
					_mm256_storeu_ps(yr, r[l]);
				} else {
					float t[8];
					_mm256_storeu_ps(t, r[l]);
					memcpy(yr, t, (size_t)nw * sizeof *t);
				}
			}
		}
	}
}

/* dw_chan8 takes g: 8-channel blocks nearly full, the kernel within the ring's taps. */
static int dw_chan8_fits(const oq_conv_geom *g)
{
	return !oq_linalg_dw_rows && g->k_size <= DW_MAX_TAPS && (g->k[0] - 1) * g->dil[0] + 1 <= DW_MAX_TAPS &&
	       g->c * 5 > round_up(g->c, 8) * 4;
}

/* Output rows [oh0, oh1) of channels c0 .. c0 + 7 (fewer at the end); ring and zero as dw_chan_block's. */
AVX2_FMA static void dw_chan8_block(const dw_chan_job *j, const float *xc, float *yc, int64_t c0, int64_t oh0, int64_t oh1,
				    float *ring, const float *zero)
{
	const oq_conv_geom *g = j->g;
	int64_t OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->stride[1], taps = g->k_size;
	int nc = g->c - c0 < 8 ? (int)(g->c - c0) : 8, late = j->ep && oq_conv_late_act(j->ep);
	__m256 wv[DW_MAX_TAPS], bias = _mm256_setzero_ps();
	chan8_epi e;
	oq_conv_epi2 e2;

	for (int64_t t = 0; t < taps; t++) {
		float tw[8] = {0};
		for (int l = 0; l < nc; l++)
			tw[l] = j->w[(c0 + l) * taps + t];
		wv[t] = _mm256_loadu_ps(tw);
	}
	if (j->b) {
		float tb[8] = {0};
		memcpy(tb, j->b + c0, (size_t)nc * sizeof *tb);
		bias = _mm256_loadu_ps(tb);
	}
	/* BN and Relu / Clip on the registers (oq_conv_avx2_epi's choice), per lane */
	memset(&e, 0, sizeof e);
	oq_conv_avx2_epi(j->ep, c0, &e2);
	if (e2.scale) {
		double ta[8] = {0}, tb[8] = {0};
		memcpy(ta, e2.scale, (size_t)nc * sizeof *ta);
		memcpy(tb, e2.shift, (size_t)nc * sizeof *tb);
		e.bn = 1;
		e.a_lo = _mm256_loadu_pd(ta);
		e.a_hi = _mm256_loadu_pd(ta + 4);
		e.b_lo = _mm256_loadu_pd(tb);
		e.b_hi = _mm256_loadu_pd(tb + 4);
	}
	if (e2.act) {
		e.act = 1;
		e.lo = _mm256_set1_ps(e2.lo);
		e.hi = _mm256_set1_ps(e2.hi);
	}
	if (kh == 3 && kw == 3 && sw == 1 && g->dil[1] == 1)
		dw_chan8_rows(j, xc, yc, nc, wv, bias, &e, ring, zero, oh0, oh1, 3, 3, 1);
	else if (kh == 3 && kw == 3 && sw == 2 && g->dil[1] == 1)
		dw_chan8_rows(j, xc, yc, nc, wv, bias, &e, ring, zero, oh0, oh1, 3, 3, 2);
	else if (kh == 5 && kw == 5 && sw == 1 && g->dil[1] == 1)
		dw_chan8_rows(j, xc, yc, nc, wv, bias, &e, ring, zero, oh0, oh1, 5, 5, 1);
	else if (kh == 5 && kw == 5 && sw == 2 && g->dil[1] == 1)
		dw_chan8_rows(j, xc, yc, nc, wv, bias, &e, ring, zero, oh0, oh1, 5, 5, 2);
	else
		dw_chan8_rows(j, xc, yc, nc, wv, bias, &e, ring, zero, oh0, oh1, kh, kw, sw);
	/* what the registers did not do: the late activation and the steps, on the stored rows */
	for (int l = 0; j->ep && (late || j->ep->n_steps) && l < nc; l++)
		for (int64_t oh = oh0; oh < oh1; oh++) {
			float *yr = yc + l * g->out_size + oh * OW;
			oq_conv_epi_after_regs(j->ep, c0 + l, (size_t)(yr - j->y), yr, (size_t)OW);
		}
}

AVX2_FMA static void dw_chan8_range(void *ctx, size_t begin, size_t end)
{
	dw_chan_job *j = ctx;
	const oq_conv_geom *g = j->g;
	size_t need = oq_conv_dw_chan_scratch_floats(j) * sizeof(float);
	float *own = j->k ? NULL : aligned_alloc(64, need), *ring = j->k ? oq_k_scratch(j->k, need) : own;

	if (!ring) {
		atomic_store(&j->oom, 1);
		return;
	}
	/* the side columns of every ring row and the zero row: never written below */
	memset(ring, 0, need);
	for (size_t it = begin; it < end; it++) {
		int64_t band = (int64_t)it % j->nband, rest = (int64_t)it / j->nband;
		int64_t blk = rest % j->nblk, n = rest / j->nblk, c0 = blk * 8;
		int64_t oh0 = band * j->band, oh1 = oh0 + j->band < g->out[0] ? oh0 + j->band : g->out[0];
		dw_chan8_block(j, j->x + (n * g->c + c0) * g->in_size, j->y + (n * g->c + c0) * g->out_size, c0, oh0, oh1,
			       ring, ring + (size_t)j->span * (size_t)j->wp * 8);
	}
	free(own);
}
#endif

/* ----------------------------------------------------------- dispatcher */

int oq_conv_depthwise(oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w, const float *b,
		      const oq_kfuse *ep, float *y)
{
	dw_job d;
	oq_range_fn fn = dw_pad_range;

#if defined(HAVE_X86_KERNELS)
	if (oq_conv_use_avx512() && oq_conv_dw_chan_fits(g)) {
		dw_chan_job dc;
		int64_t items;
		oq_conv_dw_chan_setup(&dc, k, g, x, w, b, ep, y);
		items = g->n * dc.nblk * dc.nband;
		oq_k_parallel(k, (size_t)items, 1, dw_chan_range, &dc);
		return atomic_load(&dc.oom) ? OQ_ENOMEM : OQ_OK;
	}
	if (oq_conv_use_avx512() && (g->stride[1] == 1 || g->stride[1] == 2) && g->k[0] * g->k[1] <= DW_MAX_TAPS)
		fn = dw_flat_fits(g) ? dw_flat_range : dw_rows_range;
	if (!oq_conv_use_avx512() && oq_conv_use_avx2() && dw_chan8_fits(g)) {
		dw_chan_job dc;
		int64_t items;
		oq_conv_dw_chan_setup(&dc, k, g, x, w, b, ep, y);
		dw_chan_cut(&dc, 8);
		items = g->n * dc.nblk * dc.nband;
		oq_k_parallel(k, (size_t)items, 1, dw_chan8_range, &dc);
		return atomic_load(&dc.oom) ? OQ_ENOMEM : OQ_OK;
	}
#endif
	memset(&d, 0, sizeof d);
	d.k = k;
	d.g = g;
	d.x = x;
	d.w = w;
	d.b = b;
	d.y = y;
	d.ep = ep;
	d.nblk = ceil_div(g->out[1], 16);
	d.ow4 = (g->out[1] + 3) / 4 * 4;
	d.hp = (g->out[0] - 1) * g->stride[0] + (g->k[0] - 1) * g->dil[0] + 1;
	/* + 2: the stride-2 loads read one float past the last tap */
	d.wp = (d.ow4 - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 3;
	atomic_init(&d.oom, 0);
	oq_k_parallel(k, (size_t)(g->n * g->c), 1, fn, &d);
	return atomic_load(&d.oom) ? OQ_ENOMEM : OQ_OK;
}
