/*
 * test_pass_rewrite.c - the graph rewrites: cleanup, fold-bn, cle, fuse.
 *
 * Every case builds a small model in C (tests/util/gen_model), runs the
 * executor on fixed pseudo-random inputs, runs the passes through the
 * driver with the verifier on (oq_passes_run, verify=1), checks the graph
 * structure (which nodes remain, what the initializers hold, which
 * qmarks were set) and runs the executor again on the same inputs: the
 * outputs must match within 1e-5 relative (max|a-b| / max|a|). The
 * reference is the executor on the unmodified model, i.e. an independent
 * computation of Conv/Gemm/BatchNormalization/Cast/... by the kernels
 * (themselves tested against the ONNX backend data), not by the passes.
 * The same passes on the real PaddleOCR and torchvision models are in
 * tests/integration/passes_real.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "runmodel.h"
#include "src/io/onnx_io.h"
#include "passes/pass.h"

#define F OQ_DT_FLOAT
#define TOL 1e-5

/* ------------------------------------------------------------ helpers */

static uint64_t rng = RUNMODEL_SEED;

static double urand(void) /* xorshift64, [-1, 1) */
{
	return runmodel_urand(&rng);
}

/* Random inputs for every fed input of m (symbolic dims become `sym`). */
static size_t make_inputs(oq_model *m, oq_rt *in, size_t cap, int64_t sym)
{
	size_t n = 0;
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(runmodel_inputs(m, &rng, sym, in, cap, &n, &d), OQ_OK, "%s", d.msg);
	return n;
}

static size_t run(oq_model *m, const oq_rt *in, size_t nin, oq_rt *out, size_t cap)
{
	size_t no = 0;
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(runmodel_run(m, in, nin, out, cap, &no, &d), OQ_OK, "run: %s", d.msg);
	return no;
}

static int run_passes(oq_model *m, const char *list)
{
	oq_pass_run r = {0};
	oq_opts o;
	oq_diag d;
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY; /* fuse's accuracy-first units */
	oq_diag_init(&d);
	r.list = list;
	r.verify = 1;
	int rc = oq_passes_run(m, &r, &o, &d);
	cr_assert_eq(rc, OQ_OK, "passes: %s", d.msg);
	return rc;
}

/* Loaded model plus its builder (the model borrows the builder's buffer). */
typedef struct fx {
	gen_model *gm;
	oq_model *m;
	double err;          /* relative output difference before/after */
} fx;

/* Loads gm, runs the executor, the passes, the executor again. */
static fx rewrite(gen_model *gm, const char *list)
{
	fx f = {gm, NULL, 0};
	oq_diag d;
	oq_rt in[8] = {{0}}, a[8] = {{0}}, b[8] = {{0}};
	oq_diag_init(&d);
	cr_assert_eq(gen_load(gm, &f.m, &d), OQ_OK, "load: %s", d.msg);
	size_t nin = make_inputs(f.m, in, 8, 4);
	size_t na = run(f.m, in, nin, a, 8);
	run_passes(f.m, list);
	size_t nb = run(f.m, in, nin, b, 8);
	cr_assert_eq(na, nb);
	f.err = runmodel_rel_err(a, b, na);
	for (size_t i = 0; i < 8; i++) {
		oq_rt_release(&in[i]);
		oq_rt_release(&a[i]);
		oq_rt_release(&b[i]);
	}
	return f;
}

static void done(fx *f)
{
	oq_model_free(f->m);
	gen_free(f->gm);
}

static size_t count_op(const oq_graph *g, const char *op)
{
	return runmodel_count_op(g, op);
}

static oq_value *val(const oq_model *m, const char *name)
{
	oq_value *v = oq_graph_find(m->graph, name);
	cr_assert_not_null(v, "no value %s", name);
	return v;
}

static gen_model *new_model(int64_t opset)
{
	gen_model *gm = gen_new(8);
	gen_opset(gm, "", opset);
	return gm;
}

/* C values: 0.5 + 0.1*i etc. (BN statistics that make folding visible). */
static void bn_inits(gen_model *gm, Onnx__GraphProto *g, const char *p, int64_t C)
{
	double s[16], b[16], mu[16], var[16];
	char nm[64];
	for (int64_t i = 0; i < C; i++) {
		s[i] = 0.5 + 0.1 * (double)i;
		b[i] = 0.1 * (double)i - 0.2;
		mu[i] = 0.05 * (double)i - 0.1;
		var[i] = 0.5 + 0.2 * (double)i;
	}
	snprintf(nm, sizeof nm, "%s_s", p);
	gen_init(gm, g, nm, F, 1, &C, s);
	snprintf(nm, sizeof nm, "%s_b", p);
	gen_init(gm, g, nm, F, 1, &C, b);
	snprintf(nm, sizeof nm, "%s_m", p);
	gen_init(gm, g, nm, F, 1, &C, mu);
	snprintf(nm, sizeof nm, "%s_v", p);
	gen_init(gm, g, nm, F, 1, &C, var);
}

/* An initializer with n pseudo-random values in [-1, 1). */
static void rand_init(gen_model *gm, Onnx__GraphProto *g, const char *name, int rank, const int64_t *dims)
{
	static double v[4096];
	size_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= (size_t)dims[i];
	cr_assert_leq(n, 4096);
	for (size_t i = 0; i < n; i++)
		v[i] = urand();
	gen_init(gm, g, name, F, rank, dims, v);
}

/* ------------------------------------------------------------ cleanup */

Test(cleanup, identity_dropout_and_graph_outputs)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	gen_node(gm, g, "Identity", "i1", "x", "a");
	gen_node(gm, g, "Dropout", "do", "a", "b");
	gen_node(gm, g, "Relu", "r", "b", "c");
	gen_node(gm, g, "Identity", "i2", "c", "y");   /* graph output: Relu writes y */
	gen_node(gm, g, "Identity", "i3", "x", "z");   /* graph output from graph input: stays */
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 3));
	gen_output(gm, g, "z", F, GEN_SHAPE(2, 3));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph;
	cr_assert_eq(mg->n_nodes, 2);
	cr_assert_eq(count_op(mg, "Identity"), 1);
	cr_assert_eq(count_op(mg, "Dropout"), 0);
	oq_value *y = val(f.m, "y");
	cr_assert_not_null(y->producer);
	cr_assert_str_eq(y->producer->op_type, "Relu");
	cr_assert_eq(y->producer->inputs[0], val(f.m, "x"));
	cr_assert_eq(val(f.m, "z")->producer->inputs[0], val(f.m, "x"));
	cr_assert_eq(f.err, 0);
	done(&f);
}

Test(cleanup, dropout_with_used_mask_stays)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	gen_node(gm, g, "Dropout", "do", "x", "a,mask");
	gen_node(gm, g, "Relu", "r", "a", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 3));
	gen_output(gm, g, "mask", OQ_DT_BOOL, GEN_SHAPE(2, 3));
	fx f = rewrite(gm, "cleanup");
	cr_assert_eq(count_op(f.m->graph, "Dropout"), 1);
	done(&f);
}

Test(cleanup, constants_become_initializers)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	Onnx__NodeProto *c1 = gen_node(gm, g, "Constant", "c1", "", "k");
	Onnx__AttributeProto *at = gen_attr(gm, c1, "value", OQ_ATTR_TENSOR);
	at->t = gen_tensor(gm, "", F, GEN_SHAPE(3), GEN_VALS(1.5, -2, 0.25));
	Onnx__NodeProto *c2 = gen_node(gm, g, "Constant", "c2", "", "sh");
	gen_attr_ints(gm, c2, "value_ints", 2, (const int64_t[]){3, 2});
	Onnx__NodeProto *c3 = gen_node(gm, g, "Constant", "c3", "", "half");
	gen_attr_float(gm, c3, "value_float", 0.5f);
	gen_node(gm, g, "Add", "add", "x,k", "a");
	gen_node(gm, g, "Mul", "mul", "a,half", "b");
	gen_node(gm, g, "Reshape", "rs", "b,sh", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(3, 2));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph;
	cr_assert_eq(count_op(mg, "Constant"), 0);
	cr_assert_eq(mg->n_nodes, 3);
	oq_value *k = val(f.m, "k");
	cr_assert_not_null(k->init);
	cr_assert_eq(k->init->nelem, 3);
	cr_assert_float_eq(oq_tensor_get(k->init, 1), -2.0, 0);
	cr_assert_eq(val(f.m, "sh")->init->dtype, OQ_DT_INT64);
	cr_assert_eq(oq_tensor_get_int(val(f.m, "sh")->init, 0), 3);
	cr_assert_eq(val(f.m, "half")->init->rank, 0);
	cr_assert_eq(mg->n_inits, 3);
	cr_assert_eq(f.err, 0);
	done(&f);
}

