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
 *
 * High-bias absorption (section 4.1.2), after the scales converged:
 *
 *   Conv1(X, W1, b1) -> A* -> Conv2(., W2, b2)
 *     ==>  Conv1(X, W1, b1 - h) -> A* -> Conv2(., W2, b2 + W2 h),
 *   (W2 h)_m = sum over Conv2's input channels i and kernel positions k of W2[m, i, k] h_i,
 * where Conv1's output channel i before A* is modelled as N(beta_i, gamma_i^2) by the
 * BatchNormalization fold-bn folded into Conv1 (oq_value.bn; both divided by s_i, like b1):
 *   A* has Relu, LeakyRelu, PRelu or Clip(x, 0, none):  h_i = max(0, beta_i - 3 |gamma_i|);
 *     a(x - h) = a(x) - h holds where x >= h >= 0, so the float model changes only where a
 *     pre-activation falls below h_i (below the BN's 3-sigma bound);
 *   otherwise (no activation, MaxPool, GlobalAveragePool, AveragePool not counting pads):
 *     h_i = beta_i; every such op commutes with a per-channel shift, so the float model is
 *     unchanged, and each channel is centred: the ranges' union is then 6 max |gamma_i|
 *     wide, the narrowest a per-channel shift gives.
 * The consumer sees a(x) - h everywhere only where it reads no padding, so every Conv2 must
 * be a Conv (not ConvTranspose, whose output of a constant input is not constant at its
 * borders) with pads all 0 and auto_pad NOTSET or VALID (SAME_* only with a 1x1 kernel, which
 * never pads); an AveragePool that counts pads (count_include_pad with pads, auto_pad SAME_*
 * or ceil_mode) does not commute with the shift either. Such pairs, and pairs whose Conv1
 * had no BN (or fold-bn did not run in this process: the statistics are not saved), are
 * equalized without absorption; the log line counts the first kind. So are Relu-like pairs
 * with --weight-only: absorption narrows activation ranges, which stay float there, and the
 * Relu rule is not exact. Conv2 may be grouped or depthwise, and gets a bias when it had none.
 *
 * Conditions: W1, W2 (and b1, b2 when present) are float32 constants of the graph; every value on
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
	double *s;           /* first's output channels: the product of the scales applied */
	int relu;            /* A* has an op exact under a shift only where x >= h >= 0 (Relu) */
	int absorb;          /* the consumers and A* admit high-bias absorption (see the header) */
} pair;

typedef struct cle {
	oq_graph *g;
	layer *ly;
	size_t n_ly, cap_ly;
	pair *pr;
	size_t n_pr, cap_pr;
	size_t n_clip;       /* pairs skipped: a Clip with bounds on the path */
	size_t n_absorbed;   /* channels whose high bias moved into the consumers */
	size_t n_noabsorb;   /* pairs with BN statistics that absorption skipped (padding, ...) */
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

/* Are the int attribute's values (none: the op's default, all 0) all 0? */
static int ints_zero(const oq_node *n, const char *name)
{
	const oq_attr *a = oq_node_attr(n, name);
	for (size_t i = 0; a && i < a->n; i++)
		if (a->ints[i])
			return 0;
	return 1;
}

/* auto_pad of n: 0 for NOTSET (or absent) and VALID, 1 for SAME_UPPER/SAME_LOWER. */
static int auto_pads(const oq_node *n)
{
	const oq_attr *a = oq_node_attr(n, "auto_pad");
	return a && a->type == OQ_ATTR_STRING && strcmp(a->s.p, "NOTSET") && strcmp(a->s.p, "VALID");
}

/*
 * How homogeneous op n treats a per-channel shift x - h: 0 commutes for any h, 1 commutes where
 * x >= h >= 0 (Relu-like), 2 does not commute (an AveragePool that counts padding).
 */
static int shift_kind(const oq_graph *g, const oq_node *n)
{
	if (oq_node_is(n, OQ_OP_Relu) || oq_node_is(n, OQ_OP_LeakyRelu) || oq_node_is(n, OQ_OP_PRelu))
		return 1;
	if (oq_node_is(n, OQ_OP_Clip)) {
		const oq_attr *lo = oq_node_attr(n, "min");
		if (lo || oq_node_attr(n, "max"))
			return lo ? 1 : 0;
		return const_is(g, n, 1, 0.0);
	}
	if (oq_node_is(n, OQ_OP_AveragePool) && oq_node_attr_int(n, "count_include_pad", 0) &&
	    (!ints_zero(n, "pads") || auto_pads(n) || oq_node_attr_int(n, "ceil_mode", 0)))
		return 2;
	return 0;
}

/* Conv n reads no padding: pads all 0, auto_pad NOTSET/VALID or SAME_* with a kernel of ones. */
static int reads_no_pad(const oq_graph *g, const oq_node *n)
{
	const oq_tensor *W;
	if (!oq_node_is(n, OQ_OP_Conv) || !ints_zero(n, "pads"))
		return 0;
	if (!auto_pads(n))
		return 1;
	if (!(W = oq_value_const(g, n->inputs[1])))
		return 0;
	for (int k = 2; k < W->rank; k++)
		if (W->dims[k] != 1)
			return 0;
	return 1;
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
	int rc, clip = 0, kind = 0, shift_ok;
	double *sc;

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
		if (!cl) {
			int k = shift_kind(c->g, u);
			kind = k > kind ? k : kind;
		}
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
	shift_ok = kind < 2;
	for (size_t k = 0; k < v->n_uses; k++) {
		size_t s;
		if (v->uses[k].node->dead)
			continue;
		if ((s = layer_of(c, v->uses[k].node, &rc)) == SIZE_MAX || c->ly[s].n_in != c->ly[f].n_out ||
		    s == f) {
			free(sec);
			return rc;
		}
		shift_ok &= reads_no_pad(c->g, v->uses[k].node);
		sec[ns++] = s;
	}
	if (!(sc = oq_calloc(c->ly[f].n_out, sizeof *sc))) {
		free(sec);
		return OQ_ENOMEM;
	}
	for (size_t i = 0; i < c->ly[f].n_out; i++)
		sc[i] = 1;
	if (c->n_pr == c->cap_pr) {
		size_t cap = c->cap_pr ? 2 * c->cap_pr : 16;
		pair *p = realloc(c->pr, cap * sizeof *p);
		if (!p) {
			free(sec);
			free(sc);
			return OQ_ENOMEM;
		}
		c->pr = p;
		c->cap_pr = cap;
	}
	c->pr[c->n_pr++] = (pair){.first = f, .second = sec, .n_second = ns, .s = sc, .relu = kind == 1,
				  .absorb = shift_ok};
	return OQ_OK;
}

/* One pair's scales from the current weights, applied; returns max |s_i - 1|. r1, r2: n_out scratch. */
static double equalize(cle *c, pair *p, double *r1, double *r2)
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
	for (size_t i = 0; i < C; i++)
		p->s[i] *= r1[i];
	a->changed = 1;
	for (size_t k = 0; k < p->n_second; k++) {
		layer *b = &c->ly[p->second[k]];
		for (size_t e = 0; e < b->nw; e++)
			b->w[e] *= r1[in_chan(b, e)];
		b->changed = 1;
	}
	return worst;
}

