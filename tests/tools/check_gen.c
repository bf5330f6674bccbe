/*
 * check_gen.c - writes the Q/DQ (and a few structural) models that
 * tests/integration/check_ort.sh feeds to both ONNX Runtime and
 * `onnxq check`: valid per-tensor/per-axis/blocked int8/int4 models and
 * models broken in one way each (wrong scale length, axis out of range,
 * blockwise scale shape, block_size below opset 21, int4 at IR 9, ...).
 *
 * usage: check_gen OUTDIR
 * Writes OUTDIR/<case>.onnx and OUTDIR/manifest.txt with one line per case:
 * "<case> <dims of the float input x, comma-separated>". Names say what the
 * case was built to be (ok_, bad_), but the verdict comes from ORT, except
 * for spec_ cases: models the ONNX spec forbids and ORT 1.30 still runs
 * (it sorts nodes itself, adds missing opset imports, does not tie element
 * types to the IR version, ignores an int32 zero point's value, and
 * accepts 1-D scales at opset 10). check_ort.sh requires `check` to flag
 * those and prints what ORT said.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_model.h"

static const char *outdir;
static FILE *manifest;
static int failures;

static void emit(gen_model *g, const char *name, int xrank, const int64_t *xdims)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/%s.onnx", outdir, name);
	if (gen_write(g, path)) {
		fprintf(stderr, "check_gen: cannot write %s\n", path);
		failures++;
	}
	fprintf(manifest, "%s ", name);
	for (int i = 0; i < xrank; i++)
		fprintf(manifest, "%s%lld", i ? "," : "", (long long)xdims[i]);
	fprintf(manifest, "%s\n", xrank == 0 ? "scalar" : "");
	gen_free(g);
}

typedef struct qdq {
	gen_model *g;
	Onnx__GraphProto *mg;
	Onnx__NodeProto *q, *dq;
} qdq;

/* x float -> Q(x, s[, z]) -> DQ(., s[, z]) -> y. Scales 0.5, zero points 0. */
static qdq chain(int64_t ir, int64_t opset, int xrank, const int64_t *xdims, int srank,
                 const int64_t *sdims, int zdt, int zrank, const int64_t *zdims)
{
	qdq r;
	double half[64];
	for (int i = 0; i < 64; i++)
		half[i] = 0.5;
	r.g = gen_new(ir);
	gen_opset(r.g, "", opset);
	r.mg = gen_graph(r.g);
	gen_input(r.g, r.mg, "x", OQ_DT_FLOAT, xrank, xdims);
	gen_init(r.g, r.mg, "s", OQ_DT_FLOAT, srank, sdims, half);
	if (zdt)
		gen_init(r.g, r.mg, "z", zdt, zrank, zdims, NULL);
	r.q = gen_node(r.g, r.mg, "QuantizeLinear", "q", zdt ? "x,s,z" : "x,s", "xq");
	r.dq = gen_node(r.g, r.mg, "DequantizeLinear", "dq", zdt ? "xq,s,z" : "xq,s", "y");
	gen_output(r.g, r.mg, "y", OQ_DT_FLOAT, xrank, xdims);
	return r;
}

/* W (wdt, all ones) -> DQ(W, s[, z]) -> wf; y = x + wf with x of W's shape. */
static qdq weight(int64_t ir, int64_t opset, int wdt, int wrank, const int64_t *wdims, int srank,
                  const int64_t *sdims, int zdt, int zrank, const int64_t *zdims)
{
	qdq r;
	double ones[64];
	for (int i = 0; i < 64; i++)
		ones[i] = 1;
	r.g = gen_new(ir);
	gen_opset(r.g, "", opset);
	r.mg = gen_graph(r.g);
	gen_input(r.g, r.mg, "x", OQ_DT_FLOAT, wrank, wdims);
	gen_init(r.g, r.mg, "w", wdt, wrank, wdims, ones);
	gen_init(r.g, r.mg, "s", OQ_DT_FLOAT, srank, sdims, ones);
	if (zdt)
		gen_init(r.g, r.mg, "z", zdt, zrank, zdims, NULL);
	r.q = NULL;
	r.dq = gen_node(r.g, r.mg, "DequantizeLinear", "dq", zdt ? "w,s,z" : "w,s", "wf");
	gen_node(r.g, r.mg, "Add", "add", "x,wf", "y");
	gen_output(r.g, r.mg, "y", OQ_DT_FLOAT, wrank, wdims);
	return r;
}

