/*
 * test_quantize.c - unit tests of the quantize pass (passes/quantize/quantize.c) and
 * the --overrides parser (passes/quantize/overrides.c).
 *
 * Models are built in C (tests/util/gen_model), run through the pass driver
 * ("fuse,quantize", verifier on) with calibrated ranges set by hand, then
 * checked for structure (where the QuantizeLinear/DequantizeLinear nodes
 * are, which scales they share, graph input/output names and types, int32
 * biases) and for numerics: the executor on the quantized model against a
 * fake-quant result computed by hand (see numerics_conv1x1) and against
 * the float model within the quantization step.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "passes/quantize/overrides.h"
#include "passes/pass.h"
#include "src/quant/qparams.h"
#include "qtest.h"

/* ------------------------------------------------------------ helpers */

/* The accuracy-first layout; runtime-aware tests set o.prefer. */
static void fx_load(fx *f, const rng *r, size_t nr)
{
	fx_load_prefer(f, r, nr, OQ_PREFER_ACCURACY);
}

/* Runs fuse + quantize through the driver with the verifier on; returns the status. */
static int quantize(fx *f, oq_diag *d)
{
	oq_pass_run run = {0};
	run.list = "fuse,quantize";
	run.verify = 1;
	oq_diag_init(d);
	return oq_passes_run(f->m, &run, &f->o, d);
}

static void quantize_ok(fx *f)
{
	oq_diag d;
	int rc = quantize(f, &d);
	cr_assert_eq(rc, OQ_OK, "quantize: %s", d.msg);
}

static size_t count_op(const oq_graph *g, const char *op)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_nodes; i++)
		n += strcmp(g->nodes[i]->op_type, op) == 0;
	return n;
}

static oq_node *node_named(const oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (strcmp(g->nodes[i]->name, name) == 0)
			return g->nodes[i];
	return NULL;
}

/* The DequantizeLinear that input k of n reads, or NULL. */
static oq_node *dq_of(const oq_node *n, size_t k)
{
	oq_node *p;
	cr_assert(k < n->n_inputs && n->inputs[k], "node %s has no input %zu", n->name, k);
	p = n->inputs[k]->producer;
	return p && strcmp(p->op_type, "DequantizeLinear") == 0 ? p : NULL;
}

/* The QuantizeLinear before a DequantizeLinear. */
static oq_node *q_of(const oq_node *dq)
{
	oq_node *q = dq->inputs[0]->producer;
	cr_assert(q && strcmp(q->op_type, "QuantizeLinear") == 0, "no Q before %s", dq->name);
	return q;
}

static double scalar(const oq_value *v)
{
	cr_assert(v && v->init && v->init->nelem == 1, "not a scalar initializer");
	return oq_tensor_get(v->init, 0);
}

/* Runs m on one float input; copies the first output (n floats) into y. */
static void run1(oq_model *m, const float *x, int rank, const int64_t *dims, float *y, size_t n)
{
	oq_exec *e = NULL;
	oq_rt in = {0}, out = {0};
	oq_diag d;
	oq_exec_opts eo = {.threads = 1};

	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(in.data, x, in.nbytes);
	cr_assert_eq(oq_exec_run(e, &in, 1, &out, 1, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(out.dtype, OQ_DT_FLOAT);
	cr_assert_eq(out.nelem, n);
	memcpy(y, out.data, n * sizeof(float));
	oq_rt_release(&in);
	oq_rt_release(&out);
	oq_exec_free(e);
}

/* ------------------------------------------------------------ models */

/*
 * x[1,2,4,4] -> Conv(W[3,2,3,3], B[3], pads 1) "conv1" -> c -> Relu "relu1" -> r
 *   -> MaxPool(2x2, stride 2) "pool" -> p[1,3,2,2] -> Reshape([1,12]) "flat" -> f
 *   -> Gemm(B[4,12] transB, C[4]) "fc" -> y[1,4]
 */
static void build_cnn(fx *f, int opset)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	double w[54], fcw[48];

	for (int i = 0; i < 54; i++)
		w[i] = ((i * 7) % 11 - 5) * 0.05;
	for (int i = 0; i < 48; i++)
		fcw[i] = ((i * 5) % 13 - 6) * 0.04;
	gen_opset(g, "", opset);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 4, 4));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2, 3, 3), w);
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(3), GEN_VALS(0.1, -0.2, 0.05));
	gen_init(g, mg, "shape", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(1, 12));
	gen_init(g, mg, "fcW", OQ_DT_FLOAT, GEN_SHAPE(4, 12), fcw);
	gen_init(g, mg, "fcB", OQ_DT_FLOAT, GEN_SHAPE(4), GEN_VALS(0.01, 0.02, -0.03, 0.04));
	n = gen_node(g, mg, "Conv", "conv1", "x,W,B", "c");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(g, mg, "Relu", "relu1", "c", "r");
	n = gen_node(g, mg, "MaxPool", "pool", "r", "p");
	gen_attr_ints(g, n, "kernel_shape", 2, (const int64_t[]){2, 2});
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){2, 2});
	gen_node(g, mg, "Reshape", "flat", "p,shape", "f");
	n = gen_node(g, mg, "Gemm", "fc", "f,fcW,fcB", "y");
	gen_attr_int(g, n, "transB", 1);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	f->gm = g;
}

static const rng cnn_ranges[] = {
	{"x", -1.0f, 1.0f}, {"c", -2.0f, 2.0f}, {"r", 0.0f, 1.5f},
	{"p", 0.0f, 1.4f}, {"f", 0.0f, 1.4f},  {"y", -0.8f, 0.9f},
};

static void cnn_input(float *x)
{
	for (int i = 0; i < 32; i++)
		x[i] = ((i * 9) % 17 - 8) / 8.0f;
}

