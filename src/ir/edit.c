/*
 * edit.c - the editing primitives graph passes are built from: fresh
 * names, new initializers, rewiring consumers, removing nodes, topological
 * order, attribute setters and opset changes.
 *
 * Passes collect first and mutate afterwards: they mark nodes `dead`,
 * create their replacements with oq_graph_add_node (appended at the end),
 * then call oq_graph_sweep and oq_graph_toposort, which restore the
 * invariants the executor and the saver rely on (uses up to date, every
 * input produced before it is read). Values are never freed before the
 * graph is: a value whose producer went away is simply no longer listed
 * anywhere the saver looks.
 */
#include "src/ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ names */

static int name_taken_below(const oq_graph *g, const char *name);

static int sub_has(oq_graph *sub, oq_node *owner, void *ctx)
{
	(void)owner;
	return name_taken_below(sub, ctx);
}

/* Name used by g or any graph nested in it. */
static int name_taken_below(const oq_graph *g, const char *name)
{
	if (oq_graph_find(g, name))
		return 1;
	return oq_graph_each_subgraph((oq_graph *)g, sub_has, (void *)name) != 0;
}

static int name_taken(const oq_graph *g, const char *name)
{
	const oq_graph *top = g;
	for (const oq_graph *p = g; p; p = p->parent) {
		if (oq_graph_find(p, name))
			return 1;
		top = p;
	}
	return name_taken_below(top, name);
}

oq_value *oq_graph_new_value(oq_graph *g, const char *base)
{
	size_t n = strlen(base) + 24;
	char *buf = malloc(n);
	oq_value *v = NULL;

	if (!buf)
		return NULL;
	snprintf(buf, n, "%s", base);
	for (unsigned long k = 1; name_taken(g, buf); k++)
		snprintf(buf, n, "%s_%lu", base, k);
	v = oq_graph_value(g, buf);
	free(buf);
	return v;
}

/* ------------------------------------------------------------ initializers */

oq_value *oq_graph_add_init(oq_graph *g, const char *base, oq_tensor *t)
{
	oq_value *v = oq_graph_new_value(g, base);
	oq_value **ni = v ? realloc(g->inits, (g->n_inits + 1) * sizeof *ni) : NULL;
	if (!ni) {
		oq_tensor_free(t);
		return NULL;
	}
	g->inits = ni;
	g->inits[g->n_inits++] = v;
	v->init = t;
	free(t->name);
	t->name = oq_strdup("");
	v->type.kind = OQ_TYPE_TENSOR;
	v->type.dtype = t->dtype;
	v->type.rank = -1;
	return v;
}

static void drop_from(oq_value **a, size_t *n, const oq_value *v)
{
	size_t j = 0;
	for (size_t i = 0; i < *n; i++)
		if (a[i] != v)
			a[j++] = a[i];
	*n = j;
}

void oq_graph_remove_init(oq_graph *g, oq_value *v)
{
	drop_from(g->inits, &g->n_inits, v);
	drop_from(g->inputs, &g->n_inputs, v);
	drop_from(g->vinfos, &g->n_vinfos, v);
	v->flags &= ~(unsigned)(OQ_V_INPUT | OQ_V_VINFO);
	oq_tensor_free(v->init);
	v->init = NULL;
}

/* Drops the entries of a[0..*n) whose value has `flag` in its flags, keeping the order. */
static void drop_flagged(oq_value **a, size_t *n, unsigned flag)
{
	size_t j = 0;
	for (size_t i = 0; i < *n; i++)
		if (!(a[i]->flags & flag))
			a[j++] = a[i];
	*n = j;
}