Test(cleanup, fp16_weight_cast_folds)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	/* values exact in fp16 */
	gen_init(gm, g, "w16", OQ_DT_FLOAT16, GEN_SHAPE(2, 3), GEN_VALS(0.5, -1.25, 3, 0.125, -0.75, 2048));
	Onnx__NodeProto *c = gen_node(gm, g, "Cast", "cast", "w16", "w");
	gen_attr_int(gm, c, "to", OQ_DT_FLOAT);
	gen_node(gm, g, "Mul", "mul", "x,w", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 3));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph;
	cr_assert_eq(mg->n_nodes, 1);
	cr_assert_eq(mg->n_inits, 1);
	oq_value *w = val(f.m, "w");
	cr_assert_eq(mg->inits[0], w);
	cr_assert_eq(w->init->dtype, F);
	cr_assert_float_eq(oq_tensor_get(w->init, 1), -1.25, 0);
	cr_assert_float_eq(oq_tensor_get(w->init, 5), 2048, 0);
	cr_assert_eq(f.err, 0);
	done(&f);
}

Test(cleanup, data_movement_chains_fold)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(3, 2));
	gen_init(gm, g, "a", F, GEN_SHAPE(2, 3), GEN_VALS(1.7, -2.6, 3.2, -0.4, 5.9, -6.1));
	gen_init(gm, g, "ax0", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(0));
	gen_init(gm, g, "one", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(1));
	/* Transpose -> Unsqueeze(0) -> Squeeze(0) : [3,2] */
	Onnx__NodeProto *t = gen_node(gm, g, "Transpose", "t", "a", "at");
	gen_attr_ints(gm, t, "perm", 2, (const int64_t[]){1, 0});
	gen_node(gm, g, "Unsqueeze", "u", "at,ax0", "au");
	gen_node(gm, g, "Squeeze", "s", "au,ax0", "as");
	/* float -> int32 (truncation) -> float */
	Onnx__NodeProto *c1 = gen_node(gm, g, "Cast", "ci", "as", "ai");
	gen_attr_int(gm, c1, "to", OQ_DT_INT32);
	Onnx__NodeProto *c2 = gen_node(gm, g, "Cast", "cf", "ai", "af");
	gen_attr_int(gm, c2, "to", OQ_DT_FLOAT);
	gen_node(gm, g, "Add", "add", "x,af", "y");
	/* Shape(x) (static) -> Concat with [1] -> Reshape x to [3,2,1] -> Flatten(axis 1) */
	gen_node(gm, g, "Shape", "shp", "x", "xs");
	Onnx__NodeProto *cc = gen_node(gm, g, "Concat", "cat", "xs,one", "ns");
	gen_attr_int(gm, cc, "axis", 0);
	gen_node(gm, g, "Reshape", "rs", "x,ns", "x3");
	gen_node(gm, g, "Flatten", "fl", "x3", "y2");
	gen_output(gm, g, "y", F, GEN_SHAPE(3, 2));
	gen_output(gm, g, "y2", F, GEN_SHAPE(3, 2));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph;
	/* left: Add, Reshape (x is not constant), Flatten */
	cr_assert_eq(mg->n_nodes, 3, "%zu nodes", mg->n_nodes);
	oq_value *af = val(f.m, "af"), *ns = val(f.m, "ns");
	cr_assert_not_null(af->init);
	/* transpose of a, truncated toward zero: [[1,-0],[-2,5],[3,-6]] */
	const double want[6] = {1, 0, -2, 5, 3, -6};
	for (int i = 0; i < 6; i++)
		cr_assert_float_eq(oq_tensor_get(af->init, (size_t)i), want[i], 0);
	cr_assert_not_null(ns->init);
	cr_assert_eq(ns->init->nelem, 3);
	cr_assert_eq(oq_tensor_get_int(ns->init, 0), 3);
	cr_assert_eq(oq_tensor_get_int(ns->init, 2), 1);
	cr_assert_eq(mg->n_inits, 2); /* af, ns: a, ax0, one and the intermediates are gone */
	cr_assert_eq(f.err, 0);
	done(&f);
}

Test(cleanup, dead_code_and_unused_initializers)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	gen_init(gm, g, "unused", F, GEN_SHAPE(2), GEN_VALS(1, 2));
	gen_init(gm, g, "k", F, GEN_SHAPE(1), GEN_VALS(3));
	gen_node(gm, g, "Relu", "r", "x", "y");
	gen_node(gm, g, "Add", "d1", "x,k", "t1");
	gen_node(gm, g, "Sigmoid", "d2", "t1", "t2");
	gen_value_info(gm, g, "t1", F, GEN_SHAPE(2, 3));
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 3));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph;
	cr_assert_eq(mg->n_nodes, 1);
	cr_assert_eq(mg->n_inits, 0);
	cr_assert_eq(mg->n_vinfos, 0);
	done(&f);
}

/*
 * Slice of a [3, 4] constant (0..11 row-major) with axes out of order and
 * negative, a negative step and out-of-range bounds:
 *   axis 1: start 3, end -100 (+4 -> -96, clamped to -1), step -2: columns 3, 1
 *   axis -2 (0): start 1, end 100 (clamped to 3), step 1: rows 1, 2
 * gives [[7, 5], [11, 9]].
 */
Test(cleanup, slice_axes_steps_and_clamped_bounds)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 2));
	gen_init(gm, g, "a", F, GEN_SHAPE(3, 4), GEN_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
	gen_init(gm, g, "st", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(3, 1));
	gen_init(gm, g, "en", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(-100, 100));
	gen_init(gm, g, "ax", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(1, -2));
	gen_init(gm, g, "sp", OQ_DT_INT32, GEN_SHAPE(2), GEN_VALS(-2, 1));
	gen_node(gm, g, "Slice", "sl", "a,st,en,ax,sp", "as");
	gen_node(gm, g, "Add", "add", "x,as", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 2));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph;
	cr_assert_eq(mg->n_nodes, 1, "%zu nodes", mg->n_nodes);
	oq_value *as = val(f.m, "as");
	cr_assert_not_null(as->init, "the Slice was not folded");
	cr_assert_eq(as->init->rank, 2);
	cr_assert_eq(as->init->dims[0], 2);
	cr_assert_eq(as->init->dims[1], 2);
	const double want[4] = {7, 5, 11, 9};
	for (size_t i = 0; i < 4; i++)
		cr_assert_float_eq(oq_tensor_get(as->init, i), want[i], 0, "element %zu", i);
	cr_assert_eq(mg->n_inits, 1);
	cr_assert_eq(f.err, 0);
	done(&f);
}

/*
 * Loop(2, true, h0 = x) whose body computes h = MatMul(h_in, Concat(a, b)),
 * a and b outer initializers [1, 2] (as torch.jit.script exports build an
 * LSTM's weights in its body). The Concat folds into one body initializer
 * [2, 2] = {a0, a1, b0, b1}; b, read by nothing else, leaves the main graph
 * and the body no longer captures it; a stays (the main graph's Add reads it).
 */
