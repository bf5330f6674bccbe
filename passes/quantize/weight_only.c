/*
 * weight_only.c - weight-only quantization (--weight-only): every selected
 * node's constant float32 weight becomes an integer initializer behind a
 * DequantizeLinear; activations stay float, no calibration.
 *
 *   MatMul(X, W[K,N])  ==>  MatMul(X, DQ(W_q, s, zp))
 *
 * Which input is the weight and which axes the granularities use:
 *   op            weight   per-channel axis        blocked axis (reduction)
 *   MatMul        in 1     last (N of [..,K,N])    rank-2 (K)
 *   Gemm          in 1     transB ? 0 : 1 (N)      transB ? 1 : 0 (K)
 *   Conv          in 1     0 (M of [M,C/g,k..])    1 (C/g)
 *   ConvTranspose in 1     1 (M/g of [C,M/g,k..])  0 (C)
 *   Gather        in 0     0 (one scale per row)   last (the embedding dim)
 *   LSTM/GRU/RNN  in 1, 2  1 (G*H of [D,G*H,I|H])   2 (I or H)
 * A rank-1 MatMul weight has no channel axis: it is quantized per tensor.
 * LSTM/GRU/RNN W and R are [directions, gates x hidden, in]: one scale per
 * gate row, shared by the directions (a per-axis DQ has one axis); they are
 * quantized only when o->op_types names the op (ONNX Runtime 1.30 loads and
 * runs the per-axis DQ in front of them).
 * Node selection: op type in o->op_types (default MatMul, Gemm); --include
 * (when given) and --exclude match a node name, an op type or the weight's
 * tensor name. Weights that are float16/bfloat16 or graph inputs are
 * skipped with a log line. Biases stay float.
 * If/Loop/Scan bodies (any depth) are rewritten the same way after the main
 * graph; a weight a body reads from an enclosing initializer is copied into
 * the body first (oq_weight_localize), so its DQ lives there.
 *
 * ONNX Runtime fuses DequantizeLinear -> MatMul into MatMulNBits only for
 * 4-bit blocked weights on axis 0 with a power-of-two block_size >= 16; a
 * log line says when the options chosen keep ORT on the unfused path.
 * Weights borrowed from an mmap of external data are released page by page
 * as they are quantized (qweight.c), so memory stays near the output size.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/quantize/qweight.h"

/* Where a supported op keeps its weight and which axes it quantizes along. */
typedef struct wrule {
	int w_idx;      /* input index of the weight */
	int w2_idx;     /* input index of a second weight (LSTM/GRU/RNN: R), -1 for none */
	int chan_axis;  /* per-channel axis (-1: none, per tensor) */
	int block_axis; /* blocked axis (the reduction axis) */
} wrule;

static const char *const default_ops[] = {"MatMul", "Gemm"};

/* Rule for node n with weight rank `rank`; 0 when the op has no weight rule. */
static int rule_for(const oq_node *n, int rank, wrule *r)
{
	r->w2_idx = -1;
	if (n->op == OQ_OP_MatMul) {
		r->w_idx = 1;
		r->chan_axis = rank >= 2 ? rank - 1 : -1;
		r->block_axis = rank >= 2 ? rank - 2 : 0;
	} else if (n->op == OQ_OP_Gemm) {
		int tb = oq_node_attr_int(n, "transB", 0) != 0;
		r->w_idx = 1;
		r->chan_axis = tb ? 0 : 1;
		r->block_axis = tb ? 1 : 0;
	} else if (n->op == OQ_OP_Conv) {
		r->w_idx = 1;
		r->chan_axis = 0;
		r->block_axis = 1;
	} else if (n->op == OQ_OP_ConvTranspose) {
		r->w_idx = 1;
		r->chan_axis = 1;
		r->block_axis = 0;
	} else if (n->op == OQ_OP_Gather) {
		r->w_idx = 0;
		r->chan_axis = 0;
		r->block_axis = rank - 1;
	} else if (n->op == OQ_OP_LSTM || n->op == OQ_OP_GRU || n->op == OQ_OP_RNN) {
		r->w_idx = 1;
		r->w2_idx = 2;
		r->chan_axis = 1;
		r->block_axis = 2;
	} else {
		return 0;
	}
	return 1;
}

static int in_names(const char *const *list, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] && s && strcmp(list[i], s) == 0)
			return 1;
	return 0;
}

static int matches(const char *const *list, size_t n, const oq_node *node, const oq_value *w)
{
	return in_names(list, n, node->name) || in_names(list, n, node->op_type) ||
	       (w && in_names(list, n, w->name));
}

