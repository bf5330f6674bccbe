/*
 * ir.c - graph construction, name lookup, use lists and teardown.
 *
 * Names are looked up through a per-graph open-addressing hash (FNV-1a,
 * linear probing, load factor <= 1/2); values are never removed from a
 * graph's scope while it lives, so no tombstones are needed.
 */
#include "src/ir/ir.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char *oq_attr_type_name(int type)
{
	static const char *const n[] = {
		"undefined", "float", "int", "string", "tensor", "graph", "floats", "ints",
		"strings", "tensors", "graphs", "sparse_tensor", "sparse_tensors",
		"type_proto", "type_protos",
	};
	return (type >= 0 && type < (int)(sizeof n / sizeof n[0])) ? n[type] : "?";
}

oq_model *oq_model_new(void)
{
	return calloc(1, sizeof(oq_model));
}

static void free_sparse(oq_sparse *s)
{
	if (!s)
		return;
	oq_tensor_free(s->values);
	oq_tensor_free(s->indices);
	free(s->dims);
	free(s);
}

void oq_attr_clear(oq_attr *a)
{
	free(a->name);
	free(a->s.p);
	oq_tensor_free(a->t);
	oq_graph_free(a->g);
	free_sparse(a->sp);
	free(a->floats);
	free(a->ints);
	if (a->strings)
		for (size_t i = 0; i < a->n; i++)
			free(a->strings[i].p);
	free(a->strings);
	if (a->tensors)
		for (size_t i = 0; i < a->n; i++)
			oq_tensor_free(a->tensors[i]);
	free(a->tensors);
	if (a->graphs)
		for (size_t i = 0; i < a->n; i++)
			oq_graph_free(a->graphs[i]);
	free(a->graphs);
	if (a->sparses)
		for (size_t i = 0; i < a->n; i++)
			free_sparse(a->sparses[i]);
	free(a->sparses);
}

void oq_node_free(oq_node *n)
{
	free(n->name);
	free(n->op_type);
	free(n->domain);
	free(n->inputs);
	free(n->outputs);
	for (size_t i = 0; i < n->n_attrs; i++)
		oq_attr_clear(&n->attrs[i]);
	free(n->attrs);
	free(n);
}

static void free_type(oq_type *t)
{
	if (t->dims)
		for (int i = 0; i < t->rank; i++)
			free(t->dims[i].param);
	free(t->dims);
}

static void free_value(oq_value *v)
{
	free(v->name);
	free_type(&v->type);
	oq_tensor_free(v->init);
	free(v->uses);
	free(v->bn);
	free(v);
}

oq_bnstats *oq_bnstats_new(size_t n)
{
	oq_bnstats *s;
	if (n > (SIZE_MAX - sizeof *s) / (2 * sizeof(double)))
		return NULL;
	if (!(s = calloc(1, sizeof *s + 2 * n * sizeof(double))))
		return NULL;
	s->n = n;
	s->mean = s->v;
	s->std = s->v + n;
	return s;
}

void oq_graph_free(oq_graph *g)
{
	if (!g)
		return;
	if (g->parent)
		g->parent->n_subgraphs--;
	for (size_t i = 0; i < g->n_nodes; i++)
		oq_node_free(g->nodes[i]);
	for (size_t i = 0; i < g->n_values; i++)
		free_value(g->values[i]);
	for (size_t i = 0; i < g->n_sparse; i++) {
		free_sparse(g->sparse_inits[i]);
		free(g->sparse_names[i]);
	}
	free(g->sparse_inits);
	free(g->sparse_names);
	free(g->nodes);
	free(g->values);
	free(g->inputs);
	free(g->outputs);
	free(g->inits);
	free(g->vinfos);
	free(g->hash);
	free(g->name);
	free(g);
}

void oq_model_free(oq_model *m)
{
	if (!m)
		return;
	oq_graph_free(m->graph);
	for (size_t i = 0; i < m->n_opsets; i++)
		free(m->opsets[i].domain);
	free(m->opsets);
	free(m->producer_name);
	free(m->producer_version);
	free(m->path);
	free(m->dir);
	/* The protobuf is freed by the loader's hook (it owns the descriptor). */
	if (m->proto && m->free_proto)
		m->free_proto(m->proto);
	free(m->stripped);
	for (size_t i = 0; i < m->n_maps; i++) {
		if (m->maps[i].mapped)
			munmap(m->maps[i].base, m->maps[i].size);
		free(m->maps[i].path);
	}
	free(m->maps);
	free(m);
}

