/*
 * quantize.c - the quantize pass: QuantizeLinear/DequantizeLinear around
 * the activations of the selected nodes, integer weights behind a
 * DequantizeLinear, int32 biases (REFERENCE.md sections 2 and 3).
 *
 * Profile ORT (default), one shared pair per activation tensor t:
 *
 *   P -> t -> A, B          ==>   P -> t -> Q(t, s_t, z_t) -> DQ -> t_dq -> A (quantized)
 *                                      t -> B (not quantized: keeps reading float)
 *   graph output y:         ==>   P -> y' -> Q -> DQ -> y     (y keeps its name and float type)
 *   Conv(x, W, B)           ==>   Conv(DQ(x_q), DQ(W_q, s_w), DQ(B_q, s_x * s_w))   (B_q int32)
 *   Conv -t-> Relu -> y     ==>   Conv -> y -> Q(y, s_y, z_y)   (asymmetric: z_y = qmin, so the
 *                                 Q saturates below 0 exactly as Relu would; same for Clip(0, hi)
 *                                 when the calibrated range lies within [0, hi])
 *
 *   s_t, z_t: oq_qparams on the calibrated [min, max] of t (fixed [0, 1] for
 *   a Softmax output). Outputs of Reshape/Transpose/pooling/... reuse the
 *   input's s, z so ORT can drop the pair around them: q(x) = round(x/s) + z
 *   commutes with any op that only moves or selects elements.
 *
 * Runtime-aware (profile ORT, --prefer speed|balanced, 8-bit types;
 * oq_runtime_aware): the pairs go where ONNX Runtime's QDQ selectors form
 * integer node units (src/report/coverage.h), and nowhere else:
 *   - only ops ORT runs on 8-bit data take part (opinfo.ort); an op whose
 *     data inputs all come from float stays float (float regions);
 *   - the output of every ORT-integer op gets its Q, and all readers of an
 *     integer producer take the DQ (the selector wants the Q as the only
 *     reader);
 *   - t -> Mul | Div(t, k > 0 scalar) -> y  ==>  y = DQ(Q(t), s_t * k | s_t / k, z_t)
 *     (the node goes: the same integers read with a scaled scale);
 *   - Add | Mul(t, float constant k) ==> Add | Mul(t, DQ(k_q)), k_q on the
 *     activation type (a scalar exactly: k_q = 1 or 0, scale |k|);
 *   - the input of a unit that is flat beyond a bound (HardSwish below -3,
 *     ...: oq_fuse_input_bounds) gets its range clamped there;
 *   - nodes o->float_nodes names (the placement's float units) stay float.
 * Float8 units ORT would still fuse into 8-bit-only kernels read their
 * input in float (ort_float8_units), so the model loads.
 *
 * Decision-safe placement (all profiles): values a comparison or selection
 * decides on get no pair (decision.c).
 *
 * Profile TRT (TensorRT / ModelOpt): symmetric int8 (narrow grid) or FP8, a
 * dedicated pair per (consumer, input) on the inputs of Conv, ConvTranspose,
 * Gemm, MatMul, pooling and Add only; nothing on outputs; float biases.
 *
 * Selection: op table below, minus --exclude (node name, op type or tensor
 * name), restricted by --include (node names and op types restrict nodes;
 * tensor names restrict which activations get a pair), minus override
 * "skip". Values inside a fused unit (OQ_QM_INTERNAL, set by fuse) never get
 * a pair. New nodes are appended; the driver restores topological order.
 *
 * If/Loop/Scan bodies (any depth) get the same rewrite after the main graph,
 * body by body, with everything created inside the body: pairs on the
 * body's values and on the enclosing activations it reads (their ranges are
 * the enclosing values'), except that such an enclosing activation's Q goes
 * into the graph defining it (outer_q; profile ORT); a weight the body reads
 * from an enclosing initializer is copied into the body first
 * (localize_weights). A body
 * none of whose values has a range never ran during calibration (an If
 * branch no sample took) and keeps float, named in the log. LSTM, GRU and
 * RNN are not in the table: they stay float wherever they are.
 *
 * Calibration runs before this pass and asks it two things (pass.h):
 * oq_quantize_act_grid, the grid a tensor's Q will have (own_qp's
 * resolution, shared), and oq_quantize_range_needs, which tensors' ranges the
 * pass will read (a dry run of the selection and of mark_needed).
 */
#include "passes/pass.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/quantize/overrides.h"
#include "passes/quantize/quantize_internal.h"
#include "src/quant/qparams.h"
#include "passes/quantize/qweight.h"
#include "src/report/coverage.h"

static const opinfo ops[] = {
	{OQ_OP_Conv, K_OWN, 1, 1, 2, 1, 1, 0},
	{OQ_OP_ConvTranspose, K_OWN, 1, 1, 2, 1, 0, 0},
	{OQ_OP_Gemm, K_OWN, 3, 1, 2, 1, 1, 0},
	{OQ_OP_MatMul, K_OWN, 3, 1, -1, 1, 1, 0},
	{OQ_OP_Add, K_OWN, 3, -1, -1, 1, 1, 0},
	{OQ_OP_Mul, K_OWN, 3, -1, -1, 0, 1, 0},
	{OQ_OP_Div, K_OWN, 1, -1, -1, 0, 0, 1},
	{OQ_OP_Concat, K_OWN, ALL_INPUTS, -1, -1, 0, 1, 0},
	{OQ_OP_Relu, K_OWN, 1, -1, -1, 0, 0, 0},
	{OQ_OP_Clip, K_OWN, 1, -1, -1, 0, 0, 0},
	{OQ_OP_LeakyRelu, K_OWN, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Sigmoid, K_OWN, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Tanh, K_OWN, 1, -1, -1, 0, 0, 0},
	{OQ_OP_HardSigmoid, K_OWN, 1, -1, -1, 0, 0, 0},
	{OQ_OP_HardSwish, K_OWN, 1, -1, -1, 0, 0, 0},
	{OQ_OP_GlobalAveragePool, K_OWN, 1, -1, -1, 1, 1, 0},
	{OQ_OP_Softmax, K_SOFTMAX, 1, -1, -1, 0, 1, 0},
	{OQ_OP_AveragePool, K_SHARE, 1, -1, -1, 1, 1, 0},
	{OQ_OP_MaxPool, K_SHARE, 1, -1, -1, 1, 1, 0},
	{OQ_OP_GlobalMaxPool, K_SHARE, 1, -1, -1, 1, 0, 0},
	{OQ_OP_Reshape, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Transpose, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Squeeze, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Unsqueeze, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Flatten, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Resize, K_SHARE, 1, -1, -1, 0, 0, 0}, /* ORT: 8-bit but slower than its float kernel */
	{OQ_OP_Slice, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Split, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Gather, K_SHARE, 1, -1, -1, 0, 1, 0},
	{OQ_OP_Pad, K_SHARE, 1, -1, -1, 0, 0, 0},
	{OQ_OP_DepthToSpace, K_SHARE, 1, -1, -1, 0, 0, 0},
	{OQ_OP_SpaceToDepth, K_SHARE, 1, -1, -1, 0, 0, 0},
};


static const opinfo *find_op(const oq_node *n)
{
	if (oq_domain_of(n->domain) != OQ_DOM_ONNX)
		return NULL;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (ops[i].op == n->op)
			return &ops[i];
	return NULL;
}

