/*
 * exec.c - the executor: plans, frames, the node loop, memory release,
 * observers and subgraphs (the thread pool is threadpool.c).
 *
 * A plan is made once per graph (main graph and every subgraph): the kernel
 * of each node, views of the initializers, and for each value the number of
 * uses, counting a value read inside a node's subgraphs as a use by that
 * node (it must live until the node is done). A frame is one execution of a
 * graph: a slot per value, a remaining-use counter per value, and a link to
 * the calling frame for outer-scope names. After each node, inputs whose
 * counter reaches zero are released, so the live set is what the remaining
 * nodes still need.
 *
 * Fusion: the plan also finds groups Conv [-> BatchNormalization]
 * [-> activation] (Relu, Clip, LeakyRelu, HardSigmoid, HardSwish, Sigmoid)
 * [-> steps] where each intermediate value has exactly one consumer (the
 * next node of the group), is no graph output and is not read by a
 * subgraph. Steps (oq_epi_step, kernel.h) are float Add/Sub/Mul/Div with a
 * constant scalar or per-channel operand, or with a tensor computed before
 * the Conv (a residual; it must have the output's shape, checked at run
 * time, else the group runs node by node), activations, and gates
 * y = x * g(x) whose x has exactly two consumers: the Mul and a chain of
 * such steps g ending at it (a HardSwish written as Add, Clip, Mul, Div;
 * x * Sigmoid(x)). The Conv's
 * W must be known float32 (initializer, declared type, or DequantizeLinear
 * with a float32 scale), the BN parameters float32 initializers, Clip bounds
 * constants. Such a group runs as one Conv call at the Conv's position whose
 * epilogue, per output tile while it is in cache, maps channel m as
 *   BN:  y = (float)(y * a[m] + c[m]),  a = s / sqrt(var + eps), c = B - mean * a
 * (double, the BatchNormalization kernel's own expression) and then applies
 * the activation with the element-wise kernel's float formula; the
 * intermediate values are never materialised. Folding BN into a copy of W
 * (W * a) would cost a second copy of the weights and change the rounding;
 * the epilogue costs one multiply-add per output and keeps the fused result
 * bit-identical to the unfused one. With an observer set every node runs on
 * its own (calibration and `compare --per-tensor` need each intermediate),
 * so the choice is made per run.
 *
 * Constants: the plan also computes once the nodes whose inputs are all
 * constants and whose op is cheap and deterministic (plan_fold: Identity,
 * Transpose, Reshape, Cast, shape arithmetic, ...; exporters without
 * constant folding put Transpose(Identity(W)) before every weight), keeping
 * their outputs as plan constants beside the initializer views; runs skip
 * them but still report their outputs to an observer at the node's place,
 * so observers see exactly what they saw before. Then a float32 MatMul /
 * Gemm whose B is constant gets B packed once into GEMM panels
 * (gemm_packed.c), a float32 Conv its W into 32-channel panels
 * (conv.c oq_packed_w_pack), and constants that nothing but folded nodes
 * and packed products read are let go as they become unused (a weight is
 * held once, even at the plan's peak). The same kernels compute the folded values, so
 * outputs are bit-identical with folding and without (oq_exec_no_fold).
 *
 * Chains: a Conv group whose output only a depthwise Conv (group) reads
 * runs with it as one kernel over bands of rows (plan_chains); activation
 * memory: an arena carved first fit (buf_get).
 */
#include "calib/kernels/kernel.h"
#include "calib/kernels/linalg/linalg.h"

#include <math.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ kernel table */

