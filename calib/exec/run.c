/*
 * run.c - running a plan: frames, the node loop, memory release,
 * observers and subgraphs.
 *
 * A frame is one execution of a graph: a slot per value, a remaining-use
 * counter per value (from the plan's uses), and a link to the calling
 * frame for outer-scope names. After each node, inputs whose counter
 * reaches zero are released to the arena, so the live set is what the
 * remaining nodes still need. Nodes run in the plan's order (topological,
 * plan.c). A fused group runs at its head's position
 * (its other members are skipped), a chain at its first Conv's; folded
 * nodes are skipped but reported to the observer at their place.
 */
#include "calib/exec/exec_internal.h"
#include "calib/kernels/linalg/linalg.h"

#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One execution of a graph. */
typedef struct frame {
	const plan *p;         /* the graph's plan */
	oq_rt **slots;         /* per value index: computed value (owned unless input) */
	int *remaining;        /* per value index: uses still to come */
	struct frame *parent;  /* the frame of the node running this subgraph, or NULL */
	unsigned char *unfused; /* per node: absorbed, but its group ran node by node (OQ_K_UNFUSED); NULL: none */
	prof *pr;              /* profiling: the plan's profile in the executor, else NULL */
	unsigned char *over;   /* per value index: an initializer replaced for this run (oq_exec_run_part); NULL: none */
	const unsigned char *part; /* per node: computed by this run (oq_exec_run_part); NULL: all */
} frame;

/* ------------------------------------------------------------ profiling */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

prof *oq_prof_get(oq_exec *e, const plan *p)
{
	size_t n = p->g->n_nodes ? p->g->n_nodes : 1;
	prof *r;

	for (r = e->profs; r; r = r->next)
		if (r->p == p)
			return r;
	if (!(r = calloc(1, sizeof *r)))
		return NULL;
	r->p = p;
	r->ns = oq_calloc(n, sizeof *r->ns);
	r->calls = oq_calloc(n, sizeof *r->calls);
	r->grouped = oq_calloc(n, 1);
	if (!r->ns || !r->calls || !r->grouped) {
		free(r->ns);
		free(r->calls);
		free(r->grouped);
		free(r);
		return NULL;
	}
	r->next = e->profs;
	e->profs = r;
	return r;
}

/* Starts timing a kernel call (profiling): the nested time so far is set aside. */
static uint64_t prof_start(oq_exec *e, const frame *f, uint64_t *saved)
{
	if (!f->pr)
		return 0;
	*saved = e->nested;
	e->nested = 0;
	return now_ns();
}

/* Ends it: node ni is charged the call's time less what nested nodes were charged; the caller's
 * nested time grows by the whole call. grouped: what the call ran (prof.grouped). */
static void prof_stop(oq_exec *e, const frame *f, size_t ni, uint64_t t0, uint64_t saved, int grouped)
{
	uint64_t el;

	if (!f->pr)
		return;
	el = now_ns() - t0;
	f->pr->ns[ni] += el - (e->nested < el ? e->nested : el);
	f->pr->calls[ni]++;
	f->pr->grouped[ni] = (unsigned char)grouped;
	e->nested = saved + el;
}

/* ------------------------------------------------------------ frames */

/* The tensor currently bound to v in frame f (outer names via parents). */
static oq_rt *lookup(frame *f, const oq_value *v)
{
	if (v->flags & OQ_V_OUTER) {
		const oq_value *r = oq_value_resolve((oq_value *)v);
		for (frame *p = f->parent; p; p = p->parent)
			if (p->p->g == r->graph)
				return lookup(p, r);
		return NULL;
	}
	if (f->slots[v->index])
		return f->slots[v->index];
	return f->p->inits[v->index];
}

static void drop(oq_exec *e, frame *f, size_t idx)
{
	oq_rt *t = f->slots[idx];
	if (!t)
		return;
	if (!t->borrowed)
		e->live -= t->nbytes;
	oq_arena_release(e, t);
	free(t);
	f->slots[idx] = NULL;
}

static void frame_free(oq_exec *e, frame *f)
{
	if (f->slots)
		for (size_t i = 0; i < f->p->g->n_values; i++)
			drop(e, f, i);
	free(f->slots);
	free(f->remaining);
	free(f->unfused);
	free(f->over);
}

