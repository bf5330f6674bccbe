/*
 * upgrade_opset.c - pass `upgrade-opset`: raise the model's ai.onnx opset to
 * the one the requested quantization needs and convert every node whose
 * meaning changed on the way, so the upgraded model computes the same.
 *
 * Why: QuantizeLinear/DequantizeLinear need opset 10, per-axis scales 13,
 * block_size and int4/int16 types 21 (the ONNX operator changelog); PaddleOCR
 * exports are opset 9 and 11.
 *
 * Target: o->opset when given (never lower than the model: OQ_EUSAGE),
 * else 21 when the quantization needs int4/uint4/int16/uint16 or blocks,
 * else 13; a model already at or above it is left alone. ir_version is
 * raised to what the target needs (7 for 13-14, 8 for 15-18, 9 for 19-20,
 * 10 for 21). Only the ai.onnx domain changes; nodes in If/Loop/Scan bodies
 * are converted too (they share the model's opset import).
 *
 * Conversions, from opset F (the model's) to T (the target), following
 * onnx/docs/Changelog.md:
 *   any op             drop consumed_inputs (gone from every op since opset 6)
 *   BN/Dropout, F < 7  drop is_test;  BN F < 9: drop spatial (spatial=0 refused);
 *                      BN F < 14: unused extra (training) outputs dropped
 *   Add..Pow, F < 7    legacy broadcast: B aligned at `axis` gets trailing 1-dims
 *                      (initializer reshaped, else Reshape of B); Gemm: drop broadcast
 *   Concat, F < 4      axis defaults to 1: made explicit
 *   Reshape, F < 5     shape attribute -> int64 input
 *   Cast, F < 6        `to` string -> type number
 *   Upsample           -> Resize(X, "", scales) mode nearest|linear,
 *                      coordinate_transformation_mode=asymmetric, nearest_mode=floor
 *   Resize 10 -> 11+   Resize(X, scales) -> Resize(X, "", scales), same attributes as above
 *   Scatter -> ScatterElements (T >= 11)
 *   Slice, F < 10      starts/ends/axes attributes -> int64 inputs
 *   TopK, F < 10       k attribute -> int64 [1] input
 *   Clip, F < 11       min/max attributes -> scalar inputs of the input's type
 *   Pad, F < 11        pads (paddings) / value -> int64 pads input, scalar constant_value
 *   Dropout, F < 12    ratio attribute -> scalar input (mask used before 10: refused)
 *   Squeeze/Unsqueeze/ReduceSum, F < 13 <= T: axes attribute -> int64 input
 *   Split, F < 13 <= T: split attribute -> input; T >= 18 without it: num_outputs
 *   Reduce* (others), F < 18 <= T: axes attribute -> input
 *   Softmax/LogSoftmax/Hardmax, F < 13 <= T: the old ops flatten x to 2-D at
 *       `axis` (default 1) and normalize rows: softmax over all of x[.., axis:].
 *       The new op normalizes along one axis (default -1). When `axis` is the
 *       last one (axis = -1, or rank-1 with a known rank) the two agree and
 *       axis=-1 is set; otherwise
 *         y = Reshape(Softmax(Flatten(x, axis), axis=-1), Shape(x))
 *   GridSample, F < 20 <= T: mode bilinear/bicubic -> linear/cubic
 *   DFT, F < 20 <= T: axis attribute (default 1) -> int64 scalar input 2
 *   GroupNormalization, F < 21 <= T: per-group scale/bias initializers repeated
 *       per channel (channel count from the declared input shape)
 * Refused (OQ_EUNSUP naming the node): Scan 8, Tile < 6, Upsample < 7,
 * BN spatial=0, Resize tf_half_pixel_for_nn, experimental ops removed in 10,
 * and any case above whose needed shape or type is unknown.
 *
 * Every node is checked before anything changes, so a refusal leaves the
 * model untouched.
 */
#include "passes/pass.h"

#include <stdlib.h>
#include <string.h>

/* Highest target this pass knows the changes up to. */
#define MAX_TARGET 21

typedef struct cx {
	oq_model *m;     /* model being upgraded */
	int64_t from;    /* the model's ai.onnx opset */
	int64_t to;      /* target opset */
	int apply;       /* 0: only check convertibility; 1: rewrite */
	int sub_changed; /* a subgraph got new nodes (needs its own toposort) */
	oq_graph *rg;    /* graph whose value ranks `ranks` holds */
	int *ranks;      /* inferred rank per value index of rg (-1 unknown) */
	size_t n_ranks;  /* entries of ranks (values added later are not covered) */
	oq_diag *d;
} cx;

static int is_onnx(const oq_node *n)
{
	return oq_domain_of(n->domain) == OQ_DOM_ONNX;
}

static int op_is(const oq_node *n, const char *op)
{
	return strcmp(n->op_type, op) == 0;
}

static int refuse(cx *c, const oq_node *n, const char *why)
{
	return oq_err(c->d, OQ_EUNSUP,
		      "upgrade-opset: node '%s' (%s, opset %lld): cannot convert to opset %lld: %s; "
		      "try --opset %lld or re-export",
		      n->name, n->op_type, (long long)c->from, (long long)c->to, why, (long long)c->from);
}

static int nomem(cx *c)
{
	return oq_err(c->d, OQ_ENOMEM, "upgrade-opset: out of memory");
}

/* Declared element type of v (initializer or type info), 0 when unknown. */
static int value_dtype(oq_value *v)
{
	v = v ? oq_value_resolve(v) : NULL;
	if (!v)
		return 0;
	if (v->init)
		return v->init->dtype;
	if (v->type.kind == OQ_TYPE_TENSOR)
		return v->type.dtype;
	return 0;
}

/* Declared rank of v, -1 when unknown. */
static int decl_rank(oq_value *v)
{
	v = v ? oq_value_resolve(v) : NULL;
	if (!v)
		return -1;
	if (v->init)
		return v->init->rank;
	if (v->type.kind == OQ_TYPE_TENSOR)
		return v->type.rank;
	return -1;
}

