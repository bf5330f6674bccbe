/*
 * plan.c - a graph's plan, made once per graph (main graph and every
 * subgraph) and read by every run: the kernel of each node, the number of
 * uses of each value - a value read inside a node's subgraphs counting as
 * a use by that node, which must keep it alive until the node is done -
 * the fused Conv groups, the Conv -> depthwise chains, and (plan_fold.c) the
 * folded constants and packed weights.
 *
 * Fusion: groups Conv [-> BatchNormalization] [-> activation] (Relu, Clip,
 * LeakyRelu, HardSigmoid, HardSwish, Sigmoid) [-> steps] where each
 * intermediate value has exactly one consumer (the next node of the
 * group), is no graph output and is not read by a subgraph. Steps
 * (oq_epi_step, kernel.h) are float Add / Sub / Mul / Div with a constant
 * scalar or per-channel operand, or with a tensor computed before the
 * Conv (a residual: it must have the output's shape, checked at run time,
 * else the group runs node by node), activations, and gates y = x * g(x)
 * whose x has exactly two consumers: the Mul and a chain of such steps g
 * ending at it (a HardSwish written as Add, Clip, Mul, Div; x *
 * Sigmoid(x)). The Conv's W must be known float32 (initializer, declared
 * type, or DequantizeLinear with a float32 scale), the BN parameters
 * float32 initializers, Clip bounds constants. Such a group runs as one
 * Conv call at the Conv's position whose epilogue, per output tile while
 * it is in cache, maps channel m as
 *   BN:  y = (float)(y * a[m] + c[m]),  a = s / sqrt(var + eps), c = B - mean * a
 * (double, the BatchNormalization kernel's own expression), then applies
 * the activation and the steps with the element-wise kernels' float
 * formulas; the intermediate values are never materialised. Folding BN
 * into a copy of W (W * a) would cost a second copy of the weights and
 * change the rounding; the epilogue keeps the fused result bit-identical
 * to the unfused one. With an observer set every node runs on its own
 * (calibration and `compare --per-tensor` need each intermediate), unless
 * the observer wants none of a group's intermediates, so the choice is
 * made per run.
 *
 * Chains: a Conv group whose output only a depthwise Conv (group) reads
 * runs with it as one kernel over bands of rows (plan_chains), again
 * only without an observer.
 *
 * Order: runs take the nodes in a topological order of the plan's own
 * (plan_order), as ONNX Runtime sorts a graph itself: exporters and
 * float16 converters leave nodes out of order (boundary Casts appended
 * at the end), which is the file's problem (`onnxq check` reports it),
 * not a reason to refuse running it. The file's order is kept where it is
 * valid; "before" below means earlier in that order.
 */
#include "calib/exec/exec_internal.h"
#include "calib/kernels/linalg/linalg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void oq_plan_free(plan *p)
{
	if (!p)
		return;
	if (p->nodes)
		for (size_t i = 0; i < p->g->n_nodes; i++) {
			free(p->nodes[i].extra);
			if (p->nodes[i].fuse) {
				oq_kfuse *f = p->nodes[i].fuse;
				for (int j = 0; j < f->n_steps; j++)
					free((void *)f->steps[j].c);
				free((void *)f->steps);
				free((void *)f->scale);
				free((void *)f->shift);
				free(f);
			}
		}
	if (p->inits)
		for (size_t i = 0; i < p->g->n_values; i++)
			if (p->inits[i]) {
				oq_rt_release(p->inits[i]);
				free(p->inits[i]);
			}
	for (size_t i = 0; p->packed_b && i < 2 * p->g->n_values; i++)
		if (p->packed_b[i]) {
			oq_packed_b_free(p->packed_b[i]);
			free(p->packed_b[i]);
		}
	for (size_t i = 0; p->packed_w && i < p->g->n_values; i++)
		if (p->packed_w[i]) {
			oq_packed_w_free(p->packed_w[i]);
			free(p->packed_w[i]);
		}
	free(p->nodes);
	free(p->order);
	free(p->pos);
	free(p->inits);
	free(p->uses);
	free(p->packed_b);
	free(p->packed_w);
	free(p);
}

/* Collects values of subgraphs (recursively) that resolve to a value of `home`. */

typedef struct collect {
	const oq_graph *home;
	node_plan *np;
	int *uses;
	int oom;
} collect;

static int collect_sub(oq_graph *sub, oq_node *owner, void *arg)
{
	collect *c = arg;
	(void)owner;
	for (size_t i = 0; i < sub->n_values; i++) {
		oq_value *v = sub->values[i];
		oq_value *r;
		if (!(v->flags & OQ_V_OUTER))
			continue;
		r = oq_value_resolve(v);
		if (!r || r->graph != c->home)
			continue;
		oq_value **nx = realloc(c->np->extra, (c->np->n_extra + 1) * sizeof *nx);
		if (!nx) {
			c->oom = 1;
			return OQ_ENOMEM;
		}
		nx[c->np->n_extra++] = r;
		c->np->extra = nx;
		c->uses[r->index]++;
	}
	return oq_graph_each_subgraph(sub, collect_sub, c);
}

