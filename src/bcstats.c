/*
 * bcstats.c - bias-correction statistics (see bcstats.h).
 */
#include "bcstats.h"

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
