/*
 * main.c - the onnxq command line: parse arguments, call the library, map
 * the status to an exit code. No logic lives here.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "inspect.h"
#include "onnx_io.h"
#include "oq.h"
#include "run.h"

static const char usage_main[] =
	"usage: onnxq COMMAND [OPTIONS]\n"
	"\n"
	"Commands:\n"
	"  inspect MODEL [--json]              summarise a model (I/O, ops, parameters, Q/DQ)\n"
	"  check MODEL [--json]                validate a model's structure and Q/DQ nodes\n"
	"  convert MODEL -o OUT [--external-data] [--external-threshold BYTES]\n"
	"                                      load and save a model (no rewriting yet)\n"
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
	"usage: onnxq convert MODEL -o OUT [--external-data] [--external-threshold BYTES]\n"
	"\n"
	"Loads MODEL and writes it to OUT. OUT is written to a temporary file and\n"
	"renamed, so it is untouched on failure. Models over 2 GB are written with\n"
	"external data automatically.\n"
	"\n"
	"  -o, --output OUT            output model path (required)\n"
	"  --external-data             store tensors of at least BYTES in OUT.data\n"
	"  --external-threshold BYTES  size threshold for --external-data (default 1024)\n";

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

static int cmd_convert(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"external-data", no_argument, NULL, 'e'},
		{"external-threshold", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *out = NULL;
	oq_save_opts so = {0};
	oq_save_info info;
	oq_diag d;
	oq_model *m;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'e': so.external_data = 1; break;
		case 't': {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (*optarg < '0' || *optarg > '9' || *end || v == 0)
				return usage_error("convert", "--external-threshold needs a positive number of bytes");
			so.external_threshold = (size_t)v;
			break;
		}
		case 'h': fputs(usage_convert, stdout); return 0;
		default: return usage_error("convert", "unknown option");
		}
	}
	if (optind != argc - 1)
		return usage_error("convert", optind >= argc ? "missing MODEL" : "too many arguments");
	if (!out)
		return usage_error("convert", "missing -o OUT");
	oq_diag_init(&d);
	if ((rc = oq_model_load(argv[optind], &m, &d)))
		return fail(&d, rc);
	rc = oq_model_save(m, out, &so, &info, &d);
	oq_model_free(m);
	if (rc)
		return fail(&d, rc);
	if (info.auto_external)
		fprintf(stderr, "onnxq: convert: model is over 2 GB: wrote %zu tensors to %s.data\n",
			info.n_external, out);
	return 0;
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
		printf("onnxq %s\n", OQ_VERSION);
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
	if (argv[1][0] == '-')
		return usage_error(NULL, "unknown option before the command");
	fprintf(stderr,
		"onnxq: unknown command '%s'; quantization (`onnxq MODEL -o OUT --calib DIR`) is not in "
		"this version yet: see `onnxq --help`\n",
		argv[1]);
	return OQ_EXIT_USAGE;
}
