/*
 * main.c - the onnxq command line: parse arguments, call the library, map
 * the status to an exit code. No logic lives here.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/kernels/linalg/linalg.h"
#include "calib/samples.h"
#include "src/io/onnx_io.h"
#include "src/oq.h"
#include "src/pipeline/compare.h"
#include "src/pipeline/pipeline.h"
#include "src/pipeline/placement.h"
#include "src/report/check.h"
#include "src/report/coverage.h"
#include "src/report/inspect.h"

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
	"  analyze MODEL --calib DIR [--json FILE] [--html FILE]\n"
	"                                      rank the quantization points by their held-out cost\n"
	"  convert MODEL -o OUT [--passes LIST] [--external-data] [--external-threshold BYTES]\n"
	"                                      load, optionally rewrite, and save a model\n"
	"  run MODEL (--data DIR | --input NAME=FILE ...) [--output-dir DIR] [--threads N] [--json]\n"
	"      [--profile]\n"
	"                                      run a model on sample inputs with the CPU executor\n"
	"\n"
	"Options:\n"
	"  -h, --help      show help (also `onnxq COMMAND --help`)\n"
	"  -V, --version   show the version\n"
	"\n"
	"Exit codes: 0 ok, 1 usage, 2 invalid model or data, 3 unsupported construct,\n"
	"            4 I/O error (also when stdout cannot be written: full disk, closed\n"
	"            pipe), 5 out of memory, 6 check found problems.\n";

static const char usage_inspect[] =
	"usage: onnxq inspect MODEL [--json]\n"
	"\n"
	"Prints producer, IR version, opsets, inputs and outputs (dtype, shape with\n"
	"symbolic dims by name), op census, parameters and bytes by dtype, and the\n"
	"QuantizeLinear/DequantizeLinear nodes with their granularity.\n"
	"\n"
	"  --json      one JSON object on stdout\n";

static const char usage_check[] =
	"usage: onnxq check MODEL [--json] [--target ort|trt [--data DIR] [--verbose]]\n"
	"\n"
	"Validates structure (topological order, single definitions, dangling inputs,\n"
	"graph outputs, opset imports, attribute types, initializer sizes) and Q/DQ\n"
	"legality. Prints one line per problem; exit 0 when valid, 6 when not, 2 when\n"
	"the file cannot be loaded at all.\n"
	"\n"
	"  --json      {\"valid\": bool, \"problems\": [{where, rule, message}]} on stdout\n"
	"  --target T  also report runtime coverage: the share of MACs T (ort: ONNX Runtime's\n"
	"              CPU QDQ fusions; trt: TensorRT's explicit quantization, lint only) runs in\n"
	"              integer kernels, and every quantized op it leaves in float, with the\n"
	"              reason (JSON: \"coverage\")\n"
	"  --data DIR  a sample to size the MACs by (default: the declared input shapes when\n"
	"              they are fixed; else the shares count nodes)\n"
	"  --verbose   list every Conv/MatMul/Gemm, integer or not\n";

static const char usage_convert[] =
	"usage: onnxq convert MODEL -o OUT [--passes LIST] [--no-PASS] [--dump-after PASS]\n"
	"                     [--opset N] [--external-data] [--external-threshold BYTES]\n"
	"\n"
	"Loads MODEL and writes it to OUT, running the rewrite passes named by\n"
	"--passes first (none without it). OUT is written to a temporary file and\n"
	"renamed, so it is untouched on failure. Models over 2 GB are written with\n"
	"external data automatically.\n"
	"\n"
	"OUT may be a new or regular file (its permissions are kept), a symlink to a\n"
	"regular file (the target is replaced, the link stays), or - (or /dev/stdout)\n"
	"to stream the model to standard output. A device, FIFO, socket or folder is\n"
	"refused (exit 4), and so is an OUT that is another input of the command,\n"
	"such as MODEL's external data (exit 1); OUT = MODEL is fine. SIGINT and\n"
	"SIGTERM remove the temporary files.\n"
	"\n"
	"  -o, --output OUT            output model path (required)\n"
	"  --passes LIST               comma-separated rewrites: cleanup, upgrade-opset,\n"
	"                              fold-bn, cle, fuse (run in that order)\n"
	"  --no-PASS                   leave one pass out (e.g. --no-fuse)\n"
	"  --dump-after PASS           print the graph after PASS to stderr\n"
	"  --opset N                   target opset for upgrade-opset\n"
	"  --verify                    check the model after every pass\n"
	"  --external-data             store tensors of at least BYTES in OUT.<hash>.data,\n"
	"                              named by its content (the model is written last, so\n"
	"                              it never meets another save's data; data files of\n"
	"                              earlier saves of OUT are removed)\n"
	"  --external-threshold BYTES  size threshold for --external-data (default 1024)\n";

/* The head of `quantize --help`; the option lines come from the option table. */
static const char usage_quantize[] =
	"usage: onnxq quantize MODEL -o OUT (--calib DIR | --weight-only) [OPTIONS]\n"
	"       onnxq MODEL -o OUT ...          (the same)\n"
	"\n"
	"Rewrites (cleanup, upgrade-opset, fold-bn, [cle,] fuse), calibrates activation\n"
	"ranges (--method, default mse; auto with 16-bit activations) by running the\n"
	"samples through onnxq's executor, inserts QuantizeLinear/DequantizeLinear\n"
	"and stores weights as integers. OUT is untouched on failure.\n"
	"\n";

