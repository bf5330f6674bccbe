/*
 * elementwise.c - element-wise kernels: arithmetic, comparison and logic
 * with numpy broadcasting, unary math and activations, Clip, Where,
 * bit operations, variadic Max/Min/Sum/Mean (Cast/CastLike: convert.c).
 *
 * Three compute domains (see elementwise.h): 'f' native float32, used when every
 * operand and the result are float32 (the hot case: contiguous same-shape
 * tensors, a scalar or a broadcast row); 'd' double, for any float dtype
 * (float16/bfloat16/float8 convert exactly; + - * / give the same result
 * as float32 arithmetic after the final rounding, since double has more
 * than 2p+2 bits); 'i' int64 for integer and bool dtypes (wrapping
 * arithmetic like numpy/ORT; division by zero gives 0 rather than a trap).
 *
 * Broadcasting: the output shape is the numpy broadcast of the inputs; a
 * plan drops size-1 output dims, gives every input stride 0 along its
 * broadcast dims and merges adjacent dims that are contiguous for all
 * inputs, so the innermost (merged) dim has input strides 0 or 1 and is
 * processed as rows. Work is split into blocks of rows (or of one long
 * row) for oq_k_parallel; each element is computed the same way whatever
 * block it falls in, so results do not depend on the thread count.
 * Opset < 7 binary ops: `broadcast`/`axis` attributes place B at `axis`.
 *
 * NaN: Max/Min propagate NaN (numpy maximum/minimum); Clip and the
 * activations keep NaN inputs NaN; Round is half to even (nearbyint in
 * the default rounding mode).
 */
#include "calib/kernels/elementwise/elementwise.h"
#include "calib/kernels/vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements per parallel work block along a row. */
#define BLK 4096
/* Minimum elements per thread. */
#define GRAIN (1 << 15)

/* ------------------------------------------------------------ broadcasting */

typedef struct bc_plan {
	int rank;                        /* merged rank (>= 1) */
	size_t dims[OQ_RT_MAX_RANK];     /* merged output dims */
	size_t st[3][OQ_RT_MAX_RANK];    /* per input: element stride per merged dim (0: broadcast) */
	int n;                           /* number of inputs (<= 3) */
	size_t inner;                    /* dims[rank - 1] */
	size_t rows;                     /* product of the outer dims */
	size_t nblk;                     /* blocks per row */
} bc_plan;

/* Plans inputs `in` (n <= 3, shapes already known to broadcast to od) over output shape od. */
static int bc_make(bc_plan *p, int n, const oq_rt *const *in, int ro, const int64_t *od)
{
	size_t dims[OQ_RT_MAX_RANK], st[3][OQ_RT_MAX_RANK];
	int r = 0;

	memset(p, 0, sizeof *p);
	p->n = n;
	for (int d = 0; d < ro; d++) {
		for (int k = 0; k < n; k++) {
			int kd = d - (ro - in[k]->rank);
			int64_t id = kd < 0 ? 1 : in[k]->dims[kd];
			size_t s = 1;
			if (id != od[d] && id != 1)
				return OQ_EINVAL;
			for (int j = kd + 1; kd >= 0 && j < in[k]->rank; j++)
				s *= (size_t)in[k]->dims[j];
			st[k][r] = id == 1 ? 0 : s;
		}
		if (od[d] != 1)
			dims[r++] = (size_t)od[d];
	}
	if (r == 0) {
		dims[r] = 1;
		for (int k = 0; k < n; k++)
			st[k][r] = 0;
		r = 1;
	}
	/* merge dims that are contiguous for every input, outermost first */
	p->rank = 0;
	for (int d = 0; d < r; d++) {
		int m = p->rank - 1, ok = p->rank > 0;
		for (int k = 0; ok && k < n; k++)
			ok = p->st[k][m] == st[k][d] * dims[d];
		if (ok) {
			p->dims[m] *= dims[d];
			for (int k = 0; k < n; k++)
				p->st[k][m] = st[k][d];
		} else {
			p->dims[p->rank] = dims[d];
			for (int k = 0; k < n; k++)
				p->st[k][p->rank] = st[k][d];
			p->rank++;
		}
	}
	p->inner = p->dims[p->rank - 1];
	p->rows = 1;
	for (int d = 0; d < p->rank - 1; d++)
		p->rows *= p->dims[d];
	p->nblk = (p->inner + BLK - 1) / BLK;
	return OQ_OK;
}

/* Block u: output offset, per-input offsets and inner strides, length. */
static size_t bc_block(const bc_plan *p, size_t u, size_t *yoff, size_t *off, int *s)
{
	size_t row = u / p->nblk, col = (u % p->nblk) * BLK, rw = row;
	for (int k = 0; k < p->n; k++)
		off[k] = 0;
	for (int d = p->rank - 2; d >= 0; d--) {
		size_t idx = rw % p->dims[d];
		rw /= p->dims[d];
		for (int k = 0; k < p->n; k++)
			off[k] += idx * p->st[k][d];
	}
	for (int k = 0; k < p->n; k++) {
		s[k] = p->st[k][p->rank - 1] != 0;
		off[k] += col * (size_t)s[k];
	}
	*yoff = row * p->inner + col;
	return p->inner - col < BLK ? p->inner - col : BLK;
}

static size_t bc_grain(const bc_plan *p)
{
	size_t per = p->inner < BLK ? p->inner : BLK;
	return (GRAIN + per - 1) / (per ? per : 1);
}

static const char *shape_str(const oq_rt *t, char *buf, size_t n)
{
	return oq_rt_describe(t, buf, n);
}

/* Output shape of broadcasting all of in[0..n) (NULL entries skipped). */
static int bc_shape(oq_kctx *k, const oq_rt *const *in, size_t n, int *rank, int64_t *dims)
{
	*rank = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t tmp[OQ_RT_MAX_RANK];
		int rr, rc;
		char a[160], b[160];
		if (!in[i])
			continue;
		rc = oq_broadcast(*rank, dims, in[i]->rank, in[i]->dims, &rr, tmp);
		if (rc) {
			oq_rt cur;
			memset(&cur, 0, sizeof cur);
			cur.dtype = in[i]->dtype;
			cur.rank = *rank;
			memcpy(cur.dims, dims, sizeof cur.dims);
			return oq_k_err(k, rc == OQ_EUNSUP ? OQ_EUNSUP : OQ_EINVAL,
					"input #%zu %s does not broadcast with %s", i, shape_str(in[i], a, sizeof a),
					shape_str(&cur, b, sizeof b));
		}
		*rank = rr;
		memcpy(dims, tmp, sizeof tmp);
	}
	return OQ_OK;
}

/* --------------------------------------------------------------- params */

typedef struct op_params {
	double alpha, beta, gamma;  /* activation attributes; Clip bounds (lo = alpha, hi = beta) */
	int64_t ilo, ihi;           /* integer Clip bounds */
	int has_lo, has_hi;         /* integer Clip: bound given */
	int flag;                   /* Mod: fmod; IsInf: detect bits; BitShift: 1 = right */
	int uns;                    /* unsigned integer operands */
} op_params;

/* ------------------------------------------------------------ binary ops */

enum {
	B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MOD, B_MAX, B_MIN, B_PRELU,
	B_EQ, B_LT, B_LE, B_GT, B_GE, B_AND, B_OR, B_XOR,
	B_BAND, B_BOR, B_BXOR, B_SHIFT,
};

static int b_is_bool_out(int op)
{
	return op >= B_EQ && op <= B_XOR;
}

