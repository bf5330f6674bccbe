/*
 * fidelity.c - held-out fold SQNR of a quantization (see fidelity.h).
 *
 * A point's parameters are read from its node in each fold's quantized
 * model: the scale (float32 initializer, one value or one per channel of
 * `axis`), the zero point (its dtype gives the grid; none: uint8, 0).
 * Activation points are observed where the quantized model computes their
 * float input, and dq(q(x)) is computed there as QuantizeLinear and
 * DequantizeLinear would (oq_quantize_value, then (q - zp) * scale in
 * float). Blocked points and non-float32 scales are not points here.
 */
#include "src/pipeline/fidelity.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/cpu.h"
#include "calib/biascorr/measure.h"
#include "calib/exec/exec.h"
#include "calib/exec/threadpool.h"
#include "calib/folds.h"
#include "calib/samples.h"
#include "src/quant/qparams.h"

/* The observer's context: one fold's quantized model. */
typedef struct octx {
	const oq_graph *g; /* the quantized model's main graph */
	long *map;         /* per value of g: index into q, or -1 */
	oq_qpoint *q;      /* the model's points (oq_qpoints) */
	size_t nq;
	size_t *pi;        /* per entry of q: its index in oq_fidelity.pt, or SIZE_MAX */
	oq_fidelity *f;
	double *acc;       /* per entry of q: sum x^2, sum (x - dq(q(x)))^2 of the sample running
			    * (2 nq; a lane's own, added to f->pt in sample order) */
} octx;

double oq_fidelity_db(double r2, double d2)
{
	if (isnan(r2) || isnan(d2))
		return NAN;
	if (d2 == 0)
		return INFINITY;
	return 10.0 * log10(r2 / d2);
}

void oq_fidelity_put_db(FILE *f, int width, double v)
{
	if (isnan(v))
		fprintf(f, "%*s", width, "nan");
	else if (isinf(v))
		fprintf(f, "%*s", width, v > 0 ? "inf" : "-inf");
	else
		fprintf(f, "%*.1f", width, v);
}

void oq_fidelity_json_db(FILE *f, double v)
{
	if (isnan(v))
		fputs("null", f);
	else if (isinf(v))
		fputs(v > 0 ? "999" : "-999", f);
	else
		fprintf(f, "%.4f", v);
}

void oq_fidelity_free(oq_fidelity *f)
{
	for (size_t i = 0; f->out && i < f->n_out; i++)
		free(f->out[i]);
	for (size_t i = 0; f->pt && i < f->n_pt; i++)
		free(f->pt[i].name);
	free(f->out);
	free(f->r2);
	free(f->d2);
	free(f->pt);
	memset(f, 0, sizeof *f);
}

/* name without `suffix` when it ends with it (a new string), else a copy. */
static char *strip(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	char *s = oq_strdup(name);

	if (s && n > k && !strcmp(name + n - k, suffix))
		s[n - k] = 0;
	return s;
}

/* q's parameters from Q/DQ node n; 0 when n is not a point this file measures. */
static int params(const oq_node *n, oq_qpoint *q)
{
	const oq_tensor *s = n->n_inputs > 1 && n->inputs[1] ? n->inputs[1]->init : NULL;
	const oq_tensor *z = n->n_inputs > 2 && n->inputs[2] ? n->inputs[2]->init : NULL;

	if (!s || s->dtype != OQ_DT_FLOAT || !s->nelem || oq_node_attr_int(n, "block_size", 0))
		return 0;
	if (!oq_qrange(z ? z->dtype : OQ_DT_UINT8, 0, &q->qmin, &q->qmax))
		return 0;
	if (z && z->nelem != s->nelem)
		return 0;
	q->s = s;
	q->z = z;
	q->axis = (int)oq_node_attr_int(n, "axis", 1);
	q->lo = -INFINITY;
	q->hi = INFINITY;
	return 1;
}

/* A scalar float initializer input i of n, or dflt. */
static float scalar_input(const oq_node *n, size_t i, float dflt)
{
	const oq_tensor *t = i < n->n_inputs && n->inputs[i] ? n->inputs[i]->init : NULL;
	return t && t->nelem == 1 && oq_dtype_kind(t->dtype) == 'f' ? (float)oq_tensor_get(t, 0) : dflt;
}

/*
 * When the float model computes `fv` with a Relu or Clip that the quantized one folded into
 * the Q (its input x has another producer), the float value is x clamped: q->lo, q->hi.
 */
static void folded_activation(const oq_value *fv, const oq_value *x, oq_qpoint *q)
{
	const oq_node *a = fv->producer;

	if (!a || a->domain[0] || (x->producer && x->producer->op == a->op))
		return;
	if (a->op == OQ_OP_Relu)
		q->lo = 0;
	else if (a->op == OQ_OP_Clip) {
		q->lo = scalar_input(a, 1, -INFINITY);
		q->hi = scalar_input(a, 2, INFINITY);
	}
}

/* Channel of element i of a tensor of `dims` (rank r) on axis a, or 0 when the point has one scale. */
size_t oq_qpoint_channel(const oq_qpoint *q, const int64_t *dims, int r, size_t i)
{
	size_t inner = 1;
	int a = q->axis < 0 ? q->axis + r : q->axis;

	if (q->s->nelem == 1 || a < 0 || a >= r)
		return 0;
	for (int k = a + 1; k < r; k++)
		inner *= (size_t)dims[k];
	return (i / inner) % (size_t)dims[a];
}

