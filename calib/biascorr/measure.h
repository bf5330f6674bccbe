/*
 * measure.h - empirical bias correction's measurement (AIMET's empirical
 * mode). The calibration samples run through the float model and one or
 * more quantized ones side by side; for every layer of an oq_bc_targets
 * (tables.h) the observer sums the measured output per channel and fold in
 * the float model and in one quantized model, and the model outputs give
 * each quantized model's SQNR per fold, which decides whether a round of
 * correction is kept (empirical.c).
 *
 * Determinism: sums are double, added in sample order and in a fixed
 * element order on the calling thread, and the executor's results do not
 * depend on its thread count, so neither do the corrections.
 */
#ifndef OQ_BC_MEASURE_H
#define OQ_BC_MEASURE_H

#include "calib/biascorr/tables.h"
#include "calib/calibrate.h"

/*
 * Each sample's output errors, for a caller that estimates and removes a
 * mean output shift itself (placement.c): per sample and float output
 * sum r^2 and sum (r - q)^2, and for output `out` per channel the sum of
 * q - r (channel axis 1, or the last with ch_last). Each sample's sums are
 * taken on the lane that ran it, element order fixed: thread-independent.
 */
typedef struct oq_bc_outerr {
	const char *out;   /* in: the output whose channel sums are wanted (NULL: none) */
	size_t M;          /* in: its channels (a sample whose output lacks them: cnt 0) */
	int ch_last;       /* in: its channel axis is the last, else 1 */
	size_t n, nout;    /* out: samples, outputs */
	size_t out_k;      /* out: the index of `out` among them (SIZE_MAX: none) */
	double *r2, *d2;   /* out: n x nout, sample-major (NaN: not run, or not a float32 pair) */
	double *e;         /* out: n x M: sum (q - r) per sample and channel */
	uint64_t *cnt;     /* out: per sample: elements per channel of `out` (0: not summed) */
} oq_bc_outerr;

void oq_bc_outerr_free(oq_bc_outerr *e);

/*
 * A tail run: a candidate that differs from a base model only in the initializers read by the
 * nodes of `part` (one layer's bias: its node, a bias DequantizeLinear, what computes from them)
 * runs only those nodes, the values they read from the rest taken from the base model's run of
 * the same sample (oq_exec_run_part): the same outputs, bit for bit, at the cost of the tail.
 * A measurement of the base with `keep` set copies those values for every sample it runs; one
 * of a candidate with `from` set (state 1, the candidate checked by oq_bc_prefix_fits, or a view
 * below) runs the tails. The kept values go to an unlinked temporary file when one can be made
 * (as the float outputs below) and are read back for each tail run, up to
 * OQ_BC_PREFIX_FILE_BYTES; else they are copies in memory, up to OQ_BC_PREFIX_BYTES, a small
 * share of a run's memory (a value whose copies on the samples the base runs would pass the
 * budget is not copied at all): past it, state -1 and full runs.
 */
typedef struct oq_bc_prefix {
	unsigned char *part;  /* per node of the base's main graph: computed by a tail run */
	size_t n_nodes, n_values;
	size_t *vidx, nk;     /* the values a tail run reads and does not compute (value indices) */
	long *kmap;           /* per value: its index in vidx, or -1 */
	oq_rt *kept;          /* n x nk (owned where `have`), sample-major */
	unsigned char *have;  /* n x nk: kept[k] holds a copy */
	size_t n;
	int state;            /* 0: planned, nothing kept; 1: kept (a sample the base ran); -1: none */
	size_t *at;           /* n x nk: a kept value's offset in the file (its kept entry holds its type
			       * and shape only), SIZE_MAX: in memory */
	int fd, has_fd;       /* the kept values' unlinked temporary file (as the float outputs') */
	const struct oq_bc_prefix *src; /* a view (oq_bc_prefix_view): value k is src's kept value in
					 * slot slot[k] (kept, have, at NULL here) */
	size_t *slot;
} oq_bc_prefix;

/* The budget of kept copies in memory, and in the temporary file (the page cache's, not the
 * process' memory: read back for each tail run) */
#define OQ_BC_PREFIX_BYTES ((size_t)16 << 20)
#define OQ_BC_PREFIX_FILE_BYTES ((size_t)256 << 20)

/*
 * Plans p on base model qm for a change of the initializers read by nodes[0..nn) (the layers
 * whose biases a round corrects): part = those nodes, every node downstream of them, and the
 * nodes computing only from initializers whose outputs part reads (a bias DequantizeLinear);
 * the values kept: what part reads from the rest, and the graph outputs it does not compute
 * (values of the main graph only: a graph input or a body's value read there leaves p at -1).
 */
