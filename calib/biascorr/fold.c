/*
 * fold.c - where a layer's bias correction goes, and folding it in (see
 * fold.h for the patterns).
 */
#include "calib/biascorr/fold.h"

#include <stdlib.h>

#include "passes/pass.h"

size_t oq_bc_out_channels(const oq_node *n, const oq_tensor *w)
{
	if (n->op == OQ_OP_Conv)
		return (size_t)w->dims[0];
	if (n->op == OQ_OP_ConvTranspose)
		return (size_t)(w->dims[1] * oq_node_attr_int(n, "group", 1));
	if (n->op == OQ_OP_Gemm && oq_node_attr_int(n, "transB", 0))
		return (size_t)w->dims[0];
	return (size_t)w->dims[1];
}

/* The Add that alone reads a MatMul's output, and the index of its constant input; NULL if none. */
static oq_node *bias_add(const oq_graph *g, const oq_node *mm, size_t M, int *bidx)
{
	const oq_value *y = mm->n_outputs ? mm->outputs[0] : NULL;
	oq_node *a;
	const oq_tensor *c;

	if (!y || y->n_uses != 1 || (y->flags & OQ_V_OUTPUT) || oq_value_n_captures(y))
		return NULL;
	a = y->uses[0].node;
	if (a->dead || a->op != OQ_OP_Add || oq_domain_of(a->domain) != OQ_DOM_ONNX || a->n_inputs != 2 ||
	    a->inputs[0] == a->inputs[1])
		return NULL;
	*bidx = y->uses[0].index == 0 ? 1 : 0;
	if (!a->inputs[*bidx] || a->inputs[*bidx]->graph != g || !(c = a->inputs[*bidx]->init) ||
	    (a->inputs[*bidx]->flags & OQ_V_INPUT) || c->dtype != OQ_DT_FLOAT)
		return NULL;
	/* broadcasts along the last axis only: [..1.., M] or [..1.., 1] */
	for (int k = 0; k + 1 < c->rank; k++)
		if (c->dims[k] != 1)
			return NULL;
	if (c->rank && c->dims[c->rank - 1] != 1 && (size_t)c->dims[c->rank - 1] != M)
		return NULL;
	return a;
}

const char *oq_bc_bias_site(const oq_graph *g, oq_node *n, size_t M, oq_node **site, size_t *bidx, double *f,
			    const oq_tensor **old)
{
	*site = n;
	*bidx = 2;
	*f = 1;
	*old = NULL;
	if (n->op == OQ_OP_Gemm) {
		const oq_attr *b = oq_node_attr(n, "beta");
		*f = b && b->type == OQ_ATTR_FLOAT ? b->f : 1;
		if (*f == 0)
			return "beta is 0";
		*f = 1 / *f;
	}
	if (n->op == OQ_OP_MatMul) {
		int bi;
		if (!(*site = bias_add(g, n, M, &bi)))
			return "no bias Add with a constant reads its output";
		*bidx = (size_t)bi;
	}
	if (*bidx < (*site)->n_inputs && (*site)->inputs[*bidx]) {
		const oq_value *bv = (*site)->inputs[*bidx];
		*old = bv->graph == g && !(bv->flags & OQ_V_INPUT) ? bv->init : NULL;
		if (!*old || (*old)->dtype != OQ_DT_FLOAT)
			return "its bias is not a float32 constant";
		if ((*old)->nelem != 1 && !((*old)->rank >= 1 && (size_t)(*old)->dims[(*old)->rank - 1] == M))
			return "its bias does not broadcast along the output channels";
	}
	return NULL;
}

int oq_bc_fold(oq_graph *g, oq_node *n, size_t idx, const char *base, const oq_tensor *old, const double *shift,
	       size_t M, double f)
{
	int64_t dims[OQ_MAX_RANK];
	int rank = old && old->rank ? old->rank : 1;
	size_t cnt = 1;
	float *nb, *ob = old ? oq_tensor_to_floats(old) : NULL;
	int rc;

	if (old && !ob)
		return OQ_ENOMEM;
	for (int k = 0; k < rank; k++) {
		dims[k] = old && old->rank ? old->dims[k] : 1;
		if (k + 1 == rank)
			dims[k] = (int64_t)M;
		cnt *= (size_t)dims[k]; /* at most old->nelem * M, both in memory */
	}
	if (!(nb = malloc(cnt * sizeof *nb))) {
		free(ob);
		return OQ_ENOMEM;
	}
	for (size_t j = 0; j < cnt; j++) {
		double o = !ob ? 0 : old->nelem == cnt ? ob[j] : ob[0];
		nb[j] = (float)(o - shift[j % M] * f);
	}
	rc = oq_pass_set_const(g, n, idx, base, rank, dims, nb);
	free(nb);
	free(ob);
	return rc;
}

oq_node *oq_bc_node_writing(oq_graph *g, const char *name)
{
	oq_value *v = oq_graph_value(g, name);
	return v && v->producer && !v->producer->dead && v->producer_index == 0 ? v->producer : NULL;
}
