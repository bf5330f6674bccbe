/*
 * test_exec_half.c - float16 / bfloat16 models in the executor
 * (calib/exec/widen.c): their values are held and computed as float32,
 * weights converted once when the plan is made, and the caller gets
 * outputs in their 16-bit type.
 *
 * The contract tested: a 16-bit model's output is its float32 twin's
 * output (same weights and inputs, exactly representable in 16 bits)
 * rounded once to 16 bits, bit for bit; the 16-bit Conv group still fuses
 * and packs its weight like the float32 one; a Cast to float16 inside the
 * graph rounds (hand-worked: 1 + 2^-11 -> 1, 1 + 3 * 2^-11 -> 1 + 2^-9);
 * an output with no declared type keeps its 16-bit type; bfloat16 likewise.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "calib/kernels/half.h"
#include "calib/kernels/kernel.h"
#include "gen_model.h"
#include "runmodel.h"

#define C 8  /* input channels */
#define M 16 /* output channels */
#define H 6
#define W 7

static uint64_t rng = 7;

/* A value exactly representable in bfloat16 (hence float16 too for these magnitudes): 8 significant bits. */
static double rand_short(double scale)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return ldexp((double)((int)(rng >> 56) - 128), -7) * scale;
}

/*
 * y = Relu(Conv(x, W, B)) (3x3, pad 1) in dtype dt (float32, float16 or
 * bfloat16): x and y of that type, W and B initializers of it. declared:
 * whether y's type is declared.
 */
static gen_model *conv_model(int dt, const double *w, const double *b, int declared)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;
	Onnx__NodeProto *n;

	gen_opset(g, "", 19);
	gp = gen_graph(g);
	gen_input(g, gp, "x", dt, GEN_SHAPE(1, C, H, W));
	gen_init(g, gp, "W", dt, GEN_SHAPE(M, C, 3, 3), w);
	gen_init(g, gp, "B", dt, GEN_SHAPE(M), b);
	n = gen_node(g, gp, "Conv", "conv", "x,W,B", "c");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(g, gp, "Relu", "relu", "c", "y");
	if (declared)
		gen_output(g, gp, "y", dt, GEN_SHAPE(1, M, H, W));
	else
		gen_output(g, gp, "y", 0, -1, NULL);
	return g;
}

/* Runs g on x; returns the output, *fused / *packed the executor's counts. */
static oq_rt run1(gen_model *g, const oq_rt *x, size_t *fused, size_t *packed)
{
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_exec_opts o = {.threads = 2};
	oq_diag d;
	oq_rt y;

	oq_diag_init(&d);
	memset(&y, 0, sizeof y);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "exec: %s", d.msg);
	cr_assert_eq(oq_exec_run(e, x, 1, &y, 1, &d), OQ_OK, "run: %s", d.msg);
	if (fused)
		*fused = oq_exec_n_fused(e);
	if (packed)
		*packed = oq_exec_n_packed_conv(e);
	oq_exec_free(e);
	oq_model_free(m);
	return y;
}

/* x of dtype dt holding xv (exact in dt). */
static oq_rt input(int dt, const double *xv)
{
	oq_rt x;
	cr_assert_eq(oq_rt_alloc(&x, dt, 4, (const int64_t[]){1, C, H, W}), OQ_OK);
	for (size_t i = 0; i < x.nelem; i++)
		oq_rt_set(&x, i, xv[i]);
	return x;
}

