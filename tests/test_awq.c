/*
 * test_awq.c - activation-aware input-channel scaling (calib/rounding/awq.h): the alpha search
 * on a layer whose errors are worked out by hand, the paths that absorb the scales (the float
 * model computes the same after oq_awq_apply: executor before and after, 1e-5 relative, on
 * fixed pseudo-random inputs), the cases that leave a layer alone, and --awq through the
 * pipeline on a model where nothing can be scaled.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/rounding/awq.h"
#include "gen_model.h"
#include "runmodel.h"
#include "src/io/npy.h"
#include "src/io/onnx_io.h"
#include "src/pipeline/pipeline.h"
#include "tmpdir.h"

#define F OQ_DT_FLOAT
#define TOL 1e-5

/* int8 symmetric per output channel (axis 0), [-127, 127]: scale = max |w| / 127. */
static oq_wspec int8_channel(void)
{
	oq_wspec s;
	memset(&s, 0, sizeof s);
	s.dtype = OQ_DT_INT8;
	s.axis = 0;
	s.symmetric = 1;
	s.sym_grid = OQ_GRID_NARROW;
	return s;
}

/*
 * A 1x1 Conv, one output channel, W = (1, 0.3 / 127); its inputs x = (1, 16) at every position:
 * channel 2 large, its weight small. A = E[x x^T] = [[1, 16], [16, 256]], mean |x| = (1, 16).
 *
 * alpha 0 (s = 1): step 1 / 127; w2 / step = 0.3 rounds to 0, d = (0, -0.3 / 127); the output
 *   error d . x = -4.8 / 127, L = 23.04 / 127^2.
 * alpha 1: s_c = m_c / sqrt(16 * 1) = (1/4, 4); W s = (0.25, 1.2 / 127), step 0.25 / 127;
 *   w1 s1 / step = 127 exactly; w2 s2 / step = 4.8 rounds to 5, back: 5 * 0.25 / 127 / 4 =
 *   0.3125 / 127, d = (0, 0.0125 / 127); d . x = 0.2 / 127, L = 0.04 / 127^2.
 * Every alpha in between leaves more (0.45, 0.7, 0.95: 0.0421 / 127^2, the next best), so the
 * search takes alpha 1 and lowers L 576-fold.
 */