/* Loops y = EXPR(x, z) over n elements with a/b strides 0 or 1 (sa, sb). */
#define LOOP2(TA, TY, EXPR)                                                      \
	do {                                                                     \
		const TA *a_ = a, *b_ = b;                                       \
		TY *y_ = y;                                                      \
		if (sa && sb) {                                                  \
			for (size_t i = 0; i < n; i++) {                         \
				TA x = a_[i], z = b_[i];                         \
				y_[i] = (TY)(EXPR);                              \
			}                                                        \
		} else if (sa) {                                                 \
			TA z = b_[0];                                            \
			for (size_t i = 0; i < n; i++) {                         \
				TA x = a_[i];                                    \
				y_[i] = (TY)(EXPR);                              \
			}                                                        \
		} else if (sb) {                                                 \
			TA x = a_[0];                                            \
			for (size_t i = 0; i < n; i++) {                         \
				TA z = b_[i];                                    \
				y_[i] = (TY)(EXPR);                              \
			}                                                        \
		} else {                                                         \
			TA x = a_[0], z = b_[0];                                 \
			TY r_ = (TY)(EXPR);                                      \
			for (size_t i = 0; i < n; i++)                           \
				y_[i] = r_;                                      \
		}                                                                \
	} while (0)

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "calib/exec/cpu.h"
#define HAVE_ROW_AVX512 1

/* row_f's Add/Sub/Mul/Div 16 elements at a time (a or b a broadcast scalar when its stride is 0),
 * the same IEEE operation per element; returns how many it did (a multiple of 16). y may be a or b
 * (each vector is loaded before its store). */
__attribute__((target("avx512f"))) static size_t row_f_avx512(int op, size_t n, const float *a, int sa,
								  const float *b, int sb, float *y)
{
	const __m512 a0 = _mm512_set1_ps(a[0]), b0 = _mm512_set1_ps(b[0]);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 x = sa ? _mm512_loadu_ps(a + i) : a0, z = sb ? _mm512_loadu_ps(b + i) : b0, r;
		switch (op) {
		case B_ADD: r = _mm512_add_ps(x, z); break;
		case B_SUB: r = _mm512_sub_ps(x, z); break;
		case B_MUL: r = _mm512_mul_ps(x, z); break;
		default: r = _mm512_div_ps(x, z); break;
		}
		_mm512_storeu_ps(y + i, r);
	}
	return i;
}

/* row_f_avx512 on 8 lanes (AVX2 CPUs without AVX-512): a multiple of 8. */
__attribute__((target("avx2"))) static size_t row_f_avx2(int op, size_t n, const float *a, int sa, const float *b,
							   int sb, float *y)
{
	const __m256 a0 = _mm256_set1_ps(a[0]), b0 = _mm256_set1_ps(b[0]);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 x = sa ? _mm256_loadu_ps(a + i) : a0, z = sb ? _mm256_loadu_ps(b + i) : b0, r;
		switch (op) {
		case B_ADD: r = _mm256_add_ps(x, z); break;
		case B_SUB: r = _mm256_sub_ps(x, z); break;
		case B_MUL: r = _mm256_mul_ps(x, z); break;
		default: r = _mm256_div_ps(x, z); break;
		}
		_mm256_storeu_ps(y + i, r);
	}
	return i;
}

/* The vector loop the CPU has (oq_elementwise_simd allowing): 16 AVX-512, 8 AVX2, else 0. */
static int simd_lanes(void)
{
	if (!oq_elementwise_simd)
		return 0;
	if (oq_elementwise_simd == 1 && oq_cpu_avx512())
		return 16;
	return oq_cpu_avx2_fma() ? 8 : 0;
}
#endif

/*
 * Which vector loops float32 Add/Sub/Mul/Div rows and Clip/Relu may take: 1 the CPU's best
 * (AVX-512, else AVX2), 2 at most AVX2, 0 none (tests compare all three).
 */
int oq_elementwise_simd = 1;

static void row_f(int op, size_t n, const float *a, int sa, const float *b, int sb, float *y)
{
#ifdef HAVE_ROW_AVX512
	int lanes;
	if (n >= 8 && (sa || sb) && (op == B_ADD || op == B_SUB || op == B_MUL || op == B_DIV) &&
	    (lanes = simd_lanes()) != 0) {
		size_t k = lanes == 16 ? row_f_avx512(op, n, a, sa, b, sb, y) : row_f_avx2(op, n, a, sa, b, sb, y);
		a += sa ? k : 0;
		b += sb ? k : 0;
		y += k;
		n -= k;
	}
#endif
	switch (op) {
	case B_ADD: LOOP2(float, float, x + z); break;
	case B_SUB: LOOP2(float, float, x - z); break;
	case B_MUL: LOOP2(float, float, x * z); break;
	case B_DIV: LOOP2(float, float, x / z); break;
	case B_MAX: LOOP2(float, float, (x > z || x != x) ? x : z); break;
	case B_MIN: LOOP2(float, float, (x < z || x != x) ? x : z); break;
	case B_PRELU: LOOP2(float, float, x < 0 ? x * z : x); break;
	default: break;
	}
}

static double py_fmod(double x, double z)
{
	double r = fmod(x, z);
	if (r != 0 && ((r < 0) != (z < 0)))
		r += z;
	return r;
}

static void row_d(int op, const op_params *p, size_t n, const double *a, int sa, const double *b, int sb, void *y)
{
	switch (op) {
	case B_ADD: LOOP2(double, double, x + z); break;
	case B_SUB: LOOP2(double, double, x - z); break;
	case B_MUL: LOOP2(double, double, x * z); break;
	case B_DIV: LOOP2(double, double, x / z); break;
	case B_POW: LOOP2(double, double, pow(x, z)); break;
	case B_MOD:
		if (p->flag)
			LOOP2(double, double, fmod(x, z));
		else
			LOOP2(double, double, py_fmod(x, z));
		break;
	case B_MAX: LOOP2(double, double, (x > z || x != x) ? x : z); break;
	case B_MIN: LOOP2(double, double, (x < z || x != x) ? x : z); break;
	case B_PRELU: LOOP2(double, double, x < 0 ? x * z : x); break;
	case B_EQ: LOOP2(double, uint8_t, x == z); break;
	case B_LT: LOOP2(double, uint8_t, x < z); break;
	case B_LE: LOOP2(double, uint8_t, x <= z); break;
	case B_GT: LOOP2(double, uint8_t, x > z); break;
	case B_GE: LOOP2(double, uint8_t, x >= z); break;
	default: break;
	}
}

static int64_t idiv(int64_t x, int64_t z, int uns)
{
	if (z == 0)
		return 0;
	if (uns)
		return (int64_t)((uint64_t)x / (uint64_t)z);
	if (x == INT64_MIN && z == -1)
		return INT64_MIN;
	return x / z;
}

static int64_t imod(int64_t x, int64_t z, int uns, int c_style)
{
	int64_t r;
	if (z == 0)
		return 0;
	if (uns)
		return (int64_t)((uint64_t)x % (uint64_t)z);
	if (z == -1)
		return 0;
	r = x % z;
	if (!c_style && r != 0 && ((r < 0) != (z < 0)))
		r += z;
	return r;
}

static int64_t ipow(int64_t x, int64_t z, int uns)
{
	uint64_t r = 1, base = (uint64_t)x;
	if (!uns && z < 0)
		return x == 1 ? 1 : x == -1 ? ((z & 1) ? -1 : 1) : 0;
	for (uint64_t e = (uint64_t)z; e; e >>= 1) {
		if (e & 1)
			r *= base;
		base *= base;
	}
	return (int64_t)r;
}

static int ilt(int64_t x, int64_t z, int uns)
{
	return uns ? (uint64_t)x < (uint64_t)z : x < z;
}

