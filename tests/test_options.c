/*
 * test_options.c - the pipeline's options (src/pipeline/options.c): the
 * option table sets each option's own field and nothing else, values are
 * checked by their row, combinations by oq_pipeline_opts_check (the rules
 * README's option list states), and defaults resolve as documented in
 * `onnxq quantize --help` (mse, empirical bias correction with samples).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/pipeline/pipeline.h"

/* A valid value for every option that takes one (NULL: a flag, or the optional value left out). */
static const struct {
	const char *name, *value;
} samples[] = {
	{"output", "out.onnx"}, {"calib", "calib"}, {"calib-limit", "4"}, {"calib-batch", "2"}, {"calib-folds", "3"},
	{"stats", "s.bin"}, {"shard", "1/3"}, {"threads", "2"}, {"method", "entropy"},
	{"ema-constant", "0.5"}, {"percentile", "99.9"}, {"bias-correction", "analytic"},
	{"bias-correction-rounds", "3"}, {"bias-correction-weights", "on"}, {"profile", "trt"}, {"prefer", "speed"},
	{"weight-type", "int4"}, {"act-type", "int16"},
	{"granularity", "block"}, {"block-size", "16"}, {"sym-grid", "full"}, {"act-symmetric", "unsigned"},
	{"weight-method", "mse"}, {"high-precision", "float16"}, {"weight-rounding", "adaround"}, {"op-types", "Conv,Gemm"},
	{"include", "conv1"}, {"exclude", "fc"},
	{"overrides", "ov.json"}, {"export-encodings", "e.json"}, {"import-encodings", "i.json"},
	{"opset", "17"}, {"passes", "cleanup,fuse"}, {"ranges", "s.bin"}, {"dump-after", "fuse"}, {"external-threshold", "4096"},
	{"max-loop-iterations", "1000"}, {"json", "a.json"}, {"html", "a.html"},
	{"target-sqnr", "30"}, {"report", "r.json"},
};

static const char *sample(const char *name)
{
	for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
		if (strcmp(samples[i].name, name) == 0)
			return samples[i].value;
	return NULL;
}

/* Sets one option in fresh args of `job`; returns the status, d filled. */
static int set1(oq_pipeline_args *a, int job, const char *name, const char *value, oq_diag *d)
{
	oq_pipeline_args_init(a, job);
	oq_diag_init(d);
	return oq_pipeline_args_set(a, name, value, d);
}

/*
 * Every row with a name changes the options (one field: never `job`, which
 * a generic setter pointed at offset 0 would overwrite); --ranges is gone
 * and refuses any value, telling why.
 */
Test(options, every_row_sets_a_field_not_the_job)
{
	for (size_t i = 0; i < oq_pipeline_n_options; i++) {
		const oq_option *o = &oq_pipeline_options[i];
		int job = o->name && strcmp(o->name, "shard") == 0 ? OQ_JOB_CALIBRATE
			  : o->name && (!strcmp(o->name, "json") || !strcmp(o->name, "html")) ? OQ_JOB_ANALYZE
											      : OQ_JOB_QUANTIZE;
		oq_pipeline_args a, fresh;
		oq_diag d;
		int rc;

		if (!o->name)
			continue;
		rc = set1(&a, job, o->name, o->arg == OQ_ARG_REQUIRED ? sample(o->name) : NULL, &d);
		if (strcmp(o->name, "ranges") == 0) {
			cr_expect_eq(rc, OQ_EUSAGE);
			cr_expect(strstr(d.msg, "no longer needed"), "%s", d.msg);
			oq_pipeline_args_free(&a);
			continue;
		}
		cr_expect_eq(rc, OQ_OK, "--%s: %s", o->name, d.msg);
		cr_expect_eq(a.p.job, job, "--%s changed the job", o->name);
		oq_pipeline_args_init(&fresh, job);
		cr_expect(memcmp(&a.p, &fresh.p, sizeof a.p) != 0, "--%s changed nothing", o->name);
		oq_pipeline_args_free(&a);
		oq_pipeline_args_free(&fresh);
	}
}

