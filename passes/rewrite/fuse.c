/*
 * fuse.c - mark quantization units; the float computation is not changed.
 *
 * A unit is a group of nodes a runtime executes as one kernel (or that
 * must stay in float inside): values strictly inside it never get a Q/DQ
 * (OQ_QM_INTERNAL), its final output gets the unit's one Q/DQ
 * (OQ_QM_UNIT_OUT). Patterns, t = value marked internal:
 *
 *   P(..) -t-> Relu | Clip | LeakyRelu -> y     P in {Conv, ConvTranspose, Gemm, MatMul, Add}
 *         activation node marked OQ_QM_ACT: with asymmetric activations the
 *         Q of y reproduces it, so quantize may drop it
 *   MatMul(X, W) -t-> Add(t, const bias) -> y  (a following activation extends the unit)
 *   LayerNorm:  m = ReduceMean(x); d = Sub(x, m); q = Pow(d, 2) | Mul(d, d);
 *               v = ReduceMean(q); e = Add(v, eps); s = Sqrt(e); n = Div(d, s);
 *               [n2 = Mul(n, gamma); [y = Add(n2, beta)]]
 *   GELU:       t1 = Div(x, sqrt 2) | Mul(x, 1/sqrt 2); t2 = Erf(t1); t3 = Add(t2, 1);
 *               y = Mul(Mul(x, t3), 0.5) | Mul(Mul(x, 0.5), t3) | Mul(x, Mul(t3, 0.5))
 *   HardSwish:  a = Add(x, 3); c = Clip(a, 0, 6); h = Div(c, 6) | Mul(c, 1/6); y = Mul(x, h)
 *               or (PaddlePaddle) m = Mul(x, c); y = Div(m, 6) | Mul(m, 1/6)
 *   HardSigmoid: the same without the last Mul (y = h)
 *   In both, x itself joins the unit when a Conv/Gemm/MatMul/Add writes it
 *   and only the pattern reads it (Conv + HardSwish is one kernel in the
 *   runtimes; quantizing x as well costs PaddleOCR's rec model most of its
 *   accuracy).
 *   Swish/SiLU: s = Sigmoid(x) | Sigmoid(Mul(x, const)); y = Mul(x, s); x joins
 *               as for HardSwish
 *   P -t-> HardSigmoid | HardSwish | Sigmoid | Tanh | LeakyRelu -> y   (P a
 *               Conv/Gemm/MatMul): t internal, like a removable activation but
 *               the node stays (LeakyRelu: only when the unit is kept, below)
 *   Constant affine: t -> Mul(t, const) | Add(t, const) -> y where t has no other
 *               reader: t is internal and y carries the Q/DQ, so a chain like
 *               HardSwish -> Mul(scale) -> Add(shift) (PaddleOCR's learnable
 *               affine after every activation) is quantized once, not three
 *               times. Applied after the patterns and activations, in graph
 *               order, so chains extend.
 *
 * Runtime-aware placement (profile ORT, --prefer speed|balanced; pass.h
 * OQ_PREFER_*): ONNX Runtime runs a Conv as its integer kernel only when a Q
 * follows it, so the activation patterns form no unit: only x is marked
 * (OQ_QM_SPLIT) when it could have joined one, x gets a Q after its
 * producer, and the unit's ops are quantized one by one, which ONNX Runtime
 * runs as QLinearAdd / QLinearMul / QLinearSigmoid / QLinearLeakyRelu (the
 * Clip of a HardSwish is dropped into its Q, its Div by 6 folded into a
 * DequantizeLinear scale by the quantize pass). The constant affine rule
 * does not apply (QLinearAdd / QLinearMul take a constant operand, and a Mul
 * by a positive scalar folds into a scale). Units that should stay float
 * are left whole to the quantize pass's node selection (o->float_nodes).
 * Quantizing a LayerNorm's variance or a MatMul's output before its bias
 * destroys accuracy (REFERENCE.md 6b), hence these units.
 *
 * Every internal value must be read only inside its pattern, not be a
 * graph output and not be captured by a subgraph. Constants are matched
 * with tolerance 1e-3 (relative to the expected value, absolute below 1).
 * Patterns are matched before activations so a pattern's Clip is never
 * taken for a fusable activation. Marks are recomputed from scratch.
 */
