/*
 * conv.c - convolution engines: Conv and ConvTranspose, fast and
 * reference, float32 and double.
 *
 * Conv (fast): per image and group, Y_g[Mg, P] = W_g[Mg, Kc] * col[Kc, P]
 * (Kc = C/group * prod(kernel), P = output positions), with one GEMM per
 * tile of output channels x output positions: float32 on an AVX-512 CPU
 * through gemm_pos (positions in the lanes: col packed into 32-column
 * panels, 12 weight rows broadcast) or gemm_chan (channels in the lanes: W
 * in 32-channel panels, 4-8 positions broadcast, the tile transposed
 * before its store; for small planes such as 7x7 and deep kernels), W
 * read from the panels the executor's plan packed it into (oq_packed_w_pack) or
 * in place; on an AVX2+FMA CPU through avx2_gemm, else cblas_?gemm. All
 * float32 paths form each output as init + sum_k w*x in k order with one
 * FMA per term: the same bits. 1x1 stride-1
 * unpadded convolutions use the input itself as col; others build the
 * im2col rows of their tile's positions into a per-thread buffer of at most
 * about 1 MiB (reused while consecutive tiles share positions). Depthwise
 * float convolutions (one input and one output channel per group) skip
 * GEMM: every output is b + sum of taps in kernel order, with separate
 * multiply and add. On AVX-512 CPUs 16 channels per vector (dw_chan_range:
 * input rows transposed once into channel vectors) when the channels fill
 * 16-channel blocks, else (horizontal stride 1 or 2, at most 25 taps) 16
 * outputs of 4 rows at a time read straight from the input with masked
 * loads at the edges; the epilogue runs on the registers; otherwise each
 * channel plane is copied into a zero-padded buffer (SSE, 4 outputs at a
 * time). All give the same bits.
 *
 * Fused epilogue (oq_conv_run_epilogue): a per-channel BN affine map and an
 * activation are applied to each GEMM tile (rows of mm channels x pp
 * positions) right after its sgemm, and to each depthwise output row before
 * it is stored, so the values are touched while still in cache instead of
 * by separate full passes over the tensor.
 *
 * ConvTranspose (fast): per image, col[Mg*K, Pin] = W_g^T X_g through the
 * batched GEMM, then col2im adds each column into the output planes, one
 * output channel per work item (so each output sum has a fixed order).
 *
 * Tile sizes depend only on the shape (never on the thread count), so
 * results are identical for any number of threads. The _ref versions are
 * plain direct loops accumulating in double.
 * Spec: https://onnx.ai/onnx/operators/onnx__Conv.html, onnx__ConvTranspose.html
 */
#include "calib/kernels/linalg/linalg.h"
#include "calib/exec/cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static int64_t round_up(int64_t v, int64_t q)
{
	return (v + q - 1) / q * q;
}

/* ------------------------------------------------------------ activation */

/* As elementwise.c's float Sigmoid: no overflow of exp for large |x|. */
static float sigmoid_f(float x)
{
	if (x >= 0)
		return 1 / (1 + expf(-x));
	float e = expf(x);
	return e / (1 + e);
}

/* Same float32 expressions as the element-wise kernels (elementwise.c un_f). */
void oq_act_apply(const oq_act *act, float *y, size_t n)
{
	float a, b;

	if (!act)
		return;
	a = act->a;
	b = act->b;
	switch (act->kind) {
	case OQ_ACT_RELU: {
		size_t i = 0;
#if defined(__SSE2__)
		/* maxps(p, q) is p > q ? p : q: max(0, x) == (x < 0 ? 0 : x), NaN and -0 kept */
		__m128 z = _mm_setzero_ps();
		for (; i + 4 <= n; i += 4)
			_mm_storeu_ps(y + i, _mm_max_ps(z, _mm_loadu_ps(y + i)));
#endif
		for (; i < n; i++)
			y[i] = y[i] < 0 ? 0 : y[i];
		break;
	}
	case OQ_ACT_CLIP: {
		size_t i = 0;
#if defined(__SSE2__)
		/* min(b, max(a, x)) == (x < a ? a : x > b ? b : x) bit for bit (see Relu) */
		__m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b);
		for (; i + 4 <= n; i += 4)
			_mm_storeu_ps(y + i, _mm_min_ps(vb, _mm_max_ps(va, _mm_loadu_ps(y + i))));
#endif
		for (; i < n; i++) {
			float x = y[i];
			y[i] = x < a ? a : x > b ? b : x;
		}
		if (a > b)
			for (i = 0; i < n; i++)
				y[i] = y[i] == y[i] ? b : y[i];
		break;
	}
	case OQ_ACT_LEAKY:
		for (size_t i = 0; i < n; i++)
			y[i] = y[i] < 0 ? a * y[i] : y[i];
		break;
	case OQ_ACT_HSIGMOID:
		for (size_t i = 0; i < n; i++)
			y[i] = fmaxf(0, fminf(1, a * y[i] + b));
		break;
	case OQ_ACT_HSWISH:
		for (size_t i = 0; i < n; i++) {
			float x = y[i];
			y[i] = x * fmaxf(0, fminf(1, x / 6 + 0.5f));
		}
		break;
	case OQ_ACT_SIGMOID:
		for (size_t i = 0; i < n; i++)
			y[i] = sigmoid_f(y[i]);
		break;
	default:
		break;
	}
}

/* y[i] = y[i] op v, or v op y[i] when rev (the operand order of the element-wise kernel). */
static void bop_scalar(int bop, int rev, float v, float *y, size_t n)
{
	switch (bop * 2 + !!rev) {
	case OQ_EPI_ADD * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] + v; break;
	case OQ_EPI_ADD * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = v + y[i]; break;
	case OQ_EPI_SUB * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] - v; break;
	case OQ_EPI_SUB * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = v - y[i]; break;
	case OQ_EPI_MUL * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] * v; break;
	case OQ_EPI_MUL * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = v * y[i]; break;
	case OQ_EPI_DIV * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] / v; break;
	case OQ_EPI_DIV * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = v / y[i]; break;
	default: break;
	}
}

/* y[i] = y[i] op t[i], or t[i] op y[i] when rev. */
static void bop_vec(int bop, int rev, const float *t, float *y, size_t n)
{
	switch (bop * 2 + !!rev) {
	case OQ_EPI_ADD * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] + t[i]; break;
	case OQ_EPI_ADD * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = t[i] + y[i]; break;
	case OQ_EPI_SUB * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] - t[i]; break;
	case OQ_EPI_SUB * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = t[i] - y[i]; break;
	case OQ_EPI_MUL * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] * t[i]; break;
	case OQ_EPI_MUL * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = t[i] * y[i]; break;
	case OQ_EPI_DIV * 2: for (size_t i = 0; i < n; i++) y[i] = y[i] / t[i]; break;
	case OQ_EPI_DIV * 2 + 1: for (size_t i = 0; i < n; i++) y[i] = t[i] / y[i]; break;
	default: break;
	}
}

#define GATE_CHUNK 256

/*
 * Steps [s, s + ns) of ep on y[0..n), the elements of channel ch starting at
 * element off of the output (where the tensor operands are read).
 */
static void epi_steps(const oq_kfuse *ep, const oq_epi_step *s, int ns, int64_t ch, size_t off, float *y, size_t n)
{
	for (int i = 0; i < ns; i++) {
		const oq_epi_step *st = &s[i];
		switch (st->kind) {
		case OQ_EPI_CONST:
			bop_scalar(st->bop, st->rev, st->c ? st->c[ch] : st->s, y, n);
			break;
		case OQ_EPI_TENSOR:
			bop_vec(st->bop, st->rev, ep->t[st->t] + off, y, n);
			break;
		case OQ_EPI_ACT:
			oq_act_apply(&st->act, y, n);
			break;
		case OQ_EPI_GATE:
			/* g(y) of a chunk in tmp, then y * g(y) (or g(y) * y, the Mul's operand order) */
			for (size_t c0 = 0; c0 < n; c0 += GATE_CHUNK) {
				float tmp[GATE_CHUNK];
				size_t m = n - c0 < GATE_CHUNK ? n - c0 : GATE_CHUNK;
				memcpy(tmp, y + c0, m * sizeof *tmp);
				epi_steps(ep, st + 1, st->n_gate, ch, off + c0, tmp, m);
				bop_vec(OQ_EPI_MUL, st->rev, tmp, y + c0, m);
			}
			i += st->n_gate;
			break;
		default:
			break;
		}
	}
}

#if defined(__GNUC__) && defined(__x86_64__)
static int use_avx512(void);
static void epi_apply_avx512(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n);
#endif

void oq_epi_apply(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n)
{
	if (!ep)
		return;
#if defined(__GNUC__) && defined(__x86_64__)
	if (use_avx512()) {
		epi_apply_avx512(ep, ch, off, y, n);
		return;
	}
#endif
	if (ep->scale) { /* as the BatchNormalization kernel: x * a + b in double, rounded once */
		double a = ep->scale[ch], b = ep->shift[ch];
		size_t i = 0;
#if defined(__SSE2__)
		__m128d va = _mm_set1_pd(a), vb = _mm_set1_pd(b);
		for (; i + 4 <= n; i += 4) {
			__m128 x = _mm_loadu_ps(y + i);
			__m128d lo = _mm_add_pd(_mm_mul_pd(_mm_cvtps_pd(x), va), vb);
			__m128d hi = _mm_add_pd(_mm_mul_pd(_mm_cvtps_pd(_mm_movehl_ps(x, x)), va), vb);
			_mm_storeu_ps(y + i, _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi)));
		}
#endif
		for (; i < n; i++)
			y[i] = (float)(y[i] * a + b);
	}
	oq_act_apply(&ep->act, y, n);
	epi_steps(ep, ep->steps, ep->n_steps, ch, off, y, n);
}

/* 1-D problems run as 2-D ones with a unit leading spatial dim. */
static void as_2d(const oq_conv_geom *g, oq_conv_geom *o)
{
	*o = *g;
	if (g->nsp != 1)
		return;
	o->nsp = 2;
	o->in[0] = o->out[0] = o->k[0] = o->stride[0] = o->dil[0] = 1;
	o->pad[0] = 0;
	o->in[1] = g->in[0];
	o->out[1] = g->out[0];
	o->k[1] = g->k[0];
	o->stride[1] = g->stride[0];
	o->dil[1] = g->dil[0];
	o->pad[1] = g->pad[0];
}

/* ----------------------------------------------------------------- im2col */

/*
 * Rows [r0, r0 + nr) of col (stored from col's row 0) for output positions
 * [p0, p0 + pp) of one image and group (x points at the group's first
 * channel); row r = (c, kernel
 * offset), kernel offsets in row-major order, as W stores them.
 */
#define IM2COL_2D(T, NAME)                                                                              \
	static void NAME(const oq_conv_geom *g, const T *x, int64_t r0, int64_t nr, int64_t p0, int64_t pp, \
			 T *col)                                                                        \
	{                                                                                               \
		int64_t H = g->in[0], W = g->in[1], OW = g->out[1], kh = g->k[0], kw = g->k[1];         \
		int64_t sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1];           \
		for (int64_t r = r0; r < r0 + nr; r++) {                                                \
			int64_t c = r / (kh * kw), i = (r / kw) % kh, j = r % kw;                       \
			const T *xc = x + c * H * W;                                                    \
			T *dst = col + (r - r0) * pp;                                                   \
			int64_t p = p0, oh = p0 / OW, ow = p0 % OW, off = j * dw - g->pad[1];           \
			int64_t lo = off >= 0 ? 0 : ceil_div(-off, sw);                                 \
			int64_t hi = W - 1 - off >= 0 ? (W - 1 - off) / sw + 1 : 0;                     \
			if (hi > OW)                                                                    \
				hi = OW;                                                                \
			if (lo > hi)                                                                    \
				lo = hi;                                                                \
			while (p < p0 + pp) {                                                           \
				int64_t seg = OW - ow < p0 + pp - p ? OW - ow : p0 + pp - p;            \
				int64_t ih = oh * sh - g->pad[0] + i * dh, e = ow + seg;                \
				if (ih < 0 || ih >= H) {                                                \
					memset(dst, 0, (size_t)seg * sizeof(T));                        \
				} else {                                                                \
					const T *row = xc + ih * W + off;                               \
					int64_t a = lo > ow ? lo : ow, b = hi < e ? hi : e, q;          \
					if (a > b)                                                      \
						a = b = e;                                              \
					for (q = ow; q < a; q++)                                        \
						dst[q - ow] = 0;                                        \
					if (sw == 1)                                                    \
						memcpy(dst + (a - ow), row + a, (size_t)(b - a) * sizeof(T)); \
					else                                                            \
						for (q = a; q < b; q++)                                 \
							dst[q - ow] = row[q * sw];                      \
					for (q = b; q < e; q++)                                         \
						dst[q - ow] = 0;                                        \
				}                                                                       \
				dst += seg;                                                             \
				p += seg;                                                               \
				oh++;                                                                   \
				ow = 0;                                                                 \
			}                                                                               \
		}                                                                                       \
	}

