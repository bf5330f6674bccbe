/*
 * fidelity.h - the held-out ("fold") SQNR of a quantization, measured on the
 * calibration samples themselves.
 *
 * The samples are cut into k folds as calibration cuts them (calib/folds.h:
 * contiguous blocks in lexical order, k = --calib-folds, default 4, fewer
 * when there are fewer than 2k samples). For each fold f the ranges are
 * computed from the statistics of the other k - 1 folds
 * (oq_calibrate_held_out), the float model is quantized with them by the
 * caller's `make` (the same passes and options as the written model), and
 * the samples of fold f run through the float model and that quantized
 * model. So every sample is judged by a model whose ranges never saw it,
 * as unseen inputs will be. The ranges come from every sample; the runs
 * from at most OQ_MEASURE_SAMPLES of them (calib/samples.h: evenly spread,
 * each judged in the fold it belongs to).
 *
 *   output SQNR = 10 log10( sum r^2 / sum (r - q)^2 )   dB
 *
 * pooled over all samples (each with its fold's model): r the float model's
 * output, q the quantized one's (`onnxq compare` reports per-sample SQNR
 * and their min and mean; the pooled figure lies between min and max).
 *
 * Per quantization point (each QuantizeLinear of an activation, each
 * DequantizeLinear of an initializer) the "own" SQNR: sum x^2 over sum
 * (x - dq(q(x)))^2 of the point's own input, x as the quantized model
 * computes it on the held-out samples (activations) or the float
 * initializer (weights, biases): how much error the point adds where it
 * sits, not its effect on the outputs (that is `onnxq analyze`).
 *
 * Cost: the float model and one quantized model run each sample once more
 * (about two inferences per sample; one when the float outputs are given,
 * oq_fidelity_measure_ranges), plus k quantize passes. With T threads the
 * samples of a fold after its first run T at a time (lanes: one executor
 * clone each, so T arenas). The quantized models run with their weights'
 * DequantizeLinear folded into the plan (oq_exec_opts.fold_dq, as bias
 * correction's): a MatMul / Gemm computes as the float model's does.
 * Deterministic: sums in double, added in sample order; an output's sums
 * element by element, a point's per sample (in a fixed order of partial
 * sums) and then added: the same bits for any thread count.
 */
#ifndef OQ_FIDELITY_H
#define OQ_FIDELITY_H

#include <stdio.h>

#include "calib/calibrate.h"
#include "calib/stats_file.h"

struct oq_bc_float_cache;

/* One quantization point of the quantized models. */
typedef struct oq_fid_point {
	char *name;    /* the float model's value (activation) or initializer (weight) name */
	int weight;    /* 1: an initializer's DequantizeLinear; 0: an activation's QuantizeLinear */
	double r2, d2; /* sum x^2, sum (x - dq(q(x)))^2: weights over the elements (fold 0's model),
			* activations over the held-out values of every fold */
} oq_fid_point;

/* A measurement. */
typedef struct oq_fidelity {
	size_t k, n;        /* folds, samples run (at most OQ_MEASURE_SAMPLES) */
	size_t n_all;       /* samples the folds cut (n of them run) */
	size_t n_out;
	char **out;         /* the float model's output names */
	double *r2, *d2;    /* per output: sum r^2, sum (r - q)^2 over all samples (float32 outputs;
			     * others: both 0) */
	oq_fid_point *pt;   /* the points of fold 0's model, in its node order */
	size_t n_pt;
} oq_fidelity;

/* A quantization point as one quantized model applies it. */
typedef struct oq_qpoint {
	char *name;          /* the float model's value (activation) or initializer (weight) name */
	int weight;          /* 1: an initializer's DequantizeLinear; 0: an activation's QuantizeLinear */
	const oq_value *fv;  /* that value in the float model */
	const oq_value *x;   /* in the quantized model: the Q's input, or the DQ's integer initializer */
	const oq_tensor *s;  /* scale (float32), one value or one per channel of axis */
	const oq_tensor *z;  /* zero point (its dtype gives the grid), or NULL: uint8, 0 */
	int axis;
	int64_t qmin, qmax;
	float lo, hi;        /* the float value is x clamped to [lo, hi] (a Relu or Clip the quantize
			      * pass folded into this Q, which reads the activation's input) */
} oq_qpoint;

