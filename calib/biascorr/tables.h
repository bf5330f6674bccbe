/*
 * tables.h - the per-layer tables of both bias-correction modes, the SQNR
 * record of a measured model and the rule that keeps an empirical round.
 *
 * Analytic mode (oq_bc_sums: sums.c collects them during calibration,
 * analytic.c folds the shifts): for every layer whose weight the quantize
 * pass will quantize, one sum S over the calibration samples of what each
 * weight element multiplies, and the number N of output positions summed
 * over. Because the layer is
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
#ifndef OQ_BC_TABLES_H
#define OQ_BC_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "src/ir/ir.h"

/* Statistics of one layer. */
typedef struct oq_bc_sums_layer {
	oq_node *node;       /* Conv, ConvTranspose, Gemm or MatMul of the main graph */
	int w_idx;           /* input index of its weight (a float32 initializer) */
	double *sum;         /* S, n_sum entries (layouts above) */
	size_t n_sum;
	uint64_t count;      /* N: output positions (rows) summed over */
	int failed;          /* an input did not fit (dtype, shape): no correction */
} oq_bc_sums_layer;

typedef struct oq_bc_sums {
	oq_bc_sums_layer *v;
	size_t n;
} oq_bc_sums;

void oq_bc_sums_free(oq_bc_sums *s);

/*
 * Empirical mode (oq_bc_targets): measured on the quantized model itself.
 * For every layer whose bias can take a correction, the sum of its output
 * per channel over the calibration samples, in the float model and in the
 * quantized one (measure.c measures; empirical.c lists the layers, folds
 * corr into the biases before the quantize pass and runs the rounds). Sums
 * are kept per fold: the samples are split by their position in the sample
 * order, fold f holding samples i with i % OQ_BC_FOLDS == f, so that a
 * correction estimated on one fold can be judged on the other.
 */
#define OQ_BC_FOLDS 2
/* The probe samples of empirical bias correction (biascorr.h): i / OQ_BC_FOLDS %
 * OQ_BC_PROBE_EVERY == 0, a pair of consecutive samples (one per fold) in every
 * OQ_BC_PROBE_EVERY pairs. */
#define OQ_BC_PROBE_EVERY 4
static inline int oq_bc_probe_sample(size_t i)
{
	return i / OQ_BC_FOLDS % OQ_BC_PROBE_EVERY == 0;
}

typedef struct oq_bc_target {
	char *node;          /* layer node name (Conv, ConvTranspose, Gemm, MatMul) */
	char *measured;      /* node whose output 0 is measured: the layer, or a MatMul's bias Add */
	int ch_last;         /* channel axis: the last one (Gemm, MatMul) or 1 (Conv, ConvTranspose) */
	size_t M;            /* output channels */
	double *corr;        /* M: correction subtracted from the layer's output (the bias) so far */
	double *sum_f, *sum_q; /* OQ_BC_FOLDS x M: sums of the measured output per fold and channel,
			      * float / quantized model (sum_f[f * M + m]) */
	uint64_t n_f[OQ_BC_FOLDS], n_q[OQ_BC_FOLDS]; /* elements summed per channel in each fold */
	double *sum_fp;      /* OQ_BC_FOLDS x M or NULL: sum_f of the probe samples alone (with it) */
	uint64_t n_fp[OQ_BC_FOLDS];
	int failed;          /* the measured value did not fit (dtype, channel dim): no correction */
} oq_bc_target;

/* All layers of one measurement. */
typedef struct oq_bc_targets {
	oq_bc_target *v;
	size_t n;
	uint8_t *nonfinite;  /* per sample: a measured float output held NaN/Inf (from a non-finite
			      * input element): the sample is left out of every layer's sums on both
			      * sides, as the observers leave such values out of the ranges */
	size_t n_samples;    /* entries of nonfinite (set when the float sums are taken) */
	size_t n_nonfinite;  /* samples marked in nonfinite */
} oq_bc_targets;

/*
 * Output SQNR of one quantized model against the float one, per fold: over
 * the (sample, float output) pairs of the fold's samples, in dB, capped at
 * OQ_BC_SQNR_CAP. A fold without pairs has n 0, min OQ_BC_SQNR_CAP.
 */
typedef struct oq_bc_sqnr {
	double min[OQ_BC_FOLDS]; /* lowest */
	double sum[OQ_BC_FOLDS]; /* sum, added in sample order */
	size_t n[OQ_BC_FOLDS];   /* pairs */
	double *per;              /* per sample: mean over its float outputs, dB; NaN when not run
				   * (owned; oq_bc_sqnr_free), or NULL */
	size_t n_per;             /* samples */
} oq_bc_sqnr;

/* An exact output (no error) counts as this many dB, so means stay finite. */
#define OQ_BC_SQNR_CAP 300.0

/* Lowest SQNR over the folds in mask `folds` (bit f: fold f); NaN when they hold no pair. */
double oq_bc_sqnr_min(const oq_bc_sqnr *s, unsigned folds);

/* Mean SQNR over the pairs of the folds in mask `folds`; NaN when they hold none. */
double oq_bc_sqnr_mean(const oq_bc_sqnr *s, unsigned folds);

/*
 * Does cand improve on base over the folds in mask `folds`: mean strictly
 * up and min not down (both measured on the same samples; NaN or no pairs:
 * no)?
 */
int oq_bc_sqnr_better(const oq_bc_sqnr *cand, const oq_bc_sqnr *base, unsigned folds);

/*
 * Gain of cand over base per sample, on the samples of the folds in mask
 * `folds` that both ran (sample i is in fold i % OQ_BC_FOLDS): the mean
 * gain and its standard error, sd / sqrt(n) with the sample standard
 * deviation (n - 1); *se is NaN with fewer than 2 samples, both NaN with none.
 */
void oq_bc_sqnr_gain(const oq_bc_sqnr *cand, const oq_bc_sqnr *base, unsigned folds, double *mean, double *se);

/*
 * The cross-validation test of a round of empirical correction: cand (the
 * model corrected with shifts measured on other samples) is better than
 * base on the folds in mask `folds` (oq_bc_sqnr_better) and its mean gain
 * per sample there is more than OQ_BC_MARGIN standard errors of that mean
 * (oq_bc_sqnr_gain): not a gain the spread of a few samples makes by chance.
 * Fewer than 2 samples: no.
 */
#define OQ_BC_MARGIN 2.0
int oq_bc_sqnr_holds(const oq_bc_sqnr *cand, const oq_bc_sqnr *base, unsigned folds);

void oq_bc_sqnr_free(oq_bc_sqnr *s);

/* Frees the layers (names and arrays) and resets *b. */
void oq_bc_targets_free(oq_bc_targets *b);

#endif
