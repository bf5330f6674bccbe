/*
 * check.c - structural validation of a loaded model (`onnxq check`).
 *
 * Walks the main graph in file order and descends into every subgraph at
 * the node that holds it, so problems come out in graph order:
 * per graph, the values (initializer payloads, declared element types),
 * then each node (opset import, attributes, inputs, outputs, Q/DQ
 * legality, its subgraphs), then the graph outputs. Every finding is one
 * problem naming the node (or value) and a stable rule id:
 *
 *   topo-order      a node reads a value produced by a later node (or by a
 *                   node after the one holding the subgraph, for outer values)
 *   multiple-def    a name defined twice (two producers, output shadowing a
 *                   graph input, initializer or outer-scope value)
 *   dangling-input  a node input nothing defines
 *   graph-output    a graph output nothing defines
 *   op-type         a node with an empty op_type
 *   node-name       two nodes of one graph share a non-empty name (not a
 *                   spec rule, but ONNX Runtime refuses such models)
 *   opset-import    a node domain without an opset_import entry
 *   attr-type, attr-undefined, attr-duplicate
 *                   attribute types against a table of common ops
 *   init-dtype, init-dims, init-size
 *                   initializer element type, dims and payload size
 *   sparse-index    a sparse initializer whose indices are not int64 [NNZ] or
 *                   [NNZ, rank], or point outside its dense shape
 *   value-dtype     a declared element type that is not an ONNX type
 *   dtype-ir-version element types newer than the model's IR version
 *   qdq-*           QuantizeLinear/DequantizeLinear legality, versioned by
 *                   the ai.onnx opset (onnx/defs/quantization/{defs,old}.cc):
 *                   qdq-opset, qdq-inputs, qdq-attr, qdq-input-dtype,
 *                   qdq-scale-dtype, qdq-zp-dtype, qdq-output-dtype,
 *                   qdq-int32-zp, qdq-scale-shape, qdq-zp-shape, qdq-axis,
 *                   qdq-block-size
 *
 * Shapes come from initializer dims, Constant nodes, the Q/DQ that produced
 * a value, or declared value types; a rule whose shapes or types are
 * unknown is skipped rather than guessed.
 */
#include "src/report/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- problem list */

static int problems_vadd(oq_problems *p, const char *where, const char *rule, const char *fmt,
                         va_list ap)
{
	va_list ap2;
	char *msg = NULL, *w = NULL, *r = NULL;
	int len;

	va_copy(ap2, ap);
	len = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (len < 0)
		return OQ_ENOMEM;
	msg = malloc((size_t)len + 1);
	w = oq_strdup(where ? where : "");
	r = oq_strdup(rule ? rule : "");
	if (!msg || !w || !r || oq_grow(&p->v, &p->cap, p->n + 1, sizeof *p->v))
		goto fail;
	vsnprintf(msg, (size_t)len + 1, fmt, ap);
	p->v[p->n].where = w;
	p->v[p->n].rule = r;
	p->v[p->n].msg = msg;
	p->n++;
	return OQ_OK;
fail:
	free(msg);
	free(w);
	free(r);
	return OQ_ENOMEM;
}

int oq_problems_add(oq_problems *p, const char *where, const char *rule, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = problems_vadd(p, where, rule, fmt, ap);
	va_end(ap);
	return rc;
}

void oq_problems_free(oq_problems *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].where);
		free(p->v[i].rule);
		free(p->v[i].msg);
	}
	free(p->v);
	p->v = NULL;
	p->n = p->cap = 0;
}

/* ------------------------------------------------------------------ context */

/* Deepest subgraph nesting followed; deeper bodies are not checked. */
#define MAX_NEST 64

typedef struct ck {
	const oq_model *m;
	oq_problems *out;
	int rc;                         /* OQ_ENOMEM once an add failed (sticky) */
	const oq_node *owner[MAX_NEST]; /* owner[d]: node holding the graph at depth d+1 */
	int depth;                      /* nesting depth of the graph being checked */
	char **domains;                 /* node domains already reported unimported */
	size_t n_domains;
} ck;

static void report(ck *c, const char *where, const char *rule, const char *fmt, ...)
    OQ_PRINTF(4, 5);

static void report(ck *c, const char *where, const char *rule, const char *fmt, ...)
{
	va_list ap;

	if (c->rc)
		return;
	va_start(ap, fmt);
	c->rc = problems_vadd(c->out, where, rule, fmt, ap);
	va_end(ap);
}

/* " in graph 'body'" for subgraphs, "" for the main graph. */
static void graph_suffix(const oq_graph *g, char *buf, size_t n)
{
	if (g->parent)
		snprintf(buf, n, " in graph '%s'", g->name);
	else
		buf[0] = '\0';
}

static void node_where(const oq_node *n, char *buf, size_t size)
{
	char gs[160];

	graph_suffix(n->graph, gs, sizeof gs);
	if (*n->name)
		snprintf(buf, size, "node '%s' (%s)%s", n->name, n->op_type, gs);
	else
		snprintf(buf, size, "node #%zu (%s)%s", n->index, n->op_type, gs);
}

static void value_where(const char *kind, const oq_value *v, char *buf, size_t size)
{
	char gs[160];

	graph_suffix(v->graph, gs, sizeof gs);
	snprintf(buf, size, "%s '%s'%s", kind, v->name, gs);
}

/* Short label of a node for messages: 'name' (Op) or #i (Op). */
static void node_label(const oq_node *n, char *buf, size_t size)
{
	if (*n->name)
		snprintf(buf, size, "'%s' (%s)", n->name, n->op_type);
	else
		snprintf(buf, size, "#%zu (%s)", n->index, n->op_type);
}

static int is_sparse_name(const oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_sparse; i++)
		if (g->sparse_names[i] && strcmp(g->sparse_names[i], name) == 0)
			return 1;
	return 0;
}

/* The value is defined in its own scope: input, initializer, node output or sparse initializer. */
static int is_defined(const oq_value *v)
{
	return v->init || (v->flags & OQ_V_INPUT) || v->producer ||
	       is_sparse_name(v->graph, v->name);
}

static const oq_value *resolve_c(const oq_value *v)
{
	return oq_value_resolve((oq_value *)v);
}

/* -------------------------------------------------------------- dtype rules */

