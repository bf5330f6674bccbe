/*
 * test_placement.c - runtime-aware placement (--prefer speed|balanced|accuracy, fuse.c and
 * quantize.c), the units a placement leaves float (o->float_nodes), decision-safe placement
 * (passes/quantize/decision.c), float8 units ONNX Runtime would break on, and the runtime
 * coverage (src/report/coverage.c).
 *
 * Models are built in C, run through "fuse,quantize" with the verifier on and hand-set
 * ranges; expectations are hand-computed (scales from the ranges, MACs from the shapes) or
 * are ONNX Runtime's rules as its QDQ selectors state them (a Conv is QLinearConv only when
 * a DequantizeLinear feeds its input and weight and a QuantizeLinear is its only reader).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "passes/pass.h"
#include "qtest.h"
#include "runmodel.h"
#include "src/report/coverage.h"

static void run_passes(fx *f, const char *list)
{
	oq_pass_run run = {0};
	oq_diag d;
	run.list = list;
	run.verify = 1;
	oq_diag_init(&d);
	cr_assert_eq(oq_passes_run(f->m, &run, &f->o, &d), OQ_OK, "%s: %s", list, d.msg);
}

static oq_node *node_named(const oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (strcmp(g->nodes[i]->name, name) == 0)
			return g->nodes[i];
	return NULL;
}

static oq_value *value_named(const oq_graph *g, const char *name)
{
	oq_value *v = oq_graph_find(g, name);
	cr_assert_not_null(v, "no value '%s'", name);
	return v;
}

static size_t count_op(const oq_graph *g, oq_op op)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_nodes; i++)
		n += oq_node_is(g->nodes[i], op);
	return n;
}

/* Does a QuantizeLinear read value v? */
static int has_q(const oq_value *v)
{
	for (size_t i = 0; i < v->n_uses; i++)
		if (oq_node_is(v->uses[i].node, OQ_OP_QuantizeLinear))
			return 1;
	return 0;
}

static double scalar(const oq_value *v)
{
	cr_assert(v && v->init && v->init->nelem == 1, "not a scalar initializer");
	return oq_tensor_get(v->init, 0);
}

/* The QuantizeLinear reading v (the only one). */
static const oq_node *q_reading(const oq_value *v)
{
	for (size_t i = 0; i < v->n_uses; i++)
		if (oq_node_is(v->uses[i].node, OQ_OP_QuantizeLinear))
			return v->uses[i].node;
	cr_assert_fail("no QuantizeLinear reads '%s'", v->name);
	return NULL;
}

/* Coverage of f's quantized model (ORT), the entry of node `name`. */
static const oq_cov_node *cov_of(const oq_coverage *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->v[i].node->name, name) == 0)
			return &c->v[i];
	return NULL;
}

/* ------------------------------------------------------------ models */

static const double w4[4] = {0.5, -0.25, 0.75, 1.0};

/*
 * SiLU after a Conv: x[1,2,3,3] -> Conv(W[2,2,1,1], B[2]) "conv" -> t
 *   -> Sigmoid "sg" -> s; y = Mul(t, s) "mul"
 */
static gen_model *silu_model(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), w4);
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.1, -0.1));
	gen_node(g, mg, "Conv", "conv", "x,W,B", "t");
	gen_node(g, mg, "Sigmoid", "sg", "t", "s");
	gen_node(g, mg, "Mul", "mul", "t,s", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	return g;
}

static const rng silu_ranges[] = {{"x", -1, 1}, {"t", -10, 4}, {"s", 0, 1}, {"y", -0.3f, 4}};

/*
 * HardSwish after a Conv (x * Clip(x + 3, 0, 6) / 6): x -> Conv "conv" -> t;
 * a = Add(t, 3) "add"; c = Clip(a, 0, 6) "clip"; h = Div(c, 6) "div"; y = Mul(t, h) "mul".
 * Scaled (PaddleOCR's w * hardswish(t)): h2 = Mul(kw = 0.5, h) "mulk"; y = Mul(t, h2).
 */
