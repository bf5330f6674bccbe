/*
 * test_graph_scale.c - the graph editing primitives stay exact and linear
 * on large graphs.
 *
 * oq_graph_toposort is checked against toposort_ref, the plain repeated
 * file-order sweeps it replaces (each sweep places every node whose inputs
 * are ready when the sweep reaches it), on random DAGs in shuffled file
 * order, with repeated inputs, values written twice, subgraph captures and
 * cycles: the same order, or the same failing node. The other primitives
 * (oq_value_replace_uses, oq_graph_drop_unused_inits) are checked against a
 * full use rebuild and hand-counted results.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/ir/ir.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static size_t rnd(size_t n) /* xorshift64, [0, n) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (size_t)(rng % n);
}

/* ------------------------------------------------------------ reference */

/* Marks in need[] the values of g that subgraph sub captures (any depth). */
static void ref_caps(const oq_graph *g, const oq_graph *sub, unsigned char *need)
{
	for (size_t i = 0; i < sub->n_values; i++) {
		const oq_value *x = sub->values[i];
		if (!(x->flags & OQ_V_OUTER))
			continue;
		for (const oq_value *o = x->outer; o; o = (o->flags & OQ_V_OUTER) ? o->outer : NULL)
			if (o->graph == g) {
				need[o->index] = 1;
				break;
			}
	}
	for (size_t i = 0; i < sub->n_nodes; i++)
		for (size_t a = 0; a < sub->nodes[i]->n_attrs; a++)
			if (sub->nodes[i]->attrs[a].g)
				ref_caps(g, sub->nodes[i]->attrs[a].g, need);
}

/*
 * The sweeps: order[] receives the nodes; returns the index of the first
 * node left unplaced (a cycle), or SIZE_MAX. Uses must be current.
 */
static size_t toposort_ref(const oq_graph *g, oq_node **order)
{
	size_t nn = g->n_nodes, nv = g->n_values, n_order = 0;
	unsigned char *ready = calloc(nv + 1, 1), *placed = calloc(nn + 1, 1), *need = calloc(nv + 1, 1);
	size_t bad = SIZE_MAX;

	cr_assert(ready && placed && need);
	for (size_t i = 0; i < nv; i++)
		ready[i] = !g->values[i]->producer;
	while (n_order < nn) {
		size_t before = n_order;
		for (size_t i = 0; i < nn; i++) {
			const oq_node *n = g->nodes[i];
			int ok = !placed[i];
			for (size_t k = 0; k < n->n_inputs && ok; k++)
				if (n->inputs[k] && n->inputs[k]->graph == g && !ready[n->inputs[k]->index])
					ok = 0;
			if (ok && n->n_attrs && n->attrs[0].g) {
				memset(need, 0, nv);
				ref_caps(g, n->attrs[0].g, need);
				for (size_t v = 0; v < nv && ok; v++)
					ok = !(need[v] && !ready[v]);
			}
			if (!ok)
				continue;
			placed[i] = 1;
			order[n_order++] = g->nodes[i];
			for (size_t k = 0; k < n->n_outputs; k++)
				if (n->outputs[k])
					ready[n->outputs[k]->index] = 1;
		}
		if (n_order == before) {
			for (size_t i = 0; i < nn && bad == SIZE_MAX; i++)
				if (!placed[i])
					bad = i;
			break;
		}
	}
	free(ready);
	free(placed);
	free(need);
	return bad;
}

/* ------------------------------------------------------------ random graphs */

/* Adds node `name` (op Relu) reading ins[0..n_in) and writing out. */
static oq_node *add(oq_graph *g, const char *name, oq_value **ins, size_t n_in, oq_value *out)
{
	oq_node *n = oq_graph_add_node(g, "Relu", "", name);
	cr_assert_not_null(n);
	cr_assert_eq(oq_node_set_inputs(n, ins, n_in), OQ_OK);
	cr_assert_eq(oq_node_set_outputs(n, &out, 1), OQ_OK);
	return n;
}

/* Gives node n a subgraph that captures value v of n's graph. */
static void capture(oq_model *m, oq_node *n, oq_value *v)
{
	oq_graph *sub = oq_graph_new(m, n->graph);
	oq_value *x, *y;
	cr_assert_not_null(sub);
	n->attrs = calloc(1, sizeof *n->attrs);
	cr_assert_not_null(n->attrs);
	n->n_attrs = 1;
	n->attrs[0].name = strdup("body");
	n->attrs[0].type = OQ_ATTR_GRAPH;
	n->attrs[0].g = sub;
	x = oq_graph_value(sub, v->name);
	y = oq_graph_value(sub, "sub_out");
	cr_assert(x && y);
	x->flags |= OQ_V_OUTER;
	x->outer = v;
	add(sub, "inner", &x, 1, y);
}

