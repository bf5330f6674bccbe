/*
 * test_shape.c - unit tests of the 'shape' kernel family (calib/kernels/shape/shape.c,
 * index.c, resize.c, calib/kernels/shape/util.c).
 *
 * Each test builds a one-node model with gen_model (inputs as initializers),
 * runs it through the executor and compares with values worked out by hand
 * in the comments (numpy slicing rules, the ONNX Resize formulas), or with a
 * naive per-element reference written here for the strided copy engine.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/shape/util.h"

/* One node under test. */
typedef struct tc {
	gen_model *g;
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	oq_model *m;
	oq_rt out[4];
	size_t n_out;
	oq_diag d;
} tc;

static void tc_new(tc *t, int opset, const char *op, const char *inputs, const char *outputs)
{
	memset(t, 0, sizeof *t);
	t->g = gen_new(8);
	gen_opset(t->g, "", opset);
	t->mg = gen_graph(t->g);
	t->n = gen_node(t->g, t->mg, op, "n", inputs, outputs);
	oq_diag_init(&t->d);
}

/* Adds output `name` of dtype (unknown shape). */
static void tc_out(tc *t, const char *name, int dtype)
{
	gen_output(t->g, t->mg, name, dtype, -1, NULL);
	t->n_out++;
}

/* Runs with `threads`; returns the executor status. */
static int tc_run_threads(tc *t, int threads)
{
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = threads};
	int rc = gen_load(t->g, &t->m, &t->d);
	if (rc)
		return rc;
	if ((rc = oq_exec_new(t->m, &o, &e, &t->d)))
		return rc;
	rc = oq_exec_run(e, NULL, 0, t->out, t->n_out, &t->d);
	oq_exec_free(e);
	return rc;
}

static int tc_run(tc *t)
{
	return tc_run_threads(t, 1);
}

static void tc_free(tc *t)
{
	for (size_t i = 0; i < 4; i++)
		oq_rt_release(&t->out[i]);
	oq_model_free(t->m);
	gen_free(t->g);
}

static void expect_shape(const oq_rt *r, int rank, const int64_t *dims)
{
	cr_assert_eq(r->rank, rank, "rank %d, want %d", r->rank, rank);
	for (int i = 0; i < rank; i++)
		cr_assert_eq(r->dims[i], dims[i], "dim %d is %lld, want %lld", i, (long long)r->dims[i],
			     (long long)dims[i]);
}

static void expect_vals(const oq_rt *r, size_t n, const double *want, double tol)
{
	cr_assert_eq(r->nelem, n, "%zu elements, want %zu", r->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_assert(fabs(oq_rt_get(r, i) - want[i]) <= tol, "element %zu is %.9g, want %.9g", i,
			  oq_rt_get(r, i), want[i]);
}

#define SHAPE(...) GEN_SHAPE(__VA_ARGS__)
#define VALS(...) GEN_VALS(__VA_ARGS__)
#define NV(...) (sizeof((const double[]){__VA_ARGS__}) / sizeof(double)), GEN_VALS(__VA_ARGS__)

static const double iota24[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
				12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};

/* ------------------------------------------------------------------ Slice */

Test(slice, negative_step)
{
	/* x = 0..9; starts 8, ends 1, step -3 -> 8, 5, 2 */
	tc t;
	tc_new(&t, 13, "Slice", "x,s,e,a,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(10), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(1), VALS(8));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(1), VALS(1));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(1), VALS(-3));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(8, 5, 2), 0);
	tc_free(&t);
}

Test(slice, negative_step_clamped)
{
	/* start 20 clamps to 9, end -100 -> -90 clamps to -1 (before 0), step -4: 9, 5, 1 */
	tc t;
	tc_new(&t, 13, "Slice", "x,s,e,a,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(10), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(1), VALS(20));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(1), VALS(-100));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(1), VALS(-4));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(9, 5, 1), 0);
	tc_free(&t);
}

Test(slice, two_axes_reversed)
{
	/* x 3x4 = 0..11; rows 2..0 (end -4 -> -1), cols 3, 1 (step -2, end 0 exclusive) */
	tc t;
	tc_new(&t, 13, "Slice", "x,s,e,a,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_INT32, SHAPE(3, 4), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(2), VALS(-1, 3));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(2), VALS(-4, 0));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(2), VALS(0, -1));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(2), VALS(-1, -2));
	tc_out(&t, "y", OQ_DT_INT32);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(3, 2));
	expect_vals(&t.out[0], NV(11, 9, 7, 5, 3, 1), 0);
	tc_free(&t);
}

Test(slice, empty_when_start_past_end)
{
	/* step 1 with start 7 > end 3: zero elements, no error */
	tc t;
	tc_new(&t, 13, "Slice", "x,s,e", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(10), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(1), VALS(7));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(1), VALS(3));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(0));
	tc_free(&t);
}

Test(slice, opset1_attributes)
{
	/* x 2x3 = 0..5; axes [1], starts [1], ends [1000] -> cols 1..2 */
	tc t;
	tc_new(&t, 1, "Slice", "x", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3), iota24);
	gen_attr_ints(t.g, t.n, "axes", 1, (const int64_t[]){1});
	gen_attr_ints(t.g, t.n, "starts", 1, (const int64_t[]){1});
	gen_attr_ints(t.g, t.n, "ends", 1, (const int64_t[]){1000});
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(2, 2));
	expect_vals(&t.out[0], NV(1, 2, 4, 5), 0);
	tc_free(&t);
}

