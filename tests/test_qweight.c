/*
 * test_qweight.c - weight and bias quantization (passes/quantize/qweight.c) and
 * weight-only mode (passes/quantize/weight_only.c).
 *
 * Quantized values are pinned by hand: the tensors are chosen so that the
 * scales are powers of two (int8/int4 "full" grid: s = max(max/qmax,
 * min/qmin)), so every x / s below is exact and the expected integers can
 * be read off. Numerics: a model is run by the executor before and after
 * the rewrite; the rewritten model must give exactly what the float model
 * gives with weights dequantized here by an independent reference (group
 * absmax / qmax, rint, clamp), and stay close to the float output (SQNR).
 * ONNX Runtime on a weight-only int4 block-32 model: tests/integration/
 * weight_only_ort.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/report/check.h"
#include "calib/exec/exec.h"
#include "gen_model.h"
#include "src/io/onnx_io.h"
#include "src/quant/qparams.h"
#include "passes/quantize/qweight.h"
#include "qtest.h"

/* ------------------------------------------------------------------ helpers */

static oq_wspec spec(int dtype, int axis, int64_t block, int symmetric, int grid)
{
	oq_wspec s;
	memset(&s, 0, sizeof s);
	s.dtype = dtype;
	s.axis = axis;
	s.block_size = block;
	s.symmetric = symmetric;
	s.sym_grid = grid;
	return s;
}

static oq_tensor *ftensor(int rank, const int64_t *dims, const float *v)
{
	oq_tensor *t = oq_tensor_from_floats(rank, dims, v);
	cr_assert_not_null(t);
	return t;
}

static double *to_d(const float *v, size_t n)
{
	double *d = malloc(n * sizeof *d);
	cr_assert_not_null(d);
	for (size_t i = 0; i < n; i++)
		d[i] = v[i];
	return d;
}

static float sc_at(const oq_tensor *t, size_t i)
{
	return (float)oq_tensor_get(t, i);
}

static oq_node *node_named(oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (!g->nodes[i]->dead && strcmp(g->nodes[i]->name, name) == 0)
			return g->nodes[i];
	return NULL;
}

static size_t count_op(oq_graph *g, oq_op op)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_nodes; i++)
		n += !g->nodes[i]->dead && g->nodes[i]->op == op;
	return n;
}

/* Is `name` one of g's initializers? */
static int has_init(const oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_inits; i++)
		if (strcmp(g->inits[i]->name, name) == 0)
			return g->inits[i]->init != NULL;
	return 0;
}

static void expect_clean(const oq_model *m)
{
	oq_problems p;
	memset(&p, 0, sizeof p);
	cr_assert_eq(oq_check_model(m, &p), OQ_OK);
	for (size_t i = 0; i < p.n; i++)
		cr_log_error("check: %s [%s] %s", p.v[i].where, p.v[i].rule, p.v[i].msg);
	cr_expect_eq(p.n, 0, "checker found %zu problems", p.n);
	oq_problems_free(&p);
}

/* Runs m on one float input; returns the first output (owned). */
static void run1(oq_model *m, const float *x, int rank, const int64_t *dims, oq_rt *out)
{
	oq_exec *e = NULL;
	oq_exec_opts eo = {.threads = 1};
	oq_rt in;
	oq_diag d;

	oq_diag_init(&d);
	memset(&in, 0, sizeof in);
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_OK, "exec: %s", d.msg);
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(in.data, x, in.nbytes);
	cr_assert_eq(oq_exec_run(e, &in, 1, out, 1, &d), OQ_OK, "run: %s", d.msg);
	oq_rt_release(&in);
	oq_exec_free(e);
}

static double sqnr_db(const oq_rt *ref, const oq_rt *got)
{
	double s = 0, n = 0;
	for (size_t i = 0; i < ref->nelem; i++) {
		double r = oq_rt_get(ref, i), e = r - oq_rt_get(got, i);
		s += r * r;
		n += e * e;
	}
	return n == 0 ? INFINITY : 10 * log10(s / n);
}

static double max_rel_diff(const oq_rt *ref, const oq_rt *got)
{
	double mx = 1e-12, md = 0;
	cr_assert_eq(ref->nelem, got->nelem);
	for (size_t i = 0; i < ref->nelem; i++) {
		double r = oq_rt_get(ref, i), dd = fabs(r - oq_rt_get(got, i));
		if (fabs(r) > mx)
			mx = fabs(r);
		if (dd > md)
			md = dd;
	}
	return md / mx;
}

/* deterministic values in [-1, 1) */
static float lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return (float)((*s >> 8) / 16777216.0) * 2.0f - 1.0f;
}

/*
 * Reference symmetric-narrow weight fake-quantization, written from the
 * formula and nothing else: w viewed as [outer, alen, inner]; per-axis
 * groups by the axis index (blk = 1, per_inner = 0) or blocked groups
 * (axis index / blk, inner index; per_inner = 1); s = absmax / qmax in
 * double rounded to float, q = clamp(rintf(x / s)), result q * s.
 */
static void ref_fake_quant(const float *w, float *out, size_t outer, size_t alen, size_t inner,
                           size_t blk, int per_inner, int qmax)
{
	for (size_t o = 0; o < outer; o++)
		for (size_t a0 = 0; a0 < alen; a0 += blk)
			for (size_t i0 = 0; i0 < (per_inner ? inner : 1); i0++) {
				double am = 0;
				float s;
				for (size_t a = a0; a < a0 + blk && a < alen; a++)
					for (size_t i = per_inner ? i0 : 0;
					     i < (per_inner ? i0 + 1 : inner); i++) {
						double v =
						    fabs((double)w[(o * alen + a) * inner + i]);
						am = v > am ? v : am;
					}
				s = am == 0 ? 1.0f : (float)(am / qmax);
				for (size_t a = a0; a < a0 + blk && a < alen; a++)
					for (size_t i = per_inner ? i0 : 0;
					     i < (per_inner ? i0 + 1 : inner); i++) {
						size_t k = (o * alen + a) * inner + i;
						float q = rintf(w[k] / s);
						q = q > qmax    ? (float)qmax
						    : q < -qmax ? (float)-qmax
						                : q;
						out[k] = q * s;
					}
			}
}

/* ------------------------------------------------------------------ oq_weight_quantize */

Test(qweight, per_tensor_int4_packing_odd_count)
{
	/* int4 full grid on [-1, 0.5]: s = max(0.5/7, 1/8) = 0.125.
	 * -1/0.125 = -8; 0.5 -> 4; 0.1875 -> 1.5 -> 2; 0.3125 -> 2.5 -> 2 (even); -0.0625 -> -0.5
	 * -> 0 */
	const float w[5] = {-1, 0.5f, 0.1875f, 0.3125f, -0.0625f};
	oq_tensor *t = ftensor(1, (const int64_t[]){5}, w), *q, *s, *z;
	oq_wspec sp = spec(OQ_DT_INT4, -1, 0, 1, OQ_GRID_FULL);
	oq_diag d;
	const unsigned char *b;

	oq_diag_init(&d);
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(s->rank, 0);
	cr_expect_eq(sc_at(s, 0), 0.125f);
	cr_expect_eq(z->dtype, OQ_DT_INT4);
	cr_expect_eq(oq_tensor_get_int(z, 0), 0);
	cr_assert_eq(q->dtype, OQ_DT_INT4);
	cr_assert_eq(q->nbytes, 3); /* 5 nibbles -> 3 bytes */
	b = q->data;
	/* low nibble first: byte0 = (-8 & 0xF) | 4 << 4 = 0x48; byte1 = 2 | 2 << 4 = 0x22; byte2 =
	 * 0 | pad 0 */
	cr_expect_eq(b[0], 0x48, "byte0 %#x", b[0]);
	cr_expect_eq(b[1], 0x22, "byte1 %#x", b[1]);
	cr_expect_eq(b[2], 0x00, "byte2 %#x", b[2]);
	oq_tensor_free(t);
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
}

Test(qweight, per_axis_middle_axis)
{
	/* w [2,2,2], axis 1, int8 full grid. Group a=0: w[o][0][i] = {1, -2, 0.5, 0.25}:
	 * s = max(1/127, 2/128) = 2^-6 -> q {64, -128, 32, 16}. Group a=1: {3.96875, -1, 0.75,
	 * -0.5}: s = max(3.96875/127 = 2^-5, 1/128) = 2^-5 -> q {127, -32, 24, -16}. */
	const float w[8] = {1, -2, 3.96875f, -1, 0.5f, 0.25f, 0.75f, -0.5f};
	const int64_t want[8] = {64, -128, 127, -32, 32, 16, 24, -16};
	oq_tensor *t = ftensor(3, (const int64_t[]){2, 2, 2}, w), *q, *s, *z;
	oq_wspec sp = spec(OQ_DT_INT8, 1, 0, 1, OQ_GRID_FULL);
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s->rank, 1);
	cr_assert_eq(s->dims[0], 2);
	cr_expect_eq(sc_at(s, 0), 0.015625f);
	cr_expect_eq(sc_at(s, 1), 0.03125f);
	cr_assert_eq(z->nelem, 2);
	for (size_t i = 0; i < 8; i++)
		cr_expect_eq(oq_tensor_get_int(q, i), want[i], "q[%zu] = %lld", i,
		             (long long)oq_tensor_get_int(q, i));
	oq_tensor_free(t);
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
}

