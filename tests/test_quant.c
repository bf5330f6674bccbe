/*
 * test_quant.c - quantization math pinned by hand-computed cases.
 *
 * Scalar rules (src/quant/quant_math.h) and the QuantizeLinear /
 * DequantizeLinear / DynamicQuantizeLinear kernels run through the real
 * executor on models built in C. Every expected value below is worked out
 * by hand in the comment next to it from the ONNX formulas
 *   Q: y = saturate(round_half_even(x / scale) + zp),  DQ: y = (x - zp) * scale
 * and the float8 encodings of the ONNX float8 spec
 * (https://onnx.ai/onnx/technical/float8.html): e4m3fn bias 7, max 448
 * (0x7E), NaN S.1111.111; e4m3fnuz bias 8, max 240 (0x7F), NaN 0x80;
 * e5m2 bias 15, max 57344 (0x7B), Inf 0x7C; e5m2fnuz bias 16, max 57344
 * (0x7F), NaN 0x80.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "calib/kernels/kernel.h"
#include "gen_model.h"
#include "src/quant/quant_math.h"

/* ------------------------------------------------------------------ helpers */

/* Runs a generated model with float input x (NULL: no inputs); returns the status, *out the output.
 */
static int run(gen_model *g, const float *x, int rank, const int64_t *dims, oq_rt *out, oq_diag *d)
{
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_rt in;
	oq_exec_opts o = {.threads = 2};
	int rc;

	oq_diag_init(d);
	memset(out, 0, sizeof *out);
	memset(&in, 0, sizeof in);
	cr_assert_eq(gen_load(g, &m, d), OQ_OK, "load: %s", d->msg);
	if ((rc = oq_exec_new(m, &o, &e, d)))
		goto done;
	if (x) {
		cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, rank, dims), OQ_OK);
		memcpy(in.data, x, in.nbytes);
	}
	rc = oq_exec_run(e, &in, x ? 1 : 0, out, 1, d);
done:
	oq_rt_release(&in);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
	return rc;
}

static gen_model *start(int64_t opset, Onnx__GraphProto **g)
{
	gen_model *m = gen_new(opset >= 21 ? 10 : 8);
	gen_opset(m, "", opset);
	*g = gen_graph(m);
	return m;
}

static void expect_ints(const oq_rt *t, int dtype, const int64_t *want, size_t n)
{
	cr_assert_eq(t->dtype, dtype, "dtype %s", oq_dtype_name(t->dtype));
	cr_assert_eq(t->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(oq_rt_get_int(t, i), want[i], "element %zu: got %lld, want %lld", i,
		             (long long)oq_rt_get_int(t, i), (long long)want[i]);
}

static void expect_floats(const oq_rt *t, int dtype, const double *want, size_t n)
{
	cr_assert_eq(t->dtype, dtype, "dtype %s", oq_dtype_name(t->dtype));
	cr_assert_eq(t->nelem, n);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(oq_rt_get(t, i), want[i], "element %zu: got %g, want %g", i,
		             oq_rt_get(t, i), want[i]);
}

/* ------------------------------------------------------------ scalar rules */

Test(quant_math, ties_to_even)
{
	/* scale 1, zp 0: x/scale is the tie itself */
	cr_expect_eq(oq_quant_int(0.5f, 1, 0, -128, 127), 0);
	cr_expect_eq(oq_quant_int(1.5f, 1, 0, -128, 127), 2);
	cr_expect_eq(oq_quant_int(2.5f, 1, 0, -128, 127), 2);
	cr_expect_eq(oq_quant_int(-0.5f, 1, 0, -128, 127), 0);
	cr_expect_eq(oq_quant_int(-1.5f, 1, 0, -128, 127), -2);
	cr_expect_eq(oq_quant_int(-2.5f, 1, 0, -128, 127), -2);
	/* 0.75 / 0.5 = 1.5 -> 2; 1.25 / 0.5 = 2.5 -> 2 (not 3 as roundf would give) */
	cr_expect_eq(oq_quant_int(0.75f, 0.5f, 0, -128, 127), 2);
	cr_expect_eq(oq_quant_int(1.25f, 0.5f, 0, -128, 127), 2);
	/* not a tie: 2.6 -> 3, -2.6 -> -3 */
	cr_expect_eq(oq_quant_int(2.6f, 1, 0, -128, 127), 3);
	cr_expect_eq(oq_quant_int(-2.6f, 1, 0, -128, 127), -3);
}

Test(quant_math, saturation_and_zero_point)
{
	cr_expect_eq(oq_quant_int(300, 1, 0, 0, 255), 255);
	cr_expect_eq(oq_quant_int(-5, 1, 0, 0, 255), 0);
	cr_expect_eq(oq_quant_int(200, 1, 0, -128, 127), 127);
	cr_expect_eq(oq_quant_int(-200, 1, 0, -128, 127), -128);
	/* the zero point is added after rounding: 1/0.5 = 2, + 128 = 130 */
	cr_expect_eq(oq_quant_int(1, 0.5f, 128, 0, 255), 130);
	/* 63.75/0.5 = 127.5 -> 128 (even), + 128 = 256 -> saturates to 255 */
	cr_expect_eq(oq_quant_int(63.75f, 0.5f, 128, 0, 255), 255);
	/* -1/0.5 = -2, + 10 = 8 */
	cr_expect_eq(oq_quant_int(-1, 0.5f, 10, 0, 255), 8);
	/* 0.5/1 = 0.5 -> 0 (even), -3 + 0 = -3: the tie is decided before the zero point */
	cr_expect_eq(oq_quant_int(0.5f, 1, -3, -128, 127), -3);
	/* int4 and uint4 ranges */
	cr_expect_eq(oq_quant_int(9, 1, 0, -8, 7), 7);
	cr_expect_eq(oq_quant_int(-9, 1, 0, -8, 7), -8);
	cr_expect_eq(oq_quant_int(20, 1, 0, 0, 15), 15);
	/* 16-bit: 40000/1 + 0 -> 32767; 70000 -> 65535 */
	cr_expect_eq(oq_quant_int(40000, 1, 0, -32768, 32767), 32767);
	cr_expect_eq(oq_quant_int(70000, 1, 0, 0, 65535), 65535);
	/* +-Inf saturate */
	cr_expect_eq(oq_quant_int(INFINITY, 1, 0, -128, 127), 127);
	cr_expect_eq(oq_quant_int(-INFINITY, 1, 0, -128, 127), -128);
}

/* A row at once: by hand (scale 0.5: 0.25 -> 0.5 -> 0 ties to even, 0.75 -> 1.5 -> 2, -0.75 ->
 * -2, 300 and -100 -> saturated, NaN -> the zero point), on int8 with a narrow range and uint8 with a zero
 * point, from an unaligned source; and oq_quant_int's value for every element of a sweep. */
Test(quant_math, row8_by_hand_and_as_the_scalar_step)
{
	float x[6] = {0.25f, 0.75f, -0.75f, 300.0f, -100.0f, NAN}, sweep[200];
	unsigned char buf[4 * 200 + 1], q[200];
	const unsigned char want_s[6] = {0, 2, 0xFE, 127, 0x81 /* -127 */, 0};
	const unsigned char want_u[6] = {10, 12, 8, 255, 0, 10};

	memcpy(buf + 1, x, sizeof x);
	oq_quant_row8(buf + 1, 6, 0.5f, 0, -127, 127, q);
	cr_assert_arr_eq(q, want_s, 6);
	oq_quant_row8(buf + 1, 6, 0.5f, 10, 0, 255, q);
	cr_assert_arr_eq(q, want_u, 6);
	for (int i = 0; i < 200; i++)
		sweep[i] = (float)(i - 100) * 0.0625f + (i % 3 ? 0.03125f : 0.0f); /* ties every third */
	memcpy(buf + 1, sweep, sizeof sweep);
	oq_quant_row8(buf + 1, 200, 0.0625f, -3, -128, 127, q);
	for (int i = 0; i < 200; i++)
		cr_assert_eq((int8_t)q[i], oq_quant_int(sweep[i], 0.0625f, -3, -128, 127), "element %d", i);
}

Test(quant_math, float8_known_encodings)
{
	/* 1.0: e4m3fn exp field 7 -> 0 0111 000 = 0x38; e4m3fnuz exp 8 -> 0x40;
	 * e5m2 exp 15 -> 0 01111 00 = 0x3C; e5m2fnuz exp 16 -> 0x40 */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 1.0f, 1), 0x38);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FNUZ, 1.0f, 1), 0x40);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, 1.0f, 1), 0x3C);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2FNUZ, 1.0f, 1), 0x40);
	/* largest finite values */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 448.0f, 1), 0x7E);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, -448.0f, 1), 0xFE);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FNUZ, 240.0f, 1), 0x7F);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, 57344.0f, 1), 0x7B);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2FNUZ, 57344.0f, 1), 0x7F);
	/* smallest subnormals: 2^-9, 2^-10, 2^-16, 2^-17 -> 0x01 */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, ldexpf(1, -9), 1), 0x01);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FNUZ, ldexpf(1, -10), 1), 0x01);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, ldexpf(1, -16), 1), 0x01);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2FNUZ, ldexpf(1, -17), 1), 0x01);
	/* half the smallest subnormal is a tie between 0 and 0x01: even -> 0 */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, ldexpf(1, -10), 1), 0x00);
	/* e4m3fn ties: 1.0625 between 1.0 (m=000) and 1.125 (m=001) -> 1.0 = 0x38;
	 * 1.1875 between 1.125 (001) and 1.25 (010) -> 1.25 = 0x3A */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 1.0625f, 1), 0x38);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 1.1875f, 1), 0x3A);
	/* 464 is the tie between 448 (m=110) and 480 (m=111, NaN in e4m3fn): even -> 448 */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 464.0f, 0), 0x7E);
	/* zeros: -0 keeps its sign in e4m3fn/e5m2, FNUZ have no -0 (0x80 is NaN) */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, -0.0f, 1), 0x80);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FNUZ, -0.0f, 1), 0x00);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2FNUZ, -1e-30f, 1), 0x00);
}

