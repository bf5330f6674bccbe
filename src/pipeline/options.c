/*
 * options.c - the pipeline's options: the table that sets them by name (as
 * the command line spells them), their defaults, the rules that make a set
 * of options consistent, and what the defaults resolve to (pipeline.h).
 *
 * A row's setter checks the value alone ("--block-size needs a number >=
 * 2"); oq_pipeline_opts_check checks how the values fit together, in a
 * fixed order, so one command line always gets the same first error, and
 * before any file is touched.
 */
#include "src/pipeline/pipeline.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "calib/folds.h"
#include "src/quant/qparams.h"

/* ------------------------------------------------------------ values */

/* A number in (0, max] from s, or -1. */
static double parse_real(const char *s, double max)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || !(v > 0) || v > max)
		return -1;
	return v;
}

/* A name of a closed set and its value. */
typedef struct choice {
	const char *name;
	int value;
} choice;

/* Sets *out to the value of name s in c (ended by a NULL name); 0 when s is not one. */
static int choose(const choice *c, const char *s, int *out)
{
	for (; c->name; c++)
		if (strcmp(c->name, s) == 0) {
			*out = c->value;
			return 1;
		}
	return 0;
}

static const choice qtypes[] = {
	{"int8", OQ_DT_INT8}, {"uint8", OQ_DT_UINT8}, {"int16", OQ_DT_INT16}, {"uint16", OQ_DT_UINT16},
	{"int4", OQ_DT_INT4}, {"uint4", OQ_DT_UINT4}, {"float8e4m3fn", OQ_DT_FLOAT8E4M3FN}, {NULL, 0},
};

/* ------------------------------------------------------------ storage */

/* A copy of s that lives as long as a, or NULL. */
static char *keep(oq_pipeline_args *a, const char *s)
{
	char *c;
	if (oq_grow(&a->copies, &a->cap_copies, a->n_copies + 1, sizeof *a->copies) || !(c = oq_strdup(s)))
		return NULL;
	a->copies[a->n_copies++] = c;
	return c;
}

/* Appends c (kept by a) to name list k (OQ_ARGS_*) and points the options at the lists. */
static int push(oq_pipeline_args *a, int k, const char *c, oq_diag *d)
{
	if (!c || oq_grow(&a->list[k], &a->cap[k], a->n[k] + 1, sizeof *a->list[k]))
		return oq_err(d, OQ_ENOMEM, "options: out of memory");
	a->list[k][a->n[k]++] = c;
	a->p.q.include = a->list[OQ_ARGS_INCLUDE];
	a->p.q.n_include = a->n[OQ_ARGS_INCLUDE];
	a->p.q.exclude = a->list[OQ_ARGS_EXCLUDE];
	a->p.q.n_exclude = a->n[OQ_ARGS_EXCLUDE];
	a->p.q.op_types = a->list[OQ_ARGS_OP_TYPES];
	a->p.q.n_op_types = a->n[OQ_ARGS_OP_TYPES];
	a->p.run.disabled = a->list[OQ_ARGS_DISABLED];
	a->p.run.n_disabled = a->n[OQ_ARGS_DISABLED];
	return OQ_OK;
}

static int append(oq_pipeline_args *a, int k, const char *s, oq_diag *d)
{
	return push(a, k, keep(a, s), d);
}

/* ------------------------------------------------------------ setters */

/* The field of a->p a generic setter sets; offset 0 is `job`, never an option's field. */
#define FIELD(a, o, type) ((type *)(void *)((char *)&(a)->p + (o)->field))

static int no_field(const oq_option *o, oq_diag *d)
{
	return oq_err(d, OQ_EINVAL, "options: --%s names no field (internal error)", o->name);
}

static int set_flag(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)v;
	if (!o->field)
		return no_field(o, d);
	*FIELD(a, o, int) = 1;
	return OQ_OK;
}

static int set_path(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	const char *c = keep(a, v);
	if (!o->field)
		return no_field(o, d);
	if (!c)
		return oq_err(d, OQ_ENOMEM, "options: out of memory");
	*FIELD(a, o, const char *) = c;
	return OQ_OK;
}

/* The numeric options: their range, C type ('s' size_t, 'i' int, 'l' int64_t) and message. */
static const struct number {
	const char *name;
	long long lo, hi;
	char type;
	const char *msg;
} numbers[] = {
	{"calib-limit", 1, (long long)1 << 40, 's', "--calib-limit needs a positive number"},
	{"calib-batch", 1, 65536, 's', "--calib-batch needs a number from 1 to 65536"},
	{"calib-folds", 2, OQ_FOLDS_MAX, 's', "--calib-folds needs a number from 2 to 64"},
	{"threads", 1, 1024, 'i', "--threads needs a number from 1 to 1024"},
	{"bias-correction-rounds", 0, 100, 'i', "--bias-correction-rounds needs a number in 0..100"},
	{"block-size", 2, (long long)1 << 30, 'l', "--block-size needs a number >= 2"},
	{"opset", 10, 1000, 'l', "--opset needs a number >= 10"},
	{"external-threshold", 1, LLONG_MAX, 's', "--external-threshold needs a positive number of bytes"},
	{"max-loop-iterations", 1, LLONG_MAX, 'l', "--max-loop-iterations needs a positive number"},
};