Test(qweight, blocked_partial_last_block)
{
	/* w [5,2] (MatMul K=5, N=2), blocked axis 0, block 2 -> scale [3,2], last block one row.
	 * int8 full grid; each block holds a negative power of two that sets the scale (-p/-128):
	 * col 0: {1,-2} s 2^-6 -> {64,-128}; {-1,0.5} s 2^-7 -> {-128,64}; {-4} s 2^-5 -> {-128}
	 * col 1: {-0.5,0.25} s 2^-8 -> {-128,64}; {2.5*2^-9,-0.25} s 2^-9 -> {2 (2.5 even),-128};
	 *        {-8} s 2^-4 -> {-128} */
	const float w[10] = {1, -0.5f, -2, 0.25f, -1, 0.0048828125f, 0.5f, -0.25f, -4, -8};
	const int64_t want[10] = {64, -128, -128, 64, -128, 2, 64, -128, -128, -128};
	const float ws[6] = {0x1p-6f, 0x1p-8f, 0x1p-7f, 0x1p-9f, 0x1p-5f, 0x1p-4f};
	oq_tensor *t = ftensor(2, (const int64_t[]){5, 2}, w), *q, *s, *z;
	oq_wspec sp = spec(OQ_DT_INT8, 0, 2, 1, OQ_GRID_FULL);
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s->rank, 2);
	cr_expect(s->dims[0] == 3 && s->dims[1] == 2, "scale dims [%lld,%lld]",
	          (long long)s->dims[0], (long long)s->dims[1]);
	cr_expect(z->rank == 2 && z->dims[0] == 3 && z->dims[1] == 2 && z->dtype == OQ_DT_INT8);
	for (size_t i = 0; i < 6; i++)
		cr_expect_eq(sc_at(s, i), ws[i], "scale[%zu] = %g", i, (double)sc_at(s, i));
	for (size_t i = 0; i < 10; i++)
		cr_expect_eq(oq_tensor_get_int(q, i), want[i], "q[%zu] = %lld", i,
		             (long long)oq_tensor_get_int(q, i));
	oq_tensor_free(t);
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
}

Test(qweight, asymmetric_per_channel_uint8)
{
	/* rows (axis 0): {-1, 3}: s = 4/255, zp 64 -> q {0, 255}; {0.5, 2}: widened to [0,2],
	 * s = 2/255, zp 0 -> 0.5/s = 63.75 -> 64, 2 -> 255 */
	const float w[4] = {-1, 3, 0.5f, 2};
	oq_tensor *t = ftensor(2, (const int64_t[]){2, 2}, w), *q, *s, *z;
	oq_wspec sp = spec(OQ_DT_UINT8, 0, 0, 0, 0);
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_expect(fabs(sc_at(s, 0) - 4.0 / 255) < 1e-8);
	cr_expect(fabs(sc_at(s, 1) - 2.0 / 255) < 1e-8);
	cr_expect_eq(oq_tensor_get_int(z, 0), 64);
	cr_expect_eq(oq_tensor_get_int(z, 1), 0);
	cr_expect_eq(oq_tensor_get_int(q, 0), 0);
	cr_expect_eq(oq_tensor_get_int(q, 1), 255);
	cr_expect_eq(oq_tensor_get_int(q, 2), 64);
	cr_expect_eq(oq_tensor_get_int(q, 3), 255);
	oq_tensor_free(t);
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
}

/*
 * The per-channel 8-bit loop (one scale for a run of elements) against hand-read codes: ties to
 * even either side of 0, saturation at the narrow int8 grid and at uint8's ends, a zero point.
 * Fixed scales make every x / s exact.
 */
Test(qweight, per_channel_8bit_ties_and_saturation)
{
	/* int8 narrow [-127, 127], channel 0 scale 0.25, channel 1 scale 0.5, zero point 0:
	 * 0.125/0.25 = 0.5 -> 0; 1.5 -> 2; 2.5 -> 2; -0.5 -> 0; -1.5 -> -2; 400 -> 127; -400 -> -127;
	 * -127.5 -> -128 -> -127. Channel 1: 0.5 -> 0; 1.5 -> 2; 2.5 -> 2; -2.5 -> -2; 126.5 -> 126;
	 * 127.5 -> 128 -> 127; -127.5 -> -127; 0 -> 0. */
	const float w[16] = {0.125f, 0.375f, 0.625f, -0.125f, -0.375f, 100, -100, -31.875f,
			     0.25f,  0.75f,  1.25f,  -1.25f,  63.25f,  63.75f, -63.75f, 0};
	const int8_t want[16] = {0, 2, 2, 0, -2, 127, -127, -127, 0, 2, 2, -2, 126, 127, -127, 0};
	const float fs[2] = {0.25f, 0.5f};
	const int64_t fz[2] = {0, 0};
	/* uint8 asymmetric, scale 0.25, zero point 10: 0.5 -> 0 -> 10; 2.5 -> 2 -> 12; -10 -> 0;
	 * -10.5 -> -10 -> 0; -11 -> -1 -> 0 (saturated); 244.5 -> 244 -> 254; 245.5 -> 246 -> 256
	 * -> 255; 4e30 -> 255 */
	const float u[8] = {0.125f, 0.625f, -2.5f, -2.625f, -2.75f, 61.125f, 61.375f, 1e30f};
	const uint8_t uwant[8] = {10, 12, 0, 0, 0, 254, 255, 255};
	const float us[1] = {0.25f};
	const int64_t uz[1] = {10};
	oq_tensor *t = ftensor(2, (const int64_t[]){2, 8}, w), *q, *sc, *z;
	oq_wspec sp = spec(OQ_DT_INT8, 0, 0, 1, OQ_GRID_NARROW);
	oq_diag d;

	oq_diag_init(&d);
	sp.fixed_scale = fs;
	sp.fixed_zp = fz;
	sp.n_fixed = 2;
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &sc, &z, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < 16; i++)
		cr_expect_eq(((const int8_t *)q->data)[i], want[i], "element %zu: %d, want %d", i,
			     ((const int8_t *)q->data)[i], want[i]);
	oq_tensor_free(t);
	oq_tensor_free(q);
	oq_tensor_free(sc);
	oq_tensor_free(z);

	t = ftensor(2, (const int64_t[]){1, 8}, u);
	sp = spec(OQ_DT_UINT8, 0, 0, 0, OQ_GRID_FULL);
	sp.fixed_scale = us;
	sp.fixed_zp = uz;
	sp.n_fixed = 1;
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &sc, &z, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < 8; i++)
		cr_expect_eq(((const uint8_t *)q->data)[i], uwant[i], "element %zu: %d, want %d", i,
			     ((const uint8_t *)q->data)[i], uwant[i]);
	oq_tensor_free(t);
	oq_tensor_free(q);
	oq_tensor_free(sc);
	oq_tensor_free(z);
}

Test(qweight, bad_specs)
{
	const float w[4] = {1, 2, 3, NAN};
	oq_tensor *t = ftensor(2, (const int64_t[]){2, 2}, w), *q = NULL, *s = NULL, *z = NULL;
	oq_wspec sp = spec(OQ_DT_INT8, 2, 0, 1, 0);
	oq_diag d;

	oq_diag_init(&d);
	cr_expect_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_EINVAL); /* axis 2 of rank 2 */
	sp = spec(OQ_DT_FLOAT, -1, 0, 1, 0);
	cr_expect_neq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK);
	sp = spec(OQ_DT_INT8, -1, 0, 1, 0);
	oq_diag_init(&d);
	cr_expect_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_EINVAL); /* NaN */
	cr_expect(strstr(d.msg, "NaN") != NULL, "%s", d.msg);
	oq_tensor_free(t);
}

/* ------------------------------------------------------------------ insert_dq on graphs */

/*
 * Gemm y = x * W + C with W [2,2] (transB 0, channel axis 1):
 * col 0 {1, -2} -> full-grid s 2^-6; col 1 {-0.5, 0.25} -> s 2^-8.
 */
