/*
 * tables.h - bias-correction statistics, the hand-off from calibration
 * (calib/biascorr/sums.c collects them) to the bias update (calib/biascorr/analytic.c).
 *
 * For every layer whose weight the quantize pass will quantize, one sum
 * S over the calibration samples of what each weight element multiplies,
 * and the number N of output positions summed over. Because the layer is
 * linear in W, the mean shift of output channel o caused by W -> W + dW is
 *     shift[o] = sum_j dW[o, j] * S[j] / N
 * (see analytic.c for each op). Layouts of S:
 *   Conv           [C, k...]: S[c, t] = sum over samples, batch and output
 *                  positions p of x[n, c, p*stride + t*dil - pad] (0 in the
 *                  padding): what tap t of every filter reads on channel c
 *   ConvTranspose  [C, k...]: S[c, t] = sum of x[n, c, i] over the input
 *                  positions i whose tap t lands inside the output
 *   Gemm           [K]: S[k] = sum over rows m of op(A)[m, k]
 *   MatMul         [K]: S[k] = sum over all rows of x[..., k]
 * Memory: C x kernel taps (or K) doubles per layer, whatever the spatial
 * size, batch or number of samples; sizes may differ between samples.
 */
#ifndef OQ_BCSTATS_H
#define OQ_BCSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "src/ir/ir.h"

/* Statistics of one layer. */
typedef struct oq_bc_layer {
	oq_node *node;       /* Conv, ConvTranspose, Gemm or MatMul of the main graph */
	int w_idx;           /* input index of its weight (a float32 initializer) */
	double *sum;         /* S, n_sum entries (layouts above) */
	size_t n_sum;
	uint64_t count;      /* N: output positions (rows) summed over */
	int failed;          /* an input did not fit (dtype, shape): no correction */
} oq_bc_layer;

typedef struct oq_bc_stats {
	oq_bc_layer *v;
	size_t n;
} oq_bc_stats;

void oq_bc_stats_free(oq_bc_stats *s);

/*
 * Empirical correction: measured on the quantized model itself. For every
 * layer whose bias can take a correction, the sum of its output per channel
 * over the calibration samples, in the float model and in the quantized one
 * (calib/biascorr/measure.c measures; calib/biascorr/analytic.c lists the layers and folds
 * corr into the biases before the quantize pass). Sums are kept per fold:
 * the samples are split by their position in the sample order, fold f
 * holding samples i with i % OQ_BCE_FOLDS == f, so that a correction
 * estimated on one fold can be judged on the other (src/pipeline/pipeline.c).
 */
#define OQ_BCE_FOLDS 2

typedef struct oq_bce_layer {
	char *node;          /* layer node name (Conv, ConvTranspose, Gemm, MatMul) */
	char *measured;      /* node whose output 0 is measured: the layer, or a MatMul's bias Add */
	int ch_last;         /* channel axis: the last one (Gemm, MatMul) or 1 (Conv, ConvTranspose) */
	size_t M;            /* output channels */
	double *corr;        /* M: correction subtracted from the layer's output (the bias) so far */
	double *sum_f, *sum_q; /* OQ_BCE_FOLDS x M: sums of the measured output per fold and channel,
			      * float / quantized model (sum_f[f * M + m]) */
	uint64_t n_f[OQ_BCE_FOLDS], n_q[OQ_BCE_FOLDS]; /* elements summed per channel in each fold */
	int failed;          /* the measured value did not fit (dtype, channel dim): no correction */
} oq_bce_layer;

/* All layers of one measurement. */
typedef struct oq_bce {
	oq_bce_layer *v;
	size_t n;
} oq_bce;

/*
 * Output SQNR of one quantized model against the float one, per fold: over
 * the (sample, float output) pairs of the fold's samples, in dB, capped at
 * OQ_BCE_SQNR_CAP. A fold without pairs has n 0, min OQ_BCE_SQNR_CAP.
 */
typedef struct oq_bce_sqnr {
	double min[OQ_BCE_FOLDS]; /* lowest */
	double sum[OQ_BCE_FOLDS]; /* sum, added in sample order */
	size_t n[OQ_BCE_FOLDS];   /* pairs */
	double *per;              /* per sample: mean over its float outputs, dB; NaN when not run
				   * (owned; oq_bce_sqnr_free), or NULL */
	size_t n_per;             /* samples */
} oq_bce_sqnr;

/* An exact output (no error) counts as this many dB, so means stay finite. */
#define OQ_BCE_SQNR_CAP 300.0

/* Lowest SQNR over the folds in mask `folds` (bit f: fold f); NaN when they hold no pair. */
double oq_bce_sqnr_min(const oq_bce_sqnr *s, unsigned folds);

/* Mean SQNR over the pairs of the folds in mask `folds`; NaN when they hold none. */
double oq_bce_sqnr_mean(const oq_bce_sqnr *s, unsigned folds);

/*
 * Does cand improve on base over the folds in mask `folds`: mean strictly
 * up and min not down (both measured on the same samples; NaN or no pairs:
 * no)?
 */
int oq_bce_sqnr_better(const oq_bce_sqnr *cand, const oq_bce_sqnr *base, unsigned folds);

/*
 * Gain of cand over base per sample, on the samples of the folds in mask
 * `folds` that both ran (sample i is in fold i % OQ_BCE_FOLDS): the mean
 * gain and its standard error, sd / sqrt(n) with the sample standard
 * deviation (n - 1); *se is NaN with fewer than 2 samples, both NaN with none.
 */
void oq_bce_gain(const oq_bce_sqnr *cand, const oq_bce_sqnr *base, unsigned folds, double *mean, double *se);

/*
 * The cross-validation test of a round of empirical correction: cand (the
 * model corrected with shifts measured on other samples) is better than
 * base on the folds in mask `folds` (oq_bce_sqnr_better) and its mean gain
 * per sample there is more than OQ_BCE_MARGIN standard errors of that mean
 * (oq_bce_gain): not a gain the spread of a few samples makes by chance.
 * Fewer than 2 samples: no.
 */
#define OQ_BCE_MARGIN 2.0
int oq_bce_sqnr_holds(const oq_bce_sqnr *cand, const oq_bce_sqnr *base, unsigned folds);

void oq_bce_sqnr_free(oq_bce_sqnr *s);

/* Frees the layers (names and arrays) and resets *b. */
void oq_bce_free(oq_bce *b);

#endif