/* Released when its remaining uses reach zero, unless it is a graph output or input. */
static void use_done(oq_exec *e, frame *f, const oq_value *v)
{
	size_t i;
	if (!v || (v->flags & OQ_V_OUTER) || v->graph != f->p->g)
		return;
	i = v->index;
	if (--f->remaining[i] > 0 || (v->flags & (OQ_V_OUTPUT | OQ_V_INPUT)))
		return;
	drop(e, f, i);
}

/* Reports plan constant v to the observer; a packed-only shell is rebuilt from its panels for the
 * call, or skipped when the observer's want declines it. */
static int observe_const(oq_exec *e, const plan *p, const oq_value *v, oq_diag *d)
{
	const oq_rt *t = p->inits[v->index];
	const oq_packed_b *pb;
	oq_rt tmp;
	int rc;

	if (t->data || t->nbytes == 0)
		return e->observe(e->observe_ctx, v, t);
	/* rebuilding a packed weight every run costs a pass over it: not for an observer that
	 * does not want it (bias correction watches layer outputs only) */
	if (e->want && !e->want(e->observe_ctx, v))
		return OQ_OK;
	pb = p->packed_b[2 * v->index] ? p->packed_b[2 * v->index] : p->packed_b[2 * v->index + 1];
	if (!pb && !p->packed_w[v->index])
		return oq_err(d, OQ_EINVAL, "run: constant '%s' has no data (internal error)", v->name);
	if (oq_rt_alloc(&tmp, t->dtype, t->rank, t->dims))
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	if (pb)
		oq_packed_b_unpack(pb, !p->packed_b[2 * v->index], tmp.data);
	else
		oq_packed_w_unpack(p->packed_w[v->index], tmp.data);
	rc = e->observe(e->observe_ctx, v, &tmp);
	oq_rt_release(&tmp);
	return rc;
}

/* Is input 1 of node n (the weight a plan packs: Conv's W, MatMul's / Gemm's B) an initializer
 * replaced for this run? */
static int reads_over(const frame *f, const oq_node *n)
{
	const oq_value *w = n->n_inputs > 1 ? n->inputs[1] : NULL;
	return f->over && w && w->graph == f->p->g && f->over[w->index];
}

