/*
 * plan_fold.c - what a plan computes once: constant folding and weight packing.
 *
 * Folding: the plan computes the nodes whose inputs are all constants and
 * whose op is cheap and deterministic (fold_op: Identity, Transpose,
 * Reshape, Cast, shape arithmetic, ...; exporters without constant folding
 * put Transpose(Identity(W)) before every weight), keeping their outputs as
 * plan constants beside the initializer views. Runs skip those nodes but
 * still report their outputs to an observer at the node's place, so
 * observers see exactly what they would see without folding. The same
 * kernels compute the folded values, so outputs are bit-identical with
 * folding and without (oq_exec_no_fold).
 *
 * Packing: a float32 MatMul / Gemm whose B is constant gets B packed once
 * into GEMM panels (oq_packed_b, gemm_packed.c), a float32 Conv its W into
 * 32-channel panels (oq_packed_w, conv_gemm.c). Constants that nothing but
 * folded nodes and packed products read are let go as they become unused
 * (const_drop), so a weight is held once, even at the plan's peak.
 */
#include "calib/exec/exec_internal.h"
#include "calib/kernels/linalg/linalg.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>

int oq_exec_no_fold;
int oq_exec_no_pack;

/*
 * Ops the plan may compute once: deterministic, no subgraph, no state, and
 * cheap or data movement only - what exporters put between a weight and its
 * consumer (Identity, Transpose, Reshape, Cast, ...) or use to build shapes
 * from constants (Shape, Gather, Unsqueeze, Concat, arithmetic on scalars).
 * DequantizeLinear is left out unless oq_exec_opts.fold_dq asks for it:
 * folding it keeps a float copy of every quantized weight (four times the
 * int8 bytes, packed when a product reads it).
 */
static int fold_op(const oq_exec *e, oq_op op)
{
	if (op == OQ_OP_DequantizeLinear)
		return e->fold_dq;
	switch (op) {
	case OQ_OP_Identity: case OQ_OP_Constant: case OQ_OP_Transpose: case OQ_OP_Reshape:
	case OQ_OP_Unsqueeze: case OQ_OP_Squeeze: case OQ_OP_Flatten: case OQ_OP_Cast:
	case OQ_OP_CastLike: case OQ_OP_Concat: case OQ_OP_Gather: case OQ_OP_Shape:
	case OQ_OP_Size: case OQ_OP_Slice: case OQ_OP_Expand: case OQ_OP_ConstantOfShape:
	case OQ_OP_Range: case OQ_OP_Add: case OQ_OP_Sub: case OQ_OP_Mul: case OQ_OP_Div:
	case OQ_OP_Neg: case OQ_OP_Equal: case OQ_OP_Where: case OQ_OP_Not: case OQ_OP_Less:
	case OQ_OP_Greater: case OQ_OP_Tile: case OQ_OP_Split:
		return 1;
	default:
		return 0;
	}
}

/* Ops whose output holds the input's bytes unchanged: the folded constant can share them. */
static int fold_alias_op(oq_op op)
{
	return op == OQ_OP_Identity || op == OQ_OP_Reshape || op == OQ_OP_Unsqueeze || op == OQ_OP_Squeeze ||
	       op == OQ_OP_Flatten;
}

/*
 * v's value is the same in every run of p's graph: an initializer view or
 * an earlier folded output. A subgraph's inputs are bound by its caller
 * even when they have an initializer, so those do not count; nor do outer
 * values (the enclosing frame's slots may hold them).
 */
static int plan_const(const plan *p, const oq_value *v)
{
	if (!v || (v->flags & OQ_V_OUTER) || !p->inits[v->index])
		return 0;
	return !(p->g->parent && (v->flags & OQ_V_INPUT));
}

/* p->inits[i]: a view of value i's initializer (borrowed, or an aligned copy; float16 / bfloat16
 * converted to float32: widen.c). */
static int init_view(oq_exec *e, plan *p, size_t i, oq_diag *d)
{
	const oq_value *v = p->g->values[i];
	int rc = OQ_ENOMEM;

	if (!(p->inits[i] = calloc(1, sizeof(oq_rt))) || (rc = oq_rt_from_tensor(p->inits[i], v->init)) ||
	    (rc = oq_exec_widen(e, p->inits[i])))
		return oq_err(d, rc == OQ_EUNSUP ? OQ_EUNSUP : OQ_ENOMEM,
			      "run: initializer '%s': cannot prepare (rank above %d or out of memory)", v->name,
			      OQ_RT_MAX_RANK);
	/* an unaligned weight was copied: do not keep its file pages resident as well */
	if (!p->inits[i]->borrowed)
		oq_tensor_release_pages(p->g->model, v->init);
	return OQ_OK;
}