/* Declared dim i of v, -1 when unknown. */
static int64_t value_dim(oq_value *v, int i)
{
	v = v ? oq_value_resolve(v) : NULL;
	if (!v || i < 0)
		return -1;
	if (v->init)
		return i < v->init->rank ? v->init->dims[i] : -1;
	if (v->type.kind == OQ_TYPE_TENSOR && i < v->type.rank)
		return v->type.dims[i].value;
	return -1;
}

/* Declared or inferred rank of v, -1 when unknown. */
static int value_rank(cx *c, oq_value *v)
{
	if (v && c->ranks && v->graph == c->rg && v->index < c->n_ranks)
		return c->ranks[v->index];
	return decl_rank(v);
}

/* Element count of an initializer input (a shape or axes list), -1 when not constant. */
static int64_t const_len(oq_node *n, size_t i)
{
	oq_value *v = i < n->n_inputs && n->inputs[i] ? oq_value_resolve(n->inputs[i]) : NULL;
	return v && v->init ? (int64_t)v->init->nelem : -1;
}

/* Length of the axes list (attribute, or constant input 1), -1 when unknown. */
static int64_t axes_len(oq_node *n)
{
	const oq_attr *a = oq_node_attr(n, "axes");
	if (a && a->type == OQ_ATTR_INTS)
		return (int64_t)a->n;
	return const_len(n, 1);
}

static const char *const same_rank[] = {
	"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu",
	"Softmax", "LogSoftmax", "Hardmax", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Erf",
	"Cast", "Dropout", "Identity", "BatchNormalization", "InstanceNormalization", "LayerNormalization",
	"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Transpose",
	"Slice", "Pad", "Resize", "Upsample", "LRN", "Floor", "Ceil", "Round", "Sign", "Not", "Softplus",
	"Softsign", "Mish", "Gelu", "CumSum", "DepthToSpace", "SpaceToDepth", "Tile", "Split", "Concat",
	"Sin", "Cos", "ThresholdedRelu", "Celu", "Shrink", "IsNaN", "IsInf", "LpNormalization",
	"MeanVarianceNormalization", "GroupNormalization", "TopK",
};
static const char *const bcast_rank[] = {
	"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Greater", "Less", "And",
	"Or", "Xor", "Where", "PRelu", "Mod", "GreaterOrEqual", "LessOrEqual", "BitShift",
};

static int in_list(const oq_node *n, const char *const *set, size_t count);

/* Integer j of a constant (initializer or Constant node) list input/attribute; 0 on success. */
static int const_int(oq_node *n, const char *attr, size_t input, size_t j, int64_t *out)
{
	const oq_attr *a = oq_node_attr(n, attr);
	oq_value *v;
	if (a && a->type == OQ_ATTR_INTS) {
		if (j >= a->n)
			return -1;
		*out = a->ints[j];
		return 0;
	}
	v = input < n->n_inputs && n->inputs[input] ? oq_value_resolve(n->inputs[input]) : NULL;
	if (!v || !v->init || j >= v->init->nelem)
		return -1;
	*out = oq_tensor_get_int(v->init, j);
	return 0;
}

/*
 * Length of a 1-D integer vector v (a shape being assembled, as exporters
 * do with Shape/Slice/Concat), -1 when not known statically.
 */
static int64_t vec_len(cx *c, oq_value *v, int depth)
{
	oq_node *p;
	v = v ? oq_value_resolve(v) : NULL;
	if (!v || depth > 16)
		return -1;
	if (v->init)
		return v->init->rank <= 1 ? (int64_t)v->init->nelem : -1;
	if (!(p = v->producer) || !is_onnx(p) || v->producer_index != 0)
		return -1;
	if (op_is(p, "Constant")) {
		const oq_attr *a = oq_node_attr(p, "value");
		return a && a->type == OQ_ATTR_TENSOR && a->t && a->t->rank <= 1 ? (int64_t)a->t->nelem : -1;
	}
	if ((op_is(p, "Cast") || op_is(p, "Identity")) && p->n_inputs)
		return vec_len(c, p->inputs[0], depth + 1);
	if (op_is(p, "Unsqueeze") && p->n_inputs && value_rank(c, p->inputs[0]) == 0)
		return 1;
	if (op_is(p, "Shape") && p->n_inputs && !oq_node_attr(p, "start") && !oq_node_attr(p, "end"))
		return value_rank(c, p->inputs[0]);
	if (op_is(p, "Concat")) {
		int64_t sum = 0;
		for (size_t i = 0; i < p->n_inputs; i++) {
			int64_t l = vec_len(c, p->inputs[i], depth + 1);
			if (l < 0)
				return -1;
			sum += l;
		}
		return sum;
	}
	if (op_is(p, "Slice") && p->n_inputs) {
		int64_t st, en, ax = 0, step = 1, len = vec_len(c, p->inputs[0], depth + 1);
		if (len < 0 || const_int(p, "starts", 1, 0, &st) || const_int(p, "ends", 2, 0, &en))
			return -1;
		if (!const_int(p, "starts", 1, 1, &ax)) /* more than one axis */
			return -1;
		ax = 0;
		if ((oq_node_attr(p, "axes") || (p->n_inputs > 3 && p->inputs[3])) && const_int(p, "axes", 3, 0, &ax))
			return -1;
		if (p->n_inputs > 4 && p->inputs[4] && (const_int(p, "", 4, 0, &step) || step != 1))
			return -1;
		if (ax != 0 && ax != -1)
			return -1;
		st = st < 0 ? st + len : st;
		en = en < 0 ? en + len : en;
		st = st < 0 ? 0 : (st > len ? len : st);
		en = en < 0 ? 0 : (en > len ? len : en);
		return en > st ? en - st : 0;
	}
	return -1;
}