float oq_qpoint_fake(const oq_qpoint *q, size_t c, float x)
{
	float s = ((const float *)q->s->data)[c];
	int64_t z = q->z ? oq_tensor_get_int(q->z, c) : 0;
	return (float)(oq_quantize_value(x, s, z, q->qmin, q->qmax) - z) * s;
}

int oq_qpoint_fits(const oq_qpoint *q, const int64_t *dims, int r)
{
	int a = q->axis < 0 ? q->axis + r : q->axis;
	return q->s->nelem == 1 || (a >= 0 && a < r && (size_t)dims[a] == q->s->nelem);
}

static int want(void *ctx, const oq_value *v)
{
	const octx *c = ctx;
	return v->graph == c->g && c->map[v->index] >= 0;
}

#define FAKE_BLOCK 256 /* values a block sums (its partial sums start at 0) */
#define SUM_LANES 8     /* partial sums of a block */

/*
 * One block of n <= FAKE_BLOCK values of observe(): with r = x clamped to [lo, hi] and f =
 * dq(q(x)) on one scale s and a zero point z with qmin <= z <= qmax and both bounds within 2^22
 * of z (qlo = qmin - z, qhi = qmax - z), *r2 += sum r^2 and *d2 += sum (r - f)^2 in double:
 * element k goes to partial sum k % SUM_LANES, the partials are combined pairwise,
 * (((0+1)+(2+3))+((4+5)+(6+7))), and the result added last: the order depends on n and the
 * data only. f has the bits of oq_qpoint_fake: clamping x / s to [qlo, qhi] before rounding
 * equals saturating after it (the bounds are integers); adding then subtracting 1.5 * 2^23
 * rounds to nearest even for |v| < 2^22 as rintf does; NaN gives the zero point (v = 0); and
 * q - z is v exactly, so (q - z) * s is v * s.
 */
/* Elements [k, n) of a block into the partial sums a, b (element k into partial k % SUM_LANES). */
static inline void sq_elems(const float *x, size_t k, size_t n, float s, float qlo, float qhi, float lo, float hi,
			    double *a, double *b)
{
	const float magic = 12582912.0f;

	for (; k < n; k++) {
		float v = x[k] / s, f, r;
		double xr, e;
		v = v == v ? v : 0.0f;
		v = v < qlo ? qlo : v;
		v = v > qhi ? qhi : v;
		v = (v + magic) - magic;
		f = v * s;
		r = x[k] < lo ? lo : x[k] > hi ? hi : x[k];
		xr = r;
		e = xr - f;
		a[k % SUM_LANES] += xr * xr;
		b[k % SUM_LANES] += e * e;
	}
}

/* The partials combined pairwise, (((0+1)+(2+3))+((4+5)+(6+7))), and added to *r2, *d2. */
static inline void sq_combine(double *a, double *b, double *r2, double *d2)
{
	for (size_t w = 1; w < SUM_LANES; w *= 2)
		for (size_t l = 0; l + w < SUM_LANES; l += 2 * w) {
			a[l] += a[l + w];
			b[l] += b[l + w];
		}
	*r2 += a[0];
	*d2 += b[0];
}

static void sq_block_c(const float *x, size_t n, float s, float qlo, float qhi, float lo, float hi, double *r2,
		       double *d2)
{
	double a[SUM_LANES] = {0}, b[SUM_LANES] = {0};

	sq_elems(x, 0, n, s, qlo, qhi, lo, hi, a, b);
	sq_combine(a, b, r2, d2);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_SQ_AVX512 1

/*
 * sq_block_c, 16 values a step: the same float operations (division, the clamps as max / min
 * with the bound first, which keep the C's choice on equal and signed-zero operands), and each
 * half-vector widened to double and added to the 8 partial sums, lower half first: element k
 * reaches partial k % 8 in the same order, so the sums have the same bits.
 */
__attribute__((target("avx512f"))) static void sq_block_avx512(const float *x, size_t n, float s, float qlo,
								  float qhi, float lo, float hi, double *r2,
								  double *d2)
{
	const __m512 sv = _mm512_set1_ps(s), qlov = _mm512_set1_ps(qlo), qhiv = _mm512_set1_ps(qhi);
	const __m512 lov = _mm512_set1_ps(lo), hiv = _mm512_set1_ps(hi), magic = _mm512_set1_ps(12582912.0f);
	__m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
	double pa[SUM_LANES], pb[SUM_LANES];
	size_t k = 0;

	for (; k + 16 <= n; k += 16) {
		__m512 xv = _mm512_loadu_ps(x + k), v = _mm512_div_ps(xv, sv), f, r;
		__m512d xr, e;
		v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
		v = _mm512_min_ps(qhiv, _mm512_max_ps(qlov, v));
		v = _mm512_sub_ps(_mm512_add_ps(v, magic), magic);
		f = _mm512_mul_ps(v, sv);
		r = _mm512_min_ps(hiv, _mm512_max_ps(lov, xv));
		xr = _mm512_cvtps_pd(_mm512_castps512_ps256(r));
		e = _mm512_sub_pd(xr, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
		a = _mm512_add_pd(a, _mm512_mul_pd(xr, xr));
		b = _mm512_add_pd(b, _mm512_mul_pd(e, e));
		xr = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1)));
		e = _mm512_sub_pd(xr, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1))));
		a = _mm512_add_pd(a, _mm512_mul_pd(xr, xr));
		b = _mm512_add_pd(b, _mm512_mul_pd(e, e));
	}
	_mm512_storeu_pd(pa, a);
	_mm512_storeu_pd(pb, b);
	sq_elems(x, k, n, s, qlo, qhi, lo, hi, pa, pb); /* k % 16 == 0: partial k % 8, as in the loop */
	sq_combine(pa, pb, r2, d2);
}

