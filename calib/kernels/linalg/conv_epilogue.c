/*
 * conv_epilogue.c - the fused epilogue of a convolution (oq_kfuse,
 * kernel.h): per output channel, the BatchNormalization affine map, an
 * activation and the steps after it (element-wise ops with constants or
 * tensors, gates), applied to each output tile or row while it is in cache.
 *
 * Every expression is the one of the separate kernel it replaces - BN as
 * (float)(x * scale + shift) in double, activations and steps as the
 * element-wise kernels' float32 formulas in the same operand order - so a
 * fused group's outputs are bit-identical to its nodes run one by one.
 * The AVX-512 versions (epi_regs: BN, Relu and Clip on the registers, the
 * steps EPI_VECS vectors at a time) and the AVX2 loops of the steps give
 * the same bits as the portable loops (tests compare them).
 */
#include "calib/kernels/linalg/conv_internal.h"
#include "calib/exec/cpu.h"
#include "calib/kernels/vmath.h"

#include <math.h>
#include <string.h>

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
	case OQ_ACT_SIGMOID: /* as elementwise.c's float Sigmoid */
		oq_vm_sigmoid(y, y, n);
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

#if defined(HAVE_X86_KERNELS)
/*
 * bop_scalar (t NULL) and bop_vec 8 values at a time on AVX2, the same IEEE
 * operation in the same operand order per value; returns how many it did
 * (a multiple of 8).
 */
AVX2_FMA static size_t bop_avx2(int bop, int rev, float v, const float *t, float *y, size_t n)
{
	const __m256 c = _mm256_set1_ps(v);
	size_t i = 0;
#define BOP_LOOP(EXPR)                                                    \
	for (; i + 8 <= n; i += 8) {                                      \
		__m256 x = _mm256_loadu_ps(y + i), z = t ? _mm256_loadu_ps(t + i) : c; \
		_mm256_storeu_ps(y + i, EXPR);                            \
	}                                                                 \
	break
	switch (bop * 2 + !!rev) {
	case OQ_EPI_ADD * 2: BOP_LOOP(_mm256_add_ps(x, z));
	case OQ_EPI_ADD * 2 + 1: BOP_LOOP(_mm256_add_ps(z, x));
	case OQ_EPI_SUB * 2: BOP_LOOP(_mm256_sub_ps(x, z));
	case OQ_EPI_SUB * 2 + 1: BOP_LOOP(_mm256_sub_ps(z, x));
	case OQ_EPI_MUL * 2: BOP_LOOP(_mm256_mul_ps(x, z));
	case OQ_EPI_MUL * 2 + 1: BOP_LOOP(_mm256_mul_ps(z, x));
	case OQ_EPI_DIV * 2: BOP_LOOP(_mm256_div_ps(x, z));
	case OQ_EPI_DIV * 2 + 1: BOP_LOOP(_mm256_div_ps(z, x));
	default: break;
	}
#undef BOP_LOOP
	return i;
}

/* qdq_scalar 8 values at a time on AVX2 (each choice a compare and blend: the same bits); a multiple of 8. */
AVX2_FMA static size_t qdq_avx2(const oq_epi_step *st, float *y, size_t n)
{
	const __m256 magic = _mm256_set1_ps(12582912.0f), qs = _mm256_set1_ps(st->qs), lo = _mm256_set1_ps(st->qlo);
	const __m256 hi = _mm256_set1_ps(st->qhi), off = _mm256_set1_ps(st->qoff), ds = _mm256_set1_ps(st->ds);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_div_ps(_mm256_loadu_ps(y + i), qs);
		v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
		v = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
		v = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
		v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_add_ps(v, off), ds));
	}
	return i;
}
#endif

/* y op= v (t NULL) or y op= t, the vector loop first where the CPU has one. */
static void bop_run(int bop, int rev, float v, const float *t, float *y, size_t n)
{
#if defined(HAVE_X86_KERNELS)
	if (n >= 8 && oq_conv_use_avx2()) {
		size_t k = bop_avx2(bop, rev, v, t, y, n);
		y += k;
		t = t ? t + k : NULL;
		n -= k;
	}
#endif
	if (t)
		bop_vec(bop, rev, t, y, n);
	else
		bop_scalar(bop, rev, v, y, n);
}