IM2COL_2D(float, im2col_2d_f)
IM2COL_2D(double, im2col_2d_d)

/* Any rank: one element at a time. */
#define IM2COL_ND(T, NAME)                                                                              \
	static void NAME(const oq_conv_geom *g, const T *x, int64_t r0, int64_t nr, int64_t p0, int64_t pp, \
			 T *col)                                                                        \
	{                                                                                               \
		for (int64_t r = r0; r < r0 + nr; r++) {                                                \
			int64_t c = r / g->k_size, kk = r % g->k_size, koff[OQ_CONV_MAX_SP];            \
			for (int d = g->nsp - 1; d >= 0; d--) {                                         \
				koff[d] = kk % g->k[d];                                                 \
				kk /= g->k[d];                                                          \
			}                                                                               \
			for (int64_t q = 0; q < pp; q++) {                                              \
				int64_t rem = p0 + q, idx = 0, ok = 1;                                  \
				int64_t pos[OQ_CONV_MAX_SP];                                            \
				for (int d = g->nsp - 1; d >= 0; d--) {                                 \
					pos[d] = rem % g->out[d];                                       \
					rem /= g->out[d];                                               \
				}                                                                       \
				for (int d = 0; d < g->nsp; d++) {                                      \
					int64_t ii = pos[d] * g->stride[d] + koff[d] * g->dil[d] - g->pad[d]; \
					if (ii < 0 || ii >= g->in[d])                                   \
						ok = 0;                                                 \
					idx = idx * g->in[d] + ii;                                      \
				}                                                                       \
				col[(r - r0) * pp + q] = ok ? x[c * g->in_size + idx] : (T)0;                  \
			}                                                                               \
		}                                                                                       \
	}

IM2COL_ND(float, im2col_nd_f)
IM2COL_ND(double, im2col_nd_d)

/* ---------------------------------------------------------- depthwise f32 */

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

typedef struct dw_pad_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	const oq_conv_geom *g;
	const float *x, *w, *b;
	float *y;
	const oq_kfuse *ep;    /* fused epilogue, or NULL */
	int64_t ow4;           /* output width rounded up to a multiple of 4 */
	int64_t hp, wp;        /* padded plane: enough for ow4 outputs per row */
	atomic_int oom;
} dw_pad_job;

static void dw_pad_range(void *ctx, size_t begin, size_t end)
{
	dw_pad_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
	int64_t kh = g->k[0], kw = g->k[1], sh = g->stride[0], sw = g->stride[1], dw = g->dil[1];
	size_t nbuf = (size_t)(j->hp * j->wp + 16);
	float *own = j->k ? NULL : malloc((nbuf + (size_t)j->ow4) * sizeof *own);
	float *buf = j->k ? oq_k_scratch(j->k, (nbuf + (size_t)j->ow4) * sizeof *buf) : own, *row;

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
			int64_t rs = g->dil[0] * j->wp;
			if (kh == 3 && kw == 3)
				dw_pad_row(row, j->ow4, x0, rs, sw, dw, wc, 3, 3, b);
			else if (kh == 5 && kw == 5)
				dw_pad_row(row, j->ow4, x0, rs, sw, dw, wc, 5, 5, b);
			else
				dw_pad_row(row, j->ow4, x0, rs, sw, dw, wc, kh, kw, b);
			oq_epi_apply(j->ep, ch, (size_t)(yc + oh * OW - j->y), row, (size_t)OW);
			memcpy(yc + oh * OW, row, (size_t)OW * sizeof *row);
		}
	}
	free(own);
}

/* ------------------------------------------------ AVX2 conv GEMM (float) */

/*
 * Y[mm, pp] = init + W[mm, kc] * col[kc, pp] for one conv tile, without
 * packing: W rows are read in place (6 at a time, one broadcast each per k)
 * and col rows 16 floats at a time, so neither operand is copied (OpenBLAS
 * packs both on every call: about a fifth of ResNet-50's time). Blocking:
 * KC = 256 deep slices; per slice a 16-column panel of col (16 KiB, stays
 * in L1) meets MC = 96 rows of W (96 KiB, L2). Every output is
 * init + sum_k w*x formed in k order with one FMA per term; the partial sums
 * between slices go through C as float32 (exact), so the result does not
 * depend on the blocking or on which thread runs the tile. Edges: rows past
 * mm reuse row 0 and are not stored; columns past pp use masked loads and
 * stores (nothing outside the arrays is touched).
 */
int oq_linalg_use_blas = 0;

#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_X86_KERNELS 1
#define AVX2_FMA __attribute__((target("avx2,fma")))

#define KC_DEPTH 256
#define MC_ROWS 96

/*
 * C[mr, nr] (ldc) = (load ? C : 0) + A[mr, kd] (rows lda apart) * B[kd, nr] (rows ldb apart),
 * mr <= 6, nr <= 16 (masked loads and stores below 16).
 */
AVX2_FMA static inline void avx2_tile_6x16(int64_t kd, const float *a, int64_t lda, int mr, const float *b, int64_t ldb,
				   float *c, int64_t ldc, int load, int nr)
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
			x0 = x1 = _mm256_setzero_ps();                                            \
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
		const float *bk = b + k * ldb;                                             \
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
	if (nr == 16) {
		KLOOP(LOADU)
	} else {
		KLOOP(LOADM)
	}
#undef KLOOP
#undef FMA2
#undef LOADU
#undef LOADM
#define ST(r, x0, x1)                                                          \
	do {                                                                   \
		if (mr > (r)) {                                                \
			if (nr < 16) {                                         \
				_mm256_maskstore_ps(c + (r) * ldc, m0, x0);     \
				_mm256_maskstore_ps(c + (r) * ldc + 8, m1, x1); \
			} else {                                               \
				_mm256_storeu_ps(c + (r) * ldc, x0);           \
				_mm256_storeu_ps(c + (r) * ldc + 8, x1);       \
			}                                                      \
		}                                                              \
	} while (0)
	ST(0, c00, c01);
	ST(1, c10, c11);
	ST(2, c20, c21);
	ST(3, c30, c31);
	ST(4, c40, c41);
	ST(5, c50, c51);
#undef ST
}

/* C[mm, pp] (ldc) = (has_init ? C : 0) + A[mm, kd] (lda) * B[kd, pp] (ldb). */
AVX2_FMA static void avx2_gemm(int64_t mm, int64_t pp, int64_t kd, const float *a, int64_t lda, const float *b,
			      int64_t ldb, float *c, int64_t ldc, int has_init)
{
	int64_t k0 = 0;
	do {
		int64_t kb = kd - k0 < KC_DEPTH ? kd - k0 : KC_DEPTH;
		int load = k0 > 0 || has_init;
		for (int64_t mb = 0; mb < mm; mb += MC_ROWS) {
			int64_t me = mb + MC_ROWS < mm ? mb + MC_ROWS : mm;
			for (int64_t p = 0; p < pp; p += 16) {
				int nr = pp - p < 16 ? (int)(pp - p) : 16;
				for (int64_t m = mb; m < me; m += 6)
					avx2_tile_6x16(kb, a + m * lda + k0, lda, me - m < 6 ? (int)(me - m) : 6, b + k0 * ldb + p, ldb,
					      c + m * ldc + p, ldc, load, nr);
			}
		}
		k0 += kb;
	} while (k0 < kd);
}

static int use_avx2(void)
{
	return oq_cpu_avx2_fma() && !oq_linalg_use_blas;
}

/* -------------------------------------------- AVX-512 conv GEMM (float) */

/*
 * The same product on AVX-512F CPUs: a 12 x 32 register tile (24 zmm
 * accumulators), W read in place (12 rows, one broadcast each per k, so no
 * copy of the weights is made or kept) and col in 32-column panels
 * [kc][32] (zero past pp), written once per tile by pack_col straight
 * from the input or from each im2col row, so every B load is contiguous
 * and aligned. Blocking as in avx2_gemm: KC_DEPTH slices (a B panel slice,
 * 32 KiB, stays in L1) times MC_ROWS rows of W (L2). Each output is still
 * init + sum_k w*x in k order with one FMA per term (float partial sums
 * through C between slices), so the bits equal the AVX2 kernel's and do not
 * depend on the blocking or on the thread.
 */
#define TILE_MR 12
#define TILE_NR 32
#define AVX512 __attribute__((target("avx512f,fma")))

int oq_linalg_no_avx512 = 0;
int oq_linalg_dw_rows = 0;
int oq_linalg_no_in_place = 0;
_Atomic size_t oq_linalg_in_place_runs = 0;

/*
 * The fused epilogue applied by the register tiles before their last store
 * (e: NULL when none) when it is BN, Relu / Clip (not late_act) and at most
 * a residual Add and Relu: per row r of the tile the BN affine in double
 * (scale / shift from the tile's first row, or NULL), the activation, then
 * + t and Relu - the expressions of epi_regs_vec and epi_steps_avx512, so the bits of the
 * separate pass.
 */
typedef struct tile_epi {
	const double *scale, *shift;
	int act;               /* OQ_ACT_NONE, OQ_ACT_RELU or OQ_ACT_CLIP */
	float lo, hi;
	int res;               /* 0; 1: + t (a residual Add); 2: + t, then Relu (res_steps) */
	int64_t ldc;           /* row stride of the output and of t */
	const float *t;        /* the residual at the tile's first element */
} tile_epi;

/*
 * Steps that are a residual Add (either operand order: float addition is
 * commutative bit for bit) and optionally a Relu: 1 or 2 (tile_epi.res), else 0.
 * The other steps run in a pass over the stored tile (epi_tile_avx512).
 */
