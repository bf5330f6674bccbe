/*
 * pre.h - empirical bias correction's float side, taken while calibration
 * runs the same samples.
 *
 * Bias correction's first measurement runs the float model alone over the
 * samples its measurements use (oq_bc_measure: at most OQ_MEASURE_SAMPLES of
 * calibration's, evenly spread) for two things: the float outputs (kept in
 * an oq_bc_float_cache) and each layer's per-channel sums of its measured
 * output, per sample. Calibration runs those samples through the same float
 * model first. A pre is calibration's tap (calibrate.h) that takes both on
 * the way: the outputs into its own cache, and per sample a stage of sums for
 * every layer bias correction may measure (oq_bc_targets_find on the model
 * before calibration: the placement only removes layers). The first
 * float-only oq_bc_measure on the same samples then commits these stages in
 * sample order, as its own run would commit them (measure.c), and takes the
 * cache over instead of running the float model.
 *
 * Same bits: a value the tap wants is materialised by calibration's executor
 * as by bias correction's (no fused group hides it) and summed by the same
 * function (oq_bc_channel_sums); stages are added in sample order whatever
 * lane ran them. When the pre does not cover a measurement (a layer it has
 * no stage for, other samples, a sample not run, outputs past the cache's
 * limit, a tap out of memory), the measurement runs the float model as
 * before: the pre only ever saves runs.
 *
 * Cost during calibration: the wanted layer outputs stay materialised (a
 * Conv's activation no longer fused into it) and the measured samples' sums
 * and outputs are taken; memory: a stage of one double per layer channel for
 * each measured sample, and the outputs (as the cache would hold them).
 */
#ifndef OQ_BC_PRE_H
#define OQ_BC_PRE_H

#include "calib/biascorr/biascorr.h"
#include "calib/biascorr/measure.h"

typedef struct oq_bc_pre oq_bc_pre;

/*
 * A pre for calibrating g (the float model after the rewrites; bias correction later measures
 * this same model) with options co (its samples: co->source, co->limit), the layers those of
 * quantize options q. out_limit > 0 (and below co->limit, if any): also the float outputs alone
 * on the first out_limit samples (the placement's measurements).
 */
int oq_bc_pre_new(oq_graph *g, const oq_opts *q, const oq_calib_opts *co, size_t out_limit, oq_bc_pre **out,
		  oq_diag *d) OQ_WUR;
/* 1 (default): the pipeline takes a pre where empirical bias correction follows; 0: none (tests
 * compare the two). */
extern int oq_bc_pre_use;
/* The tap to give calibration (oq_calib_opts.tap). */
const oq_calib_tap *oq_bc_pre_tap(oq_bc_pre *p);
void oq_bc_pre_free(oq_bc_pre *p);

/* For measure.c. The set of p that holds every sample of a measurement of o's samples (n of them,
 * nout outputs, a cache of that limit), or -1. */
int oq_bc_pre_ready(const oq_bc_pre *p, const oq_calib_opts *o, size_t limit, size_t *n, size_t *nout);
/* The layer of set `set` measuring value `measured` with M channels (ch_last as oq_bc_target's),
 * or -1 (also for a set of outputs alone). */
long oq_bc_pre_layer(const oq_bc_pre *p, int set, const char *measured, size_t M, int ch_last);
/* Sample i's stage of layer l: its M channel sums, the elements per channel, whether the value
 * did not fit (dtype, channels). */
void oq_bc_pre_stage(const oq_bc_pre *p, int set, size_t i, long l, const double **S, uint64_t *cnt, int *bad);
/* Moves the set's float outputs into c (empty; its limit and peaks kept) and frees its stages:
 * the set is spent (no longer ready). */
void oq_bc_pre_take(oq_bc_pre *p, int set, oq_bc_float_cache *c);

#endif