/*
 * The same on AVX2, 8 values a step: the lower 4 widened into partials 0-3 (a0, b0), the upper
 * 4 into partials 4-7 (a1, b1), so again element k reaches partial k % 8 in order.
 */
__attribute__((target("avx2"))) static void sq_block_avx2(const float *x, size_t n, float s, float qlo, float qhi,
							    float lo, float hi, double *r2, double *d2)
{
	const __m256 sv = _mm256_set1_ps(s), qlov = _mm256_set1_ps(qlo), qhiv = _mm256_set1_ps(qhi);
	const __m256 lov = _mm256_set1_ps(lo), hiv = _mm256_set1_ps(hi), magic = _mm256_set1_ps(12582912.0f);
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, b0 = a0, b1 = a0;
	double pa[SUM_LANES], pb[SUM_LANES];
	size_t k = 0;

	for (; k + 8 <= n; k += 8) {
		__m256 xv = _mm256_loadu_ps(x + k), v = _mm256_div_ps(xv, sv), f, r;
		__m256d xr, e;
		v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
		v = _mm256_min_ps(qhiv, _mm256_max_ps(qlov, v));
		v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
		f = _mm256_mul_ps(v, sv);
		r = _mm256_min_ps(hiv, _mm256_max_ps(lov, xv));
		xr = _mm256_cvtps_pd(_mm256_castps256_ps128(r));
		e = _mm256_sub_pd(xr, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
		a0 = _mm256_add_pd(a0, _mm256_mul_pd(xr, xr));
		b0 = _mm256_add_pd(b0, _mm256_mul_pd(e, e));
		xr = _mm256_cvtps_pd(_mm256_extractf128_ps(r, 1));
		e = _mm256_sub_pd(xr, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
		a1 = _mm256_add_pd(a1, _mm256_mul_pd(xr, xr));
		b1 = _mm256_add_pd(b1, _mm256_mul_pd(e, e));
	}
	_mm256_storeu_pd(pa, a0);
	_mm256_storeu_pd(pa + 4, a1);
	_mm256_storeu_pd(pb, b0);
	_mm256_storeu_pd(pb + 4, b1);
	sq_elems(x, k, n, s, qlo, qhi, lo, hi, pa, pb); /* k % 8 == 0 */
	sq_combine(pa, pb, r2, d2);
}
#endif

/* 1: the CPU's best vector loop (AVX-512, else AVX2); 2: at most AVX2; 0: the portable loop. */
int oq_fidelity_simd = 1;

void oq_fidelity_sq_block(const float *x, size_t n, float s, float qlo, float qhi, float lo, float hi,
			  double *r2, double *d2)
{
#ifdef HAVE_SQ_AVX512
	if (oq_fidelity_simd == 1 && n >= 16 && oq_cpu_avx512()) {
		sq_block_avx512(x, n, s, qlo, qhi, lo, hi, r2, d2);
		return;
	}
	if (oq_fidelity_simd && n >= 8 && oq_cpu_avx2_fma()) {
		sq_block_avx2(x, n, s, qlo, qhi, lo, hi, r2, d2);
		return;
	}
#endif
	sq_block_c(x, n, s, qlo, qhi, lo, hi, r2, d2);
}

/*
 * A tensor of q's point (dims, rank, nelem elements) as [outer, nch, inner] around q's channel
 * axis: element i = (o * nch + ch) * inner + k has channel ch (oq_qpoint_channel); one scale:
 * [1, 1, nelem].
 */
static void point_shape(const oq_qpoint *q, const int64_t *dims, int rank, size_t nelem, size_t *outer, size_t *nch,
			size_t *inner)
{
	int a = q->axis < 0 ? q->axis + rank : q->axis;

	*outer = *inner = 1;
	*nch = q->s->nelem;
	if (*nch == 1 || a < 0 || a >= rank) {
		*nch = 1;
		*inner = nelem;
		return;
	}
	for (int k = 0; k < a; k++)
		*outer *= (size_t)dims[k];
	for (int k = a + 1; k < rank; k++)
		*inner *= (size_t)dims[k];
}

/* oq_observe_fn (always 0; also called for the graph inputs) */
static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	const octx *c = ctx;
	const oq_qpoint *q;
	double *acc;
	const float *x, *sc;
	size_t nch, outer, inner;
	double r2, d2;

	if (v->graph != c->g || c->map[v->index] < 0 || t->dtype != OQ_DT_FLOAT)
		return 0;
	q = &c->q[c->map[v->index]];
	if (!oq_qpoint_fits(q, t->dims, t->rank))
		return 0;
	sc = q->s->data;
	acc = &c->acc[2 * (size_t)c->map[v->index]];
	x = t->data;
	/* element i = (o * nch + ch) * inner + k, visited in that order: the sums are added block by
	 * block (add_squares) in element order, each term as oq_qpoint_fake and oq_qpoint_channel
	 * give it */
	point_shape(q, t->dims, t->rank, t->nelem, &outer, &nch, &inner);
	r2 = acc[0];
	d2 = acc[1];
	for (size_t o = 0; o < outer; o++)
		for (size_t ch = 0; ch < nch; ch++) {
			const float *px = x + (o * nch + ch) * inner;
			float s = sc[ch], lo = q->lo, hi = q->hi;
			int64_t z = q->z ? oq_tensor_get_int(q->z, ch) : 0, qmin = q->qmin, qmax = q->qmax;
			if (z < qmin || z > qmax || qmin - z < -(1 << 22) || qmax - z > (1 << 22)) {
				for (size_t k = 0; k < inner; k++) {
					float xi = px[k], r = xi < lo ? lo : xi > hi ? hi : xi;
					double e = (double)r - (float)(oq_quantize_value(xi, s, z, qmin, qmax) - z) * s;
					r2 += (double)r * r;
					d2 += e * e;
				}
				continue;
			}
			for (size_t k0 = 0; k0 < inner; k0 += FAKE_BLOCK) {
				size_t m = inner - k0 < FAKE_BLOCK ? inner - k0 : FAKE_BLOCK;
				oq_fidelity_sq_block(px + k0, m, s, (float)(qmin - z), (float)(qmax - z), lo, hi, &r2,
						     &d2);
			}
		}
	acc[0] = r2;
	acc[1] = d2;
	return 0;
}

/* The point named `name` of f, or -1. */
static long find_point(const oq_fidelity *f, const char *name, int weight)
{
	for (size_t i = 0; i < f->n_pt; i++)
		if (f->pt[i].weight == weight && !strcmp(f->pt[i].name, name))
			return (long)i;
	return -1;
}

void oq_qpoints_free(oq_qpoint *p, size_t n)
{
	for (size_t i = 0; p && i < n; i++)
		free(p[i].name);
	free(p);
}

int oq_qpoints(const oq_model *fm, const oq_model *qm, oq_qpoint **out, size_t *np, oq_diag *d)
{
	const oq_graph *g = qm->graph;
	oq_qpoint *v = oq_calloc(g->n_nodes + 1, sizeof *v);
	size_t n = 0;

	*out = NULL;
	*np = 0;
	if (!v)
		return oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *nd = g->nodes[i];
		const oq_value *x = nd->n_inputs ? nd->inputs[0] : NULL;
		int w = nd->op == OQ_OP_DequantizeLinear && x && x->init;
		oq_qpoint *q = &v[n];
		const oq_value *fv;

		if (nd->domain[0] || !x || !(w || (nd->op == OQ_OP_QuantizeLinear && !x->init)) || !params(nd, q))
			continue;
		if (!(q->name = strip(x->name, w ? "_quantized" : "_QuantizeLinear_Input"))) {
			oq_qpoints_free(v, n);
			return oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
		}
		fv = oq_graph_find(fm->graph, q->name);
		if (!fv || fv->graph != fm->graph ||
		    (w && (!fv->init || fv->init->dtype != OQ_DT_FLOAT || fv->init->nelem != x->init->nelem ||
			   !oq_qpoint_fits(q, x->init->dims, x->init->rank))) ||
		    (!w && fv->init)) {
			free(q->name);
			q->name = NULL;
			continue;
		}
		q->weight = w;
		q->fv = fv;
		q->x = x;
		if (!w)
			folded_activation(fv, x, q);
		n++;
	}
	*out = v;
	*np = n;
	return OQ_OK;
}