static int res_steps(const oq_kfuse *ep)
{
	const oq_epi_step *s = ep->steps;
	if (ep->n_steps < 1 || ep->n_steps > 2 || s[0].kind != OQ_EPI_TENSOR || s[0].bop != OQ_EPI_ADD)
		return 0;
	if (ep->n_steps == 1)
		return 1;
	return s[1].kind == OQ_EPI_ACT && s[1].act.kind == OQ_ACT_RELU ? 2 : 0;
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
 * C[mr, nr] (ldc) = init + A[mr, kd] (row r at ar[r], k-stride ks: 1 in place,
 * OQ_PACKED_W_NR in packed panels) * Bp[kd][32]; init: C
 * when load, else bias[r] (bias NULL: 0); then the epilogue e (NULL: none).
 * Rows past mr read row 0 and, like columns past nr, are not stored.
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

/*
 * The same product on narrower register tiles, for the tails of a block:
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
		__mmask16 mk[2];                                                                        \
		mk[0] = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);                                \
		mk[1] = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);         \
		for (int r = 0; r < R; r++) {                                                           \
			ar[r] = mr > r ? ar0[r] : ar0[0];                                               \
			for (int v = 0; v < NV; v++)                                                    \
				acc[r][v] = load && mr > r ? _mm512_maskz_loadu_ps(mk[v], c + r * ldc + 16 * v) \
					: _mm512_set1_ps(!load && bias && mr > r ? bias[r] : 0.0f);   \
		}                                                                                       \
		for (int64_t k = 0, o = 0; k < kd; k++, o += ks) {                                      \
			__m512 b[NV];                                                                   \
			for (int v = 0; v < NV; v++)                                                    \
				b[v] = BLOAD;                                                           \
			for (int r = 0; r < R; r++) {                                                   \
				__m512 t = _mm512_set1_ps(ar[r][o]);                                    \
				for (int v = 0; v < NV; v++)                                            \
					acc[r][v] = _mm512_fmadd_ps(t, b[v], acc[r][v]);                \
			}                                                                               \
			BSTEP;                                                                          \
		}                                                                                       \
		for (int r = 0; r < R && r < mr; r++)                                                   \
			for (int v = 0; v < NV; v++)                                                    \
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
#undef DEFINE_POS_TILE

/* Floats of the packed col of a tile of pt positions: [ceil(pt / 32)][kc][32]. */
static size_t packed_col_floats(int64_t kc, int64_t pt)
{
	return (size_t)(kc * ((pt + TILE_NR - 1) / TILE_NR * TILE_NR));
}

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

static __mmask16 lane_mask(int64_t i0, int64_t n);

#define IM2COL_PACKED_MAX_KW 16      /* widest kernel im2col_packed takes */

/* im2col_packed takes g: 2-D, horizontal stride 1 or 2, kernel width at most IM2COL_PACKED_MAX_KW. */
static int im2col_packed_fits(const oq_conv_geom *g)
{
	return g->nsp == 2 && (g->stride[1] == 1 || g->stride[1] == 2) && g->k[1] <= IM2COL_PACKED_MAX_KW;
}
#define IM2COL_PIECES (TILE_NR + 3) /* 16-lane pieces of one panel's runs, at most */

/*
 * Rows of input channels [c0, c1) of the 2-D im2col matrix (as im2col_2d_f)
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
static void pack_col(const oq_conv_geom *g, const float *x, int64_t ldx, int direct, int64_t r0, int64_t r1,
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
		if (g->nsp == 2)
			im2col_2d_f(g, x, r, 1, p0, pp, row);
		else
			im2col_nd_f(g, x, r, 1, p0, pp, row);
		pack_col_row(row, pp, r, kc, bp);
	}
}

/*
 * The conv GEMM's A (the weights of a tile's channels): rows in place, lda
 * apart with k-stride 1, or packed panels (pstride > 0: row m in panel
 * m / OQ_PACKED_W_NR, pstride floats apart, at lane m % OQ_PACKED_W_NR, k-stride
 * OQ_PACKED_W_NR; row 0 starts a panel). Register tiles take a pointer per row,
 * so a 12-row tile may straddle two panels.
 */
typedef struct tile_a {
	const float *a;
	int64_t lda, pstride;
} tile_a;

static inline const float *tile_a_row(const tile_a *A, int64_t m)
{
	return A->pstride ? A->a + m / OQ_PACKED_W_NR * A->pstride + m % OQ_PACKED_W_NR : A->a + m * A->lda;
}

/*
 * Depth slices of the packed col up to this many bytes go through gemm_pos
 * one register tile of rows at a time (every panel for rows m..m+11, then
 * the next 12) instead of every MC_ROWS block per panel: the slice stays
 * in L2 between row tiles, and C is written in 12 long runs instead of up
 * to 96 short ones. That matters when C is not in cache (calibration, where
 * every Conv output is stored and observed, and the 1x1 16 -> 96 layer of
 * mobilenet_v2 writes 4.8 MB): measured with a cold C, 16 -> 96 at 112x112
 * 1.13 -> 0.63 ms, 3 -> 32 3x3/2 at 224x224 0.52 -> 0.34 ms, deep layers
 * unchanged. Each output is the same sum in the same order either way.
 */
#define ROWWISE_BYTES (256 * 1024)

/*
 * C[mm, pp] (ldc) = init + A[mm, kd] * B, init = bias[row] (NULL: 0), then
 * the epilogue e (rows from C's first; NULL: none) with the last depth
 * slice. B: the packed col bp of kd rows, or (bp NULL) rows br[k] read in
 * place, positions 0..pp of each, every row readable 32 floats past pp
 * (the in-place tiles; see conv_in_place).
 */
AVX512 static void gemm_pos(int64_t mm, int64_t pp, int64_t kd, const tile_a *A, const float *bp, const float *const *br,
			  float *c, int64_t ldc, const float *bias, const tile_epi *e)
{
	int64_t k0 = 0, ks = A->pstride ? OQ_PACKED_W_NR : 1;

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

/*
 * The product with the channels in the lanes, for tiles where the
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
#define DEFINE_CHAN_TILE(R, NV, NAME)                                                                           \
	AVX512 static void NAME(int64_t kd, const float *const *ar, int64_t ks, const float *wp, float *c, \
				int64_t ldc, int rr, int nch, const float *bias, const tile_epi *e)           \
	{                                                                                              \
		const float *a[R];                                                                     \
		__m512 acc[R][NV], init[NV];                                                           \
		__mmask16 pm = (__mmask16)((1u << rr) - 1u);                                           \
		for (int v = 0; v < NV; v++)                                                           \
			init[v] = bias ? _mm512_maskz_loadu_ps(lane_mask(16 * v, nch), bias + 16 * v)     \
				       : _mm512_setzero_ps();                                          \
		for (int r = 0; r < R; r++) {                                                          \
			a[r] = ar[r < rr ? r : 0];                                                     \
			for (int v = 0; v < NV; v++)                                                   \
				acc[r][v] = init[v];                                                   \
		}                                                                                      \
		for (int64_t k = 0, o = 0; k < kd; k++, o += ks, wp += OQ_PACKED_W_NR) {                     \
			__m512 w[NV];                                                                  \
			for (int v = 0; v < NV; v++)                                                   \
				w[v] = _mm512_load_ps(wp + 16 * v);                                    \
			for (int r = 0; r < R; r++) {                                                  \
				__m512 t = _mm512_set1_ps(a[r][o]);                                    \
				for (int v = 0; v < NV; v++)                                           \
					acc[r][v] = _mm512_fmadd_ps(t, w[v], acc[r][v]);               \
			}                                                                              \
		}                                                                                      \
		for (int v = 0; v < NV; v++) {                                                         \
			__m512 x[16];                                                                  \
			int nl = nch - 16 * v < 16 ? nch - 16 * v : 16;                                \
			for (int q = 0; q < 16; q++)                                                   \
				x[q] = q < R ? acc[q < R ? q : 0][v] : _mm512_setzero_ps();            \
			transpose16x16(x);                                                                    \
			for (int l = 0; l < nl; l++)                                                   \
				_mm512_mask_storeu_ps(c + (16 * v + l) * ldc, pm,                      \
						      e ? tile_epi_vec(e, 16 * v + l, 0, pm, x[l]) : x[l]);     \
		}                                                                                      \
	}
DEFINE_CHAN_TILE(4, 2, chan_tile_4x32)
DEFINE_CHAN_TILE(5, 2, chan_tile_5x32)
DEFINE_CHAN_TILE(6, 2, chan_tile_6x32)
DEFINE_CHAN_TILE(7, 2, chan_tile_7x32)
DEFINE_CHAN_TILE(8, 2, chan_tile_8x32)
DEFINE_CHAN_TILE(4, 1, chan_tile_4x16)
DEFINE_CHAN_TILE(5, 1, chan_tile_5x16)
DEFINE_CHAN_TILE(6, 1, chan_tile_6x16)
DEFINE_CHAN_TILE(7, 1, chan_tile_7x16)
DEFINE_CHAN_TILE(8, 1, chan_tile_8x16)
#undef DEFINE_CHAN_TILE

typedef void (*chan_tile_fn)(int64_t kd, const float *const *ar, int64_t ks, const float *wp, float *c, int64_t ldc, int rr,
		      int nch, const float *bias, const tile_epi *e);

/*
 * C[mm channels, pp positions] (ldc) = init + the packed panels wp (mm
 * channels from a panel start, pstride floats apart) x the positions'
 * rows (row(q) = pos[0] + q for a 1x1 input in place, k-stride ks;
 * pos NULL: the packed col bp, k-stride OQ_PACKED_W_NR), panel by panel, the
 * positions cut into tiles of 4 to 8 as evenly as possible (49 = 7 x 7,
 * 196 = 21 x 8 + 4 x 7); e: the register epilogue (rows = channels from C's first).
 */
AVX512 static void gemm_chan(int64_t mm, int64_t pp, int64_t kd, const float *wp, int64_t pstride, const float *x,
			   int64_t ks, const float *bp, float *c, int64_t ldc, const float *bias, const tile_epi *e)
{
	static const chan_tile_fn f2[9] = {chan_tile_4x32, chan_tile_4x32, chan_tile_4x32, chan_tile_4x32, chan_tile_4x32, chan_tile_5x32, chan_tile_6x32, chan_tile_7x32, chan_tile_8x32};
	static const chan_tile_fn f1[9] = {chan_tile_4x16, chan_tile_4x16, chan_tile_4x16, chan_tile_4x16, chan_tile_4x16, chan_tile_5x16, chan_tile_6x16, chan_tile_7x16, chan_tile_8x16};
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
			(nch > 16 ? f2 : f1)[rr](kd, ar, bp ? TILE_NR : ks, wp, c + pc * ldc + q, ldc, rr, nch,
						 bias ? bias + pc : NULL, ep);
			q += rr;
		}
	}
}

static int use_avx512(void)
{
	return oq_cpu_avx512_fma() && !oq_linalg_no_avx512 && !oq_linalg_use_blas;
}

/* ---------------------------------------- AVX-512 depthwise conv (float) */

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
#define DW_MAX_TAPS 25 /* taps of the largest kernel (kh * kw) it takes */

typedef struct dw_rows_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	const oq_conv_geom *g;
	const float *x, *w, *b;
	float *y;
	const oq_kfuse *ep;    /* fused epilogue, or NULL */
	int64_t nblk;          /* 16-output blocks per row */
	atomic_int oom;
} dw_rows_job;

/* Lanes l of 16 with 0 <= i0 + l < n. */
static __mmask16 lane_mask(int64_t i0, int64_t n)
{
	int64_t lo = i0 < 0 ? -i0 : 0, hi = n - i0;
	if (hi > 16)
		hi = 16;
	if (lo >= hi)
		return 0;
	return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
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
	int steps;             /* ep's steps run on the registers too (reg_steps) */
	int64_t ch;            /* the output channel (per-channel constants of the steps) */
} epi_regs;

/* Activations oq_act_apply must run on the stored values (NaN and ordering rules of fmaxf / expf). */
static int late_act(const oq_kfuse *ep)
{
	return ep && ep->act.kind != OQ_ACT_NONE && ep->act.kind != OQ_ACT_RELU &&
	       !(ep->act.kind == OQ_ACT_CLIP && ep->act.a <= ep->act.b);
}

/* ep's steps can run on the registers: binary ops, Relu, Clip with lo <= hi, gates of those. */
static int reg_steps(const oq_kfuse *ep)
{
	for (int i = 0; ep && i < ep->n_steps; i++) {
		const oq_act *a = &ep->steps[i].act;
		if (ep->steps[i].kind == OQ_EPI_ACT && a->kind != OQ_ACT_RELU && !(a->kind == OQ_ACT_CLIP && a->a <= a->b))
			return 0;
	}
	return 1;
}

/* The part of ep done in registers for channel ch (late: the activation and the steps are left to the caller). */
AVX512 static inline void epi_regs_make(const oq_kfuse *ep, int64_t ch, int late, epi_regs *ev)
{
	ev->bn = ep && ep->scale;
	ev->act = ep && !late ? ep->act.kind : OQ_ACT_NONE;
	ev->a_lo = ev->a_hi = _mm512_set1_pd(ev->bn ? ep->scale[ch] : 0);
	ev->b_lo = ev->b_hi = _mm512_set1_pd(ev->bn ? ep->shift[ch] : 0);
	ev->lo = _mm512_set1_ps(ep ? ep->act.a : 0);
	ev->hi = _mm512_set1_ps(ep ? ep->act.b : 0);
	ev->ep = ep;
	ev->steps = ep && ep->n_steps && !late && reg_steps(ep);
	ev->ch = ch;
}


#define EPI_VECS 8 /* vectors per block of epi_steps_avx512 */

/*
 * Steps [i0, i0 + ns) of ev->ep on EPI_VECS vectors v (128 values from output
 * element o; lanes m[q] of vector q valid), step by step over the block so
 * the dispatch is paid once per 128 values: the expressions of epi_steps,
 * so the same bits. Relu is maxps(0, x) (x < 0 ? 0 : x, NaN and -0 kept),
 * Clip minps(hi, maxps(lo, x)).
 */
AVX512 static void epi_steps_avx512(const epi_regs *ev, int i0, int ns, size_t o, const __mmask16 *m, __m512 *v)
{
	const oq_epi_step *s = ev->ep->steps;
#define EACH_VEC(EXPR)                          \
	for (int q = 0; q < EPI_VECS; q++)         \
		v[q] = (EXPR);               \
	break
	for (int i = i0; i < i0 + ns; i++) {
		const float *t = s[i].kind == OQ_EPI_TENSOR ? ev->ep->t[s[i].t] + o : NULL;
		__m512 c = _mm512_set1_ps(s[i].kind == OQ_EPI_ACT ? s[i].act.a : s[i].c ? s[i].c[ev->ch] : s[i].s);
		__m512 hi = _mm512_set1_ps(s[i].act.b), z = _mm512_setzero_ps();
		switch (s[i].kind == OQ_EPI_CONST ? s[i].bop * 2 + s[i].rev
			: s[i].kind == OQ_EPI_TENSOR ? 8 + s[i].bop * 2 + s[i].rev
			: s[i].kind == OQ_EPI_ACT ? 16 + (s[i].act.kind == OQ_ACT_RELU)
			: 18) {
		case OQ_EPI_ADD * 2: EACH_VEC(_mm512_add_ps(v[q], c));
		case OQ_EPI_ADD * 2 + 1: EACH_VEC(_mm512_add_ps(c, v[q]));
		case OQ_EPI_SUB * 2: EACH_VEC(_mm512_sub_ps(v[q], c));
		case OQ_EPI_SUB * 2 + 1: EACH_VEC(_mm512_sub_ps(c, v[q]));
		case OQ_EPI_MUL * 2: EACH_VEC(_mm512_mul_ps(v[q], c));
		case OQ_EPI_MUL * 2 + 1: EACH_VEC(_mm512_mul_ps(c, v[q]));
		case OQ_EPI_DIV * 2: EACH_VEC(_mm512_div_ps(v[q], c));
		case OQ_EPI_DIV * 2 + 1: EACH_VEC(_mm512_div_ps(c, v[q]));
		case 8 + OQ_EPI_ADD * 2: EACH_VEC(_mm512_add_ps(v[q], _mm512_maskz_loadu_ps(m[q], t + 16 * q)));
		case 8 + OQ_EPI_ADD * 2 + 1: EACH_VEC(_mm512_add_ps(_mm512_maskz_loadu_ps(m[q], t + 16 * q), v[q]));
		case 8 + OQ_EPI_SUB * 2: EACH_VEC(_mm512_sub_ps(v[q], _mm512_maskz_loadu_ps(m[q], t + 16 * q)));
		case 8 + OQ_EPI_SUB * 2 + 1: EACH_VEC(_mm512_sub_ps(_mm512_maskz_loadu_ps(m[q], t + 16 * q), v[q]));
		case 8 + OQ_EPI_MUL * 2: EACH_VEC(_mm512_mul_ps(v[q], _mm512_maskz_loadu_ps(m[q], t + 16 * q)));
		case 8 + OQ_EPI_MUL * 2 + 1: EACH_VEC(_mm512_mul_ps(_mm512_maskz_loadu_ps(m[q], t + 16 * q), v[q]));
		case 8 + OQ_EPI_DIV * 2: EACH_VEC(_mm512_div_ps(v[q], _mm512_maskz_loadu_ps(m[q], t + 16 * q)));
		case 8 + OQ_EPI_DIV * 2 + 1: EACH_VEC(_mm512_div_ps(_mm512_maskz_loadu_ps(m[q], t + 16 * q), v[q]));
		case 16: EACH_VEC(_mm512_min_ps(hi, _mm512_max_ps(c, v[q]))); /* Clip */
		case 17: EACH_VEC(_mm512_max_ps(z, v[q]));                    /* Relu */
		default: { /* GATE */
			__m512 g[EPI_VECS];
			for (int q = 0; q < EPI_VECS; q++)
				g[q] = v[q];
			epi_steps_avx512(ev, i + 1, s[i].n_gate, o, m, g);
			if (s[i].rev)
				for (int q = 0; q < EPI_VECS; q++)
					v[q] = _mm512_mul_ps(g[q], v[q]);
			else
				for (int q = 0; q < EPI_VECS; q++)
					v[q] = _mm512_mul_ps(v[q], g[q]);
			i += s[i].n_gate;
			break;
		}
		}
	}
#undef EACH_VEC
}

