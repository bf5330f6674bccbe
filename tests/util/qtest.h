/*
 * qtest.h - helpers shared by the quantization tests: hand-set calibrated
 * ranges in the sorted form the quantize pass reads, and a model under test
 * with its ranges and options (Criterion asserts on failure).
 */
#ifndef OQ_QTEST_H
#define OQ_QTEST_H

#include <stddef.h>

#include "gen_model.h"
#include "passes/pass.h"
#include "src/quant/ranges.h"

/* One hand-set calibrated range. */
typedef struct rng {
	const char *name;
	float min, max;
} rng;

/* A sorted copy of r[0..n) (free with oq_ranges_free); v is NULL on allocation failure. */
oq_ranges mk_ranges(const rng *r, size_t n);

/* A model under test: the generator (its buffer backs the model), the model, its ranges. */
typedef struct fx {
	gen_model *gm; /* set by the test before fx_load */
	oq_model *m;
	oq_ranges r;
	oq_opts o; /* defaults, with o.ranges = &r and o.prefer = the load's */
} fx;

/* Loads f->gm into f->m with ranges r[0..nr) and default options under --prefer prefer. */
void fx_load_prefer(fx *f, const rng *r, size_t nr, int prefer);
void fx_free(fx *f);

/* The body graph attribute `attr` ("then_branch", "body", ...) of the live node named `node` of g
 * (Criterion fails when either is missing). */
oq_graph *qt_body(const oq_graph *g, const char *node, const char *attr);

#endif