Test(quant_math, float8_saturation)
{
	/* saturate = 1: out of range -> +-max */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 1000.0f, 1), 0x7E);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, -1000.0f, 1), 0xFE);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FNUZ, 1000.0f, 1), 0x7F);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, 1e6f, 1), 0x7B);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, INFINITY, 1), 0x7B);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, -INFINITY, 1), 0xFE);
	/* saturate = 0: e4m3fn -> NaN, fnuz -> NaN 0x80, e5m2 -> Inf */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, 1000.0f, 0), 0x7F);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FNUZ, 1000.0f, 0), 0x80);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, 1e6f, 0), 0x7C);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2, -1e6f, 0), 0xFC);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2FNUZ, 1e6f, 0), 0x80);
	/* NaN stays NaN */
	cr_expect(isnan(oq_smallfloat_to_f32(OQ_DT_FLOAT8E4M3FN,
	                                     oq_smallfloat_from_f32(OQ_DT_FLOAT8E4M3FN, NAN, 1))));
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT8E5M2FNUZ, NAN, 1), 0x80);
}

Test(quant_math, float8_decode_and_round_trip)
{
	static const int types[] = {OQ_DT_FLOAT8E4M3FN, OQ_DT_FLOAT8E4M3FNUZ, OQ_DT_FLOAT8E5M2,
	                            OQ_DT_FLOAT8E5M2FNUZ};
	/* decodes: e4m3fn 0x7E = 1.75 * 2^8 = 448, 0x01 = 2^-9; e5m2 0x7C = Inf; fnuz 0x80 NaN */
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT8E4M3FN, 0x7E), 448.0f);
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT8E4M3FN, 0x01), ldexpf(1, -9));
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT8E4M3FN, 0xB8), -1.0f);
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT8E5M2, 0x7C), INFINITY);
	cr_expect(isnan(oq_smallfloat_to_f32(OQ_DT_FLOAT8E5M2, 0x7D)));
	cr_expect(isnan(oq_smallfloat_to_f32(OQ_DT_FLOAT8E4M3FNUZ, 0x80)));
	cr_expect(isnan(oq_smallfloat_to_f32(OQ_DT_FLOAT8E5M2FNUZ, 0x80)));
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT8E5M2FNUZ, 0x7F), 57344.0f);
	/* every non-NaN code decodes to a value that encodes back to the same code */
	for (size_t t = 0; t < 4; t++)
		for (unsigned c = 0; c < 256; c++) {
			float v = oq_smallfloat_to_f32(types[t], (uint8_t)c);
			if (isnan(v) || isinf(v))
				continue;
			cr_expect_eq(oq_smallfloat_from_f32(types[t], v, 0), c,
			             "%s code 0x%02x (%g)", oq_dtype_name(types[t]), c, v);
		}
}