static gen_model *gemm_model(int opset, const double *c)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;

	gen_opset(g, "", opset);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(1, -0.5, -2, 0.25));
	gen_init(g, mg, "C", OQ_DT_FLOAT, GEN_SHAPE(2), c);
	gen_node(g, mg, "Gemm", "gemm", "x,W,C", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	return g;
}

Test(qweight, insert_dq_structure_and_bias)
{
	gen_model *g = gemm_model(21, GEN_VALS(0.25, -0.01));
	oq_model *m = NULL;
	oq_diag d;
	oq_node *n, *dq, *bdq;
	oq_wspec sp = spec(OQ_DT_INT8, 1, 0, 1, OQ_GRID_FULL);
	const oq_tensor *bq, *bs;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	n = node_named(m->graph, "gemm");
	/* in_scale 0.5: bias scales 0.5 * 2^-6 = 2^-7 and 0.5 * 2^-8 = 2^-9;
	 * 0.25 / 2^-7 = 32; -0.01 / 2^-9 = -5.12 -> -5 */
	cr_assert_eq(oq_weight_insert_dq(m->graph, n, 1, 2, 0.5f, 1.0f, &sp, &d), OQ_OK, "%s",
	             d.msg);
	cr_assert_eq(oq_graph_toposort(m->graph, &d), OQ_OK);
	dq = n->inputs[1]->producer;
	cr_assert_not_null(dq);
	cr_expect_eq(dq->op, OQ_OP_DequantizeLinear);
	cr_expect_str_eq(dq->inputs[0]->name, "W_quantized");
	cr_expect_str_eq(dq->inputs[1]->name, "W_scale");
	cr_expect_str_eq(dq->inputs[2]->name, "W_zero_point");
	cr_expect_str_eq(n->inputs[1]->name, "W_DequantizeLinear_Output");
	cr_expect_eq(oq_node_attr_int(dq, "axis", -5), 1);
	cr_expect_null(oq_node_attr(dq, "block_size"));
	cr_expect_eq(dq->inputs[0]->init->dtype, OQ_DT_INT8);
	cr_expect_eq(sc_at(dq->inputs[1]->init, 0), 0x1p-6f);
	cr_expect_eq(sc_at(dq->inputs[1]->init, 1), 0x1p-8f);
	bdq = n->inputs[2]->producer;
	cr_assert_not_null(bdq);
	cr_expect_eq(bdq->op, OQ_OP_DequantizeLinear);
	cr_expect_eq(bdq->n_inputs, 2, "bias DQ has no zero point");
	cr_expect_eq(oq_node_attr_int(bdq, "axis", -5), 0);
	bq = bdq->inputs[0]->init;
	bs = bdq->inputs[1]->init;
	cr_assert_eq(bq->dtype, OQ_DT_INT32);
	cr_expect_eq(oq_tensor_get_int(bq, 0), 32);
	cr_expect_eq(oq_tensor_get_int(bq, 1), -5);
	cr_expect_eq(sc_at(bs, 0), 0x1p-7f);
	cr_expect_eq(sc_at(bs, 1), 0x1p-9f);
	/* the float initializers go at the driver's drop of unread initializers */
	cr_expect(has_init(m->graph, "W"));
	cr_assert_eq(oq_graph_rebuild_uses(m->graph), OQ_OK);
	cr_expect_eq(oq_graph_drop_unused_inits(m->graph), 2);
	cr_expect_not(has_init(m->graph, "W"));
	cr_expect_not(has_init(m->graph, "C"));
	cr_expect_eq(m->graph->n_inits, 5); /* W_q, W_scale, W_zp, C_q, C_scale */
	expect_clean(m);
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, bias_overflow_enlarges_weight_scale)
{
	gen_model *g = gemm_model(21, GEN_VALS(100, 0.001));
	oq_model *m = NULL;
	oq_diag d;
	oq_node *n, *dq, *bdq;
	oq_wspec sp = spec(OQ_DT_INT8, 1, 0, 1, OQ_GRID_FULL);
	const oq_tensor *wq, *ws, *bq, *bs;
	double want;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	n = node_named(m->graph, "gemm");
	/* in_scale 1e-6: 100 / (1e-6 * 2^-6) = 6.4e9 > 2^31-1, so channel 0's weight scale grows to
	 * 100 / (1e-6 * 2147483647) * (1 + 2^-20) = 0.0465662 and W[:,0] = {1, -2} re-quantizes to
	 * rint(21.47) = 21 and rint(-42.95) = -43; channel 1 keeps 2^-8 and {-128, 64}. */
	cr_assert_eq(oq_weight_insert_dq(m->graph, n, 1, 2, 1e-6f, 1.0f, &sp, &d), OQ_OK, "%s",
	             d.msg);
	dq = n->inputs[1]->producer;
	bdq = n->inputs[2]->producer;
	wq = dq->inputs[0]->init;
	ws = dq->inputs[1]->init;
	bq = bdq->inputs[0]->init;
	bs = bdq->inputs[1]->init;
	want = 100.0 / (1e-6 * 2147483647.0) * (1 + 0x1p-20);
	cr_expect(fabs(sc_at(ws, 0) - want) < 1e-6 * want, "scale %.9g want %.9g",
	          (double)sc_at(ws, 0), want);
	cr_expect_eq(sc_at(ws, 1), 0x1p-8f);
	cr_expect_eq(oq_tensor_get_int(wq, 0), 21);
	cr_expect_eq(oq_tensor_get_int(wq, 2), -43);
	cr_expect_eq(oq_tensor_get_int(wq, 1), -128);
	cr_expect_eq(oq_tensor_get_int(wq, 3), 64);
	/* bias 0 now just fits: about (2^31-1)/(1+2^-20) */
	cr_expect(oq_tensor_get_int(bq, 0) <= 2147483647 && oq_tensor_get_int(bq, 0) > 2147000000,
	          "bias q %lld", (long long)oq_tensor_get_int(bq, 0));
	/* bias 1: 0.001 / (1e-6 * 2^-8) = 256000 */
	cr_expect_eq(oq_tensor_get_int(bq, 1), 256000);
	/* bias dequantizes back to ~100 */
	cr_expect(fabs((double)oq_tensor_get_int(bq, 0) * sc_at(bs, 0) - 100) < 1e-3);
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, opset_and_dtype_refused)
{
	gen_model *g = gemm_model(13, GEN_VALS(0, 0));
	oq_model *m = NULL;
	oq_diag d;
	oq_wspec sp = spec(OQ_DT_INT4, 0, 32, 1, 0);

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(
	    oq_weight_insert_dq(m->graph, node_named(m->graph, "gemm"), 1, -1, 0, 1, &sp, &d),
	    OQ_EUNSUP);
	cr_expect(strstr(d.msg, "'gemm'") && strstr(d.msg, "opset 21"), "%s", d.msg);
	cr_expect(has_init(m->graph, "W"));
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, float16_weight_left_alone)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	oq_model *m = NULL;
	oq_opts o;
	oq_diag d;
	int changed = 1;
	char *buf = NULL;
	size_t len = 0;
	FILE *log = open_memstream(&buf, &len);

	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT16, GEN_SHAPE(1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT16, GEN_SHAPE(2, 2), GEN_VALS(1, 2, 3, 4));
	gen_node(g, mg, "MatMul", "mm", "x,W", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT16, GEN_SHAPE(1, 2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_expect_not(oq_weight_quantizable(oq_graph_find(m->graph, "W")));
	oq_opts_init(&o);
	o.weight_only = 1;
	o.log = log;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	fclose(log);
	cr_expect_eq(changed, 0);
	cr_expect(buf && strstr(buf, "'W'") && strstr(buf, "stays float"), "log: %s",
	          buf ? buf : "");
	cr_expect_eq(count_op(m->graph, OQ_OP_DequantizeLinear), 0);
	free(buf);
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, shared_weight_copied_then_reused)
{
	/* W feeds MatMul a, MatMul b and an Add (as an activation). */
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	oq_model *m = NULL;
	oq_diag d;
	oq_node *a, *b;
	oq_value *w;
	oq_wspec sp = spec(OQ_DT_INT8, 1, 0, 1, OQ_GRID_NARROW);

	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(0.3, -0.7, 1.1, 0.2));
	gen_node(g, mg, "MatMul", "a", "x,W", "ya");
	gen_node(g, mg, "MatMul", "b", "x,W", "yb");
	gen_node(g, mg, "Add", "add", "x,W", "yc");
	gen_output(g, mg, "ya", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(g, mg, "yb", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(g, mg, "yc", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	a = node_named(m->graph, "a");
	b = node_named(m->graph, "b");
	w = oq_graph_find(m->graph, "W");

	cr_assert_eq(oq_weight_insert_dq(m->graph, a, 1, -1, 0, 1, &sp, &d), OQ_OK, "%s", d.msg);
	/* b and add still read the float W: kept, unchanged */
	cr_expect_eq(oq_graph_find(m->graph, "W"), w);
	cr_expect_not_null(w->init);
	cr_expect_eq(w->init->dtype, OQ_DT_FLOAT);
	cr_expect_eq(b->inputs[1], w);
	cr_expect_neq(a->inputs[1], w);

	cr_assert_eq(oq_weight_insert_dq(m->graph, b, 1, -1, 0, 1, &sp, &d), OQ_OK, "%s", d.msg);
	/* same weight, same spec: b reuses a's DQ */
	cr_expect_eq(b->inputs[1], a->inputs[1]);
	cr_expect_eq(count_op(m->graph, OQ_OP_DequantizeLinear), 1);
	cr_expect(has_init(m->graph, "W"), "Add still reads W");

	cr_assert_eq(oq_graph_toposort(m->graph, &d), OQ_OK);
	expect_clean(m);
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, different_spec_is_a_second_copy)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	oq_model *m = NULL;
	oq_diag d;
	oq_node *a, *b;
	oq_wspec s8 = spec(OQ_DT_INT8, 1, 0, 1, OQ_GRID_NARROW);
	oq_wspec s4 = spec(OQ_DT_INT4, 0, 2, 1, OQ_GRID_NARROW);

	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(2, 2), GEN_VALS(0.3, -0.7, 1.1, 0.2));
	gen_node(g, mg, "MatMul", "a", "x,W", "ya");
	gen_node(g, mg, "MatMul", "b", "x,W", "yb");
	gen_output(g, mg, "ya", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(g, mg, "yb", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	a = node_named(m->graph, "a");
	b = node_named(m->graph, "b");
	cr_assert_eq(oq_weight_insert_dq(m->graph, a, 1, -1, 0, 1, &s8, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_weight_insert_dq(m->graph, b, 1, -1, 0, 1, &s4, &d), OQ_OK, "%s", d.msg);
	cr_expect_neq(a->inputs[1], b->inputs[1]);
	cr_expect_eq(count_op(m->graph, OQ_OP_DequantizeLinear), 2);
	cr_expect_str_eq(b->inputs[1]->producer->inputs[0]->name, "W_quantized_1");
	cr_expect_eq(oq_node_attr_int(b->inputs[1]->producer, "block_size", 0), 2);
	/* last user gone: the float W goes at the driver's drop of unread initializers */
	cr_assert_eq(oq_graph_rebuild_uses(m->graph), OQ_OK);
	cr_expect_eq(oq_graph_drop_unused_inits(m->graph), 1);
	cr_expect_not(has_init(m->graph, "W"));
	cr_expect_eq(m->graph->n_inits, 6);
	cr_assert_eq(oq_graph_toposort(m->graph, &d), OQ_OK);
	expect_clean(m);
	oq_model_free(m);
	gen_free(g);
}

/* ------------------------------------------------------------------ numerics */

enum { K_MM = 80, N_MM = 8, M_MM = 3 };

static gen_model *matmul_model(const float *w)
{
	double *wd = to_d(w, K_MM * N_MM);
	gen_model *g = gen_matmul(M_MM, K_MM, N_MM, wd);

	free(wd);
	return g;
}

/* float run, weight-only run and reference run of a generated model pair */
typedef struct numcase {
	gen_model *fl;       /* float model */
	gen_model *ref;      /* same model with the reference fake-quantized weights */
	const float *x;      /* input */
	int rank;            /* input rank */
	const int64_t *dims; /* input dims */
	oq_opts o;           /* weight-only options */
	double min_sqnr;     /* dB against the float output */
} numcase;

static void run_case(numcase *c, oq_model **keep)
{
	oq_model *mf = NULL, *mq = NULL, *mr = NULL;
	oq_rt yf, yq, yr;
	oq_diag d;
	int changed = 0;
	double rel, sq;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(c->fl, &mf, &d), OQ_OK, "%s", d.msg);
	run1(mf, c->x, c->rank, c->dims, &yf);
	oq_model_free(mf);
	cr_assert_eq(gen_load(c->ref, &mr, &d), OQ_OK, "%s", d.msg);
	run1(mr, c->x, c->rank, c->dims, &yr);
	oq_model_free(mr);
	cr_assert_eq(gen_load(c->fl, &mq, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_quantize_weight_only(mq->graph, &c->o, &d, &changed), OQ_OK, "%s", d.msg);
	cr_expect_eq(changed, 1);
	cr_expect_eq(count_op(mq->graph, OQ_OP_DequantizeLinear), 1);
	expect_clean(mq);
	run1(mq, c->x, c->rank, c->dims, &yq);
	rel = max_rel_diff(&yr, &yq);
	sq = sqnr_db(&yf, &yq);
	cr_expect(rel < 1e-6, "quantized model vs reference dequantized weights: max rel diff %g",
	          rel);
	cr_expect(sq > c->min_sqnr, "SQNR %.1f dB (want > %.1f)", sq, c->min_sqnr);
	cr_log_info("max rel diff vs reference %.3g, SQNR vs float %.1f dB", rel, sq);
	oq_rt_release(&yf);
	oq_rt_release(&yq);
	oq_rt_release(&yr);
	if (keep)
		*keep = mq;
	else
		oq_model_free(mq);
}

static void fill(float *v, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		v[i] = lcg(&seed);
}

Test(qweight, matmul_int8_per_channel_numerics)
{
	static float w[K_MM * N_MM], wr[K_MM * N_MM], x[M_MM * K_MM];
	numcase c;

	fill(w, K_MM * N_MM, 1);
	fill(x, M_MM * K_MM, 2);
	/* per channel = per column of [K,N]: outer K... view as [1, K, N] grouped by inner index */
	ref_fake_quant(w, wr, 1, K_MM, N_MM, K_MM, 1, 127);
	memset(&c, 0, sizeof c);
	c.fl = matmul_model(w);
	c.ref = matmul_model(wr);
	c.x = x;
	c.rank = 2;
	c.dims = (const int64_t[]){M_MM, K_MM};
	oq_opts_init(&c.o);
	c.o.weight_only = 1;
	c.min_sqnr = 30;
	run_case(&c, NULL);
	gen_free(c.fl);
	gen_free(c.ref);
}

Test(qweight, matmul_int4_block32_numerics)
{
	static float w[K_MM * N_MM], wr[K_MM * N_MM], x[M_MM * K_MM];
	numcase c;
	oq_model *mq = NULL;
	oq_node *dq;

	fill(w, K_MM * N_MM, 3);
	fill(x, M_MM * K_MM, 4);
	/* blocks of 32 along K (80 = 32 + 32 + 16), one scale per (block, column) */
	ref_fake_quant(w, wr, 1, K_MM, N_MM, 32, 1, 7);
	memset(&c, 0, sizeof c);
	c.fl = matmul_model(w);
	c.ref = matmul_model(wr);
	c.x = x;
	c.rank = 2;
	c.dims = (const int64_t[]){M_MM, K_MM};
	oq_opts_init(&c.o);
	c.o.weight_only = 1;
	c.o.weight_type = OQ_DT_INT4;
	c.o.granularity = OQ_GRAN_BLOCK;
	c.o.block_size = 32;
	c.min_sqnr = 12; /* 4-bit: about 6 dB per bit less than int8 */
	run_case(&c, &mq);
	dq = node_named(mq->graph, "mm")->inputs[1]->producer;
	cr_assert_not_null(dq);
	cr_expect_eq(oq_node_attr_int(dq, "axis", -1), 0);
	cr_expect_eq(oq_node_attr_int(dq, "block_size", 0), 32);
	cr_expect_eq(dq->inputs[1]->init->dims[0], 3);
	cr_expect_eq(dq->inputs[1]->init->dims[1], N_MM);
	cr_expect_eq(dq->inputs[0]->init->nbytes, (size_t)K_MM * N_MM / 2);
	oq_model_free(mq);
	gen_free(c.fl);
	gen_free(c.ref);
}

enum { GK = 24, GN = 6 };

static gen_model *gemm_tb_model(const float *w, const float *cb)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	double *wd = to_d(w, GN * GK), *cd = to_d(cb, GN);

	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, GK));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(GN, GK), wd);
	gen_init(g, mg, "C", OQ_DT_FLOAT, GEN_SHAPE(GN), cd);
	n = gen_node(g, mg, "Gemm", "gemm", "x,W,C", "y");
	gen_attr_int(g, n, "transB", 1);
	gen_attr_float(g, n, "alpha", 0.5f);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, GN));
	free(wd);
	free(cd);
	return g;
}

