/*
 * cle.c - cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization Through Weight
 * Equalization and Bias Correction", section 4.1).
 *
 *   Conv1(X, W1, b1) -> A* -> Conv2(., W2, b2) [, Conv2'(., W2', b2') ...]
 *     ==>  Conv1(X, W1 / s, b1 / s) -> A* -> Conv2(., W2 * s, b2) [, ...]
 *
 *   r1_i = max |W1[i, ...]|      over the elements of Conv1's output channel i,
 *   r2_i = max |W2[:, i, ...]|   over the elements of every consumer reading input channel i,
 *   s_i  = sqrt(r1_i / r2_i)     (1 when either range is 0),
 * so both ranges become sqrt(r1_i * r2_i). A* is a chain (possibly empty) of single-consumer
 * ops f with f(s x) = s f(x) per channel for any s > 0: Relu, LeakyRelu, PRelu, MaxPool,
 * AveragePool, GlobalAveragePool and Clip(x, 0 or none, none). The float model computes the
 * same function (up to float32 rounding of the rescaled weights: arithmetic in double, each
 * weight rounded once at the end).
 *
 * Channel i of a layer's output / input, by op (W's dims):
 *   Conv           W [M, C/g, k...]: output channel m is W[m]; input channel
 *                  (m / (M/g)) * (C/g) + c is W[m, c] (depthwise: input channel i is W[i, 0]);
 *   ConvTranspose  W [C, M/g, k...]: input channel c is W[c]; output channel
 *                  (c / (C/g)) * (M/g) + j is W[c, j].
 *
 * Chains (Conv1 -> Conv2 -> Conv3 ...) share layers between pairs, so one pair's scales change
 * the next pair's ranges: all pairs are swept in graph order until no scale moves by more than
 * OQ_CLE_TOL (at most OQ_CLE_SWEEPS sweeps); the scales converge (Nagel et al., appendix).
 *
 * Not equalized: Relu6 and any Clip with a finite upper bound (or a nonzero lower one):
 * clip(x / s, lo, hi) = clip(x, lo s, hi s) / s, and one Clip node holds one pair of bounds
 * (ONNX Clip's min and max are scalars), so only a scale common to every channel of the pair
 * keeps the float model exact. A common scale equalizes nothing: per-channel grids are
 * invariant under any per-channel factor and per-tensor grids under a common one, so both
 * layers' quantization errors stay as they were. Such pairs are therefore skipped, counted in
 * the log line (DFQ replaces Relu6 by Relu, which changes the float model; we keep it exact).
 * High-bias absorption is not done: it needs the BatchNormalization statistics that fold-bn
 * (which runs before) has folded away.
 *
 * Conditions: W1, W2 (and b1 when present) are float32 constants of the graph; every value on
 * the path is private (not a graph output, not captured) and read by exactly one node, the
 * last one only by Conv/ConvTranspose nodes as their input 0 with a matching channel count.
 * A weight or bias another node also reads is copied, never changed in place
 * (oq_pass_set_const).
 */
#include "passes/pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sweep limit and convergence tolerance: stop when every |s_i - 1| < OQ_CLE_TOL. */
#define OQ_CLE_SWEEPS 200
#define OQ_CLE_TOL 1e-6

/* A Conv/ConvTranspose taking part: its weight (and bias) in double while the scales move. */
typedef struct layer {
	oq_node *node;
	int transpose;       /* ConvTranspose */
	double *w;           /* W, C order */
	double *b;           /* bias [M], or NULL (none) */
	size_t nw;           /* elements of W */
	size_t d0, d1;       /* W's dims 0 and 1 */
	size_t inner;        /* elements per (d0, d1) entry: the kernel */
	size_t group;        /* `group` attribute */
	size_t n_out, n_in;  /* output and input channels */
	int changed;
} layer;

/* One equalized pair: a first layer and the consumers of its (activated) output. */
typedef struct pair {
	size_t first;        /* index into the layer table */
	size_t *second;      /* consumer layer indices */
	size_t n_second;
} pair;

typedef struct cle {
	oq_graph *g;
	layer *ly;
	size_t n_ly, cap_ly;
	pair *pr;
	size_t n_pr, cap_pr;
	size_t n_clip;       /* pairs skipped: a Clip with bounds on the path */
} cle;

