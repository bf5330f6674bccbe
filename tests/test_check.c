/*
 * test_check.c - `onnxq check` rules: each rule fires on a model broken in
 * exactly that way, with the exact rule id, and stays silent on the valid
 * counterpart. Models are built in C (tests/util/gen_model.h) and loaded
 * through the real loader; the expected verdicts come from the ONNX spec
 * (onnx/defs/quantization, IR spec), not from the checker.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "src/report/check.h"
#include "gen_model.h"

/* ------------------------------------------------------------------ helpers */

static void dump(const oq_problems *p)
{
	for (size_t i = 0; i < p->n; i++)
		fprintf(stderr, "  %s: %s [%s]\n", p->v[i].where, p->v[i].msg, p->v[i].rule);
}

/* Loads the generated model and checks it; the model is freed, the problems returned. */
static oq_problems run_model(gen_model *g, oq_model *(*mutate)(oq_model *))
{
	oq_problems p = {0};
	oq_model *m;
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load failed: %s", d.msg);
	if (mutate)
		m = mutate(m);
	cr_assert_eq(oq_check_model(m, &p), OQ_OK);
	oq_model_free(m);
	return p;
}

static void expect_valid_m(gen_model *g, oq_model *(*mutate)(oq_model *))
{
	oq_problems p = run_model(g, mutate);
	if (p.n)
		dump(&p);
	cr_expect_eq(p.n, 0, "expected a valid model, got %zu problems", p.n);
	oq_problems_free(&p);
	gen_free(g);
}

/* rules: comma-separated rule ids, exactly the problems expected, in order. */
static void expect_rules_m(gen_model *g, oq_model *(*mutate)(oq_model *), const char *rules)
{
	oq_problems p = run_model(g, mutate);
	char buf[512];
	size_t i = 0;
	int ok = 1;

	snprintf(buf, sizeof buf, "%s", rules);
	for (char *r = strtok(buf, ","); r; r = strtok(NULL, ","), i++)
		if (i >= p.n || strcmp(p.v[i].rule, r) != 0)
			ok = 0;
	if (i != p.n)
		ok = 0;
	if (!ok)
		dump(&p);
	cr_expect(ok, "expected problems [%s], got %zu problems", rules, p.n);
	oq_problems_free(&p);
	gen_free(g);
}

#define expect_valid(g) expect_valid_m((g), NULL)
#define expect_rules(g, r) expect_rules_m((g), NULL, (r))

/* x[2,3] float -> Relu -> y, ai.onnx 17, IR 8: the base of the structural tests. */
static gen_model *base(Onnx__GraphProto **mg)
{
	gen_model *g = gen_new(8);
	gen_opset(g, "", 17);
	*mg = gen_graph(g);
	gen_input(g, *mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	return g;
}

/* --------------------------------------------------------- structure rules */

Test(check, topo_order)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Relu", "second", "a", "y");
	gen_node(g, mg, "Relu", "first", "x", "a");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "topo-order");

	g = base(&mg);
	gen_node(g, mg, "Relu", "first", "x", "a");
	gen_node(g, mg, "Relu", "second", "a", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);
}

/* ONNX Runtime refuses two nodes with one name ("two nodes with same node name"); empty names are fine. */
Test(check, node_name)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Relu", "dup", "x", "a");
	gen_node(g, mg, "Relu", "other", "a", "b");
	gen_node(g, mg, "Relu", "dup", "b", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "node-name");

	g = base(&mg);
	gen_node(g, mg, "Relu", "", "x", "a");
	gen_node(g, mg, "Relu", "", "a", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);
}

Test(check, topo_order_self_loop)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Add", "loop", "x,y", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "topo-order");
}

