/*
 * pass.h - graph passes and the options that steer them.
 *
 * A pass is one file with one entry point of type oq_pass_fn. It rewrites
 * the main graph of g->model in place (collect first, then mutate; mark
 * nodes dead and let oq_graph_sweep free them), reports through `d`, and
 * sets *changed when it changed anything. The driver (passes.c) owns the
 * table, rebuilds uses and restores topological order after each pass,
 * runs the verifier between passes when asked (tests, debug builds) and
 * can dump the graph after a named pass.
 *
 * Quantization hints: `fuse` does not change what a float model computes;
 * it marks values and nodes (qmark, OQ_QM_*) so that `quantize` knows
 * which tensors are inside a unit (never quantized) and which activations
 * it may drop once a Q with the post-activation range replaces them.
 */
#ifndef OQ_PASS_H
#define OQ_PASS_H

#include <stdio.h>

#include "src/ir/ir.h"
#include "src/quant/ranges.h"

/* Value and node marks (oq_value.qmark / oq_node.qmark). */
enum {
	OQ_QM_INTERNAL = 1,  /* value: inside a fused unit: never gets a Q/DQ */
	OQ_QM_ACT = 2,       /* node: Relu/Clip/LeakyRelu fused onto its producer; quantize
			      * may remove it when the output Q reproduces it (asymmetric acts) */
	OQ_QM_UNIT_OUT = 4,  /* value: output of a fused unit (gets the unit's one Q/DQ) */
	OQ_QM_SPLIT = 8,     /* value: input x of an activation unit (HardSwish, SiLU, ...) that a
			      * Conv/Gemm/MatMul writes, not fused with it (runtime-aware placement):
			      * x gets its own Q so ONNX Runtime runs the producer as an integer
			      * kernel, and the activation's ops run on their own */
};

/* Quantization profiles: where Q/DQ pairs go (REFERENCE.md section 3). */
enum {
	OQ_PROFILE_ORT = 0,  /* ONNX Runtime's QDQ layout (default) */
	OQ_PROFILE_TRT,      /* TensorRT/ModelOpt: symmetric int8, Q/DQ on inputs of fusible ops */
};

/*
 * Placement preference (--prefer), profile ORT. Accuracy-first: an activation
 * unit after a Conv/Gemm/MatMul (a decomposed HardSwish, SiLU, a HardSigmoid
 * gate, ...) stays float with the Conv between one DQ and one Q, as one
 * runtime kernel would run it, and every op of the table is quantized
 * (onnxq's placement before runtime awareness). Runtime-aware (speed,
 * balanced): a Q after the producer, which ONNX Runtime then runs as its
 * integer kernel (QLinearConv), the activation's ops each in their integer
 * kernel, Q/DQ only where ONNX Runtime fuses them; the placement
 * (src/pipeline/placement.h) leaves whole units float (o->float_nodes) where
 * its cost model finds float faster (speed and balanced) or where integer
 * costs measured fidelity (balanced).
 */
enum {
	OQ_PREFER_BALANCED = 0, /* default */
	OQ_PREFER_SPEED,
	OQ_PREFER_ACCURACY,
};


/* Weight granularity. */
enum {
	OQ_GRAN_CHANNEL = 0, /* per output channel (default) */
	OQ_GRAN_TENSOR,
	OQ_GRAN_BLOCK,
};

/* Symmetric grids for signed types. */
enum {
	OQ_GRID_NARROW = 0,  /* [-127,127], scale = absmax/127 (ORT, TensorRT; default) */
	OQ_GRID_FULL,        /* [-128,127], scale = max(max/127, -min/128) (AIMET) */
};

/* How weight ranges are chosen (--weight-method). */
enum {
	OQ_WMETHOD_MINMAX = 0, /* min/max of each channel/block/tensor (default) */
	OQ_WMETHOD_MSE,        /* the clipped range with the least squared error on the weight's grid */
};

/* How weights are rounded onto their grid (--weight-rounding; calib/rounding/rounding.h). */
enum {
	OQ_WROUND_NEAREST = 0, /* round to nearest, ties to even (default) */
	OQ_WROUND_ADAROUND,    /* per element up/down learned on calibration inputs (AdaRound) */
	OQ_WROUND_SEQMSE,      /* per channel/block scale searched on calibration inputs (sequential MSE) */
};

/* Per-tensor / per-node settings from --overrides FILE.json (quantize pass). */
typedef struct oq_override {
	char *name;          /* tensor (value) name or node name */
	int is_node;         /* 1: applies to the node's weight and output */
	int skip;            /* 1: do not quantize */
	int dtype;           /* oq_dtype, 0 = default */
	int symmetric;       /* -1 default, 0/1 */
	int granularity;     /* -1 default, OQ_GRAN_* */
	int axis;            /* per-axis axis, INT32_MIN = default */
	int64_t block_size;  /* 0 = default */
	int has_range;       /* fixed [min,max] instead of calibration */
	float min, max;
	int has_qparams;     /* fixed scale / zero point */
	float scale;
	int64_t zero_point;
	/* a weight's fixed quantization parameters, one per group (per tensor 1, per channel C,
	 * blocks in the scale tensor's order), e.g. imported encodings; owned; n_wq 0: none */
	float *w_scale;
	int64_t *w_zp;
	size_t n_wq;
} oq_override;

