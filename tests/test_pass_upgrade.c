/*
 * test_pass_upgrade.c - the upgrade-opset pass (passes/rewrite/upgrade_opset.c).
 *
 * Each test builds a small model at an old opset in C (gen_model), loads it
 * twice, upgrades one copy through the pass driver (verifier on) and checks
 * - structure: the new opset and ir_version, attributes gone, the new
 *   inputs holding the old attribute values, inserted/replaced nodes;
 * - numerics: the executor runs the original (old-opset semantics) and the
 *   upgraded model on the same input and the outputs must agree, and they
 *   must equal values computed by hand in the comments (or, for Softmax, by
 *   a plain loop written here independently of the kernel).
 * Also: refusal of an unconvertible node (message, model untouched), no-op
 * when the model is already at the target, no downgrade, target choice.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "src/io/onnx_io.h"
#include "passes/pass.h"

/* ------------------------------------------------------------------ harness */

typedef struct ut {
	gen_model *g;        /* model under construction */
	Onnx__GraphProto *gp;/* its main graph */
	void *buf[2];        /* private copies of the serialized model (the loaded models borrow them) */
	oq_model *m[2];      /* [0] original, [1] upgraded */
	oq_diag d;           /* last message */
} ut;

static void ut_begin(ut *t, int64_t ir, int opset)
{
	memset(t, 0, sizeof *t);
	t->g = gen_new(ir);
	gen_opset(t->g, "", opset);
	t->gp = gen_graph(t->g);
	oq_diag_init(&t->d);
}

/* Loads the built model twice (original and copy to upgrade). */
static void ut_load(ut *t)
{
	const void *p;
	size_t len;
	cr_assert_eq(gen_pack(t->g, &p, &len), 0);
	for (int i = 0; i < 2; i++) {
		t->buf[i] = malloc(len);
		cr_assert(t->buf[i]);
		memcpy(t->buf[i], p, len);
		cr_assert_eq(oq_model_load_buffer(t->buf[i], len, NULL, &t->m[i], &t->d), OQ_OK, "load: %s",
			     t->d.msg);
	}
}

/* Runs upgrade-opset on the copy with options o (NULL: defaults). */
static int ut_upgrade(ut *t, const oq_opts *o)
{
	oq_opts def;
	oq_pass_run r = {0};
	if (!o) {
		oq_opts_init(&def);
		o = &def;
	}
	r.list = "upgrade-opset";
	r.verify = 1;
	oq_diag_init(&t->d);
	return oq_passes_run(t->m[1], &r, o, &t->d);
}

static void ut_upgrade_ok(ut *t, int64_t opset)
{
	oq_opts o;
	oq_opts_init(&o);
	o.opset = opset;
	int rc = ut_upgrade(t, &o);
	cr_assert_eq(rc, OQ_OK, "upgrade: %s", t->d.msg);
	cr_assert_eq(oq_model_opset(t->m[1], ""), opset);
}

static void ut_end(ut *t)
{
	for (int i = 0; i < 2; i++) {
		oq_model_free(t->m[i]);
		free(t->buf[i]);
	}
	gen_free(t->g);
}

/* A float32 input tensor. */
static oq_rt fin(int rank, const int64_t *dims, const float *v)
{
	oq_rt r;
	cr_assert_eq(oq_rt_alloc(&r, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(r.data, v, r.nbytes);
	return r;
}

static void run(oq_model *m, const oq_rt *in, size_t nin, oq_rt *out, size_t nout)
{
	oq_exec *e = NULL;
	oq_exec_opts eo = {.threads = 1};
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_OK, "exec: %s", d.msg);
	cr_assert_eq(oq_exec_run(e, in, nin, out, nout, &d), OQ_OK, "run: %s", d.msg);
	oq_exec_free(e);
}

/*
 * Runs original and upgraded on the same inputs; every output must agree
 * (1e-6) and output k must equal want[k] (hand values, 1e-5) when given.
 */
static void same(ut *t, const oq_rt *in, size_t nin, size_t nout, const double *const *want,
		 const size_t *want_n)
{
	oq_rt a[4], b[4];
	char s1[128], s2[128];
	cr_assert(nout <= 4);
	run(t->m[0], in, nin, a, nout);
	run(t->m[1], in, nin, b, nout);
	for (size_t k = 0; k < nout; k++) {
		cr_assert_eq(a[k].dtype, b[k].dtype);
		cr_assert_eq(a[k].nelem, b[k].nelem, "output %zu: before %s, after %s", k,
			     oq_rt_describe(&a[k], s1, sizeof s1), oq_rt_describe(&b[k], s2, sizeof s2));
		cr_assert_eq(a[k].rank, b[k].rank);
		for (int i = 0; i < a[k].rank; i++)
			cr_assert_eq(a[k].dims[i], b[k].dims[i]);
		for (size_t i = 0; i < a[k].nelem; i++)
			cr_assert(fabs(oq_rt_get(&a[k], i) - oq_rt_get(&b[k], i)) <= 1e-6,
				  "output %zu[%zu]: before %.9g after %.9g", k, i, oq_rt_get(&a[k], i),
				  oq_rt_get(&b[k], i));
		if (want && want[k]) {
			cr_assert_eq(b[k].nelem, want_n[k]);
			for (size_t i = 0; i < want_n[k]; i++)
				cr_assert(fabs(oq_rt_get(&b[k], i) - want[k][i]) <= 1e-5,
					  "output %zu[%zu]: got %.9g, want %.9g", k, i, oq_rt_get(&b[k], i),
					  want[k][i]);
		}
		oq_rt_release(&a[k]);
		oq_rt_release(&b[k]);
	}
}

static void same1(ut *t, const oq_rt *x, const double *want, size_t n)
{
	const double *w[1] = {want};
	size_t wn[1] = {n};
	same(t, x, 1, 1, want ? w : NULL, wn);
}

/* The k-th node (0-based) of op type `op` in g, or NULL. */
static oq_node *find_op(oq_graph *g, const char *op, int k)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (strcmp(g->nodes[i]->op_type, op) == 0 && k-- == 0)
			return g->nodes[i];
	return NULL;
}

