/*
 * rounding.h - learned weight rounding (--weight-rounding adaround|seq-mse): each quantized
 * layer's weights are rounded so that the layer's output on its real calibration inputs moves
 * least, instead of each weight to its nearest grid point.
 *
 * The problem of one layer, per output channel m (w_m: its K weights in im2col order; x: an
 * input patch of the float model, x~: the same patch in the model whose earlier layers are
 * already quantized, AdaRound's asymmetric reconstruction):
 *
 *   minimise  E || w_m . x - w~_m . x~ ||^2
 *          =  w~_m^T A w~_m - 2 w~_m^T t_m + const,   A = E[x~ x~^T],  t_m = E[x~ x^T] w_m,
 *
 * expectations over every output position of every calibration sample (see learn.c for the
 * sampling and the stages). With a bias that absorbs the mean error (weight-only bias
 * correction) A and E[x~ x^T] are centred (covariances) and the bias moves by
 * w_m . E[x] - w~_m . E[x~]. Only A and t enter, so a layer's inputs are reduced to K x K
 * moments while the samples run, and its channels are solved from those alone.
 *
 * AdaRound (Nagel et al. 2020): w~ = s * (clip(floor(w/s) + h(V) + zp, qmin, qmax) - zp),
 * h(V) = clip(sigmoid(V) (zeta - gamma) + gamma, 0, 1), zeta 1.1, gamma -0.1, V set so that
 * h(V) = frac(w/s); minimises the loss above + lambda * sum(1 - |2 h(V) - 1|^beta) with Adam
 * (full-batch gradients from A and t: no mini-batch noise; learning rate 0.01, 200 steps),
 * beta annealed linearly 20 -> 2 after a warm start of 20 % of the steps without the
 * regulariser, lambda 0.01. At the end each weight rounds up where h(V) >= 0.5 (V >= 0),
 * then single weights flip while a flip lowers their output channel's loss (a greedy polish:
 * AdaRound's relaxation leaves such flips behind).
 *
 * Sequential MSE (AIMET): per scale group (output channel, or block), the scale of the range
 * f * [min, max], f = 1 - c/100 for c < OQ_SEQMSE_CANDIDATES, with the least loss above at
 * nearest rounding; groups of one row (blocks) are searched one after the other, each with
 * the others at their current choice, over two sweeps.
 *
 * The covariances are shrunk towards their diagonals first (OQ_WR_SHRINK; the means' products
 * are kept). Both are guarded twice:
 *   - per output channel, on the moments learned from: the result is kept only when its loss
 *     is below round to nearest's (else the channel rounds to nearest);
 *   - per layer, on held-out samples (learn.c: one calibration sample in four is not learned
 *     from, with at least two samples): the layer keeps what it learned only when its loss on
 *     the held-out samples' moments is below round to nearest's there, else the whole layer
 *     rounds to nearest; a layer that keeps it learns again on all samples (the check judges
 *     the method on the layer, the final rounding uses every sample). Weight-only bias
 *     correction likewise: a layer's correction (its
 *     channels' mean errors on the learning samples) is kept only when it brings the held-out
 *     samples' mean errors closer to zero (sum of squares over channels); it is then measured
 *     on all samples.
 */
#ifndef OQ_ROUNDING_H
#define OQ_ROUNDING_H

#include <stdio.h>

#include "calib/biascorr/biascorr.h"
#include "calib/calibrate.h"
#include "passes/quantize/qweight.h"

/* AdaRound's rectified sigmoid (Nagel et al. 2020). */
#define OQ_ADAROUND_ZETA 1.1f
#define OQ_ADAROUND_GAMMA (-0.1f)

/* Greedy sweeps after AdaRound: single weights flip while a flip lowers their row's loss. */
#define OQ_ADAROUND_POLISH 8
/* A layer's AdaRound steps shrink (not below OQ_ADAROUND_MIN_ITERS) so that their products stay
 * within OQ_ADAROUND_WORK operations (2 rows K^2, or 4 rows K N through N patches, a step). */
#define OQ_ADAROUND_WORK 2e11
#define OQ_ADAROUND_MIN_ITERS 50

/* The covariances in A and E[x~ x^T] are shrunk this much towards their diagonals: a layer's
 * calibration positions are few and strongly correlated, and the raw moments let the rounding
 * fit directions that held-out inputs do not share. */
#define OQ_WR_SHRINK 0.1

/* Candidates of sequential MSE: range fractions 1, 0.99, ... */
#define OQ_SEQMSE_CANDIDATES 50

