/*
 * observe.h - calibration observers beyond min/max: fixed-range histograms
 * and the range-selection algorithms of REFERENCE.md section 4 (EMA,
 * percentile, entropy/KL, MSE). Every method ends in one [min, max] per
 * tensor (oq_ranges), so the quantize pass does not know which one ran.
 *
 * Histograms are filled in a second pass over the samples, over the exact
 * min/max range the first pass found, so a bin index is a pure function of
 * the value and the counts are integers: the same data in any order, split
 * or thread count gives bit-identical histograms and ranges. Memory is
 * O(tensors x bins) whatever the number of samples. Exact zeros are counted
 * apart from the bins (0 is representable on every grid, which the MSE
 * model uses; percentile and entropy put them back into their bin).
 *
 * The selection functions are pure (histogram in, range out) so tests can
 * pin them with hand-made histograms.
 */
#ifndef OQ_OBSERVE_H
#define OQ_OBSERVE_H

#include <stddef.h>
#include <stdint.h>

#include "oq.h"

/* --method */
enum {
	OQ_CALIB_MINMAX = 0, /* exact min/max over all samples (default) */
	OQ_CALIB_EMA,        /* moving average of per-sample min/max (order-dependent) */
	OQ_CALIB_PERCENTILE, /* cut (100-P)% of the mass (P/2 each side, or |x| when symmetric) */
	OQ_CALIB_ENTROPY,    /* TensorRT KL-divergence threshold search over |x| */
	OQ_CALIB_MSE,        /* least expected squared error (rounding + clipping) on the target grid */
};

#define OQ_HIST_BINS 2048           /* bins per tensor (>= 2048: entropy's candidate range) */
#define OQ_EMA_CONSTANT 0.01        /* --ema-constant default (PyTorch, ONNX Runtime) */
#define OQ_PERCENTILE 99.999        /* --percentile default (ONNX Runtime) */

/* "minmax", "ema", ... -> OQ_CALIB_*, or -1. */
int oq_calib_method_parse(const char *s);
const char *oq_calib_method_name(int method);

/* A histogram of one tensor's finite, non-zero values over a fixed range. */
typedef struct oq_hist {
	double lo, hi;   /* range the bins cover; lo = 0 for |x| histograms */
	double inv;      /* n / (hi - lo) */
	float lo_f, inv_f; /* lo and inv as the fill loop uses them (bin of x: (x - lo_f) * inv_f) */
	size_t n;        /* number of bins */
	int abs;         /* 1: counts |x| over [0, hi] (symmetric forms, entropy) */
	uint64_t *bin;   /* n counts, then 2 scratch slots for the fill loop (zeros, NaN/Inf) */
	uint64_t n_zero; /* exact zeros (+0 and -0), not in bin[] */
} oq_hist;

/* n bins over [lo, hi] (lo < hi, both finite; abs: lo must be 0). OQ_EINVAL / OQ_ENOMEM. */
int oq_hist_init(oq_hist *h, double lo, double hi, size_t n, int abs) OQ_WUR;
void oq_hist_free(oq_hist *h);
/* Adds the finite values of p (NaN/Inf skipped: the min/max pass counted them). */
void oq_hist_add_f32(oq_hist *h, const float *p, size_t n);
/* The same, one value at a time: the reference the fast fill is tested against. */
void oq_hist_add_f32_ref(oq_hist *h, const float *p, size_t n);

/*
 * Folds p[0..n) into *lo, *hi (finite values, -0 read as +0) and counts NaN/Inf in *bad.
 * *lo, *hi, *bad carry over between calls (start from +Inf, -Inf, 0).
 */
void oq_minmax_f32(const float *p, size_t n, float *lo, float *hi, uint64_t *bad);
void oq_minmax_f32_ref(const float *p, size_t n, float *lo, float *hi, uint64_t *bad);

/* 1 (default): oq_hist_add_f32 and oq_minmax_f32 use AVX-512 when the CPU has it; 0: plain C
 * (tests check both paths against the references). */
extern int oq_hist_simd;
void oq_hist_add_f64(oq_hist *h, const double *p, size_t n);

/* One EMA step: the first call (*init == 0) takes [blo, bhi]; later ones move by c. */
void oq_ema_update(double *lo, double *hi, int *init, double blo, double bhi, double c);

/*
 * Range selection. lo/hi: the tensor's observed finite min/max (what the
 * histogram was built over); results are clipped to them.
 *  percentile: signed histogram -> cut at most (100-p)/2 % of the values on
 *    each side (range ends on bin edges); |x| histogram -> the smallest edge t
 *    keeping at least p % of the values, range [-t, t].
 *  entropy: |x| histogram; target = 2^(b-1) bins (128 for 8 bits); OQ_EINVAL
 *    when the histogram has fewer bins than target.
 *  mse: dtype = activation type (integer or float8e4m3fn), form = the
 *    oq_qparams form the quantize pass uses; a |x| histogram exactly when
 *    oq_qform_mirrored(dtype, form), else a signed one (OQ_EINVAL otherwise);
 *    see observe.c for the error model.
 */
void oq_select_percentile(const oq_hist *h, double lo, double hi, double p, double *out_lo,
			  double *out_hi);
int oq_select_entropy(const oq_hist *h, double lo, double hi, int target, double *out_lo,
		      double *out_hi) OQ_WUR;
int oq_select_mse(const oq_hist *h, double lo, double hi, int dtype, int form, double *out_lo,
		  double *out_hi) OQ_WUR;

#endif
