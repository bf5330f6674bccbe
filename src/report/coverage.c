/*
 * coverage.c - which node units a runtime runs as integer kernels, and the
 * expected time of ONNX Runtime's CPU kernels (coverage.h has the rules and
 * where they come from).
 *
 * The analysis walks the main graph once: for every node it finds the
 * DequantizeLinear nodes feeding it and the QuantizeLinear nodes reading
 * it, applies the target's unit rule and records the kernel it becomes or
 * the first reason it does not. Compute nodes (Conv, ConvTranspose, MatMul,
 * Gemm) are always listed with their MACs; other ops only when a Q or DQ
 * touches them (a quantized op), so the list names every place where
 * quantization costs time without buying an integer kernel.
 */
#include "src/report/coverage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "src/ir/dtype.h"

/* ------------------------------------------------------------ cost model */

/* Per kernel call and per element, ns (coverage.h). */
static const struct {
	double call, per;
} ew_cost[] = {
	[OQ_ORT_EW_FLOAT] = {4000, 0.25},
	[OQ_ORT_EW_QBINARY] = {6000, 0.20},
	[OQ_ORT_EW_QUNARY] = {6000, 0.27},
	[OQ_ORT_EW_Q] = {4000, 0.32},
	[OQ_ORT_EW_DQ] = {3000, 0.25},
};

double oq_ort_elementwise_ns(int kind, double elems)
{
	if (kind < 0 || kind > OQ_ORT_EW_DQ || !(elems >= 0))
		return 0;
	return ew_cost[kind].call + ew_cost[kind].per * elems;
}

/* Conv kinds of the cost table. */
enum { CONV_DENSE = 0, CONV_DW3, CONV_DWK, CONV_STEM, CONV_KINDS };

/*
 * ns per call and per MAC, [kind][int8], fitted to per-node kernel times (enableProfiling) of the
 * corpus in float and quantized, where each Conv runs inside its model's chain: QLinearConv is
 * much cheaper per MAC than the float Conv on dense convolutions, about even on 3x3 depthwise
 * ones, and dearer on larger depthwise kernels (5x5) and on spatial stems whose reduction (input
 * channels per group x kernel taps) is under 32 (a 3x3 stem on 3 channels: the im2col rows leave
 * the integer GEMM's wide dot products idle; a 7x7 stem, 147, and 1x1 convolutions on few
 * channels do not).
 */
static const double conv_call[CONV_KINDS][2] = {
	[CONV_DENSE] = {5000, 9000},
	[CONV_DW3] = {5000, 9000},
	[CONV_DWK] = {5000, 20000},
	[CONV_STEM] = {5000, 20000},
};
static const double conv_per_mac[CONV_KINDS][2] = {
	[CONV_DENSE] = {0.020, 0.0055},
	[CONV_DW3] = {0.030, 0.028},
	[CONV_DWK] = {0.028, 0.085},
	[CONV_STEM] = {0.028, 0.045},
};

double oq_ort_conv_ns(const oq_graph *g, const oq_node *n, double out_elems, int int8)
{
	const oq_tensor *w;
	int64_t group = oq_node_attr_int(n, "group", 1), cin_g, taps = 1;
	int kind;

	if (!oq_node_is(n, OQ_OP_Conv) || n->n_inputs < 2 || !(w = oq_value_const(g, n->inputs[1])) ||
	    w->rank < 3 || !(out_elems >= 0) || group < 1)
		return 0;
	cin_g = w->dims[1];
	for (int k = 2; k < w->rank; k++)
		taps *= w->dims[k];
	kind = group > 1 && cin_g == 1 ? (taps <= 9 ? CONV_DW3 : CONV_DWK)
	       : taps > 1 && cin_g * taps < 32 ? CONV_STEM
					       : CONV_DENSE;
	return conv_call[kind][int8 != 0] + conv_per_mac[kind][int8 != 0] * out_elems * (double)(cin_g * taps);
}

double oq_ort_matmul_ns(double macs, int int8)
{
	if (!(macs >= 0))
		return 0;
	return (int8 ? 6000 : 3000) + (int8 ? 0.008 : 0.025) * macs;
}

/* ------------------------------------------------------------ MACs */

void oq_value_sizes_free(oq_value_sizes *s)
{
	free(s->n);
	free(s->last);
	s->n = s->last = NULL;
	s->count = 0;
}