Test(awq, search_takes_the_hand_computed_alpha)
{
	static const int64_t dims[4] = {1, 2, 1, 1};
	const float w[2] = {1.0f, 0.3f / 127}, A[4] = {1, 16, 16, 256};
	const double m[2] = {1, 16};
	oq_tensor *W = oq_tensor_from_floats(4, dims, w);
	oq_wspec sp = int8_channel();
	oq_awq_layer Ly = {W, &sp, 1, 2, 0, 1};
	oq_awq_fit fit;
	float s[2], s1[2];
	double l0 = 0, l1 = 0;
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_not_null(W);
	oq_awq_scales(m, 2, 1.0, s1);
	cr_expect_float_eq(s1[0], 0.25f, 1e-7);
	cr_expect_float_eq(s1[1], 4.0f, 1e-6);
	cr_assert_eq(oq_awq_loss(&Ly, A, NULL, &l0, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_awq_loss(&Ly, A, s1, &l1, &d), OQ_OK, "%s", d.msg);
	cr_expect_float_eq(l0 * 127 * 127, 23.04, 1e-4, "alpha 0: %g / 127^2", l0 * 127 * 127);
	cr_expect_float_eq(l1 * 127 * 127, 0.04, 1e-4, "alpha 1: %g / 127^2", l1 * 127 * 127);
	cr_assert_eq(oq_awq_search(&Ly, A, m, &fit, s, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(fit.a, OQ_AWQ_GRID, "alpha %d / %d", fit.a, OQ_AWQ_GRID);
	cr_expect_float_eq(fit.loss0, l0, 1e-12);
	cr_expect_float_eq(fit.loss, l1, 1e-12);
	cr_expect_lt(fit.loss, fit.loss0);
	cr_expect(s[0] == s1[0] && s[1] == s1[1], "scales %g %g", s[0], s[1]);
	oq_tensor_free(W);
}

/* The scales straddle 1 (sqrt(max min) = 1) and are 1 at alpha 0 or without inputs. */
Test(awq, scales_normalised)
{
	const double m[3] = {0.5, 2, 8}, z[2] = {0, 0};
	float s[3];
	oq_awq_scales(m, 3, 0.5, s);
	/* m^0.5 = (0.7071, 1.4142, 2.8284), / sqrt(2.8284 * 0.7071) = / 1.4142 */
	cr_expect_float_eq(s[0], 0.5f, 1e-6);
	cr_expect_float_eq(s[1], 1.0f, 1e-6);
	cr_expect_float_eq(s[2], 2.0f, 1e-6);
	oq_awq_scales(m, 3, 0, s);
	cr_expect(s[0] == 1 && s[1] == 1 && s[2] == 1);
	oq_awq_scales(z, 2, 1, s);
	cr_expect(s[0] == 1 && s[1] == 1);
}

/* ------------------------------------------------------------ absorbing the scales */

static gen_model *new_model(int64_t opset)
{
	gen_model *gm = gen_new(8);
	gen_opset(gm, "", opset);
	return gm;
}

static const oq_node *node_named(const oq_model *m, const char *name)
{
	for (size_t i = 0; i < m->graph->n_nodes; i++)
		if (!strcmp(m->graph->nodes[i]->name, name))
			return m->graph->nodes[i];
	cr_assert_fail("no node %s", name);
	return NULL;
}

/* Float values of node n's input i. */
static float *input_floats(const oq_model *m, const char *node, size_t i)
{
	const oq_node *n = node_named(m, node);
	const oq_tensor *t = oq_value_const(m->graph, n->inputs[i]);
	cr_assert_not_null(t, "%s input %zu is not a constant", node, i);
	return oq_tensor_to_floats(t);
}

/*
 * Loads gm, finds the path of layer `layer` (must exist), runs the executor, applies scales s,
 * runs it again: the outputs' relative difference. *path receives the path.
 */
static double absorb(gen_model *gm, const char *layer, const float *s, oq_awq_path *path, oq_model **out)
{
	oq_rt in[4] = {{0}}, a[4] = {{0}}, b[4] = {{0}};
	size_t nin = 0, na = 0, nb = 0;
	uint64_t rng = RUNMODEL_SEED;
	oq_model *m = NULL;
	oq_diag d;
	double err;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(gm, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(runmodel_inputs(m, &rng, 2, in, 4, &nin, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(runmodel_run(m, in, nin, a, 4, &na, &d), OQ_OK, "%s", d.msg);
	cr_assert(oq_awq_path_of(m->graph, node_named(m, layer), NULL, 0, path), "no path: %s", path->why);
	cr_assert_eq(oq_awq_apply(m->graph, (oq_node *)node_named(m, layer), path, s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(runmodel_run(m, in, nin, b, 4, &nb, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(na, nb);
	err = runmodel_rel_err(a, b, na);
	for (size_t i = 0; i < 4; i++) {
		oq_rt_release(&in[i]);
		oq_rt_release(&a[i]);
		oq_rt_release(&b[i]);
	}
	*out = m;
	return err;
}

/*
 * x -> Mul(a) -> Add(b) -> Conv 3x3 pads 1 (PaddleOCR's learnable affine block before a Conv):
 * a / s and b / s become per channel ([2, 1, 1]); the Conv reads zeros at its borders whatever
 * s, and its weight's input channel c is times s_c. The scalar a is also read by another Mul
 * (a branch to a second output): it is copied, not changed under that reader.
 */
Test(awq_absorb, mul_add_scalars_then_padded_conv)
{
	static const float s[2] = {0.5f, 3.0f};
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	Onnx__NodeProto *cv;
	oq_awq_path p;
	oq_model *m;
	float *w, *a, *b;
	double err;

	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 5, 5));
	gen_input(gm, g, "x2", F, GEN_SHAPE(1, 2, 5, 5));
	gen_init(gm, g, "a", F, 0, NULL, GEN_VALS(1.5));
	gen_init(gm, g, "b", F, GEN_SHAPE(1), GEN_VALS(-0.25));
	gen_init(gm, g, "W", F, GEN_SHAPE(3, 2, 3, 3),
		 GEN_VALS(0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 0.15, 0.25, -0.35, 0.45, 0.55, -0.65, 0.75, 0.85,
			  -0.95, -0.1, 0.2, 0.3, -0.4, 0.5, 0.6, -0.7, 0.8, 0.9, 0.12, -0.22, 0.32, 0.42, -0.52, 0.62, 0.72,
			  -0.82, 0.92, 0.3, 0.1, -0.2, 0.5, 0.4, -0.6, 0.2, 0.7, -0.1, 0.33, -0.44, 0.55, 0.66, -0.77, 0.88,
			  0.99, -0.11, 0.22));
	gen_init(gm, g, "B", F, GEN_SHAPE(3), GEN_VALS(0.1, -0.2, 0.3));
	gen_node(gm, g, "Mul", "mul", "x,a", "xa");
	gen_node(gm, g, "Add", "add", "xa,b", "xb");
	cv = gen_node(gm, g, "Conv", "conv", "xb,W,B", "y");
	gen_attr_ints(gm, cv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(gm, g, "Mul", "other", "x2,a", "y2");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 3, 5, 5));
	gen_output(gm, g, "y2", F, GEN_SHAPE(1, 2, 5, 5));
	err = absorb(gm, "conv", s, &p, &m);
	cr_expect_lt(err, TOL, "output changed by %g", err);
	cr_expect_eq(p.n, 2);
	cr_expect_eq(p.site[0].kind, OQ_AWQ_DIV_CONST);
	w = input_floats(m, "conv", 1);
	a = input_floats(m, "mul", 1);
	b = input_floats(m, "add", 1);
	cr_expect_float_eq(w[0], 0.1f * 0.5f, 1e-7, "W[0, 0, 0, 0] %g", w[0]);
	cr_expect_float_eq(w[9], 0.15f * 3.0f, 1e-6, "W[0, 1, 0, 0] %g", w[9]);
	cr_expect_float_eq(a[0], 3.0f, 1e-6);
	cr_expect_float_eq(a[1], 0.5f, 1e-6);
	cr_expect_float_eq(b[1], -0.25f / 3, 1e-7);
	cr_expect_eq(oq_value_const(m->graph, node_named(m, "mul")->inputs[1])->rank, 3, "a / s is [2, 1, 1]");
	cr_expect_float_eq(oq_tensor_get(oq_value_const(m->graph, node_named(m, "other")->inputs[1]), 0), 1.5, 1e-7,
			   "the other reader of a still reads 1.5");
	free(w);
	free(a);
	free(b);
	oq_model_free(m);
	gen_free(gm);
}

/* x -> Div(c) -> Conv: the divisor c becomes c * s. */
Test(awq_absorb, div_by_constant)
{
	static const float s[2] = {4.0f, 0.25f};
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	oq_awq_path p;
	oq_model *m;
	double err;

	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	gen_init(gm, g, "c", F, GEN_SHAPE(1, 2, 1, 1), GEN_VALS(2.0, -3.0));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(0.5, -1.0, 0.25, 2.0));
	gen_node(gm, g, "Div", "div", "x,c", "xc");
	gen_node(gm, g, "Conv", "conv", "xc,W", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 2, 3, 3));
	err = absorb(gm, "conv", s, &p, &m);
	cr_expect_lt(err, TOL, "output changed by %g", err);
	cr_expect_eq(p.site[0].kind, OQ_AWQ_MUL_CONST);
	cr_expect_float_eq(oq_tensor_get(oq_value_const(m->graph, node_named(m, "div")->inputs[1]), 0), 8.0, 1e-6);
	oq_model_free(m);
	gen_free(gm);
}

/* Conv1 (3x3, pads 1, bias) -> Conv2: Conv1's output channel c (weights, bias) / s_c. */
Test(awq_absorb, conv_then_conv)
{
	static const float s[2] = {0.2f, 5.0f};
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	Onnx__NodeProto *c1;
	oq_awq_path p;
	oq_model *m;
	float *b1;
	double err;

	gen_input(gm, g, "x", F, GEN_SHAPE(1, 1, 4, 4));
	gen_init(gm, g, "W1", F, GEN_SHAPE(2, 1, 3, 3),
		 GEN_VALS(0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9, -0.9, 0.8, 0.7, -0.6, 0.5, 0.4, 0.3, -0.2, 0.1));
	gen_init(gm, g, "B1", F, GEN_SHAPE(2), GEN_VALS(0.5, -1.5));
	gen_init(gm, g, "W2", F, GEN_SHAPE(3, 2, 1, 1), GEN_VALS(1.0, -2.0, 0.5, 0.25, -0.75, 3.0));
	c1 = gen_node(gm, g, "Conv", "conv1", "x,W1,B1", "h");
	gen_attr_ints(gm, c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(gm, g, "Conv", "conv2", "h,W2", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 3, 4, 4));
	err = absorb(gm, "conv2", s, &p, &m);
	cr_expect_lt(err, TOL, "output changed by %g", err);
	cr_expect(p.n == 1 && p.site[0].kind == OQ_AWQ_ROWS);
	b1 = input_floats(m, "conv1", 2);
	cr_expect_float_eq(b1[0], 0.5f / 0.2f, 1e-6);
	cr_expect_float_eq(b1[1], -1.5f / 5.0f, 1e-7);
	free(b1);
	oq_model_free(m);
	gen_free(gm);
}

/* LayerNormalization (axis -1) -> MatMul: Scale and B / s, the weight's row c times s_c. */
Test(awq_absorb, layernorm_then_matmul)
{
	static const float s[4] = {0.5f, 2.0f, 1.25f, 0.1f};
	gen_model *gm = new_model(17);
	Onnx__GraphProto *g = gen_graph(gm);
	oq_awq_path p;
	oq_model *m;
	float *gam;
	double err;

	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3, 4));
	gen_init(gm, g, "gamma", F, GEN_SHAPE(4), GEN_VALS(1.0, 0.5, -2.0, 1.5));
	gen_init(gm, g, "beta", F, GEN_SHAPE(4), GEN_VALS(0.1, -0.2, 0.3, 0.0));
	gen_init(gm, g, "W", F, GEN_SHAPE(4, 3),
		 GEN_VALS(0.2, -0.4, 0.6, 0.8, 1.0, -1.2, 0.3, 0.5, -0.7, 0.9, -0.1, 0.4));
	gen_node(gm, g, "LayerNormalization", "ln", "x,gamma,beta", "h");
	gen_node(gm, g, "MatMul", "mm", "h,W", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 3, 3));
	err = absorb(gm, "mm", s, &p, &m);
	cr_expect_lt(err, TOL, "output changed by %g", err);
	cr_expect(p.n == 1 && p.site[0].kind == OQ_AWQ_NORM);
	gam = input_floats(m, "ln", 1);
	cr_expect_float_eq(gam[3], 1.5f / 0.1f, 1e-5);
	free(gam);
	oq_model_free(m);
	gen_free(gm);
}

/* ------------------------------------------------------------ what is left alone */

/* The path of `layer` in gm does not exist; *why contains `want`. */
static void no_path(gen_model *gm, const char *layer, const char *want)
{
	oq_model *m = NULL;
	oq_awq_path p;
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(gm, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_expect_not(oq_awq_path_of(m->graph, node_named(m, layer), NULL, 0, &p), "a path through %zu nodes", p.n);
	cr_expect(strstr(p.why, want), "why: '%s', want '%s'", p.why, want);
	oq_model_free(m);
	gen_free(gm);
}

/* x -> Mul(a) -> v, read by the Conv and by a Relu: scaling v would change the Relu's output. */
Test(awq_skip, value_with_two_readers)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	gen_init(gm, g, "a", F, 0, NULL, GEN_VALS(2.0));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(0.5, -1.0, 0.25, 2.0));
	gen_node(gm, g, "Mul", "mul", "x,a", "v");
	gen_node(gm, g, "Conv", "conv", "v,W", "y");
	gen_node(gm, g, "Relu", "relu", "v", "r");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 2, 3, 3));
	gen_output(gm, g, "r", F, GEN_SHAPE(1, 2, 3, 3));
	no_path(gm, "conv", "'v' has other readers");
}

