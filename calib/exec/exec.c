/*
 * exec.c - the executor's life: the kernel table, oq_exec_new (checks every
 * node has a kernel, makes the main graph's plan), clones, observers, and
 * the accessors of exec.h. The other parts: plan.c and fold.c (what is
 * decided once per graph), run.c (frames and the node loop), arena.c
 * (activation memory), kernel_api.c (what kernels call); the thread pool
 * is threadpool.c. exec_internal.h holds what they share.
 */
#include "calib/exec/exec_internal.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const oq_kreg *const families[] = {
	oq_kernels_elementwise, oq_kernels_linalg, oq_kernels_nn, oq_kernels_shape,
	oq_kernels_quant, oq_kernels_control, oq_kernels_rnn,
	oq_kernels_signal, oq_kernels_vision, oq_kernels_sequence,
};

oq_kernel_fn oq_kernel_find(oq_op op, int64_t opset)
{
	const oq_kreg *best = NULL;
	for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
		for (const oq_kreg *r = families[f]; r->fn; r++)
			if (r->op == op && r->min_opset <= opset && (!best || r->min_opset > best->min_opset))
				best = r;
	return best ? best->fn : NULL;
}


/* Each graph input is bound once per run: a value listed twice in the inputs has two definitions. */
static int unique_inputs(const oq_exec *e, const oq_graph *g, oq_diag *d)
{
	unsigned char *seen = oq_calloc(g->n_values + 1, 1);
	int rc = OQ_OK;

	if (!seen)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	for (size_t i = 0; i < e->n_in && !rc; i++) {
		if (seen[e->in[i]->index])
			rc = oq_err(d, OQ_EINVAL,
			            "run: graph input '%s' is listed twice in the graph inputs; give each input "
			            "its own name (onnxq check lists the model's problems)", e->in[i]->name);
		seen[e->in[i]->index] = 1;
	}
	free(seen);
	return rc;
}

int oq_exec_new(oq_model *m, const oq_exec_opts *o, oq_exec **out, oq_diag *d)
{
	oq_exec *e;
	plan *p;
	int rc, threads = o ? o->threads : 0;

	*out = NULL;
	if (threads <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		threads = c > 0 ? (int)c : 1;
	}
	e = calloc(1, sizeof *e);
	if (!e)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	e->m = m;
	e->fold_dq = o ? o->fold_dq : 0;
	e->max_loop = o && o->max_loop_iterations > 0 ? o->max_loop_iterations : OQ_MAX_LOOP_ITERATIONS;
	e->max_live = o && o->max_live_bytes > 0 && (uint64_t)o->max_live_bytes < SIZE_MAX
			      ? (size_t)o->max_live_bytes : SIZE_MAX;
	/* the pool and scratch first: the plan runs kernels to fold constants */
	if ((rc = oq_pool_new(threads, &e->pool))) {
		rc = oq_err(d, rc, "run: cannot start %d threads", threads);
		goto fail;
	}
	e->threads = oq_pool_threads(e->pool);
	e->n_scratch = e->threads;
	if (!(e->scratch = oq_calloc((size_t)e->n_scratch, sizeof *e->scratch))) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto fail;
	}
	if ((rc = oq_graph_rebuild_uses(m->graph)) || (rc = oq_plan_check(e, m->graph, d)) ||
	    (rc = oq_plan_get(e, m->graph, &p, d)))
		goto fail;
	e->in = oq_calloc(m->graph->n_inputs, sizeof *e->in);
	if (!e->in) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < m->graph->n_inputs; i++)
		if (!m->graph->inputs[i]->init)
			e->in[e->n_in++] = m->graph->inputs[i];
	if ((rc = unique_inputs(e, m->graph, d)))
		goto fail;
#if defined(__GLIBC__)
	/*
	 * Planning freed aligned copies and folded weights as their packed
	 * forms replaced them: give the holes they left in the heap back to
	 * the system, or they stay resident for the executor's life.
	 */
	malloc_trim(0);
#endif
	*out = e;
	return OQ_OK;
fail:
	oq_exec_free(e);
	return rc == OQ_ENOMEM && d->count == 0 ? oq_err(d, rc, "run: out of memory") : rc;
}

