/*
 * test_encodings.c - unit tests of the AIMET-style encodings export/import
 * (passes/quantize/encodings.c).
 *
 * Round trip: a float model is quantized with hand-set ranges (fuse +
 * quantize through the driver, verifier on), its encodings exported and
 * checked against hand-computed values (uint8 x on [-1, 1]: scale 2/255,
 * zp 128, AIMET offset -128; symmetric int8 weights: scale absmax/127,
 * offset -128), then imported into a fresh quantize run of the same float
 * model WITHOUT any calibrated ranges: the two quantized models must be
 * identical (irdiff: IR and initializers bit for bit) and give bitwise
 * identical outputs on the executor, close to the float model.
 * Import of a hand-written AIMET file checks the zero point arithmetic
 * (zp = qmin - offset) and the override kinds; errors name file and tensor.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "passes/quantize/encodings.h"
#include "calib/exec/exec.h"
#include "gen_model.h"
#include "irdiff.h"
#include "passes/quantize/overrides.h"
#include "passes/pass.h"
#include "qtest.h"

/* ------------------------------------------------------------ helpers */


static char tmpdir[64];

static const char *tmp_path(const char *name)
{
	static char path[4][256];
	static int k;
	if (!tmpdir[0]) {
		strcpy(tmpdir, "/tmp/oq_enc_XXXXXX");
		cr_assert_not_null(mkdtemp(tmpdir));
	}
	k = (k + 1) % 4;
	snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
	return path[k];
}

static const char *write_file(const char *name, const char *text)
{
	const char *p = tmp_path(name);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	return p;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long n;
	cr_assert_not_null(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = calloc((size_t)n + 1, 1);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return b;
}

/* fuse + quantize through the driver (verifier on). */
static int quantize(oq_model *m, const oq_opts *o, oq_diag *d)
{
	oq_pass_run run = {0};
	run.list = "fuse,quantize";
	run.verify = 1;
	oq_diag_init(d);
	return oq_passes_run(m, &run, o, d);
}

static oq_model *load(gen_model *g)
{
	oq_model *m = NULL;
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	return m;
}

/* Runs m on one float input; copies the first output (n floats) into y. */
static void run1(oq_model *m, const float *x, int rank, const int64_t *dims, float *y, size_t n)
{
	oq_exec *e = NULL;
	oq_rt in = {0}, out = {0};
	oq_diag d;
	oq_exec_opts eo = {.threads = 1};

	oq_diag_init(&d);
	cr_assert_eq(oq_exec_new(m, &eo, &e, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_rt_alloc(&in, OQ_DT_FLOAT, rank, dims), OQ_OK);
	memcpy(in.data, x, in.nbytes);
	cr_assert_eq(oq_exec_run(e, &in, 1, &out, 1, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(out.nelem, n);
	memcpy(y, out.data, n * sizeof(float));
	oq_rt_release(&in);
	oq_rt_release(&out);
	oq_exec_free(e);
}

/* ------------------------------------------------------------ models */

/*
 * x[1,2,4,4] -> Conv(W[3,2,3,3], B[3], pads 1) -> c -> Relu -> r -> MaxPool 2x2 -> p
 *   -> Reshape [1,12] -> f -> Gemm(fcW[4,12] transB, fcB) -> y[1,4]
 */
static gen_model *build_cnn(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	double w[54], fcw[48];

	for (int i = 0; i < 54; i++)
		w[i] = ((i * 7) % 11 - 5) * 0.05;
	for (int i = 0; i < 48; i++)
		fcw[i] = ((i * 5) % 13 - 6) * 0.04;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 4, 4));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(3, 2, 3, 3), w);
	gen_init(g, mg, "B", OQ_DT_FLOAT, GEN_SHAPE(3), GEN_VALS(0.1, -0.2, 0.05));
	gen_init(g, mg, "shape", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(1, 12));
	gen_init(g, mg, "fcW", OQ_DT_FLOAT, GEN_SHAPE(4, 12), fcw);
	gen_init(g, mg, "fcB", OQ_DT_FLOAT, GEN_SHAPE(4), GEN_VALS(0.01, 0.02, -0.03, 0.04));
	n = gen_node(g, mg, "Conv", "conv1", "x,W,B", "c");
	gen_attr_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
	gen_node(g, mg, "Relu", "relu1", "c", "r");
	n = gen_node(g, mg, "MaxPool", "pool", "r", "p");
	gen_attr_ints(g, n, "kernel_shape", 2, (const int64_t[]){2, 2});
	gen_attr_ints(g, n, "strides", 2, (const int64_t[]){2, 2});
	gen_node(g, mg, "Reshape", "flat", "p,shape", "f");
	n = gen_node(g, mg, "Gemm", "fc", "f,fcW,fcB", "y");
	gen_attr_int(g, n, "transB", 1);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	return g;
}

static const rng cnn_ranges[] = {
    {"x", -1.0f, 1.0f}, {"c", -2.0f, 2.0f}, {"r", 0.0f, 1.5f},
    {"p", 0.0f, 1.4f},  {"f", 0.0f, 1.4f},  {"y", -0.8f, 0.9f},
};

/* x[2,8] -> MatMul(W[8,4]) -> y[2,4], opset 21 (blocked int4 weights). */
static gen_model *build_matmul(void)
{
	gen_model *g = gen_new(10);
	Onnx__GraphProto *mg = gen_graph(g);
	double w[32];
	for (int i = 0; i < 32; i++)
		w[i] = ((i * 3) % 7 - 3) * 0.1 + i * 0.01;
	gen_opset(g, "", 21);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 8));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(8, 4), w);
	gen_node(g, mg, "MatMul", "mm", "x,W", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 4));
	return g;
}