/* Rank of node n's first output from its input ranks, -1 when unknown. */
static int infer_rank(cx *c, oq_node *n)
{
	int r0 = n->n_inputs && n->inputs[0] ? value_rank(c, n->inputs[0]) : -1;
	int64_t k;
	if (in_list(n, same_rank, sizeof same_rank / sizeof same_rank[0]))
		return r0;
	if (in_list(n, bcast_rank, sizeof bcast_rank / sizeof bcast_rank[0])) {
		int r = -1;
		for (size_t i = 0; i < n->n_inputs; i++) {
			int ri = n->inputs[i] ? value_rank(c, n->inputs[i]) : -1;
			if (ri < 0)
				return -1;
			r = ri > r ? ri : r;
		}
		return r;
	}
	if (op_is(n, "MatMul") && n->n_inputs == 2) {
		int r1 = value_rank(c, n->inputs[1]);
		if (r0 < 1 || r1 < 1)
			return -1;
		if (r0 == 1 || r1 == 1)
			return r0 == 1 && r1 == 1 ? 0 : (r0 == 1 ? r1 - 1 : r0 - 1);
		return r0 > r1 ? r0 : r1;
	}
	if (op_is(n, "Gemm") || op_is(n, "Flatten"))
		return 2;
	if (op_is(n, "Shape"))
		return 1;
	if (op_is(n, "Size"))
		return 0;
	if (op_is(n, "Reshape")) {
		const oq_attr *a = oq_node_attr(n, "shape");
		return a && a->type == OQ_ATTR_INTS ? (int)a->n : (n->n_inputs > 1 ? (int)vec_len(c, n->inputs[1], 0) : -1);
	}
	if (op_is(n, "Unsqueeze"))
		return r0 >= 0 && (k = axes_len(n)) >= 0 ? r0 + (int)k : -1;
	if (op_is(n, "Squeeze"))
		return r0 >= 0 && (k = axes_len(n)) >= 0 ? r0 - (int)k : -1;
	if (strncmp(n->op_type, "Reduce", 6) == 0 || op_is(n, "ArgMax") || op_is(n, "ArgMin")) {
		if (r0 < 0 || oq_node_attr_int(n, "keepdims", 1))
			return r0;
		if (n->op_type[0] == 'A')
			return r0 - 1;
		return (k = axes_len(n)) > 0 ? r0 - (int)k : -1; /* empty axes: all, or none (noop_with_empty_axes) */
	}
	if (op_is(n, "Gather") && n->n_inputs == 2) {
		int r1 = value_rank(c, n->inputs[1]);
		return r0 >= 0 && r1 >= 0 ? r0 + r1 - 1 : -1;
	}
	if (op_is(n, "ConstantOfShape"))
		return (int)const_len(n, 0);
	if (op_is(n, "Constant")) {
		const oq_attr *a = oq_node_attr(n, "value");
		return a && a->type == OQ_ATTR_TENSOR && a->t ? a->t->rank : -1;
	}
	return -1;
}

/* Ranks of g's values: declared where given, else inferred in node order. */
static int rank_graph(cx *c, oq_graph *g)
{
	free(c->ranks);
	c->ranks = NULL;
	c->rg = NULL;
	c->n_ranks = 0;
	int *r = oq_calloc(g->n_values, sizeof *r);
	if (!r)
		return nomem(c);
	for (size_t i = 0; i < g->n_values; i++)
		r[i] = decl_rank(g->values[i]);
	c->ranks = r;
	c->rg = g;
	c->n_ranks = g->n_values;
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		int ri = -2;
		for (size_t k = 0; k < n->n_outputs; k++) {
			oq_value *o = n->outputs[k];
			if (!o || o->index >= c->n_ranks || r[o->index] >= 0)
				continue;
			if (ri == -2)
				ri = is_onnx(n) && (k == 0 || op_is(n, "Split") || op_is(n, "TopK")) ? infer_rank(c, n) : -1;
			if (k == 0 || op_is(n, "Split") || op_is(n, "TopK"))
				r[o->index] = ri;
		}
	}
	return OQ_OK;
}

static int is_used(oq_value *v)
{
	return v && (v->n_uses || (v->flags & OQ_V_OUTPUT) || oq_value_n_captures(v));
}

/* Base name for new values of node n. */
static const char *base_of(const oq_node *n)
{
	if (n->name[0])
		return n->name;
	if (n->n_outputs && n->outputs[0])
		return n->outputs[0]->name;
	return n->op_type;
}

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 2);
	if (!s)
		return NULL;
	memcpy(s, a, la);
	s[la] = '_';
	memcpy(s + la + 1, b, lb + 1);
	return s;
}

/* Adds initializer `t` named after n and `what`; NULL on allocation failure. */
static oq_value *add_init(oq_node *n, const char *what, oq_tensor *t)
{
	char *name;
	oq_value *v;
	if (!t)
		return NULL;
	if (!(name = join(base_of(n), what))) {
		oq_tensor_free(t);
		return NULL;
	}
	v = oq_graph_add_init(n->graph, name, t);
	free(name);
	return v;
}

static oq_value *add_i64(oq_node *n, const char *what, int rank, const int64_t *v, size_t count)
{
	int64_t dims[1];
	dims[0] = (int64_t)count;
	oq_tensor *t = oq_tensor_new(OQ_DT_INT64, rank, dims);
	if (t && count)
		memcpy((void *)t->data, v, count * sizeof *v);
	return add_init(n, what, t);
}

