/*
 * test_elementwise.c - element-wise kernels (calib/kernels/elementwise/elementwise.c, calib/kernels/elementwise/convert.c):
 * one-node models run through the executor against hand-computed values:
 * broadcasting, Round ties to even, Clip in both opset forms, Cast
 * truncation/saturation/wrapping and float16/float8 rounding, NaN in
 * Max/Min, integer Mod/Div/Pow corner cases, and the float32 fast path
 * against the double reference path and across thread counts.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "gen_model.h"
#include "calib/kernels/elementwise/elementwise.h"
#include "calib/kernels/kernel.h"
#include "calib/kernels/vmath.h"

static int threads = 1;

/* An owned runtime tensor from doubles (converted with oq_rt_set). */
static oq_rt mk(int dt, int rank, const int64_t *dims, const double *v)
{
	oq_rt t;
	cr_assert_eq(oq_rt_alloc(&t, dt, rank, dims), OQ_OK);
	for (size_t i = 0; v && i < t.nelem; i++)
		oq_rt_set(&t, i, v[i]);
	return t;
}
#define T(dt, shape, ...) mk(dt, GEN_SHAPE shape, GEN_VALS(__VA_ARGS__))
#define SCALAR(dt, v) mk(dt, 0, NULL, GEN_VALS(v))

/*
 * Runs op (opset) on inputs named in `names` (comma separated, empty for
 * omitted) with attributes "name=TYPE:value;..." (TYPE i, f or s).
 * Returns the run status; the diagnostic goes to msg.
 */
static int run(const char *op, int opset, const char *names, oq_rt *in, const char *attrs, oq_rt *out,
	       char *msg)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_diag d;
	oq_exec_opts o = {.threads = threads};
	char buf[256], *save = NULL;
	size_t nin = 0;
	int rc;

	memset(out, 0, sizeof *out); /* the executor wants zeroed output structs */
	oq_diag_init(&d);
	gen_opset(g, "", opset);
	mg = gen_graph(g);
	snprintf(buf, sizeof buf, "%s", names);
	for (const char *p = buf; *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		if (len) {
			char nm[32];
			snprintf(nm, sizeof nm, "%.*s", (int)len, p);
			gen_input(g, mg, nm, in[nin].dtype, in[nin].rank, in[nin].dims);
			nin++;
		}
		if (!c)
			break;
		p = c + 1;
	}
	n = gen_node(g, mg, op, "n", names, "y");
	snprintf(buf, sizeof buf, "%s", attrs ? attrs : "");
	for (char *a = strtok_r(buf, ";", &save); a; a = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(a, '=');
		cr_assert(eq && eq[2] == ':', "bad attr spec %s", a);
		*eq = '\0';
		if (eq[1] == 'i')
			gen_attr_int(g, n, a, strtoll(eq + 3, NULL, 10));
		else if (eq[1] == 'f')
			gen_attr_float(g, n, a, strtof(eq + 3, NULL));
		else
			gen_attr_str(g, n, a, eq + 3);
	}
	gen_output(g, mg, "y", 0, -1, NULL);
	rc = gen_load(g, &m, &d);
	if (!rc)
		rc = oq_exec_new(m, &o, &e, &d);
	if (!rc)
		rc = oq_exec_run(e, in, nin, out, 1, &d);
	snprintf(msg, 1024, "%s", d.msg);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
	for (size_t i = 0; i < nin; i++)
		oq_rt_release(&in[i]);
	return rc;
}

/* Checks out (dtype, shape, values; NaN matches NaN) and releases it. */
static void expect(oq_rt *out, int dt, int rank, const int64_t *dims, const double *want)
{
	char s[128];
	cr_assert_eq(out->dtype, dt, "dtype %s", oq_rt_describe(out, s, sizeof s));
	cr_assert_eq(out->rank, rank, "rank of %s", oq_rt_describe(out, s, sizeof s));
	for (int i = 0; i < rank; i++)
		cr_assert_eq(out->dims[i], dims[i], "shape %s", oq_rt_describe(out, s, sizeof s));
	for (size_t i = 0; i < out->nelem; i++) {
		double g = oq_rt_get(out, i);
		if (isnan(want[i]))
			cr_assert(isnan(g), "element %zu: got %.17g, want NaN", i, g);
		else
			cr_assert(g == want[i], "element %zu: got %.17g, want %.17g", i, g, want[i]);
	}
	oq_rt_release(out);
}
#define EXPECT(out, dt, shape, ...) expect(out, dt, GEN_SHAPE shape, GEN_VALS(__VA_ARGS__))

#define RUN_OK(op, opset, names, in, attrs, out)                         \
	do {                                                             \
		char m_[1024];                                            \
		int rc_ = run(op, opset, names, in, attrs, out, m_);     \
		cr_assert_eq(rc_, OQ_OK, "%s failed: %s", op, m_);       \
	} while (0)