#define X24 GEN_SHAPE(2, 4)
#define W43 GEN_SHAPE(4, 3)
#define W2_10 GEN_SHAPE(2, 10)

static void valid_cases(void)
{
	qdq r;

	r = chain(5, 10, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
	emit(r.g, "ok_pt_u8_op10", X24);
	r = chain(7, 13, X24, 0, NULL, OQ_DT_INT8, 0, NULL);
	emit(r.g, "ok_pt_i8_op13", X24);
	r = chain(7, 13, X24, GEN_SHAPE(1), OQ_DT_INT8, GEN_SHAPE(1));
	emit(r.g, "ok_pt_1elem_op13", X24);
	r = chain(7, 13, X24, GEN_SHAPE(4), OQ_DT_INT8, GEN_SHAPE(4));
	emit(r.g, "ok_pa_i8_op13", X24);
	r = chain(7, 13, X24, GEN_SHAPE(4), OQ_DT_INT8, GEN_SHAPE(4));
	gen_attr_int(r.g, r.q, "axis", -1);
	gen_attr_int(r.g, r.dq, "axis", -1);
	emit(r.g, "ok_pa_neg_axis", X24);
	r = weight(7, 13, OQ_DT_INT8, W43, GEN_SHAPE(4), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", 0);
	emit(r.g, "ok_pa_w_axis0", W43);
	r = weight(7, 13, OQ_DT_INT32, GEN_SHAPE(4), 0, NULL, 0, 0, NULL);
	emit(r.g, "ok_int32_bias", GEN_SHAPE(4));
	r = chain(9, 19, X24, 0, NULL, OQ_DT_FLOAT8E4M3FN, 0, NULL);
	emit(r.g, "ok_f8_op19", X24);
	r = chain(9, 19, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "saturate", 1);
	emit(r.g, "ok_saturate_op19", X24);
	r = chain(10, 21, X24, 0, NULL, OQ_DT_INT16, 0, NULL);
	emit(r.g, "ok_i16_op21", X24);
	r = weight(10, 21, OQ_DT_INT8, W2_10, GEN_SHAPE(2, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "ok_blk_i8", W2_10);
	r = weight(10, 21, OQ_DT_INT4, W2_10, GEN_SHAPE(2, 3), OQ_DT_INT4, GEN_SHAPE(2, 3));
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "ok_blk_i4", W2_10);
	r = weight(10, 21, OQ_DT_UINT4, GEN_SHAPE(8, 3), GEN_SHAPE(2, 3), OQ_DT_UINT4,
	           GEN_SHAPE(2, 3));
	gen_attr_int(r.g, r.dq, "axis", 0);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "ok_blk_u4_axis0", GEN_SHAPE(8, 3));
	r = weight(10, 21, OQ_DT_INT4, W43, 0, NULL, OQ_DT_INT4, 0, NULL);
	emit(r.g, "ok_pt_i4", W43);
	r = weight(10, 21, OQ_DT_INT4, W43, GEN_SHAPE(4), OQ_DT_INT4, GEN_SHAPE(4));
	gen_attr_int(r.g, r.dq, "axis", 0);
	emit(r.g, "ok_pa_i4", W43);
	r = chain(10, 21, GEN_SHAPE(4, 3), GEN_SHAPE(2, 3), OQ_DT_INT8, GEN_SHAPE(2, 3));
	gen_attr_int(r.g, r.q, "axis", 0);
	gen_attr_int(r.g, r.q, "block_size", 2);
	gen_attr_int(r.g, r.dq, "axis", 0);
	gen_attr_int(r.g, r.dq, "block_size", 2);
	emit(r.g, "ok_q_blk_i8", GEN_SHAPE(4, 3));
	r = chain(10, 21, X24, 0, NULL, 0, 0, NULL);
	gen_attr_int(r.g, r.q, "output_dtype", OQ_DT_INT8);
	emit(r.g, "ok_q_output_dtype", X24);
	/* axis is ignored for per-tensor scales (spec: "Ignored for per-tensor quantization") */
	r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "axis", 5);
	gen_attr_int(r.g, r.dq, "axis", 5);
	emit(r.g, "ok_pt_axis_ignored", X24);
	r = chain(7, 13, X24, 0, NULL, OQ_DT_INT8, GEN_SHAPE(1));
	emit(r.g, "ok_pt_scalar_scale_1elem_zp", X24);
	r = weight(10, 21, OQ_DT_INT8, W2_10, GEN_SHAPE(2, 1), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 16);
	emit(r.g, "ok_blk_block_over_dim", W2_10);
}

