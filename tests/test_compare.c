/*
 * test_compare.c - unit tests of `onnxq compare` (src/pipeline/compare.c).
 *
 * Models are built in C (tests/util/gen_model); samples are .npy files
 * written here. The perturbations are exact in float32 (adding 0.125 or
 * 0.5 to small integers and halves, multiplying by 2), so the expected
 * numbers are hand-derived closed forms:
 *
 *   y = x vs y = x + 0.125, x = {1, 2, -3, 4}:
 *     sum r^2 = 30, sum d^2 = 4/64 = 0.0625 -> SQNR 10 log10(480)
 *     sum r t = 30 + 0.125 * 4 = 30.5, sum t^2 = 30 + 2*0.125*4 + 0.0625 = 31.0625
 *   x = {0.5, -0.5, 1, -1}:
 *     sum r^2 = 2.5 -> SQNR 10 log10(40); sum r t = 2.5, sum t^2 = 2.5625
 *
 *   3 layers x -> *2 -> h1 -> +1 -> h2 -> *2 -> y, TEST adds 1.5 instead:
 *     h1 identical (inf); h2 = {3, 5, -5, 9} / {2, 0, 3, -1} with d = 0.5:
 *     pooled SQNR 10 log10((140 + 14) / (4*0.25 + 4*0.25)) = 10 log10(77);
 *     y = 2 h2 has exactly the same ratio (a tie: listed after h2).
 *
 * Covered: identical models (inf, JSON 999), the closed forms above to
 * 1e-6 dB (min, mean, cosine, max abs) in text and JSON, --min-sqnr pass
 * and fail (status and message), per-tensor ranking and --top, inputs
 * mapped by name when TEST orders them differently, a missing output and a
 * missing input named.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/pipeline/compare.h"
#include "gen_model.h"
#include "tmpdir.h"
#include "src/io/npy.h"

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_cmp"));
}

static void teardown(void)
{
	tmpdir_remove();
}

#define at tmpdir_at

static void mkdir_at(const char *rel)
{
	cr_assert_eq(mkdir(at(rel), 0700), 0, "mkdir %s", tmpdir_last());
}

/* rel holding float32[1, 4] v. */
static void sample(const char *rel, const float *v)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){1, 4}, v, 16, &d),
	             OQ_OK, "%s", d.msg);
}

static const float s0[4] = {1, 2, -3, 4};
static const float s1[4] = {0.5f, -0.5f, 1, -1};

/* A loaded model and the generator it borrows from. */
typedef struct model {
	gen_model *g;
	oq_model *m;
} model;

static void load(model *x)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(gen_load(x->g, &x->m, &d), OQ_OK, "%s", d.msg);
}

