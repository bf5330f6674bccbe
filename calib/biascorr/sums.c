/*
 * sums.c - bias-correction statistics, observed during calibration
 * (contract in sums.h, layouts and math in calib/biascorr/tables.h).
 *
 * Conv and ConvTranspose: instead of the mean input tensor (activation
 * sized, and undefined when spatial sizes vary), each layer keeps one sum
 * per (input channel, kernel tap). Along spatial dim d, tap t of a Conv is
 * read at x index o*s + t*dil - pad by the output positions o whose index
 * lands inside [0, in); they form one contiguous range of o, so the input
 * positions tap t reads form a strided box and
 *     S[c, t] += sum of x[n, c, box(t)]                      (zero padding adds 0)
 * which is exact at the borders. ConvTranspose reads input position i
 * with tap t when i*s + t*dil - pad lands inside [0, out): a contiguous box
 * of i. Cost per sample: C x taps x output positions additions, the work of
 * one output channel of the layer. The geometry (pads, auto_pad, strides,
 * dilations) comes from the executor's own oq_linalg_conv_geom.
 */
#include "calib/biascorr/sums.h"

#include <stdlib.h>
#include <string.h>

#include "calib/kernels/linalg/linalg.h"

struct oq_bc_collector {
	const oq_graph *g;  /* main graph: only its values are observed */
	oq_bc_sums *s;     /* the layers being filled */
	size_t *first;      /* per value index: first layer reading it as data input, SIZE_MAX: none */
	size_t *next;       /* per layer: next layer with the same data input, SIZE_MAX: end */
};

/* Entries of S for layer l from its weight's dims; 0 when the weight does not fit. */
static size_t sum_size(const oq_bc_sums_layer *l)
{
	const oq_node *n = l->node;
	const oq_value *wv = l->w_idx >= 0 && (size_t)l->w_idx < n->n_inputs ? n->inputs[l->w_idx] : NULL;
	const oq_tensor *w = wv ? wv->init : NULL;
	size_t r = 1;

	if (!w || w->dtype != OQ_DT_FLOAT || l->w_idx != 1)
		return 0;
	if (oq_node_is(n, OQ_OP_Gemm) && w->rank == 2)
		return (size_t)w->dims[oq_node_attr_int(n, "transB", 0) ? 1 : 0];
	if (oq_node_is(n, OQ_OP_MatMul) && w->rank == 2)
		return (size_t)w->dims[0];
	if (oq_node_is(n, OQ_OP_Conv) && w->rank >= 3 && w->rank - 2 <= OQ_CONV_MAX_SP) {
		int64_t group = oq_node_attr_int(n, "group", 1);
		if (group < 1 || !oq_mul_size((size_t)w->dims[1], (size_t)group, &r))
			return 0;
	} else if (oq_node_is(n, OQ_OP_ConvTranspose) && w->rank >= 3 && w->rank - 2 <= OQ_CONV_MAX_SP) {
		r = (size_t)w->dims[0];
	} else {
		return 0;
	}
	for (int k = 2; k < w->rank; k++)
		if (!oq_mul_size(r, (size_t)w->dims[k], &r))
			return 0;
	return r;
}