Test(quantize, cnn_structure)
{
	fx f = {0};
	oq_graph *g;
	oq_node *conv, *pool, *flat, *fc, *dq, *dqy;
	oq_value *y;

	build_cnn(&f, 13);
	fx_load(&f, cnn_ranges, 6);
	quantize_ok(&f);
	g = f.m->graph;

	/* Relu folded: the Conv writes r, no Q/DQ between Conv and the activation */
	cr_assert_eq(count_op(g, "Relu"), 0);
	conv = node_named(g, "conv1");
	cr_assert_str_eq(conv->outputs[0]->name, "r");
	/* activations x, r, p, f, y: 5 Q; 5 DQ + W, B, fcW, fcB */
	cr_assert_eq(count_op(g, "QuantizeLinear"), 5);
	cr_assert_eq(count_op(g, "DequantizeLinear"), 9);

	/* graph input x keeps its name and float type; the Conv reads its DQ */
	cr_assert_eq(g->n_inputs, 1);
	cr_assert_str_eq(g->inputs[0]->name, "x");
	cr_assert_eq(g->inputs[0]->type.dtype, OQ_DT_FLOAT);
	dq = dq_of(conv, 0);
	cr_assert_not_null(dq);
	cr_assert_eq(q_of(dq)->inputs[0], g->inputs[0]);
	cr_assert_str_eq(dq->outputs[0]->name, "x_DequantizeLinear_Output");
	cr_assert_str_eq(q_of(dq)->outputs[0]->name, "x_QuantizeLinear_Output");
	/* x: uint8 asymmetric on [-1, 1]: scale 2/255, zp round(0 + 1/scale) = round(127.5) = 128 */
	cr_assert_float_eq(scalar(dq->inputs[1]), 2.0 / 255, 1e-9);
	cr_assert_eq(dq->inputs[2]->init->dtype, OQ_DT_UINT8);
	cr_assert_eq(scalar(dq->inputs[2]), 128);

	/* r on [0, 1.5]: zp 0 = qmin, so the Q reproduces the Relu */
	pool = node_named(g, "pool");
	dq = dq_of(pool, 0);
	cr_assert_not_null(dq);
	cr_assert_eq(q_of(dq)->inputs[0]->name[0], 'r');
	cr_assert_float_eq(scalar(dq->inputs[1]), 1.5 / 255, 1e-9);
	cr_assert_eq(scalar(dq->inputs[2]), 0);
	/* MaxPool and Reshape outputs reuse r's scale, not their own ranges (1.4) */
	flat = node_named(g, "flat");
	fc = node_named(g, "fc");
	cr_assert_not_null(dq_of(flat, 0));
	cr_assert_not_null(dq_of(fc, 0));
	cr_assert_float_eq(scalar(dq_of(flat, 0)->inputs[1]), 1.5 / 255, 1e-9);
	cr_assert_float_eq(scalar(dq_of(fc, 0)->inputs[1]), 1.5 / 255, 1e-9);
	cr_assert_eq(flat->inputs[1]->init->dtype, OQ_DT_INT64, "Reshape's shape stays as it is");

	/* graph output y: Gemm writes a new value; the final DQ writes y (float, same name) */
	cr_assert_eq(g->n_outputs, 1);
	y = g->outputs[0];
	cr_assert_str_eq(y->name, "y");
	cr_assert_eq(y->type.dtype, OQ_DT_FLOAT);
	dqy = y->producer;
	cr_assert_str_eq(dqy->op_type, "DequantizeLinear");
	cr_assert_eq(q_of(dqy)->inputs[0]->producer, fc);
	cr_assert_str_eq(fc->outputs[0]->name, "y_QuantizeLinear_Input");

	/* weights: int8 initializers behind a DQ; biases int32 with scale s_in * s_w */
	dq = dq_of(conv, 1);
	cr_assert_not_null(dq);
	cr_assert_eq(dq->inputs[0]->init->dtype, OQ_DT_INT8);
	cr_assert_eq(dq->inputs[1]->init->nelem, 3, "per channel on axis 0");
	{
		oq_node *bdq = dq_of(conv, 2);
		const oq_tensor *ws = dq->inputs[1]->init, *bs;
		cr_assert_not_null(bdq);
		bs = bdq->inputs[1]->init;
		cr_assert_eq(bdq->inputs[0]->init->dtype, OQ_DT_INT32);
		cr_assert_eq(bs->nelem, 3);
		for (size_t c = 0; c < 3; c++)
			cr_assert_float_eq(oq_tensor_get(bs, c), (2.0 / 255) * oq_tensor_get(ws, c), 1e-10,
					   "bias scale of channel %zu", c);
	}
	dq = dq_of(fc, 1);
	cr_assert_not_null(dq);
	cr_assert_eq(dq->inputs[1]->init->nelem, 4, "Gemm transB: channel axis 0 of [4, 12]");
	{
		oq_node *bdq = dq_of(fc, 2);
		cr_assert_not_null(bdq);
		cr_assert_eq(bdq->inputs[0]->init->dtype, OQ_DT_INT32);
		for (size_t c = 0; c < 4; c++)
			cr_assert_float_eq(oq_tensor_get(bdq->inputs[1]->init, c),
					   (1.5 / 255) * oq_tensor_get(dq->inputs[1]->init, c), 1e-10);
	}
	/* the float weights are gone */
	cr_assert_null(oq_graph_find(g, "W") ? oq_graph_find(g, "W")->init : NULL);
	fx_free(&f);
}

Test(quantize, cnn_numerics_close_to_float)
{
	fx f = {0}, q = {0};
	float x[32], y0[4], y1[4];
	double err = 0, step;

	build_cnn(&f, 13);
	fx_load(&f, cnn_ranges, 6);
	build_cnn(&q, 13);
	fx_load(&q, cnn_ranges, 6);
	quantize_ok(&q);
	cnn_input(x);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 4, 4}, y0, 4);
	run1(q.m, x, 4, (const int64_t[]){1, 2, 4, 4}, y1, 4);
	for (int i = 0; i < 4; i++) {
		err = fmax(err, fabs(y0[i] - y1[i]));
		cr_assert(y0[i] >= -0.8f && y0[i] <= 0.9f, "range set for y must hold the float output");
	}
	/* output step 1.7/255 = 0.0067; the inputs add a few steps of error through 18- and 12-term sums */
	step = 1.7 / 255;
	cr_assert(err < 6 * step, "max |float - quantized| = %g", err);
	cr_assert(err > 0, "the quantized model must differ from the float one");
	fx_free(&f);
	fx_free(&q);
}

/*
 * The exact fake-quant check. x[1,2,1,2] -> Conv 1x1 (W[2,2,1,1], B[2]) -> y, every range
 * [-1.275, 1.275]: uint8 scale 0.01, zp round(127.5) = 128.
 *   x = ch0 (0.5, -1.0), ch1 (2.0, 0.25) -> 2.0 saturates to (255 - 128) * 0.01 = 1.27
 *   W ch0 (1.0, -0.4): scale 1/127, q (127, -50.8 -> -51) -> (1, -0.4015748)
 *   W ch1 (0.2, 0.6):  scale 0.6/127, q (42.33 -> 42, 127) -> (0.1984252, 0.6)
 *   B (0.1, -0.2): scales 0.01/127 and 0.006/127: q 1270, -4233.33 -> -4233 -> (0.1, -0.1999843)
 *   y ch0 = (0.5 - 0.4015748 * 1.27 + 0.1, -1.0 - 0.4015748 * 0.25 + 0.1) = (0.0900, -1.0004)
 *   y ch1 = (0.0992126 + 0.762 - 0.1999843, -0.1984252 + 0.15 - 0.1999843) = (0.6612, -0.2484)
 *   Q/DQ of y at 0.01: (0.09, -1.00, 0.66, -0.25)
 * The float model gives (-0.2, -1.0, 1.1, -0.25): saturation and rounding must show.
 */
static void build_conv1x1(fx *f)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(1.0, -0.4, 0.2, 0.6));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.1, -0.2));
	gen_node(g, mg, "Conv", "conv", "x,W,B", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	f->gm = g;
}

