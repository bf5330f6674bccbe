/*
 * test_exec_fold.c - the executor's plan-time constant folding (calib/exec/plan_fold.c
 * oq_plan_fold): nodes whose inputs are all initializers or folded values run
 * once when the plan is made, and every run reuses their outputs.
 *
 * Each model runs with folding (the default) and without (oq_exec_no_fold):
 * outputs must be bit-identical, an observer must see the same values (names,
 * order and bytes) either way, and oq_exec_n_folded counts the folded nodes.
 * Expected outputs are computed by hand in the comments (a transpose and a
 * small matrix product of integers, exact in float).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/kernel.h"
#include "calib/kernels/linalg/linalg.h"

/* ------------------------------------------------------------- helpers */

/* What an observer saw: value names in order and a copy of each value's bytes. */
typedef struct seen {
	int n;
	char names[64][48];
	size_t nbytes[64];
	unsigned char *bytes[64];
} seen;

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	seen *s = ctx;
	if (s->n >= 64)
		return 0;
	snprintf(s->names[s->n], sizeof s->names[0], "%s", v->name);
	s->nbytes[s->n] = t->nbytes;
	s->bytes[s->n] = malloc(t->nbytes + 1);
	cr_assert(s->bytes[s->n]);
	if (t->nbytes)
		memcpy(s->bytes[s->n], t->data, t->nbytes);
	s->n++;
	return 0;
}

static void seen_free(seen *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->bytes[i]);
	memset(s, 0, sizeof *s);
}

static const unsigned char *seen_get(const seen *s, const char *name, size_t *nbytes)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->names[i], name)) {
			*nbytes = s->nbytes[i];
			return s->bytes[i];
		}
	return NULL;
}

/*
 * Loads g and runs it (threads, fold on/off, optional observer) on the
 * inputs; fills out (nout owned tensors) and returns oq_exec_n_folded.
 * err non-NULL: the run may fail, its status goes to *err with the message.
 */
static size_t run(gen_model *g, int threads, int fold, seen *ob, const oq_rt *in, size_t nin, oq_rt *out,
		  size_t nout, int *err, char *msg, size_t msgn)
{
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	size_t nf;
	int rc;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	oq_exec_no_fold = !fold;
	rc = oq_exec_new(m, &o, &e, &d);
	oq_exec_no_fold = 0;
	cr_assert_eq(rc, OQ_OK, "exec_new: %s", d.msg);
	if (ob)
		oq_exec_set_observer(e, observe, ob);
	rc = oq_exec_run(e, in, nin, out, nout, &d);
	if (err) {
		*err = rc;
		snprintf(msg, msgn, "%s", d.msg);
	} else {
		cr_assert_eq(rc, OQ_OK, "run: %s", d.msg);
	}
	nf = oq_exec_n_folded(e);
	oq_exec_free(e);
	oq_model_free(m);
	return nf;
}

static void expect_same(const oq_rt *a, const oq_rt *b, const char *what)
{
	cr_assert_eq(a->dtype, b->dtype, "%s: dtype", what);
	cr_assert_eq(a->rank, b->rank, "%s: rank", what);
	for (int i = 0; i < a->rank; i++)
		cr_assert_eq(a->dims[i], b->dims[i], "%s: dim %d", what, i);
	cr_assert_eq(a->nbytes, b->nbytes, "%s: bytes", what);
	cr_assert(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0, "%s: bits differ", what);
}