/* ------------------------------------------------------------ fusion */

/* The only consumer of v (as input 0), when v may disappear into a fused group; else NULL. */
static oq_node *sole_consumer(const oq_value *v)
{
	if (!v || v->n_uses != 1 || v->uses[0].index != 0 || (v->flags & (OQ_V_OUTPUT | OQ_V_INPUT)) ||
	    oq_value_n_captures(v) != 0)
		return NULL;
	return v->uses[0].node;
}

/*
 * The constant tensor behind v, known at plan time: an initializer of this
 * graph, a Constant node's `value`, or either of those through a chain of
 * Identity nodes (exporters put weights behind Identity). NULL otherwise.
 */
static const oq_tensor *const_tensor(const oq_value *v)
{
	for (int depth = 0; v && !(v->flags & OQ_V_OUTER) && depth < 16; depth++) {
		const oq_node *p = v->producer;
		if (v->init)
			return v->init;
		if (!p)
			return NULL;
		if (p->op == OQ_OP_Constant)
			return p->n_attrs == 1 && p->attrs[0].type == OQ_ATTR_TENSOR && !strcmp(p->attrs[0].name, "value")
				       ? p->attrs[0].t
				       : NULL;
		if (p->op != OQ_OP_Identity || p->n_inputs != 1)
			return NULL;
		v = p->inputs[0];
	}
	return NULL;
}

/* The element types a run holds as float32: float32 itself and float16 / bfloat16 (widen.c). */
static int runs_f32(int dtype)
{
	return dtype == OQ_DT_FLOAT || oq_exec_wide(dtype);
}

/* A constant (see const_tensor) with its data that runs see as float32 (its own dtype may be
 * float16 / bfloat16: read it with oq_tensor_to_floats / oq_tensor_get). */
static const oq_tensor *f32_init(const oq_value *v)
{
	const oq_tensor *t = const_tensor(v);
	return t && runs_f32(t->dtype) && (t->data || !t->nelem) ? t : NULL;
}

/* A constant float32 scalar: a constant tensor or a Constant node's `value_float`. */
static int const_scalar(const oq_value *v, float *out)
{
	const oq_tensor *t = f32_init(v);
	if (!t && v && !(v->flags & OQ_V_OUTER) && v->producer && v->producer->op == OQ_OP_Constant &&
	    v->producer->n_attrs == 1 && v->producer->attrs[0].type == OQ_ATTR_FLOAT &&
	    !strcmp(v->producer->attrs[0].name, "value_float")) {
		*out = v->producer->attrs[0].f;
		return 1;
	}
	if (!t || t->nelem != 1)
		return 0;
	*out = (float)oq_tensor_get(t, 0); /* exact: float32, or a 16-bit float widened */
	return 1;
}

/* n as an epilogue activation (float32 semantics of elementwise.c); 0 if it cannot be one. */
static int as_act(const oq_node *n, oq_act *act)
{
	memset(act, 0, sizeof *act);
	if (!n || n->n_outputs != 1 || !n->outputs[0])
		return 0;
	switch (n->op) {
	case OQ_OP_Relu:
		act->kind = OQ_ACT_RELU;
		return n->n_inputs == 1;
	case OQ_OP_LeakyRelu:
		act->kind = OQ_ACT_LEAKY;
		act->a = node_float(n, "alpha", 0.01f);
		return n->n_inputs == 1;
	case OQ_OP_HardSigmoid:
		act->kind = OQ_ACT_HSIGMOID;
		act->a = node_float(n, "alpha", 0.2f);
		act->b = node_float(n, "beta", 0.5f);
		return n->n_inputs == 1;
	case OQ_OP_HardSwish:
		act->kind = OQ_ACT_HSWISH;
		return n->n_inputs == 1;
	case OQ_OP_Sigmoid:
		act->kind = OQ_ACT_SIGMOID;
		return n->n_inputs == 1;
	case OQ_OP_Clip:
		act->kind = OQ_ACT_CLIP;
		act->a = -INFINITY;
		act->b = INFINITY;
		if (n->opset < 11) {
			act->a = node_float(n, "min", -INFINITY);
			act->b = node_float(n, "max", INFINITY);
			return n->n_inputs == 1;
		}
		if (n->n_inputs > 3 || (n->n_inputs > 1 && n->inputs[1] && !const_scalar(n->inputs[1], &act->a)) ||
		    (n->n_inputs > 2 && n->inputs[2] && !const_scalar(n->inputs[2], &act->b)))
			return 0;
		return 1;
	default:
		return 0;
	}
}

/* An inference BatchNormalization with float32 initializer parameters of m channels. */
static int bn_ok(const oq_node *n, int64_t m)
{
	if (!n || n->op != OQ_OP_BatchNormalization || n->n_inputs != 5 || n->n_outputs < 1 || !n->outputs[0])
		return 0;
	for (size_t i = 1; i < n->n_outputs; i++)
		if (n->outputs[i])
			return 0;
	if (n->opset >= 14) {
		const oq_attr *a = oq_node_attr(n, "training_mode");
		if (a && (a->type != OQ_ATTR_INT || a->i != 0))
			return 0;
	}
	for (size_t i = 1; i < 5; i++) {
		const oq_tensor *t = f32_init(n->inputs[i]);
		if (!t || t->rank != 1 || t->nelem != (size_t)m || !t->data)
			return 0;
	}
	return 1;
}