static const char usage_analyze[] =
	"usage: onnxq analyze MODEL --calib DIR [--json FILE] [--html FILE] [--threads N] [quantize options]\n"
	"\n"
	"Which quantization points cost accuracy: for every point of the quantize\n"
	"the options describe (each activation Q/DQ, each weight), the output SQNR\n"
	"with only that point quantized, held out (each sample judged with ranges\n"
	"from the other --calib-folds folds), its range, clipped share and MACs,\n"
	"ranked worst first; and the fully quantized model's fold SQNR. The top of\n"
	"the ranking goes to stdout, all of it to --json FILE; --html FILE writes\n"
	"one self-contained page (inline SVG).\n";

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
	"histograms, which serve any of the three at quantize time; auto writes them per\n"
	"fold (--calib-folds: folds of the whole set, whatever the shard), which serve\n"
	"auto and the other three. ema cannot be sharded (its average depends on\n"
	"sample order).\n";

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
	"  --min-sqnr DB   exit 6 when an output's minimum SQNR is below DB (CI gate; a\n"
	"                  finite number: nan or inf is a usage error, exit 1)\n"
	"  --per-tensor    also compare intermediate tensors matched by name; list the worst\n"
	"  --top N         how many tensors --per-tensor lists (default 10)\n"
	"  --threads N     executor threads (default: all cores)\n"
	"  --max-loop-iterations N  iterations one Loop node may run (default 10000000;\n"
	"                  past it: exit 2 naming the node)\n";

static const char usage_run[] =
	"usage: onnxq run MODEL (--data DIR | --input NAME=FILE ...)\n"
	"                 [--output-dir DIR] [--threads N] [--json] [--profile]\n"
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
	"  --json              report (dtype, shape, min/max/mean per output) as JSON\n"
	"  --max-loop-iterations N  iterations one Loop node may run (default 10000000);\n"
	"                      past it the run fails naming the node (exit 2)\n"
	"  --profile           time every node; after the run, print the time per op type\n"
	"                      and of the 10 slowest nodes (calls, ms, share); outputs are\n"
	"                      the same bits with and without\n"
	"\n"
	"MODEL and sample files must be regular files: a FIFO or a device is refused\n"
	"(exit 4 for the model, 4 for a .npy, 2 for a .pb), never waited on.\n";

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

/*
 * Coverage of m for target; MACs from a run of DIR's first sample, or of the declared input
 * shapes (random data, symbolic dims 1); when that run fails the coverage counts nodes.
 */