static int set_number(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
		const struct number *k = &numbers[i];
		long long n;
		if (strcmp(k->name, o->name) != 0)
			continue;
		if (!o->field)
			return no_field(o, d);
		if ((n = oq_parse_count(v, k->lo, k->hi)) < 0)
			return oq_err(d, OQ_EUSAGE, "%s", k->msg);
		if (k->type == 's')
			*FIELD(a, o, size_t) = (size_t)n;
		else if (k->type == 'i')
			*FIELD(a, o, int) = (int)n;
		else
			*FIELD(a, o, int64_t) = n;
		return OQ_OK;
	}
	return no_field(o, d);
}

/* The options that name one of a closed set, and the message listing it. */
static const choice profiles[] = {{"ort", OQ_PROFILE_ORT}, {"trt", OQ_PROFILE_TRT}, {NULL, 0}};
static const choice granularities[] = {
	{"tensor", OQ_GRAN_TENSOR}, {"channel", OQ_GRAN_CHANNEL}, {"block", OQ_GRAN_BLOCK}, {NULL, 0},
};
static const choice grids[] = {{"narrow", OQ_GRID_NARROW}, {"full", OQ_GRID_FULL}, {NULL, 0}};
static const choice wmethods[] = {{"minmax", OQ_WMETHOD_MINMAX}, {"mse", OQ_WMETHOD_MSE}, {NULL, 0}};
static const choice precisions[] = {
	{"float32", OQ_DT_FLOAT}, {"float16", OQ_DT_FLOAT16}, {"bfloat16", OQ_DT_BFLOAT16}, {NULL, 0},
};
static const choice wroundings[] = {
	{"nearest", OQ_WROUND_NEAREST}, {"adaround", OQ_WROUND_ADAROUND}, {"seq-mse", OQ_WROUND_SEQMSE}, {NULL, 0},
};
static const choice prefers[] = {
	{"balanced", OQ_PREFER_BALANCED}, {"speed", OQ_PREFER_SPEED}, {"accuracy", OQ_PREFER_ACCURACY}, {NULL, 0},
};
static const choice onoff[] = {{"on", OQ_BCW_ON}, {"off", OQ_BCW_OFF}, {NULL, 0}};
static const struct choices {
	const char *name;
	const choice *c;
	const char *msg;
} choices[] = {
	{"profile", profiles, "--profile is ort or trt"},
	{"granularity", granularities, "--granularity is tensor, channel or block"},
	{"sym-grid", grids, "--sym-grid is narrow or full"},
	{"weight-method", wmethods, "--weight-method is minmax or mse"},
	{"high-precision", precisions, "--high-precision is float32, float16 or bfloat16"},
	{"weight-rounding", wroundings, "--weight-rounding is nearest, adaround or seq-mse"},
	{"bias-correction-weights", onoff, "--bias-correction-weights is on or off"},
	{"prefer", prefers, "--prefer is speed, accuracy or balanced"},
};

static int set_choice(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
		if (strcmp(choices[i].name, o->name) == 0) {
			if (!o->field)
				return no_field(o, d);
			return choose(choices[i].c, v, FIELD(a, o, int)) ? OQ_OK
									  : oq_err(d, OQ_EUSAGE, "%s", choices[i].msg);
		}
	return no_field(o, d);
}

static int set_stats(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	if (a->p.job == OQ_JOB_CALIBRATE)
		return oq_err(d, OQ_EUSAGE, "--stats is a quantize option (calibrate writes statistics)");
	return set_path(a, o, v, d);
}

/* "I/N" with 0 <= I < N <= OQ_STATS_MAX_SHARDS. */
static int set_shard(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	const char *slash = strchr(v, '/');
	char buf[32];
	long long i = -1, n = -1;

	(void)o;
	if (a->p.job != OQ_JOB_CALIBRATE)
		return oq_err(d, OQ_EUSAGE, "--shard is a calibrate option");
	if (slash && (size_t)(slash - v) < sizeof buf) {
		memcpy(buf, v, (size_t)(slash - v));
		buf[slash - v] = 0;
		i = oq_parse_count(buf, 0, OQ_STATS_MAX_SHARDS - 1);
		n = oq_parse_count(slash + 1, 1, OQ_STATS_MAX_SHARDS);
	}
	if (i < 0 || n < 0 || i >= n)
		return oq_err(d, OQ_EUSAGE, "--shard needs I/N with 0 <= I < N <= 65536 (I is 0-based)");
	a->p.calib.shard = (uint32_t)i;
	a->p.calib.n_shards = (uint32_t)n;
	return OQ_OK;
}

/* Kept so that old scripts get told why, not "unknown option". */
static int set_ranges(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)a;
	(void)o;
	(void)v;
	return oq_err(d, OQ_EUSAGE, "--ranges is no longer needed: calibrate writes ranges and histograms in "
		      "one round (statistics format 2); drop it and the second round, and merge the shards' "
		      "files");
}

