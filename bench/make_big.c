/*
 * make_big.c - writes a large synthetic ONNX model for the benchmark.
 *
 * The model is a chain of L layers, each Y = MatMul(X, W_i) + B_i, with
 * W_i a [D, D] and B_i a [D] float initializer filled by a fixed-seed
 * xorshift generator (random bits defeat any compression or sparsity
 * shortcut, fixed seed makes every run write the same file). It is built
 * with the onnxq IR and written by oq_model_save, so it exercises the saver
 * on a model that has no protobuf source. The default (D = 2048, L = 13)
 * is about 218 MB, twice ResNet-50, to check that throughput does not
 * depend on the model size.
 *
 * usage: make_big OUT [D [L]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_model.h"
#include "src/io/onnx_io.h"

/* xorshift64*: deterministic, fast, good enough to fill weights. */
static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

/* Floats uniform in [-1, 1): 24 random mantissa bits scaled. */
static void fill(oq_tensor *t, uint64_t *seed)
{
	float *p = (float *)t->data;
	for (size_t i = 0; i < t->nelem; i++)
		p[i] = (float)((double)(next_rand(seed) >> 40) / 8388608.0 - 1.0);
}

/* Declares v as a float tensor of the given shape (graph input/output). */
static int set_type(oq_value *v, int rank, const int64_t *dims)
{
	v->type.kind = OQ_TYPE_TENSOR;
	v->type.dtype = OQ_DT_FLOAT;
	v->type.rank = rank;
	v->type.dims = calloc((size_t)rank, sizeof *v->type.dims);
	if (!v->type.dims)
		return OQ_ENOMEM;
	for (int i = 0; i < rank; i++)
		v->type.dims[i].value = dims[i];
	return OQ_OK;
}

/* A new initializer value `name` with a random float payload of `dims`. */
static oq_value *add_init(oq_graph *g, const char *name, int rank, const int64_t *dims,
			  uint64_t *seed)
{
	oq_value *v = oq_graph_value(g, name);
	if (!v || !(v->init = oq_tensor_new(OQ_DT_FLOAT, rank, dims)))
		return NULL;
	fill(v->init, seed);
	g->inits[g->n_inits++] = v;
	return v;
}

static int build(oq_model *m, int64_t D, int L)
{
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	int64_t xd[2] = {1, D}, wd[2] = {D, D}, bd[1] = {D};
	char name[64];
	oq_graph *g;
	oq_value *cur;

	if (bench_model_init(m, "onnxq-bench make_big"))
		return OQ_ENOMEM;
	g = m->graph;
	free(g->name);
	if (!(g->name = oq_strdup("big_chain")))
		return OQ_ENOMEM;
	g->inits = calloc((size_t)L * 2, sizeof *g->inits);
	g->inputs = calloc(1, sizeof *g->inputs);
	g->outputs = calloc(1, sizeof *g->outputs);
	if (!g->inits || !g->inputs || !g->outputs)
		return OQ_ENOMEM;
	if (!(cur = oq_graph_value(g, "X")) || set_type(cur, 2, xd))
		return OQ_ENOMEM;
	cur->flags |= OQ_V_INPUT;
	g->inputs[g->n_inputs++] = cur;
	for (int i = 0; i < L; i++) {
		oq_value *w, *b, *mm, *out, *in2[2];
		oq_node *n;

		snprintf(name, sizeof name, "W%d", i);
		if (!(w = add_init(g, name, 2, wd, &seed)))
			return OQ_ENOMEM;
		snprintf(name, sizeof name, "B%d", i);
		if (!(b = add_init(g, name, 1, bd, &seed)))
			return OQ_ENOMEM;
		snprintf(name, sizeof name, "mm%d", i);
		if (!(mm = oq_graph_value(g, name)))
			return OQ_ENOMEM;
		snprintf(name, sizeof name, i == L - 1 ? "Y" : "h%d", i);
		if (!(out = oq_graph_value(g, name)))
			return OQ_ENOMEM;
		snprintf(name, sizeof name, "matmul%d", i);
		in2[0] = cur;
		in2[1] = w;
		if (!(n = oq_graph_add_node(g, "MatMul", "", name)) || oq_node_set_inputs(n, in2, 2) ||
		    oq_node_set_outputs(n, &mm, 1))
			return OQ_ENOMEM;
		snprintf(name, sizeof name, "add%d", i);
		in2[0] = mm;
		in2[1] = b;
		if (!(n = oq_graph_add_node(g, "Add", "", name)) || oq_node_set_inputs(n, in2, 2) ||
		    oq_node_set_outputs(n, &out, 1))
			return OQ_ENOMEM;
		cur = out;
	}
	if (set_type(cur, 2, xd))
		return OQ_ENOMEM;
	cur->flags |= OQ_V_OUTPUT;
	g->outputs[g->n_outputs++] = cur;
	return oq_graph_rebuild_uses(g);
}

int main(int argc, char **argv)
{
	long D = 2048, L = 13;
	oq_model *m = NULL;
	oq_save_info info;
	oq_diag d;
	int rc;

	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: make_big OUT [D [L]]\n");
		return 1;
	}
	if (argc > 2)
		D = strtol(argv[2], NULL, 10);
	if (argc > 3)
		L = strtol(argv[3], NULL, 10);
	if (D < 1 || D > 65536 || L < 1 || L > 100000) {
		fprintf(stderr, "make_big: D must be in 1..65536 and L in 1..100000\n");
		return 1;
	}
	oq_diag_init(&d);
	if (!(m = oq_model_new()) || (rc = build(m, D, (int)L))) {
		fprintf(stderr, "make_big: out of memory\n");
		oq_model_free(m);
		return 5;
	}
	rc = oq_model_save(m, argv[1], NULL, &info, &d);
	oq_model_free(m);
	if (rc) {
		fprintf(stderr, "make_big: %s\n", d.msg);
		return 4;
	}
	fprintf(stderr, "make_big: wrote %s (%zu bytes, %ld layers of %ldx%ld)\n", argv[1],
		info.model_bytes, L, D, D);
	return 0;
}
