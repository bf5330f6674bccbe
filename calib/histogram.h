/*
 * histogram.h - calibration observers beyond min/max: the per-tensor
 * histogram and the range-selection algorithms (EMA, percentile,
 * entropy/KL, MSE; histogram.c describes each). Every method ends in one
 * [min, max] per tensor (oq_ranges), so the quantize pass does not know
 * which one ran.
 *
 * The histogram (oq_hist) is filled in the same pass as the min/max scan,
 * on a grid that depends on the data alone: OQ_HIST_SIDE bins per sign,
 * bin k of a side holding |x| in [k w, (k+1) w) with w = 2^e / OQ_HIST_SIDE
 * and 2^e the smallest power of two above every |x| seen so far. A value's
 * bin is floor(|x| 2^(log2 SIDE - e)), a scaling by a power of two (exact
 * in float), and when a larger |x| raises e to e + s, bin k moves to
 * k >> s: exactly where its values fall on the new grid. So the counts are
 * a function of the multiset of values: the same in any order, batching,
 * thread count or shard split, and two histograms merge exactly (both at
 * the larger e, added). Exact zeros are counted apart (0 is on every grid;
 * the MSE model uses that; percentile puts them back into their bin);
 * NaN/Inf are skipped (the min/max scan counts them). Memory is
 * O(tensors x bins) whatever the number of samples; the bins are zeroed
 * at allocation and written only where a count lands (fill, merge, regrid,
 * drain), so the pages of a side no value reaches (the negative side of a
 * Relu's output) are never touched and take no resident memory.
 *
 * Range selection reads an oq_hbins: a run of equal-width bins over a fixed
 * range (oq_hist_view cuts it out of a histogram: the bins from the one
 * holding min to the one holding max, or the two sides added for |x|).
 * The selection functions are pure (bins in, range out) so tests can pin
 * them with hand-made bins.
 */
#ifndef OQ_OBSERVE_H
#define OQ_OBSERVE_H

#include <stddef.h>
#include <stdint.h>

#include "src/oq.h"

/* --method */
enum {
	OQ_CALIB_MINMAX = 0, /* exact min/max over all samples (default) */
	OQ_CALIB_EMA,        /* moving average of per-sample min/max (order-dependent) */
	OQ_CALIB_PERCENTILE, /* cut (100-P)% of the mass (P/2 each side, or |x| when symmetric) */
	OQ_CALIB_ENTROPY,    /* TensorRT KL-divergence threshold search over |x| */
	OQ_CALIB_MSE,        /* least expected squared error (rounding + clipping) on the target grid */
	OQ_CALIB_AUTO,       /* per tensor, the method (and headroom) with the least error on
			      * held-out folds of the samples (calib/folds.h) */
};

#define OQ_HIST_LOG2 12                   /* log2 of the bins per side */
#define OQ_HIST_SIDE (1 << OQ_HIST_LOG2)  /* bins per side: the dominant side's data range
					   * [0, max|x|] spans more than SIDE / 2 of them */
#define OQ_HIST_EMIN (OQ_HIST_LOG2 - 127) /* smallest e: 2^(LOG2 - e) stays a normal float */
#define OQ_HIST_EMAX 128                  /* every finite float is below 2^128 */
#define OQ_EMA_CONSTANT 0.01        /* --ema-constant default (PyTorch, ONNX Runtime) */
#define OQ_PERCENTILE 99.999        /* --percentile default (ONNX Runtime) */
#define OQ_ENTROPY_MAX_TARGET (OQ_HIST_SIDE / 2 / 8) /* the most target bins entropy accepts: 8
					   * groups of bins at least, as TensorRT's 128 targets over
					   * 2048 bins (a view has more than OQ_HIST_SIDE / 2 bins) */

/* "minmax", "ema", ... -> OQ_CALIB_*, or -1. */
int oq_calib_method_parse(const char *s);
const char *oq_calib_method_name(int method);

/*
 * The histogram of one tensor's finite values (see the header comment). The counts are held in
 * 32 bits (b32) while they must fit: `bound`, an upper bound of their sum (every value handed to
 * a fill, the bounds of merged histograms), stays at most oq_hist_narrow_max; the histogram that
 * would pass it moves to 64-bit counts (b64) first, once and for good. Either holds the same
 * counts: the width is memory, never a result (a calibration's tensors rarely see 2^32 values,
 * so most histograms take half the bytes).
 */
