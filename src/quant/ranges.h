/*
 * ranges.h - calibrated value ranges, the hand-off from calibration
 * (calib/) to the quantize pass (passes/).
 */
#ifndef OQ_RANGES_H
#define OQ_RANGES_H

#include <stddef.h>
#include <stdint.h>

/* The observed range of one tensor (a main-graph value, by name). */
typedef struct oq_range {
	char *name;
	float min, max;      /* observed over all samples, NaN/Inf ignored; min > max when nothing was seen */
	uint64_t n_nan;      /* NaN/Inf elements skipped */
} oq_range;

/* Ranges of a calibration run, sorted by name (strcmp). */
typedef struct oq_ranges {
	oq_range *v;
	size_t n;
} oq_ranges;

/* Range of a value name, or NULL. */
const oq_range *oq_ranges_find(const oq_ranges *r, const char *name);
void oq_ranges_free(oq_ranges *r);

#endif
