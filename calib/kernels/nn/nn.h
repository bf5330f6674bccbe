/*
 * nn.h - private header of the 'nn' kernel family (pooling, normalisation,
 * softmax, reductions, ArgMax/ArgMin, TopK, CumSum). nn.c holds the
 * table; the kernels live in pool.c, norm.c, softmax.c,
 * reduce.c, topk.c and loss.c, sharing the dtype helpers of calib/kernels/nn/util.c.
 *
 * Compute type: float32 for the float ops (float16/bfloat16/double inputs
 * are converted in and out), with double accumulators for sums and
 * moments; reductions, ArgMax/ArgMin, TopK and CumSum also work on integer
 * tensors with int64 accumulators so integer results stay exact.
 */
#ifndef OQ_NN_H
#define OQ_NN_H

#include "calib/kernels/kernel.h"

/* ---- dtype helpers (calib/kernels/nn/util.c) ---- */

/* Element i of raw data as double / int64. */
typedef double (*oq_nn_getf)(const void *p, size_t i);
typedef int64_t (*oq_nn_geti)(const void *p, size_t i);
/* The reader for dtype, or NULL when the dtype is not a (non-packed) number. */
oq_nn_getf oq_nn_getf_for(int dtype);
oq_nn_geti oq_nn_geti_for(int dtype);
/* Stores v into element i of t (float kinds round, int kinds saturate; int64 exact). */
void oq_nn_setf(oq_rt *t, size_t i, double v);
void oq_nn_seti(oq_rt *t, size_t i, int64_t v);

/* float, float16, bfloat16 or double. */
int oq_nn_is_float(int dtype);
/* Signed or unsigned integer of 8..64 bits. */
int oq_nn_is_int(int dtype);

/*
 * A float32 view of x: x's data when it is float32, else a converted copy
 * returned in *owned (free it). Fails with OQ_ENOMEM, or OQ_EUNSUP for a
 * dtype that is not a float (ints too when allow_int).
 */
int oq_nn_f32_in(oq_kctx *k, const oq_rt *x, int allow_int, const float **p, float **owned) OQ_WUR;
/* A float32 buffer to compute output y into: y's data or a new buffer in *owned. */
int oq_nn_f32_buf(oq_kctx *k, oq_rt *y, float **p, float **owned) OQ_WUR;
/* Converts owned (if any) into y and frees it. */
void oq_nn_f32_out(oq_rt *y, float *owned);

/* A small parameter tensor (scale, bias, mean...) as float32 values; *n its element count. */
int oq_nn_params(oq_kctx *k, const oq_rt *t, const char *what, float **v, size_t *n) OQ_WUR;

/* Product of dims[a..b). */
size_t oq_nn_prod(const int64_t *dims, int a, int b);

/* Non-zero: pooling uses its plain scalar loops (the reference the fast paths are tested against). */
extern int oq_nn_use_ref;

/* ---- kernels ---- */
int oq_nn_maxpool(oq_kctx *k);
int oq_nn_averagepool(oq_kctx *k);
int oq_nn_lppool(oq_kctx *k);
int oq_nn_globalaveragepool(oq_kctx *k);
int oq_nn_globalmaxpool(oq_kctx *k);
int oq_nn_globallppool(oq_kctx *k);
int oq_nn_maxroipool(oq_kctx *k);

int oq_nn_batchnorm(oq_kctx *k);
int oq_nn_instancenorm(oq_kctx *k);
int oq_nn_layernorm(oq_kctx *k);
int oq_nn_rmsnorm(oq_kctx *k);
int oq_nn_groupnorm(oq_kctx *k);
int oq_nn_lrn(oq_kctx *k);
int oq_nn_mvn(oq_kctx *k);
int oq_nn_lpnorm(oq_kctx *k);

int oq_nn_softmax(oq_kctx *k);
int oq_nn_logsoftmax(oq_kctx *k);
int oq_nn_hardmax(oq_kctx *k);

int oq_nn_reduce(oq_kctx *k);
int oq_nn_argmax(oq_kctx *k);
int oq_nn_argmin(oq_kctx *k);

int oq_nn_topk(oq_kctx *k);
int oq_nn_cumsum(oq_kctx *k);

int oq_nn_nllloss(oq_kctx *k);
int oq_nn_sceloss(oq_kctx *k);

/* ---- reduction plans (reduce.c), shared with MeanVarianceNormalization ---- */

/*
 * A reduction of a contiguous tensor over a set of axes, with adjacent kept
 * (or reduced) axes merged: output element o has input offset base(o), and
 * its reduced elements are base + sum(idx[j] * rs[j]) over the reduced
 * odometer idx < rd. Empty groups are given one dim of size 1.
 */
typedef struct oq_nn_rplan {
	int nk;                         /* kept groups */
	int nr;                         /* reduced groups */
	int64_t kd[OQ_RT_MAX_RANK];     /* kept group sizes */
	int64_t ks[OQ_RT_MAX_RANK];     /* kept group input strides */
	int64_t rd[OQ_RT_MAX_RANK];     /* reduced group sizes */
	int64_t rs[OQ_RT_MAX_RANK];     /* reduced group input strides */
	size_t n_out;                   /* number of outputs (product of kd) */
	size_t n_red;                   /* elements per output (product of rd) */
} oq_nn_rplan;

/* mask[i] != 0: axis i is reduced. */
void oq_nn_rplan_init(oq_nn_rplan *p, int rank, const int64_t *dims, const unsigned char *mask);
/* Input offset of output element o's first reduced element. */
size_t oq_nn_rplan_base(const oq_nn_rplan *p, size_t o);
/* Fills off[0..n_red) with the offsets of output o's reduced elements. */
void oq_nn_rplan_offsets(const oq_nn_rplan *p, size_t o, size_t *off);

#endif