#include "passes/pass.h"

#include <math.h>
#include <string.h>

/* Values a pattern's nodes may read as their private intermediates. */
#define MAXP 8

/* Input k of n, or NULL when n has fewer inputs (a file may give any node any count). */
static oq_value *in_k(const oq_node *n, size_t k)
{
	return k < n->n_inputs ? n->inputs[k] : NULL;
}

/* A constant whose every element is `want` (within tolerance). */
static int const_is(const oq_graph *g, const oq_value *v, double want)
{
	const oq_tensor *t = oq_value_const(g, v);
	double tol = 1e-3 * (fabs(want) > 1 ? fabs(want) : 1);
	if (!t || t->nelem == 0 || oq_dtype_kind(t->dtype) != 'f')
		return 0;
	for (size_t i = 0; i < t->nelem; i++)
		if (!(fabs(oq_tensor_get(t, i) - want) <= tol))
			return 0;
	return 1;
}

/* v can be internal: produced in g, no graph output, no capture. */
static int can_hide(const oq_value *v)
{
	return v && !(v->flags & (OQ_V_INPUT | OQ_V_OUTPUT | OQ_V_OUTER)) && !v->init &&
	       oq_value_n_captures(v) == 0;
}

/* The single consumer node of v (one or more uses by the same node), or NULL. */
static oq_node *sole(const oq_value *v)
{
	oq_node *u = NULL;
	if (!can_hide(v) || v->n_uses == 0)
		return NULL;
	for (size_t i = 0; i < v->n_uses; i++) {
		if (u && v->uses[i].node != u)
			return NULL;
		u = v->uses[i].node;
	}
	return u;
}

/* For a binary node n reading v: its other input. */
static oq_value *other(const oq_node *n, const oq_value *v)
{
	if (n->n_inputs != 2)
		return NULL;
	return in_k(n, 0) == v ? in_k(n, 1) : in_k(n, 1) == v ? in_k(n, 0) : NULL;
}

/* Node n is binary op `op` reading v and a constant equal to `c`. */
static int bin_const(const oq_graph *g, const oq_node *n, oq_op op, const oq_value *v, double c)
{
	return oq_node_is(n, op) && n->n_inputs == 2 && const_is(g, other(n, v), c);
}

/* Clip(a, 0, 6) in attribute (opset < 11) or input form. */
static int is_clip06(const oq_graph *g, const oq_node *n)
{
	if (!oq_node_is(n, OQ_OP_Clip) || n->n_outputs < 1)
		return 0;
	if (n->opset && n->opset < 11) {
		const oq_attr *lo = oq_node_attr(n, "min"), *hi = oq_node_attr(n, "max");
		return lo && hi && lo->type == OQ_ATTR_FLOAT && hi->type == OQ_ATTR_FLOAT &&
		       fabs(lo->f) <= 1e-3 && fabs(hi->f - 6) <= 6e-3;
	}
	return n->n_inputs == 3 && const_is(g, in_k(n, 1), 0) && const_is(g, n->inputs[2], 6);
}

/* Marks ts[0..k) internal and y the unit output. */
static void mark(oq_value *const *ts, size_t k, oq_value *y, size_t *units)
{
	for (size_t i = 0; i < k; i++)
		ts[i]->qmark |= OQ_QM_INTERNAL;
	y->qmark |= OQ_QM_UNIT_OUT;
	(*units)++;
}

static oq_value *out0(const oq_node *n)
{
	return n && n->n_outputs >= 1 ? n->outputs[0] : NULL;
}

/* ------------------------------------------------------------ patterns */