static size_t count_nodes(oq_graph *g)
{
	return g->n_nodes;
}

static void expect_init(const oq_value *v, int dtype, const double *want, size_t n)
{
	cr_assert(v, "input missing");
	cr_assert(v->init, "'%s' is not an initializer", v->name);
	cr_assert_eq(v->init->dtype, dtype, "'%s': dtype %d", v->name, v->init->dtype);
	cr_assert_eq(v->init->nelem, n, "'%s': %zu elements", v->name, v->init->nelem);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(oq_tensor_get(v->init, i), want[i], "'%s'[%zu] = %g, want %g", v->name, i,
			     oq_tensor_get(v->init, i), want[i]);
}

static void gen_floats(gen_model *g, Onnx__NodeProto *n, const char *name, float *v, size_t count)
{
	Onnx__AttributeProto *a = gen_attr(g, n, name, OQ_ATTR_FLOATS);
	a->n_floats = count;
	a->floats = v;
}

#define I64(...) GEN_SHAPE(__VA_ARGS__)
#define W(...) (const double[]){__VA_ARGS__}, sizeof((const double[]){__VA_ARGS__}) / sizeof(double)

/* ------------------------------------------------------------------ Clip, Pad */

Test(upgrade, clip_attributes_become_inputs)
{
	ut t;
	ut_begin(&t, 4, 9);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	Onnx__NodeProto *n = gen_node(t.g, t.gp, "Clip", "c", "x", "y");
	gen_attr_float(t.g, n, "min", -1.0f);
	gen_attr_float(t.g, n, "max", 2.0f);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	cr_assert_eq(t.m[1]->ir_version, 7);
	oq_node *c = find_op(t.m[1]->graph, "Clip", 0);
	cr_assert(c);
	cr_assert_eq(c->n_attrs, 0);
	cr_assert_eq(c->n_inputs, 3);
	expect_init(c->inputs[1], OQ_DT_FLOAT, W(-1));
	expect_init(c->inputs[2], OQ_DT_FLOAT, W(2));
	cr_assert_eq(c->inputs[1]->init->rank, 0);
	oq_rt x = fin(GEN_SHAPE(2, 3), (const float[]){-3, -1.5f, 0, 1, 2.5f, 4});
	same1(&t, &x, W(-1, -1, 0, 1, 2, 2));
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, clip_only_max)
{
	ut t;
	ut_begin(&t, 4, 6);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(4));
	Onnx__NodeProto *n = gen_node(t.g, t.gp, "Clip", "c", "x", "y");
	gen_attr_float(t.g, n, "max", 6.0f);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(4));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *c = find_op(t.m[1]->graph, "Clip", 0);
	cr_assert_eq(c->n_inputs, 3);
	cr_assert_null(c->inputs[1]); /* min omitted: no lower bound */
	expect_init(c->inputs[2], OQ_DT_FLOAT, W(6));
	oq_rt x = fin(GEN_SHAPE(4), (const float[]){-7, 3, 6.5f, 100});
	same1(&t, &x, W(-7, 3, 6, 6));
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, pad_attributes_become_inputs)
{
	ut t;
	ut_begin(&t, 4, 9);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	Onnx__NodeProto *n = gen_node(t.g, t.gp, "Pad", "p", "x", "y");
	gen_attr_ints(t.g, n, "pads", 4, (const int64_t[]){0, 1, 0, 2});
	gen_attr_float(t.g, n, "value", 5.0f);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 5));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *p = find_op(t.m[1]->graph, "Pad", 0);
	cr_assert_eq(p->n_inputs, 3);
	expect_init(p->inputs[1], OQ_DT_INT64, W(0, 1, 0, 2));
	expect_init(p->inputs[2], OQ_DT_FLOAT, W(5));
	cr_assert_null(oq_node_attr(p, "pads"));
	cr_assert_null(oq_node_attr(p, "value"));
	/* pads = [begin0, begin1, end0, end1]: one 5 before, two after each row */
	oq_rt x = fin(GEN_SHAPE(2, 2), (const float[]){1, 2, 3, 4});
	same1(&t, &x, W(5, 1, 2, 5, 5, 5, 3, 4, 5, 5));
	oq_rt_release(&x);
	ut_end(&t);
}

