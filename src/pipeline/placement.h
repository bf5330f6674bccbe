/*
 * placement.h - runtime-aware placement for the ORT profile (--prefer speed
 * | balanced): which Conv/Gemm/MatMul units run as ONNX Runtime's integer
 * kernels and which stay float (float weights, no Q/DQ inside), chosen
 * between the calibration and the quantize pass (the speed search, which
 * needs no ranges, may run before calibration: oq_placement_speed).
 *
 * A unit is a Conv / Gemm / MatMul whose weight the quantize pass would
 * quantize, with the elementwise nodes that compute only from its output
 * (its activation: a decomposed HardSwish or SiLU, a HardSigmoid gate, a
 * constant affine chain). Integer: QLinearConv and the activation's QLinear
 * ops; float: the float model's NCHWc kernels, a DQ before and a Q after it
 * where its neighbours are integer.
 *
 * speed: the assignment with the least expected time under the cost model
 * of src/report/coverage.h (descents by run flips from all units integer
 * and from all float, Q/DQ boundaries counted; on graphs too large for the
 * descents, OQ_PLACEMENT_SEARCH_WORK, the better of the two ends), on the value sizes of one
 * run of the float model: on the declared input shapes when they are fixed
 * (a symbolic batch dim 1), so `quantize --stats` places as `--calib` does,
 * else on the first calibration sample (none with --stats: every unit
 * integer); every unit float when
 * that saves less than 1 - OQ_PLACEMENT_MARGIN of the expected time. A float
 * unit ORT would quantize itself (Conv -> Relu|Clip between a DQ and a Q:
 * WeightBiasQuantization, per-tensor weights) stays integer.
 * balanced: then (with calibration samples from a folder, not --stats) an
 * estimate of the written model's output SQNR on unseen inputs (mean over
 * samples and float outputs) on the first OQ_PLACEMENT_SAMPLES calibration
 * samples, against the accuracy-first placement's (--prefer accuracy).
 * Held out as the fold SQNR is (fidelity.h): each sample is judged by the
 * model quantized with its fold's ranges (from the other folds' statistics;
 * when those hold fewer than OQ_PLACEMENT_MIN_TRAIN samples, with the
 * calibration ranges). With empirical bias correction, whose last round
 * removes the last layer's mean error per channel, an output that layer
 * writes has that mean error, estimated on the other folds' samples,
 * removed (the larger SQNR of with and without: a correction that does not
 * help is not kept). When more than
 * OQ_PLACEMENT_BUDGET_DB below, the integer units are cut into up to 8
 * groups of consecutive units (graph order, about equal MACs) and groups go
 * float one per round until the budget holds: each round measures every
 * group still integer with it float on top of those floated so far, and
 * floats the one gaining most dB per expected nanosecond lost (a group
 * gaining less than OQ_PLACEMENT_MIN_GAIN_DB is not floated: when none
 * gains that much, the summary says how far the budget was missed and which
 * groups of integer units trade it). Re-measuring each round finds an error
 * another one masked (a clipped value downstream of a worse one). When the
 * units still integer then save less than 1 - OQ_PLACEMENT_MARGIN of the
 * all-float time, every unit goes float, as after the speed search.
 * A round's candidates differ from the current placement's model from
 * their group on: that model runs the samples once, keeping the values the
 * candidates read there, and each candidate runs only from its group on
 * (tails, calib/biascorr/measure.h), with the estimates of whole runs.
 * Deterministic: the measurements are thread-independent
 * (calib/biascorr/measure.h).
 */
#ifndef OQ_PLACEMENT_H
#define OQ_PLACEMENT_H

#include "src/pipeline/pipeline.h"
#include "src/report/coverage.h"

/* Fidelity the balanced placement may give up against the accuracy-first one, dB. */
#define OQ_PLACEMENT_BUDGET_DB 1.0
/* Integer units only when the cost model expects them to take at most this share of the time
 * all units float take (room for the cost model's error, largest on small models). */
#define OQ_PLACEMENT_MARGIN 0.85
/* The balanced search measures on the first this many calibration samples (each candidate model
 * runs them all, a round's from its group on: its cost is about the number of candidates times
 * this). */
#define OQ_PLACEMENT_SAMPLES 8
/* A fold's ranges judge its samples only when the other folds hold at least this many samples
 * (ranges from fewer judge a coarser calibration than the written model's). */