static void row_i(int op, const op_params *p, size_t n, const int64_t *a, int sa, const int64_t *b, int sb, void *y)
{
	int u = p->uns;
	switch (op) {
	case B_ADD: LOOP2(int64_t, int64_t, (uint64_t)x + (uint64_t)z); break;
	case B_SUB: LOOP2(int64_t, int64_t, (uint64_t)x - (uint64_t)z); break;
	case B_MUL: LOOP2(int64_t, int64_t, (uint64_t)x * (uint64_t)z); break;
	case B_DIV: LOOP2(int64_t, int64_t, idiv(x, z, u)); break;
	case B_POW: LOOP2(int64_t, int64_t, ipow(x, z, u)); break;
	case B_MOD: LOOP2(int64_t, int64_t, imod(x, z, u, p->flag)); break;
	case B_MAX: LOOP2(int64_t, int64_t, ilt(x, z, u) ? z : x); break;
	case B_MIN: LOOP2(int64_t, int64_t, ilt(z, x, u) ? z : x); break;
	case B_PRELU: LOOP2(int64_t, int64_t, !u && x < 0 ? (int64_t)((uint64_t)x * (uint64_t)z) : x); break;
	case B_EQ: LOOP2(int64_t, uint8_t, x == z); break;
	case B_LT: LOOP2(int64_t, uint8_t, ilt(x, z, u)); break;
	case B_LE: LOOP2(int64_t, uint8_t, !ilt(z, x, u)); break;
	case B_GT: LOOP2(int64_t, uint8_t, ilt(z, x, u)); break;
	case B_GE: LOOP2(int64_t, uint8_t, !ilt(x, z, u)); break;
	case B_AND: LOOP2(int64_t, uint8_t, (x != 0) & (z != 0)); break;
	case B_OR: LOOP2(int64_t, uint8_t, (x != 0) | (z != 0)); break;
	case B_XOR: LOOP2(int64_t, uint8_t, (x != 0) ^ (z != 0)); break;
	case B_BAND: LOOP2(int64_t, int64_t, x & z); break;
	case B_BOR: LOOP2(int64_t, int64_t, x | z); break;
	case B_BXOR: LOOP2(int64_t, int64_t, x ^ z); break;
	case B_SHIFT:
		if (p->flag)
			LOOP2(int64_t, int64_t, (uint64_t)z >= 64 ? 0 : (uint64_t)x >> z);
		else
			LOOP2(int64_t, int64_t, (uint64_t)z >= 64 ? 0 : (uint64_t)x << z);
		break;
	default: break;
	}
}

typedef struct bjob {
	bc_plan p;
	const oq_rt *a, *b;
	oq_rt *y;
	int op;
	char dom;          /* 'f', 'd' or 'i' */
	op_params par;
} bjob;

static void bin_range(void *ctx, size_t ub, size_t ue)
{
	const bjob *j = ctx;
	for (size_t u = ub; u < ue; u++) {
		size_t yoff, off[3], n;
		int s[3];
		n = bc_block(&j->p, u, &yoff, off, s);
		if (j->dom == 'f') {
			row_f(j->op, n, (const float *)j->a->data + off[0], s[0], (const float *)j->b->data + off[1], s[1],
			      (float *)j->y->data + yoff);
			continue;
		}
		for (size_t c = 0; c < n; c += OQ_ELEMENTWISE_CHUNK) {
			size_t m = n - c < OQ_ELEMENTWISE_CHUNK ? n - c : OQ_ELEMENTWISE_CHUNK;
			size_t ao = off[0] + c * (size_t)s[0], bo = off[1] + c * (size_t)s[1];
			if (j->dom == 'd') {
				double av[OQ_ELEMENTWISE_CHUNK], bv[OQ_ELEMENTWISE_CHUNK], yv[OQ_ELEMENTWISE_CHUNK];
				oq_elementwise_load_double(j->a, ao, s[0], s[0] ? m : 1, av);
				oq_elementwise_load_double(j->b, bo, s[1], s[1] ? m : 1, bv);
				if (b_is_bool_out(j->op)) {
					row_d(j->op, &j->par, m, av, s[0], bv, s[1], (uint8_t *)j->y->data + yoff + c);
				} else {
					row_d(j->op, &j->par, m, av, s[0], bv, s[1], yv);
					oq_elementwise_store_double(j->y, yoff + c, m, yv, 1);
				}
			} else {
				int64_t av[OQ_ELEMENTWISE_CHUNK], bv[OQ_ELEMENTWISE_CHUNK], yv[OQ_ELEMENTWISE_CHUNK];
				oq_elementwise_load_int64(j->a, ao, s[0], s[0] ? m : 1, av);
				oq_elementwise_load_int64(j->b, bo, s[1], s[1] ? m : 1, bv);
				if (b_is_bool_out(j->op)) {
					row_i(j->op, &j->par, m, av, s[0], bv, s[1], (uint8_t *)j->y->data + yoff + c);
				} else {
					row_i(j->op, &j->par, m, av, s[0], bv, s[1], yv);
					oq_elementwise_store_int64(j->y, yoff + c, m, yv, j->par.uns);
				}
			}
		}
	}
}

/* Runs y = op(a, b) with y already allocated in the broadcast shape. */
static int bin_run(oq_kctx *k, int op, const oq_rt *a, const oq_rt *b, oq_rt *y, char dom, const op_params *par)
{
	bjob j;
	const oq_rt *in[2] = {a, b};
	char s1[160], s2[160];

	if (bc_make(&j.p, 2, in, y->rank, y->dims))
		return oq_k_err(k, OQ_EINVAL, "inputs %s and %s do not broadcast", shape_str(a, s1, sizeof s1),
				shape_str(b, s2, sizeof s2));
	if (y->nelem == 0)
		return OQ_OK;
	j.a = a;
	j.b = b;
	j.y = y;
	j.op = op;
	j.dom = dom;
	j.par = *par;
	if (oq_dtype_is_subbyte(y->dtype))
		bin_range(&j, 0, j.p.rows * j.p.nblk);
	else
		oq_k_parallel(k, j.p.rows * j.p.nblk, bc_grain(&j.p), bin_range, &j);
	return OQ_OK;
}

static int is_float(int dt)
{
	return oq_dtype_kind(dt) == 'f';
}

static int is_int(int dt)
{
	char c = oq_dtype_kind(dt);
	return c == 's' || c == 'u';
}

/* Opset < 7: B placed at `axis` of A when `broadcast` is set. */
static int legacy_b(oq_kctx *k, const oq_rt *a, const oq_rt *b, oq_rt *view)
{
	const oq_attr *ax = oq_k_attr(k, "axis");
	int64_t axis;
	*view = *b;
	if (k->opset >= 7 || !oq_k_int(k, "broadcast", 0) || !ax)
		return OQ_OK;
	axis = ax->i < 0 ? ax->i + a->rank : ax->i;
	if (axis < 0 || axis + b->rank > a->rank)
		return oq_k_err(k, OQ_EINVAL, "axis %lld does not fit B (rank %d) into A (rank %d)", (long long)ax->i,
				b->rank, a->rank);
	view->rank = a->rank - (int)axis;
	for (int i = 0; i < view->rank; i++)
		view->dims[i] = i < b->rank ? b->dims[i] : 1;
	return OQ_OK;
}

