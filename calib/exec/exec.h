/*
 * exec.h - onnxq's CPU executor: runs a loaded model on host tensors.
 *
 * Calibration runs sample inputs through it (observers see each value as
 * it is produced), and `onnxq run` / `compare` use it to judge models. It
 * is built once per model (every node checked against the kernel table
 * before any work starts), then run any number of times. Symbolic dims are
 * bound from the inputs at run time: kernels compute their output shapes.
 *
 * Memory: each activation is released after its last consumer (uses from
 * subgraphs included) and its buffer returns to the executor's arena
 * (first fit in lazily backed chunks) that later outputs are carved from;
 * outputs handed to the caller are its own copies. Threads: kernels split
 * work into contiguous ranges whose partition never changes the
 * arithmetic, so outputs are identical for any --threads. float16 and
 * bfloat16 values are held and computed as float32 (as ONNX Runtime's CPU
 * provider computes them); outputs come back in their 16-bit type.
 */
#ifndef OQ_EXEC_H
#define OQ_EXEC_H

#include "src/ir/ir.h"

#define OQ_RT_MAX_RANK 16

/* What an oq_rt holds: a tensor, a sequence of tensors, or an optional without a value. */
enum {
	OQ_RT_TENSOR = 0,
	OQ_RT_SEQ,                    /* items[0..n_items): tensors; dtype is the element type */
	OQ_RT_NONE,                   /* an empty optional (an optional with a value is the value itself) */
};

/* A runtime value: a tensor (kind OQ_RT_TENSOR, everything below) or a sequence / empty optional. */
typedef struct oq_rt {
	int kind;                     /* OQ_RT_TENSOR, OQ_RT_SEQ or OQ_RT_NONE */
	struct oq_rt *items;          /* OQ_RT_SEQ: the elements (owned unless borrowed) */
	size_t n_items;
	int dtype;                    /* oq_dtype; OQ_RT_SEQ: the element type (0 when unknown) */
	int rank;
	int64_t dims[OQ_RT_MAX_RANK];
	size_t nelem;
	size_t nbytes;
	void *data;                   /* element bytes (64-byte aligned unless borrowed) */
	oq_bytes *strs;               /* STRING tensors: nelem entries (owned) */
	int borrowed;                 /* data belongs to someone else (initializer, caller) */
	size_t cap;                   /* bytes allocated for data by the executor's buffer pool, 0 otherwise */
	int wide;                     /* float32 data of a float16 / bfloat16 value: that type, else 0
				       * (the executor computes 16-bit floats in float32: widen.c) */
} oq_rt;

/* Allocates an owned, zeroed tensor. OQ_EINVAL on bad dims, OQ_ENOMEM. */
int oq_rt_alloc(oq_rt *t, int dtype, int rank, const int64_t *dims) OQ_WUR;
/* Frees owned data (sequence items too) and resets *t to empty (safe on a zeroed struct). */
void oq_rt_release(oq_rt *t);
/* A view of an IR tensor: borrowed when suitably aligned, else an owned copy. */
int oq_rt_from_tensor(oq_rt *t, const oq_tensor *src) OQ_WUR;
/* src's dtype and shape without its data (data NULL, borrowed): what is left of a weight the plan packed. */
int oq_rt_shape_of(oq_rt *t, const oq_tensor *src) OQ_WUR;
/* Deep copy into an owned value (sequences item by item). */
int oq_rt_copy(oq_rt *dst, const oq_rt *src) OQ_WUR;
/* An owned sequence of n zeroed items with element type dtype (0: unknown). */
int oq_rt_seq(oq_rt *t, int dtype, size_t n) OQ_WUR;
/* Element i converted to double / int64 (any numeric dtype, fp16/bf16, sub-byte). */
double oq_rt_get(const oq_rt *t, size_t i);
int64_t oq_rt_get_int(const oq_rt *t, size_t i);
/* Stores v into element i with the dtype's conversion (round to nearest even, saturating for ints). */
void oq_rt_set(oq_rt *t, size_t i, double v);
/* "float32[1, 3, 224, 224]" into buf; "sequence<float32>(3)", "optional(none)". */
const char *oq_rt_describe(const oq_rt *t, char *buf, size_t n);

typedef struct oq_exec oq_exec;

typedef struct oq_exec_opts {
	int threads;                  /* worker threads incl. the caller; <= 0: number of cores */
	int fold_dq;                  /* also compute once, in the plan, DequantizeLinear of constants
				       * (quantized weights): runs skip the dequantization and a Conv /
				       * MatMul / Gemm reads the weight packed, as in the float model, at
				       * the price of the float weights held by the plan (4x the int8
				       * bytes, 8x int4): for callers that hold the float model anyway
				       * (bias correction). Conv outputs are the same bits either way; a
				       * MatMul / Gemm may round differently, its packed kernel being the
				       * float model's, not the plain one. Thread-independent either way. */
	int64_t max_loop_iterations;  /* iterations one Loop node may run before it fails naming the
				       * node (a trip count of 2^62 with cond true never ends);
				       * <= 0: OQ_MAX_LOOP_ITERATIONS. Clones keep their source's. */
	int64_t max_live_bytes;       /* bytes of node outputs a run may hold at once (the values
				       * counted by oq_exec_peak_bytes, a constant folded by the plan
				       * included while it is made): the output that would pass it
				       * fails naming its node (OQ_ENOMEM) instead of the process
				       * growing without bound on a hostile file; <= 0: no limit.
				       * Clones keep their source's. */
} oq_exec_opts;

/* The default of oq_exec_opts.max_loop_iterations (--max-loop-iterations). */
#define OQ_MAX_LOOP_ITERATIONS 10000000

