/*
 * main.c - the onnxq command line: parse arguments, call the library, map
 * the status to an exit code. No logic lives here.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/report/check.h"
#include "src/pipeline/compare.h"
#include "src/report/inspect.h"
#include "src/io/onnx_io.h"
#include "src/oq.h"
#include "src/pipeline/pipeline.h"
#include "src/quant/qparams.h"
#include "calib/samples.h"

static const char usage_main[] =
	"usage: onnxq COMMAND [OPTIONS]\n"
	"\n"
	"Commands:\n"
	"  inspect MODEL [--json]              summarise a model (I/O, ops, parameters, Q/DQ)\n"
	"  check MODEL [--json]                validate a model's structure and Q/DQ nodes\n"
	"  quantize MODEL -o OUT (--calib DIR | --weight-only) [OPTIONS]\n"
	"                                      quantize a float model (also `onnxq MODEL -o OUT ...`)\n"
	"  calibrate MODEL --calib DIR -o STATS [--shard I/N] [OPTIONS]\n"
	"                                      write mergeable calibration statistics (one shard)\n"
	"  merge-stats A B ... -o OUT          merge statistics files of the shards\n"
	"  compare REF TEST --data DIR [--json] [--min-sqnr DB] [--per-tensor]\n"
	"                                      run two models and report SQNR per output\n"
	"  convert MODEL -o OUT [--passes LIST] [--external-data] [--external-threshold BYTES]\n"
	"                                      load, optionally rewrite, and save a model\n"
	"  run MODEL (--data DIR | --input NAME=FILE ...) [--output-dir DIR] [--threads N] [--json]\n"
	"                                      run a model on sample inputs with the CPU executor\n"
	"\n"
	"Options:\n"
	"  -h, --help      show help (also `onnxq COMMAND --help`)\n"
	"  -V, --version   show the version\n"
	"\n"
	"Exit codes: 0 ok, 1 usage, 2 invalid model or data, 3 unsupported construct,\n"
	"            4 I/O error, 5 out of memory, 6 check found problems.\n";

static const char usage_inspect[] =
	"usage: onnxq inspect MODEL [--json]\n"
	"\n"
	"Prints producer, IR version, opsets, inputs and outputs (dtype, shape with\n"
	"symbolic dims by name), op census, parameters and bytes by dtype, and the\n"
	"QuantizeLinear/DequantizeLinear nodes with their granularity.\n"
	"\n"
	"  --json      one JSON object on stdout\n";

static const char usage_check[] =
	"usage: onnxq check MODEL [--json]\n"
	"\n"
	"Validates structure (topological order, single definitions, dangling inputs,\n"
	"graph outputs, opset imports, attribute types, initializer sizes) and Q/DQ\n"
	"legality. Prints one line per problem; exit 0 when valid, 6 when not, 2 when\n"
	"the file cannot be loaded at all.\n"
	"\n"
	"  --json      {\"valid\": bool, \"problems\": [{where, rule, message}]} on stdout\n";

static const char usage_convert[] =
	"usage: onnxq convert MODEL -o OUT [--passes LIST] [--no-PASS] [--dump-after PASS]\n"
	"                     [--opset N] [--external-data] [--external-threshold BYTES]\n"
	"\n"
	"Loads MODEL and writes it to OUT, running the rewrite passes named by\n"
	"--passes first (none without it). OUT is written to a temporary file and\n"
	"renamed, so it is untouched on failure. Models over 2 GB are written with\n"
	"external data automatically.\n"
	"\n"
	"  -o, --output OUT            output model path (required)\n"
	"  --passes LIST               comma-separated rewrites: cleanup, upgrade-opset,\n"
	"                              fold-bn, fuse (run in that order)\n"
	"  --no-PASS                   leave one pass out (e.g. --no-fuse)\n"
	"  --dump-after PASS           print the graph after PASS to stderr\n"
	"  --opset N                   target opset for upgrade-opset\n"
	"  --verify                    check the model after every pass\n"
	"  --external-data             store tensors of at least BYTES in OUT.data\n"
	"  --external-threshold BYTES  size threshold for --external-data (default 1024)\n";

static const char usage_quantize[] =
	"usage: onnxq quantize MODEL -o OUT (--calib DIR | --weight-only) [OPTIONS]\n"
	"       onnxq MODEL -o OUT ...          (the same)\n"
	"\n"
	"Rewrites (cleanup, upgrade-opset, fold-bn, fuse), calibrates activation\n"
	"ranges (--method, default mse) by running the samples through onnxq's\n"
	"executor, inserts QuantizeLinear/DequantizeLinear and stores weights as\n"
	"integers. OUT is untouched on failure.\n"
	"\n"
	"Data:\n"
	"  --calib DIR             calibration samples: DIR/NNN.npy, DIR/NNN/<input>.npy or\n"
	"                          input_K.npy, or DIR/test_data_set_N/input_K.pb\n"
	"  --calib random:N[:SEED] N random samples (only for testing: not representative)\n"
	"  --calib-limit N         use the first N samples\n"
	"  --calib-batch N         run N samples at once along axis 0 (needs a symbolic batch\n"
	"                          dim; same ranges as one at a time; ema updates per batch)\n"
	"  --stats FILE            ranges from merged `onnxq calibrate` statistics instead of\n"
	"                          --calib (no bias correction: the model of --calib with the\n"
	"                          same options and --no-bias-correction, byte for byte)\n"
	"  --threads N             executor threads (default: all cores); output is identical\n"
	"  --method M              activation ranges: mse (default: least rounding + clipping\n"
	"                          error on the activation grid), minmax (exact min/max),\n"
	"                          ema (moving average of per-sample min/max; depends on the\n"
	"                          sample order by definition), percentile or entropy\n"
	"                          (TensorRT KL search); mse, percentile and entropy fill a\n"
	"                          histogram on a power-of-two grid in the same single pass,\n"
	"                          so their ranges do not depend on sample order or threads\n"
	"  --ema-constant C        ema smoothing constant in (0, 1] (default 0.01)\n"
	"  --percentile P          percentile kept in (0, 100] (default 99.999): (100-P)/2 %\n"
	"                          cut on each side, or of |x| with --act-symmetric\n"
	"  --bias-correction[=empirical|analytic]  fold the mean output shift quantization\n"
	"                          causes into Conv/Gemm/MatMul biases. empirical (the\n"
	"                          default with --calib DIR): measures float vs quantized\n"
	"                          outputs on the calibration samples and keeps a round only\n"
	"                          if it improves their SQNR and each half's shift improves\n"
	"                          the other half's; analytic folds E[(W_q - W) x] of every\n"
	"                          layer\n"
	"  --no-bias-correction    none\n"
	"  --bias-correction-rounds N  empirical: N forward layer groups before the last\n"
	"                          layer's round (default 0)\n"
	"";

/* The rest of `quantize --help` (one literal would pass the 4095 characters C99 promises). */
static const char usage_quantize_more[] =
	"Quantization:\n"
	"  --profile ort|trt       Q/DQ placement: ONNX Runtime's (default) or TensorRT's\n"
	"  --weight-type T         int8 (default), uint8, int16, int4, uint4, float8e4m3fn\n"
	"  --act-type T            uint8 (default), int8, uint16, int16, float8e4m3fn\n"
	"                          (FP8: symmetric, scale = amax/448, opset 19)\n"
	"  --granularity G         channel (default), tensor or block\n"
	"  --block-size B          block size for --granularity block (default 32)\n"
	"  --sym-grid narrow|full  symmetric weight grid: [-127,127] (default) or [-128,127]\n"
	"  --weight-asymmetric     asymmetric weights\n"
	"  --act-symmetric         symmetric activations (uint8: [0,254] zero point 127)\n"
	"  --act-symmetric=unsigned  symmetric, with zero point 0 on [0,255] (AIMET unsigned)\n"
	"                          for tensors without negatives (post-ReLU); uint8/uint16\n"
	"  --weight-method M       minmax (default) or mse: per channel/block/tensor, the\n"
	"                          clipping range with the least squared error on its grid\n"
	"  --reduce-range          7-bit weights (older x86 integer kernels)\n"
	"  --keep-activations      keep Relu/Clip after Conv/Gemm instead of folding them into Q\n"
	"  --weight-only           quantize weights only (no calibration): DQ -> MatMul/Gemm\n"
	"  --op-types A,B          op types whose weights --weight-only quantizes (default MatMul,Gemm)\n"
	"  --include NAME|OP       quantize only these nodes / op types / tensors (repeatable)\n"
	"  --exclude NAME|OP       leave these nodes / op types / tensors float (repeatable)\n"
	"  --overrides FILE.json   per-tensor / per-node settings (see README)\n"
	"  --export-encodings F    write AIMET-style encodings (scales, offsets) of the result to F\n"
	"  --import-encodings F    use F's AIMET-style encodings instead of calibrating those tensors\n"
	"  --opset N               target opset (default: the lowest the options need, >= 13)\n"
	"Passes:\n"
	"  --passes LIST           run only these passes (cleanup,upgrade-opset,fold-bn,fuse,quantize)\n"
	"  --no-PASS               leave one pass out (e.g. --no-fold-bn)\n"
	"  --dump-after PASS       print the graph after PASS to stderr\n"
	"  --verify                check the model after every pass\n"
	"Output:\n"
	"  --external-data, --external-threshold BYTES   as for convert\n"
	"  --quiet                 no summary\n"
	"  --verbose               what each pass did and per-stage timings\n";

