/*
 * test_run.c - unit tests of the sample logic and `onnxq run` (calib/samples.c).
 *
 * Models are built in C (tests/util/gen_model) from Relu nodes only, so the
 * tests do not wait for other kernel families. Sample files are written by
 * hand here (npy header text + IEEE-754 floats; TensorProto .pb through the
 * protobuf-c structs), not with the npy writer under test elsewhere.
 * Expected values are hand-computed: Relu of the given numbers, the first
 * splitmix64 output for seed 0 (0xE220A8397B1DCDAF, the published test
 * vector), and every expected error message in full.
 *
 * Covered: the flat, per-sample-folder (names, positions, '/' -> '_') and
 * ONNX test layouts, lexical order, explicit NAME=FILE inputs (incl. '=' in
 * a name and random:SEED), validation errors (missing input, extra file,
 * wrong dtype, rank, fixed or symbolic dim, layouts mixed or wrong for the
 * model, duplicate sources, empty folder), and oq_run end to end: written
 * outputs, the text and JSON reports, no output at all when a later sample
 * is invalid.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen_model.h"
#include "tmpdir.h"
#include "src/io/npy.h"
#include "onnx.pb-c.h"
#include "calib/samples.h"

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_run"));
}

static void teardown(void)
{
	tmpdir_remove();
}

#define at tmpdir_at

static void mkdirs(const char *rel)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", tmpdir_path(), rel);
	for (char *q = p + strlen(tmpdir_path()) + 1; *q; q++)
		if (*q == '/') {
			*q = 0;
			mkdir(p, 0700);
			*q = '/';
		}
	mkdir(p, 0700);
}

static void put_file(const char *rel, const void *p, size_t n)
{
	FILE *f = fopen(at(rel), "wb");
	cr_assert_not_null(f, "cannot create %s", tmpdir_last());
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* A .npy file by hand: v1 header with `descr` and `shape` ("(2, 3)") padded to 64, then the data.
 */
static void npy(const char *rel, const char *descr, const char *shape, const void *data, size_t n)
{
	unsigned char buf[4096];
	size_t len;
	int w = snprintf((char *)buf + 10, sizeof buf - 10,
	                 "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
	len = 10 + (size_t)w;
	while ((len + 1) % 64)
		buf[len++] = ' ';
	buf[len++] = '\n';
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (unsigned char)((len - 10) & 0xff);
	buf[9] = (unsigned char)((len - 10) >> 8);
	cr_assert_lt(len + n, sizeof buf);
	memcpy(buf + len, data, n);
	put_file(rel, buf, len + n);
}

static const float f6[6] = {-1, 2, -3, 4, -5, 6};

static void npy_f32(const char *rel, const char *shape, size_t n)
{
	npy(rel, "<f4", shape, f6, n * 4);
}

/* A serialized float TensorProto holding vals. */
static void pb_f32(const char *rel, int rank, const int64_t *dims, const float *vals, size_t n)
{
	Onnx__TensorProto t;
	int64_t dd[8];
	uint8_t buf[1024];
	size_t len;

	onnx__tensor_proto__init(&t);
	memcpy(dd, dims, (size_t)rank * sizeof *dims);
	t.n_dims = (size_t)rank;
	t.dims = dd;
	t.has_data_type = 1;
	t.data_type = OQ_DT_FLOAT;
	t.n_float_data = n;
	t.float_data = (float *)vals;
	len = onnx__tensor_proto__get_packed_size(&t);
	cr_assert_lt(len, sizeof buf);
	onnx__tensor_proto__pack(&t, buf);
	put_file(rel, buf, len);
}

/*
 * Models: "one" has x float[N, 3] -> Relu -> y float[N, 3];
 * "two" adds z float[N, 2] -> Relu -> out/y2 float[N, 2].
 */
typedef struct fixture {
	gen_model *g;
	oq_model *m;
	oq_exec *e;
} fixture;

static void build(fixture *f, int two, const char *xname)
{
	oq_diag d;
	oq_exec_opts o = {.threads = 1};
	Onnx__GraphProto *mg;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, xname, OQ_DT_FLOAT, GEN_SHAPE(-1, 3));
	gen_node(f->g, mg, "Relu", "r1", xname, "y");
	gen_output(f->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(-1, 3));
	if (two) {
		gen_input(f->g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(-1, 2));
		gen_node(f->g, mg, "Relu", "r2", "z", "out/y2");
		gen_output(f->g, mg, "out/y2", OQ_DT_FLOAT, GEN_SHAPE(-1, 2));
	}
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_exec_new(f->m, &o, &f->e, &d), OQ_OK, "%s", d.msg);
}

