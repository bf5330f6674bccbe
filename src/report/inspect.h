/*
 * inspect.h - the `onnxq inspect` report: producer, IR and opsets, inputs
 * and outputs with dtypes and shapes, op census, parameters and bytes by
 * dtype, and the Q/DQ nodes already present with their granularity.
 */
#ifndef OQ_INSPECT_H
#define OQ_INSPECT_H

#include <stdio.h>

#include "src/ir/ir.h"

/* Writes the report as text (json = 0) or one JSON object (json = 1). */
int oq_inspect_print(const oq_model *m, FILE *f, int json) OQ_WUR;

#endif
