/*
 * biascorr.h - bias correction, as the pipeline calls it (docs/design.md
 * "Bias correction"): quantization moves the mean of each output channel of a
 * Conv, ConvTranspose, Gemm or MatMul; folding the opposite shift into the
 * layer's bias (fold.h) puts the mean back. Two ways to know the shift:
 *
 *   analytic   (--bias-correction=analytic) the shift weight rounding
 *              causes, computed from sums of each layer's input that
 *              calibration collects (sums.c); folded into the float model
 *              before the quantize pass (analytic.c).
 *   empirical  (the default with --calib DIR) the shift measured on the
 *              quantized model against the float one on the calibration
 *              samples (measure.c), whatever its cause; folded in rounds,
 *              each kept only when it holds up under cross-validation
 *              (empirical.c). It runs the quantize pass itself.
 *
 * This folder: biascorr.h (this API), tables.h (the per-layer tables both
 * modes fill, the SQNR record and the rule that keeps a round), fold.h
 * (where a correction goes), analytic.h + sums.h (analytic mode),
 * empirical.h + measure.h (empirical mode).
 */
#ifndef OQ_BIASCORR_H
#define OQ_BIASCORR_H

#include <stdio.h>

#include "calib/calibrate.h"
#include "passes/pass.h"

/* Modes (oq_pipeline_opts.bias_correction). */
enum {
	OQ_BC_DEFAULT = 0, /* empirical when activations are calibrated on samples, else off */
	OQ_BC_OFF,
	OQ_BC_ANALYTIC,
	OQ_BC_EMPIRICAL,
};

/* Empirical mode: forward groups before the last layer's round, by default. */
#define OQ_BC_ROUNDS 0
/* The probe before the rounds (oq_biascorr_empirical; its samples: tables.h): only with more
 * than OQ_BC_PROBE_MIN samples measured, and the margin in standard errors a fold candidate's
 * gain must pass there for the rounds to be measured. */
#define OQ_BC_PROBE_MIN 16
#define OQ_BC_PROBE_MARGIN 1.0
/* 1 (default): the probe runs; 0: the rounds are measured whatever it would find (tests). */
extern int oq_bc_probe;
/* Measurements the probe stopped so far (tests). */
extern size_t oq_bc_probe_stops;

/* Analytic mode in progress: the layers and the input sums calibration adds to. */
typedef struct oq_biascorr_analytic oq_biascorr_analytic;

/*
 * Before calibration: plans the layers of g whose weights the quantize
 * pass (options q) will quantize, and hooks the observer that sums their
 * inputs into co (co->extra, co->extra_ctx), which then calibrates g.
 */
int oq_biascorr_analytic_plan(oq_graph *g, const oq_opts *q, oq_calib_opts *co, oq_biascorr_analytic **out,
			      oq_diag *d) OQ_WUR;

/*
 * After calibration, before the quantize pass: folds each planned layer's
 * shift into its bias in g (q: the pass options, ranges included; q->log
 * gets one line per layer, `log` a summary line).
 */
int oq_biascorr_analytic_fold(oq_biascorr_analytic *a, oq_graph *g, const oq_opts *q, FILE *log,
			      oq_diag *d) OQ_WUR;

void oq_biascorr_analytic_free(oq_biascorr_analytic *a);

/*
 * Shifts measured elsewhere, to start empirical mode from: per layer (named by its output 0),
 * the mean output shift of each of its M channels, quantized - float, that its bias should
 * absorb. Learned rounding's bias correction gives them (calib/rounding/rounding.h): the shift
 * the weights alone cause, activations float, which the whole quantized model's error hides.
 */
typedef struct oq_biascorr_shift {
	char *layer;    /* the layer's output 0 */
	size_t M;       /* channels */
	double *shift;  /* M */
} oq_biascorr_shift;

typedef struct oq_biascorr_shifts {
	oq_biascorr_shift *v;
	size_t n;
} oq_biascorr_shifts;

void oq_biascorr_shifts_free(oq_biascorr_shifts *s);

/* How empirical mode gets its candidate models. */
typedef struct oq_biascorr_models {
	/* a fresh copy of the float model being corrected (load + the same rewrites) */
	int (*float_copy)(void *ctx, oq_model **out, oq_diag *d);
	/* the quantize pass on m, with the calibrated ranges */
	int (*quantize)(void *ctx, oq_model *m, oq_diag *d);
	void *ctx;
} oq_biascorr_models;

/*
 * Empirical mode, in place of the quantize pass. ref: the float model after
 * the rewrites, q: the quantize pass options (q->log gets one line per
 * round), calib: the calibration samples (a folder: a random source is
 * OQ_EUNSUP). The layers but the last, in topological order, are split into
 * `rounds` consecutive groups (< 0: OQ_BC_ROUNDS), and the last layer is a
 * final group of its own. With shifts w (may be NULL), a round before
 * those folds w's shifts into their layers, and is kept when the quantized
 * model's calibration SQNR improves by more than OQ_BC_MARGIN standard
 * errors (oq_bc_sqnr_holds on all samples: w was measured without the
 * activation quantizers, so the judge is not the estimate; each layer's
 * shift already passed learned rounding's held-out guard). Without w, a
 * probe comes first (with more than OQ_BC_PROBE_MIN samples measured): each
 * round's fold checks on a quarter of the samples, every correction 0
 * before, a loose test (gain above OQ_BC_PROBE_MARGIN standard errors);
 * when no round passes it, no round is measured on all samples and the
 * uncorrected model is kept (a round that cannot pass a loose test on a
 * quarter of the samples is not expected to pass the strict one on all;
 * the cost is one more quantized run of that quarter where one does).
 * The last layer's candidates change one bias: on the uncorrected model
 * (no round kept before), in the probe and in the rounds, also the one on
 * all samples (whose sums no later round reads), they run only the nodes
 * that bias reaches (tails, measure.h), with the results of whole runs.
 * *out receives the quantized model kept (the uncorrected one when no
 * round is kept); `log` gets a summary line.
 * fout (may be NULL): receives the float model's outputs on every sample
 * when the measurement kept them all (calib/biascorr/measure.h; state 1),
 * else is left empty, for a later measurement on the same samples.
 */
struct oq_bc_float_cache;
int oq_biascorr_empirical(oq_model *ref, const oq_biascorr_models *mk, const oq_opts *q, const oq_calib_opts *calib,
			  int rounds, const oq_biascorr_shifts *w, FILE *log, oq_model **out,
			  struct oq_bc_float_cache *fout, oq_diag *d) OQ_WUR;

#endif