Test(cleanup, loop_body_concat_of_outer_constants_folds)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm), *b;
	Onnx__NodeProto *n;
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2));
	gen_init(gm, g, "M", OQ_DT_INT64, 0, NULL, GEN_VALS(2));
	gen_init(gm, g, "cond", OQ_DT_BOOL, 0, NULL, GEN_VALS(1));
	gen_init(gm, g, "a", F, GEN_SHAPE(1, 2), GEN_VALS(0.75, -0.5));
	gen_init(gm, g, "b", F, GEN_SHAPE(1, 2), GEN_VALS(0.25, 1.25));
	n = gen_node(gm, g, "Loop", "loop", "M,cond,x", "h");
	b = gen_attr_graph(gm, n, "body", "body");
	gen_input(gm, b, "i", OQ_DT_INT64, 0, NULL);
	gen_input(gm, b, "c_in", OQ_DT_BOOL, 0, NULL);
	gen_input(gm, b, "h_in", F, GEN_SHAPE(1, 2));
	gen_node(gm, b, "Identity", "c", "c_in", "c_out");
	gen_attr_int(gm, gen_node(gm, b, "Concat", "cat", "a,b", "w"), "axis", 0);
	gen_node(gm, b, "MatMul", "mm", "h_in,w", "h_out");
	gen_output(gm, b, "c_out", OQ_DT_BOOL, 0, NULL);
	gen_output(gm, b, "h_out", F, GEN_SHAPE(1, 2));
	gen_node(gm, g, "Add", "add", "h,a", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(1, 2));
	fx f = rewrite(gm, "cleanup");
	oq_graph *mg = f.m->graph, *body = NULL;
	for (size_t i = 0; i < mg->n_nodes; i++)
		if (oq_node_is(mg->nodes[i], OQ_OP_Loop))
			body = oq_node_attr(mg->nodes[i], "body")->g;
	cr_assert_not_null(body, "the Loop is gone");
	cr_assert_eq(runmodel_count_op(body, "Concat"), 0, "the Concat was not folded");
	cr_assert_eq(body->n_inits, 1, "%zu body initializers", body->n_inits);
	oq_value *w = body->inits[0];
	cr_assert_str_eq(w->name, "w");
	cr_assert_eq(w->flags & OQ_V_OUTER, 0);
	cr_assert_eq(w->init->dtype, F);
	cr_assert_eq(w->init->rank, 2);
	cr_assert_eq(w->init->dims[0], 2);
	cr_assert_eq(w->init->dims[1], 2);
	const double want[4] = {0.75, -0.5, 0.25, 1.25};
	for (size_t i = 0; i < 4; i++)
		cr_assert_float_eq(oq_tensor_get(w->init, i), want[i], 0, "element %zu", i);
	cr_assert_eq(w->n_uses, 1);
	cr_assert(oq_node_is(w->uses[0].node, OQ_OP_MatMul));
	/* main graph: M, cond and a (the Add reads it); b went with the only body that read it */
	cr_assert_eq(mg->n_inits, 3, "%zu main-graph initializers", mg->n_inits);
	cr_assert_not_null(val(f.m, "a")->init);
	oq_value *bm = oq_graph_find(mg, "b");
	cr_assert(!bm || !bm->init, "b is still an initializer");
	oq_value *bb = oq_graph_find(body, "b");
	cr_assert(!bb || !(bb->flags & OQ_V_OUTER), "the body still captures b");
	cr_assert_eq(f.err, 0);
	done(&f);
}

/* ------------------------------------------------------------ fold-bn */

/* Asserts no BN remains and outputs match. */
static void folded(fx *f, size_t nodes)
{
	cr_assert_eq(count_op(f->m->graph, "BatchNormalization"), 0);
	cr_assert_eq(f->m->graph->n_nodes, nodes, "%zu nodes", f->m->graph->n_nodes);
	cr_assert_lt(f->err, TOL, "relative error %g", f->err);
	cr_assert_gt(f->err, -1);
}

/* Conv-like producer -> BN -> y. */
static gen_model *conv_bn(const char *op, int64_t cin, int64_t cout, int64_t k, int rank, int64_t group,
			  int bias, int64_t *xdims)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	int64_t wd[4] = {0}, C = cout;
	int is_t = strcmp(op, "ConvTranspose") == 0;
	wd[0] = is_t ? cin : cout;
	wd[1] = is_t ? cout / group : cin / group;
	for (int i = 2; i < rank; i++)
		wd[i] = k;
	gen_input(gm, g, "x", F, rank, xdims);
	rand_init(gm, g, "W", rank, wd);
	if (bias)
		rand_init(gm, g, "B", 1, &C);
	bn_inits(gm, g, "bn", C);
	Onnx__NodeProto *c = gen_node(gm, g, op, "conv", bias ? "x,W,B" : "x,W", "t");
	gen_attr_int(gm, c, "group", group);
	if (is_t)
		gen_attr_ints(gm, c, "strides", (size_t)rank - 2, (const int64_t[]){2, 2});
	Onnx__NodeProto *b = gen_node(gm, g, "BatchNormalization", "bn", "t,bn_s,bn_b,bn_m,bn_v", "y");
	gen_attr_float(gm, b, "epsilon", 1e-3f);
	gen_output(gm, g, "y", F, -1, NULL);
	return gm;
}

Test(fold_bn, conv2d)
{
	fx f = rewrite(conv_bn("Conv", 3, 4, 3, 4, 1, 1, (int64_t[]){1, 3, 5, 5}), "fold-bn");
	folded(&f, 1);
	oq_value *y = val(f.m, "y");
	cr_assert_str_eq(y->producer->op_type, "Conv");
	/* bn params gone, W and B rewritten in place */
	cr_assert_eq(f.m->graph->n_inits, 2);
	done(&f);
}

Test(fold_bn, conv1d_without_bias)
{
	fx f = rewrite(conv_bn("Conv", 2, 3, 3, 3, 1, 0, (int64_t[]){1, 2, 7}), "fold-bn");
	folded(&f, 1);
	cr_assert_eq(val(f.m, "y")->producer->n_inputs, 3);
	cr_assert_not_null(val(f.m, "y")->producer->inputs[2]->init);
	done(&f);
}

Test(fold_bn, depthwise_and_grouped)
{
	fx f = rewrite(conv_bn("Conv", 4, 4, 3, 4, 4, 1, (int64_t[]){1, 4, 5, 5}), "fold-bn");
	folded(&f, 1);
	done(&f);
	f = rewrite(conv_bn("Conv", 4, 6, 3, 4, 2, 1, (int64_t[]){1, 4, 5, 5}), "fold-bn");
	folded(&f, 1);
	done(&f);
}

Test(fold_bn, conv_transpose_grouped)
{
	fx f = rewrite(conv_bn("ConvTranspose", 4, 6, 2, 4, 2, 1, (int64_t[]){1, 4, 3, 3}), "fold-bn");
	folded(&f, 1);
	done(&f);
	f = rewrite(conv_bn("ConvTranspose", 4, 6, 2, 4, 2, 0, (int64_t[]){1, 4, 3, 3}), "fold-bn");
	folded(&f, 1);
	done(&f);
}

Test(fold_bn, conv_transpose_then_bias_add)
{
	/* PaddleOCR det: ConvTranspose (no bias) -> Add(bias [C,1,1]) -> BN */
	gen_model *gm = new_model(11);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 4, 3, 3));
	rand_init(gm, g, "W", GEN_SHAPE(4, 3, 2, 2));
	rand_init(gm, g, "bias", GEN_SHAPE(6, 1, 1));
	bn_inits(gm, g, "bn", 6);
	Onnx__NodeProto *c = gen_node(gm, g, "ConvTranspose", "ct", "x,W", "t");
	gen_attr_int(gm, c, "group", 2);
	gen_attr_ints(gm, c, "strides", 2, (const int64_t[]){2, 2});
	gen_node(gm, g, "Add", "add", "t,bias", "u");
	gen_node(gm, g, "BatchNormalization", "bn", "u,bn_s,bn_b,bn_m,bn_v", "y");
	gen_output(gm, g, "y", F, -1, NULL);
	fx f = rewrite(gm, "fold-bn");
	/* the constant Add folds into the ConvTranspose bias first, then BN into the ConvTranspose */
	folded(&f, 1);
	cr_assert_str_eq(val(f.m, "y")->producer->op_type, "ConvTranspose");
	done(&f);
}

/*
 * PaddleOCR det: Conv -> Mul(constant) -> Add(constant), a BN exported as
 * ops. W = [[1,2]] (1x1 conv, 2 -> 1 channel... here 2 output channels),
 * checked by hand: y[c] = (conv(x)[c]) * m[c] + a.
 */