static const rng mm_ranges[] = {{"x", -1.0f, 1.0f}, {"y", -2.0f, 2.5f}};

/* ------------------------------------------------------------ JSON checks */

static const cJSON *records(const cJSON *root, const char *sec, const char *name)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, sec);
	const cJSON *a = s ? cJSON_GetObjectItemCaseSensitive(s, name) : NULL;
	cr_assert(cJSON_IsArray(a), "%s has no '%s'", sec, name);
	return a;
}

static double num(const cJSON *rec, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(rec, key);
	cr_assert(cJSON_IsNumber(it), "record has no number '%s'", key);
	return it->valuedouble;
}

static const char *str(const cJSON *rec, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(rec, key);
	cr_assert(cJSON_IsString(it), "record has no string '%s'", key);
	return it->valuestring;
}

/* One activation record: scale, offset, min = offset*scale, max = (offset + 255)*scale (8 bit). */
static void check_act(const cJSON *root, const char *name, double scale, double offset,
                      const char *type)
{
	const cJSON *a = records(root, "activation_encodings", name), *r;
	cr_assert_eq(cJSON_GetArraySize(a), 1, "%s: one record", name);
	r = cJSON_GetArrayItem(a, 0);
	cr_assert_eq((float)num(r, "scale"), (float)scale, "%s scale %.9g, expected %.9g", name,
	             num(r, "scale"), scale);
	cr_assert_eq(num(r, "offset"), offset, "%s offset", name);
	cr_assert_float_eq(num(r, "min"), offset * scale, 1e-6, "%s min", name);
	cr_assert_float_eq(num(r, "max"), (offset + 255) * scale, 1e-6, "%s max", name);
	cr_assert_eq(num(r, "bitwidth"), 8);
	cr_assert_str_eq(str(r, "dtype"), "int");
	cr_assert_str_eq(str(r, "onnx_type"), type);
}

/* ------------------------------------------------------------ round trips */

/*
 * Quantizes build() with ranges r and opts tweak, exports, re-quantizes a fresh
 * copy with only the imported encodings; asserts identical models and outputs.
 * Returns the exported file's text (caller frees).
 */
