/*
 * test_fidelity.c - what every `quantize --calib` reports about fidelity:
 * the held-out fold SQNR per output, the warning below 20 dB naming the
 * worst points, and the warning when nothing was quantized.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gen_model.h"
#include "src/io/npy.h"
#include "src/pipeline/fidelity.h"
#include "src/pipeline/pipeline.h"
#include "tmpdir.h"

/* Writes samples n x [dims] (values v, n * count floats) as dir/000.npy, 001.npy, ... */
static void write_samples(const char *dir, size_t n, int rank, const int64_t *dims, const float *v, size_t count)
{
	char path[300];
	oq_diag d;

	oq_diag_init(&d);
	cr_assert_eq(mkdir(dir, 0755), 0);
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%03zu.npy", dir, i);
		cr_assert_eq(oq_npy_write(path, OQ_DT_FLOAT, rank, dims, v + i * count, count * sizeof *v, &d),
			     OQ_OK, "%s", d.msg);
	}
}

/* Runs `quantize MODEL --calib calib --method minmax --no-bias-correction --threads T`; the log into buf. */
static void quantize_log_threads(const char *model, const char *calib, int threads, char *buf, size_t n)
{
	oq_pipeline_opts po;
	oq_diag d;
	FILE *log = tmpfile();
	size_t got;

	cr_assert_not_null(log);
	oq_diag_init(&d);
	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.in_path = model;
	po.out_path = tmpdir_at("q.onnx");
	po.calib.source = calib;
	po.calib.method = OQ_CALIB_MINMAX;
	po.calib.threads = threads;
	po.q.prefer = OQ_PREFER_ACCURACY; /* these tiny models run faster in float: quantize them anyway */
	po.bias_correction = OQ_BC_OFF;
	po.log = log;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	rewind(log);
	got = fread(buf, 1, n - 1, log);
	buf[got] = 0;
	fclose(log);
}

static void quantize_log(const char *model, const char *calib, char *buf, size_t n)
{
	quantize_log_threads(model, calib, 1, buf, n);
}

/* Runs `analyze MODEL --calib calib --method minmax --json` (tmpdir a.json) with
 * --weight-rounding `rounding` (OQ_WROUND_*); its text into buf. */
static void analyze_json(const char *model, const char *calib, int rounding, char *buf, size_t n)
{
	oq_pipeline_opts po;
	oq_diag d;
	char json[256];
	FILE *f;
	size_t got;

	snprintf(json, sizeof json, "%s", tmpdir_at("a.json"));
	oq_diag_init(&d);
	oq_pipeline_opts_init(&po, OQ_JOB_ANALYZE);
	po.in_path = model;
	po.json_path = json;
	po.q.weight_rounding = rounding;
	po.calib.source = calib;
	po.calib.method = OQ_CALIB_MINMAX;
	po.calib.threads = 1;
	po.q.prefer = OQ_PREFER_ACCURACY; /* these tiny models run faster in float: quantize them anyway */
	po.quiet = 1;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	cr_assert_not_null(f = fopen(json, "r"));
	got = fread(buf, 1, n - 1, f);
	buf[got] = 0;
	fclose(f);
}

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_fid"));
}

TestSuite(fidelity, .init = setup, .fini = tmpdir_remove);

/* y = Conv(x, W = 1), x [1,1,1,2], written to tmpdir m.onnx (its path into model, 256 bytes). */
static void conv_model(char *model)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 2));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(1));
	gen_node(g, mg, "Conv", "conv", "x,W", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 2));
	snprintf(model, 256, "%s", tmpdir_at("m.onnx"));
	cr_assert_eq(gen_write(g, model), 0);
	gen_free(g);
}