void oq_exec_free(oq_exec *e)
{
	if (!e)
		return;
	oq_pool_free(e->pool);
	while (e->plans && e->plans != e->borrowed) {
		plan *n = e->plans->next;
		oq_plan_free(e->plans);
		e->plans = n;
	}
	oq_arena_free(e);
	for (int i = 0; e->scratch && i < e->n_scratch; i++)
		free(e->scratch[i].p);
	free(e->scratch);
	free(e->shared.p);
	free(e->in);
	while (e->profs) {
		prof *n = e->profs->next;
		free(e->profs->ns);
		free(e->profs->calls);
		free(e->profs->grouped);
		free(e->profs);
		e->profs = n;
	}
	free(e);
#if defined(__GLIBC__)
	malloc_trim(0); /* the arena and the weights went back to the heap: give them to the system */
#endif
}

/*
 * A clone reads the source's plans (kernels, initializer views, folded
 * constants, packed weights), which nothing changes once made: a run only
 * prepends plans it makes lazily (subgraphs) to its own list, whose tail
 * stays the borrowed one. Frames, arena, scratch and pool are its own.
 */
int oq_exec_clone(const oq_exec *src, const oq_exec_opts *o, oq_exec **out, oq_diag *d)
{
	oq_exec *e;
	int rc, threads = o && o->threads > 0 ? o->threads : 1;

	*out = NULL;
	if (!(e = calloc(1, sizeof *e)))
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	e->m = src->m;
	e->fold_dq = src->fold_dq;
	e->max_loop = src->max_loop;
	e->max_live = src->max_live;
	e->plans = src->plans;
	e->borrowed = src->plans;
	if ((rc = oq_pool_new(threads, &e->pool))) {
		oq_exec_free(e);
		return oq_err(d, rc, "run: cannot start %d threads", threads);
	}
	e->threads = oq_pool_threads(e->pool);
	e->n_scratch = e->threads > src->n_scratch ? e->threads : src->n_scratch;
	e->scratch = oq_calloc((size_t)e->n_scratch, sizeof *e->scratch);
	e->in = oq_calloc(src->n_in ? src->n_in : 1, sizeof *e->in);
	if (!e->scratch || !e->in) {
		oq_exec_free(e);
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	}
	memcpy(e->in, src->in, src->n_in * sizeof *e->in);
	e->n_in = src->n_in;
	e->observe = src->observe;
	e->observe_ctx = src->observe_ctx;
	e->want = src->want;
	*out = e;
	return OQ_OK;
}

int64_t oq_exec_max_loop(const oq_exec *e)
{
	return e ? e->max_loop : OQ_MAX_LOOP_ITERATIONS;
}

void oq_exec_set_observer(oq_exec *e, oq_observe_fn fn, void *ctx)
{
	e->observe = fn;
	e->observe_ctx = ctx;
}

void oq_exec_set_observe_want(oq_exec *e, oq_observe_want_fn want)
{
	e->want = want;
	for (plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++) {
			node_plan *np = &p->nodes[i];
			int keep;
			if (!np_heads(np))
				continue;
			/* the head's output (a pair's code: never stored), and the BN's when an activation
			 * follows it */
			keep = want && !want(e->observe_ctx, p->g->nodes[i]->outputs[0]);
			for (int j = 0; keep && j < np->n_members; j++)
				if (np->members[j] != np->tail &&
				    want(e->observe_ctx, p->g->nodes[np->members[j]]->outputs[0]))
					keep = 0;
			np->obs_fused = keep;
			for (int j = 0; j < np->n_members; j++)
				p->nodes[np->members[j]].obs_fused = keep;
		}
}

struct oq_pool *oq_exec_pool(const oq_exec *e) { return e->pool; }
size_t oq_exec_n_inputs(const oq_exec *e) { return e->n_in; }
const oq_value *oq_exec_input(const oq_exec *e, size_t i) { return i < e->n_in ? e->in[i] : NULL; }
size_t oq_exec_n_outputs(const oq_exec *e) { return e->m->graph->n_outputs; }
const oq_value *oq_exec_output(const oq_exec *e, size_t i)
{
	return i < e->m->graph->n_outputs ? e->m->graph->outputs[i] : NULL;
}
size_t oq_exec_peak_bytes(const oq_exec *e) { return e->peak; }