/* ------------------------------------------------------------------ axes attributes */

Test(upgrade, squeeze_unsqueeze_axes)
{
	ut t;
	ut_begin(&t, 6, 11);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	Onnx__NodeProto *u = gen_node(t.g, t.gp, "Unsqueeze", "u", "x", "u_out");
	gen_attr_ints(t.g, u, "axes", 2, (const int64_t[]){0, 3});
	Onnx__NodeProto *s = gen_node(t.g, t.gp, "Squeeze", "s", "u_out", "y");
	gen_attr_ints(t.g, s, "axes", 1, (const int64_t[]){0});
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3, 1));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *un = find_op(t.m[1]->graph, "Unsqueeze", 0), *sq = find_op(t.m[1]->graph, "Squeeze", 0);
	cr_assert_eq(un->n_inputs, 2);
	expect_init(un->inputs[1], OQ_DT_INT64, W(0, 3));
	cr_assert_eq(sq->n_inputs, 2);
	expect_init(sq->inputs[1], OQ_DT_INT64, W(0));
	cr_assert_eq(un->n_attrs + sq->n_attrs, 0);
	oq_rt x = fin(GEN_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
	oq_rt out;
	run(t.m[1], &x, 1, &out, 1);
	cr_assert_eq(out.rank, 3);
	cr_assert(out.dims[0] == 2 && out.dims[1] == 3 && out.dims[2] == 1);
	oq_rt_release(&out);
	same1(&t, &x, W(1, 2, 3, 4, 5, 6));
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, reduce_axes_sum_at_13_mean_at_18)
{
	for (int target = 13; target <= 18; target += 5) {
		ut t;
		ut_begin(&t, 6, 11);
		gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
		Onnx__NodeProto *a = gen_node(t.g, t.gp, "ReduceSum", "rs", "x", "y0");
		gen_attr_ints(t.g, a, "axes", 1, (const int64_t[]){1});
		Onnx__NodeProto *b = gen_node(t.g, t.gp, "ReduceMean", "rm", "x", "y1");
		gen_attr_ints(t.g, b, "axes", 1, (const int64_t[]){0});
		gen_attr_int(t.g, b, "keepdims", 0);
		gen_output(t.g, t.gp, "y0", OQ_DT_FLOAT, GEN_SHAPE(2, 1));
		gen_output(t.g, t.gp, "y1", OQ_DT_FLOAT, GEN_SHAPE(3));
		ut_load(&t);
		ut_upgrade_ok(&t, target);
		oq_node *rs = find_op(t.m[1]->graph, "ReduceSum", 0), *rm = find_op(t.m[1]->graph, "ReduceMean", 0);
		expect_init(rs->inputs[1], OQ_DT_INT64, W(1));
		if (target == 13) {
			cr_assert_eq(rm->n_inputs, 1); /* ReduceMean keeps the attribute until 18 */
			cr_assert(oq_node_attr(rm, "axes"));
		} else {
			expect_init(rm->inputs[1], OQ_DT_INT64, W(0));
			cr_assert_null(oq_node_attr(rm, "axes"));
		}
		oq_rt x = fin(GEN_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
		const double *w[2] = {(const double[]){6, 15}, (const double[]){2.5, 3.5, 4.5}};
		size_t wn[2] = {2, 3};
		same(&t, &x, 1, 2, w, wn);
		oq_rt_release(&x);
		ut_end(&t);
	}
}

Test(upgrade, split_attribute_and_num_outputs)
{
	ut t;
	ut_begin(&t, 6, 11);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	Onnx__NodeProto *s = gen_node(t.g, t.gp, "Split", "s", "x", "a,b");
	gen_attr_int(t.g, s, "axis", 1);
	gen_attr_ints(t.g, s, "split", 2, (const int64_t[]){1, 2});
	gen_input(t.g, t.gp, "z", OQ_DT_FLOAT, GEN_SHAPE(4));
	gen_node(t.g, t.gp, "Split", "s2", "z", "c,d"); /* equal halves, no split attribute */
	gen_output(t.g, t.gp, "a", OQ_DT_FLOAT, GEN_SHAPE(2, 1));
	gen_output(t.g, t.gp, "b", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(t.g, t.gp, "c", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_output(t.g, t.gp, "d", OQ_DT_FLOAT, GEN_SHAPE(2));
	ut_load(&t);
	ut_upgrade_ok(&t, 18);
	cr_assert_eq(t.m[1]->ir_version, 8);
	oq_node *s1 = find_op(t.m[1]->graph, "Split", 0), *s2 = find_op(t.m[1]->graph, "Split", 1);
	if (strcmp(s1->name, "s") != 0) {
		oq_node *tmp = s1;
		s1 = s2;
		s2 = tmp;
	}
	expect_init(s1->inputs[1], OQ_DT_INT64, W(1, 2));
	cr_assert_null(oq_node_attr(s1, "split"));
	cr_assert_null(oq_node_attr(s1, "num_outputs"));
	cr_assert_eq(oq_node_attr_int(s2, "num_outputs", -1), 2);
	oq_rt in[2] = {fin(GEN_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6}),
		       fin(GEN_SHAPE(4), (const float[]){7, 8, 9, 10})};
	const double *w[4] = {(const double[]){1, 4}, (const double[]){2, 3, 5, 6}, (const double[]){7, 8},
			      (const double[]){9, 10}};
	size_t wn[4] = {2, 4, 2, 2};
	same(&t, in, 2, 4, w, wn);
	oq_rt_release(&in[0]);
	oq_rt_release(&in[1]);
	ut_end(&t);
}

/* ------------------------------------------------------------------ Softmax family */

/* Softmax over the trailing `inner` elements of each of `outer` rows (the opset < 13 meaning). */
static void ref_softmax2d(const float *x, size_t outer, size_t inner, int log_form, double *y)
{
	for (size_t o = 0; o < outer; o++) {
		double mx = -INFINITY, s = 0;
		for (size_t i = 0; i < inner; i++)
			mx = fmax(mx, x[o * inner + i]);
		for (size_t i = 0; i < inner; i++)
			s += exp(x[o * inner + i] - mx);
		for (size_t i = 0; i < inner; i++)
			y[o * inner + i] = log_form ? x[o * inner + i] - mx - log(s) : exp(x[o * inner + i] - mx) / s;
	}
}

static void softmax_case(const char *op, int rank, const int64_t *dims, int64_t axis, int declared, int rewrite)
{
	ut t;
	float xv[48];
	double want[48];
	size_t n = 1, outer = 1;
	for (int i = 0; i < rank; i++) {
		n *= (size_t)dims[i];
		if (i < axis)
			outer *= (size_t)dims[i];
	}
	for (size_t i = 0; i < n; i++)
		xv[i] = (float)((int)(i * 7 % 11) - 5) * 0.37f;
	ut_begin(&t, 6, 11);
	if (declared)
		gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, rank, dims);
	else
		gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, -1, NULL);
	Onnx__NodeProto *s = gen_node(t.g, t.gp, op, "sm", "x", "y");
	gen_attr_int(t.g, s, "axis", axis);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, -1, NULL);
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_graph *g = t.m[1]->graph;
	oq_node *sm = find_op(g, op, 0);
	cr_assert_eq(oq_node_attr_int(sm, "axis", 99), -1);
	if (rewrite) {
		oq_node *fl = find_op(g, "Flatten", 0), *rs = find_op(g, "Reshape", 0), *sh = find_op(g, "Shape", 0);
		cr_assert(fl && rs && sh, "Flatten/Shape/Reshape expected");
		cr_assert_eq(oq_node_attr_int(fl, "axis", 99), axis);
		cr_assert_eq(sm->inputs[0], fl->outputs[0]);
		cr_assert_eq(rs->inputs[0], sm->outputs[0]);
		cr_assert_eq(rs->inputs[1], sh->outputs[0]);
		cr_assert_str_eq(rs->outputs[0]->name, "y"); /* graph output keeps its name */
		cr_assert_eq(count_nodes(g), 4);
	} else {
		cr_assert_eq(count_nodes(g), 1);
	}
	ref_softmax2d(xv, outer, n / outer, strcmp(op, "LogSoftmax") == 0, want);
	oq_rt x = fin(rank, dims, xv);
	same1(&t, &x, want, n);
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, softmax_axis1_rank3_rewritten)
{
	softmax_case("Softmax", 3, (const int64_t[]){2, 2, 3}, 1, 1, 1);
}