/*
 * The entry of v in s, or of the value it stands for across Q/DQ (the quantized model's
 * DequantizeLinear and QuantizeLinear outputs, and a producer's renamed graph output, are new
 * values of the same shape); SIZE_MAX when none is known.
 */
static size_t entry_of(const oq_value_sizes *s, const oq_value *v, int depth)
{
	const oq_node *p;
	if (!s || !v || depth > 4)
		return SIZE_MAX;
	if (v->index < s->count && s->n[v->index] >= 0)
		return v->index;
	p = v->producer;
	if (p && (oq_node_is(p, OQ_OP_DequantizeLinear) || oq_node_is(p, OQ_OP_QuantizeLinear)) && p->n_inputs)
		return entry_of(s, p->inputs[0], depth + 1);
	if (v->n_uses == 1 && oq_node_is(v->uses[0].node, OQ_OP_QuantizeLinear) && v->uses[0].node->n_outputs) {
		const oq_value *q = v->uses[0].node->outputs[0];
		if (q && q->n_uses == 1 && oq_node_is(q->uses[0].node, OQ_OP_DequantizeLinear))
			return entry_of(s, q->uses[0].node->outputs[0], depth + 1);
	}
	return SIZE_MAX;
}

static double size_of(const oq_value_sizes *s, const oq_value *v)
{
	size_t e = entry_of(s, v, 0);
	return e == SIZE_MAX ? -1 : (double)s->n[e];
}

/* The float weight behind input k of n: an initializer, or a DequantizeLinear of one. */
static const oq_tensor *weight_of(const oq_graph *g, const oq_node *n, size_t k)
{
	const oq_value *v = k < n->n_inputs ? n->inputs[k] : NULL;
	const oq_tensor *t;
	if (!v)
		return NULL;
	if ((t = oq_value_const(g, v)))
		return t;
	if (v->producer && oq_node_is(v->producer, OQ_OP_DequantizeLinear) && v->producer->n_inputs)
		return oq_value_const(g, v->producer->inputs[0]);
	return NULL;
}

double oq_node_macs(const oq_graph *g, const oq_node *n, const oq_value_sizes *s)
{
	const oq_tensor *w;
	double taps = 1;
	int64_t group = oq_node_attr_int(n, "group", 1);

	if (oq_node_is(n, OQ_OP_Conv) || oq_node_is(n, OQ_OP_ConvTranspose)) {
		double e;
		if (!(w = weight_of(g, n, 1)) || w->rank < 3 || group < 1)
			return -1;
		for (int k = 2; k < w->rank; k++)
			taps *= (double)w->dims[k];
		if (oq_node_is(n, OQ_OP_Conv))
			return (e = size_of(s, n->n_outputs ? n->outputs[0] : NULL)) < 0 ? -1
											 : e * (double)w->dims[1] * taps;
		/* ConvTranspose W [C_in, C_out / group, k...]: every input element meets C_out/group x taps */
		return (e = size_of(s, n->inputs[0])) < 0 ? -1 : e * (double)w->dims[1] * taps;
	}
	if (oq_node_is(n, OQ_OP_MatMul) || oq_node_is(n, OQ_OP_Gemm)) {
		double e = size_of(s, n->n_outputs ? n->outputs[0] : NULL), a = size_of(s, n->inputs[0]),
		       kdim;
		const oq_tensor *b = weight_of(g, n, 1);
		if (e < 0)
			return -1;
		if (b && b->rank >= 1) {
			int tb = oq_node_is(n, OQ_OP_Gemm) && oq_node_attr_int(n, "transB", 0);
			kdim = (double)(b->rank == 1 ? b->dims[0] : tb ? b->dims[b->rank - 1] : b->dims[b->rank - 2]);
		} else {
			/* two activations: K is A's last dimension (Gemm: its first with transA) */
			size_t ea = entry_of(s, n->inputs[0], 0);
			if (oq_node_is(n, OQ_OP_Gemm) || a < 0 || ea == SIZE_MAX || s->last[ea] <= 0)
				return -1;
			kdim = (double)s->last[ea];
		}
		return e * kdim;
	}
	return 0;
}

/* ------------------------------------------------------------ coverage */

static int is_q(const oq_node *n)
{
	return oq_node_is(n, OQ_OP_QuantizeLinear);
}

static int is_dq(const oq_node *n)
{
	return oq_node_is(n, OQ_OP_DequantizeLinear);
}

/* The DequantizeLinear writing v, or NULL. */
static const oq_node *dq_of(const oq_value *v)
{
	return v && v->producer && is_dq(v->producer) ? v->producer : NULL;
}

