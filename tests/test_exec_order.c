/*
 * test_exec_order.c - the executor runs graphs whose nodes are not in
 * topological order (calib/exec/plan.c plan_order), as ONNX Runtime does:
 * float16 converters append their boundary Casts at the end of the node
 * list, and `onnxq run` must not refuse such a file (`onnxq check` still
 * reports the order).
 *
 * Models are built out of order with gen_model.h; expected outputs are
 * computed by hand in the comments. Covered: a chain listed backwards, an
 * observer seeing values in the order they are computed, the file order
 * kept where it is valid (two independent branches), a Conv -> Relu group
 * fused although the Relu is listed first (same bits as the sorted model),
 * an If branch whose body is out of order and reads an outer value
 * produced after the If in the file, and a cycle named in the error.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "calib/kernels/kernel.h"
#include "gen_model.h"

/* Value names an observer saw, in order. */
typedef struct seen {
	int n;
	char names[16][32];
} seen;

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	seen *s = ctx;
	(void)t;
	if (s->n < 16)
		snprintf(s->names[s->n++], sizeof s->names[0], "%s", v->name);
	return 0;
}

/*
 * Runs g on one float input x (its values xv, shape dims) with threads
 * threads; out receives the first output. Returns the status, the message in
 * msg. ob non-NULL: attached as observer. fused non-NULL: oq_exec_n_fused.
 */
static int run(gen_model *g, int rank, const int64_t *dims, const float *xv, int threads, seen *ob, oq_rt *out,
	       size_t *fused, char *msg, size_t msgn)
{
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	oq_diag d;
	oq_rt x;
	int rc;

	oq_diag_init(&d);
	memset(out, 0, sizeof *out);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(x.data, xv, x.nbytes);
	rc = oq_exec_new(m, &o, &e, &d);
	if (!rc && ob)
		oq_exec_set_observer(e, observe, ob);
	if (!rc)
		rc = oq_exec_run(e, &x, 1, out, 1, &d);
	if (!rc && fused)
		*fused = oq_exec_n_fused(e);
	snprintf(msg, msgn, "%.400s", d.count ? d.msg : "");
	oq_rt_release(&x);
	oq_exec_free(e);
	oq_model_free(m);
	return rc;
}

static void expect_floats(const oq_rt *t, const float *want, size_t n)
{
	cr_assert_eq(t->dtype, OQ_DT_FLOAT);
	cr_assert_eq(t->nelem, n, "%zu elements, want %zu", t->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(((const float *)t->data)[i], want[i], "element %zu is %g, want %g", i,
			     (double)((const float *)t->data)[i], (double)want[i]);
}

/*
 * y = Relu(Add(Mul(x, 2), 1)), nodes listed Relu, Add, Mul.
 * x = [-3, 0.5, 2]: m = [-6, 1, 4], a = [-5, 2, 5], y = [0, 2, 5].
 */
Test(exec_order, chain_listed_backwards)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	static const float xv[] = {-3, 0.5f, 2};
	oq_rt y;
	seen ob = {0};
	char msg[512];

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(3));
	gen_init(g, gp, "two", OQ_DT_FLOAT, 0, NULL, GEN_VALS(2));
	gen_init(g, gp, "one", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1));
	gen_node(g, gp, "Relu", "relu", "a", "y");
	gen_node(g, gp, "Add", "add", "m,one", "a");
	gen_node(g, gp, "Mul", "mul", "x,two", "m");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(3));
	for (int threads = 1; threads <= 2; threads++) {
		cr_assert_eq(run(g, GEN_SHAPE(3), xv, threads, NULL, &y, NULL, msg, sizeof msg), OQ_OK, "%s", msg);
		expect_floats(&y, (const float[]){0, 2, 5}, 3);
		oq_rt_release(&y);
	}
	cr_assert_eq(run(g, GEN_SHAPE(3), xv, 1, &ob, &y, NULL, msg, sizeof msg), OQ_OK, "%s", msg);
	expect_floats(&y, (const float[]){0, 2, 5}, 3);
	oq_rt_release(&y);
	cr_assert_eq(ob.n, 3);
	cr_expect_str_eq(ob.names[0], "m");
	cr_expect_str_eq(ob.names[1], "a");
	cr_expect_str_eq(ob.names[2], "y");
	gen_free(g);
}

/*
 * A valid order is kept: b = Abs(x) listed before n = Neg(x) (either could
 * run first), then y = Add(b, n). x = [-1, 2]: b = [1, 2], n = [1, -2],
 * y = [2, 0]; the observer sees b, n, y.
 */
Test(exec_order, valid_file_order_kept)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_rt y;
	seen ob = {0};
	char msg[512];

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_node(g, gp, "Abs", "abs", "x", "b");
	gen_node(g, gp, "Neg", "neg", "x", "n");
	gen_node(g, gp, "Add", "add", "b,n", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	cr_assert_eq(run(g, GEN_SHAPE(2), (const float[]){-1, 2}, 1, &ob, &y, NULL, msg, sizeof msg), OQ_OK, "%s",
		     msg);
	expect_floats(&y, (const float[]){2, 0}, 2);
	oq_rt_release(&y);
	cr_assert_eq(ob.n, 3);
	cr_expect_str_eq(ob.names[0], "b");
	cr_expect_str_eq(ob.names[1], "n");
	cr_expect_str_eq(ob.names[2], "y");
	gen_free(g);
}