Test(upgrade, logsoftmax_axis1_rank4_rewritten)
{
	softmax_case("LogSoftmax", 4, (const int64_t[]){2, 3, 2, 2}, 1, 1, 1);
}

Test(upgrade, softmax_unknown_rank_rewritten)
{
	softmax_case("Softmax", 3, (const int64_t[]){2, 3, 4}, 2, 0, 1);
}

Test(upgrade, softmax_last_axis_kept)
{
	softmax_case("Softmax", 3, (const int64_t[]){2, 2, 3}, 2, 1, 0);
	softmax_case("Softmax", 2, (const int64_t[]){4, 5}, 1, 1, 0);
}

/* ------------------------------------------------------------------ Upsample, Resize */

Test(upgrade, upsample9_nearest_to_resize)
{
	ut t;
	ut_begin(&t, 4, 9);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 2, 2));
	gen_init(t.g, t.gp, "sc", OQ_DT_FLOAT, GEN_SHAPE(4), GEN_VALS(1, 1, 2, 1.5));
	Onnx__NodeProto *u = gen_node(t.g, t.gp, "Upsample", "up", "x,sc", "y");
	gen_attr_str(t.g, u, "mode", "nearest");
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, -1, NULL);
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_graph *g = t.m[1]->graph;
	cr_assert_null(find_op(g, "Upsample", 0));
	oq_node *r = find_op(g, "Resize", 0);
	cr_assert(r);
	cr_assert_str_eq(r->name, "up");
	cr_assert_eq(r->n_inputs, 3);
	cr_assert_null(r->inputs[1]); /* roi omitted */
	cr_assert_str_eq(r->inputs[2]->name, "sc");
	cr_assert_str_eq(oq_node_attr(r, "mode")->s.p, "nearest");
	cr_assert_str_eq(oq_node_attr(r, "coordinate_transformation_mode")->s.p, "asymmetric");
	cr_assert_str_eq(oq_node_attr(r, "nearest_mode")->s.p, "floor");
	/* out [1,1,4,3]: row i reads floor(i/2), column j reads floor(j/1.5) = 0,0,1 */
	oq_rt x = fin(GEN_SHAPE(1, 1, 2, 2), (const float[]){1, 2, 3, 4});
	same1(&t, &x, W(1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4));
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, upsample7_linear_attribute_scales)
{
	static float scales[4] = {1, 1, 2, 2};
	ut t;
	ut_begin(&t, 3, 7);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 2, 2));
	Onnx__NodeProto *u = gen_node(t.g, t.gp, "Upsample", "up", "x", "y");
	gen_attr_str(t.g, u, "mode", "linear");
	gen_floats(t.g, u, "scales", scales, 4);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, -1, NULL);
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *r = find_op(t.m[1]->graph, "Resize", 0);
	cr_assert(r);
	expect_init(r->inputs[2], OQ_DT_FLOAT, W(1, 1, 2, 2));
	cr_assert_null(oq_node_attr(r, "scales"));
	cr_assert_null(oq_node_attr(r, "nearest_mode"));
	/* asymmetric: source = out/2, clamped at the last row/column:
	 * rows 0, .5, 1, 1(clamped 1.5) of [[1,2],[3,4]], columns likewise */
	oq_rt x = fin(GEN_SHAPE(1, 1, 2, 2), (const float[]){1, 2, 3, 4});
	same1(&t, &x, W(1, 1.5, 2, 2, 2, 2.5, 3, 3, 3, 3.5, 4, 4, 3, 3.5, 4, 4));
	oq_rt_release(&x);
	ut_end(&t);
}