#define GATE_CHUNK 256

/* An OQ_EPI_QDQ step on y[0..n): oq_quant_row8's operations, then the DQ kernel's (see kernel.h). */
static void qdq_scalar(const oq_epi_step *st, float *y, size_t n)
{
	const float magic = 12582912.0f, qs = st->qs, lo = st->qlo, hi = st->qhi, off = st->qoff, ds = st->ds;

	for (size_t i = 0; i < n; i++) {
		float v = y[i] / qs;
		v = v == v ? v : 0.0f;
		v = v < lo ? lo : v;
		v = v > hi ? hi : v;
		v = (v + magic) - magic;
		y[i] = (v + off) * ds;
	}
}

/*
 * Steps [s, s + ns) of ep on y[0..n), the elements of channel ch starting at
 * element off of the output (where the tensor operands are read).
 */
void oq_conv_epi_steps(const oq_kfuse *ep, const oq_epi_step *s, int ns, int64_t ch, size_t off, float *y, size_t n)
{
	for (int i = 0; i < ns; i++) {
		const oq_epi_step *st = &s[i];
		switch (st->kind) {
		case OQ_EPI_CONST:
			bop_run(st->bop, st->rev, st->c ? st->c[ch] : st->s, NULL, y, n);
			break;
		case OQ_EPI_TENSOR:
			bop_run(st->bop, st->rev, 0.0f, ep->t[st->t] + off, y, n);
			break;
		case OQ_EPI_ACT:
			oq_act_apply(&st->act, y, n);
			break;
		case OQ_EPI_QDQ: {
			size_t k = 0;
#if defined(HAVE_X86_KERNELS)
			if (oq_conv_use_avx2())
				k = qdq_avx2(st, y, n);
#endif
			qdq_scalar(st, y + k, n - k);
			break;
		}
		case OQ_EPI_GATE:
			/* g(y) of a chunk in tmp, then y * g(y) (or g(y) * y, the Mul's operand order) */
			for (size_t c0 = 0; c0 < n; c0 += GATE_CHUNK) {
				float tmp[GATE_CHUNK];
				size_t m = n - c0 < GATE_CHUNK ? n - c0 : GATE_CHUNK;
				if (st->n_gate >= 1 && st[1].kind == OQ_EPI_ACT && st[1].act.kind == OQ_ACT_SIGMOID) {
					/* SiLU and its kin: the first step straight from y, no copy */
					oq_vm_sigmoid(y + c0, tmp, m);
					oq_conv_epi_steps(ep, st + 2, st->n_gate - 1, ch, off + c0, tmp, m);
				} else {
					memcpy(tmp, y + c0, m * sizeof *tmp);
					oq_conv_epi_steps(ep, st + 1, st->n_gate, ch, off + c0, tmp, m);
				}
				bop_run(OQ_EPI_MUL, st->rev, 0.0f, tmp, y + c0, m);
			}
			i += st->n_gate;
			break;
		default:
			break;
		}
	}
}

#if defined(HAVE_X86_KERNELS)
AVX512 static void epi_apply_avx512(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n);

/*
 * oq_epi_apply on AVX2: BN and Relu / Clip (lo <= hi) in one pass of 8
 * lanes, with the portable loops' expressions (BN: x * a + b in double,
 * rounded once; Relu and Clip as the SSE loops of oq_act_apply), then the
 * late activation and the steps as there. The same bits.
 */
AVX2_FMA static void epi_apply_avx2(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n)
{
	oq_conv_epi2 e;

	if (oq_conv_avx2_epi(ep, ch, &e)) {
		/* full vectors in place; the tail through a copy (masked stores are slow on some CPUs) */
		for (size_t i = 0; i < n; i += 8) {
			float t[8] = {0};
			float *p = n - i >= 8 ? y + i : t;
			__m256 v;
			if (p == t)
				memcpy(t, y + i, (n - i) * sizeof *t);
			v = oq_conv_avx2_epi8(&e, 0, _mm256_loadu_ps(p));
			_mm256_storeu_ps(p, v);
			if (p == t)
				memcpy(y + i, t, (n - i) * sizeof *t);
		}
	}
	oq_conv_epi_after_regs(ep, ch, off, y, n);
}