static gen_model *hswish_graph(int scaled)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), w4);
	gen_init(g, mg, "three", OQ_DT_FLOAT, 0, NULL, GEN_VALS(3));
	gen_init(g, mg, "zero", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0));
	gen_init(g, mg, "six", OQ_DT_FLOAT, 0, NULL, GEN_VALS(6));
	gen_node(g, mg, "Conv", "conv", "x,W", "t");
	gen_node(g, mg, "Add", "add", "t,three", "a");
	gen_node(g, mg, "Clip", "clip", "a,zero,six", "c");
	gen_node(g, mg, "Div", "div", "c,six", "h");
	if (scaled) {
		gen_init(g, mg, "kw", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
		gen_node(g, mg, "Mul", "mulk", "kw,h", "h2");
	}
	gen_node(g, mg, "Mul", "mul", scaled ? "t,h2" : "t,h", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	return g;
}

static gen_model *hswish_model(void)
{
	return hswish_graph(0);
}

static const rng hswish_ranges[] = {{"x", -1, 1}, {"t", -8, 5}, {"a", -5, 8}, {"c", 0, 6},
				    {"h", 0, 1},  {"y", -0.375f, 5}};

/* ------------------------------------------------------------ fuse marks */

Test(placement, fuse_splits_the_unit_under_speed_keeps_it_under_accuracy)
{
	fx f = {0};
	f.gm = silu_model();
	fx_load_prefer(&f, silu_ranges, 4, OQ_PREFER_SPEED);
	run_passes(&f, "fuse");
	cr_assert_eq(value_named(f.m->graph, "t")->qmark, OQ_QM_SPLIT);
	cr_assert_eq(value_named(f.m->graph, "s")->qmark, 0, "nothing of the unit is internal");
	f.o.prefer = OQ_PREFER_ACCURACY;
	run_passes(&f, "fuse");
	cr_assert_eq(value_named(f.m->graph, "t")->qmark, OQ_QM_INTERNAL, "x joins the fused unit");
	cr_assert_eq(value_named(f.m->graph, "s")->qmark, OQ_QM_INTERNAL);
	cr_assert_eq(value_named(f.m->graph, "y")->qmark, OQ_QM_UNIT_OUT);
	fx_free(&f);
}

Test(placement, runtime_aware_only_for_types_with_integer_kernels)
{
	oq_opts o;
	oq_opts_init(&o);
	cr_assert(oq_runtime_aware(&o), "the default: ort, balanced, uint8 / int8");
	o.prefer = OQ_PREFER_ACCURACY;
	cr_assert(!oq_runtime_aware(&o));
	o.prefer = OQ_PREFER_SPEED;
	o.act_type = OQ_DT_UINT16;
	cr_assert(!oq_runtime_aware(&o), "16-bit activations: no integer unit in ORT");
	o.act_type = OQ_DT_UINT8;
	o.weight_type = OQ_DT_FLOAT8E4M3FN;
	cr_assert(!oq_runtime_aware(&o));
	o.weight_type = OQ_DT_INT8;
	o.profile = OQ_PROFILE_TRT;
	cr_assert(!oq_runtime_aware(&o));
}

/* ------------------------------------------------------------ Q after the Conv */

Test(placement, silu_speed_q_after_conv_accuracy_none)
{
	fx f = {0};
	oq_coverage cov;
	const oq_cov_node *c;
	oq_value *t;

	f.gm = silu_model();
	fx_load_prefer(&f, silu_ranges, 4, OQ_PREFER_SPEED);
	run_passes(&f, "fuse,quantize");
	t = value_named(f.m->graph, "t");
	/* ORT's Conv selector: the Q is the only reader of the Conv's output */
	cr_assert_eq(t->n_uses, 1);
	cr_assert(oq_node_is(t->uses[0].node, OQ_OP_QuantizeLinear));
	/* SiLU floor: |x sigmoid(x)| < (4 + 0.3) / 255 / 2 below x = -6.67253 (bisection, by hand
	 * in Python), inside t's calibrated [-10, 4]: the Q's range is [-6.67253, 4] */
	cr_assert_float_eq(scalar(t->uses[0].node->inputs[1]), (4 + 6.6725305) / 255, 1e-6);
	cr_assert_eq(oq_coverage_analyze(f.m, OQ_TARGET_ORT, NULL, &cov), OQ_OK);
	cr_assert_not_null(c = cov_of(&cov, "conv"));
	cr_assert(c->integer, "conv: %s", c->reason);
	cr_assert_str_eq(c->kernel, "QLinearConv");
	cr_assert_str_eq(cov_of(&cov, "sg")->kernel, "QLinearSigmoid");
	cr_assert_str_eq(cov_of(&cov, "mul")->kernel, "QLinearMul");
	oq_coverage_free(&cov);
	fx_free(&f);

	memset(&f, 0, sizeof f);
	f.gm = silu_model();
	fx_load_prefer(&f, silu_ranges, 4, OQ_PREFER_ACCURACY);
	run_passes(&f, "fuse,quantize");
	t = value_named(f.m->graph, "t");
	cr_assert(!has_q(t), "accuracy-first: Conv + SiLU is one float unit");
	cr_assert_eq(t->n_uses, 2);
	cr_assert_eq(oq_coverage_analyze(f.m, OQ_TARGET_ORT, NULL, &cov), OQ_OK);
	cr_assert_not_null(c = cov_of(&cov, "conv"));
	cr_assert(!c->integer);
	cr_assert_str_eq(c->reason, "no QuantizeLinear after the Conv (its output is read in float)");
	oq_coverage_free(&cov);
	fx_free(&f);
}

/* ------------------------------------------------------------ HardSwish as integer ops */

Test(placement, hardswish_speed_clip_in_q_div_folded_const_exact)
{
	fx f = {0};
	oq_graph *g;
	oq_value *t, *c, *h;
	const oq_node *add, *kdq, *hdq;
	oq_coverage cov;

	f.gm = hswish_model();
	fx_load_prefer(&f, hswish_ranges, 6, OQ_PREFER_SPEED);
	run_passes(&f, "fuse,quantize");
	g = f.m->graph;
	t = value_named(g, "t");
	/* the flat end: HardSwish is 0 below -3, so t's Q takes [-3, 5]: scale 8/255, zero point
	 * round(3 / (8/255)) = round(95.625) = 96 */
	cr_assert_float_eq(scalar(q_reading(t)->inputs[1]), 8.0 / 255, 1e-7, "t scale %g", scalar(q_reading(t)->inputs[1]));
	cr_assert_eq((int)scalar(q_reading(t)->inputs[2]), 96);
	/* the Clip went into c's Q ([0, 6]: zero point 0, 6 at 255); the Add writes c */
	cr_assert_null(node_named(g, "clip"));
	c = value_named(g, "c");
	cr_assert_eq(c->producer, node_named(g, "add"));
	cr_assert_float_eq(scalar(q_reading(c)->inputs[1]), 6.0 / 255, 1e-9);
	cr_assert_eq((int)scalar(q_reading(c)->inputs[2]), 0);
	/* Div by 6 folded: h is c's Q read with scale (6/255) / 6 */
	cr_assert_null(node_named(g, "div"));
	h = value_named(g, "h");
	cr_assert(oq_node_is(hdq = h->producer, OQ_OP_DequantizeLinear));
	cr_assert_eq(hdq->inputs[0], q_reading(c)->outputs[0]);
	cr_assert_float_eq(scalar(hdq->inputs[1]), 1.0 / 255, 1e-9);
	/* the constant 3 read through an exact DQ: 1 * 3 */
	add = node_named(g, "add");
	cr_assert(oq_node_is(kdq = add->inputs[1]->producer, OQ_OP_DequantizeLinear));
	cr_assert_eq(kdq->inputs[0]->init->dtype, OQ_DT_UINT8);
	cr_assert_eq(oq_tensor_get(kdq->inputs[0]->init, 0), 1);
	cr_assert_float_eq(scalar(kdq->inputs[1]), 3.0, 1e-9);
	cr_assert_eq(scalar(kdq->inputs[2]), 0);
	cr_assert_eq(oq_coverage_analyze(f.m, OQ_TARGET_ORT, NULL, &cov), OQ_OK);
	cr_assert_str_eq(cov_of(&cov, "conv")->kernel, "QLinearConv");
	cr_assert_str_eq(cov_of(&cov, "add")->kernel, "QLinearAdd");
	cr_assert_str_eq(cov_of(&cov, "mul")->kernel, "QLinearMul");
	cr_assert_eq(cov.n_qdq_float, 0);
	oq_coverage_free(&cov);
	fx_free(&f);
}

static const rng hswish_scaled_ranges[] = {{"x", -1, 1}, {"t", -8, 5},    {"a", -5, 8},        {"c", 0, 6},
					   {"h", 0, 1},  {"h2", 0, 0.5f}, {"y", -0.1875f, 2.5f}};

Test(placement, folded_chain_writes_no_unread_dequantize)
{
	fx f = {0};
	oq_graph *g;
	const oq_node *dq;

	f.gm = hswish_graph(1);
	fx_load_prefer(&f, hswish_scaled_ranges, 7, OQ_PREFER_SPEED);
	run_passes(&f, "fuse,quantize");
	g = f.m->graph;
	/* Div by 6 then Mul by 0.5 both fold: h2 is c's Q read with scale (6/255) / 6 * 0.5; h, read
	 * only by the folded Mul, gets no DequantizeLinear (ONNX Runtime would run it for nothing) */
	cr_assert_null(node_named(g, "div"));
	cr_assert_null(node_named(g, "mulk"));
	dq = value_named(g, "h2")->producer;
	cr_assert(dq && oq_node_is(dq, OQ_OP_DequantizeLinear));
	cr_assert_eq(dq->inputs[0], q_reading(value_named(g, "c"))->outputs[0]);
	cr_assert_float_eq(scalar(dq->inputs[1]), 0.5 / 255, 1e-9, "h2 scale %g", scalar(dq->inputs[1]));
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_value *o = g->nodes[i]->outputs[0];
		if (oq_node_is(g->nodes[i], OQ_OP_DequantizeLinear))
			cr_assert(o->n_uses || (o->flags & OQ_V_OUTPUT), "'%s' writes '%s', read by nothing",
				  g->nodes[i]->name, o->name);
	}
	cr_assert_eq(count_op(g, OQ_OP_DequantizeLinear), 6, "x, W, t, the constant 3, h2 and y");
	fx_free(&f);
}