Test(qweight, gemm_transb_int8_per_channel_numerics)
{
	static float w[GN * GK], wr[GN * GK], cb[GN], x[2 * GK];
	numcase c;
	oq_model *mq = NULL;
	oq_node *n;

	fill(w, GN * GK, 5);
	fill(cb, GN, 6);
	fill(x, 2 * GK, 7);
	/* transB: W [N,K], channel axis 0 = one scale per row: view [N, K, 1] grouped by axis */
	ref_fake_quant(w, wr, GN, GK, 1, GK, 0, 127);
	memset(&c, 0, sizeof c);
	c.fl = gemm_tb_model(w, cb);
	c.ref = gemm_tb_model(wr, cb);
	c.x = x;
	c.rank = 2;
	c.dims = (const int64_t[]){2, GK};
	oq_opts_init(&c.o);
	c.o.weight_only = 1;
	c.min_sqnr = 30;
	run_case(&c, &mq);
	n = node_named(mq->graph, "gemm");
	cr_expect_eq(oq_node_attr_int(n->inputs[1]->producer, "axis", -1), 0);
	cr_expect_str_eq(n->inputs[2]->name, "C", "weight-only leaves the bias float");
	oq_model_free(mq);
	gen_free(c.fl);
	gen_free(c.ref);
}