/* IR version that introduced an element type (onnx.proto Version enum). */
static int64_t dtype_min_ir(int dt)
{
	if (dt >= OQ_DT_FLOAT8E4M3FN && dt <= OQ_DT_FLOAT8E5M2FNUZ)
		return 9;
	if (dt == OQ_DT_UINT4 || dt == OQ_DT_INT4)
		return 10;
	if (dt == OQ_DT_FLOAT4E2M1)
		return 11;
	if (dt == OQ_DT_FLOAT8E8M0)
		return 12;
	if (dt == OQ_DT_UINT2 || dt == OQ_DT_INT2)
		return 13;
	if (dt == OQ_DT_BFLOAT16)
		return 4;
	return 0;
}

/* Quantized element types QuantizeLinear produces (and DequantizeLinear reads) at an opset. */
static int quant_type_ok(int dt, int64_t opset)
{
	switch (dt) {
	case OQ_DT_INT8:
	case OQ_DT_UINT8: return 1;
	case OQ_DT_FLOAT8E4M3FN:
	case OQ_DT_FLOAT8E4M3FNUZ:
	case OQ_DT_FLOAT8E5M2:
	case OQ_DT_FLOAT8E5M2FNUZ: return opset >= 19;
	case OQ_DT_INT16:
	case OQ_DT_UINT16:
	case OQ_DT_INT4:
	case OQ_DT_UINT4: return opset >= 21;
	case OQ_DT_FLOAT4E2M1: return opset >= 23;
	case OQ_DT_INT2:
	case OQ_DT_UINT2: return opset >= 25;
	default: return 0;
	}
}

/* First opset at which QuantizeLinear/DequantizeLinear accept quantized type dt, 0 if never. */
static int quant_type_since(int dt)
{
	static const int64_t vs[] = {10, 19, 21, 23, 25};
	for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
		if (quant_type_ok(dt, vs[i]))
			return (int)vs[i];
	return 0;
}

static int is_float_scale(int dt, int64_t opset)
{
	if (dt == OQ_DT_FLOAT)
		return 1;
	if (dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16)
		return opset >= 19;
	if (dt == OQ_DT_FLOAT8E8M0)
		return opset >= 24;
	return 0;
}

/* ------------------------------------------------------- shapes and dtypes */

/* What is known about a value: element type and shape. */
typedef struct vinfo {
	int dtype;                 /* 0 when unknown */
	int rank;                  /* -1 when unknown */
	int64_t dims[OQ_MAX_RANK]; /* -1 for an unknown dim */
	const oq_tensor *t;        /* constant payload (initializer or Constant), or NULL */
} vinfo;

static void info_from_tensor(const oq_tensor *t, vinfo *vi)
{
	vi->dtype = t->dtype;
	vi->rank = t->rank >= 0 && t->rank <= OQ_MAX_RANK ? t->rank : -1;
	for (int i = 0; i < vi->rank; i++)
		vi->dims[i] = t->dims[i] >= 0 ? t->dims[i] : -1;
	vi->t = t;
}

static int q_output_dtype(const oq_node *n, int depth);

static void value_info(const oq_value *v, vinfo *vi, int depth)
{
	const oq_node *p;

	vi->dtype = 0;
	vi->rank = -1;
	vi->t = NULL;
	v = resolve_c(v);
	if (!v || depth > 16)
		return;
	if (v->init) {
		info_from_tensor(v->init, vi);
		return;
	}
	p = v->producer;
	if (p && p->op == OQ_OP_Constant && p->n_outputs == 1) {
		const oq_attr *a = oq_node_attr(p, "value");
		if (a && a->type == OQ_ATTR_TENSOR && a->t) {
			info_from_tensor(a->t, vi);
			return;
		}
		if ((a = oq_node_attr(p, "value_float")) && a->type == OQ_ATTR_FLOAT) {
			vi->dtype = OQ_DT_FLOAT;
			vi->rank = 0;
			return;
		}
		if ((a = oq_node_attr(p, "value_int")) && a->type == OQ_ATTR_INT) {
			vi->dtype = OQ_DT_INT64;
			vi->rank = 0;
			return;
		}
	}
	if (v->type.kind == OQ_TYPE_TENSOR) {
		vi->dtype = oq_dtype_valid(v->type.dtype) ? v->type.dtype : 0;
		if (v->type.rank >= 0 && v->type.rank <= OQ_MAX_RANK) {
			vi->rank = v->type.rank;
			for (int i = 0; i < vi->rank; i++)
				vi->dims[i] =
				    v->type.dims[i].value >= 0 ? v->type.dims[i].value : -1;
		}
	}
	/* A Q/DQ output has the shape of its input x and a dtype the node decides. */
	if (p && (p->op == OQ_OP_QuantizeLinear || p->op == OQ_OP_DequantizeLinear) &&
	    v->producer_index == 0 && p->n_inputs >= 1 && p->inputs[0]) {
		vinfo x;
		value_info(p->inputs[0], &x, depth + 1);
		if (vi->rank < 0 && x.rank >= 0) {
			vi->rank = x.rank;
			memcpy(vi->dims, x.dims, (size_t)x.rank * sizeof x.dims[0]);
		}
		if (!vi->dtype && p->op == OQ_OP_QuantizeLinear)
			vi->dtype = q_output_dtype(p, depth + 1);
	}
}

/* Element type QuantizeLinear n produces: zero point's, else output_dtype, else uint8; 0 if
 * unknown. */
static int q_output_dtype(const oq_node *n, int depth)
{
	const oq_attr *od = oq_node_attr(n, "output_dtype");

	if (n->n_inputs >= 3 && n->inputs[2]) {
		vinfo z;
		value_info(n->inputs[2], &z, depth + 1);
		return z.dtype;
	}
	if (od && od->type == OQ_ATTR_INT && od->i != 0)
		return oq_dtype_valid((int)od->i) ? (int)od->i : 0;
	return OQ_DT_UINT8;
}

static void shape_str(const vinfo *vi, char *buf, size_t size)
{
	size_t o = 0;

	if (vi->rank < 0) {
		snprintf(buf, size, "[?]");
		return;
	}
	o += (size_t)snprintf(buf, size, "[");
	for (int i = 0; i < vi->rank && o < size; i++) {
		if (vi->dims[i] >= 0)
			o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "",
			                      (long long)vi->dims[i]);
		else
			o += (size_t)snprintf(buf + o, size - o, "%s?", i ? "," : "");
	}
	if (o < size)
		snprintf(buf + o, size - o, "]");
}

/* Per-tensor scale: a scalar or a 1-D tensor of one element. */
static int is_per_tensor(const vinfo *vi)
{
	return vi->rank == 0 || (vi->rank == 1 && vi->dims[0] == 1);
}