static void expect_floats(const oq_rt *t, const double *want, size_t n, const char *what)
{
	cr_assert_eq(t->dtype, OQ_DT_FLOAT, "%s: dtype", what);
	cr_assert_eq(t->nelem, n, "%s: %zu elements, want %zu", what, t->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(((const float *)t->data)[i], (float)want[i], "%s: element %zu is %g, want %g", what, i,
			     (double)((const float *)t->data)[i], want[i]);
}

/* Observers of a folded and an unfolded run saw the same values in the same order. */
static void expect_same_seen(const seen *a, const seen *b)
{
	cr_assert_eq(a->n, b->n, "observer saw %d values folded, %d unfolded", a->n, b->n);
	for (int i = 0; i < a->n; i++) {
		cr_expect_str_eq(a->names[i], b->names[i], "observed value #%d", i);
		cr_assert_eq(a->nbytes[i], b->nbytes[i], "observed '%s': size", a->names[i]);
		cr_expect(memcmp(a->bytes[i], b->bytes[i], a->nbytes[i]) == 0, "observed '%s': bits differ",
			  a->names[i]);
	}
}

/* ------------------------------------------------------------- models */

/*
 * The vit_b_16 export's pattern and its shape arithmetic:
 *   Wi = Identity(W)            W [3, 2] = [[1, 2], [3, 4], [5, 6]]
 *   Wt = Transpose(Wi)          [2, 3] = [[1, 3, 5], [2, 4, 6]]
 *   p  = MatMul(x, Wt)          x [2, 1, 2] (batch dims broadcast against a 2-D B)
 *   s  = Shape(Wt), s0 = Gather(s, 0) = 2, u = Unsqueeze(s0, [0]) = [2],
 *   sh = Concat(u, c3) = [2, 3]  (c3 = Constant [3])
 *   y  = Reshape(p, sh)         [2, 3]
 *   wt = Wt (graph output)
 * x = [[[1, 1]], [[2, -1]]]: p = [[1+2, 3+4, 5+6], [2-2, 6-4, 10-6]] = [[3, 7, 11], [0, 2, 4]].
 * Folded: Identity, Transpose, Shape, Gather, Unsqueeze, Constant, Concat = 7 nodes.
 */
static gen_model *vit_like(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 1, 2));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2), GEN_VALS(1, 2, 3, 4, 5, 6));
	gen_init(g, gp, "axes", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(0));
	gen_init(g, gp, "zero", OQ_DT_INT64, 0, NULL, GEN_VALS(0));
	gen_node(g, gp, "Identity", "id", "W", "Wi");
	n = gen_node(g, gp, "Transpose", "tr", "Wi", "Wt");
	gen_attr_ints(g, n, "perm", 2, (const int64_t[]){1, 0});
	gen_node(g, gp, "MatMul", "mm", "x,Wt", "p");
	gen_node(g, gp, "Shape", "shape", "Wt", "s");
	gen_node(g, gp, "Gather", "gather", "s,zero", "s0");
	gen_node(g, gp, "Unsqueeze", "unsq", "s0,axes", "u");
	n = gen_node(g, gp, "Constant", "c3", "", "c3");
	gen_attr(g, n, "value", OQ_ATTR_TENSOR)->t = gen_tensor(g, "", OQ_DT_INT64, 1, (const int64_t[]){1},
								GEN_VALS(3));
	gen_attr_int(g, gen_node(g, gp, "Concat", "concat", "u,c3", "sh"), "axis", 0);
	gen_node(g, gp, "Reshape", "reshape", "p,sh", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, gp, "Wt", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	return g;
}

static void input_x(oq_rt *x)
{
	static const float xv[] = {1, 1, 2, -1};
	cr_assert_eq(oq_rt_alloc(x, OQ_DT_FLOAT, 3, (const int64_t[]){2, 1, 2}), OQ_OK);
	memcpy(x->data, xv, sizeof xv);
}

Test(exec_fold, weight_transpose_and_shape_chain)
{
	gen_model *g = vit_like();
	oq_rt x, f[2], u[2], two[2];
	seen sf, su;

	input_x(&x);
	memset(&sf, 0, sizeof sf);
	memset(&su, 0, sizeof su);
	cr_expect_eq(run(g, 1, 1, NULL, &x, 1, f, 2, NULL, NULL, 0), 7, "folded nodes");
	cr_expect_eq(run(g, 1, 0, NULL, &x, 1, u, 2, NULL, NULL, 0), 0, "folded nodes with no_fold");
	expect_floats(&f[0], (const double[]){3, 7, 11, 0, 2, 4}, 6, "y");
	expect_floats(&f[1], (const double[]){1, 3, 5, 2, 4, 6}, 6, "Wt (a folded graph output)");
	cr_expect_eq(f[0].rank, 2);
	expect_same(&f[0], &u[0], "y folded vs not");
	expect_same(&f[1], &u[1], "Wt folded vs not");
	for (int i = 0; i < 2; i++) {
		oq_rt_release(&u[i]);
		oq_rt_release(&f[i]);
	}

	/* observers: every node output, folded or not, in graph order with the same bits */
	run(g, 1, 1, &sf, &x, 1, f, 2, NULL, NULL, 0);
	run(g, 1, 0, &su, &x, 1, u, 2, NULL, NULL, 0);
	cr_expect_eq(sf.n, 9, "observed values (one per node)");
	expect_same_seen(&sf, &su);
	{
		size_t nb = 0;
		const unsigned char *b = seen_get(&sf, "Wt", &nb);
		float want[] = {1, 3, 5, 2, 4, 6};
		cr_assert(b && nb == sizeof want, "observer saw the folded Wt");
		cr_expect(memcmp(b, want, sizeof want) == 0, "observed Wt");
	}
	/* a second run of the same executor and 2 threads: same bits */
	run(g, 2, 1, NULL, &x, 1, two, 2, NULL, NULL, 0);
	expect_same(&f[0], &two[0], "y threads 1 vs 2");
	for (int i = 0; i < 2; i++) {
		oq_rt_release(&u[i]);
		oq_rt_release(&f[i]);
		oq_rt_release(&two[i]);
	}
	seen_free(&sf);
	seen_free(&su);
	oq_rt_release(&x);
	gen_free(g);
}