static gen_model *conv_model(const float *w, const float *b)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;
	double *wd = to_d(w, 4 * 2 * 3 * 3), *bd = to_d(b, 4);

	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 5, 5));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(4, 2, 3, 3), wd);
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(4), bd);
	n = gen_node(g, mg, "Conv", "conv", "x,W,B", "y");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 5, 5));
	free(wd);
	free(bd);
	return g;
}

Test(qweight, conv_int8_per_channel_numerics)
{
	static float w[72], wr[72], b[4], x[50];
	static const char *const ops[] = {"Conv"};
	numcase c;

	fill(w, 72, 8);
	fill(b, 4, 9);
	fill(x, 50, 10);
	/* channel axis 0 of [4,2,3,3]: view [4, 18, 1] grouped by axis index... i.e. one group per
	 * output channel: outer 1, alen 4, inner 18, per-axis */
	ref_fake_quant(w, wr, 1, 4, 18, 1, 0, 127);
	memset(&c, 0, sizeof c);
	c.fl = conv_model(w, b);
	c.ref = conv_model(wr, b);
	c.x = x;
	c.rank = 4;
	c.dims = (const int64_t[]){1, 2, 5, 5};
	oq_opts_init(&c.o);
	c.o.weight_only = 1;
	c.o.op_types = ops;
	c.o.n_op_types = 1;
	c.min_sqnr = 30;
	run_case(&c, NULL);
	gen_free(c.fl);
	gen_free(c.ref);
}

Test(qweight, include_exclude)
{
	static float w[K_MM * N_MM];
	gen_model *g;
	oq_model *m = NULL;
	oq_opts o;
	oq_diag d;
	int changed = 0;
	const char *const ex_op[] = {"MatMul"}, *const ex_w[] = {"W"},
	                  *const inc_other[] = {"nope"}, *const inc_node[] = {"mm"};

	fill(w, K_MM * N_MM, 11);
	g = matmul_model(w);
	oq_diag_init(&d);
	oq_opts_init(&o);
	o.weight_only = 1;
	o.exclude = ex_op;
	o.n_exclude = 1;
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK);
	cr_expect_eq(changed, 0, "excluded by op type");
	o.exclude = ex_w;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK);
	cr_expect_eq(changed, 0, "excluded by weight name");
	o.exclude = NULL;
	o.n_exclude = 0;
	o.include = inc_other;
	o.n_include = 1;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK);
	cr_expect_eq(changed, 0, "not included");
	o.include = inc_node;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK);
	cr_expect_eq(changed, 1, "included by node name");
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, per_tensor_weight_scalar_bias_scale)
{
	gen_model *g = gemm_model(21, GEN_VALS(0.25, -0.01));
	oq_model *m = NULL;
	oq_diag d;
	oq_node *n, *bdq;
	oq_wspec sp = spec(OQ_DT_INT8, -1, 0, 1, OQ_GRID_FULL);

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	n = node_named(m->graph, "gemm");
	/* one scale max(1/127, 2/128) = 2^-6; bias scale 0.5 * 2^-6 = 2^-7:
	 * 0.25 / 2^-7 = 32, -0.01 / 2^-7 = -1.28 -> -1 */
	cr_assert_eq(oq_weight_insert_dq(m->graph, n, 1, 2, 0.5f, 1.0f, &sp, &d), OQ_OK, "%s",
	             d.msg);
	cr_expect_eq(n->inputs[1]->producer->inputs[1]->init->rank, 0);
	cr_expect_null(oq_node_attr(n->inputs[1]->producer, "axis"));
	bdq = n->inputs[2]->producer;
	cr_assert_not_null(bdq);
	cr_expect_null(oq_node_attr(bdq, "axis"));
	cr_expect_eq(bdq->inputs[1]->init->rank, 0);
	cr_expect_eq(sc_at(bdq->inputs[1]->init, 0), 0x1p-7f);
	cr_expect_eq(oq_tensor_get_int(bdq->inputs[0]->init, 0), 32);
	cr_expect_eq(oq_tensor_get_int(bdq->inputs[0]->init, 1), -1);
	cr_assert_eq(oq_graph_toposort(m->graph, &d), OQ_OK);
	expect_clean(m);
	oq_model_free(m);
	gen_free(g);
}

Test(qweight, external_data_weight_pages_released_and_reread)
{
	/* W lives in an external data file (mmapped, borrowed). MatMul's copy is quantized and W's
	 * pages are released; the Add still reads the float W, which must come back intact. */
	static float w[K_MM * N_MM], x[K_MM * N_MM];
	char dir[] = "/tmp/oq_qwext_XXXXXX", path[600], cmd[700];
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg;
	oq_model *m0 = NULL, *m = NULL;
	oq_save_opts so;
	oq_opts o;
	oq_diag d;
	oq_rt y0, y1;
	oq_value *wv;
	double *wd;
	int changed = 0;
	oq_exec *e = NULL;
	oq_exec_opts eo = {.threads = 1};
	oq_rt in, out[2];

	fill(w, K_MM * N_MM, 14);
	fill(x, K_MM * N_MM, 15);
	wd = to_d(w, K_MM * N_MM);
	gen_opset(g, "", 21);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(K_MM, N_MM));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(K_MM, N_MM), wd);
	gen_node(g, mg, "Add", "add", "x,W", "ya");
	gen_output(g, mg, "ya", OQ_DT_FLOAT, GEN_SHAPE(K_MM, N_MM));
	gen_node(g, mg, "Transpose", "t", "x", "xt");
	gen_node(g, mg, "MatMul", "mm", "xt,W", "ym");
	gen_output(g, mg, "ym", OQ_DT_FLOAT, GEN_SHAPE(N_MM, N_MM));
	free(wd);
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/m.onnx", dir);
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m0, &d), OQ_OK, "%s", d.msg);
	memset(&so, 0, sizeof so);
	so.external_data = 1;
	so.external_threshold = 64;
	cr_assert_eq(oq_model_save(m0, path, &so, NULL, &d), OQ_OK, "%s", d.msg);
	oq_model_free(m0);
	cr_assert_eq(oq_model_load(path, &m, &d), OQ_OK, "%s", d.msg);
	wv = oq_graph_find(m->graph, "W");
	cr_assert(wv && wv->init && wv->init->external && !wv->init->owned,
	          "W is borrowed external data");
	oq_opts_init(&o);
	o.weight_only = 1;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	cr_assert_eq(changed, 1);
	cr_expect(has_init(m->graph, "W"), "Add still reads W");
	/* the float W as the Add sees it after the release: x + W */
	memset(&in, 0, sizeof in);
	memset(out, 0, sizeof out);
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, 2, (const int64_t[]){K_MM, N_MM}), OQ_OK);
	memcpy(in.data, x, in.nbytes);
	cr_assert_eq(oq_exec_run(e, &in, 1, out, 2, &d), OQ_OK, "%s", d.msg);
	y0 = out[0];
	y1 = out[1];
	for (size_t i = 0; i < (size_t)K_MM * N_MM; i++)
		cr_assert_eq((float)oq_rt_get(&y0, i), x[i] + w[i], "ya[%zu]", i);
	cr_expect_eq(y1.nelem, (size_t)N_MM * N_MM);
	oq_rt_release(&in);
	oq_rt_release(&y0);
	oq_rt_release(&y1);
	oq_exec_free(e);
	oq_model_free(m);
	gen_free(g);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