static void unbuild(fixture *f)
{
	oq_exec_free(f->e);
	oq_model_free(f->m);
	gen_free(f->g);
}

/* Scans + checks; returns the first failing status, message in d. */
static int scan_check(fixture *f, oq_samples *s, oq_diag *d)
{
	int rc;
	oq_diag_init(d);
	memset(s, 0, sizeof *s);
	if ((rc = oq_samples_scan(tmpdir_path(), f->e, s, d)))
		return rc;
	if ((rc = oq_samples_check(s, f->e, d)))
		oq_samples_free(s);
	return rc;
}

/* Expects scan+check to fail with status and exactly `want` ("%D": the scratch folder). */
static void expect_error(fixture *f, int status, const char *want)
{
	char full[1024];
	size_t o = 0;
	oq_samples s;
	oq_diag d;
	int rc;

	for (const char *p = want; *p && o + 64 < sizeof full; p++) {
		if (p[0] == '%' && p[1] == 'D') {
			o += (size_t)snprintf(full + o, sizeof full - o, "%s", tmpdir_path());
			p++;
		} else {
			full[o++] = *p;
		}
	}
	full[o] = 0;
	rc = scan_check(f, &s, &d);
	cr_expect_eq(rc, status, "status %d, want %d (%s)", rc, status, d.msg);
	cr_expect_str_eq(d.msg, full);
	if (!rc)
		oq_samples_free(&s);
}

/* ---------------------------------------------------------------- layouts */

