/*
 * test_calibrate.c - unit tests of min/max calibration (calib/calibrate.c).
 *
 * Models are built in C (tests/util/gen_model) from Relu, Neg, Cast and
 * MatMul; sample folders are written here with the npy writer. Expected
 * ranges are hand-computed from the sample values (Relu clamps negatives to
 * 0, Neg flips the sign, float16 holds these small integers exactly).
 *
 * Covered: ranges of inputs and node outputs (If/Loop bodies included: every
 * iteration and call), sorted by name, nothing for
 * non-float tensors; NaN/Inf skipped and counted with one warning per
 * tensor; order independence (the same samples under reversed names, -0.0
 * and +0.0 in different samples) and threads 1 vs 2, bit for bit; --calib
 * limit; random:N[:SEED] (warning, determinism, the seed matters, bad
 * specs); the empty-folder message; a bad sample named before anything runs;
 * the non-terminal summary line; need_only observing only the needed values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/calibrate.h"
#include "gen_model.h"
#include "tmpdir.h"
#include "src/io/npy.h"

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_calib"));
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

/* rel.npy holding float32[2, 3] v. */
static void sample(const char *rel, const float *v)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){2, 3}, v, 24, &d),
	             OQ_OK, "%s", d.msg);
}

/* A loaded model and what it borrows. */
typedef struct fixture {
	gen_model *g;
	oq_model *m;
} fixture;

/*
 * x float[2, 3] -> Relu -> y; x -> Neg -> z; x -> Cast(float16) -> h;
 * x -> Cast(int32) -> i (not float: not observed). Outputs y, z, h, i.
 */