/*
 * A run reuses the folded values: two runs of one executor give the same
 * outputs (nothing is released or overwritten by the first run), also when
 * the folded value feeds an element-wise op with a run-time input.
 * y = Add(x, Transpose(W)) with x [2, 3] = 10..15, W [3, 2] as above:
 * W^T = [[1, 3, 5], [2, 4, 6]] -> y = [[11, 14, 17], [15, 18, 21]].
 */
Test(exec_fold, repeated_runs_reuse_constants)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 1};
	oq_diag d;
	oq_rt x, y;
	static const float xv[] = {10, 11, 12, 13, 14, 15};

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2), GEN_VALS(1, 2, 3, 4, 5, 6));
	gen_attr_ints(g, gen_node(g, gp, "Transpose", "tr", "W", "Wt"), "perm", 2, (const int64_t[]){1, 0});
	gen_node(g, gp, "Add", "add", "x,Wt", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(oq_exec_n_folded(e), 1);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 2, (const int64_t[]){2, 3}), OQ_OK);
	memcpy(x.data, xv, sizeof xv);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(oq_exec_run(e, &x, 1, &y, 1, &d), OQ_OK, "%s", d.msg);
		expect_floats(&y, (const double[]){11, 14, 17, 15, 18, 21}, 6, "y");
		oq_rt_release(&y);
	}
	oq_rt_release(&x);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
}

/*
 * A subgraph reads a folded value of the main graph (outer scope):
 * If(c) then: t = Identity(Wt) else: e = Identity(W), Wt = Transpose(W).
 */
Test(exec_fold, subgraph_reads_folded_outer_value)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp, *br;
	Onnx__NodeProto *n;
	oq_rt c, f, u;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "c", OQ_DT_BOOL, 0, NULL);
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2), GEN_VALS(1, 2, 3, 4, 5, 6));
	gen_attr_ints(g, gen_node(g, gp, "Transpose", "tr", "W", "Wt"), "perm", 2, (const int64_t[]){1, 0});
	n = gen_node(g, gp, "If", "if", "c", "y");
	br = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, br, "Identity", "t", "Wt", "ty");
	gen_output(g, br, "ty", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	br = gen_attr_graph(g, n, "else_branch", "else");
	gen_node(g, br, "Identity", "e", "W", "ey");
	gen_output(g, br, "ey", OQ_DT_FLOAT, GEN_SHAPE(3, 2));
	gen_output(g, gp, "y", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(oq_rt_alloc(&c, OQ_DT_BOOL, 0, NULL), OQ_OK);
	((unsigned char *)c.data)[0] = 1;
	cr_expect_eq(run(g, 1, 1, NULL, &c, 1, &f, 1, NULL, NULL, 0), 1, "folded: the Transpose only");
	run(g, 1, 0, NULL, &c, 1, &u, 1, NULL, NULL, 0);
	expect_floats(&f, (const double[]){1, 3, 5, 2, 4, 6}, 6, "then branch");
	expect_same(&f, &u, "then branch folded vs not");
	oq_rt_release(&f);
	oq_rt_release(&u);
	((unsigned char *)c.data)[0] = 0;
	run(g, 1, 1, NULL, &c, 1, &f, 1, NULL, NULL, 0);
	expect_floats(&f, (const double[]){1, 2, 3, 4, 5, 6}, 6, "else branch (W itself)");
	oq_rt_release(&f);
	oq_rt_release(&c);
	gen_free(g);
}

/*
 * Not folded: a node with a run-time input (Add(x, c)); a ConstantOfShape
 * whose output is far bigger than its inputs (kept per run, freed after
 * use); a node whose kernel fails at plan time (Reshape of 6 values to
 * [4]): the run then reports the kernel's error as without folding.
 */
Test(exec_fold, what_is_not_folded)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_rt x, f, u;
	int ef = 0, eu = 0;
	char mf[1024], mu[1024];

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_init(g, gp, "shape", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(100000));
	gen_node(g, gp, "ConstantOfShape", "big", "shape", "z");
	gen_node(g, gp, "ReduceSum", "sum", "z", "s"); /* 0 (ConstantOfShape's default value) */
	gen_node(g, gp, "Add", "add", "x,s", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 1, (const int64_t[]){1}), OQ_OK);
	((float *)x.data)[0] = 2.5f;
	cr_expect_eq(run(g, 1, 1, NULL, &x, 1, &f, 1, NULL, NULL, 0), 0, "nothing folded");
	expect_floats(&f, (const double[]){2.5}, 1, "y");
	oq_rt_release(&f);
	gen_free(g);

	g = gen_new(8);
	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2), GEN_VALS(1, 2, 3, 4, 5, 6));
	gen_init(g, gp, "bad", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(4));
	gen_node(g, gp, "Reshape", "reshape", "W,bad", "r");
	gen_node(g, gp, "Add", "add", "x,r", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, -1, NULL);
	cr_expect_eq(run(g, 1, 1, NULL, &x, 1, &f, 1, &ef, mf, sizeof mf), 0, "nothing folded");
	run(g, 1, 0, NULL, &x, 1, &u, 1, &eu, mu, sizeof mu);
	cr_expect_neq(ef, OQ_OK, "the bad Reshape fails the run");
	cr_expect_eq(ef, eu, "same status folded or not");
	cr_expect_str_eq(mf, mu, "same message folded or not");
	oq_rt_release(&x);
	gen_free(g);
}