Test(placement, hardswish_speed_numerics_within_steps)
{
	fx f = {0}, ref = {0};
	oq_rt in = {0}, out[2][1];
	size_t n;
	oq_diag d;
	const float *yq, *yf;

	f.gm = hswish_model();
	ref.gm = hswish_model();
	fx_load_prefer(&f, hswish_ranges, 6, OQ_PREFER_SPEED);
	fx_load_prefer(&ref, hswish_ranges, 6, OQ_PREFER_SPEED);
	run_passes(&f, "fuse,quantize");
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, 4, (const int64_t[]){1, 2, 3, 3}), OQ_OK);
	for (int i = 0; i < 18; i++)
		((float *)in.data)[i] = (float)((i * 7) % 13 - 6) / 6.0f;
	oq_diag_init(&d);
	cr_assert_eq(runmodel_run(f.m, &in, 1, out[0], 1, &n, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(runmodel_run(ref.m, &in, 1, out[1], 1, &n, &d), OQ_OK, "%s", d.msg);
	yq = out[0][0].data;
	yf = out[1][0].data;
	/* quantization points on the way: x (2/255), t (8/255), c (6/255: h 1/255, times |t| <= 5),
	 * y (5.375/255); each rounds by half a step, the Conv sums two weights <= 1 each */
	for (int i = 0; i < 18; i++)
		cr_assert(fabsf(yq[i] - yf[i]) <= 0.06f, "y[%d] %g vs float %g", i, yq[i], yf[i]);
	oq_rt_release(&in);
	oq_rt_release(&out[0][0]);
	oq_rt_release(&out[1][0]);
	fx_free(&f);
	fx_free(&ref);
}

/* ------------------------------------------------------------ float units */

Test(placement, float_nodes_stay_float_without_qdq)
{
	fx f = {0};
	static const char *const fl[] = {"conv", "mul", "sg"}; /* sorted */
	f.gm = silu_model();
	fx_load_prefer(&f, silu_ranges, 4, OQ_PREFER_SPEED);
	f.o.float_nodes = fl;
	f.o.n_float_nodes = 3;
	run_passes(&f, "fuse,quantize");
	/* the whole model is one float unit reading the float input: no Q/DQ at all, the weight float */
	cr_assert_eq(count_op(f.m->graph, OQ_OP_QuantizeLinear), 0);
	cr_assert_eq(count_op(f.m->graph, OQ_OP_DequantizeLinear), 0);
	cr_assert_not_null(oq_value_const(f.m->graph, node_named(f.m->graph, "conv")->inputs[1]));
	fx_free(&f);
}

Test(placement, range_needs_follow_the_runtime_aware_layout)
{
	fx f = {0};
	uint8_t need[64] = {0};
	oq_diag d;
	f.gm = hswish_model();
	fx_load_prefer(&f, hswish_ranges, 6, OQ_PREFER_SPEED);
	run_passes(&f, "fuse");
	oq_diag_init(&d);
	cr_assert_lt(f.m->graph->n_values, sizeof need);
	cr_assert_eq(oq_quantize_range_needs(f.m->graph, &f.o, need, &d), OQ_OK, "%s", d.msg);
	cr_assert(need[value_named(f.m->graph, "t")->index], "t gets its Q (after the Conv)");
	cr_assert(need[value_named(f.m->graph, "c")->index], "c gets the Q the Div folds into");
	cr_assert(!need[value_named(f.m->graph, "h")->index], "h reads c's Q: no range of its own");
	cr_assert(need[value_named(f.m->graph, "y")->index]);
	fx_free(&f);
}

/* ------------------------------------------------------------ decision-safe */

/*
 * Peak picking: x -> Conv "conv" -> z -> Sigmoid "sg" -> s -> MaxPool(3x3, pad 1) "pool" -> p;
 * e = Equal(p, s) "eq"; m = Cast(e -> float) "cast"; y = Mul(m, s) "mul"
 */
static gen_model *peaks_model(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), w4);
	gen_node(g, mg, "Conv", "conv", "x,W", "z");
	gen_node(g, mg, "Sigmoid", "sg", "z", "s");
	n = gen_node(g, mg, "MaxPool", "pool", "s", "p");
	gen_attr_ints(g, n, "kernel_shape", 2, (const int64_t[]){3, 3});
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(g, mg, "Equal", "eq", "p,s", "e");
	n = gen_node(g, mg, "Cast", "cast", "e", "m");
	gen_attr_int(g, n, "to", OQ_DT_FLOAT);
	gen_node(g, mg, "Mul", "mul", "m,s", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	return g;
}

