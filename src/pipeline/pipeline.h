/*
 * pipeline.h - `onnxq quantize` (and `convert --passes`): load -> passes
 * -> calibrate -> quantize -> save, one library call per stage.
 * `onnxq calibrate` stops after calibration and writes a statistics file
 * (calib/stats_file.h); `quantize --stats` reads the merged file instead of
 * running samples.
 */
#ifndef OQ_PIPELINE_H
#define OQ_PIPELINE_H

#include <stdio.h>

#include "calib/biascorr/biascorr.h"
#include "calib/calibrate.h"
#include "src/io/onnx_io.h"
#include "passes/pass.h"

typedef struct oq_pipeline_opts {
	const char *in_path, *out_path;
	oq_opts q;               /* pass options */
	oq_pass_run run;         /* pass selection, verify, dump */
	oq_calib_opts calib;     /* calib.source NULL: no calibration (weight-only or rewrite-only) */
	oq_save_opts save;
	const char *overrides_path; /* --overrides FILE.json, or NULL */
	const char *export_encodings; /* --export-encodings FILE.json, or NULL */
	const char *import_encodings; /* --import-encodings FILE.json, or NULL */
	const char *stats_in;    /* quantize --stats FILE: merged statistics instead of --calib, or NULL */
	const char *stats_out;   /* `calibrate -o FILE`: write this shard's statistics, no quantization */
	int bias_correction;     /* OQ_BC_*: --bias-correction[=empirical|analytic], --no-bias-correction */
	int bias_rounds;         /* --bias-correction-rounds N (empirical forward groups); -1 = OQ_BC_ROUNDS */
	int rewrite_only;        /* `convert --passes`: no quantize pass, no calibration */
	int quiet, verbose;
	FILE *log;               /* summary / warnings / timings (stderr) */
} oq_pipeline_opts;

int oq_pipeline_run(const oq_pipeline_opts *o, oq_diag *d) OQ_WUR;

#endif