/* Binary kernel body: checks dtypes, allocates the output, picks the domain. */
static int binary(oq_kctx *k, int op)
{
	const oq_rt *a = oq_k_in(k, 0), *b0 = oq_k_in(k, 1);
	const oq_rt *in[2];
	oq_rt bv, *y;
	int rank, rc, out_dt;
	int64_t dims[OQ_RT_MAX_RANK];
	op_params par;
	char dom;

	if (!a || !b0)
		return oq_k_err(k, OQ_EINVAL, "needs two inputs");
	if ((rc = legacy_b(k, a, b0, &bv)))
		return rc;
	if (!oq_elementwise_numeric(a->dtype) || !oq_elementwise_numeric(b0->dtype))
		return oq_k_err(k, OQ_EUNSUP, "unsupported input types %s, %s", oq_dtype_name(a->dtype),
				oq_dtype_name(b0->dtype));
	if (op != B_POW && a->dtype != b0->dtype)
		return oq_k_err(k, OQ_EINVAL, "inputs have different types %s and %s", oq_dtype_name(a->dtype),
				oq_dtype_name(b0->dtype));
	memset(&par, 0, sizeof par);
	par.uns = oq_dtype_kind(a->dtype) == 'u' || oq_dtype_kind(a->dtype) == 'b';
	switch (op) {
	case B_AND: case B_OR: case B_XOR:
		if (a->dtype != OQ_DT_BOOL)
			return oq_k_err(k, OQ_EINVAL, "needs bool inputs, got %s", oq_dtype_name(a->dtype));
		break;
	case B_BAND: case B_BOR: case B_BXOR:
		if (!is_int(a->dtype))
			return oq_k_err(k, OQ_EINVAL, "needs integer inputs, got %s", oq_dtype_name(a->dtype));
		break;
	case B_SHIFT: {
		const char *dir = oq_k_str(k, "direction", "");
		if (oq_dtype_kind(a->dtype) != 'u')
			return oq_k_err(k, OQ_EINVAL, "needs unsigned integer inputs, got %s", oq_dtype_name(a->dtype));
		if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
			return oq_k_err(k, OQ_EINVAL, "attribute 'direction' must be LEFT or RIGHT, got '%s'", dir);
		par.flag = !strcmp(dir, "RIGHT");
		break;
	}
	case B_MOD:
		par.flag = (int)oq_k_int(k, "fmod", 0);
		if (is_float(a->dtype) && !par.flag)
			return oq_k_err(k, OQ_EINVAL, "floating-point Mod needs fmod=1");
		break;
	case B_ADD: case B_SUB: case B_MUL: case B_DIV: case B_POW: case B_MAX: case B_MIN: case B_PRELU:
		if (a->dtype == OQ_DT_BOOL)
			return oq_k_err(k, OQ_EINVAL, "does not take bool inputs");
		break;
	default:
		break;
	}
	in[0] = a;
	in[1] = &bv;
	if ((rc = bc_shape(k, in, 2, &rank, dims)))
		return rc;
	out_dt = b_is_bool_out(op) ? OQ_DT_BOOL : a->dtype;
	/* bin_range writes every element (sub-byte types are packed into zeroed bytes) */
	if ((rc = (oq_dtype_is_subbyte(out_dt) ? oq_k_output : oq_k_output_raw)(k, 0, out_dt, rank, dims, &y)))
		return rc;
	/*
	 * float32 x ^ 2 (LayerNorm's variance as exported by PyTorch) as x * x:
	 * pow((double)x, 2) is the exact square (48 significant bits fit in
	 * double), so storing it rounds the exact square once to float, which
	 * is what the float32 product does; Inf, NaN and -0 agree too. The
	 * output has a's shape (a one-element exponent of no higher rank).
	 */
	if (op == B_POW && a->dtype == OQ_DT_FLOAT && bv.nelem == 1 && bv.rank <= a->rank && bv.data &&
	    oq_rt_get(&bv, 0) == 2.0)
		return bin_run(k, B_MUL, a, a, y, 'f', &par);
	if (a->dtype == OQ_DT_FLOAT && bv.dtype == OQ_DT_FLOAT && out_dt == OQ_DT_FLOAT && op != B_POW && op != B_MOD)
		dom = 'f';
	else if (is_float(a->dtype) || (op == B_POW && is_float(bv.dtype)))
		dom = 'd';
	else
		dom = 'i';
	return bin_run(k, op, a, &bv, y, dom, &par);
}

#define BINARY(name, op) \
	static int name(oq_kctx *k) { return binary(k, op); }
BINARY(k_add, B_ADD)
BINARY(k_sub, B_SUB)
BINARY(k_mul, B_MUL)
BINARY(k_div, B_DIV)
BINARY(k_pow, B_POW)
BINARY(k_mod, B_MOD)
BINARY(k_prelu, B_PRELU)
BINARY(k_equal, B_EQ)
BINARY(k_less, B_LT)
BINARY(k_less_eq, B_LE)
BINARY(k_greater, B_GT)
BINARY(k_greater_eq, B_GE)
BINARY(k_and, B_AND)
BINARY(k_or, B_OR)
BINARY(k_xor, B_XOR)
BINARY(k_band, B_BAND)
BINARY(k_bor, B_BOR)
BINARY(k_bxor, B_BXOR)
BINARY(k_bitshift, B_SHIFT)

/* Equal on strings (opset 19). */
static int k_equal_any(oq_kctx *k)
{
	const oq_rt *a = oq_k_in(k, 0), *b = oq_k_in(k, 1);
	const oq_rt *in[2];
	oq_rt *y;
	int rank, rc;
	int64_t dims[OQ_RT_MAX_RANK];
	bc_plan p;

	if (!a || !b || a->dtype != OQ_DT_STRING || b->dtype != OQ_DT_STRING)
		return k_equal(k);
	in[0] = a;
	in[1] = b;
	if ((rc = bc_shape(k, in, 2, &rank, dims)) || (rc = oq_k_output(k, 0, OQ_DT_BOOL, rank, dims, &y)))
		return rc;
	if (y->nelem == 0 || bc_make(&p, 2, in, rank, dims))
		return OQ_OK;
	for (size_t u = 0; u < p.rows * p.nblk; u++) {
		size_t yoff, off[3], n;
		int s[3];
		n = bc_block(&p, u, &yoff, off, s);
		for (size_t i = 0; i < n; i++) {
			const oq_bytes *x = &a->strs[off[0] + i * (size_t)s[0]], *z = &b->strs[off[1] + i * (size_t)s[1]];
			((uint8_t *)y->data)[yoff + i] = x->len == z->len && (!x->len || !memcmp(x->p, z->p, x->len));
		}
	}
	return OQ_OK;
}

/* ------------------------------------------------------- variadic ops */

/* Max, Min, Sum, Mean: fold the inputs pairwise into the output. */
static int variadic(oq_kctx *k, int op, int mean)
{
	int rank, rc, dt;
	int64_t dims[OQ_RT_MAX_RANK];
	oq_rt *y;
	op_params par;
	size_t n = 0;
	const oq_rt *first = NULL;

	for (size_t i = 0; i < k->n_in; i++)
		if (k->in[i]) {
			if (!first)
				first = k->in[i];
			else if (k->in[i]->dtype != first->dtype)
				return oq_k_err(k, OQ_EINVAL, "inputs have different types %s and %s",
						oq_dtype_name(first->dtype), oq_dtype_name(k->in[i]->dtype));
			n++;
		}
	if (!first)
		return oq_k_err(k, OQ_EINVAL, "needs at least one input");
	dt = first->dtype;
	if (!oq_elementwise_numeric(dt) || dt == OQ_DT_BOOL)
		return oq_k_err(k, OQ_EUNSUP, "unsupported input type %s", oq_dtype_name(dt));
	if (mean && !is_float(dt))
		return oq_k_err(k, OQ_EUNSUP, "Mean needs float inputs, got %s", oq_dtype_name(dt));
	if ((rc = bc_shape(k, (const oq_rt *const *)k->in, k->n_in, &rank, dims)))
		return rc;
	if ((rc = oq_k_output(k, 0, dt, rank, dims, &y)))
		return rc;
	memset(&par, 0, sizeof par);
	par.uns = oq_dtype_kind(dt) == 'u';
	{
		char dom = dt == OQ_DT_FLOAT ? 'f' : is_float(dt) ? 'd' : 'i';
		const oq_rt *acc = NULL;
		for (size_t i = 0; i < k->n_in; i++) {
			if (!k->in[i])
				continue;
			if (!acc) {
				acc = k->in[i];
				if (n == 1) /* y = broadcast copy of the single input: max(x, x) */
					rc = bin_run(k, op == B_ADD ? B_MAX : op, acc, acc, y, dom, &par);
				continue;
			}
			rc = bin_run(k, op, acc, k->in[i], y, dom, &par);
			acc = y;
			if (rc)
				return rc;
		}
		if (rc)
			return rc;
	}
	if (mean && n > 1) {
		if (dt == OQ_DT_FLOAT) {
			float *p = y->data;
			for (size_t i = 0; i < y->nelem; i++)
				p[i] /= (float)n;
		} else {
			double v[OQ_ELEMENTWISE_CHUNK];
			for (size_t o = 0; o < y->nelem; o += OQ_ELEMENTWISE_CHUNK) {
				size_t m = y->nelem - o < OQ_ELEMENTWISE_CHUNK ? y->nelem - o : OQ_ELEMENTWISE_CHUNK;
				oq_elementwise_load_double(y, o, 1, m, v);
				for (size_t i = 0; i < m; i++)
					v[i] /= (double)n;
				oq_elementwise_store_double(y, o, m, v, 1);
			}
		}
	}
	return OQ_OK;
}