/* Options shared by the passes (the `onnxq quantize` / `convert` command line). */
typedef struct oq_opts {
	/* upgrade-opset */
	int64_t opset;       /* --opset N, 0: the lowest the quantization needs, at least 13 */
	/* fuse / quantize */
	int profile;         /* OQ_PROFILE_* */
	int keep_activations;/* --keep-activations: never remove a fused Relu/Clip */
	int prefer;          /* OQ_PREFER_* (--prefer), profile ORT only */
	const char *const *float_nodes; /* runtime-aware placement: names of nodes left float (their
			      * weights too), sorted by strcmp; set by src/pipeline/placement.c */
	size_t n_float_nodes;
	int weight_type;     /* oq_dtype of weights: INT8 (default), UINT8, INT4, UINT4, INT16,
			      * FLOAT8E4M3FN */
	int act_type;        /* oq_dtype of activations: UINT8 (default), INT8, UINT16, INT16,
			      * FLOAT8E4M3FN */
	int weight_method;   /* OQ_WMETHOD_* */
	int granularity;     /* OQ_GRAN_* */
	int64_t block_size;  /* --block-size, for OQ_GRAN_BLOCK (default 32 when 0) */
	int sym_grid;        /* OQ_GRID_* for symmetric signed weights */
	int weight_asym;     /* --weight-asymmetric */
	int act_sym;         /* OQ_ACT_* (qparams.h): --act-symmetric[=unsigned]; FP8 forces OQ_ACT_SYM */
	int reduce_range;    /* --reduce-range: 7-bit weights (ORT) */
	int weight_only;     /* --weight-only: weights get a DQ, activations stay float */
	const char *const *op_types; /* --op-types: op types whose weights are quantized (weight-only); NULL = default */
	size_t n_op_types;
	const char *const *include;  /* --include NAME|OPTYPE (node names, op types, tensor names) */
	size_t n_include;
	const char *const *exclude;  /* --exclude NAME|OPTYPE */
	size_t n_exclude;
	const oq_override *overrides; /* --overrides FILE.json, parsed */
	size_t n_overrides;
	const oq_ranges *ranges;     /* calibrated activation ranges (quantize); NULL in weight-only */
	int cle;             /* --cle: run the cle pass (cross-layer equalization) */
	int weight_rounding; /* OQ_WROUND_*: --weight-rounding (learned before quantize, calib/rounding) */
	int awq;             /* --awq: weight-only layers' input channels scaled on the calibration
			      * samples before the rounding (calib/rounding/awq.h) */
	const struct oq_wlearned_set *learned; /* its result: weights with learned scales / rounding
			      * (passes/quantize/qweight.h), or NULL: round to nearest */
	FILE *log;           /* verbose notes (what a pass did), or NULL */
} oq_opts;

/* Fills the defaults listed above. */
void oq_opts_init(oq_opts *o);

/*
 * Does o ask for the runtime-aware placement? Profile ORT, --prefer speed or balanced, and types
 * ONNX Runtime has integer kernels for: 8-bit activations and per-channel or per-tensor 8-bit
 * weights (16-bit, 4-bit, float8 and blocked weights form no integer unit: those keep the
 * accuracy-first placement), not --weight-only.
 */
int oq_runtime_aware(const oq_opts *o);


typedef int (*oq_pass_fn)(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed);

/* One entry of the pass table. */
typedef struct oq_pass {
	const char *name;    /* as on the command line: "fold-bn" */
	oq_pass_fn fn;
	const char *help;    /* one line for --help and the README */
	int (*wanted)(const oq_opts *o); /* opt-in passes: runs without --passes only when this
					  * says so (NULL: always) */
} oq_pass;

/* The passes, in the order the pipeline runs them. */
extern const oq_pass oq_passes[];
extern const size_t oq_n_passes;
const oq_pass *oq_pass_find(const char *name);