/* A scalar of `dtype` (a float type, or an integer type) holding x. */
static oq_value *add_scalar(oq_node *n, const char *what, int dtype, double x)
{
	oq_tensor *t = oq_tensor_new(dtype, 0, NULL);
	if (!t)
		return NULL;
	switch (dtype) {
	case OQ_DT_FLOAT: {
		float f = (float)x;
		memcpy((void *)t->data, &f, sizeof f);
		break;
	}
	case OQ_DT_DOUBLE: memcpy((void *)t->data, &x, sizeof x); break;
	case OQ_DT_INT64: {
		int64_t i = (int64_t)x;
		memcpy((void *)t->data, &i, sizeof i);
		break;
	}
	case OQ_DT_INT32: {
		int32_t i = (int32_t)x;
		memcpy((void *)t->data, &i, sizeof i);
		break;
	}
	default: oq_tensor_free(t); return NULL;
	}
	return add_init(n, what, t);
}

/* Sets input `idx` of n (inputs in between become omitted ""). */
static int set_input(oq_node *n, size_t idx, oq_value *v)
{
	size_t cnt = n->n_inputs > idx ? n->n_inputs : idx + 1;
	oq_value **a = oq_calloc(cnt, sizeof *a);
	int rc;
	if (!a)
		return OQ_ENOMEM;
	for (size_t i = 0; i < n->n_inputs; i++)
		a[i] = n->inputs[i];
	a[idx] = v;
	rc = oq_node_set_inputs(n, a, cnt);
	free(a);
	return rc;
}

/* Moves INTS attribute `name` to int64 1-D input `idx` (nothing when absent). */
static int ints_to_input(cx *c, oq_node *n, const char *name, size_t idx)
{
	const oq_attr *a = oq_node_attr(n, name);
	oq_value *v;
	if (!a)
		return OQ_OK;
	if (a->type != OQ_ATTR_INTS)
		return refuse(c, n, "an attribute that should be a list of ints is not");
	if (n->n_inputs > idx && n->inputs[idx])
		return refuse(c, n, "both an attribute and an input give the same parameter");
	if (!c->apply)
		return OQ_OK;
	if (!(v = add_i64(n, name, 1, a->ints, a->n)) || set_input(n, idx, v))
		return nomem(c);
	oq_node_del_attr(n, name);
	return OQ_OK;
}

/* A copy of n under a new op type (same inputs, outputs, attributes); old n is marked dead. */
static oq_node *replace_op(cx *c, oq_node *n, const char *op)
{
	oq_node *r = oq_graph_add_node(n->graph, op, n->domain, n->name);
	if (!r || oq_node_set_inputs(r, n->inputs, n->n_inputs) ||
	    oq_node_set_outputs(r, n->outputs, n->n_outputs)) {
		nomem(c);
		return NULL;
	}
	for (size_t i = 0; i < n->n_attrs; i++) {
		const oq_attr *a = &n->attrs[i];
		int rc;
		switch (a->type) {
		case OQ_ATTR_INT: rc = oq_node_set_attr_int(r, a->name, a->i); break;
		case OQ_ATTR_FLOAT: rc = oq_node_set_attr_float(r, a->name, a->f); break;
		case OQ_ATTR_STRING: rc = oq_node_set_attr_string(r, a->name, a->s.p ? a->s.p : ""); break;
		case OQ_ATTR_INTS: rc = oq_node_set_attr_ints(r, a->name, a->ints, a->n); break;
		case OQ_ATTR_FLOATS: rc = oq_node_set_attr_floats(r, a->name, a->floats, a->n); break;
		default: rc = OQ_EUNSUP; break; /* checked before (attr_types_plain) */
		}
		if (rc) {
			nomem(c);
			return NULL;
		}
	}
	n->dead = 1;
	if (n->graph->parent)
		c->sub_changed = 1;
	return r;
}

/* Only scalar/list attributes (what replace_op can copy). */
static int attr_types_plain(const oq_node *n)
{
	for (size_t i = 0; i < n->n_attrs; i++) {
		int t = n->attrs[i].type;
		if (t != OQ_ATTR_INT && t != OQ_ATTR_FLOAT && t != OQ_ATTR_STRING && t != OQ_ATTR_INTS &&
		    t != OQ_ATTR_FLOATS)
			return 0;
	}
	return 1;
}

/* ------------------------------------------------------------ conversions */

/* Add/Sub/... before 7: broadcast=1 with `axis` aligns B at that axis of A. */
static int up_legacy_broadcast(cx *c, oq_node *n)
{
	int64_t bc = oq_node_attr_int(n, "broadcast", 0);
	const oq_attr *ax = oq_node_attr(n, "axis");
	if (bc && ax && n->n_inputs == 2 && n->inputs[0] && n->inputs[1]) {
		int ra = value_rank(c, n->inputs[0]), rb = value_rank(c, n->inputs[1]);
		int64_t axis = ax->i;
		if (ra < 0 || rb < 0)
			return refuse(c, n, "legacy broadcast with 'axis' needs the declared ranks of both inputs");
		if (axis < 0)
			axis += ra;
		if (axis < 0 || axis + rb > ra)
			return refuse(c, n, "legacy broadcast 'axis' does not fit the input ranks");
		if (axis + rb < ra && c->apply) {
			/* B [b0..bk] -> [b0..bk, 1, ..., 1] so that numpy broadcasting aligns it at axis */
			int nr = ra - (int)axis;
			int64_t dims[OQ_MAX_RANK];
			oq_value *b = n->inputs[1], *nb;
			oq_value *rb_v = oq_value_resolve(b);
			if (rb_v->init) {
				oq_tensor *t;
				for (int i = 0; i < nr; i++)
					dims[i] = i < rb ? rb_v->init->dims[i] : 1;
				t = oq_tensor_new(rb_v->init->dtype, nr, dims);
				if (t && t->nbytes)
					memcpy((void *)t->data, rb_v->init->data, t->nbytes);
				nb = add_init(n, "B", t);
				if (!nb)
					return nomem(c);
			} else {
				/* Reshape(B, [0, ..., 0, 1, ...]): 0 copies the dim of B */
				oq_node *r = oq_graph_add_node(n->graph, "Reshape", "", "");
				oq_value *shape;
				for (int i = 0; i < nr; i++)
					dims[i] = i < rb ? 0 : 1;
				shape = add_i64(n, "B_shape", 1, dims, (size_t)nr);
				nb = oq_graph_new_value(n->graph, b->name);
				oq_value *in[2] = {b, shape};
				if (!r || !shape || !nb || oq_node_set_inputs(r, in, 2) || oq_node_set_outputs(r, &nb, 1))
					return nomem(c);
				if (n->graph->parent)
					c->sub_changed = 1;
			}
			n->inputs[1] = nb;
		}
	}
	if (c->apply) {
		oq_node_del_attr(n, "broadcast");
		oq_node_del_attr(n, "axis");
	}
	return OQ_OK;
}