/* The quantized type a DQ reads: its input's initializer, the Q writing it, or the zero point's. */
static int dq_type(const oq_graph *g, const oq_node *dq)
{
	const oq_value *x = dq->n_inputs ? dq->inputs[0] : NULL;
	const oq_tensor *t;
	if (!x)
		return 0;
	if ((t = oq_value_const(g, x)))
		return t->dtype;
	if (x->type.kind == OQ_TYPE_TENSOR && x->type.dtype)
		return x->type.dtype;
	if (x->producer && is_q(x->producer)) {
		const oq_node *q = x->producer;
		if (q->n_inputs >= 3 && q->inputs[2] && (t = oq_value_const(g, q->inputs[2])))
			return t->dtype;
		return OQ_DT_UINT8;
	}
	if (dq->n_inputs >= 3 && dq->inputs[2] && (t = oq_value_const(g, dq->inputs[2])))
		return t->dtype;
	return 0;
}

/* The type a Q writes: its zero point's, uint8 without one. */
static int q_type(const oq_graph *g, const oq_node *q)
{
	const oq_tensor *t;
	if (q->n_inputs >= 3 && q->inputs[2] && (t = oq_value_const(g, q->inputs[2])))
		return t->dtype;
	return OQ_DT_UINT8;
}

static int is8(int dt)
{
	return dt == OQ_DT_UINT8 || dt == OQ_DT_INT8;
}

/* A Q/DQ node's scale is one number. */
static int per_tensor(const oq_graph *g, const oq_node *qdq)
{
	const oq_tensor *s = qdq->n_inputs >= 2 ? oq_value_const(g, qdq->inputs[1]) : NULL;
	return !s || s->nelem == 1;
}

/*
 * The Q that is the only reader of n's output 0 (ORT: the node's output
 * edges are exactly its Q nodes, and it writes no graph output); through a
 * Relu / Clip that is the only reader when `clip`. NULL otherwise.
 */
static const oq_node *q_after(const oq_node *n, int clip)
{
	const oq_value *v = n->n_outputs ? n->outputs[0] : NULL;
	const oq_node *u;
	if (!v || (v->flags & OQ_V_OUTPUT) || v->n_uses != 1)
		return NULL;
	u = v->uses[0].node;
	if (is_q(u))
		return u;
	if (clip && (oq_node_is(u, OQ_OP_Relu) || oq_node_is(u, OQ_OP_Clip)))
		return q_after(u, 0);
	return NULL;
}

/* Same scale and zero point initializers' values in a DQ and a Q (data movement on 8 bits). */
static int same_params(const oq_graph *g, const oq_node *dq, const oq_node *q)
{
	for (size_t k = 1; k < 3; k++) {
		const oq_value *a = k < dq->n_inputs ? dq->inputs[k] : NULL, *b = k < q->n_inputs ? q->inputs[k] : NULL;
		const oq_tensor *ta, *tb;
		if (a == b)
			continue;
		if (!a || !b || !(ta = oq_value_const(g, a)) || !(tb = oq_value_const(g, b)) || ta->dtype != tb->dtype ||
		    ta->nbytes != tb->nbytes || (ta->nbytes && memcmp(ta->data, tb->data, ta->nbytes)))
			return 0;
	}
	return 1;
}

int oq_ort_movement(const oq_node *n)
{
	static const oq_op ops[] = {OQ_OP_Reshape, OQ_OP_Transpose, OQ_OP_Squeeze, OQ_OP_Unsqueeze, OQ_OP_Flatten,
				    OQ_OP_Slice, OQ_OP_Gather, OQ_OP_MaxPool, OQ_OP_Resize, OQ_OP_Expand,
				    OQ_OP_Tile, OQ_OP_GatherElements};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (oq_node_is(n, ops[i]))
			return 1;
	return 0;
}

/* QLinear* unary kernels of ONNX Runtime's CPU provider. */
static const char *ort_unary(const oq_node *n)
{
	return oq_node_is(n, OQ_OP_Sigmoid)             ? "QLinearSigmoid"
	       : oq_node_is(n, OQ_OP_LeakyRelu)         ? "QLinearLeakyRelu"
	       : oq_node_is(n, OQ_OP_Softmax)           ? "QLinearSoftmax"
	       : oq_node_is(n, OQ_OP_AveragePool)       ? "QLinearAveragePool"
	       : oq_node_is(n, OQ_OP_GlobalAveragePool) ? "QLinearGlobalAveragePool"
						      : NULL;
}