/*
 * oq_exec_opts.max_live_bytes: two ConstantOfShape outputs of 75000 floats
 * (300000 bytes each) and their sum (Add, made while both are held): 900000
 * bytes at once. 900000 holds them; 800000 fails at the Add, 500000 at the
 * second ConstantOfShape, 200000 at the first, each named (the plan folds
 * none of them: a folded ConstantOfShape refused by the limit is left to the
 * runs). x [1] is the caller's; the sums are 4 bytes: y = x + 0 = 2.5.
 */
Test(exec_fold, max_live_bytes_fails_naming_the_node)
{
	static const int64_t limits[] = {900000, 800000, 500000, 200000};
	static const char *const fails[] = {NULL, "'both'", "'big2'", "'big1'"};
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_rt x;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_init(g, gp, "shape", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(75000));
	gen_node(g, gp, "ConstantOfShape", "big1", "shape", "z1");
	gen_node(g, gp, "ConstantOfShape", "big2", "shape", "z2");
	gen_node(g, gp, "Add", "both", "z1,z2", "z");
	gen_node(g, gp, "ReduceSum", "sum", "z", "s");
	gen_node(g, gp, "Add", "add", "x,s", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 1, (const int64_t[]){1}), OQ_OK);
	((float *)x.data)[0] = 2.5f;
	for (int i = 0; i < 4; i++) {
		oq_model *m = NULL;
		oq_exec *e = NULL;
		oq_exec_opts o = {.threads = 1, .max_live_bytes = limits[i]};
		oq_diag d;
		oq_rt y = {0};
		int rc;

		oq_diag_init(&d);
		cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
		cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec_new: %s", d.msg);
		rc = oq_exec_run(e, &x, 1, &y, 1, &d);
		if (!fails[i]) {
			cr_expect_eq(rc, OQ_OK, "limit %lld: %s", (long long)limits[i], d.msg);
			if (!rc)
				expect_floats(&y, (const double[]){2.5}, 1, "y");
		} else {
			cr_expect_eq(rc, OQ_ENOMEM, "limit %lld: status %d", (long long)limits[i], rc);
			cr_expect(strstr(d.msg, fails[i]) && strstr(d.msg, "300000 bytes"), "limit %lld: %s",
				  (long long)limits[i], d.msg);
		}
		oq_rt_release(&y);
		oq_exec_free(e);
		oq_model_free(m);
	}
	oq_rt_release(&x);
	gen_free(g);
}

/*
 * A folded weight that only a MatMul reads is packed and let go (a shell
 * with its shape); an observer still sees it, rebuilt from the panels, with
 * the bits of an unfolded, unpacked run. Also a Gemm whose B (transB) is
 * an initializer. x [2, 2] = [[1, 1], [2, -1]], W [3, 2] as above:
 *   Wt = Transpose(W) = [[1, 3, 5], [2, 4, 6]], p = MatMul(x, Wt) = [[3, 7, 11], [0, 2, 4]]
 *   y = Gemm(x, W, transB = 1) = x W^T = p.
 */