static int run_frame(oq_exec *e, frame *f, oq_diag *d)
{
	const oq_graph *g = f->p->g;
	oq_rt *inbuf[16], *outbuf[16];
	int rc = OQ_OK, watched = e->observe != NULL;

	for (size_t oi = 0; oi < g->n_nodes && !rc; oi++) {
		size_t ni = f->p->order[oi];
		const oq_node *n = g->nodes[ni];
		const node_plan *np = &f->p->nodes[ni];
		oq_kctx k;
		oq_rt **in, **out, *operands[OQ_FUSE_MAX_T];
		oq_value *const *ovals = n->outputs; /* values the outputs are bound to */
		size_t n_out = n->n_outputs;
		/* observers see every value, so no fusion, unless they want none of the group's intermediates */
		int fused = !watched || np->obs_fused;
		/* chained group; not with replaced initializers (the chain reads its weights packed) */
		const node_plan *bp = np->chain && !watched && !f->over ? &f->p->nodes[np->chain] : NULL;
		oq_kchain kc;
		uint64_t t0 = 0, saved = 0;
		int grouped, qdq = fused && np->qdq;

		if (f->part && !f->part[ni])
			continue; /* its outputs are given */
		if (fused && np->absorbed && !(f->unfused && f->unfused[ni]))
			continue; /* computed by its group's head */
		if (np->chained && !watched && !f->over)
			continue; /* computed by its chain's head */
		if (np->folded) { /* a plan constant: observers still see it here, as if computed now */
			for (size_t i = 0; e->observe && !rc && i < n->n_outputs; i++)
				if (n->outputs[i])
					rc = observe_const(e, f->p, n->outputs[i], d);
			continue;
		}
		if (fused && np_heads(np)) {
			ovals = g->nodes[np->tail]->outputs;
			n_out = 1;
		}
		if (bp) {
			ovals = g->nodes[bp->fuse ? bp->tail : np->chain]->outputs;
			n_out = 1;
		}
		in = n->n_inputs <= 16 ? inbuf : oq_calloc(n->n_inputs, sizeof *in);
		/* room for the head's own outputs too (OQ_K_UNFUSED) */
		out = n->n_outputs <= 16 ? outbuf : oq_calloc(n->n_outputs > n_out ? n->n_outputs : n_out, sizeof *out);

		memset(&k, 0, sizeof k);
		k.e = e;
		k.node = n;
		k.opset = n->opset;
		k.d = d;
		k.threads = e->threads;
		k.frame = f;
		k.in = in;
		k.n_in = n->n_inputs;
		k.out = out;
		k.n_out = n_out;
		if (fused)
			k.fuse = np->fuse;
		k.packed_b = np->packed_b;
		k.packed_w = np->packed_w;
		if (reads_over(f, n)) { /* a replaced weight: read as given, not the plan's packing */
			k.packed_b = NULL;
			k.packed_w = NULL;
		}
		if (!in || !out) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto next;
		}
		for (size_t i = 0; i < n_out; i++)
			out[i] = NULL;
		for (size_t i = 0; i < n->n_inputs; i++) {
			in[i] = NULL;
			if (n->inputs[i] && !(in[i] = lookup(f, n->inputs[i]))) {
				const oq_graph *vg = n->inputs[i]->graph;
				for (size_t j = 0; j < vg->n_sparse; j++)
					if (vg->sparse_names[j] && !strcmp(vg->sparse_names[j], n->inputs[i]->name)) {
						rc = oq_k_err(&k, OQ_EUNSUP,
							      "input '%s' is a sparse initializer, which the "
							      "executor does not densify; store it dense",
							      n->inputs[i]->name);
						goto next;
					}
				rc = oq_k_err(&k, OQ_EINVAL,
					      "input '%s' has no value here (not produced before this node, "
					      "not an input or initializer); run `onnxq check`",
					      n->inputs[i]->name);
				goto next;
			}
		}
		for (size_t i = 0; i < n->n_inputs; i++)
			if (in[i] && in[i]->kind != OQ_RT_TENSOR && !oq_k_takes_values(n->op)) {
				rc = oq_k_err(&k, OQ_EINVAL, "input '%s' is a %s, not a tensor", n->inputs[i]->name,
					      in[i]->kind == OQ_RT_SEQ ? "sequence" : "empty optional");
				goto next;
			}
		if (k.fuse) {
			for (int i = 0; i < k.fuse->n_t; i++)
				operands[i] = lookup(f, np->fuse_in[i]);
			k.fuse_in = operands;
		}
		if (bp) {
			const oq_node *b = g->nodes[np->chain];
			memset(&kc, 0, sizeof kc);
			kc.node = b;
			kc.n_in = b->n_inputs;
			kc.fuse = bp->fuse;
			for (size_t i = 1; i < b->n_inputs; i++)
				kc.in[i] = b->inputs[i] ? lookup(f, b->inputs[i]) : NULL;
			k.chain = &kc;
		}
		t0 = prof_start(e, f, &saved);
		rc = bp ? oq_k_conv_chain(&k) : k.fuse ? oq_k_conv_fused(&k) : qdq ? oq_k_qdq(&k) : np->fn(&k);
		grouped = bp ? 2 : k.fuse || qdq ? 1 : 0;
		if (rc == OQ_K_UNFUSED) {
			/* a tensor operand does not fit the output at run time: the group runs node by node */
			if (!f->unfused && !(f->unfused = oq_calloc(g->n_nodes, 1))) {
				rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
				goto next;
			}
			for (int j = 0; j < np->n_members; j++)
				f->unfused[np->members[j]] = 1;
			k.fuse = NULL;
			k.fuse_in = NULL;
			qdq = 0;
			ovals = n->outputs;
			n_out = k.n_out = n->n_outputs;
			for (size_t i = 0; i < n_out; i++)
				out[i] = NULL;
			rc = np->fn(&k);
			grouped = 0;
		}
		prof_stop(e, f, ni, t0, saved, grouped);
		for (size_t i = 0; !rc && i < n_out; i++)
			if (!out[i] && ovals[i])
				rc = oq_k_err(&k, OQ_EINVAL, "kernel produced no output #%zu (internal error)", i);
			else if (out[i] && oq_exec_widen(e, out[i]))
				rc = oq_k_err(&k, OQ_ENOMEM, "out of memory widening output #%zu to float32", i);
			else if (out[i] && out[i]->kind == OQ_RT_TENSOR && out[i]->dtype == OQ_DT_FLOAT && !out[i]->wide)
				out[i]->wide = oq_exec_wide_of(n, (const oq_rt *const *)in, n->n_inputs);
		for (size_t i = 0; i < n_out; i++) {
			oq_value *v = ovals[i];
			if (!out[i])
				continue;
			if (!rc && v && e->observe && out[i]->kind == OQ_RT_TENSOR)
				rc = e->observe(e->observe_ctx, v, out[i]);
			if (!rc && v && !f->slots[v->index] && (f->remaining[v->index] > 0 || (v->flags & OQ_V_OUTPUT))) {
				f->slots[v->index] = out[i];
			} else {
				if (!out[i]->borrowed)
					e->live -= out[i]->nbytes;
				oq_arena_release(e, out[i]);
				free(out[i]);
			}
		}
		if (e->live > e->peak)
			e->peak = e->live;
		if (!rc) {
			for (size_t i = 0; i < n->n_inputs; i++)
				use_done(e, f, n->inputs[i]);
			for (size_t i = 0; i < np->n_extra; i++)
				use_done(e, f, np->extra[i]);
			/* the absorbed nodes' reads are done too (their parameters may be
			 * Identity / Constant outputs: released now, or on arrival if produced later) */
			for (int j = 0; (k.fuse || qdq) && j < np->n_members; j++) {
				const oq_node *mn = g->nodes[np->members[j]];
				for (size_t i = 0; i < mn->n_inputs; i++)
					use_done(e, f, mn->inputs[i]);
			}
			/* and the chained group's (the first group's output among them: never stored) */
			if (bp) {
				const oq_node *b = g->nodes[np->chain];
				for (size_t i = 0; i < b->n_inputs; i++)
					use_done(e, f, b->inputs[i]);
				for (int j = 0; bp->fuse && j < bp->n_members; j++) {
					const oq_node *mn = g->nodes[bp->members[j]];
					for (size_t i = 0; i < mn->n_inputs; i++)
						use_done(e, f, mn->inputs[i]);
				}
			}
		}
	next:
		if (in != inbuf)
			free(in);
		if (out != outbuf)
			free(out);
	}
	return rc;
}