static int up_batchnorm(cx *c, oq_node *n)
{
	if (c->from < 9 && oq_node_attr_int(n, "spatial", 1) == 0)
		return refuse(c, n, "spatial=0 (statistics per element) has no equivalent after opset 8");
	if (c->from < 14 && c->to >= 14)
		for (size_t i = 1; i < n->n_outputs; i++)
			if (is_used(n->outputs[i]))
				return refuse(c, n, "training outputs (running mean/var) are used");
	if (!c->apply)
		return OQ_OK;
	oq_node_del_attr(n, "spatial");
	oq_node_del_attr(n, "is_test");
	if (c->from < 14 && c->to >= 14)
		n->n_outputs = n->n_outputs > 1 ? 1 : n->n_outputs;
	return OQ_OK;
}

static int up_dropout(cx *c, oq_node *n)
{
	const oq_attr *r = oq_node_attr(n, "ratio");
	int has_ratio = r != NULL;
	float ratio = r ? r->f : 0.5f; /* read now: deleting is_test moves the attribute array */
	if (c->from < 10 && n->n_outputs > 1 && is_used(n->outputs[1]))
		return refuse(c, n, "the mask output is used and changes type (to bool) in opset 10");
	if (!c->apply)
		return OQ_OK;
	oq_node_del_attr(n, "is_test");
	if (c->from < 12 && c->to >= 12 && has_ratio) {
		oq_value *v;
		int dt = value_dtype(n->inputs[0]);
		if (dt != OQ_DT_DOUBLE)
			dt = OQ_DT_FLOAT; /* ratio is T1: float16/float/double; float16 data takes a float ratio */
		if (!(v = add_scalar(n, "ratio", dt, ratio)) || set_input(n, 1, v))
			return nomem(c);
		oq_node_del_attr(n, "ratio");
	}
	return OQ_OK;
}

/* A float type the Clip/Pad scalar inputs can be built in; 0 when unsupported. */
static int scalar_type(oq_value *x)
{
	int dt = value_dtype(x);
	if (dt == 0)
		return OQ_DT_FLOAT; /* the old Clip/Pad were float-only; float is what exporters emit */
	if (dt == OQ_DT_FLOAT || dt == OQ_DT_DOUBLE || dt == OQ_DT_INT64 || dt == OQ_DT_INT32)
		return dt;
	return 0;
}

static int up_clip(cx *c, oq_node *n)
{
	const oq_attr *lo = oq_node_attr(n, "min"), *hi = oq_node_attr(n, "max");
	int dt = scalar_type(n->inputs[0]);
	if (!dt)
		return refuse(c, n, "min/max inputs of this element type are not supported");
	if (!c->apply)
		return OQ_OK;
	if (lo) {
		oq_value *v = add_scalar(n, "min", dt, lo->f);
		if (!v || set_input(n, 1, v))
			return nomem(c);
	}
	if (hi) {
		oq_value *v = add_scalar(n, "max", dt, hi->f);
		if (!v || set_input(n, 2, v))
			return nomem(c);
	}
	oq_node_del_attr(n, "min");
	oq_node_del_attr(n, "max");
	return OQ_OK;
}

static int up_pad(cx *c, oq_node *n)
{
	const char *pname = c->from < 2 ? "paddings" : "pads";
	const oq_attr *p = oq_node_attr(n, pname), *val = oq_node_attr(n, "value");
	int dt = scalar_type(n->inputs[0]);
	if (!p || p->type != OQ_ATTR_INTS)
		return refuse(c, n, "the pads attribute is missing");
	if (val && val->f != 0 && !dt)
		return refuse(c, n, "a constant value of this element type is not supported");
	if (!c->apply)
		return OQ_OK;
	oq_value *pv = add_i64(n, "pads", 1, p->ints, p->n);
	if (!pv || set_input(n, 1, pv))
		return nomem(c);
	if (val && val->f != 0) {
		oq_value *v = add_scalar(n, "value", dt, val->f);
		if (!v || set_input(n, 2, v))
			return nomem(c);
	}
	oq_node_del_attr(n, pname);
	oq_node_del_attr(n, "value");
	return OQ_OK;
}

static int up_slice(cx *c, oq_node *n)
{
	int rc;
	if (!oq_node_attr(n, "starts") || !oq_node_attr(n, "ends"))
		return refuse(c, n, "starts/ends attributes are missing");
	if ((rc = ints_to_input(c, n, "starts", 1)) || (rc = ints_to_input(c, n, "ends", 2)) ||
	    (rc = ints_to_input(c, n, "axes", 3)))
		return rc;
	return OQ_OK;
}

static int up_topk(cx *c, oq_node *n)
{
	const oq_attr *k = oq_node_attr(n, "k");
	if (!k || k->type != OQ_ATTR_INT)
		return refuse(c, n, "attribute k is missing");
	if (!c->apply)
		return OQ_OK;
	oq_value *v = add_i64(n, "k", 1, &k->i, 1);
	if (!v || set_input(n, 1, v))
		return nomem(c);
	oq_node_del_attr(n, "k");
	return OQ_OK;
}