/*
 * A weight point's own error into pt: with a = the float weight and b = ((float) code - z) *
 * scale as DequantizeLinear computes it, r2 += a^2 and d2 += (a - b)^2 in double, element after
 * element, channel by channel. Float weights and 8-bit codes are read in place, other types
 * through the tensor getters.
 */
static void weight_sums(const oq_qpoint *q, oq_fid_point *pt)
{
	const oq_tensor *ft = q->fv->init, *qt = q->x->init;
	const float *sc = q->s->data;
	const unsigned char *fw = ft->dtype == OQ_DT_FLOAT ? ft->data : NULL;
	const unsigned char *qw = qt->dtype == OQ_DT_INT8 || qt->dtype == OQ_DT_UINT8 ? qt->data : NULL;
	int u8 = qt->dtype == OQ_DT_UINT8;
	double r2 = pt->r2, d2 = pt->d2;
	size_t outer, nch, inner;

	point_shape(q, qt->dims, qt->rank, qt->nelem, &outer, &nch, &inner);
	for (size_t o = 0, e = 0; o < outer; o++)
		for (size_t ch = 0; ch < nch; ch++) {
			float s = sc[ch];
			int64_t z = q->z ? oq_tensor_get_int(q->z, ch) : 0;
			for (size_t k = 0; k < inner; k++, e++) {
				int64_t c = !qw ? oq_tensor_get_int(qt, e) : u8 ? (int64_t)qw[e] : (int64_t)(signed char)qw[e];
				double a, b, er;
				if (fw) {
					float w;
					memcpy(&w, fw + 4 * e, sizeof w);
					a = w;
				} else {
					a = oq_tensor_get(ft, e);
				}
				b = (float)(c - z) * s;
				er = a - b;
				r2 += a * a;
				d2 += er * er;
			}
		}
	pt->r2 = r2;
	pt->d2 = d2;
}

/*
 * The points of quantized model qm into c (activations, observed while qm runs); with `first`,
 * f->pt is built from them and the weights' own errors are summed against fm's initializers.
 */