/* Values a row refuses: exit code 1 (OQ_EUSAGE) and the command line's words. */
Test(options, bad_values_are_usage_errors)
{
	static const struct {
		const char *name, *value, *msg;
	} bad[] = {
		{"weight-type", "int7", "--weight-type is int8"},
		{"weight-type", "uint16", "--weight-type is int8"},
		{"act-type", "int4", "--act-type is uint8"},
		{"block-size", "1", "--block-size needs a number >= 2"},
		{"threads", "0", "--threads needs a number from 1 to 1024"},
		{"shard", "3/3", "--shard needs I/N"},
		{"percentile", "100.5", "--percentile needs a number in (0, 100]"},
		{"ema-constant", "0", "--ema-constant needs a number in (0, 1]"},
		{"act-symmetric", "signed", "--act-symmetric takes no value or =unsigned"},
		{"bias-correction", "both", "--bias-correction takes =empirical"},
		{"opset", "9", "--opset needs a number >= 10"},
		{"verify", "yes", "--verify takes no value"},
		{"calib", NULL, "--calib needs a value"},
		{"such-option", NULL, "unknown option --such-option"},
		{"no-foo", NULL, "unknown --no-PASS option"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int job = strcmp(bad[i].name, "shard") == 0 ? OQ_JOB_CALIBRATE : OQ_JOB_QUANTIZE;
		oq_pipeline_args a;
		oq_diag d;
		cr_expect_eq(set1(&a, job, bad[i].name, bad[i].value, &d), OQ_EUSAGE, "--%s %s", bad[i].name,
			     bad[i].value ? bad[i].value : "");
		cr_expect(strstr(d.msg, bad[i].msg), "--%s: '%s'", bad[i].name, d.msg);
		oq_pipeline_args_free(&a);
	}
}

/* Which job takes which option: --stats is quantize's, --shard calibrate's, convert takes few. */
Test(options, options_of_each_job)
{
	oq_pipeline_args a;
	oq_diag d;

	cr_expect_eq(set1(&a, OQ_JOB_CALIBRATE, "stats", "s.bin", &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "--stats is a quantize option"), "%s", d.msg);
	oq_pipeline_args_free(&a);
	cr_expect_eq(set1(&a, OQ_JOB_QUANTIZE, "shard", "0/2", &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "--shard is a calibrate option"), "%s", d.msg);
	oq_pipeline_args_free(&a);
	cr_expect_eq(set1(&a, OQ_JOB_CONVERT, "calib", "dir", &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "only valid for quantize"), "%s", d.msg);
	oq_pipeline_args_free(&a);
	cr_expect_eq(set1(&a, OQ_JOB_CONVERT, "passes", "cleanup", &d), OQ_OK, "%s", d.msg);
	cr_expect_str_eq(a.p.run.list, "cleanup");
	oq_pipeline_args_free(&a);
	/* convert runs no rewrite unless --passes names it */
	oq_pipeline_args_init(&a, OQ_JOB_CONVERT);
	cr_expect(a.p.run.list && !a.p.run.list[0]);
	oq_pipeline_args_free(&a);
}

/* Sets an option that must be accepted. */
static void set_ok(oq_pipeline_args *a, const char *name, const char *value)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_pipeline_args_set(a, name, value, &d), OQ_OK, "--%s: %s", name, d.msg);
}