/*
 * Moves (or copies) the graph outputs of a finished frame into `outputs`.
 * narrow (the main graph): an output declared float16 / bfloat16 (or of no
 * declared type and standing for one: oq_rt.wide) and held as float32 is
 * rounded to that type.
 */
static int take_outputs(oq_exec *e, frame *f, oq_rt *outputs, size_t n_out, int narrow, oq_diag *d)
{
	const oq_graph *g = f->p->g;
	for (size_t i = 0; i < n_out && i < g->n_outputs; i++) {
		const oq_value *v = g->outputs[i];
		oq_rt *t = lookup(f, v);
		int moved = 0;
		if (!t)
			return oq_err(d, OQ_EINVAL, "run: graph output '%s' was not computed", v->name);
		int want = v->type.kind == OQ_TYPE_TENSOR && v->type.dtype ? v->type.dtype : t->wide;
		if (narrow && oq_exec_wide(want) && t->kind == OQ_RT_TENSOR && t->dtype == OQ_DT_FLOAT) {
			if (oq_exec_narrow(t, want, &outputs[i]))
				return oq_err(d, OQ_ENOMEM, "run: out of memory");
			continue;
		}
		if (!(v->flags & OQ_V_OUTER) && f->slots[v->index] == t && !t->borrowed) {
			/* move unless a later output names the same value */
			moved = 1;
			for (size_t j = i + 1; j < g->n_outputs; j++)
				if (g->outputs[j] == v)
					moved = 0;
		}
		if (moved && !t->cap) {
			outputs[i] = *t;
			e->live -= t->nbytes;
			free(t);
			f->slots[v->index] = NULL;
		} else if (oq_rt_copy(&outputs[i], t)) {
			return oq_err(d, OQ_ENOMEM, "run: out of memory");
		} else if (moved) { /* an arena buffer: the caller gets a copy it owns */
			e->live -= t->nbytes;
			oq_arena_release(e, t);
			free(t);
			f->slots[v->index] = NULL;
		}
	}
	return OQ_OK;
}

