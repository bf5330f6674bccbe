/*
 * ranges.c - lookup in a sorted table of calibrated ranges.
 */
#include "src/quant/ranges.h"

#include <stdlib.h>
#include <string.h>

const oq_range *oq_ranges_find(const oq_ranges *r, const char *name)
{
	size_t lo = 0, hi = r ? r->n : 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(r->v[mid].name, name);
		if (c == 0)
			return &r->v[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

void oq_ranges_free(oq_ranges *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->v[i].name);
	free(r->v);
	r->v = NULL;
	r->n = 0;
}