int oq_conv_avx2_epi(const oq_kfuse *ep, int64_t ch0, oq_conv_epi2 *e)
{
	int late = !ep || oq_conv_late_act(ep);

	memset(e, 0, sizeof *e);
	if (!ep)
		return 0;
	e->scale = ep->scale ? ep->scale + ch0 : NULL;
	e->shift = ep->scale ? ep->shift + ch0 : NULL;
	if (!late && (ep->act.kind == OQ_ACT_RELU || ep->act.kind == OQ_ACT_CLIP)) {
		e->act = 1;
		e->lo = ep->act.kind == OQ_ACT_RELU ? 0.0f : ep->act.a;
		e->hi = ep->act.kind == OQ_ACT_RELU ? INFINITY : ep->act.b;
	}
	return e->scale || e->act;
}

void oq_conv_epi_after_regs(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n)
{
	if (oq_conv_late_act(ep))
		oq_act_apply(&ep->act, y, n);
	oq_conv_epi_steps(ep, ep->steps, ep->n_steps, ch, off, y, n);
}
#endif

void oq_epi_apply(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n)
{
	if (!ep)
		return;
#if defined(HAVE_X86_KERNELS)
	if (oq_conv_use_avx512()) {
		epi_apply_avx512(ep, ch, off, y, n);
		return;
	}
	if (oq_conv_use_avx2()) {
		epi_apply_avx2(ep, ch, off, y, n);
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
	oq_conv_epi_steps(ep, ep->steps, ep->n_steps, ch, off, y, n);
}

/* --------------------------------------------- the epilogue in registers */

int oq_conv_late_act(const oq_kfuse *ep)
{
	return ep && ep->act.kind != OQ_ACT_NONE && ep->act.kind != OQ_ACT_RELU &&
	       !(ep->act.kind == OQ_ACT_CLIP && ep->act.a <= ep->act.b);
}

int oq_conv_res_steps(const oq_kfuse *ep)
{
	const oq_epi_step *s = ep->steps;
	if (ep->n_steps < 1 || ep->n_steps > 2 || s[0].kind != OQ_EPI_TENSOR || s[0].bop != OQ_EPI_ADD)
		return 0;
	if (ep->n_steps == 1)
		return 1;
	return s[1].kind == OQ_EPI_ACT && s[1].act.kind == OQ_ACT_RELU ? 2 : 0;
}

#if defined(HAVE_X86_KERNELS)
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

AVX512 void oq_conv_epi_regs_make(const oq_kfuse *ep, int64_t ch, int late, epi_regs *ev)
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
 * An OQ_EPI_QDQ step on the EPI_VECS vectors v, the bits of qdq_scalar (the
 * Q kernel divides). A division per value would dominate the epilogue, so
 * with st->qr each quotient is first taken as v * qr: two roundings, within
 * 4 ulp of the correctly rounded v / qs (qs and qr normal: no overflow to
 * infinity or zero that the quotient lacks), so after the same NaN rule
 * and clamp (|u| <= 255: 4 ulp < 2^-14) it rounds to the same integer
 * unless it lies within 2^-12 of a half-integer (its distance to the
 * integer it rounds to >= 1/2 - 2^-12); when a lane does, the block takes
 * the division. Past the clamp both are clamped, or both
 * within 4 ulp of the bound (an integer), which rounds to the bound. The
 * vectors go through each stage together (independent chains, one branch).
 */
AVX512 static void qdq_avx512(const oq_epi_step *st, __m512 *v)
{
	const __m512 lo = _mm512_set1_ps(st->qlo), hi = _mm512_set1_ps(st->qhi);
	const __m512 magic = _mm512_set1_ps(12582912.0f), off = _mm512_set1_ps(st->qoff), ds = _mm512_set1_ps(st->ds);
	__m512 u[EPI_VECS];
	__mmask16 near = 0;

	if (st->qr != 0.0f) {
		const __m512 qr = _mm512_set1_ps(st->qr), t0 = _mm512_set1_ps(0.5f - 1.0f / 4096);
		for (int q = 0; q < EPI_VECS; q++) {
			__m512 w = _mm512_mul_ps(v[q], qr);
			w = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(w, w, _CMP_ORD_Q), w);
			w = _mm512_min_ps(_mm512_max_ps(w, lo), hi);
			/* |w| <= 255: rounding to nearest even as the +- 1.5 * 2^23 of the Q kernel does */
			u[q] = _mm512_roundscale_ps(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			near |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(w, u[q])), t0, _CMP_GE_OQ);
		}
	}
	if (st->qr == 0.0f || near) {
		const __m512 qs = _mm512_set1_ps(st->qs);
		for (int q = 0; q < EPI_VECS; q++) {
			__m512 w = _mm512_div_ps(v[q], qs);
			w = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(w, w, _CMP_ORD_Q), w);
			w = _mm512_min_ps(_mm512_max_ps(w, lo), hi);
			u[q] = _mm512_sub_ps(_mm512_add_ps(w, magic), magic);
		}
	}
	for (int q = 0; q < EPI_VECS; q++)
		v[q] = _mm512_mul_ps(_mm512_add_ps(u[q], off), ds);
}

