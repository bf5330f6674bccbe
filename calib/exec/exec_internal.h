/*
 * exec_internal.h - private to the executor (calib/exec/): the plan of a
 * graph, the executor's state, and the calls its files make into each
 * other.
 *
 *   exec.c        the kernel table, oq_exec_new / free / clone, observers
 *   plan.c        a graph's plan: kernels, uses, fused Conv groups, chains
 *   plan_fold.c   the plan's constant folding and weight packing
 *   run.c         frames and the node loop (oq_exec_run, subgraphs)
 *   arena.c       the activation arena outputs are carved from
 *   widen.c       float16 / bfloat16 values held as float32
 *   kernel_api.c  what kernels call (kernel.h: outputs, scratch, errors,
 *                 attributes, parallel-for)
 */
#ifndef OQ_EXEC_INTERNAL_H
#define OQ_EXEC_INTERNAL_H

#include "calib/kernels/kernel.h"

/* What the plan decided for one node. */
typedef struct node_plan {
	oq_kernel_fn fn;
	oq_value **extra;      /* local values read by this node's subgraphs */
	size_t n_extra;
	oq_kfuse *fuse;        /* head (Conv) of a fused group: what it runs instead, else NULL */
	int qdq;               /* head (QuantizeLinear) of a Q -> DQ pair run as oq_k_qdq (tail, members: the DQ) */
	size_t tail;           /* head: index of the group's last node (its output is the group's) */
	size_t members[OQ_FUSE_MAX_NODES + 2]; /* head: indices of the absorbed nodes */
	int n_members;
	oq_value *fuse_in[OQ_FUSE_MAX_T]; /* head: the values of the group's tensor operands */
	int absorbed;          /* a later member of a fused group: skipped when running fused */
	int obs_fused;         /* group member: runs fused even while observing (intermediates unwanted) */
	int folded;            /* computed once by the plan: its outputs are plan constants (inits) */
	const oq_packed_b *packed_b; /* MatMul / Gemm: its constant B packed (owned by plan.packed_b), else NULL */
	const oq_packed_w *packed_w; /* Conv: its constant W packed (owned by plan.packed_w), else NULL */
	size_t chain;          /* Conv group head: index of the depthwise Conv head run with it, or 0 (none) */
	int chained;           /* depthwise Conv head run by the chain head before it (without an observer) */
} node_plan;

/*
 * The plan of one graph (the main graph or a subgraph), made once and
 * read by every run: nothing in it changes after oq_plan_get returns, so
 * clones share it.
 */
typedef struct plan {
	const oq_graph *g;
	node_plan *nodes;      /* per node index */
	size_t *order;         /* the node indices in the order runs take them: topological, the file's
				* own order where that is one (plan_order) */
	size_t *pos;           /* per node index: its place in order */
	oq_rt **inits;         /* per value index: initializer view or folded constant, or NULL */
	int *uses;             /* per value index: uses by nodes of this graph (subgraph reads included) */
	oq_packed_b **packed_b; /* per value index i: [2i] the value packed as B, [2i + 1] packed as transposed B */
	oq_packed_w **packed_w; /* per value index: the value packed as a Conv weight */
	size_t freed;          /* heap bytes planning freed since the last trim (plan_fold.c) */
	struct plan *next;
} plan;

/* Profile of one plan's nodes in an executor (oq_exec_profile): what its runs measured. */
typedef struct prof {
	const plan *p;
	uint64_t *ns;          /* per node index: self time in ns (its kernel's wall time less nested nodes') */
	uint64_t *calls;       /* per node index: kernel calls */
	unsigned char *grouped; /* per node index: 1 when its last call ran a fused group, 2 also a chain */
	struct prof *next;
} prof;

