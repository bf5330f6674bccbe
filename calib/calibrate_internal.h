/*
 * calibrate_internal.h - the observer state calibrate.c fills and select.c
 * turns into ranges. Private to calib/calibrate.c and calib/select.c.
 */
#ifndef OQ_CALIBRATE_INTERNAL_H
#define OQ_CALIBRATE_INTERNAL_H

#include "calib/calibrate.h"
#include "calib/exec/threadpool.h"
#include "calib/histogram.h"

/* Running state of one observed value (a slot: see calib.n). */
typedef struct tstat {
	double lo, hi;  /* finite extremes so far; lo > hi until a finite element is seen */
	uint64_t n_bad; /* NaN/Inf elements skipped */
	int seen;       /* observed at least once with a float dtype */
} tstat;

/* Moving-average range of one value (--method ema). */
typedef struct ema {
	double lo, hi; /* current average */
	int init;      /* a sample with finite values has been seen */
} ema;

/* One If/Loop/Scan body's numbering: its value index -> calibration slot. */
typedef struct vsub {
	const oq_graph *g; /* the body */
	size_t *map;       /* g->n_values entries; SIZE_MAX: not observed here (an outer capture,
			    * observed as the enclosing graph's value) */
} vsub;

/* Observer context. */
typedef struct calib {
	const oq_graph *g; /* main graph */
	size_t n;          /* slots: the main graph's values by oq_value.index, then the body values
			    * (bodies in pre-order, values in index order); a body value named like
			    * an earlier slot's value shares that slot (names are the ranges' keys) */
	const oq_value **vals; /* n entries: each slot's value (a shared slot: its first holder) */
	vsub *subs;        /* every body at any depth, sorted by graph address (lookup only) */
	size_t n_subs;
	tstat *st;         /* n entries, by slot */
	int method;        /* OQ_CALIB_* */
	const oq_calib_tap *tap; /* oq_calib_opts.tap */
	void *tap_st;      /* the tap's stage of the sample being run, NULL: not fed */
	oq_observe_fn extra; /* oq_calib_opts.extra */
	void *extra_ctx;
	double ema_c;      /* EMA constant */
	ema *em;           /* n entries (ema only) */
	oq_hist *h;        /* n entries (histogram methods); bin NULL: no non-zero value yet */
	uint8_t *track;    /* n entries (histogram methods): 1 = h[i] is kept (filled, or
			    * read from a statistics file) */
	size_t nf;         /* folds (calib/folds.h; --method auto), 1: none */
	size_t fold;       /* the fold of the samples being observed */
	tstat *fst;        /* nf x n entries, fold f of slot i at f * n + i: what
			    * the observer fills; st itself when nf is 1, else st is their total
			    * (fold_totals) */
	oq_hist *fh;       /* the same for h (histogram methods; h itself when nf is 1) */
	unsigned skip;     /* oq_calib_opts.skip_qmark */
	const uint8_t *need; /* oq_calib_opts.need_only: hist_need (main-graph values marked 0 are not
			      * observed), else NULL */
	const oq_value *oom; /* the value whose histogram could not be allocated, or NULL */
	oq_pool *pool;     /* the executor's threads: large float32 tensors are scanned in parallel */
	oq_hist *ph;       /* oq_pool_threads(pool) private histograms of the parallel fill (unallocated
			    * between tensors) */
} calib;

/*
 * One range per observed value of c (method c->method, grids from o) into out, sorted by name;
 * the ranges do not depend on c's pool or its thread count. On failure out is freed and d says
 * which tensor.
 */
int oq_calib_collect(const calib *c, const oq_calib_opts *o, oq_ranges *out, oq_diag *d) OQ_WUR;

#endif
