/*
 * qweight.h - quantizing constant tensors: weights (per tensor, per axis,
 * blocked; int8/uint8/int16/int4/uint4), int32 biases, and the
 * initializer + DequantizeLinear rewrite that stores them.
 *
 * Used by the quantize pass (placement, quantize.c) and by weight-only mode
 * (weight_only.c). The scale/zero-point formulas live in src/quant/qparams.h.
 */
#ifndef OQ_QWEIGHT_H
#define OQ_QWEIGHT_H

#include "passes/pass.h"

/* How one weight tensor is quantized. */
typedef struct oq_wspec {
	int dtype;           /* OQ_DT_INT8, UINT8, INT16, UINT16, INT4, UINT4, FLOAT8E4M3FN */
	int axis;            /* per axis: the channel axis; blocked: the reduction axis; -1: per tensor */
	int64_t block_size;  /* > 0: blocked along `axis` (opset 21), partial last block allowed */
	int symmetric;       /* 1: symmetric grid (zero point 0, or the mid-point for unsigned types) */
	int sym_grid;        /* OQ_GRID_NARROW / OQ_GRID_FULL for symmetric signed types */
	int reduce_range;    /* 7-bit range (ORT --reduce-range) */
	int mse;             /* 1: per group, the clipped range with the least squared error
			      * (--weight-method mse); 0: min/max */
	const float *fixed_scale; /* n_fixed given scales (one per group, in the scale tensor's
				   * order) instead of computed ones, e.g. imported encodings */
	const int64_t *fixed_zp;  /* their zero points */
	size_t n_fixed;           /* 0: compute the parameters */
	const uint8_t *round_up;  /* learned rounding (calib/rounding): per element, 1 rounds x / scale
				   * up, 0 down (q = floor(x / scale) + round_up + zp, saturated);
				   * valid with the fixed scales it was learned on: a group whose scale
				   * the int32-bias rule enlarges rounds to nearest. NULL: nearest */
	size_t n_round_up;        /* its length: the weight's element count */
} oq_wspec;

/*
 * Quantizes the float initializer w. *q: integer tensor of w's dims (4-bit
 * packed two per byte, low nibble first); *scale: float32, a scalar for
 * per tensor, [C] for per axis, w's rank with ceil(D/B) on `axis` for
 * blocked; *zp: same shape as scale, dtype s->dtype. Owned by the caller.
 * float8e4m3fn: symmetric only (scale = amax/448, zero point +0), per
 * tensor or per axis (OQ_EUSAGE otherwise), values x / scale rounded to
 * the E4M3FN grid and saturated (QuantizeLinear saturate=1).
 * With s->mse each group's range is the one of
 *   symmetric: [f min, f max], f = 1 - k/100, k = 0..99;
 *   asymmetric: the same, then the upper end f max (lower end kept), then
 *     the lower end f min (upper end kept), k = 0..99 each;
 * with the least sum of (x - dequantize(quantize(x)))^2 over the group on
 * its actual grid (ties keep the wider range; k = 0 is min/max).
 */
int oq_weight_quantize(const oq_tensor *w, const oq_wspec *s, oq_tensor **q, oq_tensor **scale,
		       oq_tensor **zp, oq_diag *d) OQ_WUR;

/*
 * The values a DequantizeLinear of oq_weight_quantize's result gives,
 * (q - zp) * scale in float32, into out[w->nelem]: the weight the quantized
 * model computes with (bias correction measures W_q - W with it). The
 * int32-bias overflow rule of oq_weight_insert_dq, which may enlarge a
 * channel's scale, is not applied.
 */
int oq_weight_fake_quantize(const oq_tensor *w, const oq_wspec *s, float *out, oq_diag *d) OQ_WUR;

/*
 * Replaces input `w_idx` of node n (a float initializer) by an integer
 * initializer and a DequantizeLinear whose output n reads from then on.
 * With b_idx >= 0 and in_scale > 0 the bias (input b_idx, a float
 * initializer) becomes int32 with scale in_scale * w_scale[c] * beta
 * (per-channel when the weight is) and zero point 0, behind its own DQ;
 * when a bias would overflow int32 the weight scale of that channel is
 * enlarged until it fits. A weight or bias that other nodes also read is
 * copied, never changed under them; one that nothing reads any more is
 * left for oq_graph_drop_unused_inits (the pass driver runs it after every
 * pass, so the file shrinks; one batch keeps the cost linear). Names: <w>_quantized, <w>_scale,
 * <w>_zero_point, <w>_DequantizeLinear_Output (made unique).
 * A weight already quantized to identical tensors by an earlier call (a
 * shared weight) reuses that DequantizeLinear. Blocked weights leave the
 * bias float (no per-channel weight scale); so does a per-axis weight whose
 * bias is not 1-D [C], beta <= 0, and a float8e4m3fn weight (as TensorRT:
 * FP8 layers add a float bias). The weight must satisfy
 * oq_weight_quantizable (else OQ_EUNSUP); the model's opset must be >= 13
 * for an axis, >= 19 for float8e4m3fn, >= 21 for block_size or 16/4-bit types (else OQ_EUNSUP
 * naming the node). Uses stay usable without a rebuild: the new DQ, its
 * inputs and output and the rewired inputs of n are entered; the replaced
 * weight and bias keep stale entries for n until the next rebuild. The DQ is
 * appended (toposort after).
 */