/* What the plans' counters for tests and bench count (exec.h, kernel.h). */
enum { N_FUSED, N_CHAINED, N_FOLDED, N_PACKED_B, N_PACKED_W, N_QDQ };

/* Node np has property what. */
static int node_has(const node_plan *np, int what)
{
	switch (what) {
	case N_FUSED: return np->fuse != NULL;
	case N_CHAINED: return np->chain != 0;
	case N_FOLDED: return np->folded != 0;
	case N_PACKED_B: return np->packed_b != NULL;
	case N_QDQ: return np->qdq != 0;
	default: return np->packed_w != NULL;
	}
}

/* Nodes of e's plans so far (main graph at oq_exec_new; subgraphs once run) with property what. */
static size_t count_nodes(const oq_exec *e, int what)
{
	size_t n = 0;
	for (const plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++)
			n += (size_t)node_has(&p->nodes[i], what);
	return n;
}

size_t oq_exec_n_fused(const oq_exec *e) { return count_nodes(e, N_FUSED); }
size_t oq_exec_n_chained(const oq_exec *e) { return count_nodes(e, N_CHAINED); }
size_t oq_exec_n_folded(const oq_exec *e) { return count_nodes(e, N_FOLDED); }
size_t oq_exec_n_packed(const oq_exec *e) { return count_nodes(e, N_PACKED_B); }
size_t oq_exec_n_qdq(const oq_exec *e) { return count_nodes(e, N_QDQ); }
size_t oq_exec_n_packed_conv(const oq_exec *e) { return count_nodes(e, N_PACKED_W); }

/* ------------------------------------------------------------ profile */

void oq_exec_profile(oq_exec *e, int on)
{
	e->profiling = on != 0;
}

/* Appends s to the label (prefixed by sep unless it is the first), "..." when it does not fit. */
static void label_add(char *l, size_t n, const char *sep, const char *s)
{
	size_t len = strlen(l);
	int w = snprintf(l + len, n - len, "%s%s", len ? sep : "", s);
	if (w < 0 || (size_t)w >= n - len)
		memcpy(l + n - 4, "...", 4);
}

/* What node ni's call ran: its op, the group members' ops, and with a chain the chained group's. */
static void label_of(const plan *p, size_t ni, int grouped, char *l, size_t n)
{
	const node_plan *np = &p->nodes[ni];

	l[0] = 0;
	label_add(l, n, "+", p->g->nodes[ni]->op_type);
	for (int j = 0; grouped && np_heads(np) && j < np->n_members; j++)
		label_add(l, n, "+", p->g->nodes[np->members[j]]->op_type);
	if (grouped == 2 && np->chain) {
		const node_plan *bp = &p->nodes[np->chain];
		label_add(l, n, ">", p->g->nodes[np->chain]->op_type);
		for (int j = 0; bp->fuse && j < bp->n_members; j++)
			label_add(l, n, "+", p->g->nodes[bp->members[j]]->op_type);
	}
}

int oq_exec_profile_get(const oq_exec *e, oq_exec_prof **out, size_t *n)
{
	size_t total = 0, k = 0;
	const prof *r;

	*out = NULL;
	*n = 0;
	for (r = e->profs; r; r = r->next)
		for (size_t i = 0; i < r->p->g->n_nodes; i++)
			total += r->calls[i] > 0;
	if (!total)
		return OQ_OK;
	if (!(*out = oq_calloc(total, sizeof **out)))
		return OQ_ENOMEM;
	/* e->profs is newest first: walk it backwards, the main graph's plan first */
	for (const prof *last = NULL; last != e->profs; last = r) {
		for (r = e->profs; r->next != last; r = r->next)
			;
		for (size_t oi = 0; oi < r->p->g->n_nodes; oi++) {
			size_t i = r->p->order[oi];
			oq_exec_prof *x = &(*out)[k];
			if (!r->calls[i])
				continue;
			x->node = r->p->g->nodes[i];
			x->ns = r->ns[i];
			x->calls = r->calls[i];
			label_of(r->p, i, r->grouped[i], x->label, sizeof x->label);
			k++;
		}
	}
	*n = k;
	return OQ_OK;
}