static int points(const oq_model *fm, const oq_model *qm, int first, oq_fidelity *f, octx *c, oq_diag *d)
{
	const oq_graph *g = qm->graph;
	int rc;

	c->g = g;
	c->f = f;
	if ((rc = oq_qpoints(fm, qm, &c->q, &c->nq, d)))
		return rc;
	if (!(c->map = oq_calloc(g->n_values + 1, sizeof *c->map)) || !(c->pi = oq_calloc(c->nq + 1, sizeof *c->pi)) ||
	    !(c->acc = oq_calloc(2 * c->nq + 1, sizeof *c->acc)) ||
	    (first && !(f->pt = oq_calloc(c->nq + 1, sizeof *f->pt))))
		return oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
	for (size_t i = 0; i < g->n_values; i++)
		c->map[i] = -1;
	for (size_t i = 0; i < c->nq; i++) {
		const oq_qpoint *q = &c->q[i];
		long p;

		if (first) {
			p = (long)f->n_pt++;
			if (!(f->pt[p].name = oq_strdup(q->name)))
				return oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
			f->pt[p].weight = q->weight;
		} else if ((p = find_point(f, q->name, q->weight)) < 0) {
			c->pi[i] = SIZE_MAX;
			continue;
		}
		c->pi[i] = (size_t)p;
		if (q->weight) {
			if (first)
				weight_sums(q, &f->pt[p]);
			continue;
		}
		c->map[q->x->index] = (long)i;
	}
	return OQ_OK;
}

static void octx_free(octx *c)
{
	oq_qpoints_free(c->q, c->nq);
	free(c->map);
	free(c->pi);
	free(c->acc);
	c->acc = NULL;
	c->map = NULL;
	c->q = NULL;
	c->pi = NULL;
	c->nq = 0;
}

/* Adds sample outputs: float r[], quantized t[] (by f->out order; omap: index in t). */
static void add_outputs(oq_fidelity *f, const oq_rt *r, const oq_rt *t, const size_t *omap)
{
	for (size_t o = 0; o < f->n_out; o++) {
		const oq_rt *a = &r[o], *b = &t[omap[o]];
		const float *x, *y;
		if (a->kind != OQ_RT_TENSOR || b->kind != OQ_RT_TENSOR || a->dtype != OQ_DT_FLOAT ||
		    b->dtype != OQ_DT_FLOAT || a->nelem != b->nelem)
			continue;
		x = a->data;
		y = b->data;
		for (size_t i = 0; i < a->nelem; i++) {
			double e = (double)x[i] - y[i];
			f->r2[o] += (double)x[i] * x[i];
			f->d2[o] += e * e;
		}
	}
}

/* map[i]: the index in e of the input / output of fe with the same name. */
static int map_names(const oq_exec *fe, const oq_exec *e, int outputs, size_t *map, oq_diag *d)
{
	size_t n = outputs ? oq_exec_n_outputs(fe) : oq_exec_n_inputs(fe);
	size_t m = outputs ? oq_exec_n_outputs(e) : oq_exec_n_inputs(e);

	for (size_t i = 0; i < n; i++) {
		const char *a = (outputs ? oq_exec_output(fe, i) : oq_exec_input(fe, i))->name;
		size_t k = 0;
		while (k < m && strcmp(a, (outputs ? oq_exec_output(e, k) : oq_exec_input(e, k))->name))
			k++;
		if (k == m)
			return oq_err(d, OQ_EINVAL, "fold SQNR: the quantized model lacks %s '%s'",
			              outputs ? "output" : "input", a);
		map[i] = k;
	}
	return OQ_OK;
}

void oq_fidelity_ranges_free(oq_ranges *fr, size_t k)
{
	for (size_t f = 0; fr && f < k; f++)
		oq_ranges_free(&fr[f]);
	free(fr);
}

int oq_fidelity_ranges(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, oq_ranges **out, oq_diag *d)
{
	oq_ranges *fr;
	int rc = OQ_OK;

	*out = NULL;
	if (folds->n_folds < 2)
		return oq_err(d, OQ_EINVAL, "fold SQNR: the statistics have no folds");
	if (!(fr = oq_calloc(folds->n_folds, sizeof *fr)))
		return oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
	for (size_t f = 0; f < folds->n_folds && !rc; f++)
		rc = oq_calibrate_held_out(fm, co, folds, f, &fr[f], d);
	if (rc)
		oq_fidelity_ranges_free(fr, folds->n_folds);
	else
		*out = fr;
	return rc;
}

int oq_fidelity_measure(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, oq_fid_make_fn make,
			void *ctx, oq_fidelity *out, oq_diag *d)
{
	oq_ranges *fr;
	int rc;

	memset(out, 0, sizeof *out);
	if ((rc = oq_fidelity_ranges(fm, co, folds, &fr, d)))
		return rc;
	rc = oq_fidelity_measure_ranges(fm, co, fr, folds->n_folds, folds->n_total, NULL, make, ctx, out, d);
	oq_fidelity_ranges_free(fr, folds->n_folds);
	return rc;
}

/*
 * Lanes (as calibration's and bias correction's): within a fold, the first sample runs alone on
 * the measurement's executors (all threads); then, with T threads and memory for it, the rest
 * run T at a time, lane 0 on those executors and lane k on clones of them (one thread each), as
 * the items of one parallel-for. Each lane keeps its sample's quantized outputs and point sums
 * (octx.acc, from 0 for every sample); they are added on the calling thread in sample order:
 * the output sums element by element as with one lane, the point sums one sample at a time. So
 * the measurement does not depend on the thread count, bit for bit.
 */