static const rng peaks_ranges[] = {{"x", -1, 1}, {"z", -3, 3}, {"s", 0, 1}, {"p", 0, 1},
				   {"m", 0, 1},  {"y", 0, 1}};

Test(placement, decision_safe_peak_picking_chain_stays_float)
{
	int prefs[2] = {OQ_PREFER_ACCURACY, OQ_PREFER_SPEED};
	for (int k = 0; k < 2; k++) {
		fx f = {0};
		uint8_t keep[64] = {0};
		oq_graph *g;
		f.gm = peaks_model();
		fx_load_prefer(&f, peaks_ranges, 6, prefs[k]);
		g = f.m->graph;
		cr_assert_lt(g->n_values, sizeof keep);
		/* Equal's inputs p and s, s's order-preserving source z (MaxPool and Sigmoid keep order),
		 * and the Cast of the boolean: 4; the walk stops at the Conv */
		cr_assert_eq(oq_decision_safe_values(g, keep, NULL), 4);
		cr_assert(keep[value_named(g, "p")->index] && keep[value_named(g, "s")->index] &&
			  keep[value_named(g, "z")->index] && keep[value_named(g, "m")->index]);
		cr_assert(!keep[value_named(g, "x")->index]);
		run_passes(&f, "fuse,quantize");
		g = f.m->graph;
		cr_assert(!has_q(value_named(g, "z")) && !has_q(value_named(g, "s")) &&
			  !has_q(value_named(g, "p")) && !has_q(value_named(g, "m")),
			  "prefer %d: a value a decision reads got a Q", prefs[k]);
		cr_assert(has_q(value_named(g, "x")), "the Conv's input is still quantized");
		fx_free(&f);
	}
}

