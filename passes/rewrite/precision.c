/*
 * precision.c - a model's high-precision type: widening 16-bit float
 * models to float32 and narrowing float32 ones to float16 / bfloat16 (see
 * precision.h).
 *
 * Widen (exact: every float16 / bfloat16 value is a float32 value):
 *   initializer / attribute tensor t (16-bit)   ==>  float32 t
 *   Cast(to=16-bit), RandomX / EyeLike / Bernoulli dtype=16-bit,
 *   DequantizeLinear output_dtype=16-bit        ==>  the same with float32
 *   declared type 16-bit (value_info, subgraph inputs/outputs) ==> float32
 *   main graph input x declared 16-bit          ==>  readers read Cast(x, to=float)
 *   main graph output y declared 16-bit         ==>  producer writes y_f32; y = Cast(y_f32, to=16-bit)
 *
 * Narrow to L (float16 / bfloat16), after the value types are inferred
 * (infer: declared, initializer, or from the op's rule): every
 * float32 value becomes L except main graph inputs and outputs (they keep
 * their declared types) and what the ops float16 converters block read and
 * write, and a Concat reading a DequantizeLinear output (blocked(): they
 * run in float32); a constant (initializer or
 * Constant) becomes L when some reader wants it so. A reader wanting the
 * other type gets a Cast (one per value and type):
 *   blocked op    its float inputs float32
 *   Cast, Shape, Size, CastLike's target: any type
 *   QuantizeLinear x and scale, DequantizeLinear scale: L
 *   any other op  its float inputs L (its outputs are L)
 * A main graph output computed in L gets y = Cast(y_L, to=float). Then:
 * Cast(to=float) writing L becomes Cast(to=L) (likewise Constant values,
 * ConstantOfShape values, dtype attributes); initializers convert (float16:
 * beyond +-65504 saturated; a Q/DQ scale never rounds to 0 but to the
 * smallest subnormal); DequantizeLinear(int32 initializer, scale) writing L
 * (a bias) becomes the L initializer of its values, q * scale in double,
 * rounded once, as a bias scale (input scale x weight scale) is often
 * below float16's normal range; a Cast whose input already has its target
 * type goes. Subgraphs follow the same rules.
 */
#include "passes/rewrite/precision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/kernels/half.h"

static int low(int dt)
{
	return dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16;
}

/* Attributes naming an element type an op produces (besides Cast's `to`). */
static const char *dtype_attr(const oq_node *n)
{
	switch (n->op) {
	case OQ_OP_RandomNormal: case OQ_OP_RandomUniform: case OQ_OP_RandomNormalLike:
	case OQ_OP_RandomUniformLike: case OQ_OP_EyeLike: case OQ_OP_Bernoulli:
		return "dtype";
	case OQ_OP_DequantizeLinear:
		return "output_dtype";
	case OQ_OP_Cast:
		return "to";
	default:
		return NULL;
	}
}

/* Every graph of m, main graph first (depth first). */
typedef struct graphs {
	oq_graph **g;
	size_t n, cap;
} graphs;

static int add_graph(oq_graph *sub, oq_node *owner, void *ctx)
{
	graphs *gs = ctx;
	(void)owner;
	if (oq_grow(&gs->g, &gs->cap, gs->n + 1, sizeof *gs->g))
		return OQ_ENOMEM;
	gs->g[gs->n++] = sub;
	return oq_graph_each_subgraph(sub, add_graph, gs);
}

