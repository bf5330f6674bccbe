/*
 * test_precision.c - passes/rewrite/precision.c: a model's high-precision
 * type, widening a float16 model to float32 and narrowing a quantized
 * float32 one to float16.
 *
 * Values are hand-picked to be exact or to land on float16's edges:
 * 1.5 and -2 are exact in float16; 70000 saturates to 65504 (float16's
 * largest finite value); a Q/DQ scale of 1e-9 (below float16's smallest
 * subnormal 2^-24, which would round to 0) becomes 2^-24; an int32 bias
 * [3, -5] with scale 2^-20 folds to 3 * 2^-20 and -5 * 2^-20, both exact
 * float16 subnormals (multiples of 2^-24).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "gen_model.h"
#include "passes/rewrite/precision.h"
#include "runmodel.h"

/* The generator of the model loaded last: the model may borrow its bytes until release(). */
static gen_model *held;

static oq_model *load(gen_model *g)
{
	oq_model *m = NULL;
	oq_diag d;
	oq_diag_init(&d);
	held = g;
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	return m;
}

static void release(oq_model *m)
{
	oq_model_free(m);
	gen_free(held);
	held = NULL;
}

/* The live node of g writing value `name`, or NULL. */
static const oq_node *producer(const oq_graph *g, const char *name)
{
	const oq_value *v = oq_graph_find(g, name);
	return v ? v->producer : NULL;
}

/* y = Mul(x, c): x, y, c of dtype dt; c = [1.5, -2]. */
static gen_model *mul_model(int dt)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;

	gen_opset(g, "", 19);
	gp = gen_graph(g);
	gen_input(g, gp, "x", dt, GEN_SHAPE(2));
	gen_init(g, gp, "c", dt, GEN_SHAPE(2), (const double[]){1.5, -2});
	gen_node(g, gp, "Mul", "mul", "x,c", "y");
	gen_output(g, gp, "y", dt, GEN_SHAPE(2));
	return g;
}

Test(precision, of_finds_the_16_bit_type)
{
	static const int dts[] = {OQ_DT_FLOAT, OQ_DT_FLOAT16, OQ_DT_BFLOAT16};
	oq_diag d;

	oq_diag_init(&d);
	for (size_t i = 0; i < 3; i++) {
		oq_model *m = load(mul_model(dts[i]));
		int dt = -1;
		cr_assert_eq(oq_precision_of(m, &dt, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(dt, dts[i], "model of dtype %d: %d", dts[i], dt);
		release(m);
	}
}

Test(precision, of_refuses_float16_with_bfloat16)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;
	oq_model *m;
	oq_diag d;
	int dt;

	gen_opset(g, "", 19);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT16, GEN_SHAPE(2));
	gen_attr_int(g, gen_node(g, gp, "Cast", "c", "x", "y"), "to", OQ_DT_BFLOAT16);
	gen_output(g, gp, "y", OQ_DT_BFLOAT16, GEN_SHAPE(2));
	m = load(g);
	oq_diag_init(&d);
	cr_expect_eq(oq_precision_of(m, &dt, &d), OQ_EUNSUP);
	cr_expect(strstr(d.msg, "both float16 and bfloat16") != NULL, "%s", d.msg);
	release(m);
}

/* Widen: c float32 with the same values; x and y keep float16, with Casts at the boundary. */
Test(precision, widen_float16_model)
{
	oq_model *m = load(mul_model(OQ_DT_FLOAT16));
	const oq_graph *g = m->graph;
	const oq_value *c, *x, *y;
	const oq_node *mul, *cast_in, *cast_out;
	oq_diag d;
	int changed;

	oq_diag_init(&d);
	cr_assert_eq(oq_precision_widen(m, &changed, &d), OQ_OK, "%s", d.msg);
	cr_expect(changed);
	c = oq_graph_find(g, "c");
	cr_assert(c && c->init);
	cr_expect_eq(c->init->dtype, OQ_DT_FLOAT);
	cr_expect_eq(oq_tensor_get(c->init, 0), 1.5);
	cr_expect_eq(oq_tensor_get(c->init, 1), -2.0);
	x = oq_graph_find(g, "x");
	y = oq_graph_find(g, "y");
	cr_expect_eq(x->type.dtype, OQ_DT_FLOAT16);
	cr_expect_eq(y->type.dtype, OQ_DT_FLOAT16);
	/* y = Cast(to=float16)(Mul(Cast(to=float)(x), c)) */
	cast_out = producer(g, "y");
	cr_assert(cast_out && !strcmp(cast_out->op_type, "Cast"));
	cr_expect_eq(oq_node_attr_int(cast_out, "to", 0), OQ_DT_FLOAT16);
	mul = cast_out->inputs[0]->producer;
	cr_assert(mul && !strcmp(mul->op_type, "Mul"));
	cast_in = mul->inputs[0]->producer;
	cr_assert(cast_in && !strcmp(cast_in->op_type, "Cast"));
	cr_expect_eq(oq_node_attr_int(cast_in, "to", 0), OQ_DT_FLOAT);
	cr_expect_eq(cast_in->inputs[0], x);
	cr_expect_eq(mul->inputs[1], c);
	release(m);
}

