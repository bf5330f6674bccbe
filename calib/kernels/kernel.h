/*
 * kernel.h - what a kernel sees: its node, input and output tensors,
 * attribute getters, output allocation, a deterministic parallel-for and
 * subgraph execution (If/Loop/Scan).
 *
 * A kernel checks its preconditions (dtypes, ranks, attribute values) and
 * returns an error through oq_k_err naming the node; it never silently skips
 * work. It computes output shapes from its input shapes at run time.
 * Kernels are registered per family (a file or folder under calib/kernels/) in a table of
 * {op, min_opset, fn} rows; the executor picks the row for the node's op
 * whose min_opset is the largest one <= the node's opset, so a kernel can
 * serve every version or a family can give one row per semantic change.
 */
#ifndef OQ_KERNEL_H
#define OQ_KERNEL_H

#include "calib/exec/exec.h"
#include "calib/exec/threadpool.h"

typedef struct oq_kctx oq_kctx;
typedef int (*oq_kernel_fn)(oq_kctx *k);
typedef struct oq_packed_b oq_packed_b; /* a constant B packed by the plan (linalg.h) */
typedef struct oq_packed_w oq_packed_w; /* a constant Conv weight packed by the plan (linalg.h) */

/*
 * An activation a fused convolution applies to each output tile while it is
 * in cache (the same float32 formulas as the element-wise kernels, so the
 * fused result equals the separate op's bit for bit on the same input).
 */
typedef enum oq_act_kind {
	OQ_ACT_NONE,
	OQ_ACT_RELU,        /* x < 0 ? 0 : x */
	OQ_ACT_CLIP,        /* x < a ? a : x > b ? b : x (a > b: every non-NaN x becomes b) */
	OQ_ACT_LEAKY,       /* x < 0 ? a * x : x */
	OQ_ACT_HSIGMOID,    /* max(0, min(1, a * x + b)) */
	OQ_ACT_HSWISH,      /* x * max(0, min(1, x / 6 + 0.5)) */
	OQ_ACT_SIGMOID,     /* 1 / (1 + exp(-x)) */
} oq_act_kind;

typedef struct oq_act {
	int kind;           /* oq_act_kind */
	float a, b;         /* Clip bounds; LeakyRelu alpha (a); HardSigmoid alpha, beta */
} oq_act;

/*
 * A step of a fused group after the Conv, BN and first activation, applied
 * in the same epilogue (see oq_kfuse): the float32 expression of the
 * element-wise kernel it replaces, so the bits are the separate op's.
 */
typedef enum oq_epi_kind {
	OQ_EPI_CONST,       /* y = y op c (or c op y when rev): c a scalar or one value per channel */
	OQ_EPI_TENSOR,      /* y = y op t (or t op y): t a tensor of the output's shape, e.g. a residual */
	OQ_EPI_ACT,         /* y = act(y) */
	OQ_EPI_GATE,        /* y = y * g(y): g the next n_gate steps (CONST, ACT or QDQ), e.g. x * clip(x + 3, 0, 6) */
	OQ_EPI_QDQ,         /* a per-tensor QuantizeLinear to 8 bits and the DequantizeLinear reading it:
			     * v = y / qs (NaN: 0), clamped to [qlo, qhi], rounded half to even; y = (v + qoff) * ds
			     * - the Q and DQ kernels' float operations, the code never stored */
} oq_epi_kind;

typedef enum oq_epi_bop { OQ_EPI_ADD, OQ_EPI_SUB, OQ_EPI_MUL, OQ_EPI_DIV } oq_epi_bop;

#define OQ_FUSE_MAX_T 2     /* tensor operands of one group */
#define OQ_FUSE_MAX_STEPS 16 /* steps of one group */
#define OQ_FUSE_MAX_NODES (2 * OQ_FUSE_MAX_STEPS) /* nodes the steps of one group absorb (a QDQ: two) */