size_t oq_graph_drop_unused_inits(oq_graph *g)
{
	size_t n = 0;
	/* one compaction of each list for all of them (oq_graph_remove_init each would be quadratic) */
	for (size_t i = 0; i < g->n_inits; i++) {
		oq_value *v = g->inits[i];
		if (v->n_uses == 0 && !(v->flags & (OQ_V_INPUT | OQ_V_OUTPUT)) && oq_value_n_captures(v) == 0) {
			v->flags |= OQ_V_DROPPING;
			n++;
		}
	}
	if (!n)
		return 0;
	drop_flagged(g->inits, &g->n_inits, OQ_V_DROPPING);
	drop_flagged(g->vinfos, &g->n_vinfos, OQ_V_DROPPING);
	for (size_t i = 0; i < g->n_values; i++) {
		oq_value *v = g->values[i];
		if (!(v->flags & OQ_V_DROPPING))
			continue;
		v->flags &= ~(unsigned)(OQ_V_DROPPING | OQ_V_VINFO);
		oq_tensor_free(v->init);
		v->init = NULL;
	}
	return n;
}

void oq_graph_remove_vinfo(oq_graph *g, oq_value *v)
{
	drop_from(g->vinfos, &g->n_vinfos, v);
	v->flags &= ~(unsigned)OQ_V_VINFO;
}

/* ------------------------------------------------------------ rewiring */

int oq_value_replace_uses(oq_graph *g, oq_value *from, oq_value *to)
{
	size_t keep = 0;

	if (from == to)
		return OQ_OK;
	if (oq_grow(&to->uses, &to->cap_uses, to->n_uses + from->n_uses, sizeof *to->uses))
		return OQ_ENOMEM;
	for (size_t i = 0; i < from->n_uses; i++) {
		oq_use u = from->uses[i];
		if (u.node->graph != g) {
			from->uses[keep++] = u;
			continue;
		}
		if (u.node->inputs[u.index] != from)
			continue; /* stale: that input was rewired without a rebuild */
		u.node->inputs[u.index] = to;
		to->uses[to->n_uses++] = u;
	}
	from->n_uses = keep;
	return OQ_OK;
}

typedef struct capctx {
	const oq_value *v;
	size_t n;
} capctx;

static int count_caps(oq_graph *sub, oq_node *owner, void *ctx)
{
	capctx *c = ctx;
	(void)owner;
	for (size_t i = 0; i < sub->n_values; i++) {
		oq_value *x = sub->values[i];
		if ((x->flags & OQ_V_OUTER) && oq_value_resolve(x) == c->v)
			c->n++;
	}
	return oq_graph_each_subgraph(sub, count_caps, ctx);
}

size_t oq_value_n_captures(const oq_value *v)
{
	capctx c = {v, 0};
	/* count_caps never fails: the status carries no information */
	if (v->graph && oq_graph_each_subgraph(v->graph, count_caps, &c))
		return c.n;
	return c.n;
}

oq_node *oq_value_only_user(const oq_value *v)
{
	oq_node *u = NULL;
	for (size_t i = 0; i < v->n_uses; i++) {
		if (v->uses[i].node->dead)
			continue;
		if (u)
			return NULL;
		u = v->uses[i].node;
	}
	return u;
}

/* ------------------------------------------------------------ removal and order */

static int sweep_sub(oq_graph *sub, oq_node *owner, void *ctx);

static int sweep_nodes(oq_graph *g)
{
	size_t j = 0;
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		if (n->dead)
			oq_node_free(n);
		else
			g->nodes[j++] = n;
	}
	g->n_nodes = j;
	return oq_graph_each_subgraph(g, sweep_sub, NULL);
}

static int sweep_sub(oq_graph *sub, oq_node *owner, void *ctx)
{
	(void)owner;
	(void)ctx;
	return sweep_nodes(sub);
}

int oq_graph_sweep(oq_graph *g)
{
	int rc = sweep_nodes(g);
	return rc ? rc : oq_graph_rebuild_uses(g);
}

/* Marks (in `need`) the values of g that subgraph `sub` captures. */
typedef struct needctx {
	oq_graph *g;
	unsigned char *need;
} needctx;