static const char usage_calibrate[] =
	"usage: onnxq calibrate MODEL --calib DIR -o STATS [--shard I/N] [quantize options]\n"
	"       onnxq merge-stats A.bin B.bin ... -o OUT.bin\n"
	"\n"
	"Calibrates one shard of the samples on one machine and writes mergeable\n"
	"statistics; `onnxq quantize MODEL --stats MERGED -o OUT [same options]` then\n"
	"gives the model a one-machine `quantize --calib DIR` gives, byte for byte.\n"
	"Takes every quantize option (those that do not concern calibration are\n"
	"ignored), so one option list serves both commands.\n"
	"\n"
	"  -o, --output STATS   statistics file to write\n"
	"  --shard I/N          the I-th (0-based) of N contiguous blocks of the samples\n"
	"                       (lexical order, after --calib-limit); default 0/1\n"
	"\n"
	"One round for every method: calibrate each shard, merge-stats, quantize --stats.\n"
	"minmax writes exact ranges; percentile/entropy/mse (mse is the default) also\n"
	"histograms, which serve any of the three at quantize time. ema cannot be\n"
	"sharded (its average depends on sample order).\n";

static const char usage_compare[] =
	"usage: onnxq compare REF TEST --data DIR [--json] [--min-sqnr DB] [--per-tensor]\n"
	"                     [--top N] [--threads N]\n"
	"\n"
	"Runs both models on every sample of DIR (the `run` layouts) and reports per\n"
	"output the SQNR in dB (10*log10(sum ref^2 / sum (ref-test)^2)), minimum and\n"
	"mean over samples, the cosine similarity and the largest absolute error.\n"
	"\n"
	"  --data DIR      samples (required)\n"
	"  --json          one JSON object on stdout\n"
	"  --min-sqnr DB   exit 6 when an output's minimum SQNR is below DB (CI gate)\n"
	"  --per-tensor    also compare intermediate tensors matched by name; list the worst\n"
	"  --top N         how many tensors --per-tensor lists (default 10)\n"
	"  --threads N     executor threads (default: all cores)\n";