Test(elementwise, broadcast_add_sub)
{
	oq_rt in[2], y;
	in[0] = T(OQ_DT_FLOAT, (2, 3), 1, 2, 3, 4, 5, 6);
	in[1] = T(OQ_DT_FLOAT, (3), 10, 20, 30);
	RUN_OK("Add", 17, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (2, 3), 11, 22, 33, 14, 25, 36);

	/* [2,1,3] - [4,1] -> [2,4,3] */
	in[0] = T(OQ_DT_FLOAT, (2, 1, 3), 1, 2, 3, 4, 5, 6);
	in[1] = T(OQ_DT_FLOAT, (4, 1), 0, 10, 20, 30);
	RUN_OK("Sub", 17, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (2, 4, 3), 1, 2, 3, -9, -8, -7, -19, -18, -17, -29, -28, -27, 4, 5, 6, -6, -5, -4,
	       -16, -15, -14, -26, -25, -24);

	/* scalar on the left, int64 */
	in[0] = SCALAR(OQ_DT_INT64, 100);
	in[1] = T(OQ_DT_INT64, (2, 2), 1, 2, 3, 4);
	RUN_OK("Sub", 17, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT64, (2, 2), 99, 98, 97, 96);

	/* [3,1] * [1,2] in double */
	in[0] = T(OQ_DT_DOUBLE, (3, 1), 1, 2, 3);
	in[1] = T(OQ_DT_DOUBLE, (1, 2), 10, 100);
	RUN_OK("Mul", 17, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_DOUBLE, (3, 2), 10, 100, 20, 200, 30, 300);
}

Test(elementwise, broadcast_errors_and_legacy_axis)
{
	oq_rt in[2], y;
	char msg[1024];
	in[0] = T(OQ_DT_FLOAT, (2, 3), 1, 2, 3, 4, 5, 6);
	in[1] = T(OQ_DT_FLOAT, (4), 1, 2, 3, 4);
	cr_assert_eq(run("Add", 17, "a,b", in, NULL, &y, msg), OQ_EINVAL);
	cr_assert(strstr(msg, "broadcast"), "message: %s", msg);

	/* opset 6: B [3] placed at axis 0 of A [3,2] */
	in[0] = T(OQ_DT_FLOAT, (3, 2), 1, 2, 3, 4, 5, 6);
	in[1] = T(OQ_DT_FLOAT, (3), 10, 20, 30);
	RUN_OK("Add", 6, "a,b", in, "broadcast=i:1;axis=i:0", &y);
	EXPECT(&y, OQ_DT_FLOAT, (3, 2), 11, 12, 23, 24, 35, 36);
}

Test(elementwise, integer_arithmetic)
{
	oq_rt in[2], y;
	in[0] = T(OQ_DT_UINT8, (3), 250, 3, 0);
	in[1] = T(OQ_DT_UINT8, (3), 10, 5, 1);
	RUN_OK("Add", 14, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_UINT8, (3), 4, 8, 1); /* wraps like numpy */

	in[0] = T(OQ_DT_UINT8, (3), 3, 5, 0);
	in[1] = T(OQ_DT_UINT8, (3), 5, 3, 1);
	RUN_OK("Sub", 14, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_UINT8, (3), 254, 2, 255);

	in[0] = T(OQ_DT_INT32, (4), 7, -7, 7, 5);
	in[1] = T(OQ_DT_INT32, (4), 2, 2, -2, 0);
	RUN_OK("Div", 14, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT32, (4), 3, -3, -3, 0); /* truncation; x/0 -> 0, no trap */

	/* Mod: fmod=0 takes the divisor's sign, fmod=1 the dividend's */
	in[0] = T(OQ_DT_INT64, (4), -7, 7, -7, 7);
	in[1] = T(OQ_DT_INT64, (4), 3, -3, -3, 3);
	RUN_OK("Mod", 13, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT64, (4), 2, -2, -1, 1);
	in[0] = T(OQ_DT_INT64, (4), -7, 7, -7, 7);
	in[1] = T(OQ_DT_INT64, (4), 3, -3, -3, 3);
	RUN_OK("Mod", 13, "a,b", in, "fmod=i:1", &y);
	EXPECT(&y, OQ_DT_INT64, (4), -1, 1, -1, 1);
	in[0] = T(OQ_DT_FLOAT, (2), -7.5, 7.5);
	in[1] = T(OQ_DT_FLOAT, (2), 2, 2);
	RUN_OK("Mod", 13, "a,b", in, "fmod=i:1", &y);
	EXPECT(&y, OQ_DT_FLOAT, (2), -1.5, 1.5);

	/* Pow: int^int exact, int^float truncates */
	in[0] = T(OQ_DT_INT64, (3), 2, 3, -2);
	in[1] = T(OQ_DT_INT64, (3), 10, 3, 3);
	RUN_OK("Pow", 15, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT64, (3), 1024, 27, -8);
	in[0] = T(OQ_DT_INT32, (2), 3, 10);
	in[1] = T(OQ_DT_FLOAT, (2), 0.5, 0.5);
	RUN_OK("Pow", 15, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT32, (2), 1, 3);

	in[0] = T(OQ_DT_UINT8, (2), 0x81, 0xF0);
	in[1] = T(OQ_DT_UINT8, (2), 1, 4);
	RUN_OK("BitShift", 11, "a,b", in, "direction=s:LEFT", &y);
	EXPECT(&y, OQ_DT_UINT8, (2), 0x02, 0x00);
	in[0] = T(OQ_DT_UINT8, (2), 0x81, 0xF0);
	in[1] = T(OQ_DT_UINT8, (2), 1, 4);
	RUN_OK("BitShift", 11, "a,b", in, "direction=s:RIGHT", &y);
	EXPECT(&y, OQ_DT_UINT8, (2), 0x40, 0x0F);
	in[0] = T(OQ_DT_INT8, (2), 12, -1);
	in[1] = T(OQ_DT_INT8, (2), 10, 5);
	RUN_OK("BitwiseAnd", 18, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT8, (2), 8, 5);
	in[0] = T(OQ_DT_INT8, (2), 12, 0);
	RUN_OK("BitwiseNot", 18, "a", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT8, (2), -13, -1);
}