static char *round_trip(gen_model *(*build)(void), const rng *r, size_t nr,
                        void (*tweak)(oq_opts *), const float *x, int rank, const int64_t *dims,
                        size_t ny)
{
	gen_model *g1 = build(), *g2 = build(), *g0 = build();
	oq_model *m1 = load(g1), *m2 = load(g2), *m0 = load(g0);
	oq_ranges rr = mk_ranges(r, nr);
	cr_assert_not_null(rr.v);
	oq_opts o1, o2;
	oq_override *ov = NULL;
	oq_encodings want;
	size_t nov = 0, unused = 9;
	oq_diag d;
	char why[512];
	const char *path = tmp_path("rt.json");
	float y0[16], y1[16], y2[16];

	cr_assert(ny <= 16);
	oq_opts_init(&o1);
	o1.prefer = OQ_PREFER_ACCURACY;
	o1.ranges = &rr;
	if (tweak)
		tweak(&o1);
	cr_assert_eq(quantize(m1, &o1, &d), OQ_OK, "%s", d.msg);
	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_export(m1, path, &d), OQ_OK, "%s", d.msg);

	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_import(path, m2, &ov, &nov, &d), OQ_OK, "%s", d.msg);
	cr_assert_gt(nov, 0);
	oq_opts_init(&o2);
	o2.prefer = OQ_PREFER_ACCURACY;
	if (tweak)
		tweak(&o2);
	o2.ranges = NULL; /* nothing calibrated: everything comes from the file */
	o2.overrides = ov;
	o2.n_overrides = nov;
	cr_assert_eq(quantize(m2, &o2, &d), OQ_OK, "%s", d.msg);

	cr_assert_eq(oq_test_model_diff(m1, m2, why, sizeof why), 0, "round trip differs: %s", why);

	/* the imported model uses exactly the file's parameters */
	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_read(path, &want, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_encodings_verify(m2, &want, NULL, &unused, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(unused, 0);
	oq_encodings_free(&want);

	/* numerics: identical outputs, and close to the float model */
	run1(m0, x, rank, dims, y0, ny);
	run1(m1, x, rank, dims, y1, ny);
	run1(m2, x, rank, dims, y2, ny);
	for (size_t i = 0; i < ny; i++) {
		cr_assert_eq(memcmp(&y1[i], &y2[i], sizeof(float)), 0, "y[%zu]: %g vs %g", i,
		             (double)y1[i], (double)y2[i]);
		cr_assert(fabsf(y1[i] - y0[i]) < 0.1f, "y[%zu] quantized %g float %g", i,
		          (double)y1[i], (double)y0[i]);
	}

	oq_overrides_free(ov, nov);
	oq_ranges_free(&rr);
	oq_model_free(m0);
	oq_model_free(m1);
	oq_model_free(m2);
	gen_free(g0);
	gen_free(g1);
	gen_free(g2);
	return read_text(path);
}

static void cnn_input(float *x)
{
	for (int i = 0; i < 32; i++)
		x[i] = ((i * 9) % 17 - 8) / 8.0f;
}

Test(encodings, cnn_round_trip_and_values)
{
	float x[32];
	char *text;
	cJSON *root;
	const cJSON *a;

	cnn_input(x);
	text = round_trip(build_cnn, cnn_ranges, 6, NULL, x, 4, (const int64_t[]){1, 2, 4, 4}, 4);
	root = cJSON_Parse(text);
	cr_assert_not_null(root, "export is not JSON:\n%s", text);
	cr_assert_str_eq(cJSON_GetObjectItem(root, "version")->valuestring, "onnxq-encodings/1");

	/* uint8 asymmetric: x [-1, 1] scale 2/255 zp round(127.5) = 128 -> offset -128 */
	check_act(root, "x", 2.0 / 255, -128, "uint8");
	/* r [0, 1.5]: zp 0; p and f share r's parameters (MaxPool/Reshape) */
	check_act(root, "r", 1.5 / 255, 0, "uint8");
	check_act(root, "p", 1.5 / 255, 0, "uint8");
	check_act(root, "f", 1.5 / 255, 0, "uint8");
	/* graph output y [-0.8, 0.9]: scale 1.7/255, zp round(0.8 * 255 / 1.7) = 120 */
	check_act(root, "y", 1.7 / 255, -120, "uint8");
	/* c is inside the fused Conv+Relu: no encoding */
	cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "activation_encodings"), "c"));
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "activation_encodings")), 5);

	/* W: per channel (axis 0), int8 symmetric narrow; every channel holds 0.25 = 5 * 0.05 */
	a = records(root, "param_encodings", "W");
	cr_assert_eq(cJSON_GetArraySize(a), 3);
	for (int c = 0; c < 3; c++) {
		const cJSON *r = cJSON_GetArrayItem(a, c);
		float s = (float)(0.25 / 127);
		cr_assert_eq((float)num(r, "scale"), s, "W[%d] scale %.9g", c, num(r, "scale"));
		cr_assert_eq(num(r, "offset"), -128, "int8 zp 0 on AIMET's unsigned grid");
		cr_assert_float_eq(num(r, "min"), -128.0 * s, 1e-7);
		cr_assert_float_eq(num(r, "max"), 127.0 * s, 1e-7);
		cr_assert_str_eq(str(r, "is_symmetric"), "True");
		cr_assert_str_eq(str(r, "onnx_type"), "int8");
		cr_assert_eq(num(r, "axis"), 0);
	}
	/* fcW [4, 12] (Gemm transB): channel c = row c, absmax over the row / 127 */
	a = records(root, "param_encodings", "fcW");
	cr_assert_eq(cJSON_GetArraySize(a), 4);
	for (int c = 0; c < 4; c++) {
		double am = 0;
		for (int k = 0; k < 12; k++) {
			int i = c * 12 + k;
			am = fmax(am, fabs((double)(float)(((i * 5) % 13 - 6) * 0.04)));
		}
		cr_assert_float_eq(num(cJSON_GetArrayItem(a, c), "scale"), am / 127, 1e-9,
		                   "fcW[%d]", c);
	}
	/* biases are derived, not exported; nothing else */
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "param_encodings")), 2);
	cJSON_Delete(root);
	free(text);
}