/*
 * y = Conv(x, W = 1), x [1,1,1,2]; 4 samples make 2 folds (folds.h: min(4, max(2, 4/2))):
 * fold 0 = samples 0, 1: x = (0, 1), (1, 0); fold 1 = samples 2, 3: x = (0, 2), (2, 0).
 * minmax, uint8 asymmetric activations (ORT profile).
 * Fold 0 is judged with fold 1's ranges [0, 2]: scale 2/255, x = 1 -> 127.5 -> 128 (ties to
 * even) -> 1.0039216; y (range [0, 2]) re-quantizes 1.0039216 to the same 128; the weight 1 is
 * 127 * (1/127) in int8. Error 0.0039216 on one element of each sample.
 * Fold 1 is judged with fold 0's range [0, 1]: x = 2 clips to 1; error 1 on one element of each.
 *   sum r^2 = 1 + 1 + 4 + 4 = 10, sum e^2 = 2 (0.0039216)^2 + 2 = 2.0000308
 *   fold SQNR = 10 log10(10 / 2.0000308) = 6.99 dB
 * The written model (ranges from all samples, [0, 2]) would score ~ 54 dB on these samples: an
 * in-sample figure could not see the clipping. x's own error is the same 6.99 dB; y's own and
 * W's are rounding only: x is named first.
 */
Test(fidelity, held_out_clipping_by_hand)
{
	const float xs[] = {0, 1, 1, 0, 0, 2, 2, 0};
	char model[256], calib[256], log[8192];
	const char *line, *warn;

	conv_model(model);
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	write_samples(calib, 4, GEN_SHAPE(1, 1, 1, 2), xs, 2);
	quantize_log(model, calib, log, sizeof log);

	line = strstr(log, "fold SQNR (held-out, 2 folds of 4 samples): 'y' 7.0 dB\n");
	cr_expect_not_null(line, "log:\n%s", log);
	warn = strstr(log, "warning: fold SQNR below 20 dB");
	cr_assert_not_null(warn, "log:\n%s", log);
	cr_expect_not_null(strstr(warn, "held-out): 'x' (activation, 7.0 dB)"), "log:\n%s", log);
	cr_expect_not_null(strstr(warn, "--overrides"), "log:\n%s", log);
	cr_expect_not_null(strstr(warn, "--target-sqnr 20"), "log:\n%s", log);
}

/*
 * The same Conv on 12 samples: 4 folds of 3, so that with 2 threads the samples after each
 * fold's first run on two lanes. Folds 0-2: x = (0, 1), (1, 0), (1, 1); fold 3: (0, 2), (2, 0),
 * (2, 2). Folds 0-2 are judged with ranges [0, 2] (fold 3 among the others): each 1 becomes
 * 128 * 2/255 = 1.0039216, error 0.0039216 on 4 elements a fold. Fold 3 is judged with [0, 1]:
 * each 2 clips to 1, error 1 on 4 elements.
 *   sum r^2 = 3 * 4 + 16 = 28, sum e^2 = 12 (0.0039216)^2 + 4 = 4.0001845
 *   fold SQNR = 10 log10(28 / 4.0001845) = 8.45 dB, for 'y' and for x's own error
 * One thread and two give the same report.
 */
Test(fidelity, lanes_give_the_one_thread_report)
{
	const float xs[] = {0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 2, 2, 0, 2, 2};
	char model[256], calib[256], log1[8192], log2[8192];
	const char *l1, *l2, *w1, *w2;

	conv_model(model);
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	write_samples(calib, 12, GEN_SHAPE(1, 1, 1, 2), xs, 2);
	quantize_log_threads(model, calib, 1, log1, sizeof log1);
	quantize_log_threads(model, calib, 2, log2, sizeof log2);

	l1 = strstr(log1, "fold SQNR (held-out, 4 folds of 12 samples): 'y' 8.5 dB\n");
	l2 = strstr(log2, "fold SQNR (held-out, 4 folds of 12 samples): 'y' 8.5 dB\n");
	cr_expect_not_null(l1, "log:\n%s", log1);
	cr_expect_not_null(l2, "log:\n%s", log2);
	w1 = strstr(log1, "warning: fold SQNR below 20 dB");
	w2 = strstr(log2, "warning: fold SQNR below 20 dB");
	cr_assert_not_null(w1, "log:\n%s", log1);
	cr_assert_not_null(w2, "log:\n%s", log2);
	cr_expect_not_null(strstr(w1, "held-out): 'x' (activation, 8.5 dB)"), "log:\n%s", log1);
	cr_expect_str_eq(w1, w2);
}

