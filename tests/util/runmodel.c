/*
 * runmodel.c - see runmodel.h.
 */
#include "runmodel.h"

#include <math.h>
#include <string.h>

double runmodel_urand(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return (double)(*state >> 11) / (double)(1ull << 53) * 2 - 1;
}

int runmodel_inputs(oq_model *m, uint64_t *state, int64_t sym, oq_rt *in, size_t cap, size_t *n,
                    oq_diag *d)
{
	oq_graph *g = m->graph;
	*n = 0;
	*state = RUNMODEL_SEED;
	for (size_t i = 0; i < g->n_inputs; i++) {
		oq_value *v = g->inputs[i];
		int64_t dims[OQ_RT_MAX_RANK];
		if (v->init)
			continue;
		if (*n == cap || v->type.rank > OQ_RT_MAX_RANK)
			return oq_err(d, OQ_EUSAGE, "runmodel: input '%s': more than %zu inputs or rank %d",
			              v->name, cap, v->type.rank);
		for (int k = 0; k < v->type.rank; k++)
			dims[k] = v->type.dims[k].value >= 0 ? v->type.dims[k].value : (k == 0 ? 1 : sym);
		if (oq_rt_alloc(&in[*n], v->type.dtype, v->type.rank, dims) != OQ_OK)
			return oq_err(d, OQ_ENOMEM, "runmodel: input '%s': cannot allocate", v->name);
		for (size_t e = 0; e < in[*n].nelem; e++)
			oq_rt_set(&in[*n], e, runmodel_urand(state));
		(*n)++;
	}
	return OQ_OK;
}

int runmodel_run(oq_model *m, const oq_rt *in, size_t nin, oq_rt *out, size_t cap, size_t *n,
                 oq_diag *d)
{
	oq_exec *e = NULL;
	oq_exec_opts eo = {.threads = 1};
	int rc = oq_exec_new(m, &eo, &e, d);
	*n = 0;
	if (rc != OQ_OK)
		return rc;
	if (oq_exec_n_outputs(e) > cap) {
		oq_exec_free(e);
		return oq_err(d, OQ_EUSAGE, "runmodel: more than %zu outputs", cap);
	}
	*n = oq_exec_n_outputs(e);
	rc = oq_exec_run(e, in, nin, out, *n, d);
	oq_exec_free(e);
	return rc;
}

double runmodel_rel_err(const oq_rt *a, const oq_rt *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (a[i].nelem != b[i].nelem)
			return NAN;
		for (size_t e = 0; e < a[i].nelem; e++) {
			double x = oq_rt_get(&a[i], e), y = oq_rt_get(&b[i], e);
			num = fmax(num, fabs(x - y));
			den = fmax(den, fabs(x));
		}
	}
	return den > 0 ? num / den : num;
}

size_t runmodel_count_op(const oq_graph *g, const char *op)
{
	size_t k = 0;
	for (size_t i = 0; i < g->n_nodes; i++)
		k += strcmp(g->nodes[i]->op_type, op) == 0;
	return k;
}