static void trt(oq_opts *o)
{
	o->profile = OQ_PROFILE_TRT;
}

Test(encodings, cnn_round_trip_trt_profile)
{
	float x[32];
	char *text;
	cJSON *root;
	const cJSON *r;

	cnn_input(x);
	text = round_trip(build_cnn, cnn_ranges, 6, trt, x, 4, (const int64_t[]){1, 2, 4, 4}, 4);
	root = cJSON_Parse(text);
	cr_assert_not_null(root);
	/* TRT: symmetric int8 narrow, x [-1, 1]: scale 1/127, zp 0 -> offset -128, "True" */
	r = cJSON_GetArrayItem(records(root, "activation_encodings", "x"), 0);
	cr_assert_eq((float)num(r, "scale"), (float)(1.0 / 127));
	cr_assert_eq(num(r, "offset"), -128);
	cr_assert_str_eq(str(r, "is_symmetric"), "True");
	cr_assert_str_eq(str(r, "onnx_type"), "int8");
	/* no Q on graph outputs in TRT */
	cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "activation_encodings"), "y"));
	cJSON_Delete(root);
	free(text);
}

static void blocked_int4(oq_opts *o)
{
	o->granularity = OQ_GRAN_BLOCK;
	o->block_size = 3;
	o->weight_type = OQ_DT_INT4;
}

Test(encodings, blocked_int4_round_trip)
{
	float x[16];
	char *text;
	cJSON *root;
	const cJSON *a;

	for (int i = 0; i < 16; i++)
		x[i] = (i % 5 - 2) * 0.4f;
	text =
	    round_trip(build_matmul, mm_ranges, 2, blocked_int4, x, 2, (const int64_t[]){2, 8}, 8);
	root = cJSON_Parse(text);
	cr_assert_not_null(root);
	/* W [8, 4] blocked along K (axis 0) by 3: ceil(8/3) = 3 blocks x 4 columns = 12 records */
	a = records(root, "param_encodings", "W");
	cr_assert_eq(cJSON_GetArraySize(a), 12);
	for (int k = 0; k < 12; k++) {
		const cJSON *r = cJSON_GetArrayItem(a, k);
		int b = k / 4, col = k % 4;
		double am = 0;
		cr_assert_eq(num(r, "axis"), 0);
		cr_assert_eq(num(r, "block_size"), 3);
		cr_assert_eq(num(r, "bitwidth"), 4);
		cr_assert_str_eq(str(r, "onnx_type"), "int4");
		cr_assert_eq(num(r, "offset"), -8, "int4 zp 0 -> offset qmin = -8");
		/* block b of column col: rows 3b .. min(3b+2, 7); symmetric narrow int4: absmax / 7
		 */
		for (int row = 3 * b; row < 3 * b + 3 && row < 8; row++) {
			int i = row * 4 + col;
			am = fmax(am, fabs((double)(float)(((i * 3) % 7 - 3) * 0.1 + i * 0.01)));
		}
		cr_assert_float_eq(num(r, "scale"), am / 7, 1e-7, "block %d col %d", b, col);
	}
	cJSON_Delete(root);
	free(text);
}

