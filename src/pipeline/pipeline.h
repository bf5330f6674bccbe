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
 * Option names in messages are the command line's.
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
};

/* calib.method of oq_pipeline_opts_init: none named; calibration uses mse (oq_pipeline_opts_resolve). */
#define OQ_PIPELINE_METHOD_DEFAULT (-1)

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
	int bias_correction;     /* OQ_BC_* (calib/biascorr/biascorr.h) */
	int bias_rounds;         /* --bias-correction-rounds N (empirical forward groups); -1 = OQ_BC_ROUNDS */
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

/* Checks o, then runs the job. */
int oq_pipeline_run(const oq_pipeline_opts *o, oq_diag *d) OQ_WUR;

#endif
