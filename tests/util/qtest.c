/*
 * qtest.c - see qtest.h.
 */
#include "qtest.h"

#include <criterion/criterion.h>
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

void fx_load_prefer(fx *f, const rng *r, size_t nr, int prefer)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->gm, &f->m, &d), OQ_OK, "%s", d.msg);
	f->r = mk_ranges(r, nr);
	cr_assert_not_null(f->r.v);
	oq_opts_init(&f->o);
	f->o.prefer = prefer;
	f->o.ranges = &f->r;
}

void fx_free(fx *f)
{
	oq_model_free(f->m);
	gen_free(f->gm);
	oq_ranges_free(&f->r);
}