/* Is s in the strcmp-sorted list l of n names? */
static int in_sorted(const char *const *l, size_t n, const char *s)
{
	size_t lo = 0, hi = n;
	while (l && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = strcmp(l[mid], s);
		if (r == 0)
			return 1;
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

int oq_qc_listed(const char *const *l, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(l[i], s) == 0)
			return 1;
	return 0;
}

static int is_data(const opinfo *i, size_t k)
{
	return i->data == ALL_INPUTS || (k < 32 && (i->data >> k) & 1u);
}

/* Does input k of a node with entry f get a Q/DQ? Runtime-aware: only on ops ORT runs on 8 bits. */
static int qdata(const qctx *c, const opinfo *f, size_t k)
{
	return is_data(f, k) && (!c->rt || f->ort);
}

const oq_override *oq_qc_tovr(const qctx *c, const char *name)
{
	return oq_override_find(c->o->overrides, c->o->n_overrides, name, 0);
}

const oq_override *oq_qc_novr(const qctx *c, const oq_node *n)
{
	if (!n || !n->name[0])
		return NULL;
	return oq_override_find(c->o->overrides, c->o->n_overrides, n->name, 1);
}

/* A Mul / Div of n by a positive finite scalar float constant: its factor on the scale (Div: 1 / k)
 * and *t the other input; 0 otherwise. */
static double scale_factor(const qctx *c, const oq_node *n, oq_value **t)
{
	const oq_tensor *k;
	double v;
	int ki;

	if (n->dead || n->n_inputs != 2 || n->n_outputs < 1 || !n->outputs[0] ||
	    !(n->op == OQ_OP_Mul || n->op == OQ_OP_Div))
		return 0;
	ki = n->op == OQ_OP_Div ? 1 : oq_value_const(c->g, n->inputs[1]) ? 1 : 0;
	k = oq_value_const(c->g, n->inputs[ki]);
	if (!k || k->nelem != 1 || oq_dtype_kind(k->dtype) != 'f' || oq_value_const(c->g, n->inputs[1 - ki]))
		return 0;
	v = oq_tensor_get(k, 0);
	if (!(v > 0) || !isfinite(v) || !isfinite(1 / v))
		return 0;
	*t = n->inputs[1 - ki];
	return n->op == OQ_OP_Div ? 1 / v : v;
}

/* Can activation v get a Q/DQ at all? */
static int eligible(const qctx *c, const oq_value *v)
{
	const oq_override *t;
	const oq_value *o = v;
	if (!v || v->graph != c->g || v->init || (v->qmark & OQ_QM_INTERNAL))
		return 0;
	/* a body's capture of an enclosing graph's activation: its pair goes inside the body */
	while (o && (o->flags & OQ_V_OUTER))
		o = o->outer;
	if ((v->flags & OQ_V_OUTER) && (!c->g->parent || !o || o->init))
		return 0;
	if (c->keep && v->index < c->nv && c->keep[v->index])
		return 0;
	if (o->type.kind == OQ_TYPE_TENSOR && o->type.dtype && o->type.dtype != OQ_DT_FLOAT)
		return 0;
	if (!v->producer && !(v->flags & (OQ_V_INPUT | OQ_V_OUTER)))
		return 0;
	if (oq_qc_listed(c->o->exclude, c->o->n_exclude, v->name))
		return 0;
	if ((t = oq_qc_tovr(c, v->name)) && t->skip)
		return 0;
	if (c->inc_tensors && !oq_qc_listed(c->o->include, c->o->n_include, v->name))
		return 0;
	return 1;
}

/* ------------------------------------------------------------ selection */

/* Is s a node name (what 1) or op type (what 2) of g or its If/Loop/Scan bodies (any depth)? */
static int node_has(const oq_graph *g, const char *s, int what)
{
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		if (what == 1 ? n->name[0] && strcmp(n->name, s) == 0 : strcmp(n->op_type, s) == 0)
			return 1;
		for (size_t k = 0; g->n_subgraphs && k < n->n_attrs; k++) {
			const oq_attr *a = &n->attrs[k];
			for (size_t b = 0; b < (a->g ? 1 : a->graphs ? a->n : 0); b++)
				if (node_has(a->g ? a->g : a->graphs[b], s, what))
					return 1;
		}
	}
	return 0;
}

/* Is s a value name of g or its bodies (any depth)? */
static int tensor_named(const oq_graph *g, const char *s)
{
	if (oq_graph_find(g, s))
		return 1;
	for (size_t i = 0; g->n_subgraphs && i < g->n_nodes; i++)
		for (size_t k = 0; k < g->nodes[i]->n_attrs; k++) {
			const oq_attr *a = &g->nodes[i]->attrs[k];
			for (size_t b = 0; b < (a->g ? 1 : a->graphs ? a->n : 0); b++)
				if (tensor_named(a->g ? a->g : a->graphs[b], s))
					return 1;
		}
	return 0;
}

/* Checks --include/--exclude names and notes what --include restricts. */
static int check_lists(qctx *c)
{
	const char *const *l[2] = {c->o->include, c->o->exclude};
	size_t n[2] = {c->o->n_include, c->o->n_exclude};
	const char *opt[2] = {"--include", "--exclude"};
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < n[k]; i++) {
			const char *s = l[k][i];
			int is_node = node_has(c->g, s, 1) || oq_op_lookup(OQ_DOM_ONNX, s) != OQ_OP_UNKNOWN ||
				      node_has(c->g, s, 2);
			int is_tensor = tensor_named(c->g, s);
			if (!is_node && !is_tensor)
				return oq_err(c->d, OQ_EUSAGE, "quantize: %s '%s' is no node name, op type or "
					      "tensor of the model", opt[k], s);
			if (k == 0 && is_node)
				c->inc_nodes = 1;
			else if (k == 0)
				c->inc_tensors = 1;
		}
	return OQ_OK;
}

/* Node n's table entry when the pass quantizes it, else NULL. */
static const opinfo *select_one(const qctx *c, const oq_node *n)
{
	const opinfo *f = n->dead ? NULL : find_op(n);
	const oq_override *ov = oq_qc_novr(c, n);
	const char *const *ex = c->o->exclude;
	size_t nex = c->o->n_exclude;
	if (f && ((n->name[0] && oq_qc_listed(ex, nex, n->name)) || oq_qc_listed(ex, nex, n->op_type)))
		f = NULL;
	if (f && c->inc_nodes && !(n->name[0] && oq_qc_listed(c->o->include, c->o->n_include, n->name)) &&
	    !oq_qc_listed(c->o->include, c->o->n_include, n->op_type))
		f = NULL;
	if (f && ov && ov->skip)
		f = NULL;
	if (f && c->trt && !f->trt)
		f = NULL; /* TRT: only fusible ops take part */
	if (f && f->rt_only && !c->rt)
		f = NULL;
	if (f && c->rt && n->name[0] && in_sorted(c->o->float_nodes, c->o->n_float_nodes, n->name))
		f = NULL; /* a unit the placement leaves float */
	return f;
}

/*
 * Does node n run in float (runtime-aware): not selected, or an op ORT has no 8-bit kernel for?
 * A Mul / Div by a positive scalar is folded into a DequantizeLinear and a Relu / Clip fused onto
 * its producer goes into the producer's Q: they run as their input does.
 */
static int runs_float(const qctx *c, const oq_node *n)
{
	oq_value *t = NULL;
	if (!n || n->index >= c->nn || c->g->nodes[n->index] != n || !c->info[n->index])
		return 1;
	if (scale_factor(c, n, &t))
		return runs_float(c, t->producer);
	/* a Relu / Clip fused onto its producer goes into that producer's Q (drop_activations) */
	if ((n->qmark & OQ_QM_ACT) && n->n_inputs && n->inputs[0])
		return runs_float(c, n->inputs[0]->producer);
	return !c->info[n->index]->ort;
}

/*
 * Runtime-aware: an elementwise or data-movement op whose data inputs all
 * come from float (graph inputs, float units, ops without an 8-bit kernel)
 * stays float too: Q/DQ around it would cost time and fidelity and buy no
 * integer kernel. Compute nodes keep their selection. Graph order, so a
 * float region grows through chains.
 */
static void float_regions(qctx *c)
{
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		const opinfo *f = c->info[i];
		int any = 0, all = 1;
		if (!f || f->w >= 0 || (f->kind == K_OWN && !f->ort))
			continue;
		for (size_t k = 0; k < n->n_inputs; k++) {
			oq_value *v = n->inputs[k];
			if (!is_data(f, k) || !v || oq_value_const(c->g, v))
				continue;
			any = 1;
			if (!runs_float(c, v->producer))
				all = 0;
		}
		if (any && all)
			c->info[i] = NULL;
	}
}

static void select_nodes(qctx *c)
{
	for (size_t i = 0; i < c->nn; i++)
		c->info[i] = select_one(c, c->g->nodes[i]);
	if (c->rt)
		float_regions(c);
}

/* ------------------------------------------------------------ parameters */

int oq_quantize_act_grid(const oq_opts *o, const oq_value *v, const oq_node *prod, int *dtype,
			 int *act_sym, oq_diag *d)
{
	const oq_override *t = oq_override_find(o->overrides, o->n_overrides, v->name, 0);
	const oq_override *n = prod && prod->name[0]
				       ? oq_override_find(o->overrides, o->n_overrides, prod->name, 1)
				       : NULL;
	int trt = o->profile == OQ_PROFILE_TRT;
	/* TRT: symmetric int8, or FP8 (amax / 448, per tensor) */
	int dt = trt && !oq_qtype_is_fp8(o->act_type) ? OQ_DT_INT8 : o->act_type;
	int sym = trt ? OQ_ACT_SYM : o->act_sym;
	int64_t qmin = 0, qmax = 0;

	if (n && n->dtype)
		dt = n->dtype;
	if (t && t->dtype)
		dt = t->dtype;
	/* an override's "symmetric": true keeps the global symmetric kind (narrow or unsigned) */
	if (n && n->symmetric >= 0)
		sym = n->symmetric ? (sym ? sym : OQ_ACT_SYM) : OQ_ACT_ASYM;
	if (t && t->symmetric >= 0)
		sym = t->symmetric ? (sym ? sym : OQ_ACT_SYM) : OQ_ACT_ASYM;
	if (oq_qtype_is_fp8(dt)) {
		if (!sym)
			return oq_err(d, OQ_EUSAGE, "quantize: tensor '%s': float8e4m3fn activations are "
				      "symmetric; drop the override's \"symmetric\": false", v->name);
		sym = OQ_ACT_SYM;
	} else if (!oq_qrange(dt, 0, &qmin, &qmax)) {
		return oq_err(d, OQ_EUSAGE, "quantize: tensor '%s': activation type %s is not supported "
			      "(use uint8, int8, uint16, int16 or float8e4m3fn)", v->name, oq_dtype_name(dt));
	}
	if (sym == OQ_ACT_SYM_UNSIGNED && qmin < 0)
		return oq_err(d, OQ_EUSAGE, "quantize: tensor '%s': unsigned symmetric activations need "
			      "an unsigned type, not %s; set \"symmetric\" in its override", v->name,
			      oq_dtype_name(dt));
	*dtype = dt;
	*act_sym = sym;
	return OQ_OK;
}

