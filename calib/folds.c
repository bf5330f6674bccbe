/*
 * folds.c - held-out folds and --method auto (see folds.h for the contract).
 *
 * A candidate is a rule (base method, widening factor), not a range: each
 * fold applies the rule to the statistics of the other folds and the
 * held-out error of that range is what the rule costs there. So a rule that
 * fits the calibration samples too tightly (a min/max that the next image
 * exceeds, a percentile that cuts a regression head's tail) pays for it on
 * the fold it did not see, and a widened range pays its coarser rounding on
 * every fold.
 *
 * Widening by w moves each end away from 0: [a, b] -> [a w, b w] for
 * a < 0 < b (an end at or beyond 0 stays), saturated at +-FLT_MAX. The
 * quantize pass includes 0 in every range, so this is the range's scale
 * times w with its zero point kept where it was relative to the ends.
 *
 * The training statistics of fold f are the exact merge of the other
 * folds' histograms (histogram.h: both at the larger grid, counts added)
 * and the min/max of their extremes; the held-out error reads fold f's own
 * histogram on its own grid (its bins cover fold f's values; the candidate
 * range may end anywhere inside or beyond them).
 */
#include "calib/folds.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/quant/qparams.h"

const double oq_auto_widen[OQ_AUTO_WIDEN] = {1, 1.1, 1.25, 1.5, 2};

static const char *const base_names[OQ_AUTO_BASES] = {"minmax", "mse", "percentile 99.999",
						      "percentile 99.99", "entropy"};

const char *oq_auto_base_name(int base)
{
	return base >= 0 && base < OQ_AUTO_BASES ? base_names[base] : "?";
}

size_t oq_folds_count(size_t requested, size_t n)
{
	size_t k = requested ? requested : OQ_FOLDS_DEFAULT, half = n / 2 > 2 ? n / 2 : 2;

	if (n < 2)
		return 1;
	return k < half ? k : half;
}

size_t oq_folds_begin(size_t f, size_t n, size_t k)
{
	/* f n / k = f (n / k) + f (n % k) / k, and f (n % k) < k^2 does not overflow */
	return f * (n / k) + f * (n % k) / k;
}

size_t oq_folds_of(size_t i, size_t n, size_t k)
{
	size_t f = 0;

	while (f + 1 < k && oq_folds_begin(f + 1, n, k) <= i)
		f++;
	return f;
}

/* The base method of candidate b and its percentile. */
static int base_method(int b, double *p)
{
	static const int m[OQ_AUTO_BASES] = {OQ_CALIB_MINMAX, OQ_CALIB_MSE, OQ_CALIB_PERCENTILE,
					     OQ_CALIB_PERCENTILE, OQ_CALIB_ENTROPY};
	*p = b == OQ_AUTO_P9999 ? 99.99 : 99.999;
	return m[b];
}

static double sat(double x)
{
	return x > FLT_MAX ? FLT_MAX : x < -FLT_MAX ? -FLT_MAX : x;
}

/* [a, b] widened by w (see the header). */
static void widen(double a, double b, double w, double *wa, double *wb)
{
	*wa = a < 0 ? sat(a * w) : a;
	*wb = b > 0 ? sat(b * w) : b;
}

/* The range of candidate base b from h over [lo, hi]; OQ_EINVAL when it has none. */
static int base_range(const oq_hist *h, double lo, double hi, int b, int dtype, int form,
		      int target, double *a, double *z)
{
	double p;
	int m = base_method(b, &p);

	if (m == OQ_CALIB_ENTROPY && !target)
		return OQ_EINVAL;
	return oq_select_range(h, lo, hi, m, dtype, form, p, target, a, z);
}


/*
 * Candidate [*a, *b] as the held-out bins v (of a fold whose values span [lo, hi]) are charged
 * for it: on |x| bins, [-t, t]. The error model spreads each bin's count over the whole bin, so
 * the end bins reach past the fold's extremes, and a range ending exactly at the fold's max
 * would be charged for clipping values that do not exist (heavily when many values sit at the
 * max: a saturated activation, a white background). An end that covers the fold's extreme is
 * moved to the bins' edge: such a range clips nothing, and its step grows by less than one bin
 * width over its span.
 */
static void cover(const oq_hbins *v, double lo, double hi, double *a, double *b)
{
	if (v->abs) {
		double t = fmax(-*a, *b), amax = fmax(-lo, hi);
		if (t >= amax)
			t += v->hi - amax;
		*a = -t;
		*b = t;
		return;
	}
	if (*b >= hi)
		*b += v->hi - hi;
	if (*a <= lo)
		*a -= lo - v->lo;
}

/* Fold f of k held out: the candidates' ranges from the others, their errors on f added to
 * out->err. *measured: 0 when f or the others have no value other than 0. */