typedef struct oq_hist {
	int e;           /* grid exponent: a side's bins cover [0, 2^e); OQ_HIST_EMIN while no bins */
	uint32_t *b32;   /* 2 * SIDE counts, [0, SIDE) for x > 0, [SIDE, 2 SIDE) for x < 0 (bin k:
			  * |x| in [k w, (k+1) w)), then 2 scratch slots of the fill; NULL until the
			  * first finite non-zero value, or when b64 holds them */
	uint64_t *b64;   /* the same in 64 bits (NULL while b32 will do) */
	uint64_t bound;  /* b32: at least the sum of its counts (<= oq_hist_narrow_max) */
	uint64_t n_zero; /* exact zeros (+0 and -0), not in the bins */
} oq_hist;

/* UINT32_MAX: the largest bound of a histogram with 32-bit counts (tests lower it to check the
 * move to 64 bits). */
extern uint64_t oq_hist_narrow_max;

/* Whether h has bins (a finite non-zero value was counted, or a grid was set). */
static inline int oq_hist_has_bins(const oq_hist *h)
{
	return h->b32 || h->b64;
}
/* Count of bin k of h (k < 2 * OQ_HIST_SIDE; 0 without bins). */
static inline uint64_t oq_hist_at(const oq_hist *h, size_t k)
{
	return h->b64 ? h->b64[k] : h->b32 ? h->b32[k] : 0;
}
/* h's bins as 64-bit counts to write into directly (a file's counts, a test's): moves h to 64
 * bits, or allocates them on grid e when h has none (e is ignored otherwise). NULL: out of
 * memory. oq_hist_fit after
 * the writes gives back the 32-bit form where the counts allow. */
uint64_t *oq_hist_wide_bins(oq_hist *h, int e);
/* 32-bit counts again when their sum fits (else, or without memory for it, h stays as it is). */
void oq_hist_fit(oq_hist *h);

void oq_hist_init(oq_hist *h);
void oq_hist_free(oq_hist *h);
/* The smallest e >= OQ_HIST_EMIN with 2^e > a (a finite, > 0). */
int oq_hist_exponent(double a);
/* Allocates the bins (OQ_ENOMEM) and raises the exponent to at least e, merging bins as it goes. */
int oq_hist_reserve(oq_hist *h, int e) OQ_WUR;
/*
 * Adds p[0..n). amax: the largest |x| of p's finite values (max(-lo, hi) of oq_minmax_f32; 0
 * when there are none), which fixes the grid before the fill (an index past the grid is clamped
 * to its last bin, so a wrong amax gives a wrong histogram, never a stray write). OQ_ENOMEM when
 * the bins cannot be allocated.
 */
int oq_hist_add_f32(oq_hist *h, const float *p, size_t n, float amax) OQ_WUR;
/* The same one value at a time, raising e at each larger |x|: the reference the fast fill is
 * tested against. */
int oq_hist_add_f32_ref(oq_hist *h, const float *p, size_t n) OQ_WUR;
/* Doubles, rounded to float (finite values beyond float's range saturate to +-FLT_MAX). */
int oq_hist_add_f64(oq_hist *h, const double *p, size_t n) OQ_WUR;
/* a += b, exactly (both at the larger e). OQ_ENOMEM, or OQ_EINVAL when a count overflows. */
int oq_hist_merge(oq_hist *a, const oq_hist *b) OQ_WUR;
/* h, whose bins are all zero (new, or emptied by oq_hist_drain), on grid exponent e (allocating
 * the bins if needed). OQ_ENOMEM. */
int oq_hist_regrid(oq_hist *h, int e) OQ_WUR;
/* dst += src bin by bin, then src's counts are zero. Both on one grid (src set up by
 * oq_hist_regrid to dst->e, or src without bins) and counts of values actually scanned (no
 * overflow check: 2^64 values are out of reach). OQ_ENOMEM when dst must move to 64 bits and
 * cannot (src then unchanged). */
int oq_hist_drain(oq_hist *dst, oq_hist *src) OQ_WUR;
/* dst = a copy of src (dst uninitialised). OQ_ENOMEM. */
int oq_hist_copy(oq_hist *dst, const oq_hist *src) OQ_WUR;

/*
 * Folds p[0..n) into *lo, *hi (finite values, -0 read as +0) and counts NaN/Inf in *bad.
 * *lo, *hi, *bad carry over between calls (start from +Inf, -Inf, 0).
 */
void oq_minmax_f32(const float *p, size_t n, float *lo, float *hi, uint64_t *bad);
void oq_minmax_f32_ref(const float *p, size_t n, float *lo, float *hi, uint64_t *bad);

/* 1 (default): oq_hist_add_f32 and oq_minmax_f32 use AVX-512 when the CPU has it, else AVX2; 2:
 * at most AVX2; 0: plain C (tests check every path against the references). */