const oq_node *oq_quantize_grid_node(const oq_opts *o, const oq_value *v)
{
	const oq_node *a = v->producer, *p;
	const oq_value *t;
	oq_diag scratch;
	int dt, sym, form;
	int64_t qmin, qmax;

	/* the fold's conditions that do not depend on ranges or on the node selection (see
	 * drop_activations): a removable Relu or Clip, asymmetric profile, a single-use input */
	if (!a || !(a->qmark & OQ_QM_ACT) || o->profile == OQ_PROFILE_TRT || o->keep_activations ||
	    (a->op != OQ_OP_Relu && a->op != OQ_OP_Clip) || !a->n_inputs || !(t = a->inputs[0]) ||
	    !(p = t->producer) || t->n_uses != 1 || !p->n_outputs || p->outputs[0] != t)
		return a;
	/* ... and the grid the producer's Q would have must reproduce the activation: zero point at
	 * qmin for a range starting at 0 (asymmetric, or AIMET unsigned on an unsigned type) */
	oq_diag_init(&scratch);
	if (oq_quantize_act_grid(o, v, p, &dt, &sym, &scratch) || oq_qtype_is_fp8(dt))
		return a;
	form = oq_act_form(sym, 0);
	if (form != OQ_QP_ASYM && !(form == OQ_QP_SYM_FULL && oq_qrange(dt, 0, &qmin, &qmax) && qmin == 0))
		return a;
	return p;
}

/*
 * Own parameters of activation v written by node `prod` (NULL for graph
 * inputs). *ok = 0 when v has no range (it then stays float).
 */
static int own_qp(qctx *c, const oq_value *v, const oq_node *prod, qp *out, int *ok)
{
	const oq_override *t = oq_qc_tovr(c, v->name), *n = oq_qc_novr(c, prod);
	const oq_range *r;
	int dtype, sym, rc;
	int64_t qmin = 0, qmax = 0;
	double lo, hi;

	*ok = 0;
	if ((rc = oq_quantize_act_grid(c->o, v, prod, &dtype, &sym, c->d)))
		return rc;
	if (!oq_qtype_is_fp8(dtype))
		(void)oq_qrange(dtype, 0, &qmin, &qmax); /* checked by oq_quantize_act_grid */
	out->dtype = dtype;
	if ((t && t->has_qparams) || (!(t && t->has_range) && n && n->has_qparams)) {
		const oq_override *f = t && t->has_qparams ? t : n;
		if (oq_qtype_is_fp8(dtype) && f->zero_point != 0)
			return oq_err(c->d, OQ_EUSAGE, "quantize: tensor '%s': override zero_point %lld: "
				      "float8e4m3fn activations have zero point 0", v->name,
				      (long long)f->zero_point);
		if (!oq_qtype_is_fp8(dtype) && (f->zero_point < qmin || f->zero_point > qmax))
			return oq_err(c->d, OQ_EUSAGE, "quantize: tensor '%s': override zero_point %lld is "
				      "outside %s [%lld, %lld]", v->name, (long long)f->zero_point,
				      oq_dtype_name(dtype), (long long)qmin, (long long)qmax);
		out->scale = f->scale;
		out->zp = f->zero_point;
		out->set = *ok = 1;
		return OQ_OK;
	}
	if (t && t->has_range) {
		lo = t->min;
		hi = t->max;
	} else if (n && n->has_range) {
		lo = n->min;
		hi = n->max;
	} else if (prod && find_op(prod) && find_op(prod)->kind == K_SOFTMAX) {
		lo = 0;
		hi = 1;
	} else {
		double blo, bhi;
		r = c->o->ranges ? oq_ranges_find(c->o->ranges, v->name) : NULL;
		if (!r || !(r->min <= r->max) || !isfinite(r->min) || !isfinite(r->max))
			return OQ_OK;
		lo = r->min;
		hi = r->max;
		/* a split unit's input: what its flat ends saturate costs nothing (pass.h); looked at
		 * before drop_activations removed the unit's Clip */
		blo = c->bound_lo ? c->bound_lo[v->index] : -INFINITY;
		bhi = c->bound_hi ? c->bound_hi[v->index] : INFINITY;
		if (!oq_qtype_is_fp8(dtype) && fmax(lo, blo) < fmin(hi, bhi)) {
			lo = fmax(lo, blo);
			hi = fmin(hi, bhi);
		}
	}
	rc = oq_qparams(lo, hi, dtype, oq_act_form(sym, lo), 0, &out->scale, &out->zp);
	if (rc)
		return oq_err(c->d, rc, "quantize: tensor '%s': no quantization parameters for range "
			      "[%g, %g] on %s", v->name, lo, hi, oq_dtype_name(dtype));
	out->set = *ok = 1;
	return OQ_OK;
}

/* c->bound_lo / bound_hi of every value (before drop_activations changes the units' look). */
static int input_bounds(qctx *c)
{
	for (size_t i = 0; i < c->nv; i++) {
		oq_value *v = c->g->values[i];
		int64_t qmin = 0, qmax = 255;
		int dt, sym;
		oq_diag scratch;

		c->bound_lo[i] = -INFINITY;
		c->bound_hi[i] = INFINITY;
		oq_diag_init(&scratch);
		if (!v->n_uses || oq_quantize_act_grid(c->o, v, v->producer, &dt, &sym, &scratch) ||
		    oq_qtype_is_fp8(dt) || !oq_qrange(dt, 0, &qmin, &qmax))
			continue;
		(void)oq_fuse_input_bounds(c->g, v, c->o->ranges, (double)(qmax - qmin), &c->bound_lo[i],
					   &c->bound_hi[i]);
	}
	return OQ_OK;
}

/* Does a tensor override give v its own parameters (so it must not share its input's)? */
static int overridden(const qctx *c, const oq_value *v)
{
	const oq_override *t = oq_qc_tovr(c, v->name);
	return t && (t->dtype || t->symmetric >= 0 || t->has_range || t->has_qparams);
}