/*
 * BN as y * scale + shift: scale = s / sqrt(var + eps), shift = B - mean *
 * scale, in double exactly as the BatchNormalization kernel forms them.
 */
static int bn_affine(const oq_node *bn, size_t m, oq_kfuse *f)
{
	double eps = node_float(bn, "epsilon", 1e-5f);
	/* copies: initializer data may be unaligned (mapped file) */
	float *sc = oq_tensor_to_floats(f32_init(bn->inputs[1])), *be = oq_tensor_to_floats(f32_init(bn->inputs[2]));
	float *mu = oq_tensor_to_floats(f32_init(bn->inputs[3])), *va = oq_tensor_to_floats(f32_init(bn->inputs[4]));
	double *a = oq_calloc(m, sizeof *a), *b = oq_calloc(m, sizeof *b);
	int rc = OQ_ENOMEM;

	if (sc && be && mu && va && a && b) {
		for (size_t o = 0; o < m; o++) {
			a[o] = sc[o] / sqrt((double)va[o] + eps);
			b[o] = be[o] - mu[o] * a[o];
		}
		f->scale = a;
		f->shift = b;
		a = b = NULL;
		rc = OQ_OK;
	}
	free(a);
	free(b);
	free(sc);
	free(be);
	free(mu);
	free(va);
	return rc;
}

/*
 * W known to be float32 before the run: a float32 initializer, a value
 * declared float32, or a DequantizeLinear output with a float32 scale
 * (float16 / bfloat16 count as float32: runs hold them so).
 * *m its output channels and *r its rank (the output's) when known, else -1 and 0.
 */
static int w_is_f32(const oq_value *w, int64_t *m, int *r)
{
	const oq_tensor *t = f32_init(w);
	*m = -1;
	*r = 0;
	if (t) {
		if (t->rank < 3)
			return 0;
		*m = t->dims[0];
		*r = t->rank;
		return 1;
	}
	if (!w || (w->flags & OQ_V_OUTER))
		return 0;
	if (w->type.kind == OQ_TYPE_TENSOR && runs_f32(w->type.dtype)) {
		if (w->type.rank >= 3) {
			*m = w->type.dims[0].value;
			*r = w->type.rank;
		}
		return 1;
	}
	if (w->producer && w->producer->op == OQ_OP_DequantizeLinear && w->producer->n_inputs >= 2 &&
	    f32_init(w->producer->inputs[1])) {
		const oq_tensor *q = const_tensor(w->producer->inputs[0]);
		if (q && q->rank >= 3) {
			*m = q->dims[0];
			*r = q->rank;
		}
		return 1;
	}
	return 0;
}

/* The only use of v (any input), when v may disappear into a fused group; else NULL. */
static oq_node *only_use(const oq_value *v)
{
	if (!v || v->n_uses != 1 || (v->flags & (OQ_V_OUTPUT | OQ_V_INPUT | OQ_V_OUTER)) ||
	    oq_value_n_captures(v) != 0)
		return NULL;
	return v->uses[0].node;
}

/* A float Add, Sub, Mul or Div with multidirectional broadcasting (opset >= 7) and one output. */
static int epi_bop(const oq_node *n, int *bop)
{
	if (!n || n->n_inputs != 2 || n->n_outputs != 1 || !n->outputs[0] || n->opset < 7 || !n->inputs[0] ||
	    !n->inputs[1])
		return 0;
	switch (n->op) {
	case OQ_OP_Add: *bop = OQ_EPI_ADD; return 1;
	case OQ_OP_Sub: *bop = OQ_EPI_SUB; return 1;
	case OQ_OP_Mul: *bop = OQ_EPI_MUL; return 1;
	case OQ_OP_Div: *bop = OQ_EPI_DIV; return 1;
	default: return 0;
	}
}

/*
 * A per-tensor scale: a float32 constant of one element (what the Q / DQ
 * kernels read as float32 for the whole tensor).
 */
static int scale_scalar(const oq_value *v, float *out)
{
	const oq_tensor *t = const_tensor(v);
	if (!t || t->dtype != OQ_DT_FLOAT || t->nelem != 1 || !t->data)
		return 0;
	*out = (float)oq_tensor_get(t, 0);
	return 1;
}

static int has_zp(const oq_node *n)
{
	return n->n_inputs >= 3 && n->inputs[2];
}

/* n's zero point (input 2) as an 8-bit constant of one element, or absent (uint8 0): *dt, *zp. */
static int zp_scalar(const oq_node *n, int *dt, int32_t *zp)
{
	const oq_tensor *t;

	if (!has_zp(n)) {
		*dt = OQ_DT_UINT8;
		*zp = 0;
		return 1;
	}
	t = const_tensor(n->inputs[2]);
	if (!t || (t->dtype != OQ_DT_UINT8 && t->dtype != OQ_DT_INT8) || t->nelem != 1 || !t->data)
		return 0;
	*dt = t->dtype;
	*zp = (int32_t)oq_tensor_get(t, 0);
	return 1;
}