Test(fold_bn, conv_mul_add_constants)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 1, 1, 2));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 1, 1, 1), (double[]){1, 2});
	gen_init(gm, g, "B", F, GEN_SHAPE(2), (double[]){0.5, -1});
	gen_init(gm, g, "m", F, GEN_SHAPE(2, 1, 1), (double[]){3, 0.25});
	gen_init(gm, g, "a", F, GEN_SHAPE(1), (double[]){10});
	gen_node(gm, g, "Conv", "conv", "x,W,B", "t");
	gen_node(gm, g, "Mul", "mul", "m,t", "u");
	gen_node(gm, g, "Add", "add", "u,a", "y");
	gen_output(gm, g, "y", F, -1, NULL);
	fx f = rewrite(gm, "fold-bn");
	cr_assert_eq(f.m->graph->n_nodes, 1);
	cr_assert_lt(f.err, TOL, "relative error %g", f.err);
	oq_node *c = val(f.m, "y")->producer;
	cr_assert_str_eq(c->op_type, "Conv");
	/* W' = W*m = {3, 0.5}; B' = B*m + a = {11.5, 9.75} */
	const float *w = c->inputs[1]->init->data, *b = c->inputs[2]->init->data;
	cr_assert_float_eq(w[0], 3.0f, 1e-6);
	cr_assert_float_eq(w[1], 0.5f, 1e-6);
	cr_assert_float_eq(b[0], 11.5f, 1e-6);
	cr_assert_float_eq(b[1], 9.75f, 1e-6);
	done(&f);

	/* a Mul whose constant is not per-channel ([2] on the last axis) stays */
	gm = new_model(13);
	g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 1, 1, 2));
	gen_init(gm, g, "W", F, GEN_SHAPE(2, 1, 1, 1), (double[]){1, 2});
	gen_init(gm, g, "m", F, GEN_SHAPE(2), (double[]){3, 0.25});
	gen_node(gm, g, "Conv", "conv", "x,W", "t");
	gen_node(gm, g, "Mul", "mul", "t,m", "y");
	gen_output(gm, g, "y", F, -1, NULL);
	f = rewrite(gm, "fold-bn");
	cr_assert_eq(f.m->graph->n_nodes, 2);
	done(&f);
}

static gen_model *gemm_bn(int transb, int with_c)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	int64_t C = 4;
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	if (transb)
		rand_init(gm, g, "W", GEN_SHAPE(4, 3));
	else
		rand_init(gm, g, "W", GEN_SHAPE(3, 4));
	if (with_c)
		rand_init(gm, g, "C", 1, &C);
	bn_inits(gm, g, "bn", C);
	Onnx__NodeProto *n = gen_node(gm, g, "Gemm", "gemm", with_c ? "x,W,C" : "x,W", "t");
	gen_attr_int(gm, n, "transB", transb);
	gen_attr_float(gm, n, "alpha", 0.7f);
	gen_attr_float(gm, n, "beta", 0.3f);
	gen_node(gm, g, "BatchNormalization", "bn", "t,bn_s,bn_b,bn_m,bn_v", "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 4));
	return gm;
}

Test(fold_bn, gemm_transb_0_and_1)
{
	for (int tb = 0; tb < 2; tb++)
		for (int c = 0; c < 2; c++) {
			fx f = rewrite(gemm_bn(tb, c), "fold-bn");
			folded(&f, 1);
			done(&f);
		}
}

static gen_model *matmul_bn(int with_add)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	int64_t C = 4;
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	rand_init(gm, g, "W", GEN_SHAPE(3, 4));
	rand_init(gm, g, "bias", 1, &C);
	bn_inits(gm, g, "bn", C);
	gen_node(gm, g, "MatMul", "mm", "x,W", "t");
	if (with_add)
		gen_node(gm, g, "Add", "add", "bias,t", "t2");
	gen_node(gm, g, "BatchNormalization", "bn", with_add ? "t2,bn_s,bn_b,bn_m,bn_v" : "t,bn_s,bn_b,bn_m,bn_v",
		 "y");
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 4));
	return gm;
}

Test(fold_bn, matmul_with_and_without_bias)
{
	fx f = rewrite(matmul_bn(0), "fold-bn");
	folded(&f, 2); /* MatMul + new Add */
	cr_assert_str_eq(val(f.m, "y")->producer->op_type, "Add");
	done(&f);
	f = rewrite(matmul_bn(1), "fold-bn");
	folded(&f, 2);
	done(&f);
}

Test(fold_bn, shared_weight_is_copied)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 4, 4));
	gen_init(gm, g, "W", F, GEN_SHAPE(3, 2, 1, 1), GEN_VALS(1, 2, 3, 4, 5, 6));
	bn_inits(gm, g, "bn", 3);
	gen_node(gm, g, "Conv", "c1", "x,W", "t");
	gen_node(gm, g, "BatchNormalization", "bn", "t,bn_s,bn_b,bn_m,bn_v", "y");
	gen_node(gm, g, "Conv", "c2", "x,W", "z");
	gen_output(gm, g, "y", F, -1, NULL);
	gen_output(gm, g, "z", F, -1, NULL);
	fx f = rewrite(gm, "fold-bn");
	folded(&f, 2);
	oq_value *w = val(f.m, "W");
	cr_assert_eq(val(f.m, "z")->producer->inputs[1], w);
	cr_assert_neq(val(f.m, "y")->producer->inputs[1], w);
	for (int i = 0; i < 6; i++)
		cr_assert_float_eq(oq_tensor_get(w->init, (size_t)i), i + 1.0, 0);
	/* first channel: a = 0.5/sqrt(0.5+1e-5) */
	double a0 = 0.5 / sqrt(0.5 + 1e-5);
	cr_assert_float_eq(oq_tensor_get(val(f.m, "y")->producer->inputs[1]->init, 1), 2 * a0, 1e-6);
	done(&f);
}

Test(fold_bn, left_alone)
{
	/* training_mode = 1: structure only (a training-mode BN is not an inference op) */
	gen_model *gm = new_model(15);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	rand_init(gm, g, "W", GEN_SHAPE(2, 2, 1, 1));
	bn_inits(gm, g, "bn", 2);
	gen_node(gm, g, "Conv", "c1", "x,W", "t");
	Onnx__NodeProto *b = gen_node(gm, g, "BatchNormalization", "bn", "t,bn_s,bn_b,bn_m,bn_v", "y");
	gen_attr_int(gm, b, "training_mode", 1);
	gen_output(gm, g, "y", F, -1, NULL);
	oq_model *m = NULL;
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(gen_load(gm, &m, &d), OQ_OK, "%s", d.msg);
	run_passes(m, "fold-bn");
	cr_assert_eq(count_op(m->graph, "BatchNormalization"), 1);
	oq_model_free(m);
	gen_free(gm);

	/* the Conv output has a second reader */
	gm = new_model(13);
	g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	rand_init(gm, g, "W", GEN_SHAPE(2, 2, 1, 1));
	bn_inits(gm, g, "bn", 2);
	gen_node(gm, g, "Conv", "c1", "x,W", "t");
	gen_node(gm, g, "BatchNormalization", "bn", "t,bn_s,bn_b,bn_m,bn_v", "y");
	gen_node(gm, g, "Relu", "r", "t", "z");
	gen_output(gm, g, "y", F, -1, NULL);
	gen_output(gm, g, "z", F, -1, NULL);
	fx f = rewrite(gm, "fold-bn");
	cr_assert_eq(count_op(f.m->graph, "BatchNormalization"), 1);
	cr_assert_eq(f.err, 0);
	done(&f);
}

/* ------------------------------------------------------------ fuse */

static fx fuse_only(gen_model *gm)
{
	fx f = rewrite(gm, "fuse");
	cr_assert_eq(f.err, 0); /* marks only */
	return f;
}

static unsigned qm(const fx *f, const char *name)
{
	return val(f->m, name)->qmark;
}