/* If with a then-branch that reads a main-graph value. */
static gen_model *if_model(int late_first, const char *then_in)
{
	Onnx__GraphProto *mg, *tb, *eb;
	Onnx__NodeProto *n;
	gen_model *g = base(&mg);

	gen_input(g, mg, "c", OQ_DT_BOOL, 0, NULL);
	if (late_first)
		gen_node(g, mg, "Relu", "late", "x", "late");
	n = gen_node(g, mg, "If", "if", "c", "out");
	tb = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, tb, "Identity", "t", then_in, "t_out");
	gen_output(g, tb, "t_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	eb = gen_attr_graph(g, n, "else_branch", "else");
	gen_node(g, eb, "Identity", "e", "x", "e_out");
	gen_output(g, eb, "e_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	if (!late_first)
		gen_node(g, mg, "Relu", "late", "x", "late");
	gen_output(g, mg, "out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, mg, "late", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	return g;
}

Test(check, outer_scope)
{
	/* outer value produced before the If: valid */
	expect_valid(if_model(1, "late"));
	/* outer value produced after the If that holds the subgraph */
	expect_rules(if_model(0, "late"), "topo-order");
	/* name defined nowhere */
	expect_rules(if_model(1, "nowhere"), "dangling-input");
}

Test(check, multiple_def)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Relu", "a", "x", "y");
	gen_node(g, mg, "Sigmoid", "b", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "multiple-def");

	/* a node output that is a graph input */
	g = base(&mg);
	gen_node(g, mg, "Relu", "a", "x", "x");
	gen_output(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "multiple-def");

	/* a node output that is an initializer */
	g = base(&mg);
	gen_init(g, mg, "w", OQ_DT_FLOAT, GEN_SHAPE(2, 3), NULL);
	gen_node(g, mg, "Relu", "a", "x", "w");
	gen_output(g, mg, "w", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "multiple-def");

	/* the same name twice in one node's outputs */
	g = base(&mg);
	gen_node(g, mg, "Split", "s", "x", "p,p");
	gen_output(g, mg, "p", OQ_DT_FLOAT, GEN_SHAPE(1, 3));
	expect_rules(g, "multiple-def");
}

Test(check, subgraph_shadowing)
{
	Onnx__GraphProto *mg, *tb, *eb;
	Onnx__NodeProto *n;
	gen_model *g = base(&mg);

	gen_input(g, mg, "c", OQ_DT_BOOL, 0, NULL);
	gen_node(g, mg, "Relu", "r", "x", "r_out");
	n = gen_node(g, mg, "If", "if", "c", "out");
	tb = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, tb, "Identity", "t", "x", "r_out"); /* shadows the outer r_out */
	gen_output(g, tb, "r_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	eb = gen_attr_graph(g, n, "else_branch", "else");
	gen_node(g, eb, "Identity", "e", "x", "e_out");
	gen_output(g, eb, "e_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, mg, "out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, mg, "r_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "multiple-def");
}

Test(check, dangling_input)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Add", "a", "x,bias", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "dangling-input");

	g = base(&mg);
	gen_init(g, mg, "bias", OQ_DT_FLOAT, GEN_SHAPE(3), NULL);
	gen_node(g, mg, "Add", "a", "x,bias", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);

	/* omitted optional inputs ("") are not dangling */
	g = base(&mg);
	gen_node(g, mg, "Clip", "c", "x,,", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);
}

Test(check, graph_output)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Relu", "a", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "graph-output");

	/* a graph input may be a graph output */
	g = base(&mg);
	gen_output(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);
}

Test(check, opset_import)
{
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	gen_model *g = base(&mg);
	n = gen_node(g, mg, "Gelu", "ms", "x", "y");
	gen_domain(g, n, "com.microsoft");
	n = gen_node(g, mg, "FusedGemm", "ms2", "y", "z"); /* same domain: reported once */
	gen_domain(g, n, "com.microsoft");
	gen_output(g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "opset-import");

	g = base(&mg);
	gen_opset(g, "com.microsoft", 1);
	n = gen_node(g, mg, "Gelu", "ms", "x", "y");
	gen_domain(g, n, "com.microsoft");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);

	/* ai.onnx nodes, no ai.onnx import */
	g = gen_new(8);
	gen_opset(g, "com.microsoft", 1);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_node(g, mg, "Relu", "r", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "opset-import");

	/* "ai.onnx" spelled out is the default domain */
	g = gen_new(8);
	gen_opset(g, "ai.onnx", 17);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_node(g, mg, "Relu", "r", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_valid(g);
}

/* -------------------------------------------------------- attribute rules */

static gen_model *conv_model(Onnx__NodeProto **n)
{
	Onnx__GraphProto *mg;
	gen_model *g = gen_new(8);
	gen_opset(g, "", 17);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 4, 4));
	gen_init(g, mg, "w", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), NULL);
	*n = gen_node(g, mg, "Conv", "conv1", "x,w", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 4, 4));
	return g;
}