/* ----------------------------------------------------- attribute type table */

typedef struct attr_rule {
	const char *op;   /* ai.onnx op_type */
	const char *name; /* attribute name */
	int type;         /* OQ_ATTR_* it must have (in every opset that defines it) */
} attr_rule;

#define CONV_ATTRS(op)                                                                             \
	{op, "auto_pad", OQ_ATTR_STRING}, {op, "dilations", OQ_ATTR_INTS},                         \
	    {op, "group", OQ_ATTR_INT}, {op, "kernel_shape", OQ_ATTR_INTS},                        \
	    {op, "pads", OQ_ATTR_INTS},                                                            \
	{                                                                                          \
		op, "strides", OQ_ATTR_INTS                                                        \
	}
#define REDUCE_ATTRS(op)                                                                           \
	{op, "axes", OQ_ATTR_INTS}, {op, "keepdims", OQ_ATTR_INT},                                 \
	{                                                                                          \
		op, "noop_with_empty_axes", OQ_ATTR_INT                                            \
	}

static const attr_rule attr_rules[] = {
    CONV_ATTRS("Conv"),
    CONV_ATTRS("ConvInteger"),
    CONV_ATTRS("QLinearConv"),
    CONV_ATTRS("ConvTranspose"),
    {"ConvTranspose", "output_padding", OQ_ATTR_INTS},
    {"ConvTranspose", "output_shape", OQ_ATTR_INTS},
    {"AveragePool", "auto_pad", OQ_ATTR_STRING},
    {"AveragePool", "ceil_mode", OQ_ATTR_INT},
    {"AveragePool", "count_include_pad", OQ_ATTR_INT},
    {"AveragePool", "dilations", OQ_ATTR_INTS},
    {"AveragePool", "kernel_shape", OQ_ATTR_INTS},
    {"AveragePool", "pads", OQ_ATTR_INTS},
    {"AveragePool", "strides", OQ_ATTR_INTS},
    {"MaxPool", "auto_pad", OQ_ATTR_STRING},
    {"MaxPool", "ceil_mode", OQ_ATTR_INT},
    {"MaxPool", "dilations", OQ_ATTR_INTS},
    {"MaxPool", "kernel_shape", OQ_ATTR_INTS},
    {"MaxPool", "pads", OQ_ATTR_INTS},
    {"MaxPool", "storage_order", OQ_ATTR_INT},
    {"MaxPool", "strides", OQ_ATTR_INTS},
    {"LpPool", "auto_pad", OQ_ATTR_STRING},
    {"LpPool", "kernel_shape", OQ_ATTR_INTS},
    {"LpPool", "pads", OQ_ATTR_INTS},
    {"LpPool", "strides", OQ_ATTR_INTS},
    {"Gemm", "alpha", OQ_ATTR_FLOAT},
    {"Gemm", "beta", OQ_ATTR_FLOAT},
    {"Gemm", "transA", OQ_ATTR_INT},
    {"Gemm", "transB", OQ_ATTR_INT},
    {"Gemm", "broadcast", OQ_ATTR_INT},
    {"QuantizeLinear", "axis", OQ_ATTR_INT},
    {"QuantizeLinear", "saturate", OQ_ATTR_INT},
    {"QuantizeLinear", "block_size", OQ_ATTR_INT},
    {"QuantizeLinear", "output_dtype", OQ_ATTR_INT},
    {"QuantizeLinear", "precision", OQ_ATTR_INT},
    {"DequantizeLinear", "axis", OQ_ATTR_INT},
    {"DequantizeLinear", "block_size", OQ_ATTR_INT},
    {"DequantizeLinear", "output_dtype", OQ_ATTR_INT},
    {"Reshape", "allowzero", OQ_ATTR_INT},
    {"Reshape", "shape", OQ_ATTR_INTS},
    {"Transpose", "perm", OQ_ATTR_INTS},
    {"Concat", "axis", OQ_ATTR_INT},
    {"Softmax", "axis", OQ_ATTR_INT},
    {"LogSoftmax", "axis", OQ_ATTR_INT},
    {"Hardmax", "axis", OQ_ATTR_INT},
    {"Cast", "to", OQ_ATTR_INT},
    {"Cast", "saturate", OQ_ATTR_INT},
    {"Cast", "round_mode", OQ_ATTR_STRING},
    {"Clip", "min", OQ_ATTR_FLOAT},
    {"Clip", "max", OQ_ATTR_FLOAT},
    {"Resize", "mode", OQ_ATTR_STRING},
    {"Resize", "coordinate_transformation_mode", OQ_ATTR_STRING},
    {"Resize", "cubic_coeff_a", OQ_ATTR_FLOAT},
    {"Resize", "exclude_outside", OQ_ATTR_INT},
    {"Resize", "extrapolation_value", OQ_ATTR_FLOAT},
    {"Resize", "nearest_mode", OQ_ATTR_STRING},
    {"Resize", "antialias", OQ_ATTR_INT},
    {"Resize", "axes", OQ_ATTR_INTS},
    {"Resize", "keep_aspect_ratio_policy", OQ_ATTR_STRING},
    {"Upsample", "mode", OQ_ATTR_STRING},
    {"Upsample", "scales", OQ_ATTR_FLOATS},
    {"BatchNormalization", "epsilon", OQ_ATTR_FLOAT},
    {"BatchNormalization", "momentum", OQ_ATTR_FLOAT},
    {"BatchNormalization", "training_mode", OQ_ATTR_INT},
    {"BatchNormalization", "spatial", OQ_ATTR_INT},
    {"BatchNormalization", "is_test", OQ_ATTR_INT},
    {"InstanceNormalization", "epsilon", OQ_ATTR_FLOAT},
    {"LayerNormalization", "axis", OQ_ATTR_INT},
    {"LayerNormalization", "epsilon", OQ_ATTR_FLOAT},
    {"LayerNormalization", "stash_type", OQ_ATTR_INT},
    {"LRN", "alpha", OQ_ATTR_FLOAT},
    {"LRN", "beta", OQ_ATTR_FLOAT},
    {"LRN", "bias", OQ_ATTR_FLOAT},
    {"LRN", "size", OQ_ATTR_INT},
    {"LeakyRelu", "alpha", OQ_ATTR_FLOAT},
    {"Elu", "alpha", OQ_ATTR_FLOAT},
    {"Celu", "alpha", OQ_ATTR_FLOAT},
    {"Selu", "alpha", OQ_ATTR_FLOAT},
    {"Selu", "gamma", OQ_ATTR_FLOAT},
    {"HardSigmoid", "alpha", OQ_ATTR_FLOAT},
    {"HardSigmoid", "beta", OQ_ATTR_FLOAT},
    {"ThresholdedRelu", "alpha", OQ_ATTR_FLOAT},
    {"Gelu", "approximate", OQ_ATTR_STRING},
    {"Flatten", "axis", OQ_ATTR_INT},
    {"Gather", "axis", OQ_ATTR_INT},
    {"GatherElements", "axis", OQ_ATTR_INT},
    {"GatherND", "batch_dims", OQ_ATTR_INT},
    {"ScatterElements", "axis", OQ_ATTR_INT},
    {"ScatterElements", "reduction", OQ_ATTR_STRING},
    {"Split", "axis", OQ_ATTR_INT},
    {"Split", "split", OQ_ATTR_INTS},
    {"Split", "num_outputs", OQ_ATTR_INT},
    {"Squeeze", "axes", OQ_ATTR_INTS},
    {"Unsqueeze", "axes", OQ_ATTR_INTS},
    REDUCE_ATTRS("ReduceMean"),
    REDUCE_ATTRS("ReduceSum"),
    REDUCE_ATTRS("ReduceMax"),
    REDUCE_ATTRS("ReduceMin"),
    REDUCE_ATTRS("ReduceProd"),
    REDUCE_ATTRS("ReduceL1"),
    REDUCE_ATTRS("ReduceL2"),
    REDUCE_ATTRS("ReduceLogSum"),
    REDUCE_ATTRS("ReduceLogSumExp"),
    REDUCE_ATTRS("ReduceSumSquare"),
    {"ArgMax", "axis", OQ_ATTR_INT},
    {"ArgMax", "keepdims", OQ_ATTR_INT},
    {"ArgMax", "select_last_index", OQ_ATTR_INT},
    {"ArgMin", "axis", OQ_ATTR_INT},
    {"ArgMin", "keepdims", OQ_ATTR_INT},
    {"ArgMin", "select_last_index", OQ_ATTR_INT},
    {"Pad", "mode", OQ_ATTR_STRING},
    {"Pad", "pads", OQ_ATTR_INTS},
    {"Pad", "value", OQ_ATTR_FLOAT},
    {"Slice", "starts", OQ_ATTR_INTS},
    {"Slice", "ends", OQ_ATTR_INTS},
    {"Slice", "axes", OQ_ATTR_INTS},
    {"Constant", "value", OQ_ATTR_TENSOR},
    {"Constant", "value_float", OQ_ATTR_FLOAT},
    {"Constant", "value_floats", OQ_ATTR_FLOATS},
    {"Constant", "value_int", OQ_ATTR_INT},
    {"Constant", "value_ints", OQ_ATTR_INTS},
    {"Constant", "value_string", OQ_ATTR_STRING},
    {"Constant", "value_strings", OQ_ATTR_STRINGS},
    {"Constant", "sparse_value", OQ_ATTR_SPARSE_TENSOR},
    {"ConstantOfShape", "value", OQ_ATTR_TENSOR},
    {"Dropout", "ratio", OQ_ATTR_FLOAT},
    {"Dropout", "seed", OQ_ATTR_INT},
    {"DepthToSpace", "blocksize", OQ_ATTR_INT},
    {"DepthToSpace", "mode", OQ_ATTR_STRING},
    {"SpaceToDepth", "blocksize", OQ_ATTR_INT},
    {"Einsum", "equation", OQ_ATTR_STRING},
    {"TopK", "axis", OQ_ATTR_INT},
    {"TopK", "largest", OQ_ATTR_INT},
    {"TopK", "sorted", OQ_ATTR_INT},
    {"CumSum", "exclusive", OQ_ATTR_INT},
    {"CumSum", "reverse", OQ_ATTR_INT},
    {"OneHot", "axis", OQ_ATTR_INT},
    {"Trilu", "upper", OQ_ATTR_INT},
    {"Shape", "start", OQ_ATTR_INT},
    {"Shape", "end", OQ_ATTR_INT},
    {"EyeLike", "dtype", OQ_ATTR_INT},
    {"EyeLike", "k", OQ_ATTR_INT},
    {"GridSample", "align_corners", OQ_ATTR_INT},
    {"GridSample", "mode", OQ_ATTR_STRING},
    {"GridSample", "padding_mode", OQ_ATTR_STRING},
    {"If", "then_branch", OQ_ATTR_GRAPH},
    {"If", "else_branch", OQ_ATTR_GRAPH},
    {"Loop", "body", OQ_ATTR_GRAPH},
    {"Scan", "body", OQ_ATTR_GRAPH},
    {"Scan", "num_scan_inputs", OQ_ATTR_INT},
    {"Scan", "scan_input_axes", OQ_ATTR_INTS},
    {"Scan", "scan_input_directions", OQ_ATTR_INTS},
    {"Scan", "scan_output_axes", OQ_ATTR_INTS},
    {"Scan", "scan_output_directions", OQ_ATTR_INTS},
};