/* ------------------------------------------------------------------ FP8 and --weight-method mse */

Test(qweight, fp8_per_channel_encodings)
{
	/* row 0 {896, -1, 0.5}: s = 896/448 = 2 -> 448 (0x7E), -0.5 (0xB0), 0.25 (0x28);
	 * row 1 {3, 0.1, -0.75}: s = 3/448 -> 448 (0x7E); 0.1*448/3 = 14.93 -> 15 = 1.875*2^3
	 * (0 1010 111 = 0x57); -0.75*448/3 = -112 = -1.75*2^6 (1 1101 110 = 0xEE) */
	const float w[6] = {896, -1, 0.5f, 3, 0.1f, -0.75f};
	const uint8_t want[6] = {0x7E, 0xB0, 0x28, 0x7E, 0x57, 0xEE};
	oq_tensor *t = ftensor(2, (const int64_t[]){2, 3}, w), *q, *s, *z;
	oq_wspec sp = spec(OQ_DT_FLOAT8E4M3FN, 0, 0, 1, 0);
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(q->dtype, OQ_DT_FLOAT8E4M3FN);
	cr_expect_eq(z->dtype, OQ_DT_FLOAT8E4M3FN);
	cr_expect_eq(sc_at(s, 0), 2.0f);
	cr_expect_eq(sc_at(s, 1), (float)(3.0 / 448));
	for (int i = 0; i < 6; i++)
		cr_expect_eq(((const uint8_t *)q->data)[i], want[i], "element %d: 0x%02x", i,
		             ((const uint8_t *)q->data)[i]);
	cr_expect_eq(((const uint8_t *)z->data)[0], 0);
	cr_expect_eq(((const uint8_t *)z->data)[1], 0);
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
	/* asymmetric or blocked FP8 is refused */
	sp = spec(OQ_DT_FLOAT8E4M3FN, 0, 0, 0, 0);
	cr_expect_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_EUSAGE);
	sp = spec(OQ_DT_FLOAT8E4M3FN, 1, 2, 1, 0);
	cr_expect_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "float8e4m3fn") != NULL, "%s", d.msg);
	oq_tensor_free(t);
}

/* Sum of squared round-trip errors of row r (n values) with int8 scale s, zp 0, grid [-127,127]. */
static double row_sse(const float *x, size_t n, float s)
{
	double e = 0;
	for (size_t i = 0; i < n; i++) {
		double v = rint((double)x[i] / s);
		v = fmax(-127, fmin(127, v));
		e += (x[i] - v * s) * (x[i] - v * s);
	}
	return e;
}

Test(qweight, mse_clips_an_outlier_channel)
{
	/*
	 * int8 narrow, per channel (axis 0), rows of N = 10001.
	 * Row 0: one 127 and 10000 x 0.5. min/max: s = 1, each 0.5 rounds (tie) to 0: error
	 * 10000 * 0.25 = 2500. Candidate f = 1 - k/100: s = f, 0.5/f rounds to 1 (error
	 * (0.5 - k/100)^2 each), 127/f saturates at 127 (error (1.27 k)^2):
	 *   E(k) = 10000 (0.5 - k/100)^2 + 1.6129 k^2
	 *   E(18) = 1024 + 522.6 = 1546.6, E(19) = 961 + 582.3 = 1543.3, E(20) = 900 + 645.2 = 1545.2
	 * so k = 19, s = 0.81, error 1543.3 < 2500.
	 * Row 1: 1.27 and -1.27 and multiples of 0.01: exact on the min/max grid (s = 0.01), error
	 * 0; every smaller candidate clips 1.27: min/max is kept.
	 */
	enum { N = 10001 };
	float *w = malloc(2 * N * sizeof *w);
	oq_tensor *t, *q, *s, *z;
	oq_wspec sp = spec(OQ_DT_INT8, 0, 0, 1, OQ_GRID_NARROW);
	oq_diag d;

	cr_assert_not_null(w);
	w[0] = 127;
	for (int i = 1; i < N; i++)
		w[i] = 0.5f;
	w[N] = 1.27f;
	w[N + 1] = -1.27f;
	for (int i = 2; i < N; i++)
		w[N + i] = 0.01f * (float)(i % 200 - 100);
	t = ftensor(2, (const int64_t[]){2, N}, w);
	sp.mse = 1;
	oq_diag_init(&d);
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_expect(fabs(sc_at(s, 0) - 0.81) < 1e-6, "row 0 scale %g", (double)sc_at(s, 0));
	cr_expect(fabs(row_sse(w, N, sc_at(s, 0)) - 1543.3) < 0.1, "%g", row_sse(w, N, sc_at(s, 0)));
	cr_expect(row_sse(w, N, 1.0f) == 2500.0);
	cr_expect(fabs(sc_at(s, 1) - 0.01) < 1e-9, "row 1 scale %g", (double)sc_at(s, 1));
	cr_expect_eq(oq_tensor_get_int(q, 0), 127); /* the outlier saturates */
	cr_expect_eq(oq_tensor_get_int(q, 1), 1);   /* 0.5 / 0.81 = 0.62 -> 1 */
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
	/* minmax for comparison: s = 1 and 0.5 -> 0 */
	sp.mse = 0;
	cr_assert_eq(oq_weight_quantize(t, &sp, &q, &s, &z, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(sc_at(s, 0), 1.0f);
	cr_expect_eq(oq_tensor_get_int(q, 1), 0);
	oq_tensor_free(q);
	oq_tensor_free(s);
	oq_tensor_free(z);
	oq_tensor_free(t);
	free(w);
}

/* Round-trip SSE of a quantized tensor against w (per tensor, dequantized by hand). */
static double dq_sse(const float *w, size_t n, const oq_tensor *q, const oq_tensor *s,
                     const oq_tensor *z)
{
	double e = 0, sc = sc_at(s, 0);
	for (size_t i = 0; i < n; i++) {
		double v = q->dtype == OQ_DT_FLOAT8E4M3FN
		               ? oq_tensor_get(q, i) * sc
		               : (double)(oq_tensor_get_int(q, i) - oq_tensor_get_int(z, 0)) * sc;
		e += (w[i] - v) * (w[i] - v);
	}
	return e;
}

Test(qweight, mse_asymmetric_clips_fp8_keeps_minmax)
{
	/* a skewed per-tensor weight with outliers on both sides; N large enough that rounding
	 * (N s^2/12 = 3.0 at s = 6/255) outweighs clipping: moving the top from 4 to 3.8 saves
	 * 3.0 (1 - 0.95^2) = 0.3 and costs 0.2^2 = 0.04 */
	enum { N = 65536 };
	float *w = malloc(N * sizeof *w);
	int dts[2] = {OQ_DT_UINT8, OQ_DT_FLOAT8E4M3FN};
	uint64_t r = 7;

	cr_assert_not_null(w);
	for (int i = 0; i < N; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		w[i] = (float)((double)(r >> 11) / 9007199254740992.0) * 0.2f - 0.05f;
	}
	w[3] = 4;
	w[9] = -2;
	for (int k = 0; k < 2; k++) {
		oq_tensor *t = ftensor(1, (const int64_t[]){N}, w), *q[2], *s[2], *z[2];
		oq_wspec sp = spec(dts[k], -1, 0, k == 1, 0);
		oq_diag d;
		double e[2];
		oq_diag_init(&d);
		for (int m = 0; m < 2; m++) {
			sp.mse = m;
			cr_assert_eq(oq_weight_quantize(t, &sp, &q[m], &s[m], &z[m], &d), OQ_OK, "%s", d.msg);
			e[m] = dq_sse(w, N, q[m], s[m], z[m]);
		}
		/* uint8: clipping the outliers pays off clearly (step 6/255 vs values of 0.2 spread);
		 * FP8: the small values already get fine steps (relative precision 2^-4), so clipping
		 * cannot pay for the outlier's error and min/max must stay */
		if (k == 0) {
			cr_expect(e[1] < 0.9 * e[0], "uint8: mse %g vs minmax %g", e[1], e[0]);
			cr_expect(sc_at(s[1], 0) < sc_at(s[0], 0));
		} else {
			cr_expect(e[1] <= e[0], "fp8: mse %g vs minmax %g", e[1], e[0]);
		}
		for (int m = 0; m < 2; m++) {
			oq_tensor_free(q[m]);
			oq_tensor_free(s[m]);
			oq_tensor_free(z[m]);
		}
		oq_tensor_free(t);
	}
	free(w);
}

/* ------------------------------------------------------------------ learned rounding */

/*
 * Rounding directions (oq_wspec.round_up) on fixed scales 0.1 (channel 0) and 0.25 (channel 1):
 * q = floor(x / s) + up, saturated; where nearest would give the opposite; and a channel whose
 * scale the spec does not fix at the learned value keeps nearest.
 */
Test(qweight, learned_rounding_directions)
{
	const float w[6] = {0.26f, -0.26f, 0.04f, 0.6f, -0.6f, 31.9f};
	const float fs[2] = {0.1f, 0.25f};
	const int64_t fz[2] = {0, 0};
	const uint8_t up[6] = {0, 1, 1, 1, 0, 1};
	/* x/s: 2.6 -2.6 0.4 | 2.4 -2.4 127.6 ; floor + up: 2 -2 1 | 3 -3 128 -> saturated 127 */
	const int8_t want[6] = {2, -2, 1, 3, -3, 127};
	oq_tensor *t = ftensor(2, (const int64_t[]){2, 3}, w), *q, *sc, *zp;
	oq_wspec s = spec(OQ_DT_INT8, 0, 0, 1, OQ_GRID_NARROW);
	oq_diag d;
	float fq[6];

	oq_diag_init(&d);
	s.fixed_scale = fs;
	s.fixed_zp = fz;
	s.n_fixed = 2;
	s.round_up = up;
	s.n_round_up = 6;
	cr_assert_eq(oq_weight_quantize(t, &s, &q, &sc, &zp, &d), OQ_OK, "%s", d.msg);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(((const int8_t *)q->data)[i], want[i], "element %d: %d", i, ((const int8_t *)q->data)[i]);
	cr_assert_eq(oq_weight_fake_quantize(t, &s, fq, &d), OQ_OK);
	for (int i = 0; i < 6; i++)
		cr_assert_float_eq(fq[i], (float)want[i] * fs[i / 3], 1e-6);
	oq_tensor_free(q);
	oq_tensor_free(sc);
	oq_tensor_free(zp);
	/* without fixed scales the directions do not apply: nearest on absmax / 127 */
	s.n_fixed = 0;
	s.fixed_scale = NULL;
	s.fixed_zp = NULL;
	cr_assert_eq(oq_weight_quantize(t, &s, &q, &sc, &zp, &d), OQ_OK);
	cr_assert_eq(((const int8_t *)q->data)[0], 127); /* 0.26 / (0.26 / 127) */
	oq_tensor_free(q);
	oq_tensor_free(sc);
	oq_tensor_free(zp);
	oq_tensor_free(t);
}

/* oq_weight_grid: per group range / scale and each element's group, blocked on axis 1. */
Test(qweight, grid_groups_blocked)
{
	float w[2 * 5];
	oq_tensor *t;
	oq_wspec s = spec(OQ_DT_INT4, 1, 2, 1, OQ_GRID_NARROW);
	oq_wgrid g;
	oq_diag d;
	/* blocks of 2 along axis 1 (5 = 2 + 2 + 1): groups 0,0,1,1,2 | 3,3,4,4,5 */
	const size_t want[10] = {0, 0, 1, 1, 2, 3, 3, 4, 4, 5};
	for (int i = 0; i < 10; i++)
		w[i] = (float)(i + 1) * (i % 2 ? -0.5f : 0.5f);
	t = ftensor(2, (const int64_t[]){2, 5}, w);
	oq_diag_init(&d);
	cr_assert_eq(oq_weight_grid(t, &s, &g, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(g.ngroups, 6);
	cr_assert_eq(g.qmin, -7);
	cr_assert_eq(g.qmax, 7);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(g.group[i], want[i], "element %d", i);
	/* group 1: w[2] = 1.5, w[3] = -2: absmax 2, scale 2/7 */
	cr_assert_float_eq(g.scale[1], 2.0f / 7, 1e-7);
	cr_assert_float_eq(g.mn[1], -2.0f, 0);
	cr_assert_float_eq(g.mx[1], 1.5f, 0);
	oq_wgrid_free(&g);
	oq_tensor_free(t);
}

/* ------------------------------------------------------------------ recurrent and bodies */

/*
 * A one-unit LSTM (input 2, hidden 1): W [1, 4, 2] (gates i, o, f, c), R [1, 4, 1], B zero.
 * Per channel (axis 1: one gate row), narrow int8 grid, s = max|w| / 127:
 *   W row 0 [127/64, -0.5]     s = 1/64   q [127, -32]
 *   W row 1 [-1.015625, 3.96875] s = 1/32   q [-32.5 -> -32 (ties to even), 127]
 *   W row 2 [0.25, -0.0625]    s = 0.25/127 q [127, -31.75 -> -32]
 *   W row 3 [-7.9375, 1]       s = 1/16   q [-127, 16]
 *   R [0.5, -2, 0.03125, 0.9921875]: one element per row: s = |r| / 127, q = +-127;
 *   R per tensor (--granularity tensor): s = 2/127, q = r * 63.5 rounded: [32 (31.75), -127,
 *   2 (1.984), 63 (63.0078)].
 */
static const double lstm_w[8] = {127.0 / 64, -0.5, -1.015625, 3.96875, 0.25, -0.0625, -7.9375, 1};
static const double lstm_r[4] = {0.5, -2, 0.03125, 0.9921875};

static gen_model *lstm_model(const double *w, const double *r)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;

	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(3, 1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 2), w);
	gen_init(g, mg, "R", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 1), r);
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(1, 8), NULL);
	n = gen_node(g, mg, "LSTM", "lstm", "x,W,R,B", "y");
	gen_attr_int(g, n, "hidden_size", 1);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(3, 1, 1, 1));
	return g;
}