Test(exec_fold, packed_weight_still_observed)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 1};
	oq_diag d;
	oq_rt x, f[2], u[2];
	seen sf, su;
	static const float xv[] = {1, 1, 2, -1};

	__builtin_cpu_init();
	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2), GEN_VALS(1, 2, 3, 4, 5, 6));
	gen_attr_ints(g, gen_node(g, gp, "Transpose", "tr", "W", "Wt"), "perm", 2, (const int64_t[]){1, 0});
	gen_node(g, gp, "MatMul", "mm", "x,Wt", "p");
	gen_attr_int(g, gen_node(g, gp, "Gemm", "gemm", "x,W", "y"), "transB", 1);
	gen_output(g, gp, "p", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 2, (const int64_t[]){2, 2}), OQ_OK);
	memcpy(x.data, xv, sizeof xv);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
		cr_expect_eq(oq_exec_n_packed(e), 2, "MatMul and Gemm packed");
	oq_exec_free(e);
	oq_model_free(m);

	memset(&sf, 0, sizeof sf);
	memset(&su, 0, sizeof su);
	run(g, 1, 1, &sf, &x, 1, f, 2, NULL, NULL, 0);
	oq_exec_no_pack = 1;
	run(g, 1, 0, &su, &x, 1, u, 2, NULL, NULL, 0);
	oq_exec_no_pack = 0;
	expect_floats(&f[0], (const double[]){3, 7, 11, 0, 2, 4}, 6, "p");
	expect_floats(&f[1], (const double[]){3, 7, 11, 0, 2, 4}, 6, "y");
	expect_same(&f[0], &u[0], "p packed vs not");
	expect_same(&f[1], &u[1], "y packed vs not");
	cr_expect_eq(sf.n, 3, "observed values (one per node)");
	expect_same_seen(&sf, &su);
	for (int i = 0; i < 2; i++) {
		oq_rt_release(&u[i]);
		oq_rt_release(&f[i]);
	}
	seen_free(&sf);
	seen_free(&su);
	oq_rt_release(&x);
	gen_free(g);
}

/* n pseudo-random values in [-1, 1) (a fixed LCG: the same model every run). */
static double *rvals(size_t n, unsigned seed)
{
	double *v = calloc(n, sizeof *v);
	unsigned long long r = seed;
	cr_assert(v);
	for (size_t i = 0; i < n; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		v[i] = (double)(r >> 40) / 8388608.0 - 1.0;
	}
	return v;
}

/*
 * Conv weights packed at plan time (plan_fold.c pack_conv, conv_gemm.c
 * oq_packed_w_pack): 32-channel panels read by both AVX-512 register tiles.
 *   Wi = Identity(W1)                W1 [64, 6, 3, 3]: folded, then packed
 *   c1 = Conv(x, Wi, B1), pad 1      x [1, 6, 7, 7]: channels in the lanes (49 positions)
 *   r  = Relu(c1)                    (fused)
 *   y2 = Conv(r, W2)                 W2 [40, 64, 1, 1]: a last panel of 8 channels
 *   y3 = Conv(r, W3), group 2, pad 1 W3 [32, 32, 3, 3]: 16 channels per group
 *   y4 = Conv(x2, W4, B4)            x2 [1, 8, 20, 20], W4 [48, 8, 1, 1]: positions in the lanes
 * Outputs with packing must equal those without (oq_exec_no_pack) bit for
 * bit, for 1 and 2 threads and with an observer (every node on its own,
 * the folded Identity's output rebuilt from the panels); the reference
 * path (weights unpacked) within float rounding.
 */