/* Starting at the Sub node. */
static void layernorm(const oq_graph *g, oq_node *sub, size_t *units)
{
	oq_value *x, *m, *d, *q, *v, *e, *s, *nv, *ts[MAXP];
	oq_node *rm1, *sq = NULL, *dv = NULL, *rm2, *ad, *rt, *n1, *n2;
	size_t k = 0;

	if (!oq_node_is(sub, OQ_OP_Sub) || sub->n_inputs != 2 || !(x = in_k(sub, 0)) || !(m = in_k(sub, 1)))
		return;
	rm1 = m->producer;
	if (!oq_node_is(rm1, OQ_OP_ReduceMean) || in_k(rm1, 0) != x || sole(m) != sub || !(d = out0(sub)) ||
	    !can_hide(d))
		return;
	/* d feeds exactly the squaring node and the Div */
	for (size_t i = 0; i < d->n_uses; i++) {
		oq_node *u = d->uses[i].node;
		if (oq_node_is(u, OQ_OP_Div) && in_k(u, 0) == d && !dv)
			dv = u;
		else if (u != dv && (!sq || sq == u) &&
			 ((oq_node_is(u, OQ_OP_Pow) && in_k(u, 0) == d && const_is(g, in_k(u, 1), 2)) ||
			  (oq_node_is(u, OQ_OP_Mul) && in_k(u, 0) == d && in_k(u, 1) == d)))
			sq = u;
		else
			return;
	}
	if (!sq || !dv || !(q = out0(sq)) || !oq_node_is(rm2 = sole(q), OQ_OP_ReduceMean) || !(v = out0(rm2)))
		return;
	ad = sole(v);
	if (!oq_node_is(ad, OQ_OP_Add) || !oq_value_const(g, other(ad, v)) || !(e = out0(ad)))
		return;
	rt = sole(e);
	if (!oq_node_is(rt, OQ_OP_Sqrt) || !(s = out0(rt)) || sole(s) != dv || in_k(dv, 1) != s || !(nv = out0(dv)))
		return;
	ts[k++] = m, ts[k++] = d, ts[k++] = q, ts[k++] = v, ts[k++] = e, ts[k++] = s;
	n1 = sole(nv);
	if (oq_node_is(n1, OQ_OP_Mul) && oq_value_const(g, other(n1, nv)) && out0(n1)) {
		ts[k++] = nv;
		nv = out0(n1);
		n2 = sole(nv);
		if (oq_node_is(n2, OQ_OP_Add) && oq_value_const(g, other(n2, nv)) && out0(n2)) {
			ts[k++] = nv;
			nv = out0(n2);
		}
	}
	mark(ts, k, nv, units);
}

/* Starting at the Erf node. */
static void gelu(const oq_graph *g, oq_node *erf, size_t *units)
{
	oq_value *t1, *t2, *t3, *x, *h, *y, *ts[MAXP];
	oq_node *p, *a1, *m1, *m2;
	size_t k = 0;

	if (!oq_node_is(erf, OQ_OP_Erf) || !(t1 = in_k(erf, 0)) || !(t2 = out0(erf)) || !sole(t1))
		return;
	p = t1->producer;
	if (!p || p->n_inputs != 2 || !in_k(p, 0) || !in_k(p, 1))
		return;
	x = oq_value_const(g, in_k(p, 0)) ? in_k(p, 1) : in_k(p, 0); /* Mul(c, x) too */
	if (oq_value_const(g, x) || (!(bin_const(g, p, OQ_OP_Div, x, sqrt(2.0)) && in_k(p, 0) == x) &&
			   !bin_const(g, p, OQ_OP_Mul, x, sqrt(0.5))))
		return;
	a1 = sole(t2);
	if (!bin_const(g, a1, OQ_OP_Add, t2, 1) || !(t3 = out0(a1)) || !(m1 = sole(t3)) ||
	    !oq_node_is(m1, OQ_OP_Mul) || m1->n_inputs != 2)
		return;
	ts[k++] = t1, ts[k++] = t2, ts[k++] = t3;
	oq_value *o = other(m1, t3);
	if (!o || !out0(m1))
		return;
	if (o == x) {
		/* Mul(x, t3) then Mul(., 0.5) */
		h = out0(m1);
		m2 = sole(h);
		if (!bin_const(g, m2, OQ_OP_Mul, h, 0.5) || !(y = out0(m2)))
			return;
		ts[k++] = h;
	} else if (const_is(g, o, 0.5)) {
		/* Mul(t3, 0.5) then Mul(x, .) */
		h = out0(m1);
		m2 = sole(h);
		if (!oq_node_is(m2, OQ_OP_Mul) || other(m2, h) != x || !(y = out0(m2)))
			return;
		ts[k++] = h;
	} else {
		/* Mul(Mul(x, 0.5), t3) */
		oq_node *hx = o->producer;
		if (!bin_const(g, hx, OQ_OP_Mul, x, 0.5) || sole(o) != m1)
			return;
		ts[k++] = o;
		y = out0(m1);
	}
	mark(ts, k, y, units);
}