/*
 * Selections: x -> Conv "conv" -> l; i = ArgMax(l) "am"; (v, j) = TopK(l, 2) "tk" (axis 1);
 * w = Where(Greater(a, b) "gt", a, b) "wh" with a = Relu(l) "ra", b = Neg(l)... kept simple:
 * b a second input.
 */
Test(placement, decision_safe_argmax_topk_and_comparison_inputs)
{
	gen_model *g0 = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g0);
	Onnx__NodeProto *n;
	uint8_t keep[64] = {0};
	oq_model *m;
	oq_diag d;

	gen_opset(g0, "", 13);
	gen_input(g0, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_input(g0, mg, "b", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_init(g0, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), w4);
	gen_init(g0, mg, "K", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(2));
	gen_node(g0, mg, "Conv", "conv", "x,W", "l");
	n = gen_node(g0, mg, "ArgMax", "am", "l", "i");
	gen_attr_int(g0, n, "axis", 1);
	n = gen_node(g0, mg, "TopK", "tk", "l,K", "v,j");
	gen_attr_int(g0, n, "axis", 1);
	gen_node(g0, mg, "Relu", "ra", "l", "a");
	gen_node(g0, mg, "Greater", "gt", "a,b", "cond");
	gen_node(g0, mg, "Where", "wh", "cond,a,b", "w");
	gen_output(g0, mg, "i", OQ_DT_INT64, GEN_SHAPE(1, 1, 3, 3));
	gen_output(g0, mg, "v", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_output(g0, mg, "w", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g0, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_lt(m->graph->n_values, sizeof keep);
	/* l (ArgMax, TopK), a and b (Greater); a's Relu carries order back to l: l, a, b */
	cr_assert_eq(oq_decision_safe_values(m->graph, keep, NULL), 3);
	cr_assert(keep[value_named(m->graph, "l")->index] && keep[value_named(m->graph, "a")->index] &&
		  keep[value_named(m->graph, "b")->index]);
	cr_assert(!keep[value_named(m->graph, "x")->index] && !keep[value_named(m->graph, "v")->index]);
	oq_model_free(m);
	gen_free(g0);
}

/* ------------------------------------------------------------ float8 in ONNX Runtime */

/* x -> Conv "c1" -> t -> Relu "r" -> u -> Conv "c2" -> y, opset 19 */
Test(placement, float8_units_onnx_runtime_would_fuse_are_broken)
{
	fx f = {0};
	Onnx__GraphProto *mg;
	f.gm = gen_new(9);
	mg = gen_graph(f.gm);
	gen_opset(f.gm, "", 19);
	gen_input(f.gm, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	gen_init(f.gm, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), w4);
	gen_init(f.gm, mg, "W2", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), w4);
	gen_node(f.gm, mg, "Conv", "c1", "x,W", "t");
	gen_node(f.gm, mg, "Relu", "r", "t", "u");
	gen_node(f.gm, mg, "Conv", "c2", "u,W2", "y");
	gen_output(f.gm, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 3, 3));
	{
		static const rng r[] = {{"x", -1, 1}, {"t", -2, 2}, {"u", 0, 2}, {"y", -2, 2}};
		fx_load_prefer(&f, r, 4, OQ_PREFER_BALANCED);
	}
	f.o.act_type = OQ_DT_FLOAT8E4M3FN;
	f.o.weight_type = OQ_DT_FLOAT8E4M3FN;
	f.o.act_sym = 1;
	run_passes(&f, "fuse,quantize");
	for (size_t i = 0; i < f.m->graph->n_nodes; i++)
		cr_assert(!oq_ort_fuses_float8(f.m->graph, f.m->graph->nodes[i]), "ORT would fuse '%s'",
			  f.m->graph->nodes[i]->name);
	cr_assert_gt(count_op(f.m->graph, OQ_OP_DequantizeLinear), 0, "the float8 weights stay");
	fx_free(&f);
}

/* ------------------------------------------------------------ coverage MACs */

Test(placement, coverage_macs_from_sizes)
{
	fx f = {0};
	oq_coverage cov;
	oq_value_sizes sz = {0};
	int64_t n[64], last[64];

	f.gm = silu_model();
	fx_load_prefer(&f, silu_ranges, 4, OQ_PREFER_SPEED);
	run_passes(&f, "fuse,quantize");
	cr_assert_lt(f.m->graph->n_values, 64);
	for (size_t i = 0; i < 64; i++)
		n[i] = last[i] = -1;
	/* t [1,2,3,3]: 18 outputs, each 2 input channels x 1 tap: 36 MACs */
	n[value_named(f.m->graph, "t")->index] = 18;
	sz.n = n;
	sz.last = last;
	sz.count = f.m->graph->n_values;
	cr_assert_eq(oq_coverage_analyze(f.m, OQ_TARGET_ORT, &sz, &cov), OQ_OK);
	cr_assert(cov.macs_known);
	cr_assert_float_eq(cov.macs_total, 36, 1e-9);
	cr_assert_float_eq(cov.macs_integer, 36, 1e-9);
	cr_assert_eq(cov.n_compute, 1);
	oq_coverage_free(&cov);
	fx_free(&f);
}
