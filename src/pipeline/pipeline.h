/*
 * pipeline.h - `onnxq quantize`, `calibrate` and `convert` as one library
 * call: load -> rewrites -> calibrate -> bias correction -> quantize ->
 * save (pipeline.c strings the stages together). `calibrate` stops after
 * calibration and writes one shard's statistics (calib/stats_file.h);
 * `quantize --stats` reads the merged file instead of running samples;
 * `convert` runs only the rewrites it is asked for.
 *
 * The options are checked here, not in the command line: impossible
 * combinations (--block-size without --granularity block, --weight-only with
 * --calib, ...) are OQ_EUSAGE from oq_pipeline_opts_check, which
 * oq_pipeline_run calls first, so every caller gets the same errors.
 * Option names in messages are the command line's: options.c also holds
 * the option table that sets these fields by those names (oq_pipeline_args),
 * which the command line and onnxq_options_set (src/onnxq.h) both use.
 */
#ifndef OQ_PIPELINE_H
#define OQ_PIPELINE_H

#include <stdio.h>

#include "calib/biascorr/biascorr.h"
#include "calib/calibrate.h"
#include "passes/pass.h"
#include "src/io/onnx_io.h"

/* What a run does (and what out_path receives). */
enum {
	OQ_JOB_QUANTIZE = 0, /* `onnxq quantize`: the quantized model */
	OQ_JOB_CALIBRATE,    /* `onnxq calibrate`: one shard's calibration statistics, no model */
	OQ_JOB_CONVERT,      /* `onnxq convert`: the model after the selected rewrites */
	OQ_JOB_ANALYZE,      /* `onnxq analyze`: per-point sensitivity (analyze.h), no model */
};

/* calib.method of oq_pipeline_opts_init: none named; calibration uses mse, or auto with 16-bit
 * activations (oq_pipeline_opts_resolve). */
#define OQ_PIPELINE_METHOD_DEFAULT (-1)

/* --bias-correction-weights (oq_pipeline_opts.bias_weights); resolved to on or off. */
enum { OQ_BCW_DEFAULT = 0, OQ_BCW_ON, OQ_BCW_OFF };

typedef struct oq_pipeline_opts {
	int job;                 /* OQ_JOB_* */
	const char *in_path;     /* the float model */
	const char *out_path;    /* what the job writes (temporary file + rename: untouched on failure) */
	oq_opts q;               /* pass options */
	oq_pass_run run;         /* pass selection, verify, dump (run.stage is the pipeline's) */
	oq_calib_opts calib;     /* calib.source NULL: no samples (weight-only, --stats, convert) */
	oq_save_opts save;
	const char *overrides_path;   /* --overrides FILE.json, or NULL */
	const char *export_encodings; /* --export-encodings FILE.json, or NULL */
	const char *import_encodings; /* --import-encodings FILE.json, or NULL */
	const char *stats_in;    /* quantize --stats FILE: merged statistics instead of --calib, or NULL */
	const char *json_path;   /* analyze --json FILE, or NULL */
	const char *html_path;   /* analyze --html FILE, or NULL */
	double target_sqnr;      /* quantize --target-sqnr DB; 0: none */
	const char *report_path; /* --report FILE.json (with --target-sqnr), or NULL */
	int bias_correction;     /* OQ_BC_* (calib/biascorr/biascorr.h) */
	int bias_rounds;         /* --bias-correction-rounds N (empirical forward groups); -1 = OQ_BC_ROUNDS */
	int bias_weights;        /* --bias-correction-weights: OQ_BCW_* */
	int high_precision;      /* --high-precision: OQ_DT_FLOAT, OQ_DT_FLOAT16, OQ_DT_BFLOAT16; 0 = the model's */
	int quiet, verbose;
	FILE *log;               /* summary / warnings / timings (stderr) */
} oq_pipeline_opts;