/* Parameters of a wanted value: shared with input 0 for K_SHARE ops, else its own. */
static int value_qp(qctx *c, oq_value *v)
{
	oq_node *p = v->producer;
	const opinfo *f = p && p->index < c->nn ? c->info[p->index] : NULL;
	int ok, rc;

	if (p && p->index < c->nn && c->g->nodes[p->index] == p && c->fold[p->index]) {
		oq_value *t = NULL;
		(void)scale_factor(c, p, &t);
		if (c->q[t->index].set) {
			c->q[v->index] = c->q[t->index];
			c->q[v->index].scale = (float)(c->q[t->index].scale * c->fold[p->index]);
			return OQ_OK;
		}
		c->fold[p->index] = 0; /* no parameters to derive from: y gets its own */
	}
	if (f && f->kind == K_SHARE && p->n_inputs && p->inputs[0] && p->inputs[0]->index < c->nv &&
	    c->q[p->inputs[0]->index].set && !overridden(c, v) && !oq_qc_novr(c, p)) {
		c->q[v->index] = c->q[p->inputs[0]->index];
		return OQ_OK;
	}
	if ((rc = own_qp(c, v, p, &c->q[v->index], &ok)))
		return rc;
	if (!ok) {
		c->n_norange++;
		if (c->o->log)
			fprintf(c->o->log, "quantize: tensor '%s' has no calibrated range: left float\n", v->name);
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ fused activations */

/* Bounds of a Relu or Clip node; 0 when a bound is not a constant. */
static int act_bounds(const qctx *c, const oq_node *a, double *lo, double *hi)
{
	*lo = -INFINITY;
	*hi = INFINITY;
	if (a->op == OQ_OP_Relu) {
		*lo = 0;
		return 1;
	}
	if (a->op != OQ_OP_Clip)
		return 0;
	if (a->opset && a->opset < 11) {
		const oq_attr *mn = oq_node_attr(a, "min"), *mx = oq_node_attr(a, "max");
		if (mn)
			*lo = mn->f;
		if (mx)
			*hi = mx->f;
		return 1;
	}
	for (size_t k = 1; k < 3 && k < a->n_inputs; k++) {
		const oq_tensor *t;
		if (!a->inputs[k])
			continue;
		if (!(t = oq_value_const(c->g, a->inputs[k])) || t->nelem != 1)
			return 0;
		if (k == 1)
			*lo = oq_tensor_get(t, 0);
		else
			*hi = oq_tensor_get(t, 0);
	}
	return 1;
}

/*
 * Removes fused Relu/Clip(0, hi) nodes whose output Q reproduces them:
 * asymmetric activations (zero point = qmin, so negatives saturate to 0)
 * and a calibrated range inside [0, hi]. The producer then writes the
 * activation's output value.
 */
static int drop_activations(qctx *c)
{
	if (c->trt || c->o->keep_activations)
		return OQ_OK;
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *a = c->g->nodes[i], *p;
		oq_value *t, *y;
		double lo, hi;
		const oq_range *r;
		const oq_override *ov;
		qp q = {0};
		int64_t qmin, qmax;
		int ok, rc;

		if (a->dead || !(a->qmark & OQ_QM_ACT) || !c->info[i] || !act_bounds(c, a, &lo, &hi) || lo != 0)
			continue;
		t = a->inputs[0];
		y = a->n_outputs ? a->outputs[0] : NULL;
		p = t ? t->producer : NULL;
		if (!p || p->index >= c->nn || !c->info[p->index] || !y || p->n_outputs < 1 ||
		    p->outputs[0] != t || t->n_uses != 1 || !eligible(c, y))
			continue;
		/* runtime-aware: only a producer ORT runs as an integer kernel is sure to get its Q
		 * (mark_needed); a float one (ConvTranspose, a float unit) keeps its activation */
		if (c->rt && runs_float(c, p))
			continue;
		if ((ov = oq_qc_tovr(c, y->name)) && ov->symmetric == 1)
			continue;
		/* the range the Q will use must lie inside the activation's bounds */
		if (ov && (ov->has_range || ov->has_qparams)) {
			if (ov->has_range && (ov->min < lo || ov->max > hi))
				continue;
		} else {
			r = c->o->ranges ? oq_ranges_find(c->o->ranges, y->name) : NULL;
			if (!r || !(r->min <= r->max) || r->min < lo || r->max > hi)
				continue;
		}
		if ((rc = own_qp(c, y, p, &q, &ok)))
			return rc;
		if (!ok || !oq_qrange(q.dtype, 0, &qmin, &qmax) || q.zp != qmin)
			continue;
		if (ov && ov->has_qparams && (double)(qmax - qmin) * q.scale > hi)
			continue;
		p->outputs[0] = y;
		a->dead = 1;
		if (t->flags & OQ_V_VINFO)
			oq_graph_remove_vinfo(c->g, t);
		c->n_acts++;
		if (c->o->log)
			fprintf(c->o->log, "quantize: node '%s' (%s) folded into the Q of '%s'\n", a->name,
				a->op_type, y->name);
	}
	if (c->n_acts && oq_graph_rebuild_uses(c->g))
		return oq_err(c->d, OQ_ENOMEM, "quantize: out of memory");
	return OQ_OK;
}

/* ------------------------------------------------------------ Q/DQ insertion */

static oq_tensor *scalar_zp(int dtype, int64_t zp)
{
	oq_tensor *t = oq_tensor_new(dtype, 0, NULL);
	unsigned char *b;
	if (!t)
		return NULL;
	b = (unsigned char *)t->data;
	switch (oq_dtype_bits(dtype)) {
	case 4: b[0] = (unsigned char)(zp & 0xf); break;
	case 8: b[0] = (unsigned char)(zp & 0xff); break;
	case 16:
		b[0] = (unsigned char)(zp & 0xff);
		b[1] = (unsigned char)((zp >> 8) & 0xff);
		break;
	default: oq_tensor_free(t); return NULL;
	}
	return t;
}

/* Name "<base><suffix>" into a malloc'd string. */
static char *cat(const char *base, const char *suffix)
{
	size_t a = strlen(base), b = strlen(suffix);
	char *s = malloc(a + b + 1);
	if (s) {
		memcpy(s, base, a);
		memcpy(s + a, suffix, b + 1);
	}
	return s;
}

/* Scale and zero-point initializers of v (created once). */
static int qinits(qctx *c, oq_value *v)
{
	size_t i = v->index;
	char *sn = NULL, *zn = NULL;
	oq_tensor *s, *z;
	int rc = OQ_ENOMEM;

	if (c->s_init[i])
		return OQ_OK;
	sn = cat(v->name, "_scale");
	zn = cat(v->name, "_zero_point");
	s = oq_tensor_from_floats(0, NULL, &c->q[i].scale);
	z = scalar_zp(c->q[i].dtype, c->q[i].zp);
	if (!sn || !zn || !s || !z) {
		oq_tensor_free(s);
		oq_tensor_free(z);
		goto out;
	}
	if (!(c->s_init[i] = oq_graph_add_init(c->g, sn, s))) {
		oq_tensor_free(z);
		goto out;
	}
	if (!(c->z_init[i] = oq_graph_add_init(c->g, zn, z)))
		goto out;
	rc = OQ_OK;
out:
	free(sn);
	free(zn);
	return rc;
}

static oq_graph *root_of(oq_graph *g)
{
	while (g->parent)
		g = g->parent;
	return g;
}

/* Adds the node names of g and its bodies (any depth) to the nameset ctx. */
static int add_node_names(oq_graph *g, oq_node *owner, void *ctx)
{
	(void)owner;
	for (size_t i = 0; i < g->n_nodes; i++)
		if (oq_nameset_add(ctx, g->nodes[i]->name))
			return OQ_ENOMEM;
	return oq_graph_each_subgraph(g, add_node_names, ctx);
}

/* A node name "<base>" or "<base>_K" no node of the model (bodies included) uses yet (ONNX
 * Runtime rejects duplicates). */
static char *node_name(qctx *c, const char *base)
{
	size_t n = strlen(base) + 24;
	char *buf;

	if (!c->node_names.cap && add_node_names(root_of(c->g), NULL, &c->node_names))
		return NULL;
	if (!(buf = malloc(n)))
		return NULL;
	snprintf(buf, n, "%s", base);
	for (unsigned long k = 1; oq_nameset_has(&c->node_names, buf); k++)
		snprintf(buf, n, "%s_%lu", base, k);
	return buf;
}

/* Appends a node named un (see node_name) and records its name. */
static oq_node *add_named(qctx *c, const char *op, const char *un)
{
	oq_node *n = oq_graph_add_node(c->g, op, "", un);
	return n && !oq_nameset_add(&c->node_names, n->name) ? n : NULL;
}

/*
 * A body's capture v of an enclosing activation o (profile ORT, integer types): the Q goes
 * into o's graph, so it runs once per call of that graph instead of once per iteration of the
 * body, and the body's DQ reads its output as a capture. ONNX Runtime still forms the body's
 * integer node units from a DQ whose input is captured (its QDQ selectors look at the DQ, its
 * constant scale and zero point inside the body, and the consumer): a Conv in an If branch
 * reading a captured Q output becomes QLinearConv. A QuantizeLinear of o with the same scale
 * and zero point (type included) already in o's graph (another body's, or that graph's own) is
 * shared. Returns the body's capture of the Q output, or NULL (out of memory).
 */
static oq_value *outer_q(qctx *c, oq_value *v)
{
	oq_value *o = oq_value_resolve(v), *qv = NULL, *in[3] = {o, NULL, NULL}, *cap;
	oq_graph *og = o->graph;
	oq_tensor *st = oq_tensor_from_floats(0, NULL, &c->q[v->index].scale);
	oq_tensor *zt = scalar_zp(c->q[v->index].dtype, c->q[v->index].zp);
	char *nm = NULL, *un = NULL;
	oq_node *q;

	if (!st || !zt)
		goto out;
	for (size_t i = 0; i < og->n_nodes && !qv; i++) {
		oq_node *n = og->nodes[i];
		if (!n->dead && oq_node_is(n, OQ_OP_QuantizeLinear) && n->n_inputs == 3 && n->inputs[0] == o &&
		    n->n_outputs == 1 && n->outputs[0] && n->inputs[1] && n->inputs[1]->init && n->inputs[2] && n->inputs[2]->init &&
		    oq_tensor_equal(n->inputs[1]->init, st) && oq_tensor_equal(n->inputs[2]->init, zt) &&
		    !oq_node_attr(n, "axis") && !oq_node_attr(n, "output_dtype"))
			qv = n->outputs[0];
	}
	if (!qv) {
		if (!(nm = cat(o->name, "_scale")))
			goto out;
		in[1] = oq_graph_add_init(og, nm, st); /* owns st, also on failure */
		st = NULL;
		free(nm);
		nm = NULL;
		if (!in[1] || !(nm = cat(o->name, "_zero_point")))
			goto out;
		in[2] = oq_graph_add_init(og, nm, zt);
		zt = NULL;
		free(nm);
		nm = NULL;
		if (!in[2])
			goto out;
		if (!(nm = cat(o->name, "_QuantizeLinear_Output")) || !(qv = oq_graph_new_value(og, nm)))
			goto out;
		free(nm);
		nm = NULL;
		if (!(nm = cat(o->name, "_QuantizeLinear")) || !(un = node_name(c, nm)) ||
		    !(q = oq_graph_add_node(og, "QuantizeLinear", "", un)) || oq_nameset_add(&c->node_names, un) ||
		    oq_node_set_inputs(q, in, 3) || oq_node_set_outputs(q, &qv, 1)) {
			qv = NULL;
			goto out;
		}
	}
	if (!(cap = oq_graph_find(c->g, qv->name)) && !(cap = oq_graph_value(c->g, qv->name))) {
		qv = NULL;
		goto out;
	}
	cap->flags |= OQ_V_OUTER;
	cap->outer = qv;
	qv = cap;
out:
	oq_tensor_free(st);
	oq_tensor_free(zt);
	free(nm);
	free(un);
	return qv;
}

/* Adds src -> Q(v's parameters) (alone: its output read by folded DQs); returns the Q's output. */
static oq_value *add_q(qctx *c, oq_value *v, oq_value *src)
{
	char *qo = cat(v->name, "_QuantizeLinear_Output"), *qn = cat(v->name, "_QuantizeLinear"), *un = NULL;
	oq_value *qv, *in[3], *res = NULL;
	oq_node *q;

	if (!qo || !qn || qinits(c, v))
		goto out;
	/* float8 keeps the pair inside: ort_float8_units rewires a unit through its DQ's Q */
	if (src == v && (v->flags & OQ_V_OUTER) && c->g->parent && !c->trt &&
	    !oq_qtype_is_fp8(c->q[v->index].dtype)) {
		c->qout[v->index] = res = outer_q(c, v);
		goto out;
	}
	if (!(qv = oq_graph_new_value(c->g, qo)))
		goto out;
	if (!(un = node_name(c, qn)) || !(q = add_named(c, "QuantizeLinear", un)))
		goto out;
	in[0] = src;
	in[1] = c->s_init[v->index];
	in[2] = c->z_init[v->index];
	if (oq_node_set_inputs(q, in, 3) || oq_node_set_outputs(q, &qv, 1))
		goto out;
	/* FP8: out-of-range values become +-448, never NaN (the default, written for readers) */
	if (oq_qtype_is_fp8(c->q[v->index].dtype) && oq_node_set_attr_int(q, "saturate", 1))
		goto out;
	c->qout[v->index] = res = qv;
out:
	free(qo);
	free(qn);
	free(un);
	return res;
}

/* Adds src -> Q -> DQ -> dst (dst NULL: a fresh "<v>_DequantizeLinear_Output"); returns dst. */
static oq_value *add_pair(qctx *c, oq_value *v, oq_value *src, oq_value *dst)
{
	char *dqo = cat(v->name, "_DequantizeLinear_Output"), *dqn = cat(v->name, "_DequantizeLinear"), *un = NULL;
	oq_value *qv, *in[3], *res = NULL;
	oq_node *dq;

	if (!dqo || !dqn || !(qv = add_q(c, v, src)) || (!dst && !(dst = oq_graph_new_value(c->g, dqo))))
		goto out;
	if (!(un = node_name(c, dqn)) || !(dq = add_named(c, "DequantizeLinear", un)))
		goto out;
	in[0] = qv;
	in[1] = c->s_init[v->index];
	in[2] = c->z_init[v->index];
	if (oq_node_set_inputs(dq, in, 3) || oq_node_set_outputs(dq, &dst, 1))
		goto out;
	c->n_pairs++;
	res = dst;
out:
	free(dqo);
	free(dqn);
	free(un);
	return res;
}

/* Is use u of a value a quantized data input? */
static int quantized_use(const qctx *c, const oq_use *u)
{
	const opinfo *f = u->node->index < c->nn && c->g->nodes[u->node->index] == u->node ?
				  c->info[u->node->index] : NULL;
	return f && !u->node->dead && qdata(c, f, (size_t)u->index);
}

static void note_input(qctx *c, oq_node *n, int k, float scale)
{
	if (n->index < c->nn && k < 32)
		c->qin[n->index] |= 1u << k;
	if (k == 0 && n->index < c->nn)
		c->in_scale[n->index] = scale;
}

/* Is n a node of the pass' graph that insert_folded replaces? */
static int folded(const qctx *c, const oq_node *n)
{
	return n->index < c->nn && c->g->nodes[n->index] == n && c->fold[n->index] != 0;
}

/* Does anything but folded Mul / Div nodes read v (a graph output, a body's capture, a node)? */
static int read_unfolded(const qctx *c, const oq_value *v)
{
	if ((v->flags & OQ_V_OUTPUT) || oq_value_n_captures(v))
		return 1;
	for (size_t i = 0; i < v->n_uses; i++)
		if (!folded(c, v->uses[i].node))
			return 1;
	return 0;
}

/*
 * A folded Mul / Div (c->fold) writing y: y := DequantizeLinear(Q output of
 * its input, y's scale, zero point), the node goes. The same integers as
 * its input's Q, read with the scale times the factor. When only folded
 * nodes read y (a chain: Div by 6, then Mul by a scalar weight), y gets no
 * DequantizeLinear: the next fold reads the Q itself, and a DQ nobody reads
 * would still run in ONNX Runtime.
 */
static int insert_folded(qctx *c, oq_node *n, oq_value *y)
{
	char *dqn = cat(y->name, "_DequantizeLinear"), *un = NULL;
	oq_value *t = NULL, *in[3];
	oq_node *dq;
	int rc = OQ_ENOMEM;

	(void)scale_factor(c, n, &t);
	if (!dqn || !c->qout[t->index])
		goto out;
	if (!read_unfolded(c, y)) {
		n->outputs[0] = NULL;
		n->dead = 1;
		c->qout[y->index] = c->qout[t->index];
		c->n_folded++;
		rc = OQ_OK;
		goto out;
	}
	if (qinits(c, y) || !(un = node_name(c, dqn)) || !(dq = add_named(c, "DequantizeLinear", un)))
		goto out;
	in[0] = c->qout[t->index];
	in[1] = c->s_init[y->index];
	in[2] = c->z_init[y->index];
	n->outputs[0] = NULL;
	n->dead = 1;
	if (oq_node_set_inputs(dq, in, 3) || oq_node_set_outputs(dq, &y, 1))
		goto out;
	c->qout[y->index] = c->qout[t->index];
	for (size_t i = 0; i < y->n_uses; i++)
		if (quantized_use(c, &y->uses[i]))
			note_input(c, y->uses[i].node, y->uses[i].index, c->q[y->index].scale);
	c->n_folded++;
	rc = OQ_OK;
out:
	free(dqn);
	free(un);
	return rc ? oq_err(c->d, rc, "quantize: out of memory") : OQ_OK;
}

/* ORT: one shared pair for v; quantized consumers read its DQ (runtime-aware: all consumers). */
static int insert_shared(qctx *c, oq_value *v)
{
	size_t nu = v->n_uses;
	oq_use *uses = oq_calloc(nu, sizeof *uses);
	oq_node *p = v->producer;
	float s = c->q[v->index].scale;
	int rc = OQ_OK, all = c->rt && !runs_float(c, p);

	if (!uses)
		return oq_err(c->d, OQ_ENOMEM, "quantize: out of memory");
	if (nu)
		memcpy(uses, v->uses, nu * sizeof *uses);
	if ((v->flags & OQ_V_OUTPUT) && p && p->index < c->nn && c->info[p->index] &&
	    oq_value_n_captures(v) == 0) {
		/* the producer writes a new value; the final DQ writes the graph output */
		char *pn = cat(v->name, "_QuantizeLinear_Input");
		oq_value *pre = pn ? oq_graph_new_value(c->g, pn) : NULL;
		free(pn);
		if (!pre || (v->type.kind == OQ_TYPE_TENSOR &&
			     oq_value_set_type(pre, v->type.dtype ? v->type.dtype : OQ_DT_FLOAT, -1, NULL))) {
			rc = OQ_ENOMEM;
			goto out;
		}
		p->outputs[v->producer_index] = pre;
		for (size_t i = 0; i < nu; i++) {
			if (quantized_use(c, &uses[i]))
				note_input(c, uses[i].node, uses[i].index, s);
			else if (!all && !folded(c, uses[i].node))
				uses[i].node->inputs[uses[i].index] = pre;
		}
		if (!add_pair(c, v, pre, v))
			rc = OQ_ENOMEM;
	} else {
		/* runtime-aware, an integer producer: every reader takes the DQ, so the producer's node
		 * unit ends in the Q; folded readers read the Q (insert_folded) */
		oq_value *dq = NULL;
		size_t nq = 0, nf = 0;
		for (size_t i = 0; i < nu; i++) {
			if (folded(c, uses[i].node))
				nf++;
			else if (all || quantized_use(c, &uses[i]))
				nq++;
		}
		if (nq ? !(dq = add_pair(c, v, v, NULL)) : nf && !add_q(c, v, v)) {
			rc = OQ_ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < nu && dq; i++) {
			int qu = quantized_use(c, &uses[i]);
			if (folded(c, uses[i].node) || !(all || qu))
				continue;
			uses[i].node->inputs[uses[i].index] = dq;
			if (qu)
				note_input(c, uses[i].node, uses[i].index, s);
		}
	}
out:
	free(uses);
	return rc ? oq_err(c->d, rc, "quantize: out of memory") : OQ_OK;
}

/*
 * ORT: which values want a pair: quantized data inputs and graph outputs of
 * quantized nodes; runtime-aware, also the outputs of the ops ORT runs as
 * QLinear* kernels (their node unit needs the Q), and a Mul / Div by a
 * positive scalar whose output wants a pair is folded (c->fold): its input
 * wants one instead, whose DequantizeLinear with the scaled scale then
 * writes the output (processed last to first, so chains fold through).
 */
static void mark_needed(qctx *c)
{
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		const opinfo *f = c->info[i];
		if (!f || n->dead)
			continue;
		for (size_t k = 0; k < n->n_inputs; k++)
			if (qdata(c, f, k) && eligible(c, n->inputs[k]) && n->inputs[k]->index < c->nv)
				c->need[n->inputs[k]->index] = 1;
		if (c->trt)
			continue;
		for (size_t k = 0; k < n->n_outputs; k++) {
			oq_value *v = n->outputs[k];
			if (v && ((v->flags & OQ_V_OUTPUT) || (c->rt && f->ort && f->kind != K_SHARE)) &&
			    eligible(c, v) && v->index < c->nv)
				c->need[v->index] = 1;
		}
	}
	for (size_t i = c->nn; c->rt && i-- > 0;) {
		oq_node *n = c->g->nodes[i];
		oq_value *t = NULL, *y;
		double k;
		if (!c->info[i] || !(k = scale_factor(c, n, &t)))
			continue;
		y = n->outputs[0];
		if (y->index >= c->nv || !c->need[y->index] || !eligible(c, y) || !eligible(c, t) ||
		    t->index >= c->nv || overridden(c, y) || oq_qc_novr(c, n))
			continue;
		c->fold[i] = k;
		c->need[t->index] = 1;
	}
}