static const oq_kreg *const families[] = {
	oq_kernels_elementwise, oq_kernels_linalg, oq_kernels_nn, oq_kernels_shape,
	oq_kernels_quant, oq_kernels_control, oq_kernels_rnn,
	oq_kernels_signal, oq_kernels_vision, oq_kernels_seq,
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

/* --------------------------------------------------------------- executor */

typedef struct node_plan {
	oq_kernel_fn fn;
	oq_value **extra;      /* local values read by this node's subgraphs */
	size_t n_extra;
	oq_kfuse *fuse;        /* head (Conv) of a fused group: what it runs instead, else NULL */
	size_t tail;           /* head: index of the group's last node (its output is the group's) */
	size_t members[OQ_FUSE_MAX_STEPS + 2]; /* head: indices of the absorbed nodes */
	int n_members;
	oq_value *tin[OQ_FUSE_MAX_T]; /* head: the values of the group's tensor operands */
	int absorbed;          /* a later member of a fused group: skipped when running fused */
	int obs_fused;         /* group member: runs fused even while observing (intermediates unwanted) */
	int folded;            /* computed once by the plan: its outputs are plan constants (inits) */
	const oq_packed_b *packed_b; /* MatMul / Gemm: its constant B packed (owned by plan.packed_b), else NULL */
	const oq_packed_w *packed_w; /* Conv: its constant W packed (owned by plan.packed_w), else NULL */
	size_t chain;          /* Conv group head: index of the depthwise Conv head run with it, or 0 (none) */
	int chained;           /* depthwise Conv head run by the chain head before it (without an observer) */
} node_plan;

typedef struct plan {
	const oq_graph *g;
	node_plan *nodes;
	oq_rt **inits;         /* per value index: initializer view or folded constant, or NULL */
	int *uses;             /* per value index: uses by nodes of this graph */
	oq_packed_b **packed_b; /* per value index i: [2i] the value packed as B, [2i + 1] packed as transposed B */
	oq_packed_w **packed_w; /* per value index: the value packed as a Conv weight */
	size_t freed;          /* heap bytes planning freed since the last trim (plan_freed) */
	struct plan *next;
} plan;

struct oq_exec {
	oq_model *m;
	oq_pool *pool;         /* threads for oq_k_parallel (threadpool.c) */
	int threads;           /* the pool's threads including the caller */
	oq_observe_fn observe;
	void *observe_ctx;
	oq_observe_want_fn want; /* oq_exec_set_observe_want's, or NULL */
	plan *plans;           /* newest first; from `borrowed` on they belong to the executor cloned */
	const plan *borrowed;  /* oq_exec_clone: the first plan of the source executor, else NULL */
	oq_value **in;         /* fed inputs of the main graph */
	size_t n_in;
	size_t live, peak;     /* activation bytes held now / at most */
	struct chunk *chunks;  /* the activation arena (see buf_get) */
	size_t n_chunks, cap_chunks;
	int planning;          /* making a plan: outputs (folded constants) outside the arena */
	int fold_dq;           /* oq_exec_opts.fold_dq */
	struct buf { void *p; size_t cap; } *scratch; /* per pool thread: oq_k_scratch's buffer (kept across calls) */
	int n_scratch;         /* scratch entries: threads, or for a clone (which may run inside its
				* source's pool, on a thread of that pool's index) also the source's */
	struct buf shared;     /* oq_k_shared's buffer (kept across calls) */
};

/*
 * Activation buffers: carved first-fit, lowest address first, out of a
 * few large chunks whose pages the system backs only once touched; a
 * released buffer returns to its chunk's free list, merged with free
 * neighbours. Address-ordered first fit reuses the same memory across
 * tensor sizes, so what is resident stays near the live peak: on the
 * bench models' allocation sequences 45 MB against a live peak of 36
 * (ocr_det), 3.2 against 2.4 (mobilenet_v2), 7.8 against 7.1 (resnet50),
 * where keeping each released buffer for a later output of a similar size
 * (the previous scheme) held 63, 5.1 and 13.0 MB. Buffers are the need
 * rounded up to 64 bytes plus 64 (what vector tails may touch), 64-byte
 * aligned; placement depends only on the sequence of sizes, so runs stay
 * deterministic. Outputs made while planning (folded constants, kept by
 * the plan) and graph outputs handed to the caller live outside the arena.
 */
#define ARENA_CHUNK ((size_t)64 << 20)

struct span {
	size_t off, len;       /* a free range of a chunk */
};

struct chunk {
	char *base;
	size_t size;
	struct span *free;     /* free ranges by offset, never adjacent */
	size_t n_free, cap_free;
};

static void *buf_get(oq_exec *e, size_t need, size_t *cap)
{
	size_t n;
	struct chunk *c;

	if (need > SIZE_MAX - 8192) /* the rounding below and a chunk's to whole pages */
		return NULL;
	n = (need + 63) / 64 * 64 + 64;
	if (e->planning) {
		*cap = 0;
		return aligned_alloc(64, n);
	}
	for (size_t i = 0; i < e->n_chunks; i++) {
		c = &e->chunks[i];
		for (size_t j = 0; j < c->n_free; j++) {
			struct span *f = &c->free[j];
			if (f->len >= n) {
				char *p = c->base + f->off;
				f->off += n;
				f->len -= n;
				if (!f->len) {
					memmove(f, f + 1, (c->n_free - j - 1) * sizeof *f);
					c->n_free--;
				}
				*cap = n;
				return p;
			}
		}
	}
	/* a new chunk: its untouched pages cost nothing */
	if (oq_grow(&e->chunks, &e->cap_chunks, e->n_chunks + 1, sizeof *e->chunks))
		return NULL;
	c = &e->chunks[e->n_chunks];
	memset(c, 0, sizeof *c);
	c->size = n > ARENA_CHUNK ? (n + 4095) / 4096 * 4096 : ARENA_CHUNK;
	if (!(c->base = aligned_alloc(4096, c->size)))
		return NULL;
	if (c->size > n) {
		if (oq_grow(&c->free, &c->cap_free, 1, sizeof *c->free)) {
			free(c->base);
			return NULL;
		}
		c->free[0].off = n;
		c->free[0].len = c->size - n;
		c->n_free = 1;
	}
	e->n_chunks++;
	*cap = n;
	return c->base;
}

/* Gives t's data back to the arena (or frees it) and resets t. */
static void rt_recycle(oq_exec *e, oq_rt *t)
{
	if (t->data && !t->borrowed && t->cap) {
		for (size_t i = 0; i < e->n_chunks; i++) {
			struct chunk *c = &e->chunks[i];
			size_t off, j = 0;
			if ((char *)t->data < c->base || (char *)t->data >= c->base + c->size)
				continue;
			off = (size_t)((char *)t->data - c->base);
			while (j < c->n_free && c->free[j].off < off)
				j++;
			/* merge with the free range before and / or after, else insert one */
			if (j > 0 && c->free[j - 1].off + c->free[j - 1].len == off) {
				c->free[j - 1].len += t->cap;
				if (j < c->n_free && off + t->cap == c->free[j].off) {
					c->free[j - 1].len += c->free[j].len;
					memmove(&c->free[j], &c->free[j + 1], (c->n_free - j - 1) * sizeof *c->free);
					c->n_free--;
				}
			} else if (j < c->n_free && off + t->cap == c->free[j].off) {
				c->free[j].off = off;
				c->free[j].len += t->cap;
			} else if (!oq_grow(&c->free, &c->cap_free, c->n_free + 1, sizeof *c->free)) {
				memmove(&c->free[j + 1], &c->free[j], (c->n_free - j) * sizeof *c->free);
				c->free[j].off = off;
				c->free[j].len = t->cap;
				c->n_free++;
			} /* else out of memory for the list: the range stays used until the executor goes */
			t->data = NULL;
			break;
		}
	}
	oq_rt_release(t);
}

typedef struct frame {
	const plan *p;
	oq_rt **slots;         /* per value index: computed value (owned unless input) */
	int *remaining;
	struct frame *parent;
	unsigned char *unfused; /* per node: absorbed, but its group ran node by node (OQ_K_UNFUSED); NULL: none */
} frame;

static void free_plan(plan *p)
{
	if (!p)
		return;
	if (p->nodes)
		for (size_t i = 0; i < p->g->n_nodes; i++) {
			free(p->nodes[i].extra);
			if (p->nodes[i].fuse) {
				oq_kfuse *f = p->nodes[i].fuse;
				for (int j = 0; j < f->n_steps; j++)
					free((void *)f->steps[j].c);
				free((void *)f->steps);
				free((void *)f->scale);
				free((void *)f->shift);
				free(f);
			}
		}
	if (p->inits)
		for (size_t i = 0; i < p->g->n_values; i++)
			if (p->inits[i]) {
				oq_rt_release(p->inits[i]);
				free(p->inits[i]);
			}
	for (size_t i = 0; p->packed_b && i < 2 * p->g->n_values; i++)
		if (p->packed_b[i]) {
			oq_packed_b_free(p->packed_b[i]);
			free(p->packed_b[i]);
		}
	for (size_t i = 0; p->packed_w && i < p->g->n_values; i++)
		if (p->packed_w[i]) {
			oq_packed_w_free(p->packed_w[i]);
			free(p->packed_w[i]);
		}
	free(p->nodes);
	free(p->inits);
	free(p->uses);
	free(p->packed_b);
	free(p->packed_w);
	free(p);
}

/* Collects values of subgraphs (recursively) that resolve to a value of `home`. */
typedef struct collect {
	const oq_graph *home;
	node_plan *np;
	int *uses;
	int oom;
} collect;

static int collect_sub(oq_graph *sub, oq_node *owner, void *arg)
{
	collect *c = arg;
	(void)owner;
	for (size_t i = 0; i < sub->n_values; i++) {
		oq_value *v = sub->values[i];
		oq_value *r;
		if (!(v->flags & OQ_V_OUTER))
			continue;
		r = oq_value_resolve(v);
		if (!r || r->graph != c->home)
			continue;
		oq_value **nx = realloc(c->np->extra, (c->np->n_extra + 1) * sizeof *nx);
		if (!nx) {
			c->oom = 1;
			return OQ_ENOMEM;
		}
		nx[c->np->n_extra++] = r;
		c->np->extra = nx;
		c->uses[r->index]++;
	}
	return oq_graph_each_subgraph(sub, collect_sub, c);
}

/* ------------------------------------------------------------ fusion */

/* The only consumer of v (as input 0), when v may disappear into a fused group; else NULL. */
static oq_node *sole_consumer(const oq_value *v)
{
	if (!v || v->n_uses != 1 || v->uses[0].index != 0 || (v->flags & (OQ_V_OUTPUT | OQ_V_INPUT)) ||
	    oq_value_n_captures(v) != 0)
		return NULL;
	return v->uses[0].node;
}

/*
 * The constant tensor behind v, known at plan time: an initializer of this
 * graph, a Constant node's `value`, or either of those through a chain of
 * Identity nodes (exporters put weights behind Identity). NULL otherwise.
 */
static const oq_tensor *const_tensor(const oq_value *v)
{
	for (int depth = 0; v && !(v->flags & OQ_V_OUTER) && depth < 16; depth++) {
		const oq_node *p = v->producer;
		if (v->init)
			return v->init;
		if (!p)
			return NULL;
		if (p->op == OQ_OP_Constant)
			return p->n_attrs == 1 && p->attrs[0].type == OQ_ATTR_TENSOR && !strcmp(p->attrs[0].name, "value")
				       ? p->attrs[0].t
				       : NULL;
		if (p->op != OQ_OP_Identity || p->n_inputs != 1)
			return NULL;
		v = p->inputs[0];
	}
	return NULL;
}

/* A float32 constant (see const_tensor) with its data. */
static const oq_tensor *f32_init(const oq_value *v)
{
	const oq_tensor *t = const_tensor(v);
	return t && t->dtype == OQ_DT_FLOAT && (t->data || !t->nelem) ? t : NULL;
}

/* A constant float32 scalar: a constant tensor or a Constant node's `value_float`. */
static int const_scalar(const oq_value *v, float *out)
{
	const oq_tensor *t = f32_init(v);
	if (!t && v && !(v->flags & OQ_V_OUTER) && v->producer && v->producer->op == OQ_OP_Constant &&
	    v->producer->n_attrs == 1 && v->producer->attrs[0].type == OQ_ATTR_FLOAT &&
	    !strcmp(v->producer->attrs[0].name, "value_float")) {
		*out = v->producer->attrs[0].f;
		return 1;
	}
	if (!t || t->nelem != 1 || t->nbytes != sizeof *out)
		return 0;
	memcpy(out, t->data, sizeof *out);
	return 1;
}

static float attr_f(const oq_node *n, const char *name, float dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_FLOAT ? a->f : dflt;
}

static int64_t attr_i(const oq_node *n, const char *name, int64_t dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_INT ? a->i : dflt;
}

/* n as an epilogue activation (float32 semantics of elementwise.c); 0 if it cannot be one. */
static int as_act(const oq_node *n, oq_act *act)
{
	memset(act, 0, sizeof *act);
	if (!n || n->n_outputs != 1 || !n->outputs[0])
		return 0;
	switch (n->op) {
	case OQ_OP_Relu:
		act->kind = OQ_ACT_RELU;
		return n->n_inputs == 1;
	case OQ_OP_LeakyRelu:
		act->kind = OQ_ACT_LEAKY;
		act->a = attr_f(n, "alpha", 0.01f);
		return n->n_inputs == 1;
	case OQ_OP_HardSigmoid:
		act->kind = OQ_ACT_HSIGMOID;
		act->a = attr_f(n, "alpha", 0.2f);
		act->b = attr_f(n, "beta", 0.5f);
		return n->n_inputs == 1;
	case OQ_OP_HardSwish:
		act->kind = OQ_ACT_HSWISH;
		return n->n_inputs == 1;
	case OQ_OP_Sigmoid:
		act->kind = OQ_ACT_SIGMOID;
		return n->n_inputs == 1;
	case OQ_OP_Clip:
		act->kind = OQ_ACT_CLIP;
		act->a = -INFINITY;
		act->b = INFINITY;
		if (n->opset < 11) {
			act->a = attr_f(n, "min", -INFINITY);
			act->b = attr_f(n, "max", INFINITY);
			return n->n_inputs == 1;
		}
		if (n->n_inputs > 3 || (n->n_inputs > 1 && n->inputs[1] && !const_scalar(n->inputs[1], &act->a)) ||
		    (n->n_inputs > 2 && n->inputs[2] && !const_scalar(n->inputs[2], &act->b)))
			return 0;
		return 1;
	default:
		return 0;
	}
}

/* An inference BatchNormalization with float32 initializer parameters of m channels. */
static int bn_ok(const oq_node *n, int64_t m)
{
	if (!n || n->op != OQ_OP_BatchNormalization || n->n_inputs != 5 || n->n_outputs < 1 || !n->outputs[0])
		return 0;
	for (size_t i = 1; i < n->n_outputs; i++)
		if (n->outputs[i])
			return 0;
	if (n->opset >= 14) {
		const oq_attr *a = oq_node_attr(n, "training_mode");
		if (a && (a->type != OQ_ATTR_INT || a->i != 0))
			return 0;
	}
	for (size_t i = 1; i < 5; i++) {
		const oq_tensor *t = f32_init(n->inputs[i]);
		if (!t || t->rank != 1 || t->nelem != (size_t)m || !t->data)
			return 0;
	}
	return 1;
}

/*
 * BN as y * scale + shift: scale = s / sqrt(var + eps), shift = B - mean *
 * scale, in double exactly as the BatchNormalization kernel forms them.
 */
static int bn_affine(const oq_node *bn, size_t m, oq_kfuse *f)
{
	double eps = attr_f(bn, "epsilon", 1e-5f);
	/* copies: initializer data may be unaligned (mapped file) */
	float *sc = oq_tensor_to_floats(f32_init(bn->inputs[1])), *be = oq_tensor_to_floats(f32_init(bn->inputs[2]));
	float *mu = oq_tensor_to_floats(f32_init(bn->inputs[3])), *va = oq_tensor_to_floats(f32_init(bn->inputs[4]));
	double *a = oq_calloc(m, sizeof *a), *b = oq_calloc(m, sizeof *b);
	int rc = OQ_ENOMEM;

	if (sc && be && mu && va && a && b) {
		for (size_t o = 0; o < m; o++) {
			a[o] = sc[o] / sqrt((double)va[o] + eps);
			b[o] = be[o] - mu[o] * a[o];
		}
		f->scale = a;
		f->shift = b;
		a = b = NULL;
		rc = OQ_OK;
	}
	free(a);
	free(b);
	free(sc);
	free(be);
	free(mu);
	free(va);
	return rc;
}

/*
 * W known to be float32 before the run: a float32 initializer, a value
 * declared float32, or a DequantizeLinear output with a float32 scale.
 * *m its output channels and *r its rank (the output's) when known, else -1 and 0.
 */
static int w_is_f32(const oq_value *w, int64_t *m, int *r)
{
	const oq_tensor *t = f32_init(w);
	*m = -1;
	*r = 0;
	if (t) {
		if (t->rank < 3)
			return 0;
		*m = t->dims[0];
		*r = t->rank;
		return 1;
	}
	if (!w || (w->flags & OQ_V_OUTER))
		return 0;
	if (w->type.kind == OQ_TYPE_TENSOR && w->type.dtype == OQ_DT_FLOAT) {
		if (w->type.rank >= 3) {
			*m = w->type.dims[0].value;
			*r = w->type.rank;
		}
		return 1;
	}
	if (w->producer && w->producer->op == OQ_OP_DequantizeLinear && w->producer->n_inputs >= 2 &&
	    f32_init(w->producer->inputs[1])) {
		const oq_tensor *q = const_tensor(w->producer->inputs[0]);
		if (q && q->rank >= 3) {
			*m = q->dims[0];
			*r = q->rank;
		}
		return 1;
	}
	return 0;
}

/* The only use of v (any input), when v may disappear into a fused group; else NULL. */
static oq_node *only_use(const oq_value *v)
{
	if (!v || v->n_uses != 1 || (v->flags & (OQ_V_OUTPUT | OQ_V_INPUT | OQ_V_OUTER)) ||
	    oq_value_n_captures(v) != 0)
		return NULL;
	return v->uses[0].node;
}

/* A float Add, Sub, Mul or Div with multidirectional broadcasting (opset >= 7) and one output. */
static int epi_bop(const oq_node *n, int *bop)
{
	if (!n || n->n_inputs != 2 || n->n_outputs != 1 || !n->outputs[0] || n->opset < 7 || !n->inputs[0] ||
	    !n->inputs[1])
		return 0;
	switch (n->op) {
	case OQ_OP_Add: *bop = OQ_EPI_ADD; return 1;
	case OQ_OP_Sub: *bop = OQ_EPI_SUB; return 1;
	case OQ_OP_Mul: *bop = OQ_EPI_MUL; return 1;
	case OQ_OP_Div: *bop = OQ_EPI_DIV; return 1;
	default: return 0;
	}
}

/*
 * v as the constant operand of a step on a Conv output of rank r with m
 * channels: a float32 scalar, or a float32 tensor of rank <= r whose dims
 * (right-aligned to the output's) are 1 except m on the channel axis, so
 * the result keeps the output's shape. Fills st->s or st->c (owned).
 * 1, 0 (not such a constant) or OQ_ENOMEM.
 */
static int epi_const(const oq_value *v, int r, int64_t m, oq_epi_step *st)
{
	const oq_tensor *t;

	if (const_scalar(v, &st->s))
		return 1;
	t = f32_init(v);
	if (!t || m <= 0 || t->rank > r || t->rank < r - 1 || t->nelem != (size_t)m || !t->data)
		return 0;
	for (int d = 0; d < t->rank; d++)
		if (t->dims[d] != (d == t->rank - (r - 1) ? m : 1))
			return 0;
	st->c = oq_tensor_to_floats(t);
	return st->c ? 1 : OQ_ENOMEM;
}

/* A group being built by plan_fusion. */
typedef struct grow_grp {
	oq_epi_step st[OQ_FUSE_MAX_STEPS];
	int n;                  /* steps */
	size_t nodes[OQ_FUSE_MAX_STEPS]; /* the nodes the steps absorb, in order */
	int n_nodes;
	oq_value *tin[OQ_FUSE_MAX_T];
	int n_t;
} grow_grp;

/* v can be read when the head (node index head) runs: computed before it, or a graph input / initializer. */
static int ready_before(const oq_value *v, const oq_graph *g, size_t head)
{
	if (!v || (v->flags & OQ_V_OUTER) || v->graph != g)
		return 0;
	return !v->producer || (v->producer->index < head && g->nodes[v->producer->index] == v->producer);
}

/*
 * n (reading cur) as one step appended to G: a binary op with a constant or
 * an early tensor, or an activation. Only constants and activations when
 * gate (inside g of a gate). 1 on success, 0 when n cannot be a step,
 * OQ_ENOMEM.
 */
static int add_step(const plan *p, size_t head, const oq_node *n, const oq_value *cur, int r, int64_t m, int gate,
		    grow_grp *G)
{
	oq_epi_step *st = &G->st[G->n];
	int bop, rc;

	if (G->n >= OQ_FUSE_MAX_STEPS || p->nodes[n->index].absorbed || p->g->nodes[n->index] != n)
		return 0;
	memset(st, 0, sizeof *st);
	if (epi_bop(n, &bop) && (n->inputs[0] == cur) != (n->inputs[1] == cur)) {
		const oq_value *other = n->inputs[n->inputs[0] == cur];
		st->bop = bop;
		st->rev = n->inputs[1] == cur;
		st->kind = OQ_EPI_CONST;
		rc = epi_const(other, r, m, st);
		if (rc < 0)
			return rc;
		if (!rc) {
			if (gate || G->n_t >= OQ_FUSE_MAX_T || !ready_before(other, p->g, head))
				return 0;
			st->kind = OQ_EPI_TENSOR;
			st->t = G->n_t;
			G->tin[G->n_t++] = (oq_value *)other;
		}
	} else if (n->n_inputs >= 1 && n->inputs[0] == cur && as_act(n, &st->act)) {
		st->kind = OQ_EPI_ACT;
	} else {
		return 0;
	}
	G->nodes[G->n_nodes++] = n->index;
	G->n++;
	return 1;
}

/*
 * A gate on cur (see the header comment): cur's two consumers are a Mul
 * and the first node n of a chain of constant / activation steps whose last
 * output is the Mul's other operand. Appends the GATE step and the chain.
 * 1, 0 (no gate; G unchanged) or OQ_ENOMEM. add_gate tries both consumers
 * as the Mul; *out the Mul.
 */
static int gate_from(const plan *p, size_t head, const oq_value *cur, const oq_node *mul, const oq_node *n, int r,
		     int64_t m, grow_grp *G)
{
	const oq_value *x = cur;
	int n0 = G->n, nn0 = G->n_nodes, rc = 0;

	if (mul->op != OQ_OP_Mul || mul->n_inputs != 2 || mul->n_outputs != 1 || !mul->outputs[0] || mul->opset < 7 ||
	    p->nodes[mul->index].absorbed || p->g->nodes[mul->index] != mul)
		return 0;
	/* the GATE step, then g */
	memset(&G->st[G->n], 0, sizeof G->st[G->n]);
	G->st[G->n].kind = OQ_EPI_GATE;
	G->st[G->n].rev = mul->inputs[0] != cur;
	G->n++;
	while (n && n != mul) {
		if ((rc = add_step(p, head, n, x, r, m, 1, G)) != 1)
			goto undo;
		x = n->outputs[0];
		n = only_use(x);
	}
	rc = 0;
	if (!n || G->n == n0 + 1 ||
	    !((mul->inputs[0] == cur && mul->inputs[1] == x) || (mul->inputs[1] == cur && mul->inputs[0] == x)))
		goto undo;
	G->st[n0].n_gate = G->n - n0 - 1;
	G->nodes[G->n_nodes++] = mul->index;
	return 1;
undo:
	for (int i = n0; i < G->n; i++)
		free((void *)G->st[i].c);
	G->n = n0;
	G->n_nodes = nn0;
	return rc;
}

static int add_gate(const plan *p, size_t head, const oq_value *cur, int r, int64_t m, grow_grp *G,
		    const oq_node **out)
{
	if (!cur || cur->n_uses != 2 || (cur->flags & (OQ_V_OUTPUT | OQ_V_INPUT | OQ_V_OUTER)) ||
	    oq_value_n_captures(cur) != 0 || cur->uses[0].node == cur->uses[1].node || G->n + 2 > OQ_FUSE_MAX_STEPS)
		return 0;
	for (int u = 0; u < 2; u++) {
		int rc = gate_from(p, head, cur, cur->uses[u].node, cur->uses[1 - u].node, r, m, G);
		if (rc) {
			if (rc > 0)
				*out = cur->uses[u].node;
			return rc;
		}
	}
	return 0;
}

/* Steps after the Conv / BN / activation whose output is cur; *tail the last absorbed node (unchanged if none). */
static int grow_steps(const plan *p, size_t head, const oq_value *cur, int r, int64_t m, grow_grp *G,
		      const oq_node **tail)
{
	for (;;) {
		const oq_node *n = only_use(cur), *mul = NULL;
		int rc;
		if (n && (rc = add_step(p, head, n, cur, r, m, 0, G)) != 0) {
			if (rc < 0)
				return rc;
			*tail = n;
			cur = n->outputs[0];
			continue;
		}
		if ((rc = add_gate(p, head, cur, r, m, G, &mul)) < 0)
			return rc;
		if (!rc)
			return OQ_OK;
		*tail = mul;
		cur = mul->outputs[0];
	}
}

/* Finds the fused groups of p's graph (see the header comment). */
static int plan_fusion(plan *p)
{
	const oq_graph *g = p->g;

	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i], *bn = NULL, *act = NULL, *next, *tail;
		int64_t m;
		int r, rc;
		oq_act a;
		oq_kfuse *f;
		grow_grp G;
		node_plan *np = &p->nodes[i];

		if (n->op != OQ_OP_Conv || np->absorbed || n->n_inputs < 2 || n->n_inputs > 3 || n->n_outputs != 1 ||
		    !n->outputs[0] || !w_is_f32(n->inputs[1], &m, &r))
			continue;
		next = sole_consumer(n->outputs[0]);
		if (next && m > 0 && bn_ok(next, m)) {
			bn = next;
			next = sole_consumer(bn->outputs[0]);
		}
		if (next && as_act(next, &a))
			act = next;
		if ((bn && g->nodes[bn->index] != bn) || (act && g->nodes[act->index] != act))
			continue; /* stale indices: no fusion rather than a wrong one */
		tail = act ? act : bn ? bn : n;
		memset(&G, 0, sizeof G);
		if ((rc = grow_steps(p, i, tail->outputs[0], r, m, &G, &tail)))
			goto oom;
		if (!bn && !act && !G.n)
			continue;
		if (!(f = calloc(1, sizeof *f)) || (G.n && !(f->steps = oq_calloc((size_t)G.n, sizeof *f->steps)))) {
			free(f);
			goto oom;
		}
		np->fuse = f;
		if (act)
			f->act = a;
		if (G.n)
			memcpy((void *)f->steps, G.st, (size_t)G.n * sizeof *G.st);
		f->n_steps = G.n;
		G.n = 0; /* the constants now belong to f */
		f->n_t = G.n_t;
		memcpy(np->tin, G.tin, sizeof G.tin);
		if (bn && bn_affine(bn, (size_t)m, f))
			return OQ_ENOMEM;
		np->tail = tail->index;
		if (bn)
			np->members[np->n_members++] = bn->index;
		if (act)
			np->members[np->n_members++] = act->index;
		for (int j = 0; j < G.n_nodes; j++)
			np->members[np->n_members++] = G.nodes[j];
		for (int j = 0; j < np->n_members; j++)
			p->nodes[np->members[j]].absorbed = 1;
		continue;
	oom:
		for (int j = 0; j < G.n; j++)
			free((void *)G.st[j].c);
		return OQ_ENOMEM;
	}
	return OQ_OK;
}