/*
 * The defaults of `onnxq JOB` (OQ_JOB_*): oq_opts_init's pass options,
 * calibration method and bias correction left to the pipeline
 * (OQ_PIPELINE_METHOD_DEFAULT, OQ_BC_DEFAULT), log on stderr; convert runs
 * no rewrite until run.list names some.
 */
void oq_pipeline_opts_init(oq_pipeline_opts *o, int job);

/*
 * OQ_EUSAGE, naming the options (as on the command line), when o asks for
 * something impossible or for a setting that would have no effect:
 * statistics and samples together, calibration settings with
 * --weight-only, grids a type or profile cannot have, activations to
 * quantize without calibration data, ...
 */
int oq_pipeline_opts_check(const oq_pipeline_opts *o, oq_diag *d) OQ_WUR;

/*
 * The options a run uses (o checked): the defaults named (mse, the bias
 * correction mode) and what other settings imply (--profile trt:
 * symmetric int8 activations; float8 activations: symmetric).
 */
void oq_pipeline_opts_resolve(const oq_pipeline_opts *o, oq_pipeline_opts *out);

/* ---- setting options by name (the command line's, and the library's onnxq_options_set) ---- */

/* The name lists an oq_pipeline_args keeps. */
enum { OQ_ARGS_INCLUDE, OQ_ARGS_EXCLUDE, OQ_ARGS_DISABLED, OQ_ARGS_OP_TYPES, OQ_ARGS_LISTS };

/* Options being set by name, and the copies of the values they point into. */
typedef struct oq_pipeline_args {
	oq_pipeline_opts p;          /* the options so far */
	char **copies;               /* every value set, copied (owned) */
	size_t n_copies, cap_copies;
	const char **list[OQ_ARGS_LISTS]; /* --include, --exclude, --no-PASS, --op-types names */
	size_t n[OQ_ARGS_LISTS], cap[OQ_ARGS_LISTS];
} oq_pipeline_args;

/* How an option takes its value. */
enum {
	OQ_ARG_NONE = 0,   /* a flag: --verbose */
	OQ_ARG_REQUIRED,   /* --calib DIR (or --calib=DIR) */
	OQ_ARG_OPTIONAL,   /* --act-symmetric or --act-symmetric=unsigned */
};

/* One row of the option table. */
typedef struct oq_option {
	const char *name;  /* as on the command line, without "--"; NULL: a row of help text only */
	int arg;           /* OQ_ARG_* */
	unsigned jobs;     /* the jobs that take it: bit (1 << OQ_JOB_*) */
	/* checks the value alone and sets it in a->p (field: where, for the generic setters) */
	int (*set)(oq_pipeline_args *a, const struct oq_option *o, const char *value, oq_diag *d);
	size_t field;      /* offsetof(oq_pipeline_opts, ...) for a flag or a path, else 0 */
	const char *help;  /* its lines of `onnxq quantize --help` (section titles too), or NULL */
} oq_option;

/* The options of quantize, calibrate and convert (--no-PASS aside), in --help order. */
extern const oq_option oq_pipeline_options[];
extern const size_t oq_pipeline_n_options;
const oq_option *oq_pipeline_option_find(const char *name);

/* Prints the option rows' help: the option part of `onnxq quantize --help`. */
void oq_pipeline_options_help(FILE *f);

/* Options of JOB at their defaults (oq_pipeline_opts_init); nothing kept yet. */
void oq_pipeline_args_init(oq_pipeline_args *a, int job);
void oq_pipeline_args_free(oq_pipeline_args *a);

/*
 * Sets option `name` (a row of the table, or "no-PASS" for a pass name) to
 * value (NULL for a flag or an optional value left out; copied). OQ_EUSAGE
 * with the command line's message for an unknown name, an option the job
 * does not take, or a value the option cannot have.
 */
int oq_pipeline_args_set(oq_pipeline_args *a, const char *name, const char *value, oq_diag *d) OQ_WUR;

/* Checks o, then runs the job. */
int oq_pipeline_run(const oq_pipeline_opts *o, oq_diag *d) OQ_WUR;

#endif