/* A per-tensor DequantizeLinear (ai.onnx) with a float32 scale and an 8-bit or no zero point. */
static int dq_per_tensor(const oq_node *dq, float *scale, int *dt, int32_t *zp)
{
	return dq && dq->op == OQ_OP_DequantizeLinear && !dq->domain[0] && dq->n_inputs >= 2 && dq->n_inputs <= 3 &&
	       dq->n_outputs == 1 && dq->outputs[0] && dq->inputs[0] && scale_scalar(dq->inputs[1], scale) &&
	       zp_scalar(dq, dt, zp) && !node_int(dq, "block_size", 0) && !node_int(dq, "output_dtype", 0);
}

/*
 * v = DequantizeLinear(c) of an 8-bit constant c, per tensor, as the
 * constant operand of a step (the shapes of epi_const): the float values
 * of the DQ kernel, ((float) c - zp) * scale. 1 (st->s or st->c filled),
 * 0 (not such a value) or OQ_ENOMEM.
 */
static int dq_const(const oq_value *v, int r, int64_t m, oq_epi_step *st)
{
	const oq_node *dq = v && !(v->flags & OQ_V_OUTER) ? v->producer : NULL;
	const oq_tensor *t;
	float scale, *c;
	int dt;
	int32_t zp;

	if (!dq_per_tensor(dq, &scale, &dt, &zp) || !(t = const_tensor(dq->inputs[0])) || !t->data ||
	    (t->dtype != OQ_DT_UINT8 && t->dtype != OQ_DT_INT8) || (has_zp(dq) && t->dtype != dt))
		return 0;
	if (t->nelem == 1) {
		st->s = ((float)oq_tensor_get(t, 0) - (float)zp) * scale;
		return 1;
	}
	if (m <= 0 || t->rank > r || t->rank < r - 1 || t->nelem != (size_t)m)
		return 0;
	for (int d = 0; d < t->rank; d++)
		if (t->dims[d] != (d == t->rank - (r - 1) ? m : 1))
			return 0;
	if (!(c = oq_calloc((size_t)m, sizeof *c)))
		return OQ_ENOMEM;
	for (size_t i = 0; i < (size_t)m; i++)
		c[i] = ((float)oq_tensor_get(t, i) - (float)zp) * scale;
	st->c = c;
	return 1;
}

/*
 * q (reading cur, a float32 value) and the DequantizeLinear that alone reads
 * its code as one QDQ step: per tensor, 8-bit, float32 scales (the pair of
 * oq_k_qdq, but the two scales and zero points may differ: a Div folded
 * into the DQ's scale). Fills st; *dq the DQ. 1 or 0.
 */
static int qdq_step(const oq_node *q, const oq_value *cur, oq_epi_step *st, const oq_node **dq)
{
	float qs, ds;
	int qdt, ddt;
	int32_t qzp, dzp;

	*dq = NULL;
	if (q->op != OQ_OP_QuantizeLinear || q->domain[0] || q->n_inputs < 2 || q->n_inputs > 3 || q->n_outputs != 1 ||
	    q->inputs[0] != cur || !q->outputs[0] || !scale_scalar(q->inputs[1], &qs) || !zp_scalar(q, &qdt, &qzp) ||
	    node_int(q, "block_size", 0) || node_int(q, "output_dtype", 0))
		return 0;
	*dq = only_use(q->outputs[0]);
	if (!dq_per_tensor(*dq, &ds, &ddt, &dzp) || (*dq)->inputs[0] != q->outputs[0] || (has_zp(*dq) && ddt != qdt))
		return 0;
	st->kind = OQ_EPI_QDQ;
	st->qs = qs;
	st->qlo = (float)((qdt == OQ_DT_UINT8 ? 0 : -128) - qzp);
	st->qhi = (float)((qdt == OQ_DT_UINT8 ? 255 : 127) - qzp);
	st->qoff = (float)(qzp - dzp);
	st->ds = ds;
	st->qr = isnormal(qs) && isnormal(1.0f / qs) ? 1.0f / qs : 0.0f;
	return 1;
}

/*
 * v as the constant operand of a step on a Conv output of rank r with m
 * channels: a float32 scalar, or a float32 tensor of rank <= r whose dims
 * (right-aligned to the output's) are 1 except m on the channel axis, so
 * the result keeps the output's shape. Fills st->s or st->c (owned).
 * 1, 0 (not such a constant) or OQ_ENOMEM.
 */