/* The epilogue on one vector: BN as the BatchNormalization kernel, then Relu / Clip (not the steps). */
AVX512 static inline __m512 epi_regs_vec(__m512 v, const epi_regs *ev)
{
	if (ev->bn)
		v = bn_vec(v, ev->a_lo, ev->a_hi, ev->b_lo, ev->b_hi);
	return act_vec(v, ev->act, ev->lo, ev->hi);
}

/*
 * y[0..n) (output element off on): BN and Relu / Clip when epi, then the
 * steps when ev->steps, EPI_VECS vectors at a time.
 */
AVX512 static void epi_row_avx512(const epi_regs *ev, int epi, size_t off, float *y, size_t n)
{
	for (size_t i = 0; i < n; i += 16 * EPI_VECS) {
		__m512 v[EPI_VECS];
		__mmask16 m[EPI_VECS];
		for (int q = 0; q < EPI_VECS; q++) {
			size_t at = i + 16 * (size_t)q;
			m[q] = at >= n ? 0 : n - at >= 16 ? 0xffff : (__mmask16)((1u << (n - at)) - 1u);
			v[q] = _mm512_maskz_loadu_ps(m[q], y + at);
			if (epi)
				v[q] = epi_regs_vec(v[q], ev);
		}
		if (ev->steps)
			epi_steps_avx512(ev, 0, ev->ep->n_steps, off + i, m, v);
		for (int q = 0; q < EPI_VECS; q++)
			_mm512_mask_storeu_ps(y + i + 16 * (size_t)q, m[q], v[q]);
	}
}

/* oq_epi_apply on AVX-512F: the same bits. */
AVX512 static void epi_apply_avx512(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n)
{
	int late = late_act(ep);
	epi_regs ev;

	epi_regs_make(ep, ch, late, &ev);
	if (ev.steps)
		epi_row_avx512(&ev, 1, off, y, n);
	else if (ev.bn || ev.act != OQ_ACT_NONE)
		for (size_t i = 0; i < n; i += 16) {
			__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1u);
			_mm512_mask_storeu_ps(y + i, m, epi_regs_vec(_mm512_maskz_loadu_ps(m, y + i), &ev));
		}
	if (late)
		oq_act_apply(&ep->act, y, n);
	if (!ev.steps)
		epi_steps(ep, ep->steps, ep->n_steps, ch, off, y, n);
}

/*
 * The epilogue of a GEMM tile: rows of channels ch0 .. ch0 + mm - 1, pp
 * values each, ldc apart, the first at output element off: epi_apply_avx512 row
 * by row, with the BN / Relu / Clip loop inlined for the usual case
 * without steps (no per-row setup beyond two broadcasts).
 */
AVX512 static void epi_tile_avx512(const oq_kfuse *ep, int64_t ch0, int64_t mm, size_t off, float *y, int64_t ldc,
			      int64_t pp)
{
	int bn = ep->scale != NULL, act = ep->act.kind;

	if (ep->n_steps || late_act(ep)) {
		for (int64_t r = 0; r < mm; r++)
			epi_apply_avx512(ep, ch0 + r, off + (size_t)(r * ldc), y + r * ldc, (size_t)pp);
		return;
	}
	if (!bn && act == OQ_ACT_NONE)
		return;
	for (int64_t r = 0; r < mm; r++) {
		__m512d a = _mm512_set1_pd(bn ? ep->scale[ch0 + r] : 0), b = _mm512_set1_pd(bn ? ep->shift[ch0 + r] : 0);
		__m512 lo = _mm512_set1_ps(ep->act.a), hi = _mm512_set1_ps(ep->act.b);
		float *yr = y + r * ldc;
		for (int64_t i = 0; i < pp; i += 16) {
			__mmask16 m = pp - i >= 16 ? 0xffff : (__mmask16)((1u << (pp - i)) - 1u);
			__m512 v = _mm512_maskz_loadu_ps(m, yr + i);
			if (bn)
				v = bn_vec(v, a, a, b, b);
			_mm512_mask_storeu_ps(yr + i, m, act_vec(v, act, lo, hi));
		}
	}
}

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

AVX512 static inline void dw_rows_block(const dw_rows_job *j, const epi_regs *ev, const float *xc, float *yc, int64_t oh0,
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
AVX512 static inline void dw_rows_plane(const dw_rows_job *j, const epi_regs *ev, const float *xc, float *yc,
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
	dw_rows_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t W = g->in[1], OH = g->out[0], OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->stride[1];
	size_t nm = (size_t)(j->nblk * kw * sw), need = nm * sizeof(__mmask16) + (size_t)j->nblk;
	void *own = j->k ? NULL : malloc(need), *buf = j->k ? oq_k_scratch(j->k, need) : own;
	__mmask16 *cm = buf;
	unsigned char *full = (unsigned char *)(cm + nm);
	int late = late_act(j->ep);

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
		epi_regs_make(j->ep, ch, late, &ev);
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
		for (int64_t oh = 0; j->ep && (late || j->ep->n_steps) && oh < OH; oh++) {
			float *yr = yc + oh * OW;
			if (late)
				oq_act_apply(&j->ep->act, yr, (size_t)OW);
			if (ev.steps)
				epi_row_avx512(&ev, 0, (size_t)(yr - j->y), yr, (size_t)OW);
			else
				epi_steps(j->ep, j->ep->steps, j->ep->n_steps, ch, (size_t)(yr - j->y), yr, (size_t)OW);
		}
	}
	free(own);
}

/*
 * Small planes (DW_FLAT_MAX_P outputs at most, rows of at most DW_FLAT_MAX_W) with stride 1
 * and the output the input's size: the plane is one flat row of positions,
 * and tap (i, j) of output p reads input p + (i * dh - pad0) * W + j * dw -
 * pad1, a fixed offset, so 16 positions (several output rows) fill each
 * vector instead of one short row. A mask per (vector, tap), built once per
 * call, zeroes the taps outside the plane (w * 0 is still added, as on the
 * padded copy): the same sums in the same (i, j) order.
 */
#define DW_FLAT_MAX_P 256
#define DW_FLAT_VECS (DW_FLAT_MAX_P / 16)
#define DW_FLAT_MAX_W 10 /* wider rows fill most of a vector already */

static int dw_flat_fits(const oq_conv_geom *g)
{
	return g->stride[0] == 1 && g->stride[1] == 1 && g->in[0] == g->out[0] && g->in[1] == g->out[1] &&
	       g->out[1] <= DW_FLAT_MAX_W && g->out_size <= DW_FLAT_MAX_P;
}

AVX512 static void dw_flat_range(void *ctx, size_t begin, size_t end)
{
	dw_rows_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1], P = g->out_size, taps = g->k_size, nv = (P + 15) / 16;
	int64_t offs[DW_MAX_TAPS];
	__mmask16 mk[DW_FLAT_VECS * DW_MAX_TAPS];
	int late = late_act(j->ep);

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
		epi_regs_make(j->ep, ch, late, &ev);
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
		if (late)
			oq_act_apply(&j->ep->act, yc, (size_t)P);
		if (j->ep && j->ep->n_steps) {
			if (ev.steps)
				epi_row_avx512(&ev, 0, (size_t)(yc - j->y), yc, (size_t)P);
			else
				epi_steps(j->ep, j->ep->steps, j->ep->n_steps, ch, (size_t)(yc - j->y), yc, (size_t)P);
		}
	}
}

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
 * output is the sum dw_rows_block and dw_pad_row form, in the same order, so the
 * bits are theirs; what changes is that no lane is wasted on short rows
 * (7 x 7, 14 x 14 planes), a horizontal stride is a step through the row
 * (no permutes) and there are no per-tap masks or branches. Work items:
 * image x 16-channel block x band of output rows (bands only to give
 * every thread work: the first rows of a band are transposed again).
 */
#define DW_CHAN_ITEMS 16 /* work items a depthwise call is cut into at least, where rows allow */

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
static int dw_chan_fits(const oq_conv_geom *g)
{
	return !oq_linalg_dw_rows && g->k_size <= DW_MAX_TAPS && (g->k[0] - 1) * g->dil[0] + 1 <= DW_MAX_TAPS &&
	       g->c * 5 > round_up(g->c, 16) * 4;
}

/*
 * Output rows [oh0, oh1) of channels c0 .. c0 + 15 (fewer at the end): xc
 * channel c0's input plane, yc its output plane; ring and zero as dw_chan_rows.
 */
AVX512 static void dw_chan_block(const dw_chan_job *j, const float *xc, float *yc, int64_t c0, int64_t oh0, int64_t oh1,
			     float *ring, const float *zero)
{
	const oq_conv_geom *g = j->g;
	int64_t OW = g->out[1], kh = g->k[0], kw = g->k[1], sw = g->stride[1], taps = g->k_size;
	int nc = g->c - c0 < 16 ? (int)(g->c - c0) : 16, late = late_act(j->ep);
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
	epi_regs_make(j->ep, 0, late, &ev);
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
		epi_regs_make(j->ep, c0 + l, late, &sev);
		for (int64_t oh = oh0; oh < oh1; oh++) {
			float *yr = yc + l * g->out_size + oh * OW;
			if (late)
				oq_act_apply(&j->ep->act, yr, (size_t)OW);
			if (sev.steps)
				epi_row_avx512(&sev, 0, (size_t)(yr - j->y), yr, (size_t)OW);
			else
				epi_steps(j->ep, j->ep->steps, j->ep->n_steps, c0 + l, (size_t)(yr - j->y), yr,
					  (size_t)OW);
		}
	}
}

/* A channel-blocked job for g (depthwise, dw_chan_fits), cut into bands of output rows for the threads. */
static void dw_chan_setup(dw_chan_job *dc, oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w, const float *b,
		      const oq_kfuse *ep, float *y)
{
	dc->k = k;
	dc->g = g;
	dc->x = x;
	dc->w = w;
	dc->b = b;
	dc->y = y;
	dc->ep = ep;
	dc->nblk = ceil_div(g->c, 16);
	dc->span = (g->k[0] - 1) * g->dil[0] + 1;
	dc->wp = g->pad[1] + round_up(g->in[1], 16);
	/* whole groups of 8 positions read zero columns past the row */
	if ((round_up(g->out[1], 8) - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1 > dc->wp)
		dc->wp = (round_up(g->out[1], 8) - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
	/* bands of at least 8 rows, enough items for the threads when the planes are big */
	dc->nband = ceil_div(DW_CHAN_ITEMS, g->n * dc->nblk);
	if (dc->nband > g->out[0] / 8)
		dc->nband = g->out[0] / 8;
	if (dc->nband < 1)
		dc->nband = 1;
	dc->band = ceil_div(g->out[0], dc->nband);
	dc->nband = ceil_div(g->out[0], dc->band);
	atomic_init(&dc->oom, 0);
}

/* Floats of dw_chan_range's scratch: the ring of span rows and the zero row (a multiple of 16). */
static size_t dw_chan_scratch_floats(const dw_chan_job *j)
{
	return ((size_t)j->span + 1) * (size_t)j->wp * 16;
}

AVX512 static void dw_chan_range(void *ctx, size_t begin, size_t end)
{
	dw_chan_job *j = ctx;
	const oq_conv_geom *g = j->g;
	size_t need = dw_chan_scratch_floats(j) * sizeof(float);
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
		dw_chan_block(j, j->x + (n * g->c + c0) * g->in_size, j->y + (n * g->c + c0) * g->out_size, c0, oh0, oh1,
			  ring, ring + (size_t)j->span * (size_t)j->wp * 16);
	}
	free(own);
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
	return use_avx512();
#else
	return 0;
#endif
}

/* ---------------------------------------------------------- conv via GEMM */

typedef struct conv_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	oq_ltype t;
	const oq_conv_geom *g;
	const void *x, *w, *b;
	void *y;
	const oq_kfuse *ep;    /* float32 fused epilogue, or NULL */
	int direct;            /* 1x1, stride 1, no padding: the input is col */
	int avx2;              /* float32 on an AVX2+FMA CPU: avx2_gemm instead of BLAS */
	int avx512;            /* float32 on an AVX-512 CPU: gemm_pos / gemm_chan (takes precedence over avx2) */
	int64_t cg, mg, kc;    /* channels per group in / out, GEMM depth */
	int64_t pt, mt;        /* tile sizes: positions, output channels */
	int64_t np, nm;        /* tiles per (image, group) along positions / channels */
	float *shared_col;     /* avx512: the packed col of every position tile, shared by its channel tiles, or NULL */
	int64_t rb;            /* packing into shared_col: rows per work item (whole input channels) */
	const oq_packed_w *packed_w; /* avx512: the weight in packed panels (channel tiles then start at a panel), or NULL */
	int chan;              /* avx512 with packed_w: channels in the lanes (gemm_chan) instead of positions (gemm_pos) */
	atomic_int oom;
} conv_job;