/* The same model on samples that all share one range: no clipping, no warning. */
Test(fidelity, no_warning_when_folds_agree)
{
	const float xs[] = {0, 2, 2, 0, 0, 2, 2, 0};
	char model[256], calib[256], log[8192];

	conv_model(model);
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	write_samples(calib, 4, GEN_SHAPE(1, 1, 1, 2), xs, 2);
	quantize_log(model, calib, log, sizeof log);
	/* x = 2 is exact on [0, 2] (255); x = 0 is the zero point: no error at all */
	cr_expect_not_null(strstr(log, "fold SQNR (held-out, 2 folds of 4 samples): 'y' inf dB"), "log:\n%s", log);
	cr_expect_null(strstr(log, "warning"), "log:\n%s", log);
}

/* An If (cond: a true initializer) on x [1,1,1,1]: then = conv_op(x, W = 2) -> yt, else =
 * Identity(x) -> ye; samples x = 1..4. */
static void if_model(const char *conv_op, char *log, size_t n)
{
	const float xs[] = {1, 2, 3, 4};
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg, *t, *e;
	Onnx__NodeProto *nd;
	char model[256], calib[256];

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	gen_init(g, mg, "c", OQ_DT_BOOL, 0, NULL, GEN_VALS(1));
	gen_init(g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1), GEN_VALS(2));
	nd = gen_node(g, mg, "If", "if", "c", "y");
	t = gen_attr_graph(g, nd, "then_branch", "then");
	gen_node(g, t, conv_op, "conv_t", "x,W", "yt");
	gen_output(g, t, "yt", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	e = gen_attr_graph(g, nd, "else_branch", "else");
	gen_node(g, e, "Identity", "id_e", "x", "ye");
	gen_output(g, e, "ye", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	snprintf(model, sizeof model, "%s", tmpdir_at("m.onnx"));
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	cr_assert_eq(gen_write(g, model), 0);
	gen_free(g);
	write_samples(calib, 4, GEN_SHAPE(1, 1, 1, 1), xs, 1);
	quantize_log(model, calib, log, n);
}

/* The Conv inside the taken branch is quantized; the branch no sample took is named. */
Test(fidelity, if_branch_quantized_untaken_named)
{
	char log[8192];

	if_model("Conv", log, sizeof log);
	cr_expect_not_null(strstr(log, "wrote "), "log:\n%s", log);
	cr_expect_not_null(strstr(log, ": 2 QuantizeLinear, "), "x's and yt's Q; log:\n%s", log);
	cr_expect_null(strstr(log, "nothing was quantized"), "log:\n%s", log);
	cr_expect_not_null(strstr(log, "note: If node 'if': body 'else' (attribute else_branch) never "
				   "ran during calibration"), "log:\n%s", log);
}

/* Nothing quantizable inside the If (Sub is no op the quantize pass handles): nothing quantized,
 * and the log says so and why. */
Test(fidelity, nothing_quantized_inside_if)
{
	char log[8192];

	if_model("Sub", log, sizeof log);
	cr_expect_not_null(strstr(log, "warning: nothing was quantized: the main graph's 1 If/Loop/Scan"),
			   "log:\n%s", log);
}

/*
 * analyze on two 1x1 convolutions, x [1,2,1,1] -> Conv W1 = identity [2,2,1,1] -> y1 ->
 * Conv W2 = (1, 0.003) [1,2,1,1] -> y; 4 samples, all x = (2, 2), minmax.
 * Activations: x and y1 = (2, 2) on the range [0, 2] (uint8, scale 2/255): 2 is code 255,
 * exact; y = 2 + 0.006 = 2.006 is the top of its range [0, 2.006]: exact. W1 (rows 1 0 / 0 1,
 * per channel scale 1/127) is exact. W2: scale 1/127, 0.003 * 127 = 0.381 rounds to 0, so with
 * W2 alone quantized y = 2: point SQNR = 20 log10(2.006 / 0.006) = 50.484 dB, the worst point.
 */
/* The two-convolution model above and its samples: tmpdir m.onnx, calib/. */
static void two_convs(void)
{
	const float xs[] = {2, 2, 2, 2, 2, 2, 2, 2};
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;

	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 1));
	gen_init(g, mg, "W1", OQ_DT_FLOAT, GEN_SHAPE(2, 2, 1, 1), GEN_VALS(1, 0, 0, 1));
	gen_init(g, mg, "W2", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 1), GEN_VALS(1, 0.003));
	gen_node(g, mg, "Conv", "c1", "x,W1", "y1");
	gen_node(g, mg, "Conv", "c2", "y1,W2", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 1));
	cr_assert_eq(gen_write(g, tmpdir_at("m.onnx")), 0);
	gen_free(g);
	write_samples(tmpdir_at("calib"), 4, GEN_SHAPE(1, 2, 1, 1), xs, 2);
}