Test(quantize, numerics_conv1x1)
{
	static const rng r[] = {{"x", -1.275f, 1.275f}, {"y", -1.275f, 1.275f}};
	const float x[4] = {0.5f, -1.0f, 2.0f, 0.25f};
	const float want[4] = {0.09f, -1.00f, 0.66f, -0.25f};
	const float want_float[4] = {-0.2f, -1.0f, 1.1f, -0.25f};
	fx f = {0};
	float y[4];
	oq_node *conv, *bdq;

	build_conv1x1(&f);
	fx_load(&f, r, 2);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_float_eq(y[i], want_float[i], 1e-6, "float y[%d] = %g", i, y[i]);
	quantize_ok(&f);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_float_eq(y[i], want[i], 1e-5, "quantized y[%d] = %.7g, want %g", i, y[i], want[i]);
	conv = node_named(f.m->graph, "conv");
	bdq = dq_of(conv, 2);
	cr_assert_not_null(bdq);
	cr_assert_eq(oq_tensor_get_int(bdq->inputs[0]->init, 0), 1270);
	cr_assert_eq(oq_tensor_get_int(bdq->inputs[0]->init, 1), -4233);
	cr_assert_eq(oq_tensor_get_int(dq_of(conv, 1)->inputs[0]->init, 1), -51);
	cr_assert_eq(oq_tensor_get_int(dq_of(conv, 1)->inputs[0]->init, 2), 42);
	fx_free(&f);
}

/*
 * build_conv1x1's Conv inside the then branch of an If (cond: a true initializer): the branch
 * reads x, W and B from the main graph; the else branch is Neg(x) -> ye. With `both` the cond
 * is false and the else branch is the same Conv ("conv_e") writing ye.
 */
static void build_if_conv1x1(fx *f, int both)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g), *b;
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_init(g, mg, "c", OQ_DT_BOOL, 0, NULL, both ? GEN_VALS(0) : GEN_VALS(1));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(1.0, -0.4, 0.2, 0.6));
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.1, -0.2));
	n = gen_node(g, mg, "If", "if", "c", "y");
	b = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, b, "Conv", "conv", "x,W,B", "yt");
	gen_output(g, b, "yt", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	b = gen_attr_graph(g, n, "else_branch", "else");
	if (both)
		gen_node(g, b, "Conv", "conv_e", "x,W,B", "ye");
	else
		gen_node(g, b, "Neg", "neg", "x", "ye");
	gen_output(g, b, "ye", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	f->gm = g;
}

/*
 * The numbers of numerics_conv1x1 (hand-computed there) from the Conv inside the branch: x's
 * Q goes into the main graph (the branch captures its output), x's DQ, the per-channel weights
 * and the int32 bias are created inside the branch; the main
 * graph's W and B go (nothing reads them). The else branch has no range (it never ran): it
 * keeps float.
 */
Test(quantize, if_branch_quantized_inside)
{
	static const rng r[] = {{"x", -1.275f, 1.275f}, {"yt", -1.275f, 1.275f}};
	const float x[4] = {0.5f, -1.0f, 2.0f, 0.25f};
	const float want[4] = {0.09f, -1.00f, 0.66f, -0.25f};
	fx f = {0};
	float y[4];
	oq_graph *t, *e;
	oq_node *conv, *xdq, *bdq;

	build_if_conv1x1(&f, 0);
	fx_load(&f, r, 2);
	quantize_ok(&f);
	t = qt_body(f.m->graph, "if", "then_branch");
	e = qt_body(f.m->graph, "if", "else_branch");
	cr_expect_eq(count_op(f.m->graph, "QuantizeLinear"), 1, "x's Q: once per call, outside");
	cr_expect_eq(count_op(t, "QuantizeLinear"), 1, "yt's Q");
	cr_expect_eq(count_op(e, "QuantizeLinear") + count_op(e, "DequantizeLinear"), 0);
	cr_expect_eq(f.m->graph->n_inits, 3, "c and the scale and zero point of x's Q");
	conv = node_named(t, "conv");
	xdq = dq_of(conv, 0);
	cr_assert_not_null(xdq);
	cr_expect_eq(xdq->graph, t);
	cr_expect_float_eq(scalar(xdq->inputs[1]), 0.01, 1e-7, "x's scale 2.55 / 255");
	cr_expect_eq(xdq->inputs[0]->flags & OQ_V_OUTER, OQ_V_OUTER, "the DQ reads a captured Q output");
	cr_assert_not_null(oq_value_resolve(xdq->inputs[0])->producer);
	cr_expect_eq(oq_value_resolve(xdq->inputs[0])->producer->graph, f.m->graph);
	cr_expect_str_eq(oq_value_resolve(xdq->inputs[0])->producer->op_type, "QuantizeLinear");
	cr_expect_str_eq(oq_value_resolve(xdq->inputs[0])->producer->inputs[0]->name, "x");
	cr_expect_float_eq(scalar(oq_value_resolve(xdq->inputs[0])->producer->inputs[1]), 0.01, 1e-7);
	bdq = dq_of(conv, 2);
	cr_assert_not_null(bdq);
	cr_expect_eq(bdq->inputs[0]->graph, t);
	cr_expect_eq(oq_tensor_get_int(bdq->inputs[0]->init, 0), 1270);
	cr_expect_eq(oq_tensor_get_int(bdq->inputs[0]->init, 1), -4233);
	cr_expect_eq(oq_tensor_get_int(dq_of(conv, 1)->inputs[0]->init, 1), -51);
	cr_expect_eq(oq_tensor_get_int(dq_of(conv, 1)->inputs[0]->init, 2), 42);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_float_eq(y[i], want[i], 1e-5, "quantized y[%d] = %.7g, want %g", i, y[i], want[i]);
	fx_free(&f);
}

/*
 * Both branches run a Conv on the captured x (same range, so the same parameters): one
 * QuantizeLinear of x in the main graph, its output captured by each branch's own DQ; the
 * executor's output is numerics_conv1x1's hand-computed one on either branch.
 */
Test(quantize, captured_activation_one_q_outside)
{
	static const rng r[] = {{"x", -1.275f, 1.275f}, {"yt", -1.275f, 1.275f}, {"ye", -1.275f, 1.275f}};
	const float x[4] = {0.5f, -1.0f, 2.0f, 0.25f};
	const float want[4] = {0.09f, -1.00f, 0.66f, -0.25f};
	oq_graph *br[2];
	oq_node *q = NULL;
	fx f = {0};
	float y[4];

	build_if_conv1x1(&f, 1);
	fx_load(&f, r, 3);
	quantize_ok(&f);
	cr_expect_eq(count_op(f.m->graph, "QuantizeLinear"), 1);
	for (size_t i = 0; i < f.m->graph->n_nodes; i++)
		if (strcmp(f.m->graph->nodes[i]->op_type, "QuantizeLinear") == 0)
			q = f.m->graph->nodes[i];
	cr_assert_not_null(q);
	cr_expect_str_eq(q->inputs[0]->name, "x");
	cr_expect_lt(q->index, node_named(f.m->graph, "if")->index, "the Q runs before the If");
	br[0] = qt_body(f.m->graph, "if", "then_branch");
	br[1] = qt_body(f.m->graph, "if", "else_branch");
	for (int k = 0; k < 2; k++) {
		oq_node *dq = dq_of(node_named(br[k], k ? "conv_e" : "conv"), 0);
		cr_assert_not_null(dq);
		cr_expect_eq(dq->graph, br[k]);
		cr_expect_eq(dq->inputs[0]->flags & OQ_V_OUTER, OQ_V_OUTER);
		cr_expect_eq(oq_value_resolve(dq->inputs[0]), q->outputs[0], "branch %d reads the one Q", k);
		cr_expect_float_eq(scalar(dq->inputs[1]), 0.01, 1e-7, "x's scale 2.55 / 255");
		cr_expect_eq(count_op(br[k], "QuantizeLinear"), 1, "only the branch output's Q");
	}
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_float_eq(y[i], want[i], 1e-5, "quantized y[%d] = %.7g, want %g", i, y[i], want[i]);
	fx_free(&f);
}

/* --exclude names a node inside a body: that Conv keeps float, weights included. */
Test(quantize, exclude_node_inside_if_branch)
{
	static const rng r[] = {{"x", -1.275f, 1.275f}, {"yt", -1.275f, 1.275f}};
	static const char *ex[] = {"conv"};
	fx f = {0};
	oq_graph *t;

	build_if_conv1x1(&f, 0);
	fx_load(&f, r, 2);
	f.o.exclude = ex;
	f.o.n_exclude = 1;
	quantize_ok(&f);
	t = qt_body(f.m->graph, "if", "then_branch");
	cr_expect_eq(count_op(t, "QuantizeLinear") + count_op(t, "DequantizeLinear"), 0);
	fx_free(&f);
}

/* x -> Conv a -> A, x -> Conv b -> B, Add(A, B) -> y: x gets one shared pair read by both Convs. */
static void build_branches(fx *f, int with_relu)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_init(g, mg, "Wa", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(1.0, -0.4, 0.2, 0.6));
	gen_init(g, mg, "Wb", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(0.5, 0.3, -0.7, 0.1));
	gen_init(g, mg, "Bb", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.1, -0.2));
	gen_node(g, mg, "Conv", "conva", "x,Wa", "A");
	gen_node(g, mg, "Conv", "convb", "x,Wb,Bb", with_relu ? "Bc" : "B");
	if (with_relu)
		gen_node(g, mg, "Relu", "relub", "Bc", "B");
	gen_node(g, mg, "Add", "add", "A,B", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	f->gm = g;
}