/*
 * Conv (1x1, one channel, W = 2, B = -1) -> Relu, the Relu listed first; the
 * input comes from a Cast appended at the end (a float16 converter's
 * layout, here float to float). x = [-1, 0.5, 3]: conv = [-3, 0, 5],
 * y = [0, 0, 5]. The group still fuses (one fused head).
 */
static gen_model *conv_relu(int sorted)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 3));
	gen_init(g, gp, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(2));
	gen_init(g, gp, "B", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(-1));
	if (sorted)
		gen_attr_int(g, gen_node(g, gp, "Cast", "cast", "x", "xc"), "to", OQ_DT_FLOAT);
	if (sorted)
		gen_node(g, gp, "Conv", "conv", "xc,W,B", "c");
	gen_node(g, gp, "Relu", "relu", "c", "y");
	if (!sorted) {
		gen_node(g, gp, "Conv", "conv", "xc,W,B", "c");
		gen_attr_int(g, gen_node(g, gp, "Cast", "cast", "x", "xc"), "to", OQ_DT_FLOAT);
	}
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 3));
	return g;
}

Test(exec_order, conv_group_fuses_out_of_order)
{
	static const float xv[] = {-1, 0.5f, 3};
	gen_model *a = conv_relu(0), *b = conv_relu(1);
	oq_rt ya, yb;
	size_t fa = 0, fb = 0;
	char msg[512];

	cr_assert_eq(run(a, GEN_SHAPE(1, 1, 1, 3), xv, 1, NULL, &ya, &fa, msg, sizeof msg), OQ_OK, "%s", msg);
	cr_assert_eq(run(b, GEN_SHAPE(1, 1, 1, 3), xv, 1, NULL, &yb, &fb, msg, sizeof msg), OQ_OK, "%s", msg);
	expect_floats(&ya, (const float[]){0, 0, 5}, 3);
	cr_expect(memcmp(ya.data, yb.data, ya.nbytes) == 0, "unsorted and sorted differ");
	cr_expect_eq(fa, 1, "fused groups out of order: %zu", fa);
	cr_expect_eq(fb, 1, "fused groups sorted: %zu", fb);
	oq_rt_release(&ya);
	oq_rt_release(&yb);
	gen_free(a);
	gen_free(b);
}

/*
 * y = If(c, then: t2 = Neg(t1), t1 = Add(x2, one) (listed in that order),
 * else: Identity(x2)); x2 = Mul(x, two) is listed after the If and only the
 * branches read it (an outer value). c = true, x = [1, -2]: x2 = [2, -4],
 * t1 = [3, -3], y = [-3, 3].
 */
Test(exec_order, subgraph_and_outer_reads_sorted)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp, *br;
	Onnx__NodeProto *n;
	oq_rt y;
	char msg[512];

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_init(g, gp, "c", OQ_DT_BOOL, 0, NULL, GEN_VALS(1));
	gen_init(g, gp, "two", OQ_DT_FLOAT, 0, NULL, GEN_VALS(2));
	gen_init(g, gp, "one", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1));
	n = gen_node(g, gp, "If", "if", "c", "y");
	br = gen_attr_graph(g, n, "then_branch", "then");
	gen_node(g, br, "Neg", "neg", "t1", "t2");
	gen_node(g, br, "Add", "add", "x2,one", "t1");
	gen_output(g, br, "t2", OQ_DT_FLOAT, GEN_SHAPE(2));
	br = gen_attr_graph(g, n, "else_branch", "else");
	gen_node(g, br, "Identity", "id", "x2", "e");
	gen_output(g, br, "e", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_node(g, gp, "Mul", "mul", "x,two", "x2");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
	cr_assert_eq(run(g, GEN_SHAPE(2), (const float[]){1, -2}, 1, NULL, &y, NULL, msg, sizeof msg), OQ_OK, "%s",
		     msg);
	expect_floats(&y, (const float[]){-3, 3}, 2);
	oq_rt_release(&y);
	gen_free(g);
}

/* a = Relu(b), b = Neg(a): no order exists; the error names a node on the cycle. */
Test(exec_order, cycle_is_an_error)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_rt y;
	char msg[512];

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_node(g, gp, "Relu", "relu", "b", "a");
	gen_node(g, gp, "Neg", "neg", "a", "b");
	gen_node(g, gp, "Add", "add", "x,a", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(1));
	cr_assert_eq(run(g, GEN_SHAPE(1), (const float[]){1}, 1, NULL, &y, NULL, msg, sizeof msg), OQ_EINVAL);
	cr_expect(strstr(msg, "is on a cycle") && (strstr(msg, "'relu'") || strstr(msg, "'neg'")), "message: %s",
		  msg);
	gen_free(g);
}

/* A graph input listed twice (float16, as the fuzzer found it) has two definitions: the
 * executor refuses it before binding anything, naming the input. */
Test(exec_order, input_listed_twice_is_an_error)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *gp;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts eo;
	oq_diag d;

	gen_opset(g, "", 13);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT16, GEN_SHAPE(2));
	gen_input(g, gp, "x", OQ_DT_FLOAT16, GEN_SHAPE(2));
	gen_node(g, gp, "Relu", "relu", "x", "y");
	gen_output(g, gp, "y", OQ_DT_FLOAT16, GEN_SHAPE(2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	memset(&eo, 0, sizeof eo);
	eo.threads = 1;
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "'x' is listed twice"), "message: %s", d.msg);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
}