Test(elementwise, round_half_to_even)
{
	oq_rt in[1], y;
	in[0] = T(OQ_DT_FLOAT, (9), 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.6, -3.5);
	RUN_OK("Round", 11, "x", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (9), 0, 2, 2, -0.0, -2, -2, 0, 3, -4);
	in[0] = T(OQ_DT_DOUBLE, (3), 4.5, 5.5, -4.5);
	RUN_OK("Round", 11, "x", in, NULL, &y);
	EXPECT(&y, OQ_DT_DOUBLE, (3), 4, 6, -4);
	in[0] = T(OQ_DT_FLOAT16, (2), 0.5, 1.5);
	RUN_OK("Round", 11, "x", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT16, (2), 0, 2);
}

Test(elementwise, clip_both_forms)
{
	oq_rt in[3], y;
	/* opset 6: attributes */
	in[0] = T(OQ_DT_FLOAT, (4), -3, -0.5, 0.5, 3);
	RUN_OK("Clip", 6, "x", in, "min=f:-1;max=f:1", &y);
	EXPECT(&y, OQ_DT_FLOAT, (4), -1, -0.5, 0.5, 1);
	in[0] = T(OQ_DT_FLOAT, (2), -1e30, 1e30);
	RUN_OK("Clip", 6, "x", in, "min=f:0", &y);
	EXPECT(&y, OQ_DT_FLOAT, (2), 0, 1e30f);

	/* opset 11+: optional inputs; min only, max only, NaN stays NaN */
	in[0] = T(OQ_DT_FLOAT, (3), -3, NAN, 3);
	in[1] = SCALAR(OQ_DT_FLOAT, -1);
	RUN_OK("Clip", 13, "x,lo", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (3), -1, NAN, 3);
	in[0] = T(OQ_DT_FLOAT, (3), -3, 0, 3);
	in[1] = SCALAR(OQ_DT_FLOAT, 1);
	RUN_OK("Clip", 13, "x,,hi", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (3), -3, 0, 1);
	/* min > max: every value becomes max */
	in[0] = T(OQ_DT_FLOAT, (3), -3, 0, 3);
	in[1] = SCALAR(OQ_DT_FLOAT, 2);
	in[2] = SCALAR(OQ_DT_FLOAT, 1);
	RUN_OK("Clip", 13, "x,lo,hi", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (3), 1, 1, 1);
	/* integers (opset 12+) */
	in[0] = T(OQ_DT_INT8, (4), -128, -5, 5, 127);
	in[1] = SCALAR(OQ_DT_INT8, -10);
	in[2] = SCALAR(OQ_DT_INT8, 4);
	RUN_OK("Clip", 13, "x,lo,hi", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT8, (4), -10, -5, 4, 4);
	in[0] = T(OQ_DT_UINT64, (2), 1, 300);
	in[1] = SCALAR(OQ_DT_UINT64, 200);
	RUN_OK("Clip", 13, "x,,hi", in, NULL, &y);
	EXPECT(&y, OQ_DT_UINT64, (2), 1, 200);
}

Test(elementwise, max_min_nan_and_variadic)
{
	oq_rt in[3], y;
	in[0] = T(OQ_DT_FLOAT, (3), 1, NAN, 3);
	in[1] = T(OQ_DT_FLOAT, (3), NAN, 2, 1);
	RUN_OK("Max", 13, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (3), NAN, NAN, 3);
	in[0] = T(OQ_DT_DOUBLE, (3), 1, NAN, 3);
	in[1] = T(OQ_DT_DOUBLE, (3), NAN, 2, 1);
	RUN_OK("Min", 13, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_DOUBLE, (3), NAN, NAN, 1);

	/* three inputs broadcasting to [2,2] */
	in[0] = T(OQ_DT_FLOAT, (2), 1, 5);
	in[1] = T(OQ_DT_FLOAT, (2, 1), 3, 0);
	in[2] = SCALAR(OQ_DT_FLOAT, 2);
	RUN_OK("Max", 13, "a,b,c", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (2, 2), 3, 5, 2, 5);
	in[0] = T(OQ_DT_FLOAT, (2), 1, 5);
	in[1] = T(OQ_DT_FLOAT, (2, 1), 3, 0);
	in[2] = SCALAR(OQ_DT_FLOAT, 2);
	RUN_OK("Sum", 13, "a,b,c", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (2, 2), 6, 10, 3, 7);
	in[0] = T(OQ_DT_FLOAT, (2), 1, 2);
	in[1] = T(OQ_DT_FLOAT, (2), 3, 5);
	RUN_OK("Mean", 13, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_FLOAT, (2), 2, 3.5);
	in[0] = T(OQ_DT_UINT32, (2), 4000000000.0, 1);
	in[1] = T(OQ_DT_UINT32, (2), 5, 2);
	RUN_OK("Min", 13, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_UINT32, (2), 5, 1); /* unsigned compare */
	in[0] = T(OQ_DT_INT16, (1, 2), -3, 9);
	RUN_OK("Max", 13, "a", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT16, (1, 2), -3, 9);
}

