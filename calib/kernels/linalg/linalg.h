/*
 * linalg.h - private interface of the 'linalg' kernel family: convolution
 * geometry, the fast (OpenBLAS GEMM, parallel) and reference (direct loop)
 * compute routines behind Conv, ConvTranspose, Gemm, MatMul and the integer
 * / QLinear variants.
 *
 * Compute is float32 for float models; integer ops (ConvInteger,
 * MatMulInteger, QLinear*) run the same engine in double on zero-point
 * shifted values, which is exact for any realistic reduction length (sums
 * below 2^53), then requantise.
 *
 * Determinism: work is cut into tiles whose sizes depend only on the
 * problem shape, never on the thread count; oq_k_parallel hands whole
 * tiles to threads and every tile makes the same BLAS call whichever thread
 * runs it, so outputs are bit-identical for any --threads. OpenBLAS is told
 * once to use one thread (we parallelise ourselves).
 */
#ifndef OQ_LINALG_H
#define OQ_LINALG_H

#include "calib/kernels/kernel.h"

/* Most spatial dims a convolution may have. */
#define OQ_CONV_MAX_SP 8

/*
 * Non-zero: kernels use the _ref paths (direct loops). For tests that
 * compare fast and reference results through the executor.
 */
extern int oq_linalg_use_ref;
/*
 * Non-zero: float32 Conv tiles go to BLAS sgemm even where the own AVX2
 * GEMM (conv_gemm.c) could run. For tests and benchmarks.
 */
extern int oq_linalg_use_blas;
/*
 * Non-zero: float32 Conv tiles and packed products (oq_packed_b_gemm) use the
 * AVX2 kernels even on an AVX-512 CPU (both give the same bits: tests compare
 * them).
 */
extern int oq_linalg_no_avx512;
/*
 * 1 (default): the AVX2 conv GEMM computes the last 1..4 columns of a product
 * whose width is not a multiple of 16 with channels in the lanes; 0: with its
 * 6 x 16 tile. Both give the same bits (tests compare them).
 */
extern int oq_conv_avx2_tail;
/*
 * Non-zero: float32 depthwise Conv on AVX-512 CPUs runs the row kernel
 * (16 positions per vector) instead of the channel-blocked one (16 channels
 * per vector); both give the same bits. For tests and benchmarks.
 */
extern int oq_linalg_dw_rows;
/*
 * Non-zero: stride-1 float32 Conv on AVX-512 CPUs packs im2col tiles instead
 * of reading a zero-padded copy of the input in place; both give the same
 * bits. For tests and benchmarks.
 */
extern int oq_linalg_no_in_place;
/* Calls that took that in-place path (tests; counted from any thread). */
extern _Atomic size_t oq_linalg_in_place_runs;

/* Shape of one convolution (Conv) or transposed convolution (ConvTranspose). */
typedef struct oq_conv_geom {
	int nsp;                          /* spatial dims */
	int64_t n;                        /* batch */
	int64_t c;                        /* input channels */
	int64_t m;                        /* output channels */
	int64_t group;                    /* groups; c and m are multiples of it */
	int64_t in[OQ_CONV_MAX_SP];       /* input spatial dims */
	int64_t out[OQ_CONV_MAX_SP];      /* output spatial dims */
	int64_t k[OQ_CONV_MAX_SP];        /* kernel spatial dims */
	int64_t stride[OQ_CONV_MAX_SP];   /* strides */
	int64_t dil[OQ_CONV_MAX_SP];      /* dilations */
	int64_t pad[OQ_CONV_MAX_SP];      /* begin pads (end pads follow from in/out) */
	int64_t in_size, out_size, k_size; /* products of in, out, k */
} oq_conv_geom;

/* Element type of an engine call: float32 or double. */
typedef enum oq_ltype { OQ_LT_F32, OQ_LT_F64 } oq_ltype;

/*
 * Conv: y[n, m, o] = b[m] + sum_{c in group, kk} x[n, c, o*s + kk*d - pad] * w[m, c, kk]
 * x [n, c, in...], w [m, c/group, k...], b [m] or NULL, y [n, m, out...] (written whole).
 * The fast path needs k for its thread pool (NULL: single thread).
 */
int oq_conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g, const void *x, const void *w,
		const void *b, void *y) OQ_WUR;
/*
 * oq_conv_run with a fused epilogue (see oq_kfuse in kernel.h: per-channel
 * BN affine, activation, then the steps) applied to every output while it is in cache
 * (per GEMM tile / depthwise row). ep NULL: plain Conv. Float32 only
 * (OQ_EUNSUP for double with an epilogue).
 */
int oq_conv_run_epilogue(oq_kctx *k, oq_ltype t, const oq_conv_geom *g, const void *x, const void *w,
			 const void *b, const oq_kfuse *ep, void *y) OQ_WUR;