/* ------------------------------------------------------------ import of hand-written files */

static const char aimet_file[] =
    "{\"version\": \"0.6.1\",\n"
    " \"activation_encodings\": {\n"
    "  \"x\": [{\"bitwidth\": 8, \"dtype\": \"int\", \"is_symmetric\": \"False\", \"max\": 2.0,"
    " \"min\": -0.5, \"offset\": -51, \"scale\": 0.01}],\n"
    "  \"r\": [{\"bitwidth\": 8, \"dtype\": \"int\", \"is_symmetric\": \"True\", \"offset\": -128,"
    " \"scale\": 0.0125}],\n"
    "  \"p\": [{\"bitwidth\": 8, \"is_symmetric\": \"False\", \"min\": 0, \"max\": 3.0}],\n"
    "  \"y\": [{\"bitwidth\": 16, \"dtype\": \"float\"}]},\n"
    " \"param_encodings\": {\n"
    "  \"W\": [{\"bitwidth\": 8, \"is_symmetric\": \"True\", \"offset\": -128, \"scale\": 0.002},"
    " {\"bitwidth\": 8, \"is_symmetric\": \"True\", \"offset\": -128, \"scale\": 0.002},"
    " {\"bitwidth\": 8, \"is_symmetric\": \"True\", \"offset\": -128, \"scale\": 0.002}],\n"
    "  \"B\": [{\"bitwidth\": 32, \"is_symmetric\": \"True\", \"offset\": 0, \"scale\": 1e-5}]}}\n";

Test(encodings, import_aimet_file)
{
	gen_model *g = build_cnn();
	oq_model *m = load(g);
	oq_override *ov = NULL;
	size_t n = 0, unused = 0;
	oq_diag d;
	const oq_override *e;
	const char *path = write_file("aimet.json", aimet_file);
	oq_opts o;
	oq_encodings want;

	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_import(path, m, &ov, &n, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(n, 5, "x, r, p, y, W (the 32-bit bias record is ignored)");
	/* uint8 (not symmetric): zp = qmin - offset = 0 - (-51) = 51 */
	e = oq_override_find(ov, n, "x", 0);
	cr_assert(e && e->has_qparams && e->dtype == OQ_DT_UINT8 && e->scale == 0.01f &&
	          e->zero_point == 51);
	/* symmetric without onnx_type -> int8: zp = -128 - (-128) = 0 */
	e = oq_override_find(ov, n, "r", 0);
	cr_assert(e && e->has_qparams && e->dtype == OQ_DT_INT8 && e->scale == 0.0125f &&
	          e->zero_point == 0);
	/* min/max only: a fixed range */
	e = oq_override_find(ov, n, "p", 0);
	cr_assert(e && !e->has_qparams && e->has_range && e->min == 0 && e->max == 3.0f);
	/* dtype float: stays float */
	e = oq_override_find(ov, n, "y", 0);
	cr_assert(e && e->skip);
	/* weights: 3 records = dims[0] of W [3,2,3,3]: per channel, int8 symmetric */
	e = oq_override_find(ov, n, "W", 0);
	cr_assert(e && e->granularity == OQ_GRAN_CHANNEL && e->dtype == OQ_DT_INT8 &&
	          e->symmetric == 1);
	cr_assert_null(oq_override_find(ov, n, "B", 0));

	/* quantize with them: x and r use the file's scale/zp exactly */
	oq_opts_init(&o);
	o.prefer = OQ_PREFER_ACCURACY;
	o.overrides = ov;
	o.n_overrides = n;
	cr_assert_eq(quantize(m, &o, &d), OQ_OK, "%s", d.msg);
	{
		const oq_value *s = oq_graph_find(m->graph, "x_scale"),
		               *z = oq_graph_find(m->graph, "x_zero_point");
		cr_assert(s && s->init && z && z->init);
		cr_assert_eq((float)oq_tensor_get(s->init, 0), 0.01f);
		cr_assert_eq(oq_tensor_get_int(z->init, 0), 51);
		cr_assert_eq(z->init->dtype, OQ_DT_UINT8);
		cr_assert_null(oq_graph_find(m->graph, "y_scale"), "y stays float");
	}
	/* W uses the file's per-channel scale 0.002 (min/max would give 0.25/127), so
	 * W[i] = ((7i mod 11) - 5) * 0.05 quantizes to ((7i mod 11) - 5) * 25 */
	{
		const oq_value *s = oq_graph_find(m->graph, "W_scale"),
		               *q = oq_graph_find(m->graph, "W_quantized");
		cr_assert(s && s->init && q && q->init);
		cr_assert_eq(s->init->nelem, 3);
		for (int c = 0; c < 3; c++)
			cr_assert_eq((float)oq_tensor_get(s->init, (size_t)c), 0.002f);
		for (int i = 0; i < 54; i++)
			cr_assert_eq(oq_tensor_get_int(q->init, (size_t)i), ((i * 7) % 11 - 5) * 25,
				     "W[%d]", i);
	}
	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_read(path, &want, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_encodings_verify(m, &want, NULL, &unused, &d), OQ_OK, "%s", d.msg);
	oq_encodings_free(&want);

	oq_overrides_free(ov, n);
	oq_model_free(m);
	gen_free(g);
}

/* Import of `json` into the cnn model fails with `status` and a message holding `what`. */
static void import_bad(const char *json, int status, const char *what)
{
	gen_model *g = build_cnn();
	oq_model *m = load(g);
	oq_override *ov = (oq_override *)1;
	size_t n = 7;
	oq_diag d;
	const char *path = json ? write_file("bad.json", json) : tmp_path("missing.json");

	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_import(path, m, &ov, &n, &d), status, "%s: got %d: %s", what,
	             oq_encodings_import(path, m, &ov, &n, &d), d.msg);
	cr_assert_null(ov);
	cr_assert_eq(n, 0);
	cr_assert(strstr(d.msg, what), "message '%s' lacks '%s'", d.msg, what);
	cr_assert(strstr(d.msg, path), "message '%s' lacks the file", d.msg);
	cr_assert_null(strchr(d.msg, '\n'));
	oq_model_free(m);
	gen_free(g);
}