/* A buffer kept across kernel calls (64-byte aligned). */
struct buf {
	void *p;
	size_t cap;            /* bytes */
};

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
	struct chunk *chunks;  /* the activation arena (arena.c) */
	size_t n_chunks, cap_chunks;
	int planning;          /* making a plan: outputs (folded constants) outside the arena */
	int fold_dq;           /* oq_exec_opts.fold_dq */
	int64_t max_loop;      /* oq_exec_opts.max_loop_iterations (resolved) */
	size_t max_live;       /* oq_exec_opts.max_live_bytes; SIZE_MAX: no limit */
	int refused;           /* set when an output was refused for max_live (its OQ_ENOMEM is the
				* model's, not the machine's) */
	struct buf *scratch;   /* per pool thread: oq_k_scratch's buffer */
	int n_scratch;         /* scratch entries: threads, or for a clone (which may run inside its
				* source's pool, on a thread of that pool's index) also the source's */
	struct buf shared;     /* oq_k_shared's buffer */
	int profiling;         /* oq_exec_profile on: runs time every kernel call */
	prof *profs;           /* per plan run so far while profiling */
	uint64_t nested;       /* profiling: ns spent in nodes nested in the node running now (subgraphs) */
};

/* np heads a group (a fused Conv group or a Q -> DQ pair): its tail's outputs are what it makes. */
static inline int np_heads(const node_plan *np)
{
	return np->fuse != NULL || np->qdq;
}

/* An attribute of n of that type, or dflt. */
static inline float node_float(const oq_node *n, const char *name, float dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_FLOAT ? a->f : dflt;
}

static inline int64_t node_int(const oq_node *n, const char *name, int64_t dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_INT ? a->i : dflt;
}

/* plan.c */
/* Checks that every node of g and of its subgraphs has a kernel (OQ_EUNSUP naming the first that has none). */
int oq_plan_check(oq_exec *e, const oq_graph *g, oq_diag *d) OQ_WUR;
/* g's plan in e, made now (and added to e->plans) if e has none yet. */
int oq_plan_get(oq_exec *e, const oq_graph *g, plan **out, oq_diag *d) OQ_WUR;
void oq_plan_free(plan *p);

/* plan_fold.c */
/*
 * Folds the constant nodes of p and packs the constant weights its
 * products read, node by node; then makes the views of the initializers
 * that are left. Runs with e->planning set.
 */
int oq_plan_fold(oq_exec *e, plan *p, oq_diag *d) OQ_WUR;

/* run.c */
/* e's profile of plan p, made now when there is none; NULL when out of memory. */
prof *oq_prof_get(oq_exec *e, const plan *p);

/* widen.c */
/* dtype is held as float32 while running (float16, bfloat16). */
int oq_exec_wide(int dtype);
/*
 * t (a tensor or a sequence) with float16 / bfloat16 elements converted
 * to float32 in place; others unchanged. A tensor's new buffer comes from
 * the arena (the plan's heap while planning) and the old one goes back to
 * it (a borrowed one is left alone); e->live follows. OQ_ENOMEM.
 */
int oq_exec_widen(oq_exec *e, oq_rt *t) OQ_WUR;
/*
 * The 16-bit type a float32 output of n computed from inputs in stands
 * for (oq_rt.wide): its first input's, input 1's for CastLike and
 * DequantizeLinear (their type comes from there), none for Cast.
 */
int oq_exec_wide_of(const oq_node *n, const oq_rt *const *in, size_t n_in);
/* dst (owned, dtype float16 or bfloat16): float32 tensor src rounded to dtype. OQ_ENOMEM. */
int oq_exec_narrow(const oq_rt *src, int dtype, oq_rt *dst) OQ_WUR;

/* arena.c */
/*
 * A buffer of at least need bytes for an activation, 64-byte aligned,
 * readable and writable 64 bytes past need (vector tails); *cap its size
 * in the arena, 0 when it is not in the arena (made while planning: the
 * plan keeps it). NULL when out of memory.
 */
void *oq_arena_get(oq_exec *e, size_t need, size_t *cap);
/* Gives t's data back to the arena (or frees it) and resets t (oq_rt_release). */
void oq_arena_release(oq_exec *e, oq_rt *t);
/* Frees the arena's memory (at oq_exec_free). */
void oq_arena_free(oq_exec *e);

#endif
