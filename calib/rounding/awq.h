/*
 * awq.h - activation-aware input-channel scaling of weight-only layers (--awq; Lin et al. 2023,
 * "AWQ: Activation-aware Weight Quantization for LLM Compression and Acceleration").
 *
 * A layer y = W x (Conv: x an im2col patch, input channel c spanning `per` of its elements;
 * MatMul / Gemm: x a row of the input's last axis) computes the same with W diag(s) on
 * diag(s)^-1 x for any s > 0 per input channel. Quantized, W diag(s) gives the columns of
 * channels with large inputs finer steps relative to their weights, at the others' expense.
 * With m_c = mean |x_c| over the layer's calibration inputs (padding zeros included):
 *
 *   s_c(alpha) = v_c / sqrt(max_c v_c * min_c v_c),   v_c = max(m_c, OQ_AWQ_FLOOR max m)^alpha
 *
 * (normalised as AWQ does: the scales straddle 1), for alpha = a / OQ_AWQ_GRID, a = 0 ..
 * OQ_AWQ_GRID, and the layer keeps the alpha whose output error on those inputs is least:
 *
 *   L(s) = sum_m d_m^T A d_m,   d = Q(W diag(s)) diag(s)^-1 - W,   A = E[x x^T]
 *
 * (Q: the layer's weight quantization, its grid computed again on the scaled weight; ties keep
 * the smaller alpha). With weight-only bias correction after it, A is centred (the covariance)
 * for the layers whose bias will absorb their mean error, as learned rounding's loss is: what
 * counts is the error left after the correction. alpha = 0 is s = 1, the layer as it was, so
 * the search never does worse on the inputs it measures. learn.c gives A and m from the float
 * model's inputs (moments.h: sub-sampled positions, a memory budget, stages) and applies the
 * held-out guard of learned rounding (rounding.h: one sample in four): a layer keeps its scales
 * only where L on the held-out samples' moments is lower than without them, and then searches
 * again on all samples. Learned rounding and weight-only bias correction run afterwards on the
 * scaled weights.
 *
 * A layer's output error is not the model's (an error moved between output channels reaches
 * the outputs differently), and learned rounding does not always do better on scaled weights:
 * the pipeline (pipeline.c, guard_awq) also quantizes the model without --awq and keeps the
 * scales only where the model's output SQNR on the calibration samples gains.
 *
 * The division of x by s is absorbed exactly by what writes x (oq_awq_path_of), walking back
 * from the layer's input through values that are not graph inputs or outputs and have one
 * reader (readers of the shape only, Shape and Size, aside):
 *   Add / Sub with a constant   the constant / s (a scalar becomes one value per channel); on
 *                               to the other operand;
 *   Mul by a constant           the constant / s; done;
 *   Div by a constant           the constant * s; done;
 *   Conv, ConvTranspose (group 1), Gemm, MatMul with a constant weight
 *                               its output channels (weight rows and bias) / s; done;
 *   BatchNormalization          scale and B / s; done (Conv layers: channel axis 1);
 *   LayerNormalization, axis -1 Scale and B / s; done (MatMul / Gemm layers: the last axis).
 * Anything else (an activation, Concat, Resize, a graph input, a value read twice) leaves the
 * layer unscaled. A padded Conv reads zeros at its borders, and 0 / s = 0: exact too. A
 * producer layer's rows are scaled only when the groups of its own grid lie within its output
 * channels (per channel, or blocks along another axis; or it is not quantized): its
 * quantization then follows the scale, and its error reaches the layer's output unchanged; a
 * per-tensor grid would be a new one. A constant that stays per tensor along the way (all
 * dims 1 at the channel axis) becomes per channel only where the value it meets is known to
 * carry every channel (nothing upstream of a per-channel constant broadcast it), so no value
 * changes shape.
 *
 * Layers: those learned rounding takes (rounding.h), of them Conv with group 1, MatMul, and
 * Gemm without transA. Grouped and depthwise Convs are skipped: with per-channel grids a
 * depthwise layer's input channel c scales whole output channels, which the grid follows
 * exactly, so there is nothing to gain. Weight-only only: with activations quantized, x / s
 * changes the per-tensor activation ranges calibration sets, which this search does not see.
 */
#ifndef OQ_AWQ_H
#define OQ_AWQ_H

#include <stdio.h>

#include "calib/calibrate.h"
#include "passes/quantize/qweight.h"

