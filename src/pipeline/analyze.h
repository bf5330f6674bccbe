/*
 * analyze.h - `onnxq analyze MODEL --calib DIR`: which quantization points
 * cost the most accuracy (AIMET QuantAnalyzer's per-layer analysis, held
 * out).
 *
 * The points are those of the default quantize (fidelity.h oq_qpoints:
 * every activation QuantizeLinear, every weight and bias
 * DequantizeLinear). The samples are cut into the folds of fidelity.h; for
 * a sample of fold f, each point is quantized alone with fold f's model
 * (ranges from the other folds) and the rest of the model stays float:
 *
 *   point SQNR per output = 10 log10( sum r^2 / sum (r - r_p)^2 )  dB
 *
 * pooled over all samples, r the float output, r_p the output with only
 * point p quantized (dq(q(x)) of the point's value as its Q/DQ computes it;
 * a weight replaced by its dequantized integer copy). Also per point: its
 * range (activations: the calibrated range of the quantized model, from
 * all samples; weights: min/max), the share of held-out values outside
 * its fold's grid (clipped), and the MACs of the Conv, ConvTranspose,
 * MatMul and Gemm nodes that read it (first sample's shapes). And the
 * fully quantized model's SQNR on the same folds (fidelity.h's figure).
 * Ranked by the worst output's point SQNR, lowest first (ties: node
 * order).
 *
 * Cost: per sample, one float run that keeps every value, one run of the
 * quantized model, and per point a run of only the nodes downstream of it
 * (oq_exec_run_part) on the kept values. Memory: one sample's values.
 * Deterministic: double sums in sample order; results do not depend on
 * the thread count.
 */
#ifndef OQ_ANALYZE_H
#define OQ_ANALYZE_H

#include <stdio.h>

#include "src/pipeline/fidelity.h"

/* One point's results. */
typedef struct oq_an_point {
	char *name;     /* float model value or initializer */
	int weight;     /* 1: weight / bias initializer; 0: activation */
	double lo, hi;  /* its range (see above) */
	double clipped; /* share of its held-out values outside the grid (weights: of its elements) */
	double macs;    /* MACs of the nodes reading it */
	double *d2;     /* per output: sum (r - r_p)^2 */
	double worst;   /* the lowest output SQNR, dB */
	double *d2n;    /* a weight whose rounding was learned: per output, sum (r - r_p)^2 with the
			 * weight rounded to nearest instead; NULL when not measured */
	double worst_near; /* the lowest output SQNR of d2n, dB; NaN when not measured */
	size_t order;   /* the first node reading it, in node order */
	uint64_t n_val, n_clip; /* values seen, clipped */
} oq_an_point;

/* An analysis. */
typedef struct oq_analysis {
	size_t k, n;         /* folds, samples */
	size_t n_out;
	char **out;          /* output names */
	double *r2;          /* per output: sum r^2 */
	double *qd2;         /* per output: sum (r - q)^2 of the fully quantized model */
	oq_an_point *pt;
	size_t n_pt;
	size_t *rank;        /* point indices, worst first */
	double total_macs;   /* MACs of every Conv/ConvTranspose/MatMul/Gemm (first sample) */
	double *node_macs;   /* per node of the float model's main graph: its MACs (first sample) */
	double seconds;      /* wall time of the analysis */
	int near;            /* weights were also measured rounded to nearest (d2n) */
} oq_analysis;

/*
 * Analyzes as above: fm the float model after the rewrites, co the calibration options (a
 * sample folder), folds their per-fold statistics, all the ranges from every sample (reported
 * as the activations' ranges; may be NULL), make the quantized copy for a set of ranges.
 */
int oq_analyze(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_ranges *all,
	       oq_fid_make_fn make, void *ctx, oq_analysis *out, oq_diag *d) OQ_WUR;
/*
 * The same, and, with make_near (may be NULL) the quantized copy as it would be with every
 * weight rounded to nearest (no learned rounding): each weight point whose integer values
 * (or scales) differ there is measured a second time with that weight, and the point's
 * d2n / worst_near give its output effect before the learned rounding.
 */
int oq_analyze_with_nearest(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_ranges *all,
			    oq_fid_make_fn make, oq_fid_make_fn make_near, void *ctx, oq_analysis *out,
			    oq_diag *d) OQ_WUR;
void oq_analysis_free(oq_analysis *a);

/* The ranked table (top entries; 0: all) and the per-output SQNR, as text. */
void oq_analysis_print(const oq_analysis *a, FILE *f, size_t top);
/* The analysis as one JSON object (README "onnxq analyze"). */
int oq_analysis_json(const oq_analysis *a, const char *path, oq_diag *d) OQ_WUR;
/* One self-contained HTML page (inline SVG, no script, no network). */
int oq_analysis_html(const oq_analysis *a, const char *model, const char *path, oq_diag *d) OQ_WUR;

#endif