/* The iteration limit of a Loop node run by e (for the Loop kernel). */
int64_t oq_exec_max_loop(const oq_exec *e);

/*
 * Observer: called for every node output (main graph and subgraphs) right
 * after it is computed, before it may be released, and for the inputs of
 * a subgraph (If/Loop/Scan body) each time they are bound (tensors only;
 * the main graph's inputs are the caller's). Non-zero return stops the
 * run with that status.
 */
typedef int (*oq_observe_fn)(void *ctx, const oq_value *v, const oq_rt *t);

/* Checks every node (and subgraph) has a kernel; prepares plans. */
int oq_exec_new(oq_model *m, const oq_exec_opts *o, oq_exec **out, oq_diag *d) OQ_WUR;
void oq_exec_free(oq_exec *e);
void oq_exec_set_observer(oq_exec *e, oq_observe_fn fn, void *ctx);
/*
 * Optional with an observer: want(ctx, v) == 0 says the observer does not
 * need value v. A fused Conv[+BN][+activation] group whose intermediate
 * values (Conv and BN outputs, not its last output) are all unwanted then
 * stays fused while observing (otherwise an observer disables fusion, so it
 * sees every value); its results are bit-identical either way. A plan
 * constant the plan holds only packed (a folded weight) is not reported when
 * unwanted: rebuilding it costs a pass over the weight every run. want NULL:
 * every value is wanted. Uses the ctx given to oq_exec_set_observer (at the
 * time of each call).
 */
typedef int (*oq_observe_want_fn)(void *ctx, const oq_value *v);
void oq_exec_set_observe_want(oq_exec *e, oq_observe_want_fn want);

/*
 * A second executor of e's model with o->threads threads (<= 0: 1), sharing
 * e's plans: the kernels, initializer views and packed weights are held
 * once. It has its own activation arena, so it may run at the same time as
 * e and other clones (one sample each); outputs are those of e, bit for bit.
 * The observer and its want are e's (change the ctx with
 * oq_exec_set_observer; do not call oq_exec_set_observe_want on a clone).
 * Free clones before e.
 */
int oq_exec_clone(const oq_exec *e, const oq_exec_opts *o, oq_exec **out, oq_diag *d) OQ_WUR;

/* e's thread pool (oq_pool_run from the caller's thread, e.g. an observer's own parallel work). */
struct oq_pool *oq_exec_pool(const oq_exec *e);

/* The inputs a caller feeds: graph inputs not backed by an initializer, in graph order. */
size_t oq_exec_n_inputs(const oq_exec *e);
const oq_value *oq_exec_input(const oq_exec *e, size_t i);
size_t oq_exec_n_outputs(const oq_exec *e);
const oq_value *oq_exec_output(const oq_exec *e, size_t i);

/*
 * Runs the main graph. inputs: n_inputs tensors (borrowed for the run);
 * outputs: n_outputs structs (cleared here) that receive owned tensors (release
 * them with oq_rt_release). Input dtype/rank/fixed dims are checked against
 * the declared input types first.
 */
int oq_exec_run(oq_exec *e, const oq_rt *inputs, size_t n_inputs, oq_rt *outputs, size_t n_outputs,
		oq_diag *d) OQ_WUR;

/*
 * Runs only the main-graph nodes i with part[i] set (part: one entry per node of g->nodes),
 * e.g. those downstream of a perturbed value. values[i] (one entry per main-graph value index;
 * NULL: none) binds value i for the run, borrowed: every value a computed node reads that no
 * computed node produces (an earlier run's values, observed; graph inputs) must be given, and
 * so must every graph output no computed node produces. Given for an initializer, it replaces
 * the initializer in this run (the nodes reading it use it unpacked), e.g. a weight's
 * fake-quantized copy; a value a computed node produces is computed, not taken. With every
 * node computed and the inputs bound it computes what oq_exec_run does; outputs as there
 * (inputs are not checked against their declared types). No observer may be set.
 */
int oq_exec_run_part(oq_exec *e, const unsigned char *part, const oq_rt *const *values, oq_rt *outputs,
		     size_t n_outputs, oq_diag *d) OQ_WUR;

/* Peak bytes of activations held at once during the last run. */
size_t oq_exec_peak_bytes(const oq_exec *e);

/* Main-graph runs begun by every executor of the process so far: whole (oq_exec_run) or, with
 * part set, partial (oq_exec_run_part). For cost reports; thread-safe. */
size_t oq_exec_runs(int part);

/*
 * Profiling (`onnxq run --profile`). With on, every later run adds each
 * kernel call's wall time to its node; off stops (what was measured stays
 * until oq_exec_free). Timing reads a clock around each kernel call and
 * changes nothing else: outputs are the same bits either way. A node's
 * time is its self time: a node running subgraphs (If, Loop, Scan) is
 * charged what its subgraphs' nodes were not, so the times of all nodes
 * add up to the time spent in kernels. A fused group or chain is one call,
 * charged to its first node (its label names the others).
 */
void oq_exec_profile(oq_exec *e, int on);

/* One node's measurement. */
typedef struct oq_exec_prof {
	const oq_node *node;          /* main graph or a subgraph */
	char label[80];               /* op types of what the call ran: "Conv", "Conv+Relu", "Conv+Relu>Conv" */
	uint64_t ns;                  /* self time over all calls */
	uint64_t calls;
} oq_exec_prof;

/*
 * The nodes that ran while profiling (calls > 0): *out (free it) holds *n
 * entries, graph by graph in the order plans were made, nodes in run
 * order. OQ_ENOMEM.
 */
int oq_exec_profile_get(const oq_exec *e, oq_exec_prof **out, size_t *n) OQ_WUR;

#endif