/*
 * Planning frees copies and transposes of weights as packed forms replace
 * them; big heap blocks freed that way are not unmapped (glibc serves
 * blocks of that size from the heap once one has been freed), so the next
 * weight's copies would stack on top of them: hand them back every
 * TRIM_BYTES (glibc), which keeps the plan's peak near one weight's copies.
 */
#define TRIM_BYTES ((size_t)8 << 20)

static void plan_freed(plan *p, size_t bytes)
{
	p->freed += bytes;
#if defined(__GLIBC__)
	if (p->freed >= TRIM_BYTES) {
		malloc_trim(0);
		p->freed = 0;
	}
#endif
}

/*
 * Runs node ni once now if all its inputs are plan constants (see
 * fold_op), keeping its outputs as plan constants; the node is then
 * skipped by every run (run_frame, run.c, still reports its outputs to an
 * observer). The same kernel computes the same bits as it would in a run
 * (kernels do not depend on the thread count). A kernel error, a sequence
 * output or an output above twice the inputs' bytes + 64 KiB (e.g. a big
 * ConstantOfShape, better made per run and freed; not a Constant, whose
 * value the model holds anyway) leave the node to the runs, which report
 * its errors. Identity / Reshape-like outputs
 * share their input's bytes instead of a copy; `pinned` marks such inputs.
 */
static int fold_node(oq_exec *e, plan *p, size_t ni, unsigned char *pinned, const unsigned char *gone,
		     oq_diag *pd)
{
	const oq_node *n = p->g->nodes[ni];
	oq_rt *in[16], *out[16];
	size_t in_bytes = 0, out_bytes = 0;
	oq_diag d;
	oq_kctx k;
	int rc, keep = 1;

	if (!fold_op(e, n->op) || !p->nodes[ni].fn || n->n_inputs > 16 || n->n_outputs > 16 || n->n_outputs == 0)
		return OQ_OK;
	for (size_t i = 0; i < n->n_attrs; i++)
		if (n->attrs[i].g || n->attrs[i].graphs)
			return OQ_OK;
	for (size_t i = 0; i < n->n_inputs; i++) {
		const oq_value *v = n->inputs[i];
		in[i] = NULL;
		if (!v)
			continue;
		if (v->init && !(v->flags & OQ_V_OUTER) && v->graph == p->g && !p->inits[v->index] && !gone[v->index] &&
		    (rc = init_view(e, p, v->index, pd)))
			return rc;
		if (!plan_const(p, v))
			return OQ_OK;
		in[i] = p->inits[n->inputs[i]->index];
		if (in[i]->kind != OQ_RT_TENSOR)
			return OQ_OK;
		in_bytes += in[i]->nbytes;
	}
	for (size_t i = 0; i < n->n_outputs; i++) {
		out[i] = NULL;
		if (n->outputs[i] && p->inits[n->outputs[i]->index])
			return OQ_OK; /* an output that is also an initializer: the run decides */
	}
	oq_diag_init(&d);
	memset(&k, 0, sizeof k);
	k.e = e;
	k.node = n;
	k.opset = n->opset;
	k.d = &d;
	k.threads = 1;
	k.in = in;
	k.n_in = n->n_inputs;
	k.out = out;
	k.n_out = n->n_outputs;
	e->refused = 0;
	rc = p->nodes[ni].fn(&k);
	for (size_t i = 0; !rc && i < n->n_outputs; i++)
		if (out[i])
			rc = oq_exec_widen(e, out[i]);
	if (rc == OQ_ENOMEM && e->refused)
		rc = OQ_EINVAL; /* above max_live_bytes: the runs say so */
	if (rc == OQ_ENOMEM)
		keep = 0;
	for (size_t i = 0; i < n->n_outputs; i++) {
		if (!out[i] || out[i]->kind != OQ_RT_TENSOR || out[i]->strs)
			keep = 0;
		else
			out_bytes += out[i]->nbytes;
		if (out[i] && !out[i]->borrowed)
			e->live -= out[i]->nbytes; /* not an activation */
	}
	/* an output much larger than the inputs is cheaper to recompute than to hold (a
	 * ConstantOfShape), except a dequantized weight when asked for (fold_dq) and a Constant's
	 * value (a weight exporters write as a node: held in the model anyway, and packed once
	 * when a product reads it) */
	if (rc || (out_bytes / 2 > in_bytes + 32768 && n->op != OQ_OP_DequantizeLinear && n->op != OQ_OP_Constant))
		keep = 0;
	/* a Constant's value in the model's own aligned bytes: a view of them, not a second copy */
	if (keep && n->op == OQ_OP_Constant && out[0] && out[0]->kind == OQ_RT_TENSOR && n->n_attrs == 1 &&
	    n->attrs[0].type == OQ_ATTR_TENSOR && n->attrs[0].t) {
		oq_rt view;
		if (!oq_rt_from_tensor(&view, n->attrs[0].t) && view.borrowed && view.dtype == out[0]->dtype &&
		    view.nbytes == out[0]->nbytes && !out[0]->wide && !out[0]->borrowed) {
			plan_freed(p, out[0]->nbytes);
			oq_rt_release(out[0]);
			*out[0] = view;
		} else {
			oq_rt_release(&view);
		}
	}
	for (size_t i = 0; i < n->n_outputs; i++) {
		oq_value *v = n->outputs[i];
		if (keep && v && !p->inits[v->index]) {
			if (fold_alias_op(n->op) && in[0] && !in[0]->strs && in[0]->dtype == out[i]->dtype &&
			    in[0]->nbytes == out[i]->nbytes && out[i]->nbytes) {
				free(out[i]->data);
				plan_freed(p, out[i]->nbytes);
				out[i]->data = in[0]->data;
				out[i]->borrowed = 1;
				out[i]->cap = 0;
				pinned[n->inputs[0]->index] = 1;
			}
			p->inits[v->index] = out[i];
			continue;
		}
		if (out[i]) {
			oq_rt_release(out[i]);
			free(out[i]);
		}
	}
	p->nodes[ni].folded = keep;
	return rc == OQ_ENOMEM ? OQ_ENOMEM : OQ_OK;
}