static const char usage_run[] =
	"usage: onnxq run MODEL (--data DIR | --input NAME=FILE ...)\n"
	"                 [--output-dir DIR] [--threads N] [--json]\n"
	"\n"
	"Runs MODEL on sample inputs with onnxq's CPU executor. Every sample file is\n"
	"checked against the model's inputs (element type, rank, fixed dims) before\n"
	"the first sample runs.\n"
	"\n"
	"  --data DIR          samples: DIR/NNN.npy (single-input models), or DIR/NNN/\n"
	"                      holding <input name>.npy ('/' -> '_') or input_K.npy per\n"
	"                      input, or the ONNX test layout DIR/test_data_set_N/input_K.pb;\n"
	"                      run in lexical order\n"
	"  --input NAME=FILE   one input of a single sample (repeat for each input); FILE is\n"
	"                      a .npy, a TensorProto .pb, or random:SEED (floats in [0, 1),\n"
	"                      integers in [0, 10); symbolic dims become 1)\n"
	"  --output-dir DIR    write each output to DIR/NNN/<output name>.npy (DIR/<output\n"
	"                      name>.npy with --input); without it, print a summary\n"
	"  --threads N         worker threads (default: all cores); results do not depend on N\n"
	"  --json              report (dtype, shape, min/max/mean per output) as JSON\n";

static int fail(const oq_diag *d, int status)
{
	fprintf(stderr, "onnxq: %s\n", d->count ? d->msg : oq_status_name(status));
	return oq_exit_code(status);
}

static int usage_error(const char *cmd, const char *msg)
{
	fprintf(stderr, "onnxq: %s%s%s\n(see `onnxq %s%s--help`)\n", cmd ? cmd : "", cmd ? ": " : "", msg,
		cmd ? cmd : "", cmd ? " " : "");
	return OQ_EXIT_USAGE;
}

/* Parses the options shared by inspect and check: MODEL [--json]. */
static int parse_model_json(int argc, char **argv, const char *cmd, const char *usage,
			    const char **model, int *json)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	*json = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'j') {
			*json = 1;
		} else if (c == 'h') {
			fputs(usage, stdout);
			return -1;
		} else {
			return usage_error(cmd, "unknown option");
		}
	}
	if (optind != argc - 1)
		return usage_error(cmd, optind >= argc ? "missing MODEL" : "too many arguments");
	*model = argv[optind];
	return 0;
}

static int cmd_inspect(int argc, char **argv)
{
	const char *path;
	int json, rc;
	oq_diag d;
	oq_model *m;

	if ((rc = parse_model_json(argc, argv, "inspect", usage_inspect, &path, &json)))
		return rc < 0 ? 0 : rc;
	oq_diag_init(&d);
	if ((rc = oq_model_load(path, &m, &d)))
		return fail(&d, rc);
	rc = oq_inspect_print(m, stdout, json);
	oq_model_free(m);
	if (rc)
		return fail(&d, rc);
	return fflush(stdout) == 0 ? 0 : OQ_EXIT_IO;
}