static void conv_range(void *ctx, size_t begin, size_t end)
{
	conv_job *j = ctx;
	const oq_conv_geom *g = j->g;
	size_t es = j->t == OQ_LT_F32 ? 4 : 8;
	int64_t P = g->out_size, last = -1;
	void *col = NULL, *own = NULL;
	size_t need = j->direct ? 0 : (size_t)(j->kc * j->pt) * es;

#if defined(HAVE_X86_KERNELS)
	/* packed col, then one im2col row (gemm_chan reads a 1x1 input in place) */
	if (j->avx512)
		need = j->shared_col || (j->chan && j->direct) ? 0
			: (packed_col_floats(j->kc, j->pt) + (size_t)j->pt) * sizeof(float);
#endif
	if (need) {
		need = (need + 63) / 64 * 64;
		col = j->k ? oq_k_scratch(j->k, need) : (own = aligned_alloc(64, need));
		if (!col) {
			atomic_store(&j->oom, 1);
			return;
		}
	}
	for (size_t it = begin; it < end; it++) {
		int64_t mi = (int64_t)it % j->nm, rest = (int64_t)it / j->nm;
		int64_t pi = rest % j->np, ng = rest / j->np; /* ng = image * group + grp */
		int64_t n = ng / g->group, grp = ng % g->group;
		int64_t p0 = pi * j->pt, pp = P - p0 < j->pt ? P - p0 : j->pt;
		int64_t m0 = mi * j->mt, mm = j->mg - m0 < j->mt ? j->mg - m0 : j->mt;
		int64_t xo = (n * g->c + grp * j->cg) * g->in_size;
		int64_t yo = (n * g->m + grp * j->mg + m0) * P + p0;
		int64_t wo = (grp * j->mg + m0) * j->kc;
		const void *bm;
		int64_t ldb;

#if defined(HAVE_X86_KERNELS)
		if (j->avx512) {
			tile_epi ze;
			int reg = j->ep && !late_act(j->ep) && (!j->ep->n_steps || res_steps(j->ep));
			int inplace = j->chan && j->direct;
			const float *bp = j->shared_col ? j->shared_col + (size_t)rest * packed_col_floats(j->kc, j->pt) : col;
			tile_a A;
			if (!j->shared_col && !inplace && rest != last) {
				pack_col(g, (const float *)j->x + xo, P, j->direct, 0, j->kc, j->kc, p0, pp,
					   (float *)col + packed_col_floats(j->kc, j->pt), col);
				last = rest;
			}
			/* the epilogue on the registers before the last store, else in a pass over the tile */
			if (reg) {
				ze.scale = j->ep->scale ? j->ep->scale + grp * j->mg + m0 : NULL;
				ze.shift = j->ep->scale ? j->ep->shift + grp * j->mg + m0 : NULL;
				ze.act = j->ep->act.kind;
				ze.lo = j->ep->act.a;
				ze.hi = j->ep->act.b;
				ze.res = res_steps(j->ep);
				ze.ldc = P;
				ze.t = ze.res ? j->ep->t[j->ep->steps[0].t] + yo : NULL;
			}
			if (j->packed_w) { /* the panels of channels grp * mg + m0 on (m0 starts a panel) */
				int64_t npg = ceil_div(j->mg, OQ_PACKED_W_NR);
				A.a = j->packed_w->p + (size_t)((grp * npg + m0 / OQ_PACKED_W_NR) * j->kc * OQ_PACKED_W_NR);
				A.lda = 0;
				A.pstride = j->kc * OQ_PACKED_W_NR;
			} else {
				A.a = (const float *)j->w + wo;
				A.lda = j->kc;
				A.pstride = 0;
			}
			if (j->chan)
				gemm_chan(mm, pp, j->kc, A.a, A.pstride, (const float *)j->x + xo + p0, g->in_size,
					inplace ? NULL : bp, (float *)j->y + yo, P,
					j->b ? (const float *)j->b + grp * j->mg + m0 : NULL, reg ? &ze : NULL);
			else
				gemm_pos(mm, pp, j->kc, &A, bp, NULL, (float *)j->y + yo, P,
				       j->b ? (const float *)j->b + grp * j->mg + m0 : NULL, reg ? &ze : NULL);
			if (j->ep && !reg)
				epi_tile_avx512(j->ep, grp * j->mg + m0, mm, (size_t)yo, (float *)j->y + yo, P, pp);
			continue;
		}
#endif
		if (j->direct) {
			bm = (const char *)j->x + (size_t)(xo + p0) * es;
			ldb = P;
		} else {
			if (rest != last) {
				if (j->t == OQ_LT_F32) {
					if (g->nsp == 2)
						im2col_2d_f(g, (const float *)j->x + xo, 0, j->kc, p0, pp, col);
					else
						im2col_nd_f(g, (const float *)j->x + xo, 0, j->kc, p0, pp, col);
				} else {
					if (g->nsp == 2)
						im2col_2d_d(g, (const double *)j->x + xo, 0, j->kc, p0, pp, col);
					else
						im2col_nd_d(g, (const double *)j->x + xo, 0, j->kc, p0, pp, col);
				}
				last = rest;
			}
			bm = col;
			ldb = pp;
		}
		/* bias first, then C = W * col + C */
		for (int64_t r = 0; j->b && r < mm; r++) {
			int64_t ch = grp * j->mg + m0 + r;
			if (j->t == OQ_LT_F32) {
				float v = ((const float *)j->b)[ch], *yr = (float *)j->y + yo + r * P;
				for (int64_t q = 0; q < pp; q++)
					yr[q] = v;
			} else {
				double v = ((const double *)j->b)[ch], *yr = (double *)j->y + yo + r * P;
				for (int64_t q = 0; q < pp; q++)
					yr[q] = v;
			}
		}
#if defined(HAVE_X86_KERNELS)
		if (j->avx2) {
			avx2_gemm(mm, pp, j->kc, (const float *)j->w + wo, j->kc, bm, ldb, (float *)j->y + yo, P, j->b != NULL);
		} else
#endif
		{
			oq_gemm_batch gb;
			memset(&gb, 0, sizeof gb);
			gb.t = j->t;
			gb.m = mm;
			gb.n = pp;
			gb.kd = j->kc;
			gb.alpha = 1;
			gb.beta = j->b ? 1 : 0;
			gb.a = (const char *)j->w + (size_t)wo * es;
			gb.lda = j->kc;
			gb.b = bm;
			gb.ldb = ldb;
			gb.c = (char *)j->y + (size_t)yo * es;
			gb.ldc = P;
			gb.batch = 1;
			oq_gemm_run(NULL, &gb);
		}
		for (int64_t r = 0; j->ep && r < mm; r++)
			oq_epi_apply(j->ep, grp * j->mg + m0 + r, (size_t)(yo + r * P), (float *)j->y + yo + r * P,
				     (size_t)pp);
	}
	free(own);
}

#if defined(HAVE_X86_KERNELS)
/*
 * Work items of the shared packing (conv_job.packed): item = position tile
 * (image, group, tile) x block of rb rows; every channel tile of that
 * position tile then reads the same packed col instead of packing its own.
 */
static void shared_pack_range(void *ctx, size_t begin, size_t end)
{
	conv_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t P = g->out_size, nrb = ceil_div(j->kc, j->rb);
	float *row = NULL;

	for (size_t it = begin; it < end; it++) {
		int64_t rest = (int64_t)it / nrb, r0 = (int64_t)it % nrb * j->rb;
		int64_t r1 = r0 + j->rb < j->kc ? r0 + j->rb : j->kc;
		int64_t pi = rest % j->np, ng = rest / j->np, n = ng / g->group, grp = ng % g->group;
		int64_t p0 = pi * j->pt, pp = P - p0 < j->pt ? P - p0 : j->pt;
		int64_t xo = (n * g->c + grp * j->cg) * g->in_size;
		if (!row && !j->direct && !im2col_packed_fits(g) &&
		    !(row = oq_k_scratch(j->k, (size_t)j->pt * sizeof *row))) {
			atomic_store(&j->oom, 1);
			return;
		}
		pack_col(g, (const float *)j->x + xo, P, j->direct, r0, r1, j->kc, p0, pp, row,
			   j->shared_col + (size_t)rest * packed_col_floats(j->kc, j->pt));
	}
}
#endif

/*
 * Tiles of one (image, group) GEMM of mg channels x P positions x kc deep:
 * positions per tile so that the col tile is near 1 MiB (128 to 4096
 * columns); then, when images x groups x position tiles are fewer than
 * TILES_MIN and the work is worth sharing (FLOPs above SPLIT_FLOPS: a few
 * microseconds), cut positions further down to SPLIT_MIN_P columns
 * (whole 32-column panels) and then channels down to 12 rows (one register tile;
 * 4 for fewer than 24 channels), so that late layers with 7x7 or 14x14 positions still
 * give every thread work. With packed weights (pk) channel tiles are whole
 * 32-channel panels; with the channels in the lanes (tr) channels are cut
 * first, then positions into multiples of 8 of at least SPLIT_MIN_TR (no
 * col panels to keep whole: a 28x28 plane of 32 channels gives 14 tiles
 * of 56 positions, not 5 of 160). Shape-only: never depends on the thread count.
 */
#define TILES_MIN 16
#define SHARED_PACK_FLOATS (4u << 20) /* 16 MiB: larger packed cols are packed per tile */
#define SPLIT_FLOPS 1e6
#define SPLIT_MIN_P 64
#define SPLIT_MIN_TR 16 /* positions per tile at least when gemm_chan cuts a small plane */

static void conv_tiles(const oq_conv_geom *g, int64_t kc, int64_t mg, int pk, int tr, int64_t *pt, int64_t *np,
		       int64_t *mt)
{
	int64_t P = g->out_size, per, tiles, want;

	per = (int64_t)(262144 / (kc > 0 ? kc : 1));
	per = per < 128 ? 128 : per > 4096 ? 4096 : per;
	*np = ceil_div(P, per);
	*pt = *np == 1 ? P : round_up(ceil_div(P, *np), 16);
	*np = ceil_div(P, *pt);
	*mt = mg;
	tiles = g->n * g->group * *np;
	if (tiles >= TILES_MIN || 2.0 * (double)mg * (double)P * (double)kc * (double)(g->n * g->group) < SPLIT_FLOPS)
		return;
	want = ceil_div(TILES_MIN, tiles);
	if (tr) {
		/* whole panels, then positions in multiples of 8 (gemm_chan's rows) down to SPLIT_MIN_TR */
		int64_t parts = mg / OQ_PACKED_W_NR < want ? mg / OQ_PACKED_W_NR : want;
		if (parts > 1) {
			*mt = round_up(ceil_div(mg, parts), OQ_PACKED_W_NR);
			want = ceil_div(want, ceil_div(mg, *mt));
		}
		if (want > 1 && *pt >= 2 * SPLIT_MIN_TR) {
			parts = *pt / SPLIT_MIN_TR < want ? *pt / SPLIT_MIN_TR : want;
			*pt = round_up(ceil_div(*pt, parts), 8);
			*np = ceil_div(P, *pt);
		}
		return;
	}
	if (*pt >= 2 * SPLIT_MIN_P) {
		int64_t parts = *pt / SPLIT_MIN_P < want ? *pt / SPLIT_MIN_P : want, q = *pt;
		/* whole 32-column panels, and no last tile below half a tile (196 = 96 + 96 + 4: 2 parts) */
		for (; parts > 1; parts--) {
			q = round_up(ceil_div(*pt, parts), 32);
			if (P % q == 0 || P % q >= q / 2)
				break;
		}
		if (parts > 1) {
			*pt = q;
			*np = ceil_div(P, *pt);
			tiles = g->n * g->group * *np;
			want = ceil_div(TILES_MIN, tiles);
		}
	}
	if (want > 1 && mg >= 8) {
		/* whole panels or 12-row register tiles where there are enough rows, else 4-row tails */
		int64_t q = pk ? OQ_PACKED_W_NR : mg >= 24 ? 12 : 4, parts = mg / q < want ? mg / q : want;
		if (parts > 1)
			*mt = round_up(ceil_div(mg, parts), q);
	}
}