/*
 * Steps [i0, i0 + ns) of ev->ep on EPI_VECS vectors v (128 values from output
 * element o; lanes m[q] of vector q valid), step by step over the block so
 * the dispatch is paid once per 128 values: the expressions of
 * oq_conv_epi_steps, so the same bits (Relu and Clip as act_vec).
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
			: s[i].kind == OQ_EPI_QDQ ? 19
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
		case 19: /* QDQ: the bits of qdq_scalar */
			qdq_avx512(&s[i], v);
			break;
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

/*
 * y[0..n) (output element off on): BN and Relu / Clip when epi, then the
 * steps when ev->steps, EPI_VECS vectors at a time.
 */
AVX512 void oq_conv_epi_row(const epi_regs *ev, int epi, size_t off, float *y, size_t n)
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
	int late = oq_conv_late_act(ep);
	epi_regs ev;

	oq_conv_epi_regs_make(ep, ch, late, &ev);
	if (ev.steps)
		oq_conv_epi_row(&ev, 1, off, y, n);
	else if (ev.bn || ev.act != OQ_ACT_NONE)
		for (size_t i = 0; i < n; i += 16) {
			__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1u);
			_mm512_mask_storeu_ps(y + i, m, epi_regs_vec(_mm512_maskz_loadu_ps(m, y + i), &ev));
		}
	if (late)
		oq_act_apply(&ep->act, y, n);
	if (!ev.steps)
		oq_conv_epi_steps(ep, ep->steps, ep->n_steps, ch, off, y, n);
}

AVX512 void oq_conv_epi_rest(const epi_regs *ev, int late, size_t off, float *y, size_t n)
{
	const oq_kfuse *ep = ev->ep;

	if (late)
		oq_act_apply(&ep->act, y, n);
	if (ev->steps)
		oq_conv_epi_row(ev, 0, off, y, n);
	else
		oq_conv_epi_steps(ep, ep->steps, ep->n_steps, ev->ch, off, y, n);
}

/*
 * epi_apply_avx512 row by row, with the BN / Relu / Clip loop inlined for
 * the usual case without steps (no per-row setup beyond two broadcasts).
 */
AVX512 void oq_conv_epi_tile(const oq_kfuse *ep, int64_t ch0, int64_t mm, size_t off, float *y, int64_t ldc,
			     int64_t pp)
{
	int bn = ep->scale != NULL, act = ep->act.kind;

	if (ep->n_steps || oq_conv_late_act(ep)) {
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
#endif