Test(check, attr_type)
{
	Onnx__NodeProto *n;
	gen_model *g = conv_model(&n);
	gen_attr_float(g, n, "group", 1.0f);
	expect_rules(g, "attr-type");

	g = conv_model(&n);
	gen_attr_int(g, n, "kernel_shape", 1);
	gen_attr_int(g, n, "auto_pad", 0);
	expect_rules(g, "attr-type,attr-type");

	g = conv_model(&n);
	gen_attr_int(g, n, "group", 1);
	gen_attr_ints(g, n, "kernel_shape", 2, (const int64_t[]){1, 1});
	gen_attr_str(g, n, "auto_pad", "NOTSET");
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){1, 1});
	expect_valid(g);
}

Test(check, attr_undefined_and_duplicate)
{
	Onnx__NodeProto *n;
	gen_model *g = conv_model(&n);
	gen_attr(g, n, "group", 0); /* no type, no value */
	expect_rules(g, "attr-undefined");

	g = conv_model(&n);
	gen_attr_int(g, n, "group", 1);
	gen_attr_int(g, n, "group", 1);
	expect_rules(g, "attr-duplicate");
}

/* ------------------------------------------------------ initializer rules */

static oq_model *init_negative_dim(oq_model *m)
{
	m->graph->inits[0]->init->dims[0] = -2;
	return m;
}

static oq_model *init_bad_dtype(oq_model *m)
{
	m->graph->inits[0]->init->dtype = 99;
	return m;
}

static oq_model *init_short_payload(oq_model *m)
{
	m->graph->inits[0]->init->dims[0] = 5; /* [5,3] floats need 60 bytes, the payload has 24 */
	return m;
}

static gen_model *init_model(void)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_init(g, mg, "b", OQ_DT_FLOAT, GEN_SHAPE(2, 3), GEN_VALS(1, 2, 3, 4, 5, 6));
	gen_node(g, mg, "Add", "add", "x,b", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	return g;
}

Test(check, initializers)
{
	/* the loader refuses these in files; the IR can still be edited into them */
	expect_rules_m(init_model(), init_negative_dim, "init-dims");
	expect_rules_m(init_model(), init_bad_dtype, "init-dtype");
	expect_rules_m(init_model(), init_short_payload, "init-size");
	expect_valid(init_model());
}