/* l's bias, zeros when it had none (store() then adds the input). */
static int bias_of(layer *l)
{
	if (!l->b && !(l->b = oq_calloc(l->n_out, sizeof *l->b)))
		return OQ_ENOMEM;
	return OQ_OK;
}

/*
 * Pair p's statistics (the value its first layer writes) follow the scales; when p admits it,
 * its high biases h (see the header; h: n_out scratch) move from the first layer's bias into
 * the consumers' biases and the statistics' means.
 */
static int absorb(cle *c, const pair *p, int weight_only, double *h)
{
	layer *a = &c->ly[p->first];
	oq_bnstats *st = a->node->outputs[0]->bn;
	size_t C = a->n_out, k = 0;
	int rc;

	if (!st || st->n != C)
		return OQ_OK;
	for (size_t i = 0; i < C; i++) {
		st->mean[i] /= p->s[i];
		st->std[i] /= p->s[i];
		h[i] = p->relu ? fmax(0, st->mean[i] - 3 * st->std[i]) : st->mean[i];
		k += h[i] != 0;
	}
	if (!p->absorb || (p->relu && weight_only)) {
		c->n_noabsorb++;
		return OQ_OK;
	}
	if (!k)
		return OQ_OK;
	if ((rc = bias_of(a)))
		return rc;
	for (size_t i = 0; i < C; i++) {
		a->b[i] -= h[i];
		st->mean[i] -= h[i];
	}
	a->changed = 1;
	for (size_t j = 0; j < p->n_second; j++) {
		layer *b = &c->ly[p->second[j]];
		if ((rc = bias_of(b)))
			return rc;
		for (size_t e = 0; e < b->nw; e++)
			b->b[out_chan(b, e)] += b->w[e] * h[in_chan(b, e)];
		b->changed = 1;
	}
	c->n_absorbed += k;
	return OQ_OK;
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
		const oq_value *bv = l->node->n_inputs > 2 ? l->node->inputs[2] : NULL;
		for (size_t i = 0; i < l->n_out; i++)
			f[i] = (float)l->b[i];
		/* a bias absorption added is named after the weight */
		snprintf(base, sizeof base, bv ? "%.200s_cle" : "%.200s_bias_cle",
			 bv ? bv->name : l->node->inputs[1]->name);
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
	for (size_t k = 0; k < c.n_pr && !rc; k++)
		rc = absorb(&c, &c.pr[k], o && o->weight_only, r1);
	for (size_t i = 0; i < c.n_ly && !rc; i++)
		if (c.ly[i].changed) {
			rc = store(&c, &c.ly[i]);
			n_changed++;
		}
	if (rc)
		goto out;
	*changed = n_changed > 0;
	if (o && o->log)
		fprintf(o->log, "cle: %zu layer pairs equalized (%zu layers changed, %zu sweeps, last max |s-1| %.2g), "
			"%zu channels' high biases absorbed (%zu pairs with BN statistics not: a consumer pads, a pool "
			"counts pads, or a Relu with --weight-only); "
			"%zu pairs skipped: a Clip with bounds between them\n", c.n_pr, n_changed,
			sweeps + (sweeps < OQ_CLE_SWEEPS), worst, c.n_absorbed, c.n_noabsorb, c.n_clip);
out:
	for (size_t i = 0; i < c.n_ly; i++) {
		free(c.ly[i].w);
		free(c.ly[i].b);
	}
	for (size_t k = 0; k < c.n_pr; k++) {
		free(c.pr[k].second);
		free(c.pr[k].s);
	}
	free(c.ly);
	free(c.pr);
	free(r1);
	free(r2);
	if (rc)
		return oq_err(d, rc, "cle: out of memory");
	return OQ_OK;
}