Test(slice, zero_step_is_an_error)
{
	tc t;
	tc_new(&t, 13, "Slice", "x,s,e,a,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(10), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(1), VALS(5));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(1), VALS(0));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	cr_assert(strstr(t.d.msg, "step"), "%s", t.d.msg);
	tc_free(&t);
}

/* ---------------------------------------------------------------- Reshape */

Test(reshape, zero_copies_and_minus_one_infers)
{
	/* x 2x3x4: [0, -1] -> [2, 12]; 0 copies dim 0, -1 = 24 / 2 */
	tc t;
	tc_new(&t, 13, "Reshape", "x,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3, 4), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(2), VALS(0, -1));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(2, 12));
	expect_vals(&t.out[0], 24, iota24, 0);
	tc_free(&t);
}

Test(reshape, minus_one_first)
{
	/* x 2x3x4: [-1, 0, 2]: 0 copies dim 1 (3), -1 = 24 / (3 * 2) = 4 */
	tc t;
	tc_new(&t, 13, "Reshape", "x,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3, 4), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(3), VALS(-1, 0, 2));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(4, 3, 2));
	tc_free(&t);
}

Test(reshape, allowzero_keeps_zero)
{
	/* x [2, 0]; shape [0, 4] with allowzero=1 is literally [0, 4] */
	tc t;
	tc_new(&t, 14, "Reshape", "x,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 0), NULL);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(2), VALS(0, 4));
	gen_attr_int(t.g, t.n, "allowzero", 1);
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(0, 4));
	tc_free(&t);
}

Test(reshape, without_allowzero_zero_copies)
{
	/* same, allowzero=0: the 0 copies dim 0 (2) -> [2, 4] needs 8 elements, x has 0 */
	tc t;
	tc_new(&t, 14, "Reshape", "x,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 0), NULL);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(2), VALS(0, 4));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	tc_free(&t);
}

Test(reshape, two_minus_ones_is_an_error)
{
	tc t;
	tc_new(&t, 13, "Reshape", "x,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3, 4), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(2), VALS(-1, -1));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	cr_assert(strstr(t.d.msg, "more than one -1"), "%s", t.d.msg);
	tc_free(&t);
}

/* ----------------------------------------------------------------- Resize */

/* Resize-13 of a [1, n] tensor to sizes [1, m] with the given modes. */
static void resize_1d(tc *t, const double *x, int64_t n, int64_t m, const char *mode, const char *ctm,
		      const char *nearest)
{
	tc_new(t, 13, "Resize", "x,,,sz", "y");
	gen_init(t->g, t->mg, "x", OQ_DT_FLOAT, 2, (const int64_t[]){1, n}, x);
	gen_init(t->g, t->mg, "sz", OQ_DT_INT64, SHAPE(2), (const double[]){1, (double)m});
	gen_attr_str(t->g, t->n, "mode", mode);
	gen_attr_str(t->g, t->n, "coordinate_transformation_mode", ctm);
	if (nearest)
		gen_attr_str(t->g, t->n, "nearest_mode", nearest);
	tc_out(t, "y", OQ_DT_FLOAT);
}

static const double x4[] = {10, 20, 30, 40};

Test(resize, nearest_modes_asymmetric)
{
	/* W 4 -> 6, scale 1.5, asymmetric x_ori = x / 1.5 = 0, .667, 1.333, 2, 2.667, 3.333 */
	static const struct {
		const char *mode;
		double want[6];
	} cases[] = {
		{"round_prefer_floor", {10, 20, 20, 30, 40, 40}}, /* 0 1 1 2 3 3 */
		{"round_prefer_ceil", {10, 20, 20, 30, 40, 40}},  /* no ties: same */
		{"floor", {10, 10, 20, 30, 30, 40}},              /* 0 0 1 2 2 3 */
		{"ceil", {10, 20, 30, 30, 40, 40}},               /* 0 1 2 2 3 4->3 */
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		tc t;
		resize_1d(&t, x4, 4, 6, "nearest", "asymmetric", cases[c].mode);
		cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
		expect_shape(&t.out[0], SHAPE(1, 6));
		expect_vals(&t.out[0], 6, cases[c].want, 0);
		tc_free(&t);
	}
}

Test(resize, nearest_ties)
{
	/* W 2 -> 4 asymmetric: x_ori = 0, 0.5, 1, 1.5; ties go down or up by mode */
	static const double x2[] = {10, 20};
	tc t;
	resize_1d(&t, x2, 2, 4, "nearest", "asymmetric", "round_prefer_floor");
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(10, 10, 20, 20), 0);
	tc_free(&t);
	resize_1d(&t, x2, 2, 4, "nearest", "asymmetric", "round_prefer_ceil");
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(10, 20, 20, 20), 0); /* 1.5 -> 2 clamps to the edge */
	tc_free(&t);
}

Test(resize, nearest_half_pixel_default)
{
	/* W 4 -> 2 (scale 0.5): x_ori = (x + .5) * 2 - .5 = 0.5, 2.5 -> round_prefer_floor 0, 2 */
	tc t;
	resize_1d(&t, x4, 4, 2, "nearest", "half_pixel", NULL);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(10, 30), 0);
	tc_free(&t);
}

Test(resize, linear_align_corners_2x2_to_4x4)
{
	/* x_ori = x * (2 - 1) / (4 - 1) on both axes; value = 1 + c/3 + 2 r/3 */
	tc t;
	double want[16];
	tc_new(&t, 13, "Resize", "x,,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(1, 1, 2, 2), VALS(1, 2, 3, 4));
	gen_init(t.g, t.mg, "s", OQ_DT_FLOAT, SHAPE(4), VALS(1, 1, 2, 2));
	gen_attr_str(t.g, t.n, "mode", "linear");
	gen_attr_str(t.g, t.n, "coordinate_transformation_mode", "align_corners");
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(1, 1, 4, 4));
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			want[r * 4 + c] = 1 + c / 3.0 + 2 * r / 3.0;
	expect_vals(&t.out[0], 16, want, 1e-6);
	tc_free(&t);
}

Test(resize, linear_half_pixel_edges_clamp)
{
	/* W 2 -> 4 half_pixel: x_ori = -0.25, 0.25, 0.75, 1.25; outside reads the edge:
	 * -0.25 -> taps (-1, 0) both 10; 0.25 -> 12.5; 0.75 -> 17.5; 1.25 -> taps (1, 2) both 20 */
	static const double x2[] = {10, 20};
	tc t;
	resize_1d(&t, x2, 2, 4, "linear", "half_pixel", NULL);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(10, 12.5, 17.5, 20), 1e-6);
	tc_free(&t);
}

Test(resize, scales_and_sizes_together_is_an_error)
{
	tc t;
	tc_new(&t, 13, "Resize", "x,,s,sz", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(1, 2), VALS(1, 2));
	gen_init(t.g, t.mg, "s", OQ_DT_FLOAT, SHAPE(2), VALS(1, 2));
	gen_init(t.g, t.mg, "sz", OQ_DT_INT64, SHAPE(2), VALS(1, 4));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	tc_free(&t);
}

Test(resize, upsample7_nearest_scales_attribute)
{
	/* Upsample-7 [1,2] by [1, 3]: floor(x / 3) -> 0 0 0 1 1 1 */
	tc t;
	tc_new(&t, 7, "Upsample", "x", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_INT64, SHAPE(1, 2), VALS(5, 7));
	{
		Onnx__AttributeProto *a = gen_attr(t.g, t.n, "scales", OQ_ATTR_FLOATS);
		static float sc[] = {1, 3};
		a->n_floats = 2;
		a->floats = sc;
	}
	tc_out(&t, "y", OQ_DT_INT64);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(1, 6));
	expect_vals(&t.out[0], NV(5, 5, 5, 7, 7, 7), 0);
	tc_free(&t);
}