static size_t out_chan(const layer *l, size_t e)
{
	size_t a = e / (l->d1 * l->inner), b = (e / l->inner) % l->d1;
	if (!l->transpose)
		return a;
	return (a / (l->d0 / l->group)) * l->d1 + b;
}

static size_t in_chan(const layer *l, size_t e)
{
	size_t a = e / (l->d1 * l->inner), b = (e / l->inner) % l->d1;
	if (l->transpose)
		return a;
	return (a / (l->d0 / l->group)) * l->d1 + b;
}

/* Constant scalar c (absent: the op's default, i.e. no bound) equals `want`? */
static int const_is(const oq_graph *g, const oq_node *n, size_t idx, double want)
{
	const oq_tensor *t;
	if (idx >= n->n_inputs || !n->inputs[idx])
		return isinf(want);
	t = oq_value_const(g, n->inputs[idx]);
	return t && t->nelem == 1 && oq_tensor_get(t, 0) == want;
}

/*
 * 1 when n passes s x through as s f(x) for every positive per-channel s (see the header);
 * *clip = 1 for a Clip with bounds (not positively homogeneous).
 */
static int homogeneous(const oq_graph *g, const oq_node *n, int *clip)
{
	*clip = 0;
	if (oq_node_is(n, OQ_OP_Relu) || oq_node_is(n, OQ_OP_LeakyRelu) || oq_node_is(n, OQ_OP_PRelu) ||
	    oq_node_is(n, OQ_OP_AveragePool) || oq_node_is(n, OQ_OP_GlobalAveragePool))
		return 1;
	if (oq_node_is(n, OQ_OP_MaxPool))
		return n->n_outputs < 2 || !n->outputs[1] || !n->outputs[1]->n_uses;
	if (oq_node_is(n, OQ_OP_Clip)) {
		const oq_attr *lo = oq_node_attr(n, "min"), *hi = oq_node_attr(n, "max");
		int ok;
		if (lo || hi) /* opset < 11: attributes */
			ok = (!lo || lo->f == 0.0f) && (!hi || hi->f >= 3.4e38f);
		else
			ok = (const_is(g, n, 1, 0.0) || const_is(g, n, 1, -INFINITY)) && const_is(g, n, 2, INFINITY);
		*clip = !ok;
		return ok;
	}
	return 0;
}

/* The layer-table entry of Conv/ConvTranspose n (added on first sight); SIZE_MAX when n cannot take part. */
static size_t layer_of(cle *c, oq_node *n, int *rc)
{
	const oq_tensor *W, *B = NULL;
	layer *l;
	int64_t grp;

	*rc = OQ_OK;
	for (size_t i = 0; i < c->n_ly; i++)
		if (c->ly[i].node == n)
			return i;
	if (!(oq_node_is(n, OQ_OP_Conv) || oq_node_is(n, OQ_OP_ConvTranspose)) || n->n_inputs < 2 ||
	    !n->inputs[1] || !(W = oq_value_const(c->g, n->inputs[1])) || W->dtype != OQ_DT_FLOAT || W->rank < 3 ||
	    W->nelem == 0)
		return SIZE_MAX;
	if (n->n_inputs >= 3 && n->inputs[2] &&
	    (!(B = oq_value_const(c->g, n->inputs[2])) || B->dtype != OQ_DT_FLOAT || B->rank != 1))
		return SIZE_MAX;
	grp = oq_node_attr_int(n, "group", 1);
	if (grp < 1 || W->dims[0] % grp)
		return SIZE_MAX;
	if (c->n_ly == c->cap_ly) {
		size_t cap = c->cap_ly ? 2 * c->cap_ly : 16;
		layer *v = realloc(c->ly, cap * sizeof *v);
		if (!v) {
			*rc = OQ_ENOMEM;
			return SIZE_MAX;
		}
		c->ly = v;
		c->cap_ly = cap;
	}
	l = &c->ly[c->n_ly];
	memset(l, 0, sizeof *l);
	l->node = n;
	l->transpose = n->op == OQ_OP_ConvTranspose;
	l->nw = W->nelem;
	l->d0 = (size_t)W->dims[0];
	l->d1 = (size_t)W->dims[1];
	l->inner = W->nelem / (l->d0 * l->d1);
	l->group = (size_t)grp;
	l->n_out = l->transpose ? l->d1 * l->group : l->d0;
	l->n_in = l->transpose ? l->d0 : l->d1 * l->group;
	if (B && B->nelem != l->n_out)
		return SIZE_MAX;
	if (!(l->w = oq_calloc(l->nw, sizeof *l->w)) || (B && !(l->b = oq_calloc(l->n_out, sizeof *l->b)))) {
		free(l->w);
		free(l->b);
		*rc = OQ_ENOMEM;
		return SIZE_MAX;
	}
	for (size_t e = 0; e < l->nw; e++)
		l->w[e] = oq_tensor_get(W, e);
	for (size_t e = 0; B && e < l->n_out; e++)
		l->b[e] = oq_tensor_get(B, e);
	return c->n_ly++;
}