oq_graph *oq_graph_new(oq_model *m, oq_graph *parent)
{
	oq_graph *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	g->model = m;
	g->parent = parent;
	g->name = oq_strdup("");
	if (!g->name) {
		free(g);
		return NULL;
	}
	if (parent)
		parent->n_subgraphs++;
	return g;
}

int64_t oq_model_opset(const oq_model *m, const char *domain)
{
	oq_domain want = oq_domain_of(domain);
	for (size_t i = 0; i < m->n_opsets; i++) {
		const char *d = m->opsets[i].domain;
		if (want == OQ_DOM_OTHER ? strcmp(d, domain) == 0 : oq_domain_of(d) == want)
			return m->opsets[i].version;
	}
	return 0;
}

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

oq_value *oq_graph_find(const oq_graph *g, const char *name)
{
	if (!g->hash_cap)
		return NULL;
	size_t mask = g->hash_cap - 1;
	for (size_t i = (size_t)hash_name(name) & mask;; i = (i + 1) & mask) {
		oq_value *v = g->hash[i];
		if (!v)
			return NULL;
		if (strcmp(v->name, name) == 0)
			return v;
	}
}

static int hash_insert(oq_graph *g, oq_value *v)
{
	if ((g->n_values + 1) * 2 > g->hash_cap) {
		size_t ncap = g->hash_cap ? g->hash_cap * 2 : 64;
		oq_value **nh = calloc(ncap, sizeof *nh);
		if (!nh)
			return OQ_ENOMEM;
		for (size_t i = 0; i < g->hash_cap; i++) {
			oq_value *x = g->hash[i];
			if (!x)
				continue;
			size_t j = (size_t)hash_name(x->name) & (ncap - 1);
			while (nh[j])
				j = (j + 1) & (ncap - 1);
			nh[j] = x;
		}
		free(g->hash);
		g->hash = nh;
		g->hash_cap = ncap;
	}
	size_t j = (size_t)hash_name(v->name) & (g->hash_cap - 1);
	while (g->hash[j])
		j = (j + 1) & (g->hash_cap - 1);
	g->hash[j] = v;
	return OQ_OK;
}

oq_value *oq_graph_value(oq_graph *g, const char *name)
{
	oq_value *v = oq_graph_find(g, name);
	if (v)
		return v;
	if (oq_grow(&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values))
		return NULL;
	v = calloc(1, sizeof *v);
	if (!v)
		return NULL;
	v->name = oq_strdup(name);
	if (!v->name || hash_insert(g, v)) {
		free(v->name);
		free(v);
		return NULL;
	}
	v->graph = g;
	v->type.rank = -1;
	v->producer_index = -1;
	v->index = g->n_values;
	g->values[g->n_values++] = v;
	return v;
}

oq_value *oq_value_resolve(oq_value *v)
{
	while (v && (v->flags & OQ_V_OUTER) && v->outer)
		v = v->outer;
	return v;
}

oq_node *oq_graph_add_node(oq_graph *g, const char *op_type, const char *domain, const char *name)
{
	oq_node *n;

	if (oq_grow(&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes))
		return NULL;
	n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->op_type = oq_strdup(op_type ? op_type : "");
	n->domain = oq_strdup(domain ? domain : "");
	n->name = oq_strdup(name ? name : "");
	if (!n->op_type || !n->domain || !n->name) {
		oq_node_free(n);
		return NULL;
	}
	n->op = oq_op_lookup(oq_domain_of(n->domain), n->op_type);
	n->opset = g->model ? oq_model_opset(g->model, n->domain) : 0;
	n->graph = g;
	n->index = g->n_nodes;
	g->nodes[g->n_nodes++] = n;
	return n;
}