Test(fuse, conv_relu_and_two_consumers)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
	rand_init(gm, g, "W", GEN_SHAPE(2, 2, 1, 1));
	gen_node(gm, g, "Conv", "c1", "x,W", "t");
	gen_node(gm, g, "Relu", "r1", "t", "y");
	gen_node(gm, g, "Conv", "c2", "y,W", "u");
	gen_node(gm, g, "Relu", "r2", "u", "z1");
	gen_node(gm, g, "Sigmoid", "s", "u", "z2");
	gen_output(gm, g, "z1", F, -1, NULL);
	gen_output(gm, g, "z2", F, -1, NULL);
	fx f = fuse_only(gm);
	cr_assert_eq(qm(&f, "t"), OQ_QM_INTERNAL);
	cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
	cr_assert_eq(val(f.m, "y")->producer->qmark, OQ_QM_ACT);
	cr_assert_eq(qm(&f, "u"), 0);
	cr_assert_eq(qm(&f, "z1"), 0);
	cr_assert_eq(val(f.m, "z1")->producer->qmark, 0);
	done(&f);
}

static gen_model *gemm_clip(int64_t opset)
{
	gen_model *gm = new_model(opset);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	rand_init(gm, g, "W", GEN_SHAPE(3, 4));
	rand_init(gm, g, "C", GEN_SHAPE(4));
	Onnx__NodeProto *gn = gen_node(gm, g, "Gemm", "gemm", "x,W,C", "t");
	if (opset < 7)
		gen_attr_int(gm, gn, "broadcast", 1);
	if (opset < 11) {
		Onnx__NodeProto *c = gen_node(gm, g, "Clip", "clip", "t", "y");
		gen_attr_float(gm, c, "min", 0);
		gen_attr_float(gm, c, "max", 6);
	} else {
		gen_init(gm, g, "lo", F, 0, NULL, GEN_VALS(0));
		gen_init(gm, g, "hi", F, 0, NULL, GEN_VALS(6));
		gen_node(gm, g, "Clip", "clip", "t,lo,hi", "y");
	}
	gen_output(gm, g, "y", F, GEN_SHAPE(2, 4));
	return gm;
}

Test(fuse, gemm_clip_attribute_and_input_forms)
{
	int64_t ops[2] = {6, 13};
	for (int i = 0; i < 2; i++) {
		fx f = fuse_only(gemm_clip(ops[i]));
		cr_assert_eq(qm(&f, "t"), OQ_QM_INTERNAL, "opset %lld", (long long)ops[i]);
		cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
		cr_assert_eq(val(f.m, "y")->producer->qmark, OQ_QM_ACT);
		done(&f);
	}
}

Test(fuse, matmul_add_relu)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(2, 3));
	rand_init(gm, g, "W", GEN_SHAPE(3, 4));
	rand_init(gm, g, "b", GEN_SHAPE(4));
	gen_node(gm, g, "MatMul", "mm", "x,W", "t");
	gen_node(gm, g, "Add", "add", "t,b", "u");
	gen_node(gm, g, "Relu", "r", "u", "y");
	gen_node(gm, g, "MatMul", "mm2", "y,W2", "t2");
	rand_init(gm, g, "W2", GEN_SHAPE(4, 4));
	gen_node(gm, g, "Add", "add2", "b,t2", "y2");
	gen_output(gm, g, "y2", F, GEN_SHAPE(2, 4));
	fx f = fuse_only(gm);
	cr_assert_eq(qm(&f, "t"), OQ_QM_INTERNAL);
	cr_assert_eq(qm(&f, "u"), OQ_QM_INTERNAL);
	cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
	cr_assert_eq(qm(&f, "t2"), OQ_QM_INTERNAL);
	cr_assert_eq(qm(&f, "y2"), OQ_QM_UNIT_OUT);
	done(&f);
}

Test(fuse, layernorm_both_variants)
{
	for (int v = 0; v < 2; v++) {
		gen_model *gm = new_model(13);
		Onnx__GraphProto *g = gen_graph(gm);
		gen_input(gm, g, "x", F, GEN_SHAPE(2, 5));
		gen_init(gm, g, "two", F, 0, NULL, GEN_VALS(2));
		gen_init(gm, g, "eps", F, 0, NULL, GEN_VALS(1e-5));
		rand_init(gm, g, "gamma", GEN_SHAPE(5));
		rand_init(gm, g, "beta", GEN_SHAPE(5));
		Onnx__NodeProto *r1 = gen_node(gm, g, "ReduceMean", "rm1", "x", "m");
		gen_attr_ints(gm, r1, "axes", 1, (const int64_t[]){-1});
		gen_node(gm, g, "Sub", "sub", "x,m", "d");
		if (v == 0)
			gen_node(gm, g, "Pow", "pow", "d,two", "q");
		else
			gen_node(gm, g, "Mul", "sq", "d,d", "q");
		Onnx__NodeProto *r2 = gen_node(gm, g, "ReduceMean", "rm2", "q", "var");
		gen_attr_ints(gm, r2, "axes", 1, (const int64_t[]){-1});
		gen_node(gm, g, "Add", "ae", "var,eps", "e");
		gen_node(gm, g, "Sqrt", "sqrt", "e", "s");
		gen_node(gm, g, "Div", "div", "d,s", "n");
		gen_node(gm, g, "Mul", "mg", "n,gamma", "n2");
		gen_node(gm, g, "Add", "ab", "n2,beta", "y");
		gen_output(gm, g, "y", F, GEN_SHAPE(2, 5));
		fx f = fuse_only(gm);
		const char *in[] = {"m", "d", "q", "var", "e", "s", "n", "n2"};
		for (int i = 0; i < 8; i++)
			cr_assert_eq(qm(&f, in[i]), OQ_QM_INTERNAL, "%s variant %d", in[i], v);
		cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
		cr_assert_eq(qm(&f, "x"), 0);
		done(&f);
	}
}

Test(fuse, gelu_orders)
{
	for (int v = 0; v < 3; v++) {
		gen_model *gm = new_model(13);
		Onnx__GraphProto *g = gen_graph(gm);
		gen_input(gm, g, "x", F, GEN_SHAPE(2, 5));
		gen_init(gm, g, "sq2", F, 0, NULL, GEN_VALS(1.4142135));
		gen_init(gm, g, "one", F, 0, NULL, GEN_VALS(1));
		gen_init(gm, g, "half", F, 0, NULL, GEN_VALS(0.5));
		gen_node(gm, g, "Div", "div", "x,sq2", "t1");
		gen_node(gm, g, "Erf", "erf", "t1", "t2");
		gen_node(gm, g, "Add", "add", "t2,one", "t3");
		if (v == 0) {
			gen_node(gm, g, "Mul", "m1", "x,t3", "h");
			gen_node(gm, g, "Mul", "m2", "h,half", "y");
		} else if (v == 1) {
			gen_node(gm, g, "Mul", "m1", "x,half", "h");
			gen_node(gm, g, "Mul", "m2", "h,t3", "y");
		} else {
			gen_node(gm, g, "Mul", "m1", "t3,half", "h");
			gen_node(gm, g, "Mul", "m2", "x,h", "y");
		}
		gen_output(gm, g, "y", F, GEN_SHAPE(2, 5));
		fx f = fuse_only(gm);
		const char *in[] = {"t1", "t2", "t3", "h"};
		for (int i = 0; i < 4; i++)
			cr_assert_eq(qm(&f, in[i]), OQ_QM_INTERNAL, "%s order %d", in[i], v);
		cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
		done(&f);
	}
}