/*
 * Packing: a float32 MatMul / Gemm whose B (input 1) is a plan constant
 * and whose A is not gets B packed once (oq_packed_b_pack, gemm_packed.c)
 * and runs on the packed panels (kctx.packed_b) - MatMul when B's batch
 * dims are all 1, Gemm when alpha is 1 and A is not transposed (the
 * kernel's shape). One packed copy per value and orientation, shared by its
 * products. A constant only packed products (as B) and folded nodes read
 * is then let go (const_drop), its tensor kept as a shell (dims, data
 * NULL) so runs still see its shape; an observer gets folded values
 * rebuilt from the panels (oq_packed_b_unpack), the values it would see
 * without packing.
 */

/*
 * Shape and bytes of plan constant v for packing: its view, or for an
 * initializer not viewed yet the tensor's own bytes (possibly unaligned,
 * e.g. in a mapped protobuf file: the packers read them with memcpy), so a
 * packed weight is never copied for alignment first. 0: not a constant.
 */
static int const_src(const plan *p, const oq_value *v, const unsigned char *gone, int *dtype, int *rank,
		     const int64_t **dims, const void **data)
{
	const oq_rt *t;

	if (!v || (v->flags & OQ_V_OUTER) || v->graph != p->g)
		return 0;
	if (v->init && !p->inits[v->index] && !gone[v->index] && !(p->g->parent && (v->flags & OQ_V_INPUT))) {
		*dtype = v->init->dtype;
		*rank = v->init->rank;
		*dims = v->init->dims;
		*data = v->init->data;
		return 1;
	}
	if (!plan_const(p, v) || (t = p->inits[v->index])->kind != OQ_RT_TENSOR)
		return 0;
	*dtype = t->dtype;
	*rank = t->rank;
	*dims = t->dims;
	*data = t->data;
	return 1;
}

static int pack_conv(plan *p, size_t ni, const unsigned char *gone);