static Onnx__GraphProto *start(model *x)
{
	Onnx__GraphProto *mg;
	x->g = gen_new(8);
	gen_opset(x->g, "", 13);
	mg = gen_graph(x->g);
	gen_input(x->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	return mg;
}

/* x -> Add(c) -> y, or Identity when c == 0. */
static void build_add(model *x, double c)
{
	Onnx__GraphProto *mg = start(x);
	if (c != 0) {
		gen_init(x->g, mg, "c", OQ_DT_FLOAT, 0, NULL, GEN_VALS(c));
		gen_node(x->g, mg, "Add", "add", "x,c", "y");
	} else {
		gen_node(x->g, mg, "Identity", "id", "x", "y");
	}
	gen_output(x->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	load(x);
}

/* x -> Mul(2) -> h1 -> Add(b) -> h2 [-> Identity -> h2_q] -> Mul(2) -> y. */
static void build_3(model *x, double b, int extra)
{
	Onnx__GraphProto *mg = start(x);
	gen_init(x->g, mg, "two", OQ_DT_FLOAT, 0, NULL, GEN_VALS(2));
	gen_init(x->g, mg, "b", OQ_DT_FLOAT, 0, NULL, GEN_VALS(b));
	gen_node(x->g, mg, "Mul", "l1", "x,two", "h1");
	gen_node(x->g, mg, "Add", "l2", "h1,b", "h2");
	if (extra) {
		gen_node(x->g, mg, "Identity", "q", "h2", "h2_q");
		gen_node(x->g, mg, "Mul", "l3", "h2_q,two", "y");
	} else {
		gen_node(x->g, mg, "Mul", "l3", "h2,two", "y");
	}
	gen_output(x->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	load(x);
}

static void unload(model *x)
{
	oq_model_free(x->m);
	gen_free(x->g);
}

/* Runs compare into memory; report in *text (free it). */
static int cmp(model *r, model *t, oq_compare_opts *o, char **text, oq_diag *d)
{
	size_t n;
	FILE *f = open_memstream(text, &n);
	int rc;
	cr_assert_not_null(f);
	oq_diag_init(d);
	static char data[600];
	snprintf(data, sizeof data, "%s/data", tmpdir_path());
	o->data_dir = data;
	rc = oq_compare(r->m, t->m, o, f, NULL, d);
	fclose(f);
	return rc;
}

/* The number after `"key": ` in a JSON text (first occurrence after `from`). */
static double json_get(const char *text, const char *from, const char *key)
{
	char k[64];
	const char *p = strstr(text, from);
	cr_assert_not_null(p, "no %s in %s", from, text);
	snprintf(k, sizeof k, "\"%s\": ", key);
	p = strstr(p, k);
	cr_assert_not_null(p, "no %s in %s", key, text);
	return strtod(p + strlen(k), NULL);
}

Test(compare, identical_models_are_inf, .init = setup, .fini = teardown)
{
	model a, b;
	oq_compare_opts o = {0};
	oq_diag d;
	char *text;

	build_add(&a, 0);
	build_add(&b, 0);
	mkdir_at("data");
	sample("data/000.npy", s0);
	sample("data/001.npy", s1);
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_str_eq(text, "output 'y': SQNR min inf dB mean inf dB, cosine 1.000000, "
	                       "max abs err 0 (2 samples)\n");
	free(text);
	o.json = 1;
	o.ref_path = "a.onnx";
	o.test_path = "b.onnx";
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_str_eq(text, "{\"ref\": \"a.onnx\", \"test\": \"b.onnx\", \"samples\": 2, "
	                       "\"outputs\": [{\"name\": \"y\", \"sqnr_min_db\": 999, "
	                       "\"sqnr_mean_db\": 999, \"cosine_mean\": 1, \"max_abs_err\": 0}], "
	                       "\"tensors\": []}\n");
	free(text);
	/* inf passes any --min-sqnr */
	o.has_min_sqnr = 1;
	o.min_sqnr = 500;
	cr_expect_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	free(text);
	unload(&a);
	unload(&b);
}

Test(compare, known_perturbation, .init = setup, .fini = teardown)
{
	model a, b;
	oq_compare_opts o = {0};
	oq_diag d;
	char *text, want[512];
	oq_compare_summary sum;
	const double q0 = 10 * log10(480.0), q1 = 10 * log10(40.0);
	const double c0 = 30.5 / sqrt(30 * 31.0625), c1 = 2.5 / sqrt(2.5 * 2.5625);

	build_add(&a, 0);
	build_add(&b, 0.125);
	mkdir_at("data");
	sample("data/000.npy", s0);
	sample("data/001.npy", s1);

	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	snprintf(want, sizeof want,
	         "output 'y': SQNR min %.1f dB mean %.1f dB, cosine %.6f, max abs err 0.125 (2 "
	         "samples)\n",
	         q1, (q0 + q1) / 2, (c0 + c1) / 2);
	cr_expect_str_eq(text, want);
	cr_expect_str_eq(want,
	                 "output 'y': SQNR min 16.0 dB mean 21.4 dB, cosine 0.993429, max abs "
	                 "err 0.125 (2 samples)\n");
	free(text);

	/* no report, only the worst output (the one output's min and mean); o.data_dir set by cmp */
	oq_diag_init(&d);
	cr_assert_eq(oq_compare(a.m, b.m, &o, NULL, &sum, &d), OQ_OK, "%s", d.msg);
	cr_expect_lt(fabs(sum.sqnr_min - q1), 1e-9, "%g", sum.sqnr_min);
	cr_expect_lt(fabs(sum.sqnr_mean - (q0 + q1) / 2), 1e-9, "%g", sum.sqnr_mean);
	cr_expect_eq(sum.n_outputs, 1);
	cr_expect_eq(sum.n_samples, 2);

	o.json = 1;
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_lt(fabs(json_get(text, "\"y\"", "sqnr_min_db") - q1), 1e-6, "%s", text);
	cr_expect_lt(fabs(json_get(text, "\"y\"", "sqnr_mean_db") - (q0 + q1) / 2), 1e-6, "%s",
	             text);
	cr_expect_lt(fabs(json_get(text, "\"y\"", "cosine_mean") - (c0 + c1) / 2), 1e-8, "%s",
	             text);
	cr_expect_eq(json_get(text, "\"y\"", "max_abs_err"), 0.125, "%s", text);
	free(text);

	/* one sample: min == mean == 10 log10(480) */
	cr_assert_eq(unlink(at("data/001.npy")), 0);
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_lt(fabs(json_get(text, "\"y\"", "sqnr_min_db") - q0), 1e-6, "%s", text);
	cr_expect_lt(fabs(json_get(text, "\"y\"", "sqnr_mean_db") - q0), 1e-6, "%s", text);
	free(text);
	unload(&a);
	unload(&b);
}

Test(compare, min_sqnr, .init = setup, .fini = teardown)
{
	model a, b;
	oq_compare_opts o = {0};
	oq_diag d;
	char *text;

	build_add(&a, 0);
	build_add(&b, 0.125);
	mkdir_at("data");
	sample("data/000.npy", s0);
	sample("data/001.npy", s1);
	o.has_min_sqnr = 1;
	o.min_sqnr = 20; /* min is 10 log10(40) = 16.02 */
	cr_expect_eq(cmp(&a, &b, &o, &text, &d), OQ_ECHECK);
	cr_expect_str_eq(d.msg, "compare: output 'y' SQNR 16.0 dB is below --min-sqnr 20");
	/* the report is still written */
	cr_expect_eq(strncmp(text, "output 'y': SQNR min 16.0 dB", 28), 0, "%s", text);
	free(text);
	o.min_sqnr = 16;
	cr_expect_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	free(text);
	unload(&a);
	unload(&b);
}

Test(compare, per_tensor_ranking, .init = setup, .fini = teardown)
{
	model a, b;
	oq_compare_opts o = {0};
	oq_diag d;
	char *text, want[512];
	const double q = 10 * log10(77.0);

	build_3(&a, 1, 0);
	build_3(&b, 1.5, 1);
	mkdir_at("data");
	sample("data/000.npy", s0);
	sample("data/001.npy", s1);
	o.per_tensor = 1;
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	/* outputs: y per sample 10 log10(140) and 10 log10(14) */
	snprintf(
	    want, sizeof want,
	    "output 'y': SQNR min %.1f dB mean %.1f dB, cosine %.6f, max abs err 1 (2 samples)\n"
	    "worst tensors by SQNR (3 matched by name):\n"
	    "tensor 'h2' (Add): SQNR %.1f dB\n"
	    "tensor 'y' (Mul): SQNR %.1f dB\n"
	    "tensor 'h1' (Mul): SQNR inf dB\n",
	    10 * log10(14.0), (10 * log10(140.0) + 10 * log10(14.0)) / 2,
	    /* y = 2 h2: cosines of h2 (sum r t = 140 + 0.5*12, sum t^2 = 140 + 12 + 1; then
	       14 + 0.5*4, 14 + 4 + 1) */
	    (146 / sqrt(140.0 * 153) + 16 / sqrt(14.0 * 19)) / 2, q, q);
	cr_expect_str_eq(text, want);
	free(text);

	/* JSON: pooled value to 1e-6, the tie in REF's node order, --top */
	o.json = 1;
	o.top = 2;
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_lt(fabs(json_get(text, "\"h2\"", "sqnr_db") - q), 1e-6, "%s", text);
	cr_expect_neq(strstr(text, "\"tensors\": [{\"name\": \"h2\", \"op\": \"Add\", "), NULL,
	              "%s", text);
	cr_expect_neq(strstr(text, "}, {\"name\": \"y\", \"op\": \"Mul\", "), NULL, "%s", text);
	cr_expect_eq(strstr(text, "\"h1\""), NULL, "%s", text);
	free(text);
	unload(&a);
	unload(&b);
}

/* a, b -> Sub(a, b) -> y with the inputs declared in the given order. */
static void build_sub(model *x, const char *first, const char *second)
{
	Onnx__GraphProto *mg;
	x->g = gen_new(8);
	gen_opset(x->g, "", 13);
	mg = gen_graph(x->g);
	gen_input(x->g, mg, first, OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	gen_input(x->g, mg, second, OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	gen_node(x->g, mg, "Sub", "sub", "a,b", "y");
	gen_output(x->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	load(x);
}

Test(compare, inputs_matched_by_name, .init = setup, .fini = teardown)
{
	model a, b;
	oq_compare_opts o = {0};
	oq_diag d;
	char *text;

	build_sub(&a, "a", "b");
	build_sub(&b, "b", "a");
	mkdir_at("data");
	mkdir_at("data/000");
	sample("data/000/a.npy", s0);
	sample("data/000/b.npy", s1);
	cr_assert_eq(cmp(&a, &b, &o, &text, &d), OQ_OK, "%s", d.msg);
	/* a - b in both: identical. Fed by position, TEST would compute b - a. */
	cr_expect_str_eq(text, "output 'y': SQNR min inf dB mean inf dB, cosine 1.000000, "
	                       "max abs err 0 (1 samples)\n");
	free(text);
	unload(&a);
	unload(&b);
}

Test(compare, missing_output_and_input, .init = setup, .fini = teardown)
{
	model a, b, c;
	oq_compare_opts o = {0};
	oq_diag d;
	char *text;
	Onnx__GraphProto *mg;

	build_add(&a, 0);
	/* TEST names its output z */
	mg = start(&b);
	gen_node(b.g, mg, "Identity", "id", "x", "z");
	gen_output(b.g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	load(&b);
	/* TEST names its input w */
	c.g = gen_new(8);
	gen_opset(c.g, "", 13);
	mg = gen_graph(c.g);
	gen_input(c.g, mg, "w", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	gen_node(c.g, mg, "Identity", "id", "w", "y");
	gen_output(c.g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 4));
	load(&c);
	mkdir_at("data");
	sample("data/000.npy", s0);

	cr_expect_eq(cmp(&a, &b, &o, &text, &d), OQ_EINVAL);
	cr_expect_str_eq(d.msg, "compare: output 'y' of REF is not an output of TEST; outputs are "
	                        "matched by name");
	cr_expect_str_eq(text, "");
	free(text);
	cr_expect_eq(cmp(&a, &c, &o, &text, &d), OQ_EINVAL);
	cr_expect_str_eq(d.msg,
	                 "compare: TEST input 'w' is not an input of REF; both models need the "
	                 "same input names");
	free(text);
	unload(&a);
	unload(&b);
	unload(&c);
}