/* ------------------------------------------------------- Split, Pad, misc */

Test(split, num_outputs_uneven_last_chunk)
{
	/* 7 elements, num_outputs 3 -> chunk ceil(7/3) = 3: [0 1 2] [3 4 5] [6] */
	tc t;
	tc_new(&t, 18, "Split", "x", "a,b,c");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(7), iota24);
	gen_attr_int(t.g, t.n, "num_outputs", 3);
	tc_out(&t, "a", OQ_DT_FLOAT);
	tc_out(&t, "b", OQ_DT_FLOAT);
	tc_out(&t, "c", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(0, 1, 2), 0);
	expect_vals(&t.out[1], NV(3, 4, 5), 0);
	expect_vals(&t.out[2], NV(6), 0);
	tc_free(&t);
}

Test(split, opset11_uneven_without_split_is_an_error)
{
	tc t;
	tc_new(&t, 11, "Split", "x", "a,b,c");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(7), iota24);
	tc_out(&t, "a", OQ_DT_FLOAT);
	tc_out(&t, "b", OQ_DT_FLOAT);
	tc_out(&t, "c", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	tc_free(&t);
}

/* Pad-19 of [1, 2, 3] by pads (2, 4) in `mode`. */
static void pad_1d(const char *mode, const double *want)
{
	tc t;
	tc_new(&t, 19, "Pad", "x,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(3), VALS(1, 2, 3));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(2), VALS(2, 4));
	gen_attr_str(t.g, t.n, "mode", mode);
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], 9, want, 0);
	tc_free(&t);
}