static int coverage_of(oq_model *m, int target, const char *data, oq_coverage *cov, oq_diag *d)
{
	oq_calib_opts co = {0};
	oq_value_sizes sz = {0};
	oq_diag scratch;
	int rc;

	co.source = data ? data : "random:1";
	co.threads = 1;
	oq_diag_init(&scratch);
	/* declared shapes size the MACs only when fixed (a symbolic dim would become 1) */
	for (size_t i = 0; !data && m->graph && i < m->graph->n_inputs; i++) {
		const oq_value *v = m->graph->inputs[i];
		for (int k = 0; !v->init && k < v->type.rank; k++)
			if (v->type.dims[k].value < 0)
				co.source = NULL;
	}
	if (co.source && (rc = oq_value_sizes_measure(m, &co, &sz, data ? d : &scratch)) && data)
		return rc;
	rc = oq_coverage_analyze(m, target, sz.n ? &sz : NULL, cov);
	oq_value_sizes_free(&sz);
	return rc ? oq_err(d, rc, "check: out of memory") : OQ_OK;
}

static int cmd_check(int argc, char **argv)
{
	const char *path;
	int json, rc;
	oq_diag d;
	oq_model *m;
	oq_problems p = {0};

	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"target", required_argument, NULL, 't'},
		{"data", required_argument, NULL, 'D'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *data = NULL;
	int target = -1, verbose = 0, c;
	oq_coverage cov = {0};

	json = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "hv", opts, NULL)) != -1) {
		if (c == 'j')
			json = 1;
		else if (c == 't' && (!strcmp(optarg, "ort") || !strcmp(optarg, "trt")))
			target = strcmp(optarg, "ort") ? OQ_TARGET_TRT : OQ_TARGET_ORT;
		else if (c == 't')
			return usage_error("check", "--target is ort or trt");
		else if (c == 'D')
			data = optarg;
		else if (c == 'v')
			verbose = 1;
		else if (c == 'h')
			return fputs(usage_check, stdout), 0;
		else
			return usage_error("check", "unknown option");
	}
	if (optind != argc - 1)
		return usage_error("check", optind >= argc ? "missing MODEL" : "too many arguments");
	if (data && target < 0)
		return usage_error("check", "--data sizes the MACs of --target; give --target ort|trt");
	path = argv[optind];
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
	if (!rc && target >= 0)
		rc = coverage_of(m, target, data, &cov, &d);
	if (rc) {
		oq_model_free(m);
		oq_problems_free(&p);
		oq_coverage_free(&cov);
		return fail(&d, rc);
	}
	if (json && target >= 0) {
		printf("{");
		oq_problems_json(&p, stdout);
		printf(", \"coverage\": ");
		oq_coverage_json(&cov, stdout);
		printf("}\n");
	} else {
		oq_problems_print(&p, path, json, stdout);
	}
	if (!json && p.n)
		fprintf(stderr, "onnxq: check: %s: %zu problem%s\n", path, p.n, p.n == 1 ? "" : "s");
	if (!json && target >= 0)
		oq_coverage_print(&cov, stdout, verbose);
	rc = p.n ? OQ_EXIT_CHECK : OQ_EXIT_OK;
	oq_problems_free(&p);
	oq_coverage_free(&cov); /* its nodes point into m */
	oq_model_free(m);
	return rc;
}

/*
 * quantize, calibrate and convert parse against the library's option table
 * (oq_pipeline_options); the library checks how the options fit together.
 * --no-PASS options are taken out of argv first (their names come from the
 * pass table).
 */