/* Parameters for every wanted value, graph inputs first, then in node (topological) order. */
static int compute_params(qctx *c)
{
	int rc;
	for (size_t i = 0; i < c->g->n_inputs; i++) {
		oq_value *v = c->g->inputs[i];
		if (v->index < c->nv && c->need[v->index] && (rc = value_qp(c, v)))
			return rc;
	}
	for (size_t i = 0; c->g->parent && i < c->nv; i++) { /* a body's captures */
		oq_value *v = c->g->values[i];
		if ((v->flags & OQ_V_OUTER) && c->need[i] && (rc = value_qp(c, v)))
			return rc;
	}
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		if (n->dead)
			continue;
		for (size_t k = 0; k < n->n_outputs; k++) {
			oq_value *v = n->outputs[k];
			if (v && v->index < c->nv && c->need[v->index] && !c->q[v->index].set &&
			    (rc = value_qp(c, v)))
				return rc;
		}
	}
	return OQ_OK;
}

static int insert_ort(qctx *c)
{
	int rc;
	for (size_t i = 0; i < c->g->n_inputs; i++) {
		oq_value *v = c->g->inputs[i];
		if (v->index < c->nv && c->q[v->index].set && (rc = insert_shared(c, v)))
			return rc;
	}
	for (size_t i = 0; c->g->parent && i < c->nv; i++) {
		oq_value *v = c->g->values[i];
		if ((v->flags & OQ_V_OUTER) && c->q[i].set && (rc = insert_shared(c, v)))
			return rc;
	}
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		if (n->dead)
			continue;
		if (c->fold[i]) {
			if ((rc = insert_folded(c, n, n->outputs[0])))
				return rc;
			continue;
		}
		for (size_t k = 0; k < n->n_outputs; k++) {
			oq_value *v = n->outputs[k];
			if (v && v->index < c->nv && c->q[v->index].set && !(v->flags & OQ_V_INPUT) &&
			    (rc = insert_shared(c, v)))
				return rc;
		}
	}
	return OQ_OK;
}

