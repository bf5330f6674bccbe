/*
 * calibrate.h - min/max calibration: runs sample inputs through the
 * executor and records the range of every float tensor of the main graph
 * as it is produced (an observer; nothing is buffered).
 *
 * Sources: a sample folder (run.h layouts) or "random:N[:SEED]" (N random
 * samples from the declared input types, only when asked: a warning says it
 * is not representative). Ranges are min/max over all elements of all
 * samples, NaN and Inf skipped and counted, so they do not depend on sample
 * order or thread count.
 */
#ifndef OQ_CALIBRATE_H
#define OQ_CALIBRATE_H

#include <stdio.h>

#include "exec.h"
#include "ranges.h"

typedef struct oq_calib_opts {
	const char *source;  /* --calib DIR or "random:N[:SEED]" */
	size_t limit;        /* --calib-limit N: first N samples in lexical order; 0 = all */
	int threads;         /* executor threads; <= 0: all cores */
	FILE *progress;      /* progress / summary / warnings (stderr), or NULL for quiet */
} oq_calib_opts;

/*
 * Observes graph inputs and every node output of the main graph whose
 * dtype is float32/float16/bfloat16/double; *out receives one range per
 * observed tensor, sorted by name. An empty folder is OQ_EINVAL; bad
 * samples are reported before anything runs (oq_samples_check).
 */
int oq_calibrate_minmax(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d) OQ_WUR;

#endif