Test(pad, modes)
{
	pad_1d("constant", VALS(0, 0, 1, 2, 3, 0, 0, 0, 0));
	pad_1d("edge", VALS(1, 1, 1, 2, 3, 3, 3, 3, 3));
	pad_1d("reflect", VALS(3, 2, 1, 2, 3, 2, 1, 2, 3)); /* numpy.pad reflect */
	pad_1d("wrap", VALS(2, 3, 1, 2, 3, 1, 2, 3, 1));
}

Test(pad, negative_pads_crop_and_constant_value)
{
	/* pads (-1, 1), value 9: drop the first, append one 9 */
	tc t;
	tc_new(&t, 13, "Pad", "x,p,v", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_INT32, SHAPE(3), VALS(1, 2, 3));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(2), VALS(-1, 1));
	gen_init(t.g, t.mg, "v", OQ_DT_INT32, 0, NULL, VALS(9));
	tc_out(&t, "y", OQ_DT_INT32);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(2, 3, 9), 0);
	tc_free(&t);
}

Test(pad, opset2_attribute_and_axes18)
{
	/* Pad-2: pads attribute on 2x2, value 7: [[7,7,7],[1,2,7],[3,4,7]] with pads (1,0,0,1) */
	tc t;
	tc_new(&t, 2, "Pad", "x", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 2, 3, 4));
	gen_attr_ints(t.g, t.n, "pads", 4, (const int64_t[]){1, 0, 0, 1});
	gen_attr_float(t.g, t.n, "value", 7);
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(3, 3));
	expect_vals(&t.out[0], NV(7, 7, 7, 1, 2, 7, 3, 4, 7), 0);
	tc_free(&t);

	/* Pad-18 with axes [-1]: only the last axis, edge: [[1,1,2],[3,3,4]] */
	tc_new(&t, 18, "Pad", "x,p,,a", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 2), VALS(1, 2, 3, 4));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(2), VALS(1, 0));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(-1));
	gen_attr_str(t.g, t.n, "mode", "edge");
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(2, 3));
	expect_vals(&t.out[0], NV(1, 1, 2, 3, 3, 4), 0);
	tc_free(&t);
}

