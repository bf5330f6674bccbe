/*
 * calibrate.h - calibration: runs sample inputs through the
 * executor and records the range of every float tensor of the main graph
 * as it is produced (an observer; nothing is buffered).
 *
 * Methods (--method, calib/histogram.h): minmax (exact), ema (moving average
 * of per-sample min/max, in sample order), and the histogram methods
 * percentile, entropy and mse, which fill each tensor's histogram (a
 * power-of-two grid set by the data alone, 2 x OQ_HIST_SIDE bins) in the
 * same single pass as the exact min/max, and turn it into a range on the
 * tensor's own activation grid at the end. Memory is O(tensors x bins) for
 * any number of samples. auto (calib/folds.h) keeps one histogram and exact
 * min/max per fold of the samples instead (memory x folds; the totals are
 * their exact merge) and picks each tensor's method by its held-out error.
 *
 * Sources: a sample folder (samples.h layouts) or "random:N[:SEED]" (N random
 * samples from the declared input types, only when asked: a warning says it
 * is not representative). Ranges are min/max over all elements of all
 * samples, NaN and Inf skipped and counted, so they do not depend on sample
 * order or thread count (all methods but ema).
 *
 * --calib-batch N concatenates up to N consecutive samples of equal shapes
 * along axis 0 (every input's batch dim must be symbolic) and runs them at
 * once; min/max and histograms are sums over elements, so the ranges are
 * those of one sample at a time (ema updates once per batch instead).
 */
#ifndef OQ_CALIBRATE_H
#define OQ_CALIBRATE_H

#include <stdio.h>

#include "calib/exec/exec.h"
#include "calib/histogram.h"
#include "src/quant/ranges.h"
#include "calib/stats_file.h"

/*
 * The activation grid of value v: *dtype (an oq_dtype) and *act_sym (OQ_ACT_*), on entry the
 * global --act-type / --act-symmetric; OQ_EUSAGE (with d filled) for impossible settings. The
 * pipeline answers with the quantize pass' own resolution (passes/quantize/quantize.c
 * oq_quantize_act_grid: profile, --act-type, node and tensor overrides).
 */
typedef int (*oq_calib_grid_fn)(void *ctx, const oq_value *v, int *dtype, int *act_sym,
                                oq_diag *d);

typedef struct oq_calib_opts {
	const char *source;  /* --calib DIR or "random:N[:SEED]" */
	int64_t max_loop_iterations; /* --max-loop-iterations (oq_exec_opts); <= 0: the default */
	int64_t max_live_bytes; /* oq_exec_opts.max_live_bytes of every executor; <= 0: no limit
				 * (no option sets it: for embedders and the fuzz targets) */
	size_t limit;        /* --calib-limit N: first N samples in lexical order; 0 = all */
	int threads;         /* executor threads; <= 0: all cores */
	FILE *progress;      /* progress / summary / warnings (stderr), or NULL for quiet */
	int method;          /* OQ_CALIB_* (0 = minmax) */
	double ema_constant; /* --ema-constant in (0, 1]; 0 = OQ_EMA_CONSTANT */
	double percentile;   /* --percentile in (0, 100]; 0 = OQ_PERCENTILE */
	int act_type;        /* activation dtype, the grid entropy/mse aim at; 0 = uint8 */
	int act_sym;         /* OQ_ACT_* (qparams.h): symmetric narrow and FP8 make percentile/mse
			      * use |x| and ranges [-t, t]; unsigned symmetric signed bins for
			      * tensors without negatives (oq_act_form) */
	oq_calib_grid_fn grid; /* per-tensor grid instead of act_type / act_sym, or NULL */
	void *grid_ctx;      /* its context */
	const uint8_t *hist_need; /* per main-graph value (oq_value.index): 1 when the quantize pass
			      * reads its range (oq_quantize_range_needs): the histogram methods
			      * keep histograms for these only (the others get min/max); NULL: all */
	size_t batch;        /* --calib-batch N: samples run together along axis 0 (symbolic batch dim); 0/1 = one */
	size_t folds;        /* --calib-folds K for --method auto (calib/folds.h), 2..OQ_FOLDS_MAX;
			      * 0 = OQ_FOLDS_DEFAULT */
	int verbose;         /* --verbose: --method auto reports each tensor's pick on progress */
	int wide_auto;       /* 1: a tensor whose grid has 16 bits or more takes --method auto's
			      * choice over the folds, whatever `method` is (mse and percentile fit
			      * the calibration samples; a 16-bit grid has resolution to spare for
			      * the headroom auto measures on held-out folds); without folds, or
			      * under ema, `method` applies. The pipeline sets it for --target-sqnr */
	uint32_t shard, n_shards; /* --shard I/N (0-based I) for oq_calibrate_stats; n_shards 0 = 1 */
	const oq_stats *stats;    /* quantize --stats: merged statistics instead of samples, or NULL */
	const char *stats_name;   /* its file name, for messages */
	const struct oq_calib_tap *tap; /* also feeds chosen samples to a tap (below), or NULL */
	struct oq_bc_pre *bc_pre; /* bias correction's float side taken by calibration, for the
			      * first float-only measurement after it (calib/biascorr/pre.h), or NULL */
	oq_observe_fn extra; /* also sees every value (graph inputs and node outputs, any dtype),
			      * e.g. bias-correction statistics; or NULL */
	void *extra_ctx;     /* its context */
	oq_stats *folds_out; /* oq_calibrate from samples: also the per-fold statistics (folds.h:
			      * oq_folds_count(folds, samples) folds, whatever the method; ema: none),
			      * as oq_calibrate_stats writes them for --method auto; the ranges are
			      * the same bits either way. NULL: not kept */
	int need_only;       /* 1 (quantize): main-graph values hist_need marks 0 are not observed at
			      * all (no range: the quantize pass reads none of them), so their
			      * scans cost nothing and the executor may keep their groups fused */
	unsigned skip_qmark; /* values with (qmark & skip_qmark) need no range: the executor may keep
			      * its fused Conv groups whose intermediates all carry such a mark (no
			      * range is then reported for those); 0 = every value */
} oq_calib_opts;