#define REC "{\"bitwidth\": 8, \"is_symmetric\": \"False\", \"offset\": -10, \"scale\": 0.1}"

Test(encodings, import_errors)
{
	import_bad("{\"activation_encodings\": {\"nope\": [" REC "]}}", OQ_EUSAGE, "'nope'");
	import_bad("{\"param_encodings\": {\"x\": [" REC "]}}", OQ_EUSAGE,
	           "'x' is no float initializer");
	import_bad("{\"activation_encodings\": {\"W\": [" REC "]}}", OQ_EUSAGE,
	           "'W' is no activation");
	import_bad("{\"activation_encodings\": {\"x\": [" REC ",]}}", OQ_EUSAGE, "malformed JSON");
	import_bad(
	    "{\"activation_encodings\": {\"x\": [{\"bitwidth\": 8, \"scale\": 0.1, \"offset\": -1, "
	    "\"colour\": 1}]}}",
	    OQ_EUSAGE, "\"colour\" is not a known key");
	import_bad("{\"activation_encodings\": {\"x\": [{\"bitwidth\": 8, \"scale\": 0.1, "
	           "\"offset\": 5}]}}",
	           OQ_EUSAGE, "zero point outside");
	import_bad("{\"activation_encodings\": {\"x\": [{\"bitwidth\": 8, \"scale\": -0.1, "
	           "\"offset\": -1}]}}",
	           OQ_EUSAGE, "\"scale\" must be");
	import_bad("{\"activation_encodings\": {\"x\": [{\"bitwidth\": 8, \"scale\": 0.1}]}}",
	           OQ_EUSAGE, "\"offset\" is missing");
	import_bad("{\"activation_encodings\": {\"x\": [{\"bitwidth\": 12, \"scale\": 0.1, "
	           "\"offset\": 0}]}}",
	           OQ_EUSAGE, "must be 4, 8 or 16");
	import_bad("{\"activation_encodings\": {\"x\": [" REC ", " REC "]}}", OQ_EUNSUP,
	           "per-channel");
	import_bad("{\"param_encodings\": {\"fcW\": [" REC ", " REC "]}}", OQ_EUSAGE,
	           "2 records do not fit");
	import_bad(
	    "{\"param_encodings\": {\"fcW\": [{\"bitwidth\": 8, \"scale\": 0.1, \"offset\": -1, "
	    "\"axis\": 2}]}}",
	    OQ_EUSAGE, "axis 2 is outside");
	import_bad("{\"version\": \"1.0.0\", \"activation_encodings\": []}", OQ_EUNSUP, "1.0.0");
	import_bad("{\"activation_encodings\": [], \"param_encodings\": []}", OQ_EUNSUP,
	           "list form");
	import_bad("{\"activations\": {}}", OQ_EUSAGE, "unknown member \"activations\"");
	import_bad("[1, 2]", OQ_EUSAGE, "expected a JSON object");
	import_bad(NULL, OQ_EIO, "cannot open");
}

