/*
 * placement.c - runtime-aware placement (placement.h): units, the expected
 * time of an assignment, the speed search and the balanced fidelity search.
 *
 * Expected time T of an assignment (every unit integer or float): the
 * units' own kernels in their mode, the elementwise ops outside units in the
 * mode the quantize pass gives them (integer unless every data input comes
 * from float), and at every value whose producer and a reader differ in mode
 * a QuantizeLinear (float -> integer) or a DequantizeLinear (integer ->
 * float, graph outputs included). Data-movement ops take their input's mode
 * and cost nothing. Values are sized by one run of the float model.
 */
#include "src/pipeline/placement.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/biascorr/empirical.h"
#include "calib/biascorr/measure.h"
#include "calib/exec/exec.h"
#include "calib/folds.h"
#include "calib/samples.h"
#include "passes/quantize/qweight.h"

/* measure_round()'s folds index the samples bias correction runs: all of the first
 * OQ_PLACEMENT_SAMPLES */
_Static_assert(OQ_PLACEMENT_SAMPLES <= OQ_MEASURE_SAMPLES, "placement samples are thinned");

struct oq_placement_state;
static void state_free(struct oq_placement_state *st);

void oq_placement_free(oq_placement *p)
{
	for (size_t i = 0; i < p->n_float_nodes; i++)
		free(p->float_nodes[i]);
	free(p->float_nodes);
	for (size_t i = 0; i < p->n_sizes; i++)
		free(p->size_names[i]);
	free(p->size_names);
	free(p->size_n);
	free(p->size_last);
	state_free(p->st);
	memset(p, 0, sizeof *p);
}

