/*
 * make_chain.c - writes a long single-chain ONNX model for bench/big_graph.sh.
 *
 *   conv N OUT   N Convs in a chain: t(i+1) = Conv(t(i), W), W a shared
 *                [4, 4, 1, 1] initializer of 0.25, input t0 float [N, 4, 2, 2]
 *   convw N OUT  the same with a weight of its own per Conv, W<i> (as LLM
 *                exports have: one initializer per layer)
 *   relu N OUT   N Relus in a chain, written in reverse order (the last node
 *                first), so a topological sort has to reorder every node
 *
 * The model is built with the onnxq IR and written by oq_model_save, so it
 * needs no Python. Graphs of 10k-100k nodes are what LLM exports have; the
 * benchmark checks that the passes and the saver stay near-linear in them.
 *
 * usage: make_chain conv|convw|relu N OUT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_model.h"
#include "src/io/onnx_io.h"

/* Declares v as a float tensor of rank `rank` with the given dims (-1: symbolic "N"). */
static int set_type(oq_value *v, int rank, const int64_t *dims)
{
	v->type.kind = OQ_TYPE_TENSOR;
	v->type.dtype = OQ_DT_FLOAT;
	v->type.rank = rank;
	if (rank <= 0)
		return OQ_OK;
	if (!(v->type.dims = calloc((size_t)rank, sizeof *v->type.dims)))
		return OQ_ENOMEM;
	for (int i = 0; i < rank; i++)
		if ((v->type.dims[i].value = dims[i]) < 0 && !(v->type.dims[i].param = oq_strdup("N")))
			return OQ_ENOMEM;
	return OQ_OK;
}

/* A new [4, 4, 1, 1] initializer `name` of g, every element v. */
static oq_value *weight(oq_graph *g, const char *name, float v)
{
	static const int64_t wd[4] = {4, 4, 1, 1};
	oq_value *w = oq_graph_value(g, name);
	oq_value **ni = realloc(g->inits, (g->n_inits + 1) * sizeof *ni);
	if (!w || !ni || !(w->init = oq_tensor_new(OQ_DT_FLOAT, 4, wd)))
		return NULL;
	g->inits = ni;
	for (size_t i = 0; i < w->init->nelem; i++)
		((float *)w->init->data)[i] = v;
	g->inits[g->n_inits++] = w;
	return w;
}

static int build(oq_model *m, int conv, int own, long n)
{
	static const int64_t xd[4] = {-1, 4, 2, 2}, wd[4] = {4, 4, 1, 1};
	char name[64];
	oq_graph *g;
	oq_value *w = NULL, **t;
	oq_node **nodes;

	if (bench_model_init(m, "onnxq-bench make_chain"))
		return OQ_ENOMEM;
	g = m->graph;
	g->inputs = calloc(1, sizeof *g->inputs);
	g->outputs = calloc(1, sizeof *g->outputs);
	t = calloc((size_t)n + 1, sizeof *t);
	if (!g->inputs || !g->outputs || !t)
		return OQ_ENOMEM;
	for (long i = 0; i <= n; i++) {
		snprintf(name, sizeof name, "t%ld", i);
		if (!(t[i] = oq_graph_value(g, name)))
			return OQ_ENOMEM;
	}
	if (set_type(t[0], conv ? 4 : 2, conv ? xd : wd) || set_type(t[n], -1, NULL))
		return OQ_ENOMEM;
	t[0]->flags |= OQ_V_INPUT;
	g->inputs[g->n_inputs++] = t[0];
	t[n]->flags |= OQ_V_OUTPUT;
	g->outputs[g->n_outputs++] = t[n];
	if (conv && !own && !(w = weight(g, "W", 0.25f)))
		return OQ_ENOMEM;
	for (long i = 0; i < n; i++) {
		oq_value *in[2] = {t[i], w};
		oq_node *nd;
		if (own) {
			snprintf(name, sizeof name, "W%ld", i);
			if (!(in[1] = weight(g, name, 0.25f + 0.001f * (float)(i % 7))))
				return OQ_ENOMEM;
		}
		snprintf(name, sizeof name, "%s%ld", conv ? "conv" : "relu", i);
		if (!(nd = oq_graph_add_node(g, conv ? "Conv" : "Relu", "", name)) ||
		    oq_node_set_inputs(nd, in, conv ? 2 : 1) || oq_node_set_outputs(nd, &t[i + 1], 1))
			return OQ_ENOMEM;
	}
	free(t);
	if (!conv) { /* reverse file order: every consumer before its producer */
		nodes = g->nodes;
		for (size_t i = 0, j = g->n_nodes - 1; i < j; i++, j--) {
			oq_node *x = nodes[i];
			nodes[i] = nodes[j];
			nodes[j] = x;
		}
	}
	return oq_graph_rebuild_uses(g);
}

int main(int argc, char **argv)
{
	oq_model *m;
	oq_diag d;
	long n;
	int rc;

	if (argc != 4 || (strcmp(argv[1], "conv") && strcmp(argv[1], "convw") && strcmp(argv[1], "relu")) ||
	    (n = atol(argv[2])) < 1) {
		fprintf(stderr, "usage: make_chain conv|convw|relu N OUT\n");
		return 1;
	}
	oq_diag_init(&d);
	if (!(m = oq_model_new()) || build(m, argv[1][0] == 'c', !strcmp(argv[1], "convw"), n)) {
		fprintf(stderr, "make_chain: out of memory\n");
		return 1;
	}
	rc = oq_model_save(m, argv[3], NULL, NULL, &d);
	oq_model_free(m);
	if (rc) {
		fprintf(stderr, "make_chain: %s\n", d.msg);
		return 1;
	}
	return 0;
}