static int k_max(oq_kctx *k) { return variadic(k, B_MAX, 0); }
static int k_min(oq_kctx *k) { return variadic(k, B_MIN, 0); }
static int k_sum(oq_kctx *k) { return variadic(k, B_ADD, 0); }
static int k_mean(oq_kctx *k) { return variadic(k, B_ADD, 1); }

/* ------------------------------------------------------------- unary ops */

enum {
	U_SQRT, U_EXP, U_LOG, U_ABS, U_NEG, U_RECIP, U_FLOOR, U_CEIL, U_ROUND, U_SIGN, U_ERF,
	U_SIN, U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH,
	U_TANH, U_SIGMOID, U_RELU, U_LEAKY, U_ELU, U_SELU, U_CELU, U_SOFTPLUS, U_SOFTSIGN,
	U_HSIGMOID, U_HSWISH, U_GELU, U_GELU_TANH, U_MISH, U_TRELU, U_SHRINK, U_CLIP, U_SWISH,
	U_ISNAN, U_ISINF, U_NOT, U_BNOT,
};

/* Ops defined on integer inputs too (computed in int64). */
static int u_int_ok(int op)
{
	return op == U_ABS || op == U_NEG || op == U_SIGN || op == U_RELU || op == U_CLIP || op == U_BNOT ||
	       op == U_NOT;
}

static int u_bool_out(int op)
{
	return op == U_ISNAN || op == U_ISINF || op == U_NOT;
}

#define LOOP1(TX, TY, EXPR)                              \
	do {                                             \
		const TX *x_ = xv;                       \
		TY *y_ = yv;                             \
		for (size_t i = 0; i < n; i++) {         \
			TX x = x_[i];                    \
			y_[i] = (TY)(EXPR);              \
		}                                        \
	} while (0)

static double sigmoid(double x)
{
	if (x >= 0)
		return 1 / (1 + exp(-x));
	double e = exp(x);
	return e / (1 + e);
}

static double softplus(double x)
{
	return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static float softplusf(float x)
{
	return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

static double clipd(double x, double lo, double hi)
{
	double t = x < lo ? lo : x;
	return t > hi ? hi : t;
}

static double signd(double x)
{
	return x > 0 ? 1 : x < 0 ? -1 : x; /* keeps 0, -0 and NaN */
}

#ifdef HAVE_ROW_AVX512
/* un_f's Clip(x, lo, hi) (Relu: lo 0, hi +Inf) 16 elements at a time, the scalar loop's choice per
 * element: lo where x < lo, hi where x > hi, else x (NaN and -0 pass through); returns how many. */
__attribute__((target("avx512f"))) static size_t clip_f_avx512(size_t n, const float *x, float *y, float lo,
								   float hi)
{
	const __m512 lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_loadu_ps(x + i);
		__mmask16 below = _mm512_cmp_ps_mask(v, lv, _CMP_LT_OQ), above = _mm512_cmp_ps_mask(v, hv, _CMP_GT_OQ);
		v = _mm512_mask_mov_ps(v, below, lv);
		_mm512_storeu_ps(y + i, _mm512_mask_mov_ps(v, above & (__mmask16)~below, hv));
	}
	return i;
}

/* clip_f_avx512 on 8 lanes: a multiple of 8. */
__attribute__((target("avx2"))) static size_t clip_f_avx2(size_t n, const float *x, float *y, float lo, float hi)
{
	const __m256 lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m256 below = _mm256_cmp_ps(v, lv, _CMP_LT_OQ), above = _mm256_cmp_ps(v, hv, _CMP_GT_OQ);
		v = _mm256_blendv_ps(v, lv, below);
		_mm256_storeu_ps(y + i, _mm256_blendv_ps(v, hv, _mm256_andnot_ps(below, above)));
	}
	return i;
}
#endif

/* Float32 kernels: one loop per op. Returns 0 when the op has none. */
static int un_f(int op, const op_params *p, size_t n, const float *xv, float *yv)
{
	const float al = (float)p->alpha, be = (float)p->beta, ga = (float)p->gamma;
#ifdef HAVE_ROW_AVX512
	int lanes;
	/* Clip with lo <= hi (else the second pass below), and Relu */
	if (n >= 8 && ((op == U_CLIP && !(al > be)) || op == U_RELU) && (lanes = simd_lanes()) != 0) {
		float lo = op == U_RELU ? 0.0f : al, hi = op == U_RELU ? INFINITY : be;
		size_t k = lanes == 16 ? clip_f_avx512(n, xv, yv, lo, hi) : clip_f_avx2(n, xv, yv, lo, hi);
		xv += k;
		yv += k;
		n -= k;
	}
#endif
	switch (op) {
	case U_SQRT: LOOP1(float, float, sqrtf(x)); break;
	case U_EXP: LOOP1(float, float, expf(x)); break;
	case U_LOG: LOOP1(float, float, logf(x)); break;
	case U_ABS: LOOP1(float, float, fabsf(x)); break;
	case U_NEG: LOOP1(float, float, -x); break;
	case U_RECIP: LOOP1(float, float, 1 / x); break;
	case U_FLOOR: LOOP1(float, float, floorf(x)); break;
	case U_CEIL: LOOP1(float, float, ceilf(x)); break;
	case U_ROUND: LOOP1(float, float, nearbyintf(x)); break;
	case U_ERF: oq_erf_f32(xv, yv, n); break;
	case U_TANH: LOOP1(float, float, tanhf(x)); break;
	case U_SIGMOID: oq_vm_sigmoid(xv, yv, n); break;
	case U_RELU: LOOP1(float, float, x < 0 ? 0 : x); break;
	case U_LEAKY: LOOP1(float, float, x < 0 ? al * x : x); break;
	case U_ELU: LOOP1(float, float, x < 0 ? al * (expf(x) - 1) : x); break;
	case U_SELU: LOOP1(float, float, x <= 0 ? ga * (al * expf(x) - al) : ga * x); break;
	case U_SOFTPLUS: LOOP1(float, float, softplusf(x)); break;
	case U_SOFTSIGN: LOOP1(float, float, x / (1 + fabsf(x))); break;
	case U_HSIGMOID: LOOP1(float, float, fmaxf(0, fminf(1, al * x + be))); break;
	case U_HSWISH: LOOP1(float, float, x * fmaxf(0, fminf(1, x / 6 + 0.5f))); break;
	case U_GELU: LOOP1(float, float, 0.5f * x * (1 + erff(x * 0.70710678118654752f))); break;
	case U_GELU_TANH:
		LOOP1(float, float, 0.5f * x * (1 + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))));
		break;
	case U_MISH: LOOP1(float, float, x * tanhf(softplusf(x))); break;
	case U_SWISH: LOOP1(float, float, x * oq_vm_sigmoid_ref(al * x)); break;
	case U_CLIP: {
		float lo = (float)p->alpha, hi = (float)p->beta;
		LOOP1(float, float, x < lo ? lo : x > hi ? hi : x);
		if (lo > hi)
			LOOP1(float, float, x == x ? hi : x);
		break;
	}
	default:
		return 0;
	}
	return 1;
}

