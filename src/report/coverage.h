/*
 * coverage.h - what a runtime makes of a quantized model: which node units
 * it runs as integer kernels, which it leaves in float and why, the share of
 * multiply-accumulates in integer kernels (`onnxq check --target`, the
 * `quantize` summary), and an expected-time model of ONNX Runtime's CPU
 * kernels that runtime-aware placement (src/pipeline/placement.c) weighs
 * its choices with.
 *
 * ONNX Runtime (target "ort"): the rules of its QDQ selectors
 * (onnxruntime/core/optimizer/qdq_transformer/selectors_actions/
 * qdq_selectors.cc, qdq_selector_action_transformer.cc, the CPU contrib
 * QLinear* kernels): a node unit is DequantizeLinear on every float input,
 * the target node, and QuantizeLinear as the only reader of its output (no
 * graph output) - Conv -> QLinearConv (8-bit data and weights, int32 bias),
 * MatMul -> QLinearMatMul (or MatMulIntegerToFloat without the Q), Gemm ->
 * QGemm, Add / Mul -> QLinearAdd / QLinearMul (8-bit, all types equal),
 * Sigmoid, LeakyRelu, Softmax, AveragePool, GlobalAveragePool, Concat ->
 * their QLinear* kernels; Reshape, Transpose, Squeeze, Unsqueeze, Flatten,
 * Slice, Gather, Split, MaxPool, Resize run on the 8-bit data when input and
 * output share scale and zero point; a Relu / Clip between the target and
 * its Q is dropped when the Q's range lies inside it. Anything else runs in
 * float on dequantized values. 16-bit, 4-bit and float8 activations form no
 * integer unit. TensorRT (target "trt", lint only: nothing here runs
 * TensorRT): Q/DQ on the inputs of Conv / ConvTranspose / Gemm / MatMul with
 * a DQ'd weight make an integer layer, activations after them are fused by
 * the builder; per-tensor activation scales; int8 or float8e4m3fn.
 *
 * MACs come from shapes measured by running the model (oq_value_sizes):
 * Conv  out_elems * (C_in / group) * prod(kernel), ConvTranspose
 * in_elems * (C_out / group) * prod(kernel), MatMul / Gemm out_elems * K.
 */
#ifndef OQ_COVERAGE_H
#define OQ_COVERAGE_H

#include <stdio.h>

#include "src/ir/ir.h"

/* Runtimes the coverage knows. */
enum {
	OQ_TARGET_ORT = 0,   /* ONNX Runtime, CPU execution provider */
	OQ_TARGET_TRT,       /* TensorRT (explicit quantization), lint only */
};

/* ---- expected time of ONNX Runtime CPU kernels ---- */

/*
 * Nanoseconds one kernel of ONNX Runtime 1.30 takes on one thread of an
 * x86-64 AVX-512 VNNI core (bench/ort_speed.sh, enableProfiling on the
 * corpus, float and quantized): a fixed cost per kernel call plus a cost
 * per multiply-accumulate or element. Float convolutions run in the NCHWc
 * layout; QLinearConv beats them on dense convolutions (VNNI), matches them
 * on 3x3 depthwise ones and loses on larger depthwise kernels and on stems
 * whose reduction (input channels per group x kernel taps) is under 32.
 * Estimates to rank placements, not predictions of a run.
 */
enum {
	OQ_ORT_EW_FLOAT = 0, /* a float elementwise op (Add, Mul, Div, Clip, Sigmoid, ...) */
	OQ_ORT_EW_QBINARY,   /* QLinearAdd / QLinearMul */
	OQ_ORT_EW_QUNARY,    /* QLinearSigmoid / QLinearLeakyRelu (table lookup) */
	OQ_ORT_EW_Q,         /* QuantizeLinear (float -> 8 bit) */
	OQ_ORT_EW_DQ,        /* DequantizeLinear (8 bit -> float) */
};
double oq_ort_elementwise_ns(int kind, double elems);
/* A Conv node of g (weight an initializer), `out_elems` output elements; 0 when n is no such conv. */
double oq_ort_conv_ns(const oq_graph *g, const oq_node *n, double out_elems, int int8);
/* A MatMul / Gemm of `macs` multiply-accumulates. */
double oq_ort_matmul_ns(double macs, int int8);

/*
 * Does ONNX Runtime's QDQ fusion take node n of g, with float8 data, into a node unit? Its
 * selectors do not check for float8, so the unit becomes an 8-bit-only kernel (QLinearConv,
 * Transpose on the quantized data, ...) and the session fails to load: the quantize pass breaks
 * such units up (profile ORT with float8 activations).
 */
int oq_ort_fuses_float8(const oq_graph *g, const oq_node *n);

/* Ops ONNX Runtime runs on 8-bit data between a DQ and a Q of equal parameters (Reshape,
 * Transpose, Squeeze, Unsqueeze, Flatten, Slice, Gather, MaxPool, Resize, Expand, Tile,
 * GatherElements; Split has its own selector). */
int oq_ort_movement(const oq_node *n);

/* ---- shapes, MACs ---- */

/*
 * Element counts of the main graph's values from one run: sizes[v->index]
 * (g->n_values entries; -1 when the run did not produce it). Filled by the
 * pipeline layer (oq_value_sizes_measure, src/pipeline/placement.h).
 */
typedef struct oq_value_sizes {
	int64_t *n;          /* per value index: elements */
	int64_t *last;       /* per value index: the last dimension (a MatMul's K), -1 unknown */
	size_t count;        /* entries */
} oq_value_sizes;

void oq_value_sizes_free(oq_value_sizes *s);

/* Multiply-accumulates of a Conv / ConvTranspose / MatMul / Gemm node from sizes; -1 unknown. */
double oq_node_macs(const oq_graph *g, const oq_node *n, const oq_value_sizes *s);

/* ---- coverage of a quantized model ---- */

/* One compute node (Conv, ConvTranspose, MatMul, Gemm), or an op between a DQ and a Q, and its fate. */
typedef struct oq_cov_node {
	const oq_node *node;
	int integer;         /* 1: the runtime runs it in an integer kernel */
	int quantized;       /* a DequantizeLinear feeds it and a QuantizeLinear reads it */
	double macs;         /* Conv/ConvTranspose/MatMul/Gemm; -1 unknown; 0 for other ops */
	const char *kernel;  /* what it becomes: "QLinearConv", "float Conv", ... */
	const char *reason;  /* why not integer ("no QuantizeLinear after the Conv", ...); NULL when integer */
} oq_cov_node;

typedef struct oq_coverage {
	int target;          /* OQ_TARGET_* */
	oq_cov_node *v;      /* compute nodes and quantized ops, graph order */
	size_t n;
	double macs_total, macs_integer; /* over compute nodes with known MACs */
	size_t n_compute, n_compute_integer; /* compute nodes */
	size_t n_qdq_float;  /* quantized ops the runtime runs in float (each with a reason) */
	int macs_known;      /* every compute node's MACs known (else shares count nodes) */
} oq_coverage;

/* Analyses m's main graph for target; sizes may be NULL (MACs unknown). */
int oq_coverage_analyze(const oq_model *m, int target, const oq_value_sizes *sizes, oq_coverage *out) OQ_WUR;
void oq_coverage_free(oq_coverage *c);
/* Text: the share line and one line per quantized op left in float (verbose: every compute node). */
void oq_coverage_print(const oq_coverage *c, FILE *f, int verbose);
/* JSON object (no trailing newline). */
void oq_coverage_json(const oq_coverage *c, FILE *f);

#endif