Test(unsqueeze, axes_attribute_before_13_and_input_after)
{
	tc t;
	tc_new(&t, 11, "Unsqueeze", "x", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3), iota24);
	gen_attr_ints(t.g, t.n, "axes", 2, (const int64_t[]){0, -1});
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(1, 2, 3, 1));
	tc_free(&t);

	tc_new(&t, 13, "Squeeze", "x,a", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(1, 2, 1, 3), iota24);
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(2));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(1, 2, 3));
	tc_free(&t);
}

Test(gather, nd_batch_dims_and_negative_indices)
{
	/* GatherND batch_dims 1: data [[0,1],[2,3]], indices [[1],[0]] -> [data[0][1], data[1][0]] = [1, 2] */
	tc t;
	tc_new(&t, 13, "GatherND", "x,i", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 2), iota24);
	gen_init(t.g, t.mg, "i", OQ_DT_INT64, SHAPE(2, 1), VALS(1, 0));
	gen_attr_int(t.g, t.n, "batch_dims", 1);
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(2));
	expect_vals(&t.out[0], NV(1, 2), 0);
	tc_free(&t);

	/* Gather axis 1 with -1: last column of 2x3 -> [2, 5]; out of range is an error */
	tc_new(&t, 13, "Gather", "x,i", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3), iota24);
	gen_init(t.g, t.mg, "i", OQ_DT_INT64, SHAPE(1), VALS(-1));
	gen_attr_int(t.g, t.n, "axis", 1);
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(2, 1));
	expect_vals(&t.out[0], NV(2, 5), 0);
	tc_free(&t);

	tc_new(&t, 13, "Gather", "x,i", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3), iota24);
	gen_init(t.g, t.mg, "i", OQ_DT_INT64, SHAPE(1), VALS(3));
	gen_attr_int(t.g, t.n, "axis", 1);
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	tc_free(&t);
}

Test(scatter, nd_reduction_max_opset18)
{
	/* data [1, 5, 3], indices [[1],[1],[2]], updates [4, 7, 2], max -> [1, 7, 3] */
	tc t;
	tc_new(&t, 18, "ScatterND", "x,i,u", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(3), VALS(1, 5, 3));
	gen_init(t.g, t.mg, "i", OQ_DT_INT64, SHAPE(3, 1), VALS(1, 1, 2));
	gen_init(t.g, t.mg, "u", OQ_DT_FLOAT, SHAPE(3), VALS(4, 7, 2));
	gen_attr_str(t.g, t.n, "reduction", "max");
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(1, 7, 3), 0);
	tc_free(&t);
}

Test(constant, sparse_value_is_a_clear_error)
{
	tc t;
	tc_new(&t, 13, "Constant", "", "y");
	gen_attr(t.g, t.n, "sparse_value", OQ_ATTR_SPARSE_TENSOR);
	tc_out(&t, "y", OQ_DT_FLOAT);
	{
		int rc = tc_run(&t);
		cr_assert(rc == OQ_EUNSUP || rc == OQ_EINVAL, "rc %d: %s", rc, t.d.msg);
		cr_assert(strstr(t.d.msg, "sparse"), "%s", t.d.msg);
	}
	tc_free(&t);
}

