/*
 * folds.h - held-out folds of the calibration samples and --method auto.
 *
 * Folds: the n calibration samples (lexical order, after --calib-limit) are
 * cut into k contiguous blocks, fold f = samples [floor(f n / k),
 * floor((f + 1) n / k)). Contiguous, so a --calib-batch closes at a fold
 * boundary as it closes at a change of shape, and a shard (a contiguous
 * block of the same global order) records the statistics of sample i into
 * fold oq_folds_of(i) whatever its own range. k is --calib-folds (default
 * OQ_FOLDS_DEFAULT), lowered so that a fold holds two samples when there
 * are fewer than 2k (oq_folds_count); one sample has no folds.
 *
 * --method auto, per tensor (oq_auto_select): the candidates are the
 * ranges of minmax, mse, percentile 99.999 and 99.99 and entropy (when the
 * grid allows it), each also widened by the factors oq_auto_widen (both
 * ends moved away from 0). For every fold f that can measure (values other
 * than 0 in f and in the rest), each candidate's range is computed from the
 * merged statistics of the other folds and its error is the expected
 * squared error of mse's model (histogram.h oq_mse_errors: rounding inside
 * the range, clipping outside it) on fold f's histogram, on the tensor's
 * own grid, with the clipping part counted OQ_AUTO_CLIP_WEIGHT times: a
 * clipped value's error is systematic (all clipped values move toward the
 * range, the same way), so it adds up in the layers downstream, where the
 * independent zero-mean rounding errors partly cancel (the weight is
 * measured: docs/accuracy.md "--method auto"). The errors are summed over the
 * folds (so weighted by the values each fold holds). The least sum wins (ties: the least widening,
 * then minmax, mse, percentile 99.999, 99.99, entropy); its range is then
 * computed from all folds. Without a fold that measures, the pick is mse.
 * The inputs are integer counts and exact extremes, so the pick depends
 * only on the multiset of values of each fold: not on threads, batches,
 * sample lanes or shards.
 */
#ifndef OQ_FOLDS_H
#define OQ_FOLDS_H

#include <stddef.h>
#include <stdint.h>

#include "calib/histogram.h"

#define OQ_FOLDS_DEFAULT 4 /* --calib-folds default */
#define OQ_FOLDS_MAX 64    /* the most folds (memory: one histogram per fold and tensor) */

/* The folds n samples get for `requested` (0: OQ_FOLDS_DEFAULT): min(requested, max(2, n / 2))
 * for n >= 2, else 1 (no held-out fold). */
size_t oq_folds_count(size_t requested, size_t n);
/* The first sample of fold f of k over n samples: floor(f n / k) (no overflow for any n). */
size_t oq_folds_begin(size_t f, size_t n, size_t k);
/* The fold of sample i (i < n) of k folds over n samples. */
size_t oq_folds_of(size_t i, size_t n, size_t k);

/* --method auto's candidates: the base methods, then the widening factors. */
enum {
	OQ_AUTO_MINMAX = 0,
	OQ_AUTO_MSE,
	OQ_AUTO_P99999, /* percentile 99.999 */
	OQ_AUTO_P9999,  /* percentile 99.99 */
	OQ_AUTO_ENTROPY,
	OQ_AUTO_BASES
};
#define OQ_AUTO_WIDEN 5
#define OQ_AUTO_CLIP_WEIGHT 4 /* held-out clipping error counts this many times its square */
extern const double oq_auto_widen[OQ_AUTO_WIDEN]; /* 1 (as picked), 1.1, 1.25, 1.5, 2 */
const char *oq_auto_base_name(int base);

/* The statistics of one fold of one tensor. */
typedef struct oq_fold {
	double lo, hi;    /* exact finite min/max of the fold's values; lo > hi: none */
	const oq_hist *h; /* their histogram (h->bin NULL: no value other than 0) */
} oq_fold;

/* What oq_auto_select picked, and why. */
typedef struct oq_auto {
	int base, widen; /* the candidate: oq_auto_base_name(base) x oq_auto_widen[widen] */
	double lo, hi;   /* its range, from all folds */
	double err[OQ_AUTO_BASES][OQ_AUTO_WIDEN]; /* held-out error summed over the folds that
				  * measured; +inf: not a candidate (entropy on a grid of more than
				  * OQ_ENTROPY_MAX_TARGET targets, or a selection that failed) */
	size_t folds;    /* the folds that measured (0: the pick is mse x1, unmeasured) */
	double exceed;   /* how far held-out values reached beyond the min/max of the other folds,
			  * the largest over the folds, as a share of that range's max(|lo|, |hi|) */
} oq_auto;

/*
 * --method auto for one tensor of k folds f[0..k) on the grid (dtype, form) (form of the
 * tensor's whole range, oq_act_form). target: entropy's target bins, 0 when the grid has too
 * many for entropy to be a candidate. OQ_ENOMEM; OQ_EINVAL when no fold has values other than
 * 0 (the caller keeps min/max then) or the grid has no mse model.
 */
int oq_auto_select(const oq_fold *f, size_t k, int dtype, int form, int target,
		   oq_auto *out) OQ_WUR;

#endif