int oq_bc_prefix_plan(const oq_model *qm, oq_node *const *nodes, size_t nn, oq_bc_prefix *p, oq_diag *d) OQ_WUR;
/* Does candidate cm differ from base bm (p's plan) only in initializers that part alone reads,
 * with the same nodes and values (by name and op) otherwise? */
int oq_bc_prefix_fits(const oq_bc_prefix *p, const oq_model *bm, const oq_model *cm);
void oq_bc_prefix_free(oq_bc_prefix *p);

/*
 * Tails of candidates whose graphs differ from the base's in their nodes (placement.c: a group
 * of units left float loses Q/DQ pairs, reads other values). The base run keeps the values of
 * several plans at once: u := the union of the kept values of p[0..n) (planned on one model;
 * those at state -1 add nothing; u->part NULL; u->state -1 when none is planned). After that
 * run (state 1), a candidate cm gets a view of what it kept: v's nodes are cm's that differ
 * from bm's (a node is the same when bm has a node writing its outputs, by name, with the same
 * op, attributes and inputs, each the same value: same-named initializers of equal contents,
 * graph inputs, outputs of nodes the same), what they reach, the constant feeders they read,
 * and, where a value they read is the same but was not kept, its producer (to kept values or
 * initializers); v reads the base's copies (v->src). A graph input so reached, a body graph in
 * either model, or a base not kept: v->state -1 (a whole run). With v's nodes computed from
 * those values, cm's outputs are those of its whole run, bit for bit.
 */
int oq_bc_prefix_union(const oq_bc_prefix *p, size_t n, oq_bc_prefix *u, oq_diag *d) OQ_WUR;
int oq_bc_prefix_view(const oq_bc_prefix *base, const oq_model *bm, const oq_model *cm, oq_bc_prefix *v,
		      oq_diag *d) OQ_WUR;
/* 1 (default): candidates that fit run their tails only; 0: full runs (tests compare the two). */
extern int oq_bc_tail;
/* Tail runs made so far (tests). */
extern size_t oq_bc_tail_runs;

/* One quantized model of a measurement. */
typedef struct oq_bc_quantized {
	oq_model *qm;           /* same inputs and outputs as the float model */
	oq_node *const *nodes;  /* per layer: the node whose output 0 is the layer's measured value in
				 * qm (NULL entries: that layer failed); NULL: SQNR only, no sums */
	unsigned folds;         /* bit f set: runs the samples of fold f (sample i % OQ_BC_FOLDS) */
	oq_bc_sqnr sqnr;       /* out: output SQNR on the folds it ran (n 0 on the others), per
				 * sample too (the caller frees it: oq_bc_sqnr_free) */
	size_t lo, hi;          /* and only samples lo <= i < hi (hi 0: no bound) */
	size_t every;           /* and only samples with (i / OQ_BC_FOLDS) % every == 0 (0, 1: no
				 * bound): consecutive samples of every fold, evenly spread */
	oq_bc_outerr *err;      /* optional: also each sample's errors (allocated by the first
				 * measurement that fills it, whose n and nout then stay: a later
				 * one rewrites the rows of the samples it runs; the caller frees
				 * them: oq_bc_outerr_free) */
	oq_bc_prefix *keep;     /* optional: qm is the base of these tails (state 0: copy them) */
	const oq_bc_prefix *from; /* optional: run the tails of p (state 1; nodes NULL: no sums) */
} oq_bc_quantized;

/*
 * The float model's outputs on every sample, kept from one measurement to
 * the next (the float model and the samples do not change between rounds,
 * only the quantized models do), up to a byte limit. A sample whose outputs
 * are all plain tensors is kept in an unlinked temporary file (in $TMPDIR,
 * else /tmp) rather than in memory, and read back where it is used
 * (oq_bc_float_cache_get): the outputs of 32 samples are often the largest
 * thing bias correction and the fold report would hold (a recognizer's
 * per-step probabilities, a detector's map), and the page cache keeps them
 * only while memory is free. No file (it cannot be made or written): memory.
 */
typedef struct oq_bc_float_cache {
	oq_rt *out;    /* n x nout outputs, sample-major (owned); a spilled sample's hold their types and
			* shapes only (data NULL) */
	size_t *at;    /* n: file offset of sample i's outputs (one after the other), SIZE_MAX: in out */
	int fd;        /* the file, when has_fd */
	int has_fd;
	size_t fsize;  /* bytes written to it */
	size_t n, nout;
	size_t bytes;  /* payload bytes kept (in memory or in the file) */
	size_t limit;  /* at most this many bytes; 0: OQ_BC_FLOAT_CACHE_BYTES */
	int state;     /* 0: empty; 1: filled by a float-only oq_bc_measure (out and every layer's
			* sum_f / n_f are the float model's on all samples); -1: the same call found the
			* outputs over the limit: sum_f / n_f are valid, the float model runs each time */
	size_t peak_f, peak_q; /* the largest arena peak a float / quantized executor reached in the
				* passes so far (0: none yet; kept by oq_bc_float_cache_free): a later
				* pass sizes its lanes from them instead of running its first sample
				* alone to measure it (the models a caller measures differ in a few
				* nodes; the lane count changes no result) */
} oq_bc_float_cache;