static void build(fixture *f)
{
	oq_diag d;
	Onnx__GraphProto *mg;
	Onnx__NodeProto *n;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_node(f->g, mg, "Relu", "relu", "x", "y");
	gen_node(f->g, mg, "Neg", "neg", "x", "z");
	n = gen_node(f->g, mg, "Cast", "to_h", "x", "h");
	gen_attr_int(f->g, n, "to", OQ_DT_FLOAT16);
	n = gen_node(f->g, mg, "Cast", "to_i", "x", "i");
	gen_attr_int(f->g, n, "to", OQ_DT_INT32);
	gen_output(f->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(f->g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(f->g, mg, "h", OQ_DT_FLOAT16, GEN_SHAPE(2, 3));
	gen_output(f->g, mg, "i", OQ_DT_INT32, GEN_SHAPE(2, 3));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

/* x float[4, 64] -> MatMul(W [64, 64]) -> y -> Relu -> r: big enough to split over threads. */
static void build_matmul(fixture *f)
{
	oq_diag d;
	Onnx__GraphProto *mg;
	static double w[64 * 64];

	for (int i = 0; i < 64 * 64; i++)
		w[i] = ((i * 37) % 101 - 50) / 64.0;
	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(4, 64));
	gen_init(f->g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(64, 64), w);
	gen_node(f->g, mg, "MatMul", "mm", "x,W", "y");
	gen_node(f->g, mg, "Relu", "relu", "y", "r");
	gen_output(f->g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(4, 64));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

static void unbuild(fixture *f)
{
	oq_model_free(f->m);
	gen_free(f->g);
}

/* Calibrates with source/limit/threads; progress text into *log (free it). */
static int calib(fixture *f, const char *src, size_t limit, int threads, oq_ranges *r, char **log,
                 oq_diag *d)
{
	oq_calib_opts o;
	size_t n;
	FILE *p = open_memstream(log, &n);
	int rc;

	cr_assert_not_null(p);
	o.source = src;
	o.limit = limit;
	o.threads = threads;
	o.progress = p;
	oq_diag_init(d);
	rc = oq_calibrate_minmax(f->m, &o, r, d);
	fclose(p);
	return rc;
}

static void expect_range(const oq_ranges *r, const char *name, float lo, float hi, uint64_t bad)
{
	const oq_range *x = oq_ranges_find(r, name);
	cr_assert_not_null(x, "no range for '%s'", name);
	cr_expect_eq(x->min, lo, "%s: min %g, want %g", name, (double)x->min, (double)lo);
	cr_expect_eq(x->max, hi, "%s: max %g, want %g", name, (double)x->max, (double)hi);
	cr_expect_eq(x->n_nan, bad, "%s: %llu NaN/Inf, want %llu", name,
	             (unsigned long long)x->n_nan, (unsigned long long)bad);
}

static const float s0[6] = {-1, 2, -3, 4, -5, 6};
static const float s1[6] = {0.5f, -7, 1, 1, 1, 1};
static const float s2[6] = {3, 3, 3, 3, 3, 5.5f};

Test(calibrate, ranges_of_inputs_and_outputs, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	char *log;

	build(&f);
	mkdir_at("c");
	sample("c/000.npy", s0);
	sample("c/001.npy", s1);
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	/* x in [-7, 6]; Relu [0, 6]; Neg [-6, 7]; float16 copy [-7, 6]; int32 i not observed */
	cr_assert_eq(r.n, 4);
	cr_expect_str_eq(r.v[0].name, "h");
	cr_expect_str_eq(r.v[1].name, "x");
	cr_expect_str_eq(r.v[2].name, "y");
	cr_expect_str_eq(r.v[3].name, "z");
	expect_range(&r, "x", -7, 6, 0);
	expect_range(&r, "y", 0, 6, 0);
	expect_range(&r, "z", -6, 7, 0);
	expect_range(&r, "h", -7, 6, 0);
	cr_expect_null(oq_ranges_find(&r, "i"));
	/* not a terminal: one summary line, nothing else */
	cr_expect_eq(strncmp(log, "calibrate: 2 samples, 4 tensors observed, ", 42), 0, "%s", log);
	cr_expect_eq(strchr(log, '\n') - log + 1, (long)strlen(log), "%s", log);
	free(log);
	oq_ranges_free(&r);
	unbuild(&f);
}

Test(calibrate, nan_and_inf_skipped_and_counted, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	char *log;
	const float bad[6] = {NAN, 1, -INFINITY, 2, INFINITY, -3};

	build(&f);
	mkdir_at("c");
	sample("c/000.npy", bad);
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	/* x: finite {1, 2, -3}; z = -x: finite {-1, -2, 3}; 3 skipped in each */
	expect_range(&r, "x", -3, 2, 3);
	expect_range(&r, "z", -2, 3, 3);
	cr_expect_neq(strstr(log, "calibrate: warning: tensor 'x': 3 NaN/Inf values skipped\n"),
	              NULL, "%s", log);
	cr_expect_neq(strstr(log, "calibrate: warning: tensor 'z': 3 NaN/Inf values skipped\n"),
	              NULL, "%s", log);
	/* once per tensor, whatever the number of samples */
	free(log);
	oq_ranges_free(&r);

	sample("c/001.npy", bad);
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	expect_range(&r, "x", -3, 2, 6);
	{
		const char *p = strstr(log, "tensor 'x'");
		cr_expect(p && !strstr(p + 1, "tensor 'x'"), "%s", log);
	}
	free(log);
	oq_ranges_free(&r);
	unbuild(&f);
}

Test(calibrate, all_nan_tensor_has_min_above_max, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	char *log;
	const float nan6[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
	const oq_range *x;

	build(&f);
	mkdir_at("c");
	sample("c/000.npy", nan6);
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	x = oq_ranges_find(&r, "x");
	cr_assert_not_null(x);
	cr_expect_gt(x->min, x->max);
	cr_expect_eq(x->n_nan, 6);
	free(log);
	oq_ranges_free(&r);
	unbuild(&f);
}

static void expect_same(const oq_ranges *a, const oq_ranges *b)
{
	cr_assert_eq(a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		cr_expect_str_eq(a->v[i].name, b->v[i].name);
		cr_expect_eq(memcmp(&a->v[i].min, &b->v[i].min, sizeof(float)), 0, "%s min",
		             a->v[i].name);
		cr_expect_eq(memcmp(&a->v[i].max, &b->v[i].max, sizeof(float)), 0, "%s max",
		             a->v[i].name);
		cr_expect_eq(a->v[i].n_nan, b->v[i].n_nan);
	}
}

Test(calibrate, sample_order_does_not_matter, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges a, b;
	oq_diag d;
	char *log;
	/* x >= 0 everywhere, its minimum is zero: -0.0 in one sample, +0.0 in the other */
	const float p[6] = {-0.0f, 2, 3, 4, 5, 6};
	const float q[6] = {0.0f, 1, 1, 1, 1, 9};

	build(&f);
	mkdir_at("a");
	mkdir_at("b");
	sample("a/000.npy", p);
	sample("a/001.npy", q);
	sample("a/002.npy", s2);
	sample("b/000.npy", s2);
	sample("b/001.npy", q);
	sample("b/002.npy", p);
	cr_assert_eq(calib(&f, at("a"), 0, 1, &a, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	cr_assert_eq(calib(&f, at("b"), 0, 1, &b, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	expect_same(&a, &b);
	expect_range(&a, "x", 0, 9, 0);
	cr_expect(!signbit(oq_ranges_find(&a, "x")->min), "min of x is -0.0");
	expect_range(&a, "z", -9, 0, 0);
	oq_ranges_free(&a);
	oq_ranges_free(&b);
	unbuild(&f);
}

Test(calibrate, threads_do_not_matter, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges a, b;
	oq_diag d;
	char *log;

	build_matmul(&f);
	cr_assert_eq(calib(&f, "random:6:3", 0, 1, &a, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	cr_assert_eq(calib(&f, "random:6:3", 0, 2, &b, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	cr_assert_eq(a.n, 3); /* r, x, y */
	expect_same(&a, &b);
	/* random floats are in [0, 1); a product of them with W is not all zero */
	cr_expect(a.v[1].min >= 0 && a.v[1].max < 1 && a.v[1].max > 0.5f);
	cr_expect(a.v[2].min < 0 && a.v[2].max > 0);
	cr_expect_eq(a.v[0].min, 0);
	cr_expect_eq(a.v[0].max, a.v[2].max);
	oq_ranges_free(&a);
	oq_ranges_free(&b);
	unbuild(&f);
}

Test(calibrate, limit_takes_first_samples, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	char *log;

	build(&f);
	mkdir_at("c");
	sample("c/000.npy", s2);
	sample("c/001.npy", s0);
	sample("c/002.npy", s1);
	cr_assert_eq(calib(&f, at("c"), 2, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	expect_range(&r, "x", -5, 6, 0); /* s2 and s0 only: s1's -7 is not seen */
	cr_expect_eq(strncmp(log, "calibrate: 2 samples,", 21), 0, "%s", log);
	free(log);
	oq_ranges_free(&r);
	/* a bad sample past the limit is not read */
	cr_assert_eq(
	    oq_npy_write(at("c/003.npy"), OQ_DT_FLOAT, 1, (const int64_t[]){6}, s0, 24, &d), OQ_OK);
	cr_assert_eq(calib(&f, at("c"), 3, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	expect_range(&r, "x", -7, 6, 0);
	free(log);
	oq_ranges_free(&r);
	unbuild(&f);
}

Test(calibrate, bad_sample_named_before_running, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	char *log, want[700];

	build(&f);
	mkdir_at("c");
	sample("c/000.npy", s0);
	cr_assert_eq(
	    oq_npy_write(at("c/001.npy"), OQ_DT_FLOAT, 1, (const int64_t[]){6}, s0, 24, &d), OQ_OK);
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_EINVAL);
	snprintf(want, sizeof want,
	         "run: %s/c/001.npy: input 'x' expects float[2, 3], the file holds float[6] "
	         "(rank 1, not 2)",
	         tmpdir_path());
	cr_expect_str_eq(d.msg, want);
	cr_expect_str_eq(log, ""); /* nothing ran */
	cr_expect_eq(r.n, 0);
	free(log);
	unbuild(&f);
}

Test(calibrate, empty_folder, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	char *log, want[600];

	build(&f);
	mkdir_at("c");
	mkdir_at("c/.hidden");
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_EINVAL);
	snprintf(
	    want, sizeof want,
	    "calibrate: %s/c holds no samples; give NNN.npy files or NNN/ folders (see README)",
	    tmpdir_path());
	cr_expect_str_eq(d.msg, want);
	free(log);
	unbuild(&f);
}

Test(calibrate, random_source)
{
	fixture f;
	oq_ranges a, b, c;
	oq_diag d;
	char *log;

	build(&f);
	cr_assert_eq(calib(&f, "random:4", 0, 1, &a, &log, &d), OQ_OK, "%s", d.msg);
	{
		const char *w =
		    "calibrate: warning: random calibration data is not representative; "
		    "ranges will not match real inputs\n"
		    "calibrate: 4 samples, 4 tensors observed, ";
		cr_expect_eq(strncmp(log, w, strlen(w)), 0, "%s", log);
	}
	free(log);
	/* floats uniform in [0, 1): Relu keeps them, Neg mirrors them */
	{
		const oq_range *x = oq_ranges_find(&a, "x"), *z = oq_ranges_find(&a, "z");
		cr_assert(x && z);
		cr_expect(x->min >= 0 && x->max < 1 && x->min < x->max);
		cr_expect(z->min == -x->max && z->max == -x->min);
	}
	/* SEED defaults to 0, and the same spec gives the same ranges */
	cr_assert_eq(calib(&f, "random:4:0", 0, 1, &b, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	expect_same(&a, &b);
	oq_ranges_free(&b);
	/* another seed: other data */
	cr_assert_eq(calib(&f, "random:4:1", 0, 1, &c, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	cr_expect(oq_ranges_find(&c, "x")->min != oq_ranges_find(&a, "x")->min);
	oq_ranges_free(&c);
	/* samples differ from each other: 4 samples see a range at least as wide as the first 1 */
	cr_assert_eq(calib(&f, "random:4", 1, 1, &b, &log, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(strncmp(strchr(log, '\n') + 1, "calibrate: 1 samples,", 21), 0, "%s", log);
	free(log);
	cr_expect(oq_ranges_find(&b, "x")->min >= oq_ranges_find(&a, "x")->min);
	cr_expect(oq_ranges_find(&b, "x")->max <= oq_ranges_find(&a, "x")->max);
	cr_expect(oq_ranges_find(&b, "x")->min != oq_ranges_find(&a, "x")->min ||
	          oq_ranges_find(&b, "x")->max != oq_ranges_find(&a, "x")->max);
	oq_ranges_free(&b);
	oq_ranges_free(&a);
	/* bad specs */
	const char *bad[] = {"random:", "random:0", "random:x", "random:3:", "random:3:-1"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		cr_expect_eq(calib(&f, bad[i], 0, 1, &a, &log, &d), OQ_EUSAGE, "%s", bad[i]);
		cr_expect_neq(strstr(d.msg, "expected random:N or random:N:SEED"), NULL, "%s",
		              d.msg);
		free(log);
	}
	unbuild(&f);
}

/*
 * A sample that fails while running (an index out of range for Gather, which no check before
 * the run can see) stops calibration with that sample's error. With several threads the
 * samples after the first run several at a time (calibrate.c's sample lanes) and later ones
 * may finish first, but the error reported must still be the first failing sample's: samples 4
 * (index 40) and 6 (index 60) fail, so it is index 40 at every thread count, every time.
 */
Test(calibrate, first_failing_sample_whatever_the_threads, .init = setup, .fini = teardown)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	oq_model *m;
	oq_diag d;
	static const double w[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

	gen_opset(g, "", 13);
	gen_input(g, mg, "i", OQ_DT_INT64, GEN_SHAPE(2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(10), w);
	gen_node(g, mg, "Gather", "gather", "W,i", "y");
	gen_node(g, mg, "Relu", "relu", "y", "r");
	gen_output(g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	mkdir_at("c");
	for (int s = 0; s < 12; s++) {
		int64_t v[2] = {s % 10, s == 4 ? 40 : s == 6 ? 60 : (s * 3) % 10};
		char rel[32];
		snprintf(rel, sizeof rel, "c/%03d.npy", s);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_INT64, 1, (const int64_t[]){2}, v, 16, &d),
		             OQ_OK, "%s", d.msg);
	}
	for (int threads = 1; threads <= 4; threads++)
		for (int rep = 0; rep < 5; rep++) {
			oq_calib_opts o;
			oq_ranges r;
			memset(&o, 0, sizeof o);
			o.source = at("c");
			o.threads = threads;
			oq_diag_init(&d);
			cr_assert_eq(oq_calibrate_minmax(m, &o, &r, &d), OQ_EINVAL, "%d threads: %s",
			             threads, d.msg);
			cr_expect(strstr(d.msg, "gather") && strstr(d.msg, "= 40 is out of range"),
			          "%d threads: %s", threads, d.msg);
			cr_expect_eq(r.n, 0);
		}
	oq_model_free(m);
	gen_free(g);
}

/*
 * Control flow: x float[2, 3]; m = ReduceMax(x) (a scalar); If(m > 0) then ty = Relu(x), else
 * ey = Neg(x) -> y; Loop(M = 3, v0 = {1}) with body v_out = Add(v_in, k), k = {1} from the main
 * graph -> vf. The body values are observed at every iteration and call: v_in takes 1, 2, 3 and
 * v_out 2, 3, 4.
 */
static void build_control(fixture *f)
{
	oq_diag d;
	Onnx__GraphProto *mg, *b;
	Onnx__NodeProto *n;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_init(f->g, mg, "zero", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0));
	gen_init(f->g, mg, "M", OQ_DT_INT64, 0, NULL, GEN_VALS(3));
	gen_init(f->g, mg, "v0", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	gen_init(f->g, mg, "k", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(1));
	n = gen_node(f->g, mg, "ReduceMax", "max", "x", "m");
	gen_attr_int(f->g, n, "keepdims", 0);
	gen_node(f->g, mg, "Greater", "gt", "m,zero", "c");
	n = gen_node(f->g, mg, "If", "if", "c", "y");
	b = gen_attr_graph(f->g, n, "then_branch", "then");
	gen_node(f->g, b, "Relu", "relu", "x", "ty");
	gen_output(f->g, b, "ty", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	b = gen_attr_graph(f->g, n, "else_branch", "else");
	gen_node(f->g, b, "Neg", "neg", "x", "ey");
	gen_output(f->g, b, "ey", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	n = gen_node(f->g, mg, "Loop", "loop", "M,,v0", "vf");
	b = gen_attr_graph(f->g, n, "body", "body");
	gen_input(f->g, b, "i", OQ_DT_INT64, 0, NULL);
	gen_input(f->g, b, "c_in", OQ_DT_BOOL, 0, NULL);
	gen_input(f->g, b, "v_in", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_node(f->g, b, "Identity", "cid", "c_in", "c_out");
	gen_node(f->g, b, "Add", "add", "v_in,k", "v_out");
	gen_output(f->g, b, "c_out", OQ_DT_BOOL, 0, NULL);
	gen_output(f->g, b, "v_out", OQ_DT_FLOAT, GEN_SHAPE(1));
	gen_output(f->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 3));
	gen_output(f->g, mg, "vf", OQ_DT_FLOAT, GEN_SHAPE(1));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

Test(calibrate, values_inside_if_and_loop_bodies, .init = setup, .fini = teardown)
{
	static const float neg[6] = {-1, -2, -3, -4, -5, -0.5f};
	fixture f;
	oq_ranges r, r2;
	oq_diag d;
	char *log;

	build_control(&f);
	mkdir_at("c");
	sample("c/000.npy", s0); /* max 6 > 0: then, Relu */
	sample("c/001.npy", neg); /* max -0.5: else, Neg */
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	expect_range(&r, "x", -5, 6, 0);
	expect_range(&r, "m", -0.5f, 6, 0);
	expect_range(&r, "ty", 0, 6, 0);     /* Relu(s0) */
	expect_range(&r, "ey", 0.5f, 5, 0);  /* Neg(neg) */
	expect_range(&r, "y", 0, 6, 0);      /* the If output of both calls: [0, 6] and [0.5, 5] */
	expect_range(&r, "v_in", 1, 3, 0);   /* iterations 0..2, both samples */
	expect_range(&r, "v_out", 2, 4, 0);
	expect_range(&r, "vf", 4, 4, 0);
	cr_expect_null(oq_ranges_find(&r, "k")); /* an initializer the body captures: not a node output */
	/* two threads: the same ranges, bit for bit */
	cr_assert_eq(calib(&f, at("c"), 0, 2, &r2, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	expect_same(&r, &r2);
	oq_ranges_free(&r);
	oq_ranges_free(&r2);
	/* only the then branch taken: nothing of the else branch */
	cr_assert_eq(remove(at("c/001.npy")), 0);
	cr_assert_eq(calib(&f, at("c"), 0, 1, &r, &log, &d), OQ_OK, "%s", d.msg);
	free(log);
	expect_range(&r, "ty", 0, 6, 0);
	cr_expect_null(oq_ranges_find(&r, "ey"));
	oq_ranges_free(&r);
	unbuild(&f);
}

/*
 * need_only: the values hist_need marks 0 are not observed (no range), those it marks get the
 * ranges of a run that observes everything, bit for bit (mse: their histograms are the same).
 * On build_matmul: need x and r; y (the MatMul output) has no range.
 */
Test(calibrate, need_only_observes_the_needed_values, .init = setup, .fini = teardown)
{
	fixture f;
	oq_calib_opts o;
	oq_ranges all, some;
	oq_diag d;
	uint8_t *need;
	char *log;
	size_t n;
	FILE *p;

	build_matmul(&f);
	need = calloc(f.m->graph->n_values + 1, 1);
	cr_assert(need);
	need[oq_graph_find(f.m->graph, "x")->index] = 1;
	need[oq_graph_find(f.m->graph, "r")->index] = 1;
	memset(&o, 0, sizeof o);
	o.source = "random:5:7";
	o.threads = 2;
	o.method = OQ_CALIB_MSE;
	o.hist_need = need;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(f.m, &o, &all, &d), OQ_OK, "%s", d.msg);
	o.need_only = 1;
	cr_assert_not_null(p = open_memstream(&log, &n));
	o.progress = p;
	cr_assert_eq(oq_calibrate(f.m, &o, &some, &d), OQ_OK, "%s", d.msg);
	fclose(p);
	cr_expect_eq(all.n, 3);
	cr_assert_eq(some.n, 2, "x and r only");
	cr_expect_null(oq_ranges_find(&some, "y"));
	for (size_t i = 0; i < some.n; i++) {
		const oq_range *a = oq_ranges_find(&all, some.v[i].name);
		cr_assert_not_null(a);
		cr_expect(!memcmp(&a->min, &some.v[i].min, sizeof a->min) && !memcmp(&a->max, &some.v[i].max, sizeof a->max),
			  "%s: [%a, %a] vs [%a, %a]", a->name, (double)a->min, (double)a->max, (double)some.v[i].min,
			  (double)some.v[i].max);
	}
	cr_expect(strstr(log, "2 tensors observed") != NULL, "%s", log);
	free(log);
	free(need);
	oq_ranges_free(&all);
	oq_ranges_free(&some);
	unbuild(&f);
}
