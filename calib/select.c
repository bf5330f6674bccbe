/*
 * select.c - from observed statistics to one range per value: min/max, the
 * moving average, or a histogram method's selection (histogram.h), --method
 * auto's choice on the folds (folds.h), rounded outwards to float.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/calibrate_internal.h"
#include "calib/folds.h"
#include "src/quant/qparams.h"

static int cmp_range(const void *a, const void *b)
{
	return strcmp(((const oq_range *)a)->name, ((const oq_range *)b)->name);
}

/* Largest float <= x (x finite double); +-FLT_MAX beyond float's range. */
static float down_f(double x)
{
	float f;
	if (x <= -(double)FLT_MAX)
		return -FLT_MAX;
	if (x >= (double)FLT_MAX)
		return FLT_MAX;
	f = (float)x;
	return (double)f > x ? nextafterf(f, -INFINITY) : f;
}

static float up_f(double x)
{
	return -down_f(-x);
}

/* Entropy's target bins on a grid of `bits` bits, 0 when there are more than it accepts. */
static int entropy_target(int bits)
{
	return bits >= 2 && bits <= 16 && 1 << (bits - 1) <= OQ_ENTROPY_MAX_TARGET ? 1 << (bits - 1)
	                                                                           : 0;
}

/* The activation grid of value i: o->grid's answer, else the global --act-type / --act-symmetric. */
static int grid_of(const calib *c, const oq_calib_opts *o, size_t i, int *dtype, int *sym, oq_diag *d)
{
	*dtype = o->act_type ? o->act_type : OQ_DT_UINT8;
	*sym = o->act_sym;
	return o->grid ? o->grid(o->grid_ctx, c->vals[i], dtype, sym, d) : OQ_OK;
}

/* A histogram selection collect() runs for one tensor (pick_prep says which, pick_sel runs it). */
typedef struct sel {
	size_t i;              /* the value */
	int need;              /* a histogram selection runs (pick_sel); 0: lo, hi are final */
	int dtype, form, bits; /* its activation grid */
	double lo, hi;         /* the exact range (or the method's, without a selection); out: the
				* method's */
	int rc;                /* pick_sel's status (OQ_OK, OQ_ENOMEM, OQ_EINVAL) */
	oq_auto pick;          /* --method auto with folds: its choice (pick.folds 0: unmeasured) */
} sel;

/*
 * x for value i (finite values were seen): the method's range in x->lo, x->hi when it needs no
 * histogram selection (minmax, ema, no histogram, or one the quantize pass does not read),
 * otherwise x->need = 1 and the selection's grid. The checks that can fail are here, in value
 * order, so the first error is the same whatever runs the selections.
 */
static int pick_prep(const calib *c, const oq_calib_opts *o, size_t i, sel *x, oq_diag *d)
{
	const tstat *s = &c->st[i];
	const oq_hist *h = c->h ? &c->h[i] : NULL;
	const char *name = c->vals[i]->name;
	int dtype, sym, form, bits, rc;

	memset(x, 0, sizeof *x);
	x->i = i;
	x->lo = s->lo;
	x->hi = s->hi;
	if (c->method == OQ_CALIB_EMA && c->em[i].init) {
		x->lo = c->em[i].lo;
		x->hi = c->em[i].hi;
		return OQ_OK;
	}
	if (!h)
		return OQ_OK; /* minmax */
	if (!c->track[i]) {
		/* only from a statistics file calibrated with other options (one machine keeps what
		 * hist_need asks for) */
		if (!o->hist_need || o->hist_need[i])
			return oq_err(d, OQ_EINVAL,
			              "calibrate: the statistics have no histogram for tensor '%s', "
			              "whose range quantize needs: run calibrate with the same "
			              "--include, --exclude, --overrides and --profile as quantize",
			              name);
		return OQ_OK; /* the quantize pass does not read this range */
	}
	if (!oq_hist_has_bins(h)) /* no non-zero value: min/max is the range */
		return OQ_OK;
	if ((rc = grid_of(c, o, i, &dtype, &sym, d)))
		return rc;
	form = oq_act_form(sym, s->lo);
	bits = oq_dtype_bits(dtype);
	if (c->method == OQ_CALIB_ENTROPY && !entropy_target(bits))
		return oq_err(d, OQ_EUSAGE,
		              "calibrate: tensor '%s': --method entropy needs at most %d target bins; "
		              "its %s grid has 2^%d: use --method mse or percentile for it",
		              name, OQ_ENTROPY_MAX_TARGET, oq_dtype_name(dtype), bits - 1);
	x->need = 1;
	x->dtype = dtype;
	x->form = form;
	x->bits = bits;
	return OQ_OK;
}

/* --method auto on value x->i's folds (at most OQ_FOLDS_MAX). */
static int pick_auto(const calib *c, sel *x)
{
	oq_fold f[OQ_FOLDS_MAX];
	size_t n = c->n;

	for (size_t k = 0; k < c->nf; k++) {
		f[k].lo = c->fst[k * n + x->i].lo;
		f[k].hi = c->fst[k * n + x->i].hi;
		f[k].h = &c->fh[k * n + x->i];
	}
	return oq_auto_select(f, c->nf, x->dtype, x->form, entropy_target(x->bits), &x->pick);
}