static int up_reshape(cx *c, oq_node *n)
{
	if (!oq_node_attr(n, "shape"))
		return OQ_OK;
	return ints_to_input(c, n, "shape", 1);
}

static int up_cast(cx *c, oq_node *n)
{
	const oq_attr *a = oq_node_attr(n, "to");
	char low[32];
	size_t i;
	int dt;
	if (!a || a->type != OQ_ATTR_STRING)
		return OQ_OK;
	for (i = 0; a->s.p && a->s.p[i] && i + 1 < sizeof low; i++)
		low[i] = (char)(a->s.p[i] >= 'A' && a->s.p[i] <= 'Z' ? a->s.p[i] - 'A' + 'a' : a->s.p[i]);
	low[i] = 0;
	if ((dt = oq_dtype_from_name(low)) <= 0)
		return refuse(c, n, "attribute 'to' does not name an element type");
	if (c->apply && oq_node_set_attr_int(n, "to", dt))
		return nomem(c);
	return OQ_OK;
}

/* Upsample (7-10) -> Resize; Resize 10 -> Resize 11+ layout. */
static int up_resize_like(cx *c, oq_node *n, int upsample)
{
	const oq_attr *md = oq_node_attr(n, "mode");
	const char *mode = md && md->s.p ? md->s.p : "nearest";
	oq_value *scales = NULL;
	oq_node *r;

	if (upsample && c->from < 7)
		return refuse(c, n, "Upsample-1 (width_scale/height_scale) is not supported");
	if (strcmp(mode, "bilinear") == 0)
		mode = "linear";
	if (strcmp(mode, "nearest") != 0 && strcmp(mode, "linear") != 0)
		return refuse(c, n, "unknown mode");
	if (upsample && c->from < 9) {
		const oq_attr *s = oq_node_attr(n, "scales");
		if (!s || s->type != OQ_ATTR_FLOATS)
			return refuse(c, n, "attribute 'scales' is missing");
	} else if (n->n_inputs < 2 || !n->inputs[1]) {
		return refuse(c, n, "input 'scales' is missing");
	}
	if (!attr_types_plain(n))
		return refuse(c, n, "unexpected attribute types");
	if (!c->apply)
		return OQ_OK;
	if (upsample && c->from < 9) {
		const oq_attr *s = oq_node_attr(n, "scales");
		int64_t dims[1];
		dims[0] = (int64_t)s->n;
		scales = add_init(n, "scales", oq_tensor_from_floats(1, dims, s->floats));
		if (!scales)
			return nomem(c);
	} else {
		scales = n->inputs[1];
	}
	if (!(r = replace_op(c, n, "Resize")))
		return c->d->status;
	oq_value *in[3] = {n->inputs[0], NULL, scales};
	oq_node_del_attr(r, "scales");
	if (oq_node_set_inputs(r, in, 3) || oq_node_set_attr_string(r, "mode", mode) ||
	    oq_node_set_attr_string(r, "coordinate_transformation_mode", "asymmetric") ||
	    (strcmp(mode, "nearest") == 0 && oq_node_set_attr_string(r, "nearest_mode", "floor")))
		return nomem(c);
	return OQ_OK;
}

static int up_resize(cx *c, oq_node *n)
{
	if (c->from < 11)
		return up_resize_like(c, n, 0);
	const oq_attr *ct = oq_node_attr(n, "coordinate_transformation_mode");
	if (c->from < 13 && c->to >= 13 && ct && ct->s.p && strcmp(ct->s.p, "tf_half_pixel_for_nn") == 0)
		return refuse(c, n, "coordinate_transformation_mode tf_half_pixel_for_nn was removed in opset 13");
	return OQ_OK;
}

static int up_split(cx *c, oq_node *n)
{
	int rc;
	if (c->from < 13 && c->to >= 13 && (rc = ints_to_input(c, n, "split", 1)))
		return rc;
	if (c->from < 18 && c->to >= 18 && c->apply && !oq_node_attr(n, "split") &&
	    (n->n_inputs < 2 || !n->inputs[1]) && oq_node_set_attr_int(n, "num_outputs", (int64_t)n->n_outputs))
		return nomem(c);
	return OQ_OK;
}

/*
 * Softmax family before 13: coerce to 2-D at `axis`. Same as the new single
 * axis op when that axis is the last; otherwise Flatten -> op -> Reshape.
 */
static int up_softmax(cx *c, oq_node *n)
{
	int64_t axis = oq_node_attr_int(n, "axis", 1);
	int rank = value_rank(c, n->inputs[0]);
	if (n->n_inputs < 1 || !n->inputs[0] || n->n_outputs < 1 || !n->outputs[0])
		return refuse(c, n, "input or output is missing");
	if (!c->apply)
		return OQ_OK;
	if (axis == -1 || (rank >= 1 && (axis == rank - 1 || (axis < 0 && axis + rank == rank - 1)))) {
		if (oq_node_set_attr_int(n, "axis", -1))
			return nomem(c);
		return OQ_OK;
	}
	/* y = Reshape(op(Flatten(x, axis), axis=-1), Shape(x)) */
	oq_graph *g = n->graph;
	oq_value *x = n->inputs[0], *y = n->outputs[0];
	char *b1 = join(base_of(n), "flat"), *b2 = join(base_of(n), "flat_out"), *b3 = join(base_of(n), "shape");
	oq_value *fx = b1 ? oq_graph_new_value(g, b1) : NULL;
	oq_value *fy = b2 ? oq_graph_new_value(g, b2) : NULL;
	oq_value *sh = b3 ? oq_graph_new_value(g, b3) : NULL;
	free(b1);
	free(b2);
	free(b3);
	if (!fx || !fy || !sh)
		return nomem(c);
	oq_node *fl = oq_graph_add_node(g, "Flatten", "", "");
	oq_node *shp = fl ? oq_graph_add_node(g, "Shape", "", "") : NULL;
	oq_node *rs = shp ? oq_graph_add_node(g, "Reshape", "", "") : NULL;
	oq_value *rin[2] = {fy, sh};
	if (!rs || oq_node_set_inputs(fl, &x, 1) || oq_node_set_outputs(fl, &fx, 1) ||
	    oq_node_set_attr_int(fl, "axis", axis) || oq_node_set_inputs(shp, &x, 1) ||
	    oq_node_set_outputs(shp, &sh, 1) || oq_node_set_inputs(rs, rin, 2) || oq_node_set_outputs(rs, &y, 1))
		return nomem(c);
	n->inputs[0] = fx;
	n->outputs[0] = fy;
	if (oq_node_set_attr_int(n, "axis", -1))
		return nomem(c);
	if (g->parent)
		c->sub_changed = 1;
	/* the op now writes fy; move it after Flatten so the order stays valid (toposort does it) */
	return OQ_OK;
}