Test(quant_math, float4e2m1)
{
	/* e2m1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6; 5 is the tie between 4 (m=0) and 6 (m=1): even ->
	 * 4 */
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT4E2M1, 5.0f, 1), 0x6);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT4E2M1, 6.0f, 1), 0x7);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT4E2M1, 100.0f, 1), 0x7);
	cr_expect_eq(oq_smallfloat_from_f32(OQ_DT_FLOAT4E2M1, -0.5f, 1), 0x9);
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT4E2M1, 0x5), 3.0f);
	cr_expect_eq(oq_smallfloat_to_f32(OQ_DT_FLOAT4E2M1, 0xF), -6.0f);
}

/* ----------------------------------------------------------------- kernels */

Test(quant_kernel, per_tensor_ties_opset10)
{
	Onnx__GraphProto *g;
	gen_model *m = start(10, &g);
	float x[6] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f};
	int64_t want[6] = {0, 2, 2, 0, -2, -2};
	oq_rt y;
	oq_diag d;

	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(6));
	gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1));
	gen_init(m, g, "z", OQ_DT_INT8, 0, NULL, GEN_VALS(0));
	gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y");
	gen_output(m, g, "y", OQ_DT_INT8, GEN_SHAPE(6));
	cr_assert_eq(run(m, x, GEN_SHAPE(6), &y, &d), OQ_OK, "%s", d.msg);
	expect_ints(&y, OQ_DT_INT8, want, 6);
	oq_rt_release(&y);
}

Test(quant_kernel, default_uint8_saturates_both_ends)
{
	Onnx__GraphProto *g;
	gen_model *m = start(13, &g);
	/* no zero point: uint8, zp 0; scale 2: -10 -> -5 -> 0; 600 -> 300 -> 255; 5 -> 2.5 -> 2; 7
	 * -> 3.5 -> 4 */
	float x[4] = {-10, 600, 5, 7};
	int64_t want[4] = {0, 255, 2, 4};
	oq_rt y;
	oq_diag d;

	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(4));
	gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(2));
	gen_node(m, g, "QuantizeLinear", "q", "x,s", "y");
	gen_output(m, g, "y", OQ_DT_UINT8, GEN_SHAPE(4));
	cr_assert_eq(run(m, x, GEN_SHAPE(4), &y, &d), OQ_OK, "%s", d.msg);
	expect_ints(&y, OQ_DT_UINT8, want, 4);
	oq_rt_release(&y);
}

Test(quant_kernel, per_axis_uses_the_right_axis)
{
	float x[6] = {1, 2, 3, 4, 5, 6}; /* [2, 3] */
	oq_rt y;
	oq_diag d;
	{
		/* axis 0, scale {1, 2}, zp {0, 10}: row 0 -> 1 2 3; row 1: 4/2=2, 5/2=2.5->2,
		 * 6/2=3, +10 */
		Onnx__GraphProto *g;
		gen_model *m = start(13, &g);
		int64_t want[6] = {1, 2, 3, 12, 12, 13};
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_init(m, g, "z", OQ_DT_UINT8, GEN_SHAPE(2), GEN_VALS(0, 10));
		gen_attr_int(m, gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y"), "axis", 0);
		gen_output(m, g, "y", OQ_DT_UINT8, GEN_SHAPE(2, 3));
		cr_assert_eq(run(m, x, GEN_SHAPE(2, 3), &y, &d), OQ_OK, "%s", d.msg);
		expect_ints(&y, OQ_DT_UINT8, want, 6);
		oq_rt_release(&y);
	}
	{
		/* axis 1 (the default), scale {1, 2, 4}: col 0: 1, 4; col 1: 2/2=1, 5/2=2.5->2; col
		 * 2: 3/4=0.75->1, 6/4=1.5->2 */
		Onnx__GraphProto *g;
		gen_model *m = start(13, &g);
		int64_t want[6] = {1, 1, 1, 4, 2, 2};
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(3), GEN_VALS(1, 2, 4));
		gen_init(m, g, "z", OQ_DT_INT8, GEN_SHAPE(3), GEN_VALS(0, 0, 0));
		gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y");
		gen_output(m, g, "y", OQ_DT_INT8, GEN_SHAPE(2, 3));
		cr_assert_eq(run(m, x, GEN_SHAPE(2, 3), &y, &d), OQ_OK, "%s", d.msg);
		expect_ints(&y, OQ_DT_INT8, want, 6);
		oq_rt_release(&y);
	}
	{
		/* axis -2 == 0 on rank 2, DQ: (q - zp) * s with q = x: row 0: (1,2,3)-1 * 0.5; row
		 * 1: (4,5,6)-2 * 3 */
		Onnx__GraphProto *g;
		gen_model *m = start(13, &g);
		double want[6] = {0, 0.5, 1, 6, 9, 12};
		gen_init(m, g, "q", OQ_DT_UINT8, GEN_SHAPE(2, 3), GEN_VALS(1, 2, 3, 4, 5, 6));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.5, 3));
		gen_init(m, g, "z", OQ_DT_UINT8, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_attr_int(m, gen_node(m, g, "DequantizeLinear", "dq", "q,s,z", "y"), "axis", -2);
		gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
		cr_assert_eq(run(m, NULL, 0, NULL, &y, &d), OQ_OK, "%s", d.msg);
		expect_floats(&y, OQ_DT_FLOAT, want, 6);
		oq_rt_release(&y);
	}
}