static int is_pow2(int64_t v)
{
	return v > 0 && (v & (v - 1)) == 0;
}

/* Fills s with the spec options o give a weight of rule r and rank `rank`. */
static void spec_of(const oq_opts *o, const wrule *r, int rank, const char *name, oq_wspec *s)
{
	memset(s, 0, sizeof *s);
	s->dtype = o->weight_type;
	s->symmetric = !o->weight_asym;
	s->sym_grid = o->sym_grid;
	s->reduce_range = o->reduce_range;
	s->mse = o->weight_method == OQ_WMETHOD_MSE;
	if (o->granularity == OQ_GRAN_BLOCK) {
		s->axis = r->block_axis;
		s->block_size = o->block_size > 0 ? o->block_size : 32;
	} else if (o->granularity == OQ_GRAN_CHANNEL) {
		s->axis = r->chan_axis;
	} else {
		s->axis = -1;
	}
	if (s->axis >= rank)
		s->axis = -1, s->block_size = 0;
	oq_wlearned_apply(o->learned, name, s);
}

/*
 * The weights weight-only mode quantizes in g, in node order, and how (*out, free()); with a
 * log, the op types without a rule and the weights that stay float are noted there. With
 * `localize` (g a body, uses current) a weight captured from an enclosing graph's initializer
 * is first copied into g (oq_weight_localize).
 */
static int collect(oq_graph *g, const oq_opts *o, FILE *log, int localize, oq_wplan **out,
                   size_t *n_out, oq_diag *d)
{
	const char *const *ops = o->op_types ? o->op_types : default_ops;
	size_t n_ops = o->op_types ? o->n_op_types : sizeof default_ops / sizeof *default_ops;
	oq_wplan *p;
	size_t np = 0;
	int rc;

	*out = NULL;
	*n_out = 0;
	for (size_t i = 0; i < n_ops && log && !g->parent; i++) {
		oq_node probe;
		wrule r;
		memset(&probe, 0, sizeof probe);
		probe.op = oq_op_lookup(oq_domain_of(""), ops[i]);
		if (!rule_for(&probe, 2, &r))
			fprintf(log, "weight-only: op type '%s' has no weight rule; its nodes stay float\n", ops[i]);
	}
	if (!(p = oq_calloc(2 * g->n_nodes + 1, sizeof *p)))
		return oq_err(d, OQ_ENOMEM, "weight-only: out of memory");
	for (size_t k = 0; k < g->n_nodes; k++) {
		oq_node *n = g->nodes[k];
		wrule r;
		if (n->dead || !in_names(ops, n_ops, n->op_type) || *n->domain != '\0')
			continue;
		if (!rule_for(n,
		              n->n_inputs > 1 && n->inputs[1] && n->inputs[1]->init
		                  ? n->inputs[1]->init->rank
		                  : 2,
		              &r))
			continue;
		for (int j = 0; j < 2; j++) {
			int idx = j ? r.w2_idx : r.w_idx;
			oq_value *w;
			if (idx < 0 || (size_t)idx >= n->n_inputs || !(w = n->inputs[idx]))
				continue;
			if (n->op == OQ_OP_Gather && w->init)
				(void)rule_for(n, w->init->rank, &r);
			if (o->n_include && !matches(o->include, o->n_include, n, w))
				continue;
			if (matches(o->exclude, o->n_exclude, n, w))
				continue;
			if (localize && (w->flags & OQ_V_OUTER)) {
				if ((rc = oq_weight_localize(g, n, idx, d))) {
					free(p);
					return rc;
				}
				w = n->inputs[idx];
			}
			if (!w->init && !((w->flags & OQ_V_OUTER) && oq_value_resolve(w)->init)) {
				/* an activation, not a weight; a recurrent op's W / R computed by nodes
				 * (torch.jit.script exports slice them from the parameters, and cleanup
				 * folds only data-movement chains of constants) is noted */
				if (log && r.w2_idx >= 0)
					fprintf(log, "weight-only: node '%s' (%s): weight '%s' is computed by "
					        "nodes, not an initializer: it stays float\n", n->name, n->op_type,
					        w->name);
				continue;
			}
			if (!oq_weight_quantizable(w)) {
				if (log)
					fprintf(log,
					        "weight-only: node '%s' (%s): weight '%s' (%s%s) stays "
					        "float: %s\n",
					        n->name, n->op_type, w->name,
					        oq_dtype_name(oq_value_resolve(w)->init->dtype),
					        (oq_value_resolve(w)->flags & OQ_V_INPUT) ? ", graph input" : "",
					        oq_value_resolve(w)->init->dtype != OQ_DT_FLOAT
					            ? "its consumer computes in that type and DQ outputs "
					              "float32"
					            : "an overridable graph input is not a constant");
				continue;
			}
			spec_of(o, &r, w->init->rank, w->name, &p[np].spec);
			p[np].node = n;
			p[np].w_idx = idx;
			p[np].b_idx = -1;
			np++;
		}
	}
	*out = p;
	*n_out = np;
	return OQ_OK;
}