static int frame_init(oq_exec *e, frame *f, const oq_graph *g, frame *parent, oq_diag *d)
{
	plan *p;
	int rc;
	memset(f, 0, sizeof *f);
	if ((rc = oq_plan_get(e, g, &p, d)))
		return rc;
	f->p = p;
	f->parent = parent;
	f->slots = oq_calloc(g->n_values, sizeof *f->slots);
	f->remaining = oq_calloc(g->n_values, sizeof *f->remaining);
	if (!f->slots || !f->remaining)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	memcpy(f->remaining, p->uses, g->n_values * sizeof *f->remaining);
	if (e->profiling && !(f->pr = oq_prof_get(e, p)))
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	return OQ_OK;
}

/* Binds a borrowed view of `src` to value v. */
static int bind(frame *f, const oq_value *v, const oq_rt *src, oq_diag *d)
{
	oq_rt *t = malloc(sizeof *t);
	if (!t)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	*t = *src;
	t->borrowed = 1;
	t->strs = NULL;
	if (src->strs) { /* strings are not borrowed: copy */
		if (oq_rt_copy(t, src)) {
			free(t);
			return oq_err(d, OQ_ENOMEM, "run: out of memory");
		}
	}
	if (f->slots[v->index]) {
		oq_rt_release(f->slots[v->index]);
		free(f->slots[v->index]);
	}
	f->slots[v->index] = t;
	return OQ_OK;
}

static int check_input(const oq_value *v, const oq_rt *t, oq_diag *d)
{
	char got[256], want[256];
	size_t off = 0;
	const oq_type *ty = &v->type;

	if (ty->kind != OQ_TYPE_TENSOR)
		return OQ_OK;
	if (ty->dtype && ty->dtype != t->dtype)
		goto bad;
	if (ty->rank >= 0 && ty->rank != t->rank)
		goto bad;
	for (int i = 0; ty->rank >= 0 && i < ty->rank; i++)
		if (ty->dims[i].value >= 0 && ty->dims[i].value != t->dims[i])
			goto bad;
	return OQ_OK;
bad:
	off = (size_t)snprintf(want, sizeof want, "%s[", ty->dtype ? oq_dtype_name(ty->dtype) : "?");
	for (int i = 0; i < ty->rank && off < sizeof want; i++) {
		int w;
		if (ty->dims[i].value >= 0)
			w = snprintf(want + off, sizeof want - off, "%s%lld", i ? ", " : "", (long long)ty->dims[i].value);
		else
			w = snprintf(want + off, sizeof want - off, "%s%s", i ? ", " : "",
				     ty->dims[i].param ? ty->dims[i].param : "?");
		if (w < 0)
			break;
		off += (size_t)w;
	}
	if (off < sizeof want)
		snprintf(want + off, sizeof want - off, "]");
	return oq_err(d, OQ_EINVAL, "run: input '%s' is %s but the model expects %s", v->name,
		      oq_rt_describe(t, got, sizeof got), want);
}

static atomic_size_t runs_whole, runs_part;

size_t oq_exec_runs(int part)
{
	return atomic_load(part ? &runs_part : &runs_whole);
}

int oq_exec_run(oq_exec *e, const oq_rt *inputs, size_t n_inputs, oq_rt *outputs, size_t n_outputs,
		oq_diag *d)
{
	frame f;
	int rc;

	atomic_fetch_add(&runs_whole, 1);
	for (size_t i = 0; i < n_outputs; i++)
		memset(&outputs[i], 0, sizeof outputs[i]);
	if (n_inputs != e->n_in)
		return oq_err(d, OQ_EINVAL, "run: the model has %zu inputs, %zu given", e->n_in, n_inputs);
	for (size_t i = 0; i < n_inputs; i++)
		if ((rc = check_input(e->in[i], &inputs[i], d)))
			return rc;
	e->live = e->peak = 0;
	if ((rc = frame_init(e, &f, e->m->graph, NULL, d)))
		goto done;
	for (size_t i = 0; i < n_inputs; i++) {
		if ((rc = bind(&f, e->in[i], &inputs[i], d)))
			goto done;
		if (oq_exec_widen(e, f.slots[e->in[i]->index])) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto done;
		}
	}
	if (!(rc = run_frame(e, &f, d)))
		rc = take_outputs(e, &f, outputs, n_outputs, 1, d);