static oq_node *dq_in(const oq_node *n, int k)
{
	oq_node *dq = n->inputs[k] ? n->inputs[k]->producer : NULL;
	cr_assert(dq && dq->op == OQ_OP_DequantizeLinear, "input %d of %s has no DequantizeLinear", k, n->name);
	return dq;
}

Test(qweight, lstm_weight_only_per_channel_by_hand)
{
	static const char *const ops[] = {"LSTM"};
	static const int64_t wq[8] = {127, -32, -32, 127, 127, -32, -127, 16};
	static const int64_t rq[4] = {127, -127, 127, 127};
	const float ws[4] = {1.0f / 64, 1.0f / 32, (float)(0.25 / 127), 1.0f / 16};
	const float rs[4] = {(float)(0.5 / 127), (float)(2.0 / 127), (float)(0.03125 / 127),
	                     (float)(0.9921875 / 127)};
	const float x[6] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};
	double wd[8], rd[4];
	gen_model *g = lstm_model(lstm_w, lstm_r), *gr;
	oq_model *m = NULL, *mr = NULL;
	oq_node *n, *dw, *dr;
	oq_rt yq, yr, yf;
	oq_opts o;
	oq_diag d;
	int changed = 0;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	run1(m, x, 3, (const int64_t[]){3, 1, 2}, &yf);
	oq_opts_init(&o);
	o.weight_only = 1;
	/* default op types (MatMul, Gemm): the LSTM keeps float */
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	cr_expect_eq(changed, 0);
	cr_expect_eq(count_op(m->graph, OQ_OP_DequantizeLinear), 0);
	o.op_types = ops;
	o.n_op_types = 1;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	cr_expect_eq(changed, 1);
	n = node_named(m->graph, "lstm");
	dw = dq_in(n, 1);
	dr = dq_in(n, 2);
	cr_expect_eq(n->inputs[3]->init != NULL, 1, "B stays float");
	cr_expect_eq(oq_node_attr_int(dw, "axis", -1), 1);
	cr_expect_eq(oq_node_attr_int(dr, "axis", -1), 1);
	cr_assert_eq(dw->inputs[1]->init->nelem, 4);
	for (size_t i = 0; i < 8; i++)
		cr_expect_eq(oq_tensor_get_int(dw->inputs[0]->init, i), wq[i], "W q[%zu] = %lld", i,
		             (long long)oq_tensor_get_int(dw->inputs[0]->init, i));
	for (size_t i = 0; i < 4; i++) {
		cr_expect_eq(oq_tensor_get_int(dr->inputs[0]->init, i), rq[i]);
		cr_expect_float_eq(sc_at(dw->inputs[1]->init, i), ws[i], 1e-12, "W scale %zu", i);
		cr_expect_float_eq(sc_at(dr->inputs[1]->init, i), rs[i], 1e-12, "R scale %zu", i);
		cr_expect_eq(oq_tensor_get_int(dw->inputs[2]->init, i), 0);
	}
	cr_assert_eq(oq_graph_rebuild_uses(m->graph), OQ_OK);
	(void)oq_graph_drop_unused_inits(m->graph);
	expect_clean(m);
	/* the executor on the rewritten model = the float model with the hand-dequantized weights */
	for (size_t i = 0; i < 8; i++)
		wd[i] = (double)wq[i] * ws[i / 2];
	for (size_t i = 0; i < 4; i++)
		rd[i] = (double)rq[i] * rs[i];
	gr = lstm_model(wd, rd);
	cr_assert_eq(gen_load(gr, &mr, &d), OQ_OK, "%s", d.msg);
	run1(mr, x, 3, (const int64_t[]){3, 1, 2}, &yr);
	run1(m, x, 3, (const int64_t[]){3, 1, 2}, &yq);
	cr_expect(max_rel_diff(&yr, &yq) < 1e-6, "vs hand-dequantized weights: %g", max_rel_diff(&yr, &yq));
	cr_expect(sqnr_db(&yf, &yq) > 30, "SQNR vs float %.1f dB", sqnr_db(&yf, &yq));
	oq_rt_release(&yf);
	oq_rt_release(&yq);
	oq_rt_release(&yr);
	oq_model_free(mr);
	oq_model_free(m);
	gen_free(gr);
	gen_free(g);
}