#define OQ_BC_FLOAT_CACHE_BYTES ((size_t)512 << 20)

/* Frees the outputs (closes the file) and resets *c to empty (limit kept). */
void oq_bc_float_cache_free(oq_bc_float_cache *c);
/*
 * Sample i's nout float outputs (c->state 1): *out = c's own entries when in memory, else buf[0..nout)
 * (empty on entry), filled from the file, which the caller releases after use (oq_rt_release).
 * OQ_EIO (naming the file's trouble) or OQ_ENOMEM.
 */
int oq_bc_float_cache_get(const oq_bc_float_cache *c, size_t i, oq_rt *buf, const oq_rt **out,
			  oq_diag *d) OQ_WUR;
/* 0: keep the outputs in memory only (tests compare the two). */
extern int oq_bc_spill;
/* An empty c (limit kept) set up for n samples of nout outputs, state 1: OQ_OK or OQ_ENOMEM. */
int oq_bc_float_cache_init(oq_bc_float_cache *c, size_t n, size_t nout) OQ_WUR;
/* Keeps sample i's outputs of[0..nout) in c (state 1; moved out of `of` unless borrowed, else
 * copied): OQ_OK, also when they would pass the limit (c is then freed, state -1), or
 * OQ_ENOMEM. */
int oq_bc_float_cache_keep(oq_bc_float_cache *c, size_t i, oq_rt *of) OQ_WUR;

/*
 * Adds t's sums per channel to S[0..M) (the channel axis 1, or the last with ch_last; each
 * channel's run of elements summed by oq_bc_sum_f32, runs in memory order) and the elements per
 * channel to *n: 0, or -1 when t is not a float32 tensor with M channels there.
 */
int oq_bc_channel_sums(const oq_rt *t, size_t M, int ch_last, double *S, uint64_t *n);

/*
 * Runs the samples of o->source (a folder; o->limit applies, then at most
 * OQ_MEASURE_SAMPLES of them, evenly spread (oq_samples_thin): sample i
 * below, and lo and hi, index that list; o->batch does not apply: one sample
 * at a time) through ref (float) and the quantized models runs[0..n_runs)
 * side by side: each sample runs ref once and every model
 * whose folds include the sample's. ref_nodes[i]: the node whose output 0 is
 * layer i's measured value in ref (NULL marks the layer failed). Resets and
 * fills every layer's sum_f / n_f from ref and sum_q / n_q from the run
 * with nodes (at most one may have them), per fold (a measured value that
 * is not float32 or lacks M channels on its channel axis marks the layer
 * failed), and each run's sqnr over the float32 outputs. With no runs and
 * an empty cache, the float model alone runs every sample: the cache gets
 * its outputs and the layers its sums. With a cache so filled (same ref,
 * samples and layers), the float sums stay and the float model runs only
 * if its outputs were over the limit; cache may be NULL. A random source
 * is OQ_EUNSUP (nothing to measure on). Models are run one after the other;
 * with several threads the samples run several at a time (after the first
 * of a pass, unless the cache knows an earlier pass' executor memory:
 * measure.c's lanes, as calibration's; oq_calib_lanes applies), each
 * sample's sums staged and added in sample order, so the sums and SQNRs do
 * not depend on the thread count, bit for bit.
 */
int oq_bc_measure(oq_model *ref, oq_node *const *ref_nodes, oq_bc_quantized *runs, size_t n_runs,
		   const oq_calib_opts *o, oq_bc_targets *b, oq_bc_float_cache *cache, oq_diag *d) OQ_WUR;

/* The most samples the last oq_bc_measure ran at a time (1: one after the other). */
extern size_t oq_bc_measure_lanes;

/*
 * p[0..n) summed in double, the order fixed (so the bits): element j into partial sum j % 8 while
 * eight remain, the partials added as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)), then the tail in
 * order. The per-channel sums of the measurement. oq_bc_sum_simd 1 (default) takes the CPU's best
 * vector loop (AVX-512, else AVX2), 2 at most AVX2, 0 the plain loop (the same additions lane by
 * lane; tests compare them).
 */
double oq_bc_sum_f32(const float *p, size_t n);
extern int oq_bc_sum_simd;

#endif