/* ------------------------------------------------------------------ BN, Dropout, legacy */

Test(upgrade, batchnorm_and_dropout_attributes_dropped)
{
	ut t;
	ut_begin(&t, 3, 7);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(1, 2));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0, 1));
	gen_init(t.g, t.gp, "mu", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(1, 0));
	gen_init(t.g, t.gp, "var", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(4, 1));
	Onnx__NodeProto *bn = gen_node(t.g, t.gp, "BatchNormalization", "bn", "x,s,b,mu,var", "h");
	gen_attr_int(t.g, bn, "spatial", 1);
	gen_attr_float(t.g, bn, "epsilon", 0.0f);
	Onnx__NodeProto *dr = gen_node(t.g, t.gp, "Dropout", "dr", "h", "y");
	gen_attr_float(t.g, dr, "ratio", 0.25f);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 2));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *b = find_op(t.m[1]->graph, "BatchNormalization", 0), *d = find_op(t.m[1]->graph, "Dropout", 0);
	cr_assert_null(oq_node_attr(b, "spatial"));
	cr_assert(oq_node_attr(b, "epsilon"));
	cr_assert_null(oq_node_attr(d, "ratio"));
	expect_init(d->inputs[1], OQ_DT_FLOAT, W(0.25));
	/* channel 0: (x-1)/2*1+0; channel 1: (x-0)/1*2+1 */
	oq_rt x = fin(GEN_SHAPE(1, 2, 1, 2), (const float[]){3, 5, 1, -1});
	same1(&t, &x, W(1, 2, 3, -1));
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, legacy_broadcast_axis)
{
	ut t;
	ut_begin(&t, 3, 6);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3, 2));
	gen_init(t.g, t.gp, "bias", OQ_DT_FLOAT, GEN_SHAPE(3), GEN_VALS(10, 20, 30));
	Onnx__NodeProto *a = gen_node(t.g, t.gp, "Add", "add", "x,bias", "y");
	gen_attr_int(t.g, a, "broadcast", 1);
	gen_attr_int(t.g, a, "axis", 1);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3, 2));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *n = find_op(t.m[1]->graph, "Add", 0);
	cr_assert_eq(n->n_attrs, 0);
	cr_assert_eq(n->inputs[1]->init->rank, 2); /* [3] -> [3, 1] */
	cr_assert_eq(n->inputs[1]->init->dims[0], 3);
	cr_assert_eq(n->inputs[1]->init->dims[1], 1);
	oq_rt x = fin(GEN_SHAPE(2, 3, 2), (const float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
	same1(&t, &x, W(10, 11, 22, 23, 34, 35, 16, 17, 28, 29, 40, 41));
	oq_rt_release(&x);
	ut_end(&t);
}

Test(upgrade, slice_and_topk_attributes)
{
	ut t;
	ut_begin(&t, 4, 9);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 4));
	Onnx__NodeProto *s = gen_node(t.g, t.gp, "Slice", "sl", "x", "y");
	gen_attr_ints(t.g, s, "starts", 1, (const int64_t[]){1});
	gen_attr_ints(t.g, s, "ends", 1, (const int64_t[]){3});
	gen_attr_ints(t.g, s, "axes", 1, (const int64_t[]){1});
	Onnx__NodeProto *k = gen_node(t.g, t.gp, "TopK", "tk", "x", "v,i");
	gen_attr_int(t.g, k, "k", 2);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(t.g, t.gp, "v", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(t.g, t.gp, "i", OQ_DT_INT64, GEN_SHAPE(2, 2));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *sl = find_op(t.m[1]->graph, "Slice", 0), *tk = find_op(t.m[1]->graph, "TopK", 0);
	expect_init(sl->inputs[1], OQ_DT_INT64, W(1));
	expect_init(sl->inputs[2], OQ_DT_INT64, W(3));
	expect_init(sl->inputs[3], OQ_DT_INT64, W(1));
	expect_init(tk->inputs[1], OQ_DT_INT64, W(2));
	cr_assert_eq(sl->n_attrs + tk->n_attrs, 0);
	oq_rt x = fin(GEN_SHAPE(2, 4), (const float[]){5, 1, 7, 3, 2, 8, 6, 4});
	const double *w[3] = {(const double[]){1, 7, 8, 6}, (const double[]){7, 5, 8, 6},
			      (const double[]){2, 0, 1, 2}};
	size_t wn[3] = {4, 4, 4};
	same(&t, &x, 1, 3, w, wn);
	oq_rt_release(&x);
	ut_end(&t);
}