/*
 * Chains: a float32 Conv group of group 1 (head A: Conv [+ BN] [+ act]
 * [+ steps], or a lone Conv) whose last output's only reader is a
 * depthwise Conv (head B, its own group or alone) runs with B in one
 * kernel (oq_k_conv_chain: bands of B's rows, A's output never stored
 * whole). Neither group may have tensor operands (the epilogues' other
 * parameters are plan values), B's W and bias must be ready before A
 * (constants), and A's output is no graph output. A
 * chain runs only without an observer (which wants A's output); the
 * results are bit-identical either way.
 */
int oq_exec_no_chain;

static void plan_chains(plan *p)
{
	const oq_graph *g = p->g;

	for (size_t i = 0; i < g->n_nodes && !oq_exec_no_chain; i++) {
		const oq_node *a = g->nodes[i], *t, *b;
		node_plan *np = &p->nodes[i], *bp;
		const oq_tensor *wb;
		int64_t m;
		int r;

		if (a->op != OQ_OP_Conv || np->absorbed || np->chained || a->n_inputs < 2 || a->n_inputs > 3 ||
		    a->n_outputs != 1 || !a->outputs[0] || !w_is_f32(a->inputs[1], &m, &r) || m < 2 ||
		    attr_i(a, "group", 1) != 1 || (np->fuse && np->fuse->n_t))
			continue;
		t = np->fuse ? g->nodes[np->tail] : a;
		b = sole_consumer(t->outputs[0]);
		if (!b || b->op != OQ_OP_Conv || b->n_inputs < 2 || b->n_inputs > 3 || b->n_outputs != 1 ||
		    !b->outputs[0] || g->nodes[b->index] != b || b->index <= t->index)
			continue;
		bp = &p->nodes[b->index];
		wb = f32_init(b->inputs[1]);
		if (bp->absorbed || bp->chain || (bp->fuse && bp->fuse->n_t) || !wb || wb->rank < 3 || wb->dims[1] != 1 ||
		    wb->dims[0] != m || attr_i(b, "group", 1) != m || !ready_before(b->inputs[1], g, i) ||
		    (b->n_inputs > 2 && b->inputs[2] && !ready_before(b->inputs[2], g, i)))
			continue;
		np->chain = b->index;
		bp->chained = 1;
	}
}