Test(elementwise, where_and_compare)
{
	oq_rt in[3], y;
	in[0] = T(OQ_DT_BOOL, (2, 1), 1, 0);
	in[1] = T(OQ_DT_INT64, (3), 1, 2, 3);
	in[2] = SCALAR(OQ_DT_INT64, -1);
	RUN_OK("Where", 16, "c,a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT64, (2, 3), 1, 2, 3, -1, -1, -1);
	in[0] = T(OQ_DT_FLOAT, (3), 1, NAN, 3);
	in[1] = T(OQ_DT_FLOAT, (1), 2);
	RUN_OK("Less", 13, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_BOOL, (3), 1, 0, 0);
	in[0] = T(OQ_DT_UINT64, (2), 1, 2);
	in[1] = T(OQ_DT_UINT64, (2), 1, 1);
	RUN_OK("GreaterOrEqual", 16, "a,b", in, NULL, &y);
	EXPECT(&y, OQ_DT_BOOL, (2), 1, 1);
	in[0] = T(OQ_DT_FLOAT, (4), INFINITY, -INFINITY, NAN, 1);
	RUN_OK("IsInf", 10, "x", in, "detect_negative=i:0", &y);
	EXPECT(&y, OQ_DT_BOOL, (4), 1, 0, 0, 0);
}

Test(elementwise, activations)
{
	oq_rt in[1], y;
	in[0] = T(OQ_DT_FLOAT, (3), -1, 0, 1);
	RUN_OK("Gelu", 20, "x", in, NULL, &y);
	cr_assert_float_eq(oq_rt_get(&y, 0), -0.15865525393145707, 1e-6);
	cr_assert_float_eq(oq_rt_get(&y, 2), 0.8413447460685429, 1e-6);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_FLOAT, (1), 1);
	RUN_OK("Gelu", 20, "x", in, "approximate=s:tanh", &y);
	cr_assert_float_eq(oq_rt_get(&y, 0), 0.8411919906082768, 1e-6);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_FLOAT, (4), -4, -1, 1, 4);
	RUN_OK("HardSwish", 14, "x", in, NULL, &y);
	/* x * (x/6 + 1/2), within float rounding */
	cr_assert_eq(oq_rt_get(&y, 0), 0);
	cr_assert_float_eq(oq_rt_get(&y, 1), -1.0 / 3, 1e-7);
	cr_assert_float_eq(oq_rt_get(&y, 2), 2.0 / 3, 1e-7);
	cr_assert_eq(oq_rt_get(&y, 3), 4);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_FLOAT, (2), 1, -1);
	RUN_OK("Mish", 18, "x", in, NULL, &y);
	cr_assert_float_eq(oq_rt_get(&y, 0), 0.8650983882673103, 1e-6); /* tanh(log(1+e)) */
	cr_assert_float_eq(oq_rt_get(&y, 1), -0.3034014613607354, 1e-6);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_INT32, (3), -5, 0, 5);
	RUN_OK("Relu", 14, "x", in, NULL, &y);
	EXPECT(&y, OQ_DT_INT32, (3), 0, 0, 5);
	in[0] = T(OQ_DT_FLOAT, (4), -2, -0.25, 0.25, 2);
	RUN_OK("Shrink", 9, "x", in, "lambd=f:0.5;bias=f:1", &y);
	EXPECT(&y, OQ_DT_FLOAT, (4), -1, 0, 0, 1);
}

Test(elementwise, cast_to_int_truncates_saturates_wraps)
{
	oq_rt in[1], y;
	in[0] = T(OQ_DT_FLOAT, (6), 1.9, -1.9, 200, -200, NAN, 0.5);
	RUN_OK("Cast", 13, "x", in, "to=i:3", &y); /* int8 */
	EXPECT(&y, OQ_DT_INT8, (6), 1, -1, 127, -128, 0, 0);
	in[0] = T(OQ_DT_FLOAT, (3), -5, 300.7, 254.9);
	RUN_OK("Cast", 13, "x", in, "to=i:2", &y); /* uint8 */
	EXPECT(&y, OQ_DT_UINT8, (3), 0, 255, 254);
	in[0] = T(OQ_DT_INT32, (3), 300, -129, 127);
	RUN_OK("Cast", 13, "x", in, "to=i:3", &y); /* int -> int keeps the low bits */
	EXPECT(&y, OQ_DT_INT8, (3), 44, 127, 127);
	in[0] = T(OQ_DT_FLOAT, (3), 0, -0.0, NAN);
	RUN_OK("Cast", 13, "x", in, "to=i:9", &y);
	EXPECT(&y, OQ_DT_BOOL, (3), 0, 0, 1);
	in[0] = T(OQ_DT_INT64, (2), -3, 7);
	RUN_OK("Cast", 1, "x", in, "to=s:FLOAT", &y); /* opset 1 names the type */
	EXPECT(&y, OQ_DT_FLOAT, (2), -3, 7);
}