/* Starting at the Clip node. */
static int is_unit_producer(const oq_node *p);

/*
 * The input x of an activation pattern joins the unit when a Conv/Gemm/
 * MatMul/Add writes it and only the pattern's nodes n1, n2 read it: the
 * producer and the activation then form one unit (a runtime's fused
 * Conv+HardSwish), quantized once at the activation's output.
 */
static int absorbable(const oq_value *x, const oq_node *n1, const oq_node *n2)
{
	if (!can_hide(x) || !is_unit_producer(x->producer) || x->producer->outputs[0] != x)
		return 0;
	for (size_t i = 0; i < x->n_uses; i++)
		if (x->uses[i].node != n1 && x->uses[i].node != n2)
			return 0;
	return 1;
}

static int runtime_aware(const oq_opts *o)
{
	return oq_runtime_aware(o);
}

/*
 * Whether an activation pattern reading x is marked as a unit (1), or left
 * to the quantize pass op by op (0: runtime-aware placement; x marked
 * OQ_QM_SPLIT when it could have joined). Kept: x joins the unit when
 * absorbable, through ts.
 */
static int form_unit(const oq_opts *o, oq_value *x, const oq_node *n1, const oq_node *n2, oq_value **ts,
		     size_t *k)
{
	int cand = absorbable(x, n1, n2);
	if (runtime_aware(o)) {
		if (cand)
			x->qmark |= OQ_QM_SPLIT;
		return 0;
	}
	if (cand)
		ts[(*k)++] = x;
	return 1;
}

static void hardswish(const oq_graph *g, const oq_opts *o, oq_node *clip, size_t *units)
{
	oq_value *a, *c, *h, *x, *ts[MAXP];
	oq_node *ad, *dv, *mu;
	size_t k = 0;

	if (!is_clip06(g, clip) || !(a = in_k(clip, 0)) || !(c = out0(clip)) || sole(a) != clip)
		return;
	ad = a->producer;
	if (!oq_node_is(ad, OQ_OP_Add) || ad->n_inputs != 2)
		return;
	x = const_is(g, in_k(ad, 1), 3) ? in_k(ad, 0) : const_is(g, in_k(ad, 0), 3) ? in_k(ad, 1) : NULL;
	if (!x || oq_value_const(g, x))
		return;
	dv = sole(c);
	/* PaddlePaddle's order: m = Mul(x, c); y = Div(m, 6) | Mul(m, 1/6) */
	if (oq_node_is(dv, OQ_OP_Mul) && other(dv, c) == x && (h = out0(dv))) {
		oq_node *d6 = sole(h);
		if (d6 && ((oq_node_is(d6, OQ_OP_Div) && in_k(d6, 0) == h && const_is(g, in_k(d6, 1), 6)) ||
			   bin_const(g, d6, OQ_OP_Mul, h, 1.0 / 6)) &&
		    out0(d6)) {
			ts[k++] = a, ts[k++] = c, ts[k++] = h;
			if (form_unit(o, x, ad, dv, ts, &k))
				mark(ts, k, out0(d6), units);
		}
		return;
	}
	if (!(dv && ((oq_node_is(dv, OQ_OP_Div) && in_k(dv, 0) == c && const_is(g, in_k(dv, 1), 6)) ||
		     bin_const(g, dv, OQ_OP_Mul, c, 1.0 / 6))) ||
	    !(h = out0(dv)))
		return;
	ts[k++] = a, ts[k++] = c;
	mu = sole(h);
	if (oq_node_is(mu, OQ_OP_Mul) && other(mu, h) == x && out0(mu)) {
		ts[k++] = h;
		h = out0(mu);
		if (!form_unit(o, x, ad, mu, ts, &k))
			return;
	} else if (runtime_aware(o)) {
		return; /* HardSigmoid: QLinearAdd with its Clip in the Q, the Div folded */
	}
	mark(ts, k, h, units);
}