/* Element i of an owned 8- or 16-bit integer tensor := v (little-endian). */
static void put_int(oq_tensor *t, size_t i, int64_t v)
{
	unsigned char *b = (unsigned char *)t->data;
	if (oq_dtype_bits(t->dtype) == 16) {
		b[2 * i] = (unsigned char)(v & 0xff);
		b[2 * i + 1] = (unsigned char)((v >> 8) & 0xff);
	} else {
		b[i] = (unsigned char)(v & 0xff);
	}
}

/*
 * Runtime-aware: the float constant operand k of an Add / Mul whose other
 * input reads one of our DQs and whose output has its Q becomes
 * DequantizeLinear(k_q) on the activation's type, per tensor, so ONNX
 * Runtime forms QLinearAdd / QLinearMul (its selector wants a DQ on every
 * input). A scalar is exact (k_q = 1 or 0 and scale |k|: the DQ gives k);
 * a tensor takes asymmetric parameters on [min(0, min k), max(0, max k)].
 * One quantized copy per constant value (cdq), shared by its readers.
 */
static int quantize_const_operands(qctx *c)
{
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		const oq_tensor *k;
		oq_value *kv, *dqv = NULL, *in[3];
		oq_tensor *kq = NULL, *zt = NULL, *st = NULL;
		char *base = NULL, *dqn = NULL;
		int dt, ki, rc = OQ_ENOMEM;
		int64_t qmin, qmax, zp;
		float scale;

		if (n->dead || c->fold[i] || !c->info[i] || !c->info[i]->ort || n->n_inputs != 2 ||
		    !(n->op == OQ_OP_Add || n->op == OQ_OP_Mul) || !n->outputs[0] ||
		    n->outputs[0]->index >= c->nv || !c->q[n->outputs[0]->index].set)
			continue;
		ki = oq_value_const(c->g, n->inputs[1]) ? 1 : 0;
		kv = n->inputs[ki];
		k = oq_value_const(c->g, kv);
		if (!k || k->dtype != OQ_DT_FLOAT || !(c->qin[i] >> (1 - ki) & 1u) || kv->index >= c->nv)
			continue;
		dt = c->q[n->outputs[0]->index].dtype;
		if (oq_qtype_is_fp8(dt) || !oq_qrange(dt, 0, &qmin, &qmax))
			continue;
		if (c->cdq[kv->index]) {
			n->inputs[ki] = c->cdq[kv->index];
			continue;
		}
		if (!(kq = oq_tensor_new(dt, k->rank, k->dims)))
			goto fail;
		if (k->nelem == 1) {
			double v = oq_tensor_get(k, 0);
			int64_t q = v == 0 ? 0 : v > 0 || qmin < 0 ? 1 : 0;
			zp = v < 0 && qmin >= 0 ? 1 : 0;
			scale = v == 0 ? 1.0f : (float)fabs(v);
			if (v < 0 && qmin < 0)
				q = -1;
			put_int(kq, 0, q);
		} else {
			double lo = 0, hi = 0;
			for (size_t e = 0; e < k->nelem; e++) {
				double v = oq_tensor_get(k, e);
				lo = fmin(lo, v);
				hi = fmax(hi, v);
			}
			if (!isfinite(lo) || !isfinite(hi) || oq_qparams(lo, hi, dt, OQ_QP_ASYM, 0, &scale, &zp)) {
				oq_tensor_free(kq);
				continue;
			}
			for (size_t e = 0; e < k->nelem; e++)
				put_int(kq, e, oq_quantize_value((float)oq_tensor_get(k, e), scale, zp, qmin, qmax));
		}
		if (!(st = oq_tensor_from_floats(0, NULL, &scale)) || !(zt = scalar_zp(dt, zp)) ||
		    !(base = cat(kv->name, "_quantized")) || !(dqn = cat(kv->name, "_DequantizeLinear")))
			goto fail;
		in[0] = oq_graph_add_init(c->g, base, kq);
		kq = NULL;
		in[1] = in[0] ? oq_graph_add_init(c->g, base, st) : NULL;
		st = NULL;
		in[2] = in[1] ? oq_graph_add_init(c->g, base, zt) : NULL;
		zt = NULL;
		free(base);
		base = cat(kv->name, "_DequantizeLinear_Output");
		if (!in[2] || !base || !(dqv = oq_graph_new_value(c->g, base)))
			goto fail;
		free(base);
		base = NULL;
		{
			char *un = node_name(c, dqn);
			oq_node *dq = un ? add_named(c, "DequantizeLinear", un) : NULL;
			free(un);
			if (!dq || oq_node_set_inputs(dq, in, 3) || oq_node_set_outputs(dq, &dqv, 1))
				goto fail;
		}
		free(dqn);
		c->cdq[kv->index] = dqv;
		n->inputs[ki] = dqv;
		c->n_consts++;
		continue;
fail:
		oq_tensor_free(kq);
		oq_tensor_free(st);
		oq_tensor_free(zt);
		free(base);
		free(dqn);
		return oq_err(c->d, rc, "quantize: out of memory");
	}
	return OQ_OK;
}

/*
 * ORT profile: ONNX Runtime's QDQ selectors take a unit with float8 data
 * into an 8-bit-only kernel and the model no longer loads
 * (oq_ort_fuses_float8), so such a node reads its first input in float
 * instead (the DequantizeLinear's source, before its QuantizeLinear): no
 * selector matches a unit with an input not from a DequantizeLinear. Q/DQ
 * nodes left without readers go. Repeated until no unit matches.
 */
/* A Q or DQ node of ours on float8 (its zero point's type). */
static int fp8_qdq(const qctx *c, const oq_node *n, oq_op op)
{
	const oq_tensor *z;
	return n && oq_node_is(n, op) && n->n_inputs >= 3 && (z = oq_value_const(c->g, n->inputs[2])) &&
	       z->dtype == OQ_DT_FLOAT8E4M3FN;
}

