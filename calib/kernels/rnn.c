/*
 * rnn.c - LSTM, GRU and RNN (ai.onnx opsets 1/3/7/14), float32.
 *
 * One driver serves the three cells. Per direction the input products
 * X_t W^T for every step are one GEMM ([seq*batch, I] x [I, G*H]); each step
 * then adds H_{t-1} R^T (a [batch, H] x [H, G*H] GEMM), the biases, and the
 * cell's element-wise update (ONNX docs/Operators.md equations):
 *   RNN:  H = f(x Wi + H Ri + Wbi + Rbi)
 *   GRU:  z = f(.. z ..), r = f(.. r ..),
 *         h = g(x Wh + (r . H) Rh + Rbh + Wbh)      linear_before_reset = 0
 *         h = g(x Wh + r . (H Rh + Rbh) + Wbh)      linear_before_reset = 1
 *         H = (1 - z) . h + z . H
 *   LSTM: i = f(.. + Pi . C), f = f(.. + Pf . C) (or 1 - i with input_forget),
 *         c = g(..), C = f . C + i . c, o = f(.. + Po . C_new), H = o . h(C)
 * `clip` bounds every gate's pre-activation (after bias and peephole, as ONNX
 * Runtime). Batch entries past their sequence_lens stop: their Y rows are 0
 * and Y_h/Y_c keep the last valid state; the reverse direction walks each
 * entry from its own last valid step. layout = 1 (opset 14) swaps the batch
 * axis first in X, Y, initial_h/c and Y_h/Y_c.
 * activation_alpha/beta are consumed in order by the activations that take
 * parameters (ONNX Runtime's reading); a single direction's activation list
 * is reused for both directions.
 * Inputs of other float types are converted to float32 and results back.
 */
#include "calib/kernels/kernel.h"

#include <cblas.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/kernels/rnn.h"

static int use_ref;

void oq_rnn_use_reference(int on)
{
	use_ref = on;
}

/* C[M,N] (row stride ldc) = A[M,K] B[N,K]^T */
static void gemm_bt(size_t M, size_t N, size_t K, const float *A, const float *B, float *C,
                    size_t ldc)
{
	if (!M || !N)
		return;
	if (!use_ref && M < 0x7fffffff && N < 0x7fffffff && K < 0x7fffffff && ldc < 0x7fffffff &&
	    K) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f,
		            A, (int)K, B, (int)K, 0.0f, C, (int)ldc);
		return;
	}
	for (size_t m = 0; m < M; m++)
		for (size_t n = 0; n < N; n++) {
			float s = 0;
			for (size_t k = 0; k < K; k++)
				s += A[m * K + k] * B[n * K + k];
			C[m * ldc + n] = s;
		}
}

/* ------------------------------------------------------------ activations */

enum {
	A_SIGMOID,
	A_TANH,
	A_RELU,
	A_AFFINE,
	A_LEAKYRELU,
	A_THRELU,
	A_SCALEDTANH,
	A_HARDSIGMOID,
	A_ELU,
	A_SOFTSIGN,
	A_SOFTPLUS
};

typedef struct act {
	int fn;
	float alpha, beta;
} act;

static const struct {
	const char *name;
	int fn;
	int nparams;       /* alpha/beta taken from the attribute lists */
	float alpha, beta; /* defaults */
} act_names[] = {
    {"sigmoid", A_SIGMOID, 0, 0, 0},
    {"tanh", A_TANH, 0, 0, 0},
    {"relu", A_RELU, 0, 0, 0},
    {"affine", A_AFFINE, 2, 1, 0},
    {"leakyrelu", A_LEAKYRELU, 1, 0.01f, 0},
    {"thresholdedrelu", A_THRELU, 1, 1, 0},
    {"scaledtanh", A_SCALEDTANH, 2, 1, 1},
    {"hardsigmoid", A_HARDSIGMOID, 2, 0.2f, 0.5f},
    {"elu", A_ELU, 1, 1, 0},
    {"softsign", A_SOFTSIGN, 0, 0, 0},
    {"softplus", A_SOFTPLUS, 0, 0, 0},
};

static int same_ci(const char *a, const char *b)
{
	for (; *a && *b; a++, b++)
		if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
			return 0;
	return *a == *b;
}