Test(exec_fold, packed_conv_weights)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 1};
	oq_diag d;
	oq_rt in[2], f[4], u[4], t2[4], r[4];
	seen sf, su;
	double *w1 = rvals(64 * 6 * 9, 1), *b1 = rvals(64, 2), *w2 = rvals(40 * 64, 3), *w3 = rvals(32 * 32 * 9, 4);
	double *w4 = rvals(48 * 8, 5), *b4 = rvals(48, 6), *xv = rvals(6 * 49, 7), *x2v = rvals(8 * 400, 8);
	static const char *outs[4] = {"r", "y2", "y3", "y4"};

	__builtin_cpu_init();
	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 6, 7, 7));
	gen_input(g, gp, "x2", OQ_DT_FLOAT, GEN_SHAPE(1, 8, 20, 20));
	gen_init(g, gp, "W1", OQ_DT_FLOAT, GEN_SHAPE(64, 6, 3, 3), w1);
	gen_init(g, gp, "B1", OQ_DT_FLOAT, GEN_SHAPE(64), b1);
	gen_init(g, gp, "W2", OQ_DT_FLOAT, GEN_SHAPE(40, 64, 1, 1), w2);
	gen_init(g, gp, "W3", OQ_DT_FLOAT, GEN_SHAPE(32, 32, 3, 3), w3);
	gen_init(g, gp, "W4", OQ_DT_FLOAT, GEN_SHAPE(48, 8, 1, 1), w4);
	gen_init(g, gp, "B4", OQ_DT_FLOAT, GEN_SHAPE(48), b4);
	gen_node(g, gp, "Identity", "id", "W1", "Wi");
	n = gen_node(g, gp, "Conv", "c1", "x,Wi,B1", "c1");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(g, gp, "Relu", "relu", "c1", "r");
	gen_node(g, gp, "Conv", "c2", "r,W2", "y2");
	n = gen_node(g, gp, "Conv", "c3", "r,W3", "y3");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_attr_int(g, n, "group", 2);
	gen_node(g, gp, "Conv", "c4", "x2,W4,B4", "y4");
	gen_output(g, gp, "r", OQ_DT_FLOAT, GEN_SHAPE(1, 64, 7, 7));
	gen_output(g, gp, "y2", OQ_DT_FLOAT, GEN_SHAPE(1, 40, 7, 7));
	gen_output(g, gp, "y3", OQ_DT_FLOAT, GEN_SHAPE(1, 32, 7, 7));
	gen_output(g, gp, "y4", OQ_DT_FLOAT, GEN_SHAPE(1, 48, 20, 20));
	cr_assert_eq(oq_rt_alloc(&in[0], OQ_DT_FLOAT, 4, (const int64_t[]){1, 6, 7, 7}), OQ_OK);
	cr_assert_eq(oq_rt_alloc(&in[1], OQ_DT_FLOAT, 4, (const int64_t[]){1, 8, 20, 20}), OQ_OK);
	for (size_t i = 0; i < in[0].nelem; i++)
		((float *)in[0].data)[i] = (float)xv[i];
	for (size_t i = 0; i < in[1].nelem; i++)
		((float *)in[1].data)[i] = (float)x2v[i];

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
		cr_expect_eq(oq_exec_n_packed_conv(e), 4, "four Conv weights packed");
	oq_exec_free(e);
	oq_model_free(m);

	memset(&sf, 0, sizeof sf);
	memset(&su, 0, sizeof su);
	run(g, 1, 1, NULL, in, 2, f, 4, NULL, NULL, 0);
	run(g, 2, 1, NULL, in, 2, t2, 4, NULL, NULL, 0);
	run(g, 1, 1, &sf, in, 2, r, 4, NULL, NULL, 0);
	for (int i = 0; i < 4; i++) {
		expect_same(&f[i], &t2[i], outs[i]);
		expect_same(&f[i], &r[i], outs[i]);
		oq_rt_release(&t2[i]);
		oq_rt_release(&r[i]);
	}
	oq_exec_no_pack = 1;
	run(g, 1, 1, &su, in, 2, u, 4, NULL, NULL, 0);
	oq_exec_no_pack = 0;
	expect_same_seen(&sf, &su);
	{
		size_t nb;
		const unsigned char *wi = seen_get(&sf, "Wi", &nb);
		cr_assert(wi && nb == 64 * 6 * 9 * sizeof(float), "the folded Identity observed");
		for (size_t i = 0; i < 64 * 6 * 9; i++) {
			float v;
			memcpy(&v, wi + i * sizeof v, sizeof v);
			cr_assert_eq(v, (float)w1[i], "Wi element %zu rebuilt from the panels", i);
		}
	}
	oq_linalg_use_ref = 1;
	run(g, 1, 1, NULL, in, 2, r, 4, NULL, NULL, 0);
	oq_linalg_use_ref = 0;
	for (int i = 0; i < 4; i++) {
		expect_same(&f[i], &u[i], outs[i]);
		for (size_t k = 0; k < f[i].nelem; k++) {
			double a = ((const float *)f[i].data)[k], b = ((const float *)r[i].data)[k];
			if (!(fabs(a - b) <= 1e-4 + 1e-4 * fabs(b))) {
				cr_expect(0, "%s element %zu: packed %.8g, reference %.8g", outs[i], k, a, b);
				break;
			}
		}
		oq_rt_release(&f[i]);
		oq_rt_release(&u[i]);
		oq_rt_release(&r[i]);
	}
	seen_free(&sf);
	seen_free(&su);
	oq_rt_release(&in[0]);
	oq_rt_release(&in[1]);
	free(w1);
	free(b1);
	free(w2);
	free(w3);
	free(w4);
	free(b4);
	free(xv);
	free(x2v);
	gen_free(g);
}