static int parse_pipeline(int argc, char **argv, const char *cmd, const char *usage, int job,
			  oq_pipeline_args *a)
{
	struct option *longopts;
	oq_diag d;
	size_t n = 0;
	int c, rc = 0;

	oq_diag_init(&d);
	oq_pipeline_args_init(a, job);
#ifndef NDEBUG
	a->p.run.verify = 1; /* debug builds check the model after every pass */
#endif
	if (getenv("ONNXQ_VERIFY") && strcmp(getenv("ONNXQ_VERIFY"), "0") != 0)
		a->p.run.verify = 1;
	for (int i = 1; i < argc; i++) {
		const oq_option *o;
		if (strncmp(argv[i], "--no-", 5) != 0 ||
		    ((o = oq_pipeline_option_find(argv[i] + 2)) && (o->jobs & (1u << job))))
			continue;
		if ((rc = oq_pipeline_args_set(a, argv[i] + 2, NULL, &d)))
			return rc == OQ_EUSAGE ? usage_error(cmd, d.msg) : fail(&d, rc);
		memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
		argc--;
		i--;
	}
	if (!(longopts = calloc(oq_pipeline_n_options + 2, sizeof *longopts)))
		return OQ_EXIT_NOMEM;
	for (size_t i = 0; i < oq_pipeline_n_options; i++) {
		const oq_option *o = &oq_pipeline_options[i];
		if (o->name)
			longopts[n++] = (struct option){o->name,
							o->arg == OQ_ARG_REQUIRED   ? required_argument
							: o->arg == OQ_ARG_OPTIONAL ? optional_argument
										    : no_argument,
							NULL, 256 + (int)i};
	}
	longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
	optind = 1;
	while (!rc && (c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
		const char *name = c == 'o' ? "output" : c >= 256 ? oq_pipeline_options[c - 256].name : NULL;
		if (c == 'h') {
			fputs(usage, stdout);
			if (job == OQ_JOB_QUANTIZE)
				oq_pipeline_options_help(stdout);
			rc = -1;
		} else if (!name) {
			rc = usage_error(cmd, "unknown option");
		} else if ((rc = oq_pipeline_args_set(a, name, optarg, &d))) {
			rc = rc == OQ_EUSAGE ? usage_error(cmd, d.msg) : fail(&d, rc);
		}
	}
	free(longopts);
	if (rc)
		return rc;
	if (argc - optind != 1)
		return usage_error(cmd, argc - optind < 1 ? "missing MODEL" : "too many arguments");
	a->p.in_path = argv[optind];
	return 0;
}

static int cmd_pipeline(int argc, char **argv, const char *cmd, const char *usage, int job)
{
	oq_pipeline_args a;
	oq_diag d;
	int rc = parse_pipeline(argc, argv, cmd, usage, job, &a);

	if (!rc) {
		oq_diag_init(&d);
		if ((rc = oq_pipeline_run(&a.p, &d)))
			rc = fail(&d, rc);
	}
	oq_pipeline_args_free(&a);
	return rc < 0 ? 0 : rc;
}

static int cmd_convert(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "convert", usage_convert, OQ_JOB_CONVERT);
}

static int cmd_quantize(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "quantize", usage_quantize, OQ_JOB_QUANTIZE);
}

static int cmd_analyze(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "analyze", usage_analyze, OQ_JOB_ANALYZE);
}

static int cmd_calibrate(int argc, char **argv)
{
	return cmd_pipeline(argc, argv, "calibrate", usage_calibrate, OQ_JOB_CALIBRATE);
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
		{"max-loop-iterations", required_argument, NULL, 'L'},
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
			if (end == optarg || *end || !isfinite(co.min_sqnr))
				return usage_error("compare", "--min-sqnr needs a finite number of dB");
			co.has_min_sqnr = 1;
			break;
		}
		case 'n':
			if ((v = oq_parse_count(optarg, 1, 1000000)) < 0)
				return usage_error("compare", "--top needs a positive number");
			co.top = (size_t)v;
			break;
		case 't':
			if ((v = oq_parse_count(optarg, 1, 1024)) < 0)
				return usage_error("compare", "--threads needs a number from 1 to 1024");
			co.threads = (int)v;
			break;
		case 'L':
			if ((v = oq_parse_count(optarg, 1, LLONG_MAX)) < 0)
				return usage_error("compare", "--max-loop-iterations needs a positive number");
			co.max_loop_iterations = v;
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
	rc = oq_compare(ref, test, &co, stdout, NULL, &d);
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
		{"max-loop-iterations", required_argument, NULL, 'L'},
		{"profile", no_argument, NULL, 'p'},
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
		case 'p': ro.profile = 1; break;
		case 't': {
			long long v = oq_parse_count(optarg, 1, 1024);
			if (v < 0) {
				free(specs);
				return usage_error("run", "--threads needs a number from 1 to 1024");
			}
			ro.threads = (int)v;
			break;
		}
		case 'L':
			if ((ro.max_loop_iterations = oq_parse_count(optarg, 1, LLONG_MAX)) < 0) {
				free(specs);
				return usage_error("run", "--max-loop-iterations needs a positive number");
			}
			break;
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