/* A hand-built QDQ model: names of shared weights "<w>_quantized_1", int32 biases, graph outputs.
 */
Test(encodings, collect_names)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	oq_model *m;
	oq_encodings e;
	oq_diag d;

	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
	gen_init(g, mg, "z", OQ_DT_INT8, 0, NULL, GEN_VALS(-3));
	gen_init(g, mg, "a_quantized_b_quantized_1", OQ_DT_INT8, GEN_SHAPE(2, 2),
	         GEN_VALS(1, 2, 3, 4));
	gen_init(g, mg, "ws", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.25, 0.125));
	gen_init(g, mg, "wz", OQ_DT_INT8, GEN_SHAPE(2), GEN_VALS(0, 0));
	gen_init(g, mg, "bias_quantized", OQ_DT_INT32, GEN_SHAPE(2), GEN_VALS(7, 8));
	gen_init(g, mg, "bs", OQ_DT_FLOAT, GEN_SHAPE(2), GEN_VALS(0.1, 0.1));
	gen_node(g, mg, "DequantizeLinear", "dqw", "a_quantized_b_quantized_1,ws,wz", "w");
	gen_node(g, mg, "DequantizeLinear", "dqb", "bias_quantized,bs", "b");
	gen_node(g, mg, "Gemm", "fc", "x,w,b", "y_QuantizeLinear_Input");
	gen_node(g, mg, "QuantizeLinear", "q", "y_QuantizeLinear_Input,s,z", "yq");
	gen_node(g, mg, "DequantizeLinear", "dq", "yq,s,z", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 2));
	m = load(g);
	oq_diag_init(&d);
	cr_assert_eq(oq_encodings_collect(m, &e, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(e.n, 2, "weight and y; the int32 bias is derived");
	cr_assert_str_eq(e.v[0].name, "a_quantized_b");
	cr_assert(e.v[0].is_param && e.v[0].n == 2 && e.v[0].axis == 1 &&
	          e.v[0].scale[1] == 0.125f);
	cr_assert_str_eq(e.v[1].name, "y", "the graph output, not the renamed producer output");
	cr_assert(!e.v[1].is_param && e.v[1].n == 1 && e.v[1].axis == -1 && e.v[1].zp[0] == -3);
	cr_assert_eq(e.v[1].dtype, OQ_DT_INT8);
	{
		/* int8 zp -3: offset = -128 - (-3) = -125; min = -125 * 0.5, max = 130 * 0.5 */
		const char *p = tmp_path("names.json");
		FILE *f = fopen(p, "w");
		char *t;
		cJSON *root;
		const cJSON *r;
		cr_assert_eq(oq_encodings_write(&e, f), OQ_OK);
		fclose(f);
		t = read_text(p);
		root = cJSON_Parse(t);
		cr_assert_not_null(root, "%s", t);
		r = cJSON_GetArrayItem(records(root, "activation_encodings", "y"), 0);
		cr_assert_eq(num(r, "offset"), -125);
		cr_assert_eq(num(r, "min"), -62.5);
		cr_assert_eq(num(r, "max"), 65);
		cr_assert_str_eq(str(r, "is_symmetric"), "False");
		cJSON_Delete(root);
		free(t);
	}
	oq_encodings_free(&e);
	oq_model_free(m);
	gen_free(g);
}