static int epi_const(const oq_value *v, int r, int64_t m, oq_epi_step *st)
{
	const oq_tensor *t;

	if (const_scalar(v, &st->s))
		return 1;
	if (dq_const(v, r, m, st))
		return 1;
	t = f32_init(v);
	if (!t || m <= 0 || t->rank > r || t->rank < r - 1 || t->nelem != (size_t)m || !t->data)
		return 0;
	for (int d = 0; d < t->rank; d++)
		if (t->dims[d] != (d == t->rank - (r - 1) ? m : 1))
			return 0;
	st->c = oq_tensor_to_floats(t);
	return st->c ? 1 : OQ_ENOMEM;
}

/* A group being built by plan_fusion. */
typedef struct grow_grp {
	oq_epi_step st[OQ_FUSE_MAX_STEPS];
	int n;                  /* steps */
	size_t nodes[OQ_FUSE_MAX_NODES]; /* the nodes the steps absorb, in order */
	int n_nodes;
	oq_value *fuse_in[OQ_FUSE_MAX_T];
	int n_t;
} grow_grp;

/* v can be read when the head (node index head) runs: computed before it, or a graph input / initializer. */
static int ready_before(const oq_value *v, const plan *p, size_t head)
{
	const oq_graph *g = p->g;

	if (!v || (v->flags & OQ_V_OUTER) || v->graph != g)
		return 0;
	return !v->producer ||
	       (g->nodes[v->producer->index] == v->producer && p->pos[v->producer->index] < p->pos[head]);
}

/*
 * n (reading cur) as one step appended to G: a binary op with a constant or
 * an early tensor, an activation, or n a QuantizeLinear with its
 * DequantizeLinear (qdq_step: two nodes, one step). No tensor operand when
 * gate (inside g of a gate). 1 on success (*last: the node whose output is
 * the step's), 0 when n cannot be a step, OQ_ENOMEM.
 */
static int add_step(const plan *p, size_t head, const oq_node *n, const oq_value *cur, int r, int64_t m, int gate,
		    grow_grp *G, const oq_node **last)
{
	oq_epi_step *st = &G->st[G->n];
	const oq_node *dq;
	int bop, rc;

	if (G->n >= OQ_FUSE_MAX_STEPS || G->n_nodes + 2 > OQ_FUSE_MAX_NODES || p->nodes[n->index].absorbed ||
	    p->g->nodes[n->index] != n)
		return 0;
	memset(st, 0, sizeof *st);
	if (qdq_step(n, cur, st, &dq)) {
		if (p->nodes[dq->index].absorbed || p->g->nodes[dq->index] != dq)
			return 0;
		G->nodes[G->n_nodes++] = n->index;
		G->nodes[G->n_nodes++] = dq->index;
		G->n++;
		*last = dq;
		return 1;
	} else if (epi_bop(n, &bop) && (n->inputs[0] == cur) != (n->inputs[1] == cur)) {
		const oq_value *other = n->inputs[n->inputs[0] == cur];
		st->bop = bop;
		st->rev = n->inputs[1] == cur;
		st->kind = OQ_EPI_CONST;
		rc = epi_const(other, r, m, st);
		if (rc < 0)
			return rc;
		if (!rc) {
			if (gate || G->n_t >= OQ_FUSE_MAX_T || !ready_before(other, p, head))
				return 0;
			st->kind = OQ_EPI_TENSOR;
			st->t = G->n_t;
			G->fuse_in[G->n_t++] = (oq_value *)other;
		}
	} else if (n->n_inputs >= 1 && n->inputs[0] == cur && as_act(n, &st->act)) {
		st->kind = OQ_EPI_ACT;
	} else {
		return 0;
	}
	G->nodes[G->n_nodes++] = n->index;
	G->n++;
	*last = n;
	return 1;
}

/*
 * A gate on cur (see the header comment): cur's two consumers are a Mul
 * and the first node n of a chain of constant / activation steps whose last
 * output is the Mul's other operand. Appends the GATE step and the chain.
 * 1, 0 (no gate; G unchanged) or OQ_ENOMEM. add_gate tries both consumers
 * as the Mul; *out the Mul.
 */
static int gate_from(const plan *p, size_t head, const oq_value *cur, const oq_node *mul, const oq_node *n, int r,
		     int64_t m, grow_grp *G)
{
	const oq_value *x = cur;
	int n0 = G->n, nn0 = G->n_nodes, rc = 0;

	if (mul->op != OQ_OP_Mul || mul->n_inputs != 2 || mul->n_outputs != 1 || !mul->outputs[0] || mul->opset < 7 ||
	    p->nodes[mul->index].absorbed || p->g->nodes[mul->index] != mul)
		return 0;
	/* the GATE step, then g */
	memset(&G->st[G->n], 0, sizeof G->st[G->n]);
	G->st[G->n].kind = OQ_EPI_GATE;
	G->st[G->n].rev = mul->inputs[0] != cur;
	G->n++;
	while (n && n != mul) {
		const oq_node *last;
		if ((rc = add_step(p, head, n, x, r, m, 1, G, &last)) != 1)
			goto undo;
		x = last->outputs[0];
		n = only_use(x);
	}
	rc = 0;
	if (!n || G->n == n0 + 1 || G->n_nodes >= OQ_FUSE_MAX_NODES ||
	    !((mul->inputs[0] == cur && mul->inputs[1] == x) || (mul->inputs[1] == cur && mul->inputs[0] == x)))
		goto undo;
	G->st[n0].n_gate = G->n - n0 - 1;
	G->nodes[G->n_nodes++] = mul->index;
	return 1;
undo:
	for (int i = n0; i < G->n; i++)
		free((void *)G->st[i].c);
	G->n = n0;
	G->n_nodes = nn0;
	return rc;
}