/* Conv -> HardSwish -> Conv: HardSwish(x) / s is no HardSwish of anything the model has. */
Test(awq_skip, activation_producer)
{
	gen_model *gm = new_model(14);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	gen_init(gm, g, "W1", F, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(0.5, -1.0, 0.25, 2.0));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(0.5, -1.0, 0.25, 2.0));
	gen_node(gm, g, "Conv", "conv1", "x,W1", "h");
	gen_node(gm, g, "HardSwish", "hs", "h", "v");
	gen_node(gm, g, "Conv", "conv", "v,W", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 2, 3, 3));
	no_path(gm, "conv", "written by HardSwish 'hs'");
}

/* A grouped (depthwise) Conv: its input channels scale whole output channels. */
Test(awq_skip, depthwise_conv)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	Onnx__NodeProto *n;
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	gen_init(gm, g, "a", F, 0, NULL, GEN_VALS(2.0));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 1, 1, 1), GEN_VALS(0.5, -1.0));
	gen_node(gm, g, "Mul", "mul", "x,a", "v");
	n = gen_node(gm, g, "Conv", "conv", "v,W", "y");
	gen_attr_int(gm, n, "group", 2);
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 2, 3, 3));
	no_path(gm, "conv", "grouped");
}

/*
 * Through the pipeline: x -> HardSwish -> Conv, weight-only int8 with --awq on four samples.
 * Nothing can take the scales: the written weight is byte for byte the one without --awq.
 */