/* ------------------------------------------------------------------ subgraphs */

Test(upgrade, if_branches_converted)
{
	ut t;
	ut_begin(&t, 6, 11);
	gen_input(t.g, t.gp, "c", OQ_DT_BOOL, GEN_SHAPE(1));
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(3));
	Onnx__NodeProto *n = gen_node(t.g, t.gp, "If", "if", "c", "y");
	Onnx__GraphProto *th = gen_attr_graph(t.g, n, "then_branch", "then");
	Onnx__NodeProto *u = gen_node(t.g, th, "Unsqueeze", "u", "x", "t_out");
	gen_attr_ints(t.g, u, "axes", 1, (const int64_t[]){0});
	gen_output(t.g, th, "t_out", OQ_DT_FLOAT, -1, NULL);
	Onnx__GraphProto *el = gen_attr_graph(t.g, n, "else_branch", "else");
	Onnx__NodeProto *u2 = gen_node(t.g, el, "Unsqueeze", "u2", "x", "e_out");
	gen_attr_ints(t.g, u2, "axes", 1, (const int64_t[]){1});
	gen_output(t.g, el, "e_out", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, -1, NULL);
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *ifn = find_op(t.m[1]->graph, "If", 0);
	oq_graph *tg = oq_node_attr(ifn, "then_branch")->g, *eg = oq_node_attr(ifn, "else_branch")->g;
	oq_node *a = find_op(tg, "Unsqueeze", 0), *b = find_op(eg, "Unsqueeze", 0);
	cr_assert_eq(a->opset, 13);
	expect_init(a->inputs[1], OQ_DT_INT64, W(0));
	expect_init(b->inputs[1], OQ_DT_INT64, W(1));
	oq_rt in[2];
	int64_t one = 1;
	cr_assert_eq(oq_rt_alloc(&in[0], OQ_DT_BOOL, 1, &one), OQ_OK);
	in[1] = fin(GEN_SHAPE(3), (const float[]){1, 2, 3});
	for (int cv = 0; cv < 2; cv++) {
		oq_rt a0, a1;
		((unsigned char *)in[0].data)[0] = (unsigned char)cv;
		run(t.m[0], in, 2, &a0, 1);
		run(t.m[1], in, 2, &a1, 1);
		/* then: [1,3]; else: [3,1] */
		cr_assert_eq(a1.rank, 2);
		cr_assert_eq(a1.dims[0], cv ? 1 : 3);
		cr_assert_eq(a0.dims[0], a1.dims[0]);
		cr_assert_eq(a0.dims[1], a1.dims[1]);
		oq_rt_release(&a0);
		oq_rt_release(&a1);
	}
	oq_rt_release(&in[0]);
	oq_rt_release(&in[1]);
	ut_end(&t);
}