/*
 * A random graph of n nodes: node i writes t<i> and reads 1-3 earlier
 * values (graph input x included, sometimes the same one twice); with
 * `dups`, some nodes write an earlier node's value again; with `caps`,
 * some nodes hold a subgraph capturing an earlier value; with `cycle`,
 * one node reads a later value. The node list is then shuffled.
 */
static oq_model *random_graph(size_t n, int dups, int caps, int cycle)
{
	oq_model *m = oq_model_new();
	oq_graph *g;
	oq_value **t = calloc(n + 1, sizeof *t);
	char name[32];

	cr_assert(m && t);
	g = m->graph = oq_graph_new(m, NULL);
	cr_assert_not_null(g);
	t[0] = oq_graph_value(g, "x");
	for (size_t i = 1; i <= n; i++) {
		snprintf(name, sizeof name, "t%zu", i);
		t[i] = oq_graph_value(g, name);
		cr_assert_not_null(t[i]);
	}
	for (size_t i = 1; i <= n; i++) {
		oq_value *in[3];
		size_t k = 1 + rnd(3);
		oq_value *out = t[i];
		oq_node *nd;
		for (size_t j = 0; j < k; j++)
			in[j] = t[rnd(i)];
		if (cycle && i == n / 2)
			in[0] = t[n - rnd(n / 4 + 1)];
		if (dups && i > 2 && rnd(8) == 0)
			out = t[1 + rnd(i - 1)];
		snprintf(name, sizeof name, "n%zu", i);
		nd = add(g, name, in, k, out);
		if (caps && i > 1 && rnd(6) == 0)
			capture(m, nd, t[rnd(i)]);
	}
	for (size_t i = g->n_nodes; i > 1; i--) {
		size_t j = rnd(i);
		oq_node *x = g->nodes[i - 1];
		g->nodes[i - 1] = g->nodes[j];
		g->nodes[j] = x;
	}
	free(t);
	cr_assert_eq(oq_graph_rebuild_uses(g), OQ_OK);
	return m;
}

/* Sorts m's graph both ways and compares. */
static void same_as_ref(oq_model *m, const char *what)
{
	oq_graph *g = m->graph;
	oq_node **want = calloc(g->n_nodes + 1, sizeof *want);
	size_t bad;
	oq_diag d;
	int rc;

	cr_assert_not_null(want);
	bad = toposort_ref(g, want);
	oq_diag_init(&d);
	rc = oq_graph_toposort(g, &d);
	if (bad != SIZE_MAX) {
		char nm[64];
		snprintf(nm, sizeof nm, "node '%s'", g->nodes[bad]->name);
		cr_assert_eq(rc, OQ_EINVAL, "%s: the reference finds a cycle", what);
		cr_assert(strstr(d.msg, nm), "%s: '%s' does not name %s", what, d.msg, nm);
	} else {
		cr_assert_eq(rc, OQ_OK, "%s: %s", what, d.msg);
		for (size_t i = 0; i < g->n_nodes; i++) {
			cr_assert_eq(g->nodes[i], want[i], "%s: position %zu: '%s', want '%s'", what, i,
				     g->nodes[i]->name, want[i]->name);
			cr_assert_eq(g->nodes[i]->index, i);
		}
	}
	free(want);
}

Test(toposort, random_dags_match_the_sweeps)
{
	for (int r = 0; r < 300; r++) {
		char what[64];
		oq_model *m = random_graph(2 + rnd(60), r % 3 == 1, r % 4 == 2, 0);
		snprintf(what, sizeof what, "graph %d", r);
		same_as_ref(m, what);
		oq_model_free(m);
	}
}

Test(toposort, cycles_name_the_first_unplaced_node)
{
	for (int r = 0; r < 100; r++) {
		char what[64];
		oq_model *m = random_graph(8 + rnd(40), r % 2, r % 3 == 0, 1);
		snprintf(what, sizeof what, "cyclic graph %d", r);
		same_as_ref(m, what);
		oq_model_free(m);
	}
}

Test(toposort, empty_graph)
{
	oq_model *m = oq_model_new();
	oq_diag d;
	cr_assert_not_null(m);
	m->graph = oq_graph_new(m, NULL);
	cr_assert_not_null(m->graph);
	oq_diag_init(&d);
	cr_expect_eq(oq_graph_toposort(m->graph, &d), OQ_OK, "%s", d.msg);
	oq_model_free(m);
}