/* Applies act to y[0, n) in place (no-op for NULL / OQ_ACT_NONE). */
void oq_act_apply(const oq_act *act, float *y, size_t n);
/*
 * The epilogue of output channel ch on y[0, n): BN affine (if any), the
 * activation, then the steps; y[0] is element off of the output (tensor
 * operands are read from off on).
 */
void oq_epi_apply(const oq_kfuse *ep, int64_t ch, size_t off, float *y, size_t n);
void oq_conv_ref(oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const void *b, void *y);

/*
 * ConvTranspose: y[n, m, i*s + kk*d - pad] += x[n, c, i] * w[c, m, kk], plus b[m].
 * x [n, c, in...], w [c, m/group, k...], b [m] or NULL, y [n, m, out...] (written whole).
 */
int oq_convt_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g, const void *x, const void *w,
		 const void *b, void *y) OQ_WUR;
void oq_convt_ref(oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const void *b,
		  void *y);

/*
 * Batched GEMM: for every batch item i, C_i = alpha * op(A_i) op(B_i) + beta * C_i
 * with op() the optional transpose; A_i = A + aoff[i] elements (B, C likewise;
 * NULL offsets mean 0 for all items). Row-major, leading dims given.
 * beta == 0 ignores the old C contents.
 */
typedef struct oq_gemm_batch {
	oq_ltype t;
	int ta, tb;                        /* transpose A / B */
	int64_t m, n, kd;                  /* op(A) is m x kd, op(B) kd x n */
	double alpha, beta;
	const void *a, *b;
	void *c;
	int64_t lda, ldb, ldc;
	size_t batch;                      /* number of items */
	const size_t *aoff, *boff, *coff;  /* per item element offsets, or NULL */
} oq_gemm_batch;

void oq_gemm_run(oq_kctx *k, const oq_gemm_batch *p);
void oq_gemm_ref(const oq_gemm_batch *p);

/*
 * A float32 B [kd, n] packed once for oq_packed_b_gemm (gemm_packed.c): panels of
 * OQ_PACKED_B_NR columns, each holding its kd rows contiguously, zero past n.
 */
#define OQ_PACKED_B_NR 64
struct oq_packed_b {
	int64_t kd, n;                     /* op(B) is kd x n */
	float *p;                          /* ceil(n / OQ_PACKED_B_NR) panels of kd x OQ_PACKED_B_NR floats (64-byte aligned) */
};

/*
 * Packs op(B): B row-major with leading dim ldb, [kd, n] (tb 0) or [n, kd]
 * (tb 1, i.e. Gemm's transB), at any alignment. OQ_ENOMEM, OQ_EINVAL on negative dims.
 */
int oq_packed_b_pack(const float *b, int64_t kd, int64_t n, int tb, int64_t ldb, oq_packed_b *out) OQ_WUR;
/* Writes the packed B back in its original layout ([kd, n], or [n, kd] for tb), for observers. */
void oq_packed_b_unpack(const oq_packed_b *pb, int tb, float *b);
void oq_packed_b_free(oq_packed_b *pb);
/* The packed path runs here: an AVX-512 or AVX2 + FMA CPU (and oq_linalg_use_blas not set). */
int oq_packed_b_available(void);
/*
 * C[m, n] (ldc) = init + A[m, kd] (lda) x B, init = C's contents (load) or
 * 0; each output a chain of fused multiply-adds in k order, so the AVX-512
 * and AVX2 paths, any thread count and oq_packed_b_gemm_ref give the same bits. k: for the
 * thread pool (NULL: caller only). Uses the reference under oq_linalg_use_ref.
 */
void oq_packed_b_gemm(oq_kctx *k, int64_t m, const float *a, int64_t lda, const oq_packed_b *pb, float *c, int64_t ldc,
		      int load);
void oq_packed_b_gemm_ref(int64_t m, const float *a, int64_t lda, const oq_packed_b *pb, float *c, int64_t ldc, int load);

/*
 * A float32 Conv weight W [m, c / group, kernel...] packed once (by the
 * executor's plan) for the AVX-512 conv GEMM (conv_gemm.c): per group,
 * panels of OQ_PACKED_W_NR output channels, each [kc][OQ_PACKED_W_NR] (kc = c / group x
 * kernel size; channel j of the panel at lane j, zero past the group's
 * channels). Both register tiles read it: the 12 x 32 one broadcasts 12
 * channels of one k from one line, the channels-in-lanes one loads 32
 * channels of one k as two vectors.
 */
#define OQ_PACKED_W_NR 32
struct oq_packed_w {
	int64_t m, kc, group;              /* output channels, depth per group, groups */
	float *p;                          /* group x ceil(m / group / OQ_PACKED_W_NR) panels of kc x OQ_PACKED_W_NR floats */
};