Test(elementwise, cast_float16_rounding)
{
	oq_rt in[1], y;
	uint16_t *h;
	/* ties to even; 65520 is half-way to 2^16 and rounds up to Inf; the last value only rounds
	 * correctly straight from double (through float it would be a tie rounding down) */
	in[0] = T(OQ_DT_DOUBLE, (5), 1 + ldexp(1, -11), 1 + 3 * ldexp(1, -11), 65520, 65519,
		  1 + ldexp(1, -11) + ldexp(1, -40));
	RUN_OK("Cast", 13, "x", in, "to=i:10", &y);
	h = y.data;
	cr_assert_eq(h[0], 0x3C00);
	cr_assert_eq(h[1], 0x3C02);
	cr_assert_eq(h[2], 0x7C00);
	cr_assert_eq(h[3], 0x7BFF);
	cr_assert_eq(h[4], 0x3C01);
	oq_rt_release(&y);
	/* bfloat16: 1 + 2^-8 is a tie -> 1.0; 1 + 3*2^-8 -> 1 + 2^-6 */
	in[0] = T(OQ_DT_FLOAT, (2), 1 + ldexp(1, -8), 1 + 3 * ldexp(1, -8));
	RUN_OK("Cast", 13, "x", in, "to=i:16", &y);
	h = y.data;
	cr_assert_eq(h[0], 0x3F80);
	cr_assert_eq(h[1], 0x3F82);
	oq_rt_release(&y);
}

Test(elementwise, cast_float8_saturate)
{
	oq_rt in[1], y;
	uint8_t *b;
	in[0] = T(OQ_DT_FLOAT, (5), 1, 448, 500, -INFINITY, 0.5);
	RUN_OK("Cast", 19, "x", in, "to=i:17", &y); /* float8e4m3fn, saturate=1 */
	b = y.data;
	cr_assert_eq(b[0], 0x38);
	cr_assert_eq(b[1], 0x7E);
	cr_assert_eq(b[2], 0x7E);
	cr_assert_eq(b[3], 0xFE);
	cr_assert_eq(b[4], 0x30);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_FLOAT, (2), 500, -INFINITY);
	RUN_OK("Cast", 19, "x", in, "to=i:17;saturate=i:0", &y);
	b = y.data;
	cr_assert_eq(b[0] & 0x7F, 0x7F); /* NaN */
	cr_assert_eq(b[1] & 0x7F, 0x7F);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_FLOAT, (3), 1, 1e6, -1e6);
	RUN_OK("Cast", 19, "x", in, "to=i:19;saturate=i:0", &y); /* float8e5m2 keeps Inf */
	b = y.data;
	cr_assert_eq(b[0], 0x3C);
	cr_assert_eq(b[1], 0x7C);
	cr_assert_eq(b[2], 0xFC);
	oq_rt_release(&y);
	in[0] = T(OQ_DT_FLOAT, (2), 1e6, -0.0);
	RUN_OK("Cast", 19, "x", in, "to=i:18", &y); /* float8e4m3fnuz: max 240, no -0 */
	b = y.data;
	cr_assert_eq(b[0], 0x7F);
	cr_assert_eq(b[1], 0x00);
	oq_rt_release(&y);
	/* back to float */
	cr_assert_eq(oq_elementwise_decode_small(0x7E, OQ_DT_FLOAT8E4M3FN), 448.0);
	cr_assert_eq(oq_elementwise_decode_small(0x7B, OQ_DT_FLOAT8E5M2), 57344.0);
	cr_assert_eq(oq_elementwise_decode_small(0x01, OQ_DT_FLOAT8E4M3FN), ldexp(1, -9));
	cr_assert(isnan(oq_elementwise_decode_small(0x80, OQ_DT_FLOAT8E5M2FNUZ)));
}

Test(elementwise, cast_strings)
{
	oq_rt x, y;
	char msg[1024];
	const char *s[4] = {"1e-5", "-INF", "nan", "42"};
	int64_t d = 4;
	cr_assert_eq(oq_rt_alloc(&x, OQ_DT_STRING, 1, &d), OQ_OK);
	for (int i = 0; i < 4; i++) {
		x.strs[i].len = strlen(s[i]);
		x.strs[i].p = strdup(s[i]);
	}
	cr_assert_eq(run("Cast", 13, "x", &x, "to=i:1", &y, msg), OQ_OK, "%s", msg);
	EXPECT(&y, OQ_DT_FLOAT, (4), 1e-5f, -INFINITY, NAN, 42);
	x = T(OQ_DT_FLOAT, (3), 0.1, -2.5, INFINITY);
	cr_assert_eq(run("Cast", 13, "x", &x, "to=i:8", &y, msg), OQ_OK, "%s", msg);
	cr_assert_str_eq(y.strs[0].p, "0.1");
	cr_assert_str_eq(y.strs[1].p, "-2.5");
	cr_assert_str_eq(y.strs[2].p, "INF");
	oq_rt_release(&y);
}