typedef struct oq_epi_step {
	int kind;           /* oq_epi_kind */
	int bop;            /* CONST, TENSOR: oq_epi_bop */
	int rev;            /* CONST, TENSOR: the constant / tensor is the left operand */
	const float *c;     /* CONST: [M] one value per output channel, or NULL: the scalar s */
	float s;
	int t;              /* TENSOR: index of the operand (oq_kfuse.t, oq_kctx.fuse_in) */
	oq_act act;         /* ACT */
	int n_gate;         /* GATE: steps that follow and form g */
	float qs, qlo, qhi; /* QDQ: the Q's scale; qmin - zp and qmax - zp of its zero point zp */
	float qoff, ds;     /* QDQ: zp - the DQ's zero point (exact: small integers); the DQ's scale */
	float qr;           /* QDQ: 1 / qs when qs and 1 / qs are normal floats, else 0 (see conv_epilogue.c) */
} oq_epi_step;

/*
 * A fused Conv [-> BatchNormalization] [-> activation] [-> steps] group,
 * prepared once by the executor's plan (plan.c) and run as one Conv call
 * whose epilogue, per output tile while it is in cache, applies the BN as a
 * per-channel affine map in double - the same expression and rounding as
 * the BatchNormalization kernel, y = (float)(y * scale[m] + shift[m]) -
 * then the activation, then the steps in order (element-wise ops with
 * constants, a residual Add, a decomposed HardSwish...). So the fused
 * result is bit-identical to the separate ops, and no copy of the weights
 * is needed.
 */
typedef struct oq_kfuse {
	const double *scale; /* [M] BN scale / sqrt(var + eps), or NULL: no BN */
	const double *shift; /* [M] BN B - mean * scale (with scale) */
	oq_act act;          /* epilogue activation (OQ_ACT_NONE: none) */
	const oq_epi_step *steps; /* [n_steps] after act */
	int n_steps;
	int n_t;             /* tensor operands (OQ_EPI_TENSOR steps) */
	const float *t[OQ_FUSE_MAX_T]; /* per call: their data, laid out like the output (NULL in the plan) */
} oq_kfuse;

/* One row of a family's kernel table; tables end with a row whose fn is NULL. */
typedef struct oq_kreg {
	oq_op op;
	int min_opset;      /* first opset this kernel implements (0: any) */
	oq_kernel_fn fn;
} oq_kreg;

/*
 * A depthwise Conv group run in the same call after the Conv group of
 * oq_k_conv_chain (its head node, whose attributes give the geometry, its
 * inputs X (not read: the first Conv's output), W, B, and its epilogue).
 */
typedef struct oq_kchain {
	const oq_node *node;
	oq_rt *in[3];
	size_t n_in;
	const oq_kfuse *fuse; /* NULL: a plain Conv */
} oq_kchain;

struct oq_kctx {
	oq_exec *e;
	const oq_node *node;
	int64_t opset;      /* the node's opset version (node->opset) */
	oq_rt **in;         /* n_in inputs; NULL for omitted optional inputs */
	size_t n_in;
	oq_rt **out;        /* n_out outputs; NULL where the node omits an output */
	size_t n_out;
	oq_diag *d;
	int threads;
	void *frame;        /* executor frame (for subgraphs); opaque to kernels */
	const oq_kfuse *fuse; /* oq_k_conv_fused only: the group this call runs, else NULL */
	const oq_packed_b *packed_b; /* MatMul / Gemm: B (input 1) packed at plan time, whose data may be gone; else NULL */
	const oq_packed_w *packed_w; /* Conv: W (input 1) packed at plan time, whose data may be gone; else NULL */
	oq_rt **fuse_in;    /* oq_k_conv_fused only: the group's tensor operands (fuse->n_t) */
	const oq_kchain *chain; /* oq_k_conv_chain only: the depthwise group that follows */
};

/* Input i or NULL when absent (out of range or omitted). */
static inline oq_rt *oq_k_in(const oq_kctx *k, size_t i)
{
	return i < k->n_in ? k->in[i] : NULL;
}

/*
 * Allocates output i with dtype and shape (zeroed) and returns it in *t.
 * Outputs the node omits get a scratch tensor, so kernels need no special case.
 */