Test(fidelity, analyze_ranks_the_hard_weight_first)
{
	char model[256], calib[256], text[16384];
	const char *pts, *first;
	double db;

	two_convs();
	snprintf(model, sizeof model, "%s", tmpdir_at("m.onnx"));
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	analyze_json(model, calib, OQ_WROUND_NEAREST, text, sizeof text);
	cr_assert_not_null(pts = strstr(text, "\"points\": ["), "%s", text);
	cr_assert_not_null(first = strstr(pts, "{\"name\": "), "%s", text);
	cr_expect(!strncmp(first, "{\"name\": \"W2\", \"kind\": \"weight\", \"rank\": 1, \"sqnr_db\": ", 55), "%s", text);
	cr_assert_not_null(first = strstr(first, "\"sqnr_db\": "));
	db = atof(first + 11);
	cr_expect(fabs(db - 50.484) < 0.01, "W2 alone: %.4f dB, want 50.484", db);
	/* the second point (all others are exact to float rounding) is far better */
	cr_assert_not_null(first = strstr(first, "{\"name\": "));
	cr_assert_not_null(first = strstr(first, "\"sqnr_db\": "));
	cr_expect(atof(first + 11) > 100, "%s", text);
}

/*
 * --target-sqnr 60 on the two convolutions: fully quantized, the fold SQNR is 48.1 dB (W2's
 * rounding, then y's grid). W2 carries all the noise a point adds alone, so it alone is raised,
 * to int16: 0.003 * 32767 = 98.3 -> 98, y = 2 + 2 * 98 / 32767 = 2.0059817, which y's grid
 * (scale 2.006 / 255) rounds to code 255 = 2.006: exact again, the target is reached. MACs:
 * c1 2 outputs x 2 inputs = 4, c2 1 x 2 = 2; c2 reads the raised W2: 4 / 6 stay 8-bit.
 */
