/*
 * target.h - `quantize --target-sqnr DB`: automatic precision fallback.
 *
 * Starting from the model the options describe, points are raised one
 * ladder step at a time (8-bit -> 16-bit -> float, as per-tensor
 * overrides: {"dtype": "int16"/"uint16"} then {"skip": true}) until every
 * output's fold SQNR (fidelity.h) reaches DB or nothing is left to raise.
 * With --weight-rounding the 8-bit weights are the learned ones (learned once,
 * before calibration); a weight raised to 16 bits rounds to nearest (the
 * learned spec no longer matches: oq_wlearned_apply).
 *
 * Order: `onnxq analyze` (analyze.h) measures each point's noise power on
 * the outputs when it alone is quantized. Each round takes the output
 * furthest below the target and raises the 8-bit points with the most of
 * that noise per MAC they keep in 8 bits (MACs + 0.1 % of the model's, so
 * MAC-free points are cheap, not free), until the share of the measured
 * noise they carry (their noise alone over the sum of the candidates')
 * would leave the output 1.5 dB above the target (at least one step);
 * once no 8-bit point is left, 16-bit points go to float by their noise. Then the folds are measured again. The best round
 * (highest worst-output fold SQNR; ties: the earlier) is the result, so a
 * model is always written.
 *
 * Give-back: a round raises by estimate, with a margin, so once the target
 * is reached some raised points may not be needed. The 16-bit points go
 * back to 8 bits in groups, least noise per MAC first (a point's noise
 * alone as a share of an output's power, the largest over the outputs, per
 * MAC it returns to 8 bits): a group takes the points whose noise alone
 * fits in half of every output's room (its noise power left below the
 * target's); it is measured and kept if every output stays at or above the
 * target; a refused group is tried again with its first half, a refused
 * single point stays raised. At most 6 measurements (LOWER_TRIES in
 * target.c). The result is then the last kept group's. Deterministic: every figure is a fold
 * measurement or an analysis, both thread-independent.
 */
#ifndef OQ_TARGET_H
#define OQ_TARGET_H

#include <stdio.h>

#include "passes/pass.h"
#include "src/pipeline/analyze.h"

/* Makes v[0..n) (the raised points) the overrides of the next quantized copies. */
typedef int (*oq_target_set_fn)(void *ctx, const oq_override *v, size_t n, oq_diag *d);

/* The result of a search. */
typedef struct oq_target {
	double db;           /* the target */
	int reached;         /* every output at or above it */
	size_t rounds;       /* fold measurements of the raising phase, after the first */
	size_t tries_back;   /* fold measurements of the give-back phase */
	size_t given_back;   /* 16-bit points it returned to 8 bits */
	size_t n_out;
	char **out;          /* output names */
	double *sqnr;        /* per output: the best round's fold SQNR */
	double *sqnr0;       /* per output: before any raise */
	oq_override *ov;     /* the best round's raised points (name, dtype or skip) */
	int *kind;           /* per entry of ov: 1 weight, 0 activation */
	size_t n_ov;
	double macs, macs8;  /* MACs of the model, and those whose inputs all stay 8-bit */
	double seconds;
} oq_target;

/*
 * Searches as above: fm the float model after the rewrites, co / folds / all as for
 * oq_analyze, act16 / w16 the 16-bit dtypes of activations and weights, make the quantized
 * copy with the overrides set last by set (which the search calls before every
 * measurement and leaves at the best round's). Progress lines go to log (NULL: none).
 */
int oq_target_search(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_ranges *all,
		     double db, int act16, int w16, oq_fid_make_fn make, oq_target_set_fn set, void *ctx,
		     FILE *log, oq_target *out, oq_diag *d) OQ_WUR;
void oq_target_free(oq_target *t);

/* The --report FILE.json of a search. */
int oq_target_json(const oq_target *t, const char *path, oq_diag *d) OQ_WUR;

#endif