/* ------------------------------------------------------------------ targets and refusals */

Test(upgrade, refusal_leaves_model_untouched)
{
	ut t;
	ut_begin(&t, 3, 7);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 2));
	gen_init(t.g, t.gp, "s", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(1, 1, 1, 1));
	gen_init(t.g, t.gp, "b", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(0, 0, 0, 0));
	gen_init(t.g, t.gp, "m", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(0, 0, 0, 0));
	gen_init(t.g, t.gp, "v", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(1, 1, 1, 1));
	Onnx__NodeProto *c = gen_node(t.g, t.gp, "Clip", "clip", "x", "h");
	gen_attr_float(t.g, c, "max", 1.0f);
	Onnx__NodeProto *bn = gen_node(t.g, t.gp, "BatchNormalization", "bn0", "h,s,b,m,v", "y");
	gen_attr_int(t.g, bn, "spatial", 0);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 2));
	ut_load(&t);
	oq_opts o;
	oq_opts_init(&o);
	int rc = ut_upgrade(&t, &o);
	cr_assert_eq(rc, OQ_EUNSUP);
	cr_assert(strstr(t.d.msg, "upgrade-opset: node 'bn0' (BatchNormalization, opset 7): cannot convert to "
				  "opset 13: spatial=0"),
		  "message: %s", t.d.msg);
	cr_assert(strstr(t.d.msg, "try --opset 7 or re-export"), "message: %s", t.d.msg);
	cr_assert_eq(oq_model_opset(t.m[1], ""), 7);
	cr_assert_eq(t.m[1]->ir_version, 3);
	cr_assert(oq_node_attr(find_op(t.m[1]->graph, "Clip", 0), "max")); /* the Clip before it is untouched */
	ut_end(&t);
}

Test(upgrade, noop_at_target_and_no_downgrade)
{
	ut t;
	ut_begin(&t, 8, 15);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_node(t.g, t.gp, "Relu", "r", "x", "y");
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	ut_load(&t);
	oq_opts o;
	oq_opts_init(&o);
	int changed = -1;
	cr_assert_eq(oq_pass_upgrade_opset(t.m[1]->graph, &o, &t.d, &changed), OQ_OK);
	cr_assert_eq(changed, 0);
	cr_assert_eq(oq_model_opset(t.m[1], ""), 15); /* above the default target 13: kept */
	o.opset = 15;
	cr_assert_eq(oq_pass_upgrade_opset(t.m[1]->graph, &o, &t.d, &changed), OQ_OK);
	cr_assert_eq(changed, 0);
	o.opset = 13;
	cr_assert_eq(oq_pass_upgrade_opset(t.m[1]->graph, &o, &t.d, &changed), OQ_EUSAGE);
	cr_assert(strstr(t.d.msg, "cannot downgrade"), "message: %s", t.d.msg);
	cr_assert_eq(oq_model_opset(t.m[1], ""), 15);
	ut_end(&t);
}

Test(upgrade, target_from_quantization_options)
{
	int wt[3] = {OQ_DT_INT8, OQ_DT_INT4, OQ_DT_INT8};
	int gran[3] = {OQ_GRAN_CHANNEL, OQ_GRAN_CHANNEL, OQ_GRAN_BLOCK};
	int64_t want[3] = {13, 21, 21}, want_ir[3] = {7, 10, 10};
	for (int i = 0; i < 3; i++) {
		ut t;
		ut_begin(&t, 4, 9);
		gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_node(t.g, t.gp, "Relu", "r", "x", "y");
		gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		ut_load(&t);
		oq_opts o;
		oq_opts_init(&o);
		o.weight_type = wt[i];
		o.granularity = gran[i];
		cr_assert_eq(ut_upgrade(&t, &o), OQ_OK, "%s", t.d.msg);
		cr_assert_eq(oq_model_opset(t.m[1], ""), want[i]);
		cr_assert_eq(t.m[1]->ir_version, want_ir[i]);
		cr_assert_eq(find_op(t.m[1]->graph, "Relu", 0)->opset, want[i]);
		ut_end(&t);
	}
}

Test(upgrade, other_domains_untouched)
{
	ut t;
	ut_begin(&t, 4, 9);
	gen_opset(t.g, "ai.onnx.ml", 2);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_node(t.g, t.gp, "Relu", "r", "x", "y");
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	cr_assert_eq(oq_model_opset(t.m[1], "ai.onnx.ml"), 2);
	ut_end(&t);
}