static void check_attrs(ck *c, const oq_node *n, const char *where)
{
	int onnx = oq_domain_of(n->domain) == OQ_DOM_ONNX;

	for (size_t i = 0; i < n->n_attrs; i++) {
		const oq_attr *a = &n->attrs[i];
		int dup = 0;

		for (size_t j = 0; j < i; j++)
			if (strcmp(n->attrs[j].name, a->name) == 0)
				dup = 1;
		if (dup) {
			report(c, where, "attr-duplicate",
			       "attribute '%s' appears more than once; keep one", a->name);
			continue;
		}
		if (a->type == OQ_ATTR_UNDEFINED) {
			report(c, where, "attr-undefined",
			       "attribute '%s' has type UNDEFINED and no value; set its type or "
			       "remove it",
			       a->name);
			continue;
		}
		if (!onnx)
			continue;
		for (size_t k = 0; k < sizeof attr_rules / sizeof attr_rules[0]; k++) {
			const attr_rule *r = &attr_rules[k];
			if (strcmp(r->op, n->op_type) || strcmp(r->name, a->name))
				continue;
			if (r->type != a->type)
				report(c, where, "attr-type",
				       "attribute '%s' is %s but %s expects %s", a->name,
				       oq_attr_type_name(a->type), n->op_type,
				       oq_attr_type_name(r->type));
			break;
		}
	}
}

