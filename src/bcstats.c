/*
 * bcstats.c - bias-correction statistics (see bcstats.h).
 */
#include "bcstats.h"

#include <math.h>
#include <stdlib.h>

void oq_bc_stats_free(oq_bc_stats *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].sum);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

void oq_bce_free(oq_bce *b)
{
	for (size_t i = 0; i < b->n; i++) {
		free(b->v[i].node);
		free(b->v[i].measured);
		free(b->v[i].corr);
		free(b->v[i].sum_f);
		free(b->v[i].sum_q);
	}
	free(b->v);
	b->v = NULL;
	b->n = 0;
}

double oq_bce_sqnr_min(const oq_bce_sqnr *s, unsigned folds)
{
	double m = NAN;
	for (int f = 0; f < OQ_BCE_FOLDS; f++)
		if ((folds >> f & 1u) && s->n[f])
			m = isnan(m) || s->min[f] < m ? s->min[f] : m;
	return m;
}

double oq_bce_sqnr_mean(const oq_bce_sqnr *s, unsigned folds)
{
	double sum = 0;
	size_t n = 0;
	for (int f = 0; f < OQ_BCE_FOLDS; f++)
		if (folds >> f & 1u) {
			sum += s->sum[f];
			n += s->n[f];
		}
	return n ? sum / (double)n : NAN;
}

int oq_bce_sqnr_better(const oq_bce_sqnr *cand, const oq_bce_sqnr *base, unsigned folds)
{
	double cm = oq_bce_sqnr_mean(cand, folds), bm = oq_bce_sqnr_mean(base, folds);
	double cn = oq_bce_sqnr_min(cand, folds), bn = oq_bce_sqnr_min(base, folds);
	/* comparisons with NaN are false: no pairs, no improvement */
	return cm > bm && cn >= bn;
}