Test(run, flat_layout_lexical_order, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	oq_rt in[1];

	build(&f, 0, "x");
	npy_f32("001.npy", "(2, 3)", 6);
	npy_f32("000.npy", "(1, 3)", 3);
	npy_f32("a.npy", "(1, 3)", 3);
	npy_f32("a-.npy", "(1, 3)",
	        3); /* file names sort "a-.npy" < "a.npy", sample names "a" < "a-" */
	pb_f32("10.pb", 2, (const int64_t[]){2, 3}, f6, 6);
	cr_assert_eq(scan_check(&f, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s.n, 5);
	cr_expect_str_eq(s.v[0].name, "000");
	cr_expect_str_eq(s.v[1].name, "001");
	cr_expect_str_eq(s.v[2].name, "10");
	cr_expect_str_eq(s.v[3].name, "a");
	cr_expect_str_eq(s.v[4].name, "a-");
	cr_expect_str_eq(s.v[1].in[0].path, at("001.npy"));
	cr_expect_eq(s.v[1].in[0].kind, OQ_SRC_NPY);
	cr_expect_eq(s.v[2].in[0].kind, OQ_SRC_PB);

	memset(in, 0, sizeof in);
	cr_assert_eq(oq_sample_load(&s, 1, f.e, in, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(in[0].dtype, OQ_DT_FLOAT);
	cr_expect(in[0].rank == 2 && in[0].dims[0] == 2 && in[0].dims[1] == 3);
	cr_expect_eq(memcmp(in[0].data, f6, 24), 0);
	oq_rt_release(&in[0]);
	cr_assert_eq(oq_sample_load(&s, 2, f.e, in, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(memcmp(in[0].data, f6, 24), 0);
	oq_rt_release(&in[0]);
	oq_samples_free(&s);
	unbuild(&f);
}

/* 10 samples, at most 4 run: floor(j 10 / 4) = 0, 2, 5, 7 (hand-computed), in order; the others
 * freed (ASan would see a leak or a double free); at most 10 or no cap: all of them, untouched. */
Test(run, thin_keeps_evenly_spread_samples, .init = setup, .fini = teardown)
{
	static const char *const keep[] = {"000", "002", "005", "007"};
	fixture f;
	oq_samples s;
	oq_diag d;
	char name[16];

	build(&f, 0, "x");
	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof name, "%03d.npy", i);
		npy_f32(name, "(1, 3)", 3);
	}
	cr_assert_eq(scan_check(&f, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s.n, 10);
	cr_expect_eq(oq_samples_thin(&s, 10, 0), 10);
	cr_expect_eq(oq_samples_thin(&s, 10, 10), 10);
	cr_expect_eq(oq_samples_thin(&s, 8, 32), 8, "n below the cap: n back");
	cr_assert_eq(s.n, 10);
	cr_assert_eq(oq_samples_thin(&s, 10, 4), 4);
	cr_assert_eq(s.n, 4);
	for (size_t j = 0; j < 4; j++) {
		cr_expect_str_eq(s.v[j].name, keep[j]);
		snprintf(name, sizeof name, "%s.npy", keep[j]);
		cr_expect_str_eq(s.v[j].in[0].path, at(name));
		cr_expect_eq(oq_samples_pick(j, 10, 4), (size_t)(keep[j][2] - '0'));
	}
	oq_samples_free(&s);
	/* a limit first: 7 of 10 (the first 7), at most 3 run: 0, 2, 4 */
	cr_assert_eq(scan_check(&f, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_samples_thin(&s, 7, 3), 3);
	cr_expect_str_eq(s.v[0].name, "000");
	cr_expect_str_eq(s.v[1].name, "002");
	cr_expect_str_eq(s.v[2].name, "004");
	oq_samples_free(&s);
	unbuild(&f);
}

Test(run, folder_layout_names_and_positions, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	oq_rt in[2];

	build(&f, 1, "x");
	mkdirs("s0");
	mkdirs("s1");
	npy_f32("s0/x.npy", "(1, 3)", 3);
	npy_f32("s0/input_1.npy", "(1, 2)", 2);
	npy_f32("s1/input_0.npy", "(2, 3)", 6);
	npy_f32("s1/z.npy", "(2, 2)", 4);
	cr_assert_eq(scan_check(&f, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s.n, 2);
	cr_expect_str_eq(s.v[0].name, "s0");
	cr_expect_str_eq(s.v[0].in[0].path, at("s0/x.npy"));
	cr_expect_str_eq(s.v[0].in[1].path, at("s0/input_1.npy"));
	cr_expect_str_eq(s.v[1].in[0].path, at("s1/input_0.npy"));
	cr_expect_str_eq(s.v[1].in[1].path, at("s1/z.npy"));
	memset(in, 0, sizeof in);
	cr_assert_eq(oq_sample_load(&s, 1, f.e, in, &d), OQ_OK, "%s", d.msg);
	cr_expect(in[0].dims[0] == 2 && in[0].dims[1] == 3);
	cr_expect(in[1].dims[0] == 2 && in[1].dims[1] == 2);
	oq_rt_release(&in[0]);
	oq_rt_release(&in[1]);
	oq_samples_free(&s);
	unbuild(&f);
}

Test(run, onnx_test_layout, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	oq_rt in[2];

	build(&f, 1, "x");
	put_file("model.onnx", "not read", 8); /* an ONNX test-case folder holds the model too */
	mkdirs("test_data_set_0");
	mkdirs("test_data_set_1");
	pb_f32("test_data_set_0/input_0.pb", 2, (const int64_t[]){1, 3}, f6, 3);
	pb_f32("test_data_set_0/input_1.pb", 2, (const int64_t[]){1, 2}, f6 + 3, 2);
	pb_f32("test_data_set_0/output_0.pb", 2, (const int64_t[]){1, 3}, f6, 3);
	pb_f32("test_data_set_1/input_0.pb", 2, (const int64_t[]){2, 3}, f6, 6);
	pb_f32("test_data_set_1/input_1.pb", 2, (const int64_t[]){2, 2}, f6, 4);
	cr_assert_eq(scan_check(&f, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(s.n, 2);
	cr_expect_str_eq(s.v[0].name, "test_data_set_0");
	cr_expect_str_eq(s.v[1].name, "test_data_set_1");
	cr_expect_eq(s.v[0].in[1].kind, OQ_SRC_PB);
	memset(in, 0, sizeof in);
	cr_assert_eq(oq_sample_load(&s, 0, f.e, in, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(((float *)in[1].data)[0], 4.0f);
	cr_expect_eq(((float *)in[1].data)[1], -5.0f);
	oq_rt_release(&in[0]);
	oq_rt_release(&in[1]);
	oq_samples_free(&s);
	unbuild(&f);
}

Test(run, slash_in_input_name, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	char buf[16];

	oq_run_file_name("a/b/c", ".npy", buf, sizeof buf);
	cr_expect_str_eq(buf, "a_b_c.npy");
	oq_run_file_name("long_name_here", ".npy", buf, sizeof buf);
	cr_expect_str_eq(buf, "long_name_here.");
	build(&f, 0, "in/x");
	mkdirs("0");
	npy_f32("0/in_x.npy", "(1, 3)", 3);
	cr_assert_eq(scan_check(&f, &s, &d), OQ_OK, "%s", d.msg);
	cr_expect_str_eq(s.v[0].in[0].path, at("0/in_x.npy"));
	oq_samples_free(&s);
	unbuild(&f);
}

/* ---------------------------------------------------------------- validation */

Test(run, empty_folder, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 0, "x");
	put_file(".hidden", "x", 1);
	expect_error(&f, OQ_EINVAL,
	             "run: %D: no samples (expected NNN.npy files, or NNN/ folders holding one "
	             "file per input)");
	unbuild(&f);
}

Test(run, missing_folder)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	build(&f, 0, "x");
	oq_diag_init(&d);
	cr_expect_eq(oq_samples_scan("/nonexistent/oq", f.e, &s, &d), OQ_EIO);
	cr_expect_str_eq(d.msg,
	                 "run: cannot open folder '/nonexistent/oq': No such file or directory");
	unbuild(&f);
}

Test(run, missing_input, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	mkdirs("s0");
	npy_f32("s0/x.npy", "(1, 3)", 3);
	expect_error(
	    &f, OQ_EINVAL,
	    "run: %D/s0: no file for input 'z' (float[N, 2]); expected z.npy or input_1.npy");
	unbuild(&f);
}

Test(run, extra_file, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	mkdirs("s0");
	npy_f32("s0/x.npy", "(1, 3)", 3);
	npy_f32("s0/z.npy", "(1, 2)", 2);
	npy_f32("s0/w.npy", "(1, 2)", 2);
	expect_error(&f, OQ_EINVAL, "run: %D/s0/w.npy: matches no model input (inputs: x, z)");
	unbuild(&f);
}

Test(run, extra_position, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	mkdirs("s0");
	npy_f32("s0/x.npy", "(1, 3)", 3);
	npy_f32("s0/z.npy", "(1, 2)", 2);
	npy_f32("s0/input_2.npy", "(1, 2)", 2);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/s0/input_2.npy: matches no model input (inputs: x, z)");
	unbuild(&f);
}

Test(run, wrong_extension, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	mkdirs("s0");
	put_file("s0/x.txt", "1", 1);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/s0/x.txt: unexpected file (a sample folder holds <input name>.npy or "
	             "input_K.npy files, "
	             ".pb also accepted; inputs: x, z)");
	unbuild(&f);
}

Test(run, duplicate_source, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	mkdirs("s0");
	npy_f32("s0/x.npy", "(1, 3)", 3);
	npy_f32("s0/input_0.npy", "(1, 3)", 3);
	npy_f32("s0/z.npy", "(1, 2)", 2);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/s0/x.npy: input 'x' already comes from %D/s0/input_0.npy");
	unbuild(&f);
}

Test(run, wrong_dtype, .init = setup, .fini = teardown)
{
	fixture f;
	const double d3[3] = {1, 2, 3};
	build(&f, 1, "x");
	mkdirs("s0");
	npy("s0/x.npy", "<f8", "(1, 3)", d3, sizeof d3);
	npy_f32("s0/z.npy", "(1, 2)", 2);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/s0/x.npy: input 'x' expects float[N, 3], the file holds double[1, 3] "
	             "(element type differs)");
	unbuild(&f);
}

Test(run, wrong_rank, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 0, "x");
	npy_f32("000.npy", "(3,)", 3);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/000.npy: input 'x' expects float[N, 3], the file holds float[3] "
	             "(rank 1, not 2)");
	unbuild(&f);
}

Test(run, wrong_fixed_dim, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 0, "x");
	npy_f32("000.npy", "(1, 3)", 3);
	npy_f32("001.npy", "(1, 4)", 4);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/001.npy: input 'x' expects float[N, 3], the file holds float[1, 4] "
	             "(dim 1 is 4, not 3)");
	unbuild(&f);
}

Test(run, symbolic_dim_disagrees, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	mkdirs("s0");
	mkdirs("s1");
	/* N may change from sample to sample, not between the inputs of one sample */
	npy_f32("s0/x.npy", "(1, 3)", 3);
	npy_f32("s0/z.npy", "(1, 2)", 2);
	npy_f32("s1/x.npy", "(2, 3)", 6);
	npy_f32("s1/z.npy", "(1, 2)", 2);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/s1/z.npy: input 'z' expects float[N, 2], the file holds float[1, 2] "
	             "(dim 0 'N' is 1 but "
	             "%D/s1/x.npy made it 2)");
	unbuild(&f);
}

Test(run, flat_files_for_two_inputs, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 1, "x");
	npy_f32("000.npy", "(1, 3)", 3);
	expect_error(&f, OQ_EINVAL,
	             "run: %D/000.npy: one file per sample fits single-input models; this one has "
	             "2 inputs (x, z): "
	             "use NNN/<input name>.npy folders");
	unbuild(&f);
}

Test(run, mixed_layouts, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 0, "x");
	npy_f32("000.npy", "(1, 3)", 3);
	mkdirs("s1");
	npy_f32("s1/x.npy", "(1, 3)", 3);
	expect_error(
	    &f, OQ_EINVAL,
	    "run: %D: mixes sample files (000.npy) and sample folders (s1/); use one layout");
	unbuild(&f);
}