done:
	frame_free(e, &f);
	if (rc)
		for (size_t i = 0; i < n_outputs; i++)
			oq_rt_release(&outputs[i]);
	return rc;
}

/*
 * The uses still to come in a partial run: the plan's counts less the reads of the nodes it
 * does not compute (a fused group's reads are its members' own, whichever node makes them).
 * The computed members of a group whose head is not computed run on their own.
 */
static int part_counts(frame *f, oq_diag *d)
{
	const oq_graph *g = f->p->g;

	for (size_t ni = 0; ni < g->n_nodes; ni++) {
		const oq_node *n = g->nodes[ni];
		const node_plan *np = &f->p->nodes[ni];
		if (f->part[ni])
			continue;
		for (size_t i = 0; i < n->n_inputs; i++)
			if (n->inputs[i] && !(n->inputs[i]->flags & OQ_V_OUTER) && n->inputs[i]->graph == g)
				f->remaining[n->inputs[i]->index]--;
		for (size_t i = 0; i < np->n_extra; i++)
			if (np->extra[i] && !(np->extra[i]->flags & OQ_V_OUTER) && np->extra[i]->graph == g)
				f->remaining[np->extra[i]->index]--;
		for (int j = 0; np_heads(np) && j < np->n_members; j++) {
			if (!f->part[np->members[j]])
				continue;
			if (!f->unfused && !(f->unfused = oq_calloc(g->n_nodes, 1)))
				return oq_err(d, OQ_ENOMEM, "run: out of memory");
			f->unfused[np->members[j]] = 1;
		}
	}
	return OQ_OK;
}

int oq_exec_run_part(oq_exec *e, const unsigned char *part, const oq_rt *const *values, oq_rt *outputs,
		     size_t n_outputs, oq_diag *d)
{
	const oq_graph *g = e->m->graph;
	frame f;
	int rc;

	atomic_fetch_add(&runs_part, 1);
	for (size_t i = 0; i < n_outputs; i++)
		memset(&outputs[i], 0, sizeof outputs[i]);
	e->live = e->peak = 0;
	if ((rc = frame_init(e, &f, g, NULL, d)))
		goto done;
	f.part = part;
	if (!(f.over = oq_calloc(g->n_values ? g->n_values : 1, 1))) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto done;
	}
	if ((rc = part_counts(&f, d)))
		goto done;
	for (size_t i = 0; i < g->n_values && !rc; i++) {
		const oq_value *v = g->values[i];
		if (!values[i] || (v->producer && part[v->producer->index]))
			continue;
		if (f.p->inits[i])
			f.over[i] = 1;
		else if (f.remaining[i] <= 0 && !(v->flags & OQ_V_OUTPUT))
			continue;
		rc = bind(&f, v, values[i], d);
	}
	if (!rc && !(rc = run_frame(e, &f, d)))
		rc = take_outputs(e, &f, outputs, n_outputs, 1, d);
done:
	frame_free(e, &f);
	if (rc)
		for (size_t i = 0; i < n_outputs; i++)
			oq_rt_release(&outputs[i]);
	return rc;
}

int oq_k_run_subgraph(oq_kctx *k, const oq_graph *g, const oq_rt *inputs, size_t n_in, oq_rt *outputs,
		      size_t n_out)
{
	frame f;
	int rc;

	if (n_in != g->n_inputs)
		return oq_k_err(k, OQ_EINVAL, "subgraph '%s' takes %zu inputs, %zu given", g->name,
				g->n_inputs, n_in);
	if ((rc = frame_init(k->e, &f, g, k->frame, k->d)))
		goto done;
	for (size_t i = 0; i < n_in; i++)
		if ((rc = bind(&f, g->inputs[i], &inputs[i], k->d)))
			goto done;
	/* the body's inputs (Loop's counter and carried values, Scan's slices) are observed as
	 * they are bound, as the main graph's are by the caller */
	for (size_t i = 0; i < n_in && k->e->observe; i++)
		if (inputs[i].kind == OQ_RT_TENSOR &&
		    (rc = k->e->observe(k->e->observe_ctx, g->inputs[i], &inputs[i])))
			goto done;
	if (!(rc = run_frame(k->e, &f, k->d)))
		rc = take_outputs(k->e, &f, outputs, n_out, 0, k->d);
done:
	frame_free(k->e, &f);
	return rc;
}