static int set_method(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	int m = oq_calib_method_parse(v);
	(void)o;
	if (m < 0)
		return oq_err(d, OQ_EUSAGE, "--method is minmax, ema, percentile, entropy, mse or auto");
	a->p.calib.method = m;
	return OQ_OK;
}

static int set_ema_constant(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)o;
	if ((a->p.calib.ema_constant = parse_real(v, 1)) < 0)
		return oq_err(d, OQ_EUSAGE, "--ema-constant needs a number in (0, 1]");
	return OQ_OK;
}

static int set_target_sqnr(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	char *end;
	double x = strtod(v, &end);

	(void)o;
	if (end == v || *end || !isfinite(x) || x <= 0 || x > 200)
		return oq_err(d, OQ_EUSAGE, "--target-sqnr needs a number of dB in (0, 200]");
	a->p.target_sqnr = x;
	return OQ_OK;
}

static int set_percentile(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)o;
	if ((a->p.calib.percentile = parse_real(v, 100)) < 0)
		return oq_err(d, OQ_EUSAGE, "--percentile needs a number in (0, 100]");
	return OQ_OK;
}

/* --no-bias-correction wins wherever it stands: OQ_BC_OFF is only ever set by it. */
static int set_bias_correction(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	static const choice modes[] = {{"empirical", OQ_BC_EMPIRICAL}, {"analytic", OQ_BC_ANALYTIC}, {NULL, 0}};
	int m = OQ_BC_EMPIRICAL;
	(void)o;
	if (v && !choose(modes, v, &m))
		return oq_err(d, OQ_EUSAGE, "--bias-correction takes =empirical (the default) or =analytic");
	if (a->p.bias_correction != OQ_BC_OFF)
		a->p.bias_correction = m;
	return OQ_OK;
}

static int set_no_bias_correction(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)o;
	(void)v;
	(void)d;
	a->p.bias_correction = OQ_BC_OFF;
	return OQ_OK;
}

static int set_weight_type(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	int t = 0;
	(void)o;
	if (!choose(qtypes, v, &t) || t == OQ_DT_UINT16)
		return oq_err(d, OQ_EUSAGE, "--weight-type is int8, uint8, int16, int4, uint4 or float8e4m3fn");
	a->p.q.weight_type = t;
	return OQ_OK;
}

static int set_act_type(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	int t = 0;
	(void)o;
	if (!choose(qtypes, v, &t) || t == OQ_DT_INT4 || t == OQ_DT_UINT4)
		return oq_err(d, OQ_EUSAGE, "--act-type is uint8, int8, uint16, int16 or float8e4m3fn");
	a->p.q.act_type = t;
	return OQ_OK;
}

static int set_act_symmetric(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)o;
	if (v && strcmp(v, "unsigned") != 0)
		return oq_err(d, OQ_EUSAGE, "--act-symmetric takes no value or =unsigned");
	a->p.q.act_sym = v ? OQ_ACT_SYM_UNSIGNED : OQ_ACT_SYM;
	return OQ_OK;
}