static int one_fold(const oq_fold *f, size_t k, size_t fi, int dtype, int form, int target,
		    oq_auto *out, int *usable, int *measured)
{
	oq_hist tr;
	oq_hbins v;
	double lo = INFINITY, hi = -INFINITY, amax;
	double ca[OQ_AUTO_BASES * OQ_AUTO_WIDEN], cb[OQ_AUTO_BASES * OQ_AUTO_WIDEN]; /* candidates */
	double e[OQ_AUTO_BASES * OQ_AUTO_WIDEN], cl[OQ_AUTO_BASES * OQ_AUTO_WIDEN];
	int slot[OQ_AUTO_BASES * OQ_AUTO_WIDEN]; /* base x OQ_AUTO_WIDEN + widening */
	size_t nc = 0;
	int mirrored = oq_qform_mirrored(dtype, form), rc = OQ_OK;

	*measured = 0;
	oq_hist_init(&tr);
	memset(&v, 0, sizeof v);
	for (size_t g = 0; g < k; g++) {
		if (g == fi)
			continue;
		lo = f[g].lo < lo ? f[g].lo : lo;
		hi = f[g].hi > hi ? f[g].hi : hi;
		if ((rc = oq_hist_merge(&tr, f[g].h)))
			goto done;
	}
	if (!oq_hist_has_bins(&tr) || !oq_hist_has_bins(f[fi].h) || !(f[fi].lo <= f[fi].hi))
		goto done;
	if ((rc = oq_hist_view(f[fi].h, f[fi].lo, f[fi].hi, mirrored, &v)))
		goto done;
	*measured = 1;
	amax = fmax(-lo, hi);
	if (amax > 0) {
		double ex = fmax(fmax(f[fi].hi - hi, lo - f[fi].lo), 0) / amax;
		out->exceed = ex > out->exceed ? ex : out->exceed;
	}
	for (int b = 0; b < OQ_AUTO_BASES; b++) {
		double a, z;
		if (!usable[b])
			continue;
		if ((rc = base_range(&tr, lo, hi, b, dtype, form, target, &a, &z))) {
			if (rc != OQ_EINVAL)
				goto done;
			usable[b] = 0; /* not a candidate on every fold: not one at all */
			rc = OQ_OK;
			continue;
		}
		for (int w = 0; w < OQ_AUTO_WIDEN; w++) {
			widen(a, z, oq_auto_widen[w], &ca[nc], &cb[nc]);
			cover(&v, f[fi].lo, f[fi].hi, &ca[nc], &cb[nc]);
			slot[nc++] = b * OQ_AUTO_WIDEN + w;
		}
	}
	if ((rc = oq_mse_errors(&v, nc, ca, cb, dtype, form, e, cl)))
		goto done;
	for (size_t q = 0; q < nc; q++)
		out->err[slot[q] / OQ_AUTO_WIDEN][slot[q] % OQ_AUTO_WIDEN] +=
		    e[q] + (OQ_AUTO_CLIP_WEIGHT - 1) * cl[q];
done:
	oq_hbins_free(&v);
	oq_hist_free(&tr);
	return rc;
}

int oq_auto_select(const oq_fold *f, size_t k, int dtype, int form, int target, oq_auto *out)
{
	oq_hist all;
	double lo = INFINITY, hi = -INFINITY, best = INFINITY, a, z;
	int usable[OQ_AUTO_BASES], rc = OQ_OK;

	memset(out, 0, sizeof *out);
	out->base = OQ_AUTO_MSE;
	oq_hist_init(&all);
	for (int b = 0; b < OQ_AUTO_BASES; b++)
		usable[b] = b != OQ_AUTO_ENTROPY || target > 0;
	for (size_t g = 0; g < k; g++) {
		lo = f[g].lo < lo ? f[g].lo : lo;
		hi = f[g].hi > hi ? f[g].hi : hi;
		if ((rc = oq_hist_merge(&all, f[g].h)))
			goto done;
	}
	out->lo = lo;
	out->hi = hi;
	if (!oq_hist_has_bins(&all)) {
		rc = OQ_EINVAL;
		goto done;
	}
	for (size_t g = 0; g < k; g++) {
		int measured;
		if ((rc = one_fold(f, k, g, dtype, form, target, out, usable, &measured)))
			goto done;
		out->folds += (size_t)measured;
	}
	for (int b = 0; b < OQ_AUTO_BASES; b++)
		for (int w = 0; w < OQ_AUTO_WIDEN; w++)
			if (!usable[b] || !out->folds)
				out->err[b][w] = INFINITY;
	/* widening outer, bases inner: a tie keeps the least widening, then the earlier base */
	for (int w = 0; w < OQ_AUTO_WIDEN && out->folds; w++)
		for (int b = 0; b < OQ_AUTO_BASES; b++)
			if (out->err[b][w] < best) {
				best = out->err[b][w];
				out->base = b;
				out->widen = w;
			}
	if ((rc = base_range(&all, lo, hi, out->base, dtype, form, target, &a, &z)))
		goto done;
	widen(a, z, oq_auto_widen[out->widen], &out->lo, &out->hi);
done:
	oq_hist_free(&all);
	return rc;
}