/*
 * The float32 fast path against the double reference path: + - * / and
 * Max/Min are exact after one rounding, so float32 inputs through the fast
 * path and the same values as float64 (rounded to float) must agree
 * bit for bit, with broadcasting and any thread count.
 */
static void fast_vs_ref(const char *op, int nthreads)
{
	enum { R = 37, C = 1031 };
	oq_rt in[2], yf, yd;
	double *a = malloc(R * C * sizeof *a), *b = malloc(C * sizeof *b);
	for (int i = 0; i < R * C; i++)
		a[i] = (float)((i * 7919 % 1000) / 37.0 - 13);
	for (int i = 0; i < C; i++)
		b[i] = (float)((i * 104729 % 997) / 91.0 + 0.25);
	threads = nthreads;
	in[0] = mk(OQ_DT_FLOAT, 2, (int64_t[]){R, C}, a);
	in[1] = mk(OQ_DT_FLOAT, 1, (int64_t[]){C}, b);
	RUN_OK(op, 14, "a,b", in, NULL, &yf);
	in[0] = mk(OQ_DT_DOUBLE, 2, (int64_t[]){R, C}, a);
	in[1] = mk(OQ_DT_DOUBLE, 1, (int64_t[]){C}, b);
	RUN_OK(op, 14, "a,b", in, NULL, &yd);
	threads = 1;
	cr_assert_eq(yf.nelem, (size_t)R * C);
	for (size_t i = 0; i < yf.nelem; i++) {
		float f = ((float *)yf.data)[i], g = (float)((double *)yd.data)[i];
		cr_assert(f == g, "%s element %zu: fast %.9g, reference %.9g", op, i, f, g);
	}
	oq_rt_release(&yf);
	oq_rt_release(&yd);
	free(a);
	free(b);
}

Test(elementwise, fast_path_matches_reference)
{
	const char *ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		fast_vs_ref(ops[i], 1);
		fast_vs_ref(ops[i], 4);
	}
}

/*
 * float32 Add/Sub/Mul/Div rows on the CPU's best loop (AVX-512 or AVX2), on the AVX2 loop
 * (oq_elementwise_simd 2) and on the portable loop (0), where the CPU has them, against the IEEE operation on the same floats computed here, bit for
 * bit: a [1013] row (16- or 8-lane steps and a tail of 5) with a [1013] row, with a scalar [1] on either
 * side, signed zeros, Inf, NaN and division by zero among the values.
 */
Test(elementwise, simd_rows_match_the_operation)
{
	enum { N = 1013 };
	const char *ops[] = {"Add", "Sub", "Mul", "Div"};
	static double a[N], b[N];
	const double one_b = -0.375, one_a = 3.5;

	for (int i = 0; i < N; i++) {
		a[i] = (float)((i * 7919 % 1000) / 37.0 - 13);
		b[i] = (float)((i * 104729 % 997) / 91.0 - 5.25);
	}
	a[7] = -0.0, b[7] = 0.0, a[8] = INFINITY, b[9] = NAN, b[10] = 0.0, a[11] = -INFINITY, b[11] = INFINITY;
	for (size_t o = 0; o < 4; o++)
		for (int form = 0; form < 3; form++) /* b a row, b a scalar, a a scalar */
			for (int simd = 0; simd < 3; simd++) {
				oq_rt in[2], y;
				in[0] = form == 2 ? mk(OQ_DT_FLOAT, 1, (int64_t[]){1}, &one_a)
						  : mk(OQ_DT_FLOAT, 1, (int64_t[]){N}, a);
				in[1] = form == 1 ? mk(OQ_DT_FLOAT, 1, (int64_t[]){1}, &one_b)
						  : mk(OQ_DT_FLOAT, 1, (int64_t[]){N}, b);
				oq_elementwise_simd = simd;
				RUN_OK(ops[o], 14, "a,b", in, NULL, &y);
				oq_elementwise_simd = 1;
				cr_assert_eq(y.nelem, (size_t)N);
				for (int i = 0; i < N; i++) {
					float x = form == 2 ? (float)one_a : (float)a[i], z = form == 1 ? (float)one_b : (float)b[i];
					float want = o == 0 ? x + z : o == 1 ? x - z : o == 2 ? x * z : x / z;
					float got = ((float *)y.data)[i];
					cr_assert(!memcmp(&got, &want, 4) || (want != want && got != got),
						  "%s form %d simd %d element %d: %a, want %a", ops[o], form, simd, i,
						  (double)got, (double)want);
				}
				oq_rt_release(&y);
			}
}

/*
 * float32 Clip (both bounds, one bound, min > max) and Relu on the AVX-512, AVX2 and portable loops
 * (as above) against the definition computed here (x < lo ? lo : x > hi ? hi : x; min > max: max), bit for
 * bit on a [1013] row holding -0, +-Inf and NaN (NaN stays NaN).
 */