Test(run, unexpected_top_level_file, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 0, "x");
	npy_f32("000.npy", "(1, 3)", 3);
	put_file("notes.txt", "hi", 2);
	expect_error(
	    &f, OQ_EINVAL,
	    "run: %D/notes.txt: unexpected file (samples are NNN.npy files or NNN/ folders)");
	unbuild(&f);
}

Test(run, same_sample_twice, .init = setup, .fini = teardown)
{
	fixture f;
	build(&f, 0, "x");
	npy_f32("000.npy", "(1, 3)", 3);
	pb_f32("000.pb", 2, (const int64_t[]){1, 3}, f6, 3);
	expect_error(&f, OQ_EINVAL, "run: %D: two files for sample '000' (%D/000.pb)");
	unbuild(&f);
}

Test(run, fortran_file_named, .init = setup, .fini = teardown)
{
	fixture f;
	unsigned char buf[256];
	size_t len;
	build(&f, 0, "x");
	len = (size_t)snprintf((char *)buf + 10, sizeof buf - 10,
	                       "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }") +
	      10;
	while ((len + 1) % 64)
		buf[len++] = ' ';
	buf[len++] = '\n';
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (unsigned char)(len - 10);
	buf[9] = 0;
	memcpy(buf + len, f6, 24);
	put_file("000.npy", buf, len + 24);
	expect_error(
	    &f, OQ_EUNSUP,
	    "npy: %D/000.npy: Fortran-order arrays are not supported; save a C-order array "
	    "(numpy.ascontiguousarray)");
	unbuild(&f);
}