static int cmd_check(int argc, char **argv)
{
	const char *path;
	int json, rc;
	oq_diag d;
	oq_model *m;
	oq_problems p = {0};

	if ((rc = parse_model_json(argc, argv, "check", usage_check, &path, &json)))
		return rc < 0 ? 0 : rc;
	oq_diag_init(&d);
	rc = oq_model_load(path, &m, &d);
	if (rc) {
		if (json) {
			printf("{\"valid\": false, \"loaded\": false, \"problems\": [{\"where\": \"file\", "
			       "\"rule\": \"load\", \"message\": ");
			oq_json_str(stdout, d.msg);
			printf("}]}\n");
		}
		return fail(&d, rc);
	}
	rc = oq_check_model(m, &p);
	oq_model_free(m);
	if (rc) {
		oq_problems_free(&p);
		return fail(&d, rc);
	}
	if (json) {
		printf("{\"valid\": %s, \"loaded\": true, \"problems\": [", p.n ? "false" : "true");
		for (size_t i = 0; i < p.n; i++) {
			printf("%s{\"where\": ", i ? ", " : "");
			oq_json_str(stdout, p.v[i].where);
			printf(", \"rule\": ");
			oq_json_str(stdout, p.v[i].rule);
			printf(", \"message\": ");
			oq_json_str(stdout, p.v[i].msg);
			printf("}");
		}
		printf("]}\n");
	} else {
		for (size_t i = 0; i < p.n; i++)
			printf("%s: %s: %s [%s]\n", path, p.v[i].where, p.v[i].msg, p.v[i].rule);
		if (p.n)
			fprintf(stderr, "onnxq: check: %s: %zu problem%s\n", path, p.n, p.n == 1 ? "" : "s");
		else
			printf("%s: valid\n", path);
	}
	rc = p.n ? OQ_EXIT_CHECK : OQ_EXIT_OK;
	oq_problems_free(&p);
	return rc;
}

/* A positive decimal number in [lo, hi]; -1 when it is not one. */
static long long parse_num(const char *s, long long lo, long long hi)
{
	char *end;
	long long v;
	if (*s < '0' || *s > '9')
		return -1;
	v = strtoll(s, &end, 10);
	return (*end || v < lo || v > hi) ? -1 : v;
}

/* Quantized element type by name; 0 when unknown. */
static int parse_qtype(const char *s)
{
	static const struct { const char *name; int dt; } t[] = {
		{"int8", OQ_DT_INT8}, {"uint8", OQ_DT_UINT8}, {"int16", OQ_DT_INT16},
		{"uint16", OQ_DT_UINT16}, {"int4", OQ_DT_INT4}, {"uint4", OQ_DT_UINT4},
		{"float8e4m3fn", OQ_DT_FLOAT8E4M3FN},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(s, t[i].name))
			return t[i].dt;
	return 0;
}

/* Splits "A,B,C" into a NULL-free list (pointers into a copy kept in *buf). */
static int split_list(const char *s, char **buf, const char ***out, size_t *n)
{
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	if (!(*buf = strdup(s)) || !(*out = calloc(cap, sizeof **out)))
		return OQ_ENOMEM;
	*n = 0;
	for (char *tok = strtok(*buf, ","); tok; tok = strtok(NULL, ","))
		(*out)[(*n)++] = tok;
	return OQ_OK;
}

/*
 * Options of quantize and convert. --no-PASS options are taken out of argv
 * first (their names come from the pass table).
 */
typedef struct qargs {
	oq_pipeline_opts p;
	const char **lists[3];   /* include, exclude, no-PASS */
	char *op_types_buf;
	const char **op_types;
} qargs;

static void qargs_free(qargs *a)
{
	for (int i = 0; i < 3; i++)
		free(a->lists[i]);
	free(a->op_types_buf);
	free(a->op_types);
}

enum {
	O_CALIB = 256, O_CALIB_LIMIT, O_THREADS, O_PROFILE, O_WTYPE, O_ATYPE, O_GRAN, O_BLOCK, O_GRID,
	O_WASYM, O_ASYM, O_REDUCE, O_KEEP, O_WONLY, O_OPTYPES, O_INCLUDE, O_EXCLUDE, O_OVERRIDES, O_EXPENC, O_IMPENC, O_OPSET,
	O_PASSES, O_DUMP, O_VERIFY, O_EXT, O_EXT_T, O_QUIET, O_VERBOSE, O_METHOD, O_EMA_C, O_PCT,
	O_STATS, O_SHARD, O_RANGES, O_CALIB_BATCH,
	O_BIASC,
	O_WMETHOD,
	O_BIASC_R,
};

/* Command kinds parse_qargs serves. */
enum { CMD_CONVERT = 0, CMD_QUANTIZE = 1, CMD_CALIBRATE = 2 };

/* "I/N" with 0 <= I < N <= OQ_STATS_MAX_SHARDS. */
static int parse_shard(const char *s, uint32_t *i, uint32_t *n)
{
	const char *slash = strchr(s, '/');
	char buf[32];
	long long a, b;

	if (!slash || (size_t)(slash - s) >= sizeof buf)
		return -1;
	memcpy(buf, s, (size_t)(slash - s));
	buf[slash - s] = 0;
	a = parse_num(buf, 0, OQ_STATS_MAX_SHARDS - 1);
	b = parse_num(slash + 1, 1, OQ_STATS_MAX_SHARDS);
	if (a < 0 || b < 0 || a >= b)
		return -1;
	*i = (uint32_t)a;
	*n = (uint32_t)b;
	return 0;
}