/* alpha = a / OQ_AWQ_GRID, a = 0 .. OQ_AWQ_GRID: 0, 0.05, ..., 1. */
#define OQ_AWQ_GRID 20
/* A channel's mean |x| counts as at least this share of the largest: no scale reaches 0. */
#define OQ_AWQ_FLOOR 1e-4
/* The longest walk back from a layer's input (nodes absorbing the scales). */
#define OQ_AWQ_CHAIN 8

/* One layer as the search sees it. */
typedef struct oq_awq_layer {
	const oq_tensor *W;  /* the float32 weight */
	const oq_wspec *spec; /* how it is quantized */
	size_t rows, K;      /* output channels; inputs of each (patch elements) */
	int cols;            /* 1: element (m, k) is W[k * rows + m] (MatMul, Gemm without transB);
			      * 0: W[m * K + k] */
	size_t per;          /* patch elements per input channel (a Conv's kernel size, else 1):
			      * element k belongs to channel k / per */
} oq_awq_layer;

/* What the search found for a layer. */
typedef struct oq_awq_fit {
	int a;               /* alpha = a / OQ_AWQ_GRID; 0: no scaling */
	double loss0;        /* L without scaling */
	double loss;         /* L at a */
} oq_awq_fit;

/* s[C]: the scales of exponent alpha for mean magnitudes m[C] (all 1 at alpha 0 or m all 0). */
void oq_awq_scales(const double *m, size_t C, double alpha, float *s);

/* *loss = L(s) of layer Ly on A (K x K, row-major); s NULL: no scaling. OQ_ENOMEM, or the
 * quantizer's error. */
int oq_awq_loss(const oq_awq_layer *Ly, const float *A, const float *s, double *loss, oq_diag *d) OQ_WUR;

/* The alpha search on A and magnitudes m (K / per channels): *fit, and s[K / per] its scales. */
int oq_awq_search(const oq_awq_layer *Ly, const float *A, const double *m, oq_awq_fit *fit, float *s,
		  oq_diag *d) OQ_WUR;

/* How a node on the path absorbs the division (oq_awq_site.kind). */
enum {
	OQ_AWQ_DIV_CONST = 0, /* Add / Sub / Mul: its constant operand / s */
	OQ_AWQ_MUL_CONST,     /* Div: its divisor * s */
	OQ_AWQ_ROWS,          /* Conv / ConvTranspose / Gemm / MatMul: output channels / s */
	OQ_AWQ_NORM,          /* BatchNormalization / LayerNormalization: scale and bias / s */
};

/* A node absorbing the division. */
typedef struct oq_awq_site {
	oq_node *node;
	int kind;            /* OQ_AWQ_* */
	size_t idx;          /* *_CONST: the constant's input */
	int rank;            /* *_CONST: the new constant's rank (channel axis at rank - tail) */
} oq_awq_site;

/* Where a layer's scales go. */
typedef struct oq_awq_path {
	size_t C;            /* input channels */
	int tail;            /* axes from the input's channel axis to its last (Conv: rank - 1;
			      * MatMul / Gemm: 1) */
	oq_awq_site site[OQ_AWQ_CHAIN];
	size_t n;            /* sites, from the layer's input back */
	char why[200];       /* when there is no path: why not */
} oq_awq_path;

/*
 * The path by which layer n's input can absorb a division by per-channel scales (the rules
 * above): 1 with *p filled, or 0 with p->why saying what stops it. plans (np entries, may be
 * NULL): the weights being quantized and how, for producer layers' grids.
 */
int oq_awq_path_of(const oq_graph *g, const oq_node *n, const oq_wplan *plans, size_t np, oq_awq_path *p);

/*
 * Scales input channel c of layer n's weight by s[c] and divides what writes its input by it,
 * along p (from oq_awq_path_of on the graph as it is). Constants other nodes also read are
 * copied (oq_pass_set_const). OQ_ENOMEM.
 */
int oq_awq_apply(oq_graph *g, oq_node *n, const oq_awq_path *p, const float *s, oq_diag *d) OQ_WUR;

/*
 * --awq on m (weight-only: the layers o plans), on the calibration samples of co (a folder):
 * each layer's scales searched, guarded and applied to m (learn.c). With bias (weight-only bias
 * correction follows) A is centred for the layers whose bias will absorb their mean error.
 * *n_scaled (may be NULL) receives the layers scaled. Logs a summary line on log, each layer on
 * o->log. OQ_EUSAGE without --weight-only or a sample folder.
 */
int oq_awq_learn(oq_model *m, const oq_opts *o, const oq_calib_opts *co, int bias, size_t *n_scaled,
		 FILE *log, oq_diag *d) OQ_WUR;

#endif