/*
 * A quantized float32 model, as the quantize pass leaves it:
 *   xq = QuantizeLinear(x, s, z); xd = DequantizeLinear(xq, s, z)
 *   b = DequantizeLinear(bq int32 [3, -5], bs = 2^-20)
 *   a = Add(xd, b); m = Mul(a, big = [70000, 1]); r = Resize(m, roi, scales); y = r
 * with s = 1e-9; x and y float32 graph input / output.
 */
static gen_model *quantized_model(int64_t opset)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;

	gen_opset(g, "", opset);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 2));
	gen_init(g, gp, "s", OQ_DT_FLOAT, 0, NULL, (const double[]){1e-9});
	gen_init(g, gp, "z", OQ_DT_UINT8, 0, NULL, (const double[]){128});
	gen_init(g, gp, "bq", OQ_DT_INT32, GEN_SHAPE(2), (const double[]){3, -5});
	gen_init(g, gp, "bs", OQ_DT_FLOAT, 0, NULL, (const double[]){0x1p-20});
	gen_init(g, gp, "big", OQ_DT_FLOAT, GEN_SHAPE(2), (const double[]){70000, 1});
	gen_init(g, gp, "roi", OQ_DT_FLOAT, GEN_SHAPE(0), NULL);
	gen_init(g, gp, "scales", OQ_DT_FLOAT, GEN_SHAPE(4), (const double[]){1, 1, 2, 2});
	gen_node(g, gp, "QuantizeLinear", "q", "x,s,z", "xq");
	gen_node(g, gp, "DequantizeLinear", "dq", "xq,s,z", "xd");
	gen_node(g, gp, "DequantizeLinear", "bdq", "bq,bs", "b");
	gen_node(g, gp, "Add", "add", "xd,b", "a");
	gen_node(g, gp, "Mul", "mul", "a,big", "m");
	gen_node(g, gp, "Resize", "resize", "m,roi,scales", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 2, 4));
	return g;
}

Test(precision, narrow_quantized_model_to_float16)
{
	oq_model *m = load(quantized_model(19));
	const oq_graph *g = m->graph;
	const oq_value *v;
	const oq_node *n, *add;
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(oq_precision_narrow(m, OQ_DT_FLOAT16, &d), OQ_OK, "%s", d.msg);
	/* the scale rounds to float16's smallest subnormal, not to 0 */
	v = oq_graph_find(g, "s");
	cr_assert(v && v->init);
	cr_expect_eq(v->init->dtype, OQ_DT_FLOAT16);
	cr_expect_eq(oq_tensor_get(v->init, 0), 0x1p-24);
	/* 70000 saturates to 65504 */
	v = oq_graph_find(g, "big");
	cr_assert(v && v->init);
	cr_expect_eq(v->init->dtype, OQ_DT_FLOAT16);
	cr_expect_eq(oq_tensor_get(v->init, 0), 65504.0);
	cr_expect_eq(oq_tensor_get(v->init, 1), 1.0);
	/* the int32 bias DequantizeLinear became a float16 initializer of q * scale */
	n = producer(g, "a");
	cr_assert(n && !strcmp(n->op_type, "Add"));
	add = n;
	v = add->inputs[1];
	cr_assert(v->init, "the bias is computed, not an initializer");
	cr_expect_eq(v->init->dtype, OQ_DT_FLOAT16);
	cr_expect_eq(oq_tensor_get(v->init, 0), 3 * 0x1p-20);
	cr_expect_eq(oq_tensor_get(v->init, 1), -5 * 0x1p-20);
	cr_expect_eq(runmodel_count_op(g, "DequantizeLinear"), 1, "the activation DQ only");
	/* QuantizeLinear reads x through a Cast to float16; x and y keep float32 */
	cr_expect_eq(oq_graph_find(g, "x")->type.dtype, OQ_DT_FLOAT);
	cr_expect_eq(oq_graph_find(g, "y")->type.dtype, OQ_DT_FLOAT);
	n = producer(g, "xq");
	cr_assert(n && !strcmp(n->op_type, "QuantizeLinear"));
	cr_assert(n->inputs[0]->producer && !strcmp(n->inputs[0]->producer->op_type, "Cast"));
	cr_expect_eq(oq_node_attr_int(n->inputs[0]->producer, "to", 0), OQ_DT_FLOAT16);
	/* Resize stays float32: its data input a Cast to float, roi / scales float32, y its output */
	n = producer(g, "y");
	cr_assert(n && !strcmp(n->op_type, "Resize"), "y written by %s", n ? n->op_type : "nothing");
	cr_assert(n->inputs[0]->producer && !strcmp(n->inputs[0]->producer->op_type, "Cast"));
	cr_expect_eq(oq_node_attr_int(n->inputs[0]->producer, "to", 0), OQ_DT_FLOAT);
	cr_expect_eq(n->inputs[2]->init->dtype, OQ_DT_FLOAT);
	release(m);
}