/* A number in (0, max] from s, or -1. */
static double parse_real(const char *s, double max)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || !(v > 0) || v > max)
		return -1;
	return v;
}

static int parse_qargs(int argc, char **argv, const char *cmd, const char *usage, int quantize,
		       qargs *a)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"calib", required_argument, NULL, O_CALIB},
		{"calib-limit", required_argument, NULL, O_CALIB_LIMIT},
		{"stats", required_argument, NULL, O_STATS},
		{"calib-batch", required_argument, NULL, O_CALIB_BATCH},
		{"shard", required_argument, NULL, O_SHARD},
		{"ranges", required_argument, NULL, O_RANGES},
		{"method", required_argument, NULL, O_METHOD},
		{"ema-constant", required_argument, NULL, O_EMA_C},
		{"percentile", required_argument, NULL, O_PCT},
		{"bias-correction", optional_argument, NULL, O_BIASC},
		{"bias-correction-rounds", required_argument, NULL, O_BIASC_R},
		{"threads", required_argument, NULL, O_THREADS},
		{"profile", required_argument, NULL, O_PROFILE},
		{"weight-type", required_argument, NULL, O_WTYPE},
		{"act-type", required_argument, NULL, O_ATYPE},
		{"granularity", required_argument, NULL, O_GRAN},
		{"block-size", required_argument, NULL, O_BLOCK},
		{"sym-grid", required_argument, NULL, O_GRID},
		{"weight-asymmetric", no_argument, NULL, O_WASYM},
		{"act-symmetric", optional_argument, NULL, O_ASYM},
		{"weight-method", required_argument, NULL, O_WMETHOD},
		{"reduce-range", no_argument, NULL, O_REDUCE},
		{"keep-activations", no_argument, NULL, O_KEEP},
		{"weight-only", no_argument, NULL, O_WONLY},
		{"op-types", required_argument, NULL, O_OPTYPES},
		{"include", required_argument, NULL, O_INCLUDE},
		{"exclude", required_argument, NULL, O_EXCLUDE},
		{"overrides", required_argument, NULL, O_OVERRIDES},
		{"export-encodings", required_argument, NULL, O_EXPENC},
		{"import-encodings", required_argument, NULL, O_IMPENC},
		{"opset", required_argument, NULL, O_OPSET},
		{"passes", required_argument, NULL, O_PASSES},
		{"dump-after", required_argument, NULL, O_DUMP},
		{"verify", no_argument, NULL, O_VERIFY},
		{"external-data", no_argument, NULL, O_EXT},
		{"external-threshold", required_argument, NULL, O_EXT_T},
		{"quiet", no_argument, NULL, O_QUIET},
		{"verbose", no_argument, NULL, O_VERBOSE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	oq_pipeline_opts *p = &a->p;
	size_t n_inc = 0, n_exc = 0, n_no = 0;
	long long v;
	int c, nargs = 0, calibrate = quantize == CMD_CALIBRATE, no_bc = 0;

	memset(a, 0, sizeof *a);
	oq_pipeline_opts_init(p, calibrate ? OQ_JOB_CALIBRATE : quantize ? OQ_JOB_QUANTIZE : OQ_JOB_CONVERT);
	for (int i = 0; i < 3; i++)
		if (!(a->lists[i] = calloc((size_t)argc, sizeof(char *))))
			return OQ_EXIT_NOMEM;
	/* --no-PASS: take them out of argv before getopt sees them */
	for (int i = 1; i < argc; i++) {
		if (quantize && strcmp(argv[i], "--no-bias-correction") == 0) {
			p->bias_correction = OQ_BC_OFF;
			no_bc = 1;
			memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
			argc--;
			i--;
			continue;
		}
		if (strncmp(argv[i], "--no-", 5) == 0) {
			if (!oq_pass_find(argv[i] + 5))
				return usage_error(cmd, "unknown --no-PASS option (passes: cleanup, upgrade-opset, "
							"fold-bn, fuse, quantize)");
			a->lists[2][n_no++] = argv[i] + 5;
			memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
			argc--;
			i--;
		}
	}
	p->run.disabled = a->lists[2];
	p->run.n_disabled = n_no;
#ifndef NDEBUG
	p->run.verify = 1; /* debug builds check the model after every pass */
#endif
	if (getenv("ONNXQ_VERIFY") && strcmp(getenv("ONNXQ_VERIFY"), "0") != 0)
		p->run.verify = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		if (!quantize && c != 'o' && c != 'h' && c != O_OPSET && c != O_PASSES && c != O_DUMP &&
		    c != O_VERIFY && c != O_EXT && c != O_EXT_T && c != O_QUIET && c != O_VERBOSE)
			return usage_error(cmd, "option only valid for quantize");
		switch (c) {
		case 'o': p->out_path = optarg; break;
		case O_CALIB: p->calib.source = optarg; break;
		case O_CALIB_BATCH:
			if ((v = parse_num(optarg, 1, 65536)) < 0)
				return usage_error(cmd, "--calib-batch needs a number from 1 to 65536");
			p->calib.batch = (size_t)v;
			break;
		case O_STATS:
			if (calibrate)
				return usage_error(cmd, "--stats is a quantize option (calibrate writes statistics)");
			p->stats_in = optarg;
			break;
		case O_SHARD:
			if (!calibrate)
				return usage_error(cmd, "--shard is a calibrate option");
			if (parse_shard(optarg, &p->calib.shard, &p->calib.n_shards))
				return usage_error(cmd, "--shard needs I/N with 0 <= I < N <= 65536 (I is 0-based)");
			break;
		case O_RANGES:
			/* kept so that old scripts get told why, not "unknown option" */
			return usage_error(cmd, "--ranges is no longer needed: calibrate writes ranges and "
						"histograms in one round (statistics format 2); drop it and the "
						"second round, and merge the shards' files");
		case O_BIASC:
			if (!optarg || strcmp(optarg, "empirical") == 0)
				p->bias_correction = OQ_BC_EMPIRICAL;
			else if (strcmp(optarg, "analytic") == 0)
				p->bias_correction = OQ_BC_ANALYTIC;
			else
				return usage_error(cmd, "--bias-correction takes =empirical (the default) or =analytic");
			break;
		case O_BIASC_R:
			if ((v = parse_num(optarg, 0, 100)) < 0)
				return usage_error(cmd, "--bias-correction-rounds needs a number in 0..100");
			p->bias_rounds = (int)v;
			break;
		case O_CALIB_LIMIT:
			if ((v = parse_num(optarg, 1, (long long)1 << 40)) < 0)
				return usage_error(cmd, "--calib-limit needs a positive number");
			p->calib.limit = (size_t)v;
			break;
		case O_METHOD:
			if ((p->calib.method = oq_calib_method_parse(optarg)) < 0)
				return usage_error(cmd, "--method is minmax, ema, percentile, entropy or mse");
			break;
		case O_EMA_C:
			if ((p->calib.ema_constant = parse_real(optarg, 1)) < 0)
				return usage_error(cmd, "--ema-constant needs a number in (0, 1]");
			break;
		case O_PCT:
			if ((p->calib.percentile = parse_real(optarg, 100)) < 0)
				return usage_error(cmd, "--percentile needs a number in (0, 100]");
			break;
		case O_THREADS:
			if ((v = parse_num(optarg, 1, 1024)) < 0)
				return usage_error(cmd, "--threads needs a number from 1 to 1024");
			p->calib.threads = (int)v;
			break;
		case O_PROFILE:
			if (!strcmp(optarg, "ort"))
				p->q.profile = OQ_PROFILE_ORT;
			else if (!strcmp(optarg, "trt"))
				p->q.profile = OQ_PROFILE_TRT;
			else
				return usage_error(cmd, "--profile is ort or trt");
			break;
		case O_WTYPE:
			if (!(p->q.weight_type = parse_qtype(optarg)) || p->q.weight_type == OQ_DT_UINT16)
				return usage_error(cmd, "--weight-type is int8, uint8, int16, int4, uint4 or "
							"float8e4m3fn");
			break;
		case O_ATYPE: {
			int t = parse_qtype(optarg);
			if (t != OQ_DT_INT8 && t != OQ_DT_UINT8 && t != OQ_DT_INT16 && t != OQ_DT_UINT16 &&
			    t != OQ_DT_FLOAT8E4M3FN)
				return usage_error(cmd, "--act-type is uint8, int8, uint16, int16 or float8e4m3fn");
			p->q.act_type = t;
			break;
		}
		case O_GRAN:
			if (!strcmp(optarg, "tensor"))
				p->q.granularity = OQ_GRAN_TENSOR;
			else if (!strcmp(optarg, "channel"))
				p->q.granularity = OQ_GRAN_CHANNEL;
			else if (!strcmp(optarg, "block"))
				p->q.granularity = OQ_GRAN_BLOCK;
			else
				return usage_error(cmd, "--granularity is tensor, channel or block");
			break;
		case O_BLOCK:
			if ((v = parse_num(optarg, 2, (long long)1 << 30)) < 0)
				return usage_error(cmd, "--block-size needs a number >= 2");
			p->q.block_size = v;
			break;
		case O_GRID:
			if (!strcmp(optarg, "narrow"))
				p->q.sym_grid = OQ_GRID_NARROW;
			else if (!strcmp(optarg, "full"))
				p->q.sym_grid = OQ_GRID_FULL;
			else
				return usage_error(cmd, "--sym-grid is narrow or full");
			break;
		case O_WASYM: p->q.weight_asym = 1; break;
		case O_ASYM:
			if (optarg && strcmp(optarg, "unsigned"))
				return usage_error(cmd, "--act-symmetric takes no value or =unsigned");
			p->q.act_sym = optarg ? OQ_ACT_SYM_UNSIGNED : OQ_ACT_SYM;
			break;
		case O_WMETHOD:
			if (!strcmp(optarg, "minmax"))
				p->q.weight_method = OQ_WMETHOD_MINMAX;
			else if (!strcmp(optarg, "mse"))
				p->q.weight_method = OQ_WMETHOD_MSE;
			else
				return usage_error(cmd, "--weight-method is minmax or mse");
			break;
		case O_REDUCE: p->q.reduce_range = 1; break;
		case O_KEEP: p->q.keep_activations = 1; break;
		case O_WONLY: p->q.weight_only = 1; break;
		case O_OPTYPES:
			free(a->op_types_buf);
			free(a->op_types);
			if (split_list(optarg, &a->op_types_buf, &a->op_types, &p->q.n_op_types))
				return OQ_EXIT_NOMEM;
			p->q.op_types = a->op_types;
			break;
		case O_INCLUDE: a->lists[0][n_inc++] = optarg; break;
		case O_EXCLUDE: a->lists[1][n_exc++] = optarg; break;
		case O_OVERRIDES: p->overrides_path = optarg; break;
		case O_EXPENC: p->export_encodings = optarg; break;
		case O_IMPENC: p->import_encodings = optarg; break;
		case O_OPSET:
			if ((v = parse_num(optarg, 10, 1000)) < 0)
				return usage_error(cmd, "--opset needs a number >= 10");
			p->q.opset = v;
			break;
		case O_PASSES: p->run.list = optarg; break;
		case O_DUMP: p->run.dump_after = optarg; break;
		case O_VERIFY: p->run.verify = 1; break;
		case O_EXT: p->save.external_data = 1; break;
		case O_EXT_T:
			if ((v = parse_num(optarg, 1, LLONG_MAX)) < 0)
				return usage_error(cmd, "--external-threshold needs a positive number of bytes");
			p->save.external_threshold = (size_t)v;
			break;
		case O_QUIET: p->quiet = 1; break;
		case O_VERBOSE: p->verbose = 1; break;
		case 'h':
			fputs(usage, stdout);
			if (usage == usage_quantize)
				fputs(usage_quantize_more, stdout);
			return -1;
		default: return usage_error(cmd, "unknown option");
		}
	}
	p->q.include = a->lists[0];
	p->q.n_include = n_inc;
	p->q.exclude = a->lists[1];
	p->q.n_exclude = n_exc;
	nargs = argc - optind;
	if (nargs != 1)
		return usage_error(cmd, nargs < 1 ? "missing MODEL" : "too many arguments");
	p->in_path = argv[optind];
	if (no_bc)
		p->bias_correction = OQ_BC_OFF; /* wherever it stood on the command line */
	return 0;
}