/*
 * Channels in the lanes (gemm_chan) instead of positions (gemm_pos) when that
 * fills more lanes: a plane of 49 positions fills 49 of gemm_pos's 64
 * position lanes, 160 channels all of gemm_chan's; at a depth of 128 and
 * more gemm_chan is also the faster kernel (~110-118 GFLOP/s against ~85-100
 * here: one cache line of weights and one of positions per k), its
 * transposes cheap; at small depth the transposes cost more than they save.
 */
static int use_chan_lanes(const oq_conv_geom *g, int64_t kc, int64_t mg)
{
	double eff_n = (double)g->out_size / (double)round_up(g->out_size, 16);
	double eff_t = (double)mg / (double)round_up(mg, OQ_PACKED_W_NR) * (kc >= 128 ? 1.12 : kc >= 96 ? 0.95 : 0.85);
	return eff_t > eff_n;
}

#if defined(HAVE_X86_KERNELS)
/*
 * A stride-1 convolution (group 1, not 1x1) with B read in place (off
 * with oq_linalg_no_in_place): over a copy xp of its input with the pads
 * written out as zeros ([c][Hp][Wp], Hp x Wp the padded plane) the output
 * at positions q = oh * Wp + ow of the padded width reads im2col row k =
 * (c, i, j) at off[k] = c Hp Wp + i dh Wp + j dw of xp: B[k][q] = xp[off[k]
 * + q]. Each tile of whole output rows is one gemm_pos on those rows (the
 * in-place tiles: pos_tile_4x32's FMAs in the same k order, so the same bits as on the
 * packed col) at the padded width into a per-thread buffer, whose rows
 * are copied into y without the Wp - OW extra columns before the epilogue
 * runs over them (epi_tile_avx512, the same bits as in the registers). im2col wrote and read
 * back kc values per output position (8.3 M floats for PaddleOCR det's
 * 96 -> 24 3x3 conv at 80 x 120); here each input value is copied once.
 * That packing costs most where few output channels share it: taken for
 * at most IN_PLACE_MAX_M channels (3x3, 1 thread, im2col -> in place: 96 -> 24
 * at 80 x 120 5.8 -> 4.7 ms, 64 -> 16 at 112 x 112 4.3 -> 2.9 ms, 24 -> 24
 * at 160 x 160 5.9 -> 3.6 ms; at 32 to 64 channels the two are within a
 * few per cent, and 3 -> 64 at 224 x 224 is slower in place, 2.6 -> 3.9
 * ms, its output rows copied out as 64 short runs) and where the extra
 * columns are at most 1 / IN_PLACE_WASTE of the positions.
 */
#define IN_PLACE_WASTE 8         /* at most 1 / IN_PLACE_WASTE of the positions computed and dropped */
#define IN_PLACE_MAX_M 24        /* output channels at most */
#define IN_PLACE_TILE_BYTES (96u << 10) /* a tile's rows at the padded width, all channels, at most */

typedef struct in_place_job {
	oq_kctx *k;
	const oq_conv_geom *g;
	const float *x, *b;
	const oq_kfuse *ep;
	float *y, *xp;         /* output; the padded input of every image */
	tile_a A;                  /* the weights (group 1) */
	int64_t hp, wp;        /* padded plane */
	int64_t kc, rt, nt;    /* depth; output rows per tile, tiles per image */
	const int64_t *off;    /* [kc] start of row k of B in an image's xp */
	atomic_int oom;
} in_place_job;

static int in_place_fits(const oq_conv_geom *g, int64_t kc)
{
	return !oq_linalg_no_in_place && g->nsp == 2 && g->group == 1 && g->m <= IN_PLACE_MAX_M && g->stride[0] == 1 &&
	       g->stride[1] == 1 && g->k_size > 1 && kc <= 65536 /* its row pointers in the thread's buffer */ &&
	       IN_PLACE_WASTE * (g->k[1] - 1) * g->dil[1] <= g->out[1];
}

/* Planes [begin, end) (image * c + channel) of xp: the input plane inside zeros. */
static void in_place_pad(void *ctx, size_t begin, size_t end)
{
	in_place_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1];

	for (size_t it = begin; it < end; it++) {
		float *d = j->xp + (int64_t)it * j->hp * j->wp;
		const float *s = j->x + (int64_t)it * g->in_size;
		memset(d, 0, (size_t)(g->pad[0] * j->wp) * sizeof *d);
		for (int64_t h = 0; h < H; h++) {
			float *r = d + (g->pad[0] + h) * j->wp;
			memset(r, 0, (size_t)g->pad[1] * sizeof *r);
			memcpy(r + g->pad[1], s + h * W, (size_t)W * sizeof *r);
			memset(r + g->pad[1] + W, 0, (size_t)(j->wp - g->pad[1] - W) * sizeof *r);
		}
		memset(d + (g->pad[0] + H) * j->wp, 0, (size_t)((j->hp - g->pad[0] - H) * j->wp) * sizeof *d);
	}
}

static void in_place_range(void *ctx, size_t begin, size_t end)
{
	in_place_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t M = g->m, P = g->out_size, OW = g->out[1], OH = g->out[0];
	/* the tile's rows, then (64-byte aligned) the row pointers of B */
	size_t nc = (size_t)round_up(M * j->rt * j->wp, 16), need = nc * sizeof(float) + (size_t)j->kc * sizeof(float *);
	void *own = j->k ? NULL : malloc(need), *buf = j->k ? oq_k_scratch(j->k, need) : own;
	float *c = buf;
	const float **br = (const float **)(c + nc);

	if (!buf) {
		atomic_store(&j->oom, 1);
		return;
	}
	for (size_t it = begin; it < end; it++) {
		int64_t n = (int64_t)it / j->nt, oh0 = (int64_t)it % j->nt * j->rt;
		int64_t oh1 = oh0 + j->rt < OH ? oh0 + j->rt : OH, pp = (oh1 - oh0) * j->wp;
		const float *xn = j->xp + n * g->c * j->hp * j->wp + oh0 * j->wp;
		int64_t yo = n * M * P + oh0 * OW;
		for (int64_t k = 0; k < j->kc; k++)
			br[k] = xn + j->off[k];
		gemm_pos(M, pp, j->kc, &j->A, NULL, br, c, pp, j->b, NULL);
		for (int64_t m = 0; m < M; m++)
			for (int64_t oh = oh0; oh < oh1; oh++)
				memcpy(j->y + n * M * P + m * P + oh * OW, c + m * pp + (oh - oh0) * j->wp,
				       (size_t)OW * sizeof(float));
		if (j->ep)
			epi_tile_avx512(j->ep, 0, M, (size_t)yo, j->y + yo, P, (oh1 - oh0) * OW);
	}
	free(own);
}

/*
 * Runs g (in_place_fits) with B in place, or returns 1 (nothing written) when
 * the padded copy cannot be allocated: the caller then takes the im2col path.
 */
static int conv_in_place(oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w, const oq_packed_w *pw,
		  const float *b, const oq_kfuse *ep, float *y, int64_t kc, int *rc)
{
	in_place_job j;
	int64_t *off, hr, wr, items;
	size_t nxp, slack;
	float *own;

	memset(&j, 0, sizeof j);
	/* the input at (pad0, pad1), and every row / column a tap of an output reads */
	hr = g->out[0] + (g->k[0] - 1) * g->dil[0];
	wr = g->out[1] + (g->k[1] - 1) * g->dil[1];
	j.hp = g->pad[0] + g->in[0] > hr ? g->pad[0] + g->in[0] : hr;
	j.wp = g->pad[1] + g->in[1] > wr ? g->pad[1] + g->in[1] : wr;
	/* rows readable past the last position of a tile: the last panel's 32 and the widest tap */
	slack = (size_t)((g->k[1] - 1) * g->dil[1] + 2 * TILE_NR);
	if (!oq_mul_size((size_t)(g->n * g->c), (size_t)(j.hp * j.wp), &nxp) || nxp > SIZE_MAX / sizeof(float) - slack)
		return 1;
	nxp += slack;
	/* the executor's buffer for the whole call (kept across calls), else our own */
	own = k ? NULL : aligned_alloc(64, (nxp * sizeof(float) + 63) / 64 * 64);
	j.xp = k ? oq_k_shared(k, nxp * sizeof(float)) : own;
	off = malloc((size_t)kc * sizeof *off);
	if (!j.xp || !off) {
		free(own);
		free(off);
		return 1;
	}
	memset(j.xp + nxp - slack, 0, slack * sizeof(float));
	for (int64_t q = 0, c = 0; c < g->c; c++)
		for (int64_t i = 0; i < g->k[0]; i++)
			for (int64_t jj = 0; jj < g->k[1]; jj++)
				off[q++] = c * j.hp * j.wp + i * g->dil[0] * j.wp + jj * g->dil[1];
	j.k = k;
	j.g = g;
	j.x = x;
	j.b = b;
	j.ep = ep;
	j.y = y;
	j.kc = kc;
	j.off = off;
	if (pw) {
		j.A.a = pw->p;
		j.A.pstride = kc * OQ_PACKED_W_NR;
	} else {
		j.A.a = w;
		j.A.lda = kc;
	}
	/* whole output rows per tile, within IN_PLACE_TILE_BYTES at the padded width, and at least
	 * TILES_MIN tiles where there are rows (shape only) */
	j.rt = (int64_t)(IN_PLACE_TILE_BYTES / sizeof(float)) / (g->m * j.wp);
	j.rt = j.rt < 1 ? 1 : j.rt;
	if (g->n * ceil_div(g->out[0], j.rt) < TILES_MIN)
		j.rt = ceil_div(g->out[0], ceil_div(TILES_MIN, g->n));
	j.rt = j.rt < 1 ? 1 : j.rt;
	j.nt = ceil_div(g->out[0], j.rt);
	atomic_init(&j.oom, 0);
	oq_k_parallel(k, (size_t)(g->n * g->c), 1, in_place_pad, &j);
	items = g->n * j.nt;
	oq_k_parallel(k, (size_t)items, 1, in_place_range, &j);
	free(own);
	free(off);
	atomic_fetch_add_explicit(&oq_linalg_in_place_runs, 1, memory_order_relaxed);
	*rc = atomic_load(&j.oom) ? OQ_ENOMEM : OQ_OK;
	return 0;
}
#endif

static int conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w, const oq_packed_w *pw,
		    const void *b, const oq_kfuse *ep, void *y);

int oq_conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w,
		const void *b, void *y)
{
	return conv_run(k, t, g0, x, w, NULL, b, NULL, y);
}

int oq_conv_run_epilogue(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w,
		   const void *b, const oq_kfuse *ep, void *y)
{
	return conv_run(k, t, g0, x, w, NULL, b, ep, y);
}

int oq_conv_run_packed(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w, const oq_packed_w *pw,
		   const void *b, const oq_kfuse *ep, void *y)
{
	float *tmp = NULL;
	int rc;

	if (pw && (pw->m != g0->m || pw->group != g0->group || g0->group <= 0 || pw->m % pw->group ||
		   pw->kc != g0->c / g0->group * g0->k_size))
		return OQ_EINVAL;
	/* the packed layout only where gemm_pos / gemm_chan read it */
	if (pw && (t != OQ_LT_F32 || !oq_packed_w_available() || oq_linalg_use_ref || g0->m == g0->group)) {
		size_t n;
		if (!oq_mul_size((size_t)pw->m, (size_t)pw->kc, &n) || !oq_mul_size(n, sizeof(float), &n) ||
		    !(tmp = malloc(n ? n : 1)))
			return OQ_ENOMEM;
		oq_packed_w_unpack(pw, tmp);
		w = tmp;
		pw = NULL;
	}
	rc = conv_run(k, t, g0, x, w, pw, b, ep, y);
	free(tmp);
	return rc;
}