Test(elementwise, simd_clip_relu_match_the_definition)
{
	enum { N = 1013 };
	static double x[N];
	const double bounds[4][2] = {{-1.5, 2.25}, {0, INFINITY}, {-INFINITY, 0.5}, {2, 1}};

	for (int i = 0; i < N; i++)
		x[i] = (float)((i * 7919 % 1000) / 97.0 - 5);
	x[3] = -0.0, x[4] = INFINITY, x[5] = -INFINITY, x[6] = NAN, x[40] = 0.0;
	for (int c = 0; c <= 4; c++) /* four Clips, then Relu */
		for (int simd = 0; simd < 3; simd++) {
			oq_rt in[3], y;
			float lo = c < 4 ? (float)bounds[c][0] : 0, hi = c < 4 ? (float)bounds[c][1] : INFINITY;
			in[0] = mk(OQ_DT_FLOAT, 1, (int64_t[]){N}, x);
			oq_elementwise_simd = simd;
			if (c < 4) {
				in[1] = SCALAR(OQ_DT_FLOAT, bounds[c][0]);
				in[2] = SCALAR(OQ_DT_FLOAT, bounds[c][1]);
				RUN_OK("Clip", 13, "x,lo,hi", in, NULL, &y);
			} else {
				RUN_OK("Relu", 14, "x", in, NULL, &y);
			}
			oq_elementwise_simd = 1;
			for (int i = 0; i < N; i++) {
				float v = (float)x[i], want = lo > hi ? (v == v ? hi : v) : v < lo ? lo : v > hi ? hi : v;
				float got = ((float *)y.data)[i];
				cr_assert(!memcmp(&got, &want, 4) || (want != want && got != got),
					  "case %d simd %d element %d: %a, want %a", c, simd, i, (double)got, (double)want);
			}
			oq_rt_release(&y);
		}
}

/*
 * float32 Pow with a one-element exponent 2 runs as x * x: bit for bit the
 * definition (float)pow((double)x, 2) computed here, for exponents given as
 * float scalar, float [1], int64 scalar and double [1, 1], including -0,
 * subnormals (x * x underflows), values whose square overflows to Inf, Inf
 * and NaN; an exponent of higher rank than x takes the general path (same
 * values, broadcast shape).
 */
Test(elementwise, pow_square_is_exact)
{
	static const double xs[] = {0.0, -0.0, 1.0, -1.5, 3.0e-39, -1.0e-45, 1.0e-20, 1.8446744e19, -2.0e19, 3.4e38,
				    INFINITY, -INFINITY, NAN, 0.1, -7.123456789, 65504.0, 1.17549435e-38};
	enum { N = sizeof xs / sizeof xs[0] };
	double want[N];
	oq_rt in[2], y;

	for (int i = 0; i < N; i++)
		want[i] = (double)(float)pow((double)(float)xs[i], 2.0);
	for (int form = 0; form < 4; form++) {
		in[0] = mk(OQ_DT_FLOAT, 2, (int64_t[]){1, N}, xs);
		if (form == 0)
			in[1] = SCALAR(OQ_DT_FLOAT, 2);
		else if (form == 1)
			in[1] = T(OQ_DT_FLOAT, (1), 2);
		else if (form == 2)
			in[1] = SCALAR(OQ_DT_INT64, 2);
		else
			in[1] = T(OQ_DT_DOUBLE, (1, 1), 2);
		RUN_OK("Pow", 15, "x,e", in, NULL, &y);
		cr_assert_eq(y.nelem, (size_t)N);
		for (int i = 0; i < N; i++) {
			float g = ((float *)y.data)[i], w = (float)want[i];
			cr_assert(memcmp(&g, &w, sizeof g) == 0 || (isnan(g) && isnan(w)),
				  "form %d: %.9g ^ 2 = %.9g, want %.9g", form, xs[i], (double)g, (double)w);
		}
		oq_rt_release(&y);
	}
	in[0] = mk(OQ_DT_FLOAT, 1, (int64_t[]){N}, xs);
	in[1] = T(OQ_DT_FLOAT, (1, 1), 2);
	RUN_OK("Pow", 15, "x,e", in, NULL, &y);
	cr_assert_eq(y.rank, 2);
	for (int i = 0; i < N; i++) {
		float g = ((float *)y.data)[i], w = (float)want[i];
		cr_assert(memcmp(&g, &w, sizeof g) == 0 || (isnan(g) && isnan(w)), "rank-2 exponent, element %d", i);
	}
	oq_rt_release(&y);
}