static inline float apply(const act *a, float x)
{
	switch (a->fn) {
	case A_SIGMOID: return 1.0f / (1.0f + expf(-x));
	case A_TANH: return tanhf(x);
	case A_RELU: return x > 0 ? x : 0;
	case A_AFFINE: return a->alpha * x + a->beta;
	case A_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
	case A_THRELU: return x > a->alpha ? x : 0;
	case A_SCALEDTANH: return a->alpha * tanhf(a->beta * x);
	case A_HARDSIGMOID: {
		float v = a->alpha * x + a->beta;
		return v < 0 ? 0 : v > 1 ? 1 : v;
	}
	case A_ELU: return x >= 0 ? x : a->alpha * (expf(x) - 1);
	case A_SOFTSIGN: return x / (1 + fabsf(x));
	case A_SOFTPLUS: return log1pf(expf(x));
	default: return x;
	}
}

/* ----------------------------------------------------------------- driver */

enum { K_RNN, K_GRU, K_LSTM };

typedef struct rnn {
	int kind;
	size_t G;              /* gates: 1, 3, 4 */
	size_t H, In, S, B, D; /* hidden, input size, steps, batch, directions */
	int layout;
	float clip;          /* <= 0: none */
	int lbr;             /* GRU linear_before_reset */
	int input_forget;    /* LSTM: f = 1 - i */
	int reverse;         /* direction = reverse: direction 0 walks backwards */
	act acts[2][3];      /* per direction: f, g, h */
	float *x;            /* [S, B, I] (layout 0 order) */
	float *w, *r, *bias; /* [D, G*H, I], [D, G*H, H], [D, 2*G*H] (zeros when absent) */
	float *p;            /* [D, 3*H] or NULL */
	float *h0, *c0;      /* [D, B, H] (layout 0 order), zeros when absent */
	int32_t *lens;       /* [B] */
	float *y, *yh, *yc;  /* [S, D, B, H], [D, B, H], [D, B, H] */
} rnn;

static void free_rnn(rnn *n)
{
	free(n->x);
	free(n->w);
	free(n->r);
	free(n->bias);
	free(n->p);
	free(n->h0);
	free(n->c0);
	free(n->lens);
	free(n->y);
	free(n->yh);
	free(n->yc);
}

static inline float clipv(const rnn *n, float v)
{
	if (n->clip > 0)
		v = v < -n->clip ? -n->clip : v > n->clip ? n->clip : v;
	return v;
}

/* Whole tensor as float32 (malloc'd); NULL t gives zeros of `count` when count > 0. */
static float *as_float(const oq_rt *t, size_t count)
{
	float *f = calloc(count ? count : 1, sizeof *f);
	if (!f || !t)
		return f;
	if (t->dtype == OQ_DT_FLOAT) {
		memcpy(f, t->data, count * sizeof *f);
		return f;
	}
	for (size_t i = 0; i < count; i++)
		f[i] = (float)oq_rt_get(t, i);
	return f;
}