static const rng branch_ranges[] = {
	{"x", -1, 2}, {"A", -1.5f, 1.5f}, {"B", -1, 1}, {"y", -2, 2.5f},
};
/* with the Relu: Bc is Conv b's output, B the Relu's */
static const rng relu_ranges[] = {
	{"x", -1, 2}, {"A", -1.5f, 1.5f}, {"Bc", -1, 1}, {"B", 0, 1}, {"y", -2, 2.5f},
};

Test(quantize, add_of_two_branches)
{
	fx f = {0};
	oq_graph *g;
	oq_node *a, *b, *add;
	const float x[4] = {0.5f, -1.0f, 1.5f, 0.25f};
	float y0[4], y1[4];

	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y0, 4);
	quantize_ok(&f);
	g = f.m->graph;
	a = node_named(g, "conva");
	b = node_named(g, "convb");
	add = node_named(g, "add");
	/* x, A, B, y */
	cr_assert_eq(count_op(g, "QuantizeLinear"), 4);
	cr_assert_eq(a->inputs[0], b->inputs[0], "one shared DQ for x");
	cr_assert_not_null(dq_of(a, 0));
	cr_assert_not_null(dq_of(add, 0));
	cr_assert_not_null(dq_of(add, 1));
	/* own scales on both Add inputs: A [-1.5, 1.5], B [-1, 1] */
	cr_assert_float_eq(scalar(dq_of(add, 0)->inputs[1]), 3.0 / 255, 1e-9);
	cr_assert_float_eq(scalar(dq_of(add, 1)->inputs[1]), 2.0 / 255, 1e-9);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y1, 4);
	for (int i = 0; i < 4; i++)
		cr_assert(fabsf(y0[i] - y1[i]) < 0.05f, "y[%d]: %g vs %g", i, y0[i], y1[i]);
	fx_free(&f);
}

Test(quantize, relu_removed_with_asymmetric_acts)
{
	fx f = {0};
	oq_node *b;
	build_branches(&f, 1);
	fx_load(&f, relu_ranges, 5);
	quantize_ok(&f);
	cr_assert_eq(count_op(f.m->graph, "Relu"), 0);
	b = node_named(f.m->graph, "convb");
	cr_assert_str_eq(b->outputs[0]->name, "B", "the Conv writes the Relu's output");
	cr_assert_null(oq_graph_find(f.m->graph, "Bc_QuantizeLinear_Output"));
	/* B's Q uses the post-Relu range [0, 1]: zp 0 */
	cr_assert_float_eq(scalar(dq_of(node_named(f.m->graph, "add"), 1)->inputs[1]), 1.0 / 255, 1e-9);
	cr_assert_eq(scalar(dq_of(node_named(f.m->graph, "add"), 1)->inputs[2]), 0);
	fx_free(&f);
}

/* Relu kept: no Q/DQ between Conv and Relu, the Relu's output quantized. */
static void relu_kept(int keep, int sym)
{
	fx f = {0};
	oq_graph *g;
	oq_node *relu, *b;
	const float x[4] = {0.5f, -1.0f, 1.5f, 0.25f};
	float y0[4], y1[4];

	build_branches(&f, 1);
	fx_load(&f, relu_ranges, 5);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y0, 4);
	f.o.keep_activations = keep;
	f.o.act_sym = sym;
	if (sym)
		f.o.act_type = OQ_DT_INT8;
	quantize_ok(&f);
	g = f.m->graph;
	relu = node_named(g, "relub");
	b = node_named(g, "convb");
	cr_assert_not_null(relu);
	cr_assert_eq(relu->inputs[0], b->outputs[0], "nothing between Conv and Relu");
	cr_assert_str_eq(b->outputs[0]->name, "Bc");
	cr_assert_eq(count_op(g, "QuantizeLinear"), 4, "x, A, B, y");
	cr_assert_not_null(dq_of(node_named(g, "add"), 1));
	cr_assert_eq(q_of(dq_of(node_named(g, "add"), 1))->inputs[0], relu->outputs[0]);
	if (sym) {
		/* int8 symmetric narrow: x [-1, 2] -> scale 2/127, zp 0 */
		oq_node *dq = dq_of(node_named(g, "conva"), 0);
		cr_assert_float_eq(scalar(dq->inputs[1]), 2.0 / 127, 1e-9);
		cr_assert_eq(dq->inputs[2]->init->dtype, OQ_DT_INT8);
		cr_assert_eq(scalar(dq->inputs[2]), 0);
	}
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y1, 4);
	for (int i = 0; i < 4; i++)
		cr_assert(fabsf(y0[i] - y1[i]) < 0.06f, "y[%d]: %g vs %g", i, y0[i], y1[i]);
	fx_free(&f);
}