static int all_graphs(const oq_model *m, graphs *gs, oq_diag *d)
{
	memset(gs, 0, sizeof *gs);
	if (add_graph(m->graph, NULL, gs)) {
		free(gs->g);
		return oq_err(d, OQ_ENOMEM, "precision: out of memory");
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ of */

static void note(int dt, int *seen)
{
	if (dt == OQ_DT_FLOAT16)
		*seen |= 1;
	else if (dt == OQ_DT_BFLOAT16)
		*seen |= 2;
}

int oq_precision_of(const oq_model *m, int *dtype, oq_diag *d)
{
	graphs gs;
	int seen = 0, rc;

	if ((rc = all_graphs(m, &gs, d)))
		return rc;
	for (size_t k = 0; k < gs.n; k++) {
		const oq_graph *g = gs.g[k];
		for (size_t i = 0; i < g->n_values; i++) {
			const oq_value *v = g->values[i];
			if (v->init)
				note(v->init->dtype, &seen);
			if (v->type.kind == OQ_TYPE_TENSOR)
				note(v->type.dtype, &seen);
		}
		for (size_t i = 0; i < g->n_nodes; i++) {
			const oq_node *n = g->nodes[i];
			const char *da = dtype_attr(n);
			for (size_t a = 0; a < n->n_attrs; a++) {
				if (n->attrs[a].type == OQ_ATTR_TENSOR && n->attrs[a].t)
					note(n->attrs[a].t->dtype, &seen);
				if (da && n->attrs[a].type == OQ_ATTR_INT && !strcmp(n->attrs[a].name, da))
					note((int)n->attrs[a].i, &seen);
			}
		}
	}
	free(gs.g);
	if (seen == 3)
		return oq_err(d, OQ_EUNSUP, "precision: the model computes in both float16 and bfloat16; onnxq "
			      "supports one 16-bit float type per model");
	*dtype = seen == 1 ? OQ_DT_FLOAT16 : seen == 2 ? OQ_DT_BFLOAT16 : OQ_DT_FLOAT;
	return OQ_OK;
}

/* ------------------------------------------------------------ tensors */

/*
 * t's values as a new tensor of dtype `to` (float32, float16 or bfloat16),
 * named like t. scale: a Q/DQ scale, which must not round to 0. NULL when
 * out of memory.
 */
static oq_tensor *convert(const oq_tensor *t, int to, int scale)
{
	float *f = oq_tensor_to_floats(t);
	oq_tensor *r = f ? oq_tensor_new(to, t->rank, t->dims) : NULL;

	if (!r) {
		free(f);
		return NULL;
	}
	free(r->name);
	if (!(r->name = oq_strdup(t->name ? t->name : ""))) {
		free(f);
		oq_tensor_free(r);
		return NULL;
	}
	if (to == OQ_DT_FLOAT16)
		for (size_t i = 0; i < t->nelem; i++) {
			if (f[i] > 65504.0f)
				f[i] = 65504.0f;
			else if (f[i] < -65504.0f)
				f[i] = -65504.0f;
			if (scale && f[i] != 0 && fabsf(f[i]) < 0x1p-24f)
				f[i] = copysignf(0x1p-24f, f[i]);
		}
	if (to == OQ_DT_FLOAT)
		memcpy((void *)r->data, f, t->nelem * sizeof *f);
	else if (to == OQ_DT_FLOAT16)
		oq_float_to_half(f, (uint16_t *)r->data, t->nelem);
	else
		oq_float_to_bf16(f, (uint16_t *)r->data, t->nelem);
	free(f);
	return r;
}

/* v's initializer as dtype `to`. */
static int convert_init(oq_value *v, int to, int scale)
{
	oq_tensor *t = convert(v->init, to, scale);
	if (!t)
		return OQ_ENOMEM;
	oq_tensor_free(v->init);
	v->init = t;
	if (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype) {
		v->type.dtype = to;
		v->flags |= OQ_V_TYPE_EDITED;
	}
	return OQ_OK;
}

/* The declared element type of v set to `to` (shape kept). */
static void retype(oq_value *v, int to)
{
	if (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype && v->type.dtype != to) {
		v->type.dtype = to;
		v->flags |= OQ_V_TYPE_EDITED;
	}
}

/* Tensor attributes of n holding `from` values converted to `to`. */
static int convert_attrs(oq_node *n, int (*from)(int), int to)
{
	for (size_t a = 0; a < n->n_attrs; a++) {
		oq_attr *at = &n->attrs[a];
		if (at->type == OQ_ATTR_TENSOR && at->t && from(at->t->dtype)) {
			oq_tensor *t = convert(at->t, to, 0);
			if (!t)
				return OQ_ENOMEM;
			oq_tensor_free(at->t);
			at->t = t;
		}
		for (size_t k = 0; at->type == OQ_ATTR_TENSORS && k < at->n; k++)
			if (at->tensors[k] && from(at->tensors[k]->dtype)) {
				oq_tensor *t = convert(at->tensors[k], to, 0);
				if (!t)
					return OQ_ENOMEM;
				oq_tensor_free(at->tensors[k]);
				at->tensors[k] = t;
			}
	}
	return OQ_OK;
}

/* y = Cast(x, to) appended to g, y a new value named after base; NULL when out of memory. */
static oq_value *add_cast(oq_graph *g, oq_value *x, int to, const char *base)
{
	char name[256];
	oq_value *y;
	oq_node *n;

	snprintf(name, sizeof name, "%s_%s", base, to == OQ_DT_FLOAT ? "f32" : to == OQ_DT_FLOAT16 ? "f16" : "bf16");
	if (!(y = oq_graph_new_value(g, name)) || !(n = oq_graph_add_node(g, "Cast", "", y->name)) ||
	    oq_node_set_inputs(n, &x, 1) || oq_node_set_outputs(n, &y, 1) || oq_node_set_attr_int(n, "to", to))
		return NULL;
	return y;
}

/*
 * Graph output y of g (uses up to date) behind a Cast: its producer writes a
 * new value w, y = Cast(w, to), and g's readers of y read w. OQ_ENOMEM.
 */
static int cast_to_output(oq_graph *g, oq_value *y, int to)
{
	oq_node *p = y->producer, *c;
	oq_value *w;

	if (!(w = oq_graph_new_value(g, y->name)))
		return OQ_ENOMEM;
	p->outputs[y->producer_index] = w;
	if (!(c = oq_graph_add_node(g, "Cast", "", y->name)) || oq_node_set_inputs(c, &w, 1) ||
	    oq_node_set_outputs(c, &y, 1) || oq_node_set_attr_int(c, "to", to))
		return OQ_ENOMEM;
	for (size_t u = 0; u < y->n_uses; u++)
		if (y->uses[u].node->graph == g)
			y->uses[u].node->inputs[y->uses[u].index] = w;
	return OQ_OK;
}

/* ------------------------------------------------------------ widen */

static int is_float32(int dt)
{
	return dt == OQ_DT_FLOAT;
}

/* The main graph's inputs and outputs declared 16-bit: a Cast at the boundary. */
static int widen_io(oq_graph *g)
{
	for (size_t i = 0; i < g->n_inputs; i++) {
		oq_value *x = g->inputs[i], *y;
		int dt = x->type.dtype;
		if (x->init || x->type.kind != OQ_TYPE_TENSOR || !low(dt))
			continue;
		if (oq_graph_rebuild_uses(g) || !(y = add_cast(g, x, OQ_DT_FLOAT, x->name)))
			return OQ_ENOMEM;
		for (size_t u = 0; u < x->n_uses; u++)
			if (x->uses[u].node != y->producer && x->uses[u].node->graph == g)
				x->uses[u].node->inputs[x->uses[u].index] = y;
	}
	for (size_t i = 0; i < g->n_outputs; i++) {
		oq_value *y = g->outputs[i];
		if (oq_graph_rebuild_uses(g))
			return OQ_ENOMEM;
		/* the producer writes float32; y = Cast(it) */
		if (y->type.kind == OQ_TYPE_TENSOR && low(y->type.dtype) && y->producer &&
		    cast_to_output(g, y, y->type.dtype))
			return OQ_ENOMEM;
	}
	return oq_graph_rebuild_uses(g);
}

int oq_precision_widen(oq_model *m, int *changed, oq_diag *d)
{
	graphs gs;
	int rc = OQ_OK, dt;

	*changed = 0;
	if ((rc = oq_precision_of(m, &dt, d)) || dt == OQ_DT_FLOAT)
		return rc;
	if ((rc = all_graphs(m, &gs, d)))
		return rc;
	for (size_t k = 0; k < gs.n && !rc; k++) {
		oq_graph *g = gs.g[k];
		for (size_t i = 0; i < g->n_values && !rc; i++) {
			oq_value *v = g->values[i];
			if (v->init && low(v->init->dtype))
				rc = convert_init(v, OQ_DT_FLOAT, 0);
			/* the main graph's own inputs and outputs keep their types (widen_io) */
			if (v->type.kind == OQ_TYPE_TENSOR && low(v->type.dtype) &&
			    !(k == 0 && !v->init && (v->flags & (OQ_V_INPUT | OQ_V_OUTPUT))))
				retype(v, OQ_DT_FLOAT);
		}
		for (size_t i = 0; i < g->n_nodes && !rc; i++) {
			oq_node *n = g->nodes[i];
			const char *da = dtype_attr(n);
			const oq_attr *a = da ? oq_node_attr(n, da) : NULL;
			if ((rc = convert_attrs(n, low, OQ_DT_FLOAT)))
				break;
			if (a && a->type == OQ_ATTR_INT && low((int)a->i))
				rc = oq_node_set_attr_int(n, da, OQ_DT_FLOAT);
		}
	}
	if (!rc)
		rc = widen_io(m->graph);
	if (!rc)
		rc = oq_graph_toposort(m->graph, d);
	free(gs.g);
	*changed = 1;
	return rc == OQ_ENOMEM && !d->count ? oq_err(d, rc, "precision: out of memory") : rc;
}

/* ------------------------------------------------------------ dtype inference */

/* Element types of every value of every graph (0: unknown), by graph. */
typedef struct types {
	graphs gs;
	int **dt; /* per graph of gs: per value index */
} types;

static int *dts_of(const types *ty, const oq_graph *g)
{
	for (size_t k = 0; k < ty->gs.n; k++)
		if (ty->gs.g[k] == g)
			return ty->dt[k];
	return NULL;
}

static int dt_of(const types *ty, const oq_value *v)
{
	const int *dt;
	if (!v)
		return 0;
	if (v->flags & OQ_V_OUTER)
		v = oq_value_resolve((oq_value *)v);
	dt = v ? dts_of(ty, v->graph) : NULL;
	return dt && v->index < v->graph->n_values && v->graph->values[v->index] == v ? dt[v->index] : 0;
}

static int in_dt(const types *ty, const oq_node *n, size_t k)
{
	return k < n->n_inputs ? dt_of(ty, n->inputs[k]) : 0;
}

/* The first subgraph of n, or NULL. */
static const oq_graph *first_sub(const oq_node *n)
{
	for (size_t a = 0; a < n->n_attrs; a++) {
		if (n->attrs[a].g)
			return n->attrs[a].g;
		if (n->attrs[a].graphs && n->attrs[a].n)
			return n->attrs[a].graphs[0];
	}
	return NULL;
}

static int or_else(int a, int b)
{
	return a ? a : b;
}

/* The element type of output k of n by its op's rule (0 when unknown). */
static int rule_dt(const types *ty, const oq_node *n, size_t k)
{
	const oq_attr *a;
	const oq_graph *sub;

	switch (n->op) {
	case OQ_OP_Cast:
		return (int)oq_node_attr_int(n, "to", 0);
	case OQ_OP_CastLike:
		return in_dt(ty, n, 1);
	case OQ_OP_Shape: case OQ_OP_Size: case OQ_OP_NonZero: case OQ_OP_ArgMax: case OQ_OP_ArgMin:
	case OQ_OP_NonMaxSuppression:
		return OQ_DT_INT64;
	case OQ_OP_TopK:
		return k == 0 ? in_dt(ty, n, 0) : OQ_DT_INT64;
	case OQ_OP_Unique:
		return k == 0 ? in_dt(ty, n, 0) : OQ_DT_INT64;
	case OQ_OP_Equal: case OQ_OP_Less: case OQ_OP_Greater: case OQ_OP_LessOrEqual: case OQ_OP_GreaterOrEqual:
	case OQ_OP_And: case OQ_OP_Or: case OQ_OP_Xor: case OQ_OP_Not: case OQ_OP_IsNaN: case OQ_OP_IsInf:
		return OQ_DT_BOOL;
	case OQ_OP_QuantizeLinear:
		if (n->n_inputs > 2 && n->inputs[2])
			return in_dt(ty, n, 2);
		return or_else((int)oq_node_attr_int(n, "output_dtype", 0), OQ_DT_UINT8);
	case OQ_OP_DequantizeLinear:
		return or_else((int)oq_node_attr_int(n, "output_dtype", 0), in_dt(ty, n, 1));
	case OQ_OP_DynamicQuantizeLinear:
		return k == 1 ? OQ_DT_FLOAT : OQ_DT_UINT8;
	case OQ_OP_ConvInteger: case OQ_OP_MatMulInteger:
		return OQ_DT_INT32;
	case OQ_OP_QLinearConv: case OQ_OP_QLinearMatMul:
		return in_dt(ty, n, 7);
	case OQ_OP_Where:
		return in_dt(ty, n, 1);
	case OQ_OP_OneHot:
		return in_dt(ty, n, 2);
	case OQ_OP_Constant:
		for (size_t i = 0; i < n->n_attrs; i++) {
			const oq_attr *c = &n->attrs[i];
			if (c->type == OQ_ATTR_TENSOR && c->t)
				return c->t->dtype;
			if (c->type == OQ_ATTR_FLOAT || c->type == OQ_ATTR_FLOATS)
				return OQ_DT_FLOAT;
			if (c->type == OQ_ATTR_INT || c->type == OQ_ATTR_INTS)
				return OQ_DT_INT64;
		}
		return 0;
	case OQ_OP_ConstantOfShape:
		a = oq_node_attr(n, "value");
		return a && a->type == OQ_ATTR_TENSOR && a->t ? a->t->dtype : OQ_DT_FLOAT;
	case OQ_OP_RandomNormal: case OQ_OP_RandomUniform:
		return (int)oq_node_attr_int(n, "dtype", OQ_DT_FLOAT);
	case OQ_OP_RandomNormalLike: case OQ_OP_RandomUniformLike: case OQ_OP_EyeLike: case OQ_OP_Bernoulli:
		return or_else((int)oq_node_attr_int(n, "dtype", 0), in_dt(ty, n, 0));
	case OQ_OP_Multinomial:
		return (int)oq_node_attr_int(n, "dtype", OQ_DT_INT32);
	case OQ_OP_Loop:
		sub = first_sub(n);
		return sub && k + 1 < sub->n_outputs ? dt_of(ty, sub->outputs[k + 1]) : 0;
	case OQ_OP_If: case OQ_OP_Scan:
		sub = first_sub(n);
		return sub && k < sub->n_outputs ? dt_of(ty, sub->outputs[k]) : 0;
	default:
		if (n->op == OQ_OP_UNKNOWN)
			return 0;
		return in_dt(ty, n, 0);
	}
}

/* dt of every value: declared types and initializers first, then op rules until nothing changes. */
static int infer(const oq_model *m, types *ty, oq_diag *d)
{
	int rc, again = 1;

	memset(ty, 0, sizeof *ty);
	if ((rc = all_graphs(m, &ty->gs, d)))
		return rc;
	if (!(ty->dt = oq_calloc(ty->gs.n, sizeof *ty->dt)))
		return oq_err(d, OQ_ENOMEM, "precision: out of memory");
	for (size_t k = 0; k < ty->gs.n; k++) {
		const oq_graph *g = ty->gs.g[k];
		if (!(ty->dt[k] = oq_calloc(g->n_values + 1, sizeof **ty->dt)))
			return oq_err(d, OQ_ENOMEM, "precision: out of memory");
		for (size_t i = 0; i < g->n_values; i++) {
			const oq_value *v = g->values[i];
			if (v->init)
				ty->dt[k][i] = v->init->dtype;
			else if (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype)
				ty->dt[k][i] = v->type.dtype;
		}
	}
	for (int round = 0; again && round < 64; round++) {
		again = 0;
		for (size_t k = 0; k < ty->gs.n; k++) {
			const oq_graph *g = ty->gs.g[k];
			for (size_t i = 0; i < g->n_nodes; i++) {
				const oq_node *n = g->nodes[i];
				for (size_t o = 0; o < n->n_outputs; o++) {
					const oq_value *v = n->outputs[o];
					int t;
					if (!v || v->graph != g || ty->dt[k][v->index])
						continue;
					if ((t = rule_dt(ty, n, o))) {
						ty->dt[k][v->index] = t;
						again = 1;
					}
				}
			}
		}
	}
	return OQ_OK;
}

static void types_free(types *ty)
{
	for (size_t k = 0; ty->dt && k < ty->gs.n; k++)
		free(ty->dt[k]);
	free(ty->dt);
	free(ty->gs.g);
}

/* ------------------------------------------------------------ narrow */

/* A narrowing under way. */
typedef struct nctx {
	oq_model *m;
	int L;          /* the target type */
	types ty;
	int **tgt;      /* per graph of ty.gs, per value index: type it gets (0: left alone) */
	size_t *nv;     /* per graph: its values when tgt was made (later ones have no target) */
	const oq_node **qcat; /* quantized Concats (see blocked), found before any edit */
	size_t n_qcat;
	oq_diag *d;
} nctx;

/*
 * Ops float16 converters keep in float32 (onnxconverter-common's block list and the integer-
 * arithmetic ops, whose scales are float32 only), ops of other domains (types unknown), and a
 * Concat reading a DequantizeLinear output: ONNX Runtime (1.30, optimization level `extended` and
 * above) fuses DequantizeLinear -> Concat -> QuantizeLinear into com.microsoft::QLinearConcat
 * without checking the scales' type and then refuses the model, as QLinearConcat takes float32
 * scales only; the Casts around a float32 Concat keep the pattern from matching.
 */
static int blocked(const nctx *c, const oq_node *n)
{
	for (size_t i = 0; n->op == OQ_OP_Concat && i < c->n_qcat; i++)
		if (c->qcat[i] == n)
			return 1;
	if (n->op == OQ_OP_UNKNOWN || oq_domain_of(n->domain) != OQ_DOM_ONNX)
		return 1;
	switch (n->op) {
	case OQ_OP_Resize: case OQ_OP_Upsample: case OQ_OP_Range: case OQ_OP_TopK: case OQ_OP_NonMaxSuppression:
	case OQ_OP_RoiAlign: case OQ_OP_CumSum: case OQ_OP_Min: case OQ_OP_Max: case OQ_OP_QLinearConv:
	case OQ_OP_QLinearMatMul: case OQ_OP_ConvInteger: case OQ_OP_MatMulInteger: case OQ_OP_DynamicQuantizeLinear:
		return 1;
	default:
		return 0;
	}
}

/* The type input k of n wants when it is a float (0: any). */
static int slot_need(const nctx *c, const oq_node *n, size_t k, int L)
{
	if (blocked(c, n))
		return OQ_DT_FLOAT;
	switch (n->op) {
	case OQ_OP_Cast: case OQ_OP_Shape: case OQ_OP_Size: case OQ_OP_CastLike:
		return 0;
	case OQ_OP_DequantizeLinear:
		return k == 1 ? L : 0;
	default:
		return L;
	}
}

static int is_float(int dt)
{
	return dt == OQ_DT_FLOAT || low(dt);
}

static int tgt_of(const nctx *c, const oq_value *v)
{
	if (v && (v->flags & OQ_V_OUTER))
		v = oq_value_resolve((oq_value *)v);
	for (size_t k = 0; v && k < c->ty.gs.n; k++)
		if (c->ty.gs.g[k] == v->graph)
			return v->index < c->nv[k] && v->graph->values[v->index] == v ? c->tgt[k][v->index] : 0;
	return 0;
}

/* A main graph output computed in float32 by an op that will compute in L: the op writes a new
 * value, y = Cast(it, to=float). Before the types are inferred. */
static int split_outputs(nctx *c)
{
	oq_graph *g = c->m->graph;
	int rc;

	if ((rc = oq_graph_rebuild_uses(g)))
		return rc;
	for (size_t i = 0; i < g->n_outputs; i++) {
		oq_value *y = g->outputs[i];
		oq_node *p = y->producer;
		if (!p || dt_of(&c->ty, y) != OQ_DT_FLOAT || blocked(c, p) || p->op == OQ_OP_Cast || p->op == OQ_OP_CastLike)
			continue;
		if ((rc = cast_to_output(g, y, OQ_DT_FLOAT)) || (rc = oq_graph_rebuild_uses(g)))
			return rc;
	}
	return oq_graph_rebuild_uses(g);
}

/* tgt of every value (see the header comment). */
static int targets(nctx *c)
{
	if (!(c->tgt = oq_calloc(c->ty.gs.n, sizeof *c->tgt)) || !(c->nv = oq_calloc(c->ty.gs.n, sizeof *c->nv)))
		return OQ_ENOMEM;
	for (size_t k = 0; k < c->ty.gs.n; k++) {
		const oq_graph *g = c->ty.gs.g[k];
		c->nv[k] = g->n_values;
		if (!(c->tgt[k] = oq_calloc(g->n_values + 1, sizeof **c->tgt)))
			return OQ_ENOMEM;
		for (size_t i = 0; i < g->n_values; i++) {
			const oq_value *v = g->values[i];
			const oq_node *p = v->producer;
			int dt = c->ty.dt[k][i], t = c->L;
			if (!is_float(dt) || (v->flags & OQ_V_OUTER))
				continue;
			if (low(dt))
				t = dt;
			else if (k == 0 && ((v->flags & OQ_V_INPUT && !v->init) || (v->flags & OQ_V_OUTPUT)))
				t = dt; /* the main graph's inputs and outputs keep their declared types */
			else if (p && blocked(c, p))
				t = OQ_DT_FLOAT;
			else if (v->init || (p && p->op == OQ_OP_Constant)) {
				/* a constant: L when some reader wants L (or none reads it) */
				t = v->n_uses ? OQ_DT_FLOAT : c->L;
				for (size_t u = 0; u < v->n_uses; u++)
					if (slot_need(c, v->uses[u].node, (size_t)v->uses[u].index, c->L) == c->L)
						t = c->L;
			}
			c->tgt[k][i] = t;
		}
	}
	return OQ_OK;
}

/* Readers wanting another type than their input's target read a Cast of it (one per value and
 * type in each graph). */
typedef struct castkey {
	const oq_value *v;
	int to;
	oq_value *y;
} castkey;

static int insert_casts(nctx *c, size_t k)
{
	oq_graph *g = c->ty.gs.g[k];
	castkey *keys = NULL;
	size_t n_keys = 0, cap = 0, nn = g->n_nodes;
	int rc = OQ_OK;

	for (size_t i = 0; i < nn && !rc; i++) {
		oq_node *n = g->nodes[i];
		for (size_t s = 0; s < n->n_inputs && !rc; s++) {
			oq_value *v = n->inputs[s];
			int need = v ? slot_need(c, n, s, c->L) : 0, cur = tgt_of(c, v);
			size_t j;
			if (!need || !cur || need == cur || !is_float(dt_of(&c->ty, v)))
				continue;
			for (j = 0; j < n_keys && !(keys[j].v == v && keys[j].to == need); j++)
				;
			if (j == n_keys) {
				if (oq_grow(&keys, &cap, n_keys + 1, sizeof *keys)) {
					rc = OQ_ENOMEM;
					break;
				}
				keys[n_keys] = (castkey){v, need, add_cast(g, v, need, v->name)};
				if (!keys[n_keys++].y) {
					rc = OQ_ENOMEM;
					break;
				}
			}
			n->inputs[s] = keys[j].y;
		}
	}
	free(keys);
	return rc;
}

/* Initializers, declared types and the type attributes of ops writing L values become L. */
static int convert_graph(nctx *c, size_t k)
{
	oq_graph *g = c->ty.gs.g[k];
	int rc;

	for (size_t i = 0; i < c->nv[k]; i++) {
		oq_value *v = g->values[i];
		int scale = 0;
		if (c->tgt[k][i] != c->L || c->ty.dt[k][i] != OQ_DT_FLOAT)
			continue;
		for (size_t u = 0; u < v->n_uses; u++)
			scale |= (v->uses[u].node->op == OQ_OP_QuantizeLinear ||
				  v->uses[u].node->op == OQ_OP_DequantizeLinear) && v->uses[u].index == 1;
		if (v->init && (rc = convert_init(v, c->L, scale)))
			return rc;
		retype(v, c->L);
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		const char *da = dtype_attr(n);
		const oq_attr *a = da ? oq_node_attr(n, da) : NULL;
		int writes_low = 0;
		for (size_t o = 0; o < n->n_outputs; o++)
			writes_low |= n->outputs[o] && n->outputs[o]->index < c->nv[k] &&
				      g->values[n->outputs[o]->index] == n->outputs[o] && c->tgt[k][n->outputs[o]->index] == c->L &&
				      c->ty.dt[k][n->outputs[o]->index] == OQ_DT_FLOAT;
		if (!writes_low)
			continue;
		if ((n->op == OQ_OP_Constant || n->op == OQ_OP_ConstantOfShape) &&
		    (rc = convert_attrs(n, is_float32, c->L)))
			return rc;
		if (n->op == OQ_OP_Constant && (oq_node_attr(n, "value_float") || oq_node_attr(n, "value_floats"))) {
			/* value_float(s): a float32 tensor attribute instead, converted */
			const oq_attr *f = oq_node_attr(n, "value_float") ? oq_node_attr(n, "value_float")
									   : oq_node_attr(n, "value_floats");
			int64_t dim = f->type == OQ_ATTR_FLOATS ? (int64_t)f->n : 1;
			oq_tensor *t32 = oq_tensor_from_floats(f->type == OQ_ATTR_FLOATS ? 1 : 0, &dim,
							       f->type == OQ_ATTR_FLOATS ? f->floats : &f->f);
			oq_tensor *t = t32 ? convert(t32, c->L, 0) : NULL;
			oq_tensor_free(t32);
			if (!t)
				return OQ_ENOMEM;
			oq_node_del_attr(n, f->name);
			if ((rc = oq_node_set_attr_tensor(n, "value", t)))
				return rc;
		}
		if (n->op == OQ_OP_ConstantOfShape && !oq_node_attr(n, "value")) {
			oq_tensor *t = oq_tensor_new(c->L, 1, (const int64_t[]){1});
			if (!t || (rc = oq_node_set_attr_tensor(n, "value", t)))
				return OQ_ENOMEM;
		}
		if (da && (!a || (a->type == OQ_ATTR_INT && a->i == OQ_DT_FLOAT)) &&
		    (n->op == OQ_OP_Cast || n->op == OQ_OP_RandomNormal || n->op == OQ_OP_RandomUniform ||
		     (a && a->i == OQ_DT_FLOAT)) &&
		    (rc = oq_node_set_attr_int(n, da, c->L)))
			return rc;
	}
	return OQ_OK;
}

/*
 * y = DequantizeLinear(q int32 initializer, s [, zero]) with y in L (a
 * bias): y becomes an initializer, q * s (per tensor, or per element of a
 * 1-D q) in double, rounded to float32 (then to L by convert_graph: twice,
 * but float32 holds the product of an int32 and a scale exactly enough for
 * L). Runs before convert_graph, which would round s to L first. Other
 * shapes keep their DequantizeLinear.
 */
static int fold_biases(nctx *c, size_t k)
{
	oq_graph *g = c->ty.gs.g[k];
	int rc;

	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		oq_value *y = n->n_outputs == 1 ? n->outputs[0] : NULL, *q = n->n_inputs >= 2 ? n->inputs[0] : NULL;
		const oq_tensor *qt, *st, *zt = NULL;
		oq_value **ni;
		oq_tensor *t;
		float *f;
		if (n->op != OQ_OP_DequantizeLinear || n->dead || !y || !q || tgt_of(c, y) != c->L ||
		    !(qt = oq_value_const(g, q)) || qt->dtype != OQ_DT_INT32 || !(st = oq_value_const(g, n->inputs[1])) ||
		    (n->n_inputs > 2 && n->inputs[2] && !(zt = oq_value_const(g, n->inputs[2]))) ||
		    (y->flags & (OQ_V_OUTPUT | OQ_V_INPUT)) || oq_value_n_captures(y))
			continue;
		if (!(st->nelem == 1 || (qt->rank == 1 && st->nelem == qt->nelem)) || (zt && zt->nelem != st->nelem))
			continue;
		if (!(f = oq_calloc(qt->nelem + 1, sizeof *f)))
			return OQ_ENOMEM;
		for (size_t e = 0; e < qt->nelem; e++) {
			size_t j = st->nelem == 1 ? 0 : e;
			double z = zt ? oq_tensor_get(zt, j) : 0;
			f[e] = (float)((oq_tensor_get(qt, e) - z) * oq_tensor_get(st, j));
		}
		t = oq_tensor_from_floats(qt->rank, qt->dims, f);
		free(f);
		if (!t)
			return OQ_ENOMEM;
		free(t->name);
		if (!(t->name = oq_strdup(y->name)) || !(ni = realloc(g->inits, (g->n_inits + 1) * sizeof *ni))) {
			oq_tensor_free(t);
			return OQ_ENOMEM;
		}
		/* y becomes a float32 initializer (convert_graph makes it L); the DequantizeLinear goes */
		g->inits = ni;
		g->inits[g->n_inits++] = y;
		y->init = t;
		y->producer = NULL;
		n->dead = 1;
	}
	if ((rc = oq_graph_sweep(g)))
		return rc;
	(void)oq_graph_drop_unused_inits(g);
	return OQ_OK;
}

/* y = Cast(x, to) where x already has type `to`: readers read x (a graph output y: x's producer
 * writes y, when x has no other reader and is no graph input / output). */
static int drop_noop_casts(nctx *c, size_t k)
{
	oq_graph *g = c->ty.gs.g[k];
	int rc;

	if ((rc = oq_graph_rebuild_uses(g)))
		return rc;
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		oq_value *x, *y;
		int to, xt;
		if (n->op != OQ_OP_Cast || n->n_inputs != 1 || n->n_outputs != 1 || !(x = n->inputs[0]) ||
		    !(y = n->outputs[0]) || (y->flags & OQ_V_INPUT) || oq_value_n_captures(y))
			continue;
		to = (int)oq_node_attr_int(n, "to", 0);
		/* x's type now: its target where it has one, else what it was */
		xt = tgt_of(c, x);
		if (!xt)
			xt = x->type.kind == OQ_TYPE_TENSOR && x->type.dtype ? x->type.dtype : dt_of(&c->ty, x);
		if (!xt || xt != to)
			continue;
		if (y->flags & OQ_V_OUTPUT) {
			/* a graph output keeps its name: x's producer writes y when x has no other use */
			oq_node *p = x->producer;
			if (!p || p->graph != g || x->n_uses != 1 || (x->flags & (OQ_V_OUTPUT | OQ_V_INPUT | OQ_V_OUTER)) ||
			    oq_value_n_captures(x))
				continue;
			p->outputs[x->producer_index] = y;
			n->dead = 1;
			continue;
		}
		for (size_t u = 0; u < y->n_uses; u++)
			y->uses[u].node->inputs[y->uses[u].index] = x;
		n->dead = 1;
	}
	return oq_graph_sweep(g);
}