/* One direction d over all steps. Scratch: g [B, G*H], hr [B, G*H], tmp [B, H]. */
static void run_dir(rnn *n, size_t d, float *xw, float *g, float *hr, float *tmp)
{
	size_t H = n->H, G = n->G, GH = G * H, B = n->B, S = n->S;
	const float *W = n->w + d * GH * n->In, *R = n->r + d * GH * H;
	const float *wb = n->bias + d * 2 * GH, *rb = wb + GH;
	const float *P = n->p ? n->p + d * 3 * H : NULL;
	const act *A = n->acts[d];
	float *Hs = n->yh + d * B * H, *Cs = n->yc ? n->yc + d * B * H : NULL;
	int rev = d == 1 || n->reverse;

	memcpy(Hs, n->h0 + d * B * H, B * H * sizeof *Hs);
	if (Cs)
		memcpy(Cs, n->c0 + d * B * H, B * H * sizeof *Cs);
	gemm_bt(S * B, GH, n->In, n->x, W, xw, GH);
	for (size_t s = 0; s < S; s++) {
		/* recurrent products for all entries; GRU's h gate (lbr = 0) needs r first */
		size_t rgates = n->kind == K_GRU && !n->lbr ? 2 * H : GH;
		gemm_bt(B, rgates, H, Hs, R, hr, GH);
		if (rgates != GH) {
			for (size_t b = 0; b < B; b++) {
				size_t len = (size_t)n->lens[b];
				const float *xr = xw + ((rev ? len - 1 - s : s) * B + b) * GH;
				if (s >= len)
					continue;
				for (size_t j = 0; j < H; j++) {
					float rv =
					    apply(&A[0], clipv(n, xr[H + j] + hr[b * GH + H + j] +
					                              wb[H + j] + rb[H + j]));
					g[b * GH + H + j] = rv;
					tmp[b * H + j] = rv * Hs[b * H + j];
				}
			}
			/* (r . H) Rh^T into hr's h-gate columns */
			gemm_bt(B, H, H, tmp, R + 2 * H * H, hr + 2 * H, GH);
		}
		for (size_t b = 0; b < B; b++) {
			size_t len = (size_t)n->lens[b], t;
			const float *xr, *hb = hr + b * GH;
			float *h = Hs + b * H, *gb = g + b * GH;
			if (s >= len)
				continue;
			t = rev ? len - 1 - s : s;
			xr = xw + (t * B + b) * GH;
			if (n->kind == K_RNN) {
				for (size_t j = 0; j < H; j++)
					h[j] =
					    apply(&A[0], clipv(n, xr[j] + hb[j] + wb[j] + rb[j]));
			} else if (n->kind == K_GRU) {
				for (size_t j = 0; j < H; j++) {
					float z = apply(&A[0],
					                clipv(n, xr[j] + hb[j] + wb[j] + rb[j])),
					      r, hh;
					if (n->lbr) {
						r = apply(&A[0],
						          clipv(n, xr[H + j] + hb[H + j] +
						                       wb[H + j] + rb[H + j]));
						hh = xr[2 * H + j] +
						     r * (hb[2 * H + j] + rb[2 * H + j]) +
						     wb[2 * H + j];
					} else {
						hh = xr[2 * H + j] + hb[2 * H + j] + rb[2 * H + j] +
						     wb[2 * H + j];
					}
					hh = apply(&A[1], clipv(n, hh));
					gb[j] = (1 - z) * hh + z * h[j];
				}
				memcpy(h, gb, H * sizeof *h);
			} else { /* LSTM, gate order i, o, f, c; peepholes i, o, f */
				float *c = Cs + b * H;
				for (size_t j = 0; j < H; j++) {
					float pi = xr[j] + hb[j] + wb[j] + rb[j];
					float po = xr[H + j] + hb[H + j] + wb[H + j] + rb[H + j];
					float pf = xr[2 * H + j] + hb[2 * H + j] + wb[2 * H + j] +
					           rb[2 * H + j];
					float pc = xr[3 * H + j] + hb[3 * H + j] + wb[3 * H + j] +
					           rb[3 * H + j];
					float iv, fv, cv, ov, cn;
					if (P) {
						pi += P[j] * c[j];
						pf += P[2 * H + j] * c[j];
					}
					iv = apply(&A[0], clipv(n, pi));
					fv = n->input_forget ? 1 - iv : apply(&A[0], clipv(n, pf));
					cv = apply(&A[1], clipv(n, pc));
					cn = fv * c[j] + iv * cv;
					if (P)
						po += P[H + j] * cn;
					ov = apply(&A[0], clipv(n, po));
					c[j] = cn;
					h[j] = ov * apply(&A[2], cn);
				}
			}
			memcpy(n->y + ((t * n->D + d) * B + b) * H, h, H * sizeof *h);
		}
	}
}

/* Writes a float buffer into output i with X's dtype, permuting [a, b, H] to [b, a, H] when swap.
 */
static int emit(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, const float *src,
                size_t a, size_t b, size_t inner, int swap)
{
	oq_rt *t;
	int rc;
	if (i >= k->n_out || !k->node->outputs[i])
		return OQ_OK;
	if ((rc = oq_k_output(k, i, dtype, rank, dims, &t)))
		return rc;
	for (size_t p = 0; p < a; p++)
		for (size_t q = 0; q < b; q++)
			for (size_t j = 0; j < inner; j++) {
				size_t si = (p * b + q) * inner + j,
				       di = swap ? (q * a + p) * inner + j : si;
				if (dtype == OQ_DT_FLOAT)
					((float *)t->data)[di] = src[si];
				else
					oq_rt_set(t, di, src[si]);
			}
	return OQ_OK;
}