/* Adds the pair starting at Conv/ConvTranspose n when the pattern holds. */
static int try_pair(cle *c, oq_node *n)
{
	oq_value *v = n->n_outputs ? n->outputs[0] : NULL;
	oq_node *u;
	size_t f, *sec = NULL, ns = 0;
	int rc, clip = 0;

	if (!v || n->n_outputs != 1 || v->graph != c->g)
		return OQ_OK;
	/* walk the homogeneous chain to the value the consumers read */
	while (oq_value_is_private(v) && (u = oq_value_only_user(v)) && u->n_outputs >= 1 && u->outputs[0] &&
	       u->inputs[0] == v) {
		int cl;
		/* a bounded Clip ends the pattern; walking on only tells the log it was one */
		if (!homogeneous(c->g, u, &cl) && !cl)
			break;
		clip |= cl;
		v = u->outputs[0];
	}
	if (!oq_value_is_private(v) || v->n_uses == 0)
		return OQ_OK;
	for (size_t k = 0; k < v->n_uses; k++) {
		const oq_node *w = v->uses[k].node;
		if (!w->dead && (v->uses[k].index != 0 || !(oq_node_is(w, OQ_OP_Conv) || oq_node_is(w, OQ_OP_ConvTranspose))))
			return OQ_OK;
	}
	if (clip) {
		c->n_clip++;
		return OQ_OK;
	}
	if ((f = layer_of(c, n, &rc)) == SIZE_MAX)
		return rc;
	if (!(sec = oq_calloc(v->n_uses, sizeof *sec)))
		return OQ_ENOMEM;
	for (size_t k = 0; k < v->n_uses; k++) {
		size_t s;
		if (v->uses[k].node->dead)
			continue;
		if ((s = layer_of(c, v->uses[k].node, &rc)) == SIZE_MAX || c->ly[s].n_in != c->ly[f].n_out ||
		    s == f) {
			free(sec);
			return rc;
		}
		sec[ns++] = s;
	}
	if (c->n_pr == c->cap_pr) {
		size_t cap = c->cap_pr ? 2 * c->cap_pr : 16;
		pair *p = realloc(c->pr, cap * sizeof *p);
		if (!p) {
			free(sec);
			return OQ_ENOMEM;
		}
		c->pr = p;
		c->cap_pr = cap;
	}
	c->pr[c->n_pr++] = (pair){.first = f, .second = sec, .n_second = ns};
	return OQ_OK;
}

/* One pair's scales from the current weights, applied; returns max |s_i - 1|. r1, r2: n_out scratch. */
static double equalize(cle *c, const pair *p, double *r1, double *r2)
{
	layer *a = &c->ly[p->first];
	size_t C = a->n_out;
	double worst = 0;

	for (size_t i = 0; i < C; i++)
		r1[i] = r2[i] = 0;
	for (size_t e = 0; e < a->nw; e++) {
		size_t i = out_chan(a, e);
		r1[i] = fmax(r1[i], fabs(a->w[e]));
	}
	for (size_t k = 0; k < p->n_second; k++) {
		const layer *b = &c->ly[p->second[k]];
		for (size_t e = 0; e < b->nw; e++) {
			size_t i = in_chan(b, e);
			r2[i] = fmax(r2[i], fabs(b->w[e]));
		}
	}
	/* r1 becomes s_i */
	for (size_t i = 0; i < C; i++) {
		r1[i] = r1[i] > 0 && r2[i] > 0 ? sqrt(r1[i] / r2[i]) : 1.0;
		worst = fmax(worst, fabs(r1[i] - 1));
	}
	if (worst == 0)
		return 0;
	for (size_t e = 0; e < a->nw; e++)
		a->w[e] /= r1[out_chan(a, e)];
	for (size_t i = 0; a->b && i < C; i++)
		a->b[i] /= r1[i];
	a->changed = 1;
	for (size_t k = 0; k < p->n_second; k++) {
		layer *b = &c->ly[p->second[k]];
		for (size_t e = 0; e < b->nw; e++)
			b->w[e] *= r1[in_chan(b, e)];
		b->changed = 1;
	}
	return worst;
}