static int add_gate(const plan *p, size_t head, const oq_value *cur, int r, int64_t m, grow_grp *G,
		    const oq_node **out)
{
	if (!cur || cur->n_uses != 2 || (cur->flags & (OQ_V_OUTPUT | OQ_V_INPUT | OQ_V_OUTER)) ||
	    oq_value_n_captures(cur) != 0 || cur->uses[0].node == cur->uses[1].node || G->n + 2 > OQ_FUSE_MAX_STEPS)
		return 0;
	for (int u = 0; u < 2; u++) {
		int rc = gate_from(p, head, cur, cur->uses[u].node, cur->uses[1 - u].node, r, m, G);
		if (rc) {
			if (rc > 0)
				*out = cur->uses[u].node;
			return rc;
		}
	}
	return 0;
}

/* Steps after the Conv / BN / activation whose output is cur; *tail the last absorbed node (unchanged if none). */
static int grow_steps(const plan *p, size_t head, const oq_value *cur, int r, int64_t m, grow_grp *G,
		      const oq_node **tail)
{
	for (;;) {
		const oq_node *n = only_use(cur), *mul = NULL, *last = NULL;
		int rc;
		if (n && (rc = add_step(p, head, n, cur, r, m, 0, G, &last)) != 0) {
			if (rc < 0)
				return rc;
			*tail = last;
			cur = last->outputs[0];
			continue;
		}
		if ((rc = add_gate(p, head, cur, r, m, G, &mul)) < 0)
			return rc;
		if (!rc)
			return OQ_OK;
		*tail = mul;
		cur = mul->outputs[0];
	}
}