static int cmd_pipeline(int argc, char **argv, const char *cmd, const char *usage, int quantize)
{
	qargs a;
	oq_diag d;
	int rc = parse_qargs(argc, argv, cmd, usage, quantize, &a);

	if (rc) {
		qargs_free(&a);
		return rc < 0 ? 0 : rc;
	}
	oq_diag_init(&d);
	rc = oq_pipeline_run(&a.p, &d);
	qargs_free(&a);
	return rc ? fail(&d, rc) : 0;
}

static int cmd_convert(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "convert", usage_convert, 0);
}

static int cmd_quantize(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "quantize", usage_quantize, 1);
}

static int cmd_calibrate(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "calibrate", usage_calibrate, CMD_CALIBRATE);
}

static int cmd_merge_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *out = NULL;
	oq_stats s;
	oq_diag d;
	int c, rc, quiet = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'q': quiet = 1; break;
		case 'h': fputs(usage_calibrate, stdout); return 0;
		default: return usage_error("merge-stats", "unknown option");
		}
	}
	if (optind >= argc)
		return usage_error("merge-stats", "needs at least one statistics file");
	if (!out)
		return usage_error("merge-stats", "missing -o OUT");
	oq_diag_init(&d);
	if ((rc = oq_stats_merge_files((const char *const *)argv + optind, (size_t)(argc - optind), &s, &d)))
		return fail(&d, rc);
	rc = oq_stats_write(out, &s, &d);
	if (!rc && !quiet) {
		uint32_t have = 0;
		for (uint32_t i = 0; i < s.n_shards; i++)
			have += s.covered[i] != 0;
		fprintf(stderr, "merge-stats: wrote %s: %u of %u shards, %llu of %llu samples, %zu tensors\n",
			out, have, s.n_shards, (unsigned long long)s.n_samples,
			(unsigned long long)s.n_total, s.n);
	}
	oq_stats_free(&s);
	return rc ? fail(&d, rc) : 0;
}