Test(constant, value_ints_and_strings)
{
	static ProtobufCBinaryData s[] = {{2, (uint8_t *)"ab"}, {0, (uint8_t *)""}, {3, (uint8_t *)"xyz"}};
	tc t;
	tc_new(&t, 13, "Constant", "", "y");
	gen_attr_ints(t.g, t.n, "value_ints", 3, (const int64_t[]){-1, 0, 1LL << 40});
	tc_out(&t, "y", OQ_DT_INT64);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_shape(&t.out[0], SHAPE(3));
	cr_assert_eq(((int64_t *)t.out[0].data)[2], 1LL << 40);
	tc_free(&t);

	/* strings through Constant then Transpose (1-d: a copy) */
	tc_new(&t, 13, "Constant", "", "c");
	{
		Onnx__AttributeProto *a = gen_attr(t.g, t.n, "value_strings", OQ_ATTR_STRINGS);
		a->n_strings = 3;
		a->strings = s;
	}
	gen_node(t.g, t.mg, "Transpose", "t", "c", "y");
	tc_out(&t, "y", OQ_DT_STRING);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	cr_assert_eq(t.out[0].nelem, 3);
	cr_assert_str_eq(t.out[0].strs[0].p, "ab");
	cr_assert_eq(t.out[0].strs[1].len, 0);
	cr_assert_str_eq(t.out[0].strs[2].p, "xyz");
	tc_free(&t);
}

/* ------------------------------------- strided engine against a naive reference */

/* Naive transpose: y[idx] = x[perm-mapped idx], one element at a time. */
static void transpose_ref(const float *x, const int64_t *dims, int r, const int64_t *perm, float *y)
{
	int64_t xs[8], od[8], idx[8] = {0}, n = 1;
	xs[r - 1] = 1;
	for (int i = r - 2; i >= 0; i--)
		xs[i] = xs[i + 1] * dims[i + 1];
	for (int i = 0; i < r; i++) {
		od[i] = dims[perm[i]];
		n *= od[i];
	}
	for (int64_t e = 0; e < n; e++) {
		int64_t off = 0;
		for (int i = 0; i < r; i++)
			off += idx[i] * xs[perm[i]];
		y[e] = x[off];
		for (int i = r - 1; i >= 0; i--) {
			if (++idx[i] < od[i])
				break;
			idx[i] = 0;
		}
	}
}

Test(engine, transpose_all_perms_any_threads)
{
	static const int64_t dims[4] = {3, 1, 5, 4};
	double x[60];
	float xf[60], want[60];
	int64_t perm[4];
	for (int i = 0; i < 60; i++) {
		x[i] = i * 1.5 - 7;
		xf[i] = (float)x[i];
	}
	for (int p = 0; p < 24; p++) {
		/* p-th permutation of 0..3 (factorial number system) */
		int avail[4] = {0, 1, 2, 3}, q = p, na = 4;
		for (int i = 0; i < 4; i++) {
			int f = 1;
			for (int j = 1; j < na; j++)
				f *= j;
			int s = q / f;
			q %= f;
			perm[i] = avail[s];
			for (int j = s; j < na - 1; j++)
				avail[j] = avail[j + 1];
			na--;
		}
		transpose_ref(xf, dims, 4, perm, want);
		for (int threads = 1; threads <= 3; threads += 2) {
			tc t;
			tc_new(&t, 13, "Transpose", "x", "y");
			gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, 4, dims, x);
			gen_attr_ints(t.g, t.n, "perm", 4, perm);
			tc_out(&t, "y", OQ_DT_FLOAT);
			cr_assert_eq(tc_run_threads(&t, threads), OQ_OK, "%s", t.d.msg);
			cr_assert_eq(memcmp(t.out[0].data, want, sizeof want), 0, "perm %lld%lld%lld%lld",
				     (long long)perm[0], (long long)perm[1], (long long)perm[2], (long long)perm[3]);
			tc_free(&t);
		}
	}
}