/* ------------------------------------------------------------ Q/DQ legality */

static const oq_attr *int_attr(const oq_node *n, const char *name)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_INT ? a : NULL;
}

/* Zero-point payload all zero (an int32 DequantizeLinear has no real zero point). */
static int all_zero(const oq_tensor *t)
{
	const unsigned char *p = t->data;
	if (!p && t->nbytes)
		return 1; /* unknown payload: do not guess */
	for (size_t i = 0; i < t->nbytes; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Scale/zero-point shapes against x's, for a given (possibly negative) axis and block size. */
static void check_qdq_shapes(ck *c, const oq_node *n, const char *where, int64_t opset,
                             const vinfo *x, const vinfo *s, const vinfo *z, int has_z)
{
	const oq_attr *aa = int_attr(n, "axis"), *ab = int_attr(n, "block_size");
	int64_t axis = aa ? aa->i : 1, block = ab ? ab->i : 0, ax = -1;
	char xs[256], ss[256], zs[256];

	shape_str(x, xs, sizeof xs);
	shape_str(s, ss, sizeof ss);
	shape_str(z, zs, sizeof zs);
	if (ab && opset < 21)
		block = 0; /* reported as qdq-attr; the opset does not know it */
	if (block < 0) {
		report(c, where, "qdq-block-size",
		       "block_size is %lld; it must be positive (blocked) or 0", (long long)block);
		return;
	}
	if (x->rank >= 0 && (block > 0 || (s->rank >= 0 && !is_per_tensor(s)))) {
		if (axis < -x->rank || axis >= x->rank) {
			report(c, where, "qdq-axis",
			       "axis %lld is out of range [%d, %d] for input x of rank %d",
			       (long long)axis, -x->rank, x->rank - 1, x->rank);
			return;
		}
		ax = axis < 0 ? axis + x->rank : axis;
	}
	if (block > 0 && s->rank >= 0) {
		if (x->rank >= 0 && s->rank != x->rank) {
			report(c, where, "qdq-scale-shape",
			       "blocked scale %s must have the rank of x %s (block_size %lld, axis "
			       "%lld)",
			       ss, xs, (long long)block, (long long)axis);
		} else if (ax >= 0) {
			for (int d = 0; d < x->rank; d++) {
				int64_t want = x->dims[d];
				if (d == ax && want >= 0)
					want = (want + block - 1) / block;
				if (want >= 0 && s->dims[d] >= 0 && s->dims[d] != want) {
					report(c, where, "qdq-scale-shape",
					       "blocked scale %s does not fit x %s: dim %d must be "
					       "%lld "
					       "(%s, block_size %lld, axis %lld)",
					       ss, xs, d, (long long)want,
					       d == ax ? "ceil(x dim / block_size)"
					               : "equal to x's",
					       (long long)block, (long long)axis);
					break;
				}
			}
		}
	} else if (block == 0 && s->rank >= 0 && !is_per_tensor(s)) {
		if (s->rank > 1) {
			report(c, where, "qdq-scale-shape",
			       "scale %s has rank %d but %s: per-tensor needs a scalar, per-axis a "
			       "1-D scale; "
			       "blocked quantization needs block_size > 0 (opset >= 21)",
			       ss, s->rank,
			       ab && opset < 21 ? "block_size does not exist at this opset"
			                        : "block_size is 0");
		} else if (opset < 13) {
			report(c, where, "qdq-scale-shape",
			       "scale %s is per-axis, which needs opset >= 13 (model imports "
			       "%lld); use a scalar",
			       ss, (long long)opset);
		} else if (ax >= 0 && x->dims[ax] >= 0 && s->dims[0] >= 0 &&
		           s->dims[0] != x->dims[ax]) {
			report(c, where, "qdq-scale-shape",
			       "per-axis scale %s must have x.shape[%lld] = %lld elements (x %s)",
			       ss, (long long)axis, (long long)x->dims[ax], xs);
		}
	}
	if (has_z && s->rank >= 0 && z->rank >= 0 && !(is_per_tensor(s) && is_per_tensor(z))) {
		int same = s->rank == z->rank;
		for (int d = 0; same && d < s->rank; d++)
			if (s->dims[d] >= 0 && z->dims[d] >= 0 && s->dims[d] != z->dims[d])
				same = 0;
		if (!same)
			report(c, where, "qdq-zp-shape",
			       "zero point %s must have the shape of scale %s", zs, ss);
	}
}

static void check_qdq(ck *c, const oq_node *n, const char *where)
{
	int is_q = n->op == OQ_OP_QuantizeLinear;
	int64_t opset = oq_model_opset(c->m, n->domain);
	const oq_attr *od;
	vinfo x, s, z;
	int has_z;

	if (opset == 0)
		return; /* opset-import reports it */
	if (opset < 10) {
		report(c, where, "qdq-opset",
		       "%s does not exist before opset 10 (model imports %lld)", n->op_type,
		       (long long)opset);
		return;
	}
	for (size_t i = 0; i < n->n_attrs; i++) {
		const char *a = n->attrs[i].name;
		int64_t since = -1;
		if (!strcmp(a, "axis"))
			since = 13;
		else if (!strcmp(a, "block_size"))
			since = 21;
		else if (!strcmp(a, "output_dtype"))
			since = is_q ? 21 : 23;
		else if (is_q && !strcmp(a, "saturate"))
			since = 19;
		else if (is_q && !strcmp(a, "precision"))
			since = 23;
		if (since < 0)
			report(c, where, "qdq-attr", "%s has no attribute '%s'; remove it",
			       n->op_type, a);
		else if (opset < since)
			report(c, where, "qdq-attr",
			       "attribute '%s' needs opset >= %lld (model imports %lld); runtimes "
			       "reject it as "
			       "unrecognized",
			       a, (long long)since, (long long)opset);
	}
	if (n->n_inputs < 2 || n->n_inputs > 3 || !n->inputs[0] || !n->inputs[1] ||
	    n->n_outputs != 1) {
		report(c, where, "qdq-inputs",
		       "%s needs inputs (x, scale[, zero_point]) and one output; it has "
		       "%zu inputs and %zu outputs",
		       n->op_type, n->n_inputs, n->n_outputs);
		return;
	}
	has_z = n->n_inputs == 3 && n->inputs[2];
	value_info(n->inputs[0], &x, 0);
	value_info(n->inputs[1], &s, 0);
	if (has_z)
		value_info(n->inputs[2], &z, 0);
	else
		z.dtype = 0, z.rank = -1, z.t = NULL;

	/* element types */
	if (is_q) {
		if (x.dtype &&
		    !(x.dtype == OQ_DT_FLOAT || x.dtype == OQ_DT_INT32 ||
		      (opset >= 19 && (x.dtype == OQ_DT_FLOAT16 || x.dtype == OQ_DT_BFLOAT16))))
			report(c, where, "qdq-input-dtype",
			       "input x is %s; QuantizeLinear-%lld takes %s",
			       oq_dtype_name(x.dtype), (long long)opset,
			       opset >= 19 ? "float, float16, bfloat16 or int32"
			                   : "float or int32");
		if (s.dtype) {
			int ok = opset >= 23
			             ? (is_float_scale(s.dtype, opset) || s.dtype == OQ_DT_INT32)
			         : opset >= 19 ? (!x.dtype || s.dtype == x.dtype)
			                       : s.dtype == OQ_DT_FLOAT;
			if (!ok)
				report(c, where, "qdq-scale-dtype",
				       "scale is %s; QuantizeLinear-%lld needs %s",
				       oq_dtype_name(s.dtype), (long long)opset,
				       opset >= 23   ? "float, float16, bfloat16 or int32"
				       : opset >= 19 ? "the type of x"
				                     : "float");
		}
		if (has_z && z.dtype && !quant_type_ok(z.dtype, opset)) {
			int since = quant_type_since(z.dtype);
			if (since)
				report(c, where, "qdq-zp-dtype",
				       "zero point is %s, which QuantizeLinear accepts "
				       "from opset %d (model imports %lld)",
				       oq_dtype_name(z.dtype), since, (long long)opset);
			else
				report(c, where, "qdq-zp-dtype",
				       "zero point is %s; QuantizeLinear produces only "
				       "8/16/4/2-bit integer and float8/float4 types",
				       oq_dtype_name(z.dtype));
		}
		if ((od = int_attr(n, "output_dtype")) && od->i != 0 && opset >= 21) {
			if (!quant_type_ok((int)od->i, opset))
				report(c, where, "qdq-output-dtype",
				       "output_dtype %lld (%s) is not a type "
				       "QuantizeLinear-%lld produces",
				       (long long)od->i, oq_dtype_name((int)od->i),
				       (long long)opset);
			else if (has_z && z.dtype && z.dtype != od->i)
				report(c, where, "qdq-output-dtype",
				       "output_dtype is %s but the zero point is %s; "
				       "they must match",
				       oq_dtype_name((int)od->i), oq_dtype_name(z.dtype));
			else if (dtype_min_ir((int)od->i) > c->m->ir_version)
				report(c, where, "dtype-ir-version",
				       "output_dtype %s needs IR version >= %lld "
				       "(model has %lld)",
				       oq_dtype_name((int)od->i),
				       (long long)dtype_min_ir((int)od->i),
				       (long long)c->m->ir_version);
		}
	} else {
		if (x.dtype && !(x.dtype == OQ_DT_INT32 || quant_type_ok(x.dtype, opset))) {
			int since = quant_type_since(x.dtype);
			if (since)
				report(c, where, "qdq-input-dtype",
				       "input x is %s, which DequantizeLinear accepts "
				       "from opset %d (model imports %lld)",
				       oq_dtype_name(x.dtype), since, (long long)opset);
			else
				report(c, where, "qdq-input-dtype",
				       "input x is %s; DequantizeLinear takes "
				       "quantized integer/float8/float4 types or int32",
				       oq_dtype_name(x.dtype));
		}
		if (s.dtype && !is_float_scale(s.dtype, opset))
			report(c, where, "qdq-scale-dtype",
			       "scale is %s; DequantizeLinear-%lld needs %s",
			       oq_dtype_name(s.dtype), (long long)opset,
			       opset >= 24   ? "float, float16, bfloat16 or float8e8m0"
			       : opset >= 19 ? "float, float16 or bfloat16"
			                     : "float");
		if (has_z && z.dtype && x.dtype && z.dtype != x.dtype)
			report(c, where, "qdq-zp-dtype",
			       "zero point is %s but x is %s; they must match",
			       oq_dtype_name(z.dtype), oq_dtype_name(x.dtype));
		else if (has_z && x.dtype == OQ_DT_INT32 && z.t && !all_zero(z.t))
			report(c, where, "qdq-int32-zp",
			       "int32 input needs no zero point (or all zeros); this one "
			       "is non-zero");
		if ((od = int_attr(n, "output_dtype")) && od->i != 0 && opset >= 23 &&
		    !(od->i == OQ_DT_FLOAT || od->i == OQ_DT_FLOAT16 || od->i == OQ_DT_BFLOAT16))
			report(c, where, "qdq-output-dtype",
			       "output_dtype %lld (%s) must be float, float16 or "
			       "bfloat16",
			       (long long)od->i, oq_dtype_name((int)od->i));
	}
	check_qdq_shapes(c, n, where, opset, &x, &s, &z, has_z);
}

/* ------------------------------------------------------------- graph walk */

static void check_graph(ck *c, const oq_graph *g);

static void check_opset(ck *c, const oq_node *n, const char *where)
{
	const char *dom = n->domain;

	if (oq_model_opset(c->m, dom) != 0)
		return;
	/* canonical spelling so "" and "ai.onnx" are one domain */
	if (oq_domain_of(dom) != OQ_DOM_OTHER)
		dom = oq_domain_name(oq_domain_of(dom));
	for (size_t i = 0; i < c->n_domains; i++)
		if (strcmp(c->domains[i], dom) == 0)
			return;
	char **nd = realloc(c->domains, (c->n_domains + 1) * sizeof *nd);
	char *s = oq_strdup(dom);
	if (!nd || !s) {
		free(s);
		if (nd)
			c->domains = nd;
		c->rc = OQ_ENOMEM;
		return;
	}
	c->domains = nd;
	c->domains[c->n_domains++] = s;
	report(c, where, "opset-import",
	       "domain '%s' has no opset_import entry (first node of that domain); add one to the "
	       "model",
	       *dom ? dom : "ai.onnx");
}

/* Outer-scope value: defined, and (for topological order) produced before the node holding the
 * subgraph. */
static void check_outer_input(ck *c, const oq_value *v, const char *where)
{
	const oq_value *rv = resolve_c(v);
	char lbl[300], olbl[300];

	if (!is_defined(rv)) {
		report(c, where, "dangling-input",
		       "input '%s' is not defined in this graph nor in an enclosing one", v->name);
		return;
	}
	if (!rv->producer || rv->init || (rv->flags & OQ_V_INPUT))
		return;
	/* owner[d] holds the graph at depth d+1; find the one living in rv's graph */
	for (int d = c->depth - 1; d >= 0; d--) {
		const oq_node *o = c->owner[d];
		if (o->graph != rv->graph)
			continue;
		if (rv->producer->index >= o->index) {
			node_label(rv->producer, lbl, sizeof lbl);
			node_label(o, olbl, sizeof olbl);
			report(c, where, "topo-order",
			       "outer value '%s' is produced by node %s, which comes after node %s "
			       "that holds this "
			       "subgraph; reorder the nodes",
			       v->name, lbl, olbl);
		}
		return;
	}
}

/* The name is defined in an enclosing scope (visible to this subgraph). */
static const oq_value *outer_definition(const oq_graph *g, const char *name)
{
	for (const oq_graph *p = g->parent; p; p = p->parent) {
		const oq_value *o = oq_graph_find(p, name);
		if (o && !(o->flags & OQ_V_OUTER) && is_defined(o))
			return o;
	}
	return NULL;
}

static int check_sub(oq_graph *sub, oq_node *owner, void *ctx)
{
	ck *c = ctx;

	if (c->depth >= MAX_NEST)
		return OQ_OK;
	c->owner[c->depth++] = owner;
	check_graph(c, sub);
	c->depth--;
	return c->rc;
}

static void check_node(ck *c, const oq_node *n)
{
	char where[600], lbl[300];

	node_where(n, where, sizeof where);
	if (!*n->op_type)
		report(c, where, "op-type", "the node has no op_type; every node needs one");
	check_opset(c, n, where);
	check_attrs(c, n, where);
	for (size_t k = 0; k < n->n_inputs; k++) {
		const oq_value *v = n->inputs[k];
		if (!v)
			continue;
		if (v->flags & OQ_V_OUTER) {
			check_outer_input(c, v, where);
		} else if (v->init || (v->flags & OQ_V_INPUT) ||
		           is_sparse_name(v->graph, v->name)) {
			continue;
		} else if (!v->producer) {
			report(c, where, "dangling-input",
			       "input '%s' is not a graph input, initializer or output of any node",
			       v->name);
		} else if (v->producer->index >= n->index) {
			node_label(v->producer, lbl, sizeof lbl);
			report(c, where, "topo-order",
			       "input '%s' is produced by node %s, which comes %s; sort the nodes "
			       "topologically",
			       v->name, lbl, v->producer == n ? "is this node itself" : "later");
		}
	}
	for (size_t k = 0; k < n->n_outputs; k++) {
		const oq_value *v = n->outputs[k], *o;
		int earlier = 0;
		if (!v)
			continue;
		for (size_t j = 0; j < k; j++)
			if (n->outputs[j] == v)
				earlier = 1;
		if (earlier) {
			report(c, where, "multiple-def", "output '%s' is listed twice by this node",
			       v->name);
		} else if (v->init) {
			report(c, where, "multiple-def",
			       "output '%s' is also an initializer; rename one", v->name);
		} else if (v->flags & OQ_V_INPUT) {
			report(c, where, "multiple-def",
			       "output '%s' is also a graph input; rename one", v->name);
		} else if (v->producer && v->producer != n) {
			node_label(v->producer, lbl, sizeof lbl);
			report(c, where, "multiple-def",
			       "output '%s' is also produced by node %s; rename one", v->name, lbl);
		} else if (n->graph->parent && (o = outer_definition(n->graph, v->name)) != NULL) {
			report(c, where, "multiple-def",
			       "output '%s' shadows a value of an enclosing graph; names must be "
			       "unique across "
			       "visible scopes",
			       v->name);
		}
	}
	if (n->op == OQ_OP_QuantizeLinear || n->op == OQ_OP_DequantizeLinear)
		check_qdq(c, n, where);
}

/* Initializer payload and declared element types (each value once). */
static void check_values(ck *c, const oq_graph *g)
{
	char where[600];

	for (size_t i = 0; i < g->n_values; i++) {
		const oq_value *v = g->values[i];
		const oq_tensor *t = v->init;
		int dt = 0;

		if (t) {
			size_t nelem, nbytes;
			int negative = 0;
			value_where("initializer", v, where, sizeof where);
			for (int d = 0; d < t->rank; d++)
				if (t->dims[d] < 0)
					negative = 1;
			if (!oq_dtype_valid(t->dtype)) {
				report(c, where, "init-dtype",
				       "data_type %d is not an ONNX element type", t->dtype);
				continue;
			}
			if (negative || t->rank < 0 || t->rank > OQ_MAX_RANK) {
				report(c, where, "init-dims", "dims must be non-negative (rank %d)",
				       t->rank);
				continue;
			}
			if (oq_shape_size(t->dtype, t->rank, t->dims, &nelem, &nbytes)) {
				report(c, where, "init-size", "its size overflows");
				continue;
			}
			if (t->dtype == OQ_DT_STRING
			        ? (nelem != t->nelem || (nelem && !t->strs))
			        : (nbytes != t->nbytes || (nbytes && !t->data))) {
				report(c, where, "init-size",
				       "%s dims need %zu bytes but it holds %zu",
				       oq_dtype_name(t->dtype), nbytes, t->nbytes);
				continue;
			}
			dt = t->dtype;
		} else if (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype &&
		           !(v->flags & OQ_V_OUTER)) {
			value_where((v->flags & OQ_V_INPUT)    ? "graph input"
			            : (v->flags & OQ_V_OUTPUT) ? "graph output"
			                                       : "value",
			            v, where, sizeof where);
			if (!oq_dtype_valid(v->type.dtype)) {
				report(c, where, "value-dtype",
				       "declared element type %d is not an ONNX element type",
				       v->type.dtype);
				continue;
			}
			dt = v->type.dtype;
		}
		if (dt && dtype_min_ir(dt) > c->m->ir_version)
			report(c, where, "dtype-ir-version",
			       "element type %s needs IR version >= %lld (model has "
			       "%lld); raise ir_version",
			       oq_dtype_name(dt), (long long)dtype_min_ir(dt),
			       (long long)c->m->ir_version);
	}
}

static int cmp_node_name(const void *a, const void *b)
{
	const oq_node *x = *(const oq_node *const *)a, *y = *(const oq_node *const *)b;
	int r = strcmp(x->name, y->name);
	return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* Two nodes of one graph with the same non-empty name (ONNX Runtime refuses to load them). */
static void check_node_names(ck *c, const oq_graph *g)
{
	char where[600];
	const oq_node **v;

	if (g->n_nodes < 2)
		return;
	if (!(v = malloc(g->n_nodes * sizeof *v))) {
		c->rc = OQ_ENOMEM;
		return;
	}
	for (size_t i = 0; i < g->n_nodes; i++)
		v[i] = g->nodes[i];
	qsort(v, g->n_nodes, sizeof *v, cmp_node_name);
	for (size_t i = 1; i < g->n_nodes; i++)
		if (v[i]->name[0] && strcmp(v[i]->name, v[i - 1]->name) == 0 &&
		    (i < 2 || strcmp(v[i]->name, v[i - 2]->name) != 0)) {
			node_where(v[i], where, sizeof where);
			report(c, where, "node-name",
			       "another node of this graph has the same name; ONNX Runtime refuses such "
			       "models: rename one");
		}
	free(v);
}

/*
 * Sparse initializers (COO): values [NNZ]; indices int64, [NNZ] linear
 * positions in the dense shape or [NNZ, rank] coordinates, each in range
 * (the ONNX SparseTensorProto rules a runtime densifies by).
 */
static void check_sparse(ck *c, const oq_graph *g)
{
	char where[600], gs[160];

	graph_suffix(g, gs, sizeof gs);
	for (size_t i = 0; i < g->n_sparse && !c->rc; i++) {
		const oq_sparse *sp = g->sparse_inits[i];
		const oq_tensor *v = sp->values, *x = sp->indices;
		size_t nnz, dense = 1;
		int64_t bad = -1;
		snprintf(where, sizeof where, "sparse initializer '%s'%s",
			 g->sparse_names[i] ? g->sparse_names[i] : "", gs);
		if (!v || !x || v->rank != 1) {
			report(c, where, "sparse-index", "needs values of rank 1 and indices");
			continue;
		}
		nnz = (size_t)v->dims[0];
		for (int k = 0; k < sp->rank; k++)
			if (sp->dims[k] < 0 || !oq_mul_size(dense, (size_t)sp->dims[k], &dense))
				dense = SIZE_MAX;
		if (x->dtype != OQ_DT_INT64 || !(x->rank == 1 || x->rank == 2) || (size_t)x->dims[0] != nnz ||
		    (x->rank == 2 && x->dims[1] != sp->rank)) {
			report(c, where, "sparse-index", "indices must be int64 [%zu] or [%zu, %d]", nnz, nnz,
			       sp->rank);
			continue;
		}
		for (size_t j = 0; j < x->nelem && bad < 0; j++) {
			int64_t ix = oq_tensor_get_int(x, j);
			int64_t hi = x->rank == 1 ? (int64_t)(dense > INT64_MAX ? INT64_MAX : dense)
						  : sp->dims[j % (size_t)sp->rank];
			if (ix < 0 || ix >= hi)
				bad = (int64_t)j;
		}
		if (bad >= 0)
			report(c, where, "sparse-index", "index %lld (entry %lld) is outside the dense shape",
			       (long long)oq_tensor_get_int(x, (size_t)bad), (long long)bad);
	}
}

static void check_graph(ck *c, const oq_graph *g)
{
	char where[600];

	check_values(c, g);
	check_sparse(c, g);
	check_node_names(c, g);
	for (size_t i = 0; i < g->n_inputs && !c->rc; i++)
		for (size_t j = 0; j < i; j++)
			if (g->inputs[j] == g->inputs[i]) {
				value_where("graph input", g->inputs[i], where, sizeof where);
				report(c, where, "multiple-def",
				       "listed twice in the graph inputs");
				break;
			}
	for (size_t i = 0; i < g->n_nodes && !c->rc; i++) {
		check_node(c, g->nodes[i]);
		/* subgraphs of this node, in attribute order */
		const oq_node *n = g->nodes[i];
		for (size_t k = 0; k < n->n_attrs && !c->rc; k++) {
			const oq_attr *a = &n->attrs[k];
			if (a->g)
				(void)check_sub(a->g, (oq_node *)n, c);
			for (size_t j = 0; a->graphs && j < a->n && !c->rc; j++)
				(void)check_sub(a->graphs[j], (oq_node *)n, c);
		}
	}
	for (size_t i = 0; i < g->n_outputs && !c->rc; i++) {
		const oq_value *v = g->outputs[i];
		value_where("graph output", v, where, sizeof where);
		if (!is_defined(resolve_c(v)))
			report(c, where, "graph-output",
			       "no node produces it and it is not a graph input or initializer");
	}
}

int oq_check_model(const oq_model *m, oq_problems *out)
{
	ck c;

	memset(&c, 0, sizeof c);
	c.m = m;
	c.out = out;
	if (!m->graph)
		report(&c, "model", "graph-output", "the model has no graph");
	else
		check_graph(&c, m->graph);
	for (size_t i = 0; i < c.n_domains; i++)
		free(c.domains[i]);
	free(c.domains);
	return c.rc;
}

void oq_problems_json(const oq_problems *p, FILE *f)
{
	fprintf(f, "\"valid\": %s, \"loaded\": true, \"problems\": [", p->n ? "false" : "true");
	for (size_t i = 0; i < p->n; i++) {
		fprintf(f, "%s{\"where\": ", i ? ", " : "");
		oq_json_str(f, p->v[i].where);
		fputs(", \"rule\": ", f);
		oq_json_str(f, p->v[i].rule);
		fputs(", \"message\": ", f);
		oq_json_str(f, p->v[i].msg);
		fputs("}", f);
	}
	fputs("]", f);
}

void oq_problems_print(const oq_problems *p, const char *path, int json, FILE *f)
{
	if (json) {
		fputs("{", f);
		oq_problems_json(p, f);
		fputs("}\n", f);
		return;
	}
	for (size_t i = 0; i < p->n; i++) {
		oq_text_str(f, path);
		fputs(": ", f);
		oq_text_str(f, p->v[i].where);
		fputs(": ", f);
		oq_text_str(f, p->v[i].msg);
		fprintf(f, " [%s]\n", p->v[i].rule);
	}
	if (!p->n) {
		oq_text_str(f, path);
		fputs(": valid\n", f);
	}
}