Test(check, dtype_ir_version)
{
	Onnx__GraphProto *mg;
	gen_model *g = gen_new(9);
	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_init(g, mg, "w", OQ_DT_INT4, GEN_SHAPE(2), GEN_VALS(-8, 7));
	gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
	gen_node(g, mg, "DequantizeLinear", "dq", "w,s", "wf");
	gen_node(g, mg, "Add", "add", "x,wf", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	expect_rules(g, "dtype-ir-version");

	/* float8 input declared at IR 8 */
	g = gen_new(8);
	gen_opset(g, "", 19);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT8E4M3FN, GEN_SHAPE(2));
	gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
	gen_node(g, mg, "DequantizeLinear", "dq", "x,s", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	expect_rules(g, "dtype-ir-version");
}

/* ------------------------------------------------------------ Q/DQ rules */

/* Parts of a generated Q -> DQ model, for adding attributes and inputs. */
typedef struct qdq {
	gen_model *g;
	Onnx__GraphProto *mg;
	Onnx__NodeProto *q, *dq;
} qdq;

/*
 * x (float, xdims) -> QuantizeLinear(x, s[, z]) -> DequantizeLinear(q, s[, z]) -> y.
 * zdt 0: no zero point. Scale values 0.5, zero points 0.
 */
static qdq qdq_chain(int64_t ir, int64_t opset, int xrank, const int64_t *xdims, int srank,
                     const int64_t *sdims, int zdt, int zrank, const int64_t *zdims)
{
	qdq r;
	double vals[64];
	for (int i = 0; i < 64; i++)
		vals[i] = 0.5;
	r.g = gen_new(ir);
	gen_opset(r.g, "", opset);
	r.mg = gen_graph(r.g);
	gen_input(r.g, r.mg, "x", OQ_DT_FLOAT, xrank, xdims);
	gen_init(r.g, r.mg, "s", OQ_DT_FLOAT, srank, sdims, vals);
	if (zdt)
		gen_init(r.g, r.mg, "z", zdt, zrank, zdims, NULL);
	r.q = gen_node(r.g, r.mg, "QuantizeLinear", "q", zdt ? "x,s,z" : "x,s", "xq");
	r.dq = gen_node(r.g, r.mg, "DequantizeLinear", "dq", zdt ? "xq,s,z" : "xq,s", "y");
	gen_output(r.g, r.mg, "y", OQ_DT_FLOAT, xrank, xdims);
	return r;
}

/* W (wdt, wdims) -> DequantizeLinear(W, s[, z]) -> y. */
static qdq dq_weight(int64_t ir, int64_t opset, int wdt, int wrank, const int64_t *wdims, int srank,
                     const int64_t *sdims, int zdt, int zrank, const int64_t *zdims)
{
	qdq r;
	double ones[64];
	for (int i = 0; i < 64; i++)
		ones[i] = 1;
	r.g = gen_new(ir);
	gen_opset(r.g, "", opset);
	r.mg = gen_graph(r.g);
	gen_init(r.g, r.mg, "w", wdt, wrank, wdims, ones);
	gen_init(r.g, r.mg, "s", OQ_DT_FLOAT, srank, sdims, ones);
	if (zdt)
		gen_init(r.g, r.mg, "z", zdt, zrank, zdims, NULL);
	r.q = NULL;
	r.dq = gen_node(r.g, r.mg, "DequantizeLinear", "dq", zdt ? "w,s,z" : "w,s", "y");
	gen_output(r.g, r.mg, "y", OQ_DT_FLOAT, wrank, wdims);
	return r;
}

Test(check, qdq_valid_granularities)
{
	qdq r;
	/* per-tensor uint8, opset 10 */
	r = qdq_chain(5, 10, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	expect_valid(r.g);
	/* per-tensor with 1-element 1-D scale and zero point */
	r = qdq_chain(7, 13, GEN_SHAPE(2, 4), GEN_SHAPE(1), OQ_DT_INT8, GEN_SHAPE(1));
	expect_valid(r.g);
	/* per-axis int8 axis 1 (default), opset 13 */
	r = qdq_chain(7, 13, GEN_SHAPE(2, 4), GEN_SHAPE(4), OQ_DT_INT8, GEN_SHAPE(4));
	expect_valid(r.g);
	/* per-axis, negative axis */
	r = qdq_chain(7, 13, GEN_SHAPE(2, 4), GEN_SHAPE(2), OQ_DT_INT8, GEN_SHAPE(2));
	gen_attr_int(r.g, r.q, "axis", -2);
	gen_attr_int(r.g, r.dq, "axis", -2);
	expect_valid(r.g);
	/* blocked int4 weights, partial last block: 10 columns, block 4 -> 3 scales */
	r = dq_weight(10, 21, OQ_DT_INT4, GEN_SHAPE(2, 10), GEN_SHAPE(2, 3), OQ_DT_INT4,
	              GEN_SHAPE(2, 3));
	gen_attr_int(r.g, r.dq, "block_size", 4);
	expect_valid(r.g);
	/* blocked int8 Q -> DQ on axis 0 */
	r = qdq_chain(10, 21, GEN_SHAPE(4, 3), GEN_SHAPE(2, 3), OQ_DT_INT8, GEN_SHAPE(2, 3));
	gen_attr_int(r.g, r.q, "axis", 0);
	gen_attr_int(r.g, r.q, "block_size", 2);
	gen_attr_int(r.g, r.dq, "axis", 0);
	gen_attr_int(r.g, r.dq, "block_size", 2);
	expect_valid(r.g);
	/* int32 bias, no zero point */
	r = dq_weight(7, 13, OQ_DT_INT32, GEN_SHAPE(4), 0, NULL, 0, 0, NULL);
	expect_valid(r.g);
	/* output_dtype instead of a zero point, opset 21 */
	r = qdq_chain(10, 21, GEN_SHAPE(2, 4), 0, NULL, 0, 0, NULL);
	gen_attr_int(r.g, r.q, "output_dtype", OQ_DT_INT4);
	expect_valid(r.g);
}

Test(check, qdq_per_axis_scale_length)
{
	qdq r = qdq_chain(7, 13, GEN_SHAPE(2, 4), GEN_SHAPE(3), OQ_DT_INT8, GEN_SHAPE(3));
	/* Q and DQ are each wrong (DQ's x shape is inferred through the Q) */
	expect_rules(r.g, "qdq-scale-shape,qdq-scale-shape");

	r = dq_weight(7, 13, OQ_DT_INT8, GEN_SHAPE(4, 3), GEN_SHAPE(3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", 0);
	expect_rules(r.g, "qdq-scale-shape");
}

Test(check, qdq_per_axis_needs_opset13)
{
	qdq r = dq_weight(5, 10, OQ_DT_INT8, GEN_SHAPE(4, 3), GEN_SHAPE(3), 0, 0, NULL);
	expect_rules(r.g, "qdq-scale-shape");
}

Test(check, qdq_axis_out_of_range)
{
	qdq r = dq_weight(7, 13, OQ_DT_INT8, GEN_SHAPE(4, 3), GEN_SHAPE(3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", 2);
	expect_rules(r.g, "qdq-axis");

	r = dq_weight(7, 13, OQ_DT_INT8, GEN_SHAPE(4, 3), GEN_SHAPE(4), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", -3);
	expect_rules(r.g, "qdq-axis");

	r = dq_weight(7, 13, OQ_DT_INT8, GEN_SHAPE(4, 3), GEN_SHAPE(4), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", -2);
	expect_valid(r.g);
}

Test(check, qdq_blocked_scale_shape)
{
	/* ceil(10/4) = 3 scales along axis 1, not 2 */
	qdq r = dq_weight(10, 21, OQ_DT_INT8, GEN_SHAPE(2, 10), GEN_SHAPE(2, 2), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	expect_rules(r.g, "qdq-scale-shape");
	/* other dims must equal x's */
	r = dq_weight(10, 21, OQ_DT_INT8, GEN_SHAPE(2, 10), GEN_SHAPE(1, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	expect_rules(r.g, "qdq-scale-shape");
	/* rank must equal x's */
	r = dq_weight(10, 21, OQ_DT_INT8, GEN_SHAPE(2, 10), GEN_SHAPE(3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	expect_rules(r.g, "qdq-scale-shape");
}

Test(check, qdq_block_size_zero_with_blocked_scale)
{
	qdq r = dq_weight(10, 21, OQ_DT_INT8, GEN_SHAPE(2, 10), GEN_SHAPE(2, 3), 0, 0, NULL);
	expect_rules(r.g, "qdq-scale-shape");
}

Test(check, qdq_block_size_negative)
{
	qdq r = dq_weight(10, 21, OQ_DT_INT8, GEN_SHAPE(2, 10), GEN_SHAPE(2, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", -4);
	expect_rules(r.g, "qdq-block-size");
}

Test(check, qdq_attributes_by_opset)
{
	/* block_size before opset 21 */
	qdq r = dq_weight(9, 19, OQ_DT_INT8, GEN_SHAPE(2, 10), GEN_SHAPE(2, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	expect_rules(r.g, "qdq-attr,qdq-scale-shape");
	/* axis at opset 10 */
	r = qdq_chain(5, 10, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "axis", 0);
	expect_rules(r.g, "qdq-attr");
	/* saturate at opset 13 (valid from 19) */
	r = qdq_chain(7, 13, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "saturate", 1);
	expect_rules(r.g, "qdq-attr");
	r = qdq_chain(9, 19, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "saturate", 1);
	expect_valid(r.g);
	/* DequantizeLinear has no saturate at any opset */
	r = qdq_chain(9, 19, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.dq, "saturate", 1);
	expect_rules(r.g, "qdq-attr");
}

Test(check, qdq_zero_point_shape)
{
	qdq r = qdq_chain(7, 13, GEN_SHAPE(2, 4), GEN_SHAPE(4), OQ_DT_INT8, 0, NULL);
	expect_rules(r.g, "qdq-zp-shape,qdq-zp-shape");
	r = dq_weight(10, 21, OQ_DT_INT4, GEN_SHAPE(2, 10), GEN_SHAPE(2, 3), OQ_DT_INT4,
	              GEN_SHAPE(2, 2));
	gen_attr_int(r.g, r.dq, "block_size", 4);
	expect_rules(r.g, "qdq-zp-shape");
}

Test(check, qdq_zero_point_dtype)
{
	/* int16 zero point needs opset 21 */
	qdq r = qdq_chain(9, 19, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_INT16, 0, NULL);
	expect_rules(r.g, "qdq-zp-dtype,qdq-input-dtype");
	/* float zero point is never a quantized type */
	r = qdq_chain(7, 13, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_FLOAT, 0, NULL);
	expect_rules(r.g, "qdq-zp-dtype,qdq-input-dtype");
	/* DQ zero point must have x's type */
	r = dq_weight(7, 13, OQ_DT_INT8, GEN_SHAPE(4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	expect_rules(r.g, "qdq-zp-dtype");
	/* int32 input: zero point must be 0 */
	{
		Onnx__GraphProto *mg;
		gen_model *g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_init(g, mg, "b", OQ_DT_INT32, GEN_SHAPE(2), GEN_VALS(5, 6));
		gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
		gen_init(g, mg, "z", OQ_DT_INT32, 0, NULL, GEN_VALS(3));
		gen_node(g, mg, "DequantizeLinear", "dq", "b,s,z", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		expect_rules(g, "qdq-int32-zp");
	}
}

Test(check, qdq_scale_dtype)
{
	/* float scale: valid */
	qdq r = dq_weight(7, 13, OQ_DT_INT8, GEN_SHAPE(4), 0, NULL, 0, 0, NULL);
	expect_valid(r.g);
	{
		Onnx__GraphProto *mg;
		/* float16 scale before opset 19 */
		gen_model *g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_init(g, mg, "w", OQ_DT_INT8, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_init(g, mg, "s", OQ_DT_FLOAT16, 0, NULL, GEN_VALS(0.5));
		gen_node(g, mg, "DequantizeLinear", "dq", "w,s", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT16, GEN_SHAPE(2));
		expect_rules(g, "qdq-scale-dtype");

		g = gen_new(9);
		gen_opset(g, "", 19);
		mg = gen_graph(g);
		gen_init(g, mg, "w", OQ_DT_INT8, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_init(g, mg, "s", OQ_DT_FLOAT16, 0, NULL, GEN_VALS(0.5));
		gen_node(g, mg, "DequantizeLinear", "dq", "w,s", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT16, GEN_SHAPE(2));
		expect_valid(g);

		/* an integer scale */
		g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_init(g, mg, "w", OQ_DT_INT8, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_init(g, mg, "s", OQ_DT_INT8, 0, NULL, GEN_VALS(1));
		gen_node(g, mg, "DequantizeLinear", "dq", "w,s", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		expect_rules(g, "qdq-scale-dtype");
	}
}

Test(check, qdq_input_dtype)
{
	/* int4 weights need opset 21 */
	qdq r = dq_weight(10, 19, OQ_DT_INT4, GEN_SHAPE(4), 0, NULL, 0, 0, NULL);
	expect_rules(r.g, "qdq-input-dtype");
	/* QuantizeLinear of int8 */
	{
		Onnx__GraphProto *mg;
		gen_model *g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_input(g, mg, "x", OQ_DT_INT8, GEN_SHAPE(2));
		gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
		gen_node(g, mg, "QuantizeLinear", "q", "x,s", "y");
		gen_output(g, mg, "y", OQ_DT_UINT8, GEN_SHAPE(2));
		expect_rules(g, "qdq-input-dtype");
	}
}

Test(check, qdq_output_dtype)
{
	qdq r = qdq_chain(10, 21, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_INT8, 0, NULL);
	gen_attr_int(r.g, r.q, "output_dtype", OQ_DT_UINT8);
	expect_rules(r.g, "qdq-output-dtype");
	r = qdq_chain(10, 21, GEN_SHAPE(2, 4), 0, NULL, 0, 0, NULL);
	gen_attr_int(r.g, r.q, "output_dtype", OQ_DT_FLOAT);
	/* DQ's x then is float too */
	expect_rules(r.g, "qdq-output-dtype,qdq-input-dtype");
}

Test(check, qdq_opset_and_inputs)
{
	qdq r = qdq_chain(4, 9, GEN_SHAPE(2, 4), 0, NULL, OQ_DT_UINT8, 0, NULL);
	expect_rules(r.g, "qdq-opset,qdq-opset");
	{
		Onnx__GraphProto *mg;
		gen_model *g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_node(g, mg, "QuantizeLinear", "q", "x", "y");
		gen_output(g, mg, "y", OQ_DT_UINT8, GEN_SHAPE(2));
		expect_rules(g, "qdq-inputs");
	}
}

Test(check, qdq_unknown_shapes_are_skipped)
{
	/* x has no declared shape: the per-axis length cannot be judged */
	qdq r = qdq_chain(7, 13, -1, NULL, GEN_SHAPE(5), OQ_DT_INT8, GEN_SHAPE(5));
	expect_valid(r.g);
	/* symbolic dim on the quantization axis */
	r = qdq_chain(7, 13, GEN_SHAPE(2, -1), GEN_SHAPE(5), OQ_DT_INT8, GEN_SHAPE(5));
	expect_valid(r.g);
}

Test(check, qdq_constant_node_scale)
{
	/* the scale comes from a Constant node: its tensor shape is used */
	Onnx__GraphProto *mg;
	Onnx__NodeProto *c;
	Onnx__AttributeProto *a;
	gen_model *g = gen_new(7);
	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 4));
	c = gen_node(g, mg, "Constant", "c", "", "s");
	a = gen_attr(g, c, "value", OQ_ATTR_TENSOR);
	a->t = gen_tensor(g, "", OQ_DT_FLOAT, GEN_SHAPE(3), GEN_VALS(1, 1, 1));
	gen_node(g, mg, "QuantizeLinear", "q", "x,s", "y");
	gen_output(g, mg, "y", OQ_DT_UINT8, GEN_SHAPE(2, 4));
	expect_rules(g, "qdq-scale-shape");
}

Test(check, problems_in_graph_order)
{
	/* problems come out in node order, subgraph problems at their node */
	Onnx__GraphProto *mg, *tb, *eb;
	Onnx__NodeProto *n;
	gen_model *g = base(&mg);
	oq_problems p;

	gen_input(g, mg, "c", OQ_DT_BOOL, 0, NULL);
	gen_node(g, mg, "Relu", "n0", "missing0", "a");
	n = gen_node(g, mg, "If", "n1", "c", "out");
	tb = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, tb, "Identity", "t", "missing1", "t_out");
	gen_output(g, tb, "t_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	eb = gen_attr_graph(g, n, "else_branch", "else");
	gen_node(g, eb, "Identity", "e", "x", "e_out");
	gen_output(g, eb, "e_out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_node(g, mg, "Relu", "n2", "missing2", "b");
	gen_output(g, mg, "out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, mg, "nothing", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	p = run_model(g, NULL);
	cr_assert_eq(p.n, 4);
	cr_expect_str_eq(p.v[0].where, "node 'n0' (Relu)");
	cr_expect_str_eq(p.v[1].where, "node 't' (Identity) in graph 'then'");
	cr_expect_str_eq(p.v[2].where, "node 'n2' (Relu)");
	cr_expect_str_eq(p.v[3].where, "graph output 'nothing'");
	cr_expect_str_eq(p.v[3].rule, "graph-output");
	oq_problems_free(&p);
	gen_free(g);
}

Test(check, problems_add_copies)
{
	oq_problems p = {0};
	char where[16] = "node 'a'";
	cr_assert_eq(oq_problems_add(&p, where, "rule-x", "value %d", 42), OQ_OK);
	where[0] = 'X';
	cr_expect_str_eq(p.v[0].where, "node 'a'");
	cr_expect_str_eq(p.v[0].msg, "value 42");
	cr_expect_str_eq(p.v[0].rule, "rule-x");
	oq_problems_free(&p);
	cr_expect_eq(p.n, 0);
}

Test(check, attr_type_qdq)
{
	qdq r = qdq_chain(7, 13, GEN_SHAPE(2, 4), GEN_SHAPE(4), OQ_DT_INT8, GEN_SHAPE(4));
	gen_attr_float(r.g, r.q, "axis", 1.0f);
	expect_rules(r.g, "attr-type");
}

Test(check, duplicate_graph_input)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_node(g, mg, "Relu", "r", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "multiple-def");
}

Test(check, value_dtype)
{
	Onnx__GraphProto *mg;
	gen_model *g = base(&mg);
	gen_node(g, mg, "Relu", "r", "x", "y");
	gen_output(g, mg, "y", 77, GEN_SHAPE(2, 3));
	expect_rules(g, "value-dtype");
}

Test(check, subgraph_output_not_produced)
{
	Onnx__GraphProto *mg, *tb, *eb;
	Onnx__NodeProto *n;
	gen_model *g = base(&mg);

	gen_input(g, mg, "c", OQ_DT_BOOL, 0, NULL);
	n = gen_node(g, mg, "If", "if", "c", "out");
	tb = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, tb, "Identity", "t", "x", "t_out");
	gen_output(g, tb, "t_missing", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	eb = gen_attr_graph(g, n, "else_branch", "else");
	gen_output(g, eb, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3)); /* an outer value as output: fine */
	gen_output(g, mg, "out", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	expect_rules(g, "graph-output");
}