/* A reverse-ordered chain of 200k nodes sorts in one linear pass (the sweeps would take 200k). */
Test(toposort, reversed_chain_of_200k_nodes, .timeout = 20)
{
	size_t n = 200000;
	oq_model *m = oq_model_new();
	oq_graph *g;
	oq_value *prev;
	oq_diag d;
	char name[32];

	cr_assert_not_null(m);
	g = m->graph = oq_graph_new(m, NULL);
	cr_assert_not_null(g);
	prev = oq_graph_value(g, "x");
	for (size_t i = 0; i < n; i++) {
		oq_value *out;
		snprintf(name, sizeof name, "t%zu", i);
		out = oq_graph_value(g, name);
		cr_assert_not_null(out);
		snprintf(name, sizeof name, "n%zu", i);
		add(g, name, &prev, 1, out);
		prev = out;
	}
	for (size_t i = 0, j = n - 1; i < j; i++, j--) {
		oq_node *x = g->nodes[i];
		g->nodes[i] = g->nodes[j];
		g->nodes[j] = x;
	}
	oq_diag_init(&d);
	cr_assert_eq(oq_graph_toposort(g, &d), OQ_OK, "%s", d.msg);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof name, "n%zu", i);
		cr_assert_str_eq(g->nodes[i]->name, name);
	}
	oq_model_free(m);
}

/* ------------------------------------------------------------ uses */

Test(edit, replace_uses_matches_a_rebuild)
{
	for (int r = 0; r < 100; r++) {
		oq_model *m = random_graph(4 + rnd(40), 0, 0, 0);
		oq_graph *g = m->graph;
		oq_value *from = g->values[1 + rnd(g->n_values - 1)], *to = g->values[0];
		size_t want = to->n_uses + from->n_uses, *count = calloc(g->n_values, sizeof *count);
		cr_assert_not_null(count);
		cr_assert_eq(oq_value_replace_uses(g, from, to), OQ_OK);
		cr_expect_eq(from->n_uses, 0);
		cr_expect_eq(to->n_uses, want);
		for (size_t i = 0; i < g->n_values; i++)
			count[i] = g->values[i]->n_uses;
		cr_assert_eq(oq_graph_rebuild_uses(g), OQ_OK);
		for (size_t i = 0; i < g->n_values; i++)
			cr_expect_eq(g->values[i]->n_uses, count[i], "value '%s'", g->values[i]->name);
		for (size_t i = 0; i < to->n_uses; i++)
			cr_expect_eq(to->uses[i].node->inputs[to->uses[i].index], to);
		free(count);
		oq_model_free(m);
	}
}

Test(edit, drop_unused_inits_keeps_order)
{
	oq_model *m = oq_model_new();
	oq_graph *g;
	oq_value *x, *y, *v[6];
	const char *names[6] = {"a", "b", "c", "d", "e", "f"};
	const int64_t dims[1] = {1};

	cr_assert_not_null(m);
	g = m->graph = oq_graph_new(m, NULL);
	cr_assert_not_null(g);
	x = oq_graph_value(g, "x");
	y = oq_graph_value(g, "y");
	g->inits = calloc(6, sizeof *g->inits);
	g->vinfos = calloc(6, sizeof *g->vinfos);
	cr_assert(x && y && g->inits && g->vinfos);
	for (int i = 0; i < 6; i++) {
		v[i] = oq_graph_value(g, names[i]);
		cr_assert_not_null(v[i]);
		v[i]->init = oq_tensor_new(OQ_DT_FLOAT, 1, dims);
		g->inits[g->n_inits++] = v[i];
		v[i]->flags |= OQ_V_VINFO;
		g->vinfos[g->n_vinfos++] = v[i];
	}
	/* b and e are read; f is a graph output: a, c, d go */
	{
		oq_value *in[2] = {v[1], v[4]};
		oq_node *n = oq_graph_add_node(g, "Add", "", "add");
		cr_assert(n && !oq_node_set_inputs(n, in, 2) && !oq_node_set_outputs(n, &y, 1));
	}
	v[5]->flags |= OQ_V_OUTPUT;
	cr_assert_eq(oq_graph_rebuild_uses(g), OQ_OK);
	cr_expect_eq(oq_graph_drop_unused_inits(g), 3);
	cr_assert_eq(g->n_inits, 3);
	cr_expect_eq(g->inits[0], v[1]);
	cr_expect_eq(g->inits[1], v[4]);
	cr_expect_eq(g->inits[2], v[5]);
	cr_assert_eq(g->n_vinfos, 3);
	cr_expect_eq(g->vinfos[0], v[1]);
	cr_expect_null(v[0]->init);
	cr_expect_not(v[0]->flags & (OQ_V_VINFO | OQ_V_DROPPING));
	cr_expect_not_null(v[4]->init);
	oq_model_free(m);
}