int oq_k_output(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, oq_rt **t) OQ_WUR;
/* oq_k_output without zeroing: for kernels that write every element of the output. */
int oq_k_output_raw(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, oq_rt **t) OQ_WUR;
/*
 * A 64-byte aligned buffer of at least `bytes`, private to the calling thread
 * (the caller or a pool worker inside oq_k_parallel) and kept by the executor
 * across kernel calls, so big per-call work buffers are not mapped and
 * faulted in again each time. Valid until the same thread's next call; NULL
 * when out of memory or k is NULL (callers fall back to malloc).
 */
void *oq_k_scratch(oq_kctx *k, size_t bytes);
/*
 * A 64-byte aligned buffer of at least `bytes` shared by all threads of one
 * kernel call (requested by the calling thread, outside oq_k_parallel) and
 * kept by the executor across calls. Valid until the next oq_k_shared call;
 * NULL when out of memory.
 */
void *oq_k_shared(oq_kctx *k, size_t bytes);
/* Makes output i a copy of src's elements with a new shape (same element count). */
int oq_k_output_like(oq_kctx *k, size_t i, const oq_rt *src, int rank, const int64_t *dims, oq_rt **t) OQ_WUR;

/* Makes output i a deep copy of src (tensor, sequence or empty optional). */
int oq_k_output_value(oq_kctx *k, size_t i, const oq_rt *src, oq_rt **t) OQ_WUR;

/* Reports "run: node 'NAME' (OP, opset N): MESSAGE" and returns status. */
int oq_k_err(oq_kctx *k, int status, const char *fmt, ...) OQ_PRINTF(3, 4);

/* Attributes. */
const oq_attr *oq_k_attr(const oq_kctx *k, const char *name);
int64_t oq_k_int(const oq_kctx *k, const char *name, int64_t dflt);
float oq_k_float(const oq_kctx *k, const char *name, float dflt);
const char *oq_k_str(const oq_kctx *k, const char *name, const char *dflt);
/* INTS attribute: count (0 when absent, *v = NULL); FLOATS likewise. */
size_t oq_k_ints(const oq_kctx *k, const char *name, const int64_t **v);
size_t oq_k_floats(const oq_kctx *k, const char *name, const float **v);

/*
 * Calls fn(ctx, begin, end) over [0, n) in contiguous chunks of at least
 * `grain` items, run by the executor's threads (threadpool.c); returns when all
 * are done. Which thread runs which chunk is decided at run time, so each
 * item must be computed the same way whatever range it falls in (per-range
 * state such as a reused im2col buffer may only save work, never change it).
 * k NULL (a kernel called outside an executor, as tests do): fn(ctx, 0, n)
 * on the calling thread.
 */
void oq_k_parallel(oq_kctx *k, size_t n, size_t grain, oq_range_fn fn, void *ctx);

/*
 * Runs subgraph g (an attribute graph of this node) with the given inputs
 * (one per g->inputs, borrowed) and fills `outputs` (one per g->outputs,
 * owned). Outer-scope values resolve to the calling frame.
 */
int oq_k_run_subgraph(oq_kctx *k, const oq_graph *g, const oq_rt *inputs, size_t n_in, oq_rt *outputs,
		      size_t n_out) OQ_WUR;

/* Numpy-style broadcast of two shapes; OQ_EINVAL when incompatible. */
int oq_broadcast(int ra, const int64_t *a, int rb, const int64_t *b, int *rr, int64_t *r) OQ_WUR;
/* Normalises axis into [0, rank); -1 when out of range. */
int oq_axis(int64_t axis, int rank);

/* Family tables, one per family under calib/kernels/. */
extern const oq_kreg oq_kernels_elementwise[]; /* element-wise, activations, Cast, Where, logic */
extern const oq_kreg oq_kernels_linalg[];      /* Conv, ConvTranspose, Gemm, MatMul, Einsum, *Integer, QLinear* */
extern const oq_kreg oq_kernels_nn[];          /* pooling, normalisation, softmax, reductions, TopK, CumSum */
extern const oq_kreg oq_kernels_shape[];       /* reshape/transpose/slice/gather/pad/resize/... */
extern const oq_kreg oq_kernels_quant[];       /* QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear */
extern const oq_kreg oq_kernels_control[];     /* If, Loop, Scan */
extern const oq_kreg oq_kernels_rnn[];         /* LSTM, GRU, RNN */
extern const oq_kreg oq_kernels_signal[];      /* DFT, STFT, windows, MelWeightMatrix, Det */
extern const oq_kreg oq_kernels_vision[];      /* NonMaxSuppression, RoiAlign, GridSample, MaxUnpool */
extern const oq_kreg oq_kernels_sequence[];    /* Sequence*, SplitToSequence, ConcatFromSequence, Optional* */
/* Ops whose kernels accept sequence / empty-optional inputs (sequence.c); others get tensors only. */
int oq_k_takes_values(oq_op op);