/* Swish / SiLU at its Sigmoid: s = Sigmoid(x) | Sigmoid(Mul(x, const)); y = Mul(x, s). */
static void swish(const oq_graph *g, const oq_opts *o, oq_node *sg, size_t *units)
{
	oq_value *m = sg->n_inputs >= 1 ? in_k(sg, 0) : NULL, *x = m, *sv = out0(sg), *ts[MAXP];
	oq_node *first = sg, *mu, *pm;
	size_t k = 0;

	if (!m || !sv || sole(sv) == NULL)
		return;
	pm = m->producer;
	if (oq_node_is(pm, OQ_OP_Mul) && pm->n_inputs == 2 && sole(m) == sg) {
		oq_value *c = oq_value_const(g, in_k(pm, 1)) ? in_k(pm, 1) : oq_value_const(g, in_k(pm, 0)) ? in_k(pm, 0) : NULL;
		if (c && oq_value_const(g, c)->nelem == 1) {
			x = other(pm, c);
			first = pm;
			ts[k++] = m;
		}
	}
	mu = sole(sv);
	if (!x || oq_value_const(g, x) || !oq_node_is(mu, OQ_OP_Mul) || other(mu, sv) != x || !out0(mu))
		return;
	ts[k++] = sv;
	if (form_unit(o, x, first, mu, ts, &k))
		mark(ts, k, out0(mu), units);
}

/* ------------------------------------------------------------ activations */

static int is_act(const oq_graph *g, const oq_node *n)
{
	if (oq_node_is(n, OQ_OP_Relu) || oq_node_is(n, OQ_OP_LeakyRelu))
		return 1;
	if (!oq_node_is(n, OQ_OP_Clip))
		return 0;
	if (n->opset && n->opset < 11)
		return 1; /* bounds are attributes */
	for (size_t k = 1; k < n->n_inputs; k++)
		if (n->inputs[k] && !oq_value_const(g, n->inputs[k]))
			return 0;
	return 1;
}

static int is_unit_producer(const oq_node *p)
{
	return oq_node_is(p, OQ_OP_Conv) || oq_node_is(p, OQ_OP_ConvTranspose) || oq_node_is(p, OQ_OP_Gemm) ||
	       oq_node_is(p, OQ_OP_MatMul) || oq_node_is(p, OQ_OP_Add);
}

