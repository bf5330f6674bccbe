/*
 * bcstats.h - bias-correction statistics, the hand-off from calibration
 * (calib/biascorr.c collects them) to the bias update (passes/bias_correct.c).
 *
 * For every layer whose weight the quantize pass will quantize, one sum
 * S over the calibration samples of what each weight element multiplies,
 * and the number N of output positions summed over. Because the layer is
 * linear in W, the mean shift of output channel o caused by W -> W + dW is
 *     shift[o] = sum_j dW[o, j] * S[j] / N
 * (see bias_correct.c for each op). Layouts of S:
 *   Conv           [C, k...]: S[c, t] = sum over samples, batch and output
 *                  positions p of x[n, c, p*stride + t*dil - pad] (0 in the
 *                  padding): what tap t of every filter reads on channel c
 *   ConvTranspose  [C, k...]: S[c, t] = sum of x[n, c, i] over the input
 *                  positions i whose tap t lands inside the output
 *   Gemm           [K]: S[k] = sum over rows m of op(A)[m, k]
 *   MatMul         [K]: S[k] = sum over all rows of x[..., k]
 * Memory: C x kernel taps (or K) doubles per layer, whatever the spatial
 * size, batch or number of samples; sizes may differ between samples.
 */
#ifndef OQ_BCSTATS_H
#define OQ_BCSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* Statistics of one layer. */
typedef struct oq_bc_layer {
	oq_node *node;       /* Conv, ConvTranspose, Gemm or MatMul of the main graph */
	int w_idx;           /* input index of its weight (a float32 initializer) */
	double *sum;         /* S, n_sum entries (layouts above) */
	size_t n_sum;
	uint64_t count;      /* N: output positions (rows) summed over */
	int failed;          /* an input did not fit (dtype, shape): no correction */
} oq_bc_layer;

typedef struct oq_bc_stats {
	oq_bc_layer *v;
	size_t n;
} oq_bc_stats;

void oq_bc_stats_free(oq_bc_stats *s);

#endif