/* Lists: --include/--exclude accumulate, --op-types splits and replaces, --no-PASS disables. */
Test(options, lists)
{
	oq_pipeline_args a;

	oq_pipeline_args_init(&a, OQ_JOB_QUANTIZE);
	set_ok(&a, "include", "conv1");
	set_ok(&a, "include", "Gemm");
	set_ok(&a, "op-types", "MatMul");
	set_ok(&a, "op-types", "Conv,,Gemm,");
	set_ok(&a, "no-fold-bn", NULL);
	cr_assert_eq(a.p.q.n_include, 2);
	cr_expect_str_eq(a.p.q.include[0], "conv1");
	cr_expect_str_eq(a.p.q.include[1], "Gemm");
	cr_assert_eq(a.p.q.n_op_types, 2);
	cr_expect_str_eq(a.p.q.op_types[0], "Conv");
	cr_expect_str_eq(a.p.q.op_types[1], "Gemm");
	cr_assert_eq(a.p.run.n_disabled, 1);
	cr_expect_str_eq(a.p.run.disabled[0], "fold-bn");
	cr_expect(!oq_pass_selected(&a.p.run, "fold-bn"));
	cr_expect(oq_pass_selected(&a.p.run, "fuse"));
	/* "," names no op type and still asks for the list: --op-types without --weight-only */
	set_ok(&a, "op-types", ",");
	cr_expect_not_null(a.p.q.op_types);
	cr_expect_eq(a.p.q.n_op_types, 0);
	oq_pipeline_args_free(&a);
}

/* --no-bias-correction wins wherever it stands. */
Test(options, no_bias_correction_wins)
{
	oq_pipeline_args a;

	oq_pipeline_args_init(&a, OQ_JOB_QUANTIZE);
	set_ok(&a, "bias-correction", "analytic");
	cr_expect_eq(a.p.bias_correction, OQ_BC_ANALYTIC);
	set_ok(&a, "no-bias-correction", NULL);
	set_ok(&a, "bias-correction", NULL);
	cr_expect_eq(a.p.bias_correction, OQ_BC_OFF);
	oq_pipeline_args_free(&a);
}