/* The pass entry points (one per file in passes/). */
int oq_pass_cleanup(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;
int oq_pass_upgrade_opset(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;
int oq_pass_fold_bn(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;
int oq_pass_cle(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;
int oq_pass_fuse(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;
/*
 * The interval [*lo, *hi] outside which changing x changes no output of x's consumers: all its
 * readers form one activation unit that is flat there (HardSwish and x * HardSigmoid(x): below
 * -3 / -beta/alpha; a HardSigmoid gate: outside [-beta/alpha, (1-beta)/alpha]; SiLU: below the
 * point where |x * sigmoid(x)| < y_step / 2, y_step = (range of the unit's output in r) / levels,
 * levels = qmax - qmin of its grid: a bound within half a step of that grid, not exact). -inf / +inf
 * when unbounded; 0 when x's readers are no such unit. The quantize pass clamps x's calibrated
 * range to it when the unit is split: saturating x there costs nothing and the grid is finer.
 */
int oq_fuse_input_bounds(const oq_graph *g, const oq_value *x, const oq_ranges *r, double levels, double *lo,
			 double *hi);
int oq_pass_quantize(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed) OQ_WUR;
/*
 * Decision-safe placement (passes/quantize/decision.c): keep[v->index] = 1 (g->n_values entries,
 * zeroed by the caller) for every main-graph value whose quantization could change a discrete
 * decision: the compared inputs of comparisons and selections, what they read through
 * order-preserving ops, a Cast of a boolean. Returns how many; each is named on log when given.
 */
size_t oq_decision_safe_values(const oq_graph *g, uint8_t *keep, FILE *log);

/* The lowest opset the quantization o asks for needs (options and overrides); *why names the
 * feature that needs it. upgrade-opset targets it (at least 13), quantize checks it. */
int64_t oq_quantize_opset_need(const oq_opts *o, const char **why);

/*
 * The activation grid the quantize pass gives value v when node `prod` (NULL for a graph input)
 * writes its Q: *dtype and *act_sym (OQ_ACT_*) from the profile (trt: symmetric int8), then
 * --act-type / --act-symmetric, prod's node override, v's tensor override ("symmetric": true
 * keeps the global symmetric kind; FP8 is always symmetric). OQ_EUSAGE naming v for a grid that
 * cannot be: FP8 with "symmetric": false, a type without an activation grid, unsigned symmetric
 * on a signed type. The one resolution both the quantize pass and calibration (whose range
 * methods aim at the grid, through the pipeline) use.
 */
int oq_quantize_act_grid(const oq_opts *o, const oq_value *v, const oq_node *prod, int *dtype,
			 int *act_sym, oq_diag *d) OQ_WUR;

/*
 * The node whose override sets v's grid (its `prod` above): v's producer, except for the
 * output of a Relu/Clip that fuse marked removable (OQ_QM_ACT) when the quantize pass folds it
 * into its input's producer, which then writes v and its Q (asymmetric grids; the pass' other
 * conditions, node selection and a range inside the activation's bounds, are not checked: a
 * Relu's or Clip(0, hi)'s calibrated range always is).
 */
const oq_node *oq_quantize_grid_node(const oq_opts *o, const oq_value *v);

/*
 * need[i] (g->n_values entries) = 1 for the main-graph values whose calibrated range the
 * quantize pass with options o reads, else 0: the activations that get their own Q (after
 * --include/--exclude, overrides and the profile), not those that share their input's
 * parameters (Reshape, pooling, ...), take a fixed [0, 1] (Softmax) or an override's range or
 * parameters. Calibration keeps histograms for these only. Bad --include/--exclude names are
 * OQ_EUSAGE, as in the pass.
 */
int oq_quantize_range_needs(oq_graph *g, const oq_opts *o, uint8_t *need, oq_diag *d) OQ_WUR;
/*
 * Does some value If/Loop/Scan body b defines (not one it captures) have a range in r? The
 * quantize pass keeps a body float when not: it never ran during calibration (an If branch no
 * sample took).
 */
int oq_quantize_body_observed(const oq_ranges *r, const oq_graph *b);

/*
 * Stores `data` (float32, dims) as input idx of n (idx may be past n's last
 * input: the input is added): replaced in place when n is the value's only
 * live reader and the value is private (not a graph input/output, not
 * captured), else as a new initializer named after the old one (or `base`).
 * Uses must be current; they are rebuilt. Shared by fold-bn and bias
 * correction.
 */
int oq_pass_set_const(oq_graph *g, oq_node *n, size_t idx, const char *base, int rank, const int64_t *dims,
		      const float *data) OQ_WUR;

/* Which passes run and what the driver does between them. */
typedef struct oq_pass_run {
	const char *list;    /* --passes a,b: exactly these, in table order; NULL = all */
	const char *const *disabled; /* --no-PASS names */
	size_t n_disabled;
	int verify;          /* run `check` after every pass (tests, debug builds, ONNXQ_VERIFY=1) */
	const char *dump_after; /* --dump-after NAME */
	FILE *dump;          /* where the dump goes (stderr when NULL) */
	const char *stage;   /* a pipeline stage's passes (oq_passes_rewrite, oq_passes_quantize):
			      * only the selected passes in this list run; NULL = all */
} oq_pass_run;

/* The pipeline's two stages: the rewrites before calibration, and quantize after it. */
extern const char oq_passes_rewrite[];
extern const char oq_passes_quantize[];

/* Does r select pass `name` (--passes, --no-PASS; r->stage aside)? */
int oq_pass_selected(const oq_pass_run *r, const char *name);

/*
 * Runs the selected passes (of r->stage) over m's main graph, in table
 * order. Unknown pass names are OQ_EUSAGE naming the pass and listing the
 * valid ones.
 */
int oq_passes_run(oq_model *m, const oq_pass_run *r, const oq_opts *o, oq_diag *d) OQ_WUR;

/* Readable text dump of a graph (one line per node, with qmarks). */
void oq_graph_dump(const oq_graph *g, FILE *f);

#endif