int oq_precision_narrow(oq_model *m, int dtype, oq_diag *d)
{
	nctx c;
	size_t cap_qcat = 0;
	int rc;

	memset(&c, 0, sizeof c);
	c.m = m;
	c.L = dtype;
	c.d = d;
	if ((rc = infer(m, &c.ty, d)))
		goto done;
	if (dtype != OQ_DT_FLOAT) {
		int64_t opset = oq_model_opset(m, "");
		for (size_t k = 0; k < c.ty.gs.n; k++)
			for (size_t i = 0; i < c.ty.gs.g[k]->n_nodes; i++) {
				const oq_node *n = c.ty.gs.g[k]->nodes[i];
				int qin = 0;
				for (size_t j = 0; n->op == OQ_OP_Concat && j < n->n_inputs; j++)
					qin |= n->inputs[j] && n->inputs[j]->producer &&
					       n->inputs[j]->producer->op == OQ_OP_DequantizeLinear;
				if (qin && oq_grow(&c.qcat, &cap_qcat, c.n_qcat + 1, sizeof *c.qcat)) {
					rc = oq_err(d, OQ_ENOMEM, "precision: out of memory");
					goto done;
				}
				if (qin)
					c.qcat[c.n_qcat++] = n;
				if ((n->op == OQ_OP_QuantizeLinear || n->op == OQ_OP_DequantizeLinear) && opset < 19) {
					rc = oq_err(d, OQ_EUNSUP,
						    "precision: node '%s' (%s): %s scales need opset 19 (the model has %lld); "
						    "quantize with --opset 19 or keep float32 (--high-precision float32)",
						    n->name, n->op_type, oq_dtype_name(dtype), (long long)opset);
					goto done;
				}
			}
		if ((rc = split_outputs(&c)))
			goto done;
		types_free(&c.ty);
		if ((rc = infer(m, &c.ty, d)))
			goto done;
	}
	if ((rc = targets(&c)))
		goto done;
	for (size_t k = 0; k < c.ty.gs.n && !rc && dtype != OQ_DT_FLOAT; k++)
		rc = insert_casts(&c, k);
	for (size_t k = 0; k < c.ty.gs.n && !rc && dtype != OQ_DT_FLOAT; k++)
		if (!(rc = oq_graph_rebuild_uses(c.ty.gs.g[k])))
			rc = fold_biases(&c, k);
	for (size_t k = 0; k < c.ty.gs.n && !rc && dtype != OQ_DT_FLOAT; k++)
		if (!(rc = oq_graph_rebuild_uses(c.ty.gs.g[k])))
			rc = convert_graph(&c, k);
	for (size_t k = 0; k < c.ty.gs.n && !rc; k++)
		rc = drop_noop_casts(&c, k);
	for (size_t k = c.ty.gs.n; k-- > 1 && !rc;)
		rc = oq_graph_toposort(c.ty.gs.g[k], d);
	if (!rc)
		rc = oq_graph_toposort(m->graph, d);
done:
	for (size_t k = 0; c.tgt && k < c.ty.gs.n; k++)
		free(c.tgt[k]);
	free(c.tgt);
	free(c.nv);
	free(c.qcat);
	types_free(&c.ty);
	return rc == OQ_ENOMEM && !d->count ? oq_err(d, rc, "precision: out of memory") : rc;
}