/* Loads initial_h/initial_c ([D, B, H], or [B, D, H] with layout 1) into [D, B, H] order. */
static int load_state(oq_kctx *k, rnn *n, const oq_rt *t, const char *what, float **dst)
{
	size_t D = n->D, B = n->B, H = n->H;
	float *f;
	if (t) {
		int64_t want[3] = {(int64_t)D, (int64_t)B, (int64_t)H};
		if (n->layout) {
			want[0] = (int64_t)B;
			want[1] = (int64_t)D;
		}
		if (t->rank != 3 || t->dims[0] != want[0] || t->dims[1] != want[1] ||
		    t->dims[2] != want[2])
			return oq_k_err(k, OQ_EINVAL, "%s must be [%lld, %lld, %lld]", what,
			                (long long)want[0], (long long)want[1], (long long)want[2]);
	}
	if (!(*dst = calloc(D * B * H + 1, sizeof **dst)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	if (!t)
		return OQ_OK;
	if (!(f = as_float(t, D * B * H)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t d = 0; d < D; d++)
		for (size_t b = 0; b < B; b++)
			memcpy(*dst + (d * B + b) * H,
			       f + (n->layout ? (b * D + d) : (d * B + b)) * H, H * sizeof *f);
	free(f);
	return OQ_OK;
}

static int check_shape(oq_kctx *k, const oq_rt *t, const char *what, int rank, const int64_t *want)
{
	int ok = t->rank == rank;
	for (int i = 0; ok && i < rank; i++)
		ok = t->dims[i] == want[i];
	if (ok)
		return OQ_OK;
	if (rank == 3)
		return oq_k_err(k, OQ_EINVAL, "%s must be [%lld, %lld, %lld]", what,
		                (long long)want[0], (long long)want[1], (long long)want[2]);
	return oq_k_err(k, OQ_EINVAL, "%s must be [%lld, %lld]", what, (long long)want[0],
	                (long long)want[1]);
}

static int is_float_type(int dt)
{
	return dt == OQ_DT_FLOAT || dt == OQ_DT_DOUBLE || dt == OQ_DT_FLOAT16 ||
	       dt == OQ_DT_BFLOAT16;
}

/* Reads activations, their alpha/beta and the direction attribute. */
static int read_acts(oq_kctx *k, rnn *n, int *reverse)
{
	static const int defaults[3][3] = {
	    {A_TANH, -1, -1}, {A_SIGMOID, A_TANH, -1}, {A_SIGMOID, A_TANH, A_TANH}};
	size_t per = n->kind == K_RNN ? 1 : n->kind == K_GRU ? 2 : 3;
	const char *dir = oq_k_str(k, "direction", "forward");
	const oq_attr *a = oq_k_attr(k, "activations");
	const float *al, *be;
	size_t nal = oq_k_floats(k, "activation_alpha", &al),
	       nbe = oq_k_floats(k, "activation_beta", &be);
	size_t ia = 0, ib = 0;

	*reverse = 0;
	if (!strcmp(dir, "forward"))
		n->D = 1;
	else if (!strcmp(dir, "reverse"))
		n->D = 1, *reverse = 1;
	else if (!strcmp(dir, "bidirectional"))
		n->D = 2;
	else
		return oq_k_err(k, OQ_EINVAL,
		                "direction '%s' is not forward, reverse or bidirectional", dir);
	if (a && a->type == OQ_ATTR_STRINGS && a->n != per && a->n != per * n->D)
		return oq_k_err(k, OQ_EINVAL, "activations has %zu entries, expected %zu", a->n,
		                per * n->D);
	for (size_t d = 0; d < 2; d++)
		for (size_t j = 0; j < 3; j++) {
			act *x = &n->acts[d][j];
			x->fn = defaults[n->kind][j];
			x->alpha = x->beta = 0;
			if (j >= per || d >= n->D)
				continue;
			if (a && a->type == OQ_ATTR_STRINGS) {
				const char *name = a->strings[(a->n == per ? 0 : d * per) + j].p;
				size_t q;
				for (q = 0; q < sizeof act_names / sizeof act_names[0]; q++)
					if (same_ci(name, act_names[q].name))
						break;
				if (q == sizeof act_names / sizeof act_names[0])
					return oq_k_err(k, OQ_EUNSUP,
					                "activation '%s' is not supported", name);
				x->fn = act_names[q].fn;
				x->alpha = act_names[q].alpha;
				x->beta = act_names[q].beta;
				if (act_names[q].nparams >= 1 && ia < nal)
					x->alpha = al[ia++];
				if (act_names[q].nparams >= 2 && ib < nbe)
					x->beta = be[ib++];
			}
		}
	return OQ_OK;
}

static int k_recurrent(oq_kctx *k, int kind)
{
	oq_rt *X = oq_k_in(k, 0), *W = oq_k_in(k, 1), *R = oq_k_in(k, 2), *Bt = oq_k_in(k, 3);
	oq_rt *L = oq_k_in(k, 4), *H0 = oq_k_in(k, 5), *C0 = kind == K_LSTM ? oq_k_in(k, 6) : NULL;
	oq_rt *Pt = kind == K_LSTM ? oq_k_in(k, 7) : NULL;
	rnn n;
	float *xw = NULL, *g = NULL, *hr = NULL, *tmp = NULL;
	int64_t hs, dims[4];
	int rc = OQ_OK;
	size_t GH;

	memset(&n, 0, sizeof n);
	n.kind = kind;
	n.G = kind == K_RNN ? 1 : kind == K_GRU ? 3 : 4;
	if (!X || !W || !R)
		return oq_k_err(k, OQ_EINVAL, "needs inputs X, W and R");
	if (!is_float_type(X->dtype) || W->dtype != X->dtype || R->dtype != X->dtype)
		return oq_k_err(
		    k, OQ_EUNSUP, "X, W and R must share one float type (got %s, %s, %s)",
		    oq_dtype_name(X->dtype), oq_dtype_name(W->dtype), oq_dtype_name(R->dtype));
	if (X->rank != 3 || W->rank != 3 || R->rank != 3)
		return oq_k_err(k, OQ_EINVAL, "X, W and R must have rank 3");
	n.layout = k->opset >= 14 ? (int)oq_k_int(k, "layout", 0) : 0;
	if (n.layout != 0 && n.layout != 1)
		return oq_k_err(k, OQ_EINVAL, "layout must be 0 or 1");
	if ((rc = read_acts(k, &n, &n.reverse)))
		return rc;
	hs = oq_k_int(k, "hidden_size", R->dims[2]);
	if (hs <= 0 || hs != R->dims[2])
		return oq_k_err(k, OQ_EINVAL, "hidden_size %lld does not match R's last dim %lld",
		                (long long)hs, (long long)R->dims[2]);
	n.H = (size_t)hs;
	n.S = (size_t)X->dims[n.layout ? 1 : 0];
	n.B = (size_t)X->dims[n.layout ? 0 : 1];
	n.In = (size_t)X->dims[2];
	GH = n.G * n.H;
	{
		int64_t wd[3] = {(int64_t)n.D, (int64_t)GH, (int64_t)n.In},
		        rd[3] = {(int64_t)n.D, (int64_t)GH, hs};
		int64_t bd[2] = {(int64_t)n.D, (int64_t)(2 * GH)}, pd[2] = {(int64_t)n.D, 3 * hs};
		if ((rc = check_shape(k, W, "W", 3, wd)) || (rc = check_shape(k, R, "R", 3, rd)) ||
		    (Bt && (rc = check_shape(k, Bt, "B", 2, bd))) ||
		    (Pt && (rc = check_shape(k, Pt, "P", 2, pd))))
			return rc;
	}
	if (L && (L->nelem != n.B || (L->dtype != OQ_DT_INT32 && L->dtype != OQ_DT_INT64)))
		return oq_k_err(k, OQ_EINVAL, "sequence_lens must be int32 of length %zu", n.B);
	n.clip = oq_k_attr(k, "clip") ? oq_k_float(k, "clip", 0) : 0;
	n.lbr = (int)oq_k_int(k, "linear_before_reset", 0);
	n.input_forget = (int)oq_k_int(k, "input_forget", 0);
	if (!(n.x = calloc(n.S * n.B * n.In + 1, sizeof *n.x)) ||
	    !(n.w = as_float(W, n.D * GH * n.In)) || !(n.r = as_float(R, n.D * GH * n.H)) ||
	    !(n.bias = as_float(Bt, n.D * 2 * GH)) ||
	    (Pt && !(n.p = as_float(Pt, n.D * 3 * n.H))) ||
	    !(n.lens = calloc(n.B + 1, sizeof *n.lens)) ||
	    !(n.y = calloc(n.S * n.D * n.B * n.H + 1, sizeof *n.y)) ||
	    !(n.yh = calloc(n.D * n.B * n.H + 1, sizeof *n.yh)) ||
	    (kind == K_LSTM && !(n.yc = calloc(n.D * n.B * n.H + 1, sizeof *n.yc))) ||
	    !(xw = malloc((n.S * n.B * GH + 1) * sizeof *xw)) ||
	    !(g = calloc(n.B * GH + 1, sizeof *g)) || !(hr = calloc(n.B * GH + 1, sizeof *hr)) ||
	    !(tmp = calloc(n.B * n.H + 1, sizeof *tmp))) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto fail;
	}
	{ /* X in [S, B, I] order */
		float *xf = as_float(X, X->nelem);
		if (!xf) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto fail;
		}
		for (size_t s = 0; s < n.S; s++)
			for (size_t b = 0; b < n.B; b++)
				memcpy(n.x + (s * n.B + b) * n.In,
				       xf + (n.layout ? b * n.S + s : s * n.B + b) * n.In,
				       n.In * sizeof *xf);
		free(xf);
	}
	for (size_t b = 0; b < n.B; b++) {
		int64_t v = L ? oq_rt_get_int(L, b) : (int64_t)n.S;
		if (v < 0 || v > (int64_t)n.S) {
			rc = oq_k_err(k, OQ_EINVAL, "sequence_lens[%zu] = %lld is outside [0, %zu]",
			              b, (long long)v, n.S);
			goto fail;
		}
		n.lens[b] = (int32_t)v;
	}
	if ((rc = load_state(k, &n, H0, "initial_h", &n.h0)) ||
	    (rc = load_state(k, &n, C0, "initial_c", &n.c0)))
		goto fail;
	for (size_t d = 0; d < n.D; d++)
		run_dir(&n, d, xw, g, hr, tmp);
	/* Y: [S, D, B, H], or [B, S, D, H] with layout 1 */
	if (n.layout) {
		dims[0] = (int64_t)n.B, dims[1] = (int64_t)n.S, dims[2] = (int64_t)n.D,
		dims[3] = hs;
		rc = emit(k, 0, X->dtype, 4, dims, n.y, n.S * n.D, n.B, n.H, 1);
	} else {
		dims[0] = (int64_t)n.S, dims[1] = (int64_t)n.D, dims[2] = (int64_t)n.B,
		dims[3] = hs;
		rc = emit(k, 0, X->dtype, 4, dims, n.y, 1, 1, n.S * n.D * n.B * n.H, 0);
	}
	if (rc)
		goto fail;
	dims[0] = (int64_t)(n.layout ? n.B : n.D), dims[1] = (int64_t)(n.layout ? n.D : n.B),
	dims[2] = hs;
	if ((rc = emit(k, 1, X->dtype, 3, dims, n.yh, n.D, n.B, n.H, n.layout)))
		goto fail;
	if (kind == K_LSTM)
		rc = emit(k, 2, X->dtype, 3, dims, n.yc, n.D, n.B, n.H, n.layout);
fail:
	free(xw);
	free(g);
	free(hr);
	free(tmp);
	free_rnn(&n);
	return rc;
}

static int k_rnn(oq_kctx *k)
{
	return k_recurrent(k, K_RNN);
}
static int k_gru(oq_kctx *k)
{
	return k_recurrent(k, K_GRU);
}
static int k_lstm(oq_kctx *k)
{
	return k_recurrent(k, K_LSTM);
}

const oq_kreg oq_kernels_rnn[] = {
    {OQ_OP_RNN, 1, k_rnn},
    {OQ_OP_GRU, 1, k_gru},
    {OQ_OP_LSTM, 1, k_lstm},
    {OQ_OP_UNKNOWN, 0, NULL},
};