/*
 * Runs a fused group whose head is a float32 Conv (k->node) with k->fuse:
 * output 0 is the value of the group's last node. linalg.c.
 * Returns OQ_K_UNFUSED, having written nothing, when a tensor operand does
 * not have the output's shape and dtype at run time (shapes are only known
 * then): the executor then runs the group's nodes one by one.
 */
#define OQ_K_UNFUSED 1
int oq_k_conv_fused(oq_kctx *k);
/*
 * Runs a float32 Conv group (k->node, k->fuse or NULL, no tensor operands)
 * and the depthwise Conv group k->chain that reads its output, as one
 * kernel: output 0 is the value of the depthwise group's last node.
 * linalg.c.
 */
int oq_k_conv_chain(oq_kctx *k);
/*
 * Runs a QuantizeLinear (k->node, its inputs) to uint8 / int8 and the
 * DequantizeLinear that reads it with the same scale and zero point as one
 * kernel: output 0 is the float32 DQ output, bit-identical to the two
 * kernels run in turn (the code is never stored). OQ_K_UNFUSED, having
 * written nothing, when x or the scale is not float32, the code type is
 * another, or the scale is blocked. quant.c.
 */
int oq_k_qdq(oq_kctx *k);
/* Q -> DQ pairs in e's plans so far (they run as oq_k_qdq). For tests and bench. */
size_t oq_exec_n_qdq(const oq_exec *e);
/* Non-zero: plans made from now on pair no Q -> DQ. For tests and bench. */
extern int oq_exec_no_qdq;
/* Conv -> depthwise chains in e's plans so far (they run when no observer is set). For tests and bench. */
size_t oq_exec_n_chained(const oq_exec *e);
/* Non-zero: plans made from now on chain nothing. For tests and bench. */
extern int oq_exec_no_chain;

/* Fused groups in e's plans so far (main graph at oq_exec_new; subgraphs once run). For tests and bench. */
size_t oq_exec_n_fused(const oq_exec *e);
/* Nodes computed once at plan time (constant folding, plan_fold.c) in e's plans so far. For tests and bench. */
size_t oq_exec_n_folded(const oq_exec *e);
/* Non-zero: plans made from now on fold nothing (every node runs each time). For tests and bench. */
extern int oq_exec_no_fold;
/* MatMul / Gemm nodes running on a B packed at plan time, in e's plans so far. For tests and bench. */
size_t oq_exec_n_packed(const oq_exec *e);
/* Conv nodes running on a W packed at plan time, in e's plans so far. For tests and bench. */
size_t oq_exec_n_packed_conv(const oq_exec *e);
/* Non-zero: plans made from now on pack no constant MatMul / Gemm / Conv weight. For tests and bench. */
extern int oq_exec_no_pack;
/* QuantizeLinear float32 -> int8/uint8 and DequantizeLinear int8/uint8 -> float32 with one scale
 * per row: 1 (default) the CPU's best vector loops (AVX-512, else AVX2), 2 at most AVX2, 0 the
 * portable loops (tests compare them). */
extern int oq_quant_simd;
/* float32 Add/Sub/Mul/Div rows and Clip/Relu: 1 (default) the CPU's best vector loops (AVX-512, else
 * AVX2), 2 at most AVX2, 0 the portable loops (tests compare them). */
extern int oq_elementwise_simd;

/* The kernel for (op, opset), or NULL. */
oq_kernel_fn oq_kernel_find(oq_op op, int64_t opset);

#endif