Test(fidelity, target_sqnr_raises_the_hard_weight_only)
{
	oq_pipeline_opts po;
	oq_diag d;
	char model[256], calib[256], report[256], out[256], text[4096];
	FILE *f;
	size_t got;

	two_convs();
	snprintf(model, sizeof model, "%s", tmpdir_at("m.onnx"));
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	snprintf(report, sizeof report, "%s", tmpdir_at("r.json"));
	snprintf(out, sizeof out, "%s", tmpdir_at("q.onnx"));
	oq_diag_init(&d);
	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.in_path = model;
	po.out_path = out;
	po.calib.source = calib;
	po.calib.method = OQ_CALIB_MINMAX;
	po.calib.threads = 1;
	po.q.prefer = OQ_PREFER_ACCURACY; /* these tiny models run faster in float: quantize them anyway */
	po.bias_correction = OQ_BC_OFF;
	po.target_sqnr = 60;
	po.report_path = report;
	po.quiet = 1;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	cr_assert_not_null(f = fopen(report, "r"));
	got = fread(text, 1, sizeof text - 1, f);
	text[got] = 0;
	fclose(f);
	cr_expect_not_null(strstr(text, "\"reached\": true"), "%s", text);
	cr_expect_not_null(strstr(text, "\"macs_8bit_share\": 0.666667"), "%s", text);
	cr_expect_not_null(strstr(text, "\"raised\": [\n    {\"name\": \"W2\", \"kind\": \"weight\", \"to\": \"int16\"}]"),
			   "%s", text);
	cr_expect_not_null(strstr(text, "\"fold_sqnr_db_8bit\": 48.1"), "%s", text);
}

/*
 * analyze measures a point that is a graph output: on the clipping model of
 * held_out_clipping_by_hand, y alone quantized clips as x does (fold 1's range [0, 1] on
 * y = 2; fold 0's [0, 2] rounds y = 1 to 1.0039216): the same 6.99 dB.
 */
Test(fidelity, analyze_measures_an_output_point)
{
	const float xs[] = {0, 1, 1, 0, 0, 2, 2, 0};
	char model[256], calib[256], text[8192];
	const char *y;

	conv_model(model);
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	write_samples(calib, 4, GEN_SHAPE(1, 1, 1, 2), xs, 2);
	analyze_json(model, calib, OQ_WROUND_NEAREST, text, sizeof text);
	cr_assert_not_null(y = strstr(text, "{\"name\": \"y\", \"kind\": \"activation\""), "%s", text);
	cr_assert_not_null(y = strstr(y, "\"sqnr_db\": "));
	cr_expect(fabs(atof(y + 11) - 6.9896) < 0.01, "y alone: %s", text);
}

/*
 * analyze with learned rounding also measures each weight rounded to nearest: y = x W (MatMul),
 * W = (10.4, 20.4, 127) / 127 ([3, 1]: per-channel int8 scale 1 / 127), samples x = (a, a, 0),
 * a = 1..8. Nearest rounds W to (10, 20, 127) / 127: y's error is -0.8 a / 127 against
 * y = 30.8 a / 127, 20 log10(30.8 / 0.8) = 31.709 dB whatever the a. AdaRound rounds one of the
 * first two up (error +0.2 a / 127: test_rounding's guard_case): 20 log10(30.8 / 0.2) = 43.750 dB.
 * Only W has a learned rounding, so only W has the nearest figure.
 */
Test(fidelity, analyze_shows_the_weight_before_and_after_learned_rounding)
{
	static const double w[3] = {10.4 / 127, 20.4 / 127, 1.0};
	float xs[24];
	gen_model *g = gen_matmul(1, 3, 1, w);
	char model[256], calib[256], text[8192];
	const char *p, *near;

	for (int i = 0; i < 8; i++) {
		xs[3 * i] = xs[3 * i + 1] = (float)(i + 1);
		xs[3 * i + 2] = 0;
	}
	snprintf(model, sizeof model, "%s", tmpdir_at("m.onnx"));
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	cr_assert_eq(gen_write(g, model), 0);
	gen_free(g);
	write_samples(calib, 8, GEN_SHAPE(1, 3), xs, 3);
	analyze_json(model, calib, OQ_WROUND_ADAROUND, text, sizeof text);
	cr_assert_not_null(p = strstr(text, "\"kind\": \"weight\""), "%s", text);
	cr_assert_not_null(p = strstr(p, "\"sqnr_db\": "), "%s", text);
	cr_expect(fabs(atof(p + 11) - 43.750) < 0.01, "W learned: %s", text);
	cr_assert_not_null(near = strstr(p, "\"sqnr_db_nearest\": "), "%s", text);
	cr_expect(fabs(atof(near + 19) - 31.709) < 0.01, "W nearest: %s", text);
	cr_expect_null(strstr(near + 1, "\"sqnr_db_nearest\": "), "an activation got a nearest figure: %s", text);
}