Test(engine, int4_slice_moves_packed_nibbles)
{
	/* int4 [-8..7] (16 values) reversed by Slice step -1: bit-exact nibbles */
	double v[16], want[16];
	tc t;
	for (int i = 0; i < 16; i++) {
		v[i] = i - 8;
		want[i] = 7 - i;
	}
	tc_new(&t, 21, "Slice", "x,s,e,a,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_INT4, SHAPE(16), v);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(1), VALS(-1));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(1), VALS(-17));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(1), VALS(-1));
	tc_out(&t, "y", OQ_DT_INT4);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], 16, want, 0);
	tc_free(&t);
}

Test(engine, large_transpose_parallel_matches_reference)
{
	/* 40x50x30 = 60000 elements: several threads each copy whole rows */
	static const int64_t dims[3] = {40, 50, 30}, perm[3] = {2, 0, 1};
	size_t n = 60000;
	double *x = malloc(n * sizeof *x);
	float *xf = malloc(n * sizeof *xf), *want = malloc(n * sizeof *want);
	cr_assert(x && xf && want);
	for (size_t i = 0; i < n; i++)
		xf[i] = (float)(x[i] = (double)((i * 7919) % 1000) - 500);
	transpose_ref(xf, dims, 3, perm, want);
	for (int threads = 1; threads <= 4; threads += 3) {
		tc t;
		tc_new(&t, 13, "Transpose", "x", "y");
		gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, 3, dims, x);
		gen_attr_ints(t.g, t.n, "perm", 3, perm);
		tc_out(&t, "y", OQ_DT_FLOAT);
		cr_assert_eq(tc_run_threads(&t, threads), OQ_OK, "%s", t.d.msg);
		cr_assert_eq(memcmp(t.out[0].data, want, n * sizeof *want), 0, "threads %d", threads);
		tc_free(&t);
	}
	free(x);
	free(xf);
	free(want);
}

Test(resize, cubic_same_bits_for_any_thread_count)
{
	/* 1x3x40x50 -> scales 1.7 x 0.6, cubic: outputs of 1 and 4 threads are identical */
	size_t n = 3 * 40 * 50;
	double *x = malloc(n * sizeof *x);
	oq_rt r1;
	cr_assert(x);
	memset(&r1, 0, sizeof r1);
	for (size_t i = 0; i < n; i++)
		x[i] = sin((double)i * 0.37) * 10;
	for (int threads = 1; threads <= 4; threads += 3) {
		tc t;
		tc_new(&t, 13, "Resize", "x,,s", "y");
		gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(1, 3, 40, 50), x);
		gen_init(t.g, t.mg, "s", OQ_DT_FLOAT, SHAPE(4), VALS(1, 1, 1.7, 0.6));
		gen_attr_str(t.g, t.n, "mode", "cubic");
		tc_out(&t, "y", OQ_DT_FLOAT);
		cr_assert_eq(tc_run_threads(&t, threads), OQ_OK, "%s", t.d.msg);
		expect_shape(&t.out[0], SHAPE(1, 3, 68, 30));
		if (threads == 1)
			cr_assert_eq(oq_rt_copy(&r1, &t.out[0]), OQ_OK);
		else
			cr_assert_eq(memcmp(r1.data, t.out[0].data, r1.nbytes), 0);
		tc_free(&t);
	}
	oq_rt_release(&r1);
	free(x);
}

