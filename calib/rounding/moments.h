/*
 * moments.h - the input moments of a layer for learned rounding (moments.c): what a layer's
 * calibration inputs reduce to (rounding.h), per conv group.
 */
#ifndef OQ_WR_MOMENTS_H
#define OQ_WR_MOMENTS_H

#include "calib/exec/exec.h"

/* Positions of one sample a layer's moments take at most, and patch values held at once. */
#define OQ_WR_POSITIONS 4096
#define OQ_WR_PATCH_FLOATS ((size_t)1 << 24)

/* How a layer reads patches from its input. */
enum {
	OQ_WR_CONV = 0,      /* Conv: im2col patches of [N, C, (H,) W] */
	OQ_WR_ROWS,          /* MatMul / Gemm: each row of the last axis (K values) */
	OQ_WR_COLS,          /* Gemm transA: each column of a [K, M] input */
};

enum { OQ_WR_PAD_NOTSET = 0, OQ_WR_PAD_VALID, OQ_WR_PAD_SAME_UPPER, OQ_WR_PAD_SAME_LOWER };

/* A layer's patch geometry. */
typedef struct oq_wr_geom {
	int kind;            /* OQ_WR_* */
	size_t K;            /* values per patch */
	size_t groups;       /* conv groups (1 otherwise) */
	size_t cin_g;        /* input channels per group */
	int nsp;             /* spatial dims of a conv: 1 or 2 */
	int64_t kernel[2], stride[2], dil[2];
	int64_t pads[4];     /* begin pads of the nsp axes, then end pads */
	int auto_pad;        /* OQ_WR_PAD_* */
} oq_wr_geom;

/* One group's sums (moments.c). */
typedef struct oq_wr_moments {
	size_t K;
	int paired;          /* x~ and x differ: qf and sf are kept */
	double *qq;          /* K x K: sum of x~ x~^T */
	double *qf;          /* K x K: sum of x~ x^T (paired) */
	double *sq, *sf;     /* K: sums of x~ and (paired) x */
	double *sa;          /* K: sums of |x~| (the activation magnitudes --awq scales by) */
	uint64_t n;          /* patches summed */
	float *rq, *rf;      /* the patches themselves (rows of K), while n <= cap_rows: a layer
			      * with fewer positions than K / 2 works on them instead of K x K */
	size_t cap_rows;     /* K / 2; the rows are dropped once n passes it */
} oq_wr_moments;

int oq_wr_moments_init(oq_wr_moments *mo, size_t K, int paired) OQ_WUR;
void oq_wr_moments_free(oq_wr_moments *mo);
/* Adds src's sums to dst (the same K and pairing), and its patches while both have theirs and they
 * fit in dst's cap_rows (else dst's are dropped). */
void oq_wr_moments_add(oq_wr_moments *dst, const oq_wr_moments *src);

/*
 * Adds one sample's patches to mo (g->groups entries): x~ from xq, x from xf (NULL:
 * unpaired, x = x~). OQ_EUNSUP for a non-float32 input, OQ_EINVAL for a shape that does
 * not fit g, OQ_ENOMEM. pool may be NULL.
 */
int oq_wr_accumulate(const oq_wr_geom *g, const oq_rt *xq, const oq_rt *xf, oq_wr_moments *mo,
		     struct oq_pool *pool) OQ_WUR;

#endif
