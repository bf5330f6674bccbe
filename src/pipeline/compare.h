/*
 * compare.h - `onnxq compare REF TEST --data DIR`: runs both models on every
 * sample and reports, per output, SQNR in dB (10*log10(sum ref^2 / sum
 * (ref-test)^2)), cosine similarity and max abs error, min and mean over
 * samples; --per-tensor also matches intermediate tensors by name and lists
 * the worst layers.
 */
#ifndef OQ_COMPARE_H
#define OQ_COMPARE_H

#include <stdio.h>

#include "src/ir/ir.h"

typedef struct oq_compare_opts {
	const char *ref_path, *test_path; /* for the report */
	const char *data_dir;   /* --data DIR (samples.h sample layouts) */
	int threads;            /* <= 0: all cores */
	int json;               /* --json: one JSON object */
	int per_tensor;         /* --per-tensor */
	size_t top;             /* worst layers listed with --per-tensor (default 10 when 0) */
	int has_min_sqnr;       /* --min-sqnr given */
	double min_sqnr;        /* fail (OQ_ECHECK) when an output's min SQNR over samples is below */
	int64_t max_loop_iterations; /* --max-loop-iterations (oq_exec_opts); <= 0: the default */
} oq_compare_opts;

/* The worst output of a comparison. */
typedef struct oq_compare_summary {
	double sqnr_min;     /* lowest SQNR of any output on any sample, dB (NaN when one was NaN) */
	double sqnr_mean;    /* lowest over outputs of the mean over samples, dB */
	size_t n_outputs, n_samples;
} oq_compare_summary;

/*
 * Writes the report to `out` (NULL: none) and the worst output to *sum (NULL: not wanted).
 * OQ_ECHECK (exit 6) when --min-sqnr is not met; the report is still written.
 */
int oq_compare(oq_model *ref, oq_model *test, const oq_compare_opts *o, FILE *out, oq_compare_summary *sum,
	       oq_diag *d) OQ_WUR;

#endif