Test(quant_kernel, blocked_with_partial_last_block)
{
	oq_rt y;
	oq_diag d;
	{
		/* x [1, 5], block 2 on axis 1 -> 3 blocks {x0,x1} {x2,x3} {x4}; scale {1, 2, 4}, zp
		 * {0, 0, 1}: 1/1=1, 2/1=2, 3/2=1.5->2, 4/2=2, 5/4=1.25->1 +1 = 2 */
		Onnx__GraphProto *g;
		gen_model *m = start(21, &g);
		float x[5] = {1, 2, 3, 4, 5};
		int64_t want[5] = {1, 2, 2, 2, 2};
		Onnx__NodeProto *n;
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 5));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(1, 3), GEN_VALS(1, 2, 4));
		gen_init(m, g, "z", OQ_DT_INT8, GEN_SHAPE(1, 3), GEN_VALS(0, 0, 1));
		n = gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y");
		gen_attr_int(m, n, "axis", 1);
		gen_attr_int(m, n, "block_size", 2);
		gen_output(m, g, "y", OQ_DT_INT8, GEN_SHAPE(1, 5));
		cr_assert_eq(run(m, x, GEN_SHAPE(1, 5), &y, &d), OQ_OK, "%s", d.msg);
		expect_ints(&y, OQ_DT_INT8, want, 5);
		oq_rt_release(&y);
	}
	{
		/* DQ blocked on axis 0: x [3, 2] int4, block 2 -> scale [2, 2]; rows 0-1 use scale
		 * row 0, row 2 (partial block) uses row 1. scale {{1, 2}, {10, 0.5}}, zp {{0, 1},
		 * {-1, 0}} x {{1, 2}, {3, -4}, {5, 6}} -> {{1, 2}, {3, -10}, {60, 3}} */
		Onnx__GraphProto *g;
		gen_model *m = start(21, &g);
		double want[6] = {1, 2, 3, -10, 60, 3};
		Onnx__NodeProto *n;
		gen_init(m, g, "q", OQ_DT_INT4, GEN_SHAPE(3, 2), GEN_VALS(1, 2, 3, -4, 5, 6));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(1, 2, 10, 0.5));
		gen_init(m, g, "z", OQ_DT_INT4, GEN_SHAPE(2, 2), GEN_VALS(0, 1, -1, 0));
		n = gen_node(m, g, "DequantizeLinear", "dq", "q,s,z", "y");
		gen_attr_int(m, n, "axis", 0);
		gen_attr_int(m, n, "block_size", 2);
		gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(3, 2));
		cr_assert_eq(run(m, NULL, 0, NULL, &y, &d), OQ_OK, "%s", d.msg);
		expect_floats(&y, OQ_DT_FLOAT, want, 6);
		oq_rt_release(&y);
	}
	{
		/* a scale whose blocked dim disagrees with ceil(5 / 2) = 3 is refused */
		Onnx__GraphProto *g;
		gen_model *m = start(21, &g);
		float x[5] = {1, 2, 3, 4, 5};
		Onnx__NodeProto *n;
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 5));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(1, 2), GEN_VALS(1, 2));
		n = gen_node(m, g, "QuantizeLinear", "q", "x,s", "y");
		gen_attr_int(m, n, "block_size", 2);
		gen_output(m, g, "y", OQ_DT_UINT8, GEN_SHAPE(1, 5));
		cr_expect_eq(run(m, x, GEN_SHAPE(1, 5), &y, &d), OQ_EINVAL);
		cr_expect(strstr(d.msg, "blocked scale dim 1") != NULL, "%s", d.msg);
	}
}

Test(quant_kernel, int4_packing_low_nibble_first)
{
	Onnx__GraphProto *g;
	gen_model *m = start(21, &g);
	/* int4, scale 1, zp 0: 1 -> 0x1, -2 -> 0xE, 7 -> 0x7, 9 -> 7 (saturated), -9 -> -8 = 0x8
	 * bytes: [0xE1, 0x77, 0x08] (element 0 in the low nibble, 5 elements -> 3 bytes) */
	float x[5] = {1, -2, 7, 9, -9};
	const uint8_t want[3] = {0xE1, 0x77, 0x08};
	oq_rt y;
	oq_diag d;

	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(5));
	gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1));
	gen_init(m, g, "z", OQ_DT_INT4, 0, NULL, GEN_VALS(0));
	gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y");
	gen_output(m, g, "y", OQ_DT_INT4, GEN_SHAPE(5));
	cr_assert_eq(run(m, x, GEN_SHAPE(5), &y, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(y.dtype, OQ_DT_INT4);
	cr_assert_eq(y.nbytes, 3);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(((const uint8_t *)y.data)[i], want[i], "byte %d: 0x%02x", i,
		             ((const uint8_t *)y.data)[i]);
	oq_rt_release(&y);
}

Test(quant_kernel, uint4_via_output_dtype)
{
	Onnx__GraphProto *g;
	gen_model *m = start(21, &g);
	/* no zero point, output_dtype uint4 (21): 3/0.5 = 6, 20 -> 15, -1 -> 0, 2.25/0.5 = 4.5 -> 4
	 * bytes: [0xF6, 0x40] */
	float x[4] = {3, 20, -1, 2.25f};
	Onnx__NodeProto *n;
	oq_rt y;
	oq_diag d;

	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(4));
	gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
	n = gen_node(m, g, "QuantizeLinear", "q", "x,s", "y");
	gen_attr_int(m, n, "output_dtype", OQ_DT_UINT4);
	gen_output(m, g, "y", OQ_DT_UINT4, GEN_SHAPE(4));
	cr_assert_eq(run(m, x, GEN_SHAPE(4), &y, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(y.dtype, OQ_DT_UINT4);
	cr_expect_eq(((const uint8_t *)y.data)[0], 0xF6);
	cr_expect_eq(((const uint8_t *)y.data)[1], 0x40);
	oq_rt_release(&y);
}

Test(quant_kernel, float8_quantize_and_back)
{
	Onnx__GraphProto *g;
	gen_model *m = start(19, &g);
	/* scale 2: x/2 = 0.5, 224 (-> e4m3fn 224 exactly: 1.75*2^7), 500 (-> saturate 448), 1.0625
	 * (-> tie -> 1.0) DQ back multiplies by 2: 1, 448, 896, 2 */
	float x[4] = {1, 448, 1000, 2.125f};
	double want[4] = {1, 448, 896, 2};
	oq_rt y;
	oq_diag d;

	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(4));
	gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(2));
	gen_init(m, g, "z", OQ_DT_FLOAT8E4M3FN, 0, NULL, GEN_VALS(0));
	gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "q8");
	gen_node(m, g, "DequantizeLinear", "dq", "q8,s,z", "y");
	gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(4));
	cr_assert_eq(run(m, x, GEN_SHAPE(4), &y, &d), OQ_OK, "%s", d.msg);
	expect_floats(&y, OQ_DT_FLOAT, want, 4);
	oq_rt_release(&y);
}