/* "A,B,C": replaces the list (empty names dropped; "," names none, and still sets the list). */
static int set_op_types(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	char *c = keep(a, v), *save = NULL;
	int rc;

	(void)o;
	if (!c || oq_grow(&a->list[OQ_ARGS_OP_TYPES], &a->cap[OQ_ARGS_OP_TYPES], 1, sizeof *a->list[0]))
		return oq_err(d, OQ_ENOMEM, "options: out of memory");
	a->n[OQ_ARGS_OP_TYPES] = 0;
	a->p.q.op_types = a->list[OQ_ARGS_OP_TYPES];
	a->p.q.n_op_types = 0;
	for (char *t = strtok_r(c, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if ((rc = push(a, OQ_ARGS_OP_TYPES, t, d)))
			return rc;
	return OQ_OK;
}

static int set_include(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)o;
	return append(a, OQ_ARGS_INCLUDE, v, d);
}

static int set_exclude(oq_pipeline_args *a, const oq_option *o, const char *v, oq_diag *d)
{
	(void)o;
	return append(a, OQ_ARGS_EXCLUDE, v, d);
}

/* ------------------------------------------------------------ the table */

#define F(field) offsetof(oq_pipeline_opts, field)
#define AN (1u << OQ_JOB_ANALYZE)
#define QC ((1u << OQ_JOB_QUANTIZE) | (1u << OQ_JOB_CALIBRATE) | AN)
#define ALL (QC | (1u << OQ_JOB_CONVERT))

/* In `onnxq quantize --help` order; the help texts are that page's lines. */
const oq_option oq_pipeline_options[] = {
	{"output", OQ_ARG_REQUIRED, ALL & ~AN, set_path, F(out_path),
	 NULL},
	{"json", OQ_ARG_REQUIRED, AN, set_path, F(json_path),
	 NULL},
	{"html", OQ_ARG_REQUIRED, AN, set_path, F(html_path),
	 NULL},
	{NULL, 0, 0, NULL, 0, "Data:\n"},
	{"calib", OQ_ARG_REQUIRED, QC, set_path, F(calib.source),
	 "  --calib DIR             calibration samples: DIR/NNN.npy, DIR/NNN/<input>.npy or\n"
	 "                          input_K.npy, or DIR/test_data_set_N/input_K.pb\n"
	 "  --calib random:N[:SEED] N random samples (only for testing: not representative)\n"},
	{"calib-limit", OQ_ARG_REQUIRED, QC, set_number, F(calib.limit),
	 "  --calib-limit N         use the first N samples\n"},
	{"calib-batch", OQ_ARG_REQUIRED, QC, set_number, F(calib.batch),
	 "  --calib-batch N         run N samples at once along axis 0 (needs a symbolic batch\n"
	 "                          dim; same ranges as one at a time; ema updates per batch)\n"},
	{"stats", OQ_ARG_REQUIRED, QC, set_stats, F(stats_in),
	 "  --stats FILE            ranges from merged `onnxq calibrate` statistics instead of\n"
	 "                          --calib (no bias correction: the model of --calib with the\n"
	 "                          same options and --no-bias-correction, byte for byte)\n"},
	{"shard", OQ_ARG_REQUIRED, QC, set_shard, 0,
	 NULL},
	{"ranges", OQ_ARG_REQUIRED, QC, set_ranges, 0,
	 NULL},
	{"threads", OQ_ARG_REQUIRED, QC, set_number, F(calib.threads),
	 "  --threads N             executor threads (default: all cores); output is identical\n"},
	{"method", OQ_ARG_REQUIRED, QC, set_method, 0,
	 "  --method M              activation ranges: mse (default with 8-bit activations:\n"
	 "                          least rounding + clipping error on the activation grid),\n"
	 "                          auto (default with 16-bit activations), minmax (exact),\n"
	 "                          ema (moving average of per-sample min/max; depends on the\n"
	 "                          sample order by definition), percentile or entropy\n"
	 "                          (TensorRT KL search); mse, percentile and entropy fill a\n"
	 "                          histogram on a power-of-two grid in the same single pass,\n"
	 "                          so their ranges do not depend on sample order or threads;\n"
	 "                          auto: per tensor, the method and headroom (x1..x2) with\n"
	 "                          the least error on held-out folds of the samples\n"},
	{"calib-folds", OQ_ARG_REQUIRED, QC, set_number, F(calib.folds),
	 "  --calib-folds K         K contiguous folds of the samples (default 4; fewer when\n"
	 "                          there are fewer than 2K samples): auto's held-out error,\n"
	 "                          the fold SQNR every quantize --calib DIR reports\n"},
	{"ema-constant", OQ_ARG_REQUIRED, QC, set_ema_constant, 0,
	 "  --ema-constant C        ema smoothing constant in (0, 1] (default 0.01)\n"},
	{"percentile", OQ_ARG_REQUIRED, QC, set_percentile, 0,
	 "  --percentile P          percentile kept in (0, 100] (default 99.999): (100-P)/2 %\n"
	 "                          cut on each side, or of |x| with --act-symmetric\n"},
	{"bias-correction", OQ_ARG_OPTIONAL, QC, set_bias_correction, 0,
	 "  --bias-correction[=empirical|analytic]  fold the mean output shift quantization\n"
	 "                          causes into Conv/Gemm/MatMul biases. empirical (the\n"
	 "                          default with --calib DIR): measures float vs quantized\n"
	 "                          outputs on the calibration samples and keeps a round only\n"
	 "                          if it improves their SQNR and each half's shift improves\n"
	 "                          the other half's; analytic folds E[(W_q - W) x] of every\n"
	 "                          layer\n"},
	{"no-bias-correction", OQ_ARG_NONE, QC, set_no_bias_correction, 0,
	 "  --no-bias-correction    none\n"},
	{"bias-correction-rounds", OQ_ARG_REQUIRED, QC, set_number, F(bias_rounds),
	 "  --bias-correction-rounds N  empirical: N forward layer groups before the last\n"
	 "                          layer's round (default 0)\n"},
	{"bias-correction-weights", OQ_ARG_REQUIRED, QC, set_choice, F(bias_weights),
	 "  --bias-correction-weights on|off  empirical, W8A8: first each layer's mean output\n"
	 "                          shift its quantized weights cause, activations float (kept\n"
	 "                          per layer where held-out samples confirm it), folded in and\n"
	 "                          kept when the quantized model's calibration SQNR gains\n"
	 "                          (default off)\n"},
	{NULL, 0, 0, NULL, 0, "Quantization:\n"},
	{"profile", OQ_ARG_REQUIRED, QC, set_choice, F(q.profile),
	 "  --profile ort|trt       Q/DQ placement: ONNX Runtime's (default) or TensorRT's\n"},
	{"prefer", OQ_ARG_REQUIRED, QC, set_choice, F(q.prefer),
	 "  --prefer P              ort profile: speed (every Conv/MatMul ONNX Runtime runs faster\n"
	 "                          in 8 bits gets its integer kernel), accuracy (activation\n"
	 "                          units fused with their Conv in float) or balanced (default:\n"
	 "                          speed, then units float where the held-out estimate shows\n"
	 "                          more than 1 dB lost against accuracy)\n"},
	{"weight-type", OQ_ARG_REQUIRED, QC, set_weight_type, 0,
	 "  --weight-type T         int8 (default), uint8, int16, int4, uint4, float8e4m3fn\n"},
	{"act-type", OQ_ARG_REQUIRED, QC, set_act_type, 0,
	 "  --act-type T            uint8 (default), int8, uint16, int16, float8e4m3fn\n"
	 "                          (FP8: symmetric, scale = amax/448, opset 19)\n"},
	{"granularity", OQ_ARG_REQUIRED, QC, set_choice, F(q.granularity),
	 "  --granularity G         channel (default), tensor or block\n"},
	{"block-size", OQ_ARG_REQUIRED, QC, set_number, F(q.block_size),
	 "  --block-size B          block size for --granularity block (default 32)\n"},
	{"sym-grid", OQ_ARG_REQUIRED, QC, set_choice, F(q.sym_grid),
	 "  --sym-grid narrow|full  symmetric weight grid: [-127,127] (default) or [-128,127]\n"},
	{"weight-asymmetric", OQ_ARG_NONE, QC, set_flag, F(q.weight_asym),
	 "  --weight-asymmetric     asymmetric weights\n"},
	{"act-symmetric", OQ_ARG_OPTIONAL, QC, set_act_symmetric, 0,
	 "  --act-symmetric         symmetric activations (uint8: [0,254] zero point 127)\n"
	 "  --act-symmetric=unsigned  symmetric, with zero point 0 on [0,255] (AIMET unsigned)\n"
	 "                          for tensors without negatives (post-ReLU); uint8/uint16\n"},
	{"weight-method", OQ_ARG_REQUIRED, QC, set_choice, F(q.weight_method),
	 "  --weight-method M       minmax (default) or mse: per channel/block/tensor, the\n"
	 "                          clipping range with the least squared error on its grid\n"},
	{"reduce-range", OQ_ARG_NONE, QC, set_flag, F(q.reduce_range),
	 "  --reduce-range          7-bit weights (older x86 integer kernels)\n"},
	{"cle", OQ_ARG_NONE, QC, set_flag, F(q.cle),
	 "  --cle                   cross-layer equalization: rescale Conv -> [Relu] -> Conv\n"
	 "                          channel pairs to equal weight ranges, and absorb the high\n"
	 "                          biases of folded BatchNormalizations into the next Conv\n"
	 "                          (meant for --granularity tensor)\n"},
	{"weight-rounding", OQ_ARG_REQUIRED, QC, set_choice, F(q.weight_rounding),
	 "  --weight-rounding R     nearest (default), adaround (learned up/down per weight) or\n"
	 "                          seq-mse (searched scale per channel/block): least layer output\n"
	 "                          error on the --calib samples, kept per layer where held-out\n"
	 "                          samples confirm it (also with --weight-only, where\n"
	 "                          --bias-correction then folds each layer's mean error into its bias)\n"},
	{"awq", OQ_ARG_NONE, QC, set_flag, F(q.awq),
	 "  --awq                   with --weight-only: scale each layer's input channels by\n"
	 "                          mean |x|^alpha on the --calib samples (alpha searched per\n"
	 "                          layer), divided back exactly where the input is written;\n"
	 "                          before --weight-rounding; kept per layer where held-out\n"
	 "                          samples confirm it, and where the model's calibration SQNR\n"
	 "                          gains over the model without it (AWQ)\n"},
	{"keep-activations", OQ_ARG_NONE, QC, set_flag, F(q.keep_activations),
	 "  --keep-activations      keep Relu/Clip after Conv/Gemm instead of folding them into Q\n"},
	{"weight-only", OQ_ARG_NONE, QC, set_flag, F(q.weight_only),
	 "  --weight-only           quantize weights only (no calibration): DQ -> MatMul/Gemm\n"},
	{"op-types", OQ_ARG_REQUIRED, QC, set_op_types, 0,
	 "  --op-types A,B          op types whose weights --weight-only quantizes (default MatMul,Gemm)\n"},
	{"include", OQ_ARG_REQUIRED, QC, set_include, 0,
	 "  --include NAME|OP       quantize only these nodes / op types / tensors (repeatable)\n"},
	{"exclude", OQ_ARG_REQUIRED, QC, set_exclude, 0,
	 "  --exclude NAME|OP       leave these nodes / op types / tensors float (repeatable)\n"},
	{"overrides", OQ_ARG_REQUIRED, QC, set_path, F(overrides_path),
	 "  --overrides FILE.json   per-tensor / per-node settings (see README)\n"},
	{"target-sqnr", OQ_ARG_REQUIRED, 1u << OQ_JOB_QUANTIZE, set_target_sqnr, 0,
	 "  --target-sqnr DB        raise the costliest points (8-bit -> 16-bit -> float) until\n"
	 "                          every output's held-out fold SQNR reaches DB (README)\n"},
	{"report", OQ_ARG_REQUIRED, 1u << OQ_JOB_QUANTIZE, set_path, F(report_path),
	 "  --report FILE.json      --target-sqnr: what was raised and the SQNR reached\n"},
	{"export-encodings", OQ_ARG_REQUIRED, QC, set_path, F(export_encodings),
	 "  --export-encodings F    write AIMET-style encodings (scales, offsets) of the result to F\n"},
	{"import-encodings", OQ_ARG_REQUIRED, QC, set_path, F(import_encodings),
	 "  --import-encodings F    use F's AIMET-style encodings instead of calibrating those tensors\n"},
	{"high-precision", OQ_ARG_REQUIRED, ALL, set_choice, F(high_precision),
	 "  --high-precision T      type of the float tensors, scales and DequantizeLinear\n"
	 "                          outputs: float32, float16 or bfloat16 (default: the\n"
	 "                          model's own; a 16-bit model is quantized in float32 and\n"
	 "                          written back, its Q/DQ at opset >= 19)\n"},
	{"opset", OQ_ARG_REQUIRED, ALL, set_number, F(q.opset),
	 "  --opset N               target opset (default: the lowest the options need, >= 13)\n"},
	{NULL, 0, 0, NULL, 0, "Passes:\n"},
	{"passes", OQ_ARG_REQUIRED, ALL, set_path, F(run.list),
	 "  --passes LIST           run only these passes (cleanup,upgrade-opset,fold-bn,cle,fuse,\n"
	 "                          quantize)\n"},
	{NULL, 0, 0, NULL, 0, "  --no-PASS               leave one pass out (e.g. --no-fold-bn)\n"},
	{"dump-after", OQ_ARG_REQUIRED, ALL, set_path, F(run.dump_after),
	 "  --dump-after PASS       print the graph after PASS to stderr\n"},
	{"verify", OQ_ARG_NONE, ALL, set_flag, F(run.verify),
	 "  --verify                check the model after every pass\n"},
	{NULL, 0, 0, NULL, 0, "Output:\n"
			       "  -o OUT                  as for convert: a file, a symlink to one, or - for stdout;\n"
			       "                          never a device or FIFO, nor an input of the command\n"},
	{"external-data", OQ_ARG_NONE, ALL, set_flag, F(save.external_data),
	 "  --external-data, --external-threshold BYTES   as for convert\n"},
	{"external-threshold", OQ_ARG_REQUIRED, ALL, set_number, F(save.external_threshold),
	 NULL},
	{"quiet", OQ_ARG_NONE, ALL, set_flag, F(quiet),
	 "  --quiet                 no summary\n"},
	{"verbose", OQ_ARG_NONE, ALL, set_flag, F(verbose),
	 "  --verbose               what each pass did and per-stage timings\n"},
	{NULL, 0, 0, NULL, 0, "Limits:\n"},
	{"max-loop-iterations", OQ_ARG_REQUIRED, QC, set_number, F(calib.max_loop_iterations),
	 "  --max-loop-iterations N iterations one Loop node may run while calibrating\n"
	 "                          (default 10000000; past it: exit 2 naming the node)\n"},

};
const size_t oq_pipeline_n_options = sizeof oq_pipeline_options / sizeof oq_pipeline_options[0];

const oq_option *oq_pipeline_option_find(const char *name)
{
	for (size_t i = 0; i < oq_pipeline_n_options; i++)
		if (oq_pipeline_options[i].name && strcmp(oq_pipeline_options[i].name, name) == 0)
			return &oq_pipeline_options[i];
	return NULL;
}

void oq_pipeline_options_help(FILE *f)
{
	for (size_t i = 0; i < oq_pipeline_n_options; i++)
		if (oq_pipeline_options[i].help)
			fputs(oq_pipeline_options[i].help, f);
}

void oq_pipeline_args_init(oq_pipeline_args *a, int job)
{
	memset(a, 0, sizeof *a);
	oq_pipeline_opts_init(&a->p, job);
}

void oq_pipeline_args_free(oq_pipeline_args *a)
{
	for (size_t i = 0; i < a->n_copies; i++)
		free(a->copies[i]);
	free(a->copies);
	for (int k = 0; k < OQ_ARGS_LISTS; k++)
		free(a->list[k]);
	memset(a, 0, sizeof *a);
}

int oq_pipeline_args_set(oq_pipeline_args *a, const char *name, const char *value, oq_diag *d)
{
	const oq_option *o = oq_pipeline_option_find(name);

	if (!o) {
		if (strncmp(name, "no-", 3) != 0 || !oq_pass_find(name + 3))
			return oq_err(d, OQ_EUSAGE, strncmp(name, "no-", 3) == 0
							    ? "unknown --no-PASS option (passes: cleanup, upgrade-opset, "
							      "fold-bn, cle, fuse, quantize)"
							    : "unknown option --%s", name);
		return append(a, OQ_ARGS_DISABLED, name + 3, d);
	}
	if (!(o->jobs & (1u << a->p.job)))
		return oq_err(d, OQ_EUSAGE, "--%s: option only valid for quantize", name);
	if (o->arg == OQ_ARG_REQUIRED && !value)
		return oq_err(d, OQ_EUSAGE, "--%s needs a value", name);
	if (o->arg == OQ_ARG_NONE && value)
		return oq_err(d, OQ_EUSAGE, "--%s takes no value", name);
	return o->set(a, o, value, d);
}

/* ------------------------------------------------------------ defaults, rules, resolution */

void oq_pipeline_opts_init(oq_pipeline_opts *o, int job)
{
	memset(o, 0, sizeof *o);
	o->job = job;
	oq_opts_init(&o->q);
	o->calib.method = OQ_PIPELINE_METHOD_DEFAULT;
	o->bias_correction = OQ_BC_DEFAULT;
	o->bias_rounds = -1;
	o->log = stderr;
	if (job == OQ_JOB_CONVERT)
		o->run.list = ""; /* no rewrites unless run.list names them */
}

static const char *job_name(int job)
{
	return job == OQ_JOB_CALIBRATE ? "calibrate" : job == OQ_JOB_CONVERT ? "convert"
	       : job == OQ_JOB_ANALYZE ? "analyze" : "quantize";
}

/* Does the job run the quantize pass? */
static int quantizes(const oq_pipeline_opts *o)
{
	return (o->job == OQ_JOB_QUANTIZE || o->job == OQ_JOB_ANALYZE) && oq_pass_selected(&o->run, "quantize");
}

/*
 * The method o's calibration uses: --method, else the default measured on the PaddleOCR and
 * torchvision models (docs/accuracy.md "Calibration methods", "--method auto"): auto with 16-bit
 * activations, where it is best or within 0.5 dB of the best everywhere; mse with 8-bit ones,
 * where auto loses vit_b_16.
 */
static int method_of(const oq_pipeline_opts *o)
{
	if (o->calib.method != OQ_PIPELINE_METHOD_DEFAULT)
		return o->calib.method;
	return o->q.act_type == OQ_DT_INT16 || o->q.act_type == OQ_DT_UINT16 ? OQ_CALIB_AUTO
									     : OQ_CALIB_MSE;
}

/* The first rule o breaks, or NULL. */
static const char *broken_rule(const oq_pipeline_opts *o)
{
	const oq_opts *q = &o->q;
	const oq_calib_opts *c = &o->calib;
	int bc_given = o->bias_correction == OQ_BC_ANALYTIC || o->bias_correction == OQ_BC_EMPIRICAL;

	if (!o->in_path)
		return "missing MODEL";
	if (o->job == OQ_JOB_ANALYZE) {
		if (!c->source || !strncmp(c->source, "random:", 7) || o->stats_in)
			return "missing --calib DIR (the samples to measure on; not random data, not --stats)";
		if (q->weight_only)
			return "--weight-only has no activation points to analyze";
		if (c->method == OQ_CALIB_EMA)
			return "--method ema keeps no folds to measure on";
	} else if (!o->out_path)
		return o->job == OQ_JOB_CALIBRATE ? "missing -o STATS" : "missing -o OUT";
	if (o->job == OQ_JOB_CALIBRATE) {
		if (!c->source)
			return "missing --calib DIR (the samples to calibrate on)";
		if (q->weight_only)
			return "--weight-only needs no calibration";
	}
	if (o->stats_in && c->source)
		return "--stats and --calib exclude each other (the statistics replace the samples)";
	if (o->stats_in && q->weight_only)
		return "--weight-only needs no --stats (weights are not calibrated)";
	if (q->block_size && q->granularity != OQ_GRAN_BLOCK)
		return "--block-size needs --granularity block";
	if (q->awq && !q->weight_only)
		return "--awq is for --weight-only: scaling input channels would change the per-tensor "
		       "activation ranges W8A8 calibrates";
	if (q->weight_only && c->source && !q->weight_rounding && !bc_given && !q->awq)
		return "--weight-only needs no --calib unless --weight-rounding adaround|seq-mse, "
		       "--bias-correction or --awq learns on it (weights are not calibrated)";
	if (q->weight_only && (q->weight_rounding || bc_given || q->awq) && !c->source)
		return "--weight-rounding / --bias-correction / --awq with --weight-only learn on calibration "
		       "samples: give --calib DIR";
	if (c->ema_constant > 0 && c->method != OQ_CALIB_EMA)
		return "--ema-constant applies to --method ema";
	if (c->percentile > 0 && c->method != OQ_CALIB_PERCENTILE)
		return "--percentile applies to --method percentile";
	if (o->target_sqnr > 0 && (!c->source || !strncmp(c->source, "random:", 7) || q->weight_only))
		return "--target-sqnr measures on the calibration samples: give --calib DIR (not random data, "
		       "not --stats, not --weight-only)";
	if (o->target_sqnr > 0 && method_of(o) == OQ_CALIB_EMA)
		return "--target-sqnr: --method ema keeps no folds to measure on";
	if (o->target_sqnr > 0 && o->bias_correction == OQ_BC_ANALYTIC)
		return "--target-sqnr works with empirical or no bias correction, not analytic";
	if (o->report_path && !(o->target_sqnr > 0))
		return "--report applies to --target-sqnr";
	if (c->folds && method_of(o) == OQ_CALIB_EMA)
		return "--calib-folds: --method ema keeps no folds";
	if (c->method != OQ_PIPELINE_METHOD_DEFAULT && q->weight_only)
		return "--method needs activation calibration; drop --weight-only";
	if (bc_given && q->weight_only && o->bias_correction != OQ_BC_EMPIRICAL)
		return "--weight-only corrects biases empirically only (the layers' measured mean shift): drop "
		       "=analytic";
	if (bc_given && (o->stats_in || o->job == OQ_JOB_CALIBRATE))
		return "--bias-correction needs the samples (--calib DIR): statistics files carry no "
		       "bias-correction sums";
	if (q->weight_rounding && (o->stats_in || o->job == OQ_JOB_CALIBRATE))
		return "--weight-rounding learns on the samples (--calib DIR): statistics files carry no layer "
		       "inputs";
	if ((q->weight_rounding || q->awq || (bc_given && q->weight_only)) && c->source &&
	    strncmp(c->source, "random:", 7) == 0)
		return "--weight-rounding / --awq / weight-only --bias-correction learn on calibration samples: "
		       "give --calib DIR (a folder of samples, not random:N)";
	if (q->op_types && !q->weight_only)
		return "--op-types applies to --weight-only";
	/* TensorRT: symmetric int8, or FP8 (E4M3) activations and weights together */
	if (q->profile == OQ_PROFILE_TRT &&
	    ((q->act_type == OQ_DT_FLOAT8E4M3FN) != (q->weight_type == OQ_DT_FLOAT8E4M3FN)))
		return "--profile trt: FP8 is float8e4m3fn activations and weights together; give both "
		       "--act-type and --weight-type float8e4m3fn, or neither";
	if (q->profile == OQ_PROFILE_TRT && q->act_type != OQ_DT_FLOAT8E4M3FN &&
	    (q->act_type != OQ_DT_UINT8 || q->act_sym))
		return "--profile trt fixes activations to symmetric int8 (or float8e4m3fn); drop "
		       "--act-type/--act-symmetric";
	if (q->profile == OQ_PROFILE_TRT && q->weight_type != OQ_DT_INT8 && q->weight_type != OQ_DT_FLOAT8E4M3FN)
		return "--profile trt fixes weights to symmetric int8 (or float8e4m3fn); drop --weight-type";
	if (q->act_sym == OQ_ACT_SYM_UNSIGNED && q->act_type != OQ_DT_UINT8 && q->act_type != OQ_DT_UINT16)
		return "--act-symmetric=unsigned needs --act-type uint8 or uint16 (zero point 0 at the bottom "
		       "of an unsigned grid)";
	if (q->weight_type == OQ_DT_FLOAT8E4M3FN) {
		if (q->weight_asym)
			return "float8e4m3fn weights are symmetric (scale = amax/448); drop --weight-asymmetric";
		if (q->reduce_range)
			return "--reduce-range is for 8-bit integer weights; drop it with --weight-type "
			       "float8e4m3fn";
		if (q->granularity == OQ_GRAN_BLOCK)
			return "float8e4m3fn weights are per tensor or per channel; use --granularity channel or "
			       "tensor";
	}
	if (quantizes(o) && !q->weight_only && !c->source && !o->stats_in)
		return "activation quantization needs calibration data: give --calib DIR (NNN.npy samples or "
		       "NNN/<input>.npy folders), --calib random:N to calibrate on random data (not "
		       "representative), or --weight-only";
	return NULL;
}

int oq_pipeline_opts_check(const oq_pipeline_opts *o, oq_diag *d)
{
	const char *why = broken_rule(o);
	return why ? oq_err(d, OQ_EUSAGE, "%s: %s", job_name(o->job), why) : OQ_OK;
}

void oq_pipeline_opts_resolve(const oq_pipeline_opts *o, oq_pipeline_opts *out)
{
	*out = *o;
	out->calib.method = method_of(o);
	/* --target-sqnr's 16-bit steps take auto's ranges (it always has samples and folds); a 16-bit
	 * override keeps the method, so --stats from shards gives the one-machine model */
	out->calib.wide_auto = o->calib.method == OQ_PIPELINE_METHOD_DEFAULT && o->target_sqnr > 0;
	/* measured on the corpus over calibration splits (README "Bias correction"); nothing to
	 * correct without calibration */
	if (out->bias_correction == OQ_BC_DEFAULT)
		out->bias_correction = out->job == OQ_JOB_QUANTIZE && !out->q.weight_only ? OQ_BC_EMPIRICAL : OQ_BC_OFF;
	if (out->job == OQ_JOB_ANALYZE)
		out->bias_correction = OQ_BC_OFF; /* each point is measured as the quantize pass sets it */
	if (out->bias_weights == OQ_BCW_DEFAULT)
		out->bias_weights = OQ_BCW_OFF;
	if (out->q.act_type == OQ_DT_FLOAT8E4M3FN)
		out->q.act_sym = OQ_ACT_SYM; /* FP8 has one grid: symmetric, zero point 0, amax / 448 */
	if (out->q.profile == OQ_PROFILE_TRT && out->q.act_type != OQ_DT_FLOAT8E4M3FN) {
		out->q.act_type = OQ_DT_INT8;
		out->q.act_sym = OQ_ACT_SYM;
	}
}