#define OQ_PLACEMENT_MIN_TRAIN 8
/* A group goes float for fidelity only when that alone gains at least this much, dB. */
#define OQ_PLACEMENT_MIN_GAIN_DB 0.2
/* The speed search descends only while units x (nodes + values) is at most this (each step
 * evaluates the whole graph); past it all integer or all float. */
#define OQ_PLACEMENT_SEARCH_WORK 2e6
/* keep_from_wbq's passes at most (each evaluates the whole graph). */
#define OQ_PLACEMENT_WBQ_ROUNDS 16

/* What the balanced search measures with: the run's own calibration and float model. */
typedef struct oq_placement_src {
	const oq_calib_opts *co; /* the calibration options of the run (its grid included) */
	const oq_stats *folds;   /* its per-fold statistics (n_folds < 2: none, or freed: fr) */
	const oq_ranges *fr;     /* fr_k held-out ranges, fold f's from the other folds' statistics
				  * (oq_calibrate_held_out), made before the statistics were freed;
				  * NULL: made here from folds */
	size_t fr_k;
	uint64_t fr_total;       /* the samples the folds cut */
	/* a fresh copy of the float model as the run quantizes it: loaded, widened from float16 /
	 * bfloat16 as the run widens it, the rewrites run with q */
	int (*float_copy)(void *ctx, const oq_opts *q, oq_model **out, oq_diag *d);
	void *ctx;
} oq_placement_src;

/* What the placement chose (for the summary), and the node list it hands the quantize pass. */
typedef struct oq_placement {
	char **float_nodes;     /* sorted names of the nodes of float units (owned) */
	size_t n_float_nodes;
	size_t n_units;         /* units considered */
	size_t n_float_speed;   /* float because the cost model finds them faster so */
	size_t n_float_fidelity;/* float for fidelity (balanced) */
	double est_ratio;       /* expected time of the units + boundaries, chosen / all float */
	int within_margin;      /* every unit float: the best assignment found saved too little
				 * (OQ_PLACEMENT_MARGIN) */
	int measured;           /* balanced measured the SQNRs below */
	double sqnr_accuracy, sqnr_speed, sqnr_chosen; /* calibration-sample output SQNR, mean dB */
	/* the float model's value sizes by name (sorted), for the coverage of the quantized model */
	char **size_names;
	int64_t *size_n, *size_last;
	size_t n_sizes;
	int speed_done;         /* the sizes and speed search ran (oq_placement_speed) */
	struct oq_placement_state *st; /* their units, for oq_placement_choose (private) */
} oq_placement;

void oq_placement_free(oq_placement *p);

/*
 * Element counts of m's main-graph values from one run of the first sample
 * of co->source (a folder, or random data for "random:N[:SEED]").
 */
int oq_value_sizes_measure(oq_model *m, const oq_calib_opts *co, oq_value_sizes *out, oq_diag *d) OQ_WUR;

/*
 * The tensors calibration keeps histograms for: oq_quantize_range_needs of
 * q, and with --prefer balanced also of the accuracy-first placement (which
 * the search measures against). Leaves m's marks as fuse sets them for q.
 */
int oq_placement_range_needs(oq_model *m, const oq_opts *q, uint8_t *need, oq_diag *d) OQ_WUR;

/*
 * Sizes of g's values from p's by name (the quantized model keeps its float model's value names;
 * a value not found is -1). OQ_OK with out empty when p has none.
 */
int oq_placement_sizes(const oq_placement *p, const oq_graph *g, oq_value_sizes *out) OQ_WUR;

/*
 * The first half of oq_placement_choose, which needs no ranges: the value sizes and the speed
 * search, kept in p for oq_placement_choose (run before calibration, m's graph unchanged
 * between the two). When that leaves every unit float (oq_placement_all_float), q->float_nodes
 * is set to them already, so that oq_quantize_range_needs sees what the quantize pass will.
 */
int oq_placement_speed(const oq_pipeline_opts *o, oq_opts *q, oq_model *m, oq_placement *p, FILE *log,
		       oq_diag *d) OQ_WUR;
/* Did the speed search run for the runtime-aware placement and leave every unit float? */
int oq_placement_all_float(const oq_placement *p);

/*
 * Chooses the placement for q (ranges set, m the rewritten float model) and
 * sets q->float_nodes to p's list; for other profiles, --prefer accuracy
 * and types without integer kernels only the value sizes are measured (for
 * the summary's coverage). Notes on log.
 */
int oq_placement_choose(const oq_pipeline_opts *o, const oq_placement_src *src, oq_opts *q, oq_model *m,
			oq_placement *p, FILE *log, oq_diag *d) OQ_WUR;

#endif