/* The points of quantized model qm (Q/DQ nodes of its main graph, node order) that name a value
 * of fm: activations whose Q has a float32 scale and no block_size, weights whose float
 * initializer has the integer one's size. Blocked points are not points here. */
int oq_qpoints(const oq_model *fm, const oq_model *qm, oq_qpoint **out, size_t *n, oq_diag *d) OQ_WUR;
void oq_qpoints_free(oq_qpoint *p, size_t n);
/* Does q apply to a tensor of this shape (one scale, or one per channel of its axis)? */
int oq_qpoint_fits(const oq_qpoint *q, const int64_t *dims, int rank);
/* The channel (scale index) of element i of such a tensor. */
size_t oq_qpoint_channel(const oq_qpoint *q, const int64_t *dims, int rank, size_t i);
/* dq(q(x)) on channel c: QuantizeLinear then DequantizeLinear, as ONNX Runtime computes them. */
float oq_qpoint_fake(const oq_qpoint *q, size_t c, float x);

/*
 * A point's own sums over one block of n <= 256 values x of one channel: with r = x clamped to
 * [lo, hi] and f = dq(q(x)) on scale s with integer bounds qlo = qmin - z, qhi = qmax - z (z the
 * zero point, both bounds within 2^22 of it), *r2 += sum r^2 and *d2 += sum (r - f)^2, in double,
 * element k into partial sum k % 8, the partials combined pairwise and added last: the same bits
 * on every path. oq_fidelity_simd 1 (default) takes the CPU's best vector loop (AVX-512, else
 * AVX2), 2 at most AVX2, 0 the portable loop (tests compare them).
 */
void oq_fidelity_sq_block(const float *x, size_t n, float s, float qlo, float qhi, float lo, float hi,
			  double *r2, double *d2);
extern int oq_fidelity_simd;

/* A quantized copy of the float model with ranges r (the caller's passes and options). */
typedef int (*oq_fid_make_fn)(void *ctx, const oq_ranges *r, oq_model **out, oq_diag *d);

/*
 * Measures as above: fm the float model after the rewrites (calibration's graph), co the
 * calibration options of the run (source a sample folder; limit, threads, grid), folds its
 * per-fold statistics (oq_calib_opts.folds_out; n_folds >= 2). OQ_EINVAL when the samples
 * are not those of folds.
 */
int oq_fidelity_measure(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, oq_fid_make_fn make,
			void *ctx, oq_fidelity *out, oq_diag *d) OQ_WUR;

/*
 * The measurement in two steps, so that the per-fold statistics (histograms: most of a quantize's
 * memory) can be freed before it runs: the held-out ranges of each fold of folds (fr[f]: the ranges
 * of every fold but f, oq_calibrate_held_out; folds->n_folds entries, oq_fidelity_ranges_free),
 * then the measurement with them (n_folds folds of n_total samples). Together the same as
 * oq_fidelity_measure, bit for bit. fout (or NULL): fm's outputs on the samples as its executor
 * computes them (bias correction's float outputs, calib/biascorr/measure.h, state 1): then fm is
 * not run again, nor planned (each fold's quantized executor scans and loads the samples; used
 * only when fout holds as many samples as the measurement runs).
 */
int oq_fidelity_ranges(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, oq_ranges **fr,
		       oq_diag *d) OQ_WUR;
void oq_fidelity_ranges_free(oq_ranges *fr, size_t k);
int oq_fidelity_measure_ranges(oq_model *fm, const oq_calib_opts *co, const oq_ranges *fr, size_t n_folds,
			       uint64_t n_total, const struct oq_bc_float_cache *fout, oq_fid_make_fn make,
			       void *ctx, oq_fidelity *out, oq_diag *d) OQ_WUR;

void oq_fidelity_free(oq_fidelity *f);

/* 10 log10(r2 / d2): +inf when d2 is 0, -inf when only r2 is, NaN on NaN. */
double oq_fidelity_db(double r2, double d2);

/* dB as text: one decimal, "inf", "-inf" or "nan", right-aligned in width characters. */
void oq_fidelity_put_db(FILE *f, int width, double v);
/* dB in JSON as `onnxq compare --json` writes it: +inf 999, -inf -999, NaN null. */
void oq_fidelity_json_db(FILE *f, double v);

/* Indices of the points by own SQNR, worst first (ties: node order); n_pt entries (owned). */
size_t *oq_fidelity_rank(const oq_fidelity *f);

#endif