size_t oq_exec_n_chained(const oq_exec *e)
{
	size_t n = 0;
	for (const plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++)
			n += p->nodes[i].chain != 0;
	return n;
}

/* ------------------------------------------------------ constant folding */

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

/* p->inits[i]: a view of value i's initializer (borrowed, or an aligned copy). */
static int init_view(plan *p, size_t i, oq_diag *d)
{
	const oq_value *v = p->g->values[i];
	int rc = OQ_ENOMEM;

	if (!(p->inits[i] = calloc(1, sizeof(oq_rt))) || (rc = oq_rt_from_tensor(p->inits[i], v->init)))
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
 * skipped by every run (run_frame still reports its outputs to an
 * observer). The same kernel computes the same bits as it would in a run
 * (kernels do not depend on the thread count). A kernel error, a sequence
 * output or an output above twice the inputs' bytes + 64 KiB (e.g. a big
 * ConstantOfShape, better made per run and freed) leave the node to the
 * runs, which report errors as before. Identity / Reshape-like outputs
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
		    (rc = init_view(p, v->index, pd)))
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
	rc = p->nodes[ni].fn(&k);
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
	 * ConstantOfShape), except a dequantized weight when asked for (fold_dq) */
	if (rc || (out_bytes / 2 > in_bytes + 32768 && n->op != OQ_OP_DequantizeLinear))
		keep = 0;
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
 * Packing: a float32 MatMul / Gemm whose B (input 1) is a plan constant and
 * whose A is not gets B packed once (oq_packed_b_pack, gemm_packed.c) and runs on
 * the packed panels (kctx.packed_b) - MatMul when B's batch dims are all 1, Gemm
 * when alpha is 1 and A is not transposed (the kernel's shape). One packed
 * copy per value and orientation, shared by its products. A constant only
 * packed products (as B) and folded nodes read is then let go
 * (const_drop), its tensor kept as a shell (dims, data NULL) so runs still
 * see its shape; an observer gets folded values rebuilt from the panels
 * (oq_packed_b_unpack), so it sees what it saw before.
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

static int pack_node(plan *p, size_t ni, const unsigned char *gone)
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
	if (n->op == OQ_OP_Conv)
		return pack_conv(p, ni, gone);
	if (n->op == OQ_OP_Gemm) {
		if (attr_f(n, "alpha", 1.0f) != 1.0f || attr_i(n, "transA", 0) != 0)
			return OQ_OK;
		tb = attr_i(n, "transB", 0) != 0;
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
 * AVX-512 conv GEMM: conv.c) and runs on them (kctx.packed_w), fused or
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
	int64_t group = attr_i(n, "group", 1), kc = 1;
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
 * to ni that no run executes for it - folded, or a packed product reading v
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
	for (size_t u = 0; u < v->n_uses; u++) {
		const oq_node *c = v->uses[u].node;
		const node_plan *np;
		if (c->graph != g || c->index > ni || g->nodes[c->index] != c)
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
 * Folds and packs what it can, node by node in graph order (so chains
 * fold, and a product packs its B right after B was folded), making
 * initializer views on demand and dropping constants nothing reads any more
 * (const_drop); then makes the views of the initializers that are left.
 */
static int plan_fold(oq_exec *e, plan *p, oq_diag *d)
{
	const oq_graph *g = p->g;
	unsigned char *pinned = oq_calloc(g->n_values ? g->n_values : 1, 1);
	unsigned char *gone = oq_calloc(g->n_values ? g->n_values : 1, 1);
	int rc = OQ_OK, pack = oq_packed_b_available() && !oq_exec_no_pack;

	if (!pinned || !gone) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto done;
	}
	for (size_t i = 0; i < g->n_nodes && !rc; i++) {
		const oq_node *n = g->nodes[i];
		if (!oq_exec_no_fold && (rc = fold_node(e, p, i, pinned, gone, d)) == OQ_ENOMEM && d->count == 0)
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		if (!rc && pack && (rc = pack_node(p, i, gone)) == OQ_ENOMEM && d->count == 0)
			rc = oq_err(d, rc, "run: out of memory packing the weight of node '%s'", n->name);
		for (size_t j = 0; !rc && (p->nodes[i].folded || p->nodes[i].packed_b || p->nodes[i].packed_w) && j < n->n_inputs; j++)
			const_drop(p, n->inputs[j], i, pinned, gone);
	}
	for (size_t i = 0; i < g->n_values && !rc; i++)
		if (g->values[i]->init && !p->inits[i] && !gone[i])
			rc = init_view(p, i, d);
done:
	free(pinned);
	free(gone);
	return rc;
}

size_t oq_exec_n_packed(const oq_exec *e)
{
	size_t n = 0;
	for (const plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++)
			n += p->nodes[i].packed_b != NULL;
	return n;
}

size_t oq_exec_n_packed_conv(const oq_exec *e)
{
	size_t n = 0;
	for (const plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++)
			n += p->nodes[i].packed_w != NULL;
	return n;
}

size_t oq_exec_n_folded(const oq_exec *e)
{
	size_t n = 0;
	for (const plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++)
			n += p->nodes[i].folded != 0;
	return n;
}

static int plan_node_check(oq_exec *e, const oq_graph *g, oq_diag *d);

static int make_plan(oq_exec *e, const oq_graph *g, plan **out, oq_diag *d)
{
	plan *p;
	int rc, planning;

	for (p = e->plans; p; p = p->next)
		if (p->g == g) {
			*out = p;
			return OQ_OK;
		}
	p = calloc(1, sizeof *p);
	if (!p)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	p->g = g;
	p->nodes = oq_calloc(g->n_nodes, sizeof *p->nodes);
	p->inits = oq_calloc(g->n_values, sizeof *p->inits);
	p->uses = oq_calloc(g->n_values, sizeof *p->uses);
	p->packed_b = oq_calloc(2 * g->n_values, sizeof *p->packed_b);
	p->packed_w = oq_calloc(g->n_values, sizeof *p->packed_w);
	if (!p->nodes || !p->inits || !p->uses || !p->packed_b || !p->packed_w) {
		free_plan(p);
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		collect c = {g, &p->nodes[i], p->uses, 0};
		p->nodes[i].fn = oq_kernel_find(n->op, n->opset);
		for (size_t k = 0; k < n->n_inputs; k++)
			if (n->inputs[k] && !(n->inputs[k]->flags & OQ_V_OUTER))
				p->uses[n->inputs[k]->index]++;
		/* subgraphs of this node: their outer reads of our values are our uses */
		for (size_t k = 0; k < n->n_attrs; k++) {
			oq_attr *a = &n->attrs[k];
			if (a->g)
				collect_sub(a->g, n, &c);
			for (size_t j = 0; a->graphs && j < a->n; j++)
				collect_sub(a->graphs[j], n, &c);
		}
		if (c.oom) {
			free_plan(p);
			return oq_err(d, OQ_ENOMEM, "run: out of memory");
		}
	}
	if (plan_fusion(p)) {
		free_plan(p);
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	}
	plan_chains(p);
	planning = e->planning;
	e->planning = 1; /* folded outputs are plan constants, not arena activations */
	rc = plan_fold(e, p, d);
	e->planning = planning;
	if (rc) {
		free_plan(p);
		return rc;
	}
	p->next = e->plans;
	e->plans = p;
	*out = p;
	return OQ_OK;
}

/* Every node of g and of its subgraphs must have a kernel. */
static int check_sub(oq_graph *sub, oq_node *owner, void *arg)
{
	(void)owner;
	void **a = arg;
	return plan_node_check(a[0], sub, a[1]);
}

static int plan_node_check(oq_exec *e, const oq_graph *g, oq_diag *d)
{
	void *arg[2] = {e, d};
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		if (!oq_kernel_find(n->op, n->opset))
			return oq_err(d, OQ_EUNSUP,
				      "run: node '%s' (%s, domain '%s', opset %lld): onnxq cannot run this "
				      "op; see README 'Supported ops'",
				      n->name, n->op_type, *n->domain ? n->domain : "ai.onnx",
				      (long long)n->opset);
	}
	return oq_graph_each_subgraph((oq_graph *)g, check_sub, arg);
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
	if ((rc = oq_graph_rebuild_uses(m->graph)) || (rc = plan_node_check(e, m->graph, d)) ||
	    (rc = make_plan(e, m->graph, &p, d)))
		goto fail;
	e->in = oq_calloc(m->graph->n_inputs, sizeof *e->in);
	if (!e->in) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < m->graph->n_inputs; i++)
		if (!m->graph->inputs[i]->init)
			e->in[e->n_in++] = m->graph->inputs[i];
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
		free_plan(e->plans);
		e->plans = n;
	}
	for (size_t i = 0; i < e->n_chunks; i++) {
		free(e->chunks[i].base);
		free(e->chunks[i].free);
	}
	free(e->chunks);
	for (int i = 0; e->scratch && i < e->n_scratch; i++)
		free(e->scratch[i].p);
	free(e->scratch);
	free(e->shared.p);
	free(e->in);
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
			if (!np->fuse)
				continue;
			/* the head's output, and the BN's when an activation follows it */
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

