/*
 * quantize_internal.h - the quantize pass's state, shared by quantize.c
 * (selection, activation Q/DQ) and weights.c (weight grids and their DQ).
 * Private to passes/quantize/.
 */
#ifndef OQ_QUANTIZE_INTERNAL_H
#define OQ_QUANTIZE_INTERNAL_H

#include <stdio.h>

#include "passes/pass.h"
#include "passes/quantize/overrides.h"
#include "passes/quantize/qweight.h"

/* What a quantized op does with its activations. */
enum {
	K_OWN = 0,    /* inputs and outputs get their own scales */
	K_SHARE,      /* output reuses input 0's scale and zero point */
	K_SOFTMAX,    /* output range fixed to [0, 1] */
};

#define ALL_INPUTS 0xffffffffu

/* One quantizable op. */
typedef struct opinfo {
	oq_op op;
	int kind;          /* K_* */
	unsigned data;     /* activation inputs (bit k = input k); ALL_INPUTS for variadic ops */
	int w;             /* input index of the weight, -1 for none */
	int b;             /* input index of the bias, -1 for none */
	int trt;           /* TRT profile: its inputs get Q/DQ */
	int ort;           /* ONNX Runtime (CPU) runs it on 8-bit data: a QLinear* kernel or a data
			    * movement op with DQ in, Q out of equal parameters (qdq_selector_action_
			    * transformer.cc); runtime-aware placement quantizes only these */
	int rt_only;       /* only in runtime-aware placement (a Div by a constant: folded) */
} opinfo;

/* Quantization parameters of one activation tensor. */
typedef struct qp {
	int set;           /* computed: the tensor gets a Q/DQ */
	int dtype;         /* quantized type */
	float scale;
	int64_t zp;
} qp;

/* State of one run of the pass. */
typedef struct qctx {
	oq_graph *g;
	const oq_opts *o;
	oq_diag *d;
	int trt;           /* profile TRT */
	int rt;            /* runtime-aware placement (profile ORT, --prefer other than accuracy) */
	size_t nv, nn;     /* value and node counts before the pass added any */
	const opinfo **info; /* per node: its table entry when selected, else NULL */
	char *need;        /* per value: wanted a Q/DQ (before ranges were looked up) */
	uint8_t *keep;     /* per value: decision-safe placement keeps it float (decision.c) */
	qp *q;             /* per value: its quantization parameters */
	oq_value **s_init, **z_init; /* per value: scale / zero-point initializers (TRT shares them) */
	float *in_scale;   /* per node: scale of input 0 when it reads one of our DQs, else 0 */
	unsigned *qin;     /* per node: bit k set when its input k (k < 32) reads one of our DQs */
	double *fold;      /* rt, per node: a Mul / Div by a positive scalar constant folded into a
			    * DequantizeLinear scale: the factor its output's scale is its input's times;
			    * 0: not folded */
	oq_value **qout;   /* per value: the output of its QuantizeLinear (a folded output: its
			    * input's), once inserted */
	oq_value **cdq;    /* rt, per value: a constant operand of Add/Mul quantized, its DQ output */
	double *bound_lo, *bound_hi; /* rt, per value: oq_fuse_input_bounds (+-inf: none), found
			    * before drop_activations removes a unit's Clip, on the value's grid */
	int inc_nodes;     /* --include names nodes or op types */
	int inc_tensors;   /* --include names tensors */
	size_t n_pairs, n_weights, n_acts, n_norange, n_folded, n_consts, n_kept;
	oq_nameset node_names; /* every node name of g (filled on the first node_name call) */
} qctx;

/* Is s one of the n names of l (unsorted)? */
int oq_qc_listed(const char *const *l, size_t n, const char *s);
/* The --overrides entry of tensor `name` / of node n by name, or NULL. */
const oq_override *oq_qc_tovr(const qctx *c, const char *name);
const oq_override *oq_qc_novr(const qctx *c, const oq_node *n);

/*
 * *ok = 1 and the weight's spec in s when node n (table entry f, NULL: not selected) gets its
 * weight quantized; skipped weights (not float32, a MatMul weight of rank != 2) are named on log
 * when log is not NULL. Fails only on an override that does not fit the weight.
 */
int oq_qc_weight_of(qctx *c, const oq_node *n, const opinfo *f, FILE *log, oq_wspec *s, int *ok) OQ_WUR;
/* Quantizes the weight of every selected node and inserts its DequantizeLinear (bias too). */
int oq_qc_quantize_weights(qctx *c) OQ_WUR;

#endif