int oq_pass_fuse(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	size_t units = 0, acts = 0, split = 0;
	int rc;

	*changed = 0;
	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "fuse: out of memory");
	for (size_t i = 0; i < g->n_values; i++)
		g->values[i]->qmark = 0;
	for (size_t i = 0; i < g->n_nodes; i++)
		g->nodes[i]->qmark = 0;

	/* multi-node patterns first */
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		if (n->dead)
			continue;
		/* a node already inside a unit is not a pattern start */
		if (n->n_outputs >= 1 && n->outputs[0] && (n->outputs[0]->qmark & OQ_QM_INTERNAL))
			continue;
		switch (n->op) {
		case OQ_OP_Sub: layernorm(g, n, &units); break;
		case OQ_OP_Erf: gelu(g, n, &units); break;
		case OQ_OP_Clip: hardswish(g, o, n, &units); break;
		case OQ_OP_Sigmoid: swish(g, o, n, &units); break;
		default: break;
		}
	}
	/* MatMul + constant bias Add */
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *mm = g->nodes[i], *ad;
		oq_value *t;
		if (!oq_node_is(mm, OQ_OP_MatMul) || !(t = out0(mm)) || (t->qmark & OQ_QM_INTERNAL))
			continue;
		ad = sole(t);
		if (!oq_node_is(ad, OQ_OP_Add) || !oq_value_const(g, other(ad, t)) || !out0(ad) ||
		    (out0(ad)->qmark & OQ_QM_INTERNAL))
			continue;
		mark(&t, 1, out0(ad), &units);
	}
	/* producer + activation */
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *a = g->nodes[i], *p;
		oq_value *t, *y;
		if (!is_act(g, a) || !(t = in_k(a, 0)) || !(y = out0(a)) || (y->qmark & OQ_QM_INTERNAL))
			continue;
		p = t->producer;
		if (!is_unit_producer(p) || out0(p) != t || sole(t) != a || (t->qmark & OQ_QM_INTERNAL))
			continue;
		/* QLinearLeakyRelu: the producer's integer kernel needs a Q between them */
		if (oq_node_is(a, OQ_OP_LeakyRelu) && runtime_aware(o)) {
			t->qmark |= OQ_QM_SPLIT;
			continue;
		}
		t->qmark |= OQ_QM_INTERNAL;
		a->qmark |= OQ_QM_ACT;
		y->qmark |= OQ_QM_UNIT_OUT;
		acts++;
	}
	/* producer + a non-removable activation op: quantized once, at the activation's output */
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *a = g->nodes[i], *p;
		oq_value *t, *y;
		if (!(oq_node_is(a, OQ_OP_HardSigmoid) || oq_node_is(a, OQ_OP_HardSwish) || oq_node_is(a, OQ_OP_Sigmoid) ||
		      oq_node_is(a, OQ_OP_Tanh)) ||
		    !(t = in_k(a, 0)) || !(y = out0(a)) || (y->qmark & OQ_QM_INTERNAL))
			continue;
		p = t->producer;
		if (!(oq_node_is(p, OQ_OP_Conv) || oq_node_is(p, OQ_OP_ConvTranspose) || oq_node_is(p, OQ_OP_Gemm) ||
		      oq_node_is(p, OQ_OP_MatMul)) ||
		    out0(p) != t || sole(t) != a || (t->qmark & OQ_QM_INTERNAL))
			continue;
		if (runtime_aware(o)) {
			t->qmark |= OQ_QM_SPLIT;
			continue;
		}
		t->qmark |= OQ_QM_INTERNAL;
		y->qmark |= OQ_QM_UNIT_OUT;
		units++;
	}
	/* constant affine: Mul/Add by a constant absorbs the value it reads */
	for (size_t i = 0; i < g->n_nodes && !runtime_aware(o); i++) {
		oq_node *n = g->nodes[i];
		oq_value *t = NULL, *y;
		if (!(oq_node_is(n, OQ_OP_Mul) || oq_node_is(n, OQ_OP_Add)) || n->n_inputs != 2 || !(y = out0(n)) ||
		    (y->qmark & OQ_QM_INTERNAL))
			continue;
		if (oq_value_const(g, in_k(n, 1)) && !oq_value_const(g, in_k(n, 0)))
			t = in_k(n, 0);
		else if (oq_value_const(g, in_k(n, 0)) && !oq_value_const(g, in_k(n, 1)))
			t = in_k(n, 1);
		if (!t || !t->producer || sole(t) != n || (t->qmark & OQ_QM_INTERNAL) ||
		    oq_dtype_kind(oq_value_const(g, other(n, t))->dtype) != 'f')
			continue;
		t->qmark |= OQ_QM_INTERNAL;
		y->qmark |= OQ_QM_UNIT_OUT;
		units++;
	}
	for (size_t i = 0; i < g->n_values; i++) {
		if (g->values[i]->qmark & OQ_QM_INTERNAL)
			g->values[i]->qmark &= ~(unsigned)(OQ_QM_UNIT_OUT | OQ_QM_SPLIT);
		if (g->values[i]->qmark & OQ_QM_SPLIT)
			split++;
	}
	*changed = units + acts > 0;
	if (o && o->log)
		fprintf(o->log, "fuse: %zu units, %zu activations fused, %zu units split for integer kernels\n", units,
			acts, split);
	return OQ_OK;
}

/* ------------------------------------------------------------ input bounds */

/* A float attribute of n, or dflt. */
static double attr_f(const oq_node *n, const char *name, double dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_FLOAT ? a->f : dflt;
}