Test(quantize, relu_kept_with_keep_activations)
{
	relu_kept(1, 0);
}

Test(quantize, relu_kept_with_symmetric_acts)
{
	relu_kept(0, 1);
}

/*
 * x -> Conv "conv" -> t; t -> Sigmoid -> s; t -> Mul(t, t)... three consumers of t:
 * Sigmoid and Mul are quantized, Neg is not. Outputs s, m, n.
 */
static void build_fanout(fx *f)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(1.0, -0.4, 0.2, 0.6));
	gen_node(g, mg, "Conv", "conv", "x,W", "t");
	gen_node(g, mg, "Sigmoid", "sig", "t", "s");
	/* Add, not Mul: t * Sigmoid(t) would be a SiLU unit (fuse) with s inside it */
	gen_node(g, mg, "Add", "mul", "t,s", "m");
	gen_node(g, mg, "Neg", "neg", "t", "n");
	gen_output(g, mg, "m", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_output(g, mg, "n", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	f->gm = g;
}

static const rng fan_ranges[] = {
	{"x", -1, 2}, {"t", -1.5f, 1.5f}, {"s", 0, 1}, {"m", -0.5f, 1.5f}, {"n", -1.5f, 1.5f},
};

Test(quantize, shared_pair_three_consumers)
{
	fx f = {0};
	oq_graph *g;
	oq_node *sig, *mul, *neg;
	oq_value *t;

	build_fanout(&f);
	fx_load(&f, fan_ranges, 5);
	quantize_ok(&f);
	g = f.m->graph;
	t = oq_graph_find(g, "t");
	sig = node_named(g, "sig");
	mul = node_named(g, "mul");
	neg = node_named(g, "neg");
	cr_assert_not_null(dq_of(sig, 0));
	cr_assert_eq(sig->inputs[0], mul->inputs[0], "Sigmoid and Mul read one DQ of t");
	cr_assert_eq(neg->inputs[0], t, "Neg is not quantized: it reads the float t");
	/* one Q reads t */
	{
		size_t nq = 0;
		for (size_t i = 0; i < g->n_nodes; i++)
			nq += strcmp(g->nodes[i]->op_type, "QuantizeLinear") == 0 && g->nodes[i]->inputs[0] == t;
		cr_assert_eq(nq, 1);
	}
	/* x, t, s, m (graph output of a quantized Add); n is written by Neg: float */
	cr_assert_eq(count_op(g, "QuantizeLinear"), 4);
	cr_assert_eq(oq_graph_find(g, "n")->producer, neg);
	cr_assert_str_eq(oq_graph_find(g, "m")->producer->op_type, "DequantizeLinear");
	fx_free(&f);
}

Test(quantize, concat_own_scales_and_softmax_fixed_range)
{
	gen_model *gm = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(gm);
	Onnx__NodeProto *n;
	static const rng r[] = {{"a", -1, 1}, {"b", 0, 4}, {"c", -1, 4}};
	fx f = {0};
	oq_node *cat, *sm;
	oq_value *p;
	const float x[4] = {0.5f, -1.0f, 3.0f, 0.25f};
	float y[4];

	gen_opset(gm, "", 13);
	gen_input(gm, mg, "a", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	gen_input(gm, mg, "b", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	n = gen_node(gm, mg, "Concat", "cat", "a,b", "c");
	gen_attr_int(gm, n, "axis", 1);
	n = gen_node(gm, mg, "Softmax", "sm", "c", "p");
	gen_attr_int(gm, n, "axis", 1);
	gen_output(gm, mg, "p", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	f.gm = gm;
	fx_load(&f, r, 3);
	quantize_ok(&f);
	cat = node_named(f.m->graph, "cat");
	sm = node_named(f.m->graph, "sm");
	cr_assert_float_eq(scalar(dq_of(cat, 0)->inputs[1]), 2.0 / 255, 1e-9);
	cr_assert_float_eq(scalar(dq_of(cat, 1)->inputs[1]), 4.0 / 255, 1e-9);
	cr_assert_float_eq(scalar(dq_of(sm, 0)->inputs[1]), 5.0 / 255, 1e-9);
	/* Softmax output: [0, 1] although no range was given: scale 1/255, zp 0 */
	p = f.m->graph->outputs[0];
	cr_assert_str_eq(p->name, "p");
	cr_assert_float_eq(scalar(p->producer->inputs[1]), 1.0 / 255, 1e-9);
	cr_assert_eq(scalar(p->producer->inputs[2]), 0);
	/* numerics: the output is a multiple of 1/255 and sums to about 1 */
	{
		oq_exec *e = NULL;
		oq_rt in[2] = {{0}, {0}}, out = {0};
		oq_diag d;
		oq_exec_opts eo = {.threads = 1};
		double sum = 0;
		oq_diag_init(&d);
		cr_assert_eq(oq_exec_new(f.m, &eo, &e, &d), OQ_OK, "%s", d.msg);
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(oq_rt_alloc(&in[i], OQ_DT_FLOAT, 2, (const int64_t[]){1, 2}), OQ_OK);
			memcpy(in[i].data, x + 2 * i, 8);
		}
		cr_assert_eq(oq_exec_run(e, in, 2, &out, 1, &d), OQ_OK, "%s", d.msg);
		memcpy(y, out.data, 16);
		for (int i = 0; i < 4; i++) {
			double k = y[i] * 255;
			cr_assert_float_eq(k, rint(k), 1e-3, "p[%d] = %g", i, y[i]);
			sum += y[i];
		}
		cr_assert_float_eq(sum, 1.0, 4.0 / 255);
		oq_rt_release(&in[0]);
		oq_rt_release(&in[1]);
		oq_rt_release(&out);
		oq_exec_free(e);
	}
	fx_free(&f);
}

Test(quantize, exclude_node_op_and_tensor)
{
	fx f = {0};
	oq_graph *g;
	const char *ex1[] = {"conva"};
	const char *ex2[] = {"Add"};
	const char *ex3[] = {"A"};

	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	f.o.exclude = ex1;
	f.o.n_exclude = 1;
	quantize_ok(&f);
	g = f.m->graph;
	cr_assert_eq(node_named(g, "conva")->inputs[0], g->inputs[0], "excluded Conv reads float x");
	cr_assert_str_eq(node_named(g, "conva")->inputs[1]->name, "Wa", "its weight stays float");
	cr_assert_eq(node_named(g, "conva")->inputs[1]->init->dtype, OQ_DT_FLOAT);
	cr_assert_not_null(dq_of(node_named(g, "convb"), 0));
	cr_assert_not_null(dq_of(node_named(g, "add"), 0), "A is still an input of the quantized Add");
	fx_free(&f);

	memset(&f, 0, sizeof f);
	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	f.o.exclude = ex2;
	f.o.n_exclude = 1;
	quantize_ok(&f);
	g = f.m->graph;
	cr_assert_null(dq_of(node_named(g, "add"), 0));
	cr_assert_null(dq_of(node_named(g, "add"), 1));
	cr_assert_eq(count_op(g, "QuantizeLinear"), 1, "only x: A, B and y feed/come from the float Add");
	cr_assert_eq(oq_graph_find(g, "y")->producer, node_named(g, "add"));
	fx_free(&f);

	memset(&f, 0, sizeof f);
	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	f.o.exclude = ex3;
	f.o.n_exclude = 1;
	quantize_ok(&f);
	g = f.m->graph;
	cr_assert_null(dq_of(node_named(g, "add"), 0), "tensor A excluded");
	cr_assert_not_null(dq_of(node_named(g, "add"), 1));
	cr_assert_not_null(dq_of(node_named(g, "conva"), 1), "conva's weight is still quantized");
	fx_free(&f);
}

Test(quantize, include_list)
{
	fx f = {0};
	oq_graph *g;
	const char *inc[] = {"Conv"};
	const char *bad[] = {"nosuch"};
	oq_diag d;

	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	f.o.include = inc;
	f.o.n_include = 1;
	quantize_ok(&f);
	g = f.m->graph;
	cr_assert_not_null(dq_of(node_named(g, "conva"), 0));
	cr_assert_not_null(dq_of(node_named(g, "convb"), 1));
	cr_assert_null(dq_of(node_named(g, "add"), 0), "Add is not included");
	cr_assert_eq(count_op(g, "QuantizeLinear"), 1);
	fx_free(&f);

	memset(&f, 0, sizeof f);
	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	f.o.include = bad;
	f.o.n_include = 1;
	cr_assert_eq(quantize(&f, &d), OQ_EUSAGE);
	cr_assert(strstr(d.msg, "'nosuch'"), "%s", d.msg);
	fx_free(&f);
}

Test(quantize, trt_dedicated_pairs_no_outputs)
{
	fx f = {0};
	oq_graph *g;
	oq_node *a, *b, *add;
	const float x[4] = {0.5f, -1.0f, 1.5f, 0.25f};
	float y0[4], y1[4];

	build_branches(&f, 1);
	fx_load(&f, relu_ranges, 5);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y0, 4);
	f.o.profile = OQ_PROFILE_TRT;
	quantize_ok(&f);
	g = f.m->graph;
	a = node_named(g, "conva");
	b = node_named(g, "convb");
	add = node_named(g, "add");
	cr_assert_not_null(dq_of(a, 0));
	cr_assert_not_null(dq_of(b, 0));
	cr_assert_neq(a->inputs[0], b->inputs[0], "one pair per consumer");
	cr_assert_neq(q_of(dq_of(a, 0)), q_of(dq_of(b, 0)));
	/* node names stay unique (ONNX Runtime refuses duplicates) */
	for (size_t i = 0; i < g->n_nodes; i++)
		for (size_t j = i + 1; j < g->n_nodes; j++)
			cr_assert(strcmp(g->nodes[i]->name, g->nodes[j]->name) != 0, "two nodes named %s",
				  g->nodes[i]->name);
	cr_assert_str_eq(q_of(dq_of(b, 0))->name, "x_QuantizeLinear_1");
	/* x twice, A and B into the Add: 4 pairs; nothing on y; the Relu stays */
	cr_assert_eq(count_op(g, "QuantizeLinear"), 4);
	cr_assert_eq(oq_graph_find(g, "y")->producer, add);
	cr_assert_not_null(node_named(g, "relub"));
	/* symmetric int8: x [-1, 2] -> 2/127, zp int8 0 */
	cr_assert_float_eq(scalar(dq_of(a, 0)->inputs[1]), 2.0 / 127, 1e-9);
	cr_assert_eq(dq_of(a, 0)->inputs[2]->init->dtype, OQ_DT_INT8);
	cr_assert_eq(scalar(dq_of(a, 0)->inputs[2]), 0);
	/* weights int8 per channel; bias float */
	cr_assert_eq(dq_of(b, 1)->inputs[0]->init->dtype, OQ_DT_INT8);
	cr_assert_eq(dq_of(b, 1)->inputs[1]->init->nelem, 2);
	cr_assert_str_eq(b->inputs[2]->name, "Bb");
	cr_assert_eq(b->inputs[2]->init->dtype, OQ_DT_FLOAT);
	run1(f.m, x, 4, (const int64_t[]){1, 2, 1, 2}, y1, 4);
	for (int i = 0; i < 4; i++)
		cr_assert(fabsf(y0[i] - y1[i]) < 0.06f, "y[%d]: %g vs %g", i, y0[i], y1[i]);
	fx_free(&f);
}

Test(quantize, opset_too_low)
{
	fx f = {0};
	oq_diag d;
	build_cnn(&f, 11);
	fx_load(&f, cnn_ranges, 6);
	cr_assert_eq(quantize(&f, &d), OQ_EUNSUP);
	cr_assert(strstr(d.msg, "opset 13") && strstr(d.msg, "per-channel"), "%s", d.msg);
	fx_free(&f);
}

Test(quantize, tensor_without_range_stays_float)
{
	fx f = {0};
	oq_graph *g;
	static const rng r[] = {{"x", -1, 2}, {"A", -1.5f, 1.5f}, {"y", -2, 2.5f}};
	build_branches(&f, 0);
	fx_load(&f, r, 3);
	quantize_ok(&f);
	g = f.m->graph;
	cr_assert_null(dq_of(node_named(g, "add"), 1), "B was never observed");
	cr_assert_not_null(dq_of(node_named(g, "add"), 0));
	fx_free(&f);
}

/* ------------------------------------------------------------ overrides */

static char ovdir[64];

static const char *write_json(const char *name, const char *text)
{
	static char path[256];
	FILE *fp;
	if (!ovdir[0]) {
		strcpy(ovdir, "/tmp/oq_quant_XXXXXX");
		cr_assert_not_null(mkdtemp(ovdir));
	}
	snprintf(path, sizeof path, "%s/%s", ovdir, name);
	fp = fopen(path, "w");
	cr_assert_not_null(fp);
	fputs(text, fp);
	fclose(fp);
	return path;
}

static int load_ov(fx *f, const char *json, oq_override **ov, size_t *n, oq_diag *d)
{
	oq_diag_init(d);
	return oq_overrides_load(write_json("ov.json", json), f->m, ov, n, d);
}

Test(overrides, good_file_parsed_and_applied)
{
	fx f = {0};
	oq_override *ov = NULL;
	size_t n = 0;
	oq_diag d;
	const oq_override *e;
	oq_graph *g;

	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	cr_assert_eq(load_ov(&f,
			     "{\"tensors\": {\"A\": {\"range\": [-0.5, 0.5]}, \"B\": {\"skip\": true},\n"
			     "  \"x\": {\"scale\": 0.25, \"zero_point\": 3}},\n"
			     " \"nodes\": {\"conva\": {\"granularity\": \"tensor\", \"symmetric\": true, "
			     "\"dtype\": \"int8\"}}}",
			     &ov, &n, &d),
		     OQ_OK, "%s", d.msg);
	cr_assert_eq(n, 4);
	e = oq_override_find(ov, n, "A", 0);
	cr_assert(e && e->has_range && e->min == -0.5f && e->max == 0.5f);
	e = oq_override_find(ov, n, "x", 0);
	cr_assert(e && e->has_qparams && e->scale == 0.25f && e->zero_point == 3);
	e = oq_override_find(ov, n, "conva", 1);
	cr_assert(e && e->granularity == OQ_GRAN_TENSOR && e->symmetric == 1 && e->dtype == OQ_DT_INT8);
	cr_assert_null(oq_override_find(ov, n, "conva", 0));

	f.o.overrides = ov;
	f.o.n_overrides = n;
	quantize_ok(&f);
	g = f.m->graph;
	/* A: range from its tensor entry, int8 symmetric from its producer's node entry: 0.5/127 */
	cr_assert_float_eq(scalar(dq_of(node_named(g, "add"), 0)->inputs[1]), 0.5 / 127, 1e-9, "A range");
	cr_assert_eq(dq_of(node_named(g, "add"), 0)->inputs[2]->init->dtype, OQ_DT_INT8);
	cr_assert_null(dq_of(node_named(g, "add"), 1), "B skipped");
	cr_assert_float_eq(scalar(dq_of(node_named(g, "conva"), 0)->inputs[1]), 0.25, 0);
	cr_assert_eq(scalar(dq_of(node_named(g, "conva"), 0)->inputs[2]), 3);
	cr_assert_eq(dq_of(node_named(g, "conva"), 1)->inputs[1]->init->nelem, 1, "conva per tensor");
	cr_assert_eq(dq_of(node_named(g, "convb"), 1)->inputs[1]->init->nelem, 2, "convb per channel");
	oq_overrides_free(ov, n);
	fx_free(&f);
}

Test(overrides, node_skip)
{
	fx f = {0};
	oq_override *ov = NULL;
	size_t n = 0;
	oq_diag d;
	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	cr_assert_eq(load_ov(&f, "{\"nodes\": {\"convb\": {\"skip\": true}}}", &ov, &n, &d), OQ_OK, "%s",
		     d.msg);
	f.o.overrides = ov;
	f.o.n_overrides = n;
	quantize_ok(&f);
	cr_assert_eq(node_named(f.m->graph, "convb")->inputs[0], f.m->graph->inputs[0]);
	cr_assert_str_eq(node_named(f.m->graph, "convb")->inputs[1]->name, "Wb");
	oq_overrides_free(ov, n);
	fx_free(&f);
}

/* A bad file: the status, and the message names the file and `what`. */
static void ov_bad(const char *json, int status, const char *what)
{
	fx f = {0};
	oq_override *ov = (oq_override *)1;
	size_t n = 7;
	oq_diag d;
	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	cr_assert_eq(load_ov(&f, json, &ov, &n, &d), status, "%s", d.msg);
	cr_assert_null(ov);
	cr_assert_eq(n, 0);
	cr_assert(strstr(d.msg, "ov.json"), "%s", d.msg);
	cr_assert(strstr(d.msg, what), "want '%s' in: %s", what, d.msg);
	fx_free(&f);
}

Test(overrides, unknown_tensor_or_node)
{
	ov_bad("{\"tensors\": {\"nope\": {\"skip\": true}}}", OQ_EUSAGE, "unknown tensor 'nope'");
	ov_bad("{\"nodes\": {\"convz\": {\"skip\": true}}}", OQ_EUSAGE, "unknown node 'convz'");
}

Test(overrides, unknown_key_and_bad_values)
{
	ov_bad("{\"tensors\": {\"A\": {\"skipp\": true}}}", OQ_EUSAGE, "unknown key \"skipp\" (valid: skip,");
	ov_bad("{\"layers\": {}}", OQ_EUSAGE, "unknown member \"layers\"");
	ov_bad("{\"tensors\": {\"A\": {\"dtype\": \"int7\"}}}", OQ_EUSAGE, "int8, uint8");
	ov_bad("{\"tensors\": {\"A\": {\"range\": [1, -1]}}}", OQ_EUSAGE, "min <= max");
	ov_bad("{\"tensors\": {\"A\": {\"scale\": 0}}}", OQ_EUSAGE, "> 0");
	ov_bad("{\"nodes\": {\"conva\": {\"axis\": 1.5}}}", OQ_EUSAGE, "integer");
	ov_bad("{\"nodes\": {\"conva\": {\"granularity\": \"row\"}}}", OQ_EUSAGE, "\"block\"");
}

Test(overrides, bad_json)
{
	ov_bad("{\"tensors\": {\"A\": {\"skip\": true}\n\n", OQ_EUSAGE, "not valid JSON near line");
	ov_bad("[1, 2]", OQ_EUSAGE, "top level");
}

Test(overrides, missing_file)
{
	fx f = {0};
	oq_override *ov = NULL;
	size_t n = 0;
	oq_diag d;
	build_branches(&f, 0);
	fx_load(&f, branch_ranges, 4);
	oq_diag_init(&d);
	cr_assert_eq(oq_overrides_load("/nonexistent/ov.json", f.m, &ov, &n, &d), OQ_EIO);
	cr_assert(strstr(d.msg, "/nonexistent/ov.json"), "%s", d.msg);
	fx_free(&f);
}

/* ------------------------------------------------------------ grids and needs for calibration */

/* Runs the rewrite passes the pipeline runs before calibration (fuse marks the Relu). */
static void fuse_only(fx *f)
{
	oq_pass_run run = {0};
	oq_diag d;
	run.list = "fuse";
	oq_diag_init(&d);
	cr_assert_eq(oq_passes_run(f->m, &run, &f->o, &d), OQ_OK, "%s", d.msg);
}

static const oq_value *val(const fx *f, const char *name)
{
	const oq_value *v = oq_graph_find(f->m->graph, name);
	cr_assert_not_null(v, "%s", name);
	return v;
}

/* The activation grid calibration aims at: the pass' own resolution, the producer the pass will
 * fold a Relu into included. */
Test(quantize, act_grid_for_calibration)
{
	fx f = {0};
	oq_override *ov = NULL;
	size_t n = 0;
	oq_diag d;
	int dt, sym;

	build_branches(&f, 1);
	fx_load(&f, relu_ranges, 5);
	fuse_only(&f);
	/* B = Relu(Bc): the pass folds the Relu into convb, whose Q (and node override) B gets */
	cr_expect_eq(oq_quantize_grid_node(&f.o, val(&f, "B")), node_named(f.m->graph, "convb"));
	cr_expect_eq(oq_quantize_grid_node(&f.o, val(&f, "A")), node_named(f.m->graph, "conva"));
	f.o.keep_activations = 1;
	cr_expect_eq(oq_quantize_grid_node(&f.o, val(&f, "B")), node_named(f.m->graph, "relub"));
	f.o.keep_activations = 0;
	f.o.act_sym = OQ_ACT_SYM; /* zero point 127: the Q would not reproduce the Relu */
	cr_expect_eq(oq_quantize_grid_node(&f.o, val(&f, "B")), node_named(f.m->graph, "relub"));
	f.o.act_sym = OQ_ACT_SYM_UNSIGNED; /* zero point 0 at qmin: it would */
	cr_expect_eq(oq_quantize_grid_node(&f.o, val(&f, "B")), node_named(f.m->graph, "convb"));
	f.o.act_sym = OQ_ACT_ASYM;

	cr_assert_eq(load_ov(&f, "{\"nodes\": {\"convb\": {\"dtype\": \"int16\"}},"
			     " \"tensors\": {\"A\": {\"symmetric\": true, \"dtype\": \"int8\"}}}", &ov, &n, &d),
		     OQ_OK, "%s", d.msg);
	f.o.overrides = ov;
	f.o.n_overrides = n;
	oq_diag_init(&d);
	cr_assert_eq(oq_quantize_act_grid(&f.o, val(&f, "B"), oq_quantize_grid_node(&f.o, val(&f, "B")),
					  &dt, &sym, &d), OQ_OK, "%s", d.msg);
	cr_expect(dt == OQ_DT_INT16 && sym == OQ_ACT_ASYM, "B: %d %d", dt, sym);
	cr_assert_eq(oq_quantize_act_grid(&f.o, val(&f, "A"), node_named(f.m->graph, "conva"), &dt, &sym,
					  &d), OQ_OK);
	cr_expect(dt == OQ_DT_INT8 && sym == OQ_ACT_SYM, "A: %d %d", dt, sym);
	cr_assert_eq(oq_quantize_act_grid(&f.o, val(&f, "x"), NULL, &dt, &sym, &d), OQ_OK);
	cr_expect(dt == OQ_DT_UINT8 && sym == OQ_ACT_ASYM);
	/* the TRT profile is symmetric int8 whatever --act-type says */
	f.o.profile = OQ_PROFILE_TRT;
	f.o.overrides = NULL;
	f.o.n_overrides = 0;
	cr_assert_eq(oq_quantize_act_grid(&f.o, val(&f, "x"), NULL, &dt, &sym, &d), OQ_OK);
	cr_expect(dt == OQ_DT_INT8 && sym == OQ_ACT_SYM);
	oq_overrides_free(ov, n);

	/* impossible grids are usage errors naming the tensor */
	f.o.profile = OQ_PROFILE_ORT;
	f.o.act_type = OQ_DT_FLOAT8E4M3FN;
	f.o.act_sym = OQ_ACT_SYM;
	cr_assert_eq(load_ov(&f, "{\"tensors\": {\"A\": {\"symmetric\": false}}}", &ov, &n, &d), OQ_OK);
	f.o.overrides = ov;
	f.o.n_overrides = n;
	oq_diag_init(&d);
	cr_expect_eq(oq_quantize_act_grid(&f.o, val(&f, "A"), NULL, &dt, &sym, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "'A'") && strstr(d.msg, "float8e4m3fn"), "%s", d.msg);
	oq_overrides_free(ov, n);
	fx_free(&f);
}

/* x -> MaxPool -> p -> Conv -> y -> Softmax -> z: which ranges the pass reads. */
static void build_pool_softmax(fx *f)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(1.0, -0.4, 0.2, 0.6));
	n = gen_node(g, mg, "MaxPool", "pool", "x", "p");
	gen_attr_ints(g, n, "kernel_shape", 2, (const int64_t[]){1, 1});
	gen_node(g, mg, "Conv", "conv", "p,W", "y");
	n = gen_node(g, mg, "Softmax", "sm", "y", "z");
	gen_attr_int(g, n, "axis", 1);
	gen_output(g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	f->gm = g;
}

static const rng pool_ranges[] = {{"x", -1, 2}, {"p", -1, 2}, {"y", -3, 3}, {"z", 0, 1}};

/* need[] of name (1: the pass reads its calibrated range). */
static int needs(const fx *f, const uint8_t *need, const char *name)
{
	return need[val(f, name)->index];
}

Test(quantize, range_needs_for_calibration)
{
	fx f = {0};
	oq_override *ov = NULL;
	size_t n = 0;
	oq_diag d;
	uint8_t need[64];
	const char *excl[] = {"add"};

	/* branches: x (data input of both Convs), A and B (of the Add) and y (the Add's graph output)
	 * get their own Q; Bc is inside the fused Conv + Relu */
	build_branches(&f, 1);
	fx_load(&f, relu_ranges, 5);
	fuse_only(&f);
	cr_assert_lt(f.m->graph->n_values, sizeof need);
	oq_diag_init(&d);
	cr_assert_eq(oq_quantize_range_needs(f.m->graph, &f.o, need, &d), OQ_OK, "%s", d.msg);
	cr_expect(needs(&f, need, "x") && needs(&f, need, "A") && needs(&f, need, "B") &&
		  needs(&f, need, "y") && !needs(&f, need, "Bc") && !needs(&f, need, "Wa"));
	/* a fixed range or fixed parameters need no calibration; neither does what nobody quantizes */
	cr_assert_eq(load_ov(&f, "{\"tensors\": {\"A\": {\"range\": [-1, 1]}},"
			     " \"nodes\": {\"convb\": {\"scale\": 0.5}}}", &ov, &n, &d), OQ_OK, "%s", d.msg);
	f.o.overrides = ov;
	f.o.n_overrides = n;
	cr_assert_eq(oq_quantize_range_needs(f.m->graph, &f.o, need, &d), OQ_OK);
	cr_expect(!needs(&f, need, "A") && !needs(&f, need, "B") && needs(&f, need, "x"));
	f.o.overrides = NULL;
	f.o.n_overrides = 0;
	f.o.exclude = excl;
	f.o.n_exclude = 1;
	cr_assert_eq(oq_quantize_range_needs(f.m->graph, &f.o, need, &d), OQ_OK);
	cr_expect(needs(&f, need, "x") && !needs(&f, need, "A") && !needs(&f, need, "B") &&
		  !needs(&f, need, "y"));
	/* weight-only: no activation ranges at all */
	f.o.n_exclude = 0;
	f.o.weight_only = 1;
	cr_assert_eq(oq_quantize_range_needs(f.m->graph, &f.o, need, &d), OQ_OK);
	cr_expect(!needs(&f, need, "x") && !needs(&f, need, "A"));
	oq_overrides_free(ov, n);
	fx_free(&f);

	/* MaxPool's output shares its input's parameters; Softmax's is fixed to [0, 1] */
	memset(&f, 0, sizeof f);
	build_pool_softmax(&f);
	fx_load(&f, pool_ranges, 4);
	fuse_only(&f);
	cr_assert_eq(oq_quantize_range_needs(f.m->graph, &f.o, need, &d), OQ_OK, "%s", d.msg);
	cr_expect(needs(&f, need, "x") && !needs(&f, need, "p") && needs(&f, need, "y") &&
		  !needs(&f, need, "z"));
	/* the same model quantized: p's Q has x's scale, z's is 1/255 */
	quantize_ok(&f);
	cr_expect_float_eq(scalar(dq_of(node_named(f.m->graph, "conv"), 0)->inputs[1]), 3.0 / 255, 1e-9);
	fx_free(&f);
}