/* Writes a changed layer's weight and bias back (copies when shared). */
static int store(cle *c, const layer *l)
{
	const oq_tensor *W = oq_value_const(c->g, l->node->inputs[1]);
	float *f = oq_calloc(l->nw > l->n_out ? l->nw : l->n_out, sizeof *f);
	int64_t dims[OQ_MAX_RANK], bd = (int64_t)l->n_out;
	int rank = W->rank, rc;
	char base[256];

	if (!f)
		return OQ_ENOMEM;
	memcpy(dims, W->dims, (size_t)rank * sizeof *dims);
	for (size_t e = 0; e < l->nw; e++)
		f[e] = (float)l->w[e];
	snprintf(base, sizeof base, "%.200s_cle", l->node->inputs[1]->name);
	rc = oq_pass_set_const(c->g, l->node, 1, base, rank, dims, f);
	if (!rc && l->b) {
		for (size_t i = 0; i < l->n_out; i++)
			f[i] = (float)l->b[i];
		snprintf(base, sizeof base, "%.200s_cle", l->node->inputs[2]->name);
		rc = oq_pass_set_const(c->g, l->node, 2, base, 1, &bd, f);
	}
	free(f);
	return rc;
}

int oq_pass_cle(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	cle c = {.g = g};
	double *r1 = NULL, *r2 = NULL, worst = 0;
	size_t maxc = 1, sweeps = 0, n_changed = 0;
	int rc = OQ_OK;

	*changed = 0;
	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "cle: out of memory");
	for (size_t i = 0; i < g->n_nodes && !rc; i++)
		if (oq_node_is(g->nodes[i], OQ_OP_Conv) || oq_node_is(g->nodes[i], OQ_OP_ConvTranspose))
			rc = try_pair(&c, g->nodes[i]);
	if (rc)
		goto out;
	for (size_t k = 0; k < c.n_pr; k++)
		maxc = c.ly[c.pr[k].first].n_out > maxc ? c.ly[c.pr[k].first].n_out : maxc;
	if (!(r1 = oq_calloc(maxc, sizeof *r1)) || !(r2 = oq_calloc(maxc, sizeof *r2))) {
		rc = OQ_ENOMEM;
		goto out;
	}
	for (sweeps = 0; sweeps < OQ_CLE_SWEEPS && c.n_pr; sweeps++) {
		worst = 0;
		for (size_t k = 0; k < c.n_pr; k++)
			worst = fmax(worst, equalize(&c, &c.pr[k], r1, r2));
		if (worst < OQ_CLE_TOL)
			break;
	}
	for (size_t i = 0; i < c.n_ly && !rc; i++)
		if (c.ly[i].changed) {
			rc = store(&c, &c.ly[i]);
			n_changed++;
		}
	if (rc)
		goto out;
	*changed = n_changed > 0;
	if (o && o->log)
		fprintf(o->log, "cle: %zu layer pairs equalized (%zu layers rescaled, %zu sweeps, last max |s-1| %.2g); "
			"%zu pairs skipped: a Clip with bounds between them\n", c.n_pr, n_changed,
			sweeps + (sweeps < OQ_CLE_SWEEPS), worst, c.n_clip);
out:
	for (size_t i = 0; i < c.n_ly; i++) {
		free(c.ly[i].w);
		free(c.ly[i].b);
	}
	for (size_t k = 0; k < c.n_pr; k++)
		free(c.pr[k].second);
	free(c.ly);
	free(c.pr);
	free(r1);
	free(r2);
	if (rc)
		return oq_err(d, rc, "cle: out of memory");
	return OQ_OK;
}