static void un_d(int op, const op_params *p, size_t n, const double *xv, void *yv)
{
	const double al = p->alpha, be = p->beta, ga = p->gamma;
	switch (op) {
	case U_SQRT: LOOP1(double, double, sqrt(x)); break;
	case U_EXP: LOOP1(double, double, exp(x)); break;
	case U_LOG: LOOP1(double, double, log(x)); break;
	case U_ABS: LOOP1(double, double, fabs(x)); break;
	case U_NEG: LOOP1(double, double, -x); break;
	case U_RECIP: LOOP1(double, double, 1 / x); break;
	case U_FLOOR: LOOP1(double, double, floor(x)); break;
	case U_CEIL: LOOP1(double, double, ceil(x)); break;
	case U_ROUND: LOOP1(double, double, nearbyint(x)); break;
	case U_SIGN: LOOP1(double, double, signd(x)); break;
	case U_ERF: LOOP1(double, double, erf(x)); break;
	case U_SIN: LOOP1(double, double, sin(x)); break;
	case U_COS: LOOP1(double, double, cos(x)); break;
	case U_TAN: LOOP1(double, double, tan(x)); break;
	case U_ASIN: LOOP1(double, double, asin(x)); break;
	case U_ACOS: LOOP1(double, double, acos(x)); break;
	case U_ATAN: LOOP1(double, double, atan(x)); break;
	case U_SINH: LOOP1(double, double, sinh(x)); break;
	case U_COSH: LOOP1(double, double, cosh(x)); break;
	case U_ASINH: LOOP1(double, double, asinh(x)); break;
	case U_ACOSH: LOOP1(double, double, acosh(x)); break;
	case U_ATANH: LOOP1(double, double, atanh(x)); break;
	case U_TANH: LOOP1(double, double, tanh(x)); break;
	case U_SIGMOID: LOOP1(double, double, sigmoid(x)); break;
	case U_RELU: LOOP1(double, double, x < 0 ? 0 : x); break;
	case U_LEAKY: LOOP1(double, double, x < 0 ? al * x : x); break;
	case U_ELU: LOOP1(double, double, x < 0 ? al * (exp(x) - 1) : x); break;
	case U_SELU: LOOP1(double, double, x <= 0 ? ga * (al * exp(x) - al) : ga * x); break;
	case U_CELU: LOOP1(double, double, (x > 0 ? x : 0) + fmin(0, al * (exp(x / al) - 1))); break;
	case U_SOFTPLUS: LOOP1(double, double, softplus(x)); break;
	case U_SOFTSIGN: LOOP1(double, double, x / (1 + fabs(x))); break;
	case U_HSIGMOID: LOOP1(double, double, fmax(0, fmin(1, al * x + be))); break;
	case U_HSWISH: LOOP1(double, double, x * fmax(0, fmin(1, x / 6 + 0.5))); break;
	case U_GELU: LOOP1(double, double, 0.5 * x * (1 + erf(x * 0.70710678118654752))); break;
	case U_GELU_TANH:
		LOOP1(double, double, 0.5 * x * (1 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x))));
		break;
	case U_MISH: LOOP1(double, double, x * tanh(softplus(x))); break;
	case U_TRELU: LOOP1(double, double, x > al ? x : 0); break;
	case U_SHRINK: LOOP1(double, double, x < -ga ? x + be : x > ga ? x - be : 0); break;
	case U_SWISH: LOOP1(double, double, x * sigmoid(al * x)); break;
	case U_CLIP: LOOP1(double, double, clipd(x, al, be)); break;
	case U_ISNAN: LOOP1(double, uint8_t, isnan(x)); break;
	case U_ISINF: LOOP1(double, uint8_t, isinf(x) && ((x > 0 && (p->flag & 2)) || (x < 0 && (p->flag & 1)))); break;
	default: break;
	}
}

static void un_i(int op, const op_params *p, size_t n, const int64_t *xv, void *yv)
{
	int u = p->uns;
	switch (op) {
	case U_ABS: LOOP1(int64_t, int64_t, !u && x < 0 ? (int64_t)(0 - (uint64_t)x) : x); break;
	case U_NEG: LOOP1(int64_t, int64_t, 0 - (uint64_t)x); break;
	case U_SIGN: LOOP1(int64_t, int64_t, u ? x != 0 : (x > 0) - (x < 0)); break;
	case U_RELU: LOOP1(int64_t, int64_t, !u && x < 0 ? 0 : x); break;
	case U_BNOT: LOOP1(int64_t, int64_t, ~(uint64_t)x); break;
	case U_NOT: LOOP1(int64_t, uint8_t, x == 0); break;
	case U_CLIP:
		LOOP1(int64_t, int64_t,
		      (p->has_hi && ilt(p->ihi, (p->has_lo && ilt(x, p->ilo, u)) ? p->ilo : x, u))
			      ? p->ihi
			      : ((p->has_lo && ilt(x, p->ilo, u)) ? p->ilo : x));
		break;
	default: break;
	}
}

typedef struct ujob {
	const oq_rt *x;
	oq_rt *y;
	int op;
	char dom;
	op_params par;
} ujob;

static void un_range(void *ctx, size_t b, size_t e)
{
	const ujob *j = ctx;
	if (j->dom == 'f') {
		un_f(j->op, &j->par, e - b, (const float *)j->x->data + b, (float *)j->y->data + b);
		return;
	}
	for (size_t o = b; o < e; o += OQ_ELEMENTWISE_CHUNK) {
		size_t m = e - o < OQ_ELEMENTWISE_CHUNK ? e - o : OQ_ELEMENTWISE_CHUNK;
		if (j->dom == 'd') {
			double xv[OQ_ELEMENTWISE_CHUNK], yv[OQ_ELEMENTWISE_CHUNK];
			oq_elementwise_load_double(j->x, o, 1, m, xv);
			if (u_bool_out(j->op)) {
				un_d(j->op, &j->par, m, xv, (uint8_t *)j->y->data + o);
			} else {
				un_d(j->op, &j->par, m, xv, yv);
				oq_elementwise_store_double(j->y, o, m, yv, 1);
			}
		} else {
			int64_t xv[OQ_ELEMENTWISE_CHUNK], yv[OQ_ELEMENTWISE_CHUNK];
			oq_elementwise_load_int64(j->x, o, 1, m, xv);
			if (u_bool_out(j->op)) {
				un_i(j->op, &j->par, m, xv, (uint8_t *)j->y->data + o);
			} else {
				un_i(j->op, &j->par, m, xv, yv);
				oq_elementwise_store_int64(j->y, o, m, yv, j->par.uns);
			}
		}
	}
}

