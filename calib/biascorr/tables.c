/*
 * tables.c - the bias-correction tables: freeing them, and the SQNR
 * arithmetic behind the rule that keeps an empirical round (see tables.h).
 */
#include "calib/biascorr/tables.h"

#include <math.h>
#include <stdlib.h>

void oq_bc_sums_free(oq_bc_sums *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].sum);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

void oq_bc_targets_free(oq_bc_targets *b)
{
	for (size_t i = 0; i < b->n; i++) {
		free(b->v[i].node);
		free(b->v[i].measured);
		free(b->v[i].corr);
		free(b->v[i].sum_f);
		free(b->v[i].sum_fp);
		free(b->v[i].sum_q);
	}
	free(b->v);
	free(b->nonfinite);
	b->v = NULL;
	b->n = 0;
	b->nonfinite = NULL;
	b->n_samples = b->n_nonfinite = 0;
}

double oq_bc_sqnr_min(const oq_bc_sqnr *s, unsigned folds)
{
	double m = NAN;
	for (int f = 0; f < OQ_BC_FOLDS; f++)
		if ((folds >> f & 1u) && s->n[f])
			m = isnan(m) || s->min[f] < m ? s->min[f] : m;
	return m;
}

double oq_bc_sqnr_mean(const oq_bc_sqnr *s, unsigned folds)
{
	double sum = 0;
	size_t n = 0;
	for (int f = 0; f < OQ_BC_FOLDS; f++)
		if (folds >> f & 1u) {
			sum += s->sum[f];
			n += s->n[f];
		}
	return n ? sum / (double)n : NAN;
}

int oq_bc_sqnr_better(const oq_bc_sqnr *cand, const oq_bc_sqnr *base, unsigned folds)
{
	double cm = oq_bc_sqnr_mean(cand, folds), bm = oq_bc_sqnr_mean(base, folds);
	double cn = oq_bc_sqnr_min(cand, folds), bn = oq_bc_sqnr_min(base, folds);
	/* comparisons with NaN are false: no pairs, no improvement */
	return cm > bm && cn >= bn;
}

void oq_bc_sqnr_gain(const oq_bc_sqnr *cand, const oq_bc_sqnr *base, unsigned folds, double *mean, double *se)
{
	size_t n = cand->n_per < base->n_per ? cand->n_per : base->n_per, k = 0;
	double sum = 0, ss = 0, m;

	/* two passes: the mean, then the squared deviations from it */
	for (size_t i = 0; i < n; i++)
		if ((folds >> (i % OQ_BC_FOLDS) & 1u) && !isnan(cand->per[i]) && !isnan(base->per[i])) {
			sum += cand->per[i] - base->per[i];
			k++;
		}
	*mean = *se = NAN;
	if (!k)
		return;
	m = sum / (double)k;
	*mean = m;
	if (k < 2)
		return;
	for (size_t i = 0; i < n; i++)
		if ((folds >> (i % OQ_BC_FOLDS) & 1u) && !isnan(cand->per[i]) && !isnan(base->per[i])) {
			double e = cand->per[i] - base->per[i] - m;
			ss += e * e;
		}
	*se = sqrt(ss / (double)(k - 1) / (double)k);
}

void oq_bc_sqnr_free(oq_bc_sqnr *s)
{
	free(s->per);
	s->per = NULL;
	s->n_per = 0;
}

int oq_bc_sqnr_holds(const oq_bc_sqnr *cand, const oq_bc_sqnr *base, unsigned folds)
{
	double g, se;
	oq_bc_sqnr_gain(cand, base, folds, &g, &se);
	/* NaN (fewer than 2 samples) compares false */
	return oq_bc_sqnr_better(cand, base, folds) && g > OQ_BC_MARGIN * se;
}