/* Options of `onnxq quantize m.onnx -o q.onnx` plus the given name=value pairs (NULL-ended). */
static int check(int job, const char *const *kv, oq_diag *d)
{
	oq_pipeline_args a;
	int rc = OQ_OK;

	oq_pipeline_args_init(&a, job);
	oq_diag_init(d);
	a.p.in_path = "m.onnx";
	a.p.out_path = "q.onnx";
	for (size_t i = 0; kv[i] && !rc; i += 2)
		rc = oq_pipeline_args_set(&a, kv[i], kv[i + 1], d);
	cr_assert_eq(rc, OQ_OK, "%s", d->msg);
	rc = oq_pipeline_opts_check(&a.p, d);
	oq_pipeline_args_free(&a);
	return rc;
}

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The rules, each by an option set that breaks only it, and a contrast that does not. */
Test(options, rules)
{
	const struct {
		int job;
		const char *const *kv;
		const char *msg; /* NULL: valid */
	} cases[] = {
		{OQ_JOB_QUANTIZE, KV("calib", "c"), NULL},
		{OQ_JOB_QUANTIZE, KV("weight-only", NULL), NULL},
		{OQ_JOB_QUANTIZE, KV("stats", "s.bin"), NULL},
		{OQ_JOB_QUANTIZE, KV("verbose", NULL), "quantize: activation quantization needs calibration data"},
		/* no quantize pass, no calibration needed */
		{OQ_JOB_QUANTIZE, KV("no-quantize", NULL), NULL},
		{OQ_JOB_QUANTIZE, KV("passes", "cleanup,fuse"), NULL},
		{OQ_JOB_CONVERT, KV("passes", "cleanup"), NULL},
		{OQ_JOB_CALIBRATE, KV("verbose", NULL), "calibrate: missing --calib DIR"},
		{OQ_JOB_CALIBRATE, KV("calib", "c", "weight-only", NULL), "calibrate: --weight-only needs no calibration"},
		{OQ_JOB_CALIBRATE, KV("calib", "c", "bias-correction", NULL), "--bias-correction needs the samples"},
		{OQ_JOB_CALIBRATE, KV("calib", "c", "no-bias-correction", NULL), NULL},
		{OQ_JOB_QUANTIZE, KV("stats", "s", "calib", "c"), "--stats and --calib exclude each other"},
		{OQ_JOB_QUANTIZE, KV("stats", "s", "weight-only", NULL), "--weight-only needs no --stats"},
		{OQ_JOB_QUANTIZE, KV("stats", "s", "bias-correction", NULL), "--bias-correction needs the samples"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "block-size", "16"), "--block-size needs --granularity block"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "block-size", "16", "granularity", "block"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-only", NULL), "--weight-only needs no --calib"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "ema-constant", "0.1"), "--ema-constant applies to --method ema"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "ema-constant", "0.1", "method", "ema"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "percentile", "99"), "--percentile applies to --method percentile"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "calib-folds", "3"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "calib-folds", "3", "method", "ema"), "--calib-folds: --method ema keeps no folds"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "calib-folds", "3", "method", "auto"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "calib-folds", "3", "act-type", "int16"), NULL},
		/* the default method named explicitly still asks for calibration */
		{OQ_JOB_QUANTIZE, KV("weight-only", NULL, "method", "mse"), "--method needs activation calibration"},
		{OQ_JOB_QUANTIZE, KV("weight-only", NULL, "bias-correction", NULL), "give --calib DIR"},
		{OQ_JOB_QUANTIZE, KV("weight-only", NULL, "weight-rounding", "seq-mse"), "give --calib DIR"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-only", NULL, "bias-correction", NULL), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-only", NULL, "weight-rounding", "adaround"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-only", NULL, "bias-correction", "analytic"), "drop =analytic"},
		{OQ_JOB_QUANTIZE, KV("stats", "s", "weight-rounding", "adaround"), "--weight-rounding learns on the samples"},
		{OQ_JOB_CALIBRATE, KV("calib", "c", "weight-rounding", "adaround"), "--weight-rounding learns on the samples"},
		{OQ_JOB_QUANTIZE, KV("calib", "random:4", "weight-rounding", "adaround"), "not random:N"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-rounding", "adaround", "cle", NULL), NULL},
		{OQ_JOB_QUANTIZE, KV("weight-only", NULL, "no-bias-correction", NULL), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "op-types", "Conv"), "--op-types applies to --weight-only"},
		{OQ_JOB_QUANTIZE, KV("weight-only", NULL, "op-types", "Conv"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "profile", "trt", "act-type", "int8"), "--profile trt fixes activations"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "profile", "trt", "act-symmetric", NULL), "--profile trt fixes activations"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "profile", "trt", "weight-type", "int4"), "--profile trt fixes weights"},
		/* TensorRT FP8: float8e4m3fn activations and weights together */
		{OQ_JOB_QUANTIZE, KV("calib", "c", "profile", "trt", "act-type", "float8e4m3fn", "weight-type", "float8e4m3fn"),
		 NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "profile", "trt", "act-type", "float8e4m3fn"),
		 "FP8 is float8e4m3fn activations and weights together"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "act-symmetric", "unsigned", "act-type", "int8"),
		 "--act-symmetric=unsigned needs --act-type uint8 or uint16"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "act-symmetric", "unsigned", "act-type", "uint16"), NULL},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-type", "float8e4m3fn", "weight-asymmetric", NULL),
		 "float8e4m3fn weights are symmetric"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-type", "float8e4m3fn", "reduce-range", NULL),
		 "--reduce-range is for 8-bit integer weights"},
		{OQ_JOB_QUANTIZE, KV("calib", "c", "weight-type", "float8e4m3fn", "granularity", "block"),
		 "float8e4m3fn weights are per tensor or per channel"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		oq_diag d;
		int rc = check(cases[i].job, cases[i].kv, &d);
		if (!cases[i].msg) {
			cr_expect_eq(rc, OQ_OK, "case %zu: %s", i, d.msg);
			continue;
		}
		cr_expect_eq(rc, OQ_EUSAGE, "case %zu: accepted, want '%s'", i, cases[i].msg);
		cr_expect(strstr(d.msg, cases[i].msg), "case %zu: '%s', want '%s'", i, d.msg, cases[i].msg);
	}
}