static int is_compute(const oq_node *n)
{
	return oq_node_is(n, OQ_OP_Conv) || oq_node_is(n, OQ_OP_ConvTranspose) || oq_node_is(n, OQ_OP_MatMul) ||
	       oq_node_is(n, OQ_OP_Gemm);
}

/* ORT's selectors do not look for float8: they fuse such a unit into a kernel it lacks. */
static const char fp8_fused[] = "float8 data: ONNX Runtime fuses this unit into an 8-bit-only integer kernel, "
				"the model does not load";

/* Why the type of a unit's data keeps ORT's selectors from matching it, or NULL (8-bit, float8). */
static const char *type_reason(int dt)
{
	if (is8(dt) || dt == OQ_DT_FLOAT8E4M3FN)
		return NULL;
	if (dt == OQ_DT_UINT16 || dt == OQ_DT_INT16)
		return "16-bit activations: no integer kernel";
	return "activation type has no integer kernel";
}

/* ORT's verdict on node n: *kernel and NULL, or the reason it runs in float. */
static const char *ort_rule(const oq_graph *g, const oq_node *n, const char **kernel)
{
	const oq_node *dq0 = n->n_inputs ? dq_of(n->inputs[0]) : NULL, *q;
	int dt = dq0 ? dq_type(g, dq0) : 0;
	const char *why;

	*kernel = NULL;
	if (oq_node_is(n, OQ_OP_ConvTranspose))
		return "ONNX Runtime (CPU) has no integer ConvTranspose";
	if (oq_node_is(n, OQ_OP_Conv) || oq_node_is(n, OQ_OP_MatMul) || oq_node_is(n, OQ_OP_Gemm)) {
		const oq_node *dq1 = n->n_inputs > 1 ? dq_of(n->inputs[1]) : NULL;
		const oq_tensor *wf = n->n_inputs > 1 ? oq_value_const(g, n->inputs[1]) : NULL;
		int mm = oq_node_is(n, OQ_OP_MatMul), wdt;
		/* WeightBiasQuantization (Conv, Gemm): a float weight and bias of a node with a per-tensor
		 * DQ input and a Q after it become int8 per-tensor / int32 DQs */
		int wbq = !mm && dq0 && per_tensor(g, dq0) && q_after(n, 1);
		if (!dq0)
			return "input not quantized (no DequantizeLinear before it)";
		if (!dq1 && !(wbq && wf && wf->dtype == OQ_DT_FLOAT))
			return wf ? "float weight (a unit the placement left float)" : "weight not quantized";
		wdt = dq1 ? dq_type(g, dq1) : OQ_DT_INT8;
		if ((why = type_reason(dt)))
			return why;
		if (!is8(wdt) && wdt != OQ_DT_FLOAT8E4M3FN)
			return "weight type has no integer kernel (8-bit only)";
		if (!per_tensor(g, dq0))
			return "per-channel activation scale";
		if (n->n_inputs > 2 && n->inputs[2] && !mm) {
			const oq_node *dqb = dq_of(n->inputs[2]);
			if (dqb ? dq_type(g, dqb) != OQ_DT_INT32 : !(wbq && oq_value_const(g, n->inputs[2])))
				return "bias not an int32 DequantizeLinear";
		}
		q = q_after(n, 1);
		if (!q && oq_node_is(n, OQ_OP_Conv))
			return "no QuantizeLinear after the Conv (its output is read in float)";
		if (q && q_type(g, q) != dt)
			return "output type differs from the input's";
		*kernel = oq_node_is(n, OQ_OP_Conv) ? (dq1 ? "QLinearConv" : "QLinearConv (float weight: ONNX Runtime "
						       "quantizes it per tensor itself)")
			  : oq_node_is(n, OQ_OP_Gemm) ? (dq1 ? "QGemm" : "QGemm (float weight quantized per tensor by ONNX Runtime)")
			  : q ? "QLinearMatMul" : "MatMulIntegerToFloat";
		return dt == OQ_DT_FLOAT8E4M3FN || wdt == OQ_DT_FLOAT8E4M3FN ? fp8_fused : NULL;
	}
	if (oq_node_is(n, OQ_OP_Add) || oq_node_is(n, OQ_OP_Mul) || oq_node_is(n, OQ_OP_Concat) || ort_unary(n)) {
		for (size_t k = 0; k < n->n_inputs; k++) {
			const oq_node *d = dq_of(n->inputs[k]);
			if (!d)
				return "an input is not quantized (no DequantizeLinear before it)";
			if (dq_type(g, d) != dt)
				return "inputs of different types";
		}
		if ((why = type_reason(dt)))
			return why;
		if (!(q = q_after(n, 1)))
			return "no QuantizeLinear after it (its output is read in float)";
		if (q_type(g, q) != dt)
			return "output type differs from the input's";
		*kernel = oq_node_is(n, OQ_OP_Add)    ? "QLinearAdd"
			  : oq_node_is(n, OQ_OP_Mul)    ? "QLinearMul"
			  : oq_node_is(n, OQ_OP_Concat) ? "QLinearConcat"
							: ort_unary(n);
		return dt == OQ_DT_FLOAT8E4M3FN ? fp8_fused : NULL;
	}
	if (oq_ort_movement(n) || oq_node_is(n, OQ_OP_Split)) {
		if (!dq0)
			return "input not quantized";
		if ((why = type_reason(dt)))
			return why;
		for (size_t k = 0; k < n->n_outputs; k++) {
			const oq_value *v = n->outputs[k];
			if (v && (v->n_uses != 1 || !is_q(v->uses[0].node) || (v->flags & OQ_V_OUTPUT)))
				return "no QuantizeLinear after it (its output is read in float)";
			if (v && !same_params(g, dq0, v->uses[0].node))
				return "scale or zero point differs between input and output";
		}
		*kernel = "8-bit data movement";
		return dt == OQ_DT_FLOAT8E4M3FN ? fp8_fused : NULL;
	}
	return "no integer kernel for this op in ONNX Runtime (CPU): float between DQ and Q";
}