static int up_gridsample(cx *c, oq_node *n)
{
	const oq_attr *md = oq_node_attr(n, "mode");
	const char *mode = md && md->s.p ? md->s.p : "bilinear";
	if (!c->apply)
		return OQ_OK;
	/* decide before setting: `mode` points into the attribute that gets replaced */
	const char *to = strcmp(mode, "bilinear") == 0 ? "linear" : strcmp(mode, "bicubic") == 0 ? "cubic" : NULL;
	if (to && oq_node_set_attr_string(n, "mode", to))
		return nomem(c);
	return OQ_OK;
}

static int up_dft(cx *c, oq_node *n)
{
	int64_t axis = oq_node_attr_int(n, "axis", 1);
	if (!c->apply)
		return OQ_OK;
	oq_value *v = add_i64(n, "axis", 0, &axis, 1);
	if (!v || set_input(n, 2, v))
		return nomem(c);
	oq_node_del_attr(n, "axis");
	return OQ_OK;
}

/* GroupNormalization 18: scale/bias [G]; 21: [C]. Repeat each group's value C/G times. */
static int up_groupnorm(cx *c, oq_node *n)
{
	int64_t G = oq_node_attr_int(n, "num_groups", 0), C = n->n_inputs ? value_dim(n->inputs[0], 1) : -1;
	if (n->n_inputs < 3 || !n->inputs[1] || !n->inputs[2])
		return refuse(c, n, "scale or bias is missing");
	oq_value *s = oq_value_resolve(n->inputs[1]), *b = oq_value_resolve(n->inputs[2]);
	if (!s->init || !b->init || G <= 0 || C <= 0 || C % G || (int64_t)s->init->nelem != G ||
	    (int64_t)b->init->nelem != G)
		return refuse(c, n, "per-group scale/bias must be initializers of num_groups elements and "
				    "the channel count must be declared");
	if (!c->apply)
		return OQ_OK;
	for (int k = 1; k <= 2; k++) {
		const oq_tensor *src = (k == 1 ? s : b)->init;
		oq_tensor *t = oq_tensor_new(src->dtype, 1, &C);
		size_t es = src->nbytes / src->nelem, cpg = (size_t)(C / G);
		if (!t)
			return nomem(c);
		for (size_t i = 0; i < (size_t)C; i++)
			memcpy((char *)t->data + i * es, (const char *)src->data + (i / cpg) * es, es);
		oq_value *v = add_init(n, k == 1 ? "scale" : "bias", t);
		if (!v)
			return nomem(c);
		n->inputs[k] = v;
	}
	return OQ_OK;
}

static const char *const experimental[] = {
	"ImageScaler", "Crop", "Affine", "ScaledTanh", "ParametricSoftplus", "GivenTensorFill",
	"ConstantFill", "GRUUnit", "ATen",
};

static const char *const legacy_bcast[] = {
	"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less",
};

static const char *const reduce18[] = {
	"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
	"ReduceMean", "ReduceMin", "ReduceProd", "ReduceSumSquare",
};

static int in_list(const oq_node *n, const char *const *set, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (op_is(n, set[i]))
			return 1;
	return 0;
}

#define IN_SET(n, s) in_list(n, s, sizeof s / sizeof s[0])