Test(quant_kernel, dequantize_int32_and_float16_scale)
{
	oq_rt y;
	oq_diag d;
	{
		/* opset 10 int32 input, no zp: -5 * 0.5 = -2.5, 1000 * 0.5 = 500 */
		Onnx__GraphProto *g;
		gen_model *m = start(10, &g);
		double want[2] = {-2.5, 500};
		gen_init(m, g, "q", OQ_DT_INT32, GEN_SHAPE(2), GEN_VALS(-5, 1000));
		gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
		gen_node(m, g, "DequantizeLinear", "dq", "q,s", "y");
		gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		cr_assert_eq(run(m, NULL, 0, NULL, &y, &d), OQ_OK, "%s", d.msg);
		expect_floats(&y, OQ_DT_FLOAT, want, 2);
		oq_rt_release(&y);
	}
	{
		/* opset 19: a float16 scale makes a float16 output: (130 - 128) * 0.25 = 0.5, (0 -
		 * 128) * 0.25 = -32 */
		Onnx__GraphProto *g;
		gen_model *m = start(19, &g);
		double want[2] = {0.5, -32};
		gen_init(m, g, "q", OQ_DT_UINT8, GEN_SHAPE(2), GEN_VALS(130, 0));
		gen_init(m, g, "s", OQ_DT_FLOAT16, 0, NULL, GEN_VALS(0.25));
		gen_init(m, g, "z", OQ_DT_UINT8, 0, NULL, GEN_VALS(128));
		gen_node(m, g, "DequantizeLinear", "dq", "q,s,z", "y");
		gen_output(m, g, "y", OQ_DT_FLOAT16, GEN_SHAPE(2));
		cr_assert_eq(run(m, NULL, 0, NULL, &y, &d), OQ_OK, "%s", d.msg);
		expect_floats(&y, OQ_DT_FLOAT16, want, 2);
		oq_rt_release(&y);
	}
}

Test(quant_kernel, opset_rules)
{
	oq_rt y;
	oq_diag d;
	float x[2] = {1, 2};
	{
		/* a 1-D scale before opset 13 is not allowed */
		Onnx__GraphProto *g;
		gen_model *m = start(10, &g);
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_node(m, g, "QuantizeLinear", "q", "x,s", "y");
		gen_output(m, g, "y", OQ_DT_UINT8, GEN_SHAPE(2));
		cr_expect_eq(run(m, x, GEN_SHAPE(2), &y, &d), OQ_EINVAL);
		cr_expect(strstr(d.msg, "before opset 13") != NULL, "%s", d.msg);
	}
	{
		/* int4 needs opset 21 */
		Onnx__GraphProto *g;
		gen_model *m = start(19, &g);
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1));
		gen_init(m, g, "z", OQ_DT_INT4, 0, NULL, GEN_VALS(0));
		gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y");
		gen_output(m, g, "y", OQ_DT_INT4, GEN_SHAPE(2));
		cr_expect_eq(run(m, x, GEN_SHAPE(2), &y, &d), OQ_EUNSUP);
		cr_expect(strstr(d.msg, "int4") != NULL, "%s", d.msg);
	}
	{
		/* output_dtype must agree with the zero point */
		Onnx__GraphProto *g;
		gen_model *m = start(21, &g);
		gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(1));
		gen_init(m, g, "z", OQ_DT_INT8, 0, NULL, GEN_VALS(0));
		gen_attr_int(m, gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y"), "output_dtype",
		             OQ_DT_UINT8);
		gen_output(m, g, "y", OQ_DT_UINT8, GEN_SHAPE(2));
		cr_expect_eq(run(m, x, GEN_SHAPE(2), &y, &d), OQ_EINVAL);
	}
}

Test(quant_kernel, com_microsoft_q_dq)
{
	Onnx__GraphProto *g;
	gen_model *m = gen_new(8);
	/* com.microsoft uint16, per-axis on axis 0: row 0 scale 0.5 zp 1000: 1/0.5=2 -> 1002, 2 ->
	 * 1004; row 1 scale 4 zp 0: 10/4=2.5 -> 2, 14/4=3.5 -> 4. DQ back: 1, 2, 8, 16 */
	float x[4] = {1, 2, 10, 14};
	double want[4] = {1, 2, 8, 16};
	Onnx__NodeProto *n;
	oq_rt y;
	oq_diag d;

	gen_opset(m, "", 13);
	gen_opset(m, "com.microsoft", 1);
	g = gen_graph(m);
	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.5, 4));
	gen_init(m, g, "z", OQ_DT_UINT16, GEN_SHAPE(2), GEN_VALS(1000, 0));
	n = gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "q16");
	gen_domain(m, n, "com.microsoft");
	gen_attr_int(m, n, "axis", 0);
	n = gen_node(m, g, "DequantizeLinear", "dq", "q16,s,z", "y");
	gen_domain(m, n, "com.microsoft");
	gen_attr_int(m, n, "axis", 0);
	gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	cr_assert_eq(run(m, x, GEN_SHAPE(2, 2), &y, &d), OQ_OK, "%s", d.msg);
	expect_floats(&y, OQ_DT_FLOAT, want, 4);
	oq_rt_release(&y);
}

Test(quant_kernel, dynamic_quantize)
{
	Onnx__GraphProto *g;
	gen_model *m = start(11, &g);
	/* min -51, max 204: scale 255/255 = 1, zp = round(0 - (-51)/1) = 51;
	 * y = rint(x) + 51: -51 -> 0, 0 -> 51, 204 -> 255, 2.5 -> 2 + 51 = 53, 3.5 -> 4 + 51 = 55
	 */
	float x[5] = {-51, 0, 204, 2.5f, 3.5f};
	int64_t want[5] = {0, 51, 255, 53, 55};
	oq_model *mm = NULL;
	oq_exec *e = NULL;
	oq_rt in, out[3];
	oq_diag d;
	oq_exec_opts o = {.threads = 1};

	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(5));
	gen_node(m, g, "DynamicQuantizeLinear", "dq", "x", "y,ys,yz");
	gen_output(m, g, "y", OQ_DT_UINT8, GEN_SHAPE(5));
	gen_output(m, g, "ys", OQ_DT_FLOAT, 0, NULL);
	gen_output(m, g, "yz", OQ_DT_UINT8, 0, NULL);
	oq_diag_init(&d);
	memset(out, 0, sizeof out);
	cr_assert_eq(gen_load(m, &mm, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_exec_new(mm, &o, &e, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, GEN_SHAPE(5)), OQ_OK);
	memcpy(in.data, x, sizeof x);
	cr_assert_eq(oq_exec_run(e, &in, 1, out, 3, &d), OQ_OK, "%s", d.msg);
	expect_ints(&out[0], OQ_DT_UINT8, want, 5);
	cr_expect_eq(oq_rt_get(&out[1], 0), 1.0);
	cr_expect_eq(oq_rt_get_int(&out[2], 0), 51);
	for (int i = 0; i < 3; i++)
		oq_rt_release(&out[i]);
	oq_rt_release(&in);
	oq_exec_free(e);
	oq_model_free(mm);
	gen_free(m);
}