Test(elementwise, unary_fast_path_close_to_reference)
{
	const char *ops[] = {"Sigmoid", "Tanh", "Exp", "Erf", "Softplus", "Elu", "HardSigmoid", "Mish", "Sqrt"};
	enum { N = 70001 };
	for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
		oq_rt in[1], yf, yd;
		double *a = malloc(N * sizeof *a);
		for (int i = 0; i < N; i++)
			a[i] = (float)((i % 2001) / 100.0 - 10);
		if (!strcmp(ops[o], "Sqrt"))
			for (int i = 0; i < N; i++)
				a[i] = fabs(a[i]);
		threads = 3;
		in[0] = mk(OQ_DT_FLOAT, 1, (int64_t[]){N}, a);
		RUN_OK(ops[o], 14, "x", in, NULL, &yf);
		in[0] = mk(OQ_DT_DOUBLE, 1, (int64_t[]){N}, a);
		RUN_OK(ops[o], 14, "x", in, NULL, &yd);
		threads = 1;
		for (size_t i = 0; i < N; i++) {
			double f = ((float *)yf.data)[i], g = ((double *)yd.data)[i];
			cr_assert(fabs(f - g) <= 1e-6 + 2e-6 * fabs(g), "%s(%g): fast %.9g, reference %.9g", ops[o],
				  a[i], f, g);
		}
		oq_rt_release(&yf);
		oq_rt_release(&yd);
		free(a);
	}
}

Test(elementwise, bad_inputs_are_errors)
{
	oq_rt in[2], y;
	char msg[1024];
	in[0] = T(OQ_DT_FLOAT, (2), 1, 2);
	in[1] = T(OQ_DT_INT32, (2), 1, 2);
	cr_assert_eq(run("Add", 14, "a,b", in, NULL, &y, msg), OQ_EINVAL);
	cr_assert(strstr(msg, "different types"), "%s", msg);
	in[0] = T(OQ_DT_INT32, (2), 1, 2);
	cr_assert_eq(run("Sqrt", 14, "x", in, NULL, &y, msg), OQ_EUNSUP);
	cr_assert(strstr(msg, "float"), "%s", msg);
	in[0] = T(OQ_DT_FLOAT, (2), 1, 2);
	cr_assert_eq(run("Cast", 21, "x", in, "to=i:23", &y, msg), OQ_EUNSUP); /* float4e2m1 */
	in[0] = T(OQ_DT_FLOAT, (2), 1, 2);
	in[1] = T(OQ_DT_FLOAT, (2), 1, 2);
	cr_assert_eq(run("Clip", 13, "x,lo", in, NULL, &y, msg), OQ_EINVAL); /* min not a scalar */
}

/*
 * Erf's AVX-512 and AVX2 paths (oq_erf_f32 at each oq_vm_simd level) against
 * its scalar reference oq_erf_ref (same operations): the same bits for every
 * element of arrays whose lengths leave every tail of a vector, at any offset
 * (without either, oq_erf_f32 is documented to call erff: its bits then); the
 * reference within 2 ulp of erf in double over a sweep of magnitudes from
 * subnormal to past the saturation point, with NaN, +-Inf and -0 exact.
 */
static int64_t ulp_diff(float a, float b)
{
	int32_t ia, ib;
	memcpy(&ia, &a, 4);
	memcpy(&ib, &b, 4);
	if (ia < 0)
		ia = INT32_MIN - ia;
	if (ib < 0)
		ib = INT32_MIN - ib;
	return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

Test(elementwise, erf_vector_vs_ref)
{
	enum { N = 4099 };
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, -1e-30f, 0.921875f, 0.92187494f,
					3.92f, 3.9200003f, -3.92f, 10.0f, -50.0f};
	uint32_t bits = 0x00000001u;

	cr_assert(x && y);
	for (int i = 0; i < N; i++) {
		/* magnitudes from 2^-149 to 16 evenly in the float bit patterns (geometric), alternating signs */
		float v;
		memcpy(&v, &bits, 4);
		x[i] = i % 2 ? -v : v;
		bits += 0x41800000u / N;
	}
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
		x[i * 7] = special[i];
	x[N - 1] = NAN;
	for (int level = 0; level <= 2; level++) { /* oq_vm_simd: none, the best, at most AVX2 */
		oq_vm_simd = level;
		for (size_t off = 0; off < 17; off++)
			for (size_t n = 0; n + off <= N; n += n < 40 ? 1 : 997) {
				oq_erf_f32(x + off, y, n);
				for (size_t i = 0; i < n; i++) {
					float r = oq_vm_fast() ? oq_erf_ref(x[off + i]) : erff(x[off + i]);
					cr_assert(memcmp(&r, &y[i], 4) == 0 || (isnan(r) && isnan(y[i])),
						  "level %d: erf(%.9g): vector %.9g, reference %.9g (offset %zu, n %zu)",
						  level, x[off + i], y[i], r, off, n);
				}
			}
	}
	oq_vm_simd = 1;
	for (int i = 0; i < N; i++) {
		float r = oq_erf_ref(x[i]), w = (float)erf((double)x[i]);
		if (isnan(x[i]))
			cr_assert(isnan(r));
		else
			cr_assert(ulp_diff(r, w) <= 2, "erf(%.9g) = %.9g, want %.9g", x[i], r, w);
	}
	cr_assert(oq_erf_ref(-0.0f) == 0 && signbit(oq_erf_ref(-0.0f)), "erf(-0) is -0");
	cr_assert(oq_erf_ref(INFINITY) == 1 && oq_erf_ref(-INFINITY) == -1);
	free(x);
	free(y);
}