/* x * W (w, or the packed pw) + b, then ep: see oq_conv_run_epilogue / oq_conv_run_packed. */
static int conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w, const oq_packed_w *pw,
		    const void *b, const oq_kfuse *ep, void *y)
{
	oq_conv_geom g;
	conv_job j;
	int64_t tiles;
	oq_packed_w own;
	int rc;

	if (ep && t != OQ_LT_F32)
		return OQ_EUNSUP; /* the fused kernel passes one for float32 only */
	if (oq_linalg_use_ref) {
		oq_conv_ref(t, g0, x, w, b, y);
		for (int64_t r = 0; ep && r < g0->n * g0->m; r++)
			oq_epi_apply(ep, r % g0->m, (size_t)(r * g0->out_size), (float *)y + r * g0->out_size,
				     (size_t)g0->out_size);
		return OQ_OK;
	}
	as_2d(g0, &g);
	if (g.n == 0 || g.m == 0 || g.out_size == 0)
		return OQ_OK;
	oq_linalg_blas_init();
	if (t == OQ_LT_F32 && g.nsp == 2 && g.group == g.c && g.group == g.m && g.in_size > 0) {
		dw_pad_job d;
#if defined(HAVE_X86_KERNELS)
		if (use_avx512() && dw_chan_fits(&g)) {
			dw_chan_job dc;
			int64_t items;
			dw_chan_setup(&dc, k, &g, x, w, b, ep, y);
			items = g.n * dc.nblk * dc.nband;
			oq_k_parallel(k, (size_t)items, 1, dw_chan_range, &dc);
			return atomic_load(&dc.oom) ? OQ_ENOMEM : OQ_OK;
		}
		if (use_avx512() && (g.stride[1] == 1 || g.stride[1] == 2) && g.k[0] * g.k[1] <= DW_MAX_TAPS) {
			dw_rows_job dz;
			dz.k = k;
			dz.g = &g;
			dz.x = x;
			dz.w = w;
			dz.b = b;
			dz.y = y;
			dz.ep = ep;
			dz.nblk = ceil_div(g.out[1], 16);
			atomic_init(&dz.oom, 0);
			oq_k_parallel(k, (size_t)(g.n * g.c), 1, dw_flat_fits(&g) ? dw_flat_range : dw_rows_range, &dz);
			return atomic_load(&dz.oom) ? OQ_ENOMEM : OQ_OK;
		}
#endif
		d.k = k;
		d.g = &g;
		d.x = x;
		d.w = w;
		d.b = b;
		d.y = y;
		d.ep = ep;
		d.ow4 = (g.out[1] + 3) / 4 * 4;
		d.hp = (g.out[0] - 1) * g.stride[0] + (g.k[0] - 1) * g.dil[0] + 1;
		/* + 2: the stride-2 loads read one float past the last tap */
		d.wp = (d.ow4 - 1) * g.stride[1] + (g.k[1] - 1) * g.dil[1] + 3;
		atomic_init(&d.oom, 0);
		oq_k_parallel(k, (size_t)(g.n * g.c), 1, dw_pad_range, &d);
		return atomic_load(&d.oom) ? OQ_ENOMEM : OQ_OK;
	}
	memset(&j, 0, sizeof j);
	j.k = k;
	j.t = t;
	j.g = &g;
#if defined(HAVE_X86_KERNELS)
	j.avx2 = t == OQ_LT_F32 && use_avx2();
	j.avx512 = t == OQ_LT_F32 && use_avx512();
#endif
	j.x = x;
	j.w = w;
	j.b = b;
	j.y = y;
	j.ep = ep;
	j.cg = g.c / g.group;
	j.mg = g.m / g.group;
	j.kc = j.cg * g.k_size;
	j.direct = 1;
	for (int d = 0; d < g.nsp; d++)
		if (g.k[d] != 1 || g.stride[d] != 1 || g.pad[d] != 0 || g.out[d] != g.in[d])
			j.direct = 0;
	memset(&own, 0, sizeof own);
#if defined(HAVE_X86_KERNELS)
	j.packed_w = j.avx512 ? pw : NULL;
	j.chan = j.avx512 && use_chan_lanes(&g, j.kc, j.mg);
	if (j.chan && !j.packed_w) { /* no plan-time packing (a weight computed per run, tests): pack for this call */
		if ((rc = oq_packed_w_pack(w, g.m, j.kc, g.group, &own)))
			return rc;
		j.packed_w = &own;
	}
#else
	(void)pw;
#endif
#if defined(HAVE_X86_KERNELS)
	if (j.avx512 && !j.chan && !j.direct && in_place_fits(&g, j.kc) &&
	    !conv_in_place(k, &g, x, w, j.packed_w, b, ep, y, j.kc, &rc)) {
		oq_packed_w_free(&own);
		return rc;
	}
#endif
	conv_tiles(&g, j.kc, j.mg, j.packed_w != NULL, j.chan, &j.pt, &j.np, &j.mt);
	j.nm = ceil_div(j.mg, j.mt);
	atomic_init(&j.oom, 0);
	tiles = g.n * g.group * j.np * j.nm;
#if defined(HAVE_X86_KERNELS)
	if (j.avx512 && j.nm > 1 && k && k->threads > 1 && !(j.chan && j.direct)) {
		/* channel tiles share their position tile's packed col: pack each once, in parallel */
		size_t each = packed_col_floats(j.kc, j.pt), n_pt = (size_t)(g.n * g.group * j.np);
		if (n_pt * each <= SHARED_PACK_FLOATS && (j.shared_col = oq_k_shared(k, n_pt * each * sizeof(float)))) {
			int64_t ks = j.direct ? 1 : g.k_size;
			j.rb = ks * (j.direct ? 64 : ceil_div(64, ks)); /* about 64 rows, whole input channels */
			oq_k_parallel(k, n_pt * (size_t)ceil_div(j.kc, j.rb), 1, shared_pack_range, &j);
			if (atomic_load(&j.oom)) {
				oq_packed_w_free(&own);
				return OQ_ENOMEM;
			}
		}
	}
#endif
	oq_k_parallel(k, (size_t)tiles, 1, conv_range, &j);
	oq_packed_w_free(&own);
	return atomic_load(&j.oom) ? OQ_ENOMEM : OQ_OK;
}

/* ------------------------------------------- conv -> depthwise chain */

/*
 * A convolution A (group 1) whose output feeds only a depthwise
 * convolution B (MobileNet's expansion 1x1 and 3x3 depthwise; its stem
 * conv and first depthwise) runs as one pass over bands of B's output
 * rows and groups of CHAIN_CH channels (B's channel c reads only A's
 * channel c): per item, A's output rows that B reads are computed for
 * the group's channels into a per-thread buffer of at most CHAIN_E_BYTES
 * (the rows two bands share are computed by both), A's epilogue applied,
 * and B runs on that buffer with its own epilogue, straight into B's
 * output. A's output (4.8 MB at 96 x 112 x 112) is never written out and
 * read back; each of its values is the one the separate kernels compute,
 * so B's output keeps its bits.
 */
#define CHAIN_E_BYTES (384u << 10)
#define CHAIN_CH OQ_PACKED_W_NR /* channels per item: one weight panel, two depthwise blocks */
#define CHAIN_ITEMS 8     /* items a chain is cut into at least, where rows allow */

typedef struct chain_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	const oq_conv_geom *ga, *gb; /* A (2-D, group 1) and B (depthwise on A's output) */
	const float *x, *wa, *ba;
	const oq_packed_w *pwa;      /* A's weight packed, or NULL (wa in place) */
	const oq_kfuse *epa;   /* A's epilogue (no tensor operands), or NULL */
	float *y;              /* B's output */
	int direct, chan;      /* A: 1x1 input in place as col / channels in the lanes (gemm_chan) */
	int64_t kc;            /* A's depth */
	int64_t band, nband;   /* B output rows per band, bands per image */
	int64_t ngrp;          /* channel groups (CHAIN_CH channels) */
	int64_t pmax;          /* A positions of a band, at most */
	dw_chan_job d;             /* B (its g replaced per band) */
	atomic_int oom;
} chain_job;

/* A's output rows [*ih0, *ih1) that B's output rows [oh0, oh1) read. */
static void chain_rows(const chain_job *j, int64_t oh0, int64_t oh1, int64_t *ih0, int64_t *ih1)
{
	const oq_conv_geom *gb = j->gb;
	*ih0 = oh0 * gb->stride[0] - gb->pad[0];
	*ih1 = (oh1 - 1) * gb->stride[0] - gb->pad[0] + j->d.span;
	if (*ih0 < 0)
		*ih0 = 0;
	if (*ih1 > gb->in[0])
		*ih1 = gb->in[0];
	if (*ih1 < *ih0)
		*ih1 = *ih0;
}

static size_t chain_col_floats(const chain_job *j)
{
	return j->direct && j->chan ? 0 : packed_col_floats(j->kc, j->pmax) + (size_t)j->pmax;
}

AVX512 static void chain_range(void *ctx, size_t begin, size_t end)
{
	chain_job *j = ctx;
	const oq_conv_geom *ga = j->ga, *gb = j->gb;
	int64_t ma = ga->m, W = gb->in[1];
	size_t ne = (size_t)CHAIN_CH * (size_t)round_up(j->pmax, 16), nc = chain_col_floats(j);
	size_t nr = dw_chan_scratch_floats(&j->d);
	size_t need = (ne + round_up((int64_t)nc, 16) + nr) * sizeof(float);
	float *own = j->k ? NULL : aligned_alloc(64, need), *e = j->k ? oq_k_scratch(j->k, need) : own;
	float *col, *ring;
	int reg = j->epa && !late_act(j->epa) && !j->epa->n_steps;
	tile_a A;

	if (!e) {
		atomic_store(&j->oom, 1);
		return;
	}
	col = e + ne;
	ring = col + round_up((int64_t)nc, 16);
	memset(ring, 0, nr * sizeof(float));
	if (j->pwa) {
		A.a = j->pwa->p;
		A.lda = 0;
		A.pstride = j->kc * OQ_PACKED_W_NR;
	} else {
		A.a = j->wa;
		A.lda = j->kc;
		A.pstride = 0;
	}
	for (size_t it = begin; it < end; it++) {
		int64_t grp = (int64_t)it % j->ngrp, rest = (int64_t)it / j->ngrp, band = rest % j->nband;
		int64_t n = rest / j->nband, ih0, ih1, p0, pp, m0 = grp * CHAIN_CH;
		int64_t nch = ma - m0 < CHAIN_CH ? ma - m0 : CHAIN_CH;
		int64_t oh0 = band * j->band, oh1 = oh0 + j->band < gb->out[0] ? oh0 + j->band : gb->out[0];
		const float *xa = j->x + n * ga->c * ga->in_size;
		oq_conv_geom gbb;
		dw_chan_job dj;
		tile_epi ze;
		tile_a Ag = A;

		chain_rows(j, oh0, oh1, &ih0, &ih1);
		p0 = ih0 * W;
		pp = (ih1 - ih0) * W;
		if (pp == 0)
			continue;
		/* A: rows [ih0, ih1) of its output, channels [m0, m0 + nch), into e ([nch][pp]) */
		if (!(j->direct && j->chan))
			pack_col(ga, xa, ga->out_size, j->direct, 0, j->kc, j->kc, p0, pp, col + packed_col_floats(j->kc, j->pmax),
				   col);
		if (reg) {
			memset(&ze, 0, sizeof ze);
			ze.scale = j->epa->scale ? j->epa->scale + m0 : NULL;
			ze.shift = j->epa->scale ? j->epa->shift + m0 : NULL;
			ze.act = j->epa->act.kind;
			ze.lo = j->epa->act.a;
			ze.hi = j->epa->act.b;
			ze.ldc = pp;
		}
		Ag.a = A.pstride ? A.a + m0 / OQ_PACKED_W_NR * A.pstride : A.a + m0 * A.lda;
		if (j->chan)
			gemm_chan(nch, pp, j->kc, Ag.a, Ag.pstride, xa + p0, ga->in_size, j->direct ? NULL : col, e, pp,
				j->ba ? j->ba + m0 : NULL, reg ? &ze : NULL);
		else
			gemm_pos(nch, pp, j->kc, &Ag, col, NULL, e, pp, j->ba ? j->ba + m0 : NULL, reg ? &ze : NULL);
		if (j->epa && !reg)
			epi_tile_avx512(j->epa, m0, nch, 0, e, pp, pp);
		/* B: its output rows [oh0, oh1) of the same channels (row ih of A's output at ih - ih0) */
		gbb = *gb;
		gbb.in[0] = ih1 - ih0;
		gbb.pad[0] = gb->pad[0] + ih0;
		gbb.in_size = pp;
		dj = j->d;
		dj.g = &gbb;
		for (int64_t c0 = m0; c0 < m0 + nch; c0 += 16)
			dw_chan_block(&dj, e + (c0 - m0) * pp, j->y + (n * gb->c + c0) * gb->out_size, c0, oh0, oh1, ring,
				  ring + (size_t)j->d.span * (size_t)j->d.wp * 16);
	}
	free(own);
}