/* Finds the fused groups of p's graph (see the header comment). */
static int plan_fusion(plan *p)
{
	const oq_graph *g = p->g;

	for (size_t oi = 0; oi < g->n_nodes; oi++) {
		size_t i = p->order[oi];
		const oq_node *n = g->nodes[i], *bn = NULL, *act = NULL, *next, *tail;
		int64_t m;
		int r, rc;
		oq_act a;
		oq_kfuse *f;
		grow_grp G;
		node_plan *np = &p->nodes[i];

		if (n->op != OQ_OP_Conv || np->absorbed || n->n_inputs < 2 || n->n_inputs > 3 || n->n_outputs != 1 ||
		    !n->outputs[0] || !w_is_f32(n->inputs[1], &m, &r))
			continue;
		next = sole_consumer(n->outputs[0]);
		if (next && m > 0 && bn_ok(next, m)) {
			bn = next;
			next = sole_consumer(bn->outputs[0]);
		}
		if (next && as_act(next, &a))
			act = next;
		if ((bn && g->nodes[bn->index] != bn) || (act && g->nodes[act->index] != act))
			continue; /* stale indices: no fusion rather than a wrong one */
		tail = act ? act : bn ? bn : n;
		memset(&G, 0, sizeof G);
		if ((rc = grow_steps(p, i, tail->outputs[0], r, m, &G, &tail)))
			goto oom;
		if (!bn && !act && !G.n)
			continue;
		if (!(f = calloc(1, sizeof *f)) || (G.n && !(f->steps = oq_calloc((size_t)G.n, sizeof *f->steps)))) {
			free(f);
			goto oom;
		}
		np->fuse = f;
		if (act)
			f->act = a;
		if (G.n)
			memcpy((void *)f->steps, G.st, (size_t)G.n * sizeof *G.st);
		f->n_steps = G.n;
		G.n = 0; /* the constants now belong to f */
		f->n_t = G.n_t;
		memcpy(np->fuse_in, G.fuse_in, sizeof G.fuse_in);
		if (bn && bn_affine(bn, (size_t)m, f))
			return OQ_ENOMEM;
		np->tail = tail->index;
		if (bn)
			np->members[np->n_members++] = bn->index;
		if (act)
			np->members[np->n_members++] = act->index;
		for (int j = 0; j < G.n_nodes; j++)
			np->members[np->n_members++] = G.nodes[j];
		for (int j = 0; j < np->n_members; j++)
			p->nodes[np->members[j]].absorbed = 1;
		continue;
	oom:
		for (int j = 0; j < G.n; j++)
			free((void *)G.st[j].c);
		return OQ_ENOMEM;
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ Q -> DQ pairs */

int oq_exec_no_qdq;

/*
 * Pairs: a QuantizeLinear (ai.onnx, on a computed value) whose output's only
 * reader is a DequantizeLinear with the same scale and zero point values,
 * the same axis, no block_size and no output_dtype runs as one kernel
 * (oq_k_qdq) that writes the DQ's output and never stores the code. The
 * kernel checks the types at run time and hands the pair back (OQ_K_UNFUSED)
 * when they are not float32 -> uint8 / int8; observers that want the code
 * get the two nodes (oq_exec_set_observe_want).
 */
static void plan_qdq(plan *p)
{
	const oq_graph *g = p->g;

	for (size_t i = 0; i < g->n_nodes && !oq_exec_no_qdq; i++) {
		const oq_node *q = g->nodes[i], *dq;
		node_plan *np = &p->nodes[i];

		if (q->op != OQ_OP_QuantizeLinear || q->domain[0] || np->absorbed || np_heads(np) ||
		    q->n_inputs < 2 || q->n_inputs > 3 || q->n_outputs != 1 || !q->inputs[0] || !q->inputs[1] ||
		    const_tensor(q->inputs[0]) || node_int(q, "block_size", 0) || node_int(q, "output_dtype", 0))
			continue;
		dq = only_use(q->outputs[0]);
		if (!dq || dq->op != OQ_OP_DequantizeLinear || dq->domain[0] || g->nodes[dq->index] != dq ||
		    p->nodes[dq->index].absorbed || dq->n_outputs != 1 || !dq->outputs[0] ||
		    dq->n_inputs != q->n_inputs || dq->inputs[0] != q->outputs[0] || dq->inputs[1] != q->inputs[1] ||
		    (q->n_inputs == 3 && dq->inputs[2] != q->inputs[2]) || dq->opset != q->opset ||
		    node_int(dq, "axis", 1) != node_int(q, "axis", 1) || node_int(dq, "block_size", 0) ||
		    node_int(dq, "output_dtype", 0))
			continue;
		np->qdq = 1;
		np->tail = dq->index;
		np->members[0] = dq->index;
		np->n_members = 1;
		p->nodes[dq->index].absorbed = 1;
	}
}

/* ------------------------------------------------------------ chains */

/*
 * Chains: a float32 Conv group of group 1 (head A: Conv [+ BN] [+ act]
 * [+ steps], or a lone Conv) whose last output's only reader is a
 * depthwise Conv (head B, its own group or alone) runs with B in one
 * kernel (oq_k_conv_chain: bands of B's rows, A's output never stored
 * whole). Neither group may have tensor operands (the epilogues' other
 * parameters are plan values), B's W and bias must be ready before A
 * (constants), and A's output is no graph output. A
 * chain runs only without an observer (which wants A's output); the
 * results are bit-identical either way.
 */
int oq_exec_no_chain;

static void plan_chains(plan *p)
{
	const oq_graph *g = p->g;

	for (size_t oi = 0; oi < g->n_nodes && !oq_exec_no_chain; oi++) {
		size_t i = p->order[oi];
		const oq_node *a = g->nodes[i], *t, *b;
		node_plan *np = &p->nodes[i], *bp;
		const oq_tensor *wb;
		int64_t m;
		int r;

		if (a->op != OQ_OP_Conv || np->absorbed || np->chained || a->n_inputs < 2 || a->n_inputs > 3 ||
		    a->n_outputs != 1 || !a->outputs[0] || !w_is_f32(a->inputs[1], &m, &r) || m < 2 ||
		    node_int(a, "group", 1) != 1 || (np->fuse && np->fuse->n_t))
			continue;
		t = np->fuse ? g->nodes[np->tail] : a;
		b = sole_consumer(t->outputs[0]);
		if (!b || b->op != OQ_OP_Conv || b->n_inputs < 2 || b->n_inputs > 3 || b->n_outputs != 1 ||
		    !b->outputs[0] || g->nodes[b->index] != b || p->pos[b->index] <= p->pos[t->index])
			continue;
		bp = &p->nodes[b->index];
		wb = f32_init(b->inputs[1]);
		if (bp->absorbed || bp->chain || (bp->fuse && bp->fuse->n_t) || !wb || wb->rank < 3 || wb->dims[1] != 1 ||
		    wb->dims[0] != m || node_int(b, "group", 1) != m || !ready_before(b->inputs[1], p, i) ||
		    (b->n_inputs > 2 && b->inputs[2] && !ready_before(b->inputs[2], p, i)))
			continue;
		np->chain = b->index;
		bp->chained = 1;
	}
}

/* ------------------------------------------------------------ order */

/* Dependency k of node i (its inputs, then the values its subgraphs read): the node of g producing
 * it, or NULL (graph input, initializer, outer value, nothing). */
static const oq_node *dep(const plan *p, size_t i, size_t k)
{
	const oq_node *n = p->g->nodes[i];
	const oq_value *v = k < n->n_inputs ? n->inputs[k] : p->nodes[i].extra[k - n->n_inputs];
	const oq_node *pr = v && !(v->flags & OQ_V_OUTER) && v->graph == p->g ? v->producer : NULL;
	return pr && p->g->nodes[pr->index] == pr ? pr : NULL;
}

/*
 * p->order and p->pos: a depth-first walk from each node in file order
 * that places a node once the producers of its inputs (and of the values
 * its subgraphs read) are placed. A valid file order comes out unchanged;
 * a node out of order lands right before its first reader. Iterative (the
 * stack holds at most every node once). OQ_EINVAL naming a node on a cycle.
 */
static int plan_order(plan *p, oq_diag *d)
{
	const oq_graph *g = p->g;
	size_t nn = g->n_nodes, placed = 0, top = 0;
	size_t *stack = oq_calloc(nn ? nn : 1, sizeof *stack), *next = oq_calloc(nn ? nn : 1, sizeof *next);
	unsigned char *state = oq_calloc(nn ? nn : 1, 1); /* 0 unseen, 1 on the stack, 2 placed */
	int rc = OQ_OK;

	p->order = oq_calloc(nn ? nn : 1, sizeof *p->order);
	p->pos = oq_calloc(nn ? nn : 1, sizeof *p->pos);
	if (!stack || !next || !state || !p->order || !p->pos) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto done;
	}
	for (size_t root = 0; root < nn; root++) {
		if (state[root])
			continue;
		stack[top++] = root;
		state[root] = 1;
		while (top) {
			size_t i = stack[top - 1];
			const oq_node *n = g->nodes[i];
			if (next[i] < n->n_inputs + p->nodes[i].n_extra) {
				const oq_node *pr = dep(p, i, next[i]++);
				if (!pr || state[pr->index] == 2)
					continue;
				if (state[pr->index] == 1) {
					rc = oq_err(d, OQ_EINVAL,
						    "run: node '%s' (%s) is on a cycle: it needs its own output; run `onnxq "
						    "check`", n->name, n->op_type);
					goto done;
				}
				state[pr->index] = 1;
				stack[top++] = pr->index;
				continue;
			}
			top--;
			state[i] = 2;
			p->pos[i] = placed;
			p->order[placed++] = i;
		}
	}
done:
	free(stack);
	free(next);
	free(state);
	return rc;
}

/* ------------------------------------------------------------ plan */

int oq_plan_get(oq_exec *e, const oq_graph *g, plan **out, oq_diag *d)
{
	plan *p;
	int rc, planning;

	for (p = e->plans; p; p = p->next)
		if (p->g == g) {
			*out = p;
			return OQ_OK;
		}
	p = calloc(1, sizeof *p);
	if (!p)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	p->g = g;
	p->nodes = oq_calloc(g->n_nodes, sizeof *p->nodes);
	p->inits = oq_calloc(g->n_values, sizeof *p->inits);
	p->uses = oq_calloc(g->n_values, sizeof *p->uses);
	p->packed_b = oq_calloc(2 * g->n_values, sizeof *p->packed_b);
	p->packed_w = oq_calloc(g->n_values, sizeof *p->packed_w);
	if (!p->nodes || !p->inits || !p->uses || !p->packed_b || !p->packed_w) {
		oq_plan_free(p);
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		collect c = {g, &p->nodes[i], p->uses, 0};
		p->nodes[i].fn = oq_kernel_find(n->op, n->opset);
		for (size_t k = 0; k < n->n_inputs; k++)
			if (n->inputs[k] && !(n->inputs[k]->flags & OQ_V_OUTER))
				p->uses[n->inputs[k]->index]++;
		/* subgraphs of this node: their outer reads of our values are our uses */
		for (size_t k = 0; k < n->n_attrs; k++) {
			oq_attr *a = &n->attrs[k];
			if (a->g)
				collect_sub(a->g, n, &c);
			for (size_t j = 0; a->graphs && j < a->n; j++)
				collect_sub(a->graphs[j], n, &c);
		}
		if (c.oom) {
			oq_plan_free(p);
			return oq_err(d, OQ_ENOMEM, "run: out of memory");
		}
	}
	if ((rc = plan_order(p, d))) {
		oq_plan_free(p);
		return rc;
	}
	if (plan_fusion(p)) {
		oq_plan_free(p);
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	}
	plan_chains(p);
	plan_qdq(p);
	planning = e->planning;
	e->planning = 1; /* folded outputs are plan constants, not arena activations */
	rc = oq_plan_fold(e, p, d);
	e->planning = planning;
	if (rc) {
		oq_plan_free(p);
		return rc;
	}
	p->next = e->plans;
	e->plans = p;
	*out = p;
	return OQ_OK;
}

/* Every node of g and of its subgraphs must have a kernel. */
static int check_sub(oq_graph *sub, oq_node *owner, void *arg)
{
	(void)owner;
	void **a = arg;
	return oq_plan_check(a[0], sub, a[1]);
}

int oq_plan_check(oq_exec *e, const oq_graph *g, oq_diag *d)
{
	void *arg[2] = {e, d};
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		if (!oq_kernel_find(n->op, n->opset))
			return oq_err(d, OQ_EUNSUP,
				      "run: node '%s' (%s, domain '%s', opset %lld): onnxq cannot run this "
				      "op; see README 'Supported ops'",
				      n->name, n->op_type, *n->domain ? n->domain : "ai.onnx",
				      (long long)n->opset);
	}
	return oq_graph_each_subgraph((oq_graph *)g, check_sub, arg);
}