static int unary_par(oq_kctx *k, int op, const op_params *par)
{
	const oq_rt *x = oq_k_in(k, 0);
	oq_rt *y;
	ujob j;
	int rc;
	float probe = 0;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "missing input");
	if (!oq_elementwise_numeric(x->dtype))
		return oq_k_err(k, OQ_EUNSUP, "unsupported input type %s", oq_dtype_name(x->dtype));
	if (op == U_NOT && x->dtype != OQ_DT_BOOL)
		return oq_k_err(k, OQ_EINVAL, "needs a bool input, got %s", oq_dtype_name(x->dtype));
	if (op == U_BNOT && !is_int(x->dtype))
		return oq_k_err(k, OQ_EINVAL, "needs an integer input, got %s", oq_dtype_name(x->dtype));
	if (x->dtype == OQ_DT_BOOL && op != U_NOT)
		return oq_k_err(k, OQ_EINVAL, "does not take bool inputs");
	if (!is_float(x->dtype) && !u_int_ok(op) && op != U_SHRINK && op != U_ISNAN && op != U_ISINF)
		return oq_k_err(k, OQ_EUNSUP, "needs a float input, got %s", oq_dtype_name(x->dtype));
	/* un_range writes every element (sub-byte types are packed into zeroed bytes) */
	if ((rc = (oq_dtype_is_subbyte(x->dtype) ? oq_k_output : oq_k_output_raw)(
		     k, 0, u_bool_out(op) ? OQ_DT_BOOL : x->dtype, x->rank, x->dims, &y)))
		return rc;
	j.x = x;
	j.y = y;
	j.op = op;
	j.par = *par;
	j.par.uns = oq_dtype_kind(x->dtype) == 'u' || oq_dtype_kind(x->dtype) == 'b';
	if (x->dtype == OQ_DT_FLOAT && un_f(op, par, 0, &probe, &probe))
		j.dom = 'f';
	else if (is_float(x->dtype) || !u_int_ok(op))
		j.dom = 'd';
	else
		j.dom = 'i';
	if (oq_dtype_is_subbyte(x->dtype))
		un_range(&j, 0, x->nelem);
	else
		oq_k_parallel(k, x->nelem, GRAIN, un_range, &j);
	return OQ_OK;
}

static int unary(oq_kctx *k, int op, double alpha, double beta, double gamma)
{
	op_params par;
	memset(&par, 0, sizeof par);
	par.alpha = alpha;
	par.beta = beta;
	par.gamma = gamma;
	return unary_par(k, op, &par);
}

#define UNARY(name, op) \
	static int name(oq_kctx *k) { return unary(k, op, 0, 0, 0); }
UNARY(k_sqrt, U_SQRT)
UNARY(k_exp, U_EXP)
UNARY(k_log, U_LOG)
UNARY(k_abs, U_ABS)
UNARY(k_neg, U_NEG)
UNARY(k_reciprocal, U_RECIP)
UNARY(k_floor, U_FLOOR)
UNARY(k_ceil, U_CEIL)
UNARY(k_round, U_ROUND)
UNARY(k_sign, U_SIGN)
UNARY(k_erf, U_ERF)
UNARY(k_sin, U_SIN)
UNARY(k_cos, U_COS)
UNARY(k_tan, U_TAN)
UNARY(k_asin, U_ASIN)
UNARY(k_acos, U_ACOS)
UNARY(k_atan, U_ATAN)
UNARY(k_sinh, U_SINH)
UNARY(k_cosh, U_COSH)
UNARY(k_asinh, U_ASINH)
UNARY(k_acosh, U_ACOSH)
UNARY(k_atanh, U_ATANH)
UNARY(k_tanh, U_TANH)
UNARY(k_sigmoid, U_SIGMOID)
UNARY(k_relu, U_RELU)
UNARY(k_softplus, U_SOFTPLUS)
UNARY(k_softsign, U_SOFTSIGN)
UNARY(k_hardswish, U_HSWISH)
UNARY(k_mish, U_MISH)
UNARY(k_isnan, U_ISNAN)
UNARY(k_not, U_NOT)
UNARY(k_bnot, U_BNOT)

static int k_leaky(oq_kctx *k) { return unary(k, U_LEAKY, oq_k_float(k, "alpha", 0.01f), 0, 0); }
static int k_elu(oq_kctx *k) { return unary(k, U_ELU, oq_k_float(k, "alpha", 1.0f), 0, 0); }
static int k_celu(oq_kctx *k) { return unary(k, U_CELU, oq_k_float(k, "alpha", 1.0f), 0, 0); }
static int k_trelu(oq_kctx *k) { return unary(k, U_TRELU, oq_k_float(k, "alpha", 1.0f), 0, 0); }
static int k_swish(oq_kctx *k) { return unary(k, U_SWISH, oq_k_float(k, "alpha", 1.0f), 0, 0); }

static int k_selu(oq_kctx *k)
{
	return unary(k, U_SELU, oq_k_float(k, "alpha", 1.67326319217681884765625f), 0,
		     oq_k_float(k, "gamma", 1.05070102214813232421875f));
}

static int k_hardsigmoid(oq_kctx *k)
{
	return unary(k, U_HSIGMOID, oq_k_float(k, "alpha", 0.2f), oq_k_float(k, "beta", 0.5f), 0);
}

static int k_shrink(oq_kctx *k)
{
	return unary(k, U_SHRINK, 0, oq_k_float(k, "bias", 0.0f), oq_k_float(k, "lambd", 0.5f));
}

static int k_gelu(oq_kctx *k)
{
	const char *ap = oq_k_str(k, "approximate", "none");
	if (!strcmp(ap, "none"))
		return unary(k, U_GELU, 0, 0, 0);
	if (!strcmp(ap, "tanh"))
		return unary(k, U_GELU_TANH, 0, 0, 0);
	return oq_k_err(k, OQ_EINVAL, "attribute 'approximate' must be 'none' or 'tanh', got '%s'", ap);
}

static int k_isinf(oq_kctx *k)
{
	op_params par;
	memset(&par, 0, sizeof par);
	par.flag = (oq_k_int(k, "detect_negative", 1) ? 1 : 0) | (oq_k_int(k, "detect_positive", 1) ? 2 : 0);
	return unary_par(k, U_ISINF, &par);
}

/*
 * Clip: opset < 11 takes `min`/`max` attributes (float, default -/+ FLT_MAX
 * i.e. no bound); from 11 optional scalar inputs min and max of X's type.
 */
static int k_clip(oq_kctx *k)
{
	const oq_rt *x = oq_k_in(k, 0);
	op_params par;

	memset(&par, 0, sizeof par);
	par.alpha = -INFINITY;
	par.beta = INFINITY;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "missing input");
	if (k->opset < 11) {
		const oq_attr *lo = oq_k_attr(k, "min"), *hi = oq_k_attr(k, "max");
		if (lo && lo->type == OQ_ATTR_FLOAT)
			par.alpha = lo->f;
		if (hi && hi->type == OQ_ATTR_FLOAT)
			par.beta = hi->f;
		if (!is_float(x->dtype))
			return oq_k_err(k, OQ_EUNSUP, "Clip before opset 11 needs a float input, got %s",
					oq_dtype_name(x->dtype));
		return unary_par(k, U_CLIP, &par);
	}
	for (size_t i = 1; i <= 2; i++) {
		const oq_rt *b = oq_k_in(k, i);
		if (!b)
			continue;
		if (b->nelem != 1)
			return oq_k_err(k, OQ_EINVAL, "input '%s' must be a scalar, has %zu elements",
					i == 1 ? "min" : "max", b->nelem);
		if (b->dtype != x->dtype)
			return oq_k_err(k, OQ_EINVAL, "input '%s' is %s but X is %s", i == 1 ? "min" : "max",
					oq_dtype_name(b->dtype), oq_dtype_name(x->dtype));
		if (is_float(x->dtype)) {
			double v;
			oq_elementwise_load_double(b, 0, 1, 1, &v);
			if (i == 1)
				par.alpha = v;
			else
				par.beta = v;
		} else if (oq_elementwise_numeric(x->dtype)) {
			int64_t v;
			oq_elementwise_load_int64(b, 0, 1, 1, &v);
			if (i == 1) {
				par.ilo = v;
				par.has_lo = 1;
			} else {
				par.ihi = v;
				par.has_hi = 1;
			}
		}
	}
	return unary_par(k, U_CLIP, &par);
}

/* ------------------------------------------------------------------ Where */

typedef struct wjob {
	bc_plan p;
	const oq_rt *c, *a, *b;
	oq_rt *y;
	size_t es;          /* element bytes */
} wjob;