/*
 * The per-row fast loops of float32 -> int8/uint8 QuantizeLinear (AVX-512 or AVX2 when the CPU
 * has it, oq_quant_simd 2 caps them at AVX2, 0 forces the portable loop) against the scalar rule
 * oq_quant_int element by element: 1013 values (a tail of 5 after 16-value steps) with exact
 * ties k + 0.5 of the scale, NaN, +-Inf, huge values, -0, for several scales and zero points.
 */
Test(quant_kernel, row_fast_paths_match_scalar_rule)
{
	enum { N = 1013 };
	static float x[N];
	static const float scales[3] = {0.37f, 0.015625f, 3.0f};
	static const int zps[3] = {0, 17, -128};
	unsigned long long r = 5;

	for (int i = 0; i < N; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((double)(r >> 40) / 8388608.0 - 1.0) * 400.0f;
	}
	x[3] = NAN;
	x[20] = INFINITY;
	x[37] = -INFINITY;
	x[50] = 3e38f;
	x[51] = -0.0f;
	for (int k = 0; k < 3; k++)
		for (int dt = 0; dt < 2; dt++)
			for (int z = 0; z < 3; z++) {
				int ydt = dt ? OQ_DT_INT8 : OQ_DT_UINT8;
				int zp = dt ? zps[z] : zps[z] + 128 * (zps[z] < 0);
				oq_rt y[3];
				for (int i = 60; i < 200; i++) /* exact ties of this scale */
					x[i] = ((float)(i - 130) + 0.5f) * scales[k];
				for (int simd = 0; simd < 3; simd++) {
					Onnx__GraphProto *g;
					gen_model *m = start(13, &g);
					oq_diag d;
					gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(N));
					gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(scales[k]));
					gen_init(m, g, "z", ydt, 0, NULL, GEN_VALS(zp));
					gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "y");
					gen_output(m, g, "y", ydt, GEN_SHAPE(N));
					oq_quant_simd = simd;
					cr_assert_eq(run(m, x, GEN_SHAPE(N), &y[simd], &d), OQ_OK, "%s", d.msg);
					oq_quant_simd = 1;
				}
				for (int i = 0; i < N; i++) {
					int32_t want = oq_quant_int(x[i], scales[k], zp, dt ? -128 : 0, dt ? 127 : 255);
					cr_assert_eq(oq_rt_get_int(&y[1], i), want,
					             "%s scale %g zp %d: x[%d] = %a -> %lld, rule %d",
					             oq_dtype_name(ydt), (double)scales[k], zp, i, (double)x[i],
					             (long long)oq_rt_get_int(&y[1], i), want);
					cr_assert_eq(oq_rt_get_int(&y[0], i), want, "portable loop, x[%d]", i);
					cr_assert_eq(oq_rt_get_int(&y[2], i), want, "AVX2 loop, x[%d]", i);
				}
				oq_rt_release(&y[0]);
				oq_rt_release(&y[1]);
				oq_rt_release(&y[2]);
			}
}

/*
 * The per-row fast loops of int8/uint8 -> float32 DequantizeLinear (AVX-512 or AVX2 when the CPU has
 * it, capped at AVX2 with oq_quant_simd 2, and the portable loop) bit for bit against ONNX's (x - zero_point) * scale computed here in float:
 * Q then DQ (another scale) on 1013 values (a tail of 5 after 16-value steps) whose codes cover
 * every byte value, for several scales and zero points.
 */
Test(quant_kernel, dq_row_fast_paths_match_the_definition)
{
	enum { N = 1013 };
	static float x[N];
	static const float scales[3] = {0.37f, 0.015625f, 3.0f}, dq_scales[3] = {0.1f, 7.0f, 1e-3f};
	static const int zps[3] = {0, 17, -128};

	for (int k = 0; k < 3; k++)
		for (int dt = 0; dt < 2; dt++)
			for (int z = 0; z < 3; z++) {
				int ydt = dt ? OQ_DT_INT8 : OQ_DT_UINT8, lo = dt ? -128 : 0;
				int zp = dt ? zps[z] : zps[z] + 128 * (zps[z] < 0);
				oq_rt y[3];
				for (int i = 0; i < N; i++) /* code lo + i % 256 */
					x[i] = (float)(lo + i % 256 - zp) * scales[k];
				for (int simd = 0; simd < 3; simd++) {
					Onnx__GraphProto *g;
					gen_model *m = start(13, &g);
					oq_diag d;
					gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(N));
					gen_init(m, g, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(scales[k]));
					gen_init(m, g, "s2", OQ_DT_FLOAT, 0, NULL, GEN_VALS(dq_scales[k]));
					gen_init(m, g, "z", ydt, 0, NULL, GEN_VALS(zp));
					gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "xq");
					gen_node(m, g, "DequantizeLinear", "dq", "xq,s2,z", "y");
					gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(N));
					oq_quant_simd = simd;
					cr_assert_eq(run(m, x, GEN_SHAPE(N), &y[simd], &d), OQ_OK, "%s", d.msg);
					oq_quant_simd = 1;
				}
				for (int i = 0; i < N; i++) {
					float want = ((float)(lo + i % 256) - (float)zp) * dq_scales[k];
					const float *y0 = y[0].data, *y1 = y[1].data;
					cr_assert(!memcmp(&y1[i], &want, 4), "%s scale %g zp %d: code %d -> %a, want %a",
						  oq_dtype_name(ydt), (double)dq_scales[k], zp, lo + i % 256, (double)y1[i],
						  (double)want);
					cr_assert(!memcmp(&y0[i], &want, 4), "portable loop, element %d", i);
					cr_assert(!memcmp((const float *)y[2].data + i, &want, 4), "AVX2 loop, element %d", i);
				}
				oq_rt_release(&y[0]);
				oq_rt_release(&y[1]);
				oq_rt_release(&y[2]);
			}
}

/* ------------------------------------------------------ Q -> DQ pairs */

/* What a pair test saw: the output, the pairs planned, and the codes an observer was handed. */
typedef struct pair_run {
	oq_rt y;
	size_t n_qdq;
	int codes_seen; /* observer calls on the Q's output */
} pair_run;

static int saw_code(void *ctx, const oq_value *v, const oq_rt *t)
{
	(void)t;
	((pair_run *)ctx)->codes_seen += !strcmp(v->name, "xq");
	return 0;
}