/*
 * A Conv weight written as a Constant node (as paddle2onnx exports do), 64 x 32 x 3 x 3 floats
 * (73 KiB, above the size at which a computed constant is left to the runs): the plan holds the
 * Constant's value and packs it for the Conv, as it does for an initializer. The outputs are the
 * bits of the same model with an initializer weight, and of runs that fold nothing.
 */
static gen_model *const_weight_conv(const double *w, int as_node)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 32, 9, 9));
	if (as_node) {
		n = gen_node(g, gp, "Constant", "wc", "", "W");
		gen_attr(g, n, "value", OQ_ATTR_TENSOR)->t =
			gen_tensor(g, "", OQ_DT_FLOAT, 4, (const int64_t[]){64, 32, 3, 3}, w);
	} else {
		gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(64, 32, 3, 3), w);
	}
	n = gen_node(g, gp, "Conv", "c", "x,W", "y");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 64, 9, 9));
	return g;
}

Test(exec_fold, constant_node_weight_held_and_packed)
{
	double *w = rvals(64 * 32 * 9, 11), *xv = rvals(32 * 81, 12);
	gen_model *g = const_weight_conv(w, 1), *gi = const_weight_conv(w, 0);
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 1};
	oq_diag d;
	oq_rt in, a, b, c;

	__builtin_cpu_init();
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, 4, (const int64_t[]){1, 32, 9, 9}), OQ_OK);
	for (size_t i = 0; i < in.nelem; i++)
		((float *)in.data)[i] = (float)xv[i];
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(oq_exec_n_folded(e), 1, "the Constant is held by the plan");
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
		cr_expect_eq(oq_exec_n_packed_conv(e), 1, "its value packed for the Conv");
	oq_exec_free(e);
	oq_model_free(m);
	run(g, 1, 1, NULL, &in, 1, &a, 1, NULL, NULL, 0);
	run(g, 2, 0, NULL, &in, 1, &b, 1, NULL, NULL, 0);
	run(gi, 1, 1, NULL, &in, 1, &c, 1, NULL, NULL, 0);
	expect_same(&a, &b, "y (nothing folded)");
	expect_same(&a, &c, "y (initializer weight)");
	oq_rt_release(&a);
	oq_rt_release(&b);
	oq_rt_release(&c);
	oq_rt_release(&in);
	free(w);
	free(xv);
	gen_free(g);
	gen_free(gi);
}

/*
 * oq_exec_opts.fold_dq: DequantizeLinear of constant int8 weights computed
 * once by the plan, and the float weights packed for their Conv and MatMul.
 *   Wd = DequantizeLinear(Wq, s, zp)    Wq int8 [32, 8, 1, 1], per-channel s (axis 0), zp 0
 *   y  = Conv(x, Wd)                    x [1, 8, 6, 6]
 *   Md = DequantizeLinear(Mq, t)        Mq int8 [8, 16], per-tensor t = 0.5
 *   z  = MatMul(f, Md)                  f = Transpose(Reshape(x, [8, 36])): [36, 8]
 * The outputs must be the bits of the run that dequantizes every time, with
 * an observer too (which also sees the folded weights: Wd exact, k * s[m]).
 * One element by hand: y[0, 0, 0, 0] = sum_c Wq[0, c] * s[0] * x[0, c, 0, 0].
 */
static int want_y(void *ctx, const oq_value *v)
{
	(void)ctx;
	return !strcmp(v->name, "y");
}