#define WLOOP(T)                                                                                   \
	do {                                                                                       \
		const T *a_ = (const T *)j->a->data + off[1], *b_ = (const T *)j->b->data + off[2]; \
		T *y_ = (T *)j->y->data + yoff;                                                    \
		for (size_t i = 0; i < n; i++)                                                     \
			y_[i] = c[i * (size_t)s[0]] ? a_[i * (size_t)s[1]] : b_[i * (size_t)s[2]]; \
	} while (0)

static void where_range(void *ctx, size_t ub, size_t ue)
{
	const wjob *j = ctx;
	for (size_t u = ub; u < ue; u++) {
		size_t yoff, off[3];
		int s[3];
		size_t n = bc_block(&j->p, u, &yoff, off, s);
		const uint8_t *c = (const uint8_t *)j->c->data + off[0];
		switch (j->es) {
		case 1: WLOOP(uint8_t); break;
		case 2: WLOOP(uint16_t); break;
		case 4: WLOOP(uint32_t); break;
		case 8: WLOOP(uint64_t); break;
		default: break;
		}
	}
}

static int k_where(oq_kctx *k)
{
	const oq_rt *in[3] = {oq_k_in(k, 0), oq_k_in(k, 1), oq_k_in(k, 2)};
	oq_rt *y;
	int rank, rc;
	int64_t dims[OQ_RT_MAX_RANK];
	wjob j;

	if (!in[0] || !in[1] || !in[2])
		return oq_k_err(k, OQ_EINVAL, "needs three inputs");
	if (in[0]->dtype != OQ_DT_BOOL)
		return oq_k_err(k, OQ_EINVAL, "condition must be bool, got %s", oq_dtype_name(in[0]->dtype));
	if (in[1]->dtype != in[2]->dtype)
		return oq_k_err(k, OQ_EINVAL, "X is %s but Y is %s", oq_dtype_name(in[1]->dtype),
				oq_dtype_name(in[2]->dtype));
	if (oq_dtype_is_subbyte(in[1]->dtype) || oq_dtype_kind(in[1]->dtype) == '-')
		return oq_k_err(k, OQ_EUNSUP, "unsupported type %s", oq_dtype_name(in[1]->dtype));
	if ((rc = bc_shape(k, in, 3, &rank, dims)) || (rc = oq_k_output(k, 0, in[1]->dtype, rank, dims, &y)))
		return rc;
	if (y->nelem == 0)
		return OQ_OK;
	if (bc_make(&j.p, 3, in, rank, dims))
		return oq_k_err(k, OQ_EINVAL, "inputs do not broadcast");
	j.c = in[0];
	j.a = in[1];
	j.b = in[2];
	j.y = y;
	if (in[1]->dtype == OQ_DT_STRING) {
		for (size_t u = 0; u < j.p.rows * j.p.nblk; u++) {
			size_t yoff, off[3];
			int s[3];
			size_t n = bc_block(&j.p, u, &yoff, off, s);
			for (size_t i = 0; i < n; i++) {
				const oq_bytes *src = ((const uint8_t *)in[0]->data)[off[0] + i * (size_t)s[0]]
							      ? &in[1]->strs[off[1] + i * (size_t)s[1]]
							      : &in[2]->strs[off[2] + i * (size_t)s[2]];
				oq_bytes *d = &y->strs[yoff + i];
				if (!(d->p = malloc(src->len + 1)))
					return oq_k_err(k, OQ_ENOMEM, "out of memory");
				if (src->len)
					memcpy(d->p, src->p, src->len);
				d->p[src->len] = '\0';
				d->len = src->len;
			}
		}
		return OQ_OK;
	}
	j.es = (size_t)oq_dtype_bits(in[1]->dtype) / 8;
	oq_k_parallel(k, j.p.rows * j.p.nblk, bc_grain(&j.p), where_range, &j);
	return OQ_OK;
}

/* ------------------------------------------------------------------ table */

const oq_kreg oq_kernels_elementwise[] = {
	{OQ_OP_Add, 0, k_add},
	{OQ_OP_Sub, 0, k_sub},
	{OQ_OP_Mul, 0, k_mul},
	{OQ_OP_Div, 0, k_div},
	{OQ_OP_Pow, 0, k_pow},
	{OQ_OP_Mod, 0, k_mod},
	{OQ_OP_PRelu, 0, k_prelu},
	{OQ_OP_Equal, 0, k_equal},
	{OQ_OP_Equal, 19, k_equal_any},
	{OQ_OP_Less, 0, k_less},
	{OQ_OP_LessOrEqual, 0, k_less_eq},
	{OQ_OP_Greater, 0, k_greater},
	{OQ_OP_GreaterOrEqual, 0, k_greater_eq},
	{OQ_OP_And, 0, k_and},
	{OQ_OP_Or, 0, k_or},
	{OQ_OP_Xor, 0, k_xor},
	{OQ_OP_Not, 0, k_not},
	{OQ_OP_BitwiseAnd, 0, k_band},
	{OQ_OP_BitwiseOr, 0, k_bor},
	{OQ_OP_BitwiseXor, 0, k_bxor},
	{OQ_OP_BitwiseNot, 0, k_bnot},
	{OQ_OP_BitShift, 0, k_bitshift},
	{OQ_OP_Max, 0, k_max},
	{OQ_OP_Min, 0, k_min},
	{OQ_OP_Sum, 0, k_sum},
	{OQ_OP_Mean, 0, k_mean},
	{OQ_OP_Sqrt, 0, k_sqrt},
	{OQ_OP_Exp, 0, k_exp},
	{OQ_OP_Log, 0, k_log},
	{OQ_OP_Abs, 0, k_abs},
	{OQ_OP_Neg, 0, k_neg},
	{OQ_OP_Reciprocal, 0, k_reciprocal},
	{OQ_OP_Floor, 0, k_floor},
	{OQ_OP_Ceil, 0, k_ceil},
	{OQ_OP_Round, 0, k_round},
	{OQ_OP_Sign, 0, k_sign},
	{OQ_OP_Erf, 0, k_erf},
	{OQ_OP_Sin, 0, k_sin},
	{OQ_OP_Cos, 0, k_cos},
	{OQ_OP_Tan, 0, k_tan},
	{OQ_OP_Asin, 0, k_asin},
	{OQ_OP_Acos, 0, k_acos},
	{OQ_OP_Atan, 0, k_atan},
	{OQ_OP_Sinh, 0, k_sinh},
	{OQ_OP_Cosh, 0, k_cosh},
	{OQ_OP_Asinh, 0, k_asinh},
	{OQ_OP_Acosh, 0, k_acosh},
	{OQ_OP_Atanh, 0, k_atanh},
	{OQ_OP_Tanh, 0, k_tanh},
	{OQ_OP_Sigmoid, 0, k_sigmoid},
	{OQ_OP_Relu, 0, k_relu},
	{OQ_OP_LeakyRelu, 0, k_leaky},
	{OQ_OP_Elu, 0, k_elu},
	{OQ_OP_Selu, 0, k_selu},
	{OQ_OP_Celu, 0, k_celu},
	{OQ_OP_Softplus, 0, k_softplus},
	{OQ_OP_Softsign, 0, k_softsign},
	{OQ_OP_HardSigmoid, 0, k_hardsigmoid},
	{OQ_OP_HardSwish, 0, k_hardswish},
	{OQ_OP_Gelu, 0, k_gelu},
	{OQ_OP_Mish, 0, k_mish},
	{OQ_OP_Swish, 0, k_swish},
	{OQ_OP_ThresholdedRelu, 0, k_trelu},
	{OQ_OP_Shrink, 0, k_shrink},
	{OQ_OP_Clip, 0, k_clip},
	{OQ_OP_IsNaN, 0, k_isnan},
	{OQ_OP_IsInf, 0, k_isinf},
	{OQ_OP_Where, 0, k_where},
	{OQ_OP_Cast, 0, oq_elementwise_cast},
	{OQ_OP_CastLike, 0, oq_elementwise_castlike},
	{OQ_OP_UNKNOWN, 0, NULL},
};