/* The commands; each gets argv from its own name on. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{"inspect", cmd_inspect},
	{"check", cmd_check},
	{"convert", cmd_convert},
	{"run", cmd_run},
	{"quantize", cmd_quantize},
	{"calibrate", cmd_calibrate},
	{"merge-stats", cmd_merge_stats},
	{"compare", cmd_compare},
	{"analyze", cmd_analyze},
};

static int dispatch(int argc, char **argv)
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
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	if (argv[1][0] == '-')
		return usage_error(NULL, "unknown option before the command");
	/* `onnxq MODEL -o OUT ...` is `onnxq quantize MODEL -o OUT ...` */
	if (strchr(argv[1], '.') || strchr(argv[1], '/'))
		return cmd_quantize(argc, argv);
	fprintf(stderr, "onnxq: unknown command '%s' (see `onnxq --help`)\n", argv[1]);
	return OQ_EXIT_USAGE;
}

/*
 * Reports and returns a failure to write stdout (full disk, closed pipe):
 * exit 4 with the reason, whatever the command printed, unless it failed
 * otherwise already (a `check` that found problems still gets 4: its report
 * is lost).
 */
static int close_stdout(int rc)
{
	int e = 0;
	if (fflush(stdout) != 0)
		e = errno;
	if (ferror(stdout) || e || (fclose(stdout) != 0 && (e = errno))) {
		fprintf(stderr, "onnxq: cannot write the output to stdout: %s\n",
			e ? strerror(e) : "write error");
		return rc && rc != OQ_EXIT_CHECK ? rc : OQ_EXIT_IO;
	}
	return rc;
}

/*
 * Runs the process again with OpenBLAS's environment set, at most once (with both variables set,
 * here or by the user, it does not run again; when exec fails it goes on as is):
 * - OPENBLAS_NUM_THREADS=1 when unset: onnxq calls OpenBLAS from its own threads, one thread per
 *   call (linalg.h), but the library starts its worker threads when it loads, before main, and
 *   they spin in sched_yield for a while: CPU time for nothing;
 * - OPENBLAS_CORETYPE when OpenBLAS left this AVX-512 CPU on an older core's kernels
 *   (oq_linalg_blas_core_wanted): the learned rounding's products then run on AVX-512 kernels,
 *   in the summation order of a CPU OpenBLAS knows.
 */
static void blas_env(char **argv)
{
	const char *want = NULL;
	int set_threads = !getenv("OPENBLAS_NUM_THREADS");

	if (!getenv("OPENBLAS_CORETYPE"))
		want = oq_linalg_blas_core_wanted();
	if (!set_threads && !want)
		return;
	if (set_threads && setenv("OPENBLAS_NUM_THREADS", "1", 1))
		return;
	if (want && setenv("OPENBLAS_CORETYPE", want, 1))
		return;
	execv("/proc/self/exe", argv);
	if (set_threads)
		unsetenv("OPENBLAS_NUM_THREADS");
	if (want)
		unsetenv("OPENBLAS_CORETYPE");
}

int main(int argc, char **argv)
{
	blas_env(argv);
	return close_stdout(dispatch(argc, argv));
}