static int mark_caps(oq_graph *sub, oq_node *owner, void *ctx)
{
	needctx *c = ctx;
	(void)owner;
	for (size_t i = 0; i < sub->n_values; i++) {
		oq_value *x = sub->values[i];
		if (!(x->flags & OQ_V_OUTER))
			continue;
		/* the nearest definition in g's scope */
		for (oq_value *o = x->outer; o; o = (o->flags & OQ_V_OUTER) ? o->outer : NULL)
			if (o->graph == c->g) {
				c->need[o->index] = 1;
				break;
			}
	}
	return oq_graph_each_subgraph(sub, mark_caps, ctx);
}

/* A binary min-heap of node indices. */
typedef struct heap {
	size_t *v;
	size_t n;
} heap;

static void heap_push(heap *h, size_t x)
{
	size_t i = h->n++;
	while (i && h->v[(i - 1) / 2] > x) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = x;
}

static size_t heap_pop(heap *h)
{
	size_t top = h->v[0], x = h->v[--h->n], i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1] < h->v[c])
			c++;
		if (h->v[c] >= x)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = x;
	return top;
}

/*
 * The order of the repeated file-order sweeps (each sweep places, in file
 * order, every node whose inputs are ready when the sweep reaches it, so a
 * valid order is kept as it is), computed in O((N + E) log N): Kahn's
 * algorithm with two heaps. `cur` holds the ready nodes the current sweep
 * has still to reach (index above its position), `next` those it has
 * passed; a node becoming ready joins one or the other, and a sweep ends
 * when `cur` is empty.
 */