Test(fuse, hardswish_and_hardsigmoid)
{
	for (int v = 0; v < 3; v++) {
		gen_model *gm = new_model(v == 2 ? 9 : 13);
		Onnx__GraphProto *g = gen_graph(gm);
		gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
		rand_init(gm, g, "W", GEN_SHAPE(2, 2, 1, 1));
		gen_init(gm, g, "three", F, 0, NULL, GEN_VALS(3));
		gen_init(gm, g, "zero", F, 0, NULL, GEN_VALS(0));
		gen_init(gm, g, "six", F, 0, NULL, GEN_VALS(6));
		gen_init(gm, g, "sixth", F, 0, NULL, GEN_VALS(0.16666667));
		gen_node(gm, g, "Conv", "conv", "x,W", "c");
		gen_node(gm, g, "Add", "a3", "c,three", "a");
		if (v == 2) {
			Onnx__NodeProto *cl = gen_node(gm, g, "Clip", "clip", "a", "k");
			gen_attr_float(gm, cl, "min", 0);
			gen_attr_float(gm, cl, "max", 6);
		} else {
			gen_node(gm, g, "Clip", "clip", "a,zero,six", "k");
		}
		if (v == 0)
			gen_node(gm, g, "Div", "d6", "k,six", "h");
		else
			gen_node(gm, g, "Mul", "d6", "k,sixth", "h");
		if (v != 1)
			gen_node(gm, g, "Mul", "mx", "c,h", "y");
		gen_output(gm, g, v == 1 ? "h" : "y", F, -1, NULL);
		fx f = fuse_only(gm);
		cr_assert_eq(qm(&f, "a"), OQ_QM_INTERNAL, "variant %d", v);
		cr_assert_eq(qm(&f, "k"), OQ_QM_INTERNAL);
		cr_assert_eq(val(f.m, "k")->producer->qmark, 0, "the pattern's Clip is not a fused activation");
		/* the Conv output joins a HardSwish unit it alone feeds; a HardSigmoid reads only part of it */
		cr_assert_eq(qm(&f, "c"), v == 1 ? 0u : (unsigned)OQ_QM_INTERNAL, "variant %d", v);
		if (v == 1) {
			cr_assert_eq(qm(&f, "h"), OQ_QM_UNIT_OUT);
		} else {
			cr_assert_eq(qm(&f, "h"), OQ_QM_INTERNAL);
			cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
		}
		done(&f);
	}
}

/* PaddlePaddle's HardSwish order (x * clip / 6), then its learnable affine Mul/Add by constants. */
Test(fuse, paddle_hardswish_affine_and_shared_input)
{
	for (int shared = 0; shared < 2; shared++) {
		gen_model *gm = new_model(13);
		Onnx__GraphProto *g = gen_graph(gm);
		gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
		rand_init(gm, g, "W", GEN_SHAPE(2, 2, 1, 1));
		gen_init(gm, g, "three", F, 0, NULL, GEN_VALS(3));
		gen_init(gm, g, "zero", F, 0, NULL, GEN_VALS(0));
		gen_init(gm, g, "six", F, 0, NULL, GEN_VALS(6));
		gen_init(gm, g, "s", F, GEN_SHAPE(1), GEN_VALS(0.7));
		gen_init(gm, g, "t", F, GEN_SHAPE(1), GEN_VALS(-0.2));
		gen_node(gm, g, "Conv", "conv", "x,W", "c");
		gen_node(gm, g, "Add", "a3", "c,three", "a");
		gen_node(gm, g, "Clip", "clip", "a,zero,six", "k");
		gen_node(gm, g, "Mul", "mx", "c,k", "m");
		gen_node(gm, g, "Div", "d6", "m,six", "h");
		gen_node(gm, g, "Mul", "scale", "s,h", "u");
		gen_node(gm, g, "Add", "shift", "u,t", "y");
		gen_output(gm, g, "y", F, -1, NULL);
		if (shared) {
			gen_node(gm, g, "Relu", "other", "c", "z");
			gen_output(gm, g, "z", F, -1, NULL);
		}
		fx f = fuse_only(gm);
		cr_assert_eq(qm(&f, "a"), OQ_QM_INTERNAL);
		cr_assert_eq(qm(&f, "k"), OQ_QM_INTERNAL);
		cr_assert_eq(qm(&f, "m"), OQ_QM_INTERNAL);
		/* the affine chain extends the unit: h and u inside, y carries the Q/DQ */
		cr_assert_eq(qm(&f, "h"), OQ_QM_INTERNAL);
		cr_assert_eq(qm(&f, "u"), OQ_QM_INTERNAL);
		cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
		/* c joins only when nothing outside the pattern reads it */
		cr_assert_eq(qm(&f, "c"), shared ? 0u : (unsigned)OQ_QM_INTERNAL, "shared %d", shared);
		done(&f);
	}
}

/* Swish x * Sigmoid(x * c) (PaddleOCR rec neck), SiLU x * Sigmoid(x), Conv -> HardSigmoid. */
Test(fuse, swish_silu_and_activation_ops)
{
	for (int v = 0; v < 3; v++) {
		gen_model *gm = new_model(13);
		Onnx__GraphProto *g = gen_graph(gm);
		gen_input(gm, g, "x", F, GEN_SHAPE(1, 2, 3, 3));
		rand_init(gm, g, "W", GEN_SHAPE(2, 2, 1, 1));
		gen_init(gm, g, "c1", F, 0, NULL, GEN_VALS(1.702));
		gen_node(gm, g, "Conv", "conv", "x,W", "c");
		if (v == 0) {
			gen_node(gm, g, "Mul", "mc", "c,c1", "m");
			gen_node(gm, g, "Sigmoid", "sg", "m", "s");
			gen_node(gm, g, "Mul", "mx", "c,s", "y");
		} else if (v == 1) {
			gen_node(gm, g, "Sigmoid", "sg", "c", "s");
			gen_node(gm, g, "Mul", "mx", "s,c", "y");
		} else {
			gen_node(gm, g, "HardSigmoid", "hs", "c", "y");
		}
		gen_output(gm, g, "y", F, -1, NULL);
		fx f = fuse_only(gm);
		cr_assert_eq(qm(&f, "c"), OQ_QM_INTERNAL, "variant %d", v);
		if (v == 0)
			cr_assert_eq(qm(&f, "m"), OQ_QM_INTERNAL);
		if (v < 2)
			cr_assert_eq(qm(&f, "s"), OQ_QM_INTERNAL);
		cr_assert_eq(qm(&f, "y"), OQ_QM_UNIT_OUT);
		cr_assert_eq(val(f.m, "y")->producer->qmark, 0, "only Relu/Clip are removable");
		done(&f);
	}
}

/* ------------------------------------------------------------ cle */

/* Element i of the initializer input k of the node writing `out`. */
static double wat(const fx *f, const char *out, size_t k, size_t i)
{
	const oq_node *n = val(f->m, out)->producer;
	cr_assert_gt(n->n_inputs, k);
	cr_assert_not_null(n->inputs[k]->init, "%s input %zu is not an initializer", out, k);
	return oq_tensor_get(n->inputs[k]->init, i);
}

/*
 * x[1,1,4,4] -> Conv c1 (W1 [2,1,3,3], b1) -> Relu -> Conv c2 (W2 [2,2,3,3], pads 1) -> y.
 * W1 row 0 holds -4 (r1_0 = 4), row 1 max |.| = 1; W2 input channel 0 max |.| = 1, channel 1
 * holds 9: s = sqrt(r1 / r2) = (sqrt(4/1), sqrt(1/9)) = (2, 1/3), both ranges become
 * sqrt(r1 r2) = (2, 3); W1[i] /= s_i, b1[i] /= s_i, W2[:, i] *= s_i.
 */
static const double cle_w1[18] = {1, -4, 2, 0.5, 3, -1, 2, 0, 1, 0.25, -1, 0.5, 0.5, 1, -0.5, 0, 0.75, 1};
static const double cle_w2[36] = {
	1, -0.5, 0.25, 0.5, 1, 0, -1, 0.5, 0.75, /* out 0, in 0 */
	9, 1, 2, -3, 4, 0, 1, 2, -5,             /* out 0, in 1 */
	0.5, 0.5, -1, 0, 0.25, 1, 0.5, -0.75, 1, /* out 1, in 0 */
	-9, 3, 1, 2, 0, 1, -2, 3, 4,             /* out 1, in 1 */
};