static int cmd_compare(int argc, char **argv)
{
	static const struct option opts[] = {
		{"data", required_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"min-sqnr", required_argument, NULL, 'm'},
		{"per-tensor", no_argument, NULL, 'p'},
		{"top", required_argument, NULL, 'n'},
		{"threads", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	oq_compare_opts co = {0};
	oq_model *ref = NULL, *test = NULL;
	oq_diag d;
	long long v;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': co.data_dir = optarg; break;
		case 'j': co.json = 1; break;
		case 'p': co.per_tensor = 1; break;
		case 'm': {
			char *end;
			co.min_sqnr = strtod(optarg, &end);
			if (end == optarg || *end)
				return usage_error("compare", "--min-sqnr needs a number of dB");
			co.has_min_sqnr = 1;
			break;
		}
		case 'n':
			if ((v = parse_num(optarg, 1, 1000000)) < 0)
				return usage_error("compare", "--top needs a positive number");
			co.top = (size_t)v;
			break;
		case 't':
			if ((v = parse_num(optarg, 1, 1024)) < 0)
				return usage_error("compare", "--threads needs a number from 1 to 1024");
			co.threads = (int)v;
			break;
		case 'h': fputs(usage_compare, stdout); return 0;
		default: return usage_error("compare", "unknown option");
		}
	}
	if (argc - optind != 2)
		return usage_error("compare", argc - optind < 2 ? "needs REF and TEST models" : "too many arguments");
	if (!co.data_dir)
		return usage_error("compare", "missing --data DIR");
	co.ref_path = argv[optind];
	co.test_path = argv[optind + 1];
	oq_diag_init(&d);
	if ((rc = oq_model_load(co.ref_path, &ref, &d)) || (rc = oq_model_load(co.test_path, &test, &d))) {
		oq_model_free(ref);
		return fail(&d, rc);
	}
	rc = oq_compare(ref, test, &co, stdout, &d);
	oq_model_free(ref);
	oq_model_free(test);
	if (fflush(stdout) != 0 && !rc)
		return OQ_EXIT_IO;
	return rc ? fail(&d, rc) : 0;
}

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"data", required_argument, NULL, 'd'},
		{"input", required_argument, NULL, 'i'},
		{"output-dir", required_argument, NULL, 'o'},
		{"threads", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	oq_run_opts ro = {0};
	const char **specs;
	oq_diag d;
	oq_model *m;
	int c, rc;

	/* at most one --input per argument: argc bounds the list */
	if (!(specs = calloc((size_t)argc, sizeof *specs)))
		return OQ_EXIT_NOMEM;
	ro.inputs = specs;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': ro.data_dir = optarg; break;
		case 'i': specs[ro.n_inputs++] = optarg; break;
		case 'o': ro.output_dir = optarg; break;
		case 'j': ro.json = 1; break;
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*optarg < '0' || *optarg > '9' || *end || v < 1 || v > 1024) {
				free(specs);
				return usage_error("run", "--threads needs a number from 1 to 1024");
			}
			ro.threads = (int)v;
			break;
		}
		case 'h': free(specs); fputs(usage_run, stdout); return 0;
		default: free(specs); return usage_error("run", "unknown option");
		}
	}
	if (optind != argc - 1 || !ro.data_dir == !ro.n_inputs) {
		const char *why = optind >= argc ? "missing MODEL"
				  : optind != argc - 1 ? "too many arguments"
				  : ro.data_dir ? "--data and --input exclude each other"
				  : "missing --data DIR or --input NAME=FILE";
		free(specs);
		return usage_error("run", why);
	}
	ro.model_path = argv[optind];
	oq_diag_init(&d);
	if ((rc = oq_model_load(argv[optind], &m, &d))) {
		free(specs);
		return fail(&d, rc);
	}
	rc = oq_run(m, &ro, stdout, &d);
	oq_model_free(m);
	free(specs);
	if (rc)
		return fail(&d, rc);
	return fflush(stdout) == 0 ? 0 : OQ_EXIT_IO;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage_main, stderr);
		return OQ_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(usage_main, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
		printf("onnxq %s\n", oq_version());
		return 0;
	}
	if (!strcmp(argv[1], "inspect"))
		return cmd_inspect(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "convert"))
		return cmd_convert(argc - 1, argv + 1);
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "quantize"))
		return cmd_quantize(argc - 1, argv + 1);
	if (!strcmp(argv[1], "calibrate"))
		return cmd_calibrate(argc - 1, argv + 1);
	if (!strcmp(argv[1], "merge-stats"))
		return cmd_merge_stats(argc - 1, argv + 1);
	if (!strcmp(argv[1], "compare"))
		return cmd_compare(argc - 1, argv + 1);
	if (argv[1][0] == '-')
		return usage_error(NULL, "unknown option before the command");
	/* `onnxq MODEL -o OUT ...` is `onnxq quantize MODEL -o OUT ...` */
	if (strchr(argv[1], '.') || strchr(argv[1], '/'))
		return cmd_quantize(argc, argv);
	fprintf(stderr, "onnxq: unknown command '%s' (see `onnxq --help`)\n", argv[1]);
	return OQ_EXIT_USAGE;
}