int oq_graph_toposort(oq_graph *g, oq_diag *d)
{
	size_t nn = g->n_nodes, nv = g->n_values, n_order = 0, pos = 0;
	size_t *indeg = NULL, *cap_start = NULL, *cap_owner = NULL, n_caps = 0;
	unsigned char *ready = NULL, *need = NULL;
	oq_node **order = NULL;
	heap cur = {0}, next = {0};
	int rc;

	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "passes: out of memory");
	ready = oq_calloc(nv, 1);
	indeg = oq_calloc(nn, sizeof *indeg);
	order = oq_calloc(nn, sizeof *order);
	cur.v = oq_calloc(nn, sizeof *cur.v);
	next.v = oq_calloc(nn, sizeof *next.v);
	cap_start = oq_calloc(nv + 1, sizeof *cap_start);
	if (!ready || !indeg || !order || !cur.v || !next.v || !cap_start)
		goto nomem;
	for (size_t i = 0; i < nv; i++)
		ready[i] = !g->values[i]->producer; /* inputs, initializers, outer names, orphans */
	for (size_t i = 0; i < nn; i++) {
		const oq_node *n = g->nodes[i];
		for (size_t k = 0; k < n->n_inputs; k++)
			if (n->inputs[k] && n->inputs[k]->graph == g && !ready[n->inputs[k]->index])
				indeg[i]++;
	}
	/*
	 * Captures of a node's subgraphs count as its inputs (each value once
	 * per node): cap_owner lists, per value (CSR, cap_start), the nodes
	 * whose subgraphs capture it.
	 */
	if (g->n_subgraphs) {
		needctx c = {g, NULL};
		if (!(need = oq_calloc(nv, 1)))
			goto nomem;
		c.need = need;
		for (int fill = 0; fill < 2; fill++) {
			if (fill) {
				for (size_t v = 0; v < nv; v++)
					cap_start[v + 1] += cap_start[v];
				if (!(cap_owner = oq_calloc(n_caps, sizeof *cap_owner)))
					goto nomem;
			}
			for (size_t i = 0; i < nn; i++) {
				oq_node *n = g->nodes[i];
				int has_sub = 0;
				for (size_t a = 0; a < n->n_attrs; a++)
					has_sub |= n->attrs[a].g != NULL || n->attrs[a].graphs != NULL;
				if (!has_sub)
					continue;
				memset(need, 0, nv);
				for (size_t a = 0; a < n->n_attrs; a++) {
					if (n->attrs[a].g && mark_caps(n->attrs[a].g, n, &c))
						goto nomem;
					for (size_t j = 0; n->attrs[a].graphs && j < n->attrs[a].n; j++)
						if (mark_caps(n->attrs[a].graphs[j], n, &c))
							goto nomem;
				}
				for (size_t v = 0; v < nv; v++) {
					if (!need[v] || ready[v])
						continue;
					if (fill) {
						cap_owner[cap_start[v]++] = i;
					} else {
						cap_start[v + 1]++;
						n_caps++;
						indeg[i]++;
					}
				}
			}
		}
		/* the fill advanced each start to the next value's: shift back */
		for (size_t v = nv; v > 0; v--)
			cap_start[v] = cap_start[v - 1];
		cap_start[0] = 0;
	}
	for (size_t i = 0; i < nn; i++)
		if (!indeg[i])
			heap_push(&cur, i);
	while (cur.n || next.n) {
		size_t i;
		oq_node *n;
		if (!cur.n) { /* a new sweep from the start */
			heap t = cur;
			cur = next;
			next = t;
		}
		i = heap_pop(&cur);
		n = g->nodes[i];
		pos = i;
		order[n_order++] = n;
		for (size_t k = 0; k < n->n_outputs; k++) {
			oq_value *v = n->outputs[k];
			if (!v || ready[v->index])
				continue;
			ready[v->index] = 1;
			for (size_t u = 0; u < v->n_uses; u++) {
				size_t j = v->uses[u].node->index;
				if (v->uses[u].node->graph == g && --indeg[j] == 0)
					heap_push(j > pos ? &cur : &next, j);
			}
			for (size_t u = cap_owner ? cap_start[v->index] : 0; cap_owner && u < cap_start[v->index + 1];
			     u++) {
				size_t j = cap_owner[u];
				if (--indeg[j] == 0)
					heap_push(j > pos ? &cur : &next, j);
			}
		}
	}
	if (n_order < nn) {
		for (size_t i = 0; i < nn; i++)
			if (indeg[i]) {
				rc = oq_err(d, OQ_EINVAL,
					    "passes: node '%s' (%s) is on a cycle or reads a value nothing produces",
					    g->nodes[i]->name, g->nodes[i]->op_type);
				goto out;
			}
	}
	if (nn)
		memcpy(g->nodes, order, nn * sizeof *order);
	if ((rc = oq_graph_rebuild_uses(g)))
		rc = oq_err(d, rc, "passes: out of memory");
	goto out;
nomem:
	rc = oq_err(d, OQ_ENOMEM, "passes: out of memory");
out:
	free(ready);
	free(indeg);
	free(order);
	free(cur.v);
	free(next.v);
	free(cap_start);
	free(cap_owner);
	free(need);
	return rc;
}

/* ------------------------------------------------------------ single definitions */

static int producers_sub(oq_graph *sub, oq_node *owner, void *ctx)
{
	(void)owner;
	return oq_graph_check_producers(sub, ctx);
}

int oq_graph_check_producers(oq_graph *g, oq_diag *d)
{
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		for (size_t k = 0; k < n->n_outputs; k++) {
			const oq_value *v = n->outputs[k];
			const oq_node *p;
			if (!v)
				continue;
			p = v->producer;
			if (p && (p != n || (int)k != v->producer_index))
				return oq_err(d, OQ_EINVAL,
					      "passes: value '%s' is written by node '%s' (%s) and node '%s' "
					      "(%s); every value needs one producer (see onnxq check)",
					      v->name, p->name, p->op_type, n->name, n->op_type);
			if (v->init || (v->flags & OQ_V_INPUT))
				return oq_err(d, OQ_EINVAL,
					      "passes: value '%s' is written by node '%s' (%s) and is also %s; "
					      "every value needs one producer (see onnxq check)",
					      v->name, n->name, n->op_type,
					      v->init ? "an initializer" : "a graph input");
		}
	}
	return oq_graph_each_subgraph(g, producers_sub, d);
}