/* Packs w ([m, kc] per group, row-major; any alignment). OQ_ENOMEM; OQ_EINVAL on bad dims. */
int oq_packed_w_pack(const float *w, int64_t m, int64_t kc, int64_t group, oq_packed_w *out) OQ_WUR;
/* Writes the packed weight back as [m, kc] (row-major). */
void oq_packed_w_unpack(const oq_packed_w *pw, float *w);
void oq_packed_w_free(oq_packed_w *pw);
/* The conv GEMM reads packed weights here: an AVX-512 CPU (and neither oq_linalg_no_avx512 nor oq_linalg_use_blas set). */
int oq_packed_w_available(void);
/*
 * oq_conv_run_epilogue with the weight as packed by oq_packed_w_pack (pw, whose m, kc
 * and group must fit g; w may then be NULL); pw NULL: oq_conv_run_epilogue.
 * Where the packed layout cannot be used (reference, another CPU, double,
 * depthwise) it is unpacked into a temporary copy.
 */
int oq_conv_run_packed(oq_kctx *k, oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const oq_packed_w *pw,
		       const void *b, const oq_kfuse *ep, void *y) OQ_WUR;

/*
 * Conv A (float32, x -> A's output, weight wa or packed cwa, bias ba,
 * epilogue epa) followed by the depthwise Conv B on A's output (wb, bb,
 * epb) into y, without A's output ever being stored whole where the
 * AVX-512 kernels run (bands of B's rows; see conv_chain.c), else as the
 * two calls. Neither epilogue may have tensor operands. Same bits as the
 * two convolutions run one after the other. OQ_EINVAL when B is not a
 * depthwise convolution of A's output.
 */
int oq_conv_chain_run(oq_kctx *k, const oq_conv_geom *ga, const float *x, const float *wa, const oq_packed_w *cwa,
		      const float *ba, const oq_kfuse *epa, const oq_conv_geom *gb, const float *wb, const float *bb,
		      const oq_kfuse *epb, float *y) OQ_WUR;

/* Calls openblas_set_num_threads(1) the first time. */
void oq_linalg_blas_init(void);
/*
 * OpenBLAS chooses its kernels once, when it is loaded, by the CPU model; on a model it does
 * not know (a virtual machine's nameless Xeon) it falls back to Prescott's SSE3 kernels. The
 * core name to ask for through OPENBLAS_CORETYPE when that left an AVX-512 CPU (F, BW, VL,
 * DQ, CD) without OpenBLAS's AVX-512 kernels ("SkylakeX"), else NULL.
 */
const char *oq_linalg_blas_core_wanted(void);

/* --- shared kernel helpers (linalg.c) --- */

/*
 * Conv / ConvTranspose geometry from x, w and the node's attributes
 * (kernel_shape, strides, dilations, pads, auto_pad, group; for transpose
 * also output_padding and output_shape). Errors name the bad attribute.
 */
int oq_linalg_conv_geom(oq_kctx *k, const oq_rt *x, const oq_rt *w, int transpose, oq_conv_geom *g) OQ_WUR;

/*
 * t's elements as a contiguous array of lt (float or double): t's own data
 * when it already has that type (*owned = 0), else a converted copy to free
 * (*owned = 1). shift, when not NULL, is subtracted per element: shift[i /
 * inner % nshift] (zero points; nshift 1 for per-tensor).
 */
int oq_linalg_load(oq_kctx *k, const oq_rt *t, oq_ltype lt, const double *shift, size_t nshift, size_t inner,
		   void **buf, int *owned) OQ_WUR;

/* MatMul shapes: numpy batch broadcasting and 1-D operands. */
typedef struct oq_mm_plan {
	int64_t m, n, kd;                  /* per item: [m, kd] x [kd, n] */
	int rank;                          /* output rank */
	int64_t dims[OQ_RT_MAX_RANK];      /* output dims */
	size_t batch;                      /* broadcast batch items */
	size_t *aoff, *boff, *coff;        /* per item element offsets (owned) */
} oq_mm_plan;

int oq_linalg_mm_plan(oq_kctx *k, const oq_rt *a, const oq_rt *b, oq_mm_plan *p) OQ_WUR;
void oq_linalg_mm_free(oq_mm_plan *p);

/* Kernels in other files of the family. */
int oq_linalg_conv_integer(oq_kctx *k);
int oq_linalg_matmul_integer(oq_kctx *k);
int oq_linalg_qlinear_conv(oq_kctx *k);
int oq_linalg_qlinear_matmul(oq_kctx *k);
int oq_linalg_einsum(oq_kctx *k);

#endif