/* Resize of 2x3x9x11 by (1, 1.5, 0.6, 1.7) through the row path and the per-element reference. */
static void resize_fast_vs_ref(const char *mode, const char *ctm, int exclude)
{
	size_t n = 2 * 3 * 9 * 11;
	double x[594];
	oq_rt got[2];
	memset(got, 0, sizeof got);
	for (size_t i = 0; i < n; i++)
		x[i] = cos((double)i * 1.3) * 5 + (double)(i % 7);
	for (int ref = 0; ref < 2; ref++) {
		tc t;
		tc_new(&t, 13, "Resize", "x,r,s", "y");
		gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(2, 3, 9, 11), x);
		gen_init(t.g, t.mg, "r", OQ_DT_FLOAT, SHAPE(8), VALS(0, 0.2, -0.1, 0.1, 1, 0.9, 1.2, 0.8));
		gen_init(t.g, t.mg, "s", OQ_DT_FLOAT, SHAPE(4), VALS(1, 1.5, 0.6, 1.7));
		gen_attr_str(t.g, t.n, "mode", mode);
		gen_attr_str(t.g, t.n, "coordinate_transformation_mode", ctm);
		gen_attr_int(t.g, t.n, "exclude_outside", exclude);
		gen_attr_float(t.g, t.n, "extrapolation_value", -9);
		tc_out(&t, "y", OQ_DT_FLOAT);
		oq_sh_resize_ref = ref;
		cr_assert_eq(tc_run_threads(&t, 2), OQ_OK, "%s", t.d.msg);
		oq_sh_resize_ref = 0;
		cr_assert_eq(oq_rt_copy(&got[ref], &t.out[0]), OQ_OK);
		tc_free(&t);
	}
	cr_assert_eq(got[0].nelem, got[1].nelem);
	cr_assert_eq(got[0].nelem, 2 * 4 * 5 * 18);
	for (size_t i = 0; i < got[0].nelem; i++) {
		double a = oq_rt_get(&got[0], i), b = oq_rt_get(&got[1], i);
		cr_assert(fabs(a - b) <= 1e-5 * (1 + fabs(b)), "%s/%s element %zu: row path %.9g, reference %.9g", mode,
			  ctm, i, a, b);
	}
	oq_rt_release(&got[0]);
	oq_rt_release(&got[1]);
}

Test(resize, row_path_matches_reference)
{
	resize_fast_vs_ref("linear", "half_pixel", 0);
	resize_fast_vs_ref("cubic", "half_pixel", 1);
	resize_fast_vs_ref("cubic", "align_corners", 0);
	resize_fast_vs_ref("linear", "tf_crop_and_resize", 0);
	resize_fast_vs_ref("linear", "pytorch_half_pixel", 0);
}

Test(robust, extreme_int64_arguments)
{
	/* Slice step INT64_MIN from the last element: only x[9] (the step leaves the axis) */
	tc t;
	tc_new(&t, 13, "Slice", "x,s,e,a,p", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(10), iota24);
	gen_init(t.g, t.mg, "s", OQ_DT_INT64, SHAPE(1), VALS(-1));
	gen_init(t.g, t.mg, "e", OQ_DT_INT64, SHAPE(1), VALS(-9223372036854775808.0));
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, SHAPE(1), VALS(0));
	gen_init(t.g, t.mg, "p", OQ_DT_INT64, SHAPE(1), VALS(-9223372036854775808.0));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_OK, "%s", t.d.msg);
	expect_vals(&t.out[0], NV(9), 0);
	tc_free(&t);

	/* Range over 2^63 int64 values: a clear error, not an overflow */
	tc_new(&t, 11, "Range", "a,b,c", "y");
	gen_init(t.g, t.mg, "a", OQ_DT_INT64, 0, NULL, VALS(-9223372036854775808.0));
	gen_init(t.g, t.mg, "b", OQ_DT_INT64, 0, NULL, VALS(0));
	gen_init(t.g, t.mg, "c", OQ_DT_INT64, 0, NULL, VALS(1));
	tc_out(&t, "y", OQ_DT_INT64);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	tc_free(&t);

	/* Resize with a huge scale: an error naming the scale */
	tc_new(&t, 13, "Resize", "x,,s", "y");
	gen_init(t.g, t.mg, "x", OQ_DT_FLOAT, SHAPE(1, 2), VALS(1, 2));
	gen_init(t.g, t.mg, "s", OQ_DT_FLOAT, SHAPE(2), VALS(1, 1e30));
	tc_out(&t, "y", OQ_DT_FLOAT);
	cr_assert_eq(tc_run(&t), OQ_EINVAL);
	cr_assert(strstr(t.d.msg, "scale"), "%s", t.d.msg);
	tc_free(&t);
}