int oq_weight_insert_dq(oq_graph *g, oq_node *n, int w_idx, int b_idx, float in_scale, float beta,
			const oq_wspec *s, oq_diag *d) OQ_WUR;

/*
 * The grid spec s gives w, for learned rounding: per group the range, scale and zero point
 * oq_weight_quantize starts from (--weight-method mse and fixed scales applied; before the
 * int32-bias rule), each element's group and [qmin, qmax]. OQ_EUNSUP for float8e4m3fn (no
 * integer grid to round on). Free with oq_wgrid_free.
 */
typedef struct oq_wgrid {
	size_t ngroups;
	float *mn, *mx;      /* per group: the range the scale came from */
	float *scale;        /* per group */
	int64_t *zp;         /* per group */
	size_t *group;       /* per element of w: its group */
	int64_t qmin, qmax;  /* the grid */
	int form;            /* OQ_QP_* (src/quant/qparams.h): how a range becomes a scale */
} oq_wgrid;
int oq_weight_grid(const oq_tensor *w, const oq_wspec *s, oq_wgrid *g, oq_diag *d) OQ_WUR;
void oq_wgrid_free(oq_wgrid *g);

/* A weight's learned quantization (calib/rounding), applied by oq_wlearned_apply. */
typedef struct oq_wlearned {
	char *name;          /* the weight initializer */
	oq_wspec spec;       /* the spec it was learned for (its pointers are not owned) */
	float *scale;        /* per group of that spec: the scale chosen (seq-mse) or the grid's */
	int64_t *zp;         /* per group */
	size_t ngroups;
	uint8_t *up;         /* per element: the rounding direction (adaround), or NULL: nearest */
	size_t nelem;
} oq_wlearned;

/* Learned weights of one model, by weight name (oq_opts.learned). */
typedef struct oq_wlearned_set {
	oq_wlearned *v;
	size_t n;
} oq_wlearned_set;

void oq_wlearned_free(oq_wlearned_set *set);
/*
 * When set (may be NULL) holds weight `name` learned with a spec equal to *s (type, axis,
 * blocks, grid, method, fixed scales), makes *s use it: fixed scales and zero points, and the
 * rounding directions when learned. Otherwise *s is left as it is (round to nearest).
 */
void oq_wlearned_apply(const oq_wlearned_set *set, const char *name, oq_wspec *s);

/* 1 when v is a float32 initializer of its own graph (not a graph input, not captured from an
 * enclosing graph): what oq_weight_insert_dq accepts. float16/bfloat16 weights are not: their
 * consumer computes in that type while DQ would output float32. Callers log and skip. */
int oq_weight_quantizable(const oq_value *v);

/*
 * When input idx of node n of body b reads an enclosing graph's float32 initializer (a capture;
 * not a graph input), b gets its own copy under a fresh name and every reader in b reads it (uses
 * of b must be current), so the weight and its DequantizeLinear live in b. The capture, left
 * without readers, stops being one; the enclosing initializer goes when nothing else reads it.
 * OQ_OK without a change otherwise.
 */
int oq_weight_localize(oq_graph *b, oq_node *n, int idx, oq_diag *d) OQ_WUR;

/* Gives back the pages of a tensor borrowed from one of m's read-only file mappings
 * (madvise MADV_DONTNEED on the page-aligned range); no-op for owned data. */
void oq_weight_release_pages(const oq_model *m, const oq_tensor *t);

/* What the quantize pass will do with one node's weight. */
typedef struct oq_wplan {
	oq_node *node;       /* Conv, ConvTranspose, Gemm or MatMul */
	int w_idx;           /* its weight input */
	int b_idx;           /* its bias input index (-1: the op has none: MatMul) */
	oq_wspec spec;       /* how the weight is quantized */
} oq_wplan;

/*
 * The weights the quantize pass (profile, --include/--exclude, overrides;
 * not --weight-only, which plans nothing) will quantize in g, in node order:
 * *out (free()) gets one entry per weight. Bad --include/--exclude names
 * are OQ_EUSAGE as in the pass.
 */
int oq_quantize_weight_plans(oq_graph *g, const oq_opts *o, oq_wplan **out, size_t *n_out, oq_diag *d) OQ_WUR;

/* The weights weight-only mode (the options of o; not the quantize pass') quantizes in g, as
 * oq_quantize_weight_plans lists them (b_idx -1: weight-only leaves biases float). */
int oq_weight_only_plans(oq_graph *g, const oq_opts *o, oq_wplan **out, size_t *n_out, oq_diag *d) OQ_WUR;

/* Weight-only mode (--weight-only): DQ on the weights of the selected op types, nothing else. */
int oq_quantize_weight_only(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;

#endif