/*
 * Learned rounding and --target-sqnr on x [1,3,1,2] -> Conv W1 = identity [3,3,1,1] -> y1 ->
 * Conv W2 = (1, a, a), a = 0.6 / 127 [1,3,1,1] -> y; every sample holds the positions
 * x = (2,2,2) and (3,3,3), minmax, no bias correction.
 * x and y1 = x on [0, 3] (uint8 scale 3/255: 2 is code 170, 3 is 255) and W1 are exact.
 * W2 (per channel scale 1/127): a / s = 0.6. Float y = c k, k = 1 + 1.2/127 = 1.0094488, on
 * y's grid [0, 3k] (step 3k/255 = 0.0118759).
 *  - nearest rounds both a up: W2 sums to 1 + 2/127, y = c 1.0157480. c = 3 clips to the
 *    grid's top (exact); c = 2: 2.0314961 is code 171.06 -> 171, one step above 2k (code 170):
 *    fold SQNR 10 log10(13 k^2 / step^2) = 49.73 dB < 60. W2 alone carries the noise; raised to
 *    int16 (a -> 155 / 32767, y within 1e-5 of float) it is exact again. MACs: c1 3 outputs x
 *    2 positions x 3 inputs = 18, c2 1 x 2 x 3 = 6: 18 / 24 = 0.75 stay 8-bit.
 *  - AdaRound (the layer's loss sees only sum(e) through the inputs' mean, mostly) rounds one a
 *    up, one down: W2 sums to 1 + 1/127, y = c 1.0078740: c = 2 is code 169.73 -> 170, c = 3
 *    254.6 -> 255: exact, the target is met with no raise, 24 / 24 MACs stay 8-bit.
 */
static void sum_convs(void)
{
	const float a = 0.6f / 127, xs[] = {2, 3, 2, 3, 2, 3};
	float all[4 * 6];
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg;

	for (size_t i = 0; i < 4; i++)
		memcpy(all + 6 * i, xs, sizeof xs);
	gen_opset(g, "", 13);
	mg = gen_graph(g);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 1, 2));
	gen_init(g, mg, "W1", OQ_DT_FLOAT, GEN_SHAPE(3, 3, 1, 1), GEN_VALS(1, 0, 0, 0, 1, 0, 0, 0, 1));
	gen_init(g, mg, "W2", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 1, 1), GEN_VALS(1, a, a));
	gen_node(g, mg, "Conv", "c1", "x,W1", "y1");
	gen_node(g, mg, "Conv", "c2", "y1,W2", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 1, 1, 2));
	cr_assert_eq(gen_write(g, tmpdir_at("m.onnx")), 0);
	gen_free(g);
	write_samples(tmpdir_at("calib"), 4, GEN_SHAPE(1, 3, 1, 2), all, 6);
}

/* quantize tmpdir m.onnx --calib calib --target-sqnr 60 --weight-rounding ROUNDING (minmax, no
 * bias correction): the report into rep, the log into log. */