static int up_node(cx *c, oq_node *n)
{
	int64_t F = c->from, T = c->to;
	if (!is_onnx(n) || n->dead)
		return OQ_OK;
	if (c->apply) /* removed from every op in opset 6; stray copies in later models go too */
		oq_node_del_attr(n, "consumed_inputs");
	if (IN_SET(n, experimental))
		return refuse(c, n, "an experimental op removed from ONNX in opset 10");
	/* every rewrite below reads input 0 and output 0, which a file may leave out */
	if (!n->n_inputs || !n->n_outputs)
		return OQ_OK;
	if (F < 7 && IN_SET(n, legacy_bcast))
		return up_legacy_broadcast(c, n);
	if (op_is(n, "Gemm")) {
		if (F < 7 && c->apply)
			oq_node_del_attr(n, "broadcast");
		return OQ_OK;
	}
	if (op_is(n, "BatchNormalization"))
		return up_batchnorm(c, n);
	if (op_is(n, "Dropout"))
		return up_dropout(c, n);
	if (op_is(n, "Concat")) {
		if (F < 4 && !oq_node_attr(n, "axis") && c->apply && oq_node_set_attr_int(n, "axis", 1))
			return nomem(c);
		return OQ_OK;
	}
	if (op_is(n, "Reshape"))
		return F < 5 ? up_reshape(c, n) : OQ_OK;
	if (op_is(n, "Cast"))
		return F < 6 ? up_cast(c, n) : OQ_OK;
	if (op_is(n, "Tile") && F < 6)
		return refuse(c, n, "Tile-1 (tiles/axis inputs) is not supported");
	if (op_is(n, "Scan") && F < 9)
		return refuse(c, n, "Scan-8 (batch axis) is not supported");
	if ((op_is(n, "LSTM") || op_is(n, "GRU") || op_is(n, "RNN")) && F < 7) {
		if (c->apply)
			oq_node_del_attr(n, "output_sequence");
		return OQ_OK;
	}
	if ((op_is(n, "LpPool") || op_is(n, "GlobalLpPool")) && F < 2) {
		const oq_attr *p = oq_node_attr(n, "p");
		if (p && p->type == OQ_ATTR_FLOAT && c->apply && oq_node_set_attr_int(n, "p", (int64_t)p->f))
			return nomem(c);
		return OQ_OK;
	}
	if (op_is(n, "Upsample"))
		return up_resize_like(c, n, 1);
	if (op_is(n, "Resize"))
		return up_resize(c, n);
	if (op_is(n, "Scatter")) {
		if (T < 11)
			return OQ_OK;
		if (!attr_types_plain(n))
			return refuse(c, n, "unexpected attribute types");
		return c->apply && !replace_op(c, n, "ScatterElements") ? c->d->status : OQ_OK;
	}
	if (op_is(n, "Slice"))
		return F < 10 ? up_slice(c, n) : OQ_OK;
	if (op_is(n, "TopK"))
		return F < 10 ? up_topk(c, n) : OQ_OK;
	if (op_is(n, "Clip"))
		return F < 11 ? up_clip(c, n) : OQ_OK;
	if (op_is(n, "Pad"))
		return F < 11 ? up_pad(c, n) : OQ_OK;
	if ((op_is(n, "Squeeze") || op_is(n, "Unsqueeze") || op_is(n, "ReduceSum")) && F < 13 && T >= 13)
		return ints_to_input(c, n, "axes", 1);
	if (IN_SET(n, reduce18) && F < 18 && T >= 18)
		return ints_to_input(c, n, "axes", 1);
	if (op_is(n, "Split"))
		return up_split(c, n);
	if ((op_is(n, "Softmax") || op_is(n, "LogSoftmax") || op_is(n, "Hardmax")) && F < 13 && T >= 13)
		return up_softmax(c, n);
	if (op_is(n, "GridSample") && F < 20 && T >= 20)
		return up_gridsample(c, n);
	if (op_is(n, "DFT") && F < 20 && T >= 20)
		return up_dft(c, n);
	if (op_is(n, "GroupNormalization") && F < 21 && T >= 21)
		return up_groupnorm(c, n);
	return OQ_OK;
}

static int up_graph(oq_graph *g, oq_node *owner, void *ctx)
{
	cx *c = ctx;
	size_t n0 = g->n_nodes; /* nodes appended by a conversion are already in the new form */
	int rc;
	(void)owner;
	if ((rc = rank_graph(c, g)))
		return rc;
	for (size_t i = 0; i < n0; i++)
		if ((rc = up_node(c, g->nodes[i])))
			return rc;
	return oq_graph_each_subgraph(g, up_graph, ctx);
}

static int sort_subs(oq_graph *g, oq_node *owner, void *ctx)
{
	int rc;
	(void)owner;
	if (g->parent && (rc = oq_graph_toposort(g, ctx)))
		return rc;
	return oq_graph_each_subgraph(g, sort_subs, ctx);
}

/* Lowest opset the requested quantization needs, at least 13. */
static int64_t needed_opset(const oq_opts *o)
{
	const char *why;
	int64_t need = oq_quantize_opset_need(o, &why);
	return need > 13 ? need : 13;
}

/* ir_version a model of opset `op` needs (ONNX versioning table). */
static int64_t ir_for(int64_t op)
{
	if (op >= 21)
		return 10;
	if (op >= 19)
		return 9;
	if (op >= 15)
		return 8;
	if (op >= 13)
		return 7;
	if (op >= 9)
		return 4;
	return 3;
}

int oq_pass_upgrade_opset(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	oq_model *m = g->model;
	int64_t cur = oq_model_opset(m, ""), target = o->opset ? o->opset : needed_opset(o);
	cx c = {m, cur, target, 0, 0, NULL, NULL, 0, d};
	int rc;

	*changed = 0;
	if (g->parent)
		return oq_err(d, OQ_EINVAL, "upgrade-opset: must run on the main graph");
	if (o->opset && o->opset < cur)
		return oq_err(d, OQ_EUSAGE,
			      "upgrade-opset: cannot downgrade the model from opset %lld to %lld; "
			      "use --opset %lld or higher",
			      (long long)cur, (long long)o->opset, (long long)cur);
	if (cur >= target)
		return OQ_OK;
	if (target > MAX_TARGET)
		return oq_err(d, OQ_EUNSUP,
			      "upgrade-opset: cannot convert to opset %lld: onnxq knows the operator changes up to "
			      "opset %d; use --opset %d or lower",
			      (long long)target, MAX_TARGET, MAX_TARGET);
	if (target < 10)
		return oq_err(d, OQ_EUSAGE, "upgrade-opset: --opset %lld is below 10, where QuantizeLinear starts",
			      (long long)target);
	/* check every node first: a refusal leaves the model as it was */
	rc = up_graph(g, NULL, &c);
	c.apply = 1;
	if (!rc)
		rc = up_graph(g, NULL, &c);
	free(c.ranks);
	if (rc)
		return rc;
	if ((rc = oq_model_set_opset(m, "", target)))
		return nomem(&c);
	if (m->ir_version < ir_for(target))
		m->ir_version = ir_for(target);
	if (c.sub_changed) {
		if ((rc = oq_graph_sweep(g)))
			return nomem(&c);
		if ((rc = oq_graph_each_subgraph(g, sort_subs, d)))
			return rc;
	}
	if ((rc = oq_graph_rebuild_uses(g)))
		return nomem(&c);
	if (o->log)
		fprintf(o->log, "upgrade-opset: opset %lld -> %lld, ir_version %lld\n", (long long)cur,
			(long long)target, (long long)m->ir_version);
	*changed = 1;
	return OQ_OK;
}