int oq_weight_only_plans(oq_graph *g, const oq_opts *o, oq_wplan **out, size_t *n_out, oq_diag *d)
{
	return collect(g, o, NULL, 0, out, n_out, d);
}

/* Quantizes the weights collect finds in g (a body: localize); *noted: the MatMulNBits note went out. */
static int weight_only_graph(oq_graph *g, const oq_opts *o, int *noted_nbits, int *changed, oq_diag *d)
{
	oq_wplan *todo = NULL;
	size_t n_todo = 0;
	int rc;

	/* collect first, then mutate */
	if (g->parent && (rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "weight-only: out of memory");
	if ((rc = collect(g, o, o->log, g->parent != NULL, &todo, &n_todo, d)))
		return rc;
	for (size_t k = 0; k < n_todo && !rc; k++) {
		oq_node *n = todo[k].node;
		const oq_wspec *sp = &todo[k].spec;
		if (n->op == OQ_OP_MatMul && o->log && !*noted_nbits &&
		    (sp->block_size <= 0 || !is_pow2(sp->block_size) || sp->block_size < 16 ||
		     (sp->dtype != OQ_DT_INT4 && sp->dtype != OQ_DT_UINT4) || sp->axis != 0)) {
			fprintf(o->log,
			        "weight-only: note: ONNX Runtime fuses DequantizeLinear -> MatMul "
			        "into MatMulNBits "
			        "only for int4/uint4 weights blocked on axis 0 with a power-of-two "
			        "block size >= 16; "
			        "with %s %s weights it runs DequantizeLinear + a float MatMul\n",
			        oq_dtype_name(sp->dtype),
			        sp->block_size > 0 ? "blocked"
			        : sp->axis >= 0    ? "per-channel"
			                           : "per-tensor");
			*noted_nbits = 1;
		}
		if (o->log) {
			fprintf(o->log, "weight-only: node '%s' (%s): weight '%s' -> %s", n->name,
			        n->op_type, n->inputs[todo[k].w_idx]->name, oq_dtype_name(sp->dtype));
			if (sp->block_size > 0)
				fprintf(o->log, " blocked axis %d block %lld", sp->axis,
				        (long long)sp->block_size);
			else if (sp->axis >= 0)
				fprintf(o->log, " per-channel axis %d", sp->axis);
			else
				fprintf(o->log, " per-tensor");
			fprintf(o->log, "%s\n", sp->round_up ? ", learned rounding" : sp->n_fixed ? ", learned scales" : "");
		}
		rc = oq_weight_insert_dq(g, n, todo[k].w_idx, -1, 0.0f, 1.0f, sp, d);
		if (!rc)
			*changed = 1;
	}
	free(todo);
	return rc;
}

/* Walk state of the bodies. */
typedef struct wbodies {
	const oq_opts *o;
	oq_diag *d;
	int noted_nbits;   /* the MatMulNBits note went out */
	int changed;       /* some body changed */
} wbodies;

/* Weight-only on body b (owned by node owner), then on its own bodies (any depth). */
static int body(oq_graph *b, oq_node *owner, void *ctx)
{
	wbodies *x = ctx;
	int rc, changed = 0;

	(void)owner;
	if ((rc = weight_only_graph(b, x->o, &x->noted_nbits, &changed, x->d)))
		return rc;
	if (changed && (rc = oq_graph_toposort(b, x->d))) /* the driver sorts the main graph only */
		return rc;
	if (changed)
		(void)oq_graph_drop_unused_inits(b);
	x->changed |= changed;
	return oq_graph_each_subgraph(b, body, ctx);
}

int oq_quantize_weight_only(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	wbodies x;
	int rc;

	*changed = 0;
	memset(&x, 0, sizeof x);
	x.o = o;
	x.d = d;
	if ((rc = weight_only_graph(g, o, &x.noted_nbits, changed, d)))
		return rc;
	if ((rc = oq_graph_each_subgraph(g, body, &x)))
		return rc;
	*changed |= x.changed;
	if (*changed)
		rc = oq_graph_toposort(g, d);
	return rc;
}
