/*
 * qtest.c - see qtest.h.
 */
#include "qtest.h"

#include <stdlib.h>
#include <string.h>

static int rng_cmp(const void *a, const void *b)
{
	return strcmp(((const oq_range *)a)->name, ((const oq_range *)b)->name);
}

oq_ranges mk_ranges(const rng *r, size_t n)
{
	oq_ranges out = {calloc(n ? n : 1, sizeof(oq_range)), n};
	if (!out.v) {
		out.n = 0;
		return out;
	}
	for (size_t i = 0; i < n; i++) {
		out.v[i].name = strdup(r[i].name);
		out.v[i].min = r[i].min;
		out.v[i].max = r[i].max;
	}
	qsort(out.v, n, sizeof(oq_range), rng_cmp);
	return out;
}