/* Ops ONNX Runtime moves Q/DQ across (qdq_propagation.cc), onto float8 data too. */
static int propagates(const oq_node *n)
{
	return (oq_node_is(n, OQ_OP_MaxPool) && n->opset >= 12) || oq_node_is(n, OQ_OP_Reshape) ||
	       oq_node_is(n, OQ_OP_Transpose) || oq_node_is(n, OQ_OP_Squeeze) || oq_node_is(n, OQ_OP_Unsqueeze) ||
	       oq_node_is(n, OQ_OP_Slice);
}

static int ort_float8_units(qctx *c)
{
	for (int round = 0; round < 64; round++) {
		size_t broken = 0;
		if (oq_graph_rebuild_uses(c->g))
			return oq_err(c->d, OQ_ENOMEM, "quantize: out of memory");
		for (size_t i = 0; i < c->g->n_nodes; i++) {
			oq_node *n = c->g->nodes[i], *dq, *q;
			oq_value *v = n->n_outputs ? n->outputs[0] : NULL;
			if (n->dead)
				continue;
			/* ORT would carry a float8 Q past a data-movement op: its readers take v itself */
			for (size_t u = 0; v && propagates(n) && u < v->n_uses; u++) {
				oq_node *qn = v->uses[u].node;
				oq_value *qv = qn->n_outputs ? qn->outputs[0] : NULL;
				if (!fp8_qdq(c, qn, OQ_OP_QuantizeLinear) || !qv)
					continue;
				for (size_t k = 0; k < qv->n_uses; k++) {
					oq_node *d = qv->uses[k].node;
					oq_value *dv = d->n_outputs ? d->outputs[0] : NULL;
					if (!fp8_qdq(c, d, OQ_OP_DequantizeLinear) || !dv || (dv->flags & OQ_V_OUTPUT))
						continue;
					for (size_t r = 0; r < dv->n_uses; r++) {
						dv->uses[r].node->inputs[dv->uses[r].index] = v;
						broken++;
					}
				}
			}
			/* a fused float8 unit (float8 data or weight) reads its data input in float; a
			 * data-movement op its float8 input */
			if (!n->n_inputs || !n->inputs[0] || !(dq = n->inputs[0]->producer) ||
			    !(oq_ort_fuses_float8(c->g, n) ? oq_node_is(dq, OQ_OP_DequantizeLinear)
							    : propagates(n) && fp8_qdq(c, dq, OQ_OP_DequantizeLinear)) ||
			    !dq->inputs[0] || !(q = dq->inputs[0]->producer) || !oq_node_is(q, OQ_OP_QuantizeLinear))
				continue;
			n->inputs[0] = q->inputs[0];
			broken++;
		}
		if (!broken)
			break;
		if (c->o->log)
			fprintf(c->o->log, "quantize: %zu float8 units ONNX Runtime would fuse into 8-bit kernels read "
				"their input in float\n", broken);
		/* readerless DQs, then Qs */
		for (int pass = 0; pass < 2; pass++) {
			if (oq_graph_rebuild_uses(c->g))
				return oq_err(c->d, OQ_ENOMEM, "quantize: out of memory");
			for (size_t i = 0; i < c->g->n_nodes; i++) {
				oq_node *n = c->g->nodes[i];
				oq_value *v = n->n_outputs ? n->outputs[0] : NULL;
				if (!n->dead && v && !v->n_uses && !(v->flags & OQ_V_OUTPUT) &&
				    oq_node_is(n, pass ? OQ_OP_QuantizeLinear : OQ_OP_DequantizeLinear))
					n->dead = 1;
			}
		}
	}
	return OQ_OK;
}

/* TRT: a dedicated pair on every quantized input of every selected node. */
static int insert_trt(qctx *c)
{
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		const opinfo *f = c->info[i];
		if (!f || n->dead)
			continue;
		for (size_t k = 0; k < n->n_inputs; k++) {
			oq_value *v = n->inputs[k], *dq;
			if (!is_data(f, k) || !v || v->index >= c->nv || v->graph != c->g || !c->q[v->index].set ||
			    !eligible(c, v))
				continue;
			if (!(dq = add_pair(c, v, v, NULL)))
				return oq_err(c->d, OQ_ENOMEM, "quantize: out of memory");
			n->inputs[k] = dq;
		}
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ checks */

static int needs21(int dtype)
{
	return dtype == OQ_DT_INT4 || dtype == OQ_DT_UINT4 || dtype == OQ_DT_INT16 || dtype == OQ_DT_UINT16;
}

static int needs19(int dtype)
{
	return oq_qtype_is_fp8(dtype);
}

/* Raises *need to n (with the reason) when it is higher. */
static void want(int64_t *need, const char **why, int64_t n, const char *w)
{
	if (n > *need) {
		*need = n;
		*why = w;
	}
}

int64_t oq_quantize_opset_need(const oq_opts *o, const char **why)
{
	int trt = o->profile == OQ_PROFILE_TRT;
	int64_t need = 10;

	*why = "QuantizeLinear/DequantizeLinear";
	if (o->granularity == OQ_GRAN_CHANNEL || trt)
		want(&need, why, 13, "per-channel weights");
	if (o->granularity == OQ_GRAN_BLOCK)
		want(&need, why, 21, "blocked weights");
	if (needs19(o->act_type))
		want(&need, why, 19, "float8e4m3fn activations");
	if (needs19(o->weight_type))
		want(&need, why, 19, "float8e4m3fn weights");
	if (!trt && needs21(o->act_type))
		want(&need, why, 21, "16-bit activations");
	if (!trt && needs21(o->weight_type))
		want(&need, why, 21, "4/16-bit weights");
	for (size_t i = 0; i < o->n_overrides; i++) {
		const oq_override *v = &o->overrides[i];
		if (needs21(v->dtype) || v->granularity == OQ_GRAN_BLOCK)
			want(&need, why, 21, "overrides with 4/16-bit types or blocks");
		if (needs19(v->dtype))
			want(&need, why, 19, "overrides with float8e4m3fn");
		if (v->granularity == OQ_GRAN_CHANNEL)
			want(&need, why, 13, "per-channel weights");
	}
	return need;
}

/* OQ_EUNSUP naming the feature when the model's opset is older than the options need. */
static int check_opset(qctx *c)
{
	int64_t have = c->g->model ? oq_model_opset(c->g->model, "") : 0;
	const char *why;
	int64_t need = oq_quantize_opset_need(c->o, &why);

	if (have < need)
		return oq_err(c->d, OQ_EUNSUP, "quantize: %s need opset %lld but the model has opset %lld: "
			      "run upgrade-opset (--opset %lld)", why, (long long)need, (long long)have,
			      (long long)need);
	return OQ_OK;
}

/* ------------------------------------------------------------ entry */

static void ctx_free_needs(qctx *c)
{
	free(c->info);
	free(c->need);
	free(c->fold);
	free(c->keep);
}

int oq_quantize_range_needs(oq_graph *g, const oq_opts *o, uint8_t *need, oq_diag *d)
{
	qctx c;
	int rc;

	memset(need, 0, g->n_values);
	if (o->weight_only || g->parent)
		return OQ_OK;
	memset(&c, 0, sizeof c);
	c.g = g;
	c.o = o;
	c.d = d;
	c.trt = o->profile == OQ_PROFILE_TRT;
	c.rt = oq_runtime_aware(o);
	if ((rc = check_lists(&c)))
		return rc;
	c.nv = g->n_values;
	c.nn = g->n_nodes;
	c.info = oq_calloc(c.nn + 1, sizeof *c.info);
	c.need = oq_calloc(c.nv + 1, 1);
	c.fold = oq_calloc(c.nn + 1, sizeof *c.fold);
	c.keep = oq_calloc(c.nv + 1, 1);
	if (!c.info || !c.need || !c.fold || !c.keep) {
		ctx_free_needs(&c);
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	}
	(void)oq_decision_safe_values(g, c.keep, NULL);
	/* the pass' selection and wanted values (drop_activations moves a folded activation's
	 * output to the producer but does not change which values are wanted) */
	select_nodes(&c);
	mark_needed(&c);
	for (size_t i = 0; i < c.nv; i++) {
		const oq_value *v = g->values[i];
		const oq_node *p = v->producer;
		const opinfo *f = p && p->index < c.nn && g->nodes[p->index] == p ? c.info[p->index] : NULL;
		const oq_override *t = oq_qc_tovr(&c, v->name), *n = oq_qc_novr(&c, oq_quantize_grid_node(o, v));
		if (!c.need[i])
			continue;
		/* own_qp's fixed parameters and ranges, and value_qp's shared ones, need no range */
		if ((t && (t->has_qparams || t->has_range)) || (n && (n->has_qparams || n->has_range)))
			continue;
		if (f && f->kind == K_SOFTMAX)
			continue;
		if (p && c.fold[p->index]) /* parameters from the input's (mark_needed) */
			continue;
		if (f && f->kind == K_SHARE && p->n_inputs && p->inputs[0] && p->inputs[0]->index < c.nv &&
		    c.need[p->inputs[0]->index] && !overridden(&c, v) && !oq_qc_novr(&c, p))
			continue;
		need[i] = 1;
	}
	ctx_free_needs(&c);
	return OQ_OK;
}

static void ctx_free(qctx *c)
{
	free(c->info);
	free(c->need);
	free(c->q);
	free(c->s_init);
	free(c->z_init);
	free(c->in_scale);
	free(c->qin);
	free(c->fold);
	free(c->qout);
	free(c->cdq);
	free(c->bound_lo);
	free(c->bound_hi);
	free(c->keep);
	oq_nameset_free(&c->node_names);
}

/* Counts over the graphs one run of the pass rewrote. */
typedef struct qsum {
	size_t n_pairs, n_weights, n_acts, n_norange, n_folded, n_consts;
} qsum;

/*
 * The pass on one graph: the main graph (main NULL; checks the lists), or an If/Loop/Scan body
 * with the main graph's --include reading (main). Adds its counts to *sum.
 */
static int quantize_graph(oq_graph *g, const oq_opts *o, const qctx *main, qsum *sum, oq_diag *d)
{
	qctx c;
	int rc;

	memset(&c, 0, sizeof c);
	c.g = g;
	c.o = o;
	c.d = d;
	c.trt = o->profile == OQ_PROFILE_TRT;
	c.rt = oq_runtime_aware(o);
	if (main) {
		c.inc_nodes = main->inc_nodes;
		c.inc_tensors = main->inc_tensors;
	} else if ((rc = check_opset(&c)) || (rc = check_lists(&c))) {
		return rc;
	}
	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "quantize: out of memory");
	c.nv = g->n_values;
	c.nn = g->n_nodes;
	c.info = oq_calloc(c.nn + 1, sizeof *c.info);
	c.in_scale = oq_calloc(c.nn + 1, sizeof *c.in_scale);
	c.need = oq_calloc(c.nv + 1, 1);
	c.keep = oq_calloc(c.nv + 1, 1);
	c.q = oq_calloc(c.nv + 1, sizeof *c.q);
	c.s_init = oq_calloc(c.nv + 1, sizeof *c.s_init);
	c.z_init = oq_calloc(c.nv + 1, sizeof *c.z_init);
	c.qin = oq_calloc(c.nn + 1, sizeof *c.qin);
	c.fold = oq_calloc(c.nn + 1, sizeof *c.fold);
	c.qout = oq_calloc(c.nv + 1, sizeof *c.qout);
	c.cdq = oq_calloc(c.nv + 1, sizeof *c.cdq);
	c.bound_lo = oq_calloc(c.nv + 1, sizeof *c.bound_lo);
	c.bound_hi = oq_calloc(c.nv + 1, sizeof *c.bound_hi);
	if (!c.keep || !c.bound_lo || !c.bound_hi || !c.info || !c.in_scale || !c.need || !c.q ||
	    !c.s_init || !c.z_init || !c.qin || !c.fold || !c.qout || !c.cdq) {
		rc = oq_err(d, OQ_ENOMEM, "quantize: out of memory");
		goto out;
	}
	if ((c.n_kept = oq_decision_safe_values(g, c.keep, o->log)) && o->log)
		fprintf(o->log, "quantize: %zu tensors kept float: comparisons and selections decide on them\n",
			c.n_kept);
	select_nodes(&c);
	if (c.rt && (rc = input_bounds(&c)))
		goto out;
	if ((rc = drop_activations(&c)))
		goto out;
	mark_needed(&c);
	if ((rc = compute_params(&c)))
		goto out;
	if ((rc = c.trt ? insert_trt(&c) : insert_ort(&c)))
		goto out;
	if (c.rt && (rc = quantize_const_operands(&c)))
		goto out;
	if ((rc = oq_qc_quantize_weights(&c)))
		goto out;
	if (!c.trt && (rc = ort_float8_units(&c)))
		goto out;
	if ((rc = oq_graph_sweep(g))) {
		rc = oq_err(d, rc, "quantize: out of memory");
		goto out;
	}
	sum->n_pairs += c.n_pairs;
	sum->n_weights += c.n_weights;
	sum->n_acts += c.n_acts;
	sum->n_norange += c.n_norange;
	sum->n_folded += c.n_folded;
	sum->n_consts += c.n_consts;
out:
	ctx_free(&c);
	return rc;
}

