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

oq_graph *qt_body(const oq_graph *g, const char *node, const char *attr)
{
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		if (n->dead || strcmp(n->name, node) != 0)
			continue;
		for (size_t k = 0; k < n->n_attrs; k++)
			if (strcmp(n->attrs[k].name, attr) == 0 && n->attrs[k].g)
				return n->attrs[k].g;
	}
	cr_assert_fail("no node '%s' with a body '%s'", node, attr);
	return NULL;
}