static int pack_node(oq_exec *e, plan *p, size_t ni, const unsigned char *gone, oq_diag *d)
{
	const oq_node *n = p->g->nodes[ni];
	const oq_value *a, *b;
	const int64_t *dims;
	const void *data;
	int64_t kd, nn, lead = 1;
	int tb = 0, rc, dtype, rank;
	oq_packed_b **slot;

	if (p->nodes[ni].folded || n->n_inputs < 2 || n->n_outputs != 1)
		return OQ_OK;
	/* a float16 / bfloat16 weight packs from its float32 view (const_src reads file bytes as they are) */
	b = n->inputs[1];
	if (b && b->init && oq_exec_wide(b->init->dtype) && !(b->flags & OQ_V_OUTER) && b->graph == p->g &&
	    !p->inits[b->index] && !gone[b->index] && !(p->g->parent && (b->flags & OQ_V_INPUT)) &&
	    (rc = init_view(e, p, b->index, d)))
		return rc;
	if (n->op == OQ_OP_Conv)
		return pack_conv(p, ni, gone);
	if (n->op == OQ_OP_Gemm) {
		if (node_float(n, "alpha", 1.0f) != 1.0f || node_int(n, "transA", 0) != 0)
			return OQ_OK;
		tb = node_int(n, "transB", 0) != 0;
	} else if (n->op != OQ_OP_MatMul || n->n_inputs != 2) {
		return OQ_OK;
	}
	a = n->inputs[0];
	b = n->inputs[1];
	if (!a || (a->init && !(a->flags & OQ_V_OUTER)) || plan_const(p, a) ||
	    !const_src(p, b, gone, &dtype, &rank, &dims, &data))
		return OQ_OK;
	if (dtype != OQ_DT_FLOAT || rank < 2 || !data || (n->op == OQ_OP_Gemm && rank != 2))
		return OQ_OK;
	for (int i = 0; i < rank - 2; i++)
		lead *= dims[i];
	if (lead != 1)
		return OQ_OK;
	kd = dims[rank - (tb ? 1 : 2)];
	nn = dims[rank - (tb ? 2 : 1)];
	slot = &p->packed_b[2 * b->index + (size_t)tb];
	if (!*slot) {
		if (!(*slot = calloc(1, sizeof **slot)))
			return OQ_ENOMEM;
		if ((rc = oq_packed_b_pack(data, kd, nn, tb, dims[rank - 1], *slot))) {
			free(*slot);
			*slot = NULL;
			return rc == OQ_ENOMEM ? OQ_ENOMEM : OQ_OK;
		}
	}
	p->nodes[ni].packed_b = *slot;
	return OQ_OK;
}

/*
 * A float32 Conv whose W (input 1) is a plan constant, with at least two
 * output channels per group (depthwise convolutions have their own kernel),
 * gets W packed into 32-channel panels once (oq_packed_w_pack, the layout of the
 * AVX-512 conv GEMM: conv_gemm.c) and runs on them (kctx.packed_w), fused or
 * not; the packed copy replaces W as for MatMul / Gemm (const_drop), and
 * the engine rebuilds a plain W only where it cannot read the panels (the
 * reference path). One packing per value, shared by convolutions of the
 * same group count.
 */
static int pack_conv(plan *p, size_t ni, const unsigned char *gone)
{
	const oq_node *n = p->g->nodes[ni];
	const oq_value *w = n->inputs[1];
	const int64_t *dims;
	const void *data;
	int64_t group = node_int(n, "group", 1), kc = 1;
	int rc, dtype, rank;

	if (!oq_packed_w_available() || !w || !n->inputs[0] || n->inputs[0] == w || plan_const(p, n->inputs[0]) ||
	    (n->inputs[0]->init && !(n->inputs[0]->flags & OQ_V_OUTER)) ||
	    !const_src(p, w, gone, &dtype, &rank, &dims, &data))
		return OQ_OK;
	if (dtype != OQ_DT_FLOAT || rank < 3 || !data || group <= 0 || dims[0] % group || dims[0] / group < 2)
		return OQ_OK;
	for (int i = 1; i < rank; i++)
		kc *= dims[i];
	if (p->packed_w[w->index] && p->packed_w[w->index]->group != group)
		return OQ_OK;
	if (!p->packed_w[w->index]) {
		if (!(p->packed_w[w->index] = calloc(1, sizeof **p->packed_w)))
			return OQ_ENOMEM;
		if ((rc = oq_packed_w_pack(data, dims[0], kc, group, p->packed_w[w->index]))) {
			free(p->packed_w[w->index]);
			p->packed_w[w->index] = NULL;
			return rc == OQ_ENOMEM ? OQ_ENOMEM : OQ_OK;
		}
	}
	p->nodes[ni].packed_w = p->packed_w[w->index];
	return OQ_OK;
}