Test(options, missing_paths)
{
	oq_pipeline_opts o;
	oq_diag d;

	oq_pipeline_opts_init(&o, OQ_JOB_CALIBRATE);
	oq_diag_init(&d);
	o.in_path = "m.onnx";
	o.calib.source = "c";
	cr_expect_eq(oq_pipeline_opts_check(&o, &d), OQ_EUSAGE);
	cr_expect_str_eq(d.msg, "calibrate: missing -o STATS");
	o.in_path = NULL;
	oq_diag_init(&d);
	cr_expect_eq(oq_pipeline_opts_check(&o, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "missing MODEL"), "%s", d.msg);
}

/* What the defaults become (README "Calibration methods", "Bias correction"; --help). */
Test(options, resolve)
{
	oq_pipeline_opts o, r;

	oq_pipeline_opts_init(&o, OQ_JOB_QUANTIZE);
	oq_pipeline_opts_resolve(&o, &r);
	cr_expect_eq(r.calib.method, OQ_CALIB_MSE);
	cr_expect_eq(r.bias_correction, OQ_BC_EMPIRICAL);
	cr_expect_eq(r.q.act_type, OQ_DT_UINT8);
	cr_expect_eq(r.q.act_sym, 0);
	o.q.weight_only = 1;
	oq_pipeline_opts_resolve(&o, &r);
	cr_expect_eq(r.bias_correction, OQ_BC_OFF);
	oq_pipeline_opts_init(&o, OQ_JOB_CALIBRATE);
	oq_pipeline_opts_resolve(&o, &r);
	cr_expect_eq(r.bias_correction, OQ_BC_OFF);
	oq_pipeline_opts_init(&o, OQ_JOB_QUANTIZE);
	o.calib.method = OQ_CALIB_MINMAX;
	o.q.profile = OQ_PROFILE_TRT;
	oq_pipeline_opts_resolve(&o, &r);
	cr_expect_eq(r.calib.method, OQ_CALIB_MINMAX);
	cr_expect_eq(r.q.act_type, OQ_DT_INT8);
	cr_expect_eq(r.q.act_sym, 1);
	oq_pipeline_opts_init(&o, OQ_JOB_QUANTIZE);
	o.q.act_type = OQ_DT_FLOAT8E4M3FN;
	oq_pipeline_opts_resolve(&o, &r);
	cr_expect_eq(r.q.act_sym, 1);
	cr_expect_eq(r.calib.method, OQ_CALIB_MSE);
	/* 16-bit activations: auto, unless a method is named */
	for (int t = 0; t < 2; t++) {
		oq_pipeline_opts_init(&o, OQ_JOB_QUANTIZE);
		o.q.act_type = t ? OQ_DT_UINT16 : OQ_DT_INT16;
		oq_pipeline_opts_resolve(&o, &r);
		cr_expect_eq(r.calib.method, OQ_CALIB_AUTO);
		o.calib.method = OQ_CALIB_MSE;
		oq_pipeline_opts_resolve(&o, &r);
		cr_expect_eq(r.calib.method, OQ_CALIB_MSE);
	}
}

/* Every option a user may give is on `quantize --help` (-o, --shard, --ranges, analyze's --json and
 * --html are elsewhere). */
Test(options, help_lists_every_option)
{
	char *text = NULL, want[64];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	oq_pipeline_options_help(f);
	cr_assert_eq(fclose(f), 0);
	cr_expect(strstr(text, "  --no-PASS "), "--no-PASS missing");
	for (size_t i = 0; i < oq_pipeline_n_options; i++) {
		const char *n = oq_pipeline_options[i].name;
		if (!n || !strcmp(n, "output") || !strcmp(n, "shard") || !strcmp(n, "ranges") || !strcmp(n, "json") ||
		    !strcmp(n, "html"))
			continue;
		snprintf(want, sizeof want, "--%s", n);
		cr_expect(strstr(text, want), "%s is not on --help", want);
	}
	free(text);
}
