/*
 * test_control.c - If, Loop and Scan (subgraphs, outer-scope values,
 * stacking axes and directions) and the recurrent cells LSTM, GRU and RNN
 * on hand-computed cases, plus the BLAS path of the recurrent kernels
 * against their plain-loop reference.
 *
 * Bodies use Identity and Add (element-wise family); the recurrent cases
 * pick identity-like activations (Relu on positive values, Affine with its
 * defaults alpha 1, beta 0) so every expected value is exact arithmetic,
 * worked out in the comments from the ONNX equations (docs/Operators.md).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/rnn.h"

/* ------------------------------------------------------------------ helpers */

#define MAXIO 4

/* A model under construction plus the float inputs to feed it. */
typedef struct tcase {
	gen_model *m;
	Onnx__GraphProto *g;
	oq_rt in[MAXIO];
	size_t n_in;
} tcase;

static void tc_start(tcase *t, int64_t opset)
{
	memset(t, 0, sizeof *t);
	t->m = gen_new(8);
	gen_opset(t->m, "", opset);
	t->g = gen_graph(t->m);
}

/* Declares a float graph input and the values fed to it. */
static void tc_input(tcase *t, const char *name, int rank, const int64_t *dims, const float *v)
{
	gen_input(t->m, t->g, name, OQ_DT_FLOAT, rank, dims);
	cr_assert_eq(oq_rt_alloc(&t->in[t->n_in], OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(t->in[t->n_in].data, v, t->in[t->n_in].nbytes);
	t->n_in++;
}

/* Runs the model; outputs receive n_out owned tensors. Returns the status. */
static int tc_run(tcase *t, oq_rt *out, size_t n_out, oq_diag *d)
{
	oq_model *mm = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 2};
	int rc;

	oq_diag_init(d);
	memset(out, 0, n_out * sizeof *out);
	cr_assert_eq(gen_load(t->m, &mm, d), OQ_OK, "load: %s", d->msg);
	if (!(rc = oq_exec_new(mm, &o, &e, d)))
		rc = oq_exec_run(e, t->in, t->n_in, out, n_out, d);
	oq_exec_free(e);
	oq_model_free(mm);
	gen_free(t->m);
	for (size_t i = 0; i < t->n_in; i++)
		oq_rt_release(&t->in[i]);
	return rc;
}

static void expect_vals(const oq_rt *t, int rank, const int64_t *dims, const double *want,
                        double tol)
{
	cr_assert_eq(t->rank, rank, "rank %d, want %d", t->rank, rank);
	for (int i = 0; i < rank; i++)
		cr_assert_eq(t->dims[i], dims[i], "dim %d is %lld, want %lld", i,
		             (long long)t->dims[i], (long long)dims[i]);
	for (size_t i = 0; i < t->nelem; i++)
		cr_expect(fabs(oq_rt_get(t, i) - want[i]) <= tol,
		          "element %zu: got %.9g, want %.9g", i, oq_rt_get(t, i), want[i]);
}

static void set_strings(gen_model *m, Onnx__NodeProto *n, const char *name, size_t count,
                        const char *const *s)
{
	Onnx__AttributeProto *a = gen_attr(m, n, name, OQ_ATTR_STRINGS);
	static ProtobufCBinaryData buf[8][8];
	static int slot;
	ProtobufCBinaryData *b = buf[slot++ % 8];
	for (size_t i = 0; i < count; i++) {
		b[i].data = (uint8_t *)s[i];
		b[i].len = strlen(s[i]);
	}
	a->strings = b;
	a->n_strings = count;
}

/* ---------------------------------------------------------------------- If */

/* then: Identity(a) with a [2]; else: Identity(b) with b [3] - the branches differ in shape. */
static void if_case(int cond, const double *want, int64_t len)
{
	tcase t;
	Onnx__NodeProto *n;
	Onnx__GraphProto *br;
	oq_rt out[1];
	oq_diag d;

	tc_start(&t, 11);
	gen_init(t.m, t.g, "c", OQ_DT_BOOL, 0, NULL, GEN_VALS(cond));
	gen_init(t.m, t.g, "a", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(1, 2));
	gen_init(t.m, t.g, "b", OQ_DT_FLOAT, GEN_SHAPE(3), GEN_VALS(7, 8, 9));
	n = gen_node(t.m, t.g, "If", "if", "c", "y");
	br = gen_attr_graph(t.m, n, "then_branch", "then");
	gen_node(t.m, br, "Identity", "ta", "a", "ya");
	gen_output(t.m, br, "ya", OQ_DT_FLOAT, GEN_SHAPE(2));
	br = gen_attr_graph(t.m, n, "else_branch", "else");
	gen_node(t.m, br, "Identity", "tb", "b", "yb");
	gen_output(t.m, br, "yb", OQ_DT_FLOAT, GEN_SHAPE(3));
	gen_output(t.m, t.g, "y", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(tc_run(&t, out, 1, &d), OQ_OK, "%s", d.msg);
	expect_vals(&out[0], 1, &len, want, 0);
	oq_rt_release(&out[0]);
}

Test(control, if_branches_with_different_shapes)
{
	if_case(1, (const double[]){1, 2}, 2);
	if_case(0, (const double[]){7, 8, 9}, 3);
}

/* -------------------------------------------------------------------- Loop */

/*
 * Loop(M, "", v0 = {1}) with body v = Add(v_in, k) (k = {1} from the outer
 * scope), cond passed through, scan output = v. M = 3: v = 2, 3, 4, so the
 * final v is {4} and the scan output [3, 1] = {2, 3, 4}. M = 0: v stays {1},
 * the scan output is [0, 1].
 */
static void loop_case(int64_t trips, int with_cond)
{
	tcase t;
	Onnx__NodeProto *n;
	Onnx__GraphProto *b;
	oq_rt out[2];
	oq_diag d;

	tc_start(&t, 11);
	gen_init(t.m, t.g, "M", OQ_DT_INT64, 0, NULL, GEN_VALS((double)trips));
	gen_init(t.m, t.g, "cond", OQ_DT_BOOL, 0, NULL, GEN_VALS(1));
	gen_init(t.m, t.g, "v0", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	gen_init(t.m, t.g, "k", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	n = gen_node(t.m, t.g, "Loop", "loop", with_cond ? "M,cond,v0" : "M,,v0", "vf,scan");
	b = gen_attr_graph(t.m, n, "body", "body");
	gen_input(t.m, b, "i", OQ_DT_INT64, 0, NULL);
	gen_input(t.m, b, "c_in", OQ_DT_BOOL, 0, NULL);
	gen_input(t.m, b, "v_in", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_node(t.m, b, "Identity", "c", "c_in", "c_out");
	gen_node(t.m, b, "Add", "add", "v_in,k", "v_out");
	gen_node(t.m, b, "Identity", "s", "v_out", "s_out");
	gen_output(t.m, b, "c_out", OQ_DT_BOOL, 0, NULL);
	gen_output(t.m, b, "v_out", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_output(t.m, b, "s_out", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_output(t.m, t.g, "vf", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "scan", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(tc_run(&t, out, 2, &d), OQ_OK, "%s", d.msg);
	if (trips == 3) {
		expect_vals(&out[0], 1, (const int64_t[]){1}, (const double[]){4}, 0);
		expect_vals(&out[1], 2, (const int64_t[]){3, 1}, (const double[]){2, 3, 4}, 0);
	} else {
		expect_vals(&out[0], 1, (const int64_t[]){1}, (const double[]){1}, 0);
		expect_vals(&out[1], 2, (const int64_t[]){0, 1}, NULL, 0);
	}
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
}

Test(control, loop_trip_count_outer_scope_and_scan_output)
{
	loop_case(3, 0);
	loop_case(3, 1);
	loop_case(0, 0);
}

/* -------------------------------------------------------------------- Scan */

/*
 * Running sum: state s0 = {0, 0}, scan input x [3, 2] = {1,2, 3,4, 5,6},
 * body s = Add(s_in, x_t), y_t = Identity(s). Forward: y = {1,2, 4,6, 9,12},
 * final {9, 12}. Reversed input: steps take rows 2, 1, 0: y = {5,6, 8,10,
 * 9,12}; with the output reversed too, row t goes to position 2 - t:
 * {9,12, 8,10, 5,6}. x transposed ([2, 3], scan_input_axes 1) gives the
 * forward result; scan_output_axes 1 stacks y as [2, 3] = {1,4,9, 2,6,12}.
 */
static void scan_case(int in_dir, int out_dir, int in_axis, int out_axis, const double *want_y,
                      const int64_t *ydims)
{
	tcase t;
	Onnx__NodeProto *n;
	Onnx__GraphProto *b;
	oq_rt out[2];
	oq_diag d;
	const float xr[6] = {1, 2, 3, 4, 5, 6}, xt[6] = {1, 3, 5, 2, 4, 6};

	tc_start(&t, 9);
	gen_init(t.m, t.g, "s0", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0, 0));
	if (in_axis)
		tc_input(&t, "x", GEN_SHAPE(2, 3), xt);
	else
		tc_input(&t, "x", GEN_SHAPE(3, 2), xr);
	n = gen_node(t.m, t.g, "Scan", "scan", "s0,x", "sf,y");
	gen_attr_int(t.m, n, "num_scan_inputs", 1);
	gen_attr_ints(t.m, n, "scan_input_directions", 1, (const int64_t[]){in_dir});
	gen_attr_ints(t.m, n, "scan_output_directions", 1, (const int64_t[]){out_dir});
	gen_attr_ints(t.m, n, "scan_input_axes", 1, (const int64_t[]){in_axis});
	gen_attr_ints(t.m, n, "scan_output_axes", 1, (const int64_t[]){out_axis});
	b = gen_attr_graph(t.m, n, "body", "body");
	gen_input(t.m, b, "s_in", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_input(t.m, b, "x_t", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_node(t.m, b, "Add", "add", "s_in,x_t", "s_out");
	gen_node(t.m, b, "Identity", "id", "s_out", "y_t");
	gen_output(t.m, b, "s_out", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_output(t.m, b, "y_t", OQ_DT_FLOAT, GEN_SHAPE(2));
	gen_output(t.m, t.g, "sf", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "y", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(tc_run(&t, out, 2, &d), OQ_OK, "%s", d.msg);
	expect_vals(&out[0], 1, (const int64_t[]){2}, (const double[]){9, 12}, 0);
	expect_vals(&out[1], 2, ydims, want_y, 0);
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
}

Test(control, scan_axes_and_directions)
{
	scan_case(0, 0, 0, 0, (const double[]){1, 2, 4, 6, 9, 12}, (const int64_t[]){3, 2});
	scan_case(1, 0, 0, 0, (const double[]){5, 6, 8, 10, 9, 12}, (const int64_t[]){3, 2});
	scan_case(1, 1, 0, 0, (const double[]){9, 12, 8, 10, 5, 6}, (const int64_t[]){3, 2});
	scan_case(0, 0, 1, 0, (const double[]){1, 2, 4, 6, 9, 12}, (const int64_t[]){3, 2});
	scan_case(0, 0, 0, 1, (const double[]){1, 4, 9, 2, 6, 12}, (const int64_t[]){2, 3});
}

/* --------------------------------------------------------------------- RNN */

/*
 * RNN, Relu, H = I = 1, W = 2, R = 0.5, Wb = 1, Rb = 0; X (S = 3, B = 2):
 * batch 0 {1, 2, 3}, batch 1 {-1, 1, 0}; sequence_lens {3, 2}.
 * forward  b0: 3, 6.5, 10.25 (relu(2x + 0.5h + 1)); b1: relu(-1) = 0, 3, (stopped) 0
 * reverse  b0 from t = 2: 7, 8.5, 7.25 at t = 2, 1, 0; b1 from t = 1: 3, relu(-2 + 1.5 + 1) = 0.5
 */
static const double rnn_fwd_y[6] = {3, 0, 6.5, 3, 10.25, 0};
static const double rnn_rev_y[6] = {7.25, 0.5, 8.5, 3, 7, 0};

static void rnn_case(const char *direction, int layout, oq_rt *out)
{
	tcase t;
	Onnx__NodeProto *n;
	int bi = !strcmp(direction, "bidirectional");
	int64_t D = bi ? 2 : 1;
	const char *acts[2] = {"Relu", "Relu"};
	const float x0[6] = {1, -1, 2, 1, 3, 0},
	            x1[6] = {1, 2, 3, -1, 1, 0}; /* [S, B, 1] and [B, S, 1] */
	oq_diag d;

	tc_start(&t, 14);
	if (layout)
		tc_input(&t, "X", GEN_SHAPE(2, 3, 1), x1);
	else
		tc_input(&t, "X", GEN_SHAPE(3, 2, 1), x0);
	gen_init(t.m, t.g, "W", OQ_DT_FLOAT, 3, (const int64_t[]){D, 1, 1}, GEN_VALS(2, 2));
	gen_init(t.m, t.g, "R", OQ_DT_FLOAT, 3, (const int64_t[]){D, 1, 1}, GEN_VALS(0.5, 0.5));
	gen_init(t.m, t.g, "B", OQ_DT_FLOAT, 2, (const int64_t[]){D, 2}, GEN_VALS(1, 0, 1, 0));
	gen_init(t.m, t.g, "L", OQ_DT_INT32, GEN_SHAPE(2), GEN_VALS(3, 2));
	n = gen_node(t.m, t.g, "RNN", "rnn", "X,W,R,B,L", "Y,Yh");
	gen_attr_int(t.m, n, "hidden_size", 1);
	gen_attr_str(t.m, n, "direction", direction);
	gen_attr_int(t.m, n, "layout", layout);
	set_strings(t.m, n, "activations", (size_t)D, acts);
	gen_output(t.m, t.g, "Y", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "Yh", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(tc_run(&t, out, 2, &d), OQ_OK, "%s", d.msg);
}

Test(rnn, relu_forward_reverse_seq_lens)
{
	oq_rt out[2];
	rnn_case("forward", 0, out);
	expect_vals(&out[0], 4, (const int64_t[]){3, 1, 2, 1}, rnn_fwd_y, 0);
	expect_vals(&out[1], 3, (const int64_t[]){1, 2, 1}, (const double[]){10.25, 3}, 0);
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
	rnn_case("reverse", 0, out);
	expect_vals(&out[0], 4, (const int64_t[]){3, 1, 2, 1}, rnn_rev_y, 0);
	expect_vals(&out[1], 3, (const int64_t[]){1, 2, 1}, (const double[]){7.25, 0.5}, 0);
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
}

Test(rnn, bidirectional_and_layout)
{
	oq_rt out[2];
	/* [S, D, B, H]: per step the forward pair then the reverse pair */
	const double y[12] = {3, 0, 7.25, 0.5, 6.5, 3, 8.5, 3, 10.25, 0, 7, 0};
	/* layout 1: [B, S, D, H] */
	const double yl[12] = {3, 7.25, 6.5, 8.5, 10.25, 7, 0, 0.5, 3, 3, 0, 0};
	rnn_case("bidirectional", 0, out);
	expect_vals(&out[0], 4, (const int64_t[]){3, 2, 2, 1}, y, 0);
	expect_vals(&out[1], 3, (const int64_t[]){2, 2, 1}, (const double[]){10.25, 3, 7.25, 0.5},
	            0);
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
	rnn_case("bidirectional", 1, out);
	expect_vals(&out[0], 4, (const int64_t[]){2, 3, 2, 1}, yl, 0);
	expect_vals(&out[1], 3, (const int64_t[]){2, 2, 1}, (const double[]){10.25, 7.25, 3, 0.5},
	            0);
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
}

/*
 * GRU with identity activations (Affine, alpha 1, beta 0), H = I = 1,
 * W = {z 0.25, r 1, h 2}, R = {0, 0.5, 1}, B = {Wb 0 0 0, Rb 0 0 1}, X = {1, 2} for
 * both entries of a batch of 2 (so a row-stride slip between entries shows).
 * t0: z = 0.25, r = 1, h = 2 + 1 = 3, H = 0.75 * 3 = 2.25 (either mode, H0 = 0)
 * t1: z = 0.5, r = 2 + 0.5 * 2.25 = 3.125
 *   lbr 0: h = 4 + (3.125 * 2.25) * 1 + 1 = 12.03125, H = 0.5 h + 0.5 * 2.25 = 7.140625
 *   lbr 1: h = 4 + 3.125 * (2.25 * 1 + 1) = 14.15625, H = 8.203125
 */
static void gru_case(int lbr, double want_t1)
{
	tcase t;
	Onnx__NodeProto *n;
	const char *acts[2] = {"Affine", "Affine"};
	oq_rt out[2];
	oq_diag d;

	tc_start(&t, 14);
	tc_input(&t, "X", GEN_SHAPE(2, 2, 1), (const float[]){1, 1, 2, 2});
	gen_init(t.m, t.g, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 1), GEN_VALS(0.25, 1, 2));
	gen_init(t.m, t.g, "R", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 1), GEN_VALS(0, 0.5, 1));
	gen_init(t.m, t.g, "B", OQ_DT_FLOAT, GEN_SHAPE(1, 6), GEN_VALS(0, 0, 0, 0, 0, 1));
	n = gen_node(t.m, t.g, "GRU", "gru", "X,W,R,B", "Y,Yh");
	gen_attr_int(t.m, n, "hidden_size", 1);
	gen_attr_int(t.m, n, "linear_before_reset", lbr);
	set_strings(t.m, n, "activations", 2, acts);
	gen_output(t.m, t.g, "Y", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "Yh", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(tc_run(&t, out, 2, &d), OQ_OK, "%s", d.msg);
	expect_vals(&out[0], 4, (const int64_t[]){2, 1, 2, 1},
	            (const double[]){2.25, 2.25, want_t1, want_t1}, 1e-6);
	expect_vals(&out[1], 3, (const int64_t[]){1, 2, 1}, (const double[]){want_t1, want_t1},
	            1e-6);
	oq_rt_release(&out[0]);
	oq_rt_release(&out[1]);
}

Test(rnn, gru_linear_before_reset)
{
	gru_case(0, 7.140625);
	gru_case(1, 8.203125);
}

/*
 * LSTM with identity activations, H = I = 1, W = {i 1, o 0.5, f 0.5, c 2},
 * R = 0, B = 0, peepholes P = {i 0.5, o 0.25, f 0}, initial_c = 1, X = {1, 2}.
 * t0: i = 1 + 0.5 * 1 = 1.5, f = 0.5, c~ = 2, C = 0.5 + 3 = 3.5,
 *     o = 0.5 + 0.25 * 3.5 = 1.375, H = 1.375 * 3.5 = 4.8125
 * t1: i = 2 + 1.75 = 3.75, f = 1, c~ = 4, C = 3.5 + 15 = 18.5,
 *     o = 1 + 4.625 = 5.625, H = 104.0625
 * clip 3: t0 unchanged; t1: i -> 3, c~ -> 3, C = 3.5 + 9 = 12.5, o = 1 + 3.125 -> 3, H = 37.5
 * input_forget: t0 f = 1 - 1.5 = -0.5, C = -0.5 + 3 = 2.5, o = 0.5 + 0.625 = 1.125, H = 2.8125
 */
static void lstm_case(float clip, int input_forget, const double *y, double yc)
{
	tcase t;
	Onnx__NodeProto *n;
	const char *acts[3] = {"Affine", "Affine", "Affine"};
	oq_rt out[3];
	oq_diag d;

	tc_start(&t, 14);
	tc_input(&t, "X", GEN_SHAPE(2, 1, 1), (const float[]){1, 2});
	gen_init(t.m, t.g, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 1), GEN_VALS(1, 0.5, 0.5, 2));
	gen_init(t.m, t.g, "R", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 1), GEN_VALS(0, 0, 0, 0));
	gen_init(t.m, t.g, "C0", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1), GEN_VALS(1));
	gen_init(t.m, t.g, "P", OQ_DT_FLOAT, GEN_SHAPE(1, 3), GEN_VALS(0.5, 0.25, 0));
	n = gen_node(t.m, t.g, "LSTM", "lstm", "X,W,R,,,,C0,P", "Y,Yh,Yc");
	gen_attr_int(t.m, n, "hidden_size", 1);
	if (clip > 0)
		gen_attr_float(t.m, n, "clip", clip);
	gen_attr_int(t.m, n, "input_forget", input_forget);
	set_strings(t.m, n, "activations", 3, acts);
	gen_output(t.m, t.g, "Y", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "Yh", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "Yc", OQ_DT_FLOAT, -1, NULL);
	cr_assert_eq(tc_run(&t, out, 3, &d), OQ_OK, "%s", d.msg);
	expect_vals(&out[0], 4, (const int64_t[]){2, 1, 1, 1}, y, 1e-6);
	if (!input_forget) {
		expect_vals(&out[1], 3, (const int64_t[]){1, 1, 1}, y + 1, 1e-6);
		expect_vals(&out[2], 3, (const int64_t[]){1, 1, 1}, &yc, 1e-6);
	}
	for (int i = 0; i < 3; i++)
		oq_rt_release(&out[i]);
}

Test(rnn, lstm_peepholes_clip_input_forget)
{
	lstm_case(0, 0, (const double[]){4.8125, 104.0625}, 18.5);
	lstm_case(3, 0, (const double[]){4.8125, 37.5}, 12.5);
	/* input_forget: one step (t0 above) */
	{
		tcase t;
		Onnx__NodeProto *n;
		const char *acts[3] = {"Affine", "Affine", "Affine"};
		oq_rt out[3];
		oq_diag d;
		tc_start(&t, 14);
		tc_input(&t, "X", GEN_SHAPE(1, 1, 1), (const float[]){1});
		gen_init(t.m, t.g, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 1), GEN_VALS(1, 0.5, 0.5, 2));
		gen_init(t.m, t.g, "R", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 1), GEN_VALS(0, 0, 0, 0));
		gen_init(t.m, t.g, "C0", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1), GEN_VALS(1));
		gen_init(t.m, t.g, "P", OQ_DT_FLOAT, GEN_SHAPE(1, 3), GEN_VALS(0.5, 0.25, 0));
		n = gen_node(t.m, t.g, "LSTM", "lstm", "X,W,R,,,,C0,P", "Y,Yh,Yc");
		gen_attr_int(t.m, n, "hidden_size", 1);
		gen_attr_int(t.m, n, "input_forget", 1);
		set_strings(t.m, n, "activations", 3, acts);
		gen_output(t.m, t.g, "Y", OQ_DT_FLOAT, -1, NULL);
		gen_output(t.m, t.g, "Yh", OQ_DT_FLOAT, -1, NULL);
		gen_output(t.m, t.g, "Yc", OQ_DT_FLOAT, -1, NULL);
		cr_assert_eq(tc_run(&t, out, 3, &d), OQ_OK, "%s", d.msg);
		expect_vals(&out[1], 3, (const int64_t[]){1, 1, 1}, (const double[]){2.8125}, 1e-6);
		expect_vals(&out[2], 3, (const int64_t[]){1, 1, 1}, (const double[]){2.5}, 1e-6);
		for (int i = 0; i < 3; i++)
			oq_rt_release(&out[i]);
	}
}

/* BLAS path vs plain-loop reference on a random bidirectional LSTM with ragged sequence lengths. */
static void run_random_lstm(int ref, oq_rt *out)
{
	enum { S = 5, B = 3, I = 7, H = 6 };
	static double w[2 * 4 * H * I], r[2 * 4 * H * H], bias[2 * 8 * H], p[2 * 3 * H];
	static float x[S * B * I];
	unsigned s = 7;
	tcase t;
	Onnx__NodeProto *n;
	oq_diag d;

#define RND() ((s = s * 1103515245u + 12345u), ((double)((s >> 8) & 0xffff) / 65536.0 - 0.5))
	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
		w[i] = RND();
	for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
		r[i] = RND();
	for (size_t i = 0; i < sizeof bias / sizeof bias[0]; i++)
		bias[i] = RND();
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		p[i] = RND();
	for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
		x[i] = (float)(4 * RND());
#undef RND
	tc_start(&t, 14);
	tc_input(&t, "X", GEN_SHAPE(S, B, I), x);
	gen_init(t.m, t.g, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 4 * H, I), w);
	gen_init(t.m, t.g, "R", OQ_DT_FLOAT, GEN_SHAPE(2, 4 * H, H), r);
	gen_init(t.m, t.g, "B", OQ_DT_FLOAT, GEN_SHAPE(2, 8 * H), bias);
	gen_init(t.m, t.g, "L", OQ_DT_INT32, GEN_SHAPE(B), GEN_VALS(5, 2, 4));
	gen_init(t.m, t.g, "P", OQ_DT_FLOAT, GEN_SHAPE(2, 3 * H), p);
	n = gen_node(t.m, t.g, "LSTM", "lstm", "X,W,R,B,L,,,P", "Y,Yh,Yc");
	gen_attr_int(t.m, n, "hidden_size", H);
	gen_attr_str(t.m, n, "direction", "bidirectional");
	gen_output(t.m, t.g, "Y", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "Yh", OQ_DT_FLOAT, -1, NULL);
	gen_output(t.m, t.g, "Yc", OQ_DT_FLOAT, -1, NULL);
	oq_rnn_use_reference(ref);
	cr_assert_eq(tc_run(&t, out, 3, &d), OQ_OK, "%s", d.msg);
	oq_rnn_use_reference(0);
}

Test(rnn, blas_matches_reference)
{
	oq_rt a[3], b[3];
	run_random_lstm(0, a);
	run_random_lstm(1, b);
	for (int k = 0; k < 3; k++) {
		cr_assert_eq(a[k].nelem, b[k].nelem);
		for (size_t i = 0; i < a[k].nelem; i++)
			cr_expect(fabs(oq_rt_get(&a[k], i) - oq_rt_get(&b[k], i)) <= 1e-5,
			          "output %d element %zu: %g vs %g", k, i, oq_rt_get(&a[k], i),
			          oq_rt_get(&b[k], i));
		oq_rt_release(&a[k]);
		oq_rt_release(&b[k]);
	}
}