Test(precision, narrow_refuses_qdq_below_opset_19)
{
	oq_model *m = load(quantized_model(13));
	oq_diag d;

	oq_diag_init(&d);
	cr_expect_eq(oq_precision_narrow(m, OQ_DT_FLOAT16, &d), OQ_EUNSUP);
	cr_expect(strstr(d.msg, "opset 19") != NULL, "%s", d.msg);
	release(m);
}

/* Narrowing to float32 only drops Casts that convert nothing: the widened model's output Cast too. */
Test(precision, widen_then_narrow_to_float32_leaves_no_cast)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;
	oq_model *m;
	oq_diag d;
	int changed;

	gen_opset(g, "", 19);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_attr_int(g, gen_node(g, gp, "Cast", "in16", "x", "h"), "to", OQ_DT_FLOAT16);
	gen_init(g, gp, "c", OQ_DT_FLOAT16, GEN_SHAPE(2), (const double[]){1.5, -2});
	gen_node(g, gp, "Mul", "mul", "h,c", "p");
	gen_attr_int(g, gen_node(g, gp, "Cast", "out32", "p", "y"), "to", OQ_DT_FLOAT);
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	m = load(g);
	oq_diag_init(&d);
	cr_assert_eq(oq_precision_widen(m, &changed, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_precision_narrow(m, OQ_DT_FLOAT, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(runmodel_count_op(m->graph, "Cast"), 0);
	cr_expect_eq(producer(m->graph, "y")->op, OQ_OP_Mul);
	release(m);
}

/*
 * c = Concat(DequantizeLinear(q1), DequantizeLinear(q2)) narrowed to float16: the Concat reads
 * Casts to float and its output is cast back, so ONNX Runtime cannot fuse the three into a
 * QLinearConcat (float32 scales only) and refuse the model.
 */
Test(precision, narrow_keeps_dequantized_concat_float32)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;
	oq_model *m;
	const oq_node *cat;
	oq_diag d;

	gen_opset(g, "", 19);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_init(g, gp, "s", OQ_DT_FLOAT, 0, NULL, (const double[]){0.5});
	gen_init(g, gp, "z", OQ_DT_UINT8, 0, NULL, (const double[]){0});
	gen_node(g, gp, "QuantizeLinear", "q", "x,s,z", "xq");
	gen_node(g, gp, "DequantizeLinear", "dq1", "xq,s,z", "a");
	gen_node(g, gp, "DequantizeLinear", "dq2", "xq,s,z", "b");
	gen_attr_int(g, gen_node(g, gp, "Concat", "cat", "a,b", "c"), "axis", 0);
	gen_node(g, gp, "QuantizeLinear", "qc", "c,s,z", "cq");
	gen_node(g, gp, "DequantizeLinear", "dqc", "cq,s,z", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(4));
	m = load(g);
	oq_diag_init(&d);
	cr_assert_eq(oq_precision_narrow(m, OQ_DT_FLOAT16, &d), OQ_OK, "%s", d.msg);
	cat = producer(m->graph, "c");
	if (cat && cat->op == OQ_OP_Cast) /* c itself may be the cast back */
		cat = cat->inputs[0]->producer;
	cr_assert(cat && cat->op == OQ_OP_Concat);
	for (size_t i = 0; i < 2; i++) {
		const oq_node *p = cat->inputs[i]->producer;
		cr_assert(p && p->op == OQ_OP_Cast, "Concat input %zu not a Cast", i);
		cr_expect_eq(oq_node_attr_int(p, "to", 0), OQ_DT_FLOAT);
		cr_expect_eq(p->inputs[0]->producer->op, OQ_OP_DequantizeLinear);
	}
	cr_expect_eq(oq_graph_find(m->graph, "s")->init->dtype, OQ_DT_FLOAT16);
	release(m);
}