static int set_vals(oq_value ***dst, size_t *ndst, oq_value *const *v, size_t count)
{
	oq_value **a = oq_calloc(count, sizeof *a);
	if (!a)
		return OQ_ENOMEM;
	if (count)
		memcpy(a, v, count * sizeof *a);
	free(*dst);
	*dst = a;
	*ndst = count;
	return OQ_OK;
}

int oq_node_set_inputs(oq_node *n, oq_value *const *v, size_t count)
{
	return set_vals(&n->inputs, &n->n_inputs, v, count);
}

int oq_node_set_outputs(oq_node *n, oq_value *const *v, size_t count)
{
	return set_vals(&n->outputs, &n->n_outputs, v, count);
}

int oq_graph_each_subgraph(oq_graph *g, oq_subgraph_fn fn, void *ctx)
{
	for (size_t i = 0; g->n_subgraphs && i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		for (size_t k = 0; k < n->n_attrs; k++) {
			oq_attr *a = &n->attrs[k];
			int rc;
			if (a->g && (rc = fn(a->g, n, ctx)))
				return rc;
			if (a->graphs)
				for (size_t j = 0; j < a->n; j++)
					if ((rc = fn(a->graphs[j], n, ctx)))
						return rc;
		}
	}
	return OQ_OK;
}

int oq_value_add_use(oq_value *v, oq_node *n, int index)
{
	if (oq_grow(&v->uses, &v->cap_uses, v->n_uses + 1, sizeof *v->uses))
		return OQ_ENOMEM;
	v->uses[v->n_uses].node = n;
	v->uses[v->n_uses].index = index;
	v->n_uses++;
	return OQ_OK;
}

static int rebuild_sub(oq_graph *sub, oq_node *owner, void *ctx)
{
	(void)owner;
	(void)ctx;
	return oq_graph_rebuild_uses(sub);
}

int oq_graph_rebuild_uses(oq_graph *g)
{
	for (size_t i = 0; i < g->n_values; i++) {
		g->values[i]->n_uses = 0;
		g->values[i]->producer = NULL;
		g->values[i]->producer_index = -1;
		g->values[i]->index = i;
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		n->index = i;
		for (size_t k = 0; k < n->n_outputs; k++) {
			oq_value *v = n->outputs[k];
			/* The first producer wins; `check` reports the others. */
			if (v && !v->producer) {
				v->producer = n;
				v->producer_index = (int)k;
			}
		}
		for (size_t k = 0; k < n->n_inputs; k++)
			if (n->inputs[k] && oq_value_add_use(n->inputs[k], n, (int)k))
				return OQ_ENOMEM;
	}
	return oq_graph_each_subgraph(g, rebuild_sub, NULL);
}

int oq_nameset_has(const oq_nameset *s, const char *name)
{
	if (!s->cap)
		return 0;
	for (size_t i = (size_t)hash_name(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		if (!s->slot[i])
			return 0;
		if (strcmp(s->slot[i], name) == 0)
			return 1;
	}
}

int oq_nameset_add(oq_nameset *s, const char *name)
{
	size_t i;
	if (oq_nameset_has(s, name))
		return OQ_OK;
	if ((s->n + 1) * 2 > s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 64;
		const char **ns = calloc(ncap, sizeof *ns);
		if (!ns)
			return OQ_ENOMEM;
		for (size_t k = 0; k < s->cap; k++) {
			if (!s->slot[k])
				continue;
			for (i = (size_t)hash_name(s->slot[k]) & (ncap - 1); ns[i]; i = (i + 1) & (ncap - 1))
				;
			ns[i] = s->slot[k];
		}
		free(s->slot);
		s->slot = ns;
		s->cap = ncap;
	}
	for (i = (size_t)hash_name(name) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
		;
	s->slot[i] = name;
	s->n++;
	return OQ_OK;
}

void oq_nameset_free(oq_nameset *s)
{
	free(s->slot);
	memset(s, 0, sizeof *s);
}

const oq_attr *oq_node_attr(const oq_node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attrs; i++)
		if (strcmp(n->attrs[i].name, name) == 0)
			return &n->attrs[i];
	return NULL;
}

int64_t oq_node_attr_int(const oq_node *n, const char *name, int64_t dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return (a && a->type == OQ_ATTR_INT) ? a->i : dflt;
}