/*
 * |x * sigmoid(k x)| falls below eps for x < the returned point (k > 0): the
 * function has its minimum at k x = -1.2785 and tends to 0 below; bisection
 * on the decreasing branch (60 halvings: far below a float's resolution).
 */
static double silu_floor(double k, double eps)
{
	double a = -1.2785 / k, b = a, fb;
	if (-a / (1 + exp(1.2785)) <= eps)
		return a;
	do {
		b *= 2;
		fb = -b / (1 + exp(-k * b));
	} while (fb > eps && b > -1e6);
	/* f(a) > eps >= f(b) */
	for (int i = 0; i < 60; i++) {
		double m = (a + b) / 2;
		if (-m / (1 + exp(-k * m)) > eps)
			a = m;
		else
			b = m;
	}
	return b;
}

int oq_fuse_input_bounds(const oq_graph *g, const oq_value *x, const oq_ranges *r, double levels, double *lo,
			 double *hi)
{
	const oq_node *u0, *u1 = NULL;
	*lo = -INFINITY;
	*hi = INFINITY;
	if (!x || x->n_uses == 0 || x->n_uses > 2)
		return 0;
	u0 = x->uses[0].node;
	if (x->n_uses == 2) {
		/* u1: the unit's final Mul(x, z), z computed from x; u0 the unit's first node */
		const oq_node *a = u0, *b = x->uses[1].node;
		int ma = oq_node_is(a, OQ_OP_Mul) && other(a, x) && other(a, x) != x && !oq_value_const(g, other(a, x));
		int mb = oq_node_is(b, OQ_OP_Mul) && other(b, x) && other(b, x) != x && !oq_value_const(g, other(b, x));
		if (a == b || ma == mb)
			return 0;
		u0 = ma ? b : a;
		u1 = ma ? a : b;
	}
	if (oq_node_is(u0, OQ_OP_HardSwish) && !u1) {
		*lo = -3;
		return 1;
	}
	if (oq_node_is(u0, OQ_OP_HardSigmoid) && u0->n_inputs == 1) {
		double a = attr_f(u0, "alpha", 0.2), b = attr_f(u0, "beta", 0.5);
		if (!(a > 0))
			return 0;
		if (u1 && other(u1, x) != out0(u0))
			return 0;
		*lo = -b / a;
		if (!u1)
			*hi = (1 - b) / a;
		return 1;
	}
	/* HardSwish as Add(x, 3) -> Clip(0, 6) -> ..., x also read by the unit's Mul */
	if (u1 && bin_const(g, u0, OQ_OP_Add, x, 3) && out0(u0) && is_clip06(g, sole(out0(u0)))) {
		const oq_value *c = out0(sole(out0(u0))), *z = other(u1, x);
		const oq_node *dv = sole(c);
		if (z != c && !(z == out0(dv) && ((oq_node_is(dv, OQ_OP_Div) && dv->inputs[0] == c &&
						    const_is(g, dv->inputs[1], 6)) ||
						   bin_const(g, dv, OQ_OP_Mul, c, 1.0 / 6))))
			return 0;
		*lo = -3;
		return 1;
	}
	/* SiLU: Sigmoid(x) | Sigmoid(Mul(x, k)), y = Mul(x, s) */
	if (u1 && r) {
		double k = 1;
		const oq_node *sg = u0;
		const oq_range *yr = out0(u1) ? oq_ranges_find(r, out0(u1)->name) : NULL;
		if (oq_node_is(u0, OQ_OP_Mul) && u0->n_inputs == 2 && out0(u0)) {
			const oq_tensor *c = oq_value_const(g, other(u0, x));
			if (!c || c->nelem != 1 || !(oq_tensor_get(c, 0) > 0))
				return 0;
			k = oq_tensor_get(c, 0);
			sg = sole(out0(u0));
		}
		if (!oq_node_is(sg, OQ_OP_Sigmoid) || other(u1, x) != out0(sg) || sole(out0(sg)) != u1 || !yr ||
		    !(yr->max > yr->min))
			return 0;
		*lo = silu_floor(k, (yr->max - yr->min) / levels / 2);
		return 1;
	}
	return 0;
}