Test(awq_skip, pipeline_leaves_the_weight_alone)
{
	const int64_t dims[4] = {1, 2, 2, 2};
	char in[256], out[256], ref[256], cal[256], smp[300];
	gen_model *gm = new_model(14);
	Onnx__GraphProto *g = gen_graph(gm);
	oq_pipeline_opts po;
	oq_model *a = NULL, *b = NULL;
	const oq_tensor *qa = NULL, *qb = NULL;
	float x[8];
	oq_diag d;

	oq_diag_init(&d);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 2, 2));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(0.5, -0.013, 0.25, 2.0));
	gen_node(gm, g, "HardSwish", "hs", "x", "v");
	gen_node(gm, g, "Conv", "conv", "v,W", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 2, 2, 2));
	cr_assert_not_null(tmpdir_make("oq_awq"));
	snprintf(in, sizeof in, "%s", tmpdir_at("m.onnx"));
	snprintf(out, sizeof out, "%s", tmpdir_at("q.onnx"));
	snprintf(ref, sizeof ref, "%s", tmpdir_at("r.onnx"));
	snprintf(cal, sizeof cal, "%s", tmpdir_at("calib"));
	cr_assert_eq(mkdir(cal, 0755), 0);
	cr_assert_eq(gen_write(gm, in), 0);
	for (int i = 0; i < 4; i++) {
		for (int k = 0; k < 8; k++)
			x[k] = (float)(k < 4 ? 0.5 - 0.1 * k : 40 + i);
		snprintf(smp, sizeof smp, "%s/%03d.npy", cal, i);
		cr_assert_eq(oq_npy_write(smp, F, 4, dims, x, sizeof x, &d), OQ_OK, "%s", d.msg);
	}
	for (int with = 0; with < 2; with++) {
		oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
		po.in_path = in;
		po.out_path = with ? out : ref;
		po.q.weight_only = 1;
		po.q.op_types = (const char *const[]){"Conv"};
		po.q.n_op_types = 1;
		po.quiet = 1;
		if (with) {
			po.q.awq = 1;
			po.calib.source = cal;
			po.calib.threads = 1;
		}
		cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	}
	cr_assert_eq(oq_model_load(ref, &a, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_model_load(out, &b, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < a->graph->n_inits; i++)
		if (a->graph->inits[i]->init->dtype == OQ_DT_INT8)
			qa = a->graph->inits[i]->init;
	for (size_t i = 0; i < b->graph->n_inits; i++)
		if (b->graph->inits[i]->init->dtype == OQ_DT_INT8)
			qb = b->graph->inits[i]->init;
	cr_assert(qa && qb && qa->nbytes == qb->nbytes, "no int8 weight in one of the models");
	cr_expect_eq(memcmp(qa->data, qb->data, qa->nbytes), 0, "--awq changed the quantized weight");
	oq_model_free(a);
	oq_model_free(b);
	tmpdir_remove();
	gen_free(gm);
}