typedef struct lane {
	oq_exec *fe, *qe; /* the float (NULL: its outputs are given) and the fold's quantized executor */
	int own_fe;       /* fe is this lane's clone (qe always is, but lane 0's) */
	octx c;           /* the fold's points, shared but acc (the lane's own) */
	oq_rt *in, *qin, *fo, *qo;
	const oq_rt *fro; /* the staged sample's float outputs: fo, or the given ones */
	size_t i;         /* the sample staged, or SIZE_MAX */
	oq_diag d;
	int rc;
} lane;

typedef struct lanes {
	lane *v;
	size_t nl;
	const oq_samples *s;
	const oq_exec *le;   /* the executor samples are loaded for (read only) */
	const size_t *imap;
	size_t nin, nout, nqo;
	const oq_bc_float_cache *fout; /* given float outputs, or NULL */
	size_t next, end;    /* the samples of this round: lane k runs next + k when below end */
} lanes;

static void lane_release(const lanes *L, lane *ln)
{
	for (size_t k = 0; ln->in && k < L->nin; k++)
		oq_rt_release(&ln->in[k]);
	for (size_t k = 0; ln->fo && k < L->nout; k++)
		oq_rt_release(&ln->fo[k]);
	for (size_t k = 0; ln->qo && k < L->nqo; k++)
		oq_rt_release(&ln->qo[k]);
	ln->i = SIZE_MAX;
}

/* Runs sample i on lane ln: its quantized outputs and point sums staged (fo: its float outputs). */
static int lane_run(const lanes *L, lane *ln, size_t i)
{
	int rc;

	ln->i = i;
	memset(ln->c.acc, 0, 2 * ln->c.nq * sizeof *ln->c.acc);
	if ((rc = oq_sample_load(L->s, i, L->le, ln->in, &ln->d)))
		return rc;
	for (size_t k = 0; k < L->nin; k++)
		ln->qin[L->imap[k]] = ln->in[k]; /* borrowed views */
	for (size_t k = 0; k < L->nin; k++) /* the executor observes node outputs only */
		(void)observe(&ln->c, oq_exec_input(ln->qe, L->imap[k]), &ln->in[k]);
	ln->fro = ln->fo;
	if ((L->fout ? (rc = oq_bc_float_cache_get(L->fout, i, ln->fo, &ln->fro, &ln->d))
		     : (rc = oq_exec_run(ln->fe, ln->in, L->nin, ln->fo, L->nout, &ln->d))) ||
	    (rc = oq_exec_run(ln->qe, ln->qin, L->nin, ln->qo, L->nqo, &ln->d)))
		return rc;
	return OQ_OK;
}

static void lanes_run(void *ctx, size_t begin, size_t end)
{
	const lanes *L = ctx;
	for (size_t k = begin; k < end; k++)
		if (L->next + k < L->end)
			L->v[k].rc = lane_run(L, &L->v[k], L->next + k);
}

/* Adds lane ln's staged sample to f (outputs by omap), then releases it. */
static void lane_commit(const lanes *L, lane *ln, oq_fidelity *f, const size_t *omap)
{
	add_outputs(f, ln->fro, ln->qo, omap);
	for (size_t q = 0; q < ln->c.nq; q++)
		if (ln->c.pi[q] != SIZE_MAX && !ln->c.q[q].weight) {
			f->pt[ln->c.pi[q]].r2 += ln->c.acc[2 * q];
			f->pt[ln->c.pi[q]].d2 += ln->c.acc[2 * q + 1];
		}
	lane_release(L, ln);
}

/* Lane k's buffers and (k > 0) executors: clones of lane 0's, observed into its own sums. */
static int lane_init(const lanes *L, lane *ln, const lane *l0, size_t k)
{
	oq_exec_opts eo = {.threads = 1};
	int rc;

	oq_diag_init(&ln->d);
	ln->i = SIZE_MAX;
	ln->in = oq_calloc(L->nin + 1, sizeof *ln->in);
	ln->qin = oq_calloc(L->nin + 1, sizeof *ln->qin);
	ln->fo = oq_calloc(L->nout + 1, sizeof *ln->fo);
	ln->qo = oq_calloc(L->nqo + 1, sizeof *ln->qo);
	if (!ln->in || !ln->qin || !ln->fo || !ln->qo)
		return OQ_ENOMEM;
	if (k == 0)
		return OQ_OK;
	ln->c = l0->c;
	if (!(ln->c.acc = oq_calloc(2 * ln->c.nq + 1, sizeof *ln->c.acc)))
		return OQ_ENOMEM;
	if ((rc = oq_exec_clone(l0->qe, &eo, &ln->qe, &ln->d)))
		return rc;
	oq_exec_set_observer(ln->qe, observe, &ln->c);
	if (l0->fe) {
		if ((rc = oq_exec_clone(l0->fe, &eo, &ln->fe, &ln->d)))
			return rc;
		ln->own_fe = 1;
	}
	return OQ_OK;
}

static void lane_free(const lanes *L, lane *ln, size_t k)
{
	lane_release(L, ln);
	free(ln->in);
	free(ln->qin);
	free(ln->fo);
	free(ln->qo);
	if (k > 0) {
		free(ln->c.acc);
		oq_exec_free(ln->qe);
	}
	if (ln->own_fe)
		oq_exec_free(ln->fe);
	memset(ln, 0, sizeof *ln);
}

/*
 * Samples [b, e) of one fold on qe (lane 0's quantized executor, observed into c). *lane_bytes: a
 * lane's memory as an earlier fold measured it (0: none yet; then the first sample runs alone, on
 * every thread, to measure it), updated after the fold.
 */