int oq_ort_fuses_float8(const oq_graph *g, const oq_node *n)
{
	const char *k;
	return ort_rule(g, n, &k) == fp8_fused;
}

/* TensorRT's (documented explicit-quantization rules; lint only). */
static const char *trt_rule(const oq_graph *g, const oq_node *n, const char **kernel)
{
	const oq_node *dq0 = n->n_inputs ? dq_of(n->inputs[0]) : NULL;
	int dt = dq0 ? dq_type(g, dq0) : 0;

	*kernel = NULL;
	if (is_compute(n)) {
		const oq_node *dq1 = n->n_inputs > 1 ? dq_of(n->inputs[1]) : NULL;
		if (!dq0)
			return "input not quantized (no DequantizeLinear before it)";
		if (!dq1)
			return "weight not quantized";
		if (!per_tensor(g, dq0))
			return "per-channel activation scale";
		if (dt != OQ_DT_INT8 && dt != OQ_DT_FLOAT8E4M3FN)
			return "activations must be int8 or float8e4m3fn";
		*kernel = dt == OQ_DT_INT8 ? "int8 layer" : "fp8 layer";
		return NULL;
	}
	for (size_t k = 0; k < n->n_inputs; k++)
		if (n->inputs[k] && !oq_value_const(g, n->inputs[k]) && !dq_of(n->inputs[k]))
			return "an input is not quantized";
	*kernel = dt == OQ_DT_INT8 ? "int8 (fused by the builder)" : "fp8 (fused by the builder)";
	return NULL;
}

int oq_coverage_analyze(const oq_model *m, int target, const oq_value_sizes *sizes, oq_coverage *out)
{
	const oq_graph *g = m->graph;
	memset(out, 0, sizeof *out);
	out->target = target;
	out->macs_known = 1;
	if (!g)
		return OQ_OK;
	if (!(out->v = calloc(g->n_nodes + 1, sizeof *out->v)))
		return OQ_ENOMEM;
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		oq_cov_node *c = &out->v[out->n];
		int dq_in = 0, q_out = 0, touched;
		if (is_q(n) || is_dq(n))
			continue;
		for (size_t k = 0; k < n->n_inputs; k++)
			dq_in |= n->inputs[k] && dq_of(n->inputs[k]) && !oq_value_const(g, dq_of(n->inputs[k])->inputs[0]);
		for (size_t k = 0; k < n->n_outputs; k++) {
			const oq_value *v = n->outputs[k];
			for (size_t u = 0; v && u < v->n_uses; u++)
				q_out |= is_q(v->uses[u].node);
		}
		/* an op between a DQ and a Q; one only at either end is a float op at the edge of a
		 * quantized region (its DQ or Q is the region's), not a placement problem; a compute
		 * node is quantized when a DQ feeds its input or its weight */
		touched = dq_in && q_out;
		if (is_compute(n))
			touched = dq_in || (n->n_inputs > 1 && dq_of(n->inputs[1]));
		if (!touched && !is_compute(n))
			continue;
		c->node = n;
		c->quantized = touched;
		c->macs = is_compute(n) ? oq_node_macs(g, n, sizes) : 0;
		c->reason = target == OQ_TARGET_TRT ? trt_rule(g, n, &c->kernel) : ort_rule(g, n, &c->kernel);
		c->integer = c->reason == NULL;
		if (!c->integer)
			c->kernel = "float";
		if (is_compute(n)) {
			out->n_compute++;
			out->n_compute_integer += c->integer;
			if (c->macs < 0) {
				out->macs_known = 0;
			} else {
				out->macs_total += c->macs;
				if (c->integer)
					out->macs_integer += c->macs;
			}
		}
		if (!c->integer && c->quantized)
			out->n_qdq_float++;
		/* compute nodes that stay float without any Q/DQ are listed too (a float layer) */
		out->n++;
	}
	return OQ_OK;
}