Test(upgrade, scatter_becomes_scatter_elements)
{
	ut t;
	ut_begin(&t, 4, 9);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_init(t.g, t.gp, "idx", OQ_DT_INT64, GEN_SHAPE(1, 2), GEN_VALS(2, 0));
	gen_init(t.g, t.gp, "upd", OQ_DT_FLOAT, GEN_SHAPE(1, 2), GEN_VALS(-1, -2));
	Onnx__NodeProto *s = gen_node(t.g, t.gp, "Scatter", "sc", "x,idx,upd", "y");
	gen_attr_int(t.g, s, "axis", 1);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	cr_assert_null(find_op(t.m[1]->graph, "Scatter", 0));
	oq_node *n = find_op(t.m[1]->graph, "ScatterElements", 0);
	cr_assert(n);
	cr_assert_eq(oq_node_attr_int(n, "axis", 0), 1);
	/* row 0: x[0][2] = -1, x[0][0] = -2 */
	oq_rt x = fin(GEN_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
	same1(&t, &x, W(-2, 2, -1, 4, 5, 6));
	oq_rt_release(&x);
	ut_end(&t);
}

/* Ranks inferred through Shape/Slice/Concat -> Reshape and MatMul: no rewrite needed. */
Test(upgrade, softmax_rank_inferred_through_reshape)
{
	ut t;
	float xv[24];
	double want[24];
	for (int i = 0; i < 24; i++)
		xv[i] = (float)((i * 5) % 7) * 0.5f - 1.0f;
	ut_begin(&t, 4, 9);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3, 4));
	gen_node(t.g, t.gp, "Shape", "sh", "x", "s");
	Onnx__NodeProto *sl = gen_node(t.g, t.gp, "Slice", "sl", "s", "s2");
	gen_attr_ints(t.g, sl, "starts", 1, (const int64_t[]){0});
	gen_attr_ints(t.g, sl, "ends", 1, (const int64_t[]){2});
	gen_init(t.g, t.gp, "minus1", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(-1));
	Onnx__NodeProto *cc = gen_node(t.g, t.gp, "Concat", "cc", "s2,minus1", "shape");
	gen_attr_int(t.g, cc, "axis", 0);
	gen_node(t.g, t.gp, "Reshape", "rs", "x,shape", "r");
	Onnx__NodeProto *sm = gen_node(t.g, t.gp, "Softmax", "sm", "r", "y");
	gen_attr_int(t.g, sm, "axis", 2);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, -1, NULL);
	ut_load(&t);
	size_t before = count_nodes(t.m[1]->graph);
	ut_upgrade_ok(&t, 13);
	cr_assert_eq(count_nodes(t.m[1]->graph), before); /* rank 3 known: axis 2 is the last */
	cr_assert_null(find_op(t.m[1]->graph, "Flatten", 0));
	cr_assert_eq(oq_node_attr_int(find_op(t.m[1]->graph, "Softmax", 0), "axis", 0), -1);
	ref_softmax2d(xv, 6, 4, 0, want);
	oq_rt x = fin(GEN_SHAPE(2, 3, 4), xv);
	same1(&t, &x, want, 24);
	oq_rt_release(&x);
	ut_end(&t);
}

/* Opset 6: is_test and consumed_inputs go, the ratio (after is_test in the list) becomes an input. */
Test(upgrade, dropout6_is_test_then_ratio)
{
	ut t;
	ut_begin(&t, 3, 6);
	gen_input(t.g, t.gp, "x", OQ_DT_FLOAT, GEN_SHAPE(3));
	Onnx__NodeProto *r = gen_node(t.g, t.gp, "Relu", "relu", "x", "h");
	gen_attr_ints(t.g, r, "consumed_inputs", 1, (const int64_t[]){0});
	Onnx__NodeProto *d = gen_node(t.g, t.gp, "Dropout", "dr", "h", "y");
	gen_attr_int(t.g, d, "is_test", 1);
	gen_attr_float(t.g, d, "ratio", 0.3f);
	gen_output(t.g, t.gp, "y", OQ_DT_FLOAT, GEN_SHAPE(3));
	ut_load(&t);
	ut_upgrade_ok(&t, 13);
	oq_node *dn = find_op(t.m[1]->graph, "Dropout", 0);
	cr_assert_eq(dn->n_attrs, 0);
	cr_assert_eq(find_op(t.m[1]->graph, "Relu", 0)->n_attrs, 0);
	cr_assert_eq(dn->n_inputs, 2);
	expect_init(dn->inputs[1], OQ_DT_FLOAT, W((double)0.3f));
	oq_rt x = fin(GEN_SHAPE(3), (const float[]){-1, 0.5f, 2});
	same1(&t, &x, W(0, 0.5, 2));
	oq_rt_release(&x);
	ut_end(&t);
}