/* p's sizes := sz's of g's values, by name (sorted for oq_placement_sizes). */
static int keep_sizes(oq_placement *p, const oq_graph *g, const oq_value_sizes *sz, oq_diag *d)
{
	size_t n = 0, *idx = oq_calloc(sz->count + 1, sizeof *idx);
	if (!idx)
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	for (size_t i = 0; i < sz->count && i < g->n_values; i++)
		if (sz->n[i] >= 0 && !g->values[i]->init)
			idx[n++] = i;
	p->size_names = oq_calloc(n + 1, sizeof *p->size_names);
	p->size_n = oq_calloc(n + 1, sizeof *p->size_n);
	p->size_last = oq_calloc(n + 1, sizeof *p->size_last);
	if (!p->size_names || !p->size_n || !p->size_last) {
		free(idx);
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	}
	/* sorted insertion by name (n is the graph's value count: one pass of binary inserts) */
	for (size_t k = 0; k < n; k++) {
		const char *name = g->values[idx[k]]->name;
		size_t lo = 0, hi = p->n_sizes;
		char *c = oq_strdup(name);
		if (!c) {
			free(idx);
			return oq_err(d, OQ_ENOMEM, "placement: out of memory");
		}
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (strcmp(p->size_names[mid], name) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		memmove(p->size_names + lo + 1, p->size_names + lo, (p->n_sizes - lo) * sizeof *p->size_names);
		memmove(p->size_n + lo + 1, p->size_n + lo, (p->n_sizes - lo) * sizeof *p->size_n);
		memmove(p->size_last + lo + 1, p->size_last + lo, (p->n_sizes - lo) * sizeof *p->size_last);
		p->size_names[lo] = c;
		p->size_n[lo] = sz->n[idx[k]];
		p->size_last[lo] = sz->last[idx[k]];
		p->n_sizes++;
	}
	free(idx);
	return OQ_OK;
}

int oq_placement_sizes(const oq_placement *p, const oq_graph *g, oq_value_sizes *out)
{
	memset(out, 0, sizeof *out);
	if (!p->n_sizes)
		return OQ_OK;
	out->count = g->n_values;
	out->n = malloc((out->count + 1) * sizeof *out->n);
	out->last = malloc((out->count + 1) * sizeof *out->last);
	if (!out->n || !out->last) {
		oq_value_sizes_free(out);
		return OQ_ENOMEM;
	}
	for (size_t i = 0; i < out->count; i++) {
		const oq_value *v = g->values[i];
		size_t lo = 0, hi = p->n_sizes;
		out->n[i] = v->init ? (int64_t)v->init->nelem : -1;
		out->last[i] = v->init && v->init->rank ? v->init->dims[v->init->rank - 1] : -1;
		while (!v->init && lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			int r = strcmp(p->size_names[mid], v->name);
			if (r == 0) {
				out->n[i] = p->size_n[mid];
				out->last[i] = p->size_last[mid];
				break;
			}
			if (r < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ sizes */

typedef struct sizes_ctx {
	oq_value_sizes *s;
	const oq_graph *g;
} sizes_ctx;

static int size_observer(void *ctx, const oq_value *v, const oq_rt *t)
{
	sizes_ctx *c = ctx;
	if (v->graph == c->g && v->index < c->s->count && t->kind == OQ_RT_TENSOR) {
		c->s->n[v->index] = (int64_t)t->nelem;
		c->s->last[v->index] = t->rank ? t->dims[t->rank - 1] : 1;
	}
	return 0;
}

int oq_value_sizes_measure(oq_model *m, const oq_calib_opts *co, oq_value_sizes *out, oq_diag *d)
{
	oq_exec_opts eo = {.threads = co->threads};
	oq_exec *e = NULL;
	oq_samples s = {0};
	oq_rt *in = NULL, *outs = NULL;
	size_t nin = 0, nout = 0;
	sizes_ctx c = {out, m->graph};
	int rc;

	memset(out, 0, sizeof *out);
	out->count = m->graph->n_values;
	out->n = malloc((out->count + 1) * sizeof *out->n);
	out->last = malloc((out->count + 1) * sizeof *out->last);
	if (!out->n || !out->last) {
		oq_value_sizes_free(out);
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	}
	for (size_t i = 0; i < out->count; i++) {
		const oq_value *v = m->graph->values[i];
		const oq_tensor *t = v->init;
		out->n[i] = t ? (int64_t)t->nelem : -1;
		out->last[i] = t && t->rank ? t->dims[t->rank - 1] : -1;
	}
	if ((rc = oq_exec_new(m, &eo, &e, d)))
		goto out;
	oq_exec_set_observer(e, size_observer, &c);
	nin = oq_exec_n_inputs(e);
	nout = oq_exec_n_outputs(e);
	in = oq_calloc(nin + 1, sizeof *in);
	outs = oq_calloc(nout + 1, sizeof *outs);
	if (!in || !outs) {
		rc = oq_err(d, OQ_ENOMEM, "placement: out of memory");
		goto out;
	}
	if (co->source && !strncmp(co->source, "random:", 7)) {
		const char **specs = oq_calloc(nin + 1, sizeof *specs);
		char **bufs = oq_calloc(nin + 1, sizeof *bufs);
		rc = specs && bufs ? OQ_OK : OQ_ENOMEM;
		for (size_t i = 0; !rc && i < nin; i++) {
			const char *name = oq_exec_input(e, i)->name;
			size_t len = strlen(name) + 16;
			if (!(bufs[i] = malloc(len)))
				rc = OQ_ENOMEM;
			else
				snprintf(bufs[i], len, "%s=random:0", name), specs[i] = bufs[i];
		}
		if (rc)
			rc = oq_err(d, rc, "placement: out of memory");
		else
			rc = oq_samples_explicit(specs, nin, e, &s, d);
		for (size_t i = 0; bufs && i < nin; i++)
			free(bufs[i]);
		free(bufs);
		free(specs);
	} else {
		rc = oq_samples_scan(co->source, e, &s, d);
	}
	if (rc)
		goto out;
	if (!s.n) {
		rc = oq_err(d, OQ_EINVAL, "placement: no calibration sample");
		goto out;
	}
	if ((rc = oq_sample_load(&s, 0, e, in, d)))
		goto out;
	for (size_t i = 0; i < nin; i++) {
		const oq_value *v = oq_exec_input(e, i);
		if (v->graph == m->graph && v->index < out->count) {
			out->n[v->index] = (int64_t)in[i].nelem;
			out->last[v->index] = in[i].rank ? in[i].dims[in[i].rank - 1] : 1;
		}
	}
	rc = oq_exec_run(e, in, nin, outs, nout, d);
out:
	for (size_t i = 0; in && i < nin; i++)
		oq_rt_release(&in[i]);
	for (size_t i = 0; outs && i < nout; i++)
		oq_rt_release(&outs[i]);
	free(in);
	free(outs);
	oq_samples_free(&s);
	oq_exec_free(e);
	if (rc)
		oq_value_sizes_free(out);
	return rc;
}

/* ------------------------------------------------------------ units */

/* One unit: a compute node and the elementwise nodes computing only from its output. */
typedef struct unit {
	oq_node *head;       /* Conv, Gemm or MatMul */
	oq_node **nodes;     /* head first, then members in graph order */
	size_t n_nodes, cap;
	double macs;         /* -1 unknown */
	int fl;              /* mode: 0 integer, else float (1 faster so, 2 measuring, 3 fidelity) */
	int chain;           /* its members after the head are a single-reader chain of Relu / Clip
			      * (ORT's WeightBiasQuantization path: head -> Relu|Clip* -> Q) */
} unit;

/* State of one placement. */
typedef struct plc {
	oq_graph *g;
	const oq_opts *q;
	const oq_value_sizes *sz;
	unit *u;
	size_t nu;
	int *unit_of;        /* per node index: its unit, -1 none */
	int *mode;           /* per node index: 1 float, 0 integer (recomputed by cost) */
} plc;

/* What the speed search leaves for oq_placement_choose (oq_placement.st). */
struct oq_placement_state {
	plc pl;
	oq_value_sizes sz;
	double t_float;      /* expected time with every unit float */
};

static void state_free(struct oq_placement_state *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->pl.nu; i++)
		free(st->pl.u[i].nodes);
	free(st->pl.u);
	free(st->pl.unit_of);
	free(st->pl.mode);
	oq_value_sizes_free(&st->sz);
	free(st);
}

static int op_in(const oq_node *n, const oq_op *ops, size_t k)
{
	for (size_t i = 0; i < k; i++)
		if (oq_node_is(n, ops[i]))
			return 1;
	return 0;
}

/* Elementwise ops a unit's activation may consist of. */
static int is_act_op(const oq_node *n)
{
	static const oq_op ops[] = {OQ_OP_Add, OQ_OP_Sub, OQ_OP_Mul, OQ_OP_Div, OQ_OP_Clip, OQ_OP_Relu,
				    OQ_OP_LeakyRelu, OQ_OP_Sigmoid, OQ_OP_HardSigmoid, OQ_OP_HardSwish, OQ_OP_Tanh};
	return op_in(n, ops, sizeof ops / sizeof ops[0]);
}

/* Data movement: ORT runs it on the 8-bit data of its input (coverage.h), at no cost here; the
 * quantize pass leaves Resize float (ORT's 8-bit Resize is slower than its float one). */
static int is_movement(const oq_node *n)
{
	return (oq_ort_movement(n) && !oq_node_is(n, OQ_OP_Resize)) || oq_node_is(n, OQ_OP_Split);
}

/* Ops ORT runs as QLinear kernels (outside units: residual Add, Concat, pooling, ...). */
static int is_qlinear_op(const oq_node *n)
{
	return oq_node_is(n, OQ_OP_Add) || oq_node_is(n, OQ_OP_Mul) || oq_node_is(n, OQ_OP_Concat) ||
	       oq_node_is(n, OQ_OP_Sigmoid) || oq_node_is(n, OQ_OP_LeakyRelu) || oq_node_is(n, OQ_OP_Softmax) ||
	       oq_node_is(n, OQ_OP_AveragePool) || oq_node_is(n, OQ_OP_GlobalAveragePool);
}

static double elems(const plc *p, const oq_value *v)
{
	return v && v->index < p->sz->count && p->sz->n[v->index] >= 0 ? (double)p->sz->n[v->index] : 0;
}

/* Is a scalar positive constant the other operand (a Mul / Div the quantize pass folds)? */
static int scalar_operand(const oq_graph *g, const oq_node *n)
{
	for (size_t k = 0; k < n->n_inputs; k++) {
		const oq_tensor *t = oq_value_const(g, n->inputs[k]);
		if (t && t->nelem == 1)
			return 1;
	}
	return 0;
}

/* Appends n to u's nodes. */
static int add_node(unit *u, oq_node *n, oq_diag *d)
{
	if (oq_grow(&u->nodes, &u->cap, u->n_nodes + 1, sizeof *u->nodes))
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	u->nodes[u->n_nodes++] = n;
	return OQ_OK;
}

/* Adds the main-graph readers of v after node index `after` to the sorted candidate set c. */
static int add_readers(const plc *p, const oq_value *v, size_t after, size_t **c, size_t *nc, size_t *cap,
		       oq_diag *d)
{
	for (size_t k = 0; k < v->n_uses; k++) {
		const oq_node *r = v->uses[k].node;
		size_t i = 0;
		if (r->graph != p->g || r->index <= after || r->index >= p->g->n_nodes)
			continue;
		while (i < *nc && (*c)[i] < r->index)
			i++;
		if (i < *nc && (*c)[i] == r->index)
			continue;
		if (oq_grow(c, cap, *nc + 1, sizeof **c))
			return oq_err(d, OQ_ENOMEM, "placement: out of memory");
		memmove(*c + i + 1, *c + i, (*nc - i) * sizeof **c);
		(*c)[i] = r->index;
		(*nc)++;
	}
	return OQ_OK;
}

/* Builds the units: every node the weight plans quantize (Conv, Gemm, MatMul) and its activation. */
static int build_units(plc *p, oq_diag *d)
{
	oq_wplan *plans = NULL;
	size_t np = 0, *cand = NULL, nc, capc = 0;
	char *member = NULL;
	int rc;

	if ((rc = oq_quantize_weight_plans(p->g, p->q, &plans, &np, d)))
		return rc;
	p->u = oq_calloc(np + 1, sizeof *p->u);
	member = oq_calloc(p->g->n_values + 1, 1);
	if (!p->u || !member) {
		rc = oq_err(d, OQ_ENOMEM, "placement: out of memory");
		goto out;
	}
	for (size_t i = 0; i < np; i++) {
		oq_node *h = plans[i].node;
		unit *u = &p->u[p->nu];
		if (oq_node_is(h, OQ_OP_ConvTranspose) || !h->n_outputs || !h->outputs[0] || p->unit_of[h->index] >= 0)
			continue;
		if ((rc = add_node(u, h, d)))
			goto out;
		u->head = h;
		u->macs = oq_node_macs(p->g, h, p->sz);
		p->unit_of[h->index] = (int)p->nu;
		member[h->outputs[0]->index] = 1;
		/* graph order: a node whose non-constant inputs are all the unit's values joins; only
		 * readers of the unit's values can, taken lowest index first (the graph is sorted, so
		 * every input's producer has been decided before its reader) */
		nc = 0;
		if ((rc = add_readers(p, h->outputs[0], h->index, &cand, &nc, &capc, d)))
			goto out;
		while (nc) {
			oq_node *n = p->g->nodes[cand[0]];
			int ok = is_act_op(n) && p->unit_of[n->index] < 0 && n->n_outputs >= 1, any = 0;
			memmove(cand, cand + 1, --nc * sizeof *cand);
			for (size_t k = 0; ok && k < n->n_inputs; k++) {
				const oq_value *v = n->inputs[k];
				if (!v || oq_value_const(p->g, v))
					continue;
				if (!member[v->index])
					ok = 0;
				any = 1;
			}
			if (!ok || !any)
				continue;
			if ((rc = add_node(u, n, d)))
				goto out;
			p->unit_of[n->index] = (int)p->nu;
			for (size_t k = 0; k < n->n_outputs; k++)
				if (n->outputs[k]) {
					member[n->outputs[k]->index] = 1;
					if ((rc = add_readers(p, n->outputs[k], n->index, &cand, &nc, &capc, d)))
						goto out;
				}
		}
		u->chain = 1;
		for (size_t k = 0; k < u->n_nodes; k++) {
			const oq_value *o = u->nodes[k]->outputs[0];
			if ((k && !oq_node_is(u->nodes[k], OQ_OP_Relu) && !oq_node_is(u->nodes[k], OQ_OP_Clip)) ||
			    !o || o->n_uses > 1)
				u->chain = 0;
		}
		/* the member marks end with the unit (a later unit starts from its own head) */
		for (size_t k = 0; k < u->n_nodes; k++)
			for (size_t o = 0; o < u->nodes[k]->n_outputs; o++)
				if (u->nodes[k]->outputs[o])
					member[u->nodes[k]->outputs[o]->index] = 0;
		p->nu++;
	}
out:
	free(plans);
	free(member);
	free(cand);
	return rc;
}

/* ------------------------------------------------------------ expected time */

/* Mode of value v's producer: 1 float (graph inputs, float units and ops), 0 integer. */
static int value_mode(const plc *p, const oq_value *v)
{
	return !v || !v->producer || v->producer->index >= p->g->n_nodes ? 1 : p->mode[v->producer->index];
}

/* Cost of node n (its own kernels) in mode fl. */
static double node_ns(const plc *p, const oq_node *n, int fl, int first_act)
{
	double e = n->n_outputs ? elems(p, n->outputs[0]) : 0;
	if (oq_node_is(n, OQ_OP_Conv))
		return oq_ort_conv_ns(p->g, n, e, !fl);
	if (oq_node_is(n, OQ_OP_MatMul) || oq_node_is(n, OQ_OP_Gemm))
		return oq_ort_matmul_ns(oq_node_macs(p->g, n, p->sz), !fl);
	if (is_movement(n) || oq_node_is(n, OQ_OP_Shape))
		return 0;
	if (fl) {
		/* ORT fuses the first activation after a float Conv into it (FusedConv) */
		if (first_act && (oq_node_is(n, OQ_OP_Relu) || oq_node_is(n, OQ_OP_Clip) ||
				  oq_node_is(n, OQ_OP_Sigmoid) || oq_node_is(n, OQ_OP_HardSigmoid) ||
				  oq_node_is(n, OQ_OP_LeakyRelu) || oq_node_is(n, OQ_OP_Tanh)))
			return 0;
		return oq_ort_elementwise_ns(OQ_ORT_EW_FLOAT, e);
	}
	if (oq_node_is(n, OQ_OP_Relu) || oq_node_is(n, OQ_OP_Clip))
		return 0; /* into the Q */
	if ((oq_node_is(n, OQ_OP_Mul) || oq_node_is(n, OQ_OP_Div)) && scalar_operand(p->g, n))
		return 0; /* folded into a DequantizeLinear scale */
	if (oq_node_is(n, OQ_OP_Add) || oq_node_is(n, OQ_OP_Mul) || oq_node_is(n, OQ_OP_Concat))
		return oq_ort_elementwise_ns(OQ_ORT_EW_QBINARY, e);
	if (is_qlinear_op(n))
		return oq_ort_elementwise_ns(OQ_ORT_EW_QUNARY, e);
	return oq_ort_elementwise_ns(OQ_ORT_EW_FLOAT, e);
}

/*
 * Expected time of the current unit modes: sets every node's mode, then
 * sums node and boundary costs over the main graph.
 */
static double total_ns(plc *p)
{
	double t = 0;
	for (size_t i = 0; i < p->g->n_nodes; i++) {
		oq_node *n = p->g->nodes[i];
		int u = p->unit_of[i], fl;
		if (u >= 0) {
			fl = p->u[u].fl != 0;
		} else if (is_movement(n)) {
			fl = n->n_inputs ? value_mode(p, n->inputs[0]) : 1;
		} else if (is_qlinear_op(n) || oq_node_is(n, OQ_OP_Relu) || oq_node_is(n, OQ_OP_Clip)) {
			/* integer unless every data input is float (the quantize pass' float regions) */
			int all = 1, any = 0;
			for (size_t k = 0; k < n->n_inputs; k++)
				if (n->inputs[k] && !oq_value_const(p->g, n->inputs[k])) {
					any = 1;
					all &= value_mode(p, n->inputs[k]);
				}
			fl = any && all;
		} else {
			fl = 1; /* no integer kernel, or not quantized */
		}
		p->mode[i] = fl;
		t += node_ns(p, n, fl, u >= 0 && p->u[u].n_nodes > 1 && p->u[u].nodes[1] == n);
	}
	for (size_t i = 0; i < p->g->n_values; i++) {
		const oq_value *v = p->g->values[i];
		int pm, q = 0, dq = 0;
		if (v->init || (!v->producer && !(v->flags & OQ_V_INPUT)))
			continue;
		pm = value_mode(p, v);
		for (size_t k = 0; k < v->n_uses; k++) {
			const oq_node *r = v->uses[k].node;
			int rm = r->graph == p->g && r->index < p->g->n_nodes ? p->mode[r->index] : 1;
			if (is_movement(r) && !rm && pm)
				continue; /* a float value through a movement op into integer: counted there */
			q |= pm && !rm;
			dq |= !pm && rm;
		}
		if ((v->flags & OQ_V_OUTPUT) && !pm)
			dq = 1;
		if (q)
			t += oq_ort_elementwise_ns(OQ_ORT_EW_Q, elems(p, v));
		if (dq)
			t += oq_ort_elementwise_ns(OQ_ORT_EW_DQ, elems(p, v));
	}
	return t;
}

/*
 * A float unit ORT would turn integer itself: a head -> Relu|Clip* chain
 * between a DQ (an integer producer) and a Q (an integer reader) gets its
 * float weight quantized per tensor by WeightBiasQuantization and becomes
 * QLinearConv anyway, with a coarser weight grid than ours: such units are
 * set integer (repeated, at most OQ_PLACEMENT_WBQ_ROUNDS times: a change
 * moves the neighbours' modes).
 */
static void keep_from_wbq(plc *p)
{
	for (size_t round = 0; round <= p->nu && round < OQ_PLACEMENT_WBQ_ROUNDS; round++) {
		int changed = 0;
		(void)total_ns(p); /* the modes */
		for (size_t i = 0; i < p->nu; i++) {
			unit *u = &p->u[i];
			const oq_value *o = u->nodes[u->n_nodes - 1]->outputs[0];
			const oq_node *r = o && o->n_uses == 1 ? o->uses[0].node : NULL;
			if (!u->fl || !u->chain || !u->head->n_inputs || value_mode(p, u->head->inputs[0]) || !r ||
			    r->graph != p->g || p->mode[r->index])
				continue;
			u->fl = 0;
			changed = 1;
		}
		if (!changed)
			break;
	}
}

/*
 * Flips runs of consecutive units (graph order; 1, 2, 4, ... 32 long: a
 * chain of units whose Q/DQ boundaries only vanish together) while that
 * lowers the expected time by more than a microsecond, passes until none
 * flips (at most 8); returns the time reached.
 */
static double descend(plc *p)
{
	double cur = total_ns(p);
	for (int pass = 0; pass < 8; pass++) {
		int flipped = 0;
		for (size_t len = 1; len <= 32 && len <= p->nu; len *= 2)
			for (size_t i = 0; i + len <= p->nu; i++) {
				double t;
				for (size_t k = i; k < i + len; k++)
					p->u[k].fl = !p->u[k].fl;
				t = total_ns(p);
				if (t < cur - 1000) {
					cur = t;
					flipped = 1;
				} else {
					for (size_t k = i; k < i + len; k++)
						p->u[k].fl = !p->u[k].fl;
				}
			}
		if (!flipped)
			break;
	}
	return cur;
}

/*
 * Speed: descents from all units integer and from all float (single flips
 * alone cannot cross a chain of small units whose Q/DQ boundaries only
 * vanish together); the faster end, integer on a tie. Graphs past
 * OQ_PLACEMENT_SEARCH_WORK (units x graph size) compare the two ends only,
 * so the placement stays linear in the graph.
 */
static int speed_search(plc *p, oq_diag *d)
{
	int *keep = oq_calloc(p->nu + 1, sizeof *keep);
	/* a descent evaluates the whole graph per flip: past the budget, only the two ends */
	int deep = (double)p->nu * (double)(p->g->n_nodes + p->g->n_values) <= OQ_PLACEMENT_SEARCH_WORK;
	double ta, tb;
	if (!keep)
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	for (size_t i = 0; i < p->nu; i++)
		p->u[i].fl = 0;
	ta = deep ? descend(p) : total_ns(p);
	for (size_t i = 0; i < p->nu; i++) {
		keep[i] = p->u[i].fl;
		p->u[i].fl = 1;
	}
	tb = deep ? descend(p) : total_ns(p);
	if (!(tb < ta))
		for (size_t i = 0; i < p->nu; i++)
			p->u[i].fl = keep[i];
	free(keep);
	return OQ_OK;
}

/* An expected gain inside the cost model's error is no gain: then every unit float (returns 1). */
static int margin(plc *p, double t_float, FILE *log)
{
	double t = total_ns(p);
	if (!(t > OQ_PLACEMENT_MARGIN * t_float))
		return 0;
	if (log)
		fprintf(log, "placement: the fastest assignment found is expected at %.0f%% of all units float, more "
			"than %.0f%%: all float\n", t_float > 0 ? 100 * t / t_float : 100, 100 * OQ_PLACEMENT_MARGIN);
	for (size_t i = 0; i < p->nu; i++)
		p->u[i].fl = 1;
	return 1;
}

/* ------------------------------------------------------------ measuring */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted node names of the float units into p->float_nodes (replacing them). */
static int float_list(const plc *pl, oq_placement *p, oq_diag *d)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n_float_nodes; i++)
		free(p->float_nodes[i]);
	free(p->float_nodes);
	p->float_nodes = NULL;
	p->n_float_nodes = 0;
	for (size_t i = 0; i < pl->nu; i++)
		if (pl->u[i].fl)
			n += pl->u[i].n_nodes;
	if (!(p->float_nodes = oq_calloc(n + 1, sizeof *p->float_nodes)))
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	for (size_t i = 0; i < pl->nu; i++)
		for (size_t k = 0; pl->u[i].fl && k < pl->u[i].n_nodes; k++) {
			const char *name = pl->u[i].nodes[k]->name;
			if (!name[0])
				continue;
			if (!(p->float_nodes[p->n_float_nodes] = oq_strdup(name)))
				return oq_err(d, OQ_ENOMEM, "placement: out of memory");
			p->n_float_nodes++;
		}
	qsort(p->float_nodes, p->n_float_nodes, sizeof *p->float_nodes, cmp_str);
	return OQ_OK;
}

/* Context of the fidelity measurements. */
typedef struct meas {
	const oq_pipeline_opts *o;
	const oq_placement_src *src;
	oq_calib_opts co;    /* the calibration samples, at most OQ_PLACEMENT_SAMPLES of them */
	oq_model *ref;       /* the float model (rewritten) */
	oq_bc_targets b;     /* no layers: SQNR only (its sample flags are freed) */
	oq_bc_float_cache cache;
	size_t k;            /* calibration folds (< 2: none; then one model on the calibration ranges) */
	size_t n_all;        /* samples the folds cut */
	oq_ranges *fr;       /* k: fold f's ranges, from the other folds' statistics (NULL: each model
			      * on the calibration ranges, when a fold's others hold fewer than
			      * OQ_PLACEMENT_MIN_TRAIN samples) */
	int fr_borrowed;     /* fr is the source's (oq_placement_src.fr), not freed here */
	const char *shift;   /* the output whose mean error per channel the bias correction removes
			      * (NULL: none), its channels and axis */
	size_t shift_m;
	int shift_last;
	size_t runs;         /* models measured */
} meas;

/* Sample i's fold (0 without folds). */
static size_t fold_of(const meas *me, size_t i)
{
	return me->k >= 2 ? oq_folds_of(i, me->n_all, me->k) : 0;
}

static double capped_db(double r2, double d2)
{
	double db;
	if (isnan(r2) || isnan(d2))
		return NAN;
	if (d2 <= 0)
		return OQ_BC_SQNR_CAP;
	db = 10 * log10(r2 / d2);
	return db > OQ_BC_SQNR_CAP ? OQ_BC_SQNR_CAP : db;
}

/*
 * The held-out estimate from the measured samples' errors e: the mean SQNR over (sample,
 * float output) pairs; with a shift output, also with that output's mean error per channel
 * removed as the bias correction of the last layer would, estimated on the samples of the
 * other folds only: the larger of the two (the correction is kept only where it helps).
 */
static int estimate(const meas *me, const oq_bc_outerr *e, double *mean, oq_diag *d)
{
	size_t k = me->k >= 2 ? me->k : 1, M = e->out_k < e->nout ? me->shift_m : 0, np = 0;
	double *es = oq_calloc(k * M + 1, sizeof *es), *sh = oq_calloc(M + 1, sizeof *sh), raw = 0, cor = 0;
	uint64_t *cs = oq_calloc(k + 1, sizeof *cs);

	if (!es || !sh || !cs) {
		free(es);
		free(sh);
		free(cs);
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	}
	for (size_t i = 0; M && i < e->n; i++)
		if (e->cnt[i]) {
			size_t f = fold_of(me, i);
			for (size_t c = 0; c < M; c++)
				es[f * M + c] += e->e[i * M + c];
			cs[f] += e->cnt[i];
		}
	for (size_t i = 0; i < e->n; i++) {
		size_t f = fold_of(me, i);
		uint64_t other = 0;
		for (size_t g = 0; g < k; g++)
			other += g == f ? 0 : cs[g];
		for (size_t c = 0; c < M && other; c++) {
			sh[c] = 0;
			for (size_t g = 0; g < k; g++)
				sh[c] += g == f ? 0 : es[g * M + c];
			sh[c] /= (double)other;
		}
		for (size_t o = 0; o < e->nout; o++) {
			double r2 = e->r2[i * e->nout + o], d2 = e->d2[i * e->nout + o], db = capped_db(r2, d2);
			if (isnan(db))
				continue;
			raw += db;
			np++;
			if (o == e->out_k && e->cnt[i] && other) {
				/* sum (x - s)^2 = sum x^2 - 2 s sum x + s^2 n, per channel */
				for (size_t c = 0; c < M; c++)
					d2 += sh[c] * (sh[c] * (double)e->cnt[i] - 2 * e->e[i * M + c]);
				db = capped_db(r2, d2 > 0 ? d2 : 0);
			}
			cor += db;
		}
	}
	free(es);
	free(sh);
	free(cs);
	*mean = np ? (cor > raw ? cor : raw) / (double)np : NAN;
	return OQ_OK;
}

/* A float list: sorted node names (float_list's). */
typedef struct names {
	char **v;
	size_t n;
} names;

static void names_free(names *l)
{
	for (size_t i = 0; l->v && i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof *l);
}

/* l := p's float list, taken from p. */
static void names_take(names *l, oq_placement *p)
{
	l->v = p->float_nodes;
	l->n = p->n_float_nodes;
	p->float_nodes = NULL;
	p->n_float_nodes = 0;
}

static int cmp_node_name(const void *a, const void *b)
{
	return strcmp((*(oq_node *const *)a)->name, (*(oq_node *const *)b)->name);
}

/* The node named `name` among ord[0..n) (sorted by name), or NULL. */
static oq_node *node_by_name(oq_node *const *ord, size_t n, const char *name)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = strcmp(ord[mid]->name, name);
		if (r == 0)
			return ord[mid];
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * The tails of a round's candidates on base model bm (measure.h): per candidate, the nodes of
 * bm named in one float list and not the other (the units the candidate changes), with the
 * DequantizeLinear nodes feeding them and the QuantizeLinear nodes feeding those (a float unit
 * reads the value before them), planned; u := the union of what those plans keep.
 */
static int plan_tails(const oq_model *bm, const names *base, const names *cand, size_t nc, oq_bc_prefix *u,
		      oq_diag *d)
{
	const oq_graph *g = bm->graph;
	oq_node **ord = oq_calloc(g->n_nodes + 1, sizeof *ord), **seed = oq_calloc(g->n_nodes + 1, sizeof *seed);
	oq_bc_prefix *pl = oq_calloc(nc + 1, sizeof *pl);
	unsigned char *mark = oq_calloc(g->n_nodes + 1, 1);
	size_t no = 0;
	int rc = OQ_OK;

	u->state = -1;
	if (!ord || !seed || !pl || !mark) {
		rc = oq_err(d, OQ_ENOMEM, "placement: out of memory");
		goto out;
	}
	for (size_t i = 0; i < g->n_nodes; i++)
		if (g->nodes[i]->name[0])
			ord[no++] = g->nodes[i];
	qsort(ord, no, sizeof *ord, cmp_node_name);
	for (size_t k = 0; k < nc && !rc; k++) {
		size_t i = 0, j = 0, ns = 0;
		memset(mark, 0, g->n_nodes);
		while (i < base->n || j < cand[k].n) {
			int c = i == base->n ? 1 : j == cand[k].n ? -1 : strcmp(base->v[i], cand[k].v[j]);
			oq_node *n = c ? node_by_name(ord, no, c < 0 ? base->v[i] : cand[k].v[j]) : NULL;
			i += c <= 0;
			j += c >= 0;
			if (!n)
				continue;
			mark[n->index] = 1;
			for (size_t x = 0; x < n->n_inputs; x++) {
				oq_node *dq = n->inputs[x] ? n->inputs[x]->producer : NULL, *qn;
				if (!dq || dq->graph != g || !oq_node_is(dq, OQ_OP_DequantizeLinear))
					continue;
				mark[dq->index] = 1;
				qn = dq->n_inputs && dq->inputs[0] ? dq->inputs[0]->producer : NULL;
				if (qn && qn->graph == g && oq_node_is(qn, OQ_OP_QuantizeLinear))
					mark[qn->index] = 1;
			}
		}
		for (size_t x = 0; x < g->n_nodes; x++)
			if (mark[x])
				seed[ns++] = g->nodes[x];
		rc = oq_bc_prefix_plan(bm, seed, ns, &pl[k], d);
	}
	if (!rc)
		rc = oq_bc_prefix_union(pl, nc, u, d);
out:
	for (size_t k = 0; pl && k < nc; k++)
		oq_bc_prefix_free(&pl[k]);
	free(pl);
	free(ord);
	free(seed);
	free(mark);
	return rc;
}

/* A fold's model of the current placement in a round, and what its run kept. */
typedef struct fold_base {
	oq_model *bm;
	oq_bc_prefix u;
	size_t lo, hi;
	int on; /* the fold has samples among the measured ones */
} fold_base;

/*
 * One round of the fidelity search: got[k] := the held-out output SQNR (estimate) of the model
 * quantize q makes with float list cand[k], for k < nc (cand NULL, nc 1: with q's own list):
 * per fold f with samples among the measured ones, the model on f's ranges runs f's samples.
 * With two candidates or more the model of the current placement (float list base) runs each
 * fold's samples first, keeping what the candidates' tails read (plan_tails), and each
 * candidate then runs only the nodes where it differs from that model and what they reach
 * (oq_bc_prefix_view): the same errors as whole runs, bit for bit, for one run of the base.
 * With base_got, that run also measures the base: *base_got := its estimate, and the
 * candidates run only when it is below target (got untouched otherwise).
 */
static int measure_round(meas *me, const oq_opts *q, const names *base, const names *cand, size_t nc,
			 double *got, double *base_got, double target, oq_diag *d)
{
	oq_pass_run run = me->o->run;
	const oq_bc_outerr want = {.out = me->shift, .M = me->shift_m, .ch_last = me->shift_last};
	oq_bc_outerr *err = oq_calloc(nc + 1, sizeof *err), errb = want;
	size_t k_f = me->fr ? me->k : 1;
	fold_base *fb = oq_calloc(k_f, sizeof *fb);
	int rc = OQ_OK, tails = nc >= 2 && cand && oq_bc_tail, cands = 1;

	if (!err || !fb) {
		free(err);
		free(fb);
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	}
	for (size_t k = 0; k < nc; k++)
		err[k] = want;
	run.stage = oq_passes_quantize;
	/* the base, fold by fold; its models and what they kept stay for the candidates */
	for (size_t f = 0; f < k_f && !rc; f++) {
		oq_opts c = *q;
		fold_base *b = &fb[f];
		b->u.state = -1;
		if (me->fr) {
			b->lo = oq_folds_begin(f, me->n_all, me->k);
			b->hi = oq_folds_begin(f + 1, me->n_all, me->k);
			if (b->lo >= me->co.limit)
				continue;
			c.ranges = &me->fr[f];
		}
		b->on = 1;
		if (!tails && !base_got)
			continue;
		c.float_nodes = (const char *const *)base->v;
		c.n_float_nodes = base->n;
		if (!(rc = me->src->float_copy(me->src->ctx, &c, &b->bm, d)) && !(rc = oq_passes_run(b->bm, &run, &c, d)) &&
		    tails)
			rc = plan_tails(b->bm, base, cand, nc, &b->u, d);
		if (!rc && (base_got || b->u.state == 0)) {
			oq_bc_quantized r = {.qm = b->bm, .folds = (1u << OQ_BC_FOLDS) - 1, .lo = b->lo, .hi = b->hi,
					     .keep = b->u.state == 0 ? &b->u : NULL, .err = base_got ? &errb : NULL};
			rc = oq_bc_measure(me->ref, NULL, &r, 1, &me->co, &me->b, &me->cache, d);
			oq_bc_sqnr_free(&r.sqnr);
		}
	}
	if (!rc && base_got && !(rc = estimate(me, &errb, base_got, d))) {
		me->runs++;
		cands = *base_got < target;
	}
	/* the candidates */
	for (size_t f = 0; f < k_f && !rc && cands; f++) {
		oq_opts c = *q;
		fold_base *b = &fb[f];
		if (!b->on)
			continue;
		if (me->fr)
			c.ranges = &me->fr[f];
		for (size_t k = 0; k < nc && !rc; k++) {
			oq_model *qm = NULL;
			oq_bc_prefix v = {.state = -1};
			oq_bc_quantized r = {.folds = (1u << OQ_BC_FOLDS) - 1, .lo = b->lo, .hi = b->hi, .err = &err[k]};
			if (cand) {
				c.float_nodes = (const char *const *)cand[k].v;
				c.n_float_nodes = cand[k].n;
			}
			if (!(rc = me->src->float_copy(me->src->ctx, &c, &qm, d)) && !(rc = oq_passes_run(qm, &run, &c, d)) &&
			    b->u.state == 1)
				rc = oq_bc_prefix_view(&b->u, b->bm, qm, &v, d);
			r.qm = qm;
			r.from = v.state == 1 ? &v : NULL;
			if (!rc)
				rc = oq_bc_measure(me->ref, NULL, &r, 1, &me->co, &me->b, &me->cache, d);
			oq_bc_sqnr_free(&r.sqnr);
			oq_bc_prefix_free(&v);
			oq_model_free(qm);
		}
	}
	for (size_t k = 0; k < nc && !rc && cands; k++)
		if (!(rc = estimate(me, &err[k], &got[k], d)))
			me->runs++;
	for (size_t f = 0; f < k_f; f++) {
		oq_bc_prefix_free(&fb[f].u);
		oq_model_free(fb[f].bm);
	}
	for (size_t k = 0; k < nc; k++)
		oq_bc_outerr_free(&err[k]);
	oq_bc_outerr_free(&errb);
	free(err);
	free(fb);
	return rc;
}

/*
 * Balanced: the integer units in graph order cut into up to 8 groups of about
 * equal MACs, then rounds: each group still integer is measured with it
 * float on top of the groups floated so far (its gain and expected time
 * against the current placement), and the group with the most dB per
 * expected ns goes float (ties: graph order), until the SQNR reaches target
 * or no group gains OQ_PLACEMENT_MIN_GAIN_DB. A group's gain is re-measured
 * every round: an error it causes may be masked by a larger one upstream
 * until that goes float. The chosen group's measurement is the new SQNR:
 * the units' modes are restored from a snapshot after each trial, so
 * committing the group (and keep_from_wbq) gives the state measured. The
 * first round's base run measures the placement as it comes (p->sqnr_speed,
 * *sqnr; p->measured): at or above target, no candidate runs.
 */
static int fidelity_search(plc *pl, meas *me, const oq_opts *q, oq_placement *p, double target, double *sqnr,
			   FILE *log, int verbose, oq_diag *d)
{
	enum { G = 8 };
	size_t first[G + 1], ng = 0, nint = 0, nc;
	double gain[G], cost[G], got[G], meas_got[G], cur_t = 0, macs = 0, acc = 0;
	names base = {0}, cand[G];
	int done[G] = {0}, *snap = NULL, rc = OQ_OK;

	memset(cand, 0, sizeof cand);

	for (size_t i = 0; i < pl->nu; i++)
		if (!pl->u[i].fl) {
			nint++;
			macs += pl->u[i].macs > 0 ? pl->u[i].macs : 0;
		}
	if (!nint)
		return OQ_OK;
	if (!(snap = oq_calloc(pl->nu + 1, sizeof *snap)))
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	/* group boundaries: a new group when the running MACs pass the next eighth (at least one unit each) */
	for (size_t i = 0; i < pl->nu; i++) {
		if (pl->u[i].fl)
			continue;
		if (ng == 0 || (ng < G && acc >= macs * (double)ng / G && first[ng - 1] != i))
			first[ng++] = i;
		acc += pl->u[i].macs > 0 ? pl->u[i].macs : 0;
	}
	first[ng] = pl->nu;
	for (size_t round = 0; round < ng && (round == 0 || *sqnr < target); round++) {
		size_t best = ng;
		double best_r = 0, speed = NAN;
		cur_t = total_ns(pl);
		for (size_t i = 0; i < pl->nu; i++)
			snap[i] = pl->u[i].fl;
		/* the candidates' float lists (keep_from_wbq applied, as for the placement's own), then
		 * their measurements */
		if ((rc = float_list(pl, p, d)))
			goto out;
		names_free(&base);
		names_take(&base, p);
		nc = 0;
		for (size_t k = 0; k < ng; k++) {
			if (done[k])
				continue;
			for (size_t i = first[k]; i < first[k + 1]; i++)
				if (!pl->u[i].fl)
					pl->u[i].fl = 2; /* float for this measurement */
			keep_from_wbq(pl);
			cost[k] = total_ns(pl) - cur_t;
			keep_from_wbq(pl);
			rc = float_list(pl, p, d);
			names_free(&cand[nc]);
			names_take(&cand[nc++], p);
			for (size_t i = 0; i < pl->nu; i++)
				pl->u[i].fl = snap[i];
			if (rc)
				goto out;
		}
		if ((rc = measure_round(me, q, &base, cand, nc, meas_got, round == 0 ? &speed : NULL, target, d)))
			goto out;
		if (round == 0) { /* the speed placement's own estimate, from the round's base run */
			p->sqnr_speed = *sqnr = speed;
			p->measured = 1;
			if (log && verbose)
				fprintf(log, "placement: estimated SQNR (%s) accuracy-first %.2f dB, speed %.2f dB (budget "
					"%.1f dB)\n", me->fr ? "held-out folds" : "calibration ranges", p->sqnr_accuracy,
					p->sqnr_speed, OQ_PLACEMENT_BUDGET_DB);
			if (!(*sqnr < target))
				break;
		}
		for (size_t k = 0, c = 0; k < ng; k++) {
			double r;
			if (done[k])
				continue;
			got[k] = meas_got[c++];
			gain[k] = got[k] - *sqnr;
			if (log && verbose)
				fprintf(log, "placement: round %zu: group %zu (units %zu..%zu) float: %+.2f dB, %+.1f%% "
					"expected time\n", round, k, first[k], first[k + 1] - 1, gain[k],
					cur_t > 0 ? 100 * cost[k] / cur_t : 0);
			r = gain[k] / (cost[k] > 1 ? cost[k] : 1);
			if (gain[k] >= OQ_PLACEMENT_MIN_GAIN_DB && (best == ng || r > best_r)) {
				best = k;
				best_r = r;
			}
		}
		if (best == ng)
			break; /* no group gains enough on top of the current placement */
		for (size_t i = first[best]; i < first[best + 1]; i++)
			if (!pl->u[i].fl)
				pl->u[i].fl = 3; /* float for fidelity */
		keep_from_wbq(pl);
		done[best] = 1;
		*sqnr = got[best];
		if (log && verbose)
			fprintf(log, "placement: group %zu float: estimated SQNR %.2f dB\n", best, *sqnr);
	}
	/* the budget missed: which integer units trade fidelity for speed, and what each group would buy */
	for (size_t k = 0; log && *sqnr < target && k < ng; k++) {
		size_t n = 0, fi = 0, last = 0;
		for (size_t i = first[k]; !done[k] && i < first[k + 1]; i++)
			if (!pl->u[i].fl) {
				fi = n++ ? fi : i;
				last = i;
			}
		if (n)
			fprintf(log, "placement: traded for speed: %zu integer units '%s' .. '%s': float, %+.2f dB on the "
				"estimate for %+.1f%% expected time\n", n, pl->u[fi].head->name,
				pl->u[last].head->name, gain[k], cur_t > 0 ? 100 * cost[k] / cur_t : 0);
	}
out:
	names_free(&base);
	for (size_t k = 0; k < G; k++)
		names_free(&cand[k]);
	free(snap);
	return rc;
}

/* ------------------------------------------------------------ entry */

int oq_placement_range_needs(oq_model *m, const oq_opts *q, uint8_t *need, oq_diag *d)
{
	oq_opts a = *q;
	uint8_t *na;
	int changed, rc;

	if (!oq_runtime_aware(q) || q->prefer != OQ_PREFER_BALANCED)
		return oq_quantize_range_needs(m->graph, q, need, d);
	if (!(na = oq_calloc(m->graph->n_values + 1, 1)))
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	a.prefer = OQ_PREFER_ACCURACY;
	a.log = NULL;
	if (!(rc = oq_pass_fuse(m->graph, &a, d, &changed)) && !(rc = oq_quantize_range_needs(m->graph, &a, na, d)))
		a = *q, a.log = NULL, rc = oq_pass_fuse(m->graph, &a, d, &changed);
	if (!rc && !(rc = oq_quantize_range_needs(m->graph, q, need, d)))
		for (size_t i = 0; i < m->graph->n_values; i++)
			need[i] |= na[i];
	free(na);
	return rc;
}

/* Are the main graph's fed inputs' shapes fixed, but for a symbolic first (batch) dim? */
static int fixed_inputs(const oq_graph *g)
{
	for (size_t i = 0; i < g->n_inputs; i++) {
		const oq_value *v = g->inputs[i];
		if (v->init)
			continue;
		if (v->type.kind != OQ_TYPE_TENSOR || v->type.rank < 0)
			return 0;
		for (int k = 1; k < v->type.rank; k++)
			if (v->type.dims[k].value < 0)
				return 0;
	}
	return 1;
}

/* me's fold ranges (folds with measured samples) and shift output; the caller frees them. */
static int meas_init(meas *me, const oq_opts *q, oq_diag *d)
{
	const oq_calib_opts *co = me->src->co;
	const oq_stats *folds = me->src->folds;
	const oq_graph *g = me->ref->graph;
	oq_bc_targets tb = {0};
	oq_opts a = *q;
	int rc;

	if ((folds && folds->n_folds >= 2) || (me->src->fr && me->src->fr_k >= 2)) {
		size_t train = SIZE_MAX;
		me->k = me->src->fr ? me->src->fr_k : folds->n_folds;
		me->n_all = (size_t)(me->src->fr ? me->src->fr_total : folds->n_total);
		for (size_t f = 0; f < me->k; f++) {
			size_t in_f = oq_folds_begin(f + 1, me->n_all, me->k) - oq_folds_begin(f, me->n_all, me->k);
			train = me->n_all - in_f < train ? me->n_all - in_f : train;
		}
		if (train < OQ_PLACEMENT_MIN_TRAIN)
			goto shift;
		if (me->src->fr) { /* the same held-out ranges, made before the statistics were freed */
			me->fr = (oq_ranges *)me->src->fr;
			me->fr_borrowed = 1;
			goto shift;
		}
		if (!(me->fr = oq_calloc(me->k, sizeof *me->fr)))
			return oq_err(d, OQ_ENOMEM, "placement: out of memory");
		for (size_t f = 0; f < me->k; f++)
			if (oq_folds_begin(f, me->n_all, me->k) < me->co.limit &&
			    (rc = oq_calibrate_held_out(me->ref, co, folds, f, &me->fr[f], d)))
				return rc;
	}
shift:
	if (me->o->bias_correction != OQ_BC_EMPIRICAL)
		return OQ_OK;
	a.log = NULL;
	if ((rc = oq_bc_targets_find(me->ref->graph, &a, &tb, d)))
		return rc;
	for (size_t i = 0; tb.n && i < g->n_outputs; i++)
		if (g->outputs[i] && !strcmp(g->outputs[i]->name, tb.v[tb.n - 1].measured)) {
			me->shift = g->outputs[i]->name;
			me->shift_m = tb.v[tb.n - 1].M;
			me->shift_last = tb.v[tb.n - 1].ch_last;
		}
	oq_bc_targets_free(&tb);
	return OQ_OK;
}

/*
 * The value sizes and, for the ORT profile's runtime-aware placement, the units and the speed
 * search (p->st); p->speed_done either way.
 */
static int speed_phase(const oq_pipeline_opts *o, oq_opts *q, oq_model *m, oq_placement *p, FILE *log,
		       oq_diag *d)
{
	struct oq_placement_state *st;
	oq_calib_opts co;
	plc *pl;
	int rc;

	memset(p, 0, sizeof *p);
	p->speed_done = 1;
	/* sizes from the declared input shapes when they are fixed (a symbolic batch dim is 1), so
	 * `quantize --stats` places as `--calib` does; else from the first calibration sample */
	co = o->calib;
	if (fixed_inputs(m->graph))
		co.source = "random:1";
	else if (o->stats_in)
		co.source = NULL;
	if (!co.source)
		return OQ_OK;
	if (!(st = oq_calloc(1, sizeof *st)))
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	if ((rc = oq_value_sizes_measure(m, &co, &st->sz, d)) || (rc = keep_sizes(p, m->graph, &st->sz, d)) ||
	    !oq_runtime_aware(q)) {
		state_free(st);
		return rc;
	}
	p->st = st;
	pl = &st->pl;
	pl->g = m->graph;
	pl->q = q;
	pl->sz = &st->sz;
	pl->unit_of = malloc((m->graph->n_nodes + 1) * sizeof *pl->unit_of);
	pl->mode = oq_calloc(m->graph->n_nodes + 1, sizeof *pl->mode);
	if (!pl->unit_of || !pl->mode)
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	for (size_t i = 0; i < m->graph->n_nodes; i++)
		pl->unit_of[i] = -1;
	if ((rc = oq_graph_rebuild_uses(m->graph)) || (rc = build_units(pl, d)))
		return rc;
	p->n_units = pl->nu;
	for (size_t i = 0; i < pl->nu; i++)
		pl->u[i].fl = 1;
	st->t_float = total_ns(pl);
	if ((rc = speed_search(pl, d)))
		return rc;
	p->within_margin = margin(pl, st->t_float, o->verbose ? log : NULL);
	keep_from_wbq(pl);
	return OQ_OK;
}

int oq_placement_speed(const oq_pipeline_opts *o, oq_opts *q, oq_model *m, oq_placement *p, FILE *log,
		       oq_diag *d)
{
	int rc = speed_phase(o, q, m, p, log, d);
	if (rc)
		return rc;
	if (oq_placement_all_float(p)) {
		if ((rc = float_list(&p->st->pl, p, d)))
			return rc;
		q->float_nodes = (const char *const *)p->float_nodes;
		q->n_float_nodes = p->n_float_nodes;
	}
	return OQ_OK;
}

int oq_placement_all_float(const oq_placement *p)
{
	if (!p->st)
		return 0;
	for (size_t i = 0; i < p->st->pl.nu; i++)
		if (!p->st->pl.u[i].fl)
			return 0;
	return 1;
}

int oq_placement_choose(const oq_pipeline_opts *o, const oq_placement_src *src, oq_opts *q, oq_model *m,
			oq_placement *p, FILE *log, oq_diag *d)
{
	struct oq_placement_state *st;
	plc *pl;
	meas me = {0};
	double t_float, t;
	size_t n_int = 0;
	int rc;

	if (!p->speed_done && (rc = speed_phase(o, q, m, p, log, d)))
		return rc;
	if (!(st = p->st))
		return OQ_OK;
	pl = &st->pl;
	t_float = st->t_float;
	t = total_ns(pl);
	for (size_t i = 0; i < pl->nu; i++)
		n_int += !pl->u[i].fl;
	/* balanced measures what the integer units cost (none: nothing to trade) */
	if (q->prefer == OQ_PREFER_BALANCED && n_int && o->calib.source && strncmp(o->calib.source, "random:", 7) &&
	    !o->stats_in) {
		oq_opts a = *q;
		double target;
		me.o = o;
		me.src = src;
		me.co = o->calib;
		if (!me.co.limit || me.co.limit > OQ_PLACEMENT_SAMPLES)
			me.co.limit = OQ_PLACEMENT_SAMPLES;
		me.ref = m;
		a.prefer = OQ_PREFER_ACCURACY;
		a.float_nodes = NULL;
		a.n_float_nodes = 0;
		a.log = NULL;
		if ((rc = meas_init(&me, q, d)) ||
		    (rc = oq_bc_measure(m, NULL, NULL, 0, &me.co, &me.b, &me.cache, d)) ||
		    (rc = measure_round(&me, &a, NULL, NULL, 1, &p->sqnr_accuracy, NULL, 0, d)))
			goto out;
		a = *q;
		a.log = NULL;
		/* the speed placement's estimate is the first round's base run (fidelity_search) */
		keep_from_wbq(pl);
		target = p->sqnr_accuracy - OQ_PLACEMENT_BUDGET_DB;
		if ((rc = fidelity_search(pl, &me, &a, p, target, &p->sqnr_chosen, log, o->verbose, d)))
			goto out;
		t = total_ns(pl);
		/* what the units floated for fidelity leave may save too little: the speed search's
		 * margin again, then every unit float (those of fidelity keep their reason) */
		if (!(t <= OQ_PLACEMENT_MARGIN * t_float)) {
			if (log && o->verbose)
				fprintf(log, "placement: with the units floated for fidelity the expected time is %.0f%% "
					"of all units float, more than %.0f%%: all float\n", t_float > 0 ? 100 * t / t_float : 100,
					100 * OQ_PLACEMENT_MARGIN);
			for (size_t i = 0; i < pl->nu; i++)
				if (!pl->u[i].fl)
					pl->u[i].fl = 1;
			p->within_margin = 1;
			p->sqnr_chosen = INFINITY;
			t = total_ns(pl);
		}
	}
	p->n_float_speed = p->n_float_fidelity = 0;
	for (size_t i = 0; i < pl->nu; i++) {
		p->n_float_speed += pl->u[i].fl == 1;
		p->n_float_fidelity += pl->u[i].fl == 3;
	}
	p->est_ratio = t_float > 0 ? t / t_float : 1;
	if (log)
		fprintf(log, "placement: %zu of %zu Conv/Gemm/MatMul units integer (%zu float: faster so, %zu: fidelity); "
			"expected ONNX Runtime time %.0f%% of the float model's\n", p->n_units - p->n_float_speed -
			p->n_float_fidelity, p->n_units, p->n_float_speed, p->n_float_fidelity, 100 * p->est_ratio);
	if (log && p->measured)
		fprintf(log, "placement: estimated output SQNR %.2f dB (accuracy-first %.2f, speed %.2f)\n",
			p->sqnr_chosen, p->sqnr_accuracy, p->sqnr_speed);
	if (log && p->measured && p->sqnr_chosen < p->sqnr_accuracy - OQ_PLACEMENT_BUDGET_DB)
		fprintf(log, "placement: %.2f dB below the accuracy-first placement (budget %.1f dB): no group left "
			"gains more than %.1f dB alone; the integer units above trade it for speed (--prefer "
			"accuracy keeps them fused)\n", p->sqnr_accuracy - p->sqnr_chosen, OQ_PLACEMENT_BUDGET_DB,
			OQ_PLACEMENT_MIN_GAIN_DB);
	if ((rc = float_list(pl, p, d)))
		goto out;
	q->float_nodes = (const char *const *)p->float_nodes;
	q->n_float_nodes = p->n_float_nodes;
	if (log && o->verbose)
		for (size_t i = 0; i < pl->nu; i++)
			fprintf(log, "placement: unit '%s' (%s, %zu nodes, %.3g MMAC): %s\n", pl->u[i].head->name,
				pl->u[i].head->op_type, pl->u[i].n_nodes, pl->u[i].macs / 1e6,
				!pl->u[i].fl ? "integer" : pl->u[i].fl == 3 ? "float (fidelity)" : "float (faster so)");
out:
	state_free(p->st);
	p->st = NULL;
	for (size_t f = 0; me.fr && !me.fr_borrowed && f < me.k; f++)
		oq_ranges_free(&me.fr[f]);
	if (!me.fr_borrowed)
		free(me.fr);
	oq_bc_float_cache_free(&me.cache);
	oq_bc_targets_free(&me.b);
	return rc;
}