int oq_conv_chain_run(oq_kctx *k, const oq_conv_geom *ga0, const float *x, const float *wa, const oq_packed_w *pwa,
		      const float *ba, const oq_kfuse *epa, const oq_conv_geom *gb0, const float *wb, const float *bb,
		      const oq_kfuse *epb, float *y)
{
	oq_conv_geom ga, gb;
	int rc = OQ_OK;

	as_2d(ga0, &ga);
	as_2d(gb0, &gb);
	if (gb.group != gb.c || gb.m != gb.c || gb.c != ga.m || gb.n != ga.n || gb.in[0] != ga.out[0] ||
	    gb.in[1] != ga.out[1] || (epa && epa->n_t) || (epb && epb->n_t))
		return OQ_EINVAL;
	if (ga.n == 0 || gb.out_size == 0 || ga.out_size == 0 || ga.m == 0)
		return OQ_OK;
#if defined(HAVE_X86_KERNELS)
	if (use_avx512() && !oq_linalg_use_ref && ga.nsp == 2 && ga.group == 1 && dw_chan_fits(&gb) && (wa || pwa)) {
		chain_job j;
		int64_t rows, items;
		oq_packed_w own;
		memset(&j, 0, sizeof j);
		memset(&own, 0, sizeof own);
		j.k = k;
		j.ga = &ga;
		j.gb = &gb;
		j.x = x;
		j.wa = wa;
		j.ba = ba;
		j.pwa = pwa;
		j.epa = epa;
		j.y = y;
		j.kc = ga.c * ga.k_size;
		j.direct = 1;
		for (int d = 0; d < 2; d++)
			if (ga.k[d] != 1 || ga.stride[d] != 1 || ga.pad[d] != 0 || ga.out[d] != ga.in[d])
				j.direct = 0;
		dw_chan_setup(&j.d, k, &gb, NULL, wb, bb, epb, y);
		/* bands: A's rows of a band (a group's channels) within CHAIN_E_BYTES, at least one output row */
		rows = (int64_t)(CHAIN_E_BYTES / sizeof(float)) / (CHAIN_CH * gb.in[1]);
		j.band = rows > j.d.span ? (rows - j.d.span) / gb.stride[0] + 1 : 1;
		if (j.band > gb.out[0])
			j.band = gb.out[0];
		/* at least CHAIN_ITEMS items where bands of 8 rows allow (a 32-channel stem: 5 -> 8 bands) */
		j.ngrp = ceil_div(ga.m, CHAIN_CH);
		if (ga.n * j.ngrp * ceil_div(gb.out[0], j.band) < CHAIN_ITEMS) {
			int64_t want = ceil_div(gb.out[0], ceil_div(CHAIN_ITEMS, ga.n * j.ngrp));
			if (want < 8)
				want = 8;
			if (want < j.band)
				j.band = want;
		}
		j.nband = ceil_div(gb.out[0], j.band);
		j.pmax = ((j.band - 1) * gb.stride[0] + j.d.span) * gb.in[1];
		if (j.pmax > ga.out_size)
			j.pmax = ga.out_size;
		j.chan = use_chan_lanes(&ga, j.kc, ga.m);
		if (j.chan && !pwa) {
			if ((rc = oq_packed_w_pack(wa, ga.m, j.kc, 1, &own)))
				return rc;
			j.pwa = &own;
		}
		atomic_init(&j.oom, 0);
		items = ga.n * j.nband * j.ngrp;
		oq_k_parallel(k, (size_t)items, 1, chain_range, &j);
		oq_packed_w_free(&own);
		return atomic_load(&j.oom) ? OQ_ENOMEM : OQ_OK;
	}
#endif
	{ /* the two kernels one after the other */
		size_t n;
		float *t;
		if (!oq_mul_size((size_t)(ga.n * ga.m), (size_t)ga.out_size, &n) || !oq_mul_size(n, sizeof(float), &n) ||
		    !(t = aligned_alloc(64, (n + 63) / 64 * 64)))
			return OQ_ENOMEM;
		rc = oq_conv_run_packed(k, OQ_LT_F32, ga0, x, wa, pwa, ba, epa, t);
		if (!rc)
			rc = conv_run(k, OQ_LT_F32, gb0, t, wb, NULL, bb, epb, y);
		free(t);
	}
	return rc;
}

/* ---------------------------------------------------------- reference */

static double getv(oq_ltype t, const void *p, int64_t i)
{
	return t == OQ_LT_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void setv(oq_ltype t, void *p, int64_t i, double v)
{
	if (t == OQ_LT_F32)
		((float *)p)[i] = (float)v;
	else
		((double *)p)[i] = v;
}

/* Multi-index of flat position p in dims[0..n). */
static void unflat(int64_t p, int n, const int64_t *dims, int64_t *idx)
{
	for (int d = n - 1; d >= 0; d--) {
		idx[d] = p % dims[d];
		p /= dims[d];
	}
}

void oq_conv_ref(oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const void *b, void *y)
{
	int64_t cg = g->c / g->group, mg = g->m / g->group;
	int64_t op[OQ_CONV_MAX_SP], kp[OQ_CONV_MAX_SP];

	for (int64_t n = 0; n < g->n; n++)
		for (int64_t m = 0; m < g->m; m++)
			for (int64_t p = 0; p < g->out_size; p++) {
				double acc = b ? getv(t, b, m) : 0;
				unflat(p, g->nsp, g->out, op);
				for (int64_t c = 0; c < cg; c++)
					for (int64_t q = 0; q < g->k_size; q++) {
						int64_t idx = 0, ok = 1;
						unflat(q, g->nsp, g->k, kp);
						for (int d = 0; d < g->nsp; d++) {
							int64_t ii = op[d] * g->stride[d] + kp[d] * g->dil[d] - g->pad[d];
							if (ii < 0 || ii >= g->in[d])
								ok = 0;
							idx = idx * g->in[d] + ii;
						}
						if (!ok)
							continue;
						acc += getv(t, x, (n * g->c + (m / mg) * cg + c) * g->in_size + idx) *
						       getv(t, w, (m * cg + c) * g->k_size + q);
					}
				setv(t, y, (n * g->m + m) * g->out_size + p, acc);
			}
}

/* ---------------------------------------------------------- ConvTranspose */

typedef struct col2im_job {
	oq_ltype t;
	const oq_conv_geom *g;
	const void *col;       /* [m * k_size, in_size] for one image */
	const void *b;
	void *y;               /* one image */
} col2im_job;

#define COL2IM(T, NAME)                                                                             \
	static void NAME(const col2im_job *j, int64_t m)                                            \
	{                                                                                           \
		const oq_conv_geom *g = j->g;                                                       \
		const T *col = (const T *)j->col + m * g->k_size * g->in_size;                      \
		T *y = (T *)j->y + m * g->out_size;                                                 \
		T bv = j->b ? ((const T *)j->b)[m] : (T)0;                                          \
		int64_t kp[OQ_CONV_MAX_SP], ip[OQ_CONV_MAX_SP];                                     \
		for (int64_t p = 0; p < g->out_size; p++)                                           \
			y[p] = bv;                                                                  \
		for (int64_t q = 0; q < g->k_size; q++, col += g->in_size) {                        \
			unflat(q, g->nsp, g->k, kp);                                                \
			if (g->nsp == 2) {                                                          \
				int64_t W = g->in[1], OW = g->out[1], sw = g->stride[1];            \
				int64_t off = kp[1] * g->dil[1] - g->pad[1];                        \
				int64_t lo = off >= 0 ? 0 : ceil_div(-off, sw);                     \
				int64_t hi = OW - 1 - off >= 0 ? (OW - 1 - off) / sw + 1 : 0;       \
				if (hi > W)                                                         \
					hi = W;                                                     \
				for (int64_t ih = 0; ih < g->in[0]; ih++) {                         \
					int64_t oh = ih * g->stride[0] + kp[0] * g->dil[0] - g->pad[0]; \
					if (oh < 0 || oh >= g->out[0])                              \
						continue;                                           \
					T *yr = y + oh * OW + off;                                  \
					const T *cr = col + ih * W;                                 \
					for (int64_t iw = lo; iw < hi; iw++)                        \
						yr[iw * sw] += cr[iw];                              \
				}                                                                   \
				continue;                                                           \
			}                                                                           \
			for (int64_t i = 0; i < g->in_size; i++) {                                  \
				int64_t idx = 0, ok = 1;                                            \
				unflat(i, g->nsp, g->in, ip);                                       \
				for (int d = 0; d < g->nsp; d++) {                                  \
					int64_t o = ip[d] * g->stride[d] + kp[d] * g->dil[d] - g->pad[d]; \
					if (o < 0 || o >= g->out[d])                                \
						ok = 0;                                             \
					idx = idx * g->out[d] + o;                                  \
				}                                                                   \
				if (ok)                                                             \
					y[idx] += col[i];                                           \
			}                                                                           \
		}                                                                                   \
	}

COL2IM(float, col2im_f)
COL2IM(double, col2im_d)

static void col2im_range(void *ctx, size_t begin, size_t end)
{
	const col2im_job *j = ctx;
	for (size_t m = begin; m < end; m++) {
		if (j->t == OQ_LT_F32)
			col2im_f(j, (int64_t)m);
		else
			col2im_d(j, (int64_t)m);
	}
}

int oq_convt_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w,
		 const void *b, void *y)
{
	oq_conv_geom g;
	size_t es = t == OQ_LT_F32 ? 4 : 8, *aoff = NULL, *boff = NULL, *coff = NULL;
	int64_t cg, mg, rows;
	void *col = NULL;
	int rc = OQ_OK;

	if (oq_linalg_use_ref) {
		oq_convt_ref(t, g0, x, w, b, y);
		return OQ_OK;
	}
	as_2d(g0, &g);
	if (g.n == 0 || g.m == 0 || g.out_size == 0)
		return OQ_OK;
	cg = g.c / g.group;
	mg = g.m / g.group;
	rows = mg * g.k_size;
	col = malloc((size_t)(g.m * g.k_size * g.in_size) * es + 64);
	aoff = oq_calloc((size_t)g.group, sizeof *aoff);
	boff = oq_calloc((size_t)g.group, sizeof *boff);
	coff = oq_calloc((size_t)g.group, sizeof *coff);
	if (!col || !aoff || !boff || !coff) {
		rc = OQ_ENOMEM;
		goto done;
	}
	for (int64_t n = 0; n < g.n; n++) {
		oq_gemm_batch gb;
		col2im_job cj;
		memset(&gb, 0, sizeof gb);
		for (int64_t grp = 0; grp < g.group; grp++) {
			aoff[grp] = (size_t)(grp * cg * rows);
			boff[grp] = (size_t)((n * g.c + grp * cg) * g.in_size);
			coff[grp] = (size_t)(grp * rows * g.in_size);
		}
		gb.t = t;
		gb.ta = 1;
		gb.m = rows;
		gb.n = g.in_size;
		gb.kd = cg;
		gb.alpha = 1;
		gb.beta = 0;
		gb.a = w;
		gb.lda = rows;
		gb.b = x;
		gb.ldb = g.in_size;
		gb.c = col;
		gb.ldc = g.in_size;
		gb.batch = (size_t)g.group;
		gb.aoff = aoff;
		gb.boff = boff;
		gb.coff = coff;
		oq_gemm_run(k, &gb);
		cj.t = t;
		cj.g = &g;
		cj.col = col;
		cj.b = b;
		cj.y = (char *)y + (size_t)(n * g.m * g.out_size) * es;
		oq_k_parallel(k, (size_t)g.m, 1, col2im_range, &cj);
	}
done:
	free(col);
	free(aoff);
	free(boff);
	free(coff);
	return rc;
}

void oq_convt_ref(oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const void *b, void *y)
{
	int64_t cg = g->c / g->group, mg = g->m / g->group;
	int64_t ip[OQ_CONV_MAX_SP], kp[OQ_CONV_MAX_SP];
	size_t ny = (size_t)(g->n * g->m * g->out_size);
	double *acc = calloc(ny ? ny : 1, sizeof *acc);

	if (!acc) { /* reference path for tests: fall back to accumulating in place */
		for (size_t i = 0; i < ny; i++)
			setv(t, y, (int64_t)i, b ? getv(t, b, (int64_t)(i / (size_t)g->out_size) % g->m) : 0);
	} else {
		for (size_t i = 0; i < ny; i++)
			acc[i] = b ? getv(t, b, (int64_t)(i / (size_t)g->out_size) % g->m) : 0;
	}
	for (int64_t n = 0; n < g->n; n++)
		for (int64_t c = 0; c < g->c; c++)
			for (int64_t i = 0; i < g->in_size; i++) {
				double xv = getv(t, x, (n * g->c + c) * g->in_size + i);
				int64_t grp = c / cg;
				unflat(i, g->nsp, g->in, ip);
				for (int64_t mm = 0; mm < mg; mm++)
					for (int64_t q = 0; q < g->k_size; q++) {
						int64_t idx = 0, ok = 1, yi;
						unflat(q, g->nsp, g->k, kp);
						for (int d = 0; d < g->nsp; d++) {
							int64_t o = ip[d] * g->stride[d] + kp[d] * g->dil[d] - g->pad[d];
							if (o < 0 || o >= g->out[d])
								ok = 0;
							idx = idx * g->out[d] + o;
						}
						if (!ok)
							continue;
						yi = (n * g->m + grp * mg + mm) * g->out_size + idx;
						if (acc)
							acc[yi] += xv * getv(t, w, (c * mg + mm) * g->k_size + q);
						else
							setv(t, y, yi, getv(t, y, yi) + xv * getv(t, w, (c * mg + mm) * g->k_size + q));
					}
			}
	if (acc)
		for (size_t i = 0; i < ny; i++)
			setv(t, y, (int64_t)i, acc[i]);
	free(acc);
}