/* ------------------------------------------------------------ types */

int oq_value_set_type(oq_value *v, int dtype, int rank, const int64_t *dims)
{
	oq_dim *nd = NULL;
	if (rank > 0) {
		nd = oq_calloc((size_t)rank, sizeof *nd);
		if (!nd)
			return OQ_ENOMEM;
		for (int i = 0; i < rank; i++)
			nd[i].value = dims ? dims[i] : -1;
	}
	if (v->type.dims)
		for (int i = 0; i < v->type.rank; i++)
			free(v->type.dims[i].param);
	free(v->type.dims);
	v->type.kind = OQ_TYPE_TENSOR;
	v->type.dtype = dtype;
	v->type.rank = rank;
	v->type.dims = nd;
	v->flags |= OQ_V_TYPE_EDITED;
	return OQ_OK;
}

/* ------------------------------------------------------------ attributes */

/* The attribute called name, cleared and ready to be filled, or NULL. */
static oq_attr *fresh_attr(oq_node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attrs; i++)
		if (strcmp(n->attrs[i].name, name) == 0) {
			oq_attr *a = &n->attrs[i];
			char *keep = a->name;
			a->name = NULL;
			oq_attr_clear(a);
			memset(a, 0, sizeof *a);
			a->name = keep;
			return a; /* src dropped: the attribute is rebuilt whole */
		}
	oq_attr *na = realloc(n->attrs, (n->n_attrs + 1) * sizeof *na);
	if (!na)
		return NULL;
	n->attrs = na;
	oq_attr *a = &na[n->n_attrs];
	memset(a, 0, sizeof *a);
	if (!(a->name = oq_strdup(name)))
		return NULL;
	n->n_attrs++;
	return a;
}

int oq_node_set_attr_int(oq_node *n, const char *name, int64_t v)
{
	oq_attr *a = fresh_attr(n, name);
	if (!a)
		return OQ_ENOMEM;
	a->type = OQ_ATTR_INT;
	a->i = v;
	return OQ_OK;
}

int oq_node_set_attr_float(oq_node *n, const char *name, float v)
{
	oq_attr *a = fresh_attr(n, name);
	if (!a)
		return OQ_ENOMEM;
	a->type = OQ_ATTR_FLOAT;
	a->f = v;
	return OQ_OK;
}

int oq_node_set_attr_ints(oq_node *n, const char *name, const int64_t *v, size_t count)
{
	oq_attr *a = fresh_attr(n, name);
	if (!a)
		return OQ_ENOMEM;
	a->type = OQ_ATTR_INTS;
	if (!(a->ints = oq_calloc(count, sizeof *a->ints)))
		return OQ_ENOMEM;
	if (count)
		memcpy(a->ints, v, count * sizeof *v);
	a->n = count;
	return OQ_OK;
}

int oq_node_set_attr_floats(oq_node *n, const char *name, const float *v, size_t count)
{
	oq_attr *a = fresh_attr(n, name);
	if (!a)
		return OQ_ENOMEM;
	a->type = OQ_ATTR_FLOATS;
	if (!(a->floats = oq_calloc(count, sizeof *a->floats)))
		return OQ_ENOMEM;
	if (count)
		memcpy(a->floats, v, count * sizeof *v);
	a->n = count;
	return OQ_OK;
}

int oq_node_set_attr_string(oq_node *n, const char *name, const char *v)
{
	oq_attr *a = fresh_attr(n, name);
	if (!a)
		return OQ_ENOMEM;
	a->type = OQ_ATTR_STRING;
	if (!(a->s.p = oq_strdup(v)))
		return OQ_ENOMEM;
	a->s.len = strlen(v);
	return OQ_OK;
}