/*
 * After node ni: lets go of constant v when every reader of v is a node up
 * to ni (in the plan's order) that no run executes for it - folded, or a packed product reading v
 * as B (a packed Conv as W) - and no folded output shares v's bytes (pinned). An initializer
 * read by folded nodes only loses its view (`gone`: its copy freed, its
 * file pages released, read again from the file if ever touched); a
 * packed constant keeps its tensor as a shell (dims, data NULL), so runs
 * still see its shape. A folded output that is not packed is kept (an
 * observer sees it). Done per node, so a weight behind Transpose and
 * MatMul is held once, packed, even at the peak.
 */
static void const_drop(plan *p, const oq_value *v, size_t ni, const unsigned char *pinned, unsigned char *gone)
{
	const oq_graph *g = p->g;
	oq_rt *t;
	size_t i;
	int packed;

	if (!v || (v->flags & (OQ_V_OUTPUT | OQ_V_OUTER)) || v->graph != g)
		return;
	i = v->index;
	t = p->inits[i];
	packed = p->packed_b[2 * i] || p->packed_b[2 * i + 1] || p->packed_w[i];
	if (gone[i] || pinned[i] || (!v->init && !packed) || v->n_uses == 0 || oq_value_n_captures(v) != 0)
		return;
	/* a view with data, or an initializer packed from its own bytes (no view yet) */
	if (t ? !t->data : !(packed && v->init))
		return;
	/* from the last use (uses are in node order): a weight shared by many nodes is refused at once */
	for (size_t u = v->n_uses; u-- > 0;) {
		const oq_node *c = v->uses[u].node;
		const node_plan *np;
		if (c->graph != g || g->nodes[c->index] != c || p->pos[c->index] > p->pos[ni])
			return;
		np = &p->nodes[c->index];
		if (!np->folded && !((np->packed_b || np->packed_w) && v->uses[u].index == 1 && c->inputs[0] != v))
			return;
	}
	if (v->init)
		oq_tensor_release_pages(g->model, v->init);
	if (!packed) {
		if (!t->borrowed)
			plan_freed(p, t->nbytes);
		oq_rt_release(t);
		free(t);
		p->inits[i] = NULL;
		gone[i] = 1;
		return;
	}
	if (!t) { /* its shape only, for the packed products' kernels */
		if (!(t = calloc(1, sizeof *t)) || oq_rt_shape_of(t, v->init)) {
			free(t);
			return; /* the final pass makes an ordinary view */
		}
		p->inits[i] = t;
		return;
	}
	if (!t->borrowed) {
		free(t->data);
		plan_freed(p, t->nbytes);
	}
	t->data = NULL;
	t->borrowed = 1;
	t->cap = 0;
}

/*
 * Folds and packs what it can, node by node in the plan's order (so chains
 * fold, and a product packs its B right after B was folded), making
 * initializer views on demand and dropping constants nothing reads any more
 * (const_drop); then makes the views of the initializers that are left.
 */
int oq_plan_fold(oq_exec *e, plan *p, oq_diag *d)
{
	const oq_graph *g = p->g;
	unsigned char *pinned = oq_calloc(g->n_values ? g->n_values : 1, 1);
	unsigned char *gone = oq_calloc(g->n_values ? g->n_values : 1, 1);
	int rc = OQ_OK, pack = oq_packed_b_available() && !oq_exec_no_pack;

	if (!pinned || !gone) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto done;
	}
	for (size_t oi = 0; oi < g->n_nodes && !rc; oi++) {
		size_t i = p->order[oi];
		const oq_node *n = g->nodes[i];
		if (!oq_exec_no_fold && (rc = fold_node(e, p, i, pinned, gone, d)) == OQ_ENOMEM && d->count == 0)
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		if (!rc && pack && (rc = pack_node(e, p, i, gone, d)) == OQ_ENOMEM && d->count == 0)
			rc = oq_err(d, rc, "run: out of memory packing the weight of node '%s'", n->name);
		for (size_t j = 0; !rc && (p->nodes[i].folded || p->nodes[i].packed_b || p->nodes[i].packed_w) && j < n->n_inputs; j++)
			const_drop(p, n->inputs[j], i, pinned, gone);
	}
	for (size_t i = 0; i < g->n_values && !rc; i++)
		if (g->values[i]->init && !p->inits[i] && !gone[i])
			rc = init_view(e, p, i, d);
done:
	free(pinned);
	free(gone);
	return rc;
}

