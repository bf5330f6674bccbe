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