int oq_quantize_body_observed(const oq_ranges *r, const oq_graph *b)
{
	for (size_t i = 0; i < b->n_values; i++)
		if (!(b->values[i]->flags & OQ_V_OUTER) && oq_ranges_find(r, b->values[i]->name))
			return 1;
	return 0;
}

/* Body b's Conv / ConvTranspose / Gemm / MatMul weights and biases captured from an enclosing
 * graph's initializer become b's own (oq_weight_localize). */
static int localize_weights(oq_graph *b, oq_diag *d)
{
	for (size_t i = 0; i < b->n_nodes; i++) {
		oq_node *n = b->nodes[i];
		const opinfo *f = find_op(n);
		int rc;
		if (f && ((f->w >= 0 && (rc = oq_weight_localize(b, n, f->w, d))) ||
			  (f->b >= 0 && (rc = oq_weight_localize(b, n, f->b, d)))))
			return rc;
	}
	return OQ_OK;
}

/* Walk state of the bodies. */
typedef struct bodies {
	const oq_opts *o;
	const qctx *main;   /* the main graph's --include reading */
	qsum *sum;
	oq_diag *d;
	size_t n_float;     /* bodies left float: never ran during calibration */
} bodies;

/* The pass on body b (owned by node owner), then on its own bodies. */
static int quantize_body(oq_graph *b, oq_node *owner, void *ctx)
{
	bodies *x = ctx;
	int rc;

	(void)owner;
	if (x->o->ranges && !oq_quantize_body_observed(x->o->ranges, b)) {
		x->n_float++; /* the pipeline's summary names it */
		return OQ_OK;
	}
	/* b's own bodies may add a QuantizeLinear to b (outer_q): b is sorted after them (the
	 * driver sorts the main graph only) */
	if ((rc = localize_weights(b, x->d)) || (rc = quantize_graph(b, x->o, x->main, x->sum, x->d)) ||
	    (rc = oq_graph_each_subgraph(b, quantize_body, ctx)) || (rc = oq_graph_toposort(b, x->d)))
		return rc;
	(void)oq_graph_drop_unused_inits(b);
	return OQ_OK;
}

int oq_pass_quantize(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	qsum sum;
	qctx lists;
	bodies x;
	int rc;

	*changed = 0;
	if (g->parent)
		return OQ_OK;
	if (o->weight_only)
		return oq_quantize_weight_only(g, o, d, changed);
	memset(&sum, 0, sizeof sum);
	if ((rc = quantize_graph(g, o, NULL, &sum, d)))
		return rc;
	memset(&lists, 0, sizeof lists);
	lists.g = g;
	lists.o = o;
	lists.d = d;
	if ((rc = check_lists(&lists)))
		return rc;
	x.o = o;
	x.main = &lists;
	x.sum = &sum;
	x.d = d;
	x.n_float = 0;
	if ((rc = oq_graph_each_subgraph(g, quantize_body, &x)))
		return rc;
	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "quantize: out of memory");
	*changed = sum.n_pairs + sum.n_weights + sum.n_acts > 0;
	if (o->log)
		fprintf(o->log, "quantize: %zu Q/DQ pairs, %zu weights, %zu activations folded, %zu tensors "
			"without a range (%s profile)\n", sum.n_pairs, sum.n_weights, sum.n_acts, sum.n_norange,
			o->profile == OQ_PROFILE_TRT ? "TRT" : "ORT");
	if (o->log && oq_runtime_aware(o))
		fprintf(o->log, "quantize: %zu Mul/Div by a constant folded into a DequantizeLinear scale, %zu "
			"constant operands of Add/Mul quantized\n", sum.n_folded, sum.n_consts);
	if (o->log && x.n_float)
		fprintf(o->log, "quantize: %zu If/Loop/Scan bodies kept float: they never ran during "
			"calibration\n", x.n_float);
	return OQ_OK;
}

int oq_quantize_weight_plans(oq_graph *g, const oq_opts *o, oq_wplan **out, size_t *n_out, oq_diag *d)
{
	qctx c;
	oq_wplan *p;
	size_t n = 0;
	int rc;

	*out = NULL;
	*n_out = 0;
	memset(&c, 0, sizeof c);
	c.g = g;
	c.o = o;
	c.d = d;
	c.trt = o->profile == OQ_PROFILE_TRT;
	c.rt = oq_runtime_aware(o);
	if (o->weight_only || g->parent)
		return OQ_OK;
	if ((rc = check_lists(&c)))
		return rc;
	if (!(p = oq_calloc(g->n_nodes ? g->n_nodes : 1, sizeof *p)))
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *nd = g->nodes[i];
		const opinfo *f = select_one(&c, nd);
		int ok;
		if ((rc = oq_qc_weight_of(&c, nd, f, NULL, &p[n].spec, &ok))) {
			free(p);
			return rc;
		}
		if (!ok)
			continue;
		p[n].node = nd;
		p[n].w_idx = f->w;
		p[n].b_idx = f->b;
		n++;
	}
	*out = p;
	*n_out = n;
	return OQ_OK;
}
