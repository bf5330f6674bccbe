/*
 * bench_model.h - the model header the synthetic benchmark models share
 * (header only: each generator is one program).
 */
#ifndef OQ_BENCH_MODEL_H
#define OQ_BENCH_MODEL_H

#include <stdlib.h>

#include "src/ir/ir.h"

/* IR 8, ai.onnx opset 13, producer `producer`, an empty main graph. OQ_ENOMEM on failure. */
static inline int bench_model_init(oq_model *m, const char *producer)
{
	m->ir_version = 8;
	m->producer_name = oq_strdup(producer);
	m->producer_version = oq_strdup(oq_version());
	m->opsets = calloc(1, sizeof *m->opsets);
	if (!m->producer_name || !m->producer_version || !m->opsets)
		return OQ_ENOMEM;
	m->n_opsets = 1;
	if (!(m->opsets[0].domain = oq_strdup("")))
		return OQ_ENOMEM;
	m->opsets[0].version = 13;
	return (m->graph = oq_graph_new(m, NULL)) ? OQ_OK : OQ_ENOMEM;
}

#endif
