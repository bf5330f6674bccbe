/*
 * qtest.h - helpers shared by the quantization tests: hand-set calibrated
 * ranges in the sorted form the quantize pass reads.
 */
#ifndef OQ_QTEST_H
#define OQ_QTEST_H

#include <stddef.h>

#include "src/quant/ranges.h"

/* One hand-set calibrated range. */
typedef struct rng {
	const char *name;
	float min, max;
} rng;

/* A sorted copy of r[0..n) (free with oq_ranges_free); v is NULL on allocation failure. */
oq_ranges mk_ranges(const rng *r, size_t n);

#endif