static int want_all(void *ctx, const oq_value *v)
{
	(void)ctx;
	(void)v;
	return 1;
}

static int want_no_code(void *ctx, const oq_value *v)
{
	(void)ctx;
	return strcmp(v->name, "xq") != 0;
}

/* Runs g on x with the executor's pairing on or off (no_qdq); observe: 0 none, 1 an observer
 * wanting every value, 2 one wanting all but the code "xq". */
static void run_pair(gen_model *g, const float *x, int rank, const int64_t *dims, int no_qdq, int observe,
		     pair_run *r)
{
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_rt in;
	oq_exec_opts o = {.threads = 2};
	oq_diag d;

	oq_diag_init(&d);
	memset(r, 0, sizeof *r);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "load: %s", d.msg);
	oq_exec_no_qdq = no_qdq;
	cr_assert_eq(oq_exec_new(m, &o, &e, &d), OQ_OK, "%s", d.msg);
	oq_exec_no_qdq = 0;
	if (observe) {
		oq_exec_set_observer(e, saw_code, r);
		oq_exec_set_observe_want(e, observe == 1 ? want_all : want_no_code);
	}
	r->n_qdq = oq_exec_n_qdq(e);
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(in.data, x, in.nbytes);
	cr_assert_eq(oq_exec_run(e, &in, 1, &r->y, 1, &d), OQ_OK, "%s", d.msg);
	oq_rt_release(&in);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
}

/* The same outputs bit for bit. */
static void expect_same_bits(const oq_rt *a, const oq_rt *b)
{
	cr_assert_eq(a->dtype, OQ_DT_FLOAT);
	cr_assert_eq(b->dtype, OQ_DT_FLOAT);
	cr_assert_eq(a->nelem, b->nelem);
	for (size_t i = 0; i < a->nelem; i++)
		cr_assert(!memcmp((const float *)a->data + i, (const float *)b->data + i, 4), "element %zu: %a vs %a", i,
			  (double)((const float *)a->data)[i], (double)((const float *)b->data)[i]);
}

/* x -> Q -> DQ -> y, the DQ reading the Q's own scale "s" and zero point "z" (or "s2" when other_scale). */
static gen_model *pair_model(int64_t opset, int zdt, int rank, const int64_t *dims, const double *s, const double *z,
			     size_t ns, int64_t axis, int other_scale, int code_out)
{
	Onnx__GraphProto *g;
	gen_model *m = start(opset, &g);
	int64_t sdim[1] = {(int64_t)ns};

	gen_input(m, g, "x", OQ_DT_FLOAT, rank, dims);
	gen_init(m, g, "s", OQ_DT_FLOAT, ns > 1, sdim, s);
	gen_init(m, g, "s2", OQ_DT_FLOAT, ns > 1, sdim, s);
	gen_init(m, g, "z", zdt, ns > 1, sdim, z);
	gen_attr_int(m, gen_node(m, g, "QuantizeLinear", "q", "x,s,z", "xq"), "axis", axis);
	gen_attr_int(m, gen_node(m, g, "DequantizeLinear", "dq", other_scale ? "xq,s2,z" : "xq,s,z", "y"), "axis", axis);
	gen_output(m, g, "y", OQ_DT_FLOAT, rank, dims);
	if (code_out)
		gen_output(m, g, "xq", zdt, rank, dims);
	return m;
}

Test(quant_kernel, q_dq_pair_by_hand_and_as_the_two_kernels)
{
	/* [2, 40] per axis 0: row 0 scale 0.5, uint8 zp 128 (codes -128..127 around it); row 1 scale
	 * 3, zp 3 (-3..252). 40 values a row: AVX-512 vectors and a scalar tail. */
	static const double s[2] = {0.5, 3}, z[2] = {128, 3};
	const int64_t dims[2] = {2, 40};
	float x[80];
	pair_run a, b;

	for (int i = 0; i < 80; i++)
		x[i] = (float)(i % 40 - 20) * 0.37f * (i < 40 ? 1.0f : 6.0f);
	x[0] = 1.25f;    /* 2.5 -> 2 (ties to even) -> code 130 -> (130 - 128) * 0.5 = 1 */
	x[1] = -0.75f;   /* -1.5 -> -2 -> 126 -> -1 */
	x[2] = 1000;     /* 2000, clamped to 255 - 128 = 127 -> 63.5 */
	x[3] = -1000;    /* clamped to 0 - 128 -> -64 */
	x[4] = NAN;      /* 0 -> the zero point -> 0 */
	x[5] = -0.0f;    /* -0 / 0.5 -> 0 -> +0 */
	x[39] = 0.75f;   /* in the tail: 1.5 -> 2 -> 1 */
	x[40] = 7.5f;    /* row 1: 2.5 -> 2 -> 6 */
	x[41] = -20;     /* -6.67, clamped to 0 - 3 -> -9 */
	x[42] = 760;     /* 253.3, clamped to 255 - 3 = 252 -> 756 */
	x[43] = INFINITY; /* clamped -> 756 */
	x[79] = 4.5f;    /* tail: 1.5 -> 2 -> 6 */
	run_pair(pair_model(13, OQ_DT_UINT8, 2, dims, s, z, 2, 0, 0, 0), x, 2, dims, 0, 0, &a);
	run_pair(pair_model(13, OQ_DT_UINT8, 2, dims, s, z, 2, 0, 0, 0), x, 2, dims, 1, 0, &b);
	cr_assert_eq(a.n_qdq, 1, "the pair runs as one kernel");
	cr_assert_eq(b.n_qdq, 0);
	{
		const float *y = a.y.data;
		static const struct { int i; float v; } want[] = {{0, 1}, {1, -1}, {2, 63.5f}, {3, -64}, {4, 0}, {39, 1},
								 {40, 6}, {41, -9}, {42, 756}, {43, 756}, {79, 6}};
		for (size_t k = 0; k < sizeof want / sizeof *want; k++)
			cr_expect_eq(y[want[k].i], want[k].v, "element %d: %g, want %g", want[k].i, (double)y[want[k].i],
				     (double)want[k].v);
		cr_expect(!signbit(y[5]) && y[5] == 0, "-0 gives +0");
	}
	expect_same_bits(&a.y, &b.y);
	for (int simd = 0; simd < 3; simd++) { /* the portable loop too */
		pair_run c;
		oq_quant_simd = simd;
		run_pair(pair_model(13, OQ_DT_UINT8, 2, dims, s, z, 2, 0, 0, 0), x, 2, dims, 0, 0, &c);
		oq_quant_simd = 1;
		expect_same_bits(&a.y, &c.y);
		oq_rt_release(&c.y);
	}
	oq_rt_release(&a.y);
	oq_rt_release(&b.y);
}