Test(qweight, lstm_r_per_tensor_by_hand)
{
	static const char *const ops[] = {"LSTM"};
	static const int64_t rq[4] = {32, -127, 2, 63};
	gen_model *g = lstm_model(lstm_w, lstm_r);
	oq_model *m = NULL;
	oq_node *dr;
	oq_opts o;
	oq_diag d;
	int changed = 0;

	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	oq_opts_init(&o);
	o.weight_only = 1;
	o.op_types = ops;
	o.n_op_types = 1;
	o.granularity = OQ_GRAN_TENSOR;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	dr = dq_in(node_named(m->graph, "lstm"), 2);
	cr_expect_null(oq_node_attr(dr, "axis"));
	cr_assert_eq(dr->inputs[1]->init->nelem, 1);
	cr_expect_float_eq(sc_at(dr->inputs[1]->init, 0), (float)(2.0 / 127), 1e-12);
	for (size_t i = 0; i < 4; i++)
		cr_expect_eq(oq_tensor_get_int(dr->inputs[0]->init, i), rq[i], "R q[%zu] = %lld", i,
		             (long long)oq_tensor_get_int(dr->inputs[0]->init, i));
	oq_model_free(m);
	gen_free(g);
}

/*
 * Weight-only inside bodies: an If whose then branch runs MatMul(x, W) on the main graph's W
 * (captured) and, one level deeper, an If inside the else branch whose branches run MatMul(x, V)
 * on a weight of the else branch (and negate it in the else-else branch). Both get their DequantizeLinear inside their own body (W copied
 * into the then branch), names unique across the model; the executor's output equals the one
 * with the reference fake-quantized weights (ref_fake_quant, per column).
 */
Test(qweight, weight_only_inside_bodies)
{
	static float w[4 * 3], v[4 * 3], wr[4 * 3], vr[4 * 3];
	const float x[4] = {0.5f, -1.0f, 0.25f, 2.0f};
	double wd[12], vd[12];
	gen_model *gm[2];
	oq_model *m = NULL, *mr = NULL;
	oq_graph *t, *e, *ee;
	oq_rt yq, yr;
	oq_opts o;
	oq_diag d;
	int changed = 0;

	fill(w, 12, 21);
	fill(v, 12, 22);
	ref_fake_quant(w, wr, 1, 4, 3, 4, 1, 127);
	ref_fake_quant(v, vr, 1, 4, 3, 4, 1, 127);
	for (int k = 0; k < 2; k++) {
		gen_model *g = gen_new(8);
		Onnx__GraphProto *mg = gen_graph(g), *b, *bb;
		Onnx__NodeProto *n, *n2;
		for (int i = 0; i < 12; i++)
			wd[i] = k ? wr[i] : w[i], vd[i] = k ? vr[i] : v[i];
		gen_opset(g, "", 13);
		gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
		gen_input(g, mg, "c", OQ_DT_BOOL, GEN_SHAPE(1));
		gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(4, 3), wd);
		n = gen_node(g, mg, "If", "if", "c", "y");
		b = gen_attr_graph(g, n, "then_branch", "then");
		gen_node(g, b, "MatMul", "mm", "x,W", "yt");
		gen_output(g, b, "yt", OQ_DT_FLOAT, GEN_SHAPE(1, 3));
		b = gen_attr_graph(g, n, "else_branch", "else");
		gen_init(g, b, "V", OQ_DT_FLOAT, GEN_SHAPE(4, 3), vd);
		n2 = gen_node(g, b, "If", "if2", "c", "ye");
		bb = gen_attr_graph(g, n2, "then_branch", "then2");
		gen_node(g, bb, "MatMul", "mm_1", "x,V", "yt2");
		gen_output(g, bb, "yt2", OQ_DT_FLOAT, GEN_SHAPE(1, 3));
		bb = gen_attr_graph(g, n2, "else_branch", "else2");
		gen_node(g, bb, "MatMul", "mm_2", "x,V", "m2");
		gen_node(g, bb, "Neg", "neg", "m2", "ye2");
		gen_output(g, bb, "ye2", OQ_DT_FLOAT, GEN_SHAPE(1, 3));
		gen_output(g, b, "ye", OQ_DT_FLOAT, GEN_SHAPE(1, 3));
		gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 3));
		gm[k] = g;
	}
	oq_diag_init(&d);
	cr_assert_eq(gen_load(gm[0], &m, &d), OQ_OK, "%s", d.msg);
	oq_opts_init(&o);
	o.weight_only = 1;
	cr_assert_eq(oq_quantize_weight_only(m->graph, &o, &d, &changed), OQ_OK, "%s", d.msg);
	cr_expect_eq(changed, 1);
	t = qt_body(m->graph, "if", "then_branch");
	e = qt_body(m->graph, "if", "else_branch");
	cr_expect_eq(count_op(m->graph, OQ_OP_DequantizeLinear), 0);
	cr_expect_eq(count_op(t, OQ_OP_DequantizeLinear), 1);
	cr_expect_eq(count_op(e, OQ_OP_DequantizeLinear), 0);
	{
		oq_node *mm = node_named(t, "mm"), *dq = dq_in(mm, 1), *n2 = node_named(e, "if2"), *mm1;
		cr_expect_eq(dq->graph, t);
		cr_expect_eq(dq->inputs[0]->graph, t, "the quantized W is the branch's initializer");
		cr_expect_eq(dq->inputs[0]->flags & OQ_V_OUTER, 0);
		cr_assert_not_null(n2);
		ee = qt_body(e, "if2", "then_branch");
		mm1 = node_named(ee, "mm_1");
		cr_assert_not_null(mm1);
		cr_expect_eq(dq_in(mm1, 1)->graph, ee, "the nested body's DQ is its own");
		cr_expect_str_neq(dq_in(mm1, 1)->name, dq->name);
	}
	cr_assert_eq(oq_graph_rebuild_uses(m->graph), OQ_OK);
	(void)oq_graph_drop_unused_inits(m->graph);
	cr_expect_not(has_init(m->graph, "W"), "the main graph's float W goes (nothing reads it)");
	expect_clean(m);
	cr_assert_eq(gen_load(gm[1], &mr, &d), OQ_OK, "%s", d.msg);
	for (int c = 0; c < 2; c++) {
		oq_exec *ex = NULL, *er = NULL;
		oq_exec_opts eo = {.threads = 1};
		oq_rt in[2];
		memset(in, 0, sizeof in);
		cr_assert_eq(oq_rt_alloc(&in[0], OQ_DT_FLOAT, 2, (const int64_t[]){1, 4}), OQ_OK);
		cr_assert_eq(oq_rt_alloc(&in[1], OQ_DT_BOOL, 1, (const int64_t[]){1}), OQ_OK);
		memcpy(in[0].data, x, sizeof x);
		*(unsigned char *)in[1].data = (unsigned char)c;
		cr_assert_eq(oq_exec_new(m, &eo, &ex, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_exec_new(mr, &eo, &er, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_exec_run(ex, in, 2, &yq, 1, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_exec_run(er, in, 2, &yr, 1, &d), OQ_OK, "%s", d.msg);
		cr_expect(max_rel_diff(&yr, &yq) < 1e-6, "flag %d: vs reference %g", c, max_rel_diff(&yr, &yq));
		oq_rt_release(&yq);
		oq_rt_release(&yr);
		oq_rt_release(&in[0]);
		oq_rt_release(&in[1]);
		oq_exec_free(ex);
		oq_exec_free(er);
	}
	oq_model_free(mr);
	oq_model_free(m);
	gen_free(gm[0]);
	gen_free(gm[1]);
}