int oq_node_set_attr_tensor(oq_node *n, const char *name, oq_tensor *t)
{
	oq_attr *a = fresh_attr(n, name);
	if (!a) {
		oq_tensor_free(t);
		return OQ_ENOMEM;
	}
	a->type = OQ_ATTR_TENSOR;
	a->t = t;
	return OQ_OK;
}

void oq_node_del_attr(oq_node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attrs; i++)
		if (strcmp(n->attrs[i].name, name) == 0) {
			oq_attr_clear(&n->attrs[i]);
			memmove(&n->attrs[i], &n->attrs[i + 1], (n->n_attrs - i - 1) * sizeof *n->attrs);
			n->n_attrs--;
			return;
		}
}

/* ------------------------------------------------------------ opsets */

typedef struct opsetctx {
	const char *domain;
	int64_t version;
} opsetctx;

static int set_node_opsets(oq_graph *g, oq_node *owner, void *ctx)
{
	opsetctx *c = ctx;
	(void)owner;
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		const char *dom = n->domain;
		/* "ai.onnx" and "" name the same domain */
		int same = strcmp(dom, c->domain) == 0 ||
			   (c->domain[0] == 0 && strcmp(dom, "ai.onnx") == 0);
		if (same)
			n->opset = c->version;
	}
	return oq_graph_each_subgraph(g, set_node_opsets, ctx);
}

int oq_model_set_opset(oq_model *m, const char *domain, int64_t version)
{
	size_t i;
	opsetctx c = {domain, version};

	for (i = 0; i < m->n_opsets; i++)
		if (strcmp(m->opsets[i].domain, domain) == 0 ||
		    (domain[0] == 0 && strcmp(m->opsets[i].domain, "ai.onnx") == 0))
			break;
	if (i == m->n_opsets) {
		oq_opset *no = realloc(m->opsets, (m->n_opsets + 1) * sizeof *no);
		if (!no)
			return OQ_ENOMEM;
		m->opsets = no;
		memset(&no[i], 0, sizeof no[i]);
		if (!(no[i].domain = oq_strdup(domain)))
			return OQ_ENOMEM;
		m->n_opsets++;
	}
	m->opsets[i].version = version;
	return m->graph ? set_node_opsets(m->graph, NULL, &c) : OQ_OK;
}

/* ------------------------------------------------------------ float views */

oq_tensor *oq_tensor_from_floats(int rank, const int64_t *dims, const float *data)
{
	oq_tensor *t = oq_tensor_new(OQ_DT_FLOAT, rank, dims);
	if (t && t->nbytes)
		memcpy((void *)t->data, data, t->nbytes);
	return t;
}

float *oq_tensor_to_floats(const oq_tensor *t)
{
	float *f = oq_calloc(t->nelem, sizeof *f);
	if (!f)
		return NULL;
	if (t->dtype == OQ_DT_FLOAT) {
		if (t->nbytes)
			memcpy(f, t->data, t->nbytes);
	} else {
		for (size_t i = 0; i < t->nelem; i++)
			f[i] = (float)oq_tensor_get(t, i);
	}
	return f;
}

oq_tensor *oq_value_const(const oq_graph *g, const oq_value *v)
{
	if (!v || v->graph != g || !v->init)
		return NULL;
	if ((v->flags & OQ_V_INPUT) && g->model && g->model->ir_version >= 4)
		return NULL;
	return v->init;
}

int oq_value_is_private(const oq_value *v)
{
	return !(v->flags & (OQ_V_INPUT | OQ_V_OUTPUT | OQ_V_OUTER)) && oq_value_n_captures(v) == 0;
}

int oq_node_is(const oq_node *n, oq_op op)
{
	return n && !n->dead && n->op == op && oq_domain_of(n->domain) == OQ_DOM_ONNX;
}