static void invalid_cases(void)
{
	qdq r;

	r = chain(7, 13, X24, GEN_SHAPE(3), OQ_DT_INT8, GEN_SHAPE(3));
	emit(r.g, "bad_pa_len", X24);
	r = chain(7, 13, GEN_SHAPE(4), GEN_SHAPE(4), OQ_DT_INT8, GEN_SHAPE(4));
	emit(r.g, "bad_rank1_pa_default_axis", GEN_SHAPE(4));
	r = chain(7, 13, X24, GEN_SHAPE(1, 1), OQ_DT_INT8, GEN_SHAPE(1, 1));
	emit(r.g, "bad_scale_1x1", X24);
	r = chain(10, 21, X24, GEN_SHAPE(1, 1), OQ_DT_INT8, GEN_SHAPE(1, 1));
	emit(r.g, "bad_scale_1x1_op21", X24);
	r = weight(7, 13, OQ_DT_INT8, W43, GEN_SHAPE(3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", 0);
	emit(r.g, "bad_pa_w_len", W43);
	r = weight(7, 13, OQ_DT_INT8, W43, GEN_SHAPE(3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", 2);
	emit(r.g, "bad_axis_2", W43);
	r = weight(7, 13, OQ_DT_INT8, W43, GEN_SHAPE(4), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "axis", -3);
	emit(r.g, "bad_axis_neg3", W43);
	r = weight(5, 10, OQ_DT_INT8, W43, GEN_SHAPE(3), 0, 0, NULL);
	emit(r.g, "spec_pa_op10", W43);
	r = weight(10, 21, OQ_DT_INT8, W2_10, GEN_SHAPE(2, 2), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "bad_blk_axis_dim", W2_10);
	r = weight(10, 21, OQ_DT_INT8, W2_10, GEN_SHAPE(1, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "bad_blk_other_dim", W2_10);
	r = weight(10, 21, OQ_DT_INT8, W2_10, GEN_SHAPE(3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "bad_blk_rank", W2_10);
	r = weight(10, 21, OQ_DT_INT4, W2_10, GEN_SHAPE(2, 3), OQ_DT_INT4, GEN_SHAPE(2, 3));
	emit(r.g, "bad_blk0_scale2d", W2_10);
	r = weight(10, 21, OQ_DT_INT8, W2_10, GEN_SHAPE(2, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", -4);
	emit(r.g, "bad_blk_negative", W2_10);
	r = weight(9, 19, OQ_DT_INT8, W2_10, GEN_SHAPE(2, 3), 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "bad_blk_op19", W2_10);
	r = weight(9, 19, OQ_DT_INT8, W2_10, 0, NULL, 0, 0, NULL);
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "bad_blk_attr_op19", W2_10);
	r = weight(9, 21, OQ_DT_INT4, W2_10, GEN_SHAPE(2, 3), OQ_DT_INT4, GEN_SHAPE(2, 3));
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "spec_int4_ir9", W2_10);
	r = weight(10, 19, OQ_DT_INT4, W43, 0, NULL, 0, 0, NULL);
	emit(r.g, "bad_int4_op19", W43);
	r = chain(7, 13, X24, GEN_SHAPE(4), OQ_DT_INT8, 0, NULL);
	emit(r.g, "bad_zp_shape_pa", X24);
	r = weight(10, 21, OQ_DT_INT4, W2_10, GEN_SHAPE(2, 3), OQ_DT_INT4, GEN_SHAPE(2, 2));
	gen_attr_int(r.g, r.dq, "block_size", 4);
	emit(r.g, "bad_zp_shape_blk", W2_10);
	r = weight(7, 13, OQ_DT_INT8, W43, 0, NULL, OQ_DT_UINT8, 0, NULL);
	emit(r.g, "bad_zp_dtype_dq", W43);
	r = chain(7, 13, X24, 0, NULL, OQ_DT_FLOAT, 0, NULL);
	emit(r.g, "bad_zp_float", X24);
	r = chain(9, 19, X24, 0, NULL, OQ_DT_INT16, 0, NULL);
	emit(r.g, "bad_i16_op19", X24);
	r = chain(5, 10, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "axis", 1);
	emit(r.g, "bad_axis_attr_op10", X24);
	r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
	gen_attr_int(r.g, r.q, "saturate", 1);
	emit(r.g, "bad_saturate_op13", X24);
	r = chain(8, 19, X24, 0, NULL, OQ_DT_FLOAT8E4M3FN, 0, NULL);
	emit(r.g, "spec_f8_ir8", X24);
	r = chain(7, 13, X24, 0, NULL, OQ_DT_FLOAT8E4M3FN, 0, NULL);
	emit(r.g, "bad_f8_op13", X24);
	r = chain(10, 21, X24, 0, NULL, OQ_DT_INT8, 0, NULL);
	gen_attr_int(r.g, r.q, "output_dtype", OQ_DT_UINT8);
	emit(r.g, "bad_output_dtype_vs_zp", X24);
	{
		gen_model *g = gen_new(7);
		Onnx__GraphProto *mg;
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_init(g, mg, "b", OQ_DT_INT32, GEN_SHAPE(2), GEN_VALS(5, 6));
		gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
		gen_init(g, mg, "z", OQ_DT_INT32, 0, NULL, GEN_VALS(3));
		gen_node(g, mg, "DequantizeLinear", "dq", "b,s,z", "bf");
		gen_node(g, mg, "Add", "add", "x,bf", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		emit(g, "spec_int32_zp", GEN_SHAPE(2));

		g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_init(g, mg, "w", OQ_DT_INT8, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_init(g, mg, "s", OQ_DT_INT8, 0, NULL, GEN_VALS(1));
		gen_node(g, mg, "DequantizeLinear", "dq", "w,s", "wf");
		gen_node(g, mg, "Add", "add", "x,wf", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		emit(g, "bad_scale_int8", GEN_SHAPE(2));

		g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_init(g, mg, "w", OQ_DT_INT8, GEN_SHAPE(2), GEN_VALS(1, 2));
		gen_init(g, mg, "s", OQ_DT_FLOAT16, 0, NULL, GEN_VALS(0.5));
		gen_node(g, mg, "DequantizeLinear", "dq", "w,s", "wf");
		gen_node(g, mg, "Cast", "cast", "wf", "wf32");
		gen_attr_int(g, mg->node[1], "to", OQ_DT_FLOAT);
		gen_node(g, mg, "Add", "add", "x,wf32", "y");
		gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2));
		emit(g, "bad_scale_f16_op13", GEN_SHAPE(2));

		g = gen_new(7);
		gen_opset(g, "", 13);
		mg = gen_graph(g);
		gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2));
		gen_node(g, mg, "QuantizeLinear", "q", "x", "y");
		gen_output(g, mg, "y", OQ_DT_UINT8, GEN_SHAPE(2));
		emit(g, "bad_missing_scale", GEN_SHAPE(2));

		/* structural breakage around a valid Q/DQ pair */
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		r.dq->input[0] = "nowhere";
		emit(r.g, "bad_dangling", X24);
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		mg = r.mg;
		mg->node[0] = r.dq;
		mg->node[1] = r.q;
		emit(r.g, "spec_topo", X24);
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		gen_output(r.g, r.mg, "undefined_out", OQ_DT_FLOAT, X24);
		emit(r.g, "bad_graph_output", X24);
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		gen_node(r.g, r.mg, "Relu", "dup", "x", "y");
		emit(r.g, "bad_two_producers", X24);
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		gen_node(r.g, r.mg, "Transpose", "tr", "y", "yt");
		gen_attr_int(r.g, r.mg->node[2], "perm", 1);
		gen_output(r.g, r.mg, "yt", OQ_DT_FLOAT, GEN_SHAPE(4, 2));
		emit(r.g, "bad_attr_type", X24);
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		gen_domain(r.g, r.dq, "com.microsoft");
		emit(r.g, "spec_opset_import", X24);
		r = chain(7, 13, X24, 0, NULL, OQ_DT_UINT8, 0, NULL);
		gen_attr_int(r.g, r.q, "axis", 1);
		gen_attr_int(r.g, r.q, "axis", 1);
		emit(r.g, "bad_attr_duplicate", X24);
	}
}

int main(int argc, char **argv)
{
	char path[4096];

	if (argc != 2) {
		fprintf(stderr, "usage: check_gen OUTDIR\n");
		return 1;
	}
	outdir = argv[1];
	snprintf(path, sizeof path, "%s/manifest.txt", outdir);
	manifest = fopen(path, "w");
	if (!manifest) {
		fprintf(stderr, "check_gen: cannot write %s\n", path);
		return 1;
	}
	valid_cases();
	invalid_cases();
	if (fclose(manifest) != 0)
		failures++;
	return failures ? 1 : 0;
}