/*
 * A tap: a second observer that calibration feeds with the samples it picks while it runs them
 * (bias correction's float side: calib/biascorr/pre.h). Its calls come from the lane running
 * the sample (lanes stay on), so it guards what samples share; it cannot fail calibration (a
 * tap that runs out of memory marks itself unusable). Samples of --calib-batch runs and
 * statistics files are not fed.
 */
typedef struct oq_calib_tap {
	void *ctx;
	/* plan time: 1 when v must be materialised (no fused group of the executor hides it) */
	int (*want)(void *ctx, const oq_value *v);
	/* sample i (absolute index of total) begins: *stage the tap's state for it, or NULL when
	 * the tap does not take the sample */
	void (*begin)(void *ctx, size_t i, size_t total, void **stage);
	/* a value of a sample taken (graph inputs and node outputs, any dtype) */
	void (*observe)(void *ctx, void *stage, const oq_value *v, const oq_rt *t);
	/* the run of sample i ended (after every begin that gave a stage): its nout outputs, which
	 * the tap may move out of outs; outs NULL: the run failed */
	void (*end)(void *ctx, void *stage, size_t i, oq_rt *outs, size_t nout);
} oq_calib_tap;

/*
 * Sample lanes (calibrate.c): -1 (default) runs the samples after the
 * first T at a time on T executors sharing one plan when T threads are
 * asked for and memory allows; 0 never; N > 0 at most N lanes. The ranges,
 * histograms and statistics files are the same bits either way (tests).
 */
extern int oq_calib_lanes;
/* Lanes for `threads` threads when each lane beyond the first holds per_lane bytes: the thread
 * count (capped by oq_calib_lanes > 0), or 0 (none) for one thread, oq_calib_lanes 0, or when
 * the extra lanes would take more than a quarter of the machine's memory. */
size_t oq_calib_lane_count(int threads, size_t per_lane);

/*
 * Observes graph inputs and every node output of the main graph whose
 * dtype is float32/float16/bfloat16/double; *out receives one range per
 * observed tensor, sorted by name. An empty folder is OQ_EINVAL; bad
 * samples are reported before anything runs (oq_samples_check).
 */
int oq_calibrate_minmax(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d) OQ_WUR;

/*
 * The same with o->method and its settings (oq_calibrate_minmax reads only
 * source, limit, threads and progress). Bad settings are OQ_EUSAGE, e.g.
 * entropy on a 16-bit grid (2^15 target bins do not fit the histogram),
 * also when only one tensor's grid (o->grid) is 16-bit.
 */
int oq_calibrate(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d) OQ_WUR;

/*
 * One shard's mergeable statistics (`onnxq calibrate`, calib/stats_file.h), one
 * pass over the shard's samples: the exact min/max of every tensor, and for
 * percentile/entropy/mse its histogram (auto: per fold, samples assigned to
 * folds by their index in the whole set). ema is OQ_EUSAGE: its moving
 * average depends on the sample order.
 *
 * oq_calibrate with o->stats set runs no sample: it checks the file against
 * the model and the method (complete, histograms for a histogram method)
 * and picks the ranges from it, exactly as a one-machine run on the same
 * samples would (any histogram method and grid can use a histogram file;
 * auto needs one with folds, and o->folds, when set, must give its fold count).
 */
int oq_calibrate_stats(oq_model *m, const oq_calib_opts *o, oq_stats *out, oq_diag *d) OQ_WUR;

/*
 * The ranges o->method picks from the statistics of every fold of s (a folds file, or what
 * folds_out received) but fold `held`: what calibrating on the other folds' samples would
 * give (auto: its selection over those k - 1 folds; mse when that leaves one). For held-out
 * error estimates: the ranges are judged on the samples of fold `held`. held == k: every fold
 * (the ranges of all samples, e.g. on other grids than calibration's). Quiet (no report).
 */
int oq_calibrate_held_out(oq_model *m, const oq_calib_opts *o, const oq_stats *s, size_t held,
			  oq_ranges *out, oq_diag *d) OQ_WUR;

#endif