static gen_model *cle_chain(const char *act)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 1, 4, 4));
	gen_init(gm, g, "W1", F, GEN_SHAPE(2, 1, 3, 3), cle_w1);
	gen_init(gm, g, "B1", F, GEN_SHAPE(2), GEN_VALS(0.5, -0.3));
	gen_init(gm, g, "W2", F, GEN_SHAPE(2, 2, 3, 3), cle_w2);
	gen_init(gm, g, "B2", F, GEN_SHAPE(2), GEN_VALS(0.1, 0.2));
	Onnx__NodeProto *c1 = gen_node(gm, g, "Conv", "c1", "x,W1,B1", "t");
	gen_attr_ints(gm, c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	if (!strcmp(act, "Relu6")) {
		gen_init(gm, g, "lo", F, 0, NULL, GEN_VALS(0));
		gen_init(gm, g, "hi", F, 0, NULL, GEN_VALS(6));
		gen_node(gm, g, "Clip", "a", "t,lo,hi", "r");
	} else if (*act) {
		gen_node(gm, g, act, "a", "t", "r");
	}
	Onnx__NodeProto *c2 = gen_node(gm, g, "Conv", "c2", *act ? "r,W2,B2" : "t,W2,B2", "y");
	gen_attr_ints(gm, c2, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_output(gm, g, "y", F, -1, NULL);
	return gm;
}

Test(cle, conv_relu_conv_hand_scales)
{
	const char *acts[] = {"Relu", "", "LeakyRelu"};
	for (int v = 0; v < 3; v++) {
		fx f = rewrite(cle_chain(acts[v]), "cle");
		const double s[2] = {2, 1.0 / 3};
		cr_assert_lt(f.err, TOL, "%s: relative error %g", acts[v], f.err);
		for (size_t e = 0; e < 18; e++)
			cr_assert_float_eq(wat(&f, "t", 1, e), cle_w1[e] / s[e / 9], 1e-6, "W1[%zu]", e);
		cr_assert_float_eq(wat(&f, "t", 2, 0), 0.5 / 2, 1e-7);
		cr_assert_float_eq(wat(&f, "t", 2, 1), -0.3 * 3, 1e-6);
		for (size_t e = 0; e < 36; e++)
			cr_assert_float_eq(wat(&f, "y", 1, e), cle_w2[e] * s[(e / 9) % 2], 1e-6, "W2[%zu]", e);
		/* the second conv's bias is not touched */
		cr_assert_float_eq(wat(&f, "y", 2, 0), 0.1, 1e-7);
		/* ranges now equal: channel 0 max 2 = sqrt(4 * 1), channel 1 max 3 = sqrt(1 * 9) */
		double r1[2] = {0, 0}, r2[2] = {0, 0};
		for (size_t e = 0; e < 18; e++)
			r1[e / 9] = fmax(r1[e / 9], fabs(wat(&f, "t", 1, e)));
		for (size_t e = 0; e < 36; e++)
			r2[(e / 9) % 2] = fmax(r2[(e / 9) % 2], fabs(wat(&f, "y", 1, e)));
		cr_assert_float_eq(r1[0], 2, 1e-6);
		cr_assert_float_eq(r2[0], 2, 1e-6);
		cr_assert_float_eq(r1[1], 3, 1e-6);
		cr_assert_float_eq(r2[1], 3, 1e-6);
		done(&f);
	}
}

Test(cle, relu6_pair_is_skipped)
{
	fx f = rewrite(cle_chain("Relu6"), "cle");
	for (size_t e = 0; e < 18; e++)
		cr_assert_eq(wat(&f, "t", 1, e), cle_w1[e]);
	for (size_t e = 0; e < 36; e++)
		cr_assert_eq(wat(&f, "y", 1, e), cle_w2[e]);
	cr_assert_lt(f.err, 1e-7);
	done(&f);
}

/* pointwise -> depthwise -> Relu -> pointwise, a shared first weight: the chain converges to
 * equal ranges on both boundaries, the other reader keeps the original weight. */
Test(cle, chain_depthwise_and_shared_weight)
{
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 3, 5, 5));
	rand_init(gm, g, "Wa", GEN_SHAPE(4, 3, 1, 1));
	rand_init(gm, g, "Wb", GEN_SHAPE(4, 1, 3, 3));
	rand_init(gm, g, "Bb", GEN_SHAPE(4));
	rand_init(gm, g, "Wc", GEN_SHAPE(6, 4, 1, 1));
	gen_node(gm, g, "Conv", "a", "x,Wa", "ta");
	Onnx__NodeProto *b = gen_node(gm, g, "Conv", "b", "ta,Wb,Bb", "tb");
	gen_attr_int(gm, b, "group", 4);
	gen_attr_ints(gm, b, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(gm, g, "Relu", "r", "tb", "rb");
	gen_node(gm, g, "Conv", "c", "rb,Wc", "y");
	gen_node(gm, g, "Conv", "other", "x,Wa", "z");
	gen_output(gm, g, "y", F, -1, NULL);
	gen_output(gm, g, "z", F, -1, NULL);
	/* spread the ranges so equalization has work to do */
	fx f = rewrite(gm, "cle");
	cr_assert_lt(f.err, TOL, "relative error %g", f.err);
	oq_value *wa = val(f.m, "Wa");
	cr_assert_eq(val(f.m, "z")->producer->inputs[1], wa, "the other reader keeps Wa");
	cr_assert_neq(val(f.m, "ta")->producer->inputs[1], wa, "a's weight is a copy");
	/* boundary a|b: a's row i vs b's channel i; boundary b|c: b's channel i vs c's column i */
	for (size_t i = 0; i < 4; i++) {
		double ra = 0, rb = 0, rc = 0;
		for (size_t k = 0; k < 3; k++)
			ra = fmax(ra, fabs(wat(&f, "ta", 1, i * 3 + k)));
		for (size_t k = 0; k < 9; k++)
			rb = fmax(rb, fabs(wat(&f, "tb", 1, i * 9 + k)));
		for (size_t m = 0; m < 6; m++)
			rc = fmax(rc, fabs(wat(&f, "y", 1, m * 4 + i)));
		/* b is both: its channel range equals a's row range and c's column range */
		cr_assert_float_eq(ra, rb, 1e-5 * rb, "channel %zu: %g vs %g", i, ra, rb);
		cr_assert_float_eq(rb, rc, 1e-5 * rb, "channel %zu: %g vs %g", i, rb, rc);
	}
	done(&f);
}

/* ------------------------------------------------------------ cle: high-bias absorption */

/*
 * x[1,1,H,H] (x in [-1, 1)) -> Conv c1 (1x1) [-> BN] [-> act] -> Conv c2 (k2 x k2, pads pad2) -> y.
 * With the BN: W1 = (2, 0.5), no bias, BN scale (1, 0.5), bias (4, -1), mean 0, var 1,
 * epsilon 0, so fold-bn leaves W1 = (2, 0.25), b1 = (4, -1) and the statistics
 * N(4, 1^2), N(-1, 0.5^2). Without it c1 holds those folded values directly (no statistics).
 * W2 is chosen so that r2 = (0.5, 1) against r1 = (2, 0.25): s = (2, 0.5) in one sweep, then
 * b1 = (2, -2) and the statistics N(2, 0.5^2), N(-2, 1^2).
 *   1x1 W2[m, i]: m0 (0.5, 1), m1 (-0.25, 0.5); after cle m0 (1, 0.5), m1 (-0.5, 0.25).
 *   2x2 W2[m, i, :]: kernel sums m0 (0.25, 0.5), m1 (1, 1); after cle m0 (0.5, 0.25), m1 (2, 0.5).
 */
static gen_model *absorb_chain(int bn, const char *act, int k2, int pad2, int bias2, int64_t H)
{
	static const double w2_1x1[4] = {0.5, 1, -0.25, 0.5};
	static const double w2_2x2[16] = {0.5, 0.25, -0.5, 0, 1, 0.5, -1, 0, 0.25, 0.25, 0.25, 0.25, -0.5, 0.5, 1, 0};
	gen_model *gm = new_model(13);
	Onnx__GraphProto *g = gen_graph(gm);
	gen_input(gm, g, "x", F, GEN_SHAPE(1, 1, H, H));
	if (bn) {
		gen_init(gm, g, "W1", F, GEN_SHAPE(2, 1, 1, 1), GEN_VALS(2, 0.5));
		gen_init(gm, g, "s", F, GEN_SHAPE(2), GEN_VALS(1, 0.5));
		gen_init(gm, g, "b", F, GEN_SHAPE(2), GEN_VALS(4, -1));
		gen_init(gm, g, "m", F, GEN_SHAPE(2), GEN_VALS(0, 0));
		gen_init(gm, g, "v", F, GEN_SHAPE(2), GEN_VALS(1, 1));
		gen_node(gm, g, "Conv", "c1", "x,W1", "c");
		gen_attr_float(gm, gen_node(gm, g, "BatchNormalization", "bn", "c,s,b,m,v", "t"), "epsilon", 0);
	} else {
		gen_init(gm, g, "W1", F, GEN_SHAPE(2, 1, 1, 1), GEN_VALS(2, 0.25));
		gen_init(gm, g, "B1", F, GEN_SHAPE(2), GEN_VALS(4, -1));
		gen_node(gm, g, "Conv", "c1", "x,W1,B1", "t");
	}
	if (*act)
		gen_node(gm, g, act, "a", "t", "r");
	if (k2 == 1)
		gen_init(gm, g, "W2", F, GEN_SHAPE(2, 2, 1, 1), w2_1x1);
	else
		gen_init(gm, g, "W2", F, GEN_SHAPE(2, 2, 2, 2), w2_2x2);
	gen_init(gm, g, "B2", F, GEN_SHAPE(2), GEN_VALS(0.1, 0.2));
	char in2[16];
	snprintf(in2, sizeof in2, "%s,W2%s", *act ? "r" : "t", bias2 ? ",B2" : "");
	Onnx__NodeProto *c2 = gen_node(gm, g, "Conv", "c2", in2, "y");
	gen_attr_ints(gm, c2, "pads", 4, (const int64_t[]){pad2, pad2, pad2, pad2});
	gen_output(gm, g, "y", F, -1, NULL);
	return gm;
}