extern int oq_hist_simd;
/* 1 (default): the AVX-512 fill counts a 16-value vector whose values share one bin at once; 0:
 * value by value (for the benchmark). Same counts either way. */
extern int oq_hist_runs;

/* Equal-width bins over [lo, hi]: what the range selections read. */
typedef struct oq_hbins {
	double lo, hi;   /* range the bins cover (bin edges); lo = 0 for |x| bins */
	size_t n;        /* number of bins */
	int abs;         /* 1: counts of |x| */
	uint64_t *bin;   /* n counts */
	uint64_t n_zero; /* exact zeros, not in bin[] */
} oq_hbins;

/* n empty bins over [lo, hi] (lo < hi, finite; abs: lo must be 0). OQ_EINVAL / OQ_ENOMEM. */
int oq_hbins_init(oq_hbins *b, double lo, double hi, size_t n, int abs) OQ_WUR;
void oq_hbins_free(oq_hbins *b);
/*
 * The bins of h a selection reads for a tensor with finite range [lo, hi] (lo <= hi, what the
 * min/max scan found for the values h holds): abs 0, the signed bins from the one holding lo
 * to the one holding hi; abs 1, the |x| bins (both sides added) from 0 to the one holding
 * max(-lo, hi). Edges are multiples of h's bin width; the end bins may reach past lo / hi.
 * OQ_EINVAL when h has no bins, OQ_ENOMEM.
 */
int oq_hist_view(const oq_hist *h, double lo, double hi, int abs, oq_hbins *out) OQ_WUR;

/* One EMA step: the first call (*init == 0) takes [blo, bhi]; later ones move by c. */
void oq_ema_update(double *lo, double *hi, int *init, double blo, double bhi, double c);

/*
 * Range selection. lo/hi: the tensor's observed finite min/max (inside the
 * bins' range); results are clipped to them.
 *  percentile: signed bins -> cut at most (100-p)/2 % of the values on
 *    each side (range ends on bin edges); |x| bins -> the smallest edge t
 *    keeping at least p % of the values, range [-t, t].
 *  entropy: |x| bins; target = 2^(b-1) bins (128 for 8 bits); OQ_EINVAL
 *    when there are fewer bins than target.
 *  mse: dtype = activation type (integer or float8e4m3fn), form = the
 *    oq_qparams form the quantize pass uses; |x| bins exactly when
 *    oq_qform_mirrored(dtype, form), else signed ones (OQ_EINVAL otherwise);
 *    see histogram.c for the error model.
 */
void oq_select_percentile(const oq_hbins *h, double lo, double hi, double p, double *out_lo,
			  double *out_hi);
int oq_select_entropy(const oq_hbins *h, double lo, double hi, int target, double *out_lo,
		      double *out_hi) OQ_WUR;
int oq_select_mse(const oq_hbins *h, double lo, double hi, int dtype, int form, double *out_lo,
		  double *out_hi) OQ_WUR;

/*
 * The range `method` picks from h for a tensor whose finite values (those h holds) span [lo, hi],
 * on the grid (dtype, form), as --method does: OQ_CALIB_MINMAX gives [lo, hi]; percentile (p)
 * and mse read the |x| view exactly when oq_qform_mirrored(dtype, form), entropy always, with
 * `target` bins (a view with fewer bins keeps [lo, hi]). OQ_EINVAL for a method without a
 * selection, h without bins or a view that does not describe the grid; OQ_ENOMEM.
 */
int oq_select_range(const oq_hist *h, double lo, double hi, int method, int dtype, int form,
		    double p, int target, double *out_lo, double *out_hi) OQ_WUR;

/* 0 (default): oq_select_mse walks the grid levels without data-dependent branches; 1: one level
 * at a time with them, the reference (tests check both give the same bits). */
extern int oq_mse_ref;
/* The expected squared error oq_select_mse's model gives range [a, b] on the grid (dtype, form)
 * ([-b, b] for float8e4m3fn) into *err (+inf when the range has no qparams): what the search
 * compares, for tests. OQ_EINVAL / OQ_ENOMEM as oq_select_mse. */
int oq_mse_error(const oq_hbins *h, double a, double b, int dtype, int form, double *err) OQ_WUR;
/* The same for the n ranges [a[i], b[i]] into err[i] (one set of prefix sums for all), and
 * when clip is not NULL, the part of each error that values beyond the grid ends cause into
 * clip[i] (bin centres: a bin counts when its centre is beyond an end). */
int oq_mse_errors(const oq_hbins *h, size_t n, const double *a, const double *b, int dtype,
		  int form, double *err, double *clip) OQ_WUR;

#endif