static void target_run(int rounding, char *rep, size_t nrep, char *log, size_t nlog)
{
	oq_pipeline_opts po;
	oq_diag d;
	char report[256], model[256], calib[256], out[256];
	FILE *f, *lf = tmpfile();
	size_t got;

	cr_assert_not_null(lf);
	snprintf(report, sizeof report, "%s", tmpdir_at("r.json"));
	snprintf(model, sizeof model, "%s", tmpdir_at("m.onnx"));
	snprintf(calib, sizeof calib, "%s", tmpdir_at("calib"));
	snprintf(out, sizeof out, "%s", tmpdir_at("q.onnx"));
	oq_diag_init(&d);
	oq_pipeline_opts_init(&po, OQ_JOB_QUANTIZE);
	po.in_path = model;
	po.out_path = out;
	po.calib.source = calib;
	po.calib.method = OQ_CALIB_MINMAX;
	po.calib.threads = 1;
	po.q.prefer = OQ_PREFER_ACCURACY; /* these tiny models run faster in float: quantize them anyway */
	po.q.weight_rounding = rounding;
	po.bias_correction = OQ_BC_OFF;
	po.target_sqnr = 60;
	po.report_path = report;
	po.log = lf;
	cr_assert_eq(oq_pipeline_run(&po, &d), OQ_OK, "%s", d.msg);
	rewind(lf);
	got = fread(log, 1, nlog - 1, lf);
	log[got] = 0;
	fclose(lf);
	cr_assert_not_null(f = fopen(report, "r"));
	got = fread(rep, 1, nrep - 1, f);
	rep[got] = 0;
	fclose(f);
}

Test(fidelity, target_sqnr_nearest_raises_the_rounded_weight)
{
	char rep[4096], log[16384];

	sum_convs();
	target_run(OQ_WROUND_NEAREST, rep, sizeof rep, log, sizeof log);
	cr_expect_not_null(strstr(rep, "\"reached\": true"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"fold_sqnr_db_8bit\": 49.7"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"macs\": 24,\n  \"macs_8bit\": 18,\n  \"macs_8bit_share\": 0.750000"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"raised\": [\n    {\"name\": \"W2\", \"kind\": \"weight\", \"to\": \"int16\"}]"),
			   "%s", rep);
}

Test(fidelity, target_sqnr_starts_from_learned_rounding)
{
	char rep[4096], log[16384];

	sum_convs();
	target_run(OQ_WROUND_ADAROUND, rep, sizeof rep, log, sizeof log);
	cr_expect_not_null(strstr(rep, "\"reached\": true"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"rounds\": 0,"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"macs\": 24,\n  \"macs_8bit\": 24,\n  \"macs_8bit_share\": 1.000000"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"raised\": []"), "%s", rep);
	/* the guard ran the nearest job's own search and kept the learned one for its MACs */
	cr_expect_not_null(strstr(log, "8-bit MACs 100.0 % with, 75.0 % without: kept"), "log:\n%s", log);
}

/*
 * The give-back phase on the clipping model of held_out_clipping_by_hand (y = Conv(x, W = 1),
 * folds of x = (0, 1), (1, 0) and (0, 2), (2, 0)), --target-sqnr 60. x and y clip on held-out
 * folds (each alone 6.99 dB): 16 bits do not cure clipping (minmax ranges), float does. W = 1
 * is exact in int8 (127 * 1/127). Raising: round 1 takes x and y to int16 (still clipped),
 * round 2 the last 8-bit point W to int16, round 3 x and y to float: exact, reached. W went
 * to 16 bits only because nothing else was left at 8; its noise alone is 0, so the give-back
 * returns it, measures the model exact again and keeps it: raised = x and y (float) only.
 */
Test(fidelity, target_sqnr_gives_back_an_unneeded_raise)
{
	const float xs[] = {0, 1, 1, 0, 0, 2, 2, 0};
	char model[256], rep[4096], log[16384];

	conv_model(model);
	write_samples(tmpdir_at("calib"), 4, GEN_SHAPE(1, 1, 1, 2), xs, 2);
	target_run(OQ_WROUND_NEAREST, rep, sizeof rep, log, sizeof log);
	cr_expect_not_null(strstr(rep, "\"reached\": true,\n  \"rounds\": 3,\n  \"given_back\": 1,"), "%s", rep);
	cr_expect_not_null(strstr(rep, "\"raised\": [\n    {\"name\": \"x\", \"kind\": \"activation\", \"to\": \"float\"},\n"
				       "    {\"name\": \"y\", \"kind\": \"activation\", \"to\": \"float\"}]"), "%s", rep);
	cr_expect_not_null(strstr(log, "target-sqnr: round 2: 3 points at 16 bits, 0 float"), "log:\n%s", log);
	cr_expect_not_null(strstr(log, "target-sqnr: give back 1 point to 8 bits: worst output 'y' inf dB\n"), "log:\n%s", log);
}