/* ---------------------------------------------------------------- explicit inputs */

static int explicit(fixture *f, const char *const *specs, size_t n, oq_samples *s, oq_diag *d)
{
	oq_diag_init(d);
	return oq_samples_explicit(specs, n, f->e, s, d);
}

Test(run, explicit_inputs, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	char a[1200], b[600];

	build(&f, 1, "x");
	npy_f32("x.npy", "(1, 3)", 3);
	snprintf(a, sizeof a, "x=%s", at("x.npy"));
	{
		const char *specs[] = {"z=random:5", a};
		cr_assert_eq(explicit(&f, specs, 2, &s, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(s.n, 1);
		cr_expect_str_eq(s.v[0].name, "");
		cr_expect_str_eq(s.v[0].in[0].path, at("x.npy"));
		cr_expect_eq(s.v[0].in[1].kind, OQ_SRC_RANDOM);
		cr_expect_eq(s.v[0].in[1].seed, 5);
		cr_expect_eq(oq_samples_check(&s, f.e, &d), OQ_OK, "%s", d.msg);
		oq_samples_free(&s);
	}
	{
		const char *specs[] = {a};
		cr_expect_eq(explicit(&f, specs, 1, &s, &d), OQ_EUSAGE);
		cr_expect_str_eq(d.msg, "run: no --input for model input 'z' (float[N, 2])");
	}
	{
		const char *specs[] = {a, "q=f.npy"};
		cr_expect_eq(explicit(&f, specs, 2, &s, &d), OQ_EUSAGE);
		cr_expect_str_eq(
		    d.msg,
		    "run: --input 'q=f.npy': the model has no input named 'q' (inputs: x, z)");
	}
	{
		const char *specs[] = {a, a};
		cr_expect_eq(explicit(&f, specs, 2, &s, &d), OQ_EUSAGE);
		cr_expect_str_eq(d.msg, "run: --input given twice for 'x'");
	}
	{
		const char *specs[] = {"x.npy"};
		cr_expect_eq(explicit(&f, specs, 1, &s, &d), OQ_EUSAGE);
		cr_expect_str_eq(d.msg, "run: --input 'x.npy': expected NAME=FILE");
	}
	{
		const char *specs[] = {"z=random:1x"};
		cr_expect_eq(explicit(&f, specs, 1, &s, &d), OQ_EUSAGE);
		cr_expect_str_eq(d.msg,
		                 "run: --input 'z=random:1x': SEED must be a non-negative integer");
	}
	{
		/* a wrong file is reported by the check, naming it */
		const double d3[3] = {1, 2, 3};
		npy("d.npy", "<f8", "(1, 3)", d3, sizeof d3);
		snprintf(b, sizeof b, "x=%s", at("d.npy"));
		const char *specs[] = {b, "z=random:1"};
		cr_assert_eq(explicit(&f, specs, 2, &s, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(oq_samples_check(&s, f.e, &d), OQ_EINVAL);
		snprintf(a, sizeof a,
		         "run: %s: input 'x' expects float[N, 3], the file holds double[1, 3] "
		         "(element type differs)",
		         at("d.npy"));
		cr_expect_str_eq(d.msg, a);
		oq_samples_free(&s);
	}
	unbuild(&f);
}

Test(run, equals_sign_in_input_name, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	const char *specs[] = {"a=b=c=random:3"};

	/* the split that names a model input wins */
	build(&f, 0, "a=b");
	cr_assert_eq(explicit(&f, specs, 1, &s, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(s.v[0].in[0].kind, OQ_SRC_NPY);
	cr_expect_str_eq(s.v[0].in[0].path, "c=random:3");
	oq_samples_free(&s);
	unbuild(&f);

	build(&f, 0, "a=b=c");
	cr_assert_eq(explicit(&f, specs, 1, &s, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(s.v[0].in[0].kind, OQ_SRC_RANDOM);
	cr_expect_eq(s.v[0].in[0].seed, 3);
	oq_samples_free(&s);
	unbuild(&f);
}

Test(run, random_is_deterministic, .init = setup, .fini = teardown)
{
	fixture f;
	oq_samples s;
	oq_diag d;
	oq_rt a[2], b[2];
	const char *s0[] = {"x=random:0", "z=random:0"};
	const char *s1[] = {"x=random:1", "z=random:0"};

	build(&f, 1, "x");
	memset(a, 0, sizeof a);
	memset(b, 0, sizeof b);
	cr_assert_eq(explicit(&f, s0, 2, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_sample_load(&s, 0, f.e, a, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_sample_load(&s, 0, f.e, b, &d), OQ_OK, "%s", d.msg);
	oq_samples_free(&s);
	/* symbolic N becomes 1 */
	cr_expect(a[0].rank == 2 && a[0].dims[0] == 1 && a[0].dims[1] == 3);
	cr_expect(a[1].rank == 2 && a[1].dims[0] == 1 && a[1].dims[1] == 2);
	cr_expect_eq(memcmp(a[0].data, b[0].data, 12), 0);
	/* splitmix64(seed 0) first output 0xE220A8397B1DCDAF: top 24 bits / 2^24 */
	cr_expect_eq(((float *)a[0].data)[0], 14819496.0f / 16777216.0f);
	for (int i = 0; i < 3; i++)
		cr_expect(((float *)a[0].data)[i] >= 0 && ((float *)a[0].data)[i] < 1);
	/* input 1 uses another stream than input 0 */
	cr_expect_neq(memcmp(a[0].data, a[1].data, 8), 0);
	for (int i = 0; i < 2; i++) {
		oq_rt_release(&a[i]);
		oq_rt_release(&b[i]);
	}
	/* another seed, other numbers */
	cr_assert_eq(explicit(&f, s1, 2, &s, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_sample_load(&s, 0, f.e, b, &d), OQ_OK, "%s", d.msg);
	cr_expect_neq(((float *)b[0].data)[0], 14819496.0f / 16777216.0f);
	oq_samples_free(&s);
	for (int i = 0; i < 2; i++)
		oq_rt_release(&b[i]);
	unbuild(&f);
}

/* ---------------------------------------------------------------- oq_run */

/* Runs with the given options into a memory stream; returns the status, text in *out (free it). */
static int run_to(fixture *f, oq_run_opts *o, char **out, oq_diag *d)
{
	size_t n;
	FILE *m = open_memstream(out, &n);
	int rc;
	cr_assert_not_null(m);
	oq_diag_init(d);
	rc = oq_run(f->m, o, m, d);
	fclose(m);
	return rc;
}

Test(run, run_writes_outputs_and_reports, .init = setup, .fini = teardown)
{
	fixture f;
	oq_run_opts o = {0};
	oq_diag d;
	oq_npy a;
	char *text, out[600], want[2400];
	const float relu6[6] = {0, 2, 0, 4, 0, 6};
	const float relu4[4] = {0, 2, 0, 4};

	build(&f, 1, "x");
	mkdirs("in/000");
	npy_f32("in/000/x.npy", "(2, 3)", 6);
	npy_f32("in/000/z.npy", "(2, 2)", 4);
	snprintf(out, sizeof out, "%s/out/deep", tmpdir_path());
	o.model_path = "m.onnx";
	o.data_dir = at("in");
	o.threads = 2;

	/* text summary */
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_str_eq(text, "sample 000\n"
	                       "  y  float[2, 3]  min 0  max 6  mean 2\n"
	                       "  out/y2  float[2, 2]  min 0  max 4  mean 1.5\n");
	free(text);

	/* JSON + files */
	o.json = 1;
	o.output_dir = out;
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	snprintf(want, sizeof want,
	         "{\"model\": \"m.onnx\", \"samples\": [{\"name\": \"000\", \"outputs\": ["
	         "{\"name\": \"y\", \"dtype\": \"float\", \"shape\": [2, 3], \"min\": 0, \"max\": "
	         "6, \"mean\": 2, "
	         "\"nan\": 0, \"file\": \"%s/000/y.npy\"}, "
	         "{\"name\": \"out/y2\", \"dtype\": \"float\", \"shape\": [2, 2], \"min\": 0, "
	         "\"max\": 4, \"mean\": 1.5, "
	         "\"nan\": 0, \"file\": \"%s/000/out_y2.npy\"}]}]}\n",
	         out, out);
	cr_expect_str_eq(text, want);
	free(text);

	oq_diag_init(&d);
	cr_assert_eq(oq_npy_read(at("out/deep/000/y.npy"), 0, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect(a.dtype == OQ_DT_FLOAT && a.rank == 2 && a.dims[0] == 2 && a.dims[1] == 3);
	cr_expect_eq(memcmp(a.data, relu6, 24), 0);
	oq_npy_free(&a);
	cr_assert_eq(oq_npy_read(at("out/deep/000/out_y2.npy"), 0, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(memcmp(a.data, relu4, 16), 0);
	oq_npy_free(&a);
	unbuild(&f);
}

Test(run, run_explicit_writes_flat, .init = setup, .fini = teardown)
{
	fixture f;
	oq_run_opts o = {0};
	oq_diag d;
	char *text, spec[600];
	const char *specs[1];
	struct stat st;

	build(&f, 0, "x");
	npy_f32("x.npy", "(1, 3)", 3);
	snprintf(spec, sizeof spec, "x=%s", at("x.npy"));
	specs[0] = spec;
	o.inputs = specs;
	o.n_inputs = 1;
	o.output_dir = tmpdir_path();
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect_str_eq(text, ""); /* files only */
	free(text);
	cr_expect_eq(stat(at("y.npy"), &st), 0, "no %s", tmpdir_last());
	unbuild(&f);
}

Test(run, run_validates_everything_first, .init = setup, .fini = teardown)
{
	fixture f;
	oq_run_opts o = {0};
	oq_diag d;
	char *text;
	struct stat st;

	char in[600], out[600];

	build(&f, 0, "x");
	mkdirs("in");
	npy_f32("in/000.npy", "(1, 3)", 3);
	npy_f32("in/001.npy", "(1, 2)", 2);
	snprintf(in, sizeof in, "%s/in", tmpdir_path());
	snprintf(out, sizeof out, "%s/out", tmpdir_path());
	o.data_dir = in;
	o.output_dir = out;
	cr_expect_eq(run_to(&f, &o, &text, &d), OQ_EINVAL);
	free(text);
	cr_expect(strstr(d.msg, "001.npy: input 'x' expects float[N, 3]") != NULL, "%s", d.msg);
	cr_expect_neq(stat(at("out"), &st), 0, "sample 000 ran although 001 is invalid");

	o.inputs = (const char *const[]){"x=random:1"};
	o.n_inputs = 1;
	cr_expect_eq(run_to(&f, &o, &text, &d), OQ_EUSAGE);
	free(text);
	cr_expect_str_eq(d.msg, "run: give either --data DIR or --input NAME=FILE");
	unbuild(&f);
}

/*
 * --profile: two samples through two Relu nodes. The op type table has one
 * row, Relu with 4 calls and the whole share; the node table r1 and r2
 * with 2 calls each; the JSON report carries the same counts under
 * "profile". The outputs written are the same bytes as without profiling.
 */
/* The bytes of file path (owned, NUL-terminated) and their count; NULL when unreadable. */
static char *slurp(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	char *b = NULL;
	long len;

	if (!fp)
		return NULL;
	if (fseek(fp, 0, SEEK_END) == 0 && (len = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0 &&
	    (b = malloc((size_t)len + 1)) && fread(b, 1, (size_t)len, fp) == (size_t)len) {
		b[len] = 0;
		*n = (size_t)len;
	} else {
		free(b);
		b = NULL;
	}
	fclose(fp);
	return b;
}

Test(run, run_profile_counts_calls, .init = setup, .fini = teardown)
{
	fixture f;
	oq_run_opts o = {0};
	oq_diag d;
	char *text, *plain, *timed, out[600];
	size_t np = 0, nt = 0;

	build(&f, 1, "x");
	mkdirs("in/000");
	mkdirs("in/001");
	npy_f32("in/000/x.npy", "(2, 3)", 6);
	npy_f32("in/000/z.npy", "(2, 2)", 4);
	npy_f32("in/001/x.npy", "(2, 3)", 6);
	npy_f32("in/001/z.npy", "(2, 2)", 4);
	o.data_dir = at("in");
	o.threads = 2;
	o.profile = 1;
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect(strstr(text, "\nprofile: 2 runs, 2 threads: "), "%s", text);
	cr_expect(strstr(text, "100.0%") && strstr(text, "  Relu\n"), "%s", text);
	cr_expect(strstr(text, "\n        4 "), "Relu's 4 calls: %s", text);
	cr_expect(strstr(text, "  r1 (Relu)\n") && strstr(text, "  r2 (Relu)\n"), "%s", text);
	cr_expect(strstr(text, "\n        2 "), "a node's 2 calls: %s", text);
	free(text);

	o.json = 1;
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	cr_expect(strstr(text, "\"nan\": 0}]}], \"profile\": {\"runs\": 2, \"threads\": 2, \"run_ms\": "), "%s", text);
	cr_expect(strstr(text, "\"op_types\": [{\"op_type\": \"Relu\", \"calls\": 4, "), "%s", text);
	cr_expect(strstr(text, "{\"name\": \"r1\", \"ops\": \"Relu\", \"calls\": 2, "), "%s", text);
	cr_expect(strlen(text) > 2 && !strcmp(text + strlen(text) - 2, "}\n"), "%s", text);
	free(text);

	/* same output bytes with and without */
	o.json = 0;
	snprintf(out, sizeof out, "%s/timed", tmpdir_path());
	o.output_dir = out;
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	free(text);
	o.profile = 0;
	snprintf(out, sizeof out, "%s/plain", tmpdir_path());
	cr_assert_eq(run_to(&f, &o, &text, &d), OQ_OK, "%s", d.msg);
	free(text);
	plain = slurp(at("plain/001/y.npy"), &np);
	timed = slurp(at("timed/001/y.npy"), &nt);
	cr_assert(plain && timed && np == nt && np > 0);
	cr_expect_eq(memcmp(plain, timed, np), 0);
	free(plain);
	free(timed);
	unbuild(&f);
}