size_t oq_exec_n_fused(const oq_exec *e)
{
	size_t n = 0;
	for (const plan *p = e->plans; p; p = p->next)
		for (size_t i = 0; i < p->g->n_nodes; i++)
			n += p->nodes[i].fuse != NULL;
	return n;
}

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
	rt_recycle(e, t);
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

static int run_frame(oq_exec *e, frame *f, oq_diag *d)
{
	const oq_graph *g = f->p->g;
	oq_rt *inbuf[16], *outbuf[16];
	int rc = OQ_OK;

	for (size_t ni = 0; ni < g->n_nodes && !rc; ni++) {
		const oq_node *n = g->nodes[ni];
		const node_plan *np = &f->p->nodes[ni];
		oq_kctx k;
		oq_rt **in, **out, *fin[OQ_FUSE_MAX_T];
		oq_value *const *ovals = n->outputs; /* values the outputs are bound to */
		size_t n_out = n->n_outputs;
		/* observers see every value, so no fusion, unless they want none of the group's intermediates */
		int fused = !e->observe || np->obs_fused;
		const node_plan *bp = np->chain && !e->observe ? &f->p->nodes[np->chain] : NULL; /* chained group */
		oq_kchain kc;

		if (fused && np->absorbed && !(f->unfused && f->unfused[ni]))
			continue; /* computed by its group's head */
		if (np->chained && !e->observe)
			continue; /* computed by its chain's head */
		if (np->folded) { /* a plan constant: observers still see it here, as if computed now */
			for (size_t i = 0; e->observe && !rc && i < n->n_outputs; i++)
				if (n->outputs[i])
					rc = observe_const(e, f->p, n->outputs[i], d);
			continue;
		}
		if (fused && np->fuse) {
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
		if (!in || !out) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto next;
		}
		for (size_t i = 0; i < n_out; i++)
			out[i] = NULL;
		for (size_t i = 0; i < n->n_inputs; i++) {
			in[i] = NULL;
			if (n->inputs[i] && !(in[i] = lookup(f, n->inputs[i]))) {
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
				fin[i] = lookup(f, np->tin[i]);
			k.fuse_in = fin;
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
		rc = bp ? oq_k_conv_chain(&k) : k.fuse ? oq_k_conv_fused(&k) : np->fn(&k);
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
			ovals = n->outputs;
			n_out = k.n_out = n->n_outputs;
			for (size_t i = 0; i < n_out; i++)
				out[i] = NULL;
			rc = np->fn(&k);
		}
		for (size_t i = 0; !rc && i < n_out; i++)
			if (!out[i] && ovals[i])
				rc = oq_k_err(&k, OQ_EINVAL, "kernel produced no output #%zu (internal error)", i);
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
				rt_recycle(e, out[i]);
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
			for (int j = 0; k.fuse && j < np->n_members; j++) {
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

/* Moves (or copies) the graph outputs of a finished frame into `outputs`. */
static int take_outputs(oq_exec *e, frame *f, oq_rt *outputs, size_t n_out, oq_diag *d)
{
	const oq_graph *g = f->p->g;
	for (size_t i = 0; i < n_out && i < g->n_outputs; i++) {
		const oq_value *v = g->outputs[i];
		oq_rt *t = lookup(f, v);
		int moved = 0;
		if (!t)
			return oq_err(d, OQ_EINVAL, "run: graph output '%s' was not computed", v->name);
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
			rt_recycle(e, t);
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
	if ((rc = make_plan(e, g, &p, d)))
		return rc;
	f->p = p;
	f->parent = parent;
	f->slots = oq_calloc(g->n_values, sizeof *f->slots);
	f->remaining = oq_calloc(g->n_values, sizeof *f->remaining);
	if (!f->slots || !f->remaining)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	memcpy(f->remaining, p->uses, g->n_values * sizeof *f->remaining);
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

int oq_exec_run(oq_exec *e, const oq_rt *inputs, size_t n_inputs, oq_rt *outputs, size_t n_outputs,
		oq_diag *d)
{
	frame f;
	int rc;

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
	for (size_t i = 0; i < n_inputs; i++)
		if ((rc = bind(&f, e->in[i], &inputs[i], d)))
			goto done;
	if (!(rc = run_frame(e, &f, d)))
		rc = take_outputs(e, &f, outputs, n_outputs, d);
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
	if (!(rc = run_frame(k->e, &f, k->d)))
		rc = take_outputs(k->e, &f, outputs, n_out, k->d);
done:
	frame_free(k->e, &f);
	return rc;
}

/* ------------------------------------------------------- kernel services */

/* b's buffer, grown (64-byte aligned, contents dropped) to at least `bytes`; NULL when out of memory. */
static void *buf_reserve(struct buf *b, size_t bytes)
{
	if (b->cap < bytes) {
		size_t cap = (bytes + 63) / 64 * 64 + 64;
		void *p = aligned_alloc(64, cap);
		if (!p)
			return NULL;
		free(b->p);
		b->p = p;
		b->cap = cap;
	}
	return b->p;
}

void *oq_k_scratch(oq_kctx *k, size_t bytes)
{
	int w = oq_pool_self();

	if (!k || w < 0 || w >= k->e->n_scratch)
		return NULL;
	return buf_reserve(&k->e->scratch[w], bytes);
}

void *oq_k_shared(oq_kctx *k, size_t bytes)
{
	return buf_reserve(&k->e->shared, bytes);
}

static int output(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, int zero, oq_rt **t);

int oq_k_output(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, oq_rt **t)
{
	return output(k, i, dtype, rank, dims, 1, t);
}

int oq_k_output_raw(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, oq_rt **t)
{
	return output(k, i, dtype, rank, dims, 0, t);
}

static int output(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, int zero, oq_rt **t)
{
	oq_rt *r;
	int rc;

	*t = NULL;
	if (i >= k->n_out) /* an output the node does not declare: scratch nobody reads */
		return oq_k_err(k, OQ_EINVAL, "kernel wrote output #%zu but the node has %zu outputs", i,
				k->n_out);
	if (k->out[i]) {
		k->e->live -= k->out[i]->nbytes;
		rt_recycle(k->e, k->out[i]);
		free(k->out[i]);
		k->out[i] = NULL;
	}
	r = malloc(sizeof *r);
	if (!r)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	if (dtype != OQ_DT_STRING) {
		memset(r, 0, sizeof *r);
		rc = rank < 0 || rank > OQ_RT_MAX_RANK ? OQ_EUNSUP
		     : oq_shape_size(dtype, rank, dims, &r->nelem, &r->nbytes) ? OQ_EINVAL : OQ_OK;
		if (!rc) {
			r->dtype = dtype;
			r->rank = rank;
			if (rank)
				memcpy(r->dims, dims, (size_t)rank * sizeof *dims);
			r->data = buf_get(k->e, r->nbytes, &r->cap);
			if (!r->data)
				rc = OQ_ENOMEM;
			else if (zero)
				memset(r->data, 0, r->nbytes);
		}
	} else {
		rc = oq_rt_alloc(r, dtype, rank, dims);
	}
	if (rc) {
		oq_rt_release(r);
		free(r);
		if (rc == OQ_EUNSUP)
			return oq_k_err(k, rc, "output rank %d is above the supported %d", rank, OQ_RT_MAX_RANK);
		return oq_k_err(k, rc, rc == OQ_ENOMEM ? "out of memory for an output of %s"
						       : "invalid output shape for %s",
				oq_dtype_name(dtype));
	}
	k->e->live += r->nbytes;
	k->out[i] = r;
	*t = r;
	return OQ_OK;
}

int oq_k_output_like(oq_kctx *k, size_t i, const oq_rt *src, int rank, const int64_t *dims, oq_rt **t)
{
	int rc;
	if (src->kind != OQ_RT_TENSOR) /* a sequence or empty optional: a deep copy */
		return oq_k_output_value(k, i, src, t);
	rc = oq_k_output(k, i, src->dtype, rank, dims, t);
	if (rc)
		return rc;
	if ((*t)->nelem != src->nelem)
		return oq_k_err(k, OQ_EINVAL, "cannot give %zu elements the shape of %zu", src->nelem,
				(*t)->nelem);
	if (src->strs) {
		for (size_t j = 0; j < src->nelem; j++) {
			(*t)->strs[j].p = malloc(src->strs[j].len + 1);
			if (!(*t)->strs[j].p)
				return oq_k_err(k, OQ_ENOMEM, "out of memory");
			memcpy((*t)->strs[j].p, src->strs[j].p, src->strs[j].len + 1);
			(*t)->strs[j].len = src->strs[j].len;
		}
	} else if (src->nbytes) {
		memcpy((*t)->data, src->data, src->nbytes);
	}
	return OQ_OK;
}

int oq_k_output_value(oq_kctx *k, size_t i, const oq_rt *src, oq_rt **t)
{
	oq_rt *r;
	*t = NULL;
	if (src->kind == OQ_RT_TENSOR)
		return oq_k_output_like(k, i, src, src->rank, src->dims, t);
	if (i >= k->n_out)
		return oq_k_err(k, OQ_EINVAL, "kernel wrote output #%zu but the node has %zu outputs", i,
				k->n_out);
	if (!(r = malloc(sizeof *r)) || oq_rt_copy(r, src)) {
		if (r) {
			oq_rt_release(r);
			free(r);
		}
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	}
	if (k->out[i]) {
		k->e->live -= k->out[i]->nbytes;
		rt_recycle(k->e, k->out[i]);
		free(k->out[i]);
	}
	k->out[i] = r;
	*t = r;
	return OQ_OK;
}

int oq_k_err(oq_kctx *k, int status, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return oq_err(k->d, status, "run: node '%s' (%s, opset %lld): %s", k->node->name,
		      k->node->op_type, (long long)k->opset, msg);
}

const oq_attr *oq_k_attr(const oq_kctx *k, const char *name)
{
	return oq_node_attr(k->node, name);
}

int64_t oq_k_int(const oq_kctx *k, const char *name, int64_t dflt)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_INT ? a->i : dflt;
}

float oq_k_float(const oq_kctx *k, const char *name, float dflt)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_FLOAT ? a->f : dflt;
}

const char *oq_k_str(const oq_kctx *k, const char *name, const char *dflt)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_STRING ? a->s.p : dflt;
}

size_t oq_k_ints(const oq_kctx *k, const char *name, const int64_t **v)
{
	const oq_attr *a = oq_k_attr(k, name);
	*v = a && a->type == OQ_ATTR_INTS ? a->ints : NULL;
	return *v ? a->n : 0;
}

size_t oq_k_floats(const oq_kctx *k, const char *name, const float **v)
{
	const oq_attr *a = oq_k_attr(k, name);
	*v = a && a->type == OQ_ATTR_FLOATS ? a->floats : NULL;
	return *v ? a->n : 0;
}

void oq_k_parallel(oq_kctx *k, size_t n, size_t grain, oq_range_fn fn, void *ctx)
{
	if (!k) {
		fn(ctx, 0, n);
		return;
	}
	oq_pool_run(k->e->pool, n, grain, fn, ctx);
}

int oq_broadcast(int ra, const int64_t *a, int rb, const int64_t *b, int *rr, int64_t *r)
{
	int n = ra > rb ? ra : rb;
	if (n > OQ_RT_MAX_RANK)
		return OQ_EUNSUP;
	for (int i = 0; i < n; i++) {
		int64_t x = i < n - ra ? 1 : a[i - (n - ra)];
		int64_t y = i < n - rb ? 1 : b[i - (n - rb)];
		if (x != y && x != 1 && y != 1)
			return OQ_EINVAL;
		r[i] = x == 1 ? y : x;
	}
	*rr = n;
	return OQ_OK;
}

int oq_axis(int64_t axis, int rank)
{
	if (axis < -(int64_t)rank || axis >= rank)
		return -1;
	return (int)(axis < 0 ? axis + rank : axis);
}