/* AdaRound settings. */
typedef struct oq_adaround_opts {
	int iters;           /* Adam steps (full batch) */
	float lr;            /* Adam learning rate */
	float lambda;        /* regulariser weight (0.01) */
	float beta_hi, beta_lo; /* regulariser exponent, annealed from hi to lo (20 -> 2) */
	float warm;          /* fraction of the steps without the regulariser (0.2) */
} oq_adaround_opts;

/* The defaults onnxq uses. */
void oq_adaround_defaults(oq_adaround_opts *o);

/*
 * One reconstruction problem: `rows` output channels of K weights reading the same inputs.
 * Row-major arrays; per element its grid scale S and zero point Z (as floats), grid
 * [qmin, qmax]. Per row m the loss is w~^T A w~ - 2 w~^T T[m] (A symmetric, positive
 * semi-definite).
 */
typedef struct oq_wr_problem {
	size_t K, rows;
	const float *A;      /* K x K */
	const float *T;      /* rows x K */
	const float *W;      /* rows x K: the float weights */
	const float *S;      /* rows x K */
	const float *Z;      /* rows x K */
	float qmin, qmax;
	const float *X;      /* N x K centred patches with A = (1 - alpha) X^T X / N + alpha
			      * diag(X^T X / N) + mu mu^T, or NULL: the solvers' repeated products
			      * use X when N < K (cheaper) */
	size_t N;
	float alpha;
	const float *mu;     /* K: the patches' mean, or NULL (a zero mean) */
} oq_wr_problem;

/*
 * AdaRound on p: up[rows * K] receives each weight's direction (1: floor(w/s) + 1, 0: floor);
 * rows whose learned loss is not below nearest's get nearest's directions. *l_near and *l_out
 * (may be NULL) receive the summed losses of nearest and of the result, *n_kept the rows
 * that kept their learned rounding. Rows are solved in fixed chunks (one per pool item), so
 * the result does not depend on the thread count. OQ_ENOMEM.
 */
int oq_adaround(const oq_wr_problem *p, const oq_adaround_opts *o, struct oq_pool *pool, uint8_t *up,
		double *l_near, double *l_out, size_t *n_kept) OQ_WUR;

/*
 * Sequential MSE on p (S and Z unused): element e of the rows belongs to scale group grp[e]
 * (< ngroups; a group lies inside one row), whose candidate c (< ncand) has scale
 * cs[g * ncand + c] and zero point cz[g * ncand + c]; candidate 0 is nearest's grid. choice[g]
 * receives each group's candidate (0 when no candidate lowers the row's loss). Losses as
 * oq_adaround. OQ_ENOMEM.
 */
int oq_seqmse(const oq_wr_problem *p, const size_t *grp, size_t ngroups, size_t ncand, const float *cs,
	      const float *cz, struct oq_pool *pool, size_t *choice, double *l_near, double *l_out,
	      size_t *n_kept) OQ_WUR;

/* The per-row loss of p at weights Wq (rows x K, e.g. dequantized), summed over rows (double). */
double oq_wr_loss(const oq_wr_problem *p, const float *Wq);

/*
 * Learns the rounding (o->weight_rounding) of every weight the quantize pass, or weight-only
 * mode, will quantize in m (after the rewrites), on the calibration samples of co (a folder:
 * source, limit, threads; progress to log). *out receives one entry per learned weight, for
 * oq_opts.learned. With bias (weight-only only: its biases stay float) every layer's bias
 * also absorbs its measured mean output error (float model vs the model quantized so far,
 * activations float), changing m: Conv/Gemm without a bias get one; a MatMul's bias is the
 * Add of a per-channel constant right after it, if any. With o->weight_rounding
 * OQ_WROUND_NEAREST only that correction is made. OQ_EUSAGE without a sample folder.
 */
int oq_wround_learn(oq_model *m, const oq_opts *o, const oq_calib_opts *co, int bias, oq_wlearned_set *out,
		    FILE *log, oq_diag *d) OQ_WUR;

/*
 * The same, with the bias corrections also given back in *shifts (may be NULL): one entry per
 * layer whose correction the held-out guard kept, as the mean output shift the weights cause
 * (quantized - float, activations float) that the bias must absorb: what empirical bias
 * correction folds (calib/biascorr/biascorr.h). W8A8 learns on a copy this way and hands the
 * shifts to empirical bias correction, which judges them on the whole quantized model.
 */
int oq_wround_learn_shifts(oq_model *m, const oq_opts *o, const oq_calib_opts *co, int bias,
			   oq_wlearned_set *out, oq_biascorr_shifts *shifts, FILE *log, oq_diag *d) OQ_WUR;

#endif