static void twin_case(int dt)
{
	double w[M * C * 9], b[M], xv[C * H * W];
	gen_model *g32, *g16, *gu;
	oq_rt x32, x16, y32, y16, yu;
	size_t f32 = 0, f16 = 0, p32 = 0, p16 = 0;
	const uint16_t *h;
	const float *f;

	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
		w[i] = rand_short(0.25);
	for (size_t i = 0; i < M; i++)
		b[i] = rand_short(0.5);
	for (size_t i = 0; i < sizeof xv / sizeof xv[0]; i++)
		xv[i] = rand_short(2);
	g32 = conv_model(OQ_DT_FLOAT, w, b, 1);
	g16 = conv_model(dt, w, b, 1);
	gu = conv_model(dt, w, b, 0);
	x32 = input(OQ_DT_FLOAT, xv);
	x16 = input(dt, xv);
	y32 = run1(g32, &x32, &f32, &p32);
	y16 = run1(g16, &x16, &f16, &p16);
	yu = run1(gu, &x16, NULL, NULL);
	cr_assert_eq(y16.dtype, dt, "output dtype %d", y16.dtype);
	cr_assert_eq(yu.dtype, dt, "undeclared output dtype %d", yu.dtype);
	cr_assert_eq(y16.nelem, y32.nelem);
	h = y16.data;
	f = y32.data;
	for (size_t i = 0; i < y32.nelem; i++) {
		uint16_t want = dt == OQ_DT_FLOAT16 ? oq_float_to_half_ref(f[i]) : oq_float_to_bf16_ref(f[i]);
		cr_assert_eq(h[i], want, "element %zu: 0x%04x, float32 twin %.9g rounds to 0x%04x", i, h[i], (double)f[i],
			     want);
	}
	cr_expect(memcmp(y16.data, yu.data, y16.nbytes) == 0, "declared and undeclared outputs differ");
	cr_expect_eq(f16, f32, "fused groups: %zu, float32 twin %zu", f16, f32);
	cr_expect_eq(p16, p32, "packed convolutions: %zu, float32 twin %zu", p16, p32);
	cr_expect_eq(f16, 1);
	oq_rt_release(&x32);
	oq_rt_release(&x16);
	oq_rt_release(&y32);
	oq_rt_release(&y16);
	oq_rt_release(&yu);
	gen_free(g32);
	gen_free(g16);
	gen_free(gu);
}

Test(exec_half, float16_is_float32_twin_rounded_once)
{
	twin_case(OQ_DT_FLOAT16);
}

Test(exec_half, bfloat16_is_float32_twin_rounded_once)
{
	twin_case(OQ_DT_BFLOAT16);
}

/*
 * x float32 -> Cast(to=float16) -> Cast(to=float) -> y: the first Cast
 * rounds (ties to even) although the executor holds its result as float32:
 * 1 + 2^-11 -> 1, 1 + 3 * 2^-11 -> 1 + 2^-9, 65519 -> 65504, 1e-8 -> 0.
 */
Test(exec_half, cast_to_float16_rounds_inside)
{
	gen_model *g = gen_new(9);
	Onnx__GraphProto *gp;
	oq_model *m = NULL;
	oq_diag d;
	oq_rt x, y;
	size_t n_out = 0;
	static const float xv[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 1e-8f};
	static const float want[] = {1.0f, 1.0f + 0x1p-9f, 65504.0f, 0.0f};

	gen_opset(g, "", 19);
	gp = gen_graph(g);
	gen_input(g, gp, "x", OQ_DT_FLOAT, GEN_SHAPE(4));
	gen_attr_int(g, gen_node(g, gp, "Cast", "c16", "x", "h"), "to", OQ_DT_FLOAT16);
	gen_attr_int(g, gen_node(g, gp, "Cast", "c32", "h", "y"), "to", OQ_DT_FLOAT);
	gen_output(g, gp, "y", OQ_DT_FLOAT, GEN_SHAPE(4));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_FLOAT, 1, (const int64_t[]){4}), OQ_OK);
	memcpy(x.data, xv, sizeof xv);
	cr_assert_eq(runmodel_run(m, &x, 1, &y, 1, &n_out, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(y.dtype, OQ_DT_FLOAT);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(((const float *)y.data)[i], want[i], "element %d: %.9g", i, (double)((const float *)y.data)[i]);
	oq_rt_release(&x);
	oq_rt_release(&y);
	oq_model_free(m);
	gen_free(g);
}