Test(exec_fold, fold_dq_packs_dequantized_weights)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;
	double wq[32 * 8], mq[8 * 16], s[32], *xv = rvals(8 * 36, 9);
	oq_rt x, out[2][2];
	seen ob[2];

	for (int i = 0; i < 32 * 8; i++)
		wq[i] = (i * 37) % 255 - 127;
	for (int i = 0; i < 8 * 16; i++)
		mq[i] = (i * 11) % 200 - 100;
	for (int m = 0; m < 32; m++)
		s[m] = ldexp(1.0 + m / 32.0, -7);
	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 8, 6, 6));
	gen_init(g, gp, "Wq", OQ_DT_INT8, GEN_SHAPE(32, 8, 1, 1), wq);
	gen_init(g, gp, "s", OQ_DT_FLOAT, GEN_SHAPE(32), s);
	gen_init(g, gp, "zp", OQ_DT_INT8, GEN_SHAPE(32), (double[32]){0});
	gen_init(g, gp, "Mq", OQ_DT_INT8, GEN_SHAPE(8, 16), mq);
	gen_init(g, gp, "t", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
	gen_init(g, gp, "shape", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(8, 36));
	n = gen_node(g, gp, "DequantizeLinear", "dqw", "Wq,s,zp", "Wd");
	gen_attr_int(g, n, "axis", 0);
	gen_node(g, gp, "Conv", "conv", "x,Wd", "y");
	gen_node(g, gp, "DequantizeLinear", "dqm", "Mq,t", "Md");
	gen_node(g, gp, "Reshape", "flat", "x,shape", "f8");
	gen_node(g, gp, "Transpose", "tr", "f8", "f");
	gen_node(g, gp, "MatMul", "mm", "f,Md", "z");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 32, 6, 6));
	gen_output(g, gp, "z", OQ_DT_FLOAT, GEN_SHAPE(36, 16));
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 4, (const int64_t[]){1, 8, 6, 6}), OQ_OK);
	for (size_t i = 0; i < x.nelem; i++)
		((float *)x.data)[i] = (float)xv[i];
	__builtin_cpu_init();
	for (int fold = 0; fold < 2; fold++) {
		oq_model *m = NULL;
		oq_exec *e = NULL;
		oq_exec_opts o = {.threads = 1, .fold_dq = fold};
		oq_diag d;
		oq_rt plain[2];
		oq_diag_init(&d);
		cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(oq_exec_n_folded(e), fold ? 2u : 0u, "fold_dq %d: %zu folded", fold, oq_exec_n_folded(e));
		if (fold && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
			cr_expect_eq(oq_exec_n_packed_conv(e), 1, "the dequantized Conv weight packed");
		if (fold && oq_packed_b_available())
			cr_expect_eq(oq_exec_n_packed(e), 1, "the dequantized MatMul weight packed");
		cr_assert_eq(oq_exec_run(e, &x, 1, plain, 2, &d), OQ_OK, "%s", d.msg);
		memset(&ob[fold], 0, sizeof ob[fold]);
		oq_exec_set_observer(e, observe, &ob[fold]);
		cr_assert_eq(oq_exec_run(e, &x, 1, out[fold], 2, &d), OQ_OK, "%s", d.msg);
		for (int k = 0; k < 2; k++) {
			expect_same(&plain[k], &out[fold][k], "observed run");
			oq_rt_release(&plain[k]);
		}
		oq_exec_free(e);
		oq_model_free(m);
	}
	for (int k = 0; k < 2; k++)
		expect_same(&out[0][k], &out[1][k], k ? "z" : "y");
	expect_same_seen(&ob[0], &ob[1]);
	{
		size_t nb;
		const float *wd = (const float *)seen_get(&ob[1], "Wd", &nb);
		double y0 = 0;
		cr_assert(wd && nb == 32 * 8 * sizeof(float), "the folded DequantizeLinear observed");
		cr_expect_eq(wd[8 * 5 + 3], (float)(wq[8 * 5 + 3] * s[5]));
		for (int c = 0; c < 8; c++)
			y0 += wq[c] * s[0] * (double)((float *)x.data)[c * 36];
		cr_expect(fabs(((float *)out[1][0].data)[0] - y0) < 1e-5, "y[0] %g, hand %g",
		          (double)((float *)out[1][0].data)[0], y0);
	}
	/* an observer whose want declines the weights is not handed the packed Wd (its rebuild
	 * would cost a pass over the weight every run), and still sees y */
	{
		oq_model *m = NULL;
		oq_exec *e = NULL;
		oq_exec_opts o = {.threads = 1, .fold_dq = 1};
		oq_diag d;
		oq_rt r[2];
		seen sw;
		size_t nb;
		memset(&sw, 0, sizeof sw);
		oq_diag_init(&d);
		cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
		oq_exec_set_observer(e, observe, &sw);
		oq_exec_set_observe_want(e, want_y);
		cr_assert_eq(oq_exec_run(e, &x, 1, r, 2, &d), OQ_OK, "%s", d.msg);
		if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
			cr_expect_null(seen_get(&sw, "Wd", &nb), "a declined packed weight was rebuilt");
		cr_expect_not_null(seen_get(&sw, "y", &nb));
		for (int k = 0; k < 2; k++) {
			expect_same(&r[k], &out[0][k], "with want");
			oq_rt_release(&r[k]);
		}
		seen_free(&sw);
		oq_exec_free(e);
		oq_model_free(m);
	}
	for (int f = 0; f < 2; f++) {
		for (int k = 0; k < 2; k++)
			oq_rt_release(&out[f][k]);
		seen_free(&ob[f]);
	}
	oq_rt_release(&x);
	free(xv);
	gen_free(g);
}