int oq_bc_collector_new(const oq_graph *g, oq_bc_sums *s, oq_bc_collector **out, oq_diag *d)
{
	oq_bc_collector *c = oq_calloc(1, sizeof *c);

	*out = NULL;
	if (!c)
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory for bias-correction statistics");
	c->g = g;
	c->s = s;
	c->first = oq_calloc(g->n_values ? g->n_values : 1, sizeof *c->first);
	c->next = oq_calloc(s->n ? s->n : 1, sizeof *c->next);
	if (!c->first || !c->next)
		goto nomem;
	for (size_t i = 0; i < g->n_values; i++)
		c->first[i] = SIZE_MAX;
	/* in reverse, so each list runs in layer order */
	for (size_t i = s->n; i-- > 0;) {
		oq_bc_sums_layer *l = &s->v[i];
		const oq_value *x = l->node->n_inputs ? l->node->inputs[0] : NULL;
		l->count = 0;
		l->n_sum = sum_size(l);
		l->failed = l->n_sum == 0 || !x || x->graph != g || x->index >= g->n_values ||
			    g->values[x->index] != x;
		c->next[i] = SIZE_MAX;
		if (l->failed)
			continue;
		if (!(l->sum = oq_calloc(l->n_sum, sizeof *l->sum)))
			goto nomem;
		c->next[i] = c->first[x->index];
		c->first[x->index] = i;
	}
	*out = c;
	return OQ_OK;
nomem:
	oq_bc_collector_free(c);
	return oq_err(d, OQ_ENOMEM, "calibrate: out of memory for bias-correction statistics");
}

void oq_bc_collector_free(oq_bc_collector *c)
{
	if (!c)
		return;
	free(c->first);
	free(c->next);
	free(c);
}

/* ------------------------------------------------------------ Gemm, MatMul */

/* x [rows, K] (or [K, rows] when trans): S[k] += sum over rows. */
static void add_rows(double *S, const float *x, size_t rows, size_t K, int trans)
{
	if (trans) {
		for (size_t k = 0; k < K; k++) {
			double a = 0;
			for (size_t r = 0; r < rows; r++)
				a += (double)x[k * rows + r];
			S[k] += a;
		}
		return;
	}
	for (size_t r = 0; r < rows; r++)
		for (size_t k = 0; k < K; k++)
			S[k] += (double)x[r * K + k];
}

/* ------------------------------------------------------------ Conv, ConvTranspose */

/*
 * Along one dim: positions u in [0, nu) whose landing index u*s + off lies in
 * [0, nl) form [lo, lo + *cnt).
 */
static int64_t span(int64_t nu, int64_t nl, int64_t s, int64_t off, int64_t *cnt)
{
	int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
	int64_t hi = nl - 1 - off < 0 ? 0 : (nl - 1 - off) / s + 1;
	if (hi > nu)
		hi = nu;
	*cnt = hi > lo ? hi - lo : 0;
	return lo;
}

/* Sum of plane x (dims in[nsp]) over the box start[d] + j*step[d], j < cnt[d]. */
static double box_sum(const float *x, int nsp, const int64_t *in, const int64_t *start, const int64_t *cnt,
		      const int64_t *step)
{
	int64_t idx[OQ_CONV_MAX_SP] = {0};
	double s = 0;

	for (int d = 0; d < nsp; d++)
		if (cnt[d] <= 0)
			return 0;
	for (;;) {
		int64_t off = 0, st = step[nsp - 1], n = cnt[nsp - 1];
		const float *p;
		int d;
		for (d = 0; d < nsp - 1; d++)
			off = off * in[d] + start[d] + idx[d] * step[d];
		p = x + off * in[nsp - 1] + start[nsp - 1];
		for (int64_t j = 0; j < n; j++)
			s += (double)p[j * st];
		for (d = nsp - 2; d >= 0 && ++idx[d] == cnt[d]; d--)
			idx[d] = 0;
		if (d < 0)
			return s;
	}
}