void oq_coverage_free(oq_coverage *c)
{
	free(c->v);
	memset(c, 0, sizeof *c);
}

static const char *target_name(int t)
{
	return t == OQ_TARGET_TRT ? "trt" : "ort";
}

/* Share of MACs (or of compute nodes when MACs are unknown) in integer kernels, in [0, 1]. */
static double share(const oq_coverage *c)
{
	if (c->macs_known && c->macs_total > 0)
		return c->macs_integer / c->macs_total;
	return c->n_compute ? (double)c->n_compute_integer / (double)c->n_compute : 0;
}

void oq_coverage_print(const oq_coverage *c, FILE *f, int verbose)
{
	if (c->macs_known && c->macs_total > 0)
		fprintf(f, "coverage (%s): %.1f%% of %.4g MMAC in integer kernels (%zu of %zu Conv/MatMul/Gemm)",
			target_name(c->target), 100 * share(c), c->macs_total / 1e6, c->n_compute_integer,
			c->n_compute);
	else
		fprintf(f, "coverage (%s): %zu of %zu Conv/MatMul/Gemm in integer kernels (MACs unknown: no shapes)",
			target_name(c->target), c->n_compute_integer, c->n_compute);
	fprintf(f, "; %zu quantized ops run in float\n", c->n_qdq_float);
	for (size_t i = 0; i < c->n; i++) {
		const oq_cov_node *v = &c->v[i];
		if (v->integer && !verbose)
			continue;
		if (!v->integer && !v->quantized && !verbose)
			continue; /* a float layer the quantization left alone */
		fputs("  node '", f);
		oq_text_str(f, v->node->name);
		fputs("' (", f);
		oq_text_str(f, v->node->op_type);
		fprintf(f, "): %s", v->integer ? v->kernel : "float");
		if (v->macs > 0)
			fprintf(f, ", %.4g MMAC", v->macs / 1e6);
		if (v->reason)
			fprintf(f, ": %s", v->reason);
		fputc('\n', f);
	}
}

void oq_coverage_json(const oq_coverage *c, FILE *f)
{
	int first = 1;
	fprintf(f, "{\"target\": \"%s\", \"macs_known\": %s, \"macs_total\": %.0f, \"macs_integer\": %.0f, "
		"\"integer_share\": %.6f, \"compute_nodes\": %zu, \"compute_integer\": %zu, \"quantized_float\": %zu, "
		"\"not_integer\": [",
		target_name(c->target), c->macs_known ? "true" : "false", c->macs_total, c->macs_integer, share(c),
		c->n_compute, c->n_compute_integer, c->n_qdq_float);
	for (size_t i = 0; i < c->n; i++) {
		const oq_cov_node *v = &c->v[i];
		if (v->integer || (!v->quantized && !is_compute(v->node)))
			continue;
		fprintf(f, "%s{\"node\": ", first ? "" : ", ");
		oq_json_str(f, v->node->name);
		fprintf(f, ", \"op\": ");
		oq_json_str(f, v->node->op_type);
		fprintf(f, ", \"quantized\": %s, \"macs\": %.0f, \"reason\": ", v->quantized ? "true" : "false",
			v->macs);
		oq_json_str(f, v->reason);
		fputc('}', f);
		first = 0;
	}
	fprintf(f, "]}");
}