static int run_fold(lanes *L, oq_exec *fe, oq_exec *qe, octx *c, size_t b, size_t e, oq_fidelity *f,
		    const size_t *omap, size_t *lane_bytes, oq_diag *d)
{
	oq_pool *pool = oq_exec_pool(qe);
	size_t nt = (size_t)oq_pool_threads(pool), nl = 1, want;
	int rc = OQ_OK;

	if (!(L->v = oq_calloc(nt + 1, sizeof *L->v)))
		return oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
	L->v[0].fe = L->fout ? NULL : fe;
	L->v[0].qe = qe;
	L->v[0].c = *c;
	if (lane_init(L, &L->v[0], NULL, 0)) {
		rc = oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
		goto out;
	}
	/* the first sample alone, on every thread: it measures a lane's memory (the folds' models
	 * differ in their scales only) */
	if (b < e && !*lane_bytes) {
		if ((rc = lane_run(L, &L->v[0], b)))
			goto lane_err;
		lane_commit(L, &L->v[0], f, omap);
		b++;
	}
	want = e - b >= 2 ? oq_calib_lane_count((int)nt, *lane_bytes ? *lane_bytes
								     : oq_exec_peak_bytes(qe) +
									       (L->fout ? 0 : oq_exec_peak_bytes(fe)) +
									       ((size_t)4 << 20))
			  : 0;
	for (; nl < want; nl++)
		if ((rc = lane_init(L, &L->v[nl], &L->v[0], nl))) {
			rc = L->v[nl].d.count ? oq_err(d, rc, "%s", L->v[nl].d.msg)
					      : oq_err(d, rc, "fold SQNR: out of memory");
			nl++;
			goto out;
		}
	L->nl = nl;
	for (L->next = b, L->end = e; L->next < e; L->next += nl) {
		if (nl > 1)
			oq_pool_run(pool, nl, 1, lanes_run, L);
		else
			L->v[0].rc = lane_run(L, &L->v[0], L->next);
		for (size_t k = 0; k < nl && L->next + k < e; k++) {
			if (L->v[k].rc) {
				rc = L->v[k].rc;
				if (L->v[k].d.count)
					rc = oq_err(d, rc, "%s", L->v[k].d.msg);
				goto out;
			}
			lane_commit(L, &L->v[k], f, omap);
		}
	}
	if (!*lane_bytes && oq_exec_peak_bytes(qe)) /* (a fold with no sample measured nothing) */
		*lane_bytes = oq_exec_peak_bytes(qe) + (L->fout ? 0 : oq_exec_peak_bytes(fe)) + ((size_t)4 << 20);
	goto out;
lane_err:
	if (L->v[0].d.count)
		rc = oq_err(d, rc, "%s", L->v[0].d.msg);
out:
	for (size_t k = 0; k < nl; k++)
		lane_free(L, &L->v[k], k);
	free(L->v);
	L->v = NULL;
	L->nl = 0;
	return rc;
}

/* The position among the m samples oq_samples_thin keeps of n of the first one at index i or later. */
static size_t first_kept(size_t i, size_t n, size_t m)
{
	size_t j = 0;
	while (j < m && oq_samples_pick(j, n, m) < i)
		j++;
	return j;
}

/* map[i] := the index among e's outputs of the output named names[i] (i < n). */
static int map_outputs(const oq_graph *g, const oq_exec *e, size_t *map, oq_diag *d)
{
	for (size_t i = 0; i < g->n_outputs; i++) {
		size_t k = 0;
		while (k < oq_exec_n_outputs(e) && strcmp(g->outputs[i]->name, oq_exec_output(e, k)->name))
			k++;
		if (k == oq_exec_n_outputs(e))
			return oq_err(d, OQ_EINVAL, "fold SQNR: the quantized model lacks output '%s'",
				      g->outputs[i]->name);
		map[i] = k;
	}
	return OQ_OK;
}

/*
 * Scans the samples for e (the executor they are loaded for); m := how many of the first n (the
 * statistics' count) run. OQ_EINVAL when n is not the statistics' count.
 */
static int scan(const oq_calib_opts *co, const oq_exec *e, uint64_t n_total, oq_samples *s, size_t *n,
		size_t *m, oq_diag *d)
{
	int rc;

	oq_samples_free(s);
	memset(s, 0, sizeof *s);
	if ((rc = oq_samples_scan(co->source, e, s, d)) || (rc = oq_samples_check(s, e, d)))
		return rc;
	*n = co->limit && co->limit < s->n ? co->limit : s->n;
	if (*n != n_total)
		return oq_err(d, OQ_EINVAL, "fold SQNR: %zu samples, but the statistics hold %llu", *n,
			      (unsigned long long)n_total);
	/* fold f is the samples of [begin(f), begin(f + 1)) of all n that the thinning kept */
	*m = oq_samples_thin(s, *n, OQ_MEASURE_SAMPLES);
	return OQ_OK;
}

/*
 * With fm's outputs given (fout), fm is not run, and no executor is made for it (its packed
 * weights would be the report's peak memory): each fold's quantized executor scans and loads the
 * samples itself (its inputs are fm's). Else fm's executor runs beside them and loads them.
 */