Test(quant_kernel, q_dq_pair_per_tensor_int8_many_rows)
{
	/* one scale 0.25, int8 zp -5 over 3 x 37 values: 0.125 -> 0.5 -> 0 -> 0; 31.9 -> 127.6 -> 128
	 * (under 127 + 5) -> 32; -40 -> -160, clamped to -128 + 5 -> -30.75 */
	static const double s[1] = {0.25}, z[1] = {-5};
	const int64_t dims[2] = {3, 37};
	float x[111];
	pair_run a, b;

	for (int i = 0; i < 111; i++)
		x[i] = (float)((i * 7919) % 301 - 150) * 0.113f;
	x[0] = 0.125f;
	x[1] = 31.9f;
	x[110] = -40;
	run_pair(pair_model(13, OQ_DT_INT8, 2, dims, s, z, 1, 1, 0, 0), x, 2, dims, 0, 0, &a);
	run_pair(pair_model(13, OQ_DT_INT8, 2, dims, s, z, 1, 1, 0, 0), x, 2, dims, 1, 0, &b);
	cr_assert_eq(a.n_qdq, 1);
	cr_expect_eq(((float *)a.y.data)[0], 0);
	cr_expect_eq(((float *)a.y.data)[1], 32);
	cr_expect_eq(((float *)a.y.data)[110], -30.75f);
	expect_same_bits(&a.y, &b.y);
	oq_rt_release(&a.y);
	oq_rt_release(&b.y);
}

Test(quant_kernel, q_dq_pairs_only_where_the_code_is_not_needed)
{
	static const double s[1] = {0.5}, z[1] = {3};
	const int64_t dims[1] = {20};
	float x[20];
	pair_run a, b;

	for (int i = 0; i < 20; i++)
		x[i] = (float)i * 0.3f - 2;
	/* the DQ reads another scale value (equal numbers): not a pair */
	run_pair(pair_model(13, OQ_DT_UINT8, 1, dims, s, z, 1, 0, 1, 0), x, 1, dims, 0, 0, &a);
	cr_expect_eq(a.n_qdq, 0);
	oq_rt_release(&a.y);
	/* the code is a graph output too: not a pair */
	run_pair(pair_model(13, OQ_DT_UINT8, 1, dims, s, z, 1, 0, 0, 1), x, 1, dims, 0, 0, &a);
	cr_expect_eq(a.n_qdq, 0);
	oq_rt_release(&a.y);
	/* an observer that wants the code gets it (the pair runs as two kernels), one that does not
	 * leaves the pair whole; the outputs agree */
	run_pair(pair_model(13, OQ_DT_UINT8, 1, dims, s, z, 1, 0, 0, 0), x, 1, dims, 0, 1, &a);
	run_pair(pair_model(13, OQ_DT_UINT8, 1, dims, s, z, 1, 0, 0, 0), x, 1, dims, 0, 2, &b);
	cr_expect_eq(a.codes_seen, 1);
	cr_expect_eq(b.codes_seen, 0);
	expect_same_bits(&a.y, &b.y);
	oq_rt_release(&a.y);
	oq_rt_release(&b.y);
	/* int16 codes (opset 21): planned as a pair, handed back to the two kernels at run time */
	{
		static const double z16[1] = {-7};
		run_pair(pair_model(21, OQ_DT_INT16, 1, dims, s, z16, 1, 0, 0, 0), x, 1, dims, 0, 0, &a);
		run_pair(pair_model(21, OQ_DT_INT16, 1, dims, s, z16, 1, 0, 0, 0), x, 1, dims, 1, 0, &b);
		cr_expect_eq(a.n_qdq, 1);
		cr_expect_eq(((float *)a.y.data)[0], -2); /* -2 / 0.5 = -4 -> -2 */
		expect_same_bits(&a.y, &b.y);
		oq_rt_release(&a.y);
		oq_rt_release(&b.y);
	}
}

/* DequantizeLinear per axis on the last axis (a MatMul weight per column: every row of the
 * kernel's row space is one element): [3, 37] codes, 37 scales and zero points, both 8-bit
 * types, every element against the definition (code - zp) * scale; by hand: int8 code -5 in
 * column 2 (scale 0.75, zp -1): (-5 + 1) * 0.75 = -3. */
Test(quant_kernel, dq_per_axis_on_the_last_axis)
{
	double q[3 * 37], sc[37], zp[37];

	for (int u8 = 0; u8 < 2; u8++) {
		for (int i = 0; i < 3 * 37; i++)
			q[i] = u8 ? (i * 53) % 256 : (i * 53) % 256 - 128;
		for (int c = 0; c < 37; c++) {
			sc[c] = 0.25 * (c + 1);
			zp[c] = u8 ? (c * 7) % 256 : (c * 7) % 256 - 128;
		}
		if (!u8) {
			q[2] = -5;
			zp[2] = -1;
		}
		for (int simd = 0; simd < 3; simd++) {
			Onnx__GraphProto *g;
			gen_model *m = start(13, &g);
			oq_rt y;
			oq_diag d;
			int dt = u8 ? OQ_DT_UINT8 : OQ_DT_INT8;
			gen_init(m, g, "q", dt, GEN_SHAPE(3, 37), q);
			gen_init(m, g, "s", OQ_DT_FLOAT, GEN_SHAPE(37), sc);
			gen_init(m, g, "z", dt, GEN_SHAPE(37), zp);
			gen_attr_int(m, gen_node(m, g, "DequantizeLinear", "dq", "q,s,z", "y"), "axis", 1);
			gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(3, 37));
			oq_quant_simd = simd;
			cr_assert_eq(run(m, NULL, 0, NULL, &y, &d), OQ_OK, "%s", d.msg);
			oq_quant_simd = 1;
			for (int i = 0; i < 3 * 37; i++) {
				float want = ((float)q[i] - (float)zp[i % 37]) * (float)sc[i % 37];
				cr_assert(!memcmp((float *)y.data + i, &want, 4), "%s simd %d element %d: %g, want %g",
					  u8 ? "uint8" : "int8", simd, i, (double)((float *)y.data)[i], (double)want);
			}
			if (!u8)
				cr_expect_eq(((float *)y.data)[2], -3.0f);
			oq_rt_release(&y);
		}
	}
}