/* One block by hand: s = 0.5, z = 0, int8-like bounds [-4, 4] (values in [-2, 2]), the float
 * value clamped to [-1.5, 1.5] (a folded Clip). x = 0.25 -> v 0.5 -> 0 (ties to even), f 0;
 * 0.75 -> 1.5 -> 2, f 1.0; 3 -> 6 -> 4, f 2.0, r 1.5; -0.3 -> -0.6 -> -1, f -0.5. */
Test(fidelity, point_sums_by_hand)
{
	const float x[] = {0.25f, 0.75f, 3.0f, -0.3f};
	for (int simd = 0; simd <= 1; simd++) {
		double r2 = 1.0, d2 = 2.0;
		oq_fidelity_simd = simd;
		oq_fidelity_sq_block(x, 4, 0.5f, -4.0f, 4.0f, -1.5f, 1.5f, &r2, &d2);
		cr_assert_float_eq(r2, 1.0 + 0.0625 + 0.5625 + 2.25 + (double)-0.3f * -0.3f, 1e-12);
		cr_assert_float_eq(d2, 2.0 + 0.0625 + 0.0625 + 0.25 + ((double)-0.3f + 0.5) * ((double)-0.3f + 0.5),
				   1e-12);
	}
	oq_fidelity_simd = 1;
}

/* The AVX-512 and AVX2 loops give the plain loop's bits: every block length up to 256 (tails of every
 * size), ties, signed zeros, values past the grid (saturated), a zero point at the bound; and
 * with NaN / +-Inf among the values. */
Test(fidelity, point_sums_same_bits_on_every_path)
{
	float x[256];
	uint32_t st = 12345;
	for (int special = 0; special < 2; special++) {
		for (size_t i = 0; i < 256; i++) {
			st = st * 1664525u + 1013904223u;
			x[i] = ((float)(st >> 8) / (float)(1u << 24) - 0.5f) * 20.0f;
			if (i % 29 == 3)
				x[i] = i % 2 ? 70.0f : -0.0f;
			else if (i % 13 == 1)
				x[i] = (float)(int)(x[i] * 4) * 0.25f + 0.125f; /* a tie of scale 0.25 */
			else if (special && i % 37 == 5)
				x[i] = i % 2 ? NAN : i % 3 ? INFINITY : -INFINITY;
		}
		for (size_t n = 0; n <= 256; n++)
			for (int z = 0; z < 2; z++) {
				double r2[3] = {0.5, 0.5, 0.5}, d2[3] = {0.25, 0.25, 0.25};
				float qlo = z ? 0.0f : -128.0f, qhi = z ? 255.0f : 127.0f;
				for (int simd = 0; simd <= 2; simd++) {
					oq_fidelity_simd = simd;
					oq_fidelity_sq_block(x, n, 0.25f, qlo, qhi, z ? 0.0f : -INFINITY, 8.0f, &r2[simd],
							     &d2[simd]);
				}
				for (int simd = 1; simd <= 2; simd++) {
					cr_assert(memcmp(&r2[0], &r2[simd], sizeof r2[0]) == 0, "n %zu z %d simd %d: r2 %a vs %a",
						  n, z, simd, r2[0], r2[simd]);
					cr_assert(memcmp(&d2[0], &d2[simd], sizeof d2[0]) == 0, "n %zu z %d simd %d: d2 %a vs %a",
						  n, z, simd, d2[0], d2[simd]);
				}
			}
	}
	oq_fidelity_simd = 1;
}