int oq_fidelity_measure_ranges(oq_model *fm, const oq_calib_opts *co, const oq_ranges *fr, size_t n_folds,
			       uint64_t n_total, const oq_bc_float_cache *fout, oq_fid_make_fn make,
			       void *ctx, oq_fidelity *out, oq_diag *d)
{
	oq_exec_opts eo = {.threads = co->threads}, qeo = {.threads = co->threads, .fold_dq = 1};
	oq_exec *fe = NULL, *qe = NULL;
	oq_model *qm = NULL;
	oq_samples s;
	size_t *imap = NULL, *omap = NULL, nin = 0, nout = fm->graph->n_outputs, n = 0, m = 0, lane_bytes = 0;
	lanes L;
	octx c;
	int rc;

	memset(out, 0, sizeof *out);
	memset(&s, 0, sizeof s);
	memset(&c, 0, sizeof c);
	memset(&L, 0, sizeof L);
	if (n_folds < 2)
		return oq_err(d, OQ_EINVAL, "fold SQNR: the statistics have no folds");
	if (!fout && ((rc = oq_exec_new(fm, &eo, &fe, d)) || (rc = scan(co, fe, n_total, &s, &n, &m, d))))
		goto fail;
	out->k = n_folds;
	out->n_all = n_total;
	out->n_out = nout;
	omap = oq_calloc(nout + 1, sizeof *omap);
	out->out = oq_calloc(nout + 1, sizeof *out->out);
	out->r2 = oq_calloc(nout + 1, sizeof *out->r2);
	out->d2 = oq_calloc(nout + 1, sizeof *out->d2);
	if (!omap || !out->out || !out->r2 || !out->d2) {
		rc = oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
		goto fail;
	}
	for (size_t o = 0; o < nout; o++)
		if (!(out->out[o] = oq_strdup(fm->graph->outputs[o]->name))) {
			rc = oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
			goto fail;
		}
	L.s = &s;
	L.nout = nout;
	for (size_t f = 0; f < out->k; f++) {
		size_t b, e;

		if ((rc = make(ctx, &fr[f], &qm, d)) || (rc = points(fm, qm, f == 0, out, &c, d)) || (rc = oq_exec_new(qm, &qeo, &qe, d)))
			goto fail;
		if (f == 0 && !fe) {
			if ((rc = scan(co, qe, n_total, &s, &n, &m, d)))
				goto fail;
			if (fout->state != 1 || fout->n != m || fout->nout != nout) {
				/* not the outputs of these samples: fm runs after all */
				fout = NULL;
				if ((rc = oq_exec_new(fm, &eo, &fe, d)) || (rc = scan(co, fe, n_total, &s, &n, &m, d)))
					goto fail;
			}
		}
		if (f == 0) {
			out->n = m;
			L.fout = fout;
			nin = oq_exec_n_inputs(fe ? fe : qe);
			if (!(imap = oq_calloc(nin + 1, sizeof *imap))) {
				rc = oq_err(d, OQ_ENOMEM, "fold SQNR: out of memory");
				goto fail;
			}
			L.nin = nin;
			L.imap = imap;
		}
		L.le = fe ? fe : qe;
		oq_exec_set_observer(qe, observe, &c);
		oq_exec_set_observe_want(qe, want);
		L.nqo = oq_exec_n_outputs(qe);
		if (!fe && oq_exec_n_inputs(qe) != nin) {
			rc = oq_err(d, OQ_EINVAL, "fold SQNR: fold %zu's model has other inputs (internal error)", f);
			goto fail;
		}
		for (size_t k = 0; !fe && k < nin; k++)
			imap[k] = k;
		b = first_kept(oq_folds_begin(f, n, out->k), n, m);
		e = first_kept(oq_folds_begin(f + 1, n, out->k), n, m);
		if ((fe && (rc = map_names(fe, qe, 0, imap, d))) || (rc = map_outputs(fm->graph, qe, omap, d)) ||
		    (rc = run_fold(&L, fe, qe, &c, b, e, out, omap, &lane_bytes, d)))
			goto fail;
		oq_exec_free(qe);
		qe = NULL;
		oq_model_free(qm);
		qm = NULL;
		octx_free(&c);
	}
	rc = OQ_OK;
fail:
	free(imap);
	free(omap);
	octx_free(&c);
	oq_exec_free(qe);
	oq_model_free(qm);
	oq_exec_free(fe);
	oq_samples_free(&s);
	if (rc)
		oq_fidelity_free(out);
	return rc;
}

/* Is point i worse than point j (lower own SQNR; NaN first; ties: node order)? */
static int worse(const oq_fidelity *f, size_t i, size_t j)
{
	double x = oq_fidelity_db(f->pt[i].r2, f->pt[i].d2), y = oq_fidelity_db(f->pt[j].r2, f->pt[j].d2);
	int ux = f->pt[i].r2 == 0 && f->pt[i].d2 == 0, uy = f->pt[j].r2 == 0 && f->pt[j].d2 == 0;

	if (ux != uy) /* never seen (no value reached it): last */
		return uy;
	if (isnan(x) != isnan(y))
		return isnan(x);
	if (x != y && !isnan(x))
		return x < y;
	return i < j;
}

size_t *oq_fidelity_rank(const oq_fidelity *f)
{
	size_t *r = oq_calloc(f->n_pt + 1, sizeof *r);

	if (!r)
		return NULL;
	for (size_t i = 0; i < f->n_pt; i++) { /* points are few: insertion sort */
		size_t x = i;
		for (; x > 0 && worse(f, i, r[x - 1]); x--)
			r[x] = r[x - 1];
		r[x] = i;
	}
	return r;
}
