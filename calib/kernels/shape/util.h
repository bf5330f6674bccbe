/*
 * util.h - shared machinery of the 'shape' kernel family: moving
 * elements of any dtype (fixed-size bytes, packed sub-byte values, owned
 * strings) and a strided copy engine that Transpose, Slice, Expand, Tile,
 * DepthToSpace, SpaceToDepth, Concat and Split are expressed in.
 *
 * These kernels only move elements, so they work on raw element bits and
 * never convert: a float8 or int4 tensor comes out bit-identical.
 */
#ifndef OQ_SHAPE_UTIL_H
#define OQ_SHAPE_UTIL_H

#include "calib/kernels/kernel.h"

/* Largest rank of a strided view (Tile and DepthToSpace split each dim in two). */
#define OQ_SH_VIEW_MAX (2 * OQ_RT_MAX_RANK)

/*
 * A strided copy: for every index (i_0 .. i_{rank-1}) < dims,
 * dst[doff + sum i*ds] = src[soff + sum i*ss]. Strides are in elements and
 * may be zero (broadcast) or negative (reversed slices).
 */
typedef struct oq_sh_view {
	int rank;                      /* number of dims (0: one element) */
	int64_t dims[OQ_SH_VIEW_MAX];  /* extent of each dim */
	int64_t ss[OQ_SH_VIEW_MAX];    /* source stride of each dim */
	int64_t ds[OQ_SH_VIEW_MAX];    /* destination stride of each dim */
	int64_t soff;                  /* source element offset of index 0 */
	int64_t doff;                  /* destination element offset of index 0 */
} oq_sh_view;

/* Copies n elements src[si..] to dst[di..] (same dtype); OQ_ENOMEM for strings. */
int oq_sh_copy(oq_rt *dst, size_t di, const oq_rt *src, size_t si, size_t n) OQ_WUR;
/* Runs a strided copy (parallel over rows for non-string tensors). */
int oq_sh_view_copy(oq_kctx *k, oq_rt *dst, const oq_rt *src, const oq_sh_view *v) OQ_WUR;
/* Row-major element strides of a shape. */
void oq_sh_strides(int rank, const int64_t *dims, int64_t *strides);
/* Element i is not zero (numeric and bool dtypes; NaN counts as non-zero). */
int oq_sh_nonzero(const oq_rt *t, size_t i);

/*
 * Reads an integer tensor (int32 or int64; `what` names it in errors) into
 * v[0..*n); at most `max` elements.
 */
int oq_sh_read_ints(oq_kctx *k, const oq_rt *t, const char *what, int64_t *v, size_t max, size_t *n) OQ_WUR;
/* Product of dims[b..e), checked; -1 on overflow. */
int64_t oq_sh_prod(const int64_t *dims, int b, int e);

/* Resize family (resize.c). oq_sh_resize_ref (tests only): 1 runs every
 * interpolation through the per-element reference path instead of the row path. */
extern int oq_sh_resize_ref;
int oq_k_resize(oq_kctx *k);
int oq_k_upsample(oq_kctx *k);

/* Index family (index.c). */
int oq_k_gather(oq_kctx *k);
int oq_k_gather_elements(oq_kctx *k);
int oq_k_gather_nd(oq_kctx *k);
int oq_k_scatter_nd(oq_kctx *k);
int oq_k_scatter_elements(oq_kctx *k);
int oq_k_nonzero(oq_kctx *k);
int oq_k_onehot(oq_kctx *k);
int oq_k_compress(oq_kctx *k);
int oq_k_unique(oq_kctx *k);

#endif