/* Runs selection x (reads only c's histograms of x->i and o's settings: safe in parallel). */
static void pick_sel(const calib *c, const oq_calib_opts *o, sel *x)
{
	const tstat *s = &c->st[x->i];
	double lo, hi;
	int method = c->method;

	if (o->wide_auto && x->bits >= 16 && c->nf > 1 && method != OQ_CALIB_EMA)
		method = OQ_CALIB_AUTO;
	if (method == OQ_CALIB_AUTO && c->nf > 1) {
		if (!(x->rc = pick_auto(c, x))) {
			x->lo = x->pick.lo;
			x->hi = x->pick.hi;
		}
		return;
	}
	if (method == OQ_CALIB_AUTO) /* one sample: no held-out fold (folds.h) */
		method = OQ_CALIB_MSE;
	/* entropy with fewer bins than targets (only when OQ_HIST_EMIN clamped the grid, max|x| <
	 * 2^(OQ_HIST_EMIN - 5), values that round to 0 on any grid anyway, or in an edited
	 * statistics file) keeps min/max */
	x->rc = oq_select_range(&c->h[x->i], s->lo, s->hi, method, x->dtype, x->form,
	                        o->percentile > 0 ? o->percentile : OQ_PERCENTILE,
	                        1 << (x->bits - 1), &lo, &hi);
	if (!x->rc) {
		x->lo = lo;
		x->hi = hi;
	}
}

/* The selections of collect(), handed out one tensor at a time over the pool. */
typedef struct seljob {
	const calib *c;
	const oq_calib_opts *o;
	sel *v;
} seljob;

static void sel_range(void *ctx, size_t begin, size_t end)
{
	seljob *j = ctx;
	for (size_t k = begin; k < end; k++)
		if (j->v[k].need)
			pick_sel(j->c, j->o, &j->v[k]);
}

/* --method auto's report on f: one line of counts; with o->verbose, each tensor's pick. */
static void auto_report(const calib *c, const oq_calib_opts *o, const sel *sv, size_t k, FILE *f)
{
	size_t nb[OQ_AUTO_BASES] = {0}, wide = 0, over = 0, unmeasured = 0, measured = 0;
	const char *sep = "";

	for (size_t q = 0; q < k; q++) {
		const oq_auto *p = &sv[q].pick;
		if (!sv[q].need)
			continue;
		if (!p->folds) {
			unmeasured++;
			continue;
		}
		measured++;
		nb[p->base]++;
		wide += p->widen > 0;
		over += p->exceed > 0.1;
		if (o->verbose)
			fprintf(f,
			        "calibrate: auto: '%s': %s x%g, range [%.6g, %.6g]; held-out values "
			        "beyond the other folds' min/max by %.1f %%\n",
			        c->vals[sv[q].i]->name, oq_auto_base_name(p->base),
			        oq_auto_widen[p->widen], sv[q].lo, sv[q].hi, 100 * p->exceed);
	}
	fprintf(f, "calibrate: auto (%zu folds): ", c->nf);
	for (int b = 0; b < OQ_AUTO_BASES; b++)
		if (nb[b]) {
			fprintf(f, "%s%zu %s", sep, nb[b], oq_auto_base_name(b));
			sep = ", ";
		}
	if (!measured)
		fputs("no tensor measured", f);
	fprintf(f, "; %zu widened", wide);
	if (unmeasured)
		fprintf(f, "; %zu mse without a fold to measure on", unmeasured);
	fprintf(f, "; %zu exceeded the other folds' range by > 10 %% on a held-out fold\n", over);
}

/*
 * One range per observed value into out, sorted by name. The histogram selections are
 * independent per tensor and run over c's pool when there is one; each writes only its own slot, so the ranges do not
 * depend on the thread count.
 */
int oq_calib_collect(const calib *c, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	size_t n = 0, k = 0;
	sel *sv = NULL; /* per value with a finite range, in value order */
	int rc = OQ_OK;

	for (size_t i = 0; i < c->n; i++)
		n += (size_t)c->st[i].seen;
	out->v = oq_calloc(n, sizeof *out->v);
	sv = oq_calloc(n, sizeof *sv);
	if (!out->v || !sv) {
		rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		goto done;
	}
	/* checks and grids in value order; the first failure is the error */
	for (size_t i = 0; i < c->n && !rc; i++)
		if (c->st[i].seen && c->st[i].lo <= c->st[i].hi)
			rc = pick_prep(c, o, i, &sv[k++], d);
	if (rc)
		goto done;
	if (k) {
		seljob sj = {c, o, sv};
		if (c->pool)
			oq_pool_run(c->pool, k, 1, sel_range, &sj);
		else
			sel_range(&sj, 0, k);
	}
	for (size_t q = 0; q < k; q++)
		if (sv[q].rc) {
			rc = oq_err(d, sv[q].rc, "calibrate: tensor '%s': %s range selection failed (%s)",
			            c->vals[sv[q].i]->name, oq_calib_method_name(c->method),
			            sv[q].rc == OQ_ENOMEM ? "out of memory" : "bad histogram");
			goto done;
		}
	if (c->method == OQ_CALIB_AUTO && c->nf > 1 && o->progress)
		auto_report(c, o, sv, k, o->progress);
	k = 0;
	for (size_t i = 0, q = 0; i < c->n; i++) {
		const tstat *s = &c->st[i];
		oq_range *r;
		if (!s->seen)
			continue;
		r = &out->v[k++];
		if (!(r->name = oq_strdup(c->vals[i]->name))) {
			rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
			goto done;
		}
		if (s->lo <= s->hi) {
			r->min = down_f(sv[q].lo);
			r->max = up_f(sv[q].hi);
			q++;
		} else {
			r->min = INFINITY; /* nothing finite was seen: min > max */
			r->max = -INFINITY;
		}
		r->n_nan = s->n_bad;
	}
done:
	free(sv);
	if (rc) {
		out->n = out->v ? n : 0; /* the names set so far (the rest are NULL) */
		oq_ranges_free(out);
		return rc;
	}
	out->n = k;
	if (k > 1)
		qsort(out->v, k, sizeof *out->v, cmp_range);
	return OQ_OK;
}