static int add_conv(oq_bc_sums_layer *l, const oq_rt *x, int transpose)
{
	const oq_tensor *w = l->node->inputs[l->w_idx]->init;
	oq_rt wr;
	oq_kctx k;
	oq_diag scratch;
	oq_conv_geom g;
	int64_t *start[OQ_CONV_MAX_SP], *cnt[OQ_CONV_MAX_SP], *buf, nt = 0, off[OQ_CONV_MAX_SP];
	int64_t st[OQ_CONV_MAX_SP], cn[OQ_CONV_MAX_SP], step[OQ_CONV_MAX_SP];
	const float *xd = x->data;

	memset(&wr, 0, sizeof wr);
	wr.dtype = OQ_DT_FLOAT;
	wr.rank = w->rank;
	memcpy(wr.dims, w->dims, (size_t)w->rank * sizeof *w->dims);
	memset(&k, 0, sizeof k);
	k.node = l->node;
	k.opset = l->node->opset;
	k.d = &scratch;
	oq_diag_init(&scratch);
	if (oq_linalg_conv_geom(&k, x, &wr, transpose, &g) || (size_t)(g.c * g.k_size) != l->n_sum)
		return 1;
	for (int d = 0; d < g.nsp; d++)
		nt += g.k[d];
	if (!(buf = malloc(2 * (size_t)nt * sizeof *buf)))
		return 1;
	nt = 0;
	for (int d = 0; d < g.nsp; d++) {
		start[d] = buf + 2 * nt;
		cnt[d] = start[d] + g.k[d];
		nt += g.k[d];
		step[d] = transpose ? 1 : g.stride[d];
		for (int64_t t = 0; t < g.k[d]; t++) {
			int64_t o = t * g.dil[d] - g.pad[d], lo;
			if (!transpose) {
				lo = span(g.out[d], g.in[d], g.stride[d], o, &cnt[d][t]);
				start[d][t] = lo * g.stride[d] + o;
			} else {
				start[d][t] = span(g.in[d], g.out[d], g.stride[d], o, &cnt[d][t]);
			}
		}
	}
	for (int64_t n = 0; n < g.n; n++)
		for (int64_t c = 0; c < g.c; c++) {
			const float *plane = xd + (size_t)(n * g.c + c) * (size_t)g.in_size;
			double *S = l->sum + (size_t)c * (size_t)g.k_size;
			for (int64_t t = 0; t < g.k_size; t++) {
				int64_t r = t;
				for (int d = g.nsp - 1; d >= 0; d--) {
					off[d] = r % g.k[d];
					r /= g.k[d];
					st[d] = start[d][off[d]];
					cn[d] = cnt[d][off[d]];
				}
				S[t] += box_sum(plane, g.nsp, g.in, st, cn, step);
			}
		}
	free(buf);
	l->count += (uint64_t)g.n * (uint64_t)g.out_size;
	return 0;
}

/* ------------------------------------------------------------ observer */

static int add(oq_bc_sums_layer *l, const oq_rt *x)
{
	const oq_node *n = l->node;

	if (x->dtype != OQ_DT_FLOAT || (x->nelem && !x->data))
		return 1;
	if (oq_node_is(n, OQ_OP_Conv) || oq_node_is(n, OQ_OP_ConvTranspose))
		return add_conv(l, x, n->op == OQ_OP_ConvTranspose);
	if (oq_node_is(n, OQ_OP_Gemm)) {
		int ta = oq_node_attr_int(n, "transA", 0) != 0;
		if (x->rank != 2 || (size_t)x->dims[ta ? 0 : 1] != l->n_sum)
			return 1;
		add_rows(l->sum, x->data, (size_t)x->dims[ta ? 1 : 0], l->n_sum, ta);
		l->count += (uint64_t)x->dims[ta ? 1 : 0];
		return 0;
	}
	/* MatMul: x [..., K] (a 1-D x is one row) */
	if (x->rank < 1 || (size_t)x->dims[x->rank - 1] != l->n_sum)
		return 1;
	add_rows(l->sum, x->data, x->nelem / l->n_sum, l->n_sum, 0);
	l->count += x->nelem / l->n_sum;
	return 0;
}

int oq_bc_observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	oq_bc_collector *c = ctx;

	if (v->graph != c->g || v->index >= c->g->n_values || c->g->values[v->index] != v)
		return 0;
	for (size_t i = c->first[v->index]; i != SIZE_MAX; i = c->next[i]) {
		oq_bc_sums_layer *l = &c->s->v[i];
		if (!l->failed && add(l, t))
			l->failed = 1;
	}
	return 0;
}