/*
 * Relu: h = max(0, mean - 3 std) = (max(0, 2 - 1.5), max(0, -2 - 3)) = (0.5, 0) after the scales;
 * b1 = (2 - 0.5, -2) = (1.5, -2), b2 = (0.1 + 1 * 0.5, 0.2 - 0.5 * 0.5) = (0.6, -0.05). The
 * pre-activation of channel 0 is x + 2 >= 1 > h_0 on every input, so the float model is kept.
 */
Test(cle, absorbs_high_bias_through_relu)
{
	fx f = rewrite(absorb_chain(1, "Relu", 1, 0, 1, 3), "fold-bn,cle");
	cr_assert_lt(f.err, TOL, "relative error %g", f.err);
	cr_assert_float_eq(wat(&f, "t", 1, 0), 1, 1e-6);
	cr_assert_float_eq(wat(&f, "t", 1, 1), 0.5, 1e-6);
	cr_assert_float_eq(wat(&f, "t", 2, 0), 1.5, 1e-6, "b1[0] %g", wat(&f, "t", 2, 0));
	cr_assert_float_eq(wat(&f, "t", 2, 1), -2, 1e-6, "b1[1] %g", wat(&f, "t", 2, 1));
	cr_assert_float_eq(wat(&f, "y", 2, 0), 0.6, 1e-6, "b2[0] %g", wat(&f, "y", 2, 0));
	cr_assert_float_eq(wat(&f, "y", 2, 1), -0.05, 1e-6, "b2[1] %g", wat(&f, "y", 2, 1));
	/* the statistics follow: channel 0 now N(2 - 0.5, 0.5^2) */
	const oq_bnstats *st = val(f.m, "t")->bn;
	cr_assert(st && st->n == 2);
	cr_assert_float_eq(st->mean[0], 1.5, 1e-12);
	cr_assert_float_eq(st->std[0], 0.5, 1e-12);
	cr_assert_float_eq(st->mean[1], -2, 1e-12);
	cr_assert_float_eq(st->std[1], 1, 1e-12);
	done(&f);
}

/*
 * No activation, a 2x2 kernel without padding and no bias on c2: h = mean = (2, -2), b1 = (0, 0),
 * b2 = (0.5 * 2 + 0.25 * -2, 2 * 2 + 0.5 * -2) = (0.5, 3) (kernel sums times h, a new bias);
 * exact for every input.
 */
Test(cle, absorbs_the_mean_without_activation)
{
	fx f = rewrite(absorb_chain(1, "", 2, 0, 0, 4), "fold-bn,cle");
	cr_assert_lt(f.err, TOL, "relative error %g", f.err);
	cr_assert_float_eq(wat(&f, "t", 2, 0), 0, 1e-6, "b1[0] %g", wat(&f, "t", 2, 0));
	cr_assert_float_eq(wat(&f, "t", 2, 1), 0, 1e-6, "b1[1] %g", wat(&f, "t", 2, 1));
	cr_assert_eq(val(f.m, "y")->producer->n_inputs, 3, "c2 got a bias");
	cr_assert_float_eq(wat(&f, "y", 2, 0), 0.5, 1e-6, "b2[0] %g", wat(&f, "y", 2, 0));
	cr_assert_float_eq(wat(&f, "y", 2, 1), 3, 1e-6, "b2[1] %g", wat(&f, "y", 2, 1));
	done(&f);
}

/* c2 pads by 1: its border would read 0 where the model read h, so only equalization happens. */
Test(cle, no_absorption_into_a_padded_conv)
{
	const char *acts[] = {"Relu", ""};
	for (int v = 0; v < 2; v++) {
		fx f = rewrite(absorb_chain(1, acts[v], 1, 1, 1, 3), "fold-bn,cle");
		cr_assert_lt(f.err, TOL, "'%s': relative error %g", acts[v], f.err);
		cr_assert_float_eq(wat(&f, "t", 2, 0), 2, 1e-6, "'%s': b1[0] %g", acts[v], wat(&f, "t", 2, 0));
		cr_assert_float_eq(wat(&f, "t", 2, 1), -2, 1e-6, "'%s': b1[1] %g", acts[v], wat(&f, "t", 2, 1));
		cr_assert_float_eq(wat(&f, "y", 2, 0), 0.1, 1e-7, "'%s': b2[0] %g", acts[v], wat(&f, "y", 2, 0));
		cr_assert_float_eq(wat(&f, "y", 2, 1), 0.2, 1e-7, "'%s': b2[1] %g", acts[v], wat(&f, "y", 2, 1));
		done(&f);
	}
}

/* The same folded weights and biases without a BN: no statistics, nothing absorbed. */
Test(cle, no_absorption_without_batchnorm)
{
	const char *acts[] = {"Relu", ""};
	for (int v = 0; v < 2; v++) {
		fx f = rewrite(absorb_chain(0, acts[v], 1, 0, 1, 3), "fold-bn,cle");
		cr_assert_lt(f.err, TOL, "'%s': relative error %g", acts[v], f.err);
		cr_assert_null(val(f.m, "t")->bn);
		cr_assert_float_eq(wat(&f, "t", 2, 0), 2, 1e-6, "'%s': b1[0] %g", acts[v], wat(&f, "t", 2, 0));
		cr_assert_float_eq(wat(&f, "t", 2, 1), -2, 1e-6, "'%s': b1[1] %g", acts[v], wat(&f, "t", 2, 1));
		cr_assert_float_eq(wat(&f, "y", 2, 0), 0.1, 1e-7, "'%s': b2[0] %g", acts[v], wat(&f, "y", 2, 0));
		cr_assert_float_eq(wat(&f, "y", 2, 1), 0.2, 1e-7, "'%s': b2[1] %g", acts[v], wat(&f, "y", 2, 1));
		done(&f);
	}
}

/* --weight-only: activations stay float, so the inexact Relu rule is not applied (b1 = (2, -2)
 * from equalization alone, b2 untouched); the exact linear case still is (b1 = 0). */
Test(cle, weight_only_absorbs_only_exact_pairs)
{
	const char *acts[] = {"Relu", ""};
	const double b1[2] = {2, 0};
	for (int v = 0; v < 2; v++) {
		gen_model *gm = absorb_chain(1, acts[v], 1, 0, 1, 3);
		oq_model *m = NULL;
		oq_pass_run r = {.list = "fold-bn,cle", .verify = 1};
		oq_opts o;
		oq_diag d;
		oq_diag_init(&d);
		oq_opts_init(&o);
		o.weight_only = 1;
		cr_assert_eq(gen_load(gm, &m, &d), OQ_OK, "load: %s", d.msg);
		cr_assert_eq(oq_passes_run(m, &r, &o, &d), OQ_OK, "passes: %s", d.msg);
		fx f = {gm, m, 0};
		cr_assert_float_eq(wat(&f, "t", 2, 0), b1[v], 1e-6, "'%s': b1[0] %g", acts[v], wat(&f, "t", 2, 0));
		if (v == 0)
			cr_assert_float_eq(wat(&f, "y", 2, 0), 0.1, 1e-7, "b2[0] %g", wat(&f, "y", 2, 0));
		done(&f);
	}
}
